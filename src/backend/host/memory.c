/*
 * The host backend's memory: a device of finite memory, as a GPU is.
 *
 * - The device (cpool__bdevice, host_memory.h) has a capacity, read from
 *   CPOOL_HOST_MEMORY when it is opened (else the machine's physical
 *   memory), and counts the bytes its pools hold, atomically, since pools
 *   of one device allocate from any thread at once.
 * - A plain segment is one posix_memalign'ed range, held whole.
 * - A growable segment is address space reserved with mmap(PROT_NONE),
 *   which holds no memory; its pages are held from pages_map (made
 *   readable and writable) to pages_unmap (reserved address space again).
 * - A graph page is an extent of the device's memory file (memfd), held
 *   from mem_create to mem_release and mapped MAP_SHARED at any number of
 *   reserved addresses: each sees the same bytes, as on a GPU, so a graph
 *   that wrote through another's page would be caught on the host too.
 * - A request past the capacity, or one the system refuses, fails with
 *   CPOOL_ERR_OUT_OF_MEMORY and changes nothing, as a full GPU would; a
 *   reservation the system refuses says that address space ran out, which
 *   is not memory.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fault.h"
#include "host_memory.h"
#include "status.h"

/* ---- capacity ------------------------------------------------------------ */

#define HOST_MEMORY_VAR "CPOOL_HOST_MEMORY"

/* A size: decimal bytes, then at most one of K, M or G (binary units, either
 * case). false for anything else, or a value past 64 bits. */
static bool parse_size(const char *text, uint64_t *out) {
    if (!isdigit((unsigned char)text[0])) return false;
    errno = 0;
    char *end;
    unsigned long long n = strtoull(text, &end, 10);
    if (errno == ERANGE) return false;
    unsigned shift = 0;
    switch (*end) {
    case 'K':
    case 'k':
        shift = 10;
        break;
    case 'M':
    case 'm':
        shift = 20;
        break;
    case 'G':
    case 'g':
        shift = 30;
        break;
    default:
        break;
    }
    if (shift) end++;
    if (*end || n > (UINT64_MAX >> shift)) return false;
    *out = (uint64_t)n << shift;
    return true;
}

/* What the device may hold: CPOOL_HOST_MEMORY (unset or empty: the
 * machine's physical memory, or no bound where the system cannot say; 0:
 * no bound, as 0 means for a pool's max_reserved_bytes). */
static cpool_status capacity_from_env(uint64_t *out) {
    const char *env = getenv(HOST_MEMORY_VAR);
    if (env && *env) {
        if (parse_size(env, out)) {
            if (*out == 0) *out = UINT64_MAX;
            return CPOOL_OK;
        }
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT,
                           "cpool_device_open: " HOST_MEMORY_VAR "=\"%.64s\" is not a size (bytes, with an optional K, "
                           "M or G suffix)",
                           env);
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    *out = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
    return CPOOL_OK;
}

/* Counts `bytes` more held, unless that passes the capacity. */
static cpool_status hold(cpool__bdevice *dev, size_t bytes, const char *what) {
    uint64_t held = atomic_load(&dev->held);
    do {
        if (bytes > dev->capacity - held)
            return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY,
                               "the host device's memory is exhausted: %zu more bytes for %s would pass "
                               HOST_MEMORY_VAR "=%llu bytes (%llu held)",
                               bytes, what, (unsigned long long)dev->capacity, (unsigned long long)held);
    } while (!atomic_compare_exchange_weak(&dev->held, &held, held + bytes));
    return CPOOL_OK;
}

static void unhold(cpool__bdevice *dev, size_t bytes) { atomic_fetch_sub(&dev->held, bytes); }

/* The system refused memory the capacity allowed (bytes are held already). */
static cpool_status refused(cpool__bdevice *dev, size_t bytes, const char *what) {
    unhold(dev, bytes);
    return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY,
                       "the host device's memory is exhausted: the system refused %zu bytes for %s (%llu held of "
                       HOST_MEMORY_VAR "=%llu bytes)",
                       bytes, what, (unsigned long long)atomic_load(&dev->held), (unsigned long long)dev->capacity);
}

/* ---- device -------------------------------------------------------------- */

cpool_status cpool__host_device_open(int ordinal, cpool__bdevice **out) {
    if (ordinal != 0) return cpool__fail(CPOOL_ERR_NO_DEVICE, "the host backend has one device, ordinal 0 (asked for %d)", ordinal);
    uint64_t capacity = 0;
    cpool_status st = capacity_from_env(&capacity);
    if (st != CPOOL_OK) return st;
    cpool__bdevice *d = cpool__calloc(1, sizeof *d);
    if (!d) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory opening the host device");
    d->capacity = capacity;
    atomic_init(&d->held, 0);
    cpool__mutex_init(&d->file_mu, CPOOL__RANK_HOST_MEMORY);
    d->memfd = -1;
    *out = d;
    return CPOOL_OK;
}

struct host_extent {
    struct host_extent *next;
    off_t offset;
    size_t bytes;
};

/* Every pool of the device is gone by now (each held a reference to it), and
 * gave back what it held: where it did not, a count went wrong (checked in
 * builds with the internal checks). */
