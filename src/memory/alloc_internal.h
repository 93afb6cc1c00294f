/*
 * The allocator's own records, for its four files alone (README); everyone
 * else goes through alloc.h and only reads its counters (reserved,
 * allocated, graph_reserved, segment_count). The hot path's small helpers
 * are inline here, so that splitting the files costs no call.
 */
#ifndef CPOOL_ALLOC_INTERNAL_H
#define CPOOL_ALLOC_INTERNAL_H

#include "alloc.h"

struct cpool__block {
    uintptr_t addr;
    size_t size;
    size_t requested; /* live: the caller's size */
    cpool__block *prev, *next;           /* address order in the segment */
    cpool__block *free_prev, *free_next; /* bin list while free */
    cpool__segment *seg;
    uint64_t stream;   /* free general block: the only stream that may reuse it, 0 for any */
    uint64_t used_by;  /* the stream it was last handed out or freed on, 0 if unknown (snapshots) */
    uint64_t free_seq; /* when it was freed, or became its branch's (restricted blocks) */
    /* A general block freed in a capture with branches waits for its
     * stream's earlier work (`stream` is that stream); then it goes to
     * this branch, not to every one (0: none). */
    uint64_t pending_branch;
    uint16_t bin;
    bool live;
    bool graph;
    bool pinned; /* live for the pool's whole life: never freed by a caller */
    bool hole;   /* unmapped pages of a growable segment (never live, in no heap) */
    bool lent;   /* live and pinned: bytes lent elsewhere (cpool__allocator_lend) */
    uint64_t serial; /* which allocation handed it out last */
};

struct cpool__segment {
    uintptr_t base;
    size_t size; /* growable: the reserved range, mapped or not */
    bool large;
    bool growable;
    /* The branch of a capture that owns the span (takes its blocks, grows
     * it; graph_branch), or 0; and who owned it in the last capture. */
    uint64_t branch, last_branch;
    uintptr_t high; /* the end of the highest block ever handed out (cpool__allocator_tails) */
    cpool__segment *prev, *next;
    cpool__block *first;
};

/* ---- size classes and heaps ----------------------------------------------- */

static inline size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static inline unsigned bin_of(size_t size) {
    size_t units = size / CPOOL__BLOCK_ALIGN; /* >= 1 */
    if (units < 16) return (unsigned)units;
    unsigned e = 63u - (unsigned)__builtin_clzll((unsigned long long)units); /* >= 4 */
    unsigned m = (unsigned)(units >> (e - 3)) & 7u;
    unsigned bin = 16u + (e - 4u) * 8u + m;
    return bin < CPOOL__BINS ? bin : CPOOL__BINS - 1;
}

/* ---- heaps --------------------------------------------------------------- */

static inline void heap_insert(cpool__heap *h, cpool__block *b) {
    unsigned bin = bin_of(b->size);
    b->bin = (uint16_t)bin;
    b->free_prev = NULL;
    b->free_next = h->bins[bin];
    if (h->bins[bin]) h->bins[bin]->free_prev = b;
    h->bins[bin] = b;
    h->nonempty[bin / 64] |= 1ull << (bin % 64);
}

static inline void heap_remove(cpool__heap *h, cpool__block *b) {
    if (b->free_prev)
        b->free_prev->free_next = b->free_next;
    else
        h->bins[b->bin] = b->free_next;
    if (b->free_next) b->free_next->free_prev = b->free_prev;
    if (!h->bins[b->bin]) h->nonempty[b->bin / 64] &= ~(1ull << (b->bin % 64));
    b->free_prev = b->free_next = NULL;
}

static inline size_t round_down(size_t n, size_t to) { return n / to * to; }

/* The set a block is in: general 0, graph-reserved 1. */
static inline unsigned set_of(bool graph) { return graph ? 1u : 0u; }

static inline unsigned heap_index(unsigned set, bool large) { return set * 2u + (large ? 1u : 0u); }

static inline cpool__heap *heap_for(cpool__allocator *a, const cpool__block *b) {
    return &a->heaps[heap_index(set_of(b->graph), b->seg->large)];
}

