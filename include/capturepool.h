/*
 * capturepool: memory and lifetimes for captured CUDA graphs.
 *
 * A capture pool owns what a captured graph needs: memory it allocates
 * (stream-ordered, cached), objects the caller hands it (`record`), and a seal
 * that stops further allocation. A graph captured with a pool holds a
 * reference to it, so the memory lives as long as the last graph or user that
 * needs it and is given back only after the device finished with it.
 *
 * The same API runs on the CUDA runtime and on a host backend (the CPU), so a
 * program written against it runs unchanged where there is no GPU.
 * docs/GUIDE.md explains the ideas and the rules behind these comments; a
 * pointer such as (docs/GUIDE.md, "Lifetimes") names one of its sections.
 *
 * Contents, one section per object: its types first, then its functions.
 *   1. Library: versions, statuses and the last error, deferred teardown
 *   2. Devices
 *   3. Streams: stream work (host functions, copies, fills)
 *   4. Events: records, waits, multi-stream capture
 *   5. Pools: options, create, release, seal, record, alloc and free,
 *      stats, trim, suspend and resume
 *   6. Capture and graphs: capture, graphed calls, launch, stats, update
 *   7. Parameter blocks
 *   8. Snapshots
 *   9. Graph cache: graphs kept by key under a byte budget
 * capturepool_nccl.h adds pools registered with an NCCL communicator.
 *
 * Conventions
 * - Every function that can fail returns a cpool_status. A failed call
 *   changes nothing the caller can observe, except where stated; the reason
 *   in words is in cpool_last_error().
 * - Handles are opaque. Each handle names the function that creates it and
 *   the one that ends it; ending functions accept NULL and do nothing.
 * - Handles are checked. A device, stream, event, pool, graph or parameter
 *   block handle that was already closed, destroyed or released (a parameter
 *   block: whose pool ended) is recognised at every call, also after its
 *   memory went to a new handle of the same type, and so is a live handle of
 *   another type than the argument takes (a stream given as a pool): a call
 *   with a status returns CPOOL_ERR_INVALID_ARGUMENT, a call without one does
 *   nothing (one returning a value returns NULL, 0 or false), and both leave
 *   the reason in cpool_last_error() ("cpool_alloc: pool is a stream handle,
 *   not a pool"). A release or close beyond the references the caller holds
 *   is refused the same way: it never takes a reference that a stream, pool
 *   or graph of the library holds. A value that was never a handle is
 *   refused the same way, before anything is read at it, where it can be
 *   told at once: NULL, a number below 64 KiB, a value not 16-byte
 *   aligned, or a plain address (every handle carries a generation in its
 *   top 16 bits, which a pointer to anything else lacks: a stack or heap
 *   address, a struct cast to a handle). Any other value (arbitrary bits
 *   set in the top 16) is read as a handle would be: it may crash, as a
 *   wild pointer does.
 * - Calls from stream callbacks. Inside a cpool_launch_host callback, a
 *   call that would wait for stream work (cpool_stream_synchronize,
 *   cpool_pool_trim) returns CPOOL_ERR_INVALID_ARGUMENT at once, as CUDA
 *   refuses CUDA calls in host functions; teardown that would wait or call
 *   CUDA there (a last release, a stream destroy) is handed to a thread of
 *   the library (see cpool_pool_release), as is a pool's teardown when a
 *   graph held its last reference (see cpool_graph_release).
 * - A successful call leaves cpool_last_error() as it was.
 * - Argument order. The object a call acts on comes first: the one its
 *   name says (cpool_pool_*, cpool_graph_*, cpool_event_*, cpool_param_*:
 *   that object; cpool_stream_*: the stream, so cpool_stream_wait_event
 *   takes (stream, event)), the pool for cpool_alloc, cpool_alloc_output and
 *   cpool_free, and the stream for the calls that enqueue on or capture a
 *   stream and name no other object (cpool_launch_host, cpool_memcpy_async,
 *   cpool_memset_async, cpool_capture_*, cpool_capture, cpool_graphed_call).
 *   A create (cpool_*_create, cpool_stream_wrap) takes instead what it is
 *   made on first: a device, or the pool for cpool_param_create. Then come
 *   the call's values (sizes, pointers, modes, options), then a stream that
 *   is not the object (cpool_free(pool, ptr, stream),
 *   cpool_event_record(event, stream), cpool_graph_launch(graph, stream),
 *   cpool_param_set(param, value, bytes, stream)), then a callback beside
 *   the pointer it is handed (cpool_graph_update(graph, stream, body, ctx)),
 *   and an out-pointer is always last (cpool_alloc(pool, bytes, stream,
 *   &ptr)). Unlike CUDA's copies, cpool_memcpy_async and cpool_memset_async
 *   take the stream first.
 * - Versioned structs (options and stats) start with struct_size, which the
 *   caller sets to the sizeof it was compiled with; the library reads and
 *   fills only that many bytes, and fields appended later are marked with
 *   the version that added them ("since 0.2"). Each struct has an
 *   initializer, CPOOL_<STRUCT>_INIT, that sets struct_size and every
 *   field's default.
 * - Raw CUDA handles cross the API as `void *`: this header needs no CUDA
 *   header and compiles as C11 and as C++.
 */
#ifndef CAPTUREPOOL_H
#define CAPTUREPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; everything declared here is
 * its exported interface. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* ======================================================================== */
/* 1. Library: versions, statuses and the last error, deferred teardown     */
/* ======================================================================== */

/* The version of this header, in semantic versioning.
 * A new minor version adds API and keeps the ABI of the same major version
 * (structs grow only at the end and carry struct_size, statuses are never
 * renumbered, functions are never removed); a new patch version changes no
 * API. Major version 0 keeps these rules too (README, "Versions"). */
#define CPOOL_VERSION_MAJOR 0
#define CPOOL_VERSION_MINOR 2
#define CPOOL_VERSION_PATCH 0

/* The header's version as one number, MAJOR * 10000 + MINOR * 100 + PATCH.
 * 0.2.0 is 200, so versions compare with < and >. */
#define CPOOL_VERSION_NUMBER (CPOOL_VERSION_MAJOR * 10000 + CPOOL_VERSION_MINOR * 100 + CPOOL_VERSION_PATCH)

/* Whether this header is version major.minor.patch or later, at compile time.
 * #if CPOOL_VERSION_AT_LEAST(0, 2, 0) guards code that uses what 0.2.0 added.
 * Minor and patch below 100. */
#define CPOOL_VERSION_AT_LEAST(major, minor, patch)                                                          \
    (CPOOL_VERSION_NUMBER >= ((major) * 10000 + (minor) * 100 + (patch)))

/* The version of the library actually linked, as "MAJOR.MINOR.PATCH".
 * Static text. */
const char *cpool_version_string(void);

/* The version of the library actually linked, as CPOOL_VERSION_NUMBER.
 * It may be newer than the header a program was compiled with: compare it
 * with the header's CPOOL_VERSION_NUMBER at run time. Never fails. */
unsigned cpool_version(void);

/* The statuses: X(NAME, value, text) makes CPOOL_NAME = value, and text is
 * what cpool_status_string returns for it. Values are part of the ABI:
 * never renumbered, new ones appended (since 0.2: NOT_READY, OUTPUT_LIVE,
 * IO, SUSPENDED). */
#define CPOOL_STATUS_MAP(X)                                                                                  \
    X(OK, 0, "ok")                                                                                           \
    /* NULL where a handle is needed, a foreign pointer, ... */                                              \
    X(ERR_INVALID_ARGUMENT, 1, "invalid argument")                                                           \
    /* host or device memory could not be had */                                                             \
    X(ERR_OUT_OF_MEMORY, 2, "out of memory")                                                                 \
    /* the pool is sealed: it serves no new allocation */                                                    \
    X(ERR_SEALED, 3, "pool is sealed")                                                                       \
    /* capture_end on a stream that is not capturing */                                                      \
    X(ERR_NOT_CAPTURING, 4, "stream is not capturing")                                                       \
    /* capture_begin on a stream that already captures */                                                    \
    X(ERR_ALREADY_CAPTURING, 5, "stream is already capturing")                                               \
    /* the capture was broken (a forbidden call under capture); the partial graph was discarded, the         \
       stream is usable */                                                                                   \
    X(ERR_CAPTURE_INVALIDATED, 6, "capture was invalidated")                                                 \
    /* launch of a graph whose pool buffers were cleared after its capture */                                \
    X(ERR_STALE_GRAPH, 7, "graph is stale: its pool's buffers were cleared")                                 \
    /* the requested backend or device is not available here */                                              \
    X(ERR_NO_DEVICE, 8, "no such backend or device")                                                         \
    /* any other error of the CUDA runtime; see cpool_last_error() */                                        \
    X(ERR_BACKEND, 9, "backend error")                                                                       \
    /* the operation is not available on this backend */                                                     \
    X(ERR_UNSUPPORTED, 10, "not supported on this backend")                                                  \
    /* cpool_event_query: the work before the record has not finished */                                     \
    X(ERR_NOT_READY, 11, "the work before the event has not finished")                                       \
    /* kept for programs that handle it; never returned for graphs captured by this version: outputs lie     \
       on pages of their graph's own, which no other graph's replay writes (see cpool_pool) */               \
    X(ERR_OUTPUT_LIVE, 12, "the replay would overwrite a live output of another graph")                      \
    /* a file could not be opened or written (cpool_last_error says which and why) */                        \
    X(ERR_IO, 13, "a file could not be written")                                                             \
    /* the pool is suspended: its memory is given back until cpool_pool_resume */                            \
    X(ERR_SUSPENDED, 14, "the pool is suspended: its memory is given back until it resumes")

