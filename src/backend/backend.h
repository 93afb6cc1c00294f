/*
 * The one seam between the library and a platform.
 *
 * A backend provides devices, large memory segments, in-order streams,
 * events (positions in a stream), stream capture into executable graphs, and
 * graph launch. Everything above this file is shared by all backends; the
 * CUDA runtime is called only from cuda/.
 *
 * Rules every backend keeps, so that what passes on one means something on
 * the other:
 * - work runs in stream order and never before it is enqueued;
 * - work enqueued while a stream captures is recorded, not run;
 * - synchronising a capturing stream invalidates the capture;
 * - a graph runs only when launched, and destroying it while a launch is in
 *   flight is safe (its resources go once the launch finished);
 * - segment_alloc/segment_free and the library's own event calls are safe
 *   while any stream captures in any mode: they never become part of a
 *   capture;
 * - a user's event recorded in a capture and waited for by another stream
 *   forks that stream into the capture; the capture ends on its origin once
 *   every fork is joined back, and a replay keeps the captured order
 *   between streams and nothing more (CUDA's rules).
 */
#ifndef CPOOL_BACKEND_H
#define CPOOL_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "capturepool.h"

/* The byte a debug build fills returned segments with. */
#define CPOOL__POISON 0xDB
/* The page of growable segments (the allocator's CPOOL__PAGE). */
#define CPOOL__PAGE_BYTES ((size_t)2 << 20)

/* CPOOL_VIRTUAL_MEMORY=0 in the environment: no growable segments, as on
 * a platform that has none (pools fall back to plain segments); =1, empty
 * or unset: growable segments where the platform has them. */
static inline bool cpool__virtual_memory_off(void) {
    const char *v = getenv("CPOOL_VIRTUAL_MEMORY");
    return v && strcmp(v, "0") == 0;
}

/* The value of CPOOL_VIRTUAL_MEMORY when it is neither of those, else
 * NULL: device opens and pool creations refuse it, so that a typo does
 * not silently leave growable segments on. */
static inline const char *cpool__virtual_memory_bad_value(void) {
    const char *v = getenv("CPOOL_VIRTUAL_MEMORY");
    return v && *v && strcmp(v, "0") != 0 && strcmp(v, "1") != 0 ? v : NULL;
}

typedef struct cpool__bdevice cpool__bdevice;
typedef struct cpool__bstream cpool__bstream;
typedef struct cpool__bevent cpool__bevent;
typedef struct cpool__bgraph cpool__bgraph;
typedef struct cpool__bmem cpool__bmem;

