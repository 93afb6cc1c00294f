/*
 * The CUDA backend on the CUDA runtime: devices, segments, streams, events,
 * captures and graphs, host copies.
 *
 * - Segments are cudaMalloc'd. Growing or shrinking, and creating events,
 *   run under cudaThreadExchangeStreamCaptureMode(relaxed), so that they are
 *   legal while this or any other thread captures in GLOBAL mode; the
 *   caller's mode is restored after (guard.c).
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
 * - Opening a device probes its virtual memory management (vmm.c) and
 *   connects it with the open devices that can reach its memory (peer.c).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda_driver.h"
#include "cuda_backend.h"
#include "fault.h"
#include "lock.h"
#include "status.h"
#include "thread.h"

typedef struct thunk {
    void (*fn)(void *);
    void *arg;
    bool eager;
} thunk;

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

/* ---- checked calls ------------------------------------------------------- */

#define CHECK_CUDA(call)                                                                           \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess) return cpool__cuda_fail(err_, #call);                             \
    } while (0)

/* Sets err to `call` and, when it failed, jumps to `cleanup`, which undoes
 * what the function made so far. */
#define CHECK_CUDA_GOTO(err, call, cleanup)                                                        \
    do {                                                                                           \
        (err) = (call);                                                                            \
        if ((err) != cudaSuccess) goto cleanup;                                                    \
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
 * driver_result; if so, dev is current until cpool__cuda_guard_exit(g).
 * Otherwise *err is the result. */
static bool runtime_needed(int driver_result, const cpool__bdevice *dev, device_guard *g, cudaError_t *err) {
    *err = (cudaError_t)driver_result;
    if (driver_result != DRIVER_MISSING && driver_result != DRIVER_NO_CONTEXT) return false;
    *g = (device_guard){.switched = false, .relaxed = false};
    *err = cpool__cuda_switch_device(g, dev);
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
            cpool__cuda_guard_exit(&guard_);                                                       \
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

cpool_status cpool__cuda_device_open(int ordinal, cpool__bdevice **out) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        cudaGetLastError();
        return cpool__fail(CPOOL_ERR_NO_DEVICE,
                           "no usable CUDA device: %s (without a GPU and its driver, CPOOL_BACKEND=host or "
                           "CPOOL_BACKEND_HOST runs on the host backend)",
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
    d->vmm = cpool__cuda_vmm_probe(d);
    cpool__cuda_connect_peers(d);
    *out = d;
    return CPOOL_OK;
failed:
    cpool__mutex_destroy(&d->mapped_mu);
    cpool__mutex_destroy(&d->capture_graphs_mu);
    free(d);
    return cpool__cuda_fail(err, "initialising the device");
}

void cpool__cuda_device_close(cpool__bdevice *dev) {
    cpool__cuda_disconnect_peers(dev);
    if (dev->vmm) cpool__cuda_release_idle_ranges(dev);
    cpool__units_free(&dev->units);
    cpool__mutex_destroy(&dev->mapped_mu);
    cpool__mutex_destroy(&dev->capture_graphs_mu);
    free(dev);
}

cpool_status cpool__cuda_segment_alloc(cpool__bdevice *dev, size_t bytes, void **out) {
    cudaError_t err;
    GUARDED(err, dev, true, FAULT_OR(cudaMalloc(out, bytes)));
    return err == cudaSuccess ? CPOOL_OK : cpool__cuda_fail(err, "cudaMalloc of a segment");
}

void cpool__cuda_segment_free(cpool__bdevice *dev, void *base, size_t bytes) {
#ifdef CPOOL_DEBUG_CHECKS
    /* On the legacy stream; cudaFree waits for the device before freeing. */
    GUARDED_QUIET(dev, cudaMemset(base, CPOOL__POISON, bytes));
#else
    CPOOL_UNUSED(bytes);
#endif
    GUARDED_QUIET(dev, cudaFree(base));
}

/* ---- capture mode -------------------------------------------------------- */

cpool_status cpool__cuda_call_relaxed(cpool__bdevice *dev, cpool_status (*fn)(void *arg), void *arg) {
    device_guard guard;
    cudaError_t err = cpool__cuda_guard_enter(&guard, dev, true);
    if (err != cudaSuccess) return cpool__cuda_fail(err, "making the device current for a relaxed call");
    cpool_status st = fn(arg);
    cpool__cuda_guard_exit(&guard);
    return st;
}

/* ---- host copies --------------------------------------------------------- */

/* Page-locked and portable: copies to and from it run at the bus's speed,
 * on any device. */
cpool_status cpool__cuda_host_alloc(cpool__bdevice *dev, size_t bytes, void **out) {
    cudaError_t err;
    GUARDED(err, dev, true, FAULT_OR(cudaHostAlloc(out, bytes, cudaHostAllocPortable)));
    return err == cudaSuccess ? CPOOL_OK : cpool__cuda_fail(err, "cudaHostAlloc of page-locked memory for a pool's copy");
}

void cpool__cuda_host_free(cpool__bdevice *dev, void *p) { GUARDED_QUIET(dev, cudaFreeHost(p)); }

/* ---- streams ------------------------------------------------------------- */

cpool_status cpool__cuda_stream_create(cpool__bdevice *dev, void *native, bool wrap, cpool__bstream **out) {
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
            return cpool__cuda_fail(err, "cudaStreamCreateWithFlags");
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

void cpool__cuda_stream_destroy(cpool__bstream *s) {
    discard_capture(s);
    GUARDED_QUIET(NULL, cudaStreamSynchronize(s->stream));
    if (s->owned) GUARDED_QUIET(NULL, cudaStreamDestroy(s->stream));
    free(s);
}

void *cpool__cuda_stream_native(const cpool__bstream *s) { return (void *)s->stream; }

cpool_status cpool__cuda_stream_synchronize(cpool__bstream *s) {
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
    return err == cudaSuccess ? CPOOL_OK : cpool__cuda_fail(err, "giving captured host work to its graph");
}

cpool_status cpool__cuda_launch_host(cpool__bstream *s, void (*fn)(void *), void *arg) {
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
        return cpool__cuda_fail(err, "cudaLaunchHostFunc");
    }
    return CPOOL_OK;
}

cpool_status cpool__cuda_memcpy_async(cpool__bstream *s, void *dst, const void *src, size_t bytes) {
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s->stream));
    return CPOOL_OK;
}

