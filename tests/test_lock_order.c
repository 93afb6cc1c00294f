/* The lock order (src/support/lock.h) is checked in debug builds: taking a lock
 * whose rank is not above every lock the thread holds aborts with both
 * locks' names, in a child process here; the order itself is accepted.
 * Links the static library, whose internal lock functions it calls. */
#include "check.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lock.h"

/* Runs fn in a child with stderr to a pipe; returns the child's wait status
 * and its stderr in buf. */
static int run_child(void (*fn)(void), char *buf, size_t cap) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        fn();
        _exit(0);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t got;
    while (n + 1 < cap && (got = read(fds[0], buf + n, cap - 1 - n)) > 0) n += (size_t)got;
    buf[n] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

static cpool__mutex pool_lock, streams_lock, queue_lock;

static void in_order(void) {
    cpool__mutex_lock(&pool_lock);
    cpool__mutex_lock(&streams_lock);
    cpool__rank_acquire(CPOOL__RANK_HOST_QUEUE);
    cpool__rank_release(CPOOL__RANK_HOST_QUEUE);
    cpool__mutex_unlock(&streams_lock);
    cpool__mutex_unlock(&pool_lock);
}

static void inverted(void) {
    cpool__mutex_lock(&streams_lock);
    cpool__mutex_lock(&pool_lock); /* the pool lock ranks below the streams lock */
}

static void same_rank_twice(void) {
    cpool__mutex_lock(&queue_lock);
    cpool__rank_acquire(CPOOL__RANK_HOST_QUEUE); /* a second queue of that rank */
}

static void lock_order_is_checked(cpool_device *dev) {
    (void)dev;
    char err[512];
    int status;
    cpool__mutex_init(&pool_lock, CPOOL__RANK_POOL);
    cpool__mutex_init(&streams_lock, CPOOL__RANK_STREAMS);
    cpool__mutex_init(&queue_lock, CPOOL__RANK_HOST_QUEUE);

    status = run_child(in_order, err, sizeof err);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_STR_EQ(err, "");

    status = run_child(inverted, err, sizeof err);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    CHECK(strstr(err, "lock order violated: taking the pool lock while holding the device streams lock") != NULL);

    status = run_child(same_rank_twice, err, sizeof err);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    CHECK(strstr(err, "taking the host stream queue lock while holding the host stream queue lock") != NULL);
}

static const check_case cases[] = {
    CHECK_CASE(lock_order_is_checked),
};
CHECK_MAIN(cases, CHECK_ON_HOST)
