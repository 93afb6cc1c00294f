/*
 * The caching allocator's data structures (alloc.h has its contract):
 * - A segment is one range from the segment source. Its blocks tile it
 *   exactly, in address order, as a doubly linked list (prev/next).
 * - A block is live (handed out, found by address in `map`) or free (in one
 *   bin of one heap). Each block belongs to the general or the
 *   graph-reserved set (`graph`); a segment may hold blocks of both.
 * - Segments are small (2 MiB, for requests up to CPOOL__SMALL_MAX) or
 *   large (for bigger requests); a block's class is its segment's.
 * - Heaps: one per set and class, heaps[set * 2 + large]. A heap has
 *   CPOOL__BINS size classes, log-linear (exact up to 8 KiB, then 8 classes
 *   per power of two), each a list of free blocks, with a bitmap of the
 *   non-empty ones so a search skips empty classes in a few instructions.
 * - A growable segment's unmapped pages are `hole` blocks (page-aligned, in
 *   the class's hole list, never two side by side). Free blocks in heaps
 *   are always mapped, so the cached path never maps.
 * - Stream order (stream_order.h): a general block freed on stream S keeps
 *   S's key in `stream` and a sequence number; only S may reuse it until
 *   the pool has seen an event recorded after the free complete and calls
 *   unfence, or work that waited for such an event (cpool__deps). A block
 *   with `stream` == 0 is free for anyone. A graph-reserved block freed
 *   under capture is 0 (graphs sharing a pool never run at once), or its
 *   branch's tag (cpool__key_branch). A general block freed under capture
 *   joins the graph-reserved set with S's tag: work on S from before the
 *   capture may still use it, so no graph takes it before a fence; with
 *   branches it then goes to its branch (`pending_branch`).
 * - Adjacent free blocks of the same set merge when their stream tags allow
 *   it (see mergeable). Freed blocks are merged at once. Exact-size reuse
 *   without merging is the pool's front cache (front.c), bounded to a few
 *   small blocks that it hands back here before a new segment is taken:
 *   keeping larger blocks apart was measured to raise peak reserved memory
 *   on real-model traces (bench/trace_replay).
 *
 * Placement and growth are told where they happen: heap_take, carve_top,
 * align_to_page, grow_plain, grow_in_place, give_back_pages, and for graphs
 * grows_large and spans_for.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_internal.h"
#include "fault.h"
#include "status.h"

/* The first span of a class (span_size), and the most a later one takes. A
 * block never crosses from one span into the next: smaller first spans
 * measured more memory on the traces of bench/trace_replay (1 GiB and
 * less: up to 1.27x on one replay of vit_b16_infer; 2 GiB: 1.136x against
 * 1.077x of gpt2_train's peak after five more replays) and on
 * bench/capture_order_bench (64 MiB); from 16 GiB on every figure stays as
 * it was. Small pools take no large span. */
#define CPOOL__SPAN_LARGE_FIRST ((size_t)16 << 30)
#define CPOOL__SPAN_SMALL_FIRST ((size_t)16 << 20)
#define CPOOL__SPAN_LARGE ((size_t)32 << 30)
#define CPOOL__SPAN_SMALL ((size_t)4 << 30)
/* The budget of pages moved (give_back_pages), and its cap (hand_out). */
#define CPOOL__REMAP_PEAK_SHARE 2
#define CPOOL__REMAP_SHARE 1024
#define CPOOL__REMAP_MIN ((uint64_t)16 << 20)

/* ---- heaps (alloc_internal.h has the rest) ------------------------------- */

/* The next non-empty bin at or above `bin`, or CPOOL__BINS. */
static unsigned next_bin(const cpool__heap *h, unsigned bin) {
    while (bin < CPOOL__BINS) {
        uint64_t word = h->nonempty[bin / 64] & (~0ull << (bin % 64));
        if (word) return (bin / 64) * 64 + (unsigned)__builtin_ctzll(word);
        bin = (bin / 64 + 1) * 64;
    }
    return CPOOL__BINS;
}

/* ---- stream keys ------------------------------------------------------- */

/* Free blocks with a branch tag are never covered: branch tags name no
 * stream that waits. */
static bool usable_by(const cpool__block *b, uint64_t stream, const cpool__deps *deps) {
    return b->stream == 0 || b->stream == stream ||
           (deps && !(b->stream & CPOOL__KEY_BRANCH_BIT) && cpool__deps_cover(deps, b->stream, b->free_seq));
}

/* Which spans a request may take blocks from (spans_by_branch): any
 * (owner 0), its branch's, and with `adopt` those no branch owns. */
typedef struct span_pick {
    uint64_t owner;
    bool adopt;
} span_pick;

static bool in_spans(const cpool__block *b, span_pick spans) {
    return !spans.owner || b->seg->branch == spans.owner || (spans.adopt && !b->seg->branch);
}

/* Smallest fitting block usable by `stream` (0: only unrestricted ones) in
 * the spans picked, in the lowest class that has one. */
static cpool__block *heap_find(const cpool__heap *h, size_t size, uint64_t stream, const cpool__deps *deps,
                               span_pick spans) {
    for (unsigned bin = next_bin(h, bin_of(size)); bin < CPOOL__BINS; bin = next_bin(h, bin + 1)) {
        cpool__block *best = NULL;
        for (cpool__block *b = h->bins[bin]; b; b = b->free_next)
            if (b->size >= size && usable_by(b, stream, deps) && in_spans(b, spans) &&
                (!best || b->size < best->size)) {
                best = b;
                if (b->size == size) break;
            }
        if (best) return best;
    }
    return NULL;
}

/* ---- block records ------------------------------------------------------- */

cpool__block *cpool__alloc_block_new(cpool__allocator *a) {
    cpool__block *b = a->spare_blocks;
    if (b)
        a->spare_blocks = b->next;
    else
        b = cpool__malloc(sizeof *b);
    if (b) memset(b, 0, sizeof *b);
    return b;
}

/* ---- the live-block map -------------------------------------------------- */

