/*
 * A pool's memory as a whole (pool_private.h): the arenas its graphs hold,
 * its counters, trim, and suspend and resume.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "pool_private.h"
#include "struct_size.h"

/* ---- graphs' arenas --------------------------------------------------- */

cpool_status cpool__pool_seal_arena(cpool_pool *pool, cpool__arena **arena, uint64_t capture_id, uint64_t graph_id) {
    cpool__mutex_lock(&pool->mu);
    cpool_status st = CPOOL_OK;
    if (!*arena) st = cpool__graph_pages_open(&pool->pages, cpool__key_graph(capture_id), arena); /* it allocated nothing here */
    if (st == CPOOL_OK) st = cpool__arena_seal(&pool->pages, *arena, graph_id);
    if (st == CPOOL_OK && graph_id) pool->graph_count++;
    cpool__pool_note_peak(pool);
    CHECK_ALLOCATOR_FULL(pool);
    cpool__mutex_unlock(&pool->mu);
    return st;
}

void cpool__pool_arena_stats(cpool_pool *pool, const cpool__arena *arena, cpool__arena_stats *out) {
    cpool__mutex_lock(&pool->mu);
    cpool__arena_get_stats(arena, out);
    cpool__mutex_unlock(&pool->mu);
}

void cpool__pool_learn_outputs(cpool_pool *pool, const cpool__capture *cap) {
    cpool__guess_lesson lesson;
    if (!cpool__guesses_learn(cap, &lesson)) return;
    cpool__mutex_lock(&pool->mu);
    cpool__guesses_take(&pool->guesses, &lesson);
    cpool__mutex_unlock(&pool->mu);
}

void cpool__pool_predict_outputs(cpool_pool *pool, cpool__capture *cap) {
    cpool__mutex_lock(&pool->mu);
    cpool__guesses_hand(&pool->guesses, cap);
    cpool__mutex_unlock(&pool->mu);
}


/* ---- stats and trim ------------------------------------------------------ */

/* The counters, under mu, with the front's of the same moment. */
static void fill_stats(const cpool_pool *p, const cpool__front_counts *front, cpool_pool_stats *s);

/* As fill_stats, also while suspended: what the resume maps back. */
static void fill_resident_stats(const cpool_pool *p, const cpool__front_counts *front, cpool_pool_stats *s);

static void fill_stats(const cpool_pool *p, const cpool__front_counts *front, cpool_pool_stats *s) {
    fill_resident_stats(p, front, s);
    const cpool__residency *r = &p->residency;
    if (r->suspended) /* the records stay; the memory is off the device */
        s->reserved_bytes = s->graph_reserved_bytes = s->cached_bytes = s->segment_count = 0;
    s->host_kept_bytes = r->suspended ? r->kept_bytes : 0;
    s->host_reserved_bytes = r->host_bytes;
}

static void fill_resident_stats(const cpool_pool *p, const cpool__front_counts *front, cpool_pool_stats *s) {
    const cpool__allocator *a = &p->alloc;
    const cpool__graph_pages *gp = &p->pages;
    uint64_t graph = gp->shared_bytes + gp->own_bytes;
    s->allocated_bytes = front->allocated;
    s->allocated_bytes_peak = front->allocated_peak;
    s->alloc_count = front->alloc_count;
    s->free_count = front->free_count;
    s->reserved_bytes = a->reserved + graph;
    s->reserved_bytes_peak = p->reserved_peak > s->reserved_bytes ? p->reserved_peak : s->reserved_bytes;
    s->graph_reserved_bytes = a->graph_reserved + graph;
    /* Graph memory in no live block: what its physical pages hold beyond
     * the live blocks of the arenas (none at most). */
    cpool__graph_live live = cpool__graph_pages_live(gp);
    s->segment_count = a->segment_count + live.runs;
    s->cached_bytes = a->reserved - a->live_block_bytes + front->free_bytes + (graph > live.bytes ? graph - live.bytes : 0);
    s->graph_count = p->graph_count;
}

