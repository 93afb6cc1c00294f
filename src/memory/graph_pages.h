/*
 * Graph memory shared by pages (README: arenas, the shared set, runs, the
 * packed region, loans): each capture allocates in an arena of its own,
 * whose pages map the pool's shared set, which its other graphs map too
 * (they never run at the same time). Everything here runs under the pool's
 * lock; the page source calls the platform (backend.h) for the pool.
 *
 * Pages and their states (pages_internal.h, cpool__page). Each page of an
 * arena's address ranges is in one state:
 *
 *   UNMAPPED   nothing behind the address
 *   SHARED     the pool's shared page of its number: alone, or one page
 *              of a run (many numbers in one allocation, mapped whole)
 *   OWN        memory of the arena's own (an output's page)
 *   BORROWED   a packed page's memory, lent to the arena's tail
 *
 *   from      to        when
 *   UNMAPPED  SHARED    the allocator maps: a shared page, or a new run
 *   SHARED    UNMAPPED  the allocator unmaps (a run goes whole)
 *   SHARED    OWN       seal: a live block is on it (the shared page handed
 *                       over if no other arena maps it, else a new page)
 *   OWN       SHARED    seal: no live block on it any more (records only)
 *   SHARED    BORROWED  seal: the arena's partly written last page (tails)
 *   BORROWED  SHARED    a capture takes the arena again (its blocks may
 *                       reach higher now)
 *   any       UNMAPPED  the allocator unmaps; a swap or a split that cannot
 *                       map back (the arena is lost)
 *
 * Past an arena's pages a resume's run may reach (spare addresses, in no
 * page's record: UNMAPPED, or past the span's records); a capture that
 * takes the arena makes such runs pages alone first.
 *
 * A page of the packed region is UNMAPPED or OWN; an OWN packed page may
 * lend the bytes from its start to the tails of arenas (its loan: how many
 * pages borrow it, and how many bytes). An arena notes each shared number
 * TAKEN (one of its pages maps it), BLOCKED (a page of another arena's run
 * that could not be split when it wanted it) or free.
 *
 *   shared set   [0][1][2][3][4][5][6]   a page per number; 4-6 are one
 *                             '-run--'    allocation, arena 2's run
 *   arena 1      S0 S1 S2 O               Sk: maps shared page k; O: own
 *   arena 2      S0 S1 S3 S4 S5 S6 B      B: borrows a packed page
 *   packed       O  O                     outputs, from the top down
 *
 * Every replacement of the memory behind a mapped page goes through one
 * swap (cpool__page_swap): all or nothing, the old mapping kept and the
 * status returned when the new one cannot be mapped.
 */
#ifndef CPOOL_GRAPH_PAGES_H
#define CPOOL_GRAPH_PAGES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "order.h"

/* Where physical pages and address space come from (the pool's backend).
 * create makes `pages` CPOOL__PAGEs of physical memory in one allocation,
 * which map places, whole, at any number of reserved addresses at once,
 * each seeing the same bytes (unmap takes one such mapping down). */
typedef struct cpool__page_source {
    void *ctx;
    /* Plain segments, where no address space can be reserved (reserve
     * NULL): then each arena takes its own and none is shared. */
    cpool_status (*grow)(void *ctx, size_t bytes, void **base);
    void (*shrink)(void *ctx, void *base, size_t bytes);
    cpool_status (*reserve)(void *ctx, size_t bytes, void **base);
    void (*unreserve)(void *ctx, void *base, size_t bytes);
    cpool_status (*create)(void *ctx, size_t pages, void **mem);
    void (*release)(void *ctx, void *mem);
    cpool_status (*map)(void *ctx, void *addr, void *mem);
    void (*unmap)(void *ctx, void *addr, void *mem);
    /* Holds back the launches of the pool's graphs if none is under way
     * and, unless `idle_known` (the graphs in question were never
     * launched: cpool__arena_note_launch), the device's work is over
     * (queried, never waited for): then no graph can use their pages until
     * release_launches. NULL: never. */
    bool (*hold_launches)(void *ctx, bool idle_known);
    void (*release_launches)(void *ctx);
} cpool__page_source;

