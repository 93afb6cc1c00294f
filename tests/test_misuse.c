/* Deliberate misuse, data-driven: one row per (public function, kind of bad
 * argument).
 *
 * Each row runs against a fresh fixture: a device, an idle stream `s`, a
 * stream `s_cap` that is capturing into `pool`, a pool with live
 * allocations, a freed block, a cached free segment, recorded objects and a
 * parameter block, a second pool with a live allocation, and a graph
 * captured with the pool (launched once). The driver takes a snapshot of
 * everything a caller can observe (both pools' stats, buffer counts, seal
 * flags, capture states of both streams, the graph's replays and pool, the
 * parameter block's address and contents, drops so far), runs the row,
 * takes the snapshot again and checks that nothing changed (beyond what the
 * row declares it may change), then tears the fixture down and checks that
 * every recorded object was dropped exactly once and every object handed
 * to a failed call never.
 *
 * A row checks the documented status and the out-pointers: untouched (set
 * to a sentinel before the call) where a failed call "changes nothing",
 * NULL where the header says so. Rows about "a stream of another device"
 * open the other backend's device; where there is none (the host backend
 * without a GPU) they check nothing.
 *
 * tests/check_api_coverage.sh fails when a function declared in
 * include/capturepool.h is named by no row of `rows` below: a new public
 * function cannot be left out of this table.
 *
 * A second table, `wrong_rows`, hands every handle argument of every public
 * function each live handle of another type (a stream as a pool, a device
 * as a stream, ...) in the same fixture and checks the status, the message
 * naming both types, and that nothing changed;
 * tests/check_wrong_type_coverage.sh fails when a handle argument declared
 * in the public headers has no row there.
 */
#include "check.h" /* first: it sets _POSIX_C_SOURCE */
#include "helpers.h"

#include "capturepool_nccl.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h> /* alarm, write, _exit */

#define MiB ((size_t)1024 * 1024)

/* ---- refusals name their function -------------------------------------------- */

/* CHECK_STATUS, and for a call of a public function that failed as
 * expected, a check that cpool_last_error() starts with that function's
 * name and ": " (its first words say who refused, whatever layer found the
 * reason). A status a capture body returned is the body's, worded by it (or
 * not at all): those rows use CHECK_BODY_STATUS. */
static int check_named_status_(cpool_status got, cpool_status want, const char *call, const char *want_text,
                               const char *file, int line) {
    if (!check_status_(got, want, call, want_text, file, line)) return 0;
    size_t name_len = strcspn(call, "(");
    if (got == CPOOL_OK || strncmp(call, "cpool_", 6) != 0 || call[name_len] != '(') return 1;
    const char *last = cpool_last_error();
    if (strncmp(last, call, name_len) == 0 && strncmp(last + name_len, ": ", 2) == 0) return 1;
    check_report_(file, line, "%.*s refused, but cpool_last_error does not start with its name: \"%s\"", (int)name_len,
                  call, last);
    return 0;
}
#undef CHECK_STATUS
#define CHECK_STATUS(call, expected) check_named_status_((call), (expected), #call, #expected, __FILE__, __LINE__)
#define CHECK_BODY_STATUS(call, expected) check_status_((call), (expected), #call, #expected, __FILE__, __LINE__)

/* ---- fixture ------------------------------------------------------------------ */

enum {
    NREC = 3,         /* objects recorded in pool */
    OBJ_POOL2 = NREC, /* the one recorded in pool2 */
    OBJ_SPARE,        /* handed to failing calls only: must never be dropped */
    NOBJ
};

typedef struct fixture {
    cpool_device *dev;
    cpool_backend backend;
    cpool_stream *s;     /* idle, not capturing */
    cpool_stream *s_cap; /* capturing into pool (ACTIVE) */
    cpool_pool *pool;
    cpool_pool *pool2;  /* a second pool: its pointers are foreign to pool */
    cpool_graph *g;     /* captured with pool on s, launched once */
    cpool_param *param; /* 64 bytes in pool */
    cpool_event *ev;    /* recorded on s, complete */
    void *a, *b;        /* live in pool */
    size_t a_bytes;
    void *freed;    /* handed out by pool, then freed */
    void *cap_ptr;  /* allocated under s_cap's capture, live */
    void *other;    /* live in pool2 */
    void *host_buf; /* plain malloc */
    drop_log log;
    tracked objs[NOBJ];
    int recorded[NOBJ]; /* drops each object must end with */
    int graph_runs;     /* g's captured host function */
    int body_calls;     /* bodies handed to capture calls */
    /* Another device (the other backend), only where one is present. */
    cpool_device *dev2;
    cpool_stream *s2;
} fixture;

/* CHECK_EQ that also says whether it held (for setup code). */
static inline int check_eq_ret_(unsigned long long a, unsigned long long b, const char *text, int line) {
    if (a == b) return 1;
    check_report_(__FILE__, line, "%s: %llu vs %llu", text, a, b);
    return 0;
}
#define CHECK_EQ_RET_(a, b) check_eq_ret_((unsigned long long)(a), (unsigned long long)(b), #a " == " #b, __LINE__)

static void *const SENTINEL = (void *)&check_case_failures_; /* any address a call cannot hand out */

static cpool_status body_count(cpool_stream *s, void *ctx) {
    fixture *f = (fixture *)ctx;
    (void)s;
    f->body_calls++;
    return CPOOL_OK;
}

static cpool_status body_fail(cpool_stream *s, void *ctx) {
    fixture *f = (fixture *)ctx;
    (void)s;
    f->body_calls++;
    return CPOOL_ERR_BACKEND;
}

/* The graph g runs: a scratch allocation under capture, a memset into it,
 * a host function that counts replays, the free. */
static cpool_status body_graph(cpool_stream *s, void *ctx) {
    fixture *f = (fixture *)ctx;
    void *scratch = NULL;
    cpool_status st = cpool_alloc(f->pool, 4096, s, &scratch);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, 0x5a, 4096);
    if (st == CPOOL_OK) st = cpool_launch_host(s, cb_inc, &f->graph_runs);
    if (scratch && cpool_free(f->pool, scratch, s) != CPOOL_OK && st == CPOOL_OK) st = CPOOL_ERR_BACKEND;
    return st;
}

static int fixture_make(fixture *f, cpool_device *dev) {
    int i;
    int v = 7;
    memset(f, 0, sizeof *f);
    f->dev = dev;
    f->backend = cpool_device_backend(dev);
    drop_log_init(&f->log);
    for (i = 0; i < NOBJ; i++) tracked_init(&f->objs[i], &f->log, i, NULL);
    if (!CHECK_OK(cpool_stream_create(dev, &f->s))) return 0;
    if (!CHECK_OK(cpool_stream_create(dev, &f->s_cap))) return 0;
    if (!CHECK_OK(cpool_pool_create(dev, NULL, &f->pool))) return 0;
    if (!CHECK_OK(cpool_pool_create(dev, NULL, &f->pool2))) return 0;

    /* Live blocks, one to be freed, and a whole cached segment (12 MiB gets
     * a segment of its own). */
    f->a_bytes = 3000;
    if (!CHECK_OK(cpool_alloc(f->pool, f->a_bytes, f->s, &f->a))) return 0;
    if (!CHECK_OK(cpool_alloc(f->pool, 100000, f->s, &f->b))) return 0;
    if (!CHECK_OK(cpool_alloc(f->pool, 512, f->s, &f->freed))) return 0;
    if (!CHECK_OK(cpool_memset_async(f->s, f->a, 1, f->a_bytes))) return 0;
    {
        void *big = NULL;
        if (!CHECK_OK(cpool_alloc(f->pool, 12 * MiB, f->s, &big))) return 0;
        if (!CHECK_OK(cpool_free(f->pool, big, f->s))) return 0;
    }
    if (!CHECK_OK(cpool_alloc(f->pool2, 777, f->s, &f->other))) return 0;
    f->host_buf = malloc(4096);
    if (!f->host_buf) return 0;

    for (i = 0; i < NREC; i++) {
        if (!CHECK_OK(cpool_pool_record(f->pool, &f->objs[i], tracked_drop, NULL))) return 0;
        f->recorded[i] = 1;
    }
    if (!CHECK_OK(cpool_pool_record(f->pool2, &f->objs[OBJ_POOL2], tracked_drop, NULL))) return 0;
    f->recorded[OBJ_POOL2] = 1;

    if (!CHECK_OK(cpool_param_create(f->pool, 64, &f->param))) return 0;
    if (!CHECK_OK(cpool_param_set(f->param, &v, sizeof v, f->s))) return 0;
    if (!CHECK_OK(cpool_event_create(dev, &f->ev))) return 0;
    if (!CHECK_OK(cpool_event_record(f->ev, f->s))) return 0;

    if (!CHECK_OK(cpool_capture(f->s, f->pool, CPOOL_CAPTURE_GLOBAL, body_graph, f, &f->g))) return 0;
    if (!CHECK_OK(cpool_graph_launch(f->g, f->s))) return 0;
    if (!CHECK_OK(cpool_stream_synchronize(f->s))) return 0;
    if (!CHECK_EQ_RET_(aload(&f->graph_runs), 1)) return 0;

    /* s_cap captures into pool, with a live graph allocation and some work.
     * Relaxed mode: on CUDA a global-mode capture would forbid this thread's
     * own synchronisation of s (the snapshots do that). */
    if (!CHECK_OK(cpool_capture_begin(f->s_cap, f->pool, CPOOL_CAPTURE_RELAXED))) return 0;
    if (!CHECK_OK(cpool_alloc(f->pool, 2048, f->s_cap, &f->cap_ptr))) return 0;
    if (!CHECK_OK(cpool_memset_async(f->s_cap, f->cap_ptr, 3, 2048))) return 0;

    /* Freed last, so that no allocation above got its memory again. */
    if (!CHECK_OK(cpool_free(f->pool, f->freed, f->s))) return 0;

    /* The other backend's device, where one is present. */
    {
        cpool_backend other = f->backend == CPOOL_BACKEND_HOST ? CPOOL_BACKEND_CUDA : CPOOL_BACKEND_HOST;
        if (cpool_device_open(other, 0, &f->dev2) == CPOOL_OK) {
            if (!CHECK_OK(cpool_stream_create(f->dev2, &f->s2))) return 0;
        } else {
            f->dev2 = NULL;
        }
    }
    return 1;
}

static void fixture_teardown(fixture *f) {
    int i;
    if (f->s_cap) {
        cpool_capture_state cs = CPOOL_CAPTURE_NONE;
        CHECK_OK(cpool_capture_status(f->s_cap, &cs));
        if (cs != CPOOL_CAPTURE_NONE) {
            cpool_graph *g2 = NULL;
            cpool_status st = cpool_capture_end(f->s_cap, &g2);
            CHECK(st == (cs == CPOOL_CAPTURE_ACTIVE ? CPOOL_OK : CPOOL_ERR_CAPTURE_INVALIDATED));
            cpool_graph_release(g2);
        }
        if (f->cap_ptr) CHECK_OK(cpool_free(f->pool, f->cap_ptr, f->s_cap));
    }
    if (f->a) CHECK_OK(cpool_free(f->pool, f->a, f->s));
    if (f->b) CHECK_OK(cpool_free(f->pool, f->b, f->s));
    if (f->other) CHECK_OK(cpool_free(f->pool2, f->other, f->s));
    if (f->s) CHECK_OK(cpool_stream_synchronize(f->s));
    if (f->pool) {
        cpool_pool_stats st = stats_of(f->pool);
        /* Only the parameter block is still allocated. */
        CHECK_EQ(st.allocated_bytes, f->param ? 64 : 0);
        CHECK_EQ(st.alloc_count - st.free_count, f->param ? 1 : 0);
        CHECK_STATS_SANE(st);
    }
    if (f->pool2) {
        cpool_pool_stats st = stats_of(f->pool2);
        CHECK_EQ(st.allocated_bytes, 0);
        CHECK_EQ(st.alloc_count, st.free_count);
    }
    cpool_event_destroy(f->ev);
    cpool_graph_release(f->g);
    cpool_pool_release(f->pool);
    cpool_pool_release(f->pool2);
    cpool_stream_destroy(f->s);
    cpool_stream_destroy(f->s_cap);
    cpool_stream_destroy(f->s2);
    cpool_device_close(f->dev2);
    cpool_wait_deferred();
    free(f->host_buf);
    for (i = 0; i < NOBJ; i++)
        if (aload(&f->objs[i].drops) != f->recorded[i])
            check_report_(__FILE__, __LINE__, "object %d dropped %d times, expected %d", i, aload(&f->objs[i].drops),
                          f->recorded[i]);
}

/* ---- snapshot of what a caller can observe ----------------------------------- */

typedef struct snapshot {
    cpool_pool_stats st, st2;
    size_t buffers, buffers2;
    bool sealed, sealed2;
    bool suspended, suspended2;
    cpool_capture_state state_s, state_cap;
    uint64_t replays;
    cpool_pool *graph_pool;
    size_t graph_buffers;
    void *param_ptr;
    int param_value;
    int drops;
    int graph_runs;
    cpool_backend backend;
    cpool_status event_query;
} snapshot;

