/* oc.c: overload control.
 *
 * With --overload-control the edge takes part in feedback overload control (RFC 7339
 * loss-based, RFC 7415 rate-based; libloadctl's lc_oc_* functions), in both roles:
 * - client of its next hop: its Via carries `;oc;oc-algo="loss,rate"` (--oc-algorithms; `loss`
 *   for a next hop whose SIP parser cannot take a comma inside a quoted Via parameter, as
 *   Kamailio 5.6's cannot); the oc values in the
 *   responses coming back through that Via are applied; each new request (an original, told
 *   from retransmissions by libloadctl's retransmission detector; not ACK or CANCEL) is asked
 *   lc_oc_decide after classification, in its category (in-dialog, emergency and priority
 *   namespaces are the category reduced last; for the rate algorithm their tolerance is 100·T
 *   instead of RFC 7415's 10·T, so bursts of BYEs pass), and each ACK and CANCEL forwarded is
 *   counted through it (LC_OC_CATEGORY_NONE: the loss algorithm's mix includes them, RFC 7339
 *   §7.2); a shed request is answered 503 without
 *   Retry-After (RFC 7339 §5.10: the edge has no other next hop). A new request that got no
 *   response within --oc-timeout-ms (default 32000, Timer B) counts as a timeout: three in a row
 *   suspend the next hop, probed with back-off until it answers (§5.9; tracked best effort in a
 *   direct-mapped table of 8192 transactions per worker, shared by the workers);
 * - server to its upstream clients when its own processing is the bottleneck: the UDP workers'
 *   mean busy share (time spent on messages over wall time, per 100 ms) is reported as an occupancy
 *   against --oc-occupancy-target (default 80 %); the next Via of every response going upstream
 *   (the client's) gets this edge's oc values for that client (by its address), and requests of
 *   clients without `oc` are answered 503 without Retry-After in the share the law sets
 *   (§5.10.2). Values a downstream server put into that Via are replaced, never passed on
 *   (§5.4). */
#define _GNU_SOURCE /* struct mmsghdr (edge.h), clock_gettime */

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edge.h"
#include "oc.h"
#include "via.h"

/* Starts overload control: the client of the next hop with a shard per thread, and the server
 * to upstream clients. 0, or -1 (logged). */
int oc_start(edge_t *e, const char *oc_algorithms, const char *log_oc, double oc_target_pct, long oc_timeout_ms) {
    /* RFC 7339 client of the next hop, and of --tls-next-hop (no other address ever asks for
     * their cells, so they never age out), and server to upstream clients; one shard of the
     * client per thread. */
    lc_str params = {NULL, 0};
    char hop_key[32], tls_key[40];
    addr_key(&e->next_hop, hop_key, sizeof hop_key);
    lc_str hk = {(const uint8_t *)hop_key, strlen(hop_key)};
    snprintf(tls_key, sizeof tls_key, "tls:");
    addr_key(&e->tls_next_hop, tls_key + 4, sizeof tls_key - 4);
    lc_str tk = {(const uint8_t *)tls_key, strlen(tls_key)};
    lc_oc_server_config sc;
    lc_oc_client_config cc;
    lc_oc_client_config_default(&cc);
    /* In-dialog requests (BYE after an answered call) come in bursts; with RFC 7415's TAU2 =
     * 10·T a burst of more than ~5 of them in a few T was shed (seen end to end: 178 BYEs of
     * 2,064 calls at 3x overload). 100·T keeps them; the long-term rate is still 1/T, since
     * every admission of either category fills the same bucket and new requests yield. */
    cc.tau_priority_milli = 100000;
    if (strcmp(oc_algorithms, "loss") == 0) cc.algorithms = LC_OC_ALGORITHMS_LOSS;
    else if (strcmp(oc_algorithms, "rate,loss") == 0)
        cc.algorithms = LC_OC_ALGORITHMS_LOSS | LC_OC_ALGORITHMS_RATE | LC_OC_ALGORITHMS_PREFER_RATE;

    if (lc_oc_client_new(&cc, e->tls_on ? 2 : 1, &e->oc) != LC_RESULT_OK || lc_oc_client_hop(e->oc, hk, now_ns(), &e->oc_hop) != LC_RESULT_OK ||
        (e->tls_on && lc_oc_client_hop(e->oc, tk, now_ns(), &e->oc_tls_hop) != LC_RESULT_OK) ||
        lc_oc_client_request_params(e->oc, &params) != LC_RESULT_OK || params.len >= sizeof e->oc_params ||
        lc_oc_server_config_default(&sc) != LC_RESULT_OK ||
        lc_oc_server_new(&sc, &e->oc_srv) != LC_RESULT_OK) {
        elog("cannot start overload control\n");
        return -1;
    }
    for (unsigned k = 0; k < e->nudp + e->ntcp; k++) {
        worker_t *w = k < e->nudp ? e->udps[k] : e->tcps[k - e->nudp];
        if (lc_oc_shard_new(e->oc, k + 1, &w->ocs) != LC_RESULT_OK) {
            elog("cannot start overload control\n");
            return -1;
        }
    }
    e->nocw = (size_t)OC_WAIT * (e->nudp + e->ntcp);
    e->ocw = calloc(e->nocw, sizeof *e->ocw);
    if (!e->ocw) {
        elog("out of memory for overload control\n");
        return -1;
    }
    memcpy(e->oc_params, params.ptr, params.len);
    e->oc_params[params.len] = 0;
    if (log_oc && !(e->oc_log = fopen(log_oc, "a"))) {
        elog("cannot open %s: %s\n", log_oc, strerror(errno));
        return -1;
    }
    if (e->oc_log) setvbuf(e->oc_log, NULL, _IOLBF, 0); /* a line as soon as it is sent: tail -f, a kill */
    e->oc_target_ppm = (uint32_t)(oc_target_pct * 10000.0 + 0.5);
    e->oc_timeout_ns = (uint64_t)oc_timeout_ms * 1000000ull;
    return 0;
}

