/* Graph caches (capturepool.h, "Graph cache"): launches by key that
 * capture on a miss, eviction of the least recently launched graphs until
 * max_graphs and max_bytes hold, on_evict, counters, and the prediction of
 * a key's graph memory.
 *
 * Every key's graph allocates its output first, then its scratch; it fills
 * the scratch, writes the output with a byte of its key's own and frees the
 * scratch. on_evict frees the output. After launches the outputs of the
 * kept graphs are read back (windows at their start, middle and end): a
 * byte written by another graph's replay or capture shows. */
#include "check.h"
#include "helpers.h"

#include <pthread.h>

#define MiB ((size_t)1024 * 1024)
#define PAGE_BYTES (2 * MiB)
#define WINDOW ((size_t)4096)

enum { NKEYS = 64, NTHREADS = 4 };

static uint64_t rng_next(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

typedef struct world world;

typedef struct keyrec {
    world *w;
    uint64_t key;
    size_t out_bytes, scratch_bytes;
    pthread_mutex_t mu; /* out and evicted, against on_evict on another thread */
    void *out;          /* the kept graph's output, NULL when none */
    int evicted;        /* on_evict calls */
} keyrec;

/* With threads, an evicted graph may still run on its owner's stream (the
 * thread whose keys it has: key % NTHREADS): on_evict leaves its output on
 * the owner's list, which the owner frees on its stream after its next
 * synchronize, ordered after every launch of it. */
struct world {
    cpool_pool *pool;
    cpool_stream *s;
    keyrec keys[NKEYS];
    bool threaded;
    pthread_mutex_t pending_mu;
    void *pending[NTHREADS][NKEYS];
    int pending_count[NTHREADS];
};


static unsigned char pattern_of(uint64_t key) { return (unsigned char)(0x11 + key * 7); }

static cpool_status body(cpool_stream *s, void *ctx) {
    keyrec *r = ctx;
    void *out = NULL, *scratch = NULL;
    cpool_status st = cpool_alloc(r->w->pool, r->out_bytes, s, &out);
    if (st == CPOOL_OK) st = cpool_alloc(r->w->pool, r->scratch_bytes, s, &scratch);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, 0xEE, r->scratch_bytes);
    if (st == CPOOL_OK) st = cpool_memset_async(s, out, pattern_of(r->key), r->out_bytes);
    if (scratch) cpool_free(r->w->pool, scratch, s);
    if (st != CPOOL_OK) {
        if (out) cpool_free(r->w->pool, out, s);
        return st;
    }
    pthread_mutex_lock(&r->mu);
    r->out = out;
    pthread_mutex_unlock(&r->mu);
    return CPOOL_OK;
}

static cpool_status body_fails(cpool_stream *s, void *ctx) {
    (void)s;
    (void)ctx;
    return CPOOL_ERR_BACKEND;
}

static void on_evict(uint64_t key, cpool_graph *graph, void *user) {
    world *w = user;
    keyrec *r = &w->keys[key];
    CHECK(graph != NULL);
    pthread_mutex_lock(&r->mu);
    r->evicted++;
    if (r->out && w->threaded) {
        int owner = (int)(key % NTHREADS);
        pthread_mutex_lock(&w->pending_mu);
        w->pending[owner][w->pending_count[owner]++] = r->out;
        pthread_mutex_unlock(&w->pending_mu);
    } else if (r->out) {
        CHECK_OK(cpool_free(w->pool, r->out, w->s));
    }
    r->out = NULL;
    pthread_mutex_unlock(&r->mu);
}

/* Frees the outputs left for owner, on s (after its work synchronized). */
static void free_pending(world *w, int owner, cpool_stream *s) {
    pthread_mutex_lock(&w->pending_mu);
    for (int i = 0; i < w->pending_count[owner]; i++) CHECK_OK(cpool_free(w->pool, w->pending[owner][i], s));
    w->pending_count[owner] = 0;
    pthread_mutex_unlock(&w->pending_mu);
}

static void world_init(world *w, cpool_pool *pool, cpool_stream *s) {
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->pending_mu, NULL);
    w->pool = pool;
    w->s = s;
    for (int i = 0; i < NKEYS; i++) {
        w->keys[i].w = w;
        w->keys[i].key = (uint64_t)i;
        w->keys[i].out_bytes = 64 * 1024;
        w->keys[i].scratch_bytes = 256 * 1024;
        pthread_mutex_init(&w->keys[i].mu, NULL);
    }
}