static void snapshot_take(fixture *f, snapshot *x) {
    memset(x, 0, sizeof *x);
    /* Let s's work (if a row enqueued any) finish; never synchronise s_cap. */
    CHECK_OK(cpool_stream_synchronize(f->s));
    x->st = stats_of(f->pool);
    x->st2 = stats_of(f->pool2);
    x->buffers = cpool_pool_buffer_count(f->pool);
    x->buffers2 = cpool_pool_buffer_count(f->pool2);
    x->sealed = cpool_pool_is_sealed(f->pool);
    x->sealed2 = cpool_pool_is_sealed(f->pool2);
    x->suspended = cpool_pool_is_suspended(f->pool);
    x->suspended2 = cpool_pool_is_suspended(f->pool2);
    CHECK_OK(cpool_capture_status(f->s, &x->state_s));
    CHECK_OK(cpool_capture_status(f->s_cap, &x->state_cap));
    x->replays = cpool_graph_replays(f->g);
    x->graph_pool = cpool_graph_pool(f->g);
    x->graph_buffers = cpool_graph_pool_buffer_count(f->g);
    x->param_ptr = cpool_param_device_ptr(f->param);
    x->param_value = -1;
    CHECK_OK(read_back(f->s, &x->param_value, x->param_ptr, sizeof x->param_value));
    x->drops = aload(&f->log.count);
    x->graph_runs = aload(&f->graph_runs);
    x->backend = cpool_device_backend(f->dev);
    x->event_query = f->ev ? cpool_event_query(f->ev) : CPOOL_OK;
}

/* What a row may change: a documented side effect of its failure. */
enum { MAY_INVALIDATE_CAPTURE = 1 };

static void snapshot_compare(const snapshot *x, const snapshot *y, unsigned may) {
    CHECK_STATS_EQ(x->st, y->st);
    CHECK_STATS_EQ(x->st2, y->st2);
    CHECK_EQ(x->buffers, y->buffers);
    CHECK_EQ(x->buffers2, y->buffers2);
    CHECK_EQ(x->sealed, y->sealed);
    CHECK_EQ(x->sealed2, y->sealed2);
    CHECK_EQ(x->suspended, y->suspended);
    CHECK_EQ(x->suspended2, y->suspended2);
    CHECK_EQ(x->st.host_kept_bytes, y->st.host_kept_bytes);
    CHECK_EQ(x->st.host_reserved_bytes, y->st.host_reserved_bytes);
    CHECK_EQ(x->st2.host_kept_bytes, y->st2.host_kept_bytes);
    CHECK_EQ(x->st2.host_reserved_bytes, y->st2.host_reserved_bytes);
    CHECK_EQ(x->state_s, y->state_s);
    if (may & MAY_INVALIDATE_CAPTURE)
        CHECK_EQ(y->state_cap, CPOOL_CAPTURE_INVALIDATED);
    else
        CHECK_EQ(x->state_cap, y->state_cap);
    CHECK_EQ(x->replays, y->replays);
    CHECK_PTR_EQ(x->graph_pool, y->graph_pool);
    CHECK_EQ(x->graph_buffers, y->graph_buffers);
    CHECK_PTR_EQ(x->param_ptr, y->param_ptr);
    CHECK_EQ(x->param_value, y->param_value);
    CHECK_EQ(x->drops, y->drops);
    CHECK_EQ(x->graph_runs, y->graph_runs);
    CHECK_EQ(x->backend, y->backend);
    CHECK_EQ(x->event_query, y->event_query);
}

/* ---- out-pointer checks --------------------------------------------------------- */

/* The call left *out as it was (a failed call changes nothing). */
#define CHECK_UNTOUCHED(out) CHECK_PTR_EQ((out), SENTINEL)
/* The call made no handle: *out is NULL or untouched. */
#define CHECK_NO_HANDLE(out) CHECK((const void *)(out) == NULL || (const void *)(out) == SENTINEL)

/* ---- the rows --------------------------------------------------------------------- */

#define ROW_FN(name) static void name(fixture *f)
#define INV CPOOL_ERR_INVALID_ARGUMENT

/* version and status */
ROW_FN(version_string_matches_macros) {
    char want[64];
    (void)f;
    snprintf(want, sizeof want, "%d.%d.%d", CPOOL_VERSION_MAJOR, CPOOL_VERSION_MINOR, CPOOL_VERSION_PATCH);
    CHECK_STR_EQ(cpool_version_string(), want);
}
/* The number and the string of the linked library say the same version,
 * the header's. */
ROW_FN(version_number_matches_macros) {
    char from_number[64];
    unsigned v = cpool_version();
    (void)f;
    CHECK_EQ(v, CPOOL_VERSION_NUMBER);
    snprintf(from_number, sizeof from_number, "%u.%u.%u", v / 10000, v / 100 % 100, v % 100);
    CHECK_STR_EQ(cpool_version_string(), from_number);
}
ROW_FN(status_string_out_of_range) {
    (void)f;
    CHECK(cpool_status_string((cpool_status)1000) != NULL);
    CHECK(cpool_status_string((cpool_status)-1) != NULL);
    CHECK(cpool_status_string((cpool_status)(CPOOL_ERR_UNSUPPORTED + 1)) != NULL);
    CHECK(strlen(cpool_status_string((cpool_status)1000)) > 0);
}
ROW_FN(last_error_after_failure) {
    cpool_stream *out = (cpool_stream *)SENTINEL;
    CHECK_STATUS(cpool_stream_create(NULL, &out), INV);
    CHECK(cpool_last_error() != NULL);
    CHECK(strlen(cpool_last_error()) > 0);
    (void)f;
}

/* devices */
ROW_FN(device_open_null_out) { (void)f; CHECK_STATUS(cpool_device_open(CPOOL_BACKEND_HOST, 0, NULL), INV); }
ROW_FN(device_open_negative_ordinal) {
    cpool_device *out = (cpool_device *)SENTINEL;
    (void)f;
    CHECK_STATUS(cpool_device_open(CPOOL_BACKEND_HOST, -1, &out), INV);
    CHECK_UNTOUCHED(out);
    CHECK_STATUS(cpool_device_open(CPOOL_BACKEND_AUTO, -5, &out), INV);
    CHECK_UNTOUCHED(out);
}
ROW_FN(device_open_bad_backend) {
    cpool_device *out = (cpool_device *)SENTINEL;
    (void)f;
    CHECK_STATUS(cpool_device_open((cpool_backend)42, 0, &out), INV);
    CHECK_UNTOUCHED(out);
    CHECK_STATUS(cpool_device_open((cpool_backend)-1, 0, &out), INV);
    CHECK_UNTOUCHED(out);
}
ROW_FN(device_open_no_such_ordinal) {
    cpool_device *out = (cpool_device *)SENTINEL;
    (void)f;
    CHECK_STATUS(cpool_device_open(CPOOL_BACKEND_HOST, 1, &out), CPOOL_ERR_NO_DEVICE);
    CHECK_UNTOUCHED(out);
    CHECK_STATUS(cpool_device_open(CPOOL_BACKEND_CUDA, 1 << 20, &out), CPOOL_ERR_NO_DEVICE);
    CHECK_UNTOUCHED(out);
}
ROW_FN(device_close_null) { (void)f; cpool_device_close(NULL); }
ROW_FN(device_backend_null) { (void)f; CHECK_EQ(cpool_device_backend(NULL), CPOOL_BACKEND_AUTO); }

/* streams */
ROW_FN(stream_create_null_device) {
    cpool_stream *out = (cpool_stream *)SENTINEL;
    (void)f;
    CHECK_STATUS(cpool_stream_create(NULL, &out), INV);
    CHECK_UNTOUCHED(out);
}
ROW_FN(stream_create_null_out) { CHECK_STATUS(cpool_stream_create(f->dev, NULL), INV); }
ROW_FN(stream_wrap_null_device) {
    cpool_stream *out = (cpool_stream *)SENTINEL;
    (void)f;
    CHECK_STATUS(cpool_stream_wrap(NULL, NULL, &out), INV);
    CHECK_UNTOUCHED(out);
}
ROW_FN(stream_wrap_null_out) { CHECK_STATUS(cpool_stream_wrap(f->dev, NULL, NULL), INV); }
ROW_FN(stream_wrap_on_host) {
    cpool_stream *out = (cpool_stream *)SENTINEL;
    if (f->backend != CPOOL_BACKEND_HOST) return; /* a real CUDA stream can be wrapped there */
    CHECK_STATUS(cpool_stream_wrap(f->dev, NULL, &out), CPOOL_ERR_UNSUPPORTED);
    CHECK_UNTOUCHED(out);
}
ROW_FN(stream_native_null) { (void)f; CHECK(cpool_stream_native(NULL) == NULL); }
ROW_FN(stream_synchronize_null) { (void)f; CHECK_STATUS(cpool_stream_synchronize(NULL), INV); }
/* Documented: a synchronize under capture breaks the capture (only end can follow). */
ROW_FN(stream_synchronize_capturing) {
    CHECK_STATUS(cpool_stream_synchronize(f->s_cap), CPOOL_ERR_CAPTURE_INVALIDATED);
}
ROW_FN(stream_destroy_null) { (void)f; cpool_stream_destroy(NULL); }
/* Documented: destroying a capturing stream discards the capture, and the
 * capture's pool reference with it (checked at teardown: pool's objects
 * are dropped exactly once). */
ROW_FN(stream_destroy_capturing) {
    cpool_stream *t = NULL;
    REQUIRE_OK(cpool_stream_create(f->dev, &t));
    REQUIRE_OK(cpool_capture_begin(t, f->pool, CPOOL_CAPTURE_RELAXED));
    CHECK_OK(cpool_launch_host(t, cb_inc, &f->graph_runs)); /* captured: never runs */
    cpool_stream_destroy(t);
}
ROW_FN(launch_host_null_stream) { CHECK_STATUS(cpool_launch_host(NULL, cb_inc, &f->graph_runs), INV); }
ROW_FN(launch_host_null_fn) { CHECK_STATUS(cpool_launch_host(f->s, NULL, NULL), INV); }
ROW_FN(memcpy_null_stream) { CHECK_STATUS(cpool_memcpy_async(NULL, f->host_buf, f->a, 16), INV); }
ROW_FN(memcpy_null_pointers) {
    CHECK_STATUS(cpool_memcpy_async(f->s, NULL, f->a, 16), INV);
    CHECK_STATUS(cpool_memcpy_async(f->s, f->host_buf, NULL, 16), INV);
}
ROW_FN(memcpy_size_zero) {
    CHECK_OK(cpool_memcpy_async(f->s, NULL, NULL, 0)); /* nothing is enqueued */
    CHECK_OK(cpool_memcpy_async(f->s_cap, NULL, NULL, 0));
}
ROW_FN(memset_null_stream) { CHECK_STATUS(cpool_memset_async(NULL, f->a, 0, 16), INV); }
ROW_FN(memset_null_pointer) { CHECK_STATUS(cpool_memset_async(f->s, NULL, 0, 16), INV); }
ROW_FN(memset_size_zero) {
    CHECK_OK(cpool_memset_async(f->s, NULL, 0, 0));
    CHECK_OK(cpool_memset_async(f->s_cap, NULL, 0, 0));
}

/* pools */
ROW_FN(pool_create_null_device) {
    cpool_pool *out = (cpool_pool *)SENTINEL;
    (void)f;
    CHECK_STATUS(cpool_pool_create(NULL, NULL, &out), INV);
    CHECK_UNTOUCHED(out);
}
ROW_FN(pool_create_null_out) { CHECK_STATUS(cpool_pool_create(f->dev, NULL, NULL), INV); }
ROW_FN(pool_create_struct_size_too_small) {
    cpool_pool *out = (cpool_pool *)SENTINEL;
    cpool_pool_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = 0;
    CHECK_STATUS(cpool_pool_create(f->dev, &o, &out), INV);
    CHECK_UNTOUCHED(out);
    o.struct_size = sizeof(size_t) - 1;
    CHECK_STATUS(cpool_pool_create(f->dev, &o, &out), INV);
    CHECK_UNTOUCHED(out);
}
ROW_FN(pool_create_reserve_over_max) {
    cpool_pool *out = (cpool_pool *)SENTINEL;
    cpool_pool_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.reserve_bytes = 8 * MiB;
    o.max_reserved_bytes = 4 * MiB;
    CHECK_STATUS(cpool_pool_create(f->dev, &o, &out), INV);
    CHECK_UNTOUCHED(out);
}
ROW_FN(pool_create_reserve_huge) {
    cpool_pool *out = (cpool_pool *)SENTINEL;
    cpool_pool_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.reserve_bytes = (uint64_t)1 << 60;
    CHECK_STATUS(cpool_pool_create(f->dev, &o, &out), CPOOL_ERR_OUT_OF_MEMORY);
    CHECK_UNTOUCHED(out);
}
ROW_FN(pool_create_reserve_max) {
    cpool_pool *out = (cpool_pool *)SENTINEL;
    cpool_pool_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.reserve_bytes = UINT64_MAX; /* rounding it up to 2 MiB must not wrap around */
    CHECK_STATUS(cpool_pool_create(f->dev, &o, &out), CPOOL_ERR_OUT_OF_MEMORY);
    CHECK_UNTOUCHED(out);
    if (out != (cpool_pool *)SENTINEL && out != NULL) {
        cpool_pool_stats st = stats_of(out);
        CHECK_STATS_SANE(st);
        cpool_pool_release(out);
    }
}
ROW_FN(pool_retain_null) { (void)f; CHECK(cpool_pool_retain(NULL) == NULL); }
ROW_FN(pool_release_null) { (void)f; cpool_pool_release(NULL); }
ROW_FN(pool_seal_null) { (void)f; cpool_pool_seal(NULL); }
ROW_FN(pool_unseal_null) { (void)f; cpool_pool_unseal(NULL); }
ROW_FN(pool_is_sealed_null) { (void)f; CHECK(!cpool_pool_is_sealed(NULL)); }
ROW_FN(pool_grows_in_place_null) { (void)f; CHECK(!cpool_pool_grows_in_place(NULL)); }
ROW_FN(pool_record_null_pool) {
    size_t index = 12345;
    CHECK_STATUS(cpool_pool_record(NULL, &f->objs[OBJ_SPARE], tracked_drop, &index), INV);
    CHECK_EQ(index, 12345); /* untouched; the object is never dropped (teardown) */
}
ROW_FN(pool_buffer_count_null) { (void)f; CHECK_EQ(cpool_pool_buffer_count(NULL), 0); }
ROW_FN(pool_clear_buffers_null) { (void)f; cpool_pool_clear_buffers(NULL); }
ROW_FN(alloc_null_pool) {
    void *p = SENTINEL;
    CHECK_STATUS(cpool_alloc(NULL, 64, f->s, &p), INV);
    CHECK_UNTOUCHED(p);
}
ROW_FN(alloc_null_stream) {
    void *p = SENTINEL;
    CHECK_STATUS(cpool_alloc(f->pool, 64, NULL, &p), INV);
    CHECK_UNTOUCHED(p);
}
ROW_FN(alloc_null_out) { CHECK_STATUS(cpool_alloc(f->pool, 64, f->s, NULL), INV); }
ROW_FN(alloc_size_zero) {
    void *p = SENTINEL;
    CHECK_STATUS(cpool_alloc(f->pool, 0, f->s, &p), INV);
    CHECK_UNTOUCHED(p);
    CHECK_STATUS(cpool_alloc(f->pool, 0, f->s_cap, &p), INV);
    CHECK_UNTOUCHED(p);
}
/* More than any device holds: out of memory, and nothing changes (the
 * cached segment stays). */
