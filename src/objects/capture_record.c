/*
 * The capture record: what a capture begun with cpool_capture_begin keeps
 * while it runs (internal.h, cpool__capture): the pools it holds, each with
 * the arena of graph memory it allocates in, the streams forked into it and
 * its branches, a plan of outputs, and what it allocated. This file alone
 * writes a record, and owns the locks that guard a published one (streams
 * forked into a capture use it from any thread). It calls no other file of
 * src/objects: the references a record stands for are taken by pool.c
 * (cpool__pool_hold_in_capture) and dropped by capture.c, which note them
 * here, and the output guesses (output_guesses.c) hand a record its plan
 * and read what it logged, deciding themselves what a guess packs.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- the locks of published records ---------------------------------------- */

/* One lock for the streams whose memory falls in each stripe. Never
 * destroyed: a thread that read a fork's capture just before its origin
 * was destroyed may still lock its stripe, then finds the record gone. A
 * thread holds at most one of them. */
enum { CAPTURE_LOCKS = 64 };
static cpool__mutex capture_locks[CAPTURE_LOCKS] = {
#define CAPTURE_LOCK_INIT8                                                                          \
    CPOOL__MUTEX_INIT(CPOOL__RANK_CAPTURE), CPOOL__MUTEX_INIT(CPOOL__RANK_CAPTURE),                 \
        CPOOL__MUTEX_INIT(CPOOL__RANK_CAPTURE), CPOOL__MUTEX_INIT(CPOOL__RANK_CAPTURE),             \
        CPOOL__MUTEX_INIT(CPOOL__RANK_CAPTURE), CPOOL__MUTEX_INIT(CPOOL__RANK_CAPTURE),             \
        CPOOL__MUTEX_INIT(CPOOL__RANK_CAPTURE), CPOOL__MUTEX_INIT(CPOOL__RANK_CAPTURE)
    CAPTURE_LOCK_INIT8, CAPTURE_LOCK_INIT8, CAPTURE_LOCK_INIT8, CAPTURE_LOCK_INIT8,
    CAPTURE_LOCK_INIT8, CAPTURE_LOCK_INIT8, CAPTURE_LOCK_INIT8, CAPTURE_LOCK_INIT8,
#undef CAPTURE_LOCK_INIT8
};

static cpool__mutex *stream_capture_lock(const cpool_stream *s) {
    return &capture_locks[((uintptr_t)s / sizeof(cpool_stream)) % CAPTURE_LOCKS];
}

/* The lock of a published record: its origin stream's. */
static cpool__mutex *capture_lock(cpool__capture *cap) {
    return stream_capture_lock((cpool_stream *)((char *)cap - offsetof(cpool_stream, capture_storage)));
}

cpool__capture *cpool__capture_lock(cpool_stream *s) {
    for (;;) {
        cpool__capture *cap = cpool__stream_capture(s);
        if (!cap) return NULL;
        cpool__mutex_lock(capture_lock(cap));
        if (cpool__stream_capture(s) == cap) return cap;
        cpool__mutex_unlock(capture_lock(cap)); /* it ended meanwhile: look again */
    }
}

void cpool__capture_unlock(cpool__capture *cap) { cpool__mutex_unlock(capture_lock(cap)); }

/* ---- a record's life on its streams ----------------------------------------- */

typedef struct capture_install {
    cpool_stream *s;
    cpool__capture *cap;
} capture_install;

/* Under the order's lock, once the backend capture began: the record moves
 * into the stream's storage, which no other capture uses now. */
static void *install_capture(void *arg) {
    capture_install *ci = arg;
    cpool__capture_move(&ci->s->capture_storage, ci->cap);
    return &ci->s->capture_storage;
}

cpool_status cpool__capture_publish(cpool_stream *s, cpool__capture *cap) {
    capture_install ci = {s, cap};
    return cpool__order_begin_capture(&s->dev->order, &s->order, cap->mode, install_capture, &ci);
}

cpool_status cpool__capture_attach_publish(cpool_stream *s, cpool__capture *cap) {
    cap->attached = true;
    capture_install ci = {s, cap};
    cpool_status st = cpool__order_attach_capture(&s->dev->order, &s->order, install_capture, &ci);
    if (st != CPOOL_OK) cap->attached = false;
    return st;
}

void cpool__capture_take(cpool_stream *s, cpool__capture *cap) {
    cpool__mutex_lock(stream_capture_lock(s));
    cpool__capture *rec = &s->capture_storage;
    for (size_t i = 0; i < rec->fork_count; i++)
        if (rec->forks[i].s) cpool__order_end_capture(&rec->forks[i].s->order);
    cpool__order_end_capture(&s->order);
    cpool__capture_move(cap, rec);
    cpool__mutex_unlock(stream_capture_lock(s));
}

/* Makes room to note one more fork. */
static cpool_status reserve_fork(cpool__capture *cap);

cpool_status cpool__capture_fork(cpool_stream *s, cpool__capture *cap, cpool__bevent *ev) {
    cpool_status st = reserve_fork(cap);
    if (st != CPOOL_OK) return st;
    st = cpool__order_join_capture(&s->dev->order, &s->order, cap, ev);
    if (st == CPOOL_OK) {
        cap->forks[cap->fork_count++] = (cpool__fork){s, cpool__stream_id(s), 0};
        cap->branching = true;
    }
    return st;
}