/* A new request was forwarded with overload control: wait for a response to it. The slot is
 * the transaction's (direct-mapped): an older transaction in it is no longer tracked (best
 * effort). */
void oc_track(worker_t *w, unsigned long h, uint64_t now, uint32_t hop) {
    oc_wait_t *slot = &w->e->ocw[h % w->e->nocw];
    uint64_t due = ((now + w->e->oc_timeout_ns) / 1000000ull + 1) << 16 | (hop & 0xffff);
    atomic_store_explicit(&slot->due, 0, memory_order_relaxed);
    atomic_store_explicit(&slot->hash, h, memory_order_release);
    atomic_store_explicit(&slot->due, due, memory_order_release);
}

/* Any response for the transaction ends its wait, on whichever worker it arrives. */
void oc_answered(worker_t *w, unsigned long h) {
    oc_wait_t *slot = &w->e->ocw[h % w->e->nocw];
    uint64_t due = atomic_load_explicit(&slot->due, memory_order_acquire);
    if (due && atomic_load_explicit(&slot->hash, memory_order_acquire) == h)
        atomic_compare_exchange_strong(&slot->due, &due, 0);
}

/* Transactions that waited past the timeout: a timeout each (RFC 7339 §5.9). Each worker scans
 * its own share of the slots. */
void oc_expire(worker_t *w, uint64_t now) {
    edge_t *e = w->e;
    if (!e->oc) return;
    unsigned n = e->nudp + e->ntcp;
    size_t from = e->nocw * w->index / n, to = e->nocw * (w->index + 1) / n;
    uint64_t now_ms = now / 1000000ull;
    for (size_t k = from; k < to; k++) {
        uint64_t due = atomic_load_explicit(&e->ocw[k].due, memory_order_acquire);
        if (due && (due >> 16) <= now_ms && atomic_compare_exchange_strong(&e->ocw[k].due, &due, 0)) {
            lc_oc_client_on_timeout(e->oc, (uint32_t)(due & 0xffff), now);
            BUMP(w->c.oc_timeouts);
        }
    }
}

/* The Via header value `value` without the overload-control parameters `which` names (RFC 7339
 * §5.4 for the Vias of a response below this edge's, §5.6 for the Via a client inserted into a
 * request), in the worker's via_buf, or `value` itself when it has none of them (or when the
 * library cannot read where its parameters end: then nobody can read an oc value in it). */
lc_str oc_stripped(worker_t *w, const char *value, size_t len, lc_oc_strip which) {
    lc_str v = {(const uint8_t *)value, len};
    size_t written = 0;
    if (lc_oc_via_strip(v, which, (uint8_t *)w->via_buf, sizeof w->via_buf, &written) == LC_RESULT_OK) {
        BUMP(w->c.oc_stripped);
        v.ptr = (const uint8_t *)w->via_buf;
        v.len = written;
    }
    return v;
}

/* Writes the Via entry `value` (one header value, possibly with further entries after a comma)
 * going upstream to `to`: when this edge is an overload-control server, without the oc values
 * a downstream server put there (RFC 7339 §5.4) and with this edge's own for that client when
 * the client takes part; else as it was. The client is the address its requests come from
 * (a UDP source, a TCP connection's peer), which is where the responses go: RFC 3581's rport,
 * or the sent-by of a client that sends from its own port (RFC 3261 §18.1.1). Returns the
 * length of the value written with values (at `*oc_at`, for the client `oc_key`), 0 without. */
size_t put_upstream_via(worker_t *w, char *out, size_t *at, size_t cap, const char *value, size_t len,
                               const peer_t *to, int have_to, size_t *oc_at, char oc_key[32]) {
    put(out, at, cap, "Via: ", 5);
    const struct sockaddr_in *client = NULL;
    if (have_to && !to->tcp) client = &to->addr;
    else if (have_to && w->conns && to->slot < w->nconns && w->conns[to->slot].gen == to->gen) client = &w->conns[to->slot].peer;
    lc_str v = {(const uint8_t *)value, len};
    if (w->e->oc_srv) v = oc_stripped(w, value, len, LC_OC_STRIP_RESPONSE);
    if (w->e->oc_srv && client) {
        addr_key(client, oc_key, 32);
        size_t written = 0;
        lc_str k = {(const uint8_t *)oc_key, strlen(oc_key)};
        if (*at < cap && lc_oc_server_write_via(w->e->oc_srv, now_ns(), k, v, (uint8_t *)out + *at, cap - *at, &written) ==
                             LC_RESULT_OK) {
            *oc_at = *at;
            *at += written;
            put(out, at, cap, "\r\n", 2);
            return written;
        }
    }
    put(out, at, cap, (const char *)v.ptr, v.len);
    put(out, at, cap, "\r\n", 2);
    return 0;
}
