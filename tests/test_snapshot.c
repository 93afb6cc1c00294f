/* Snapshots and per-graph accounting, on every backend: every snapshot is
 * read back with a JSON parser (json.h) and its sums checked against the
 * stats it carries and against cpool_pool_get_stats of the same moment, in
 * many states: empty, eager blocks on two streams (some parked in the front
 * cache), a parameter block, graphs with scratch and outputs that share
 * scratch, a graph that writes no graph memory, after release and trim,
 * while another thread allocates, and while other threads capture and
 * release graphs (the list of graphs is always stats.graph_count long).
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

/* What a snapshot says, summed. */
typedef struct snapshot_sums {
    uint64_t segments, segment_bytes, live_requested, graph_bytes, free_bytes, blocks, outputs, params;
    uint64_t graphs;
    uint64_t streams[8]; /* distinct streams of live blocks */
    size_t stream_count;
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
    if (graph) sum->graph_bytes += size;
    if (!live) sum->free_bytes += size;
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

/* Writes a snapshot of pool, reads it back, checks its shape and that its
 * sums equal the stats in it, and those the stats of the moment (`stats`:
 * taken just before, when nothing else runs; NULL when another thread
 * allocates). Returns the tree (json_free it) and the sums, or NULL. */
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
    const json *st = json_get(root, "stats"), *segments = json_get(root, "segments"), *graphs = json_get(root, "graphs");
    const json *backend = json_get(root, "backend");
    CHECK_EQ(member_u64(root, "version"), 1);
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
        const json *seg = segments->items[i], *blocks = json_get(seg, "blocks");
        uint64_t size = member_u64(seg, "size"), offset = 0;
        CHECK(member_u64(seg, "address") != UINT64_MAX);
        if (!blocks || blocks->kind != JSON_ARRAY) {
            check_report_(__FILE__, __LINE__, "segment %zu has no blocks array", i);
            continue;
        }
        for (size_t k = 0; k < blocks->count; k++) {
            add_block(blocks->items[k], offset, sum);
            offset += member_u64(blocks->items[k], "size");
        }
        CHECK_EQ(offset, size); /* the blocks tile the segment */
        sum->segments++;
        sum->segment_bytes += size;
    }
    for (size_t i = 0; i < graphs->count; i++) {
        const json *g = graphs->items[i];
        CHECK(member_u64(g, "id") != UINT64_MAX && member_u64(g, "id") != 0);
        CHECK(member_u64(g, "shared_write_bytes") <= member_u64(g, "write_bytes"));
        CHECK(member_u64(g, "live_outputs") != UINT64_MAX);
    }
    sum->graphs = graphs->count;
    /* Its sums are its stats. */
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
    /* checked_snapshot checks that the list's length is stats.graph_count. */
    for (int i = 0; i < SNAPSHOTS; i++) json_free(checked_snapshot(f.pool, NULL, &sum));
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

static const check_case cases[] = {
    CHECK_CASE(empty_pool),
    CHECK_CASE(eager_blocks_on_two_streams),
    CHECK_CASE(graphs_with_scratch_and_outputs),
    CHECK_CASE(consistent_under_concurrent_allocation),
    CHECK_CASE(a_graph_that_writes_no_graph_memory_is_listed),
    CHECK_CASE(graph_count_is_the_list_under_concurrent_capture),
    CHECK_CASE(during_a_multi_stream_capture),
    CHECK_CASE(replaces_a_longer_file_and_writes_to_a_device),
    CHECK_CASE(into_a_pipe_without_reader),
    CHECK_CASE(bad_input_refused),
};
CHECK_MAIN(cases, CHECK_ON_ALL)
