/*
 * Replay and capture overhead, measured side by side in one run, for graphs
 * of 1, 10, 100 and 1000 small kernels (host work on the host backend):
 * - eager: the same kernels launched one by one (CPU and device time a step);
 * - device time per replay: cpool_graph_launch vs cudaGraphLaunch of the
 *   same executable (cpool_graph_native), timed with events;
 * - CPU cost of one launch call, ours vs raw, in alternating batches;
 * - capture + end (instantiation included) vs raw
 *   cudaStreamBeginCapture / EndCapture / GraphInstantiate, in pairs whose
 *   order flips; on CUDA also raw against itself (the run's noise floor),
 *   raw after an event record made the way capturepool's fence is (what
 *   the fence costs), raw through the driver's entry points that
 *   capturepool calls against the runtime's calls (capture and launch),
 *   and a one-kernel capture in phases.
 * Launch and device figures are medians over repeats of a batch; capture
 * figures are medians of single captures; launch and capture ratios are
 * medians of the ratios of pairs taken side by side. Besides the table it
 * prints "csv,..." lines for scripts/bench_report.py.
 * Usage: launch_bench [max-kernels]
 */
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "capturepool.h"
#ifdef CPOOL_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda_driver.h" /* the library's own table, from src/ */
#endif
#include "tick_step.h"

enum { REPEATS = 15, LAUNCH_REPEATS = 45 };

typedef struct row {
    int kernels;
    double eager_cpu_us, eager_dev_us;
    double dev_ours_us, dev_raw_us;
    double launch_ours_us, launch_raw_us, launch_ratio;    /* ratio: median of per-pair ratios */
    double capture_ours_us, capture_raw_us, capture_ratio; /* likewise; 0 without raw CUDA */
} row;

/* What a timed capture runs: capturepool's; raw CUDA's through the runtime;
 * raw through the driver's entry points, as capturepool makes these calls;
 * or raw through the runtime after an event recorded on the stream the way
 * capturepool's capture fence is (what the fence adds). */
typedef enum capture_kind { CAPTURE_OURS, CAPTURE_RAW, CAPTURE_RAW_DRIVER, CAPTURE_RAW_AFTER_RECORD } capture_kind;

#ifdef CPOOL_HAVE_CUDA
static cudaEvent_t record_event; /* for CAPTURE_RAW_AFTER_RECORD */

/* The driver's entry points that capturepool calls in place of the runtime
 * on the capture and launch paths, loaded as capturepool loads them; NULL
 * where the runtime gives none (before CUDA 12.5), and capturepool then
 * calls the runtime. */
static cpool__driver_calls driver;

static bool have_driver_entries(void) {
    return driver.event_record && driver.begin_capture && driver.end_capture && driver.instantiate &&
           driver.graph_launch;
}

/* The capture fence's record as capturepool makes it. */
static cudaError_t fence_record(cudaEvent_t event, cudaStream_t stream) {
    return driver.event_record ? (cudaError_t)driver.event_record(event, stream) : cudaEventRecord(event, stream);
}
#endif

/* One capture + end with instantiation, timed (ns), on stream s. The graph
 * is destroyed untimed. Without CUDA every kind is capturepool's. */
static double capture_once(capture_kind kind, cpool_stream *s, cpool_pool *pool, tick_step *st) {
    double t0 = bench_now_ns(), t = 0;
    if (kind == CAPTURE_OURS || !st->cuda) {
        cpool_graph *g;
        BENCH_CHECK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, tick_step_enqueue, st, &g));
        t = bench_now_ns() - t0;
        cpool_graph_release(g);
        return t;
    }
