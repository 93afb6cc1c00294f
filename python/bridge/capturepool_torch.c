/*
 * The allocator that capturepool.torch hands to PyTorch
 * (torch.cuda.memory.CUDAPluggableAllocator).
 *
 * PyTorch calls a pluggable allocator through two plain C functions,
 *     void *alloc(size_t bytes, int device, cudaStream_t stream);
 *     void  free(void *ptr, size_t bytes, int device, cudaStream_t stream);
 * with no user pointer, so each TorchPool takes one of CPOOL_TORCH_SLOTS
 * slots and gives torch that slot's pair (cpool_torch_alloc_<n>,
 * cpool_torch_free_<n>). A slot holds a reference to its capture pool and
 * one to its device, and the cpool_stream wrapping each cudaStream_t torch
 * passes (wrapped once, kept until the slot ends). On the host backend,
 * which has no CUDA streams, a stream of the slot's own serves every call,
 * so the shim can be tested without a GPU.
 *
 * A slot's life: cpool_torch_bind takes it; cpool_torch_unbind lets it go
 * once torch has given every segment back (torch frees a pool's segments
 * only when it empties its cache or ends the MemPool, which may come after
 * the TorchPool closed): the pool reference goes with the last free.
 * Every entry point is thread-safe (one mutex per slot). No CUDA header:
 * streams are void *.
 *
 * A torch graph's capture (torch.cuda.graph begins it on its stream): the
 * slot attaches its pool to the cpool_stream wrapping that stream (the one
 * its allocations go through: cpool_torch_attach), so that the segments
 * torch takes under the capture are graph memory of an arena of its own.
 * Before the detach, the segments in which torch holds no live tensor are
 * freed in the capture (cpool_torch_scratch): scratch, on pages shared with
 * the pool's other graphs. Torch still caches them for that graph's
 * private pool, and frees them one day: that free is dropped here (the
 * slot's list of released segments). docs/PYTHON.md, "Graphs that share
 * pages".
 *
 * A graph's small outputs (TorchPool.output) bypass torch's caching
 * allocator, which would round each into a 2 MiB segment: a block of
 * exactly their size from the packed region (cpool_torch_output), handed
 * to torch as a DLPack tensor whose deleter frees it.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "capturepool.h"

#if defined(__GNUC__)
#define CPOOL_TORCH_API __attribute__((visibility("default")))
#else
#define CPOOL_TORCH_API
#endif

#define CPOOL_TORCH_SLOTS 16
#define CPOOL_TORCH_STREAMS 64

typedef struct torch_slot {
    pthread_mutex_t mu;
    cpool_pool *pool;     /* the slot's reference; NULL when free */
    cpool_device *dev;    /* the slot's own reference */
    cpool_stream *own;    /* the host backend's stream, made on first use */
    cpool_backend backend; /* the device's, for the outputs' DLPack device */
    bool unbinding;       /* unbind asked: the slot ends with the last free */
    int status;           /* the last failure of alloc or free, 0 if none */
    uint64_t live, allocs, frees, failures;
    struct {
        void *native;
        cpool_stream *s;
    } streams[CPOOL_TORCH_STREAMS];
    int nstreams;
    /* Segments freed in a capture as scratch while torch still caches
     * them: torch's own free of each later is dropped. */
    void **released;
    size_t nreleased, released_cap;
} torch_slot;

static torch_slot slots[CPOOL_TORCH_SLOTS];
static pthread_once_t slots_once = PTHREAD_ONCE_INIT;

static void slots_init(void) {
    for (int i = 0; i < CPOOL_TORCH_SLOTS; i++) pthread_mutex_init(&slots[i].mu, NULL);
}

static torch_slot *slot_at(int slot) {
    pthread_once(&slots_once, slots_init);
    return slot >= 0 && slot < CPOOL_TORCH_SLOTS ? &slots[slot] : NULL;
}

/* The cpool_stream for `native`, wrapped on first use; under the slot's lock. */
static cpool_stream *slot_stream(torch_slot *t, void *native) {
    for (int i = 0; i < t->nstreams; i++)
        if (t->streams[i].native == native) return t->streams[i].s;
    cpool_stream *s = NULL;
    cpool_status st = cpool_stream_wrap(t->dev, native, &s);
    if (st == CPOOL_ERR_UNSUPPORTED) { /* host backend */
        if (!t->own && cpool_stream_create(t->dev, &t->own) != CPOOL_OK) return NULL;
        return t->own;
    }
    if (st != CPOOL_OK) return NULL;
    if (t->nstreams == CPOOL_TORCH_STREAMS) { /* a full table: forget the oldest */
        cpool_stream_destroy(t->streams[0].s);
        for (int i = 1; i < t->nstreams; i++) t->streams[i - 1] = t->streams[i];
        t->nstreams--;
    }
    t->streams[t->nstreams].native = native;
    t->streams[t->nstreams].s = s;
    t->nstreams++;
    return s;
}

