/* Interleavings: every pool operation against every stream operation on
 * another thread, round after round, with the stream holding work on pool
 * memory that is still pending when both race.
 *
 * Each round makes a fresh pool with two recorded objects, and two fresh
 * streams: S (the stream operation's) and T (the pool thread's own). On each
 * of S and T it allocates a block, enqueues work on it (a host callback that
 * waits for the round's start, sleeps 1-3 ms on S and 1 ms less on T, then
 * a memset of the block's first page and a callback that sets a 'done' flag)
 * and frees the block in stream order behind that work. T's work ends first,
 * so that a wait that overlooks S returns well before S writes. Then two
 * threads meet at a barrier, each sleeps its delay of the round (0, 1 or
 * 2 ms) and makes its call:
 *
 *   thread P (pool):   the last cpool_pool_release | cpool_pool_trim |
 *                      cpool_pool_clear_buffers | cpool_alloc + cpool_free
 *                      on T | cpool_pool_get_stats (polled)
 *   thread S (stream): cpool_stream_destroy(S) with the work pending |
 *                      cpool_stream_synchronize(S) | a capture on S into
 *                      the pool (alloc, memset, host call, free), its end,
 *                      a launch of the graph and its release
 *
 * Promises checked (include/capturepool.h):
 * - release, trim and clear wait for the stream work of every stream of the
 *   device, also one being destroyed or capturing on another thread: the
 *   drops see every 'done' flag set, and the call has returned only once the
 *   flags are set; memory the work writes is never given back before the
 *   write (under ASan a failure is a heap-use-after-free in the stream's
 *   memset; in a plain build a fatal signal, reported with the round);
 * - a block freed on S is handed to work on T only once S's work before the
 *   free finished; graph-reserved memory is never handed to work outside it;
 * - stats are consistent at every moment and exact once all is done (every
 *   allocation counted, every one freed, and a trim gives everything back);
 * - every recorded object is dropped exactly once;
 * - a graph captured after a clear returned launches (not stale);
 * - nothing deadlocks: every wait is bounded, and a thread that does not
 *   finish in time is a failed check and ends the binary instead of hanging.
 *
 * The schedule (delays, work length, capture mode, which pool the capture
 * uses in release rounds) cycles with the round number, so every binary run
 * covers the same interleaving windows. */
#include "check.h"
#include "helpers.h"

#include <sched.h>  /* after check.h, which asks for POSIX */
#include <signal.h>
#include <unistd.h>

/* Rounds per (pool operation, stream operation) pair: 162 is six passes
 * over the 27 (P delay, S delay, work time) combinations of the schedule in
 * run_round; each pass pairs them with other capture modes, and the release
 * rounds' two capture variants alternate with the round's parity. About 4 ms
 * a round: ~10 s for the binary plain, ~15 s under TSan. INTERLEAVE_ROUNDS
 * in the environment runs fewer (a run under compute-sanitizer: one pass of
 * the schedule, 27, still tries every combination). */
enum { ROUNDS = 162 };

static int rounds(void) {
    const char *env = getenv("INTERLEAVE_ROUNDS");
    int n = env ? atoi(env) : 0;
    return n > 0 && n < ROUNDS ? n : ROUNDS;
}
/* A case stops after this many failed checks (one broken promise tends to
 * fail every round). */
enum { MAX_CASE_FAILURES = 12 };
/* The pending blocks: two of them fill one 2 MiB small segment, so that the
 * pool thread's second allocation on T can only be served by S's block or a
 * new segment. */
#define BLOCK_BYTES ((size_t)1 << 20)
/* What the stream work writes of a block: its first page (a whole 1 MiB
 * written on two threads at once makes TSan take seconds per round). */
#define TOUCH_BYTES ((size_t)4096)
#define CAPTURE_BYTES ((size_t)4096)
enum { P_ALLOCS = 3, STATS_POLLS = 2000 };
/* Bound of every wait of the test: past it a thread counts as hung. */
#define WATCHDOG_MS 30000u

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define INTERLEAVE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define INTERLEAVE_SANITIZED 1
#endif
#endif

typedef enum { POOL_RELEASE, POOL_TRIM, POOL_CLEAR, POOL_ALLOC, POOL_STATS } pool_op;
typedef enum { STREAM_DESTROY, STREAM_SYNC, STREAM_CAPTURE } stream_op;

