/*
 * Versioned structs: the caller's struct_size against the library's sizeof.
 *
 * A public struct that grows at the end (cpool_pool_options, the stats)
 * starts with `size_t struct_size`, the size the caller was compiled with.
 * A struct smaller than the fields every version has is refused. An older
 * caller's smaller struct is read into a zeroed copy, so the fields it lacks
 * read as their defaults, and is filled only as far as it goes. A newer
 * caller's larger struct is accepted: the bytes past the library's struct
 * are neither read nor written.
 */
#ifndef CPOOL_STRUCT_SIZE_H
#define CPOOL_STRUCT_SIZE_H

#include <stddef.h>
#include <string.h>

#include "status.h"

/* The bytes of `type` up to and including `field`: the least struct_size a
 * function takes when every version has the fields up to `field`. */
#define CPOOL__SIZE_THROUGH(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

/* Returns from the calling function with CPOOL_ERR_INVALID_ARGUMENT and
 * "<what> <struct_size> is too small" when struct_size is below `least`;
 * `what` names the function and the struct ("cpool_pool_get_stats:
 * struct_size"). */
#define CPOOL__CHECK_STRUCT_SIZE(struct_size, least, what)                                                   \
    do {                                                                                                     \
        size_t given_ = (struct_size);                                                                       \
        if (given_ < (least))                                                                                \
            return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s %zu is too small", (what), given_);           \
    } while (0)

/* Copies the bytes that both the caller's struct of `struct_size` bytes and
 * the library's of `library_size` bytes have: into a zeroed library struct
 * on the way in (dst the library's, src the caller's), into the caller's on
 * the way out (dst the caller's, src the library's, filled). */
static inline void cpool__copy_struct(void *dst, const void *src, size_t struct_size, size_t library_size) {
    memcpy(dst, src, struct_size < library_size ? struct_size : library_size);
}

#endif /* CPOOL_STRUCT_SIZE_H */
