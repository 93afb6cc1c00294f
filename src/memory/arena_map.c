/*
 * The segment sources (alloc.h) behind an arena's allocator and the packed
 * region's: address space reserved for each alone, pages mapped as the
 * allocator asks. An arena's pages map the shared set (page_runs.c numbers
 * them); the packed region's are memory of its own. Where the platform
 * reserves no address space (plain segments), an arena takes plain
 * segments of its own and shares nothing.
 */
#include "pages_internal.h"
#include "status.h"

/* ---- an arena ---------------------------------------------------------------- */

/* A pool's only arena reserves no reach (graph_pages.h): its capture is
 * the cold start, and on an H100 a first mapping into a reservation of
 * 64 MiB or more cost 1.45x of one into a reservation of 16 MiB. */
static cpool_status arena_reserve(void *ctx, size_t bytes, void **base) {
    cpool__arena *ar = ctx;
    return cpool__span_add(ar->gp, &ar->spans, bytes, false, ar->gp->arena_count > 1, base);
}

static void arena_unreserve(void *ctx, void *base, size_t bytes) {
    cpool__arena *ar = ctx;
    cpool__span_remove(ar->gp, &ar->spans, base, bytes);
}

/* Takes down page i of span sp (mapped). */
static void unmap_page(cpool__arena *ar, cpool__page_span *sp, size_t i) {
    const cpool__page *pg = &sp->page[i];
    if (pg->state == CPOOL__PAGE_UNMAPPED) return;
    void *mem = pg->state == CPOOL__PAGE_SHARED ? ar->gp->shared[pg->number].page : pg->mem;
    cpool__pages_unmap(ar->gp, cpool__page_addr(sp, i), mem);
    cpool__page_let_go(ar, sp, i);
}

/* A run goes whole from this arena (with its spare addresses past the
 * arena's pages); one whose pages here lie only partly in the range is
 * split first (the arena's allocator unmaps only where no work is: its arena is
 * its own). Should even that fail, it goes whole, and its other pages in
 * this arena with it. */
static void arena_unmap(void *ctx, void *addr, size_t bytes) {
    cpool__arena *ar = ctx;
    cpool__page_span *sp = cpool__span_of(&ar->spans, (uintptr_t)addr);
    size_t at = cpool__page_index(sp, (uintptr_t)addr), end = at + bytes / CPOOL__PAGE;
    for (size_t i = at; i < end; i++) {
        const cpool__page *pg = &sp->page[i];
        if (pg->state == CPOOL__PAGE_UNMAPPED) continue;
        cpool__page_run *run = pg->state == CPOOL__PAGE_SHARED ? ar->gp->shared[pg->number].run : NULL;
        const cpool__run_map *m = run ? cpool__run_map_of(run, ar) : NULL; /* its pages here: m->used from m->addr */
        bool part = m && (m->addr < (uintptr_t)addr || m->addr + m->used * CPOOL__PAGE > (uintptr_t)addr + bytes);
        if (part && cpool__run_split_quiet(ar->gp, run, ar, 0, run->pages)) run = NULL; /* single pages now */
        if (part && pg->state == CPOOL__PAGE_UNMAPPED) continue; /* the split lost the run: nothing is mapped */
        if (run)
            cpool__run_drop(ar->gp, run, ar, true); /* this arena's mapping of it */
        else
            unmap_page(ar, sp, i);
    }
}

/* Maps page i of span sp to the shared page of number d, made if needed. */
static cpool_status map_shared(cpool__arena *ar, cpool__page_span *sp, size_t i, size_t d) {
    cpool__graph_pages *gp = ar->gp;
    void *page = NULL;
    cpool_status st = cpool__shared_get(gp, d, &page);
    if (st == CPOOL_OK) st = gp->source.map(gp->source.ctx, cpool__page_addr(sp, i), page);
    if (st != CPOOL_OK) {
        if (d < gp->shared_count) cpool__shared_release_unmapped(gp, d, d + 1); /* made for this page alone */
        return st;
    }
    gp->shared[d].maps++;
    ar->taken[d] = CPOOL__NUMBER_TAKEN;
    sp->page[i] = (cpool__page){.state = CPOOL__PAGE_SHARED, .number = d};
    return CPOOL_OK;
}

/* Backs [addr, addr + bytes) with the shared pages of their numbers: where
 * the pool has none from some number on, the rest as one run. */
static cpool_status arena_map(void *ctx, void *addr, size_t bytes) {
    cpool__arena *ar = ctx;
    cpool__graph_pages *gp = ar->gp;
    if (gp->suspended) return cpool__fail(CPOOL_ERR_SUSPENDED, "the pool is suspended: no page can be mapped");
    cpool__page_span *sp = cpool__span_of(&ar->spans, (uintptr_t)addr);
    size_t at = cpool__page_index(sp, (uintptr_t)addr), n = bytes / CPOOL__PAGE;
    for (size_t i = at; i < at + n; i++) {
        cpool_status st = CPOOL_OK;
        size_t d = 0;
        if (cpool__number_next_splitting(ar, at + n - i, &d, &st)) {
            if (d >= gp->shared_count && i + 1 < at + n) {
                st = cpool__run_map_new(ar, sp, i, at + n - i, d);
                if (st == CPOOL_OK) return CPOOL_OK;
            } else {
                st = map_shared(ar, sp, i, d);
            }
        }
        if (st != CPOOL_OK) {
            while (i-- > at) unmap_page(ar, sp, i);
            return st;
        }
    }
    return CPOOL_OK;
}

/* Plain segments, where no address space can be reserved: memory of the
 * owner's own (*plain counts it), shared with no one. */
