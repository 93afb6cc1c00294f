/* Graphs captured into one pool share its memory by pages (capturepool.h,
 * cpool_pool, "Graphs that share a pool"), as a user sees it through the
 * public API:
 *  - whatever the order of capture and of replay, and however the outputs
 *    were allocated (cpool_alloc under capture included, before or after the
 *    scratch), a replay never overwrites a live output of another graph and
 *    a launch is never refused (no CPOOL_ERR_OUTPUT_LIVE);
 *  - graph_reserved_bytes stays within a small margin of the lower bound:
 *    the largest graph's scratch plus every live output;
 *  - outputs may be freed while their graph lives, graphs released while
 *    their outputs live; once every graph and output is gone the pool trims
 *    to nothing.
 * Every capture fills its scratch with a value of its own and copies into
 * each output, from the scratch, a pattern unique to that output (an 8-byte
 * unit: the output's tag and its complement), so a byte written by any other
 * replay shows. After launches the outputs are read back and compared byte
 * by byte; a failure names the graph and the output. Each case prints its
 * seed and what it saw: launches, refusals, outputs found overwritten, and
 * the pool's graph memory against the lower bound. */
#include "check.h"
#include "helpers.h"

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)
/* Memory is backed in 2 MiB pages (docs/GUIDE.md), so the least a pool can
 * hold is its lower bound rounded up to whole pages. */
#define PAGE_BYTES (2 * MiB)
/* How far above that graph memory may go ("a small margin"): 2%,
 * and 1% where every output is 4 KiB. */
#define MARGIN 0.02
#define SMALL_OUTPUTS_MARGIN 0.01

enum { MAX_GRAPHS = 1024, MAX_OUTPUTS = 1100, MAX_SCRATCH = 3, MAX_GRAPH_OUTPUTS = 3 };
/* Failures printed in full per scene; the rest are counted in one line. */
enum { FAILURES_SHOWN = 20 };

/* ---- random numbers ---------------------------------------------------------- */

static uint64_t rng_next(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}
static unsigned rng_below(uint64_t *x, unsigned n) { return (unsigned)(rng_next(x) % n); }

/* A size in [lo, hi] (hi = lo << d), uniform in its logarithm's whole part:
 * as many sizes near lo as near hi; a multiple of 512 bytes. */
static size_t rng_size(uint64_t *x, size_t lo, size_t hi) {
    unsigned doublings = 0, k;
    size_t base;
    while ((lo << (doublings + 1)) <= hi) doublings++;
    k = rng_below(x, doublings + 1);
    base = lo << k;
    base += (size_t)(rng_next(x) % base) / 512 * 512;
    return base > hi ? hi : base;
}

static void shuffle(int *a, int n, uint64_t *rng) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rng_below(rng, (unsigned)i + 1), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static void start_case(const char *what, uint64_t seed) {
    printf("  %s: seed 0x%016llx\n", what, (unsigned long long)seed);
    fflush(stdout);
}

/* ---- patterns -------------------------------------------------------------- */

/* The 8-byte unit an output with this tag repeats: the tag's bytes, then
 * their complements, so no fill with one byte value can pass for it. */
static void pattern_unit(uint32_t tag, unsigned char unit[8]) {
    for (int i = 0; i < 4; i++) {
        unit[i] = (unsigned char)(tag >> (8 * i));
        unit[4 + i] = (unsigned char)~unit[i];
    }
}

/* Writes the pattern of `tag` into n host bytes. */
static void fill_pattern(unsigned char *dst, size_t n, uint32_t tag) {
    unsigned char unit[8];
    size_t done;
    pattern_unit(tag, unit);
    memcpy(dst, unit, n < 8 ? n : 8);
    for (done = n < 8 ? n : 8; done < n; done *= 2) memcpy(dst + done, dst, done * 2 <= n ? done : n - done);
}

/* Enqueues on s what writes the pattern of `tag` into the first n bytes of
 * dst: eight one-byte fills, then copies that double what is written. */
static cpool_status enqueue_pattern(cpool_stream *s, unsigned char *dst, size_t n, uint32_t tag) {
    unsigned char unit[8];
    cpool_status st = CPOOL_OK;
    size_t done;
    pattern_unit(tag, unit);
    for (size_t i = 0; i < 8 && i < n && st == CPOOL_OK; i++) st = cpool_memset_async(s, dst + i, unit[i], 1);
    for (done = n < 8 ? n : 8; done < n && st == CPOOL_OK; done *= 2)
        st = cpool_memcpy_async(s, dst + done, dst, done * 2 <= n ? done : n - done);
    return st;
}

/* Enqueues a graph's use of its scratch for one output: the pattern of
 * `tag` at the head of the scratch, then copied into the output. */
static cpool_status enqueue_output_fill(cpool_stream *s, void *out, void *scratch, size_t n, uint32_t tag) {
    cpool_status st = enqueue_pattern(s, (unsigned char *)scratch, n, tag);
    return st != CPOOL_OK ? st : cpool_memcpy_async(s, out, scratch, n);
}

/* ---- the scene: a pool, its graphs and their outputs ------------------------- */

typedef struct output {
    void *ptr; /* NULL once freed */
    size_t bytes;
    int graph; /* index of the graph whose capture made it */
    int index; /* its place among that graph's outputs */
    uint32_t tag;
    int written; /* its graph launched since the capture (or since a check found it overwritten) */
} output;

typedef struct scene {
    cpool_stream *s;
    cpool_pool *pool;
    cpool_graph *graph[MAX_GRAPHS];          /* NULL once released */
    unsigned long long graph_id[MAX_GRAPHS]; /* cpool_graph_id: how cpool_last_error() names it */
    int graph_count;                         /* graphs made so far: indices 0 .. graph_count - 1 */
    output out[MAX_OUTPUTS];
    int output_count;
    uint32_t next_tag;
    unsigned char *got, *want; /* host buffers of the checks */
    size_t buffer_bytes;
    const char *when; /* what happened last, for the failure messages */
    /* What the scene saw. */
    int launches, refused, failed_launches, overwritten, failures, failures_hidden;
} scene;

/* Counts a failure of the scene and prints the first FAILURES_SHOWN. */
#define SCENE_FAIL(sc, ...)                                                                                            \
    do {                                                                                                               \
        (sc)->failures++;                                                                                              \
        if ((sc)->failures <= FAILURES_SHOWN)                                                                          \
            check_report_(__FILE__, __LINE__, __VA_ARGS__);                                                            \
        else                                                                                                           \
            (sc)->failures_hidden++;                                                                                   \
    } while (0)

static void scene_release_graph(scene *sc, int g) {
    cpool_graph_release(sc->graph[g]);
    sc->graph[g] = NULL;
}

static void scene_free_output(scene *sc, output *o) {
    cpool_status st = cpool_free(sc->pool, o->ptr, sc->s);
    if (st != CPOOL_OK)
        SCENE_FAIL(sc, "graph %d (id %llu) output %d: cpool_free returned %s (%s)", o->graph, sc->graph_id[o->graph],
                   o->index, cpool_status_string(st), cpool_last_error());
    o->ptr = NULL;
}

/* Releases every graph and frees every live output; the pool stays. */
static void scene_clear(scene *sc) {
    for (int g = 0; g < sc->graph_count; g++)
        if (sc->graph[g]) scene_release_graph(sc, g);
    for (int i = 0; i < sc->output_count; i++)
        if (sc->out[i].ptr) scene_free_output(sc, &sc->out[i]);
    sc->graph_count = 0;
    sc->output_count = 0;
}

static void scene_close_(void *arg) {
    scene *sc = (scene *)arg;
    if (sc->pool) scene_clear(sc);
    cpool_pool_release(sc->pool);
    cpool_stream_destroy(sc->s);
    free(sc->got);
    free(sc->want);
    memset(sc, 0, sizeof *sc);
}

/* sc must be static: its cleanup runs after the case returned. */
static int scene_open(cpool_device *dev, scene *sc) {
    memset(sc, 0, sizeof *sc);
    check_defer(scene_close_, sc);
    sc->next_tag = 0x5eed0001u;
    if (!CHECK_OK(cpool_stream_create(dev, &sc->s))) return 0;
    return CHECK_OK(cpool_pool_create(dev, NULL, &sc->pool));
}

/* Ends the scene's graphs and outputs and gives it a new, empty pool. */
static int scene_new_pool(cpool_device *dev, scene *sc) {
    scene_clear(sc);
    cpool_pool_release(sc->pool);
    sc->pool = NULL;
    return CHECK_OK(cpool_pool_create(dev, NULL, &sc->pool));
}

/* Takes the graph just made at index sc->graph_count. */
static void scene_add_graph(scene *sc, cpool_graph *g) {
    sc->graph[sc->graph_count] = g;
    sc->graph_id[sc->graph_count] = (unsigned long long)cpool_graph_id(g);
    sc->graph_count++;
}

static output *scene_add_output(scene *sc, int graph, int index, void *ptr, size_t bytes, uint32_t tag) {
    output *o = &sc->out[sc->output_count++];
    o->ptr = ptr;
    o->bytes = bytes;
    o->graph = graph;
    o->index = index;
    o->tag = tag;
    o->written = 0;
    return o;
}

static int scene_live_outputs(const scene *sc) {
    int n = 0;
    for (int i = 0; i < sc->output_count; i++) n += sc->out[i].ptr != NULL;
    return n;
}

static int scene_live_graphs(const scene *sc) {
    int n = 0;
    for (int g = 0; g < sc->graph_count; g++) n += sc->graph[g] != NULL;
    return n;
}

/* Reads output o back and compares it with its pattern: returns how many
 * bytes differ (the first at *first_wrong), or -1 after a failure that says
 * why it could not read. */
static long output_bytes_wrong(scene *sc, const output *o, size_t *first_wrong) {
    cpool_status st;
    long wrong = 0;
    if (o->bytes > sc->buffer_bytes) {
        free(sc->got);
        free(sc->want);
        sc->got = (unsigned char *)malloc(o->bytes);
        sc->want = (unsigned char *)malloc(o->bytes);
        sc->buffer_bytes = sc->got && sc->want ? o->bytes : 0;
        if (!sc->buffer_bytes) {
            SCENE_FAIL(sc, "malloc(%zu) for a check failed", o->bytes);
            return -1;
        }
    }
    st = read_back(sc->s, sc->got, o->ptr, o->bytes);
    if (st != CPOOL_OK) {
        SCENE_FAIL(sc, "graph %d (id %llu) output %d (%zu bytes at %p): read back failed: %s (%s)", o->graph,
                   sc->graph_id[o->graph], o->index, o->bytes, o->ptr, cpool_status_string(st), cpool_last_error());
        return -1;
    }
    fill_pattern(sc->want, o->bytes, o->tag);
    if (memcmp(sc->got, sc->want, o->bytes) == 0) return 0;
    *first_wrong = 0;
    while (sc->got[*first_wrong] == sc->want[*first_wrong]) (*first_wrong)++;
    for (size_t i = *first_wrong; i < o->bytes; i++) wrong += sc->got[i] != sc->want[i];
    return wrong;
}

