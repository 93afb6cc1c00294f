/*
 * The thread's kind (see thread.h): one thread-local flag.
 */
#include "status.h"
#include "thread.h"

static _Thread_local bool stream_thread;

bool cpool__on_stream_thread(void) { return stream_thread; }
void cpool__set_stream_thread(bool on) { stream_thread = on; }

cpool_status cpool__refuse_wait_on_stream_thread(const char *fn) {
    if (!stream_thread) return CPOOL_OK;
    return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT,
                       "%s: called inside a stream callback, where waiting for stream work could wait forever", fn);
}
