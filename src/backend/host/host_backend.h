/*
 * What the host backend's files share (backend.c, streams.c, capture.c,
 * replay.c); its memory (memory.c) has its own header, host_memory.h.
 *
 * - A stream is a host_queue of tasks served in order by one worker thread.
 *   `enqueued` counts tasks put in, `completed` tasks finished; a position in
 *   the stream is a value of `enqueued`.
 * - An event is (queue, position): done once `completed` reaches it. It holds
 *   a reference to the queue so that it outlives a destroyed stream.
 * - While a stream captures, its work is appended to a host_capture instead
 *   of the queue, as nodes with the dependencies CUDA's capture would give
 *   them: the node before on the same stream, and the records of the events
 *   the stream waited for. An event recorded in a capture marks the
 *   recording stream's last nodes; a stream that waits for it joins the
 *   capture (a fork) or, already in it, depends on them (a join). Ending the
 *   capture on its origin freezes the nodes into a graph, once every node is
 *   an ancestor of the origin's last (else it was not joined back: the
 *   capture is invalidated, as on CUDA). Synchronising a capturing stream
 *   invalidates the capture, as on CUDA.
 * - A graph is an immutable, reference-counted array of nodes; a launch
 *   enqueues one task that runs them all and holds a graph reference, so a
 *   graph destroyed while launched lives until the launch finished. A graph
 *   of one stream runs its nodes in order; one of several runs them on one
 *   worker per stream of its capture, each node once its dependencies ran.
 * - Device memory is host memory, counted against a capacity (memory.c).
 */
#ifndef CPOOL_HOST_BACKEND_H
#define CPOOL_HOST_BACKEND_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "lock.h"

/* OP_STAMP and OP_WAIT are never captured: a user event's record and a
 * stream's wait for one. */
typedef enum { OP_HOST_FN, OP_COPY, OP_SET, OP_GRAPH, OP_STAMP, OP_WAIT } op_kind;

/* When a timed event's record was reached: written by the stream's worker,
 * shared with the event (which may be destroyed or recorded again first). */
typedef struct host_stamp {
    atomic_int refs;
    atomic_bool set;
    double ms;
} host_stamp;

struct host_queue;

typedef struct host_op {
    op_kind kind;
    void (*fn)(void *);
    void *arg;
    void *dst;
    const void *src;
    size_t bytes;
    int value;
    cpool__bgraph *graph;     /* OP_GRAPH: holds a reference */
    host_stamp *stamp;        /* OP_STAMP: holds a reference */
    struct host_queue *wait_q; /* OP_WAIT: the queue waited for, a reference, */
    uint64_t position;        /* and the position in it */
} host_op;

/* A captured operation; deps[dep_first .. dep_first + dep_count) of its
 * capture or graph are the nodes it waits for. */
typedef struct host_node {
    host_op op;
    size_t dep_first, dep_count;
} host_node;

struct cpool__bgraph {
    atomic_int refs;
    size_t count;
    unsigned branches; /* streams its capture had: 1 runs in order */
    size_t *deps;
    /* Several branches: the nodes that wait for node i are
     * dependents[dependents_first[i] .. dependents_first[i + 1]). */
    size_t *dependents_first, *dependents;
    host_node nodes[];
};

typedef struct host_task {
    struct host_task *next;
    host_op op;
} host_task;

typedef struct host_queue {
    cpool__mutex mu;
    pthread_cond_t work_cv; /* a task was queued, or stop */
    pthread_cond_t done_cv; /* a task finished */
    host_task *head, *tail;
    uint64_t enqueued;
    _Atomic uint64_t completed;
    bool stop;
    pthread_t thread;
    atomic_int refs; /* the stream and every event recorded on it */
} host_queue;

/* A set of nodes: what a stream's next node waits for, or what an event
 * recorded in a capture marks. */
typedef struct node_set {
    size_t *nodes;
    size_t count, cap;
} node_set;

/* A stream taking part in a capture: member 0 is the origin. */
typedef struct host_member {
    struct cpool__bstream *s; /* NULL once it left (destroyed) */
    node_set tail;            /* its last nodes: what its next node waits for */
} host_member;

/* Shared by the capture's streams and the events recorded in it; the
 * streams change it under mu. */
typedef struct host_capture {
    cpool__mutex mu;
    atomic_int refs; /* its streams, and the events whose last record is in it */
    host_node *nodes;
    size_t count, cap;
    size_t *deps;
    size_t dep_count, dep_cap;
    host_member *members;
    size_t member_count, member_cap;
    atomic_bool invalidated;
    bool ended;
    cpool_capture_mode mode;
} host_capture;

