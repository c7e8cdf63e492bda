/* SIP over UDP and the main thread's loop (udp.c). */
#ifndef LOADCTL_EDGE_UDP_H
#define LOADCTL_EDGE_UDP_H

#include "edge.h"

int udp_open(edge_t *e);
/* Queues a datagram (sent by the next flush_sends, or when the batch is full). */
void send_to(worker_t *w, const char *msg, size_t len, const struct sockaddr_in *to);
void flush_sends(worker_t *w);
void udp_loop(edge_t *e, long linger_us);

#endif
