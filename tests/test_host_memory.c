/* The host backend's memory is a device's: CPOOL_HOST_MEMORY caps what all
 * pools of the host device hold together, and every call that needs device
 * memory past it fails with CPOOL_ERR_OUT_OF_MEMORY, changes nothing and
 * works once memory is free again. The cases run with a 64 MiB device (main
 * sets the variable before any device is opened); before them, main checks
 * that a value that is not a size is refused at the open, and, in a child
 * process under an address-space limit, that pools reserve address space
 * in proportion to their use. */
#include "check.h" /* first: its feature macro */
#include "helpers.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define DEVICE_BYTES (64 * MiB)

/* The failure says the host device's memory ran out and names the cap. */
#define CHECK_DEVICE_FULL(call)                                                     \
    do {                                                                            \
        if (CHECK_STATUS(call, CPOOL_ERR_OUT_OF_MEMORY)) {                          \
            CHECK(strstr(cpool_last_error(), "host device's memory is exhausted")); \
            CHECK(strstr(cpool_last_error(), "CPOOL_HOST_MEMORY"));                 \
        }                                                                           \
    } while (0)

static void check_not_capturing(cpool_stream *s) {
    cpool_capture_state state = CPOOL_CAPTURE_ACTIVE;
    CHECK_OK(cpool_capture_status(s, &state));
    CHECK_EQ(state, CPOOL_CAPTURE_NONE);
}

/* ---- a full device -------------------------------------------------------- */

/* A pool holding whatever the device has left, in pages, until released. */
typedef struct filler {
    cpool_pool *pool;
    size_t pages;
} filler;

static void fill(cpool_device *dev, cpool_stream *s, filler *f) {
    f->pool = NULL;
    f->pages = 0;
    CHECK_OK(cpool_pool_create(dev, NULL, &f->pool));
    if (!f->pool) return;
    void *p;
    while (f->pages < DEVICE_BYTES / (2 * MiB) && cpool_alloc(f->pool, 2 * MiB, s, &p) == CPOOL_OK) f->pages++;
    /* Full: a small allocation finds no page either. */
    CHECK_DEVICE_FULL(cpool_alloc(f->pool, 512, s, &p));
}

/* Gives the filler's memory back to the device. */
static void unfill(cpool_stream *s, filler *f) {
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_pool_release(f->pool);
    f->pool = NULL;
}

static cpool_status alloc_small(cpool_stream *s, void *ctx) {
    void *p;
    cpool_status st = cpool_alloc(ctx, 4096, s, &p);
    if (st == CPOOL_OK) st = cpool_memset_async(s, p, 1, 4096);
    if (st == CPOOL_OK) st = cpool_free(ctx, p, s);
    return st;
}

static cpool_status alloc_large(cpool_stream *s, void *ctx) {
    void *p;
    cpool_status st = cpool_alloc(ctx, 8 * MiB, s, &p);
    if (st == CPOOL_OK) st = cpool_memset_async(s, p, 2, 8 * MiB);
    if (st == CPOOL_OK) st = cpool_free(ctx, p, s);
    return st;
}

/* ---- the cap -------------------------------------------------------------- */

/* CPOOL_HOST_MEMORY=64M is 64 MiB exactly: all of it can be had, and not a
 * page more. */
