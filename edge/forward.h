/* The messages the edge sends (forward.c). */
#ifndef LOADCTL_EDGE_FORWARD_H
#define LOADCTL_EDGE_FORWARD_H

#include "edge.h"

int deliver(worker_t *w, const char *msg, size_t len, const peer_t *to);
size_t build_reply(worker_t *w, const char *msg, size_t len, unsigned status, const char *reason, const lc_decision *d,
                   const char *extra);
void reply_with(worker_t *w, const char *msg, size_t len, const peer_t *from, unsigned status, const char *reason,
                const lc_decision *d, const char *extra);
void reply(worker_t *w, const char *msg, size_t len, const peer_t *from, unsigned status, const char *reason,
           const lc_decision *d);
void reply_overload(worker_t *w, const char *msg, size_t len, const peer_t *from);
void answer(worker_t *w, const char *msg, size_t len, const peer_t *from, const lc_decision *d);
/* Forwards a request to the next hop; `loop` is its sv_loop_hash (the branch's loop part). */
void forward_request(worker_t *w, const char *msg, size_t len, const peer_t *from, unsigned long loop);
/* Whether a message came from a next hop: the UDP next hop's address and port (where the
 * edge's requests went; a server answers from the socket a request came in on), or a
 * connection to a next hop (TCP or TLS). */
int from_next_hop(const worker_t *w, const peer_t *from);
/* Sends a response back upstream: one from `from`, or one the edge made itself (NULL). */
void forward_response(worker_t *w, const char *msg, size_t len, const peer_t *from);

#endif
