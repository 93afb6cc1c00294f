/*
 * ops_pool.c: the fuzz_api harness's operations on a pool's life and
 * state (declared in ops.h and ops_internal.h): create with options,
 * reserve and bound (op_pool_create), retain and release (the harness's
 * last reference while recorded objects hold their own: release_pool_ref),
 * seal and unseal, trim (do_trim), statistics for older and newer callers
 * (op_stats), and snapshots read back and checked against the stats
 * (check_snapshot).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tests/json.h" /* reads snapshots back */

#include "capturepool.h"
#include "model.h"
#include "ops.h"
#include "ops_internal.h"

/* ---- operations: pools ----------------------------------------------------------- */

/* The model of a pool just created into slot pi, with the harness's one
 * reference. */
mpool *adopt_pool(int pi, cpool_pool *p, uint64_t maxr) {
    mpool *m = &P[pi];
    memset(m, 0, sizeof *m);
    m->state = SLOT_LIVE;
    m->p = p;
    m->uid = next_uid++;
    m->harness = 1;
    m->max_reserved = maxr;
    next_serial[m->uid] = 1;
    return m;
}

int free_pool_slot(void) {
    for (int i = 0; i < NPOOL; i++)
        if (P[i].state == SLOT_FREE) return next_uid < NUID ? i : -1;
    return -1;
}

void op_pool_create(rd *r) {
    uint8_t v = u8(r), a = u8(r), b = u8(r);
    int pi = -1;
    for (int i = 0; i < NPOOL; i++)
        if (P[i].state == SLOT_FREE) {
            pi = i;
            break;
        }
    if (pi < 0 || next_uid >= NUID) return;
    static const uint64_t reserves[16] = {0,         1,         512,       (2u << 20) - 1, 2u << 20,  3u << 20,
                                          5u << 20,  (2u << 20) + 1, 4096, 4u << 20,       1u << 20,  0,
                                          6u << 20,  0,         0,         (uint64_t)1 << 48 /* beyond any device */};
    static const uint64_t maxes[8] = {0, 1, 2u << 20, (2u << 20) + 1, 3u << 20, 4u << 20, 8u << 20, 24u << 20};
    struct {
        cpool_pool_options o;
        unsigned char newer_fields[16];
    } big;
    memset(&big, 0, sizeof big);
    cpool_pool_options *opts = &big.o;
    uint64_t reserve = 0, maxr = 0;
    bool invalid = false;
    switch (v % 6) {
    case 0:
        opts = NULL;
        break;
    case 1: /* too small for even struct_size */
        opts->struct_size = a % sizeof(size_t);
        opts->reserve_bytes = reserves[b % 16];
        invalid = true;
        break;
    case 2: /* an old caller's struct: the fields beyond struct_size are not read */
        opts->struct_size = sizeof(size_t);
        opts->reserve_bytes = reserves[a % 16];
        opts->max_reserved_bytes = maxes[b % 8];
        break;
    case 3:
        opts->struct_size = sizeof *opts;
        opts->reserve_bytes = reserve = reserves[a % 16];
        opts->max_reserved_bytes = maxr = maxes[b % 8];
        break;
    case 4: /* a newer caller's larger struct, zero beyond what the library knows */
        opts->struct_size = sizeof big;
        opts->reserve_bytes = reserve = reserves[a % 16];
        opts->max_reserved_bytes = maxr = maxes[b % 8];
        break;
    case 5:
        opts->struct_size = offsetof(cpool_pool_options, max_reserved_bytes);
        opts->reserve_bytes = reserve = reserves[a % 16];
        opts->max_reserved_bytes = maxes[b % 8];
        break;
    }
    if (maxr && reserve > maxr) invalid = true;
    /* Reserved memory is rounded up to 2 MiB segments: where that rounding
     * goes past the bound, the pool may refuse, or reserve less; never more
     * than the bound. */
    uint64_t rounded = reserve ? (reserve + (2u << 20) - 1) / (2u << 20) * (2u << 20) : 0;
    bool past_bound = !invalid && maxr && rounded > maxr;
    bool impossible = !invalid && reserve > ((uint64_t)1 << 47);
    TRACE("pool_create slot %d variant %d reserve %llu max %llu\n", pi, v % 6, (unsigned long long)reserve,
          (unsigned long long)maxr);
    cpool_pool *const unset = (cpool_pool *)&big, *p = unset;
    cpool_status st = cpool_pool_create(dev, opts, &p);
    if (st != CPOOL_OK && p != unset) fail("a failed cpool_pool_create wrote its output");
    if (invalid && reserve > ((uint64_t)1 << 47)) {
        /* Also beyond any device: which of the two statuses wins is not
         * specified. */
        expect_one_of(st, CPOOL_ERR_INVALID_ARGUMENT, CPOOL_ERR_OUT_OF_MEMORY,
                      "cpool_pool_create (reserve above the bound and beyond any device)");
        return;
    }
    if (invalid) {
        check_status(st, CPOOL_ERR_INVALID_ARGUMENT, "cpool_pool_create (bad options)", true);
        return;
    }
    if (impossible) {
        check_status(st, CPOOL_ERR_OUT_OF_MEMORY, "cpool_pool_create (reserve beyond any device)", true);
        return;
    }
    if (past_bound) {
        expect_one_of(st, CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT, "cpool_pool_create (reserve rounds past the bound)");
        if (st != CPOOL_OK) return;
    } else {
        check_status(st, CPOOL_OK, "cpool_pool_create", true);
    }
    mpool *m = adopt_pool(pi, p, maxr);
    cpool_pool_stats s = stats_of(pi);
    if (s.allocated_bytes || s.alloc_count || s.free_count)
        fail("new pool #%u: allocations before any cpool_alloc", m->uid);
    if (past_bound ? s.reserved_bytes < reserve || s.reserved_bytes > maxr
                   : s.reserved_bytes != rounded || s.segment_count != (reserve ? 1u : 0u))
        fail("new pool #%u with reserve_bytes %llu, max_reserved_bytes %llu: reserved %llu in %llu segments "
             "(expected %llu in 2 MiB segments%s)",
             m->uid, (unsigned long long)reserve, (unsigned long long)maxr, (unsigned long long)s.reserved_bytes,
             (unsigned long long)s.segment_count, (unsigned long long)rounded,
             past_bound ? ", or at least reserve_bytes and at most max_reserved_bytes" : "");
}

