/*
 * The host backend's memory (memory.c): its device, plain segments,
 * reserved address space and the pages mapped in it, for the table of
 * functions in backend.c.
 */
#ifndef CPOOL_HOST_MEMORY_H
#define CPOOL_HOST_MEMORY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/types.h>

#include "backend.h"
#include "lock.h"
#include "unit_table.h"

/* The host device, one per open device (objects/device.c shares it between
 * opens): a GPU of `capacity` bytes, which its pools hold `held` of
 * together. Reserved address space is not memory and is not counted. */
struct cpool__bdevice {
    uint64_t capacity; /* CPOOL_HOST_MEMORY, else the machine's physical memory */
    _Atomic uint64_t held;
    /* The memory file: graph pages are extents of it, so that one page
     * can be mapped at several addresses (memfd_create + MAP_SHARED), as
     * one CUDA allocation can. Freed extents are reused before it grows. */
    cpool__mutex file_mu; /* memfd, end, free */
    int memfd;            /* -1 until the first page */
    off_t end;
    struct host_extent *free;
    /* The units of growable segments (backend.h, pages_map), under file_mu:
     * the host maps any page alone, but models the GPU's rule that a unit
     * is given back only whole, so that the tests see its granularity. */
    cpool__unit_table units;
};

cpool_status cpool__host_device_open(int ordinal, cpool__bdevice **out);
void cpool__host_device_close(cpool__bdevice *dev);

cpool_status cpool__host_segment_alloc(cpool__bdevice *dev, size_t bytes, void **out);
void cpool__host_segment_free(cpool__bdevice *dev, void *base, size_t bytes);

bool cpool__host_va_supported(cpool__bdevice *dev);
cpool_status cpool__host_va_reserve(cpool__bdevice *dev, size_t bytes, void **out);
void cpool__host_va_release(cpool__bdevice *dev, void *base, size_t bytes);
cpool_status cpool__host_pages_map(cpool__bdevice *dev, void *addr, size_t bytes, bool joined);
void cpool__host_pages_unmap(cpool__bdevice *dev, void *addr, size_t bytes);
void cpool__host_pages_inside(cpool__bdevice *dev, uintptr_t *lo, uintptr_t *hi);

cpool_status cpool__host_mem_create(cpool__bdevice *dev, size_t bytes, cpool__bmem **out);
void cpool__host_mem_release(cpool__bdevice *dev, cpool__bmem *m);
cpool_status cpool__host_mem_map(cpool__bdevice *dev, void *addr, cpool__bmem *m);
void cpool__host_mem_unmap(cpool__bdevice *dev, void *addr, cpool__bmem *m);

/* Host memory for copies of the device's (a suspended pool's bytes): plain
 * memory, not counted against the device's, as pinned memory is not on a
 * GPU. */
cpool_status cpool__host_copy_alloc(cpool__bdevice *dev, size_t bytes, void **out);
void cpool__host_copy_free(cpool__bdevice *dev, void *p);

#endif /* CPOOL_HOST_MEMORY_H */
