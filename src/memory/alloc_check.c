/*
 * The allocator's invariants (cpool__allocator_check), walked over every
 * segment, block, heap and list; run by the debug checks (debug.h).
 */
#include "alloc_internal.h"

#define INVARIANT(cond, ...) CPOOL__INVARIANT("allocator", cond, __VA_ARGS__)

static bool in_heap(const cpool__heap *h, const cpool__block *b) {
    for (const cpool__block *c = h->bins[b->bin]; c; c = c->free_next)
        if (c == b) return true;
    return false;
}

void cpool__allocator_check_counters(const cpool__allocator *a) {
    INVARIANT(a->reserved <= a->reserved_peak, "reserved %llu past its peak %llu", (unsigned long long)a->reserved,
              (unsigned long long)a->reserved_peak);
    INVARIANT(a->allocated <= a->live_block_bytes && a->live_block_bytes <= a->reserved,
              "allocated %llu, live blocks %llu, reserved %llu", (unsigned long long)a->allocated,
              (unsigned long long)a->live_block_bytes, (unsigned long long)a->reserved);
    INVARIANT(a->graph_reserved <= a->reserved, "graph_reserved %llu of %llu reserved",
              (unsigned long long)a->graph_reserved, (unsigned long long)a->reserved);
    INVARIANT((a->map_count == 0) == (a->live_block_bytes == 0), "%zu live blocks of %llu bytes", a->map_count,
              (unsigned long long)a->live_block_bytes);
    INVARIANT(a->map_count * 2 <= a->map_cap, "the live-block map holds %zu in %zu slots", a->map_count, a->map_cap);
    INVARIANT((a->segment_count == 0) == (a->reserved == 0), "%llu mapped runs of %llu bytes",
              (unsigned long long)a->segment_count, (unsigned long long)a->reserved);
}

/* What cpool__allocator_check counts over the blocks, to hold against the
 * allocator's counters. */
typedef struct block_counts {
    uint64_t reserved, graph, live_bytes, requested, segments;
    size_t live, restricted, free_blocks, holes;
} block_counts;

static void check_block(const cpool__allocator *a, const cpool__segment *seg, const cpool__block *b, block_counts *c) {
    INVARIANT(b->seg == seg, "block %#lx names another segment", (unsigned long)b->addr);
    INVARIANT(b->size >= CPOOL__BLOCK_ALIGN && b->size % CPOOL__BLOCK_ALIGN == 0, "block size %zu", b->size);
    INVARIANT(!b->next || b->next->prev == b, "block list links");
    if (b->graph) c->graph += b->size;
    if (seg->growable && !b->hole) {
        c->reserved += b->size;
        if (!mapped(b->prev)) c->segments++;
    }
    if (b->hole) {
        c->holes++;
        INVARIANT(seg->growable && !b->live && !b->graph && !b->stream, "a hole outside a growable segment, or in use");
        INVARIANT(b->addr % CPOOL__PAGE == 0 && b->size % CPOOL__PAGE == 0, "a hole of part of a page");
        INVARIANT(!b->next || !b->next->hole, "two holes side by side");
    } else if (b->live) {
        c->live++;
        c->live_bytes += b->size;
        c->requested += b->requested;
        INVARIANT(b->requested > 0 && b->requested <= b->size, "live block's requested size");
        INVARIANT(map_find(a, b->addr) != SIZE_MAX, "live block missing from the map");
    } else {
        INVARIANT(!b->pinned, "a free block is pinned");
        c->free_blocks++;
        if (b->stream) c->restricted++;
        INVARIANT(b->bin == bin_of(b->size), "free block in the wrong class");
        INVARIANT(in_heap(heap_for((cpool__allocator *)a, b), b), "free block missing from its heap");
        INVARIANT(!mergeable(b, b->next), "two mergeable free blocks side by side");
    }
}

static void check_segments(const cpool__allocator *a, block_counts *c) {
    for (const cpool__segment *seg = a->segments; seg; seg = seg->next) {
        if (!seg->growable) {
            c->segments++;
            c->reserved += seg->size;
        } else {
            INVARIANT(seg->base % CPOOL__PAGE == 0 && seg->size % CPOOL__PAGE == 0, "growable segment alignment");
        }
        INVARIANT(!seg->next || seg->next->prev == seg, "segment list links");
        uintptr_t at = seg->base;
        INVARIANT(seg->first && !seg->first->prev, "segment's first block");
        for (const cpool__block *b = seg->first; b; b = b->next) {
            INVARIANT(b->addr == at, "blocks do not tile their segment at %#lx", (unsigned long)at);
            at += b->size;
            check_block(a, seg, b, c);
        }
        INVARIANT(at == seg->base + seg->size, "blocks do not cover their segment");
    }
}

/* The heaps and the hole lists hold exactly the free blocks and holes. */
static void check_lists(const cpool__allocator *a, const block_counts *c) {
    size_t in_heaps = 0;
    for (unsigned h = 0; h < CPOOL__HEAPS; h++)
        for (unsigned bin = 0; bin < CPOOL__BINS; bin++) {
            bool bit = (a->heaps[h].nonempty[bin / 64] >> (bin % 64)) & 1;
            INVARIANT(bit == (a->heaps[h].bins[bin] != NULL), "class bitmap disagrees with class %u", bin);
            for (const cpool__block *b = a->heaps[h].bins[bin]; b; b = b->free_next) {
                in_heaps++;
                INVARIANT(!b->live && heap_for((cpool__allocator *)a, b) == &a->heaps[h],
                          "heap holds a live block or a foreign one");
            }
        }
    INVARIANT(in_heaps == c->free_blocks, "heaps hold %zu blocks, segments %zu free ones", in_heaps, c->free_blocks);
    size_t listed = 0;
    for (int cls = 0; cls < 2; cls++)
        for (const cpool__block *h = a->holes[cls]; h; h = h->free_next) {
            INVARIANT(h->hole && h->seg->large == (cls == 1), "the hole list holds a block that is no hole of its class");
            INVARIANT(!h->free_next || h->free_next->free_prev == h, "hole list links");
            listed++;
        }
    INVARIANT(listed == c->holes, "hole lists hold %zu, segments %zu holes", listed, c->holes);
}

void cpool__allocator_check(const cpool__allocator *a) {
    block_counts c = {0};
    check_segments(a, &c);
    check_lists(a, &c);
    INVARIANT(c.live == a->map_count, "map holds %zu blocks, segments %zu live ones", a->map_count, c.live);
    INVARIANT(c.reserved == a->reserved, "reserved %llu, segments sum to %llu", (unsigned long long)a->reserved,
              (unsigned long long)c.reserved);
    INVARIANT(c.segments == a->segment_count, "segment count");
    INVARIANT(c.graph == a->graph_reserved, "graph_reserved %llu, blocks sum to %llu",
              (unsigned long long)a->graph_reserved, (unsigned long long)c.graph);
    INVARIANT(c.live_bytes == a->live_block_bytes, "live block bytes");
    INVARIANT(c.requested == a->allocated, "allocated %llu, live blocks ask %llu", (unsigned long long)a->allocated,
              (unsigned long long)c.requested);
    INVARIANT(c.restricted == a->restricted_blocks, "restricted block count");
    INVARIANT(a->reserved <= a->reserved_peak, "peak");
}
