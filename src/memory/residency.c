/*
 * A pool's memory off the device and back (see residency.h).
 *
 * Only live bytes travel: the live blocks of the allocator and of every
 * arena, in address order, with small gaps between neighbours copied too
 * (a copy per block would cost more than a few KiB of dead bytes). A gap
 * is never as large as a page, so it lies on the two pages of its
 * neighbours, which hold live bytes and are mapped.
 */
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "residency.h"
#include "status.h"

/* A run of live bytes kept on the host: at `offset` in the host copy. */
struct cpool__kept_run {
    uintptr_t addr;
    size_t bytes, offset;
};

/* Neighbouring live blocks at most this far apart are copied as one run. */
#define MERGE_GAP ((size_t)64 << 10)

void cpool__residency_init(cpool__residency *r, const cpool__backend *be, cpool__bdevice *dev) {
    *r = (cpool__residency){.be = be, .dev = dev};
}

static void free_host(cpool__residency *r) {
    if (r->host) r->be->host_free(r->dev, r->host);
    r->host = NULL;
    r->host_bytes = 0;
}

static void end_copies(cpool__residency *r) {
    if (r->copies) r->be->stream_destroy(r->copies);
    r->copies = NULL;
}

void cpool__residency_destroy(cpool__residency *r) {
    free_host(r);
    end_copies(r);
    free(r->runs);
    *r = (cpool__residency){0};
}

void cpool__residency_trim(cpool__residency *r) {
    if (r->suspended) return;
    free_host(r);
    end_copies(r);
}

/* ---- what is mapped, what is live ------------------------------------------ */

typedef struct range_list {
    cpool__kept_run *at;
    size_t count, cap;
    bool failed;
} range_list;

static void add_range(range_list *l, uintptr_t addr, size_t bytes) {
    if (!cpool__grow((void **)&l->at, &l->cap, sizeof *l->at, l->count + 1, 64))
        l->failed = true;
    else
        l->at[l->count++] = (cpool__kept_run){.addr = addr, .bytes = bytes};
}

static void note_run(void *ctx, uintptr_t base, size_t size) { add_range(ctx, base, size); }
static void note_live(void *ctx, const cpool__block_view *b) {
    if (b->live) add_range(ctx, b->addr, b->size);
}
static void note_block(void *ctx, const cpool__block_view *b) {
    range_list *l = ctx;
    add_range(l, b->addr, b->size);
    if (!l->failed) l->at[l->count - 1].offset = !b->live; /* here: whether the block is free */
}

static int by_addr(const void *x, const void *y) {
    uintptr_t a = ((const cpool__kept_run *)x)->addr, b = ((const cpool__kept_run *)y)->addr;
    return a < b ? -1 : a > b;
}

/* Sorts a list by address; an empty one may have no array, which qsort
 * must not be handed. */
static void sort_by_addr(range_list *l) {
    if (l->count) qsort(l->at, l->count, sizeof *l->at, by_addr);
}

/* The allocator's mapped runs (growable segments). */
static cpool_status mapped_runs(const cpool__allocator *a, range_list *out) {
    cpool__allocator_walk(a, &(cpool__walker){.ctx = out, .segment = note_run});
    return out->failed ? cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory listing a pool's pages") : CPOOL_OK;
}

/* The stretches a resume maps apart (map_run), in address order: each live
 * block, and each stretch of free neighbours (`offset` is 1 on those). */
static cpool_status block_stretches(const cpool__allocator *a, range_list *out) {
    cpool__allocator_walk(a, &(cpool__walker){.ctx = out, .block = note_block});
    if (out->failed) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory listing a pool's blocks");
    sort_by_addr(out);
    size_t n = 0;
    for (size_t i = 0; i < out->count; i++) {
        cpool__kept_run *prev = n ? &out->at[n - 1] : NULL;
        if (out->at[i].offset && prev && prev->offset && prev->addr + prev->bytes == out->at[i].addr) {
            prev->bytes += out->at[i].bytes; /* free after free: one stretch */
            continue;
        }
        out->at[n++] = out->at[i];
    }
    out->count = n;
    return CPOOL_OK;
}

/* The live blocks, merged into runs, with their offsets in the host copy. */
static cpool_status live_runs(const cpool__allocator *a, const cpool__graph_pages *gp, range_list *out,
                              uint64_t *total, uint64_t *live_bytes) {
    cpool__walker w = {.ctx = out, .block = note_live};
    cpool__allocator_walk(a, &w);
    cpool__graph_pages_walk_live(gp, &w);
    if (out->failed) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory listing a pool's live blocks");
    sort_by_addr(out);
    *live_bytes = 0;
    for (size_t i = 0; i < out->count; i++) *live_bytes += out->at[i].bytes;
    size_t n = 0;
    *total = 0;
    for (size_t i = 0; i < out->count; i++) {
        cpool__kept_run *prev = n ? &out->at[n - 1] : NULL;
        if (prev && out->at[i].addr - (prev->addr + prev->bytes) <= MERGE_GAP) {
            size_t grown = out->at[i].addr + out->at[i].bytes - prev->addr;
            *total += grown - prev->bytes;
            prev->bytes = grown;
            continue;
        }
        out->at[n] = out->at[i];
        out->at[n].offset = (size_t)*total;
        *total += out->at[n].bytes;
        n++;
    }
    out->count = n;
    return CPOOL_OK;
}

