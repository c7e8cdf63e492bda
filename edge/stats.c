/* stats.c: the edge's metrics as one exposition, served at --metrics (metrics.c) and printed
 * on SIGUSR1: libloadctl's counters, its per-rule rows replaced by totals kept monotonic over
 * policy changes, then the edge's own counters summed over the workers, the detector's, the
 * subscriber's, overload control's and the TCP side's. */
#define _GNU_SOURCE /* struct mmsghdr (edge.h), clock_gettime */

#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dialogs.h"
#include "edge.h"
#include "metrics.h"
#include "stats.h"

static void metric(mbuf *b, const char *name, const char *type, const char *help, unsigned long long v) {
    mbuf_family(b, name, type, help);
    mbuf_printf(b, "%s %llu\n", name, v);
}

/* The sum over every worker of the counter at `off` in counters_t. */
static unsigned long sum_at(const edge_t *e, size_t off) {
    unsigned long total = 0;
    for (unsigned k = 0; k < e->nudp + e->ntcp; k++) {
        worker_t *w = k < e->nudp ? e->udps[k] : e->tcps[k - e->nudp];
        total += READ(*(atomic_ulong *)((char *)&w->c + off));
    }
    return total;
}
#define SUM(field) sum_at(e, offsetof(counters_t, field))

/* The whole exposition (Prometheus text format 0.0.4): the engine's counters — its per-rule
 * rows replaced by the edge's monotonic totals (metrics.h) —, then the edge's own. Every
 * family has # HELP and # TYPE. Called on the metrics thread (a scrape) and on the main thread
 * (SIGUSR1); it reads counters only. */