typedef struct cpool__backend {
    cpool_backend kind;
    const char *name;

    /* Opens device `ordinal`; CPOOL_ERR_NO_DEVICE when there is none. */
    cpool_status (*device_open)(int ordinal, cpool__bdevice **out);
    void (*device_close)(cpool__bdevice *dev);

    /* Memory the allocator carves from; at least 512-byte aligned.
     * segment_free may only be called once no work uses the segment; with
     * CPOOL_DEBUG_CHECKS it first fills the segment with CPOOL__POISON, so
     * that work still using it would see garbage. */
    cpool_status (*segment_alloc)(cpool__bdevice *dev, size_t bytes, void **out);
    void (*segment_free)(cpool__bdevice *dev, void *base, size_t bytes);

    /* Growable segments: address space first, then memory for whole pages
     * of it (CPOOL__PAGE_BYTES), as CUDA's virtual memory management does.
     * va_supported: whether the device has it (else pools take plain
     * segments). va_reserve gives a CPOOL__PAGE_BYTES-aligned range and no
     * memory. pages_map backs [addr, addr + bytes), unmapped whole pages
     * of a reserved range, with memory the device reads and writes, all or
     * nothing: with `joined` as one physical allocation (a unit: the
     * driver charges per mapping, not per byte), else a unit per page.
     * A unit is mapped and given back only whole (the driver unmaps only
     * whole allocations, and cutting one would copy bytes that work may
     * be using): pages_unmap gives back whole units that no work uses
     * (work that still did would fault: no poison needed); pages_inside
     * shrinks a range to the units wholly inside it; va_release a range
     * with nothing mapped. All are safe while any stream captures, as
     * segment_alloc is. */
    bool (*va_supported)(cpool__bdevice *dev);
    /* Runs fn(arg) with dev current and this thread's capture mode relaxed,
     * for another library's calls that CUDA would count against a capture
     * (a registration of memory under capture); returns fn's status. */
    cpool_status (*call_relaxed)(cpool__bdevice *dev, cpool_status (*fn)(void *arg), void *arg);
    cpool_status (*va_reserve)(cpool__bdevice *dev, size_t bytes, void **out);
    void (*va_release)(cpool__bdevice *dev, void *base, size_t bytes);
    cpool_status (*pages_map)(cpool__bdevice *dev, void *addr, size_t bytes, bool joined);
    void (*pages_unmap)(cpool__bdevice *dev, void *addr, size_t bytes);
    void (*pages_inside)(cpool__bdevice *dev, uintptr_t *lo, uintptr_t *hi);
    /* Physical memory apart from addresses (graph pages): a handle to
     * `bytes` (whole CPOOL__PAGE_BYTES pages) of device memory that may be
     * mapped, whole, at several reserved addresses at once; every mapping
     * sees the same bytes. mem_map maps all of m at addr (reserved by
     * va_reserve, unmapped, page aligned), read and write for the device
     * and its peers, all or nothing; mem_unmap takes that mapping down (no
     * work may use it); mem_release frees m once it is mapped nowhere. */
    cpool_status (*mem_create)(cpool__bdevice *dev, size_t bytes, cpool__bmem **out);
    void (*mem_release)(cpool__bdevice *dev, cpool__bmem *m);
    cpool_status (*mem_map)(cpool__bdevice *dev, void *addr, cpool__bmem *m);
    void (*mem_unmap)(cpool__bdevice *dev, void *addr, cpool__bmem *m);

    /* Host memory for copies of device memory (a suspended pool's bytes):
     * page-locked where the platform has it, so that copies run at full
     * speed. */
    cpool_status (*host_alloc)(cpool__bdevice *dev, size_t bytes, void **out);
    void (*host_free)(cpool__bdevice *dev, void *p);

    /* native == NULL && !wrap: a new stream of the backend's own. */
    cpool_status (*stream_create)(cpool__bdevice *dev, void *native, bool wrap, cpool__bstream **out);
    /* Waits for the stream's work, then ends it (a wrapped one is forgotten). */
    void (*stream_destroy)(cpool__bstream *s);
    void *(*stream_native)(const cpool__bstream *s);
    cpool_status (*stream_synchronize)(cpool__bstream *s);
    cpool_status (*launch_host)(cpool__bstream *s, void (*fn)(void *), void *arg);
    cpool_status (*memcpy_async)(cpool__bstream *s, void *dst, const void *src, size_t bytes);
    cpool_status (*memset_async)(cpool__bstream *s, void *dst, int value, size_t bytes);
    /* A stream-ordered copy from host memory that the caller may reuse as
     * soon as the call returns. */
    cpool_status (*upload_async)(cpool__bstream *s, void *dst, const void *src, size_t bytes);

    cpool_status (*event_create)(cpool__bdevice *dev, cpool__bevent **out);
    void (*event_destroy)(cpool__bevent *ev);
    /* Records ev at the current end of s; CPOOL_ERR_UNSUPPORTED when s
     * captures (the event would become part of the graph). */
    cpool_status (*event_record)(cpool__bevent *ev, cpool__bstream *s);
    /* A user's record: as event_record, but where s takes part in a
     * capture, the record goes into it and marks s's last captured work,
     * for a wait to fork from or join. */
    cpool_status (*user_event_record)(cpool__bevent *ev, cpool__bstream *s);
    /* Whether the work before the recorded position has finished (an event
     * never recorded counts as finished). Never blocks. */
    bool (*event_done)(cpool__bevent *ev);
    cpool_status (*event_synchronize)(cpool__bevent *ev);
    /* An event the user makes (cpool_event_create): its records are timed,
     * for event_elapsed_ms. */
    cpool_status (*event_create_timed)(cpool__bdevice *dev, cpool__bevent **out);
    /* Makes work enqueued on s from now on wait until the work before ev's
     * record has finished (never recorded: nothing to wait for). When ev's
     * last record was made in a capture, s joins that capture (a fork) or,
     * taking part in it already, its next work waits for the marked work
     * (a join). CPOOL_ERR_INVALID_ARGUMENT: ev was recorded in another
     * capture than s's, in one that has ended, or outside any while s
     * captures. */
    cpool_status (*stream_wait_event)(cpool__bstream *s, cpool__bevent *ev);
    /* A fork: records `fence` at the end of s (which does not capture), so
     * that its work from before can be waited for, then waits for ev,
     * recorded in a capture that s joins. */
    cpool_status (*stream_fork)(cpool__bstream *s, cpool__bevent *fence, cpool__bevent *ev);
    /* Milliseconds from start's record to end's, both timed and recorded;
     * CPOOL_ERR_NOT_READY when either has not completed. */
    cpool_status (*event_elapsed_ms)(cpool__bevent *start, cpool__bevent *end, float *ms);

    /* Begins capturing on s; first records `fence` (when not NULL) at the
     * stream's current end, so that its work from before the capture can be
     * waited for. CPOOL_ERR_ALREADY_CAPTURING (nothing recorded) when s
     * captures already. */
    cpool_status (*capture_begin)(cpool__bstream *s, cpool_capture_mode mode, cpool__bevent *fence);
    /* Ends the capture begun on s and, with `instantiate`, makes it
     * launchable (else graph_instantiate does that later).
     * CPOOL_ERR_CAPTURE_INVALIDATED when it was broken or a stream forked
     * into it was not joined back; s and every stream forked into it no
     * longer capture, in every case. CPOOL_ERR_INVALID_ARGUMENT, changing
     * nothing, on a stream that joined a capture begun on another. */
    cpool_status (*capture_end)(cpool__bstream *s, bool instantiate, cpool__bgraph **out);
    cpool_status (*graph_instantiate)(cpool__bgraph *g);
    /* Also for a stream forked into a capture. */
    cpool_status (*capture_status)(cpool__bstream *s, cpool_capture_state *out);

    cpool_status (*graph_launch)(cpool__bgraph *g, cpool__bstream *s);
    cpool_status (*graph_upload)(cpool__bgraph *g, cpool__bstream *s);
    void (*graph_destroy)(cpool__bgraph *g);
    void *(*graph_native)(const cpool__bgraph *g);
    /* Makes g's executable run fresh's work (fresh need not be
     * instantiated) in place, if the backend can; g then holds fresh's graph
     * and fresh what g no longer needs (to be destroyed). false: nothing
     * changed (the caller instantiates fresh and swaps the graphs). */
    bool (*graph_update_in_place)(cpool__bgraph *g, cpool__bgraph *fresh);
    cpool_status (*graph_dump_dot)(const cpool__bgraph *g, const char *path);
} cpool__backend;

extern const cpool__backend cpool__backend_host;
#ifdef CPOOL_HAVE_CUDA
extern const cpool__backend cpool__backend_cuda;
#endif

#endif /* CPOOL_BACKEND_H */