/* What every function that can fail returns (values from CPOOL_STATUS_MAP). */
typedef enum cpool_status {
#define CPOOL_STATUS_ENUM_ENTRY_(name, value, text) CPOOL_##name = value,
    CPOOL_STATUS_MAP(CPOOL_STATUS_ENUM_ENTRY_)
#undef CPOOL_STATUS_ENUM_ENTRY_
} cpool_status;

/* A short static description of `s` ("invalid argument", ...).
 * Never NULL, also for values outside the enum. */
const char *cpool_status_string(cpool_status s);

/* This thread's last failure in words; "" if this thread has seen none.
 * The text starts with the name of the function that failed and carries the
 * CUDA error name where one caused it ("cpool_alloc:
 * cudaErrorMemoryAllocation: out of memory (...)"). A capture whose body
 * failed leaves the body's own text (see cpool_capture). The text stays
 * until the thread's next failure. */
const char *cpool_last_error(void);

/* Waits until every teardown handed to the library's thread has finished.
 * Those are the teardowns of cpool_pool_release and cpool_graph_release
 * that could not wait where they were called. Inside a stream callback it
 * returns at once (it could wait for itself), leaving the reason in
 * cpool_last_error(). Called by a drop that the library's thread runs, it
 * runs the teardowns queued so far itself, as it cannot wait for its own
 * caller. May be called from any thread. */
void cpool_wait_deferred(void);

/* ======================================================================== */
/* 2. Devices                                                               */
/* ======================================================================== */

/* Which runtime a device runs on; AUTO picks one at cpool_device_open. */
typedef enum cpool_backend { CPOOL_BACKEND_AUTO = 0, CPOOL_BACKEND_CUDA, CPOOL_BACKEND_HOST } cpool_backend;

/* A device: one CUDA device, or the CPU for the host backend.
 * Created by cpool_device_open, ended by cpool_device_close. Streams, pools
 * and graphs made on a device keep it alive: closing it while they live only
 * drops the caller's reference. Once the caller's last reference is closed
 * the handle is a closed one for the calls that take a device (they are
 * refused, as for a dead handle) until it is opened again.
 * Thread-safe: opens, closes and every call on a device may come from any
 * thread at once; a close ends only a reference of its own caller's. */
typedef struct cpool_device cpool_device;

/* Opens a device, or takes one more reference to an open one.
 * CPOOL_BACKEND_AUTO opens CUDA device `ordinal` where a GPU and a driver
 * are usable and the host backend otherwise; the host backend has one
 * device, ordinal 0. Opening a device that is already open returns the same
 * device with one more reference.
 * Environment (docs/GUIDE.md, "Concepts"):
 * - CPOOL_BACKEND=host (or =cuda) makes AUTO pick that backend, so one
 *   program can run on either; any other non-empty value makes an AUTO open
 *   fail with CPOOL_ERR_INVALID_ARGUMENT, naming the value (an empty value
 *   counts as unset; an explicit backend ignores the variable). AUTO falling
 *   back to the host backend is a success and leaves cpool_last_error() as
 *   it was.
 * - CPOOL_HOST_MEMORY: the host backend's device has finite memory, as a
 *   GPU has. The variable (bytes, with an optional K, M or G suffix in
 *   binary units: "64M", "8G") caps what all pools of the device hold
 *   together; unset or empty, the machine's physical memory; 0, no bound
 *   (as 0 means for max_reserved_bytes). Past it, or
 *   where the system refuses memory, every call that needs device memory
 *   fails with CPOOL_ERR_OUT_OF_MEMORY and changes nothing. It is read when
 *   the device is opened (not again while it stays open); a value that is
 *   not a size makes the open fail with CPOOL_ERR_INVALID_ARGUMENT, naming
 *   the variable and the value.
 * - CPOOL_VIRTUAL_MEMORY (see cpool_pool_options, plain_segments) is "0" or
 *   "1" (empty counts as unset); any other value makes every open fail with
 *   CPOOL_ERR_INVALID_ARGUMENT, naming it, whichever backend is asked for.
 * Several CUDA devices: opening one connects it, both ways, with every open
 * device where the GPUs allow it (cudaDeviceCanAccessPeer; ordinals below
 * 64): peer access is enabled, and kernels on either may use the other's
 * pool memory, plain and growable segments alike, pages mapped before the
 * open included. Devices that do not allow it, or whose driver refuses a
 * step of the connection, stay apart; the open still succeeds.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (out is NULL, ordinal < 0,
 * unknown backend, a CPOOL_BACKEND that names none, a CPOOL_VIRTUAL_MEMORY
 * that is neither 0 nor 1, or a CPOOL_HOST_MEMORY that is not a size),
 * CPOOL_ERR_NO_DEVICE (CUDA asked for and no usable GPU, or no such
 * ordinal), CPOOL_ERR_OUT_OF_MEMORY, CPOOL_ERR_BACKEND. */
cpool_status cpool_device_open(cpool_backend backend, int ordinal, cpool_device **out);

/* Drops one of the caller's references to `dev`, one per open.
 * NULL: no-op; a close beyond the caller's opens is refused (see the
 * conventions). */
void cpool_device_close(cpool_device *dev);

/* The backend the device runs on: CPOOL_BACKEND_CUDA or CPOOL_BACKEND_HOST.
 * Never AUTO for an open device; CPOOL_BACKEND_AUTO only for a NULL, dead
 * or closed device. */
cpool_backend cpool_device_backend(const cpool_device *dev);

/* ======================================================================== */
/* 3. Streams                                                               */
/* ======================================================================== */

/* An in-order queue of work on a device.
 * Created by cpool_stream_create or cpool_stream_wrap, ended by
 * cpool_stream_destroy.
 * Thread-safety is CUDA's for streams: any thread may enqueue on a stream,
 * calls from two threads at once each land whole, in the order they get in;
 * a capture not begun in CPOOL_CAPTURE_RELAXED ends on the thread that began
 * it (CUDA requires it); cpool_stream_destroy must not race another call
 * with the same stream. cpool_stream_wait_event is with the events. */
typedef struct cpool_stream cpool_stream;

/* Creates a stream of its own on `dev`.
 * A non-blocking cudaStream_t on CUDA, a queue served by a worker thread on
 * the host backend.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT, CPOOL_ERR_OUT_OF_MEMORY,
 * CPOOL_ERR_BACKEND. */
cpool_status cpool_stream_create(cpool_device *dev, cpool_stream **out);

/* Wraps an existing cudaStream_t of the device (NULL: the legacy default
 * stream).
 * The stream is borrowed: cpool_stream_destroy never destroys it.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT, CPOOL_ERR_OUT_OF_MEMORY,
 * CPOOL_ERR_UNSUPPORTED (host backend: there is no CUDA stream to wrap). */
cpool_status cpool_stream_wrap(cpool_device *dev, void *cuda_stream, cpool_stream **out);

/* The cudaStream_t behind `s`; NULL on the host backend and for NULL. */
void *cpool_stream_native(const cpool_stream *s);

/* Waits until all work enqueued on `s` has finished.
 * On a capturing stream this breaks the capture, as on CUDA: it returns
 * CPOOL_ERR_CAPTURE_INVALIDATED and the capture can only be ended.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (also inside a stream
 * callback, where it would wait for itself), CPOOL_ERR_CAPTURE_INVALIDATED,
 * CPOOL_ERR_BACKEND (an earlier asynchronous error of the device). */
cpool_status cpool_stream_synchronize(cpool_stream *s);

/* Ends the stream once its work has finished; NULL: no-op.
 * A wrapped CUDA stream is only forgotten. Destroying a stream that is
 * capturing ends the capture first and discards it; destroying a stream
 * forked into a capture invalidates that capture (its end then fails). The
 * handle is dead at once; the stream's work still counts until it has
 * finished: a pool teardown or trim on another thread waits for it, and
 * memory freed on the stream goes to no other stream or graph before it
 * ran. Called inside a stream callback, the wait and the end are handed to
 * the library's thread. */
void cpool_stream_destroy(cpool_stream *s);

/* Enqueues fn(arg) on `s`, to run on a thread of the runtime in stream
 * order.
 * It runs after the stream's earlier work and before its later work, and
 * is captured like any other work, whoever began the capture the stream is
 * in (on CUDA, a capture begun with the runtime directly, or one the stream
 * was forked into through events). fn must not wait for stream work: the
 * library's calls that would wait refuse inside it (see the conventions).
 * Captured, the call is recorded with `arg` as it is: every replay calls
 * fn(arg) again, so what arg points to must live, unchanged where fn reads
 * it, as long as the graph can be launched (until the graph's last release
 * and its last launch finished; cpool_pool_record on the graph's pool
 * keeps it that long).
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (s or fn NULL),
 * CPOOL_ERR_OUT_OF_MEMORY, CPOOL_ERR_BACKEND. */
cpool_status cpool_launch_host(cpool_stream *s, void (*fn)(void *arg), void *arg);

