/*
 * Graph caches: graphs of one pool kept by the caller's key, launched by
 * key, captured on a miss, evicted least recently launched first until the
 * pool's graph memory and the count of graphs are within bounds.
 *
 * The keys live in an open-addressing table (linear probing, deletion by
 * shifting back the entries after the hole), sized a power of two and kept
 * at most half full: a hit is a hash, a probe or two and a tick. Each entry
 * holds the cache's reference to its graph and the tick of its last launch
 * (a counter of the cache's launches); eviction takes the entry with the
 * lowest tick, found by a walk of the table, which is cheap against the
 * capture that made eviction necessary.
 *
 *   table:  [ key 7 | g | tick 12 ] [ empty ] [ key 3 | g | tick 40 ] ...
 *
 * The cache's mutex covers the table and the counters only. Nothing else
 * of the library is called under it: a miss captures without it (two
 * threads that miss one key both capture, the first to finish keeps its
 * graph), and an eviction takes the entry out under it, then calls
 * on_evict and releases the graph without it, so on_evict may call the
 * library (cpool_free of the graph's outputs). After evicting, the cache
 * asks the pool to give back its idle graph memory whose work is over, the
 * newest idle arena too (objects/pool.c, memory/graph_pages.c), which a
 * capture would otherwise keep for the next capture.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "struct_size.h"

typedef struct entry {
    uint64_t key;
    cpool_graph *graph; /* the cache's reference (a handle); NULL: the slot is empty */
    uint64_t tick;      /* the cache's launch count at its last launch */
    int launching;        /* launches after a miss's capture, before their enqueue: not evicted then */
} entry;

struct cpool_graph_cache {
    cpool__handle_header handle;
    cpool_pool *pool; /* the cache's reference (an object, not a handle) */
    cpool__mutex mu;
    cpool_graph_cache_options opts;
    entry *table;
    size_t cap;   /* a power of two, or 0 */
    size_t count; /* entries in use */
    uint64_t tick;
    uint64_t hits, misses, evictions;
    /* Bytes counted as given back at the last check of the bounds while
     * their work still ran: the next launch, a hit too, checks again. */
    bool waiting;
};

static cpool__slab cache_slab = CPOOL__SLAB_INIT(struct cpool_graph_cache, CPOOL__HANDLE_GRAPH_CACHE);

/* ---- the table -------------------------------------------------------------- */

