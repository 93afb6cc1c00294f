/*
 * A capture's end (graph_pages.h): the pages of live blocks become the
 * arena's own, the pages left shared settle onto the lowest numbers, and
 * a last page filled only in part borrows a packed page ("tails" below).
 */
#include <stdlib.h>

#include "fault.h"
#include "pages_internal.h"
#include "status.h"
#include "thread.h"

/* ---- the pages of live blocks ------------------------------------------------ */

/* Pages of live blocks, collected by a walk. */
typedef struct page_list {
    uintptr_t *addr;
    size_t count, cap;
    bool failed;
    const cpool__arena *ar; /* its scratch parts are no live pages */
} page_list;

static void note_page(page_list *l, uintptr_t addr) {
    if (l->count && l->addr[l->count - 1] == addr) return; /* blocks come in address order */
    if (!cpool__grow((void **)&l->addr, &l->cap, sizeof *l->addr, l->count + 1, 16))
        l->failed = true;
    else
        l->addr[l->count++] = addr;
}

/* Whether the page at p lies whole in a scratch part of live block b. */
static bool scratch_page(const cpool__arena *ar, const cpool__block_view *b, uintptr_t p) {
    for (size_t k = 0; k < ar->scratch_count; k++) {
        const struct cpool__scratch_part *part = &ar->scratch[k];
        if (part->block == b->addr && part->serial == b->serial && part->lo <= p && p + CPOOL__PAGE <= part->hi)
            return true;
    }
    return false;
}

static void live_pages_block(void *ctx, const cpool__block_view *b) {
    page_list *l = ctx;
    if (!b->live) return;
    uintptr_t first = b->addr / CPOOL__PAGE * CPOOL__PAGE;
    for (uintptr_t p = first; p < b->addr + b->size; p += CPOOL__PAGE)
        if (!scratch_page(l->ar, b, p)) note_page(l, p);
}

static page_list live_pages(const cpool__arena *ar) {
    page_list l = {.ar = ar};
    cpool__allocator_walk(&ar->alloc, &(cpool__walker){.ctx = &l, .block = live_pages_block});
    return l;
}

static bool address_listed(const uintptr_t *list, size_t count, uintptr_t addr) {
    for (size_t k = 0; k < count; k++)
        if (list[k] == addr) return true;
    return false;
}

cpool_status cpool__arena_note_scratch(cpool__arena *ar, void *block, size_t offset, size_t bytes) {
    cpool__block_info info;
    if (!cpool__allocator_live_block(&ar->alloc, block, &info))
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%p is no live block of the capture's own memory", block);
    if (offset > info.size || bytes > info.size - offset)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%zu bytes at offset %zu reach past the block's %zu", bytes,
                           offset, info.size);
    uintptr_t lo = (uintptr_t)block + offset;
    lo = (lo + CPOOL__PAGE - 1) / CPOOL__PAGE * CPOOL__PAGE;
    uintptr_t hi = ((uintptr_t)block + offset + bytes) / CPOOL__PAGE * CPOOL__PAGE;
    if (hi <= lo) return CPOOL_OK; /* no whole page: nothing to share */
    if (!cpool__grow((void **)&ar->scratch, &ar->scratch_cap, sizeof *ar->scratch, ar->scratch_count + 1, 8))
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory noting a block's scratch");
    ar->scratch[ar->scratch_count++] = (struct cpool__scratch_part){(uintptr_t)block, lo, hi, info.serial};
    return CPOOL_OK;
}

/* ---- settling: shared pages onto the lowest numbers ---------------------------- */

/* Moves the arena's pages alone that map shared memory, in address order,
 * to the lowest numbers it does not use: its outputs' pages, mapped first
 * and now its own, left their numbers free, and other graphs start their
 * scratch at the lowest. The graph has not run, so a page may change
 * behind its address. A page moves only to a number no page of the arena
 * maps, so nothing aliases even if a move fails midway (the page then
 * stays where it was). */
