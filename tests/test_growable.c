/* Growable segments: a pool's memory grows in place, page by page, and
 * trim gives back pages inside a segment; addresses never move; the
 * opt-out and the fallback give plain segments. Every case runs on both
 * backends, which give the same reserved bytes for the same calls. */
#include "check.h" /* first: its feature macro */
#include "helpers.h"

#include <pthread.h>
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
 * no work uses, so that the peak follows what is in use; the bytes so
 * moved come from a budget, half of the peak's growth (CHANGELOG): a page
 * moved costs an unmap and a map. */
static void growth_past_the_peak_moves_free_pages_within_a_budget(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    /* Peak 18 MiB (a budget of 9): 12 MiB take the free 8 at the end and
     * 4 new, for which a's free pages go back first. */
    cpool_pool *pool = growable_pool(dev);
    void *a, *b, *c, *d;
    REQUIRE_OK(cpool_alloc(pool, 8 * MiB, s, &a));
    REQUIRE_OK(cpool_alloc(pool, 2 * MiB, s, &b)); /* keeps a's range apart from d's */
    REQUIRE_OK(cpool_alloc(pool, 8 * MiB, s, &d));
    CHECK_OK(cpool_free(pool, a, s));
    CHECK_OK(cpool_free(pool, d, s));
    CHECK_OK(cpool_stream_synchronize(s)); /* their work is done: their pages may go */
    REQUIRE_OK(cpool_alloc(pool, 12 * MiB, s, &c));
    CHECK_PTR_EQ(c, d);
    touch(s, c, 12 * MiB, 1);
    cpool_pool_stats st = stats_of(pool);
    CHECK_EQ(st.reserved_bytes_peak, 18 * MiB);
    CHECK_LE(st.reserved_bytes, 18 * MiB);
    CHECK_OK(cpool_free(pool, b, s));
    CHECK_OK(cpool_free(pool, c, s));
    cpool_pool_release(pool);

    /* Peak 10 MiB (a budget of 5): of a's 8 free MiB, 6 (5 in whole
     * pages) go back before 12 new ones are mapped, not all 8. */
    pool = growable_pool(dev);
    REQUIRE_OK(cpool_alloc(pool, 8 * MiB, s, &a));
    REQUIRE_OK(cpool_alloc(pool, 2 * MiB, s, &b)); /* keeps a's range apart from the end */
    CHECK_OK(cpool_free(pool, a, s));
    CHECK_OK(cpool_stream_synchronize(s));
    REQUIRE_OK(cpool_alloc(pool, 12 * MiB, s, &c));
    touch(s, c, 12 * MiB, 1);
    st = stats_of(pool);
    CHECK_EQ(st.reserved_bytes, 16 * MiB);
    CHECK_EQ(st.reserved_bytes_peak, 16 * MiB);
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


/* ---- adversarial: threads, held-back work, captures, edges ------------- */

/* Sizes at the edges that matter: the block granule, the small/large class
 * edge (1 MiB), page multiples (2 MiB) and the front cache's bound (32 MiB). */
static const size_t edge_sizes[] = {
    512,           1 * MiB - 512, 1 * MiB,      1 * MiB + 512, 2 * MiB - 512, 2 * MiB,  2 * MiB + 512,
    4 * MiB,       6 * MiB + 512, 32 * MiB - 512, 32 * MiB,    32 * MiB + 512, 10 * MiB, 20 * MiB + 512,
};
#define EDGE_SIZES (sizeof edge_sizes / sizeof edge_sizes[0])

typedef struct churn {
    cpool_device *dev;
    cpool_pool *pool;
    int id;
    int *done;
} churn;

/* Reads the first and last 4 KiB of a block back and checks them. */
static void check_ends(cpool_stream *s, const void *p, size_t n, unsigned char v) {
    size_t k = n < 4096 ? n : 4096;
    CHECK_BYTES(s, p, k, v);
    CHECK_BYTES(s, (const char *)p + n - k, k, v);
}

/* One thread's churn on a stream of its own: blocks of edge sizes, each
 * written with a value of its own and checked later, so that a block handed
 * to two threads, or pages taken from under one, shows. */
static void *churn_thread(void *arg) {
    churn *c = arg;
    cpool_stream *s;
    if (cpool_stream_create(c->dev, &s) != CPOOL_OK) {
        CHECK(0);
        ainc(c->done);
        return NULL;
    }
    enum { LIVE = 4 };
    void *p[LIVE] = {0};
    size_t n[LIVE] = {0};
    unsigned char v[LIVE] = {0};
    unsigned seed = 0x9e37u * (unsigned)(c->id + 1);
    for (int it = 0; it < 240; it++) {
        seed = seed * 1103515245u + 12345u;
        int k = (int)((seed >> 8) % LIVE);
        if (p[k]) {
            check_ends(s, p[k], n[k], v[k]);
            CHECK_OK(cpool_free(c->pool, p[k], s));
            p[k] = NULL;
        }
        n[k] = edge_sizes[(seed >> 16) % EDGE_SIZES];
        v[k] = (unsigned char)(c->id * 16 + k + 1);
        if (cpool_alloc(c->pool, n[k], s, &p[k]) != CPOOL_OK) {
            CHECK(0);
            p[k] = NULL;
            continue;
        }
        CHECK_OK(cpool_memset_async(s, p[k], v[k], n[k]));
    }
    for (int k = 0; k < LIVE; k++)
        if (p[k]) {
            check_ends(s, p[k], n[k], v[k]);
            CHECK_OK(cpool_free(c->pool, p[k], s));
        }
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_stream_destroy(s);
    ainc(c->done);
    return NULL;
}

/* Threads allocate, write, check and free blocks of edge sizes in one
 * growable pool while another trims it over and over: no block is shared,
 * no page in use goes, and once everything is freed trim gives all back. */
static void threads_churn_while_trimming(cpool_device *dev) {
    enum { THREADS = 3 };
    cpool_pool *pool = growable_pool(dev);
    int done = 0;
    churn c[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        c[i] = (churn){dev, pool, i, &done};
        REQUIRE(pthread_create(&t[i], NULL, churn_thread, &c[i]) == 0);
    }
    while (aload(&done) < THREADS) {
        CHECK_OK(cpool_pool_trim(pool));
        cpool_pool_stats st = stats_of(pool);
        CHECK_STATS_SANE(st);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_EQ(stats_of(pool).reserved_bytes, 0);
    CHECK_EQ(stats_of(pool).allocated_bytes, 0);
    cpool_pool_release(pool);
}

static void cb_hold_gate(void *arg) { (void)wait_for_int((const int *)arg, 1, WAIT_TIMEOUT_MS); }

typedef struct trimmer {
    cpool_pool *pool;
    int done;
} trimmer;

static void *trim_once(void *arg) {
    trimmer *t = arg;
    CHECK_OK(cpool_pool_trim(t->pool));
    astore(&t->done, 1);
    return NULL;
}

/* A block freed on S while S's work on it is held back: another stream's
 * growth past the peak neither takes it nor gives its pages back, and a
 * trim on another thread waits for the work before it does. */
static void held_work_keeps_its_pages(cpool_device *dev) {
    static int gate;
    astore(&gate, 0);
    cpool_stream *s, *u;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &u));
    cpool_pool *pool = growable_pool(dev);
    void *a, *keep, *b;
    size_t sizes[] = {8 * MiB, 32 * MiB, 1 * MiB + 512};
    for (int i = 0; i < 3; i++) {
        astore(&gate, 0);
        REQUIRE_OK(cpool_alloc(pool, sizes[i], s, &a));
        REQUIRE_OK(cpool_alloc(pool, 2 * MiB, s, &keep)); /* keeps a apart from the end */
        CHECK_OK(cpool_launch_host(s, cb_hold_gate, &gate));
        CHECK_OK(cpool_memset_async(s, a, 0x5a, sizes[i])); /* runs after the gate */
        CHECK_OK(cpool_free(pool, a, s));
        REQUIRE_OK(cpool_alloc(pool, sizes[i] + 4 * MiB, u, &b));
        CHECK(!ranges_overlap(a, sizes[i], b, sizes[i] + 4 * MiB));
        touch(u, b, sizes[i] + 4 * MiB, 1);
        trimmer t = {pool, 0};
        pthread_t th;
        REQUIRE(pthread_create(&th, NULL, trim_once, &t) == 0);
        sleep_ms(20);
        CHECK_EQ(aload(&t.done), 0); /* the trim waits for S's work */
        astore(&gate, 1);
        pthread_join(th, NULL);
        CHECK_OK(cpool_stream_synchronize(s));
        CHECK_OK(cpool_free(pool, b, u));
        CHECK_OK(cpool_free(pool, keep, s));
        CHECK_OK(cpool_stream_synchronize(u));
        CHECK_OK(cpool_pool_trim(pool));
        CHECK_EQ(stats_of(pool).reserved_bytes, 0);
    }
    cpool_pool_release(pool);
    cpool_stream_destroy(u);
    cpool_stream_destroy(s);
}