ROW_FN(alloc_size_max) {
    void *p = SENTINEL;
    CHECK_STATUS(cpool_alloc(f->pool, SIZE_MAX, f->s, &p), CPOOL_ERR_OUT_OF_MEMORY);
    CHECK_UNTOUCHED(p);
}
ROW_FN(alloc_size_2_pow_60) {
    void *p = SENTINEL;
    CHECK_STATUS(cpool_alloc(f->pool, (size_t)1 << 60, f->s, &p), CPOOL_ERR_OUT_OF_MEMORY);
    CHECK_UNTOUCHED(p);
}
ROW_FN(alloc_size_huge_under_capture) {
    void *p = SENTINEL;
    CHECK_STATUS(cpool_alloc(f->pool, SIZE_MAX, f->s_cap, &p), CPOOL_ERR_OUT_OF_MEMORY);
    CHECK_UNTOUCHED(p);
    CHECK_STATUS(cpool_alloc(f->pool2, (size_t)1 << 60, f->s_cap, &p), CPOOL_ERR_OUT_OF_MEMORY);
    CHECK_UNTOUCHED(p);
}
static void setup_seal(fixture *f) { cpool_pool_seal(f->pool); }
ROW_FN(alloc_sealed) {
    void *p = SENTINEL;
    CHECK_STATUS(cpool_alloc(f->pool, 64, f->s, &p), CPOOL_ERR_SEALED);
    CHECK_UNTOUCHED(p);
    CHECK_STATUS(cpool_alloc(f->pool, 64, f->s_cap, &p), CPOOL_ERR_SEALED);
    CHECK_UNTOUCHED(p);
}
ROW_FN(alloc_output_null_and_zero) {
    void *p = SENTINEL;
    CHECK_STATUS(cpool_alloc_output(NULL, 64, f->s, &p), INV);
    CHECK_STATUS(cpool_alloc_output(f->pool, 64, NULL, &p), INV);
    CHECK_STATUS(cpool_alloc_output(f->pool, 64, f->s, NULL), INV);
    CHECK_STATUS(cpool_alloc_output(f->pool, 0, f->s_cap, &p), INV);
    CHECK_UNTOUCHED(p);
}
ROW_FN(alloc_output_sealed) {
    void *p = SENTINEL;
    CHECK_STATUS(cpool_alloc_output(f->pool, 64, f->s_cap, &p), CPOOL_ERR_SEALED);
    CHECK_UNTOUCHED(p);
}
ROW_FN(alloc_stream_of_other_device) {
    void *p = SENTINEL;
    if (!f->s2) return; /* no second device here */
    CHECK_STATUS(cpool_alloc(f->pool, 64, f->s2, &p), INV);
    CHECK_UNTOUCHED(p);
}
ROW_FN(free_null_pool) { CHECK_STATUS(cpool_free(NULL, f->a, f->s), INV); }
ROW_FN(free_null_ptr) { CHECK_STATUS(cpool_free(f->pool, NULL, f->s), INV); }
ROW_FN(free_null_stream) { CHECK_STATUS(cpool_free(f->pool, f->a, NULL), INV); }
ROW_FN(free_twice) {
    CHECK_STATUS(cpool_free(f->pool, f->freed, f->s), INV);
    CHECK_STATUS(cpool_free(f->pool, f->freed, f->s_cap), INV);
}
ROW_FN(free_foreign_malloc) { CHECK_STATUS(cpool_free(f->pool, f->host_buf, f->s), INV); }
ROW_FN(free_foreign_stack) {
    int local = 0;
    CHECK_STATUS(cpool_free(f->pool, &local, f->s), INV);
}
ROW_FN(free_foreign_interior) {
    CHECK_STATUS(cpool_free(f->pool, (char *)f->a + 512, f->s), INV);
    CHECK_STATUS(cpool_free(f->pool, (char *)f->b + 1, f->s), INV);
}
ROW_FN(free_foreign_other_pool) {
    CHECK_STATUS(cpool_free(f->pool, f->other, f->s), INV);
    CHECK_STATUS(cpool_free(f->pool2, f->a, f->s), INV);
}
ROW_FN(free_foreign_under_capture) {
    CHECK_STATUS(cpool_free(f->pool, f->host_buf, f->s_cap), INV);
    CHECK_STATUS(cpool_free(f->pool2, f->a, f->s_cap), INV); /* must not make the capture hold pool2 */
}
ROW_FN(free_foreign_handle) {
    /* A pool handle is memory too, but not memory the pool handed out. */
    CHECK_STATUS(cpool_free(f->pool, (void *)f->pool2, f->s), INV);
    CHECK_STATUS(cpool_free(f->pool, (void *)f->s, f->s), INV);
}
/* A parameter block lives as long as its pool: it was not handed out by
 * cpool_alloc, so cpool_free must refuse it. */
ROW_FN(free_foreign_param_block) { CHECK_STATUS(cpool_free(f->pool, cpool_param_device_ptr(f->param), f->s), INV); }
ROW_FN(free_stream_of_other_device) {
    if (!f->s2) return;
    CHECK_STATUS(cpool_free(f->pool, f->a, f->s2), INV);
}
static void fill_stats(cpool_pool_stats *st, size_t struct_size) {
    memset(st, 0xab, sizeof *st);
    st->struct_size = struct_size;
}
static void check_stats_untouched(const cpool_pool_stats *st, size_t struct_size) {
    const unsigned char *p = (const unsigned char *)st;
    size_t i;
    CHECK_EQ(st->struct_size, struct_size);
    for (i = sizeof st->struct_size; i < sizeof *st; i++)
        if (p[i] != 0xab) {
            check_report_(__FILE__, __LINE__, "stats byte %zu written by a failed call", i);
            break;
        }
}
/* Generation bits over a zero address: no object is there to read, so the
 * calls must not read one to tell why they refuse it. */
ROW_FN(pool_calls_null_address_with_generation) {
    cpool_pool *bogus = (cpool_pool *)((uintptr_t)1 << 48);
    cpool_pool_stats st;
    (void)f;
    fill_stats(&st, sizeof st);
    CHECK(cpool_pool_retain(bogus) == NULL);
    CHECK_STATUS(cpool_pool_get_stats(bogus, &st), INV);
    check_stats_untouched(&st, sizeof st);
    cpool_pool_release(bogus);
    CHECK(strlen(cpool_last_error()) > 0);
}
ROW_FN(get_stats_null_pool) {
    cpool_pool_stats st;
    (void)f;
    fill_stats(&st, sizeof st);
    CHECK_STATUS(cpool_pool_get_stats(NULL, &st), INV);
    check_stats_untouched(&st, sizeof st);
}
ROW_FN(get_stats_null_out) { CHECK_STATUS(cpool_pool_get_stats(f->pool, NULL), INV); }
ROW_FN(get_stats_struct_size_too_small) {
    cpool_pool_stats st;
    size_t sizes[3];
    int i;
    sizes[0] = 0;
    sizes[1] = sizeof(size_t);
    sizes[2] = offsetof(cpool_pool_stats, segment_count) + sizeof st.segment_count - 1;
    for (i = 0; i < 3; i++) {
        fill_stats(&st, sizes[i]);
        CHECK_STATUS(cpool_pool_get_stats(f->pool, &st), INV);
        check_stats_untouched(&st, sizes[i]);
    }
}
ROW_FN(trim_null) { (void)f; CHECK_STATUS(cpool_pool_trim(NULL), INV); }
ROW_FN(suspend_null) {
    (void)f;
    CHECK_STATUS(cpool_pool_suspend(NULL, CPOOL_SUSPEND_KEEP_CONTENTS), INV);
    CHECK_STATUS(cpool_pool_suspend(NULL, CPOOL_SUSPEND_DISCARD), INV);
}
ROW_FN(suspend_bad_mode) {
    CHECK_STATUS(cpool_pool_suspend(f->pool2, (cpool_suspend_mode)2), INV);
    CHECK_STATUS(cpool_pool_suspend(f->pool2, (cpool_suspend_mode)-1), INV);
    CHECK(!cpool_pool_is_suspended(f->pool2));
}
/* s_cap captures into pool: the suspend is refused and the capture goes on. */
ROW_FN(suspend_capture_uses_pool) {
    CHECK_STATUS(cpool_pool_suspend(f->pool, CPOOL_SUSPEND_KEEP_CONTENTS), INV);
    CHECK_STATUS(cpool_pool_suspend(f->pool, CPOOL_SUSPEND_DISCARD), INV);
    CHECK(!cpool_pool_is_suspended(f->pool));
}
ROW_FN(resume_null) { (void)f; CHECK_STATUS(cpool_pool_resume(NULL), INV); }
ROW_FN(resume_not_suspended) {
    CHECK_OK(cpool_pool_resume(f->pool));
    CHECK_OK(cpool_pool_resume(f->pool2));
}
ROW_FN(is_suspended_null) { (void)f; CHECK(!cpool_pool_is_suspended(NULL)); }
ROW_FN(wait_deferred_nothing_pending) {
    (void)f;
    cpool_wait_deferred();
    cpool_wait_deferred();
}

