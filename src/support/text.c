/*
 * The text buffer (text.h).
 */
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "text.h"

/* Room for `more` bytes, or the buffer is failed. */
static bool room(cpool__text *t, size_t more) {
    if (t->failed) return false;
    if (t->len + more <= t->cap) return true;
    size_t cap = t->cap ? 2 * t->cap : 4096;
    while (cap < t->len + more) cap *= 2;
    char *data = cpool__realloc(t->data, cap);
    if (!data) {
        t->failed = true;
        return false;
    }
    t->data = data;
    t->cap = cap;
    return true;
}

void cpool__text_put(cpool__text *t, const char *s) {
    size_t n = strlen(s);
    if (!room(t, n)) return;
    memcpy(t->data + t->len, s, n);
    t->len += n;
}

void cpool__text_u64(cpool__text *t, uint64_t v) {
    char digits[20];
    size_t n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    if (!room(t, n)) return;
    while (n) t->data[t->len++] = digits[--n];
}

void cpool__text_bool(cpool__text *t, bool v) { cpool__text_put(t, v ? "true" : "false"); }

void cpool__text_free(cpool__text *t) {
    free(t->data);
    *t = (cpool__text){0};
}
