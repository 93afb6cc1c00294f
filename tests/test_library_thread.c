/* Teardown handed to the library's thread runs also in a process that never
 * made a pool: the thread starts with the first device. Its own binary, so
 * that no earlier case has made a pool. */
#include "check.h"
#include "helpers.h"

typedef struct destroy_in_callback {
    cpool_stream *s;
    int done;
} destroy_in_callback;
static void cb_destroy_stream(void *arg) {
    destroy_in_callback *d = (destroy_in_callback *)arg;
    cpool_stream_destroy(d->s); /* handed to the library's thread */
    astore(&d->done, 1);
}

static void stream_destroyed_in_callback_without_pools(cpool_device *dev) {
    static destroy_in_callback d;
    cpool_device *again = NULL, *other = NULL;
    /* A second reference of the caller's: closing both must close the
     * device, once the stream (which holds it) is gone. */
    REQUIRE_OK(cpool_device_open(CPOOL_BACKEND_HOST, 0, &again));
    REQUIRE_OK(cpool_stream_create(again, &d.s));
    astore(&d.done, 0);
    CHECK_OK(cpool_launch_host(d.s, cb_destroy_stream, &d));
    CHECK(wait_for_int(&d.done, 1, WAIT_TIMEOUT_MS));
    cpool_wait_deferred(); /* the destroy ran */
    CHECK_STATUS(cpool_stream_synchronize(d.s), CPOOL_ERR_INVALID_ARGUMENT);
    cpool_device_close(again);
    cpool_device_close(dev); /* the runner's: the runner's own close is then refused, harmlessly */
    /* Nothing holds the device now: it was closed, and a new open makes a
     * new device with a handle of its own. */
    REQUIRE_OK(cpool_device_open(CPOOL_BACKEND_HOST, 0, &other));
    CHECK(other != again);
    cpool_device_close(other);
}

static const check_case cases[] = {
    CHECK_CASE(stream_destroyed_in_callback_without_pools),
};
CHECK_MAIN(cases, CHECK_ON_HOST)
