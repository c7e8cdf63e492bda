/* edge: a small stateless SIP edge proxy (UDP, TCP and TLS) that enforces RFC 7200 load-filtering
 * policies with libloadctl.
 *
 *   edge --listen IP:PORT --next-hop IP:PORT [--policy FILE] [--source NAME]
 *        [--subscribe NOTIFIER-URI [--notifier IP:PORT] [--uri OWN-URI] [--expires S]
 *                     [--startup-hold-ms N] [--fallback-policy FILE]]
 *        [--retry-after SECONDS] [--metrics IP:PORT] [--help] [--version]
 *        [--transport udp|tcp|both] [--max-connections N] [--tcp-idle-s S] [--linger-us N]
 *        [--redirect-allow LIST] [--no-emergency-exempt] [--priority-namespaces LIST]
 *        [--overload-control [--oc-algorithms loss|loss,rate|rate,loss] [--oc-occupancy-target PCT]
 *                            [--oc-timeout-ms N] [--log-oc FILE]]
 *        [--tls-listen IP:PORT --tls-next-hop IP:PORT [--tls-next-hop-name NAME] [--tls-require-client-cert]]
 *        [--tls-cert FILE --tls-key FILE] [--tls-ca FILE] [--notifier-name NAME]
 *
 * main.c starts the edge (the engine, a shard per thread, the sockets, the TCP workers, the
 * metrics endpoint, the subscriber), runs the main thread's loop (udp.c) until SIGINT/SIGTERM
 * and stops it. The jobs have files of their own: config.c (the command line, the policy
 * files), udp.c and tcp.c (the transports), handle.c (what is done with a message), forward.c
 * (the messages sent: answers, forwarded requests, responses on their way back), via.c (Via
 * values), window.c (window admissions), memory.c (decisions remembered for retransmissions),
 * oc.c (RFC 7339 overload control), subscriber.c (RFC 7200) with sublink.c (its TLS connection
 * to the notifier), tls.c (OpenSSL), hold.c (until the notifier's
 * policy is in force), stats.c (the metrics), with metrics.c (the endpoint and the per-rule
 * totals), validate.c (RFC 3261 §16.3), sipstream.h (TCP framing) and sipmsg.h (SIP text).
 *
 * Transports. The request and response handling (`handle`) is the same for both; a `peer_t`
 * says where a message came from and where an answer goes, and only `deliver` looks at the
 * transport. Each transport has its own thread and its own `lc_worker` (engine shard), so the
 * UDP loop is the one it was before TCP existed (one blocking recvmmsg per batch, no epoll)
 * and the engine enforces every limit across both:
 * - UDP (main thread, udp.c): recvmmsg/sendmmsg in batches of 32;
 * - TCP and TLS (second thread, epoll, tcp.c; TLS sessions from tls.c).
 *
 * SIGHUP reloads the policy file (an invalid file is reported and the old policy stays);
 * SIGUSR1 prints what --metrics serves (metrics.c: Prometheus text, per-rule totals kept
 * monotonic over policy changes); SIGINT/SIGTERM unsubscribe once and exit. Log lines on
 * stderr start with the UTC time (ISO 8601, milliseconds). */
#define _GNU_SOURCE /* struct mmsghdr (edge.h), clock_gettime */

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "dialogs.h"
#include "edge.h"
#include "hold.h"
#include "metrics.h"
#include "oc.h"
#include "stats.h"
#include "subscriber.h"
#include "sublink.h"
#include "tcp.h"
#include "tls.h"
#include "udp.h"
#include "window.h"

volatile sig_atomic_t reload_requested;
volatile sig_atomic_t stats_requested;
volatile sig_atomic_t stop_requested;

static void on_signal(int sig) {
    if (sig == SIGHUP) reload_requested = 1;
    else if (sig == SIGUSR1) stats_requested = 1;
    else stop_requested = 1;
}

void elog(const char *fmt, ...) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char line[4096];
    size_t n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ edge: ", ts.tv_nsec / 1000000);
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    n = n + (size_t)k < sizeof line ? n + (size_t)k : sizeof line - 1;
    if (n > 0 && line[n - 1] == '\n') n--;
    fprintf(stderr, "%.*s\n", (int)n, line);
}