static bool map_grow(cpool__allocator *a) {
    size_t cap = a->map_cap ? a->map_cap * 2 : 256;
    cpool__block **map = cpool__calloc(cap, sizeof *map);
    if (!map) return false;
    for (size_t i = 0; i < a->map_cap; i++) {
        cpool__block *b = a->map[i];
        if (!b) continue;
        size_t j = map_slot(b->addr, cap);
        while (map[j]) j = (j + 1) & (cap - 1);
        map[j] = b;
    }
    free(a->map);
    a->map = map;
    a->map_cap = cap;
    return true;
}

/* Call only with room: map_count + 1 <= map_cap / 2. */
static void map_insert(cpool__allocator *a, cpool__block *b) {
    size_t j = map_slot(b->addr, a->map_cap);
    while (a->map[j]) j = (j + 1) & (a->map_cap - 1);
    a->map[j] = b;
    a->map_count++;
}

/* Removes slot j, shifting later entries of its probe run back. */
static void map_erase(cpool__allocator *a, size_t j) {
    size_t mask = a->map_cap - 1;
    a->map[j] = NULL;
    a->map_count--;
    for (size_t k = (j + 1) & mask; a->map[k]; k = (k + 1) & mask) {
        size_t home = map_slot(a->map[k]->addr, a->map_cap);
        /* Move k into the hole if its home is not in (j, k]. */
        bool between = j <= k ? (home > j && home <= k) : (home > j || home <= k);
        if (!between) {
            a->map[j] = a->map[k];
            a->map[k] = NULL;
            j = k;
        }
    }
}

/* ---- segments and blocks ------------------------------------------------- */

void cpool__allocator_init(cpool__allocator *a, const cpool__segment_source *source, uint64_t max_reserved) {
    memset(a, 0, sizeof *a);
    a->source = *source;
    a->growable = source->reserve != NULL;
    a->max_reserved = max_reserved;
    a->span_first[0] = CPOOL__SPAN_SMALL_FIRST;
    a->span_first[1] = CPOOL__SPAN_LARGE_FIRST;
}

void cpool__allocator_count_also(cpool__allocator *a, const uint64_t *first, const uint64_t *second) {
    a->also_reserved[0] = first;
    a->also_reserved[1] = second;
}

void cpool__allocator_init_layout(cpool__allocator *a, const cpool__segment_source *source,
                                  const cpool__allocator_layout *layout) {
    cpool__allocator_init(a, source, 0);
    for (int c = 0; c < 2; c++)
        if (layout->span_first[c]) a->span_first[c] = layout->span_first[c];
    a->spans_by_branch = layout->spans_by_branch;
    a->top_down_max = layout->top_down_max;
}

/* Merges free block `right` (in no heap) into its left neighbour `left`. */
static void absorb(cpool__allocator *a, cpool__block *left, cpool__block *right) {
    if (left->stream && right->stream) a->restricted_blocks--;
    if (!left->stream) left->stream = right->stream;
    if (!left->pending_branch) left->pending_branch = right->pending_branch;
    left->size += right->size;
    left->free_seq = left->free_seq > right->free_seq ? left->free_seq : right->free_seq;
    left->next = right->next;
    if (right->next) right->next->prev = left;
    block_recycle(a, right);
}

cpool__block *cpool__alloc_release(cpool__allocator *a, cpool__block *b) {
    cpool__block *prev = b->prev;
    if (mergeable(prev, b)) {
        heap_remove(heap_for(a, prev), prev);
        absorb(a, prev, b);
        b = prev;
    }
    cpool__block *next = b->next;
    if (mergeable(b, next)) {
        heap_remove(heap_for(a, next), next);
        absorb(a, b, next);
    }
    heap_insert(heap_for(a, b), b);
    return b;
}

/* The branch tag in `tag`, or 0. */
static uint64_t graph_branch(uint64_t tag) { return tag & CPOOL__KEY_BRANCH_BIT ? tag : 0; }

/* A branch of a multi-stream capture (`branch`, else 0) keeps a
 * graph-reserved rest for itself, as if each stream had segments of its
 * own: branches that take turns in one segment would leave it in pieces
 * that no branch can merge until the capture ends. */
bool cpool__alloc_hand_out(cpool__allocator *a, cpool__block *b, size_t bytes, size_t rounded, cpool__use use,
                     uint64_t stream) {
    uint64_t branch = use != CPOOL__USE_STREAM ? graph_branch(stream) : 0;
    bool graph = use != CPOOL__USE_STREAM;
    if (a->map_count + 1 > a->map_cap / 2 && !map_grow(a)) return false;
    if (b->size - rounded >= CPOOL__BLOCK_ALIGN) {
        cpool__block *rest = cpool__alloc_block_new(a);
        if (!rest) return false;
        rest->addr = b->addr + rounded;
        rest->size = b->size - rounded;
        rest->seg = b->seg;
        rest->graph = b->graph;
        rest->stream = b->stream;
        if (branch && !(branch & CPOOL__KEY_GRAPH_BIT) && rest->graph && !rest->stream) rest->stream = branch;
        rest->used_by = b->used_by;
        rest->free_seq = b->free_seq;
        rest->pending_branch = b->pending_branch;
        if (rest->stream) a->restricted_blocks++;
        rest->prev = b;
        rest->next = b->next;
        if (b->next) b->next->prev = rest;
        b->next = rest;
        b->size = rounded;
        heap_insert(heap_for(a, rest), rest);
    }
    if (b->stream) a->restricted_blocks--;
    b->stream = 0;
    b->pending_branch = 0;
    if (graph && !b->graph) a->graph_reserved += b->size;
    b->graph = b->graph || graph;
    b->serial = ++a->next_serial;
    b->used_by = stream & ~CPOOL__KEY_BRANCH_BIT;
    b->live = true;
    b->requested = bytes;
    if (b->addr + b->size > b->seg->high) b->seg->high = b->addr + b->size;
    map_insert(a, b);
    a->allocated += bytes;
    a->live_block_bytes += b->size;
    /* Earns a trickle of the right to move pages (see give_back_pages),
     * capped so that a long quiet stretch does not save up a burst. */
    uint64_t cap = a->reserved_peak / 8 + CPOOL__REMAP_MIN;
    if (a->remap_budget < cap) a->remap_budget += rounded / CPOOL__REMAP_SHARE;
    return true;
}

static span_pick spans_for(cpool__allocator *a, cpool__use use, uint64_t stream);

