/*
 * Sleep and wake at the speed of the hardware: a pool of large eager
 * allocations (a server's weights or KV cache) suspended and resumed,
 * against the same bytes in one driver allocation per allocation (what a
 * sleep mode that keeps a handle per tensor does: cuMemCreate, cuMemMap and
 * cuMemSetAccess to wake, cuMemUnmap and cuMemRelease to sleep), side by
 * side in one run, rounds taking turns which goes first:
 *
 *   DISCARD  ours suspend / resume against the raw sleep / wake;
 *   KEEP     ours suspend + resume against the raw sleep + wake plus a
 *            pinned copy of the live bytes out and back (cudaMemcpyAsync,
 *            measured in the same round);
 *
 * for 16 x 1 GiB, 32 x 1 GiB, a mix of 1 MiB to 4 GiB (about 16 GiB) and that mix
 * twice (about 31 GiB).
 * The first round of each is not timed (the pool's pages become runs at
 * its first resume; the host copy is made). Then a pool of 64 graphs
 * (scratch of 16 MiB to 1 GiB, 64 KiB outputs), captured in ascending and
 * in shuffled order: its DISCARD resume against the floor of one driver
 * allocation of the largest scratch mapped whole at each graph's addresses
 * (64 mappings; one allocation per graph's scratch shown beside it), every
 * graph launched after each resume and its output checked. Then a 1 GiB
 * cpool_alloc into an empty pool against cudaMalloc of 1 GiB (after one of
 * each untimed).
 * Times: medians of the rounds; ratios ours / raw: medians of the rounds'
 * ratios, each round's two sides run back to back (goal <= 1.2). CUDA
 * only: run by hand and by scripts/gpu-check.sh.
 * Usage: wake_bench [ROUNDS]   (default 5)
 */
#include <cuda.h>
#include <cuda_runtime.h>

#include "bench_util.h"

#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)
enum { MAX_ALLOCS = 64, MAX_ROUNDS = 20 };

/* The median of the rounds' ratios ours[k] / base[k]: each round's two
 * sides ran back to back, so a round the machine was slow in counts once. */
static double ratio_median(const double *ours, const double *base, int rounds) {
    double r[MAX_ROUNDS];
    for (int k = 0; k < rounds; k++) r[k] = ours[k] / base[k];
    return bench_median(r, rounds);
}

static void check_cu(CUresult r, const char *call, int line) {
    if (r == CUDA_SUCCESS) return;
    const char *name = "?";
    cuGetErrorName(r, &name);
    fprintf(stderr, "wake_bench.cu:%d: %s failed: %s\n", line, call, name);
    exit(1);
}
#define CU(call) check_cu((call), #call, __LINE__)
#define RT(call) BENCH_CHECK((int)(call))

/* n driver allocations at n addresses; `one` (0: none): the size of a
 * single allocation instead, mapped whole at every address (each reserved
 * that large), as graphs that share their scratch would map it. */
typedef struct raw_set {
    size_t n, bytes[MAX_ALLOCS], one;
    CUdeviceptr va[MAX_ALLOCS];
} raw_set;

static size_t raw_size(const raw_set *r, size_t i) { return r->one ? r->one : r->bytes[i]; }

static CUmemAllocationProp prop_of(int device) {
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    return p;
}

/* The raw wake: an allocation, a mapping and an access setting each. */
static double raw_wake(raw_set *r, int device) {
    CUmemAllocationProp prop = prop_of(device);
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    double t = bench_now_ns();
    CUmemGenericAllocationHandle h = 0;
    if (r->one) CU(cuMemCreate(&h, r->one, &prop, 0));
    for (size_t i = 0; i < r->n; i++) {
        if (!r->one) CU(cuMemCreate(&h, r->bytes[i], &prop, 0));
        CU(cuMemMap(r->va[i], raw_size(r, i), 0, h, 0));
        if (!r->one) CU(cuMemRelease(h));
        CU(cuMemSetAccess(r->va[i], raw_size(r, i), &access, 1));
    }
    if (r->one) CU(cuMemRelease(h));
    return (bench_now_ns() - t) / 1e6;
}

static double raw_sleep(raw_set *r) {
    double t = bench_now_ns();
    for (size_t i = 0; i < r->n; i++) CU(cuMemUnmap(r->va[i], raw_size(r, i)));
    return (bench_now_ns() - t) / 1e6;
}

