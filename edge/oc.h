/* Overload control, RFC 7339 / RFC 7415 (oc.c). */
#ifndef LOADCTL_EDGE_OC_H
#define LOADCTL_EDGE_OC_H

#include "edge.h"

int oc_start(edge_t *e, const char *oc_algorithms, const char *log_oc, double oc_target_pct, long oc_timeout_ms);
/* The overload-control hop of the next hop a request goes to: over TLS --tls-next-hop's. */
static inline uint32_t oc_hop_of(const edge_t *e, int tls) { return tls ? e->oc_tls_hop : e->oc_hop; }
void oc_track(worker_t *w, unsigned long h, uint64_t now, uint32_t hop);
void oc_answered(worker_t *w, unsigned long h);
void oc_expire(worker_t *w, uint64_t now);
lc_str oc_stripped(worker_t *w, const char *value, size_t len, lc_oc_strip which);
size_t put_upstream_via(worker_t *w, char *out, size_t *at, size_t cap, const char *value, size_t len, const peer_t *to,
                        int have_to, size_t *oc_at, char oc_key[32]);

#endif
