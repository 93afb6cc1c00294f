/*
 * The host backend's captures and the graphs made of them (host_backend.h
 * maps the types).
 *
 * - A capture is a graph of nodes under construction, shared by the
 *   streams taking part in it: each appends its work as a node that waits
 *   for its own last nodes and the records it waited for (streams.c).
 * - Ending it on its origin checks that every fork was joined back and
 *   freezes the nodes into a graph: an immutable, reference-counted array,
 *   with, for a graph of several streams, who waits for each node (the
 *   replay's, replay.c).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "host_backend.h"
#include "lock.h"
#include "status.h"

/* ---- graphs -------------------------------------------------------------- */

void cpool__host_graph_release(cpool__bgraph *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    for (size_t i = 0; i < g->count; i++)
        if (g->nodes[i].op.kind == OP_GRAPH) cpool__host_graph_release(g->nodes[i].op.graph);
    free(g->deps);
    free(g->dependents_first);
    free(g->dependents);
    free(g);
}

/* ---- node sets ----------------------------------------------------------- */

static bool set_add(node_set *set, size_t node) {
    for (size_t i = 0; i < set->count; i++)
        if (set->nodes[i] == node) return true;
    if (!cpool__grow((void **)&set->nodes, &set->cap, sizeof *set->nodes, set->count + 1, 4)) return false;
    set->nodes[set->count++] = node;
    return true;
}

bool cpool__host_set_add_all(node_set *set, const node_set *from) {
    for (size_t i = 0; i < from->count; i++)
        if (!set_add(set, from->nodes[i])) return false;
    return true;
}

void cpool__host_set_free(node_set *set) {
    free(set->nodes);
    *set = (node_set){0};
}

/* Drops a capture's nodes (a graph made from them took them already, or
 * they are discarded). */
static void capture_drop_nodes(host_capture *c) {
    for (size_t i = 0; i < c->count; i++)
        if (c->nodes[i].op.kind == OP_GRAPH) cpool__host_graph_release(c->nodes[i].op.graph);
    free(c->nodes);
    free(c->deps);
    c->nodes = NULL;
    c->deps = NULL;
    c->count = c->cap = c->dep_count = c->dep_cap = 0;
}

void cpool__host_capture_release(host_capture *c) {
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1) return;
    capture_drop_nodes(c);
    for (size_t i = 0; i < c->member_count; i++) cpool__host_set_free(&c->members[i].tail);
    free(c->members);
    cpool__mutex_destroy(&c->mu);
    free(c);
}

/* ---- a capture's nodes, and the streams in it ---------------------------- */

/* Appends op to c as a node of member m, waiting for m's last nodes, which
 * it becomes. Under c->mu. */
cpool_status cpool__host_capture_append(host_capture *c, size_t m, const host_op *op) {
    node_set *tail = &c->members[m].tail;
    bool ok = cpool__grow((void **)&c->nodes, &c->cap, sizeof *c->nodes, c->count + 1, 4) &&
              cpool__grow((void **)&c->deps, &c->dep_cap, sizeof *c->deps, c->dep_count + tail->count, 4) &&
              cpool__grow((void **)&tail->nodes, &tail->cap, sizeof *tail->nodes, 1, 4);
    if (!ok) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory recording captured work");
    c->nodes[c->count] = (host_node){.op = *op, .dep_first = c->dep_count, .dep_count = tail->count};
    if (tail->count) memcpy(c->deps + c->dep_count, tail->nodes, tail->count * sizeof *c->deps);
    c->dep_count += tail->count;
    tail->nodes[0] = c->count++;
    tail->count = 1;
    return CPOOL_OK;
}

/* The capture s takes part in, with c->mu held, or NULL. A capture that
 * ended on its origin is left here, lazily: each stream touches only
 * itself, so a fork destroyed on another thread is never touched. Under
 * s->q->mu. */
host_capture *cpool__host_capture_of(cpool__bstream *s) {
    host_capture *c = s->capture;
    if (!c) return NULL;
    cpool__mutex_lock(&c->mu);
    if (!c->ended) return c;
    cpool__mutex_unlock(&c->mu);
    s->capture = NULL;
    cpool__host_capture_release(c);
    return NULL;
}

/* Whether s takes part in a capture now. */
bool cpool__host_captures(cpool__bstream *s) {
    cpool__mutex_lock(&s->q->mu);
    host_capture *c = cpool__host_capture_of(s);
    if (c) cpool__mutex_unlock(&c->mu);
    cpool__mutex_unlock(&s->q->mu);
    return c != NULL;
}