/* From pageable memory CUDA stages the source before returning, so the
 * caller may reuse it at once. */
cpool_status cpool__cuda_upload_async(cpool__bstream *s, void *dst, const void *src, size_t bytes) {
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s->stream));
    return CPOOL_OK;
}

cpool_status cpool__cuda_memset_async(cpool__bstream *s, void *dst, int value, size_t bytes) {
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
        return cpool__cuda_fail(err, "cudaEventCreateWithFlags");
    }
    ev->dev = dev;
    *out = ev;
    return CPOOL_OK;
}

/* The library's own events time nothing; a user's time their records. */
cpool_status cpool__cuda_event_create(cpool__bdevice *dev, cpool__bevent **out) {
    return event_create(dev, cudaEventDisableTiming, out);
}

cpool_status cpool__cuda_event_create_timed(cpool__bdevice *dev, cpool__bevent **out) {
    return event_create(dev, cudaEventDefault, out);
}

/* Event calls are the library's own bookkeeping: they run in relaxed
 * capture mode, so that a GLOBAL-mode capture on any thread is not broken by
 * them (CUDA counts event queries and waits as unsafe under capture). */

void cpool__cuda_event_destroy(cpool__bevent *ev) {
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

cpool_status cpool__cuda_event_record(cpool__bevent *ev, cpool__bstream *s) {
    cudaError_t err;
    bool captured = false;
    GUARDED(err, NULL, true, record_uncaptured(ev, s, &captured));
    if (err != cudaSuccess) return cpool__cuda_fail(err, "cudaEventRecord");
    if (captured) return cpool__fail(CPOOL_ERR_UNSUPPORTED, "cannot record an event on a capturing stream");
    ev->recorded = true;
    return CPOOL_OK;
}

/* A user's record, which CUDA takes into a capture as it is: the user's
 * own call, as raw CUDA would make it (no guard). */
cpool_status cpool__cuda_user_event_record(cpool__bevent *ev, cpool__bstream *s) {
    cudaError_t err = record_event(s->dev, ev->event, s->stream);
    if (err != cudaSuccess) return cpool__cuda_fail(err, "cudaEventRecord");
    if (!ev->recorded) ev->recorded = true;
    return CPOOL_OK;
}

bool cpool__cuda_event_done(cpool__bevent *ev) {
    if (!ev->recorded) return true;
    cudaError_t err;
    GUARDED(err, NULL, true, cudaEventQuery(ev->event));
    if (err == cudaErrorNotReady) return false;
    if (err != cudaSuccess) cudaGetLastError(); /* a failed device has nothing left running */
    return true;
}

cpool_status cpool__cuda_event_synchronize(cpool__bevent *ev) {
    if (!ev->recorded) return CPOOL_OK;
    cudaError_t err;
    GUARDED(err, NULL, true, cudaEventSynchronize(ev->event));
    return err == cudaSuccess ? CPOOL_OK : cpool__cuda_fail(err, "cudaEventSynchronize");
}

/* CUDA forks or joins a capture itself when the record was captured. */
cpool_status cpool__cuda_stream_wait_event(cpool__bstream *s, cpool__bevent *ev) {
    if (!ev->recorded) return CPOOL_OK; /* nothing to wait for */
    cudaError_t err = wait_event(s->dev, s->stream, ev->event);
    return err == cudaSuccess ? CPOOL_OK : cpool__cuda_fail(err, "cudaStreamWaitEvent");
}

/* The fence as a capture's begin records it: s does not capture (the
 * library knows), so no check and no guard. */
cpool_status cpool__cuda_stream_fork(cpool__bstream *s, cpool__bevent *fence, cpool__bevent *ev) {
    cudaError_t err = record_event(s->dev, fence->event, s->stream);
    fence->recorded = err == cudaSuccess;
    if (err != cudaSuccess) return cpool__cuda_fail(err, "cudaEventRecord");
    return cpool__cuda_stream_wait_event(s, ev);
}

cpool_status cpool__cuda_event_elapsed_ms(cpool__bevent *start, cpool__bevent *end, float *ms) {
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

cpool_status cpool__cuda_capture_begin(cpool__bstream *s, cpool_capture_mode mode, cpool__bevent *fence) {
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
        cpool_status st = cpool__cuda_fail(err, fence && !fence->recorded ? "cudaEventRecord" : "cudaStreamBeginCapture");
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

cpool_status cpool__cuda_graph_instantiate(cpool__bgraph *g) {
    if (g->exec) return CPOOL_OK;
    cudaError_t err = instantiate_graph(g->dev, &g->exec, g->graph);
    if (err != cudaSuccess) {
        g->exec = NULL;
        cpool_status st = cpool__cuda_fail(err, "cudaGraphInstantiate");
        return st == CPOOL_ERR_CAPTURE_INVALIDATED ? CPOOL_ERR_BACKEND : st;
    }
    return CPOOL_OK;
}

cpool_status cpool__cuda_capture_end(cpool__bstream *s, bool instantiate, cpool__bgraph **out) {
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
        cpool_status st = cpool__cuda_fail(err, "cudaStreamEndCapture");
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
        cpool_status st = cpool__cuda_graph_instantiate(g);
        if (st != CPOOL_OK) {
            cudaGraphDestroy(graph);
            free(g);
            return st;
        }
    }
    *out = g;
    return CPOOL_OK;
}

cpool_status cpool__cuda_capture_status(cpool__bstream *s, cpool_capture_state *out) {
    enum cudaStreamCaptureStatus status;
    CHECK_CUDA(cudaStreamIsCapturing(s->stream, &status));
    *out = status == cudaStreamCaptureStatusActive        ? CPOOL_CAPTURE_ACTIVE
           : status == cudaStreamCaptureStatusInvalidated ? CPOOL_CAPTURE_INVALIDATED
                                                          : CPOOL_CAPTURE_NONE;
    return CPOOL_OK;
}

cpool_status cpool__cuda_graph_launch(cpool__bgraph *g, cpool__bstream *s) {
    CHECK_CUDA(graph_launch(s->dev, g->exec, s->stream));
    return CPOOL_OK;
}

cpool_status cpool__cuda_graph_upload(cpool__bgraph *g, cpool__bstream *s) {
    CHECK_CUDA(cudaGraphUpload(g->exec, s->stream));
    return CPOOL_OK;
}

/* Both calls are safe while launches are in flight: the driver frees the
 * executable, and runs the thunks' user object destructor, once they finish. */
void cpool__cuda_graph_destroy(cpool__bgraph *g) {
    if (g->exec) GUARDED_QUIET(NULL, cudaGraphExecDestroy(g->exec));
    GUARDED_QUIET(NULL, cudaGraphDestroy(g->graph));
    free(g);
}

void *cpool__cuda_graph_native(const cpool__bgraph *g) { return (void *)g->exec; }

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
bool cpool__cuda_graph_update_in_place(cpool__bgraph *g, cpool__bgraph *fresh) {
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
cpool_status cpool__cuda_graph_dump_dot(const cpool__bgraph *g, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return cpool__fail(CPOOL_ERR_IO, "cannot open %s for writing: %s", path, strerror(errno));
    fclose(f);
    CHECK_CUDA(cudaGraphDebugDotPrint(g->graph, path, cudaGraphDebugDotFlagsVerbose));
    return CPOOL_OK;
}