/* A two-stream capture whose allocations grow the pool while other threads
 * churn and trim it: a block freed on one branch goes to no other branch
 * before the join, and the graph replays on its pages (a memset into a page
 * given back faults on the host backend) after trims and growth, its output
 * intact. */
static void forked_capture_grows_while_others_trim(cpool_device *dev) {
    enum { THREADS = 1 };
    cpool_stream *o, *x, *u;
    cpool_event *e0, *e1;
    REQUIRE_OK(cpool_stream_create(dev, &o));
    REQUIRE_OK(cpool_stream_create(dev, &x));
    REQUIRE_OK(cpool_stream_create(dev, &u));
    REQUIRE_OK(cpool_event_create(dev, &e0));
    REQUIRE_OK(cpool_event_create(dev, &e1));
    cpool_pool *pool = growable_pool(dev);
    int done = 0;
    churn c = {dev, pool, 7, &done};
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, churn_thread, &c) == 0);
    void *a, *b, *cc, *d, *out;
    cpool_graph *g = NULL;
    REQUIRE_OK(cpool_capture_begin(o, pool, CPOOL_CAPTURE_RELAXED));
    REQUIRE_OK(cpool_alloc(pool, 6 * MiB, o, &a));
    CHECK_OK(cpool_memset_async(o, a, 1, 6 * MiB));
    CHECK_OK(cpool_event_record(e0, o));
    CHECK_OK(cpool_stream_wait_event(x, e0)); /* fork */
    REQUIRE_OK(cpool_alloc(pool, 34 * MiB, x, &b));
    CHECK_OK(cpool_memset_async(x, b, 2, 34 * MiB));
    CHECK_OK(cpool_free(pool, b, x));
    CHECK_OK(cpool_pool_trim(pool));
    REQUIRE_OK(cpool_alloc(pool, 30 * MiB, o, &cc));
    CHECK(!ranges_overlap(b, 34 * MiB, cc, 30 * MiB)); /* x's replay may still write b */
    CHECK_OK(cpool_memset_async(o, cc, 3, 30 * MiB));
    CHECK_OK(cpool_free(pool, cc, o));
    CHECK_OK(cpool_free(pool, a, o));
    REQUIRE_OK(cpool_alloc(pool, 38 * MiB, x, &d));
    CHECK(!ranges_overlap(a, 6 * MiB, d, 38 * MiB));
    CHECK(!ranges_overlap(cc, 30 * MiB, d, 38 * MiB));
    CHECK_OK(cpool_memset_async(x, d, 4, 38 * MiB));
    CHECK_OK(cpool_free(pool, d, x));
    REQUIRE_OK(cpool_alloc(pool, 2 * MiB + 512, x, &out));
    CHECK_OK(cpool_memset_async(x, out, 0x77, 2 * MiB + 512));
    CHECK_OK(cpool_event_record(e1, x));
    CHECK_OK(cpool_stream_wait_event(o, e1)); /* join */
    REQUIRE_OK(cpool_capture_end(o, &g));
    for (int i = 0; i < 6; i++) {
        CHECK_OK(cpool_pool_trim(pool));
        void *big;
        REQUIRE_OK(cpool_alloc(pool, (size_t)(i + 1) * 9 * MiB, u, &big));
        CHECK_OK(cpool_memset_async(u, big, 9, (size_t)(i + 1) * 9 * MiB));
        CHECK_OK(cpool_free(pool, big, u));
        CHECK_OK(cpool_stream_synchronize(u));
        CHECK_OK(cpool_graph_launch(g, o));
        CHECK_OK(cpool_stream_synchronize(o));
        CHECK_BYTES(o, out, 2 * MiB + 512, 0x77);
    }
    while (aload(&done) < THREADS) CHECK_OK(cpool_pool_trim(pool));
    pthread_join(t, NULL);
    CHECK_OK(cpool_free(pool, out, o));
    cpool_graph_release(g);
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_EQ(stats_of(pool).reserved_bytes, 0);
    cpool_pool_release(pool);
    cpool_event_destroy(e0);
    cpool_event_destroy(e1);
    cpool_stream_destroy(u);
    cpool_stream_destroy(x);
    cpool_stream_destroy(o);
}

