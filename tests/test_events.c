/* Events, on every backend: a record marks the stream's end; query and
 * synchronize see the work before it finish; a wait orders another stream
 * after it; two completed records give elapsed time; an event never
 * recorded is complete; a destroyed event is a dead handle, and one
 * destroyed while pending keeps the waits already enqueued on it; inside a
 * callback a synchronize is refused; a block freed before a record serves a
 * stream that waited for it at once; in a capture, a record waited for by
 * another stream forks it into the capture (test_multistream.c has the
 * rest), a capture's record cannot be queried, and a capturing stream
 * cannot wait for a record made outside it. */
#include "check.h"
#include "helpers.h"

enum { SLOW_MS = 100 };

/* A callback that notes the value of a flag when it runs. */
typedef struct seen {
    const int *flag;
    int value;
    int ran;
} seen;
static void cb_see(void *arg) {
    seen *x = (seen *)arg;
    x->value = aload(x->flag);
    astore(&x->ran, 1);
}

static void record_query_synchronize(cpool_device *dev) {
    static int flag;
    static sleep_set slow;
    cpool_stream *s = NULL;
    cpool_event *e = NULL;
    astore(&flag, 0);
    slow = (sleep_set){SLOW_MS, &flag, 1};
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_event_create(dev, &e));
    CHECK_OK(cpool_launch_host(s, cb_sleep_set, &slow));
    CHECK_OK(cpool_event_record(e, s));
    CHECK_STATUS(cpool_event_query(e), CPOOL_ERR_NOT_READY);
    CHECK_OK(cpool_event_synchronize(e));
    CHECK_EQ(aload(&flag), 1);
    CHECK_OK(cpool_event_query(e));
    cpool_event_destroy(e);
    cpool_stream_destroy(s);
}

static void never_recorded_is_complete(cpool_device *dev) {
    static int flag;
    static seen after;
    cpool_stream *s = NULL;
    cpool_event *e = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_event_create(dev, &e));
    CHECK_OK(cpool_event_query(e));
    CHECK_OK(cpool_event_synchronize(e));
    CHECK_OK(cpool_stream_wait_event(s, e)); /* nothing to wait for */
    astore(&flag, 7);
    after = (seen){&flag, 0, 0};
    CHECK_OK(cpool_launch_host(s, cb_see, &after));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&after.ran), 1);
    cpool_event_destroy(e);
    cpool_stream_destroy(s);
}

/* Work on b after a wait for a's record runs after a's work before it. */
static void wait_orders_another_stream(cpool_device *dev) {
    static int flag;
    static sleep_set slow;
    static seen on_b;
    cpool_stream *a = NULL, *b = NULL;
    cpool_event *e = NULL;
    astore(&flag, 0);
    slow = (sleep_set){SLOW_MS, &flag, 1};
    on_b = (seen){&flag, -1, 0};
    REQUIRE_OK(cpool_stream_create(dev, &a));
    REQUIRE_OK(cpool_stream_create(dev, &b));
    REQUIRE_OK(cpool_event_create(dev, &e));
    CHECK_OK(cpool_launch_host(a, cb_sleep_set, &slow));
    CHECK_OK(cpool_event_record(e, a));
    CHECK_OK(cpool_stream_wait_event(b, e));
    CHECK_OK(cpool_launch_host(b, cb_see, &on_b));
    CHECK_OK(cpool_stream_synchronize(b));
    CHECK_EQ(aload(&on_b.ran), 1);
    CHECK_EQ(on_b.value, 1); /* a's work had finished */
    cpool_event_destroy(e);
    cpool_stream_destroy(b);
    cpool_stream_destroy(a);
}

