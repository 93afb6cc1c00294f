/*
 * Capture pools: references, seal, recorded objects, and the memory they
 * serve through the allocator, its front cache, the stream-order fences
 * (order.c) and the graphs' pages (graph_pages.c).
 *
 * Data structures (all under `mu` unless atomic)
 * - `records`: the recorded objects, a singly linked list in registration
 *   order. A clear moves them to the end of `doomed`, which one thread at a
 *   time (the dropper) empties, in order: it takes the list, waits for the
 *   device, runs the drops with no lock held, and looks again. A clear that
 *   finds a dropper at work leaves its records to it and waits until they
 *   are dropped, except inside a drop (of any pool) and on the library's
 *   thread, which return at once: a dropper never waits for another, so
 *   drops may call the library, on their own pool or another, and still run
 *   once each, in order.
 * - `alloc`: the caching allocator (alloc.c); its segments come from the
 *   device's backend. `front` (front.c, its own lock) keeps recently freed
 *   small blocks for exact-size reuse without `mu`, and the callers'
 *   counters; allocations and frees outside capture try it first.
 * - `fences`: the pool's stream-order fences (order.h): once one completes,
 *   its stream's blocks freed up to it become reusable by every stream.
 * - `pages`: graph memory (graph_pages.h): each capture allocates in an
 *   arena of its own, whose pages are shared with the pool's other graphs
 *   except those that hold its outputs. Eager allocations never come from
 *   arenas, so they never share a page with a graph. Every graph holding
 *   the pool has an arena, so `graph_count`, changed with them, is the
 *   number of graphs a snapshot lists: the stats and the list are one fact.
 * - `guesses`: which allocations of the last capture bound to the pool
 *   outlived it, for the next capture to pack as outputs (output_guesses.h:
 *   learned at a capture's end, handed to the next at its begin, asked at
 *   each of its allocations).
 * - `generation`: bumped by every clear, under `mu` as records are made; a
 *   graph remembers the value at its capture and is stale when it differs,
 *   and a clear drops only the records made before its bump (a capture
 *   that saw the bump keeps what it records). `launching` counts launches
 *   between their generation check and their enqueue, so a clear can wait
 *   for them before it waits for the device. `launches_held` holds new
 *   ones back for a moment while graph pages change under the pool's graphs
 *   (hold_launches: only when none is under way and the device is idle).
 *
 * - `refs` counts every holder (the callers, captures, graphs, a clear at
 *   work); `user_refs` the callers' own, so that a release too many is
 *   refused instead of taking a graph's reference.
 *
 * Teardown waits for the device (cpool__device_quiesce) before any drop or
 * segment free. On a stream thread it cannot wait, and a graph's release
 * must not, so it is deferred to the library's thread (deferred.c) through
 * nodes embedded in the pool.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool_private.h"
#include "struct_size.h"

/* Under mu: the full walk of the pool's memory (debug.h). `every_arena`
 * walks every arena's blocks too (graph_pages.h). */
void cpool__pool_walk_allocator(cpool_pool *pool, bool every_arena) {
    cpool__allocator_check_counters(&pool->alloc);
    cpool__allocator_check(&pool->alloc);
    cpool__graph_live graph = cpool__graph_pages_live(&pool->pages);
    cpool__front_check(&pool->front, &pool->alloc, graph.requested, graph.blocks);
    cpool__graph_pages_check(&pool->pages, every_arena);
}

#ifdef CPOOL_DEBUG_CHECKS
void cpool__pool_check_allocator(cpool_pool *pool, bool every_arena) {
    cpool__allocator_check_counters(&pool->alloc);
    if (!cpool__debug_full()) return;
    cpool__debug_count_full_walk();
    cpool__pool_walk_allocator(pool, every_arena);
}
#endif

/* Under mu, after memory may have grown. */
void cpool__pool_note_peak(cpool_pool *pool) {
    uint64_t now = pool->alloc.reserved + pool->pages.shared_bytes + pool->pages.own_bytes;
    if (now > pool->reserved_peak) pool->reserved_peak = now;
}

/* A registrar (internal.h) sees every segment before any block of it is
 * handed out, and again before it goes back to the device. */
static cpool_status segment_grow(void *ctx, size_t bytes, void **base) {
    cpool_pool *pool = ctx;
    cpool_status st = pool->dev->be->segment_alloc(pool->dev->impl, bytes, base);
    if (st != CPOOL_OK || !pool->registrar.add) return st;
    st = pool->registrar.add(pool->registrar.ctx, *base, bytes);
    if (st != CPOOL_OK) pool->dev->be->segment_free(pool->dev->impl, *base, bytes);
    return st;
}

static void segment_shrink(void *ctx, void *base, size_t bytes) {
    cpool_pool *pool = ctx;
    if (pool->registrar.remove) pool->registrar.remove(pool->registrar.ctx, base, bytes);
    pool->dev->be->segment_free(pool->dev->impl, base, bytes);
}

_Static_assert(CPOOL__PAGE == CPOOL__PAGE_BYTES, "the allocator's pages are the backend's");

static cpool_status span_reserve(void *ctx, size_t bytes, void **base) {
    cpool_pool *pool = ctx;
    return pool->dev->be->va_reserve(pool->dev->impl, bytes, base);
}

static void span_release(void *ctx, void *base, size_t bytes) {
    cpool_pool *pool = ctx;
    pool->dev->be->va_release(pool->dev->impl, base, bytes);
}

/* A growth of at least this many bytes maps as one allocation (backend.h:
 * a unit, given back only whole: a GiB costs one mapping, not 512), smaller
 * ones a page at a time, so that a growth past the peak can give back the
 * free pages of any block (give_back_pages in alloc.c). Measured on the
 * trace replays (bench/trace_replay, host backend): at 1 GiB their peaks
 * stay as they were (1.006x-1.016x of the live peak); at 256 MiB
 * gpt2_train's went from 1.009x to 1.140x, at 64 MiB vit_b16_infer's from
 * 1.006x to 1.176x. */
#ifndef CPOOL__JOINED_GROWTH_MIN
#define CPOOL__JOINED_GROWTH_MIN ((size_t)1 << 30)
#endif

/* While the pool is suspended its pages are off the device: none maps, and
 * one given back has nothing left to give. */
static cpool_status pages_map(void *ctx, void *addr, size_t bytes) {
    cpool_pool *pool = ctx;
    if (pool->residency.suspended)
        return cpool__fail(CPOOL_ERR_SUSPENDED, "the pool is suspended: no page can be mapped");
    return pool->dev->be->pages_map(pool->dev->impl, addr, bytes, bytes >= CPOOL__JOINED_GROWTH_MIN);
}

static void pages_unmap(void *ctx, void *addr, size_t bytes) {
    cpool_pool *pool = ctx;
    if (!pool->residency.suspended) pool->dev->be->pages_unmap(pool->dev->impl, addr, bytes);
}

static void pages_inside(void *ctx, uintptr_t *lo, uintptr_t *hi) {
    cpool_pool *pool = ctx;
    pool->dev->be->pages_inside(pool->dev->impl, lo, hi);
}

/* Graph pages: physical memory mapped at each graph's own addresses. */
static cpool_status page_create(void *ctx, size_t pages, void **mem) {
    cpool_pool *pool = ctx;
    return pool->dev->be->mem_create(pool->dev->impl, pages * CPOOL__PAGE_BYTES, (cpool__bmem **)mem);
}

static void page_release(void *ctx, void *page) {
    cpool_pool *pool = ctx;
    pool->dev->be->mem_release(pool->dev->impl, page);
}