static void the_cap_is_what_the_variable_says(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool *pool;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    void *all = NULL, *more = NULL;
    CHECK_OK(cpool_alloc(pool, DEVICE_BYTES, s, &all));
    CHECK_EQ(stats_of(pool).reserved_bytes, DEVICE_BYTES);
    CHECK_DEVICE_FULL(cpool_alloc(pool, 512, s, &more));
    CHECK(strstr(cpool_last_error(), "cpool_alloc"));
    CHECK(more == NULL);
    CHECK_EQ(stats_of(pool).reserved_bytes, DEVICE_BYTES);
    CHECK_OK(cpool_free(pool, all, s));
    CHECK_OK(cpool_alloc(pool, 512, s, &more));
    CHECK_OK(cpool_free(pool, more, s));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* Plain segments count as pages do. */
static void plain_segments_count_too(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool_options opts = {.struct_size = sizeof opts, .plain_segments = true};
    cpool_pool *pool;
    REQUIRE_OK(cpool_pool_create(dev, &opts, &pool));
    void *a = NULL, *b = NULL;
    CHECK_OK(cpool_alloc(pool, 48 * MiB, s, &a));
    cpool_pool_stats before = stats_of(pool);
    CHECK_DEVICE_FULL(cpool_alloc(pool, 32 * MiB, s, &b));
    CHECK_STATS_EQ(stats_of(pool), before);
    CHECK_OK(cpool_free(pool, a, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_OK(cpool_alloc(pool, 32 * MiB, s, &b)); /* the cached segment goes back for it */
    CHECK_OK(cpool_free(pool, b, s));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* Two pools of one device share its memory: what one holds, the other
 * cannot have until it is given back. */
static void pools_share_the_cap(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool *a, *b;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &a));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &b));
    void *pa = NULL, *pb = NULL;
    CHECK_OK(cpool_alloc(a, 40 * MiB, s, &pa));
    CHECK_DEVICE_FULL(cpool_alloc(b, 40 * MiB, s, &pb));
    CHECK_EQ(stats_of(b).reserved_bytes, 0);
    CHECK_OK(cpool_alloc(b, 24 * MiB, s, &pb)); /* what is left */
    CHECK_OK(cpool_free(a, pa, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_OK(cpool_pool_trim(a));
    CHECK_EQ(stats_of(a).reserved_bytes, 0);
    void *pb2 = NULL;
    CHECK_OK(cpool_alloc(b, 40 * MiB, s, &pb2));
    CHECK_OK(cpool_free(b, pb, s));
    CHECK_OK(cpool_free(b, pb2, s));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_pool_release(a);
    cpool_pool_release(b);
    cpool_stream_destroy(s);
}

/* ---- every call that takes device memory, on a full device -------------- */

static void alloc_on_a_full_device(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool *pool;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    filler f;
    fill(dev, s, &f);
    CHECK_EQ(f.pages, DEVICE_BYTES / (2 * MiB));
    cpool_pool_stats before = stats_of(pool);
    void *p = NULL;
    CHECK_DEVICE_FULL(cpool_alloc(pool, 512, s, &p));
    CHECK_DEVICE_FULL(cpool_alloc(pool, 8 * MiB, s, &p));
    CHECK_DEVICE_FULL(cpool_alloc_output(pool, 512, s, &p));
    CHECK_DEVICE_FULL(cpool_alloc_output(pool, 8 * MiB, s, &p));
    CHECK(p == NULL);
    CHECK_STATS_EQ(stats_of(pool), before);
    unfill(s, &f);
    CHECK_OK(cpool_alloc(pool, 8 * MiB, s, &p));
    CHECK_OK(cpool_free(pool, p, s));
    CHECK_OK(cpool_alloc_output(pool, 512, s, &p));
    CHECK_OK(cpool_free(pool, p, s));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

static void pool_reserve_on_a_full_device(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool_options opts = {.struct_size = sizeof opts, .reserve_bytes = 8 * MiB};
    cpool_pool_options plain = opts;
    plain.plain_segments = true;
    cpool_pool *pool = NULL;
    /* More than the device has, on an empty device. */
    cpool_pool_options huge = {.struct_size = sizeof huge, .reserve_bytes = 2 * DEVICE_BYTES};
    CHECK_DEVICE_FULL(cpool_pool_create(dev, &huge, &pool));
    CHECK(strstr(cpool_last_error(), "cpool_pool_create"));
    CHECK(pool == NULL);
    filler f;
    fill(dev, s, &f);
    CHECK_DEVICE_FULL(cpool_pool_create(dev, &opts, &pool));
    CHECK_DEVICE_FULL(cpool_pool_create(dev, &plain, &pool));
    CHECK(pool == NULL);
    unfill(s, &f);
    CHECK_OK(cpool_pool_create(dev, &opts, &pool));
    if (pool) CHECK_EQ(stats_of(pool).reserved_bytes, 8 * MiB);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* A capture whose body cannot allocate ends, the stream usable, and nothing
 * of it is kept; begin and end themselves take no device memory. */
static void capture_on_a_full_device(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool *pool;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    filler f;
    fill(dev, s, &f);
    cpool_pool_stats before = stats_of(pool);
    cpool_graph *g = NULL;
    CHECK_DEVICE_FULL(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, alloc_small, pool, &g));
    CHECK(g == NULL);
    check_not_capturing(s);
    CHECK_DEVICE_FULL(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, alloc_large, pool, &g));
    CHECK(g == NULL);
    check_not_capturing(s);
    CHECK_STATS_EQ(stats_of(pool), before);

    CHECK_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    void *p = NULL;
    CHECK_DEVICE_FULL(cpool_alloc(pool, 4096, s, &p));
    CHECK_DEVICE_FULL(cpool_alloc_output(pool, 4096, s, &p));
    CHECK_OK(cpool_capture_end(s, &g)); /* an empty graph needs no memory */
    check_not_capturing(s);
    cpool_graph_release(g);
    g = NULL;
    CHECK_STATS_EQ(stats_of(pool), before);

    unfill(s, &f);
    CHECK_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, alloc_large, pool, &g));
    if (g) CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_graph_release(g);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

typedef struct two_allocs {
    cpool_pool *pool;
    size_t first, second;
    char error[512]; /* cpool_last_error() where the body failed */
} two_allocs;

/* Keeps `first` allocated and asks for `second` on top. */
static cpool_status alloc_twice(cpool_stream *s, void *ctx) {
    two_allocs *a = ctx;
    void *p, *q;
    cpool_status st = cpool_alloc(a->pool, a->first, s, &p);
    if (st == CPOOL_OK) st = cpool_alloc(a->pool, a->second, s, &q);
    snprintf(a->error, sizeof a->error, "%s", cpool_last_error());
    return st;
}

/* The body fails on the full device with a block still live: the capture's
 * discard, which has no memory for that block's pages either, leaves the
 * body's status and text as the body left them. */
static void capture_failure_keeps_the_bodys_words(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    two_allocs a = {fx.pool, 40 * MiB, 40 * MiB, ""};
    cpool_graph *g = NULL;
    CHECK_STATUS(cpool_capture(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL, alloc_twice, &a, &g), CPOOL_ERR_OUT_OF_MEMORY);
    CHECK(g == NULL);
    CHECK_STR_EQ(cpool_last_error(), a.error);
    CHECK(strncmp(cpool_last_error(), "cpool_alloc: ", 13) == 0);
    CHECK_STATUS(cpool_graphed_call(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL, 0, alloc_twice, &a, &g),
                 CPOOL_ERR_OUT_OF_MEMORY);
    CHECK_STR_EQ(cpool_last_error(), a.error);
    check_not_capturing(fx.s);
}

/* An update that needs more memory than the device has left keeps the
 * graph as it was: it still launches its old work. */
static void graph_update_on_a_full_device(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool *pool;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    cpool_graph *g = NULL;
    CHECK_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, alloc_small, pool, &g));
    REQUIRE(g != NULL);
    filler f;
    fill(dev, s, &f);
    cpool_pool_stats before = stats_of(pool);
    CHECK_DEVICE_FULL(cpool_graph_update(g, s, alloc_large, pool));
    check_not_capturing(s);
    CHECK_STATS_EQ(stats_of(pool), before);
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    unfill(s, &f);
    CHECK_OK(cpool_graph_update(g, s, alloc_large, pool));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_graph_release(g);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