/* A wait enqueued before the event is destroyed still holds. */
static void destroyed_while_pending(cpool_device *dev) {
    static int flag;
    static sleep_set slow;
    static seen on_b;
    cpool_stream *a = NULL, *b = NULL;
    cpool_event *e = NULL, *fresh = NULL;
    astore(&flag, 0);
    slow = (sleep_set){SLOW_MS, &flag, 1};
    on_b = (seen){&flag, -1, 0};
    REQUIRE_OK(cpool_stream_create(dev, &a));
    REQUIRE_OK(cpool_stream_create(dev, &b));
    REQUIRE_OK(cpool_event_create(dev, &e));
    CHECK_OK(cpool_launch_host(a, cb_sleep_set, &slow));
    CHECK_OK(cpool_event_record(e, a));
    CHECK_OK(cpool_stream_wait_event(b, e));
    cpool_event_destroy(e); /* still pending */
    CHECK_OK(cpool_launch_host(b, cb_see, &on_b));
    CHECK_OK(cpool_stream_synchronize(b));
    CHECK_EQ(on_b.value, 1);
    /* The handle is dead, also once its memory went to a new event. */
    CHECK_STATUS(cpool_event_query(e), CPOOL_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(cpool_event_create(dev, &fresh));
    CHECK(fresh != e);
    CHECK_STATUS(cpool_event_record(e, a), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_event_synchronize(e), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(cpool_last_error()[0] != '\0');
    cpool_event_destroy(e); /* a second destroy does nothing */
    CHECK_OK(cpool_event_query(fresh));
    cpool_event_destroy(fresh);
    cpool_stream_destroy(b);
    cpool_stream_destroy(a);
}

static void elapsed_between_records(cpool_device *dev) {
    static int flag;
    static sleep_set slow;
    cpool_stream *s = NULL;
    cpool_event *start = NULL, *end = NULL;
    float ms = -1;
    astore(&flag, 0);
    slow = (sleep_set){SLOW_MS, &flag, 1};
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_event_create(dev, &start));
    REQUIRE_OK(cpool_event_create(dev, &end));
    CHECK_STATUS(cpool_event_elapsed_ms(start, end, &ms), CPOOL_ERR_INVALID_ARGUMENT); /* never recorded */
    CHECK_OK(cpool_event_record(start, s));
    CHECK_OK(cpool_launch_host(s, cb_sleep_set, &slow));
    CHECK_OK(cpool_event_record(end, s));
    CHECK_STATUS(cpool_event_elapsed_ms(start, end, &ms), CPOOL_ERR_NOT_READY);
    CHECK_OK(cpool_event_synchronize(end));
    CHECK_OK(cpool_event_elapsed_ms(start, end, &ms));
    /* The records enclose a 100 ms sleep: the time can only be longer. */
    CHECK(ms >= (float)SLOW_MS * 0.9f);
    cpool_event_destroy(start);
    cpool_event_destroy(end);
    cpool_stream_destroy(s);
}

typedef struct sync_in_callback {
    cpool_event *e;
    cpool_status st;
    int done;
} sync_in_callback;
static void cb_sync_event(void *arg) {
    sync_in_callback *x = (sync_in_callback *)arg;
    x->st = cpool_event_synchronize(x->e);
    astore(&x->done, 1);
}

/* Inside a callback a synchronize is refused at once: the event may mark
 * work of this very stream. */
static void synchronize_in_callback_refused(cpool_device *dev) {
    static sync_in_callback x;
    cpool_stream *s = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_event_create(dev, &x.e));
    x.st = CPOOL_OK;
    astore(&x.done, 0);
    CHECK_OK(cpool_event_record(x.e, s));
    CHECK_OK(cpool_launch_host(s, cb_sync_event, &x));
    CHECK_OK(cpool_event_record(x.e, s)); /* now after the callback: it would wait for itself */
    CHECK(wait_for_int(&x.done, 1, WAIT_TIMEOUT_MS));
    CHECK_EQ(x.st, CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_event_destroy(x.e);
    cpool_stream_destroy(s);
}

/* In a capture: a wait for a record made outside it is refused and changes
 * nothing; a record is a fork point (t waits for it and joins the capture)
 * that cannot be queried; the capture ends intact once t joined back. */
static void records_and_waits_in_a_capture(cpool_device *dev) {
    cpool_stream *s = NULL, *t = NULL;
    cpool_event *e = NULL, *back = NULL;
    cpool_graph *g = NULL;
    cpool_capture_state cs = CPOOL_CAPTURE_INVALIDATED;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &t));
    REQUIRE_OK(cpool_event_create(dev, &e));
    REQUIRE_OK(cpool_event_create(dev, &back));
    CHECK_OK(cpool_event_record(e, t));
    REQUIRE_OK(cpool_capture_begin(s, NULL, CPOOL_CAPTURE_GLOBAL));
    CHECK_STATUS(cpool_stream_wait_event(s, e), CPOOL_ERR_INVALID_ARGUMENT); /* recorded outside */
    CHECK_OK(cpool_event_record(e, s));
    CHECK_STATUS(cpool_event_query(e), CPOOL_ERR_INVALID_ARGUMENT); /* a capture's record */
    CHECK_OK(cpool_stream_wait_event(t, e));                        /* t joins the capture */
    CHECK_OK(cpool_capture_status(t, &cs));
    CHECK_EQ(cs, CPOOL_CAPTURE_ACTIVE);
    CHECK_OK(cpool_event_record(back, t));
    CHECK_OK(cpool_stream_wait_event(s, back)); /* and joins back */
    CHECK_OK(cpool_capture_end(s, &g));         /* the capture is intact */
    CHECK_OK(cpool_capture_status(t, &cs));
    CHECK_EQ(cs, CPOOL_CAPTURE_NONE);
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_graph_release(g);
    CHECK_OK(cpool_event_record(e, t)); /* an eager record again */
    CHECK_OK(cpool_event_synchronize(e));
    CHECK_OK(cpool_event_query(e));
    cpool_event_destroy(back);
    cpool_event_destroy(e);
    cpool_stream_destroy(t);
    cpool_stream_destroy(s);
}