static cpool_status page_map(void *ctx, void *addr, void *page) {
    cpool_pool *pool = ctx;
    return pool->dev->be->mem_map(pool->dev->impl, addr, page);
}

static void page_unmap(void *ctx, void *addr, void *page) {
    cpool_pool *pool = ctx;
    pool->dev->be->mem_unmap(pool->dev->impl, addr, page);
}

/* Whether every stream's work enqueued so far is over (a capturing
 * stream's: its work from before the capture). Queried, never waited for. */
bool cpool__pool_device_work_over(const cpool_pool *pool) {
    cpool__order_mark *mark = cpool__order_mark_now(&pool->dev->order);
    bool over = mark && cpool__order_mark_done(mark);
    cpool__order_mark_release(mark);
    return over;
}

/* Under mu: holds the pool's launches back if none is under way and the
 * device's work so far is over (queried, never waited for; known without
 * a look where the graphs in question never ran), so that graph pages can
 * change under its graphs. A launch checks the flag after it counts itself
 * in `launching`, and this looks at the count after raising the flag: one
 * of the two sees the other. */
static bool hold_launches(void *ctx, bool idle_known) {
    cpool_pool *pool = ctx;
    atomic_store(&pool->launches_held, true);
    if (atomic_load(&pool->launching) == 0 && (idle_known || cpool__pool_device_work_over(pool))) return true;
    atomic_store(&pool->launches_held, false);
    return false;
}

static void release_launches(void *ctx) {
    cpool_pool *pool = ctx;
    atomic_store(&pool->launches_held, false);
}

static void run_deferred_clear(cpool__deferred *task);
static void run_deferred_destroy(cpool__deferred *task);

/* ---- create, retain, release --------------------------------------------- */

static cpool__slab pool_slab = CPOOL__SLAB_INIT(cpool_pool, CPOOL__HANDLE_POOL);
/* Parameter blocks are checked handles: one that outlived its pool is a
 * dead handle, not freed memory. */
static cpool__slab param_slab = CPOOL__SLAB_INIT(cpool_param, CPOOL__HANDLE_PARAM);

cpool_status cpool_pool_create(cpool_device *dev_handle, const cpool_pool_options *opts, cpool_pool **out) {
    return cpool__pool_create_registered(dev_handle, opts, NULL, out);
}

/* The pool's eager allocator and graph pages over the device's memory:
 * segments that grow in place (address space reserved, pages mapped)
 * where the device can, else plain segments. */
static void init_memory(cpool_pool *pool, const cpool_pool_options *o, bool registrar) {
    cpool_device *dev = pool->dev;
    cpool__segment_source source = {.ctx = pool, .grow = segment_grow, .shrink = segment_shrink};
    /* A registrar's ranges are whole plain segments: a block never spans two. */
    if (!o->plain_segments && !registrar && dev->be->va_supported(dev->impl)) {
        source.reserve = span_reserve;
        source.unreserve = span_release;
        source.map = pages_map;
        source.unmap = pages_unmap;
        source.inside = pages_inside;
    }
    cpool__allocator_init(&pool->alloc, &source, o->max_reserved_bytes);
    /* Graph memory takes the same kind of memory: pages where segments
     * grow in place, else plain segments that no two graphs share. */
    cpool__page_source pages = {.ctx = pool, .grow = segment_grow, .shrink = segment_shrink};
    if (source.reserve) {
        pages.reserve = span_reserve;
        pages.unreserve = span_release;
        pages.create = page_create;
        pages.release = page_release;
        pages.map = page_map;
        pages.unmap = page_unmap;
        pages.hold_launches = hold_launches;
        pages.release_launches = release_launches;
    }
    cpool__graph_pages_init(&pool->pages, &pages, o->max_reserved_bytes, &pool->alloc.reserved, &pool->dev->order);
    cpool__allocator_count_also(&pool->alloc, &pool->pages.shared_bytes, &pool->pages.own_bytes);
}

cpool_status cpool__pool_create_registered(cpool_device *dev_handle, const cpool_pool_options *opts,
                                           const cpool__registrar *registrar, cpool_pool **out) {
    cpool_device *dev;
    CPOOL__RESOLVE_OPEN_DEVICE(dev, dev_handle, "cpool_pool_create");
    if (!out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_pool_create: NULL argument");
    cpool_pool_options o = {0};
    if (opts) {
        CPOOL__CHECK_STRUCT_SIZE(opts->struct_size, sizeof(size_t), "cpool_pool_create: options struct_size");
        cpool__copy_struct(&o, opts, opts->struct_size, sizeof o);
    }
    if (o.reserve_bytes > CPOOL__MAX_REQUEST)
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "cpool_pool_create: reserve_bytes %llu is more than any device holds",
                           (unsigned long long)o.reserve_bytes);
    if (o.max_reserved_bytes && o.reserve_bytes &&
        o.reserve_bytes > o.max_reserved_bytes / CPOOL__SEGMENT_GRANULE * CPOOL__SEGMENT_GRANULE)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT,
                           "cpool_pool_create: reserve_bytes, rounded up to 2 MiB, exceeds max_reserved_bytes");
    /* Refused where it takes effect (va_supported below), also when it was
     * set only after the device was opened. */
    const char *vm = cpool__virtual_memory_bad_value();
    if (vm)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT,
                           "cpool_pool_create: CPOOL_VIRTUAL_MEMORY=\"%.64s\" is neither \"0\" nor \"1\"", vm);
    cpool_status st = cpool__deferred_start();
    if (st != CPOOL_OK) return cpool__fail_in("cpool_pool_create", st);

    cpool_pool *pool = cpool__slab_take(&pool_slab);
    if (!pool) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "cpool_pool_create: out of host memory");
    atomic_init(&pool->refs, 1);
    atomic_init(&pool->user_refs, 1);
    pool->dev = dev;
    cpool__mutex_init(&pool->mu, CPOOL__RANK_POOL);
    cpool__mutex_init(&pool->suspend_mu, CPOOL__RANK_SUSPEND);
    cpool__residency_init(&pool->residency, dev->be, dev->impl);
    pthread_cond_init(&pool->dropped_cv, NULL);
    pool->records_tail = &pool->records;
    pool->doomed_tail = &pool->doomed;
    pool->deferred_clear.run = run_deferred_clear;
    pool->deferred_destroy.run = run_deferred_destroy;
    pool->registrar = registrar ? *registrar : (cpool__registrar){0};
    init_memory(pool, &o, registrar != NULL);
    cpool__front_init(&pool->front);
    if (o.reserve_bytes) {
        st = cpool__allocator_reserve(&pool->alloc, o.reserve_bytes);
        cpool__pool_note_peak(pool);
        if (st != CPOOL_OK) {
            cpool__fail_in("cpool_pool_create", st);
            cpool__allocator_destroy(&pool->alloc); /* a range reserved before the pages failed */
            cpool__mutex_destroy(&pool->mu);
            cpool__mutex_destroy(&pool->suspend_mu);
            pthread_cond_destroy(&pool->dropped_cv);
            cpool__handle_kill(pool);
            cpool__slab_give(&pool_slab, pool);
            return st;
        }
    }
    cpool__device_retain(dev);
    *out = cpool__handle_of(pool);
    return CPOOL_OK;
}

cpool_pool *cpool__pool_retain(cpool_pool *pool) {
    atomic_fetch_add(&pool->refs, 1);
    return pool;
}

cpool_pool *cpool_pool_retain(cpool_pool *handle) {
    cpool_pool *pool;
    CPOOL__RESOLVE_OR_NULL(pool, handle, CPOOL__HANDLE_POOL, "cpool_pool_retain", "pool");
    if (!pool) return NULL;
    atomic_fetch_add(&pool->user_refs, 1);
    cpool__pool_retain(pool);
    return handle;
}