/* Ends the slot's references; under its lock. Returns the pool to release
 * (after the lock: a last release waits for the device). */
static cpool_pool *slot_clear(torch_slot *t, cpool_device **dev_out) {
    free(t->released);
    t->released = NULL;
    t->nreleased = t->released_cap = 0;
    for (int i = 0; i < t->nstreams; i++) cpool_stream_destroy(t->streams[i].s);
    t->nstreams = 0;
    cpool_stream_destroy(t->own);
    t->own = NULL;
    cpool_pool *pool = t->pool;
    *dev_out = t->dev;
    t->pool = NULL;
    t->dev = NULL;
    t->unbinding = false;
    return pool;
}

CPOOL_TORCH_API int cpool_torch_slot_count(void) { return CPOOL_TORCH_SLOTS; }

/* Binds `slot` to `pool` (a reference of the slot's own) on device
 * (backend, ordinal). Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (no such
 * slot, a slot in use, a dead pool) or the status of cpool_device_open. */
CPOOL_TORCH_API int cpool_torch_bind(int slot, cpool_pool *pool, int backend, int ordinal) {
    torch_slot *t = slot_at(slot);
    if (!t || !pool) return CPOOL_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&t->mu);
    int st = CPOOL_OK;
    if (t->pool) {
        st = CPOOL_ERR_INVALID_ARGUMENT;
    } else if ((st = cpool_device_open((cpool_backend)backend, ordinal, &t->dev)) == CPOOL_OK) {
        t->pool = cpool_pool_retain(pool);
        if (!t->pool) {
            cpool_device_close(t->dev);
            t->dev = NULL;
            st = CPOOL_ERR_INVALID_ARGUMENT;
        }
    }
    if (st == CPOOL_OK) {
        t->status = 0, t->live = t->allocs = t->frees = t->failures = 0;
        t->backend = cpool_device_backend(t->dev);
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}

/* Lets the slot go: now if torch holds none of its segments, else with the
 * last free. Returns the segments torch still holds. */
CPOOL_TORCH_API uint64_t cpool_torch_unbind(int slot) {
    torch_slot *t = slot_at(slot);
    if (!t) return 0;
    cpool_pool *pool = NULL;
    cpool_device *dev = NULL;
    pthread_mutex_lock(&t->mu);
    uint64_t live = t->live;
    if (t->pool) {
        if (live == 0)
            pool = slot_clear(t, &dev);
        else
            t->unbinding = true;
    }
    pthread_mutex_unlock(&t->mu);
    cpool_pool_release(pool);
    cpool_device_close(dev);
    return live;
}

/* Whether the slot is taken (bound, or unbinding with segments out). */
CPOOL_TORCH_API bool cpool_torch_slot_busy(int slot) {
    torch_slot *t = slot_at(slot);
    if (!t) return false;
    pthread_mutex_lock(&t->mu);
    bool busy = t->pool != NULL;
    pthread_mutex_unlock(&t->mu);
    return busy;
}

/* counts[0..4]: live segments, allocs, frees, failed calls, last failure's status. */
CPOOL_TORCH_API void cpool_torch_counts(int slot, uint64_t counts[5]) {
    torch_slot *t = slot_at(slot);
    if (!t || !counts) return;
    pthread_mutex_lock(&t->mu);
    counts[0] = t->live, counts[1] = t->allocs, counts[2] = t->frees, counts[3] = t->failures;
    counts[4] = (uint64_t)t->status;
    pthread_mutex_unlock(&t->mu);
}

/* `output`: the block is a graph's output (cpool_alloc_output: under an
 * attached capture, from the packed region that no graph's scratch
 * shares). Returns the status; *ptr is NULL on failure. */
static int slot_take(int slot, size_t bytes, void *stream, bool output, void **ptr) {
    torch_slot *t = slot_at(slot);
    *ptr = NULL;
    if (!t) return CPOOL_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&t->mu);
    int st = CPOOL_ERR_INVALID_ARGUMENT;
    if (t->pool && !t->unbinding) {
        cpool_stream *s = slot_stream(t, stream);
        st = !s        ? CPOOL_ERR_OUT_OF_MEMORY
             : output ? cpool_alloc_output(t->pool, bytes, s, ptr)
                      : cpool_alloc(t->pool, bytes, s, ptr);
    }
    if (st == CPOOL_OK) {
        t->live++, t->allocs++;
    } else {
        *ptr = NULL;
        t->failures++, t->status = st;
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}

