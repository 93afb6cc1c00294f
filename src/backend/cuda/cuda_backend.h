/*
 * What the CUDA backend's files share (backend.c, runtime.c, peer.c, vmm.c,
 * guard.c): the device, a growable segment's reservation, the guard that
 * every call to CUDA runs under, and the functions one file calls in
 * another. Only these files call CUDA.
 */
#ifndef CPOOL_CUDA_BACKEND_H
#define CPOOL_CUDA_BACKEND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h> /* the types of the driver's virtual memory calls */
#include <cuda_runtime_api.h>

#include "backend.h"
#include "lock.h"
#include "unit_table.h"

/* Peer access knows the devices of ordinals below MAX_PEERS (peer.c). */
enum { MAX_PEERS = 64 };

/* A growable segment's address range, and which of its pages are mapped. */
typedef struct reservation {
    CUdeviceptr base;
    size_t pages;
    uint64_t *mapped; /* a bit a page */
    struct reservation *next;
} reservation;

struct cpool__bdevice {
    int ordinal;
    bool vmm; /* virtual memory management, with pages that divide CPOOL__PAGE_BYTES */
    /* Serialises this backend's calls on graphs being captured: CUDA graph
     * objects are not thread-safe, and threads may capture into one graph. */
    cpool__mutex capture_graphs_mu;
    /* The device's growable segments, so that a peer that gets access to
     * its memory gets it to the pages mapped before too (peer.c). */
    cpool__mutex mapped_mu;
    reservation *reservations;
    /* Ranges given back (va_release) and kept for the next reservation of
     * their size: a graph's first capture into a new pool takes one instead
     * of reserving (under mapped_mu; at most CPOOL__CUDA_IDLE_RANGES). */
    reservation *idle_ranges;
    size_t idle_count;
    /* The units of growable segments (backend.h, pages_map), under
     * mapped_mu: one driver allocation each, mapped and unmapped whole. */
    cpool__unit_table units;
};

#define CPOOL__CUDA_IDLE_RANGES 8
/* Larger ranges go back to the driver at once. */
#define CPOOL__CUDA_IDLE_RANGE_MAX ((size_t)1 << 30)

typedef struct device_guard {
    int previous;
    bool switched;
    enum cudaStreamCaptureMode mode;
    bool relaxed;
} device_guard;

/* The one shape of a guarded call: sets err to `call` (a cudaError_t
 * expression) run with dev current (NULL: the thread's own) and, if
 * `relaxed`, in relaxed capture mode, so that a GLOBAL-mode capture on any
 * thread is not broken by it; or to the guard's own failure, `call` then
 * not run. */
#define GUARDED(err, dev, relaxed, call)                                                           \
    do {                                                                                           \
        device_guard guard_;                                                                       \
        (err) = cpool__cuda_guard_enter(&guard_, (dev), (relaxed));                                \
        if ((err) == cudaSuccess) {                                                                \
            (err) = (call);                                                                        \
            cpool__cuda_guard_exit(&guard_);                                                       \
        }                                                                                          \
    } while (0)

/* A guarded call whose failure is only cleared: teardown has no one to
 * tell. */
#define GUARDED_QUIET(dev, call)                                                                   \
    do {                                                                                           \
        cudaError_t quiet_;                                                                        \
        GUARDED(quiet_, (dev), true, (call));                                                      \
        if (quiet_ != cudaSuccess) cudaGetLastError();                                             \
    } while (0)

/* ---- guard.c ------------------------------------------------------------- */

cpool_status cpool__cuda_fail(cudaError_t err, const char *what);
cudaError_t cpool__cuda_switch_device(device_guard *g, const cpool__bdevice *dev);
cudaError_t cpool__cuda_guard_enter(device_guard *g, const cpool__bdevice *dev, bool relaxed);
void cpool__cuda_guard_exit(device_guard *g);

/* ---- vmm.c --------------------------------------------------------------- */

extern _Atomic uint64_t cpool__cuda_may_use[MAX_PEERS];
bool cpool__cuda_vmm_probe(const cpool__bdevice *dev);
CUresult cpool__cuda_set_access_for(CUdeviceptr at, size_t bytes, int own, uint64_t peers);

