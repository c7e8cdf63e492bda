/* The table of connections per source address (sources.c) against a plain model: a count per
 * address. Addresses are drawn from small ranges so that runs collide, entries are removed from
 * the middle of runs (the backward shift) and the table is filled to its bound. `make edge-test`
 * runs it under ASan and UBSan. */
#define _GNU_SOURCE

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "sources.h"
#include "../ffi/tests/check.h"

#define MAX_CONNS 64u
#define LIMIT 3u
#define ADDRS 200u /* addresses drawn: more than the table may hold at once */

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint32_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)rng;
}

int main(void) {
    sources_t off;
    CHECK(sources_init(&off, 0, MAX_CONNS) == 0);
    /* No limit: every take succeeds and nothing is kept. */
    for (int k = 0; k < 1000; k++) CHECK(sources_take(&off, 7) == 1);
    sources_give(&off, 7);
    sources_free(&off);

    sources_t t;
    CHECK(sources_init(&t, LIMIT, MAX_CONNS) == 0);
    /* Twice the connections at least, a power of two. */
    CHECK(t.mask + 1 >= 2 * MAX_CONNS && ((t.mask + 1) & t.mask) == 0);
    unsigned model[ADDRS] = {0};
    unsigned open = 0, refused = 0, wrong = 0;
    for (int step = 0; step < 200000; step++) {
        uint32_t a = next() % ADDRS;
        /* Addresses as the kernel hands them (network order), some sharing their low bytes. */
        uint32_t addr = (a & 1) ? a << 24 : a;
        if ((next() & 1) && open < MAX_CONNS) {
            int ok = sources_take(&t, addr);
            wrong += ok != (model[a] < LIMIT);
            if (ok) {
                model[a]++;
                open++;
            } else refused++;
        } else if (model[a]) {
            sources_give(&t, addr);
            model[a]--;
            open--;
        }
        if (step % 1000 == 0) {
            /* The table holds exactly the model's counts. */
            unsigned entries = 0, mismatched = 0;
            for (uint32_t i = 0; i <= t.mask; i++) {
                if (!t.slots[i].n) continue;
                entries++;
                uint32_t s = t.slots[i].addr;
                uint32_t back = (s >> 24) ? s >> 24 : s;
                mismatched += back >= ADDRS || model[back] != t.slots[i].n;
            }
            unsigned held = 0;
            for (unsigned k = 0; k < ADDRS; k++) held += model[k] > 0;
            CHECK(mismatched == 0 && entries == held);
        }
    }
    CHECK(wrong == 0);
    CHECK(refused > 0); /* the limit was reached, not only approached */
    /* Everything given back: the table is empty, and each address may open LIMIT again. */
    for (unsigned k = 0; k < ADDRS; k++) {
        uint32_t addr = (k & 1) ? k << 24 : k;
        while (model[k]) {
            sources_give(&t, addr);
            model[k]--;
        }
    }
    unsigned left = 0;
    for (uint32_t i = 0; i <= t.mask; i++) left += t.slots[i].n != 0;
    CHECK(left == 0);
    for (unsigned k = 0; k < LIMIT; k++) CHECK(sources_take(&t, 42) == 1);
    CHECK(sources_take(&t, 42) == 0);
    /* A give for an address with nothing open changes nothing. */
    sources_give(&t, 43);
    CHECK(sources_take(&t, 42) == 0);
    sources_free(&t);
    printf("test_sources: %d checks, %d failed\n", checks, failures);
    return failures != 0;
}
