/*
 * Graph update against re-capture, measured side by side in one run: a graph
 * of 100 and of 1000 small kernels (host tasks on the host backend) whose
 * only change is an argument (the buffer they work on, alternating between
 * two). "update" is cpool_graph_update (capture again + cudaGraphExecUpdate
 * in place); "anew" is releasing the graph and capturing and instantiating
 * it again with cpool_capture. Medians over repeats, in us.
 * Usage: update_bench
 */
#include <stdlib.h>

#include "bench_util.h"
#include "capturepool.h"
#ifdef CPOOL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#include "tick_step.h"

enum { REPEATS = 21 };

int main(void) {
    cpool_device *dev;
    cpool_stream *s;
    cpool_pool *pool;
    bench_open(&dev, &s, &pool);
    tick_step st = {0};
#ifdef CPOOL_HAVE_NVCC
    st.cuda = cpool_device_backend(dev) == CPOOL_BACKEND_CUDA;
#endif
    void *bufs[2];
    for (int i = 0; i < 2; i++) {
        BENCH_CHECK(cpool_alloc(pool, 32 * sizeof(float), s, &bufs[i]));
        BENCH_CHECK(cpool_memset_async(s, bufs[i], 0, 32 * sizeof(float)));
    }
    const char *backend = cpool_device_backend(dev) == CPOOL_BACKEND_CUDA ? "cuda" : "host";
    printf("update_bench: backend %s; a graph whose kernels changed only an argument; us, medians of %d\n", backend,
           REPEATS);
    printf("%7s | %12s %12s %10s\n", "kernels", "update", "anew", "anew/update");
    const int sizes[] = {100, 1000};
    for (int k = 0; k < 2; k++) {
        st.kernels = sizes[k];
        st.x = bufs[0];
        cpool_graph *g;
        BENCH_CHECK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, tick_step_enqueue, &st, &g));
        BENCH_CHECK(cpool_graph_launch(g, s));
        double upd[REPEATS], anew[REPEATS];
        for (int r = 0; r < REPEATS; r++) {
            st.x = bufs[(r + 1) % 2];
            double t0 = bench_now_ns();
            BENCH_CHECK(cpool_graph_update(g, s, tick_step_enqueue, &st));
            upd[r] = (bench_now_ns() - t0) / 1e3;
            BENCH_CHECK(cpool_graph_launch(g, s));
            st.x = bufs[r % 2];
            t0 = bench_now_ns();
            cpool_graph_release(g);
            BENCH_CHECK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, tick_step_enqueue, &st, &g));
            anew[r] = (bench_now_ns() - t0) / 1e3;
            BENCH_CHECK(cpool_graph_launch(g, s));
            BENCH_CHECK(cpool_stream_synchronize(s));
        }
        double u = bench_median(upd, REPEATS), a = bench_median(anew, REPEATS);
        printf("%7d | %12.1f %12.1f %9.2fx\n", sizes[k], u, a, a / u);
        printf("csv,update,%s,%d,%.3f,%.3f\n", backend, sizes[k], u, a);
#ifdef CPOOL_HAVE_CUDA
        if (st.cuda) {
            /* Where the time goes, raw CUDA: capturing the kernels, then
             * instantiating, updating in place, destroying. */
            double cap[REPEATS], inst[REPEATS], upd_raw[REPEATS], destroy[REPEATS];
            cudaStream_t cs = (cudaStream_t)cpool_stream_native(s);
            cudaGraphExec_t exec = (cudaGraphExec_t)cpool_graph_native(g);
            for (int r = 0; r < REPEATS; r++) {
                cudaGraph_t graph;
                cudaGraphExec_t fresh;
                st.x = bufs[r % 2];
                double t0 = bench_now_ns();
                BENCH_CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
                BENCH_CHECK(tick_step_enqueue(s, &st));
                BENCH_CHECK(cudaStreamEndCapture(cs, &graph));
                double t1 = bench_now_ns();
                BENCH_CHECK(cudaGraphInstantiate(&fresh, graph, 0));
                double t2 = bench_now_ns();
                cudaGraphExecUpdateResultInfo info;
                BENCH_CHECK(cudaGraphExecUpdate(exec, graph, &info));
                double t3 = bench_now_ns();
                BENCH_CHECK(cudaGraphExecDestroy(fresh));
                double t4 = bench_now_ns();
                cudaGraphDestroy(graph);
                cap[r] = (t1 - t0) / 1e3;
                inst[r] = (t2 - t1) / 1e3;
                upd_raw[r] = (t3 - t2) / 1e3;
                destroy[r] = (t4 - t3) / 1e3;
            }
            printf("        raw parts: capture %.1f, instantiate %.1f, cudaGraphExecUpdate %.1f, exec destroy %.1f\n",
                   bench_median(cap, REPEATS), bench_median(inst, REPEATS), bench_median(upd_raw, REPEATS),
                   bench_median(destroy, REPEATS));
        }
#endif
        cpool_graph_release(g);
    }
    BENCH_CHECK(cpool_stream_synchronize(s));
    for (int i = 0; i < 2; i++) BENCH_CHECK(cpool_free(pool, bufs[i], s));
    bench_close(dev, s, pool);
    return 0;
}
