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
#include <string.h>

typedef struct cpool__text {
    char *data;
    size_t len, cap;
    bool failed; /* out of host memory: the text is incomplete */
} cpool__text;

/* Makes room for `more` bytes: false (and the buffer failed) without it. */
bool cpool__text_grow(cpool__text *t, size_t more);
static inline bool cpool__text_room(cpool__text *t, size_t more) {
    return !t->failed && (t->len + more <= t->cap || cpool__text_grow(t, more));
}

static inline void cpool__text_put_n(cpool__text *t, const char *s, size_t n) {
    if (!cpool__text_room(t, n)) return;
    memcpy(t->data + t->len, s, n);
    t->len += n;
}
/* A string literal, its length known at compile time. */
#define CPOOL__TEXT_LIT(t, lit) cpool__text_put_n((t), "" lit, sizeof(lit) - 1)

void cpool__text_put(cpool__text *t, const char *s);
void cpool__text_u64(cpool__text *t, uint64_t v);
void cpool__text_bool(cpool__text *t, bool v);
void cpool__text_free(cpool__text *t);

#endif /* CPOOL_TEXT_H */
