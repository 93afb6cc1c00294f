/*
 * The host backend: the whole backend interface on the CPU.
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
 * - Device memory is host memory, counted against a capacity
 *   (host_memory.c).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "fault.h"
#include "host_memory.h"
#include "lock.h"
#include "status.h"
#include "thread.h"

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

/* ---- graphs -------------------------------------------------------------- */

static void graph_release(cpool__bgraph *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    for (size_t i = 0; i < g->count; i++)
        if (g->nodes[i].op.kind == OP_GRAPH) graph_release(g->nodes[i].op.graph);
    free(g->deps);
    free(g->dependents_first);
    free(g->dependents);
    free(g);
}

/* ---- node sets ------------------------------------------------------------ */

/* Makes room for `need` elements in *p, which has room for *cap. */
static bool grow_array(void **p, size_t *cap, size_t elem, size_t need) {
    if (need <= *cap) return true;
    size_t n = *cap ? 2 * *cap : 4;
    while (n < need) n *= 2;
    void *grown = cpool__realloc(*p, n * elem);
    if (!grown) return false;
    *p = grown;
    *cap = n;
    return true;
}

static bool set_add(node_set *set, size_t node) {
    for (size_t i = 0; i < set->count; i++)
        if (set->nodes[i] == node) return true;
    if (!grow_array((void **)&set->nodes, &set->cap, sizeof *set->nodes, set->count + 1)) return false;
    set->nodes[set->count++] = node;
    return true;
}

static bool set_add_all(node_set *set, const node_set *from) {
    for (size_t i = 0; i < from->count; i++)
        if (!set_add(set, from->nodes[i])) return false;
    return true;
}

static void set_free(node_set *set) {
    free(set->nodes);
    *set = (node_set){0};
}

/* Drops a capture's nodes (a graph made from them took them already, or
 * they are discarded). */
static void capture_drop_nodes(host_capture *c) {
    for (size_t i = 0; i < c->count; i++)
        if (c->nodes[i].op.kind == OP_GRAPH) graph_release(c->nodes[i].op.graph);
    free(c->nodes);
    free(c->deps);
    c->nodes = NULL;
    c->deps = NULL;
    c->count = c->cap = c->dep_count = c->dep_cap = 0;
}

static void capture_release(host_capture *c) {
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1) return;
    capture_drop_nodes(c);
    for (size_t i = 0; i < c->member_count; i++) set_free(&c->members[i].tail);
    free(c->members);
    cpool__mutex_destroy(&c->mu);
    free(c);
}

static void queue_wait(host_queue *q, uint64_t position);
static void queue_release(host_queue *q);

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void stamp_release(host_stamp *st) {
    if (st && atomic_fetch_sub(&st->refs, 1) == 1) free(st);
}

static void run_graph(const cpool__bgraph *g);

static void run_op(const host_op *op) {
    switch (op->kind) {
    case OP_HOST_FN:
        op->fn(op->arg);
        break;
    case OP_COPY:
        memmove(op->dst, op->src, op->bytes);
        break;
    case OP_SET:
        memset(op->dst, op->value, op->bytes);
        break;
    case OP_GRAPH:
        run_graph(op->graph);
        break;
    case OP_STAMP:
        op->stamp->ms = now_ms();
        atomic_store(&op->stamp->set, true);
        break;
    case OP_WAIT:
        queue_wait(op->wait_q, op->position);
        break;
    }
}

/* ---- replaying a graph of several streams -------------------------------- */

/* One replay: nodes become ready as their dependencies finish; each worker
 * runs ready nodes until all have run. */
typedef struct replay {
    const cpool__bgraph *g;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t *pending; /* dependencies not yet run, per node */
    size_t *ready;   /* a stack of nodes ready to run */
    size_t ready_count, finished;
} replay;