#ifdef CPOOL_HAVE_CUDA
    cudaStream_t cs = (cudaStream_t)cpool_stream_native(s);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    if (kind == CAPTURE_RAW_DRIVER) {
        BENCH_CHECK(driver.begin_capture(cs, cudaStreamCaptureModeGlobal));
        BENCH_CHECK(tick_step_enqueue(s, st));
        BENCH_CHECK(driver.end_capture(cs, &graph));
        BENCH_CHECK(driver.instantiate(&exec, graph, 0));
    } else {
        if (kind == CAPTURE_RAW_AFTER_RECORD) BENCH_CHECK(fence_record(record_event, cs));
        BENCH_CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
        BENCH_CHECK(tick_step_enqueue(s, st));
        BENCH_CHECK(cudaStreamEndCapture(cs, &graph));
        BENCH_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    }
    t = bench_now_ns() - t0;
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
#endif
    return t;
}

/* The median of a[i] / b[i]: a ratio of two runs taken side by side, which
 * a host whose speed changes between them leaves alone. Measured on these
 * machines, a host can run 1.9x slower for a while; when it changes within
 * a measurement, the median of each side can fall on either side of the
 * change, apart from the other's (once 1.40x for raw against capturepool
 * at 100 kernels, where the ratio of pairs gave 1.01x to 1.02x). */
static double median_ratio(const double *a, const double *b, int n) {
    double *r = malloc((size_t)n * sizeof *r);
    if (!r) {
        fprintf(stderr, "launch_bench: out of memory\n");
        exit(1);
    }
    for (int i = 0; i < n; i++) r[i] = a[i] / b[i];
    double m = bench_median(r, n);
    free(r);
    return m;
}

/* Medians (us) of single captures of kinds a and b, REPEATS x captures of
 * each, and the median ratio of a pair's a to its b, taken in pairs whose
 * order flips every time (a b b a a b ...):
 * - of two captures back to back, the first was measured to pay up to 1.35x
 *   more even when both are raw CUDA, so a fixed order would charge that to
 *   one side;
 * - a capture takes a few us and the host adds outliers of 10 us and more
 *   to some; a mean carries them, a median of single captures does not
 *   (raw against itself: within 0.5% this way, up to 5% apart with medians
 *   of per-batch means). */
static void capture_pairs(capture_kind a_kind, capture_kind b_kind, int captures, cpool_stream *s, cpool_pool *pool,
                          tick_step *st, double *a_us, double *b_us, double *ratio) {
    int n = REPEATS * captures;
    double *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    if (!a || !b) {
        fprintf(stderr, "launch_bench: out of memory\n");
        exit(1);
    }
    for (int i = 0; i < n; i++) {
        if (i % 2 == 0) {
            a[i] = capture_once(a_kind, s, pool, st) / 1e3;
            b[i] = capture_once(b_kind, s, pool, st) / 1e3;
        } else {
            b[i] = capture_once(b_kind, s, pool, st) / 1e3;
            a[i] = capture_once(a_kind, s, pool, st) / 1e3;
        }
    }
    *ratio = median_ratio(a, b, n); /* before the medians sort a and b */
    *a_us = bench_median(a, n);
    *b_us = bench_median(b, n);
    free(a);
    free(b);
}

