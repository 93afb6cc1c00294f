/*
 * model.h: what the fuzz_api harness knows of the library, shared by all
 * its files.
 *
 * - The sizes of the tables, the byte reader (rd, u8), and the status
 *   checks every file uses (fail, check_status, EXPECT, EXPECT_OK,
 *   expect_one_of, TRACE).
 * - The model's types: pools, allocations, captures, graphs, recorded
 *   objects, pending callbacks; and its state (model.c): the device and
 *   streams, the work enqueued and done per stream, the gates, the tables.
 * - The model's bookkeeping and checks (model.c): slot picks, references
 *   of pools held by captures and graphs, drop bookkeeping, the checks of
 *   the library's statistics and blocks against the model.
 * The operations are in ops.h (ops_*.c), the libFuzzer entry points in
 * driver.c.
 */
#ifndef FUZZ_MODEL_H
#define FUZZ_MODEL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "capturepool.h"

/* ---- sizes of the tables ------------------------------------------------- */

#define NS 4     /* streams: 0..2 live for the whole process, 3 is temporary */
#define NFIXED 3
#define TEMP 3
#define NPOOL 4
#define NGRAPH 6
#define NALLOC 320 /* enough live blocks to grow the allocator's address map */
#define NPARAM 6 /* per pool */
#define NOBJ 512
#define NUID 256 /* pools created per input */
#define NRANGE 48
#define NFREED 8
#define NPENDING 64
#define MAX_BODY 24
#define NDEAD 8 /* dead handles of each kind kept for op_dead */
#define NEVENT 4

#define MIB ((size_t)1 << 20)
#define HUGE_LIMIT ((size_t)64 << 20) /* requests above this cannot be served here */

/* ---- trace and status checks (model.c) --------------------------------------- */

extern bool trace; /* FUZZ_API_TRACE */
#define TRACE(...)                                                                                 \
    do {                                                                                           \
        if (trace) fprintf(stderr, __VA_ARGS__);                                                   \
    } while (0)

/* Prints "fuzz_api: VIOLATION: ..." and aborts. */
__attribute__((noreturn, format(printf, 1, 2))) void fail(const char *fmt, ...);

