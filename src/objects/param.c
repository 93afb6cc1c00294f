/*
 * Parameter blocks: device memory at a fixed address for a pool's whole
 * life, written in stream order, so that a captured graph reads a new value
 * on every replay without being captured again.
 */
#include <stdlib.h>

#include "internal.h"

cpool_status cpool_param_create(cpool_pool *handle, size_t bytes, cpool_param **out) {
    cpool_pool *pool;
    CPOOL__RESOLVE(pool, handle, "cpool_param_create", "pool");
    if (!out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_param_create: NULL argument");
    if (bytes == 0) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_param_create: size 0");
    cpool_param *p = cpool__calloc(1, sizeof *p);
    if (!p) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "cpool_param_create: out of host memory");
    p->pool = pool;
    p->bytes = bytes;
    cpool_status st = cpool__pool_add_param(pool, p);
    if (st != CPOOL_OK) {
        free(p);
        return st;
    }
    *out = p;
    return CPOOL_OK;
}

void *cpool_param_device_ptr(const cpool_param *p) { return p ? p->ptr : NULL; }

cpool_status cpool_param_set(cpool_param *p, const void *value, size_t bytes, cpool_stream *handle) {
    cpool_stream *s;
    CPOOL__RESOLVE(s, handle, "cpool_param_set", "stream");
    if (!p || !value) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_param_set: NULL argument");
    if (bytes == 0 || bytes > p->bytes)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_param_set: %zu bytes for a %zu-byte block", bytes, p->bytes);
    if (s->dev != cpool__pool_device(p->pool))
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_param_set: the stream is on another device");
    if (cpool__stream_captures(s))
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_param_set: the stream is capturing");
    cpool_status st = s->dev->be->upload_async(s->impl, p->ptr, value, bytes);
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_param_set", st);
}