static void compact_numbers(cpool__graph_pages *gp, cpool__arena *ar) {
    cpool_status st; /* a page that cannot move stays where it is: no failure */
    for (size_t s = 0; s < ar->spans.count; s++) {
        cpool__page_span *sp = &ar->spans.spans[s];
        for (size_t i = 0; i < sp->pages; i++) {
            cpool__page *pg = &sp->page[i];
            size_t d, old = pg->number;
            if (pg->state != CPOOL__PAGE_SHARED || gp->shared[old].run ||
                !cpool__number_next_splitting(ar, 1, &d, &st) || d >= old)
                continue;
            void *page;
            if (cpool__shared_get(gp, d, &page) != CPOOL_OK) return;
            if (cpool__page_swap(ar, sp, i, gp->shared[old].page, page) != CPOOL_OK) {
                cpool__shared_release_unmapped(gp, d, d + 1);
                return;
            }
            gp->shared[d].maps++;
            ar->taken[d] = CPOOL__NUMBER_TAKEN;
            cpool__number_untake(ar, old);
            pg->number = d;
            cpool__shared_unmapped(gp, old);
        }
    }
}

/* Whether run could take the shared numbers [d, d + run->pages): each is
 * one of its own or has no page (no arena notes a number without one). */
static bool run_fits(const cpool__graph_pages *gp, const cpool__page_run *run, size_t d) {
    for (size_t k = d; k < d + run->pages && k < gp->shared_count; k++)
        if (gp->shared[k].page && gp->shared[k].run != run) return false;
    return true;
}

/* Renumbers run (pages i.. of sp) to start at d: records only, as the
 * memory behind the arena's addresses stays the same. */
static void renumber_run(cpool__graph_pages *gp, cpool__arena *ar, cpool__page_span *sp, size_t i,
                         cpool__page_run *run, size_t d) {
    for (size_t j = 0; j < run->pages; j++) {
        gp->shared[run->first + j] = (cpool__shared_page){0};
        cpool__number_untake(ar, run->first + j);
    }
    for (size_t j = 0; j < run->pages; j++) { /* d + j < run->first + j: within the records' room */
        gp->shared[d + j] = (cpool__shared_page){.page = run->mem, .maps = 1, .run = run};
        ar->taken[d + j] = CPOOL__NUMBER_TAKEN;
        sp->page[i + j].number = d + j;
    }
    run->first = d;
    cpool__shared_trim_count(gp);
}

/* Moves each of the arena's runs to the lowest numbers it fits (run_fits):
 * like compact_numbers, but only the records change (only this arena maps
 * a run). */
static void slide_runs(cpool__graph_pages *gp, cpool__arena *ar) {
    for (size_t s = 0; s < ar->spans.count; s++) {
        cpool__page_span *sp = &ar->spans.spans[s];
        for (size_t i = 0; i < sp->pages; i++) {
            cpool__page_run *run = cpool__run_starting_at(gp, sp, i);
            if (!run || !cpool__run_alone_in_one(run)) continue; /* other arenas' records would change too */
            size_t d = 0;
            while (d < run->first && !run_fits(gp, run, d)) d++;
            if (d < run->first) renumber_run(gp, ar, sp, i, run, d);
            i += run->pages - 1;
        }
    }
}

/* A run of the arena that numbers below it do not fit (slide_runs) while
 * some of them are free for it leaves those free and holds as many pages
 * more at the top: its last pages, as many as such numbers, become pages
 * alone, which compact_numbers then moves down (the arena never ran). */
static void split_run_tails(cpool__graph_pages *gp, cpool__arena *ar) {
    for (size_t s = 0; s < ar->spans.count; s++) {
        cpool__page_span *sp = &ar->spans.spans[s];
        for (size_t i = 0; i < sp->pages; i++) {
            cpool__page_run *run = cpool__run_starting_at(gp, sp, i);
            if (!run) continue;
            i += run->pages - 1;
            if (!cpool__run_alone_in_one(run)) continue; /* other arenas' graphs may be running on it */
            size_t free_below = 0;
            for (size_t d = 0; d < run->first; d++)
                free_below += (d >= ar->taken_cap || !ar->taken[d]) && !gp->shared[d].run;
            if (!free_below) continue;
            uint8_t *cut = cpool__calloc(run->pages, 1);
            if (!cut) return;
            for (size_t j = run->pages - (free_below < run->pages ? free_below : run->pages); j < run->pages; j++)
                cut[j] = 1;
            (void)cpool__run_split(gp, run, cut); /* left whole, it only shares less */
            free(cut);
        }
    }
}

