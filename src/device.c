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

/* CPOOL_BACKEND=host or =cuda in the environment overrides AUTO, so that one
 * program can be run on either backend of a GPU machine. */
static cpool_backend auto_choice(void) {
    const char *env = getenv("CPOOL_BACKEND");
    if (env && strcmp(env, "host") == 0) return CPOOL_BACKEND_HOST;
    if (env && strcmp(env, "cuda") == 0) return CPOOL_BACKEND_CUDA;
    return CPOOL_BACKEND_AUTO;
}

/* Open devices, so that opening a (backend, ordinal) again returns the same
 * device: streams and pools of both handles then work together. A device
 * whose count reached zero is being closed and is no longer found. */
static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static cpool_device *open_devices;

static cpool_status device_get(const cpool__backend *be, int ordinal, cpool_device **out) {
    pthread_mutex_lock(&registry_mu);
    for (cpool_device *d = open_devices; d; d = d->next_open) {
        if (d->be != be || d->ordinal != ordinal) continue;
        int refs = atomic_load(&d->refs);
        while (refs > 0 && !atomic_compare_exchange_weak(&d->refs, &refs, refs + 1)) {
        }
        if (refs > 0) {
            pthread_mutex_unlock(&registry_mu);
            *out = d;
            return CPOOL_OK;
        }
    }
    cpool__bdevice *impl = NULL;
    cpool_status st = be->device_open(ordinal, &impl);
    cpool_device *dev = NULL;
    if (st == CPOOL_OK) {
        dev = cpool__calloc(1, sizeof *dev);
        if (!dev) {
            be->device_close(impl);
            st = cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory opening a device");
        }
    }
    if (st == CPOOL_OK) {
        atomic_init(&dev->refs, 1);
        dev->be = be;
        dev->impl = impl;
        dev->ordinal = ordinal;
        pthread_mutex_init(&dev->streams_mu, NULL);
        dev->next_open = open_devices;
        open_devices = dev;
        *out = dev;
    }
    pthread_mutex_unlock(&registry_mu);
    return st;
}

