/* Capture pools: create and options, references, seal, record/clear/drop,
 * stats queries. */
#include <stddef.h>

#include "check.h"
#include "helpers.h"

#define MiB (1024u * 1024u)

static void pool_create_rejects_bad_arguments(cpool_device *dev) {
    cpool_pool *pool = NULL;
    cpool_pool_options opts;
    CHECK_STATUS(cpool_pool_create(NULL, NULL, &pool), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_pool_create(dev, NULL, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    memset(&opts, 0, sizeof opts);
    opts.struct_size = 0;
    CHECK_STATUS(cpool_pool_create(dev, &opts, &pool), CPOOL_ERR_INVALID_ARGUMENT);
    opts.struct_size = sizeof(size_t) - 1;
    CHECK_STATUS(cpool_pool_create(dev, &opts, &pool), CPOOL_ERR_INVALID_ARGUMENT);
    memset(&opts, 0, sizeof opts);
    opts.struct_size = sizeof opts;
    opts.reserve_bytes = 8 * MiB;
    opts.max_reserved_bytes = 4 * MiB;
    CHECK_STATUS(cpool_pool_create(dev, &opts, &pool), CPOOL_ERR_INVALID_ARGUMENT);
}

/* A new pool: unsealed, empty, every counter zero. Zeroed options and only
 * the struct_size of the first field are the defaults too. */
static void pool_create_defaults(cpool_device *dev) {
    cpool_pool *p1 = NULL, *p2 = NULL, *p3 = NULL;
    cpool_pool_options opts;
    cpool_pool_stats st;
    memset(&opts, 0, sizeof opts);
    opts.struct_size = sizeof opts;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &p1));
    REQUIRE_OK(cpool_pool_create(dev, &opts, &p2));
    opts.struct_size = sizeof(size_t); /* an older caller that knows only struct_size */
    REQUIRE_OK(cpool_pool_create(dev, &opts, &p3));
    CHECK(p1 != p2);
    CHECK(!cpool_pool_is_sealed(p1));
    CHECK_EQ(cpool_pool_buffer_count(p1), 0);
    st = stats_of(p1);
    CHECK_EQ(st.reserved_bytes, 0);
    CHECK_EQ(st.reserved_bytes_peak, 0);
    CHECK_EQ(st.allocated_bytes, 0);
    CHECK_EQ(st.allocated_bytes_peak, 0);
    CHECK_EQ(st.graph_reserved_bytes, 0);
    CHECK_EQ(st.alloc_count, 0);
    CHECK_EQ(st.free_count, 0);
    CHECK_EQ(st.segment_count, 0);
    CHECK_EQ(st.cached_bytes, 0);
    CHECK_EQ(st.graph_count, 0);
    st = stats_of(p3);
    CHECK_EQ(st.reserved_bytes, 0);
    cpool_pool_release(p1);
    cpool_pool_release(p2);
    cpool_pool_release(p3);
}

/* reserve_bytes is rounded up to 2 MiB, serves allocations without a new
 * segment, and goes back at trim like any unused segment. */
static void pool_reserve_bytes(cpool_device *dev) {
    cpool_pool *pool = NULL;
    cpool_stream *s = NULL;
    cpool_pool_options opts;
    cpool_pool_stats st, st2;
    void *p = NULL;
    memset(&opts, 0, sizeof opts);
    opts.struct_size = sizeof opts;
    opts.reserve_bytes = 3 * MiB;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, &opts, &pool));
    st = stats_of(pool);
    CHECK_EQ(st.reserved_bytes, 4 * MiB);
    CHECK_EQ(st.reserved_bytes_peak, 4 * MiB);
    CHECK_EQ(st.cached_bytes, 4 * MiB);
    CHECK_GE(st.segment_count, 1);
    CHECK_EQ(st.allocated_bytes, 0);
    CHECK_STATS_SANE(st);

    REQUIRE_OK(cpool_alloc(pool, 1 * MiB, s, &p));
    st2 = stats_of(pool);
    CHECK_EQ(st2.reserved_bytes, 4 * MiB); /* served from the reservation */
    CHECK_EQ(st2.segment_count, st.segment_count);
    CHECK_EQ(st2.allocated_bytes, 1 * MiB);
    CHECK_STATS_SANE(st2);
    CHECK_OK(cpool_free(pool, p, s));
    CHECK_OK(cpool_pool_trim(pool));
    st = stats_of(pool);
    CHECK_EQ(st.reserved_bytes, 0);
    CHECK_EQ(st.segment_count, 0);
    CHECK_EQ(st.cached_bytes, 0);
    CHECK_EQ(st.reserved_bytes_peak, 4 * MiB);
    cpool_pool_release(pool);

    opts.reserve_bytes = 1;
    REQUIRE_OK(cpool_pool_create(dev, &opts, &pool));
    CHECK_EQ(stats_of(pool).reserved_bytes, 2 * MiB);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* max_reserved_bytes bounds reserved_bytes; a failing allocation changes
 * nothing; cached segments are given back to make room. */
