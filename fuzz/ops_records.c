/*
 * ops_records.c: the fuzz_api harness's recorded objects and clears
 * (declared in ops.h and ops_internal.h): the drops of recorded objects
 * (drop_cb, and what each kind of drop does: a nested clear, a release, a
 * wait, probes of its pool, a record of its own), records (op_record),
 * clears on this thread (do_clear, op_clear), and two clears on two threads
 * whose drops clear each other's pool, watched for a deadlock
 * (op_cross_clear).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capturepool.h"
#include "model.h"
#include "ops.h"
#include "ops_internal.h"

/* ---- recorded objects: the drops ---------------------------------------------- */

static void drop_cb(void *o);

/* A drop of kind DROP_RECORD: a new plain object, registered after the
 * whole batch being dropped, so it is dropped last, by the clear that
 * follows. */
static void record_from_drop(unsigned uid, cpool_pool *pool) {
    pthread_mutex_lock(&drop_mu);
    if (nobj < NOBJ) {
        obj *nb = &objs[nobj++];
        *nb = (obj){.used = true, .uid = uid, .serial = next_serial[uid]++, .droppable = true, .kind = DROP_PLAIN,
                    .ctx = CTX_ALIVE, .pool = pool};
        check_status(cpool_pool_record(pool, nb, drop_cb, NULL), CPOOL_OK, "cpool_pool_record in a drop", true);
    } else {
        check_status(cpool_pool_record(pool, NULL, NULL, NULL), CPOOL_OK, "cpool_pool_record in a drop", true);
    }
    pthread_mutex_unlock(&drop_mu);
}

/* What a drop does besides the checks: calls on its own pool, whose handle
 * is live in a clear and dead in the final teardown. */
static void drop_action(unsigned uid, int kind, int ctx, cpool_pool *pool) {
    cpool_pool_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    cpool_status gs = cpool_pool_get_stats(pool, &st);
    expect_one_of(gs, CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT, "cpool_pool_get_stats in a drop, on the drop's own pool");
    bool alive = gs == CPOOL_OK;
    if (ctx == CTX_ALIVE && !alive) fail("an object of pool #%u dropped by a clear, but the pool's handle is dead", uid);
    if (ctx == CTX_DEAD && alive)
        fail("an object of pool #%u dropped in the pool's final teardown, but the pool's handle still works", uid);
    switch (kind) {
    case DROP_CLEAR:
        if (alive) atomic_fetch_add(&nested_clears[uid], 1);
        cpool_pool_clear_buffers(pool);
        break;
    case DROP_RELEASE:
        if (!alive) fail("an object holding a reference to pool #%u was dropped in the pool's final teardown", uid);
        cpool_pool_release(pool);
        atomic_fetch_sub(&drop_refs[uid], 1);
        break;
    case DROP_WAIT:
        cpool_wait_deferred();
        break;
    case DROP_PROBE:
        if (alive) {
            (void)cpool_pool_buffer_count(pool);
            (void)cpool_pool_is_sealed(pool);
        } else {
            probe_dead_pool(pool, S[0]);
        }
        break;
    case DROP_RECORD:
        if (!alive) {
            check_status(cpool_pool_record(pool, &st, never_drop, NULL), CPOOL_ERR_INVALID_ARGUMENT,
                         "cpool_pool_record in a drop of its pool's final teardown", true);
            break;
        }
        record_from_drop(uid, pool);
        atomic_fetch_add(&nested_clears[uid], 1);
        cpool_pool_clear_buffers(pool);
        break;
    default:
        break;
    }
}

/* DROP_CROSS: the two drops meet (or give up waiting after 200 ms) before
 * each clears the other's pool, so that both clears are dropping at once. */
static atomic_int cross_met;

static void cross_drop(cpool_pool *other, unsigned other_uid) {
    atomic_fetch_add(&cross_met, 1);
    for (int i = 0; i < 2000 && atomic_load(&cross_met) < 2; i++) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    atomic_fetch_add(&nested_clears[other_uid], 1);
    cpool_pool_clear_buffers(other);
}