/* Reuse follows events for blocks the front cache parks, up to its 32 MiB
 * edge and past it: a block freed on S before a record U waited for serves
 * U at once while S's work is held back; one freed after the record does
 * not, not even by growing over it. */
static void events_order_reuse_at_the_front_cache_edge(cpool_device *dev) {
    static int gate;
    size_t sizes[] = {32 * MiB - 512, 32 * MiB, 32 * MiB + 512, 2 * MiB, 1 * MiB + 512};
    for (int i = 0; i < 5; i++) {
        size_t n = sizes[i];
        astore(&gate, 0);
        cpool_stream *s, *u;
        cpool_event *e;
        REQUIRE_OK(cpool_stream_create(dev, &s));
        REQUIRE_OK(cpool_stream_create(dev, &u));
        REQUIRE_OK(cpool_event_create(dev, &e));
        cpool_pool *pool = growable_pool(dev);
        void *a, *b, *c, *d;
        REQUIRE_OK(cpool_alloc(pool, n, s, &a));
        CHECK_OK(cpool_launch_host(s, cb_hold_gate, &gate));
        CHECK_OK(cpool_free(pool, a, s));
        CHECK_OK(cpool_event_record(e, s));
        CHECK_OK(cpool_stream_wait_event(u, e));
        REQUIRE_OK(cpool_alloc(pool, n, u, &b));
        CHECK(b == a); /* nothing else of that size is free */
        REQUIRE_OK(cpool_alloc(pool, n, s, &c));
        CHECK_OK(cpool_launch_host(s, cb_hold_gate, &gate));
        CHECK_OK(cpool_memset_async(s, c, 0x3c, n)); /* S's work on c, held back */
        CHECK_OK(cpool_event_record(e, s));
        CHECK_OK(cpool_free(pool, c, s));
        CHECK_OK(cpool_stream_wait_event(u, e));
        REQUIRE_OK(cpool_alloc(pool, n + 3 * MiB, u, &d));
        CHECK(!ranges_overlap(c, n, d, n + 3 * MiB));
        CHECK(!ranges_overlap(b, n, d, n + 3 * MiB));
        CHECK_EQ(aload(&gate), 0);
        astore(&gate, 1);
        CHECK_OK(cpool_free(pool, b, u));
        CHECK_OK(cpool_free(pool, d, u));
        CHECK_OK(cpool_stream_synchronize(u));
        CHECK_OK(cpool_stream_synchronize(s));
        CHECK_OK(cpool_pool_trim(pool));
        CHECK_EQ(stats_of(pool).reserved_bytes, 0);
        cpool_pool_release(pool);
        cpool_event_destroy(e);
        cpool_stream_destroy(u);
        cpool_stream_destroy(s);
    }
}

