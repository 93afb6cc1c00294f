/*
 * A pool's memory off the device and back (README). The allocator's and
 * the arenas' records do not change: pages they count as mapped are simply
 * absent meanwhile. The caller keeps them from mapping, unmapping or
 * handing out memory until the resume (the pool refuses allocations, and
 * its page callbacks skip absent pages), and makes sure no work uses the
 * memory (it waited for the device). Everything here runs under the pool's
 * lock.
 */
#ifndef CPOOL_RESIDENCY_H
#define CPOOL_RESIDENCY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "backend.h"
#include "graph_pages.h"

/* A run of live bytes kept on the host (residency.c). */
typedef struct cpool__kept_run cpool__kept_run;

typedef struct cpool__residency {
    const cpool__backend *be;
    cpool__bdevice *dev;
    bool suspended;
    /* The host copy (pinned where the backend can) and what it holds. It
     * outlives the resume, for the next suspend, until a trim. */
    void *host;
    size_t host_bytes;
    cpool__kept_run *runs;
    size_t run_count;
    uint64_t kept_bytes;
    /* The stream the copies run on, made at the first copy and kept with
     * the host copy, until a trim (a wake of a small pool would otherwise
     * spend a part of its time making and ending one). */
    cpool__bstream *copies;
} cpool__residency;

void cpool__residency_init(cpool__residency *r, const cpool__backend *be, cpool__bdevice *dev);
/* Frees the host copy and the copies' stream. */
void cpool__residency_destroy(cpool__residency *r);

/* Copies the live blocks of `a` and `gp` to the host (with `keep`), then
 * takes every mapped page of both off the device. On failure (no host
 * memory, a copy refused) nothing changed. */
cpool_status cpool__residency_suspend(cpool__residency *r, cpool__allocator *a, cpool__graph_pages *gp, bool keep);
/* Maps every page of `a` and `gp` again and restores the kept bytes, each
 * run's as soon as it is mapped (the next ones map while they travel). On
 * failure nothing is mapped and the memory stays suspended. */
cpool_status cpool__residency_resume(cpool__residency *r, cpool__allocator *a, cpool__graph_pages *gp);
/* Gives back the host copy kept after a resume, and the copies' stream
 * (none while suspended). */
void cpool__residency_trim(cpool__residency *r);

#endif /* CPOOL_RESIDENCY_H */