typedef struct cpool__arena cpool__arena;
typedef struct cpool__packed_region cpool__packed_region;

typedef struct cpool__page_run cpool__page_run;

/* One page of the pool's shared set: the physical memory behind it, how
 * many arena pages map it, and the run it is part of (NULL: a page of its
 * own; page_runs.c). */
typedef struct cpool__shared_page {
    void *page;
    uint32_t maps;
    cpool__page_run *run;
} cpool__shared_page;

typedef struct cpool__graph_pages {
    cpool__page_source source;
    cpool__shared_page *shared;
    size_t shared_count, shared_cap;
    cpool__arena *arenas; /* every arena, newest first */
    cpool__packed_region *packed; /* the packed region (NULL until needed) */
    size_t arena_count;
    /* Physical bytes: the shared set, and pages arenas own. */
    uint64_t shared_bytes, own_bytes;
    /* The pool's bound (0: none) and what its other memory holds now. */
    uint64_t max_reserved;
    const uint64_t *other_reserved;
    uint64_t next_arena_id;
    uint64_t release_clock; /* counts the arenas' releases and their turns idle */
    bool suspended;         /* no physical page exists: cpool__graph_pages_suspend */
    bool holding;           /* the graphs' launches are held back, their work over (hold_launches) */
    bool unsettled;         /* some arena's capture found a run in use (cpool__graph_pages_settle) */
    cpool__order *order;    /* the device's streams, for marks of their work */
} cpool__graph_pages;

void cpool__graph_pages_init(cpool__graph_pages *gp, const cpool__page_source *source, uint64_t max_reserved,
                             const uint64_t *other_reserved, cpool__order *order);
/* Gives every page and range back (no work may use them). */
void cpool__graph_pages_destroy(cpool__graph_pages *gp);

/* An arena for a capture whose packed blocks are kept for `packed_key`
 * (cpool__key_graph, stream_order.h): an idle one whose marked work is over (or that holds
 * no memory), else a new one (nothing is mapped until it allocates). */
cpool_status cpool__graph_pages_open(cpool__graph_pages *gp, cpool__stream_key packed_key, cpool__arena **out);
cpool__stream_key cpool__arena_packed_key(const cpool__arena *ar);

/* The packed region (README): requests up to CPOOL__PACKED_MAX under
 * capture, and outputs (cpool_alloc_output). A capture's freed blocks here
 * carry its graph's key (stream_order.h): its scratch here is not shared. */
/* Up to 4 KiB: larger, the smallest blocks of a capture served apart from
 * its other memory cost bench/multistream_memory_bench up to a page more
 * (8 and 32 KiB measured 16 MiB against 14 at one stream). */
#define CPOOL__PACKED_MAX ((size_t)4 << 10)
/* The first spans of an arena's allocator (alloc.h). A block never
 * crosses into the next span: 64 MiB measured 128 MiB against 112 on
 * bench/capture_order_bench, whose largest graph needs about 100. */
#define CPOOL__ARENA_SPAN_SMALL ((size_t)16 << 20)
#define CPOOL__ARENA_SPAN_LARGE ((size_t)256 << 20)
/* An arena's span reserves this many times its records' address space (no
 * memory, no records), so that a resume's run reaches past a graph's last
 * page into those of larger graphs (page_runs.c, cpool__runs_regroup). Not
 * a pool's only arena: reach made a capture into a fresh pool cost 1.3x
 * (README, Large allocations). */
#define CPOOL__ARENA_SPAN_REACH 4
cpool_status cpool__graph_pages_packed(cpool__graph_pages *gp, cpool__allocator **out);
/* Notes a packed block the arena's capture was handed (a graph output if it
 * is still live when the capture ends). */
cpool_status cpool__arena_note_packed(cpool__arena *ar, void *ptr);
/* Notes a block of another graph's or capture's that the arena's capture
 * freed: it stays live until cpool__arena_take_deferred hands it back, at
 * the arena's release, to be freed then. */
cpool_status cpool__arena_defer_free(cpool__arena *ar, void *ptr, size_t requested);
/* The arena's deferred frees (an array for the caller to free; *out NULL
 * when there are none), forgotten by the arena. */
