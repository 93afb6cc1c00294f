/*
 * Checked handles and the slabs behind them (see handle.h).
 */
#include <stdlib.h>
#include <string.h>

#include "handle.h"
#include "fault.h"
#include "status.h"

#define GENERATION_MAX ((uint32_t)0xFFFF)
/* A retired slot's generation: no handle's 16 bits can name it. */
#define GENERATION_RETIRED ((uint32_t)0xFFFFFFFF)

cpool_status cpool__handle_fail(const void *handle, const char *fn, const char *what) {
    if (!handle) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, what);
    return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT,
                       "%s: %s %p is a dead handle (already released, destroyed or closed)", fn, what, handle);
}

/* The word after the header links free slots. */
static void **slot_link(void *object) { return (void **)((char *)object + sizeof(void *)); }

void *cpool__slab_take(cpool__slab *slab) {
    cpool__mutex_lock(&slab->mu);
    void *object = slab->free_list;
    if (object) slab->free_list = *slot_link(object);
    cpool__mutex_unlock(&slab->mu);
    uint32_t gen = 1;
    if (object) {
        gen = atomic_load_explicit(&((cpool__handle_header *)object)->generation, memory_order_relaxed);
    } else {
        object = cpool__malloc(slab->object_size);
        if (!object) return NULL;
        /* An address that does not fit beside a generation cannot be a
         * handle: keep it out of use. */
        if ((uintptr_t)object & ~CPOOL__HANDLE_ADDR_MASK) {
            free(object);
            return NULL;
        }
    }
    /* The header is left to its atomic store: a stale handle's check may
     * read it on another thread right now. */
    memset((char *)object + sizeof(cpool__handle_header), 0, slab->object_size - sizeof(cpool__handle_header));
    atomic_store_explicit(&((cpool__handle_header *)object)->generation, gen, memory_order_release);
    return object;
}

static uint32_t next_generation(uint32_t gen) { return gen >= GENERATION_MAX ? GENERATION_RETIRED : gen + 1; }

void cpool__handle_kill(void *object) {
    _Atomic uint32_t *g = &((cpool__handle_header *)object)->generation;
    atomic_store_explicit(g, next_generation(atomic_load_explicit(g, memory_order_relaxed)), memory_order_release);
}

void *cpool__handle_end(const void *handle) {
    uintptr_t v = (uintptr_t)handle;
    cpool__handle_header *h = (cpool__handle_header *)(v & CPOOL__HANDLE_ADDR_MASK);
    uint32_t gen = (uint32_t)(v >> CPOOL__HANDLE_SHIFT);
    if (!h || gen == 0) return NULL;
    return atomic_compare_exchange_strong_explicit(&h->generation, &gen, next_generation(gen), memory_order_acq_rel,
                                                   memory_order_relaxed)
               ? h
               : NULL;
}

void cpool__slab_give(cpool__slab *slab, void *object) {
    bool spent =
        atomic_load_explicit(&((cpool__handle_header *)object)->generation, memory_order_relaxed) == GENERATION_RETIRED;
    cpool__mutex_lock(&slab->mu);
    void **list = spent ? &slab->retired : &slab->free_list;
    *slot_link(object) = *list;
    *list = object;
    cpool__mutex_unlock(&slab->mu);
}
