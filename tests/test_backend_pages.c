/*
 * Graph pages at the backend seam (backend.h: mem_create, mem_map,
 * mem_unmap, mem_release): one physical allocation mapped at several
 * reserved addresses, every mapping seeing the same bytes, each mapping
 * taken down alone, the allocation freed only once mapped nowhere. Against
 * the static library, whose backend table it calls directly: no public
 * function reaches these yet. A backend that has no graph pages refuses
 * mem_create with CPOOL_ERR_UNSUPPORTED and its cases stop there.
 */
#include "check.h"
#include "internal.h" /* the device's backend table and the fault hooks */

enum { PAGE = (int)CPOOL__PAGE_BYTES };

typedef struct seam {
    const cpool__backend *be;
    cpool__bdevice *bd;
    cpool__bstream *s;
    void *a, *b; /* two reservations of two pages each */
    unsigned char *host;
} seam;

static void seam_end(void *p) {
    seam *x = p;
    if (x->s) x->be->stream_destroy(x->s);
    if (x->a) x->be->va_release(x->bd, x->a, 2 * CPOOL__PAGE_BYTES);
    if (x->b) x->be->va_release(x->bd, x->b, 2 * CPOOL__PAGE_BYTES);
    free(x->host);
    free(x);
}

/* The seam of dev's backend, or NULL (with a note) where it has no graph
 * pages. */
static seam *seam_open(cpool_device *dev) {
    seam *x = calloc(1, sizeof *x);
    if (!x) return NULL;
    cpool_device *d = cpool__handle_object(dev, CPOOL__HANDLE_DEVICE);
    x->be = d->be;
    x->bd = d->impl;
    check_defer(seam_end, x);
    if (!x->be->va_supported(x->bd)) {
        printf("  note [%s]: no reserved address space, nothing to map graph pages at\n", x->be->name);
        return NULL;
    }
    cpool__bmem *probe = NULL;
    cpool_status st = x->be->mem_create(x->bd, CPOOL__PAGE_BYTES, &probe);
    if (st == CPOOL_ERR_UNSUPPORTED) {
        CHECK(cpool_last_error()[0] != 0);
        printf("  note [%s]: no graph pages (%s)\n", x->be->name, cpool_last_error());
        return NULL;
    }
    if (st != CPOOL_OK) {
        check_report_(__FILE__, __LINE__, "mem_create of one page: %s (%s)", cpool_status_string(st),
                      cpool_last_error());
        return NULL;
    }
    x->be->mem_release(x->bd, probe);
    x->host = malloc(2 * CPOOL__PAGE_BYTES);
    if (!x->host || x->be->stream_create(x->bd, NULL, false, &x->s) != CPOOL_OK ||
        x->be->va_reserve(x->bd, 2 * CPOOL__PAGE_BYTES, &x->a) != CPOOL_OK ||
        x->be->va_reserve(x->bd, 2 * CPOOL__PAGE_BYTES, &x->b) != CPOOL_OK) {
        check_report_(__FILE__, __LINE__, "setting up the seam: %s", cpool_last_error());
        return NULL;
    }
    return x;
}

static void fill(seam *x, void *at, int value, size_t bytes) {
    CHECK_OK(x->be->memset_async(x->s, at, value, bytes));
}

/* How many of the `bytes` bytes at `at` are not `value`. */
static size_t differing(seam *x, const void *at, int value, size_t bytes) {
    memset(x->host, ~value, bytes);
    if (x->be->memcpy_async(x->s, x->host, at, bytes) != CPOOL_OK || x->be->stream_synchronize(x->s) != CPOOL_OK)
        return bytes;
    size_t wrong = 0;
    for (size_t i = 0; i < bytes; i++) wrong += x->host[i] != (unsigned char)value;
    return wrong;
}

static void one_memory_seen_at_two_addresses(cpool_device *dev) {
    seam *x = seam_open(dev);
    if (!x) return;
    cpool__bmem *m = NULL;
    REQUIRE_OK(x->be->mem_create(x->bd, CPOOL__PAGE_BYTES, &m));
    REQUIRE_OK(x->be->mem_map(x->bd, x->a, m));
    REQUIRE_OK(x->be->mem_map(x->bd, x->b, m));
    fill(x, x->a, 0x5A, PAGE);
    CHECK_EQ(differing(x, x->b, 0x5A, PAGE), 0);
    fill(x, x->b, 0x11, PAGE);
    CHECK_EQ(differing(x, x->a, 0x11, PAGE), 0);

    /* One mapping goes; the other still holds the bytes. */
    x->be->mem_unmap(x->bd, x->a, m);
    CHECK_EQ(differing(x, x->b, 0x11, PAGE), 0);
    x->be->mem_unmap(x->bd, x->b, m);
    x->be->mem_release(x->bd, m);
}