static void graphed_call_on_a_full_device(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool *pool;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    filler f;
    fill(dev, s, &f);
    cpool_pool_stats before = stats_of(pool);
    cpool_graph *g = NULL;
    for (int warmup = 0; warmup < 2; warmup++) {
        CHECK_DEVICE_FULL(cpool_graphed_call(s, pool, CPOOL_CAPTURE_GLOBAL, warmup, alloc_large, pool, &g));
        CHECK(g == NULL);
        check_not_capturing(s);
    }
    CHECK_STATS_EQ(stats_of(pool), before);
    unfill(s, &f);
    CHECK_OK(cpool_graphed_call(s, pool, CPOOL_CAPTURE_GLOBAL, 1, alloc_large, pool, &g));
    if (g) CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_graph_release(g);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

static void param_on_a_full_device(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool *pool;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    filler f;
    fill(dev, s, &f);
    cpool_pool_stats before = stats_of(pool);
    cpool_param *param = NULL;
    CHECK_DEVICE_FULL(cpool_param_create(pool, 64, &param));
    CHECK(param == NULL);
    CHECK_STATS_EQ(stats_of(pool), before);
    unfill(s, &f);
    CHECK_OK(cpool_param_create(pool, 64, &param));
    uint64_t step = 7;
    if (param) CHECK_OK(cpool_param_set(param, &step, sizeof step, s));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* A snapshot takes no device memory: it works on a full device, also of a
 * pool that holds all of it. */
static void snapshot_on_a_full_device(cpool_device *dev) {
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    filler f;
    fill(dev, s, &f);
    char path[] = "/tmp/cpool_host_memory_snapshot_XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    if (f.pool) CHECK_OK(cpool_pool_write_snapshot(f.pool, path));
    FILE *file = fopen(path, "r");
    CHECK(file != NULL);
    if (file) {
        char head[64] = "";
        CHECK(fgets(head, sizeof head, file) != NULL);
        CHECK(strchr(head, '{') != NULL);
        fclose(file);
    }
    remove(path);
    unfill(s, &f);
    cpool_stream_destroy(s);
}

static const check_case cases[] = {
    CHECK_CASE(the_cap_is_what_the_variable_says),
    CHECK_CASE(plain_segments_count_too),
    CHECK_CASE(pools_share_the_cap),
    CHECK_CASE(alloc_on_a_full_device),
    CHECK_CASE(pool_reserve_on_a_full_device),
    CHECK_CASE(capture_on_a_full_device),
    CHECK_CASE(graph_update_on_a_full_device),
    CHECK_CASE(graphed_call_on_a_full_device),
    CHECK_CASE(param_on_a_full_device),
    CHECK_CASE(snapshot_on_a_full_device),
    CHECK_CASE(capture_failure_keeps_the_bodys_words),
};

/* ---- before any device is open ------------------------------------------ */

/* Each value is refused by the open, which names the variable and the
 * value; returns the failures. */
static int bad_values_are_refused(void) {
    static const char *const bad[] = {"lots", "64X", "64MB", "-1", "1.5G", " 64M", "99999999999999999999",
                                      "17179869184G"};
    int failures = 0;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("CPOOL_HOST_MEMORY", bad[i], 1);
        cpool_device *dev = NULL;
        cpool_status st = cpool_device_open(CPOOL_BACKEND_HOST, 0, &dev);
        const char *msg = cpool_last_error();
        if (st != CPOOL_ERR_INVALID_ARGUMENT || dev || !strstr(msg, "CPOOL_HOST_MEMORY") || !strstr(msg, bad[i])) {
            printf("  FAIL CPOOL_HOST_MEMORY=\"%s\": %s, \"%s\"\n", bad[i], cpool_status_string(st), msg);
            failures++;
            if (dev) cpool_device_close(dev);
        }
    }
    static const char *const good[] = {"", "1G", "1048576", "64m", "3k"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        setenv("CPOOL_HOST_MEMORY", good[i], 1);
        cpool_device *dev = NULL;
        cpool_status st = cpool_device_open(CPOOL_BACKEND_HOST, 0, &dev);
        if (st != CPOOL_OK) {
            printf("  FAIL CPOOL_HOST_MEMORY=\"%s\" refused: %s\n", good[i], cpool_last_error());
            failures++;
        }
        cpool_device_close(dev);
        cpool_wait_deferred();
    }
    unsetenv("CPOOL_HOST_MEMORY");
    printf("%s bad CPOOL_HOST_MEMORY values are refused at the open\n", failures ? "FAIL" : "PASS");
    return failures;
}

/* CPOOL_HOST_MEMORY=0 means no bound, as 0 does for max_reserved_bytes:
 * the device serves what the machine gives (here 256 MiB). */
static int zero_means_no_bound(void) {
    setenv("CPOOL_HOST_MEMORY", "0", 1);
    cpool_device *dev = NULL;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    void *p = NULL;
    cpool_status st = cpool_device_open(CPOOL_BACKEND_HOST, 0, &dev);
    if (st == CPOOL_OK) st = cpool_stream_create(dev, &s);
    if (st == CPOOL_OK) st = cpool_pool_create(dev, NULL, &pool);
    if (st == CPOOL_OK) st = cpool_alloc(pool, 256 * MiB, s, &p);
    if (st == CPOOL_OK) st = cpool_free(pool, p, s);
    printf("%s CPOOL_HOST_MEMORY=0 is no bound%s%s\n", st == CPOOL_OK ? "PASS" : "FAIL", st == CPOOL_OK ? "" : ": ",
           st == CPOOL_OK ? "" : cpool_last_error());
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
    cpool_device_close(dev);
    cpool_wait_deferred();
    unsetenv("CPOOL_HOST_MEMORY");
    return st == CPOOL_OK ? 0 : 1;
}

/* The address space the process has mapped now. */
static size_t mapped_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (f) {
        if (fscanf(f, "%lu", &pages) != 1) pages = 0;
        fclose(f);
    }
    return (size_t)pages * (size_t)sysconf(_SC_PAGE_SIZE);
}

