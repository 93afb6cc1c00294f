/*
 * Graph memory shared by pages (graph_pages.h has the contract and the
 * states): arenas' lives (open, release, idle, given back), the packed
 * region, what arenas hold, the invariants, and suspend and resume.
 * pages_internal.h lists the files below this one.
 */
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "pages_internal.h"
#include "status.h"
#include "thread.h"

void cpool__graph_pages_init(cpool__graph_pages *gp, const cpool__page_source *source, uint64_t max_reserved,
                             const uint64_t *other_reserved, cpool__order *order) {
    *gp = (cpool__graph_pages){
        .source = *source, .max_reserved = max_reserved, .other_reserved = other_reserved, .order = order};
}

/* ---- arenas ----------------------------------------------------------------- */

static void arena_destroy(cpool__arena *ar) {
    cpool__order_mark_release(ar->work);
    cpool__allocator_destroy(&ar->alloc);
    cpool__span_list_free(&ar->spans);
    free(ar->taken);
    free(ar->packed);
    free(ar->deferred);
    free(ar->scratch);
    free(ar);
}

/* Memory that work may use: mapped runs, or plain segments. */
static bool holds_memory(const cpool__arena *ar) { return ar->alloc.segment_count != 0 || ar->packed_held; }

/* A released arena's packed blocks (freed under its key) are free for any
 * capture once the work marked at its release is over: a launch of its
 * graph still running, or work on the stream an output was freed on,
 * may write them until then. */
static void packed_free_for_all(cpool__graph_pages *gp, cpool__arena *ar) {
    ar->packed_held = false;
    if (gp->packed) cpool__allocator_retag_branch(&gp->packed->alloc, ar->packed_key, UINT64_MAX, CPOOL__KEY_ANY);
}

static void release_packed(cpool__graph_pages *gp, cpool__arena *ar) {
    if (ar->packed_held && !ar->in_use && cpool__arena_work_over(ar)) packed_free_for_all(gp, ar);
}

void cpool__graph_pages_release_packed(cpool__graph_pages *gp) {
    for (cpool__arena *ar = gp->arenas; ar; ar = ar->next) release_packed(gp, ar);
}

/* The arena was let go of, or just became idle: work enqueued while it
 * was held (its graph's launches, eager work on its outputs before their
 * frees) may still use its memory, and a capture that took it, or split a
 * run of its pages, could move them meanwhile. */
static void mark_work(cpool__graph_pages *gp, cpool__arena *ar) {
    cpool__order_mark_release(ar->work);
    ar->work = holds_memory(ar) ? cpool__order_mark_now(gp->order) : NULL;
    ar->work_unknown = holds_memory(ar) && !ar->work;
    ar->work_frees = cpool__free_clock_tick();
}

/* The runs that other arenas map too, or that reach past this arena's
 * pages (both made by a resume), become pages alone, if no work can use
 * them: a capture in this arena must be free to swap, split and renumber
 * its pages without touching other graphs', and to map where no page of
 * its own is. */
static bool runs_alone(cpool__graph_pages *gp, cpool__arena *ar) {
    for (size_t s = 0; s < ar->spans.count; s++) {
        cpool__page_span *sp = &ar->spans.spans[s];
        for (size_t i = 0; i < sp->pages; i++) {
            cpool__page_run *run = cpool__run_starting_at(gp, sp, i);
            if (run && !cpool__run_alone_in_one(run) && !cpool__run_split_quiet(gp, run, ar, 0, run->pages)) return false;
        }
    }
    return true;
}

/* An idle arena a capture may take: its marked work is over (queried, never
 * waited for), or it holds no memory for that work to use, and its
 * borrowed pages could go back. The work before its blocks' frees being
 * over too, they are free for any stream. An arena that lost a page (its
 * allocator still counts it) is never taken again. */
static bool reusable(cpool__graph_pages *gp, cpool__arena *ar) {
    if (!cpool__arena_idle(ar) || atomic_load(&ar->lost)) return false;
    if (holds_memory(ar) && !cpool__arena_work_over(ar)) return false;
    if (!runs_alone(gp, ar)) return false;
    release_packed(gp, ar);
    if (cpool__seal_return_borrowed(gp, ar) != CPOOL_OK) return false;
    if (ar->work) cpool__allocator_unfence_all(&ar->alloc, ar->work_frees);
    cpool__order_mark_release(ar->work);
    ar->work = NULL;
    ar->work_unknown = false;
    return true;
}

static cpool_status arena_new(cpool__graph_pages *gp, cpool__arena **out) {
    cpool__arena *ar = cpool__calloc(1, sizeof *ar);
    if (!ar) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for a graph's arena");
    ar->gp = gp;
    ar->id = ++gp->next_arena_id;
    ar->in_use = true;
    cpool__arena_map_init(ar);
    *out = ar;
    return CPOOL_OK;
}

/* Idle, and the work marked at its release over (queried, never waited
 * for), or none to wait for. */
static bool quiet(const cpool__arena *ar) { return cpool__arena_idle(ar) && cpool__arena_work_over(ar); }

/* Quiet arenas need no pages apart: they go back, their addresses and the
 * shared pages no other arena maps, all but the newest where `keep_newest`
 * (it stays for the next capture to take as it is). Graphs released while
 * their launches ran leave such arenas, each on pages of its own (their
 * runs could not be shared meanwhile). Never waits; nothing on a thread
 * that runs stream work, where the platform may not be called; nothing
 * while suspended, whose resume maps back what its suspend gave (a trim
 * after the resume gives the rest). */
