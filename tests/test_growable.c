/* Growable segments: a pool's memory grows in place, page by page, and
 * trim gives back pages inside a segment; addresses never move; the
 * opt-out and the fallback give plain segments. Every case runs on both
 * backends, which give the same reserved bytes for the same calls. */
#include "check.h" /* first: its feature macro */
#include "helpers.h"

#include <stdint.h>
#include <stdlib.h>

#define MiB ((size_t)1 << 20)

static cpool_pool *growable_pool(cpool_device *dev) {
    cpool_pool *pool = NULL;
    CHECK_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK(cpool_pool_grows_in_place(pool));
    return pool;
}

/* Memory the caller can write, all of it, and the stream finishes. */
static void touch(cpool_stream *s, void *p, size_t bytes, int value) {
    CHECK_OK(cpool_memset_async(s, p, value, bytes));
    CHECK_OK(cpool_stream_synchronize(s));
}

/* A freed block and new pages after it serve a larger request at the same
 * address: the pool holds the larger size, not the sum. */
static void grows_in_place_past_a_free_block(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool *pool = growable_pool(dev);
    void *a = NULL, *b = NULL;
    REQUIRE_OK(cpool_alloc(pool, 8 * MiB, s, &a));
    touch(s, a, 8 * MiB, 1);
    CHECK_OK(cpool_free(pool, a, s));
    REQUIRE_OK(cpool_alloc(pool, 12 * MiB, s, &b));
    CHECK_PTR_EQ(b, a);
    touch(s, b, 12 * MiB, 2);
    cpool_pool_stats st = stats_of(pool);
    CHECK_EQ(st.reserved_bytes, 12 * MiB);
    CHECK_EQ(st.segment_count, 1);
    CHECK_OK(cpool_free(pool, b, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* Free blocks in the middle of a segment merge, and new pages join them
 * for a request larger than any of them. */
static void free_ranges_join_new_pages(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool *pool = growable_pool(dev);
    void *a, *b, *c, *d;
    REQUIRE_OK(cpool_alloc(pool, 4 * MiB, s, &a));
    REQUIRE_OK(cpool_alloc(pool, 4 * MiB, s, &b));
    REQUIRE_OK(cpool_alloc(pool, 4 * MiB, s, &c));
    CHECK_PTR_EQ((char *)b, (char *)a + 4 * MiB);
    CHECK_PTR_EQ((char *)c, (char *)b + 4 * MiB);
    CHECK_OK(cpool_free(pool, b, s));
    CHECK_OK(cpool_free(pool, c, s));
    REQUIRE_OK(cpool_alloc(pool, 10 * MiB, s, &d));
    CHECK_PTR_EQ(d, b);
    touch(s, d, 10 * MiB, 3);
    CHECK_EQ(stats_of(pool).reserved_bytes, 14 * MiB);
    CHECK_OK(cpool_free(pool, d, s));
    CHECK_OK(cpool_free(pool, a, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* Trim gives back the pages of a free range between two live blocks; the
 * live blocks stay where they are and usable, the snapshot's segments are
 * the two mapped runs, and the range maps again on demand. */
static void trim_gives_back_pages_inside_a_segment(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool *pool = growable_pool(dev);
    void *a, *b, *c, *again;
    REQUIRE_OK(cpool_alloc(pool, 4 * MiB, s, &a));
    REQUIRE_OK(cpool_alloc(pool, 8 * MiB, s, &b));
    REQUIRE_OK(cpool_alloc(pool, 4 * MiB, s, &c));
    CHECK_OK(cpool_free(pool, b, s));
    CHECK_OK(cpool_pool_trim(pool));
    cpool_pool_stats st = stats_of(pool);
    CHECK_EQ(st.reserved_bytes, 8 * MiB);
    CHECK_EQ(st.segment_count, 2);
    CHECK_EQ(st.allocated_bytes, 8 * MiB);
    touch(s, a, 4 * MiB, 4);
    touch(s, c, 4 * MiB, 5);
    REQUIRE_OK(cpool_alloc(pool, 8 * MiB, s, &again));
    touch(s, again, 8 * MiB, 6);
    CHECK_EQ(stats_of(pool).reserved_bytes, 16 * MiB);
    CHECK_EQ(stats_of(pool).reserved_bytes_peak, 16 * MiB);
    CHECK_OK(cpool_free(pool, again, s));
    CHECK_OK(cpool_free(pool, a, s));
    CHECK_OK(cpool_free(pool, c, s));
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_EQ(stats_of(pool).reserved_bytes, 0);
    CHECK_EQ(stats_of(pool).segment_count, 0);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

typedef struct scratch_body {
    cpool_pool *pool;
    size_t bytes;
    void *at;
} scratch_body;

static cpool_status use_scratch(cpool_stream *s, void *arg) {
    scratch_body *b = arg;
    cpool_status st = cpool_alloc(b->pool, b->bytes, s, &b->at);
    if (st == CPOOL_OK) st = cpool_memset_async(s, b->at, 7, b->bytes);
    if (st == CPOOL_OK) st = cpool_free(b->pool, b->at, s);
    return st;
}

/* A graph's scratch keeps its pages while the pool grows around it, is
 * trimmed and grows again: the graph replays on the addresses it captured. */
static void graphs_keep_their_pages_while_the_pool_grows(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool *pool = growable_pool(dev);
    scratch_body body = {pool, 6 * MiB, NULL};
    cpool_graph *g = NULL;
    REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, use_scratch, &body, &g));
    void *big[4];
    for (int i = 0; i < 4; i++) {
        REQUIRE_OK(cpool_alloc(pool, (size_t)(i + 3) * 5 * MiB, s, &big[i]));
        CHECK(big[i] != body.at);
        touch(s, big[i], (size_t)(i + 3) * 5 * MiB, i);
    }
    CHECK_OK(cpool_graph_launch(g, s));
    for (int i = 0; i < 4; i++) CHECK_OK(cpool_free(pool, big[i], s));
    CHECK_OK(cpool_pool_trim(pool));
    cpool_pool_stats st = stats_of(pool);
    CHECK_EQ(st.graph_reserved_bytes, 6 * MiB);
    CHECK_EQ(st.reserved_bytes, 6 * MiB);
    for (int i = 0; i < 3; i++) CHECK_OK(cpool_graph_launch(g, s));
    REQUIRE_OK(cpool_alloc(pool, 40 * MiB, s, &big[0]));
    touch(s, big[0], 40 * MiB, 9);
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_OK(cpool_free(pool, big[0], s));
    cpool_graph_release(g);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* A growth past the peak first gives back the pages of free memory that
 * no work uses: the peak follows what is in use. */
static void growth_past_the_peak_reuses_free_pages(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool *pool = growable_pool(dev);
    void *a, *b, *c;
    REQUIRE_OK(cpool_alloc(pool, 8 * MiB, s, &a));
    REQUIRE_OK(cpool_alloc(pool, 2 * MiB, s, &b)); /* keeps a's range apart from the end */
    CHECK_OK(cpool_free(pool, a, s));
    CHECK_OK(cpool_stream_synchronize(s)); /* a's work is done: its pages may go */
    REQUIRE_OK(cpool_alloc(pool, 12 * MiB, s, &c));
    touch(s, c, 12 * MiB, 1);
    cpool_pool_stats st = stats_of(pool);
    CHECK_LE(st.reserved_bytes_peak, 14 * MiB);
    CHECK_EQ(st.reserved_bytes, 14 * MiB);
    CHECK_OK(cpool_free(pool, b, s));
    CHECK_OK(cpool_free(pool, c, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* max_reserved_bytes bounds the mapped pages: a request past it gives the
 * free pages back first, then fails, and nothing changed. */
static void max_reserved_bounds_mapped_pages(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool_options opts = {.struct_size = sizeof opts, .max_reserved_bytes = 16 * MiB};
    cpool_pool *pool;
    REQUIRE_OK(cpool_pool_create(dev, &opts, &pool));
    void *a, *b, *c = NULL;
    REQUIRE_OK(cpool_alloc(pool, 8 * MiB, s, &a));
    REQUIRE_OK(cpool_alloc(pool, 8 * MiB, s, &b));
    CHECK_STATUS(cpool_alloc(pool, 2 * MiB, s, &c), CPOOL_ERR_OUT_OF_MEMORY);
    CHECK(c == NULL);
    CHECK_EQ(stats_of(pool).reserved_bytes, 16 * MiB);
    CHECK_OK(cpool_free(pool, a, s));
    CHECK_OK(cpool_stream_synchronize(s));
    REQUIRE_OK(cpool_alloc(pool, 6 * MiB, s, &c));
    CHECK_STATUS(cpool_alloc(pool, 12 * MiB, s, &a), CPOOL_ERR_OUT_OF_MEMORY);
    CHECK_LE(stats_of(pool).reserved_bytes, 16 * MiB);
    CHECK_LE(stats_of(pool).reserved_bytes_peak, 16 * MiB);
    CHECK_OK(cpool_free(pool, b, s));
    CHECK_OK(cpool_free(pool, c, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* plain_segments: each segment one device allocation, given back whole;
 * the same calls then hold the sum where a growable pool holds the larger. */
static void plain_segments_opt_out(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool_options opts = {.struct_size = sizeof opts, .plain_segments = true};
    cpool_pool *plain, *grow = growable_pool(dev);
    REQUIRE_OK(cpool_pool_create(dev, &opts, &plain));
    CHECK(!cpool_pool_grows_in_place(plain));
    cpool_pool *pools[2] = {plain, grow};
    for (int i = 0; i < 2; i++) {
        void *a, *b;
        REQUIRE_OK(cpool_alloc(pools[i], 24 * MiB, s, &a));
        CHECK_OK(cpool_free(pools[i], a, s));
        REQUIRE_OK(cpool_alloc(pools[i], 40 * MiB, s, &b));
        touch(s, b, 40 * MiB, i);
        CHECK_OK(cpool_free(pools[i], b, s));
    }
    CHECK_EQ(stats_of(plain).reserved_bytes, 64 * MiB);
    CHECK_EQ(stats_of(plain).segment_count, 2);
    CHECK_EQ(stats_of(grow).reserved_bytes, 40 * MiB);
    CHECK_OK(cpool_pool_trim(plain));
    CHECK_EQ(stats_of(plain).reserved_bytes, 0);
    cpool_pool_release(plain);
    cpool_pool_release(grow);
    cpool_stream_destroy(s);
}

/* Without virtual memory (CPOOL_VIRTUAL_MEMORY=0 stands for a platform
 * that has none) a pool falls back to plain segments and says so. */
static void fallback_without_virtual_memory(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    CHECK(!cpool_pool_grows_in_place(NULL));
    setenv("CPOOL_VIRTUAL_MEMORY", "0", 1);
    cpool_pool *pool;
    cpool_status st = cpool_pool_create(dev, NULL, &pool);
    unsetenv("CPOOL_VIRTUAL_MEMORY");
    REQUIRE_OK(st);
    CHECK(!cpool_pool_grows_in_place(pool));
    void *a;
    REQUIRE_OK(cpool_alloc(pool, 24 * MiB, s, &a));
    touch(s, a, 24 * MiB, 1);
    CHECK_EQ(stats_of(pool).reserved_bytes, 24 * MiB);
    CHECK_OK(cpool_free(pool, a, s));
    cpool_pool_release(pool);
    cpool_pool *again = growable_pool(dev);
    cpool_pool_release(again);
    cpool_stream_destroy(s);
}

/* reserve_bytes maps pages up front; trim gives them back. */
static void reserve_maps_pages_up_front(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool_options opts = {.struct_size = sizeof opts, .reserve_bytes = 5 * MiB};
    cpool_pool *pool;
    REQUIRE_OK(cpool_pool_create(dev, &opts, &pool));
    CHECK(cpool_pool_grows_in_place(pool));
    CHECK_EQ(stats_of(pool).reserved_bytes, 6 * MiB);
    void *a;
    REQUIRE_OK(cpool_alloc(pool, 6 * MiB, s, &a));
    CHECK_EQ(stats_of(pool).reserved_bytes, 6 * MiB);
    CHECK_OK(cpool_free(pool, a, s));
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_EQ(stats_of(pool).reserved_bytes, 0);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

static const check_case cases[] = {
    CHECK_CASE(grows_in_place_past_a_free_block),
    CHECK_CASE(free_ranges_join_new_pages),
    CHECK_CASE(trim_gives_back_pages_inside_a_segment),
    CHECK_CASE(graphs_keep_their_pages_while_the_pool_grows),
    CHECK_CASE(growth_past_the_peak_reuses_free_pages),
    CHECK_CASE(max_reserved_bounds_mapped_pages),
    CHECK_CASE(plain_segments_opt_out),
    CHECK_CASE(fallback_without_virtual_memory),
    CHECK_CASE(reserve_maps_pages_up_front),
};

CHECK_MAIN(cases, CHECK_ON_ALL)