/* Checks a written output; a mismatch names the graph, the output and what
 * happened last, and the output is not checked again until its graph writes
 * it anew. */
static void scene_check_output(scene *sc, output *o) {
    size_t at = 0;
    long wrong;
    if (!o->ptr || !o->written) return;
    wrong = output_bytes_wrong(sc, o, &at);
    if (wrong <= 0) return;
    sc->overwritten++;
    o->written = 0;
    SCENE_FAIL(sc,
               "graph %d (id %llu) output %d (%zu bytes at %p) overwritten, seen %s: byte %zu is 0x%02x, expected "
               "0x%02x (%ld bytes differ)",
               o->graph, sc->graph_id[o->graph], o->index, o->bytes, o->ptr, sc->when, at, sc->got[at], sc->want[at],
               wrong);
}

static void scene_check_all(scene *sc) {
    for (int i = 0; i < sc->output_count; i++) scene_check_output(sc, &sc->out[i]);
}

static void scene_check_graph_outputs(scene *sc, int g) {
    for (int i = 0; i < sc->output_count; i++)
        if (sc->out[i].graph == g) scene_check_output(sc, &sc->out[i]);
}

/* Launches graph g, waits for it, and marks its outputs written; any status
 * but CPOOL_OK is a failure that names the graph (a refusal's message names
 * the output it protects). */
static int scene_launch(scene *sc, int g) {
    static char when[96];
    cpool_status st = cpool_graph_launch(sc->graph[g], sc->s);
    sc->launches++;
    snprintf(when, sizeof when, "after launch %d (graph %d, id %llu)", sc->launches, g, sc->graph_id[g]);
    sc->when = when;
    if (st == CPOOL_OK) st = cpool_stream_synchronize(sc->s);
    if (st != CPOOL_OK) {
        if (st == CPOOL_ERR_OUTPUT_LIVE)
            sc->refused++;
        else
            sc->failed_launches++;
        SCENE_FAIL(sc, "graph %d (id %llu): launch %d returned %s; cpool_last_error: \"%s\"", g, sc->graph_id[g],
                   sc->launches, cpool_status_string(st), cpool_last_error());
        return 0;
    }
    for (int i = 0; i < sc->output_count; i++)
        if (sc->out[i].graph == g && sc->out[i].ptr) sc->out[i].written = 1;
    return 1;
}

/* Prints what the scene saw since the last report, and the failures not
 * shown; then starts counting anew. */
static void scene_report(scene *sc, const char *what) {
    printf("  %s: %d launches, %d refused with CPOOL_ERR_OUTPUT_LIVE, %d failed otherwise, %d outputs found "
           "overwritten\n",
           what, sc->launches, sc->refused, sc->failed_launches, sc->overwritten);
    if (sc->failures_hidden)
        check_report_(__FILE__, __LINE__, "%s: %d more failures not shown", what, sc->failures_hidden);
    fflush(stdout);
    sc->launches = sc->refused = sc->failed_launches = sc->overwritten = 0;
    sc->failures = sc->failures_hidden = 0;
}

/* The pool's graph memory against the lower bound (the largest graph's
 * scratch plus every live output), in whole pages, times 1 + margin. */
static void check_graph_memory(scene *sc, const char *what, uint64_t lower_bound, double margin, int asserted) {
    cpool_pool_stats st = stats_of(sc->pool);
    uint64_t in_pages = (lower_bound + PAGE_BYTES - 1) / PAGE_BYTES * PAGE_BYTES;
    uint64_t limit = (uint64_t)((double)in_pages * (1.0 + margin));
    printf("  %s: graph_reserved_bytes %.2f MiB, lower bound %.2f MiB (%.2f MiB in pages): ratio %.3f, limit "
           "%.2f MiB%s\n",
           what, (double)st.graph_reserved_bytes / MiB, (double)lower_bound / MiB, (double)in_pages / MiB,
           (double)st.graph_reserved_bytes / (double)lower_bound, (double)limit / MiB,
           asserted ? "" : " (not asserted)");
    fflush(stdout);
    if (asserted && st.graph_reserved_bytes > limit)
        check_report_(__FILE__, __LINE__, "%s: graph_reserved_bytes %llu > %llu (lower bound %llu in pages, + %.0f%%)",
                      what, (unsigned long long)st.graph_reserved_bytes, (unsigned long long)limit,
                      (unsigned long long)in_pages, margin * 100);
}

/* ---- captures on one stream ---------------------------------------------------- */

/* What one capture does: allocate its scratch blocks (all live together)
 * and its outputs, the outputs first or last; fill each scratch block with a
 * value of its own; fill each output from the first scratch block; free the
 * scratch. */
typedef struct recipe {
    size_t scratch[MAX_SCRATCH];
    int scratch_count;
    size_t out_bytes[MAX_GRAPH_OUTPUTS]; /* each at most scratch[0] */
    int out_count;
    int outputs_first;
    int alloc_output; /* outputs with cpool_alloc_output rather than cpool_alloc */
    unsigned char value;
} recipe;

typedef struct capture_ctx {
    cpool_pool *pool;
    const recipe *r;
    uint32_t tag[MAX_GRAPH_OUTPUTS];
    void *out[MAX_GRAPH_OUTPUTS];
} capture_ctx;

/* A recipe of one scratch block and out_count outputs of out_bytes each. */
static recipe one_scratch(size_t scratch, size_t out_bytes, int out_count, int outputs_first, int alloc_output,
                          unsigned char value) {
    recipe r;
    memset(&r, 0, sizeof r);
    r.scratch[0] = scratch;
    r.scratch_count = 1;
    for (int i = 0; i < out_count; i++) r.out_bytes[i] = out_bytes;
    r.out_count = out_count;
    r.outputs_first = outputs_first;
    r.alloc_output = alloc_output;
    r.value = value;
    return r;
}

static cpool_status alloc_outputs(capture_ctx *c, cpool_stream *s) {
    cpool_status st = CPOOL_OK;
    for (int i = 0; i < c->r->out_count && st == CPOOL_OK; i++)
        st = c->r->alloc_output ? cpool_alloc_output(c->pool, c->r->out_bytes[i], s, &c->out[i])
                                : cpool_alloc(c->pool, c->r->out_bytes[i], s, &c->out[i]);
    return st;
}

static cpool_status recipe_body(cpool_stream *s, void *arg) {
    capture_ctx *c = (capture_ctx *)arg;
    const recipe *r = c->r;
    void *scratch[MAX_SCRATCH] = {0};
    cpool_status st = r->outputs_first ? alloc_outputs(c, s) : CPOOL_OK;
    for (int k = 0; k < r->scratch_count && st == CPOOL_OK; k++)
        st = cpool_alloc(c->pool, r->scratch[k], s, &scratch[k]);
    if (st == CPOOL_OK && !r->outputs_first) st = alloc_outputs(c, s);
    for (int k = 0; k < r->scratch_count && st == CPOOL_OK; k++)
        st = cpool_memset_async(s, scratch[k], r->value + k, r->scratch[k]);
    for (int i = 0; i < r->out_count && st == CPOOL_OK; i++)
        st = enqueue_output_fill(s, c->out[i], scratch[0], r->out_bytes[i], c->tag[i]);
    for (int k = 0; k < r->scratch_count && st == CPOOL_OK; k++) st = cpool_free(c->pool, scratch[k], s);
    return st;
}

/* Captures a recipe into the scene's pool; returns the new graph's index, or
 * -1 after a failure that names it. */
static int scene_capture(scene *sc, const recipe *r) {
    int g = sc->graph_count;
    cpool_graph *graph = NULL;
    capture_ctx c;
    cpool_status st;
    if (g == MAX_GRAPHS || sc->output_count + r->out_count > MAX_OUTPUTS) {
        SCENE_FAIL(sc, "graph %d: the scene holds no more graphs or outputs", g);
        return -1;
    }
    memset(&c, 0, sizeof c);
    c.pool = sc->pool;
    c.r = r;
    for (int i = 0; i < r->out_count; i++) c.tag[i] = sc->next_tag++;
    st = cpool_capture(sc->s, sc->pool, CPOOL_CAPTURE_GLOBAL, recipe_body, &c, &graph);
    if (st != CPOOL_OK) {
        SCENE_FAIL(sc, "graph %d: capture returned %s (%s)", g, cpool_status_string(st), cpool_last_error());
        return -1;
    }
    scene_add_graph(sc, graph);
    for (int i = 0; i < r->out_count; i++) scene_add_output(sc, g, i, c.out[i], r->out_bytes[i], c.tag[i]);
    return g;
}

/* Launches the scene's graphs in a random order, `launches` times; after
 * each, the launched graph's outputs are checked, and every output each
 * `check_all_every` launches and at the end. */
static void replay_randomly(scene *sc, uint64_t *rng, int launches, int check_all_every) {
    for (int k = 1; k <= launches; k++) {
        int g = (int)rng_below(rng, (unsigned)sc->graph_count);
        if (!sc->graph[g]) continue;
        if (scene_launch(sc, g)) scene_check_graph_outputs(sc, g);
        if (k % check_all_every == 0 || k == launches) scene_check_all(sc);
    }
}

/* Launches each of the scene's live graphs once, in a random order; after
 * each, the launched graph's outputs are checked, and every output each
 * `check_all_every` launches and at the end. */
static void replay_each_once(scene *sc, uint64_t *rng, int check_all_every) {
    int order[MAX_GRAPHS], n = 0;
    for (int g = 0; g < sc->graph_count; g++)
        if (sc->graph[g]) order[n++] = g;
    shuffle(order, n, rng);
    for (int k = 1; k <= n; k++) {
        if (scene_launch(sc, order[k - 1])) scene_check_graph_outputs(sc, order[k - 1]);
        if (k % check_all_every == 0 || k == n) scene_check_all(sc);
    }
}

/* ---- 1. the engine pattern: eight graphs, scratch 1 to 128 MiB ----------------- */

/* Launches per variant: each graph once, in a random order; every output
 * checked after every ENGINE_CHECK_ALL_EVERY launches and at the end. (The
 * scratch fills, up to 128 MiB, make launches the case's cost.) */
enum { ENGINE_GRAPHS = 8, ENGINE_CHECK_ALL_EVERY = 4 };
enum { ORDER_ASCENDING, ORDER_DESCENDING, ORDER_SHUFFLED, CAPTURE_ORDERS };
static const char *const order_names[CAPTURE_ORDERS] = {"ascending", "descending", "shuffled"};
static const int shuffled_order[ENGINE_GRAPHS] = {5, 2, 7, 0, 3, 6, 1, 4};

/* Graph i (captured in the given order) has a scratch of (unit_kib << i)
 * KiB and an output of a 16th of that. Every variant (output by cpool_alloc
 * or cpool_alloc_output, allocated before or after the scratch) in every
 * capture order; each variant launches every graph once, in a random order,
 * so that every scratch fill runs while every other graph's output holds
 * its pattern. */
