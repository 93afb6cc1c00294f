/* The debug checks come in two grades (src/support/debug.h): in builds with
 * CPOOL_DEBUG_CHECKS the cheap ones always run, the full walk of a pool's
 * memory after every operation only when CPOOL_DEBUG_FULL asks for it. Each
 * setting runs in a child process of its own, which reads the variable
 * fresh (the library reads it once); the parent never calls the library,
 * so the fork copies no thread of it. Links the static library, whose
 * count of full walks it reads. */
#include "check.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "debug.h"

/* Allocations and frees through the front cache and through the pool's
 * lock, and a trim. Exits 0 when no full walk ran, 1 when some did, 2 when
 * a call failed. */
static void some_operations(void) {
    cpool_device *dev = NULL;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    if (cpool_device_open(CPOOL_BACKEND_HOST, 0, &dev) != CPOOL_OK || cpool_stream_create(dev, &s) != CPOOL_OK ||
        cpool_pool_create(dev, NULL, &pool) != CPOOL_OK)
        _exit(2);
    for (int round = 0; round < 3; round++) {
        void *small = NULL, *large = NULL;
        if (cpool_alloc(pool, 4096, s, &small) != CPOOL_OK || cpool_alloc(pool, 8 << 20, s, &large) != CPOOL_OK)
            _exit(2);
        if (cpool_free(pool, small, s) != CPOOL_OK || cpool_free(pool, large, s) != CPOOL_OK) _exit(2);
    }
    if (cpool_pool_trim(pool) != CPOOL_OK) _exit(2);
    uint64_t walks = cpool__debug_full_walks();
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
    cpool_device_close(dev);
    _exit(walks > 0 ? 1 : 0);
}

/* The exit status of some_operations with the variable set to `value`
 * (NULL: unset). */
static int run_with(const char *value) {
    pid_t pid = fork();
    if (pid == 0) {
        if (value)
            setenv(CPOOL__DEBUG_FULL_ENV, value, 1);
        else
            unsetenv(CPOOL__DEBUG_FULL_ENV);
        some_operations();
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
}

int main(void) {
    CHECK_EQ(run_with("1"), 1);    /* asked: the walks run */
    CHECK_EQ(run_with("yes"), 1);  /* anything but "" or "0" asks */
    CHECK_EQ(run_with("0"), 0);    /* not asked: the cheap checks only */
    CHECK_EQ(run_with(""), 0);
    CHECK_EQ(run_with(NULL), 0);
    if (check_case_failures_) return 1;
    printf("debug_checks: the full walks run when asked, and only then\n");
    return 0;
}