/* How many drops this thread is running (nested through the library). */
static _Thread_local unsigned drop_depth;

/* Runs the drops of a detached list of records, in order, and frees it. */
static void run_drops(record *r) {
    drop_depth++;
    while (r) {
        record *next = r->next;
        if (r->drop) r->drop(r->object);
        free(r);
        r = next;
    }
    drop_depth--;
}

/* The last reference is gone and the handle dead: a drop that calls the
 * library with this pool is refused, so nothing else reaches it. */

/* The teardown: waits for the device's work first, unless the caller saw
 * it over already (no work on the pool's memory can be enqueued once its
 * last reference is gone). */
static void pool_teardown(cpool_pool *pool, bool work_over) {
    if (!work_over) cpool__device_quiesce(pool->dev);
    cpool__pool_forget_suspended(pool);
    run_drops(pool->doomed);
    run_drops(pool->records);
    while (pool->params) {
        cpool_param *p = pool->params;
        pool->params = p->next;
        cpool__handle_kill(p); /* its memory goes with the segments */
        cpool__slab_give(&param_slab, p);
    }
    cpool__fences_destroy(&pool->fences, &pool->dev->order);
    cpool__graph_pages_destroy(&pool->pages);
    cpool__guesses_destroy(&pool->guesses);
    cpool__allocator_destroy(&pool->alloc);
    cpool__residency_destroy(&pool->residency);
    if (pool->registrar.release) pool->registrar.release(pool->registrar.ctx);
    cpool__mutex_destroy(&pool->mu);
    cpool__mutex_destroy(&pool->suspend_mu);
    pthread_cond_destroy(&pool->dropped_cv);
    cpool_device *dev = pool->dev;
    cpool__slab_give(&pool_slab, pool);
    cpool__device_release(dev);
}

static void pool_destroy(cpool_pool *pool) { pool_teardown(pool, false); }

static void run_deferred_destroy(cpool__deferred *task) {
    pool_destroy((cpool_pool *)((char *)task - offsetof(cpool_pool, deferred_destroy)));
}

void cpool__pool_release(cpool_pool *pool) {
    if (atomic_fetch_sub(&pool->refs, 1) != 1) return;
    cpool__handle_kill(pool);
    if (cpool__on_stream_thread())
        cpool__defer(&pool->deferred_destroy); /* waiting here could wait for this very thread */
    else
        pool_destroy(pool);
}

/* A graph's reference: its last release never waits. Where the device's
 * work is over already (queried), the teardown runs here, as the seed
 * drops its buffers with the last reference; else (or inside a stream
 * callback, where the platform may not be called) it goes to the
 * library's thread, which waits for that work, then drops and frees. */
void cpool__pool_release_without_waiting(cpool_pool *pool) {
    if (atomic_fetch_sub(&pool->refs, 1) != 1) return;
    cpool__handle_kill(pool);
    if (!cpool__on_stream_thread() && cpool__pool_device_work_over(pool))
        pool_teardown(pool, true);
    else
        cpool__defer(&pool->deferred_destroy);
}

void cpool_pool_release(cpool_pool *handle) {
    cpool_pool *pool;
    CPOOL__RESOLVE_VOID(pool, handle, CPOOL__HANDLE_POOL, "cpool_pool_release", "pool");
    if (cpool__take_user_ref(&pool->user_refs, "cpool_pool_release", "pool")) cpool__pool_release(pool);
}

/* ---- seal, record, clear ------------------------------------------------- */

void cpool_pool_seal(cpool_pool *handle) {
    cpool_pool *pool;
    CPOOL__RESOLVE_VOID(pool, handle, CPOOL__HANDLE_POOL, "cpool_pool_seal", "pool");
    atomic_store(&pool->sealed, true);
}

void cpool_pool_unseal(cpool_pool *handle) {
    cpool_pool *pool;
    CPOOL__RESOLVE_VOID(pool, handle, CPOOL__HANDLE_POOL, "cpool_pool_unseal", "pool");
    atomic_store(&pool->sealed, false);
}

bool cpool_pool_is_sealed(const cpool_pool *handle) {
    const cpool_pool *pool;
    CPOOL__RESOLVE_OR_NULL(pool, handle, CPOOL__HANDLE_POOL, "cpool_pool_is_sealed", "pool");
    return pool && atomic_load(&pool->sealed);
}

const cpool__registrar *cpool__pool_registrar(const cpool_pool *handle, const char *fn) {
    const cpool_pool *pool;
    CPOOL__RESOLVE_OR_NULL(pool, handle, CPOOL__HANDLE_POOL, fn, "pool");
    return pool && pool->registrar.add ? &pool->registrar : NULL;
}

bool cpool_pool_grows_in_place(const cpool_pool *handle) {
    cpool_pool *pool;
    CPOOL__RESOLVE_OR_NULL(pool, handle, CPOOL__HANDLE_POOL, "cpool_pool_grows_in_place", "pool");
    if (!pool) return false;
    cpool__mutex_lock(&pool->mu);
    bool growable = pool->alloc.growable;
    cpool__mutex_unlock(&pool->mu);
    return growable;
}

cpool_status cpool_pool_record(cpool_pool *handle, void *object, void (*drop)(void *object), size_t *index_out) {
    cpool_pool *pool;
    CPOOL__RESOLVE(pool, handle, CPOOL__HANDLE_POOL, "cpool_pool_record", "pool");
    record *r = cpool__malloc(sizeof *r);
    if (!r) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "cpool_pool_record: out of host memory");
    r->next = NULL;
    r->object = object;
    r->drop = drop;
    cpool__mutex_lock(&pool->mu);
    r->generation = atomic_load(&pool->generation); /* bumped under mu */
    *pool->records_tail = r;
    pool->records_tail = &r->next;
    size_t index = atomic_fetch_add(&pool->record_count, 1);
    cpool__mutex_unlock(&pool->mu);
    if (index_out) *index_out = index;
    return CPOOL_OK;
}

size_t cpool_pool_buffer_count(const cpool_pool *handle) {
    const cpool_pool *pool;
    CPOOL__RESOLVE_OR_NULL(pool, handle, CPOOL__HANDLE_POOL, "cpool_pool_buffer_count", "pool");
    return pool ? atomic_load(&pool->record_count) : 0;
}

/* Makes every graph captured so far stale and waits until no launch that
 * passed its staleness check is still on its way to the stream (a launch
 * holds no lock while it is: nothing waits here for the caller itself).
 * The bump is made under mu, as records are: every record is before it (a
 * graph captured with it is stale now) or after (this clear keeps it).
 * Returns the new generation. */
static _Atomic uint64_t clear_clock;

uint64_t cpool__pool_clear_clock(void) { return atomic_load(&clear_clock); }

static uint64_t bump_generation(cpool_pool *pool) {
    cpool__mutex_lock(&pool->mu);
    uint64_t generation = atomic_fetch_add(&clear_clock, 1) + 1;
    atomic_store(&pool->generation, generation);
    atomic_store(&pool->record_count, 0); /* indices restart with the clear */
    cpool__mutex_unlock(&pool->mu);
    while (atomic_load(&pool->launching) != 0) sched_yield();
    return generation;
}

/* Under mu: moves the records made before `generation` (the first ones:
 * they are in the order of their records) to the end of `doomed`; returns
 * the count of records doomed so far, which the dropper reaches once they
 * are dropped. */
