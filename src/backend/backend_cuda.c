/*
 * The CUDA backend: backend.h on the CUDA runtime. The only file that calls
 * cudart.
 *
 * - Segments are cudaMalloc'd. Growing or shrinking, and creating events,
 *   run under cudaThreadExchangeStreamCaptureMode(relaxed), so that they are
 *   legal while this or any other thread captures in GLOBAL mode; the
 *   caller's mode is restored after. Every call that needs the device made
 *   current switches to it and back (device_guard); library calls that must
 *   not break a GLOBAL-mode capture run in relaxed capture mode. Both are
 *   one helper, GUARDED.
 * - cpool_launch_host goes through a small thunk (fn, arg) so that the
 *   callback thread is marked as a stream thread (deferred.c). An eager
 *   thunk frees itself after running. A captured thunk is owned by a CUDA
 *   user object that the graph being captured retains, whichever stream
 *   it was enqueued on and whoever began the capture; its destructor frees
 *   the thunk once the graph and every executable made from it are
 *   destroyed and their launches finished. So the backend keeps no record
 *   of a capture beyond a flag on the stream it was begun on.
 * - The calls on the capture and launch paths (the capture fence's event
 *   record, capture begin and end, instantiation, graph launch) go to the
 *   driver's entry points as the runtime hands them out (cuda_driver.h).
 * - Graph pages (mem_create and its kin) are driver allocations mapped
 *   whole at each graph's address range that uses them; their mappings are
 *   marked in the reservations' page bitmaps as growable segments' pages
 *   are, so that a peer connected later is granted them too.
 * - Errors become statuses with the CUDA error's name and text, and the
 *   sticky per-thread error is cleared.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h> /* the types of the driver's virtual memory calls */
#include <cuda_runtime_api.h>

#include "cuda_driver.h"
#include "backend.h"
#include "fault.h"
#include "lock.h"
#include "status.h"
#include "thread.h"

typedef struct thunk {
    void (*fn)(void *);
    void *arg;
    bool eager;
} thunk;

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
     * its memory gets it to the pages mapped before too (peers below). */
    cpool__mutex mapped_mu;
    reservation *reservations;
};

struct cpool__bstream {
    cpool__bdevice *dev;
    cudaStream_t stream;
    bool owned;
    bool legacy;    /* the legacy default stream, wrapped */
    atomic_bool capturing; /* a capture begun here by capturepool is running */
};

struct cpool__bevent {
    cpool__bdevice *dev;
    cudaEvent_t event;
    atomic_bool recorded; /* read by waits and queries on other threads */
};

struct cpool__bgraph {
    const cpool__bdevice *dev;
    cudaGraph_t graph; /* the captured graph the executable was made from */
    cudaGraphExec_t exec;
};

/* ---- errors and guards --------------------------------------------------- */

static cpool_status cuda_fail(cudaError_t err, const char *what) {
    cudaGetLastError(); /* clear the sticky per-thread error */
    cpool_status st = CPOOL_ERR_BACKEND;
    if (err == cudaErrorMemoryAllocation) st = CPOOL_ERR_OUT_OF_MEMORY;
    if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver || err == cudaErrorInvalidDevice)
        st = CPOOL_ERR_NO_DEVICE;
    if (err == cudaErrorStreamCaptureInvalidated || err == cudaErrorStreamCaptureUnsupported ||
        err == cudaErrorStreamCaptureUnjoined || err == cudaErrorStreamCaptureIsolation ||
        err == cudaErrorStreamCaptureImplicit || err == cudaErrorStreamCaptureWrongThread ||
        err == cudaErrorStreamCaptureMerge || err == cudaErrorStreamCaptureUnmatched)
        st = CPOOL_ERR_CAPTURE_INVALIDATED;
    return cpool__fail(st, "%s: %s (%s)", cudaGetErrorName(err), cudaGetErrorString(err), what);
}

#define CHECK_CUDA(call)                                                                           \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess) return cuda_fail(err_, #call);                                    \
    } while (0)

/* Sets err to `call` and, when it failed, jumps to `cleanup`, which undoes
 * what the function made so far. */
#define CHECK_CUDA_GOTO(err, call, cleanup)                                                        \
    do {                                                                                           \
        (err) = (call);                                                                            \
        if ((err) != cudaSuccess) goto cleanup;                                                    \
    } while (0)

typedef struct device_guard {
    int previous;
    bool switched;
    enum cudaStreamCaptureMode mode;
    bool relaxed;
} device_guard;

/* Makes dev the runtime's current device, remembering the one before. */
static cudaError_t switch_device(device_guard *g, const cpool__bdevice *dev) {
    cudaError_t err = cudaGetDevice(&g->previous);
    if (err == cudaSuccess && g->previous != dev->ordinal) {
        err = cudaSetDevice(dev->ordinal);
        g->switched = err == cudaSuccess;
    }
    return err;
}

/* Makes dev current (unless dev is NULL) and, if relaxed, this thread's
 * capture mode relaxed; on failure nothing changed. */
static cudaError_t guard_enter(device_guard *g, const cpool__bdevice *dev, bool relaxed) {
    g->switched = false;
    g->relaxed = false;
    if (relaxed) {
        g->mode = cudaStreamCaptureModeRelaxed;
        cudaError_t err = cudaThreadExchangeStreamCaptureMode(&g->mode);
        if (err != cudaSuccess) return err;
        g->relaxed = true;
    }
    cudaError_t err = dev ? switch_device(g, dev) : cudaSuccess;
    if (err != cudaSuccess && g->relaxed) cudaThreadExchangeStreamCaptureMode(&g->mode);
    return err;
}

static void guard_exit(device_guard *g) {
    if (g->switched) cudaSetDevice(g->previous);
    if (g->relaxed) cudaThreadExchangeStreamCaptureMode(&g->mode);
}

/* The one shape of a guarded call: sets err to `call` (a cudaError_t
 * expression) run with dev current (NULL: the thread's own) and, if
 * `relaxed`, in relaxed capture mode, so that a GLOBAL-mode capture on any
 * thread is not broken by it; or to the guard's own failure, `call` then
 * not run. */
