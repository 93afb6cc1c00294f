/*
 * Runs, and the shared numbers an arena's pages map.
 *
 * An arena's page that maps shared memory maps the shared page of its
 * number. A page takes the lowest number the arena does not use yet, so
 * captures that map in the same order map the same shared pages. Two
 * pages of one arena never share a number, so the allocator's rules inside
 * one capture are enough; two arenas' pages of the same number share
 * memory, which is the point.
 *
 * A page of its own costs the platform a create, a map and an access
 * setting each (about 45 us on an H200), where one allocation of many
 * pages costs about as much as one page. So where a capture maps pages for
 * which the pool has no shared page yet (the numbers past the last), they
 * are made as one allocation, a run, mapped whole by that capture's arena.
 * The platform maps an allocation only whole, so a run's page can be
 * neither mapped alone by another arena nor made an arena's own: what
 * needs that splits the run first (new memory for its pieces, mapped where
 * it was; nothing is copied, as no work may use it then). Its arena's
 * capture splits it at will (nothing ran there since); another arena's
 * capture splits it only while no work can use it: its arena idle with its
 * work over, or its graph's launches held back (hold_launches, which never
 * waits). Else that capture leaves the run's numbers alone (BLOCKED) and
 * maps others; its seal tries again and moves its pages onto them.
 */
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "pages_internal.h"
#include "status.h"

/* Shared numbers [first, first + n) changed (a run split or gone): no
 * arena keeps them blocked. */
static void unblock(cpool__graph_pages *gp, size_t first, size_t n) {
    for (cpool__arena *ar = gp->arenas; ar; ar = ar->next)
        for (size_t d = first; d < first + n && d < ar->taken_cap; d++)
            if (ar->taken[d] == CPOOL__NUMBER_BLOCKED) cpool__number_untake(ar, d);
}

void cpool__run_drop(cpool__graph_pages *gp, cpool__page_run *run, bool mapped) {
    cpool__arena *ar = run->arena;
    cpool__page_span *sp = cpool__span_of(&ar->spans, run->addr);
    size_t at = cpool__page_index(sp, run->addr);
    if (mapped) cpool__pages_unmap(gp, (void *)run->addr, run->mem);
    cpool__pages_release(gp, run->mem);
    unblock(gp, run->first, run->pages);
    for (size_t j = 0; j < run->pages; j++) {
        sp->page[at + j] = (cpool__page){.state = CPOOL__PAGE_UNMAPPED};
        cpool__number_untake(ar, run->first + j);
        gp->shared[run->first + j] = (cpool__shared_page){0};
    }
    gp->shared_bytes -= run->pages * CPOOL__PAGE;
    cpool__shared_trim_count(gp);
    free(run);
}

cpool_status cpool__run_map_new(cpool__arena *ar, cpool__page_span *sp, size_t at, size_t n, size_t first) {
    cpool__graph_pages *gp = ar->gp;
    if (!cpool__pages_bound_allows(gp, n * CPOOL__PAGE)) return cpool__pages_over_bound(gp, n * CPOOL__PAGE);
    cpool_status st = cpool__number_room(ar, first + n - 1);
    if (st != CPOOL_OK) return st;
    cpool__page_run *run = cpool__calloc(1, sizeof *run);
    if (!run) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for a run of graph pages");
    *run = (cpool__page_run){.first = first, .pages = n, .arena = ar, .addr = sp->base + at * CPOOL__PAGE};
    st = gp->source.create(gp->source.ctx, n, &run->mem);
    if (st == CPOOL_OK) {
        st = gp->source.map(gp->source.ctx, (void *)run->addr, run->mem);
        if (st != CPOOL_OK) gp->source.release(gp->source.ctx, run->mem);
    }
    if (st != CPOOL_OK) {
        free(run);
        return st;
    }
    for (size_t j = 0; j < n; j++) {
        gp->shared[first + j] = (cpool__shared_page){.page = run->mem, .maps = 1, .run = run};
        ar->taken[first + j] = CPOOL__NUMBER_TAKEN;
        sp->page[at + j] = (cpool__page){.state = CPOOL__PAGE_SHARED, .number = first + j};
    }
    if (first + n > gp->shared_count) gp->shared_count = first + n;
    gp->shared_bytes += n * CPOOL__PAGE;
    return CPOOL_OK;
}

/* The pieces a split makes: each page with cut[j] set alone, each
 * stretch between them one piece. */
typedef struct run_piece {
    size_t start, pages;
    void *mem;
    cpool__page_run *run; /* its record, for a piece of two pages or more */
} run_piece;

static size_t cut_pieces(const cpool__page_run *run, const uint8_t *cut, run_piece *piece) {
    size_t count = 0;
    for (size_t j = 0; j < run->pages; count++) {
        piece[count].start = j;
        if (!cut[j++])
            while (j < run->pages && !cut[j]) j++;
        piece[count].pages = j - piece[count].start;
    }
    return count;
}

/* Memory and records for every piece; on failure *made says how far it got. */
static cpool_status make_pieces(cpool__graph_pages *gp, run_piece *piece, size_t count, size_t *made) {
    for (*made = 0; *made < count; (*made)++) {
        run_piece *p = &piece[*made];
        if (p->pages > 1 && !(p->run = cpool__calloc(1, sizeof *p->run)))
            return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory splitting a run of graph pages");
        cpool_status st = gp->source.create(gp->source.ctx, p->pages, &p->mem);
        if (st != CPOOL_OK) return st;
    }
    return CPOOL_OK;
}

/* Maps the pieces where the run was; on failure the run is mapped back
 * (*lost: not even that). */
