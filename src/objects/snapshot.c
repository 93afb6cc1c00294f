/*
 * Snapshots: a pool's memory as one JSON object (docs/SNAPSHOT.md), built
 * in memory under the pool's lock (cpool__pool_view) and written to the
 * file after it is dropped, so a slow disk never holds up allocations.
 *
 * To the allocator a block in the pool's front cache is live; the snapshot
 * shows the callers' view: a block the front keeps free is "free", one it
 * handed out is "live" with the caller's size.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "graph_pages.h"
#include "io.h"
#include "stream_order.h"
#include "text.h"

/* One mapped page of an arena: where, and the physical page behind it. */
typedef struct page_view {
    uintptr_t addr;
    uint64_t physical;
    bool own, packed;
} page_view;

typedef struct snapshot {
    cpool__text t;
    const cpool__pool_view *v;
    uintptr_t segment_base;
    bool first_segment, first_block;
    /* What is walked now: segments of the eager allocator ("eager") or of
     * the packed region ("packed"), or (NULL) the ranges of `arena`, whose
     * mapped pages are `pages`. */
    const char *kind;
    const cpool__arena *arena;
    page_view *pages;
    size_t page_count, page_cap;
    /* Every arena page's physical id, for the distinct ones; the bytes of
     * ranges with no pages (plain segments, an arena's own memory). */
    uint64_t *ids;
    size_t id_count, id_cap;
    size_t own_pages;
    uint64_t plain_bytes;
    bool failed;
} snapshot;

/* A key (a string literal) and its number. */
#define KEY_U64(t, key, value)          \
    do {                                \
        CPOOL__TEXT_LIT((t), key);      \
        cpool__text_u64((t), (value));  \
    } while (0)

static void put_stats(cpool__text *t, const cpool_pool_stats *s) {
    KEY_U64(t, "{\"struct_size\":", s->struct_size);
    KEY_U64(t, ",\"reserved_bytes\":", s->reserved_bytes);
    KEY_U64(t, ",\"reserved_bytes_peak\":", s->reserved_bytes_peak);
    KEY_U64(t, ",\"allocated_bytes\":", s->allocated_bytes);
    KEY_U64(t, ",\"allocated_bytes_peak\":", s->allocated_bytes_peak);
    KEY_U64(t, ",\"graph_reserved_bytes\":", s->graph_reserved_bytes);
    KEY_U64(t, ",\"alloc_count\":", s->alloc_count);
    KEY_U64(t, ",\"free_count\":", s->free_count);
    KEY_U64(t, ",\"segment_count\":", s->segment_count);
    KEY_U64(t, ",\"cached_bytes\":", s->cached_bytes);
    KEY_U64(t, ",\"graph_count\":", s->graph_count);
    KEY_U64(t, ",\"host_kept_bytes\":", s->host_kept_bytes);
    KEY_U64(t, ",\"host_reserved_bytes\":", s->host_reserved_bytes);
    CPOOL__TEXT_LIT(t, "}");
}

static void on_segment(void *ctx, uintptr_t base, size_t size) {
    snapshot *sn = ctx;
    cpool__text *t = &sn->t;
    cpool__text_put(t, sn->first_segment ? "\n{\"address\":" : "]},\n{\"address\":");
    cpool__text_u64(t, base);
    KEY_U64(t, ",\"size\":", size);
    if (sn->kind) {
        CPOOL__TEXT_LIT(t, ",\"kind\":\"");
        cpool__text_put(t, sn->kind);
        CPOOL__TEXT_LIT(t, "\"");
    } else { /* an arena's range: the physical page behind each of its pages */
        CPOOL__TEXT_LIT(t, ",\"pages\":[");
        bool first = true;
        for (size_t i = 0; i < sn->page_count; i++) {
            const page_view *pg = &sn->pages[i];
            if (pg->addr < base || pg->addr >= base + size) continue;
            cpool__text_put(t, first ? "{\"offset\":" : ",{\"offset\":");
            cpool__text_u64(t, pg->addr - base);
            KEY_U64(t, ",\"physical\":", pg->physical);
            CPOOL__TEXT_LIT(t, ",\"own\":");
            cpool__text_bool(t, pg->own);
            CPOOL__TEXT_LIT(t, ",\"packed\":");
            cpool__text_bool(t, pg->packed);
            CPOOL__TEXT_LIT(t, "}");
            first = false;
        }
        if (first) sn->plain_bytes += size; /* plain memory of the arena's own */
        CPOOL__TEXT_LIT(t, "]");
    }
    CPOOL__TEXT_LIT(t, ",\"blocks\":[");
    sn->first_segment = false;
    sn->first_block = true;
    sn->segment_base = base;
}