static void engine_case(cpool_device *dev, const char *name, size_t unit_kib, uint64_t seed) {
    static scene sc;
    uint64_t rng = seed;
    const int variants = 2 * 2 * CAPTURE_ORDERS;
    start_case(name, seed);
    REQUIRE(scene_open(dev, &sc));
    for (int v = 0; v < variants; v++) {
        int alloc_output = v / (2 * CAPTURE_ORDERS), outputs_first = (v / CAPTURE_ORDERS) % 2;
        int order = v % CAPTURE_ORDERS;
        uint64_t lower = (unit_kib << (ENGINE_GRAPHS - 1)) * KiB;
        char what[160], sizes[96] = "";
        snprintf(what, sizeof what, "%s, outputs by %s %s the scratch, captured %s", name,
                 alloc_output ? "cpool_alloc_output" : "cpool_alloc", outputs_first ? "before" : "after",
                 order_names[order]);
        if (v > 0) REQUIRE(scene_new_pool(dev, &sc));
        for (int k = 0; k < ENGINE_GRAPHS; k++) {
            int i = order == ORDER_ASCENDING    ? k
                    : order == ORDER_DESCENDING ? ENGINE_GRAPHS - 1 - k
                                                : shuffled_order[k];
            size_t scratch = (unit_kib << i) * KiB;
            recipe r = one_scratch(scratch, scratch / 16, 1, outputs_first, alloc_output, (unsigned char)(0x10 * (i + 1)));
            REQUIRE(scene_capture(&sc, &r) == k); /* graph k of the scene is graph i of the engine */
            lower += r.out_bytes[0];
            snprintf(sizes + strlen(sizes), sizeof sizes - strlen(sizes), "%s%.2f", k ? ", " : "",
                     (double)r.scratch[0] / MiB);
        }
        printf("  %s: graphs 0 to 7 have %s MiB of scratch\n", what, sizes);
        check_graph_memory(&sc, what, lower, MARGIN, 1);
        replay_each_once(&sc, &rng, ENGINE_CHECK_ALL_EVERY);
        scene_report(&sc, what);
    }
}

/* Scratch 1 to 128 MiB, outputs 64 KiB to 8 MiB: whole pages. */
static void engine_graphs_share_pages(cpool_device *dev) { engine_case(dev, "engine", 1024, 0x9e3779b97f4a7c15ull); }

/* Scratch 1200 KiB to 150 MiB, off the page grid: outputs straddle pages
 * where they are not packed, and sizes jump by up to 128 times from one
 * capture to the next in the shuffled order, past what a guess allows at
 * first (held 174 MiB, 1.024x of the bound in pages, when no guess far
 * from the last output's size was made). */
static void engine_off_the_page_grid(cpool_device *dev) {
    engine_case(dev, "engine off the page grid", 1200, 0xbb67ae8584caa73bull);
}

/* ---- 2. batch sizes: three scratch blocks, a small output ------------------------ */

enum { BATCHES = 16, BATCH_LAUNCHES = 48 };

/* Batch b = 16, 32, .., 256: scratch blocks of b * 64, 256 and `third_kib`
 * KiB, all live together, then a 4 KiB output (by cpool_alloc, or
 * cpool_alloc_output in every other graph), then the scratch freed; each
 * order into a pool of its own. The outputs (64 KiB) need room that no
 * graph's scratch writes: where the largest graph's last page leaves them
 * room, its scratch and the outputs share that page, and graph memory is
 * at most 1% above the largest scratch; else one page more is the least. */
static void batch_sizes_case(cpool_device *dev, const char *name, size_t third_kib, uint64_t seed) {
    static scene sc;
    uint64_t rng = seed;
    start_case(name, seed);
    REQUIRE(scene_open(dev, &sc));
    for (int descending = 0; descending < 2; descending++) {
        const char *what = descending ? "batches captured largest first" : "batches captured smallest first";
        uint64_t largest = 0;
        if (descending) REQUIRE(scene_new_pool(dev, &sc));
        for (int k = 0; k < BATCHES; k++) {
            size_t b = 16 * (size_t)(descending ? BATCHES - k : k + 1);
            recipe r;
            memset(&r, 0, sizeof r);
            r.scratch[0] = b * 64 * KiB;
            r.scratch[1] = b * 256 * KiB;
            r.scratch[2] = b * third_kib * KiB;
            r.scratch_count = 3;
            r.out_bytes[0] = 4 * KiB;
            r.out_count = 1;
            r.alloc_output = k % 2;
            r.value = (unsigned char)(0x21 + 3 * k);
            REQUIRE(scene_capture(&sc, &r) == k);
            if (r.scratch[0] + r.scratch[1] + r.scratch[2] > largest) largest = r.scratch[0] + r.scratch[1] + r.scratch[2];
        }
        uint64_t lower = largest + BATCHES * 4 * KiB;
        check_graph_memory(&sc, what, lower, SMALL_OUTPUTS_MARGIN, 1);
        uint64_t pages = (largest + PAGE_BYTES - 1) / PAGE_BYTES * PAGE_BYTES;
        if (pages - largest >= BATCHES * 4 * KiB) { /* room in the last page */
            cpool_pool_stats st = stats_of(sc.pool);
            CHECK((double)st.graph_reserved_bytes <= (1.0 + SMALL_OUTPUTS_MARGIN) * (double)largest);
        }
        for (int g = 0; g < BATCHES; g++) /* every output written once, in capture order */
            if (scene_launch(&sc, g)) scene_check_all(&sc);
        replay_randomly(&sc, &rng, BATCH_LAUNCHES, 1);
        scene_report(&sc, what);
    }
}

/* The largest scratch 112 MiB, whole pages: the outputs take a page more. */
static void batch_sizes_share_pages(cpool_device *dev) {
    batch_sizes_case(dev, "batches", 128, 0x2545f4914f6cdd1dull);
}

/* The largest scratch 105 MiB: the outputs live in its last page's rest
 * (held 108 MiB, 1.029x, when every small output took a page of its own). */
static void batch_sizes_share_the_last_page(cpool_device *dev) {
    batch_sizes_case(dev, "batches with a last page's rest", 100, 0x9e3779b97f4a7c15ull);
}

/* A graph's last page, written below 1 MiB, shares the memory of the packed
 * page that holds small outputs (the outputs at its top). The graph is
 * released and its arena taken by a capture that writes the whole page:
 * the arena must give the borrowed page back for a shared one first, else
 * that capture's replays overwrite the outputs. Then a suspend and resume
 * remake the memory (both addresses must see the new page), and after a
 * trim nothing is left. */
