/*
 * Errors inside the library: the thread's last error text (status.c).
 */
#ifndef CPOOL_STATUS_H
#define CPOOL_STATUS_H

#include "capturepool.h"

#define CPOOL_UNUSED(x) ((void)(x))

/* Records the thread's last error text and returns st. */
cpool_status cpool__fail(cpool_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefixes the thread's last error text with "fn: " (a public function
 * naming itself before what a lower layer said) and returns st. A text that
 * starts with "fn:" already is left as it is, so a public function may
 * name itself on every failure path without knowing which layer failed. */
cpool_status cpool__fail_in(const char *fn, cpool_status st);

/* A copy of the thread's last error text, so that a call that failed
 * inside but succeeded in the end can leave the text as it found it. */
typedef struct cpool__error_mark {
    char text[512];
} cpool__error_mark;
void cpool__error_save(cpool__error_mark *m);
void cpool__error_restore(const cpool__error_mark *m);

#endif /* CPOOL_STATUS_H */