#define GUARDED(err, dev, relaxed, call)                                                           \
    do {                                                                                           \
        device_guard guard_;                                                                       \
        (err) = guard_enter(&guard_, (dev), (relaxed));                                            \
        if ((err) == cudaSuccess) {                                                                \
            (err) = (call);                                                                        \
            guard_exit(&guard_);                                                                   \
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

/* Fault injection stands for an allocation the device refused. */
#define FAULT_OR(call) (cpool__fault_hit() ? cudaErrorMemoryAllocation : (call))

/* ---- the driver's entry points ------------------------------------------- */

/* The driver's functions behind the runtime calls on the capture and launch
 * paths (cuda_driver.h). Calling them directly skips the runtime's wrapper,
 * which measured 4-5% of a one-kernel capture on an H200
 * (docs/BENCHMARKS.md). */
static cpool__driver_calls driver;
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;

static void driver_load(void) { cpool__driver_load(&driver); }

/* The runtime's call runs where the driver's entry point is missing, or
 * where the driver's call found no context current on the thread (it then
 * did nothing). The device is made current around it, since the runtime
 * would otherwise make its own current device's context current (device 0
 * on a thread that chose none). Any other failure is the driver's: a launch
 * can fail and still have run, so a failed call is never made again. */
enum { DRIVER_MISSING = -1, DRIVER_NO_CONTEXT = 201 /* CUDA_ERROR_INVALID_CONTEXT */ };

/* Whether the runtime's call must run after the driver's gave
 * driver_result; if so, dev is current until guard_exit(g). Otherwise *err
 * is the result. */
static bool runtime_needed(int driver_result, const cpool__bdevice *dev, device_guard *g, cudaError_t *err) {
    *err = (cudaError_t)driver_result;
    if (driver_result != DRIVER_MISSING && driver_result != DRIVER_NO_CONTEXT) return false;
    *g = (device_guard){.switched = false, .relaxed = false};
    *err = switch_device(g, dev);
    return *err == cudaSuccess;
}

/* Sets err to the driver's `driver_call` through entry point `entry`, or
 * to the runtime's `runtime_call` where runtime_needed says so: the one
 * shape of the five calls below. */
#define DRIVER_OR_RUNTIME(err, dev, entry, driver_call, runtime_call)                              \
    do {                                                                                           \
        device_guard guard_;                                                                       \
        if (runtime_needed(driver.entry ? (driver_call) : DRIVER_MISSING, (dev), &guard_, &(err))) { \
            (err) = (runtime_call);                                                                \
            guard_exit(&guard_);                                                                   \
        }                                                                                          \
    } while (0)

static cudaError_t record_event(const cpool__bdevice *dev, cudaEvent_t event, cudaStream_t stream) {
    cudaError_t err;
    DRIVER_OR_RUNTIME(err, dev, event_record, driver.event_record(event, stream), cudaEventRecord(event, stream));
    return err;
}

static cudaError_t begin_capture(const cpool__bdevice *dev, cudaStream_t stream, enum cudaStreamCaptureMode mode) {
    cudaError_t err;
    DRIVER_OR_RUNTIME(err, dev, begin_capture, driver.begin_capture(stream, mode), cudaStreamBeginCapture(stream, mode));
    return err;
}

static cudaError_t end_capture(const cpool__bdevice *dev, cudaStream_t stream, cudaGraph_t *graph) {
    cudaError_t err;
    DRIVER_OR_RUNTIME(err, dev, end_capture, driver.end_capture(stream, graph), cudaStreamEndCapture(stream, graph));
    return err;
}

static cudaError_t instantiate_graph(const cpool__bdevice *dev, cudaGraphExec_t *exec, cudaGraph_t graph) {
    cudaError_t err;
    DRIVER_OR_RUNTIME(err, dev, instantiate, driver.instantiate(exec, graph, 0), cudaGraphInstantiate(exec, graph, 0));
    return err;
}

static cudaError_t wait_event(const cpool__bdevice *dev, cudaStream_t stream, cudaEvent_t event) {
    cudaError_t err;
    DRIVER_OR_RUNTIME(err, dev, stream_wait_event, driver.stream_wait_event(stream, event, 0),
                      cudaStreamWaitEvent(stream, event, 0));
    return err;
}

static cudaError_t graph_launch(const cpool__bdevice *dev, cudaGraphExec_t exec, cudaStream_t stream) {
    cudaError_t err;
    DRIVER_OR_RUNTIME(err, dev, graph_launch, driver.graph_launch(exec, stream), cudaGraphLaunch(exec, stream));
    return err;
}

/* ---- device and memory --------------------------------------------------- */

static cudaError_t guard_enter_call_free(const cpool__bdevice *dev) {
    cudaError_t err;
    GUARDED(err, dev, false, cudaFree(NULL));
    return err;
}

static bool vmm_probe(const cpool__bdevice *dev);

/* ---- peer access ---------------------------------------------------------- */

/* Opening a device connects it with every open device whose kernels can
 * reach its memory, and the other way round (cudaDeviceCanAccessPeer):
 * peer access is enabled in the using device's context, which serves plain
 * segments, and the pages of growable segments are mapped for the using
 * device too (cuMemSetAccess), those mapped before included. A pair that
 * cannot be connected stays apart, as devices that do not allow it; so does
 * one whose page access the driver refuses, from then on. */
enum { MAX_PEERS = 64 };
static cpool__mutex peers_mu = CPOOL__MUTEX_INIT(CPOOL__RANK_PEERS);
static cpool__bdevice *open_by_ordinal[MAX_PEERS]; /* under peers_mu */
/* may_use[o]: a bit for each device whose kernels may use o's memory; set
 * under peers_mu, read by a mapping under o's mapped_mu (see grant_mapped). */
static _Atomic uint64_t may_use[MAX_PEERS];

static CUresult set_access_for(CUdeviceptr at, size_t bytes, int own, uint64_t peers);

static bool page_mapped(const reservation *r, size_t page) { return r->mapped[page / 64] >> (page % 64) & 1; }

/* Gives `peer` access to every mapped page of dev's growable segments;
 * false if the driver refused some. */
static bool grant_mapped(cpool__bdevice *dev, int peer) {
    bool granted = true;
    cpool__mutex_lock(&dev->mapped_mu);
    for (reservation *r = dev->reservations; r && granted; r = r->next)
        for (size_t i = 0; i < r->pages && granted;) {
            if (!page_mapped(r, i)) {
                i++;
                continue;
            }
            size_t end = i;
            while (end < r->pages && page_mapped(r, end)) end++;
            device_guard guard;
            granted = guard_enter(&guard, dev, true) == cudaSuccess;
            if (granted) {
                granted = set_access_for(r->base + i * CPOOL__PAGE_BYTES, (end - i) * CPOOL__PAGE_BYTES, -1,
                                         (uint64_t)1 << peer) == CUDA_SUCCESS;
                guard_exit(&guard);
            }
            i = end;
        }
    cpool__mutex_unlock(&dev->mapped_mu);
    return granted;
}

/* Lets kernels on `user` use owner's memory, where the devices allow it. */
static void connect(cpool__bdevice *user, cpool__bdevice *owner) {
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, user->ordinal, owner->ordinal) != cudaSuccess || !can) {
        cudaGetLastError();
        return;
    }
    cudaError_t err;
    GUARDED(err, user, true, cudaDeviceEnablePeerAccess(owner->ordinal, 0));
    if (err != cudaSuccess) cudaGetLastError();
    if (err != cudaSuccess && err != cudaErrorPeerAccessAlreadyEnabled) return;
    /* Set before the grant, which takes the lock new mappings read it
     * under: a page is granted either by its mapping or by the grant. */
    uint64_t bit = (uint64_t)1 << user->ordinal;
    atomic_fetch_or(&may_use[owner->ordinal], bit);
    if (owner->vmm && !grant_mapped(owner, user->ordinal)) {
        /* The pair stays apart: later pages are not granted either. */
        cudaGetLastError();
        atomic_fetch_and(&may_use[owner->ordinal], ~bit);
    }
}