/* Whether a free block of graph memory is kept from captures by its tag:
 * a stream's (no capture's until a fence of that stream's work is seen
 * over) or one graph's (a packed block its graph keeps until its
 * release). A branch's tag inside a capture is neither. */
static inline bool kept_graph_block(const cpool__block *b) {
    return b->graph && b->stream &&
           (!(b->stream & CPOOL__KEY_BRANCH_BIT) || (b->stream & CPOOL__KEY_GRAPH_BIT));
}

/* Free neighbours merge when they are of the same set and their stream tags
 * agree, or one is free for any stream: the merged block then keeps the
 * other's tag, which only narrows who may reuse the free part. Graph
 * memory kept from captures by its tag merges only with a block of the
 * same tag (a stream's: freed at the same point): a merged block is kept
 * as long as the latest of its frees, so a free every round (a fence
 * behind, or the live graph's output) would keep the whole run, and what
 * it took in, from every capture for ever. */
static inline bool mergeable(const cpool__block *x, const cpool__block *y) {
    if (!x || !y || x->live || y->live || x->hole || y->hole || x->graph != y->graph) return false;
    if ((kept_graph_block(x) || kept_graph_block(y)) &&
        (x->stream != y->stream || (!(x->stream & CPOOL__KEY_GRAPH_BIT) && x->free_seq != y->free_seq)))
        return false;
    return (x->stream == y->stream || !x->stream || !y->stream) &&
           (x->pending_branch == y->pending_branch || !x->pending_branch || !y->pending_branch);
}

/* ---- records ---------------------------------------------------------------- */

static inline void block_recycle(cpool__allocator *a, cpool__block *b) {
    b->next = a->spare_blocks;
    a->spare_blocks = b;
}

static inline size_t map_slot(uintptr_t addr, size_t cap) {
    return (size_t)(((uint64_t)addr >> 9) * 0x9E3779B97F4A7C15ull >> 20) & (cap - 1);
}

static inline size_t map_find(const cpool__allocator *a, uintptr_t addr) {
    if (!a->map_cap) return SIZE_MAX;
    for (size_t j = map_slot(addr, a->map_cap); a->map[j]; j = (j + 1) & (a->map_cap - 1))
        if (a->map[j]->addr == addr) return j;
    return SIZE_MAX;
}
/* The live block at addr, or NULL. */
static inline cpool__block *live_at(const cpool__allocator *a, uintptr_t addr) {
    size_t j = map_find(a, addr);
    return j == SIZE_MAX ? NULL : a->map[j];
}

/* Whether b (NULL: the segment's edge) is mapped memory. */
static inline int mapped(const cpool__block *b) { return b && !b->hole; }

/* The mapped run that starts at block b: its bytes in *bytes; returns the
 * block after it (a hole, or NULL at the segment's end). */
static inline const cpool__block *mapped_run(const cpool__block *b, size_t *bytes) {
    *bytes = 0;
    for (; b && !b->hole; b = b->next) *bytes += b->size;
    return b;
}

/* ---- alloc.c's parts that its siblings call -------------------------------- */

/* A zeroed block record (a recycled one first), or NULL. */
cpool__block *cpool__alloc_block_new(cpool__allocator *a);
/* Merges free block b (in no heap) with its mergeable free neighbours, then
 * puts the result in its heap and returns it. */
cpool__block *cpool__alloc_release(cpool__allocator *a, cpool__block *b);
/* Splits free block b (out of its heap) at `at`, inside it: record `head`
 * takes [b->addr, at), free as b was, back in its heap; b keeps the rest. */
void cpool__alloc_split_front(cpool__allocator *a, cpool__block *b, uintptr_t at, cpool__block *head);
/* Hands out free block b (out of its heap) for `bytes`, the rest split off;
 * false only when a record or map slot cannot be had. */
bool cpool__alloc_hand_out(cpool__allocator *a, cpool__block *b, size_t bytes, size_t rounded, cpool__use use,
                           uint64_t stream);
/* Frees the live block at ptr as of free-clock time `seq`. */
cpool_status cpool__alloc_free_block(cpool__allocator *a, void *ptr, uint64_t stream, bool graph, uint64_t branch,
                                     size_t *requested, uint64_t seq);

#endif