static void give_back_quiet_arenas(cpool__graph_pages *gp, bool keep_newest) {
    if (gp->suspended || cpool__on_stream_thread()) return;
    bool kept = !keep_newest, gone = false;
    for (cpool__arena **at = &gp->arenas; *at;) {
        cpool__arena *ar = *at;
        bool is_quiet = quiet(ar);
        if (!is_quiet || !kept) {
            kept = kept || is_quiet;
            at = &ar->next;
            continue;
        }
        *at = ar->next;
        gp->arena_count--;
        release_packed(gp, ar);
        arena_destroy(ar);
        gone = true;
    }
    if (gone) cpool__runs_shed_spare(gp); /* what only its pages mapped of others' runs */
}

/* The physical bytes that idle arenas (only the quiet ones, with
 * quiet_only) hold and no other arena maps: their pages of their own, and
 * the shared pages only they map. */
typedef struct idle_bytes {
    uint64_t own, shared;
} idle_bytes;

static uint64_t own_page_bytes(const cpool__arena *ar) {
    uint64_t bytes = ar->plain_bytes;
    for (size_t s = 0; s < ar->spans.count; s++)
        for (size_t i = 0; i < ar->spans.spans[s].pages; i++)
            if (ar->spans.spans[s].page[i].state == CPOOL__PAGE_OWN) bytes += CPOOL__PAGE;
    return bytes;
}

static idle_bytes idle_only_bytes(const cpool__graph_pages *gp, bool quiet_only) {
    idle_bytes bytes = {0};
    uint8_t *held = gp->shared_count ? cpool__calloc(gp->shared_count, 1) : NULL;
    if (gp->shared_count && !held) return bytes; /* an estimate only: none */
    for (const cpool__arena *ar = gp->arenas; ar; ar = ar->next) {
        if (quiet_only ? quiet(ar) : cpool__arena_idle(ar)) {
            bytes.own += own_page_bytes(ar);
            continue;
        }
        for (size_t d = 0; d < ar->taken_cap && d < gp->shared_count; d++)
            if (ar->taken[d] == CPOOL__NUMBER_TAKEN) held[d] = 1;
    }
    for (size_t k = 0; k < gp->shared_count; k++)
        if (gp->shared[k].page && gp->shared[k].maps && !held[k]) bytes.shared += CPOOL__PAGE;
    free(held);
    return bytes;
}

uint64_t cpool__graph_pages_give_back_idle(cpool__graph_pages *gp, bool keep_newest, uint64_t *waiting_out) {
    uint64_t before = gp->shared_bytes + gp->own_bytes;
    give_back_quiet_arenas(gp, keep_newest);
    if (waiting_out) {
        idle_bytes waiting = idle_only_bytes(gp, false);
        *waiting_out = waiting.own + waiting.shared;
    }
    return before - gp->shared_bytes - gp->own_bytes;
}

uint64_t cpool__graph_pages_predict(const cpool__graph_pages *gp, uint64_t scratch_bytes, uint64_t output_bytes) {
    /* The capture's open gives back the quiet idle arenas but one, which it
     * takes, and whose pages no live block is on go back at its seal: as
     * if all of them went, and a new arena took their place. */
    idle_bytes going = gp->suspended ? (idle_bytes){0} : idle_only_bytes(gp, true);
    uint64_t own_new = (output_bytes + CPOOL__PAGE - 1) / CPOOL__PAGE;
    uint64_t shared_new = (output_bytes + scratch_bytes + CPOOL__PAGE - 1) / CPOOL__PAGE - own_new;
    uint64_t shared_now = (gp->shared_bytes - going.shared) / CPOOL__PAGE;
    uint64_t shared = shared_now > shared_new ? shared_now : shared_new;
    return gp->own_bytes - going.own + (shared + own_new) * CPOOL__PAGE;
}

/* An idle arena taken again: its last capture's notes go. */
static void arena_reopen(cpool__arena *ar) {
    ar->in_use = true;
    ar->scratch_count = 0;                    /* its last capture's blocks are gone */
    cpool__allocator_share_spans(&ar->alloc); /* its last capture's branches' */
    for (size_t d = 0; d < ar->taken_cap; d++) /* what its last capture found in use */
        if (ar->taken[d] == CPOOL__NUMBER_BLOCKED) cpool__number_untake(ar, d);
    ar->unsettled = false;
}

cpool_status cpool__graph_pages_open(cpool__graph_pages *gp, cpool__stream_key packed_key, cpool__arena **out) {
    cpool__graph_pages_release_packed(gp);
    give_back_quiet_arenas(gp, true);
    /* A suspended pool's idle arenas map nothing now: a seal must find
     * nothing to move, so only a new arena will do. */
    cpool__arena *ar = gp->suspended ? NULL : gp->arenas;
    cpool__error_mark before;
    cpool__error_save(&before);
    while (ar && !reusable(gp, ar)) ar = ar->next;
    cpool__error_restore(&before);
    if (ar) {
        arena_reopen(ar);
    } else {
        cpool_status st = arena_new(gp, &ar);
        if (st != CPOOL_OK) return st;
        ar->next = gp->arenas;
        gp->arenas = ar;
        gp->arena_count++;
    }
    ar->packed_key = packed_key;
    *out = ar;
    return CPOOL_OK;
}