void cpool__host_device_close(cpool__bdevice *dev) {
#ifdef CPOOL_DEBUG_CHECKS
    if (atomic_load(&dev->held) != 0) {
        fprintf(stderr, "capturepool: the host device closes with %llu bytes counted held\n",
                (unsigned long long)atomic_load(&dev->held));
        abort();
    }
#endif
    while (dev->free) {
        struct host_extent *e = dev->free;
        dev->free = e->next;
        free(e);
    }
    if (dev->memfd >= 0) close(dev->memfd);
    cpool__units_free(&dev->units);
    cpool__mutex_destroy(&dev->file_mu);
    free(dev);
}

/* ---- plain segments ------------------------------------------------------ */

cpool_status cpool__host_segment_alloc(cpool__bdevice *dev, size_t bytes, void **out) {
    void *p = NULL;
    cpool_status st = hold(dev, bytes, "a segment");
    if (st != CPOOL_OK) return st;
    if (cpool__fault_hit() || posix_memalign(&p, 4096, bytes) != 0) return refused(dev, bytes, "a segment");
    *out = p;
    return CPOOL_OK;
}

#ifdef CPOOL_DEBUG_CHECKS
/* Poisons the pages of [base, base + bytes) that were ever touched: pages
 * never written hold nothing to protect, and touching them all would fault
 * in whole segments (mincore tells which pages are resident). */
static void poison_resident(void *base, size_t bytes) {
    const size_t page = 4096; /* segments are 4096-aligned (segment_alloc) */
    size_t pages = (bytes + page - 1) / page;
    unsigned char *resident = malloc(pages);
    if (!resident || mincore(base, bytes, resident) != 0) {
        memset(base, CPOOL__POISON, bytes);
    } else {
        for (size_t i = 0; i < pages; i++)
            if (resident[i] & 1) {
                size_t n = i + 1 == pages ? bytes - i * page : page;
                memset((char *)base + i * page, CPOOL__POISON, n);
            }
    }
    free(resident);
}
#endif

void cpool__host_segment_free(cpool__bdevice *dev, void *base, size_t bytes) {
#ifdef CPOOL_DEBUG_CHECKS
    poison_resident(base, bytes);
#endif
    free(base);
    unhold(dev, bytes);
}

/* ---- growable segments: reserved address space --------------------------- */

bool cpool__host_va_supported(cpool__bdevice *dev) {
    CPOOL_UNUSED(dev);
    return !cpool__virtual_memory_off();
}

cpool_status cpool__host_va_reserve(cpool__bdevice *dev, size_t bytes, void **out) {
    CPOOL_UNUSED(dev);
    /* One page more than asked, to cut an aligned range from it. */
    size_t span = bytes + CPOOL__PAGE_BYTES;
    void *p = cpool__fault_hit() ? MAP_FAILED
                                 : mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY,
                           "the process's address space is exhausted (not memory): no %zu bytes of address space to "
                           "reserve",
                           bytes);
    uintptr_t raw = (uintptr_t)p, base = (raw + CPOOL__PAGE_BYTES - 1) / CPOOL__PAGE_BYTES * CPOOL__PAGE_BYTES;
    if (base > raw) munmap(p, base - raw);
    if (raw + span > base + bytes) munmap((void *)(base + bytes), raw + span - (base + bytes));
    *out = (void *)base;
    return CPOOL_OK;
}

void cpool__host_va_release(cpool__bdevice *dev, void *base, size_t bytes) {
    CPOOL_UNUSED(dev);
    munmap(base, bytes);
}

