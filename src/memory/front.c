/*
 * The front cache (front.h has its contract and its records). Everything
 * is under `locked`, a spin lock: its critical sections are a few dozen
 * instructions, and one uncontended atomic exchange is what the fast path
 * may cost. `slots` probes linearly and is at most half full, so a free
 * finds its block in a probe or two. Only the stream a free entry was
 * freed on reuses it, as with the allocator's restricted blocks.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front.h"
#include "lock.h"
#include "status.h"
#include "stream_order.h"

/* ---- the lock ------------------------------------------------------------ */

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void lock(cpool__front *f) {
    cpool__rank_acquire(CPOOL__RANK_FRONT);
    unsigned spins = 0;
    while (atomic_exchange_explicit(&f->locked, true, memory_order_acquire))
        while (atomic_load_explicit(&f->locked, memory_order_relaxed)) {
            /* A holder that lost its core would keep us spinning: let it run. */
            if (++spins % 64 == 0)
                sched_yield();
            else
                cpu_relax();
        }
}

static void unlock(cpool__front *f) {
    atomic_store_explicit(&f->locked, false, memory_order_release);
    cpool__rank_release(CPOOL__RANK_FRONT);
}

/* ---- entries by address -------------------------------------------------- */

#define SLOT_MASK (CPOOL__FRONT_SLOTS - 1)

/* A multiplicative hash of a block address (blocks are 512-byte aligned);
 * its bits 32 up place the entry, bits 48 up count it in `maybe`. */
static uint64_t addr_hash(uintptr_t addr) { return ((uint64_t)addr >> 9) * 0x9E3779B97F4A7C15ull; }

static unsigned slot_home(uintptr_t addr) { return (unsigned)(addr_hash(addr) >> 32) & SLOT_MASK; }

/* The slot of the entry for addr, or -1. */
static int slot_find(const cpool__front *f, uintptr_t addr) {
    for (unsigned j = slot_home(addr); f->slots[j] >= 0; j = (j + 1) & SLOT_MASK)
        if (f->entries[f->slots[j]].addr == addr) return (int)j;
    return -1;
}

static unsigned maybe_index(uintptr_t addr) { return (unsigned)(addr_hash(addr) >> 48) & SLOT_MASK; }

static void maybe_add(cpool__front *f, uintptr_t addr, int delta) {
    _Atomic uint8_t *m = &f->maybe[maybe_index(addr)];
    atomic_store_explicit(m, (uint8_t)(atomic_load_explicit(m, memory_order_relaxed) + delta), memory_order_relaxed);
}

static void slot_insert(cpool__front *f, int16_t entry) {
    maybe_add(f, f->entries[entry].addr, +1);
    unsigned j = slot_home(f->entries[entry].addr);
    while (f->slots[j] >= 0) j = (j + 1) & SLOT_MASK;
    f->slots[j] = entry;
}

/* Empties slot j, moving later entries of its probe run back. */
static void slot_erase(cpool__front *f, unsigned j) {
    maybe_add(f, f->entries[f->slots[j]].addr, -1);
    f->slots[j] = -1;
    for (unsigned k = (j + 1) & SLOT_MASK; f->slots[k] >= 0; k = (k + 1) & SLOT_MASK) {
        unsigned home = slot_home(f->entries[f->slots[k]].addr);
        bool between = j <= k ? (home > j && home <= k) : (home > j || home <= k);
        if (!between) {
            f->slots[j] = f->slots[k];
            f->slots[k] = -1;
            j = k;
        }
    }
}

/* ---- entries ------------------------------------------------------------- */

void cpool__front_init(cpool__front *f) {
    memset(f, 0, sizeof *f);
    atomic_init(&f->locked, false);
    for (int i = 0; i < CPOOL__FRONT_SLOTS; i++) {
        f->slots[i] = -1;
        atomic_init(&f->maybe[i], 0);
    }
    for (size_t c = 0; c < CPOOL__FRONT_CLASSES; c++) f->classes[c] = -1;
    for (int i = 0; i < CPOOL__FRONT_ENTRIES; i++) f->entries[i].next = (int16_t)(i + 1 < CPOOL__FRONT_ENTRIES ? i + 1 : -1);
    f->unused = 0;
}