/* The runs this arena's capture found in use and left alone: split now if
 * their work is over, so that compaction moves its pages onto them. */
static void retry_blocked(cpool__graph_pages *gp, cpool__arena *ar) {
    for (size_t d = 0; d < ar->taken_cap && d < gp->shared_count; d++) {
        if (ar->taken[d] != CPOOL__NUMBER_BLOCKED) continue;
        cpool__page_run *run = gp->shared[d].run;
        size_t last = run ? run->first + run->pages - 1 : d;
        if (!run)
            cpool__number_untake(ar, d);
        else if (!cpool__run_split_quiet(gp, run, ar, 0, run->pages))
            d = last; /* still whole (or gone, if it could not be mapped back) */
    }
}

/* Pages of the arena's own that no live block is on any more (outputs
 * freed since) go back to the shared set: each becomes the shared page of
 * a number none has (records only), which compact_numbers may then move
 * lower. */
static void share_freed_pages(cpool__graph_pages *gp, cpool__arena *ar) {
    if (!gp->own_bytes) return;
    page_list live = live_pages(ar);
    size_t d = 0;
    for (size_t s = 0; s < ar->spans.count && !live.failed; s++) {
        cpool__page_span *sp = &ar->spans.spans[s];
        for (size_t i = 0; i < sp->pages; i++) {
            cpool__page *pg = &sp->page[i];
            if (pg->state != CPOOL__PAGE_OWN || address_listed(live.addr, live.count, sp->base + i * CPOOL__PAGE))
                continue;
            while (d < gp->shared_count && (gp->shared[d].page || (d < ar->taken_cap && ar->taken[d]))) d++;
            if (cpool__number_room(ar, d) != CPOOL_OK) break;
            gp->shared[d] = (cpool__shared_page){.page = pg->mem, .maps = 1};
            if (d >= gp->shared_count) gp->shared_count = d + 1;
            ar->taken[d] = CPOOL__NUMBER_TAKEN;
            *pg = (cpool__page){.state = CPOOL__PAGE_SHARED, .number = d};
            gp->own_bytes -= CPOOL__PAGE;
            gp->shared_bytes += CPOOL__PAGE;
        }
    }
    free(live.addr);
}

/* Moves the arena's shared pages to the lowest numbers they can take: the
 * runs it left alone first if they can be split now, then its pages alone,
 * its runs, and its runs' tails where numbers below are free. Nothing may
 * use the arena's shared pages (its capture's end, or its graph's launches
 * held back); what cannot move stays, which is no failure. */
static void settle(cpool__graph_pages *gp, cpool__arena *ar) {
    cpool__error_mark before;
    cpool__error_save(&before);
    share_freed_pages(gp, ar);
    retry_blocked(gp, ar);
    compact_numbers(gp, ar);
    slide_runs(gp, ar);
    split_run_tails(gp, ar);
    compact_numbers(gp, ar);
    cpool__error_restore(&before);
}

static bool graphs_unsettled(const cpool__graph_pages *gp) {
    for (const cpool__arena *ar = gp->arenas; ar; ar = ar->next)
        if (ar->graph && ar->unsettled) return true;
    return false;
}

void cpool__seal_settle_graphs(cpool__graph_pages *gp) {
    if (graphs_unsettled(gp) && !gp->suspended && !cpool__on_stream_thread() && gp->source.hold_launches &&
        gp->source.hold_launches(gp->source.ctx, false)) {
        gp->holding = true;
        for (cpool__arena *ar = gp->arenas; ar; ar = ar->next) {
            if (!ar->graph || !ar->unsettled) continue;
            ar->unsettled = false; /* settle may block a run again, and note it */
            settle(gp, ar);
        }
        gp->holding = false;
        gp->source.release_launches(gp->source.ctx);
    }
    /* Captures still open may have found runs in use: their seals settle. */
    gp->unsettled = false;
    for (cpool__arena *ar = gp->arenas; ar && !gp->unsettled; ar = ar->next) gp->unsettled = ar->unsettled;
}