/* capture */
ROW_FN(capture_begin_null_stream) { CHECK_STATUS(cpool_capture_begin(NULL, f->pool, CPOOL_CAPTURE_GLOBAL), INV); }
ROW_FN(capture_begin_bad_mode) {
    CHECK_STATUS(cpool_capture_begin(f->s, f->pool, (cpool_capture_mode)7), INV);
    CHECK_STATUS(cpool_capture_begin(f->s, f->pool, (cpool_capture_mode)-1), INV);
    CHECK_STATUS(cpool_capture_begin(f->s, NULL, (cpool_capture_mode)3), INV);
}
ROW_FN(capture_begin_already_capturing) {
    CHECK_STATUS(cpool_capture_begin(f->s_cap, f->pool2, CPOOL_CAPTURE_GLOBAL), CPOOL_ERR_ALREADY_CAPTURING);
    CHECK_STATUS(cpool_capture_begin(f->s_cap, NULL, CPOOL_CAPTURE_RELAXED), CPOOL_ERR_ALREADY_CAPTURING);
}
ROW_FN(capture_begin_pool_of_other_device) {
    if (!f->s2) return;
    CHECK_STATUS(cpool_capture_begin(f->s2, f->pool, CPOOL_CAPTURE_GLOBAL), INV);
    {
        cpool_capture_state cs = CPOOL_CAPTURE_ACTIVE;
        CHECK_OK(cpool_capture_status(f->s2, &cs));
        CHECK_EQ(cs, CPOOL_CAPTURE_NONE);
    }
}
ROW_FN(capture_end_null_stream) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    (void)f;
    CHECK_STATUS(cpool_capture_end(NULL, &g), INV);
    CHECK_NO_HANDLE(g);
}
/* Documented: with a NULL graph_out the capture goes on. */
ROW_FN(capture_end_null_out) { CHECK_STATUS(cpool_capture_end(f->s_cap, NULL), INV); }
ROW_FN(capture_end_not_capturing) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_STATUS(cpool_capture_end(f->s, &g), CPOOL_ERR_NOT_CAPTURING);
    CHECK(g == NULL);
}
ROW_FN(capture_attach_null_args) {
    CHECK_STATUS(cpool_capture_attach(NULL, f->pool), INV);
    CHECK_STATUS(cpool_capture_attach(f->s, NULL), INV);
}
ROW_FN(capture_attach_not_capturing) { CHECK_STATUS(cpool_capture_attach(f->s, f->pool), CPOOL_ERR_NOT_CAPTURING); }
/* A capture of the library's needs no attach: its pools serve it. */
ROW_FN(capture_attach_library_capture) {
    CHECK_STATUS(cpool_capture_attach(f->s_cap, f->pool2), CPOOL_ERR_ALREADY_CAPTURING);
}
ROW_FN(capture_attach_pool_of_other_device) {
    if (!f->s2) return;
    CHECK_STATUS(cpool_capture_attach(f->s2, f->pool), INV);
}
ROW_FN(capture_detach_null_args) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_STATUS(cpool_capture_detach(NULL, &g), INV);
    CHECK_NO_HANDLE(g);
    CHECK_STATUS(cpool_capture_detach(f->s, NULL), INV);
}
ROW_FN(capture_detach_not_attached) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_STATUS(cpool_capture_detach(f->s, &g), CPOOL_ERR_NOT_CAPTURING);
    CHECK(g == NULL);
}
/* cpool_capture_end ends a capture of the library's: the capture goes on. */
ROW_FN(capture_detach_library_capture) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_STATUS(cpool_capture_detach(f->s_cap, &g), INV);
    CHECK(g == NULL);
}
ROW_FN(capture_note_scratch_null_args) {
    CHECK_STATUS(cpool_capture_note_scratch(NULL, f->pool, (void *)SENTINEL, 0, 1), INV);
    CHECK_STATUS(cpool_capture_note_scratch(f->s_cap, NULL, (void *)SENTINEL, 0, 1), INV);
    CHECK_STATUS(cpool_capture_note_scratch(f->s_cap, f->pool, NULL, 0, 1), INV);
}
ROW_FN(capture_note_scratch_not_capturing) {
    CHECK_STATUS(cpool_capture_note_scratch(f->s, f->pool, (void *)SENTINEL, 0, 1), CPOOL_ERR_NOT_CAPTURING);
}
/* A block the capture did not allocate from the pool. */
ROW_FN(capture_note_scratch_foreign_block) {
    CHECK_STATUS(cpool_capture_note_scratch(f->s_cap, f->pool, (void *)SENTINEL, 0, 1), INV);
}
ROW_FN(capture_status_null_stream) {
    cpool_capture_state cs = (cpool_capture_state)99;
    (void)f;
    CHECK_STATUS(cpool_capture_status(NULL, &cs), INV);
    CHECK_EQ(cs, 99);
}
ROW_FN(capture_status_null_out) {
    CHECK_STATUS(cpool_capture_status(f->s, NULL), INV);
    CHECK_STATUS(cpool_capture_status(f->s_cap, NULL), INV);
}
ROW_FN(capture_null_stream) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_STATUS(cpool_capture(NULL, f->pool, CPOOL_CAPTURE_GLOBAL, body_count, f, &g), INV);
    CHECK_NO_HANDLE(g);
    CHECK_EQ(f->body_calls, 0);
}
ROW_FN(capture_null_body) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_STATUS(cpool_capture(f->s, f->pool, CPOOL_CAPTURE_GLOBAL, NULL, f, &g), INV);
    CHECK_NO_HANDLE(g);
}
ROW_FN(capture_null_out) {
    CHECK_STATUS(cpool_capture(f->s, f->pool, CPOOL_CAPTURE_GLOBAL, body_count, f, NULL), INV);
    CHECK_EQ(f->body_calls, 0);
}
ROW_FN(capture_bad_mode) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_STATUS(cpool_capture(f->s, f->pool, (cpool_capture_mode)9, body_count, f, &g), INV);
    CHECK_NO_HANDLE(g);
    CHECK_EQ(f->body_calls, 0);
}
ROW_FN(capture_already_capturing) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_STATUS(cpool_capture(f->s_cap, f->pool, CPOOL_CAPTURE_GLOBAL, body_count, f, &g),
                 CPOOL_ERR_ALREADY_CAPTURING);
    CHECK_NO_HANDLE(g);
    CHECK_EQ(f->body_calls, 0);
}
/* Documented: a failing body's status comes back, the partial graph is
 * discarded, the stream is usable again and *graph_out is NULL. */
ROW_FN(capture_body_fails) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_BODY_STATUS(cpool_capture(f->s, f->pool, CPOOL_CAPTURE_GLOBAL, body_fail, f, &g), CPOOL_ERR_BACKEND);
    CHECK(g == NULL);
    CHECK_EQ(f->body_calls, 1);
}

/* graphs */
ROW_FN(graph_launch_null_graph) { CHECK_STATUS(cpool_graph_launch(NULL, f->s), INV); }
ROW_FN(graph_launch_null_stream) { CHECK_STATUS(cpool_graph_launch(f->g, NULL), INV); }
ROW_FN(graph_launch_capturing_stream) { CHECK_STATUS(cpool_graph_launch(f->g, f->s_cap), INV); }
ROW_FN(graph_launch_stream_of_other_device) {
    if (!f->s2) return;
    CHECK_STATUS(cpool_graph_launch(f->g, f->s2), INV);
}
static void setup_clear(fixture *f) {
    cpool_pool_clear_buffers(f->pool); /* g is stale from here on */
    CHECK_EQ(aload(&f->log.count), NREC);
}
ROW_FN(graph_launch_stale) { CHECK_STATUS(cpool_graph_launch(f->g, f->s), CPOOL_ERR_STALE_GRAPH); }
ROW_FN(graph_upload_null_graph) { CHECK_STATUS(cpool_graph_upload(NULL, f->s), INV); }
ROW_FN(graph_upload_null_stream) { CHECK_STATUS(cpool_graph_upload(f->g, NULL), INV); }
ROW_FN(graph_upload_capturing_stream) { CHECK_STATUS(cpool_graph_upload(f->g, f->s_cap), INV); }
ROW_FN(graph_upload_stale) { CHECK_STATUS(cpool_graph_upload(f->g, f->s), CPOOL_ERR_STALE_GRAPH); }
ROW_FN(graph_upload_stream_of_other_device) {
    if (!f->s2) return;
    CHECK_STATUS(cpool_graph_upload(f->g, f->s2), INV);
}
ROW_FN(graph_replays_null) { (void)f; CHECK_EQ(cpool_graph_replays(NULL), 0); }
ROW_FN(graph_stats_null) {
    cpool_graph_stats gs = {.struct_size = sizeof gs};
    CHECK_STATUS(cpool_graph_get_stats(NULL, &gs), INV);
    CHECK_STATUS(cpool_graph_get_stats(f->g, NULL), INV);
    gs.struct_size = offsetof(cpool_graph_stats, pool_count);
    CHECK_STATUS(cpool_graph_get_stats(f->g, &gs), INV);
}
ROW_FN(snapshot_bad_input) {
    CHECK_STATUS(cpool_pool_write_snapshot(NULL, "/tmp/cpool-misuse-snapshot.json"), INV);
    CHECK_STATUS(cpool_pool_write_snapshot(f->pool, NULL), INV);
    CHECK_STATUS(cpool_pool_write_snapshot(f->pool, "/nonexistent-dir/snapshot.json"), CPOOL_ERR_IO);
}
ROW_FN(graph_id_null) { (void)f; CHECK_EQ(cpool_graph_id(NULL), 0); }
ROW_FN(event_create_null) {
    cpool_event *e = (cpool_event *)SENTINEL;
    CHECK_STATUS(cpool_event_create(NULL, &e), INV);
    CHECK(e == (cpool_event *)SENTINEL);
    CHECK_STATUS(cpool_event_create(f->dev, NULL), INV);
}
ROW_FN(event_destroy_null) { (void)f; cpool_event_destroy(NULL); }
ROW_FN(event_record_null) {
    CHECK_STATUS(cpool_event_record(NULL, f->s), INV);
    cpool_event *e;
    REQUIRE_OK(cpool_event_create(f->dev, &e));
    CHECK_STATUS(cpool_event_record(e, NULL), INV);
    /* On a capturing stream a record is a fork point: nothing waits for it,
     * so the capture is unchanged, and it cannot be queried. */
    CHECK_OK(cpool_event_record(e, f->s_cap));
    CHECK_STATUS(cpool_event_query(e), INV);
    cpool_event_destroy(e);
}
ROW_FN(stream_wait_event_null) {
    CHECK_STATUS(cpool_stream_wait_event(f->s, NULL), INV);
    cpool_event *e;
    REQUIRE_OK(cpool_event_create(f->dev, &e));
    CHECK_STATUS(cpool_stream_wait_event(NULL, e), INV);
    CHECK_OK(cpool_stream_wait_event(f->s_cap, e)); /* never recorded: nothing to wait for */
    REQUIRE_OK(cpool_event_record(e, f->s));
    CHECK_STATUS(cpool_stream_wait_event(f->s_cap, e), INV); /* recorded outside the capture */
    cpool_event_destroy(e);
}
ROW_FN(event_query_null) { (void)f; CHECK_STATUS(cpool_event_query(NULL), INV); }
ROW_FN(event_synchronize_null) { (void)f; CHECK_STATUS(cpool_event_synchronize(NULL), INV); }
ROW_FN(event_elapsed_unrecorded) {
    cpool_event *a, *b;
    float ms = -1;
    REQUIRE_OK(cpool_event_create(f->dev, &a));
    REQUIRE_OK(cpool_event_create(f->dev, &b));
    CHECK_STATUS(cpool_event_elapsed_ms(NULL, b, &ms), INV);
    CHECK_STATUS(cpool_event_elapsed_ms(a, b, NULL), INV);
    CHECK_STATUS(cpool_event_elapsed_ms(a, b, &ms), INV); /* never recorded */
    CHECK(ms == -1);
    cpool_event_destroy(a);
    cpool_event_destroy(b);
}
ROW_FN(graph_pool_null) { (void)f; CHECK(cpool_graph_pool(NULL) == NULL); }
ROW_FN(graph_pool_buffer_count_null) { (void)f; CHECK_EQ(cpool_graph_pool_buffer_count(NULL), 0); }
ROW_FN(graph_native_null) { (void)f; CHECK(cpool_graph_native(NULL) == NULL); }
ROW_FN(graph_retain_null) { (void)f; CHECK(cpool_graph_retain(NULL) == NULL); }
ROW_FN(graph_release_null) { (void)f; cpool_graph_release(NULL); }
ROW_FN(graph_update_null_graph) {
    CHECK_STATUS(cpool_graph_update(NULL, f->s, body_count, f), INV);
    CHECK_EQ(f->body_calls, 0);
}
ROW_FN(graph_update_null_stream) {
    CHECK_STATUS(cpool_graph_update(f->g, NULL, body_count, f), INV);
    CHECK_EQ(f->body_calls, 0);
}
ROW_FN(graph_update_null_body) { CHECK_STATUS(cpool_graph_update(f->g, f->s, NULL, f), INV); }
ROW_FN(graph_update_capturing_stream) {
    CHECK_STATUS(cpool_graph_update(f->g, f->s_cap, body_count, f), INV);
    CHECK_EQ(f->body_calls, 0);
}
ROW_FN(graph_update_stream_of_other_device) {
    if (!f->s2) return;
    CHECK_STATUS(cpool_graph_update(f->g, f->s2, body_count, f), INV);
    CHECK_EQ(f->body_calls, 0);
}
/* Documented: on failure g is unchanged and launches its old work. */
ROW_FN(graph_update_body_fails) {
    CHECK_BODY_STATUS(cpool_graph_update(f->g, f->s, body_fail, f), CPOOL_ERR_BACKEND);
    CHECK_EQ(f->body_calls, 1);
}
ROW_FN(graph_dump_dot_null_graph) { (void)f; CHECK_STATUS(cpool_graph_dump_dot(NULL, "/tmp/cpool-misuse.dot"), INV); }
ROW_FN(graph_dump_dot_null_path) { CHECK_STATUS(cpool_graph_dump_dot(f->g, NULL), INV); }
ROW_FN(graph_dump_dot_unwritable) {
    CHECK_STATUS(cpool_graph_dump_dot(f->g, "/nonexistent-capturepool-dir/g.dot"), CPOOL_ERR_IO);
}