static uint64_t doom_records(cpool_pool *pool, uint64_t generation) {
    size_t n = 0;
    record **cut = &pool->records;
    for (; *cut && (*cut)->generation < generation; cut = &(*cut)->next) n++;
    if (n) {
        *pool->doomed_tail = pool->records;
        pool->doomed_tail = cut;
        pool->records = *cut;
        *cut = NULL;
        if (!pool->records) pool->records_tail = &pool->records;
    }
    pool->doomed_total += n;
    return pool->doomed_total;
}

/* Under mu, returning with it held: drops everything doomed, in order,
 * until nothing is left. Each batch is taken, then the device is waited for
 * (so that its work on the records is over), then dropped with no lock held:
 * a drop may call the library, and a clear it makes adds to `doomed`. */
static void drop_doomed(cpool_pool *pool) {
    pool->dropping = true;
    while (pool->doomed) {
        record *list = pool->doomed;
        pool->doomed = NULL;
        pool->doomed_tail = &pool->doomed;
        size_t n = 0;
        for (record *r = list; r; r = r->next) n++;
        cpool__mutex_unlock(&pool->mu);
        cpool__device_quiesce(pool->dev);
        run_drops(list);
        cpool__mutex_lock(&pool->mu);
        pool->dropped_total += n;
        pthread_cond_broadcast(&pool->dropped_cv);
    }
    pool->dropping = false;
}

static void run_deferred_clear(cpool__deferred *task) {
    cpool_pool *pool = (cpool_pool *)((char *)task - offsetof(cpool_pool, deferred_clear));
    cpool__mutex_lock(&pool->mu);
    pool->clear_queued = false;
    if (!pool->dropping) drop_doomed(pool); /* else the dropper at work drops them */
    cpool__mutex_unlock(&pool->mu);
    cpool__pool_release(pool);
}

void cpool_pool_clear_buffers(cpool_pool *handle) {
    cpool_pool *pool;
    CPOOL__RESOLVE_VOID(pool, handle, CPOOL__HANDLE_POOL, "cpool_pool_clear_buffers", "pool");
    uint64_t generation = bump_generation(pool);
    cpool__pool_retain(pool); /* a drop may release the last of the callers' references */
    cpool__mutex_lock(&pool->mu);
    uint64_t ticket = doom_records(pool, generation);
    if (cpool__on_stream_thread()) {
        /* It cannot wait here: the library's thread drops the records. */
        bool queue = !pool->clear_queued && pool->doomed && !pool->dropping;
        if (queue) {
            pool->clear_queued = true;
            cpool__pool_retain(pool);
        }
        cpool__mutex_unlock(&pool->mu);
        if (queue) cpool__defer(&pool->deferred_clear);
    } else if (!pool->dropping) {
        drop_doomed(pool);
        cpool__mutex_unlock(&pool->mu);
    } else {
        /* Another clear drops: it drops these too. Wait for that, unless
         * this runs inside a drop (perhaps of that very clear, or of a clear
         * that the dropper's drops clear in turn) or on the library's
         * thread, which the dropper may itself be waiting for. */
        bool wait = drop_depth == 0 && !cpool__on_library_thread();
        while (wait && pool->dropped_total < ticket) cpool__cond_wait(&pool->dropped_cv, &pool->mu);
        cpool__mutex_unlock(&pool->mu);
    }
    cpool__pool_release(pool);
}

/* ---- fences (order.c) ---------------------------------------------------- */

/* The pool's allocator and, once there is one, its packed region, where
 * outputs freed outside capture wait for their stream's work as eager
 * blocks do. */
static cpool__fenced fenced(cpool_pool *pool) {
    cpool__fenced a = {.list = {&pool->alloc}, .count = 1};
    if (pool->pages.packed && cpool__graph_pages_packed(&pool->pages, &a.list[1]) == CPOOL_OK) a.count = 2;
    return a;
}

void cpool__pool_poll_fences(cpool_pool *pool) {
    cpool__fenced a = fenced(pool);
    cpool__fences_poll(&pool->fences, &pool->dev->order, &a);
}

void cpool__pool_add_fences(cpool_pool *pool) {
    cpool__fenced a = fenced(pool);
    cpool__fences_add(&pool->fences, &pool->dev->order, &a);
}

/* ---- allocation ---------------------------------------------------------- */

/* The miss path, under mu, for work on `s` (NULL: only blocks free for any
 * stream) or (graph) for a capture on s: completed fences, the front's free
 * blocks (they may merge into what the request needs), new fences, a new
 * segment; and when the device or the pool's bound leaves no room, give
 * cached segments with no pending work back before one more try. It never
 * waits for the device: a stream it would wait for may be waiting for this
 * very thread. Under capture the same steps run: the event calls are legal
 * beside any capture, and a capturing stream is fenced by its capture's
 * fence. */
static cpool_status alloc_miss(cpool_pool *pool, size_t bytes, cpool_stream *s, cpool__use use,
                               cpool__stream_key tag, void **out) {
    cpool__allocator *a = &pool->alloc;
    cpool__stream_key stream = use != CPOOL__USE_STREAM ? tag
                               : s                      ? cpool__key_stream(cpool__stream_id(s))
                                                        : CPOOL__KEY_ANY;
    const cpool__deps *deps = use == CPOOL__USE_STREAM && s ? &s->order.deps : NULL;
    cpool__pool_poll_fences(pool);
    if (cpool__allocator_alloc_cached(a, bytes, stream, deps, use, out)) return CPOOL_OK;
    if (cpool__front_flush(&pool->front, a) && cpool__allocator_alloc_cached(a, bytes, stream, deps, use, out))
        return CPOOL_OK;
    cpool__pool_add_fences(pool);
    if (cpool__allocator_alloc_cached(a, bytes, stream, deps, use, out)) return CPOOL_OK;
    /* Before growing past the peak: blocks whose work has finished by now
     * (often all, the fences being just recorded) may merge, or give their
     * pages back for the new ones. */
    if (cpool__allocator_growth_passes_peak(a, bytes, stream, use)) {
        cpool__pool_poll_fences(pool);
        if (cpool__allocator_alloc_cached(a, bytes, stream, deps, use, out)) return CPOOL_OK;
    }
    cpool_status st = cpool__allocator_alloc_grow(a, bytes, stream, use, out);
    if (st != CPOOL_ERR_OUT_OF_MEMORY) return st;
    cpool__pool_poll_fences(pool);
    if (cpool__allocator_alloc_cached(a, bytes, stream, deps, use, out)) return CPOOL_OK;
    if (cpool__allocator_trim(a) == 0) return st;
    return cpool__allocator_alloc_grow(a, bytes, stream, use, out);
}

/* alloc_miss, leaving cpool_last_error() as it was when it succeeds in the
 * end (a fence refused by a capturing stream, a first full device). */
static cpool_status alloc_slow(cpool_pool *pool, size_t bytes, cpool_stream *s, cpool__use use,
                               cpool__stream_key tag, void **out) {
    cpool__error_mark before;
    cpool__error_save(&before);
    cpool_status st = alloc_miss(pool, bytes, s, use, tag, out);
    if (st == CPOOL_OK) cpool__error_restore(&before);
    return st;
}

