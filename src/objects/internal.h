/*
 * The public objects' definitions, shared by the files of src/objects (never
 * installed): devices, streams, capture records, graphs' pool holds, and what
 * each file offers the others, file by file.
 *
 * Layering (docs/ARCHITECTURE.md): these files call into src/memory (the
 * allocator, stream order, graph pages), reach a platform only through
 * backend.h's table, and use src/support. Internal-but-shared names carry
 * the cpool__ prefix.
 */
#ifndef CPOOL_INTERNAL_H
#define CPOOL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "capturepool.h"
#include "backend.h"
#include "fault.h"
#include "handle.h"
#include "lock.h"
#include "front.h"
#include "order.h"
#include "status.h"
#include "thread.h"

/* ---- deferred.c: the library's own thread -------------------------------- */

/* True on the library's own thread (deferred.c). Threads that run stream
 * work: thread.h. */
bool cpool__on_library_thread(void);

/* A task for the library's thread, embedded in the object it tears down so
 * that queueing it cannot fail. */
typedef struct cpool__deferred {
    struct cpool__deferred *next;
    void (*run)(struct cpool__deferred *self);
} cpool__deferred;

/* Starts the library's thread if needed. Returns CPOOL_OK or
 * CPOOL_ERR_OUT_OF_MEMORY. */
cpool_status cpool__deferred_start(void);
/* Queues task->run(task) for the library's thread (started before). */
void cpool__defer(cpool__deferred *task);

/* ---- device.c ------------------------------------------------------------ */

struct cpool_device {
    cpool__handle_header handle;
    atomic_int refs;      /* every holder: the callers' opens, streams, pools, graphs, events */
    atomic_int user_refs; /* the callers' opens not yet closed */
    struct cpool_device *next_open;
    const cpool__backend *be;
    cpool__bdevice *impl;
    int ordinal;
    /* Every live stream of the device, so that teardown can wait for all
     * stream work the way cudaFree waits for the whole device (order.h). */
    cpool__order order;
};

/* Waits until every stream of the device has finished the work enqueued so
 * far (for a capturing stream: before its capture began). */
static inline cpool_status cpool__device_quiesce(cpool_device *dev) { return cpool__order_quiesce(&dev->order); }

/* Takes back one of the callers' references (of a device's opens, a pool's
 * creation and retains); false, with the reason, when the caller holds none:
 * a release or close too many, which must not take a reference that a
 * stream, pool or graph holds. */
bool cpool__take_user_ref(atomic_int *user_refs, const char *fn, const char *what);

/* As CPOOL__RESOLVE, for a device the caller must still hold open: one
 * whose opens were all closed is kept alive only by what was made on it. */
#define CPOOL__RESOLVE_OPEN_DEVICE(var, handle, fn)                                                \
    do {                                                                                           \
        CPOOL__RESOLVE(var, handle, CPOOL__HANDLE_DEVICE, fn, "device");                           \
        if (atomic_load(&(var)->user_refs) == 0)                                                   \
            return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT,                                         \
                               "%s: the device was closed (the caller holds no reference to it)", fn); \
    } while (0)

cpool_device *cpool__device_retain(cpool_device *dev);
void cpool__device_release(cpool_device *dev);

/* ---- capture_record.c: the capture record, which a stream embeds ------- */

struct cpool__arena; /* graph_pages.h */

/* A pool a capture or graph holds, with the pool's generation when the
 * capture took hold of it (a later clear makes the graph stale). */
typedef struct cpool__held_pool {
    cpool_pool *pool;
    uint64_t generation;
    struct cpool__arena *arena; /* its graph memory in that pool (NULL: none allocated) */
} cpool__held_pool;

/* Pools a capture holds without a heap array: the bound one and a few more. */
#define CPOOL__CAPTURE_INLINE_POOLS 4
/* Streams forked into a capture without a heap array. */
#define CPOOL__CAPTURE_INLINE_FORKS 3

/* A stream forked into a capture (NULL once it left, destroyed), with its
 * id, which tags the blocks freed on its branch. */
typedef struct cpool__fork {
    struct cpool_stream *s;
    uint64_t stream_id;
    size_t plan_next; /* a graphed call's plan: where its next allocation is looked up */
} cpool__fork;

/* What a graphed call's last eager run allocated, or a capture, in order,
 * on any stream, with the stream and NULL for what it freed again: the
 * rest outlived the body (its outputs). */
