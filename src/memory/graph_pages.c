/*
 * Graph memory shared by pages (see graph_pages.h for the contract).
 *
 * An arena's mapped page is backed by the shared page of its number
 * (`number`), unless the arena owns the page's memory (`own`). A page takes
 * the lowest number the arena does not use yet, so captures that map in the
 * same order map the same shared pages; at the end of a capture the pages
 * left shared move to the lowest numbers (outputs mapped first would
 * otherwise push the scratch to higher ones). Two pages of one arena never
 * share a number, so the allocator's rules inside one capture are enough;
 * two arenas' pages of the same number share memory, which is the point. Where the platform reserves no address
 * space (plain segments), an arena takes plain segments of its own and
 * shares nothing.
 *
 * Runs. A page of its own costs the platform a create, a map and an access
 * setting each (about 45 us on an H200), where one allocation of many pages
 * costs about as much as one page. So where a capture maps pages for which
 * the pool has no shared page yet (the numbers past the last), they are
 * made as one allocation, a run, mapped whole by that capture's arena. The
 * platform maps an allocation only whole, so a run's page can be neither
 * mapped alone by another arena nor made an arena's own: what needs that
 * splits the run first (split_run: new memory for its pieces, mapped where
 * it was; nothing is copied, as no work may use it then). Its arena's
 * capture splits it at will (nothing ran there since); another arena's
 * capture splits it only while no work can use it: its arena idle with its
 * work over, or its graph's launches held back (hold_launches, which never
 * waits). Else that capture leaves the run's numbers alone (blocked) and
 * maps others; its seal tries again and moves its pages onto them.
 */
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "graph_pages.h"
#include "status.h"
#include "thread.h"

/* A run: one allocation behind the shared numbers [first, first + pages),
 * mapped whole by `arena` at `addr`, its pages in number order. */
struct cpool__page_run {
    void *mem;
    size_t first, pages;
    cpool__arena *arena;
    uintptr_t addr;
};

typedef struct arena_span {
    uintptr_t base;
    size_t pages;
    void **own;      /* per page: the arena's own memory (or a lender's), or NULL (shared) */
    size_t *number;  /* per mapped page without its own memory: its shared page's */
    uint8_t *mapped;
    /* Tails (see "Tails" below). In an arena: the packed page whose memory
     * a page borrows (0: none); in the packed region: how many arena pages
     * borrow a page, and the bytes of it lent to them. */
    uintptr_t *lender;
    uint32_t *borrowers;
    uint32_t *lent;
} arena_span;

struct cpool__arena {
    cpool__arena *next;
    cpool__graph_pages *gp;
    uint64_t id;
    cpool__allocator alloc;
    arena_span *spans;
    size_t span_count, span_cap;
    uint8_t *taken;  /* by number: TAKEN (one of its pages maps that shared page), BLOCKED or 0 */
    size_t taken_cap;
    size_t low_free; /* no number below is free (where free_number starts looking) */
    bool in_use;     /* a capture or a graph holds it */
    bool own_pages;  /* the packed region: every page its own memory */
    /* The packed blocks its capture handed out that are still live (the
     * graph's packed outputs), and the key its frees
     * there carry. */
    uintptr_t *packed;
    size_t packed_count, packed_cap;
    cpool__stream_key packed_key;
    /* Released: the packed blocks freed under packed_key (its capture's
     * scratch, outputs freed since on a stream) stay its graph's until the
     * device's work marked at the release is over (release_packed). */
    bool packed_held;
    /* Parts of its capture's live blocks that the caller said are scratch
     * (cpool__arena_note_scratch): the whole pages in them stay shared at
     * the seal. A part counts while its block is the one noted (serial). */
    struct scratch_part {
        uintptr_t block, lo, hi;
        uint64_t serial;
    } *scratch;
    size_t scratch_count, scratch_cap;
    /* Blocks of other graphs and captures that its capture freed: they and
     * this graph's replays may write them still, so the free is made at
     * its release (cpool__arena_take_deferred). */
    uintptr_t *deferred;
    size_t deferred_count, deferred_cap;
    uint64_t deferred_requested; /* the sizes their callers asked for */
    uint64_t released; /* when its last holder let go, or a free left it idle (graph_pages' release clock) */
    /* Idle with memory: the device's work when it became idle, which may
     * still use its pages (NULL: seen over); with `work_unknown` none could
     * be marked, and only a trim takes the arena back. */
    cpool__order_mark *work;
    bool work_unknown;
    uint64_t work_frees; /* the free clock at the mark: every free in the arena came before */
    uint64_t graph;  /* the graph that holds it, once sealed */
    atomic_bool launched; /* its graph was launched (cpool__arena_note_launch) */
    bool unsettled;       /* its capture found a run in use: its pages may settle lower (settle_graphs) */
    uint64_t plain_bytes; /* plain segments (no address space to share) */
};

/* An arena's note of a shared number: one of its pages maps it, or it is a
 * page of another arena's run that could not be split when the arena
 * wanted it (its capture maps other numbers; its seal tries again). */
enum { TAKEN = 1, BLOCKED = 2 };

/* ---- the shared set -------------------------------------------------------- */

/* While suspended no physical page exists: the records stay (their
 * pointers name nothing) so that a resume makes the same pages again, and
 * what would unmap or free one has nothing to do. */
static void page_unmap(cpool__graph_pages *gp, void *addr, void *page) {
    if (!gp->suspended) gp->source.unmap(gp->source.ctx, addr, page);
}

static void page_release(cpool__graph_pages *gp, void *page) {
    if (!gp->suspended) gp->source.release(gp->source.ctx, page);
}

static bool bound_allows(const cpool__graph_pages *gp, uint64_t bytes) {
    return !gp->max_reserved ||
           *gp->other_reserved + gp->shared_bytes + gp->own_bytes + bytes <= gp->max_reserved;
}

static cpool_status over_bound(const cpool__graph_pages *gp, uint64_t bytes) {
    return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY,
                       "%llu more bytes of graph memory would take the pool past max_reserved_bytes (%llu)",
                       (unsigned long long)bytes, (unsigned long long)gp->max_reserved);
}

/* Room in the records for shared numbers up to `last`. */
static cpool_status shared_room(cpool__graph_pages *gp, size_t last) {
    if (last < gp->shared_cap) return CPOOL_OK;
    size_t cap = gp->shared_cap ? gp->shared_cap : 16;
    while (cap <= last) cap *= 2;
    cpool__shared_page *grown = cpool__realloc(gp->shared, cap * sizeof *grown);
    if (!grown) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for the graph pages' records");
    memset(grown + gp->shared_cap, 0, (cap - gp->shared_cap) * sizeof *grown);
    gp->shared = grown;
    gp->shared_cap = cap;
    return CPOOL_OK;
}

/* The shared page number k, made if there is none yet. */
static cpool_status shared_page(cpool__graph_pages *gp, size_t k, void **out) {
    cpool_status st = shared_room(gp, k);
    if (st != CPOOL_OK) return st;
    if (k >= gp->shared_count) gp->shared_count = k + 1;
    cpool__shared_page *sp = &gp->shared[k];
    if (!sp->page) {
        if (!bound_allows(gp, CPOOL__PAGE)) return over_bound(gp, CPOOL__PAGE);
        st = gp->source.create(gp->source.ctx, 1, &sp->page);
        if (st != CPOOL_OK) return st;
        gp->shared_bytes += CPOOL__PAGE;
    }
    *out = sp->page;
    return CPOOL_OK;
}

/* The shared set ends at its last number that has a page. */
static void trim_shared_count(cpool__graph_pages *gp) {
    while (gp->shared_count && !gp->shared[gp->shared_count - 1].page) gp->shared_count--;
}

/* Whether shared number k begins an allocation: a page alone, or a run's
 * first. */
static bool allocation_at(const cpool__graph_pages *gp, size_t k) {
    return gp->shared[k].page && (!gp->shared[k].run || gp->shared[k].run->first == k);
}

/* Gives back the shared pages numbered [from, to) that no arena maps (a
 * run goes back whole, when its arena unmaps it: drop_run). */
static void release_unmapped(cpool__graph_pages *gp, size_t from, size_t to) {
    for (size_t k = from; k < to && k < gp->shared_count; k++) {
        cpool__shared_page *sp = &gp->shared[k];
        if (sp->page && !sp->maps && !sp->run) {
            page_release(gp, sp->page);
            sp->page = NULL;
            gp->shared_bytes -= CPOOL__PAGE;
        }
    }
    trim_shared_count(gp);
}

/* One mapping of shared page k went: a page no arena maps goes back at
 * once (no work can use it: the arenas that did are gone or not run). */
static void unmapped_shared(cpool__graph_pages *gp, size_t k) {
    if (--gp->shared[k].maps == 0) release_unmapped(gp, k, k + 1);
}

/* Puts `to` behind the page at addr in place of `from`, all or nothing:
 * where `to` cannot be mapped, `from` is mapped there again and the
 * status returned. Only where that fails too (memory mapped there a
 * moment ago) is the page left with nothing behind it: *lost, for the
 * caller to mark (its blocks are unbacked; a trim takes the arena). */
static cpool_status swap_page(cpool__graph_pages *gp, void *addr, void *from, void *to, bool *lost) {
    *lost = false;
    gp->source.unmap(gp->source.ctx, addr, from);
    cpool_status st = gp->source.map(gp->source.ctx, addr, to);
    if (st != CPOOL_OK) {
        cpool__error_mark why;
        cpool__error_save(&why);
        *lost = gp->source.map(gp->source.ctx, addr, from) != CPOOL_OK;
        cpool__error_restore(&why); /* the swap's failure, not the restore's */
    }
    return st;
}

/* ---- an arena's address ranges ------------------------------------------ */

static arena_span *span_of(const cpool__arena *ar, uintptr_t addr) {
    for (size_t i = 0; i < ar->span_count; i++) {
        arena_span *sp = &ar->spans[i];
        if (addr >= sp->base && addr < sp->base + sp->pages * CPOOL__PAGE) return sp;
    }
    return NULL;
}

static void span_free(arena_span *sp) {
    free(sp->own);
    free(sp->number);
    free(sp->mapped);
    free(sp->lender);
    free(sp->borrowers);
    free(sp->lent);
}