enum { SMALL_POOLS = 200 };

/* In the child: under a limit of 4 GiB more address space than it maps
 * now, 200 pools with a small allocation each fit and malloc still works;
 * a request for more address space than is left fails and says so. */
static void many_pools_under_an_address_space_limit(cpool_device *unused) {
    (void)unused;
    size_t now = mapped_bytes();
    REQUIRE(now > 0);
    struct rlimit limit = {.rlim_cur = now + 4 * GiB, .rlim_max = now + 4 * GiB};
    REQUIRE(setrlimit(RLIMIT_AS, &limit) == 0);
    cpool_device *dev;
    REQUIRE_OK(cpool_device_open(CPOOL_BACKEND_HOST, 0, &dev));
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    static cpool_pool *pools[SMALL_POOLS];
    int made = 0;
    for (; made < SMALL_POOLS; made++) {
        void *p;
        if (!CHECK_OK(cpool_pool_create(dev, NULL, &pools[made]))) break;
        if (!CHECK_OK(cpool_alloc(pools[made], 4096, s, &p))) {
            made++;
            break;
        }
    }
    CHECK_EQ(made, SMALL_POOLS);
    void *mem = malloc(64 * MiB);
    CHECK(mem != NULL);
    free(mem);
    cpool_pool_stats before = stats_of(pools[0]);
    void *big = NULL;
    if (CHECK_STATUS(cpool_alloc(pools[0], 8 * GiB, s, &big), CPOOL_ERR_OUT_OF_MEMORY))
        CHECK(strstr(cpool_last_error(), "address space"));
    CHECK_STATS_EQ(stats_of(pools[0]), before);
    mem = malloc(64 * MiB);
    CHECK(mem != NULL);
    free(mem);
    CHECK_OK(cpool_stream_synchronize(s));
    for (int i = 0; i < made; i++) cpool_pool_release(pools[i]);
    cpool_stream_destroy(s);
    cpool_device_close(dev);
}

/* Runs the case in a child process, so that its limit stays there. */
static int in_a_child(const char *name, check_case_fn fn) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        check_case_name_ = name;
        check_backend_name_ = "host";
        fn(NULL);
        cpool_wait_deferred();
        fflush(stdout);
        _exit(__atomic_load_n(&check_case_failures_, __ATOMIC_SEQ_CST) ? 1 : 0);
    }
    int status = 0;
    bool ok = pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    printf("%s [host] %s (in a child process)\n", ok ? "PASS" : "FAIL", name);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    int failures = in_a_child("many_pools_under_an_address_space_limit", many_pools_under_an_address_space_limit);
    failures += bad_values_are_refused();
    failures += zero_means_no_bound();
    setenv("CPOOL_HOST_MEMORY", "64M", 1);
    int rc = check_run_(argc, argv, cases, sizeof cases / sizeof cases[0], CHECK_ON_HOST);
    return failures ? 1 : rc;
}