typedef struct cpool__learn {
    void **ptrs;
    uint64_t *streams;
    size_t *sizes; /* the sizes asked for */
    size_t count, cap;
    bool failed; /* out of host memory: nothing learned */
} cpool__learn;

/* A capture record, written only by capture_record.c: other files, the
 * output guesses (output_guesses.c) among them, change it through the
 * functions below and read its fields. It is not opaque: each stream
 * embeds one (capture_storage, so that beginning a capture allocates no
 * record), a capture's end moves it onto the caller's stack (capture.c),
 * and the allocation path reads its id and branches. Once published in
 * its origin stream's capture_storage it is changed only under its capture
 * lock (cpool__capture_lock), since streams forked into it use it from any
 * thread. */
typedef struct cpool__capture {
    cpool_capture_mode mode;
    uint64_t id; /* unique: an event recorded in the capture names it */
    /* The clears made before it began (cpool__pool_clear_clock): a pool it
     * holds only later, and that was cleared since, makes a stale graph. */
    uint64_t clear_clock;
    /* Streams forked into it by events (the origin is the stream whose
     * storage holds the record); `forks` is inline_forks until more fork.
     * From its first event record on (a fork may wait for any record),
     * frees are tagged by branch (stream_order.h, cpool__key_branch). */
    cpool__fork *forks;
    size_t fork_count, fork_cap;
    bool branching;
    bool branch_tagged; /* a block was allocated or freed with a branch tag */
    bool invalidated;   /* a fork was destroyed while it took part */
    /* Attached (cpool_capture_attach) to a capture begun outside the
     * library: its owner ends the backend capture, never the library. */
    bool attached;
    /* pools[0] is the pool bound at begin (when there is one), then every
     * other pool allocated from or freed to under the capture. Each is a
     * reference. `pools` is inline_pools until more are held. */
    cpool__held_pool *pools;
    size_t pool_count, pool_cap;
    bool has_bound_pool;
    /* cpool_launch_host work was captured: a replay may run a callback that
     * releases the graph while its launch call is still under way. */
    bool host_work;
    /* A plan of outputs: entry i is an earlier run's i-th allocation, on
     * stream plan_streams[i], with bit i set when it outlived the run: an
     * output, packed with the pool's others (graph_pages.h). A graphed
     * call's comes from its last eager run; else the bound pool's guesses
     * (output_guesses.h) predict it (`predicted`: the capture owns the
     * arrays, and plan_sizes[i] is the size that output had). Each stream
     * takes its own entries in order: `alloc_index` is the origin's place,
     * a fork's is in its cpool__fork. */
    const uint64_t *plan;
    const uint64_t *plan_streams;
    size_t plan_bits, alloc_index;
    bool predicted;
    const size_t *plan_sizes;
    /* A predicted plan whose guesses are only noted, not acted on: the
     * pool's last capture guessed a scratch block for an output. */
    bool guesses_muted;
    /* Guesses far from the output's size are made too (output_guesses.h). */
    bool far_guesses;
    /* Its own allocations, for the plan its bound pool keeps for the next;
     * those its predicted plan took (or, muted, would have taken) for
     * outputs, to see whether that plan was right; and those at an
     * output's place that it did not take for being far from its size. */
    cpool__learn log, guesses, far_misses;
    uint64_t graph_id; /* the id its graph takes (an update: the graph's own) */
    cpool__held_pool inline_pools[CPOOL__CAPTURE_INLINE_POOLS];
    cpool__fork inline_forks[CPOOL__CAPTURE_INLINE_FORKS];
} cpool__capture;

/* The learning under way on this thread (a graphed call's last eager run),
 * or NULL; and how many threads learn now, so that the allocation fast path
 * reads one plain global, not the thread's storage, when none does. */
extern _Thread_local cpool__learn *cpool__learning;
extern atomic_int cpool__learners;
static inline cpool__learn *cpool__learning_now(void) {
    return __builtin_expect(atomic_load_explicit(&cpool__learners, memory_order_relaxed) != 0, 0) ? cpool__learning
                                                                                                  : NULL;
}
void cpool__learn_alloc(cpool__learn *l, void *ptr, uint64_t stream_id, size_t bytes);
void cpool__learn_free(cpool__learn *l, void *ptr);
void cpool__learn_forget(cpool__learn *l);

/* ---- stream.c ------------------------------------------------------------ */

