/*
 * The capture record: what a capture begun with cpool_capture_begin keeps
 * while it runs (internal.h, cpool__capture): the pools it holds, each with
 * the arena of graph memory it allocates in, the streams forked into it, a
 * graphed call's plan of outputs, and what a graphed call's eager run
 * allocated. Only data: the references it stands for are taken and dropped
 * by pool.c.
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
    cap->plan = NULL;
    cap->plan_streams = NULL;
    cap->plan_bits = cap->alloc_index = 0;
    cap->predicted = false;
    cap->plan_sizes = NULL;
    cap->log = (cpool__learn){0};
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

/* Where stream_id's next allocation is looked up in the plan. */
static size_t *plan_place(cpool__capture *cap, uint64_t stream_id) {
    for (size_t i = 0; i < cap->fork_count; i++)
        if (cap->forks[i].stream_id == stream_id) return &cap->forks[i].plan_next;
    return &cap->alloc_index; /* the origin */
}

bool cpool__capture_next_is_output(const cpool__capture *cap, uint64_t stream_id, size_t *entry) {
    *entry = SIZE_MAX;
    if (!cap->plan) return false;
    size_t i = *plan_place((cpool__capture *)cap, stream_id);
    while (i < cap->plan_bits && cap->plan_streams[i] != stream_id) i++;
    if (i == cap->plan_bits) return false; /* the eager run did not allocate it: scratch */
    *entry = i;
    return cap->plan[i / 64] >> (i % 64) & 1;
}

void cpool__capture_plan_taken(cpool__capture *cap, uint64_t stream_id, size_t entry) {
    if (entry != SIZE_MAX) *plan_place(cap, stream_id) = entry + 1;
}

void cpool__capture_forget(cpool__capture *cap) {
    if (cap->pools != cap->inline_pools) free(cap->pools);
    if (cap->forks != cap->inline_forks) free(cap->forks);
    if (cap->predicted) {
        free((void *)cap->plan);
        free((void *)cap->plan_streams);
        free((void *)cap->plan_sizes);
    }
    cpool__learn_forget(&cap->log);
}

cpool_status cpool__capture_reserve_fork(cpool__capture *cap) {
    return reserve_inline((void **)&cap->forks, cap->inline_forks, cap->fork_count, &cap->fork_cap, sizeof *cap->forks,
                          "forking a stream into a capture");
}

void cpool__capture_add_fork(cpool__capture *cap, struct cpool_stream *s, uint64_t stream_id) {
    cap->forks[cap->fork_count++] = (cpool__fork){s, stream_id, 0};
    cap->branching = true;
}

_Thread_local cpool__learn *cpool__learning;
atomic_int cpool__learners;

void cpool__learn_alloc(cpool__learn *l, void *ptr, uint64_t stream_id, size_t bytes) {
    if (l->failed) return;
    if (l->count == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        void **ptrs = cpool__realloc(l->ptrs, cap * sizeof *ptrs);
        if (ptrs) l->ptrs = ptrs;
        uint64_t *streams = ptrs ? cpool__realloc(l->streams, cap * sizeof *streams) : NULL;
        if (streams) l->streams = streams;
        size_t *sizes = streams ? cpool__realloc(l->sizes, cap * sizeof *sizes) : NULL;
        if (sizes) l->sizes = sizes;
        if (!ptrs || !streams || !sizes) {
            l->failed = true;
            return;
        }
        l->cap = cap;
    }
    l->streams[l->count] = stream_id;
    l->sizes[l->count] = bytes;
    l->ptrs[l->count++] = ptr;
}

void cpool__learn_forget(cpool__learn *l) {
    free(l->ptrs);
    free(l->streams);
    free(l->sizes);
    *l = (cpool__learn){0};
}

void cpool__learn_free(cpool__learn *l, void *ptr) {
    for (size_t i = l->count; i-- > 0;)
        if (l->ptrs[i] == ptr) {
            l->ptrs[i] = NULL;
            return;
        }
}

