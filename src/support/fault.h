/*
 * Fault injection: with the build option CPOOL_FAULT_INJECTION, every
 * acquisition of a resource (host memory, segments, events, streams, worker
 * threads) first asks cpool__fault_hit(), and the N-th one after
 * cpool__fault_arm(N) fails as if the resource could not be had. Without the
 * option the checks compile to nothing. The tests sweep N over every
 * acquisition a scenario makes (tests/test_faults.c).
 */
#ifndef CPOOL_FAULT_H
#define CPOOL_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef CPOOL_FAULT_INJECTION
/* Counts one acquisition; true if it must fail. */
bool cpool__fault_hit(void);
/* Makes the nth acquisition from now on fail (0: none) and resets the count. */
void cpool__fault_arm(uint64_t nth);
/* The same for `span` acquisitions in a row from the nth: a failure whose
 * undoing fails too. */
void cpool__fault_arm_span(uint64_t nth, uint64_t span);
/* Acquisitions counted since the last arm. */
uint64_t cpool__fault_count(void);
#else
#define cpool__fault_hit() false
#endif

void *cpool__malloc(size_t bytes);
void *cpool__calloc(size_t count, size_t bytes);
void *cpool__realloc(void *p, size_t bytes);
/* Makes room for `need` elements of `elem` bytes in the array *p, which has
 * room for *cap: the room doubles, from `first`, and what is new is zeroed.
 * false: out of host memory, nothing changed. */
bool cpool__grow(void **p, size_t *cap, size_t elem, size_t need, size_t first);

#endif /* CPOOL_FAULT_H */
