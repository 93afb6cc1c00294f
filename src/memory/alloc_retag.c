/*
 * Free blocks between stream tags and sets (see alloc.c's top, "Stream
 * order"): a fence seen over unfences a stream's blocks, a join or a
 * capture's end hands a branch's blocks on, and a graph's end gives its
 * reserved blocks back to the general set; each retag merges as it goes.
 */

#include "alloc_internal.h"

size_t cpool__allocator_restricted_streams(const cpool__allocator *a, uint64_t *streams, uint64_t *seqs, size_t n,
                                           size_t cap) {
    /* A restricted block's `stream` is a stream's id unless it is a branch. */
    if (!a->restricted_blocks) return n;
    for (const cpool__segment *seg = a->segments; seg; seg = seg->next)
        for (const cpool__block *b = seg->first; b; b = b->next) {
            if (b->live || !b->stream || b->stream & CPOOL__KEY_BRANCH_BIT) continue; /* no stream to fence */
            size_t i = 0;
            while (i < n && streams[i] != b->stream) i++;
            if (i == n) {
                if (n == cap) continue;
                streams[n] = b->stream;
                seqs[n++] = b->free_seq;
            } else if (b->free_seq > seqs[i]) {
                seqs[i] = b->free_seq;
            }
        }
    return n;
}

/* What a retag changes in the free blocks `pick` selects: their stream tag
 * (their work is over: free for all, or for their pending branch), their
 * branch or, for a block still waiting for its stream, the branch it goes to
 * (a join, or the capture's end), or their graph reservation (no graph can
 * run). */
typedef enum { RETAG_UNFENCE, RETAG_UNGRAPH, RETAG_BRANCH } retag_kind;

/* Retags every free block that `pick` selects, merging as it goes. A merge
 * can hand the result a neighbour's tag that `pick` selects again: then the
 * result is looked at once more. */
static void retag_free_blocks(cpool__allocator *a, retag_kind kind,
                              bool (*pick)(const cpool__block *, uint64_t, uint64_t), uint64_t x, uint64_t y,
                              uint64_t to) {
    uint64_t now = cpool__free_clock_read();
    for (cpool__segment *seg = a->segments; seg; seg = seg->next) {
        cpool__block *b = seg->first;
        while (b) {
            if (b->live || b->hole || !pick(b, x, y)) {
                b = b->next;
                continue;
            }
            heap_remove(heap_for(a, b), b);
            if (kind == RETAG_UNFENCE) {
                /* A block of a branch goes to it now: a join is told
                 * from records made before (see free_seq). */
                b->stream = b->pending_branch;
                b->pending_branch = 0;
                if (b->stream)
                    b->free_seq = now;
                else
                    a->restricted_blocks--;
            } else if (kind == RETAG_BRANCH) {
                if (b->stream == x) {
                    if (!to) a->restricted_blocks--;
                    b->stream = to;
                } else {
                    /* Still waits for its stream. The stamp below is newer
                     * than the mark of a fence recorded before: a later
                     * fence (every capture's own covers all its stream's
                     * earlier work) covers it. */
                    b->pending_branch = to;
                }
                if (to) b->free_seq = now; /* the branch's from now on */
            } else {
                a->graph_reserved -= b->size;
                b->graph = false;
            }
            b = cpool__alloc_release(a, b);
        }
    }
}

static bool pick_fenced(const cpool__block *b, uint64_t stream, uint64_t upto) {
    return b->stream == stream && b->free_seq <= upto;
}
/* A branch's blocks, and those that go to it once their stream's work is
 * over (a block is one or the other). */
static bool pick_branch(const cpool__block *b, uint64_t branch, uint64_t upto) {
    return (b->stream == branch || b->pending_branch == branch) && b->free_seq <= upto;
}
/* Branch tags are cleared only by their capture (retag_branch). */
static bool pick_restricted(const cpool__block *b, uint64_t x, uint64_t upto) {
    (void)x;
    return b->stream != 0 && !(b->stream & CPOOL__KEY_BRANCH_BIT) && b->free_seq <= upto;
}
static bool pick_graph(const cpool__block *b, uint64_t x, uint64_t y) {
    (void)x;
    (void)y;
    return b->graph;
}

void cpool__allocator_unfence(cpool__allocator *a, uint64_t stream_id, uint64_t upto) {
    if (a->restricted_blocks) retag_free_blocks(a, RETAG_UNFENCE, pick_fenced, stream_id, upto, 0);
}

void cpool__allocator_unfence_all(cpool__allocator *a, uint64_t upto) {
    if (a->restricted_blocks) retag_free_blocks(a, RETAG_UNFENCE, pick_restricted, 0, upto, 0);
}

void cpool__allocator_share_spans(cpool__allocator *a) {
    for (cpool__segment *seg = a->segments; seg; seg = seg->next) {
        seg->last_branch = seg->branch;
        seg->branch = 0;
    }
}

void cpool__allocator_retag_branch(cpool__allocator *a, cpool__stream_key from, uint64_t upto, cpool__stream_key to) {
    if (a->restricted_blocks && from.word != to.word)
        retag_free_blocks(a, RETAG_BRANCH, pick_branch, from.word, upto, to.word);
}

void cpool__allocator_reclaim_graph(cpool__allocator *a) { retag_free_blocks(a, RETAG_UNGRAPH, pick_graph, 0, 0, 0); }

static bool pick_graph_unkept(const cpool__block *b, uint64_t x, uint64_t y) {
    return pick_graph(b, x, y) && !b->stream && !b->pending_branch;
}

void cpool__allocator_reclaim_unkept(cpool__allocator *a) {
    retag_free_blocks(a, RETAG_UNGRAPH, pick_graph_unkept, 0, 0, 0);
}
