/*
 * Stream order (see order.h for the structures): the device's streams,
 * quiesce, capture fences, and a pool's fences.
 */
#include <stdlib.h>

#include "fault.h"
#include "order.h"
#include "status.h"
#include "stream_order.h"

/* ---- shared events ------------------------------------------------------- */

struct cpool__shared_event {
    atomic_int refs;
    const cpool__backend *be;
    cpool__bevent *event;
};

/* A new shared event with one reference. */
static cpool_status shared_event_new(const cpool__backend *be, cpool__bdevice *dev, cpool__shared_event **out) {
    cpool__shared_event *f = cpool__calloc(1, sizeof *f);
    if (!f) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory creating an event");
    cpool_status st = be->event_create(dev, &f->event);
    if (st != CPOOL_OK) {
        free(f);
        return st;
    }
    atomic_init(&f->refs, 1);
    f->be = be;
    *out = f;
    return CPOOL_OK;
}

static void shared_event_release(cpool__shared_event *e) {
    if (!e || atomic_fetch_sub(&e->refs, 1) != 1) return;
    e->be->event_destroy(e->event);
    free(e);
}

/* ---- a device's streams -------------------------------------------------- */

void cpool__order_init(cpool__order *o, const cpool__backend *be, cpool__bdevice *dev) {
    cpool__mutex_init(&o->mu, CPOOL__RANK_STREAMS);
    o->be = be;
    o->dev = dev;
    o->streams = NULL;
}

void cpool__order_destroy(cpool__order *o) { cpool__mutex_destroy(&o->mu); }

void cpool__order_add(cpool__order *o, cpool__order_stream *s, cpool__bstream *impl) {
    static _Atomic uint64_t next_id = 1;
    s->id = atomic_fetch_add(&next_id, 1); /* never reused, unlike addresses */
    s->impl = impl;
    atomic_init(&s->capture, NULL);
    s->capture_fence = NULL;
    cpool__deps_init(&s->deps);
    cpool__mutex_lock(&o->mu);
    s->prev = NULL;
    s->next = o->streams;
    if (o->streams) o->streams->prev = s;
    o->streams = s;
    cpool__mutex_unlock(&o->mu);
}

void cpool__order_remove(cpool__order *o, cpool__order_stream *s) {
    /* Listed until its work is over: a quiesce or a fence on another thread
     * meanwhile still sees it and waits for that work. A stream forked into
     * a capture that goes on cannot be synchronized (the attempt invalidates
     * the capture, as its destroy must): the work it has to run is what its
     * fence marks. */
    cpool__error_mark before;
    cpool__error_save(&before);
    if (o->be->stream_synchronize(s->impl) != CPOOL_OK && s->capture_fence)
        o->be->event_synchronize(s->capture_fence->event);
    cpool__error_restore(&before);
    cpool__mutex_lock(&o->mu);
    if (s->prev)
        s->prev->next = s->next;
    else
        o->streams = s->next;
    if (s->next) s->next->prev = s->prev;
    cpool__mutex_unlock(&o->mu);
    shared_event_release(s->capture_fence);
    s->capture_fence = NULL;
}

/* Under the order's lock: a fence of the work s has enqueued so far, in
 * *out (a reference): a new event at its end, or, while it captures, the
 * event recorded when its capture began. On failure *out is NULL and the
 * status says why: CPOOL_ERR_UNSUPPORTED when the stream captures (its
 * capture may be just beginning or ending on another thread) without a
 * fence. */
static cpool_status stream_fence(cpool__order *o, cpool__order_stream *s, cpool__shared_event **out) {
    cpool_status st = CPOOL_ERR_UNSUPPORTED;
    *out = NULL;
    if (!cpool__order_capture(s)) {
        st = shared_event_new(o->be, o->dev, out);
        if (st == CPOOL_OK) st = o->be->event_record((*out)->event, s->impl);
        if (st == CPOOL_OK) return st;
        shared_event_release(*out);
        *out = NULL;
        if (st != CPOOL_ERR_UNSUPPORTED) return st;
    }
    if (!s->capture_fence) return st;
    *out = s->capture_fence;
    atomic_fetch_add(&(*out)->refs, 1);
    return CPOOL_OK;
}