static cpool_status arena_reserve(void *ctx, size_t bytes, void **base) {
    cpool__arena *ar = ctx;
    cpool__graph_pages *gp = ar->gp;
    if (ar->span_count == ar->span_cap) {
        size_t cap = ar->span_cap ? ar->span_cap * 2 : 2;
        arena_span *grown = cpool__realloc(ar->spans, cap * sizeof *grown);
        if (!grown) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for a graph's address ranges");
        ar->spans = grown;
        ar->span_cap = cap;
    }
    size_t pages = bytes / CPOOL__PAGE;
    arena_span sp = {.pages = pages,
                     .own = cpool__calloc(pages, sizeof *sp.own),
                     .number = cpool__calloc(pages, sizeof *sp.number),
                     .mapped = cpool__calloc(pages, 1),
                     .lender = cpool__calloc(pages, sizeof *sp.lender),
                     .borrowers = cpool__calloc(pages, sizeof *sp.borrowers),
                     .lent = cpool__calloc(pages, sizeof *sp.lent)};
    cpool_status st = sp.own && sp.number && sp.mapped && sp.lender && sp.borrowers && sp.lent
                          ? gp->source.reserve(gp->source.ctx, bytes, base)
                          : cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for a graph's address ranges");
    if (st != CPOOL_OK) {
        span_free(&sp);
        return st;
    }
    sp.base = (uintptr_t)*base;
    ar->spans[ar->span_count++] = sp;
    return CPOOL_OK;
}

static void arena_unreserve(void *ctx, void *base, size_t bytes) {
    cpool__arena *ar = ctx;
    arena_span *sp = span_of(ar, (uintptr_t)base);
    span_free(sp);
    *sp = ar->spans[--ar->span_count];
    ar->gp->source.unreserve(ar->gp->source.ctx, base, bytes);
}

/* No page of the arena maps shared page d any more. */
static void untake(cpool__arena *ar, size_t d) {
    ar->taken[d] = 0;
    if (d < ar->low_free) ar->low_free = d;
}

/* Room in the arena's notes for numbers up to `last`. */
static bool taken_room(cpool__arena *ar, size_t last) {
    if (last < ar->taken_cap) return true;
    size_t cap = ar->taken_cap ? 2 * ar->taken_cap : 64;
    while (cap <= last) cap *= 2;
    uint8_t *grown = cpool__realloc(ar->taken, cap);
    if (!grown) return false;
    memset(grown + ar->taken_cap, 0, cap - ar->taken_cap);
    ar->taken = grown;
    ar->taken_cap = cap;
    return true;
}

/* The lowest number none of the arena's pages maps; false when there is no
 * room to note it. */
static bool free_number(cpool__arena *ar, size_t *out) {
    size_t d = ar->low_free;
    while (d < ar->taken_cap && ar->taken[d]) d++;
    ar->low_free = d;
    *out = d;
    return taken_room(ar, d);
}

/* ---- runs -------------------------------------------------------------------- */

/* Shared numbers [first, first + n) changed (a run split or gone): no
 * arena keeps them blocked. */
static void unblock(cpool__graph_pages *gp, size_t first, size_t n) {
    for (cpool__arena *ar = gp->arenas; ar; ar = ar->next)
        for (size_t d = first; d < first + n && d < ar->taken_cap; d++)
            if (ar->taken[d] == BLOCKED) untake(ar, d);
}

/* Takes run down from its arena (unless `mapped` is false: its mapping is
 * gone already) and gives its memory back. */
static void drop_run(cpool__graph_pages *gp, cpool__page_run *run, bool mapped) {
    cpool__arena *ar = run->arena;
    arena_span *sp = span_of(ar, run->addr);
    size_t at = (run->addr - sp->base) / CPOOL__PAGE;
    if (mapped) page_unmap(gp, (void *)run->addr, run->mem);
    page_release(gp, run->mem);
    unblock(gp, run->first, run->pages);
    for (size_t j = 0; j < run->pages; j++) {
        sp->mapped[at + j] = 0;
        untake(ar, run->first + j);
        gp->shared[run->first + j] = (cpool__shared_page){0};
    }
    gp->shared_bytes -= run->pages * CPOOL__PAGE;
    trim_shared_count(gp);
    free(run);
}

/* Room in the records for shared numbers up to `last` and the arena's
 * notes of them. */
static cpool_status number_room(cpool__arena *ar, size_t last) {
    cpool_status st = shared_room(ar->gp, last);
    if (st == CPOOL_OK && !taken_room(ar, last))
        st = cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory numbering a graph's pages");
    return st;
}

/* Makes pages [at, at + n) of span sp one new run behind the numbers from
 * `first` (none of them exists yet) and maps it; all or nothing. */
static cpool_status map_new_run(cpool__arena *ar, arena_span *sp, size_t at, size_t n, size_t first) {
    cpool__graph_pages *gp = ar->gp;
    if (!bound_allows(gp, n * CPOOL__PAGE)) return over_bound(gp, n * CPOOL__PAGE);
    cpool_status st = number_room(ar, first + n - 1);
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
        ar->taken[first + j] = TAKEN;
        sp->number[at + j] = first + j;
        sp->mapped[at + j] = 1;
    }
    if (first + n > gp->shared_count) gp->shared_count = first + n;
    gp->shared_bytes += n * CPOOL__PAGE;
    return CPOOL_OK;
}

/* The pieces split_run makes: each page with cut[j] set alone, each
 * stretch between them one piece. */
typedef struct run_piece {
    size_t start, pages;
    void *mem;
    cpool__page_run *run; /* its record, for a piece of two pages or more */
} run_piece;

/* Replaces run's memory with pieces (see run_piece) mapped where it was, in
 * its arena, whose work must not use it (run_quiet): nothing is copied. On
 * failure nothing changed, unless the run could not even be mapped back:
 * then its pages are unmapped (their blocks unbacked) and the run is gone. */