static void connect_peers(cpool__bdevice *d) {
    if (d->ordinal >= MAX_PEERS) return;
    cpool__mutex_lock(&peers_mu);
    for (int o = 0; o < MAX_PEERS; o++) {
        cpool__bdevice *other = open_by_ordinal[o];
        if (!other || o == d->ordinal) continue;
        connect(other, d);
        connect(d, other);
    }
    open_by_ordinal[d->ordinal] = d;
    cpool__mutex_unlock(&peers_mu);
}

/* Peer access stays enabled in the contexts, which outlive the device. */
static void disconnect_peers(cpool__bdevice *d) {
    if (d->ordinal >= MAX_PEERS) return;
    cpool__mutex_lock(&peers_mu);
    if (open_by_ordinal[d->ordinal] == d) open_by_ordinal[d->ordinal] = NULL;
    cpool__mutex_unlock(&peers_mu);
}

static cpool_status cuda_device_open(int ordinal, cpool__bdevice **out) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        cudaGetLastError();
        return cpool__fail(CPOOL_ERR_NO_DEVICE, "no usable CUDA device: %s",
                           err != cudaSuccess ? cudaGetErrorName(err) : "device count is 0");
    }
    if (ordinal >= count)
        return cpool__fail(CPOOL_ERR_NO_DEVICE, "CUDA device %d asked for, %d present", ordinal, count);
    cpool__bdevice *d = cpool__calloc(1, sizeof *d);
    if (!d) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory opening a CUDA device");
    d->ordinal = ordinal;
    cpool__mutex_init(&d->capture_graphs_mu, CPOOL__RANK_CAPTURE_GRAPHS);
    cpool__mutex_init(&d->mapped_mu, CPOOL__RANK_MAPPED);
    /* The primary context is made now, not inside a later capture. */
    CHECK_CUDA_GOTO(err, guard_enter_call_free(d), failed);
    pthread_once(&driver_once, driver_load);
    d->vmm = vmm_probe(d);
    connect_peers(d);
    *out = d;
    return CPOOL_OK;
failed:
    cpool__mutex_destroy(&d->mapped_mu);
    cpool__mutex_destroy(&d->capture_graphs_mu);
    free(d);
    return cuda_fail(err, "initialising the device");
}

static void cuda_device_close(cpool__bdevice *dev) {
    disconnect_peers(dev);
    cpool__mutex_destroy(&dev->mapped_mu);
    cpool__mutex_destroy(&dev->capture_graphs_mu);
    free(dev);
}

static cpool_status cuda_segment_alloc(cpool__bdevice *dev, size_t bytes, void **out) {
    cudaError_t err;
    GUARDED(err, dev, true, FAULT_OR(cudaMalloc(out, bytes)));
    return err == cudaSuccess ? CPOOL_OK : cuda_fail(err, "cudaMalloc of a segment");
}

static void cuda_segment_free(cpool__bdevice *dev, void *base, size_t bytes) {
#ifdef CPOOL_DEBUG_CHECKS
    /* On the legacy stream; cudaFree waits for the device before freeing. */
    GUARDED_QUIET(dev, cudaMemset(base, CPOOL__POISON, bytes));
#else
    CPOOL_UNUSED(bytes);
#endif
    GUARDED_QUIET(dev, cudaFree(base));
}

/* ---- growable segments: the driver's virtual memory management ---------- */

/* Fetched through the runtime, as the capture path's (cuda_driver.h). */
static struct vmm_calls {
    CUresult (*reserve)(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags);
    CUresult (*release_range)(CUdeviceptr ptr, size_t size);
    CUresult (*create)(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                       unsigned long long flags);
    CUresult (*map)(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                    unsigned long long flags);
    CUresult (*unmap)(CUdeviceptr ptr, size_t size);
    CUresult (*set_access)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
    CUresult (*release)(CUmemGenericAllocationHandle h);
    CUresult (*granularity)(size_t *granularity, const CUmemAllocationProp *prop,
                            CUmemAllocationGranularity_flags option);
    CUresult (*attribute)(int *value, CUdevice_attribute attribute, CUdevice dev);
} vmm;
static pthread_once_t vmm_once = PTHREAD_ONCE_INIT;

static void vmm_load(void) {
    vmm.reserve = (CUresult(*)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))cpool__driver_entry(
        "cuMemAddressReserve");
    vmm.release_range = (CUresult(*)(CUdeviceptr, size_t))cpool__driver_entry("cuMemAddressFree");
    vmm.create = (CUresult(*)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                              unsigned long long))cpool__driver_entry("cuMemCreate");
    vmm.map = (CUresult(*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))
        cpool__driver_entry("cuMemMap");
    vmm.unmap = (CUresult(*)(CUdeviceptr, size_t))cpool__driver_entry("cuMemUnmap");
    vmm.set_access = (CUresult(*)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t))cpool__driver_entry(
        "cuMemSetAccess");
    vmm.release = (CUresult(*)(CUmemGenericAllocationHandle))cpool__driver_entry("cuMemRelease");
    vmm.granularity = (CUresult(*)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags))
        cpool__driver_entry("cuMemGetAllocationGranularity");
    vmm.attribute = (CUresult(*)(int *, CUdevice_attribute, CUdevice))cpool__driver_entry("cuDeviceGetAttribute");
}

static CUmemAllocationProp page_prop(const cpool__bdevice *dev) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev->ordinal;
    return prop;
}

/* Whether dev can back growable segments: every entry point, the device's
 * support, and a granularity that divides the allocator's page. */
