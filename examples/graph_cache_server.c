/*
 * graph_cache_server: a serving loop that captures one graph per batch
 * size and keeps them in a graph cache under a byte budget.
 *
 * Requests arrive as a seeded trace of batch sizes 1..64 drawn from a Zipf
 * distribution (most requests small, a long tail of large ones). The graph
 * of batch size b allocates a small output (b * UNIT / 16, which stays
 * the request's result), then scratch of b * UNIT (UNIT 1 MiB; 256 KiB
 * with --quick), fills the scratch, copies its head to the output and frees the
 * scratch. Every request clears its output, launches its size's graph,
 * reads the output back and checks it: a server returns each result.
 *
 * The same trace is served three ways, each in a pool of its own:
 *   bounded    a cache with max_bytes = the budget, below what all sizes
 *              need together;
 *   unbounded  a cache without bounds;
 *   up front   every size captured before the first request.
 * Beside them, "LRU offline" is the hit rate that least-recently-used
 * eviction reaches on the same trace with the same budget when it knows
 * every graph's bytes exactly, counted as the pool counts graph memory:
 * the scratch pages of the largest kept graph (shared by all) plus the
 * kept graphs' outputs, in pages (outputs' tails are packed together). A
 * size's scratch pages are measured: its graph captured alone into an
 * empty pool, less its output's pages (docs/GUIDE.md, "Graph cache").
 *
 * The table shows, per way: the hit rate, the captures (misses), the
 * evictions, the peak and final graph memory against the budget, the time
 * spent in launches that captured (capture, evictions, launch) and in all
 * requests. Below it, how far the byte figures were off: the prediction
 * before each capture that evicted nothing against the graph memory
 * measured after it, and the model of the kept graphs against the graph
 * memory measured after every launch of the bounded cache.
 *
 * Usage: graph_cache_server [--quick] [--verbose] [--warn-only] [--requests N]
 *                           [--seed S] [--zipf X] [--budget-percent P] [--unit-kib K]
 * Defaults: 20000 requests (2000 with --quick), seed 1, Zipf exponent 1.1,
 * a budget of 50% of what all 64 sizes need together, UNIT 1024 KiB (256
 * with --quick).
 * Exit status: 0; 1 if an output was wrong, if graph memory exceeded the
 * budget after a launch while the cache kept more than one graph, if a
 * prediction was off by more than one 2 MiB page, or if the bounded hit
 * rate is more than 5 points below LRU offline (these last two only
 * warn with --warn-only); 2 on a failed call. --verbose prints a line per
 * request of each cache: its graphs and graph memory, the model's figure
 * and the prediction.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <capturepool.h>

#define CHECK(call)                                                                                          \
    do {                                                                                                     \
        cpool_status st_ = (call);                                                                           \
        if (st_ != CPOOL_OK) {                                                                               \
            fprintf(stderr, "graph_cache_server: %s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,            \
                    cpool_status_string(st_), cpool_last_error());                                           \
            exit(2);                                                                                         \
        }                                                                                                    \
    } while (0)

#define TRY(call)                                                                                            \
    do {                                                                                                     \
        cpool_status st_ = (call);                                                                           \
        if (st_ != CPOOL_OK) return st_;                                                                     \
    } while (0)

enum { SIZES = 64 };

static bool verbose; /* --verbose: a line per request of each cache */

#define KiB ((uint64_t)1024)
#define MiB (1024 * KiB)
#define PAGE (2 * MiB)

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static double mib(uint64_t bytes) { return (double)bytes / (double)MiB; }

/* ---- the graphs ---------------------------------------------------------- */

typedef struct server server;

/* One batch size: its graph's sizes and its output while a graph of it is
 * kept. */
typedef struct batch {
    server *sv;
    int b;
    uint64_t out_bytes, scratch_bytes; /* b * UNIT / 16, b * UNIT */
    void *out;
    /* Graph memory of this size's graph alone, from the prediction on an
     * empty pool: shared (scratch pages past the output's) and own. */
    uint64_t shared, own;
} batch;