static void borrowed_tails_go_back(cpool_device *dev) {
    static scene sc;
    const uint64_t seed = 0x5851f42d4c957f2dull;
    uint64_t rng = seed;
    start_case("borrowed tails", seed);
    REQUIRE(scene_open(dev, &sc));
    for (int mode = 0; mode < 2; mode++) {
        if (mode) REQUIRE(scene_new_pool(dev, &sc));
        recipe r = one_scratch(MiB, 4 * KiB, 1, 0, mode, 0x31);
        REQUIRE(scene_capture(&sc, &r) == 0);
        r = one_scratch(3 * MiB, 4 * KiB, 1, 0, mode, 0x32);
        REQUIRE(scene_capture(&sc, &r) == 1);
        replay_randomly(&sc, &rng, 8, 1);
        /* Graph 1's first page and the packed page (its last page too). */
        check_graph_memory(&sc, "a last page on the packed page", 3 * MiB + 8 * KiB, 0, 1);
        /* The lent bytes at the packed page's start are no block to free. */
        void *lent = (void *)((uintptr_t)sc.out[0].ptr / PAGE_BYTES * PAGE_BYTES);
        CHECK_STATUS(cpool_free(sc.pool, lent, sc.s), CPOOL_ERR_INVALID_ARGUMENT);
        scene_release_graph(&sc, 1);
        scene_free_output(&sc, &sc.out[1]);
        CHECK_OK(cpool_stream_synchronize(sc.s));
        r = one_scratch(4 * MiB, 4 * KiB, 1, 0, mode, 0x33); /* graph 1's arena, its last page whole */
        REQUIRE(scene_capture(&sc, &r) == 2);
        replay_randomly(&sc, &rng, 16, 1);
        scene_check_all(&sc);
        CHECK_OK(cpool_pool_suspend(sc.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
        CHECK_OK(cpool_pool_resume(sc.pool));
        scene_check_all(&sc);
        replay_randomly(&sc, &rng, 16, 1);
        scene_report(&sc, mode ? "borrowed tails, cpool_alloc_output" : "borrowed tails, cpool_alloc");
        scene_clear(&sc);
        CHECK(wait_graph_count(sc.pool, 0, WAIT_TIMEOUT_MS));
        CHECK_OK(cpool_stream_synchronize(sc.s));
        CHECK_OK(cpool_pool_trim(sc.pool));
        CHECK_EQ(stats_of(sc.pool).reserved_bytes, 0);
    }
}

/* Graphs in pairs: A allocates a 64 KiB and a 4 MiB output and then a
 * 4 MiB scratch, B a 16 MiB scratch and then a 64 KiB output. A's 4 MiB
 * output lies where B kept 64 KiB, far from its size: once kept, far
 * guesses are made, and B's next 16 MiB scratch, where A's 64 KiB output
 * was, is packed on a wrong guess. That may happen once in a pool: each
 * pair repacked another 16 MiB while A's turned far guesses back on. */
static void far_guesses_go_wrong_once(cpool_device *dev) {
    static scene sc;
    const uint64_t seed = 0x3c6ef372fe94f82bull;
    uint64_t rng = seed;
    start_case("far guesses", seed);
    REQUIRE(scene_open(dev, &sc));
    enum { PAIRS = 8 };
    uint64_t outputs = 0;
    for (int k = 0; k < PAIRS; k++) {
        recipe a;
        memset(&a, 0, sizeof a);
        a.scratch[0] = 4 * MiB;
        a.scratch_count = 1;
        a.out_bytes[0] = 64 * KiB;
        a.out_bytes[1] = 4 * MiB;
        a.out_count = 2;
        a.outputs_first = 1;
        a.value = (unsigned char)(0x41 + k);
        REQUIRE(scene_capture(&sc, &a) == 2 * k);
        recipe b = one_scratch(16 * MiB, 64 * KiB, 1, 0, 0, (unsigned char)(0x61 + k));
        REQUIRE(scene_capture(&sc, &b) == 2 * k + 1);
        outputs += 64 * KiB + 4 * MiB + 64 * KiB;
    }
    /* The largest scratch and the outputs, one wrong guess of 16 MiB, 2 MiB
     * more for each A, whose outputs are not packed (4.06 MiB of them on
     * 3 pages), and the page of B's packed outputs: 83 MiB. Far guesses
     * made again after a wrong one held 94 MiB here. */
    check_graph_memory(&sc, "pairs whose outputs move, far guesses",
                       16 * MiB + outputs + 16 * MiB + PAIRS * 2 * MiB + 2 * MiB, MARGIN, 1);
    replay_randomly(&sc, &rng, 4 * PAIRS, 1);
    scene_report(&sc, "far guesses");
}

/* Graphs take turns: A an 8 MiB output before an 8 MiB scratch, B a scratch
 * of 4 to 12 MiB before a 64 KiB output. Each B's scratch is where A's
 * output was, near its size: the first is packed on a wrong guess, and
 * guesses stay muted from then on, as no A between would have guessed at
 * all (they came back after each A and packed every B's scratch: 78 MiB). */
static void muted_until_guesses_are_right(cpool_device *dev) {
    static scene sc;
    const uint64_t seed = 0xa54ff53a5f1d36f1ull;
    uint64_t rng = seed;
    start_case("muted guesses", seed);
    REQUIRE(scene_open(dev, &sc));
    uint64_t lower = 12 * MiB;
    for (int k = 0; k < 4; k++) {
        recipe a = one_scratch(8 * MiB, 8 * MiB, 1, 1, 0, (unsigned char)(0x71 + k));
        REQUIRE(scene_capture(&sc, &a) == 2 * k);
        recipe b = one_scratch((size_t)(4 + 2 * k + (k == 3) * 2) * MiB, 64 * KiB, 1, 0, 0, (unsigned char)(0x81 + k));
        REQUIRE(scene_capture(&sc, &b) == 2 * k + 1);
        lower += 8 * MiB + 64 * KiB;
    }
    /* The bound, the first wrong guess (4 MiB), and a page for each B's
     * output, not packed while guesses are muted: 58 MiB. */
    check_graph_memory(&sc, "outputs and scratch taking turns", lower + 4 * MiB + 4 * 2 * MiB, MARGIN, 1);
    replay_randomly(&sc, &rng, 16, 1);
    scene_report(&sc, "muted guesses");
}

/* ---- 2b. the order of outputs and scratch changes from graph to graph ------------- */

enum { ALTERNATING_GRAPHS = 8, ALTERNATING_LAUNCHES = 48 };

/* Eight graphs, each an 8 MiB scratch and one output, the output before
 * the scratch in every other graph. A capture guesses a request to be an
 * output where the last capture kept one; a scratch block taken for one is
 * never shared, so a wrong guess costs its size for the graph's life:
 *  - outputs by cpool_alloc_output (1 MiB): the caller says which they
 *    are, so nothing is guessed: the largest scratch plus the outputs,
 *    packed (held 72 MiB against 16 when every scratch was guessed);
 *  - outputs by cpool_alloc (512 KiB): guessed, but not an 8 MiB block
 *    where a 512 KiB output was (above 1 MiB a guess stays within a
 *    factor of 2), so at most the scratch plus a page per output and one
 *    more (held 80 MiB against 26 when the scratch was guessed). */
static void alternating_orders_share_pages(cpool_device *dev) {
    static scene sc;
    const uint64_t seed = 0x6a09e667f3bcc908ull;
    uint64_t rng = seed;
    start_case("alternating", seed);
    REQUIRE(scene_open(dev, &sc));
    for (int alloc_output = 1; alloc_output >= 0; alloc_output--) {
        const char *what = alloc_output ? "outputs by cpool_alloc_output, before and after the scratch in turn"
                                        : "outputs by cpool_alloc, before and after the scratch in turn";
        size_t out_bytes = alloc_output ? MiB : 512 * KiB;
        uint64_t lower = 8 * MiB;
        if (!alloc_output) REQUIRE(scene_new_pool(dev, &sc));
        for (int k = 0; k < ALTERNATING_GRAPHS; k++) {
            recipe r = one_scratch(8 * MiB, out_bytes, 1, k % 2, alloc_output, (unsigned char)(0x31 + 5 * k));
            REQUIRE(scene_capture(&sc, &r) == k);
            /* Packed outputs add their bytes; others a page of their own. */
            lower += alloc_output ? out_bytes : PAGE_BYTES;
        }
        check_graph_memory(&sc, what, alloc_output ? lower : lower + PAGE_BYTES, MARGIN, 1);
        replay_randomly(&sc, &rng, ALTERNATING_LAUNCHES, 1);
        scene_report(&sc, what);
    }
}

/* The same with a 3 MiB scratch and 2 MiB outputs by cpool_alloc: near
 * enough in size for a guess. The second capture guesses its scratch for
 * an output (the first kept an output at that place); from then on the
 * pool mutes guesses while they would be wrong, so one scratch block is
 * packed for a graph's life, not one per graph: at most the scratch, the
 * outputs' own pages (one before the scratch, two after it, where an
 * output straddles a page boundary) and that block, each in pages (held
 * 42 MiB against 32 without the muting). */
static void wrong_guesses_are_muted(cpool_device *dev) {
    static scene sc;
    const uint64_t seed = 0x510e527fade682d1ull;
    uint64_t rng = seed;
    start_case("muted guesses", seed);
    REQUIRE(scene_open(dev, &sc));
    for (int k = 0; k < ALTERNATING_GRAPHS; k++) {
        recipe r = one_scratch(3 * MiB, 2 * MiB, 1, k % 2, 0, (unsigned char)(0x71 + 5 * k));
        REQUIRE(scene_capture(&sc, &r) == k);
    }
    check_graph_memory(&sc, "2 MiB outputs by cpool_alloc, before and after the scratch in turn",
                       4 * MiB + ALTERNATING_GRAPHS / 2 * 3 * PAGE_BYTES + 4 * MiB, MARGIN, 1);
    replay_randomly(&sc, &rng, ALTERNATING_LAUNCHES, 1);
    scene_report(&sc, "muted guesses");
}

/* ---- 2c. outputs freed while their graphs live ------------------------------------ */

/* Eight graphs keep a 3 MiB output each (cpool_alloc: pages of their own)
 * beside a 16 MiB scratch. Seven outputs are freed while every graph lives:
 * their pages go back to sharing once launches can be held (here the
 * stats), so the pool holds what one graph writes (its replays still write
 * a freed output's place: scratch now) and the live output; the live
 * output keeps its bytes. Before, the pages stayed each graph's own until
 * its release. */
static void freed_outputs_give_pages_back(cpool_device *dev) {
    static scene sc;
    const uint64_t seed = 0xbb67ae8584caa73bull;
    uint64_t rng = seed;
    start_case("freed outputs", seed);
    REQUIRE(scene_open(dev, &sc));
    for (int k = 0; k < ALTERNATING_GRAPHS; k++) {
        /* Outputs first in every other graph: no capture takes one for a
         * guessed output (packed), so each lies on pages of its graph's own. */
        recipe r = one_scratch(16 * MiB, 3 * MiB, 1, k % 2, 0, (unsigned char)(0x51 + 3 * k));
        REQUIRE(scene_capture(&sc, &r) == k);
    }
    replay_randomly(&sc, &rng, ALTERNATING_LAUNCHES, 1);
    for (int i = 0; i + 1 < sc.output_count; i++) scene_free_output(&sc, &sc.out[i]);
    CHECK_OK(cpool_stream_synchronize(sc.s));
    /* What a graph writes (its scratch and its freed output: 19 MiB) and
     * the live output, each in whole pages. */
    check_graph_memory(&sc, "seven of eight outputs freed", 20 * MiB + 4 * MiB, MARGIN, 1);
    replay_randomly(&sc, &rng, ALTERNATING_LAUNCHES, 1);
    check_graph_memory(&sc, "after more launches", 20 * MiB + 4 * MiB, MARGIN, 1);
    scene_report(&sc, "freed outputs");
}

/* ---- 3. random captures, replays, frees and releases ----------------------------- */

enum { RANDOM_STEPS = 200, RANDOM_MAX_GRAPHS = 12, RANDOM_MAX_OUTPUTS = 24 };

/* A random live output or graph; -1 if there is none. */
static int random_live_output(const scene *sc, uint64_t *rng) {
    int n = scene_live_outputs(sc), k;
    if (n == 0) return -1;
    k = (int)rng_below(rng, (unsigned)n);
    for (int i = 0; i < sc->output_count; i++)
        if (sc->out[i].ptr && k-- == 0) return i;
    return -1;
}
static int random_live_graph(const scene *sc, uint64_t *rng) {
    int n = scene_live_graphs(sc), k;
    if (n == 0) return -1;
    k = (int)rng_below(rng, (unsigned)n);
    for (int g = 0; g < sc->graph_count; g++)
        if (sc->graph[g] && k-- == 0) return g;
    return -1;
}

/* Each step captures a graph (scratch 1-16 MiB, 1-3 outputs of 4 KiB-4 MiB,
 * by either function, before or after the scratch), launches a random live
 * graph, frees a random output (outside capture, its graph may live on) or
 * releases a random graph (its outputs live on); every live output is
 * checked after every step. */
static void random_steps_keep_outputs(cpool_device *dev) {
    static scene sc;
    const uint64_t seed = 0xd1b54a32d192ed03ull;
    uint64_t rng = seed;
    int captures = 0, frees = 0, releases = 0;
    static char when[96];
    start_case("random steps", seed);
    REQUIRE(scene_open(dev, &sc));
    for (int step = 0; step < RANDOM_STEPS; step++) {
        unsigned action = rng_below(&rng, 10);
        int live_graphs = scene_live_graphs(&sc);
        if (scene_live_outputs(&sc) >= RANDOM_MAX_OUTPUTS)
            action = 7; /* free one */
        else if (live_graphs == 0)
            action = 0; /* capture one */
        if (action <= 2 && live_graphs < RANDOM_MAX_GRAPHS) {
            recipe r;
            memset(&r, 0, sizeof r);
            r.scratch[0] = rng_size(&rng, 1 * MiB, 16 * MiB);
            r.scratch_count = 1;
            r.out_count = 1 + (int)rng_below(&rng, 3);
            for (int i = 0; i < r.out_count; i++) {
                r.out_bytes[i] = rng_size(&rng, 4 * KiB, 4 * MiB);
                if (r.out_bytes[i] > r.scratch[0]) r.out_bytes[i] = r.scratch[0];
            }
            r.outputs_first = (int)rng_below(&rng, 2);
            r.alloc_output = (int)rng_below(&rng, 2);
            r.value = (unsigned char)rng_below(&rng, 256);
            if (scene_capture(&sc, &r) >= 0) captures++;
            snprintf(when, sizeof when, "at step %d, after capturing graph %d", step, sc.graph_count - 1);
            sc.when = when;
        } else if (action <= 6) {
            int g = random_live_graph(&sc, &rng);
            if (g >= 0) scene_launch(&sc, g);
        } else if (action <= 8) {
            int o = random_live_output(&sc, &rng);
            if (o >= 0) {
                scene_free_output(&sc, &sc.out[o]);
                frees++;
                snprintf(when, sizeof when, "at step %d, after freeing graph %d output %d", step, sc.out[o].graph,
                         sc.out[o].index);
                sc.when = when;
            }
        } else {
            int g = random_live_graph(&sc, &rng);
            if (g >= 0) {
                scene_release_graph(&sc, g);
                releases++;
                snprintf(when, sizeof when, "at step %d, after releasing graph %d", step, g);
                sc.when = when;
            }
        }
        scene_check_all(&sc);
    }
    printf("  random steps: %d captures, %d outputs freed, %d graphs released; at the end %d graphs, %d outputs "
           "live\n",
           captures, frees, releases, scene_live_graphs(&sc), scene_live_outputs(&sc));
    scene_report(&sc, "random steps");
}

/* ---- 4. graphed calls into one shared pool ------------------------------------- */

enum { CALLS = 8, CALL_LAUNCHES = 64 };

/* A body whose scratch is freed and whose output is kept; graphed_call runs
 * it eagerly once, then captures it. */
typedef struct call_body {
    cpool_pool *pool;
    size_t scratch_bytes, out_bytes;
    int outputs_first;
    unsigned char value;
    uint32_t tag;
    int runs;
    void *eager_out, *captured_out;
} call_body;

static cpool_status call_body_fn(cpool_stream *s, void *arg) {
    call_body *b = (call_body *)arg;
    void *scratch = NULL, *out = NULL;
    cpool_capture_state state = CPOOL_CAPTURE_NONE;
    cpool_status st = cpool_capture_status(s, &state);
    b->runs++;
    if (st == CPOOL_OK && b->outputs_first) st = cpool_alloc(b->pool, b->out_bytes, s, &out);
    if (st == CPOOL_OK) st = cpool_alloc(b->pool, b->scratch_bytes, s, &scratch);
    if (st == CPOOL_OK && !b->outputs_first) st = cpool_alloc(b->pool, b->out_bytes, s, &out);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, b->value, b->scratch_bytes);
    if (st == CPOOL_OK) st = enqueue_output_fill(s, out, scratch, b->out_bytes, b->tag);
    if (st == CPOOL_OK) st = cpool_free(b->pool, scratch, s);
    if (state == CPOOL_CAPTURE_ACTIVE)
        b->captured_out = out;
    else
        b->eager_out = out;
    return st;
}

static void graphed_calls_share_pages(cpool_device *dev) {
    static scene sc;
    static call_body body[CALLS];
    const uint64_t seed = 0xa0761d6478bd642full;
    uint64_t rng = seed;
    uint64_t lower = 0;
    start_case("graphed calls", seed);
    REQUIRE(scene_open(dev, &sc));
    for (int i = 0; i < CALLS; i++) {
        call_body *b = &body[i];
        cpool_graph *graph = NULL;
        cpool_status st;
        memset(b, 0, sizeof *b);
        b->pool = sc.pool;
        b->scratch_bytes = (size_t)(3 + 5 * ((i * 3) % CALLS)) * MiB; /* 3 to 38 MiB, not in capture order */
        b->out_bytes = (size_t)(16 << (i % 5)) * KiB;
        b->outputs_first = i % 2;
        b->value = (unsigned char)(0x31 + i);
        b->tag = sc.next_tag++;
        st = cpool_graphed_call(sc.s, sc.pool, CPOOL_CAPTURE_GLOBAL, 1, call_body_fn, b, &graph);
        if (!CHECK_STATUS(st, CPOOL_OK)) {
            printf("  graph %d: cpool_graphed_call failed\n", i);
            return;
        }
        scene_add_graph(&sc, graph);
        CHECK_EQ(b->runs, 2);
        REQUIRE(b->eager_out && b->captured_out);
        /* The eager run's output is the caller's own memory: it holds the pattern, then goes. */
        sc.when = "after the eager run";
        scene_check_output(&sc, &(output){b->eager_out, b->out_bytes, i, -1, b->tag, 1});
        CHECK_OK(cpool_free(sc.pool, b->eager_out, sc.s));
        scene_add_output(&sc, i, 0, b->captured_out, b->out_bytes, b->tag);
        if (b->scratch_bytes > lower) lower = b->scratch_bytes;
    }
    for (int i = 0; i < CALLS; i++) lower += body[i].out_bytes;
    check_graph_memory(&sc, "graphed calls", lower, MARGIN, 1);
    replay_randomly(&sc, &rng, CALL_LAUNCHES, 1);
    scene_report(&sc, "graphed calls");
}

/* ---- 5. a thousand graphs in one pool ---------------------------------------------- */

enum { MANY_GRAPHS = 1000 };

/* Each graph: a 1 MiB scratch and a 4 KiB output, allocated before the
 * scratch in every other graph. All captured, each launched once in a random
 * order, every output checked, all released and freed; the pool then trims
 * to nothing. */
static void thousand_graphs_then_trim(cpool_device *dev) {
    static scene sc;
    const uint64_t seed = 0xe7037ed1a0b428dbull;
    uint64_t rng = seed;
    static int order[MANY_GRAPHS];
    cpool_pool_stats st;
    start_case("a thousand graphs", seed);
    REQUIRE(scene_open(dev, &sc));
    for (int k = 0; k < MANY_GRAPHS; k++) {
        recipe r = one_scratch(1 * MiB, 4 * KiB, 1, k % 2, 0, (unsigned char)k);
        REQUIRE(scene_capture(&sc, &r) == k);
        order[k] = k;
    }
    /* Printed, not held: this case is about counts and the trim. */
    check_graph_memory(&sc, "a thousand graphs", 1 * MiB + MANY_GRAPHS * 4 * KiB, MARGIN, 0);
    shuffle(order, MANY_GRAPHS, &rng);
    for (int k = 0; k < MANY_GRAPHS; k++)
        if (scene_launch(&sc, order[k])) scene_check_graph_outputs(&sc, order[k]);
    sc.when = "after every graph was launched once";
    scene_check_all(&sc);
    scene_report(&sc, "a thousand graphs");
    scene_clear(&sc);
    CHECK(wait_graph_count(sc.pool, 0, WAIT_TIMEOUT_MS));
    CHECK_OK(cpool_stream_synchronize(sc.s));
    CHECK_OK(cpool_pool_trim(sc.pool));
    st = stats_of(sc.pool);
    CHECK_EQ(st.allocated_bytes, 0);
    CHECK_EQ(st.graph_reserved_bytes, 0);
    CHECK_EQ(st.reserved_bytes, 0);
}

/* Forty graphs keep three 256 KiB outputs each in the packed region (30
 * MiB). All but the first are released and their outputs freed: a trim
 * gives the packed pages back while that graph still holds the pool (they
 * went only once no graph held it), and its outputs keep their bytes. */
static void packed_pages_go_back_while_a_graph_lives(cpool_device *dev) {
    enum { PACKED_GRAPHS = 40 };
    static scene sc;
    const uint64_t seed = 0x3c6ef372fe94f82bull;
    uint64_t rng = seed;
    start_case("packed pages", seed);
    REQUIRE(scene_open(dev, &sc));
    for (int k = 0; k < PACKED_GRAPHS; k++) {
        recipe r = one_scratch(1 * MiB, 256 * KiB, 3, 0, 1, (unsigned char)(7 * k));
        REQUIRE(scene_capture(&sc, &r) == k);
    }
    replay_randomly(&sc, &rng, PACKED_GRAPHS, 1);
    for (int g = 1; g < PACKED_GRAPHS; g++) scene_release_graph(&sc, g);
    for (int i = 3; i < sc.output_count; i++) scene_free_output(&sc, &sc.out[i]);
    CHECK(wait_graph_count(sc.pool, 1, WAIT_TIMEOUT_MS));
    CHECK_OK(cpool_stream_synchronize(sc.s));
    CHECK_OK(cpool_pool_trim(sc.pool));
    /* The first graph's scratch and its three outputs, in pages. */
    check_graph_memory(&sc, "one graph of forty left", 2 * MiB + 2 * MiB, MARGIN, 1);
    replay_randomly(&sc, &rng, 8, 1);
    scene_report(&sc, "packed pages");
}

/* A graph with a 64 MiB scratch keeps one small output (256 bytes, in the
 * packed region; 8 KiB, on a page of its arena's own) and is released: a
 * trim gives its scratch pages back while the output lives (they stayed
 * until the output was freed), the output keeps its bytes, and a later
 * capture and the output's free work as ever. */
static void released_graph_gives_its_scratch_back(cpool_device *dev) {
    static scene sc;
    const uint64_t seed = 0x1f83d9abfb41bd6bull;
    uint64_t rng = seed;
    start_case("released scratch", seed);
    REQUIRE(scene_open(dev, &sc));
    const size_t outputs[] = {256, 8 * KiB};
    for (int v = 0; v < 2; v++) {
        if (v) REQUIRE(scene_new_pool(dev, &sc));
        recipe r = one_scratch(64 * MiB, outputs[v], 1, 0, 0, (unsigned char)(0x90 + v));
        REQUIRE(scene_capture(&sc, &r) == 0);
        replay_randomly(&sc, &rng, 2, 1);
        scene_release_graph(&sc, 0);
        CHECK(wait_graph_count(sc.pool, 0, WAIT_TIMEOUT_MS));
        CHECK_OK(cpool_stream_synchronize(sc.s));
        CHECK_OK(cpool_pool_trim(sc.pool));
        check_graph_memory(&sc, v ? "graph released, an 8 KiB output left" : "graph released, a 256 B output left",
                           outputs[v], MARGIN, 1);
        r = one_scratch(32 * MiB, 4 * KiB, 1, 0, 0, (unsigned char)(0xa0 + v));
        REQUIRE(scene_capture(&sc, &r) == 1);
        replay_randomly(&sc, &rng, 4, 1);
        scene_report(&sc, "released scratch");
    }
}

/* ---- 6. captures over two streams ------------------------------------------------ */

enum { TWO_STREAM_GRAPHS = 4, TWO_STREAM_LAUNCHES = 40 };

typedef struct two_stream_ctx {
    cpool_pool *pool;
    cpool_stream *side;
    cpool_event *fork, *join;
    size_t scratch_bytes[2], out_bytes[2]; /* [0] the origin's branch, [1] the side's */
    unsigned char value;
    uint32_t tag[2];
    void *out[2];
} two_stream_ctx;

/* One branch: its scratch, filled, its output from it, the scratch freed.
 * The output is allocated before the scratch on the side branch, after it
 * on the origin's. */
static cpool_status branch(two_stream_ctx *c, int side, cpool_stream *s) {
    void *scratch = NULL;
    cpool_status st = side ? cpool_alloc(c->pool, c->out_bytes[side], s, &c->out[side]) : CPOOL_OK;
    if (st == CPOOL_OK) st = cpool_alloc(c->pool, c->scratch_bytes[side], s, &scratch);
    if (st == CPOOL_OK && !side) st = cpool_alloc(c->pool, c->out_bytes[side], s, &c->out[side]);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, c->value + side, c->scratch_bytes[side]);
    if (st == CPOOL_OK) st = enqueue_output_fill(s, c->out[side], scratch, c->out_bytes[side], c->tag[side]);
    if (st == CPOOL_OK) st = cpool_free(c->pool, scratch, s);
    return st;
}

