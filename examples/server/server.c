/* server: a capacity-limited SIP server built on libloadctl, to show overload control end to end.
 *
 *   server --listen IP:PORT --rate MU [--scheduler prsm|fifo] [--buffer N] [--overload-control]
 *          [--validity-ms N] [--log-oc FILE]
 *
 * It serves at most MU messages per second over UDP (every message costs the same service slot:
 * a 1/MU pacing in the serving thread), from a finite queue of --buffer messages (default 10000)
 * ordered by libloadctl's scheduler: PRSM (originals first, retransmissions told apart by the
 * retransmission detector; the default) or one FIFO. A message that finds its queue full is
 * dropped (tail drop: over UDP the client retransmits, and the copy counts as an original again).
 * When it serves a request it answers 200 OK (an ACK is absorbed); a retransmission costs its
 * service slot but is not answered again (its first copy was served, and answered, before it).
 *
 * With --overload-control it is an RFC 7339 / RFC 7415 server (lc_oc_server): every request's
 * top Via offer is read on arrival (lc_oc_server_on_request; a client that does not take part is
 * answered 503 without Retry-After in the share the law sets, RFC 7339 §5.10.2), the queue
 * reports its delay and service every 10 ms (lc_oc_server_report_queue: the waiting time of the
 * newest original served, the requests served that it counts — not ACKs — and how long the
 * server was busy, ACKs included), and every response's
 * top Via carries the oc values for its client (lc_oc_server_write_via, --validity-ms sets
 * oc-validity, default 500). --log-oc appends a line per such response to FILE:
 * `oc-sent|CLIENT|CALL-ID|CSEQ|STATUS|VIA`, the Via as written (what a capture must decode to).
 *
 * SIGUSR1 prints counters; SIGINT/SIGTERM print them and exit. */
#define _GNU_SOURCE

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "loadctl.h"
#include "../../edge/sipmsg.h"

#define MAX_MSG 65535

static volatile sig_atomic_t stop_requested = 0;
static volatile sig_atomic_t stats_requested = 0;

static void on_signal(int sig) {
    if (sig == SIGUSR1) stats_requested = 1;
    else stop_requested = 1;
}

/* One queued message: its bytes, where it came from, when, its class, and whether it counts
 * for overload control (everything but ACK). */
typedef struct {
    struct sockaddr_in from;
    uint64_t arrived_ns;
    lc_class cls;
    int counted;
    size_t len;
    char msg[];
} item_t;

typedef struct {
    int sock;
    double mu;
    lc_scheduler *sched;
    lc_detector *det;
    lc_oc_server *oc; /* NULL without --overload-control */
    lc_engine *engine; /* for the requests' categories (lc_oc_category_scanned) */
    FILE *oc_log;      /* --log-oc, or NULL */
    atomic_ulong received, served, served_retx, dropped, rejected, answered, malformed;
} server_t;

/* Answers `msg` with `status`: Via (the first line with this server's oc values for the client
 * when it takes part), From, To (tagged), Call-ID, CSeq; 503s without Retry-After. */