struct server {
    cpool_pool *pool;
    cpool_stream *s;
    batch sizes[SIZES + 1]; /* by batch size, 1..SIZES */
    unsigned char *host;    /* a read-back buffer, as large as the largest output */
    int wrong;              /* outputs read back wrong */
    int evicted_now;        /* on_evict calls during the current request */
};

static unsigned char value_of(int b) { return (unsigned char)(b * 37 + 11); }

/* The graph of a batch size: output first, then scratch (freed before the
 * capture ends), as cpool_graph_cache_predict_bytes counts them. */
static cpool_status step(cpool_stream *s, void *ctx) {
    batch *bt = ctx;
    cpool_pool *pool = bt->sv->pool;
    void *out = NULL, *scratch = NULL;
    cpool_status st = cpool_alloc(pool, bt->out_bytes, s, &out);
    if (st == CPOOL_OK) st = cpool_alloc(pool, bt->scratch_bytes, s, &scratch);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, value_of(bt->b), bt->scratch_bytes);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, out, scratch, bt->out_bytes);
    if (scratch) cpool_free(pool, scratch, s);
    if (st != CPOOL_OK) {
        if (out) cpool_free(pool, out, s);
        return st;
    }
    bt->out = out;
    return CPOOL_OK;
}

/* A graph leaves a cache: its output goes with it. */
static void on_evict(uint64_t key, cpool_graph *graph, void *user) {
    server *sv = user;
    batch *bt = &sv->sizes[key];
    (void)graph;
    if (bt->out) CHECK(cpool_free(sv->pool, bt->out, sv->s));
    bt->out = NULL;
    sv->evicted_now++;
}

/* Reads the first and the last byte of b's output back (the request's
 * result) and checks them. Synchronizes the stream. */
static cpool_status check_output(server *sv, int b) {
    batch *bt = &sv->sizes[b];
    size_t n = (size_t)bt->out_bytes;
    memset(sv->host, 0, n);
    TRY(cpool_memcpy_async(sv->s, sv->host, bt->out, n));
    TRY(cpool_stream_synchronize(sv->s));
    if (sv->host[0] != value_of(b) || sv->host[n - 1] != value_of(b)) {
        if (sv->wrong++ < 5)
            fprintf(stderr, "graph_cache_server: batch %d: output reads 0x%02x..0x%02x, expected 0x%02x\n", b,
                    sv->host[0], sv->host[n - 1], value_of(b));
    }
    return CPOOL_OK;
}

/* ---- the trace ------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* n batch sizes with P(b) proportional to 1 / b^exponent. */
static int *make_trace(int n, uint64_t seed, double exponent) {
    double cdf[SIZES + 1], total = 0;
    cdf[0] = 0;
    for (int b = 1; b <= SIZES; b++) cdf[b] = total += 1.0 / pow((double)b, exponent);
    int *trace = malloc((size_t)n * sizeof *trace);
    if (!trace) {
        fprintf(stderr, "graph_cache_server: out of memory\n");
        exit(2);
    }
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int i = 0; i < n; i++) {
        double u = (double)(rng_next(&x) >> 11) / 9007199254740992.0 * total;
        int b = 1;
        while (b < SIZES && cdf[b] <= u) b++;
        trace[i] = b;
    }
    return trace;
}

/* ---- serving ----------------------------------------------------------------- */

typedef struct result {
    const char *name;
    uint64_t requests, hits, captures, evictions;
    uint64_t peak, final; /* graph memory, bytes */
    double capture_ms, total_ms;
    int over;                 /* launches after which graph memory exceeded the budget with > 1 graph kept */
    int alone_over;           /* ... with one graph kept (the graph alone needs more) */
    uint64_t predict_err;     /* prediction before a capture that evicted nothing vs after it */
    int predicted;            /* such captures */
    uint64_t model_err;       /* the kept graphs' model vs measured, after every launch */
    int wrong;                /* outputs read back wrong */
    bool measured;            /* a real run (else the offline simulation) */
} result;