cpool_status cpool_pool_get_stats(const cpool_pool *handle, cpool_pool_stats *out) {
    const cpool_pool *pool;
    CPOOL__RESOLVE(pool, handle, CPOOL__HANDLE_POOL, "cpool_pool_get_stats", "pool");
    if (!out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_pool_get_stats: NULL argument");
    size_t size = out->struct_size;
    CPOOL__CHECK_STRUCT_SIZE(size, CPOOL__SIZE_THROUGH(cpool_pool_stats, segment_count),
                             "cpool_pool_get_stats: struct_size");
    cpool_pool *p = (cpool_pool *)pool; /* locking, and settling graph pages, are no logical change */
    cpool_pool_stats s = {.struct_size = size};
    cpool__mutex_lock(&p->mu);
    cpool__graph_pages_settle(&p->pages);
    cpool__front_counts front = cpool__front_counters(&p->front);
    fill_stats(p, &front, &s);
    cpool__mutex_unlock(&p->mu);
    cpool__copy_struct(out, &s, size, sizeof s);
    return CPOOL_OK;
}

/* Whether no graph or capture held the pool from `holders` (read before
 * the device's work was seen over) until now. */
static bool no_holder_since(const cpool_pool *pool, uint64_t holders) {
    return holder_count(holders) == 0 && atomic_load(&pool->holders) == holders;
}

void cpool__pool_give_back_graph_memory(cpool_pool *pool, uint64_t *graph_reserved_out, uint64_t *waiting_out) {
    uint64_t waiting = 0;
    cpool_pool_stats s = {.struct_size = sizeof s};
    cpool__mutex_lock(&pool->mu);
    /* Where the device's work is over by now (queried, never waited for),
     * what a trim gives back after its wait goes too: the scratch pages of
     * released graphs whose outputs live on, the pages no arena maps, the
     * packed pages no graph keeps. The clocks are read before the query:
     * what they cover is over once it says so. */
    if (!pool->residency.suspended && !cpool__on_stream_thread()) {
        uint64_t upto = cpool__free_clock_tick(), released_by = pool->pages.release_clock;
        uint64_t holders = atomic_load(&pool->holders);
        if (cpool__pool_device_work_over(pool)) cpool__graph_pages_trim(&pool->pages, upto, released_by, no_holder_since(pool, holders));
    }
    cpool__graph_pages_give_back_idle(&pool->pages, false, &waiting);
    cpool__front_counts front = cpool__front_counters(&pool->front);
    fill_stats(pool, &front, &s);
    bool suspended = pool->residency.suspended;
    cpool__mutex_unlock(&pool->mu);
    *graph_reserved_out = s.graph_reserved_bytes;
    *waiting_out = suspended ? 0 : waiting; /* suspended, it holds none */
}

uint64_t cpool__pool_predict_graph_bytes(cpool_pool *pool, uint64_t scratch_bytes, uint64_t output_bytes) {
    cpool__mutex_lock(&pool->mu);
    /* A packed output takes the packed region's free memory first (freed
     * outputs whose work is seen over, as capture_alloc sees them), else
     * grows it; the arena then holds the scratch alone. */
    uint64_t packed_growth = 0;
    bool packs =
        output_bytes && output_bytes <= SIZE_MAX && cpool__guesses_first_packs(&pool->guesses, (size_t)output_bytes);
    cpool__allocator *packed = NULL;
    if (packs && pool->pages.packed && cpool__graph_pages_packed(&pool->pages, &packed) == CPOOL_OK) {
        cpool__pool_add_fences(pool);
        cpool__pool_poll_fences(pool);
        cpool__graph_pages_release_packed(&pool->pages);
        cpool__stream_key fresh = cpool__key_graph(0); /* a new capture's: ids start at 1 */
        packed_growth = cpool__allocator_growth_for(packed, (size_t)output_bytes, fresh, CPOOL__USE_GRAPH);
    } else if (packs) {
        packed_growth = (output_bytes + CPOOL__PAGE - 1) / CPOOL__PAGE * CPOOL__PAGE;
    }
    uint64_t bytes = pool->alloc.graph_reserved + packed_growth +
                     cpool__graph_pages_predict(&pool->pages, scratch_bytes, packs ? 0 : output_bytes);
    cpool__mutex_unlock(&pool->mu);
    return bytes;
}

cpool_status cpool__pool_inspect(const cpool_pool *pool, cpool_status (*fn)(void *ctx, const cpool__pool_view *v),
                              void *ctx) {
    cpool_pool *p = (cpool_pool *)pool; /* locking, and settling graph pages, are no logical change */
    cpool__pool_view v = {.stats = {.struct_size = sizeof v.stats}, .backend = p->dev->be->name};
    cpool__front_counts front;
    cpool__mutex_lock(&p->mu);
    cpool__graph_pages_settle(&p->pages);
    v.front_count = cpool__front_view_blocks(&p->front, v.front, &front);
    fill_stats(p, &front, &v.stats);
    v.suspended = p->residency.suspended;
    if (v.suspended) {
        v.resident = (cpool_pool_stats){.struct_size = sizeof v.resident};
        fill_resident_stats(p, &front, &v.resident);
    }
    v.alloc = &p->alloc;
    v.pages = &p->pages;
    cpool_status st = fn(ctx, &v);
    cpool__mutex_unlock(&p->mu);
    return st;
}

/* What may be taken back once the device was waited for: under mu,
 * `upto` the free clock, `holders` and `released_by` the release clock
 * read before the wait. Gives back free pages, idle arenas and, where no
 * holder came meanwhile, what only holders could still use. */
static void trim_after_quiesce(cpool_pool *pool, uint64_t upto, uint64_t holders, uint64_t released_by) {
    bool no_holder = no_holder_since(pool, holders);
    cpool__pool_poll_fences(pool);
    cpool__allocator_unfence_all(&pool->alloc, upto);
    if (no_holder) cpool__allocator_reclaim_graph(&pool->alloc);
    cpool__allocator_trim(&pool->alloc);
    cpool__graph_pages_trim(&pool->pages, upto, released_by, no_holder);
    CHECK_ALLOCATOR_FULL(pool);
}

/* Waits for the device; then, under mu, trim_after_quiesce. Everything
 * freed, and every graph released, before the wait is finished with once
 * it returns. Returns with mu held. */
static cpool_status quiesce_and_trim(cpool_pool *pool) {
    cpool__mutex_lock(&pool->mu);
    cpool__front_flush(&pool->front, &pool->alloc);
    uint64_t upto = cpool__free_clock_tick();
    uint64_t holders = atomic_load(&pool->holders);
    uint64_t released_by = pool->pages.release_clock;
    cpool__mutex_unlock(&pool->mu);
    cpool_status st = cpool__device_quiesce(pool->dev);
    cpool__mutex_lock(&pool->mu);
    /* A suspended pool's pages are off the device: nothing to give back. */
    if (!pool->residency.suspended) trim_after_quiesce(pool, upto, holders, released_by);
    return st;
}

cpool_status cpool_pool_trim(cpool_pool *handle) {
    cpool_pool *pool;
    CPOOL__RESOLVE(pool, handle, CPOOL__HANDLE_POOL, "cpool_pool_trim", "pool");
    cpool_status refused = cpool__refuse_wait_on_stream_thread("cpool_pool_trim");
    if (refused != CPOOL_OK) return refused;
    cpool_status st = quiesce_and_trim(pool);
    cpool__residency_trim(&pool->residency);
    cpool__mutex_unlock(&pool->mu);
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_pool_trim", st);
}

/* ---- suspend and resume --------------------------------------------------- */

static cpool_status suspend(cpool_pool *pool, cpool_suspend_mode mode) {
    if (atomic_load(&pool->suspended)) return CPOOL_OK;
    cpool__mutex_lock(&pool->mu);
    uint64_t captures = holder_count(atomic_load(&pool->holders)) - pool->graph_count;
    if (!captures) atomic_store(&pool->suspended, true);
    cpool__mutex_unlock(&pool->mu);
    if (captures)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT,
                           "cpool_pool_suspend: %llu capture(s) use the pool: end them first",
                           (unsigned long long)captures);
    cpool__pool_list_suspended(pool);
    while (atomic_load(&pool->launching) != 0 || cpool__pool_memory_in_use()) sched_yield();
    cpool_status st = quiesce_and_trim(pool);
    if (st == CPOOL_OK)
        st = cpool__residency_suspend(&pool->residency, &pool->alloc, &pool->pages,
                                      mode == CPOOL_SUSPEND_KEEP_CONTENTS);
    /* The whole free pages that the trim above left (in units shared with
     * live blocks) are off the device now too: a trim forgets them (its
     * unmaps are no-ops while suspended), so that the resume maps only
     * pages that hold blocks, and free memory maps again when asked for. */
    if (st == CPOOL_OK) cpool__allocator_trim(&pool->alloc);
    CHECK_ALLOCATOR_FULL(pool);
    cpool__mutex_unlock(&pool->mu);
    if (st != CPOOL_OK) {
        cpool__pool_forget_suspended(pool);
        atomic_store(&pool->suspended, false);
        return cpool__fail_in("cpool_pool_suspend", st);
    }
    return CPOOL_OK;
}