/* Stream-ordered copy of `bytes` bytes (0: nothing is enqueued).
 * Both pointers are device memory of the stream's device or host memory
 * (CUDA decides the direction from the addresses). On a suspended pool's
 * memory it is refused with CPOOL_ERR_SUSPENDED (see cpool_pool_suspend).
 * Captured, the copy is recorded by address: every replay reads src and
 * writes dst again, so host memory on either side must stay allocated (and
 * hold what the replays should read) as long as the graph can be launched
 * (until its last release and its last launch finished; cpool_pool_record
 * on the graph's pool keeps a host buffer that long).
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL stream or pointer with
 * bytes > 0), CPOOL_ERR_SUSPENDED, CPOOL_ERR_BACKEND. */
cpool_status cpool_memcpy_async(cpool_stream *s, void *dst, const void *src, size_t bytes);

/* Stream-ordered fill of `bytes` bytes at dst with (unsigned char)value.
 * On a suspended pool's memory it is refused with CPOOL_ERR_SUSPENDED (see
 * cpool_pool_suspend).
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT, CPOOL_ERR_SUSPENDED,
 * CPOOL_ERR_BACKEND. */
cpool_status cpool_memset_async(cpool_stream *s, void *dst, int value, size_t bytes);

/* ======================================================================== */
/* 4. Events                                                                */
/* ======================================================================== */

/* A mark in a stream's order: a CUDA event on the CUDA backend, a position
 * in the stream's queue on the host backend.
 * Created by cpool_event_create, ended by cpool_event_destroy. Thread-safe
 * like a CUDA event: records, waits, queries and synchronizes may come from
 * any thread at once; a record and a query or wait may race, the outcome is
 * one of the two orders. cpool_event_destroy must not race another call
 * with the same event. On the host backend a record or wait on a stream
 * may race a capture's begin or end on that stream (it lands in the capture
 * or outside it); on the CUDA backend it must not, as CUDA then captures the
 * record or invalidates the capture behind the library's back.
 *
 * Multi-stream capture, CUDA's rules on both backends (docs/GUIDE.md,
 * "Concepts"). A record on a stream that captures marks its captured work.
 * Another stream that is not capturing and waits for that record joins the
 * capture (a fork): its work, cpool_alloc and cpool_free are captured into
 * the same graph and served by the capture's pools as on the stream it
 * began on (its origin), and cpool_capture_status reports it as capturing;
 * it may be used from any thread. A stream in the capture that waits for
 * such a record depends on the recorded work (a join). cpool_capture_end on
 * the origin needs every fork joined back (its last work recorded and
 * waited for by the origin, directly or through other forks); then every
 * fork stops capturing with it. A replay keeps the captured order between
 * streams and nothing more: on the host backend independent branches run
 * at the same time, one worker per stream of the capture.
 * Memory between branches: a block freed on one stream of a capture is
 * never handed to a stream whose work may run at the same time as its last
 * user. It is reused by the same stream, by a stream that joined it after
 * the free (a wait for a record made after the free, on the freeing stream
 * or on one that had joined it by then), and by any stream once the
 * capture ended. Frees on the origin before the capture's first event
 * record serve every branch: every fork comes after them. A block
 * allocated outside the capture and freed in it waits, as outside, for the
 * work enqueued before the free, and then serves its branch alone.
 * Forks must be made with these events: a stream the runtime forks with a
 * raw cudaStreamWaitEvent is not known to be capturing (its allocations
 * would be served as outside capture). */
typedef struct cpool_event cpool_event;

/* Creates an event on `dev`; its records are timed (cpool_event_elapsed_ms).
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT, CPOOL_ERR_OUT_OF_MEMORY,
 * CPOOL_ERR_BACKEND. */
cpool_status cpool_event_create(cpool_device *dev, cpool_event **out);

/* Ends the event; NULL: no-op.
 * It may still be pending: the work before its record goes on, and waits
 * already enqueued on it still hold. */
void cpool_event_destroy(cpool_event *e);

/* Marks the current end of `s`'s work in the event, replacing an earlier
 * record.
 * On a stream that captures, it marks its captured work (see cpool_event).
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL, dead, or an event of
 * another device), CPOOL_ERR_OUT_OF_MEMORY, CPOOL_ERR_CAPTURE_INVALIDATED
 * (CUDA: s's capture was broken), CPOOL_ERR_BACKEND. */
cpool_status cpool_event_record(cpool_event *e, cpool_stream *s);

/* Makes the work enqueued on `s` from now on wait for the work before the
 * event's record, without blocking the caller.
 * An event never recorded gives nothing to wait for. A record made in a
 * capture forks `s` into it, or, when `s` takes part in it, joins (see
 * cpool_event).
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL, dead, an event of
 * another device; a record made in another capture than s's, or in one that
 * has ended; s capturing and the record made outside its capture: nothing
 * changed), CPOOL_ERR_OUT_OF_MEMORY, CPOOL_ERR_BACKEND. */
cpool_status cpool_stream_wait_event(cpool_stream *s, cpool_event *e);

/* Whether the work before the event's record has finished; never blocks.
 * Returns CPOOL_OK when it has (or the event was never recorded),
 * CPOOL_ERR_NOT_READY while it has not; CPOOL_ERR_INVALID_ARGUMENT for NULL
 * or dead, or when the last record was made in a capture (it marks a place
 * in a graph, not stream work). */
cpool_status cpool_event_query(cpool_event *e);

/* Waits until the work before the record has finished.
 * At once for an event never recorded.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (also inside a stream
 * callback, where it could wait for itself, and for a record made in a
 * capture), CPOOL_ERR_BACKEND. */
cpool_status cpool_event_synchronize(cpool_event *e);

/* Milliseconds between the records of `start` and `end`, both completed.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL, dead, events of two
 * devices, one never recorded, or one recorded in a capture),
 * CPOOL_ERR_NOT_READY (a record has not completed), CPOOL_ERR_BACKEND. */
cpool_status cpool_event_elapsed_ms(cpool_event *start, cpool_event *end, float *ms_out);

/* ======================================================================== */
/* 5. Pools                                                                 */
/* ======================================================================== */

/* A reference-counted pool of memory and recorded objects.
 * Created by cpool_pool_create (one reference), ended by the last
 * cpool_pool_release; graphs captured with it hold references of their own.
 * Every pool function is thread-safe: any of them may come from any thread
 * at once, retains and releases too, as long as each call is made with a
 * reference that is still held (its caller's, or a graph's through
 * cpool_graph_pool).
 *
 * Memory (docs/GUIDE.md, "Concepts"). The pool caches what it takes from
 * the device in segments (2 MiB ones for requests up to 1 MiB, 20 MiB ones
 * for requests up to 10 MiB, segments of their own rounded to 2 MiB above)
 * and serves best fit from them. Outside capture a freed block is reusable
 * at once by its stream and by other streams once the stream's work before
 * the free has finished.
 * A block allocated under capture is graph memory, apart from these
 * segments: it keeps its address on every replay and is never handed to
 * work outside graphs, so eager allocations never share a page with a
 * graph. Each capture allocates in an arena of its own (address ranges
 * reserved for it), whose 2 MiB pages are backed by the pool's shared
 * physical pages: the k-th page of every arena by the same physical page.
 * Requests up to 4 KiB under capture, and outputs made with
 * cpool_alloc_output, come instead from a packed region of pages of the
 * pool's own, so that small outputs do not cost a page each; blocks a
 * capture frees there serve no other capture until its graph is released
 * (small scratch is not shared). A released graph's arena stays idle and
 * the next capture takes it as it is (addresses and mappings: nothing to
 * map again) once the device work enqueued before the release (the
 * graph's last launches) is over; until then a capture takes a new arena,
 * and it never waits for that work. cpool_pool_trim gives idle arenas
 * back.
 *
 * Graphs that share a pool (docs/GUIDE.md, "Graphs that share a pool").
 * Their scratch shares the pool's physical pages whatever the order of
 * their capture: graphs that each need 256 MiB of scratch hold 256 MiB
 * together. An output of a graph is a block its capture allocated that was
 * still allocated when the capture ended; it stays an output, also after
 * the graph is released, until it is freed. At the end of a capture the
 * pages that hold its outputs become the graph's own (nothing is copied:
 * the graph has not run), so no other graph's replay writes them. So graphs
 * sharing a pool
 *  - MAY be captured in any order, and replayed in any order, any number of
 *    times, one at a time: each replay is ordered after the previous one
 *    (the same stream, or an event between streams);
 *  - MAY read their outputs between replays: no graph's replay overwrites
 *    another graph's output while it is allocated, and no launch is refused
 *    for it. A graph's relaunch rewrites its own outputs, as in CUDA;
 *  - SHOULD allocate outputs with cpool_alloc_output under capture: they
 *    pack together in the packed region. One made with cpool_alloc packs
 *    too where the pool's last capture kept an output at the same place in
 *    its order of allocations (graphs per batch size allocate alike; up to
 *    16 MiB and 16 times that output's size), or where it is at most
 *    4 KiB; else it costs the pages it touches (at most one more than its
 *    size in pages);
 *  - MUST NOT run at the same time (launched on two streams without an order
 *    between them): they use the same physical pages for their scratch.
 * Where the pool has plain segments (plain_segments, an NCCL pool, or no
 * virtual memory management), no physical page can be mapped at two
 * addresses: each graph's memory is its own and nothing is shared, but an
 * idle arena is still reused. Graphs captured into different pools never
 * share memory. */