/* The front's view of the live block at addr, or NULL (a binary search of
 * its few blocks, sorted by address). */
static const cpool__front_view *front_block(const snapshot *sn, uintptr_t addr) {
    const cpool__pool_view *v = sn->v;
    size_t lo = 0, hi = v->front_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (v->front[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < v->front_count && v->front[lo].addr == addr ? &v->front[lo] : NULL;
}

/* The arena whose capture handed out the block (NULL: none, or an eager
 * block). */
static const cpool__arena *block_arena(const snapshot *sn, const cpool__block_view *b) {
    if (!b->graph) return NULL;
    if (!sn->kind) return sn->arena;
    if (!strcmp(sn->kind, "packed") && b->live) return cpool__graph_pages_packed_owner(sn->v->pages, b->addr);
    return NULL;
}

/* The stream a block's key names, as a snapshot writes it: a stream's id,
 * or a branch's stream; a capture's own key (its packed blocks) names
 * none (0). Ids stay below 2^53, where JSON readers keep numbers exact. */
static uint64_t stream_named(uint64_t key) {
    if (key & CPOOL__KEY_GRAPH_BIT) return 0;
    return key & ~CPOOL__KEY_BRANCH_BIT;
}

static void on_block(void *ctx, const cpool__block_view *b) {
    snapshot *sn = ctx;
    cpool__text *t = &sn->t;
    size_t requested = b->live ? b->requested : 0;
    uint64_t stream = stream_named(b->stream);
    bool live = b->live;
    bool eager = sn->kind && !strcmp(sn->kind, "eager");
    const cpool__front_view *fb = eager && b->live && !b->graph ? front_block(sn, b->addr) : NULL;
    if (fb) { /* the callers' view of a block the front knows */
        live = fb->out;
        requested = fb->requested;
        stream = fb->stream;
    }
    /* Freed by a capture that defers the free: the callers' no more. */
    bool deferred = b->graph && live && cpool__graph_pages_deferred(sn->v->pages, (const void *)b->addr);
    if (deferred) requested = 0;
    /* Graph memory by where it is: the packed region's and the arenas'
     * blocks serve captures only, whatever the allocator's set says. */
    bool graph_memory = b->graph || !eager;
    const char *state = graph_memory ? (live ? "graph_live" : "graph_free") : (live ? "live" : "free");
    if (sn->first_block)
        KEY_U64(t, "\n {\"offset\":", b->addr - sn->segment_base);
    else
        KEY_U64(t, ",\n {\"offset\":", b->addr - sn->segment_base);
    KEY_U64(t, ",\"size\":", b->size);
    KEY_U64(t, ",\"requested\":", requested);
    CPOOL__TEXT_LIT(t, ",\"state\":\"");
    cpool__text_put(t, state);
    KEY_U64(t, "\",\"stream\":", stream);
    /* A graph block live after its capture ended is an output: of the
     * graph that holds its arena, or of one already released. A block of
     * a capture still under way is none yet, cpool_alloc_output's too. */
    const cpool__arena *ar = block_arena(sn, b);
    bool under_way = ar && cpool__arena_in_use(ar) && !cpool__arena_graph(ar);
    bool output = !deferred && live && !under_way && (b->output || ar);
    uint64_t graph = ar ? cpool__arena_graph(ar) : 0;
    if (graph)
        KEY_U64(t, ",\"graphs\":[", graph);
    else
        CPOOL__TEXT_LIT(t, ",\"graphs\":[");
    CPOOL__TEXT_LIT(t, "],\"output\":");
    cpool__text_bool(t, output);
    CPOOL__TEXT_LIT(t, ",\"param\":");
    cpool__text_bool(t, b->pinned);
    CPOOL__TEXT_LIT(t, "}");
    sn->first_block = false;
}

/* Room for one more item in *items (count used of *cap); false if there
 * is no host memory for it. */
static bool room_for_one(void **items, size_t *cap, size_t count, size_t size) {
    if (count < *cap) return true;
    size_t grown_cap = *cap ? 2 * *cap : 64;
    void *grown = realloc(*items, grown_cap * size);
    if (!grown) return false;
    *items = grown;
    *cap = grown_cap;
    return true;
}

static void on_page(void *ctx, uintptr_t addr, uint64_t physical, bool own, bool packed) {
    snapshot *sn = ctx;
    if (!room_for_one((void **)&sn->pages, &sn->page_cap, sn->page_count, sizeof *sn->pages) ||
        !room_for_one((void **)&sn->ids, &sn->id_cap, sn->id_count, sizeof *sn->ids)) {
        sn->failed = true;
        return;
    }
    sn->pages[sn->page_count++] = (page_view){addr, physical, own, packed};
    if (packed) return; /* a packed segment's page: counted there */
    sn->ids[sn->id_count++] = physical;
    if (own) sn->own_pages++;
}

static int compare_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* What holds the arena: a graph, a capture, outputs of a graph let go, or
 * nothing (idle: its pages stay mapped for the next capture). */
static const char *arena_state(const cpool__arena *ar) {
    cpool__arena_stats as;
    if (cpool__arena_graph(ar)) return "graph";
    if (cpool__arena_in_use(ar)) return "capture";
    cpool__arena_get_stats(ar, &as);
    return as.live_blocks ? "outputs" : "idle";
}

/* "arenas": every arena's ranges, the pages behind them and their blocks;
 * then "physical": the distinct pages they map. */
static void put_arenas(snapshot *sn) {
    cpool__text *t = &sn->t;
    const cpool__graph_pages *gp = sn->v->pages;
    CPOOL__TEXT_LIT(t, ",\n\"arenas\":[");
    bool first = true;
    for (const cpool__arena *ar = cpool__graph_pages_each(gp, NULL); ar; ar = cpool__graph_pages_each(gp, ar)) {
        if (first)
            KEY_U64(t, "\n{\"id\":", cpool__arena_id(ar));
        else
            KEY_U64(t, ",\n{\"id\":", cpool__arena_id(ar));
        KEY_U64(t, ",\"graph\":", cpool__arena_graph(ar));
        CPOOL__TEXT_LIT(t, ",\"state\":\"");
        cpool__text_put(t, arena_state(ar));
        CPOOL__TEXT_LIT(t, "\",\"ranges\":[");
        sn->kind = NULL;
        sn->arena = ar;
        sn->page_count = 0;
        cpool__arena_walk_pages(ar, &(cpool__page_walker){.ctx = sn, .page = on_page});
        sn->first_segment = true;
        cpool__arena_walk(ar, &(cpool__walker){sn, on_segment, on_block});
        cpool__text_put(t, sn->first_segment ? "]}" : "]}]}");
        first = false;
    }
    /* Own pages never repeat (their ids are apart from the shared ones);
     * a shared page repeats once per arena that maps it. */
    size_t distinct = 0;
    if (sn->id_count) qsort(sn->ids, sn->id_count, sizeof *sn->ids, compare_u64);
    for (size_t i = 0; i < sn->id_count; i++)
        if (!i || sn->ids[i] != sn->ids[i - 1]) distinct++;
    KEY_U64(t, "],\n\"physical\":{\"page_size\":", CPOOL__PAGE);
    KEY_U64(t, ",\"shared_pages\":", distinct - sn->own_pages);
    KEY_U64(t, ",\"own_pages\":", sn->own_pages);
    KEY_U64(t, ",\"plain_bytes\":", sn->plain_bytes);
    KEY_U64(t, ",\"bytes\":", (uint64_t)distinct * CPOOL__PAGE + sn->plain_bytes);
    CPOOL__TEXT_LIT(t, "}");
}

/* The document, under the pool's lock. */
static cpool_status build(void *ctx, const cpool__pool_view *v) {
    snapshot *sn = ctx;
    cpool__text *t = &sn->t;
    sn->v = v;
    CPOOL__TEXT_LIT(t, "{\"version\":2,\"backend\":\"");
    cpool__text_put(t, v->backend);
    /* Where segments grow in place, each of "segments" is a mapped run of
     * a reserved range, not the whole range. */
    cpool__text_put(t, v->alloc->growable ? "\",\"grows_in_place\":true" : "\",\"grows_in_place\":false");
    CPOOL__TEXT_LIT(t, ",\n\"stats\":");
    put_stats(t, &v->stats);
    /* Suspended, the segments and arenas below are what the resume maps
     * back: their sums are these, not the stats' zeros. */
    if (v->suspended) {
        KEY_U64(t, ",\n\"suspended\":{\"reserved_bytes\":", v->resident.reserved_bytes);
        KEY_U64(t, ",\"graph_reserved_bytes\":", v->resident.graph_reserved_bytes);
        KEY_U64(t, ",\"segment_count\":", v->resident.segment_count);
        CPOOL__TEXT_LIT(t, "}");
    } else {
        CPOOL__TEXT_LIT(t, ",\n\"suspended\":false");
    }
    /* The eager allocator's segments, then the packed region's: memory of
     * their own, at addresses of their own. */
    CPOOL__TEXT_LIT(t, ",\n\"segments\":[");
    sn->first_segment = true;
    sn->kind = "eager";
    cpool__allocator_walk(v->alloc, &(cpool__walker){sn, on_segment, on_block});
    if (v->pages->packed) {
        sn->kind = "packed";
        cpool__graph_pages_walk_packed(v->pages, &(cpool__walker){sn, on_segment, on_block});
    }
    cpool__text_put(t, sn->first_segment ? "]" : "]}]");
    put_arenas(sn);
    CPOOL__TEXT_LIT(t, ",\n\"graphs\":[");
    bool first = true;
    for (const cpool__arena *ar = cpool__graph_pages_each(v->pages, NULL); ar; ar = cpool__graph_pages_each(v->pages, ar)) {
        if (!cpool__arena_graph(ar)) continue; /* a capture's, not a graph's yet */
        cpool__arena_stats as;
        cpool__arena_get_stats(ar, &as);
        if (first)
            KEY_U64(t, "\n{\"id\":", cpool__arena_graph(ar));
        else
            KEY_U64(t, ",\n{\"id\":", cpool__arena_graph(ar));
        KEY_U64(t, ",\"write_bytes\":", as.mapped_bytes);
        KEY_U64(t, ",\"shared_write_bytes\":", as.shared_bytes);
        KEY_U64(t, ",\"own_bytes\":", as.own_bytes);
        KEY_U64(t, ",\"live_output_bytes\":", as.live_bytes);
        KEY_U64(t, ",\"live_outputs\":", as.live_blocks);
        CPOOL__TEXT_LIT(t, "}");
        first = false;
    }
    CPOOL__TEXT_LIT(t, "]}\n");
    return t->failed || sn->failed ? cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory building a snapshot")
                                   : CPOOL_OK;
}

static cpool_status io_failure(const char *path, const char *what, int err) {
    return cpool__fail(CPOOL_ERR_IO, "cannot %s %s: %s", what, path, strerror(err));
}

cpool_status cpool_pool_write_snapshot(const cpool_pool *handle, const char *path) {
    const cpool_pool *pool;
    CPOOL__RESOLVE(pool, handle, CPOOL__HANDLE_POOL, "cpool_pool_write_snapshot", "pool");
    if (!path) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_pool_write_snapshot: path is NULL");
    /* Opened first: a path that cannot be written costs the pool nothing.
     * Not truncated at open but after the write: writing over the pages of
     * an older snapshot at the same path is much cheaper than freeing them
     * and taking new ones (a snapshot is MiBs). */
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return cpool__fail_in("cpool_pool_write_snapshot", io_failure(path, "open", errno));
    snapshot sn = {.t = {0}};
    cpool_status st = cpool__pool_inspect(pool, build, &sn);
    /* A pipe whose reader is gone is CPOOL_ERR_IO, not SIGPIPE (io.h). */
    int err = st == CPOOL_OK ? cpool__write_all(fd, sn.t.data, sn.t.len) : 0;
    if (err) st = io_failure(path, "write", err);
    /* Only a regular file is cut to length, or removed when the write
     * failed (never a device such as /dev/null, or a pipe). */
    struct stat info;
    bool regular = fstat(fd, &info) == 0 && S_ISREG(info.st_mode);
    if (st == CPOOL_OK && regular && ftruncate(fd, (off_t)sn.t.len) != 0) st = io_failure(path, "write", errno);
    if (close(fd) != 0 && st == CPOOL_OK) st = io_failure(path, "write", errno);
    if (st != CPOOL_OK && regular) remove(path);
    cpool__text_free(&sn.t);
    free(sn.pages);
    free(sn.ids);
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_pool_write_snapshot", st);
}
