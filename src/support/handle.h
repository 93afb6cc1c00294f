/*
 * Checked handles: what the public API hands out for devices, streams,
 * events, pools, graphs, parameter blocks and graph caches.
 *
 * A handle is the object's address with a 16-bit generation in its top 16
 * bits (user-space addresses fit in 48 bits). Every object of these types
 * begins with a cpool__handle_header holding its type and the generation of
 * its live handle in one word. Ending the object bumps the generation, so
 * the old handle no longer matches, and the object's memory goes back to its
 * type's slab, never to the system allocator: a stale handle always points
 * at memory that still holds a header of its type, and a new object made in
 * that memory has a handle of a new generation. A slot whose generation
 * would wrap is retired, so a dead handle is never taken for a live one.
 *
 * Checking a handle is one load and one compare on the object's first cache
 * line, which the call reads anyway: the word must hold both the type the
 * call takes and the handle's generation, so a live handle of another type
 * (a void * or a wrong cast away) is refused like a dead one, and told apart
 * from it only on the way out.
 */
#ifndef CPOOL_HANDLE_H
#define CPOOL_HANDLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "capturepool.h"
#include "lock.h"

_Static_assert(sizeof(void *) == 8, "checked handles need 64-bit pointers");

#define CPOOL__HANDLE_SHIFT 48
#define CPOOL__HANDLE_ADDR_MASK (((uintptr_t)1 << CPOOL__HANDLE_SHIFT) - 1)

/* What a handle names; 0 names nothing (what a word of memory that holds no
 * header may read). */
typedef enum cpool__handle_type {
    CPOOL__HANDLE_DEVICE = 1,
    CPOOL__HANDLE_STREAM,
    CPOOL__HANDLE_EVENT,
    CPOOL__HANDLE_POOL,
    CPOOL__HANDLE_GRAPH,
    CPOOL__HANDLE_PARAM,
    CPOOL__HANDLE_GRAPH_CACHE,
} cpool__handle_type;

/* A header's word: the generation of the live handle in bits 0-15 (1 to
 * 0xFFFF), the type in bits 16-23, and bit 31 once the slot is retired (its
 * word then names no handle). */
#define CPOOL__HANDLE_GENERATION_MASK ((uint32_t)0xFFFF)
#define CPOOL__HANDLE_TYPE_SHIFT 16
#define CPOOL__HANDLE_RETIRED ((uint32_t)1 << 31)

typedef struct cpool__handle_header {
    _Atomic uint32_t word; /* type and generation, as above */
} cpool__handle_header;

/* The word of a live `type` object whose handle carries `generation`. */
static inline uint32_t cpool__handle_word(cpool__handle_type type, uint32_t generation) {
    return (uint32_t)type << CPOOL__HANDLE_TYPE_SHIFT | generation;
}

/* The public handle of a live object. */
static inline void *cpool__handle_of(const void *object) {
    const cpool__handle_header *h = (const cpool__handle_header *)object;
    uint64_t gen = atomic_load_explicit(&h->word, memory_order_relaxed) & CPOOL__HANDLE_GENERATION_MASK;
    return (void *)((uintptr_t)object | (uintptr_t)(gen << CPOOL__HANDLE_SHIFT));
}

/* Objects start 16-byte aligned (malloc), above the lowest 64 KiB, which no
 * process maps. */
#define CPOOL__HANDLE_ALIGN_MASK ((uintptr_t)15)
#define CPOOL__HANDLE_LOWEST ((uintptr_t)1 << 16)

/* Whether a value can be a handle at all, told without reading memory: a
 * generation (never 0) in the top 16 bits, over an aligned address above
 * the lowest 64 KiB. NULL, small integers and plain addresses (a pointer
 * to anything else, or a handle's value lost its top bits) are not. */
static inline bool cpool__handle_plausible(uintptr_t v) {
    return (v >> CPOOL__HANDLE_SHIFT) != 0 && !(v & CPOOL__HANDLE_ALIGN_MASK) &&
           (v & CPOOL__HANDLE_ADDR_MASK) >= CPOOL__HANDLE_LOWEST;
}

