/*
 * The caching allocator: pure bookkeeping over address ranges. It carves
 * blocks from large segments that a segment_source provides and never calls
 * a platform itself; locking, events and capture state belong to the pool
 * (pool.c), which tells it, per call, whom the call serves (a
 * cpool__stream_key, stream_order.h) and whether it is for a graph.
 *
 * Segments are growable where the source can reserve address space: a
 * reserved range of which only some pages are mapped, grown by mapping
 * pages next to free memory (a free block and new pages together serve a
 * request that neither could alone), and whose free pages go back from
 * anywhere inside it. Otherwise segments are plain: backed whole, given
 * back whole.
 */
#ifndef CPOOL_ALLOC_H
#define CPOOL_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>  /* CPOOL__INVARIANT */
#include <stdlib.h> /* CPOOL__INVARIANT */

#include "capturepool.h" /* cpool_status */
#include "stream_order.h"

/* Every request the allocator sees is 1 to CPOOL__MAX_REQUEST bytes: the
 * callers check that once, at their entry. */

/* Requests are rounded up to this; blocks are aligned to it. */
#define CPOOL__BLOCK_ALIGN ((size_t)512)
/* No request above this can be met by any device. */
#define CPOOL__MAX_REQUEST ((size_t)1 << 47)
/* The size of the block that serves a request of `bytes`. */
static inline size_t cpool__block_size(size_t bytes) {
    return (bytes + CPOOL__BLOCK_ALIGN - 1) / CPOOL__BLOCK_ALIGN * CPOOL__BLOCK_ALIGN;
}
/* Segments are multiples of this. */
#define CPOOL__SEGMENT_GRANULE ((size_t)2 << 20)
/* Requests up to this are small: they share 2 MiB segments of their own, so
 * that small blocks never split the large free ranges big requests need. */
#define CPOOL__SMALL_MAX ((size_t)1 << 20)

/* Pages of growable segments: the unit of mapping. */
#define CPOOL__PAGE CPOOL__SEGMENT_GRANULE

typedef struct cpool__segment_source {
    void *ctx;
    /* A plain segment, backed whole. */
    cpool_status (*grow)(void *ctx, size_t bytes, void **base);
    void (*shrink)(void *ctx, void *base, size_t bytes);
    /* Growable segments (reserve NULL: none). reserve takes address space
     * only, CPOOL__PAGE-aligned: CPOOL_ERR_UNSUPPORTED where the platform
     * has no such thing (the allocator then takes plain segments from then
     * on). map backs whole pages of a reserved range with memory, all or
     * nothing; unmap gives them back (no work may use them). */
    cpool_status (*reserve)(void *ctx, size_t bytes, void **base);
    void (*unreserve)(void *ctx, void *base, size_t bytes);
    cpool_status (*map)(void *ctx, void *addr, size_t bytes);
    void (*unmap)(void *ctx, void *addr, size_t bytes);
    /* Where each map is one physical allocation (a unit, backend.h), given
     * back only whole (NULL: any page goes alone): inside shrinks a range
     * to the units wholly in it. */
    void (*inside)(void *ctx, uintptr_t *lo, uintptr_t *hi);
} cpool__segment_source;

typedef struct cpool__block cpool__block;
typedef struct cpool__segment cpool__segment;

#define CPOOL__BINS 320

/* What a call is for: work on a stream, or a graph. An allocation for a
 * graph is served from, and a block freed for one (under capture, where
 * the graph uses it on every replay) joins, the graph-reserved set; work on
 * streams uses the general set. */
typedef enum cpool__use { CPOOL__USE_STREAM, CPOOL__USE_GRAPH } cpool__use;

/* By set (general, graph-reserved) and size class. */
#define CPOOL__HEAPS 4

typedef struct cpool__heap {
    cpool__block *bins[CPOOL__BINS];
    uint64_t nonempty[CPOOL__BINS / 64];
} cpool__heap;

