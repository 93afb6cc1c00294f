/*
 * ops_events.c: the fuzz_api harness's events (declared in ops.h): create
 * and destroy, records and stream waits (on capturing streams too),
 * queries, synchronizes and elapsed times checked against the model, and
 * the calls with dead events and streams; destroy_events at the end of an
 * input.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "capturepool.h"
#include "model.h"
#include "ops.h"
#include "ops_internal.h"

/* ---- operations: events ------------------------------------------------------------ */

/* A live event's slot for byte b, or -1. */
static int pick_event(uint8_t b) {
    for (int k = 0; k < NEVENT; k++)
        if (E[(b + k) % NEVENT].e) return (b + k) % NEVENT;
    return -1;
}

/* A dead event handle for byte b, or NULL. */
static cpool_event *pick_dead_event(uint8_t b) {
    unsigned n = ndead_events;
    if (!n) return NULL;
    return dead_events[(n - 1 - b % (n < NDEAD ? n : NDEAD)) % NDEAD];
}

/* Byte b's dead stream handle, or NULL. */
static cpool_stream *pick_dead_stream(uint8_t b) {
    unsigned n = ndead_streams;
    if (!n) return NULL;
    return dead_streams[(n - 1 - b % (n < NDEAD ? n : NDEAD)) % NDEAD];
}

/* The model's reading of event ei: true while a closed gate holds back the
 * work before its record (it cannot be complete). */
static bool event_held(int ei) {
    const mevent *m = &E[ei];
    if (!m->recorded || m->complete) return false;
    bool held = false;
    pthread_mutex_lock(&gate_mu);
    for (int x = 0; x < NS; x++)
        if (gate_opened[x] < m->gates[x]) held = true;
    pthread_mutex_unlock(&gate_mu);
    return held;
}

/* The work before event ei's record has run, as far as the model counts it. */
static void check_event_work_ran(int ei, const char *what) {
    const mevent *m = &E[ei];
    if (!m->recorded) return;
    for (int x = 0; x < NS; x++)
        if (atomic_load(&done[x]) < m->marks[x])
            fail("%s: event %d (recorded on stream %d) is complete, but stream %d ran %llu of the %llu tasks before "
                 "its record",
                 what, ei, m->stream, x, (unsigned long long)atomic_load(&done[x]), (unsigned long long)m->marks[x]);
}

/* A query, checked against the model: OK when never recorded or known
 * complete, NOT_READY while a gate holds its work back, else either (and OK
 * only once that work ran). */
static void query_event(int ei, const char *what) {
    cpool_status st = cpool_event_query(E[ei].e);
    if (E[ei].cap_id) { /* a captured record marks no stream work */
        check_status(st, CPOOL_ERR_INVALID_ARGUMENT, what, true);
        return;
    }
    if (!E[ei].recorded || E[ei].complete)
        check_status(st, CPOOL_OK, what, true);
    else if (event_held(ei))
        check_status(st, CPOOL_ERR_NOT_READY, what, true);
    else
        expect_one_of(st, CPOOL_OK, CPOOL_ERR_NOT_READY, what);
    if (st == CPOOL_OK) check_event_work_ran(ei, what);
}