/* The heap block that serves a request, searched in this order: for a graph,
 * graph-reserved blocks, then
 * unrestricted general ones (no pending work, so they may become
 * graph-reserved); otherwise general blocks usable by `stream`. Within a
 * set, a request's own size class first, then, for a small request, large
 * blocks before a new segment would be taken. */
static cpool__block *heap_take(cpool__allocator *a, size_t rounded, uint64_t stream, const cpool__deps *deps,
                               cpool__use use, cpool__heap **from) {
    bool large = rounded > CPOOL__SMALL_MAX;
    unsigned own = use == CPOOL__USE_STREAM ? 0u : 1u;
    unsigned sets[2] = {own, 0u};
    /* A graph takes graph-reserved blocks free for any graph or for its
     * branch, and only unrestricted general ones. */
    uint64_t graph_tag = graph_branch(stream);
    span_pick spans = spans_for(a, use, stream);
    for (unsigned k = 0; k < (own ? 2u : 1u); k++) {
        uint64_t tag = use == CPOOL__USE_STREAM ? stream : sets[k] ? graph_tag : 0;
        for (int cls = large; cls <= 1; cls++) {
            *from = &a->heaps[heap_index(sets[k], cls == 1)];
            cpool__block *b = heap_find(*from, rounded, tag, use == CPOOL__USE_STREAM ? deps : NULL, spans);
            if (b && spans.owner) b->seg->branch = spans.owner; /* adopted, if no branch owned it */
            if (b) return b;
        }
    }
    return NULL;
}

static void link_before(cpool__block *at, cpool__block *b);

void cpool__alloc_split_front(cpool__allocator *a, cpool__block *b, uintptr_t at, cpool__block *head) {
    *head = *b;
    head->size = at - b->addr;
    link_before(b, head);
    if (head->stream) a->restricted_blocks++;
    heap_insert(heap_for(a, head), head);
    b->addr = at;
    b->size -= head->size;
}

/* For a block of `rounded` bytes up to top_down_max, free block b (out of
 * its heap) from where such a block ending at `end` (inside b) starts: the
 * piece before it split off, free, back in its heap. Without a record to
 * split with, b is handed out from its start, which is no failure. Taken
 * from the top for blocks of any size, growing outputs left pieces that
 * cost engine_bench 1360 two pages more (1.025x against 1.004x). */
static cpool__block *carve_top(cpool__allocator *a, cpool__block *b, uintptr_t end, size_t rounded) {
    if (rounded > a->top_down_max || end - rounded <= b->addr) return b;
    cpool__block *head = cpool__alloc_block_new(a);
    if (head) cpool__alloc_split_front(a, b, end - rounded, head);
    return b;
}

/* Free block b (out of its heap) from where a stream's block of `rounded`
 * bytes, a page or more, is best handed out in a growable segment: from
 * its first page boundary when the piece before it is at most half a page
 * (split off, free, back in its heap). A block that starts on a page
 * leaves whole pages when it is freed, and only whole pages can go back:
 * on the real-model traces this took the decoding trace from 1.042x to
 * 1.016x of its peak live bytes. Graph memory is not given back while
 * graphs hold it, so graphs' blocks are placed as they come. */
static cpool__block *align_to_page(cpool__allocator *a, cpool__block *b, size_t rounded) {
    if (rounded < CPOOL__PAGE || !b->seg->growable) return b;
    uintptr_t at = round_up(b->addr, CPOOL__PAGE);
    if (at == b->addr || at - b->addr > CPOOL__PAGE / 2 || at + rounded > b->addr + b->size) return b;
    cpool__block *head = cpool__alloc_block_new(a);
    if (head) cpool__alloc_split_front(a, b, at, head);
    return b;
}

bool cpool__allocator_alloc_cached(cpool__allocator *a, size_t bytes, cpool__stream_key key, const cpool__deps *deps,
                                   cpool__use use, void **out) {
    uint64_t stream = key.word;
    size_t rounded = cpool__block_size(bytes);
    cpool__heap *from;
    cpool__block *b = heap_take(a, rounded, stream, deps, use, &from);
    if (!b) return false;
    heap_remove(from, b);
    if (use == CPOOL__USE_STREAM) b = align_to_page(a, b, rounded);
    b = carve_top(a, b, b->addr + b->size, rounded);
    if (!cpool__alloc_hand_out(a, b, bytes, rounded, use, stream)) {
        cpool__alloc_release(a, b); /* back in its heap, merged with a piece split off */
        return false;
    }
    *out = (void *)b->addr;
    return true;
}

static cpool_status segment_new(cpool__allocator *a, size_t seg_size, cpool__use use, bool large, cpool__block **out);
static cpool_status grow_in_place(cpool__allocator *a, size_t bytes, uint64_t stream, cpool__use use, void **out);
static cpool_status reserve_in_place(cpool__allocator *a, size_t bytes);

/* What max_reserved is held against: this allocator's memory and the rest
 * of the pool's. */
static uint64_t bound_reserved(const cpool__allocator *a) {
    uint64_t held = a->reserved;
    for (int i = 0; i < 2; i++)
        if (a->also_reserved[i]) held += *a->also_reserved[i];
    return held;
}

static cpool_status grow_plain(cpool__allocator *a, size_t bytes, uint64_t stream, cpool__use use, void **out) {
    size_t rounded = cpool__block_size(bytes);
    bool large = rounded > CPOOL__SMALL_MAX;
    /* As PyTorch's caching allocator: requests between 1 and 10 MiB share
     * 20 MiB segments (unless the pool's bound leaves no room for one); the
     * others get their own, rounded to 2 MiB. */
    size_t seg_size = round_up(rounded, CPOOL__SEGMENT_GRANULE);
    if (large && rounded < ((size_t)10 << 20) &&
        (!a->max_reserved || bound_reserved(a) + ((size_t)20 << 20) <= a->max_reserved))
        seg_size = (size_t)20 << 20;
    if (a->max_reserved && bound_reserved(a) + seg_size > a->max_reserved)
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY,
                           "a %zu-byte segment would take the pool past max_reserved_bytes (%llu reserved of %llu)",
                           seg_size, (unsigned long long)bound_reserved(a), (unsigned long long)a->max_reserved);
    cpool__block *b = NULL;
    cpool_status st = segment_new(a, seg_size, use, large, &b);
    if (st != CPOOL_OK) return st;
    if (!cpool__alloc_hand_out(a, b, bytes, rounded, use, stream)) {
        /* The segment stays, free and cached: nothing is lost. */
        heap_insert(heap_for(a, b), b);
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for allocator records");
    }
    *out = (void *)b->addr;
    return CPOOL_OK;
}