typedef struct cpool__allocator {
    cpool__segment_source source;
    bool growable; /* segments grow in place (the source reserves, and the platform allows it) */
    /* Unmapped ranges of growable segments, by class (small 0, large 1). */
    cpool__block *holes[2];
    /* By set and size class: [set * 2 + large]. */
    cpool__heap heaps[CPOOL__HEAPS];
    cpool__segment *segments;
    /* Live blocks by address: open addressing, linear probing. */
    cpool__block **map;
    size_t map_cap, map_count;
    cpool__block *spare_blocks; /* recycled block records */
    uint64_t next_serial; /* numbers every allocation */
    size_t restricted_blocks; /* free blocks reusable by one stream only */
    uint64_t max_reserved;    /* 0: unbounded */
    uint64_t remap_budget; /* bytes give_back_pages may move now (alloc.c) */
    /* The first span of each class (small 0, large 1): CPOOL__SPAN_*_FIRST
     * unless the layout says less (cpool__allocator_init_layout: a graph's
     * arena). */
    size_t span_first[2];
    /* Each branch of a multi-stream capture grows spans of its own (a
     * graph's arena; cpool__allocator_share_spans ends it). */
    bool spans_by_branch;
    /* Blocks up to this size are handed out from the top of free memory,
     * larger ones from the bottom (0: all): in the packed region the
     * bottoms of pages that hold small blocks only stay free to lend
     * (graph_pages.h), while larger blocks pack as they come. */
    size_t top_down_max;
    /* Memory that max_reserved counts besides this allocator's own (the
     * pool's graph pages); NULL: none. */
    const uint64_t *also_reserved[2];
    /* Counters reported by cpool_pool_get_stats (the callers' own counters
     * are the front cache's, front.h). reserved counts mapped bytes only,
     * segment_count the mapped runs (a snapshot's segments). */
    uint64_t reserved, reserved_peak, graph_reserved, live_block_bytes, segment_count;
    /* The live blocks' requested sizes, summed: the front's counters are
     * checked against it. */
    uint64_t allocated;
} cpool__allocator;

void cpool__allocator_init(cpool__allocator *a, const cpool__segment_source *source, uint64_t max_reserved);
/* Counts the memory at *first and *second (which must outlive the
 * allocator; either may be NULL) against max_reserved besides its own: the
 * pool's graph pages. */
void cpool__allocator_count_also(cpool__allocator *a, const uint64_t *first, const uint64_t *second);
/* Gives every segment back (the caller waited for the device first). */
void cpool__allocator_destroy(cpool__allocator *a);

/* Serves `bytes` from cached blocks only: for a graph (graph-reserved blocks
 * free for any graph, or kept for `key` when that is a branch or a graph,
 * then unrestricted general ones; `key` is otherwise the capturing
 * stream's), or for work on the stream `key` (blocks free for any stream,
 * freed on this one, or covered by its `deps`, which may be NULL; KEY_ANY:
 * only blocks free for any stream). false on a miss. The block remembers
 * the stream of `key` as the stream it was last used on. */
bool cpool__allocator_alloc_cached(cpool__allocator *a, size_t bytes, cpool__stream_key key, const cpool__deps *deps,
                                   cpool__use use, void **out);
/* Takes memory from the source for the request and serves it: in growable
 * segments, new pages next to the free block (usable by `key`) that
 * leaves the fewest to map, after giving back, where the new pages would
 * take reserved memory past its peak, the pages of free blocks that no work
 * uses; otherwise a new segment. `key` as for cpool__allocator_alloc_cached
 * (a graph's branch keeps the rest). */
cpool_status cpool__allocator_alloc_grow(cpool__allocator *a, size_t bytes, cpool__stream_key key, cpool__use use,
                                        void **out);

/* Whether serving the request by growing (growable segments only) would
 * take reserved memory past its peak. */
bool cpool__allocator_growth_passes_peak(const cpool__allocator *a, size_t bytes, cpool__stream_key key,
                                         cpool__use use);

/* The bytes of new memory a request would take: 0 where a cached free
 * block serves it (cpool__allocator_alloc_cached without deps), else what
 * cpool__allocator_alloc_grow would map. Changes nothing in an allocator
 * whose spans are not by branch (the packed region: alloc.h's
 * spans_by_branch). */