static cpool_status order_quiesce(cpool__order *o) {
    const cpool__backend *be = o->be;
    cpool_status result = CPOOL_OK;
    cpool__mutex_lock(&o->mu);
    size_t count = 0;
    for (cpool__order_stream *s = o->streams; s; s = s->next) count++;
    /* One fence a stream: a new event at its end, or, while it captures,
     * the event recorded when its capture began. */
    cpool__shared_event **fences = count ? cpool__calloc(count, sizeof *fences) : NULL;
    size_t n = 0;
    for (cpool__order_stream *s = o->streams; s; s = s->next) {
        cpool__shared_event *f = NULL;
        cpool_status st = stream_fence(o, s, &f);
        if (st != CPOOL_OK && st != CPOOL_ERR_UNSUPPORTED) {
            /* No event to be had: wait for the stream in place, unless
             * that would break a capture. */
            cpool_capture_state state = CPOOL_CAPTURE_ACTIVE;
            if (be->capture_status(s->impl, &state) == CPOOL_OK && state == CPOOL_CAPTURE_NONE) {
                st = be->stream_synchronize(s->impl);
                if (st != CPOOL_OK && result == CPOOL_OK) result = st;
            }
        }
        if (f && fences) {
            fences[n++] = f;
        } else if (f) { /* no room to wait later: wait now */
            st = be->event_synchronize(f->event);
            if (st != CPOOL_OK && result == CPOOL_OK) result = st;
            shared_event_release(f);
        }
    }
    cpool__mutex_unlock(&o->mu);
    for (size_t i = 0; i < n; i++) {
        cpool_status st = be->event_synchronize(fences[i]->event);
        if (st != CPOOL_OK && result == CPOOL_OK) result = st;
        shared_event_release(fences[i]);
    }
    free(fences);
    return result;
}

cpool_status cpool__order_quiesce(cpool__order *o) {
    cpool__error_mark before;
    cpool__error_save(&before);
    cpool_status st = order_quiesce(o);
    if (st == CPOOL_OK) cpool__error_restore(&before);
    return st;
}

/* ---- marks of the device's work -------------------------------------------- */

struct cpool__order_mark {
    size_t count; /* events not seen complete yet, first */
    cpool__shared_event *events[];
};

cpool__order_mark *cpool__order_mark_now(cpool__order *o) {
    cpool__error_mark before;
    cpool__error_save(&before);
    cpool__mutex_lock(&o->mu);
    size_t count = 0;
    for (cpool__order_stream *s = o->streams; s; s = s->next) count++;
    cpool__order_mark *m = cpool__malloc(sizeof *m + count * sizeof m->events[0]);
    bool whole = m != NULL;
    if (m) m->count = 0;
    for (cpool__order_stream *s = o->streams; s && whole; s = s->next) {
        whole = stream_fence(o, s, &m->events[m->count]) == CPOOL_OK;
        if (whole) m->count++;
    }
    cpool__mutex_unlock(&o->mu);
    cpool__error_restore(&before);
    if (whole) return m;
    cpool__order_mark_release(m);
    return NULL;
}

bool cpool__order_mark_done(cpool__order_mark *m) {
    while (m->count && m->events[m->count - 1]->be->event_done(m->events[m->count - 1]->event))
        shared_event_release(m->events[--m->count]);
    return m->count == 0;
}

void cpool__order_mark_release(cpool__order_mark *m) {
    if (!m) return;
    while (m->count) shared_event_release(m->events[--m->count]);
    free(m);
}

typedef enum fence_result {
    FENCE_RECORDED, /* ev now marks the stream's current end */
    FENCE_CAPTURE,  /* the stream captures: *shared, its capture's fence, marks its work from before */
    FENCE_GONE,     /* the stream was destroyed, after its work had finished */
    FENCE_BUSY      /* the stream failed, or its capture has no fence: try again later */
} fence_result;

/* Records `ev` on the live stream with this id, or, where it captures (an
 * event recorded there would go into the capture), hands a reference to
 * the fence its capture began with: every block freed on it outside
 * capture was freed before that. */
static fence_result fence_stream(cpool__order *o, uint64_t stream_id, cpool__bevent *ev, cpool__shared_event **shared) {
    fence_result r = FENCE_GONE;
    cpool__mutex_lock(&o->mu);
    for (cpool__order_stream *s = o->streams; s; s = s->next) {
        if (s->id != stream_id) continue;
        if (cpool__order_capture(s)) {
            *shared = s->capture_fence;
            if (*shared) atomic_fetch_add(&(*shared)->refs, 1);
            r = *shared ? FENCE_CAPTURE : FENCE_BUSY;
        } else {
            r = o->be->event_record(ev, s->impl) == CPOOL_OK ? FENCE_RECORDED : FENCE_BUSY;
        }
        break;
    }
    cpool__mutex_unlock(&o->mu);
    return r;
}

