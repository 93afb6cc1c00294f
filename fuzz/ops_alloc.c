/*
 * ops_alloc.c: the fuzz_api harness's allocations (declared in ops.h and
 * ops_internal.h): allocations and frees on a stream or under capture
 * (do_alloc_on, do_free_on, op_alloc, op_free), frees the library must
 * refuse (do_free_invalid), many at once (op_bulk), sets and copies of
 * allocated memory (op_memset), and parameter blocks (op_param_create,
 * op_param_set).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capturepool.h"
#include "model.h"
#include "ops.h"
#include "ops_internal.h"

/* ---- operations: allocation ------------------------------------------------------- */

/* Sizes: mostly small, which is fast; large ones (a segment of their own,
 * or a shared 20 MiB one) and impossible ones rarely. */
size_t decode_size(rd *r) {
    static const size_t small[24] = {0,   1,   2,    7,    64,   255,  256,  257,   511,    512,    513, 1000,
                                     1024, 2047, 4095, 4096, 4097, 8192, 8193, 16384, 65536, 100000, 1, 512};
    static const size_t large[12] = {MIB - 1, MIB, MIB + 1, 2 * MIB, 3 * MIB, 5 * MIB, 10 * MIB - 1, 10 * MIB, 10 * MIB + 1,
                                     21 * MIB, 2 * MIB + 512, 20 * MIB};
    /* Beyond any device: refused before any memory is asked for. (Sizes the
     * host cannot give are not tried: AddressSanitizer would abort on them.) */
    static const size_t impossible[4] = {((size_t)1 << 47) + 1, (size_t)1 << 52, (size_t)1 << 62, SIZE_MAX};
    uint8_t c = u8(r) % 64;
    if (c < 24) return small[c];
    if (c < 48) return 1 + (((size_t)(c - 24) << 8) | u8(r)); /* up to 6 KiB */
    if (c < 60) return 1 + (((size_t)u8(r) << 8) | u8(r));    /* up to 64 KiB */
    if (c == 60) return large[u8(r) % 12];
    if (c == 61) return 1 + (((size_t)u8(r) << 8) | u8(r)) * 16; /* up to 1 MiB */
    if (c == 62) return impossible[u8(r) % 4];
    return 0;
}

static int free_alloc_slot(void) {
    for (int i = 0; i < NALLOC; i++)
        if (!A[i].live) return i;
    return NALLOC;
}

/* An allocation of `size` from pool pi on stream `on`, in the model stream
 * s's capture or eager (on == s, or `on` forked into s's capture); `want`
 * is the status the model knows it must have, or -1. Returns its slot, or
 * -1 (failed, or freed at once for want of a slot). */
int do_alloc_on(int pi, size_t size, int s, int on, int want) {
    mpool *m = &P[pi];
    bool cap = C[s].active;
    bool huge = size > HUGE_LIMIT;
    bool bounded = m->max_reserved != 0;
    TRACE("alloc #%u %zu bytes on stream %d%s%s\n", m->uid, size, s, cap ? " (capture)" : "",
          want < 0 ? "" : want == CPOOL_OK ? ", must succeed" : ", must fail");
    if (!cap && (bounded || huge)) before_blocking(); /* out of memory waits for stream work */
    cpool_pool_stats before = stats_of(pi);
    void *ptr = NULL;
    char kept[512];
    snprintf(kept, sizeof kept, "%s", cpool_last_error());
    cpool_status st = cpool_alloc(m->p, size, S[on], &ptr);
    if (st == CPOOL_OK) check_error_kept(kept, "cpool_alloc");
    if (want >= 0)
        check_status(st, (cpool_status)want, "cpool_alloc (the model knows its status)", true);
    else
        expect_alloc_status(st, size == 0, m->sealed, m->suspended, huge, bounded, "cpool_alloc");
    if (st != CPOOL_OK) {
        check_failed_alloc(pi, &before, st, huge, size, "cpool_alloc");
        return -1;
    }
    check_new_block(pi, ptr, size, cap ? -1 : s, !cap, "cpool_alloc");
    if (cap) branch_check_alloc(s, on, pi, ptr, size);
    int ai = free_alloc_slot();
    A[ai] = (malloc_t){true, pi, ptr, size, on, cap, cap ? C[s].id : 0};
    m->live_bytes += size;
    m->live_count++;
    m->allocs++;
    if (cap) {
        capture_hold(s, pi);
        add_graph_range(m, ptr, size);
        m->graph_live_rounded += round512(size);
    }
    if (ai == NALLOC) {
        do_free_on(ai, s, on);
        return -1;
    }
    return ai;
}

