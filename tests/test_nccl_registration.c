/* Pools registered with a communicator (capturepool_nccl.h), run with a fake
 * NCCL (nccl_calls.h) on every backend: each segment is registered once
 * before any block of it is handed out, and deregistered before it goes
 * back (trim, the last release, the last graph that holds the pool); a
 * failed registration refuses the memory. The fake touches a segment's
 * memory when it is deregistered: under AddressSanitizer a deregistration
 * after the memory went back is caught on the host backend. */
#include "check.h" /* first: its feature macro */
#include "helpers.h"

#include <stdint.h>
#include <stdlib.h>

#include "capturepool_nccl.h"
#include "nccl_calls.h"

#define MiB ((size_t)1 << 20)
#define FAKE_COMM ((struct ncclComm *)(uintptr_t)0x5eed)

enum { MAX_REGS = 512 };
typedef struct fake_reg {
    char *base;
    size_t size;
    int live;
} fake_reg;
static struct {
    fake_reg reg[MAX_REGS];
    int count, live, fail_next, deregistered;
    cpool_backend backend;
} fake;

static int fake_register(struct ncclComm *comm, void *buff, size_t size, void **handle) {
    CHECK(comm == FAKE_COMM);
    if (fake.fail_next) {
        fake.fail_next = 0;
        return 3; /* ncclInternalError */
    }
    for (int i = 0; i < fake.count; i++) CHECK(!(fake.reg[i].live && fake.reg[i].base == buff)); /* once */
    if (fake.count == MAX_REGS) return 3;
    fake.reg[fake.count] = (fake_reg){(char *)buff, size, 1};
    *handle = (void *)(uintptr_t)(fake.count + 1);
    fake.count++;
    fake.live++;
    return 0;
}

static int fake_deregister(struct ncclComm *comm, void *handle) {
    CHECK(comm == FAKE_COMM);
    int i = (int)(uintptr_t)handle - 1;
    CHECK(i >= 0 && i < fake.count);
    if (i < 0 || i >= fake.count) return 3;
    CHECK(fake.reg[i].live); /* exactly once */
    if (fake.backend == CPOOL_BACKEND_HOST) fake.reg[i].base[fake.reg[i].size - 1] = 1; /* still the pool's */
    fake.reg[i].live = 0;
    fake.live--;
    fake.deregistered++;
    return 0;
}

static const char *fake_error(int result) { return result == 3 ? "internal error (fake)" : "unknown (fake)"; }

static const cpool__nccl_calls fake_calls = {fake_register, fake_deregister, fake_error};

static void fake_reset(cpool_device *dev) {
    memset(&fake, 0, sizeof fake);
    fake.backend = cpool_device_backend(dev);
    cpool__nccl_use_calls(&fake_calls);
}

/* Whether [p, p + bytes) lies inside one live registration. */
static int registered(const void *p, size_t bytes) {
    for (int i = 0; i < fake.count; i++)
        if (fake.reg[i].live && (const char *)p >= fake.reg[i].base &&
            (const char *)p + bytes <= fake.reg[i].base + fake.reg[i].size)
            return 1;
    return 0;
}

/* First, while nothing has loaded NCCL: a library that is not there gives
 * UNSUPPORTED with the reason, changing nothing. */
static void without_nccl_unsupported(cpool_device *dev) {
    cpool__nccl_use_calls(NULL);
    setenv("CPOOL_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
    cpool_pool *pool = NULL;
    CHECK_STATUS(cpool_nccl_pool_create(dev, FAKE_COMM, NULL, &pool), CPOOL_ERR_UNSUPPORTED);
    CHECK(pool == NULL);
    CHECK(strstr(cpool_last_error(), "NCCL") != NULL);
    unsetenv("CPOOL_NCCL_LIBRARY");
}

static void bad_input_refused(cpool_device *dev) {
    fake_reset(dev);
    cpool_pool *pool = NULL;
    CHECK_STATUS(cpool_nccl_pool_create(NULL, FAKE_COMM, NULL, &pool), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_nccl_pool_create(dev, NULL, NULL, &pool), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_nccl_pool_create(dev, FAKE_COMM, NULL, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    cpool_pool_options small = {.struct_size = 1};
    CHECK_STATUS(cpool_nccl_pool_create(dev, FAKE_COMM, &small, &pool), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(pool == NULL);
    CHECK_EQ(fake.count, 0);
    CHECK_EQ(cpool_nccl_registration_count(NULL), 0);
    cpool_pool *plain = NULL;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &plain));
    CHECK_EQ(cpool_nccl_registration_count(plain), 0); /* not a registered pool */
    cpool_pool_release(plain);
    cpool__nccl_use_calls(NULL);
}

/* Blocks of many sizes each lie inside one registration, made before the
 * block was handed out; one registration a segment. */
static void each_segment_registered_once_before_use(cpool_device *dev) {
    fake_reset(dev);
    cpool_stream *s;
    cpool_pool *pool;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_nccl_pool_create(dev, FAKE_COMM, NULL, &pool));
    CHECK(!cpool_pool_grows_in_place(pool)); /* plain segments: a buffer never spans two registrations */
    static const size_t sizes[] = {256, 4096, 1 << 20, (1 << 20) + 512, 3 * MiB, 24 * MiB, 512, 40 * MiB};
    void *p[8];
    for (int i = 0; i < 8; i++) {
        REQUIRE_OK(cpool_alloc(pool, sizes[i], s, &p[i]));
        CHECK(registered(p[i], sizes[i]));
    }
    CHECK_EQ(fake.live, (int)stats_of(pool).segment_count);
    CHECK_EQ(cpool_nccl_registration_count(pool), (size_t)fake.live);
    for (int i = 0; i < 8; i++) CHECK_OK(cpool_free(pool, p[i], s));
    cpool_pool_release(pool);
    CHECK_EQ(fake.live, 0);
    CHECK_EQ(fake.deregistered, fake.count);
    cpool_stream_destroy(s);
    cpool__nccl_use_calls(NULL);
}

/* Trim deregisters the segments it gives back, and only those; new
 * segments are registered again; the last release deregisters the rest. */
static void trim_and_release_deregister(cpool_device *dev) {
    fake_reset(dev);
    cpool_stream *s;
    cpool_pool *pool;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_nccl_pool_create(dev, FAKE_COMM, NULL, &pool));
    void *kept, *gone;
    REQUIRE_OK(cpool_alloc(pool, 24 * MiB, s, &kept));
    REQUIRE_OK(cpool_alloc(pool, 40 * MiB, s, &gone));
    CHECK_EQ(fake.live, 2);
    CHECK_OK(cpool_free(pool, gone, s));
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_EQ(fake.live, 1);
    CHECK(registered(kept, 24 * MiB));
    CHECK_EQ(cpool_nccl_registration_count(pool), 1);
    REQUIRE_OK(cpool_alloc(pool, 40 * MiB, s, &gone));
    CHECK(registered(gone, 40 * MiB));
    CHECK_EQ(fake.live, 2);
    CHECK_OK(cpool_free(pool, gone, s));
    CHECK_OK(cpool_free(pool, kept, s));
    cpool_pool_release(pool);
    CHECK_EQ(fake.live, 0);
    CHECK_EQ(fake.deregistered, 3);
    CHECK_EQ(cpool_nccl_registration_count(pool), 0); /* a dead handle */
    cpool_stream_destroy(s);
    cpool__nccl_use_calls(NULL);
}