/* s leaves its capture: from its origin, the capture ends (its work is
 * discarded unless *nodes_out takes it); from a fork, it is invalidated. */
void cpool__host_leave_capture(cpool__bstream *s) {
    cpool__mutex_lock(&s->q->mu);
    host_capture *c = cpool__host_capture_of(s);
    if (c) {
        if (s->member == 0)
            c->ended = true;
        else
            atomic_store(&c->invalidated, true);
        c->members[s->member].s = NULL;
        cpool__mutex_unlock(&c->mu);
        s->capture = NULL;
    }
    cpool__mutex_unlock(&s->q->mu);
    cpool__host_capture_release(c);
}

/* ---- capture mode -------------------------------------------------------- */

/* Host captures count no call against them: nothing to relax. */
cpool_status cpool__host_call_relaxed(cpool__bdevice *dev, cpool_status (*fn)(void *arg), void *arg) {
    CPOOL_UNUSED(dev);
    return fn(arg);
}

/* ---- ending a capture, and graphs ---------------------------------------- */

/* A host graph is launchable as soon as it is recorded. */
cpool_status cpool__host_graph_instantiate(cpool__bgraph *g) {
    CPOOL_UNUSED(g);
    return CPOOL_OK;
}

/* CPOOL_OK when every node is an ancestor of the origin's last nodes (or
 * one of them): else a fork's work was not joined back. One stream's nodes
 * are a chain that ends there. */
static cpool_status check_joined(const host_capture *c) {
    if (c->member_count == 1 || !c->count) return CPOOL_OK;
    const node_set *tail = &c->members[0].tail;
    bool *seen = cpool__calloc(c->count, sizeof *seen);
    size_t *stack = cpool__malloc((c->dep_count + tail->count + 1) * sizeof *stack);
    if (!seen || !stack) {
        free(seen);
        free(stack);
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory ending a capture");
    }
    size_t top = 0, reached = 0;
    for (size_t i = 0; i < tail->count; i++) stack[top++] = tail->nodes[i];
    while (top) {
        size_t n = stack[--top];
        if (seen[n]) continue;
        seen[n] = true;
        reached++;
        for (size_t k = 0; k < c->nodes[n].dep_count; k++) stack[top++] = c->deps[c->nodes[n].dep_first + k];
    }
    free(seen);
    free(stack);
    if (reached == c->count) return CPOOL_OK;
    return cpool__fail(CPOOL_ERR_CAPTURE_INVALIDATED,
                       "a stream forked into the capture was not joined back to the stream it began on; the capture "
                       "is invalidated and its work discarded");
}

/* The graph of an ended capture's nodes, which it takes (c keeps none). */
static cpool_status graph_from(host_capture *c, cpool__bgraph **out) {
    cpool__bgraph *g = cpool__calloc(1, sizeof *g + c->count * sizeof(host_node));
    unsigned branches = c->member_count > 64 ? 64 : (unsigned)c->member_count;
    size_t *first = branches > 1 ? cpool__calloc(c->count + 1, sizeof *first) : NULL;
    size_t *dependents = branches > 1 ? cpool__malloc((c->dep_count + 1) * sizeof *dependents) : NULL;
    if (!g || (branches > 1 && (!first || !dependents))) {
        free(g);
        free(first);
        free(dependents);
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory instantiating a graph");
    }
    atomic_init(&g->refs, 1);
    g->count = c->count;
    g->branches = branches;
    if (c->count) memcpy(g->nodes, c->nodes, c->count * sizeof(host_node));
    g->deps = c->deps;
    c->deps = NULL;
    c->count = c->dep_count = 0; /* the graph holds the nodes' references now */
    if (branches > 1) { /* who waits for each node, for the replay */
        for (size_t i = 0; i < g->count; i++)
            for (size_t k = 0; k < g->nodes[i].dep_count; k++) first[g->deps[g->nodes[i].dep_first + k] + 1]++;
        for (size_t i = 0; i < g->count; i++) first[i + 1] += first[i];
        size_t *fill = cpool__malloc((g->count + 1) * sizeof *fill);
        if (!fill) {
            g->branches = 1; /* a replay in order keeps every edge too */
            free(first);
            free(dependents);
        } else {
            memcpy(fill, first, (g->count + 1) * sizeof *fill);
            for (size_t i = 0; i < g->count; i++)
                for (size_t k = 0; k < g->nodes[i].dep_count; k++) dependents[fill[g->deps[g->nodes[i].dep_first + k]]++] = i;
            free(fill);
            g->dependents_first = first;
            g->dependents = dependents;
        }
    }
    *out = g;
    return CPOOL_OK;
}

