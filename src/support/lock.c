/*
 * Ranked mutexes (see lock.h). The debug check keeps, per thread, how many
 * locks of each rank it holds; taking a lock whose rank is not above every
 * held one aborts.
 */
#include <stdio.h>
#include <stdlib.h>

#include "lock.h"

#ifdef CPOOL_DEBUG_CHECKS
static const char *const rank_names[CPOOL__RANK_COUNT] = {
    [CPOOL__RANK_REGISTRY] = "device registry",
    [CPOOL__RANK_EVENT] = "event",
    [CPOOL__RANK_CAPTURE] = "capture record",
    [CPOOL__RANK_POOL] = "pool",
    [CPOOL__RANK_FRONT] = "front cache",
    [CPOOL__RANK_STREAMS] = "device streams",
    [CPOOL__RANK_CAPTURE_GRAPHS] = "CUDA capture graphs",
    [CPOOL__RANK_PEERS] = "CUDA peer access",
    [CPOOL__RANK_MAPPED] = "CUDA mapped pages",
    [CPOOL__RANK_HOST_QUEUE] = "host stream queue",
    [CPOOL__RANK_HOST_CAPTURE] = "host capture",
    [CPOOL__RANK_HOST_EVENT] = "host event",
    [CPOOL__RANK_DEFERRED] = "deferred queue",
    [CPOOL__RANK_SLAB] = "handle slab",
};

static _Thread_local unsigned char held[CPOOL__RANK_COUNT];

void cpool__rank_acquire(cpool__rank rank) {
    for (int r = (int)rank; r < CPOOL__RANK_COUNT; r++)
        if (held[r]) {
            fprintf(stderr, "capturepool: lock order violated: taking the %s lock while holding the %s lock\n",
                    rank_names[rank], rank_names[r]);
            abort();
        }
    held[rank]++;
}

void cpool__rank_release(cpool__rank rank) { held[rank]--; }
#endif

void cpool__mutex_init(cpool__mutex *m, cpool__rank rank) {
    pthread_mutex_init(&m->mu, NULL);
    m->rank = rank;
}

void cpool__mutex_destroy(cpool__mutex *m) { pthread_mutex_destroy(&m->mu); }
