/*
 * The CUDA backend's virtual memory: growable segments, whose address range
 * is reserved and whose pages are mapped and unmapped one by one, and graph
 * pages (mem_create and its kin), driver allocations mapped whole at each
 * graph's address range that uses them. Their mappings are marked in the
 * reservations' page bitmaps, so that a peer connected later is granted
 * them too (peer.c); each new mapping is opened to the peers that may use
 * its device's memory already. The driver's calls are fetched through the
 * runtime, so nothing links the driver library.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "cuda_backend.h"
#include "cuda_driver.h"
#include "fault.h"
#include "lock.h"
#include "status.h"

/* cpool__cuda_may_use[o]: a bit for each device whose kernels may use o's
 * memory; set by peer.c under its peers_mu, read by a mapping under o's
 * mapped_mu (see grant_mapped there). */
_Atomic uint64_t cpool__cuda_may_use[MAX_PEERS];

/* ---- growable segments: the driver's virtual memory management ----------- */

/* Fetched through the runtime, as the capture path's (cuda_driver.h). */
static struct vmm_calls {
    CUresult (*reserve)(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags);
    CUresult (*release_range)(CUdeviceptr ptr, size_t size);
    CUresult (*create)(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                       unsigned long long flags);
    CUresult (*map)(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                    unsigned long long flags);
    CUresult (*unmap)(CUdeviceptr ptr, size_t size);
    CUresult (*set_access)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
    CUresult (*release)(CUmemGenericAllocationHandle h);
    CUresult (*granularity)(size_t *granularity, const CUmemAllocationProp *prop,
                            CUmemAllocationGranularity_flags option);
    CUresult (*attribute)(int *value, CUdevice_attribute attribute, CUdevice dev);
} vmm;
static pthread_once_t vmm_once = PTHREAD_ONCE_INIT;

static void vmm_load(void) {
    vmm.reserve = (CUresult(*)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))cpool__driver_entry(
        "cuMemAddressReserve");
    vmm.release_range = (CUresult(*)(CUdeviceptr, size_t))cpool__driver_entry("cuMemAddressFree");
    vmm.create = (CUresult(*)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                              unsigned long long))cpool__driver_entry("cuMemCreate");
    vmm.map = (CUresult(*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))
        cpool__driver_entry("cuMemMap");
    vmm.unmap = (CUresult(*)(CUdeviceptr, size_t))cpool__driver_entry("cuMemUnmap");
    vmm.set_access = (CUresult(*)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t))cpool__driver_entry(
        "cuMemSetAccess");
    vmm.release = (CUresult(*)(CUmemGenericAllocationHandle))cpool__driver_entry("cuMemRelease");
    vmm.granularity = (CUresult(*)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags))
        cpool__driver_entry("cuMemGetAllocationGranularity");
    vmm.attribute = (CUresult(*)(int *, CUdevice_attribute, CUdevice))cpool__driver_entry("cuDeviceGetAttribute");
}

static CUmemAllocationProp page_prop(const cpool__bdevice *dev) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev->ordinal;
    return prop;
}

/* Whether dev can back growable segments: every entry point, the device's
 * support, and a granularity that divides the allocator's page. */
bool cpool__cuda_vmm_probe(const cpool__bdevice *dev) {
    pthread_once(&vmm_once, vmm_load);
    if (!vmm.reserve || !vmm.release_range || !vmm.create || !vmm.map || !vmm.unmap || !vmm.set_access ||
        !vmm.release || !vmm.granularity || !vmm.attribute)
        return false;
    int supported = 0;
    size_t granularity = 0;
    CUmemAllocationProp prop = page_prop(dev);
    if (vmm.attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev->ordinal) !=
            CUDA_SUCCESS ||
        !supported)
        return false;
    return vmm.granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS && granularity &&
           CPOOL__PAGE_BYTES % granularity == 0;
}

/* The driver's result as the runtime's error of the same number. */
#define VMM_CALL(call) ((cudaError_t)(cpool__fault_hit() ? CUDA_ERROR_OUT_OF_MEMORY : (call)))

bool cpool__cuda_va_supported(cpool__bdevice *dev) { return dev->vmm && !cpool__virtual_memory_off(); }

