/*
 * A program that uses the installed capturepool: it is built by
 * tests/install against the installed header and library only (find_package
 * or pkg-config). It captures a fill and a copy with a pool, replays the
 * graph and checks what it wrote.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <capturepool.h>

#define CHECK(call)                                                                                          \
    do {                                                                                                     \
        cpool_status st_ = (call);                                                                           \
        if (st_ != CPOOL_OK) {                                                                               \
            fprintf(stderr, "consumer: %s failed: %s (%s)\n", #call, cpool_status_string(st_),               \
                    cpool_last_error());                                                                     \
            return 1;                                                                                        \
        }                                                                                                    \
    } while (0)

#define STR_(x) #x
#define STR(x) STR_(x)
#define HEADER_VERSION STR(CPOOL_VERSION_MAJOR) "." STR(CPOOL_VERSION_MINOR) "." STR(CPOOL_VERSION_PATCH)

enum { BYTES = 4096, REPLAYS = 3 };

int main(void)
{
    const char *v = cpool_version_string();
    if (strcmp(v, HEADER_VERSION) != 0) {
        fprintf(stderr, "consumer: library version %s, header version %s\n", v, HEADER_VERSION);
        return 1;
    }
#ifdef CPOOL_EXPECTED_VERSION
    if (strcmp(v, CPOOL_EXPECTED_VERSION) != 0) {
        fprintf(stderr, "consumer: library version %s, package version %s\n", v, CPOOL_EXPECTED_VERSION);
        return 1;
    }
#endif

    cpool_device *dev;
    cpool_stream *s;
    cpool_pool *pool;
    CHECK(cpool_device_open(CPOOL_BACKEND_AUTO, 0, &dev));
    CHECK(cpool_stream_create(dev, &s));
    cpool_pool_options opts;
    memset(&opts, 0, sizeof opts);
    opts.struct_size = sizeof opts;
    CHECK(cpool_pool_create(dev, &opts, &pool));

    void *out;
    CHECK(cpool_alloc(pool, BYTES, s, &out)); /* outside capture: the graph's output */

    cpool_graph *g;
    void *scratch;
    CHECK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK(cpool_alloc(pool, BYTES, s, &scratch)); /* graph-reserved */
    CHECK(cpool_memset_async(s, scratch, 0x5a, BYTES));
    CHECK(cpool_memcpy_async(s, out, scratch, BYTES));
    CHECK(cpool_free(pool, scratch, s));
    CHECK(cpool_capture_end(s, &g));

    for (int i = 0; i < REPLAYS; i++)
        CHECK(cpool_graph_launch(g, s));
    unsigned char host[BYTES];
    CHECK(cpool_memcpy_async(s, host, out, BYTES));
    CHECK(cpool_stream_synchronize(s));
    for (int i = 0; i < BYTES; i++) {
        if (host[i] != 0x5a) {
            fprintf(stderr, "consumer: byte %d is 0x%02x, expected 0x5a\n", i, host[i]);
            return 1;
        }
    }
    if (cpool_graph_replays(g) != REPLAYS || cpool_graph_pool(g) != pool) {
        fprintf(stderr, "consumer: graph reports %llu replays (expected %d) and pool %p (expected %p)\n",
                (unsigned long long)cpool_graph_replays(g), REPLAYS, (void *)cpool_graph_pool(g), (void *)pool);
        return 1;
    }

    cpool_pool_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    CHECK(cpool_pool_get_stats(pool, &st));
    printf("consumer: capturepool %s, %s backend, %d replays, reserved %llu bytes (graph %llu), "
           "allocated %llu bytes\n",
           v, cpool_device_backend(dev) == CPOOL_BACKEND_CUDA ? "CUDA" : "host", REPLAYS,
           (unsigned long long)st.reserved_bytes, (unsigned long long)st.graph_reserved_bytes,
           (unsigned long long)st.allocated_bytes);

    cpool_graph_release(g);
    CHECK(cpool_free(pool, out, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
    cpool_device_close(dev);
    return 0;
}