static void server_open(server *sv, cpool_device *dev, uint64_t unit) {
    memset(sv, 0, sizeof *sv);
    CHECK(cpool_stream_create(dev, &sv->s));
    CHECK(cpool_pool_create(dev, NULL, &sv->pool));
    for (int b = 1; b <= SIZES; b++)
        sv->sizes[b] = (batch){.sv = sv, .b = b, .out_bytes = (uint64_t)b * unit / 16,
                               .scratch_bytes = (uint64_t)b * unit};
    sv->host = malloc((size_t)(SIZES * unit / 16));
    if (!sv->host) {
        fprintf(stderr, "graph_cache_server: out of memory\n");
        exit(2);
    }
}

static void server_close(server *sv) {
    CHECK(cpool_stream_synchronize(sv->s));
    cpool_pool_release(sv->pool);
    cpool_stream_destroy(sv->s);
    free(sv->host);
}

static uint64_t graph_bytes(cpool_pool *pool) {
    cpool_pool_stats ps = CPOOL_POOL_STATS_INIT;
    CHECK(cpool_pool_get_stats(pool, &ps));
    return ps.graph_reserved_bytes;
}

static uint64_t absdiff(uint64_t a, uint64_t b) { return a > b ? a - b : b - a; }

static uint64_t pages(uint64_t bytes) { return (bytes + PAGE - 1) / PAGE * PAGE; }

/* The pool's graph memory as the model counts it for the kept sizes: the
 * largest scratch's pages, shared by all, and the outputs' bytes (whole
 * pages of their own, their tails packed together), in pages. */
static uint64_t model_bytes(const batch *sizes, const bool *kept) {
    uint64_t shared = 0, own = 0;
    for (int b = 1; b <= SIZES; b++)
        if (kept[b]) {
            if (sizes[b].shared > shared) shared = sizes[b].shared;
            own += sizes[b].own;
        }
    return shared + pages(own);
}

/* Serves the trace through a cache with max_bytes (0: none). */
static result serve_cached(cpool_device *dev, uint64_t unit, const int *trace, int n, uint64_t max_bytes,
                           const batch *figures) {
    server sv;
    server_open(&sv, dev, unit);
    result r = {.name = max_bytes ? "bounded" : "unbounded", .requests = (uint64_t)n, .measured = true};
    cpool_graph_cache_options o = CPOOL_GRAPH_CACHE_OPTIONS_INIT;
    o.max_bytes = max_bytes;
    o.on_evict = on_evict;
    o.user = &sv;
    cpool_graph_cache *cache = NULL;
    CHECK(cpool_graph_cache_create(sv.pool, &o, &cache));
    bool kept[SIZES + 1] = {false};
    double t_start = now_ms();
    for (int i = 0; i < n; i++) {
        int b = trace[i];
        batch *bt = &sv.sizes[b];
        uint64_t predict = 0;
        if (!kept[b]) CHECK(cpool_graph_cache_predict_bytes(cache, bt->scratch_bytes, bt->out_bytes, &predict));
        if (bt->out) CHECK(cpool_memset_async(sv.s, bt->out, 0, (size_t)bt->out_bytes)); /* the replay writes it */
        sv.evicted_now = 0;
        bool hit = false;
        double t0 = now_ms();
        CHECK(cpool_graph_cache_launch(cache, (uint64_t)b, sv.s, CPOOL_CAPTURE_THREAD_LOCAL, step, bt, &hit));
        if (!hit) r.capture_ms += now_ms() - t0;
        cpool_graph_cache_stats st = CPOOL_GRAPH_CACHE_STATS_INIT;
        CHECK(cpool_graph_cache_get_stats(cache, &st));
        /* Which sizes are kept now: this one, less those evicted. */
        kept[b] = true;
        for (int k = 1; k <= SIZES; k++)
            if (kept[k] && !sv.sizes[k].out) kept[k] = false;
        if (max_bytes && st.graph_bytes > max_bytes) {
            if (st.graphs > 1)
                r.over++;
            else
                r.alone_over++;
        }
        if (st.graph_bytes > r.peak) r.peak = st.graph_bytes;
        if (!hit && sv.evicted_now == 0) {
            r.predicted++;
            uint64_t d = absdiff(predict, st.graph_bytes);
            if (d > r.predict_err) r.predict_err = d;
        }
        uint64_t d = absdiff(model_bytes(figures, kept), st.graph_bytes);
        if (d > r.model_err) r.model_err = d;
        CHECK(check_output(&sv, b));
        if (verbose)
            printf("  %s request %d: batch %d %s, %llu graphs, %.0f MiB (model %.0f, predicted %.0f), %d evicted\n",
                   r.name, i, b, hit ? "hit" : "miss", (unsigned long long)st.graphs, mib(st.graph_bytes),
                   mib(model_bytes(figures, kept)), mib(predict), sv.evicted_now);
    }
    r.total_ms = now_ms() - t_start;
    cpool_graph_cache_stats st = CPOOL_GRAPH_CACHE_STATS_INIT;
    CHECK(cpool_graph_cache_get_stats(cache, &st));
    r.hits = st.hits;
    r.captures = st.misses;
    r.evictions = st.evictions;
    r.final = st.graph_bytes;
    r.wrong = sv.wrong;
    cpool_graph_cache_destroy(cache);
    server_close(&sv);
    return r;
}

