/*
 * Stream order: which work a freed block waits for (a pool's fences), which
 * streams a teardown waits for (quiesce), and the events behind both. Every
 * caller that needs stream order comes here: a stream being destroyed, a
 * free under capture, a capture's begin.
 *
 * A pool's cpool__fences are events recorded on streams whose freed blocks
 * are reusable only there; once one completes, those blocks are free for
 * all. A capturing stream takes no event: its capture's fence covers its
 * blocks freed so far, whose work outside the graph was all enqueued
 * before it.
 *
 * Lock: a device's cpool__order's (its streams, each listed until its work
 * has finished), rank CPOOL__RANK_STREAMS (lock.h); a pool's fences are
 * under the pool's lock, which ranks above nothing here.
 */
#ifndef CPOOL_ORDER_H
#define CPOOL_ORDER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc.h" /* a pool's fences unfence its allocator's blocks */
#include "backend.h"
#include "lock.h"
#include "stream_order.h"

/* An event shared between a stream and those waiting on it (order.c). */
typedef struct cpool__shared_event cpool__shared_event;

typedef struct cpool__order_stream {
    uint64_t id; /* unique for the process's life: tags freed blocks */
    cpool__bstream *impl;
    /* The capture running here, begun here or joined by a fork (set under
     * the order's lock, cleared without it at the end, see
     * cpool__order_end_capture). */
    _Atomic(void *) capture;
    cpool__shared_event *capture_fence; /* recorded just before the stream began or joined its capture */
    cpool__deps deps; /* what its work runs after, by the events it waited for */
    struct cpool__order_stream *next, *prev;
} cpool__order_stream;

typedef struct cpool__order {
    cpool__mutex mu;
    const cpool__backend *be;
    cpool__bdevice *dev;
    cpool__order_stream *streams;
} cpool__order;

void cpool__order_init(cpool__order *o, const cpool__backend *be, cpool__bdevice *dev);
void cpool__order_destroy(cpool__order *o);

/* Lists a new stream, giving it its id. */
void cpool__order_add(cpool__order *o, cpool__order_stream *s, cpool__bstream *impl);
/* Waits for the stream's work, then unlists it and drops its fence. */
void cpool__order_remove(cpool__order *o, cpool__order_stream *s);

/* Waits until every listed stream has finished the work enqueued so far
 * (for a capturing stream: before its capture began). Returns CPOOL_OK or
 * the first backend error; a successful one leaves the last error text as
 * it was (a record that a capturing stream refuses is no failure). */
cpool_status cpool__order_quiesce(cpool__order *o);

/* A mark of the device's work: what every listed stream has enqueued so
 * far (for a capturing stream: what it enqueued before its capture began;
 * what came after is captured, not run). A stream destroyed later was
 * waited for before it left the list, and its events still complete. */
typedef struct cpool__order_mark cpool__order_mark;
/* Records an event on every listed stream (a capturing one gives its
 * capture fence instead). Never waits. NULL when no mark could be had;
 * the last error stays as it was either way. */
cpool__order_mark *cpool__order_mark_now(cpool__order *o);
/* Whether the marked work has finished; the events seen complete go at
 * once. Never waits. */
bool cpool__order_mark_done(cpool__order_mark *m);
void cpool__order_mark_release(cpool__order_mark *m);

/* Records the capture fence (made or renewed as needed), begins the backend
 * capture and publishes the record install(arg) returns as the stream's
 * capture, all under the order's lock: atomically for other threads'
 * quiesces and fences, and for a begin racing on the same stream. install
 * runs only on success; on failure nothing changed. */
cpool_status cpool__order_begin_capture(cpool__order *o, cpool__order_stream *s, cpool_capture_mode mode,
                                        void *(*install)(void *arg), void *arg);
/* As a begin, for a capture the backend runs on s already, begun outside
 * the library (cpool_capture_attach): checks that it captures
 * (CPOOL_ERR_NOT_CAPTURING, CPOOL_ERR_CAPTURE_INVALIDATED otherwise) and
 * that no capture is published (CPOOL_ERR_ALREADY_CAPTURING), then
 * publishes install(arg), under the order's lock. No fence marks the
 * stream's work from before that capture (an event recorded now would go
 * into it): the stream's capture fence is dropped, so that quiesces and
 * marks pass the stream by and a pool's fence of it waits (FENCE_BUSY)
 * until the capture is over, as for a stream captured outside the
 * library. On failure nothing changed. */
cpool_status cpool__order_attach_capture(cpool__order *o, cpool__order_stream *s, void *(*install)(void *arg),
                                         void *arg);
/* A stream joins a capture begun on another (a fork): records its fence
 * (made or renewed as needed) and waits for ev, recorded in the capture
 * (the backend's stream_fork), and publishes `capture` as the capture it
 * takes part in, all under the order's lock. On failure nothing is
 * published. */
cpool_status cpool__order_join_capture(cpool__order *o, cpool__order_stream *s, void *capture, cpool__bevent *ev);
/* The stream's owner ends its capture: no capture is published any more. */
void cpool__order_end_capture(cpool__order_stream *s);
/* The capture running on s, or NULL. */
static inline void *cpool__order_capture(const cpool__order_stream *s) {
    return atomic_load_explicit(&((cpool__order_stream *)s)->capture, memory_order_acquire);
}

/* ---- a pool's fences (under the pool's lock) ----------------------------- */

typedef struct cpool__fence cpool__fence;

typedef struct cpool__fences {
    cpool__fence *list;
    size_t count, cap;
    cpool__bevent **spare; /* recycled events */
    size_t spare_count, spare_cap;
} cpool__fences;

/* The allocators whose blocks a pool's fences cover (a fence is a fact
 * about a stream's work, whichever allocator a block freed there is in):
 * the pool's own and its graph memory's packed region. */
typedef struct cpool__fenced {
    cpool__allocator *list[2];
    size_t count;
} cpool__fenced;

/* Unfences the blocks of every completed fence. Never waits. */
void cpool__fences_poll(cpool__fences *f, cpool__order *o, const cpool__fenced *a);
/* Records a fence on every stream whose restricted blocks no fence covers
 * yet; a stream that captures is fenced by its capture's fence instead.
 * Never waits. */
void cpool__fences_add(cpool__fences *f, cpool__order *o, const cpool__fenced *a);
void cpool__fences_destroy(cpool__fences *f, cpool__order *o);

#endif /* CPOOL_ORDER_H */