size_t cpool__arena_take_deferred(cpool__arena *ar, uintptr_t **out);
/* Whether some arena's capture freed ptr and defers the free. */
bool cpool__graph_pages_deferred(const cpool__graph_pages *gp, const void *ptr);
/* A packed block was freed: the arena that noted it forgets it (returned,
 * or NULL). */
cpool__arena *cpool__graph_pages_packed_freed(cpool__graph_pages *gp, const void *ptr);
/* The allocator that serves the arena's capture. */
cpool__allocator *cpool__arena_allocator(cpool__arena *ar);
uint64_t cpool__arena_id(const cpool__arena *ar);
/* The capture ended, making graph `graph_id` (0: none): the pages that
 * hold live blocks become the arena's own, and a last page that its blocks
 * fill only in part may borrow a packed page's memory. Then the pool's
 * other graphs whose captures found a run in use settle onto it if they
 * can (cpool__graph_pages_settle). On CPOOL_ERR_OUT_OF_MEMORY nothing
 * changed, unless pages were lost (the arena is lost then). */
cpool_status cpool__arena_seal(cpool__graph_pages *gp, cpool__arena *ar, uint64_t graph_id);
/* The graph that holds the arena (0: a capture's, or idle). */
uint64_t cpool__arena_graph(const cpool__arena *ar);
/* [offset, offset + bytes) of `block`, a live block of the arena's
 * capture, is scratch that the caller's allocator keeps in it (no one
 * reads it after the capture's replays): at the seal, the whole pages in
 * it stay shared instead of becoming the graph's own. */
cpool_status cpool__arena_note_scratch(cpool__arena *ar, void *block, size_t offset, size_t bytes);
/* The packed blocks of released arenas whose marked work is over are free
 * for any capture now (else at the next capture's open). */
void cpool__graph_pages_release_packed(cpool__graph_pages *gp);
/* Its graph is being launched (inside the pool's launch bracket, which
 * hold_launches holds back): until then its pages may change without a
 * look at the device's work. false: the arena lost a page (a remap failed
 * and so did mapping the old memory back): the launch must not go on. */
bool cpool__arena_note_launch(cpool__arena *ar);
/* Its capture or graph lets go of it (an idle one marks the device's
 * work: never waits). */
void cpool__arena_release(cpool__graph_pages *gp, cpool__arena *ar);
/* A block of the arena's, or a packed block its capture handed out, was
 * freed: an arena that became idle marks the device's work, as at a
 * release. */
void cpool__arena_freed(cpool__graph_pages *gp, cpool__arena *ar);
/* The arena whose addresses hold ptr, or NULL. */
cpool__arena *cpool__graph_pages_find(const cpool__graph_pages *gp, const void *ptr);
/* The live blocks of every arena that their callers have not freed (a
 * deferred free keeps its block live): their sizes, the sizes the callers
 * asked for, and their count. */
typedef struct cpool__graph_live {
    uint64_t bytes, requested;
    size_t blocks;
    uint64_t runs; /* runs of mapped pages */
} cpool__graph_live;
cpool__graph_live cpool__graph_pages_live(const cpool__graph_pages *gp);
/* Graphs captured while a run they needed was in use settle onto its
 * pages, if the pool's launches can be held back with the device idle
 * (never waits; nothing on a thread that runs stream work, where the
 * platform may not be called). A capture's end and a trim do it too. */
void cpool__graph_pages_settle(cpool__graph_pages *gp);
/* The device was quiesced since the free clock read `upto` and the release
 * clock `released_by`: blocks freed outside capture with sequence <= upto
 * become free for their arena's next capture, and the idle arenas released
 * (or made idle by a free) by then go, whatever their marks say, and with
 * `no_holder` (no graph or capture held the pool meanwhile) the packed
 * region's free pages; returns the physical bytes given back. */
uint64_t cpool__graph_pages_trim(cpool__graph_pages *gp, uint64_t upto, uint64_t released_by, bool no_holder);

/* Gives back the idle arenas whose marked work is over (queried, never
 * waited for), the newest too unless `keep_newest` (captures and settles
 * keep it for the next capture: a graph cache that evicts wants its memory
 * back now); returns the physical bytes given back. *waiting_out (may be
 * NULL) gets the physical bytes that the idle arenas left (their work still
 * runs) hold and no other arena maps: what a later call gives back once
 * that work is over. Nothing on a thread that runs stream work. */
