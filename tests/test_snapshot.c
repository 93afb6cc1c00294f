/* Snapshots and per-graph accounting, on every backend: every snapshot is
 * read back with a JSON parser (json.h) and its sums checked against the
 * stats it carries and against cpool_pool_get_stats of the same moment, in
 * many states: empty, eager blocks on two streams (some parked in the front
 * cache), a parameter block, graphs with scratch and outputs that share
 * scratch, two graphs whose scratch is one physical page at each one's
 * addresses and whose outputs are on pages of their own (the snapshot's
 * sums in physical bytes), a graph that writes no graph memory, after
 * release and trim, while another thread allocates, and while other
 * threads capture and release graphs (the list of graphs is always stats.graph_count long).
 * cpool_graph_get_stats agrees with the snapshot's graphs. Bad input (NULL,
 * dead handles, an unwritable path) is refused and changes nothing. */
#include "check.h"
#include "helpers.h"
#include "json.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

/* A file name of this process's own. */
static const char *snapshot_path(void) {
    static char path[256];
    const char *dir = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/cpool-snapshot-%ld.json", dir && *dir ? dir : "/tmp", (long)getpid());
    return path;
}

static uint64_t member_u64(const json *obj, const char *key) {
    const json *v = json_get(obj, key);
    return v && v->kind == JSON_NUMBER && v->is_integer ? v->integer : UINT64_MAX;
}

/* What a snapshot says, summed: `segments` counts the mapped runs (the
 * segments and the arenas' ranges), `segment_bytes` the physical bytes
 * (segments and the distinct pages of arenas), `graph_bytes` those of graph
 * memory, `free_bytes` what no live block holds. */
typedef struct snapshot_sums {
    uint64_t segments, segment_bytes, live_requested, graph_bytes, free_bytes, blocks, outputs, params;
    uint64_t graphs;
    uint64_t streams[8]; /* distinct streams of live blocks */
    size_t stream_count;
    /* Parts of the above: graph block sizes in eager segments, sizes of
     * their other blocks, sizes of live blocks in the packed
     * region and in arenas, and the physical pages behind arenas. */
    uint64_t eager_graph_bytes, eager_free_bytes, packed_bytes, packed_live_bytes, arena_live_bytes;
    uint64_t shared_pages, own_pages, plain_bytes, ranges;
    uint64_t borrowed_pages; /* arena pages whose memory is a packed segment's */
} snapshot_sums;

/* Checks one block's shape, adds it to the sums. */
static void add_block(const json *b, uint64_t expect_offset, snapshot_sums *sum) {
    const json *state = json_get(b, "state"), *graphs = json_get(b, "graphs");
    const json *output = json_get(b, "output"), *param = json_get(b, "param");
    uint64_t size = member_u64(b, "size"), requested = member_u64(b, "requested"), stream = member_u64(b, "stream");
    CHECK_EQ(member_u64(b, "offset"), expect_offset);
    CHECK(size != UINT64_MAX && size % 512 == 0 && size > 0);
    CHECK(requested <= size);
    CHECK(stream != UINT64_MAX);
    REQUIRE(state && state->kind == JSON_STRING && graphs && graphs->kind == JSON_ARRAY);
    REQUIRE(output && output->kind == JSON_BOOL && param && param->kind == JSON_BOOL);
    for (size_t i = 0; i < graphs->count; i++) CHECK(graphs->items[i]->kind == JSON_NUMBER);
    const char *s = state->string;
    int live = !strcmp(s, "live") || !strcmp(s, "graph_live");
    int graph = !strcmp(s, "graph_free") || !strcmp(s, "graph_live");
    CHECK(live || graph || !strcmp(s, "free"));
    if (!live) CHECK_EQ(requested, 0);
    if (live) sum->live_requested += requested;
    if (!graph) CHECK_EQ(graphs->count, 0);
    if (output->boolean) {
        CHECK(live && graph);
        sum->outputs++;
    }
    if (param->boolean) {
        CHECK(live);
        sum->params++;
    } else if (live) {
        CHECK(stream != 0); /* every block a caller holds names its stream, graph blocks too */
    }
    if (live && stream) {
        size_t k = 0;
        while (k < sum->stream_count && sum->streams[k] != stream) k++;
        if (k == sum->stream_count && k < 8) sum->streams[sum->stream_count++] = stream;
    }
    sum->blocks++;
}

#define PAGE ((uint64_t)2 << 20)

/* Checks the blocks of a segment or range of `size` bytes: they tile it.
 * Adds the sizes of its live blocks to *live, of its graph blocks to
 * *graph, of the others to *free (each NULL: not counted). */
static void add_blocks(const json *blocks, uint64_t size, uint64_t *live, uint64_t *graph, uint64_t *free_bytes,
                       snapshot_sums *sum) {
    uint64_t offset = 0;
    for (size_t k = 0; k < blocks->count; k++) {
        const json *b = blocks->items[k], *state = json_get(b, "state");
        uint64_t bytes = member_u64(b, "size");
        add_block(b, offset, sum);
        if (!state || state->kind != JSON_STRING) continue;
        /* The packed region and the arenas (no eager set to count in) are
         * graph memory, free or not: nothing outside capture takes it. */
        if (!graph && strncmp(state->string, "graph_", 6))
            check_report_(__FILE__, __LINE__, "a block of graph memory is \"%s\"", state->string);
        int is_live = !strcmp(state->string, "live") || !strcmp(state->string, "graph_live");
        if (is_live && live) *live += bytes;
        if (!strncmp(state->string, "graph_", 6) && graph) *graph += bytes;
        if (!is_live && free_bytes) *free_bytes += bytes;
        offset += bytes;
    }
    CHECK_EQ(offset, size); /* the blocks tile it */
}

static int compare_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* "arenas" and "physical": every range's pages are page-aligned, in order,
 * and cover it; an own page's id appears once and never as a shared one;
 * the distinct ids are the counts "physical" gives. */