/* Other files reach a stream through the functions below its definition. */
struct cpool_stream {
    cpool__handle_header handle;
    cpool_device *dev;
    cpool__bstream *impl;
    bool owned;
    /* Its place in the device's stream order (order.h): id, the capture
     * running here (&capture_storage while one runs), its fence. */
    cpool__order_stream order;
    cpool__capture capture_storage;
    cpool__deferred deferred_destroy; /* a destroy from a stream callback */
};

static inline cpool_device *cpool__stream_device(const cpool_stream *s) { return s->dev; }
/* Unique for the process's life: freed blocks carry it. */
static inline uint64_t cpool__stream_id(const cpool_stream *s) { return s->order.id; }
/* The capture s takes part in (begun on it with cpool_capture_begin, or
 * joined by a fork), or NULL. */
static inline cpool__capture *cpool__stream_capture(const cpool_stream *s) { return cpool__order_capture(&s->order); }
/* Whether s takes part in a capture begun on another stream. */
static inline bool cpool__stream_is_fork(const cpool_stream *s) {
    const cpool__capture *cap = cpool__stream_capture(s);
    return cap && cap != &s->capture_storage;
}
/* Whether s captures: a capture of capturepool's, or one begun with the
 * runtime directly (the backend is asked). */
static inline bool cpool__stream_captures(cpool_stream *s) {
    cpool_capture_state state = CPOOL_CAPTURE_NONE;
    return cpool__stream_capture(s) ||
           (s->dev->be->capture_status(s->impl, &state) == CPOOL_OK && state != CPOOL_CAPTURE_NONE);
}

/* ---- capture_record.c: the record's owner ---------------------------------- */

/* What a capture begins with besides its pool: a graphed call's plan of
 * outputs (outputs NULL: none), and the id its graph takes (0: a new one). */
typedef struct cpool__capture_plan {
    const uint64_t *outputs;
    const uint64_t *streams; /* the stream of each entry */
    size_t bits;
    uint64_t graph_id;
} cpool__capture_plan;

/* A new record with a unique id, made before the capture begins (plan may
 * be NULL): the clears made so far (cpool__pool_clear_clock) and the plan. */
void cpool__capture_init(cpool__capture *cap, cpool_capture_mode mode, uint64_t clear_clock,
                         const cpool__capture_plan *plan);
/* Moves a capture to `to` (its references go along). */
void cpool__capture_move(cpool__capture *to, cpool__capture *from);
/* Frees the record's arrays, touching no reference; not used after. */
void cpool__capture_forget(cpool__capture *cap);

/* The capture s takes part in, locked (release with cpool__capture_unlock),
 * or NULL. */
cpool__capture *cpool__capture_lock(cpool_stream *s);
void cpool__capture_unlock(cpool__capture *cap);
/* Begins the backend capture on s, recording the stream's capture fence
 * first (made or renewed as needed), and moves *cap into the stream,
 * atomically for other threads' quiesces and fences. On failure *cap is
 * left as it was. */
cpool_status cpool__capture_publish(cpool_stream *s, cpool__capture *cap);
/* As cpool__capture_publish for a backend capture that s runs already,
 * begun outside the library: nothing is begun, the record is marked
 * attached, and the stream's capture fence is dropped (none marks the work
 * from before that capture). CPOOL_ERR_NOT_CAPTURING or
 * CPOOL_ERR_CAPTURE_INVALIDATED by the backend's state. */
cpool_status cpool__capture_attach_publish(cpool_stream *s, cpool__capture *cap);
/* Moves the capture begun on s out to *cap, as it ends; every stream
 * forked into it stops taking part. */
void cpool__capture_take(cpool_stream *s, cpool__capture *cap);
/* s joins the capture `cap` (locked) that the event whose backend event is
 * ev was recorded in, waiting for it (a fork). */
cpool_status cpool__capture_fork(cpool_stream *s, cpool__capture *cap, cpool__bevent *ev);
/* A stream forked into a capture leaves it (it is destroyed), which
 * invalidates the capture; true when s is instead the origin of a capture,
 * which the caller then takes and ends. */
bool cpool__capture_leave(cpool_stream *s);

/* Whether the capture holds `pool`. */
bool cpool__capture_holds(const cpool__capture *cap, const cpool_pool *pool);
/* Makes room to hold one more pool (the only step that can fail). */
cpool_status cpool__capture_reserve(cpool__capture *cap);
/* Notes a pool the capture holds (a reference the caller took; `bound`:
 * the pool bound at begin, noted first); call after a reserve. */
