/*
 * Status codes and the per-thread last-error text.
 *
 * The codes and their strings come from one X-macro table in the public
 * header, CPOOL_STATUS_MAP, so they cannot drift apart. Each thread keeps the
 * text of its last failure in a thread-local buffer; cpool__fail writes it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "status.h"

/* The values are part of the ABI (API.md): a change to the table that
 * renumbers a status stops the build here. */
_Static_assert(CPOOL_OK == 0 && CPOOL_ERR_INVALID_ARGUMENT == 1 && CPOOL_ERR_OUT_OF_MEMORY == 2 &&
                   CPOOL_ERR_SEALED == 3 && CPOOL_ERR_NOT_CAPTURING == 4 && CPOOL_ERR_ALREADY_CAPTURING == 5 &&
                   CPOOL_ERR_CAPTURE_INVALIDATED == 6 && CPOOL_ERR_STALE_GRAPH == 7 && CPOOL_ERR_NO_DEVICE == 8 &&
                   CPOOL_ERR_BACKEND == 9 && CPOOL_ERR_UNSUPPORTED == 10 && CPOOL_ERR_NOT_READY == 11 &&
                   CPOOL_ERR_OUTPUT_LIVE == 12 && CPOOL_ERR_IO == 13 && CPOOL_ERR_SUSPENDED == 14,
               "status values are part of the ABI: never renumbered");

const char *cpool_status_string(cpool_status s) {
    switch (s) {
#define CPOOL_STATUS_CASE(name, value, text)                                                       \
    case CPOOL_##name:                                                                             \
        return text;
        CPOOL_STATUS_MAP(CPOOL_STATUS_CASE)
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