cpool_status cpool__allocator_alloc_grow(cpool__allocator *a, size_t bytes, cpool__stream_key key, cpool__use use,
                                        void **out) {
    if (a->growable) {
        cpool_status st = grow_in_place(a, bytes, key.word, use, out);
        if (st != CPOOL_ERR_UNSUPPORTED) return st;
    }
    return grow_plain(a, bytes, key.word, use, out);
}

cpool_status cpool__allocator_reserve(cpool__allocator *a, size_t bytes) {
    if (a->growable) {
        cpool_status st = reserve_in_place(a, bytes);
        if (st != CPOOL_ERR_UNSUPPORTED) return st;
    }
    cpool__block *b = NULL;
    cpool_status st = segment_new(a, round_up(bytes, CPOOL__SEGMENT_GRANULE), CPOOL__USE_STREAM, true, &b);
    if (st == CPOOL_OK) heap_insert(heap_for(a, b), b);
    return st;
}

/* The list of segments, newest first. */
static void segment_link(cpool__allocator *a, cpool__segment *seg) {
    seg->next = a->segments;
    if (a->segments) a->segments->prev = seg;
    a->segments = seg;
}

static void segment_unlink(cpool__allocator *a, cpool__segment *seg) {
    if (seg->prev)
        seg->prev->next = seg->next;
    else
        a->segments = seg->next;
    if (seg->next) seg->next->prev = seg->prev;
}

/* A new plain segment for the request, taken from the source as one free
 * block (in no heap yet). */
static cpool_status segment_new(cpool__allocator *a, size_t seg_size, cpool__use use, bool large, cpool__block **out) {
    bool graph = use != CPOOL__USE_STREAM;
    cpool__segment *seg = cpool__calloc(1, sizeof *seg);
    cpool__block *b = cpool__alloc_block_new(a);
    if (!seg || !b) {
        free(seg);
        free(b);
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for allocator records");
    }
    void *base;
    cpool_status st = a->source.grow(a->source.ctx, seg_size, &base);
    if (st != CPOOL_OK) {
        free(seg);
        free(b);
        return st;
    }
    seg->base = (uintptr_t)base;
    seg->size = seg_size;
    seg->large = large;
    seg->first = b;
    segment_link(a, seg);
    a->reserved += seg_size;
    if (a->reserved > a->reserved_peak) a->reserved_peak = a->reserved;
    a->segment_count++;
    b->addr = seg->base;
    b->size = seg_size;
    b->seg = seg;
    b->graph = graph;
    if (graph) a->graph_reserved += seg_size;
    *out = b;
    return CPOOL_OK;
}

/* ---- growable segments --------------------------------------------------- */

static void hole_link(cpool__allocator *a, cpool__block *h) {
    cpool__block **list = &a->holes[h->seg->large];
    h->free_prev = NULL;
    h->free_next = *list;
    if (*list) (*list)->free_prev = h;
    *list = h;
}

static void hole_unlink(cpool__allocator *a, cpool__block *h) {
    if (h->free_prev)
        h->free_prev->free_next = h->free_next;
    else
        a->holes[h->seg->large] = h->free_next;
    if (h->free_next) h->free_next->free_prev = h->free_prev;
    h->free_prev = h->free_next = NULL;
}

/* Puts new block b just before or just after `at` in at's segment. */
static void link_before(cpool__block *at, cpool__block *b) {
    b->seg = at->seg;
    b->next = at;
    b->prev = at->prev;
    if (at->prev)
        at->prev->next = b;
    else
        at->seg->first = b;
    at->prev = b;
}

static void link_after(cpool__block *at, cpool__block *b) {
    b->seg = at->seg;
    b->prev = at;
    b->next = at->next;
    if (at->next) at->next->prev = b;
    at->next = b;
}

/* Drops block b from its segment's list. */
static void unlink_block(cpool__allocator *a, cpool__block *b) {
    if (b->prev)
        b->prev->next = b->next;
    else
        b->seg->first = b->next;
    if (b->next) b->next->prev = b->prev;
    block_recycle(a, b);
}

/* The address space a new span of class `large` for `owner` (a branch, or
 * 0) takes: as much as the allocator reserved for the class and owner so
 * far (CPOOL__SPAN_*_FIRST at first, at most CPOOL__SPAN_*), or what the
 * request needs. Reservations then grow geometrically with use, past the
 * first span at most about twice what the class needed, so that many pools
 * fit in a process's address space. */
static size_t span_size(const cpool__allocator *a, bool large, uint64_t owner, size_t need) {
    size_t reserved = 0;
    for (const cpool__segment *seg = a->segments; seg; seg = seg->next)
        if (seg->growable && seg->large == large && seg->branch == owner) reserved += seg->size;
    size_t first = a->span_first[large];
    size_t most = large ? CPOOL__SPAN_LARGE : CPOOL__SPAN_SMALL;
    size_t span = reserved < first ? first : reserved > most ? most : reserved;
    return span < need ? need : span;
}

/* A new growable segment of class `large` spanning at least `bytes`: one
 * hole. CPOOL_ERR_UNSUPPORTED: the platform reserves no address space (the
 * allocator stops trying). */