static void check_arenas(const json *root, snapshot_sums *sum) {
    const json *arenas = json_get(root, "arenas"), *physical = json_get(root, "physical");
    REQUIRE(arenas && arenas->kind == JSON_ARRAY && physical && physical->kind == JSON_OBJECT);
    size_t cap = 64, count = 0;
    uint64_t *ids = malloc(cap * sizeof *ids); /* id << 1 | own */
    REQUIRE(ids != NULL);
    for (size_t a = 0; a < arenas->count; a++) {
        const json *ar = arenas->items[a], *ranges = json_get(ar, "ranges"), *state = json_get(ar, "state");
        uint64_t graph = member_u64(ar, "graph");
        CHECK(member_u64(ar, "id") != UINT64_MAX && member_u64(ar, "id") != 0 && graph != UINT64_MAX);
        REQUIRE(state && state->kind == JSON_STRING && ranges && ranges->kind == JSON_ARRAY);
        CHECK(!strcmp(state->string, graph ? "graph" : "capture") || (!graph && !strcmp(state->string, "outputs")) ||
              (!graph && !strcmp(state->string, "idle")));
        for (size_t r = 0; r < ranges->count; r++) {
            const json *range = ranges->items[r], *pages = json_get(range, "pages"), *blocks = json_get(range, "blocks");
            uint64_t size = member_u64(range, "size");
            CHECK(member_u64(range, "address") != UINT64_MAX);
            REQUIRE(pages && pages->kind == JSON_ARRAY && blocks && blocks->kind == JSON_ARRAY);
            if (pages->count == 0) {
                sum->plain_bytes += size; /* plain memory, shared with none */
            } else {
                CHECK_EQ(pages->count * PAGE, size);
            }
            for (size_t i = 0; i < pages->count; i++) {
                const json *pg = pages->items[i], *own = json_get(pg, "own"), *packed = json_get(pg, "packed");
                uint64_t id = member_u64(pg, "physical");
                CHECK_EQ(member_u64(pg, "offset"), i * PAGE);
                REQUIRE(own && own->kind == JSON_BOOL && id != UINT64_MAX && id != 0);
                REQUIRE(packed && packed->kind == JSON_BOOL);
                if (packed->boolean) { /* a packed segment's page, counted there */
                    CHECK(!own->boolean);
                    sum->borrowed_pages++;
                    continue;
                }
                if (count == cap) {
                    cap *= 2;
                    uint64_t *grown = realloc(ids, cap * sizeof *ids);
                    REQUIRE(grown != NULL);
                    ids = grown;
                }
                ids[count++] = id << 1 | (uint64_t)own->boolean;
            }
            add_blocks(blocks, size, &sum->arena_live_bytes, NULL, NULL, sum);
            const json *b0 = blocks->count ? blocks->items[0] : NULL, *g0 = b0 ? json_get(b0, "graphs") : NULL;
            if (g0 && g0->count) CHECK_EQ(g0->items[0]->integer, graph); /* its blocks are its graph's */
            sum->segments++;
            sum->ranges++;
        }
    }
    qsort(ids, count, sizeof *ids, compare_u64);
    for (size_t i = 0; i < count; i++) {
        if (i && ids[i] >> 1 == ids[i - 1] >> 1) {
            CHECK_EQ(ids[i], ids[i - 1]); /* one id, one kind */
            CHECK_EQ(ids[i] & 1, 0);      /* only shared pages repeat */
            continue;
        }
        if (ids[i] & 1)
            sum->own_pages++;
        else
            sum->shared_pages++;
    }
    free(ids);
    CHECK_EQ(member_u64(physical, "page_size"), PAGE);
    CHECK_EQ(member_u64(physical, "shared_pages"), sum->shared_pages);
    CHECK_EQ(member_u64(physical, "own_pages"), sum->own_pages);
    CHECK_EQ(member_u64(physical, "plain_bytes"), sum->plain_bytes);
    CHECK_EQ(member_u64(physical, "bytes"), (sum->shared_pages + sum->own_pages) * PAGE + sum->plain_bytes);
}

/* Writes a snapshot of pool, reads it back, checks its shape and that its
 * sums equal the stats in it, and those the stats of the moment (`stats`:
 * taken just before, when nothing else runs; NULL when another thread
 * allocates). Returns the tree (json_free it) and the sums, or NULL. */
/* Every number in the snapshot is an integer a double holds exactly (at
 * most 2^53), as JavaScript readers (PyTorch's memory visualizer) read it. */
static void check_numbers_exact(const json *j) {
    if (!j) return;
    if (j->kind == JSON_NUMBER && (!j->is_integer || j->integer > ((uint64_t)1 << 53)))
        check_report_(__FILE__, __LINE__, "a number past 2^53 or not a whole one: %.17g", j->number);
    if (j->kind == JSON_ARRAY || j->kind == JSON_OBJECT)
        for (size_t i = 0; i < j->count; i++) check_numbers_exact(j->items[i]);
}