typedef struct cpool_pool cpool_pool;

/* How a pool is made: set struct_size, then the fields you need.
 * Start from CPOOL_POOL_OPTIONS_INIT, or zero-initialise and set
 * struct_size = sizeof(cpool_pool_options): a zero field means its
 * default. */
typedef struct cpool_pool_options {
    size_t struct_size; /* sizeof(cpool_pool_options); lets the struct grow */
    /* Bytes reserved from the device at creation, served to allocations
     * outside capture before any further segment is taken. 0 (default):
     * nothing is reserved up front. Rounded up to the segment granularity
     * (2 MiB). Memory reserved this way is given back by trim like any other
     * unused segment. */
    uint64_t reserve_bytes;
    /* Upper bound on reserved_bytes. An allocation that would take the pool
     * past it first gives cached, unused segments back, then fails with
     * CPOOL_ERR_OUT_OF_MEMORY. 0 (default): no bound but the device's. */
    uint64_t max_reserved_bytes;
    /* Appended fields. */
    /* Since 0.2. Plain segments instead of segments that grow in place.
     * false (default): segments grow and shrink in place where the platform
     * allows it (CUDA's virtual memory management; reserved address space
     * on the host backend): each is a reserved address range of which only
     * the pages in use are backed by memory, so free memory anywhere in it
     * joins new pages to serve a larger request, and trim gives back the
     * pages of free ranges inside it. Addresses never move. true: plain
     * segments instead, each one device allocation (cudaMalloc), for memory
     * that must be shared with other processes or registered where mapped
     * memory is not accepted. CPOOL_VIRTUAL_MEMORY=0 in the environment
     * gives every pool plain segments, as on a platform without virtual
     * memory management. cpool_pool_grows_in_place tells which a pool has. */
    bool plain_segments;
} cpool_pool_options;

/* cpool_pool_options with struct_size set and every field at its default
 * (all zero: nothing reserved, no bound, segments that grow in place):
 *     cpool_pool_options opts = CPOOL_POOL_OPTIONS_INIT;
 * C and C++ alike. Passing it is the same as passing NULL. */
#define CPOOL_POOL_OPTIONS_INIT {sizeof(cpool_pool_options), 0, 0, false}

/* Creates a new, unsealed pool on `dev` holding one reference.
 * opts may be NULL (all defaults); only its first opts->struct_size bytes
 * are read, so an older caller's smaller struct works, its missing fields
 * at their defaults.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (dev or out NULL,
 * opts->struct_size too small, reserve_bytes rounded up to 2 MiB above
 * max_reserved_bytes, or CPOOL_VIRTUAL_MEMORY in the environment neither 0
 * nor 1: see cpool_device_open),
 * CPOOL_ERR_OUT_OF_MEMORY (reserve_bytes could not be had), CPOOL_ERR_BACKEND. */
cpool_status cpool_pool_create(cpool_device *dev, const cpool_pool_options *opts, cpool_pool **out);

/* Adds a reference of the caller's; returns pool.
 * NULL for NULL or a dead handle. */
cpool_pool *cpool_pool_retain(cpool_pool *pool);

/* Drops a reference; the last one waits for the device, drops the recorded
 * objects and gives the memory back. NULL: no-op.
 * The last one waits until the device finished every launch of the pool's
 * graphs and the stream work on its allocations (it waits for every stream
 * of the device made or wrapped with cpool_stream_create /
 * cpool_stream_wrap; work on CUDA streams the library does not know is the
 * caller's to finish), then drops the recorded objects in registration
 * order and gives the memory back, on the calling thread. When the last
 * reference goes on a thread that runs stream work (inside a
 * cpool_launch_host callback), waiting there could deadlock: the teardown
 * is then handed to a thread of the library and happens soon after;
 * cpool_wait_deferred() waits for it. The caller's references are the one
 * from cpool_pool_create and one per cpool_pool_retain; a release beyond
 * them is refused (see the conventions), so a graph's reference is never
 * taken. A pool that graphs still hold stays usable through
 * cpool_graph_pool after the caller released it; the graph's last release
 * then hands the teardown to the library's thread (see cpool_graph_release;
 * docs/GUIDE.md, "Lifetimes"). */
void cpool_pool_release(cpool_pool *pool);

/* Seals the pool: from now on cpool_alloc returns CPOOL_ERR_SEALED.
 * Under capture or not. Freeing, recording and capturing still work. */
void cpool_pool_seal(cpool_pool *pool);

/* Lifts the seal. */
void cpool_pool_unseal(cpool_pool *pool);

/* Whether the pool is sealed (false for NULL). */
bool cpool_pool_is_sealed(const cpool_pool *pool);

/* Whether the pool's segments grow in place (cpool_pool_options,
 * plain_segments).
 * False when plain segments were asked for, when the device or driver has
 * no virtual memory management (the pool then falls back to plain segments
 * by itself), and for NULL or a dead handle. */
bool cpool_pool_grows_in_place(const cpool_pool *pool);

/* Hands the pool an object to keep alive until a clear or the pool's end.
 * The pool calls drop(object) exactly once, at cpool_pool_clear_buffers or
 * when its last reference goes, in registration order, on an ordinary
 * thread (never a stream callback), so drop may call the CUDA runtime. drop
 * may be NULL: the pool then only counts the object. A drop may call any
 * function of the library, on its own pool too (cpool_pool_clear_buffers,
 * cpool_pool_release, cpool_wait_deferred): nothing deadlocks and every
 * drop still runs exactly once, in order. While the pool's last reference
 * is being torn down its handle is dead, so a drop's call with it is
 * refused. index_out (may be NULL) gets the object's index among the
 * recorded ones: 0, 1, 2, ..., restarting after a clear.
 * Allowed on a sealed pool and under capture (it allocates nothing from the
 * device).
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (pool NULL),
 * CPOOL_ERR_OUT_OF_MEMORY (host memory; drop is then not called). */
cpool_status cpool_pool_record(cpool_pool *pool, void *object, void (*drop)(void *object), size_t *index_out);

/* Number of objects recorded since creation or the last clear (0 for NULL). */
size_t cpool_pool_buffer_count(const cpool_pool *pool);

/* Drops the recorded objects now, once the device is done with them; the
 * graphs captured before it become stale.
 * Waits as the last release does (every launch of the pool's graphs, the
 * stream work of the device), then drops the recorded objects in
 * registration order. The pool stays usable and takes new records. Graphs
 * captured with the pool before the clear can no longer be launched:
 * cpool_graph_launch returns CPOOL_ERR_STALE_GRAPH for them; so do graphs
 * whose capture began before the clear and took the pool only after it
 * (its work from before may use what the clear dropped). A record made
 * while the clear runs is dropped by it or kept, as the clear came before
 * or after it; a capture that began after the clear keeps what it records.
 * Memory from cpool_alloc is not touched. Called on a thread that runs
 * stream work, the drops are handed to the library's thread (see
 * cpool_pool_release). While another clear of the pool is dropping, the
 * records go to it and this call returns once they are dropped; a clear
 * made inside a drop (of this pool or any other) or by the library's
 * thread returns at once, its records dropped right after by the clear at
 * work, so drops that clear each other's pools never wait for each other. */
void cpool_pool_clear_buffers(cpool_pool *pool);

/* Allocates `bytes` bytes (256-byte aligned) from the pool, stream ordered
 * like cudaMallocAsync.
 * The memory may be used by work enqueued on `s` after the call. Served
 * from the pool's cache without a device call when it can be. Under a
 * capture on `s` begun with cpool_capture_begin, or one `s` was forked into
 * (cpool_event), the memory is graph memory, in the capture's arena (see
 * cpool_pool): the same address on every replay, never handed to work
 * outside graphs. A block still allocated when the capture ends (an output)
 * costs the pages it touches, unless it is packed with the pool's other
 * outputs: up to 4 KiB, or where the pool's last capture kept an output at
 * the same place (see cpool_pool). A pool other than the capture's own may
 * be used too: the graph then holds a reference to it as well.
 * When the device (or max_reserved_bytes) leaves no room for a new segment,
 * the pool first gives back its cached segments that are unused and have no
 * stream work pending, and tries once more (it never waits for the device
 * here), under capture as outside: that is the only change a failed
 * allocation can leave.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL argument, bytes == 0, a
 * stream of another device), CPOOL_ERR_SEALED (nothing changed),
 * CPOOL_ERR_SUSPENDED (see cpool_pool_suspend: nothing changed),
 * CPOOL_ERR_OUT_OF_MEMORY (also at once, with nothing changed, for more
 * than 2^47 bytes), CPOOL_ERR_BACKEND. */
cpool_status cpool_alloc(cpool_pool *pool, size_t bytes, cpool_stream *s, void **ptr_out);

/* cpool_alloc for a block that outlives the capture it is allocated in (a
 * graph's output).
 * Under capture it comes from the pool's packed region, where outputs of
 * any size pack together instead of each costing the pages it touches; no
 * other graph's replay writes it (see cpool_pool). Outside capture it is
 * cpool_alloc.
 * Returns as cpool_alloc. */
cpool_status cpool_alloc_output(cpool_pool *pool, size_t bytes, cpool_stream *s, void **ptr_out);