typedef struct scratch_body {
    cpool_pool *pool;
    void *at;
} scratch_body;

static cpool_status use_scratch(cpool_stream *s, void *arg) {
    scratch_body *b = arg;
    cpool_status st = cpool_alloc(b->pool, 8 * MiB, s, &b->at);
    if (st == CPOOL_OK) st = cpool_memset_async(s, b->at, 7, 8 * MiB);
    if (st == CPOOL_OK) st = cpool_free(b->pool, b->at, s);
    return st;
}

/* A graph that holds the pool keeps its registrations after the caller's
 * release, as it keeps the memory; they go with the graph. */
static void a_graph_keeps_the_registrations(cpool_device *dev) {
    fake_reset(dev);
    cpool_stream *s;
    cpool_pool *pool;
    cpool_graph *g = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_nccl_pool_create(dev, FAKE_COMM, NULL, &pool));
    scratch_body body = {pool, NULL};
    REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, use_scratch, &body, &g));
    CHECK(registered(body.at, 8 * MiB));
    cpool_pool_release(pool);
    CHECK_EQ(fake.live, 1);
    CHECK_OK(cpool_pool_trim(cpool_graph_pool(g))); /* the graph's scratch stays, registered */
    CHECK_EQ(fake.live, 1);
    for (int i = 0; i < 3; i++) CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_graph_release(g);
    cpool_wait_deferred();
    CHECK_EQ(fake.live, 0);
    CHECK_EQ(fake.deregistered, 1);
    cpool_stream_destroy(s);
    cpool__nccl_use_calls(NULL);
}

/* A registration NCCL refuses refuses the memory: the allocation fails
 * with NCCL's message, nothing is reserved, and the next one works; at
 * creation (reserve_bytes) the pool is not made and nothing stays. */
static void failed_registration_refuses_the_memory(cpool_device *dev) {
    fake_reset(dev);
    cpool_stream *s;
    cpool_pool *pool = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_pool_options reserve = {.struct_size = sizeof reserve, .reserve_bytes = 4 * MiB};
    fake.fail_next = 1;
    CHECK_STATUS(cpool_nccl_pool_create(dev, FAKE_COMM, &reserve, &pool), CPOOL_ERR_BACKEND);
    CHECK(pool == NULL);
    CHECK_EQ(fake.live, 0);
    REQUIRE_OK(cpool_nccl_pool_create(dev, FAKE_COMM, &reserve, &pool));
    CHECK_EQ(fake.live, 1); /* the reserve, registered at creation */
    void *p = NULL;
    fake.fail_next = 1;
    CHECK_STATUS(cpool_alloc(pool, 40 * MiB, s, &p), CPOOL_ERR_BACKEND);
    CHECK(strstr(cpool_last_error(), "internal error (fake)") != NULL);
    CHECK(p == NULL);
    CHECK_EQ(stats_of(pool).reserved_bytes, 4 * MiB);
    CHECK_EQ(fake.live, 1);
    REQUIRE_OK(cpool_alloc(pool, 40 * MiB, s, &p));
    CHECK(registered(p, 40 * MiB));
    CHECK_OK(cpool_free(pool, p, s));
    cpool_pool_release(pool);
    CHECK_EQ(fake.live, 0);
    cpool_stream_destroy(s);
    cpool__nccl_use_calls(NULL);
}

static const check_case cases[] = {
    CHECK_CASE(without_nccl_unsupported),
    CHECK_CASE(bad_input_refused),
    CHECK_CASE(each_segment_registered_once_before_use),
    CHECK_CASE(trim_and_release_deregister),
    CHECK_CASE(a_graph_keeps_the_registrations),
    CHECK_CASE(failed_registration_refuses_the_memory),
};

CHECK_MAIN(cases, CHECK_ON_ALL)