/* ---- captures ------------------------------------------------------------ */

/* Makes s->capture_fence one that no quiesce holds, so that recording it
 * again is safe: the one the stream has, or a new one (the old goes to
 * *old_out, for release once the lock is dropped). Under the order's lock:
 * a quiesce takes a fence under that lock, so one found unshared here stays
 * unshared until the capture that records it has begun. */
static cpool_status unshared_fence(cpool__order *o, cpool__order_stream *s, cpool__shared_event **old_out) {
    cpool__shared_event *f = s->capture_fence;
    if (f && atomic_load(&f->refs) == 1) return CPOOL_OK;
    cpool__shared_event *fresh = NULL;
    cpool_status st = shared_event_new(o->be, o->dev, &fresh);
    if (st != CPOOL_OK) return st;
    *old_out = f;
    s->capture_fence = fresh;
    return CPOOL_OK;
}

cpool_status cpool__order_begin_capture(cpool__order *o, cpool__order_stream *s, cpool_capture_mode mode,
                                        void *(*install)(void *arg), void *arg) {
    /* Under the lock: a quiesce or a fence on another thread checks whether
     * a stream captures and records an event on it under that lock, and
     * must not see the capture begin in between; and of two begins racing
     * on one stream, only the one that finds none installs its record. */
    cpool__shared_event *old = NULL;
    cpool__mutex_lock(&o->mu);
    cpool_status st = cpool__order_capture(s) ? cpool__fail(CPOOL_ERR_ALREADY_CAPTURING, "the stream is already capturing")
                                              : unshared_fence(o, s, &old);
    if (st == CPOOL_OK) st = o->be->capture_begin(s->impl, mode, s->capture_fence->event);
    if (st == CPOOL_OK) atomic_store_explicit(&s->capture, install(arg), memory_order_release);
    cpool__mutex_unlock(&o->mu);
    shared_event_release(old);
    return st;
}

cpool_status cpool__order_attach_capture(cpool__order *o, cpool__order_stream *s, void *(*install)(void *arg),
                                         void *arg) {
    cpool__shared_event *old = NULL;
    cpool_capture_state state = CPOOL_CAPTURE_NONE;
    cpool__mutex_lock(&o->mu);
    cpool_status st = cpool__order_capture(s) ? cpool__fail(CPOOL_ERR_ALREADY_CAPTURING, "the stream is already capturing")
                                              : o->be->capture_status(s->impl, &state);
    if (st == CPOOL_OK && state == CPOOL_CAPTURE_NONE)
        st = cpool__fail(CPOOL_ERR_NOT_CAPTURING, "the stream is not capturing");
    else if (st == CPOOL_OK && state != CPOOL_CAPTURE_ACTIVE)
        st = cpool__fail(CPOOL_ERR_CAPTURE_INVALIDATED, "the stream's capture was invalidated");
    if (st == CPOOL_OK) {
        /* It marks work from before an earlier capture: a quiesce waiting
         * on it would miss the work enqueued since. */
        old = s->capture_fence;
        s->capture_fence = NULL;
        atomic_store_explicit(&s->capture, install(arg), memory_order_release);
    }
    cpool__mutex_unlock(&o->mu);
    shared_event_release(old);
    return st;
}

cpool_status cpool__order_join_capture(cpool__order *o, cpool__order_stream *s, void *capture, cpool__bevent *ev) {
    /* As a begin: the fence marks the stream's work from before it joined,
     * and goes in, with the join, atomically for quiesces and fences. */
    cpool__shared_event *old = NULL;
    cpool__mutex_lock(&o->mu);
    cpool_status st = cpool__order_capture(s) ? cpool__fail(CPOOL_ERR_ALREADY_CAPTURING, "the stream is already capturing")
                                              : unshared_fence(o, s, &old);
    if (st == CPOOL_OK) st = o->be->stream_fork(s->impl, s->capture_fence->event, ev);
    if (st == CPOOL_OK) atomic_store_explicit(&s->capture, capture, memory_order_release);
    cpool__mutex_unlock(&o->mu);
    shared_event_release(old);
    return st;
}