static cpool_status two_stream_body(cpool_stream *s, void *arg) {
    two_stream_ctx *c = (two_stream_ctx *)arg;
    cpool_status st = cpool_event_record(c->fork, s);
    if (st == CPOOL_OK) st = cpool_stream_wait_event(c->side, c->fork); /* the side joins the capture */
    if (st == CPOOL_OK) st = branch(c, 1, c->side);
    if (st == CPOOL_OK) st = branch(c, 0, s);
    if (st == CPOOL_OK) st = cpool_event_record(c->join, c->side);
    if (st == CPOOL_OK) st = cpool_stream_wait_event(s, c->join); /* and goes back */
    return st;
}

typedef struct two_streams {
    cpool_stream *side;
    cpool_event *fork, *join;
} two_streams;
static void two_streams_close_(void *arg) {
    two_streams *t = (two_streams *)arg;
    cpool_event_destroy(t->join);
    cpool_event_destroy(t->fork);
    cpool_stream_destroy(t->side);
    memset(t, 0, sizeof *t);
}

/* Four graphs, each forking a second stream; both branches have a scratch
 * and an output of their own (graph g: scratch (g + 1) and 2 (g + 1) MiB,
 * outputs (g + 1) * 64 and 32 KiB). */
static void two_stream_graphs_share_pages(cpool_device *dev) {
    static scene sc;
    static two_streams t;
    const uint64_t seed = 0x8ebc6af09c88c6e3ull;
    uint64_t rng = seed;
    uint64_t lower = 0;
    start_case("two streams", seed);
    REQUIRE(scene_open(dev, &sc));
    memset(&t, 0, sizeof t);
    check_defer(two_streams_close_, &t);
    REQUIRE_OK(cpool_stream_create(dev, &t.side));
    REQUIRE_OK(cpool_event_create(dev, &t.fork));
    REQUIRE_OK(cpool_event_create(dev, &t.join));
    for (int g = 0; g < TWO_STREAM_GRAPHS; g++) {
        two_stream_ctx c;
        cpool_graph *graph = NULL;
        cpool_status st;
        memset(&c, 0, sizeof c);
        c.pool = sc.pool;
        c.side = t.side;
        c.fork = t.fork;
        c.join = t.join;
        c.scratch_bytes[0] = (size_t)(g + 1) * MiB;
        c.scratch_bytes[1] = (size_t)(g + 1) * 2 * MiB;
        c.out_bytes[0] = (size_t)(g + 1) * 64 * KiB;
        c.out_bytes[1] = (size_t)(g + 1) * 32 * KiB;
        c.value = (unsigned char)(0x41 + 2 * g);
        c.tag[0] = sc.next_tag++;
        c.tag[1] = sc.next_tag++;
        st = cpool_capture(sc.s, sc.pool, CPOOL_CAPTURE_GLOBAL, two_stream_body, &c, &graph);
        if (!CHECK_STATUS(st, CPOOL_OK)) {
            printf("  graph %d: the two-stream capture failed\n", g);
            return;
        }
        scene_add_graph(&sc, graph);
        for (int b = 0; b < 2; b++) scene_add_output(&sc, g, b, c.out[b], c.out_bytes[b], c.tag[b]);
        /* Both branches' scratch may run at once: the lower bound is their sum. */
        if (c.scratch_bytes[0] + c.scratch_bytes[1] > lower) lower = c.scratch_bytes[0] + c.scratch_bytes[1];
        lower += c.out_bytes[0] + c.out_bytes[1];
    }
    /* Printed, not held: this case is about branches. */
    check_graph_memory(&sc, "two streams", lower, MARGIN, 0);
    replay_randomly(&sc, &rng, TWO_STREAM_LAUNCHES, 1);
    scene_report(&sc, "two streams");
}

