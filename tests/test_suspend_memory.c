/* A resume needs device memory, and the host backend's device runs out of
 * it as a GPU does (CPOOL_HOST_MEMORY, set by main before any device is
 * opened: 64 MiB). A suspended pool's memory goes to another pool; the
 * resume then returns CPOOL_ERR_OUT_OF_MEMORY, the pool stays suspended
 * with its kept bytes, nothing leaks (what the failed resume mapped is
 * given back: the other pool can take the rest of the device), and once
 * the memory is free the resume succeeds with every byte back. */
#include "check.h" /* first: its feature macro */
#include "helpers.h"

#include <stdlib.h>

#define MiB ((size_t)1 << 20)
#define DEVICE_BYTES (64 * MiB)
#define PAGE (2 * MiB)

static unsigned char pattern_byte(uint32_t seed, size_t i) {
    uint64_t x = (uint64_t)seed * 0x9e3779b97f4a7c15ull + (uint64_t)i * 0xbf58476d1ce4e5b9ull;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 29;
    return (unsigned char)x;
}

/* Writes (check == 0) or checks (check == 1) the pattern `seed` in n bytes
 * of pool memory. */
static int pattern_(cpool_stream *s, void *p, size_t n, uint32_t seed, int check, int line) {
    unsigned char *h = (unsigned char *)malloc(n);
    int ok = 1;
    if (!h) return 0;
    if (!check) {
        for (size_t i = 0; i < n; i++) h[i] = pattern_byte(seed, i);
        ok =
            check_status_(cpool_memcpy_async(s, p, h, n), CPOOL_OK, "cpool_memcpy_async", "CPOOL_OK", __FILE__, line) &&
            check_status_(cpool_stream_synchronize(s), CPOOL_OK, "cpool_stream_synchronize", "CPOOL_OK", __FILE__,
                          line);
    } else if (!check_status_(read_back(s, h, p, n), CPOOL_OK, "read_back", "CPOOL_OK", __FILE__, line)) {
        ok = 0;
    } else {
        for (size_t i = 0; i < n; i++)
            if (h[i] != pattern_byte(seed, i)) {
                check_report_(__FILE__, line, "byte %zu of %zu at %p is 0x%02x, expected 0x%02x", i, n, p, h[i],
                              pattern_byte(seed, i));
                ok = 0;
                break;
            }
    }
    free(h);
    return ok;
}
#define WRITE_PATTERN(s, p, n, seed) pattern_((s), (p), (n), (seed), 0, __LINE__)
#define CHECK_PATTERN(s, p, n, seed) pattern_((s), (p), (n), (seed), 1, __LINE__)

#define CHECK_ALL_STATS_EQ(a, b)                                                                                       \
    do {                                                                                                               \
        CHECK_STATS_EQ(a, b);                                                                                          \
        CHECK_EQ((a).host_kept_bytes, (b).host_kept_bytes);                                                            \
        CHECK_EQ((a).host_reserved_bytes, (b).host_reserved_bytes);                                                    \
    } while (0)

/* A graph of the pool: scratch filled and copied into an output. */
typedef struct graph_ctx {
    cpool_pool *pool;
    void *out;
} graph_ctx;

static cpool_status body_graph(cpool_stream *s, void *arg) {
    graph_ctx *c = (graph_ctx *)arg;
    void *scratch = NULL;
    cpool_status st = cpool_alloc(c->pool, 6 * MiB, s, &scratch);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, 0x4d, 6 * MiB);
    if (st == CPOOL_OK) st = cpool_alloc_output(c->pool, 4096, s, &c->out);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, c->out, (char *)scratch + 5 * MiB, 4096);
    if (scratch && st == CPOOL_OK) st = cpool_free(c->pool, scratch, s);
    return st;
}

/* Takes from `pool` pages of 2 MiB until the device is full (at most
 * max_pages); returns how many. */
static int take_pages(cpool_pool *pool, cpool_stream *s, void **pages, int max_pages) {
    int n = 0;
    while (n < max_pages && cpool_alloc(pool, PAGE, s, &pages[n]) == CPOOL_OK) n++;
    return n;
}

