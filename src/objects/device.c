/*
 * Devices: a backend, its device state, and the registry of live streams.
 *
 * A device is reference counted: streams, pools and graphs made on it hold
 * a reference, so closing it while they live is safe. The stream registry
 * lets teardown wait for all stream work of the device (quiesce), the way
 * cudaFree waits for the whole device, and lets the allocator fence a stream
 * by id without holding a pointer that the user may destroy.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const cpool__backend *backend_for(cpool_backend kind) {
    if (kind == CPOOL_BACKEND_HOST) return &cpool__backend_host;
#ifdef CPOOL_HAVE_CUDA
    if (kind == CPOOL_BACKEND_CUDA) return &cpool__backend_cuda;
#endif
    return NULL;
}

/* What CPOOL_BACKEND asks of AUTO: host, cuda, or (unset or empty) AUTO
 * itself. Anything else is refused rather than ignored, so that a typo does
 * not silently pick a backend. */
static cpool_status auto_choice(cpool_backend *out) {
    const char *env = getenv("CPOOL_BACKEND");
    *out = CPOOL_BACKEND_AUTO;
    if (!env || !*env) return CPOOL_OK;
    if (strcmp(env, "host") == 0) {
        *out = CPOOL_BACKEND_HOST;
    } else if (strcmp(env, "cuda") == 0) {
        *out = CPOOL_BACKEND_CUDA;
    } else {
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT,
                           "cpool_device_open: CPOOL_BACKEND=\"%.64s\" is neither \"host\" nor \"cuda\"", env);
    }
    return CPOOL_OK;
}

/* Open devices, so that opening a (backend, ordinal) again returns the same
 * device: streams and pools of both handles then work together. A device
 * whose count reached zero is being closed and is no longer found. */
static cpool__mutex registry_mu = CPOOL__MUTEX_INIT(CPOOL__RANK_REGISTRY);
static cpool_device *open_devices;
static cpool__slab device_slab = CPOOL__SLAB_INIT(cpool_device, CPOOL__HANDLE_DEVICE);

/* Finds or opens the device; the caller's open counts in both counts. */
static cpool_status device_get(const cpool__backend *be, int ordinal, cpool_device **out) {
    cpool__mutex_lock(&registry_mu);
    for (cpool_device *d = open_devices; d; d = d->next_open) {
        if (d->be != be || d->ordinal != ordinal) continue;
        int refs = atomic_load(&d->refs);
        while (refs > 0 && !atomic_compare_exchange_weak(&d->refs, &refs, refs + 1)) {
        }
        if (refs > 0) {
            atomic_fetch_add(&d->user_refs, 1);
            cpool__mutex_unlock(&registry_mu);
            *out = d;
            return CPOOL_OK;
        }
    }
    /* Teardown that a stream callback hands to the library's thread needs
     * the thread: start it while a failure can still be reported. */
    cpool_status st = cpool__deferred_start();
    if (st != CPOOL_OK) {
        cpool__mutex_unlock(&registry_mu);
        return st;
    }
    cpool__bdevice *impl = NULL;
    st = be->device_open(ordinal, &impl);
    cpool_device *dev = NULL;
    if (st == CPOOL_OK) {
        dev = cpool__slab_take(&device_slab);
        if (!dev) {
            be->device_close(impl);
            st = cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory opening a device");
        }
    }
    if (st == CPOOL_OK) {
        atomic_init(&dev->refs, 1);
        atomic_init(&dev->user_refs, 1);
        dev->be = be;
        dev->impl = impl;
        dev->ordinal = ordinal;
        cpool__order_init(&dev->order, be, impl);
        dev->next_open = open_devices;
        open_devices = dev;
        *out = dev;
    }
    cpool__mutex_unlock(&registry_mu);
    return st;
}