cpool_status cpool_pool_suspend(cpool_pool *handle, cpool_suspend_mode mode) {
    cpool_pool *pool;
    CPOOL__RESOLVE(pool, handle, CPOOL__HANDLE_POOL, "cpool_pool_suspend", "pool");
    if (mode != CPOOL_SUSPEND_KEEP_CONTENTS && mode != CPOOL_SUSPEND_DISCARD)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT,
                           "cpool_pool_suspend: mode %d is neither CPOOL_SUSPEND_KEEP_CONTENTS nor CPOOL_SUSPEND_DISCARD",
                           (int)mode);
    cpool_status st = cpool__refuse_wait_on_stream_thread("cpool_pool_suspend");
    if (st != CPOOL_OK) return st;
    if (pool->registrar.add)
        return cpool__fail(CPOOL_ERR_UNSUPPORTED,
                           "cpool_pool_suspend: an NCCL pool's memory is registered with NCCL, which keeps using its "
                           "addresses: it cannot be given back");
    if (!cpool_pool_grows_in_place(handle))
        return cpool__fail(CPOOL_ERR_UNSUPPORTED,
                           "cpool_pool_suspend: the pool's memory is plain segments, which cannot keep their "
                           "addresses without their memory (see cpool_pool_grows_in_place)");
    cpool__pool_retain(pool); /* a release on another thread meanwhile leaves it to this call */
    cpool__mutex_lock(&pool->suspend_mu);
    st = suspend(pool, mode);
    cpool__mutex_unlock(&pool->suspend_mu);
    cpool__pool_release(pool);
    return st;
}