/* New pages that fill a hole between a free block of another stream's
 * (before it) and the requester's own free block (after it) serve the
 * request with the block after: the pages join it, though the block before
 * would also merge with them alone. Offsets: P [0, 4M) freed on t, Q's
 * pages [4M, 8M) given back, R [8M, 12M) freed on s, both streams' work
 * held back so the tags stay; 8 MiB for s is R and the hole's pages. */
static void pages_filling_a_hole_join_the_block_after(cpool_device *dev) {
    static int gate;
    astore(&gate, 0);
    cpool_stream *s, *t;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &t));
    cpool_pool *pool = growable_pool(dev);
    void *p, *q, *r, *z, *big;
    REQUIRE_OK(cpool_alloc(pool, 4 * MiB, s, &p));
    REQUIRE_OK(cpool_alloc(pool, 4 * MiB, s, &q));
    REQUIRE_OK(cpool_alloc(pool, 4 * MiB, s, &r));
    REQUIRE_OK(cpool_alloc(pool, 2 * MiB, s, &z)); /* keeps r apart from the end */
    CHECK_PTR_EQ((char *)r, (char *)p + 8 * MiB);
    CHECK_OK(cpool_free(pool, q, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_OK(cpool_launch_host(t, cb_hold_gate, &gate));
    CHECK_OK(cpool_free(pool, p, t));
    CHECK_OK(cpool_launch_host(s, cb_hold_gate, &gate));
    CHECK_OK(cpool_free(pool, r, s));
    REQUIRE_OK(cpool_alloc(pool, 8 * MiB, s, &big));
    CHECK(!ranges_overlap(p, 4 * MiB, big, 8 * MiB)); /* t's work may still use p */
    CHECK_EQ(aload(&gate), 0);
    astore(&gate, 1);
    touch(s, big, 8 * MiB, 1);
    CHECK_OK(cpool_stream_synchronize(t));
    CHECK_OK(cpool_free(pool, big, s));
    CHECK_OK(cpool_free(pool, z, s));
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_EQ(stats_of(pool).reserved_bytes, 0);
    cpool_pool_release(pool);
    cpool_stream_destroy(t);
    cpool_stream_destroy(s);
}

/* A forward at batch b, as a server captures one per batch size: layers of
 * b x 64, 256 and 128 KiB activations, each allocated before the one
 * before it is freed, the last freed before the capture ends. */
typedef struct forward {
    cpool_pool *pool;
    size_t batch;
} forward;

static cpool_status forward_body(cpool_stream *s, void *ctx) {
    static const size_t act_kib[] = {64, 256, 128};
    const forward *f = ctx;
    void *prev = NULL;
    for (int k = 0; k < 12; k++) {
        size_t bytes = f->batch * act_kib[k % 3] << 10;
        void *cur;
        cpool_status st = cpool_alloc(f->pool, bytes, s, &cur);
        if (st == CPOOL_OK) st = cpool_memset_async(s, cur, k + 1, bytes);
        if (st == CPOOL_OK && prev) st = cpool_free(f->pool, prev, s);
        if (st != CPOOL_OK) return st;
        prev = cur;
    }
    return cpool_free(f->pool, prev, s);
}

/* Graphs of a pool share their scratch whatever order they are captured in:
 * captured smallest first (the first ones all small requests), they hold
 * what the largest graph holds alone, and each still replays. */
static void capture_order_does_not_matter(cpool_device *dev) {
    static const size_t batches[] = {1, 2, 3, 4, 8, 12, 16, 24, 32};
    enum { GRAPHS = sizeof batches / sizeof batches[0] };
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    uint64_t held[2] = {0, 0};
    for (int alone = 0; alone < 2; alone++) {
        cpool_pool *pool = growable_pool(dev);
        cpool_graph *g[GRAPHS] = {0};
        int first = alone ? GRAPHS - 1 : 0;
        for (int i = first; i < GRAPHS; i++) {
            forward f = {pool, batches[i]};
            CHECK_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, forward_body, &f, &g[i]));
        }
        held[alone] = stats_of(pool).graph_reserved_bytes;
        CHECK_EQ(stats_of(pool).reserved_bytes, held[alone]);
        for (int i = first; i < GRAPHS; i++) CHECK_OK(cpool_graph_launch(g[i], s));
        CHECK_OK(cpool_stream_synchronize(s));
        for (int i = first; i < GRAPHS; i++) cpool_graph_release(g[i]);
        cpool_pool_release(pool);
    }
    CHECK(held[1] > 0);
    CHECK_EQ(held[0], held[1]);
    cpool_stream_destroy(s);
}

