/*
 * The records of graph pages (pages_internal.h): spans of addresses and
 * their pages, the pool's shared set, the numbers an arena notes, the one
 * primitive that replaces the memory behind a page, and the loans of
 * packed pages to arenas' tails.
 */
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "pages_internal.h"
#include "status.h"

/* ---- spans ------------------------------------------------------------------ */

cpool__page_span *cpool__span_of(const cpool__span_list *l, uintptr_t addr) {
    for (size_t i = 0; i < l->count; i++) {
        cpool__page_span *sp = &l->spans[i];
        if (addr >= sp->base && addr < sp->base + sp->pages * CPOOL__PAGE) return sp;
    }
    return NULL;
}

size_t cpool__page_index(const cpool__page_span *sp, uintptr_t addr) { return (addr - sp->base) / CPOOL__PAGE; }

void *cpool__page_addr(const cpool__page_span *sp, size_t i) { return (void *)(sp->base + i * CPOOL__PAGE); }

static void span_free(cpool__page_span *sp) {
    free(sp->page);
    free(sp->loan);
}

cpool_status cpool__span_add(cpool__graph_pages *gp, cpool__span_list *l, size_t bytes, bool loans, bool reach,
                             void **base) {
    if (!cpool__grow((void **)&l->spans, &l->cap, sizeof *l->spans, l->count + 1, 2))
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for a graph's address ranges");
    size_t pages = bytes / CPOOL__PAGE;
    cpool__page_span sp = {.pages = pages,
                           .reach = reach ? pages * CPOOL__ARENA_SPAN_REACH : pages,
                           .page = cpool__calloc(pages, sizeof *sp.page),
                           .loan = loans ? cpool__calloc(pages, sizeof *sp.loan) : NULL};
    cpool_status st = sp.page && (sp.loan || !loans)
                          ? gp->source.reserve(gp->source.ctx, sp.reach * CPOOL__PAGE, base)
                          : cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for a graph's address ranges");
    if (st == CPOOL_ERR_OUT_OF_MEMORY && sp.page && sp.reach > pages) { /* address space runs short: no reach */
        sp.reach = pages;
        st = gp->source.reserve(gp->source.ctx, bytes, base);
    }
    if (st != CPOOL_OK) {
        span_free(&sp);
        return st;
    }
    sp.base = (uintptr_t)*base;
    l->spans[l->count++] = sp;
    return CPOOL_OK;
}

void cpool__span_remove(cpool__graph_pages *gp, cpool__span_list *l, void *base, size_t bytes) {
    cpool__page_span *sp = cpool__span_of(l, (uintptr_t)base);
    size_t reach = sp->reach;
    (void)bytes; /* the records' part of what was reserved */
    span_free(sp);
    *sp = l->spans[--l->count];
    gp->source.unreserve(gp->source.ctx, base, reach * CPOOL__PAGE);
}

void cpool__span_list_free(cpool__span_list *l) {
    for (size_t i = 0; i < l->count; i++) span_free(&l->spans[i]);
    free(l->spans);
    *l = (cpool__span_list){0};
}

/* ---- the shared set -------------------------------------------------------- */

void cpool__pages_unmap(cpool__graph_pages *gp, void *addr, void *mem) {
    if (!gp->suspended) gp->source.unmap(gp->source.ctx, addr, mem);
}

void cpool__pages_release(cpool__graph_pages *gp, void *mem) {
    if (!gp->suspended) gp->source.release(gp->source.ctx, mem);
}

cpool_status cpool__pages_bound(const cpool__graph_pages *gp, uint64_t bytes) {
    if (!gp->max_reserved || *gp->other_reserved + gp->shared_bytes + gp->own_bytes + bytes <= gp->max_reserved)
        return CPOOL_OK;
    return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY,
                       "%llu more bytes of graph memory would take the pool past max_reserved_bytes (%llu)",
                       (unsigned long long)bytes, (unsigned long long)gp->max_reserved);
}

/* Room in the records for shared numbers up to `last`. */
static cpool_status shared_room(cpool__graph_pages *gp, size_t last) {
    if (cpool__grow((void **)&gp->shared, &gp->shared_cap, sizeof *gp->shared, last + 1, 16)) return CPOOL_OK;
    return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for the graph pages' records");
}

cpool_status cpool__shared_get(cpool__graph_pages *gp, size_t k, void **out) {
    cpool_status st = shared_room(gp, k);
    if (st != CPOOL_OK) return st;
    if (k >= gp->shared_count) gp->shared_count = k + 1;
    cpool__shared_page *sp = &gp->shared[k];
    if (!sp->page) {
        st = cpool__pages_bound(gp, CPOOL__PAGE);
        if (st == CPOOL_OK) st = gp->source.create(gp->source.ctx, 1, &sp->page);
        if (st != CPOOL_OK) return st;
        gp->shared_bytes += CPOOL__PAGE;
    }
    *out = sp->page;
    return CPOOL_OK;
}