cpool_status cpool__graph_pages_packed(cpool__graph_pages *gp, cpool__allocator **out) {
    if (!gp->packed) {
        cpool__packed_region *pr = cpool__calloc(1, sizeof *pr);
        if (!pr) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory for the packed region");
        *pr = (cpool__packed_region){.gp = gp, .id = ++gp->next_arena_id};
        cpool__packed_map_init(pr);
        gp->packed = pr;
    }
    *out = &gp->packed->alloc;
    return CPOOL_OK;
}

/* ---- what an arena notes ------------------------------------------------------ */

static cpool_status note_pointer(uintptr_t **list, size_t *count, size_t *cap, void *ptr) {
    if (!cpool__grow((void **)list, cap, sizeof **list, *count + 1, 8))
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory noting a graph's block");
    (*list)[(*count)++] = (uintptr_t)ptr;
    return CPOOL_OK;
}

cpool_status cpool__arena_note_packed(cpool__arena *ar, void *ptr) {
    return note_pointer(&ar->packed, &ar->packed_count, &ar->packed_cap, ptr);
}

cpool_status cpool__arena_defer_free(cpool__arena *ar, void *ptr, size_t requested) {
    cpool_status st = note_pointer(&ar->deferred, &ar->deferred_count, &ar->deferred_cap, ptr);
    if (st == CPOOL_OK) ar->deferred_requested += requested;
    return st;
}

size_t cpool__arena_take_deferred(cpool__arena *ar, uintptr_t **out) {
    size_t n = ar->deferred_count;
    *out = ar->deferred;
    ar->deferred = NULL;
    ar->deferred_count = ar->deferred_cap = 0;
    ar->deferred_requested = 0;
    return n;
}

bool cpool__graph_pages_deferred(const cpool__graph_pages *gp, const void *ptr) {
    for (const cpool__arena *ar = gp->arenas; ar; ar = ar->next)
        for (size_t i = 0; i < ar->deferred_count; i++)
            if (ar->deferred[i] == (uintptr_t)ptr) return true;
    return false;
}

cpool__arena *cpool__graph_pages_packed_freed(cpool__graph_pages *gp, const void *ptr) {
    cpool__arena *ar = (cpool__arena *)cpool__graph_pages_packed_owner(gp, (uintptr_t)ptr);
    for (size_t i = 0; ar && i < ar->packed_count; i++)
        if (ar->packed[i] == (uintptr_t)ptr) ar->packed[i] = ar->packed[--ar->packed_count];
    return ar;
}

cpool__stream_key cpool__arena_packed_key(const cpool__arena *ar) { return ar->packed_key; }
cpool__allocator *cpool__arena_allocator(cpool__arena *ar) { return &ar->alloc; }
uint64_t cpool__arena_id(const cpool__arena *ar) { return ar->id; }
bool cpool__arena_in_use(const cpool__arena *ar) { return ar->in_use; }
uint64_t cpool__arena_graph(const cpool__arena *ar) { return ar->graph; }

bool cpool__arena_note_launch(cpool__arena *ar) {
    if (atomic_load_explicit(&ar->lost, memory_order_relaxed)) return false;
    if (!atomic_load_explicit(&ar->launched, memory_order_relaxed)) atomic_store(&ar->launched, true);
    return true;
}

/* ---- release, trim ------------------------------------------------------------ */

void cpool__arena_release(cpool__graph_pages *gp, cpool__arena *ar) {
    ar->in_use = false;
    ar->packed_held = gp->packed != NULL;
    atomic_store(&ar->launched, false); /* its next holder's launches count anew */
    ar->released = ++gp->release_clock;
    ar->graph = 0;
    /* With outputs still live too: a capture that splits a run of its
     * pages must wait for its launches (page_runs.c). */
    mark_work(gp, ar);
}

void cpool__arena_freed(cpool__graph_pages *gp, cpool__arena *ar) {
    /* A graph's freed output: its pages may go back to sharing (settle). */
    if (ar->graph && gp->own_bytes) ar->unsettled = gp->unsettled = true;
    if (!cpool__arena_idle(ar)) return; /* held, or still live blocks: its last free marks */
    ar->released = ++gp->release_clock;
    mark_work(gp, ar);
}

void cpool__graph_pages_settle(cpool__graph_pages *gp) {
    give_back_quiet_arenas(gp, true);
    if (gp->unsettled) cpool__seal_settle_graphs(gp);
}

static bool released_since(const cpool__graph_pages *gp, uint64_t released_by) {
    for (const cpool__arena *ar = gp->arenas; ar; ar = ar->next)
        if (ar->released > released_by) return true;
    return false;
}

/* The packed region after a trim's arenas (those given back ended their
 * loans): no graph or capture can run or write there (no_holder), free
 * packed blocks have no owner left. Else only those no graph keeps (freed
 * in a capture: its graph's until its release; an output freed while its
 * graph lives: that graph's) go, once every release that freed some came
 * before the device was quiesced: a graph released since may still run. */
static void trim_packed(cpool__graph_pages *gp, uint64_t released_by, bool no_holder) {
    if (!gp->packed) return;
    if (no_holder)
        cpool__allocator_reclaim_graph(&gp->packed->alloc);
    else if (!released_since(gp, released_by))
        cpool__allocator_reclaim_unkept(&gp->packed->alloc);
    cpool__allocator_trim(&gp->packed->alloc);
}