/* A request for more memory than the device has fails, on a growable pool
 * as on a plain one and for a reserve at creation: address space is not
 * memory. Nothing changes. */
static void more_than_the_device_holds_is_refused(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    const size_t tib = (size_t)1 << 40;
    cpool_pool_options plain = {.struct_size = sizeof plain, .plain_segments = true};
    cpool_pool *pools[2] = {NULL, NULL};
    CHECK_OK(cpool_pool_create(dev, NULL, &pools[0]));
    CHECK_OK(cpool_pool_create(dev, &plain, &pools[1]));
    for (int i = 0; i < 2; i++) {
        if (!pools[i]) continue;
        void *small = NULL, *p = NULL;
        CHECK_OK(cpool_alloc(pools[i], MiB, s, &small));
        cpool_pool_stats before = stats_of(pools[i]);
        CHECK_STATUS(cpool_alloc(pools[i], tib, s, &p), CPOOL_ERR_OUT_OF_MEMORY);
        CHECK(p == NULL);
        CHECK_STATS_EQ(stats_of(pools[i]), before);
        CHECK_OK(cpool_free(pools[i], small, s));
        CHECK_OK(cpool_stream_synchronize(s));
        cpool_pool_release(pools[i]);
    }
    cpool_pool_options huge = {.struct_size = sizeof huge, .reserve_bytes = 4 * tib};
    cpool_pool_options huge_plain = huge;
    huge_plain.plain_segments = true;
    cpool_pool *pool = NULL;
    CHECK_STATUS(cpool_pool_create(dev, &huge, &pool), CPOOL_ERR_OUT_OF_MEMORY);
    CHECK_STATUS(cpool_pool_create(dev, &huge_plain, &pool), CPOOL_ERR_OUT_OF_MEMORY);
    CHECK(pool == NULL);
    cpool_stream_destroy(s);
}