cpool_status cpool_pool_resume(cpool_pool *handle) {
    cpool_pool *pool;
    CPOOL__RESOLVE(pool, handle, CPOOL__HANDLE_POOL, "cpool_pool_resume", "pool");
    cpool_status st = cpool__refuse_wait_on_stream_thread("cpool_pool_resume");
    if (st != CPOOL_OK) return st;
    cpool__pool_retain(pool);
    cpool__mutex_lock(&pool->suspend_mu);
    if (atomic_load(&pool->suspended)) {
        cpool__mutex_lock(&pool->mu);
        st = cpool__residency_resume(&pool->residency, &pool->alloc, &pool->pages);
        cpool__pool_note_peak(pool);
        CHECK_ALLOCATOR_FULL(pool);
        cpool__mutex_unlock(&pool->mu);
        if (st == CPOOL_OK) {
            cpool__pool_forget_suspended(pool);
            atomic_store(&pool->suspended, false);
        }
    }
    cpool__mutex_unlock(&pool->suspend_mu);
    cpool__pool_release(pool);
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_pool_resume", st);
}

bool cpool_pool_is_suspended(const cpool_pool *handle) {
    const cpool_pool *pool;
    CPOOL__RESOLVE_OR_NULL(pool, handle, CPOOL__HANDLE_POOL, "cpool_pool_is_suspended", "pool");
    return pool && atomic_load(&pool->suspended);
}

void cpool__pool_check(const cpool_pool *handle) {
    cpool_pool *p = cpool__handle_object(handle, CPOOL__HANDLE_POOL);
    if (!p) {
        fprintf(stderr, "capturepool: cpool__pool_check: %p is not a live pool\n", (const void *)handle);
        abort();
    }
    cpool__mutex_lock(&p->mu);
    cpool__pool_walk_allocator(p, true);
    /* Records a clear at work has yet to take (made before its bump) come
     * first; the count is of those made since the last bump. */
    size_t records = 0, before_bump = 0;
    uint64_t generation = atomic_load(&p->generation);
    for (const record *r = p->records; r; r = r->next) {
        if (r->generation < generation && before_bump++ != records) {
            fprintf(stderr,
                    "capturepool: pool invariant broken: a record of an earlier generation after a newer one\n");
            abort();
        }
        records++;
    }
    if (records - before_bump != atomic_load(&p->record_count)) {
        fprintf(stderr, "capturepool: pool invariant broken: %zu records listed since the last clear, %zu counted\n",
                records - before_bump, atomic_load(&p->record_count));
        abort();
    }
    cpool__mutex_unlock(&p->mu);
}