/* Frees memory from cpool_alloc, stream ordered.
 * Work enqueued on `s` after the free may get the memory again at once;
 * work on another stream only once the work enqueued on `s` before the free
 * has finished, or at once when that stream has since waited
 * (cpool_stream_wait_event) for an event recorded on `s` after the free:
 * reuse follows event dependencies, as cudaMallocAsync's does by default
 * (the last few streams waited for are remembered per stream; dependencies
 * through a chain of events count only as far as the library can see
 * them). A graph block freed under capture serves the capture's later
 * allocations (by the rules of branches, see cpool_event); one of 4 KiB or
 * less, in the packed region, serves no other capture until its graph is
 * released. A block of another graph (its output) or of another capture
 * still open, freed under capture, serves nothing until this capture's
 * graph is released (and the other's, or the other capture's end): both
 * may write it until then; the free counts in the stats at once, and a
 * second free is refused. A graph block freed outside capture (a graph's
 * output) is stream ordered: a later capture that takes its arena reuses
 * it after a cpool_pool_trim has seen its work finish. A block allocated outside
 * capture and freed under capture is the graph's on every replay: it
 * becomes graph-reserved, serves no eager work and no capture, and returns
 * to general use at a cpool_pool_trim made while no graph and no capture
 * holds the pool. Allowed while the pool is suspended.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL argument, or a pointer
 * this pool did not hand out or already freed: nothing changes). */
cpool_status cpool_free(cpool_pool *pool, void *ptr, cpool_stream *s);

/* A pool's counters (cpool_pool_get_stats). Set struct_size first:
 * CPOOL_POOL_STATS_INIT does. */
typedef struct cpool_pool_stats {
    size_t struct_size;            /* caller sets sizeof(cpool_pool_stats) */
    uint64_t reserved_bytes;       /* memory the pool holds from the device now */
    uint64_t reserved_bytes_peak;  /* highest reserved_bytes since creation */
    uint64_t allocated_bytes;      /* bytes of live allocations, as requested by the callers */
    uint64_t allocated_bytes_peak;
    uint64_t graph_reserved_bytes; /* part of reserved_bytes held for captured graphs */
    /* segment_count: plain segments, or, where segments grow in place,
     * runs of mapped pages (a snapshot's segments). reserved_bytes counts
     * mapped memory only, never address space. */
    uint64_t alloc_count, free_count, segment_count;
    /* Appended fields: a struct_size that ends at segment_count is enough. */
    uint64_t cached_bytes;        /* since 0.1: reserved bytes in no live block: free, reusable */
    uint64_t graph_count;         /* since 0.1: live graphs holding the pool, from the end of their
                                     capture until their release lets go of it; a snapshot's
                                     "graphs" lists these */
    uint64_t host_kept_bytes;     /* since 0.2: bytes of live blocks kept in host memory while the
                                     pool is suspended with CPOOL_SUSPEND_KEEP_CONTENTS (else 0) */
    uint64_t host_reserved_bytes; /* since 0.2: host memory the pool holds for them: while
                                     suspended, and after a resume the buffer kept for the next
                                     suspend, which cpool_pool_trim gives back */
} cpool_pool_stats;

/* cpool_pool_stats with struct_size set and every counter zero, ready for
 * cpool_pool_get_stats: cpool_pool_stats st = CPOOL_POOL_STATS_INIT; */
#define CPOOL_POOL_STATS_INIT {sizeof(cpool_pool_stats), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

/* Fills *out with the pool's counters, exact at the time of the call.
 * Fills only the first out->struct_size bytes, so an older caller's smaller
 * struct works. Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL, or
 * struct_size smaller than the fields up to segment_count). */
cpool_status cpool_pool_get_stats(const cpool_pool *pool, cpool_pool_stats *out);

/* Gives cached, unused memory back to the device, once the device's stream
 * work is done.
 * Gives back every cached segment that holds no live block; where segments
 * grow in place, the memory of every whole page of free memory, also
 * between live blocks (the address range stays reserved and maps again on
 * demand; no address in use moves), in the pieces it was mapped in: a
 * growth of less than 1 GiB page by page (2 MiB), a growth of 1 GiB or
 * more, and each piece (up to 2 GiB) of a run of pages that a
 * cpool_pool_resume mapped, only whole, once no live block is in it (each is one device allocation, as a
 * driver's mapping is given back only whole: a GiB costs one mapping, not
 * 512). Waits for the stream work of the
 * device first, as cudaFree does. Of graph memory it gives back the idle
 * arenas (those of graphs released before that wait, with no output left:
 * their addresses and pages), the shared pages no arena maps any more, and,
 * while no graph and no capture holds the pool, the free pages of the
 * packed region and eager blocks freed under capture. It also gives back
 * the host buffer a resume kept (host_reserved_bytes); while the pool is
 * suspended it gives back no device memory: the pool holds none.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (also inside a stream
 * callback, where it would wait for itself), CPOOL_ERR_BACKEND. */
cpool_status cpool_pool_trim(cpool_pool *pool);

/* How cpool_pool_suspend treats the bytes of live blocks. */
typedef enum cpool_suspend_mode {
    CPOOL_SUSPEND_KEEP_CONTENTS = 0, /* live blocks' bytes go to host memory and come back at resume */
    CPOOL_SUSPEND_DISCARD = 1,       /* live blocks keep their addresses, not their bytes */
} cpool_suspend_mode;

/* Gives every page of the pool back to the device, keeping its addresses,
 * so that graphs holding it replay after cpool_pool_resume without being
 * captured again (docs/GUIDE.md, "Suspend and resume").
 * Waits for the device to finish every launch of every graph that holds
 * the pool and the stream work on its blocks (as a last release does),
 * then gives every page of the pool back to the device: cached, graph and
 * live memory alike; reserved_bytes and graph_reserved_bytes read 0 until
 * the resume. With CPOOL_SUSPEND_KEEP_CONTENTS the bytes of live blocks
 * (allocations outside capture not yet freed, and graph outputs) are first
 * copied to host memory (pinned on CUDA); free, cached and scratch memory
 * is given back without a copy. Addresses stay reserved. The whole pages
 * of free blocks do not come back at the resume (a wake maps only what
 * holds blocks): they map again when an allocation asks for them, as
 * after a cpool_pool_trim. Recorded objects
 * (cpool_pool_record) are the caller's and are left as they are.
 * While suspended, cpool_alloc and cpool_alloc_output on the pool, a
 * capture that would hold it (cpool_capture_begin with it bound, or
 * cpool_capture), and cpool_graph_launch and cpool_graph_upload of a graph
 * holding it return CPOOL_ERR_SUSPENDED and change nothing, as do
 * cpool_memcpy_async and cpool_memset_async on its memory and
 * cpool_param_set of its parameter blocks; cpool_free,
 * record, clear_buffers, stats, snapshots, trims and releases work (a
 * trim gives back nothing then: the pool holds no device memory).
 * Suspending a suspended pool returns CPOOL_OK and changes nothing.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL or dead pool, a mode
 * outside the enum, a capture using the pool, or inside a stream callback,
 * where it would wait for itself), CPOOL_ERR_UNSUPPORTED (a pool whose
 * memory cannot keep its addresses: plain segments, see
 * cpool_pool_grows_in_place, or an NCCL pool), CPOOL_ERR_OUT_OF_MEMORY
 * (no host memory for the copy: the pool stays resident and usable, and
 * nothing else changed, except that, as a cpool_pool_trim would, it may
 * have given back cached memory and the host buffer an earlier resume
 * kept), CPOOL_ERR_BACKEND. */
cpool_status cpool_pool_suspend(cpool_pool *pool, cpool_suspend_mode mode);

/* Maps memory at a suspended pool's addresses again (the pages that held
 * blocks, and graph memory) and restores the bytes a KEEP_CONTENTS suspend
 * kept.
 * On CPOOL_OK every graph holding the pool launches as before and, from the
 * same inputs, writes the same bytes (after a DISCARD suspend, live blocks
 * hold unspecified bytes until written). Resuming a pool that is not
 * suspended returns CPOOL_OK and changes nothing. The host buffer of the
 * copy is kept for the next suspend (host_reserved_bytes); cpool_pool_trim
 * gives it back. Each run of contiguous pages comes back in few device
 * allocations of up to 2 GiB, a mapping each (a wake costs a mapping per
 * piece of a run, not per page): the whole pages of each block of 64 MiB
 * or more, and of each stretch of free blocks as large, are pieces of their
 * own, smaller neighbours share one. A later trim gives a piece back only
 * whole (cpool_pool_trim). Graph memory comes back the same way: pages that
 * graphs share at consecutive addresses are one allocation, mapped once in
 * each of them, also in a graph that uses only its first pages (mapped past
 * them, at addresses the graph reserved and never writes): graphs whose
 * scratch nests, one per batch size, map one allocation each. (A graph
 * captured while no other graph's memory is in the pool may reserve no
 * such addresses, so that a capture into a fresh pool costs no more than
 * it would without them: if it is the smallest, the allocation is split
 * where its pages end.) What only such
 * addresses still map (its larger graphs released) goes back by the next
 * cpool_pool_trim.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL or dead pool, or
 * inside a stream callback), CPOOL_ERR_OUT_OF_MEMORY (the device memory
 * cannot be had: the pool stays suspended, nothing leaked, and a later
 * resume may succeed), CPOOL_ERR_BACKEND. */