bool cpool__capture_leave(cpool_stream *s) {
    cpool__capture *rec = cpool__capture_lock(s);
    if (!rec) return false;
    bool fork = rec != &s->capture_storage;
    if (fork) {
        /* Its backend stream leaves the backend's capture as it is
         * destroyed; the capture cannot end well any more. */
        for (size_t i = 0; i < rec->fork_count; i++)
            if (rec->forks[i].s == s) rec->forks[i].s = NULL;
        rec->invalidated = true;
        cpool__order_end_capture(&s->order);
    }
    cpool__capture_unlock(rec);
    return !fork;
}

bool cpool__capture_holds(const cpool__capture *cap, const cpool_pool *pool) {
    for (size_t i = 0; i < cap->pool_count; i++)
        if (cap->pools[i].pool == pool) return true;
    return false;
}

/* ---- the record's data ------------------------------------------------------ */

/* An empty capture (the inline slots are left as they are: unused). */
static void capture_init(cpool__capture *cap, cpool_capture_mode mode) {
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
    cap->guesses_muted = false;
    cap->far_guesses = false;
    cap->log = (cpool__learn){0};
    cap->guesses = (cpool__learn){0};
    cap->far_misses = (cpool__learn){0};
    cap->invalidated = false;
    cap->attached = false;
}

void cpool__capture_move(cpool__capture *to, cpool__capture *from) {
    *to = *from;
    if (from->pools == from->inline_pools) to->pools = to->inline_pools;
    if (from->forks == from->inline_forks) to->forks = to->inline_forks;
    capture_init(from, from->mode);
}

/* Numbers captures, so that an event names the one it was recorded in. */
static _Atomic uint64_t last_capture_id;

void cpool__capture_init(cpool__capture *cap, cpool_capture_mode mode, uint64_t clear_clock,
                         const cpool__capture_plan *plan) {
    capture_init(cap, mode);
    cap->id = atomic_fetch_add(&last_capture_id, 1) + 1;
    cap->clear_clock = clear_clock;
    if (plan) {
        cap->plan = plan->outputs;
        cap->plan_streams = plan->streams;
        cap->plan_bits = plan->bits;
        cap->graph_id = plan->graph_id;
    }
}

void cpool__capture_predict(cpool__capture *cap, uint64_t *bits, uint64_t *streams, size_t *sizes, size_t n,
                            bool muted, bool far) {
    cap->plan = bits;
    cap->plan_streams = streams;
    cap->plan_sizes = sizes;
    cap->plan_bits = n;
    cap->predicted = true;
    cap->guesses_muted = muted;
    cap->far_guesses = far;
}

void cpool__capture_set_graph_id(cpool__capture *cap, uint64_t graph_id) { cap->graph_id = graph_id; }

void cpool__capture_note_host_work(cpool__capture *cap) { cap->host_work = true; }

void cpool__capture_note_event(cpool__capture *cap) { cap->branching = true; }

cpool__stream_key cpool__capture_branch_of(cpool__capture *cap, uint64_t stream_id) {
    if (!cap->branching) return CPOOL__KEY_ANY;
    cap->branch_tagged = true; /* a join or the end has blocks to retag */
    return cpool__key_branch(stream_id);
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

void cpool__capture_add_pool(cpool__capture *cap, cpool_pool *pool, uint64_t generation, bool bound) {
    cap->pools[cap->pool_count++] = (cpool__held_pool){pool, generation, NULL};
    if (bound) cap->has_bound_pool = true;
}

void cpool__capture_drop_last_pool(cpool__capture *cap) { cap->pool_count--; }

cpool__held_pool *cpool__capture_held(cpool__capture *cap, const cpool_pool *pool) {
    for (size_t i = 0; i < cap->pool_count; i++)
        if (cap->pools[i].pool == pool) return &cap->pools[i];
    return NULL;
}

void cpool__capture_set_arena(cpool__held_pool *held, struct cpool__arena *arena) { held->arena = arena; }

/* Where stream_id's next allocation is looked up in the plan. */
static size_t *plan_place(cpool__capture *cap, uint64_t stream_id) {
    for (size_t i = 0; i < cap->fork_count; i++)
        if (cap->forks[i].stream_id == stream_id) return &cap->forks[i].plan_next;
    return &cap->alloc_index; /* the origin */
}

bool cpool__capture_plan_lookup(const cpool__capture *cap, uint64_t stream_id, size_t *entry) {
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
    cpool__learn_forget(&cap->guesses);
    cpool__learn_forget(&cap->far_misses);
}

static cpool_status reserve_fork(cpool__capture *cap) {
    return reserve_inline((void **)&cap->forks, cap->inline_forks, cap->fork_count, &cap->fork_cap, sizeof *cap->forks,
                          "forking a stream into a capture");
}

void cpool__capture_log_alloc(cpool__capture *cap, void *ptr, uint64_t stream_id, size_t bytes, bool guessed,
                              bool far_miss) {
    cpool__learn_alloc(&cap->log, ptr, stream_id, bytes);
    if (guessed) cpool__learn_alloc(&cap->guesses, ptr, stream_id, bytes);
    if (far_miss) cpool__learn_alloc(&cap->far_misses, ptr, stream_id, bytes);
}

void cpool__capture_log_free(cpool__capture *cap, void *ptr) { cpool__learn_free(&cap->log, ptr); }

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