/* A pinned copy of `bytes` out of the device and back, in `chunk`s. */
static double pinned_copy(void *dev_buf, void *pinned, size_t bytes, size_t chunk, cudaStream_t s) {
    double t = bench_now_ns();
    for (size_t off = 0; off < bytes; off += chunk)
        RT(cudaMemcpyAsync((char *)pinned + off, dev_buf, bytes - off < chunk ? bytes - off : chunk,
                           cudaMemcpyDeviceToHost, s));
    for (size_t off = 0; off < bytes; off += chunk)
        RT(cudaMemcpyAsync(dev_buf, (char *)pinned + off, bytes - off < chunk ? bytes - off : chunk,
                           cudaMemcpyHostToDevice, s));
    RT(cudaStreamSynchronize(s));
    return (bench_now_ns() - t) / 1e6;
}

static double timed_ms(cpool_status (*fn)(cpool_pool *), cpool_pool *pool) {
    double t = bench_now_ns();
    BENCH_CHECK(fn(pool));
    return (bench_now_ns() - t) / 1e6;
}

static cpool_status suspend_discard(cpool_pool *p) { return cpool_pool_suspend(p, CPOOL_SUSPEND_DISCARD); }
static cpool_status suspend_keep(cpool_pool *p) { return cpool_pool_suspend(p, CPOOL_SUSPEND_KEEP_CONTENTS); }

/* A DISCARD round: ours suspended and resumed, the raw set woken and put
 * to sleep, in turns which goes first (the driver takes longer to hand out
 * memory the other side gave back a moment ago: a resume right after the
 * raw sleep of 16 GiB took from 0.5x to 1.7x of the raw wake, run to run). */
static void discard_round(cpool_pool *pool, raw_set *raw, int device, int round, double *d_s, double *d_r,
                          double *r_s, double *r_w) {
    if (round % 2) {
        *r_w = raw_wake(raw, device);
        *r_s = raw_sleep(raw);
    }
    *d_s = timed_ms(suspend_discard, pool);
    *d_r = timed_ms(cpool_pool_resume, pool);
    if (round % 2 == 0) {
        *r_w = raw_wake(raw, device);
        *r_s = raw_sleep(raw);
    }
}

/* One set of allocations; `keep`: the KEEP_CONTENTS rounds too (their
 * host copies take the set's size twice in pinned memory). */