static void *replay_worker(void *arg) {
    replay *r = arg;
    bool was = cpool__on_stream_thread();
    cpool__set_stream_thread(true); /* it runs stream work, as a queue's worker */
    pthread_mutex_lock(&r->mu);
    while (r->finished < r->g->count) {
        if (!r->ready_count) {
            pthread_cond_wait(&r->cv, &r->mu);
            continue;
        }
        size_t i = r->ready[--r->ready_count];
        pthread_mutex_unlock(&r->mu);
        run_op(&r->g->nodes[i].op);
        pthread_mutex_lock(&r->mu);
        r->finished++;
        for (size_t k = r->g->dependents_first[i]; k < r->g->dependents_first[i + 1]; k++) {
            size_t d = r->g->dependents[k];
            if (--r->pending[d] == 0) r->ready[r->ready_count++] = d;
        }
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    cpool__set_stream_thread(was);
    return NULL;
}

/* Runs g's nodes: in order for one stream; otherwise on one worker per
 * stream of its capture (this thread and branches - 1 more), each node
 * once its dependencies ran. Node order is an order the dependencies
 * allow, so where no worker or memory is to be had it runs in order. */
static void run_graph(const cpool__bgraph *g) {
    replay r = {.g = g};
    if (g->branches > 1) {
        r.pending = cpool__malloc(g->count * sizeof *r.pending);
        r.ready = cpool__malloc(g->count * sizeof *r.ready);
    }
    if (!r.pending || !r.ready) {
        free(r.pending);
        free(r.ready);
        for (size_t i = 0; i < g->count; i++) run_op(&g->nodes[i].op);
        return;
    }
    for (size_t i = g->count; i-- > 0;) {
        r.pending[i] = g->nodes[i].dep_count;
        if (!r.pending[i]) r.ready[r.ready_count++] = i;
    }
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    enum { MAX_WORKERS = 64 };
    pthread_t workers[MAX_WORKERS];
    unsigned started = 0;
    while (started + 1 < g->branches && started < MAX_WORKERS &&
           !cpool__fault_hit() && pthread_create(&workers[started], NULL, replay_worker, &r) == 0)
        started++;
    replay_worker(&r); /* fewer workers than asked only run it slower */
    for (unsigned i = 0; i < started; i++) pthread_join(workers[i], NULL);
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
    free(r.pending);
    free(r.ready);
}

/* ---- queues -------------------------------------------------------------- */

static void queue_release(host_queue *q) {
    if (!q || atomic_fetch_sub(&q->refs, 1) != 1) return;
    cpool__mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->work_cv);
    pthread_cond_destroy(&q->done_cv);
    free(q);
}

static void *worker_main(void *arg) {
    host_queue *q = arg;
    cpool__set_stream_thread(true);
    cpool__mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->stop) cpool__cond_wait(&q->work_cv, &q->mu);
        if (!q->head) break; /* stop, and nothing left */
        host_task *t = q->head;
        q->head = t->next;
        if (!q->head) q->tail = NULL;
        cpool__mutex_unlock(&q->mu);
        run_op(&t->op);
        if (t->op.kind == OP_GRAPH) graph_release(t->op.graph);
        if (t->op.kind == OP_STAMP) stamp_release(t->op.stamp);
        if (t->op.kind == OP_WAIT) queue_release(t->op.wait_q);
        free(t);
        cpool__mutex_lock(&q->mu);
        atomic_fetch_add(&q->completed, 1);
        pthread_cond_broadcast(&q->done_cv);
    }
    cpool__mutex_unlock(&q->mu);
    return NULL;
}

static void queue_wait(host_queue *q, uint64_t position) {
    cpool__mutex_lock(&q->mu);
    while (atomic_load(&q->completed) < position) cpool__cond_wait(&q->done_cv, &q->mu);
    cpool__mutex_unlock(&q->mu);
}

/* Appends op to c as a node of member m, waiting for m's last nodes, which
 * it becomes. Under c->mu. */
static cpool_status capture_append(host_capture *c, size_t m, const host_op *op) {
    node_set *tail = &c->members[m].tail;
    bool ok = grow_array((void **)&c->nodes, &c->cap, sizeof *c->nodes, c->count + 1) &&
              grow_array((void **)&c->deps, &c->dep_cap, sizeof *c->deps, c->dep_count + tail->count) &&
              grow_array((void **)&tail->nodes, &tail->cap, sizeof *tail->nodes, 1);
    if (!ok) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory recording captured work");
    c->nodes[c->count] = (host_node){.op = *op, .dep_first = c->dep_count, .dep_count = tail->count};
    if (tail->count) memcpy(c->deps + c->dep_count, tail->nodes, tail->count * sizeof *c->deps);
    c->dep_count += tail->count;
    tail->nodes[0] = c->count++;
    tail->count = 1;
    return CPOOL_OK;
}

/* Appends op to the capture s takes part in or to the queue. On failure an
 * OP_GRAPH's reference stays with the caller. */
static cpool_status enqueue(cpool__bstream *s, const host_op *op) {
    host_queue *q = s->q;
    cpool__mutex_lock(&q->mu);
    host_capture *c = s->capture;
    if (c) {
        cpool__mutex_lock(&c->mu);
        cpool_status st = capture_append(c, s->member, op);
        cpool__mutex_unlock(&c->mu);
        cpool__mutex_unlock(&q->mu);
        return st;
    }
    cpool__mutex_unlock(&q->mu);
    host_task *t = cpool__malloc(sizeof *t);
    if (!t) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory queueing stream work");
    t->next = NULL;
    t->op = *op;
    cpool__mutex_lock(&q->mu);
    if (q->tail)
        q->tail->next = t;
    else
        q->head = t;
    q->tail = t;
    q->enqueued++;
    pthread_cond_signal(&q->work_cv);
    cpool__mutex_unlock(&q->mu);
    return CPOOL_OK;
}

