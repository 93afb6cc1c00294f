/*
 * What the pool, graph pages and residency read of the allocator's blocks,
 * and the loans of graph pages (alloc.h, "What graph pages ask of the
 * allocator"): walks in address order, lookups by address, and lending
 * free bytes as a live, pinned block.
 */
#include "alloc_internal.h"

void cpool__allocator_walk(const cpool__allocator *a, const cpool__walker *w) {
    for (const cpool__segment *seg = a->segments; seg; seg = seg->next) {
        const cpool__block *b = seg->first;
        while (b) {
            if (b->hole) {
                b = b->next;
                continue;
            }
            size_t run;
            const cpool__block *end = mapped_run(b, &run);
            if (w->segment) w->segment(w->ctx, b->addr, run);
            for (; w->block && b != end; b = b->next) {
                /* Lent bytes show as what they are used as: graphs' free scratch. */
                cpool__block_view v = {.addr = b->addr, .size = b->size, .requested = b->lent ? 0 : b->requested,
                                       .stream = b->used_by, .live = b->live && !b->lent, .graph = b->graph,
                                       .pinned = b->pinned && !b->lent, .output = b->live && b->graph && !b->lent,
                                       .serial = b->serial};
                w->block(w->ctx, &v);
            }
            b = end;
        }
    }
}

bool cpool__allocator_holds(const cpool__allocator *a, uintptr_t addr) {
    for (const cpool__segment *seg = a->segments; seg; seg = seg->next)
        if (addr >= seg->base && addr < seg->base + seg->size) return true;
    return false;
}

void cpool__allocator_pin(cpool__allocator *a, void *ptr) {
    cpool__block *b = live_at(a, (uintptr_t)ptr);
    if (b) b->pinned = true;
}

bool cpool__allocator_lend(cpool__allocator *a, uintptr_t addr, size_t bytes) {
    const cpool__segment *seg = a->segments;
    while (seg && (addr < seg->base || addr >= seg->base + seg->size)) seg = seg->next;
    cpool__block *b = seg ? seg->first : NULL;
    while (b && b->addr + b->size <= addr) b = b->next;
    size_t rounded = cpool__block_size(bytes);
    if (!b || b->live || b->hole || b->stream || b->pending_branch || addr + rounded > b->addr + b->size) return false;
    cpool__block *head = addr > b->addr ? cpool__alloc_block_new(a) : NULL;
    if (addr > b->addr && !head) return false;
    heap_remove(heap_for(a, b), b);
    if (head) cpool__alloc_split_front(a, b, addr, head);
    if (!cpool__alloc_hand_out(a, b, rounded, rounded, CPOOL__USE_GRAPH, 0)) {
        cpool__alloc_release(a, b);
        return false;
    }
    b->pinned = b->lent = true;
    return true;
}

void cpool__allocator_end_loan(cpool__allocator *a, uintptr_t addr) {
    cpool__block *b = live_at(a, addr);
    if (!b || !b->lent) return;
    b->pinned = b->lent = false;
    cpool__alloc_free_block(a, (void *)addr, 0, false, 0, NULL, cpool__free_clock_read());
}

void cpool__allocator_tails(const cpool__allocator *a, void (*tail)(void *ctx, uintptr_t page, size_t extent),
                            void *ctx) {
    for (const cpool__segment *seg = a->segments; seg; seg = seg->next)
        if (seg->growable && seg->high > seg->base) {
            uintptr_t page = (seg->high - 1) / CPOOL__PAGE * CPOOL__PAGE;
            tail(ctx, page, seg->high - page);
        }
}

void cpool__allocator_set_requested(cpool__allocator *a, void *ptr, size_t requested) {
    cpool__block *b = live_at(a, (uintptr_t)ptr);
    if (!b) return;
    a->allocated = a->allocated - b->requested + requested;
    b->requested = requested;
}

void cpool__allocator_note_user(cpool__allocator *a, const void *ptr, uint64_t stream_id) {
    cpool__block *b = live_at(a, (uintptr_t)ptr);
    if (b) b->used_by = stream_id;
}

bool cpool__allocator_live_block(const cpool__allocator *a, const void *ptr, cpool__block_info *info) {
    const cpool__block *b = live_at(a, (uintptr_t)ptr);
    if (!b) return false;
    *info = (cpool__block_info){.size = b->size,
                                .requested = b->requested,
                                .serial = b->serial,
                                .graph = b->graph,
                                .pinned = b->pinned};
    return true;
}
