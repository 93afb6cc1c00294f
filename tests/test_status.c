/* Status codes, their strings, the per-thread last error, version macros and
 * the fixed enum values of the ABI. */
#include "check.h"
#include "helpers.h"

/* The numeric values are part of the ABI: never renumbered. */
static void status_values_are_fixed(cpool_device *dev) {
    (void)dev;
    CHECK_EQ(CPOOL_OK, 0);
    CHECK_EQ(CPOOL_ERR_INVALID_ARGUMENT, 1);
    CHECK_EQ(CPOOL_ERR_OUT_OF_MEMORY, 2);
    CHECK_EQ(CPOOL_ERR_SEALED, 3);
    CHECK_EQ(CPOOL_ERR_NOT_CAPTURING, 4);
    CHECK_EQ(CPOOL_ERR_ALREADY_CAPTURING, 5);
    CHECK_EQ(CPOOL_ERR_CAPTURE_INVALIDATED, 6);
    CHECK_EQ(CPOOL_ERR_STALE_GRAPH, 7);
    CHECK_EQ(CPOOL_ERR_NO_DEVICE, 8);
    CHECK_EQ(CPOOL_ERR_BACKEND, 9);
    CHECK_EQ(CPOOL_ERR_UNSUPPORTED, 10);
    CHECK_EQ(CPOOL_ERR_NOT_READY, 11);
    CHECK_EQ(CPOOL_ERR_OUTPUT_LIVE, 12);
    CHECK_EQ(CPOOL_ERR_IO, 13);
    CHECK_EQ(CPOOL_ERR_SUSPENDED, 14);
    CHECK_EQ(CPOOL_BACKEND_AUTO, 0);
    CHECK_EQ(CPOOL_BACKEND_CUDA, 1);
    CHECK_EQ(CPOOL_BACKEND_HOST, 2);
    CHECK_EQ(CPOOL_CAPTURE_GLOBAL, 0);
    CHECK_EQ(CPOOL_CAPTURE_THREAD_LOCAL, 1);
    CHECK_EQ(CPOOL_CAPTURE_RELAXED, 2);
    CHECK_EQ(CPOOL_CAPTURE_NONE, 0);
    CHECK_EQ(CPOOL_CAPTURE_ACTIVE, 1);
    CHECK_EQ(CPOOL_CAPTURE_INVALIDATED, 2);
}

/* Every status has its own non-empty text; any other value still gets one. */
static void status_strings_never_null(cpool_device *dev) {
    int i, j;
    const int out_of_range[] = {15, 16, 100, 1 << 20, -1, -100};
    (void)dev;
    for (i = CPOOL_OK; i <= CPOOL_ERR_SUSPENDED; i++) {
        const char *s = cpool_status_string((cpool_status)i);
        CHECK(s != NULL);
        if (!s) continue;
        CHECK_GT(strlen(s), 0);
        for (j = CPOOL_OK; j < i; j++) {
            const char *t = cpool_status_string((cpool_status)j);
            if (t && strcmp(s, t) == 0) check_report_(__FILE__, __LINE__, "statuses %d and %d share text \"%s\"", j, i, s);
        }
    }
    for (i = 0; i < (int)(sizeof out_of_range / sizeof out_of_range[0]); i++) {
        const char *s = cpool_status_string((cpool_status)out_of_range[i]);
        CHECK(s != NULL);
        if (s) CHECK_GT(strlen(s), 0);
    }
    /* Static text: the same pointer on every call. */
    CHECK_PTR_EQ(cpool_status_string(CPOOL_ERR_SEALED), cpool_status_string(CPOOL_ERR_SEALED));
}

