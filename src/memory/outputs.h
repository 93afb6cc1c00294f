/*
 * Outputs of graphs that share a pool: what each graph's replays write (its
 * footprint) and which blocks are live outputs, so that a launch that would
 * overwrite another graph's live output is refused in O(1).
 *
 * A footprint is the sorted, disjoint ranges of graph-reserved memory its
 * capture was handed or freed, and a count of the live outputs of other
 * graphs that overlap it. A live output is a block a capture allocated that
 * was still allocated when the capture ended; it stays live, also after its
 * graph is released, until it is freed. Every change of either side (a
 * capture's end, an output's free) updates the counts of the footprints it
 * overlaps, so a launch reads one count per pool. All of it is under the
 * pool's lock (pool.c); the counts are atomic for the launch's lock-free read.
 */
#ifndef CPOOL_OUTPUTS_H
#define CPOOL_OUTPUTS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc.h"

/* A block a capture was handed (serial != 0: the allocation's number) or
 * freed (serial 0). */
typedef struct cpool__capture_range {
    struct cpool_pool *pool;
    uintptr_t addr;
    size_t size;
    uint64_t serial;
} cpool__capture_range;

typedef struct cpool__footprint {
    struct cpool__footprint *next;
    uint64_t graph_id;
    atomic_uint conflicts; /* live outputs of other graphs that it overlaps */
    size_t count;
    struct {
        uintptr_t addr;
        size_t size;
    } ranges[];
} cpool__footprint;

typedef struct cpool__live_output {
    uintptr_t addr;
    size_t size;
    uint64_t graph_id;
    const cpool__footprint *from; /* the footprint whose capture made it, while registered */
} cpool__live_output;

typedef struct cpool__outputs {
    cpool__footprint *footprints;
    cpool__live_output *live;
    size_t live_count, live_cap;
} cpool__outputs;

/* Registers the footprint of graph `graph_id` from its capture's ranges in
 * this pool (`ranges[i].pool` is ignored) and makes its outputs live; a
 * capture that wrote no graph-reserved memory here gets an empty one (the
 * pool then still lists the graph).
 * Returns CPOOL_OK or CPOOL_ERR_OUT_OF_MEMORY (nothing changed). */
cpool_status cpool__outputs_add_graph(cpool__outputs *o, cpool__allocator *a, uint64_t graph_id,
                                      const cpool__capture_range *ranges, size_t n, cpool__footprint **out);
/* Forgets a released graph's footprint (its outputs stay live, unless
 * drop_outputs: its capture failed, and the outputs it made are plain
 * blocks again; outputs of an earlier capture of the same graph stay). */
void cpool__outputs_remove_graph(cpool__outputs *o, cpool__allocator *a, cpool__footprint *fp, bool drop_outputs);
/* The live output at addr was freed. */
void cpool__outputs_freed(cpool__outputs *o, uintptr_t addr);
/* A live output of another graph that fp overlaps, into *found; false if
 * there is none. */
bool cpool__outputs_find_conflict(const cpool__outputs *o, const cpool__footprint *fp, cpool__live_output *found);
void cpool__outputs_destroy(cpool__outputs *o);

/* What graph fp's replays write here, how much of that other graphs'
 * replays write too, and its live outputs here (bytes and count). */
typedef struct cpool__footprint_stats {
    uint64_t write_bytes, shared_write_bytes, live_output_bytes, live_outputs;
} cpool__footprint_stats;
cpool_status cpool__outputs_footprint_stats(const cpool__outputs *o, const cpool__footprint *fp,
                                            cpool__footprint_stats *out);
/* Whether fp's replays write some of [addr, addr + size). */
bool cpool__footprint_overlaps(const cpool__footprint *fp, uintptr_t addr, size_t size);

#endif /* CPOOL_OUTPUTS_H */