static const char *const pool_op_name[] = {"last release", "trim", "clear_buffers", "alloc/free on T", "get_stats"};
static const char *const stream_op_name[] = {"stream_destroy(S)", "stream_synchronize(S)", "capture on S"};
static const cpool_capture_mode modes[3] = {CPOOL_CAPTURE_GLOBAL, CPOOL_CAPTURE_THREAD_LOCAL,
                                            CPOOL_CAPTURE_RELAXED};
static const char *const mode_name[3] = {"GLOBAL", "THREAD_LOCAL", "RELAXED"};

/* The head of a stream's pending work (cb_gate). */
typedef struct gate {
    const int *start;
    unsigned ms;
} gate;

/* One recorded object: notes what it sees when dropped. */
typedef struct round_obj {
    const int *s_done, *t_done, *runs; /* the round's flags */
    int drops;
    int saw_s_done, saw_t_done, saw_runs;
    int *drop_total;
} round_obj;

typedef struct round_ctx {
    pool_op pop;
    stream_op sop;
    int round;
    unsigned p_delay_ms, s_delay_ms, work_ms; /* T's work is 1 ms shorter than S's */
    cpool_capture_mode mode;
    const char *mode_text;
    char desc[200];

    cpool_pool *pool;     /* the round's pool; P drops the creator's reference in release rounds */
    cpool_pool *cap_pool; /* the pool S's capture allocates from: `pool`, or one of its own */
    cpool_pool *s_ref;    /* S's own reference to `pool` (release rounds capturing into it) */
    cpool_stream *s, *t;
    void *s_block, *t_block;
    void *cap_block; /* the block S's capture got (published atomically) */

    int arrived, start;          /* barrier */
    gate s_gate, t_gate;
    int s_done, t_done;          /* the pending work of S / T has finished */
    int p_finished, s_finished;  /* watchdog */
    int clear_returned;
    int captured_runs, launched; /* runs of the captured host call; successful launches */
    int p_allocs, cap_allocs;    /* successful cpool_alloc calls on `pool` by P / under S's capture */
    int drop_total;
    round_obj objs[2];
} round_ctx;

/* ---- reporting ------------------------------------------------------------------ */

static char current_round_[256] = ""; /* for the fatal-signal note */

static void round_fail_(const round_ctx *r, const char *file, int line, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    check_report_(file, line, "%s: %s", r->desc, msg);
}
#define RFAIL(r, ...) round_fail_((r), __FILE__, __LINE__, __VA_ARGS__)
#define RCHECK(r, cond, ...)                    \
    do {                                        \
        if (!(cond)) RFAIL((r), __VA_ARGS__);   \
    } while (0)

static int case_failures(void) { return __atomic_load_n(&check_case_failures_, __ATOMIC_SEQ_CST); }

#ifndef INTERLEAVE_SANITIZED
/* A plain build has no sanitizer to name a use after free: say which case and
 * round crashed, then die of the signal. */
static void fatal_signal(int sig) {
    static const char head[] = "\n  FAIL [interleave] ";
    static const char segv[] = " (stream work touching memory the pool gave back?)\n";
    const char *name = sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : "SIGABRT";
    ssize_t rc = write(STDOUT_FILENO, head, sizeof head - 1);
    rc = write(STDOUT_FILENO, name, strlen(name));
    rc = write(STDOUT_FILENO, " in ", 4);
    rc = write(STDOUT_FILENO, check_case_name_, strlen(check_case_name_));
    rc = write(STDOUT_FILENO, ", ", 2);
    rc = write(STDOUT_FILENO, current_round_, strlen(current_round_));
    if (sig == SIGABRT)
        rc = write(STDOUT_FILENO, "\n", 1);
    else
        rc = write(STDOUT_FILENO, segv, sizeof segv - 1);
    (void)rc;
    /* SA_RESETHAND: the signal, raised again, now has its default action. */
}
#endif

static void install_signal_note(void) {
#ifndef INTERLEAVE_SANITIZED
    static int installed;
    if (installed) return;
    installed = 1;
    {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = fatal_signal;
        sa.sa_flags = SA_RESETHAND;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, NULL);
        sigaction(SIGBUS, &sa, NULL);
        sigaction(SIGABRT, &sa, NULL);
    }