static void measure(cpool_stream *s, cpool_pool *pool, tick_step *st, row *r) {
    double a[REPEATS], b[REPEATS];
    int launches = st->kernels >= 1000 ? 20 : st->kernels >= 100 ? 100 : 400;
    int captures = st->kernels >= 1000 ? 10 : st->kernels >= 100 ? 50 : 200;

    /* Eager: CPU time to enqueue a step, and the step's time to completion. */
    for (int rep = 0; rep < REPEATS; rep++) {
        BENCH_CHECK(cpool_stream_synchronize(s));
        double t0 = bench_now_ns();
        BENCH_CHECK(tick_step_enqueue(s, st));
        double t1 = bench_now_ns();
        BENCH_CHECK(cpool_stream_synchronize(s));
        a[rep] = (t1 - t0) / 1e3;
        b[rep] = (bench_now_ns() - t0) / 1e3;
    }
    r->eager_cpu_us = bench_median(a, REPEATS);
    r->eager_dev_us = bench_median(b, REPEATS);

    /* Capture + end, ours and raw (where there is CUDA). */
    capture_pairs(CAPTURE_OURS, CAPTURE_RAW, captures, s, pool, st, &r->capture_ours_us, &r->capture_raw_us,
                  &r->capture_ratio);
    if (!st->cuda) r->capture_raw_us = r->capture_ratio = 0;
#ifdef CPOOL_HAVE_CUDA
    cudaStream_t cs = (cudaStream_t)cpool_stream_native(s);
#endif

    /* One graph for the launch measures. */
    cpool_graph *g;
    BENCH_CHECK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, tick_step_enqueue, st, &g));
    BENCH_CHECK(cpool_graph_upload(g, s));
    BENCH_CHECK(cpool_graph_launch(g, s));
    BENCH_CHECK(cpool_stream_synchronize(s));
    void *exec = cpool_graph_native(g);
    (void)exec;

    /* CPU cost of the launch call, alternating ours and raw batches, each
     * first in every other repeat; more repeats, as a batch is short. */
    double la[LAUNCH_REPEATS], lb[LAUNCH_REPEATS];
    for (int rep = 0; rep < LAUNCH_REPEATS; rep++)
        for (int turn = 0; turn < 2; turn++) {
            bool ours_turn = (turn + rep) % 2 == 0;
            if (ours_turn) {
                double t0 = bench_now_ns();
                for (int i = 0; i < launches; i++) cpool_graph_launch(g, s);
                la[rep] = (bench_now_ns() - t0) / launches / 1e3;
                BENCH_CHECK(cpool_stream_synchronize(s));
            }
#ifdef CPOOL_HAVE_CUDA
            if (!ours_turn && st->cuda) {
                double t0 = bench_now_ns();
                for (int i = 0; i < launches; i++) cudaGraphLaunch((cudaGraphExec_t)exec, cs);
                lb[rep] = (bench_now_ns() - t0) / launches / 1e3;
                BENCH_CHECK(cudaStreamSynchronize(cs));
            }
#endif
        }
    r->launch_ratio = st->cuda ? median_ratio(la, lb, LAUNCH_REPEATS) : 0;
    r->launch_ours_us = bench_median(la, LAUNCH_REPEATS);
    r->launch_raw_us = st->cuda ? bench_median(lb, LAUNCH_REPEATS) : 0;

    /* Device time per replay: events around a batch (wall clock on host). */
    int replays = st->kernels >= 1000 ? 10 : 100;
    for (int rep = 0; rep < REPEATS; rep++) {
#ifdef CPOOL_HAVE_CUDA
        if (st->cuda) {
            cudaEvent_t e0, e1;
            float ms;
            cudaEventCreate(&e0);
            cudaEventCreate(&e1);
            cudaEventRecord(e0, cs);
            for (int i = 0; i < replays; i++) cpool_graph_launch(g, s);
            cudaEventRecord(e1, cs);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&ms, e0, e1);
            a[rep] = ms * 1e3 / replays;
            cudaEventRecord(e0, cs);
            for (int i = 0; i < replays; i++) cudaGraphLaunch((cudaGraphExec_t)exec, cs);
            cudaEventRecord(e1, cs);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&ms, e0, e1);
            b[rep] = ms * 1e3 / replays;
            cudaEventDestroy(e0);
            cudaEventDestroy(e1);
            continue;
        }
#endif
        double t0 = bench_now_ns();
        for (int i = 0; i < replays; i++) cpool_graph_launch(g, s);
        BENCH_CHECK(cpool_stream_synchronize(s));
        a[rep] = (bench_now_ns() - t0) / replays / 1e3;
    }
    r->dev_ours_us = bench_median(a, REPEATS);
    r->dev_raw_us = st->cuda ? bench_median(b, REPEATS) : 0;
    cpool_graph_release(g);
}