/* No lock here, unlike the begin: a quiesce that still sees the capture
 * waits on its fence, which marks all of the stream's work that will have
 * run by the end; one that sees none asks the backend, which still captures
 * or not. The record is written again only by a begin that saw NULL. */
void cpool__order_end_capture(cpool__order_stream *s) { atomic_store_explicit(&s->capture, NULL, memory_order_release); }

/* ---- a pool's fences ----------------------------------------------------- */

/* Blocks freed on `stream` up to `upto` wait for `event`: one of the pool's
 * own, or (`shared`) the fence a capture on that stream began with. */
struct cpool__fence {
    uint64_t stream;
    uint64_t upto;
    cpool__bevent *event;
    cpool__shared_event *shared;
};

static cpool__bevent *event_take(cpool__fences *f, cpool__order *o) {
    if (f->spare_count) return f->spare[--f->spare_count];
    cpool__bevent *ev = NULL;
    if (o->be->event_create(o->dev, &ev) != CPOOL_OK) return NULL;
    return ev;
}

static void event_give(cpool__fences *f, cpool__order *o, cpool__bevent *ev) {
    if (cpool__grow((void **)&f->spare, &f->spare_cap, sizeof *f->spare, f->spare_count + 1, 8))
        f->spare[f->spare_count++] = ev;
    else
        o->be->event_destroy(ev);
}

static void unfence_each(const cpool__fenced *a, uint64_t stream, uint64_t upto) {
    for (size_t k = 0; k < a->count; k++) cpool__allocator_unfence(a->list[k], stream, upto);
}

void cpool__fences_poll(cpool__fences *f, cpool__order *o, const cpool__fenced *a) {
    size_t kept = 0;
    for (size_t i = 0; i < f->count; i++) {
        cpool__fence x = f->list[i];
        if (o->be->event_done(x.shared ? x.shared->event : x.event)) {
            unfence_each(a, x.stream, x.upto);
            if (x.shared)
                shared_event_release(x.shared);
            else
                event_give(f, o, x.event);
        } else {
            f->list[kept++] = x;
        }
    }
    f->count = kept;
}

void cpool__fences_add(cpool__fences *f, cpool__order *o, const cpool__fenced *a) {
    enum { MAX_STREAMS = 64 };
    uint64_t streams[MAX_STREAMS], seqs[MAX_STREAMS];
    /* Frees from now on are numbered after every block a fence here covers. */
    (void)cpool__free_clock_tick();
    size_t n = 0;
    for (size_t k = 0; k < a->count; k++)
        n = cpool__allocator_restricted_streams(a->list[k], streams, seqs, n, MAX_STREAMS);
    for (size_t i = 0; i < n; i++) {
        bool covered = false;
        for (size_t k = 0; k < f->count; k++)
            if (f->list[k].stream == streams[i] && f->list[k].upto >= seqs[i]) covered = true;
        if (covered) continue;
        if (!cpool__grow((void **)&f->list, &f->cap, sizeof *f->list, f->count + 1, 8)) return;
        cpool__bevent *ev = event_take(f, o);
        if (!ev) return;
        cpool__shared_event *shared = NULL;
        switch (fence_stream(o, streams[i], ev, &shared)) {
        case FENCE_RECORDED:
            f->list[f->count++] = (cpool__fence){.stream = streams[i], .upto = seqs[i], .event = ev};
            break;
        case FENCE_CAPTURE:
            f->list[f->count++] = (cpool__fence){.stream = streams[i], .upto = seqs[i], .shared = shared};
            event_give(f, o, ev);
            break;
        case FENCE_GONE: /* a stream leaves the list only once its work is over */
            unfence_each(a, streams[i], UINT64_MAX);
            event_give(f, o, ev);
            break;
        case FENCE_BUSY:
            event_give(f, o, ev);
            break;
        }
    }
}

void cpool__fences_destroy(cpool__fences *f, cpool__order *o) {
    for (size_t i = 0; i < f->count; i++) {
        if (f->list[i].shared)
            shared_event_release(f->list[i].shared);
        else
            o->be->event_destroy(f->list[i].event);
    }
    for (size_t i = 0; i < f->spare_count; i++) o->be->event_destroy(f->spare[i]);
    free(f->list);
    free(f->spare);
}
