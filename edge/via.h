/* Reading Via header values (via.c). */
#ifndef LOADCTL_EDGE_VIA_H
#define LOADCTL_EDGE_VIA_H

#include <stddef.h>

#include "edge.h"
#include "sipvia.h"

void put_rport(char *out, size_t *at, size_t cap, const char *value, size_t len, const peer_t *from);
int via_destination(const char *entry, size_t len, struct sockaddr_in *to);
int via_connection(const char *entry, size_t len, peer_t *to);
lc_str top_via(const char *msg, size_t len);
size_t via_branch(const char *v, size_t len, size_t *n);
void top_branch(const char *msg, size_t len, char *out, size_t cap);

#endif