bool cpool__cuda_va_supported(cpool__bdevice *dev);
cpool_status cpool__cuda_va_reserve(cpool__bdevice *dev, size_t bytes, void **out);
void cpool__cuda_va_release(cpool__bdevice *dev, void *base, size_t bytes);
/* Gives back the ranges va_release kept (the device closing). */
void cpool__cuda_release_idle_ranges(cpool__bdevice *dev);
cpool_status cpool__cuda_pages_map(cpool__bdevice *dev, void *addr, size_t bytes, bool joined);
void cpool__cuda_pages_unmap(cpool__bdevice *dev, void *addr, size_t bytes);
void cpool__cuda_pages_inside(cpool__bdevice *dev, uintptr_t *lo, uintptr_t *hi);
cpool_status cpool__cuda_mem_create(cpool__bdevice *dev, size_t bytes, cpool__bmem **out);
void cpool__cuda_mem_release(cpool__bdevice *dev, cpool__bmem *m);
cpool_status cpool__cuda_mem_map(cpool__bdevice *dev, void *addr, cpool__bmem *m);
void cpool__cuda_mem_unmap(cpool__bdevice *dev, void *addr, cpool__bmem *m);

/* ---- peer.c -------------------------------------------------------------- */

void cpool__cuda_connect_peers(cpool__bdevice *d);
void cpool__cuda_disconnect_peers(cpool__bdevice *d);

/* ---- runtime.c ----------------------------------------------------------- */

cpool_status cpool__cuda_device_open(int ordinal, cpool__bdevice **out);
void cpool__cuda_device_close(cpool__bdevice *dev);
cpool_status cpool__cuda_segment_alloc(cpool__bdevice *dev, size_t bytes, void **out);
void cpool__cuda_segment_free(cpool__bdevice *dev, void *base, size_t bytes);
cpool_status cpool__cuda_call_relaxed(cpool__bdevice *dev, cpool_status (*fn)(void *arg), void *arg);
cpool_status cpool__cuda_host_alloc(cpool__bdevice *dev, size_t bytes, void **out);
void cpool__cuda_host_free(cpool__bdevice *dev, void *p);
cpool_status cpool__cuda_stream_create(cpool__bdevice *dev, void *native, bool wrap, cpool__bstream **out);
void cpool__cuda_stream_destroy(cpool__bstream *s);
void *cpool__cuda_stream_native(const cpool__bstream *s);
cpool_status cpool__cuda_stream_synchronize(cpool__bstream *s);
cpool_status cpool__cuda_launch_host(cpool__bstream *s, void (*fn)(void *), void *arg);
cpool_status cpool__cuda_memcpy_async(cpool__bstream *s, void *dst, const void *src, size_t bytes);
cpool_status cpool__cuda_upload_async(cpool__bstream *s, void *dst, const void *src, size_t bytes);
cpool_status cpool__cuda_memset_async(cpool__bstream *s, void *dst, int value, size_t bytes);
cpool_status cpool__cuda_event_create(cpool__bdevice *dev, cpool__bevent **out);
cpool_status cpool__cuda_event_create_timed(cpool__bdevice *dev, cpool__bevent **out);
void cpool__cuda_event_destroy(cpool__bevent *ev);
cpool_status cpool__cuda_event_record(cpool__bevent *ev, cpool__bstream *s);
cpool_status cpool__cuda_user_event_record(cpool__bevent *ev, cpool__bstream *s);
bool cpool__cuda_event_done(cpool__bevent *ev);
cpool_status cpool__cuda_event_synchronize(cpool__bevent *ev);
cpool_status cpool__cuda_stream_wait_event(cpool__bstream *s, cpool__bevent *ev);
cpool_status cpool__cuda_stream_fork(cpool__bstream *s, cpool__bevent *fence, cpool__bevent *ev);
cpool_status cpool__cuda_event_elapsed_ms(cpool__bevent *start, cpool__bevent *end, float *ms);
cpool_status cpool__cuda_capture_begin(cpool__bstream *s, cpool_capture_mode mode, cpool__bevent *fence);
cpool_status cpool__cuda_graph_instantiate(cpool__bgraph *g);
cpool_status cpool__cuda_capture_end(cpool__bstream *s, bool instantiate, cpool__bgraph **out);
cpool_status cpool__cuda_capture_status(cpool__bstream *s, cpool_capture_state *out);
cpool_status cpool__cuda_graph_launch(cpool__bgraph *g, cpool__bstream *s);
cpool_status cpool__cuda_graph_upload(cpool__bgraph *g, cpool__bstream *s);
void cpool__cuda_graph_destroy(cpool__bgraph *g);
void *cpool__cuda_graph_native(const cpool__bgraph *g);
bool cpool__cuda_graph_update_in_place(cpool__bgraph *g, cpool__bgraph *fresh);
cpool_status cpool__cuda_graph_dump_dot(const cpool__bgraph *g, const char *path);

#endif /* CPOOL_CUDA_BACKEND_H */