/* parameter blocks */
ROW_FN(param_create_null_pool) {
    cpool_param *p = (cpool_param *)SENTINEL;
    (void)f;
    CHECK_STATUS(cpool_param_create(NULL, 16, &p), INV);
    CHECK_UNTOUCHED(p);
}
ROW_FN(param_create_null_out) { CHECK_STATUS(cpool_param_create(f->pool, 16, NULL), INV); }
ROW_FN(param_create_size_zero) {
    cpool_param *p = (cpool_param *)SENTINEL;
    CHECK_STATUS(cpool_param_create(f->pool, 0, &p), INV);
    CHECK_UNTOUCHED(p);
}
ROW_FN(param_create_size_huge) {
    cpool_param *p = (cpool_param *)SENTINEL;
    CHECK_STATUS(cpool_param_create(f->pool, SIZE_MAX, &p), CPOOL_ERR_OUT_OF_MEMORY);
    CHECK_UNTOUCHED(p);
    CHECK_STATUS(cpool_param_create(f->pool, (size_t)1 << 60, &p), CPOOL_ERR_OUT_OF_MEMORY);
    CHECK_UNTOUCHED(p);
}
ROW_FN(param_create_sealed) {
    cpool_param *p = (cpool_param *)SENTINEL;
    CHECK_STATUS(cpool_param_create(f->pool, 16, &p), CPOOL_ERR_SEALED);
    CHECK_UNTOUCHED(p);
}
ROW_FN(param_device_ptr_null) { (void)f; CHECK(cpool_param_device_ptr(NULL) == NULL); }
ROW_FN(param_set_null_param) {
    int v = 1;
    CHECK_STATUS(cpool_param_set(NULL, &v, sizeof v, f->s), INV);
}
ROW_FN(param_set_null_value) { CHECK_STATUS(cpool_param_set(f->param, NULL, 4, f->s), INV); }
ROW_FN(param_set_null_stream) {
    int v = 1;
    CHECK_STATUS(cpool_param_set(f->param, &v, sizeof v, NULL), INV);
}
ROW_FN(param_set_size_zero) {
    int v = 1;
    CHECK_STATUS(cpool_param_set(f->param, &v, 0, f->s), INV);
}
ROW_FN(param_set_larger_than_block) {
    char big[65];
    memset(big, 1, sizeof big);
    CHECK_STATUS(cpool_param_set(f->param, big, sizeof big, f->s), INV);
    CHECK_STATUS(cpool_param_set(f->param, big, SIZE_MAX, f->s), INV);
    CHECK_STATUS(cpool_param_set(f->param, big, (size_t)1 << 60, f->s), INV);
}
/* Not allowed under capture: nothing is enqueued, the capture goes on. */
ROW_FN(param_set_capturing_stream) {
    int v = 1;
    CHECK_STATUS(cpool_param_set(f->param, &v, sizeof v, f->s_cap), INV);
}
ROW_FN(param_set_stream_of_other_device) {
    int v = 1;
    if (!f->s2) return;
    CHECK_STATUS(cpool_param_set(f->param, &v, sizeof v, f->s2), INV);
}

/* graphed calls */
ROW_FN(graphed_call_null_stream) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_STATUS(cpool_graphed_call(NULL, f->pool, CPOOL_CAPTURE_GLOBAL, 1, body_count, f, &g), INV);
    CHECK_NO_HANDLE(g);
    CHECK_EQ(f->body_calls, 0);
}
ROW_FN(graphed_call_null_body) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_STATUS(cpool_graphed_call(f->s, f->pool, CPOOL_CAPTURE_GLOBAL, 1, NULL, f, &g), INV);
    CHECK_NO_HANDLE(g);
}
ROW_FN(graphed_call_null_out) {
    CHECK_STATUS(cpool_graphed_call(f->s, f->pool, CPOOL_CAPTURE_GLOBAL, 1, body_count, f, NULL), INV);
    CHECK_EQ(f->body_calls, 0);
}
ROW_FN(graphed_call_negative_warmups) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_STATUS(cpool_graphed_call(f->s, f->pool, CPOOL_CAPTURE_GLOBAL, -1, body_count, f, &g), INV);
    CHECK(g == NULL);
    CHECK_EQ(f->body_calls, 0);
}
/* A bad mode is a bad argument: refused before any warm-up runs. */
ROW_FN(graphed_call_bad_mode) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_STATUS(cpool_graphed_call(f->s, f->pool, (cpool_capture_mode)9, 2, body_count, f, &g), INV);
    CHECK(g == NULL);
    CHECK_EQ(f->body_calls, 0);
}
ROW_FN(graphed_call_capturing_stream) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_STATUS(cpool_graphed_call(f->s_cap, f->pool, CPOOL_CAPTURE_GLOBAL, 0, body_count, f, &g),
                 CPOOL_ERR_ALREADY_CAPTURING);
    CHECK(g == NULL);
    CHECK_EQ(f->body_calls, 0);
}
/* With warm-ups: they cannot run eagerly on a capturing stream, so the call
 * must refuse before running them (they would land in s_cap's capture). */
ROW_FN(graphed_call_capturing_stream_warmups) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_STATUS(cpool_graphed_call(f->s_cap, f->pool, CPOOL_CAPTURE_GLOBAL, 2, body_count, f, &g),
                 CPOOL_ERR_ALREADY_CAPTURING);
    CHECK(g == NULL);
    CHECK_EQ(f->body_calls, 0);
}
ROW_FN(graphed_call_body_fails) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_BODY_STATUS(cpool_graphed_call(f->s, f->pool, CPOOL_CAPTURE_GLOBAL, 3, body_fail, f, &g), CPOOL_ERR_BACKEND);
    CHECK(g == NULL);
    CHECK_EQ(f->body_calls, 1); /* the first failing warm-up ends it */
}


/* graph caches */
static cpool_graph_cache *cache_of(fixture *f) {
    cpool_graph_cache *c = NULL;
    CHECK_OK(cpool_graph_cache_create(f->pool, NULL, &c));
    return c;
}
ROW_FN(graph_cache_create_bad) {
    cpool_graph_cache *c = (cpool_graph_cache *)SENTINEL;
    cpool_graph_cache_options o = CPOOL_GRAPH_CACHE_OPTIONS_INIT;
    CHECK_STATUS(cpool_graph_cache_create(NULL, NULL, &c), INV);
    CHECK_UNTOUCHED(c);
    CHECK_STATUS(cpool_graph_cache_create(f->pool, NULL, NULL), INV);
    o.struct_size = offsetof(cpool_graph_cache_options, user);
    CHECK_STATUS(cpool_graph_cache_create(f->pool, &o, &c), INV);
    CHECK_UNTOUCHED(c);
}
ROW_FN(graph_cache_destroy_null_and_dead) {
    cpool_graph_cache *c = cache_of(f);
    cpool_graph_cache_destroy(NULL);
    cpool_graph_cache_destroy(c);
    cpool_graph_cache_destroy(c); /* dead: refused, nothing happens */
    CHECK(strstr(cpool_last_error(), "cpool_graph_cache_destroy: cache") != NULL);
}
ROW_FN(graph_cache_launch_bad) {
    cpool_graph_cache *c = cache_of(f);
    bool hit = true;
    CHECK_STATUS(cpool_graph_cache_launch(NULL, 1, f->s, CPOOL_CAPTURE_GLOBAL, body_count, f, &hit), INV);
    CHECK_STATUS(cpool_graph_cache_launch(c, 1, NULL, CPOOL_CAPTURE_GLOBAL, body_count, f, &hit), INV);
    CHECK_STATUS(cpool_graph_cache_launch(c, 1, f->s, CPOOL_CAPTURE_GLOBAL, NULL, f, &hit), INV);
    CHECK(!hit);
    CHECK_STATUS(cpool_graph_cache_launch(c, 1, f->s_cap, CPOOL_CAPTURE_GLOBAL, body_count, f, &hit), INV);
    if (f->s2) CHECK_STATUS(cpool_graph_cache_launch(c, 1, f->s2, CPOOL_CAPTURE_GLOBAL, body_count, f, &hit), INV);
    CHECK_EQ(f->body_calls, 0);
    cpool_graph_cache_destroy(c);
    CHECK_STATUS(cpool_graph_cache_launch(c, 1, f->s, CPOOL_CAPTURE_GLOBAL, body_count, f, &hit), INV);
    CHECK_EQ(f->body_calls, 0);
}
ROW_FN(graph_cache_launch_body_fails) {
    cpool_graph_cache *c = cache_of(f);
    cpool_graph_cache_stats st = CPOOL_GRAPH_CACHE_STATS_INIT;
    CHECK_BODY_STATUS(cpool_graph_cache_launch(c, 1, f->s, CPOOL_CAPTURE_GLOBAL, body_fail, f, NULL), CPOOL_ERR_BACKEND);
    CHECK_OK(cpool_graph_cache_get_stats(c, &st));
    CHECK_EQ(st.graphs + st.misses + st.hits + st.evictions, 0);
    cpool_graph_cache_destroy(c);
}
ROW_FN(graph_cache_get_bad) {
    cpool_graph_cache *c = cache_of(f);
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_STATUS(cpool_graph_cache_get(NULL, 1, &g), INV);
    CHECK_UNTOUCHED(g);
    CHECK_STATUS(cpool_graph_cache_get(c, 1, NULL), INV);
    CHECK_OK(cpool_graph_cache_get(c, 1, &g));
    CHECK(g == NULL);
    cpool_graph_cache_destroy(c);
}
ROW_FN(graph_cache_evict_bad) {
    cpool_graph_cache *c = cache_of(f);
    CHECK_STATUS(cpool_graph_cache_evict(NULL, 1), INV);
    CHECK_OK(cpool_graph_cache_evict(c, 1)); /* absent: nothing to do */
    cpool_graph_cache_destroy(c);
    CHECK_STATUS(cpool_graph_cache_evict(c, 1), INV);
}
ROW_FN(graph_cache_stats_bad) {
    cpool_graph_cache *c = cache_of(f);
    cpool_graph_cache_stats st = CPOOL_GRAPH_CACHE_STATS_INIT;
    CHECK_STATUS(cpool_graph_cache_get_stats(NULL, &st), INV);
    CHECK_STATUS(cpool_graph_cache_get_stats(c, NULL), INV);
    st.struct_size = offsetof(cpool_graph_cache_stats, graph_bytes);
    CHECK_STATUS(cpool_graph_cache_get_stats(c, &st), INV);
    cpool_graph_cache_destroy(c);
}
ROW_FN(graph_cache_predict_bad) {
    cpool_graph_cache *c = cache_of(f);
    uint64_t bytes = 7;
    CHECK_STATUS(cpool_graph_cache_predict_bytes(NULL, 1, 1, &bytes), INV);
    CHECK_STATUS(cpool_graph_cache_predict_bytes(c, 1, 1, NULL), INV);
    CHECK_EQ(bytes, 7);
    cpool_graph_cache_destroy(c);
}

/* ---- handles of the wrong type -----------------------------------------------------
 * Every argument of every public function that takes a handle is given, in
 * turn, each live handle of another type (a void * or a wrong cast makes that
 * easy in C). A call with a status returns CPOOL_ERR_INVALID_ARGUMENT; one
 * without returns what it returns for a dead handle; both change nothing
 * and leave "fn: arg is a <type> handle, not a <type>" in cpool_last_error().
 * Each `call` passes `h` in its argument, the fixture's right handles in the
 * others, and checks the result and the out-pointers. */

typedef enum handle_type { T_DEVICE, T_STREAM, T_EVENT, T_POOL, T_GRAPH, T_PARAM, T_COUNT } handle_type;

/* As the library's messages name them. */
static const char *const type_name[T_COUNT] = {"a device", "a stream", "an event",
                                               "a pool",   "a graph",  "a parameter block"};

static void *live_handle(fixture *f, handle_type t) {
    switch (t) {
    case T_DEVICE: return f->dev;
    case T_STREAM: return f->s;
    case T_EVENT: return f->ev;
    case T_POOL: return f->pool;
    case T_GRAPH: return f->g;
    case T_PARAM: return f->param;
    default: return NULL;
    }
}

#define WRONG_FN(name) static void name(fixture *f, void *h)
#define WRONG_PATH "/tmp/cpool-misuse-wrong-type.out"

/* The call wrote no file at WRONG_PATH (removed before it). */
static void check_no_file(void) {
    FILE *file = fopen(WRONG_PATH, "r");
    CHECK(file == NULL);
    if (file) fclose(file);
}

/* devices */
WRONG_FN(w_device_close) { (void)f; cpool_device_close(h); }
WRONG_FN(w_device_backend) { (void)f; CHECK_EQ(cpool_device_backend(h), CPOOL_BACKEND_AUTO); }
WRONG_FN(w_stream_create) {
    cpool_stream *out = (cpool_stream *)SENTINEL;
    (void)f;
    CHECK_STATUS(cpool_stream_create(h, &out), INV);
    CHECK_UNTOUCHED(out);
}
WRONG_FN(w_stream_wrap) {
    cpool_stream *out = (cpool_stream *)SENTINEL;
    (void)f;
    CHECK_STATUS(cpool_stream_wrap(h, NULL, &out), INV);
    CHECK_UNTOUCHED(out);
}
WRONG_FN(w_pool_create) {
    cpool_pool *out = (cpool_pool *)SENTINEL;
    (void)f;
    CHECK_STATUS(cpool_pool_create(h, NULL, &out), INV);
    CHECK_UNTOUCHED(out);
}
WRONG_FN(w_event_create) {
    cpool_event *out = (cpool_event *)SENTINEL;
    (void)f;
    CHECK_STATUS(cpool_event_create(h, &out), INV);
    CHECK_UNTOUCHED(out);
}
/* The communicator is never reached: any non-NULL pointer does. */
WRONG_FN(w_nccl_pool_create) {
    cpool_pool *out = (cpool_pool *)SENTINEL;
    CHECK_STATUS(cpool_nccl_pool_create(h, (struct ncclComm *)f->host_buf, NULL, &out), INV);
    CHECK_UNTOUCHED(out);
}

