/*
 * What kind of thread this is, for the rule that a thread running stream
 * work (a host-backend worker, a CUDA host callback) must never wait for
 * stream work: the backends mark such threads, the layers above ask.
 */
#ifndef CPOOL_THREAD_H
#define CPOOL_THREAD_H

#include <stdbool.h>

#include "capturepool.h"

/* True on threads that run stream work. */
bool cpool__on_stream_thread(void);
void cpool__set_stream_thread(bool on);
/* CPOOL_ERR_INVALID_ARGUMENT with the reason when the caller runs stream
 * work (a call that would wait for stream work, inside a callback), else
 * CPOOL_OK. */
cpool_status cpool__refuse_wait_on_stream_thread(const char *fn);

#endif /* CPOOL_THREAD_H */