static bool vmm_probe(const cpool__bdevice *dev) {
    pthread_once(&vmm_once, vmm_load);
    if (!vmm.reserve || !vmm.release_range || !vmm.create || !vmm.map || !vmm.unmap || !vmm.set_access ||
        !vmm.release || !vmm.granularity || !vmm.attribute)
        return false;
    int supported = 0;
    size_t granularity = 0;
    CUmemAllocationProp prop = page_prop(dev);
    if (vmm.attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev->ordinal) !=
            CUDA_SUCCESS ||
        !supported)
        return false;
    return vmm.granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS && granularity &&
           CPOOL__PAGE_BYTES % granularity == 0;
}

/* The driver's result as the runtime's error of the same number. */
#define VMM_CALL(call) ((cudaError_t)(cpool__fault_hit() ? CUDA_ERROR_OUT_OF_MEMORY : (call)))

static cpool_status cuda_call_relaxed(cpool__bdevice *dev, cpool_status (*fn)(void *arg), void *arg) {
    device_guard guard;
    cudaError_t err = guard_enter(&guard, dev, true);
    if (err != cudaSuccess) return cuda_fail(err, "making the device current for a relaxed call");
    cpool_status st = fn(arg);
    guard_exit(&guard);
    return st;
}

static bool cuda_va_supported(cpool__bdevice *dev) { return dev->vmm && !cpool__virtual_memory_off(); }

static cpool_status cuda_va_reserve(cpool__bdevice *dev, size_t bytes, void **out) {
    CUdeviceptr ptr = 0;
    cudaError_t err;
    GUARDED(err, dev, true, VMM_CALL(vmm.reserve(&ptr, bytes, CPOOL__PAGE_BYTES, 0, 0)));
    if (err == (cudaError_t)CUDA_ERROR_NOT_SUPPORTED) {
        cudaGetLastError();
        return cpool__fail(CPOOL_ERR_UNSUPPORTED, "the driver reserves no address space: plain segments instead");
    }
    if (err != cudaSuccess)
        return cuda_fail(err, "cuMemAddressReserve of a growable segment: out of memory here means that address "
                              "space ran out, not memory");
    size_t pages = bytes / CPOOL__PAGE_BYTES;
    reservation *r = cpool__malloc(sizeof *r);
    uint64_t *mapped = r ? cpool__calloc((pages + 63) / 64, sizeof *mapped) : NULL;
    if (!mapped) {
        free(r);
        GUARDED_QUIET(dev, (cudaError_t)vmm.release_range(ptr, bytes));
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory reserving a growable segment");
    }
    cpool__mutex_lock(&dev->mapped_mu);
    *r = (reservation){.base = ptr, .pages = pages, .mapped = mapped, .next = dev->reservations};
    dev->reservations = r;
    cpool__mutex_unlock(&dev->mapped_mu);
    *out = (void *)ptr;
    return CPOOL_OK;
}

static void cuda_va_release(cpool__bdevice *dev, void *base, size_t bytes) {
    cpool__mutex_lock(&dev->mapped_mu);
    for (reservation **at = &dev->reservations; *at; at = &(*at)->next)
        if ((*at)->base == (CUdeviceptr)base) {
            reservation *r = *at;
            *at = r->next;
            free(r->mapped);
            free(r);
            break;
        }
    cpool__mutex_unlock(&dev->mapped_mu);
    GUARDED_QUIET(dev, (cudaError_t)vmm.release_range((CUdeviceptr)base, bytes));
}

/* Marks [at, at + bytes) of dev's reservations mapped or not (mapped_mu
 * held). */
static void mark_mapped(cpool__bdevice *dev, CUdeviceptr at, size_t bytes, bool mapped) {
    for (reservation *r = dev->reservations; r; r = r->next) {
        if (at < r->base || at >= r->base + r->pages * CPOOL__PAGE_BYTES) continue;
        for (size_t i = (at - r->base) / CPOOL__PAGE_BYTES, n = bytes / CPOOL__PAGE_BYTES; n--; i++) {
            uint64_t bit = (uint64_t)1 << (i % 64);
            r->mapped[i / 64] = mapped ? r->mapped[i / 64] | bit : r->mapped[i / 64] & ~bit;
        }
        return;
    }
}

static CUmemAccessDesc read_write(int device) {
    return (CUmemAccessDesc){.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device},
                             .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
}

/* Read and write access to [at, at + bytes) for device `own` (none if
 * negative) and each device of the mask `peers`. */
static CUresult set_access_for(CUdeviceptr at, size_t bytes, int own, uint64_t peers) {
    CUmemAccessDesc access[1 + MAX_PEERS];
    size_t n = 0;
    if (own >= 0) access[n++] = read_write(own);
    for (int o = 0; o < MAX_PEERS; o++)
        if ((peers >> o & 1) && o != own) access[n++] = read_write(o);
    return n ? vmm.set_access(at, bytes, access, n) : CUDA_SUCCESS;
}

/* Unmaps the pages of [at, at + bytes) one by one, as they were mapped. */
static cudaError_t unmap_pages(CUdeviceptr at, size_t bytes) {
    CUresult first = CUDA_SUCCESS;
    for (size_t off = 0; off < bytes; off += CPOOL__PAGE_BYTES) {
        CUresult r = vmm.unmap(at + off, CPOOL__PAGE_BYTES);
        if (first == CUDA_SUCCESS) first = r;
    }
    return (cudaError_t)first;
}

/* Read and write access to [at, at + bytes), just mapped, for dev and the
 * peers that may use its memory, and the range marked mapped, so that a
 * peer connected later gets it too. */
static cudaError_t open_access(cpool__bdevice *dev, CUdeviceptr at, size_t bytes) {
    /* The peers are read under the lock that a new peer's grant of the
     * pages mapped so far takes: either sees these pages. */
    cpool__mutex_lock(&dev->mapped_mu);
    cudaError_t err = VMM_CALL(set_access_for(at, bytes, dev->ordinal, 0));
    uint64_t peers = dev->ordinal < MAX_PEERS ? atomic_load(&may_use[dev->ordinal]) : 0;
    if (err == cudaSuccess && peers && set_access_for(at, bytes, -1, peers) != CUDA_SUCCESS) {
        /* A peer's entry refused fails not the owner's own mapping:
         * those peers stay apart from now on, as at a failed grant. */
        atomic_fetch_and(&may_use[dev->ordinal], ~peers);
    }
    if (err == cudaSuccess) mark_mapped(dev, at, bytes, true);
    cpool__mutex_unlock(&dev->mapped_mu);
    return err;
}

