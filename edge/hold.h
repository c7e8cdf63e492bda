/* Until the notifier's policy is in force: the fallback and the startup hold (hold.c). */
#ifndef LOADCTL_EDGE_HOLD_H
#define LOADCTL_EDGE_HOLD_H

#include "edge.h"

int fallback_start(edge_t *e);
/* The notifier's answer is in force: the fallback is withdrawn. */
void notifier_policy_in_force(edge_t *e);
void hold_start(edge_t *e, long hold_ms);
/* Holds a request while the hold lasts: 1 when it was taken. */
int hold_request(edge_t *e, const char *msg, size_t len, const struct sockaddr_in *from);
void release_held(edge_t *e, worker_t *w);

#endif
