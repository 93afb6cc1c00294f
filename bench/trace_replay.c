/*
 * Replays allocation traces of real PyTorch models (the .trace files in bench/traces,
 * recorded by bench/traces/record_traces.py on an H200) through a
 * capturepool pool on one stream, and reports, side by side, the pool's
 * peak reserved memory against PyTorch's own on the same trace, the peak in
 * use, the trace's peak live bytes (the most its live allocations ever add
 * up to, read from the trace alone: the least any allocator could reserve)
 * with our peak reserved over it, and the time per operation on a warm pool.
 * bench/trace_replay_torch.py replays the same files through PyTorch's
 * allocator, default and with expandable segments.
 * Usage: trace_replay FILE.trace [...]
 */
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "capturepool.h"

typedef struct event {
    size_t id;
    size_t bytes; /* 0: a free */
} event;

typedef struct trace {
    char model[64];
    unsigned long long torch_reserved, torch_allocated;
    event *events;
    size_t count, ids;
} trace;

static int load(const char *path, trace *t) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    memset(t, 0, sizeof *t);
    size_t cap = 0;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') {
            char *m = strstr(line, "model=");
            if (m) sscanf(m, "model=%63s", t->model);
            char *r = strstr(line, "torch_peak_reserved=");
            if (r) sscanf(r, "torch_peak_reserved=%llu", &t->torch_reserved);
            char *a = strstr(line, "torch_peak_allocated=");
            if (a) sscanf(a, "torch_peak_allocated=%llu", &t->torch_allocated);
            continue;
        }
        event e = {0, 0};
        if (line[0] == 'a' && sscanf(line + 1, "%zu %zu", &e.id, &e.bytes) == 2) {
        } else if (line[0] == 'f' && sscanf(line + 1, "%zu", &e.id) == 1) {
            e.bytes = 0;
        } else {
            continue;
        }
        if (t->count == cap) {
            cap = cap ? 2 * cap : 4096;
            t->events = realloc(t->events, cap * sizeof *t->events);
            if (!t->events) exit(1);
        }
        t->events[t->count++] = e;
        if (e.id + 1 > t->ids) t->ids = e.id + 1;
    }
    fclose(f);
    return 0;
}

/* The most bytes the trace's allocations hold live at once, by their sizes
 * in the trace. Counted as replay treats the events: a free of an id that
 * is not live frees nothing (record_traces.py numbers every allocation
 * anew, so an id is never allocated twice). */
static unsigned long long peak_live(const trace *t) {
    size_t *live = calloc(t->ids ? t->ids : 1, sizeof *live);
    if (!live) exit(1);
    unsigned long long now = 0, peak = 0;
    for (size_t i = 0; i < t->count; i++) {
        const event *e = &t->events[i];
        if (e->bytes) {
            now += e->bytes;
            live[e->id] = e->bytes;
            if (now > peak) peak = now;
        } else {
            now -= live[e->id];
            live[e->id] = 0;
        }
    }
    free(live);
    return peak;
}

/* Replays the trace once; frees whatever it left live. Returns ns per op. */
static double replay(const trace *t, cpool_pool *pool, cpool_stream *s, void **ptrs) {
    memset(ptrs, 0, t->ids * sizeof *ptrs);
    double t0 = bench_now_ns();
    for (size_t i = 0; i < t->count; i++) {
        const event *e = &t->events[i];
        if (e->bytes) {
            BENCH_CHECK(cpool_alloc(pool, e->bytes, s, &ptrs[e->id]));
        } else if (ptrs[e->id]) {
            BENCH_CHECK(cpool_free(pool, ptrs[e->id], s));
            ptrs[e->id] = NULL;
        }
    }
    double ns = (bench_now_ns() - t0) / (double)t->count;
    for (size_t i = 0; i < t->ids; i++)
        if (ptrs[i]) BENCH_CHECK(cpool_free(pool, ptrs[i], s));
    return ns;
}

/* Replays one trace file on a fresh pool and prints its row and csv line.
 * Returns 1 where our peak reserved is above PyTorch's recorded one, 0
 * where it is not; exits on a file it cannot read. */
static int report_trace(cpool_device *dev, cpool_stream *s, const char *backend, const char *path) {
    trace t;
    if (load(path, &t) != 0) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(2);
    }
    void **ptrs = calloc(t.ids ? t.ids : 1, sizeof *ptrs);
    cpool_pool *pool;
    BENCH_CHECK(cpool_pool_create(dev, NULL, &pool));
    replay(&t, pool, s, ptrs); /* cold: sets the peaks */
    cpool_pool_stats st = {.struct_size = sizeof st};
    BENCH_CHECK(cpool_pool_get_stats(pool, &st));
    double ns[5];
    for (int r = 0; r < 5; r++) ns[r] = replay(&t, pool, s, ptrs);
    /* The peak after the five warm replays too: a pool that a loop keeps
     * using may end higher than one replay shows. */
    cpool_pool_stats warm = {.struct_size = sizeof warm};
    BENCH_CHECK(cpool_pool_get_stats(pool, &warm));
    unsigned long long live = peak_live(&t), ours = st.reserved_bytes_peak;
    double mib = 1 << 20, med = bench_median(ns, 5);
    double ratio = t.torch_reserved ? (double)ours / (double)t.torch_reserved : 0;
    double over_live = live ? (double)ours / (double)live : 0;
    printf("%-18s %8zu | %12.1f %12.1f %7.3fx | %10.1f | %10.1f %8.3fx | %8.3fx | %8.1f\n", t.model, t.count,
           (double)ours / mib, (double)t.torch_reserved / mib, ratio, (double)st.allocated_bytes_peak / mib,
           (double)live / mib, over_live, live ? (double)warm.reserved_bytes_peak / (double)live : 0, med);
    /* Fields after the model: events, ours, torch's recorded, in use, ns/op,
     * peak live, ours after the warm replays (appended last, so older
     * readers keep their indices). */
    printf("csv,trace,%s,%s,%zu,%llu,%llu,%llu,%.2f,%llu,%llu\n", backend, t.model, t.count, ours, t.torch_reserved,
           (unsigned long long)st.allocated_bytes_peak, med, live, (unsigned long long)warm.reserved_bytes_peak);
    cpool_pool_release(pool);
    free(ptrs);
    free(t.events);
    return ours > t.torch_reserved;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE.trace [...]\n", argv[0]);
        return 2;
    }
    cpool_device *dev;
    cpool_stream *s;
    bench_open(&dev, &s, NULL);
    const char *backend = cpool_device_backend(dev) == CPOOL_BACKEND_CUDA ? "cuda" : "host";
    printf("trace_replay: backend %s; MiB, and ns per alloc or free on a warm pool (median of 5 replays); "
           "peak-live: the trace's live bytes at their most, ours/live: ours-peak over it; "
           "warm/live: ours-peak after the 5 warm replays over it\n",
           backend);
    printf("%-18s %8s | %12s %12s %8s | %10s | %10s %9s | %9s | %8s\n", "trace", "events", "ours-peak", "torch-peak",
           "ratio", "in-use", "peak-live", "ours/live", "warm/live", "ns/op");
    int worse = 0;
    for (int i = 1; i < argc; i++) worse += report_trace(dev, s, backend, argv[i]);
    bench_close(dev, s, NULL);
    return worse ? 1 : 0;
}