static void print_ratio(double ratio) {
    if (ratio > 0)
        printf(" %6.2fx", ratio);
    else
        printf(" %7s", "n/a");
}

#ifdef CPOOL_HAVE_CUDA
/* What calling the driver's entry points instead of the runtime saves raw
 * CUDA, as capturepool calls them: a one-kernel capture (single captures in
 * flipping pairs), and the CPU cost of a one-kernel graph's launch
 * (alternating batches). */
static void driver_against_runtime(cpool_stream *s, cpool_pool *pool, tick_step *st) {
    cudaStream_t cs = (cudaStream_t)cpool_stream_native(s);
    double by_driver, by_runtime, ratio;
    capture_pairs(CAPTURE_RAW_DRIVER, CAPTURE_RAW, 200, s, pool, st, &by_driver, &by_runtime, &ratio);
    printf("one-kernel raw capture+end, us: driver entry points %.3f, runtime %.3f, %.3fx\n", by_driver,
           by_runtime, ratio);
    cudaGraph_t one_graph;
    cudaGraphExec_t one_exec;
    BENCH_CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    BENCH_CHECK(tick_step_enqueue(s, st));
    BENCH_CHECK(cudaStreamEndCapture(cs, &one_graph));
    BENCH_CHECK(cudaGraphInstantiate(&one_exec, one_graph, 0));
    double by_driver_l[LAUNCH_REPEATS], by_runtime_l[LAUNCH_REPEATS];
    enum { LAUNCHES = 400 };
    for (int rep = 0; rep < LAUNCH_REPEATS; rep++)
        for (int turn = 0; turn < 2; turn++) {
            bool driver_turn = (turn + rep) % 2 == 0;
            double t0 = bench_now_ns();
            for (int i = 0; i < LAUNCHES; i++)
                if (driver_turn)
                    driver.graph_launch(one_exec, cs);
                else
                    cudaGraphLaunch(one_exec, cs);
            (driver_turn ? by_driver_l : by_runtime_l)[rep] = (bench_now_ns() - t0) / LAUNCHES / 1e3;
            BENCH_CHECK(cudaStreamSynchronize(cs));
        }
    cudaGraphExecDestroy(one_exec);
    cudaGraphDestroy(one_graph);
    ratio = median_ratio(by_driver_l, by_runtime_l, LAUNCH_REPEATS);
    by_driver = bench_median(by_driver_l, LAUNCH_REPEATS);
    by_runtime = bench_median(by_runtime_l, LAUNCH_REPEATS);
    printf("one-kernel raw graph launch CPU, us: cuGraphLaunch %.3f, cudaGraphLaunch %.3f, %.3fx\n", by_driver,
           by_runtime, ratio);
}
#endif