/* One event recorded again and again on short-lived streams by two threads
 * while a third queries, synchronizes, waits for it and times it: the record
 * a reader uses is never freed under it (a record replaced the last one with
 * no lock: a use after free under ASan). */
enum { EVENT_RACE_ROUNDS = 300 };
typedef struct event_race {
    cpool_device *dev;
    cpool_event *e;
    int *stop;
} event_race;
static void *recorder(void *arg) {
    event_race *r = (event_race *)arg;
    for (int i = 0; i < EVENT_RACE_ROUNDS; i++) {
        cpool_stream *t = NULL;
        if (!CHECK_OK(cpool_stream_create(r->dev, &t))) break;
        CHECK_OK(cpool_event_record(r->e, t));
        cpool_stream_destroy(t); /* the event's record outlives its stream */
    }
    return NULL;
}
static void *reader(void *arg) {
    event_race *r = (event_race *)arg;
    cpool_stream *w = NULL;
    float ms;
    if (!CHECK_OK(cpool_stream_create(r->dev, &w))) return NULL;
    while (!aload(r->stop)) {
        cpool_status st = cpool_event_query(r->e);
        CHECK(st == CPOOL_OK || st == CPOOL_ERR_NOT_READY);
        CHECK_OK(cpool_event_synchronize(r->e));
        CHECK_OK(cpool_stream_wait_event(w, r->e));
        st = cpool_event_elapsed_ms(r->e, r->e, &ms);
        CHECK(st == CPOOL_OK || st == CPOOL_ERR_NOT_READY);
    }
    CHECK_OK(cpool_stream_synchronize(w));
    cpool_stream_destroy(w);
    return NULL;
}