/* streams */
WRONG_FN(w_stream_native) { (void)f; CHECK(cpool_stream_native(h) == NULL); }
WRONG_FN(w_stream_synchronize) { (void)f; CHECK_STATUS(cpool_stream_synchronize(h), INV); }
WRONG_FN(w_stream_destroy) { (void)f; cpool_stream_destroy(h); }
WRONG_FN(w_launch_host) { CHECK_STATUS(cpool_launch_host(h, cb_inc, &f->graph_runs), INV); }
WRONG_FN(w_memcpy_async) { CHECK_STATUS(cpool_memcpy_async(h, f->host_buf, f->a, 16), INV); }
WRONG_FN(w_memset_async) { CHECK_STATUS(cpool_memset_async(h, f->a, 0, 16), INV); }
WRONG_FN(w_event_record_stream) { CHECK_STATUS(cpool_event_record(f->ev, h), INV); }
WRONG_FN(w_event_record_event) { CHECK_STATUS(cpool_event_record(h, f->s), INV); }
WRONG_FN(w_wait_event_stream) { CHECK_STATUS(cpool_stream_wait_event(h, f->ev), INV); }
WRONG_FN(w_wait_event_event) { CHECK_STATUS(cpool_stream_wait_event(f->s, h), INV); }

/* events */
WRONG_FN(w_event_destroy) { (void)f; cpool_event_destroy(h); }
WRONG_FN(w_event_query) { (void)f; CHECK_STATUS(cpool_event_query(h), INV); }
WRONG_FN(w_event_synchronize) { (void)f; CHECK_STATUS(cpool_event_synchronize(h), INV); }
WRONG_FN(w_elapsed_start) {
    float ms = -1;
    CHECK_STATUS(cpool_event_elapsed_ms(h, f->ev, &ms), INV);
    CHECK(ms == -1);
}
WRONG_FN(w_elapsed_end) {
    float ms = -1;
    CHECK_STATUS(cpool_event_elapsed_ms(f->ev, h, &ms), INV);
    CHECK(ms == -1);
}

/* pools */
WRONG_FN(w_pool_retain) { (void)f; CHECK(cpool_pool_retain(h) == NULL); }
WRONG_FN(w_pool_release) { (void)f; cpool_pool_release(h); }
WRONG_FN(w_pool_seal) { (void)f; cpool_pool_seal(h); }
WRONG_FN(w_pool_unseal) { (void)f; cpool_pool_unseal(h); }
WRONG_FN(w_pool_is_sealed) { (void)f; CHECK(!cpool_pool_is_sealed(h)); }
WRONG_FN(w_pool_grows_in_place) { (void)f; CHECK(!cpool_pool_grows_in_place(h)); }
WRONG_FN(w_pool_record) {
    size_t index = 12345;
    CHECK_STATUS(cpool_pool_record(h, &f->objs[OBJ_SPARE], tracked_drop, &index), INV);
    CHECK_EQ(index, 12345);
}
WRONG_FN(w_pool_buffer_count) { (void)f; CHECK_EQ(cpool_pool_buffer_count(h), 0); }
WRONG_FN(w_pool_clear_buffers) { (void)f; cpool_pool_clear_buffers(h); }
WRONG_FN(w_alloc_pool) {
    void *p = SENTINEL;
    CHECK_STATUS(cpool_alloc(h, 64, f->s, &p), INV);
    CHECK_UNTOUCHED(p);
}
WRONG_FN(w_alloc_stream) {
    void *p = SENTINEL;
    CHECK_STATUS(cpool_alloc(f->pool, 64, h, &p), INV);
    CHECK_UNTOUCHED(p);
}
WRONG_FN(w_alloc_output_pool) {
    void *p = SENTINEL;
    CHECK_STATUS(cpool_alloc_output(h, 64, f->s, &p), INV);
    CHECK_UNTOUCHED(p);
}
WRONG_FN(w_alloc_output_stream) {
    void *p = SENTINEL;
    CHECK_STATUS(cpool_alloc_output(f->pool, 64, h, &p), INV);
    CHECK_UNTOUCHED(p);
}
WRONG_FN(w_free_pool) { CHECK_STATUS(cpool_free(h, f->a, f->s), INV); }
WRONG_FN(w_free_stream) { CHECK_STATUS(cpool_free(f->pool, f->a, h), INV); }
WRONG_FN(w_pool_get_stats) {
    cpool_pool_stats st;
    (void)f;
    fill_stats(&st, sizeof st);
    CHECK_STATUS(cpool_pool_get_stats(h, &st), INV);
    check_stats_untouched(&st, sizeof st);
}
WRONG_FN(w_pool_write_snapshot) {
    (void)f;
    CHECK_STATUS(cpool_pool_write_snapshot(h, WRONG_PATH), INV);
    check_no_file();
}
WRONG_FN(w_pool_trim) { (void)f; CHECK_STATUS(cpool_pool_trim(h), INV); }
WRONG_FN(w_pool_suspend) { (void)f; CHECK_STATUS(cpool_pool_suspend(h, CPOOL_SUSPEND_KEEP_CONTENTS), INV); }
WRONG_FN(w_pool_resume) { (void)f; CHECK_STATUS(cpool_pool_resume(h), INV); }
WRONG_FN(w_pool_is_suspended) { (void)f; CHECK(!cpool_pool_is_suspended(h)); }
WRONG_FN(w_nccl_registration_count) { (void)f; CHECK_EQ(cpool_nccl_registration_count(h), 0); }

/* capture */
WRONG_FN(w_capture_begin_stream) { CHECK_STATUS(cpool_capture_begin(h, f->pool, CPOOL_CAPTURE_GLOBAL), INV); }
WRONG_FN(w_capture_begin_pool) { CHECK_STATUS(cpool_capture_begin(f->s, h, CPOOL_CAPTURE_GLOBAL), INV); }
WRONG_FN(w_capture_end) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    (void)f;
    CHECK_STATUS(cpool_capture_end(h, &g), INV);
    CHECK_UNTOUCHED(g);
}
WRONG_FN(w_capture_attach_stream) { CHECK_STATUS(cpool_capture_attach(h, f->pool), INV); }
WRONG_FN(w_capture_attach_pool) { CHECK_STATUS(cpool_capture_attach(f->s, h), INV); }
WRONG_FN(w_capture_note_scratch_stream) {
    CHECK_STATUS(cpool_capture_note_scratch(h, f->pool, (void *)SENTINEL, 0, 1), INV);
}
WRONG_FN(w_capture_note_scratch_pool) {
    CHECK_STATUS(cpool_capture_note_scratch(f->s_cap, h, (void *)SENTINEL, 0, 1), INV);
}
WRONG_FN(w_capture_detach) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    (void)f;
    CHECK_STATUS(cpool_capture_detach(h, &g), INV);
    CHECK_UNTOUCHED(g);
}
WRONG_FN(w_capture_status) {
    cpool_capture_state cs = (cpool_capture_state)99;
    (void)f;
    CHECK_STATUS(cpool_capture_status(h, &cs), INV);
    CHECK_EQ(cs, 99);
}
WRONG_FN(w_capture_stream) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_STATUS(cpool_capture(h, f->pool, CPOOL_CAPTURE_GLOBAL, body_count, f, &g), INV);
    CHECK_UNTOUCHED(g);
    CHECK_EQ(f->body_calls, 0);
}
WRONG_FN(w_capture_pool) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_STATUS(cpool_capture(f->s, h, CPOOL_CAPTURE_GLOBAL, body_count, f, &g), INV);
    CHECK_UNTOUCHED(g);
    CHECK_EQ(f->body_calls, 0);
}
WRONG_FN(w_graphed_call_stream) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_STATUS(cpool_graphed_call(h, f->pool, CPOOL_CAPTURE_GLOBAL, 1, body_count, f, &g), INV);
    CHECK_UNTOUCHED(g);
    CHECK_EQ(f->body_calls, 0);
}
WRONG_FN(w_graphed_call_pool) {
    cpool_graph *g = (cpool_graph *)SENTINEL;
    CHECK_STATUS(cpool_graphed_call(f->s, h, CPOOL_CAPTURE_GLOBAL, 1, body_count, f, &g), INV);
    CHECK_UNTOUCHED(g);
    CHECK_EQ(f->body_calls, 0);
}

/* graphs */
WRONG_FN(w_graph_launch_graph) { CHECK_STATUS(cpool_graph_launch(h, f->s), INV); }
WRONG_FN(w_graph_launch_stream) { CHECK_STATUS(cpool_graph_launch(f->g, h), INV); }
WRONG_FN(w_graph_upload_graph) { CHECK_STATUS(cpool_graph_upload(h, f->s), INV); }
WRONG_FN(w_graph_upload_stream) { CHECK_STATUS(cpool_graph_upload(f->g, h), INV); }
WRONG_FN(w_graph_id) { (void)f; CHECK_EQ(cpool_graph_id(h), 0); }
WRONG_FN(w_graph_replays) { (void)f; CHECK_EQ(cpool_graph_replays(h), 0); }
WRONG_FN(w_graph_get_stats) {
    cpool_graph_stats gs;
    (void)f;
    memset(&gs, 0xab, sizeof gs);
    gs.struct_size = sizeof gs;
    CHECK_STATUS(cpool_graph_get_stats(h, &gs), INV);
    CHECK_EQ(gs.pool_count, 0xababababababababull);
}
WRONG_FN(w_graph_pool) { (void)f; CHECK(cpool_graph_pool(h) == NULL); }
WRONG_FN(w_graph_pool_buffer_count) { (void)f; CHECK_EQ(cpool_graph_pool_buffer_count(h), 0); }
WRONG_FN(w_graph_native) { (void)f; CHECK(cpool_graph_native(h) == NULL); }
WRONG_FN(w_graph_retain) { (void)f; CHECK(cpool_graph_retain(h) == NULL); }
WRONG_FN(w_graph_release) { (void)f; cpool_graph_release(h); }
WRONG_FN(w_graph_update_graph) {
    CHECK_STATUS(cpool_graph_update(h, f->s, body_count, f), INV);
    CHECK_EQ(f->body_calls, 0);
}
WRONG_FN(w_graph_update_stream) {
    CHECK_STATUS(cpool_graph_update(f->g, h, body_count, f), INV);
    CHECK_EQ(f->body_calls, 0);
}
WRONG_FN(w_graph_dump_dot) {
    (void)f;
    CHECK_STATUS(cpool_graph_dump_dot(h, WRONG_PATH), INV);
    check_no_file();
}

/* parameter blocks */
WRONG_FN(w_param_create) {
    cpool_param *p = (cpool_param *)SENTINEL;
    (void)f;
    CHECK_STATUS(cpool_param_create(h, 16, &p), INV);
    CHECK_UNTOUCHED(p);
}
WRONG_FN(w_param_device_ptr) { (void)f; CHECK(cpool_param_device_ptr(h) == NULL); }
WRONG_FN(w_param_set_param) {
    int v = 1;
    CHECK_STATUS(cpool_param_set(h, &v, sizeof v, f->s), INV);
}
WRONG_FN(w_param_set_stream) {
    int v = 1;
    CHECK_STATUS(cpool_param_set(f->param, &v, sizeof v, h), INV);
}


/* graph caches */
WRONG_FN(w_graph_cache_create) {
    cpool_graph_cache *c = (cpool_graph_cache *)SENTINEL;
    (void)f;
    CHECK_STATUS(cpool_graph_cache_create(h, NULL, &c), INV);
    CHECK_UNTOUCHED(c);
}
WRONG_FN(w_graph_cache_launch_stream) {
    cpool_graph_cache *c = NULL;
    cpool_status st;
    CHECK_OK(cpool_graph_cache_create(f->pool, NULL, &c));
    st = cpool_graph_cache_launch(c, 1, h, CPOOL_CAPTURE_GLOBAL, body_count, f, NULL);
    cpool_graph_cache_destroy(c);
    CHECK_STATUS(st, INV);
    CHECK_EQ(f->body_calls, 0);
}

typedef struct wrong_row {
    const char *fn;
    const char *arg;  /* as the message names it */
    handle_type want; /* the argument's type */
    void (*call)(fixture *f, void *h);
} wrong_row;