void render_stats(void *userdata, mbuf *b) {
    edge_t *e = userdata;
    size_t need = 0;
    lc_engine_prometheus(e->engine, NULL, 0, &need);
    char *text = malloc(need + 4096);
    size_t n = 0;
    if (text && lc_engine_prometheus(e->engine, (uint8_t *)text, need + 4096, &n) == LC_RESULT_OK) {
        for (size_t at = 0; at < n;) {
            const char *nl = memchr(text + at, '\n', n - at);
            size_t end = nl ? (size_t)(nl - text) + 1 : n;
            const char *l = text + at;
            size_t ll = end - at;
            int rule_row = (ll > 13 && strncmp(l, "loadctl_rule_", 13) == 0) ||
                           (ll > 20 && (strncmp(l, "# HELP loadctl_rule_", 20) == 0 || strncmp(l, "# TYPE loadctl_rule_", 20) == 0));
            if (!rule_row) mbuf_put(b, l, ll);
            at = end;
        }
    }
    free(text);
    metrics_write_rules(e->engine, b);
    metric(b, "edge_forwarded_total", "counter", "Requests forwarded to the next hop.", SUM(forwarded));
    metric(b, "edge_answered_total", "counter", "Requests the edge answered itself (503, 302, 4xx of validation).", SUM(answered));
    metric(b, "edge_malformed_total", "counter", "Messages libloadctl could not scan as SIP requests (dropped).", SUM(malformed));
    metric(b, "edge_responses_refused_total", "counter",
           "Responses naming an inbound TCP/TLS connection that did not come from the next hop over that kind of transport (dropped).",
           SUM(responses_refused));
    metric(b, "edge_acks_absorbed_total", "counter", "ACKs to the edge's own answers, not forwarded.", SUM(absorbed));
    metric(b, "edge_dropped_total", "counter", "Requests dropped by a rule (TCP).", SUM(dropped));
    mbuf_family(b, "edge_invalid_requests_total", "counter",
                "Requests not forwarded by RFC 3261 section 16.3 request validation, by reason.");
    for (int r = 1; r < SV_COUNT; r++) mbuf_printf(b, "edge_invalid_requests_total{reason=\"%s\"} %lu\n", SV_LABELS[r], sum_at(e, offsetof(counters_t, invalid) + (size_t)r * sizeof(atomic_ulong)));
    metric(b, "edge_no_policy_rejected_total", "counter",
           "New requests no rule matched, answered 503 because no notifier policy had arrived (no --fallback-policy).",
           SUM(no_policy_rejected));
    mbuf_family(b, "edge_worker_datagrams_total", "counter",
                "UDP datagrams read, by worker (--workers): how the kernel's SO_REUSEPORT hash spreads the sources.");
    for (unsigned k = 0; e->udp_on && k < e->nudp; k++)
        mbuf_printf(b, "edge_worker_datagrams_total{worker=\"%u\"} %lu\n", k, READ(e->udps[k]->c.datagrams));
    if (e->ntcp) {
        mbuf_family(b, "edge_tcp_worker_accepted_total", "counter",
                    "Inbound TCP and TLS connections accepted, by TCP worker (--workers).");
        for (unsigned k = 0; k < e->ntcp; k++)
            mbuf_printf(b, "edge_tcp_worker_accepted_total{worker=\"%u\"} %lu\n", k, READ(e->tcps[k]->c.tcp_accepted));
    }
    metric(b, "edge_policy_loads_total", "counter", "Policy files (--policy, --fallback-policy) read and published, at start and on SIGHUP.",
           READ(e->policy_loads));
    metric(b, "edge_policy_load_failures_total", "counter",
           "Policy files that could not be read or did not validate; the policy in force stayed.", READ(e->policy_load_failures));
    metric(b, "edge_notifier_policy_pending", "gauge", "1 while no notifier policy has arrived (--subscribe).",
           (unsigned long long)atomic_load(&e->no_policy));
    /* Requests shown to the retransmission detector (all but ACK and CANCEL): originals +
     * retransmissions; retransmissions: repeated + unremembered. */
    metric(b, "edge_requests_original_total", "counter", "Requests the retransmission detector saw first.", SUM(originals));
    metric(b, "edge_requests_retransmission_total", "counter", "Requests the detector called retransmissions.",
           SUM(retransmissions));
    metric(b, "edge_retransmissions_repeated_total", "counter", "Retransmissions given their original's decision.",
           SUM(retx_repeated));
    metric(b, "edge_retransmissions_unremembered_total", "counter",
           "Retransmissions whose original's decision was not remembered (classified again).", SUM(retx_unremembered));
    lc_detector_counters dc;
    memset(&dc, 0, sizeof dc);
    lc_detector_stats(e->det, &dc);
    metric(b, "edge_detector_originals_total", "counter", "The detector's originals (every thread).", dc.originals);
    metric(b, "edge_detector_retransmissions_total", "counter", "The detector's retransmissions (every thread).",
           dc.retransmissions);
    metric(b, "edge_detector_evicted_total", "counter", "Transactions evicted from the detector (nonzero: too small).",
           dc.evicted);
    metric(b, "edge_detector_tracked", "gauge", "Transactions the detector remembers now.", dc.tracked);
    pthread_mutex_lock(&e->sub_mu);
    lc_subscriber_counters sc = e->sub_stats;
    int have_sub = e->sub_stats_valid;
    pthread_mutex_unlock(&e->sub_mu);
    if (have_sub) {
        metric(b, "edge_subscriber_notifies_total", "counter", "NOTIFYs received.", sc.notifies);
        metric(b, "edge_subscriber_documents_applied_total", "counter", "Policy documents applied.", sc.applied);
        metric(b, "edge_subscriber_documents_with_warnings_total", "counter", "Documents applied with warnings.", sc.warned);
        metric(b, "edge_subscriber_notifies_without_body_total", "counter", "NOTIFYs without a body (nothing to update).",
               sc.bodyless);
        metric(b, "edge_subscriber_documents_ignored_total", "counter", "Documents ignored (old version).", sc.ignored);
        metric(b, "edge_subscriber_documents_refused_total", "counter", "Documents refused (policy kept).", sc.refused);
        metric(b, "edge_subscriber_withdrawals_total", "counter", "Times the notifier's rules were withdrawn.", sc.withdrawn);
        metric(b, "edge_subscriber_notifies_rejected_total", "counter", "NOTIFYs answered with an error.", sc.rejected);
    }
    if (e->link) {
        metric(b, "edge_subscriber_notifies_refused_total", "counter",
               "Load-control NOTIFYs (answered 403) and SUBSCRIBE responses (dropped) not from the notifier's TLS connection.",
               SUM(notifies_refused));
    }
    if (e->oc) {
        lc_oc_hop_status hs;
        memset(&hs, 0, sizeof hs);
        lc_oc_client_status(e->oc, e->oc_hop, now_ns(), &hs);
        lc_oc_server_state ss;
        memset(&ss, 0, sizeof ss);
        lc_oc_server_status(e->oc_srv, &ss);
        metric(b, "edge_oc_shed_total", "counter", "Requests shed by overload control toward the next hop (503).", SUM(oc_shed));
        metric(b, "edge_oc_rejected_total", "counter", "Requests of upstream clients without oc rejected (503).",
               SUM(oc_rejected));
        metric(b, "edge_oc_bad_feedback_total", "counter", "Responses with overload-control values that did not parse.",
               SUM(oc_bad_feedback));
        metric(b, "edge_oc_timeouts_total", "counter", "Requests without any response within --oc-timeout-ms.", SUM(oc_timeouts));
        metric(b, "edge_oc_stripped_total", "counter",
               "Via headers relayed without the oc parameters a peer put there (RFC 7339 §5.4, §5.6).", SUM(oc_stripped));
        metric(b, "edge_oc_next_hop_active", "gauge", "1 while the next hop's feedback is in force.", hs.active);
        metric(b, "edge_oc_next_hop_algorithm", "gauge", "The algorithm in force (libloadctl's LC_OC_ALGORITHM_*).", hs.algorithm);
        metric(b, "edge_oc_next_hop_oc", "gauge", "The next hop's oc value in force.", hs.oc);
        metric(b, "edge_oc_next_hop_suspended", "gauge", "1 while the next hop is suspended after timeouts.", hs.suspended);
        metric(b, "edge_oc_next_hop_updates_total", "counter", "Feedback updates applied.", hs.updates);
        if (e->tls_on) {
            memset(&hs, 0, sizeof hs);
            lc_oc_client_status(e->oc, e->oc_tls_hop, now_ns(), &hs);
            metric(b, "edge_oc_tls_next_hop_active", "gauge", "1 while --tls-next-hop's feedback is in force.", hs.active);
            metric(b, "edge_oc_tls_next_hop_algorithm", "gauge", "Its algorithm in force (LC_OC_ALGORITHM_*).", hs.algorithm);
            metric(b, "edge_oc_tls_next_hop_oc", "gauge", "Its oc value in force.", hs.oc);
            metric(b, "edge_oc_tls_next_hop_suspended", "gauge", "1 while it is suspended after timeouts.", hs.suspended);
            metric(b, "edge_oc_tls_next_hop_updates_total", "counter", "Its feedback updates applied.", hs.updates);
        }
        metric(b, "edge_oc_server_overloaded", "gauge", "1 while this edge reports overload to its clients.", ss.overloaded);
        mbuf_family(b, "edge_oc_server_target_per_second", "gauge", "The rate this edge's law targets.");
        mbuf_printf(b, "edge_oc_server_target_per_second %.3f\n", (double)ss.target_milli / 1000.0);
        /* RFC 7339 §11: who the server treats as not taking part although it offered. */
        unsigned long nonconforming = 0, newcomers = 0, newcomer_rejected = 0;
        lc_oc_server_client_state cs;
        for (uint32_t i = 0; lc_oc_server_client(e->oc_srv, i, &cs) == LC_RESULT_OK; i++) {
            nonconforming += cs.nonconforming;
            if (cs.key_len == 0) newcomer_rejected = cs.rejected;
            else newcomers += cs.newcomer;
        }
        metric(b, "edge_oc_server_clients", "gauge", "Upstream clients this edge tracks as an RFC 7339 server.", ss.clients);
        metric(b, "edge_oc_server_nonconforming", "gauge",
               "Clients that offered overload control but sent more than told: treated as not taking part.", nonconforming);
        metric(b, "edge_oc_server_newcomers", "gauge", "Clients first seen in overload, not yet tracked on their own.",
               newcomers);
        metric(b, "edge_oc_server_newcomers_rejected_total", "counter",
               "Requests of newcomers and untracked source addresses rejected (503).", newcomer_rejected);
    }
    metric(b, "edge_dialogs", "gauge",
           "Dialogs set up through this edge (a 2xx to an INVITE) kept for their in-dialog requests, of 65,536.",
           (unsigned long)dialogs_count(e->dialogs, now_ns()));
    if (e->ntcp) {
        metric(b, "edge_tcp_accepted_total", "counter", "Inbound TCP connections accepted.", SUM(tcp_accepted));
        metric(b, "edge_tcp_refused_total", "counter", "Inbound connections closed at once (--max-connections).",
               SUM(tcp_refused));
        metric(b, "edge_tcp_source_refused_total", "counter",
               "Inbound connections closed at once: their address had --max-connections-per-source open.", SUM(tcp_source_refused));
        metric(b, "edge_tcp_closed_total", "counter", "TCP connections closed.", SUM(tcp_closed));
        metric(b, "edge_tcp_framing_errors_total", "counter", "Messages without a usable Content-Length (400, close).",
               SUM(tcp_framing_errors));
        metric(b, "edge_tcp_too_large_total", "counter", "Messages over 65,535 bytes (513, close).", SUM(tcp_too_large));
        metric(b, "edge_tcp_overflows_total", "counter", "Connections closed because their output buffer was full.",
               SUM(tcp_overflows));
        metric(b, "edge_tcp_pings_total", "counter", "RFC 5626 keep-alive pings answered.", SUM(tcp_pings));
        metric(b, "edge_tcp_responses_orphaned_total", "counter", "Responses whose inbound connection had gone (dropped).",
               SUM(tcp_responses_orphaned));
        metric(b, "edge_tcp_hop_connects_total", "counter", "Connections opened to the next hop.", SUM(hop_connects));
        metric(b, "edge_tcp_hop_failures_total", "counter", "Failed connects to the next hop.", SUM(hop_failures));
        metric(b, "edge_tcp_forward_failures_total", "counter", "Requests answered 503 because the next hop was unreachable.",
               SUM(forward_failures));
        metric(b, "edge_tcp_idle_closed_total", "counter", "Inbound connections closed after --tcp-idle-s.",
               SUM(tcp_idle_closed));
        if (e->tls_on) {
            metric(b, "edge_tls_handshakes_total", "counter", "TLS handshakes completed (inbound and to the next hop).",
                   SUM(tls_handshakes));
            metric(b, "edge_tls_handshake_failures_total", "counter",
                   "TLS handshakes failed or not complete within 10 s (a certificate not accepted, among others).",
                   SUM(tls_handshake_failures));
        }
    }
}

/* SIGUSR1: the same exposition as GET /metrics, on stdout, then the line `# EOF` (a comment to a
 * Prometheus parser): the dump takes more than one write, and a reader knows it has it whole. */
void print_stats(edge_t *e) {
    mbuf b = {0};
    render_stats(e, &b);
    if (b.p) fwrite(b.p, 1, b.len, stdout);
    fputs("# EOF\n", stdout);
    fflush(stdout);
    free(b.p);
}