/* Captures every size first, then serves the trace with plain launches. */
static result serve_up_front(cpool_device *dev, uint64_t unit, const int *trace, int n) {
    server sv;
    server_open(&sv, dev, unit);
    result r = {.name = "up front", .requests = (uint64_t)n, .measured = true};
    cpool_graph *graphs[SIZES + 1] = {NULL};
    double t_start = now_ms();
    for (int b = 1; b <= SIZES; b++)
        CHECK(cpool_capture(sv.s, sv.pool, CPOOL_CAPTURE_THREAD_LOCAL, step, &sv.sizes[b], &graphs[b]));
    r.capture_ms = now_ms() - t_start;
    r.captures = SIZES;
    r.peak = graph_bytes(sv.pool);
    for (int i = 0; i < n; i++) {
        int b = trace[i];
        CHECK(cpool_memset_async(sv.s, sv.sizes[b].out, 0, (size_t)sv.sizes[b].out_bytes));
        CHECK(cpool_graph_launch(graphs[b], sv.s));
        CHECK(check_output(&sv, b));
    }
    r.total_ms = now_ms() - t_start;
    r.hits = (uint64_t)n;
    r.final = graph_bytes(sv.pool);
    if (r.final > r.peak) r.peak = r.final;
    r.wrong = sv.wrong;
    for (int b = 1; b <= SIZES; b++) {
        CHECK(cpool_free(sv.pool, sv.sizes[b].out, sv.s));
        cpool_graph_release(graphs[b]);
    }
    server_close(&sv);
    return r;
}

/* Least recently used eviction on the trace, knowing each size's bytes:
 * after a miss, the least recently requested other sizes go until the
 * model's bytes are within max_bytes or one size is left. */
static result simulate_lru(const batch *figures, const int *trace, int n, uint64_t max_bytes) {
    result r = {.name = "LRU offline", .requests = (uint64_t)n};
    bool kept[SIZES + 1] = {false};
    uint64_t last[SIZES + 1] = {0};
    int count = 0;
    for (int i = 0; i < n; i++) {
        int b = trace[i];
        last[b] = (uint64_t)i + 1;
        if (kept[b]) {
            r.hits++;
        } else {
            r.captures++;
            kept[b] = true;
            count++;
            while (count > 1 && model_bytes(figures, kept) > max_bytes) {
                int victim = 0;
                for (int k = 1; k <= SIZES; k++)
                    if (kept[k] && k != b && (!victim || last[k] < last[victim])) victim = k;
                kept[victim] = false;
                count--;
                r.evictions++;
            }
        }
        uint64_t bytes = model_bytes(figures, kept);
        if (bytes > r.peak) r.peak = bytes;
        r.final = bytes;
    }
    return r;
}