#endif
}

/* A thread did not finish: the library deadlocked or hangs. Joining would hang
 * the suite, so the binary ends here, failed. */
static void give_up_hung(const round_ctx *r, const char *who) {
    RFAIL(r, "thread %s did not finish within %u ms (deadlock or hang)", who, WATCHDOG_MS);
    printf("FAIL [%s] %s: a thread hung; the binary stops here, failed\n", check_backend_name_, check_case_name_);
    fflush(stdout);
    _exit(1);
}

/* ---- time, barrier, delays -------------------------------------------------------- */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Both threads arrive, then both go at once (and the pending work starts its
 * sleep). Returns 0 when the other thread never came. */
static int barrier_arrive(round_ctx *r) {
    double deadline = now_ms() + WATCHDOG_MS;
    ainc(&r->arrived);
    while (aload(&r->arrived) < 2) {
        if (now_ms() > deadline) return 0;
        sched_yield();
    }
    astore(&r->start, 1);
    return 1;
}

static void delay(unsigned ms) {
    if (ms) sleep_ms(ms);
}

/* ---- stream work ------------------------------------------------------------------ */

/* The head of the pending work: waits for the round's start, then works
 * (sleeps) for its time. The memset of the block and the 'done' callback
 * follow it on the stream. */
static void cb_gate(void *arg) {
    gate *g = (gate *)arg;
    wait_for_int(g->start, 1, WATCHDOG_MS);
    sleep_ms(g->ms);
}
static void cb_done(void *arg) { astore((int *)arg, 1); }

static void obj_drop(void *object) {
    round_obj *o = (round_obj *)object;
    o->saw_s_done = aload(o->s_done);
    o->saw_t_done = aload(o->t_done);
    o->saw_runs = aload(o->runs);
    ainc(&o->drops);
    ainc(o->drop_total); /* last: a waiter that sees the total sees the rest */
}

/* ---- thread P: the pool operation ------------------------------------------------- */

static void check_done_after(round_ctx *r, const char *what) {
    RCHECK(r, aload(&r->s_done), "%s returned while the work on S (pool memory) had not finished", what);
    RCHECK(r, aload(&r->t_done), "%s returned while the work on T (pool memory) had not finished", what);
}

static void p_alloc_free(round_ctx *r) {
    void *q[P_ALLOCS];
    int i, n = 0;
    for (i = 0; i < P_ALLOCS; i++) {
        void *cap;
        if (!CHECK_OK(cpool_alloc(r->pool, BLOCK_BYTES, r->t, &q[n]))) break;
        ainc(&r->p_allocs);
        /* Read the flag after the call: not done now means not done then. */
        if (ranges_overlap(q[n], BLOCK_BYTES, r->s_block, BLOCK_BYTES) && !aload(&r->s_done))
            RFAIL(r, "cpool_alloc on T returned %p, S's block freed on S while S's work on it is pending", q[n]);
        cap = __atomic_load_n(&r->cap_block, __ATOMIC_SEQ_CST);
        if (cap && ranges_overlap(q[n], BLOCK_BYTES, cap, CAPTURE_BYTES))
            RFAIL(r, "cpool_alloc on T returned %p, which overlaps the block of S's capture %p", q[n], cap);
        CHECK_OK(cpool_memset_async(r->t, q[n], 0x5a, TOUCH_BYTES));
        n++;
    }
    for (i = 0; i < n; i++) CHECK_OK(cpool_free(r->pool, q[i], r->t));
}

