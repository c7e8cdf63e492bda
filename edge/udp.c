/* udp.c: SIP over UDP, on the main thread: the socket, the datagrams written in batches
 * (sendmmsg), and the main thread's loop, which reads datagrams in batches (recvmmsg, with a
 * short linger under dense traffic), runs the timers (the subscriber's, the end of the startup
 * hold, window expiry, the overload-control occupancy report) and does what the signals ask. */
#define _GNU_SOURCE /* recvmmsg, sendmmsg */

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "config.h"
#include "edge.h"
#include "handle.h"
#include "hold.h"
#include "stats.h"
#include "subscriber.h"
#include "sublink.h"
#include "tls.h"
#include "udp.h"
#include "window.h"

/* Overload control as a server: how often the UDP thread reports its occupancy. */
#define OC_REPORT_NS 100000000ull

/* The UDP socket on --listen: 0, or -1 with errno set. */
int udp_open(edge_t *e) {
    e->udp_sock = socket(AF_INET, SOCK_DGRAM, 0);
    if (e->udp_sock < 0 || bind(e->udp_sock, (struct sockaddr *)&e->listen_addr, sizeof e->listen_addr) < 0) return -1;
    /* Room for bursts: the default socket buffer (~200 KB) holds only ~150 small datagrams.
     * SO_RCVBUFFORCE passes net.core.rmem_max when running with CAP_NET_ADMIN. */
    int bufsize = 4 << 20;
    if (setsockopt(e->udp_sock, SOL_SOCKET, SO_RCVBUFFORCE, &bufsize, sizeof bufsize) != 0) {
        setsockopt(e->udp_sock, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
    }
    if (setsockopt(e->udp_sock, SOL_SOCKET, SO_SNDBUFFORCE, &bufsize, sizeof bufsize) != 0) {
        setsockopt(e->udp_sock, SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof bufsize);
    }
    return 0;
}

void flush_sends(worker_t *w) {
    unsigned done = 0;
    while (done < w->tx_count) {
        int n = sendmmsg(w->e->udp_sock, w->tx_msg + done, w->tx_count - done, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            elog("sendmmsg: %s\n", strerror(errno));
            /* Skip the datagram that failed and carry on with the rest. */
            n = 1;
        }
        done += (unsigned)n;
    }
    w->tx_count = 0;
}

void send_to(worker_t *w, const char *msg, size_t len, const struct sockaddr_in *to) {
    if (len > MAX_MSG || w->e->udp_sock < 0) return;
    if (w->tx_count == BATCH) flush_sends(w);
    unsigned i = w->tx_count++;
    memcpy(w->tx_buf[i], msg, len);
    w->tx_addr[i] = *to;
    w->tx_iov[i].iov_base = w->tx_buf[i];
    w->tx_iov[i].iov_len = len;
    memset(&w->tx_msg[i], 0, sizeof w->tx_msg[i]);
    w->tx_msg[i].msg_hdr.msg_name = &w->tx_addr[i];
    w->tx_msg[i].msg_hdr.msg_namelen = sizeof w->tx_addr[i];
    w->tx_msg[i].msg_hdr.msg_iov = &w->tx_iov[i];
    w->tx_msg[i].msg_hdr.msg_iovlen = 1;
}

/* The main thread's loop, until SIGINT/SIGTERM (with TCP only it serves the signals alone). */
void udp_loop(edge_t *e, long linger_us) {
    /* Incoming datagrams: up to BATCH per recvmmsg. */
    static char rx_buf[BATCH][MAX_MSG + 1];
    static struct sockaddr_in rx_addr[BATCH];
    static struct iovec rx_iov[BATCH];
    static struct mmsghdr rx_msg[BATCH];
    for (unsigned i = 0; i < BATCH; i++) {
        rx_iov[i].iov_base = rx_buf[i];
        rx_iov[i].iov_len = MAX_MSG;
    }
    int lingered = 0, dense = 0;
    uint64_t last_wake = 0;
    /* The blocking read wakes up at least every 50 ms for the timers (subscriber, window
     * expiry, signals also interrupt it). */
    struct timeval tick = {0, 50000};
    if (e->udp_on) setsockopt(e->udp_sock, SOL_SOCKET, SO_RCVTIMEO, &tick, sizeof tick);
    peer_t from;
    memset(&from, 0, sizeof from);
    /* Overload control as a server: the share of wall time this thread spends on messages. */
    uint64_t oc_busy = 0, oc_since = now_ns();
    while (!stop_requested) {
        if (reload_requested) {
            reload_requested = 0;
            if (e->policy_path) load_policy(e);
            if (e->tls_on || e->link) {
                if (tls_reload() == 0) elog("tls: certificates, key and CA certificates read again (new connections use them)\n");
                else elog("tls: the files could not be used: the certificates in use stay\n");
            }
        }
        if (stats_requested) {
            stats_requested = 0;
            print_stats(e);
        }
        if (!e->udp_on) { /* TCP/TLS only: this thread serves signals, and a TLS subscription */
            if (e->link) {
                subscriber_timers(e);
                release_held(e, e->udp);
                struct pollfd p = {sublink_fd(e), sublink_events(e), 0};
                if (poll(&p, 1, 50) > 0) sublink_io(e);
                continue;
            }
            struct timespec ts = {0, 50000000};
            nanosleep(&ts, NULL);
            continue;
        }
        subscriber_timers(e);
        release_held(e, e->udp);
        expire(e->udp);
        if (e->oc_srv) {
            uint64_t t = now_ns();
            if (t - oc_since >= OC_REPORT_NS) {
                uint64_t ppm = oc_busy * 1000000ull / (t - oc_since);
                lc_oc_server_report_occupancy(e->oc_srv, t, (uint32_t)(ppm > 1000000 ? 1000000 : ppm), e->oc_target_ppm);
                oc_busy = 0;
                oc_since = t;
            }
        }
        for (unsigned i = 0; i < BATCH; i++) {
            memset(&rx_msg[i], 0, sizeof rx_msg[i]);
            rx_msg[i].msg_hdr.msg_name = &rx_addr[i];
            rx_msg[i].msg_hdr.msg_namelen = sizeof rx_addr[i];
            rx_msg[i].msg_hdr.msg_iov = &rx_iov[i];
            rx_msg[i].msg_hdr.msg_iovlen = 1;
        }
        /* A TLS subscription's connection is polled beside the socket: with the blocking read's
         * wait when there is one, else (dense traffic) without waiting, once per batch. */
        if (e->link) {
            struct pollfd p[2] = {{e->udp_sock, POLLIN, 0}, {sublink_fd(e), sublink_events(e), 0}};
            int ready = poll(p + (lingered ? 1 : 0), lingered ? 1 : 2, lingered ? 0 : 50);
            if (ready > 0 && p[1].revents) sublink_io(e);
            if (!lingered && !(p[0].revents & POLLIN)) {
                flush_sends(e->udp);
                continue;
            }
        }
        /* One blocking read (it returns what is queued once one datagram is there, or after
         * the 50 ms receive timeout for the timers), or, right after a linger or a full batch,
         * a read that does not wait. */
        int n = recvmmsg(e->udp_sock, rx_msg, BATCH, lingered ? MSG_DONTWAIT : MSG_WAITFORONE, NULL);
        if (n <= 0) {
            lingered = 0;
            flush_sends(e->udp);
            continue;
        }
        if (!lingered) {
            /* Traffic is dense when this wake-up comes within half a linger of the previous
             * one: only then is a linger worth its own wake-up. */
            uint64_t woke = now_ns();
            dense = woke - last_wake < (uint64_t)linger_us * 500;
            last_wake = woke;
        }
        uint64_t busy_from = e->oc_srv ? now_ns() : 0;
        for (int i = 0; i < n; i++) {
            from.addr = rx_addr[i];
            if (hold_request(e, rx_buf[i], rx_msg[i].msg_len, &rx_addr[i])) continue;
            handle(e->udp, rx_buf[i], rx_msg[i].msg_len, &from);
            release_held(e, e->udp); /* the NOTIFY just handled may have ended the hold */
        }
        flush_sends(e->udp);
        if (e->oc_srv) oc_busy += now_ns() - busy_from;
        if (n == BATCH) {
            lingered = 1; /* more may be queued: read again at once */
        } else if (dense && linger_us > 0) {
            /* Let a few datagrams gather instead of waking up for each one. */
            struct timespec ts = {0, linger_us * 1000};
            nanosleep(&ts, NULL);
            lingered = 1;
        } else {
            lingered = 0;
        }
    }
}