static void unmapped_address_takes_other_memory(cpool_device *dev) {
    seam *x = seam_open(dev);
    if (!x) return;
    cpool__bmem *first = NULL, *second = NULL;
    REQUIRE_OK(x->be->mem_create(x->bd, CPOOL__PAGE_BYTES, &first));
    REQUIRE_OK(x->be->mem_create(x->bd, CPOOL__PAGE_BYTES, &second));
    REQUIRE_OK(x->be->mem_map(x->bd, x->a, first));
    REQUIRE_OK(x->be->mem_map(x->bd, x->b, second));
    fill(x, x->a, 0x22, PAGE);
    fill(x, x->b, 0x33, PAGE);
    REQUIRE(x->be->stream_synchronize(x->s) == CPOOL_OK);

    /* The output swap: a's address now shows second's bytes, and first
     * keeps its own where it is mapped again. */
    x->be->mem_unmap(x->bd, x->a, first);
    REQUIRE_OK(x->be->mem_map(x->bd, x->a, second));
    CHECK_EQ(differing(x, x->a, 0x33, PAGE), 0);
    REQUIRE_OK(x->be->mem_map(x->bd, (char *)x->b + PAGE, first));
    CHECK_EQ(differing(x, (char *)x->b + PAGE, 0x22, PAGE), 0);

    x->be->mem_unmap(x->bd, (char *)x->b + PAGE, first);
    x->be->mem_unmap(x->bd, x->a, second);
    x->be->mem_unmap(x->bd, x->b, second);
    x->be->mem_release(x->bd, first);
    x->be->mem_release(x->bd, second);
}

static void several_pages_map_whole(cpool_device *dev) {
    seam *x = seam_open(dev);
    if (!x) return;
    cpool__bmem *m = NULL;
    REQUIRE_OK(x->be->mem_create(x->bd, 2 * CPOOL__PAGE_BYTES, &m));
    REQUIRE_OK(x->be->mem_map(x->bd, x->a, m));
    REQUIRE_OK(x->be->mem_map(x->bd, x->b, m));
    fill(x, x->a, 0x44, 2 * CPOOL__PAGE_BYTES);
    CHECK_EQ(differing(x, x->b, 0x44, 2 * CPOOL__PAGE_BYTES), 0);
    x->be->mem_unmap(x->bd, x->a, m);
    x->be->mem_unmap(x->bd, x->b, m);
    x->be->mem_release(x->bd, m);
}

static void sizes_not_whole_pages_are_refused(cpool_device *dev) {
    seam *x = seam_open(dev);
    if (!x) return;
    size_t bad[] = {0, 1, CPOOL__PAGE_BYTES + 512};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cpool__bmem *m = (cpool__bmem *)x; /* a value that must stay */
        CHECK_STATUS(x->be->mem_create(x->bd, bad[i], &m), CPOOL_ERR_INVALID_ARGUMENT);
        CHECK(m == (cpool__bmem *)x);
        CHECK(cpool_last_error()[0] != 0);
    }
}

#ifdef CPOOL_FAULT_INJECTION
/* Every acquisition of mem_create and mem_map, failed in turn: a clear
 * status, nothing made, nothing left mapped (the address takes a mapping
 * afterwards). */
static void failures_leave_nothing(cpool_device *dev) {
    seam *x = seam_open(dev);
    if (!x) return;
    cpool__bmem *m = NULL;
    uint64_t n = 1;
    for (;; n++) {
        cpool__fault_arm(n);
        cpool__bmem *got = NULL;
        cpool_status st = x->be->mem_create(x->bd, CPOOL__PAGE_BYTES, &got);
        cpool__fault_arm(0);
        if (st == CPOOL_OK) {
            m = got;
            break;
        }
        CHECK_EQ(st, CPOOL_ERR_OUT_OF_MEMORY);
        CHECK(got == NULL);
        CHECK(cpool_last_error()[0] != 0);
        if (x->be->kind == CPOOL_BACKEND_CUDA && !strstr(cpool_last_error(), "host memory"))
            CHECK(strstr(cpool_last_error(), "cuMemCreate") != NULL);
    }
    CHECK_GT(n, 1); /* the creation could be failed at all */
    for (n = 1;; n++) {
        cpool__fault_arm(n);
        cpool_status st = x->be->mem_map(x->bd, x->a, m);
        cpool__fault_arm(0);
        if (st == CPOOL_OK) break;
        CHECK_EQ(st, CPOOL_ERR_OUT_OF_MEMORY);
        CHECK(cpool_last_error()[0] != 0);
        /* Nothing stayed mapped: the address takes the memory at once. */
        REQUIRE_OK(x->be->mem_map(x->bd, x->a, m));
        x->be->mem_unmap(x->bd, x->a, m);
    }
    CHECK_GT(n, 1);
    fill(x, x->a, 0x66, PAGE);
    CHECK_EQ(differing(x, x->a, 0x66, PAGE), 0);
    x->be->mem_unmap(x->bd, x->a, m);
    x->be->mem_release(x->bd, m);
}
#endif

static const check_case cases[] = {
    CHECK_CASE(one_memory_seen_at_two_addresses),
    CHECK_CASE(unmapped_address_takes_other_memory),
    CHECK_CASE(several_pages_map_whole),
    CHECK_CASE(sizes_not_whole_pages_are_refused),
#ifdef CPOOL_FAULT_INJECTION
    CHECK_CASE(failures_leave_nothing),
#endif
};

CHECK_MAIN(cases, CHECK_ON_ALL)
