/* Overload control, RFC 7339 / RFC 7415 (oc.c). */
#ifndef LOADCTL_EDGE_OC_H
#define LOADCTL_EDGE_OC_H

#include "edge.h"

int oc_start(edge_t *e, const char *oc_algorithms, const char *log_oc, double oc_target_pct, long oc_timeout_ms);
void oc_track(worker_t *w, unsigned long h, uint64_t now);
void oc_answered(worker_t *w, unsigned long h);
void oc_expire(worker_t *w, uint64_t now);
lc_str oc_stripped(worker_t *w, const char *value, size_t len, lc_oc_strip which);
size_t put_upstream_via(worker_t *w, char *out, size_t *at, size_t cap, const char *value, size_t len, const peer_t *to,
                        int have_to, size_t *oc_at, char oc_key[32]);

#endif