static unsigned class_of(size_t size) {
    return size <= CPOOL__FRONT_SMALL ? (unsigned)((size - 1) / CPOOL__BLOCK_ALIGN) : CPOOL__FRONT_CLASSES - 1;
}

static void count_alloc(cpool__front *f, size_t bytes) {
    f->allocated += bytes;
    if (f->allocated > f->allocated_peak) f->allocated_peak = f->allocated;
    f->alloc_count++;
}

static void count_free(cpool__front *f, size_t requested) {
    f->allocated -= requested;
    f->free_count++;
}

/* A handed-out entry becomes free, reusable by stream `stream_id` only. */
static void park(cpool__front *f, int16_t i, uint64_t stream_id) {
    cpool__front_entry *e = &f->entries[i];
    count_free(f, e->requested);
    e->out = false;
    e->requested = 0;
    e->stream = stream_id;
    /* When it goes back to the allocator, it is freed as of now: an event
     * recorded after this free still covers it (reuse follows events). */
    e->free_seq = cpool__free_clock_read();
    unsigned c = class_of(e->size);
    e->next = f->classes[c];
    f->classes[c] = i;
    f->free_bytes += e->size;
}

/* Forgets the (unlisted) entry in slot j; its block is the allocator's again. */
static void forget(cpool__front *f, unsigned j) {
    int16_t i = f->slots[j];
    slot_erase(f, j);
    f->entries[i] = (cpool__front_entry){.next = f->unused};
    f->unused = i;
}

/* ---- fast paths ---------------------------------------------------------- */

bool cpool__front_alloc(cpool__front *f, size_t bytes, uint64_t stream_id, void **out) {
    if (bytes > CPOOL__FRONT_MAX) return false;
    size_t size = cpool__block_size(bytes);
    lock(f);
    int16_t *link = &f->classes[class_of(size)];
    while (*link >= 0 && (f->entries[*link].stream != stream_id || f->entries[*link].size != size))
        link = &f->entries[*link].next;
    int16_t i = *link;
    if (i < 0) {
        unlock(f);
        return false;
    }
    cpool__front_entry *e = &f->entries[i];
    *link = e->next;
    e->next = -1;
    e->out = true;
    e->requested = bytes;
    f->free_bytes -= e->size;
    count_alloc(f, bytes);
    *out = (void *)e->addr;
    unlock(f);
    return true;
}

cpool__front_result cpool__front_free(cpool__front *f, void *ptr, uint64_t stream_id) {
    /* 0 means no entry for ptr: a block handed out by the front was counted
     * here before its allocation returned. A stale count only costs a look. */
    if (!atomic_load_explicit(&f->maybe[maybe_index((uintptr_t)ptr)], memory_order_relaxed)) return CPOOL__FRONT_MISS;
    lock(f);
    int j = slot_find(f, (uintptr_t)ptr);
    cpool__front_result r = CPOOL__FRONT_MISS;
    if (j >= 0) {
        int16_t i = f->slots[j];
        if (f->entries[i].out) {
            park(f, i, stream_id);
            r = CPOOL__FRONT_DONE;
        } else {
            r = CPOOL__FRONT_FREED;
        }
    }
    unlock(f);
    if (r == CPOOL__FRONT_FREED) (void)cpool__fail_not_live(ptr);
    return r;
}

/* ---- slow paths (under the pool mutex) ----------------------------------- */

void cpool__front_count_alloc(cpool__front *f, size_t bytes) {
    lock(f);
    count_alloc(f, bytes);
    unlock(f);
}

void cpool__front_count_free(cpool__front *f, size_t requested) {
    lock(f);
    count_free(f, requested);
    unlock(f);
}

/* Starts tracking a live allocator block as handed out (there is an unused
 * entry); returns its entry. */
static int16_t adopt(cpool__front *f, void *ptr, const cpool__block_info *info) {
    int16_t i = f->unused;
    cpool__front_entry *e = &f->entries[i];
    f->unused = e->next;
    *e = (cpool__front_entry){.addr = (uintptr_t)ptr,
                              .size = info->size,
                              .next = -1,
                              .used = true,
                              .out = true,
                              .requested = info->requested,
                              .alloc_requested = info->requested};
    slot_insert(f, i);
    return i;
}

