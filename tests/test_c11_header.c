/* The public headers compile as strict C11 (-std=c11 -Wpedantic), alone,
 * without CUDA or NCCL headers, and are idempotent. This file is only
 * compiled. */
#include "capturepool.h"
#include "capturepool.h"
#include "capturepool_nccl.h"
#include "capturepool_nccl.h"

#if defined(__CUDA_RUNTIME_H__) || defined(__cuda_cuda_h__) || defined(__DRIVER_TYPES_H__)
#error "capturepool.h must not include CUDA headers"
#endif

#if !defined(CPOOL_VERSION_MAJOR) || !defined(CPOOL_VERSION_MINOR) || !defined(CPOOL_VERSION_PATCH)
#error "version macros missing"
#endif

_Static_assert(CPOOL_OK == 0 && CPOOL_ERR_UNSUPPORTED == 10, "status values are ABI");
_Static_assert(sizeof(bool) >= 1, "stdbool comes with the header");

/* The initializers are constant expressions of strict C11. */
static const cpool_pool_options init_opts = CPOOL_POOL_OPTIONS_INIT;
static const cpool_pool_stats init_pool_stats = CPOOL_POOL_STATS_INIT;
static const cpool_graph_stats init_graph_stats = CPOOL_GRAPH_STATS_INIT;

/* Every declaration is usable as a function pointer of the documented type. */
static cpool_status (*const f_alloc)(cpool_pool *, size_t, cpool_stream *, void **) = cpool_alloc;
static cpool_status (*const f_capture)(cpool_stream *, cpool_pool *, cpool_capture_mode, cpool_capture_fn, void *,
                                       cpool_graph **) = cpool_capture;
static void (*const f_wait)(void) = cpool_wait_deferred;

int cpool_header_c11_compiles(void);
int cpool_header_c11_compiles(void) {
    return f_alloc != 0 && f_capture != 0 && f_wait != 0 && init_opts.struct_size == sizeof init_opts &&
           init_pool_stats.struct_size == sizeof init_pool_stats &&
           init_graph_stats.struct_size == sizeof init_graph_stats;
}
