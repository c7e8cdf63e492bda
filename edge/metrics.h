/* The edge's metrics: monotonic per-rule totals over policy changes, a text buffer for the
 * Prometheus text format (0.0.4), and the HTTP scrape endpoint (`--metrics ADDR:PORT`,
 * `GET /metrics`) on a thread of its own, so a scrape never waits on the SIP threads nor they
 * on it. */
#ifndef LOADCTL_EDGE_METRICS_H
#define LOADCTL_EDGE_METRICS_H

#include <netinet/in.h>
#include <stddef.h>

#include "loadctl.h"

/* A growing text buffer, bounded (METRICS_TEXT_MAX); `failed` once something did not fit. */
typedef struct {
    char *p;
    size_t len, cap;
    int failed;
} mbuf;

#define METRICS_TEXT_MAX (16u << 20)

void mbuf_printf(mbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mbuf_put(mbuf *b, const char *s, size_t n);
/* `# HELP name help` and `# TYPE name type`. */
void mbuf_family(mbuf *b, const char *name, const char *type, const char *help);

/* The engine counts per rule, and a rule whose limit or conditions change is a new rule to it:
 * its row starts again at 0. The edge keeps a total per (source, rule id) that only grows: a
 * sample reads every row (lc_engine_stats_each), and a row found lower than at the previous
 * sample has started again, so what it had counted moves into the key's base. A sample is
 * taken right before and right after every publish, withdrawal and NOTIFY, and at each
 * scrape. Bounded: METRICS_RULE_KEYS keys (later ones are not exported per rule, and counted
 * in `edge_metrics_rule_keys_dropped_total`). Thread-safe. */
#define METRICS_RULE_KEYS 8192
void metrics_sample_rules(const lc_engine *engine);
/* Samples, then writes the loadctl_rule_*_total families from the monotonic totals. */
void metrics_write_rules(const lc_engine *engine, mbuf *b);

/* Writes the whole exposition into `b` (the edge's renderer). Called on the metrics thread for
 * a scrape, and on the main thread for SIGUSR1. */
typedef void (*metrics_render_fn)(void *userdata, mbuf *b);

/* Starts the endpoint on `addr` (0, or -1 with errno set). At most METRICS_CONNS connections at
 * once (more are closed at once), a request head of at most METRICS_REQUEST_MAX bytes (431 and
 * close past it), METRICS_TIMEOUT_MS for a whole exchange; sockets non-blocking. */
#define METRICS_CONNS 8
#define METRICS_REQUEST_MAX 4096
#define METRICS_TIMEOUT_MS 5000
int metrics_serve_start(const struct sockaddr_in *addr, metrics_render_fn render, void *userdata);
void metrics_serve_stop(void);

#endif