/* An allocation outside capture that the front cache could not serve. */
static __attribute__((noinline)) cpool_status alloc_locked(cpool_pool *pool, size_t bytes, cpool_stream *s,
                                                           void **ptr_out, const char *fn) {
    cpool_status st = CPOOL_OK;
    cpool__mutex_lock(&pool->mu);
    if (atomic_load(&pool->suspended)) /* suspended after the caller looked */
        st = cpool__fail(CPOOL_ERR_SUSPENDED, "the pool is suspended");
    else if (!cpool__allocator_alloc_cached(&pool->alloc, bytes, cpool__key_stream(cpool__stream_id(s)), &s->order.deps,
                                            CPOOL__USE_STREAM, ptr_out))
        st = alloc_slow(pool, bytes, s, CPOOL__USE_STREAM, CPOOL__KEY_ANY, ptr_out);
    if (st == CPOOL_OK) cpool__front_count_alloc(&pool->front, bytes);
    cpool__pool_note_peak(pool);
    CHECK_ALLOCATOR(pool);
    cpool__mutex_unlock(&pool->mu);
    if (st != CPOOL_OK) return cpool__fail_in(fn, st);
    if (cpool__learning_now()) cpool__learn_alloc(cpool__learning, *ptr_out, cpool__stream_id(s), bytes);
    return st;
}

/* Undoes the hold cpool__pool_hold_in_capture just took, the last the
 * capture took: a refused call changes nothing. */
static void unhold_last(cpool__capture *cap, cpool_pool *pool) {
    cpool__capture_drop_last_pool(cap);
    cpool__pool_capture_detach(pool);
    cpool__pool_release(pool);
}

/* The capture's arena in the pool (under the pool's lock), made at its
 * first allocation or free there. */
static cpool_status open_arena(cpool_pool *pool, cpool__capture *cap, cpool__held_pool *held) {
    cpool__arena *arena;
    cpool_status st = cpool__graph_pages_open(&pool->pages, cpool__key_graph(cap->id), &arena);
    if (st == CPOOL_OK) cpool__capture_set_arena(held, arena);
    return st;
}

/* A block of graph memory from `a` (an arena's allocator or the packed
 * region), under the pool's lock: cached first, else grown; where the
 * device or the pool's bound is full, eager memory with no work left on it
 * goes back first, as for any allocation (alloc_miss; a capturing stream
 * is fenced by its capture). A success after a retry leaves the last
 * error as it was. */
static cpool_status graph_block_locked(cpool_pool *pool, cpool__allocator *a, size_t bytes, cpool__stream_key tag,
                                       bool packed, void **out) {
    cpool__error_mark before;
    cpool__error_save(&before);
    /* Packed outputs freed since, whose streams' work is seen over, come
     * first: the region would otherwise grow from its free end while they
     * wait, a page at a time. */
    if (packed) {
        cpool__pool_add_fences(pool);
        cpool__pool_poll_fences(pool);
    }
    if (cpool__allocator_alloc_cached(a, bytes, tag, NULL, CPOOL__USE_GRAPH, out)) return CPOOL_OK;
    cpool_status st = cpool__allocator_alloc_grow(a, bytes, tag, CPOOL__USE_GRAPH, out);
    if (st == CPOOL_ERR_OUT_OF_MEMORY) {
        cpool__front_flush(&pool->front, &pool->alloc);
        cpool__pool_add_fences(pool);
        cpool__pool_poll_fences(pool);
        if (cpool__allocator_trim(&pool->alloc)) st = cpool__allocator_alloc_grow(a, bytes, tag, CPOOL__USE_GRAPH, out);
    }
    if (st == CPOOL_OK) cpool__error_restore(&before);
    return st;
}

/* An allocation under capture `cap` (locked), from the capture's arena in
 * the pool (made at its first allocation there). The graph will need a
 * reference to this pool: room for it is made first, and it is taken only
 * once the allocation succeeded. */
static cpool_status capture_alloc(cpool_pool *pool, size_t bytes, cpool_stream *s, cpool__capture *cap,
                                  void **ptr_out, bool output, const char *fn) {
    cpool_status st = cpool__capture_holds(cap, pool) ? CPOOL_OK : cpool__capture_reserve(cap);
    if (st != CPOOL_OK) return cpool__fail_in(fn, st);
    /* The branch's tag, or the stream's id: blocks free for any of the
     * capture's streams, and the stream a snapshot names. */
    cpool__stream_key branch = cpool__capture_branch_of(cap, cpool__stream_id(s));
    cpool__stream_key tag = cpool__key_is_any(branch) ? cpool__key_stream(cpool__stream_id(s)) : branch;
    bool newly_held = cpool__pool_hold_in_capture(cap, pool, false);
    cpool__held_pool *held = cpool__capture_held(cap, pool);
    /* Outputs (said to be, or learned by a graphed call) and the smallest
     * requests come from the packed region, where the capture's freed
     * blocks are its graph's alone (graph_pages.h). */
    cpool__guess guess = cpool__guesses_next(cap, cpool__stream_id(s), bytes, output);
    bool packed = guess.output || output || bytes <= CPOOL__PACKED_MAX;
    if (packed) tag = cpool__key_is_any(branch) ? cpool__key_graph(cap->id) : branch;
    cpool__mutex_lock(&pool->mu);
    /* After the hold: a suspend from now on sees the capture and refuses. */
    if (atomic_load(&pool->suspended)) st = cpool__fail(CPOOL_ERR_SUSPENDED, "the pool is suspended");
    if (st == CPOOL_OK && !held->arena) st = open_arena(pool, cap, held);
    cpool__allocator *a = NULL;
    void *p = NULL;
    if (st == CPOOL_OK && packed) st = cpool__graph_pages_packed(&pool->pages, &a);
    if (st == CPOOL_OK) {
        if (!packed) a = cpool__arena_allocator(held->arena);
        st = graph_block_locked(pool, a, bytes, tag, packed, &p);
        if (st == CPOOL_OK && packed && (st = cpool__arena_note_packed(held->arena, p)) != CPOOL_OK)
            cpool__allocator_free(a, p, cpool__key_stream(cpool__stream_id(s)), CPOOL__USE_GRAPH, tag, NULL);
        if (st == CPOOL_OK && cpool__key_is_graph(tag)) cpool__allocator_note_user(a, p, cpool__stream_id(s));
        if (st == CPOOL_OK) *ptr_out = p; /* a refused call leaves it as it was */
    }
    if (st == CPOOL_OK) cpool__front_count_alloc(&pool->front, bytes);
    cpool__pool_note_peak(pool);
    CHECK_ALLOCATOR(pool);
    cpool__mutex_unlock(&pool->mu);
    if (st != CPOOL_OK && newly_held) {
        if (held->arena) cpool__pool_release_arena(pool, held->arena);
        unhold_last(cap, pool);
    }
    if (st != CPOOL_OK) return cpool__fail_in(fn, st);
    cpool__capture_plan_taken(cap, cpool__stream_id(s), guess.entry);
    /* An output said to be one is logged as no output: the next capture
     * is not to guess where the caller says (a guess in another place
     * packs scratch there, which is never shared). */
    cpool__capture_log_alloc(cap, output ? NULL : *ptr_out, cpool__stream_id(s), bytes, guess.guessed,
                             guess.far_miss);
    return st;
}

/* An allocation under the capture that s takes part in, locked here: its
 * streams may be used from several threads. */
static __attribute__((noinline)) cpool_status alloc_in_capture(cpool_pool *pool, size_t bytes, cpool_stream *s,
                                                               void **ptr_out, bool output, const char *fn) {
    cpool__capture *cap = cpool__capture_lock(s);
    if (!cap) return alloc_locked(pool, bytes, s, ptr_out, fn); /* it ended meanwhile */
    cpool_status st = capture_alloc(pool, bytes, s, cap, ptr_out, output, fn);
    cpool__capture_unlock(cap);
    return st;
}

/* Why an allocation's arguments are refused (out of the fast path), or
 * CPOOL_OK where the state that made the fast path refuse is gone by now
 * (another thread unsealed or resumed the pool): the caller goes on. */