/* ---- capture mode -------------------------------------------------------- */

/* Host captures count no call against them: nothing to relax. */
static cpool_status host_call_relaxed(cpool__bdevice *dev, cpool_status (*fn)(void *arg), void *arg) {
    CPOOL_UNUSED(dev);
    return fn(arg);
}

/* ---- streams ------------------------------------------------------------- */

static cpool_status host_stream_create(cpool__bdevice *dev, void *native, bool wrap, cpool__bstream **out) {
    CPOOL_UNUSED(dev);
    CPOOL_UNUSED(native);
    if (wrap) return cpool__fail(CPOOL_ERR_UNSUPPORTED, "the host backend has no CUDA stream to wrap");
    cpool__bstream *s = cpool__calloc(1, sizeof *s);
    host_queue *q = cpool__calloc(1, sizeof *q);
    if (!s || !q) {
        free(s);
        free(q);
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory creating a stream");
    }
    cpool__mutex_init(&q->mu, CPOOL__RANK_HOST_QUEUE);
    pthread_cond_init(&q->work_cv, NULL);
    pthread_cond_init(&q->done_cv, NULL);
    atomic_init(&q->refs, 1);
    int rc = cpool__fault_hit() ? EAGAIN : pthread_create(&q->thread, NULL, worker_main, q);
    if (rc != 0) {
        queue_release(q);
        free(s);
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "could not start a stream worker thread (error %d)", rc);
    }
    s->q = q;
    *out = s;
    return CPOOL_OK;
}

/* The capture s takes part in, with c->mu held, or NULL. A capture that
 * ended on its origin is left here, lazily: each stream touches only
 * itself, so a fork destroyed on another thread is never touched. Under
 * s->q->mu. */
static host_capture *capture_of(cpool__bstream *s) {
    host_capture *c = s->capture;
    if (!c) return NULL;
    cpool__mutex_lock(&c->mu);
    if (!c->ended) return c;
    cpool__mutex_unlock(&c->mu);
    s->capture = NULL;
    capture_release(c);
    return NULL;
}

/* Whether s takes part in a capture now. */
static bool captures(cpool__bstream *s) {
    cpool__mutex_lock(&s->q->mu);
    host_capture *c = capture_of(s);
    if (c) cpool__mutex_unlock(&c->mu);
    cpool__mutex_unlock(&s->q->mu);
    return c != NULL;
}

/* s leaves its capture: from its origin, the capture ends (its work is
 * discarded unless *nodes_out takes it); from a fork, it is invalidated. */
static void leave_capture(cpool__bstream *s) {
    cpool__mutex_lock(&s->q->mu);
    host_capture *c = capture_of(s);
    if (c) {
        if (s->member == 0)
            c->ended = true;
        else
            atomic_store(&c->invalidated, true);
        c->members[s->member].s = NULL;
        cpool__mutex_unlock(&c->mu);
        s->capture = NULL;
    }
    cpool__mutex_unlock(&s->q->mu);
    capture_release(c);
}

static void host_stream_destroy(cpool__bstream *s) {
    leave_capture(s);
    host_queue *q = s->q;
    cpool__mutex_lock(&q->mu);
    q->stop = true;
    pthread_cond_signal(&q->work_cv);
    cpool__mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL); /* the worker drains the queue first */
    queue_release(q);
    free(s);
}

static void *host_stream_native(const cpool__bstream *s) {
    CPOOL_UNUSED(s);
    return NULL;
}

static cpool_status host_stream_synchronize(cpool__bstream *s) {
    cpool__mutex_lock(&s->q->mu);
    host_capture *c = capture_of(s);
    if (c) {
        atomic_store(&c->invalidated, true);
        cpool__mutex_unlock(&c->mu);
        cpool__mutex_unlock(&s->q->mu);
        return cpool__fail(CPOOL_ERR_CAPTURE_INVALIDATED,
                           "stream synchronize while the stream captures: the capture is invalidated");
    }
    uint64_t position = s->q->enqueued;
    cpool__mutex_unlock(&s->q->mu);
    queue_wait(s->q, position);
    return CPOOL_OK;
}

static cpool_status host_launch_host(cpool__bstream *s, void (*fn)(void *), void *arg) {
    host_op op = {.kind = OP_HOST_FN, .fn = fn, .arg = arg};
    return enqueue(s, &op);
}

static cpool_status host_memcpy_async(cpool__bstream *s, void *dst, const void *src, size_t bytes) {
    host_op op = {.kind = OP_COPY, .dst = dst, .src = src, .bytes = bytes};
    return enqueue(s, &op);
}