static json *checked_snapshot(cpool_pool *pool, const cpool_pool_stats *stats, snapshot_sums *sum) {
    char error[160] = "";
    memset(sum, 0, sizeof *sum);
    if (!CHECK_OK(cpool_pool_write_snapshot(pool, snapshot_path()))) return NULL;
    char *text = json_read_file(snapshot_path());
    remove(snapshot_path());
    if (!text) {
        check_report_(__FILE__, __LINE__, "cannot read the snapshot back");
        return NULL;
    }
    json *root = json_parse(text, error, sizeof error);
    free(text);
    if (!root) {
        check_report_(__FILE__, __LINE__, "the snapshot is not JSON: %s", error);
        return NULL;
    }
    check_numbers_exact(root);
    const json *st = json_get(root, "stats"), *segments = json_get(root, "segments"), *graphs = json_get(root, "graphs");
    const json *backend = json_get(root, "backend");
    CHECK_EQ(member_u64(root, "version"), 2);
    CHECK(backend && backend->kind == JSON_STRING && (!strcmp(backend->string, "host") || !strcmp(backend->string, "cuda")));
    if (!st || !segments || segments->kind != JSON_ARRAY || !graphs || graphs->kind != JSON_ARRAY) {
        check_report_(__FILE__, __LINE__, "the snapshot lacks stats, segments or graphs");
        json_free(root);
        return NULL;
    }
    static const char *const fields[] = {"struct_size",   "reserved_bytes",       "reserved_bytes_peak",
                                         "allocated_bytes", "allocated_bytes_peak", "graph_reserved_bytes",
                                         "alloc_count",   "free_count",           "segment_count",
                                         "cached_bytes",  "graph_count"};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) CHECK(member_u64(st, fields[i]) != UINT64_MAX);
    for (size_t i = 0; i < segments->count; i++) {
        const json *seg = segments->items[i], *blocks = json_get(seg, "blocks"), *kind = json_get(seg, "kind");
        uint64_t size = member_u64(seg, "size");
        CHECK(member_u64(seg, "address") != UINT64_MAX);
        int packed = kind && kind->kind == JSON_STRING && !strcmp(kind->string, "packed");
        CHECK(packed || (kind && kind->kind == JSON_STRING && !strcmp(kind->string, "eager")));
        if (!blocks || blocks->kind != JSON_ARRAY) {
            check_report_(__FILE__, __LINE__, "segment %zu has no blocks array", i);
            continue;
        }
        if (packed)
            add_blocks(blocks, size, &sum->packed_live_bytes, NULL, NULL, sum);
        else
            add_blocks(blocks, size, NULL, &sum->eager_graph_bytes, &sum->eager_free_bytes, sum);
        sum->segments++;
        if (packed) sum->packed_bytes += size;
        sum->segment_bytes += size;
    }
    check_arenas(root, sum);
    for (size_t i = 0; i < graphs->count; i++) {
        const json *g = graphs->items[i];
        CHECK(member_u64(g, "id") != UINT64_MAX && member_u64(g, "id") != 0);
        CHECK(member_u64(g, "shared_write_bytes") <= member_u64(g, "write_bytes"));
        CHECK_EQ(member_u64(g, "shared_write_bytes") + member_u64(g, "own_bytes"), member_u64(g, "write_bytes"));
        CHECK(member_u64(g, "live_outputs") != UINT64_MAX);
    }
    sum->graphs = graphs->count;
    /* Its sums are its stats, in physical bytes: segments are memory of
     * their own, arenas add the distinct pages they map. */
    uint64_t physical = (sum->shared_pages + sum->own_pages) * PAGE + sum->plain_bytes;
    uint64_t graph_memory = sum->packed_bytes + physical, graph_live = sum->packed_live_bytes + sum->arena_live_bytes;
    sum->segment_bytes += physical;
    sum->graph_bytes = sum->eager_graph_bytes + graph_memory;
    sum->free_bytes = sum->eager_free_bytes + (graph_memory > graph_live ? graph_memory - graph_live : 0);
    CHECK_EQ(sum->segment_bytes, member_u64(st, "reserved_bytes"));
    CHECK_EQ(sum->segments, member_u64(st, "segment_count"));
    CHECK_EQ(sum->live_requested, member_u64(st, "allocated_bytes"));
    CHECK_EQ(sum->graph_bytes, member_u64(st, "graph_reserved_bytes"));
    CHECK_EQ(sum->free_bytes, member_u64(st, "cached_bytes"));
    CHECK_EQ(sum->graphs, member_u64(st, "graph_count"));
    if (stats) { /* and the stats of the moment */
        CHECK_EQ(member_u64(st, "reserved_bytes"), stats->reserved_bytes);
        CHECK_EQ(member_u64(st, "allocated_bytes"), stats->allocated_bytes);
        CHECK_EQ(member_u64(st, "graph_reserved_bytes"), stats->graph_reserved_bytes);
        CHECK_EQ(member_u64(st, "cached_bytes"), stats->cached_bytes);
        CHECK_EQ(member_u64(st, "alloc_count"), stats->alloc_count);
        CHECK_EQ(member_u64(st, "graph_count"), stats->graph_count);
    }
    return root;
}

static void empty_pool(cpool_device *dev) {
    static stream_pool f;
    snapshot_sums sum;
    REQUIRE(fixture_open(dev, NULL, &f));
    cpool_pool_stats st = stats_of(f.pool);
    json *root = checked_snapshot(f.pool, &st, &sum);
    CHECK_EQ(sum.segments, 0);
    CHECK_EQ(sum.graphs, 0);
    json_free(root);
}

/* Blocks on two streams, some freed (a few parked in the front cache), a
 * large one, and a parameter block. */
static void eager_blocks_on_two_streams(cpool_device *dev) {
    static stream_pool f;
    cpool_stream *t = NULL;
    cpool_param *param = NULL;
    void *p[12] = {NULL};
    snapshot_sums sum;
    REQUIRE(fixture_open(dev, NULL, &f));
    REQUIRE_OK(cpool_stream_create(dev, &t));
    for (int i = 0; i < 12; i++) REQUIRE_OK(cpool_alloc(f.pool, (size_t)(1000 + 3000 * i), i % 2 ? t : f.s, &p[i]));
    void *big = NULL;
    REQUIRE_OK(cpool_alloc(f.pool, (size_t)5 << 20, f.s, &big));
    for (int i = 0; i < 12; i += 3) CHECK_OK(cpool_free(f.pool, p[i], i % 2 ? t : f.s));
    REQUIRE_OK(cpool_param_create(f.pool, 4096, &param));
    cpool_pool_stats st = stats_of(f.pool);
    json *root = checked_snapshot(f.pool, &st, &sum);
    CHECK_EQ(sum.stream_count, 2); /* live blocks name both streams */
    CHECK_EQ(sum.params, 1);
    CHECK_EQ(sum.graphs, 0);
    CHECK_GE(sum.segments, 2);
    json_free(root);
    for (int i = 0; i < 12; i++)
        if (i % 3) CHECK_OK(cpool_free(f.pool, p[i], i % 2 ? t : f.s));
    CHECK_OK(cpool_free(f.pool, big, f.s));
    CHECK_OK(cpool_stream_synchronize(t));
    cpool_stream_destroy(t);
}

/* Two graphs into one pool: each allocates scratch, frees it, and allocates
 * an output; their scratch is shared, their outputs apart. */
typedef struct graph_body {
    cpool_pool *pool;
    size_t scratch, out;
    void *output;
} graph_body;

static cpool_status body_scratch_and_output(cpool_stream *s, void *ctx) {
    graph_body *b = (graph_body *)ctx;
    void *scratch = NULL;
    cpool_status st = cpool_alloc(b->pool, b->scratch, s, &scratch);
    if (st != CPOOL_OK) return st;
    st = cpool_memset_async(s, scratch, 1, b->scratch);
    if (st == CPOOL_OK) st = cpool_alloc_output(b->pool, b->out, s, &b->output);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, b->output, scratch, b->out);
    cpool_status freed = cpool_free(b->pool, scratch, s);
    return st == CPOOL_OK ? freed : st;
}