/* Each size's graph memory alone, measured: its graph captured into an
 * empty pool. Its own bytes are its output's; the rest is its scratch's
 * pages, which the graphs of a pool share. */
static void measure_figures(cpool_device *dev, uint64_t unit, batch *figures) {
    for (int b = 1; b <= SIZES; b++) {
        server sv;
        server_open(&sv, dev, unit);
        cpool_graph *g = NULL;
        CHECK(cpool_capture(sv.s, sv.pool, CPOOL_CAPTURE_THREAD_LOCAL, step, &sv.sizes[b], &g));
        uint64_t alone = graph_bytes(sv.pool);
        figures[b] = sv.sizes[b];
        figures[b].own = figures[b].out_bytes;
        figures[b].shared = alone - pages(figures[b].out_bytes);
        CHECK(cpool_free(sv.pool, sv.sizes[b].out, sv.s));
        cpool_graph_release(g);
        server_close(&sv);
    }
}

/* ---- main ---------------------------------------------------------------------- */

static void usage(void) {
    fprintf(stderr, "usage: graph_cache_server [--quick] [--verbose] [--warn-only] [--requests N] [--seed S] [--zipf X] "
                    "[--budget-percent P] [--unit-kib K]\n");
    exit(2);
}

static void print_row(const result *r, uint64_t budget) {
    char peak[32], fin[32];
    snprintf(peak, sizeof peak, "%.0f%s", mib(r->peak), r->peak > budget ? " (over)" : "");
    snprintf(fin, sizeof fin, "%.0f", mib(r->final));
    printf("%-12s %7.1f%% %9llu %9llu %12s %10s ", r->name, 100.0 * (double)r->hits / (double)r->requests,
           (unsigned long long)r->captures, (unsigned long long)r->evictions, peak, fin);
    if (r->measured)
        printf("%11.1f %11.1f\n", r->capture_ms, r->total_ms);
    else
        printf("%11s %11s\n", "-", "-");
}

