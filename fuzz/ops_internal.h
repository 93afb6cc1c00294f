/*
 * ops_internal.h: what the operation files of the fuzz_api harness
 * (ops_*.c) share among themselves: the host callbacks and stream work
 * they enqueue, and the steps that several families of operations take
 * (an allocation, a free, a clear, a trim, a snapshot check, calls on dead
 * handles). driver.c sees only ops.h.
 */
#ifndef FUZZ_OPS_INTERNAL_H
#define FUZZ_OPS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "capturepool.h"
#include "model.h"
#include "ops.h"

/* ---- host callbacks and syncs (ops_host.c) ------------------------------------------ */

/* Inside one of the harness's host callbacks (a drop must never be). */
extern _Thread_local int in_host;

/* A marker: counts one task done on the stream its argument names. */
void fn_marker(void *arg);
void enqueue_marker(int s);

/* A task run by a host callback on stream `stream` (fn_task), freed there. */
enum { CB_DESTROY_STREAM = CB_REFUSE + 1 };
typedef struct cbtask {
    int kind, stream;
    cpool_pool *pool;
    cpool_graph *graph;
    cpool_stream *own, *other; /* CB_REFUSE: its own stream and another; CB_DESTROY_STREAM: the one to destroy */
    const unsigned char *ptr;
    size_t n;
    unsigned char val[64];
} cbtask;
void enqueue_task(int s, cbtask *t);

/* Applies the callbacks on stream s, which have run now. */
void resolve(int s);
/* Waits for stream t's work without opening any gate: true if it has no
 * closed gate (and is idle now), false if a gate holds it back. */
bool sync_quietly(int t);

/* ---- pools (ops_pool.c) ------------------------------------------------------------ */

/* The model of a pool just created into slot pi, with the harness's one
 * reference. */
mpool *adopt_pool(int pi, cpool_pool *p, uint64_t maxr);
/* A free pool slot while pool uids are left, else -1. */
int free_pool_slot(void);
/* cpool_pool_trim of pool pi, checked against the model. */
void do_trim(int pi, const char *what);

/* What a suspended pool's resume maps back, as its snapshot says (the
 * stats themselves, when it is not suspended). */
typedef struct resident_memory {
    uint64_t reserved, graph, segments;
} resident_memory;
/* Writes a snapshot of pool pi, reads it back and checks it; `resident`
 * (may be NULL) gets what a resume maps back. */
void check_snapshot(int pi, resident_memory *resident);

/* ---- recorded objects and clears (ops_records.c) -------------------------------------- */

/* A clear of pool pi on this thread, with the model's drop checks. */
void do_clear(int pi);

/* ---- allocation (ops_alloc.c) -------------------------------------------------------- */

/* An allocation size read from the input. */
size_t decode_size(rd *r);
/* An allocation of `size` from pool pi on stream `on`, in the model stream
 * s's capture or eager; `want` is the status the model knows, or -1.
 * Returns its slot, or -1. do_alloc_want and do_alloc: on stream s itself. */
int do_alloc_on(int pi, size_t size, int s, int on, int want);
int do_alloc_want(int pi, size_t size, int s, int want);
void do_alloc(int pi, size_t size, int s);
/* A free of allocation slot ai on stream `on`, in the model stream s's
 * capture or eager. do_free_valid: on stream s itself. */
void do_free_on(int ai, int s, int on);
void do_free_valid(int ai, int s);
/* Whether a free of slot ai on stream s would be made in a capture, of a
 * block of a suspended pool (the model does not follow that). */
bool capture_frees_suspended(int ai, int s);

/* ---- capture and graphs (ops_capture.c) -------------------------------------------- */

/* Whether a launch of graph g must be refused as stale, must not, or may. */
enum { FRESH, STALE, MAYBE };
int staleness(const mgraph *g);

/* ---- calls with dead handles or bad arguments (ops_misuse.c) ------------------------- */

/* Dead-handle calls must leave their reason in cpool_last_error(): the text
 * is set to another failure's first (mark_error), and must have changed
 * after. */
void mark_error(char *buf, size_t n);
#define EXPECT_REASON(call)                                                                        \
    do {                                                                                           \
        char before_[512];                                                                         \
        mark_error(before_, sizeof before_);                                                       \
        call;                                                                                      \
        if (strcmp(cpool_last_error(), before_) == 0)                                              \
            fail("%s left no reason in cpool_last_error()", #call);                                \
    } while (0)
#define EXPECT_DEAD(call) EXPECT_REASON(check_status((call), CPOOL_ERR_INVALID_ARGUMENT, #call " (dead handle)", true))

/* A body for calls that must refuse to run it: counts its calls. */
extern int dummy_body_calls;
cpool_status dummy_body(cpool_stream *s, void *ctx);
/* The drop of an object whose record must be refused: fails if it runs. */
void never_drop(void *o);
/* Every call on a dead pool handle (`s` a live stream; also from drops, on
 * any thread), or on a dead stream handle (s a live stream, b picks a pool,
 * an allocation, a graph): refused, nothing changes, the reason is left. */
void probe_dead_pool(cpool_pool *h, cpool_stream *s);
void probe_dead_stream(cpool_stream *h, int s, uint8_t b);

/* Orders stream s after the latest launches (and eager writes to graph
 * outputs) on other streams that touched any pool slot in mask; notes work
 * on s that touched them (ops_capture.c). */
void order_pool_work(unsigned mask, int s);
void note_pool_work(unsigned mask, int s);

#endif