static const json *graph_entry(const json *root, uint64_t id) {
    const json *graphs = json_get(root, "graphs");
    for (size_t i = 0; graphs && i < graphs->count; i++)
        if (member_u64(graphs->items[i], "id") == id) return graphs->items[i];
    return NULL;
}

/* The graph's accounting from C agrees with the snapshot's. */
static void check_graph_stats(const json *root, cpool_graph *g, uint64_t outputs) {
    cpool_graph_stats gs = {.struct_size = sizeof gs};
    REQUIRE_OK(cpool_graph_get_stats(g, &gs));
    const json *entry = graph_entry(root, cpool_graph_id(g));
    REQUIRE(entry != NULL);
    CHECK_EQ(gs.write_bytes, member_u64(entry, "write_bytes"));
    CHECK_EQ(gs.shared_write_bytes, member_u64(entry, "shared_write_bytes"));
    CHECK_EQ(gs.live_output_bytes, member_u64(entry, "live_output_bytes"));
    CHECK_EQ(gs.live_outputs, outputs);
    CHECK_EQ(gs.pool_count, 1);
    CHECK_GT(gs.write_bytes, 0);
}

static void graphs_with_scratch_and_outputs(cpool_device *dev) {
    static stream_pool f;
    graph_body b1, b2;
    cpool_graph *g1 = NULL, *g2 = NULL;
    snapshot_sums sum;
    REQUIRE(fixture_open(dev, NULL, &f));
    b1 = (graph_body){f.pool, 256 << 10, 4096, NULL};
    b2 = (graph_body){f.pool, 128 << 10, 8192, NULL};
    REQUIRE_OK(cpool_capture(f.s, f.pool, CPOOL_CAPTURE_GLOBAL, body_scratch_and_output, &b1, &g1));
    REQUIRE_OK(cpool_capture(f.s, f.pool, CPOOL_CAPTURE_GLOBAL, body_scratch_and_output, &b2, &g2));
    CHECK_OK(cpool_graph_launch(g1, f.s));
    CHECK_OK(cpool_graph_launch(g2, f.s));
    CHECK_OK(cpool_stream_synchronize(f.s));
    cpool_pool_stats st = stats_of(f.pool);
    json *root = checked_snapshot(f.pool, &st, &sum);
    REQUIRE(root != NULL);
    CHECK_EQ(sum.graphs, 2);
    CHECK_EQ(sum.outputs, 2);
    check_graph_stats(root, g1, 1);
    check_graph_stats(root, g2, 1);
    /* g2's scratch went where g1's was: both write it. */
    cpool_graph_stats s2 = {.struct_size = sizeof s2};
    CHECK_OK(cpool_graph_get_stats(g2, &s2));
    CHECK_GT(s2.shared_write_bytes, 0);
    json_free(root);
    /* Released graphs leave; their outputs stay live until freed. */
    cpool_graph_release(g1);
    cpool_graph_release(g2);
    CHECK(wait_graph_count(f.pool, 0, WAIT_TIMEOUT_MS));
    st = stats_of(f.pool);
    root = checked_snapshot(f.pool, &st, &sum);
    CHECK_EQ(sum.graphs, 0);
    json_free(root);
    CHECK_OK(cpool_free(f.pool, b1.output, f.s));
    CHECK_OK(cpool_free(f.pool, b2.output, f.s));
    CHECK_OK(cpool_pool_trim(f.pool));
    st = stats_of(f.pool);
    root = checked_snapshot(f.pool, &st, &sum);
    CHECK_EQ(sum.segments, st.segment_count);
    CHECK_EQ(sum.live_requested, 0);
    json_free(root);
}

/* Two graphs with scratch of several pages and an output made by plain
 * cpool_alloc (its pages become the graph's own): the snapshot shows each
 * graph's ranges, the same physical page behind both graphs' scratch, and
 * pages of their own, apart, behind their outputs. */
static cpool_status body_scratch_and_plain_output(cpool_stream *s, void *ctx) {
    graph_body *b = (graph_body *)ctx;
    void *scratch = NULL;
    cpool_status st = cpool_alloc(b->pool, b->scratch, s, &scratch);
    if (st != CPOOL_OK) return st;
    st = cpool_memset_async(s, scratch, 1, b->scratch);
    if (st == CPOOL_OK) st = cpool_alloc(b->pool, b->out, s, &b->output);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, b->output, scratch, b->out);
    cpool_status freed = cpool_free(b->pool, scratch, s);
    return st == CPOOL_OK ? freed : st;
}

/* The physical ids behind an arena's pages: those under its graph_free
 * blocks that are shared (scratch), and those under its graph_live blocks
 * (outputs), which must be its own. */
typedef struct arena_pages {
    uint64_t scratch[16], outputs[16];
    size_t scratch_count, output_count;
    uint64_t own_bytes;
} arena_pages;

static void pages_of_graph(const json *root, uint64_t graph, arena_pages *out) {
    const json *arenas = json_get(root, "arenas");
    memset(out, 0, sizeof *out);
    size_t found = 0;
    for (size_t a = 0; arenas && a < arenas->count; a++) {
        if (member_u64(arenas->items[a], "graph") != graph) continue;
        found++;
        const json *ranges = json_get(arenas->items[a], "ranges");
        for (size_t r = 0; r < ranges->count; r++) {
            const json *pages = json_get(ranges->items[r], "pages"), *blocks = json_get(ranges->items[r], "blocks");
            for (size_t i = 0; i < pages->count; i++) {
                const json *pg = pages->items[i];
                uint64_t at = member_u64(pg, "offset"), id = member_u64(pg, "physical");
                bool own = json_get(pg, "own")->boolean;
                if (own) out->own_bytes += PAGE;
                for (size_t k = 0; k < blocks->count; k++) {
                    const json *b = blocks->items[k];
                    uint64_t from = member_u64(b, "offset"), to = from + member_u64(b, "size");
                    if (to <= at || from >= at + PAGE) continue;
                    const char *state = json_get(b, "state")->string;
                    if (!strcmp(state, "graph_live")) {
                        CHECK(own); /* an output's page is its graph's own */
                        CHECK(json_get(b, "output")->boolean);
                        const json *graphs = json_get(b, "graphs");
                        CHECK(graphs->count == 1 && graphs->items[0]->integer == graph);
                        if (out->output_count < 16 && (!out->output_count || out->outputs[out->output_count - 1] != id))
                            out->outputs[out->output_count++] = id;
                    } else if (!strcmp(state, "graph_free") && !own && out->scratch_count < 16 &&
                               (!out->scratch_count || out->scratch[out->scratch_count - 1] != id)) {
                        out->scratch[out->scratch_count++] = id;
                    }
                }
            }
        }
    }
    CHECK_EQ(found, 1); /* one arena per graph */
}