/* A page at a time, each its own allocation: the mapping holds it, so its
 * handle goes at once and an unmap frees it. */
static cudaError_t map_pages(cpool__bdevice *dev, CUdeviceptr at, size_t bytes) {
    CUmemAllocationProp prop = page_prop(dev);
    cudaError_t err = cudaSuccess;
    size_t done = 0;
    for (; done < bytes; done += CPOOL__PAGE_BYTES) {
        CUmemGenericAllocationHandle h;
        err = VMM_CALL(vmm.create(&h, CPOOL__PAGE_BYTES, &prop, 0));
        if (err != cudaSuccess) break;
        err = VMM_CALL(vmm.map(at + done, CPOOL__PAGE_BYTES, 0, h, 0));
        vmm.release(h);
        if (err != cudaSuccess) break;
    }
    if (err == cudaSuccess) err = open_access(dev, at, bytes);
    if (err != cudaSuccess) unmap_pages(at, done);
    return err;
}

static cpool_status cuda_pages_map(cpool__bdevice *dev, void *addr, size_t bytes) {
    cudaError_t err;
    GUARDED(err, dev, true, map_pages(dev, (CUdeviceptr)addr, bytes));
    return err == cudaSuccess ? CPOOL_OK : cuda_fail(err, "mapping pages of a growable segment");
}

static void cuda_pages_unmap(cpool__bdevice *dev, void *addr, size_t bytes) {
    cpool__mutex_lock(&dev->mapped_mu); /* no grant touches them once unmarked */
    mark_mapped(dev, (CUdeviceptr)addr, bytes, false);
    cpool__mutex_unlock(&dev->mapped_mu);
    GUARDED_QUIET(dev, unmap_pages((CUdeviceptr)addr, bytes));
}

/* ---- graph pages: physical memory mapped at several addresses ----------- */

/* One allocation of whole pages, which a mapping at each graph's address
 * range that uses it holds too: it is freed once released and unmapped
 * everywhere. */
struct cpool__bmem {
    CUmemGenericAllocationHandle handle;
    size_t bytes;
};

static cpool_status cuda_mem_create(cpool__bdevice *dev, size_t bytes, cpool__bmem **out) {
    if (!dev->vmm)
        return cpool__fail(CPOOL_ERR_UNSUPPORTED, "the device has no virtual memory management: no graph pages");
    if (bytes == 0 || bytes % CPOOL__PAGE_BYTES != 0)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "graph pages of %zu bytes: not whole 2 MiB pages", bytes);
    cpool__bmem *m = cpool__malloc(sizeof *m);
    if (!m) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory creating graph pages");
    CUmemAllocationProp prop = page_prop(dev);
    cudaError_t err;
    GUARDED(err, dev, true, VMM_CALL(vmm.create(&m->handle, bytes, &prop, 0)));
    if (err != cudaSuccess) {
        free(m);
        char what[64];
        if (bytes == CPOOL__PAGE_BYTES)
            snprintf(what, sizeof what, "cuMemCreate of a 2 MiB graph page");
        else
            snprintf(what, sizeof what, "cuMemCreate of %zu 2 MiB graph pages", bytes / CPOOL__PAGE_BYTES);
        return cuda_fail(err, what);
    }
    m->bytes = bytes;
    *out = m;
    return CPOOL_OK;
}

static void cuda_mem_release(cpool__bdevice *dev, cpool__bmem *m) {
    if (!m) return;
    GUARDED_QUIET(dev, (cudaError_t)vmm.release(m->handle));
    free(m);
}

/* The whole allocation at `at`, then access to it; all or nothing. *what
 * names the call that failed. */
static cudaError_t map_shared(cpool__bdevice *dev, CUdeviceptr at, const cpool__bmem *m, const char **what) {
    *what = "cuMemMap of graph pages";
    cudaError_t err = VMM_CALL(vmm.map(at, m->bytes, 0, m->handle, 0));
    if (err != cudaSuccess) return err;
    *what = "cuMemSetAccess on mapped graph pages";
    err = open_access(dev, at, m->bytes);
    if (err != cudaSuccess) vmm.unmap(at, m->bytes);
    return err;
}

static cpool_status cuda_mem_map(cpool__bdevice *dev, void *addr, cpool__bmem *m) {
    cudaError_t err;
    const char *what = "making the device current to map graph pages";
    GUARDED(err, dev, true, map_shared(dev, (CUdeviceptr)addr, m, &what));
    return err == cudaSuccess ? CPOOL_OK : cuda_fail(err, what);
}

/* CUDA unmaps only whole mappings: the range is exactly the one mapped. */
static void cuda_mem_unmap(cpool__bdevice *dev, void *addr, cpool__bmem *m) {
    cpool__mutex_lock(&dev->mapped_mu); /* no grant touches them once unmarked */
    mark_mapped(dev, (CUdeviceptr)addr, m->bytes, false);
    cpool__mutex_unlock(&dev->mapped_mu);
    GUARDED_QUIET(dev, (cudaError_t)vmm.unmap((CUdeviceptr)addr, m->bytes));
}

/* ---- host copies ---------------------------------------------------------- */

/* Page-locked and portable: copies to and from it run at the bus's speed,
 * on any device. */
static cpool_status cuda_host_alloc(cpool__bdevice *dev, size_t bytes, void **out) {
    cudaError_t err;
    GUARDED(err, dev, true, FAULT_OR(cudaHostAlloc(out, bytes, cudaHostAllocPortable)));
    return err == cudaSuccess ? CPOOL_OK : cuda_fail(err, "cudaHostAlloc of page-locked memory for a pool's copy");
}

static void cuda_host_free(cpool__bdevice *dev, void *p) { GUARDED_QUIET(dev, cudaFreeHost(p)); }

/* ---- streams ------------------------------------------------------------- */

static cpool_status cuda_stream_create(cpool__bdevice *dev, void *native, bool wrap, cpool__bstream **out) {
    cpool__bstream *s = cpool__calloc(1, sizeof *s);
    if (!s) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory creating a stream");
    s->dev = dev;
    if (wrap) {
        s->stream = (cudaStream_t)native;
        s->legacy = s->stream == NULL || s->stream == cudaStreamLegacy;
    } else {
        cudaError_t err;
        GUARDED(err, dev, false, FAULT_OR(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking)));
        if (err != cudaSuccess) {
            free(s);
            return cuda_fail(err, "cudaStreamCreateWithFlags");
        }
        s->owned = true;
    }
    *out = s;
    return CPOOL_OK;
}