static void *slot_alloc(int slot, size_t bytes, int device, void *stream) {
    (void)device; /* the slot's pool is on one device; torch asks on it */
    void *ptr;
    slot_take(slot, bytes, stream, false, &ptr);
    return ptr; /* torch takes NULL for out of memory */
}

static void slot_free(int slot, void *ptr, size_t bytes, int device, void *stream) {
    (void)bytes, (void)device;
    torch_slot *t = slot_at(slot);
    cpool_pool *pool = NULL;
    cpool_device *dev = NULL;
    pthread_mutex_lock(&t->mu);
    int st = CPOOL_ERR_INVALID_ARGUMENT;
    size_t r = 0;
    while (r < t->nreleased && t->released[r] != ptr) r++;
    if (t->pool && ptr && r < t->nreleased) { /* freed as scratch already */
        t->released[r] = t->released[--t->nreleased];
        st = CPOOL_OK;
    } else if (t->pool && ptr) {
        cpool_stream *s = slot_stream(t, stream);
        st = s ? cpool_free(t->pool, ptr, s) : CPOOL_ERR_OUT_OF_MEMORY;
    }
    if (st == CPOOL_OK) {
        t->frees++;
        if (--t->live == 0 && t->unbinding) pool = slot_clear(t, &dev);
    } else {
        t->failures++, t->status = st;
    }
    pthread_mutex_unlock(&t->mu);
    cpool_pool_release(pool);
    cpool_device_close(dev);
}

/* Attaches the slot's pool to the capture that torch began on `native`
 * (cpool_capture_attach on the stream the slot's allocations go through).
 * Returns its status; CPOOL_ERR_UNSUPPORTED on the host backend, whose
 * streams the slot does not wrap. */
CPOOL_TORCH_API int cpool_torch_attach(int slot, void *native) {
    torch_slot *t = slot_at(slot);
    if (!t) return CPOOL_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&t->mu);
    int st = CPOOL_ERR_INVALID_ARGUMENT;
    if (t->pool && !t->unbinding) {
        cpool_stream *s = slot_stream(t, native);
        st = !s ? CPOOL_ERR_OUT_OF_MEMORY : s == t->own ? CPOOL_ERR_UNSUPPORTED : cpool_capture_attach(s, t->pool);
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}

/* Frees `ptr`, a segment torch took under the attached capture on `native`
 * and holds no live block in, in that capture (scratch); torch's own free
 * of it later is dropped. */
CPOOL_TORCH_API int cpool_torch_scratch(int slot, void *native, void *ptr) {
    torch_slot *t = slot_at(slot);
    if (!t || !ptr) return CPOOL_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&t->mu);
    int st = CPOOL_ERR_INVALID_ARGUMENT;
    if (t->pool) {
        cpool_stream *s = slot_stream(t, native);
        st = s ? CPOOL_OK : CPOOL_ERR_OUT_OF_MEMORY;
        if (st == CPOOL_OK && t->nreleased == t->released_cap) {
            size_t cap = t->released_cap ? 2 * t->released_cap : 16;
            void **grown = realloc(t->released, cap * sizeof *grown);
            if (grown) t->released = grown, t->released_cap = cap;
            else st = CPOOL_ERR_OUT_OF_MEMORY;
        }
        if (st == CPOOL_OK) st = cpool_free(t->pool, ptr, s);
        if (st == CPOOL_OK) t->released[t->nreleased++] = ptr;
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}

/* Says that [offset, offset + bytes) of segment `ptr`, which torch took
 * under the attached capture on `native` and still holds tensors in, is
 * scratch (an inactive block of torch's): its whole pages stay shared
 * (cpool_capture_note_scratch). */
CPOOL_TORCH_API int cpool_torch_note_scratch(int slot, void *native, void *ptr, size_t offset, size_t bytes) {
    torch_slot *t = slot_at(slot);
    if (!t || !ptr) return CPOOL_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&t->mu);
    int st = CPOOL_ERR_INVALID_ARGUMENT;
    if (t->pool) {
        cpool_stream *s = slot_stream(t, native);
        st = s ? cpool_capture_note_scratch(s, t->pool, ptr, offset, bytes) : CPOOL_ERR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}

/* Detaches the slot's pool from the capture on `native` before torch ends
 * it: *hold_out holds the graph's memory (cpool_capture_detach). */