static cpool_status host_memset_async(cpool__bstream *s, void *dst, int value, size_t bytes) {
    host_op op = {.kind = OP_SET, .dst = dst, .value = value, .bytes = bytes};
    return enqueue(s, &op);
}

/* The source is copied now, into the task, so the caller may reuse it. */
static cpool_status host_upload_async(cpool__bstream *s, void *dst, const void *src, size_t bytes) {
    if (captures(s)) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "an upload cannot be captured");
    void *copy = cpool__malloc(bytes);
    if (!copy) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory staging an upload");
    memcpy(copy, src, bytes);
    host_op op = {.kind = OP_COPY, .dst = dst, .src = copy, .bytes = bytes};
    cpool_status st = enqueue(s, &op);
    if (st == CPOOL_OK) {
        host_op release = {.kind = OP_HOST_FN, .fn = free, .arg = copy};
        st = enqueue(s, &release);
        if (st != CPOOL_OK) {
            /* The copy is queued and reads `copy`: wait for it before freeing. */
            host_stream_synchronize(s);
            free(copy);
            st = CPOOL_OK;
        }
    } else {
        free(copy);
    }
    return st;
}

/* ---- events -------------------------------------------------------------- */

static cpool_status host_event_create(cpool__bdevice *dev, cpool__bevent **out) {
    CPOOL_UNUSED(dev);
    cpool__bevent *ev = cpool__calloc(1, sizeof *ev);
    if (!ev) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory creating an event");
    cpool__mutex_init(&ev->mu, CPOOL__RANK_HOST_EVENT);
    *out = ev;
    return CPOOL_OK;
}

static host_mark mark_take(cpool__bevent *ev) {
    cpool__mutex_lock(&ev->mu);
    host_mark m = {ev->q, ev->position, ev->stamp};
    if (m.q) atomic_fetch_add(&m.q->refs, 1);
    if (m.stamp) atomic_fetch_add(&m.stamp->refs, 1);
    cpool__mutex_unlock(&ev->mu);
    return m;
}

static void mark_release(host_mark *m) {
    queue_release(m->q);
    stamp_release(m->stamp);
}

static cpool_status host_event_create_timed(cpool__bdevice *dev, cpool__bevent **out) {
    cpool_status st = host_event_create(dev, out);
    if (st == CPOOL_OK) (*out)->timed = true;
    return st;
}

static void host_event_destroy(cpool__bevent *ev) {
    if (!ev) return;
    queue_release(ev->q);
    stamp_release(ev->stamp);
    capture_release(ev->capture);
    set_free(&ev->marks);
    cpool__mutex_destroy(&ev->mu);
    free(ev);
}

/* Makes (q, position, stamp) or (capture, marks) ev's last record, taking
 * the references and the set passed; the old record's go. */
static void record_set(cpool__bevent *ev, host_queue *q, uint64_t position, host_stamp *stamp, host_capture *capture,
                       node_set marks) {
    cpool__mutex_lock(&ev->mu);
    host_mark old = {ev->q, 0, ev->stamp};
    host_capture *old_capture = ev->capture;
    node_set old_marks = ev->marks;
    ev->q = q;
    ev->position = position;
    ev->stamp = stamp;
    ev->capture = capture;
    ev->marks = marks;
    cpool__mutex_unlock(&ev->mu);
    mark_release(&old);
    capture_release(old_capture);
    set_free(&old_marks);
}

/* Appends a task straight to the queue, refusing a capturing stream, under
 * the queue's lock (so that no capture begins in between); *position gets
 * the queue's end after it. */
static cpool_status enqueue_uncaptured(cpool__bstream *s, host_task *t, uint64_t *position) {
    host_queue *q = s->q;
    cpool__mutex_lock(&q->mu);
    host_capture *c = capture_of(s);
    if (c) {
        cpool__mutex_unlock(&c->mu);
        cpool__mutex_unlock(&q->mu);
        return cpool__fail(CPOOL_ERR_UNSUPPORTED, "the stream is capturing");
    }
    t->next = NULL;
    if (q->tail)
        q->tail->next = t;
    else
        q->head = t;
    q->tail = t;
    *position = ++q->enqueued;
    pthread_cond_signal(&q->work_cv);
    cpool__mutex_unlock(&q->mu);
    return CPOOL_OK;
}