uint64_t cpool__allocator_growth_for(const cpool__allocator *a, size_t bytes, cpool__stream_key key, cpool__use use);

/* Adds at least `bytes` of free general memory (pool reserve), for
 * requests larger than CPOOL__SMALL_MAX: a segment, or mapped pages of a
 * growable one. */
cpool_status cpool__allocator_reserve(cpool__allocator *a, size_t bytes);

/* Marks a live block as the pool's own (a parameter block): free refuses it. */
void cpool__allocator_pin(cpool__allocator *a, void *ptr);
/* Records `requested` as the size a live block is allocated for (the front
 * cache hands its blocks out again at other sizes and gives one back). */
void cpool__allocator_set_requested(cpool__allocator *a, void *ptr, size_t requested);

/* Frees a live block on stream `stream`. It is reusable at once by that
 * stream only until cpool__allocator_unfence says the work before the free
 * has finished, except a graph-reserved block freed for a graph (under
 * capture), which later captures may take at once (with `branch` a branch
 * or a graph: only that one, stream_order.h). For a graph a general block
 * joins the graph-reserved set, keeping its stream's key: graphs take it
 * once it is unfenced. *requested (if not NULL) gets the size the block was
 * allocated for. CPOOL_ERR_INVALID_ARGUMENT for a pointer that is not live
 * here (nothing changes). */
cpool_status cpool__allocator_free(cpool__allocator *a, void *ptr, cpool__stream_key stream, cpool__use use,
                                   cpool__stream_key branch, size_t *requested);

/* What the allocator knows of a live block. */
typedef struct cpool__block_info {
    size_t size, requested;
    uint64_t serial; /* the allocation that handed it out */
    bool graph, pinned;
} cpool__block_info;
/* The stream that the live block at ptr was handed out for, as snapshots
 * name it (a request under a key that names no stream: a capture's packed
 * blocks). */
void cpool__allocator_note_user(cpool__allocator *a, const void *ptr, uint64_t stream_id);
/* Fills *info for the live block at ptr; false if there is none. */
bool cpool__allocator_live_block(const cpool__allocator *a, const void *ptr, cpool__block_info *info);

/* One block as a snapshot sees it. */
typedef struct cpool__block_view {
    uintptr_t addr;
    size_t size, requested;
    uint64_t stream; /* the stream it was last handed out or freed on (0: not known) */
    bool live, graph, pinned;
    bool output; /* live in a graph's memory once its capture ended */
    uint64_t serial; /* the allocation that handed it out last */
} cpool__block_view;
typedef struct cpool__walker {
    void *ctx;
    /* A mapped run: a plain segment, or mapped pages of a growable one
     * (either callback may be NULL). */
    void (*segment)(void *ctx, uintptr_t base, size_t size);
    void (*block)(void *ctx, const cpool__block_view *b); /* the run's blocks, in address order */
} cpool__walker;
/* Whether addr lies in one of the allocator's segments (its reserved range,
 * where segments grow in place). */
bool cpool__allocator_holds(const cpool__allocator *a, uintptr_t addr);
/* Every mapped run, then its blocks. */
void cpool__allocator_walk(const cpool__allocator *a, const cpool__walker *w);

/* cpool__allocator_free of a live block on a stream, outside capture, whose
 * free took place earlier, at free clock `seq` (a block the front cache
 * parked then). */
void cpool__allocator_free_as_of(cpool__allocator *a, void *ptr, cpool__stream_key stream, uint64_t seq);

/* Free blocks kept for branch (or graph) `from` and freed with sequence
 * <= upto are kept for `to` from now on (another branch, or KEY_ANY: free
 * for any graph). */
void cpool__allocator_retag_branch(cpool__allocator *a, cpool__stream_key from, uint64_t upto, cpool__stream_key to);
/* Adds to the n streams (ids) listed, up to `cap`, those that have
 * restricted blocks, and raises each one's sequence number to the newest
 * free one among its blocks; returns the new count. Branches are not
 * listed: no fence clears them. */
