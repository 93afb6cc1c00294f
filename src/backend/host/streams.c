/*
 * The host backend's streams and events (host_backend.h maps the types).
 *
 * - A stream is a host_queue of tasks, served in order by its own worker
 *   thread (worker_main), which runs each task's operation (replay.c).
 *   Outside a capture a stream's work goes to its queue; in one, to the
 *   capture's nodes (capture.c).
 * - An event's last record is a position in a queue, or, recorded in a
 *   capture, the capture and the nodes it marks; a stream that waits for
 *   it waits for that position, or joins the capture (a fork).
 * - A capture begins here, on its stream: the check, the fence's record and
 *   the stream's start are one step under the stream's queue lock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "host_backend.h"
#include "lock.h"
#include "status.h"
#include "thread.h"

/* ---- queues -------------------------------------------------------------- */

static void queue_release(host_queue *q) {
    if (!q || atomic_fetch_sub(&q->refs, 1) != 1) return;
    cpool__mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->work_cv);
    pthread_cond_destroy(&q->done_cv);
    free(q);
}

static void stamp_release(host_stamp *st) {
    if (st && atomic_fetch_sub(&st->refs, 1) == 1) free(st);
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
        cpool__host_run_op(&t->op);
        if (t->op.kind == OP_GRAPH) cpool__host_graph_release(t->op.graph);
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

/* Appends op to the capture s takes part in or to the queue. On failure an
 * OP_GRAPH's reference stays with the caller. */
static cpool_status enqueue(cpool__bstream *s, const host_op *op) {
    host_queue *q = s->q;
    cpool__mutex_lock(&q->mu);
    host_capture *c = s->capture;
    if (c) {
        cpool__mutex_lock(&c->mu);
        cpool_status st = cpool__host_capture_append(c, s->member, op);
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

/* ---- streams ------------------------------------------------------------- */

cpool_status cpool__host_stream_create(cpool__bdevice *dev, void *native, bool wrap, cpool__bstream **out) {
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

void cpool__host_stream_destroy(cpool__bstream *s) {
    cpool__host_leave_capture(s);
    host_queue *q = s->q;
    cpool__mutex_lock(&q->mu);
    q->stop = true;
    pthread_cond_signal(&q->work_cv);
    cpool__mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL); /* the worker drains the queue first */
    queue_release(q);
    free(s);
}

void *cpool__host_stream_native(const cpool__bstream *s) {
    CPOOL_UNUSED(s);
    return NULL;
}

cpool_status cpool__host_stream_synchronize(cpool__bstream *s) {
    cpool__mutex_lock(&s->q->mu);
    host_capture *c = cpool__host_capture_of(s);
    if (c) {
        atomic_store(&c->invalidated, true);
        cpool__mutex_unlock(&c->mu);
        cpool__mutex_unlock(&s->q->mu);
        return cpool__fail(CPOOL_ERR_CAPTURE_INVALIDATED,
                           "stream synchronize while the stream captures: the capture is invalidated");
    }
    uint64_t position = s->q->enqueued;
    cpool__mutex_unlock(&s->q->mu);
    cpool__host_queue_wait(s->q, position);
    return CPOOL_OK;
}

cpool_status cpool__host_launch_host(cpool__bstream *s, void (*fn)(void *), void *arg) {
    host_op op = {.kind = OP_HOST_FN, .fn = fn, .arg = arg};
    return enqueue(s, &op);
}

cpool_status cpool__host_memcpy_async(cpool__bstream *s, void *dst, const void *src, size_t bytes) {
    host_op op = {.kind = OP_COPY, .dst = dst, .src = src, .bytes = bytes};
    return enqueue(s, &op);
}

cpool_status cpool__host_memset_async(cpool__bstream *s, void *dst, int value, size_t bytes) {
    host_op op = {.kind = OP_SET, .dst = dst, .value = value, .bytes = bytes};
    return enqueue(s, &op);
}

/* The source is copied now, into the task, so the caller may reuse it. */
cpool_status cpool__host_upload_async(cpool__bstream *s, void *dst, const void *src, size_t bytes) {
    if (cpool__host_captures(s)) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "an upload cannot be captured");
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
            cpool__host_stream_synchronize(s);
            free(copy);
            st = CPOOL_OK;
        }
    } else {
        free(copy);
    }
    return st;
}

/* ---- events -------------------------------------------------------------- */

