/* The decision memory for retransmissions (memory.c). */
#ifndef LOADCTL_EDGE_MEMORY_H
#define LOADCTL_EDGE_MEMORY_H

#include "edge.h"
#include "validate.h"

/* The decision-memory key of a request sv_check passed. */
unsigned long decision_key(const sv_result *sv);
/* A remembered decision. */
typedef struct {
    int kind; /* DM_* */
    unsigned status;
    uint64_t at_ns;
} decision_t;
int decision_recall(worker_t *w, unsigned long key, decision_t *out);
decided_t *decision_slot(decided_t *table, unsigned long key);
void record_decision(decided_t *slot, unsigned long key, int kind, unsigned status, uint64_t now);

#endif