int main(int argc, char **argv) {
    static edge_t e;
    options_t o;
    int status = options_parse(argc, argv, &e, &o);
    if (status >= 0) return status;
    pthread_mutex_init(&e.sub_mu, NULL);
    pthread_mutex_init(&e.sub_lock, NULL);
    pthread_mutex_init(&e.hold_mu, NULL);
    e.linger_us = o.linger_us;
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &e.listen_addr.sin_addr, ip, sizeof ip);
    snprintf(e.via_host, sizeof e.via_host, "%s:%u", ip, ntohs(e.listen_addr.sin_port));
    inet_ntop(AF_INET, &e.tls_listen_addr.sin_addr, ip, sizeof ip);
    snprintf(e.tls_via_host, sizeof e.tls_via_host, "%s:%u", ip, ntohs(e.tls_listen_addr.sin_port));
    if ((o.tls.cert || o.tls.ca) && tls_setup(&o.tls) != 0) return 1;
    inet_ntop(AF_INET, &e.next_hop.sin_addr, ip, sizeof ip);
    snprintf(e.next_hop_uri, sizeof e.next_hop_uri, "sip:%s:%u", ip, ntohs(e.next_hop.sin_port));
    lc_engine_config config;
    lc_result er = lc_engine_config_default(&config);
    if (er == LC_RESULT_OK) {
        if (o.redirect_allow) config.redirect_allow = cstr(o.redirect_allow);
        if (!o.emergency_exempt) config.exempt_flags &= ~(uint32_t)LC_EXEMPT_EMERGENCY;
        if (o.priority_namespaces) config.priority_namespaces = cstr(o.priority_namespaces);
        if (o.priority_peers) config.priority_peers = cstr(o.priority_peers);
        if (o.to_tag_is_dialog) config.exempt_flags |= LC_EXEMPT_TO_TAG;
        config.sip_user_numbers = (lc_sip_user_numbers)o.user_numbers;
        er = lc_engine_new(&config, &e.engine);
    }
    if (er != LC_RESULT_OK) {
        elog("cannot start the engine: %s%s\n", lc_result_text(er),
                er == LC_RESULT_INVALID_ARGUMENT
                    ? " (check --priority-namespaces: RFC 4412 namespace names; --priority-peers: ADDRESS[/PREFIX] blocks)"
                    : "");
        return er == LC_RESULT_INVALID_ARGUMENT || er == LC_RESULT_INVALID_UTF8 ? 2 : 1;
    }
    /* 65,536 dialogs (768 KiB), whatever the peers send. */
    e.dialogs = dialogs_new(65536);
    if (!e.dialogs) {
        elog("out of memory for the dialog table\n");
        return 1;
    }
    /* One engine shard per thread; limits hold across all (the engine's shared cells). The
     * first UDP worker is the main thread's, also with --transport tcp (it serves the timers
     * and signals then, without a socket). */
    e.ntcp = e.tcp_on || e.tls_on ? e.nudp : 0;
    if (!e.udp_on) e.nudp = 1;
    e.udps = calloc(e.nudp, sizeof *e.udps);
    e.tcps = calloc(e.ntcp + 1, sizeof *e.tcps);
    e.windows = windows_new();
    if (!e.udps || !e.tcps || !e.windows) {
        elog("out of memory for the workers\n");
        return 1;
    }
    for (unsigned k = 0; k < e.nudp + e.ntcp; k++) {
        worker_t *w = calloc(1, sizeof *w);
        if (!w || lc_worker_attach(e.engine, -1, &w->lw) != LC_RESULT_OK) {
            elog("cannot set up worker %u\n", k);
            return 1;
        }
        w->e = &e;
        w->index = k;
        w->sock = w->epfd = w->hop = w->lsock = w->tls_lsock = -1;
        if (k < e.nudp) e.udps[k] = w;
        else e.tcps[k - e.nudp] = w;
    }
    e.udp = e.udps[0];
    if (e.policy_path && load_policy(&e) != 0) return 1;
    if (o.subscribe && fallback_start(&e) != 0) return 1;
    /* The retransmission detector (default: 262,144 transactions, 64·T1 = 32 s). */
    if (lc_detector_new(NULL, &e.det) != LC_RESULT_OK) {
        elog("cannot start the retransmission detector\n");
        return 1;
    }
    if (o.overload_control && oc_start(&e, o.oc_algorithms, o.log_oc, o.oc_target_pct, o.oc_timeout_ms) != 0) return 1;
    for (unsigned k = 0; e.udp_on && k < e.nudp; k++) {
        if (udp_open(&e, e.udps[k]) != 0) {
            elog("cannot listen on udp %s: %s\n", o.listen_at, strerror(errno));
            return 1;
        }
    }
    if (e.ntcp && sources_init(&e.sources, e.max_conns_per_source, e.max_conns) != 0) {
        elog("cannot allocate the table of --max-connections-per-source\n");
        return 1;
    }
    for (unsigned k = 0; k < e.ntcp; k++) {
        worker_t *w = e.tcps[k];
        w->sock = e.udp_on ? e.udps[k % e.nudp]->sock : -1; /* answers to UDP requests that came back over TCP */
        if (tcp_start(&e, w) != 0) {
            elog("cannot listen on tcp %s%s%s: %s\n", e.tcp_on ? o.listen_at : "", e.tcp_on && e.tls_on ? " or tls " : e.tls_on ? "tls " : "",
                 e.tls_on ? o.tls_listen_at : "", strerror(errno));
            return 1;
        }
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGPIPE, &(struct sigaction){.sa_handler = SIG_IGN}, NULL);
    /* Before the TCP workers start: they read e.link (NOTIFYs not on the link are refused). */
    if (o.sub_tls && sublink_start(&e, o.notifier_name) != 0) return 1;
    /* The startup hold starts before the TCP workers do, which wait while it lasts. */
    if (o.subscribe && o.hold_ms > 0) hold_start(&e, o.hold_ms);
    /* Signals go to the main thread only: its blocking read is what they interrupt. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int r = 0;
    for (unsigned k = 0; r == 0 && k < e.ntcp; k++) r = pthread_create(&e.tcps[k]->thread, NULL, tcp_main, e.tcps[k]);
    for (unsigned k = 1; r == 0 && k < e.nudp; k++) r = pthread_create(&e.udps[k]->thread, NULL, udp_worker_main, e.udps[k]);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0) {
        elog("cannot start the worker threads: %s\n", strerror(r));
        return 1;
    }
    if (o.metrics_at && metrics_serve_start(&o.metrics_addr, render_stats, &e) != 0) {
        elog("cannot serve metrics on %s: %s", o.metrics_at, strerror(errno));
        return 1;
    }
    if (o.metrics_at) elog("metrics on http://%s/metrics", o.metrics_at);
    unsigned nw = e.udp_on ? e.nudp : e.ntcp;
    elog("listening on %s (%s), next hop %s, %u worker%s%s\n", o.listen_at, e.udp_on && e.tcp_on ? "udp and tcp" : e.udp_on ? "udp" : "tcp",
         o.next_hop, nw, nw == 1 ? "" : "s", e.pin && nw > 1 ? " (pinned)" : "");
    if (e.tls_on) elog("listening on %s (tls), next hop %s (tls, as %s)\n", o.tls_listen_at, o.tls_next_hop_at, e.tls_next_hop_name);
    if (o.subscribe && start_subscriber(&e, o.subscribe, o.own_uri, o.expires) != 0) return 1;
    udp_loop(e.udp, e.linger_us);
    metrics_serve_stop(); /* before what it reads goes */
    atomic_store(&tcp_stop, 1);
    for (unsigned k = 0; k < e.ntcp; k++) pthread_join(e.tcps[k]->thread, NULL);
    for (unsigned k = 1; k < e.nudp; k++) pthread_join(e.udps[k]->thread, NULL);
    if (e.udp_on || e.link) stop_subscriber(&e);
    window_finish(e.udp);
    unsigned long f = 0, a = 0, ab = 0, m = 0;
    for (unsigned k = 0; k < e.nudp + e.ntcp; k++) {
        worker_t *w = k < e.nudp ? e.udps[k] : e.tcps[k - e.nudp];
        f += READ(w->c.forwarded);
        a += READ(w->c.answered);
        ab += READ(w->c.absorbed);
        m += READ(w->c.malformed);
        lc_worker_free(w->lw);
        lc_oc_shard_free(w->ocs);
    }
    free(e.held); /* what a hold still held at exit */
    lc_oc_client_free(e.oc);
    lc_oc_server_free(e.oc_srv);
    dialogs_free(e.dialogs);
    if (e.oc_log) fclose(e.oc_log);
    lc_detector_free(e.det);
    for (unsigned k = 0; k < e.ntcp; k++) {
        tcp_finish(e.tcps[k]);
        free(e.tcps[k]);
    }
    free(e.tcps);
    if (e.ntcp) sources_free(&e.sources);
    tls_teardown();
    for (unsigned k = 0; k < e.nudp; k++) {
        if (e.udps[k]->sock >= 0) close(e.udps[k]->sock);
        if (k > 0) free(e.udps[k]);
    }
    free(e.udp);
    free(e.udps);
    free(e.ocw);
    lc_engine_free(e.engine);
    elog("stopped (%lu forwarded, %lu answered, %lu ACKs absorbed, %lu malformed, %lu NOTIFYs)\n", f, a, ab, m,
            e.notifies);
    return 0;
}