/* A kept range of `pages` pages, listed again as a reservation, or NULL. */
static reservation *take_idle_range(cpool__bdevice *dev, size_t pages) {
    cpool__mutex_lock(&dev->mapped_mu);
    reservation *r = NULL;
    for (reservation **at = &dev->idle_ranges; *at; at = &(*at)->next)
        if ((*at)->pages == pages) {
            r = *at;
            *at = r->next;
            dev->idle_count--;
            r->next = dev->reservations;
            dev->reservations = r;
            break;
        }
    cpool__mutex_unlock(&dev->mapped_mu);
    return r;
}

cpool_status cpool__cuda_va_reserve(cpool__bdevice *dev, size_t bytes, void **out) {
    reservation *kept = take_idle_range(dev, bytes / CPOOL__PAGE_BYTES);
    if (kept) {
        *out = (void *)kept->base;
        return CPOOL_OK;
    }
    CUdeviceptr ptr = 0;
    cudaError_t err;
    GUARDED(err, dev, true, VMM_CALL(vmm.reserve(&ptr, bytes, CPOOL__PAGE_BYTES, 0, 0)));
    if (err == (cudaError_t)CUDA_ERROR_NOT_SUPPORTED) {
        cudaGetLastError();
        return cpool__fail(CPOOL_ERR_UNSUPPORTED, "the driver reserves no address space: plain segments instead");
    }
    if (err != cudaSuccess)
        return cpool__cuda_fail(err, "cuMemAddressReserve of a growable segment: out of memory here means that address "
                              "space ran out, not memory");
    size_t pages = bytes / CPOOL__PAGE_BYTES;
    reservation *r = cpool__malloc(sizeof *r);
    uint64_t *mapped = r ? cpool__calloc((pages + 63) / 64, sizeof *mapped) : NULL;
    if (!mapped) {
        free(r);
        GUARDED_QUIET(dev, (cudaError_t)vmm.release_range(ptr, bytes));
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory reserving a growable segment");
    }
    cpool__mutex_lock(&dev->mapped_mu);
    *r = (reservation){.base = ptr, .pages = pages, .mapped = mapped, .next = dev->reservations};
    dev->reservations = r;
    cpool__mutex_unlock(&dev->mapped_mu);
    *out = (void *)ptr;
    return CPOOL_OK;
}

/* A range nothing maps any more: kept for the next reservation of its size
 * while there is room (a few, none larger than CPOOL__CUDA_IDLE_RANGE_MAX),
 * else given back. */
void cpool__cuda_va_release(cpool__bdevice *dev, void *base, size_t bytes) {
    bool kept = false;
    cpool__mutex_lock(&dev->mapped_mu);
    for (reservation **at = &dev->reservations; *at; at = &(*at)->next)
        if ((*at)->base == (CUdeviceptr)base) {
            reservation *r = *at;
            *at = r->next;
            kept = dev->idle_count < CPOOL__CUDA_IDLE_RANGES && bytes <= CPOOL__CUDA_IDLE_RANGE_MAX;
            if (kept) {
                r->next = dev->idle_ranges;
                dev->idle_ranges = r;
                dev->idle_count++;
            } else {
                free(r->mapped);
                free(r);
            }
            break;
        }
    cpool__mutex_unlock(&dev->mapped_mu);
    if (!kept) GUARDED_QUIET(dev, (cudaError_t)vmm.release_range((CUdeviceptr)base, bytes));
}

void cpool__cuda_release_idle_ranges(cpool__bdevice *dev) {
    while (dev->idle_ranges) {
        reservation *r = dev->idle_ranges;
        dev->idle_ranges = r->next;
        GUARDED_QUIET(dev, (cudaError_t)vmm.release_range(r->base, r->pages * CPOOL__PAGE_BYTES));
        free(r->mapped);
        free(r);
    }
    dev->idle_count = 0;
}

/* Marks [at, at + bytes) of dev's reservations mapped or not (mapped_mu
 * held). */
static void mark_mapped(cpool__bdevice *dev, CUdeviceptr at, size_t bytes, bool mapped) {
    for (reservation *r = dev->reservations; r; r = r->next) {
        if (at < r->base || at >= r->base + r->pages * CPOOL__PAGE_BYTES) continue;
        for (size_t i = (at - r->base) / CPOOL__PAGE_BYTES, n = bytes / CPOOL__PAGE_BYTES; n--; i++) {
            uint64_t bit = (uint64_t)1 << (i % 64);
            r->mapped[i / 64] = mapped ? r->mapped[i / 64] | bit : r->mapped[i / 64] & ~bit;
        }
        return;
    }
}

static CUmemAccessDesc read_write(int device) {
    return (CUmemAccessDesc){.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device},
                             .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
}