cpool_status cpool_pool_resume(cpool_pool *pool);

/* Whether the pool is suspended (false for NULL or a dead pool). */
bool cpool_pool_is_suspended(const cpool_pool *pool);

/* ======================================================================== */
/* 6. Capture and graphs                                                    */
/* ======================================================================== */

/* How a capture treats unsafe calls on other threads (cudaStreamCaptureMode).
 * GLOBAL is the default. */
typedef enum cpool_capture_mode {
    CPOOL_CAPTURE_GLOBAL = 0,
    CPOOL_CAPTURE_THREAD_LOCAL,
    CPOOL_CAPTURE_RELAXED
} cpool_capture_mode;

/* A stream's capture state (cudaStreamCaptureStatus). */
typedef enum cpool_capture_state {
    CPOOL_CAPTURE_NONE = 0,
    CPOOL_CAPTURE_ACTIVE,
    CPOOL_CAPTURE_INVALIDATED
} cpool_capture_state;

/* An instantiated, launchable graph.
 * Created by cpool_capture_end, cpool_capture or cpool_graphed_call, ended
 * by the last cpool_graph_release.
 * Thread-safe but for update: launches, uploads, retains, releases and the
 * getters may come from any thread at once; cpool_graph_update must not race
 * another call with the same graph. Its replays must be ordered one after
 * another (one stream, or events between streams), like those of graphs
 * sharing its pool (see cpool_pool): they use the same scratch memory. */
typedef struct cpool_graph cpool_graph;

/* The work to capture: enqueue it on `s` and return CPOOL_OK, or a failure
 * that discards the capture (cpool_capture, cpool_graphed_call,
 * cpool_graph_update). */
typedef cpool_status (*cpool_capture_fn)(cpool_stream *s, void *ctx);

/* Starts capturing the work enqueued on `s`: from now on it is recorded, not
 * run.
 * With a pool (may be NULL) the capture is bound to it: it holds a
 * reference, and cpool_alloc(pool, ..., s, ...) under the capture is served
 * from graph memory (an arena of the capture's own, see cpool_pool). A
 * sealed pool is accepted; the capture can then allocate nothing from it. A
 * suspended pool is refused (see cpool_pool_suspend).
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (s NULL, a bad mode, a pool of
 * another device), CPOOL_ERR_ALREADY_CAPTURING, CPOOL_ERR_SUSPENDED,
 * CPOOL_ERR_BACKEND. On failure the stream is not capturing and no
 * reference is taken. */
cpool_status cpool_capture_begin(cpool_stream *s, cpool_pool *pool, cpool_capture_mode mode);

/* Ends the capture on `s` and instantiates its graph into *graph_out.
 * The graph holds its own reference to the capture's pool (and to any other
 * pool allocated from under the capture): the caller may release its own
 * right after. Blocks that are still allocated at the end (the graph's
 * outputs) stay reserved until freed; the pages that hold them become the
 * graph's own, so that no other graph's replay writes them.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL argument, or `s` was
 * forked into a capture begun on another stream; the capture goes on),
 * CPOOL_ERR_NOT_CAPTURING, CPOOL_ERR_CAPTURE_INVALIDATED (the capture was
 * broken, a fork was not joined back, or a fork was destroyed: the partial
 * graph is discarded), CPOOL_ERR_OUT_OF_MEMORY, CPOOL_ERR_BACKEND
 * (instantiation failed). On every failure but INVALID_ARGUMENT the stream
 * and every stream forked into its capture are no longer capturing,
 * *graph_out is NULL and the capture's references are gone; blocks
 * allocated in the capture are plain blocks, for the caller to free. */
cpool_status cpool_capture_end(cpool_stream *s, cpool_graph **graph_out);

/* Serves a capture that someone else began (a runtime call such as
 * cudaStreamBeginCapture on the stream's native handle, as PyTorch's
 * torch.cuda.graph does) from `pool`, until cpool_capture_detach.
 * From now on cpool_alloc, cpool_alloc_output and cpool_free on `s` (and on
 * streams forked into the capture through cpool_event_record and
 * cpool_stream_wait_event) are graph memory in an arena of this capture,
 * exactly as in a capture begun with cpool_capture_begin(s, pool, ...):
 * its scratch shares pages with the pool's other graphs, the pages of
 * blocks still allocated at the detach (its outputs) become its own.
 * The capture stays its owner's: cpool_capture_end refuses it while
 * attached; the owner ends it after cpool_capture_detach.
 * The stream's work enqueued before the capture began cannot be fenced
 * while it captures (an event recorded there would go into the capture):
 * blocks freed on `s` before it stay reusable on `s` only until a fence
 * recorded after the capture ends sees that work done, and a teardown
 * (trim, clear, suspend, the pool's last release) while it is attached
 * does not wait for that work, as for any stream the runtime captures
 * directly. On the host backend a stream captures only through the
 * library, whose own captures need no attach: there it is reached through
 * the backend's table (tests/test_attach.c).
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL handle, a pool of
 * another device), CPOOL_ERR_NOT_CAPTURING (the stream does not capture),
 * CPOOL_ERR_CAPTURE_INVALIDATED (its capture is broken already),
 * CPOOL_ERR_ALREADY_CAPTURING (attached already, or a capture begun with
 * cpool_capture_begin, whose pools serve it without an attach),
 * CPOOL_ERR_SUSPENDED, CPOOL_ERR_BACKEND. On failure nothing changed. */
cpool_status cpool_capture_attach(cpool_stream *s, cpool_pool *pool);

/* Says that [offset, offset + bytes) of `block` (allocated from `pool` in
 * the capture that `s` takes part in, begun or attached, and still
 * allocated) is scratch: bytes that the graph's replays use and no one
 * reads after them. At the capture's end (or detach) the whole pages in
 * that range stay shared with the pool's other graphs instead of becoming
 * the graph's own as the pages of a live block do; the rest of the block
 * is an output as before. For an allocator above the pool that keeps
 * outputs and scratch in one block (PyTorch's caching allocator keeps
 * whole segments: capturepool.torch notes their inactive blocks). The
 * block stays allocated; its free later frees all of it. A block that
 * lies in pages of its own already (small, or packed as a guessed output)
 * is left as it is. Notes of a block end with it.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL or dead handle, NULL
 * block, a block not allocated from pool in this capture, a range past
 * its end), CPOOL_ERR_NOT_CAPTURING (s takes part in no capture of the
 * library), CPOOL_ERR_OUT_OF_MEMORY. On failure nothing changed. */
cpool_status cpool_capture_note_scratch(cpool_stream *s, cpool_pool *pool, void *block, size_t offset,
                                        size_t bytes);

/* Ends the attachment of cpool_capture_attach, before the owner ends its
 * capture: the capture's arenas are sealed (the pages of blocks still
 * allocated become its own), the stream stays capturing for its owner,
 * and *hold_out is a graph that holds the pools and the capture's memory
 * as a graph made by cpool_capture_end does (cpool_pool_stats.graph_count,
 * cpool_graph_get_stats, snapshots, a suspend count it) but has no
 * executable: cpool_graph_launch, cpool_graph_upload, cpool_graph_update
 * and cpool_graph_dump_dot refuse it (CPOOL_ERR_INVALID_ARGUMENT) and
 * cpool_graph_native gives NULL. The owner's graph replays in that memory:
 * release the hold (cpool_graph_release) only once the owner's graph is
 * destroyed, after its last replay; the scratch then goes back to the
 * pool's other graphs. The library cannot see the owner's replays: a
 * suspend or a clear of a pool the hold holds does not wait for them, and
 * the owner must not replay while a pool is suspended, nor after a clear.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL argument, `s` was
 * forked into the capture, or the capture was begun with
 * cpool_capture_begin), CPOOL_ERR_NOT_CAPTURING (nothing is attached),
 * CPOOL_ERR_OUT_OF_MEMORY. On OUT_OF_MEMORY the attachment is gone as
 * well, *hold_out is NULL and the capture's memory went back to the pool
 * (its blocks are plain blocks, for the caller to free): the owner must
 * discard its capture and never launch it. */
cpool_status cpool_capture_detach(cpool_stream *s, cpool_graph **hold_out);

/* The capture state of `s`, also of a stream forked into a capture.
 * NONE, ACTIVE, or INVALIDATED (broken; only cpool_capture_end on the
 * capture's origin can follow).
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT, CPOOL_ERR_BACKEND. */
cpool_status cpool_capture_status(cpool_stream *s, cpool_capture_state *out);

/* Scoped capture: begin, body(s, ctx), end.
 * If the body returns anything but CPOOL_OK, the capture is ended, the
 * partial graph discarded and the body's status returned; the stream is
 * usable again and *graph_out is NULL.
 * Returns CPOOL_OK, the statuses of begin and end, or the body's. */
cpool_status cpool_capture(cpool_stream *s, cpool_pool *pool, cpool_capture_mode mode, cpool_capture_fn body,
                           void *ctx, cpool_graph **graph_out);