static void graphs_share_pages_by_physical_id(cpool_device *dev) {
    static stream_pool f;
    graph_body b1, b2;
    cpool_graph *g1 = NULL, *g2 = NULL;
    snapshot_sums sum;
    REQUIRE(fixture_open(dev, NULL, &f));
    b1 = (graph_body){f.pool, (size_t)6 << 20, (size_t)1 << 20, NULL};
    /* g2's output is larger than the pool packs on a guess from g1's
     * (CPOOL__PREDICTED_MAX): it gets pages of its own, as g1's does. */
    b2 = (graph_body){f.pool, (size_t)4 << 20, (size_t)18 << 20, NULL};
    REQUIRE_OK(cpool_capture(f.s, f.pool, CPOOL_CAPTURE_GLOBAL, body_scratch_and_plain_output, &b1, &g1));
    REQUIRE_OK(cpool_capture(f.s, f.pool, CPOOL_CAPTURE_GLOBAL, body_scratch_and_plain_output, &b2, &g2));
    CHECK_OK(cpool_graph_launch(g1, f.s));
    CHECK_OK(cpool_graph_launch(g2, f.s));
    CHECK_OK(cpool_stream_synchronize(f.s));
    cpool_pool_stats st = stats_of(f.pool);
    json *root = checked_snapshot(f.pool, &st, &sum);
    REQUIRE(root != NULL);
    CHECK_EQ(sum.graphs, 2);
    CHECK_EQ(sum.outputs, 2);
    CHECK_GE(sum.shared_pages, 1);
    arena_pages p1, p2;
    pages_of_graph(root, cpool_graph_id(g1), &p1);
    pages_of_graph(root, cpool_graph_id(g2), &p2);
    /* One physical page behind both graphs' scratch. */
    size_t common = 0;
    for (size_t i = 0; i < p1.scratch_count; i++)
        for (size_t k = 0; k < p2.scratch_count; k++) common += p1.scratch[i] == p2.scratch[k];
    CHECK_GE(common, 1);
    /* Their outputs on pages of their own, apart. */
    CHECK_GE(p1.output_count, 1);
    CHECK_GE(p2.output_count, 2);
    for (size_t i = 0; i < p1.output_count; i++) {
        for (size_t k = 0; k < p2.output_count; k++) CHECK(p1.outputs[i] != p2.outputs[k]);
        for (size_t k = 0; k < p2.scratch_count; k++) CHECK(p1.outputs[i] != p2.scratch[k]);
    }
    for (size_t i = 0; i < p2.output_count; i++)
        for (size_t k = 0; k < p1.scratch_count; k++) CHECK(p2.outputs[i] != p1.scratch[k]);
    /* What each graph holds alone is the pages of its own. */
    check_graph_stats(root, g1, 1);
    check_graph_stats(root, g2, 1);
    cpool_graph_stats s1 = {.struct_size = sizeof s1}, s2 = {.struct_size = sizeof s2};
    CHECK_OK(cpool_graph_get_stats(g1, &s1));
    CHECK_OK(cpool_graph_get_stats(g2, &s2));
    CHECK_EQ(s1.own_bytes, p1.own_bytes);
    CHECK_EQ(s2.own_bytes, p2.own_bytes);
    CHECK_EQ(s1.own_bytes, member_u64(graph_entry(root, cpool_graph_id(g1)), "own_bytes"));
    CHECK_EQ(s2.own_bytes, member_u64(graph_entry(root, cpool_graph_id(g2)), "own_bytes"));
    CHECK_GT(s2.shared_write_bytes, 0);
    json_free(root);
    cpool_graph_release(g1);
    cpool_graph_release(g2);
    CHECK(wait_graph_count(f.pool, 0, WAIT_TIMEOUT_MS));
    /* Released graphs' outputs stay, on their pages, until freed. */
    st = stats_of(f.pool);
    root = checked_snapshot(f.pool, &st, &sum);
    CHECK_EQ(sum.outputs, 2);
    json_free(root);
    CHECK_OK(cpool_free(f.pool, b1.output, f.s));
    CHECK_OK(cpool_free(f.pool, b2.output, f.s));
    CHECK_OK(cpool_pool_trim(f.pool));
    st = stats_of(f.pool);
    json_free(checked_snapshot(f.pool, &st, &sum));
    CHECK_EQ(sum.shared_pages + sum.own_pages, 0);
}

/* While another thread allocates and frees, every snapshot is one moment:
 * its sums are its own stats. */
typedef struct churn {
    cpool_pool *pool;
    cpool_stream *s;
    int stop;
} churn;

static void *churn_main(void *arg) {
    churn *c = (churn *)arg;
    void *p[16] = {NULL};
    for (unsigned i = 0; !aload(&c->stop); i++) {
        unsigned k = i % 16;
        if (p[k]) {
            cpool_free(c->pool, p[k], c->s);
            p[k] = NULL;
        } else {
            cpool_alloc(c->pool, 512 + (i * 7919u) % (3 << 20), c->s, &p[k]);
        }
    }
    for (unsigned k = 0; k < 16; k++)
        if (p[k]) cpool_free(c->pool, p[k], c->s);
    return NULL;
}

static void consistent_under_concurrent_allocation(cpool_device *dev) {
    static stream_pool f;
    static churn c;
    pthread_t th;
    snapshot_sums sum;
    REQUIRE(fixture_open(dev, NULL, &f));
    c = (churn){f.pool, f.s, 0};
    REQUIRE(pthread_create(&th, NULL, churn_main, &c) == 0);
    for (int i = 0; i < 40; i++) json_free(checked_snapshot(f.pool, NULL, &sum));
    astore(&c.stop, 1);
    pthread_join(th, NULL);
    CHECK_OK(cpool_stream_synchronize(f.s));
}