static cpool_status host_event_record(cpool__bevent *ev, cpool__bstream *s) {
    host_queue *q = s->q;
    uint64_t position;
    host_stamp *stamp = NULL;
    if (ev->timed) {
        /* A task stamps the time when the stream reaches the record. */
        host_task *t = cpool__malloc(sizeof *t);
        stamp = cpool__calloc(1, sizeof *stamp);
        if (!t || !stamp) {
            free(t);
            free(stamp);
            return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory recording an event");
        }
        atomic_init(&stamp->refs, 2); /* the event's and the task's */
        t->op = (host_op){.kind = OP_STAMP, .stamp = stamp};
        cpool_status st = enqueue_uncaptured(s, t, &position);
        if (st != CPOOL_OK) {
            free(t);
            free(stamp);
            return cpool__fail(st, "cannot record an event on a capturing stream");
        }
    } else {
        cpool__mutex_lock(&q->mu);
        host_capture *c = capture_of(s);
        if (c) cpool__mutex_unlock(&c->mu);
        position = q->enqueued;
        cpool__mutex_unlock(&q->mu);
        if (c) return cpool__fail(CPOOL_ERR_UNSUPPORTED, "cannot record an event on a capturing stream");
    }
    atomic_fetch_add(&q->refs, 1);
    record_set(ev, q, position, stamp, NULL, (node_set){0});
    return CPOOL_OK;
}

/* In a capture a record marks the stream's last nodes. */
static cpool_status host_user_event_record(cpool__bevent *ev, cpool__bstream *s) {
    cpool__mutex_lock(&s->q->mu);
    host_capture *c = capture_of(s);
    if (!c) {
        cpool__mutex_unlock(&s->q->mu);
        return host_event_record(ev, s);
    }
    node_set marks = {0};
    bool ok = set_add_all(&marks, &c->members[s->member].tail);
    if (ok) atomic_fetch_add(&c->refs, 1);
    cpool__mutex_unlock(&c->mu);
    cpool__mutex_unlock(&s->q->mu);
    if (!ok) {
        set_free(&marks);
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory recording an event in a capture");
    }
    record_set(ev, NULL, 0, NULL, c, marks);
    return CPOOL_OK;
}

/* s waits for ev where a capture is involved: ev was recorded in capture ec
 * (a reference; s joins it or, in it already, depends on the marks), or s
 * captures and ev was not recorded in a capture. */
static cpool_status wait_in_capture(cpool__bstream *s, cpool__bevent *ev, host_capture *ec) {
    cpool__mutex_lock(&s->q->mu);
    host_capture *c = capture_of(s); /* its lock held */
    cpool_status st = CPOOL_OK;
    bool joined = false;
    if (!ec) {
        cpool__mutex_lock(&ev->mu);
        bool recorded = ev->q != NULL;
        cpool__mutex_unlock(&ev->mu);
        if (recorded) /* never recorded: nothing to wait for */
            st = cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "a stream in a capture cannot wait for an event recorded outside it");
    } else if (c && c != ec) {
        st = cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "the event was recorded in another capture");
    } else if (!c) {
        cpool__mutex_lock(&ec->mu);
        c = ec;
        if (ec->ended) {
            st = cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "the event was recorded in a capture that has ended");
        } else if (!grow_array((void **)&ec->members, &ec->member_cap, sizeof *ec->members, ec->member_count + 1)) {
            st = cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory joining a capture");
        } else { /* a fork: s joins the capture with nothing to wait for yet */
            s->member = ec->member_count++;
            ec->members[s->member] = (host_member){.s = s};
            joined = true;
        }
    }
    if (st == CPOOL_OK && ec) {
        cpool__mutex_lock(&ev->mu);
        bool ok = ev->capture == ec && set_add_all(&c->members[s->member].tail, &ev->marks);
        bool rerecorded = ev->capture != ec;
        cpool__mutex_unlock(&ev->mu);
        if (rerecorded)
            st = cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "the event was recorded again meanwhile");
        else if (!ok)
            st = cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory waiting for an event in a capture");
        if (st != CPOOL_OK && joined) { /* as before the call */
            set_free(&ec->members[s->member].tail);
            ec->member_count--;
            joined = false;
        }
    }
    if (joined) {
        atomic_fetch_add(&ec->refs, 1);
        s->capture = ec;
    }
    if (c) cpool__mutex_unlock(&c->mu);
    cpool__mutex_unlock(&s->q->mu);
    return st;
}

static cpool_status host_stream_wait_event(cpool__bstream *s, cpool__bevent *ev) {
    cpool__mutex_lock(&ev->mu);
    host_capture *ec = ev->capture;
    if (ec) atomic_fetch_add(&ec->refs, 1);
    cpool__mutex_unlock(&ev->mu);
    if (ec || captures(s)) {
        cpool_status st = wait_in_capture(s, ev, ec);
        capture_release(ec);
        return st;
    }
    host_mark m = mark_take(ev);
    if (!m.q) return CPOOL_OK; /* never recorded: nothing to wait for */
    stamp_release(m.stamp);
    host_task *t = cpool__malloc(sizeof *t);
    if (!t) {
        queue_release(m.q);
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory queueing a wait");
    }
    t->op = (host_op){.kind = OP_WAIT, .wait_q = m.q, .position = m.position}; /* the task takes m's reference */
    uint64_t position;
    cpool_status st = enqueue_uncaptured(s, t, &position);
    if (st != CPOOL_OK) {
        queue_release(m.q);
        free(t);
        return cpool__fail(st, "cannot wait for an event on a capturing stream");
    }
    return CPOOL_OK;
}