static void p_stats(round_ctx *r) {
    int k;
    uint64_t cap_max = r->cap_pool == r->pool ? 1 : 0;
    for (k = 0; k < STATS_POLLS && !aload(&r->s_finished); k++) {
        cpool_pool_stats st;
        memset(&st, 0, sizeof st);
        st.struct_size = sizeof st;
        if (!CHECK_OK(cpool_pool_get_stats(r->pool, &st))) return;
        /* Setup: 2 allocations, 2 frees; S's capture adds at most one of each. */
        if (st.alloc_count < 2 || st.alloc_count > 2 + cap_max || st.free_count < 2 ||
            st.free_count > st.alloc_count ||
            st.allocated_bytes != (st.alloc_count - st.free_count) * CAPTURE_BYTES ||
            st.allocated_bytes + st.cached_bytes > st.reserved_bytes || st.graph_reserved_bytes > st.reserved_bytes ||
            st.reserved_bytes > st.reserved_bytes_peak || st.allocated_bytes > st.allocated_bytes_peak ||
            st.reserved_bytes < 2 * BLOCK_BYTES || (st.segment_count == 0) != (st.reserved_bytes == 0) ||
            st.graph_count > 1) {
            RFAIL(r,
                  "inconsistent stats at poll %d: alloc_count %llu free_count %llu allocated %llu (peak %llu) "
                  "cached %llu reserved %llu (peak %llu) graph_reserved %llu segments %llu graphs %llu",
                  k, (unsigned long long)st.alloc_count, (unsigned long long)st.free_count,
                  (unsigned long long)st.allocated_bytes, (unsigned long long)st.allocated_bytes_peak,
                  (unsigned long long)st.cached_bytes, (unsigned long long)st.reserved_bytes,
                  (unsigned long long)st.reserved_bytes_peak, (unsigned long long)st.graph_reserved_bytes,
                  (unsigned long long)st.segment_count, (unsigned long long)st.graph_count);
            return;
        }
        sched_yield();
    }
}

static void *pool_thread(void *arg) {
    round_ctx *r = (round_ctx *)arg;
    int i;
    if (barrier_arrive(r)) {
        delay(r->p_delay_ms);
        switch (r->pop) {
        case POOL_RELEASE: {
            int last = r->s_ref == NULL; /* nobody else holds the round's pool */
            cpool_pool_release(r->pool);
            if (last) {
                /* The teardown ran here: after the device's stream work, the drops. */
                check_done_after(r, "the last cpool_pool_release");
                for (i = 0; i < 2; i++)
                    RCHECK(r, aload(&r->objs[i].drops) == 1, "object %d dropped %d times by the last release", i,
                           aload(&r->objs[i].drops));
            }
            break;
        }
        case POOL_TRIM:
            CHECK_OK(cpool_pool_trim(r->pool));
            check_done_after(r, "cpool_pool_trim");
            break;
        case POOL_CLEAR:
            cpool_pool_clear_buffers(r->pool);
            astore(&r->clear_returned, 1);
            check_done_after(r, "cpool_pool_clear_buffers");
            for (i = 0; i < 2; i++)
                RCHECK(r, aload(&r->objs[i].drops) == 1, "object %d dropped %d times by the clear", i,
                       aload(&r->objs[i].drops));
            CHECK_EQ(cpool_pool_buffer_count(r->pool), 0);
            break;
        case POOL_ALLOC:
            p_alloc_free(r);
            break;
        case POOL_STATS:
            p_stats(r);
            break;
        }
    }
    astore(&r->p_finished, 1);
    return NULL;
}

/* ---- thread S: the stream operation ------------------------------------------------- */

static void s_capture(round_ctx *r) {
    cpool_graph *g = NULL;
    void *b = NULL;
    int cleared_before = aload(&r->clear_returned);
    if (CHECK_OK(cpool_capture_begin(r->s, r->cap_pool, r->mode))) {
        if (CHECK_OK(cpool_alloc(r->cap_pool, CAPTURE_BYTES, r->s, &b))) {
            if (r->cap_pool == r->pool) ainc(&r->cap_allocs);
            __atomic_store_n(&r->cap_block, b, __ATOMIC_SEQ_CST);
            CHECK_OK(cpool_memset_async(r->s, b, 0x33, CAPTURE_BYTES));
            CHECK_OK(cpool_launch_host(r->s, cb_inc, &r->captured_runs));
            CHECK_OK(cpool_free(r->cap_pool, b, r->s));
        }
        CHECK_OK(cpool_capture_end(r->s, &g));
    }
    if (g) {
        cpool_status st = cpool_graph_launch(g, r->s);
        if (st == CPOOL_OK)
            ainc(&r->launched);
        else if (r->pop == POOL_CLEAR && st == CPOOL_ERR_STALE_GRAPH)
            RCHECK(r, !cleared_before, "a graph captured after the clear returned is stale");
        else
            RFAIL(r, "cpool_graph_launch returned %d (%s): %s", (int)st, cpool_status_string(st), cpool_last_error());
        cpool_graph_release(g);
    }
    cpool_pool_release(r->s_ref); /* NULL: no-op */
}

