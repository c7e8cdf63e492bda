/* SIP over UDP: the workers' sockets and loops (udp.c). */
#ifndef LOADCTL_EDGE_UDP_H
#define LOADCTL_EDGE_UDP_H

#include "edge.h"

int udp_open(edge_t *e, worker_t *w);
/* Queues a datagram (sent by the next flush_sends, or when the batch is full). */
void send_to(worker_t *w, const char *msg, size_t len, const struct sockaddr_in *to);
void flush_sends(worker_t *w);
/* A worker's loop until SIGINT/SIGTERM (worker 0, on the main thread, also serves the timers
 * and the signals). */
void udp_loop(worker_t *w, long linger_us);
void *udp_worker_main(void *arg);
/* Pins the calling thread, the k-th of `of` workers of its kind, to the k-th CPU of the edge's
 * affinity mask (modulo its size) unless --no-pin or `of` is 1; a failure is logged and the
 * thread runs unpinned. */
void pin_worker(edge_t *e, unsigned k, unsigned of);

#endif
