/*
 * How the CUDA backend calls CUDA. Every call that needs the device made
 * current switches to it and back (the device guard); library calls that
 * must not break a GLOBAL-mode capture run in relaxed capture mode, the
 * caller's mode restored after. Both are one helper, GUARDED
 * (cuda_backend.h). Errors become statuses with the CUDA error's name and
 * text, and the sticky per-thread error is cleared.
 */
#include <cuda_runtime_api.h>

#include "cuda_backend.h"
#include "status.h"

/* ---- errors and guards --------------------------------------------------- */

cpool_status cpool__cuda_fail(cudaError_t err, const char *what) {
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

/* Makes dev the runtime's current device, remembering the one before. */
cudaError_t cpool__cuda_switch_device(device_guard *g, const cpool__bdevice *dev) {
    cudaError_t err = cudaGetDevice(&g->previous);
    if (err == cudaSuccess && g->previous != dev->ordinal) {
        err = cudaSetDevice(dev->ordinal);
        g->switched = err == cudaSuccess;
    }
    return err;
}

/* Makes dev current (unless dev is NULL) and, if relaxed, this thread's
 * capture mode relaxed; on failure nothing changed. */
cudaError_t cpool__cuda_guard_enter(device_guard *g, const cpool__bdevice *dev, bool relaxed) {
    g->switched = false;
    g->relaxed = false;
    if (relaxed) {
        g->mode = cudaStreamCaptureModeRelaxed;
        cudaError_t err = cudaThreadExchangeStreamCaptureMode(&g->mode);
        if (err != cudaSuccess) return err;
        g->relaxed = true;
    }
    cudaError_t err = dev ? cpool__cuda_switch_device(g, dev) : cudaSuccess;
    if (err != cudaSuccess && g->relaxed) cudaThreadExchangeStreamCaptureMode(&g->mode);
    return err;
}

void cpool__cuda_guard_exit(device_guard *g) {
    if (g->switched) cudaSetDevice(g->previous);
    if (g->relaxed) cudaThreadExchangeStreamCaptureMode(&g->mode);
}