cpool_status cpool__host_event_create(cpool__bdevice *dev, cpool__bevent **out) {
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

cpool_status cpool__host_event_create_timed(cpool__bdevice *dev, cpool__bevent **out) {
    cpool_status st = cpool__host_event_create(dev, out);
    if (st == CPOOL_OK) (*out)->timed = true;
    return st;
}

void cpool__host_event_destroy(cpool__bevent *ev) {
    if (!ev) return;
    queue_release(ev->q);
    stamp_release(ev->stamp);
    cpool__host_capture_release(ev->capture);
    cpool__host_set_free(&ev->marks);
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
    cpool__host_capture_release(old_capture);
    cpool__host_set_free(&old_marks);
}

/* Appends a task straight to the queue, refusing a capturing stream, under
 * the queue's lock (so that no capture begins in between); *position gets
 * the queue's end after it. */
static cpool_status enqueue_uncaptured(cpool__bstream *s, host_task *t, uint64_t *position) {
    host_queue *q = s->q;
    cpool__mutex_lock(&q->mu);
    host_capture *c = cpool__host_capture_of(s);
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

cpool_status cpool__host_event_record(cpool__bevent *ev, cpool__bstream *s) {
    host_queue *q = s->q;
    uint64_t position = 0; /* set on every path to the record (gcc -O2 cannot tell) */
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
        host_capture *c = cpool__host_capture_of(s);
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
cpool_status cpool__host_user_event_record(cpool__bevent *ev, cpool__bstream *s) {
    cpool__mutex_lock(&s->q->mu);
    host_capture *c = cpool__host_capture_of(s);
    if (!c) {
        cpool__mutex_unlock(&s->q->mu);
        return cpool__host_event_record(ev, s);
    }
    node_set marks = {0};
    bool ok = cpool__host_set_add_all(&marks, &c->members[s->member].tail);
    if (ok) atomic_fetch_add(&c->refs, 1);
    cpool__mutex_unlock(&c->mu);
    cpool__mutex_unlock(&s->q->mu);
    if (!ok) {
        cpool__host_set_free(&marks);
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
    host_capture *c = cpool__host_capture_of(s); /* its lock held */
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
        } else if (!cpool__grow((void **)&ec->members, &ec->member_cap, sizeof *ec->members, ec->member_count + 1, 4)) {
            st = cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory joining a capture");
        } else { /* a fork: s joins the capture with nothing to wait for yet */
            s->member = ec->member_count++;
            ec->members[s->member] = (host_member){.s = s};
            joined = true;
        }
    }
    if (st == CPOOL_OK && ec) {
        cpool__mutex_lock(&ev->mu);
        bool ok = ev->capture == ec && cpool__host_set_add_all(&c->members[s->member].tail, &ev->marks);
        bool rerecorded = ev->capture != ec;
        cpool__mutex_unlock(&ev->mu);
        if (rerecorded)
            st = cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "the event was recorded again meanwhile");
        else if (!ok)
            st = cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory waiting for an event in a capture");
        if (st != CPOOL_OK && joined) { /* as before the call */
            cpool__host_set_free(&ec->members[s->member].tail);
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

cpool_status cpool__host_stream_wait_event(cpool__bstream *s, cpool__bevent *ev) {
    cpool__mutex_lock(&ev->mu);
    host_capture *ec = ev->capture;
    if (ec) atomic_fetch_add(&ec->refs, 1);
    cpool__mutex_unlock(&ev->mu);
    if (ec || cpool__host_captures(s)) {
        cpool_status st = wait_in_capture(s, ev, ec);
        cpool__host_capture_release(ec);
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
    uint64_t position = 0; /* the wait needs no mark of its own */
    cpool_status st = enqueue_uncaptured(s, t, &position);
    if (st != CPOOL_OK) {
        queue_release(m.q);
        free(t);
        return cpool__fail(st, "cannot wait for an event on a capturing stream");
    }
    return CPOOL_OK;
}

cpool_status cpool__host_stream_fork(cpool__bstream *s, cpool__bevent *fence, cpool__bevent *ev) {
    cpool__mutex_lock(&s->q->mu);
    uint64_t position = s->q->enqueued;
    cpool__mutex_unlock(&s->q->mu);
    atomic_fetch_add(&s->q->refs, 1);
    record_set(fence, s->q, position, NULL, NULL, (node_set){0});
    return cpool__host_stream_wait_event(s, ev);
}

cpool_status cpool__host_event_elapsed_ms(cpool__bevent *start, cpool__bevent *end, float *ms) {
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

bool cpool__host_event_done(cpool__bevent *ev) {
    cpool__mutex_lock(&ev->mu);
    bool done = !ev->q || atomic_load(&ev->q->completed) >= ev->position;
    cpool__mutex_unlock(&ev->mu);
    return done;
}

cpool_status cpool__host_event_synchronize(cpool__bevent *ev) {
    host_mark m = mark_take(ev);
    if (m.q) cpool__host_queue_wait(m.q, m.position);
    mark_release(&m);
    return CPOOL_OK;
}

/* ---- capture ------------------------------------------------------------- */

/* The check, the fence's position and the capture's start are one step
 * under the queue's lock: an end of a capture on another thread (which
 * changes s->capture under that lock) cannot fall in between. */
cpool_status cpool__host_capture_begin(cpool__bstream *s, cpool_capture_mode mode, cpool__bevent *fence) {
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
    host_capture *other = cpool__host_capture_of(s);
    if (other) cpool__mutex_unlock(&other->mu);
    uint64_t position = q->enqueued;
    if (!other) {
        s->capture = c;
        s->member = 0;
    }
    cpool__mutex_unlock(&q->mu);
    if (other) {
        cpool__host_capture_release(c);
        return cpool__fail(CPOOL_ERR_ALREADY_CAPTURING, "the stream is already capturing");
    }
    if (fence) { /* marks the work enqueued before the capture */
        atomic_fetch_add(&q->refs, 1);
        record_set(fence, q, position, NULL, NULL, (node_set){0});
    }
    return CPOOL_OK;
}

/* ---- graphs -------------------------------------------------------------- */

cpool_status cpool__host_graph_launch(cpool__bgraph *g, cpool__bstream *s) {
    atomic_fetch_add(&g->refs, 1);
    host_op op = {.kind = OP_GRAPH, .graph = g};
    cpool_status st = enqueue(s, &op);
    if (st != CPOOL_OK) cpool__host_graph_release(g);
    return st;
}
