/* cpool_alloc / cpool_free / cpool_pool_trim outside capture: arguments,
 * exact stats, alignment, no overlap, misuse, stream-ordered reuse. */
#include "check.h"
#include "helpers.h"

#define MiB (1024u * 1024u)

static void alloc_rejects_bad_arguments(cpool_device *dev) {
    cpool_pool *pool = NULL;
    cpool_stream *s = NULL;
    cpool_pool_stats before, after;
    void *p = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    before = stats_of(pool);
    CHECK_STATUS(cpool_alloc(pool, 0, s, &p), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_alloc(NULL, 16, s, &p), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_alloc(pool, 16, NULL, &p), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_alloc(pool, 16, s, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    after = stats_of(pool);
    CHECK_STATS_EQ(before, after);

    /* A stream of another device: only testable where two backends exist. */
    if (cpool_device_backend(dev) == CPOOL_BACKEND_CUDA) {
        cpool_device *host = NULL;
        cpool_stream *hs = NULL;
        REQUIRE_OK(cpool_device_open(CPOOL_BACKEND_HOST, 0, &host));
        REQUIRE_OK(cpool_stream_create(host, &hs));
        CHECK_STATUS(cpool_alloc(pool, 16, hs, &p), CPOOL_ERR_INVALID_ARGUMENT);
        after = stats_of(pool);
        CHECK_STATS_EQ(before, after);
        cpool_stream_destroy(hs);
        cpool_device_close(host);
    }
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* Every counter, step by step. */
static void alloc_free_exact_stats(cpool_device *dev) {
    cpool_pool *pool = NULL;
    cpool_stream *s = NULL;
    cpool_pool_stats st;
    void *a = NULL, *b = NULL;
    uint64_t peak;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));

    REQUIRE_OK(cpool_alloc(pool, 1000, s, &a));
    CHECK(a != NULL);
    CHECK_EQ((uintptr_t)a % 256, 0);
    st = stats_of(pool);
    CHECK_EQ(st.allocated_bytes, 1000);
    CHECK_EQ(st.allocated_bytes_peak, 1000);
    CHECK_EQ(st.alloc_count, 1);
    CHECK_EQ(st.free_count, 0);
    CHECK_GE(st.reserved_bytes, 1000);
    CHECK_GE(st.segment_count, 1);
    CHECK_EQ(st.graph_reserved_bytes, 0);
    CHECK_EQ(st.graph_count, 0);
    CHECK_STATS_SANE(st);

    REQUIRE_OK(cpool_alloc(pool, 3000, s, &b));
    CHECK_EQ((uintptr_t)b % 256, 0);
    CHECK(!ranges_overlap(a, 1000, b, 3000));
    st = stats_of(pool);
    CHECK_EQ(st.allocated_bytes, 4000);
    CHECK_EQ(st.allocated_bytes_peak, 4000);
    CHECK_EQ(st.alloc_count, 2);
    CHECK_STATS_SANE(st);

    CHECK_OK(cpool_free(pool, a, s));
    st = stats_of(pool);
    CHECK_EQ(st.allocated_bytes, 3000);
    CHECK_EQ(st.allocated_bytes_peak, 4000);
    CHECK_EQ(st.free_count, 1);
    CHECK_STATS_SANE(st);

    CHECK_OK(cpool_free(pool, b, s));
    st = stats_of(pool);
    CHECK_EQ(st.allocated_bytes, 0);
    CHECK_EQ(st.allocated_bytes_peak, 4000);
    CHECK_EQ(st.alloc_count, 2);
    CHECK_EQ(st.free_count, 2);
    CHECK_GT(st.reserved_bytes, 0);           /* cached, not given back */
    CHECK_EQ(st.cached_bytes, st.reserved_bytes); /* nothing live */
    CHECK_STATS_SANE(st);
    peak = st.reserved_bytes_peak;

    CHECK_OK(cpool_pool_trim(pool));
    st = stats_of(pool);
    CHECK_EQ(st.reserved_bytes, 0);
    CHECK_EQ(st.segment_count, 0);
    CHECK_EQ(st.cached_bytes, 0);
    CHECK_EQ(st.reserved_bytes_peak, peak);
    CHECK_EQ(st.allocated_bytes_peak, 4000);
    CHECK_STATS_SANE(st);

    /* Usable again after a trim. */
    REQUIRE_OK(cpool_alloc(pool, 1, s, &a));
    CHECK_EQ(stats_of(pool).allocated_bytes, 1);
    CHECK_OK(cpool_free(pool, a, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* Blocks are 256-aligned, disjoint, and each holds its own contents. */
static void alloc_aligned_disjoint_usable(cpool_device *dev) {
    static const size_t sizes[] = {1, 7, 255, 256, 257, 1000, 4096, 65537, MiB + 3, 3 * MiB, 100, 2 * MiB};
    enum { N = sizeof sizes / sizeof sizes[0] };
    cpool_pool *pool = NULL;
    cpool_stream *s = NULL;
    void *p[N];
    uint64_t total = 0;
    int i, j;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    for (i = 0; i < N; i++) {
        REQUIRE_OK(cpool_alloc(pool, sizes[i], s, &p[i]));
        CHECK_EQ((uintptr_t)p[i] % 256, 0);
        total += sizes[i];
        CHECK_OK(cpool_memset_async(s, p[i], i + 1, sizes[i]));
    }
    for (i = 0; i < N; i++)
        for (j = 0; j < i; j++)
            if (ranges_overlap(p[i], sizes[i], p[j], sizes[j]))
                check_report_(__FILE__, __LINE__, "blocks %d and %d overlap", j, i);
    for (i = 0; i < N; i++) CHECK_BYTES(s, p[i], sizes[i], i + 1);
    CHECK_EQ(stats_of(pool).allocated_bytes, total);
    CHECK_EQ(stats_of(pool).alloc_count, N);
    for (i = 0; i < N; i += 2) CHECK_OK(cpool_free(pool, p[i], s));
    for (i = 1; i < N; i += 2) CHECK_BYTES(s, p[i], sizes[i], i + 1); /* neighbours untouched */
    for (i = 1; i < N; i += 2) CHECK_OK(cpool_free(pool, p[i], s));
    CHECK_EQ(stats_of(pool).allocated_bytes, 0);
    CHECK_EQ(stats_of(pool).free_count, N);
    CHECK_STATS_SANE(stats_of(pool));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* Freeing what this pool did not hand out, or freeing twice, changes nothing. */
static void free_foreign_and_double_free(cpool_device *dev) {
    cpool_pool *pool = NULL, *other = NULL;
    cpool_stream *s = NULL;
    cpool_pool_stats before, after, other_before, other_after;
    void *p = NULL, *q = NULL, *theirs = NULL;
    void *heap = malloc(4096);
    int local = 0;
    REQUIRE(heap != NULL);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &other));
    REQUIRE_OK(cpool_alloc(pool, 4096, s, &p));
    REQUIRE_OK(cpool_alloc(pool, 512, s, &q));
    REQUIRE_OK(cpool_alloc(other, 4096, s, &theirs));
    CHECK_OK(cpool_memset_async(s, p, 0x6b, 4096));

    before = stats_of(pool);
    other_before = stats_of(other);
    CHECK_STATUS(cpool_free(pool, heap, s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_free(pool, &local, s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_free(pool, (unsigned char *)p + 256, s), CPOOL_ERR_INVALID_ARGUMENT); /* interior */
    CHECK_STATUS(cpool_free(pool, (unsigned char *)p + 1, s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_free(pool, theirs, s), CPOOL_ERR_INVALID_ARGUMENT); /* another pool's */
    CHECK_STATUS(cpool_free(pool, NULL, s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_free(NULL, p, s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_free(pool, p, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    after = stats_of(pool);
    other_after = stats_of(other);
    CHECK_STATS_EQ(before, after);
    CHECK_STATS_EQ(other_before, other_after);
    CHECK_BYTES(s, p, 4096, 0x6b); /* the block is still live and intact */

    CHECK_OK(cpool_free(pool, q, s));
    before = stats_of(pool);
    CHECK_STATUS(cpool_free(pool, q, s), CPOOL_ERR_INVALID_ARGUMENT); /* double free */
    after = stats_of(pool);
    CHECK_STATS_EQ(before, after);

    /* Still a working pool: p frees once, the double free did not corrupt it. */
    CHECK_OK(cpool_free(pool, p, s));
    CHECK_STATUS(cpool_free(pool, p, s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_EQ(stats_of(pool).allocated_bytes, 0);
    CHECK_EQ(stats_of(pool).free_count, 2);
    REQUIRE_OK(cpool_alloc(pool, 512, s, &q));
    REQUIRE_OK(cpool_alloc(pool, 512, s, &p));
    CHECK(p != q);
    CHECK_OK(cpool_free(pool, p, s));
    CHECK_OK(cpool_free(pool, q, s));
    CHECK_OK(cpool_free(other, theirs, s));
    CHECK_STATS_SANE(stats_of(pool));
    cpool_pool_release(pool);
    cpool_pool_release(other);
    cpool_stream_destroy(s);
    free(heap);
}

/* A freed block is served again from the cache on its stream: no new memory. */
static void alloc_reuses_cache(cpool_device *dev) {
    cpool_pool *pool = NULL;
    cpool_stream *s = NULL;
    cpool_pool_stats st1, st2;
    void *a = NULL;
    int i;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, 100000, s, &a));
    CHECK_OK(cpool_free(pool, a, s));
    st1 = stats_of(pool);
    for (i = 0; i < 100; i++) {
        REQUIRE_OK(cpool_alloc(pool, 100000, s, &a));
        CHECK_OK(cpool_free(pool, a, s));
    }
    st2 = stats_of(pool);
    CHECK_EQ(st2.reserved_bytes, st1.reserved_bytes);
    CHECK_EQ(st2.segment_count, st1.segment_count);
    CHECK_EQ(st2.reserved_bytes_peak, st1.reserved_bytes_peak);
    CHECK_EQ(st2.alloc_count, 101);
    CHECK_EQ(st2.free_count, 101);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* A block freed on s1 while s1's work on it is still pending must not be
 * written by s2's work before that work finished. s1 is held by a slow host
 * callback; s2 allocates the same size at once and writes it. */
static void cross_stream_reuse_is_ordered(cpool_device *dev) {
    cpool_pool *pool = NULL;
    cpool_stream *s1 = NULL, *s2 = NULL;
    void *a = NULL, *b = NULL;
    const size_t n = 65536;
    static int flag;
    static sleep_set slow;
    REQUIRE_OK(cpool_stream_create(dev, &s1));
    REQUIRE_OK(cpool_stream_create(dev, &s2));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    astore(&flag, 0);
    slow.ms = 50, slow.flag = &flag, slow.value = 1;

    REQUIRE_OK(cpool_alloc(pool, n, s1, &a));
    CHECK_OK(cpool_launch_host(s1, cb_sleep_set, &slow));
    CHECK_OK(cpool_memset_async(s1, a, 0x11, n)); /* runs after ~50 ms */
    CHECK_OK(cpool_free(pool, a, s1));

    REQUIRE_OK(cpool_alloc(pool, n, s2, &b));
    CHECK_OK(cpool_memset_async(s2, b, 0x22, n));
    CHECK_OK(cpool_stream_synchronize(s2));
    CHECK_OK(cpool_stream_synchronize(s1));
    CHECK_EQ(aload(&flag), 1);
    /* If b aliased a without waiting for s1, s1's late fill overwrote it. */
    CHECK_BYTES(s2, b, n, 0x22);
    CHECK_OK(cpool_free(pool, b, s2));
    CHECK_EQ(stats_of(pool).allocated_bytes, 0);
    cpool_pool_release(pool);
    cpool_stream_destroy(s1);
    cpool_stream_destroy(s2);
}

/* Trim gives back unused memory only: live blocks keep their contents. */
static void trim_keeps_live_blocks(cpool_device *dev) {
    cpool_pool *pool = NULL;
    cpool_stream *s = NULL;
    cpool_pool_stats st;
    void *live = NULL, *big = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, 64 * MiB, s, &big));
    REQUIRE_OK(cpool_alloc(pool, 1000, s, &live));
    CHECK_OK(cpool_memset_async(s, live, 0x5e, 1000));
    st = stats_of(pool);
    CHECK_GE(st.reserved_bytes, 64 * MiB + 1000);
    CHECK_EQ(st.allocated_bytes, 64 * MiB + 1000);
    CHECK_OK(cpool_free(pool, big, s));
    CHECK_OK(cpool_pool_trim(pool));
    st = stats_of(pool);
    CHECK_EQ(st.allocated_bytes, 1000);
    CHECK_GE(st.reserved_bytes, 1000);
    CHECK_LT(st.reserved_bytes, 64 * MiB); /* the big block's memory went back */
    CHECK_GE(st.reserved_bytes_peak, 64 * MiB + 1000);
    CHECK_STATS_SANE(st);
    CHECK_BYTES(s, live, 1000, 0x5e);
    CHECK_OK(cpool_free(pool, live, s));
    CHECK_OK(cpool_pool_trim(pool));
    st = stats_of(pool);
    CHECK_EQ(st.reserved_bytes, 0);
    CHECK_EQ(st.segment_count, 0);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* The allocator is one piece of code: the same calls give the same
 * reserved_bytes on this backend as on the host backend. */
typedef struct seq_trace {
    uint64_t reserved[32];
    uint64_t segments[32];
    int n;
} seq_trace;

static void run_sequence(cpool_device *dev, seq_trace *t) {
    static const size_t sizes[] = {1000, 3 * MiB, 200, 1 << 20, 17, 5 * MiB + 1, 4096, 512};
    enum { N = sizeof sizes / sizeof sizes[0] };
    cpool_pool *pool = NULL;
    cpool_stream *s = NULL;
    void *p[N];
    int freed[N] = {0};
    int i;
    t->n = 0;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    for (i = 0; i < N; i++) {
        cpool_pool_stats st;
        REQUIRE_OK(cpool_alloc(pool, sizes[i], s, &p[i]));
        st = stats_of(pool);
        t->reserved[t->n] = st.reserved_bytes;
        t->segments[t->n++] = st.segment_count;
        if (i % 3 == 2) {
            CHECK_OK(cpool_free(pool, p[i - 1], s));
            freed[i - 1] = 1;
        }
    }
    for (i = 0; i < N; i++)
        if (!freed[i]) CHECK_OK(cpool_free(pool, p[i], s));
    t->reserved[t->n] = stats_of(pool).reserved_bytes;
    t->segments[t->n++] = stats_of(pool).segment_count;
    CHECK_OK(cpool_pool_trim(pool));
    t->reserved[t->n] = stats_of(pool).reserved_bytes;
    t->segments[t->n++] = stats_of(pool).segment_count;
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

static void same_sequence_same_reserved_as_host(cpool_device *dev) {
    cpool_device *host = NULL;
    seq_trace here, there;
    int i;
    REQUIRE_OK(cpool_device_open(CPOOL_BACKEND_HOST, 0, &host));
    run_sequence(dev, &here);
    run_sequence(host, &there);
    cpool_device_close(host);
    CHECK_EQ(here.n, there.n);
    for (i = 0; i < here.n && i < there.n; i++) {
        CHECK_EQ(here.reserved[i], there.reserved[i]);
        CHECK_EQ(here.segments[i], there.segments[i]);
    }
}

static void many_small_allocations(cpool_device *dev) {
    enum { N = 2000 };
    cpool_pool *pool = NULL;
    cpool_stream *s = NULL;
    static void *p[N];
    cpool_pool_stats st;
    uint64_t total = 0;
    int i;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    for (i = 0; i < N; i++) {
        total += 64 + (size_t)(i % 7);
        REQUIRE_OK(cpool_alloc(pool, 64 + (size_t)(i % 7), s, &p[i]));
        CHECK_EQ((uintptr_t)p[i] % 256, 0);
    }
    st = stats_of(pool);
    CHECK_EQ(st.alloc_count, N);
    CHECK_EQ(st.allocated_bytes, total);
    for (i = N - 1; i >= 0; i--) CHECK_OK(cpool_free(pool, p[i], s));
    st = stats_of(pool);
    CHECK_EQ(st.free_count, N);
    CHECK_EQ(st.allocated_bytes, 0);
    CHECK_STATS_SANE(st);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* Small blocks are reused at their exact size (the front cache), with the
 * callers' counters exact through reuse at another requested size, past the
 * front's capacity, and through trim, which gives every segment back. */
static void small_blocks_reused_exactly(cpool_device *dev) {
    enum { N = 200 };
    cpool_pool *pool = NULL;
    cpool_stream *s = NULL, *s2 = NULL;
    static void *p[N];
    void *a = NULL, *b = NULL, *c = NULL;
    cpool_pool_stats st;
    uint64_t total = 0;
    int i;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &s2));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));

    REQUIRE_OK(cpool_alloc(pool, 700, s, &a));
    CHECK_OK(cpool_free(pool, a, s));
    st = stats_of(pool);
    CHECK_EQ(st.allocated_bytes, 0);
    CHECK_EQ(st.cached_bytes, st.reserved_bytes);
    REQUIRE_OK(cpool_alloc(pool, 600, s, &b)); /* same 1 KiB block, another size */
    CHECK(b == a);
    st = stats_of(pool);
    CHECK_EQ(st.allocated_bytes, 600);
    CHECK_EQ(st.allocated_bytes_peak, 700);
    CHECK_EQ(st.cached_bytes, st.reserved_bytes - 1024);
    CHECK_EQ(st.alloc_count, 2);
    CHECK_EQ(st.free_count, 1);
    CHECK_OK(cpool_free(pool, b, s));
    CHECK_STATUS(cpool_free(pool, b, s), CPOOL_ERR_INVALID_ARGUMENT); /* already freed, held by the front */
    CHECK_EQ(stats_of(pool).free_count, 2);

    /* Freed on s: another stream is not handed it before s's work is done
     * (here s is idle, so it may be once the pool has seen that). */
    REQUIRE_OK(cpool_alloc(pool, 600, s2, &c));
    CHECK_OK(cpool_free(pool, c, s2));

    for (i = 0; i < N; i++) {
        size_t n = 512 * (size_t)(1 + i % 9) - (size_t)(i % 5);
        total += n;
        REQUIRE_OK(cpool_alloc(pool, n, s, &p[i]));
        CHECK_OK(cpool_memset_async(s, p[i], i & 0xff, n));
    }
    st = stats_of(pool);
    CHECK_EQ(st.allocated_bytes, total);
    for (i = 0; i < N; i += 2) CHECK_OK(cpool_free(pool, p[i], s)); /* more than the front holds */
    for (i = 0; i < N; i += 2) {
        size_t n = 512 * (size_t)(1 + i % 9) - (size_t)(i % 5);
        REQUIRE_OK(cpool_alloc(pool, n, s, &p[i]));
        CHECK_OK(cpool_memset_async(s, p[i], i & 0xff, n));
    }
    for (i = 1; i < N; i += 2) {
        size_t n = 512 * (size_t)(1 + i % 9) - (size_t)(i % 5);
        CHECK_BYTES(s, p[i], n, i & 0xff); /* no block was handed out twice */
    }
    for (i = 0; i < N; i++) CHECK_OK(cpool_free(pool, p[i], s));
    st = stats_of(pool);
    CHECK_EQ(st.allocated_bytes, 0);
    CHECK_EQ(st.allocated_bytes_peak, total);
    CHECK_EQ(st.alloc_count, 3 + N + N / 2);
    CHECK_EQ(st.free_count, st.alloc_count);
    CHECK_EQ(st.cached_bytes, st.reserved_bytes);
    CHECK_STATS_SANE(st);
    CHECK_OK(cpool_pool_trim(pool));
    st = stats_of(pool);
    CHECK_EQ(st.reserved_bytes, 0);
    CHECK_EQ(st.segment_count, 0);
    CHECK_EQ(st.cached_bytes, 0);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
    cpool_stream_destroy(s2);
}

/* A block the front handed out and that is freed under capture becomes the
 * graph's (graph-reserved), not the front's. */
static void small_block_freed_under_capture(cpool_device *dev) {
    cpool_pool *pool = NULL;
    cpool_stream *s = NULL;
    cpool_graph *g = NULL;
    void *a = NULL, *b = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, 4096, s, &a));
    CHECK_OK(cpool_free(pool, a, s));
    REQUIRE_OK(cpool_alloc(pool, 4096, s, &b)); /* from the front */
    CHECK(a == b);
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(stats_of(pool).graph_reserved_bytes, 0);
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_free(pool, b, s));
    REQUIRE_OK(cpool_capture_end(s, &g));
    cpool_pool_stats st = stats_of(pool);
    CHECK_EQ(st.graph_reserved_bytes, 4096);
    CHECK_EQ(st.allocated_bytes, 0);
    CHECK_EQ(st.free_count, 2);
    /* Work outside the graph does not get the graph's block. */
    REQUIRE_OK(cpool_alloc(pool, 4096, s, &a));
    CHECK(a != b);
    CHECK_OK(cpool_free(pool, a, s));
    cpool_graph_release(g);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* Many live small blocks of many sizes on two streams, freed and allocated
 * in a random order, so that the front cache is full most of the time and
 * makes room for frees (giving free blocks back, or handing lent ones over
 * to the allocator): live blocks never overlap, hold their bytes, and the
 * stats count every byte (debug builds also check the front cache and the
 * allocator after every call). */
static void full_front_cache_churn(cpool_device *dev) {
    enum { SLOTS = 400, OPS = 6000 };
    static stream_pool f;
    static void *p[SLOTS];
    static size_t size[SLOTS];
    cpool_stream *t = NULL;
    uint64_t x = 0x9e3779b97f4a7c15ull, live_bytes = 0;
    REQUIRE(fixture_open(dev, NULL, &f));
    REQUIRE_OK(cpool_stream_create(dev, &t));
    memset(p, 0, sizeof p);
    for (int op = 0; op < OPS; op++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        unsigned k = (unsigned)(x % SLOTS);
        cpool_stream *on = (x >> 20) & 1 ? t : f.s;
        if (p[k]) {
            if (!CHECK_OK(cpool_free(f.pool, p[k], on))) break;
            live_bytes -= size[k];
            p[k] = NULL;
        } else {
            size[k] = 256 + (size_t)((x >> 32) % 64) * 512;
            if (!CHECK_OK(cpool_alloc(f.pool, size[k], on, &p[k]))) break;
            live_bytes += size[k];
            for (unsigned j = 0; j < SLOTS; j++)
                if (j != k && p[j] && ranges_overlap(p[k], size[k], p[j], size[j])) {
                    check_report_(__FILE__, __LINE__, "op %d: slot %u overlaps live slot %u", op, k, j);
                    break;
                }
        }
        if (op % 500 == 0) CHECK_EQ(stats_of(f.pool).allocated_bytes, live_bytes);
    }
    CHECK_EQ(stats_of(f.pool).allocated_bytes, live_bytes);
    for (unsigned k = 0; k < SLOTS; k++)
        if (p[k]) CHECK_OK(cpool_free(f.pool, p[k], f.s));
    CHECK_EQ(stats_of(f.pool).allocated_bytes, 0);
    CHECK_OK(cpool_stream_synchronize(t));
    cpool_stream_destroy(t);
}

static const check_case cases[] = {
    CHECK_CASE(alloc_rejects_bad_arguments),
    CHECK_CASE(full_front_cache_churn),
    CHECK_CASE(alloc_free_exact_stats),
    CHECK_CASE(alloc_aligned_disjoint_usable),
    CHECK_CASE(free_foreign_and_double_free),
    CHECK_CASE(alloc_reuses_cache),
    CHECK_CASE(cross_stream_reuse_is_ordered),
    CHECK_CASE(trim_keeps_live_blocks),
    CHECK_CASE(same_sequence_same_reserved_as_host),
    CHECK_CASE(many_small_allocations),
    CHECK_CASE(small_blocks_reused_exactly),
    CHECK_CASE(small_block_freed_under_capture),
};
CHECK_MAIN(cases, CHECK_ON_ALL)
