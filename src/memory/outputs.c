/*
 * Footprints and live outputs (see outputs.h).
 */
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "outputs.h"
#include "status.h"

static int by_addr(const void *x, const void *y) {
    uintptr_t a = ((const cpool__capture_range *)x)->addr, b = ((const cpool__capture_range *)y)->addr;
    return a < b ? -1 : a > b;
}

/* Whether [addr, addr + size) meets one of fp's ranges (binary search). */
bool cpool__footprint_overlaps(const cpool__footprint *fp, uintptr_t addr, size_t size) {
    size_t lo = 0, hi = fp->count;
    while (lo < hi) { /* the first range ending after addr */
        size_t mid = (lo + hi) / 2;
        if (fp->ranges[mid].addr + fp->ranges[mid].size <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < fp->count && fp->ranges[lo].addr < addr + size;
}

static bool live_room(cpool__outputs *o, size_t more) {
    if (o->live_count + more <= o->live_cap) return true;
    size_t cap = o->live_cap ? o->live_cap : 8;
    while (cap < o->live_count + more) cap *= 2;
    cpool__live_output *live = cpool__realloc(o->live, cap * sizeof *live);
    if (!live) return false;
    o->live = live;
    o->live_cap = cap;
    return true;
}

cpool_status cpool__outputs_add_graph(cpool__outputs *o, cpool__allocator *a, uint64_t graph_id,
                                      const cpool__capture_range *ranges, size_t n, cpool__footprint **out) {
    *out = NULL;
    cpool__capture_range *sorted = n ? cpool__malloc(n * sizeof *sorted) : NULL;
    cpool__footprint *fp = cpool__malloc(sizeof *fp + n * sizeof fp->ranges[0]);
    if ((n && !sorted) || !fp || !live_room(o, n)) {
        free(sorted);
        free(fp);
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory recording a graph's footprint");
    }
    if (n) memcpy(sorted, ranges, n * sizeof *sorted);
    if (n) qsort(sorted, n, sizeof *sorted, by_addr);
    fp->graph_id = graph_id;
    fp->count = 0;
    for (size_t i = 0; i < n; i++) {
        uintptr_t end = sorted[i].addr + sorted[i].size;
        size_t k = fp->count;
        if (k && fp->ranges[k - 1].addr + fp->ranges[k - 1].size >= sorted[i].addr) {
            uintptr_t last = fp->ranges[k - 1].addr + fp->ranges[k - 1].size;
            if (end > last) fp->ranges[k - 1].size = end - fp->ranges[k - 1].addr;
        } else {
            fp->ranges[k].addr = sorted[i].addr;
            fp->ranges[k].size = sorted[i].size;
            fp->count++;
        }
    }
    /* The capture's outputs: blocks it was handed that are still the same
     * allocation. Each makes the footprints of other graphs it meets count
     * one more conflict. */
    size_t first_new = o->live_count;
    for (size_t i = 0; i < n; i++) {
        cpool__block_info info;
        if (!sorted[i].serial || !cpool__allocator_live_block(a, (void *)sorted[i].addr, &info) ||
            info.serial != sorted[i].serial || info.output)
            continue;
        cpool__allocator_set_output(a, (void *)sorted[i].addr, true);
        o->live[o->live_count++] = (cpool__live_output){sorted[i].addr, info.size, graph_id, fp};
        for (cpool__footprint *f = o->footprints; f; f = f->next)
            if (f->graph_id != graph_id && cpool__footprint_overlaps(f, sorted[i].addr, info.size)) atomic_fetch_add(&f->conflicts, 1);
    }
    free(sorted);
    unsigned conflicts = 0;
    for (size_t i = 0; i < first_new; i++)
        if (cpool__footprint_overlaps(fp, o->live[i].addr, o->live[i].size)) conflicts++;
    atomic_init(&fp->conflicts, conflicts);
    fp->next = o->footprints;
    o->footprints = fp;
    *out = fp;
    return CPOOL_OK;
}

void cpool__outputs_remove_graph(cpool__outputs *o, cpool__allocator *a, cpool__footprint *fp, bool drop_outputs) {
    for (cpool__footprint **p = &o->footprints; *p; p = &(*p)->next)
        if (*p == fp) {
            *p = fp->next;
            break;
        }
    for (size_t i = 0; i < o->live_count;) {
        if (o->live[i].from != fp) {
            i++;
        } else if (!drop_outputs) {
            o->live[i++].from = NULL; /* live on, past its graph */
        } else {
            uintptr_t addr = o->live[i].addr;
            cpool__allocator_set_output(a, (void *)addr, false);
            cpool__outputs_freed(o, addr); /* moves another output into slot i */
        }
    }
    free(fp);
}

void cpool__outputs_freed(cpool__outputs *o, uintptr_t addr) {
    for (size_t i = 0; i < o->live_count; i++) {
        if (o->live[i].addr != addr) continue;
        cpool__live_output out = o->live[i];
        o->live[i] = o->live[--o->live_count];
        for (cpool__footprint *f = o->footprints; f; f = f->next)
            if (f->graph_id != out.graph_id && cpool__footprint_overlaps(f, out.addr, out.size)) atomic_fetch_sub(&f->conflicts, 1);
        return;
    }
}

bool cpool__outputs_find_conflict(const cpool__outputs *o, const cpool__footprint *fp, cpool__live_output *found) {
    for (size_t i = 0; i < o->live_count; i++)
        if (o->live[i].graph_id != fp->graph_id && cpool__footprint_overlaps(fp, o->live[i].addr, o->live[i].size)) {
            *found = o->live[i];
            return true;
        }
    return false;
}

void cpool__outputs_destroy(cpool__outputs *o) {
    while (o->footprints) {
        cpool__footprint *f = o->footprints;
        o->footprints = f->next;
        free(f);
    }
    free(o->live);
    memset(o, 0, sizeof *o);
}

/* An address range, for the shared part of a footprint. */
typedef struct span {
    uintptr_t addr, end;
} span;

static int span_by_addr(const void *x, const void *y) {
    uintptr_t a = ((const span *)x)->addr, b = ((const span *)y)->addr;
    return a < b ? -1 : a > b;
}

cpool_status cpool__outputs_footprint_stats(const cpool__outputs *o, const cpool__footprint *fp,
                                            cpool__footprint_stats *out) {
    *out = (cpool__footprint_stats){0};
    for (size_t i = 0; i < fp->count; i++) out->write_bytes += fp->ranges[i].size;
    for (size_t i = 0; i < o->live_count; i++)
        if (o->live[i].graph_id == fp->graph_id) {
            out->live_output_bytes += o->live[i].size;
            out->live_outputs++;
        }
    /* Shared: fp's bytes that any other footprint meets, each counted once
     * (the intersections with every other footprint, merged). */
    size_t n = 0, cap = 0;
    for (const cpool__footprint *f = o->footprints; f; f = f->next)
        if (f != fp) cap += f->count + fp->count;
    if (!cap) return CPOOL_OK;
    span *spans = cpool__malloc(cap * sizeof *spans);
    if (!spans) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory counting a graph's shared memory");
    for (const cpool__footprint *f = o->footprints; f; f = f->next) {
        if (f == fp) continue;
        for (size_t i = 0, k = 0; i < fp->count && k < f->count;) { /* both sorted and disjoint */
            uintptr_t a0 = fp->ranges[i].addr, a1 = a0 + fp->ranges[i].size;
            uintptr_t b0 = f->ranges[k].addr, b1 = b0 + f->ranges[k].size;
            uintptr_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
            if (lo < hi) spans[n++] = (span){lo, hi};
            if (a1 < b1)
                i++;
            else
                k++;
        }
    }
    qsort(spans, n, sizeof *spans, span_by_addr);
    uintptr_t covered_to = 0;
    for (size_t i = 0; i < n; i++) {
        uintptr_t lo = spans[i].addr > covered_to ? spans[i].addr : covered_to;
        if (spans[i].end > lo) out->shared_write_bytes += spans[i].end - lo;
        if (spans[i].end > covered_to) covered_to = spans[i].end;
    }
    free(spans);
    return CPOOL_OK;
}