static void records_race_readers(cpool_device *dev) {
    static int stop;
    static event_race r;
    pthread_t ta, tb, tr;
    astore(&stop, 0);
    r.dev = dev;
    r.stop = &stop;
    REQUIRE_OK(cpool_event_create(dev, &r.e));
    {
        cpool_stream *first = NULL; /* recorded once: elapsed time has records to read */
        REQUIRE_OK(cpool_stream_create(dev, &first));
        CHECK_OK(cpool_event_record(r.e, first));
        cpool_stream_destroy(first);
    }
    REQUIRE(pthread_create(&tr, NULL, reader, &r) == 0);
    REQUIRE(pthread_create(&ta, NULL, recorder, &r) == 0);
    REQUIRE(pthread_create(&tb, NULL, recorder, &r) == 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    astore(&stop, 1);
    pthread_join(tr, NULL);
    CHECK_OK(cpool_event_synchronize(r.e));
    CHECK_OK(cpool_event_query(r.e));
    cpool_event_destroy(r.e);
}

/* One thread moves an event between a stream outside capture and a
 * capture's origin while another makes a third stream wait for it: each
 * wait lands in one of the two orders, a plain wait or a fork, and a fork
 * is one the library knows (the origin joins it, the capture ends). */
typedef struct flip_race {
    cpool_stream *origin, *plain;
    cpool_event *e;
    int stop, pause, paused;
} flip_race;

static void *flip_records(void *arg) {
    flip_race *r = (flip_race *)arg;
    while (!aload(&r->stop)) {
        if (aload(&r->pause)) {
            astore(&r->paused, 1);
            while (aload(&r->pause) && !aload(&r->stop)) sched_yield();
            astore(&r->paused, 0);
            continue;
        }
        CHECK_OK(cpool_event_record(r->e, r->plain));
        CHECK_OK(cpool_event_record(r->e, r->origin));
    }
    return NULL;
}

static void wait_racing_a_record_lands_whole(cpool_device *dev) {
    static flip_race r;
    cpool_stream *f = NULL;
    cpool_pool *pool = NULL;
    cpool_event *join = NULL;
    pthread_t th;
    memset(&r, 0, sizeof r);
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_stream_create(dev, &r.origin));
    REQUIRE_OK(cpool_stream_create(dev, &r.plain));
    REQUIRE_OK(cpool_stream_create(dev, &f));
    REQUIRE_OK(cpool_event_create(dev, &r.e));
    REQUIRE_OK(cpool_event_create(dev, &join));
    REQUIRE_OK(cpool_capture_begin(r.origin, pool, CPOOL_CAPTURE_RELAXED));
    REQUIRE(pthread_create(&th, NULL, flip_records, &r) == 0);
    for (int i = 0; i < 2000; i++) {
        if (!CHECK_OK(cpool_stream_wait_event(f, r.e))) break;
        cpool_capture_state state = CPOOL_CAPTURE_INVALIDATED;
        CHECK_OK(cpool_capture_status(f, &state));
        if (state == CPOOL_CAPTURE_NONE) continue; /* a plain wait */
        CHECK_EQ(state, CPOOL_CAPTURE_ACTIVE);
        astore(&r.pause, 1);
        while (!aload(&r.paused)) sched_yield();
        CHECK_OK(cpool_event_record(join, f)); /* the fork joins back */
        CHECK_OK(cpool_stream_wait_event(r.origin, join));
        cpool_graph *g = NULL;
        CHECK_OK(cpool_capture_end(r.origin, &g));
        cpool_graph_release(g);
        CHECK_OK(cpool_capture_status(f, &state));
        CHECK_EQ(state, CPOOL_CAPTURE_NONE);
        REQUIRE_OK(cpool_capture_begin(r.origin, pool, CPOOL_CAPTURE_RELAXED));
        CHECK_OK(cpool_event_record(r.e, r.plain)); /* not a record of the ended capture */
        astore(&r.pause, 0);
    }
    astore(&r.stop, 1);
    pthread_join(th, NULL);
    cpool_graph *g = NULL;
    CHECK_OK(cpool_capture_end(r.origin, &g));
    cpool_graph_release(g);
    CHECK_OK(cpool_stream_synchronize(f));
    cpool_event_destroy(join);
    cpool_event_destroy(r.e);
    cpool_stream_destroy(f);
    cpool_stream_destroy(r.plain);
    cpool_stream_destroy(r.origin);
    cpool_pool_release(pool);
}

/* Records and waits on a stream while another thread begins and ends
 * captures on it: each lands whole, in the capture or outside it. The host
 * backend only (header, cpool_event: on CUDA such calls must not race a
 * capture's begin or end on their stream). */
typedef struct begin_race {
    cpool_stream *s;
    int stop;
} begin_race;

static void *begin_and_end(void *arg) {
    begin_race *r = (begin_race *)arg;
    while (!aload(&r->stop)) {
        if (!CHECK_OK(cpool_capture_begin(r->s, NULL, CPOOL_CAPTURE_RELAXED))) break;
        cpool_graph *g = NULL;
        CHECK_OK(cpool_capture_end(r->s, &g));
        cpool_graph_release(g);
    }
    return NULL;
}

