/*
 * What the files of a pool share (pool.c: references, seal, records,
 * allocation and frees; pool_memory.c: graphs' arenas, stats, trim,
 * suspend and resume): the pool's struct and the helpers both call. No
 * other file includes it: the rest of the library sees a pool through
 * internal.h.
 */
#ifndef CPOOL_POOL_PRIVATE_H
#define CPOOL_POOL_PRIVATE_H

#include "alloc.h"
#include "debug.h"
#include "front.h"
#include "graph_pages.h"
#include "internal.h"
#include "output_guesses.h"
#include "residency.h"

typedef struct record {
    struct record *next;
    void *object;
    void (*drop)(void *object);
    uint64_t generation; /* the pool's when it was recorded: a clear after it drops it */
} record;

struct cpool_pool {
    /* First, within a cache line or two: what every capture's begin and end,
     * and every launch, touch. */
    cpool__handle_header handle;
    atomic_int refs;
    atomic_int user_refs;
    atomic_int launching;
    atomic_bool launches_held; /* page runs being split: launches wait (hold_launches) */
    cpool_device *dev;
    _Atomic uint64_t generation;
    atomic_bool sealed;
    /* Captures and graphs holding the pool (low half), and how many ever
     * took hold (high half), in one word, so that one read tells a trim
     * whether a holder came and went while it waited. Atomics: a capture's
     * begin and end take no lock for them. */
    _Atomic uint64_t holders;
    cpool__mutex mu;

    record *records, **records_tail;
    atomic_size_t record_count;
    record *doomed, **doomed_tail;
    uint64_t doomed_total, dropped_total; /* records ever moved to doomed, ever dropped */
    bool dropping;                        /* a dropper is at work */
    pthread_cond_t dropped_cv;            /* dropped_total moved */
    bool clear_queued;

    cpool__allocator alloc;
    cpool__front front;
    cpool__fences fences; /* order.h */

    cpool_param *params; /* blocks for the pool's whole life */
    cpool__graph_pages pages; /* graph memory */
    uint64_t reserved_peak;   /* of the allocator's and the graph pages' memory together */
    uint64_t graph_count;     /* arenas that graphs hold: one per graph holding the pool */
    cpool__guesses guesses; /* what outlived the last capture bound here (output_guesses.h) */

    cpool__deferred deferred_clear;
    cpool__deferred deferred_destroy;

    cpool__registrar registrar; /* add NULL: none (internal.h) */

    /* Suspend and resume: `suspended` refuses allocations, captures and
     * launches (set first, cleared last); `residency` (under mu) has the
     * memory off the device; `suspend_mu` orders one suspend or resume at a
     * time. A suspended pool is on the list of suspended pools, for the
     * copies and sets that would touch its memory. */
    atomic_bool suspended;
    cpool__mutex suspend_mu;
    cpool__residency residency;
    struct cpool_pool *next_suspended;
};

/* `holders`: the live holders below this, the holders ever taken above. */
#define HOLDER_EPOCH_ONE ((uint64_t)1 << 32)
static inline uint64_t holder_count(uint64_t holders) { return holders & (HOLDER_EPOCH_ONE - 1); }

/* Under mu: the full walk of the pool's memory (debug.h). `every_arena`
 * walks every arena's blocks too (graph_pages.h). */
void cpool__pool_walk_allocator(cpool_pool *pool, bool every_arena);
/* Under mu, after memory may have grown. */
void cpool__pool_note_peak(cpool_pool *pool);
/* The pool's stream-order fences (order.h): completed ones polled, and new
 * ones added on the device's streams. */
void cpool__pool_poll_fences(cpool_pool *pool);
void cpool__pool_add_fences(cpool_pool *pool);
/* Whether the device's work is over (queried, never waited for). */
bool cpool__pool_device_work_over(const cpool_pool *pool);
/* The list of suspended pools (pool.c), for the copies and sets that must
 * not touch their memory: a pool goes on it at its suspend, off it at its
 * resume or teardown. */
void cpool__pool_list_suspended(cpool_pool *pool);
void cpool__pool_forget_suspended(cpool_pool *pool);
/* Whether a copy or set is inside the memory check of cpool__pool_memory_enter now. */
bool cpool__pool_memory_in_use(void);

#ifdef CPOOL_DEBUG_CHECKS
/* Under mu, after every operation: the cheap checks always, the full walk
 * when asked (debug.h). */
void cpool__pool_check_allocator(cpool_pool *pool, bool every_arena);
#define CHECK_ALLOCATOR(pool) cpool__pool_check_allocator(pool, false)
/* At a capture's end and a trim: every arena. */
#define CHECK_ALLOCATOR_FULL(pool) cpool__pool_check_allocator(pool, true)
/* After a fast path, which does not hold mu and leaves the allocator as it
 * was: only a full walk has something to look at. */
#define CHECK_ALLOCATOR_LOCKING(pool)         \
    do {                                      \
        if (cpool__debug_full()) {            \
            cpool__mutex_lock(&(pool)->mu);  \
            cpool__pool_check_allocator(pool, false);     \
            cpool__mutex_unlock(&(pool)->mu); \
        }                                     \
    } while (0)
#else
#define CHECK_ALLOCATOR(pool) ((void)0)
#define CHECK_ALLOCATOR_FULL(pool) ((void)0)
#define CHECK_ALLOCATOR_LOCKING(pool) ((void)0)
#endif


#endif /* CPOOL_POOL_PRIVATE_H */
