/*
 * The CUDA driver's functions that the CUDA backend calls in place of the
 * runtime's on the capture, launch and user event paths, fetched through the runtime
 * (cudaGetDriverEntryPointByVersion), so nothing links the driver library.
 * bench/launch_bench.c uses the same table to time them against the
 * runtime's calls.
 *
 * They are typed with the runtime's handle types, which are the driver's.
 * Their results are the driver's result codes, which carry the same numbers
 * as the runtime's errors for every error both have.
 */
#ifndef CPOOL_CUDA_DRIVER_H
#define CPOOL_CUDA_DRIVER_H

#include <stddef.h>

#include <cuda_runtime_api.h>

typedef struct cpool__driver_calls {
    int (*event_record)(cudaEvent_t event, cudaStream_t stream);
    int (*begin_capture)(cudaStream_t stream, enum cudaStreamCaptureMode mode);
    int (*end_capture)(cudaStream_t stream, cudaGraph_t *graph);
    int (*instantiate)(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags);
    int (*graph_launch)(cudaGraphExec_t exec, cudaStream_t stream);
    int (*stream_wait_event)(cudaStream_t stream, cudaEvent_t event, unsigned flags);
} cpool__driver_calls;

/* The entry point as of CUDA 12.0, as the runtime hands it out; NULL where
 * it has none to give. */
static inline void *cpool__driver_entry(const char *name) {
    void *fn = NULL;
#if CUDART_VERSION >= 12050
    enum cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
        cudaGetLastError();
        fn = NULL;
    }
#else
    (void)name;
#endif
    return fn;
}

/* Fills *d; an entry the runtime gives none for is NULL. */
static inline void cpool__driver_load(cpool__driver_calls *d) {
    d->event_record = (int (*)(cudaEvent_t, cudaStream_t))cpool__driver_entry("cuEventRecord");
    d->begin_capture = (int (*)(cudaStream_t, enum cudaStreamCaptureMode))cpool__driver_entry("cuStreamBeginCapture");
    d->end_capture = (int (*)(cudaStream_t, cudaGraph_t *))cpool__driver_entry("cuStreamEndCapture");
    d->instantiate = (int (*)(cudaGraphExec_t *, cudaGraph_t, unsigned long long))cpool__driver_entry(
        "cuGraphInstantiateWithFlags");
    d->graph_launch = (int (*)(cudaGraphExec_t, cudaStream_t))cpool__driver_entry("cuGraphLaunch");
    d->stream_wait_event = (int (*)(cudaStream_t, cudaEvent_t, unsigned))cpool__driver_entry("cuStreamWaitEvent");
}

#endif /* CPOOL_CUDA_DRIVER_H */