static void pool_max_reserved_bytes(cpool_device *dev) {
    cpool_pool *pool = NULL;
    cpool_stream *s = NULL;
    cpool_pool_options opts;
    cpool_pool_stats before, after;
    void *small = NULL, *big = NULL, *p = NULL;
    memset(&opts, 0, sizeof opts);
    opts.struct_size = sizeof opts;
    opts.max_reserved_bytes = 4 * MiB;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, &opts, &pool));

    REQUIRE_OK(cpool_alloc(pool, 1024, s, &small));
    CHECK_LE(stats_of(pool).reserved_bytes, 4 * MiB);
    before = stats_of(pool);
    CHECK_STATUS(cpool_alloc(pool, 8 * MiB, s, &big), CPOOL_ERR_OUT_OF_MEMORY);
    after = stats_of(pool);
    CHECK_STATS_EQ(before, after);
    CHECK_OK(cpool_free(pool, small, s));

    /* 2 MiB, freed (cached), then 4 MiB: fits once the cache is given back. */
    REQUIRE_OK(cpool_alloc(pool, 2 * MiB, s, &p));
    CHECK_LE(stats_of(pool).reserved_bytes, 4 * MiB);
    CHECK_OK(cpool_free(pool, p, s));
    CHECK_OK(cpool_alloc(pool, 4 * MiB, s, &big));
    after = stats_of(pool);
    CHECK_LE(after.reserved_bytes, 4 * MiB);
    CHECK_LE(after.reserved_bytes_peak, 4 * MiB);
    CHECK_EQ(after.allocated_bytes, 4 * MiB);
    CHECK_OK(cpool_free(pool, big, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* ---- references ----------------------------------------------------------------- */

static void pool_retain_release(cpool_device *dev) {
    cpool_pool *pool = NULL;
    drop_log log;
    tracked obj;
    drop_log_init(&log);
    tracked_init(&obj, &log, 0, NULL);
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_OK(cpool_pool_record(pool, &obj, tracked_drop, NULL));
    CHECK_PTR_EQ(cpool_pool_retain(pool), pool);
    CHECK_PTR_EQ(cpool_pool_retain(pool), pool);
    CHECK(cpool_pool_retain(NULL) == NULL);
    cpool_pool_release(NULL); /* no-op */
    cpool_pool_release(pool);
    cpool_pool_release(pool);
    CHECK_EQ(aload(&obj.drops), 0); /* one reference left */
    CHECK_EQ(cpool_pool_buffer_count(pool), 1);
    cpool_pool_release(pool);
    CHECK_EQ(aload(&obj.drops), 1);
    CHECK_EQ(aload(&log.count), 1);
}

/* ---- seal ---------------------------------------------------------------------- */

static void pool_seal_blocks_alloc_only(cpool_device *dev) {
    cpool_pool *pool = NULL;
    cpool_stream *s = NULL;
    cpool_pool_stats before, after;
    void *p = NULL, *q = NULL;
    size_t idx = 99;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK(!cpool_pool_is_sealed(pool));
    CHECK(!cpool_pool_is_sealed(NULL));
    REQUIRE_OK(cpool_alloc(pool, 1000, s, &p));

    cpool_pool_seal(pool);
    CHECK(cpool_pool_is_sealed(pool));
    before = stats_of(pool);
    CHECK_STATUS(cpool_alloc(pool, 1000, s, &q), CPOOL_ERR_SEALED);
    CHECK_STATUS(cpool_alloc(pool, 64 * MiB, s, &q), CPOOL_ERR_SEALED);
    after = stats_of(pool);
    CHECK_STATS_EQ(before, after);

    /* Free and record still work on a sealed pool. */
    CHECK_OK(cpool_free(pool, p, s));
    CHECK_OK(cpool_pool_record(pool, NULL, NULL, &idx));
    CHECK_EQ(idx, 0);
    after = stats_of(pool);
    CHECK_EQ(after.allocated_bytes, 0);
    CHECK_EQ(after.free_count, 1);

    cpool_pool_seal(pool); /* twice: still sealed */
    CHECK(cpool_pool_is_sealed(pool));
    cpool_pool_unseal(pool);
    CHECK(!cpool_pool_is_sealed(pool));
    CHECK_OK(cpool_alloc(pool, 1000, s, &q));
    CHECK_EQ(stats_of(pool).alloc_count, 2);
    CHECK_OK(cpool_free(pool, q, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* ---- record / clear / drop --------------------------------------------------------- */

static void pool_record_indices_and_clear(cpool_device *dev) {
    cpool_pool *pool = NULL;
    drop_log log;
    tracked obj[5];
    size_t idx = 77;
    int i;
    drop_log_init(&log);
    for (i = 0; i < 5; i++) tracked_init(&obj[i], &log, i, NULL);
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_STATUS(cpool_pool_record(NULL, &obj[0], tracked_drop, &idx), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_EQ(idx, 77);
    CHECK_EQ(cpool_pool_buffer_count(NULL), 0);

    for (i = 0; i < 3; i++) {
        idx = 77;
        CHECK_OK(cpool_pool_record(pool, &obj[i], tracked_drop, &idx));
        CHECK_EQ(idx, i);
        CHECK_EQ(cpool_pool_buffer_count(pool), i + 1);
    }
    CHECK_OK(cpool_pool_record(pool, NULL, NULL, NULL)); /* counted, never dropped; index 3 */
    CHECK_EQ(cpool_pool_buffer_count(pool), 4);
    CHECK_EQ(aload(&log.count), 0);

    cpool_pool_clear_buffers(pool);
    CHECK_EQ(aload(&log.count), 3);
    for (i = 0; i < 3; i++) {
        CHECK_EQ(log.order[i], i);
        CHECK_EQ(obj[i].drops, 1);
    }
    CHECK_EQ(cpool_pool_buffer_count(pool), 0);

    /* Indices restart; clearing an empty pool drops nothing. */
    idx = 77;
    CHECK_OK(cpool_pool_record(pool, &obj[3], tracked_drop, &idx));
    CHECK_EQ(idx, 0);
    idx = 77;
    CHECK_OK(cpool_pool_record(pool, &obj[4], tracked_drop, &idx));
    CHECK_EQ(idx, 1);
    CHECK_EQ(cpool_pool_buffer_count(pool), 2);
    CHECK_EQ(aload(&log.count), 3);

    cpool_pool_release(pool); /* last reference: drops 3 then 4 */
    CHECK_EQ(aload(&log.count), 5);
    for (i = 0; i < 5; i++) {
        CHECK_EQ(log.order[i], i);
        CHECK_EQ(obj[i].drops, 1);
    }
}

static void pool_clear_empty_and_twice(cpool_device *dev) {
    cpool_pool *pool = NULL;
    drop_log log;
    tracked obj;
    drop_log_init(&log);
    tracked_init(&obj, &log, 0, NULL);
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    cpool_pool_clear_buffers(pool);
    CHECK_EQ(cpool_pool_buffer_count(pool), 0);
    CHECK_OK(cpool_pool_record(pool, &obj, tracked_drop, NULL));
    cpool_pool_clear_buffers(pool);
    cpool_pool_clear_buffers(pool);
    cpool_pool_release(pool);
    CHECK_EQ(aload(&obj.drops), 1);
}

/* The last release drops on the calling thread, in registration order. */
static void pool_release_drops_on_calling_thread(cpool_device *dev) {
    cpool_pool *pool = NULL;
    drop_log log;
    tracked obj[64];
    int i;
    drop_log_init(&log);
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    for (i = 0; i < 64; i++) {
        tracked_init(&obj[i], &log, i, NULL);
        CHECK_OK(cpool_pool_record(pool, &obj[i], tracked_drop, NULL));
    }
    cpool_pool_release(pool);
    CHECK_EQ(aload(&log.count), 64);
    for (i = 0; i < 64; i++) {
        CHECK_EQ(log.order[i], i);
        CHECK_EQ(obj[i].drops, 1);
        CHECK(obj[i].drops == 1 && pthread_equal(obj[i].drop_thread, pthread_self()));
    }
}

/* Clear and the last release wait for stream work on the device first. */
static void pool_clear_waits_for_stream_work(cpool_device *dev) {
    cpool_pool *pool = NULL;
    cpool_stream *s = NULL;
    drop_log log;
    tracked a, b;
    static int flag1, flag2;
    static sleep_set slow1, slow2;
    void *p = NULL;
    astore(&flag1, 0);
    astore(&flag2, 0);
    slow1.ms = 50, slow1.flag = &flag1, slow1.value = 1;
    slow2.ms = 50, slow2.flag = &flag2, slow2.value = 1;
    drop_log_init(&log);
    tracked_init(&a, &log, 0, &flag1);
    tracked_init(&b, &log, 1, &flag2);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, 4096, s, &p));
    CHECK_OK(cpool_pool_record(pool, &a, tracked_drop, NULL));
    CHECK_OK(cpool_launch_host(s, cb_sleep_set, &slow1));
    CHECK_OK(cpool_memset_async(s, p, 1, 4096));
    cpool_pool_clear_buffers(pool);
    CHECK_EQ(aload(&a.drops), 1);
    CHECK_EQ(a.watch_at_drop, 1);

    CHECK_OK(cpool_pool_record(pool, &b, tracked_drop, NULL));
    CHECK_OK(cpool_launch_host(s, cb_sleep_set, &slow2));
    CHECK_OK(cpool_memset_async(s, p, 2, 4096));
    cpool_pool_release(pool); /* with p still allocated: the release returns it */
    CHECK_EQ(aload(&b.drops), 1);
    CHECK_EQ(b.watch_at_drop, 1);
    cpool_stream_destroy(s);
}

/* ---- stats queries --------------------------------------------------------------------- */

static void pool_get_stats_arguments(cpool_device *dev) {
    cpool_pool *pool = NULL;
    cpool_pool_stats st;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    CHECK_STATUS(cpool_pool_get_stats(NULL, &st), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_pool_get_stats(pool, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    st.struct_size = 0;
    CHECK_STATUS(cpool_pool_get_stats(pool, &st), CPOOL_ERR_INVALID_ARGUMENT);
    st.struct_size = offsetof(cpool_pool_stats, segment_count); /* one field short */
    CHECK_STATUS(cpool_pool_get_stats(pool, &st), CPOOL_ERR_INVALID_ARGUMENT);
    st.struct_size = sizeof st;
    CHECK_OK(cpool_pool_get_stats(pool, &st));
    CHECK_EQ(st.struct_size, sizeof st);
    CHECK_STATUS(cpool_pool_trim(NULL), CPOOL_ERR_INVALID_ARGUMENT);
    cpool_pool_release(pool);
}

/* An older caller's smaller struct: only its bytes are written. */
static void pool_get_stats_older_struct(cpool_device *dev) {
    cpool_pool *pool = NULL;
    cpool_stream *s = NULL;
    void *p = NULL;
    size_t old_size = offsetof(cpool_pool_stats, segment_count) + sizeof(uint64_t);
    unsigned char buf[sizeof(cpool_pool_stats) + 64];
    cpool_pool_stats st;
    size_t i;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, 1000, s, &p));
    memset(buf, 0xee, sizeof buf);
    memcpy(buf, &old_size, sizeof old_size);
    CHECK_OK(cpool_pool_get_stats(pool, (cpool_pool_stats *)(void *)buf));
    for (i = old_size; i < sizeof buf; i++) {
        if (buf[i] != 0xee) {
            check_report_(__FILE__, __LINE__, "byte %zu written past struct_size %zu", i, old_size);
            break;
        }
    }
    memcpy(&st, buf, old_size);
    CHECK_EQ(st.allocated_bytes, 1000);
    CHECK_EQ(st.alloc_count, 1);
    CHECK_GE(st.segment_count, 1);
    CHECK_OK(cpool_free(pool, p, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* A pool with nothing mapped (never used, or trimmed back to nothing) and
 * nothing live suspends and resumes in either mode; so does one whose only
 * memory is a graph's output, with no eager page mapped. */
static void pool_suspend_with_nothing_mapped(cpool_device *dev) {
    cpool_pool *pool = NULL;
    cpool_stream *s = NULL;
    cpool_graph *g = NULL;
    void *p = NULL, *out = NULL;
    cpool_pool_stats st = {.struct_size = sizeof st};
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_OK(cpool_pool_suspend(pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    CHECK(cpool_pool_is_suspended(pool));
    CHECK_OK(cpool_pool_resume(pool));
    CHECK_OK(cpool_pool_suspend(pool, CPOOL_SUSPEND_DISCARD));
    CHECK_OK(cpool_pool_resume(pool));
    /* Eager memory used and trimmed away: no run mapped, a graph's output
     * live. */
    REQUIRE_OK(cpool_alloc(pool, 4096, s, &p));
    CHECK_OK(cpool_free(pool, p, s));
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_alloc(pool, 64, s, &out));
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_OK(cpool_pool_suspend(pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    CHECK_OK(cpool_pool_get_stats(pool, &st));
    CHECK_EQ(st.reserved_bytes, 0);
    CHECK_GE(st.host_kept_bytes, 64);
    CHECK_OK(cpool_pool_resume(pool));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_OK(cpool_free(pool, out, s));
    cpool_graph_release(g);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* A parameter block is the pool's memory: while the pool is suspended a
 * set is refused like any copy into it, enqueues nothing, and the value
 * kept by a KEEP_CONTENTS suspend is the one read after the resume. */
static void pool_param_set_while_suspended(cpool_device *dev) {
    cpool_pool *pool = NULL;
    cpool_stream *s = NULL;
    cpool_param *prm = NULL;
    const uint64_t kept = 0x1122334455667788u, refused = 42;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_param_create(pool, sizeof kept, &prm));
    CHECK_OK(cpool_param_set(prm, &kept, sizeof kept, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_OK(cpool_pool_suspend(pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    CHECK_STATUS(cpool_param_set(prm, &refused, sizeof refused, s), CPOOL_ERR_SUSPENDED);
    CHECK(strstr(cpool_last_error(), "cpool_param_set") != NULL);
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_OK(cpool_pool_resume(pool));
    if (cpool_device_backend(dev) == CPOOL_BACKEND_HOST) {
        uint64_t now;
        memcpy(&now, cpool_param_device_ptr(prm), sizeof now);
        CHECK_EQ(now, kept);
    }
    CHECK_OK(cpool_param_set(prm, &refused, sizeof refused, s)); /* resumed: sets work again */
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

static const check_case cases[] = {
    CHECK_CASE(pool_create_rejects_bad_arguments),
    CHECK_CASE(pool_create_defaults),
    CHECK_CASE(pool_reserve_bytes),
    CHECK_CASE(pool_max_reserved_bytes),
    CHECK_CASE(pool_retain_release),
    CHECK_CASE(pool_seal_blocks_alloc_only),
    CHECK_CASE(pool_record_indices_and_clear),
    CHECK_CASE(pool_clear_empty_and_twice),
    CHECK_CASE(pool_release_drops_on_calling_thread),
    CHECK_CASE(pool_clear_waits_for_stream_work),
    CHECK_CASE(pool_get_stats_arguments),
    CHECK_CASE(pool_get_stats_older_struct),
    CHECK_CASE(pool_suspend_with_nothing_mapped),
    CHECK_CASE(pool_param_set_while_suspended),
};
CHECK_MAIN(cases, CHECK_ON_ALL)