/* ---- 0. the check is real --------------------------------------------------------- */

/* One byte of an output changed outside any graph is seen, at its place;
 * the graph's next launch writes it back. */
static void check_sees_one_changed_byte(cpool_device *dev) {
    static scene sc;
    const size_t changed = 12345;
    size_t at = 0;
    unsigned char unit[8];
    recipe r;
    memset(&r, 0, sizeof r);
    r.scratch[0] = 1 * MiB;
    r.scratch_count = 1;
    r.out_bytes[0] = 64 * KiB;
    r.out_count = 1;
    r.value = 0x77;
    REQUIRE(scene_open(dev, &sc));
    REQUIRE(scene_capture(&sc, &r) == 0);
    REQUIRE(scene_launch(&sc, 0));
    CHECK_EQ(output_bytes_wrong(&sc, &sc.out[0], &at), 0);
    pattern_unit(sc.out[0].tag, unit);
    CHECK_OK(cpool_memset_async(sc.s, (unsigned char *)sc.out[0].ptr + changed, ~unit[changed % 8] & 0xff, 1));
    CHECK_EQ(output_bytes_wrong(&sc, &sc.out[0], &at), 1);
    CHECK_EQ(at, changed);
    REQUIRE(scene_launch(&sc, 0));
    CHECK_EQ(output_bytes_wrong(&sc, &sc.out[0], &at), 0);
}

/* A capture that allocates nothing but frees a small output of an earlier
 * graph, in a capture that fails and in one that ends: the block is that
 * capture's graph's alone while the graph lives, and once everything is
 * released a trim gives every byte back. */
static cpool_status body_free_only(cpool_stream *s, void *ctx) {
    void **ptrs = ctx;
    cpool_status st = cpool_free((cpool_pool *)ptrs[0], ptrs[1], s);
    return st == CPOOL_OK && ptrs[2] ? CPOOL_ERR_BACKEND : st; /* ptrs[2]: fail the body */
}

static cpool_status body_small_output(cpool_stream *s, void *ctx) {
    void **ptrs = ctx;
    cpool_status st = cpool_alloc((cpool_pool *)ptrs[0], 2, s, &ptrs[1]);
    if (st == CPOOL_OK) st = cpool_memset_async(s, ptrs[1], 1, 2);
    return st;
}

static void freed_in_a_later_capture_then_trimmed(cpool_device *dev) {
    cpool_stream *s;
    cpool_pool *pool;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    for (int fail = 0; fail < 2; fail++) {
        void *ptrs[3] = {pool, NULL, NULL};
        cpool_graph *g = NULL, *h = NULL;
        CHECK_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_small_output, ptrs, &g));
        ptrs[2] = fail ? ptrs : NULL;
        cpool_status st = cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_free_only, ptrs, &h);
        CHECK_EQ(st, fail ? CPOOL_ERR_BACKEND : CPOOL_OK);
        if (g) CHECK_OK(cpool_graph_launch(g, s));
        if (h) CHECK_OK(cpool_graph_launch(h, s));
        CHECK_OK(cpool_stream_synchronize(s));
        cpool_graph_release(g);
        cpool_graph_release(h);
        CHECK_OK(cpool_pool_trim(pool));
        cpool_pool_stats st2 = stats_of(pool);
        CHECK_EQ(st2.reserved_bytes, 0);
        CHECK_EQ(st2.graph_reserved_bytes, 0);
    }
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* A graph released while its launch still runs leaves its arena idle; a
 * capture that took it at once could move its pages (its output's page to
 * memory of its own, shared pages to lower numbers) while the launch still
 * writes them, and the launch would write the new graph's page. The launch
 * here waits at a gate, then fills its scratch; the new graph's output,
 * filled eagerly meanwhile, must keep its bytes. The capture must not wait
 * for the launch either (cpool_graph_release does not, nor may a capture:
 * other streams may wait on the capturing thread). */
typedef struct gated_fill {
    cpool_pool *pool;
    int gate;   /* opened (1) by the test */
    int passed; /* set once a launch got through the gate */
    size_t bytes;
} gated_fill;

static void cb_wait_gate(void *arg) {
    gated_fill *f = arg;
    (void)wait_for_int(&f->gate, 1, 5000);
    astore(&f->passed, 1);
}

static cpool_status body_gated_fill(cpool_stream *s, void *ctx) {
    gated_fill *f = ctx;
    void *scratch = NULL;
    cpool_status st = cpool_alloc(f->pool, f->bytes, s, &scratch);
    if (st == CPOOL_OK) st = cpool_launch_host(s, cb_wait_gate, f);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, 0x01, f->bytes);
    if (scratch && st == CPOOL_OK) st = cpool_free(f->pool, scratch, s);
    return st;
}

/* ptrs[0] the pool; ptrs[1] gets a 1 MiB output, allocated first. */
static cpool_status body_output_first(cpool_stream *s, void *ctx) {
    void **ptrs = ctx;
    return cpool_alloc((cpool_pool *)ptrs[0], 1 * MiB, s, &ptrs[1]);
}

static void released_graph_still_running_keeps_its_pages(cpool_device *dev) {
    cpool_stream *s, *t;
    cpool_pool *pool;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &t));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    gated_fill keep = {pool, 1, 0, 6 * MiB}, fill = {pool, 1, 0, 6 * MiB};
    cpool_graph *g0 = NULL, *g1 = NULL, *g2 = NULL;
    /* g0 keeps the first shared pages mapped by a second arena. */
    REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_gated_fill, &keep, &g0));
    REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_gated_fill, &fill, &g1));
    astore(&fill.gate, 0);
    CHECK_OK(cpool_graph_launch(g1, s)); /* held at the gate */
    cpool_graph_release(g1);
    void *ptrs[2] = {pool, NULL};
    CHECK_OK(cpool_capture(t, pool, CPOOL_CAPTURE_GLOBAL, body_output_first, ptrs, &g2));
    if (ptrs[1]) {
        CHECK_OK(cpool_memset_async(t, ptrs[1], 0x33, 1 * MiB));
        CHECK_OK(cpool_stream_synchronize(t));
    }
    CHECK_EQ(aload(&fill.passed), 0); /* nothing waited for the launch */
    astore(&fill.gate, 1);
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&fill.passed), 1);
    if (ptrs[1]) {
        CHECK_BYTES(t, ptrs[1], 1 * MiB, 0x33);
        CHECK_OK(cpool_free(pool, ptrs[1], t));
    }
    cpool_graph_release(g0);
    cpool_graph_release(g2);
    cpool_pool_release(pool);
    cpool_stream_destroy(t);
    cpool_stream_destroy(s);
}

static void *open_gate_later(void *gate) {
    sleep_ms(20);
    astore(gate, 1);
    return NULL;
}

/* As above, with the old launch on two streams at once, on a stream
 * destroyed before the next capture (its destroy waits for the launch), and
 * on a stream that captures when the graph is released (the launch came
 * before that capture began): a graph's launches on every stream count,
 * and a released graph whose
 * launches are over leaves its arena to the next capture again, so
 * arenas do not pile up however often a graph is released while it runs.
 * Each round's output then reuses the page of the round before: graph
 * memory stays as it was after the first rounds. */
