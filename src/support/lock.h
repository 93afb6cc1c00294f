/*
 * The library's locks and the one order they are taken in.
 *
 * Every mutex has a rank; a thread may take a lock only while every lock it
 * holds has a lower rank. Builds with CPOOL_DEBUG_CHECKS check this on every
 * acquisition and abort, naming both locks, on the first inversion, so that
 * a new inversion fails a test instead of deadlocking a user. Nothing is
 * held across a call into user code (drops, host callbacks) or a wait for
 * stream work, except where a rank below says so.
 *
 * The order, outermost first:
 */
#ifndef CPOOL_LOCK_H
#define CPOOL_LOCK_H

#include <pthread.h>
#include <stdbool.h>

typedef enum cpool__rank {
    CPOOL__RANK_REGISTRY = 1, /* device.c: the open devices */
    CPOOL__RANK_EVENT,        /* event.c: an event's records and the waits for them */
    CPOOL__RANK_CAPTURE,      /* capture_record.c: a capture record, shared by the streams of a fork */
    CPOOL__RANK_SUSPEND,      /* pool.c: one pool's suspend or resume, held across its wait for
                                 the device (no stream callback takes it: they are refused) */
    CPOOL__RANK_SUSPENDED,    /* pool.c: the list of suspended pools */
    CPOOL__RANK_POOL,         /* pool.c: a pool's records, allocator, fences and graph pages */
    CPOOL__RANK_FRONT,        /* front.c: a pool's front cache (a spin lock) */
    CPOOL__RANK_STREAMS,      /* order.c: a device's live streams, capture begin */
    CPOOL__RANK_CAPTURE_GRAPHS, /* cuda/runtime.c: graphs being captured */
    CPOOL__RANK_PEERS,        /* cuda/peer.c: the open CUDA devices and their peer access */
    CPOOL__RANK_MAPPED,       /* cuda/runtime.c: one device's mapped pages of growable segments */
    CPOOL__RANK_HOST_MEMORY,  /* host/memory.c: the host device's memory file */
    CPOOL__RANK_HOST_QUEUE,   /* host/streams.c: one stream's queue */
    CPOOL__RANK_HOST_CAPTURE, /* host/streams.c: a capture's graph of work, shared by its streams */
    CPOOL__RANK_HOST_EVENT,   /* host/streams.c: one event's last record */
    CPOOL__RANK_DEFERRED,     /* deferred.c: the library thread's queue */
    CPOOL__RANK_GRAPH_CACHE,  /* graph_cache.c: one cache's keys and counters (nothing else is taken
                                 under it: captures, launches, evictions and on_evict run without it) */
    CPOOL__RANK_SLAB,         /* handle.c: recycled handle memory */
    CPOOL__RANK_COUNT
} cpool__rank;

typedef struct cpool__mutex {
    pthread_mutex_t mu;
    cpool__rank rank;
} cpool__mutex;

#define CPOOL__MUTEX_INIT(rank) {PTHREAD_MUTEX_INITIALIZER, (rank)}

void cpool__mutex_init(cpool__mutex *m, cpool__rank rank);
void cpool__mutex_destroy(cpool__mutex *m);

/* Count an acquisition and a release of `rank` (also for locks that are not
 * a cpool__mutex: the front's spin lock). No-ops without CPOOL_DEBUG_CHECKS. */
#ifdef CPOOL_DEBUG_CHECKS
void cpool__rank_acquire(cpool__rank rank);
void cpool__rank_release(cpool__rank rank);
#else
static inline void cpool__rank_acquire(cpool__rank rank) { (void)rank; }
static inline void cpool__rank_release(cpool__rank rank) { (void)rank; }
#endif

/* Inline: the allocator's slow path takes a pool's lock on every call. */
static inline void cpool__mutex_lock(cpool__mutex *m) {
    cpool__rank_acquire(m->rank);
    pthread_mutex_lock(&m->mu);
}

static inline void cpool__mutex_unlock(cpool__mutex *m) {
    /* Read before the unlock: once unlocked, another thread may end the
     * mutex's owner (a stream's queue) and free it. */
    cpool__rank rank = m->rank;
    pthread_mutex_unlock(&m->mu);
    cpool__rank_release(rank);
}

/* pthread_cond_wait on m (m stays counted as held: the thread takes nothing
 * else while it waits). */
static inline void cpool__cond_wait(pthread_cond_t *cv, cpool__mutex *m) { pthread_cond_wait(cv, &m->mu); }

#endif /* CPOOL_LOCK_H */
