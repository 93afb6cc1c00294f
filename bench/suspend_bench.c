/*
 * What suspending and resuming a pool costs, side by side in one run, with
 * the ratios of each measure (medians of the ratios of side-by-side rounds;
 * in 1 which side goes first flips each round, in 2 ours and raw take turns
 * holding the memory):
 *
 * 1. Backup and restore bandwidth. A pool of L bytes of live blocks
 *    (cpool_alloc outside capture) is suspended with KEEP_CONTENTS and
 *    resumed, then suspended with DISCARD and resumed, each round. The copy
 *    is isolated as the difference of the two: KEEP suspend - DISCARD
 *    suspend (device to host), resume after KEEP - resume after DISCARD
 *    (host to device); both do the same unmapping and mapping. Raw: one
 *    cudaMemcpyAsync of the same bytes between a cudaMalloc'd buffer and a
 *    pinned (cudaHostAlloc) one, each way, synchronized (memcpy between
 *    malloc'd buffers on the host backend). Ratios are bandwidths,
 *    ours / raw (goal >= 0.9): of the isolated copy, and of the whole call.
 * 2. A pool with G GiB of graph pages (a captured graph whose scratch is
 *    G, kept by the graph) and L GiB live, suspended with KEEP_CONTENTS and
 *    resumed, against the same done raw with the driver: L bytes copied to
 *    pinned memory, then cuMemUnmap and cuMemRelease of (G + L) / 2 MiB
 *    pages of 2 MiB (suspend); cuMemCreate and cuMemMap of as many, one
 *    cuMemSetAccess over their range, and the copy back (resume). Ratio
 *    ours / raw of suspend + resume (goal <= 1.2). Ours and raw take turns
 *    holding the memory, so the device needs G + L once. The first round
 *    is not timed (the pool's host buffer is allocated then); after the
 *    last one the live bytes are checked.
 * 3. Device memory given back: cudaMemGetInfo's free memory before and
 *    after the suspend of the first round of 2, against the pool's
 *    reserved_bytes before it (goal: all of it).
 * 4. Resume against capturing anew: a pool with 100 graphs of 300 kernels
 *    each (each graph's capture allocates a 2 MiB scratch, ticks it, frees
 *    it), suspended with DISCARD (untimed) and resumed; against releasing
 *    them and trimming the pool (untimed), then capturing and instantiating
 *    the same graphs again. Both also with the first launch of every graph
 *    and a synchronize. Ratio capture / resume (goal >= 10).
 *
 * On the host backend only our side of 1 and 2 is measured (the raw side of
 * 2 is CUDA's driver), 3 shows reserved_bytes only, and 4's kernels are
 * host tasks. Times are wall clock, medians of the rounds. Prints
 * "csv,suspend_*,..." lines for scripts/bench_report.py.
 *
 * Usage: suspend_bench [--smoke] [--max-gib G] [--rounds R]
 *   --smoke     sizes of a few MiB, 4 graphs of 8 kernels: milliseconds
 *   --max-gib G skip the sizes whose memory (ours and raw together in 1,
 *               G + L in 2) is over G GiB; default: 90% of the free memory
 *               on CUDA, 2 on the host backend
 *   --rounds R  timed rounds (default 5)
 */
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "capturepool.h"
#include "tick_step.h"
#ifdef CPOOL_HAVE_CUDA
#include <cuda.h> /* the driver's types; its functions come through the runtime */
#include <cuda_runtime_api.h>

#include "cuda_driver.h" /* cpool__driver_entry, from src/ */

#define CUDA_CHECK(call)                                                                           \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call,               \
                    cudaGetErrorName(err_), cudaGetErrorString(err_));                             \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* The driver's virtual memory calls of the raw side, fetched through the
 * runtime as the library fetches them, so that the program does not link
 * the driver library and runs where there is none (on the host backend). */
typedef struct vmm_calls {
    CUresult (*address_reserve)(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                unsigned long long flags);
    CUresult (*address_free)(CUdeviceptr ptr, size_t size);
    CUresult (*create)(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                       unsigned long long flags);
    CUresult (*map)(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                    unsigned long long flags);
    CUresult (*set_access)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
    CUresult (*unmap)(CUdeviceptr ptr, size_t size);
    CUresult (*release)(CUmemGenericAllocationHandle handle);
} vmm_calls;
static vmm_calls vmm;