static cpool_graph_cache *cache_make(world *w, uint64_t max_bytes, uint32_t max_graphs) {
    cpool_graph_cache_options o = CPOOL_GRAPH_CACHE_OPTIONS_INIT;
    cpool_graph_cache *c = NULL;
    o.max_bytes = max_bytes;
    o.max_graphs = max_graphs;
    o.on_evict = on_evict;
    o.user = w;
    CHECK_OK(cpool_graph_cache_create(w->pool, &o, &c));
    return c;
}

static cpool_graph_cache_stats cache_stats(cpool_graph_cache *c) {
    cpool_graph_cache_stats st = CPOOL_GRAPH_CACHE_STATS_INIT;
    CHECK_OK(cpool_graph_cache_get_stats(c, &st));
    return st;
}

static cpool_status launch(cpool_graph_cache *c, world *w, uint64_t key, cpool_stream *s, bool *hit) {
    return cpool_graph_cache_launch(c, key, s, CPOOL_CAPTURE_THREAD_LOCAL, body, &w->keys[key], hit);
}

static int kept(cpool_graph_cache *c, uint64_t key) {
    cpool_graph *g = NULL;
    CHECK_OK(cpool_graph_cache_get(c, key, &g));
    cpool_graph_release(g);
    return g != NULL;
}

/* The kept output of r (if any) holds its pattern, read through s. */
static void check_output(cpool_stream *s, keyrec *r) {
    pthread_mutex_lock(&r->mu);
    if (r->out) {
        size_t n = r->out_bytes, w = n < WINDOW ? n : WINDOW;
        unsigned char *p = r->out;
        CHECK_BYTES(s, p, w, pattern_of(r->key));
        CHECK_BYTES(s, p + (n - w) / 2, w, pattern_of(r->key));
        CHECK_BYTES(s, p + n - w, w, pattern_of(r->key));
    }
    pthread_mutex_unlock(&r->mu);
}

/* Frees what the case left: the cache (its on_evict frees the outputs). */
static void end_world(cpool_graph_cache *c, world *w) {
    cpool_graph_cache_destroy(c);
    CHECK_OK(cpool_stream_synchronize(w->s));
    for (int t = 0; t < NTHREADS; t++) free_pending(w, t, w->s);
    pthread_mutex_destroy(&w->pending_mu);
    for (int i = 0; i < NKEYS; i++) {
        CHECK(w->keys[i].out == NULL);
        pthread_mutex_destroy(&w->keys[i].mu);
    }
    CHECK_OK(cpool_pool_trim(w->pool));
}

/* ---- counting and order ------------------------------------------------------- */

static void counts_and_lru(cpool_device *dev) {
    static stream_pool f;
    static world w;
    bool hit = true;
    if (!fixture_open(dev, NULL, &f)) return;
    world_init(&w, f.pool, f.s);
    cpool_graph_cache *c = cache_make(&w, 0, 3);
    CHECK_OK(launch(c, &w, 1, f.s, &hit));
    CHECK(!hit);
    CHECK_OK(launch(c, &w, 2, f.s, NULL));
    CHECK_OK(launch(c, &w, 3, f.s, NULL));
    CHECK_OK(launch(c, &w, 1, f.s, &hit));
    CHECK(hit);
    CHECK_OK(launch(c, &w, 4, f.s, &hit)); /* evicts 2, the least recently launched */
    CHECK(!hit);
    CHECK(!kept(c, 2) && kept(c, 1) && kept(c, 3) && kept(c, 4));
    CHECK_EQ(w.keys[2].evicted, 1);
    cpool_graph_cache_stats st = cache_stats(c);
    CHECK_EQ(st.graphs, 3);
    CHECK_EQ(st.hits, 1);
    CHECK_EQ(st.misses, 4);
    CHECK_EQ(st.evictions, 1);
    /* get is no launch: 3 stays the least recent, and nothing is counted. */
    for (int i = 0; i < 5; i++) CHECK(kept(c, 3));
    CHECK_OK(launch(c, &w, 5, f.s, NULL));
    CHECK(!kept(c, 3) && kept(c, 1) && kept(c, 4) && kept(c, 5));
    st = cache_stats(c);
    CHECK_EQ(st.hits, 1);
    CHECK_EQ(st.misses, 5);
    CHECK_EQ(st.evictions, 2);
    /* The graph launched writes its output. */
    CHECK_OK(cpool_stream_synchronize(f.s));
    for (int k = 1; k <= 5; k++) check_output(f.s, &w.keys[k]);
    end_world(c, &w);
    for (int k = 1; k <= 5; k++) CHECK_EQ(w.keys[k].evicted, 1);
}

