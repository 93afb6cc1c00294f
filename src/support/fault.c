/*
 * The library's host-memory entry points, and the fault injection counter
 * behind every resource acquisition (fault.h).
 */
#include <stdlib.h>
#include <string.h>

#include <stdatomic.h>

#include "fault.h"

#ifdef CPOOL_FAULT_INJECTION
static _Atomic uint64_t fault_nth;   /* 0: no fault armed */
static _Atomic uint64_t fault_span;  /* how many fail from the nth on */
static _Atomic uint64_t fault_count; /* acquisitions since the arm */

bool cpool__fault_hit(void) {
    uint64_t n = atomic_fetch_add(&fault_count, 1) + 1;
    uint64_t nth = atomic_load(&fault_nth);
    return nth != 0 && n >= nth && n - nth < atomic_load(&fault_span);
}

void cpool__fault_arm_span(uint64_t nth, uint64_t span) {
    atomic_store(&fault_count, 0);
    atomic_store(&fault_span, span);
    atomic_store(&fault_nth, nth);
}

void cpool__fault_arm(uint64_t nth) { cpool__fault_arm_span(nth, 1); }

uint64_t cpool__fault_count(void) { return atomic_load(&fault_count); }
#endif

void *cpool__malloc(size_t bytes) { return cpool__fault_hit() ? NULL : malloc(bytes); }

void *cpool__calloc(size_t count, size_t bytes) { return cpool__fault_hit() ? NULL : calloc(count, bytes); }

void *cpool__realloc(void *p, size_t bytes) { return cpool__fault_hit() ? NULL : realloc(p, bytes); }

bool cpool__grow(void **p, size_t *cap, size_t elem, size_t need, size_t first) {
    if (need <= *cap) return true;
    size_t n = *cap ? 2 * *cap : first;
    while (n < need) n *= 2;
    unsigned char *grown = cpool__realloc(*p, n * elem);
    if (!grown) return false;
    memset(grown + *cap * elem, 0, (n - *cap) * elem);
    *p = grown;
    *cap = n;
    return true;
}