/* Makes an entry unused in a full front: one of its free blocks goes back
 * to the allocator (the classes in turn), or, with none free, a block it
 * handed out becomes the allocator's alone, with the caller's size (its
 * free then takes the slow path once). So blocks of sizes the callers no
 * longer ask for, or hold for long, do not keep the sizes they do ask for
 * out of the front. */
/* The first free block of class c goes back to the allocator. */
static void give_back_head(cpool__front *f, cpool__allocator *a, unsigned c) {
    cpool__front_entry *e = &f->entries[f->classes[c]];
    f->classes[c] = e->next;
    f->free_bytes -= e->size;
    /* The allocator still has it live: this free cannot fail. */
    cpool__allocator_free_as_of(a, (void *)e->addr, cpool__key_stream(e->stream), e->free_seq);
    forget(f, (unsigned)slot_find(f, e->addr));
}

static void evict_one(cpool__front *f, cpool__allocator *a) {
    for (unsigned k = 0; f->free_bytes && k < CPOOL__FRONT_CLASSES; k++) {
        unsigned c = (f->evict_class + k) % CPOOL__FRONT_CLASSES;
        if (f->classes[c] < 0) continue;
        give_back_head(f, a, c);
        f->evict_class = (uint16_t)((c + 1) % CPOOL__FRONT_CLASSES);
        return;
    }
    for (unsigned k = 0; k < CPOOL__FRONT_ENTRIES; k++) {
        unsigned i = (f->evict_entry + k) % CPOOL__FRONT_ENTRIES;
        cpool__front_entry *e = &f->entries[i];
        if (!e->used || !e->out) continue;
        cpool__allocator_set_requested(a, (void *)e->addr, e->requested);
        forget(f, (unsigned)slot_find(f, e->addr));
        f->evict_entry = (uint16_t)((i + 1) % CPOOL__FRONT_ENTRIES);
        return;
    }
}

cpool_status cpool__front_free_slow(cpool__front *f, cpool__allocator *a, void *ptr, cpool__stream_key stream,
                                   cpool__use use, cpool__stream_key branch) {
    cpool_status st = CPOOL_OK;
    lock(f);
    int j = slot_find(f, (uintptr_t)ptr);
    if (j >= 0) {
        int16_t i = f->slots[j];
        cpool__front_entry *e = &f->entries[i];
        if (!e->out) {
            st = cpool__fail_not_live(ptr);
        } else if (use == CPOOL__USE_STREAM) {
            park(f, i, stream.word);
        } else {
            /* Under capture the block joins the graph-reserved set. */
            size_t requested = e->requested;
            forget(f, (unsigned)j);
            st = cpool__allocator_free(a, ptr, stream, use, branch, NULL);
            if (st == CPOOL_OK) count_free(f, requested);
        }
    } else {
        /* Only a free the front could keep looks the block up first. */
        cpool__block_info info;
        bool keep = use == CPOOL__USE_STREAM && cpool__allocator_live_block(a, ptr, &info) && !info.graph &&
                    !info.pinned && info.size <= CPOOL__FRONT_MAX;
        if (keep && f->unused < 0) evict_one(f, a);
        if (keep && f->unused >= 0) {
            park(f, adopt(f, ptr, &info), stream.word);
        } else {
            size_t requested;
            st = cpool__allocator_free(a, ptr, stream, use, branch, &requested);
            if (st == CPOOL_OK) count_free(f, requested);
        }
    }
    unlock(f);
    return st;
}

static cpool__front_counts counts_of(const cpool__front *f) {
    return (cpool__front_counts){f->allocated, f->allocated_peak, f->alloc_count, f->free_count, f->free_bytes};
}

static int view_by_addr(const void *x, const void *y) {
    uintptr_t a = ((const cpool__front_view *)x)->addr, b = ((const cpool__front_view *)y)->addr;
    return a < b ? -1 : a > b;
}

size_t cpool__front_view_blocks(cpool__front *f, cpool__front_view *out, cpool__front_counts *counts) {
    size_t n = 0;
    lock(f);
    for (unsigned i = 0; i < CPOOL__FRONT_ENTRIES; i++) {
        const cpool__front_entry *e = &f->entries[i];
        if (e->used) out[n++] = (cpool__front_view){e->addr, e->stream, e->out ? e->requested : 0, e->out};
    }
    *counts = counts_of(f);
    unlock(f);
    qsort(out, n, sizeof *out, view_by_addr);
    return n;
}

