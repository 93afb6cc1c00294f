/*
 * What the files of graph pages share and no one else sees: the page
 * record, the spans of addresses that hold them, arenas, runs and the
 * packed region (graph_pages.h draws the states). The files are layers,
 * each calling only those below it (tests/check_layers.sh --calls):
 *
 *   graph_pages.c   arenas' lives: open, release, trim, suspend, stats
 *   page_seal.c     a capture's end: own pages, settling, tails
 *   arena_map.c     the allocators' segment sources: map, unmap
 *   page_runs.c     runs, and the numbers an arena's pages map
 *   page_table.c    records, whether an arena is idle, the shared set,
 *                   the one page swap, loans
 *
 * Everything runs under the pool's lock.
 */
#ifndef CPOOL_PAGES_INTERNAL_H
#define CPOOL_PAGES_INTERNAL_H

#include <stdatomic.h>

#include "graph_pages.h"

/* One page of an arena's (or the packed region's) addresses: graph_pages.h
 * has the table of states and moves. */
typedef enum cpool__page_state {
    CPOOL__PAGE_UNMAPPED = 0, /* nothing behind the address */
    CPOOL__PAGE_SHARED,       /* the shared page `number` (alone, or a run's) */
    CPOOL__PAGE_OWN,          /* memory of its own, `mem` */
    CPOOL__PAGE_BORROWED,     /* a packed page's memory, `mem`, lent by the packed page at `lender` */
} cpool__page_state;

typedef struct cpool__page {
    uint8_t state;    /* cpool__page_state */
    size_t number;    /* SHARED */
    void *mem;        /* OWN, BORROWED */
    uintptr_t lender; /* BORROWED */
} cpool__page;

/* What a packed page lends arenas' tails: how many pages borrow it, and
 * the bytes from its start lent to them (both 0, or neither). */
typedef struct cpool__page_loan {
    uint32_t borrowers, lent;
} cpool__page_loan;

/* Address space reserved at once: its pages' records (loans: the packed
 * region's only), in `reach` pages (more than `pages` but for a pool's only
 * arena, graph_pages.h: spare addresses, cpool__run_map). */
typedef struct cpool__page_span {
    uintptr_t base;
    size_t pages, reach;
    cpool__page *page;
    cpool__page_loan *loan;
} cpool__page_span;

typedef struct cpool__span_list {
    cpool__page_span *spans;
    size_t count, cap;
} cpool__span_list;

/* Where a run is mapped whole: at `addr`, in `arena`'s addresses, whose
 * pages there map its first `used` numbers. A resume's run may reach past
 * them (its numbers' pages that other, larger graphs map): the arena maps
 * the allocation whole, and the addresses past `used` are spare, in no
 * page's record (UNMAPPED, or past its span's records). */
typedef struct cpool__run_map {
    cpool__arena *arena;
    uintptr_t addr;
    size_t used;
} cpool__run_map;

/* A run: one allocation behind the shared numbers [first, first + pages),
 * in number order, mapped whole by the arena whose capture made it (`one`)
 * or, made by a resume, by every arena whose pages map its first numbers
 * (or all) at consecutive addresses (`more`, `maps` of them). Its shared
 * pages count the arena pages that map them (the mappings' used parts). */
struct cpool__page_run {
    void *mem;
    size_t first, pages;
    size_t maps;         /* 1, or more after a resume */
    cpool__run_map one;  /* the mapping where maps is 1 */
    cpool__run_map *more; /* the mappings where maps is more than 1 */
};

/* A run's mappings (maps of them), and where arena ar maps it (NULL: it
 * does not). */
static inline cpool__run_map *cpool__run_maps(cpool__page_run *run) { return run->more ? run->more : &run->one; }
/* Whether one arena maps the run, all of it its pages: what it does with
 * them (split, renumber) changes no other arena's mappings. */
static inline bool cpool__run_alone_in_one(const cpool__page_run *run) {
    return run->maps == 1 && run->one.used == run->pages;
}
static inline const cpool__run_map *cpool__run_map_of(const cpool__page_run *run, const cpool__arena *ar) {
    const cpool__run_map *m = run->more ? run->more : &run->one;
    for (size_t x = 0; x < run->maps; x++)
        if (m[x].arena == ar) return &m[x];
    return NULL;
}

/* An arena's note of a shared number (`taken`): one of its pages maps it,
 * or it is a page of another arena's run that could not be split when the
 * arena wanted it (its capture maps other numbers; its seal tries again). */
enum { CPOOL__NUMBER_FREE = 0, CPOOL__NUMBER_TAKEN = 1, CPOOL__NUMBER_BLOCKED = 2 };