static cpool_status span_new(cpool__allocator *a, bool large, size_t bytes, uint64_t owner, cpool__block **hole) {
    size_t need = round_up(bytes, CPOOL__PAGE), span = span_size(a, large, owner, need);
    cpool__segment *seg = cpool__calloc(1, sizeof *seg);
    cpool__block *h = cpool__alloc_block_new(a);
    if (!seg || !h) {
        free(seg);
        free(h);
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for allocator records");
    }
    void *base = NULL;
    cpool_status st;
    /* Address space can run short where many pools live: ask for less,
     * down to what the request needs. */
    for (;;) {
        st = a->source.reserve(a->source.ctx, span, &base);
        if (st != CPOOL_ERR_OUT_OF_MEMORY || span == need) break;
        span = span / 2 > need ? round_up(span / 2, CPOOL__PAGE) : need;
    }
    if (st != CPOOL_OK) {
        free(seg);
        free(h);
        if (st == CPOOL_ERR_UNSUPPORTED) a->growable = false;
        return st;
    }
    *seg = (cpool__segment){
        .base = (uintptr_t)base, .size = span, .large = large, .growable = true, .branch = owner, .first = h};
    segment_link(a, seg);
    *h = (cpool__block){.addr = seg->base, .size = span, .seg = seg, .hole = true};
    hole_link(a, h);
    *hole = h;
    return CPOOL_OK;
}

/* Gives back a span span_new just made, all hole, whose pages could not be
 * had: a refused request keeps no address space. */
static void span_drop(cpool__allocator *a, cpool__block *hole) {
    cpool__segment *seg = hole->seg;
    hole_unlink(a, hole);
    block_recycle(a, hole);
    segment_unlink(a, seg);
    a->source.unreserve(a->source.ctx, (void *)seg->base, seg->size);
    free(seg);
}

/* Maps [at, at + bytes), whole pages of hole h, as a free block (in no
 * heap) of the set `graph` names; what is left of the hole stays
 * a hole. */
static cpool_status map_in_hole(cpool__allocator *a, cpool__block *h, uintptr_t at, size_t bytes, bool graph,
                                cpool__block **out) {
    if (a->max_reserved && bound_reserved(a) + bytes > a->max_reserved)
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY,
                           "%zu more bytes would take the pool past max_reserved_bytes (%llu reserved of %llu)",
                           bytes, (unsigned long long)bound_reserved(a), (unsigned long long)a->max_reserved);
    /* Records first: nothing to undo once the pages are mapped. */
    cpool__block *left = at > h->addr ? cpool__alloc_block_new(a) : NULL;
    cpool__block *right = at + bytes < h->addr + h->size ? cpool__alloc_block_new(a) : NULL;
    if ((at > h->addr && !left) || (at + bytes < h->addr + h->size && !right)) {
        if (left) block_recycle(a, left);
        if (right) block_recycle(a, right);
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for allocator records");
    }
    cpool_status st = a->source.map(a->source.ctx, (void *)at, bytes);
    if (st != CPOOL_OK) {
        if (left) block_recycle(a, left);
        if (right) block_recycle(a, right);
        return st;
    }
    hole_unlink(a, h);
    if (left) {
        *left = (cpool__block){.addr = h->addr, .size = at - h->addr, .hole = true};
        link_before(h, left);
        hole_link(a, left);
    }
    if (right) {
        *right = (cpool__block){.addr = at + bytes, .size = h->addr + h->size - (at + bytes), .hole = true};
        link_after(h, right);
        hole_link(a, right);
    }
    h->addr = at;
    h->size = bytes;
    h->hole = false;
    h->graph = graph;
    if (graph) a->graph_reserved += bytes;
    a->reserved += bytes;
    if (a->reserved > a->reserved_peak) {
        /* A new peak earns the right to move half as many bytes. */
        a->remap_budget += (a->reserved - a->reserved_peak) / CPOOL__REMAP_PEAK_SHARE;
        a->reserved_peak = a->reserved;
    }
    a->segment_count = a->segment_count + 1 - (uint64_t)(mapped(h->prev) + mapped(h->next));
    *out = h;
    return CPOOL_OK;
}

/* A free block whose whole pages may go back: general, no work on it, in
 * a growable segment, holding at least one whole page. */
static bool pages_free(const cpool__block *b) {
    return !b->live && !b->hole && !b->graph && !b->stream && b->seg->growable &&
           round_down(b->addr + b->size, CPOOL__PAGE) > round_up(b->addr, CPOOL__PAGE);
}

/* Shrinks [*lo, *hi) to the whole units of the source in it (alloc.h: a
 * unit goes back only whole; one that live blocks share stays until they
 * are freed). Whether pages are left to unmap. */
static bool whole_units(cpool__allocator *a, uintptr_t *lo, uintptr_t *hi) {
    if (a->source.inside) a->source.inside(a->source.ctx, lo, hi);
    return *lo < *hi;
}

/* Unmaps the whole pages of free block b (pages_free, in its heap), the
 * last ones, at most `most` bytes of them rounded up to a page: they become
 * a hole, merged with the holes beside it, and what is left of b on either
 * side stays free. Returns the hole, *given the bytes unmapped (0: no host
 * memory for the records, nothing changed). */
static cpool__block *unmap_pages(cpool__allocator *a, cpool__block *b, uint64_t most, uint64_t *given) {
    uintptr_t lo = round_up(b->addr, CPOOL__PAGE), hi = round_down(b->addr + b->size, CPOOL__PAGE);
    uintptr_t end = b->addr + b->size;
    *given = 0;
    if (lo >= hi || most == 0) return b; /* no whole page, or none asked for */
    if (hi - lo > most) lo = hi - round_up(most, CPOOL__PAGE);
    if (!whole_units(a, &lo, &hi)) return b;
    cpool__block *head = lo > b->addr ? cpool__alloc_block_new(a) : NULL;
    cpool__block *tail = hi < end ? cpool__alloc_block_new(a) : NULL;
    if ((lo > b->addr && !head) || (hi < end && !tail)) {
        if (head) block_recycle(a, head);
        if (tail) block_recycle(a, tail);
        return b;
    }
    heap_remove(heap_for(a, b), b);
    a->source.unmap(a->source.ctx, (void *)lo, hi - lo);
    if (head) {
        *head = (cpool__block){.addr = b->addr, .size = lo - b->addr, .used_by = b->used_by, .free_seq = b->free_seq};
        link_before(b, head);
        heap_insert(heap_for(a, head), head);
    }
    if (tail) {
        *tail = (cpool__block){.addr = hi, .size = end - hi, .used_by = b->used_by, .free_seq = b->free_seq};
        link_after(b, tail);
        heap_insert(heap_for(a, tail), tail);
    }
    b->addr = lo;
    b->size = hi - lo;
    b->hole = true;
    b->used_by = 0;
    a->reserved -= hi - lo;
    a->segment_count = a->segment_count + (uint64_t)(mapped(b->prev) + mapped(b->next)) - 1;
    *given = hi - lo;
    if (b->prev && b->prev->hole) {
        cpool__block *prev = b->prev;
        prev->size += b->size;
        unlink_block(a, b);
        b = prev;
    } else {
        hole_link(a, b);
    }
    if (b->next && b->next->hole) {
        cpool__block *next = b->next;
        hole_unlink(a, next);
        b->size += next->size;
        unlink_block(a, next);
    }
    return b;
}