int main(int argc, char **argv) {
    bool quick = false, warn_only = false;
    int requests = 0;
    uint64_t seed = 1, unit_kib = 0;
    double exponent = 1.1, budget_percent = 50;
    for (int i = 1; i < argc; i++) {
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else if (strcmp(argv[i], "--verbose") == 0) {
            verbose = true;
        } else if (strcmp(argv[i], "--warn-only") == 0) {
            warn_only = true;
        } else if (strcmp(argv[i], "--requests") == 0 && next) {
            requests = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--seed") == 0 && next) {
            seed = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--zipf") == 0 && next) {
            exponent = atof(argv[++i]);
        } else if (strcmp(argv[i], "--budget-percent") == 0 && next) {
            budget_percent = atof(argv[++i]);
        } else if (strcmp(argv[i], "--unit-kib") == 0 && next) {
            unit_kib = strtoull(argv[++i], NULL, 10);
        } else {
            usage();
        }
    }
    if (requests <= 0) requests = quick ? 2000 : 20000;
    if (!unit_kib) unit_kib = quick ? 256 : 1024;
    if (exponent <= 0 || budget_percent <= 0 || budget_percent >= 100) usage();
    uint64_t unit = unit_kib * KiB;

    cpool_device *dev = NULL;
    CHECK(cpool_device_open(CPOOL_BACKEND_AUTO, 0, &dev));
    bool cuda = cpool_device_backend(dev) == CPOOL_BACKEND_CUDA;

    batch figures[SIZES + 1];
    measure_figures(dev, unit, figures);
    bool all[SIZES + 1];
    for (int b = 0; b <= SIZES; b++) all[b] = b > 0;
    uint64_t need = model_bytes(figures, all);
    uint64_t budget = (uint64_t)((double)need * budget_percent / 100.0) / MiB * MiB;

    int *trace = make_trace(requests, seed, exponent);
    int small = 0, distinct = 0;
    bool seen[SIZES + 1] = {false};
    for (int i = 0; i < requests; i++) {
        small += trace[i] <= 8;
        if (!seen[trace[i]]) distinct++;
        seen[trace[i]] = true;
    }
    printf("graph_cache_server on the %s backend: %d requests (seed %llu, Zipf %.2f over batch sizes 1..%d: %.0f%% "
           "of size 8 or less, %d sizes seen)\n",
           cuda ? "CUDA" : "host", requests, (unsigned long long)seed, exponent, SIZES,
           100.0 * small / requests, distinct);
    printf("batch b: output b * %llu KiB, scratch b * %llu KiB; all %d sizes need %.0f MiB of graph memory "
           "together, the largest alone %.0f MiB; budget %.0f MiB (%.0f%%)\n\n",
           (unsigned long long)(unit_kib / 16), (unsigned long long)unit_kib, SIZES, mib(need),
           mib(figures[SIZES].shared + pages(figures[SIZES].own)), mib(budget), budget_percent);

    result rows[4];
    rows[0] = serve_cached(dev, unit, trace, requests, budget, figures);
    rows[1] = serve_cached(dev, unit, trace, requests, 0, figures);
    rows[2] = serve_up_front(dev, unit, trace, requests);
    rows[3] = simulate_lru(figures, trace, requests, budget);

    printf("%-12s %8s %9s %9s %12s %10s %11s %11s\n", "", "hit rate", "captures", "evictions", "peak MiB",
           "final MiB", "capture ms", "total ms");
    for (int i = 0; i < 4; i++) print_row(&rows[i], budget);
    printf("\ncapture ms: time in the launches that captured (the capture, the evictions and the launch); "
           "up front: the %d captures. total ms: every request, each launched, read back and checked.\n",
           SIZES);

    int status = 0;
    for (int i = 0; i < 3; i++)
        if (rows[i].wrong) {
            printf("FAIL: %s: %d outputs read back wrong\n", rows[i].name, rows[i].wrong);
            status = 1;
        }
    const result *bd = &rows[0], *ub = &rows[1];
    printf("\nbounded: graph memory over the budget after %d launches with more than one graph kept, after %d "
           "with one graph (that graph alone needs more)\n",
           bd->over, bd->alone_over);
    uint64_t predict_err = bd->predict_err > ub->predict_err ? bd->predict_err : ub->predict_err;
    printf("prediction before a capture against graph memory after it: off by at most %.2f MiB over %d captures "
           "that evicted nothing (bounded), %.2f MiB over %d (unbounded)\n",
           mib(bd->predict_err), bd->predicted, mib(ub->predict_err), ub->predicted);
    printf("model of the kept graphs (largest shared + each own) against graph memory after every launch: off by "
           "at most %.2f MiB (bounded), %.2f MiB (unbounded)\n",
           mib(bd->model_err), mib(ub->model_err));
    double gap = 100.0 * ((double)rows[3].hits - (double)bd->hits) / (double)requests;
    printf("bounded hit rate against LRU offline: %+.1f points\n", -gap);
    if (bd->over) {
        printf("FAIL: graph memory exceeded the budget with more than one graph kept\n");
        status = 1;
    }
    /* --warn-only: these two are reported, and leave the exit status alone. */
    if (predict_err > PAGE) {
        printf("%s: a prediction was off by more than one 2 MiB page\n", warn_only ? "WARNING" : "FAIL");
        if (!warn_only) status = 1;
    }
    if (gap > 5.0) {
        printf("%s: the bounded hit rate is more than 5 points below LRU offline\n", warn_only ? "WARNING" : "FAIL");
        if (!warn_only) status = 1;
    }
    free(trace);
    cpool_device_close(dev);
    return status;
}
