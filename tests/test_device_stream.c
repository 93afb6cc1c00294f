/* Devices and streams: open/close, backends, stream create/wrap/destroy,
 * stream order of host work, copies and fills. */
#include "check.h"
#include "helpers.h"

/* ---- devices ---------------------------------------------------------------- */

static void device_open_rejects_bad_arguments(cpool_device *dev) {
    cpool_device *d = NULL;
    (void)dev;
    CHECK_STATUS(cpool_device_open(CPOOL_BACKEND_HOST, 0, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_device_open(CPOOL_BACKEND_AUTO, 0, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_device_open(CPOOL_BACKEND_HOST, -1, &d), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_device_open(CPOOL_BACKEND_CUDA, -1, &d), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_device_open((cpool_backend)42, 0, &d), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_device_open((cpool_backend)-1, 0, &d), CPOOL_ERR_INVALID_ARGUMENT);
    /* The host backend has one device, ordinal 0. */
    CHECK_STATUS(cpool_device_open(CPOOL_BACKEND_HOST, 1, &d), CPOOL_ERR_NO_DEVICE);
    /* No machine has this many GPUs. */
    CHECK_STATUS(cpool_device_open(CPOOL_BACKEND_CUDA, 4096, &d), CPOOL_ERR_NO_DEVICE);
}

static void device_backend_is_never_auto(cpool_device *dev) {
    cpool_device *autodev = NULL, *cuda = NULL, *host = NULL;
    cpool_backend b = cpool_device_backend(dev);
    int have_cuda;
    CHECK(b == CPOOL_BACKEND_HOST || b == CPOOL_BACKEND_CUDA);
    CHECK_EQ(cpool_device_backend(NULL), CPOOL_BACKEND_AUTO);

    REQUIRE_OK(cpool_device_open(CPOOL_BACKEND_HOST, 0, &host));
    CHECK_EQ(cpool_device_backend(host), CPOOL_BACKEND_HOST);
    cpool_device_close(host);

    /* AUTO is CUDA exactly where CUDA opens, the host backend elsewhere. */
    have_cuda = cpool_device_open(CPOOL_BACKEND_CUDA, 0, &cuda) == CPOOL_OK;
    if (have_cuda) CHECK_EQ(cpool_device_backend(cuda), CPOOL_BACKEND_CUDA);
    else CHECK_EQ(b, CPOOL_BACKEND_HOST);
    cpool_device_close(cuda);
    REQUIRE_OK(cpool_device_open(CPOOL_BACKEND_AUTO, 0, &autodev));
    if (!getenv("CPOOL_BACKEND")) /* the README's override is tested below */
        CHECK_EQ(cpool_device_backend(autodev), have_cuda ? CPOOL_BACKEND_CUDA : CPOOL_BACKEND_HOST);
    else
        CHECK_NE(cpool_device_backend(autodev), CPOOL_BACKEND_AUTO);
    cpool_device_close(autodev);
    cpool_device_close(NULL); /* no-op */
}

/* README: CPOOL_BACKEND=host (or =cuda) in the environment overrides AUTO. */
static void auto_honours_cpool_backend_env(cpool_device *dev) {
    cpool_device *d = NULL;
    const char *old = getenv("CPOOL_BACKEND");
    char saved[64] = "";
    (void)dev;
    if (old) snprintf(saved, sizeof saved, "%s", old);
    setenv("CPOOL_BACKEND", "host", 1);
    CHECK_OK(cpool_device_open(CPOOL_BACKEND_AUTO, 0, &d));
    CHECK_EQ(cpool_device_backend(d), CPOOL_BACKEND_HOST);
    cpool_device_close(d);
    /* An explicit backend is not overridden. */
    d = NULL;
    CHECK_OK(cpool_device_open(CPOOL_BACKEND_HOST, 0, &d));
    CHECK_EQ(cpool_device_backend(d), CPOOL_BACKEND_HOST);
    cpool_device_close(d);
    if (old) setenv("CPOOL_BACKEND", saved, 1);
    else unsetenv("CPOOL_BACKEND");
}

/* Streams and pools keep their device alive after the caller closes it. */
static void device_kept_alive_by_stream_and_pool(cpool_device *dev0) {
    cpool_device *dev = NULL;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    void *p = NULL;
    int ran = 0;
    REQUIRE_OK(cpool_device_open(cpool_device_backend(dev0), 0, &dev));
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    cpool_device_close(dev);

    CHECK_OK(cpool_alloc(pool, 4096, s, &p));
    CHECK_OK(cpool_memset_async(s, p, 0x5c, 4096));
    CHECK_OK(cpool_launch_host(s, cb_inc, &ran));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&ran), 1);
    CHECK_BYTES(s, p, 4096, 0x5c);
    CHECK_OK(cpool_free(pool, p, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* Once the caller's last open is closed, the handle of a device that its
 * stream keeps alive is refused by the calls that take a device, until it
 * is opened again (the same handle). The fixture's open is the caller's
 * only one here: it is closed and opened again. */
static void closed_device_refused_until_opened_again(cpool_device *dev) {
    cpool_backend backend = cpool_device_backend(dev);
    cpool_stream *s = NULL, *t = NULL;
    cpool_pool *pool = NULL;
    cpool_event *e = NULL;
    cpool_device *again = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    cpool_device_close(dev); /* the stream keeps it alive */
    CHECK_STATUS(cpool_stream_create(dev, &t), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(strstr(cpool_last_error(), "closed") != NULL);
    CHECK_STATUS(cpool_pool_create(dev, NULL, &pool), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_event_create(dev, &e), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_EQ(cpool_device_backend(dev), CPOOL_BACKEND_AUTO);
    CHECK(t == NULL && pool == NULL && e == NULL);
    CHECK_OK(cpool_launch_host(s, cb_inc, &(int){0})); /* the stream itself works on */
    CHECK_OK(cpool_stream_synchronize(s));
    REQUIRE_OK(cpool_device_open(backend, 0, &again)); /* the fixture's open again */
    CHECK(again == dev);
    CHECK_OK(cpool_stream_create(dev, &t));
    cpool_stream_destroy(t);
    cpool_stream_destroy(s);
}

/* ---- streams ------------------------------------------------------------------- */

static void stream_create_and_destroy(cpool_device *dev) {
    cpool_stream *s = NULL, *t = NULL;
    CHECK_STATUS(cpool_stream_create(NULL, &s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_stream_create(dev, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &t));
    CHECK(s != NULL && t != NULL && s != t);
    CHECK_OK(cpool_stream_synchronize(s)); /* nothing enqueued */
    CHECK_STATUS(cpool_stream_synchronize(NULL), CPOOL_ERR_INVALID_ARGUMENT);
    cpool_stream_destroy(s);
    cpool_stream_destroy(t);
    cpool_stream_destroy(NULL); /* no-op */
}

static void stream_native_per_backend(cpool_device *dev) {
    cpool_stream *s = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    if (cpool_device_backend(dev) == CPOOL_BACKEND_HOST) CHECK(cpool_stream_native(s) == NULL);
    else CHECK(cpool_stream_native(s) != NULL);
    CHECK(cpool_stream_native(NULL) == NULL);
    cpool_stream_destroy(s);
}

/* Host: nothing to wrap. CUDA: a wrapped stream runs work in order with the
 * stream it borrows, and destroying the wrapper leaves that stream alive. */
static void stream_wrap_per_backend(cpool_device *dev) {
    cpool_stream *owner = NULL, *w = NULL, *legacy = NULL;
    int ran = 0;
    CHECK_STATUS(cpool_stream_wrap(NULL, NULL, &w), CPOOL_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(cpool_stream_create(dev, &owner));
    if (cpool_device_backend(dev) == CPOOL_BACKEND_HOST) {
        CHECK_STATUS(cpool_stream_wrap(dev, NULL, &w), CPOOL_ERR_UNSUPPORTED);
        CHECK_STATUS(cpool_stream_wrap(dev, (void *)(uintptr_t)0x1234, &w), CPOOL_ERR_UNSUPPORTED);
        cpool_stream_destroy(owner);
        return;
    }
    CHECK_STATUS(cpool_stream_wrap(dev, cpool_stream_native(owner), NULL), CPOOL_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(cpool_stream_wrap(dev, cpool_stream_native(owner), &w));
    CHECK_PTR_EQ(cpool_stream_native(w), cpool_stream_native(owner));
    CHECK_OK(cpool_launch_host(w, cb_inc, &ran));
    CHECK_OK(cpool_stream_synchronize(owner)); /* same CUDA stream */
    CHECK_EQ(aload(&ran), 1);
    cpool_stream_destroy(w);
    /* The borrowed stream still works. */
    CHECK_OK(cpool_launch_host(owner, cb_inc, &ran));
    CHECK_OK(cpool_stream_synchronize(owner));
    CHECK_EQ(aload(&ran), 2);
    /* NULL: the legacy default stream. */
    CHECK_OK(cpool_stream_wrap(dev, NULL, &legacy));
    if (legacy) {
        CHECK_OK(cpool_launch_host(legacy, cb_inc, &ran));
        CHECK_OK(cpool_stream_synchronize(legacy));
        CHECK_EQ(aload(&ran), 3);
        cpool_stream_destroy(legacy);
    }
    cpool_stream_destroy(owner);
}

typedef struct gate {
    int open;
    int entered;
} gate;
/* Blocks its stream until the test opens the gate (bounded, so a broken
 * library cannot hang the suite). */
static void cb_wait_gate(void *arg) {
    gate *g = (gate *)arg;
    astore(&g->entered, 1);
    wait_for_int(&g->open, 1, WAIT_TIMEOUT_MS);
}

typedef struct order_log {
    int n;
    int seq[128];
    int ids[128];
} order_log;
typedef struct order_item {
    order_log *log;
    int id;
} order_item;
static void cb_append(void *arg) {
    order_item *it = (order_item *)arg;
    int k = it->log->n++; /* one stream: calls never overlap */
    if (k < 128) it->log->ids[k] = it->id;
}

/* Host work is asynchronous (it never runs inline on the caller), runs on a
 * thread of the runtime, and in the order it was enqueued. */
static void launch_host_runs_async_in_order(cpool_device *dev) {
    cpool_stream *s = NULL;
    gate g = {0, 0};
    order_log log;
    order_item items[100];
    thread_note note;
    int i, after = 0;
    memset(&log, 0, sizeof log);
    memset(&note, 0, sizeof note);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    CHECK_OK(cpool_launch_host(s, cb_wait_gate, &g));
    CHECK_OK(cpool_launch_host(s, cb_note_thread, &note));
    for (i = 0; i < 100; i++) {
        items[i].log = &log;
        items[i].id = i;
        CHECK_OK(cpool_launch_host(s, cb_append, &items[i]));
    }
    CHECK_OK(cpool_launch_host(s, cb_inc, &after));
    /* The gate holds the stream: nothing behind it may have run. */
    CHECK_EQ(aload(&after), 0);
    CHECK_EQ(aload(&log.n), 0);
    astore(&g.open, 1);
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&g.entered), 1);
    CHECK_EQ(aload(&after), 1);
    CHECK_EQ(log.n, 100);
    for (i = 0; i < 100 && i < log.n; i++) CHECK_EQ(log.ids[i], i);
    CHECK_EQ(aload(&note.set), 1);
    CHECK(!pthread_equal(note.thread, pthread_self()));
    cpool_stream_destroy(s);
}

static void launch_host_rejects_null(cpool_device *dev) {
    cpool_stream *s = NULL;
    int x = 0;
    CHECK_STATUS(cpool_launch_host(NULL, cb_inc, &x), CPOOL_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    CHECK_STATUS(cpool_launch_host(s, NULL, &x), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_OK(cpool_launch_host(s, cb_inc, &x));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(x, 1);
    cpool_stream_destroy(s);
}

/* Two streams are independent queues: a blocked one does not hold the other.
 * (Stream b gets copies, not host work: CUDA may serve every host callback of
 * the process on one thread, which the gate on stream a keeps busy.) */
static void streams_are_independent(cpool_device *dev) {
    cpool_stream *a = NULL, *b = NULL;
    cpool_pool *pool = NULL;
    void *d = NULL;
    gate g = {0, 0};
    int on_a = 0;
    unsigned char host[256];
    REQUIRE_OK(cpool_stream_create(dev, &a));
    REQUIRE_OK(cpool_stream_create(dev, &b));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, sizeof host, b, &d));
    CHECK_OK(cpool_launch_host(a, cb_wait_gate, &g));
    CHECK_OK(cpool_launch_host(a, cb_inc, &on_a));
    memset(host, 0, sizeof host);
    CHECK_OK(cpool_memset_async(b, d, 0x3d, sizeof host));
    CHECK_OK(cpool_memcpy_async(b, host, d, sizeof host));
    CHECK_OK(cpool_stream_synchronize(b));
    CHECK_EQ(host[0], 0x3d);
    CHECK_EQ(host[sizeof host - 1], 0x3d);
    CHECK_EQ(aload(&on_a), 0);
    astore(&g.open, 1);
    CHECK_OK(cpool_stream_synchronize(a));
    CHECK_EQ(aload(&on_a), 1);
    CHECK_OK(cpool_free(pool, d, b));
    cpool_pool_release(pool);
    cpool_stream_destroy(a);
    cpool_stream_destroy(b);
}

/* Destroy waits for the stream's work. */
static void stream_destroy_waits_for_work(cpool_device *dev) {
    cpool_stream *s = NULL;
    static int flag;
    static sleep_set slow;
    astore(&flag, 0);
    slow.ms = 50;
    slow.flag = &flag;
    slow.value = 1;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    CHECK_OK(cpool_launch_host(s, cb_sleep_set, &slow));
    cpool_stream_destroy(s);
    CHECK_EQ(aload(&flag), 1);
}

/* Destroying a capturing stream ends and discards the capture, and the
 * capture's pool reference goes with it. */
static void stream_destroy_while_capturing(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    drop_log log;
    tracked obj;
    int ran = 0;
    drop_log_init(&log);
    tracked_init(&obj, &log, 0, NULL);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_OK(cpool_pool_record(pool, &obj, tracked_drop, NULL));
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_launch_host(s, cb_inc, &ran));
    cpool_stream_destroy(s);
    CHECK_EQ(aload(&ran), 0); /* captured work never ran */
    cpool_pool_release(pool); /* the last reference, if the capture let go of its own */
    CHECK(wait_for_int(&log.count, 1, WAIT_TIMEOUT_MS));
    CHECK_EQ(aload(&obj.drops), 1);
}

/* ---- copies and fills ------------------------------------------------------------- */

static void memcpy_memset_roundtrip(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    unsigned char *src = NULL, *dst = NULL;
    void *a = NULL, *b = NULL;
    const size_t n = 100000;
    size_t i;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    src = (unsigned char *)malloc(n);
    dst = (unsigned char *)malloc(n);
    REQUIRE(src && dst);
    for (i = 0; i < n; i++) src[i] = (unsigned char)(i * 7 + 3);
    memset(dst, 0, n);
    REQUIRE_OK(cpool_alloc(pool, n, s, &a));
    REQUIRE_OK(cpool_alloc(pool, n, s, &b));

    /* host -> device -> device -> host, all in order on s */
    CHECK_OK(cpool_memset_async(s, a, 0, n));
    CHECK_OK(cpool_memcpy_async(s, a, src, n));
    CHECK_OK(cpool_memcpy_async(s, b, a, n));
    CHECK_OK(cpool_memcpy_async(s, dst, b, n));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK(memcmp(src, dst, n) == 0);

    /* Fill uses (unsigned char)value; a partial fill leaves the rest. */
    CHECK_OK(cpool_memset_async(s, b, 0x1ab, n));
    CHECK_BYTES(s, b, n, 0xab);
    CHECK_OK(cpool_memset_async(s, b, -1, 1000));
    CHECK_BYTES(s, b, 1000, 0xff);
    CHECK_BYTES(s, (unsigned char *)b + 1000, n - 1000, 0xab);
    CHECK_OK(cpool_memset_async(s, (unsigned char *)b + 1, 0x00, 1));
    CHECK_OK(read_back(s, dst, b, 3));
    CHECK_EQ(dst[0], 0xff);
    CHECK_EQ(dst[1], 0x00);
    CHECK_EQ(dst[2], 0xff);

    /* Host memory on both sides. */
    memset(dst, 0, n);
    CHECK_OK(cpool_memcpy_async(s, dst, src, n));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK(memcmp(src, dst, n) == 0);

    CHECK_OK(cpool_free(pool, a, s));
    CHECK_OK(cpool_free(pool, b, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
    free(src);
    free(dst);
}

static void memcpy_memset_argument_errors(cpool_device *dev) {
    cpool_stream *s = NULL;
    unsigned char buf[16];
    REQUIRE_OK(cpool_stream_create(dev, &s));
    CHECK_STATUS(cpool_memcpy_async(NULL, buf, buf + 8, 8), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_memcpy_async(s, NULL, buf, 8), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_memcpy_async(s, buf, NULL, 8), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_memset_async(NULL, buf, 0, 8), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_memset_async(s, NULL, 0, 8), CPOOL_ERR_INVALID_ARGUMENT);
    /* bytes == 0: nothing is enqueued, NULL pointers are fine. */
    CHECK_OK(cpool_memcpy_async(s, NULL, NULL, 0));
    CHECK_OK(cpool_memset_async(s, NULL, 0, 0));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_stream_destroy(s);
}

/* A copy runs in order with host work on the same stream. */
static void copies_ordered_with_host_work(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    void *d = NULL;
    static unsigned char host[4096];
    static int flag;
    static sleep_set slow;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, sizeof host, s, &d));
    astore(&flag, 0);
    slow.ms = 30;
    slow.flag = &flag;
    slow.value = 1;
    memset(host, 0, sizeof host);
    CHECK_OK(cpool_memset_async(s, d, 0x42, sizeof host));
    CHECK_OK(cpool_launch_host(s, cb_sleep_set, &slow));
    CHECK_OK(cpool_memset_async(s, d, 0x43, sizeof host));
    CHECK_OK(cpool_memcpy_async(s, host, d, sizeof host));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&flag), 1);
    CHECK_EQ(host[0], 0x43);
    CHECK_EQ(host[sizeof host - 1], 0x43);
    CHECK_OK(cpool_free(pool, d, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

static const check_case cases[] = {
    CHECK_CASE(device_open_rejects_bad_arguments),
    CHECK_CASE(device_backend_is_never_auto),
    CHECK_CASE(auto_honours_cpool_backend_env),
    CHECK_CASE(device_kept_alive_by_stream_and_pool),
    CHECK_CASE(closed_device_refused_until_opened_again),
    CHECK_CASE(stream_create_and_destroy),
    CHECK_CASE(stream_native_per_backend),
    CHECK_CASE(stream_wrap_per_backend),
    CHECK_CASE(launch_host_runs_async_in_order),
    CHECK_CASE(launch_host_rejects_null),
    CHECK_CASE(streams_are_independent),
    CHECK_CASE(stream_destroy_waits_for_work),
    CHECK_CASE(stream_destroy_while_capturing),
    CHECK_CASE(memcpy_memset_roundtrip),
    CHECK_CASE(memcpy_memset_argument_errors),
    CHECK_CASE(copies_ordered_with_host_work),
};
CHECK_MAIN(cases, CHECK_ON_ALL)