/* Unmaps whole pages of free general blocks that no work uses, largest
 * blocks first, until `want` bytes went back or none is left; spares
 * `keep1` and `keep2`. A page given back here is mapped again elsewhere at
 * once, at about 50 us a page on an H200 (unmap and map), so the bytes moved
 * come from a budget: half of every byte by which the pool's peak grew, and
 * 1/1024 of the bytes allocated. Over a pool's life it moves at most half
 * its peak plus that trickle; a block gives back at most what the budget
 * has left (giving back whole blocks moved twice as many pages on warm
 * replays of gpt2_train). Unbounded, repeated replays of a training
 * trace moved about a GiB each; without moving pages, the traces' peaks
 * ended 1.11x-1.29x of their peak live bytes after a few replays. */
static void give_back_pages(cpool__allocator *a, uint64_t want, const cpool__block *keep1, const cpool__block *keep2) {
    /* Blocks that gave nothing (their pages in a unit that live blocks
     * share, or one larger than the budget left) are passed over; a few
     * of them, so that the search stays short. */
    const cpool__block *passed[8] = {keep1, keep2};
    size_t passed_count = 2;
    uint64_t given = 0;
    while (given < want) {
        cpool__block *pick = NULL;
        for (int cls = 1; cls >= 0 && !pick; cls--) {
            const cpool__heap *h = &a->heaps[heap_index(0, cls == 1)];
            for (unsigned bin = CPOOL__BINS; bin-- > bin_of(CPOOL__PAGE) && !pick;)
                for (cpool__block *b = h->bins[bin]; b && !pick; b = b->free_next) {
                    size_t k = 0;
                    while (k < passed_count && passed[k] != b) k++;
                    if (k == passed_count && pages_free(b)) pick = b;
                }
        }
        if (!pick) return;
        uint64_t n;
        unmap_pages(a, pick, a->remap_budget, &n); /* a large block: no more than the budget left */
        if (!n) {
            if (passed_count == sizeof passed / sizeof *passed) return;
            passed[passed_count++] = pick; /* unchanged by unmap_pages, so still in its heap */
            continue;
        }
        given += n;
        a->remap_budget -= n < a->remap_budget ? n : a->remap_budget;
    }
}

/* Whether free block b may make part of the block that serves a request
 * (`stream` as for cpool__allocator_alloc_cached): as the cached path would
 * take it, but without event dependencies. */
static bool extendable(const cpool__block *b, cpool__use use, uint64_t stream) {
    if (!b || b->live || b->hole) return false;
    if (use == CPOOL__USE_STREAM) return !b->graph && (!b->stream || b->stream == stream);
    if (!b->graph) return !b->stream;
    return !b->stream || b->stream == graph_branch(stream);
}

/* Pages to map for a request: [at, at + bytes) of `hole`, joining `like`
 * (the free block beside it that the new pages take the set of, or NULL)
 * and `other` (the one on the hole's other side, or NULL); the request is
 * then served at `start`. */
typedef struct grow_plan {
    cpool__block *hole, *like, *other;
    uintptr_t at, start;
    size_t bytes;
} grow_plan;

static void consider(grow_plan *best, cpool__block *hole, uintptr_t at, size_t bytes, cpool__block *like,
                     cpool__block *other, uintptr_t start) {
    if (!best->hole || bytes < best->bytes) *best = (grow_plan){hole, like, other, at, start, bytes};
}

/* The branch whose spans a request grows, or 0: where spans_by_branch is
 * set, each branch of a multi-stream capture grows its own, as if each
 * stream had an allocator of its own. Branches that grew one span took
 * turns in its pages and left pieces no branch could merge until the
 * capture ended: 34/60/72 MiB for 2/3/4 streams in
 * bench/multistream_memory_bench against 28/42/52 with spans apart. */
static uint64_t span_owner(const cpool__allocator *a, cpool__use use, uint64_t stream) {
    uint64_t branch = use != CPOOL__USE_STREAM && a->spans_by_branch ? graph_branch(stream) : 0;
    return branch & CPOOL__KEY_GRAPH_BIT ? 0 : branch;
}

/* Whether a graph's request grows graph memory: yes, but a branch that
 * shares its spans with other branches grows general memory, whose rests
 * any branch may take (less memory in multistream_memory_bench then). */
static bool grows_graph(const cpool__allocator *a, cpool__use use, uint64_t stream) {
    return use != CPOOL__USE_STREAM && (!graph_branch(stream) || span_owner(a, use, stream));
}

/* The class of span a request grows: its own, but a graph's memory grows
 * the large span (unless branches of a capture share spans), where the
 * other graphs' scratch lies: larger graphs reuse a small one's blocks only
 * there. Captured smallest first, graphs otherwise held a small span's page
 * besides the largest graph's memory (bench/capture_order_bench). Requests
 * with a graph's key (the packed region's outputs, graph_pages.h) grow it
 * too: small and large outputs then share pages. */
static bool grows_large(const cpool__allocator *a, size_t rounded, cpool__use use, uint64_t stream) {
    return rounded > CPOOL__SMALL_MAX || grows_graph(a, use, stream) ||
           (use != CPOOL__USE_STREAM && (stream & CPOOL__KEY_GRAPH_BIT));
}

/* The plan that maps the fewest pages: a hole's start after a usable free
 * block, its end before one, the whole hole between two, or a bare hole. */