uint64_t cpool__graph_pages_give_back_idle(cpool__graph_pages *gp, bool keep_newest, uint64_t *waiting_out);
/* The physical bytes of graph memory (shared set and own pages) the pool
 * would hold after one more capture whose graph keeps `output_bytes` of
 * outputs, allocated first, and frees `scratch_bytes` of scratch allocated
 * after them: the shared set grows to the pages its scratch alone covers
 * (the pages past its outputs' last), if it has fewer, and the outputs'
 * pages become the graph's own, after the capture's open gave back the
 * quiet idle arenas (the one it takes counted as new: its pages no block
 * is on go back at its seal). Outputs that the packed region serves are
 * the caller's to count (output_bytes 0 here); a last page lent to a tail
 * (page_seal.c, "tails") makes it a page high. */
uint64_t cpool__graph_pages_predict(const cpool__graph_pages *gp, uint64_t scratch_bytes, uint64_t output_bytes);

/* What an arena holds: the bytes it maps, the part on shared pages, and
 * its live blocks. */
typedef struct cpool__arena_stats {
    uint64_t mapped_bytes, shared_bytes, own_bytes, live_bytes, live_blocks;
    uint64_t runs; /* runs of mapped pages */
} cpool__arena_stats;
void cpool__arena_get_stats(const cpool__arena *ar, cpool__arena_stats *out);

/* An arena's mapped pages as a snapshot sees them: for each, its address
 * and the id of the physical page behind it (shared pages 1..n by index,
 * own pages numbered after every shared one, unique per pool), and whether
 * that is its own page or a page of the packed region that it borrows
 * (page_seal.c, "tails"). */
typedef struct cpool__page_walker {
    void *ctx;
    void (*page)(void *ctx, uintptr_t addr, uint64_t physical_id, bool own, bool packed);
} cpool__page_walker;
void cpool__arena_walk_pages(const cpool__arena *ar, const cpool__page_walker *w);
bool cpool__arena_in_use(const cpool__arena *ar);
/* Every arena, idle ones included (their pages count in the shared set),
 * in turn. */
const cpool__arena *cpool__graph_pages_each(const cpool__graph_pages *gp, const cpool__arena *after);
/* An arena's mapped runs and their blocks (cpool__allocator_walk); the
 * packed region's (nothing if there is none). */
void cpool__arena_walk(const cpool__arena *ar, const cpool__walker *w);
void cpool__graph_pages_walk_packed(const cpool__graph_pages *gp, const cpool__walker *w);
/* The arena whose capture handed out the live packed block at ptr, or NULL. */
const cpool__arena *cpool__graph_pages_packed_owner(const cpool__graph_pages *gp, uintptr_t ptr);

/* Suspend: every mapped page of every arena is unmapped and every
 * physical page given back, while the records of which page maps which
 * stay; nothing can be mapped until the resume (allocations that would map
 * fail with CPOOL_ERR_SUSPENDED, captures take no idle arena), and
 * releases and trims meanwhile change records only. No work may use the
 * pages. */
void cpool__graph_pages_suspend(cpool__graph_pages *gp);
/* Makes new memory for every page the records name and maps it where the
 * old was (shared pages again shared). On failure nothing changed and the
 * pages stay suspended. */
cpool_status cpool__graph_pages_resume(cpool__graph_pages *gp);
/* Whether addr lies in the address ranges of an arena or the packed region. */
bool cpool__graph_pages_holds(const cpool__graph_pages *gp, uintptr_t addr);
/* Every arena's mapped runs and blocks (cpool__allocator_walk), the packed
 * region's first. */
void cpool__graph_pages_walk_live(const cpool__graph_pages *gp, const cpool__walker *w);

/* Checks every invariant; aborts with a message on the first broken one.
 * Without `full`, the arenas' allocators are taken on trust: a check after
 * every operation would otherwise cost as much as every arena's blocks. */
void cpool__graph_pages_check(const cpool__graph_pages *gp, bool full);

#endif /* CPOOL_GRAPH_PAGES_H */