/* Whether the runtime gave every call. */
static bool vmm_load(void) {
    vmm.address_reserve = (__typeof__(vmm.address_reserve))cpool__driver_entry("cuMemAddressReserve");
    vmm.address_free = (__typeof__(vmm.address_free))cpool__driver_entry("cuMemAddressFree");
    vmm.create = (__typeof__(vmm.create))cpool__driver_entry("cuMemCreate");
    vmm.map = (__typeof__(vmm.map))cpool__driver_entry("cuMemMap");
    vmm.set_access = (__typeof__(vmm.set_access))cpool__driver_entry("cuMemSetAccess");
    vmm.unmap = (__typeof__(vmm.unmap))cpool__driver_entry("cuMemUnmap");
    vmm.release = (__typeof__(vmm.release))cpool__driver_entry("cuMemRelease");
    return vmm.address_reserve && vmm.address_free && vmm.create && vmm.map && vmm.set_access && vmm.unmap &&
           vmm.release;
}

#define CU_CHECK(call)                                                                             \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, "%s:%d: %s failed: CUresult %d\n", __FILE__, __LINE__, #call, (int)r_); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#endif

#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)
#define PAGE (2 * MIB)
enum { MAX_ROUNDS = 100, CHUNK_MIB = 256 };

typedef struct bench {
    cpool_device *dev;
    cpool_stream *s;
    bool cuda, smoke;
    bool raw_pages; /* the driver's virtual memory calls are at hand (CUDA) */
    int rounds;
    double max_bytes;
    /* Raw side: the host buffer of the copies (pinned on CUDA), sized for
     * the largest row so far. */
    void *raw_host;
    size_t raw_bytes;
#ifdef CPOOL_HAVE_CUDA
    cudaStream_t raw_stream;
    int ordinal;
#endif
} bench;

/* Times one call that must succeed, in ns. */
#define TIME_NS(out, call)                                                                         \
    do {                                                                                           \
        double t0_ = bench_now_ns();                                                               \
        BENCH_CHECK(call);                                                                         \
        (out) = bench_now_ns() - t0_;                                                              \
    } while (0)

static uint64_t reserved_of(const cpool_pool *pool) {
    cpool_pool_stats st = {.struct_size = sizeof st};
    BENCH_CHECK(cpool_pool_get_stats(pool, &st));
    return st.reserved_bytes;
}

static double device_free_bytes(const bench *b) {
#ifdef CPOOL_HAVE_CUDA
    if (b->cuda) {
        size_t free_b, total_b;
        CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        return (double)free_b;
    }
#endif
    (void)b;
    return 0;
}

/* ---- a pool with live blocks and a graph's pages ---------------------------- */

typedef struct pool_setup {
    cpool_pool *pool;
    cpool_graph *graph; /* NULL without graph pages */
    void **live;
    size_t nlive, chunk;
} pool_setup;

typedef struct scratch_capture {
    cpool_pool *pool;
    size_t bytes, chunk;
} scratch_capture;

/* The graph's capture: scratch of `bytes` in chunks, each filled, all freed. */
static cpool_status scratch_body(cpool_stream *s, void *ctx) {
    scratch_capture *sc = ctx;
    size_t n = (sc->bytes + sc->chunk - 1) / sc->chunk;
    void **p = calloc(n, sizeof *p);
    if (!p) return CPOOL_ERR_OUT_OF_MEMORY;
    cpool_status rc = CPOOL_OK;
    for (size_t i = 0; i < n && rc == CPOOL_OK; i++) {
        rc = cpool_alloc(sc->pool, sc->chunk, s, &p[i]);
        if (rc == CPOOL_OK) rc = cpool_memset_async(s, p[i], 0, sc->chunk);
    }
    for (size_t i = 0; i < n && rc == CPOOL_OK; i++) rc = cpool_free(sc->pool, p[i], s);
    free(p);
    return rc;
}

static size_t chunk_for(size_t bytes) {
    size_t chunk = (size_t)CHUNK_MIB * MIB;
    return bytes < chunk ? bytes : chunk;
}