static size_t slot_of(uint64_t key, size_t cap) {
    key ^= key >> 33; /* a 64-bit mix (murmur3's finaliser) */
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ull;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

static entry *find(const cpool_graph_cache *c, uint64_t key) {
    if (!c->cap) return NULL;
    for (size_t i = slot_of(key, c->cap);; i = (i + 1) & (c->cap - 1)) {
        entry *e = &c->table[i];
        if (!e->graph) return NULL;
        if (e->key == key) return e;
    }
}

/* Room for one more entry at most half full. */
static bool grow(cpool_graph_cache *c) {
    if (2 * (c->count + 1) <= c->cap) return true;
    size_t cap = c->cap ? 2 * c->cap : 16;
    entry *table = cpool__calloc(cap, sizeof *table);
    if (!table) return false;
    for (size_t i = 0; i < c->cap; i++) {
        if (!c->table[i].graph) continue;
        size_t j = slot_of(c->table[i].key, cap);
        while (table[j].graph) j = (j + 1) & (cap - 1);
        table[j] = c->table[i];
    }
    free(c->table);
    c->table = table;
    c->cap = cap;
    return true;
}

/* Key absent; grow() made room. */
static void insert(cpool_graph_cache *c, uint64_t key, cpool_graph *graph) {
    size_t i = slot_of(key, c->cap);
    while (c->table[i].graph) i = (i + 1) & (c->cap - 1);
    c->table[i] = (entry){.key = key, .graph = graph, .tick = ++c->tick};
    c->count++;
}

/* Empties e's slot, shifting back the entries after it that probed past it. */
static void remove_entry(cpool_graph_cache *c, entry *e) {
    size_t hole = (size_t)(e - c->table), mask = c->cap - 1;
    c->table[hole].graph = NULL;
    for (size_t i = (hole + 1) & mask; c->table[i].graph; i = (i + 1) & mask) {
        size_t home = slot_of(c->table[i].key, c->cap);
        /* Moves back where its home is not in (hole, i], cyclically. */
        if (((i - home) & mask) >= ((i - hole) & mask)) {
            c->table[hole] = c->table[i];
            c->table[i].graph = NULL;
            hole = i;
        }
    }
    c->count--;
}

/* The least recently launched entry whose key is not `keep`, or NULL. */
static entry *least_recent(cpool_graph_cache *c, uint64_t keep, bool keep_any) {
    entry *best = NULL;
    for (size_t i = 0; i < c->cap; i++) {
        entry *e = &c->table[i];
        /* A launch under way (a hit's, or a miss's after its capture) is
         * enqueued first: on_evict's frees are then ordered after it. */
        if (!e->graph || e->launching || (keep_any && e->key == keep) ||
            cpool__graph_held(cpool__handle_object(e->graph, CPOOL__HANDLE_GRAPH)))
            continue;
        if (!best || e->tick < best->tick) best = e;
    }
    return best;
}

/* ---- eviction ----------------------------------------------------------------- */

/* A graph leaves the cache: the caller's hook, then the cache's reference.
 * No lock of the library is held. */
static void leave(cpool_graph_cache *c, uint64_t key, cpool_graph *graph) {
    if (c->opts.on_evict) c->opts.on_evict(key, graph, c->opts.user);
    cpool_graph_release(graph);
}

/* Evicts the least recently launched graphs but `keep`'s until both bounds
 * hold (or only `keep` is left), then leaves the pool's graph memory given
 * back as far as its work allows. `check_bytes` false: only the count. */
static void evict_to_bounds(cpool_graph_cache *c, uint64_t keep, bool check_bytes) {
    for (;;) {
        bool over = false;
        uint64_t reserved = 0, waiting = 0;
        cpool__mutex_lock(&c->mu);
        bool over_count = c->opts.max_graphs && c->count > c->opts.max_graphs;
        cpool__mutex_unlock(&c->mu);
        if (c->opts.max_bytes && (check_bytes || over_count)) {
            cpool__pool_give_back_graph_memory(c->pool, &reserved, &waiting);
            over = reserved - waiting > c->opts.max_bytes;
        }
        cpool__mutex_lock(&c->mu);
        entry *victim = over || over_count ? least_recent(c, keep, true) : NULL;
        /* Bytes still to come back, or a bound left unmet by graphs being
         * launched meanwhile: the next launch checks again. */
        c->waiting = waiting != 0 || ((over || over_count) && !victim && c->count > 1);
        uint64_t key = victim ? victim->key : 0;
        cpool_graph *graph = victim ? victim->graph : NULL;
        if (victim) {
            remove_entry(c, victim);
            c->evictions++;
        }
        cpool__mutex_unlock(&c->mu);
        if (!victim) return;
        leave(c, key, graph);
        check_bytes = true; /* its memory is to be seen back */
    }
}

/* ---- the public calls ------------------------------------------------------- */

cpool_status cpool_graph_cache_create(cpool_pool *pool_handle, const cpool_graph_cache_options *opts,
                                      cpool_graph_cache **out) {
    cpool_pool *pool;
    CPOOL__RESOLVE(pool, pool_handle, CPOOL__HANDLE_POOL, "cpool_graph_cache_create", "pool");
    if (!out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_graph_cache_create: out is NULL");
    cpool_graph_cache_options o = CPOOL_GRAPH_CACHE_OPTIONS_INIT;
    if (opts) {
        CPOOL__CHECK_STRUCT_SIZE(opts->struct_size, CPOOL__SIZE_THROUGH(cpool_graph_cache_options, user),
                                 "cpool_graph_cache_create: opts->struct_size");
        memcpy(&o, opts, sizeof o); /* every field is of the first version */
        o.struct_size = sizeof o;
    }
    cpool_graph_cache *c = cpool__slab_take(&cache_slab);
    if (!c) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "cpool_graph_cache_create: out of host memory");
    cpool__mutex_init(&c->mu, CPOOL__RANK_GRAPH_CACHE);
    c->opts = o;
    c->pool = cpool__pool_retain(pool);
    *out = cpool__handle_of(c);
    return CPOOL_OK;
}

void cpool_graph_cache_destroy(cpool_graph_cache *handle) {
    cpool_graph_cache *c = cpool__handle_end(handle, CPOOL__HANDLE_GRAPH_CACHE);
    if (!c) {
        if (handle) cpool__handle_fail(handle, CPOOL__HANDLE_GRAPH_CACHE, "cpool_graph_cache_destroy", "cache");
        return;
    }
    /* The handle is dead: no other call reaches the table now. */
    for (size_t i = 0; i < c->cap; i++)
        if (c->table[i].graph) leave(c, c->table[i].key, c->table[i].graph);
    free(c->table);
    cpool__mutex_destroy(&c->mu);
    cpool_pool *pool = c->pool;
    cpool__slab_give(&cache_slab, c);
    cpool__pool_release_without_waiting(pool);
}

/* A hit: the tick and a reference of the launch's own, in one turn of the
 * lock (an eviction meanwhile drops only the cache's reference), then the
 * launch. false: no graph is kept under key. */
static bool launch_hit(cpool_graph_cache *c, uint64_t key, cpool_stream *s_handle, cpool_status *st) {
    cpool__mutex_lock(&c->mu);
    entry *e = find(c, key);
    cpool_graph *held = e ? cpool__graph_hold(cpool__handle_object(e->graph, CPOOL__HANDLE_GRAPH)) : NULL;
    cpool_graph *graph = e ? e->graph : NULL;
    bool recheck = c->waiting;
    if (e) {
        e->tick = ++c->tick;
        c->hits++;
    }
    cpool__mutex_unlock(&c->mu);
    if (!held) return false;
    if (recheck) evict_to_bounds(c, key, true);
    *st = cpool_graph_launch(graph, s_handle);
    cpool__graph_unhold(held);
    return true;
}

/* A miss: captured without the lock, then kept (or another thread's
 * capture of the key, which came first, is launched instead) and not
 * evicted until its launch is enqueued. */
static cpool_status launch_miss(cpool_graph_cache *c, uint64_t key, cpool_stream *s, cpool_stream *s_handle,
                                cpool_capture_mode mode, cpool_capture_fn body, void *ctx, const char *fn) {
    cpool_graph *made = NULL;
    cpool_status st = cpool__capture_run(fn, s, c->pool, mode, body, ctx, NULL, true, &made);
    if (st != CPOOL_OK) {
        /* The discarded capture's memory goes back where no work can use
         * it, as an eviction's does; nothing else changes. */
        if (c->opts.max_bytes) {
            uint64_t reserved, waiting;
            cpool__error_mark why;
            cpool__error_save(&why);
            cpool__pool_give_back_graph_memory(c->pool, &reserved, &waiting);
            cpool__error_restore(&why);
            if (waiting) { /* the next launch looks again */
                cpool__mutex_lock(&c->mu);
                c->waiting = true;
                cpool__mutex_unlock(&c->mu);
            }
        }
        return st;
    }
    made = cpool__handle_of(made);
    cpool__mutex_lock(&c->mu);
    entry *e = find(c, key);
    bool kept = !e && grow(c);
    if (kept) {
        insert(c, key, made);
        e = find(c, key);
    } else if (e) {
        e->tick = ++c->tick;
    }
    cpool_graph *graph = e ? e->graph : NULL, *held = NULL;
    if (e) {
        held = cpool__graph_hold(cpool__handle_object(graph, CPOOL__HANDLE_GRAPH));
        e->launching++;
        c->misses++;
    }
    cpool__mutex_unlock(&c->mu);
    if (!kept) {
        leave(c, key, made);
        if (!e) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "%s: out of host memory for the cache's keys", fn);
    }
    /* Before the launch: its own work must not hold back what the
     * evictions give back. */
    evict_to_bounds(c, key, true);
    st = cpool_graph_launch(graph, s_handle);
    cpool__mutex_lock(&c->mu);
    e = find(c, key);
    if (e && e->graph == graph) e->launching--; /* else evicted by cpool_graph_cache_evict meanwhile */
    cpool__mutex_unlock(&c->mu);
    cpool__graph_unhold(held);
    return st == CPOOL_OK ? st : cpool__fail_in(fn, st);
}