static void run_set(const char *name, const size_t *sizes, size_t n, bool keep, int rounds, cpool_device *dev,
                    cpool_stream *s, int device) {
    raw_set raw;
    memset(&raw, 0, sizeof raw);
    raw.n = n;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        raw.bytes[i] = (sizes[i] + 2 * MIB - 1) / (2 * MIB) * (2 * MIB); /* the driver's granularity */
        total += sizes[i];
        CU(cuMemAddressReserve(&raw.va[i], raw.bytes[i], 0, 0, 0));
    }
    cpool_pool *pool;
    BENCH_CHECK(cpool_pool_create(dev, NULL, &pool));
    void *ptr[MAX_ALLOCS];
    for (size_t i = 0; i < n; i++) BENCH_CHECK(cpool_alloc(pool, sizes[i], s, &ptr[i]));
    BENCH_CHECK(cpool_memset_async(s, ptr[0], 7, sizes[0]));
    BENCH_CHECK(cpool_stream_synchronize(s));
    /* The pinned buffer the KEEP pool's host copy is compared with: the
     * live bytes, copied through the largest allocation in turns. */
    void *pinned = NULL;
    if (keep) RT(cudaHostAlloc(&pinned, total, cudaHostAllocDefault));
    cudaStream_t cs;
    RT(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    /* Ours and raw, DISCARD suspend (ds, rs) and resume (dr, rw); KEEP
     * suspend (ks) and resume (kr); the pinned copies (cp). */
    double ds[MAX_ROUNDS] = {0}, dr[MAX_ROUNDS] = {0}, rs[MAX_ROUNDS] = {0}, rw[MAX_ROUNDS] = {0};
    double ks[MAX_ROUNDS] = {0}, kr[MAX_ROUNDS] = {0}, cp[MAX_ROUNDS] = {0};
    /* The DISCARD rounds first, then the KEEP ones: each measure after the
     * same step as itself (a DISCARD suspend right after a KEEP resume of
     * 16 GiB took half as long again on an H100). */
    for (int round = 0; round <= rounds; round++) {
        int k = round - 1; /* round 0 is not timed */
        double d_s, d_r, r_w, r_s;
        discard_round(pool, &raw, device, round, &d_s, &d_r, &r_s, &r_w);
        if (k < 0) continue;
        ds[k] = d_s, dr[k] = d_r, rs[k] = r_s, rw[k] = r_w;
    }
    for (int round = 0; keep && round <= rounds; round++) {
        int k = round - 1;
        double copy = pinned_copy(ptr[0], pinned, total, sizes[0], cs);
        double k_s = timed_ms(suspend_keep, pool), k_r = timed_ms(cpool_pool_resume, pool);
        if (k < 0) continue;
        ks[k] = k_s, kr[k] = k_r, cp[k] = copy;
    }
    /* The ratios first: the medians sort each side's rounds apart. */
    double kept[MAX_ROUNDS], base[MAX_ROUNDS];
    for (int k = 0; k < rounds; k++) kept[k] = ks[k] + kr[k], base[k] = rs[k] + rw[k] + cp[k];
    double q_s = ratio_median(ds, rs, rounds), q_r = ratio_median(dr, rw, rounds), q_k = ratio_median(kept, base, rounds);
    double mds = bench_median(ds, rounds), mdr = bench_median(dr, rounds), mrs = bench_median(rs, rounds);
    double mrw = bench_median(rw, rounds), mks = bench_median(ks, rounds), mkr = bench_median(kr, rounds);
    double mcp = bench_median(cp, rounds);
    printf("%-8s %5.1f GiB %3zu allocs | DISCARD suspend / resume: ours %8.2f / %8.2f ms, raw %8.2f / %8.2f ms:"
           " %5.2fx / %5.2fx\n",
           name, (double)total / GIB, n, mds, mdr, mrs, mrw, q_s, q_r);
    if (keep)
        printf("%-8s KEEP suspend + resume: ours %8.2f ms, raw + pinned copies %8.2f ms (copies %.2f ms, %.1f GB/s):"
               " %5.2fx\n",
               name, mks + mkr, mrs + mrw + mcp, mcp, 2.0 * (double)total / (mcp * 1e6), q_k);
    printf("csv,wake_bench,%s,%zu,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n", name, total, mds, mdr, mrs, mrw, mks, mkr,
           mcp);
    for (size_t i = 0; i < n; i++) BENCH_CHECK(cpool_free(pool, ptr[i], s));
    BENCH_CHECK(cpool_stream_synchronize(s));
    cpool_pool_release(pool);
    cpool_wait_deferred();
    RT(cudaStreamDestroy(cs));
    if (pinned) RT(cudaFreeHost(pinned));
    for (size_t i = 0; i < n; i++) CU(cuMemAddressFree(raw.va[i], raw.bytes[i]));
}

/* ---- a pool of graphs --------------------------------------------------- */

enum { GRAPHS = 64 };
#define GRAPH_OUTPUT (64 * 1024)

typedef struct bench_graph {
    cpool_pool *pool;
    size_t scratch;
    int pattern;
    void *output;
    cpool_graph *graph;
} bench_graph;

/* Scratch written with the graph's pattern, 64 KiB of it copied to the
 * output it keeps. */
static cpool_status graph_body(cpool_stream *s, void *ctx) {
    bench_graph *g = (bench_graph *)ctx;
    void *scratch;
    cpool_status rc = cpool_alloc(g->pool, g->scratch, s, &scratch);
    if (rc == CPOOL_OK) rc = cpool_memset_async(s, scratch, g->pattern, g->scratch);
    if (rc == CPOOL_OK) rc = cpool_alloc_output(g->pool, GRAPH_OUTPUT, s, &g->output);
    if (rc == CPOOL_OK) rc = cpool_memcpy_async(s, g->output, (char *)scratch + g->scratch - GRAPH_OUTPUT, GRAPH_OUTPUT);
    if (rc == CPOOL_OK) rc = cpool_free(g->pool, scratch, s);
    return rc;
}

/* Launches every graph and counts the outputs that do not hold its pattern. */
static int wrong_outputs(bench_graph *g, cpool_stream *s, unsigned char *host) {
    int wrong = 0;
    for (int i = 0; i < GRAPHS; i++) BENCH_CHECK(cpool_graph_launch(g[i].graph, s));
    for (int i = 0; i < GRAPHS; i++) {
        BENCH_CHECK(cpool_memcpy_async(s, host, g[i].output, GRAPH_OUTPUT));
        BENCH_CHECK(cpool_stream_synchronize(s));
        for (size_t k = 0; k < GRAPH_OUTPUT; k++)
            if (host[k] != (unsigned char)g[i].pattern) {
                wrong++;
                break;
            }
    }
    return wrong;
}

