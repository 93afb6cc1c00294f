/*
 * The capture record: what a capture begun with cpool_capture_begin keeps
 * while it runs (internal.h, cpool__capture): the pools it holds, each with
 * the arena of graph memory it allocates in, and the streams forked into
 * it. Only data: the references it stands for are taken and dropped by
 * pool.c.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

bool cpool__capture_holds(const cpool__capture *cap, const cpool_pool *pool) {
    for (size_t i = 0; i < cap->pool_count; i++)
        if (cap->pools[i].pool == pool) return true;
    return false;
}

/* An empty capture (the inline slots are left as they are: unused). */
void cpool__capture_init(cpool__capture *cap, cpool_capture_mode mode) {
    cap->mode = mode;
    cap->pools = cap->inline_pools;
    cap->pool_count = 0;
    cap->pool_cap = CPOOL__CAPTURE_INLINE_POOLS;
    cap->has_bound_pool = false;
    cap->host_work = false;
    cap->graph_id = 0;
    cap->id = 0;
    cap->clear_clock = 0;
    cap->forks = cap->inline_forks;
    cap->fork_count = 0;
    cap->fork_cap = CPOOL__CAPTURE_INLINE_FORKS;
    cap->branching = false;
    cap->branch_tagged = false;
    cap->invalidated = false;
}

void cpool__capture_move(cpool__capture *to, cpool__capture *from) {
    *to = *from;
    if (from->pools == from->inline_pools) to->pools = to->inline_pools;
    if (from->forks == from->inline_forks) to->forks = to->inline_forks;
    cpool__capture_init(from, from->mode);
}

/* Makes room for one more element in an array that starts in `inline_array`
 * (room for *cap) and moves to the heap, doubling, when it is full. */
static cpool_status reserve_inline(void **array, void *inline_array, size_t count, size_t *cap, size_t elem,
                                   const char *what) {
    if (count < *cap) return CPOOL_OK;
    bool on_heap = *array != inline_array;
    void *grown = cpool__realloc(on_heap ? *array : NULL, 2 * *cap * elem);
    if (!grown) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory %s", what);
    if (!on_heap) memcpy(grown, inline_array, count * elem);
    *array = grown;
    *cap *= 2;
    return CPOOL_OK;
}

cpool_status cpool__capture_reserve(cpool__capture *cap) {
    return reserve_inline((void **)&cap->pools, cap->inline_pools, cap->pool_count, &cap->pool_cap, sizeof *cap->pools,
                          "holding a pool for a capture");
}

void cpool__capture_add_pool(cpool__capture *cap, cpool_pool *pool, uint64_t generation) {
    cap->pools[cap->pool_count++] = (cpool__held_pool){pool, generation, NULL};
}

void cpool__capture_forget(cpool__capture *cap) {
    if (cap->pools != cap->inline_pools) free(cap->pools);
    if (cap->forks != cap->inline_forks) free(cap->forks);
}

cpool_status cpool__capture_reserve_fork(cpool__capture *cap) {
    return reserve_inline((void **)&cap->forks, cap->inline_forks, cap->fork_count, &cap->fork_cap, sizeof *cap->forks,
                          "forking a stream into a capture");
}

void cpool__capture_add_fork(cpool__capture *cap, struct cpool_stream *s, uint64_t stream_id) {
    cap->forks[cap->fork_count++] = (cpool__fork){s, stream_id};
    cap->branching = true;
}