static cpool_status host_stream_fork(cpool__bstream *s, cpool__bevent *fence, cpool__bevent *ev) {
    cpool__mutex_lock(&s->q->mu);
    uint64_t position = s->q->enqueued;
    cpool__mutex_unlock(&s->q->mu);
    atomic_fetch_add(&s->q->refs, 1);
    record_set(fence, s->q, position, NULL, NULL, (node_set){0});
    return host_stream_wait_event(s, ev);
}

static cpool_status host_event_elapsed_ms(cpool__bevent *start, cpool__bevent *end, float *ms) {
    host_mark a = mark_take(start), b = mark_take(end);
    cpool_status st = CPOOL_OK;
    if (!a.stamp || !b.stamp)
        st = cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_event_elapsed_ms: both events must have been recorded");
    else if (!atomic_load(&a.stamp->set) || !atomic_load(&b.stamp->set))
        st = cpool__fail(CPOOL_ERR_NOT_READY, "cpool_event_elapsed_ms: a record has not completed");
    else
        *ms = (float)(b.stamp->ms - a.stamp->ms);
    mark_release(&a);
    mark_release(&b);
    return st;
}

static bool host_event_done(cpool__bevent *ev) {
    cpool__mutex_lock(&ev->mu);
    bool done = !ev->q || atomic_load(&ev->q->completed) >= ev->position;
    cpool__mutex_unlock(&ev->mu);
    return done;
}

static cpool_status host_event_synchronize(cpool__bevent *ev) {
    host_mark m = mark_take(ev);
    if (m.q) queue_wait(m.q, m.position);
    mark_release(&m);
    return CPOOL_OK;
}

/* ---- capture and graphs -------------------------------------------------- */

/* The check, the fence's position and the capture's start are one step
 * under the queue's lock: an end of a capture on another thread (which
 * changes s->capture under that lock) cannot fall in between. */
static cpool_status host_capture_begin(cpool__bstream *s, cpool_capture_mode mode, cpool__bevent *fence) {
    host_capture *c = cpool__calloc(1, sizeof *c);
    host_member *origin = cpool__calloc(1, sizeof *origin);
    if (!c || !origin) {
        free(c);
        free(origin);
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory beginning a capture");
    }
    cpool__mutex_init(&c->mu, CPOOL__RANK_HOST_CAPTURE);
    atomic_init(&c->refs, 1);
    atomic_init(&c->invalidated, false);
    c->mode = mode;
    origin->s = s;
    c->members = origin;
    c->member_count = c->member_cap = 1;
    host_queue *q = s->q;
    cpool__mutex_lock(&q->mu);
    host_capture *other = capture_of(s);
    if (other) cpool__mutex_unlock(&other->mu);
    uint64_t position = q->enqueued;
    if (!other) {
        s->capture = c;
        s->member = 0;
    }
    cpool__mutex_unlock(&q->mu);
    if (other) {
        capture_release(c);
        return cpool__fail(CPOOL_ERR_ALREADY_CAPTURING, "the stream is already capturing");
    }
    if (fence) { /* marks the work enqueued before the capture */
        atomic_fetch_add(&q->refs, 1);
        record_set(fence, q, position, NULL, NULL, (node_set){0});
    }
    return CPOOL_OK;
}

/* A host graph is launchable as soon as it is recorded. */
static cpool_status host_graph_instantiate(cpool__bgraph *g) {
    CPOOL_UNUSED(g);
    return CPOOL_OK;
}

/* CPOOL_OK when every node is an ancestor of the origin's last nodes (or
 * one of them): else a fork's work was not joined back. One stream's nodes
 * are a chain that ends there. */
static cpool_status check_joined(const host_capture *c) {
    if (c->member_count == 1 || !c->count) return CPOOL_OK;
    const node_set *tail = &c->members[0].tail;
    bool *seen = cpool__calloc(c->count, sizeof *seen);
    size_t *stack = cpool__malloc((c->dep_count + tail->count + 1) * sizeof *stack);
    if (!seen || !stack) {
        free(seen);
        free(stack);
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory ending a capture");
    }
    size_t top = 0, reached = 0;
    for (size_t i = 0; i < tail->count; i++) stack[top++] = tail->nodes[i];
    while (top) {
        size_t n = stack[--top];
        if (seen[n]) continue;
        seen[n] = true;
        reached++;
        for (size_t k = 0; k < c->nodes[n].dep_count; k++) stack[top++] = c->deps[c->nodes[n].dep_first + k];
    }
    free(seen);
    free(stack);
    if (reached == c->count) return CPOOL_OK;
    return cpool__fail(CPOOL_ERR_CAPTURE_INVALIDATED,
                       "a stream forked into the capture was not joined back to the stream it began on; the capture "
                       "is invalidated and its work discarded");
}