static void drop_cb(void *o) {
    obj *ob = o;
    if (in_host) fail("a recorded object was dropped inside a stream callback");
    bool on_main = pthread_equal(pthread_self(), main_thread);
    pthread_mutex_lock(&drop_mu);
    if (!ob->droppable)
        fail("object %d (pool #%u, serial %llu) dropped before a clear or the last release", (int)(ob - objs), ob->uid,
             (unsigned long long)ob->serial);
    if (ob->drops++) fail("object %d (pool #%u) dropped twice", (int)(ob - objs), ob->uid);
    if (ob->serial <= last_dropped[ob->uid])
        fail("pool #%u dropped serial %llu after serial %llu: not in registration order", ob->uid,
             (unsigned long long)ob->serial, (unsigned long long)last_dropped[ob->uid]);
    last_dropped[ob->uid] = ob->serial;
    unsigned uid = ob->uid;
    int kind = ob->kind, ctx = ob->ctx;
    cpool_pool *pool = ob->pool, *other = ob->other;
    unsigned other_uid = ob->other_uid;
    pthread_mutex_unlock(&drop_mu);
    if (on_main)
        for (int s = 0; s < NS; s++)
            if (tracked(s) && atomic_load(&done[s]) < snap[s])
                fail("object of pool #%u dropped while stream %d%s still runs work enqueued before the call (%llu of "
                     "%llu done)",
                     uid, s, S[s] ? "" : " (destroyed, its work pending)", (unsigned long long)atomic_load(&done[s]),
                     (unsigned long long)snap[s]);
    if (kind == DROP_CROSS)
        cross_drop(other, other_uid);
    else
        drop_action(uid, kind, ctx, pool);
}

/* ---- operations: records and clears ---------------------------------------------- */

void op_record(rd *r) {
    uint8_t b = u8(r), v = u8(r);
    int pi = pick_pool(b);
    if (pi < 0) return;
    mpool *m = &P[pi];
    static const int kinds[8] = {DROP_PLAIN, DROP_PLAIN, DROP_PLAIN, DROP_CLEAR,
                                 DROP_RELEASE, DROP_WAIT, DROP_PROBE, DROP_RECORD};
    int kind = kinds[(v >> 2) % 8];
    obj *ob = NULL;
    /* drop_mu across the record: drops may record too, and serials must
     * follow the order of registration. */
    pthread_mutex_lock(&drop_mu);
    if ((v & 1) == 0 && nobj < NOBJ) {
        ob = &objs[nobj++];
        ob->used = true;
        ob->uid = m->uid;
        ob->serial = next_serial[m->uid]++;
        /* a callback's clear, or a nested clear on another thread, may still take it */
        ob->droppable = m->pending_clears > 0 || nest_risk(m);
        ob->kind = kind;
        ob->ctx = CTX_UNKNOWN;
        ob->pool = m->p;
        if (kind == DROP_RELEASE) {
            if (cpool_pool_retain(m->p) != m->p) fail("cpool_pool_retain returned another pointer");
            atomic_fetch_add(&drop_refs[m->uid], 1); /* the object's, released by its drop */
        }
        if (kind == DROP_CLEAR || kind == DROP_RECORD) m->nesters++;
    }
    size_t idx = (size_t)-7;
    TRACE("record #%u obj %d drop kind %d\n", m->uid, ob ? (int)(ob - objs) : -1, ob ? kind : -1);
    cpool_status st = cpool_pool_record(m->p, ob ? (void *)ob : (void *)&P, ob ? drop_cb : NULL, (v & 2) ? NULL : &idx);
    pthread_mutex_unlock(&drop_mu);
    check_status(st, CPOOL_OK, "cpool_pool_record", true);
    if (!(v & 2) && !m->records_unknown && !nest_risk(m) && idx != m->records)
        fail("pool #%u: record index %zu, expected %zu", m->uid, idx, m->records);
    m->records++;
}

/* A clear on this thread: it returns once every object recorded before it
 * is dropped (by it, or by a clear already dropping on another thread). */
