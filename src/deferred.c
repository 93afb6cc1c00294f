/*
 * The library's own thread, for teardown that must not run where it was
 * triggered.
 *
 * When the last reference to a pool goes on a thread that runs stream work
 * (a host-backend worker, a CUDA host callback), waiting there for stream
 * work could wait for itself. Such teardown is queued here instead and run
 * by one thread, in order; it is started when the first pool is made, where
 * a failure to start it can still be reported. cpool_wait_deferred() waits until
 * the queue is empty and nothing is running. The thread is detached and never
 * joined: at process exit it is simply gone, so no CUDA call runs then.
 */
#include <errno.h>

#include "internal.h"

static pthread_mutex_t queue_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queue_cv = PTHREAD_COND_INITIALIZER; /* work queued */
static pthread_cond_t idle_cv = PTHREAD_COND_INITIALIZER;  /* queue drained */
static cpool__deferred *head, *tail;
static bool busy; /* a task is queued or running */
static bool thread_started;

static _Thread_local bool stream_thread;

bool cpool__on_stream_thread(void) { return stream_thread; }
void cpool__set_stream_thread(bool on) { stream_thread = on; }

static void *deferred_main(void *unused) {
    CPOOL_UNUSED(unused);
    pthread_mutex_lock(&queue_mu);
    for (;;) {
        while (!head) {
            busy = false;
            pthread_cond_broadcast(&idle_cv);
            pthread_cond_wait(&queue_cv, &queue_mu);
        }
        cpool__deferred *t = head;
        head = t->next;
        if (!head) tail = NULL;
        pthread_mutex_unlock(&queue_mu);
        t->run(t); /* may free t */
        pthread_mutex_lock(&queue_mu);
    }
    return NULL;
}

cpool_status cpool__deferred_start(void) {
    cpool_status st = CPOOL_OK;
    pthread_mutex_lock(&queue_mu);
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
    pthread_mutex_unlock(&queue_mu);
    return st;
}

void cpool__defer(cpool__deferred *task) {
    task->next = NULL;
    pthread_mutex_lock(&queue_mu);
    if (tail)
        tail->next = task;
    else
        head = task;
    tail = task;
    busy = true;
    pthread_cond_signal(&queue_cv);
    pthread_mutex_unlock(&queue_mu);
}

void cpool_wait_deferred(void) {
    pthread_mutex_lock(&queue_mu);
    while (thread_started && busy) pthread_cond_wait(&idle_cv, &queue_mu);
    pthread_mutex_unlock(&queue_mu);
}
