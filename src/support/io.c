/*
 * Writes that cannot end the process by SIGPIPE (io.h).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>

#include "io.h"

static sigset_t sigpipe_only(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    return set;
}

static bool sigpipe_pending(void) {
    sigset_t pending;
    sigemptyset(&pending);
    return sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
}

int cpool__write_all(int fd, const void *data, size_t len) {
    sigset_t pipe_only = sigpipe_only(), old_mask;
    pthread_sigmask(SIG_BLOCK, &pipe_only, &old_mask);
    /* Only a SIGPIPE this write raises is ours to take back. */
    bool was_pending = sigpipe_pending();
    int err = 0;
    for (size_t done = 0; done < len && !err;) {
        ssize_t n = write(fd, (const char *)data + done, len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            err = n < 0 ? errno : EIO;
        else
            done += (size_t)n;
    }
    if (err == EPIPE && !was_pending) {
        /* The write raised it for this thread, where it waits while blocked. */
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_only, NULL, &zero) < 0 && errno == EINTR) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    return err;
}