/* The texts are those of every earlier version: programs may show or match them. */
static void status_strings_unchanged(cpool_device *dev) {
    (void)dev;
    CHECK_STR_EQ(cpool_status_string(CPOOL_OK), "ok");
    CHECK_STR_EQ(cpool_status_string(CPOOL_ERR_INVALID_ARGUMENT), "invalid argument");
    CHECK_STR_EQ(cpool_status_string(CPOOL_ERR_OUT_OF_MEMORY), "out of memory");
    CHECK_STR_EQ(cpool_status_string(CPOOL_ERR_SEALED), "pool is sealed");
    CHECK_STR_EQ(cpool_status_string(CPOOL_ERR_NOT_CAPTURING), "stream is not capturing");
    CHECK_STR_EQ(cpool_status_string(CPOOL_ERR_ALREADY_CAPTURING), "stream is already capturing");
    CHECK_STR_EQ(cpool_status_string(CPOOL_ERR_CAPTURE_INVALIDATED), "capture was invalidated");
    CHECK_STR_EQ(cpool_status_string(CPOOL_ERR_STALE_GRAPH), "graph is stale: its pool's buffers were cleared");
    CHECK_STR_EQ(cpool_status_string(CPOOL_ERR_NO_DEVICE), "no such backend or device");
    CHECK_STR_EQ(cpool_status_string(CPOOL_ERR_BACKEND), "backend error");
    CHECK_STR_EQ(cpool_status_string(CPOOL_ERR_UNSUPPORTED), "not supported on this backend");
    CHECK_STR_EQ(cpool_status_string(CPOOL_ERR_NOT_READY), "the work before the event has not finished");
    CHECK_STR_EQ(cpool_status_string(CPOOL_ERR_OUTPUT_LIVE),
                 "the replay would overwrite a live output of another graph");
    CHECK_STR_EQ(cpool_status_string(CPOOL_ERR_IO), "a file could not be written");
    CHECK_STR_EQ(cpool_status_string(CPOOL_ERR_SUSPENDED),
                 "the pool is suspended: its memory is given back until it resumes");
    CHECK_STR_EQ(cpool_status_string((cpool_status)15), "unknown status");
    CHECK_STR_EQ(cpool_status_string((cpool_status)-1), "unknown status");
}

/* The enum and the strings come from one table: every row's value is its
 * enumerator, and its text is cpool_status_string's. */
static void status_map_makes_enum_and_strings(cpool_device *dev) {
    static const struct {
        cpool_status status;
        int value;
        const char *text;
    } rows[] = {
#define ROW(name, value, text) {CPOOL_##name, value, text},
        CPOOL_STATUS_MAP(ROW)
#undef ROW
    };
    size_t i;
    (void)dev;
    CHECK_EQ(sizeof rows / sizeof rows[0], 15);
    for (i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        CHECK_EQ((int)rows[i].status, rows[i].value);
        CHECK_EQ(rows[i].value, (int)i); /* dense, from 0: none skipped, none renumbered */
        CHECK_STR_EQ(cpool_status_string(rows[i].status), rows[i].text);
    }
}

static void version_string_matches_macros(cpool_device *dev) {
    char expected[64];
    const char *v = cpool_version_string();
    (void)dev;
    snprintf(expected, sizeof expected, "%d.%d.%d", CPOOL_VERSION_MAJOR, CPOOL_VERSION_MINOR, CPOOL_VERSION_PATCH);
    CHECK(v != NULL);
    CHECK_STR_EQ(v, expected);
    CHECK_GE(CPOOL_VERSION_MAJOR, 0);
    CHECK_GE(CPOOL_VERSION_MINOR, 0);
    CHECK_GE(CPOOL_VERSION_PATCH, 0);
}

/* The numeric version, at run time and at compile time. */
static void version_number_and_at_least(cpool_device *dev) {
    (void)dev;
    CHECK_EQ(CPOOL_VERSION_NUMBER, CPOOL_VERSION_MAJOR * 10000 + CPOOL_VERSION_MINOR * 100 + CPOOL_VERSION_PATCH);
    CHECK_EQ(cpool_version(), CPOOL_VERSION_NUMBER);
    CHECK_LT(CPOOL_VERSION_MINOR, 100);
    CHECK_LT(CPOOL_VERSION_PATCH, 100);
    /* This version and every earlier one. */
    CHECK(CPOOL_VERSION_AT_LEAST(CPOOL_VERSION_MAJOR, CPOOL_VERSION_MINOR, CPOOL_VERSION_PATCH));
    CHECK(CPOOL_VERSION_AT_LEAST(0, 0, 0));
    CHECK(CPOOL_VERSION_AT_LEAST(0, 1, 0));
    CHECK(CPOOL_VERSION_AT_LEAST(0, 2, 0));
    CHECK(CPOOL_VERSION_AT_LEAST(CPOOL_VERSION_MAJOR, CPOOL_VERSION_MINOR, 0));
    /* No later one: the next patch, minor and major. */
    CHECK(!CPOOL_VERSION_AT_LEAST(CPOOL_VERSION_MAJOR, CPOOL_VERSION_MINOR, CPOOL_VERSION_PATCH + 1));
    CHECK(!CPOOL_VERSION_AT_LEAST(CPOOL_VERSION_MAJOR, CPOOL_VERSION_MINOR + 1, 0));
    CHECK(!CPOOL_VERSION_AT_LEAST(CPOOL_VERSION_MAJOR + 1, 0, 0));
    /* An earlier minor is earlier whatever its patch. */
    CHECK(CPOOL_VERSION_AT_LEAST(0, 1, 99));
    /* Usable in #if, where it is meant to be used. */
#if CPOOL_VERSION_AT_LEAST(0, 2, 0)
    int guarded = 1;
#else
    int guarded = 0;
#endif
#if CPOOL_VERSION_AT_LEAST(CPOOL_VERSION_MAJOR + 1, 0, 0)
    guarded = 0;
#endif
    CHECK_EQ(guarded, 1);
}