/* Read and write access to [at, at + bytes) for device `own` (none if
 * negative) and each device of the mask `peers`. */
CUresult cpool__cuda_set_access_for(CUdeviceptr at, size_t bytes, int own, uint64_t peers) {
    CUmemAccessDesc access[1 + MAX_PEERS];
    size_t n = 0;
    if (own >= 0) access[n++] = read_write(own);
    for (int o = 0; o < MAX_PEERS; o++)
        if ((peers >> o & 1) && o != own) access[n++] = read_write(o);
    return n ? vmm.set_access(at, bytes, access, n) : CUDA_SUCCESS;
}

/* Unmaps the units of [at, at + bytes) (whole ones: the allocator's
 * ranges follow their edges, pages_inside and pages_split) and forgets
 * them. */
static cudaError_t unmap_units(cpool__bdevice *dev, CUdeviceptr at, size_t bytes) {
    CUresult first = CUDA_SUCCESS;
    cpool__mutex_lock(&dev->mapped_mu);
    for (size_t i = cpool__units_from(&dev->units, at); i < dev->units.count && dev->units.at[i].base < at + bytes;) {
        CUresult r = vmm.unmap(dev->units.at[i].base, dev->units.at[i].bytes);
        if (first == CUDA_SUCCESS) first = r;
        cpool__units_remove(&dev->units, i);
    }
    cpool__mutex_unlock(&dev->mapped_mu);
    return (cudaError_t)first;
}

/* Read and write access to [at, at + bytes), just mapped, for dev and the
 * peers that may use its memory, and the range marked mapped, so that a
 * peer connected later gets it too. */
static cudaError_t open_access(cpool__bdevice *dev, CUdeviceptr at, size_t bytes) {
    /* The peers are read under the lock that a new peer's grant of the
     * pages mapped so far takes: either sees these pages. */
    cpool__mutex_lock(&dev->mapped_mu);
    cudaError_t err = VMM_CALL(cpool__cuda_set_access_for(at, bytes, dev->ordinal, 0));
    uint64_t peers = dev->ordinal < MAX_PEERS ? atomic_load(&cpool__cuda_may_use[dev->ordinal]) : 0;
    if (err == cudaSuccess && peers && cpool__cuda_set_access_for(at, bytes, -1, peers) != CUDA_SUCCESS) {
        /* A peer's entry refused fails not the owner's own mapping:
         * those peers stay apart from now on, as at a failed grant. */
        atomic_fetch_and(&cpool__cuda_may_use[dev->ordinal], ~peers);
    }
    if (err == cudaSuccess) mark_mapped(dev, at, bytes, true);
    cpool__mutex_unlock(&dev->mapped_mu);
    return err;
}

/* [at, at + bytes) as one allocation (`joined`), or one a page: a create
 * and a map each, then one access setting for the range. The driver
 * charges per call, not per byte (a page at a time costs as much per 2 MiB
 * as one call per GiB). A mapping holds its allocation, so the handle goes
 * at once and an unmap frees it. On failure nothing stays mapped. */
static cudaError_t map_units(cpool__bdevice *dev, CUdeviceptr at, size_t bytes, bool joined) {
    CUmemAllocationProp prop = page_prop(dev);
    size_t step = joined ? bytes : CPOOL__PAGE_BYTES, done = 0;
    cudaError_t err = cudaSuccess;
    for (; err == cudaSuccess && done < bytes; done += err == cudaSuccess ? step : 0) {
        CUmemGenericAllocationHandle h;
        err = VMM_CALL(vmm.create(&h, step, &prop, 0));
        if (err != cudaSuccess) break;
        err = VMM_CALL(vmm.map(at + done, step, 0, h, 0));
        vmm.release(h);
    }
    if (err == cudaSuccess) err = open_access(dev, at, bytes);
    cpool__mutex_lock(&dev->mapped_mu);
    size_t noted = 0;
    while (err == cudaSuccess && noted < bytes && cpool__units_add(&dev->units, at + noted, step)) noted += step;
    if (err == cudaSuccess && noted < bytes) {
        err = cudaErrorMemoryAllocation;
        for (size_t k = 0; k < noted; k += step) cpool__units_remove(&dev->units, cpool__units_find(&dev->units, at + k));
        mark_mapped(dev, at, bytes, false);
    }
    cpool__mutex_unlock(&dev->mapped_mu);
    if (err != cudaSuccess)
        for (size_t k = 0; k < done; k += step) vmm.unmap(at + k, step);
    return err;
}

