/*
 * helpers.h: small tools shared by the tests (include after check.h).
 *
 * - sleep_ms, atomic int helpers and wait_for_int (a bounded poll that never
 *   asserts on a time: its deadline only keeps a broken library from hanging
 *   the suite);
 * - tracked objects for cpool_pool_record: each one counts its drops and notes
 *   the thread, the order, and the value of a watched flag at the drop;
 * - host callbacks for cpool_launch_host (increment, sleep-then-set, log);
 * - stats helpers: stats_of, CHECK_STATS_EQ (every field), CHECK_STATS_SANE
 *   (the relations that hold between the fields at any time);
 * - device-buffer helpers: read_back and CHECK_BYTES (reads device memory
 *   through the stream and checks every byte);
 * - the common fixture: a stream and a pool that end with the case, also
 *   when a REQUIRE abandons it.
 */
#ifndef CPOOL_TESTS_HELPERS_H
#define CPOOL_TESTS_HELPERS_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "check.h"

/* ---- time and atomics ----------------------------------------------------- */

static inline void sleep_ms(unsigned ms) {
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static inline int aload(const int *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
static inline void astore(int *p, int v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
static inline int ainc(int *p) { return __atomic_add_fetch(p, 1, __ATOMIC_SEQ_CST); }

/* Polls until *p >= target or ~timeout_ms passed; returns whether it got there.
 * Used only where the contract lets something finish "soon after" a call. */
static inline int wait_for_int(const int *p, int target, unsigned timeout_ms) {
    unsigned waited = 0;
    while (aload(p) < target && waited < timeout_ms) {
        sleep_ms(1);
        waited++;
    }
    return aload(p) >= target;
}
#define WAIT_TIMEOUT_MS 10000u

/* ---- tracked objects for cpool_pool_record ---------------------------------- */

#define DROP_LOG_MAX 4096
typedef struct drop_log {
    pthread_mutex_t mu;
    int next;                /* under mu: the next slot of order */
    int count;               /* drops so far (atomic, raised last) */
    int order[DROP_LOG_MAX]; /* ids in drop order */
} drop_log;

typedef struct tracked {
    drop_log *log;
    int id;
    int drops;            /* how often this object was dropped (must end at 1) */
    const int *watch;     /* optional flag read at the drop */
    int watch_at_drop;    /* *watch when dropped; -1 if no watch */
    pthread_t drop_thread;
} tracked;

static inline void drop_log_init(drop_log *log) {
    pthread_mutex_init(&log->mu, NULL);
    log->next = 0;
    astore(&log->count, 0);
}

static inline void tracked_init(tracked *t, drop_log *log, int id, const int *watch) {
    t->log = log;
    t->id = id;
    t->drops = 0;
    t->watch = watch;
    t->watch_at_drop = -1;
}

static inline void tracked_drop(void *object) {
    tracked *t = (tracked *)object;
    pthread_mutex_lock(&t->log->mu);
    t->watch_at_drop = t->watch ? aload(t->watch) : -1;
    t->drop_thread = pthread_self();
    if (t->log->next < DROP_LOG_MAX) t->log->order[t->log->next] = t->id;
    t->log->next++;
    pthread_mutex_unlock(&t->log->mu);
    ainc(&t->drops);
    ainc(&t->log->count); /* last: a waiter that sees the count sees the rest */
}

/* ---- host callbacks ------------------------------------------------------------ */

static inline void cb_inc(void *arg) { ainc((int *)arg); }

typedef struct sleep_set {
    unsigned ms;
    int *flag;
    int value;
} sleep_set;
/* Sleeps, then stores value into *flag: slow stream work whose end is visible. */
static inline void cb_sleep_set(void *arg) {
    sleep_set *a = (sleep_set *)arg;
    sleep_ms(a->ms);
    astore(a->flag, a->value);
}

typedef struct thread_note {
    pthread_t thread;
    int set;
} thread_note;
/* Notes the thread that runs stream work. */
static inline void cb_note_thread(void *arg) {
    thread_note *n = (thread_note *)arg;
    n->thread = pthread_self();
    astore(&n->set, 1);
}

/* What a callback that releases (or clears) from inside stream work acts on,
 * and where and whether it ran. */
typedef struct release_in_callback {
    cpool_pool *pool;
    cpool_graph *graph;
    pthread_t thread;
    int done;
} release_in_callback;

/* ---- stats -------------------------------------------------------------------- */

static inline cpool_pool_stats stats_of(const cpool_pool *pool) {
    cpool_pool_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    CHECK_OK(cpool_pool_get_stats(pool, &st));
    return st;
}

#define CHECK_STATS_EQ(a, b)                                          \
    do {                                                              \
        CHECK_EQ((a).reserved_bytes, (b).reserved_bytes);             \
        CHECK_EQ((a).reserved_bytes_peak, (b).reserved_bytes_peak);   \
        CHECK_EQ((a).allocated_bytes, (b).allocated_bytes);           \
        CHECK_EQ((a).allocated_bytes_peak, (b).allocated_bytes_peak); \
        CHECK_EQ((a).graph_reserved_bytes, (b).graph_reserved_bytes); \
        CHECK_EQ((a).alloc_count, (b).alloc_count);                   \
        CHECK_EQ((a).free_count, (b).free_count);                     \
        CHECK_EQ((a).segment_count, (b).segment_count);               \
        CHECK_EQ((a).cached_bytes, (b).cached_bytes);                 \
        CHECK_EQ((a).graph_count, (b).graph_count);                   \
    } while (0)

/* Relations between the counters that hold at every moment. */
#define CHECK_STATS_SANE(st)                                                     \
    do {                                                                         \
        CHECK_LE((st).allocated_bytes, (st).reserved_bytes);                     \
        CHECK_LE((st).allocated_bytes + (st).cached_bytes, (st).reserved_bytes); \
        CHECK_LE((st).graph_reserved_bytes, (st).reserved_bytes);                \
        CHECK_LE((st).reserved_bytes, (st).reserved_bytes_peak);                 \
        CHECK_LE((st).allocated_bytes, (st).allocated_bytes_peak);               \
        CHECK_LE((st).free_count, (st).alloc_count);                             \
        CHECK_EQ((st).segment_count == 0, (st).reserved_bytes == 0);             \
    } while (0)

/* Polls until the pool's graph_count is `target` (a released graph lets go of
 * its pool once its launched work finished, possibly on another thread). */
static inline int wait_graph_count(const cpool_pool *pool, uint64_t target, unsigned timeout_ms) {
    unsigned waited = 0;
    for (;;) {
        cpool_pool_stats st;
        memset(&st, 0, sizeof st);
        st.struct_size = sizeof st;
        if (cpool_pool_get_stats(pool, &st) != CPOOL_OK) return 0;
        if (st.graph_count == target) return 1;
        if (waited >= timeout_ms) return 0;
        cpool_wait_deferred();
        sleep_ms(1);
        waited++;
    }
}

/* ---- device buffers ------------------------------------------------------------- */

/* Copies n bytes of device (or host) memory into host memory and waits. */
static inline cpool_status read_back(cpool_stream *s, void *host, const void *src, size_t n) {
    cpool_status st = cpool_memcpy_async(s, host, src, n);
    if (st != CPOOL_OK) return st;
    return cpool_stream_synchronize(s);
}

/* Reads n bytes at src through s and checks that each equals v. */
static inline void check_bytes_(cpool_stream *s, const void *src, size_t n, unsigned char v, const char *what,
                                const char *file, int line) {
    unsigned char *h = (unsigned char *)malloc(n);
    size_t i;
    cpool_status st;
    if (!h) {
        check_report_(file, line, "malloc(%zu) failed", n);
        return;
    }
    memset(h, (unsigned char)~v, n);
    st = read_back(s, h, src, n);
    if (st != CPOOL_OK) {
        check_report_(file, line, "read_back(%s) failed: %s; cpool_last_error: \"%s\"", what,
                      cpool_status_string(st), cpool_last_error());
    } else {
        for (i = 0; i < n; i++) {
            if (h[i] != v) {
                check_report_(file, line, "%s: byte %zu of %zu is 0x%02x, expected 0x%02x", what, i, n, h[i], v);
                break;
            }
        }
    }
    free(h);
}
#define CHECK_BYTES(s, src, n, v) check_bytes_((s), (src), (n), (unsigned char)(v), #src, __FILE__, __LINE__)

/* Whether [a, a+na) and [b, b+nb) overlap. */
static inline int ranges_overlap(const void *a, size_t na, const void *b, size_t nb) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + nb && y < x + na;
}

/* ---- the common fixture -------------------------------------------------- */

/* A stream and a pool on dev, which end when the case returns, also from a
 * failed REQUIRE (the pool first, then the stream: a capture still open on
 * it is discarded). */
typedef struct stream_pool {
    cpool_stream *s;
    cpool_pool *pool;
} stream_pool;

static inline void fixture_release_pool_(void *f) { cpool_pool_release(((stream_pool *)f)->pool); }
static inline void fixture_destroy_stream_(void *f) { cpool_stream_destroy(((stream_pool *)f)->s); }

/* Returns 1, or 0 after a failed check (nothing is left behind). f must
 * outlive the case, whose cleanups run after it returned: make it static. */
static inline int fixture_open(cpool_device *dev, const cpool_pool_options *opts, stream_pool *f) {
    f->s = NULL;
    f->pool = NULL;
    if (!CHECK_OK(cpool_stream_create(dev, &f->s))) return 0;
    check_defer(fixture_destroy_stream_, f);
    if (!CHECK_OK(cpool_pool_create(dev, opts, &f->pool))) return 0;
    check_defer(fixture_release_pool_, f);
    return 1;
}

#endif /* CPOOL_TESTS_HELPERS_H */