static grow_plan plan_in_spans(cpool__allocator *a, size_t rounded, uint64_t stream, cpool__use use, uint64_t owner) {
    grow_plan best = {0};
    for (cpool__block *h = a->holes[grows_large(a, rounded, use, stream)]; h; h = h->free_next) {
        if (h->seg->branch != owner) continue;
        cpool__block *p = extendable(h->prev, use, stream) ? h->prev : NULL;
        cpool__block *n = extendable(h->next, use, stream) ? h->next : NULL;
        size_t psz = p ? p->size : 0, nsz = n ? n->size : 0;
        if (psz < rounded && round_up(rounded - psz, CPOOL__PAGE) <= h->size) {
            /* In a graph's arena a block starts on the new page where that
             * maps no more pages: a block that lives on (an output) then
             * takes no page of the block before it. */
            size_t bytes = round_up(rounded - psz, CPOOL__PAGE);
            bool on_page = a->spans_by_branch && round_up(rounded, CPOOL__PAGE) == bytes;
            consider(&best, h, h->addr, bytes, on_page ? NULL : p, NULL, on_page ? h->addr : h->addr - psz);
        }
        if (n && nsz < rounded && round_up(rounded - nsz, CPOOL__PAGE) <= h->size) {
            size_t bytes = round_up(rounded - nsz, CPOOL__PAGE);
            consider(&best, h, h->addr + h->size - bytes, bytes, n, NULL, h->addr + h->size - bytes);
        }
        if (p && n && p->graph == n->graph && psz + h->size + nsz >= rounded)
            consider(&best, h, h->addr, h->size, p, n, p->addr);
    }
    return best;
}

/* The spans a request may use. A branch that owns none takes back the one
 * it owned in the arena's last capture (the same stream: the same needs),
 * else it may take over any that no branch owns: new spans beside those
 * left mapped would hold more. */
static span_pick spans_for(cpool__allocator *a, cpool__use use, uint64_t stream) {
    span_pick spans = {span_owner(a, use, stream), false};
    if (!spans.owner) return spans;
    cpool__segment *last = NULL;
    for (cpool__segment *seg = a->segments; seg; seg = seg->next) {
        if (seg->branch == spans.owner) return spans;
        if (!seg->branch && seg->last_branch == spans.owner) last = seg;
    }
    if (last)
        last->branch = spans.owner;
    else
        spans.adopt = true;
    return spans;
}

static grow_plan plan_growth(cpool__allocator *a, size_t rounded, uint64_t stream, cpool__use use) {
    span_pick spans = spans_for(a, use, stream);
    grow_plan plan = plan_in_spans(a, rounded, stream, use, spans.owner);
    if (!plan.hole && spans.adopt) {
        plan = plan_in_spans(a, rounded, stream, use, 0);
        if (plan.hole) plan.hole->seg->branch = spans.owner;
    }
    return plan;
}

/* Serves a request from new pages of a growable segment (a new one when no
 * hole will do). CPOOL_ERR_UNSUPPORTED: the platform reserves no address
 * space; the caller takes a plain segment. */
static cpool_status grow_in_place(cpool__allocator *a, size_t bytes, uint64_t stream, cpool__use use, void **out) {
    size_t rounded = cpool__block_size(bytes);
    grow_plan plan = plan_growth(a, rounded, stream, use);
    uint64_t need = plan.hole ? plan.bytes : round_up(rounded, CPOOL__PAGE);
    if (a->reserved + need > a->reserved_peak) {
        uint64_t want = a->reserved + need - a->reserved_peak;
        give_back_pages(a, want < a->remap_budget ? want : a->remap_budget, plan.like, plan.other);
        plan = plan_growth(a, rounded, stream, use);
    }
    bool new_span = !plan.hole;
    if (new_span) {
        cpool__block *hole;
        cpool_status st = span_new(a, grows_large(a, rounded, use, stream), rounded, span_owner(a, use, stream), &hole);
        if (st != CPOOL_OK) return st;
        plan = (grow_plan){.hole = hole, .at = hole->addr, .start = hole->addr, .bytes = round_up(rounded, CPOOL__PAGE)};
    }
    /* The new pages take the set of the free block they join. Alone, a
     * graph's are all graph memory: the rest of the last page joins the
     * graphs' free scratch, which then lies in one block that a later
     * capture places its blocks in as it would in an empty pool. As general
     * memory the rest would split that block in two (grows_graph). */
    bool graph = plan.like ? plan.like->graph : grows_graph(a, use, stream);
    cpool__block *fresh, *spare = cpool__alloc_block_new(a); /* for the split at plan.start */
    cpool_status st = spare ? map_in_hole(a, plan.hole, plan.at, plan.bytes, graph, &fresh)
                            : cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for allocator records");
    if (st != CPOOL_OK) {
        if (spare) block_recycle(a, spare);
        if (new_span) span_drop(a, plan.hole);
        return st;
    }
    /* The merged block may begin before plan.start, with a neighbour the
     * request may not use (a merge may also narrow the block's tag): serve
     * exactly the planned range, made of usable blocks and new pages. The
     * pages join the planned block after them first: pages that fill a
     * hole would otherwise merge with the block before it, whose tag may
     * then bar the merge with the planned one. */
    if (plan.like && plan.like == fresh->next) {
        heap_remove(heap_for(a, plan.like), plan.like);
        absorb(a, fresh, plan.like);
    }
    cpool__block *b = cpool__alloc_release(a, fresh);
    CPOOL__INVARIANT("allocator", b->addr <= plan.start && plan.start + rounded <= b->addr + b->size,
                     "grown block does not hold the planned range");
    heap_remove(heap_for(a, b), b);
    if (plan.start > b->addr)
        cpool__alloc_split_front(a, b, plan.start, spare);
    else
        block_recycle(a, spare);
    /* Top down: at the top of the planned range's last page, all of it
     * usable (the planned range, then new pages). */
    uintptr_t top = round_up(b->addr + rounded, CPOOL__PAGE);
    b = carve_top(a, b, top < b->addr + b->size ? top : b->addr + b->size, rounded);
    if (!cpool__alloc_hand_out(a, b, bytes, rounded, use, stream)) {
        cpool__alloc_release(a, b); /* mapped and cached (merged with the piece split off): nothing is lost */
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for allocator records");
    }
    *out = (void *)b->addr;
    return CPOOL_OK;
}