uint64_t cpool__graph_pages_trim(cpool__graph_pages *gp, uint64_t upto, uint64_t released_by, bool no_holder) {
    uint64_t before = gp->shared_bytes + gp->own_bytes;
    for (cpool__arena *ar = gp->arenas; ar; ar = ar->next) cpool__allocator_unfence_all(&ar->alloc, upto);
    if (gp->packed) cpool__allocator_unfence_all(&gp->packed->alloc, upto);
    cpool__seal_settle_graphs(gp);
    for (cpool__arena **at = &gp->arenas; *at;) {
        cpool__arena *ar = *at;
        bool quiesced = !ar->in_use && ar->released <= released_by;
        /* Released before the device was quiesced: its packed blocks are
         * free for any capture. */
        if (quiesced && ar->packed_held) packed_free_for_all(gp, ar);
        if (quiesced && !cpool__arena_idle(ar)) {
            /* A released graph's outputs live on: the pages of its scratch
             * (no work uses them now) go, those of its outputs stay. */
            cpool__allocator_reclaim_graph(&ar->alloc);
            cpool__allocator_trim(&ar->alloc);
        }
        if (!cpool__arena_idle(ar) || ar->released > released_by) {
            at = &ar->next;
            continue;
        }
        *at = ar->next;
        gp->arena_count--;
        arena_destroy(ar);
    }
    trim_packed(gp, released_by, no_holder);
    cpool__runs_shed_spare(gp);
    cpool__shared_release_unmapped(gp, 0, gp->shared_count);
    return before - gp->shared_bytes - gp->own_bytes;
}

void cpool__graph_pages_destroy(cpool__graph_pages *gp) {
    while (gp->arenas) { /* first: their loans end in the packed region */
        cpool__arena *ar = gp->arenas;
        gp->arenas = ar->next;
        arena_destroy(ar);
    }
    if (gp->packed) {
        cpool__allocator_destroy(&gp->packed->alloc);
        cpool__span_list_free(&gp->packed->spans);
        free(gp->packed);
    }
    for (size_t k = 0; k < gp->shared_count; k++) {
        cpool__page_run *run = gp->shared[k].run;
        if (cpool__shared_allocation_at(gp, k)) cpool__pages_release(gp, gp->shared[k].page);
        if (run && run->first + run->pages == k + 1) cpool__run_free(run);
    }
    free(gp->shared);
    *gp = (cpool__graph_pages){0};
}

/* ---- what arenas hold ------------------------------------------------------- */

cpool__graph_live cpool__graph_pages_live(const cpool__graph_pages *gp) {
    cpool__graph_live live = {0};
    if (gp->packed) {
        /* Less the bytes lent to arenas' tails: their scratch. */
        const cpool__packed_region *pr = gp->packed;
        live.runs += pr->alloc.segment_count;
        live.bytes += pr->alloc.live_block_bytes - pr->lent_bytes;
        live.requested += pr->alloc.allocated - pr->lent_bytes;
        live.blocks += pr->alloc.map_count - pr->lent_blocks;
    }
    for (const cpool__arena *ar = gp->arenas; ar; ar = ar->next) {
        live.runs += ar->alloc.segment_count;
        live.bytes += ar->alloc.live_block_bytes;
        /* Less the blocks of deferred frees: their callers freed them. */
        live.requested += ar->alloc.allocated - ar->deferred_requested;
        live.blocks += ar->alloc.map_count - ar->deferred_count;
    }
    return live;
}

cpool__arena *cpool__graph_pages_find(const cpool__graph_pages *gp, const void *ptr) {
    uintptr_t a = (uintptr_t)ptr;
    for (cpool__arena *ar = gp->arenas; ar; ar = ar->next) {
        if (cpool__span_of(&ar->spans, a)) return ar;
        if (ar->plain_bytes) {
            cpool__block_info info;
            if (cpool__allocator_live_block(&ar->alloc, ptr, &info)) return ar;
        }
    }
    return NULL;
}

bool cpool__graph_pages_holds(const cpool__graph_pages *gp, uintptr_t addr) {
    return (gp->packed && cpool__span_of(&gp->packed->spans, addr)) || cpool__graph_pages_find(gp, (const void *)addr);
}

void cpool__arena_get_stats(const cpool__arena *ar, cpool__arena_stats *out) {
    *out = (cpool__arena_stats){.live_bytes = ar->alloc.live_block_bytes, .live_blocks = ar->alloc.map_count,
                                .mapped_bytes = ar->plain_bytes, .own_bytes = ar->plain_bytes,
                                .runs = ar->alloc.segment_count};
    cpool__block_info info;
    /* Not its blocks that a capture freed and defers (freed for callers). */
    for (const cpool__arena *o = ar->gp->arenas; o; o = o->next)
        for (size_t i = 0; i < o->deferred_count; i++)
            if (cpool__allocator_live_block(&ar->alloc, (void *)o->deferred[i], &info)) {
                out->live_bytes -= info.size;
                out->live_blocks--;
            }
    /* Its outputs in the pool's packed region. */
    for (size_t i = 0; i < ar->packed_count; i++) {
        if (!cpool__allocator_live_block(&ar->gp->packed->alloc, (void *)ar->packed[i], &info) ||
            cpool__graph_pages_deferred(ar->gp, (void *)ar->packed[i]))
            continue;
        out->live_bytes += info.size;
        out->live_blocks++;
    }
    for (size_t s = 0; s < ar->spans.count; s++)
        for (size_t i = 0; i < ar->spans.spans[s].pages; i++) {
            uint8_t state = ar->spans.spans[s].page[i].state;
            if (state == CPOOL__PAGE_UNMAPPED) continue;
            out->mapped_bytes += CPOOL__PAGE;
            if (state == CPOOL__PAGE_OWN)
                out->own_bytes += CPOOL__PAGE;
            else
                out->shared_bytes += CPOOL__PAGE;
        }
}