static void respond(server_t *s, const char *msg, size_t len, const struct sockaddr_in *to, unsigned status,
                    const char *reason) {
    static _Thread_local char out[MAX_MSG];
    size_t at = 0;
    char line[128];
    int n = snprintf(line, sizeof line, "SIP/2.0 %u %s\r\n", status, reason);
    put(out, &at, sizeof out, line, (size_t)n);
    char key[32];
    addr_key(to, key, sizeof key);
    int via_done = 0;
    size_t via_at = 0, via_len = 0; /* the oc Via as written, for --log-oc */
    size_t i = first_header(msg, len);
    const char *h;
    size_t ll;
    while (next_header(msg, len, &i, &h, &ll)) {
        if (header_is(h, ll, "Via", "v") && !via_done) {
            via_done = 1;
            const char *colon = memchr(h, ':', ll);
            size_t v = colon ? (size_t)(colon - h) + 1 : ll;
            while (v < ll && (h[v] == ' ' || h[v] == '\t')) v++;
            size_t written = 0;
            lc_str k = {(const uint8_t *)key, strlen(key)};
            lc_str value = {(const uint8_t *)h + v, ll - v};
            put(out, &at, sizeof out, "Via: ", 5);
            if (s->oc && lc_oc_server_write_via(s->oc, now_ns(), k, value, (uint8_t *)out + at, sizeof out - at, &written) ==
                             LC_RESULT_OK) {
                via_at = at;
                via_len = written;
                at += written;
            } else {
                put(out, &at, sizeof out, h + v, ll - v);
            }
            put(out, &at, sizeof out, "\r\n", 2);
        } else if (header_is(h, ll, "Via", "v") || header_is(h, ll, "From", "f") || header_is(h, ll, "Call-ID", "i") ||
                   header_is(h, ll, "CSeq", NULL)) {
            put(out, &at, sizeof out, h, ll);
            put(out, &at, sizeof out, "\r\n", 2);
        } else if (header_is(h, ll, "To", "t")) {
            put(out, &at, sizeof out, h, ll);
            if (!memmem(h, ll, "tag=", 4)) put(out, &at, sizeof out, ";tag=lc-server", 14);
            put(out, &at, sizeof out, "\r\n", 2);
        }
    }
    put(out, &at, sizeof out, "Content-Length: 0\r\n\r\n", 21);
    if (sendto(s->sock, out, at, 0, (const struct sockaddr *)to, sizeof *to) >= 0) {
        atomic_fetch_add(&s->answered, 1);
        if (s->oc_log && via_len > 0) log_oc_sent(s->oc_log, key, msg, len, status, out + via_at, via_len);
    }
}

/* The serving thread: takes MU messages a second out of the scheduler, answers them, and reports
 * the queue to the overload-control server every 10 ms. */