bool cpool__allocator_growth_passes_peak(const cpool__allocator *a, size_t bytes, cpool__stream_key key,
                                         cpool__use use) {
    if (!a->growable) return false;
    size_t rounded = cpool__block_size(bytes);
    grow_plan plan = plan_growth((cpool__allocator *)a, rounded, key.word, use);
    return a->reserved + (plan.hole ? plan.bytes : round_up(rounded, CPOOL__PAGE)) > a->reserved_peak;
}

uint64_t cpool__allocator_growth_for(const cpool__allocator *a, size_t bytes, cpool__stream_key key,
                                     cpool__use use) {
    cpool__allocator *m = (cpool__allocator *)a; /* the searches adopt no span: none is by branch */
    size_t rounded = cpool__block_size(bytes);
    cpool__heap *from;
    if (heap_take(m, rounded, key.word, NULL, use, &from)) return 0;
    if (!a->growable) return rounded;
    grow_plan plan = plan_growth(m, rounded, key.word, use);
    return plan.hole ? plan.bytes : round_up(rounded, CPOOL__PAGE);
}

/* The pool's reserve as mapped pages at the start of a new large span. */
static cpool_status reserve_in_place(cpool__allocator *a, size_t bytes) {
    cpool__block *hole, *b;
    cpool_status st = span_new(a, true, bytes, 0, &hole);
    if (st != CPOOL_OK) return st;
    st = map_in_hole(a, hole, hole->addr, round_up(bytes, CPOOL__PAGE), false, &b);
    if (st != CPOOL_OK) {
        span_drop(a, hole);
        return st;
    }
    heap_insert(heap_for(a, b), b);
    return st;
}

cpool_status cpool__fail_not_live(const void *ptr) {
    return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%p was not handed out by this pool, or is already freed", ptr);
}

cpool_status cpool__allocator_free(cpool__allocator *a, void *ptr, cpool__stream_key stream, cpool__use use,
                                   cpool__stream_key branch, size_t *requested) {
    return cpool__alloc_free_block(a, ptr, stream.word, use == CPOOL__USE_GRAPH, branch.word, requested, cpool__free_clock_read());
}

void cpool__allocator_free_as_of(cpool__allocator *a, void *ptr, cpool__stream_key stream, uint64_t seq) {
    cpool__alloc_free_block(a, ptr, stream.word, false, 0, NULL, seq);
}

cpool_status cpool__alloc_free_block(cpool__allocator *a, void *ptr, uint64_t stream, bool graph, uint64_t branch,
                                     size_t *requested, uint64_t seq) {
    size_t j = map_find(a, (uintptr_t)ptr);
    if (j == SIZE_MAX)
        return cpool__fail_not_live(ptr);
    cpool__block *b = a->map[j];
    if (b->pinned)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%p is a parameter block, owned by the pool", ptr);
    map_erase(a, j);
    if (requested) *requested = b->requested;
    a->allocated -= b->requested;
    a->live_block_bytes -= b->size;
    b->live = false;
    b->requested = 0;
    /* Graph scratch freed under capture is free for later captures at once
     * (for its branch only, in a capture with branches); any other block
     * waits for its stream's work (see the top), and then, in a capture
     * with branches, is its branch's. */
    b->stream = b->graph && graph ? branch : stream;
    b->pending_branch = !b->graph && graph ? branch : 0;
    b->used_by = stream;
    if (graph && !b->graph) {
        /* Freed inside a capture: the graph still uses it on every replay. */
        b->graph = true;
        a->graph_reserved += b->size;
    }
    /* Freed by a capture, it is that graph's scratch; freed outside, it goes
     * back to the set it was placed in. */
    b->free_seq = seq;
    if (b->stream) a->restricted_blocks++;
    cpool__alloc_release(a, b);
    return CPOOL_OK;
}

/* Gives a segment back: a plain one whole; a growable one's mapped runs,
 * then its address range (its blocks are the caller's to drop). */
static void segment_free(cpool__allocator *a, cpool__segment *seg) {
    segment_unlink(a, seg);
    if (!seg->growable) {
        a->source.shrink(a->source.ctx, (void *)seg->base, seg->size);
        a->reserved -= seg->size;
        a->segment_count--;
    } else {
        const cpool__block *b = seg->first;
        while (b) {
            if (b->hole) {
                b = b->next;
                continue;
            }
            uintptr_t from = b->addr;
            size_t run;
            b = mapped_run(b, &run);
            a->source.unmap(a->source.ctx, (void *)from, run);
            a->reserved -= run;
            a->segment_count--;
        }
        a->source.unreserve(a->source.ctx, (void *)seg->base, seg->size);
    }
    free(seg);
}

/* Unmaps the whole pages of every free general block of growable segment
 * seg that no work uses. */
static uint64_t trim_pages(cpool__allocator *a, cpool__segment *seg) {
    uint64_t given = 0;
    for (cpool__block *b = seg->first; b;) {
        if (!pages_free(b)) {
            b = b->next;
            continue;
        }
        uint64_t n;
        cpool__block *hole = unmap_pages(a, b, UINT64_MAX, &n);
        given += n;
        b = hole->next; /* nothing unmapped (a unit left whole, no records): b itself */
    }
    return given;
}

uint64_t cpool__allocator_trim(cpool__allocator *a) {
    uint64_t given = 0;
    cpool__segment *seg = a->segments;
    while (seg) {
        cpool__segment *next = seg->next;
        cpool__block *b = seg->first;
        if (seg->growable) {
            given += trim_pages(a, seg);
        } else if (!b->live && !b->next && !b->graph && !b->stream) {
            heap_remove(heap_for(a, b), b);
            block_recycle(a, b);
            given += seg->size;
            segment_free(a, seg);
        }
        seg = next;
    }
    return given;
}

void cpool__allocator_destroy(cpool__allocator *a) {
    while (a->segments) {
        cpool__segment *seg = a->segments;
        cpool__block *b = seg->first;
        segment_free(a, seg);
        while (b) {
            cpool__block *next = b->next;
            free(b);
            b = next;
        }
    }
    while (a->spare_blocks) {
        cpool__block *b = a->spare_blocks;
        a->spare_blocks = b->next;
        free(b);
    }
    free(a->map);
    memset(a, 0, sizeof *a);
}