static pool_setup setup_pool(const bench *b, size_t graph_bytes, size_t live_bytes) {
    pool_setup ps = {0};
    BENCH_CHECK(cpool_pool_create(b->dev, NULL, &ps.pool));
    if (live_bytes) {
        ps.chunk = chunk_for(live_bytes);
        ps.nlive = (live_bytes + ps.chunk - 1) / ps.chunk;
        ps.live = calloc(ps.nlive, sizeof *ps.live);
        if (!ps.live) exit(1);
        for (size_t i = 0; i < ps.nlive; i++) {
            BENCH_CHECK(cpool_alloc(ps.pool, ps.chunk, b->s, &ps.live[i]));
            BENCH_CHECK(cpool_memset_async(b->s, ps.live[i], (int)(i % 251) + 1, ps.chunk));
        }
    }
    if (graph_bytes) {
        scratch_capture sc = {ps.pool, graph_bytes, chunk_for(graph_bytes)};
        BENCH_CHECK(cpool_capture(b->s, ps.pool, CPOOL_CAPTURE_GLOBAL, scratch_body, &sc, &ps.graph));
        BENCH_CHECK(cpool_graph_launch(ps.graph, b->s));
    }
    BENCH_CHECK(cpool_stream_synchronize(b->s));
    return ps;
}

/* Whether every live chunk still starts with the bytes it was filled with. */
static bool live_bytes_intact(const bench *b, const pool_setup *ps) {
    unsigned char got[64];
    size_t n = ps->chunk < sizeof got ? ps->chunk : sizeof got;
    for (size_t i = 0; i < ps->nlive; i++) {
        BENCH_CHECK(cpool_memcpy_async(b->s, got, ps->live[i], n));
        BENCH_CHECK(cpool_stream_synchronize(b->s));
        for (size_t k = 0; k < n; k++)
            if (got[k] != (unsigned char)(i % 251 + 1)) return false;
    }
    return true;
}

static void teardown_pool(const bench *b, pool_setup *ps) {
    cpool_graph_release(ps->graph);
    for (size_t i = 0; i < ps->nlive; i++) BENCH_CHECK(cpool_free(ps->pool, ps->live[i], b->s));
    BENCH_CHECK(cpool_stream_synchronize(b->s));
    cpool_pool_release(ps->pool);
    cpool_wait_deferred();
    free(ps->live);
}

/* ---- the raw side -------------------------------------------------------------- */

/* A copy of `bytes` between `dev` and the raw host buffer, synchronized,
 * in ns. */
static double raw_copy(const bench *b, void *dev, size_t bytes, bool to_host) {
    double t0 = bench_now_ns();
#ifdef CPOOL_HAVE_CUDA
    if (b->cuda) {
        if (to_host)
            CUDA_CHECK(cudaMemcpyAsync(b->raw_host, dev, bytes, cudaMemcpyDeviceToHost, b->raw_stream));
        else
            CUDA_CHECK(cudaMemcpyAsync(dev, b->raw_host, bytes, cudaMemcpyHostToDevice, b->raw_stream));
        CUDA_CHECK(cudaStreamSynchronize(b->raw_stream));
        return bench_now_ns() - t0;
    }
#endif
    if (to_host)
        memcpy(b->raw_host, dev, bytes);
    else
        memcpy(dev, b->raw_host, bytes);
    return bench_now_ns() - t0;
}

/* The raw side's host buffer (pinned on CUDA), grown to `bytes`. */
static void raw_host_buffer(bench *b, size_t bytes) {
    if (bytes <= b->raw_bytes) return;
#ifdef CPOOL_HAVE_CUDA
    if (b->cuda) {
        if (b->raw_bytes) CUDA_CHECK(cudaFreeHost(b->raw_host));
        CUDA_CHECK(cudaHostAlloc(&b->raw_host, bytes, cudaHostAllocDefault));
    }
#endif
    if (!b->cuda) {
        free(b->raw_host);
        b->raw_host = malloc(bytes);
        if (!b->raw_host) exit(1);
    }
    memset(b->raw_host, 1, bytes);
    b->raw_bytes = bytes;
}

static void raw_host_buffer_free(bench *b) {
#ifdef CPOOL_HAVE_CUDA
    if (b->cuda && b->raw_bytes) CUDA_CHECK(cudaFreeHost(b->raw_host));
#endif
    if (!b->cuda) free(b->raw_host);
    b->raw_host = NULL;
    b->raw_bytes = 0;
}

/* The raw device buffer of the bandwidth rows (cudaMalloc; malloc on the
 * host backend), filled. */
static void *raw_device_buffer(const bench *b, size_t bytes) {
    void *p = NULL;
#ifdef CPOOL_HAVE_CUDA
    if (b->cuda) {
        CUDA_CHECK(cudaMalloc(&p, bytes));
        CUDA_CHECK(cudaMemset(p, 1, bytes));
        return p;
    }
#endif
    (void)b;
    p = malloc(bytes);
    if (!p) exit(1);
    memset(p, 1, bytes);
    return p;
}