cpool_status cpool__host_capture_end(cpool__bstream *s, bool instantiate, cpool__bgraph **out) {
    CPOOL_UNUSED(instantiate);
    cpool__mutex_lock(&s->q->mu);
    host_capture *c = cpool__host_capture_of(s);
    if (!c) {
        cpool__mutex_unlock(&s->q->mu);
        return cpool__fail(CPOOL_ERR_NOT_CAPTURING, "the stream is not capturing");
    }
    if (s->member != 0) {
        cpool__mutex_unlock(&c->mu);
        cpool__mutex_unlock(&s->q->mu);
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "the stream joined a capture begun on another stream: end it there");
    }
    /* From here on no stream of the capture adds to it, and each leaves it
     * when it next looks (cpool__host_capture_of). */
    c->ended = true;
    c->members[0].s = NULL;
    s->capture = NULL;
    cpool_status st = CPOOL_OK;
    if (atomic_load(&c->invalidated))
        st = cpool__fail(CPOOL_ERR_CAPTURE_INVALIDATED,
                         "the capture was invalidated by a forbidden call; its work is discarded");
    else
        st = check_joined(c);
    if (st == CPOOL_OK) st = graph_from(c, out);
    capture_drop_nodes(c); /* events recorded in it keep only their marks */
    cpool__mutex_unlock(&c->mu);
    cpool__mutex_unlock(&s->q->mu);
    cpool__host_capture_release(c);
    return st;
}

cpool_status cpool__host_capture_status(cpool__bstream *s, cpool_capture_state *out) {
    cpool__mutex_lock(&s->q->mu);
    host_capture *c = cpool__host_capture_of(s);
    *out = !c ? CPOOL_CAPTURE_NONE : atomic_load(&c->invalidated) ? CPOOL_CAPTURE_INVALIDATED : CPOOL_CAPTURE_ACTIVE;
    if (c) cpool__mutex_unlock(&c->mu);
    cpool__mutex_unlock(&s->q->mu);
    return CPOOL_OK;
}

cpool_status cpool__host_graph_upload(cpool__bgraph *g, cpool__bstream *s) {
    CPOOL_UNUSED(g);
    CPOOL_UNUSED(s);
    return CPOOL_OK; /* nothing to move: host memory is the device's */
}

void cpool__host_graph_destroy(cpool__bgraph *g) { cpool__host_graph_release(g); }

void *cpool__host_graph_native(const cpool__bgraph *g) {
    CPOOL_UNUSED(g);
    return NULL;
}

/* Host graphs are immutable arrays shared with launches in flight: an
 * update always swaps in the new graph. */
bool cpool__host_graph_update_in_place(cpool__bgraph *g, cpool__bgraph *fresh) {
    CPOOL_UNUSED(g);
    CPOOL_UNUSED(fresh);
    return false;
}

/* One node per operation, with an edge from each node it waits for. */
static void dot_ops(FILE *f, const cpool__bgraph *g) {
    for (size_t i = 0; i < g->count; i++) {
        const host_op *op = &g->nodes[i].op;
        switch (op->kind) {
        case OP_HOST_FN:
            fprintf(f, "  n%zu [shape=box label=\"host fn %p\\narg %p\"];\n", i, (void *)(uintptr_t)op->fn, op->arg);
            break;
        case OP_COPY:
            fprintf(f, "  n%zu [shape=box label=\"copy %zu bytes\\n%p -> %p\"];\n", i, op->bytes, op->src, op->dst);
            break;
        case OP_SET:
            fprintf(f, "  n%zu [shape=box label=\"memset %zu bytes = %d\\n%p\"];\n", i, op->bytes, op->value, op->dst);
            break;
        case OP_GRAPH:
            fprintf(f, "  n%zu [shape=ellipse label=\"child graph (%zu ops)\"];\n", i, op->graph->count);
            break;
        case OP_STAMP:
        case OP_WAIT: /* never captured */
            break;
        }
        for (size_t k = 0; k < g->nodes[i].dep_count; k++)
            fprintf(f, "  n%zu -> n%zu;\n", g->deps[g->nodes[i].dep_first + k], i);
    }
}

cpool_status cpool__host_graph_dump_dot(const cpool__bgraph *g, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return cpool__fail(CPOOL_ERR_IO, "cannot open %s for writing: %s", path, strerror(errno));
    fprintf(f, "digraph capturepool_host_graph {\n  rankdir=TB;\n  label=\"host graph, %zu operations, %u streams\";\n", g->count, g->branches);
    dot_ops(f, g);
    fprintf(f, "}\n");
    if (fclose(f) != 0) return cpool__fail(CPOOL_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return CPOOL_OK;
}