static void *stream_thread(void *arg) {
    round_ctx *r = (round_ctx *)arg;
    if (barrier_arrive(r)) {
        delay(r->s_delay_ms);
        switch (r->sop) {
        case STREAM_DESTROY:
            cpool_stream_destroy(r->s);
            r->s = NULL; /* main reads it after the join */
            RCHECK(r, aload(&r->s_done), "cpool_stream_destroy(S) returned before S's work had finished");
            break;
        case STREAM_SYNC:
            CHECK_OK(cpool_stream_synchronize(r->s));
            RCHECK(r, aload(&r->s_done), "cpool_stream_synchronize(S) returned before S's work had finished");
            break;
        case STREAM_CAPTURE:
            s_capture(r);
            break;
        }
    } else {
        cpool_pool_release(r->s_ref);
    }
    astore(&r->s_finished, 1);
    return NULL;
}

/* ---- one round ---------------------------------------------------------------------- */

/* Allocates a block on `s` and enqueues the pending work on it: the gate, a
 * memset of the block, the 'done' flag; then frees it in stream order. */
static int enqueue_pending(round_ctx *r, cpool_stream *s, gate *g, unsigned ms, void **block, int *done,
                           int pattern) {
    g->start = &r->start;
    g->ms = ms;
    if (!CHECK_OK(cpool_alloc(r->pool, BLOCK_BYTES, s, block))) return 0;
    if (!CHECK_OK(cpool_launch_host(s, cb_gate, g))) return 0;
    if (!CHECK_OK(cpool_memset_async(s, *block, pattern, TOUCH_BYTES))) return 0;
    if (!CHECK_OK(cpool_launch_host(s, cb_done, done))) return 0;
    return CHECK_OK(cpool_free(r->pool, *block, s));
}

