/*
 * Events and multi-stream (fork/join) capture, measured side by side in one
 * run against the same calls made on raw CUDA on the same native streams:
 * - record + wait: cpool_event_record(e, S) followed by
 *   cpool_stream_wait_event(U, e), against cudaEventRecord +
 *   cudaStreamWaitEvent of a raw event created with cudaEventDefault (the
 *   library's events are timed, so both sides record timed events); the CPU
 *   time of one pair, in batches that alternate which side goes first;
 * - a 4-branch graph: the origin stream O forks 3 side streams through an
 *   event, every branch (O's included) runs K kernels (host tasks where
 *   there are no kernels), each side stream joins back through an event of
 *   its own. Capture + end with instantiation, cpool_capture_begin ...
 *   cpool_capture_end against cudaStreamBeginCapture ... cudaStreamEndCapture
 *   + cudaGraphInstantiate (single captures, in pairs whose order flips),
 *   and, taken in the same turns, raw with the four event records that
 *   capturepool adds as fences (the origin's before its begin, each side
 *   stream's before its fork, through the same driver entry point): what
 *   the library costs beyond them; and the CPU cost of one launch, cpool_graph_launch against
 *   cudaGraphLaunch of an equivalent graph captured raw (alternating
 *   batches); and where a capture's time goes at 1 kernel a branch: its
 *   five phases (begin, fork, work, join, end) timed one by one, ours and
 *   raw.
 * Times are medians; every ratio is the median of the ratios of pairs taken
 * side by side, as in launch_bench. On the host backend only capturepool's
 * side is measured. Besides the tables it prints "csv,event,...",
 * "csv,forkjoin,..." and "csv,forkphase,..." lines for scripts/bench_report.py.
 * Usage: event_bench [rounds]
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

enum { BRANCHES = 4, SIDES = BRANCHES - 1, PAIRS = 1000 };

static int rounds = 45; /* of record+wait batches and of launch batches */
static int capture_repeats = 15;

/* A failed call ends the program with its status and the library's reason
 * (or the CUDA error's name), never a crash. */