static void *serve(void *arg) {
    server_t *s = arg;
    const double slot_ns = 1e9 / s->mu;
    uint64_t base = now_ns();
    double credit = 0; /* service slots available now */
    uint64_t report_at = base + 10000000ull;
    uint64_t served = 0, served_retx = 0, busy_slots = 0, newest_wait = 0;
    while (!stop_requested) {
        uint64_t t = now_ns();
        credit += (double)(t - base) / slot_ns;
        base = t;
        int worked = 0;
        while (credit >= 1.0) {
            uintptr_t token;
            lc_class cls;
            if (lc_scheduler_pop(s->sched, &token, &cls) != LC_RESULT_OK) {
                credit = credit > 1.0 ? 1.0 : credit; /* an idle server banks no slots */
                break;
            }
            credit -= 1.0;
            worked = 1;
            item_t *it = (item_t *)token;
            uint64_t popped = now_ns();
            busy_slots++;
            /* What the law is told was served: the requests it counted (lc_oc_server_on_request,
             * not ACKs), so capacity and demand are in the same unit; the busy time is all. */
            if (it->counted) {
                served++;
                if (cls == LC_CLASS_RETRANSMISSION) served_retx++;
            }
            if (cls == LC_CLASS_ORIGINAL) newest_wait = popped > it->arrived_ns ? popped - it->arrived_ns : 0;
            /* A retransmission costs its slot but is not answered again: the first copy was served
             * before it (PRSM serves originals first; FIFO in arrival order) and answered then. */
            if (cls == LC_CLASS_ORIGINAL && strncmp(it->msg, "ACK ", 4) != 0) respond(s, it->msg, it->len, &it->from, 200, "OK");
            free(it);
        }
        if (t >= report_at) {
            lc_scheduler_counters sc;
            lc_scheduler_stats(s->sched, &sc);
            if (s->oc) {
                lc_oc_queue_load q;
                q.delay_ns = sc.primary.len > 0 ? newest_wait : 0;
                q.served = served;
                q.served_retransmissions = served_retx;
                q.busy_ns = (uint64_t)((double)busy_slots * slot_ns);
                lc_oc_server_report_queue(s->oc, t, &q);
            }
            atomic_fetch_add(&s->served, busy_slots);
            atomic_fetch_add(&s->served_retx, served_retx);
            served = served_retx = busy_slots = 0;
            report_at = t + 10000000ull;
        }
        if (!worked) {
            struct timespec ts = {0, 500000}; /* 0.5 ms */
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

static void print_stats(server_t *s) {
    printf("server_received_total %lu\nserver_served_total %lu\nserver_served_retransmissions_total %lu\n"
           "server_dropped_total %lu\nserver_rejected_total %lu\nserver_answered_total %lu\nserver_malformed_total %lu\n",
           atomic_load(&s->received), atomic_load(&s->served), atomic_load(&s->served_retx), atomic_load(&s->dropped),
           atomic_load(&s->rejected), atomic_load(&s->answered), atomic_load(&s->malformed));
    if (s->oc) {
        lc_oc_server_state st;
        if (lc_oc_server_status(s->oc, &st) == LC_RESULT_OK) {
            printf("server_oc_overloaded %u\nserver_oc_target_per_second %.3f\nserver_oc_service_rate_per_second %.3f\n"
                   "server_oc_delay_ms %.3f\nserver_oc_clients %llu\n",
                   st.overloaded, (double)st.target_milli / 1000.0, (double)st.service_rate_milli / 1000.0,
                   (double)st.delay_ns / 1e6, (unsigned long long)st.clients);
        }
    }
    puts("# EOF"); /* the dump is whole */
    fflush(stdout);
}

static int usage(void) {
    fprintf(stderr, "usage: server --listen IP:PORT --rate MU [--scheduler prsm|fifo] [--buffer N] [--overload-control]\n"
                    "              [--validity-ms N] [--log-oc FILE]\n");
    return 2;
}

int main(int argc, char **argv) {
    static server_t s;
    const char *listen_at = NULL, *scheduler = "prsm";
    long buffer = 10000, validity_ms = 500;
    int overload_control = 0;
    const char *log_oc = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--overload-control") == 0) {
            overload_control = 1;
            continue;
        }
        if (i + 1 >= argc) return usage();
        if (strcmp(argv[i], "--listen") == 0) listen_at = argv[++i];
        else if (strcmp(argv[i], "--rate") == 0) s.mu = atof(argv[++i]);
        else if (strcmp(argv[i], "--scheduler") == 0) scheduler = argv[++i];
        else if (strcmp(argv[i], "--buffer") == 0) buffer = atol(argv[++i]);
        else if (strcmp(argv[i], "--validity-ms") == 0) validity_ms = atol(argv[++i]);
        else if (strcmp(argv[i], "--log-oc") == 0) log_oc = argv[++i];
        else return usage();
    }
    struct sockaddr_in addr;
    int prsm = strcmp(scheduler, "prsm") == 0;
    if (!listen_at || parse_addr(listen_at, &addr) || !(s.mu > 0) || buffer < 2 || validity_ms < 1 ||
        (!prsm && strcmp(scheduler, "fifo") != 0)) {
        return usage();
    }
    lc_scheduler_config sc;
    memset(&sc, 0, sizeof sc);
    sc.discipline = prsm ? LC_DISCIPLINE_PRIORITY : LC_DISCIPLINE_FIFO;
    /* PRSM splits the buffer evenly between its queues (the FIFO's memory). */
    sc.primary_capacity = prsm ? (size_t)(buffer + 1) / 2 : (size_t)buffer;
    sc.secondary_capacity = prsm ? (size_t)buffer / 2 : 1;
    if (lc_scheduler_new(&sc, &s.sched) != LC_RESULT_OK || lc_detector_new(NULL, &s.det) != LC_RESULT_OK) {
        fprintf(stderr, "server: cannot create the scheduler: %s\n", lc_result_text(LC_RESULT_INVALID_ARGUMENT));
        return 1;
    }
    if (overload_control) {
        lc_oc_server_config oc;
        lc_oc_server_config_default(&oc);
        oc.validity_ms = (uint64_t)validity_ms;
        lc_result r = lc_oc_server_new(&oc, &s.oc);
        if (r == LC_RESULT_OK) r = lc_engine_new(NULL, &s.engine);
        if (r != LC_RESULT_OK) {
            fprintf(stderr, "server: cannot start overload control: %s\n", lc_result_text(r));
            return 2;
        }
    }
    if (log_oc && !(s.oc_log = fopen(log_oc, "a"))) {
        fprintf(stderr, "server: cannot open %s: %s\n", log_oc, strerror(errno));
        return 1;
    }
    if (s.oc_log) setvbuf(s.oc_log, NULL, _IOLBF, 0); /* a line as soon as it is sent: tail -f, a kill */
    s.sock = socket(AF_INET, SOCK_DGRAM, 0);
    if (s.sock < 0 || bind(s.sock, (struct sockaddr *)&addr, sizeof addr) < 0) {
        fprintf(stderr, "server: cannot listen on %s: %s\n", listen_at, strerror(errno));
        return 1;
    }
    int bufsize = 4 << 20;
    setsockopt(s.sock, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
    struct timeval tick = {0, 50000};
    setsockopt(s.sock, SOL_SOCKET, SO_RCVTIMEO, &tick, sizeof tick);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    pthread_t server_thread;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int pr = pthread_create(&server_thread, NULL, serve, &s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pr != 0) return 1;
    fprintf(stderr, "server: listening on %s, %.1f messages/s, %s, buffer %ld%s\n", listen_at, s.mu, scheduler, buffer,
            overload_control ? ", overload control" : "");
    static char buf[MAX_MSG + 1];
    while (!stop_requested) {
        if (stats_requested) {
            stats_requested = 0;
            print_stats(&s);
        }
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        ssize_t n = recvfrom(s.sock, buf, MAX_MSG, 0, (struct sockaddr *)&from, &fl);
        if (n <= 0 || strncmp(buf, "SIP/2.0 ", 8) == 0) continue; /* nothing, or a response: ignored */
        uint64_t t = now_ns();
        atomic_fetch_add(&s.received, 1);
        /* One scan for the detector and the overload category: it points into buf, which stays
         * as it is until both are done. A request that does not scan is refused by the
         * detector (and counted malformed). */
        lc_scanned_sip scan;
        (void)lc_sip_scan((const uint8_t *)buf, (size_t)n, &scan);
        lc_class cls = LC_CLASS_ORIGINAL;
        if (lc_detector_observe_scanned(s.det, &scan, t, &cls) != LC_RESULT_OK) {
            atomic_fetch_add(&s.malformed, 1);
            continue;
        }
        lc_oc_category cat = LC_OC_CATEGORY_NONE;
        /* The request's origin: its source address, for the engine's priority_peers (this
         * server keeps no dialogs, so it sets no LC_SIP_KNOWN_DIALOG). */
        lc_sip_options origin;
        memset(&origin, 0, sizeof origin);
        origin.source.family = LC_IP_V4;
        memcpy(origin.source.addr, &from.sin_addr, 4);
        if (s.oc) lc_oc_category_scanned(s.engine, &scan, &origin, &cat);
        if (s.oc && cat != LC_OC_CATEGORY_NONE) {
            char key[32];
            addr_key(&from, key, sizeof key);
            size_t vl = 0;
            size_t at = find_header(buf, (size_t)n, "Via", "v", &vl);
            lc_str k = {(const uint8_t *)key, strlen(key)};
            lc_str v = {(const uint8_t *)(at ? buf + at : NULL), at ? vl : 0};
            lc_oc_admission adm = LC_OC_ADMISSION_ADMIT;
            lc_oc_server_on_request(s.oc, t, k, v, cls, cat, &adm);
            if (adm == LC_OC_ADMISSION_REJECT) {
                atomic_fetch_add(&s.rejected, 1);
                respond(&s, buf, (size_t)n, &from, 503, "Service Unavailable");
                continue;
            }
        }
        item_t *it = malloc(sizeof *it + (size_t)n);
        if (!it) continue;
        it->from = from;
        it->arrived_ns = t;
        it->cls = cls;
        it->counted = cat != LC_OC_CATEGORY_NONE;
        it->len = (size_t)n;
        memcpy(it->msg, buf, (size_t)n);
        if (lc_scheduler_push(s.sched, (uintptr_t)it, cls) != LC_RESULT_OK) {
            atomic_fetch_add(&s.dropped, 1);
            /* A dropped original: the client's next copy must compete as an original again. (A
             * dropped retransmission changes nothing: its original is queued or served.) */
            bool forgotten;
            if (cls == LC_CLASS_ORIGINAL) lc_detector_forget_sip(s.det, (const uint8_t *)buf, (size_t)n, &forgotten);
            free(it);
        }
    }
    pthread_join(server_thread, NULL);
    print_stats(&s);
    uintptr_t token;
    lc_class cls;
    while (lc_scheduler_pop(s.sched, &token, &cls) == LC_RESULT_OK) free((item_t *)token);
    lc_scheduler_free(s.sched);
    lc_detector_free(s.det);
    lc_oc_server_free(s.oc);
    lc_engine_free(s.engine);
    if (s.oc_log) fclose(s.oc_log);
    close(s.sock);
    return 0;
}
