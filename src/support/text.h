/*
 * A growing text buffer for what the library writes out (snapshots): plain
 * appends of strings and numbers, without printf, so that writing a large
 * document costs little per item. A failed growth marks the buffer failed;
 * later appends do nothing.
 */
#ifndef CPOOL_TEXT_H
#define CPOOL_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cpool__text {
    char *data;
    size_t len, cap;
    bool failed; /* out of host memory: the text is incomplete */
} cpool__text;

void cpool__text_put(cpool__text *t, const char *s);
void cpool__text_u64(cpool__text *t, uint64_t v);
void cpool__text_bool(cpool__text *t, bool v);
void cpool__text_free(cpool__text *t);

#endif /* CPOOL_TEXT_H */
