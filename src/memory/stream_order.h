/*
 * The vocabulary of stream order, without a platform: stream keys, the
 * free clock and event dependencies. The allocator (alloc.h) and its front
 * cache keep blocks by these; the stream order (order.h) fences them;
 * events (objects/event.c) tick the clock and note dependencies.
 */
#ifndef CPOOL_STREAM_ORDER_H
#define CPOOL_STREAM_ORDER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- keys ---------------------------------------------------------------- */

/* A key says whom an allocation serves, or whom a freed block is kept for
 * (one word, passed by value). A stream's key is its id (never 0, see
 * cpool__order_add). A branch is the tag of graph-reserved blocks freed on
 * stream `id` while its capture has forked streams: only that branch may
 * take them (it runs after the free), until a join retags them for the
 * stream that joined it, and the capture's end for any graph. Its top bit
 * keeps it apart from every stream id, so no fence or quiesce clears it. A
 * graph's key marks blocks freed in its capture that only that capture may
 * take, and no other until the graph is released (a pool's small graph
 * blocks, graph_pages.h): a branch to fences, but one that keeps no rest of
 * a block it splits. */
#define CPOOL__KEY_BRANCH_BIT ((uint64_t)1 << 63)
#define CPOOL__KEY_GRAPH_BIT ((uint64_t)1 << 62)

typedef struct cpool__stream_key {
    uint64_t word; /* 0: anyone; a stream id; a branch or a graph with the bits above */
} cpool__stream_key;

/* Anyone: a block free for every stream (or, graph-reserved, every graph). */
#define CPOOL__KEY_ANY ((cpool__stream_key){0})

static inline cpool__stream_key cpool__key_stream(uint64_t stream_id) { return (cpool__stream_key){stream_id}; }
static inline cpool__stream_key cpool__key_branch(uint64_t stream_id) {
    return (cpool__stream_key){stream_id | CPOOL__KEY_BRANCH_BIT};
}
static inline cpool__stream_key cpool__key_graph(uint64_t capture_id) {
    return (cpool__stream_key){capture_id | CPOOL__KEY_BRANCH_BIT | CPOOL__KEY_GRAPH_BIT};
}
static inline bool cpool__key_is_any(cpool__stream_key k) { return k.word == 0; }
static inline bool cpool__key_is_graph(cpool__stream_key k) { return (k.word & CPOOL__KEY_GRAPH_BIT) != 0; }

/* ---- the free clock -------------------------------------------------------- */

/* One clock for every allocator, so that a mark of it (a fence, an event's
 * record) orders the frees of all pools. Moves the clock on and returns a
 * mark: every free before the call has a sequence number at most the mark,
 * every free after it a larger one. */
uint64_t cpool__free_clock_tick(void);
/* The clock's value now, without moving it: the sequence number a free now
 * gets. */
uint64_t cpool__free_clock_read(void);

/* ---- event dependencies ---------------------------------------------------- */

/* What a stream's work is known to run after, from the events it waited
 * for (cudaMallocAsync's "reuse follows event dependencies"): a few pairs
 * (stream, free sequence), each packed in one word so that a wait may note
 * one while an allocation on another thread reads them. A block freed on
 * that stream up to that sequence is reusable by this stream at once. A
 * pair that does not fit a word, or finds no slot, is not noted: the block
 * then waits for a fence, as without the event. */
#define CPOOL__DEPS 8
typedef struct cpool__deps {
    _Atomic uint64_t slot[CPOOL__DEPS];
    _Atomic unsigned next; /* the slot a new stream takes */
} cpool__deps;
/* Empty: the stream runs after nothing yet. */
void cpool__deps_init(cpool__deps *d);
/* The pair (stream, upto) as one word, or 0 when it does not fit one. */
uint64_t cpool__deps_pack(uint64_t stream_id, uint64_t upto);
/* Notes a packed pair (0: nothing to note). */
void cpool__deps_note(cpool__deps *d, uint64_t pair);
/* Whether work after the waits noted runs after a free on stream
 * `stream_id` with sequence `seq`. */
bool cpool__deps_cover(const cpool__deps *d, uint64_t stream_id, uint64_t seq);

#endif /* CPOOL_STREAM_ORDER_H */
