/*
 * What a trim gives back on real models' allocation traces (bench/traces),
 * side by side: a pool that maps as the backend does (a growth of a GiB or
 * more, and each run of a resume, as one allocation: a unit, backend.h)
 * against the same pool mapping every page as a unit of its own, as the
 * library did before units. Each trace is replayed on one stream and
 * trimmed at 16 points; the bytes held after each trim are compared.
 *
 * - Plain replays: the units never hold more after a trim than pages do.
 * - With a DISCARD suspend and resume halfway: a resumed run goes back only
 *   whole (the documented cost of waking in one mapping a run); the figures
 *   are printed, every trim still gives back the units wholly free, and
 *   with every block freed a trim leaves nothing.
 *
 * Against the static library: the page-by-page pool is the same device's
 * backend table with pages_map always asked for a unit per page.
 */
#include "check.h" /* first: its feature macro */
#include "helpers.h"
#include "internal.h" /* the device's backend table */

#include <stdint.h>
#include <stdlib.h>

#ifndef CPOOL_TRACE_DIR
#error "CPOOL_TRACE_DIR: the folder of the .trace files (tests/CMakeLists.txt)"
#endif

enum { TRIMS = 16 };

typedef struct event {
    size_t id, bytes; /* bytes 0: a free */
} event;

typedef struct trace {
    event *events;
    size_t count, ids;
} trace;

/* Loads NAME.trace; false (with a failure reported) where it cannot. */
static bool load(const char *name, trace *t) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.trace", CPOOL_TRACE_DIR, name);
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "r");
    if (!f) {
        check_report_(__FILE__, __LINE__, "cannot read %s", path);
        return false;
    }
    size_t cap = 0;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        event e = {0, 0};
        if (!(line[0] == 'a' && sscanf(line + 1, "%zu %zu", &e.id, &e.bytes) == 2 && e.bytes) &&
            !(line[0] == 'f' && sscanf(line + 1, "%zu", &e.id) == 1))
            continue;
        if (t->count == cap) {
            cap = cap ? 2 * cap : 4096;
            event *grown = realloc(t->events, cap * sizeof *grown);
            if (!grown) abort();
            t->events = grown;
        }
        t->events[t->count++] = e;
        if (e.id + 1 > t->ids) t->ids = e.id + 1;
    }
    fclose(f);
    return t->count > 0;
}

/* The device's backend table with every mapping a unit per page. */
static const cpool__backend *real_backend;
static cpool__backend paged_backend;

static cpool_status map_by_pages(cpool__bdevice *dev, void *addr, size_t bytes, bool joined) {
    (void)joined;
    return real_backend->pages_map(dev, addr, bytes, false);
}

/* Replays t on a fresh pool of dev, trimming at TRIMS points and keeping
 * the bytes held after each in held[]; with resume_at >= 0, a DISCARD
 * suspend and a resume come just before that trim. Ends with every block
 * freed and one more trim, which must leave nothing. */
static void replay(cpool_device *dev, const trace *t, int resume_at, size_t held[TRIMS]) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool *pool;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    void **ptrs = calloc(t->ids, sizeof *ptrs);
    REQUIRE(ptrs != NULL);
    size_t next = 0;
    for (int k = 0; k < TRIMS; k++) {
        size_t until = (size_t)(k + 1) * t->count / (TRIMS + 1);
        for (; next < until; next++) {
            const event *e = &t->events[next];
            if (e->bytes) {
                REQUIRE_OK(cpool_alloc(pool, e->bytes, s, &ptrs[e->id]));
            } else if (ptrs[e->id]) {
                CHECK_OK(cpool_free(pool, ptrs[e->id], s));
                ptrs[e->id] = NULL;
            }
        }
        if (k == resume_at) {
            CHECK_OK(cpool_pool_suspend(pool, CPOOL_SUSPEND_DISCARD));
            CHECK_OK(cpool_pool_resume(pool));
        }
        size_t before = stats_of(pool).reserved_bytes;
        CHECK_OK(cpool_pool_trim(pool));
        held[k] = stats_of(pool).reserved_bytes;
        CHECK(held[k] <= before);
    }
    for (size_t i = 0; i < t->ids; i++)
        if (ptrs[i]) CHECK_OK(cpool_free(pool, ptrs[i], s));
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_EQ(stats_of(pool).reserved_bytes, 0);
    free(ptrs);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* Replays t with units, then page by page, and prints both sides. */
static void side_by_side(cpool_device *dev, const char *name, const trace *t, int resume_at, size_t units[TRIMS],
                         size_t pages[TRIMS]) {
    replay(dev, t, resume_at, units);
    cpool_device *d = cpool__handle_object(dev, CPOOL__HANDLE_DEVICE);
    real_backend = d->be;
    paged_backend = *d->be;
    paged_backend.pages_map = map_by_pages;
    d->be = &paged_backend;
    replay(dev, t, resume_at, pages);
    d->be = real_backend;
    int from = resume_at < 0 ? 0 : resume_at, trims = TRIMS - from;
    double u = 0, p = 0, mib = 1 << 20;
    for (int k = from; k < TRIMS; k++) u += (double)units[k], p += (double)pages[k];
    printf("  note [%s]: %-15s held after %2d trims%s: units %7.1f MiB, pages %7.1f MiB (%.3fx)\n",
           check_backend_name_, name, trims, resume_at < 0 ? "           " : " after a resume", u / trims / mib,
           p / trims / mib, p > 0 ? u / p : 1.0);
}

static const char *const traces[] = {"gpt2_train", "resnet50_train", "vit_b16_infer", "llama_decode"};

/* Without a resume, no trim of any trace holds more than page by page. */
static void trims_of_traces_hold_no_more_than_pages(cpool_device *dev) {
    for (size_t i = 0; i < sizeof traces / sizeof *traces; i++) {
        trace t;
        if (!load(traces[i], &t)) continue;
        size_t units[TRIMS], pages[TRIMS];
        side_by_side(dev, traces[i], &t, -1, units, pages);
        for (int k = 0; k < TRIMS; k++)
            if (units[k] > pages[k])
                check_report_(__FILE__, __LINE__, "%s, trim %d: units hold %zu bytes, pages %zu", traces[i], k,
                              units[k], pages[k]);
        free(t.events);
    }
}

/* With a resume halfway, runs come back in pieces that go back only whole:
 * what they cost at the trims after it, printed; before it, the same as
 * pages. */
static void trims_after_a_resume_give_back_whole_runs(cpool_device *dev) {
    for (size_t i = 0; i < sizeof traces / sizeof *traces; i++) {
        trace t;
        if (!load(traces[i], &t)) continue;
        size_t units[TRIMS], pages[TRIMS];
        side_by_side(dev, traces[i], &t, TRIMS / 2, units, pages);
        for (int k = 0; k < TRIMS / 2; k++) CHECK_EQ(units[k], pages[k]);
        free(t.events);
    }
}

static const check_case cases[] = {
    CHECK_CASE(trims_of_traces_hold_no_more_than_pages),
    CHECK_CASE(trims_after_a_resume_give_back_whole_runs),
};

CHECK_MAIN(cases, CHECK_ON_ALL)