/* The shared set ends at its last number that has a page. */
void cpool__shared_trim_count(cpool__graph_pages *gp) {
    while (gp->shared_count && !gp->shared[gp->shared_count - 1].page) gp->shared_count--;
}

bool cpool__shared_allocation_at(const cpool__graph_pages *gp, size_t k) {
    return gp->shared[k].page && (!gp->shared[k].run || gp->shared[k].run->first == k);
}

void cpool__shared_release_unmapped(cpool__graph_pages *gp, size_t from, size_t to) {
    for (size_t k = from; k < to && k < gp->shared_count; k++) {
        cpool__shared_page *sp = &gp->shared[k];
        if (sp->page && !sp->maps && !sp->run) {
            cpool__pages_release(gp, sp->page);
            sp->page = NULL;
            gp->shared_bytes -= CPOOL__PAGE;
        }
    }
    cpool__shared_trim_count(gp);
}

void cpool__shared_unmapped(cpool__graph_pages *gp, size_t k) {
    if (--gp->shared[k].maps == 0) cpool__shared_release_unmapped(gp, k, k + 1);
}

/* ---- numbers ------------------------------------------------------------------ */

void cpool__number_untake(cpool__arena *ar, size_t d) {
    ar->taken[d] = CPOOL__NUMBER_FREE;
    if (d < ar->low_free) ar->low_free = d;
}

bool cpool__number_taken_room(cpool__arena *ar, size_t last) {
    return cpool__grow((void **)&ar->taken, &ar->taken_cap, 1, last + 1, 64);
}

cpool_status cpool__number_room(cpool__arena *ar, size_t last) {
    cpool_status st = shared_room(ar->gp, last);
    if (st == CPOOL_OK && !cpool__number_taken_room(ar, last))
        st = cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory numbering a graph's pages");
    return st;
}

/* ---- arenas' states ---------------------------------------------------------- */

bool cpool__arena_idle(const cpool__arena *ar) { return !ar->in_use && !ar->alloc.map_count && !ar->packed_count; }

bool cpool__arena_work_over(const cpool__arena *ar) {
    return !ar->work_unknown && (!ar->work || cpool__order_mark_done(ar->work));
}

/* ---- the swap ------------------------------------------------------------------ */

void cpool__page_let_go(cpool__arena *ar, cpool__page_span *sp, size_t i) {
    cpool__graph_pages *gp = ar->gp;
    cpool__page *pg = &sp->page[i];
    if (pg->state == CPOOL__PAGE_BORROWED) {
        cpool__loan_end_borrow(gp, sp, i);
    } else if (pg->state == CPOOL__PAGE_OWN) {
        cpool__pages_release(gp, pg->mem);
        gp->own_bytes -= CPOOL__PAGE;
    } else if (pg->state == CPOOL__PAGE_SHARED) {
        cpool__number_untake(ar, pg->number);
        cpool__shared_unmapped(gp, pg->number);
    }
    *pg = (cpool__page){.state = CPOOL__PAGE_UNMAPPED};
}

cpool_status cpool__page_swap(cpool__arena *ar, cpool__page_span *sp, size_t i, void *from, void *to) {
    cpool__graph_pages *gp = ar->gp;
    void *addr = cpool__page_addr(sp, i);
    gp->source.unmap(gp->source.ctx, addr, from);
    cpool_status st = gp->source.map(gp->source.ctx, addr, to);
    if (st != CPOOL_OK) {
        cpool__error_mark why;
        cpool__error_save(&why);
        if (gp->source.map(gp->source.ctx, addr, from) != CPOOL_OK) { /* nothing behind the page any more */
            cpool__page_let_go(ar, sp, i);
            atomic_store(&ar->lost, true);
        }
        cpool__error_restore(&why); /* the swap's failure, not the restore's */
    }
    return st;
}

/* ---- loans ------------------------------------------------------------------ */

void cpool__loan_end(cpool__graph_pages *gp, cpool__page_span *lsp, size_t j) {
    cpool__packed_region *pr = gp->packed;
    uintptr_t page = lsp->base + j * CPOOL__PAGE;
    cpool__block_info info;
    /* The blocks it lent, from its start, one after another. */
    for (uintptr_t at = page; at < page + lsp->loan[j].lent; at += info.size) {
        if (!cpool__allocator_live_block(&pr->alloc, (void *)at, &info)) break;
        cpool__allocator_end_loan(&pr->alloc, at);
        pr->lent_blocks--;
    }
    pr->lent_bytes -= lsp->loan[j].lent;
    lsp->loan[j].lent = 0;
}

void cpool__loan_end_borrow(cpool__graph_pages *gp, cpool__page_span *sp, size_t i) {
    cpool__page_span *lsp = cpool__span_of(&gp->packed->spans, sp->page[i].lender);
    size_t j = cpool__page_index(lsp, sp->page[i].lender);
    if (--lsp->loan[j].borrowers == 0) cpool__loan_end(gp, lsp, j);
    sp->page[i] = (cpool__page){.state = CPOOL__PAGE_UNMAPPED};
}