cpool_status cpool_device_open(cpool_backend backend, int ordinal, cpool_device **out) {
    if (!out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_device_open: out is NULL");
    if (ordinal < 0) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_device_open: negative ordinal %d", ordinal);
    if (backend != CPOOL_BACKEND_AUTO && backend != CPOOL_BACKEND_CUDA && backend != CPOOL_BACKEND_HOST)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_device_open: unknown backend %d", (int)backend);
    if (backend == CPOOL_BACKEND_AUTO) backend = auto_choice();

    cpool_status st = CPOOL_ERR_NO_DEVICE;
    if (backend == CPOOL_BACKEND_AUTO || backend == CPOOL_BACKEND_CUDA) {
        const cpool__backend *be = backend_for(CPOOL_BACKEND_CUDA);
        st = be ? device_get(be, ordinal, out)
                : cpool__fail(CPOOL_ERR_NO_DEVICE, "capturepool was built without the CUDA backend");
        if (st != CPOOL_ERR_NO_DEVICE || backend == CPOOL_BACKEND_CUDA) return st;
    }
    return device_get(backend_for(CPOOL_BACKEND_HOST), ordinal, out);
}

cpool_device *cpool__device_retain(cpool_device *dev) {
    atomic_fetch_add(&dev->refs, 1);
    return dev;
}

void cpool__device_release(cpool_device *dev) {
    if (!dev || atomic_fetch_sub(&dev->refs, 1) != 1) return;
    pthread_mutex_lock(&registry_mu);
    for (cpool_device **p = &open_devices; *p; p = &(*p)->next_open)
        if (*p == dev) {
            *p = dev->next_open;
            break;
        }
    pthread_mutex_unlock(&registry_mu);
    dev->be->device_close(dev->impl);
    pthread_mutex_destroy(&dev->streams_mu);
    free(dev);
}

void cpool_device_close(cpool_device *dev) { cpool__device_release(dev); }

cpool_backend cpool_device_backend(const cpool_device *dev) { return dev ? dev->be->kind : CPOOL_BACKEND_AUTO; }

void cpool__device_add_stream(cpool_device *dev, cpool_stream *s) {
    static _Atomic uint64_t next_id = 1;
    s->id = atomic_fetch_add(&next_id, 1); /* never reused, unlike addresses */
    pthread_mutex_lock(&dev->streams_mu);
    s->prev_in_device = NULL;
    s->next_in_device = dev->streams;
    if (dev->streams) dev->streams->prev_in_device = s;
    dev->streams = s;
    pthread_mutex_unlock(&dev->streams_mu);
}

void cpool__device_remove_stream(cpool_device *dev, cpool_stream *s) {
    pthread_mutex_lock(&dev->streams_mu);
    if (s->prev_in_device)
        s->prev_in_device->next_in_device = s->next_in_device;
    else
        dev->streams = s->next_in_device;
    if (s->next_in_device) s->next_in_device->prev_in_device = s->prev_in_device;
    pthread_mutex_unlock(&dev->streams_mu);
}

void cpool__shared_event_release(cpool__shared_event *e) {
    if (!e || atomic_fetch_sub(&e->refs, 1) != 1) return;
    e->dev->be->event_destroy(e->event);
    cpool__device_release(e->dev);
    free(e);
}

cpool_status cpool__shared_event_new(cpool_device *dev, cpool__shared_event **out) {
    cpool__shared_event *f = cpool__calloc(1, sizeof *f);
    if (!f) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory creating an event");
    cpool_status st = dev->be->event_create(dev->impl, &f->event);
    if (st != CPOOL_OK) {
        free(f);
        return st;
    }
    atomic_init(&f->refs, 1);
    f->dev = cpool__device_retain(dev);
    *out = f;
    return CPOOL_OK;
}

cpool_status cpool__device_quiesce(cpool_device *dev) {
    const cpool__backend *be = dev->be;
    cpool_status result = CPOOL_OK;
    pthread_mutex_lock(&dev->streams_mu);
    size_t count = 0;
    for (cpool_stream *s = dev->streams; s; s = s->next_in_device) count++;
    /* One fence a stream: a new event at its end, or, while it captures,
     * the event recorded when its capture began. */
    cpool__shared_event **fences = count ? cpool__calloc(count, sizeof *fences) : NULL;
    size_t n = 0;
    for (cpool_stream *s = dev->streams; s; s = s->next_in_device) {
        cpool__shared_event *f = NULL;
        bool capturing = s->capture != NULL;
        if (!capturing) {
            cpool_status st = cpool__shared_event_new(dev, &f);
            if (st == CPOOL_OK) st = be->event_record(f->event, s->impl);
            if (st != CPOOL_OK) {
                cpool__shared_event_release(f);
                f = NULL;
            }
            /* UNSUPPORTED: the stream captures after all (its capture is
             * just beginning or ending on another thread). */
            capturing = st == CPOOL_ERR_UNSUPPORTED;
            if (st != CPOOL_OK && !capturing) {
                /* No event to be had: wait for the stream in place, unless
                 * that would break a capture. */
                cpool_capture_state state = CPOOL_CAPTURE_ACTIVE;
                if (be->capture_status(s->impl, &state) == CPOOL_OK && state == CPOOL_CAPTURE_NONE) {
                    st = be->stream_synchronize(s->impl);
                    if (st != CPOOL_OK && result == CPOOL_OK) result = st;
                }
            }
        }
        if (capturing && s->capture_fence) {
            f = s->capture_fence;
            atomic_fetch_add(&f->refs, 1);
        }
        if (f && fences) {
            fences[n++] = f;
        } else if (f) { /* no room to wait later: wait now */
            cpool_status st = be->event_synchronize(f->event);
            if (st != CPOOL_OK && result == CPOOL_OK) result = st;
            cpool__shared_event_release(f);
        }
    }
    pthread_mutex_unlock(&dev->streams_mu);
    for (size_t i = 0; i < n; i++) {
        cpool_status st = be->event_synchronize(fences[i]->event);
        if (st != CPOOL_OK && result == CPOOL_OK) result = st;
        cpool__shared_event_release(fences[i]);
    }
    free(fences);
    return result;
}

cpool__fence_result cpool__device_fence_stream(cpool_device *dev, uint64_t stream_id, cpool__bevent *ev) {
    cpool__fence_result r = CPOOL__FENCE_GONE;
    pthread_mutex_lock(&dev->streams_mu);
    for (cpool_stream *s = dev->streams; s; s = s->next_in_device)
        if (s->id == stream_id) {
            r = dev->be->event_record(ev, s->impl) == CPOOL_OK ? CPOOL__FENCE_RECORDED : CPOOL__FENCE_BUSY;
            break;
        }
    pthread_mutex_unlock(&dev->streams_mu);
    return r;
}