/* Runs round `k` of the pair; returns 0 when the case should stop. */
static int run_round(cpool_device *dev, pool_op pop, stream_op sop, int k) {
    round_ctx *r = (round_ctx *)calloc(1, sizeof *r);
    pthread_t pth, sth;
    int i, p_started = 0, s_started = 0, ok = 1;
    int variant_own_pool;
    if (!r) {
        CHECK(r != NULL);
        return 0;
    }
    r->pop = pop;
    r->sop = sop;
    r->round = k;
    r->p_delay_ms = (unsigned)(k % 3);
    r->s_delay_ms = (unsigned)(k / 3 % 3);
    r->work_ms = 1 + (unsigned)(k / 9 % 3);
    r->mode = modes[(k + k / 27) % 3];
    r->mode_text = mode_name[(k + k / 27) % 3];
    /* Release rounds with a capture: even rounds capture into a pool of
     * their own (P's release is the last of the round's pool), odd ones into
     * the round's pool with S holding a reference (the last one goes on
     * whichever thread, or graph teardown, comes last). */
    variant_own_pool = pop == POOL_RELEASE && sop == STREAM_CAPTURE && k % 2 == 0;
    snprintf(r->desc, sizeof r->desc, "%s vs %s, round %d/%d (P delay %u ms, S delay %u ms, work %u ms%s%s%s)",
             pool_op_name[pop], stream_op_name[sop], k + 1, rounds(), r->p_delay_ms, r->s_delay_ms, r->work_ms,
             sop == STREAM_CAPTURE ? ", " : "", sop == STREAM_CAPTURE ? r->mode_text : "",
             variant_own_pool ? ", capture into a pool of its own" : "");
    snprintf(current_round_, sizeof current_round_, "%s", r->desc);

    if (!CHECK_OK(cpool_pool_create(dev, NULL, &r->pool))) {
        free(r);
        return 0;
    }
    for (i = 0; i < 2; i++) {
        r->objs[i].s_done = &r->s_done;
        r->objs[i].t_done = &r->t_done;
        r->objs[i].runs = &r->captured_runs;
        r->objs[i].drop_total = &r->drop_total;
        r->objs[i].saw_s_done = r->objs[i].saw_t_done = r->objs[i].saw_runs = -1;
        CHECK_OK(cpool_pool_record(r->pool, &r->objs[i], obj_drop, NULL));
    }
    r->cap_pool = r->pool;
    if (variant_own_pool && !CHECK_OK(cpool_pool_create(dev, NULL, &r->cap_pool))) r->cap_pool = NULL;
    if (pop == POOL_RELEASE && sop == STREAM_CAPTURE && !variant_own_pool) r->s_ref = cpool_pool_retain(r->pool);
    if (!r->cap_pool || !CHECK_OK(cpool_stream_create(dev, &r->s)) || !CHECK_OK(cpool_stream_create(dev, &r->t)) ||
        !enqueue_pending(r, r->s, &r->s_gate, r->work_ms, &r->s_block, &r->s_done, 0xa5) ||
        !enqueue_pending(r, r->t, &r->t_gate, r->work_ms - 1, &r->t_block, &r->t_done, 0xc3))
        ok = 0;

    if (ok) {
        int rc = pthread_create(&sth, NULL, stream_thread, r);
        CHECK_EQ(rc, 0);
        s_started = rc == 0;
        if (s_started) {
            rc = pthread_create(&pth, NULL, pool_thread, r);
            CHECK_EQ(rc, 0);
            p_started = rc == 0;
        }
    }
    if (!p_started) {
        /* Setup failed: let the pending work and a started S thread go, and
         * do P's part of the teardown. */
        ainc(&r->arrived);
        astore(&r->start, 1);
        if (pop == POOL_RELEASE) {
            cpool_pool_release(r->pool);
        }
        ok = 0;
    }
    if (s_started) {
        if (!wait_for_int(&r->s_finished, 1, WATCHDOG_MS)) give_up_hung(r, "S");
        pthread_join(sth, NULL);
    } else {
        cpool_pool_release(r->s_ref);
    }
    if (p_started) {
        if (!wait_for_int(&r->p_finished, 1, WATCHDOG_MS)) give_up_hung(r, "P");
        pthread_join(pth, NULL);
    }

    /* Everything enqueued finishes; then the counts are exact. */
    if (r->s) CHECK_OK(cpool_stream_synchronize(r->s));
    if (r->t) CHECK_OK(cpool_stream_synchronize(r->t));
    if (ok) {
        RCHECK(r, aload(&r->s_done) && aload(&r->t_done), "pending work unfinished after the synchronizes");
        RCHECK(r, aload(&r->captured_runs) == aload(&r->launched), "captured host call ran %d times for %d launches",
               aload(&r->captured_runs), aload(&r->launched));
    }
    if (pop != POOL_RELEASE) {
        cpool_pool_stats st;
        uint64_t allocs = 2 + (uint64_t)aload(&r->p_allocs) + (uint64_t)aload(&r->cap_allocs);
        RCHECK(r, wait_graph_count(r->pool, 0, WATCHDOG_MS), "the released graph still holds the pool");
        st = stats_of(r->pool);
        if (ok) {
            RCHECK(r, st.alloc_count == allocs, "alloc_count %llu, expected %llu", (unsigned long long)st.alloc_count,
                   (unsigned long long)allocs);
            RCHECK(r, st.free_count == st.alloc_count, "free_count %llu, alloc_count %llu",
                   (unsigned long long)st.free_count, (unsigned long long)st.alloc_count);
            RCHECK(r, st.allocated_bytes == 0, "allocated_bytes %llu at the end", (unsigned long long)st.allocated_bytes);
            RCHECK(r, st.graph_count == 0, "graph_count %llu at the end", (unsigned long long)st.graph_count);
        }
        CHECK_STATS_SANE(st);
        CHECK_OK(cpool_pool_trim(r->pool));
        st = stats_of(r->pool);
        RCHECK(r, st.reserved_bytes == 0 && st.segment_count == 0 && st.graph_reserved_bytes == 0,
               "after a final trim with nothing live: reserved %llu, segments %llu, graph_reserved %llu",
               (unsigned long long)st.reserved_bytes, (unsigned long long)st.segment_count,
               (unsigned long long)st.graph_reserved_bytes);
        for (i = 0; i < 2; i++)
            RCHECK(r, aload(&r->objs[i].drops) == (pop == POOL_CLEAR ? 1 : 0), "object %d dropped %d times before the end",
                   i, aload(&r->objs[i].drops));
        cpool_pool_release(r->pool);
    }
    cpool_wait_deferred();
    if (!wait_for_int(&r->drop_total, 2, WATCHDOG_MS)) RFAIL(r, "only %d of 2 drops came", aload(&r->drop_total));
    for (i = 0; i < 2; i++) {
        round_obj *o = &r->objs[i];
        RCHECK(r, aload(&o->drops) == 1, "object %d dropped %d times", i, aload(&o->drops));
        if (aload(&o->drops) == 0) continue;
        RCHECK(r, o->saw_s_done == 1, "object %d dropped while the work on S (pool memory) was pending", i);
        RCHECK(r, o->saw_t_done == 1, "object %d dropped while the work on T (pool memory) was pending", i);
        if (pop == POOL_RELEASE && sop == STREAM_CAPTURE && !variant_own_pool)
            RCHECK(r, o->saw_runs == aload(&r->launched),
                   "object %d dropped before the graph's launch had run (%d of %d runs)", i, o->saw_runs,
                   aload(&r->launched));
    }
    cpool_stream_destroy(r->s);
    cpool_stream_destroy(r->t);
    if (variant_own_pool) cpool_pool_release(r->cap_pool);
    cpool_wait_deferred();
    if (aload(&r->drop_total) == 2) free(r); /* else a late drop may still write it: leaked */
    return ok && case_failures() < MAX_CASE_FAILURES;
}

