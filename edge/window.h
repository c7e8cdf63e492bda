/* Window admissions and transaction hashes (window.c). */
#ifndef LOADCTL_EDGE_WINDOW_H
#define LOADCTL_EDGE_WINDOW_H

#include "edge.h"

unsigned long hash_bytes(const char *a, size_t alen, const char *b, size_t blen);
/* The transaction a window ticket or an overload-control wait is kept for: its Call-ID and
 * CSeq number, from a request's sv_check spans or from the fields themselves (trimmed alike:
 * a request and its responses give the same hash). */
unsigned long transaction_hash_of(const char *call_id, size_t call_id_len, const char *cseq, size_t cseq_len);
/* The same, found in a message (a response) by one walk over its header lines. */
unsigned long transaction_hash(const char *msg, size_t len);
/* The shared tables of window admissions (WINDOW_STRIPES), or NULL. */
window_stripe_t *windows_new(void);
/* Keeps a window ticket until the transaction's final response (release) or Timer B. */
void remember(worker_t *w, unsigned long h, lc_ticket t);
void release(worker_t *w, unsigned long h);
/* The timers of a worker's tables (window admissions, overload-control waits). */
void expire(worker_t *w);
/* Releases what is still held and frees the tables (the workers stopped). */
void window_finish(worker_t *w);

#endif