void op_event_create(rd *r) {
    uint8_t v = u8(r);
    int ei = -1;
    for (int k = 0; k < NEVENT && ei < 0; k++)
        if (!E[(v + k) % NEVENT].e) ei = (v + k) % NEVENT;
    if (v % 8 == 7) {
        cpool_event *e = (cpool_event *)&ei;
        EXPECT(cpool_event_create(NULL, &e), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_event_create(dev, NULL), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    }
    if (ei < 0) return;
    TRACE("event create %d\n", ei);
    cpool_event *e = NULL;
    EXPECT_OK(cpool_event_create(dev, &e));
    if (!e) fail("cpool_event_create succeeded with a NULL event");
    memset(&E[ei], 0, sizeof E[ei]);
    E[ei].e = e;
    E[ei].complete = true;
    E[ei].stream = -1;
    query_event(ei, "cpool_event_query of an event never recorded");
}

void op_event_destroy(rd *r) {
    uint8_t v = u8(r), b = u8(r);
    if (v % 4 == 3) { /* a dead one: refused with a reason, nothing else happens */
        cpool_event *h = pick_dead_event(b);
        if (!h) return;
        TRACE("event destroy of dead handle %p\n", (void *)h);
        EXPECT_REASON(cpool_event_destroy(h));
        EXPECT_DEAD(cpool_event_query(h));
        return;
    }
    if (v % 4 == 2) {
        cpool_event_destroy(NULL); /* a no-op */
        return;
    }
    int ei = pick_event(b);
    if (ei < 0) return;
    TRACE("event destroy %d%s\n", ei, E[ei].recorded && !E[ei].complete ? " (maybe pending)" : "");
    cpool_event *h = E[ei].e;
    cpool_event_destroy(h);
    memset(&E[ei], 0, sizeof E[ei]);
    push_dead(dead_events, &ndead_events, h);
    EXPECT_DEAD(cpool_event_query(h));
}

void op_event_record(rd *r, int s) {
    uint8_t v = u8(r), b = u8(r);
    if (v % 8 == 7) { /* a dead event, or a dead stream */
        cpool_event *h = pick_dead_event(b);
        cpool_stream *ds = pick_dead_stream(b);
        int ei = pick_event(b);
        TRACE("event record with dead handles\n");
        if (h) EXPECT_DEAD(cpool_event_record(h, S[s]));
        if (ds && ei >= 0) {
            EXPECT_DEAD(cpool_event_record(E[ei].e, ds));
            query_event(ei, "cpool_event_query after a record on a dead stream was refused");
        }
        EXPECT(cpool_event_record(NULL, S[s]), CPOOL_ERR_INVALID_ARGUMENT);
        if (ei >= 0) EXPECT(cpool_event_record(E[ei].e, NULL), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    }
    int ei = pick_event(b);
    if (ei < 0) return;
    mevent *m = &E[ei];
    if (C[s].active) {
        TRACE("event record %d on capturing stream %d (into the capture)\n", ei, s);
        cpool_status st = cpool_event_record(m->e, S[s]);
        if (C[s].invalidated)
            expect_one_of(st, CPOOL_OK, CPOOL_ERR_CAPTURE_INVALIDATED, "cpool_event_record in an invalidated capture");
        else
            check_status(st, CPOOL_OK, "cpool_event_record on a capturing stream", true);
        if (st == CPOOL_OK) {
            m->recorded = true;
            m->cap_id = C[s].id;
            m->stream = s;
        }
        query_event(ei, "cpool_event_query after a record on a capturing stream");
        return;
    }
    TRACE("event record %d on stream %d\n", ei, s);
    EXPECT_OK(cpool_event_record(m->e, S[s]));
    m->cap_id = 0;
    m->recorded = true;
    m->complete = false;
    m->stream = s;
    pthread_mutex_lock(&gate_mu);
    for (int x = 0; x < NS; x++) {
        m->gates[x] = x == s ? gate_closed[s] : dep_gate[s][x];
        m->marks[x] = x == s ? enq[s] : dep_mark[s][x];
    }
    pthread_mutex_unlock(&gate_mu);
    if (v & 8) query_event(ei, "cpool_event_query right after the record");
}

/* A marker behind a wait: the work before the event's record on the fixed
 * streams has run (the temporary stream's counters may start again). */
typedef struct wait_check {
    int stream, ev;
    uint64_t marks[NFIXED];
} wait_check;

static void fn_wait_check(void *arg) {
    in_host++;
    wait_check *w = arg;
    for (int x = 0; x < NFIXED; x++)
        if (atomic_load(&done[x]) < w->marks[x])
            fail("work enqueued on stream %d after cpool_stream_wait_event (event %d) ran before stream %d's work "
                 "before the record (%llu of %llu tasks done)",
                 w->stream, w->ev, x, (unsigned long long)atomic_load(&done[x]), (unsigned long long)w->marks[x]);
    int s = w->stream;
    free(w);
    atomic_fetch_add(&done[s], 1);
    in_host--;
}

void op_event_wait(rd *r, int s) {
    uint8_t v = u8(r), b = u8(r);
    if (v % 8 == 7) {
        cpool_event *h = pick_dead_event(b);
        cpool_stream *ds = pick_dead_stream(b);
        int ei = pick_event(b);
        TRACE("stream wait event with dead handles\n");
        if (h) EXPECT_DEAD(cpool_stream_wait_event(S[s], h));
        if (ds && ei >= 0) EXPECT_DEAD(cpool_stream_wait_event(ds, E[ei].e));
        EXPECT(cpool_stream_wait_event(S[s], NULL), CPOOL_ERR_INVALID_ARGUMENT);
        if (ei >= 0) EXPECT(cpool_stream_wait_event(NULL, E[ei].e), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    }
    int ei = pick_event(b);
    if (ei < 0) return;
    mevent *m = &E[ei];
    if (m->cap_id) {
        const mcapture *c = &C[m->stream];
        bool live = c->active && c->id == m->cap_id;
        if (live && !C[s].active) return; /* it would fork s: op_fork does that, with the model told */
        TRACE("stream %d waits for event %d, recorded in a capture on %d%s\n", s, ei, m->stream,
              live ? "" : " (ended)");
        cpool_status st = cpool_stream_wait_event(S[s], m->e);
        if (live && s == m->stream && c->invalidated)
            expect_one_of(st, CPOOL_OK, CPOOL_ERR_CAPTURE_INVALIDATED, "cpool_stream_wait_event in an invalidated capture");
        else if (live && s == m->stream)
            check_status(st, CPOOL_OK, "cpool_stream_wait_event for its own capture's record", true);
        else /* another capture's record, or one of a capture that ended */
            check_status(st, CPOOL_ERR_INVALID_ARGUMENT, "cpool_stream_wait_event for another capture's record", true);
        return;
    }
    if (C[s].active) {
        TRACE("stream %d (capturing) waits for event %d, recorded outside any capture\n", s, ei);
        check_status(cpool_stream_wait_event(S[s], m->e), m->recorded ? CPOOL_ERR_INVALID_ARGUMENT : CPOOL_OK,
                     "cpool_stream_wait_event on a capturing stream for an event recorded outside it", true);
        return;
    }
    TRACE("stream %d waits for event %d (recorded on %d)\n", s, ei, m->recorded ? m->stream : -1);
    EXPECT_OK(cpool_stream_wait_event(S[s], m->e));
    if (m->recorded)
        for (int x = 0; x < NS; x++) {
            if (m->gates[x] > dep_gate[s][x]) dep_gate[s][x] = m->gates[x];
            if (m->marks[x] > dep_mark[s][x]) dep_mark[s][x] = m->marks[x];
        }
    if (!(v & 8)) {
        wait_check *w = calloc(1, sizeof *w);
        if (!w) abort();
        w->stream = s;
        w->ev = ei;
        if (m->recorded)
            for (int x = 0; x < NFIXED; x++) w->marks[x] = m->marks[x];
        EXPECT_OK(cpool_launch_host(S[s], fn_wait_check, w));
        enq[s]++;
    }
}

void op_event_query(rd *r) {
    uint8_t v = u8(r), b = u8(r);
    if (v % 8 == 7) {
        cpool_event *h = pick_dead_event(b);
        if (h) EXPECT_DEAD(cpool_event_query(h));
        EXPECT(cpool_event_query(NULL), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    }
    int ei = pick_event(b);
    if (ei < 0) return;
    TRACE("event query %d%s\n", ei, event_held(ei) ? " (held back by a gate)" : "");
    query_event(ei, "cpool_event_query");
}

void op_event_sync(rd *r) {
    uint8_t v = u8(r), b = u8(r);
    if (v % 8 == 7) {
        cpool_event *h = pick_dead_event(b);
        if (h) EXPECT_DEAD(cpool_event_synchronize(h));
        EXPECT(cpool_event_synchronize(NULL), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    }
    int ei = pick_event(b);
    if (ei < 0) return;
    TRACE("event synchronize %d\n", ei);
    if (E[ei].cap_id) {
        EXPECT(cpool_event_synchronize(E[ei].e), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    }
    before_blocking();
    EXPECT_OK(cpool_event_synchronize(E[ei].e));
    check_event_work_ran(ei, "cpool_event_synchronize");
    if (E[ei].recorded) E[ei].complete = true;
    query_event(ei, "cpool_event_query after cpool_event_synchronize");
}

void op_event_elapsed(rd *r) {
    uint8_t v = u8(r), b = u8(r), c = u8(r);
    float ms = -1.0f;
    if (v % 8 == 7) {
        cpool_event *h = pick_dead_event(b);
        int ei = pick_event(c);
        if (h) EXPECT_DEAD(cpool_event_elapsed_ms(h, ei >= 0 ? E[ei].e : h, &ms));
        if (h && ei >= 0) EXPECT_DEAD(cpool_event_elapsed_ms(E[ei].e, h, &ms));
        EXPECT(cpool_event_elapsed_ms(NULL, NULL, &ms), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    }
    int a = pick_event(b), z = pick_event(c);
    if (a < 0 || z < 0) return;
    TRACE("event elapsed %d -> %d\n", a, z);
    cpool_status st = cpool_event_elapsed_ms(E[a].e, E[z].e, &ms);
    const char *what = "cpool_event_elapsed_ms";
    if (E[a].cap_id || E[z].cap_id)
        check_status(st, CPOOL_ERR_INVALID_ARGUMENT, "cpool_event_elapsed_ms with a captured record", true);
    else if (!E[a].recorded || !E[z].recorded)
        check_status(st, CPOOL_ERR_INVALID_ARGUMENT, "cpool_event_elapsed_ms with an event never recorded", true);
    else if (E[a].complete && E[z].complete)
        check_status(st, CPOOL_OK, "cpool_event_elapsed_ms of two complete records", true);
    else if (event_held(a) || event_held(z))
        check_status(st, CPOOL_ERR_NOT_READY, "cpool_event_elapsed_ms with a record held back by a gate", true);
    else
        expect_one_of(st, CPOOL_OK, CPOOL_ERR_NOT_READY, what);
    if (st == CPOOL_OK) {
        check_event_work_ran(a, what);
        check_event_work_ran(z, what);
        if (ms != ms) fail("cpool_event_elapsed_ms returned NaN");
        if (a == z && ms != 0.0f) fail("cpool_event_elapsed_ms of an event to itself is %f ms, not 0", (double)ms);
    }
}


/* The end of an input: every event destroyed, some perhaps still pending. */
void destroy_events(void) {
    for (int ei = 0; ei < NEVENT; ei++)
        if (E[ei].e) {
            cpool_event_destroy(E[ei].e);
            push_dead(dead_events, &ndead_events, E[ei].e);
            memset(&E[ei], 0, sizeof E[ei]);
        }
}