/* A growth of a GiB or more is one allocation (backend.h, a unit), mapped
 * and given back only whole: a trim leaves it while part of it is in use,
 * and gives all of it back once none is. */
static void a_large_growth_goes_back_whole(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool *pool = growable_pool(dev);
    const size_t gib = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    REQUIRE_OK(cpool_alloc(pool, gib, s, &a));
    touch(s, a, MiB, 1);
    touch(s, (char *)a + gib - MiB, MiB, 2);
    CHECK_EQ(stats_of(pool).reserved_bytes, gib);
    CHECK_OK(cpool_free(pool, a, s));
    CHECK_OK(cpool_stream_synchronize(s));
    REQUIRE_OK(cpool_alloc(pool, 64 * MiB, s, &b));
    CHECK_PTR_EQ(b, a);
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_EQ(stats_of(pool).reserved_bytes, gib); /* part of it in use: it stays whole */
    CHECK_BYTES(s, b, MiB, 1);
    CHECK_OK(cpool_free(pool, b, s));
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_EQ(stats_of(pool).reserved_bytes, 0);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* A growth past the peak first gives back the pages of free blocks that
 * no work uses, largest first; a block whose pages lie in a unit that a
 * live block shares gives nothing, and the smaller ones after it still
 * go: the pool grows by the request less what they gave. */
static void a_unit_in_use_does_not_stop_the_give_back(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool *pool = growable_pool(dev);
    const size_t gib = (size_t)1 << 30;
    void *small = NULL, *sep[2] = {NULL, NULL}, *big = NULL, *half = NULL, *more = NULL;
    REQUIRE_OK(cpool_alloc(pool, 64 * MiB, s, &small)); /* pages, a unit each */
    REQUIRE_OK(cpool_alloc(pool, 2 * MiB, s, &sep[0]));
    REQUIRE_OK(cpool_alloc(pool, gib, s, &big)); /* one unit */
    REQUIRE_OK(cpool_alloc(pool, 2 * MiB, s, &sep[1]));
    CHECK_EQ(stats_of(pool).reserved_bytes, gib + 68 * MiB);
    CHECK_OK(cpool_free(pool, big, s));
    CHECK_OK(cpool_free(pool, small, s));
    CHECK_OK(cpool_stream_synchronize(s));
    REQUIRE_OK(cpool_alloc(pool, gib / 2, s, &half)); /* in the unit: the rest of it cannot go */
    CHECK_PTR_EQ(half, big);
    CHECK_OK(cpool_stream_synchronize(s));
    REQUIRE_OK(cpool_alloc(pool, 700 * MiB, s, &more)); /* past the peak, fits no free block */
    CHECK_EQ(stats_of(pool).reserved_bytes, gib + 4 * MiB + 700 * MiB); /* small's pages went */
    CHECK_OK(cpool_free(pool, half, s));
    CHECK_OK(cpool_free(pool, more, s));
    for (int i = 0; i < 2; i++) CHECK_OK(cpool_free(pool, sep[i], s));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* A resume maps each run of pages mapped at the suspend in few allocations
 * (a mapping a piece, not a page): a block of 64 MiB or more alone, smaller
 * neighbours together. Afterwards a piece goes back only whole, and every
 * byte is kept. */
static void a_resumed_run_goes_back_whole(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool *pool = growable_pool(dev);
    void *p[4], *big = NULL;
    for (int i = 0; i < 4; i++) {
        REQUIRE_OK(cpool_alloc(pool, 4 * MiB, s, &p[i]));
        touch(s, p[i], 4 * MiB, 0x10 + i);
    }
    REQUIRE_OK(cpool_alloc(pool, 64 * MiB, s, &big));
    touch(s, big, 64 * MiB, 0x20);
    CHECK_PTR_EQ(p[3], (char *)p[0] + 12 * MiB);
    CHECK_PTR_EQ(big, (char *)p[0] + 16 * MiB);
    CHECK_OK(cpool_free(pool, p[1], s));
    CHECK_OK(cpool_pool_trim(pool)); /* pages a unit each: p[1]'s go */
    CHECK_EQ(stats_of(pool).reserved_bytes, 76 * MiB);
    CHECK_OK(cpool_pool_suspend(pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    CHECK_OK(cpool_pool_resume(pool));
    CHECK_BYTES(s, p[0], 4 * MiB, 0x10);
    CHECK_BYTES(s, p[2], 4 * MiB, 0x12);
    CHECK_BYTES(s, p[3], 4 * MiB, 0x13);
    CHECK_BYTES(s, big, 64 * MiB, 0x20);
    CHECK_OK(cpool_free(pool, p[2], s));
    CHECK_OK(cpool_pool_trim(pool)); /* p[2] and p[3] are one unit now: it stays */
    CHECK_EQ(stats_of(pool).reserved_bytes, 76 * MiB);
    CHECK_OK(cpool_free(pool, big, s));
    CHECK_OK(cpool_pool_trim(pool)); /* big is a unit of its own: it goes, p[3] in use */
    CHECK_EQ(stats_of(pool).reserved_bytes, 12 * MiB);
    CHECK_BYTES(s, p[3], 4 * MiB, 0x13);
    CHECK_OK(cpool_free(pool, p[3], s));
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_EQ(stats_of(pool).reserved_bytes, 4 * MiB);
    CHECK_BYTES(s, p[0], 4 * MiB, 0x10);
    CHECK_OK(cpool_free(pool, p[0], s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* A suspend forgets the whole free pages that a trim could not give back
 * (a unit a resume mapped, shared with live blocks): the next resume maps
 * only the pages that hold blocks, and the free memory maps again when an
 * allocation asks for it, at its old addresses. */
static void free_pages_are_not_mapped_again_at_resume(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool *pool = growable_pool(dev);
    void *p[4];
    for (int i = 0; i < 4; i++) {
        REQUIRE_OK(cpool_alloc(pool, 3 * MiB, s, &p[i]));
        touch(s, p[i], 3 * MiB, 0x30 + i);
    }
    CHECK_PTR_EQ(p[3], (char *)p[0] + 9 * MiB);
    CHECK_OK(cpool_pool_suspend(pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    CHECK_OK(cpool_pool_resume(pool)); /* [0, 12 MiB) is one unit now */
    CHECK_OK(cpool_free(pool, p[1], s)); /* its whole page [4, 6 MiB) is free */
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_EQ(stats_of(pool).reserved_bytes, 12 * MiB); /* the unit is shared: it stays */
    const cpool_suspend_mode modes[] = {CPOOL_SUSPEND_KEEP_CONTENTS, CPOOL_SUSPEND_DISCARD};
    for (int m = 0; m < 2; m++) {
        CHECK_OK(cpool_pool_suspend(pool, modes[m]));
        CHECK_EQ(stats_of(pool).reserved_bytes, 0);
        CHECK_OK(cpool_pool_resume(pool));
        CHECK_EQ(stats_of(pool).reserved_bytes, 10 * MiB); /* the free page is not mapped again */
        if (modes[m] == CPOOL_SUSPEND_DISCARD)
            for (int i = 0; i < 4; i++)
                if (i != 1) touch(s, p[i], 3 * MiB, 0x30 + i);
        CHECK_BYTES(s, p[0], 3 * MiB, 0x30);
        CHECK_BYTES(s, p[2], 3 * MiB, 0x32);
        CHECK_BYTES(s, p[3], 3 * MiB, 0x33);
    }
    REQUIRE_OK(cpool_alloc(pool, 3 * MiB, s, &p[1])); /* the free block and its page, mapped again */
    CHECK_EQ(stats_of(pool).reserved_bytes, 12 * MiB);
    touch(s, p[1], 3 * MiB, 0x31);
    for (int i = 0; i < 4; i++) {
        CHECK_BYTES(s, p[i], 3 * MiB, 0x30 + i);
        CHECK_OK(cpool_free(pool, p[i], s));
    }
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* Random blocks (4 KiB to 100 MiB) through frees, trims and resumes of
 * both kinds: every live block keeps its bytes through a KEEP resume,
 * every trim gives back only whole units (the host backend aborts on a
 * unit cut in part), and in the end a trim leaves nothing. */
static void random_blocks_through_resumes(cpool_device *dev) {
    enum { SLOTS = 24, STEPS = 300 };
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool *pool = growable_pool(dev);
    void *p[SLOTS] = {0};
    size_t bytes[SLOTS] = {0};
    unsigned seed = 12345, resumes = 0;
    for (int step = 0; step < STEPS; step++) {
        seed = seed * 1103515245u + 12345u;
        unsigned r = seed >> 8, k = r % SLOTS;
        if (p[k]) {
            CHECK_BYTES(s, p[k], bytes[k], k + 1);
            CHECK_OK(cpool_free(pool, p[k], s));
            p[k] = NULL;
        } else {
            bytes[k] = (r / SLOTS) % 4 ? ((size_t)1 + (r >> 12) % 64) << 12 : ((size_t)1 + (r >> 12) % 100) * MiB;
            REQUIRE_OK(cpool_alloc(pool, bytes[k], s, &p[k]));
            touch(s, p[k], bytes[k], (int)k + 1);
        }
        if (step % 25 == 24) {
            bool keep = (step / 25) % 2 == 0;
            CHECK_OK(cpool_pool_suspend(pool, keep ? CPOOL_SUSPEND_KEEP_CONTENTS : CPOOL_SUSPEND_DISCARD));
            CHECK_OK(cpool_pool_resume(pool));
            resumes++;
            for (int i = 0; i < SLOTS; i++)
                if (p[i] && !keep) touch(s, p[i], bytes[i], i + 1);
        }
        if (step % 7 == 6) CHECK_OK(cpool_pool_trim(pool));
    }
    for (int i = 0; i < SLOTS; i++)
        if (p[i]) {
            CHECK_BYTES(s, p[i], bytes[i], i + 1);
            CHECK_OK(cpool_free(pool, p[i], s));
        }
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_EQ(stats_of(pool).reserved_bytes, 0);
    CHECK_EQ(resumes, STEPS / 25);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

static const check_case cases[] = {
    CHECK_CASE(grows_in_place_past_a_free_block),
    CHECK_CASE(free_ranges_join_new_pages),
    CHECK_CASE(trim_gives_back_pages_inside_a_segment),
    CHECK_CASE(graphs_keep_their_pages_while_the_pool_grows),
    CHECK_CASE(growth_past_the_peak_moves_free_pages_within_a_budget),
    CHECK_CASE(max_reserved_bounds_mapped_pages),
    CHECK_CASE(plain_segments_opt_out),
    CHECK_CASE(fallback_without_virtual_memory),
    CHECK_CASE(reserve_maps_pages_up_front),
    CHECK_CASE(threads_churn_while_trimming),
    CHECK_CASE(held_work_keeps_its_pages),
    CHECK_CASE(forked_capture_grows_while_others_trim),
    CHECK_CASE(events_order_reuse_at_the_front_cache_edge),
    CHECK_CASE(pages_filling_a_hole_join_the_block_after),
    CHECK_CASE(capture_order_does_not_matter),
    CHECK_CASE(more_than_the_device_holds_is_refused),
    CHECK_CASE(a_large_growth_goes_back_whole),
    CHECK_CASE(a_resumed_run_goes_back_whole),
    CHECK_CASE(a_unit_in_use_does_not_stop_the_give_back),
    CHECK_CASE(free_pages_are_not_mapped_again_at_resume),
    CHECK_CASE(random_blocks_through_resumes),
};

CHECK_MAIN(cases, CHECK_ON_ALL)