/* A graph whose capture wrote none of the pool's graph memory (it only
 * filled an eager block) still holds the pool: graph_count counts it and
 * the snapshot lists it, with nothing written. */
typedef struct fill_body {
    void *eager;
    size_t bytes;
} fill_body;

static cpool_status body_fill_eager(cpool_stream *s, void *ctx) {
    fill_body *b = (fill_body *)ctx;
    return cpool_memset_async(s, b->eager, 7, b->bytes);
}

static void a_graph_that_writes_no_graph_memory_is_listed(cpool_device *dev) {
    static stream_pool f;
    cpool_graph *g = NULL;
    snapshot_sums sum;
    REQUIRE(fixture_open(dev, NULL, &f));
    fill_body b = {NULL, 4096};
    REQUIRE_OK(cpool_alloc(f.pool, b.bytes, f.s, &b.eager));
    REQUIRE_OK(cpool_capture(f.s, f.pool, CPOOL_CAPTURE_GLOBAL, body_fill_eager, &b, &g));
    cpool_pool_stats st = stats_of(f.pool);
    CHECK_EQ(st.graph_count, 1);
    json *root = checked_snapshot(f.pool, &st, &sum);
    CHECK_EQ(sum.graphs, 1);
    const json *entry = root ? graph_entry(root, cpool_graph_id(g)) : NULL;
    CHECK(entry != NULL);
    if (entry) CHECK_EQ(member_u64(entry, "write_bytes"), 0);
    json_free(root);
    cpool_graph_release(g);
    CHECK(wait_graph_count(f.pool, 0, WAIT_TIMEOUT_MS));
    st = stats_of(f.pool);
    root = checked_snapshot(f.pool, &st, &sum);
    CHECK_EQ(sum.graphs, 0);
    json_free(root);
    CHECK_OK(cpool_free(f.pool, b.eager, f.s));
}

/* While other threads capture graphs into the pool and release them, every
 * snapshot lists as many graphs as its own stats.graph_count says. */
typedef struct capturer {
    cpool_device *dev;
    cpool_pool *pool;
    int *stop;
    int failures; /* calls that failed, checked by the main thread */
    int graphs;   /* graphs captured and released */
} capturer;

static void *capturer_main(void *arg) {
    enum { KEPT = 4 };
    capturer *c = (capturer *)arg;
    cpool_stream *s = NULL;
    if (cpool_stream_create(c->dev, &s) != CPOOL_OK) {
        ainc(&c->failures);
        return NULL;
    }
    /* A few graphs stay alive at a time, each released a few captures on. */
    cpool_graph *kept[KEPT] = {NULL};
    void *outputs[KEPT] = {NULL};
    fill_body fill = {NULL, 4096};
    if (cpool_alloc(c->pool, fill.bytes, s, &fill.eager) != CPOOL_OK) ainc(&c->failures);
    for (unsigned i = 0; fill.eager && !aload(c->stop); i++) {
        unsigned k = i % KEPT;
        cpool_graph_release(kept[k]);
        kept[k] = NULL;
        if (outputs[k] && cpool_free(c->pool, outputs[k], s) != CPOOL_OK) ainc(&c->failures);
        outputs[k] = NULL;
        /* Every other graph writes graph memory; the others none. */
        graph_body scratch = {c->pool, 64 << 10, 4096, NULL};
        cpool_status st = i % 2 ? cpool_capture(s, c->pool, CPOOL_CAPTURE_RELAXED, body_scratch_and_output, &scratch,
                                                &kept[k])
                                : cpool_capture(s, c->pool, CPOOL_CAPTURE_RELAXED, body_fill_eager, &fill, &kept[k]);
        if (st != CPOOL_OK) {
            ainc(&c->failures);
            break;
        }
        outputs[k] = scratch.output;
        ainc(&c->graphs);
    }
    for (unsigned k = 0; k < KEPT; k++) {
        cpool_graph_release(kept[k]);
        if (outputs[k] && cpool_free(c->pool, outputs[k], s) != CPOOL_OK) ainc(&c->failures);
    }
    if (fill.eager && cpool_free(c->pool, fill.eager, s) != CPOOL_OK) ainc(&c->failures);
    if (cpool_stream_synchronize(s) != CPOOL_OK) ainc(&c->failures);
    cpool_stream_destroy(s);
    return NULL;
}

static void graph_count_is_the_list_under_concurrent_capture(cpool_device *dev) {
    enum { THREADS = 2, SNAPSHOTS = 150 };
    static stream_pool f;
    static capturer c[THREADS];
    static int stop;
    pthread_t th[THREADS];
    snapshot_sums sum;
    REQUIRE(fixture_open(dev, NULL, &f));
    astore(&stop, 0);
    for (int i = 0; i < THREADS; i++) {
        c[i] = (capturer){dev, f.pool, &stop, 0, 0};
        REQUIRE(pthread_create(&th[i], NULL, capturer_main, &c[i]) == 0);
    }
    /* checked_snapshot checks that the list's length is stats.graph_count.
     * On a loaded machine the capturers may start late: snapshots go on
     * until each has captured, so that they always race captures. */
    unsigned waited = 0;
    for (int i = 0; i < SNAPSHOTS || (waited < WAIT_TIMEOUT_MS && (!aload(&c[0].graphs) || !aload(&c[1].graphs)));
         i++) {
        json_free(checked_snapshot(f.pool, NULL, &sum));
        if (i >= SNAPSHOTS) {
            sleep_ms(1);
            waited++;
        }
    }
    astore(&stop, 1);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(aload(&c[i].failures), 0);
        CHECK_GT(aload(&c[i].graphs), 0);
    }
    CHECK(wait_graph_count(f.pool, 0, WAIT_TIMEOUT_MS));
}

/* In the middle of a multi-stream capture: blocks a capture holds are
 * graph_live, those its branches freed graph_free (with their branch tags),
 * and the sums still hold. */
