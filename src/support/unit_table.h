/*
 * The physical allocations behind a backend's growable segments (units):
 * each is mapped whole at one range, as the GPU's driver maps an
 * allocation only whole, so a backend records them to give pages back
 * only along their edges (backend.h, pages_inside and pages_unmap). A
 * sorted array; the caller's lock guards it.
 */
#ifndef CPOOL_UNIT_TABLE_H
#define CPOOL_UNIT_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cpool__unit {
    uintptr_t base;
    size_t bytes;
} cpool__unit;

typedef struct cpool__unit_table {
    cpool__unit *at;
    size_t count, cap;
} cpool__unit_table;

/* Records the unit [base, base + bytes) (overlapping none); false: no host
 * memory for the record (nothing changed). */
bool cpool__units_add(cpool__unit_table *t, uintptr_t base, size_t bytes);
/* The index of the unit that holds addr, or SIZE_MAX. */
size_t cpool__units_find(const cpool__unit_table *t, uintptr_t addr);
/* The index of the first unit at or above addr (count if none). */
size_t cpool__units_from(const cpool__unit_table *t, uintptr_t addr);
void cpool__units_remove(cpool__unit_table *t, size_t i);
/* Shrinks [*lo, *hi) to the part that no unit crosses the edges of: a unit
 * that lies across *lo or *hi is left out whole. */
void cpool__units_inside(const cpool__unit_table *t, uintptr_t *lo, uintptr_t *hi);
void cpool__units_free(cpool__unit_table *t);

#endif /* CPOOL_UNIT_TABLE_H */
