/* The initializers of the versioned structs (CPOOL_POOL_OPTIONS_INIT,
 * CPOOL_POOL_STATS_INIT, CPOOL_GRAPH_STATS_INIT): each sets struct_size to
 * the struct's size and every field to the default the header documents,
 * and the function that takes the struct accepts it. */
#include "check.h"
#include "helpers.h"

/* The header's defaults: struct_size = sizeof, nothing reserved up front,
 * no bound but the device's, segments that grow in place. */
static void pool_options_init_is_the_documented_defaults(cpool_device *dev) {
    const cpool_pool_options opts = CPOOL_POOL_OPTIONS_INIT;
    (void)dev;
    CHECK_EQ(opts.struct_size, sizeof(cpool_pool_options));
    CHECK_EQ(opts.reserve_bytes, 0);
    CHECK_EQ(opts.max_reserved_bytes, 0);
    CHECK(!opts.plain_segments);
}

/* A pool made from the initializer is the pool made from NULL options. */
static void pool_options_init_is_accepted_as_the_defaults(cpool_device *dev) {
    static stream_pool f;
    cpool_pool *from_null = NULL;
    const cpool_pool_options opts = CPOOL_POOL_OPTIONS_INIT;
    void *p = NULL;
    REQUIRE(fixture_open(dev, &opts, &f));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &from_null));
    CHECK(!cpool_pool_is_sealed(f.pool));
    CHECK_EQ(cpool_pool_grows_in_place(f.pool), cpool_pool_grows_in_place(from_null));
    CHECK_STATS_EQ(stats_of(f.pool), stats_of(from_null));
    CHECK_EQ(stats_of(f.pool).reserved_bytes, 0); /* nothing reserved up front */
    CHECK_OK(cpool_alloc(f.pool, 1000, f.s, &p));
    CHECK_OK(cpool_free(f.pool, p, f.s));
    cpool_pool_release(from_null);
}

/* Every counter zero, struct_size the whole struct, and get_stats fills it. */
static void pool_stats_init_is_zero_and_accepted(cpool_device *dev) {
    static stream_pool f;
    cpool_pool_stats st = CPOOL_POOL_STATS_INIT;
    const cpool_pool_stats zero = CPOOL_POOL_STATS_INIT;
    void *p = NULL;
    CHECK_EQ(st.struct_size, sizeof(cpool_pool_stats));
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
    CHECK_EQ(st.host_kept_bytes, 0);
    CHECK_EQ(st.host_reserved_bytes, 0);
    REQUIRE(fixture_open(dev, NULL, &f));
    REQUIRE_OK(cpool_alloc(f.pool, 1000, f.s, &p));
    CHECK_OK(cpool_pool_get_stats(f.pool, &st));
    CHECK_EQ(st.struct_size, sizeof(cpool_pool_stats));
    CHECK_EQ(st.allocated_bytes, 1000);
    CHECK_EQ(st.alloc_count, 1);
    CHECK_STATS_EQ(st, stats_of(f.pool));
    CHECK_EQ(zero.allocated_bytes, 0); /* a const one stays as it was made */
    CHECK_OK(cpool_free(f.pool, p, f.s));
}

/* A capture body that leaves one output allocated. */
typedef struct one_output {
    cpool_pool *pool;
    void *ptr;
} one_output;

static cpool_status alloc_one_output(cpool_stream *s, void *ctx) {
    one_output *o = (one_output *)ctx;
    return cpool_alloc_output(o->pool, 256, s, &o->ptr);
}

/* Every counter zero, struct_size the whole struct, and get_stats fills it. */
static void graph_stats_init_is_zero_and_accepted(cpool_device *dev) {
    static stream_pool f;
    cpool_graph_stats st = CPOOL_GRAPH_STATS_INIT;
    cpool_graph *g = NULL;
    one_output out = {NULL, NULL};
    CHECK_EQ(st.struct_size, sizeof(cpool_graph_stats));
    CHECK_EQ(st.write_bytes, 0);
    CHECK_EQ(st.shared_write_bytes, 0);
    CHECK_EQ(st.live_output_bytes, 0);
    CHECK_EQ(st.live_outputs, 0);
    CHECK_EQ(st.pool_count, 0);
    CHECK_EQ(st.own_bytes, 0);
    REQUIRE(fixture_open(dev, NULL, &f));
    out.pool = f.pool;
    REQUIRE_OK(cpool_capture(f.s, f.pool, CPOOL_CAPTURE_GLOBAL, alloc_one_output, &out, &g));
    CHECK_OK(cpool_graph_get_stats(g, &st));
    CHECK_EQ(st.struct_size, sizeof(cpool_graph_stats));
    CHECK_EQ(st.pool_count, 1);
    CHECK_EQ(st.live_outputs, 1);
    CHECK_OK(cpool_free(f.pool, out.ptr, f.s));
    cpool_graph_release(g);
}

static const check_case cases[] = {
    CHECK_CASE(pool_options_init_is_the_documented_defaults),
    CHECK_CASE(pool_options_init_is_accepted_as_the_defaults),
    CHECK_CASE(pool_stats_init_is_zero_and_accepted),
    CHECK_CASE(graph_stats_init_is_zero_and_accepted),
};
CHECK_MAIN(cases, CHECK_ON_ALL)