static cpool_status device_open(cpool_backend backend, int ordinal, cpool_device **out) {
    if (!out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_device_open: out is NULL");
    if (ordinal < 0) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_device_open: negative ordinal %d", ordinal);
    if (backend != CPOOL_BACKEND_AUTO && backend != CPOOL_BACKEND_CUDA && backend != CPOOL_BACKEND_HOST)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_device_open: unknown backend %d", (int)backend);
    /* Every backend's pools read it: refused whichever backend is asked for. */
    const char *vm = cpool__virtual_memory_bad_value();
    if (vm)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT,
                           "cpool_device_open: CPOOL_VIRTUAL_MEMORY=\"%.64s\" is neither \"0\" nor \"1\"", vm);
    if (backend == CPOOL_BACKEND_AUTO) {
        cpool_status st = auto_choice(&backend);
        if (st != CPOOL_OK) return st;
    }
    cpool_device *dev = NULL;
    cpool_status st = CPOOL_ERR_NO_DEVICE;
    if (backend == CPOOL_BACKEND_AUTO || backend == CPOOL_BACKEND_CUDA) {
        const cpool__backend *be = backend_for(CPOOL_BACKEND_CUDA);
        st = be ? device_get(be, ordinal, &dev)
                : cpool__fail(CPOOL_ERR_NO_DEVICE, "capturepool was built without the CUDA backend "
                                                 "(CPOOL_BACKEND=host or CPOOL_BACKEND_HOST runs on the host backend)");
    }
    if (st == CPOOL_ERR_NO_DEVICE && backend != CPOOL_BACKEND_CUDA)
        st = device_get(backend_for(CPOOL_BACKEND_HOST), ordinal, &dev);
    if (st == CPOOL_OK) *out = cpool__handle_of(dev);
    return st;
}

cpool_status cpool_device_open(cpool_backend backend, int ordinal, cpool_device **out) {
    /* AUTO falling back to the host backend is a success: what the CUDA
     * attempt wrote is not this call's failure. */
    cpool__error_mark before;
    cpool__error_save(&before);
    cpool_status st = device_open(backend, ordinal, out);
    if (st == CPOOL_OK) cpool__error_restore(&before);
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_device_open", st);
}

cpool_device *cpool__device_retain(cpool_device *dev) {
    atomic_fetch_add(&dev->refs, 1);
    return dev;
}

void cpool__device_release(cpool_device *dev) {
    if (!dev || atomic_fetch_sub(&dev->refs, 1) != 1) return;
    cpool__mutex_lock(&registry_mu);
    for (cpool_device **p = &open_devices; *p; p = &(*p)->next_open)
        if (*p == dev) {
            *p = dev->next_open;
            break;
        }
    cpool__mutex_unlock(&registry_mu);
    cpool__handle_kill(dev);
    dev->be->device_close(dev->impl);
    cpool__order_destroy(&dev->order);
    cpool__slab_give(&device_slab, dev);
}

/* Takes one of the callers' references back; false (with the reason) when
 * none is left, which is a close too many. */
bool cpool__take_user_ref(atomic_int *user_refs, const char *fn, const char *what) {
    int n = atomic_load(user_refs);
    while (n > 0 && !atomic_compare_exchange_weak(user_refs, &n, n - 1)) {
    }
    if (n > 0) return true;
    cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: the caller holds no reference to this %s any more (one too many)", fn,
                what);
    return false;
}

void cpool_device_close(cpool_device *handle) {
    cpool_device *dev;
    CPOOL__RESOLVE_VOID(dev, handle, CPOOL__HANDLE_DEVICE, "cpool_device_close", "device");
    if (cpool__take_user_ref(&dev->user_refs, "cpool_device_close", "device")) cpool__device_release(dev);
}

cpool_backend cpool_device_backend(const cpool_device *handle) {
    const cpool_device *dev;
    CPOOL__RESOLVE_OR_NULL(dev, handle, CPOOL__HANDLE_DEVICE, "cpool_device_backend", "device");
    if (!dev) return CPOOL_BACKEND_AUTO;
    if (atomic_load(&((cpool_device *)dev)->user_refs) == 0) {
        cpool__fail(CPOOL_ERR_INVALID_ARGUMENT,
                    "cpool_device_backend: the device was closed (the caller holds no reference to it)");
        return CPOOL_BACKEND_AUTO;
    }
    return dev->be->kind;
}