size_t cpool__allocator_restricted_streams(const cpool__allocator *a, uint64_t *stream_ids, uint64_t *seqs, size_t n,
                                           size_t cap);
/* Blocks freed on stream `stream_id` with sequence <= upto become free for
 * any stream. */
void cpool__allocator_unfence(cpool__allocator *a, uint64_t stream_id, uint64_t upto);
/* Every restricted block freed with sequence <= upto becomes free for any
 * stream (the device was quiesced after those frees). */
void cpool__allocator_unfence_all(cpool__allocator *a, uint64_t upto);
/* Free graph-reserved blocks return to general use (no graph can run);
 * stream tags stay. */
void cpool__allocator_reclaim_graph(cpool__allocator *a);
/* Gives back the memory of free, unrestricted blocks of general use: plain
 * segments that are one such block, and every whole page of one inside
 * growable segments (their address range stays reserved); returns the
 * bytes given back. Where the source maps units, only whole units go: a
 * unit that a free block covers only in part stays until all of it is
 * free (alloc.h, cpool__segment_source). */
uint64_t cpool__allocator_trim(cpool__allocator *a);

/* ---- What graph pages ask of an allocator ----------------------------------
 * An arena and the packed region (graph_pages.h) are allocators over
 * address space of their own; these are the calls that exist for them
 * alone, and the one way their layout is set. */
/* How an allocator of graph pages lays its blocks out (graph_pages.h):
 * the first span of each class (0: CPOOL__SPAN_*_FIRST), whether each
 * branch of a capture grows spans of its own, and up to which size blocks
 * come from the top of free memory. No bound: the graph pages keep it. */
typedef struct cpool__allocator_layout {
    size_t span_first[2];
    bool spans_by_branch;
    size_t top_down_max;
} cpool__allocator_layout;
void cpool__allocator_init_layout(cpool__allocator *a, const cpool__segment_source *source,
                                  const cpool__allocator_layout *layout);
/* The spans the last capture's branches owned are anyone's now (a new
 * capture in a graph's arena); a branch of the new one on the same stream
 * takes its own back. */
void cpool__allocator_share_spans(cpool__allocator *a);
/* cpool__allocator_reclaim_graph for the free graph blocks kept for no graph or stream (stream
 * tag 0): no graph is to use them again, and a trim may give their pages
 * back. */
void cpool__allocator_reclaim_unkept(cpool__allocator *a);
/* Takes the free bytes [addr, addr + bytes) (one free block unrestricted
 * by any stream or branch holds them) out of use, lent to the owner: a
 * live, pinned block that no free and no allocation touches, which walks
 * show as free graph memory; false (nothing changed) if they are not all
 * free or no record can be had. */
bool cpool__allocator_lend(cpool__allocator *a, uintptr_t addr, size_t bytes);
/* The bytes lent at addr are free memory again, free for anyone: no work
 * may use them. */
void cpool__allocator_end_loan(cpool__allocator *a, uintptr_t addr);
/* For each growable segment that ever handed a block out: the page that
 * holds the end of the highest such block, and how many of its bytes lie
 * below that end (a capture in an arena writes no byte of the page above
 * it). */
void cpool__allocator_tails(const cpool__allocator *a, void (*tail)(void *ctx, uintptr_t page, size_t extent),
                            void *ctx);
/* ---- end of what graph pages ask ------------------------------------------ */

/* Checks every invariant, walking every block: the full grade of the debug
 * checks (debug.h). Aborts with a message on the first broken one. */
void cpool__allocator_check(const cpool__allocator *a);
/* Checks the counters against each other, in O(1): the cheap grade. */
void cpool__allocator_check_counters(const cpool__allocator *a);

/* Aborts with "capturepool: <part> invariant broken: <message>" when cond is
 * false: the internal checks of the allocator and of the front cache. */
#define CPOOL__INVARIANT(part, cond, ...)                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "capturepool: " part " invariant broken: " __VA_ARGS__);              \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* The failure of a free of ptr that is not a live block of the pool (never
 * handed out, or freed already). */
cpool_status cpool__fail_not_live(const void *ptr);

#endif /* CPOOL_ALLOC_H */
