/* Inbound connections per source address (sources.h). Linear probing at a load of at most one
 * half (every address in the table has a connection open, and there are at most
 * --max-connections), with backward-shift deletion so that no tombstones pile up: a take or a
 * give reads a few slots whatever the addresses. */
#define _GNU_SOURCE /* getrandom */
#include "sources.h"

#include <stdlib.h>
#include <sys/random.h>
#include <time.h>

static uint32_t home(const sources_t *t, uint32_t addr) {
    uint64_t h = ((uint64_t)addr ^ (t->key >> 32)) * (t->key | 1);
    return (uint32_t)(h >> 32) & t->mask;
}

/* The slot holding `addr`, else the free slot where it would go; past the mask only if the
 * table were full, which the bound on connections rules out. */
static uint32_t find(const sources_t *t, uint32_t addr) {
    uint32_t i = home(t, addr);
    for (uint32_t probes = 0; probes <= t->mask; probes++, i = (i + 1) & t->mask) {
        if (!t->slots[i].n || t->slots[i].addr == addr) return i;
    }
    return UINT32_MAX;
}

int sources_init(sources_t *t, unsigned limit, unsigned max_conns) {
    t->limit = limit;
    t->slots = NULL;
    t->mask = 0;
    if (!limit) return 0;
    uint32_t n = 2;
    while (n < 2ull * max_conns) n <<= 1;
    t->slots = calloc(n, sizeof *t->slots);
    if (!t->slots) return -1;
    t->mask = n - 1;
    if (getrandom(&t->key, sizeof t->key, GRND_NONBLOCK) != (ssize_t)sizeof t->key) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t->key = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec;
    }
    pthread_mutex_init(&t->lock, NULL);
    return 0;
}

int sources_take(sources_t *t, uint32_t addr) {
    if (!t->limit) return 1;
    pthread_mutex_lock(&t->lock);
    uint32_t i = find(t, addr);
    int ok = i <= t->mask && t->slots[i].n < t->limit;
    if (ok) {
        t->slots[i].addr = addr;
        t->slots[i].n++;
    }
    pthread_mutex_unlock(&t->lock);
    return ok;
}

void sources_give(sources_t *t, uint32_t addr) {
    if (!t->limit) return;
    pthread_mutex_lock(&t->lock);
    uint32_t i = find(t, addr);
    if (i <= t->mask && t->slots[i].n && --t->slots[i].n == 0) {
        /* Backward shift: every later entry of the run that may live at i moves there. */
        for (uint32_t j = (i + 1) & t->mask; t->slots[j].n; j = (j + 1) & t->mask) {
            uint32_t h = home(t, t->slots[j].addr);
            /* j's entry stays when its home lies cyclically in (i, j] */
            if (((j - h) & t->mask) < ((j - i) & t->mask)) continue;
            t->slots[i] = t->slots[j];
            t->slots[j].n = 0;
            i = j;
        }
    }
    pthread_mutex_unlock(&t->lock);
}

void sources_free(sources_t *t) {
    if (!t->limit) return;
    free(t->slots);
    t->slots = NULL;
    pthread_mutex_destroy(&t->lock);
}
