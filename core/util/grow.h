/* grow.h — the one growable-array step: make room for item n of an array
 * of `each`-byte items, doubling the capacity (first_cap items at first).
 * Arrays grow with what was really added, never with a count a file claims,
 * so a corrupt file cannot make a reader allocate more than it parsed. */
#ifndef NB_GROW_H
#define NB_GROW_H

#include <stdint.h>
#include <stdlib.h>

/* 0, or -1 when out of memory (*items and *cap are then unchanged). */
static inline int nb_grow(void **items, int64_t *cap, int64_t n, size_t each, int64_t first_cap)
{
    if (n < *cap) return 0;
    int64_t ncap = *cap ? *cap * 2 : first_cap;
    void *p = realloc(*items, (size_t)ncap * each);
    if (!p) return -1;
    *items = p;
    *cap = ncap;
    return 0;
}

#endif
