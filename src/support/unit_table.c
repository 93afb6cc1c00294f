/* The units of a backend's growable segments (unit_table.h). */
#include "unit_table.h"

#include <stdlib.h>
#include <string.h>

#include "fault.h"

size_t cpool__units_from(const cpool__unit_table *t, uintptr_t addr) {
    size_t lo = 0, hi = t->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->at[mid].base < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

size_t cpool__units_find(const cpool__unit_table *t, uintptr_t addr) {
    size_t i = cpool__units_from(t, addr);
    if (i < t->count && t->at[i].base == addr) return i;
    if (i == 0) return SIZE_MAX;
    const cpool__unit *u = &t->at[i - 1];
    return addr < u->base + u->bytes ? i - 1 : SIZE_MAX;
}

static bool room(cpool__unit_table *t) {
    if (t->count < t->cap) return true;
    size_t cap = t->cap ? 2 * t->cap : 16;
    cpool__unit *grown = cpool__realloc(t->at, cap * sizeof *grown);
    if (!grown) return false;
    t->at = grown;
    t->cap = cap;
    return true;
}

static void insert(cpool__unit_table *t, size_t i, cpool__unit u) {
    memmove(&t->at[i + 1], &t->at[i], (t->count - i) * sizeof *t->at);
    t->at[i] = u;
    t->count++;
}

bool cpool__units_add(cpool__unit_table *t, uintptr_t base, size_t bytes) {
    if (!room(t)) return false;
    insert(t, cpool__units_from(t, base), (cpool__unit){base, bytes});
    return true;
}

void cpool__units_remove(cpool__unit_table *t, size_t i) {
    memmove(&t->at[i], &t->at[i + 1], (t->count - i - 1) * sizeof *t->at);
    t->count--;
}

void cpool__units_inside(const cpool__unit_table *t, uintptr_t *lo, uintptr_t *hi) {
    size_t i = cpool__units_find(t, *lo);
    if (i != SIZE_MAX && t->at[i].base < *lo) *lo = t->at[i].base + t->at[i].bytes;
    if (*hi > 0) {
        size_t j = cpool__units_find(t, *hi - 1);
        if (j != SIZE_MAX && t->at[j].base + t->at[j].bytes > *hi) *hi = t->at[j].base;
    }
    if (*hi < *lo) *hi = *lo;
}

void cpool__units_free(cpool__unit_table *t) {
    free(t->at);
    *t = (cpool__unit_table){0};
}