void do_clear(int pi) {
    mpool *m = &P[pi];
    before_blocking();
    mark_droppable(m->uid, CTX_ALIVE);
    bool verify = !m->deferred && m->pending_clears == 0;
    m->gen++;
    m->records = 0;
    m->records_unknown = m->pending_clears > 0;
    cpool_pool_clear_buffers(m->p);
    if (verify) {
        verify_dropped(m->uid, "after cpool_pool_clear_buffers");
        absorb_nested(pi); /* the drops ran here, their nested clears too */
    }
}

void op_clear(rd *r) {
    int pi = pick_pool(u8(r));
    if (pi < 0) return;
    TRACE("clear #%u\n", P[pi].uid);
    do_clear(pi);
}

/* ---- operations: two clears whose drops clear each other ------------------------- */

/* On unless FUZZ_API_CROSS_DROPS=0. */
bool cross_drops;

static pthread_mutex_t watch_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t watch_cv = PTHREAD_COND_INITIALIZER;
static bool watch_armed;

/* Fails the input when the calls it watches have not returned in 10 s. */
static void *watchdog_main(void *arg) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    pthread_mutex_lock(&watch_mu);
    while (watch_armed)
        if (pthread_cond_timedwait(&watch_cv, &watch_mu, &deadline) == ETIMEDOUT && watch_armed)
            fail("%s: no return in 10 s (a deadlock)", (const char *)arg);
    pthread_mutex_unlock(&watch_mu);
    return NULL;
}

static void *clear_main(void *pool) {
    cpool_pool_clear_buffers(pool);
    return NULL;
}

/* Two pools, each with an object whose drop clears the other; a thread of
 * the harness clears one while this thread clears the other, so each drop
 * clears a pool whose clear is dropping on the other thread. Nothing may
 * deadlock; every object of both is dropped once. */
void op_cross_clear(rd *r) {
    uint8_t b = u8(r), c = u8(r);
    int x = pick_pool(b), y = pick_pool(c);
    if (!cross_drops || x < 0 || y < 0 || x == y) return;
    mpool *mx = &P[x], *my = &P[y];
    if (mx->deferred || my->deferred || mx->pending_clears || my->pending_clears) return;
    pthread_mutex_lock(&drop_mu);
    if (nobj + 2 > NOBJ) {
        pthread_mutex_unlock(&drop_mu);
        return;
    }
    TRACE("cross clear of #%u (here) and #%u (another thread), each one's drop clears the other\n", mx->uid, my->uid);
    obj *ox = &objs[nobj++], *oy = &objs[nobj++];
    *ox = (obj){.used = true, .uid = mx->uid, .serial = next_serial[mx->uid]++, .kind = DROP_CROSS, .pool = mx->p,
                .other = my->p, .other_uid = my->uid};
    *oy = (obj){.used = true, .uid = my->uid, .serial = next_serial[my->uid]++, .kind = DROP_CROSS, .pool = my->p,
                .other = mx->p, .other_uid = mx->uid};
    check_status(cpool_pool_record(mx->p, ox, drop_cb, NULL), CPOOL_OK, "cpool_pool_record", true);
    check_status(cpool_pool_record(my->p, oy, drop_cb, NULL), CPOOL_OK, "cpool_pool_record", true);
    pthread_mutex_unlock(&drop_mu);
    before_blocking();
    mark_droppable(mx->uid, CTX_ALIVE);
    mark_droppable(my->uid, CTX_ALIVE);
    mx->gen++;
    my->gen++;
    mx->records = my->records = 0;
    atomic_store(&cross_met, 0);
    pthread_t watchdog, clearer;
    watch_armed = true;
    if (pthread_create(&watchdog, NULL, watchdog_main, "cpool_pool_clear_buffers of two pools whose drops clear each other"))
        abort();
    if (pthread_create(&clearer, NULL, clear_main, my->p)) abort();
    cpool_pool_clear_buffers(mx->p);
    pthread_join(clearer, NULL);
    pthread_mutex_lock(&watch_mu);
    watch_armed = false;
    pthread_cond_broadcast(&watch_cv);
    pthread_mutex_unlock(&watch_mu);
    pthread_join(watchdog, NULL);
    verify_dropped(mx->uid, "after two clears whose drops clear each other's pool");
    verify_dropped(my->uid, "after two clears whose drops clear each other's pool");
    absorb_nested(x);
    absorb_nested(y);
}
