/*
 * The front cache: a pool's small blocks, reused at their exact size under a
 * spin lock of their own, so that a cached alloc+free pair costs two short
 * critical sections instead of two trips through the pool mutex and the
 * allocator's split and merge.
 *
 * To the allocator a block in the front stays live: the front knows at most
 * CPOOL__FRONT_ENTRIES blocks of at most CPOOL__FRONT_MAX bytes and gives
 * the free ones back (cpool__front_flush) before the pool would take a new
 * segment and at trim, so it never makes the pool reserve more: what it
 * holds free is memory the allocator would have cached too, only not yet
 * merged with its neighbours. The front also keeps the callers' counters:
 * every allocation and free passes it, so they are exact under its lock alone.
 *
 * Lock order: the pool mutex, then the front's lock. Nothing under the
 * front's lock waits or calls a platform.
 */
#ifndef CPOOL_FRONT_H
#define CPOOL_FRONT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc.h"

/* The front keeps blocks up to 32 MiB. With plain segments, holding blocks
 * above 1 MiB apart from their neighbours raised peak reserved memory on the
 * real-model traces (bench/trace_replay); with growable segments, which
 * give free pages back before a growth past the peak, the three traces stay
 * within 1.01x of their peak in use either way, and a 16 MiB pair costs a
 * quarter of a trip through the pool mutex. */
#define CPOOL__FRONT_MAX ((size_t)32 << 20)
/* Free blocks up to this size have a class each (one per 512 bytes); larger
 * ones share one more list. */
#define CPOOL__FRONT_SMALL ((size_t)64 << 10)
#define CPOOL__FRONT_CLASSES (CPOOL__FRONT_SMALL / CPOOL__BLOCK_ALIGN + 1)
/* Blocks the front knows, handed out or free. */
#define CPOOL__FRONT_ENTRIES 64
#define CPOOL__FRONT_SLOTS (2 * CPOOL__FRONT_ENTRIES)

typedef struct cpool__front_entry {
    uintptr_t addr;
    uint64_t stream;       /* free: the stream it was freed on, the only one that may reuse it */
    size_t size;           /* the block's size (a multiple of CPOOL__BLOCK_ALIGN) */
    int16_t next;          /* next free entry of its class, or of the unused list; -1 ends */
    bool used, out;        /* known to the front; handed out (else free) */
    size_t requested;      /* handed out: the caller's size */
    size_t alloc_requested; /* the size the allocator has on record for the block */
    uint64_t free_seq;      /* free: the free clock when it was parked (stream_order.h) */
} cpool__front_entry;

typedef struct cpool__front {
    atomic_bool locked;
    cpool__front_entry entries[CPOOL__FRONT_ENTRIES];
    int16_t slots[CPOOL__FRONT_SLOTS];      /* entry by address: open addressing, -1 empty */
    /* Used entries per address hash, read without the lock: a free of a
     * block the front cannot know skips the lock. */
    _Atomic uint8_t maybe[CPOOL__FRONT_SLOTS];
    int16_t classes[CPOOL__FRONT_CLASSES];  /* free entries by size, newest first */
    int16_t unused;                         /* entries not in use */
    uint16_t evict_class;                   /* a full front gives a free block back from this class next, */
    uint16_t evict_entry;                   /* or, with none free, forgets this entry next */
    uint64_t free_bytes;
    /* The callers' view, reported by cpool_pool_get_stats. */
    uint64_t allocated, allocated_peak, alloc_count, free_count;
} cpool__front;

typedef enum cpool__front_result {
    CPOOL__FRONT_DONE,    /* the front served the call */
    CPOOL__FRONT_FREED,   /* the block was already free: a double free (the message is set) */
    CPOOL__FRONT_MISS,    /* the slow path must serve it */
} cpool__front_result;

void cpool__front_init(cpool__front *f);

/* The fast paths, outside the pool mutex and outside capture: always for
 * work on a stream, named by its id. */
bool cpool__front_alloc(cpool__front *f, size_t bytes, uint64_t stream_id, void **out);
cpool__front_result cpool__front_free(cpool__front *f, void *ptr, uint64_t stream_id);

/* The rest is called under the pool mutex. */

/* The front's blocks as a snapshot sees them: to the allocator they are
 * live, to the callers free (parked) or handed out. */
typedef struct cpool__front_view {
    uintptr_t addr;
    uint64_t stream;
    size_t requested; /* handed out: the caller's size; parked: 0 */
    bool out;
} cpool__front_view;
/* Fills out[0 .. CPOOL__FRONT_ENTRIES) with the blocks the front knows,
 * sorted by address, and *counts with the counters of the same moment
 * (the fast paths change both under the front's lock alone); returns the
 * blocks' count. */
struct cpool__front_counts;
size_t cpool__front_view_blocks(cpool__front *f, cpool__front_view *out, struct cpool__front_counts *counts);

/* Counts an allocation the allocator served. */
void cpool__front_count_alloc(cpool__front *f, size_t bytes);
/* A free the caller made of a block that stays live in the allocator for
 * now (a free a capture defers): counted now, freed later without the
 * front. */
void cpool__front_count_free(cpool__front *f, size_t requested);
/* The free path when the fast one did not serve: for a graph (under
 * capture, with `branch` the key of a forked capture's branch or graph, or
 * KEY_ANY), or for a block the front does not know yet, which it keeps if
 * eligible and there is room, else the allocator frees it (as
 * cpool__allocator_free). Returns CPOOL_OK or CPOOL_ERR_INVALID_ARGUMENT
 * (not live here: nothing changes). */
cpool_status cpool__front_free_slow(cpool__front *f, cpool__allocator *a, void *ptr, cpool__stream_key stream,
                                   cpool__use use, cpool__stream_key branch);
/* Gives every free block back to the allocator; returns how many. */
size_t cpool__front_flush(cpool__front *f, cpool__allocator *a);

/* The callers' counters, and the bytes free in the front. */
typedef struct cpool__front_counts {
    uint64_t allocated, allocated_peak, alloc_count, free_count, free_bytes;
} cpool__front_counts;
cpool__front_counts cpool__front_counters(cpool__front *f);
/* Checks the front's invariants against the allocator, the callers holding
 * `elsewhere_requested` bytes in `elsewhere_blocks` blocks of other
 * allocators whose counts it keeps too (graph arenas); aborts on the first
 * broken one. */
void cpool__front_check(cpool__front *f, const cpool__allocator *a, uint64_t elsewhere_requested,
                        size_t elsewhere_blocks);

#endif /* CPOOL_FRONT_H */