/* The `type` object behind a handle, or NULL when the handle is NULL, not
 * a handle at all (cpool__handle_plausible: refused before any read),
 * dead, or of another type. */
static inline void *cpool__handle_object(const void *handle, cpool__handle_type type) {
    uintptr_t v = (uintptr_t)handle;
    cpool__handle_header *h = (cpool__handle_header *)(v & CPOOL__HANDLE_ADDR_MASK);
    if (__builtin_expect(!cpool__handle_plausible(v), 0)) return NULL;
    uint32_t want = cpool__handle_word(type, (uint32_t)(v >> CPOOL__HANDLE_SHIFT));
    if (__builtin_expect(atomic_load_explicit(&h->word, memory_order_acquire) != want, 0)) return NULL;
    return h;
}

/* Why cpool__handle_object(handle, type) gave NULL, into
 * cpool_last_error(): "fn: what is NULL", "fn: what ... is not a handle
 * (...)", "fn: what is a stream handle, not a pool", or "fn: what is a dead
 * handle (...)". Returns CPOOL_ERR_INVALID_ARGUMENT. */
cpool_status cpool__handle_fail(const void *handle, cpool__handle_type type, const char *fn, const char *what);

/* Resolves a `type` handle into `var` (declared by the caller), or returns
 * CPOOL_ERR_INVALID_ARGUMENT from the calling function with the reason. */
#define CPOOL__RESOLVE(var, handle, type, fn, what)                                                \
    do {                                                                                           \
        (var) = cpool__handle_object((handle), (type));                                            \
        if (!(var)) return cpool__handle_fail((handle), (type), (fn), (what));                     \
    } while (0)

/* As CPOOL__RESOLVE, for functions that return nothing: a NULL handle is a
 * silent no-op, a dead one or one of another type leaves the reason. */
#define CPOOL__RESOLVE_VOID(var, handle, type, fn, what)                                           \
    do {                                                                                           \
        (var) = cpool__handle_object((handle), (type));                                            \
        if (!(var)) {                                                                              \
            if (handle) cpool__handle_fail((handle), (type), (fn), (what));                        \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* As CPOOL__RESOLVE, for functions that return a value: `var` is NULL when
 * the handle is not a live `type` one, with the reason noted unless the
 * handle is NULL. */
#define CPOOL__RESOLVE_OR_NULL(var, handle, type, fn, what)                                        \
    do {                                                                                           \
        (var) = cpool__handle_object((handle), (type));                                            \
        if (!(var) && (handle)) cpool__handle_fail((handle), (type), (fn), (what));                \
    } while (0)

/* Memory for objects of one type and size, recycled by type and never
 * given back to the system. */
typedef struct cpool__slab {
    cpool__mutex mu;
    cpool__handle_type type;
    size_t object_size;
    void *free_list; /* linked through the word after the header */
    void *retired;   /* slots whose generation ran out, kept reachable */
} cpool__slab;

#define CPOOL__SLAB_INIT(object_type, handle_type)                                                 \
    {CPOOL__MUTEX_INIT(CPOOL__RANK_SLAB), (handle_type), sizeof(object_type), NULL, NULL}

/* A zeroed object whose header names the slab's type and a fresh generation, or NULL (out of
 * host memory). */
void *cpool__slab_take(cpool__slab *slab);
/* Makes every handle of the object dead; its memory stays the caller's.
 * For objects whose end is decided elsewhere (a reference count at zero). */
void cpool__handle_kill(void *object);
/* Ends the live `type` handle: its generation moves on, once, atomically.
 * Returns the object, or NULL when the handle is NULL, dead or of another
 * type, also when another thread ended it first: for the functions that end
 * a handle directly (a stream's or an event's destroy), so that two racing
 * ends tear down once. */
void *cpool__handle_end(const void *handle, cpool__handle_type type);
/* Returns a killed object's memory to its slab. */
void cpool__slab_give(cpool__slab *slab, void *object);

#endif /* CPOOL_HANDLE_H */