/* Called by the driver once nothing can run a captured thunk any more. */
static void CUDART_CB thunk_destructor(void *t) { free(t); }

static void discard_capture(cpool__bstream *s) {
    if (!s->capturing) return;
    s->capturing = false;
    cudaGraph_t graph = NULL;
    if (cudaStreamEndCapture(s->stream, &graph) != cudaSuccess) cudaGetLastError();
    if (graph) cudaGraphDestroy(graph); /* and its thunks */
}

static void cuda_stream_destroy(cpool__bstream *s) {
    discard_capture(s);
    GUARDED_QUIET(NULL, cudaStreamSynchronize(s->stream));
    if (s->owned) GUARDED_QUIET(NULL, cudaStreamDestroy(s->stream));
    free(s);
}

static void *cuda_stream_native(const cpool__bstream *s) { return (void *)s->stream; }

static cpool_status cuda_stream_synchronize(cpool__bstream *s) {
    CHECK_CUDA(cudaStreamSynchronize(s->stream));
    return CPOOL_OK;
}

static void CUDART_CB thunk_run(void *p) {
    thunk *t = p;
    bool was = cpool__on_stream_thread();
    cpool__set_stream_thread(true);
    t->fn(t->arg);
    cpool__set_stream_thread(was);
    if (t->eager) free(t);
}

/* Hands t to `graph`, which is being captured: a user object owning t that
 * the graph retains. On failure t is freed. */
static cudaError_t retain_thunk(cpool__bdevice *dev, cudaGraph_t graph, thunk *t) {
    cudaUserObject_t owner;
    cudaError_t err = cudaUserObjectCreate(&owner, t, thunk_destructor, 1, cudaUserObjectNoDestructorSync);
    if (err != cudaSuccess) {
        free(t);
        return err;
    }
    cpool__mutex_lock(&dev->capture_graphs_mu);
    err = cudaGraphRetainUserObject(graph, owner, 1, cudaGraphUserObjectMove);
    cpool__mutex_unlock(&dev->capture_graphs_mu);
    if (err != cudaSuccess) cudaUserObjectRelease(owner, 1); /* frees t */
    return err;
}

static cpool_status give_thunk_to_graph(cpool__bdevice *dev, cudaGraph_t graph, thunk *t) {
    cudaError_t err;
    bool ran = false;
    GUARDED(err, NULL, true, (ran = true, retain_thunk(dev, graph, t))); /* legal beside any GLOBAL-mode capture */
    if (!ran) free(t);
    return err == cudaSuccess ? CPOOL_OK : cuda_fail(err, "giving captured host work to its graph");
}

static cpool_status cuda_launch_host(cpool__bstream *s, void (*fn)(void *), void *arg) {
    enum cudaStreamCaptureStatus status;
    cudaGraph_t graph = NULL;
    CHECK_CUDA(cudaStreamGetCaptureInfo(s->stream, &status, NULL, &graph, NULL, NULL, NULL));
    bool captured = status == cudaStreamCaptureStatusActive;
    thunk *t = cpool__malloc(sizeof *t);
    if (!t) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory enqueueing host work");
    *t = (thunk){.fn = fn, .arg = arg, .eager = !captured};
    /* A captured thunk is the graph's before the host node that uses it
     * exists, so that it is freed with the graph whatever fails later. */
    if (captured) {
        cpool_status st = give_thunk_to_graph(s->dev, graph, t);
        if (st != CPOOL_OK) return st;
    }
    cudaError_t err = cudaLaunchHostFunc(s->stream, thunk_run, t);
    if (err != cudaSuccess) {
        if (!captured) free(t);
        return cuda_fail(err, "cudaLaunchHostFunc");
    }
    return CPOOL_OK;
}

static cpool_status cuda_memcpy_async(cpool__bstream *s, void *dst, const void *src, size_t bytes) {
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s->stream));
    return CPOOL_OK;
}

/* From pageable memory CUDA stages the source before returning, so the
 * caller may reuse it at once. */
static cpool_status cuda_upload_async(cpool__bstream *s, void *dst, const void *src, size_t bytes) {
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s->stream));
    return CPOOL_OK;
}

static cpool_status cuda_memset_async(cpool__bstream *s, void *dst, int value, size_t bytes) {
    CHECK_CUDA(cudaMemsetAsync(dst, value, bytes, s->stream));
    return CPOOL_OK;
}

/* ---- events -------------------------------------------------------------- */

static cpool_status event_create(cpool__bdevice *dev, unsigned flags, cpool__bevent **out) {
    cpool__bevent *ev = cpool__calloc(1, sizeof *ev);
    if (!ev) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory creating an event");
    cudaError_t err;
    GUARDED(err, dev, true, FAULT_OR(cudaEventCreateWithFlags(&ev->event, flags)));
    if (err != cudaSuccess) {
        free(ev);
        return cuda_fail(err, "cudaEventCreateWithFlags");
    }
    ev->dev = dev;
    *out = ev;
    return CPOOL_OK;
}

/* The library's own events time nothing; a user's time their records. */
static cpool_status cuda_event_create(cpool__bdevice *dev, cpool__bevent **out) {
    return event_create(dev, cudaEventDisableTiming, out);
}

static cpool_status cuda_event_create_timed(cpool__bdevice *dev, cpool__bevent **out) {
    return event_create(dev, cudaEventDefault, out);
}

/* Event calls are the library's own bookkeeping: they run in relaxed
 * capture mode, so that a GLOBAL-mode capture on any thread is not broken by
 * them (CUDA counts event queries and waits as unsafe under capture). */

static void cuda_event_destroy(cpool__bevent *ev) {
    if (!ev) return;
    GUARDED_QUIET(NULL, cudaEventDestroy(ev->event));
    free(ev);
}

/* The record, unless s captures (then `*captured` is set). */
static cudaError_t record_uncaptured(cpool__bevent *ev, cpool__bstream *s, bool *captured) {
    enum cudaStreamCaptureStatus status;
    cudaError_t err = cudaStreamIsCapturing(s->stream, &status);
    *captured = err == cudaSuccess && status != cudaStreamCaptureStatusNone;
    return err != cudaSuccess || *captured ? err : cudaEventRecord(ev->event, s->stream);
}

static cpool_status cuda_event_record(cpool__bevent *ev, cpool__bstream *s) {
    cudaError_t err;
    bool captured = false;
    GUARDED(err, NULL, true, record_uncaptured(ev, s, &captured));
    if (err != cudaSuccess) return cuda_fail(err, "cudaEventRecord");
    if (captured) return cpool__fail(CPOOL_ERR_UNSUPPORTED, "cannot record an event on a capturing stream");
    ev->recorded = true;
    return CPOOL_OK;
}