static void released_arenas_serve_again_once_their_work_is_over(cpool_device *dev) {
    cpool_stream *s, *t;
    cpool_pool *pool;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &t));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    cpool_event *after_s;
    REQUIRE_OK(cpool_event_create(dev, &after_s));
    uint64_t settled = 0;
    enum { ROUNDS = 26 };
    for (int round = 0; round < ROUNDS; round++) {
        gated_fill fill = {pool, 1, 0, 6 * MiB};
        cpool_graph *g = NULL, *h = NULL;
        cpool_stream *u = NULL;
        REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_gated_fill, &fill, &g));
        astore(&fill.gate, 0);
        cpool_graph *empty = NULL;
        if (round % 4 == 2) {
            /* On a stream of its own, destroyed before the next capture
             * once the gate opens (a thread opens it later). */
            REQUIRE_OK(cpool_stream_create(dev, &u));
            CHECK_OK(cpool_graph_launch(g, u));
            cpool_graph_release(g);
            pthread_t th;
            REQUIRE(pthread_create(&th, NULL, open_gate_later, &fill.gate) == 0);
            cpool_stream_destroy(u);
            pthread_join(th, NULL);
            CHECK_EQ(aload(&fill.passed), 1);
        } else {
            CHECK_OK(cpool_graph_launch(g, s));
            if (round % 4 == 1) {
                /* Once more on t, after the launch on s (replays one at a time). */
                CHECK_OK(cpool_event_record(after_s, s));
                CHECK_OK(cpool_stream_wait_event(t, after_s));
                CHECK_OK(cpool_graph_launch(g, t));
            }
            if (round % 4 == 3) CHECK_OK(cpool_capture_begin(s, NULL, CPOOL_CAPTURE_RELAXED));
            cpool_graph_release(g);
        }
        void *ptrs[2] = {pool, NULL};
        CHECK_OK(cpool_capture(t, pool, CPOOL_CAPTURE_GLOBAL, body_output_first, ptrs, &h));
        if (ptrs[1]) CHECK_OK(cpool_memset_async(t, ptrs[1], 0x33, 1 * MiB));
        if (round % 4 == 3) {
            CHECK_OK(cpool_capture_end(s, &empty));
            cpool_graph_release(empty);
        }
        astore(&fill.gate, 1);
        CHECK_OK(cpool_stream_synchronize(s));
        CHECK_OK(cpool_stream_synchronize(t));
        if (ptrs[1]) {
            CHECK_BYTES(t, ptrs[1], 1 * MiB, 0x33);
            CHECK_OK(cpool_free(pool, ptrs[1], t));
        }
        cpool_graph_release(h);
        /* Rounds 2 to 5 show each of the four ways once: later rounds
         * hold no more than the most of those (a released graph's arena
         * whose work is over may stay for the next capture, or go). */
        uint64_t now = stats_of(pool).graph_reserved_bytes;
        if (round >= 2 && round <= 5 && now > settled) settled = now;
        if (round > 5) CHECK_LE(now, settled);
    }
    CHECK_LE(settled, 8 * MiB);
    printf("  rounds: graph_reserved_bytes %.2f MiB after %d rounds\n", (double)settled / MiB, ROUNDS);
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_EQ(stats_of(pool).graph_reserved_bytes, 0);
    cpool_event_destroy(after_s);
    cpool_pool_release(pool);
    cpool_stream_destroy(t);
    cpool_stream_destroy(s);
}

/* An output of a released graph, read by eager work that is still running
 * when the output is freed: its arena turns idle at that free, and the next
 * capture must not move the page under the read. The read here waits at a
 * gate, then copies the output; the copy must see the bytes the output had
 * before its free. */
static void cb_wait_plain_gate(void *arg) { (void)wait_for_int(arg, 1, 5000); }

static void freed_output_still_read_keeps_its_page(cpool_device *dev) {
    cpool_stream *s, *t;
    cpool_pool *pool;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &t));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    gated_fill keep = {pool, 1, 0, 6 * MiB};
    cpool_graph *g0 = NULL, *g1 = NULL, *g2 = NULL;
    /* g0 keeps the first shared pages mapped by a second arena. */
    REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_gated_fill, &keep, &g0));
    void *out1[2] = {pool, NULL}, *out2[2] = {pool, NULL};
    REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_output_first, out1, &g1));
    REQUIRE(out1[1] != NULL);
    CHECK_OK(cpool_memset_async(s, out1[1], 0x44, 1 * MiB));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_graph_release(g1); /* its output lives on */
    unsigned char *host = malloc(1 * MiB);
    REQUIRE(host != NULL);
    memset(host, 0, 1 * MiB);
    int gate = 0;
    CHECK_OK(cpool_launch_host(s, cb_wait_plain_gate, &gate));
    CHECK_OK(cpool_memcpy_async(s, host, out1[1], 1 * MiB));
    CHECK_OK(cpool_free(pool, out1[1], s)); /* after its last use, in stream order */
    CHECK_OK(cpool_capture(t, pool, CPOOL_CAPTURE_GLOBAL, body_output_first, out2, &g2));
    if (out2[1]) {
        CHECK_OK(cpool_memset_async(t, out2[1], 0x33, 1 * MiB));
        CHECK_OK(cpool_stream_synchronize(t));
    }
    astore(&gate, 1);
    CHECK_OK(cpool_stream_synchronize(s));
    size_t wrong = 0;
    for (size_t i = 0; i < 1 * MiB; i++) wrong += host[i] != 0x44;
    CHECK_EQ(wrong, 0);
    if (out2[1]) {
        CHECK_BYTES(t, out2[1], 1 * MiB, 0x33);
        CHECK_OK(cpool_free(pool, out2[1], t));
    }
    free(host);
    cpool_graph_release(g0);
    cpool_graph_release(g2);
    cpool_pool_release(pool);
    cpool_stream_destroy(t);
    cpool_stream_destroy(s);
}

/* The graph of a pool of graph memory alone, with no eager block: a scratch
 * and an output of its own. */
static cpool_status body_scratch_and_output(cpool_stream *s, void *ctx) {
    void **ptrs = ctx;
    void *scratch;
    cpool_status st = cpool_alloc((cpool_pool *)ptrs[0], 3 * MiB, s, &scratch);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, 0x5a, 3 * MiB);
    if (st == CPOOL_OK) st = cpool_alloc_output((cpool_pool *)ptrs[0], 64 * KiB, s, &ptrs[1]);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, ptrs[1], scratch, 64 * KiB);
    if (st == CPOOL_OK) st = cpool_free((cpool_pool *)ptrs[0], scratch, s);
    return st;
}

/* A pool that holds graph memory and no eager block (the pool of an
 * engine's graphs) suspends and resumes in both modes: all of it given
 * back, the output's bytes kept by KEEP_CONTENTS, the graph rewriting them
 * after DISCARD. */
static void graph_memory_alone_suspends(cpool_device *dev) {
    cpool_stream *s;
    cpool_pool *pool;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    void *ptrs[2] = {pool, NULL};
    cpool_graph *g;
    REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_scratch_and_output, ptrs, &g));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK(stats_of(pool).allocated_bytes == 64 * KiB);
    for (int mode = CPOOL_SUSPEND_KEEP_CONTENTS; mode <= CPOOL_SUSPEND_DISCARD; mode++) {
        CHECK_OK(cpool_pool_suspend(pool, (cpool_suspend_mode)mode));
        CHECK_EQ(stats_of(pool).reserved_bytes, 0);
        CHECK_OK(cpool_pool_resume(pool));
        if (mode == CPOOL_SUSPEND_DISCARD) CHECK_OK(cpool_graph_launch(g, s));
        unsigned char got[64 * KiB];
        CHECK_OK(cpool_memcpy_async(s, got, ptrs[1], sizeof got));
        CHECK_OK(cpool_stream_synchronize(s));
        size_t wrong = 0;
        for (size_t i = 0; i < sizeof got; i++) wrong += got[i] != 0x5a;
        CHECK_EQ(wrong, 0);
    }
    cpool_graph_release(g);
    CHECK_OK(cpool_free(pool, ptrs[1], s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* ---- 12. runs: a fresh capture's pages in one allocation ------------------------- */

/* Graph memory a pool did not have yet is made as one allocation (a run),
 * which later captures split to share it page by page, but never while a
 * launch of its graph may run. */
typedef struct run_graph {
    cpool_pool *pool;
    gated_fill *gate; /* NULL: no gate */
    unsigned char value;
    void *out;
} run_graph;

static cpool_status body_run_graph(cpool_stream *s, void *ctx) {
    run_graph *r = ctx;
    void *scratch = NULL;
    cpool_status st = cpool_alloc(r->pool, 32 * MiB, s, &scratch);
    if (st == CPOOL_OK && r->gate) st = cpool_launch_host(s, cb_wait_gate, r->gate);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, r->value, 32 * MiB);
    if (st == CPOOL_OK) st = cpool_alloc(r->pool, 1 * MiB, s, &r->out);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, r->out, scratch, 1 * MiB);
    if (scratch && st == CPOOL_OK) st = cpool_free(r->pool, scratch, s);
    return st;
}

/* Graph a's scratch is a run, and a's launch waits at a gate while b is
 * captured: b must not take a's pages then (splitting the run would move
 * them under the launch), so it holds memory of its own; once the device
 * is idle a trim settles b onto a's pages, back at the bound, and replays
 * in any order keep both outputs. */
static void running_run_is_left_whole_then_settles(cpool_device *dev) {
    cpool_stream *s, *t;
    cpool_pool *pool;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &t));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    gated_fill gate = {.gate = 0};
    run_graph a = {pool, &gate, 0xa1, NULL}, b = {pool, NULL, 0xb2, NULL};
    cpool_graph *ga, *gb;
    /* The scratch, and a page for each output. */
    const uint64_t bound = 32 * MiB + 2 * PAGE_BYTES;
    REQUIRE_OK(cpool_capture(t, pool, CPOOL_CAPTURE_GLOBAL, body_run_graph, &a, &ga));
    CHECK_LE(stats_of(pool).graph_reserved_bytes, bound);
    CHECK_OK(cpool_graph_launch(ga, s)); /* held at the gate */
    REQUIRE_OK(cpool_capture(t, pool, CPOOL_CAPTURE_GLOBAL, body_run_graph, &b, &gb));
    uint64_t while_running = stats_of(pool).graph_reserved_bytes;
    CHECK(while_running > bound);
    CHECK_EQ(aload(&gate.passed), 0);
    astore(&gate.gate, 1);
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_BYTES(s, a.out, 1 * MiB, 0xa1);
    CHECK_OK(cpool_pool_trim(pool));
    uint64_t settled = stats_of(pool).graph_reserved_bytes;
    CHECK_LE(settled, bound);
    printf("  graph memory: %.1f MiB while a ran, %.1f MiB after the trim (bound %.1f)\n",
           (double)while_running / MiB, (double)settled / MiB, (double)bound / MiB);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int launched[2] = {0, 0};
    for (int k = 0; k < 24; k++) {
        int x = (int)rng_below(&rng, 2);
        CHECK_OK(cpool_graph_launch(x ? gb : ga, s));
        launched[x] = 1;
        if (launched[0]) CHECK_BYTES(s, a.out, 1 * MiB, 0xa1);
        if (launched[1]) CHECK_BYTES(s, b.out, 1 * MiB, 0xb2);
    }
    cpool_graph_release(ga);
    cpool_graph_release(gb);
    CHECK_OK(cpool_free(pool, a.out, s));
    CHECK_OK(cpool_free(pool, b.out, s));
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_EQ(stats_of(pool).graph_reserved_bytes, 0);
    cpool_pool_release(pool);
    cpool_stream_destroy(t);
    cpool_stream_destroy(s);
}

