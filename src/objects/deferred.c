/*
 * The library's own thread, for teardown that must not run where it was
 * triggered.
 *
 * When the last reference to a pool or graph goes, or a stream is destroyed,
 * on a thread that runs stream work (a host-backend worker, a CUDA host
 * callback), waiting there could wait for itself, and CUDA refuses CUDA calls
 * there. Such teardown is queued here instead and run by one thread, in
 * order, as is the teardown of a pool whose last reference was a graph's
 * (a graph's release never waits for the device). The thread is started
 * when the first pool is made, where a failure to start it can still be
 * reported. cpool_wait_deferred() waits until the queue is empty and nothing
 * is running; called by a task of this thread itself (a drop that a
 * deferred teardown runs), it runs the queued tasks in place instead, as it
 * cannot wait for its own caller. The thread is detached and
 * never joined: at process exit it is simply gone, so no CUDA call runs then.
 */
#include <errno.h>

#include "internal.h"

static cpool__mutex queue_mu = CPOOL__MUTEX_INIT(CPOOL__RANK_DEFERRED);
static pthread_cond_t queue_cv = PTHREAD_COND_INITIALIZER; /* work queued */
static pthread_cond_t idle_cv = PTHREAD_COND_INITIALIZER;  /* queue drained */
static cpool__deferred *head, *tail;
static bool busy; /* a task is queued or running */
static bool thread_started;

static _Thread_local bool library_thread;

bool cpool__on_library_thread(void) { return library_thread; }

/* Under queue_mu: the first queued task, taken off the queue. */
static cpool__deferred *pop(void) {
    cpool__deferred *t = head;
    if (t) {
        head = t->next;
        if (!head) tail = NULL;
    }
    return t;
}

static void *deferred_main(void *unused) {
    CPOOL_UNUSED(unused);
    library_thread = true;
    cpool__mutex_lock(&queue_mu);
    for (;;) {
        while (!head) {
            busy = false;
            pthread_cond_broadcast(&idle_cv);
            cpool__cond_wait(&queue_cv, &queue_mu);
        }
        cpool__deferred *t = pop();
        cpool__mutex_unlock(&queue_mu);
        t->run(t); /* may free t */
        cpool__mutex_lock(&queue_mu);
    }
    return NULL;
}

cpool_status cpool__deferred_start(void) {
    cpool_status st = CPOOL_OK;
    cpool__mutex_lock(&queue_mu);
    if (!thread_started) {
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = cpool__fault_hit() ? EAGAIN : pthread_create(&th, &attr, deferred_main, NULL);
        pthread_attr_destroy(&attr);
        if (rc == 0)
            thread_started = true;
        else
            st = cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "could not start the library's thread (error %d)", rc);
    }
    cpool__mutex_unlock(&queue_mu);
    return st;
}

void cpool__defer(cpool__deferred *task) {
    task->next = NULL;
    cpool__mutex_lock(&queue_mu);
    if (tail)
        tail->next = task;
    else
        head = task;
    tail = task;
    busy = true;
    pthread_cond_signal(&queue_cv);
    cpool__mutex_unlock(&queue_mu);
}

void cpool_wait_deferred(void) {
    if (cpool__refuse_wait_on_stream_thread("cpool_wait_deferred") != CPOOL_OK) return;
    cpool__mutex_lock(&queue_mu);
    if (library_thread) {
        /* A task of this thread waits: run what is queued, in order. */
        for (cpool__deferred *t; (t = pop());) {
            cpool__mutex_unlock(&queue_mu);
            t->run(t);
            cpool__mutex_lock(&queue_mu);
        }
    } else {
        while (thread_started && busy) cpool__cond_wait(&idle_cv, &queue_mu);
    }
    cpool__mutex_unlock(&queue_mu);
}