struct cpool__arena {
    cpool__arena *next;
    cpool__graph_pages *gp;
    uint64_t id;
    cpool__allocator alloc;
    cpool__span_list spans;
    uint8_t *taken; /* by shared number: CPOOL__NUMBER_* */
    size_t taken_cap;
    size_t low_free; /* no number below is free (where free_number starts looking) */
    bool in_use;     /* a capture or a graph holds it */
    /* The packed blocks its capture handed out that are still live (the
     * graph's packed outputs), and the key its frees there carry. */
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
    struct cpool__scratch_part {
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
    uint64_t work_frees;  /* the free clock at the mark: every free in the arena came before */
    uint64_t graph;       /* the graph that holds it, once sealed */
    atomic_bool launched; /* its graph was launched (cpool__arena_note_launch) */
    bool unsettled;       /* its capture found a run in use: its pages may settle lower (settle_graphs) */
    uint64_t plain_bytes; /* plain segments (no address space to share) */
    /* A page that could not even be mapped back after a failed remap
     * (cpool__page_swap; page_runs.c, lose_run): its graph launches
     * no more, and no capture takes it again. */
    atomic_bool lost;
};

/* The packed region (graph_pages.h): every mapped page its own memory,
 * which arenas' tails may borrow the bottom of. */
struct cpool__packed_region {
    cpool__graph_pages *gp;
    uint64_t id; /* numbers its pages in snapshots, after the arenas' */
    cpool__allocator alloc;
    cpool__span_list spans;
    uint64_t plain_bytes; /* plain segments (no address space to reserve) */
    /* Bytes lent to arenas' tails, in how many of its blocks. */
    uint64_t lent_bytes;
    size_t lent_blocks;
};

/* ---- page_table.c: records, the shared set, the swap, loans -------------- */

cpool__page_span *cpool__span_of(const cpool__span_list *l, uintptr_t addr);
/* Page i of a span, and the index of the page at addr in it. */
size_t cpool__page_index(const cpool__page_span *sp, uintptr_t addr);
void *cpool__page_addr(const cpool__page_span *sp, size_t i);
/* Reserves `bytes` of address space (whole pages) as a new span: records
 * (with loans: the packed region's) and reservation, with `reach` the
 * address space CPOOL__ARENA_SPAN_REACH times as large, all or nothing. */
cpool_status cpool__span_add(cpool__graph_pages *gp, cpool__span_list *l, size_t bytes, bool loans, bool reach,
                             void **base);
void cpool__span_remove(cpool__graph_pages *gp, cpool__span_list *l, void *base, size_t bytes);
void cpool__span_list_free(cpool__span_list *l);

/* While suspended no physical page exists: these have nothing to do (the
 * records stay, naming nothing, so that a resume makes the same pages). */
void cpool__pages_unmap(cpool__graph_pages *gp, void *addr, void *mem);
void cpool__pages_release(cpool__graph_pages *gp, void *mem);
/* CPOOL_OK if `bytes` more of graph memory stay within the pool's bound,
 * else the failure that says they do not. */
cpool_status cpool__pages_bound(const cpool__graph_pages *gp, uint64_t bytes);
/* The shared page number k, made if there is none yet. */
cpool_status cpool__shared_get(cpool__graph_pages *gp, size_t k, void **out);
void cpool__shared_trim_count(cpool__graph_pages *gp);
/* Whether shared number k begins an allocation: a page alone, or a run's first. */
bool cpool__shared_allocation_at(const cpool__graph_pages *gp, size_t k);
/* Gives back the shared pages [from, to) that no arena maps (not runs: a
 * run goes whole with its last mapping, cpool__run_drop). */
void cpool__shared_release_unmapped(cpool__graph_pages *gp, size_t from, size_t to);
/* One mapping of shared page k went: unmapped by all, it goes back at once
 * (no work can use it: the arenas that did are gone or not run). */
void cpool__shared_unmapped(cpool__graph_pages *gp, size_t k);

/* Numbers: no page of the arena maps number d any more; room in its notes
 * for numbers up to last (and in the shared set's records: number_room). */
void cpool__number_untake(cpool__arena *ar, size_t d);
bool cpool__number_taken_room(cpool__arena *ar, size_t last);
cpool_status cpool__number_room(cpool__arena *ar, size_t last);

/* The one way a page's memory is replaced: `to` goes behind the mapped
 * page i of sp (mapping `from` now), all or nothing. On failure `from` is
 * mapped there as before and the status returned; only where even that
 * remap fails (memory mapped there a moment ago) is the page unbacked:
 * its record then lets go, and the arena is lost. */
cpool_status cpool__page_swap(cpool__arena *ar, cpool__page_span *sp, size_t i, void *from, void *to);
/* Page i of sp lets go of what its record names (its mapping is the
 * caller's): a loan ends, own memory is released, a number is untaken. Its
 * record says UNMAPPED. */
void cpool__page_let_go(cpool__arena *ar, cpool__page_span *sp, size_t i);

/* Page i of span sp (of an arena) borrows no more: the packed page's loans
 * end with its last borrower (no work may use the page). */
void cpool__loan_end_borrow(cpool__graph_pages *gp, cpool__page_span *sp, size_t i);
/* Packed page j of span lsp lends nothing any more: the blocks it lent are
 * free again. */
void cpool__loan_end(cpool__graph_pages *gp, cpool__page_span *lsp, size_t j);

/* ---- page_table.c: arenas' states ---------------------------------------- */

/* An idle arena: nothing live in it, its own or in the packed region. */
bool cpool__arena_idle(const cpool__arena *ar);
/* The work marked at the arena's release (or when it became idle) is over,
 * queried, never waited for. */
bool cpool__arena_work_over(const cpool__arena *ar);

/* ---- page_runs.c: runs and numbers --------------------------------------- */

/* Takes arena ar's mapping of run down (every one where ar is NULL;
 * unless `mapped` is false: they are gone already); its memory goes back
 * with its last mapping. */
void cpool__run_drop(cpool__graph_pages *gp, cpool__page_run *run, cpool__arena *ar, bool mapped);
/* Frees a run's records (its memory is the caller's). */
void cpool__run_free(cpool__page_run *run);
/* While suspended: the shared numbers that the same arenas map at
 * consecutive addresses become runs, so that the resume maps each once
 * per arena (records only; a failure leaves pages alone, which is no
 * error). */
void cpool__runs_regroup(cpool__graph_pages *gp);
/* Makes pages [at, at + n) of span sp one new run behind the numbers from
 * `first` (none of them exists yet) and maps it; all or nothing. */
cpool_status cpool__run_map_new(cpool__arena *ar, cpool__page_span *sp, size_t at, size_t n, size_t first);
/* Replaces run's memory with pieces: each page with cut[j] set alone, each
 * stretch between one run; mapped where it was (at each of its mappings),
 * nothing copied (no work may use it). On failure nothing changed, unless
 * the run could not even be mapped back: then it is gone and its pages
 * unbacked. */
cpool_status cpool__run_split(cpool__graph_pages *gp, cpool__page_run *run, const uint8_t *cut);
/* Makes run's pages [from, from + count) pages alone if no work can use
 * it now (each arena mapping it is `asking`, a capture's, idle with its
 * work over, or its graph's launches held back); whether it did. Never
 * waits; the last error stays as it was. */
bool cpool__run_split_quiet(cpool__graph_pages *gp, cpool__page_run *run, const cpool__arena *asking, size_t from,
                            size_t count);
/* The numbers of runs that no arena's page maps any more (only spare
 * addresses reach them: their larger graphs are gone) go back, where no
 * work can use those runs now. */
void cpool__runs_shed_spare(cpool__graph_pages *gp);
/* The run one of whose mappings begins at page i of span sp, or NULL. */
cpool__page_run *cpool__run_starting_at(const cpool__graph_pages *gp, const cpool__page_span *sp, size_t i);
/* The lowest number the arena may map a page of its own to: one no page
 * of it maps, and not a page of another arena's run. Such a run is split
 * if it can be (as many of its pages alone as the arena wants, `want`),
 * else blocked for this arena. False with *st on failure. */
bool cpool__number_next_splitting(cpool__arena *ar, size_t want, size_t *out, cpool_status *st);

/* ---- arena_map.c: the allocators' segment sources ------------------------ */

/* Sets up ar->alloc over address ranges of ar's own (or plain segments). */
void cpool__arena_map_init(cpool__arena *ar);
/* Sets up the packed region's allocator over pages of its own. */
void cpool__packed_map_init(cpool__packed_region *pr);

/* ---- page_seal.c: a capture's end, settling, tails ----------------------- */

/* The arena's borrowed pages go back: each maps a shared page instead. No
 * work may use them. On failure the pages given back so far stay so. */
cpool_status cpool__seal_return_borrowed(cpool__graph_pages *gp, cpool__arena *ar);
/* Graphs captured while a run they needed was in use settle onto the
 * shared pages, if their launches can be held back with the device idle (a
 * capture's end and a trim try). Nothing on a thread that runs stream work. */
void cpool__seal_settle_graphs(cpool__graph_pages *gp);

#endif /* CPOOL_PAGES_INTERNAL_H */