static void raw_device_buffer_free(const bench *b, void *p) {
#ifdef CPOOL_HAVE_CUDA
    if (b->cuda) {
        CUDA_CHECK(cudaFree(p));
        return;
    }
#endif
    (void)b;
    free(p);
}

#ifdef CPOOL_HAVE_CUDA
/* Pages of 2 MiB mapped in one reserved range, the first `live` bytes of
 * which are copied out and back. */
typedef struct raw_pages {
    CUdeviceptr base;
    size_t pages, live;
    CUmemGenericAllocationHandle *h;
    CUmemAllocationProp prop;
    CUmemAccessDesc access;
} raw_pages;

static raw_pages raw_pages_reserve(const bench *b, size_t bytes, size_t live) {
    raw_pages r;
    memset(&r, 0, sizeof r);
    r.pages = (bytes + PAGE - 1) / PAGE;
    r.live = live;
    r.h = calloc(r.pages, sizeof *r.h);
    if (!r.h) exit(1);
    r.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    r.prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    r.prop.location.id = b->ordinal;
    r.access.location = r.prop.location;
    r.access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU_CHECK(vmm.address_reserve(&r.base, r.pages * PAGE, PAGE, 0, 0));
    return r;
}

/* Takes the pages and copies the live bytes in, in ns. */
static double raw_pages_resume(const bench *b, raw_pages *r) {
    double t0 = bench_now_ns();
    for (size_t i = 0; i < r->pages; i++) {
        CU_CHECK(vmm.create(&r->h[i], PAGE, &r->prop, 0));
        CU_CHECK(vmm.map(r->base + i * PAGE, PAGE, 0, r->h[i], 0));
    }
    CU_CHECK(vmm.set_access(r->base, r->pages * PAGE, &r->access, 1));
    CUDA_CHECK(cudaMemcpyAsync((void *)r->base, b->raw_host, r->live, cudaMemcpyHostToDevice, b->raw_stream));
    CUDA_CHECK(cudaStreamSynchronize(b->raw_stream));
    return bench_now_ns() - t0;
}

/* Copies the live bytes out and gives the pages back, in ns. */
static double raw_pages_suspend(const bench *b, raw_pages *r) {
    double t0 = bench_now_ns();
    CUDA_CHECK(cudaMemcpyAsync(b->raw_host, (void *)r->base, r->live, cudaMemcpyDeviceToHost, b->raw_stream));
    CUDA_CHECK(cudaStreamSynchronize(b->raw_stream));
    for (size_t i = 0; i < r->pages; i++) {
        CU_CHECK(vmm.unmap(r->base + i * PAGE, PAGE));
        CU_CHECK(vmm.release(r->h[i]));
    }
    return bench_now_ns() - t0;
}

static void raw_pages_free(raw_pages *r) {
    CU_CHECK(vmm.address_free(r->base, r->pages * PAGE));
    free(r->h);
}
#endif

/* ---- 1. backup and restore bandwidth -------------------------------------------- */

typedef struct bandwidth_row {
    size_t bytes;
    double d2h_ours_ns, d2h_raw_ns, d2h_ratio, d2h_total_ratio; /* ratios: bandwidth ours / raw */
    double h2d_ours_ns, h2d_raw_ns, h2d_ratio, h2d_total_ratio;
} bandwidth_row;

