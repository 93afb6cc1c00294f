/* A small, complete JSON parser for the tests (RFC 8259: objects, arrays,
 * strings with every escape, numbers, true, false, null), so that what the
 * library writes is read the way any JSON reader would read it. Numbers are
 * kept as doubles and, when they are integers, exactly as uint64. A parse
 * error gives NULL and says where. */
#ifndef CPOOL_TEST_JSON_H
#define CPOOL_TEST_JSON_H

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum json_kind { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_kind;

typedef struct json {
    json_kind kind;
    int boolean;
    double number;
    uint64_t integer; /* the number, when it is a non-negative integer */
    int is_integer;
    char *string;       /* JSON_STRING; a key for an object's member */
    struct json **items; /* array items or object members (each with its key in `key`) */
    size_t count;
    char *key;
} json;

typedef struct json_reader {
    const char *p, *start;
    char error[160];
} json_reader;

static void json_free(json *j) {
    if (!j) return;
    for (size_t i = 0; i < j->count; i++) json_free(j->items[i]);
    free(j->items);
    free(j->string);
    free(j->key);
    free(j);
}

static json *json_fail_(json_reader *r, const char *what) {
    snprintf(r->error, sizeof r->error, "%s at byte %zu", what, (size_t)(r->p - r->start));
    return NULL;
}

static void json_space_(json_reader *r) {
    while (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r') r->p++;
}

static int json_hex4_(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

/* A string at r->p (the opening quote), as UTF-8; NULL on error. */
static char *json_string_(json_reader *r) {
    size_t cap = 16, n = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    r->p++;
    for (;;) {
        unsigned c = (unsigned char)*r->p++;
        if (c == '"') break;
        if (c < 0x20) { free(s); r->p--; json_fail_(r, "control character or end in a string"); return NULL; }
        char buf[4];
        size_t len = 1;
        buf[0] = (char)c;
        if (c == '\\') {
            char e = *r->p++;
            unsigned u;
            switch (e) {
            case '"': case '\\': case '/': buf[0] = e; break;
            case 'b': buf[0] = '\b'; break;
            case 'f': buf[0] = '\f'; break;
            case 'n': buf[0] = '\n'; break;
            case 'r': buf[0] = '\r'; break;
            case 't': buf[0] = '\t'; break;
            case 'u':
                if (!json_hex4_(r->p, &u)) { free(s); json_fail_(r, "bad \\u escape"); return NULL; }
                r->p += 4;
                if (u >= 0xD800 && u <= 0xDBFF) { /* a surrogate pair */
                    unsigned lo;
                    if (r->p[0] != '\\' || r->p[1] != 'u' || !json_hex4_(r->p + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
                        free(s); json_fail_(r, "unpaired surrogate"); return NULL;
                    }
                    r->p += 6;
                    u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                }
                if (u < 0x80) { buf[0] = (char)u; }
                else if (u < 0x800) { buf[0] = (char)(0xC0 | u >> 6); buf[1] = (char)(0x80 | (u & 63)); len = 2; }
                else if (u < 0x10000) { buf[0] = (char)(0xE0 | u >> 12); buf[1] = (char)(0x80 | (u >> 6 & 63)); buf[2] = (char)(0x80 | (u & 63)); len = 3; }
                else { buf[0] = (char)(0xF0 | u >> 18); buf[1] = (char)(0x80 | (u >> 12 & 63)); buf[2] = (char)(0x80 | (u >> 6 & 63)); buf[3] = (char)(0x80 | (u & 63)); len = 4; }
                break;
            default: free(s); json_fail_(r, "bad escape"); return NULL;
            }
        }
        if (n + len + 1 > cap) {
            cap = 2 * (n + len + 1);
            char *grown = realloc(s, cap);
            if (!grown) { free(s); return NULL; }
            s = grown;
        }
        memcpy(s + n, buf, len);
        n += len;
    }
    s[n] = '\0';
    return s;
}

static json *json_value_(json_reader *r, int depth);

static int json_push_(json *j, json *item) {
    json **items = realloc(j->items, (j->count + 1) * sizeof *items);
    if (!items) return 0;
    j->items = items;
    j->items[j->count++] = item;
    return 1;
}

static json *json_value_(json_reader *r, int depth) {
    if (depth > 64) return json_fail_(r, "nesting too deep");
    json_space_(r);
    json *j = calloc(1, sizeof *j);
    if (!j) return json_fail_(r, "out of memory");
    char c = *r->p;
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->kind = c == '{' ? JSON_OBJECT : JSON_ARRAY;
        r->p++;
        json_space_(r);
        if (*r->p == close) { r->p++; return j; }
        for (;;) {
            char *key = NULL;
            if (j->kind == JSON_OBJECT) {
                json_space_(r);
                if (*r->p != '"') { json_free(j); return json_fail_(r, "expected a key"); }
                key = json_string_(r);
                if (!key) { json_free(j); return NULL; }
                json_space_(r);
                if (*r->p++ != ':') { free(key); json_free(j); return json_fail_(r, "expected ':'"); }
            }
            json *item = json_value_(r, depth + 1);
            if (!item) { free(key); json_free(j); return NULL; }
            item->key = key;
            if (!json_push_(j, item)) { json_free(item); json_free(j); return json_fail_(r, "out of memory"); }
            json_space_(r);
            if (*r->p == ',') { r->p++; continue; }
            if (*r->p == close) { r->p++; return j; }
            json_free(j);
            return json_fail_(r, "expected ',' or a close");
        }
    }
    if (c == '"') {
        j->kind = JSON_STRING;
        j->string = json_string_(r);
        if (!j->string) { json_free(j); return NULL; }
        return j;
    }
    if (!strncmp(r->p, "true", 4) || !strncmp(r->p, "false", 5)) {
        j->kind = JSON_BOOL;
        j->boolean = *r->p == 't';
        r->p += j->boolean ? 4 : 5;
        return j;
    }
    if (!strncmp(r->p, "null", 4)) { r->p += 4; return j; }
    if (c == '-' || isdigit((unsigned char)c)) { /* the grammar's number, checked, then read */
        const char *q = r->p;
        int integer = 1;
        if (*q == '-') { q++; integer = 0; }
        if (*q == '0') q++;
        else if (isdigit((unsigned char)*q)) while (isdigit((unsigned char)*q)) q++;
        else { json_free(j); return json_fail_(r, "bad number"); }
        if (*q == '.') { integer = 0; q++; if (!isdigit((unsigned char)*q)) { json_free(j); return json_fail_(r, "bad fraction"); } while (isdigit((unsigned char)*q)) q++; }
        if (*q == 'e' || *q == 'E') { integer = 0; q++; if (*q == '+' || *q == '-') q++; if (!isdigit((unsigned char)*q)) { json_free(j); return json_fail_(r, "bad exponent"); } while (isdigit((unsigned char)*q)) q++; }
        j->kind = JSON_NUMBER;
        j->number = strtod(r->p, NULL);
        if (integer) { j->integer = strtoull(r->p, NULL, 10); j->is_integer = 1; }
        r->p = q;
        return j;
    }
    json_free(j);
    return json_fail_(r, "unexpected character");
}

/* Parses the whole text: one value and nothing after it. */
static json *json_parse(const char *text, char *error, size_t error_size) {
    json_reader r = {text, text, ""};
    json *j = json_value_(&r, 0);
    if (j) {
        json_space_(&r);
        if (*r.p) { json_free(j); j = json_fail_(&r, "text after the value"); }
    }
    if (!j && error) snprintf(error, error_size, "%s", r.error);
    return j;
}

/* The member `key` of an object, or NULL. */
static json *json_get(const json *j, const char *key) {
    if (!j || j->kind != JSON_OBJECT) return NULL;
    for (size_t i = 0; i < j->count; i++)
        if (!strcmp(j->items[i]->key, key)) return j->items[i];
    return NULL;
}

/* A whole file, or NULL. */
static char *json_read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    while (s) {
        n += fread(s + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        cap *= 2;
        char *grown = realloc(s, cap);
        if (!grown) { free(s); s = NULL; }
        else s = grown;
    }
    fclose(f);
    if (s) s[n] = '\0';
    return s;
}

#endif /* CPOOL_TEST_JSON_H */