/* Own pages are numbered after every shared one: by owner (an arena or the
 * packed region) and place, unique in the pool. */
static uint64_t own_page_id(const cpool__graph_pages *gp, uint64_t owner, size_t s, size_t i) {
    return gp->shared_cap + owner * ((uint64_t)1 << 32) + ((uint64_t)s << 20) + i + 1;
}

void cpool__arena_walk_pages(const cpool__arena *ar, const cpool__page_walker *w) {
    const cpool__graph_pages *gp = ar->gp;
    for (size_t s = 0; s < ar->spans.count; s++) {
        const cpool__page_span *sp = &ar->spans.spans[s];
        for (size_t i = 0; i < sp->pages; i++) {
            const cpool__page *pg = &sp->page[i];
            uint64_t id = pg->number + 1;
            if (pg->state == CPOOL__PAGE_UNMAPPED) continue;
            if (pg->state == CPOOL__PAGE_OWN) id = own_page_id(gp, ar->id, s, i);
            if (pg->state == CPOOL__PAGE_BORROWED) { /* a packed page's, shared with it */
                const cpool__page_span *lsp = cpool__span_of(&gp->packed->spans, pg->lender);
                id = own_page_id(gp, gp->packed->id, (size_t)(lsp - gp->packed->spans.spans),
                                 cpool__page_index(lsp, pg->lender));
            }
            w->page(w->ctx, sp->base + i * CPOOL__PAGE, id, pg->state == CPOOL__PAGE_OWN,
                    pg->state == CPOOL__PAGE_BORROWED);
        }
    }
}

const cpool__arena *cpool__graph_pages_each(const cpool__graph_pages *gp, const cpool__arena *after) {
    return after ? after->next : gp->arenas;
}

void cpool__arena_walk(const cpool__arena *ar, const cpool__walker *w) { cpool__allocator_walk(&ar->alloc, w); }

void cpool__graph_pages_walk_packed(const cpool__graph_pages *gp, const cpool__walker *w) {
    if (gp->packed) cpool__allocator_walk(&gp->packed->alloc, w);
}

void cpool__graph_pages_walk_live(const cpool__graph_pages *gp, const cpool__walker *w) {
    cpool__graph_pages_walk_packed(gp, w);
    for (const cpool__arena *ar = gp->arenas; ar; ar = ar->next) cpool__allocator_walk(&ar->alloc, w);
}

const cpool__arena *cpool__graph_pages_packed_owner(const cpool__graph_pages *gp, uintptr_t ptr) {
    for (const cpool__arena *ar = gp->arenas; ar; ar = ar->next)
        for (size_t i = 0; i < ar->packed_count; i++)
            if (ar->packed[i] == ptr) return ar;
    return NULL;
}

/* ---- invariants ------------------------------------------------------------- */

/* What the checks count over every arena. */
typedef struct page_counts {
    uint32_t *maps; /* by shared number: the arena pages that map it */
    uint64_t own;   /* bytes of pages of their own */
    size_t borrowed;
} page_counts;

static void check_shared_page(const cpool__graph_pages *gp, const cpool__arena *ar, const cpool__page_span *sp,
                              size_t i, uint8_t *seen) {
    size_t d = sp->page[i].number;
    CPOOL__INVARIANT("graph pages", d < gp->shared_count && gp->shared[d].page,
                     "a mapped page has no shared page behind it");
    CPOOL__INVARIANT("graph pages", d < ar->taken_cap && ar->taken[d] == CPOOL__NUMBER_TAKEN,
                     "page number %zu is not noted taken", d);
    CPOOL__INVARIANT("graph pages", !seen || !seen[d], "two pages of one arena map shared page %zu", d);
    const cpool__page_run *run = gp->shared[d].run;
    const cpool__run_map *m = run ? cpool__run_map_of(run, ar) : NULL;
    CPOOL__INVARIANT("graph pages",
                     !run || (m && d >= run->first && d < run->first + m->used &&
                              m->addr + (d - run->first) * CPOOL__PAGE == sp->base + i * CPOOL__PAGE &&
                              run->mem == gp->shared[d].page && gp->shared[d].maps <= run->maps),
                     "shared page %zu is in a run that arena %llu does not map whole in order", d,
                     (unsigned long long)ar->id);
    if (seen) seen[d] = 1;
}

static void check_page(const cpool__graph_pages *gp, const cpool__arena *ar, const cpool__page_span *sp, size_t i,
                       uint8_t *seen, page_counts *c) {
    const cpool__page *pg = &sp->page[i];
    CPOOL__INVARIANT("graph pages", pg->state <= CPOOL__PAGE_BORROWED, "a page in no state (%u)", pg->state);
    CPOOL__INVARIANT("graph pages", (pg->mem != NULL) == (pg->state == CPOOL__PAGE_OWN || pg->state == CPOOL__PAGE_BORROWED),
                     "a page in state %u names memory %p", pg->state, pg->mem);
    if (pg->state == CPOOL__PAGE_BORROWED) {
        const cpool__page_span *lsp = gp->packed ? cpool__span_of(&gp->packed->spans, pg->lender) : NULL;
        size_t j = lsp ? cpool__page_index(lsp, pg->lender) : 0;
        CPOOL__INVARIANT("graph pages",
                         lsp && lsp->page[j].state == CPOOL__PAGE_OWN && lsp->page[j].mem == pg->mem && lsp->loan[j].lent,
                         "a page borrows from no lending packed page");
        c->borrowed++;
    } else if (pg->state == CPOOL__PAGE_OWN) {
        c->own += CPOOL__PAGE;
    } else if (pg->state == CPOOL__PAGE_SHARED) {
        check_shared_page(gp, ar, sp, i, seen);
        if (c->maps) c->maps[pg->number]++;
    }
}

