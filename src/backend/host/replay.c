/*
 * Running the host backend's stream work: one operation (a task of a
 * stream's queue, or a node of a graph), and the replay of a graph. A graph
 * of one stream runs its nodes in order; one of several runs them on one
 * worker per stream of its capture, each node once its dependencies ran.
 * Waiting for a position in a queue is here too: an operation (OP_WAIT),
 * and what a stream's or an event's synchronize does.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fault.h"
#include "host_backend.h"
#include "lock.h"
#include "thread.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void run_graph(const cpool__bgraph *g);

void cpool__host_run_op(const host_op *op) {
    switch (op->kind) {
    case OP_HOST_FN:
        op->fn(op->arg);
        break;
    case OP_COPY:
        memmove(op->dst, op->src, op->bytes);
        break;
    case OP_SET:
        memset(op->dst, op->value, op->bytes);
        break;
    case OP_GRAPH:
        run_graph(op->graph);
        break;
    case OP_STAMP:
        op->stamp->ms = now_ms();
        atomic_store(&op->stamp->set, true);
        break;
    case OP_WAIT:
        cpool__host_queue_wait(op->wait_q, op->position);
        break;
    }
}

/* ---- replaying a graph of several streams -------------------------------- */

/* One replay: nodes become ready as their dependencies finish; each worker
 * runs ready nodes until all have run. */
typedef struct replay {
    const cpool__bgraph *g;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t *pending; /* dependencies not yet run, per node */
    size_t *ready;   /* a stack of nodes ready to run */
    size_t ready_count, finished;
} replay;

static void *replay_worker(void *arg) {
    replay *r = arg;
    bool was = cpool__on_stream_thread();
    cpool__set_stream_thread(true); /* it runs stream work, as a queue's worker */
    pthread_mutex_lock(&r->mu);
    while (r->finished < r->g->count) {
        if (!r->ready_count) {
            pthread_cond_wait(&r->cv, &r->mu);
            continue;
        }
        size_t i = r->ready[--r->ready_count];
        pthread_mutex_unlock(&r->mu);
        cpool__host_run_op(&r->g->nodes[i].op);
        pthread_mutex_lock(&r->mu);
        r->finished++;
        for (size_t k = r->g->dependents_first[i]; k < r->g->dependents_first[i + 1]; k++) {
            size_t d = r->g->dependents[k];
            if (--r->pending[d] == 0) r->ready[r->ready_count++] = d;
        }
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    cpool__set_stream_thread(was);
    return NULL;
}

/* Runs g's nodes: in order for one stream; otherwise on one worker per
 * stream of its capture (this thread and branches - 1 more), each node
 * once its dependencies ran. Node order is an order the dependencies
 * allow, so where no worker or memory is to be had it runs in order. */
static void run_graph(const cpool__bgraph *g) {
    replay r = {.g = g};
    if (g->branches > 1) {
        r.pending = cpool__malloc(g->count * sizeof *r.pending);
        r.ready = cpool__malloc(g->count * sizeof *r.ready);
    }
    if (!r.pending || !r.ready) {
        free(r.pending);
        free(r.ready);
        for (size_t i = 0; i < g->count; i++) cpool__host_run_op(&g->nodes[i].op);
        return;
    }
    for (size_t i = g->count; i-- > 0;) {
        r.pending[i] = g->nodes[i].dep_count;
        if (!r.pending[i]) r.ready[r.ready_count++] = i;
    }
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    enum { MAX_WORKERS = 64 };
    pthread_t workers[MAX_WORKERS];
    unsigned started = 0;
    while (started + 1 < g->branches && started < MAX_WORKERS &&
           !cpool__fault_hit() && pthread_create(&workers[started], NULL, replay_worker, &r) == 0)
        started++;
    replay_worker(&r); /* fewer workers than asked only run it slower */
    for (unsigned i = 0; i < started; i++) pthread_join(workers[i], NULL);
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
    free(r.pending);
    free(r.ready);
}

void cpool__host_queue_wait(host_queue *q, uint64_t position) {
    cpool__mutex_lock(&q->mu);
    while (atomic_load(&q->completed) < position) cpool__cond_wait(&q->done_cv, &q->mu);
    cpool__mutex_unlock(&q->mu);
}