int main(int argc, char **argv) {
    int max_kernels = argc > 1 ? atoi(argv[1]) : 1000;
    cpool_device *dev;
    cpool_stream *s;
    cpool_pool *pool;
    bench_open(&dev, &s, &pool);
    tick_step st = {0};
#ifdef CPOOL_HAVE_NVCC
    st.cuda = cpool_device_backend(dev) == CPOOL_BACKEND_CUDA;
#endif
    void *x = NULL;
    BENCH_CHECK(cpool_alloc(pool, 32 * sizeof(float), s, &x));
    BENCH_CHECK(cpool_memset_async(s, x, 0, 32 * sizeof(float)));
    st.x = x;
#ifdef CPOOL_HAVE_CUDA
    if (st.cuda) cpool__driver_load(&driver);
#endif
    const char *backend = cpool_device_backend(dev) == CPOOL_BACKEND_CUDA ? "cuda" : "host";
    printf("launch_bench: backend %s, %s per step; times in us, medians of %d repeats (launch CPU: %d; capture: "
           "of single captures); launch and capture ratios: medians of the ratios of side-by-side pairs\n",
           backend, st.cuda ? "32-thread kernels" : "host tasks", REPEATS, LAUNCH_REPEATS);
    printf("%7s | %9s %9s | %9s %9s %7s | %9s %9s %7s | %9s %9s %7s\n", "kernels", "eager-cpu", "eager-dev",
           "dev-ours", "dev-raw", "ratio", "launch", "launch-raw", "ratio", "capture", "capt-raw", "ratio");
    row rows[4];
    int nrows = 0;
    for (int n = 1; n <= max_kernels && nrows < 4; n *= 10) {
        st.kernels = n;
        row *r = &rows[nrows++];
        r->kernels = n;
        measure(s, pool, &st, r);
        printf("%7d | %9.2f %9.2f | %9.2f %9.2f", n, r->eager_cpu_us, r->eager_dev_us, r->dev_ours_us, r->dev_raw_us);
        print_ratio(r->dev_raw_us > 0 ? r->dev_ours_us / r->dev_raw_us : 0);
        printf(" | %9.3f %9.3f", r->launch_ours_us, r->launch_raw_us);
        print_ratio(r->launch_ratio);
        printf(" | %9.2f %9.2f", r->capture_ours_us, r->capture_raw_us);
        print_ratio(r->capture_ratio);
        printf("\n");
    }
#ifdef CPOOL_HAVE_CUDA
    if (st.cuda) {
        /* The fixed cost of a capture, in parts (us, medians): the fence's
         * record as capturepool makes it (the driver's cuEventRecord), and
         * as cudaEventRecord, and the capture-state query that
         * capture_begin does not make; and what could stand in for the
         * fence on an idle stream, through the driver too: a stream query
         * (the stream idle: nothing to fence) and a query of an event
         * that has completed. */
        cudaStream_t cs = (cudaStream_t)cpool_stream_native(s);
        cudaEvent_t ev, done;
        cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
        cudaEventRecord(done, cs);
        cudaStreamSynchronize(cs);
        int (*stream_query)(cudaStream_t) = (int (*)(cudaStream_t))cpool__driver_entry("cuStreamQuery");
        int (*event_query)(cudaEvent_t) = (int (*)(cudaEvent_t))cpool__driver_entry("cuEventQuery");
        enum { PARTS = 5, CALLS = 1000 };
        double part[PARTS][REPEATS];
        for (int rep = 0; rep < REPEATS; rep++) {
            enum cudaStreamCaptureStatus status;
            double t0 = bench_now_ns();
            for (int i = 0; i < CALLS; i++) fence_record(ev, cs);
            double t1 = bench_now_ns();
            for (int i = 0; i < CALLS; i++) cudaEventRecord(ev, cs);
            double t2 = bench_now_ns();
            cudaStreamSynchronize(cs); /* idle from here on */
            double t3 = bench_now_ns();
            for (int i = 0; i < CALLS; i++) cudaStreamIsCapturing(cs, &status);
            double t4 = bench_now_ns();
            for (int i = 0; i < CALLS && stream_query; i++) stream_query(cs);
            double t5 = bench_now_ns();
            for (int i = 0; i < CALLS && event_query; i++) event_query(done);
            double t6 = bench_now_ns();
            const double spans[PARTS] = {t1 - t0, t2 - t1, t4 - t3, t5 - t4, t6 - t5};
            for (int k = 0; k < PARTS; k++) part[k][rep] = spans[k] / CALLS / 1e3;
        }
        cudaStreamSynchronize(cs);
        cudaEventDestroy(ev);
        cudaEventDestroy(done);
        printf("parts of a capture's fixed cost, us: fence record (%s) %.3f, cudaEventRecord %.3f, "
               "cudaStreamIsCapturing %.3f; in the fence's place on an idle stream: cuStreamQuery %.3f, "
               "cuEventQuery of a completed event %.3f\n",
               driver.event_record ? "driver cuEventRecord" : "cudaEventRecord", bench_median(part[0], REPEATS),
               bench_median(part[1], REPEATS), bench_median(part[2], REPEATS),
               stream_query ? bench_median(part[3], REPEATS) : 0, event_query ? bench_median(part[4], REPEATS) : 0);
        st.kernels = 1;
        double ratio;
        if (have_driver_entries())
            driver_against_runtime(s, pool, &st);
        else
            printf("one-kernel raw capture+end: this runtime gives no driver entry points; capturepool calls the "
                   "runtime\n");
        /* The run's noise floor (raw one-kernel captures against
         * themselves), and what an event recorded just before the capture
         * begins, as capturepool's capture fence is, costs raw CUDA. */
        double self_a, self_b, after_record, alone;
        capture_pairs(CAPTURE_RAW, CAPTURE_RAW, 200, s, pool, &st, &self_a, &self_b, &ratio);
        printf("one-kernel raw capture+end against itself (noise floor), us: %.3f and %.3f, %.3fx\n", self_a, self_b,
               ratio);
        BENCH_CHECK(cudaEventCreateWithFlags(&record_event, cudaEventDisableTiming));
        capture_pairs(CAPTURE_RAW_AFTER_RECORD, CAPTURE_RAW, 200, s, pool, &st, &after_record, &alone, &ratio);
        BENCH_CHECK(cudaStreamSynchronize(cs));
        cudaEventDestroy(record_event);
        printf("one-kernel raw capture+end, us: after a fence record %.3f, alone %.3f, %.3fx\n", after_record, alone,
               ratio);
        /* A one-kernel capture in phases, ours against raw, single captures
         * in the flipping order of capture_pairs. */
        enum { PHASE_SAMPLES = REPEATS * 200 };
        static double begin[2][PHASE_SAMPLES], end[2][PHASE_SAMPLES]; /* [ours, raw] */
        for (int i = 0; i < PHASE_SAMPLES; i++)
            for (int k = 0; k < 2; k++) {
                int raw = (i + k) % 2;
                cpool_graph *g = NULL;
                cudaGraph_t graph = NULL;
                cudaGraphExec_t exec = NULL;
                double t0 = bench_now_ns();
                if (raw)
                    BENCH_CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
                else
                    BENCH_CHECK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
                double t1 = bench_now_ns();
                BENCH_CHECK(tick_step_enqueue(s, &st));
                double t2 = bench_now_ns();
                if (raw) {
                    BENCH_CHECK(cudaStreamEndCapture(cs, &graph));
                    BENCH_CHECK(cudaGraphInstantiate(&exec, graph, 0));
                } else {
                    BENCH_CHECK(cpool_capture_end(s, &g));
                }
                double t3 = bench_now_ns();
                if (raw) {
                    cudaGraphExecDestroy(exec);
                    cudaGraphDestroy(graph);
                }
                cpool_graph_release(g);
                begin[raw][i] = (t1 - t0) / 1e3;
                end[raw][i] = (t3 - t2) / 1e3;
            }
        printf("one-kernel capture in phases, us: begin ours %.3f raw %.3f; end+instantiate ours %.3f raw %.3f\n",
               bench_median(begin[0], PHASE_SAMPLES), bench_median(begin[1], PHASE_SAMPLES),
               bench_median(end[0], PHASE_SAMPLES), bench_median(end[1], PHASE_SAMPLES));
    }
#endif
    for (int i = 0; i < nrows; i++)
        printf("csv,capturepool,%s,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n", backend, rows[i].kernels,
               rows[i].eager_cpu_us, rows[i].eager_dev_us, rows[i].dev_ours_us, rows[i].dev_raw_us,
               rows[i].launch_ours_us, rows[i].launch_raw_us, rows[i].capture_ours_us, rows[i].capture_raw_us,
               rows[i].launch_ratio, rows[i].capture_ratio);
    BENCH_CHECK(cpool_stream_synchronize(s));
    BENCH_CHECK(cpool_free(pool, x, s));
    bench_close(dev, s, pool);
    return 0;
}
