/*
 * Checked handles and the slabs behind them (see handle.h).
 */
#include <stdlib.h>
#include <string.h>

#include "handle.h"
#include "fault.h"
#include "status.h"

#define GENERATION_MAX CPOOL__HANDLE_GENERATION_MASK

/* What each type is called in messages, with its article. */
static const char *type_name(uint32_t type) {
    switch (type) {
    case CPOOL__HANDLE_DEVICE: return "a device";
    case CPOOL__HANDLE_STREAM: return "a stream";
    case CPOOL__HANDLE_EVENT: return "an event";
    case CPOOL__HANDLE_POOL: return "a pool";
    case CPOOL__HANDLE_GRAPH: return "a graph";
    case CPOOL__HANDLE_PARAM: return "a parameter block";
    case CPOOL__HANDLE_GRAPH_CACHE: return "a graph cache";
    default: return NULL;
    }
}

cpool_status cpool__handle_fail(const void *handle, cpool__handle_type type, const char *fn, const char *what) {
    if (!handle) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, what);
    if (!cpool__handle_plausible((uintptr_t)handle))
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT,
                           "%s: %s %p is not a handle of capturepool (every handle carries a generation in its top "
                           "16 bits over an aligned address: this is a plain address, a small number or garbage)",
                           fn, what, handle);
    /* The compare that refused the handle read this word already (unless
     * its address is 0): a handle of the library points at a header, of
     * whatever type. */
    uintptr_t v = (uintptr_t)handle;
    const cpool__handle_header *h = (const cpool__handle_header *)(v & CPOOL__HANDLE_ADDR_MASK);
    uint32_t word = h ? atomic_load_explicit(&h->word, memory_order_acquire) : 0;
    uint32_t gen = (uint32_t)(v >> CPOOL__HANDLE_SHIFT);
    uint32_t its_type = (word & ~CPOOL__HANDLE_RETIRED) >> CPOOL__HANDLE_TYPE_SHIFT;
    if (gen != 0 && (word & CPOOL__HANDLE_GENERATION_MASK) == gen && !(word & CPOOL__HANDLE_RETIRED) &&
        its_type != (uint32_t)type && type_name(its_type))
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: %s is %s handle, not %s", fn, what, type_name(its_type),
                           type_name(type));
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
    uint32_t word = cpool__handle_word(slab->type, 1);
    if (object) {
        word = atomic_load_explicit(&((cpool__handle_header *)object)->word, memory_order_relaxed);
    } else {
        object = cpool__malloc(slab->object_size);
        if (!object) return NULL;
        /* An address that does not fit beside a generation, or that
         * cpool__handle_plausible would refuse, cannot be a handle: keep it
         * out of use. */
        if (!cpool__handle_plausible((uintptr_t)object | ((uintptr_t)1 << CPOOL__HANDLE_SHIFT)) ||
            ((uintptr_t)object & ~CPOOL__HANDLE_ADDR_MASK)) {
            free(object);
            return NULL;
        }
    }
    /* The header is left to its atomic store: a stale handle's check may
     * read it on another thread right now. */
    memset((char *)object + sizeof(cpool__handle_header), 0, slab->object_size - sizeof(cpool__handle_header));
    atomic_store_explicit(&((cpool__handle_header *)object)->word, word, memory_order_release);
    return object;
}

/* The word of the object's next handle: the type stays, the generation
 * moves on, or the slot retires. */
static uint32_t next_word(uint32_t word) {
    return (word & CPOOL__HANDLE_GENERATION_MASK) >= GENERATION_MAX ? word | CPOOL__HANDLE_RETIRED : word + 1;
}

void cpool__handle_kill(void *object) {
    _Atomic uint32_t *w = &((cpool__handle_header *)object)->word;
    atomic_store_explicit(w, next_word(atomic_load_explicit(w, memory_order_relaxed)), memory_order_release);
}

void *cpool__handle_end(const void *handle, cpool__handle_type type) {
    uintptr_t v = (uintptr_t)handle;
    cpool__handle_header *h = (cpool__handle_header *)(v & CPOOL__HANDLE_ADDR_MASK);
    uint32_t gen = (uint32_t)(v >> CPOOL__HANDLE_SHIFT);
    if (!cpool__handle_plausible(v)) return NULL; /* read nothing at it */
    uint32_t word = cpool__handle_word(type, gen);
    return atomic_compare_exchange_strong_explicit(&h->word, &word, next_word(word), memory_order_acq_rel,
                                                   memory_order_relaxed)
               ? h
               : NULL;
}

void cpool__slab_give(cpool__slab *slab, void *object) {
    bool spent = atomic_load_explicit(&((cpool__handle_header *)object)->word, memory_order_relaxed) &
                 CPOOL__HANDLE_RETIRED;
    cpool__mutex_lock(&slab->mu);
    void **list = spent ? &slab->retired : &slab->free_list;
    *slot_link(object) = *list;
    *list = object;
    cpool__mutex_unlock(&slab->mu);
}