static void run_pair(cpool_device *dev, pool_op pop, stream_op sop) {
    int k, n = rounds();
    install_signal_note();
    for (k = 0; k < n; k++) {
        if (!run_round(dev, pop, sop, k)) {
            if (k + 1 < n) printf("  note: case stopped after round %d of %d\n", k + 1, n);
            break;
        }
    }
    current_round_[0] = '\0';
}

#define PAIR(name, pop, sop) \
    static void name(cpool_device *dev) { run_pair(dev, pop, sop); }
PAIR(last_release_vs_stream_destroy, POOL_RELEASE, STREAM_DESTROY)
PAIR(last_release_vs_stream_synchronize, POOL_RELEASE, STREAM_SYNC)
PAIR(last_release_vs_capture, POOL_RELEASE, STREAM_CAPTURE)
PAIR(trim_vs_stream_destroy, POOL_TRIM, STREAM_DESTROY)
PAIR(trim_vs_stream_synchronize, POOL_TRIM, STREAM_SYNC)
PAIR(trim_vs_capture, POOL_TRIM, STREAM_CAPTURE)
PAIR(clear_vs_stream_destroy, POOL_CLEAR, STREAM_DESTROY)
PAIR(clear_vs_stream_synchronize, POOL_CLEAR, STREAM_SYNC)
PAIR(clear_vs_capture, POOL_CLEAR, STREAM_CAPTURE)
PAIR(alloc_free_vs_stream_destroy, POOL_ALLOC, STREAM_DESTROY)
PAIR(alloc_free_vs_stream_synchronize, POOL_ALLOC, STREAM_SYNC)
PAIR(alloc_free_vs_capture, POOL_ALLOC, STREAM_CAPTURE)
PAIR(stats_vs_stream_destroy, POOL_STATS, STREAM_DESTROY)
PAIR(stats_vs_stream_synchronize, POOL_STATS, STREAM_SYNC)
PAIR(stats_vs_capture, POOL_STATS, STREAM_CAPTURE)

static const check_case cases[] = {
    CHECK_CASE(last_release_vs_stream_destroy),
    CHECK_CASE(last_release_vs_stream_synchronize),
    CHECK_CASE(last_release_vs_capture),
    CHECK_CASE(trim_vs_stream_destroy),
    CHECK_CASE(trim_vs_stream_synchronize),
    CHECK_CASE(trim_vs_capture),
    CHECK_CASE(clear_vs_stream_destroy),
    CHECK_CASE(clear_vs_stream_synchronize),
    CHECK_CASE(clear_vs_capture),
    CHECK_CASE(alloc_free_vs_stream_destroy),
    CHECK_CASE(alloc_free_vs_stream_synchronize),
    CHECK_CASE(alloc_free_vs_capture),
    CHECK_CASE(stats_vs_stream_destroy),
    CHECK_CASE(stats_vs_stream_synchronize),
    CHECK_CASE(stats_vs_capture),
};
CHECK_MAIN(cases, CHECK_ON_ALL)