/* Each mapping of a run: the arena's pages map its first `used` numbers
 * in order, and past them no page of the arena's is (spare, within the
 * span's reach). */
static void check_run(cpool__page_run *run) {
    const cpool__run_map *m = cpool__run_maps(run);
    CPOOL__INVARIANT("graph pages", run->maps >= 1, "run at number %zu is mapped nowhere", run->first);
    for (size_t x = 0; x < run->maps; x++) {
        const cpool__page_span *sp = cpool__span_of(&m[x].arena->spans, m[x].addr);
        size_t at = sp ? cpool__page_index(sp, m[x].addr) : 0;
        CPOOL__INVARIANT("graph pages", sp && m[x].used >= 1 && m[x].used <= run->pages && at + run->pages <= sp->reach,
                         "run at number %zu is mapped outside arena %llu's address space", run->first,
                         (unsigned long long)m[x].arena->id);
        for (size_t j = 0; j < run->pages && at + j < sp->pages; j++) {
            const cpool__page *pg = &sp->page[at + j];
            CPOOL__INVARIANT("graph pages",
                             j < m[x].used ? pg->state == CPOOL__PAGE_SHARED && pg->number == run->first + j
                                           : pg->state == CPOOL__PAGE_UNMAPPED,
                             "page %zu of run at number %zu in arena %llu is not as its mapping says", j, run->first,
                             (unsigned long long)m[x].arena->id);
        }
    }
}

/* Every page a live block of the arena lies on has memory behind it: a
 * failed swap or split keeps the old mapping (cpool__page_swap). */
static void check_backed(void *ctx, const cpool__block_view *b) {
    const cpool__arena *ar = ctx;
    if (!b->live || ar->plain_bytes) return;
    for (uintptr_t p = b->addr / CPOOL__PAGE * CPOOL__PAGE; p < b->addr + b->size; p += CPOOL__PAGE) {
        const cpool__page_span *sp = cpool__span_of(&ar->spans, p);
        CPOOL__INVARIANT("graph pages", sp && sp->page[cpool__page_index(sp, p)].state != CPOOL__PAGE_UNMAPPED,
                         "live block %#lx of arena %llu lies on an unbacked page %#lx", (unsigned long)b->addr,
                         (unsigned long long)ar->id, (unsigned long)p);
    }
}

static void check_arena(const cpool__graph_pages *gp, const cpool__arena *ar, page_counts *c, bool full) {
    if (full) {
        cpool__allocator_check(&ar->alloc);
        if (!atomic_load(&ar->lost)) /* a page not even mapped back: only a trim takes the arena */
            cpool__allocator_walk(&ar->alloc, &(cpool__walker){.ctx = (void *)ar, .block = check_backed});
    }
    CPOOL__INVARIANT("graph pages", (!ar->work && !ar->work_unknown) || !ar->in_use,
                     "arena %llu is held but keeps a mark of earlier work", (unsigned long long)ar->id);
    CPOOL__INVARIANT("graph pages", !cpool__arena_idle(ar) || !holds_memory(ar) || ar->work || ar->work_unknown,
                     "arena %llu is idle with memory but marked no work", (unsigned long long)ar->id);
    c->own += ar->plain_bytes;
    uint8_t *seen = ar->taken_cap ? calloc(ar->taken_cap, 1) : NULL;
    for (size_t s = 0; s < ar->spans.count; s++)
        for (size_t i = 0; i < ar->spans.spans[s].pages; i++) check_page(gp, ar, &ar->spans.spans[s], i, seen, c);
    for (size_t d = 0; seen && d < ar->taken_cap; d++)
        CPOOL__INVARIANT("graph pages", seen[d] == (ar->taken[d] == CPOOL__NUMBER_TAKEN),
                         "number %zu noted taken by no page", d);
    free(seen);
}

/* The packed region: pages of its own only, and loans that add up. */
static void check_packed(const cpool__packed_region *pr, page_counts *c) {
    cpool__allocator_check(&pr->alloc);
    size_t borrowers = 0;
    uint64_t lent = 0;
    c->own += pr->plain_bytes;
    for (size_t s = 0; s < pr->spans.count; s++)
        for (size_t j = 0; j < pr->spans.spans[s].pages; j++) {
            const cpool__page_span *lsp = &pr->spans.spans[s];
            CPOOL__INVARIANT("graph pages", lsp->page[j].state == CPOOL__PAGE_OWN || lsp->page[j].state == CPOOL__PAGE_UNMAPPED,
                             "a page of the packed region in state %u", lsp->page[j].state);
            CPOOL__INVARIANT("graph pages", !lsp->loan[j].borrowers == !lsp->loan[j].lent,
                             "a packed page lends %u bytes to %u pages", lsp->loan[j].lent, lsp->loan[j].borrowers);
            CPOOL__INVARIANT("graph pages", lsp->page[j].state == CPOOL__PAGE_OWN || !lsp->loan[j].lent,
                             "an unmapped packed page lends");
            c->own += lsp->page[j].state == CPOOL__PAGE_OWN ? CPOOL__PAGE : 0;
            borrowers += lsp->loan[j].borrowers;
            lent += lsp->loan[j].lent;
        }
    CPOOL__INVARIANT("graph pages", c->borrowed == borrowers && lent == pr->lent_bytes,
                     "%zu pages borrow, %zu counted; %llu bytes lent, %llu counted", c->borrowed, borrowers,
                     (unsigned long long)lent, (unsigned long long)pr->lent_bytes);
}