size_t cpool__front_flush(cpool__front *f, cpool__allocator *a) {
    size_t n = 0;
    lock(f);
    for (unsigned c = 0; f->free_bytes && c < CPOOL__FRONT_CLASSES; c++)
        for (; f->classes[c] >= 0; n++) give_back_head(f, a, c);
    unlock(f);
    return n;
}

cpool__front_counts cpool__front_counters(cpool__front *f) {
    lock(f);
    cpool__front_counts c = counts_of(f);
    unlock(f);
    return c;
}

/* ---- invariants ---------------------------------------------------------- */

#define INVARIANT(cond, ...) CPOOL__INVARIANT("front cache", cond, __VA_ARGS__)

void cpool__front_check(cpool__front *f, const cpool__allocator *a, uint64_t elsewhere_requested,
                        size_t elsewhere_blocks) {
    lock(f);
    bool listed[CPOOL__FRONT_ENTRIES] = {false};
    uint64_t free_bytes = 0;
    size_t free_entries = 0;
    for (unsigned c = 0; c < CPOOL__FRONT_CLASSES; c++)
        for (int16_t i = f->classes[c]; i >= 0; i = f->entries[i].next) {
            const cpool__front_entry *e = &f->entries[i];
            INVARIANT(e->used && !e->out && !listed[i], "class %u lists entry %d wrongly", c, i);
            INVARIANT(class_of(e->size) == c && e->stream != 0, "free entry %d in class %u", i, c);
            listed[i] = true;
            free_bytes += e->size;
            free_entries++;
        }
    size_t unused = 0;
    for (int16_t i = f->unused; i >= 0; i = f->entries[i].next) {
        INVARIANT(!f->entries[i].used && !listed[i], "unused list holds entry %d wrongly", i);
        listed[i] = true;
        unused++;
    }
    size_t slots = 0, maybe = 0;
    for (unsigned j = 0; j < CPOOL__FRONT_SLOTS; j++) {
        slots += f->slots[j] >= 0;
        maybe += atomic_load_explicit(&f->maybe[j], memory_order_relaxed);
    }
    uint64_t alloc_requested = 0, requested = 0;
    size_t used = 0;
    for (int i = 0; i < CPOOL__FRONT_ENTRIES; i++) {
        const cpool__front_entry *e = &f->entries[i];
        if (!e->used) continue;
        used++;
        INVARIANT(e->out != listed[i], "entry %d is %s but %s listed", i, e->out ? "out" : "free", listed[i] ? "" : "not");
        int j = slot_find(f, e->addr);
        INVARIANT(j >= 0 && f->slots[j] == i, "entry %d is not found by its address", i);
        INVARIANT(atomic_load_explicit(&f->maybe[maybe_index(e->addr)], memory_order_relaxed) > 0,
                  "entry %d is not counted in maybe", i);
        INVARIANT(e->size <= CPOOL__FRONT_MAX, "entry %d is too large", i);
        cpool__block_info info;
        INVARIANT(cpool__allocator_live_block(a, (void *)e->addr, &info), "entry %d's block is not live in the allocator", i);
        INVARIANT(info.size == e->size && info.requested == e->alloc_requested && !info.graph && !info.pinned,
                  "entry %d disagrees with the allocator's block", i);
        INVARIANT(!e->out || (e->requested > 0 && e->requested <= e->size), "entry %d's requested size", i);
        alloc_requested += e->alloc_requested;
        requested += e->requested;
    }
    INVARIANT(used + unused == CPOOL__FRONT_ENTRIES && slots == used && maybe == used, "entry counts");
    INVARIANT(free_bytes == f->free_bytes, "free bytes");
    uint64_t allocated = a->allocated - alloc_requested + requested + elsewhere_requested;
    INVARIANT(f->allocated == allocated, "allocated %llu, the allocator's blocks and the front's say %llu",
              (unsigned long long)f->allocated, (unsigned long long)allocated);
    INVARIANT(f->alloc_count - f->free_count == a->map_count + elsewhere_blocks - free_entries,
              "alloc and free counts disagree with live blocks");
    INVARIANT(f->allocated <= f->allocated_peak, "peak");
    unlock(f);
}