int do_alloc_want(int pi, size_t size, int s, int want) { return do_alloc_on(pi, size, s, s, want); }

void do_alloc(int pi, size_t size, int s) { (void)do_alloc_want(pi, size, s, -1); }

/* A free on stream `on`, in the model stream s's capture or eager (as
 * do_alloc_on). */
void do_free_on(int ai, int s, int on) {
    malloc_t *a = &A[ai];
    mpool *m = &P[a->pool];
    bool cap = C[s].active;
    TRACE("free #%u %p (%zu bytes) on stream %d%s\n", m->uid, a->ptr, a->size, on, cap ? " (capture)" : "");
    EXPECT_OK(cpool_free(m->p, a->ptr, S[on]));
    m->live_bytes -= a->size;
    m->live_count--;
    m->frees++;
    if (a->graph) m->graph_live_rounded -= round512(a->size);
    if (a->graph && m->suspended) m->output_freed_suspended = true;
    if (cap) {
        capture_hold(s, a->pool);
        add_graph_range(m, a->ptr, a->size); /* freed under capture: the graph's now */
        branch_free_noted(s, on, a->pool, a->ptr, a->size);
        /* A block from outside capture may still be used by the freeing
         * stream's work from before the capture or its fork (enq counts
         * only that): no capture, on any stream, may have it before that
         * work ran. */
        if (!a->graph) add_freed(m, a->ptr, a->size, on);
    } else if (!a->graph) {
        add_freed(m, a->ptr, a->size, on);
    }
    ring[ring_next++ % NFREED] = (freed_ptr){m->uid, a->ptr};
    a->live = false;
}

void do_free_valid(int ai, int s) { do_free_on(ai, s, s); }

/* A free in stream s's capture of a block of a suspended pool would make
 * the capture use the pool: the model does not follow that. */
bool capture_frees_suspended(int ai, int s) { return C[s].active && P[A[ai].pool].suspended; }



void do_free_invalid(rd *r, int s) {
    uint8_t v = u8(r), b = u8(r);
    int pi = pick_pool(b);
    if (pi < 0) return;
    int local;
    void *ptr = NULL;
    cpool_stream *stream = S[s];
    const char *what = NULL;
    switch (v % 7) {
    case 6: /* a parameter block: the pool's own, not from cpool_alloc */
        if (!P[pi].nparams) return;
        ptr = P[pi].params[b % P[pi].nparams].ptr;
        what = "cpool_free (a parameter block)";
        break;
    case 0: { /* freed already (unless handed out again since) */
        freed_ptr f = ring[b % NFREED];
        if (!f.ptr) return;
        pi = -1;
        for (int q = 0; q < NPOOL; q++)
            if (usable(q) && P[q].uid == f.uid) pi = q;
        if (pi < 0 || live_start(pi, f.ptr)) return;
        ptr = f.ptr;
        what = "cpool_free (already freed)";
        break;
    }
    case 1: { /* another pool's */
        for (int i = 0; i < NALLOC && !ptr; i++)
            if (A[(b + i) % NALLOC].live && A[(b + i) % NALLOC].pool != pi) ptr = A[(b + i) % NALLOC].ptr;
        if (!ptr) ptr = &local;
        what = "cpool_free (another pool's pointer)";
        break;
    }
    case 2: { /* inside a live allocation */
        int ai = -1;
        for (int i = 0; i < NALLOC && ai < 0; i++)
            if (A[(b + i) % NALLOC].live && A[(b + i) % NALLOC].pool == pi) ai = (b + i) % NALLOC;
        if (ai < 0) return;
        ptr = (char *)A[ai].ptr + (A[ai].size > 512 && (v & 8) ? 512 : 1);
        what = "cpool_free (a pointer inside an allocation)";
        break;
    }
    case 3:
        ptr = &local;
        what = "cpool_free (a stack pointer)";
        break;
    case 4:
        ptr = NULL;
        what = "cpool_free (NULL)";
        break;
    default: { /* NULL stream, with a valid pointer */
        int ai = -1;
        for (int i = 0; i < NALLOC && ai < 0; i++)
            if (A[(b + i) % NALLOC].live && A[(b + i) % NALLOC].pool == pi) ai = (b + i) % NALLOC;
        ptr = ai >= 0 ? A[ai].ptr : &local;
        stream = NULL;
        what = "cpool_free (NULL stream)";
        break;
    }
    }
    TRACE("%s #%u %p on stream %d\n", what, P[pi].uid, ptr, s);
    cpool_pool_stats before = stats_of(pi);
    check_status(cpool_free(P[pi].p, ptr, stream), CPOOL_ERR_INVALID_ARGUMENT, what, true);
    cpool_pool_stats after = stats_of(pi);
    if (memcmp(&before, &after, sizeof before)) fail("pool #%u: %s changed the statistics", P[pi].uid, what);
}