cpool_status cpool_graph_cache_launch(cpool_graph_cache *handle, uint64_t key, cpool_stream *s_handle,
                                      cpool_capture_mode mode, cpool_capture_fn body, void *ctx, bool *hit_out) {
    static const char fn[] = "cpool_graph_cache_launch";
    cpool_graph_cache *c;
    cpool_stream *s;
    CPOOL__RESOLVE(c, handle, CPOOL__HANDLE_GRAPH_CACHE, fn, "cache");
    CPOOL__RESOLVE(s, s_handle, CPOOL__HANDLE_STREAM, fn, "stream");
    if (hit_out) *hit_out = false;
    cpool_status st = CPOOL_OK;
    if (launch_hit(c, key, s_handle, &st)) {
        if (hit_out) *hit_out = true;
        return st == CPOOL_OK ? st : cpool__fail_in(fn, st);
    }
    if (!body) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: body is NULL on a miss", fn);
    if (s->dev != cpool__pool_device(c->pool))
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: the stream is on another device than the pool", fn);
    if (cpool__stream_captures(s)) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: the stream is capturing", fn);
    return launch_miss(c, key, s, s_handle, mode, body, ctx, fn);
}

cpool_status cpool_graph_cache_get(cpool_graph_cache *handle, uint64_t key, cpool_graph **graph_out) {
    cpool_graph_cache *c;
    CPOOL__RESOLVE(c, handle, CPOOL__HANDLE_GRAPH_CACHE, "cpool_graph_cache_get", "cache");
    if (!graph_out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_graph_cache_get: graph_out is NULL");
    cpool__mutex_lock(&c->mu);
    entry *e = find(c, key);
    *graph_out = e ? cpool_graph_retain(e->graph) : NULL;
    cpool__mutex_unlock(&c->mu);
    return CPOOL_OK;
}

cpool_status cpool_graph_cache_evict(cpool_graph_cache *handle, uint64_t key) {
    cpool_graph_cache *c;
    CPOOL__RESOLVE(c, handle, CPOOL__HANDLE_GRAPH_CACHE, "cpool_graph_cache_evict", "cache");
    cpool__mutex_lock(&c->mu);
    entry *e = find(c, key);
    cpool_graph *graph = e ? e->graph : NULL;
    if (e) {
        remove_entry(c, e);
        c->evictions++;
    }
    cpool__mutex_unlock(&c->mu);
    if (!graph) return CPOOL_OK;
    leave(c, key, graph);
    uint64_t reserved, waiting;
    cpool__pool_give_back_graph_memory(c->pool, &reserved, &waiting);
    cpool__mutex_lock(&c->mu);
    c->waiting = c->waiting || waiting != 0;
    cpool__mutex_unlock(&c->mu);
    return CPOOL_OK;
}

cpool_status cpool_graph_cache_get_stats(const cpool_graph_cache *handle, cpool_graph_cache_stats *out) {
    const cpool_graph_cache *cc;
    CPOOL__RESOLVE(cc, handle, CPOOL__HANDLE_GRAPH_CACHE, "cpool_graph_cache_get_stats", "cache");
    if (!out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_graph_cache_get_stats: out is NULL");
    size_t size = out->struct_size;
    CPOOL__CHECK_STRUCT_SIZE(size, CPOOL__SIZE_THROUGH(cpool_graph_cache_stats, graph_bytes),
                             "cpool_graph_cache_get_stats: struct_size");
    cpool_graph_cache *c = (cpool_graph_cache *)cc; /* locking is no logical change */
    cpool_graph_cache_stats st = {.struct_size = size};
    cpool__mutex_lock(&c->mu);
    st.graphs = c->count;
    st.hits = c->hits;
    st.misses = c->misses;
    st.evictions = c->evictions;
    cpool__mutex_unlock(&c->mu);
    cpool_pool_stats ps = CPOOL_POOL_STATS_INIT;
    cpool_status status = cpool_pool_get_stats(cpool__handle_of(c->pool), &ps);
    if (status != CPOOL_OK) return cpool__fail_in("cpool_graph_cache_get_stats", status);
    st.graph_bytes = ps.graph_reserved_bytes;
    cpool__copy_struct(out, &st, size, sizeof st);
    return CPOOL_OK;
}

cpool_status cpool_graph_cache_predict_bytes(cpool_graph_cache *handle, uint64_t scratch_bytes, uint64_t output_bytes,
                                             uint64_t *bytes_out) {
    cpool_graph_cache *c;
    CPOOL__RESOLVE(c, handle, CPOOL__HANDLE_GRAPH_CACHE, "cpool_graph_cache_predict_bytes", "cache");
    if (!bytes_out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_graph_cache_predict_bytes: bytes_out is NULL");
    *bytes_out = cpool__pool_predict_graph_bytes(c->pool, scratch_bytes, output_bytes);
    return CPOOL_OK;
}