void op_pool_retain(rd *r) {
    int pi = pick_pool(u8(r));
    if (pi < 0) return;
    TRACE("pool_retain #%u\n", P[pi].uid);
    if (cpool_pool_retain(P[pi].p) != P[pi].p) fail("cpool_pool_retain returned another pointer");
    P[pi].harness++;
}

/* Drops one of the harness's references to pool slot pi, model first. The
 * objects of kind DROP_RELEASE hold references that only their drops give
 * back: before the harness's last one goes, a clear drops them (else the
 * pool would keep itself alive). */
void release_pool_ref(int pi) {
    cpool_pool *p = P[pi].p;
    mpool *m = &P[pi];
    if (m->harness == 1 && atomic_load(&drop_refs[m->uid]) > 0 && (m->uid & 1) && !m->deferred && !m->pending_clears) {
        /* The other way round: the harness's reference goes first, the
         * objects' keep the pool alive, and a clear through the handle drops
         * them: the last reference goes in a drop, the teardown follows at
         * the end of that clear. */
        TRACE("release #%u while objects hold references, then clear it\n", m->uid);
        before_blocking();
        m->harness--;
        cpool_pool_release(p);
        mark_droppable(m->uid, CTX_ALIVE);
        m->gen++;
        m->records = 0;
        cpool_pool_clear_buffers(p);
        if (atomic_load(&drop_refs[m->uid]) != 0)
            fail("pool #%u: after cpool_pool_clear_buffers returned, %d objects that hold a reference were not dropped",
                 m->uid, atomic_load(&drop_refs[m->uid]));
        verify_dropped(m->uid, "after cpool_pool_clear_buffers");
        absorb_nested(pi);
        pool_refs_changed(pi, true);
        run_verifies();
        return;
    }
    if (P[pi].harness == 1 && atomic_load(&drop_refs[P[pi].uid]) > 0) {
        TRACE("clear #%u first: objects hold references to it\n", P[pi].uid);
        do_clear(pi);
        if (atomic_load(&drop_refs[P[pi].uid]) != 0)
            fail("pool #%u: after cpool_pool_clear_buffers returned, %d objects that hold a reference were not dropped",
                 P[pi].uid, atomic_load(&drop_refs[P[pi].uid]));
    }
    before_blocking();
    P[pi].harness--;
    pool_refs_changed(pi, true);
    cpool_pool_release(p);
    run_verifies();
}

void op_pool_release(rd *r) {
    int pi = pick_pool(u8(r));
    if (pi < 0) return;
    TRACE("pool_release #%u (harness refs %d)\n", P[pi].uid, P[pi].harness);
    release_pool_ref(pi);
}

void op_seal(rd *r, bool seal) {
    int pi = pick_pool(u8(r));
    if (pi < 0) return;
    TRACE("%s #%u\n", seal ? "seal" : "unseal", P[pi].uid);
    if (seal)
        cpool_pool_seal(P[pi].p);
    else
        cpool_pool_unseal(P[pi].p);
    P[pi].sealed = seal;
}

/* ---- operations: trim ------------------------------------------------------------ */