/* ---- copies ---------------------------------------------------------------- */

/* The copies' stream, made on first use. */
static cpool_status copy_stream(cpool__residency *r) {
    return r->copies ? CPOOL_OK : r->be->stream_create(r->dev, NULL, false, &r->copies);
}

/* Copies every run to the host copy and waits for them (the way back is a
 * resume's, `restore` below). */
static cpool_status copy_to_host(cpool__residency *r, const cpool__kept_run *runs, size_t count) {
    if (!count) return CPOOL_OK;
    cpool_status st = copy_stream(r);
    if (st != CPOOL_OK) return st;
    for (size_t i = 0; i < count && st == CPOOL_OK; i++)
        st = r->be->memcpy_async(r->copies, (char *)r->host + runs[i].offset, (void *)runs[i].addr, runs[i].bytes);
    cpool_status synced = r->be->stream_synchronize(r->copies);
    return st != CPOOL_OK ? st : synced;
}

static void unmap_runs(cpool__residency *r, const range_list *runs, size_t count) {
    for (size_t i = 0; i < count; i++) r->be->pages_unmap(r->dev, (void *)runs->at[i].addr, runs->at[i].bytes);
}

/* Each run of pages comes back as allocations of up to RESUME_UNIT_MAX,
 * whatever it was before (README, Large allocations): on an H100 one of
 * 32 GiB took 111 ms to map, 32 of 1 GiB 20 ms, 16 GiB in one 0.5 ms
 * (bench/wake_bench.cu). */
#define RESUME_UNIT_MAX ((size_t)2 << 30)

static cpool_status map_joined(cpool__residency *r, uintptr_t addr, size_t bytes) {
    for (size_t done = 0; done < bytes;) {
        size_t piece = bytes - done < RESUME_UNIT_MAX ? bytes - done : RESUME_UNIT_MAX;
        cpool_status st = r->be->pages_map(r->dev, (void *)(addr + done), piece, true);
        if (st != CPOOL_OK) {
            if (done) r->be->pages_unmap(r->dev, (void *)addr, done);
            return st;
        }
        done += piece;
    }
    return CPOOL_OK;
}

/* The whole pages of a block, or of a stretch of free ones, at least this
 * large come back as allocations of their own, so that a trim can give
 * them back once that block is free: a cut adds at most 4% to a KEEP
 * block's copy (README, Large allocations). */
#define RESUME_CUT_MIN ((size_t)64 << 20)

/* Maps the run [addr, addr + bytes), cut around the stretches of `cuts`
 * (sorted; *next: the first not yet behind this run) that hold
 * RESUME_CUT_MIN of whole pages. On failure nothing of the run is mapped. */
static cpool_status map_run(cpool__residency *r, uintptr_t addr, size_t bytes, const range_list *cuts, size_t *next) {
    const uintptr_t end = addr + bytes, page = CPOOL__PAGE_BYTES;
    uintptr_t at = addr; /* [addr, at) is mapped */
    cpool_status st = CPOOL_OK;
    for (; *next < cuts->count && cuts->at[*next].addr < end; ++*next) {
        const cpool__kept_run *f = &cuts->at[*next];
        uintptr_t lo = f->addr > at ? f->addr : at, hi = f->addr + f->bytes < end ? f->addr + f->bytes : end;
        lo = (lo + page - 1) / page * page;
        hi = hi / page * page;
        if (hi > lo && hi - lo >= RESUME_CUT_MIN) {
            if (lo > at && (st = map_joined(r, at, lo - at)) != CPOOL_OK) break;
            at = lo;
            if ((st = map_joined(r, lo, hi - lo)) != CPOOL_OK) break;
            at = hi;
        }
        if (f->addr + f->bytes > end) break; /* it reaches the next run too */
    }
    if (st == CPOOL_OK && at < end) st = map_joined(r, at, end - at);
    if (st != CPOOL_OK && at > addr) r->be->pages_unmap(r->dev, (void *)addr, at - addr);
    return st;
}

/* ---- suspend and resume --------------------------------------------------- */