/* Many small allocations at once (the allocator's address map grows past
 * 128 live blocks), or many frees in a strided order. */
void op_bulk(rd *r, int s) {
    uint8_t b = u8(r), v = u8(r), n = u8(r);
    if (v & 1) {
        int stride = 1 + (v >> 1) % 7, count = 0;
        TRACE("bulk free from slot %d, stride %d, on stream %d\n", n, stride, s);
        for (int k = 0; k < NALLOC && count < 96; k++) {
            int ai = (int)(((unsigned)n + (unsigned)k * (unsigned)stride) % NALLOC);
            if (A[ai].live && usable(A[ai].pool) && !capture_frees_suspended(ai, s)) {
                do_free_valid(ai, s);
                count++;
            }
        }
        return;
    }
    int pi = pick_pool(b);
    if (pi < 0) return;
    int count = 8 + n % 121;
    TRACE("bulk alloc of %d blocks from #%u on stream %d\n", count, P[pi].uid, s);
    for (int k = 0; k < count; k++) do_alloc(pi, 1 + (size_t)(v * 131u + (unsigned)k * 37u) % 3000, s);
}

void op_memset(rd *r, int s) {
    uint8_t b = u8(r), v = u8(r), b2 = u8(r);
    int ai = pick_alloc(b, false);
    if (ai < 0) return;
    malloc_t *a = &A[ai];
    bool cap = C[s].active;
    /* Under capture: only memory of this capture (the graph holds its pool).
     * Outside: only on the allocation's own stream. */
    if (cap ? (!a->graph || a->cap_id != C[s].id) : a->stream != s) return;
    TRACE("memset %p (%zu bytes) on stream %d%s\n", a->ptr, a->size, s, cap ? " (capture)" : "");
    size_t head = a->size < 1024 ? a->size : 1024;
    if (P[a->pool].suspended) { /* (a capture's own memory never is) */
        EXPECT(cpool_memset_async(S[s], a->ptr, v, head), CPOOL_ERR_SUSPENDED);
        return;
    }
    /* A graph's output, written outside capture: after its replays elsewhere. */
    unsigned outputs = !cap && a->graph ? 1u << a->pool : 0;
    if (outputs) order_pool_work(outputs, s);
    EXPECT_OK(cpool_memset_async(S[s], a->ptr, v, head));
    if (a->size > head) {
        size_t tail = a->size - head < 256 ? a->size - head : 256;
        EXPECT_OK(cpool_memset_async(S[s], (char *)a->ptr + a->size - tail, v, tail));
    }
    if (v & 1) { /* a copy into another allocation of the same kind */
        int bi = -1;
        for (int i = 0; i < NALLOC && bi < 0; i++) {
            malloc_t *c = &A[(b2 + i) % NALLOC];
            if (c->live && (cap ? (c->graph && c->cap_id == C[s].id) : c->stream == s)) bi = (b2 + i) % NALLOC;
        }
        if (bi >= 0) {
            size_t n = a->size < A[bi].size ? a->size : A[bi].size;
            if (n > 1024) n = 1024;
            if (!cap && A[bi].graph && !(outputs & 1u << A[bi].pool)) {
                outputs |= 1u << A[bi].pool;
                order_pool_work(1u << A[bi].pool, s);
            }
            if (P[A[bi].pool].suspended)
                EXPECT(cpool_memcpy_async(S[s], A[bi].ptr, a->ptr, n), CPOOL_ERR_SUSPENDED);
            else
                EXPECT_OK(cpool_memcpy_async(S[s], A[bi].ptr, a->ptr, n));
        }
    }
    if (!cap) enqueue_marker(s);
    if (outputs) note_pool_work(outputs, s);
}

