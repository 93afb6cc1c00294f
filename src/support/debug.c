/*
 * The grades of the internal checks (see debug.h).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"

/* 0: not read yet; then 1 (cheap checks only) or 2 (full walks too). Two
 * threads that read it at once read the same environment. */
static atomic_int full_asked;
static _Atomic uint64_t full_walks;

bool cpool__debug_full(void) {
    int asked = atomic_load_explicit(&full_asked, memory_order_relaxed);
    if (!asked) {
        const char *v = getenv(CPOOL__DEBUG_FULL_ENV);
        asked = v && *v && strcmp(v, "0") != 0 ? 2 : 1;
        atomic_store_explicit(&full_asked, asked, memory_order_relaxed);
    }
    return asked == 2;
}

void cpool__debug_count_full_walk(void) { atomic_fetch_add_explicit(&full_walks, 1, memory_order_relaxed); }

uint64_t cpool__debug_full_walks(void) { return atomic_load_explicit(&full_walks, memory_order_relaxed); }
