/*
 * ops.h: the fuzz_api harness's operations, for driver.c. They live one
 * family to a file (ops_*.c); the groups below name the file of each.
 *
 * - op_*: one operation each; `r` holds the input's bytes after the op and
 *   stream bytes (each reads its own arguments), `s` is the stream picked.
 * - What the end of an input also needs: ending a capture, syncing,
 *   destroying and reaping the temporary stream, releasing graphs and pools.
 * What the operation files share among themselves is ops_internal.h's; the
 * model they work on, and the checks after each step, are model.h's.
 */
#ifndef FUZZ_OPS_H
#define FUZZ_OPS_H

#include <stdbool.h>

#include "model.h"

/* op_cross_clear runs unless FUZZ_API_CROSS_DROPS=0 (driver.c reads it). */
extern bool cross_drops;

/* ---- pools (ops_pool.c) ---------------------------------------------------------- */

void op_pool_create(rd *r);
void op_pool_retain(rd *r);
void op_pool_release(rd *r);
void op_seal(rd *r, bool seal);
void op_trim(rd *r);
void op_stats(rd *r);

/* ---- recorded objects and clears (ops_records.c) --------------------------------- */

void op_record(rd *r);
void op_clear(rd *r);
void op_cross_clear(rd *r);

/* ---- allocation, parameter blocks (ops_alloc.c) ---------------------------------- */

void op_alloc(rd *r, int s);
void op_free(rd *r, int s);
void do_free_invalid(rd *r, int s);
void op_bulk(rd *r, int s);
void op_memset(rd *r, int s);
void op_param_create(rd *r);
void op_param_set(rd *r, int s);

/* ---- markers, gates, callbacks, the temporary stream (ops_streams.c) ------------- */

void op_tick(rd *r, int s);
void op_gate(int s);
void op_callback(rd *r, int s);
void op_temp_stream(void);
void op_temp_dying(rd *r);

/* ---- capture and graphs (ops_capture.c) ------------------------------------------ */

void op_capture_begin(rd *r, int s);
void op_capture_end(rd *r, int s);
void op_scoped(rd *r, int s);
void op_update(rd *r, int s);
void op_launch(rd *r, int s);
void op_graph_retain(rd *r);
void op_graph_release(rd *r);
void op_eager_free(rd *r, int s);
void op_bounded_capture(rd *r, int s);
void op_fork(rd *r, int s);

/* ---- events (ops_events.c) ------------------------------------------------------- */

void op_event_create(rd *r);
void op_event_destroy(rd *r);
void op_event_record(rd *r, int s);
void op_event_wait(rd *r, int s);
void op_event_query(rd *r);
void op_event_sync(rd *r);
void op_event_elapsed(rd *r);

/* ---- suspend and resume (ops_suspend.c) ------------------------------------------ */

void op_suspend(rd *r, int s);
void op_resume(rd *r);

/* ---- dead handles, NULL arguments, queries (ops_misuse.c) ------------------------ */

void op_dead(rd *r, int s);
void op_misc(rd *r, int s);

/* ---- shared with the end of an input --------------------------------------------- */

/* A stream sync (invalidates a capture on s), and cpool_wait_deferred, with
 * the model brought up to date (ops_host.c). */
void do_sync(int s);
void do_wait_deferred(void);
void do_capture_end(int s);
/* The temporary stream: destroyed here; or, after op_temp_dying, its
 * destroy known to be over. */
void destroy_temp(void);
void reap_temp(void);
/* Drop one of the harness's references, model first. */
void release_pool_ref(int pi);
void release_graph_ref(int gi);
/* Destroys every event of the table (the end of an input). */
void destroy_events(void);
void destroy_launch_events(void);
void launches_temp_gone(void);

#endif
