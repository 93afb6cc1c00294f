/*
 * The host backend: the whole backend interface on the CPU.
 *
 * - A stream is a host_queue of tasks served in order by one worker thread.
 *   `enqueued` counts tasks put in, `completed` tasks finished; a position in
 *   the stream is a value of `enqueued`.
 * - An event is (queue, position): done once `completed` reaches it. It holds
 *   a reference to the queue so that it outlives a destroyed stream.
 * - While a stream captures, its work is appended to a host_capture instead
 *   of the queue; ending the capture freezes those operations into a graph.
 *   Synchronising a capturing stream invalidates the capture, as on CUDA.
 * - A graph is an immutable, reference-counted array of operations; a launch
 *   enqueues one task that runs them all and holds a graph reference, so a
 *   graph destroyed while launched lives until the launch finished.
 * - Device memory is host memory.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "backend.h"
#include "fault.h"
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

struct cpool__bgraph {
    atomic_int refs;
    size_t count;
    host_op ops[];
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

typedef struct host_capture {
    host_op *ops;
    size_t count, cap;
    bool invalidated;
    cpool_capture_mode mode;
} host_capture;

struct cpool__bstream {
    host_queue *q;
    /* Non-NULL while capturing. Changed by the stream's owner under q->mu,
     * so that other threads (event_record) may read it under q->mu. */
    host_capture *capture;
};

struct cpool__bevent {
    /* The last record (q, position, stamp), which a record replaces while
     * other threads may read it: under mu. */
    cpool__mutex mu;
    host_queue *q; /* NULL until recorded; a reference */
    uint64_t position;
    bool timed;        /* a user's event: each record is stamped */
    host_stamp *stamp; /* the last record's, a reference */
};

/* The last record of an event, with references of its own. */
typedef struct host_mark {
    host_queue *q;
    uint64_t position;
    host_stamp *stamp;
} host_mark;

struct cpool__bdevice {
    int unused;
};

/* ---- graphs -------------------------------------------------------------- */

