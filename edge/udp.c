/* udp.c: SIP over UDP: the workers' sockets (one each on the listening port, SO_REUSEPORT),
 * the datagrams written in batches (sendmmsg), and each worker's loop, which reads datagrams in
 * batches (recvmmsg, with a short linger under dense traffic) and runs its share of the timers
 * (window expiry, overload-control waits). The first worker's loop, on the main thread, also
 * runs the subscriber's timers, the end of the startup hold and the overload-control occupancy
 * report, and does what the signals ask. */
#define _GNU_SOURCE /* recvmmsg, sendmmsg, pthread_setaffinity_np */

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
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

/* Overload control as a server: how often the main thread reports the workers' occupancy. */
#define OC_REPORT_NS 100000000ull

/* Worker w's socket on --listen: 0, or -1 with errno set. With several workers each binds the
 * same address with SO_REUSEPORT, and the kernel spreads the datagrams by a hash of their
 * source and destination, so one source's datagrams (a client's retransmissions among them)
 * keep reaching one worker while its address and port stay the same. */
int udp_open(edge_t *e, worker_t *w) {
    w->sock = socket(AF_INET, SOCK_DGRAM, 0);
    if (w->sock < 0) return -1;
    int one = 1;
    if (e->nudp > 1 && setsockopt(w->sock, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) return -1;
    if (bind(w->sock, (struct sockaddr *)&e->listen_addr, sizeof e->listen_addr) < 0) return -1;
    /* Room for bursts: the default socket buffer (~200 KB) holds only ~150 small datagrams.
     * SO_RCVBUFFORCE passes net.core.rmem_max when running with CAP_NET_ADMIN. */
    int bufsize = 4 << 20;
    if (setsockopt(w->sock, SOL_SOCKET, SO_RCVBUFFORCE, &bufsize, sizeof bufsize) != 0) {
        setsockopt(w->sock, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
    }
    if (setsockopt(w->sock, SOL_SOCKET, SO_SNDBUFFORCE, &bufsize, sizeof bufsize) != 0) {
        setsockopt(w->sock, SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof bufsize);
    }
    /* The blocking read wakes up at least every 50 ms for the timers (signals also interrupt
     * the main thread's). */
    struct timeval tick = {0, 50000};
    setsockopt(w->sock, SOL_SOCKET, SO_RCVTIMEO, &tick, sizeof tick);
    return 0;
}

void pin_worker(edge_t *e, unsigned k, unsigned of) {
    if (!e->pin || of < 2 || CPU_COUNT(&e->cpus) == 0) return;
    unsigned want = k % (unsigned)CPU_COUNT(&e->cpus), seen = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &e->cpus) || seen++ != want) continue;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        int r = pthread_setaffinity_np(pthread_self(), sizeof one, &one);
        if (r != 0) elog("worker %u: cannot pin to CPU %d: %s (running unpinned)\n", k, cpu, strerror(r));
        return;
    }
}

