/* The RFC 7200 subscriber (subscriber.c): its timers run on the main thread, its messages are
 * taken by whichever worker they reach, under edge_t.sub_lock. */
#ifndef LOADCTL_EDGE_SUBSCRIBER_H
#define LOADCTL_EDGE_SUBSCRIBER_H

#include "edge.h"

int uri_addr(const char *uri, struct sockaddr_in *out);
int uri_wants_tls(const char *uri);
void uri_host(const char *uri, char *out, size_t cap);
int is_load_control(const char *msg, size_t len);
int start_subscriber(edge_t *e, const char *notifier, const char *own_uri, unsigned expires);
/* Retransmissions, refreshes, the state machine's timeouts: called at every turn of the loop. */
void subscriber_timers(edge_t *e);
/* A message of the package for the subscriber: 1 when it was taken (and answered, by worker
 * `w`). `from`: the UDP sender, or NULL for what came on the notifier's TLS connection
 * (sublink.c). */
int subscriber_receive(worker_t *w, const char *msg, size_t len, const struct sockaddr_in *from);
/* Counts, logs and answers (403) a message of the package that did not come on the notifier's
 * TLS connection; any thread, for its own worker. */
void subscriber_refuse(worker_t *w, const char *msg, size_t len, const peer_t *from);
void stop_subscriber(edge_t *e);

#endif