/* Back to reserved address space: the pages' memory goes at once. */
static void unback(void *addr, size_t bytes) {
    mmap(addr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

/* Records [at, at + bytes) as one unit, or a unit a page; false: no host
 * memory (those recorded are forgotten again). */
static bool note_units(cpool__bdevice *dev, uintptr_t at, size_t bytes, bool joined) {
    size_t step = joined ? bytes : CPOOL__PAGE_BYTES, done = 0;
    cpool__mutex_lock(&dev->file_mu);
    while (done < bytes && cpool__units_add(&dev->units, at + done, step)) done += step;
    if (done < bytes) /* undo: none of the range stays recorded */
        for (size_t k = 0; k < done; k += step) cpool__units_remove(&dev->units, cpool__units_find(&dev->units, at + k));
    cpool__mutex_unlock(&dev->file_mu);
    return done == bytes;
}

cpool_status cpool__host_pages_map(cpool__bdevice *dev, void *addr, size_t bytes, bool joined) {
    /* Two steps, as on a GPU: the memory, then access to it. */
    cpool_status st = hold(dev, bytes, "pages");
    if (st != CPOOL_OK) return st;
    if (cpool__fault_hit()) return refused(dev, bytes, "pages");
    if (cpool__fault_hit() || mprotect(addr, bytes, PROT_READ | PROT_WRITE) != 0) {
        unback(addr, bytes);
        return refused(dev, bytes, "pages");
    }
    if (!note_units(dev, (uintptr_t)addr, bytes, joined)) {
        unback(addr, bytes);
        unhold(dev, bytes);
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for the record of mapped pages");
    }
    return CPOOL_OK;
}

/* A unit given back in part would be a bug on a GPU (its driver unmaps
 * only whole allocations): the host refuses it as loudly. */
static void forget_units(cpool__bdevice *dev, uintptr_t lo, uintptr_t hi) {
    cpool__mutex_lock(&dev->file_mu);
    size_t i = cpool__units_find(&dev->units, lo);
    if (i == SIZE_MAX) i = cpool__units_from(&dev->units, lo);
    while (i < dev->units.count && dev->units.at[i].base < hi) {
        const cpool__unit *u = &dev->units.at[i];
        if (u->base < lo || u->base + u->bytes > hi) {
            fprintf(stderr, "capturepool: pages unmapped from %#lx to %#lx cut the unit at %#lx of %zu bytes\n",
                    (unsigned long)lo, (unsigned long)hi, (unsigned long)u->base, u->bytes);
            abort();
        }
        cpool__units_remove(&dev->units, i);
    }
    cpool__mutex_unlock(&dev->file_mu);
}

void cpool__host_pages_unmap(cpool__bdevice *dev, void *addr, size_t bytes) {
    forget_units(dev, (uintptr_t)addr, (uintptr_t)addr + bytes);
    unback(addr, bytes);
    unhold(dev, bytes);
}

void cpool__host_pages_inside(cpool__bdevice *dev, uintptr_t *lo, uintptr_t *hi) {
    cpool__mutex_lock(&dev->file_mu);
    cpool__units_inside(&dev->units, lo, hi);
    cpool__mutex_unlock(&dev->file_mu);
}

/* ---- graph pages: extents of the memory file ------------------------------ */

struct cpool__bmem {
    off_t offset;
    size_t bytes;
};

cpool_status cpool__host_mem_create(cpool__bdevice *dev, size_t bytes, cpool__bmem **out) {
    if (bytes == 0 || bytes % CPOOL__PAGE_BYTES != 0)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "graph pages of %zu bytes: not whole 2 MiB pages", bytes);
    cpool__bmem *m = cpool__calloc(1, sizeof *m);
    if (!m) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for a page's record");
    cpool_status st = hold(dev, bytes, "graph pages");
    if (st != CPOOL_OK) {
        free(m);
        return st;
    }
    cpool__mutex_lock(&dev->file_mu);
    if (dev->memfd < 0 && !cpool__fault_hit()) dev->memfd = memfd_create("capturepool", MFD_CLOEXEC);
    struct host_extent **at = &dev->free;
    while (*at && (*at)->bytes != bytes) at = &(*at)->next;
    if (dev->memfd < 0) {
        st = refused(dev, bytes, "graph pages (no memory file)");
    } else if (*at) {
        struct host_extent *e = *at;
        *at = e->next;
        *m = (cpool__bmem){e->offset, e->bytes};
        free(e);
    } else if (cpool__fault_hit() || ftruncate(dev->memfd, dev->end + (off_t)bytes) != 0) {
        st = refused(dev, bytes, "graph pages");
    } else {
        *m = (cpool__bmem){dev->end, bytes};
        dev->end += (off_t)bytes;
    }
    cpool__mutex_unlock(&dev->file_mu);
    if (st != CPOOL_OK) {
        free(m);
        return st;
    }
    *out = m;
    return CPOOL_OK;
}

void cpool__host_mem_release(cpool__bdevice *dev, cpool__bmem *m) {
    if (!m) return;
    struct host_extent *e = malloc(sizeof *e);
    cpool__mutex_lock(&dev->file_mu);
    /* The extent's memory goes back at once; its place in the file stays. */
    fallocate(dev->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, m->offset, (off_t)m->bytes);
    if (e) {
        *e = (struct host_extent){dev->free, m->offset, m->bytes};
        dev->free = e;
    }
    cpool__mutex_unlock(&dev->file_mu);
    unhold(dev, m->bytes);
    free(m);
}

cpool_status cpool__host_mem_map(cpool__bdevice *dev, void *addr, cpool__bmem *m) {
    if (cpool__fault_hit() ||
        mmap(addr, m->bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, dev->memfd, m->offset) == MAP_FAILED) {
        unback(addr, m->bytes);
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "%zu bytes of graph pages could not be mapped at %p", m->bytes,
                           addr);
    }
    return CPOOL_OK;
}

void cpool__host_mem_unmap(cpool__bdevice *dev, void *addr, cpool__bmem *m) {
    CPOOL_UNUSED(dev);
    unback(addr, m->bytes);
}

/* ---- host copies ------------------------------------------------------------ */

cpool_status cpool__host_copy_alloc(cpool__bdevice *dev, size_t bytes, void **out) {
    CPOOL_UNUSED(dev);
    void *p = cpool__malloc(bytes ? bytes : 1);
    if (!p) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "%zu bytes of host memory for a pool's copy", bytes);
    *out = p;
    return CPOOL_OK;
}

void cpool__host_copy_free(cpool__bdevice *dev, void *p) {
    CPOOL_UNUSED(dev);
    free(p);
}