cpool_status cpool__residency_suspend(cpool__residency *r, cpool__allocator *a, cpool__graph_pages *gp, bool keep) {
    if (r->suspended) return CPOOL_OK;
    range_list mapped = {0}, live = {0};
    uint64_t total = 0, live_bytes = 0;
    bool new_host = false;
    cpool_status st = mapped_runs(a, &mapped);
    if (st == CPOOL_OK && keep) st = live_runs(a, gp, &live, &total, &live_bytes);
    /* The host copy: the one kept since the last resume if it is large
     * enough, else a new one (the old goes first: memory may be short). */
    if (st == CPOOL_OK && total > r->host_bytes) {
        free_host(r);
        st = r->be->host_alloc(r->dev, (size_t)total, &r->host);
        if (st == CPOOL_OK) r->host_bytes = (size_t)total;
        new_host = st == CPOOL_OK;
    }
    if (st == CPOOL_OK) st = copy_to_host(r, live.at, live.count);
    if (st != CPOOL_OK) {
        /* Nothing changed: a host copy made for this suspend goes too. */
        if (new_host) free_host(r);
        free(mapped.at);
        free(live.at);
        return st;
    }
    unmap_runs(r, &mapped, mapped.count);
    cpool__graph_pages_suspend(gp);
    free(mapped.at);
    free(r->runs);
    r->runs = live.at;
    r->run_count = live.count;
    r->kept_bytes = live_bytes; /* the gaps copied between neighbours are not live bytes */
    r->suspended = true;
    return CPOOL_OK;
}

/* A resume's copies back, started run by run as the memory under them is
 * mapped, so that the driver maps the next pieces while the first bytes
 * travel: on a KEEP pool the mapping hides behind the copy. */
typedef struct restore {
    cpool__residency *r;
    bool *sent;      /* per kept run: its copy is queued (NULL: nothing to copy) */
    size_t next;     /* the first kept run not yet passed (runs and kept runs go up by address) */
    cpool_status st; /* the first copy refused */
} restore;

static cpool_status restore_open(restore *c, cpool__residency *r) {
    *c = (restore){.r = r};
    if (!r->run_count) return CPOOL_OK;
    c->sent = cpool__calloc(r->run_count, sizeof *c->sent);
    if (!c->sent) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for a resume's copies");
    cpool_status st = copy_stream(r);
    if (st != CPOOL_OK) {
        free(c->sent);
        c->sent = NULL;
    }
    return st;
}

static void restore_run(restore *c, size_t i) {
    const cpool__kept_run *k = &c->r->runs[i];
    if (c->sent[i] || c->st != CPOOL_OK) return;
    c->st = c->r->be->memcpy_async(c->r->copies, (void *)k->addr, (char *)c->r->host + k->offset, k->bytes);
    c->sent[i] = c->st == CPOOL_OK;
}

/* Queues the copies of the kept runs inside the run [lo, hi) just mapped
 * (runs come in address order). The others, in graph memory or across
 * two runs, restore_rest queues once everything is mapped. */
static void restore_within(restore *c, uintptr_t lo, uintptr_t hi) {
    for (; c->next < c->r->run_count && c->r->runs[c->next].addr < hi; c->next++) {
        const cpool__kept_run *k = &c->r->runs[c->next];
        if (k->addr >= lo && k->addr + k->bytes <= hi) restore_run(c, c->next);
    }
}

/* Queues every copy not queued yet. */
static void restore_rest(restore *c) {
    for (size_t i = 0; i < c->r->run_count; i++) restore_run(c, i);
}

/* Waits for the queued copies; the first failure, if any. */
static cpool_status restore_close(restore *c) {
    if (!c->sent) return CPOOL_OK;
    cpool_status synced = c->r->be->stream_synchronize(c->r->copies);
    free(c->sent);
    return c->st != CPOOL_OK ? c->st : synced;
}

cpool_status cpool__residency_resume(cpool__residency *r, cpool__allocator *a, cpool__graph_pages *gp) {
    if (!r->suspended) return CPOOL_OK;
    range_list mapped = {0}, cuts = {0};
    restore copies;
    cpool_status st = mapped_runs(a, &mapped);
    sort_by_addr(&mapped); /* as the stretches, which map_run walks beside them */
    if (st == CPOOL_OK) st = block_stretches(a, &cuts);
    if (st == CPOOL_OK) st = restore_open(&copies, r);
    if (st != CPOOL_OK) {
        free(mapped.at);
        free(cuts.at);
        return st;
    }
    size_t done = 0, next_cut = 0;
    for (; st == CPOOL_OK && done < mapped.count; done++) {
        const cpool__kept_run *m = &mapped.at[done];
        st = map_run(r, m->addr, m->bytes, &cuts, &next_cut);
        if (st != CPOOL_OK) break;
        if (copies.sent) restore_within(&copies, m->addr, m->addr + m->bytes);
    }
    free(cuts.at);
    bool graphs = st == CPOOL_OK && (st = cpool__graph_pages_resume(gp)) == CPOOL_OK;
    if (graphs && copies.sent) restore_rest(&copies); /* graph memory's live blocks */
    cpool_status copied = restore_close(&copies); /* also on failure: no copy may outlive its memory */
    if (st == CPOOL_OK && copied != CPOOL_OK) {
        st = copied;
        cpool__graph_pages_suspend(gp);
    }
    if (st != CPOOL_OK) {
        unmap_runs(r, &mapped, done);
        free(mapped.at);
        return st;
    }
    free(mapped.at);
    free(r->runs);
    r->runs = NULL;
    r->run_count = 0;
    r->kept_bytes = 0;
    r->suspended = false;
    return CPOOL_OK;
}