/* The graph of an ended capture's nodes, which it takes (c keeps none). */
static cpool_status graph_from(host_capture *c, cpool__bgraph **out) {
    cpool__bgraph *g = cpool__calloc(1, sizeof *g + c->count * sizeof(host_node));
    unsigned branches = c->member_count > 64 ? 64 : (unsigned)c->member_count;
    size_t *first = branches > 1 ? cpool__calloc(c->count + 1, sizeof *first) : NULL;
    size_t *dependents = branches > 1 ? cpool__malloc((c->dep_count + 1) * sizeof *dependents) : NULL;
    if (!g || (branches > 1 && (!first || !dependents))) {
        free(g);
        free(first);
        free(dependents);
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory instantiating a graph");
    }
    atomic_init(&g->refs, 1);
    g->count = c->count;
    g->branches = branches;
    if (c->count) memcpy(g->nodes, c->nodes, c->count * sizeof(host_node));
    g->deps = c->deps;
    c->deps = NULL;
    c->count = c->dep_count = 0; /* the graph holds the nodes' references now */
    if (branches > 1) { /* who waits for each node, for the replay */
        for (size_t i = 0; i < g->count; i++)
            for (size_t k = 0; k < g->nodes[i].dep_count; k++) first[g->deps[g->nodes[i].dep_first + k] + 1]++;
        for (size_t i = 0; i < g->count; i++) first[i + 1] += first[i];
        size_t *fill = cpool__malloc((g->count + 1) * sizeof *fill);
        if (!fill) {
            g->branches = 1; /* a replay in order keeps every edge too */
            free(first);
            free(dependents);
        } else {
            memcpy(fill, first, (g->count + 1) * sizeof *fill);
            for (size_t i = 0; i < g->count; i++)
                for (size_t k = 0; k < g->nodes[i].dep_count; k++) dependents[fill[g->deps[g->nodes[i].dep_first + k]]++] = i;
            free(fill);
            g->dependents_first = first;
            g->dependents = dependents;
        }
    }
    *out = g;
    return CPOOL_OK;
}

static cpool_status host_capture_end(cpool__bstream *s, bool instantiate, cpool__bgraph **out) {
    CPOOL_UNUSED(instantiate);
    cpool__mutex_lock(&s->q->mu);
    host_capture *c = capture_of(s);
    if (!c) {
        cpool__mutex_unlock(&s->q->mu);
        return cpool__fail(CPOOL_ERR_NOT_CAPTURING, "the stream is not capturing");
    }
    if (s->member != 0) {
        cpool__mutex_unlock(&c->mu);
        cpool__mutex_unlock(&s->q->mu);
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "the stream joined a capture begun on another stream: end it there");
    }
    /* From here on no stream of the capture adds to it, and each leaves it
     * when it next looks (capture_of). */
    c->ended = true;
    c->members[0].s = NULL;
    s->capture = NULL;
    cpool_status st = CPOOL_OK;
    if (atomic_load(&c->invalidated))
        st = cpool__fail(CPOOL_ERR_CAPTURE_INVALIDATED,
                         "the capture was invalidated by a forbidden call; its work is discarded");
    else
        st = check_joined(c);
    if (st == CPOOL_OK) st = graph_from(c, out);
    capture_drop_nodes(c); /* events recorded in it keep only their marks */
    cpool__mutex_unlock(&c->mu);
    cpool__mutex_unlock(&s->q->mu);
    capture_release(c);
    return st;
}

static cpool_status host_capture_status(cpool__bstream *s, cpool_capture_state *out) {
    cpool__mutex_lock(&s->q->mu);
    host_capture *c = capture_of(s);
    *out = !c ? CPOOL_CAPTURE_NONE : atomic_load(&c->invalidated) ? CPOOL_CAPTURE_INVALIDATED : CPOOL_CAPTURE_ACTIVE;
    if (c) cpool__mutex_unlock(&c->mu);
    cpool__mutex_unlock(&s->q->mu);
    return CPOOL_OK;
}

static cpool_status host_graph_launch(cpool__bgraph *g, cpool__bstream *s) {
    atomic_fetch_add(&g->refs, 1);
    host_op op = {.kind = OP_GRAPH, .graph = g};
    cpool_status st = enqueue(s, &op);
    if (st != CPOOL_OK) graph_release(g);
    return st;
}