void cpool__graph_pages_check(const cpool__graph_pages *gp, bool full) {
    page_counts c = {.maps = gp->shared_count ? calloc(gp->shared_count, sizeof *c.maps) : NULL};
    size_t arenas = 0;
    for (const cpool__arena *ar = gp->arenas; ar; ar = ar->next, arenas++) check_arena(gp, ar, &c, full);
    if (gp->packed) check_packed(gp->packed, &c);
    CPOOL__INVARIANT("graph pages", gp->packed || !c.borrowed, "%zu pages borrow with no packed region", c.borrowed);
    uint64_t shared = 0;
    for (size_t k = 0; k < gp->shared_count; k++) {
        if (gp->shared[k].page) shared += CPOOL__PAGE;
        if (gp->shared[k].run && gp->shared[k].run->first == k) check_run(gp->shared[k].run);
        CPOOL__INVARIANT("graph pages", !c.maps || c.maps[k] == gp->shared[k].maps,
                         "shared page %zu is mapped %u times, counted %u", k, c.maps ? c.maps[k] : 0,
                         gp->shared[k].maps);
    }
    free(c.maps);
    CPOOL__INVARIANT("graph pages", arenas == gp->arena_count, "%zu arenas listed, %zu counted", arenas,
                     gp->arena_count);
    CPOOL__INVARIANT("graph pages", shared == gp->shared_bytes, "shared pages hold %llu bytes, counted %llu",
                     (unsigned long long)shared, (unsigned long long)gp->shared_bytes);
    CPOOL__INVARIANT("graph pages", c.own == gp->own_bytes, "own pages hold %llu bytes, counted %llu",
                     (unsigned long long)c.own, (unsigned long long)gp->own_bytes);
}

/* ---- suspend and resume ----------------------------------------------------- */

/* Every mapped page of the packed region, then of every arena, in one
 * order that the suspend and the resume share. */
typedef struct page_visit {
    const cpool__span_list *list; /* NULL: not started */
    cpool__arena *ar;             /* the arena of `list`; NULL: the packed region */
    size_t span, page;
} page_visit;

/* From one span list to the next: the packed region's, then each arena's. */
static void next_list(cpool__graph_pages *gp, page_visit *v) {
    v->ar = v->ar ? v->ar->next : gp->arenas;
    v->list = v->ar ? &v->ar->spans : NULL;
    v->span = v->page = 0;
}

static bool next_page(cpool__graph_pages *gp, page_visit *v) {
    if (!v->list) {
        v->ar = gp->packed ? NULL : gp->arenas;
        v->list = gp->packed ? &gp->packed->spans : v->ar ? &v->ar->spans : NULL;
        v->span = v->page = 0;
    } else {
        v->page++;
    }
    for (;; v->page++) {
        while (v->list && (v->span >= v->list->count || v->page >= v->list->spans[v->span].pages)) {
            if (v->span >= v->list->count) {
                next_list(gp, v);
            } else {
                v->span++;
                v->page = 0;
            }
        }
        if (!v->list) return false;
        if (v->list->spans[v->span].page[v->page].state != CPOOL__PAGE_UNMAPPED) return true;
    }
}

static cpool__page *visited(const page_visit *v) { return &v->list->spans[v->span].page[v->page]; }

static void *visited_addr(const page_visit *v) { return cpool__page_addr(&v->list->spans[v->span], v->page); }

/* The physical page behind a visited page now. */
static void **visited_memory(cpool__graph_pages *gp, const page_visit *v) {
    cpool__page *pg = visited(v);
    return pg->state == CPOOL__PAGE_SHARED ? &gp->shared[pg->number].page : &pg->mem;
}

/* Whether a visited page begins a mapping: a page alone, or a run's first
 * in its arena. */
static bool maps_here(const cpool__graph_pages *gp, const page_visit *v) {
    const cpool__page *pg = visited(v);
    const cpool__page_run *run = pg->state == CPOOL__PAGE_SHARED ? gp->shared[pg->number].run : NULL;
    return !run || cpool__run_map_of(run, v->ar)->addr == (uintptr_t)visited_addr(v);
}

/* The place of the packed page at addr among the own pages a resume makes:
 * the packed region's come first, in visiting order. */
static size_t packed_place(const cpool__graph_pages *gp, uintptr_t addr) {
    size_t n = 0;
    for (size_t s = 0; s < gp->packed->spans.count; s++) {
        const cpool__page_span *sp = &gp->packed->spans.spans[s];
        for (size_t j = 0; j < sp->pages; j++) {
            if (sp->base + j * CPOOL__PAGE == addr) return n;
            n += sp->page[j].state == CPOOL__PAGE_OWN;
        }
    }
    return n;
}

/* The new memory a resume maps at a visited page (*o: own pages so far). */
static void *resumed_memory(const cpool__graph_pages *gp, const page_visit *v, void **fresh_own, void **fresh_shared,
                            size_t *o) {
    const cpool__page *pg = visited(v);
    if (pg->state == CPOOL__PAGE_BORROWED) return fresh_own[packed_place(gp, pg->lender)];
    return pg->state == CPOOL__PAGE_OWN ? fresh_own[(*o)++] : fresh_shared[pg->number];
}

