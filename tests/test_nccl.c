/* NCCL in captured graphs, on a CUDA device with real NCCL (built where
 * NCCL's header and library are found; skipped without a GPU): a
 * single-rank communicator, an all-reduce on buffers from a registered pool
 * captured into a graph and replayed with new inputs, results checked
 * against the inputs (one rank: the sum is the input); the registrations
 * live as long as the pool's memory, also through a graph that outlives the
 * caller's reference; such a pool cannot be suspended. */
#include "check.h" /* first: its feature macro */
#include "helpers.h"

#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "capturepool_nccl.h"

#define N (1 << 20)

static int nccl_ok(ncclResult_t r, const char *what) {
    if (r == ncclSuccess) return 1;
    check_report_(__FILE__, __LINE__, "%s: %s", what, ncclGetErrorString(r));
    return 0;
}

static void allreduce_in_a_graph(cpool_device *dev) {
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    int ordinal = 0;
    REQUIRE(cudaGetDevice(&ordinal) == cudaSuccess);
    REQUIRE(nccl_ok(ncclGetUniqueId(&id), "ncclGetUniqueId"));
    REQUIRE(nccl_ok(ncclCommInitRank(&comm, 1, id, 0), "ncclCommInitRank"));
    cpool_stream *s;
    cpool_pool *pool;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_nccl_pool_create(dev, comm, NULL, &pool));
    float *send = NULL, *recv = NULL;
    REQUIRE_OK(cpool_alloc(pool, N * sizeof(float), s, (void **)&send));
    REQUIRE_OK(cpool_alloc(pool, N * sizeof(float), s, (void **)&recv));
    CHECK_GE(cpool_nccl_registration_count(pool), 1);
    /* Its memory is registered with NCCL, which keeps using the
     * addresses: it cannot be given back, and nothing changes. */
    CHECK_EQ(cpool_pool_suspend(pool, CPOOL_SUSPEND_KEEP_CONTENTS), CPOOL_ERR_UNSUPPORTED);
    CHECK(strstr(cpool_last_error(), "cpool_pool_suspend") && strstr(cpool_last_error(), "NCCL"));
    CHECK(!cpool_pool_is_suspended(pool));
    cudaStream_t native = (cudaStream_t)cpool_stream_native(s);

    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK(nccl_ok(ncclAllReduce(send, recv, N, ncclFloat, ncclSum, comm, native), "ncclAllReduce"));
    cpool_graph *g = NULL;
    REQUIRE_OK(cpool_capture_end(s, &g));

    static float in[N], out[N];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) in[i] = (float)((i * 7 + round * 13) % 101) * 0.5f;
        CHECK_OK(cpool_memcpy_async(s, send, in, sizeof in));
        CHECK_OK(cpool_graph_launch(g, s));
        CHECK_OK(cpool_memcpy_async(s, out, recv, sizeof out));
        CHECK_OK(cpool_stream_synchronize(s));
        int bad = 0;
        for (int i = 0; i < N && bad < 5; i++)
            if (out[i] != in[i]) {
                check_report_(__FILE__, __LINE__, "round %d: recv[%d] = %g, want %g", round, i, out[i], in[i]);
                bad++;
            }
    }
    CHECK_OK(cpool_free(pool, send, s));
    CHECK_OK(cpool_free(pool, recv, s));
    size_t held = cpool_nccl_registration_count(pool);
    cpool_pool_release(pool); /* the graph holds it, and its registrations */
    CHECK_EQ(cpool_nccl_registration_count(cpool_graph_pool(g)), held);
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_graph_release(g);
    cpool_wait_deferred();
    cpool_stream_destroy(s);
    CHECK(nccl_ok(ncclCommDestroy(comm), "ncclCommDestroy"));
}

static const check_case cases[] = {
    CHECK_CASE(allreduce_in_a_graph),
};

CHECK_MAIN(cases, CHECK_ON_CUDA)
