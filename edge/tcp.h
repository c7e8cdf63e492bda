/* SIP over TCP (tcp.c). */
#ifndef LOADCTL_EDGE_TCP_H
#define LOADCTL_EDGE_TCP_H

#include <stdatomic.h>

#include "edge.h"

/* Set by the main thread when the TCP thread must end. */
extern atomic_int tcp_stop;

/* The listening socket and the connection table: 0, or -1 with errno set. */
int tcp_start(edge_t *e, worker_t *w);
/* The TCP thread (pthread_create's start routine; its argument is the worker). */
void *tcp_main(void *arg);
void tcp_finish(worker_t *w);
/* The slot of the connection to the next hop, over TCP or TLS (opened when there is none), or
 * -1. */
int hop_slot(worker_t *w, int tls);
/* Queues bytes on a connection of the table, written at the end of the pass: 0, or -1. */
int conn_queue(worker_t *w, unsigned slot, uint32_t gen, const char *data, size_t len);

#endif