/* A user's record, which CUDA takes into a capture as it is: the user's
 * own call, as raw CUDA would make it (no guard). */
static cpool_status cuda_user_event_record(cpool__bevent *ev, cpool__bstream *s) {
    cudaError_t err = record_event(s->dev, ev->event, s->stream);
    if (err != cudaSuccess) return cuda_fail(err, "cudaEventRecord");
    if (!ev->recorded) ev->recorded = true;
    return CPOOL_OK;
}

static bool cuda_event_done(cpool__bevent *ev) {
    if (!ev->recorded) return true;
    cudaError_t err;
    GUARDED(err, NULL, true, cudaEventQuery(ev->event));
    if (err == cudaErrorNotReady) return false;
    if (err != cudaSuccess) cudaGetLastError(); /* a failed device has nothing left running */
    return true;
}

static cpool_status cuda_event_synchronize(cpool__bevent *ev) {
    if (!ev->recorded) return CPOOL_OK;
    cudaError_t err;
    GUARDED(err, NULL, true, cudaEventSynchronize(ev->event));
    return err == cudaSuccess ? CPOOL_OK : cuda_fail(err, "cudaEventSynchronize");
}

/* CUDA forks or joins a capture itself when the record was captured. */
static cpool_status cuda_stream_wait_event(cpool__bstream *s, cpool__bevent *ev) {
    if (!ev->recorded) return CPOOL_OK; /* nothing to wait for */
    cudaError_t err = wait_event(s->dev, s->stream, ev->event);
    return err == cudaSuccess ? CPOOL_OK : cuda_fail(err, "cudaStreamWaitEvent");
}

/* The fence as a capture's begin records it: s does not capture (the
 * library knows), so no check and no guard. */
static cpool_status cuda_stream_fork(cpool__bstream *s, cpool__bevent *fence, cpool__bevent *ev) {
    cudaError_t err = record_event(s->dev, fence->event, s->stream);
    fence->recorded = err == cudaSuccess;
    if (err != cudaSuccess) return cuda_fail(err, "cudaEventRecord");
    return cuda_stream_wait_event(s, ev);
}

static cpool_status cuda_event_elapsed_ms(cpool__bevent *start, cpool__bevent *end, float *ms) {
    if (!start->recorded || !end->recorded)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_event_elapsed_ms: both events must have been recorded");
    cudaError_t err = cudaEventElapsedTime(ms, start->event, end->event);
    if (err == cudaErrorNotReady) {
        cudaGetLastError();
        return cpool__fail(CPOOL_ERR_NOT_READY, "cpool_event_elapsed_ms: a record has not completed");
    }
    CHECK_CUDA(err);
    return CPOOL_OK;
}

/* ---- capture and graphs -------------------------------------------------- */

/* Whether the stream captures now; a failed query counts as capturing, so
 * that nothing is enqueued into a capture that could not be seen. */
static bool stream_captures(cudaStream_t stream) {
    enum cudaStreamCaptureStatus status;
    cudaError_t err = cudaStreamIsCapturing(stream, &status);
    if (err != cudaSuccess) cudaGetLastError();
    return err != cudaSuccess || status != cudaStreamCaptureStatusNone;
}

static cpool_status cuda_capture_begin(cpool__bstream *s, cpool_capture_mode mode, cpool__bevent *fence) {
    static const enum cudaStreamCaptureMode modes[] = {
        [CPOOL_CAPTURE_GLOBAL] = cudaStreamCaptureModeGlobal,
        [CPOOL_CAPTURE_THREAD_LOCAL] = cudaStreamCaptureModeThreadLocal,
        [CPOOL_CAPTURE_RELAXED] = cudaStreamCaptureModeRelaxed,
    };
    /* Work on the legacy stream would join any capture of a blocking stream
     * and break it, so only there is the state asked before the fence. */
    if (s->legacy && stream_captures(s->stream))
        return cpool__fail(CPOOL_ERR_ALREADY_CAPTURING, "the stream is already capturing");
    /* The fence marks the work enqueued before the capture, which teardown
     * during the capture waits for. Recording it always is cheaper than
     * asking first whether the stream is idle: measured side by side on an
     * H200, a cudaStreamQuery here cost more than the record, and so did a
     * cuStreamWriteValue32 in the event's place. A stream captured outside
     * capturepool is told apart only if the begin fails, to keep the common
     * case to two calls: a record into such a capture adds no node to it. */
    cudaError_t err = cudaSuccess;
    if (fence) {
        err = record_event(s->dev, fence->event, s->stream);
        fence->recorded = err == cudaSuccess;
    }
    if (err == cudaSuccess) err = begin_capture(s->dev, s->stream, modes[mode]);
    if (err != cudaSuccess) {
        cpool_status st = cuda_fail(err, fence && !fence->recorded ? "cudaEventRecord" : "cudaStreamBeginCapture");
        if (stream_captures(s->stream)) {
            /* Someone else's capture: the fence, if it went in, belongs to
             * it and marks nothing to wait for. */
            if (fence) fence->recorded = false;
            return cpool__fail(CPOOL_ERR_ALREADY_CAPTURING, "the stream is already capturing");
        }
        return st;
    }
    s->capturing = true;
    return CPOOL_OK;
}

static cpool_status cuda_graph_instantiate(cpool__bgraph *g) {
    if (g->exec) return CPOOL_OK;
    cudaError_t err = instantiate_graph(g->dev, &g->exec, g->graph);
    if (err != cudaSuccess) {
        g->exec = NULL;
        cpool_status st = cuda_fail(err, "cudaGraphInstantiate");
        return st == CPOOL_ERR_CAPTURE_INVALIDATED ? CPOOL_ERR_BACKEND : st;
    }
    return CPOOL_OK;
}