/* ---- cpool_last_error ---------------------------------------------------------- */

typedef struct last_error_probe {
    char before[256]; /* last error on a fresh thread */
    int was_null;
} last_error_probe;

static void *last_error_thread(void *arg) {
    last_error_probe *p = (last_error_probe *)arg;
    const char *e = cpool_last_error();
    p->was_null = e == NULL;
    snprintf(p->before, sizeof p->before, "%s", e ? e : "");
    return NULL;
}

/* "" on a thread that has seen no failure. */
static void last_error_empty_on_fresh_thread(cpool_device *dev) {
    pthread_t t;
    last_error_probe p;
    (void)dev;
    memset(&p, 0, sizeof p);
    CHECK_EQ(pthread_create(&t, NULL, last_error_thread, &p), 0);
    pthread_join(t, NULL);
    CHECK(!p.was_null);
    CHECK_STR_EQ(p.before, "");
}

/* A failure sets this thread's text; a success after it keeps it; other
 * threads do not see it. */
static void last_error_is_per_thread_and_sticky(cpool_device *dev) {
    cpool_pool *pool = NULL;
    void *p = NULL;
    char text[512];
    pthread_t t;
    last_error_probe other;

    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_STATUS(cpool_alloc(pool, 0, NULL, &p), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(cpool_last_error() != NULL);
    snprintf(text, sizeof text, "%s", cpool_last_error() ? cpool_last_error() : "");
    CHECK_GT(strlen(text), 0);

    /* A successful call does not clear the text. */
    CHECK(cpool_pool_buffer_count(pool) == 0);
    CHECK_OK(cpool_pool_record(pool, NULL, NULL, NULL));
    CHECK_STR_EQ(cpool_last_error(), text);

    memset(&other, 0, sizeof other);
    CHECK_EQ(pthread_create(&t, NULL, last_error_thread, &other), 0);
    pthread_join(t, NULL);
    CHECK(!other.was_null);
    CHECK_STR_EQ(other.before, "");

    /* A different failure replaces it. */
    CHECK_STATUS(cpool_capture_end(NULL, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(cpool_last_error() != NULL);
    if (cpool_last_error()) CHECK_GT(strlen(cpool_last_error()), 0);
    cpool_pool_release(pool);
}

/* The failures of each kind of argument error carry words. */
static void last_error_set_by_each_failure(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_graph *g = NULL;
    cpool_capture_state state;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    CHECK_STATUS(cpool_capture_end(s, &g), CPOOL_ERR_NOT_CAPTURING);
    CHECK(cpool_last_error() != NULL && strlen(cpool_last_error()) > 0);
    CHECK_STATUS(cpool_capture_status(NULL, &state), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(cpool_last_error() != NULL && strlen(cpool_last_error()) > 0);
    cpool_stream_destroy(s);
}

static const check_case cases[] = {
    CHECK_CASE(status_values_are_fixed),
    CHECK_CASE(status_strings_never_null),
    CHECK_CASE(status_strings_unchanged),
    CHECK_CASE(status_map_makes_enum_and_strings),
    CHECK_CASE(version_string_matches_macros),
    CHECK_CASE(version_number_and_at_least),
    CHECK_CASE(last_error_empty_on_fresh_thread),
    CHECK_CASE(last_error_is_per_thread_and_sticky),
    CHECK_CASE(last_error_set_by_each_failure),
};
CHECK_MAIN(cases, CHECK_ON_ALL)