/* Runs body(s, ctx) eagerly `warmup_runs` times on `s`, then captures it
 * once with `pool` and `mode` into *out.
 * The eager runs make lazy initialisation, library handles and workspace
 * allocations happen outside capture. The last eager run shows which of
 * the body's allocations outlive it: the capture's allocations in those
 * places (by their order, stream by stream) are outputs, packed as
 * cpool_alloc_output packs them (see cpool_pool). Graphed calls into one
 * pool replay in any order while their scratch is shared; with
 * warmup_runs == 0 nothing is learnt and the capture's outputs are kept
 * like any capture's.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL argument, warmup_runs
 * < 0), the body's first failing status (eagerly or under capture), or any
 * status of cpool_capture. On failure *out is NULL. */
cpool_status cpool_graphed_call(cpool_stream *s, cpool_pool *pool, cpool_capture_mode mode, int warmup_runs,
                                cpool_capture_fn body, void *ctx, cpool_graph **out);

/* Launches the graph on `s`: its work runs after the stream's earlier work.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL, a stream of another
 * device, or a stream that is capturing), CPOOL_ERR_STALE_GRAPH (its pool's
 * buffers were cleared after the capture: nothing is launched),
 * CPOOL_ERR_SUSPENDED (a pool it holds is suspended: nothing is launched),
 * CPOOL_ERR_BACKEND (also, with nothing launched, when pages of the graph's
 * memory were lost: the platform refused to remap them, and then to map
 * their old memory back; capture the graph again). A replay never
 * overwrites another graph's live output, so CPOOL_ERR_OUTPUT_LIVE is never
 * returned for graphs captured by this version (see cpool_pool). */
cpool_status cpool_graph_launch(cpool_graph *g, cpool_stream *s);

/* Uploads the graph's executable to the device ahead of its first launch.
 * In stream order on `s`, so that launch pays no upload. Idempotent; a
 * no-op on the host backend. Returns as cpool_graph_launch. */
cpool_status cpool_graph_upload(cpool_graph *g, cpool_stream *s);

/* The graph's id, unique for the process's life; 0 for NULL.
 * Named by messages and snapshots and kept by cpool_graph_update. */
uint64_t cpool_graph_id(const cpool_graph *g);

/* Number of successful launches (0 for NULL). */
uint64_t cpool_graph_replays(const cpool_graph *g);

/* Since 0.2. A graph's share of its pools' memory, over every pool it
 * holds (cpool_graph_get_stats). Set struct_size first:
 * CPOOL_GRAPH_STATS_INIT does. */
typedef struct cpool_graph_stats {
    size_t struct_size;          /* caller sets sizeof(cpool_graph_stats) */
    uint64_t write_bytes;        /* bytes of pages mapped in its arenas: what its replays may write */
    uint64_t shared_write_bytes; /* the part of write_bytes on the pool's shared pages, which the
                                    pool's other graphs may map too (they never run at once) */
    uint64_t live_output_bytes;  /* its outputs still allocated (block sizes), packed ones included */
    uint64_t live_outputs;       /* their count */
    uint64_t pool_count;         /* pools it holds */
    /* Appended fields: a struct_size that ends at pool_count is enough. */
    uint64_t own_bytes; /* since 0.2: bytes of its arenas' pages of its own, mapped by no other
                           graph: pages that held outputs when its capture ended, or an earlier
                           capture's in the same arena (write_bytes less shared_write_bytes; all
                           of it in a pool of plain segments). Packed outputs lie in the pool's
                           packed region: they count in live_output_bytes, not here */
} cpool_graph_stats;

/* cpool_graph_stats with struct_size set and every counter zero, ready for
 * cpool_graph_get_stats: cpool_graph_stats st = CPOOL_GRAPH_STATS_INIT; */
#define CPOOL_GRAPH_STATS_INIT {sizeof(cpool_graph_stats), 0, 0, 0, 0, 0, 0}

/* Fills *out with the graph's share of its pools, exact at the time of the
 * call.
 * Only its first out->struct_size bytes, as cpool_pool_get_stats. Costs a
 * walk of the graph's pages in each pool, under that pool's lock.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL or dead graph, NULL
 * out, struct_size smaller than the fields up to pool_count),
 * CPOOL_ERR_OUT_OF_MEMORY. */
cpool_status cpool_graph_get_stats(const cpool_graph *g, cpool_graph_stats *out);

/* The pool the graph was captured with, borrowed; NULL if none. */
cpool_pool *cpool_graph_pool(const cpool_graph *g);

/* cpool_pool_buffer_count of the graph's pool; 0 if it has none. */
size_t cpool_graph_pool_buffer_count(const cpool_graph *g);

/* The cudaGraphExec_t behind the graph, borrowed; NULL on the host backend
 * and for NULL.
 * For CUDA calls this API does not wrap, e.g. node parameter updates.
 * Launching it directly bypasses the staleness check. */
void *cpool_graph_native(const cpool_graph *g);

/* Adds a reference; returns g. */
cpool_graph *cpool_graph_retain(cpool_graph *g);

/* Drops a reference; never waits for the device. NULL: no-op.
 * At the last one the executable is destroyed once the work it launched has
 * finished, and the graph's pool references are dropped. A pool whose last
 * reference that was is torn down, as the seed's last release does: where
 * the device's work is over already (every stream's work enqueued so far,
 * a non-blocking query), the recorded objects are dropped in registration
 * order and the memory given back on the calling thread, before this
 * returns. Else the teardown goes to the library's thread: it waits there
 * as cpool_pool_release says (every launch, the device's stream work), then
 * drops and gives back, soon after the work ended; cpool_wait_deferred()
 * waits for it (call it before exit where the drops must have run). Inside
 * a stream callback, where CUDA refuses CUDA calls, all of that is handed
 * to the library's thread too. */
void cpool_graph_release(cpool_graph *g);

/* Captures body(s, ctx) again on `s` and makes `g` run the new work from
 * its next launch on.
 * The capture uses the graph's pool and capture mode. Where the new work
 * has the same shape (the same nodes, only their parameters changed) the
 * executable is updated in place (cudaGraphExecUpdate), which is much
 * cheaper than instantiating anew; otherwise the new capture is
 * instantiated and replaces the old executable, which is freed once its
 * launches finished. Captured host work (cpool_launch_host) always takes
 * the second way. Nothing runs. The graph takes the pool references and
 * generations of the new capture, so an update after
 * cpool_pool_clear_buffers makes a stale graph launchable again. The replay
 * count goes on counting.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL argument, a stream of
 * another device or one that is capturing), the body's status, or any
 * status of cpool_capture. On failure `g` is unchanged and launches its old
 * work. */
cpool_status cpool_graph_update(cpool_graph *g, cpool_stream *s, cpool_capture_fn body, void *ctx);

/* Writes the graph to `path` in Graphviz DOT.
 * CUDA's own dump (cudaGraphDebugDotPrint, verbose) on the CUDA backend,
 * the recorded operations with their dependencies on the host backend.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL argument),
 * CPOOL_ERR_IO (the file could not be opened or written),
 * CPOOL_ERR_BACKEND (CUDA's dump failed). */
cpool_status cpool_graph_dump_dot(const cpool_graph *g, const char *path);

/* ======================================================================== */
/* 7. Parameter blocks                                                      */
/* ======================================================================== */

/* A parameter block: `bytes` of device memory owned by a pool, at a fixed
 * address for the pool's whole life, for captured work to read on every
 * replay (a step counter, a scale, a pointer table).
 * Created by cpool_param_create; it ends with its pool (there is no
 * destroy: graphs that read it keep the pool, and so the block, alive), and
 * its handle is then a dead one.
 * Thread-safe as a copy is: cpool_param_set may come from any thread; sets
 * on streams with no order between them race on the block's contents. */
typedef struct cpool_param cpool_param;

/* Creates a parameter block of `bytes` in `pool`.
 * Its contents are undefined until the first cpool_param_set. It counts as
 * a live allocation of the pool (allocated_bytes) until the pool ends, and
 * clear_buffers leaves it alone.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL argument, bytes == 0),
 * CPOOL_ERR_SEALED, CPOOL_ERR_OUT_OF_MEMORY, CPOOL_ERR_BACKEND. */
cpool_status cpool_param_create(cpool_pool *pool, size_t bytes, cpool_param **out);

/* The block's device address; NULL for NULL or a dead handle.
 * Host memory on the host backend, readable by host work. */
void *cpool_param_device_ptr(const cpool_param *p);

/* Writes `bytes` from `value` to the start of the block in stream order on
 * `s`.
 * Work enqueued on `s` before the call sees the old value, work after it
 * the new one. `value` may be reused as soon as the call returns. One small
 * copy; not allowed while `s` captures (a captured copy would read `value`
 * again on every replay).
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL argument, bytes == 0 or
 * larger than the block, a stream of another device or one that captures;
 * nothing is enqueued), CPOOL_ERR_SUSPENDED (its pool is suspended: nothing
 * is enqueued), CPOOL_ERR_OUT_OF_MEMORY, CPOOL_ERR_BACKEND. */
cpool_status cpool_param_set(cpool_param *p, const void *value, size_t bytes, cpool_stream *s);

/* ======================================================================== */
/* 8. Snapshots                                                             */
/* ======================================================================== */