static cpool_status cuda_capture_end(cpool__bstream *s, bool instantiate, cpool__bgraph **out) {
    if (!s->capturing) {
        enum cudaStreamCaptureStatus status;
        CHECK_CUDA(cudaStreamIsCapturing(s->stream, &status));
        if (status == cudaStreamCaptureStatusNone)
            return cpool__fail(CPOOL_ERR_NOT_CAPTURING, "the stream is not capturing");
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT,
                           "the stream's capture was begun outside capturepool: end it with cudaStreamEndCapture");
    }
    s->capturing = false;
    cudaGraph_t graph = NULL;
    cudaError_t err = end_capture(s->dev, s->stream, &graph);
    if (err != cudaSuccess) {
        cpool_status st = cuda_fail(err, "cudaStreamEndCapture");
        if (graph) cudaGraphDestroy(graph);
        return st;
    }
    cpool__bgraph *g = cpool__malloc(sizeof *g); /* not calloc: glibc's is several times slower */
    if (!g) {
        cudaGraphDestroy(graph);
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory ending a capture");
    }
    *g = (cpool__bgraph){.dev = s->dev, .graph = graph};
    if (instantiate) {
        cpool_status st = cuda_graph_instantiate(g);
        if (st != CPOOL_OK) {
            cudaGraphDestroy(graph);
            free(g);
            return st;
        }
    }
    *out = g;
    return CPOOL_OK;
}

static cpool_status cuda_capture_status(cpool__bstream *s, cpool_capture_state *out) {
    enum cudaStreamCaptureStatus status;
    CHECK_CUDA(cudaStreamIsCapturing(s->stream, &status));
    *out = status == cudaStreamCaptureStatusActive        ? CPOOL_CAPTURE_ACTIVE
           : status == cudaStreamCaptureStatusInvalidated ? CPOOL_CAPTURE_INVALIDATED
                                                          : CPOOL_CAPTURE_NONE;
    return CPOOL_OK;
}

static cpool_status cuda_graph_launch(cpool__bgraph *g, cpool__bstream *s) {
    CHECK_CUDA(graph_launch(s->dev, g->exec, s->stream));
    return CPOOL_OK;
}

static cpool_status cuda_graph_upload(cpool__bgraph *g, cpool__bstream *s) {
    CHECK_CUDA(cudaGraphUpload(g->exec, s->stream));
    return CPOOL_OK;
}

/* Both calls are safe while launches are in flight: the driver frees the
 * executable, and runs the thunks' user object destructor, once they finish. */
static void cuda_graph_destroy(cpool__bgraph *g) {
    if (g->exec) GUARDED_QUIET(NULL, cudaGraphExecDestroy(g->exec));
    GUARDED_QUIET(NULL, cudaGraphDestroy(g->graph));
    free(g);
}

static void *cuda_graph_native(const cpool__bgraph *g) { return (void *)g->exec; }

/* Whether the graph, or a graph nested in it, has host nodes. A graph that
 * cannot be read counts as having them. */
static bool has_host_nodes(cudaGraph_t graph) {
    size_t count = 0;
    if (cudaGraphGetNodes(graph, NULL, &count) != cudaSuccess) {
        cudaGetLastError();
        return true;
    }
    if (count == 0) return false;
    cudaGraphNode_t *nodes = cpool__malloc(count * sizeof *nodes);
    bool found = !nodes || cudaGraphGetNodes(graph, nodes, &count) != cudaSuccess;
    for (size_t i = 0; i < count && !found; i++) {
        enum cudaGraphNodeType type;
        cudaGraph_t child;
        if (cudaGraphNodeGetType(nodes[i], &type) != cudaSuccess)
            found = true;
        else if (type == cudaGraphNodeTypeHost)
            found = true;
        else if (type == cudaGraphNodeTypeGraph)
            found = cudaGraphChildGraphNodeGetGraph(nodes[i], &child) != cudaSuccess || has_host_nodes(child);
    }
    cudaGetLastError(); /* what a failed read left: it counted as host work */
    free(nodes);
    return found;
}

/* cudaGraphExecUpdate copies the new graph's node parameters into the
 * executable. Host nodes' thunks are owned through user objects that the
 * executable took at instantiation; an update would leave the executable
 * pointing at thunks it holds no reference to, so graphs with host work are
 * always instantiated anew instead (the old and new graphs have the same
 * node types, or the update fails anyway). */
static bool cuda_graph_update_in_place(cpool__bgraph *g, cpool__bgraph *fresh) {
    if (has_host_nodes(fresh->graph)) return false;
    cudaGraphExecUpdateResultInfo info;
    cudaError_t err;
    GUARDED(err, NULL, true, cudaGraphExecUpdate(g->exec, fresh->graph, &info));
    if (err != cudaSuccess) {
        cudaGetLastError(); /* a topology change: the caller swaps instead */
        return false;
    }
    cudaGraph_t old = g->graph;
    g->graph = fresh->graph;
    fresh->graph = old;
    return true;
}

/* A path CUDA cannot write is a file error, told apart before CUDA is
 * asked (it reports one as its own). */
static cpool_status cuda_graph_dump_dot(const cpool__bgraph *g, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return cpool__fail(CPOOL_ERR_IO, "cannot open %s for writing: %s", path, strerror(errno));
    fclose(f);
    CHECK_CUDA(cudaGraphDebugDotPrint(g->graph, path, cudaGraphDebugDotFlagsVerbose));
    return CPOOL_OK;
}

const cpool__backend cpool__backend_cuda = {
    .kind = CPOOL_BACKEND_CUDA,
    .name = "cuda",
    .device_open = cuda_device_open,
    .device_close = cuda_device_close,
    .segment_alloc = cuda_segment_alloc,
    .segment_free = cuda_segment_free,
    .va_supported = cuda_va_supported,
    .call_relaxed = cuda_call_relaxed,
    .va_reserve = cuda_va_reserve,
    .va_release = cuda_va_release,
    .pages_map = cuda_pages_map,
    .pages_unmap = cuda_pages_unmap,
    .mem_create = cuda_mem_create,
    .mem_release = cuda_mem_release,
    .mem_map = cuda_mem_map,
    .mem_unmap = cuda_mem_unmap,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_native = cuda_stream_native,
    .stream_synchronize = cuda_stream_synchronize,
    .launch_host = cuda_launch_host,
    .memcpy_async = cuda_memcpy_async,
    .memset_async = cuda_memset_async,
    .upload_async = cuda_upload_async,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .user_event_record = cuda_user_event_record,
    .event_done = cuda_event_done,
    .event_synchronize = cuda_event_synchronize,
    .event_create_timed = cuda_event_create_timed,
    .stream_wait_event = cuda_stream_wait_event,
    .stream_fork = cuda_stream_fork,
    .event_elapsed_ms = cuda_event_elapsed_ms,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .graph_instantiate = cuda_graph_instantiate,
    .capture_status = cuda_capture_status,
    .graph_launch = cuda_graph_launch,
    .graph_upload = cuda_graph_upload,
    .graph_destroy = cuda_graph_destroy,
    .graph_native = cuda_graph_native,
    .graph_update_in_place = cuda_graph_update_in_place,
    .graph_dump_dot = cuda_graph_dump_dot,
};