void check_status(cpool_status got, cpool_status want, const char *what, bool library_failure);
#define EXPECT(call, want) check_status((call), (want), #call, true)
/* A successful call leaves cpool_last_error() as it was (header). */
void check_error_kept(const char *before, const char *what);
#define EXPECT_OK(call)                                                                            \
    do {                                                                                           \
        char kept_[512];                                                                           \
        snprintf(kept_, sizeof kept_, "%s", cpool_last_error());                                   \
        check_status((call), CPOOL_OK, #call, true);                                               \
        check_error_kept(kept_, #call);                                                            \
    } while (0)

void expect_one_of(cpool_status got, cpool_status a, cpool_status b, const char *what);

static inline size_t round512(size_t n) { return (n + 511) / 512 * 512; }

/* ---- input reader ---------------------------------------------------------- */

typedef struct rd {
    const uint8_t *p;
    size_t n;
} rd;

static inline uint8_t u8(rd *r) {
    if (!r->n) return 0;
    r->n--;
    return *r->p++;
}

/* ---- the model --------------------------------------------------------------- */

typedef struct range {
    uintptr_t addr;
    size_t size;
} range;

typedef struct freed_range {
    uintptr_t addr;
    size_t size;
    int stream;
    uint64_t mark; /* enq[stream] at the free */
} freed_range;

typedef struct mparam {
    cpool_param *prm;
    void *ptr;
    size_t size;
    int home; /* the stream its checked sets go to; -1: none yet */
} mparam;

/* A live block whose bytes are checked across a suspend and its resume
 * (op_suspend): a pattern written from its start on its stream before the
 * suspend, and, where nothing ran then, a hash of its first and last bytes. */
typedef struct kept_probe {
    void *ptr;
    size_t size;
    size_t head; /* bytes of the pattern; 0: none */
    unsigned char value;
    bool hashed;
    uint64_t hash;
} kept_probe;
#define NPROBE 16

typedef enum { SLOT_FREE = 0, SLOT_LIVE, SLOT_ZOMBIE } slot_state;

typedef struct mpool {
    slot_state state; /* ZOMBIE: only references of unrun callbacks remain */
    cpool_pool *p;
    unsigned uid;
    int harness, graph_holds, capture_holds, cb_refs;
    uint64_t gen;       /* clears known to have happened */
    int pending_clears; /* clears in callbacks not known to have run */
    bool deferred;      /* drops may be running on the library's thread */
    bool sealed;
    size_t records;
    bool records_unknown;
    uint64_t max_reserved;
    uint64_t live_bytes, live_count, allocs, frees, graph_live_rounded;
    range graph_ranges[NRANGE];
    int ngr;
    freed_range freed[NRANGE];
    int nfreed;
    mparam params[NPARAM];
    int nparams;
    int nesters;          /* objects recorded whose drop clears the pool (a nested clear) */
    uint64_t nested_seen; /* nested clears counted into gen so far */
    bool suspended;       /* cpool_pool_suspend succeeded, no resume since (op_suspend) */
    bool kept;            /* ... with CPOOL_SUSPEND_KEEP_CONTENTS */
    /* A graph output was freed while suspended: the settle after the resume
     * may give its page back to sharing, so the resume maps at most what
     * the snapshot said (cpool__graph_pages_settle). */
    bool output_freed_suspended;
    /* graph_count at the suspend: a graph released while suspended (by
     * the harness, a record's drop, a callback) leaves its arena idle, and
     * the first settle after the resume gives back the quiet ones but the
     * newest (cpool__graph_pages_settle; none while suspended), so the
     * resume maps at most what the snapshot said then too. */
    uint64_t graphs_at_suspend;
    kept_probe probes[NPROBE]; /* checked at the resume */
    int nprobes;
} mpool;

typedef struct malloc_t {
    bool live;
    int pool;
    void *ptr;
    size_t size;
    int stream; /* where it was allocated; -1: its stream is gone */
    bool graph; /* allocated under capture */
    uint64_t cap_id;
} malloc_t;

/* A pool held by a capture or graph, with the pool's generation at the hold
 * somewhere in [lo, hi] (a range while a callback's clear may have run). */
typedef struct held {
    int pool;
    uint64_t lo, hi;
} held;

typedef struct tick {
    _Atomic uint64_t ran;
    uint64_t expected;
    struct tick *next;
} tick;

/* A block freed in a capture: on which stream, at which point of its
 * branch clock (see mcapture). */
typedef struct branch_free {
    int pool;
    uintptr_t addr;
    size_t size;
    int stream;
    uint32_t stamp;
} branch_free;
#define NBFREE 64

typedef struct mcapture {
    bool active, invalidated;
    bool unjoined; /* a fork was left unjoined: the end fails, the state stays active */
    /* Which work of the capture runs before which (vector clocks): vc[x][y]
     * is how many frees of stream y stream x's work is ordered after. A
     * block freed at stamp t on y may be handed to x only if vc[x][y] >= t
     * (header: never to a stream whose work may run beside its last user). */
    uint32_t vc[NS][NS];
    branch_free bf[NBFREE];
    int nbf;
    /* Each pool slot at the begin: its pool, how many clears it had, and
     * whether a clear was under way. A pool the capture holds only later,
     * cleared since, makes a stale graph (header, cpool_pool_clear_buffers). */
    unsigned base_uid[NPOOL];
    uint64_t base_gen[NPOOL];
    bool base_unsure[NPOOL];
    held h[NPOOL];
    int nh;
    int bound;
    uint64_t id;
    tick *tk;
    unsigned ticks;
    cpool_capture_mode mode;
} mcapture;

typedef struct mgraph {
    cpool_graph *g; /* NULL: free slot */
    int refs;
    held h[NPOOL];
    int nh;
    int bound;
    tick *tk;
    unsigned ticks;
    uint64_t replays;
    bool known_stale;
    cpool_capture_mode mode;
    uint64_t cap_id; /* its (latest) capture: allocations of it are its own outputs */
} mgraph;

/* What a recorded object's drop does besides the checks (op_record). */
enum {
    DROP_PLAIN,   /* nothing */
    DROP_CLEAR,   /* cpool_pool_clear_buffers on its own pool: a nested clear */
    DROP_RELEASE, /* cpool_pool_release of the reference the harness gave the object */
    DROP_WAIT,    /* cpool_wait_deferred */
    DROP_PROBE,   /* calls on its own pool: all refused while the pool is torn down */
    DROP_RECORD,  /* records a new object on its own pool, then clears it */
    DROP_CROSS,   /* clears another pool, whose drop clears this one (op_cross_clear) */
    DROP_KINDS
};

/* The state of an object's pool when it is dropped, as far as the model
 * knows: in a clear (the handle is live), or in the final teardown (the
 * handle is dead). */
enum { CTX_UNKNOWN, CTX_ALIVE, CTX_DEAD };

typedef struct obj {
    bool used;
    unsigned uid;
    uint64_t serial;
    int drops;
    bool droppable;
    int kind, ctx;
    cpool_pool *pool; /* its pool's handle, for the drops that call the library */
    cpool_pool *other; /* DROP_CROSS: the pool it clears ... */
    unsigned other_uid; /* ... and its uid */
} obj;

enum { CB_RELEASE_POOL, CB_CLEAR_RELEASE_POOL, CB_RELEASE_GRAPH, CB_PARAM_CHECK, CB_REFUSE };

typedef struct pending_cb {
    int stream, kind, pool;
} pending_cb;

typedef struct freed_ptr {
    unsigned uid;
    void *ptr;
} freed_ptr;

/* ---- process-wide state: device, streams, gates (model.c) -------------------- */

extern cpool_device *dev;
extern cpool_stream *S[NS];
extern pthread_t main_thread;

/* Host tasks the harness enqueued outside capture on each stream (enq) and
 * how many of them finished (done). A drop must not run before the tasks
 * enqueued before the call that drops have finished. */
extern uint64_t enq[NS];
extern _Atomic uint64_t done[NS];
extern uint64_t snap[NS]; /* enq at the last call that may drop or wait */

extern pthread_mutex_t gate_mu;
extern pthread_cond_t gate_cv;
extern uint64_t gate_closed[NS], gate_opened[NS]; /* under gate_mu */

/* The temporary stream after a destroy that may still run (op_temp_dying),
 * and the epoch of its timed gate (see model.c). */
extern bool temp_dying;
extern uint64_t timed_epoch;

bool tracked(int s);
void open_gates(void);
/* A closed gate holds stream s's enqueued work back: one of its own, or one
 * that an event it waits for waits for (through cpool_stream_wait_event). */
bool stream_held(int s);
void before_blocking(void);
void check_quiesced(const char *what);

/* ---- the model's tables (model.c) ---------------------------------------------- */

extern mpool P[NPOOL];
extern malloc_t A[NALLOC + 1]; /* the last one only for an immediate free */
extern mcapture C[NS];
/* fork_of[x]: the stream whose capture stream x was forked into (-1: none).
 * A fork takes part until its origin's capture ends; the driver sends the
 * operations it picks for a fork to the origin. */
extern int fork_of[NS];
/* Whether stream x takes part in a capture: its own, or one it was forked
 * into (a begin on it is refused, a sync would break the capture). */
static inline bool in_capture(int x) { return C[x].active || fork_of[x] >= 0; }
/* Capture s ended (with a graph or without): its forks take part no more. */
void forks_end(int s);
/* Capture s's branch clocks: a free of [ptr, +size) of pool pi on stream
 * `on`; an allocation there, checked against the frees it may reuse; stream
 * x now ordered after a record whose clock is `after` (a fork or a join). */
void branch_free_noted(int s, int on, int pi, void *ptr, size_t size);
void branch_check_alloc(int s, int on, int pi, void *ptr, size_t size);
void branch_order_after(int s, int x, const uint32_t after[NS]);
extern mgraph G[NGRAPH + 1]; /* the last one only for an immediate release */
extern pending_cb pend[NPENDING];
extern int npend;
extern freed_ptr ring[NFREED];
extern unsigned ring_next;
extern tick *ticks;
extern unsigned next_uid;
extern uint64_t cap_serial;
extern int nverify;

/* Handles known to be dead (released, destroyed), newest last, for op_dead. */
extern void *dead_pools[NDEAD], *dead_graphs[NDEAD], *dead_streams[NDEAD];
extern unsigned ndead_pools, ndead_graphs, ndead_streams;

/* Counted by drops, read by the harness's thread: nested clears made by
 * drops while their pool was live, and the pool references that objects of
 * kind DROP_RELEASE still hold. */
extern _Atomic uint64_t nested_clears[NUID];
extern atomic_int drop_refs[NUID];

extern pthread_mutex_t drop_mu;
extern obj objs[NOBJ]; /* under drop_mu */
extern int nobj;
extern uint64_t next_serial[NUID], last_dropped[NUID];

/* Events (op_event_*): a table of NEVENT, and what each stream's work waits
 * for on the others through cpool_stream_wait_event. For each stream x,
 * gates[x] is the newest gate of x that the record waits for (0: none) and
 * marks[x] how many of x's tasks (enq[x]) must have run first. */
typedef struct mevent {
    cpool_event *e; /* NULL: free slot */
    bool recorded;  /* a record succeeded */
    uint64_t cap_id; /* its last record was made in this capture (0: none) */
    bool complete;  /* known complete: never recorded, or synchronized since */
    int stream;     /* where it was recorded */
    uint64_t gates[NS], marks[NS];
} mevent;
extern mevent E[NEVENT];
extern uint64_t dep_gate[NS][NS], dep_mark[NS][NS]; /* [waiting stream][other stream] */
extern void *dead_events[NDEAD];
extern unsigned ndead_events;
/* Stream s's work enqueued so far ran (a sync, a destroy): its events are
 * complete. events_temp_gone also forgets what waits for the temporary
 * stream's tasks (its counters start again with the next one). */
void events_synced(int s);
void events_temp_gone(void);

/* Fixed streams that captured for the first time in this input (finish). */
extern int first_captures;

bool usable(int pi);
int pick_pool(uint8_t b);
/* As pick_pool, but never a suspended pool: for the operations whose
 * model does not follow a suspended pool (op_suspend leaves one so). */
int pick_resident_pool(uint8_t b);
int pick_stream(uint8_t b);
int pick_alloc(uint8_t b, bool pool_usable);
int pick_graph(uint8_t b);

/* ---- recorded objects: bookkeeping (model.c) ------------------------------------ */

void mark_droppable(unsigned uid, int ctx);
void verify_dropped(unsigned uid, const char *when);
void end_may_drop(const held *h, int nh);
void end_settled(bool made_graph);
void push_dead(void **ring, unsigned *n, void *h);
void run_verifies(void);

/* ---- pool references, captures, graphs (model.c) -------------------------------- */

void pool_refs_changed(int pi, bool synchronous);
bool nest_risk(const mpool *m);
void absorb_nested(int pi);
void capture_hold(int s, int pi);
void model_capture_begin(int s, int pi, cpool_capture_mode mode);
void capture_drop(int s, bool synchronous);
mgraph graph_from_capture(int s);
void graph_pools_released(const held *h, int nh, bool on_this_thread);
void graph_release_model(int gi, bool on_this_thread);
void verify_handed_off(void);
void graph_store(const mgraph *m, cpool_graph *g);

/* ---- model checks (model.c) ---------------------------------------------------- */

cpool_pool_stats stats_of(int pi);
void check_pool(int pi);
void check_all(void);
void check_new_block(int pi, void *ptr, size_t size, int stream, bool outside_capture, const char *what);
void add_graph_range(mpool *m, void *ptr, size_t size);
void add_freed(mpool *m, void *ptr, size_t size, int s);
bool live_start(int pi, void *ptr);
void check_failed_alloc(int pi, const cpool_pool_stats *before, cpool_status st, bool huge, size_t size,
                        const char *what);
void expect_alloc_status(cpool_status st, bool zero, bool sealed, bool suspended, bool huge, bool bounded,
                         const char *what);

#endif