/* wrong-type-table-begin */
static const wrong_row wrong_rows[] = {
    {"cpool_device_close", "device", T_DEVICE, w_device_close},
    {"cpool_device_backend", "device", T_DEVICE, w_device_backend},
    {"cpool_stream_create", "device", T_DEVICE, w_stream_create},
    {"cpool_stream_wrap", "device", T_DEVICE, w_stream_wrap},
    {"cpool_pool_create", "device", T_DEVICE, w_pool_create},
    {"cpool_event_create", "device", T_DEVICE, w_event_create},
    {"cpool_nccl_pool_create", "device", T_DEVICE, w_nccl_pool_create},

    {"cpool_stream_native", "stream", T_STREAM, w_stream_native},
    {"cpool_stream_synchronize", "stream", T_STREAM, w_stream_synchronize},
    {"cpool_stream_destroy", "stream", T_STREAM, w_stream_destroy},
    {"cpool_launch_host", "stream", T_STREAM, w_launch_host},
    {"cpool_memcpy_async", "stream", T_STREAM, w_memcpy_async},
    {"cpool_memset_async", "stream", T_STREAM, w_memset_async},
    {"cpool_event_record", "stream", T_STREAM, w_event_record_stream},
    {"cpool_event_record", "event", T_EVENT, w_event_record_event},
    {"cpool_stream_wait_event", "stream", T_STREAM, w_wait_event_stream},
    {"cpool_stream_wait_event", "event", T_EVENT, w_wait_event_event},

    {"cpool_event_destroy", "event", T_EVENT, w_event_destroy},
    {"cpool_event_query", "event", T_EVENT, w_event_query},
    {"cpool_event_synchronize", "event", T_EVENT, w_event_synchronize},
    {"cpool_event_elapsed_ms", "start event", T_EVENT, w_elapsed_start},
    {"cpool_event_elapsed_ms", "end event", T_EVENT, w_elapsed_end},

    {"cpool_pool_retain", "pool", T_POOL, w_pool_retain},
    {"cpool_pool_release", "pool", T_POOL, w_pool_release},
    {"cpool_pool_seal", "pool", T_POOL, w_pool_seal},
    {"cpool_pool_unseal", "pool", T_POOL, w_pool_unseal},
    {"cpool_pool_is_sealed", "pool", T_POOL, w_pool_is_sealed},
    {"cpool_pool_grows_in_place", "pool", T_POOL, w_pool_grows_in_place},
    {"cpool_pool_record", "pool", T_POOL, w_pool_record},
    {"cpool_pool_buffer_count", "pool", T_POOL, w_pool_buffer_count},
    {"cpool_pool_clear_buffers", "pool", T_POOL, w_pool_clear_buffers},
    {"cpool_alloc", "pool", T_POOL, w_alloc_pool},
    {"cpool_alloc", "stream", T_STREAM, w_alloc_stream},
    {"cpool_alloc_output", "pool", T_POOL, w_alloc_output_pool},
    {"cpool_alloc_output", "stream", T_STREAM, w_alloc_output_stream},
    {"cpool_free", "pool", T_POOL, w_free_pool},
    {"cpool_free", "stream", T_STREAM, w_free_stream},
    {"cpool_pool_get_stats", "pool", T_POOL, w_pool_get_stats},
    {"cpool_pool_write_snapshot", "pool", T_POOL, w_pool_write_snapshot},
    {"cpool_pool_trim", "pool", T_POOL, w_pool_trim},
    {"cpool_pool_suspend", "pool", T_POOL, w_pool_suspend},
    {"cpool_pool_resume", "pool", T_POOL, w_pool_resume},
    {"cpool_pool_is_suspended", "pool", T_POOL, w_pool_is_suspended},
    {"cpool_nccl_registration_count", "pool", T_POOL, w_nccl_registration_count},

    {"cpool_capture_begin", "stream", T_STREAM, w_capture_begin_stream},
    {"cpool_capture_begin", "pool", T_POOL, w_capture_begin_pool},
    {"cpool_capture_end", "stream", T_STREAM, w_capture_end},
    {"cpool_capture_attach", "stream", T_STREAM, w_capture_attach_stream},
    {"cpool_capture_attach", "pool", T_POOL, w_capture_attach_pool},
    {"cpool_capture_note_scratch", "stream", T_STREAM, w_capture_note_scratch_stream},
    {"cpool_capture_note_scratch", "pool", T_POOL, w_capture_note_scratch_pool},
    {"cpool_capture_detach", "stream", T_STREAM, w_capture_detach},
    {"cpool_capture_status", "stream", T_STREAM, w_capture_status},
    {"cpool_capture", "stream", T_STREAM, w_capture_stream},
    {"cpool_capture", "pool", T_POOL, w_capture_pool},
    {"cpool_graphed_call", "stream", T_STREAM, w_graphed_call_stream},
    {"cpool_graphed_call", "pool", T_POOL, w_graphed_call_pool},

    {"cpool_graph_launch", "graph", T_GRAPH, w_graph_launch_graph},
    {"cpool_graph_launch", "stream", T_STREAM, w_graph_launch_stream},
    {"cpool_graph_upload", "graph", T_GRAPH, w_graph_upload_graph},
    {"cpool_graph_upload", "stream", T_STREAM, w_graph_upload_stream},
    {"cpool_graph_id", "graph", T_GRAPH, w_graph_id},
    {"cpool_graph_replays", "graph", T_GRAPH, w_graph_replays},
    {"cpool_graph_get_stats", "graph", T_GRAPH, w_graph_get_stats},
    {"cpool_graph_pool", "graph", T_GRAPH, w_graph_pool},
    {"cpool_graph_pool_buffer_count", "graph", T_GRAPH, w_graph_pool_buffer_count},
    {"cpool_graph_native", "graph", T_GRAPH, w_graph_native},
    {"cpool_graph_retain", "graph", T_GRAPH, w_graph_retain},
    {"cpool_graph_release", "graph", T_GRAPH, w_graph_release},
    {"cpool_graph_update", "graph", T_GRAPH, w_graph_update_graph},
    {"cpool_graph_update", "stream", T_STREAM, w_graph_update_stream},
    {"cpool_graph_dump_dot", "graph", T_GRAPH, w_graph_dump_dot},

    {"cpool_param_create", "pool", T_POOL, w_param_create},
    {"cpool_param_device_ptr", "parameter block", T_PARAM, w_param_device_ptr},
    {"cpool_param_set", "parameter block", T_PARAM, w_param_set_param},
    {"cpool_param_set", "stream", T_STREAM, w_param_set_stream},

    {"cpool_graph_cache_create", "pool", T_POOL, w_graph_cache_create},
    {"cpool_graph_cache_launch", "stream", T_STREAM, w_graph_cache_launch_stream},
};
/* wrong-type-table-end */

/* ---- the table ---------------------------------------------------------------------
 * One row per (public function, kind of bad argument). `fn` is the function
 * under test, as tests/check_api_coverage.sh reads it: keep every row's
 * first field a string literal "cpool_...". */

typedef struct row {
    const char *fn;
    const char *misuse;
    void (*setup)(fixture *f); /* before the first snapshot; may be NULL */
    void (*run)(fixture *f);
    unsigned may; /* MAY_* */
} row;

