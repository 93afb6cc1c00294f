/*
 * Runs, and the shared numbers an arena's pages map (README, "Runs"). A
 * page takes the lowest number its arena does not use yet, so captures
 * that map in the same order map the same shared pages; two pages of one
 * arena never share one. A page alone costs a create, a map and an access
 * setting (about 45 us on an H200), many pages in one run about as much.
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

void cpool__run_free(cpool__page_run *run) {
    if (run) free(run->more);
    free(run);
}

/* Mapping m of run goes: its arena's pages of the run are unmapped (the
 * spare addresses past them with them). */
static void drop_mapping(cpool__graph_pages *gp, const cpool__page_run *run, const cpool__run_map *m, bool mapped) {
    cpool__page_span *sp = cpool__span_of(&m->arena->spans, m->addr);
    size_t at = cpool__page_index(sp, m->addr);
    if (mapped) cpool__pages_unmap(gp, (void *)m->addr, run->mem);
    for (size_t j = 0; j < m->used; j++) {
        sp->page[at + j] = (cpool__page){.state = CPOOL__PAGE_UNMAPPED};
        cpool__number_untake(m->arena, run->first + j);
        gp->shared[run->first + j].maps--;
    }
}

void cpool__run_drop(cpool__graph_pages *gp, cpool__page_run *run, cpool__arena *ar, bool mapped) {
    cpool__run_map *m = cpool__run_maps(run);
    size_t kept = 0;
    for (size_t x = 0; x < run->maps; x++) {
        if (ar && m[x].arena != ar)
            m[kept++] = m[x];
        else
            drop_mapping(gp, run, &m[x], mapped);
    }
    if (kept) { /* other arenas map it still (numbers only they spare wait for a trim: runs_shed_spare) */
        run->maps = kept;
        if (kept == 1) {
            run->one = m[0];
            free(run->more);
            run->more = NULL;
        }
        return;
    }
    cpool__pages_release(gp, run->mem);
    unblock(gp, run->first, run->pages);
    for (size_t j = 0; j < run->pages; j++) gp->shared[run->first + j] = (cpool__shared_page){0};
    gp->shared_bytes -= run->pages * CPOOL__PAGE;
    cpool__shared_trim_count(gp);
    cpool__run_free(run);
}

