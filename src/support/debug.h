/*
 * The grades of the library's internal checks, in builds with
 * CPOOL_DEBUG_CHECKS (as mimalloc's cheap and expensive assertions):
 *
 * - cheap, always: the lock order (lock.h) and invariants that cost O(1)
 *   (an allocator's counters against each other, alloc.h);
 * - full walks, only when asked: every block of a pool's allocator, its
 *   front cache and its graph pages, after every operation. Asked by the
 *   environment variable CPOOL_DEBUG_FULL set to anything but "" or "0",
 *   read once, at the first check. The test suite, the fuzzer and CI set
 *   it; without it a debug build stays usable on large pools.
 *
 * An explicit check (cpool__pool_check, called by tests and the fuzzer)
 * walks in full either way.
 */
#ifndef CPOOL_DEBUG_H
#define CPOOL_DEBUG_H

#include <stdbool.h>
#include <stdint.h>

/* The variable that asks for the full walks. */
#define CPOOL__DEBUG_FULL_ENV "CPOOL_DEBUG_FULL"

/* Whether the full walks are asked for (read once). */
bool cpool__debug_full(void);
/* Counts a full walk that ran after an operation. */
void cpool__debug_count_full_walk(void);
/* How many ran so far in this process: a test sees they run when asked,
 * and only then. */
uint64_t cpool__debug_full_walks(void);

#endif /* CPOOL_DEBUG_H */