static __attribute__((noinline, cold)) cpool_status alloc_refused(const cpool_pool *pool, size_t bytes,
                                                                  const cpool_stream *s, void **ptr_out,
                                                                  const char *fn) {
    if (!ptr_out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: NULL argument", fn);
    if (bytes == 0) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: size 0", fn);
    if (bytes > CPOOL__MAX_REQUEST)
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "%s: %zu bytes is more than any device holds", fn, bytes);
    if (cpool__stream_device(s) != pool->dev)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: the stream is on another device", fn);
    if (atomic_load(&pool->sealed)) return cpool__fail(CPOOL_ERR_SEALED, "%s: the pool is sealed", fn);
    if (atomic_load(&pool->suspended))
        return cpool__fail(CPOOL_ERR_SUSPENDED, "%s: the pool is suspended (cpool_pool_resume gives it memory again)",
                           fn);
    return CPOOL_OK;
}

/* cpool_alloc and cpool_alloc_output: under capture a block that outlives
 * it gets pages of its graph's own, and one said to be an output is packed
 * with other outputs instead. The fast path (the front cache, outside
 * capture) stays in the caller. */
static inline __attribute__((always_inline)) cpool_status pool_alloc(cpool_pool *pool_handle, size_t bytes,
                                                                      cpool_stream *stream_handle, void **ptr_out,
                                                                      bool output, const char *fn) {
    cpool_pool *pool;
    cpool_stream *s;
    CPOOL__RESOLVE(pool, pool_handle, CPOOL__HANDLE_POOL, fn, "pool");
    CPOOL__RESOLVE(s, stream_handle, CPOOL__HANDLE_STREAM, fn, "stream");
    if (__builtin_expect(!ptr_out || bytes - 1 >= CPOOL__MAX_REQUEST || cpool__stream_device(s) != pool->dev ||
                             atomic_load(&pool->sealed) || atomic_load(&pool->suspended),
                         0)) {
        cpool_status st = alloc_refused(pool, bytes, s, ptr_out, fn);
        if (st != CPOOL_OK) return st;
    }
    if (cpool__stream_capture(s)) return alloc_in_capture(pool, bytes, s, ptr_out, output, fn);
    if (!cpool__front_alloc(&pool->front, bytes, cpool__stream_id(s), ptr_out))
        return alloc_locked(pool, bytes, s, ptr_out, fn);
    CHECK_ALLOCATOR_LOCKING(pool);
    if (cpool__learning_now()) cpool__learn_alloc(cpool__learning, *ptr_out, cpool__stream_id(s), bytes);
    return CPOOL_OK;
}

cpool_status cpool_alloc(cpool_pool *pool, size_t bytes, cpool_stream *s, void **ptr_out) {
    return pool_alloc(pool, bytes, s, ptr_out, false, "cpool_alloc");
}

cpool_status cpool_alloc_output(cpool_pool *pool, size_t bytes, cpool_stream *s, void **ptr_out) {
    return pool_alloc(pool, bytes, s, ptr_out, true, "cpool_alloc_output");
}

/* Where a graph's block that cpool_free was given lives, and how its free
 * goes: its allocator (an arena's or the packed region's; *a unchanged:
 * none), the arena to tell of it, whether other graphs or captures still
 * write it (`others`: the free waits for this capture's release), and the
 * use and key of the free. Under the pool's lock. */
typedef struct graph_free {
    cpool__allocator *a, *packed;
    cpool__arena *ar;
    bool others;
    cpool__use use;
    cpool__stream_key branch;
    cpool__block_info info;
} graph_free;

static void find_graph_block(cpool_pool *pool, void *ptr, cpool__capture *cap, const cpool__held_pool *held,
                             graph_free *f) {
    f->ar = cpool__graph_pages_find(&pool->pages, ptr);
    if (f->ar) {
        f->a = cpool__arena_allocator(f->ar);
        f->others = cap && f->ar != held->arena && cpool__allocator_live_block(f->a, ptr, &f->info);
    } else if (cpool__graph_pages_packed(&pool->pages, &f->packed) == CPOOL_OK &&
               cpool__allocator_live_block(f->packed, ptr, &f->info) && !f->info.pinned /* lent: no block */) {
        /* A packed block freed in a capture is that graph's alone (its
         * arena, made now if need be, gives it back at its release); an
         * output freed while its graph lives too: its replays still write
         * it. */
        f->a = f->packed;
        const cpool__arena *owner = cpool__graph_pages_packed_owner(&pool->pages, (uintptr_t)ptr);
        f->others = cap && owner && owner != held->arena && cpool__arena_in_use(owner);
        if (cap && cpool__key_is_any(f->branch)) f->branch = cpool__key_graph(cap->id);
        if (!cap && owner && cpool__arena_graph(owner)) {
            f->use = CPOOL__USE_GRAPH;
            f->branch = cpool__arena_packed_key(owner);
        }
    }
}

/* Frees a graph's block found by find_graph_block. Freed in a capture, a
 * block that another graph or capture writes (or that this graph's replays
 * will, after another's release) is freed at this graph's release: until
 * then neither may lose it (*deferred). */
static cpool_status free_graph_block(cpool_pool *pool, void *ptr, cpool__capture *cap, cpool__held_pool *held,
                                     cpool__stream_key freed_on, graph_free *f, bool *deferred) {
    cpool_status st = (f->a == f->packed || f->others) && held && !held->arena ? open_arena(pool, cap, held) : CPOOL_OK;
    if (st == CPOOL_OK && f->others) {
        /* Free for the caller now (counted; its bytes no longer allocated),
         * live in the allocator until the release. */
        st = cpool__arena_defer_free(held->arena, ptr, f->info.requested);
        if (st == CPOOL_OK) cpool__front_count_free(&pool->front, f->info.requested);
        *deferred = true;
    } else if (st == CPOOL_OK) {
        st = cpool__front_free_slow(&pool->front, f->a, ptr, freed_on, f->use, f->branch);
    }
    return st;
}

/* A free the front cache did not serve: under capture (`cap`), or of a
 * block the front does not keep. An eager block freed under capture is the
 * graph's on every replay: it joins the pool's graph-reserved set, and the
 * graph will need a reference to the pool (room is made first). A graph's
 * block goes back to its arena: under capture free for the capture's later
 * allocations (by the allocator's rules of branches); outside, stream
 * ordered, until a trim finds its work done. */
static __attribute__((noinline)) cpool_status free_locked(cpool_pool *pool, void *ptr, cpool_stream *s,
                                                          cpool__capture *cap) {
    if (cap) {
        cpool_status st = cpool__capture_holds(cap, pool) ? CPOOL_OK : cpool__capture_reserve(cap);
        if (st != CPOOL_OK) return cpool__fail_in("cpool_free", st);
    }
    bool newly_held = cap && cpool__pool_hold_in_capture(cap, pool, false); /* as capture_alloc */
    cpool__held_pool *held = cap ? cpool__capture_held(cap, pool) : NULL;
    cpool__mutex_lock(&pool->mu);
    graph_free f = {.a = &pool->alloc,
                    .use = cap ? CPOOL__USE_GRAPH : CPOOL__USE_STREAM,
                    .branch = cap ? cpool__capture_branch_of(cap, cpool__stream_id(s)) : CPOOL__KEY_ANY};
    cpool__stream_key freed_on = cpool__key_stream(cpool__stream_id(s));
    /* An eager block (live in the eager allocator), else a graph's; a
     * pointer of neither, or one whose free is deferred already, gets the
     * eager allocator's refusal, which says why. */
    if (!cpool__allocator_live_block(f.a, ptr, &f.info) && !cpool__graph_pages_deferred(&pool->pages, ptr))
        find_graph_block(pool, ptr, cap, held, &f);
    bool deferred = false;
    cpool_status st = f.a != &pool->alloc ? free_graph_block(pool, ptr, cap, held, freed_on, &f, &deferred)
                                          : cpool__front_free_slow(&pool->front, f.a, ptr, freed_on, f.use, f.branch);
    if (deferred)
        f.ar = NULL; /* still live */
    else if (st == CPOOL_OK && f.a == f.packed)
        f.ar = cpool__graph_pages_packed_freed(&pool->pages, ptr);
    /* Its arena's last live block: idle now, once the work before this free is over. */
    if (st == CPOOL_OK && f.ar) cpool__arena_freed(&pool->pages, f.ar);
    CHECK_ALLOCATOR(pool);
    cpool__mutex_unlock(&pool->mu);
    if (st != CPOOL_OK) {
        if (newly_held) {
            if (held->arena) cpool__pool_release_arena(pool, held->arena);
            unhold_last(cap, pool);
        }
        return cpool__fail_in("cpool_free", st);
    }
    if (cap)
        cpool__capture_log_free(cap, ptr);
    else if (cpool__learning_now())
        cpool__learn_free(cpool__learning, ptr);
    return st;
}