void flush_sends(worker_t *w) {
    unsigned done = 0;
    while (done < w->tx_count) {
        int n = sendmmsg(w->sock, w->tx_msg + done, w->tx_count - done, 0);
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
    if (len > MAX_MSG || w->sock < 0) return;
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

/* Overload control as a server: the share of the workers' wall time spent on messages over
 * the last period, reported by the main thread (RFC 7339 leaves the measure to the server). */
static void report_occupancy(edge_t *e, uint64_t *seen, uint64_t *since) {
    uint64_t t = now_ns();
    if (t - *since < OC_REPORT_NS) return;
    uint64_t busy = 0;
    for (unsigned k = 0; k < e->nudp; k++) {
        uint64_t b = atomic_load_explicit(&e->udps[k]->busy_ns, memory_order_relaxed);
        busy += b - seen[k];
        seen[k] = b;
    }
    uint64_t ppm = busy * 1000000ull / ((t - *since) * e->nudp);
    lc_oc_server_report_occupancy(e->oc_srv, t, (uint32_t)(ppm > 1000000 ? 1000000 : ppm), e->oc_target_ppm);
    *since = t;
}

/* What the main thread does besides its own datagrams: the signals' requests, the
 * subscriber's timers, the end of the startup hold, the occupancy report. */
static void control(edge_t *e, uint64_t *busy_seen, uint64_t *oc_since) {
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
    subscriber_timers(e);
    release_held(e, e->udp);
    if (e->oc_srv && e->udp_on) report_occupancy(e, busy_seen, oc_since);
}

/* A worker's loop, until SIGINT/SIGTERM; on the main thread (worker 0) with the control duties
 * (with TCP only it serves those alone). */
void udp_loop(worker_t *w, long linger_us) {
    edge_t *e = w->e;
    int main_thread = w == e->udp;
    if (e->udp_on) pin_worker(e, w->index, e->nudp);
    /* Incoming datagrams: up to BATCH per recvmmsg. */
    char (*rx_buf)[MAX_MSG + 1] = malloc(sizeof *rx_buf * BATCH);
    struct sockaddr_in rx_addr[BATCH];
    struct iovec rx_iov[BATCH];
    struct mmsghdr rx_msg[BATCH];
    uint64_t *busy_seen = main_thread ? calloc(e->nudp, sizeof *busy_seen) : NULL;
    if (!rx_buf || (main_thread && !busy_seen)) {
        elog("worker %u: out of memory\n", w->index);
        stop_requested = 1;
        free(rx_buf);
        return;
    }
    for (unsigned i = 0; i < BATCH; i++) {
        rx_iov[i].iov_base = rx_buf[i];
        rx_iov[i].iov_len = MAX_MSG;
    }
    int lingered = 0, dense = 0;
    uint64_t last_wake = 0, oc_since = now_ns();
    peer_t from;
    memset(&from, 0, sizeof from);
    while (!stop_requested) {
        if (main_thread) control(e, busy_seen, &oc_since);
        if (!e->udp_on) { /* TCP/TLS only: this thread serves signals, and a TLS subscription */
            if (e->link) {
                struct pollfd p = {sublink_fd(e), sublink_events(e), 0};
                if (poll(&p, 1, 50) > 0) sublink_io(e);
                continue;
            }
            struct timespec ts = {0, 50000000};
            nanosleep(&ts, NULL);
            continue;
        }
        expire(w);
        for (unsigned i = 0; i < BATCH; i++) {
            memset(&rx_msg[i], 0, sizeof rx_msg[i]);
            rx_msg[i].msg_hdr.msg_name = &rx_addr[i];
            rx_msg[i].msg_hdr.msg_namelen = sizeof rx_addr[i];
            rx_msg[i].msg_hdr.msg_iov = &rx_iov[i];
            rx_msg[i].msg_hdr.msg_iovlen = 1;
        }
        /* A TLS subscription's connection is polled beside the socket: with the blocking read's
         * wait when there is one, else (dense traffic) without waiting, once per batch. */
        if (main_thread && e->link) {
            struct pollfd p[2] = {{w->sock, POLLIN, 0}, {sublink_fd(e), sublink_events(e), 0}};
            int ready = poll(p + (lingered ? 1 : 0), lingered ? 1 : 2, lingered ? 0 : 50);
            if (ready > 0 && p[1].revents) sublink_io(e);
            if (!lingered && !(p[0].revents & POLLIN)) {
                flush_sends(w);
                continue;
            }
        }
        /* One blocking read (it returns what is queued once one datagram is there, or after
         * the 50 ms receive timeout for the timers), or, right after a linger or a full batch,
         * a read that does not wait. */
        int n = recvmmsg(w->sock, rx_msg, BATCH, lingered ? MSG_DONTWAIT : MSG_WAITFORONE, NULL);
        if (n <= 0) {
            lingered = 0;
            flush_sends(w);
            continue;
        }
        if (!lingered) {
            /* Traffic is dense when this wake-up comes within half a linger of the previous
             * one: only then is a linger worth its own wake-up. */
            uint64_t woke = now_ns();
            dense = woke - last_wake < (uint64_t)linger_us * 500;
            last_wake = woke;
        }
        atomic_store_explicit(&w->c.datagrams, READ(w->c.datagrams) + (unsigned)n, memory_order_relaxed);
        uint64_t busy_from = e->oc_srv ? now_ns() : 0;
        for (int i = 0; i < n; i++) {
            from.addr = rx_addr[i];
            if (hold_request(e, rx_buf[i], rx_msg[i].msg_len, &rx_addr[i])) continue;
            handle(w, rx_buf[i], rx_msg[i].msg_len, &from);
            release_held(e, w); /* the NOTIFY just handled may have ended the hold */
        }
        flush_sends(w);
        if (e->oc_srv)
            atomic_store_explicit(&w->busy_ns, atomic_load_explicit(&w->busy_ns, memory_order_relaxed) + (now_ns() - busy_from),
                                  memory_order_relaxed);
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
    free(busy_seen);
    free(rx_buf);
}

/* The thread of UDP worker `arg` (a worker_t) other than the first. */
void *udp_worker_main(void *arg) {
    worker_t *w = arg;
    udp_loop(w, w->e->linger_us);
    return NULL;
}