cpool_status cpool__run_map_new(cpool__arena *ar, cpool__page_span *sp, size_t at, size_t n, size_t first) {
    cpool__graph_pages *gp = ar->gp;
    cpool_status st = cpool__pages_bound(gp, n * CPOOL__PAGE);
    if (st == CPOOL_OK) st = cpool__number_room(ar, first + n - 1);
    if (st != CPOOL_OK) return st;
    cpool__page_run *run = cpool__calloc(1, sizeof *run);
    if (!run) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for a run of graph pages");
    *run = (cpool__page_run){.first = first, .pages = n, .maps = 1, .one = {ar, sp->base + at * CPOOL__PAGE, n}};
    st = gp->source.create(gp->source.ctx, n, &run->mem);
    if (st == CPOOL_OK) {
        st = gp->source.map(gp->source.ctx, (void *)run->one.addr, run->mem);
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
 * stretch between them one piece, mapped where some arena's pages reach
 * into it (`maps` of the run's mappings: piece_in); one no page reaches
 * (the run's spare numbers) is given back. */
typedef struct run_piece {
    size_t start, pages, maps;
    void *mem;
    cpool__page_run *run; /* its record, for a piece of two pages or more */
} run_piece;

static bool piece_in(const cpool__run_map *m, const run_piece *p) { return p->start < m->used; }

static size_t cut_pieces(cpool__page_run *run, const uint8_t *cut, run_piece *piece) {
    const cpool__run_map *m = cpool__run_maps(run);
    size_t count = 0;
    for (size_t j = 0; j < run->pages; count++) {
        run_piece *p = &piece[count];
        p->start = j;
        if (!cut[j++])
            while (j < run->pages && !cut[j]) j++;
        p->pages = j - p->start;
        for (size_t x = 0; x < run->maps; x++) p->maps += piece_in(&m[x], p);
    }
    return count;
}

/* Memory and records for every piece that is mapped; on failure *made
 * says how far it got. */
static cpool_status make_pieces(cpool__graph_pages *gp, run_piece *piece, size_t count, size_t *made) {
    for (*made = 0; *made < count; (*made)++) {
        run_piece *p = &piece[*made];
        if (!p->maps) continue;
        if (p->pages > 1) {
            p->run = cpool__calloc(1, sizeof *p->run);
            if (p->run && p->maps > 1) p->run->more = cpool__calloc(p->maps, sizeof *p->run->more);
            if (!p->run || (p->maps > 1 && !p->run->more))
                return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory splitting a run of graph pages");
        }
        cpool_status st = gp->source.create(gp->source.ctx, p->pages, &p->mem);
        if (st != CPOOL_OK) return st;
    }
    return CPOOL_OK;
}

/* Maps the pieces where the run is, at each of its mappings that reaches
 * them; on failure the run is mapped back (*lost: not even that). */
static cpool_status map_pieces(cpool__graph_pages *gp, cpool__page_run *run, run_piece *piece, size_t count,
                               bool *lost) {
    cpool__run_map *m = cpool__run_maps(run);
    for (size_t x = 0; x < run->maps; x++) cpool__pages_unmap(gp, (void *)m[x].addr, run->mem);
    cpool_status st = CPOOL_OK;
    size_t x = 0, k = 0;
    for (; x < run->maps; x++) {
        for (k = 0; k < count; k++) {
            if (!piece_in(&m[x], &piece[k])) continue;
            st = gp->source.map(gp->source.ctx, (void *)(m[x].addr + piece[k].start * CPOOL__PAGE), piece[k].mem);
            if (st != CPOOL_OK) break;
        }
        if (st != CPOOL_OK) break;
    }
    if (st == CPOOL_OK) return CPOOL_OK;
    for (size_t y = 0; y <= x; y++) /* every piece of the mappings before x, those before k of x */
        for (size_t j = 0; j < (y < x ? count : k); j++)
            if (piece_in(&m[y], &piece[j]))
                gp->source.unmap(gp->source.ctx, (void *)(m[y].addr + piece[j].start * CPOOL__PAGE), piece[j].mem);
    for (size_t y = 0; y < run->maps; y++)
        if (gp->source.map(gp->source.ctx, (void *)m[y].addr, run->mem) != CPOOL_OK) *lost = true;
    return st;
}

/* The records take the pieces: a piece's run maps where the pieces were
 * mapped; a piece no page reaches is gone. */
static void commit_pieces(cpool__graph_pages *gp, cpool__page_run *run, run_piece *piece, size_t count) {
    const cpool__run_map *from = cpool__run_maps(run);
    for (size_t k = 0; k < count; k++) {
        run_piece *p = &piece[k];
        cpool__page_run *r = p->run;
        if (r) {
            *r = (cpool__page_run){.mem = p->mem, .first = run->first + p->start, .pages = p->pages, .more = r->more};
            cpool__run_map *m = cpool__run_maps(r);
            for (size_t x = 0; x < run->maps; x++) {
                if (!piece_in(&from[x], p)) continue;
                size_t used = from[x].used - p->start;
                m[r->maps++] = (cpool__run_map){from[x].arena, from[x].addr + p->start * CPOOL__PAGE,
                                                used < p->pages ? used : p->pages};
            }
        }
        for (size_t j = 0; j < p->pages; j++) {
            cpool__shared_page *sh = &gp->shared[run->first + p->start + j];
            if (!p->maps) gp->shared_bytes -= CPOOL__PAGE;
            *sh = p->maps ? (cpool__shared_page){.page = p->mem, .maps = sh->maps, .run = r} : (cpool__shared_page){0};
        }
    }
    cpool__shared_trim_count(gp);
}

/* The run could not even be mapped back: every arena that mapped it lost
 * pages (its blocks there are unbacked). */
static void lose_run(cpool__graph_pages *gp, cpool__page_run *run) {
    const cpool__run_map *m = cpool__run_maps(run);
    for (size_t x = 0; x < run->maps; x++) atomic_store(&m[x].arena->lost, true);
    cpool__run_drop(gp, run, NULL, false);
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
            cpool__run_free(piece[k].run);
        }
        free(piece);
        if (lost) lose_run(gp, run);
        return st;
    }
    gp->source.release(gp->source.ctx, run->mem);
    unblock(gp, run->first, run->pages);
    commit_pieces(gp, run, piece, count);
    cpool__run_free(run);
    free(piece);
    return CPOOL_OK;
}

/* Whether no work can use run's memory now: each arena that maps it is
 * `asking`, or a capture's (nothing ran there since it was taken), or idle
 * with its marked work over, or its graph's launches are held back now
 * (*held: release them after). Never waits. */
static bool run_quiet(cpool__graph_pages *gp, cpool__page_run *run, const cpool__arena *asking, bool *held) {
    const cpool__run_map *m = cpool__run_maps(run);
    bool graphs = false, launched = false;
    *held = false;
    for (size_t x = 0; x < run->maps; x++) {
        const cpool__arena *ar = m[x].arena;
        if (ar == asking || (ar->in_use && !ar->graph)) continue;
        if (!ar->in_use) {
            if (!cpool__arena_work_over(ar)) return false;
            continue;
        }
        graphs = true;
        launched = launched || atomic_load(&ar->launched);
    }
    if (!graphs || gp->holding) return true;
    *held = gp->source.hold_launches && gp->source.hold_launches(gp->source.ctx, !launched);
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

void cpool__runs_shed_spare(cpool__graph_pages *gp) {
    for (size_t k = 0; k < gp->shared_count; k++) {
        cpool__page_run *run = gp->shared[k].run;
        if (!run || run->first != k) continue;
        const cpool__run_map *m = cpool__run_maps(run);
        size_t used = 0;
        for (size_t x = 0; x < run->maps; x++) used = m[x].used > used ? m[x].used : used;
        if (used < run->pages) (void)cpool__run_split_quiet(gp, run, NULL, used, run->pages - used);
    }
}

cpool__page_run *cpool__run_starting_at(const cpool__graph_pages *gp, const cpool__page_span *sp, size_t i) {
    const cpool__page *pg = &sp->page[i];
    cpool__page_run *run = pg->state == CPOOL__PAGE_SHARED ? gp->shared[pg->number].run : NULL;
    if (!run) return NULL;
    const cpool__run_map *m = cpool__run_maps(run);
    for (size_t x = 0; x < run->maps; x++)
        if (m[x].addr == sp->base + i * CPOOL__PAGE) return run;
    return NULL;
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

bool cpool__number_next_splitting(cpool__arena *ar, size_t want, size_t *out, cpool_status *st) {
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

/* ---- runs again at a resume -------------------------------------------------- */

/* Where each shared number is mapped: the mappings of number k are
 * at[start[k] .. start[k + 1]), in the order of the arenas' list. */
typedef struct number_maps {
    size_t *start;
    cpool__run_map *at;
    const cpool__page_span **span; /* the span of each mapping */
} number_maps;

static bool list_number_maps(cpool__graph_pages *gp, number_maps *nm) {
    size_t total = 0;
    for (size_t k = 0; k < gp->shared_count; k++) total += gp->shared[k].maps;
    nm->start = cpool__calloc(gp->shared_count + 1, sizeof *nm->start);
    nm->at = cpool__calloc(total ? total : 1, sizeof *nm->at);
    nm->span = cpool__calloc(total ? total : 1, sizeof *nm->span);
    size_t *fill = cpool__calloc(gp->shared_count ? gp->shared_count : 1, sizeof *fill);
    bool ok = nm->start && nm->at && nm->span && fill;
    for (size_t k = 0; ok && k < gp->shared_count; k++) nm->start[k + 1] = nm->start[k] + gp->shared[k].maps;
    for (cpool__arena *ar = gp->arenas; ok && ar; ar = ar->next)
        for (size_t s = 0; s < ar->spans.count; s++) {
            const cpool__page_span *sp = &ar->spans.spans[s];
            for (size_t i = 0; i < sp->pages; i++) {
                size_t k = sp->page[i].number;
                if (sp->page[i].state != CPOOL__PAGE_SHARED || fill[k] == gp->shared[k].maps) continue;
                size_t at = nm->start[k] + fill[k]++;
                nm->at[at] = (cpool__run_map){ar, sp->base + i * CPOOL__PAGE, 1};
                nm->span[at] = sp;
            }
        }
    free(fill);
    return ok;
}

/* Whether arena page `addr` of span sp may be spare in a run: no page
 * of the arena's is there (past the span's records, within its reach). */
static bool spare_at(const cpool__page_span *sp, uintptr_t addr) {
    size_t i = cpool__page_index(sp, addr);
    return i < sp->reach && (i >= sp->pages || sp->page[i].state == CPOOL__PAGE_UNMAPPED);
}

/* Whether number j continues the run of the mappings `m` (those of number
 * k; used[x]: how many numbers from k each maps so far): every arena that
 * maps j maps all the numbers from k before it, at the next address of the
 * same span; every other arena has no page there (spare), and maps no more
 * of the run. Then each arena mapping j counts it. */
static bool continues(const cpool__graph_pages *gp, const number_maps *nm, size_t k, size_t j, size_t *used) {
    size_t n = gp->shared[k].maps, y = nm->start[j], end = nm->start[j + 1];
    if (!gp->shared[j].page || !gp->shared[j].maps) return false;
    const cpool__run_map *m = &nm->at[nm->start[k]];
    for (size_t x = 0; x < n; x++) {
        uintptr_t addr = m[x].addr + (j - k) * CPOOL__PAGE;
        bool maps = y < end && nm->at[y].arena == m[x].arena; /* both lists in the arenas' order */
        if (maps ? used[x] != j - k || nm->at[y].addr != addr || nm->span[y] != nm->span[nm->start[k] + x]
                 : !spare_at(nm->span[nm->start[k] + x], addr))
            return false;
        y += maps;
    }
    if (y != end) return false; /* an arena that does not map number k */
    for (size_t x = 0, z = nm->start[j]; x < n && z < end; x++)
        if (nm->at[z].arena == m[x].arena) used[x]++, z++;
    return true;
}

/* Numbers [k, end) as one run, mapped where number k is. */
static bool make_group(cpool__graph_pages *gp, const number_maps *nm, size_t k, size_t end, const size_t *used) {
    size_t n = gp->shared[k].maps;
    cpool__page_run *run = cpool__calloc(1, sizeof *run);
    if (run && n > 1 && !(run->more = cpool__calloc(n, sizeof *run->more))) {
        free(run);
        run = NULL;
    }
    if (!run) return false;
    *run = (cpool__page_run){.mem = gp->shared[k].page, .first = k, .pages = end - k, .maps = n, .more = run->more};
    cpool__run_map *m = cpool__run_maps(run);
    for (size_t x = 0; x < n; x++) m[x] = (cpool__run_map){nm->at[nm->start[k] + x].arena, nm->at[nm->start[k] + x].addr, used[x]};
    for (size_t j = k; j < end; j++) {
        gp->shared[j].run = run;
        gp->shared[j].page = run->mem;
    }
    return true;
}

void cpool__runs_regroup(cpool__graph_pages *gp) {
    for (size_t k = 0; k < gp->shared_count; k++) { /* the old runs' records go (no memory exists now) */
        cpool__page_run *run = gp->shared[k].run;
        gp->shared[k].run = NULL;
        if (run && run->first + run->pages == k + 1) cpool__run_free(run);
    }
    number_maps nm = {0};
    bool ok = list_number_maps(gp, &nm);
    size_t most = 0;
    for (size_t k = 0; k < gp->shared_count; k++) most = gp->shared[k].maps > most ? gp->shared[k].maps : most;
    size_t *used = cpool__calloc(most ? most : 1, sizeof *used);
    ok = ok && used;
    for (size_t k = 0; ok && k < gp->shared_count;) {
        size_t end = k + 1;
        for (size_t x = 0; x < gp->shared[k].maps; x++) used[x] = 1;
        while (gp->shared[k].maps && gp->shared[k].page && end < gp->shared_count && continues(gp, &nm, k, end, used))
            end++;
        if (end - k > 1) ok = make_group(gp, &nm, k, end, used);
        k = end;
    }
    free(used);
    free(nm.start);
    free(nm.at);
    free(nm.span);
}