/* A body that takes 16 MiB of scratch, then fails. */
static cpool_status body_fails_late(cpool_stream *s, void *ctx) {
    cpool_pool *pool = ctx;
    void *scratch = NULL;
    cpool_status st = cpool_alloc(pool, 16 * MiB, s, &scratch);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, 1, 16 * MiB);
    if (scratch) cpool_free(pool, scratch, s);
    return st == CPOOL_OK ? CPOOL_ERR_BACKEND : st;
}

/* The memory of a capture that failed on a miss goes back with the call
 * (the device idle): the budget holds after it too. */
static void failed_capture_gives_its_memory_back(cpool_device *dev) {
    static stream_pool f;
    static world w;
    if (!fixture_open(dev, NULL, &f)) return;
    world_init(&w, f.pool, f.s);
    cpool_graph_cache *c = cache_make(&w, 8 * MiB, 0);
    CHECK_OK(launch(c, &w, 1, f.s, NULL));
    CHECK_OK(cpool_stream_synchronize(f.s));
    CHECK_STATUS(cpool_graph_cache_launch(c, 2, f.s, CPOOL_CAPTURE_GLOBAL, body_fails_late, f.pool, NULL),
                 CPOOL_ERR_BACKEND);
    CHECK_LE(cache_stats(c).graph_bytes, 8 * MiB);
    CHECK(kept(c, 1) && !kept(c, 2));
    end_world(c, &w);
}

static void failed_capture_keeps_nothing(cpool_device *dev) {
    static stream_pool f;
    static world w;
    if (!fixture_open(dev, NULL, &f)) return;
    world_init(&w, f.pool, f.s);
    cpool_graph_cache *c = cache_make(&w, 0, 1);
    CHECK_OK(launch(c, &w, 1, f.s, NULL));
    bool hit = true;
    CHECK_STATUS(cpool_graph_cache_launch(c, 2, f.s, CPOOL_CAPTURE_GLOBAL, body_fails, NULL, &hit), CPOOL_ERR_BACKEND);
    CHECK(!hit);
    CHECK(kept(c, 1) && !kept(c, 2));
    cpool_graph_cache_stats st = cache_stats(c);
    CHECK_EQ(st.graphs, 1);
    CHECK_EQ(st.misses, 1);
    CHECK_EQ(st.evictions, 0);
    CHECK_EQ(w.keys[1].evicted, 0);
    end_world(c, &w);
}