/* Writes a picture of the pool's memory to `path` (created or replaced) as
 * one JSON object, taken at one consistent moment.
 * Its keys: "version" (2), "backend", "grows_in_place" (see
 * cpool_pool_grows_in_place), "stats" (cpool_pool_stats under its C names),
 * "segments" (each {"address", "size", "kind", "blocks"}: a plain segment
 * or a run of mapped pages of the pool's own memory; every block {"offset",
 * "size", "requested", "state", "stream", "graphs", "output", "param"},
 * state "free", "live", "graph_free" or "graph_live"), "arenas" (the
 * address ranges each graph or capture allocated in, with the id of the
 * physical page behind every page: graphs share pages), "physical" (the
 * distinct physical pages), "graphs" (each {"id", "write_bytes",
 * "shared_write_bytes", "own_bytes", "live_output_bytes", "live_outputs"},
 * as cpool_graph_get_stats for this pool) and "suspended" (false, or what
 * a resume maps back). docs/SNAPSHOT.md has the schema.
 * It is taken under the pool's lock (allocations on other threads wait for
 * it), so, in physical bytes (a shared page once), segment sizes and the
 * arenas' pages add up to stats.reserved_bytes, block sizes to their
 * segment's, requested bytes of live and graph_live blocks to
 * allocated_bytes, graph memory to graph_reserved_bytes (while suspended:
 * to the values in "suspended"); the file is written after the lock is
 * dropped.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL or dead pool, NULL
 * path), CPOOL_ERR_IO (the file could not be opened or written: nothing
 * else changed; a partly written regular file is removed, a device or a
 * pipe is left as it is; a pipe whose reader is gone is this error, not a
 * SIGPIPE: the signal is blocked for the write and the one it raised taken
 * back, so the thread's mask, handler and pending signals stay as they
 * were), CPOOL_ERR_OUT_OF_MEMORY. */
cpool_status cpool_pool_write_snapshot(const cpool_pool *pool, const char *path);

/* ======================================================================== */
/* 9. Graph cache: graphs kept by key under a byte budget                   */
/* ======================================================================== */

/* Graphs of one pool kept by the caller's key (a batch size, a shape hash):
 * a launch by key captures on a miss and evicts the least recently launched
 * graphs until the pool's graph memory and the count of graphs are within
 * the cache's bounds (docs/GUIDE.md, "Graph cache").
 * Created by cpool_graph_cache_create, ended by cpool_graph_cache_destroy.
 * Safe to call from several threads; launches of one key on two streams
 * are the caller's to order, as for any graph. */
typedef struct cpool_graph_cache cpool_graph_cache;

/* Called as a graph leaves a cache (cpool_graph_cache_options, on_evict). */
typedef void (*cpool_graph_cache_evict_fn)(uint64_t key, cpool_graph *graph, void *user);

/* A cache's bounds and eviction hook (cpool_graph_cache_create). Set
 * struct_size first: CPOOL_GRAPH_CACHE_OPTIONS_INIT does. */
typedef struct cpool_graph_cache_options {
    size_t struct_size;  /* caller sets sizeof(cpool_graph_cache_options) */
    uint64_t max_bytes;  /* bound on the pool's graph_reserved_bytes after each launch, in bytes
                            (physical, see cpool_pool_stats); 0: none */
    uint32_t max_graphs; /* bound on the graphs kept; 0: none */
    /* Called as a graph leaves the cache (evicted or the cache destroyed),
     * before the cache's reference goes: where the caller frees that
     * graph's outputs. May be NULL. */
    cpool_graph_cache_evict_fn on_evict;
    void *user; /* handed to on_evict */
} cpool_graph_cache_options;

/* Every default: no bound, no hook. */
#define CPOOL_GRAPH_CACHE_OPTIONS_INIT {sizeof(cpool_graph_cache_options), 0, 0, NULL, NULL}

/* A cache's counters (cpool_graph_cache_get_stats). Set struct_size first:
 * CPOOL_GRAPH_CACHE_STATS_INIT does. */
typedef struct cpool_graph_cache_stats {
    size_t struct_size; /* caller sets sizeof(cpool_graph_cache_stats) */
    /* graphs kept now; launches that found their key; launches that
     * captured it; graphs evicted (by the bounds or cpool_graph_cache_evict) */
    uint64_t graphs, hits, misses, evictions;
    uint64_t graph_bytes; /* the pool's graph_reserved_bytes now */
} cpool_graph_cache_stats;

/* cpool_graph_cache_stats with struct_size set and every counter zero. */
#define CPOOL_GRAPH_CACHE_STATS_INIT {sizeof(cpool_graph_cache_stats), 0, 0, 0, 0, 0}

/* Creates a cache of graphs captured into `pool` (it holds a reference to
 * the pool until destroyed).
 * `opts` NULL means every default; only its first opts->struct_size bytes
 * are read.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL or dead pool, NULL
 * out, struct_size smaller than the fields up to user),
 * CPOOL_ERR_OUT_OF_MEMORY. */
cpool_status cpool_graph_cache_create(cpool_pool *pool, const cpool_graph_cache_options *opts,
                                      cpool_graph_cache **out);

/* Ends the cache: on_evict runs for every graph kept, on this thread, then
 * the cache's references (graphs, pool) go. NULL: no-op. Never waits for
 * the device (a graph's release does not). */
void cpool_graph_cache_destroy(cpool_graph_cache *cache);

/* Launches the graph kept under key on s. On a miss, first captures
 * body(s, ctx) on s into the cache's pool (mode as cpool_capture) and keeps
 * it under key; then evicts the least recently launched other graphs until
 * both bounds hold. hit_out may be NULL.
 * Evictions happen before the launch, so the launch's own work never holds
 * back the memory they give back. An evicted graph's memory comes back at
 * once where the device's work enqueued before the eviction is over (a
 * query, never a wait): then graph_reserved_bytes <= max_bytes when the
 * call returns. Where that work still runs (a launch of the evicted graph
 * in flight, or other work on the device's streams then), the bytes it
 * alone holds are counted as given back, and come back at a later launch
 * of the cache (one that captures, or any launch while such bytes wait).
 * A graph that alone needs more than max_bytes is launched and kept while
 * every other graph is evicted; no status says so (the stats show it). A
 * graph that another thread's call is launching (a hit, or a miss that
 * has just captured it) is not evicted before that launch is enqueued;
 * where that leaves a bound unmet, the next launch checks again. A hit holds a reference of its own
 * while it launches: an eviction meanwhile drops only the cache's, and the
 * graph's memory comes back once its launch is over. on_evict may run for a graph whose
 * launch another thread enqueued on its own stream, still running: free
 * its outputs ordered after that work (on that stream, or once it was
 * synchronized), as for any memory that work on another stream uses.
 * A miss captures without the cache's lock held: two threads that miss
 * the same key at once both capture; the first to finish keeps its graph,
 * the other's graph goes to on_evict and is released (counted as a miss,
 * not an eviction), and the kept one is launched. Threads whose misses
 * may capture at the same time pass CPOOL_CAPTURE_THREAD_LOCAL (CUDA's
 * rule: a global-mode capture makes other threads' unsafe calls fail).
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL or dead cache or
 * stream, NULL body on a miss, a stream of another device or one that is
 * capturing), the statuses of cpool_capture (body's included; then nothing
 * is kept, evicted or counted, *hit_out is false, and the discarded
 * capture's memory comes back as an evicted graph's does), or of
 * cpool_graph_launch (the graph stays kept). */
cpool_status cpool_graph_cache_launch(cpool_graph_cache *cache, uint64_t key, cpool_stream *s,
                                      cpool_capture_mode mode, cpool_capture_fn body, void *ctx, bool *hit_out);

/* The graph kept under key, with a reference of the caller's (release it
 * with cpool_graph_release); *graph_out = NULL if none. Not a launch: it
 * changes neither the order of eviction nor hits and misses.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL or dead cache, NULL
 * graph_out). */
cpool_status cpool_graph_cache_get(cpool_graph_cache *cache, uint64_t key, cpool_graph **graph_out);

/* Evicts the graph kept under key: on_evict, then the cache's reference
 * goes and its memory comes back as after a launch's eviction.
 * Returns CPOOL_OK (also where no graph is kept under key),
 * CPOOL_ERR_INVALID_ARGUMENT (NULL or dead cache). */
cpool_status cpool_graph_cache_evict(cpool_graph_cache *cache, uint64_t key);

/* Fills *out with the cache's counters (only its first out->struct_size
 * bytes). Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL or dead cache,
 * NULL out, struct_size smaller than the fields up to graph_bytes). */
cpool_status cpool_graph_cache_get_stats(const cpool_graph_cache *cache, cpool_graph_cache_stats *out);

/* What one more key would cost before capturing it: the pool's
 * graph_reserved_bytes with one more graph that allocates output_bytes of
 * outputs (with cpool_alloc, first) and then scratch_bytes of scratch that
 * it frees before its capture ends, into *bytes_out.
 * Counted as the pool counts: its shared pages grow to the pages the
 * scratch covers past the outputs' last page, where they are fewer, and
 * the outputs' pages become the graph's own (2 MiB each where segments
 * grow in place). Exact, to within one page, for a capture that allocates
 * so while no launch of the pool's graphs runs; a server plans its list of
 * keys against max_bytes with it. Changes nothing.
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (NULL or dead cache, NULL
 * bytes_out). */
cpool_status cpool_graph_cache_predict_bytes(cpool_graph_cache *cache, uint64_t scratch_bytes, uint64_t output_bytes,
                                             uint64_t *bytes_out);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* CAPTUREPOOL_H */