static cpool_status host_graph_upload(cpool__bgraph *g, cpool__bstream *s) {
    CPOOL_UNUSED(g);
    CPOOL_UNUSED(s);
    return CPOOL_OK; /* nothing to move: host memory is the device's */
}

static void host_graph_destroy(cpool__bgraph *g) { graph_release(g); }

static void *host_graph_native(const cpool__bgraph *g) {
    CPOOL_UNUSED(g);
    return NULL;
}

/* Host graphs are immutable arrays shared with launches in flight: an
 * update always swaps in the new graph. */
static bool host_graph_update_in_place(cpool__bgraph *g, cpool__bgraph *fresh) {
    CPOOL_UNUSED(g);
    CPOOL_UNUSED(fresh);
    return false;
}

/* One node per operation, with an edge from each node it waits for. */
static void dot_ops(FILE *f, const cpool__bgraph *g) {
    for (size_t i = 0; i < g->count; i++) {
        const host_op *op = &g->nodes[i].op;
        switch (op->kind) {
        case OP_HOST_FN:
            fprintf(f, "  n%zu [shape=box label=\"host fn %p\\narg %p\"];\n", i, (void *)(uintptr_t)op->fn, op->arg);
            break;
        case OP_COPY:
            fprintf(f, "  n%zu [shape=box label=\"copy %zu bytes\\n%p -> %p\"];\n", i, op->bytes, op->src, op->dst);
            break;
        case OP_SET:
            fprintf(f, "  n%zu [shape=box label=\"memset %zu bytes = %d\\n%p\"];\n", i, op->bytes, op->value, op->dst);
            break;
        case OP_GRAPH:
            fprintf(f, "  n%zu [shape=ellipse label=\"child graph (%zu ops)\"];\n", i, op->graph->count);
            break;
        case OP_STAMP:
        case OP_WAIT: /* never captured */
            break;
        }
        for (size_t k = 0; k < g->nodes[i].dep_count; k++)
            fprintf(f, "  n%zu -> n%zu;\n", g->deps[g->nodes[i].dep_first + k], i);
    }
}

static cpool_status host_graph_dump_dot(const cpool__bgraph *g, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return cpool__fail(CPOOL_ERR_IO, "cannot open %s for writing: %s", path, strerror(errno));
    fprintf(f, "digraph capturepool_host_graph {\n  rankdir=TB;\n  label=\"host graph, %zu operations, %u streams\";\n", g->count, g->branches);
    dot_ops(f, g);
    fprintf(f, "}\n");
    if (fclose(f) != 0) return cpool__fail(CPOOL_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return CPOOL_OK;
}

const cpool__backend cpool__backend_host = {
    .kind = CPOOL_BACKEND_HOST,
    .name = "host",
    .device_open = cpool__host_device_open,
    .device_close = cpool__host_device_close,
    .segment_alloc = cpool__host_segment_alloc,
    .segment_free = cpool__host_segment_free,
    .va_supported = cpool__host_va_supported,
    .call_relaxed = host_call_relaxed,
    .va_reserve = cpool__host_va_reserve,
    .va_release = cpool__host_va_release,
    .pages_map = cpool__host_pages_map,
    .pages_unmap = cpool__host_pages_unmap,
    .mem_create = cpool__host_mem_create,
    .mem_release = cpool__host_mem_release,
    .mem_map = cpool__host_mem_map,
    .mem_unmap = cpool__host_mem_unmap,
    .host_alloc = cpool__host_copy_alloc,
    .host_free = cpool__host_copy_free,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .stream_native = host_stream_native,
    .stream_synchronize = host_stream_synchronize,
    .launch_host = host_launch_host,
    .memcpy_async = host_memcpy_async,
    .memset_async = host_memset_async,
    .upload_async = host_upload_async,
    .event_create = host_event_create,
    .event_destroy = host_event_destroy,
    .event_record = host_event_record,
    .user_event_record = host_user_event_record,
    .event_done = host_event_done,
    .event_synchronize = host_event_synchronize,
    .event_create_timed = host_event_create_timed,
    .stream_wait_event = host_stream_wait_event,
    .stream_fork = host_stream_fork,
    .event_elapsed_ms = host_event_elapsed_ms,
    .capture_begin = host_capture_begin,
    .capture_end = host_capture_end,
    .graph_instantiate = host_graph_instantiate,
    .capture_status = host_capture_status,
    .graph_launch = host_graph_launch,
    .graph_upload = host_graph_upload,
    .graph_destroy = host_graph_destroy,
    .graph_native = host_graph_native,
    .graph_update_in_place = host_graph_update_in_place,
    .graph_dump_dot = host_graph_dump_dot,
};