static void evict_and_destroy(cpool_device *dev) {
    static stream_pool f;
    static world w;
    if (!fixture_open(dev, NULL, &f)) return;
    world_init(&w, f.pool, f.s);
    cpool_graph_cache *c = cache_make(&w, 0, 0);
    for (uint64_t k = 0; k < 8; k++) CHECK_OK(launch(c, &w, k, f.s, NULL));
    CHECK_OK(cpool_graph_cache_evict(c, 40)); /* absent */
    CHECK_OK(cpool_graph_cache_evict(c, 3));
    CHECK_OK(cpool_graph_cache_evict(c, 3));
    CHECK_EQ(w.keys[3].evicted, 1);
    CHECK_EQ(cache_stats(c).graphs, 7);
    CHECK_EQ(cache_stats(c).evictions, 1);
    end_world(c, &w);
    for (uint64_t k = 0; k < 8; k++) CHECK_EQ(w.keys[k].evicted, 1);
    /* A dead cache is refused. */
    CHECK_STATUS(cpool_graph_cache_evict(c, 1), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(launch(c, &w, 1, f.s, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(strstr(cpool_last_error(), "dead") != NULL);
}

/* ---- the byte bound ------------------------------------------------------------- */

/* Random sizes: outputs 0.25 to 2 MiB, scratch 0.5 to 6 MiB. */
static void random_sizes(world *w, uint64_t *rng) {
    for (int i = 0; i < NKEYS; i++) {
        w->keys[i].out_bytes = (size_t)(rng_next(rng) % 8 + 1) * MiB / 4;
        w->keys[i].scratch_bytes = (size_t)(rng_next(rng) % 12 + 1) * MiB / 2 - (size_t)(rng_next(rng) % 64) * 512;
    }
}

static void byte_bound_one_stream(cpool_device *dev) {
    static stream_pool f;
    static world w;
    if (!fixture_open(dev, NULL, &f)) return;
    for (uint64_t seed = 1; seed <= 6; seed++) {
        uint64_t rng = 0x9E3779B97F4A7C15ull * seed;
        world_init(&w, f.pool, f.s);
        random_sizes(&w, &rng);
        uint64_t budget = (uint64_t)(rng_next(&rng) % 48 + 4) * MiB;
        uint32_t max_graphs = (uint32_t)(rng_next(&rng) % 3 == 0 ? rng_next(&rng) % 6 + 1 : 0);
        cpool_graph_cache *c = cache_make(&w, budget, max_graphs);
        int over = 0, predicted = 0, alone = 0;
        uint64_t worst = 0; /* the prediction's error, evicted graphs' freed outputs reused or not */
        for (int i = 0; i < 120; i++) {
            uint64_t key = rng_next(&rng) % 16;
            cpool_graph_cache_stats before = cache_stats(c);
            uint64_t predict = 0;
            CHECK_OK(cpool_graph_cache_predict_bytes(c, w.keys[key].scratch_bytes, w.keys[key].out_bytes, &predict));
            bool hit;
            CHECK_OK(launch(c, &w, key, f.s, &hit));
            cpool_graph_cache_stats st = cache_stats(c);
            if (st.graph_bytes > budget) {
                alone++;
                if (st.graphs != 1) over++;
            }
            if (max_graphs) CHECK_LE(st.graphs, max_graphs);
            if (!hit && st.evictions == before.evictions) {
                predicted++;
                uint64_t d = st.graph_bytes > predict ? st.graph_bytes - predict : predict - st.graph_bytes;
                if (d > worst) worst = d;
            }
            CHECK_OK(cpool_stream_synchronize(f.s));
            for (int k = 0; k < 16; k++) check_output(f.s, &w.keys[k]);
        }
        CHECK_EQ(over, 0);
        CHECK_LE(worst, PAGE_BYTES);
        cpool_graph_cache_stats st = cache_stats(c);
        printf("  seed %llu: budget %llu MiB, max_graphs %u: %llu hits, %llu misses, %llu evictions, %d "
               "predictions off by at most %llu MiB, %d launches with one graph over the budget\n",
               (unsigned long long)seed, (unsigned long long)(budget / MiB), max_graphs, (unsigned long long)st.hits,
               (unsigned long long)st.misses, (unsigned long long)st.evictions, predicted,
               (unsigned long long)(worst / MiB), alone);
        end_world(c, &w);
    }
}

static void too_large_kept_alone(cpool_device *dev) {
    static stream_pool f;
    static world w;
    if (!fixture_open(dev, NULL, &f)) return;
    world_init(&w, f.pool, f.s);
    cpool_graph_cache *c = cache_make(&w, 4 * MiB, 0);
    CHECK_OK(launch(c, &w, 1, f.s, NULL));
    CHECK_OK(launch(c, &w, 2, f.s, NULL));
    CHECK_OK(cpool_stream_synchronize(f.s));
    w.keys[3].scratch_bytes = 10 * MiB;
    CHECK_OK(launch(c, &w, 3, f.s, NULL));
    cpool_graph_cache_stats st = cache_stats(c);
    CHECK_EQ(st.graphs, 1);
    CHECK(kept(c, 3));
    CHECK_GT(st.graph_bytes, 4 * MiB);
    CHECK_EQ(w.keys[1].evicted + w.keys[2].evicted, 2);
    CHECK_OK(cpool_stream_synchronize(f.s));
    check_output(f.s, &w.keys[3]);
    /* A small key after it evicts the large one: the bound holds again. */
    CHECK_OK(launch(c, &w, 4, f.s, NULL));
    st = cache_stats(c);
    CHECK_EQ(st.graphs, 1);
    CHECK_LE(st.graph_bytes, 4 * MiB);
    end_world(c, &w);
}

/* ---- the prediction ------------------------------------------------------------- */

static void prediction_within_a_page(cpool_device *dev) {
    static stream_pool f;
    static world w;
    if (!fixture_open(dev, NULL, &f)) return;
    uint64_t rng = 77;
    world_init(&w, f.pool, f.s);
    random_sizes(&w, &rng);
    cpool_graph_cache *c = cache_make(&w, 0, 0);
    uint64_t worst = 0;
    for (uint64_t k = 0; k < 24; k++) {
        uint64_t predict = 0;
        CHECK_OK(cpool_graph_cache_predict_bytes(c, w.keys[k].scratch_bytes, w.keys[k].out_bytes, &predict));
        CHECK_OK(launch(c, &w, k, f.s, NULL));
        CHECK_OK(cpool_stream_synchronize(f.s));
        uint64_t got = cache_stats(c).graph_bytes;
        uint64_t d = got > predict ? got - predict : predict - got;
        if (d > worst) worst = d;
        if (d > PAGE_BYTES)
            check_report_(__FILE__, __LINE__, "key %llu (output %zu, scratch %zu): predicted %llu, measured %llu",
                          (unsigned long long)k, w.keys[k].out_bytes, w.keys[k].scratch_bytes,
                          (unsigned long long)predict, (unsigned long long)got);
    }
    printf("  24 captures: the prediction was off by at most %llu bytes\n", (unsigned long long)worst);
    end_world(c, &w);
}

/* Batch sizes as a server has them (outputs of b * 64 KiB, scratch of
 * b MiB, so outputs packed once guessed, up to 2.5 MiB), under a budget
 * of half of what they need, small sizes most often: captures take the
 * freed outputs of evicted graphs, and the prediction counts them. */
static void prediction_within_a_page_while_evicting(cpool_device *dev) {
    static stream_pool f;
    static world w;
    if (!fixture_open(dev, NULL, &f)) return;
    const uint64_t budgets_mib[] = {30, 97, 130}; /* the 64 sizes need 194 MiB together */
    for (size_t b = 0; b < sizeof budgets_mib / sizeof budgets_mib[0]; b++) {
        world_init(&w, f.pool, f.s);
        for (int k = 0; k < NKEYS; k++) {
            w.keys[k].out_bytes = (size_t)(k + 1) * 64 * 1024;
            w.keys[k].scratch_bytes = (size_t)(k + 1) * MiB;
        }
        cpool_graph_cache *c = cache_make(&w, budgets_mib[b] * MiB, 0);
        uint64_t rng = 5 + b, worst = 0;
        int predicted = 0;
        for (int i = 0; i < 600; i++) {
            uint64_t r = rng_next(&rng) % 1000, key = r < 600 ? r % 8 : r % NKEYS; /* mostly small */
            cpool_graph_cache_stats before = cache_stats(c);
            uint64_t predict = 0;
            CHECK_OK(cpool_graph_cache_predict_bytes(c, w.keys[key].scratch_bytes, w.keys[key].out_bytes, &predict));
            bool hit;
            CHECK_OK(launch(c, &w, key, f.s, &hit));
            CHECK_OK(cpool_stream_synchronize(f.s));
            cpool_graph_cache_stats st = cache_stats(c);
            if (hit || st.evictions != before.evictions) continue;
            predicted++;
            uint64_t d = st.graph_bytes > predict ? st.graph_bytes - predict : predict - st.graph_bytes;
            if (d > worst) worst = d;
            if (d > PAGE_BYTES)
                check_report_(__FILE__, __LINE__, "budget %llu MiB, request %d, key %llu: predicted %llu, measured %llu",
                              (unsigned long long)budgets_mib[b], i, (unsigned long long)key,
                              (unsigned long long)predict, (unsigned long long)st.graph_bytes);
        }
        CHECK(predicted > 20);
        printf("  budget %llu MiB: %d captures that evicted nothing, the prediction off by at most %llu bytes\n",
               (unsigned long long)budgets_mib[b], predicted, (unsigned long long)worst);
        end_world(c, &w);
    }
}

/* ---- threads ---------------------------------------------------------------------- */

typedef struct thread_arg {
    cpool_graph_cache *c;
    world *w;
    cpool_device *dev;
    int id;
    uint64_t seed;
    pthread_barrier_t *barrier;
} thread_arg;

enum { ROUNDS = 6, LAUNCHES_PER_ROUND = 12 };

static void *thread_main(void *p) {
    thread_arg *a = p;
    cpool_stream *s = NULL;
    uint64_t rng = a->seed * 0x2545F4914F6CDD1Dull + (uint64_t)a->id + 1;
    if (!CHECK_OK(cpool_stream_create(a->dev, &s))) return NULL;
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < LAUNCHES_PER_ROUND; i++) {
            /* Keys of this thread's own: launches of one key stay on one stream. */
            uint64_t key = (rng_next(&rng) % (NKEYS / NTHREADS)) * NTHREADS + (uint64_t)a->id;
            CHECK_OK(launch(a->c, a->w, key, s, NULL));
            CHECK_OK(cpool_stream_synchronize(s));
            free_pending(a->w, a->id, s);
            for (uint64_t k = (uint64_t)a->id; k < NKEYS; k += NTHREADS) check_output(s, &a->w->keys[k]);
        }
        pthread_barrier_wait(a->barrier);
        pthread_barrier_wait(a->barrier); /* thread 0 checks the bound meanwhile (threads_on_own_streams) */
    }
    cpool_stream_destroy(s);
    return NULL;
}

static void threads_on_own_streams(cpool_device *dev) {
    static stream_pool f;
    static world w;
    if (!fixture_open(dev, NULL, &f)) return;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        uint64_t rng = seed * 1234567;
        world_init(&w, f.pool, f.s);
        w.threaded = true;
        random_sizes(&w, &rng);
        uint64_t budget = (uint64_t)(rng_next(&rng) % 40 + 8) * MiB;
        cpool_graph_cache *c = cache_make(&w, budget, 0);
        pthread_barrier_t barrier;
        pthread_barrier_init(&barrier, NULL, NTHREADS + 1);
        pthread_t t[NTHREADS];
        thread_arg args[NTHREADS];
        for (int i = 0; i < NTHREADS; i++) {
            args[i] = (thread_arg){.c = c, .w = &w, .dev = dev, .id = i, .seed = seed, .barrier = &barrier};
            pthread_create(&t[i], NULL, thread_main, &args[i]);
        }
        for (int round = 0; round < ROUNDS; round++) {
            pthread_barrier_wait(&barrier);
            /* Every thread's stream is idle: one more launch gives back what
             * waited on their work, and the bound holds by bytes. */
            uint64_t key = 0;
            CHECK_OK(launch(c, &w, key, f.s, NULL));
            CHECK_OK(cpool_stream_synchronize(f.s));
            for (int t = 0; t < NTHREADS; t++) free_pending(&w, t, f.s);
            cpool_graph_cache_stats st = cache_stats(c);
            if (st.graphs > 1) CHECK_LE(st.graph_bytes, budget);
            for (int k = 0; k < NKEYS; k++) check_output(f.s, &w.keys[k]);
            pthread_barrier_wait(&barrier);
        }
        for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
        pthread_barrier_destroy(&barrier);
        cpool_graph_cache_stats st = cache_stats(c);
        printf("  seed %llu: budget %llu MiB: %llu hits, %llu misses, %llu evictions, %llu graphs kept, %llu MiB\n",
               (unsigned long long)seed, (unsigned long long)(budget / MiB), (unsigned long long)st.hits,
               (unsigned long long)st.misses, (unsigned long long)st.evictions, (unsigned long long)st.graphs,
               (unsigned long long)(st.graph_bytes / MiB));
        end_world(c, &w);
    }
}

static const check_case cases[] = {
    CHECK_CASE(counts_and_lru),         CHECK_CASE(failed_capture_keeps_nothing),
    CHECK_CASE(evict_and_destroy),      CHECK_CASE(byte_bound_one_stream),
    CHECK_CASE(too_large_kept_alone),   CHECK_CASE(prediction_within_a_page),
    CHECK_CASE(failed_capture_gives_its_memory_back),
    CHECK_CASE(prediction_within_a_page_while_evicting),
    CHECK_CASE(threads_on_own_streams),
};
CHECK_MAIN(cases, CHECK_ON_ALL)