/* ---- operations: parameter blocks ------------------------------------------------- */

void op_param_create(rd *r) {
    uint8_t b = u8(r), c = u8(r);
    int pi = pick_pool(b);
    if (pi < 0) return;
    mpool *m = &P[pi];
    if (m->nparams == NPARAM) return;
    static const size_t sizes[16] = {0, 1, 4, 8, 64, 255, 256, 4096, 65536, MIB, MIB + 1, 3 * MIB, 8, 16,
                                     ((size_t)1 << 47) + 1, SIZE_MAX};
    size_t size = sizes[c % 16];
    bool huge = size > HUGE_LIMIT, bounded = m->max_reserved != 0;
    TRACE("param_create #%u %zu bytes\n", m->uid, size);
    if (bounded || huge) before_blocking();
    cpool_pool_stats before = stats_of(pi);
    cpool_param *prm = NULL;
    char kept[512];
    snprintf(kept, sizeof kept, "%s", cpool_last_error());
    cpool_status st = cpool_param_create(m->p, size, &prm);
    if (st == CPOOL_OK) check_error_kept(kept, "cpool_param_create");
    expect_alloc_status(st, size == 0, m->sealed, m->suspended, huge, bounded, "cpool_param_create");
    if (st != CPOOL_OK) {
        check_failed_alloc(pi, &before, st, huge, size, "cpool_param_create");
        if (prm) fail("a failed cpool_param_create set its output");
        return;
    }
    void *ptr = cpool_param_device_ptr(prm);
    check_new_block(pi, ptr, size, -1, true, "cpool_param_create");
    m->params[m->nparams++] = (mparam){prm, ptr, size, -1};
    m->live_bytes += size;
    m->live_count++;
    m->allocs++;
}

void op_param_set(rd *r, int s) {
    uint8_t b = u8(r), k = u8(r), v = u8(r);
    unsigned char value[64];
    for (int i = 0; i < 64; i++) value[i] = (unsigned char)(v * 31 + i * 7);
    int pi = pick_resident_pool(b);
    if (pi < 0 || !P[pi].nparams) return;
    mpool *m = &P[pi];
    mparam *q = &m->params[k % m->nparams];
    size_t n = 1 + v % (q->size < 64 ? q->size : 64);
    switch (v % 8) {
    case 0:
        EXPECT(cpool_param_set(q->prm, value, 0, S[s]), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    case 1: /* more than the block holds: it must not read value at all */
        EXPECT(cpool_param_set(q->prm, value, q->size + 1, S[s]), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    case 2:
        EXPECT(cpool_param_set(q->prm, NULL, n, S[s]), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    case 3:
        EXPECT(cpool_param_set(NULL, value, n, S[s]), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_param_set(q->prm, value, n, NULL), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    default:
        break;
    }
    if (C[s].active) {
        EXPECT(cpool_param_set(q->prm, value, n, S[s]), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    }
    TRACE("param_set #%u %zu bytes on stream %d (home %d)\n", m->uid, n, s, q->home);
    if (q->home < 0) q->home = s;
    if (q->home != s) {
        /* Another stream: order it with the home stream's checks. */
        if (C[q->home].active) return;
        do_sync(q->home);
        EXPECT_OK(cpool_param_set(q->prm, value, n, S[s]));
        memset(value, 0xEE, sizeof value);
        do_sync(s);
        return;
    }
    EXPECT_OK(cpool_param_set(q->prm, value, n, S[s]));
    cbtask *t = calloc(1, sizeof *t);
    if (!t) abort();
    t->kind = CB_PARAM_CHECK;
    t->ptr = q->ptr;
    t->n = n;
    memcpy(t->val, value, n);
    memset(value, 0xEE, sizeof value); /* the caller may reuse it at once */
    enqueue_task(s, t);
}

/* ---- operations: alloc and free -------------------------------------------------- */

void op_alloc(rd *r, int s) {
    uint8_t b = u8(r);
    size_t size = decode_size(r);
    int pi = pick_pool(b);
    if (pi >= 0) do_alloc(pi, size, s);
}

void op_free(rd *r, int s) {
    int ai = pick_alloc(u8(r), true);
    if (ai >= 0 && !capture_frees_suspended(ai, s)) do_free_valid(ai, s);
}