cpool_status cpool__cuda_pages_map(cpool__bdevice *dev, void *addr, size_t bytes, bool joined) {
    cudaError_t err;
    GUARDED(err, dev, true, map_units(dev, (CUdeviceptr)addr, bytes, joined));
    return err == cudaSuccess ? CPOOL_OK : cpool__cuda_fail(err, "mapping pages of a growable segment");
}

void cpool__cuda_pages_unmap(cpool__bdevice *dev, void *addr, size_t bytes) {
    cpool__mutex_lock(&dev->mapped_mu); /* no grant touches them once unmarked */
    mark_mapped(dev, (CUdeviceptr)addr, bytes, false);
    cpool__mutex_unlock(&dev->mapped_mu);
    GUARDED_QUIET(dev, unmap_units(dev, (CUdeviceptr)addr, bytes));
}

void cpool__cuda_pages_inside(cpool__bdevice *dev, uintptr_t *lo, uintptr_t *hi) {
    cpool__mutex_lock(&dev->mapped_mu);
    cpool__units_inside(&dev->units, lo, hi);
    cpool__mutex_unlock(&dev->mapped_mu);
}

/* ---- graph pages: physical memory mapped at several addresses ------------ */

/* One allocation of whole pages, which a mapping at each graph's address
 * range that uses it holds too: it is freed once released and unmapped
 * everywhere. */
struct cpool__bmem {
    CUmemGenericAllocationHandle handle;
    size_t bytes;
};

cpool_status cpool__cuda_mem_create(cpool__bdevice *dev, size_t bytes, cpool__bmem **out) {
    if (!dev->vmm)
        return cpool__fail(CPOOL_ERR_UNSUPPORTED, "the device has no virtual memory management: no graph pages");
    if (bytes == 0 || bytes % CPOOL__PAGE_BYTES != 0)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "graph pages of %zu bytes: not whole 2 MiB pages", bytes);
    cpool__bmem *m = cpool__malloc(sizeof *m);
    if (!m) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory creating graph pages");
    CUmemAllocationProp prop = page_prop(dev);
    cudaError_t err;
    GUARDED(err, dev, true, VMM_CALL(vmm.create(&m->handle, bytes, &prop, 0)));
    if (err != cudaSuccess) {
        free(m);
        char what[64];
        if (bytes == CPOOL__PAGE_BYTES)
            snprintf(what, sizeof what, "cuMemCreate of a 2 MiB graph page");
        else
            snprintf(what, sizeof what, "cuMemCreate of %zu 2 MiB graph pages", bytes / CPOOL__PAGE_BYTES);
        return cpool__cuda_fail(err, what);
    }
    m->bytes = bytes;
    *out = m;
    return CPOOL_OK;
}

void cpool__cuda_mem_release(cpool__bdevice *dev, cpool__bmem *m) {
    if (!m) return;
    GUARDED_QUIET(dev, (cudaError_t)vmm.release(m->handle));
    free(m);
}

/* The whole allocation at `at`, then access to it; all or nothing. *what
 * names the call that failed. */
static cudaError_t map_shared(cpool__bdevice *dev, CUdeviceptr at, const cpool__bmem *m, const char **what) {
    *what = "cuMemMap of graph pages";
    cudaError_t err = VMM_CALL(vmm.map(at, m->bytes, 0, m->handle, 0));
    if (err != cudaSuccess) return err;
    *what = "cuMemSetAccess on mapped graph pages";
    err = open_access(dev, at, m->bytes);
    if (err != cudaSuccess) vmm.unmap(at, m->bytes);
    return err;
}

cpool_status cpool__cuda_mem_map(cpool__bdevice *dev, void *addr, cpool__bmem *m) {
    cudaError_t err;
    const char *what = "making the device current to map graph pages";
    GUARDED(err, dev, true, map_shared(dev, (CUdeviceptr)addr, m, &what));
    return err == cudaSuccess ? CPOOL_OK : cpool__cuda_fail(err, what);
}

/* CUDA unmaps only whole mappings: the range is exactly the one mapped. */
void cpool__cuda_mem_unmap(cpool__bdevice *dev, void *addr, cpool__bmem *m) {
    cpool__mutex_lock(&dev->mapped_mu); /* no grant touches them once unmarked */
    mark_mapped(dev, (CUdeviceptr)addr, m->bytes, false);
    cpool__mutex_unlock(&dev->mapped_mu);
    GUARDED_QUIET(dev, (cudaError_t)vmm.unmap((CUdeviceptr)addr, m->bytes));
}