void cpool__graph_pages_suspend(cpool__graph_pages *gp) {
    if (gp->suspended) return;
    for (page_visit v = {0}; next_page(gp, &v);)
        if (maps_here(gp, &v)) gp->source.unmap(gp->source.ctx, visited_addr(&v), *visited_memory(gp, &v));
    for (page_visit v = {0}; next_page(gp, &v);)
        if (visited(&v)->state == CPOOL__PAGE_OWN) gp->source.release(gp->source.ctx, visited(&v)->mem);
    for (size_t k = 0; k < gp->shared_count; k++)
        if (cpool__shared_allocation_at(gp, k)) gp->source.release(gp->source.ctx, gp->shared[k].page);
    gp->suspended = true;
}

/* A failed resume: the first `mapped` mappings come down, and the
 * memory made for it goes back; the records stay as they were. */
static void resume_undo(cpool__graph_pages *gp, size_t mapped, size_t made, void **fresh_own, void **fresh_shared) {
    size_t o = 0;
    page_visit u = {0};
    for (size_t n = 0; n < mapped && next_page(gp, &u);) {
        if (!maps_here(gp, &u)) continue;
        gp->source.unmap(gp->source.ctx, visited_addr(&u), resumed_memory(gp, &u, fresh_own, fresh_shared, &o));
        n++;
    }
    for (size_t k = 0; k < made; k++) gp->source.release(gp->source.ctx, fresh_own[k]);
    for (size_t k = 0; fresh_shared && k < gp->shared_count; k++)
        if (fresh_shared[k] && cpool__shared_allocation_at(gp, k)) gp->source.release(gp->source.ctx, fresh_shared[k]);
}

/* A resume that mapped everything: the records take the new memory. */
static void resume_commit(cpool__graph_pages *gp, void **fresh_own, void **fresh_shared) {
    size_t o = 0;
    for (page_visit u = {0}; next_page(gp, &u);) {
        cpool__page *pg = visited(&u);
        if (pg->state == CPOOL__PAGE_BORROWED) { /* the packed region's pages come first: its lender's is new */
            const cpool__page_span *lsp = cpool__span_of(&gp->packed->spans, pg->lender);
            pg->mem = lsp->page[cpool__page_index(lsp, pg->lender)].mem;
        } else if (pg->state == CPOOL__PAGE_OWN) {
            pg->mem = fresh_own[o++];
        }
    }
    for (size_t k = 0; k < gp->shared_count; k++) {
        if (!gp->shared[k].page) continue;
        gp->shared[k].page = fresh_shared[k];
        if (gp->shared[k].run && gp->shared[k].run->first == k) gp->shared[k].run->mem = fresh_shared[k];
    }
    gp->suspended = false;
}

/* New memory for every page the records name: a run again as one
 * allocation, mapped whole; *made counts the own pages made. */
static cpool_status resume_make(cpool__graph_pages *gp, void **fresh_own, size_t own, void **fresh_shared,
                                size_t *made) {
    cpool_status st = CPOOL_OK;
    for (size_t k = 0; st == CPOOL_OK && k < gp->shared_count; k++)
        if (cpool__shared_allocation_at(gp, k))
            st = gp->source.create(gp->source.ctx, gp->shared[k].run ? gp->shared[k].run->pages : 1, &fresh_shared[k]);
    for (size_t k = 0; st == CPOOL_OK && k < gp->shared_count; k++)
        if (gp->shared[k].run && !cpool__shared_allocation_at(gp, k))
            fresh_shared[k] = fresh_shared[gp->shared[k].run->first];
    for (*made = 0; st == CPOOL_OK && *made < own; (*made)++) {
        st = gp->source.create(gp->source.ctx, 1, &fresh_own[*made]);
        if (st != CPOOL_OK) break;
    }
    return st;
}

cpool_status cpool__graph_pages_resume(cpool__graph_pages *gp) {
    if (!gp->suspended) return CPOOL_OK;
    cpool__runs_regroup(gp); /* nothing is mapped: the same arenas' stretches map as one */
    /* New memory for every page first, then every mapping; a failure gives
     * back what was made and leaves the records as they were. */
    size_t own = 0, made = 0, mapped = 0;
    for (page_visit v = {0}; next_page(gp, &v);) own += visited(&v)->state == CPOOL__PAGE_OWN;
    void **fresh_shared = gp->shared_count ? cpool__calloc(gp->shared_count, sizeof *fresh_shared) : NULL;
    void **fresh_own = own ? cpool__calloc(own, sizeof *fresh_own) : NULL;
    cpool_status st = (gp->shared_count && !fresh_shared) || (own && !fresh_own)
                          ? cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory resuming graph pages")
                          : resume_make(gp, fresh_own, own, fresh_shared, &made);
    size_t o = 0;
    page_visit v = {0};
    while (st == CPOOL_OK && next_page(gp, &v)) {
        if (!maps_here(gp, &v)) continue;
        st = gp->source.map(gp->source.ctx, visited_addr(&v), resumed_memory(gp, &v, fresh_own, fresh_shared, &o));
        if (st == CPOOL_OK) mapped++;
    }
    if (st != CPOOL_OK)
        resume_undo(gp, mapped, made, fresh_own, fresh_shared);
    else
        resume_commit(gp, fresh_own, fresh_shared);
    free(fresh_shared);
    free(fresh_own);
    return st;
}
