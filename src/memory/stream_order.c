/*
 * The free clock and event dependencies (see stream_order.h).
 */
#include "stream_order.h"

/* ---- the free clock -------------------------------------------------------- */

/* A free only reads the clock, so the free path takes no locked
 * instruction for it; whoever needs to tell the frees before a point from
 * those after (a fence, an event's record, a trim) moves it on. */
static _Atomic uint64_t free_clock = 1;

uint64_t cpool__free_clock_tick(void) { return atomic_fetch_add(&free_clock, 1); }

uint64_t cpool__free_clock_read(void) { return atomic_load_explicit(&free_clock, memory_order_relaxed); }

/* ---- event dependencies ---------------------------------------------------- */

/* A pair packs the stream in the top DEP_STREAM_BITS bits and the free
 * sequence in the rest; 0 is an empty slot (stream ids start at 1). */
enum { DEP_STREAM_BITS = 24 };
#define DEP_SEQ_MASK (((uint64_t)1 << (64 - DEP_STREAM_BITS)) - 1)

void cpool__deps_init(cpool__deps *d) {
    for (unsigned i = 0; i < CPOOL__DEPS; i++) atomic_init(&d->slot[i], 0);
    atomic_init(&d->next, 0);
}

uint64_t cpool__deps_pack(uint64_t stream_id, uint64_t upto) {
    if (!stream_id || stream_id >> DEP_STREAM_BITS || upto > DEP_SEQ_MASK) return 0;
    return stream_id << (64 - DEP_STREAM_BITS) | upto;
}

void cpool__deps_note(cpool__deps *d, uint64_t word) {
    if (!word) return;
    uint64_t stream = word >> (64 - DEP_STREAM_BITS), upto = word & DEP_SEQ_MASK;
    for (unsigned i = 0; i < CPOOL__DEPS; i++) {
        uint64_t old = atomic_load_explicit(&d->slot[i], memory_order_relaxed);
        while (old >> (64 - DEP_STREAM_BITS) == stream) {
            if ((old & DEP_SEQ_MASK) >= upto) return;
            if (atomic_compare_exchange_weak(&d->slot[i], &old, word)) return;
        }
    }
    unsigned i = atomic_fetch_add_explicit(&d->next, 1, memory_order_relaxed) % CPOOL__DEPS;
    atomic_store(&d->slot[i], word); /* the oldest pair goes */
}

bool cpool__deps_cover(const cpool__deps *d, uint64_t stream_id, uint64_t seq) {
    for (unsigned i = 0; i < CPOOL__DEPS; i++) {
        uint64_t word = atomic_load_explicit(&d->slot[i], memory_order_acquire);
        if (word >> (64 - DEP_STREAM_BITS) == stream_id && seq <= (word & DEP_SEQ_MASK)) return true;
    }
    return false;
}