static void during_a_multi_stream_capture(cpool_device *dev) {
    static stream_pool f;
    cpool_stream *x = NULL;
    cpool_event *fork = NULL, *join = NULL;
    cpool_graph *g = NULL;
    void *a = NULL, *b = NULL, *c = NULL;
    snapshot_sums sum;
    REQUIRE(fixture_open(dev, NULL, &f));
    REQUIRE_OK(cpool_stream_create(dev, &x));
    REQUIRE_OK(cpool_event_create(dev, &fork));
    REQUIRE_OK(cpool_event_create(dev, &join));
    REQUIRE_OK(cpool_capture_begin(f.s, f.pool, CPOOL_CAPTURE_RELAXED));
    CHECK_OK(cpool_event_record(fork, f.s));
    CHECK_OK(cpool_stream_wait_event(x, fork));
    CHECK_OK(cpool_alloc(f.pool, 64 << 10, x, &a));
    CHECK_OK(cpool_alloc(f.pool, 8 << 10, f.s, &b));
    CHECK_OK(cpool_free(f.pool, a, x));
    CHECK_OK(cpool_alloc(f.pool, 4 << 10, x, &c));
    cpool_pool_stats st = stats_of(f.pool);
    json *root = checked_snapshot(f.pool, &st, &sum);
    CHECK_GT(sum.graph_bytes, 0);
    CHECK_EQ(sum.graphs, 0); /* no graph yet: the capture has not ended */
    json_free(root);
    CHECK_OK(cpool_free(f.pool, c, x));
    CHECK_OK(cpool_free(f.pool, b, f.s));
    CHECK_OK(cpool_event_record(join, x));
    CHECK_OK(cpool_stream_wait_event(f.s, join));
    REQUIRE_OK(cpool_capture_end(f.s, &g));
    st = stats_of(f.pool);
    root = checked_snapshot(f.pool, &st, &sum);
    CHECK_EQ(sum.graphs, 1);
    json_free(root);
    cpool_graph_release(g);
    cpool_event_destroy(fork);
    cpool_event_destroy(join);
    cpool_stream_destroy(x);
}

/* A snapshot written over a longer one at the same path replaces it whole
 * (the parser refuses any text after the value); one written to a device
 * succeeds and leaves the device as it was. */
static void replaces_a_longer_file_and_writes_to_a_device(cpool_device *dev) {
    static stream_pool f;
    enum { N = 256 };
    void *p[N];
    snapshot_sums sum;
    REQUIRE(fixture_open(dev, NULL, &f));
    for (int i = 0; i < N; i++) REQUIRE_OK(cpool_alloc(f.pool, 512u * (unsigned)(i % 5 + 1), f.s, &p[i]));
    CHECK_OK(cpool_pool_write_snapshot(f.pool, snapshot_path()));
    struct stat longer;
    REQUIRE(stat(snapshot_path(), &longer) == 0);
    for (int i = 0; i < N; i++) CHECK_OK(cpool_free(f.pool, p[i], f.s));
    CHECK_OK(cpool_pool_trim(f.pool));
    cpool_pool_stats st = stats_of(f.pool);
    CHECK_OK(cpool_pool_write_snapshot(f.pool, snapshot_path()));
    struct stat shorter;
    REQUIRE(stat(snapshot_path(), &shorter) == 0);
    CHECK_LT(shorter.st_size, longer.st_size);
    json *root = checked_snapshot(f.pool, &st, &sum); /* written over the short one again, then parsed */
    CHECK(root != NULL);
    json_free(root);
    struct stat before, after;
    REQUIRE(stat("/dev/null", &before) == 0);
    CHECK_OK(cpool_pool_write_snapshot(f.pool, "/dev/null"));
    REQUIRE(stat("/dev/null", &after) == 0);
    CHECK(S_ISCHR(after.st_mode));
    CHECK_EQ(after.st_rdev, before.st_rdev);
}

/* A pipe whose reader is gone, as a path ("/dev/fd/N" names its write
 * end); sets *write_end, to close after. */
static int pipe_without_reader(char *path, size_t size, int *write_end) {
    int fds[2];
    if (pipe(fds) != 0) return 0;
    close(fds[0]);
    *write_end = fds[1];
    snprintf(path, size, "/dev/fd/%d", fds[1]);
    return 1;
}

static int sigpipe_pending(void) {
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    return sigismember(&pending, SIGPIPE);
}

static int sigpipe_blocked(void) {
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, NULL, &mask);
    return sigismember(&mask, SIGPIPE);
}

static int sigpipe_handled;
static void count_sigpipe(int sig) {
    (void)sig;
    ainc(&sigpipe_handled);
}

/* A snapshot into a pipe nobody reads fails with CPOOL_ERR_IO, naming the
 * pipe's error, instead of ending the process by SIGPIPE; the caller's
 * signal mask, handler and pending signals are left as they were. */
static void into_a_pipe_without_reader(cpool_device *dev) {
    static stream_pool f;
    char path[64];
    int write_end = -1;
    REQUIRE(fixture_open(dev, NULL, &f));
    cpool_pool_stats before = stats_of(f.pool);
    /* SIGPIPE's default action, which ends the process. */
    struct sigaction dfl = {.sa_handler = SIG_DFL}, saved;
    REQUIRE(sigaction(SIGPIPE, &dfl, &saved) == 0);
    REQUIRE(pipe_without_reader(path, sizeof path, &write_end));
    CHECK_STATUS(cpool_pool_write_snapshot(f.pool, path), CPOOL_ERR_IO);
    CHECK(strstr(cpool_last_error(), path) != NULL);
    CHECK(strstr(cpool_last_error(), strerror(EPIPE)) != NULL);
    CHECK(!sigpipe_blocked());
    CHECK(!sigpipe_pending());
    close(write_end);
    /* A handler of the caller's stays installed and is not called. */
    struct sigaction counting = {.sa_handler = count_sigpipe}, now;
    sigemptyset(&counting.sa_mask);
    REQUIRE(sigaction(SIGPIPE, &counting, NULL) == 0);
    astore(&sigpipe_handled, 0);
    REQUIRE(pipe_without_reader(path, sizeof path, &write_end));
    CHECK_STATUS(cpool_pool_write_snapshot(f.pool, path), CPOOL_ERR_IO);
    CHECK_EQ(aload(&sigpipe_handled), 0);
    REQUIRE(sigaction(SIGPIPE, NULL, &now) == 0);
    CHECK(now.sa_handler == count_sigpipe);
    close(write_end);
    /* A SIGPIPE that was pending for the caller, blocked, stays pending. */
    sigset_t pipe_only, old_mask;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    REQUIRE(pthread_sigmask(SIG_BLOCK, &pipe_only, &old_mask) == 0);
    REQUIRE(pthread_kill(pthread_self(), SIGPIPE) == 0);
    REQUIRE(pipe_without_reader(path, sizeof path, &write_end));
    CHECK_STATUS(cpool_pool_write_snapshot(f.pool, path), CPOOL_ERR_IO);
    CHECK(sigpipe_blocked());
    CHECK(sigpipe_pending());
    struct timespec zero = {0, 0};
    CHECK_EQ(sigtimedwait(&pipe_only, NULL, &zero), SIGPIPE);
    CHECK(!sigpipe_pending());
    close(write_end);
    REQUIRE(pthread_sigmask(SIG_SETMASK, &old_mask, NULL) == 0);
    REQUIRE(sigaction(SIGPIPE, &saved, NULL) == 0);
    CHECK_EQ(aload(&sigpipe_handled), 0);
    cpool_pool_stats after = stats_of(f.pool);
    CHECK(memcmp(&before, &after, sizeof before) == 0);
}