/* ---- tails ------------------------------------------------------------------ */

/*
 * The packed region hands its small blocks out from the top of its pages
 * down (alloc.h, top_down_max), so their bottoms stay free: at its seal an
 * arena's tail page, written only in part and mapped by no other arena,
 * borrows one (cpool__allocator_lend; graphs share those bytes as they
 * share pages, never the outputs above), and its shared page goes back.
 */

/* The packed pages an arena's pages borrow: two pages of one arena never
 * share memory. Listed once at its seal (a handful), not searched for
 * every packed page. */
typedef struct address_list {
    uintptr_t *addr;
    size_t count, cap;
} address_list;

/* false: out of host memory (the last error says so; lend_tails keeps it). */
static bool list_address(address_list *l, uintptr_t addr) {
    if (!cpool__grow((void **)&l->addr, &l->cap, sizeof *l->addr, l->count + 1, 8)) {
        (void)cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory listing a graph's lent pages");
        return false;
    }
    l->addr[l->count++] = addr;
    return true;
}

/* A packed page, not in `taken`, that lends at least its first `bytes`
 * (lent now if they were free): its span, and its index in *j; NULL if
 * none can. */
static cpool__page_span *find_lender(cpool__graph_pages *gp, const address_list *taken, size_t bytes, size_t *j) {
    cpool__packed_region *pr = gp->packed;
    for (size_t s = 0; s < pr->spans.count; s++) {
        cpool__page_span *lsp = &pr->spans.spans[s];
        for (*j = 0; *j < lsp->pages; (*j)++) {
            uintptr_t addr = lsp->base + *j * CPOOL__PAGE;
            cpool__page_loan *loan = &lsp->loan[*j];
            if (lsp->page[*j].state != CPOOL__PAGE_OWN || address_listed(taken->addr, taken->count, addr)) continue;
            if (loan->lent >= bytes) return lsp;
            /* More bytes: the next ones, lent as a block of their own. */
            if (!cpool__allocator_lend(&pr->alloc, addr + loan->lent, bytes - loan->lent)) continue;
            pr->lent_bytes += bytes - loan->lent;
            pr->lent_blocks++;
            loan->lent = (uint32_t)bytes;
            return lsp;
        }
    }
    return NULL;
}

/* The arena's tails (one a segment), as many as it has. */
typedef struct tail_list {
    struct tail {
        uintptr_t page;
        size_t extent;
    } *at;
    size_t count, cap;
} tail_list;

static void note_tail(void *ctx, uintptr_t page, size_t extent) {
    tail_list *l = ctx;
    /* Out of host memory: this tail keeps its shared page. */
    if (cpool__grow((void **)&l->at, &l->cap, sizeof *l->at, l->count + 1, 8))
        l->at[l->count++] = (struct tail){page, extent};
}

/* The arena's tail page at addr, its blocks below `extent`, borrows a
 * packed page if it maps a shared page that no other arena maps (which
 * then goes back). Its capture just ended: its graph has not run. A tail
 * left as it was is no failure. */
static void lend_tail(cpool__graph_pages *gp, cpool__arena *ar, address_list *taken, uintptr_t addr, size_t extent) {
    cpool__page_span *sp = cpool__span_of(&ar->spans, addr);
    size_t i = sp ? cpool__page_index(sp, addr) : 0, j;
    cpool__page *pg = sp ? &sp->page[i] : NULL;
    if (!pg || pg->state != CPOOL__PAGE_SHARED || extent >= CPOOL__PAGE || gp->shared[pg->number].maps != 1) return;
    cpool__page_span *lsp = find_lender(gp, taken, extent, &j);
    if (!lsp) return;
    if (!list_address(taken, lsp->base + j * CPOOL__PAGE)) { /* unlisted, a later tail could take it too */
        if (!lsp->loan[j].borrowers) cpool__loan_end(gp, lsp, j);
        return;
    }
    size_t d = pg->number;
    cpool__page_run *run = gp->shared[d].run;
    void *mem = lsp->page[j].mem;
    if ((run && !cpool__run_split_quiet(gp, run, ar, d - run->first, 1)) ||
        cpool__page_swap(ar, sp, i, gp->shared[d].page, mem) != CPOOL_OK) {
        taken->count--;
        if (!lsp->loan[j].borrowers) cpool__loan_end(gp, lsp, j); /* lent for nothing */
        return;
    }
    *pg = (cpool__page){.state = CPOOL__PAGE_BORROWED, .mem = mem, .lender = lsp->base + j * CPOOL__PAGE};
    lsp->loan[j].borrowers++;
    cpool__number_untake(ar, d);
    cpool__shared_unmapped(gp, d);
}

