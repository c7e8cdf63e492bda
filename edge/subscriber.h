/* The RFC 7200 subscriber (subscriber.c); the UDP thread's. */
#ifndef LOADCTL_EDGE_SUBSCRIBER_H
#define LOADCTL_EDGE_SUBSCRIBER_H

#include "edge.h"

int uri_addr(const char *uri, struct sockaddr_in *out);
int is_load_control(const char *msg, size_t len);
int start_subscriber(edge_t *e, const char *notifier, const char *own_uri, unsigned expires);
/* Retransmissions, refreshes, the state machine's timeouts: called at every turn of the loop. */
void subscriber_timers(edge_t *e);
int subscriber_receive(edge_t *e, const char *msg, size_t len, const struct sockaddr_in *from);
void stop_subscriber(edge_t *e);

#endif