static void graph_pool(const char *name, bool shuffled, int rounds, cpool_device *dev, cpool_stream *s, int device) {
    bench_graph g[GRAPHS];
    raw_set raw, apart; /* the floor: the largest scratch mapped at each graph's addresses; an allocation each */
    memset(&raw, 0, sizeof raw);
    memset(&apart, 0, sizeof apart);
    raw.n = apart.n = GRAPHS;
    cpool_pool *pool;
    BENCH_CHECK(cpool_pool_create(dev, NULL, &pool));
    int order[GRAPHS];
    for (int i = 0; i < GRAPHS; i++) order[i] = i;
    uint64_t rng = 42;
    for (int i = GRAPHS - 1; shuffled && i > 0; i--) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((rng >> 33) % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int i = 0; i < GRAPHS; i++) {
        size_t bytes = 16 * MIB + (size_t)i * (1008 * MIB) / (GRAPHS - 1);
        memset(&g[i], 0, sizeof g[i]);
        g[i].pool = pool;
        g[i].scratch = (bytes + 2 * MIB - 1) / (2 * MIB) * (2 * MIB);
        g[i].pattern = i + 1;
        raw.bytes[i] = apart.bytes[i] = g[i].scratch;
        raw.one = g[i].scratch > raw.one ? g[i].scratch : raw.one; /* the largest */
        CU(cuMemAddressReserve(&apart.va[i], apart.bytes[i], 0, 0, 0));
    }
    for (int i = 0; i < GRAPHS; i++) CU(cuMemAddressReserve(&raw.va[i], raw_size(&raw, i), 0, 0, 0));
    for (int k = 0; k < GRAPHS; k++)
        BENCH_CHECK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, graph_body, &g[order[k]], &g[order[k]].graph));
    unsigned char *host = (unsigned char *)malloc(GRAPH_OUTPUT);
    int wrong = wrong_outputs(g, s, host);
    double ds[MAX_ROUNDS] = {0}, dr[MAX_ROUNDS] = {0}, rs[MAX_ROUNDS] = {0}, rw[MAX_ROUNDS] = {0};
    double as[MAX_ROUNDS] = {0}, aw[MAX_ROUNDS] = {0};
    for (int round = 0; round <= rounds; round++) {
        int k = round - 1; /* round 0 is not timed */
        double d_s, d_r, r_w, r_s;
        discard_round(pool, &raw, device, round, &d_s, &d_r, &r_s, &r_w);
        wrong += wrong_outputs(g, s, host);
        double a_w = raw_wake(&apart, device), a_s = raw_sleep(&apart);
        if (k < 0) continue;
        ds[k] = d_s, dr[k] = d_r, rs[k] = r_s, rw[k] = r_w, as[k] = a_s, aw[k] = a_w;
    }
    cpool_pool_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    BENCH_CHECK(cpool_pool_get_stats(pool, &st));
    double q_s = ratio_median(ds, rs, rounds), q_r = ratio_median(dr, rw, rounds); /* before the medians sort */
    double mds = bench_median(ds, rounds), mdr = bench_median(dr, rounds), mrs = bench_median(rs, rounds);
    double mrw = bench_median(rw, rounds), mas = bench_median(as, rounds), maw = bench_median(aw, rounds);
    printf("%-8s 64 graphs, graph memory %.0f MiB | DISCARD suspend / resume: ours %8.2f / %8.2f ms, floor %8.2f / "
           "%8.2f ms: %5.2fx / %5.2fx (an allocation per graph: %.2f / %.2f ms) | outputs wrong after resumes: %d\n",
           name, (double)st.graph_reserved_bytes / MIB, mds, mdr, mrs, mrw, q_s, q_r, mas, maw, wrong);
    printf("csv,wake_bench,%s,%llu,%.3f,%.3f,%.3f,%.3f,%d\n", name, (unsigned long long)st.graph_reserved_bytes, mds,
           mdr, mrs, mrw, wrong);
    for (int i = 0; i < GRAPHS; i++) {
        BENCH_CHECK(cpool_free(pool, g[i].output, s));
        cpool_graph_release(g[i].graph);
    }
    BENCH_CHECK(cpool_stream_synchronize(s));
    cpool_pool_release(pool);
    cpool_wait_deferred();
    free(host);
    for (int i = 0; i < GRAPHS; i++) {
        CU(cuMemAddressFree(raw.va[i], raw_size(&raw, i)));
        CU(cuMemAddressFree(apart.va[i], apart.bytes[i]));
    }
}