cpool_status cpool_capture_note_scratch(cpool_stream *s_handle, cpool_pool *pool_handle, void *block, size_t offset,
                                        size_t bytes) {
    static const char fn[] = "cpool_capture_note_scratch";
    cpool_stream *s;
    cpool_pool *pool;
    CPOOL__RESOLVE(s, s_handle, CPOOL__HANDLE_STREAM, fn, "stream");
    CPOOL__RESOLVE(pool, pool_handle, CPOOL__HANDLE_POOL, fn, "pool");
    if (!block) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: NULL block", fn);
    cpool__capture *cap = cpool__capture_lock(s);
    if (!cap) return cpool__fail(CPOOL_ERR_NOT_CAPTURING, "%s: the stream takes part in no capture of capturepool", fn);
    cpool__held_pool *held = cpool__capture_held(cap, pool);
    cpool_status st = CPOOL_OK;
    cpool__mutex_lock(&pool->mu);
    cpool__arena *arena = held ? held->arena : NULL;
    /* A packed block of the capture's (small, or an output the pool
     * guessed) has pages of its own already: nothing to note. */
    bool packed = arena && cpool__graph_pages_packed_owner(&pool->pages, (uintptr_t)block) == arena;
    if (arena && cpool__graph_pages_find(&pool->pages, block) == arena)
        st = cpool__arena_note_scratch(arena, block, offset, bytes);
    else if (!packed)
        st = cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%p was not allocated from this pool in the stream's capture",
                         block);
    cpool__mutex_unlock(&pool->mu);
    cpool__capture_unlock(cap);
    return st == CPOOL_OK ? st : cpool__fail_in(fn, st);
}

/* A free under the capture that s takes part in (locked here). */
static __attribute__((noinline)) cpool_status free_in_capture(cpool_pool *pool, void *ptr, cpool_stream *s) {
    cpool__capture *cap = cpool__capture_lock(s);
    cpool_status st = free_locked(pool, ptr, s, cap); /* NULL: it ended meanwhile */
    if (cap) cpool__capture_unlock(cap);
    return st;
}

cpool_status cpool_free(cpool_pool *pool_handle, void *ptr, cpool_stream *stream_handle) {
    cpool_pool *pool;
    cpool_stream *s;
    CPOOL__RESOLVE(pool, pool_handle, CPOOL__HANDLE_POOL, "cpool_free", "pool");
    CPOOL__RESOLVE(s, stream_handle, CPOOL__HANDLE_STREAM, "cpool_free", "stream");
    if (!ptr) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_free: NULL argument");
    if (cpool__stream_device(s) != pool->dev) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_free: the stream is on another device");
    if (cpool__stream_capture(s)) return free_in_capture(pool, ptr, s);
    switch (cpool__front_free(&pool->front, ptr, cpool__stream_id(s))) {
    case CPOOL__FRONT_DONE:
        CHECK_ALLOCATOR_LOCKING(pool);
        if (cpool__learning_now()) cpool__learn_free(cpool__learning, ptr);
        return CPOOL_OK;
    case CPOOL__FRONT_FREED: /* a double free: the front said so in cpool_last_error() */
        return cpool__fail_in("cpool_free", CPOOL_ERR_INVALID_ARGUMENT);
    case CPOOL__FRONT_MISS:
        break;
    }
    return free_locked(pool, ptr, s, NULL);
}

cpool_status cpool__pool_add_param(cpool_pool *pool, size_t bytes, cpool_param **out) {
    if (atomic_load(&pool->sealed)) return cpool__fail(CPOOL_ERR_SEALED, "cpool_param_create: the pool is sealed");
    if (bytes > CPOOL__MAX_REQUEST)
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "cpool_param_create: %zu bytes is more than any device holds",
                           bytes);
    cpool_param *param = cpool__slab_take(&param_slab);
    if (!param) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "cpool_param_create: out of host memory");
    param->pool = pool;
    param->bytes = bytes;
    cpool__mutex_lock(&pool->mu);
    /* Stream 0: only blocks with no pending stream work. */
    cpool_status st = CPOOL_OK;
    if (atomic_load(&pool->suspended))
        st = cpool__fail(CPOOL_ERR_SUSPENDED, "the pool is suspended (cpool_pool_resume gives it memory again)");
    else if (!cpool__allocator_alloc_cached(&pool->alloc, param->bytes, CPOOL__KEY_ANY, NULL, CPOOL__USE_STREAM,
                                            &param->ptr))
        st = alloc_slow(pool, param->bytes, NULL, CPOOL__USE_STREAM, CPOOL__KEY_ANY, &param->ptr);
    if (st == CPOOL_OK) {
        cpool__front_count_alloc(&pool->front, param->bytes);
        cpool__allocator_pin(&pool->alloc, param->ptr);
        param->next = pool->params;
        pool->params = param;
    }
    cpool__pool_note_peak(pool);
    CHECK_ALLOCATOR(pool);
    cpool__mutex_unlock(&pool->mu);
    if (st != CPOOL_OK) {
        cpool__handle_kill(param);
        cpool__slab_give(&param_slab, param);
        return cpool__fail_in("cpool_param_create", st);
    }
    *out = param;
    return CPOOL_OK;
}

/* ---- graphs' arenas, suspended pools --------------------------------------- */

/* The frees the arena's capture deferred (free_locked), made now as
 * outside capture: a packed output whose graph lives is kept for it until
 * its release; anything else is free for any capture. (Locked.) */
static void free_deferred(cpool_pool *pool, cpool__arena *arena) {
    uintptr_t *list;
    size_t n = cpool__arena_take_deferred(arena, &list);
    for (size_t i = 0; i < n; i++) {
        void *ptr = (void *)list[i];
        cpool__stream_key key = CPOOL__KEY_ANY;
        cpool__allocator *a;
        cpool__arena *ar = cpool__graph_pages_find(&pool->pages, ptr);
        cpool__arena *owner = ar ? ar : (cpool__arena *)cpool__graph_pages_packed_owner(&pool->pages, list[i]);
        if (ar)
            a = cpool__arena_allocator(ar);
        else if (cpool__graph_pages_packed(&pool->pages, &a) != CPOOL_OK)
            continue; /* it exists: ptr is in it */
        cpool__block_info info;
        if (owner && owner != arena && cpool__arena_in_use(owner) && !cpool__arena_graph(owner)) {
            /* A capture still open handed it out: its own end frees it. */
            if (cpool__allocator_live_block(a, ptr, &info) &&
                cpool__arena_defer_free(owner, ptr, info.requested) == CPOOL_OK)
                continue;
        }
        /* A packed output of a graph that lives is kept for that graph. */
        if (!ar && owner && owner != arena && cpool__arena_graph(owner)) key = cpool__arena_packed_key(owner);
        /* Counted as freed when the capture freed it: not through the front. */
        if (cpool__allocator_free(a, ptr, CPOOL__KEY_ANY, CPOOL__USE_GRAPH, key, NULL) != CPOOL_OK) continue;
        if (!ar) ar = cpool__graph_pages_packed_freed(&pool->pages, ptr);
        if (ar) cpool__arena_freed(&pool->pages, ar);
    }
    free(list);
}