#define CHECK_OURS(call)                                                                                          \
    do {                                                                                                          \
        cpool_status st_ = (call);                                                                                \
        if (st_ != CPOOL_OK) fail_ours(#call, st_);                                                               \
    } while (0)

static void fail_ours(const char *what, cpool_status st) {
    fprintf(stderr, "event_bench: %s failed: %s: %s\n", what, cpool_status_string(st), cpool_last_error());
    if (st == CPOOL_ERR_UNSUPPORTED)
        fprintf(stderr, "event_bench: this build does not support events in a capture (multi-stream capture)\n");
    exit(1);
}

#ifdef CPOOL_HAVE_CUDA
#define CHECK_RAW(call)                                                                                           \
    do {                                                                                                          \
        cudaError_t err_ = (call);                                                                                \
        if (err_ != cudaSuccess) {                                                                                \
            fprintf(stderr, "event_bench: %s failed: %s: %s\n", #call, cudaGetErrorName(err_),                    \
                    cudaGetErrorString(err_));                                                                    \
            exit(1);                                                                                              \
        }                                                                                                         \
    } while (0)
#endif

static double *alloc_samples(int n) {
    double *v = malloc((size_t)n * sizeof *v);
    if (!v) {
        fprintf(stderr, "event_bench: out of memory\n");
        exit(1);
    }
    return v;
}

/* The median of a[i] / b[i], as launch_bench takes it: a host whose speed
 * changes during a measurement leaves the ratio of two runs taken side by
 * side alone. */
static double median_ratio(const double *a, const double *b, int n) {
    double *r = alloc_samples(n);
    for (int i = 0; i < n; i++) r[i] = a[i] / b[i];
    double m = bench_median(r, n);
    free(r);
    return m;
}

/* ---- record + wait ------------------------------------------------------- */

typedef struct pair_row {
    double ours_us, raw_us, ratio; /* raw and ratio 0 without raw CUDA */
} pair_row;

static void record_wait(cpool_device *dev, cpool_stream *s, cpool_stream *u, bool cuda, pair_row *r) {
    cpool_event *e;
    CHECK_OURS(cpool_event_create(dev, &e));
    double *a = alloc_samples(rounds), *b = alloc_samples(rounds);
#ifdef CPOOL_HAVE_CUDA
    cudaStream_t cs = (cudaStream_t)cpool_stream_native(s), cu = (cudaStream_t)cpool_stream_native(u);
    cudaEvent_t raw = NULL;
    if (cuda) CHECK_RAW(cudaEventCreateWithFlags(&raw, cudaEventDefault));
#endif
    for (int rep = 0; rep < rounds; rep++)
        for (int turn = 0; turn < 2; turn++) {
            bool ours_turn = (turn + rep) % 2 == 0;
            if (ours_turn) {
                double t0 = bench_now_ns();
                for (int i = 0; i < PAIRS; i++) {
                    CHECK_OURS(cpool_event_record(e, s));
                    CHECK_OURS(cpool_stream_wait_event(u, e));
                }
                a[rep] = (bench_now_ns() - t0) / PAIRS / 1e3;
                CHECK_OURS(cpool_stream_synchronize(u));
                CHECK_OURS(cpool_stream_synchronize(s));
            }
#ifdef CPOOL_HAVE_CUDA
            if (!ours_turn && cuda) {
                double t0 = bench_now_ns();
                for (int i = 0; i < PAIRS; i++) {
                    CHECK_RAW(cudaEventRecord(raw, cs));
                    CHECK_RAW(cudaStreamWaitEvent(cu, raw, 0));
                }
                b[rep] = (bench_now_ns() - t0) / PAIRS / 1e3;
                CHECK_RAW(cudaStreamSynchronize(cu));
                CHECK_RAW(cudaStreamSynchronize(cs));
            }
#endif
        }
    r->ratio = cuda ? median_ratio(a, b, rounds) : 0; /* before the medians sort a and b */
    r->ours_us = bench_median(a, rounds);
    r->raw_us = cuda ? bench_median(b, rounds) : 0;
#ifdef CPOOL_HAVE_CUDA
    if (raw) cudaEventDestroy(raw);
#endif
    free(a);
    free(b);
    cpool_event_destroy(e);
}

/* ---- the 4-branch graph ------------------------------------------------- */

/* Streams, events and work of the 4-branch graph. s[0] is the origin; every
 * branch adds to 32 floats of its own, so that branches that run at once
 * never write the same memory. */
typedef struct fork_graph {
    cpool_stream *s[BRANCHES];
    cpool_pool *pool;
    cpool_event *fork, *join[SIDES];
    tick_step st[BRANCHES];
    bool raw; /* raw CUDA to compare with: the CUDA backend with kernels */
    double *marks; /* where set: [0] the start of a capture, [1 + k] the end of its phase k */
#ifdef CPOOL_HAVE_CUDA
    cudaEvent_t raw_fork, raw_join[SIDES];
    cudaEvent_t raw_fence[BRANCHES]; /* untimed, as capturepool's fences */
#endif
} fork_graph;

/* How a timed capture is made: capturepool's; raw CUDA's; raw with the
 * event records capturepool adds as fences. */
typedef enum capture_kind { OURS, RAW, RAW_FENCED, KINDS } capture_kind;

/* The phases of a capture, for the table of where its time goes. */
enum { PHASES = 5 };
static const char *const phase_names[PHASES] = {"begin", "fork (record + 3 waits)", "branches' work",
                                                "join (3 records + waits)", "end + instantiate"};

static void mark(fork_graph *f, int phase) {
    if (f->marks) f->marks[1 + phase] = bench_now_ns();
}

/* The branches' work, as both captures enqueue it, O's first. */
static cpool_status enqueue_branches(fork_graph *f) {
    for (int b = 0; b < BRANCHES; b++) {
        cpool_status st = tick_step_enqueue(f->s[b], &f->st[b]);
        if (st != CPOOL_OK) return st;
    }
    return CPOOL_OK;
}

/* A failed call under capture: ends the capture on O (discarding what it
 * holds), then fails with the call's status. */
static void fail_in_capture(fork_graph *f, const char *what, cpool_status st) {
    char reason[512];
    snprintf(reason, sizeof reason, "%s", cpool_last_error());
    cpool_graph *g = NULL;
    (void)cpool_capture_end(f->s[0], &g);
    cpool_graph_release(g);
    fprintf(stderr, "event_bench: 4-branch capture: %s failed: %s: %s\n", what, cpool_status_string(st), reason);
    if (st == CPOOL_ERR_UNSUPPORTED)
        fprintf(stderr, "event_bench: this build does not support events in a capture (multi-stream capture)\n");
    exit(1);
}

#define CHECK_CAPTURE(f, call)                                                                                    \
    do {                                                                                                          \
        cpool_status st_ = (call);                                                                                \
        if (st_ != CPOOL_OK) fail_in_capture((f), #call, st_);                                                    \
    } while (0)

/* capturepool's capture of the 4-branch graph. */
static cpool_graph *capture_ours(fork_graph *f) {
    cpool_graph *g;
    CHECK_OURS(cpool_capture_begin(f->s[0], f->pool, CPOOL_CAPTURE_GLOBAL));
    mark(f, 0);
    CHECK_CAPTURE(f, cpool_event_record(f->fork, f->s[0]));
    for (int i = 0; i < SIDES; i++) CHECK_CAPTURE(f, cpool_stream_wait_event(f->s[1 + i], f->fork));
    mark(f, 1);
    CHECK_CAPTURE(f, enqueue_branches(f));
    mark(f, 2);
    for (int i = 0; i < SIDES; i++) {
        CHECK_CAPTURE(f, cpool_event_record(f->join[i], f->s[1 + i]));
        CHECK_CAPTURE(f, cpool_stream_wait_event(f->s[0], f->join[i]));
    }
    mark(f, 3);
    CHECK_OURS(cpool_capture_end(f->s[0], &g));
    mark(f, 4);
    return g;
}

#ifdef CPOOL_HAVE_CUDA
/* The driver's event record, which capturepool's fences go through (NULL
 * where the runtime gives no entry point, and capturepool then calls the
 * runtime). */
static int (*driver_event_record)(cudaEvent_t event, cudaStream_t stream);

static void fence_record(cudaEvent_t event, cudaStream_t stream) {
    CHECK_RAW(driver_event_record ? (cudaError_t)driver_event_record(event, stream) : cudaEventRecord(event, stream));
}

/* The same graph captured with the runtime's calls on the same native
 * streams, and instantiated; `fenced`: each stream first gets an event
 * record where capturepool records its fence. */
static cudaGraphExec_t capture_raw(fork_graph *f, bool fenced, cudaGraph_t *graph_out) {
    cudaStream_t o = (cudaStream_t)cpool_stream_native(f->s[0]);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    if (fenced) fence_record(f->raw_fence[0], o);
    CHECK_RAW(cudaStreamBeginCapture(o, cudaStreamCaptureModeGlobal));
    mark(f, 0);
    CHECK_RAW(cudaEventRecord(f->raw_fork, o));
    for (int i = 0; i < SIDES; i++) {
        cudaStream_t side = (cudaStream_t)cpool_stream_native(f->s[1 + i]);
        if (fenced) fence_record(f->raw_fence[1 + i], side);
        CHECK_RAW(cudaStreamWaitEvent(side, f->raw_fork, 0));
    }
    mark(f, 1);
    if (enqueue_branches(f) != CPOOL_OK) {
        fprintf(stderr, "event_bench: raw 4-branch capture: a kernel launch failed: %s\n", cpool_last_error());
        exit(1);
    }
    mark(f, 2);
    for (int i = 0; i < SIDES; i++) {
        CHECK_RAW(cudaEventRecord(f->raw_join[i], (cudaStream_t)cpool_stream_native(f->s[1 + i])));
        CHECK_RAW(cudaStreamWaitEvent(o, f->raw_join[i], 0));
    }
    mark(f, 3);
    CHECK_RAW(cudaStreamEndCapture(o, &graph));
    CHECK_RAW(cudaGraphInstantiate(&exec, graph, 0));
    mark(f, 4);
    *graph_out = graph;
    return exec;
}
#endif

/* One capture + end with instantiation, timed (ns); what it made is
 * destroyed untimed. */
static double capture_once(fork_graph *f, capture_kind kind) {
    double t0 = bench_now_ns(), t;
    if (kind == OURS) {
        cpool_graph *g = capture_ours(f);
        t = bench_now_ns() - t0;
        cpool_graph_release(g);
        return t;
    }
#ifdef CPOOL_HAVE_CUDA
    cudaGraph_t graph;
    cudaGraphExec_t exec = capture_raw(f, kind == RAW_FENCED, &graph);
    t = bench_now_ns() - t0;
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return t;
#else
    (void)t;
    return 0;
#endif
}

typedef struct fork_row {
    int kernels; /* per branch */
    double capture_ours_us, capture_raw_us, capture_ratio;
    double capture_fenced_us, fenced_ratio; /* raw with the fences; ours over it */
    double launch_ours_us, launch_raw_us, launch_ratio; /* raw and ratios 0 without raw CUDA */
} fork_row;

static void measure_fork(fork_graph *f, fork_row *r) {
    int captures = capture_repeats * (r->kernels >= 10 ? 100 : 200);
    int launches = r->kernels >= 10 ? 100 : 400;
    for (int b = 0; b < BRANCHES; b++) f->st[b].kernels = r->kernels;

    /* Capture + end, single captures in turns whose order rotates and
     * flips, so that each kind goes first, second and last equally. */
    double *t[KINDS];
    for (int k = 0; k < KINDS; k++) t[k] = alloc_samples(captures);
    for (int i = 0; i < captures; i++) {
        if (!f->raw) {
            t[OURS][i] = capture_once(f, OURS) / 1e3;
            continue;
        }
        for (int j = 0; j < KINDS; j++) {
            int k = (i / 2 + (i % 2 ? KINDS - 1 - j : j)) % KINDS;
            t[k][i] = capture_once(f, (capture_kind)k) / 1e3;
        }
    }
    /* The ratios before the medians sort the samples. */
    r->capture_ratio = f->raw ? median_ratio(t[OURS], t[RAW], captures) : 0;
    r->fenced_ratio = f->raw ? median_ratio(t[OURS], t[RAW_FENCED], captures) : 0;
    r->capture_ours_us = bench_median(t[OURS], captures);
    r->capture_raw_us = f->raw ? bench_median(t[RAW], captures) : 0;
    r->capture_fenced_us = f->raw ? bench_median(t[RAW_FENCED], captures) : 0;
    for (int k = 0; k < KINDS; k++) free(t[k]);

    /* The CPU cost of a launch call, alternating ours and raw batches, each
     * first in every other round. */
    cpool_graph *g = capture_ours(f);
    CHECK_OURS(cpool_graph_upload(g, f->s[0]));
    CHECK_OURS(cpool_graph_launch(g, f->s[0]));
    CHECK_OURS(cpool_stream_synchronize(f->s[0]));
    double *a = alloc_samples(rounds), *b = alloc_samples(rounds);
#ifdef CPOOL_HAVE_CUDA
    cudaStream_t o = (cudaStream_t)cpool_stream_native(f->s[0]);
    cudaGraph_t raw_graph = NULL;
    cudaGraphExec_t raw_exec = NULL;
    if (f->raw) {
        raw_exec = capture_raw(f, false, &raw_graph);
        CHECK_RAW(cudaGraphUpload(raw_exec, o));
        CHECK_RAW(cudaGraphLaunch(raw_exec, o));
        CHECK_RAW(cudaStreamSynchronize(o));
    }
#endif
    for (int rep = 0; rep < rounds; rep++)
        for (int turn = 0; turn < 2; turn++) {
            bool ours_turn = (turn + rep) % 2 == 0;
            if (ours_turn) {
                double t0 = bench_now_ns();
                for (int i = 0; i < launches; i++) CHECK_OURS(cpool_graph_launch(g, f->s[0]));
                a[rep] = (bench_now_ns() - t0) / launches / 1e3;
                CHECK_OURS(cpool_stream_synchronize(f->s[0]));
            }
#ifdef CPOOL_HAVE_CUDA
            if (!ours_turn && f->raw) {
                double t0 = bench_now_ns();
                for (int i = 0; i < launches; i++) CHECK_RAW(cudaGraphLaunch(raw_exec, o));
                b[rep] = (bench_now_ns() - t0) / launches / 1e3;
                CHECK_RAW(cudaStreamSynchronize(o));
            }
#endif
        }
    r->launch_ratio = f->raw ? median_ratio(a, b, rounds) : 0;
    r->launch_ours_us = bench_median(a, rounds);
    r->launch_raw_us = f->raw ? bench_median(b, rounds) : 0;
    free(a);
    free(b);
#ifdef CPOOL_HAVE_CUDA
    if (raw_exec) {
        cudaGraphExecDestroy(raw_exec);
        cudaGraphDestroy(raw_graph);
    }
#endif
    cpool_graph_release(g);
}

/* A time, or "n/a" where there was nothing to measure (0). */
static void print_us(double us, int decimals) {
    if (us > 0)
        printf(" %9.*f", decimals, us);
    else
        printf(" %9s", "n/a");
}

static void print_ratio(double ratio) {
    if (ratio > 0)
        printf(" %8.3fx", ratio);
    else
        printf(" %9s", "n/a");
}

/* "1 kernel a branch" and the like, as a table row's label. */
static void print_row_label(int count, bool kernels) {
    char label[64];
    snprintf(label, sizeof label, "%d %s a branch", count,
             kernels ? (count == 1 ? "kernel" : "kernels") : (count == 1 ? "host task" : "host tasks"));
    printf("%-34s |", label);
}

/* Where the time of a capture goes, phase by phase (PHASES), ours against
 * raw at 1 kernel a branch: medians of single captures in pairs whose order
 * flips. Printed as a table and as "csv,forkphase,..." lines. */
static void print_phases(fork_graph *f, const char *backend) {
    int captures = capture_repeats * 100;
    double *d[2][PHASES], marks[1 + PHASES];
    for (int side = 0; side < 2; side++)
        for (int k = 0; k < PHASES; k++) d[side][k] = alloc_samples(captures);
    for (int b = 0; b < BRANCHES; b++) f->st[b].kernels = 1;
    f->marks = marks;
    for (int i = 0; i < captures; i++)
        for (int turn = 0; turn < 2; turn++) {
            int side = (turn + i) % 2; /* 0 ours, 1 raw */
            if (side == 1 && !f->raw) continue;
            marks[0] = bench_now_ns();
            capture_once(f, side == 1 ? RAW : OURS);
            for (int k = 0; k < PHASES; k++) d[side][k][i] = (marks[1 + k] - marks[k]) / 1e3;
        }
    f->marks = NULL;
    printf("%-34s | %9s %9s %9s\n", "4-branch capture, 1 kernel a branch", "ours", "raw", "ours-raw");
    for (int k = 0; k < PHASES; k++) {
        double ours = bench_median(d[0][k], captures), raw = f->raw ? bench_median(d[1][k], captures) : 0;
        printf("%-34s |", phase_names[k]);
        print_us(ours, 3);
        print_us(raw, 3);
        if (f->raw)
            printf(" %9.3f", ours - raw);
        else
            printf(" %9s", "n/a");
        printf("\n");
        printf("csv,forkphase,%s,%d,%.4f,%.4f\n", backend, k, ours, raw);
    }
    fflush(stdout);
    for (int side = 0; side < 2; side++)
        for (int k = 0; k < PHASES; k++) free(d[side][k]);
}

int main(int argc, char **argv) {
    if (argc > 1) {
        rounds = atoi(argv[1]);
        if (rounds < 1) {
            fprintf(stderr, "usage: event_bench [rounds]\n");
            return 2;
        }
        capture_repeats = rounds < 15 ? 1 : 15;
    }
    cpool_device *dev;
    cpool_stream *s;
    cpool_pool *pool;
    bench_open(&dev, &s, &pool);
    bool cuda = cpool_device_backend(dev) == CPOOL_BACKEND_CUDA;
    fork_graph f = {.pool = pool};
    f.s[0] = s;
    for (int i = 0; i < SIDES; i++) {
        CHECK_OURS(cpool_stream_create(dev, &f.s[1 + i]));
        CHECK_OURS(cpool_event_create(dev, &f.join[i]));
    }
    CHECK_OURS(cpool_event_create(dev, &f.fork));
    bool kernels = false;
#ifdef CPOOL_HAVE_NVCC
    kernels = cuda;
#endif
    f.raw = kernels;
#ifdef CPOOL_HAVE_CUDA
    if (f.raw) {
        CHECK_RAW(cudaEventCreateWithFlags(&f.raw_fork, cudaEventDefault));
        for (int i = 0; i < SIDES; i++) CHECK_RAW(cudaEventCreateWithFlags(&f.raw_join[i], cudaEventDefault));
        for (int b = 0; b < BRANCHES; b++) CHECK_RAW(cudaEventCreateWithFlags(&f.raw_fence[b], cudaEventDisableTiming));
        driver_event_record = (int (*)(cudaEvent_t, cudaStream_t))cpool__driver_entry("cuEventRecord");
    }
#endif
    void *x[BRANCHES];
    for (int b = 0; b < BRANCHES; b++) {
        CHECK_OURS(cpool_alloc(pool, 32 * sizeof(float), s, &x[b]));
        CHECK_OURS(cpool_memset_async(s, x[b], 0, 32 * sizeof(float)));
        f.st[b] = (tick_step){.cuda = kernels, .x = x[b]};
    }
    CHECK_OURS(cpool_stream_synchronize(s));

    const char *backend = cuda ? "cuda" : "host";
    printf("event_bench: backend %s, %s; times in us, medians (record+wait: of %d batches of %d pairs; capture: "
           "of single captures; launch CPU: of %d batches); ratios ours/raw: medians of the ratios of side-by-side "
           "pairs; the target is at most 1.05x\n",
           backend, kernels ? "32-thread kernels" : "host tasks", rounds, PAIRS, rounds);

    /* Record + wait on two streams that capture nothing. */
    pair_row pr;
    record_wait(dev, f.s[0], f.s[1], cuda, &pr);
    printf("%-34s | %9s %9s %9s\n", "event record + stream wait", "ours", "raw", "ours/raw");
    printf("%-34s |", "CPU per pair (timed events)");
    print_us(pr.ours_us, 3);
    print_us(pr.raw_us, 3);
    print_ratio(pr.ratio);
    printf("\n");
    printf("csv,event,%s,record_wait,%.4f,%.4f,%.4f\n", backend, pr.ours_us, pr.raw_us, pr.ratio);
    fflush(stdout);

    /* The 4-branch graph at 1 and 10 kernels a branch. */
    printf("%-34s | %9s %9s %9s | %9s %9s %9s\n", "4-branch graph (O forks 3 streams)", "capture", "capt-raw",
           "ours/raw", "launch", "launch-raw", "ours/raw");
    static const int kernel_counts[] = {1, 10};
    fork_row rows[2];
    for (int k = 0; k < 2; k++) {
        fork_row *r = &rows[k];
        *r = (fork_row){.kernels = kernel_counts[k]};
        measure_fork(&f, r);
        print_row_label(r->kernels, kernels);
        print_us(r->capture_ours_us, 2);
        print_us(r->capture_raw_us, 2);
        print_ratio(r->capture_ratio);
        printf(" |");
        print_us(r->launch_ours_us, 3);
        print_us(r->launch_raw_us, 3);
        print_ratio(r->launch_ratio);
        printf("\n");
        fflush(stdout);
    }
    /* The same captures against raw with the fences' four records. */
    printf("%-34s | %9s %9s %9s | %9s\n", "4-branch capture, raw + fences", "capture", "raw+fence", "ours/it",
           "4 fences");
    for (int k = 0; k < 2; k++) {
        const fork_row *r = &rows[k];
        print_row_label(r->kernels, kernels);
        print_us(r->capture_ours_us, 2);
        print_us(r->capture_fenced_us, 2);
        print_ratio(r->fenced_ratio);
        printf(" |");
        print_us(r->capture_fenced_us - r->capture_raw_us, 2);
        printf("\n");
    }
    print_phases(&f, backend);
    for (int k = 0; k < 2; k++) {
        printf("csv,forkjoin,%s,%d,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n", backend, BRANCHES, rows[k].kernels,
               rows[k].capture_ours_us, rows[k].capture_raw_us, rows[k].capture_ratio, rows[k].launch_ours_us,
               rows[k].launch_raw_us, rows[k].launch_ratio);
        printf("csv,forkfence,%s,%d,%d,%.4f,%.4f\n", backend, BRANCHES, rows[k].kernels, rows[k].capture_fenced_us,
               rows[k].fenced_ratio);
    }

#ifdef CPOOL_HAVE_CUDA
    if (f.raw) {
        cudaEventDestroy(f.raw_fork);
        for (int i = 0; i < SIDES; i++) cudaEventDestroy(f.raw_join[i]);
        for (int b = 0; b < BRANCHES; b++) cudaEventDestroy(f.raw_fence[b]);
    }
#endif
    for (int b = 0; b < BRANCHES; b++) CHECK_OURS(cpool_free(pool, x[b], s));
    cpool_event_destroy(f.fork);
    for (int i = 0; i < SIDES; i++) {
        cpool_event_destroy(f.join[i]);
        cpool_stream_destroy(f.s[1 + i]);
    }
    bench_close(dev, s, pool);
    return 0;
}