void cpool__capture_add_pool(cpool__capture *cap, cpool_pool *pool, uint64_t generation, bool bound);
/* Forgets the pool noted last (a refused call undoes its hold). */
void cpool__capture_drop_last_pool(cpool__capture *cap);
/* The entry of `pool`, which the capture holds (NULL: it does not). */
cpool__held_pool *cpool__capture_held(cpool__capture *cap, const cpool_pool *pool);
/* The capture's arena in the entry's pool (graph_pages.h). */
void cpool__capture_set_arena(cpool__held_pool *held, struct cpool__arena *arena);

/* An event was recorded in the capture: a stream may fork from it, so its
 * frees and allocations go by branch from now on. */
void cpool__capture_note_event(cpool__capture *cap);
/* The key a capture's frees and allocations on stream `stream_id` go by: a
 * branch once an event was recorded in it (stream_order.h), else KEY_ANY
 * (any graph). */
cpool__stream_key cpool__capture_branch_of(cpool__capture *cap, uint64_t stream_id);
/* cpool_launch_host work was captured. */
void cpool__capture_note_host_work(cpool__capture *cap);
void cpool__capture_set_graph_id(cpool__capture *cap, uint64_t graph_id);

/* The bound pool's guesses of outputs (arrays of n entries the record
 * then owns), muted or with far guesses as the pool's last capture earned
 * (output_guesses.c, cpool__guesses_hand). */
void cpool__capture_predict(cpool__capture *cap, uint64_t *bits, uint64_t *streams, size_t *sizes, size_t n,
                            bool muted, bool far);
/* The plan's entry for the capture's next allocation on stream
 * `stream_id` into *entry (SIZE_MAX: none, it has no plan or the run did
 * not allocate there), and whether that entry outlived the run; whether a
 * guess packs it is output_guesses.c's (cpool__guesses_next). */
bool cpool__capture_plan_lookup(const cpool__capture *cap, uint64_t stream_id, size_t *entry);
/* The allocation at the plan's `entry` (SIZE_MAX: none) succeeded: the
 * stream's next is looked up after it. */
void cpool__capture_plan_taken(cpool__capture *cap, uint64_t stream_id, size_t entry);
/* Notes the capture's allocations and frees, for the plan its bound pool
 * keeps for the next capture; `guessed`: its predicted plan took (or,
 * muted, would have taken) the allocation for an output; `far_miss`: it
 * did not, at an output's place, for the size. */
void cpool__capture_log_alloc(cpool__capture *cap, void *ptr, uint64_t stream_id, size_t bytes, bool guessed,
                              bool far_miss);
void cpool__capture_log_free(cpool__capture *cap, void *ptr);

/* ---- capture.c ----------------------------------------------------------- */

/* Ends a capture begun on s (if any) and discards it with its references;
 * it makes no graph. On a fork, the stream leaves the capture, which is
 * invalidated. */
void cpool__capture_discard(cpool_stream *s);
/* In every pool the capture holds: the blocks freed on branch `from` up to
 * free sequence `upto` go to branch `to` (a join); at the end, every
 * branch's blocks become free for any graph. */
void cpool__capture_join_branch(cpool__capture *cap, cpool__stream_key from, uint64_t upto, cpool__stream_key to);
void cpool__capture_end_branches(cpool__capture *cap, uint64_t origin_id);
/* Drops every reference a capture that made no graph holds, forgetting what
 * it noted (its outputs are plain blocks); the record is not used after. */
void cpool__capture_release(cpool__capture *cap);
/* cpool_capture on objects for the public function `fn` (named by its
 * failures but the body's), with a plan (may be NULL), and without
 * instantiating when `instantiate` is false (the graph is then only for
 * cpool_graph_update). */
cpool_status cpool__capture_run(const char *fn, cpool_stream *s, cpool_pool *pool, cpool_capture_mode mode,
                                cpool_capture_fn body, void *ctx, const cpool__capture_plan *plan, bool instantiate,
                                cpool_graph **graph_out);

/* ---- graph.c ------------------------------------------------------------- */

/* Wraps an ended capture; on success the graph owns the capture's pool
 * references (the caller then forgets them). */
cpool_status cpool__graph_wrap(cpool_device *dev, cpool__bgraph *impl, const cpool__capture *cap, cpool_graph **out);
/* A reference of the library's own (no caller's), for a graph it keeps a
 * handle to, cheaply: the graph cache's launches. cpool__graph_unhold
 * drops it, as a release does. */
