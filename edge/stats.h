/* The edge's metrics exposition (stats.c). */
#ifndef LOADCTL_EDGE_STATS_H
#define LOADCTL_EDGE_STATS_H

#include "edge.h"
#include "metrics.h"

void render_stats(void *userdata, mbuf *b);
void print_stats(edge_t *e);

#endif