/* Each of the arena's tails (cpool__allocator_tails) tries to borrow. */
static void lend_tails(cpool__graph_pages *gp, cpool__arena *ar) {
    if (!gp->packed || gp->suspended || !ar->spans.count) return;
    tail_list tails = {0};
    cpool__allocator_tails(&ar->alloc, note_tail, &tails);
    cpool__error_mark before;
    cpool__error_save(&before);
    address_list taken = {0};
    bool listed_all = true;
    for (size_t s = 0; s < ar->spans.count; s++)
        for (size_t i = 0; i < ar->spans.spans[s].pages; i++)
            if (ar->spans.spans[s].page[i].state == CPOOL__PAGE_BORROWED)
                listed_all = listed_all && list_address(&taken, ar->spans.spans[s].page[i].lender);
    for (size_t k = 0; listed_all && k < tails.count; k++) lend_tail(gp, ar, &taken, tails.at[k].page, tails.at[k].extent);
    cpool__error_restore(&before);
    free(taken.addr);
    free(tails.at);
}

cpool_status cpool__seal_return_borrowed(cpool__graph_pages *gp, cpool__arena *ar) {
    for (size_t s = 0; s < ar->spans.count; s++) {
        cpool__page_span *sp = &ar->spans.spans[s];
        for (size_t i = 0; i < sp->pages; i++) {
            if (sp->page[i].state != CPOOL__PAGE_BORROWED) continue;
            size_t d;
            void *page;
            cpool_status st = CPOOL_OK;
            if (!cpool__number_next_splitting(ar, 1, &d, &st)) return st;
            if ((st = cpool__shared_get(gp, d, &page)) != CPOOL_OK) return st;
            if ((st = cpool__page_swap(ar, sp, i, sp->page[i].mem, page)) != CPOOL_OK) {
                cpool__shared_release_unmapped(gp, d, d + 1);
                return st;
            }
            cpool__loan_end_borrow(gp, sp, i);
            gp->shared[d].maps++;
            ar->taken[d] = CPOOL__NUMBER_TAKEN;
            sp->page[i] = (cpool__page){.state = CPOOL__PAGE_SHARED, .number = d};
        }
    }
    return CPOOL_OK;
}

/* ---- the seal ----------------------------------------------------------------- */

/* The runs that hold pages of live blocks are split around them, so that
 * those pages can become the arena's own (nothing ran in it since its
 * capture took it). */
static cpool_status split_live_runs(cpool__graph_pages *gp, cpool__arena *ar, const page_list *l) {
    for (size_t k = 0; k < l->count; k++) {
        cpool__page_span *sp = cpool__span_of(&ar->spans, l->addr[k]);
        const cpool__page *pg = &sp->page[cpool__page_index(sp, l->addr[k])];
        cpool__page_run *run = pg->state == CPOOL__PAGE_SHARED ? gp->shared[pg->number].run : NULL;
        if (!run) continue;
        uint8_t *cut = cpool__calloc(run->pages, 1);
        if (!cut) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory sealing a graph's pages");
        uintptr_t at = cpool__run_map_of(run, ar)->addr, end = at + run->pages * CPOOL__PAGE;
        for (size_t m = 0; m < l->count; m++)
            if (l->addr[m] >= at && l->addr[m] < end) cut[(l->addr[m] - at) / CPOOL__PAGE] = 1;
        cpool_status st = cpool__run_split(gp, run, cut);
        free(cut);
        if (st != CPOOL_OK) return st;
    }
    return CPOOL_OK;
}