/* misuse-table-begin */
static const row rows[] = {
    {"cpool_version_string", "matches the version macros", NULL, version_string_matches_macros, 0},
    {"cpool_version", "CPOOL_VERSION_NUMBER, the same version as the string", NULL, version_number_matches_macros, 0},
    {"cpool_status_string", "values outside the enum: static text, never NULL", NULL, status_string_out_of_range, 0},
    {"cpool_last_error", "after a failed call: non-empty", NULL, last_error_after_failure, 0},

    {"cpool_device_open", "NULL out", NULL, device_open_null_out, 0},
    {"cpool_device_open", "negative ordinal", NULL, device_open_negative_ordinal, 0},
    {"cpool_device_open", "bad backend enum", NULL, device_open_bad_backend, 0},
    {"cpool_device_open", "no such ordinal", NULL, device_open_no_such_ordinal, 0},
    {"cpool_device_close", "NULL: no-op", NULL, device_close_null, 0},
    {"cpool_device_backend", "NULL: AUTO", NULL, device_backend_null, 0},

    {"cpool_stream_create", "NULL device", NULL, stream_create_null_device, 0},
    {"cpool_stream_create", "NULL out", NULL, stream_create_null_out, 0},
    {"cpool_stream_wrap", "NULL device", NULL, stream_wrap_null_device, 0},
    {"cpool_stream_wrap", "NULL out", NULL, stream_wrap_null_out, 0},
    {"cpool_stream_wrap", "host backend: unsupported", NULL, stream_wrap_on_host, 0},
    {"cpool_stream_native", "NULL: NULL", NULL, stream_native_null, 0},
    {"cpool_stream_synchronize", "NULL stream", NULL, stream_synchronize_null, 0},
    {"cpool_stream_synchronize", "capturing stream: capture invalidated", NULL, stream_synchronize_capturing,
     MAY_INVALIDATE_CAPTURE},
    {"cpool_stream_destroy", "NULL: no-op", NULL, stream_destroy_null, 0},
    {"cpool_stream_destroy", "capturing stream: capture discarded", NULL, stream_destroy_capturing, 0},
    {"cpool_launch_host", "NULL stream", NULL, launch_host_null_stream, 0},
    {"cpool_launch_host", "NULL fn", NULL, launch_host_null_fn, 0},
    {"cpool_memcpy_async", "NULL stream", NULL, memcpy_null_stream, 0},
    {"cpool_memcpy_async", "NULL dst or src", NULL, memcpy_null_pointers, 0},
    {"cpool_memcpy_async", "size 0 with NULL pointers: nothing enqueued", NULL, memcpy_size_zero, 0},
    {"cpool_memset_async", "NULL stream", NULL, memset_null_stream, 0},
    {"cpool_memset_async", "NULL dst", NULL, memset_null_pointer, 0},
    {"cpool_memset_async", "size 0 with NULL dst: nothing enqueued", NULL, memset_size_zero, 0},

    {"cpool_pool_create", "NULL device", NULL, pool_create_null_device, 0},
    {"cpool_pool_create", "NULL out", NULL, pool_create_null_out, 0},
    {"cpool_pool_create", "options struct_size too small", NULL, pool_create_struct_size_too_small, 0},
    {"cpool_pool_create", "reserve_bytes > max_reserved_bytes", NULL, pool_create_reserve_over_max, 0},
    {"cpool_pool_create", "reserve_bytes 1<<60", NULL, pool_create_reserve_huge, 0},
    {"cpool_pool_create", "reserve_bytes UINT64_MAX", NULL, pool_create_reserve_max, 0},
    {"cpool_pool_retain", "NULL: NULL", NULL, pool_retain_null, 0},
    {"cpool_pool_retain", "a zero address with generation bits: refused", NULL,
     pool_calls_null_address_with_generation, 0},
    {"cpool_pool_release", "NULL: no-op", NULL, pool_release_null, 0},
    {"cpool_pool_seal", "NULL: no-op", NULL, pool_seal_null, 0},
    {"cpool_pool_unseal", "NULL: no-op", NULL, pool_unseal_null, 0},
    {"cpool_pool_is_sealed", "NULL: false", NULL, pool_is_sealed_null, 0},
    {"cpool_pool_grows_in_place", "NULL: false", NULL, pool_grows_in_place_null, 0},
    {"cpool_pool_record", "NULL pool: drop never called, index untouched", NULL, pool_record_null_pool, 0},
    {"cpool_pool_buffer_count", "NULL: 0", NULL, pool_buffer_count_null, 0},
    {"cpool_pool_clear_buffers", "NULL: no-op", NULL, pool_clear_buffers_null, 0},
    {"cpool_alloc", "NULL pool", NULL, alloc_null_pool, 0},
    {"cpool_alloc", "NULL stream", NULL, alloc_null_stream, 0},
    {"cpool_alloc", "NULL out", NULL, alloc_null_out, 0},
    {"cpool_alloc", "size 0 (also under capture)", NULL, alloc_size_zero, 0},
    {"cpool_alloc", "size SIZE_MAX", NULL, alloc_size_max, 0},
    {"cpool_alloc", "size 1<<60", NULL, alloc_size_2_pow_60, 0},
    {"cpool_alloc", "huge size under capture", NULL, alloc_size_huge_under_capture, 0},
    {"cpool_alloc", "sealed pool (also under capture)", setup_seal, alloc_sealed, 0},
    {"cpool_alloc", "stream of another device", NULL, alloc_stream_of_other_device, 0},
    {"cpool_alloc_output", "NULL pool, stream or out; size 0 under capture", NULL, alloc_output_null_and_zero, 0},
    {"cpool_alloc_output", "sealed pool under capture", setup_seal, alloc_output_sealed, 0},
    {"cpool_free", "NULL pool", NULL, free_null_pool, 0},
    {"cpool_free", "NULL pointer", NULL, free_null_ptr, 0},
    {"cpool_free", "NULL stream", NULL, free_null_stream, 0},
    {"cpool_free", "pointer freed twice (also under capture)", NULL, free_twice, 0},
    {"cpool_free", "foreign pointer: malloc'd memory", NULL, free_foreign_malloc, 0},
    {"cpool_free", "foreign pointer: stack address", NULL, free_foreign_stack, 0},
    {"cpool_free", "foreign pointer: inside a live block", NULL, free_foreign_interior, 0},
    {"cpool_free", "foreign pointer: another pool's block", NULL, free_foreign_other_pool, 0},
    {"cpool_free", "foreign pointer under capture", NULL, free_foreign_under_capture, 0},
    {"cpool_free", "foreign pointer: handles", NULL, free_foreign_handle, 0},
    {"cpool_free", "foreign pointer: a parameter block's address", NULL, free_foreign_param_block, 0},
    {"cpool_free", "stream of another device", NULL, free_stream_of_other_device, 0},
    {"cpool_pool_get_stats", "NULL pool", NULL, get_stats_null_pool, 0},
    {"cpool_pool_get_stats", "NULL out", NULL, get_stats_null_out, 0},
    {"cpool_pool_get_stats", "struct_size too small", NULL, get_stats_struct_size_too_small, 0},
    {"cpool_pool_trim", "NULL pool", NULL, trim_null, 0},
    {"cpool_pool_suspend", "NULL pool", NULL, suspend_null, 0},
    {"cpool_pool_suspend", "mode outside the enum", NULL, suspend_bad_mode, 0},
    {"cpool_pool_suspend", "a capture uses the pool", NULL, suspend_capture_uses_pool, 0},
    {"cpool_pool_resume", "NULL pool", NULL, resume_null, 0},
    {"cpool_pool_resume", "not suspended: changes nothing", NULL, resume_not_suspended, 0},
    {"cpool_pool_is_suspended", "NULL: false", NULL, is_suspended_null, 0},
    {"cpool_wait_deferred", "nothing pending: returns", NULL, wait_deferred_nothing_pending, 0},

    {"cpool_capture_begin", "NULL stream", NULL, capture_begin_null_stream, 0},
    {"cpool_capture_begin", "bad mode enum", NULL, capture_begin_bad_mode, 0},
    {"cpool_capture_begin", "stream already capturing", NULL, capture_begin_already_capturing, 0},
    {"cpool_capture_begin", "pool of another device", NULL, capture_begin_pool_of_other_device, 0},
    {"cpool_capture_end", "NULL stream", NULL, capture_end_null_stream, 0},
    {"cpool_capture_end", "NULL out: the capture goes on", NULL, capture_end_null_out, 0},
    {"cpool_capture_end", "stream not capturing", NULL, capture_end_not_capturing, 0},
    {"cpool_capture_attach", "NULL stream or pool", NULL, capture_attach_null_args, 0},
    {"cpool_capture_attach", "stream not capturing", NULL, capture_attach_not_capturing, 0},
    {"cpool_capture_attach", "a capture begun with cpool_capture_begin", NULL, capture_attach_library_capture, 0},
    {"cpool_capture_attach", "pool of another device", NULL, capture_attach_pool_of_other_device, 0},
    {"cpool_capture_note_scratch", "NULL stream, pool or block", NULL, capture_note_scratch_null_args, 0},
    {"cpool_capture_note_scratch", "stream not capturing", NULL, capture_note_scratch_not_capturing, 0},
    {"cpool_capture_note_scratch", "a block not allocated in the capture", NULL, capture_note_scratch_foreign_block, 0},
    {"cpool_capture_detach", "NULL stream or out", NULL, capture_detach_null_args, 0},
    {"cpool_capture_detach", "nothing attached", NULL, capture_detach_not_attached, 0},
    {"cpool_capture_detach", "a capture begun with cpool_capture_begin", NULL, capture_detach_library_capture, 0},
    {"cpool_capture_status", "NULL stream", NULL, capture_status_null_stream, 0},
    {"cpool_capture_status", "NULL out", NULL, capture_status_null_out, 0},
    {"cpool_capture", "NULL stream", NULL, capture_null_stream, 0},
    {"cpool_capture", "NULL body", NULL, capture_null_body, 0},
    {"cpool_capture", "NULL out", NULL, capture_null_out, 0},
    {"cpool_capture", "bad mode enum", NULL, capture_bad_mode, 0},
    {"cpool_capture", "stream already capturing", NULL, capture_already_capturing, 0},
    {"cpool_capture", "body fails", NULL, capture_body_fails, 0},

    {"cpool_graph_launch", "NULL graph", NULL, graph_launch_null_graph, 0},
    {"cpool_graph_launch", "NULL stream", NULL, graph_launch_null_stream, 0},
    {"cpool_graph_launch", "capturing stream", NULL, graph_launch_capturing_stream, 0},
    {"cpool_graph_launch", "stream of another device", NULL, graph_launch_stream_of_other_device, 0},
    {"cpool_graph_launch", "stale graph", setup_clear, graph_launch_stale, 0},
    {"cpool_graph_upload", "NULL graph", NULL, graph_upload_null_graph, 0},
    {"cpool_graph_upload", "NULL stream", NULL, graph_upload_null_stream, 0},
    {"cpool_graph_upload", "capturing stream", NULL, graph_upload_capturing_stream, 0},
    {"cpool_graph_upload", "stream of another device", NULL, graph_upload_stream_of_other_device, 0},
    {"cpool_graph_upload", "stale graph", setup_clear, graph_upload_stale, 0},
    {"cpool_graph_replays", "NULL: 0", NULL, graph_replays_null, 0},
    {"cpool_graph_get_stats", "NULL graph or out, struct_size too small", NULL, graph_stats_null, 0},
    {"cpool_pool_write_snapshot", "NULL pool or path, unwritable path", NULL, snapshot_bad_input, 0},
    {"cpool_graph_id", "NULL: 0", NULL, graph_id_null, 0},
    {"cpool_event_create", "NULL device or out", NULL, event_create_null, 0},
    {"cpool_event_destroy", "NULL: no-op", NULL, event_destroy_null, 0},
    {"cpool_event_record", "NULL event or stream; a capturing stream", NULL, event_record_null, 0},
    {"cpool_stream_wait_event", "NULL event or stream; a capturing stream", NULL, stream_wait_event_null, 0},
    {"cpool_event_query", "NULL event", NULL, event_query_null, 0},
    {"cpool_event_synchronize", "NULL event", NULL, event_synchronize_null, 0},
    {"cpool_event_elapsed_ms", "NULL, no out, never recorded", NULL, event_elapsed_unrecorded, 0},
    {"cpool_graph_pool", "NULL: NULL", NULL, graph_pool_null, 0},
    {"cpool_graph_pool_buffer_count", "NULL: 0", NULL, graph_pool_buffer_count_null, 0},
    {"cpool_graph_native", "NULL: NULL", NULL, graph_native_null, 0},
    {"cpool_graph_retain", "NULL: NULL", NULL, graph_retain_null, 0},
    {"cpool_graph_release", "NULL: no-op", NULL, graph_release_null, 0},
    {"cpool_graph_update", "NULL graph", NULL, graph_update_null_graph, 0},
    {"cpool_graph_update", "NULL stream", NULL, graph_update_null_stream, 0},
    {"cpool_graph_update", "NULL body", NULL, graph_update_null_body, 0},
    {"cpool_graph_update", "capturing stream", NULL, graph_update_capturing_stream, 0},
    {"cpool_graph_update", "stream of another device", NULL, graph_update_stream_of_other_device, 0},
    {"cpool_graph_update", "body fails: graph unchanged", NULL, graph_update_body_fails, 0},
    {"cpool_graph_dump_dot", "NULL graph", NULL, graph_dump_dot_null_graph, 0},
    {"cpool_graph_dump_dot", "NULL path", NULL, graph_dump_dot_null_path, 0},
    {"cpool_graph_dump_dot", "unwritable path", NULL, graph_dump_dot_unwritable, 0},

    {"cpool_param_create", "NULL pool", NULL, param_create_null_pool, 0},
    {"cpool_param_create", "NULL out", NULL, param_create_null_out, 0},
    {"cpool_param_create", "size 0", NULL, param_create_size_zero, 0},
    {"cpool_param_create", "size SIZE_MAX and 1<<60", NULL, param_create_size_huge, 0},
    {"cpool_param_create", "sealed pool", setup_seal, param_create_sealed, 0},
    {"cpool_param_device_ptr", "NULL: NULL", NULL, param_device_ptr_null, 0},
    {"cpool_param_set", "NULL param", NULL, param_set_null_param, 0},
    {"cpool_param_set", "NULL value", NULL, param_set_null_value, 0},
    {"cpool_param_set", "NULL stream", NULL, param_set_null_stream, 0},
    {"cpool_param_set", "size 0", NULL, param_set_size_zero, 0},
    {"cpool_param_set", "larger than the block, SIZE_MAX, 1<<60", NULL, param_set_larger_than_block, 0},
    {"cpool_param_set", "capturing stream", NULL, param_set_capturing_stream, 0},
    {"cpool_param_set", "stream of another device", NULL, param_set_stream_of_other_device, 0},

    {"cpool_graphed_call", "NULL stream", NULL, graphed_call_null_stream, 0},
    {"cpool_graphed_call", "NULL body", NULL, graphed_call_null_body, 0},
    {"cpool_graphed_call", "NULL out", NULL, graphed_call_null_out, 0},
    {"cpool_graphed_call", "negative warmup_runs", NULL, graphed_call_negative_warmups, 0},
    {"cpool_graphed_call", "bad mode enum: no warm-up runs", NULL, graphed_call_bad_mode, 0},
    {"cpool_graphed_call", "capturing stream", NULL, graphed_call_capturing_stream, 0},
    {"cpool_graphed_call", "capturing stream with warm-ups: none runs", NULL, graphed_call_capturing_stream_warmups,
     0},
    {"cpool_graphed_call", "body fails in a warm-up", NULL, graphed_call_body_fails, 0},

    {"cpool_graph_cache_create", "NULL or dead pool, NULL out, short struct_size", NULL, graph_cache_create_bad, 0},
    {"cpool_graph_cache_destroy", "NULL: no-op; a dead cache: refused", NULL, graph_cache_destroy_null_and_dead, 0},
    {"cpool_graph_cache_launch", "NULL or dead cache, NULL stream or body, capturing or foreign stream", NULL,
     graph_cache_launch_bad, 0},
    {"cpool_graph_cache_launch", "body fails: nothing kept or counted", NULL, graph_cache_launch_body_fails, 0},
    {"cpool_graph_cache_get", "NULL cache or out; absent key: NULL", NULL, graph_cache_get_bad, 0},
    {"cpool_graph_cache_evict", "NULL or dead cache; absent key: OK", NULL, graph_cache_evict_bad, 0},
    {"cpool_graph_cache_get_stats", "NULL cache or out, short struct_size", NULL, graph_cache_stats_bad, 0},
    {"cpool_graph_cache_predict_bytes", "NULL cache or out", NULL, graph_cache_predict_bad, 0},
};
/* misuse-table-end */

/* ---- driver ----------------------------------------------------------------------- */

static void misuse_table(cpool_device *dev) {
    size_t i;
    int failed_rows = 0;
    for (i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const row *r = &rows[i];
        fixture f;
        snapshot before, after;
        int failures_before = __atomic_load_n(&check_case_failures_, __ATOMIC_SEQ_CST);
        if (fixture_make(&f, dev)) {
            if (r->setup) r->setup(&f);
            snapshot_take(&f, &before);
            f.body_calls = 0;
            r->run(&f);
            snapshot_take(&f, &after);
            snapshot_compare(&before, &after, r->may);
        }
        fixture_teardown(&f);
        if (__atomic_load_n(&check_case_failures_, __ATOMIC_SEQ_CST) != failures_before) {
            failed_rows++;
            printf("  ^ row %zu failed: %s: %s\n", i, r->fn, r->misuse);
        }
        fflush(stdout);
    }
    printf("  %zu rows: %d failed\n", sizeof rows / sizeof rows[0], failed_rows);
}

/* A library that took a handle of the wrong type for its own may wait
 * forever on what it took for a lock or a stream: the call that does fails
 * the binary, naming itself, instead of hanging the suite. */
enum { WRONG_CALL_DEADLINE_S = 30 };
static char wrong_call_now[256];

static void wrong_call_hung(int sig) {
    static const char text[] = "FAIL: no return within the deadline: ";
    (void)sig;
    if (write(STDOUT_FILENO, text, sizeof text - 1) < 0 ||
        write(STDOUT_FILENO, wrong_call_now, strlen(wrong_call_now)) < 0 || write(STDOUT_FILENO, "\n", 1) < 0)
        _exit(1);
    _exit(1);
}

/* Each row in a fixture of its own, each wrong type in turn, with the
 * snapshot around every call. */
static void wrong_type_table(cpool_device *dev) {
    size_t i;
    int failed_rows = 0;
    signal(SIGALRM, wrong_call_hung);
    for (i = 0; i < sizeof wrong_rows / sizeof wrong_rows[0]; i++) {
        const wrong_row *r = &wrong_rows[i];
        fixture f;
        int failures_before = __atomic_load_n(&check_case_failures_, __ATOMIC_SEQ_CST);
        if (fixture_make(&f, dev)) {
            int t;
            for (t = 0; t < T_COUNT; t++) {
                snapshot before, after;
                char want[256];
                cpool_stream *unused = NULL;
                if (t == (int)r->want) continue;
                snprintf(want, sizeof want, "%s: %s is %s handle, not %s", r->fn, r->arg, type_name[t],
                         type_name[r->want]);
                remove(WRONG_PATH);
                snapshot_take(&f, &before);
                f.body_calls = 0;
                /* A known last error, so that a call that notes none is seen. */
                CHECK_STATUS(cpool_stream_create(NULL, &unused), INV);
                snprintf(wrong_call_now, sizeof wrong_call_now, "%s given %s handle as its %s", r->fn, type_name[t],
                         r->arg);
                alarm(WRONG_CALL_DEADLINE_S);
                r->call(&f, live_handle(&f, (handle_type)t));
                alarm(0);
                CHECK_STR_EQ(cpool_last_error(), want);
                snapshot_take(&f, &after);
                snapshot_compare(&before, &after, 0);
            }
        }
        fixture_teardown(&f);
        if (__atomic_load_n(&check_case_failures_, __ATOMIC_SEQ_CST) != failures_before) {
            failed_rows++;
            printf("  ^ row %zu failed: %s: %s of the wrong type\n", i, r->fn, r->arg);
        }
        fflush(stdout);
    }
    printf("  %zu rows: %d failed\n", sizeof wrong_rows / sizeof wrong_rows[0], failed_rows);
}

static const check_case cases[] = {
    CHECK_CASE(misuse_table),
    CHECK_CASE(wrong_type_table),
};
CHECK_MAIN(cases, CHECK_ON_ALL)