static cpool_status plain_grow(cpool__graph_pages *gp, uint64_t *plain, size_t bytes, void **base) {
    cpool_status st = cpool__pages_bound(gp, bytes);
    if (st == CPOOL_OK) st = gp->source.grow(gp->source.ctx, bytes, base);
    if (st != CPOOL_OK) return st;
    *plain += bytes;
    gp->own_bytes += bytes;
    return CPOOL_OK;
}

static void plain_shrink(cpool__graph_pages *gp, uint64_t *plain, void *base, size_t bytes) {
    gp->source.shrink(gp->source.ctx, base, bytes);
    *plain -= bytes;
    gp->own_bytes -= bytes;
}

static cpool_status arena_grow(void *ctx, size_t bytes, void **base) {
    cpool__arena *ar = ctx;
    return plain_grow(ar->gp, &ar->plain_bytes, bytes, base);
}

static void arena_shrink(void *ctx, void *base, size_t bytes) {
    cpool__arena *ar = ctx;
    plain_shrink(ar->gp, &ar->plain_bytes, base, bytes);
}

void cpool__arena_map_init(cpool__arena *ar) {
    cpool__segment_source src = {.ctx = ar, .grow = arena_grow, .shrink = arena_shrink};
    if (ar->gp->source.reserve) {
        src.reserve = arena_reserve;
        src.unreserve = arena_unreserve;
        src.map = arena_map;
        src.unmap = arena_unmap;
    }
    /* One capture's memory: address space for it alone, so a process may
     * hold many graphs (a span grows to what a request needs); each branch
     * of a multi-stream capture grows spans of its own. */
    cpool__allocator_init_layout(&ar->alloc, &src,
                                 &(cpool__allocator_layout){.span_first = {CPOOL__ARENA_SPAN_SMALL,
                                                                           CPOOL__ARENA_SPAN_LARGE},
                                                            .spans_by_branch = true});
}

/* ---- the packed region ------------------------------------------------------- */

static cpool_status packed_reserve(void *ctx, size_t bytes, void **base) {
    cpool__packed_region *pr = ctx;
    return cpool__span_add(pr->gp, &pr->spans, bytes, true, false, base);
}

static void packed_unreserve(void *ctx, void *base, size_t bytes) {
    cpool__packed_region *pr = ctx;
    cpool__span_remove(pr->gp, &pr->spans, base, bytes);
}

static void packed_unmap(void *ctx, void *addr, size_t bytes) {
    cpool__packed_region *pr = ctx;
    cpool__graph_pages *gp = pr->gp;
    cpool__page_span *sp = cpool__span_of(&pr->spans, (uintptr_t)addr);
    size_t at = cpool__page_index(sp, (uintptr_t)addr);
    for (size_t i = at; i < at + bytes / CPOOL__PAGE; i++) {
        cpool__page *pg = &sp->page[i];
        if (pg->state != CPOOL__PAGE_OWN) continue;
        cpool__pages_unmap(gp, cpool__page_addr(sp, i), pg->mem);
        cpool__pages_release(gp, pg->mem);
        gp->own_bytes -= CPOOL__PAGE;
        *pg = (cpool__page){.state = CPOOL__PAGE_UNMAPPED};
    }
}

/* Every page memory of the region's own, made and mapped one by one. */
static cpool_status packed_map(void *ctx, void *addr, size_t bytes) {
    cpool__packed_region *pr = ctx;
    cpool__graph_pages *gp = pr->gp;
    if (gp->suspended) return cpool__fail(CPOOL_ERR_SUSPENDED, "the pool is suspended: no page can be mapped");
    cpool__page_span *sp = cpool__span_of(&pr->spans, (uintptr_t)addr);
    size_t at = cpool__page_index(sp, (uintptr_t)addr), n = bytes / CPOOL__PAGE;
    for (size_t i = at; i < at + n; i++) {
        void *mem = NULL;
        cpool_status st = cpool__pages_bound(gp, CPOOL__PAGE);
        if (st == CPOOL_OK) st = gp->source.create(gp->source.ctx, 1, &mem);
        if (st == CPOOL_OK && (st = gp->source.map(gp->source.ctx, cpool__page_addr(sp, i), mem)) != CPOOL_OK)
            gp->source.release(gp->source.ctx, mem);
        if (st != CPOOL_OK) {
            packed_unmap(pr, addr, (i - at) * CPOOL__PAGE);
            return st;
        }
        sp->page[i] = (cpool__page){.state = CPOOL__PAGE_OWN, .mem = mem};
        gp->own_bytes += CPOOL__PAGE;
    }
    return CPOOL_OK;
}

static cpool_status packed_grow(void *ctx, size_t bytes, void **base) {
    cpool__packed_region *pr = ctx;
    return plain_grow(pr->gp, &pr->plain_bytes, bytes, base);
}

static void packed_shrink(void *ctx, void *base, size_t bytes) {
    cpool__packed_region *pr = ctx;
    plain_shrink(pr->gp, &pr->plain_bytes, base, bytes);
}

void cpool__packed_map_init(cpool__packed_region *pr) {
    cpool__segment_source src = {.ctx = pr, .grow = packed_grow, .shrink = packed_shrink};
    if (pr->gp->source.reserve) {
        src.reserve = packed_reserve;
        src.unreserve = packed_unreserve;
        src.map = packed_map;
        src.unmap = packed_unmap;
    }
    /* Every graph's blocks: no capture's branches; blocks up to
     * CPOOL__PACKED_MAX from the top of free memory down, so that page
     * bottoms stay free to lend (tails). */
    cpool__allocator_init_layout(&pr->alloc, &src,
                                 &(cpool__allocator_layout){.span_first = {CPOOL__ARENA_SPAN_SMALL,
                                                                           CPOOL__ARENA_SPAN_LARGE},
                                                            .top_down_max = CPOOL__PACKED_MAX});
}