static void graph_release(cpool__bgraph *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    for (size_t i = 0; i < g->count; i++)
        if (g->ops[i].kind == OP_GRAPH) graph_release(g->ops[i].graph);
    free(g);
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
        for (size_t i = 0; i < op->graph->count; i++) run_op(&op->graph->ops[i]);
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

/* Appends op to the capture or the queue. On failure an OP_GRAPH's reference
 * stays with the caller. */
static cpool_status enqueue(cpool__bstream *s, const host_op *op) {
    if (s->capture) {
        host_capture *c = s->capture;
        if (c->count == c->cap) {
            size_t cap = c->cap ? 2 * c->cap : 16;
            host_op *ops = cpool__realloc(c->ops, cap * sizeof *ops);
            if (!ops) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory recording captured work");
            c->ops = ops;
            c->cap = cap;
        }
        c->ops[c->count++] = *op;
        return CPOOL_OK;
    }
    host_task *t = cpool__malloc(sizeof *t);
    if (!t) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory queueing stream work");
    t->next = NULL;
    t->op = *op;
    host_queue *q = s->q;
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

/* ---- device and memory --------------------------------------------------- */

static cpool_status host_device_open(int ordinal, cpool__bdevice **out) {
    if (ordinal != 0) return cpool__fail(CPOOL_ERR_NO_DEVICE, "the host backend has one device, ordinal 0 (asked for %d)", ordinal);
    cpool__bdevice *d = cpool__calloc(1, sizeof *d);
    if (!d) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory opening the host device");
    *out = d;
    return CPOOL_OK;
}

static void host_device_close(cpool__bdevice *dev) { free(dev); }

static cpool_status host_segment_alloc(cpool__bdevice *dev, size_t bytes, void **out) {
    CPOOL_UNUSED(dev);
    void *p = NULL;
    if (cpool__fault_hit() || posix_memalign(&p, 4096, bytes) != 0)
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for a %zu-byte segment", bytes);
    *out = p;
    return CPOOL_OK;
}

#ifdef CPOOL_DEBUG_CHECKS
/* Poisons the pages of [base, base + bytes) that were ever touched: pages
 * never written hold nothing to protect, and touching them all would fault
 * in whole segments (mincore tells which pages are resident). */
static void poison_resident(void *base, size_t bytes) {
    const size_t page = 4096; /* segments are 4096-aligned (segment_alloc) */
    size_t pages = (bytes + page - 1) / page;
    unsigned char *resident = malloc(pages);
    if (!resident || mincore(base, bytes, resident) != 0) {
        memset(base, CPOOL__POISON, bytes);
    } else {
        for (size_t i = 0; i < pages; i++)
            if (resident[i] & 1) {
                size_t n = i + 1 == pages ? bytes - i * page : page;
                memset((char *)base + i * page, CPOOL__POISON, n);
            }
    }
    free(resident);
}
#endif

static void host_segment_free(cpool__bdevice *dev, void *base, size_t bytes) {
    CPOOL_UNUSED(dev);
#ifdef CPOOL_DEBUG_CHECKS
    poison_resident(base, bytes);
#else
    CPOOL_UNUSED(bytes);
#endif
    free(base);
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

static void set_capture(cpool__bstream *s, host_capture *c) {
    cpool__mutex_lock(&s->q->mu);
    s->capture = c;
    cpool__mutex_unlock(&s->q->mu);
}

static void discard_capture(cpool__bstream *s) {
    host_capture *c = s->capture;
    if (!c) return;
    for (size_t i = 0; i < c->count; i++)
        if (c->ops[i].kind == OP_GRAPH) graph_release(c->ops[i].graph);
    free(c->ops);
    free(c);
    set_capture(s, NULL);
}

static void host_stream_destroy(cpool__bstream *s) {
    discard_capture(s);
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
    if (s->capture) { /* only the owner gets here for a capturing stream */
        cpool__mutex_lock(&s->q->mu);
        s->capture->invalidated = true;
        cpool__mutex_unlock(&s->q->mu);
        return cpool__fail(CPOOL_ERR_CAPTURE_INVALIDATED,
                           "stream synchronize while the stream captures: the capture is invalidated");
    }
    cpool__mutex_lock(&s->q->mu);
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
    if (s->capture) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "an upload cannot be captured");
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
    cpool__mutex_destroy(&ev->mu);
    free(ev);
}

/* Appends a task straight to the queue, refusing a capturing stream, under
 * the queue's lock (so that no capture begins in between); *position gets
 * the queue's end after it. */
static cpool_status enqueue_uncaptured(cpool__bstream *s, host_task *t, uint64_t *position) {
    host_queue *q = s->q;
    cpool__mutex_lock(&q->mu);
    if (s->capture) {
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
        bool capturing = s->capture != NULL;
        position = q->enqueued;
        cpool__mutex_unlock(&q->mu);
        if (capturing) return cpool__fail(CPOOL_ERR_UNSUPPORTED, "cannot record an event on a capturing stream");
    }
    atomic_fetch_add(&q->refs, 1);
    cpool__mutex_lock(&ev->mu);
    host_mark old = {ev->q, 0, ev->timed ? ev->stamp : NULL};
    ev->q = q;
    ev->position = position;
    if (ev->timed) ev->stamp = stamp;
    cpool__mutex_unlock(&ev->mu);
    mark_release(&old);
    return CPOOL_OK;
}

static cpool_status host_stream_wait_event(cpool__bstream *s, cpool__bevent *ev) {
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
    if (!c) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory beginning a capture");
    c->mode = mode;
    host_queue *q = s->q;
    cpool__mutex_lock(&q->mu);
    bool capturing = s->capture != NULL;
    uint64_t position = q->enqueued;
    if (!capturing) s->capture = c;
    cpool__mutex_unlock(&q->mu);
    if (capturing) {
        free(c);
        return cpool__fail(CPOOL_ERR_ALREADY_CAPTURING, "the stream is already capturing");
    }
    if (fence) { /* marks the work enqueued before the capture */
        atomic_fetch_add(&q->refs, 1);
        cpool__mutex_lock(&fence->mu);
        host_queue *old = fence->q;
        fence->q = q;
        fence->position = position;
        cpool__mutex_unlock(&fence->mu);
        queue_release(old);
    }
    return CPOOL_OK;
}

/* A host graph is launchable as soon as it is recorded. */
static cpool_status host_graph_instantiate(cpool__bgraph *g) {
    CPOOL_UNUSED(g);
    return CPOOL_OK;
}

static cpool_status host_capture_end(cpool__bstream *s, bool instantiate, cpool__bgraph **out) {
    CPOOL_UNUSED(instantiate);
    host_capture *c = s->capture;
    if (!c) return cpool__fail(CPOOL_ERR_NOT_CAPTURING, "the stream is not capturing");
    if (c->invalidated) {
        discard_capture(s);
        return cpool__fail(CPOOL_ERR_CAPTURE_INVALIDATED,
                           "the capture was invalidated by a forbidden call; its work is discarded");
    }
    cpool__bgraph *g = cpool__malloc(sizeof *g + c->count * sizeof(host_op));
    if (!g) {
        discard_capture(s);
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory instantiating a graph");
    }
    atomic_init(&g->refs, 1);
    g->count = c->count;
    if (c->count) memcpy(g->ops, c->ops, c->count * sizeof(host_op));
    free(c->ops);
    free(c);
    set_capture(s, NULL);
    *out = g;
    return CPOOL_OK;
}

static cpool_status host_capture_status(cpool__bstream *s, cpool_capture_state *out) {
    cpool__mutex_lock(&s->q->mu);
    *out = !s->capture ? CPOOL_CAPTURE_NONE : s->capture->invalidated ? CPOOL_CAPTURE_INVALIDATED : CPOOL_CAPTURE_ACTIVE;
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

/* One node per operation, chained in the order they run. */
static void dot_ops(FILE *f, const cpool__bgraph *g) {
    for (size_t i = 0; i < g->count; i++) {
        const host_op *op = &g->ops[i];
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
        if (i > 0) fprintf(f, "  n%zu -> n%zu;\n", i - 1, i);
    }
}

static cpool_status host_graph_dump_dot(const cpool__bgraph *g, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return cpool__fail(CPOOL_ERR_BACKEND, "cannot open %s for writing", path);
    fprintf(f, "digraph capturepool_host_graph {\n  rankdir=TB;\n  label=\"host graph, %zu operations in stream order\";\n", g->count);
    dot_ops(f, g);
    fprintf(f, "}\n");
    if (fclose(f) != 0) return cpool__fail(CPOOL_ERR_BACKEND, "cannot write %s", path);
    return CPOOL_OK;
}

const cpool__backend cpool__backend_host = {
    .kind = CPOOL_BACKEND_HOST,
    .name = "host",
    .device_open = host_device_open,
    .device_close = host_device_close,
    .segment_alloc = host_segment_alloc,
    .segment_free = host_segment_free,
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
    .event_done = host_event_done,
    .event_synchronize = host_event_synchronize,
    .event_create_timed = host_event_create_timed,
    .stream_wait_event = host_stream_wait_event,
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