/* A 1 GiB cpool_alloc into an empty pool, in microseconds. */
static double one_growth(cpool_device *dev, cpool_stream *s) {
    cpool_pool *pool;
    BENCH_CHECK(cpool_pool_create(dev, NULL, &pool));
    void *p;
    double t = bench_now_ns();
    BENCH_CHECK(cpool_alloc(pool, GIB, s, &p));
    double us = (bench_now_ns() - t) / 1e3;
    BENCH_CHECK(cpool_free(pool, p, s));
    BENCH_CHECK(cpool_stream_synchronize(s));
    cpool_pool_release(pool);
    cpool_wait_deferred();
    return us;
}

static double one_cuda_malloc(void) {
    void *p;
    double t = bench_now_ns();
    RT(cudaMalloc(&p, GIB));
    double us = (bench_now_ns() - t) / 1e3;
    RT(cudaFree(p));
    return us;
}

/* A 1 GiB cpool_alloc into an empty pool against cudaMalloc of 1 GiB, in
 * turns which goes first (each takes memory the other just gave back). */
static void eager_growth(int rounds, cpool_device *dev, cpool_stream *s) {
    double ours[MAX_ROUNDS], raw[MAX_ROUNDS];
    one_growth(dev, s); /* not timed: each side's first 1 GiB */
    one_cuda_malloc();
    for (int k = 0; k < rounds; k++) {
        if (k % 2) raw[k] = one_cuda_malloc();
        ours[k] = one_growth(dev, s);
        if (k % 2 == 0) raw[k] = one_cuda_malloc();
    }
    double ratio = ratio_median(ours, raw, rounds); /* before the medians sort */
    double o = bench_median(ours, rounds), r = bench_median(raw, rounds);
    printf("eager growth: 1 GiB cpool_alloc into an empty pool %.1f us, cudaMalloc %.1f us: %.2fx\n", o, r, ratio);
    printf("csv,wake_bench,eager_1gib,%.3f,%.3f\n", o, r);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    if (rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "usage: wake_bench [ROUNDS, 1 to %d]\n", MAX_ROUNDS);
        return 2;
    }
    cpool_device *dev;
    cpool_stream *s;
    bench_open(&dev, &s, NULL);
    int device = 0;
    RT(cudaGetDevice(&device));
    size_t gibs[32];
    for (int i = 0; i < 32; i++) gibs[i] = GIB;
    static const size_t mix[] = {4 * GIB, 2 * GIB, 2 * GIB, GIB, GIB, GIB, GIB, 512 * MIB, 512 * MIB, 512 * MIB,
                                 512 * MIB, 256 * MIB, 256 * MIB, 256 * MIB, 256 * MIB, 64 * MIB, 64 * MIB, 64 * MIB,
                                 64 * MIB, 16 * MIB, 16 * MIB, 16 * MIB, 16 * MIB, 4 * MIB, 4 * MIB, MIB, MIB};
    printf("wake_bench: %d rounds; suspend / resume of a pool against one driver allocation per allocation\n", rounds);
    run_set("16x1GiB", gibs, 16, true, rounds, dev, s, device);
    run_set("32x1GiB", gibs, 32, false, rounds, dev, s, device);
    run_set("mix", mix, sizeof mix / sizeof *mix, true, rounds, dev, s, device);
    size_t mix2[2 * sizeof mix / sizeof *mix]; /* the mix twice: about 31 GiB */
    for (size_t i = 0; i < sizeof mix2 / sizeof *mix2; i++) mix2[i] = mix[i % (sizeof mix / sizeof *mix)];
    run_set("mix2x", mix2, sizeof mix2 / sizeof *mix2, false, rounds, dev, s, device);
    graph_pool("graphs", false, rounds, dev, s, device);
    graph_pool("shuffled", true, rounds, dev, s, device);
    eager_growth(rounds, dev, s);
    bench_close(dev, s, NULL);
    return 0;
}
