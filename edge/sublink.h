/* The subscriber's TLS connection to its notifier (sublink.c); the main thread's. */
#ifndef LOADCTL_EDGE_SUBLINK_H
#define LOADCTL_EDGE_SUBLINK_H

#include "edge.h"

/* Sets the link up for `e->notifier_addr`, whose certificate must name `name` (an IPv4 address
 * or a DNS name). Nothing connects until the first message is sent. 0, or -1 (out of memory). */
int sublink_start(edge_t *e, const char *name);
/* Queues one message for the notifier, connecting (and handshaking) first when the link is
 * down: 0, or -1 when it cannot be queued (logged). */
int sublink_send(edge_t *e, const char *msg, size_t len);
/* The link's socket (-1 when down) and the poll events it waits for. */
int sublink_fd(const edge_t *e);
short sublink_events(const edge_t *e);
/* Moves the link on without blocking: connect, handshake, writes, and every whole message read
 * (handed to subscriber_receive as coming from the authenticated notifier). */
void sublink_io(edge_t *e);
/* Gives up a connect or handshake that has taken 10 s (called with the subscriber's timers). */
void sublink_tick(edge_t *e);
void sublink_stop(edge_t *e);

#endif