static void resume_without_memory_stays_suspended(cpool_device *dev) {
    cpool_stream *s = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool *pool = NULL, *other = NULL;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &other));

    /* 24 MiB of live blocks in pool, and a graph with an output. */
    void *big = NULL, *small = NULL;
    REQUIRE_OK(cpool_alloc(pool, 20 * MiB + 512, s, &big));
    REQUIRE_OK(cpool_alloc(pool, 4096, s, &small));
    REQUIRE(WRITE_PATTERN(s, big, 20 * MiB + 512, 1));
    REQUIRE(WRITE_PATTERN(s, small, 4096, 2));
    graph_ctx gc = {pool, NULL};
    cpool_graph *g = NULL;
    REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_graph, &gc, &g));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_BYTES(s, gc.out, 4096, 0x4d);

    REQUIRE_OK(cpool_pool_suspend(pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    cpool_pool_stats suspended = stats_of(pool);
    CHECK_EQ(suspended.reserved_bytes, 0);
    CHECK_EQ(suspended.host_kept_bytes, 20 * MiB + 512 + 4096 + 4096);

    /* The other pool takes the whole device now. */
    static void *pages[DEVICE_BYTES / PAGE];
    int taken = take_pages(other, s, pages, (int)(DEVICE_BYTES / PAGE));
    CHECK_EQ(taken, DEVICE_BYTES / PAGE);
    cpool_pool_stats other_full = stats_of(other);
    CHECK_EQ(other_full.reserved_bytes, DEVICE_BYTES);

    if (CHECK_STATUS(cpool_pool_resume(pool), CPOOL_ERR_OUT_OF_MEMORY))
        CHECK(strstr(cpool_last_error(), "cpool_pool_resume"));
    CHECK(cpool_pool_is_suspended(pool));
    CHECK_ALL_STATS_EQ(stats_of(pool), suspended);
    CHECK_ALL_STATS_EQ(stats_of(other), other_full);
    CHECK_STATUS(cpool_graph_launch(g, s), CPOOL_ERR_SUSPENDED);

    /* Room for some of it but not all: the resume fails the same, and what
     * it took on the way is given back (the other pool can take it all). */
    int give = 4; /* 8 MiB free: less than the 20 MiB block needs */
    for (int i = 0; i < give; i++) CHECK_OK(cpool_free(other, pages[taken - 1 - i], s));
    taken -= give;
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_OK(cpool_pool_trim(other));
    cpool_pool_stats other_partial = stats_of(other);
    CHECK_EQ(other_partial.reserved_bytes, DEVICE_BYTES - (size_t)give * PAGE);
    for (int attempt = 0; attempt < 3; attempt++) {
        CHECK_STATUS(cpool_pool_resume(pool), CPOOL_ERR_OUT_OF_MEMORY);
        CHECK(cpool_pool_is_suspended(pool));
        CHECK_ALL_STATS_EQ(stats_of(pool), suspended);
        CHECK_ALL_STATS_EQ(stats_of(other), other_partial);
    }
    int retaken = take_pages(other, s, pages + taken, give);
    CHECK_EQ(retaken, give);
    taken += retaken;

    /* Memory free again: the resume succeeds with every byte. */
    for (int i = 0; i < taken; i++) CHECK_OK(cpool_free(other, pages[i], s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_OK(cpool_pool_trim(other));
    CHECK_EQ(stats_of(other).reserved_bytes, 0);
    CHECK_OK(cpool_pool_resume(pool));
    CHECK(!cpool_pool_is_suspended(pool));
    CHECK_PATTERN(s, big, 20 * MiB + 512, 1);
    CHECK_PATTERN(s, small, 4096, 2);
    CHECK_BYTES(s, gc.out, 4096, 0x4d);
    CHECK_OK(cpool_memset_async(s, gc.out, 0, 4096));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_BYTES(s, gc.out, 4096, 0x4d);

    cpool_graph_release(g);
    CHECK_OK(cpool_free(pool, big, s));
    CHECK_OK(cpool_free(pool, small, s));
    CHECK_OK(cpool_free(pool, gc.out, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK(wait_graph_count(pool, 0, WAIT_TIMEOUT_MS));
    CHECK_OK(cpool_pool_trim(pool));
    cpool_pool_stats end = stats_of(pool);
    CHECK_EQ(end.reserved_bytes, 0);
    CHECK_EQ(end.host_reserved_bytes, 0);
    /* All of the device is there again. */
    void *all = NULL;
    CHECK_OK(cpool_alloc(other, DEVICE_BYTES, s, &all));
    if (all) CHECK_OK(cpool_free(other, all, s));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_pool_release(pool);
    cpool_pool_release(other);
    cpool_stream_destroy(s);
}

/* The last release of a pool whose resume failed gives everything back. */
static void release_after_a_failed_resume(cpool_device *dev) {
    cpool_stream *s = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool *pool = NULL, *other = NULL;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &other));
    void *p = NULL;
    REQUIRE_OK(cpool_alloc(pool, 40 * MiB, s, &p));
    CHECK_OK(cpool_memset_async(s, p, 3, 40 * MiB));
    REQUIRE_OK(cpool_pool_suspend(pool, CPOOL_SUSPEND_DISCARD));
    CHECK_EQ(stats_of(pool).host_reserved_bytes, 0);
    void *q = NULL;
    REQUIRE_OK(cpool_alloc(other, 32 * MiB, s, &q));
    CHECK_STATUS(cpool_pool_resume(pool), CPOOL_ERR_OUT_OF_MEMORY);
    CHECK(cpool_pool_is_suspended(pool));
    CHECK_EQ(stats_of(pool).reserved_bytes, 0);
    CHECK_EQ(stats_of(other).reserved_bytes, 32 * MiB);
    cpool_pool_release(pool);
    void *r = NULL;
    CHECK_OK(cpool_alloc(other, 32 * MiB, s, &r)); /* the rest of the device */
    if (r) CHECK_OK(cpool_free(other, r, s));
    CHECK_OK(cpool_free(other, q, s));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_pool_release(other);
    cpool_stream_destroy(s);
}

static const check_case cases[] = {
    CHECK_CASE(resume_without_memory_stays_suspended),
    CHECK_CASE(release_after_a_failed_resume),
};

int main(int argc, char **argv) {
    setenv("CPOOL_HOST_MEMORY", "64M", 1);
    return check_run_(argc, argv, cases, sizeof cases / sizeof cases[0], CHECK_ON_HOST);
}
