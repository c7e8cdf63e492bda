/* Inbound connections per source address (--max-connections-per-source): a count per IPv4
 * address with a connection open, shared by the TCP workers. */
#ifndef EDGE_SOURCES_H
#define EDGE_SOURCES_H

#include <pthread.h>
#include <stdint.h>

typedef struct {
    uint32_t addr; /* network order */
    uint32_t n;    /* its connections open; 0: the slot is free */
} source_slot;

typedef struct {
    pthread_mutex_t lock; /* taken once per accept and per close, never per message */
    unsigned limit;       /* connections per address; 0: none (the table is not used) */
    uint32_t mask;        /* slots - 1: a power of two, at least twice the connections */
    uint64_t key;         /* random per process: a peer cannot aim its addresses at one probe chain */
    source_slot *slots;
} sources_t;

/* A table for `limit` connections per address and `max_conns` in all (so at most that many
 * addresses): 0, or -1 when the memory cannot be had. A `limit` of 0 allocates nothing. */
int sources_init(sources_t *t, unsigned limit, unsigned max_conns);
/* A place for one more connection from `addr`: 1, or 0 when it has `limit` open. */
int sources_take(sources_t *t, uint32_t addr);
/* Gives back the place of a connection from `addr` that has closed. */
void sources_give(sources_t *t, uint32_t addr);
void sources_free(sources_t *t);

#endif
