/*
 * Streams: a backend stream plus what the library tracks about it (its
 * device registration and unique id; the capture begun on it is a record
 * in its storage, which capture_record.c owns), and the work enqueued on
 * one outside graphs: copies, fills, host functions.
 */
#include <stddef.h>
#include <stdlib.h>

#include "internal.h"

static cpool__slab stream_slab = CPOOL__SLAB_INIT(cpool_stream, CPOOL__HANDLE_STREAM);

static cpool_status stream_make(cpool_device *handle, void *native, bool wrap, cpool_stream **out) {
    const char *fn = wrap ? "cpool_stream_wrap" : "cpool_stream_create";
    cpool_device *dev;
    CPOOL__RESOLVE_OPEN_DEVICE(dev, handle, fn);
    if (!out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    cpool_stream *s = cpool__slab_take(&stream_slab);
    if (!s) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "%s: out of host memory creating a stream", fn);
    cpool_status st = dev->be->stream_create(dev->impl, native, wrap, &s->impl);
    if (st != CPOOL_OK) {
        cpool__handle_kill(s);
        cpool__slab_give(&stream_slab, s);
        return cpool__fail_in(fn, st);
    }
    s->dev = cpool__device_retain(dev);
    s->owned = !wrap;
    cpool__order_add(&dev->order, &s->order, s->impl);
    *out = cpool__handle_of(s);
    return CPOOL_OK;
}

cpool_status cpool_stream_create(cpool_device *dev, cpool_stream **out) { return stream_make(dev, NULL, false, out); }

cpool_status cpool_stream_wrap(cpool_device *dev, void *cuda_stream, cpool_stream **out) {
    return stream_make(dev, cuda_stream, true, out);
}

void *cpool_stream_native(const cpool_stream *handle) {
    const cpool_stream *s;
    CPOOL__RESOLVE_OR_NULL(s, handle, CPOOL__HANDLE_STREAM, "cpool_stream_native", "stream");
    if (!s) return NULL;
    return s->dev->be->stream_native(s->impl);
}

cpool_status cpool_stream_synchronize(cpool_stream *handle) {
    cpool_stream *s;
    CPOOL__RESOLVE(s, handle, CPOOL__HANDLE_STREAM, "cpool_stream_synchronize", "stream");
    cpool_status st = cpool__refuse_wait_on_stream_thread("cpool_stream_synchronize");
    if (st == CPOOL_OK) st = s->dev->be->stream_synchronize(s->impl);
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_stream_synchronize", st);
}

/* The order keeps the stream listed until its work has finished, so that a
 * teardown or a fence on another thread meanwhile still waits for that work:
 * a stream that is gone has no work left. */
static void stream_teardown(cpool_stream *s) {
    cpool__capture_discard(s);
    cpool__order_remove(&s->dev->order, &s->order);
    s->dev->be->stream_destroy(s->impl);
    cpool_device *dev = s->dev;
    cpool__slab_give(&stream_slab, s);
    cpool__device_release(dev);
}

static void run_deferred_destroy(cpool__deferred *task) {
    stream_teardown((cpool_stream *)((char *)task - offsetof(cpool_stream, deferred_destroy)));
}

void cpool_stream_destroy(cpool_stream *handle) {
    /* Dead from now on, also while its work drains; of two racing destroys
     * one ends it, the other finds it dead. */
    cpool_stream *s = cpool__handle_end(handle, CPOOL__HANDLE_STREAM);
    if (!s) {
        if (handle) cpool__handle_fail(handle, CPOOL__HANDLE_STREAM, "cpool_stream_destroy", "stream");
        return;
    }
    if (cpool__on_stream_thread()) {
        /* Inside a callback, perhaps of this very stream: waiting for its
         * work here would wait for itself. */
        s->deferred_destroy.run = run_deferred_destroy;
        cpool__defer(&s->deferred_destroy);
    } else {
        stream_teardown(s);
    }
}

cpool_status cpool_launch_host(cpool_stream *handle, void (*fn)(void *arg), void *arg) {
    cpool_stream *s;
    CPOOL__RESOLVE(s, handle, CPOOL__HANDLE_STREAM, "cpool_launch_host", "stream");
    if (!fn) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_launch_host: fn is NULL");
    cpool__capture *cap = cpool__capture_lock(s);
    if (cap) {
        cpool__capture_note_host_work(cap);
        cpool__capture_unlock(cap);
    }
    cpool_status st = s->dev->be->launch_host(s->impl, fn, arg);
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_launch_host", st);
}

cpool_status cpool_memcpy_async(cpool_stream *handle, void *dst, const void *src, size_t bytes) {
    cpool_stream *s;
    CPOOL__RESOLVE(s, handle, CPOOL__HANDLE_STREAM, "cpool_memcpy_async", "stream");
    if (bytes == 0) return CPOOL_OK;
    if (!dst || !src) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_memcpy_async: NULL pointer");
    if (cpool__pool_memory_enter(s->dev, dst, src, bytes) != CPOOL_OK)
        return cpool__fail(CPOOL_ERR_SUSPENDED, "cpool_memcpy_async: the memory is a suspended pool's");
    cpool_status st = s->dev->be->memcpy_async(s->impl, dst, src, bytes);
    cpool__pool_memory_exit();
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_memcpy_async", st);
}

cpool_status cpool_memset_async(cpool_stream *handle, void *dst, int value, size_t bytes) {
    cpool_stream *s;
    CPOOL__RESOLVE(s, handle, CPOOL__HANDLE_STREAM, "cpool_memset_async", "stream");
    if (bytes == 0) return CPOOL_OK;
    if (!dst) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_memset_async: NULL pointer");
    if (cpool__pool_memory_enter(s->dev, dst, NULL, bytes) != CPOOL_OK)
        return cpool__fail(CPOOL_ERR_SUSPENDED, "cpool_memset_async: the memory is a suspended pool's");
    cpool_status st = s->dev->be->memset_async(s->impl, dst, value, bytes);
    cpool__pool_memory_exit();
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_memset_async", st);
}