enum { RACE_LAUNCHES = 200, RACE_CAPTURES = 12 };

typedef struct run_race {
    cpool_graph *g;
    cpool_stream *s;
    const void *out;
    pthread_mutex_t *running; /* held while a graph of the pool runs: they never run at once */
    int failures;
} run_race;

/* Launches the graph over and over, reading its output back each time. */
static void *launch_over_and_over(void *arg) {
    run_race *r = arg;
    unsigned char got[4096];
    for (int k = 0; k < RACE_LAUNCHES; k++) {
        pthread_mutex_lock(r->running);
        bool ok = cpool_graph_launch(r->g, r->s) == CPOOL_OK &&
                  cpool_memcpy_async(r->s, got, r->out, sizeof got) == CPOOL_OK &&
                  cpool_stream_synchronize(r->s) == CPOOL_OK;
        pthread_mutex_unlock(r->running);
        for (size_t i = 0; ok && i < sizeof got; i++) ok = got[i] == 0xa1;
        r->failures += !ok;
    }
    return NULL;
}

/* One thread launches graph a (its scratch a run) again and again while
 * another captures graphs into the pool: each capture wants a's pages and
 * may split the run only between a's launches, holding new ones back
 * meanwhile. (The graphs' launches take turns: graphs of one pool never
 * run at once.) a's output keeps its bytes, every graph's replay is right,
 * and after a trim the graphs share one scratch: the pool holds it and a
 * page at most for each output. */
static void launches_race_run_splits(cpool_device *dev) {
    cpool_stream *s, *t;
    cpool_pool *pool;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &t));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    run_graph r[RACE_CAPTURES + 1];
    cpool_graph *g[RACE_CAPTURES + 1] = {NULL};
    r[0] = (run_graph){pool, NULL, 0xa1, NULL};
    REQUIRE_OK(cpool_capture(t, pool, CPOOL_CAPTURE_GLOBAL, body_run_graph, &r[0], &g[0]));
    pthread_mutex_t running = PTHREAD_MUTEX_INITIALIZER;
    run_race race = {g[0], s, r[0].out, &running, 0};
    pthread_t launcher;
    REQUIRE(pthread_create(&launcher, NULL, launch_over_and_over, &race) == 0);
    for (int k = 1; k <= RACE_CAPTURES; k++) {
        r[k] = (run_graph){pool, NULL, (unsigned char)(0x10 + k), NULL};
        /* THREAD_LOCAL: the launcher's copies to pageable memory would
         * break a GLOBAL capture on another thread (CUDA's rule). */
        CHECK_OK(cpool_capture(t, pool, CPOOL_CAPTURE_THREAD_LOCAL, body_run_graph, &r[k], &g[k]));
        if (!g[k]) continue;
        pthread_mutex_lock(&running);
        CHECK_OK(cpool_graph_launch(g[k], t));
        CHECK_OK(cpool_stream_synchronize(t));
        pthread_mutex_unlock(&running);
        CHECK_BYTES(t, r[k].out, 1 * MiB, 0x10 + k);
    }
    pthread_join(launcher, NULL);
    CHECK_EQ(race.failures, 0);
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_LE(stats_of(pool).graph_reserved_bytes, 32 * MiB + (RACE_CAPTURES + 1) * PAGE_BYTES);
    uint64_t rng = 0x2545f4914f6cdd1dull;
    for (int n = 0; n < 2 * (RACE_CAPTURES + 1); n++) {
        int k = (int)rng_below(&rng, RACE_CAPTURES + 1);
        if (!g[k]) continue;
        CHECK_OK(cpool_graph_launch(g[k], s));
        for (int j = 0; j <= RACE_CAPTURES; j++)
            if (g[j]) CHECK_BYTES(s, r[j].out, 1 * MiB, j ? 0x10 + j : 0xa1);
    }
    for (int k = 0; k <= RACE_CAPTURES; k++) {
        cpool_graph_release(g[k]);
        if (r[k].out) CHECK_OK(cpool_free(pool, r[k].out, s));
    }
    cpool_pool_release(pool);
    cpool_stream_destroy(t);
    cpool_stream_destroy(s);
}

enum { RECAPTURES = 30 };

/* A server keeps one graph and captures another again and again, each time
 * launching it, releasing it and then freeing its output (learned as an
 * output, it packs). The freed outputs serve the next captures once their
 * stream's work is over, so graph memory stays near one scratch and two
 * outputs' pages however many rounds (a fence the device has not reached
 * yet when a capture looks may cost a page for a while; growing by a page
 * a round, as before, would reach 56 MiB). */
static void recapture_loop_keeps_its_memory(cpool_device *dev) {
    cpool_stream *s, *t;
    cpool_pool *pool;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &t));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    run_graph kept = {pool, NULL, 0x5e, NULL};
    cpool_graph *gk;
    REQUIRE_OK(cpool_capture(t, pool, CPOOL_CAPTURE_GLOBAL, body_run_graph, &kept, &gk));
    uint64_t after_first = 0, most = 0;
    for (int k = 0; k < RECAPTURES; k++) {
        run_graph r = {pool, NULL, (unsigned char)k, NULL};
        cpool_graph *g;
        REQUIRE_OK(cpool_capture(t, pool, CPOOL_CAPTURE_GLOBAL, body_run_graph, &r, &g));
        CHECK_OK(cpool_graph_launch(g, t));
        CHECK_BYTES(t, r.out, 1 * MiB, k);
        cpool_graph_release(g);
        CHECK_OK(cpool_free(pool, r.out, t));
        uint64_t now = stats_of(pool).graph_reserved_bytes;
        if (k == 1) after_first = now;
        if (now > most) most = now;
    }
    printf("  graph memory after two rounds %.1f MiB, at most %.1f MiB over %d\n", (double)after_first / MiB,
           (double)most / MiB, RECAPTURES);
    CHECK_LE(most, 32 * MiB + 4 * PAGE_BYTES);
    CHECK_OK(cpool_graph_launch(gk, s));
    CHECK_BYTES(s, kept.out, 1 * MiB, 0x5e);
    cpool_graph_release(gk);
    CHECK_OK(cpool_free(pool, kept.out, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(t);
    cpool_stream_destroy(s);
}

enum { WARMED_GRAPHS = 8 };

typedef struct warmed {
    cpool_pool *pool;
    size_t scratch, out_bytes;
    unsigned char value;
    void *out;
} warmed;

static cpool_status body_warmed(cpool_stream *s, void *ctx) {
    warmed *w = ctx;
    void *scratch = NULL;
    cpool_status st = cpool_alloc(w->pool, w->scratch, s, &scratch);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, w->value, w->scratch);
    if (st == CPOOL_OK) st = cpool_alloc(w->pool, w->out_bytes, s, &w->out);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, w->out, scratch, w->out_bytes);
    if (scratch && st == CPOOL_OK) st = cpool_free(w->pool, scratch, s);
    return st;
}

/* The engine's graphs, each launched once right after its capture and not
 * waited for (a warm-up), so that the next capture may find the last
 * graph's run in use: once the device is idle the pool's stats read the
 * bound, and replays in random order keep every output. */
static void warm_up_launches_between_captures(cpool_device *dev) {
    for (int descending = 0; descending < 2; descending++) {
        cpool_stream *s;
        cpool_pool *pool;
        REQUIRE_OK(cpool_stream_create(dev, &s));
        REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
        warmed w[WARMED_GRAPHS];
        cpool_graph *g[WARMED_GRAPHS];
        uint64_t largest = 0, outputs = 0;
        for (int k = 0; k < WARMED_GRAPHS; k++) {
            int i = descending ? WARMED_GRAPHS - 1 - k : k;
            w[k] = (warmed){pool, (size_t)1 << (20 + i), (size_t)64 << (10 + i), (unsigned char)(0x31 + k), NULL};
            REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_warmed, &w[k], &g[k]));
            CHECK_OK(cpool_graph_launch(g[k], s));
            if (w[k].scratch > largest) largest = w[k].scratch;
            outputs += w[k].out_bytes;
        }
        CHECK_OK(cpool_stream_synchronize(s));
        uint64_t bound = largest + outputs, pages = (bound + PAGE_BYTES - 1) / PAGE_BYTES * PAGE_BYTES;
        uint64_t held = stats_of(pool).graph_reserved_bytes;
        printf("  %s: graph memory %.1f MiB, bound %.1f MiB in pages\n", descending ? "descending" : "ascending",
               (double)held / MiB, (double)pages / MiB);
        CHECK_LE(held, (uint64_t)((double)pages * (1 + MARGIN)));
        uint64_t rng = 0x853c49e6748fea9bull;
        for (int n = 0; n < 3 * WARMED_GRAPHS; n++) {
            int k = (int)rng_below(&rng, WARMED_GRAPHS);
            CHECK_OK(cpool_graph_launch(g[k], s));
            CHECK_BYTES(s, w[k].out, w[k].out_bytes, w[k].value);
        }
        for (int k = 0; k < WARMED_GRAPHS; k++) CHECK_BYTES(s, w[k].out, w[k].out_bytes, w[k].value);
        for (int k = 0; k < WARMED_GRAPHS; k++) {
            cpool_graph_release(g[k]);
            CHECK_OK(cpool_free(pool, w[k].out, s));
        }
        cpool_pool_release(pool);
        cpool_stream_destroy(s);
    }
}

static const check_case cases[] = {
    CHECK_CASE(check_sees_one_changed_byte),
    CHECK_CASE(engine_graphs_share_pages),
    CHECK_CASE(engine_off_the_page_grid),
    CHECK_CASE(batch_sizes_share_pages),
    CHECK_CASE(batch_sizes_share_the_last_page),
    CHECK_CASE(borrowed_tails_go_back),
    CHECK_CASE(alternating_orders_share_pages),
    CHECK_CASE(far_guesses_go_wrong_once),
    CHECK_CASE(muted_until_guesses_are_right),
    CHECK_CASE(wrong_guesses_are_muted),
    CHECK_CASE(freed_outputs_give_pages_back),
    CHECK_CASE(random_steps_keep_outputs),
    CHECK_CASE(graphed_calls_share_pages),
    CHECK_CASE(thousand_graphs_then_trim),
    CHECK_CASE(packed_pages_go_back_while_a_graph_lives),
    CHECK_CASE(released_graph_gives_its_scratch_back),
    CHECK_CASE(two_stream_graphs_share_pages),
    CHECK_CASE(freed_in_a_later_capture_then_trimmed),
    CHECK_CASE(released_graph_still_running_keeps_its_pages),
    CHECK_CASE(released_arenas_serve_again_once_their_work_is_over),
    CHECK_CASE(freed_output_still_read_keeps_its_page),
    CHECK_CASE(graph_memory_alone_suspends),
    CHECK_CASE(running_run_is_left_whole_then_settles),
    CHECK_CASE(launches_race_run_splits),
    CHECK_CASE(recapture_loop_keeps_its_memory),
    CHECK_CASE(warm_up_launches_between_captures),
};

CHECK_MAIN(cases, CHECK_ON_ALL)