static void bad_input_refused(cpool_device *dev) {
    static stream_pool f;
    cpool_pool *dead = NULL;
    cpool_graph_stats gs = {.struct_size = sizeof gs};
    REQUIRE(fixture_open(dev, NULL, &f));
    void *p = NULL;
    REQUIRE_OK(cpool_alloc(f.pool, 4096, f.s, &p));
    cpool_pool_stats before = stats_of(f.pool);
    CHECK_STATUS(cpool_pool_write_snapshot(NULL, snapshot_path()), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_pool_write_snapshot(f.pool, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_pool_write_snapshot(f.pool, "/nonexistent-dir/cpool/snapshot.json"), CPOOL_ERR_IO);
    CHECK(strstr(cpool_last_error(), "/nonexistent-dir/cpool/snapshot.json") != NULL);
    CHECK_STATUS(cpool_pool_write_snapshot(f.pool, "/"), CPOOL_ERR_IO); /* a directory */
    REQUIRE_OK(cpool_pool_create(dev, NULL, &dead));
    cpool_pool_release(dead);
    CHECK_STATUS(cpool_pool_write_snapshot(dead, snapshot_path()), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(access(snapshot_path(), F_OK) != 0); /* nothing written */
    cpool_pool_stats after = stats_of(f.pool);
    CHECK(memcmp(&before, &after, sizeof before) == 0);
    CHECK_STATUS(cpool_graph_get_stats(NULL, &gs), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_OK(cpool_free(f.pool, p, f.s));
    graph_body b = {f.pool, 4096, 512, NULL};
    cpool_graph *g = NULL;
    REQUIRE_OK(cpool_capture(f.s, f.pool, CPOOL_CAPTURE_GLOBAL, body_scratch_and_output, &b, &g));
    CHECK_STATUS(cpool_graph_get_stats(g, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    gs.struct_size = sizeof(size_t);
    CHECK_STATUS(cpool_graph_get_stats(g, &gs), CPOOL_ERR_INVALID_ARGUMENT);
    cpool_graph_release(g);
    gs.struct_size = sizeof gs;
    CHECK_STATUS(cpool_graph_get_stats(g, &gs), CPOOL_ERR_INVALID_ARGUMENT); /* dead */
    CHECK_OK(cpool_free(f.pool, b.output, f.s));
}

/* A capture under way has no outputs yet: its live blocks, a said output
 * among them, are graph_live with output false; at its end they are
 * outputs. A trim that gives back a released graph's scratch while its
 * output lives leaves the rest of its arena graph memory. */
static void blocks_of_a_capture_under_way(cpool_device *dev) {
    static stream_pool f;
    snapshot_sums sum;
    REQUIRE(fixture_open(dev, NULL, &f));
    REQUIRE_OK(cpool_capture_begin(f.s, f.pool, CPOOL_CAPTURE_GLOBAL));
    void *said = NULL, *kept = NULL, *scratch = NULL;
    CHECK_OK(cpool_alloc_output(f.pool, 3000, f.s, &said));
    CHECK_OK(cpool_alloc(f.pool, 3 << 20, f.s, &scratch));
    CHECK_OK(cpool_alloc(f.pool, 1 << 20, f.s, &kept));
    CHECK_OK(cpool_memset_async(f.s, scratch, 1, 3 << 20));
    CHECK_OK(cpool_free(f.pool, scratch, f.s));
    json *root = checked_snapshot(f.pool, NULL, &sum);
    CHECK_EQ(sum.outputs, 0);
    json_free(root);
    cpool_graph *g = NULL;
    CHECK_OK(cpool_capture_end(f.s, &g));
    cpool_pool_stats st = stats_of(f.pool);
    root = checked_snapshot(f.pool, &st, &sum);
    CHECK_EQ(sum.outputs, 2);
    json_free(root);
    cpool_graph_release(g);
    CHECK(wait_graph_count(f.pool, 0, WAIT_TIMEOUT_MS));
    CHECK_OK(cpool_pool_trim(f.pool));
    st = stats_of(f.pool);
    root = checked_snapshot(f.pool, &st, &sum);
    CHECK_EQ(sum.outputs, 2);
    json_free(root);
    CHECK_OK(cpool_free(f.pool, said, f.s));
    CHECK_OK(cpool_free(f.pool, kept, f.s));
}

static const check_case cases[] = {
    CHECK_CASE(empty_pool),
    CHECK_CASE(eager_blocks_on_two_streams),
    CHECK_CASE(graphs_with_scratch_and_outputs),
    CHECK_CASE(graphs_share_pages_by_physical_id),
    CHECK_CASE(consistent_under_concurrent_allocation),
    CHECK_CASE(a_graph_that_writes_no_graph_memory_is_listed),
    CHECK_CASE(graph_count_is_the_list_under_concurrent_capture),
    CHECK_CASE(during_a_multi_stream_capture),
    CHECK_CASE(blocks_of_a_capture_under_way),
    CHECK_CASE(replaces_a_longer_file_and_writes_to_a_device),
    CHECK_CASE(into_a_pipe_without_reader),
    CHECK_CASE(bad_input_refused),
};
CHECK_MAIN(cases, CHECK_ON_ALL)