/* The pages at addrs[0..n) of ar, each mapping a shared page that other
 * arenas map too, get memory of their own, all made first (a failure to
 * make one changes nothing). Swapped: the graph has not run, so the new
 * page needs no copy. On a failed swap the pages swapped so far stay the
 * arena's own. */
static cpool_status own_pages(cpool__graph_pages *gp, cpool__arena *ar, const uintptr_t *addrs, size_t n) {
    cpool_status st = CPOOL_OK;
    void **fresh = n ? cpool__calloc(n, sizeof *fresh) : NULL;
    if (n && !fresh) st = cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory sealing a graph's pages");
    if (st == CPOOL_OK) st = cpool__pages_bound(gp, (uint64_t)n * CPOOL__PAGE);
    size_t made = 0;
    for (; st == CPOOL_OK && made < n; made++) st = gp->source.create(gp->source.ctx, 1, &fresh[made]);
    for (size_t k = 0; st == CPOOL_OK && k < n; k++) {
        cpool__page_span *sp = cpool__span_of(&ar->spans, addrs[k]);
        size_t i = cpool__page_index(sp, addrs[k]), d = sp->page[i].number;
        if ((st = cpool__page_swap(ar, sp, i, gp->shared[d].page, fresh[k])) != CPOOL_OK) break;
        sp->page[i] = (cpool__page){.state = CPOOL__PAGE_OWN, .mem = fresh[k]};
        cpool__number_untake(ar, d);
        cpool__shared_unmapped(gp, d);
        fresh[k] = NULL;
        gp->own_bytes += CPOOL__PAGE;
    }
    for (size_t k = 0; k < made; k++)
        if (fresh[k]) gp->source.release(gp->source.ctx, fresh[k]);
    free(fresh);
    return st;
}

/* The listed pages that map a shared page no other arena maps become the
 * arena's own (records only: the number gets a new page when another
 * arena needs it); the others are left in the list, counted in *n. */
static void take_unshared(cpool__graph_pages *gp, cpool__arena *ar, page_list *l, size_t *n) {
    *n = 0;
    for (size_t k = 0; k < l->count; k++) {
        cpool__page_span *sp = cpool__span_of(&ar->spans, l->addr[k]);
        cpool__page *pg = &sp->page[cpool__page_index(sp, l->addr[k])];
        if (pg->state != CPOOL__PAGE_SHARED) continue;
        cpool__shared_page *shared = &gp->shared[pg->number];
        if (shared->maps == 1) {
            cpool__number_untake(ar, pg->number);
            *pg = (cpool__page){.state = CPOOL__PAGE_OWN, .mem = shared->page};
            *shared = (cpool__shared_page){0};
            gp->shared_bytes -= CPOOL__PAGE;
            gp->own_bytes += CPOOL__PAGE;
            continue;
        }
        l->addr[(*n)++] = l->addr[k];
    }
}

static cpool_status seal_pages(cpool__graph_pages *gp, cpool__arena *ar) {
    if (!ar->spans.count) return CPOOL_OK; /* plain segments: nothing shared */
    page_list l = live_pages(ar);
    cpool_status st = l.failed ? cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory sealing a graph's pages")
                               : split_live_runs(gp, ar, &l);
    size_t n = 0;
    if (st == CPOOL_OK) take_unshared(gp, ar, &l, &n);
    if (st == CPOOL_OK) st = own_pages(gp, ar, l.addr, n);
    free(l.addr);
    if (st == CPOOL_OK) {
        settle(gp, ar);
        lend_tails(gp, ar);
    }
    return st;
}

cpool_status cpool__arena_seal(cpool__graph_pages *gp, cpool__arena *ar, uint64_t graph_id) {
    cpool_status st = seal_pages(gp, ar);
    if (st == CPOOL_OK && atomic_load(&ar->lost)) /* the tails' splits may fail quietly, not so */
        st = cpool__fail(CPOOL_ERR_OUT_OF_MEMORY,
                         "pages of the graph's memory were lost (a remap failed, and so did mapping the old memory back)");
    if (st != CPOOL_OK) return st;
    cpool__seal_settle_graphs(gp); /* other graphs' pages, where their captures found a run in use */
    if (graph_id) ar->graph = graph_id;
    return CPOOL_OK;
}
