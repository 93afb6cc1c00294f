// The public headers compile as C++ (extern "C", no CUDA or NCCL headers)
// and their functions link and run from C++.
#include "capturepool.h"
#include "capturepool_nccl.h"

#include <cstdio>
#include <cstring>
#include <string>

#if defined(__CUDA_RUNTIME_H__) || defined(__cuda_cuda_h__) || defined(__DRIVER_TYPES_H__)
#error "capturepool.h must not include CUDA headers"
#endif

static_assert(CPOOL_OK == 0 && CPOOL_ERR_UNSUPPORTED == 10, "status values are ABI");
static_assert(sizeof(cpool_pool_options) >= sizeof(size_t), "options start with struct_size");

namespace {
int failures = 0;
void expect(bool ok, const char *what) {
    if (!ok) {
        std::printf("  FAIL [host] cxx_header: %s\n", what);
        failures++;
    }
}
}  // namespace

int main() {
    std::string version = std::to_string(CPOOL_VERSION_MAJOR) + "." + std::to_string(CPOOL_VERSION_MINOR) + "." +
                          std::to_string(CPOOL_VERSION_PATCH);
    expect(version == cpool_version_string(), "cpool_version_string matches the macros");
    expect(cpool_status_string(CPOOL_ERR_SEALED) != nullptr, "cpool_status_string");

    cpool_device *dev = nullptr;
    expect(cpool_device_open(CPOOL_BACKEND_HOST, 0, &dev) == CPOOL_OK, "cpool_device_open(HOST)");
    cpool_pool_options opts{};
    opts.struct_size = sizeof opts;
    cpool_pool *pool = nullptr;
    expect(cpool_pool_create(dev, &opts, &pool) == CPOOL_OK, "cpool_pool_create");
    cpool_stream *s = nullptr;
    expect(cpool_stream_create(dev, &s) == CPOOL_OK, "cpool_stream_create");
    void *p = nullptr;
    expect(cpool_alloc(pool, 100, s, &p) == CPOOL_OK, "cpool_alloc");
    cpool_pool_stats st{};
    st.struct_size = sizeof st;
    expect(cpool_pool_get_stats(pool, &st) == CPOOL_OK && st.allocated_bytes == 100, "stats");
    expect(cpool_free(pool, p, s) == CPOOL_OK, "cpool_free");
    expect(cpool_nccl_registration_count(pool) == 0, "cpool_nccl_registration_count of an unregistered pool");
    // The initializers are C++ too, and the functions take them.
    const cpool_pool_options init_opts = CPOOL_POOL_OPTIONS_INIT;
    cpool_pool *init_pool = nullptr;
    expect(init_opts.struct_size == sizeof(cpool_pool_options) &&
               cpool_pool_create(dev, &init_opts, &init_pool) == CPOOL_OK,
           "CPOOL_POOL_OPTIONS_INIT");
    cpool_pool_stats init_st = CPOOL_POOL_STATS_INIT;
    expect(cpool_pool_get_stats(init_pool, &init_st) == CPOOL_OK && init_st.struct_size == sizeof init_st,
           "CPOOL_POOL_STATS_INIT");
    cpool_graph_stats init_gs = CPOOL_GRAPH_STATS_INIT;
    expect(init_gs.struct_size == sizeof init_gs && init_gs.own_bytes == 0, "CPOOL_GRAPH_STATS_INIT");
    cpool_pool_release(init_pool);
    cpool_stream_destroy(s);
    cpool_pool_release(pool);
    cpool_device_close(dev);

    std::printf("%d passed, %d failed\n", failures ? 0 : 1, failures ? 1 : 0);
    return failures ? 1 : 0;
}