static cpool_status split_run(cpool__graph_pages *gp, cpool__page_run *run, const uint8_t *cut) {
    run_piece *piece = cpool__calloc(run->pages, sizeof *piece); /* at most a piece a page */
    if (!piece) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory splitting a run of graph pages");
    size_t count = 0;
    for (size_t j = 0; j < run->pages; count++) {
        piece[count].start = j;
        if (!cut[j++])
            while (j < run->pages && !cut[j]) j++;
        piece[count].pages = j - piece[count].start;
    }
    cpool_status st = CPOOL_OK;
    size_t made = 0, mapped = 0;
    bool lost = false;
    for (; st == CPOOL_OK && made < count; made++) {
        if (piece[made].pages > 1 && !(piece[made].run = cpool__calloc(1, sizeof *piece[made].run))) {
            st = cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory splitting a run of graph pages");
            break;
        }
        st = gp->source.create(gp->source.ctx, piece[made].pages, &piece[made].mem);
        if (st != CPOOL_OK) break;
    }
    if (st == CPOOL_OK) {
        page_unmap(gp, (void *)run->addr, run->mem);
        for (; st == CPOOL_OK && mapped < count; mapped++) {
            st = gp->source.map(gp->source.ctx, (void *)(run->addr + piece[mapped].start * CPOOL__PAGE),
                                piece[mapped].mem);
            if (st != CPOOL_OK) break;
        }
        if (st != CPOOL_OK) {
            while (mapped--)
                gp->source.unmap(gp->source.ctx, (void *)(run->addr + piece[mapped].start * CPOOL__PAGE),
                                 piece[mapped].mem);
            lost = gp->source.map(gp->source.ctx, (void *)run->addr, run->mem) != CPOOL_OK;
        }
    }
    if (st != CPOOL_OK) {
        for (size_t k = 0; k <= made && k < count; k++) {
            if (piece[k].mem) gp->source.release(gp->source.ctx, piece[k].mem);
            free(piece[k].run);
        }
        free(piece);
        if (lost) drop_run(gp, run, false);
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
    if (!ar->in_use) return !ar->work_unknown && (!ar->work || cpool__order_mark_done(ar->work));
    if (gp->holding) return true;
    *held = gp->source.hold_launches && gp->source.hold_launches(gp->source.ctx, !atomic_load(&ar->launched));
    return *held;
}

/* Makes run's pages [from, from + count) pages alone (the rest stays in
 * runs) if no work can use it now (run_quiet); whether it did. The last
 * error stays as it was either way: a run left whole is no failure, its
 * pages are only not shared. */
static bool split_run_quiet(cpool__graph_pages *gp, cpool__page_run *run, const cpool__arena *asking, size_t from,
                            size_t count) {
    bool held;
    if (gp->suspended || !run_quiet(gp, run, asking, &held)) return false;
    cpool__error_mark before;
    cpool__error_save(&before);
    uint8_t *cut = cpool__calloc(run->pages, 1);
    if (cut)
        for (size_t j = from; j < from + count && j < run->pages; j++) cut[j] = 1;
    bool split = cut && split_run(gp, run, cut) == CPOOL_OK;
    free(cut);
    cpool__error_restore(&before);
    if (held) gp->source.release_launches(gp->source.ctx);
    return split;
}

/* The lowest number the arena may map a page of its own to: one no page
 * of it maps, and not a page of another arena's run. Such a run is split
 * if it can be (as many of its pages alone as the arena wants, `want`),
 * else blocked for this arena. False with *st on failure. */
static bool next_number(cpool__arena *ar, size_t want, size_t *out, cpool_status *st) {
    cpool__graph_pages *gp = ar->gp;
    for (;;) {
        size_t d;
        if (!free_number(ar, &d)) {
            *st = cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory numbering a graph's pages");
            return false;
        }
        cpool__page_run *run = d < gp->shared_count ? gp->shared[d].run : NULL;
        size_t first = run ? run->first : 0, pages = run ? run->pages : 0;
        if (!run || split_run_quiet(gp, run, ar, d - first, want)) {
            *out = d;
            return true;
        }
        /* Left whole (or gone, if it could not be mapped back). */
        if (gp->shared[d].run) {
            *st = number_room(ar, first + pages - 1);
            if (*st != CPOOL_OK) return false;
            for (size_t j = first; j < first + pages; j++) ar->taken[j] = BLOCKED;
            ar->unsettled = gp->unsettled = true;
        }
    }
}

static void end_borrow(cpool__graph_pages *gp, arena_span *sp, size_t i);

/* Takes down page i of span sp (mapped). */
static void unmap_page(cpool__arena *ar, arena_span *sp, size_t i) {
    cpool__graph_pages *gp = ar->gp;
    void *addr = (void *)(sp->base + i * CPOOL__PAGE);
    if (sp->lender[i]) {
        page_unmap(gp, addr, sp->own[i]);
        end_borrow(gp, sp, i);
    } else if (sp->own[i]) {
        page_unmap(gp, addr, sp->own[i]);
        page_release(gp, sp->own[i]);
        sp->own[i] = NULL;
        gp->own_bytes -= CPOOL__PAGE;
    } else {
        page_unmap(gp, addr, gp->shared[sp->number[i]].page);
        untake(ar, sp->number[i]);
        unmapped_shared(gp, sp->number[i]);
    }
    sp->mapped[i] = 0;
}

/* A run goes whole; one only partly in the range is split first (the
 * arena's allocator unmaps only where no work is: its arena is its own).
 * Should even that fail, it goes whole, and its other pages with it. */
static void arena_unmap(void *ctx, void *addr, size_t bytes) {
    cpool__arena *ar = ctx;
    arena_span *sp = span_of(ar, (uintptr_t)addr);
    size_t at = ((uintptr_t)addr - sp->base) / CPOOL__PAGE, end = at + bytes / CPOOL__PAGE;
    for (size_t i = at; i < end; i++) {
        if (!sp->mapped[i]) continue;
        cpool__page_run *run = sp->own[i] ? NULL : ar->gp->shared[sp->number[i]].run;
        bool part = run && (run->addr < (uintptr_t)addr ||
                            run->addr + run->pages * CPOOL__PAGE > (uintptr_t)addr + bytes);
        if (part && split_run_quiet(ar->gp, run, ar, 0, run->pages)) run = NULL; /* single pages now */
        if (run)
            drop_run(ar->gp, run, true);
        else
            unmap_page(ar, sp, i);
    }
}

/* Memory of the arena's own for page i of span sp. */
static cpool_status own_page(cpool__graph_pages *gp, arena_span *sp, size_t i) {
    if (!bound_allows(gp, CPOOL__PAGE)) return over_bound(gp, CPOOL__PAGE);
    cpool_status st = gp->source.create(gp->source.ctx, 1, &sp->own[i]);
    if (st != CPOOL_OK) return st;
    st = gp->source.map(gp->source.ctx, (void *)(sp->base + i * CPOOL__PAGE), sp->own[i]);
    if (st != CPOOL_OK) {
        gp->source.release(gp->source.ctx, sp->own[i]);
        sp->own[i] = NULL;
        return st;
    }
    gp->own_bytes += CPOOL__PAGE;
    return CPOOL_OK;
}

/* Backs [addr, addr + bytes) with the shared pages of their numbers (the
 * packed region: with memory of its own). */
static cpool_status arena_map(void *ctx, void *addr, size_t bytes) {
    cpool__arena *ar = ctx;
    cpool__graph_pages *gp = ar->gp;
    if (gp->suspended) return cpool__fail(CPOOL_ERR_SUSPENDED, "the pool is suspended: no page can be mapped");
    arena_span *sp = span_of(ar, (uintptr_t)addr);
    size_t at = ((uintptr_t)addr - sp->base) / CPOOL__PAGE, n = bytes / CPOOL__PAGE;
    for (size_t i = at; i < at + n; i++) {
        void *page = NULL;
        cpool_status st = CPOOL_OK;
        size_t d = 0;
        if (ar->own_pages) {
            st = own_page(gp, sp, i);
        } else if (next_number(ar, at + n - i, &d, &st) && d >= gp->shared_count && i + 1 < at + n) {
            /* No shared page from here on: the rest as one run. */
            st = map_new_run(ar, sp, i, at + n - i, d);
            if (st == CPOOL_OK) return CPOOL_OK;
        } else if (st == CPOOL_OK) {
            st = shared_page(gp, d, &page);
            if (st == CPOOL_OK) st = gp->source.map(gp->source.ctx, (void *)(sp->base + i * CPOOL__PAGE), page);
            if (st == CPOOL_OK) {
                gp->shared[d].maps++;
                ar->taken[d] = TAKEN;
                sp->number[i] = d;
            } else if (d < gp->shared_count) {
                release_unmapped(gp, d, d + 1); /* made for this page alone */
            }
        }
        if (st != CPOOL_OK) {
            while (i-- > at) unmap_page(ar, sp, i);
            return st;
        }
        sp->mapped[i] = 1;
    }
    return CPOOL_OK;
}

/* Plain segments, where no address space can be reserved: the arena's
 * own memory, shared with no one. */
static cpool_status arena_grow(void *ctx, size_t bytes, void **base) {
    cpool__arena *ar = ctx;
    cpool__graph_pages *gp = ar->gp;
    if (!bound_allows(gp, bytes)) return over_bound(gp, bytes);
    cpool_status st = gp->source.grow(gp->source.ctx, bytes, base);
    if (st != CPOOL_OK) return st;
    ar->plain_bytes += bytes;
    gp->own_bytes += bytes;
    return CPOOL_OK;
}

static void arena_shrink(void *ctx, void *base, size_t bytes) {
    cpool__arena *ar = ctx;
    ar->gp->source.shrink(ar->gp->source.ctx, base, bytes);
    ar->plain_bytes -= bytes;
    ar->gp->own_bytes -= bytes;
}

/* ---- arenas ----------------------------------------------------------------- */

void cpool__graph_pages_init(cpool__graph_pages *gp, const cpool__page_source *source, uint64_t max_reserved,
                             const uint64_t *other_reserved, cpool__order *order) {
    *gp = (cpool__graph_pages){
        .source = *source, .max_reserved = max_reserved, .other_reserved = other_reserved, .order = order};
}

static void arena_destroy(cpool__arena *ar) {
    cpool__order_mark_release(ar->work);
    cpool__allocator_destroy(&ar->alloc);
    free(ar->spans);
    free(ar->taken);
    free(ar->packed);
    free(ar->deferred);
    free(ar->scratch);
    free(ar);
}

static cpool_status return_borrowed(cpool__graph_pages *gp, cpool__arena *ar);

/* An idle arena: nothing live in it, its own or in the packed region. */
static bool idle(const cpool__arena *ar) { return !ar->in_use && !ar->alloc.map_count && !ar->packed_count; }

/* Memory that work may use: mapped runs, or plain segments. */
static bool holds_memory(const cpool__arena *ar) { return ar->alloc.segment_count != 0 || ar->packed_held; }

/* The work marked at the arena's release (or when it became idle) is over,
 * queried, never waited for. */
static bool work_over(const cpool__arena *ar) {
    return !ar->work_unknown && (!ar->work || cpool__order_mark_done(ar->work));
}

/* A released arena's packed blocks (freed under its key) are free for any
 * capture once the work marked at its release is over: a launch of its
 * graph still running, or work on the stream an output was freed on,
 * may write them until then. */
static void packed_free_for_all(cpool__graph_pages *gp, cpool__arena *ar) {
    ar->packed_held = false;
    if (gp->packed) cpool__allocator_retag_branch(&gp->packed->alloc, ar->packed_key, UINT64_MAX, CPOOL__KEY_ANY);
}

static void release_packed(cpool__graph_pages *gp, cpool__arena *ar) {
    if (ar->packed_held && !ar->in_use && work_over(ar)) packed_free_for_all(gp, ar);
}

void cpool__graph_pages_release_packed(cpool__graph_pages *gp) {
    for (cpool__arena *ar = gp->arenas; ar; ar = ar->next) release_packed(gp, ar);
}

/* The arena was let go of, or just became idle: work enqueued while it
 * was held (its graph's launches, eager work on its outputs before their
 * frees) may still use its memory, and a capture that took it, or split a
 * run of its pages, could move them meanwhile. */
static void mark_work(cpool__graph_pages *gp, cpool__arena *ar) {
    cpool__order_mark_release(ar->work);
    ar->work = holds_memory(ar) ? cpool__order_mark_now(gp->order) : NULL;
    ar->work_unknown = holds_memory(ar) && !ar->work;
    ar->work_frees = cpool__free_clock_tick();
}

/* An idle arena a capture may take: its marked work is over (queried, never
 * waited for), or it holds no memory for that work to use, and its
 * borrowed pages could go back. The work before its blocks' frees being
 * over too, they are free for any stream. */
static bool reusable(cpool__graph_pages *gp, cpool__arena *ar) {
    if (!idle(ar)) return false;
    if (holds_memory(ar) && !work_over(ar)) return false;
    release_packed(gp, ar);
    if (return_borrowed(gp, ar) != CPOOL_OK) return false;
    if (ar->work) cpool__allocator_unfence_all(&ar->alloc, ar->work_frees);
    cpool__order_mark_release(ar->work);
    ar->work = NULL;
    ar->work_unknown = false;
    return true;
}

static cpool_status arena_new(cpool__graph_pages *gp, cpool__arena **out) {
    cpool__arena *ar = cpool__calloc(1, sizeof *ar);
    if (!ar) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for a graph's arena");
    ar->gp = gp;
    ar->id = ++gp->next_arena_id;
    ar->in_use = true;
    cpool__segment_source src = {.ctx = ar, .grow = arena_grow, .shrink = arena_shrink};
    if (gp->source.reserve) {
        src.reserve = arena_reserve;
        src.unreserve = arena_unreserve;
        src.map = arena_map;
        src.unmap = arena_unmap;
    }
    cpool__allocator_init(&ar->alloc, &src, 0);
    /* One capture's memory: address space for it alone, so a process may
     * hold many graphs (a span grows to what a request needs). */
    ar->alloc.span_first[0] = CPOOL__ARENA_SPAN_SMALL;
    ar->alloc.span_first[1] = CPOOL__ARENA_SPAN_LARGE;
    ar->alloc.spans_by_branch = true;
    *out = ar;
    return CPOOL_OK;
}

/* Idle arenas whose marked work is over need no pages apart: they go back,
 * their addresses and the shared pages no other arena maps, all but the
 * newest where `keep_newest` (it stays for the next capture to take as it
 * is). Graphs released while their launches ran leave such arenas, each on
 * pages of its own (their runs could not be shared meanwhile). Never
 * waits; nothing on a thread that runs stream work, where the platform may
 * not be called; nothing while suspended, whose resume maps back what its
 * suspend gave (a trim after the resume gives the rest). */
/* Idle, and the work marked at its release over (queried, never waited
 * for), or none to wait for. */
static bool quiet(const cpool__arena *ar) { return idle(ar) && work_over(ar); }

static void give_back_quiet_arenas(cpool__graph_pages *gp, bool keep_newest) {
    if (gp->suspended || cpool__on_stream_thread()) return;
    bool kept = !keep_newest;
    for (cpool__arena **at = &gp->arenas; *at;) {
        cpool__arena *ar = *at;
        bool is_quiet = quiet(ar);
        if (!is_quiet || !kept) {
            kept = kept || is_quiet;
            at = &ar->next;
            continue;
        }
        *at = ar->next;
        gp->arena_count--;
        release_packed(gp, ar);
        arena_destroy(ar);
    }
}

/* The physical bytes that idle arenas (only the quiet ones, with
 * quiet_only) hold and no other arena maps: their pages of their own, and
 * the shared pages only they map. */
typedef struct idle_bytes {
    uint64_t own, shared;
} idle_bytes;

static idle_bytes idle_only_bytes(const cpool__graph_pages *gp, bool quiet_only) {
    idle_bytes bytes = {0};
    uint8_t *held = gp->shared_count ? cpool__calloc(gp->shared_count, 1) : NULL;
    if (gp->shared_count && !held) return bytes; /* an estimate only: none */
    for (const cpool__arena *ar = gp->arenas; ar; ar = ar->next) {
        if (quiet_only ? quiet(ar) : idle(ar)) {
            bytes.own += ar->plain_bytes;
            for (size_t s = 0; s < ar->span_count; s++)
                for (size_t i = 0; i < ar->spans[s].pages; i++)
                    if (ar->spans[s].mapped[i] && ar->spans[s].own[i] && !ar->spans[s].lender[i])
                        bytes.own += CPOOL__PAGE;
            continue;
        }
        for (size_t d = 0; d < ar->taken_cap && d < gp->shared_count; d++)
            if (ar->taken[d] == TAKEN) held[d] = 1;
    }
    for (size_t k = 0; k < gp->shared_count; k++)
        if (gp->shared[k].page && gp->shared[k].maps && !held[k]) bytes.shared += CPOOL__PAGE;
    free(held);
    return bytes;
}

uint64_t cpool__graph_pages_give_back_idle(cpool__graph_pages *gp, bool keep_newest, uint64_t *waiting_out) {
    uint64_t before = gp->shared_bytes + gp->own_bytes;
    give_back_quiet_arenas(gp, keep_newest);
    if (waiting_out) {
        idle_bytes waiting = idle_only_bytes(gp, false);
        *waiting_out = waiting.own + waiting.shared;
    }
    return before - gp->shared_bytes - gp->own_bytes;
}

uint64_t cpool__graph_pages_predict(const cpool__graph_pages *gp, uint64_t scratch_bytes, uint64_t output_bytes) {
    /* The capture's open gives back the quiet idle arenas but one, which it
     * takes, and whose pages no live block is on go back at its seal: as
     * if all of them went, and a new arena took their place. */
    idle_bytes going = gp->suspended ? (idle_bytes){0} : idle_only_bytes(gp, true);
    uint64_t own_new = (output_bytes + CPOOL__PAGE - 1) / CPOOL__PAGE;
    uint64_t shared_new = (output_bytes + scratch_bytes + CPOOL__PAGE - 1) / CPOOL__PAGE - own_new;
    uint64_t shared_now = (gp->shared_bytes - going.shared) / CPOOL__PAGE;
    uint64_t shared = shared_now > shared_new ? shared_now : shared_new;
    return gp->own_bytes - going.own + (shared + own_new) * CPOOL__PAGE;
}

cpool_status cpool__graph_pages_open(cpool__graph_pages *gp, cpool__stream_key packed_key, cpool__arena **out) {
    cpool__graph_pages_release_packed(gp);
    give_back_quiet_arenas(gp, true);
    /* A suspended pool's idle arenas map nothing now: a seal must find
     * nothing to move, so only a new arena will do. */
    cpool__arena *ar = gp->suspended ? NULL : gp->arenas;
    cpool__error_mark before;
    cpool__error_save(&before);
    while (ar && !reusable(gp, ar)) ar = ar->next;
    cpool__error_restore(&before);
    if (ar) {
        ar->in_use = true;
        ar->scratch_count = 0; /* its last capture's blocks are gone */
        cpool__allocator_share_spans(&ar->alloc); /* its last capture's branches' */
        for (size_t d = 0; d < ar->taken_cap; d++) /* what its last capture found in use */
            if (ar->taken[d] == BLOCKED) untake(ar, d);
        ar->unsettled = false;
    } else {
        cpool_status st = arena_new(gp, &ar);
        if (st != CPOOL_OK) return st;
        ar->next = gp->arenas;
        gp->arenas = ar;
        gp->arena_count++;
    }
    ar->packed_key = packed_key;
    *out = ar;
    return CPOOL_OK;
}

cpool_status cpool__graph_pages_packed(cpool__graph_pages *gp, cpool__allocator **out) {
    if (!gp->packed) {
        cpool_status st = arena_new(gp, &gp->packed);
        if (st != CPOOL_OK) return st;
        gp->packed->own_pages = true;
        gp->packed->alloc.spans_by_branch = false; /* every graph's: no capture's branches */
        gp->packed->alloc.top_down_max = CPOOL__PACKED_MAX; /* page bottoms free to lend (tails) */
    }
    *out = &gp->packed->alloc;
    return CPOOL_OK;
}

static cpool_status note_pointer(uintptr_t **list, size_t *count, size_t *cap, void *ptr) {
    if (*count == *cap) {
        size_t more = *cap ? 2 * *cap : 8;
        uintptr_t *grown = cpool__realloc(*list, more * sizeof *grown);
        if (!grown) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory noting a graph's block");
        *list = grown;
        *cap = more;
    }
    (*list)[(*count)++] = (uintptr_t)ptr;
    return CPOOL_OK;
}

cpool_status cpool__arena_note_packed(cpool__arena *ar, void *ptr) {
    return note_pointer(&ar->packed, &ar->packed_count, &ar->packed_cap, ptr);
}

cpool_status cpool__arena_defer_free(cpool__arena *ar, void *ptr, size_t requested) {
    cpool_status st = note_pointer(&ar->deferred, &ar->deferred_count, &ar->deferred_cap, ptr);
    if (st == CPOOL_OK) ar->deferred_requested += requested;
    return st;
}

size_t cpool__arena_take_deferred(cpool__arena *ar, uintptr_t **out) {
    size_t n = ar->deferred_count;
    *out = ar->deferred;
    ar->deferred = NULL;
    ar->deferred_count = ar->deferred_cap = 0;
    ar->deferred_requested = 0;
    return n;
}

bool cpool__graph_pages_deferred(const cpool__graph_pages *gp, const void *ptr) {
    for (const cpool__arena *ar = gp->arenas; ar; ar = ar->next)
        for (size_t i = 0; i < ar->deferred_count; i++)
            if (ar->deferred[i] == (uintptr_t)ptr) return true;
    return false;
}

cpool__arena *cpool__graph_pages_packed_freed(cpool__graph_pages *gp, const void *ptr) {
    cpool__arena *ar = (cpool__arena *)cpool__graph_pages_packed_owner(gp, (uintptr_t)ptr);
    for (size_t i = 0; ar && i < ar->packed_count; i++)
        if (ar->packed[i] == (uintptr_t)ptr) ar->packed[i] = ar->packed[--ar->packed_count];
    return ar;
}

cpool__stream_key cpool__arena_packed_key(const cpool__arena *ar) { return ar->packed_key; }

cpool__allocator *cpool__arena_allocator(cpool__arena *ar) { return &ar->alloc; }
uint64_t cpool__arena_id(const cpool__arena *ar) { return ar->id; }
bool cpool__arena_in_use(const cpool__arena *ar) { return ar->in_use; }

static cpool_status seal_pages(cpool__graph_pages *gp, cpool__arena *ar);

/* Pages of live blocks, collected by a walk. */
typedef struct page_list {
    uintptr_t *addr;
    size_t count, cap;
    bool failed;
    const cpool__arena *ar; /* its scratch parts are no live pages; NULL: none */
} page_list;

static void note_page(page_list *l, uintptr_t addr) {
    if (l->count && l->addr[l->count - 1] == addr) return; /* blocks come in address order */
    if (l->count == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        uintptr_t *grown = cpool__realloc(l->addr, cap * sizeof *grown);
        if (!grown) {
            l->failed = true;
            return;
        }
        l->addr = grown;
        l->cap = cap;
    }
    l->addr[l->count++] = addr;
}

/* Whether the page at p lies whole in a scratch part of live block b. */
static bool scratch_page(const cpool__arena *ar, const cpool__block_view *b, uintptr_t p) {
    for (size_t k = 0; ar && k < ar->scratch_count; k++) {
        const struct scratch_part *part = &ar->scratch[k];
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
    if (ar->scratch_count == ar->scratch_cap) {
        size_t cap = ar->scratch_cap ? 2 * ar->scratch_cap : 8;
        struct scratch_part *grown = cpool__realloc(ar->scratch, cap * sizeof *grown);
        if (!grown) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory noting a block's scratch");
        ar->scratch = grown;
        ar->scratch_cap = cap;
    }
    ar->scratch[ar->scratch_count++] = (struct scratch_part){(uintptr_t)block, lo, hi, info.serial};
    return CPOOL_OK;
}

static void no_segment(void *ctx, uintptr_t base, size_t size) {
    (void)ctx;
    (void)base;
    (void)size;
}

uint64_t cpool__arena_graph(const cpool__arena *ar) { return ar->graph; }

void cpool__arena_note_launch(cpool__arena *ar) {
    if (!atomic_load_explicit(&ar->launched, memory_order_relaxed)) atomic_store(&ar->launched, true);
}

cpool_status cpool__arena_seal(cpool__graph_pages *gp, cpool__arena *ar, uint64_t graph_id) {
    cpool_status st = seal_pages(gp, ar);
    if (st == CPOOL_OK && graph_id) ar->graph = graph_id;
    return st;
}

static void end_borrow(cpool__graph_pages *gp, arena_span *sp, size_t i);

/* A swap failed both ways (swap_page's *lost): page i of span sp has
 * nothing behind it. The allocator still counts it, its blocks unbacked;
 * an idle arena is then taken by no capture (its work unknown), and a
 * trim gives it back. */
static void lose_page(cpool__graph_pages *gp, cpool__arena *ar, arena_span *sp, size_t i) {
    sp->mapped[i] = 0;
    if (sp->lender[i]) {
        end_borrow(gp, sp, i);
    } else {
        untake(ar, sp->number[i]);
        unmapped_shared(gp, sp->number[i]);
    }
    ar->work_unknown = true;
}

/* Moves the arena's shared pages, in address order, to the lowest numbers
 * it does not use: its outputs' pages, mapped first and now its own, left
 * their numbers free, and other graphs start their scratch at the lowest.
 * The graph has not run, so a page may change behind its address. A page
 * moves only to a number no page of the arena maps, so nothing aliases
 * even if a move fails midway (the page then stays where it was). */
static void compact_numbers(cpool__graph_pages *gp, cpool__arena *ar) {
    cpool_status st; /* a page that cannot move stays where it is: no failure */
    for (size_t s = 0; s < ar->span_count; s++) {
        arena_span *sp = &ar->spans[s];
        for (size_t i = 0; i < sp->pages; i++) {
            size_t d, old = sp->number[i];
            /* A run's pages stay in their run. */
            if (!sp->mapped[i] || sp->own[i] || gp->shared[old].run || !next_number(ar, 1, &d, &st) || d >= old)
                continue;
            void *addr = (void *)(sp->base + i * CPOOL__PAGE), *page;
            if (shared_page(gp, d, &page) != CPOOL_OK) return;
            bool lost;
            if (swap_page(gp, addr, gp->shared[old].page, page, &lost) != CPOOL_OK) {
                release_unmapped(gp, d, d + 1);
                if (lost) lose_page(gp, ar, sp, i);
                return;
            }
            gp->shared[d].maps++;
            ar->taken[d] = TAKEN;
            untake(ar, old);
            sp->number[i] = d;
            unmapped_shared(gp, old);
        }
    }
}

/* The run whose first page is page i of span sp, or NULL. */
static cpool__page_run *run_starting_at(const cpool__graph_pages *gp, const arena_span *sp, size_t i) {
    cpool__page_run *run = sp->mapped[i] && !sp->own[i] ? gp->shared[sp->number[i]].run : NULL;
    return run && run->addr == sp->base + i * CPOOL__PAGE ? run : NULL;
}

/* Whether run could take the shared numbers [d, d + run->pages): each is
 * one of its own or has no page (no arena notes a number without one). */
static bool run_fits(const cpool__graph_pages *gp, const cpool__page_run *run, size_t d) {
    for (size_t k = d; k < d + run->pages && k < gp->shared_count; k++)
        if (gp->shared[k].page && gp->shared[k].run != run) return false;
    return true;
}

/* Moves each of the arena's runs to the lowest numbers it fits (run_fits):
 * like compact_numbers, but only the records change, as the memory behind
 * the arena's addresses stays the same (only this arena maps it). */
static void slide_runs(cpool__graph_pages *gp, cpool__arena *ar) {
    for (size_t s = 0; s < ar->span_count; s++) {
        arena_span *sp = &ar->spans[s];
        for (size_t i = 0; i < sp->pages; i++) {
            cpool__page_run *run = run_starting_at(gp, sp, i);
            if (!run) continue;
            size_t d = 0;
            while (d < run->first && !run_fits(gp, run, d)) d++;
            if (d == run->first) continue;
            for (size_t j = 0; j < run->pages; j++) {
                gp->shared[run->first + j] = (cpool__shared_page){0};
                untake(ar, run->first + j);
            }
            for (size_t j = 0; j < run->pages; j++) { /* d + j < run->first + j: within the records' room */
                gp->shared[d + j] = (cpool__shared_page){.page = run->mem, .maps = 1, .run = run};
                ar->taken[d + j] = TAKEN;
                sp->number[i + j] = d + j;
            }
            run->first = d;
            trim_shared_count(gp);
            i += run->pages - 1;
        }
    }
}

/* A run of the arena that numbers below it do not fit (slide_runs) while
 * some of them are free for it leaves those free and holds as many pages
 * more at the top: its last pages, as many as such numbers, become pages
 * alone, which compact_numbers then moves down (the arena never ran). */
static void split_run_tails(cpool__graph_pages *gp, cpool__arena *ar) {
    for (size_t s = 0; s < ar->span_count; s++) {
        arena_span *sp = &ar->spans[s];
        for (size_t i = 0; i < sp->pages; i++) {
            cpool__page_run *run = run_starting_at(gp, sp, i);
            if (!run) continue;
            i += run->pages - 1;
            size_t free_below = 0;
            for (size_t d = 0; d < run->first; d++)
                free_below += (d >= ar->taken_cap || !ar->taken[d]) && !gp->shared[d].run;
            if (!free_below) continue;
            uint8_t *cut = cpool__calloc(run->pages, 1);
            if (!cut) return;
            for (size_t j = run->pages - (free_below < run->pages ? free_below : run->pages); j < run->pages; j++)
                cut[j] = 1;
            (void)split_run(gp, run, cut); /* left whole, it only shares less */
            free(cut);
        }
    }
}

/* The runs this arena's capture found in use and left alone: split now if
 * their work is over, so that compaction moves its pages onto them. */
static void retry_blocked(cpool__graph_pages *gp, cpool__arena *ar) {
    for (size_t d = 0; d < ar->taken_cap && d < gp->shared_count; d++) {
        if (ar->taken[d] != BLOCKED) continue;
        cpool__page_run *run = gp->shared[d].run;
        if (!run)
            untake(ar, d);
        else if (!split_run_quiet(gp, run, ar, 0, run->pages))
            d = run->first + run->pages - 1; /* still whole */
    }
}

/* The runs that hold pages of live blocks are split around them, so that
 * those pages can become the arena's own (nothing ran in it since its
 * capture took it). */
static cpool_status split_live_runs(cpool__graph_pages *gp, cpool__arena *ar, const page_list *l) {
    for (size_t k = 0; k < l->count; k++) {
        arena_span *sp = span_of(ar, l->addr[k]);
        size_t i = (l->addr[k] - sp->base) / CPOOL__PAGE;
        cpool__page_run *run = sp->own[i] ? NULL : gp->shared[sp->number[i]].run;
        if (!run) continue;
        uint8_t *cut = cpool__calloc(run->pages, 1);
        if (!cut) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory sealing a graph's pages");
        uintptr_t end = run->addr + run->pages * CPOOL__PAGE;
        for (size_t m = 0; m < l->count; m++)
            if (l->addr[m] >= run->addr && l->addr[m] < end) cut[(l->addr[m] - run->addr) / CPOOL__PAGE] = 1;
        cpool_status st = split_run(gp, run, cut);
        free(cut);
        if (st != CPOOL_OK) return st;
    }
    return CPOOL_OK;
}

static bool address_listed(const uintptr_t *list, size_t count, uintptr_t addr) {
    for (size_t k = 0; k < count; k++)
        if (list[k] == addr) return true;
    return false;
}

static bool page_listed(const page_list *l, uintptr_t addr) { return address_listed(l->addr, l->count, addr); }

/* Pages of the arena's own that no live block is on any more (outputs
 * freed since) go back to the shared set: each becomes the shared page of
 * a number none has (records only), which compact_numbers may then move
 * lower. */
static void share_freed_pages(cpool__graph_pages *gp, cpool__arena *ar) {
    if (ar->own_pages || !gp->own_bytes) return;
    page_list live = {.ar = ar};
    cpool__allocator_walk(&ar->alloc, &(cpool__walker){.ctx = &live, .segment = no_segment, .block = live_pages_block});
    size_t d = 0;
    for (size_t s = 0; s < ar->span_count && !live.failed; s++) {
        arena_span *sp = &ar->spans[s];
        for (size_t i = 0; i < sp->pages; i++) {
            uintptr_t addr = sp->base + i * CPOOL__PAGE;
            if (!sp->mapped[i] || !sp->own[i] || sp->lender[i] || page_listed(&live, addr)) continue;
            while (d < gp->shared_count && (gp->shared[d].page || (d < ar->taken_cap && ar->taken[d]))) d++;
            if (number_room(ar, d) != CPOOL_OK) break;
            gp->shared[d] = (cpool__shared_page){.page = sp->own[i], .maps = 1};
            if (d >= gp->shared_count) gp->shared_count = d + 1;
            ar->taken[d] = TAKEN;
            sp->number[i] = d;
            sp->own[i] = NULL;
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

/* Graphs captured while a run they needed was in use hold pages of their
 * own numbers: once the graphs' launches can be held back with the device
 * idle, they settle onto the shared ones (a capture's end and a trim
 * try). */
static bool graphs_unsettled(const cpool__graph_pages *gp) {
    for (const cpool__arena *ar = gp->arenas; ar; ar = ar->next)
        if (ar->graph && ar->unsettled) return true;
    return false;
}

static void settle_graphs(cpool__graph_pages *gp) {
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

void cpool__graph_pages_settle(cpool__graph_pages *gp) {
    give_back_quiet_arenas(gp, true);
    if (gp->unsettled) settle_graphs(gp);
}

/* ---- tails ------------------------------------------------------------------ */

/*
 * A capture's highest page in a span is often written only in part: its
 * blocks end below the page's end. The packed region hands its blocks of
 * up to CPOOL__PACKED_MAX out from the top of its pages down (alloc.h,
 * top_down_max), so the bottoms of pages that hold only those are free.
 * At its seal an arena whose tail page maps a shared page that no other
 * arena maps borrows, for that page, the memory of a packed page instead,
 * whose bytes below the tail's end the packed region lends it
 * (cpool__allocator_lend: no block is placed there while they are lent),
 * and the shared page goes back. Graphs' scratch shares the lent
 * bytes as it shares shared pages (graphs never run at the same time); the
 * outputs above are never written by another graph. So sixteen graphs of
 * small outputs hold the largest one's pages, its tail included, and no
 * page for their outputs where its tail leaves room. An arena taken by a
 * new capture first gives its borrowed pages back for shared ones, as its
 * blocks may reach higher now.
 */

/* The packed page at addr: its span, and its index in *j. */
static arena_span *packed_page(const cpool__graph_pages *gp, uintptr_t addr, size_t *j) {
    arena_span *lsp = span_of(gp->packed, addr);
    *j = (addr - lsp->base) / CPOOL__PAGE;
    return lsp;
}

/* Packed page j of span lsp lends nothing any more: the blocks it lent
 * (from its start, one after another) are free again. */
static void end_loans(cpool__graph_pages *gp, arena_span *lsp, size_t j) {
    uintptr_t page = lsp->base + j * CPOOL__PAGE;
    cpool__block_info info;
    for (uintptr_t at = page; at < page + lsp->lent[j]; at += info.size) {
        if (!cpool__allocator_live_block(&gp->packed->alloc, (void *)at, &info)) break;
        cpool__allocator_end_loan(&gp->packed->alloc, at);
        gp->lent_blocks--;
    }
    gp->lent_bytes -= lsp->lent[j];
    lsp->lent[j] = 0;
}

/* Page i of span sp borrows no more: its lender's loans end with its last
 * borrower (no work may use the page). */
static void end_borrow(cpool__graph_pages *gp, arena_span *sp, size_t i) {
    size_t j;
    arena_span *lsp = packed_page(gp, sp->lender[i], &j);
    if (--lsp->borrowers[j] == 0) end_loans(gp, lsp, j);
    sp->own[i] = NULL;
    sp->lender[i] = 0;
}

/* The packed pages an arena's pages borrow: two pages of one arena never
 * share memory. Listed once at its seal (a handful), not searched for
 * every packed page. */
typedef struct lender_list {
    uintptr_t *addr;
    size_t count, cap;
} lender_list;

static bool listed(const lender_list *l, uintptr_t addr) { return address_listed(l->addr, l->count, addr); }

/* false: out of host memory (the last error says so; lend_tails keeps it). */
static bool list_lender(lender_list *l, uintptr_t addr) {
    return note_pointer(&l->addr, &l->count, &l->cap, (void *)addr) == CPOOL_OK;
}

/* A packed page that lends ar at least its first `bytes` (lent now if they
 * were free): its span, and its index in *j; NULL if none can. */
static arena_span *find_lender(cpool__graph_pages *gp, const lender_list *taken, size_t bytes, size_t *j) {
    const cpool__arena *packed = gp->packed;
    for (size_t s = 0; s < packed->span_count; s++) {
        arena_span *lsp = &packed->spans[s];
        for (*j = 0; *j < lsp->pages; (*j)++) {
            uintptr_t addr = lsp->base + *j * CPOOL__PAGE;
            if (!lsp->mapped[*j] || listed(taken, addr)) continue;
            if (lsp->lent[*j] >= bytes) return lsp;
            /* More bytes: the next ones, lent as a block of their own. */
            if (!cpool__allocator_lend(&gp->packed->alloc, addr + lsp->lent[*j], bytes - lsp->lent[*j])) continue;
            gp->lent_bytes += bytes - lsp->lent[*j];
            gp->lent_blocks++;
            lsp->lent[*j] = (uint32_t)bytes;
            return lsp;
        }
    }
    return NULL;
}

/* The arena's tails (one a segment), as many as it has. */
typedef struct tail_list {
    uintptr_t *page;
    size_t *extent;
    size_t count, cap;
} tail_list;

static void note_tail(void *ctx, uintptr_t page, size_t extent) {
    tail_list *l = ctx;
    if (l->count == l->cap) {
        size_t more = l->cap ? 2 * l->cap : 8;
        uintptr_t *pages = cpool__realloc(l->page, more * sizeof *pages);
        if (pages) l->page = pages;
        size_t *extents = pages ? cpool__realloc(l->extent, more * sizeof *extents) : NULL;
        if (extents) l->extent = extents;
        if (!extents) return; /* out of host memory: this tail keeps its shared page */
        l->cap = more;
    }
    l->page[l->count] = page;
    l->extent[l->count++] = extent;
}

/* The arena's tail page at addr, its blocks below `extent`, borrows a
 * packed page if it maps a shared page that no other arena maps (which
 * then goes back). Its capture just ended: its graph has not run. A tail
 * left as it was is no failure. */
static void lend_tail(cpool__graph_pages *gp, cpool__arena *ar, lender_list *taken, uintptr_t addr, size_t extent) {
    arena_span *sp = span_of(ar, addr);
    size_t i = sp ? (addr - sp->base) / CPOOL__PAGE : 0, j;
    if (!sp || !sp->mapped[i] || sp->own[i] || extent >= CPOOL__PAGE || gp->shared[sp->number[i]].maps != 1) return;
    arena_span *lsp = find_lender(gp, taken, extent, &j);
    if (!lsp) return;
    if (!list_lender(taken, lsp->base + j * CPOOL__PAGE)) { /* unlisted, a later tail could take it too */
        if (!lsp->borrowers[j]) end_loans(gp, lsp, j);
        return;
    }
    cpool__page_run *run = gp->shared[sp->number[i]].run;
    size_t d = sp->number[i];
    void *page = (void *)addr, *mem = lsp->own[j];
    bool alone = !run || split_run_quiet(gp, run, ar, d - run->first, 1), lost = false;
    if (!alone || swap_page(gp, page, gp->shared[d].page, mem, &lost) != CPOOL_OK) {
        taken->count--;
        if (!lsp->borrowers[j]) end_loans(gp, lsp, j); /* lent for nothing */
        if (lost) lose_page(gp, ar, sp, i);
        return;
    }
    sp->own[i] = mem;
    sp->lender[i] = lsp->base + j * CPOOL__PAGE;
    lsp->borrowers[j]++;
    untake(ar, d);
    unmapped_shared(gp, d);
}

/* Each of the arena's tails (cpool__allocator_tails) tries to borrow. */
static void lend_tails(cpool__graph_pages *gp, cpool__arena *ar) {
    if (!gp->packed || ar->own_pages || gp->suspended || !ar->span_count) return;
    tail_list tails = {0};
    cpool__allocator_tails(&ar->alloc, note_tail, &tails);
    cpool__error_mark before;
    cpool__error_save(&before);
    lender_list taken = {0};
    bool listed_all = true;
    for (size_t s = 0; s < ar->span_count; s++)
        for (size_t i = 0; i < ar->spans[s].pages; i++)
            if (ar->spans[s].lender[i]) listed_all = listed_all && list_lender(&taken, ar->spans[s].lender[i]);
    for (size_t k = 0; listed_all && k < tails.count; k++) lend_tail(gp, ar, &taken, tails.page[k], tails.extent[k]);
    cpool__error_restore(&before);
    free(taken.addr);
    free(tails.page);
    free(tails.extent);
}

/* The arena's borrowed pages go back: each maps a shared page instead. No
 * work may use them (the arena is taken by a capture). On failure the
 * pages given back so far stay so. */
static cpool_status return_borrowed(cpool__graph_pages *gp, cpool__arena *ar) {
    for (size_t s = 0; s < ar->span_count; s++) {
        arena_span *sp = &ar->spans[s];
        for (size_t i = 0; i < sp->pages; i++) {
            if (!sp->lender[i]) continue;
            size_t d;
            void *page, *addr = (void *)(sp->base + i * CPOOL__PAGE);
            cpool_status st = CPOOL_OK;
            if (!next_number(ar, 1, &d, &st)) return st;
            if ((st = shared_page(gp, d, &page)) != CPOOL_OK) return st;
            bool lost;
            if ((st = swap_page(gp, addr, sp->own[i], page, &lost)) != CPOOL_OK) {
                release_unmapped(gp, d, d + 1);
                if (lost) lose_page(gp, ar, sp, i);
                return st;
            }
            gp->shared[d].maps++;
            ar->taken[d] = TAKEN;
            sp->number[i] = d;
            end_borrow(gp, sp, i);
        }
    }
    return CPOOL_OK;
}

/* The pages of live blocks that still map shared memory get their own. */
/* The pages at addrs[0..n) of ar, each mapping a shared page that other
 * arenas map too, get memory of their own, all made first (a failure to
 * make one changes nothing). Swapped: the graph has not run, so the new
 * page needs no copy. On a failed swap the pages swapped so far stay the
 * arena's own. */
static cpool_status own_pages(cpool__graph_pages *gp, cpool__arena *ar, const uintptr_t *addrs, size_t n) {
    cpool_status st = CPOOL_OK;
    void **fresh = n ? cpool__calloc(n, sizeof *fresh) : NULL;
    if (n && !fresh) st = cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory sealing a graph's pages");
    if (st == CPOOL_OK && !bound_allows(gp, (uint64_t)n * CPOOL__PAGE)) st = over_bound(gp, (uint64_t)n * CPOOL__PAGE);
    size_t made = 0;
    for (; st == CPOOL_OK && made < n; made++) st = gp->source.create(gp->source.ctx, 1, &fresh[made]);
    for (size_t k = 0; st == CPOOL_OK && k < n; k++) {
        arena_span *sp = span_of(ar, addrs[k]);
        size_t i = (addrs[k] - sp->base) / CPOOL__PAGE, d = sp->number[i];
        bool lost;
        if ((st = swap_page(gp, (void *)addrs[k], gp->shared[d].page, fresh[k], &lost)) != CPOOL_OK) {
            if (lost) lose_page(gp, ar, sp, i);
            break;
        }
        sp->own[i] = fresh[k];
        untake(ar, d);
        unmapped_shared(gp, d);
        fresh[k] = NULL;
        gp->own_bytes += CPOOL__PAGE;
    }
    for (size_t k = 0; k < made; k++)
        if (fresh[k]) gp->source.release(gp->source.ctx, fresh[k]);
    free(fresh);
    return st;
}

static cpool_status seal_pages(cpool__graph_pages *gp, cpool__arena *ar) {
    if (!ar->span_count) return CPOOL_OK; /* plain segments: nothing shared */
    page_list l = {.ar = ar};
    cpool__allocator_walk(&ar->alloc, &(cpool__walker){.ctx = &l, .segment = no_segment, .block = live_pages_block});
    cpool_status st = l.failed ? cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory sealing a graph's pages")
                               : split_live_runs(gp, ar, &l);
    /* A shared page that no other arena maps simply becomes this one's
     * (its number gets a new page when another arena needs it); the
     * others get memory of their own. */
    size_t n = 0;
    for (size_t k = 0; st == CPOOL_OK && k < l.count; k++) {
        arena_span *sp = span_of(ar, l.addr[k]);
        size_t i = (l.addr[k] - sp->base) / CPOOL__PAGE;
        if (sp->own[i]) continue;
        cpool__shared_page *shared = &gp->shared[sp->number[i]];
        if (shared->maps == 1) {
            sp->own[i] = shared->page;
            untake(ar, sp->number[i]);
            *shared = (cpool__shared_page){0};
            gp->shared_bytes -= CPOOL__PAGE;
            gp->own_bytes += CPOOL__PAGE;
            continue;
        }
        l.addr[n++] = l.addr[k];
    }
    if (st == CPOOL_OK) st = own_pages(gp, ar, l.addr, n);
    free(l.addr);
    if (st == CPOOL_OK) {
        settle(gp, ar);
        lend_tails(gp, ar);
        settle_graphs(gp);
    }
    return st;
}

void cpool__arena_release(cpool__graph_pages *gp, cpool__arena *ar) {
    ar->in_use = false;
    ar->packed_held = gp->packed != NULL;
    atomic_store(&ar->launched, false); /* its next holder's launches count anew */
    ar->released = ++gp->release_clock;
    ar->graph = 0;
    /* With outputs still live too: a capture that splits a run of its
     * pages must wait for its launches (run_quiet). */
    mark_work(gp, ar);
}

void cpool__arena_freed(cpool__graph_pages *gp, cpool__arena *ar) {
    /* A graph's freed output: its pages may go back to sharing (settle). */
    if (ar->graph && gp->own_bytes) ar->unsettled = gp->unsettled = true;
    if (!idle(ar)) return; /* held, or still live blocks: its last free marks */
    ar->released = ++gp->release_clock;
    mark_work(gp, ar);
}

void cpool__graph_pages_unfence_all(cpool__graph_pages *gp, uint64_t upto) {
    for (cpool__arena *ar = gp->arenas; ar; ar = ar->next) cpool__allocator_unfence_all(&ar->alloc, upto);
    if (gp->packed) cpool__allocator_unfence_all(&gp->packed->alloc, upto);
}

cpool__graph_live cpool__graph_pages_live(const cpool__graph_pages *gp) {
    cpool__graph_live live = {0};
    for (const cpool__arena *ar = gp->packed; ar; ar = NULL) {
        /* Less the bytes lent to arenas' tails: their scratch. */
        live.runs += ar->alloc.segment_count;
        live.bytes += ar->alloc.live_block_bytes - gp->lent_bytes;
        live.requested += ar->alloc.allocated - gp->lent_bytes;
        live.blocks += ar->alloc.map_count - gp->lent_blocks;
    }
    for (const cpool__arena *ar = gp->arenas; ar; ar = ar->next) {
        live.runs += ar->alloc.segment_count;
        live.bytes += ar->alloc.live_block_bytes;
        /* Less the blocks of deferred frees: their callers freed them. */
        live.requested += ar->alloc.allocated - ar->deferred_requested;
        live.blocks += ar->alloc.map_count - ar->deferred_count;
    }
    return live;
}

cpool__arena *cpool__graph_pages_find(const cpool__graph_pages *gp, const void *ptr) {
    uintptr_t a = (uintptr_t)ptr;
    for (cpool__arena *ar = gp->arenas; ar; ar = ar->next) {
        if (span_of(ar, a)) return ar;
        if (ar->plain_bytes) {
            cpool__block_info info;
            if (cpool__allocator_live_block(&ar->alloc, ptr, &info)) return ar;
        }
    }
    return NULL;
}

static bool released_since(const cpool__graph_pages *gp, uint64_t released_by) {
    for (const cpool__arena *ar = gp->arenas; ar; ar = ar->next)
        if (ar->released > released_by) return true;
    return false;
}

uint64_t cpool__graph_pages_trim(cpool__graph_pages *gp, uint64_t released_by, bool no_holder) {
    uint64_t before = gp->shared_bytes + gp->own_bytes;
    settle_graphs(gp);
    for (cpool__arena **at = &gp->arenas; *at;) {
        cpool__arena *ar = *at;
        /* Released before the device was quiesced: its packed blocks
         * are free for any capture. */
        if (!ar->in_use && ar->packed_held && ar->released <= released_by) packed_free_for_all(gp, ar);
        if (!ar->in_use && !idle(ar) && ar->released <= released_by) {
            /* A released graph's outputs live on: the pages of its scratch
             * (no work uses them now) go, those of its outputs stay. */
            cpool__allocator_reclaim_graph(&ar->alloc);
            cpool__allocator_trim(&ar->alloc);
        }
        if (!idle(ar) || ar->released > released_by) {
            at = &ar->next;
            continue;
        }
        *at = ar->next;
        gp->arena_count--;
        arena_destroy(ar);
    }
    /* After the arenas: those given back ended their loans. */
    if (gp->packed) {
        /* No graph or capture can run or write there: free packed blocks
         * have no owner left. Else only those no graph keeps (freed in a
         * capture: its graph's until its release; an output freed while its
         * graph lives: that graph's) go, once every release that freed
         * some came before the device was quiesced: a graph released since
         * may still run. */
        if (no_holder)
            cpool__allocator_reclaim_graph(&gp->packed->alloc);
        else if (!released_since(gp, released_by))
            cpool__allocator_reclaim_unkept(&gp->packed->alloc);
        cpool__allocator_trim(&gp->packed->alloc);
    }
    release_unmapped(gp, 0, gp->shared_count);
    return before - gp->shared_bytes - gp->own_bytes;
}

void cpool__graph_pages_destroy(cpool__graph_pages *gp) {
    while (gp->arenas) { /* first: their loans end in the packed region */
        cpool__arena *ar = gp->arenas;
        gp->arenas = ar->next;
        arena_destroy(ar);
    }
    if (gp->packed) arena_destroy(gp->packed);
    for (size_t k = 0; k < gp->shared_count; k++) {
        cpool__page_run *run = gp->shared[k].run;
        if (allocation_at(gp, k)) page_release(gp, gp->shared[k].page);
        if (run && run->first + run->pages == k + 1) free(run);
    }
    free(gp->shared);
    *gp = (cpool__graph_pages){0};
}

/* ---- what arenas hold ------------------------------------------------------- */

void cpool__arena_get_stats(const cpool__arena *ar, cpool__arena_stats *out) {
    *out = (cpool__arena_stats){.live_bytes = ar->alloc.live_block_bytes, .live_blocks = ar->alloc.map_count,
                                .mapped_bytes = ar->plain_bytes, .own_bytes = ar->plain_bytes,
                                .runs = ar->alloc.segment_count};
    cpool__block_info info;
    /* Not its blocks that a capture freed and defers (freed for callers). */
    for (const cpool__arena *o = ar->gp->arenas; o; o = o->next)
        for (size_t i = 0; i < o->deferred_count; i++)
            if (cpool__allocator_live_block(&ar->alloc, (void *)o->deferred[i], &info)) {
                out->live_bytes -= info.size;
                out->live_blocks--;
            }
    /* Its outputs in the pool's packed region. */
    for (size_t i = 0; i < ar->packed_count; i++) {
        if (!cpool__allocator_live_block(&ar->gp->packed->alloc, (void *)ar->packed[i], &info) ||
            cpool__graph_pages_deferred(ar->gp, (void *)ar->packed[i]))
            continue;
        out->live_bytes += info.size;
        out->live_blocks++;
    }
    for (size_t s = 0; s < ar->span_count; s++)
        for (size_t i = 0; i < ar->spans[s].pages; i++) {
            if (!ar->spans[s].mapped[i]) continue;
            out->mapped_bytes += CPOOL__PAGE;
            if (ar->spans[s].own[i] && !ar->spans[s].lender[i])
                out->own_bytes += CPOOL__PAGE;
            else
                out->shared_bytes += CPOOL__PAGE;
        }
}

/* Own pages are numbered after every shared one: by arena and place,
 * unique in the pool. */
static uint64_t own_page_id(const cpool__graph_pages *gp, const cpool__arena *ar, size_t s, size_t i) {
    return gp->shared_cap + ar->id * ((uint64_t)1 << 32) + ((uint64_t)s << 20) + i + 1;
}

void cpool__arena_walk_pages(const cpool__arena *ar, const cpool__page_walker *w) {
    const cpool__graph_pages *gp = ar->gp;
    for (size_t s = 0; s < ar->span_count; s++) {
        const arena_span *sp = &ar->spans[s];
        for (size_t i = 0; i < sp->pages; i++) {
            if (!sp->mapped[i]) continue;
            uint64_t id = sp->own[i] ? own_page_id(gp, ar, s, i) : sp->number[i] + 1;
            if (sp->lender[i]) { /* a packed page's, shared with it */
                const arena_span *lsp = span_of(gp->packed, sp->lender[i]);
                id = own_page_id(gp, gp->packed, (size_t)(lsp - gp->packed->spans),
                                 (sp->lender[i] - lsp->base) / CPOOL__PAGE);
            }
            w->page(w->ctx, sp->base + i * CPOOL__PAGE, id, sp->own[i] && !sp->lender[i], sp->lender[i] != 0);
        }
    }
}

const cpool__arena *cpool__graph_pages_each(const cpool__graph_pages *gp, const cpool__arena *after) {
    return after ? after->next : gp->arenas;
}

void cpool__arena_walk(const cpool__arena *ar, const cpool__walker *w) { cpool__allocator_walk(&ar->alloc, w); }

const cpool__arena *cpool__graph_pages_packed_owner(const cpool__graph_pages *gp, uintptr_t ptr) {
    for (const cpool__arena *ar = gp->arenas; ar; ar = ar->next)
        for (size_t i = 0; i < ar->packed_count; i++)
            if (ar->packed[i] == ptr) return ar;
    return NULL;
}

/* ---- invariants ------------------------------------------------------------- */

/* One arena's pages: counts its own memory into *own and its mappings of
 * shared pages into maps. */
static void check_arena(const cpool__graph_pages *gp, const cpool__arena *ar, uint32_t *maps, uint64_t *own,
                        size_t *borrowed, bool full) {
    if (full || ar == gp->packed) cpool__allocator_check(&ar->alloc);
    CPOOL__INVARIANT("graph pages", (!ar->work && !ar->work_unknown) || !ar->in_use,
                     "arena %llu is held but keeps a mark of earlier work", (unsigned long long)ar->id);
    CPOOL__INVARIANT("graph pages", !idle(ar) || !holds_memory(ar) || ar->work || ar->work_unknown,
                     "arena %llu is idle with memory but marked no work", (unsigned long long)ar->id);
    *own += ar->plain_bytes;
    uint8_t *seen = ar->taken_cap ? calloc(ar->taken_cap, 1) : NULL;
    for (size_t s = 0; s < ar->span_count; s++)
        for (size_t i = 0; i < ar->spans[s].pages; i++) {
            const arena_span *sp = &ar->spans[s];
            CPOOL__INVARIANT("graph pages", sp->mapped[i] || !sp->own[i], "an unmapped page owns memory");
            if (!sp->mapped[i]) continue;
            if (sp->lender[i]) {
                size_t j = 0;
                const arena_span *lsp = gp->packed && !ar->own_pages && span_of(gp->packed, sp->lender[i])
                                            ? packed_page(gp, sp->lender[i], &j)
                                            : NULL;
                CPOOL__INVARIANT("graph pages", lsp && lsp->mapped[j] && lsp->own[j] == sp->own[i] && lsp->lent[j],
                                 "a page borrows from no lending packed page");
                if (borrowed) (*borrowed)++;
                continue;
            }
            if (sp->own[i]) {
                *own += CPOOL__PAGE;
                continue;
            }
            CPOOL__INVARIANT("graph pages", !ar->own_pages, "a page of the packed region maps shared memory");
            size_t d = sp->number[i];
            CPOOL__INVARIANT("graph pages", d < gp->shared_count && gp->shared[d].page,
                             "a mapped page has no shared page behind it");
            CPOOL__INVARIANT("graph pages", d < ar->taken_cap && ar->taken[d] == TAKEN, "page number %zu is not noted taken",
                             d);
            CPOOL__INVARIANT("graph pages", !seen || !seen[d], "two pages of one arena map shared page %zu", d);
            const cpool__page_run *run = gp->shared[d].run;
            CPOOL__INVARIANT("graph pages",
                             !run || (run->arena == ar && d >= run->first && d < run->first + run->pages &&
                                      run->addr + (d - run->first) * CPOOL__PAGE == sp->base + i * CPOOL__PAGE &&
                                      run->mem == gp->shared[d].page && gp->shared[d].maps == 1),
                             "shared page %zu is in a run that arena %llu does not map whole in order", d,
                             (unsigned long long)ar->id);
            if (seen) seen[d] = 1;
            if (maps) maps[d]++;
        }
    for (size_t d = 0; seen && d < ar->taken_cap; d++)
        CPOOL__INVARIANT("graph pages", seen[d] == (ar->taken[d] == TAKEN), "number %zu noted taken by no page", d);
    free(seen);
}

void cpool__graph_pages_check(const cpool__graph_pages *gp, bool full) {
    uint64_t shared = 0, own = 0;
    uint32_t *maps = gp->shared_count ? calloc(gp->shared_count, sizeof *maps) : NULL;
    size_t arenas = 0;
    size_t borrowed = 0, borrowers = 0;
    uint64_t lent = 0;
    if (gp->packed) check_arena(gp, gp->packed, maps, &own, NULL, full);
    for (const cpool__arena *ar = gp->arenas; ar; ar = ar->next, arenas++)
        check_arena(gp, ar, maps, &own, &borrowed, full);
    for (size_t s = 0; gp->packed && s < gp->packed->span_count; s++)
        for (size_t j = 0; j < gp->packed->spans[s].pages; j++) {
            const arena_span *lsp = &gp->packed->spans[s];
            CPOOL__INVARIANT("graph pages", !lsp->borrowers[j] == !lsp->lent[j],
                             "a packed page lends %u bytes to %u pages", lsp->lent[j], lsp->borrowers[j]);
            borrowers += lsp->borrowers[j];
            lent += lsp->lent[j];
        }
    CPOOL__INVARIANT("graph pages", borrowed == borrowers && lent == gp->lent_bytes,
                     "%zu pages borrow, %zu counted; %llu bytes lent, %llu counted", borrowed, borrowers,
                     (unsigned long long)lent, (unsigned long long)gp->lent_bytes);
    for (size_t k = 0; k < gp->shared_count; k++) {
        if (gp->shared[k].page) shared += CPOOL__PAGE;
        CPOOL__INVARIANT("graph pages", !maps || maps[k] == gp->shared[k].maps,
                         "shared page %zu is mapped %u times, counted %u", k, maps ? maps[k] : 0, gp->shared[k].maps);
    }
    free(maps);
    CPOOL__INVARIANT("graph pages", arenas == gp->arena_count, "%zu arenas listed, %zu counted", arenas,
                     gp->arena_count);
    CPOOL__INVARIANT("graph pages", shared == gp->shared_bytes, "shared pages hold %llu bytes, counted %llu",
                     (unsigned long long)shared, (unsigned long long)gp->shared_bytes);
    CPOOL__INVARIANT("graph pages", own == gp->own_bytes, "own pages hold %llu bytes, counted %llu",
                     (unsigned long long)own, (unsigned long long)gp->own_bytes);
}

/* ---- suspend and resume ----------------------------------------------------- */

/* Every mapped page of every arena, the packed region first, in one order
 * that the suspend and the resume share. */
typedef struct page_visit {
    cpool__arena *ar;
    size_t span, page;
} page_visit;

static bool next_page(cpool__graph_pages *gp, page_visit *v) {
    for (;;) {
        if (!v->ar) {
            v->ar = gp->packed ? gp->packed : gp->arenas;
            v->span = v->page = 0;
        } else if (++v->page >= v->ar->spans[v->span].pages) {
            v->page = 0;
            v->span++;
        }
        while (v->ar && v->span >= v->ar->span_count) {
            v->ar = v->ar == gp->packed ? gp->arenas : v->ar->next;
            v->span = v->page = 0;
        }
        if (!v->ar) return false;
        if (v->page < v->ar->spans[v->span].pages && v->ar->spans[v->span].mapped[v->page]) return true;
    }
}

static void *page_addr(const page_visit *v) {
    const arena_span *sp = &v->ar->spans[v->span];
    return (void *)(sp->base + v->page * CPOOL__PAGE);
}

/* The physical page behind a visited page now. */
static void **page_memory(cpool__graph_pages *gp, const page_visit *v) {
    arena_span *sp = &v->ar->spans[v->span];
    return sp->own[v->page] ? &sp->own[v->page] : &gp->shared[sp->number[v->page]].page;
}

/* The run behind a visited page, or NULL. */
static cpool__page_run *page_run(const cpool__graph_pages *gp, const page_visit *v) {
    const arena_span *sp = &v->ar->spans[v->span];
    return sp->own[v->page] ? NULL : gp->shared[sp->number[v->page]].run;
}

/* Whether a visited page begins a mapping: a page alone, or a run's first. */
static bool maps_here(const cpool__graph_pages *gp, const page_visit *v) {
    const cpool__page_run *run = page_run(gp, v);
    return !run || run->addr == (uintptr_t)page_addr(v);
}

/* The place of the packed page at addr among the own pages a resume makes:
 * the packed region's come first, in visiting order. */
static size_t packed_place(const cpool__graph_pages *gp, uintptr_t addr) {
    size_t n = 0;
    for (size_t s = 0; s < gp->packed->span_count; s++) {
        const arena_span *sp = &gp->packed->spans[s];
        for (size_t j = 0; j < sp->pages; j++) {
            if (sp->base + j * CPOOL__PAGE == addr) return n;
            n += sp->mapped[j];
        }
    }
    return n;
}

/* The new memory a resume maps at a visited page (*o: own pages so far). */
static void *resumed_memory(const cpool__graph_pages *gp, const page_visit *v, void **fresh_own, void **fresh_shared,
                            size_t *o) {
    const arena_span *sp = &v->ar->spans[v->span];
    if (sp->lender[v->page]) return fresh_own[packed_place(gp, sp->lender[v->page])];
    return sp->own[v->page] ? fresh_own[(*o)++] : fresh_shared[sp->number[v->page]];
}

void cpool__graph_pages_suspend(cpool__graph_pages *gp) {
    if (gp->suspended) return;
    for (page_visit v = {0}; next_page(gp, &v);)
        if (maps_here(gp, &v)) gp->source.unmap(gp->source.ctx, page_addr(&v), *page_memory(gp, &v));
    for (page_visit v = {0}; next_page(gp, &v);) {
        arena_span *sp = &v.ar->spans[v.span];
        if (sp->own[v.page] && !sp->lender[v.page]) gp->source.release(gp->source.ctx, sp->own[v.page]);
    }
    for (size_t k = 0; k < gp->shared_count; k++)
        if (allocation_at(gp, k)) gp->source.release(gp->source.ctx, gp->shared[k].page);
    gp->suspended = true;
}

/* A failed resume: the first `mapped` mappings come down, and the
 * memory made for it goes back; the records stay as they were. */
static void resume_undo(cpool__graph_pages *gp, size_t mapped, size_t made, void **fresh_own, void **fresh_shared) {
    size_t o = 0;
    page_visit u = {0};
    for (size_t n = 0; n < mapped && next_page(gp, &u);) {
        if (!maps_here(gp, &u)) continue;
        gp->source.unmap(gp->source.ctx, page_addr(&u), resumed_memory(gp, &u, fresh_own, fresh_shared, &o));
        n++;
    }
    for (size_t k = 0; k < made; k++) gp->source.release(gp->source.ctx, fresh_own[k]);
    for (size_t k = 0; fresh_shared && k < gp->shared_count; k++)
        if (fresh_shared[k] && allocation_at(gp, k)) gp->source.release(gp->source.ctx, fresh_shared[k]);
}

/* A resume that mapped everything: the records take the new memory. */
static void resume_commit(cpool__graph_pages *gp, void **fresh_own, void **fresh_shared) {
    size_t o = 0;
    for (page_visit u = {0}; next_page(gp, &u);) {
        arena_span *sp = &u.ar->spans[u.span];
        size_t j; /* the packed region's pages come first: a lender's is new already */
        if (sp->lender[u.page])
            sp->own[u.page] = packed_page(gp, sp->lender[u.page], &j)->own[j];
        else if (sp->own[u.page])
            sp->own[u.page] = fresh_own[o++];
    }
    for (size_t k = 0; k < gp->shared_count; k++) {
        if (!gp->shared[k].page) continue;
        gp->shared[k].page = fresh_shared[k];
        if (gp->shared[k].run && gp->shared[k].run->first == k) gp->shared[k].run->mem = fresh_shared[k];
    }
    gp->suspended = false;
}

cpool_status cpool__graph_pages_resume(cpool__graph_pages *gp) {
    if (!gp->suspended) return CPOOL_OK;
    /* New memory for every page first, then every mapping; a failure gives
     * back what was made and leaves the records as they were. */
    size_t own = 0, made = 0, mapped = 0;
    for (page_visit v = {0}; next_page(gp, &v);)
        own += v.ar->spans[v.span].own[v.page] && !v.ar->spans[v.span].lender[v.page];
    void **fresh_shared = gp->shared_count ? cpool__calloc(gp->shared_count, sizeof *fresh_shared) : NULL;
    void **fresh_own = own ? cpool__calloc(own, sizeof *fresh_own) : NULL;
    cpool_status st = (gp->shared_count && !fresh_shared) || (own && !fresh_own)
                          ? cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory resuming graph pages")
                          : CPOOL_OK;
    /* A run again as one allocation, mapped whole. */
    for (size_t k = 0; st == CPOOL_OK && k < gp->shared_count; k++)
        if (allocation_at(gp, k))
            st = gp->source.create(gp->source.ctx, gp->shared[k].run ? gp->shared[k].run->pages : 1, &fresh_shared[k]);
    for (size_t k = 0; st == CPOOL_OK && k < gp->shared_count; k++)
        if (gp->shared[k].run && !allocation_at(gp, k)) fresh_shared[k] = fresh_shared[gp->shared[k].run->first];
    for (; st == CPOOL_OK && made < own; made++) {
        st = gp->source.create(gp->source.ctx, 1, &fresh_own[made]);
        if (st != CPOOL_OK) break;
    }
    size_t o = 0;
    page_visit v = {0};
    while (st == CPOOL_OK && next_page(gp, &v)) {
        if (!maps_here(gp, &v)) continue;
        st = gp->source.map(gp->source.ctx, page_addr(&v), resumed_memory(gp, &v, fresh_own, fresh_shared, &o));
        if (st == CPOOL_OK) mapped++;
    }
    if (st != CPOOL_OK)
        resume_undo(gp, mapped, made, fresh_own, fresh_shared);
    else
        resume_commit(gp, fresh_own, fresh_shared);
    free(fresh_shared);
    free(fresh_own);
    return st;
}

bool cpool__graph_pages_holds(const cpool__graph_pages *gp, uintptr_t addr) {
    return (gp->packed && span_of(gp->packed, addr)) || cpool__graph_pages_find(gp, (const void *)addr);
}

void cpool__graph_pages_walk_live(const cpool__graph_pages *gp, const cpool__walker *w) {
    if (gp->packed) cpool__allocator_walk(&gp->packed->alloc, w);
    for (const cpool__arena *ar = gp->arenas; ar; ar = ar->next) cpool__allocator_walk(&ar->alloc, w);
}