void do_trim(int pi, const char *what) {
    mpool *m = &P[pi];
    before_blocking();
    check_status(cpool_pool_trim(m->p), CPOOL_OK, what, true);
    check_quiesced(what);
    bool no_holders = m->graph_holds + m->capture_holds == 0;
    if (no_holders) m->ngr = 0; /* graph-reserved memory is general again */
    cpool_pool_stats st = stats_of(pi);
    if (no_holders && m->live_count == 0 && (st.reserved_bytes || st.segment_count))
        fail("pool #%u: trim with nothing live and no graph or capture left %llu bytes in %llu segments", m->uid,
             (unsigned long long)st.reserved_bytes, (unsigned long long)st.segment_count);
    /* Graph memory is whole pages: what live graph blocks hold, at least,
     * and nothing once none is live. */
    if (no_holders && !m->suspended &&
        (st.graph_reserved_bytes < m->graph_live_rounded || (m->graph_live_rounded == 0 && st.graph_reserved_bytes != 0)))
        fail("pool #%u: trim with no graph or capture left %llu graph-reserved bytes, live graph allocations hold %llu",
             m->uid, (unsigned long long)st.graph_reserved_bytes, (unsigned long long)m->graph_live_rounded);
}

void op_trim(rd *r) {
    int pi = pick_pool(u8(r));
    if (pi < 0) return;
    TRACE("trim #%u\n", P[pi].uid);
    do_trim(pi, "cpool_pool_trim");
}

/* ---- operations: statistics and snapshots ---------------------------------------- */

static uint64_t json_u64(const json *obj, const char *key) {
    const json *v = json_get(obj, key);
    return v && v->kind == JSON_NUMBER && v->is_integer ? v->integer : UINT64_MAX;
}

/* What a segment's or a range's blocks hold: all of them, the live ones
 * (sizes, and the sizes asked for), the graph ones, the free ones. */
typedef struct snapshot_tally {
    uint64_t size, live_size, requested, graph, free;
} snapshot_tally;

static void tally_blocks(const json *run, snapshot_tally *t) {
    const json *blocks = json_get(run, "blocks");
    uint64_t tiled = 0;
    for (size_t k = 0; blocks && k < blocks->count; k++) {
        const json *blk = blocks->items[k], *state = json_get(blk, "state");
        uint64_t size = json_u64(blk, "size");
        if (!state || state->kind != JSON_STRING) fail("a snapshot block has no state");
        bool is_live = !strcmp(state->string, "live") || !strcmp(state->string, "graph_live");
        if (is_live) {
            t->requested += json_u64(blk, "requested");
            t->live_size += size;
        } else {
            t->free += size;
        }
        if (!strncmp(state->string, "graph_", 6)) t->graph += size;
        tiled += size;
    }
    if (tiled != json_u64(run, "size")) fail("a snapshot segment's or range's blocks do not tile it");
    t->size += tiled;
}

/* A snapshot of pool pi, read back: one JSON object whose sums are its own
 * stats (callbacks on other threads may change the pool meanwhile, so not
 * the stats of another moment), or while suspended the values of its
 * "suspended" object; and every live graph's accounting. `resident` (may
 * be NULL) gets what the resume maps back. */
