/* CUDA only: a graph released while its kernel still runs frees nothing
 * early. The kernel keeps checking memory the graph uses (a recorded buffer,
 * a pool allocation and graph scratch) for ~200 ms after its launch, while
 * the host releases the graph and the pool at once (the graph's release
 * returns at once, the pool's last one waits). Every drop poisons its
 * buffer before cudaFree, and a debug build poisons pool segments before
 * giving them back, so an early free would show up as a wrong value in the
 * running kernel. Skips visibly without a GPU. */
#include <cuda_runtime.h>

#include "check.h"
#include "helpers.h"

static cudaStream_t native(cpool_stream *s) { return (cudaStream_t)cpool_stream_native(s); }

__device__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Writes `pattern` to scratch, then for `ns` keeps re-reading the three
 * buffers; counts every value that is not the expected one. */
__global__ void k_watch(const volatile unsigned *recorded, const volatile unsigned *pooled, volatile unsigned *scratch,
                        int n, unsigned pattern, unsigned long long ns, int *bad, int *done) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) scratch[i] = pattern;
    __syncthreads();
    unsigned long long t0 = now_ns();
    int seen = 0;
    while (now_ns() - t0 < ns) {
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            seen += (recorded[i] != pattern) + (pooled[i] != pattern) + (scratch[i] != pattern);
    }
    if (seen) atomicAdd(bad, seen);
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence_system();
        atomicAdd(done, 1);
    }
}

__global__ void k_set(unsigned *p, int n, unsigned v) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) p[i] = v;
}

static int poisoned_frees;

/* The drop: poison the buffer, then free it. */
static void poison_and_free(void *p) {
    if (cudaMemset(p, 0xEE, 4096 * sizeof(unsigned)) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess &&
        cudaFree(p) == cudaSuccess)
        ainc(&poisoned_frees);
}

typedef struct watch_job {
    cpool_pool *pool;
    unsigned *recorded, *pooled;
    int *bad, *done;
} watch_job;

static cpool_status watch_body(cpool_stream *s, void *ctx) {
    watch_job *j = (watch_job *)ctx;
    void *scratch = NULL;
    cpool_status st = cpool_alloc(j->pool, 4096 * sizeof(unsigned), s, &scratch);
    if (st != CPOOL_OK) return st;
    k_watch<<<1, 256, 0, native(s)>>>(j->recorded, j->pooled, (unsigned *)scratch, 4096, 0x5a5a5a5au,
                                      200ull * 1000 * 1000, j->bad, j->done);
    if (cudaGetLastError() != cudaSuccess) return CPOOL_ERR_BACKEND;
    return cpool_free(j->pool, scratch, s);
}

static void release_while_running(cpool_device *dev, bool graph_last) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    int *flags = NULL; /* mapped host memory: [0] bad, [1] done */
    void *pooled = NULL, *recorded = NULL;
    poisoned_frees = 0;
    REQUIRE(cudaHostAlloc((void **)&flags, 2 * sizeof(int), cudaHostAllocMapped) == cudaSuccess);
    flags[0] = flags[1] = 0;
    int *dflags = NULL;
    REQUIRE(cudaHostGetDevicePointer((void **)&dflags, flags, 0) == cudaSuccess);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE(cudaMalloc(&recorded, 4096 * sizeof(unsigned)) == cudaSuccess);
    REQUIRE_OK(cpool_pool_record(pool, recorded, poison_and_free, NULL));
    REQUIRE_OK(cpool_alloc(pool, 4096 * sizeof(unsigned), s, &pooled));
    k_set<<<1, 256, 0, native(s)>>>((unsigned *)recorded, 4096, 0x5a5a5a5au);
    k_set<<<1, 256, 0, native(s)>>>((unsigned *)pooled, 4096, 0x5a5a5a5au);
    watch_job job = {pool, (unsigned *)recorded, (unsigned *)pooled, dflags, dflags + 1};
    REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, watch_body, &job, &g));
    CHECK_OK(cpool_graph_launch(g, s));
    /* Release everything while the kernel runs: the pooled block is freed
     * too, as a user would before dropping the pool. */
    CHECK_OK(cpool_free(pool, pooled, s));
    if (graph_last) {
        cpool_pool_release(pool);
        CHECK_EQ(aload(&poisoned_frees), 0); /* the graph still holds the pool */
        cpool_graph_release(g); /* last reference: returns at once, the library's thread waits, then drops */
        CHECK_EQ(aload(&poisoned_frees), 0);
        CHECK_EQ(__atomic_load_n(&flags[1], __ATOMIC_SEQ_CST), 0); /* it returned while the kernel ran */
        cpool_wait_deferred();
    } else {
        cpool_graph_release(g);
        CHECK_EQ(aload(&poisoned_frees), 0); /* the user still holds the pool */
        cpool_pool_release(pool);            /* last reference: waits, then drops */
    }
    CHECK_EQ(aload(&poisoned_frees), 1);
    CHECK_EQ(__atomic_load_n(&flags[1], __ATOMIC_SEQ_CST), 1); /* the kernel had finished */
    CHECK_EQ(__atomic_load_n(&flags[0], __ATOMIC_SEQ_CST), 0); /* and never saw poison */
    cpool_stream_destroy(s);
    cudaFreeHost(flags);
}

static void graph_released_last_while_running(cpool_device *dev) { release_while_running(dev, true); }
static void pool_released_last_while_running(cpool_device *dev) { release_while_running(dev, false); }

static const check_case cases[] = {
    CHECK_CASE(graph_released_last_while_running),
    CHECK_CASE(pool_released_last_while_running),
};
CHECK_MAIN(cases, CHECK_ON_CUDA)