bool cpool__pool_release_arena(cpool_pool *pool, cpool__arena *arena) {
    cpool__mutex_lock(&pool->mu);
    bool graph = cpool__arena_graph(arena) != 0;
    /* A graph's hold goes with its count, so that under mu the holders
     * beyond graph_count are captures (cpool_pool_suspend). */
    if (graph) {
        pool->graph_count--;
        atomic_fetch_sub(&pool->holders, 1);
    }
    free_deferred(pool, arena);
    /* The packed blocks its capture freed stay its graph's until the work
     * marked now is over (graph_pages.c, cpool__graph_pages_release_packed). */
    cpool__arena_release(&pool->pages, arena);
    cpool__mutex_unlock(&pool->mu);
    return graph;
}

/* The suspended pools, for the copies and sets that must not touch their
 * memory; `suspended_count` spares the others the lock. */
static cpool__mutex suspended_mu = CPOOL__MUTEX_INIT(CPOOL__RANK_SUSPENDED);
static cpool_pool *suspended_pools;
static atomic_int suspended_count;

void cpool__pool_list_suspended(cpool_pool *pool) {
    cpool__mutex_lock(&suspended_mu);
    pool->next_suspended = suspended_pools;
    suspended_pools = pool;
    atomic_fetch_add(&suspended_count, 1);
    cpool__mutex_unlock(&suspended_mu);
}

void cpool__pool_forget_suspended(cpool_pool *pool) {
    cpool__mutex_lock(&suspended_mu);
    for (cpool_pool **at = &suspended_pools; *at; at = &(*at)->next_suspended)
        if (*at == pool) {
            *at = pool->next_suspended;
            atomic_fetch_sub(&suspended_count, 1);
            break;
        }
    cpool__mutex_unlock(&suspended_mu);
}

/* Copies, sets and parameter writes between their check and their
 * enqueue: a suspend listed first waits for them before it waits for the
 * device, so that each is either refused or done before the pages go. */
static atomic_int memory_users;

/* Under the pool's lock: whether addr is the pool's memory. */
static bool holds_address(const cpool_pool *pool, uintptr_t addr) {
    return cpool__allocator_holds(&pool->alloc, addr) || cpool__graph_pages_holds(&pool->pages, addr);
}

static bool touches(const cpool_pool *pool, const void *p, size_t bytes) {
    return p && (holds_address(pool, (uintptr_t)p) || holds_address(pool, (uintptr_t)p + bytes - 1));
}

cpool_status cpool__pool_memory_enter(const cpool_device *dev, const void *dst, const void *src, size_t bytes) {
    atomic_fetch_add(&memory_users, 1);
    if (atomic_load(&suspended_count) == 0) return CPOOL_OK;
    bool held = false;
    cpool__mutex_lock(&suspended_mu);
    for (cpool_pool *pool = suspended_pools; pool && !held; pool = pool->next_suspended) {
        if (pool->dev != dev) continue;
        cpool__mutex_lock(&pool->mu);
        held = touches(pool, dst, bytes) || touches(pool, src, bytes);
        cpool__mutex_unlock(&pool->mu);
    }
    cpool__mutex_unlock(&suspended_mu);
    if (!held) return CPOOL_OK;
    atomic_fetch_sub(&memory_users, 1);
    return CPOOL_ERR_SUSPENDED;
}

void cpool__pool_memory_exit(void) { atomic_fetch_sub(&memory_users, 1); }

bool cpool__pool_memory_in_use(void) { return atomic_load(&memory_users) != 0; }

bool cpool__pool_is_suspended(const cpool_pool *pool) { return atomic_load(&pool->suspended); }

/* Under suspend_mu. The captures are counted first, under mu: a refused
 * suspend never shows its flag to anyone. The flag then goes up, still
 * under mu, so that no launch, allocation or capture starts (a capture
 * takes hold before it looks at the flag under mu: one that looked before
 * was counted); then the launches under way, then the device, are waited
 * for. */
/* ---- internal accessors -------------------------------------------------- */

cpool_device *cpool__pool_device(const cpool_pool *pool) { return pool->dev; }

uint64_t cpool__pool_generation(const cpool_pool *pool) { return atomic_load(&pool->generation); }

cpool_status cpool__pool_launch_enter(cpool_pool *pool, uint64_t generation) {
    atomic_fetch_add(&pool->launching, 1);
    while (atomic_load(&pool->launches_held)) { /* a moment: graph pages are being split */
        atomic_fetch_sub(&pool->launching, 1);
        while (atomic_load(&pool->launches_held)) sched_yield();
        atomic_fetch_add(&pool->launching, 1);
    }
    cpool_status st = atomic_load(&pool->generation) != generation ? CPOOL_ERR_STALE_GRAPH
                      : atomic_load(&pool->suspended)                ? CPOOL_ERR_SUSPENDED
                                                                     : CPOOL_OK;
    if (st != CPOOL_OK) atomic_fetch_sub(&pool->launching, 1);
    return st;
}

void cpool__pool_launch_exit(cpool_pool *pool) { atomic_fetch_sub(&pool->launching, 1); }

/* ---- captures holding the pool ------------------------------------------ */

bool cpool__pool_hold_in_capture(cpool__capture *cap, cpool_pool *pool, bool bound) {
    if (cpool__capture_holds(cap, pool)) return false;
    /* Cleared since the capture began: work captured before the hold may
     * use what the clear dropped, so the graph is stale for it at once. */
    uint64_t generation = atomic_load(&pool->generation);
    if (generation > cap->clear_clock) generation = UINT64_MAX;
    cpool__capture_add_pool(cap, cpool__pool_retain(pool), generation, bound);
    cpool__pool_capture_attach(pool);
    return true;
}

void cpool__pool_retag_branch(cpool_pool *pool, cpool__arena *arena, uint64_t capture_id, cpool__stream_key from,
                              uint64_t upto, cpool__stream_key to) {
    cpool__mutex_lock(&pool->mu);
    cpool__allocator_retag_branch(&pool->alloc, from, upto, to);
    if (arena) cpool__allocator_retag_branch(cpool__arena_allocator(arena), from, upto, to);
    /* In the packed region the capture's end hands a branch's blocks to
     * its graph, not to every capture. */
    cpool__allocator *packed;
    if (pool->pages.packed && cpool__graph_pages_packed(&pool->pages, &packed) == CPOOL_OK)
        cpool__allocator_retag_branch(packed, from, upto, cpool__key_is_any(to) ? cpool__key_graph(capture_id) : to);
    CHECK_ALLOCATOR(pool);
    cpool__mutex_unlock(&pool->mu);
}

/* A new holder counts once in each half of `holders`. */
void cpool__pool_capture_attach(cpool_pool *pool) { atomic_fetch_add(&pool->holders, HOLDER_EPOCH_ONE + 1); }
void cpool__pool_capture_detach(cpool_pool *pool) { atomic_fetch_sub(&pool->holders, 1); }

