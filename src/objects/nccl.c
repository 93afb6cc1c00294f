/*
 * Pools registered with an NCCL communicator (capturepool_nccl.h).
 *
 * A registrar (internal.h) keeps one NCCL registration per segment: made
 * when the segment is taken, before any block of it is handed out, and
 * dropped before the segment goes back to the device. The pool calls it
 * under its lock, so the registrations need no lock of their own; only the
 * count is read from other threads.
 *
 * NCCL is loaded on first use with dlopen, so nothing links it: NCCL's
 * functions are looked up by name and called through the table below, which
 * tests replace (nccl_calls.h) to run all of this on the host backend.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "capturepool_nccl.h"
#include "internal.h"
#include "nccl_calls.h"

/* ---- NCCL's functions ---------------------------------------------------- */

static cpool__nccl_calls nccl_own;   /* from the library, or NULL entries */
static const cpool__nccl_calls *nccl_replaced; /* a test's */
static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;
static char nccl_load_error[256];

static void nccl_load(void) {
    const char *path = getenv("CPOOL_NCCL_LIBRARY");
    void *lib = dlopen(path && *path ? path : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(nccl_load_error, sizeof nccl_load_error, "%s", why ? why : "dlopen failed");
        return;
    }
    nccl_own.comm_register = (int (*)(struct ncclComm *, void *, size_t, void **))dlsym(lib, "ncclCommRegister");
    nccl_own.comm_deregister = (int (*)(struct ncclComm *, void *))dlsym(lib, "ncclCommDeregister");
    nccl_own.error_string = (const char *(*)(int))dlsym(lib, "ncclGetErrorString");
    if (!nccl_own.comm_register || !nccl_own.comm_deregister || !nccl_own.error_string) {
        snprintf(nccl_load_error, sizeof nccl_load_error, "the NCCL library has no ncclCommRegister "
                                                          "(user-buffer registration needs NCCL 2.19 or later)");
        memset(&nccl_own, 0, sizeof nccl_own);
    }
}

void cpool__nccl_use_calls(const cpool__nccl_calls *calls) { nccl_replaced = calls; }

/* The calls to make, or NULL with the reason in nccl_load_error. */
static const cpool__nccl_calls *nccl_calls(void) {
    if (nccl_replaced) return nccl_replaced;
    pthread_once(&nccl_once, nccl_load);
    return nccl_own.comm_register ? &nccl_own : NULL;
}

/* ---- the registrar ------------------------------------------------------- */

typedef struct registration {
    void *base;
    void *handle;
} registration;

typedef struct nccl_registrar {
    const cpool__nccl_calls *calls;
    struct ncclComm *comm;
    cpool_device *dev;
    registration *list;
    size_t count, cap;
    atomic_size_t live; /* count, for readers on other threads */
} nccl_registrar;

/* One NCCL call with the capture mode relaxed: a segment can be taken while
 * a capture runs, and NCCL's own CUDA calls must not join or break it. */
typedef struct nccl_call {
    nccl_registrar *r;
    void *base;
    size_t bytes;
    void *handle;
    int result;
    bool deregister;
} nccl_call;

static cpool_status run_call(void *arg) {
    nccl_call *c = arg;
    c->result = c->deregister ? c->r->calls->comm_deregister(c->r->comm, c->handle)
                              : c->r->calls->comm_register(c->r->comm, c->base, c->bytes, &c->handle);
    return CPOOL_OK;
}

static void call_nccl(nccl_call *c) {
    const cpool__backend *be = c->r->dev->be;
    if (be->call_relaxed(c->r->dev->impl, run_call, c) != CPOOL_OK) c->result = -1;
}

static cpool_status registrar_add(void *ctx, void *base, size_t bytes) {
    nccl_registrar *r = ctx;
    if (r->count == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 16;
        registration *list = cpool__realloc(r->list, cap * sizeof *list);
        if (!list) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for an NCCL registration");
        r->list = list;
        r->cap = cap;
    }
    nccl_call c = {.r = r, .base = base, .bytes = bytes};
    call_nccl(&c);
    if (c.result != 0)
        return cpool__fail(CPOOL_ERR_BACKEND, "ncclCommRegister of a %zu-byte segment: %s", bytes,
                           c.result > 0 ? r->calls->error_string(c.result) : "the device could not be made current");
    r->list[r->count++] = (registration){base, c.handle};
    atomic_store(&r->live, r->count);
    return CPOOL_OK;
}

static void registrar_remove(void *ctx, void *base, size_t bytes) {
    nccl_registrar *r = ctx;
    (void)bytes;
    for (size_t i = 0; i < r->count; i++)
        if (r->list[i].base == base) {
            nccl_call c = {.r = r, .handle = r->list[i].handle, .deregister = true};
            call_nccl(&c); /* a failure leaves nothing to do: the memory goes anyway */
            r->list[i] = r->list[--r->count];
            atomic_store(&r->live, r->count);
            return;
        }
}

static void registrar_release(void *ctx) {
    nccl_registrar *r = ctx;
    free(r->list);
    free(r);
}

/* ---- the API ------------------------------------------------------------- */

cpool_status cpool_nccl_pool_create(cpool_device *dev_handle, struct ncclComm *comm, const cpool_pool_options *opts,
                                    cpool_pool **out) {
    cpool_device *dev;
    CPOOL__RESOLVE_OPEN_DEVICE(dev, dev_handle, "cpool_nccl_pool_create");
    if (!comm || !out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_nccl_pool_create: NULL argument");
    const cpool__nccl_calls *calls = nccl_calls();
    if (!calls)
        return cpool__fail(CPOOL_ERR_UNSUPPORTED, "cpool_nccl_pool_create: NCCL could not be loaded: %s",
                           nccl_load_error);
    if (calls == &nccl_own && dev->be->kind != CPOOL_BACKEND_CUDA)
        return cpool__fail(CPOOL_ERR_UNSUPPORTED, "cpool_nccl_pool_create: NCCL needs a CUDA device, not the %s backend",
                           dev->be->name);
    nccl_registrar *r = cpool__calloc(1, sizeof *r);
    if (!r) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "cpool_nccl_pool_create: out of host memory");
    r->calls = calls;
    r->comm = comm;
    r->dev = dev;
    cpool__registrar reg = {registrar_add, registrar_remove, registrar_release, r};
    cpool_status st = cpool__pool_create_registered(dev_handle, opts, &reg, out);
    if (st != CPOOL_OK) registrar_release(r); /* every add had its remove */
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_nccl_pool_create", st);
}

size_t cpool_nccl_registration_count(const cpool_pool *pool) {
    const cpool__registrar *reg = cpool__pool_registrar(pool, "cpool_nccl_registration_count");
    if (!reg || reg->add != registrar_add) return 0;
    return atomic_load(&((const nccl_registrar *)reg->ctx)->live);
}