static void record_and_wait_racing_a_begin(cpool_device *dev) {
    static begin_race r;
    cpool_stream *other = NULL;
    cpool_event *e = NULL, *outside = NULL;
    pthread_t th;
    if (cpool_device_backend(dev) != CPOOL_BACKEND_HOST) {
        printf("  (the host backend only: on CUDA the race is the caller's to avoid)\n");
        return;
    }
    memset(&r, 0, sizeof r);
    REQUIRE_OK(cpool_stream_create(dev, &r.s));
    REQUIRE_OK(cpool_stream_create(dev, &other));
    REQUIRE_OK(cpool_event_create(dev, &e));
    REQUIRE_OK(cpool_event_create(dev, &outside));
    REQUIRE_OK(cpool_event_record(outside, other));
    REQUIRE(pthread_create(&th, NULL, begin_and_end, &r) == 0);
    for (int i = 0; i < 3000; i++) {
        CHECK_OK(cpool_event_record(e, r.s));
        cpool_status st = cpool_stream_wait_event(r.s, outside);
        /* In a capture, a wait for a record made outside it is refused. */
        if (st != CPOOL_OK) CHECK(st == CPOOL_ERR_INVALID_ARGUMENT && strstr(cpool_last_error(), "outside it"));
    }
    astore(&r.stop, 1);
    pthread_join(th, NULL);
    CHECK_OK(cpool_stream_synchronize(r.s));
    cpool_event_destroy(outside);
    cpool_event_destroy(e);
    cpool_stream_destroy(other);
    cpool_stream_destroy(r.s);
}

/* A callback that holds its stream until *flag is set (5 s at most). */
static void cb_hold(void *arg) { (void)wait_for_int((const int *)arg, 1, 5000); }

/* Reuse follows the user's events, as cudaMallocAsync's does: a block freed
 * on S before a record that U then waited for serves U at once, while S's
 * work from before the free still runs (no fence of the library's could
 * have completed); a block freed on S after the record does not. */
static void reuse_follows_events(cpool_device *dev) {
    enum { BYTES = 4 << 20 };
    static int gate;
    static stream_pool f;
    cpool_stream *u = NULL;
    cpool_event *e = NULL;
    void *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    astore(&gate, 0);
    REQUIRE(fixture_open(dev, NULL, &f));
    REQUIRE_OK(cpool_stream_create(dev, &u));
    REQUIRE_OK(cpool_event_create(dev, &e));
    REQUIRE_OK(cpool_alloc(f.pool, BYTES, f.s, &a));
    CHECK_OK(cpool_launch_host(f.s, cb_hold, &gate)); /* S's work using a, held back */
    CHECK_OK(cpool_free(f.pool, a, f.s));
    CHECK_OK(cpool_event_record(e, f.s));
    CHECK_OK(cpool_stream_wait_event(u, e));
    CHECK_OK(cpool_alloc(f.pool, BYTES, u, &b));
    CHECK(b == a); /* reused at once: U's work runs after S's */
    CHECK_OK(cpool_alloc(f.pool, BYTES, f.s, &c));
    CHECK_OK(cpool_launch_host(f.s, cb_hold, &gate));
    CHECK_OK(cpool_event_record(e, f.s));
    CHECK_OK(cpool_free(f.pool, c, f.s)); /* after the record */
    CHECK_OK(cpool_stream_wait_event(u, e));
    CHECK_OK(cpool_alloc(f.pool, BYTES, u, &d));
    CHECK(!ranges_overlap(c, BYTES, d, BYTES)); /* S's work may still use c */
    CHECK(!ranges_overlap(b, BYTES, d, BYTES));
    CHECK_EQ(aload(&gate), 0); /* all of it while S was held */
    astore(&gate, 1);
    CHECK_OK(cpool_free(f.pool, b, u));
    CHECK_OK(cpool_free(f.pool, d, u));
    CHECK_OK(cpool_stream_synchronize(u));
    CHECK_OK(cpool_stream_synchronize(f.s));
    cpool_event_destroy(e);
    cpool_stream_destroy(u);
}

static const check_case cases[] = {
    CHECK_CASE(record_query_synchronize),  CHECK_CASE(never_recorded_is_complete),
    CHECK_CASE(wait_orders_another_stream), CHECK_CASE(destroyed_while_pending),
    CHECK_CASE(elapsed_between_records),   CHECK_CASE(synchronize_in_callback_refused),
    CHECK_CASE(records_and_waits_in_a_capture), CHECK_CASE(records_race_readers),
    CHECK_CASE(reuse_follows_events),      CHECK_CASE(wait_racing_a_record_lands_whole),
    CHECK_CASE(record_and_wait_racing_a_begin),
};
CHECK_MAIN(cases, CHECK_ON_ALL)