cpool_graph *cpool__graph_hold(cpool_graph *g);
void cpool__graph_unhold(cpool_graph *g);
/* Whether a cpool__graph_hold is under way (a launch not yet enqueued). */
bool cpool__graph_held(const cpool_graph *g);

/* A graph id never used before (ids name graphs in messages). */
uint64_t cpool__graph_new_id(void);
/* What an update of g captures with. */
typedef struct cpool__capture_recipe {
    cpool_pool *pool; /* bound, or NULL */
    cpool_capture_mode mode;
    uint64_t graph_id;
} cpool__capture_recipe;
/* Whether g may be updated on s, and with what (CPOOL_ERR_INVALID_ARGUMENT:
 * a stream of another device, or capturing). */
cpool_status cpool__graph_update_check(cpool_graph *g, cpool_stream *s, cpool__capture_recipe *out);
/* Makes g run fresh's work (a capture made for it, not instantiated), in
 * place where the backend can; fresh is released in every case, and on
 * failure g keeps its old work. */
cpool_status cpool__graph_take_work(cpool_graph *g, cpool_graph *fresh);

/* ---- param.c ------------------------------------------------------------- */

struct cpool_param {
    cpool__handle_header handle;
    struct cpool_param *next; /* in its pool's list, ended with the pool */
    cpool_pool *pool;         /* borrowed: the param lives inside it */
    void *ptr;
    size_t bytes;
};

/* ---- pool.c -------------------------------------------------------------- */

/* References that are not the callers' (captures, graphs, a clear at work):
 * the pool's public retain and release count the callers' as well. */
cpool_pool *cpool__pool_retain(cpool_pool *pool);
void cpool__pool_release(cpool_pool *pool);
/* The same, but the last reference's teardown always goes to the library's
 * thread (a graph's references: a graph's release never waits). */
void cpool__pool_release_without_waiting(cpool_pool *pool);
cpool_device *cpool__pool_device(const cpool_pool *pool);
/* Takes a reference to `pool` for the capture (no-op if it holds one); call
 * after cpool__capture_reserve. True if the hold is new. */
bool cpool__pool_hold_in_capture(cpool__capture *cap, cpool_pool *pool, bool bound);
/* In the pool: its blocks (its allocator's, the capture's arena's, the
 * packed region's) freed on branch `from` up to free sequence `upto` go to
 * branch `to`; in the packed region, to the capture's graph where `to` is
 * KEY_ANY (cpool__capture_join_branch). */
void cpool__pool_retag_branch(cpool_pool *pool, struct cpool__arena *arena, uint64_t capture_id,
                              cpool__stream_key from, uint64_t upto, cpool__stream_key to);
uint64_t cpool__pool_generation(const cpool_pool *pool);
/* Every pool's clears are numbered on one clock: a pool's generation is the
 * number of its last clear (0: none yet). */
uint64_t cpool__pool_clear_clock(void);
/* Launch bracket: enter fails (and holds nothing) when the pool was cleared
 * since `generation`; a clear waits for every entered launch to exit. */
/* CPOOL_OK, inside the pool's launch bracket until cpool__pool_launch_exit;
 * else CPOOL_ERR_STALE_GRAPH or CPOOL_ERR_SUSPENDED, outside. */
cpool_status cpool__pool_launch_enter(cpool_pool *pool, uint64_t generation);
bool cpool__pool_is_suspended(const cpool_pool *pool);
/* Before work on dev that writes or reads [dst, dst + bytes) and
 * [src, src + bytes) (src may be NULL) is enqueued: CPOOL_ERR_SUSPENDED
 * where either touches a suspended pool's memory (or one being suspended);
 * else CPOOL_OK, and cpool__pool_memory_exit once the work is enqueued (a
 * suspend waits for that). */
cpool_status cpool__pool_memory_enter(const cpool_device *dev, const void *dst, const void *src, size_t bytes);
void cpool__pool_memory_exit(void);
void cpool__pool_launch_exit(cpool_pool *pool);
/* Graphs and captures holding the pool: graph-reserved memory stays reserved
 * while either count is above zero. */
void cpool__pool_capture_attach(cpool_pool *pool);
void cpool__pool_capture_detach(cpool_pool *pool);
/* A capture's end, making graph `graph_id`: the pages of the capture's
 * arena in `pool` (one is opened where it allocated nothing, since the
 * arenas are the pool's list of its graphs) that hold its outputs become
 * the graph's own (graph_pages.h); it counts in the pool's graph_count
 * until released. CPOOL_ERR_OUT_OF_MEMORY: nothing changed. */