void check_snapshot(int pi, resident_memory *resident) {
    char path[128], error[160] = "";
    snprintf(path, sizeof path, "/tmp/capturepool-fuzz-%ld.json", (long)getpid());
    EXPECT_OK(cpool_pool_write_snapshot(P[pi].p, path));
    char *text = json_read_file(path);
    remove(path);
    if (!text) fail("cannot read a snapshot back");
    json *root = json_parse(text, error, sizeof error);
    free(text);
    if (!root) fail("a snapshot is not JSON: %s", error);
    const json *st = json_get(root, "stats"), *segs = json_get(root, "segments");
    const json *arenas = json_get(root, "arenas"), *physical = json_get(root, "physical");
    if (!st || !segs || segs->kind != JSON_ARRAY || !arenas || arenas->kind != JSON_ARRAY || !physical)
        fail("a snapshot lacks stats, segments, arenas or physical");
    /* Sums in physical bytes (docs/SNAPSHOT.md): segments are memory of
     * their own, eager or the packed region's; arenas add the distinct
     * pages behind their ranges ("physical"). */
    snapshot_tally eager = {0}, packed = {0}, ranges = {0};
    for (size_t i = 0; i < segs->count; i++) {
        const json *kind = json_get(segs->items[i], "kind");
        bool is_packed = kind && kind->kind == JSON_STRING && !strcmp(kind->string, "packed");
        tally_blocks(segs->items[i], is_packed ? &packed : &eager);
    }
    for (size_t i = 0; i < arenas->count; i++) {
        const json *rs = json_get(arenas->items[i], "ranges");
        for (size_t k = 0; rs && k < rs->count; k++) tally_blocks(rs->items[k], &ranges);
    }
    uint64_t pages = json_u64(physical, "bytes"), graph_memory = packed.size + pages;
    uint64_t graph_live = packed.live_size + ranges.live_size;
    uint64_t reserved = eager.size + packed.size + pages;
    uint64_t live = eager.requested + packed.requested + ranges.requested;
    uint64_t graph = eager.graph + graph_memory;
    uint64_t cached = eager.free + (graph_memory > graph_live ? graph_memory - graph_live : 0);
    /* Suspended, the stats say the pool holds no device memory, and the
     * segments and arenas are what the resume maps back: the sums hold
     * against "suspended" (docs/SNAPSHOT.md). */
    const json *suspended = json_get(root, "suspended");
    if (!suspended || (suspended->kind != JSON_OBJECT && (suspended->kind != JSON_BOOL || suspended->boolean)))
        fail("a snapshot's \"suspended\" is neither false nor an object");
    bool is_suspended = suspended->kind == JSON_OBJECT;
    if (is_suspended != P[pi].suspended)
        fail("pool #%u: a snapshot says %s, the model says %s", P[pi].uid, is_suspended ? "suspended" : "not suspended",
             P[pi].suspended ? "suspended" : "not");
    const json *mapped = is_suspended ? suspended : st;
    if (is_suspended && (json_u64(st, "reserved_bytes") || json_u64(st, "graph_reserved_bytes") ||
                         json_u64(st, "cached_bytes") || json_u64(st, "segment_count")))
        fail("pool #%u: a suspended pool's snapshot has stats of device memory", P[pi].uid);
    if (reserved != json_u64(mapped, "reserved_bytes") || live != json_u64(st, "allocated_bytes") ||
        graph != json_u64(mapped, "graph_reserved_bytes") ||
        (!is_suspended && cached != json_u64(st, "cached_bytes")))
        fail("pool #%u: a snapshot's sums (reserved %llu, allocated %llu, graph %llu, cached %llu) are not its %s",
             P[pi].uid, (unsigned long long)reserved, (unsigned long long)live, (unsigned long long)graph,
             (unsigned long long)cached, is_suspended ? "\"suspended\" values" : "stats");
    if (resident)
        *resident = (resident_memory){json_u64(mapped, "reserved_bytes"), json_u64(mapped, "graph_reserved_bytes"),
                                      json_u64(mapped, "segment_count")};
    json_free(root);
    for (int gi = 0; gi < NGRAPH; gi++) {
        if (!G[gi].g) continue;
        cpool_graph_stats gs = {.struct_size = sizeof gs};
        EXPECT_OK(cpool_graph_get_stats(G[gi].g, &gs));
        if (gs.shared_write_bytes > gs.write_bytes) fail("a graph shares more than it writes");
    }
}

void op_stats(rd *r) {
    uint8_t b = u8(r), v = u8(r);
    int pi = pick_pool(b);
    if (pi < 0) return;
    TRACE("stats #%u variant %d\n", P[pi].uid, v % 4);
    if (v & 0x80) {
        TRACE("snapshot #%u\n", P[pi].uid);
        check_snapshot(pi, NULL);
    }
    cpool_pool_stats full = stats_of(pi);
    unsigned char buf[sizeof(cpool_pool_stats) + 32];
    memset(buf, 0xA5, sizeof buf);
    size_t size;
    cpool_status want = CPOOL_OK;
    switch (v % 4) {
    case 0:
        size = offsetof(cpool_pool_stats, cached_bytes); /* an older caller */
        break;
    case 1:
        size = offsetof(cpool_pool_stats, segment_count); /* too small */
        want = CPOOL_ERR_INVALID_ARGUMENT;
        break;
    case 2:
        size = sizeof(cpool_pool_stats) + 16; /* a newer caller */
        break;
    default:
        EXPECT(cpool_pool_get_stats(P[pi].p, NULL), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    }
    memcpy(buf, &size, sizeof size);
    check_status(cpool_pool_get_stats(P[pi].p, (cpool_pool_stats *)(void *)buf), want, "cpool_pool_get_stats", true);
    size_t filled = want == CPOOL_OK ? (size < sizeof full ? size : sizeof full) : sizeof(size_t);
    if (want == CPOOL_OK && memcmp(buf + sizeof(size_t), (unsigned char *)&full + sizeof(size_t), filled - sizeof(size_t)))
        fail("cpool_pool_get_stats with struct_size %zu disagrees with the full statistics", size);
    for (size_t i = filled; i < sizeof buf; i++)
        if (buf[i] != 0xA5) fail("cpool_pool_get_stats with struct_size %zu wrote byte %zu", size, i);
}