static cpool_status map_pieces(cpool__graph_pages *gp, cpool__page_run *run, run_piece *piece, size_t count,
                               bool *lost) {
    cpool__pages_unmap(gp, (void *)run->addr, run->mem);
    size_t mapped = 0;
    cpool_status st = CPOOL_OK;
    for (; mapped < count; mapped++) {
        st = gp->source.map(gp->source.ctx, (void *)(run->addr + piece[mapped].start * CPOOL__PAGE), piece[mapped].mem);
        if (st != CPOOL_OK) break;
    }
    if (st == CPOOL_OK) return CPOOL_OK;
    while (mapped--)
        gp->source.unmap(gp->source.ctx, (void *)(run->addr + piece[mapped].start * CPOOL__PAGE), piece[mapped].mem);
    *lost = gp->source.map(gp->source.ctx, (void *)run->addr, run->mem) != CPOOL_OK;
    return st;
}

cpool_status cpool__run_split(cpool__graph_pages *gp, cpool__page_run *run, const uint8_t *cut) {
    run_piece *piece = cpool__calloc(run->pages, sizeof *piece); /* at most a piece a page */
    if (!piece) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory splitting a run of graph pages");
    size_t count = cut_pieces(run, cut, piece), made;
    bool lost = false;
    cpool_status st = make_pieces(gp, piece, count, &made);
    if (st == CPOOL_OK) st = map_pieces(gp, run, piece, count, &lost);
    if (st != CPOOL_OK) {
        for (size_t k = 0; k <= made && k < count; k++) {
            if (piece[k].mem) gp->source.release(gp->source.ctx, piece[k].mem);
            free(piece[k].run);
        }
        free(piece);
        if (lost) cpool__run_drop(gp, run, false);
        return st;
    }
    for (size_t k = 0; k < count; k++) {
        cpool__page_run *r = piece[k].run;
        if (r)
            *r = (cpool__page_run){.mem = piece[k].mem, .first = run->first + piece[k].start, .pages = piece[k].pages,
                                   .arena = run->arena, .addr = run->addr + piece[k].start * CPOOL__PAGE};
        for (size_t j = 0; j < piece[k].pages; j++)
            gp->shared[run->first + piece[k].start + j] = (cpool__shared_page){.page = piece[k].mem, .maps = 1, .run = r};
    }
    gp->source.release(gp->source.ctx, run->mem);
    unblock(gp, run->first, run->pages);
    free(run);
    free(piece);
    return CPOOL_OK;
}

/* Whether no work can use run's memory now: its arena is `asking`, or a
 * capture's (nothing ran there since it was taken), or idle with its
 * marked work over, or its graph's launches are held back now (*held:
 * release them after). Never waits. */
static bool run_quiet(cpool__graph_pages *gp, const cpool__page_run *run, const cpool__arena *asking, bool *held) {
    const cpool__arena *ar = run->arena;
    *held = false;
    if (ar == asking || (ar->in_use && !ar->graph)) return true;
    if (!ar->in_use) return cpool__arena_work_over(ar);
    if (gp->holding) return true;
    *held = gp->source.hold_launches && gp->source.hold_launches(gp->source.ctx, !atomic_load(&ar->launched));
    return *held;
}

bool cpool__run_split_quiet(cpool__graph_pages *gp, cpool__page_run *run, const cpool__arena *asking, size_t from,
                            size_t count) {
    bool held;
    if (gp->suspended || !run_quiet(gp, run, asking, &held)) return false;
    cpool__error_mark before;
    cpool__error_save(&before);
    uint8_t *cut = cpool__calloc(run->pages, 1);
    if (cut)
        for (size_t j = from; j < from + count && j < run->pages; j++) cut[j] = 1;
    bool split = cut && cpool__run_split(gp, run, cut) == CPOOL_OK;
    free(cut);
    cpool__error_restore(&before);
    if (held) gp->source.release_launches(gp->source.ctx);
    return split;
}

cpool__page_run *cpool__run_starting_at(const cpool__graph_pages *gp, const cpool__page_span *sp, size_t i) {
    const cpool__page *pg = &sp->page[i];
    cpool__page_run *run = pg->state == CPOOL__PAGE_SHARED ? gp->shared[pg->number].run : NULL;
    return run && run->addr == sp->base + i * CPOOL__PAGE ? run : NULL;
}

/* The lowest number none of the arena's pages maps; false when there is no
 * room to note it. */
static bool free_number(cpool__arena *ar, size_t *out) {
    size_t d = ar->low_free;
    while (d < ar->taken_cap && ar->taken[d]) d++;
    ar->low_free = d;
    *out = d;
    return cpool__number_taken_room(ar, d);
}

bool cpool__number_next(cpool__arena *ar, size_t want, size_t *out, cpool_status *st) {
    cpool__graph_pages *gp = ar->gp;
    for (;;) {
        size_t d;
        if (!free_number(ar, &d)) {
            *st = cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory numbering a graph's pages");
            return false;
        }
        cpool__page_run *run = d < gp->shared_count ? gp->shared[d].run : NULL;
        size_t first = run ? run->first : 0, pages = run ? run->pages : 0;
        if (!run || cpool__run_split_quiet(gp, run, ar, d - first, want)) {
            *out = d;
            return true;
        }
        /* Left whole (or gone, if it could not be mapped back). */
        if (gp->shared[d].run) {
            *st = cpool__number_room(ar, first + pages - 1);
            if (*st != CPOOL_OK) return false;
            for (size_t j = first; j < first + pages; j++) ar->taken[j] = CPOOL__NUMBER_BLOCKED;
            ar->unsettled = gp->unsettled = true;
        }
    }
}
