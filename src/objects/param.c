/*
 * Parameter blocks: device memory at a fixed address for a pool's whole
 * life, written in stream order, so that a captured graph reads a new value
 * on every replay without being captured again.
 */
#include "internal.h"

cpool_status cpool_param_create(cpool_pool *handle, size_t bytes, cpool_param **out) {
    cpool_pool *pool;
    CPOOL__RESOLVE(pool, handle, CPOOL__HANDLE_POOL, "cpool_param_create", "pool");
    if (!out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_param_create: NULL argument");
    if (bytes == 0) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_param_create: size 0");
    cpool_param *p;
    cpool_status st = cpool__pool_add_param(pool, bytes, &p);
    if (st == CPOOL_OK) *out = cpool__handle_of(p);
    return st;
}

void *cpool_param_device_ptr(const cpool_param *handle) {
    const cpool_param *p;
    CPOOL__RESOLVE_OR_NULL(p, handle, CPOOL__HANDLE_PARAM, "cpool_param_device_ptr", "parameter block");
    return p ? p->ptr : NULL;
}

cpool_status cpool_param_set(cpool_param *param_handle, const void *value, size_t bytes, cpool_stream *stream_handle) {
    cpool_param *p;
    cpool_stream *s;
    CPOOL__RESOLVE(p, param_handle, CPOOL__HANDLE_PARAM, "cpool_param_set", "parameter block");
    CPOOL__RESOLVE(s, stream_handle, CPOOL__HANDLE_STREAM, "cpool_param_set", "stream");
    if (!value) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_param_set: NULL argument");
    if (bytes == 0 || bytes > p->bytes)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_param_set: %zu bytes for a %zu-byte block", bytes, p->bytes);
    if (s->dev != cpool__pool_device(p->pool))
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_param_set: the stream is on another device");
    if (cpool__stream_captures(s))
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_param_set: the stream is capturing");
    /* The block's memory is given back while its pool is suspended. */
    if (cpool__pool_memory_enter(s->dev, p->ptr, NULL, bytes) != CPOOL_OK)
        return cpool__fail(CPOOL_ERR_SUSPENDED, "cpool_param_set: its pool is suspended (cpool_pool_resume gives it "
                                                "memory again)");
    cpool_status st = s->dev->be->upload_async(s->impl, p->ptr, value, bytes);
    cpool__pool_memory_exit();
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_param_set", st);
}