CPOOL_TORCH_API int cpool_torch_detach(int slot, void *native, cpool_graph **hold_out) {
    torch_slot *t = slot_at(slot);
    if (!t || !hold_out) return CPOOL_ERR_INVALID_ARGUMENT;
    *hold_out = NULL;
    pthread_mutex_lock(&t->mu);
    int st = CPOOL_ERR_INVALID_ARGUMENT;
    if (t->pool) {
        cpool_stream *s = slot_stream(t, native);
        st = s ? cpool_capture_detach(s, hold_out) : CPOOL_ERR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}

/* ---- outputs handed to torch as tensors of their own -------------------- */

/* DLPack's C ABI (dlpack.h, unchanged since v0.2): what torch.from_dlpack
 * reads from a "dltensor" capsule. Only the fields used here. */
enum { DL_CPU = 1, DL_CUDA = 2, DL_UINT = 1 };
typedef struct dl_tensor {
    void *data;
    struct {
        int32_t device_type, device_id;
    } device;
    int32_t ndim;
    struct {
        uint8_t code, bits;
        uint16_t lanes;
    } dtype;
    int64_t *shape, *strides; /* strides NULL: compact, row-major */
    uint64_t byte_offset;
} dl_tensor;
typedef struct dl_managed {
    dl_tensor tensor;
    void *manager_ctx;
    void (*deleter)(struct dl_managed *self);
} dl_managed;

/* An output block and its DLPack description; torch calls the deleter
 * when the last tensor over the block goes. */
typedef struct output_block {
    dl_managed dl; /* first: the deleter gets this */
    int64_t bytes;
    int slot;
    void *stream;
} output_block;

static void output_delete(dl_managed *m) {
    output_block *o = (output_block *)m;
    slot_free(o->slot, o->dl.tensor.data, (size_t)o->bytes, o->dl.tensor.device.device_id, o->stream);
    free(o);
}

/* Allocates `bytes` for a graph's output with cpool_alloc_output on
 * `stream` (under an attached capture: packed with the other graphs'
 * outputs, exactly its size, where torch's caching allocator would take
 * a 2 MiB segment) and describes it as a DLPack tensor of `bytes` uint8
 * on `device` (*dl_out, a dl_managed). Its deleter frees the block on
 * `stream`; a packed output of a graph that lives stays that graph's
 * until its release (cpool_free). Returns CPOOL_OK or the status of the
 * allocation (cpool_last_error says more); *dl_out NULL on failure. */
CPOOL_TORCH_API int cpool_torch_output(int slot, size_t bytes, int device, void *stream, void **dl_out) {
    if (!dl_out) return CPOOL_ERR_INVALID_ARGUMENT;
    *dl_out = NULL;
    output_block *o = calloc(1, sizeof *o);
    if (!o) return CPOOL_ERR_OUT_OF_MEMORY;
    void *ptr;
    int st = slot_take(slot, bytes, stream, true, &ptr);
    if (st != CPOOL_OK) {
        free(o);
        return st;
    }
    const torch_slot *t = slot_at(slot);
    o->bytes = (int64_t)bytes;
    o->slot = slot;
    o->stream = stream;
    o->dl.tensor = (dl_tensor){.data = ptr,
                               .device = {t->backend == CPOOL_BACKEND_HOST ? DL_CPU : DL_CUDA, device},
                               .ndim = 1,
                               .dtype = {DL_UINT, 8, 1},
                               .shape = &o->bytes};
    o->dl.manager_ctx = o;
    o->dl.deleter = output_delete;
    *dl_out = &o->dl;
    return CPOOL_OK;
}

/* Frees an output that no tensor took (its capsule was never consumed). */
CPOOL_TORCH_API void cpool_torch_output_drop(void *dl) {
    dl_managed *m = dl;
    if (m && m->deleter) m->deleter(m);
}

/* The entry points, one pair per slot. */
#define CPOOL_TORCH_PAIR(n)                                                                                  \
    CPOOL_TORCH_API void *cpool_torch_alloc_##n(size_t bytes, int device, void *stream) {                    \
        return slot_alloc(n, bytes, device, stream);                                                         \
    }                                                                                                        \
    CPOOL_TORCH_API void cpool_torch_free_##n(void *ptr, size_t bytes, int device, void *stream) {           \
        slot_free(n, ptr, bytes, device, stream);                                                            \
    }
CPOOL_TORCH_PAIR(0)
CPOOL_TORCH_PAIR(1)
CPOOL_TORCH_PAIR(2)
CPOOL_TORCH_PAIR(3)
CPOOL_TORCH_PAIR(4)
CPOOL_TORCH_PAIR(5)
CPOOL_TORCH_PAIR(6)
CPOOL_TORCH_PAIR(7)
CPOOL_TORCH_PAIR(8)
CPOOL_TORCH_PAIR(9)
CPOOL_TORCH_PAIR(10)
CPOOL_TORCH_PAIR(11)
CPOOL_TORCH_PAIR(12)
CPOOL_TORCH_PAIR(13)
CPOOL_TORCH_PAIR(14)
CPOOL_TORCH_PAIR(15)