static bandwidth_row measure_bandwidth(bench *b, size_t bytes) {
    double keep[MAX_ROUNDS], discard[MAX_ROUNDS], restore[MAX_ROUNDS], remap[MAX_ROUNDS];
    double d2h[MAX_ROUNDS], h2d[MAX_ROUNDS], copy_out[MAX_ROUNDS], copy_in[MAX_ROUNDS];
    double r_out[MAX_ROUNDS], r_in[MAX_ROUNDS], r_out_total[MAX_ROUNDS], r_in_total[MAX_ROUNDS];
    raw_host_buffer(b, bytes);
    void *raw_dev = raw_device_buffer(b, bytes);
    pool_setup ps = setup_pool(b, 0, bytes);
    /* Untimed: the pool's host buffer is allocated by its first suspend. */
    BENCH_CHECK(cpool_pool_suspend(ps.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    BENCH_CHECK(cpool_pool_resume(ps.pool));
    raw_copy(b, raw_dev, bytes, true);
    raw_copy(b, raw_dev, bytes, false);
    for (int r = 0; r < b->rounds; r++) {
        if (r % 2) {
            d2h[r] = raw_copy(b, raw_dev, bytes, true);
            h2d[r] = raw_copy(b, raw_dev, bytes, false);
        }
        TIME_NS(keep[r], cpool_pool_suspend(ps.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
        TIME_NS(restore[r], cpool_pool_resume(ps.pool));
        TIME_NS(discard[r], cpool_pool_suspend(ps.pool, CPOOL_SUSPEND_DISCARD));
        TIME_NS(remap[r], cpool_pool_resume(ps.pool));
        if (r % 2 == 0) {
            d2h[r] = raw_copy(b, raw_dev, bytes, true);
            h2d[r] = raw_copy(b, raw_dev, bytes, false);
        }
        /* A difference under 1 us is noise: read it as 1 us. */
        copy_out[r] = keep[r] - discard[r] > 1e3 ? keep[r] - discard[r] : 1e3;
        copy_in[r] = restore[r] - remap[r] > 1e3 ? restore[r] - remap[r] : 1e3;
        r_out[r] = d2h[r] / copy_out[r];
        r_in[r] = h2d[r] / copy_in[r];
        r_out_total[r] = d2h[r] / keep[r];
        r_in_total[r] = h2d[r] / restore[r];
    }
    teardown_pool(b, &ps);
    raw_device_buffer_free(b, raw_dev);
    int n = b->rounds;
    return (bandwidth_row){bytes,
                           bench_median(copy_out, n),
                           bench_median(d2h, n),
                           bench_median(r_out, n),
                           bench_median(r_out_total, n),
                           bench_median(copy_in, n),
                           bench_median(h2d, n),
                           bench_median(r_in, n),
                           bench_median(r_in_total, n)};
}

/* ---- 2. and 3. a pool of graph pages and live blocks ------------------------------ */

typedef struct pool_row {
    size_t graph_bytes, live_bytes;
    double suspend_ns, resume_ns, raw_suspend_ns, raw_resume_ns, ratio; /* ratio: ours / raw, both calls */
    double reserved_before, free_gain;                                  /* 3: bytes */
    bool intact;
} pool_row;

static pool_row measure_pool(bench *b, size_t graph_bytes, size_t live_bytes) {
    double sus[MAX_ROUNDS], res[MAX_ROUNDS], raw_sus[MAX_ROUNDS], raw_res[MAX_ROUNDS], ratio[MAX_ROUNDS];
    pool_row row = {graph_bytes, live_bytes, 0, 0, 0, 0, 0, 0, 0, false};
    raw_host_buffer(b, live_bytes);
    pool_setup ps = setup_pool(b, graph_bytes, live_bytes);
#ifdef CPOOL_HAVE_CUDA
    raw_pages raw;
    if (b->raw_pages) raw = raw_pages_reserve(b, graph_bytes + live_bytes, live_bytes);
#endif
    /* The untimed round: the memory given back, and the host buffers. */
    row.reserved_before = (double)reserved_of(ps.pool);
    double free_before = device_free_bytes(b);
    BENCH_CHECK(cpool_pool_suspend(ps.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    /* The host backend has no cudaMemGetInfo: what the pool says it gave. */
    row.free_gain = b->cuda ? device_free_bytes(b) - free_before : row.reserved_before - (double)reserved_of(ps.pool);
#ifdef CPOOL_HAVE_CUDA
    if (b->raw_pages) {
        raw_pages_resume(b, &raw);
        raw_pages_suspend(b, &raw);
    }
#endif
    BENCH_CHECK(cpool_pool_resume(ps.pool));
    for (int r = 0; r < b->rounds; r++) {
        /* Ours gives the memory back, raw takes it and gives it back, ours
         * takes it again: one of them holds it at a time. */
        TIME_NS(sus[r], cpool_pool_suspend(ps.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
        raw_res[r] = raw_sus[r] = 0;
#ifdef CPOOL_HAVE_CUDA
        if (b->raw_pages) {
            raw_res[r] = raw_pages_resume(b, &raw);
            raw_sus[r] = raw_pages_suspend(b, &raw);
        }
#endif
        TIME_NS(res[r], cpool_pool_resume(ps.pool));
        ratio[r] = b->raw_pages ? (sus[r] + res[r]) / (raw_sus[r] + raw_res[r]) : 0;
    }
    row.intact = live_bytes_intact(b, &ps);
#ifdef CPOOL_HAVE_CUDA
    if (b->raw_pages) raw_pages_free(&raw);
#endif
    teardown_pool(b, &ps);
    int n = b->rounds;
    row.suspend_ns = bench_median(sus, n);
    row.resume_ns = bench_median(res, n);
    row.raw_suspend_ns = bench_median(raw_sus, n);
    row.raw_resume_ns = bench_median(raw_res, n);
    row.ratio = bench_median(ratio, n);
    return row;
}

/* ---- 4. resume against capturing the graphs anew ----------------------------------- */

typedef struct tick_graph {
    cpool_pool *pool;
    size_t scratch;
    tick_step step;
} tick_graph;

/* A graph's capture: a scratch from the pool, the kernels on it, freed. */
static cpool_status tick_graph_body(cpool_stream *s, void *ctx) {
    tick_graph *tg = ctx;
    cpool_status rc = cpool_alloc(tg->pool, tg->scratch, s, &tg->step.x);
    if (rc == CPOOL_OK) rc = cpool_memset_async(s, tg->step.x, 0, 32 * sizeof(float));
    if (rc == CPOOL_OK) rc = tick_step_enqueue(s, &tg->step);
    if (rc == CPOOL_OK) rc = cpool_free(tg->pool, tg->step.x, s);
    return rc;
}

static void capture_all(const bench *b, tick_graph *tg, cpool_graph **graphs, int count) {
    for (int i = 0; i < count; i++)
        BENCH_CHECK(cpool_capture(b->s, tg->pool, CPOOL_CAPTURE_GLOBAL, tick_graph_body, tg, &graphs[i]));
}

static double launch_all_ns(const bench *b, cpool_graph **graphs, int count) {
    double t0 = bench_now_ns();
    for (int i = 0; i < count; i++) BENCH_CHECK(cpool_graph_launch(graphs[i], b->s));
    BENCH_CHECK(cpool_stream_synchronize(b->s));
    return bench_now_ns() - t0;
}

typedef struct recapture_row {
    int graphs, kernels;
    double resume_ns, capture_ns, ratio;                     /* ratio: capture / resume */
    double resume_launch_ns, capture_launch_ns, launch_ratio; /* with the first launches */
} recapture_row;

static recapture_row measure_recapture(const bench *b, int count, int kernels) {
    double res[MAX_ROUNDS], cap[MAX_ROUNDS], ratio[MAX_ROUNDS];
    double res_l[MAX_ROUNDS], cap_l[MAX_ROUNDS], ratio_l[MAX_ROUNDS];
    cpool_graph **graphs = calloc((size_t)count, sizeof *graphs);
    if (!graphs) exit(1);
    tick_graph tg = {NULL, b->smoke ? 64 << 10 : PAGE, {kernels, b->cuda, NULL}};
#ifndef CPOOL_HAVE_NVCC
    tg.step.cuda = false; /* no kernels built: host tasks, on CUDA too */
#endif
    BENCH_CHECK(cpool_pool_create(b->dev, NULL, &tg.pool));
    capture_all(b, &tg, graphs, count);
    launch_all_ns(b, graphs, count);
    for (int r = 0; r < b->rounds; r++) {
        /* Suspend and resume. */
        BENCH_CHECK(cpool_pool_suspend(tg.pool, CPOOL_SUSPEND_DISCARD));
        TIME_NS(res[r], cpool_pool_resume(tg.pool));
        res_l[r] = res[r] + launch_all_ns(b, graphs, count);
        /* Release and trim, then capture anew. */
        for (int i = 0; i < count; i++) cpool_graph_release(graphs[i]);
        BENCH_CHECK(cpool_pool_trim(tg.pool));
        double t0 = bench_now_ns();
        capture_all(b, &tg, graphs, count);
        cap[r] = bench_now_ns() - t0;
        cap_l[r] = cap[r] + launch_all_ns(b, graphs, count);
        ratio[r] = cap[r] / res[r];
        ratio_l[r] = cap_l[r] / res_l[r];
    }
    for (int i = 0; i < count; i++) cpool_graph_release(graphs[i]);
    cpool_pool_release(tg.pool);
    cpool_wait_deferred();
    free(graphs);
    int n = b->rounds;
    return (recapture_row){count,
                           kernels,
                           bench_median(res, n),
                           bench_median(cap, n),
                           bench_median(ratio, n),
                           bench_median(res_l, n),
                           bench_median(cap_l, n),
                           bench_median(ratio_l, n)};
}

/* ---- main ---------------------------------------------------------------------------- */

static double gbs(size_t bytes, double ns) { return (double)bytes / ns; }

static void usage(void) {
    fprintf(stderr, "usage: suspend_bench [--smoke] [--max-gib G] [--rounds R (1 to %d)]\n", MAX_ROUNDS);
    exit(2);
}

int main(int argc, char **argv) {
    bench b;
    memset(&b, 0, sizeof b);
    b.smoke = bench_smoke(&argc, argv);
    b.rounds = b.smoke ? 2 : 5;
    double max_gib = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--max-gib") == 0 && i + 1 < argc && (max_gib = atof(argv[++i])) > 0) continue;
        if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc && (b.rounds = atoi(argv[++i])) >= 1 &&
            b.rounds <= MAX_ROUNDS)
            continue;
        usage();
    }
    bench_open(&b.dev, &b.s, NULL);
    b.cuda = cpool_device_backend(b.dev) == CPOOL_BACKEND_CUDA;
    const char *backend = b.cuda ? "cuda" : "host";
#ifdef CPOOL_HAVE_CUDA
    if (b.cuda) {
        CUDA_CHECK(cudaGetDevice(&b.ordinal));
        CUDA_CHECK(cudaFree(NULL)); /* the primary context, current for the driver's calls */
        CUDA_CHECK(cudaStreamCreateWithFlags(&b.raw_stream, cudaStreamNonBlocking));
        b.raw_pages = vmm_load();
        if (!b.raw_pages) printf("the runtime gives no driver entry points (CUDA 12.5 or later does): no raw pages\n");
    }
#endif
    if (max_gib > 0)
        b.max_bytes = max_gib * (double)GIB;
    else
        b.max_bytes = b.cuda ? 0.9 * device_free_bytes(&b) : 2.0 * (double)GIB;

    /* Sizes: bytes of live blocks for 1; {graph, live} for 2. */
    size_t bw_sizes[2] = {1 * GIB, 4 * GIB};
    size_t pool_sizes[3][2] = {{1 * GIB, 1 * GIB}, {8 * GIB, 2 * GIB}, {32 * GIB, 4 * GIB}};
    int graphs = 100, kernels = 300;
    if (b.smoke) {
        bw_sizes[0] = 4 * MIB, bw_sizes[1] = 8 * MIB;
        size_t small[3][2] = {{4 * MIB, 2 * MIB}, {8 * MIB, 4 * MIB}, {16 * MIB, 4 * MIB}};
        memcpy(pool_sizes, small, sizeof small);
        graphs = 4, kernels = 8;
    }
    printf("suspend_bench: backend %s, %d timed rounds, sizes up to %.1f GiB%s\n", backend, b.rounds,
           b.max_bytes / (double)GIB, b.smoke ? " (smoke run: the figures mean nothing)" : "");

    printf("\n1. backup and restore bandwidth: suspend(KEEP_CONTENTS) / resume against %s of the same "
           "bytes\n   ours: the copy isolated as KEEP minus DISCARD of the same pool; total: the whole call; "
           "ratios: bandwidth ours / raw (goal >= 0.9)\n",
           b.cuda ? "a pinned cudaMemcpyAsync" : "a memcpy");
    printf("%9s | %9s %9s %8s %8s | %9s %9s %8s %8s\n", "live GiB", "D2H GB/s", "raw GB/s", "ratio", "total",
           "H2D GB/s", "raw GB/s", "ratio", "total");
    for (int i = 0; i < 2; i++) {
        if (2.0 * (double)bw_sizes[i] > b.max_bytes) {
            printf("%9.3f | skipped: ours and raw need %.1f GiB (--max-gib)\n", (double)bw_sizes[i] / GIB,
                   2.0 * (double)bw_sizes[i] / GIB);
            continue;
        }
        bandwidth_row w = measure_bandwidth(&b, bw_sizes[i]);
        printf("%9.3f | %9.2f %9.2f %7.3fx %7.3fx | %9.2f %9.2f %7.3fx %7.3fx\n", (double)w.bytes / GIB,
               gbs(w.bytes, w.d2h_ours_ns), gbs(w.bytes, w.d2h_raw_ns), w.d2h_ratio, w.d2h_total_ratio,
               gbs(w.bytes, w.h2d_ours_ns), gbs(w.bytes, w.h2d_raw_ns), w.h2d_ratio, w.h2d_total_ratio);
        printf("csv,suspend_bw,%s,%zu,%.3f,%.3f,%.4f,%.4f,%.3f,%.3f,%.4f,%.4f\n", backend, w.bytes,
               gbs(w.bytes, w.d2h_ours_ns), gbs(w.bytes, w.d2h_raw_ns), w.d2h_ratio, w.d2h_total_ratio,
               gbs(w.bytes, w.h2d_ours_ns), gbs(w.bytes, w.h2d_raw_ns), w.h2d_ratio, w.h2d_total_ratio);
    }

    printf("\n2. suspend(KEEP_CONTENTS) + resume of a pool with graph pages and live blocks, against raw "
           "cuMem* calls on 2 MiB pages and pinned copies (ms; ratio ours / raw, goal <= 1.2)\n"
           "3. device memory given back by the suspend: cudaMemGetInfo's gain against reserved_bytes before "
           "(goal: all of it; host backend: reserved_bytes before less after)\n");
    printf("%9s %9s | %9s %9s %9s %9s %8s | %12s %12s %7s | %s\n", "graph GiB", "live GiB", "suspend", "resume",
           "raw sus", "raw res", "ratio", "reserved MiB", "freed MiB", "freed", "live bytes");
    for (int i = 0; i < 3; i++) {
        size_t g = pool_sizes[i][0], l = pool_sizes[i][1];
        if ((double)(g + l) > b.max_bytes) {
            printf("%9.3f %9.3f | skipped: it needs %.1f GiB (--max-gib)\n", (double)g / GIB, (double)l / GIB,
                   (double)(g + l) / GIB);
            continue;
        }
        pool_row p = measure_pool(&b, g, l);
        char raw_sus[16] = "n/a", raw_res[16] = "n/a", ratio[16] = "n/a";
        if (b.raw_pages) {
            snprintf(raw_sus, sizeof raw_sus, "%.2f", p.raw_suspend_ns / 1e6);
            snprintf(raw_res, sizeof raw_res, "%.2f", p.raw_resume_ns / 1e6);
            snprintf(ratio, sizeof ratio, "%.3fx", p.ratio);
        }
        printf("%9.3f %9.3f | %9.2f %9.2f %9s %9s %8s | %12.1f %12.1f %6.3fx | %s\n", (double)g / GIB,
               (double)l / GIB, p.suspend_ns / 1e6, p.resume_ns / 1e6, raw_sus, raw_res, ratio,
               p.reserved_before / MIB, p.free_gain / MIB, p.free_gain / p.reserved_before, p.intact ? "restored" : "WRONG");
        printf("csv,suspend_pool,%s,%zu,%zu,%.1f,%.1f,%.1f,%.1f,%.4f,%.0f,%.0f\n", backend, g, l, p.suspend_ns / 1e3,
               p.resume_ns / 1e3, p.raw_suspend_ns / 1e3, p.raw_resume_ns / 1e3, p.ratio, p.reserved_before,
               p.free_gain);
        if (!p.intact) {
            fprintf(stderr, "suspend_bench: the live bytes were not restored by the resume\n");
            return 1;
        }
    }

    printf("\n4. resume against capturing and instantiating the same graphs again: %d graphs of %d %s each "
           "(ms; ratio capture / resume, goal >= 10)\n",
           graphs, kernels, b.cuda ? "kernels" : "host tasks");
    recapture_row rc = measure_recapture(&b, graphs, kernels);
    printf("%10s %10s %8s | with the first launch of every graph: %10s %10s %8s\n", "resume", "capture", "ratio",
           "resume", "capture", "ratio");
    printf("%10.3f %10.3f %7.2fx | %48.3f %10.3f %7.2fx\n", rc.resume_ns / 1e6, rc.capture_ns / 1e6, rc.ratio,
           rc.resume_launch_ns / 1e6, rc.capture_launch_ns / 1e6, rc.launch_ratio);
    printf("csv,suspend_recapture,%s,%d,%d,%.1f,%.1f,%.4f,%.1f,%.1f,%.4f\n", backend, rc.graphs, rc.kernels,
           rc.resume_ns / 1e3, rc.capture_ns / 1e3, rc.ratio, rc.resume_launch_ns / 1e3, rc.capture_launch_ns / 1e3,
           rc.launch_ratio);

    raw_host_buffer_free(&b);
#ifdef CPOOL_HAVE_CUDA
    if (b.cuda) CUDA_CHECK(cudaStreamDestroy(b.raw_stream));
#endif
    bench_close(b.dev, b.s, NULL);
    return 0;
}