struct cpool__bstream {
    host_queue *q;
    /* The capture it takes part in, or NULL; changed under q->mu (other
     * threads read it there), and its member index in it. */
    host_capture *capture;
    size_t member;
};

struct cpool__bevent {
    /* The last record (q, position, stamp), which a record replaces while
     * other threads may read it: under mu. */
    cpool__mutex mu;
    host_queue *q; /* NULL until recorded; a reference */
    uint64_t position;
    bool timed;        /* a user's event: each record is stamped */
    host_stamp *stamp; /* the last record's, a reference */
    /* A record made in a capture: the capture (a reference) and the nodes it
     * marks; q is then NULL. */
    host_capture *capture;
    node_set marks;
};

/* The last record of an event, with references of its own. */
typedef struct host_mark {
    host_queue *q;
    uint64_t position;
    host_stamp *stamp;
} host_mark;

/* ---- replay.c ------------------------------------------------------------ */

void cpool__host_run_op(const host_op *op);
void cpool__host_queue_wait(host_queue *q, uint64_t position);

/* ---- capture.c ----------------------------------------------------------- */

void cpool__host_graph_release(cpool__bgraph *g);
bool cpool__host_set_add_all(node_set *set, const node_set *from);
void cpool__host_set_free(node_set *set);
void cpool__host_capture_release(host_capture *c);
cpool_status cpool__host_capture_append(host_capture *c, size_t m, const host_op *op);
host_capture *cpool__host_capture_of(cpool__bstream *s);
bool cpool__host_captures(cpool__bstream *s);
void cpool__host_leave_capture(cpool__bstream *s);

cpool_status cpool__host_call_relaxed(cpool__bdevice *dev, cpool_status (*fn)(void *arg), void *arg);
cpool_status cpool__host_graph_instantiate(cpool__bgraph *g);
cpool_status cpool__host_capture_end(cpool__bstream *s, bool instantiate, cpool__bgraph **out);
cpool_status cpool__host_capture_status(cpool__bstream *s, cpool_capture_state *out);
cpool_status cpool__host_graph_upload(cpool__bgraph *g, cpool__bstream *s);
void cpool__host_graph_destroy(cpool__bgraph *g);
void *cpool__host_graph_native(const cpool__bgraph *g);
bool cpool__host_graph_update_in_place(cpool__bgraph *g, cpool__bgraph *fresh);
cpool_status cpool__host_graph_dump_dot(const cpool__bgraph *g, const char *path);

/* ---- streams.c ----------------------------------------------------------- */

cpool_status cpool__host_stream_create(cpool__bdevice *dev, void *native, bool wrap, cpool__bstream **out);
void cpool__host_stream_destroy(cpool__bstream *s);
void *cpool__host_stream_native(const cpool__bstream *s);
cpool_status cpool__host_stream_synchronize(cpool__bstream *s);
cpool_status cpool__host_launch_host(cpool__bstream *s, void (*fn)(void *), void *arg);
cpool_status cpool__host_memcpy_async(cpool__bstream *s, void *dst, const void *src, size_t bytes);
cpool_status cpool__host_memset_async(cpool__bstream *s, void *dst, int value, size_t bytes);
cpool_status cpool__host_upload_async(cpool__bstream *s, void *dst, const void *src, size_t bytes);
cpool_status cpool__host_event_create(cpool__bdevice *dev, cpool__bevent **out);
cpool_status cpool__host_event_create_timed(cpool__bdevice *dev, cpool__bevent **out);
void cpool__host_event_destroy(cpool__bevent *ev);
cpool_status cpool__host_event_record(cpool__bevent *ev, cpool__bstream *s);
cpool_status cpool__host_user_event_record(cpool__bevent *ev, cpool__bstream *s);
cpool_status cpool__host_stream_wait_event(cpool__bstream *s, cpool__bevent *ev);
cpool_status cpool__host_stream_fork(cpool__bstream *s, cpool__bevent *fence, cpool__bevent *ev);
cpool_status cpool__host_event_elapsed_ms(cpool__bevent *start, cpool__bevent *end, float *ms);
bool cpool__host_event_done(cpool__bevent *ev);
cpool_status cpool__host_event_synchronize(cpool__bevent *ev);
cpool_status cpool__host_capture_begin(cpool__bstream *s, cpool_capture_mode mode, cpool__bevent *fence);
cpool_status cpool__host_graph_launch(cpool__bgraph *g, cpool__bstream *s);

#endif /* CPOOL_HOST_BACKEND_H */