cpool_status cpool__pool_seal_arena(cpool_pool *pool, struct cpool__arena **arena, uint64_t capture_id,
                                    uint64_t graph_id);
/* The graph or capture holding the arena lets go of it; a sealed graph's
 * arena takes the graph's hold of the pool with it (returns true), so that
 * the pool counts graphs and holders in one step. */
bool cpool__pool_release_arena(cpool_pool *pool, struct cpool__arena *arena);
/* Gives back the pool's idle graph memory whose work is over, never
 * waiting (cpool__graph_pages_give_back_idle, the newest idle arena too:
 * for a graph cache that just evicted), under the pool's lock; then the
 * pool's graph_reserved_bytes, and the bytes of it that idle arenas whose
 * work still runs hold alone (they come back at a later call). */
void cpool__pool_give_back_graph_memory(cpool_pool *pool, uint64_t *graph_reserved_out, uint64_t *waiting_out);
/* The pool's graph_reserved_bytes after one more capture of that scratch
 * and those outputs (cpool__graph_pages_predict), under the pool's lock. */
uint64_t cpool__pool_predict_graph_bytes(cpool_pool *pool, uint64_t scratch_bytes, uint64_t output_bytes);
/* The pool's internal invariants (allocator and records); aborts with a
 * message on the first broken one. For tests and the fuzzer, which link the
 * static library and include this header. */
void cpool__pool_check(const cpool_pool *pool);
/* What a snapshot reads of a pool, all at one moment: fn runs under the
 * pool's lock (it must not call the library). */
typedef struct cpool__pool_view {
    cpool_pool_stats stats;
    /* Suspended: the memory is off the device (stats say 0 reserved), and
     * `resident` has the sums of what the resume maps back, which the
     * segments and arenas still list. */
    bool suspended;
    cpool_pool_stats resident;
    const char *backend;
    const cpool__allocator *alloc;
    const struct cpool__graph_pages *pages;
    cpool__front_view front[CPOOL__FRONT_ENTRIES]; /* sorted by address */
    size_t front_count;
} cpool__pool_view;
cpool_status cpool__pool_inspect(const cpool_pool *pool, cpool_status (*fn)(void *ctx, const cpool__pool_view *v),
                              void *ctx);
/* What a graph's arena in pool holds, under the pool's lock. */
struct cpool__arena_stats;
void cpool__pool_arena_stats(cpool_pool *pool, const struct cpool__arena *arena, struct cpool__arena_stats *out);
/* Something that must know a pool's device memory, e.g. a communicator that
 * registers it (objects/nccl.c): add sees every segment (whole, plain: a
 * block never spans two) before any block of it is handed out, and a
 * failure refuses it (the allocation that needed it fails with that
 * status); remove sees the same range before it goes back to the device,
 * once no work uses it (trim, the last release: a graph holding the pool
 * keeps it). Both run under the pool's lock and may not call the library.
 * release runs once after the last remove, when the pool is gone. */
typedef struct cpool__registrar {
    cpool_status (*add)(void *ctx, void *base, size_t bytes);
    void (*remove)(void *ctx, void *base, size_t bytes);
    void (*release)(void *ctx);
    void *ctx;
} cpool__registrar;
/* cpool_pool_create with a registrar (NULL: none). On failure release is
 * not called (the caller still owns ctx), and every add had its remove. */
cpool_status cpool__pool_create_registered(cpool_device *dev, const cpool_pool_options *opts,
                                           const cpool__registrar *registrar, cpool_pool **out);
/* The pool's registrar (NULL for NULL, a dead handle or one of another
 * type, noted as `fn`'s reason, or none). */
const cpool__registrar *cpool__pool_registrar(const cpool_pool *pool, const char *fn);

/* Makes a parameter block of `bytes` for the pool's whole life into *out,
 * kept in the pool's list and ended with the pool. */
cpool_status cpool__pool_add_param(cpool_pool *pool, size_t bytes, cpool_param **out);

/* The output guesses (output_guesses.h) at a capture's end and begin:
 * the capture that ended well, `cap`, bound to pool, teaches the pool's
 * guesses what outlived it; a capture bound to pool as it begins gets a
 * copy of them (nothing when there are none or no memory). */
void cpool__pool_learn_outputs(cpool_pool *pool, const cpool__capture *cap);
void cpool__pool_predict_outputs(cpool_pool *pool, cpool__capture *cap);

#endif /* CPOOL_INTERNAL_H */
