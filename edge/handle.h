/* What is done with one SIP message (handle.c). */
#ifndef LOADCTL_EDGE_HANDLE_H
#define LOADCTL_EDGE_HANDLE_H

#include "edge.h"

void handle(worker_t *w, const char *msg, size_t len, const peer_t *from);

#endif
