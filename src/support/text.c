/*
 * The text buffer (text.h).
 */
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "text.h"

bool cpool__text_grow(cpool__text *t, size_t more) {
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

void cpool__text_put(cpool__text *t, const char *s) { cpool__text_put_n(t, s, strlen(s)); }

void cpool__text_u64(cpool__text *t, uint64_t v) {
    /* Two digits a step: numbers are most of a snapshot. */
    static const char pairs[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                                "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                                "8081828384858687888990919293949596979899";
    char digits[20];
    size_t n = sizeof digits;
    while (v >= 100) {
        unsigned d = (unsigned)(v % 100) * 2;
        v /= 100;
        digits[--n] = pairs[d + 1];
        digits[--n] = pairs[d];
    }
    if (v >= 10) {
        digits[--n] = pairs[v * 2 + 1];
        digits[--n] = pairs[v * 2];
    } else {
        digits[--n] = (char)('0' + v);
    }
    cpool__text_put_n(t, digits + n, sizeof digits - n);
}

void cpool__text_bool(cpool__text *t, bool v) {
    if (v)
        CPOOL__TEXT_LIT(t, "true");
    else
        CPOOL__TEXT_LIT(t, "false");
}

void cpool__text_free(cpool__text *t) {
    free(t->data);
    *t = (cpool__text){0};
}
