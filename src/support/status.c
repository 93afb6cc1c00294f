/*
 * Status codes and the per-thread last-error text.
 *
 * The codes and their strings come from one X-macro table, so they cannot
 * drift apart. Each thread keeps the text of its last failure in a
 * thread-local buffer; cpool__fail writes it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "status.h"

#define CPOOL_STATUS_TABLE(X)                                                                      \
    X(CPOOL_OK, "ok")                                                                              \
    X(CPOOL_ERR_INVALID_ARGUMENT, "invalid argument")                                              \
    X(CPOOL_ERR_OUT_OF_MEMORY, "out of memory")                                                    \
    X(CPOOL_ERR_SEALED, "pool is sealed")                                                          \
    X(CPOOL_ERR_NOT_CAPTURING, "stream is not capturing")                                          \
    X(CPOOL_ERR_ALREADY_CAPTURING, "stream is already capturing")                                  \
    X(CPOOL_ERR_CAPTURE_INVALIDATED, "capture was invalidated")                                    \
    X(CPOOL_ERR_STALE_GRAPH, "graph is stale: its pool's buffers were cleared")                    \
    X(CPOOL_ERR_NO_DEVICE, "no such backend or device")                                            \
    X(CPOOL_ERR_BACKEND, "backend error")                                                          \
    X(CPOOL_ERR_UNSUPPORTED, "not supported on this backend")                                      \
    X(CPOOL_ERR_NOT_READY, "the work before the event has not finished")                          \
    X(CPOOL_ERR_OUTPUT_LIVE, "the replay would overwrite a live output of another graph")         \
    X(CPOOL_ERR_IO, "a file could not be written")                                                  \
    X(CPOOL_ERR_SUSPENDED, "the pool is suspended: its memory is given back until it resumes")

const char *cpool_status_string(cpool_status s) {
    switch (s) {
#define CPOOL_STATUS_CASE(code, text)                                                              \
    case code:                                                                                     \
        return text;
        CPOOL_STATUS_TABLE(CPOOL_STATUS_CASE)
#undef CPOOL_STATUS_CASE
    }
    return "unknown status";
}

#define CPOOL_STR_(x) #x
#define CPOOL_STR(x) CPOOL_STR_(x)

const char *cpool_version_string(void) {
    return CPOOL_STR(CPOOL_VERSION_MAJOR) "." CPOOL_STR(CPOOL_VERSION_MINOR) "." CPOOL_STR(CPOOL_VERSION_PATCH);
}

unsigned cpool_version(void) { return CPOOL_VERSION_NUMBER; }

static _Thread_local char last_error[sizeof(cpool__error_mark)];

const char *cpool_last_error(void) { return last_error; }

cpool_status cpool__fail(cpool_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return st;
}

cpool_status cpool__fail_in(const char *fn, cpool_status st) {
    size_t n = strlen(fn);
    if (strncmp(last_error, fn, n) == 0 && last_error[n] == ':') return st; /* named already */
    char text[sizeof last_error];
    memcpy(text, last_error, sizeof text);
    return cpool__fail(st, "%s: %s", fn, text);
}

/* Copies only the text: usually there is none. */
void cpool__error_save(cpool__error_mark *m) { memcpy(m->text, last_error, strlen(last_error) + 1); }

void cpool__error_restore(const cpool__error_mark *m) { memcpy(last_error, m->text, strlen(m->text) + 1); }
