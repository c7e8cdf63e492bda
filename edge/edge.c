/* edge: a small stateless SIP edge proxy (UDP and TCP) that enforces RFC 7200 load-filtering
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
 *
 * With --subscribe it is an RFC 7200 subscriber: it SUBSCRIBEs to the notifier (the `load-control`
 * event package, through libloadctl's subscriber state machine and its SIP wire functions),
 * applies every NOTIFY body it receives, refreshes before the subscription expires, re-SUBSCRIBEs
 * after a version gap, and unsubscribes on SIGINT/SIGTERM. Until the notifier's first answer is
 * in force (or --startup-hold-ms passes, default 2000) requests are held, not handled (the
 * startup hold, below). Its SUBSCRIBEs are retransmitted over
 * UDP until a response arrives (Timer E: T1 doubling up to T2, for 64·T1). The subscriber speaks
 * UDP only. The first SUBSCRIBE of a subscription goes to --notifier IP:PORT (default: the
 * notifier URI's host:port); refreshes, re-SUBSCRIBEs and the unsubscribe go to the dialog's
 * remote target — the Contact of the notifier's 200 and NOTIFYs — or to the first proxy of its
 * route set (RFC 3261 §12.2.1.1), as lc_subscriber_wire_next_hop says; a next hop that is not
 * an IPv4 address is logged and the request goes to --notifier. A NOTIFY without a body leaves
 * the policy in force (RFC 7200 §4.8). Documents applied with warnings and refused documents
 * are logged with the notifier and the version, and counted (SIGUSR1).
 *
 * Until the notifier's first policy is in force, --fallback-policy's rules are enforced, or,
 * without it, a new request no rule matches is answered 503 without Retry-After: never an
 * unlimited release.
 *
 * Every request is first validated (RFC 3261 §16.3, validate.c: 400/416/420/482/483, or dropped
 * when no usable Via routes an answer), then classified with lc_classify_sip_opts, with the transport it came on and the
 * next hop as its target entity (`sip:IP:PORT` of --next-hop, where the edge forwards it), so
 * rules with a `target-sip-entity` naming the next hop apply (RFC 7200 §5.3.3); rules without
 * one apply whatever the target. Emergency requests (urn:service:sos…, RFC 5031) and requests
 * whose Resource-Priority namespace is listed (RFC 4412; default ets, wps) pass before any rule
 * is tried, unless --no-emergency-exempt / --priority-namespaces "" turn that off. A notifier's
 * redirect to a target outside its own domain and --redirect-allow is answered 503 instead
 * (RFC 7200 §7; the subscriber logs each such rule once); the --policy file is trusted.
 * Excess is answered 503 (Retry-After only with --retry-after) (or 302 with the
 * rule's targets as Contacts); everything else is forwarded statelessly to the next hop with
 * this proxy's Via on top (RFC 3261 §16.11: the branch is derived from the incoming one, so
 * retransmissions get the same branch). Responses coming back lose that Via and go to the
 * address in the next Via (received/rport when present). Window admissions are released when a
 * final response for the same Call-ID and CSeq passes back, or after 32 s.
 *
 * Retransmissions. Over UDP a UAC sends a request again until it hears back (Timer A/E). Every
 * request but ACK and CANCEL is shown once to libloadctl's retransmission detector (RFC 3261
 * transaction key, remembered 64·T1); only originals are classified. What was done with one
 * (forwarded, answered 503, shed for overload control, dropped) is remembered per thread in a
 * 4-way set-associative table (DECIDED entries, 32 s), and its retransmissions get the same without
 * being classified again: forwarded with the same branch (RFC 3261 §16.11: "a retransmitted
 * request MUST be forwarded to the same destination each time it is processed"), or the same
 * 503. So a retransmission takes no second rate token and no second window slot (RFC 7200
 * limits new requests; a window slot is per transaction), and the retransmitted INVITE of an
 * admitted call is not answered 503 while the UAS has the original. A retransmission whose
 * decision is not remembered (evicted, its original before a restart, or a 302: its Contacts
 * are not kept) is classified like an original; SIGUSR1 counts originals, retransmissions,
 * repeated and unremembered ones.
 *
 * Transports. The request and response handling (`handle`) is the same for both; a `peer_t`
 * says where a message came from and where an answer goes, and only `deliver` looks at the
 * transport. Each transport has its own thread and its own `lc_worker` (engine shard), so the
 * UDP loop is the one it was before TCP existed (one blocking recvmmsg per batch, no epoll)
 * and the engine enforces every limit across both:
 * - UDP (main thread): recvmmsg/sendmmsg in batches of 32.
 * - TCP (second thread, epoll): a listening socket on the same address and port, a bounded
 *   table of connections (--max-connections inbound, excess closed at once; silent ones closed
 *   after --tcp-idle-s), messages framed
 *   by Content-Length (sipstream.h; 400 and close when it is missing or invalid, close past
 *   64 KiB), RFC 5626 keep-alive pings answered, and one persistent connection to the next
 *   hop (non-blocking connect, reconnected when it breaks). A request that came over TCP goes
 *   on over TCP with `Via: SIP/2.0/TCP …;lc-conn=SLOT.GEN`: the inbound connection's slot and
 *   the slot's generation, so the response that comes back with that Via is sent on the
 *   connection the request came on (RFC 3261 §18.2.2) without per-transaction state, and is
 *   dropped when that connection has gone meanwhile (the generation no longer matches).
 *   Output is buffered per connection (bounded; a connection whose buffer overflows is closed)
 *   and written once per event-loop pass.
 *
 * With --overload-control it takes part in feedback overload control (RFC 7339 loss-based, RFC
 * 7415 rate-based; libloadctl's lc_oc_* functions), in both roles:
 * - client of its next hop: its Via carries `;oc;oc-algo="loss,rate"` (--oc-algorithms; `loss`
 *   for a next hop whose SIP parser cannot take a comma inside a quoted Via parameter, as
 *   Kamailio 5.6's cannot); the oc values in the
 *   responses coming back through that Via are applied; each new request (an original, told
 *   from retransmissions by libloadctl's retransmission detector; not ACK or CANCEL) is asked
 *   lc_oc_decide after classification, in its category (in-dialog, emergency and priority
 *   namespaces are the category reduced last; for the rate algorithm their tolerance is 100·T
 *   instead of RFC 7415's 10·T, so bursts of BYEs pass); a shed request is answered 503 without
 *   Retry-After (RFC 7339 §5.10: the edge has no other next hop). A new request that got no
 *   response within --oc-timeout-ms (default 32000, Timer B) counts as a timeout: three in a row
 *   suspend the next hop, probed with back-off until it answers (§5.9; tracked best effort in a
 *   direct-mapped table of 8192 transactions per thread);
 * - server to its upstream clients when its own processing is the bottleneck: the UDP thread's
 *   busy share (time spent on messages over wall time, per 100 ms) is reported as an occupancy
 *   against --oc-occupancy-target (default 80 %); the next Via of every response going upstream
 *   (the client's) gets this edge's oc values for that client (by its address), and requests of
 *   clients without `oc` are answered 503 without Retry-After in the share the law sets
 *   (§5.10.2). Values a downstream server put into that Via are replaced, never passed on
 *   (§5.4).
 *
 * SIGHUP reloads the policy file (an invalid file is reported and the old policy stays);
 * SIGUSR1 prints what --metrics serves (metrics.c: Prometheus text, per-rule totals kept
 * monotonic over policy changes); SIGINT/SIGTERM unsubscribe once and exit. Log lines on
 * stderr start with the UTC time (ISO 8601, milliseconds). */
#define _GNU_SOURCE /* recvmmsg, sendmmsg, accept4 */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "loadctl.h"
#include "metrics.h"
#include "sipstream.h"
#include "validate.h"
#include "sipmsg.h"

#define MAX_MSG 65535
#define PENDING 4096
/* Datagrams read (recvmmsg) and written (sendmmsg) per system call. */
#define BATCH 32
#define TIMER_B_NS (32ull * 1000000000ull)
#define T1_NS 500000000ull
#define T2_NS 4000000000ull
#define EXPIRE_EVERY_NS 100000000ull
/* Branches of this edge's own SUBSCRIBEs start with this (after the RFC 3261 cookie). */
#define SUB_BRANCH "z9hG4bKlcsub"
/* The To tag of the answers the edge sends itself (503, 302). */
#define EDGE_TAG "lc-edge"
/* The Via parameter naming the inbound TCP connection of a forwarded request. */
#define CONN_PARAM ";lc-conn="
/* TCP: bytes read per recv when a connection has nothing buffered; output buffered per inbound
 * connection and for the next hop (which carries every TCP request); how long after a failed
 * connect to the next hop the next attempt may start; how long a connection closed after a
 * framing error waits for its peer to close before it is dropped. */
#define TCP_RX 262144
#define TCP_OUT_MAX (1u << 20)
#define HOP_OUT_MAX (8u << 20)
#define RECONNECT_NS 100000000ull
#define LINGER_CLOSE_NS 2000000000ull
/* Overload control: transactions tracked per thread for timeouts (direct-mapped), and how
 * often the UDP thread reports its occupancy. */
#define OC_WAIT 8192
#define OC_REPORT_NS 100000000ull
/* Retransmissions: the decisions remembered per thread, so that a retransmission gets what its
 * original got: DECIDED entries in sets of DECIDED_WAYS; a transaction is looked up among the
 * entries of its set, and a new one takes the set's oldest entry. A retransmission comes 0.5 to
 * 32 s after its original (Timer A/E, T1 doubling; RFC 3261 §17.1.1.2, §17.1.2.2), so what
 * must survive is the youngest few seconds of transactions: at 4,000 new requests/s about
 * 16,000 in the first 4 s, well inside 65,536 entries. A direct-mapped table of the same size
 * lost about 1 live entry in 400 to collisions at only 120 calls/s (tests/e2e/test_faults.py
 * call_path_lossy: the retransmitted INVITE of an admitted call classified again and answered
 * 503). 24 bytes each: 1.5 MiB per thread. */
#define DECIDED 65536
#define DECIDED_WAYS 4

static volatile sig_atomic_t reload_requested = 0;
static volatile sig_atomic_t stats_requested = 0;
static volatile sig_atomic_t stop_requested = 0;
/* Set by the main thread when the TCP thread must end. */
static atomic_int tcp_stop;

static void on_signal(int sig) {
    if (sig == SIGHUP) reload_requested = 1;
    else if (sig == SIGUSR1) stats_requested = 1;
    else stop_requested = 1;
}

/* One log line on stderr, `2026-01-31T12:00:00.123Z edge: …`: UTC wall-clock time with
 * milliseconds, so the lines of several hosts sort together. One fprintf per line: the two
 * threads' lines do not interleave. */
static void elog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void elog(const char *fmt, ...) {
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

/* A window admission waiting for its final response. */
typedef struct {
    unsigned long hash;
    uint64_t deadline_ns;
    lc_ticket ticket;
    int used;
} pending_t;

/* Where a message came from, and so where its answer goes: a UDP address, or a TCP connection
 * (a slot of the connection table and the generation the slot had). */
typedef struct {
    int tcp;
    struct sockaddr_in addr;
    unsigned slot;
    uint32_t gen;
} peer_t;

/* What was done with a request (an original, or a retransmission whose decision was not
 * remembered), for its retransmissions: forwarded (admitted, exempt), answered 503 by a rule
 * (`status`), shed for overload control (503 without Retry-After), dropped (TCP). A 302 is not
 * remembered: its Contacts would be needed, so a retransmission of a redirected request is
 * classified again (counted as unremembered). */
/* DM_NO_POLICY: answered 503 without Retry-After because no notifier policy had arrived. */
enum { DM_NONE = 0, DM_FORWARDED, DM_ANSWERED, DM_OC_SHED, DM_DROPPED, DM_NO_POLICY };

typedef struct {
    unsigned long hash; /* decision_key() of the transaction */
    uint64_t at_ns;     /* when its original was decided: the entry counts for Timer B after it */
    uint16_t status;
    uint8_t kind; /* DM_* */
} decided_t;

/* Counters of one worker thread. Each is written by its own thread only (relaxed load + store,
 * no locked instruction) and read by the main thread for SIGUSR1. */
typedef struct {
    atomic_ulong forwarded, answered, malformed, absorbed, dropped;
    atomic_ulong tcp_accepted, tcp_refused, tcp_closed, tcp_framing_errors, tcp_too_large, tcp_overflows;
    atomic_ulong tcp_pings, tcp_responses_orphaned, hop_connects, hop_failures, forward_failures, tcp_idle_closed;
    atomic_ulong oc_shed, oc_rejected, oc_bad_feedback, oc_timeouts;
    atomic_ulong originals, retransmissions, retx_repeated, retx_unremembered;
    atomic_ulong invalid[SV_COUNT]; /* requests not forwarded by RFC 3261 §16.3, by reason */
    atomic_ulong no_policy_rejected;
} counters_t;

/* A new request forwarded with overload control, waiting for any response. */
typedef struct {
    unsigned long hash;
    uint64_t deadline_ns; /* 0: free */
} oc_wait_t;

#define BUMP(x) atomic_store_explicit(&(x), atomic_load_explicit(&(x), memory_order_relaxed) + 1, memory_order_relaxed)
#define READ(x) atomic_load_explicit(&(x), memory_order_relaxed)

/* One TCP connection: inbound (accepted) or the one to the next hop. */
typedef struct {
    int fd; /* -1: the slot is free */
    uint32_t gen;
    int outbound, connecting;
    int closing;  /* no more messages are taken from it; closed once its output is written */
    int lingering; /* closing, output written and FIN sent: waiting for the peer's */
    int dead;     /* to be closed at the end of this event-loop pass (buffer overflow, …) */
    int dirty;    /* on the list of connections with output to write */
    int want_out; /* EPOLLOUT is armed */
    struct sockaddr_in peer;
    sf_state sf;
    char *in; /* the unfinished message (MAX_MSG bytes, allocated only while there is one) */
    size_t in_len;
    char *out;
    size_t out_len, out_off, out_cap, out_max;
    uint64_t close_at;
    uint64_t last_rx_ns; /* when it last sent us something (for the idle timeout) */
} conn_t;

struct worker;

typedef struct {
    int udp_sock, tcp_sock;
    int udp_on, tcp_on;
    unsigned max_conns;
    uint64_t idle_ns; /* an inbound connection silent this long is closed (0: never) */
    struct sockaddr_in listen_addr;
    struct sockaddr_in next_hop;
    char next_hop_uri[64]; /* "sip:IP:PORT": the target entity requests are classified with */
    char via_host[64];     /* "IP:PORT" for this proxy's Via */
    const char *policy_path;
    const char *source;
    lc_engine *engine;
    /* Tells originals from retransmissions (RFC 3261 transaction key, remembered 64·T1), for
     * the decision memory and for overload control. Shared by both threads (thread-safe). */
    lc_detector *det;
    struct worker *udp, *tcp;
    /* The subscriber (NULL without --subscribe); the UDP thread's. */
    lc_subscriber *sub;
    struct sockaddr_in notifier_addr;
    char notifier_uri[256];
    struct sockaddr_in sub_dest; /* where the outstanding SUBSCRIBE went */
    lc_sip_wire wire;
    char sent_by[64];
    char contact[256];
    char sub_msg[MAX_MSG]; /* the outstanding SUBSCRIBE, for retransmission */
    size_t sub_len;
    char sub_branch[64];
    int sub_outstanding;
    unsigned long sub_count;
    uint64_t sub_started_ns, sub_next_rtx_ns, sub_interval_ns;
    unsigned long notifies;
    /* The startup hold (--startup-hold-ms): while the first document from the notifier is
     * awaited, requests wait in `held` (a byte arena of records: length, sender, bytes) and are
     * handled once it is in force, or when the hold ends without it. `holding` is read by the
     * TCP thread, which serves nothing meanwhile. */
    atomic_int holding;
    uint64_t hold_until_ns;
    char *held;
    size_t held_len;
    unsigned long held_count, held_dropped;
    /* Overload control (NULL without --overload-control). */
    lc_oc_client *oc;
    uint32_t oc_hop;
    char oc_params[64]; /* what the client adds to its Via */
    lc_oc_server *oc_srv;
    FILE *oc_log; /* --log-oc: a line per Via this server wrote values into, or NULL */
    uint32_t oc_target_ppm;
    uint64_t oc_timeout_ns;
    /* "Retry-After: N\r\n" for the 503s of rules, or "" (--retry-after 0, the default). */
    char retry_hdr[40];
    /* Until the notifier's first policy is in force (`no_policy`, read by both threads): the
     * --fallback-policy file is enforced, or, without one, a new request no rule matched is
     * answered 503 without Retry-After. */
    atomic_int no_policy;
    const char *fallback_path;
    /* The subscriber's counters as last seen by the UDP thread (the subscriber is that
     * thread's), for the metrics endpoint. */
    int unsubscribed; /* the unsubscribe is out: nothing else is sent on the way out */
    int sub_stopped;  /* libloadctl's subscriber reported the subscription stopped */
    pthread_mutex_t sub_mu;
    lc_subscriber_counters sub_stats;
    int sub_stats_valid;
} edge_t;

/* What one thread owns: its engine shard, its window admissions, its counters, its output. */
typedef struct worker {
    edge_t *e;
    lc_worker *lw;
    pending_t pending[PENDING];
    pending_t rehash[PENDING];
    size_t pending_live, pending_gone;
    uint64_t next_expire_ns;
    counters_t c;
    /* Outgoing datagrams, batched: one sendmmsg per batch. */
    char tx_buf[BATCH][MAX_MSG];
    struct sockaddr_in tx_addr[BATCH];
    struct iovec tx_iov[BATCH];
    struct mmsghdr tx_msg[BATCH];
    unsigned tx_count;
    /* Messages being built (an answer can be built while a forward fails). */
    char reply_buf[MAX_MSG];
    char fwd_buf[MAX_MSG];
    /* TCP (the TCP thread only). */
    int epfd;
    conn_t *conns;
    unsigned nconns, inbound, lingering;
    unsigned *free_slots, nfree;
    unsigned *dirty;
    unsigned ndirty;
    int hop; /* the slot of the next-hop connection, -1 when none */
    uint64_t hop_retry_ns;
    uint64_t next_idle_sweep_ns;
    char *rx;
    /* Overload control: this thread's shard of the client, and its waiting transactions. */
    lc_oc_shard *ocs;
    oc_wait_t ocw[OC_WAIT];
    /* What was done with recent requests, for their retransmissions. */
    decided_t decided[DECIDED];
} worker_t;

/* The source name of the --fallback-policy rules. */
#define FALLBACK_SOURCE "fallback"

static lc_str cstr(const char *s);

/* Publishes a policy file as `source` (the engine replaces that source's rules). */
static int load_policy_file(edge_t *e, const char *path, const char *source_name) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        elog("cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    static char body[1 << 20];
    size_t n = fread(body, 1, sizeof body, f);
    fclose(f);
    uint64_t generation = 0;
    lc_str source = cstr(source_name);
    lc_str none = {NULL, 0};
    /* A rule whose limit changes starts its engine counters again: totals taken before and
     * after keep the exported ones monotonic (metrics.h). */
    metrics_sample_rules(e->engine);
    lc_result r = lc_engine_publish(e->engine, source, none, (const uint8_t *)body, n, &generation);
    metrics_sample_rules(e->engine);
    if (r != LC_RESULT_OK) {
        char msg[512];
        size_t len = 0;
        lc_policy_check((const uint8_t *)body, n, (uint8_t *)msg, sizeof msg - 1, &len);
        msg[len < sizeof msg ? len : sizeof msg - 1] = 0;
        elog("%s: %s %s (keeping the current policy)\n", path, lc_result_text(r), msg);
        return -1;
    }
    elog("policy %s loaded (generation %llu)\n", path, (unsigned long long)generation);
    return 0;
}

static int load_policy(edge_t *e) { return load_policy_file(e, e->policy_path, e->source); }

static unsigned long hash_bytes(const char *a, size_t alen, const char *b, size_t blen) {
    unsigned long h = 1469598103934665603ul;
    for (size_t i = 0; i < alen; i++) h = (h ^ (unsigned char)a[i]) * 1099511628211ul;
    h = (h ^ 0xff) * 1099511628211ul;
    for (size_t i = 0; i < blen; i++) h = (h ^ (unsigned char)b[i]) * 1099511628211ul;
    return h ? h : 1;
}

/* Call-ID and CSeq number identify the transaction for window tickets. */
static unsigned long transaction_hash(const char *msg, size_t len) {
    size_t cl = 0, sl = 0;
    size_t c = find_header(msg, len, "Call-ID", "i", &cl);
    size_t s = find_header(msg, len, "CSeq", NULL, &sl);
    size_t num = 0;
    while (num < sl && msg[s + num] >= '0' && msg[s + num] <= '9') num++;
    return hash_bytes(msg + c, cl, msg + s, num);
}

static int is_response(const char *msg, size_t len) { return len >= 8 && strncmp(msg, "SIP/2.0 ", 8) == 0; }

/* ------------------------------------------------------------------ window admissions */

/* Each worker has its own table: a final response comes back on the transport its request
 * left on, so on the same thread. The table is open-addressed with linear probing. A slot is
 * EMPTY (a probe stops there), LIVE, or GONE (released: a probe goes on past it, an insert may
 * reuse it). Most traffic holds no window slot, so a response looks up nothing when the table
 * is empty. */
enum { SLOT_EMPTY = 0, SLOT_LIVE = 1, SLOT_GONE = 2 };

static void remember(worker_t *w, unsigned long h, lc_ticket t) {
    for (size_t k = 0; k < PENDING; k++) {
        pending_t *p = &w->pending[(h + k) % PENDING];
        if (p->used != SLOT_LIVE) {
            if (p->used == SLOT_GONE) w->pending_gone--;
            p->used = SLOT_LIVE;
            p->hash = h;
            p->ticket = t;
            p->deadline_ns = now_ns() + TIMER_B_NS;
            w->pending_live++;
            return;
        }
    }
    lc_complete(w->lw, &t); /* table full: release at once rather than leak */
}

static void forget_slot(worker_t *w, pending_t *p) {
    lc_complete(w->lw, &p->ticket);
    p->used = SLOT_GONE;
    w->pending_live--;
    w->pending_gone++;
}

static void release(worker_t *w, unsigned long h) {
    if (w->pending_live == 0) return;
    for (size_t k = 0; k < PENDING; k++) {
        pending_t *p = &w->pending[(h + k) % PENDING];
        if (p->used == SLOT_EMPTY) return;
        if (p->used == SLOT_LIVE && p->hash == h) {
            forget_slot(w, p);
            return;
        }
    }
}

/* Releases admissions whose response never came (Timer B), at most every 100 ms, and clears
 * the released slots out of the probe chains once they are a quarter of the table. */
static void oc_expire(worker_t *w, uint64_t now);

static void expire(worker_t *w) {
    uint64_t now = now_ns();
    if (now < w->next_expire_ns) return;
    w->next_expire_ns = now + EXPIRE_EVERY_NS;
    oc_expire(w, now);
    if (w->pending_live == 0 && w->pending_gone == 0) return;
    for (size_t k = 0; k < PENDING; k++) {
        if (w->pending[k].used == SLOT_LIVE && w->pending[k].deadline_ns <= now) forget_slot(w, &w->pending[k]);
    }
    if (w->pending_gone > PENDING / 4) {
        size_t n = 0;
        for (size_t k = 0; k < PENDING; k++) {
            if (w->pending[k].used == SLOT_LIVE) w->rehash[n++] = w->pending[k];
        }
        memset(w->pending, 0, sizeof w->pending);
        w->pending_live = w->pending_gone = 0;
        for (size_t k = 0; k < n; k++) {
            for (size_t j = 0; j < PENDING; j++) {
                pending_t *p = &w->pending[(w->rehash[k].hash + j) % PENDING];
                if (p->used == SLOT_EMPTY) {
                    *p = w->rehash[k];
                    w->pending_live++;
                    break;
                }
            }
        }
    }
}

/* ------------------------------------------------------------------ UDP output */

static void flush_sends(worker_t *w) {
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

static void send_to(worker_t *w, const char *msg, size_t len, const struct sockaddr_in *to) {
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

/* ------------------------------------------------------------------ TCP connections */

static void forward_response(worker_t *w, const char *msg, size_t len, int local);
static size_t build_reply(worker_t *w, const char *msg, size_t len, unsigned status, const char *reason, const lc_decision *d,
                          const char *extra);

/* epoll's cookie for a connection: its generation and slot + 1 (0 is the listening socket), so
 * that an event queued for a connection closed earlier in the same pass is recognised. */
static uint64_t conn_cookie(const conn_t *c, unsigned slot) { return ((uint64_t)c->gen << 32) | (uint64_t)(slot + 1); }

static void conn_arm(worker_t *w, unsigned slot, int want_out) {
    conn_t *c = &w->conns[slot];
    if (c->want_out == want_out) return;
    c->want_out = want_out;
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.u64 = conn_cookie(c, slot)};
    epoll_ctl(w->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

static int conn_open(worker_t *w, int fd, const struct sockaddr_in *peer, int outbound, int connecting) {
    if (w->nfree == 0) return -1;
    unsigned slot = w->free_slots[--w->nfree];
    conn_t *c = &w->conns[slot];
    uint32_t gen = c->gen;
    memset(c, 0, sizeof *c);
    c->gen = gen;
    c->fd = fd;
    c->peer = *peer;
    c->outbound = outbound;
    c->connecting = connecting;
    c->out_max = outbound ? HOP_OUT_MAX : TCP_OUT_MAX;
    c->want_out = connecting;
    c->last_rx_ns = now_ns();
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct epoll_event ev = {.events = EPOLLIN | (connecting ? EPOLLOUT : 0), .data.u64 = conn_cookie(c, slot)};
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        c->fd = -1;
        w->free_slots[w->nfree++] = slot;
        return -1;
    }
    if (!outbound) w->inbound++;
    return (int)slot;
}

static void conn_close(worker_t *w, unsigned slot) {
    conn_t *c = &w->conns[slot];
    if (c->fd < 0) return;
    close(c->fd); /* also leaves the epoll set */
    if (c->outbound) {
        if ((int)slot == w->hop) w->hop = -1;
    } else {
        w->inbound--;
    }
    if (c->lingering) w->lingering--;
    free(c->in);
    free(c->out);
    c->in = c->out = NULL;
    c->fd = -1;
    c->gen++; /* responses routed to the old connection no longer match */
    w->free_slots[w->nfree++] = slot;
    BUMP(w->c.tcp_closed);
}

static void mark_dirty(worker_t *w, unsigned slot) {
    conn_t *c = &w->conns[slot];
    if (!c->dirty) {
        c->dirty = 1;
        w->dirty[w->ndirty++] = slot;
    }
}

/* Takes a connection out of service at the end of this pass (closing it now could free the
 * buffer a message being handled lives in). */
static void conn_kill(worker_t *w, unsigned slot) {
    w->conns[slot].dead = 1;
    mark_dirty(w, slot);
}

/* Queues bytes on a connection (written at the end of the pass): 0, or -1 when the connection
 * is gone, closing, or its output buffer would overflow (then it is closed: a peer that does not
 * read what it is sent cannot be served). */
static int conn_queue(worker_t *w, unsigned slot, uint32_t gen, const char *data, size_t len) {
    if (slot >= w->nconns) return -1;
    conn_t *c = &w->conns[slot];
    if (c->fd < 0 || c->gen != gen || c->dead || c->closing) return -1;
    size_t pending = c->out_len - c->out_off;
    if (pending + len > c->out_max) {
        BUMP(w->c.tcp_overflows);
        elog("tcp: output buffer of connection %u full (%zu bytes): closing it\n", slot, pending);
        conn_kill(w, slot);
        return -1;
    }
    if (c->out_len + len > c->out_cap) {
        if (c->out_off > 0) { /* reclaim what was written */
            memmove(c->out, c->out + c->out_off, pending);
            c->out_len = pending;
            c->out_off = 0;
        }
        if (c->out_len + len > c->out_cap) {
            size_t cap = c->out_cap ? c->out_cap : 65536;
            while (cap < c->out_len + len) cap *= 2;
            char *grown = realloc(c->out, cap);
            if (!grown) {
                conn_kill(w, slot);
                return -1;
            }
            c->out = grown;
            c->out_cap = cap;
        }
    }
    memcpy(c->out + c->out_len, data, len);
    c->out_len += len;
    mark_dirty(w, slot);
    return 0;
}

/* Writes what a connection has queued; arms EPOLLOUT for the rest when the socket is full. */
static void conn_flush(worker_t *w, unsigned slot) {
    conn_t *c = &w->conns[slot];
    if (c->fd < 0 || c->connecting) return;
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c->out_off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            conn_arm(w, slot, 1);
            return;
        } else {
            conn_close(w, slot);
            return;
        }
    }
    c->out_off = c->out_len = 0;
    conn_arm(w, slot, 0);
    if (c->closing && !c->lingering) {
        /* Everything said (a 400, say): send our FIN, and close when the peer has closed too
         * (closing at once with its bytes unread would reset the connection, and the answer
         * could be lost), or after a while. */
        shutdown(c->fd, SHUT_WR);
        c->lingering = 1;
        c->close_at = now_ns() + LINGER_CLOSE_NS;
        w->lingering++;
    }
}

/* Writes every connection that has output; closes the ones killed during the pass. */
static void flush_conns(worker_t *w) {
    for (unsigned k = 0; k < w->ndirty; k++) {
        unsigned slot = w->dirty[k];
        conn_t *c = &w->conns[slot];
        c->dirty = 0;
        if (c->fd < 0) continue;
        if (c->dead) conn_close(w, slot);
        else conn_flush(w, slot);
    }
    w->ndirty = 0;
}

/* The connection to the next hop: the open one, or a new one (its connect goes on in the
 * background; what is queued meanwhile is written once it is up). -1 when none can be had
 * (the previous attempt failed less than RECONNECT_NS ago, or the table is full). */
static int hop_slot(worker_t *w) {
    if (w->hop >= 0) {
        conn_t *c = &w->conns[w->hop];
        if (c->fd >= 0 && c->outbound && !c->dead && !c->closing) return w->hop;
    }
    uint64_t now = now_ns();
    if (now < w->hop_retry_ns) return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int r = connect(fd, (const struct sockaddr *)&w->e->next_hop, sizeof w->e->next_hop);
    int slot = -1;
    if (r == 0 || errno == EINPROGRESS) slot = conn_open(w, fd, &w->e->next_hop, 1, r != 0);
    if (slot < 0) {
        close(fd);
        w->hop_retry_ns = now + RECONNECT_NS;
        BUMP(w->c.hop_failures);
        return -1;
    }
    w->hop = slot;
    BUMP(w->c.hop_connects);
    return slot;
}

/* The requests queued for a next hop that could not be reached (nothing of them was written):
 * each is answered 503 as if the next hop had answered it (RFC 3261 §16.9), and that answer
 * takes the way back of any response, by this proxy's Via, to the connection the request came
 * on. An ACK gets nothing. */
static void answer_unsent(worker_t *w, unsigned slot) {
    conn_t *c = &w->conns[slot];
    c->closing = 1; /* nothing more is queued on it */
    sf_state st;
    memset(&st, 0, sizeof st);
    for (size_t off = 0; off < c->out_len;) {
        sf_frame f = sf_next(&st, c->out + off, c->out_len - off, MAX_MSG);
        if (f.kind != SF_MESSAGE) break;
        const char *m = c->out + off;
        if (!is_response(m, f.len) && !(f.len >= 4 && strncmp(m, "ACK ", 4) == 0)) {
            size_t n = build_reply(w, m, f.header_len, 503, "Service Unavailable", NULL, w->e->retry_hdr);
            BUMP(w->c.forward_failures);
            /* RFC 7339 §5.9: a fatal transport error toward the next hop counts as a timeout */
            if (w->e->oc) lc_oc_client_on_timeout(w->e->oc, w->e->oc_hop, now_ns());
            forward_response(w, w->reply_buf, n, 1);
        }
        off += f.len;
    }
}

/* A connect to the next hop finished: up, or failed (then what was queued for it is answered
 * 503, and the next request tries again after RECONNECT_NS). */
static void hop_connected(worker_t *w, unsigned slot) {
    conn_t *c = &w->conns[slot];
    int err = 0;
    socklen_t el = sizeof err;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
        elog("tcp: cannot connect to the next hop: %s\n", strerror(err ? err : errno));
        BUMP(w->c.hop_failures);
        w->hop_retry_ns = now_ns() + RECONNECT_NS;
        answer_unsent(w, slot);
        conn_close(w, slot);
        return;
    }
    c->connecting = 0;
    conn_flush(w, slot);
}

/* ------------------------------------------------------------------ messages out */

/* Sends a message to a peer: a datagram, or onto its connection. -1 when that cannot be done
 * (the connection has gone). */
static int deliver(worker_t *w, const char *msg, size_t len, const peer_t *to) {
    if (!to->tcp) {
        send_to(w, msg, len, &to->addr);
        return 0;
    }
    if (!w->conns) return -1; /* a TCP peer seen by the UDP thread: not ours to reach */
    return conn_queue(w, to->slot, to->gen, msg, len);
}

/* Builds the answer to a request in w->reply_buf: `status` and `reason` (302 with the
 * decision's targets as Contacts), copying Via, From, To (with a tag added when it has none),
 * Call-ID and CSeq, then the header lines `extra` (NULL: none). Returns its length. */
static size_t build_reply(worker_t *w, const char *msg, size_t len, unsigned status, const char *reason, const lc_decision *d,
                          const char *extra) {
    char *out = w->reply_buf;
    const size_t cap = sizeof w->reply_buf;
    size_t at = 0;
    char line[128];
    int n = snprintf(line, sizeof line, "SIP/2.0 %u %s\r\n", status, reason);
    put(out, &at, cap, line, (size_t)n);
    size_t i = 0;
    while (i < len && msg[i] != '\n') i++;
    i++;
    while (i < len) {
        size_t end = i;
        while (end < len && msg[end] != '\n') end++;
        size_t line_len = end - i;
        if (line_len > 0 && msg[end - 1] == '\r') line_len--;
        if (line_len == 0) break;
        const char *h = msg + i;
        if (header_is(h, line_len, "Via", "v") || header_is(h, line_len, "From", "f") ||
            header_is(h, line_len, "Call-ID", "i") || header_is(h, line_len, "CSeq", NULL)) {
            put(out, &at, cap, h, line_len);
            put(out, &at, cap, "\r\n", 2);
        } else if (header_is(h, line_len, "To", "t")) {
            put(out, &at, cap, h, line_len);
            int tagged = 0;
            for (size_t k = 0; k + 4 <= line_len; k++) {
                if (strncasecmp(h + k, "tag=", 4) == 0) tagged = 1;
            }
            if (!tagged) put(out, &at, cap, ";tag=" EDGE_TAG, 5 + strlen(EDGE_TAG));
            put(out, &at, cap, "\r\n", 2);
        }
        i = end + 1;
    }
    for (size_t t = 0; d && d->verdict == LC_VERDICT_REDIRECT && t < d->target_count; t++) {
        put(out, &at, cap, "Contact: <", 10);
        put(out, &at, cap, (const char *)d->targets[t].ptr, d->targets[t].len);
        put(out, &at, cap, ">\r\n", 3);
    }
    if (extra) put(out, &at, cap, extra, strlen(extra));
    put(out, &at, cap, "Content-Length: 0\r\n\r\n", 21);
    return at;
}

static void reply_with(worker_t *w, const char *msg, size_t len, const peer_t *from, unsigned status, const char *reason,
                       const lc_decision *d, const char *extra) {
    size_t at = build_reply(w, msg, len, status, reason, d, extra);
    if (deliver(w, w->reply_buf, at, from) == 0) BUMP(w->c.answered);
}

/* A 503 carries the --retry-after of the house (none by default: RFC 3261 §21.5.4, a client
 * "SHOULD NOT forward any other requests to that server for the duration specified in the
 * Retry-After header field", so one rule over its limit would stop all traffic to the edge). */
static void reply(worker_t *w, const char *msg, size_t len, const peer_t *from, unsigned status, const char *reason,
                  const lc_decision *d) {
    reply_with(w, msg, len, from, status, reason, d, status == 503 ? w->e->retry_hdr : NULL);
}

/* RFC 7339 §5.10 / §5.10.2: a request shed for overload control is answered 503 without
 * Retry-After; so is one refused because no notifier policy has arrived (the edge, not the
 * next hop, lacks something). */
static void reply_overload(worker_t *w, const char *msg, size_t len, const peer_t *from) {
    reply_with(w, msg, len, from, 503, "Service Unavailable", NULL, NULL);
}

static void answer(worker_t *w, const char *msg, size_t len, const peer_t *from, const lc_decision *d) {
    reply(w, msg, len, from, d->status, d->status == 302 ? "Moved Temporarily" : "Service Unavailable", d);
}

/* Forwards a request with this proxy's Via on top, received= on the sender's Via, and
 * Max-Forwards decremented, over the transport it came on. Over TCP the Via names the inbound
 * connection (lc-conn=SLOT.GEN) for the response's way back. */
static void forward_request(worker_t *w, const char *msg, size_t len, const peer_t *from) {
    char *out = w->fwd_buf;
    const size_t cap = sizeof w->fwd_buf;
    size_t at = 0;
    size_t first = 0;
    while (first < len && msg[first] != '\n') first++;
    first++;
    put(out, &at, cap, msg, first);
    size_t vl = 0;
    size_t v = find_header(msg, len, "Via", "v", &vl);
    char via[256];
    int n;
    /* The branch in two parts (RFC 3261 §16.6 step 8): the transaction's, from the incoming top
     * Via and request line, and after the dot the loop-detection hash that sv_check compares
     * when the request comes back (validate.h). */
    unsigned long loop = sv_loop_hash(msg, len);
    if (from->tcp) {
        n = snprintf(via, sizeof via, "Via: SIP/2.0/TCP %s;branch=z9hG4bK-lc%lx.%lx" CONN_PARAM "%u.%u%s\r\n", w->e->via_host,
                     hash_bytes(msg + v, vl, msg, first), loop, from->slot, (unsigned)from->gen, w->e->oc_params);
    } else {
        n = snprintf(via, sizeof via, "Via: SIP/2.0/UDP %s;branch=z9hG4bK-lc%lx.%lx%s\r\n", w->e->via_host,
                     hash_bytes(msg + v, vl, msg, first), loop, w->e->oc_params);
    }
    put(out, &at, cap, via, (size_t)n);
    size_t i = first;
    int via_done = 0, mf_done = 0;
    while (i < len) {
        size_t end = i;
        while (end < len && msg[end] != '\n') end++;
        size_t line_len = end - i;
        if (line_len > 0 && msg[end - 1] == '\r') line_len--;
        const char *h = msg + i;
        if (line_len == 0) {
            /* RFC 3261 §16.6 step 3: "If the copy does not contain a Max-Forwards header field,
             * the proxy MUST add one with a field value, which SHOULD be 70." */
            if (!mf_done) put(out, &at, cap, "Max-Forwards: 70\r\n", 18);
            put(out, &at, cap, msg + i, len - i); /* the empty line and the body */
            break;
        }
        if (!via_done && header_is(h, line_len, "Via", "v")) {
            via_done = 1;
            put(out, &at, cap, h, line_len);
            char extra[96];
            char src[INET_ADDRSTRLEN];
            inet_ntop(AF_INET, &from->addr.sin_addr, src, sizeof src);
            int m = snprintf(extra, sizeof extra, ";received=%s", src);
            put(out, &at, cap, extra, (size_t)m);
            put(out, &at, cap, "\r\n", 2);
        } else if (header_is(h, line_len, "Max-Forwards", NULL)) {
            mf_done = 1;
            const char *colon = memchr(h, ':', line_len);
            int mf = colon ? atoi(colon + 1) : 70;
            char mfl[32];
            int m = snprintf(mfl, sizeof mfl, "Max-Forwards: %d\r\n", mf > 0 ? mf - 1 : 0);
            put(out, &at, cap, mfl, (size_t)m);
        } else {
            put(out, &at, cap, h, end + 1 - i);
        }
        i = end + 1;
    }
    if (!from->tcp) {
        send_to(w, out, at, &w->e->next_hop);
        BUMP(w->c.forwarded);
        return;
    }
    int hop = hop_slot(w);
    if (hop >= 0 && conn_queue(w, (unsigned)hop, w->conns[hop].gen, out, at) == 0) {
        BUMP(w->c.forwarded);
        return;
    }
    /* RFC 3261 §16.9: a transport error forwarding a request counts as a 503 from the next
     * hop. A stateless proxy answers it on the spot (an ACK gets nothing). */
    BUMP(w->c.forward_failures);
    if (w->e->oc) lc_oc_client_on_timeout(w->e->oc, w->e->oc_hop, now_ns()); /* RFC 7339 §5.9 */
    if (!(len >= 4 && strncmp(msg, "ACK ", 4) == 0)) reply(w, msg, len, from, 503, "Service Unavailable", NULL);
}

/* Where a response goes: the sent-by of a Via entry, or its received= address (RFC 3261
 * §18.2.2). `entry` is one Via value, up to its comma. */
static int via_destination(const char *entry, size_t len, struct sockaddr_in *to) {
    if (len == 0) return 0;
    char buf[256];
    size_t bl = len < sizeof buf - 1 ? len : sizeof buf - 1;
    memcpy(buf, entry, bl);
    buf[bl] = 0;
    char host[64] = {0};
    int port = 5060;
    char *sp = strstr(buf, "UDP ");
    if (!sp) sp = strstr(buf, "udp ");
    if (!sp || sscanf(sp + 4, " %63[^:;, ]:%d", host, &port) < 1) return 0;
    char *rec = strstr(buf, "received=");
    if (rec) sscanf(rec + 9, "%63[^;, ]", host);
    memset(to, 0, sizeof *to);
    to->sin_family = AF_INET;
    to->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &to->sin_addr) == 1;
}

/* The inbound connection named in this proxy's Via entry (lc-conn=SLOT.GEN): 1 when there. */
static int via_connection(const char *entry, size_t len, peer_t *to) {
    size_t pl = strlen(CONN_PARAM);
    for (size_t k = 0; k + pl < len; k++) {
        if (memcmp(entry + k, CONN_PARAM, pl) != 0) continue;
        unsigned long slot = 0, gen = 0;
        size_t j = k + pl, d = 0;
        while (j < len && entry[j] >= '0' && entry[j] <= '9' && d++ < 9) slot = slot * 10 + (unsigned long)(entry[j++] - '0');
        if (d == 0 || j >= len || entry[j] != '.') return 0;
        j++;
        d = 0;
        while (j < len && entry[j] >= '0' && entry[j] <= '9' && d++ < 10) gen = gen * 10 + (unsigned long)(entry[j++] - '0');
        if (d == 0 || gen > 0xfffffffful) return 0;
        memset(to, 0, sizeof *to);
        to->tcp = 1;
        to->slot = (unsigned)slot;
        to->gen = (uint32_t)gen;
        return 1;
    }
    return 0;
}

/* The offset of the first comma separating Via entries in a header value (len when none). */
static size_t via_comma(const char *v, size_t len) {
    int quoted = 0;
    for (size_t k = 0; k < len; k++) {
        if (v[k] == '"') quoted = !quoted;
        else if (v[k] == ',' && !quoted) return k;
    }
    return len;
}

/* The key of an upstream client as both directions know it: the request's source IP and its
 * Via sent-by port — where this edge sends the responses (received=IP, sent-by port, RFC 3261
 * §18.2.2), so a request and the response to it name the same client. */
static void client_key(const struct sockaddr_in *src, const char *via, size_t via_len, char *out, size_t cap) {
    struct sockaddr_in a = *src;
    struct sockaddr_in v;
    if (via && via_destination(via, via_len, &v)) a.sin_port = v.sin_port;
    addr_key(&a, out, cap);
}

/* Writes the Via entry `value` (one header value, possibly with further entries after a comma)
 * going upstream to `to`: with this edge's overload-control values for that client when it is
 * an overload-control server and the client takes part, else as it was. Returns the length of
 * the value written with values (at `*oc_at`, for the client `oc_key`), 0 without. */
static size_t put_upstream_via(worker_t *w, char *out, size_t *at, size_t cap, const char *value, size_t len,
                               const peer_t *to, int have_to, size_t *oc_at, char oc_key[32]) {
    put(out, at, cap, "Via: ", 5);
    const struct sockaddr_in *client = NULL;
    if (have_to && !to->tcp) client = &to->addr;
    else if (have_to && w->conns && to->slot < w->nconns && w->conns[to->slot].gen == to->gen) client = &w->conns[to->slot].peer;
    if (w->e->oc_srv && client) {
        addr_key(client, oc_key, 32);
        size_t written = 0;
        lc_str k = {(const uint8_t *)oc_key, strlen(oc_key)};
        lc_str v = {(const uint8_t *)value, len};
        if (*at < cap && lc_oc_server_write_via(w->e->oc_srv, now_ns(), k, v, (uint8_t *)out + *at, cap - *at, &written) ==
                             LC_RESULT_OK) {
            *oc_at = *at;
            *at += written;
            put(out, at, cap, "\r\n", 2);
            return written;
        }
    }
    put(out, at, cap, value, len);
    put(out, at, cap, "\r\n", 2);
    return 0;
}

static void oc_answered(worker_t *w, unsigned long h);

/* Sends a response back: drops the top Via entry (ours; several entries may share one header
 * line, as SIPp writes them) and goes to the inbound connection named in it, or over UDP to the
 * address of the next entry. With overload control, the oc values in our entry are applied
 * (the next hop's feedback; not for a response the edge made itself, `local`) and the next
 * entry gets this edge's own. */
static void forward_response(worker_t *w, const char *msg, size_t len, int local) {
    char *out = w->fwd_buf;
    const size_t cap = sizeof w->fwd_buf;
    size_t at = 0;
    size_t i = 0;
    int dropped = 0, next_done = 0;
    size_t oc_at = 0, oc_len = 0;
    char oc_key[32] = "";
    peer_t to;
    memset(&to, 0, sizeof to);
    int have_to = 0;
    while (i < len) {
        size_t end = i;
        while (end < len && msg[end] != '\n') end++;
        size_t line_len = end - i;
        if (line_len > 0 && msg[end - 1] == '\r') line_len--;
        const char *h = msg + i;
        if (i > 0 && line_len == 0) {
            put(out, &at, cap, msg + i, len - i);
            break;
        }
        if (i > 0 && header_is(h, line_len, "Via", "v")) {
            const char *colon = memchr(h, ':', line_len);
            size_t v = colon ? (size_t)(colon - h) + 1 : line_len;
            while (v < line_len && (h[v] == ' ' || h[v] == '\t')) v++;
            if (!dropped) {
                dropped = 1; /* ours: the first entry */
                size_t comma = via_comma(h + v, line_len - v);
                have_to = via_connection(h + v, comma, &to);
                if (w->e->oc && !local) { /* the next hop's answer, not one the edge made */
                    lc_oc_applied applied;
                    lc_str ours = {(const uint8_t *)h + v, comma};
                    if (lc_oc_client_on_response(w->e->oc, w->e->oc_hop, now_ns(), ours, &applied) != LC_RESULT_OK) {
                        BUMP(w->c.oc_bad_feedback);
                    }
                    oc_answered(w, transaction_hash(msg, len));
                }
                if (comma == line_len - v) {
                    i = end + 1;
                    continue;
                }
                v += comma + 1;
                while (v < line_len && (h[v] == ' ' || h[v] == '\t')) v++;
                if (!have_to) have_to = via_destination(h + v, via_comma(h + v, line_len - v), &to.addr);
                oc_len = put_upstream_via(w, out, &at, cap, h + v, line_len - v, &to, have_to, &oc_at, oc_key);
                next_done = 1;
                i = end + 1;
                continue;
            }
            if (!have_to) have_to = via_destination(h + v, via_comma(h + v, line_len - v), &to.addr);
            if (!next_done) {
                next_done = 1;
                oc_len = put_upstream_via(w, out, &at, cap, h + v, line_len - v, &to, have_to, &oc_at, oc_key);
                i = end + 1;
                continue;
            }
        }
        put(out, &at, cap, h, end + 1 - i);
        i = end + 1;
    }
    /* A final response ends the transaction: release its window slot. */
    if (len > 12 && msg[7] == ' ' && msg[8] >= '2') release(w, transaction_hash(msg, len));
    if (have_to && deliver(w, out, at, &to) != 0) BUMP(w->c.tcp_responses_orphaned); /* its connection has gone */
    else if (have_to && oc_len && w->e->oc_log) log_oc_sent(w->e->oc_log, oc_key, msg, len, status_code(msg, len), out + oc_at, oc_len);
}

/* ------------------------------------------------------------------ overload control */

/* A new request was forwarded with overload control: wait for a response to it. */
static void oc_track(worker_t *w, unsigned long h, uint64_t now) {
    oc_wait_t *slot = &w->ocw[h % OC_WAIT];
    slot->hash = h; /* an older transaction in this slot is no longer tracked (best effort) */
    slot->deadline_ns = now + w->e->oc_timeout_ns;
}

/* Any response for the transaction ends its wait. */
static void oc_answered(worker_t *w, unsigned long h) {
    oc_wait_t *slot = &w->ocw[h % OC_WAIT];
    if (slot->deadline_ns && slot->hash == h) slot->deadline_ns = 0;
}

/* Transactions that waited past the timeout: a timeout each (RFC 7339 §5.9). */
static void oc_expire(worker_t *w, uint64_t now) {
    if (!w->e->oc) return;
    for (size_t k = 0; k < OC_WAIT; k++) {
        if (w->ocw[k].deadline_ns && w->ocw[k].deadline_ns <= now) {
            w->ocw[k].deadline_ns = 0;
            lc_oc_client_on_timeout(w->e->oc, w->e->oc_hop, now);
            BUMP(w->c.oc_timeouts);
        }
    }
}

/* The first entry of the top Via of a message (empty when none). */
static lc_str top_via(const char *msg, size_t len) {
    size_t vl = 0;
    size_t v = find_header(msg, len, "Via", "v", &vl);
    lc_str out = {NULL, 0};
    if (v) {
        out.ptr = (const uint8_t *)msg + v;
        out.len = via_comma(msg + v, vl);
    }
    return out;
}

/* ------------------------------------------------------------------ retransmissions */

/* The key of a request's transaction in the decision memory: Call-ID, CSeq (number and method)
 * and the top Via's branch. The detector's RFC 3261 key (branch, sent-by, method, CSeq number)
 * is not exposed; this one is the same for every copy of a request, and the memory is asked
 * only about requests the detector has already called retransmissions. The Call-ID keeps
 * apart requests of RFC 2543 clients, whose branches may be missing or not unique. */
static unsigned long decision_key(const char *msg, size_t len) {
    size_t cl = 0, sl = 0;
    size_t c = find_header(msg, len, "Call-ID", "i", &cl);
    size_t s = find_header(msg, len, "CSeq", NULL, &sl);
    lc_str via = top_via(msg, len);
    const char *v = (const char *)via.ptr;
    size_t b = 0, bl = 0;
    for (size_t k = 0; v && k + 7 <= via.len; k++) {
        if (strncasecmp(v + k, "branch=", 7) == 0) {
            b = k + 7;
            while (b + bl < via.len && v[b + bl] != ';' && v[b + bl] != ' ' && v[b + bl] != '\t') bl++;
            break;
        }
    }
    unsigned long h = hash_bytes(msg + c, cl, msg + s, sl);
    return h ^ (hash_bytes(v ? v + b : "", bl, "", 0) * 0x9e3779b97f4a7c15ul);
}

/* The decision-memory entry of transaction `key`: its own when it has one, else the oldest of
 * its set (the one a new decision replaces). */
static decided_t *decision_slot(decided_t *table, unsigned long key) {
    decided_t *set = &table[(key % (DECIDED / DECIDED_WAYS)) * DECIDED_WAYS];
    decided_t *oldest = &set[0];
    for (int i = 0; i < DECIDED_WAYS; i++) {
        if (set[i].hash == key) return &set[i];
        if (set[i].at_ns < oldest->at_ns) oldest = &set[i];
    }
    return oldest;
}

/* Records what was done with a request for its retransmissions (`slot` NULL: the request was
 * not observed by the detector, nothing is recorded). */
static void record_decision(decided_t *slot, unsigned long key, int kind, unsigned status, uint64_t now) {
    if (!slot) return;
    slot->hash = key;
    slot->kind = (uint8_t)kind;
    slot->status = (uint16_t)status;
    slot->at_ns = now;
}

/* ------------------------------------------------------------------ the RFC 7200 subscriber */

static lc_str cstr(const char *s) {
    lc_str out = {(const uint8_t *)s, s ? strlen(s) : 0};
    return out;
}

/* The host:port of a SIP URI into an address (for --subscribe without --notifier, and the
 * subscription's next hop). URI parameters and a `>` end the host:port. */
static int uri_addr(const char *uri, struct sockaddr_in *out) {
    const char *at = strchr(uri, '@');
    const char *host = at ? at + 1 : (strncmp(uri, "sip:", 4) == 0 ? uri + 4 : uri);
    char hp[96];
    size_t n = strcspn(host, ";>?");
    if (n >= sizeof hp) return -1;
    memcpy(hp, host, n);
    hp[n] = 0;
    if (!strchr(hp, ':')) {
        if (n + 5 >= sizeof hp) return -1;
        strcat(hp, ":5060");
    }
    return parse_addr(hp, out);
}

/* The notifier's answer is in force (a document applied, or a NOTIFY without a body: nothing
 * to enforce): the fallback policy goes, and requests no rule matches pass from now on. */
static void notifier_policy_in_force(edge_t *e) {
    if (!atomic_load(&e->no_policy)) return;
    atomic_store(&e->no_policy, 0);
    if (e->fallback_path) {
        uint64_t generation = 0;
        metrics_sample_rules(e->engine);
        lc_engine_withdraw(e->engine, cstr(FALLBACK_SOURCE), &generation);
        metrics_sample_rules(e->engine);
        elog("fallback policy %s withdrawn: the notifier's is in force (generation %llu)", e->fallback_path,
             (unsigned long long)generation);
    }
}

static void log_subscriber_events(edge_t *e) {
    lc_subscriber_event ev;
    int in_force = 0;
    while (lc_subscriber_poll_event(e->sub, &ev) == LC_RESULT_OK) {
        const char *what = "event";
        int refused = 0;
        switch (ev.kind) {
        case LC_SUBSCRIBER_EVENT_KIND_SUBSCRIBED: what = "subscribed (seconds)"; break;
        case LC_SUBSCRIBER_EVENT_KIND_PENDING: what = "pending"; break;
        case LC_SUBSCRIBER_EVENT_KIND_POLICY_APPLIED: what = "policy applied (version)"; e->hold_until_ns = 0; in_force = 1; break;
        case LC_SUBSCRIBER_EVENT_KIND_POLICY_WITHDRAWN: what = "policy withdrawn"; break;
        case LC_SUBSCRIBER_EVENT_KIND_DOCUMENT_IGNORED: what = "document ignored (version)"; break;
        case LC_SUBSCRIBER_EVENT_KIND_INVALID_DOCUMENT: what = "invalid document, policy kept"; refused = 1; e->hold_until_ns = 0; break;
        case LC_SUBSCRIBER_EVENT_KIND_APPLY_FAILED: what = "document refused by the engine"; refused = 1; e->hold_until_ns = 0; break;
        case LC_SUBSCRIBER_EVENT_KIND_DOCUMENT_WARNINGS: what = "document warnings (version)"; break;
        case LC_SUBSCRIBER_EVENT_KIND_NOTHING_TO_UPDATE: what = "NOTIFY without body, policy kept"; e->hold_until_ns = 0; in_force = 1; break;
        case LC_SUBSCRIBER_EVENT_KIND_UNKNOWN_BODY: what = "unknown body discarded"; break;
        case LC_SUBSCRIBER_EVENT_KIND_REDIRECT_OUTSIDE_ALLOW_LIST: what = "redirect outside the allow-list"; break;
        case LC_SUBSCRIBER_EVENT_KIND_NOTIFY_REJECTED: what = "NOTIFY rejected (status)"; break;
        case LC_SUBSCRIBER_EVENT_KIND_RETRYING: what = "retrying"; break;
        case LC_SUBSCRIBER_EVENT_KIND_LAPSED: what = "subscription lapsed"; break;
        case LC_SUBSCRIBER_EVENT_KIND_STOPPED: what = "subscription stopped"; e->hold_until_ns = 0; e->sub_stopped = 1; break;
        }
        /* Wall-clock time, to line the log up with the SIP peers' traces. */
        struct timespec wall;
        clock_gettime(CLOCK_REALTIME, &wall);
        /* One line per event: the warnings (one per line in the event) joined with "; ". */
        char detail[2048];
        size_t dl = 0;
        if (ev.notifier.ptr) dl = (size_t)snprintf(detail, sizeof detail, "from %.*s: ", (int)ev.notifier.len, (const char *)ev.notifier.ptr);
        if (dl >= sizeof detail) dl = sizeof detail - 1;
        for (size_t k = 0; ev.text.ptr && k < ev.text.len && dl + 3 < sizeof detail; k++) {
            char ch = (char)ev.text.ptr[k];
            if (ch == '\n') {
                detail[dl++] = ';';
                detail[dl++] = ' ';
            } else {
                detail[dl++] = ch;
            }
        }
        detail[dl] = 0;
        if (refused && ev.number == LC_VERSION_UNKNOWN) {
            elog("subscriber at %lld.%06ld: %s (version unknown) 0 %s\n", (long long)wall.tv_sec,
                    wall.tv_nsec / 1000, what, detail);
        } else {
            elog("subscriber at %lld.%06ld: %s %llu %s\n", (long long)wall.tv_sec, wall.tv_nsec / 1000,
                    what, (unsigned long long)ev.number, detail);
        }
    }
    if (in_force) notifier_policy_in_force(e);
    lc_subscriber_counters sc;
    if (lc_subscriber_stats(e->sub, &sc) == LC_RESULT_OK) {
        pthread_mutex_lock(&e->sub_mu);
        e->sub_stats = sc;
        e->sub_stats_valid = 1;
        pthread_mutex_unlock(&e->sub_mu);
    }
}

/* Where the request just rendered goes: the dialog's next hop (remote target or first route),
 * or --notifier for the first SUBSCRIBE of a subscription (its next hop is the notifier URI). */
static struct sockaddr_in subscriber_destination(edge_t *e) {
    lc_str hop;
    if (lc_subscriber_wire_next_hop(e->sub, &hop) != LC_RESULT_OK || hop.len >= 256) return e->notifier_addr;
    char uri[256];
    memcpy(uri, hop.ptr, hop.len);
    uri[hop.len] = 0;
    if (strcmp(uri, e->notifier_uri) == 0) return e->notifier_addr;
    struct sockaddr_in to;
    if (uri_addr(uri, &to) != 0) {
        elog("subscriber: no IPv4 address in the next hop %s; sending to --notifier\n", uri);
        return e->notifier_addr;
    }
    return to;
}

/* Sends the subscriber's next SUBSCRIBE. libloadctl's subscriber keeps one transaction: a new
 * SUBSCRIBE from it replaces the one outstanding here, whose retransmissions stop and whose late
 * answer is absorbed (its branch no longer matches). That matters after a `terminated` NOTIFY
 * that arrives while a refresh is still being retransmitted (a notifier that was unreachable
 * and comes back): the new subscription must start at once, not after the old refresh got its
 * 481, since the policy is withdrawn meanwhile. */
static void subscriber_transmit(edge_t *e) {
    if (!e->sub) return;
    char branch[64];
    snprintf(branch, sizeof branch, SUB_BRANCH "%lx%lu", (unsigned long)getpid(), ++e->sub_count);
    size_t len = 0;
    lc_result r = lc_subscriber_transmit_wire(e->sub, &e->wire, cstr(branch), (uint8_t *)e->sub_msg,
                                              sizeof e->sub_msg, &len);
    if (r == LC_RESULT_EMPTY) return;
    if (r != LC_RESULT_OK) {
        elog("subscriber: cannot render SUBSCRIBE: %s\n", lc_result_text(r));
        return;
    }
    if (e->unsubscribed) {
        /* On the way out the unsubscribe is the last SUBSCRIBE. libloadctl's subscriber starts
         * a new subscription when a SUBSCRIBE in its dialog is answered 481 ("the notifier lost
         * the subscription"), the unsubscribe included: sending that would leave a
         * subscription behind at the notifier for its whole Expires. */
        elog("subscriber: stopping: a new SUBSCRIBE after the unsubscribe is not sent");
        e->sub_outstanding = 0;
        return;
    }
    /* A pending request keeps the branch it was first given. */
    const char *b = strstr(e->sub_msg, "branch=");
    size_t bl = b ? strcspn(b + 7, ";\r\n ") : 0;
    if (b && bl < sizeof e->sub_branch) {
        memcpy(e->sub_branch, b + 7, bl);
        e->sub_branch[bl] = 0;
    }
    e->sub_len = len;
    e->sub_outstanding = 1;
    e->sub_started_ns = now_ns();
    e->sub_interval_ns = T1_NS;
    e->sub_next_rtx_ns = e->sub_started_ns + T1_NS;
    e->sub_dest = subscriber_destination(e);
    send_to(e->udp, e->sub_msg, len, &e->sub_dest);
}

/* Timer E (retransmit) / Timer F (give up; the state machine has its own timeout for it). */
static void subscriber_timers(edge_t *e) {
    if (!e->sub) return;
    uint64_t now = now_ns();
    if (e->sub_outstanding && now - e->sub_started_ns >= 64 * T1_NS) {
        e->sub_outstanding = 0;
    } else if (e->sub_outstanding && now >= e->sub_next_rtx_ns) {
        send_to(e->udp, e->sub_msg, e->sub_len, &e->sub_dest);
        e->sub_interval_ns = e->sub_interval_ns * 2 < T2_NS ? e->sub_interval_ns * 2 : T2_NS;
        e->sub_next_rtx_ns = now + e->sub_interval_ns;
    }
    uint64_t due = 0;
    if (lc_subscriber_poll_timeout(e->sub, &due) == LC_RESULT_OK && due <= now) {
        lc_subscriber_handle_timeout(e->sub, now);
    }
    subscriber_transmit(e);
    log_subscriber_events(e);
}

/* The top Via's branch of a message, copied into `out` (empty when none). */
static void top_branch(const char *msg, size_t len, char *out, size_t cap) {
    size_t vl = 0;
    size_t v = find_header(msg, len, "Via", "v", &vl);
    out[0] = 0;
    for (size_t k = 0; v && k + 7 <= vl; k++) {
        if (strncasecmp(msg + v + k, "branch=", 7) == 0) {
            size_t b = v + k + 7, n = 0;
            while (b + n < v + vl && msg[b + n] != ';' && msg[b + n] != ',' && msg[b + n] != ' ') n++;
            if (n < cap) {
                memcpy(out, msg + b, n);
                out[n] = 0;
            }
            return;
        }
    }
}

/* True for a request carrying `Event: load-control`: this edge's NOTIFYs are not proxied. */
static int is_load_control(const char *msg, size_t len) {
    size_t el = 0;
    size_t ev = find_header(msg, len, "Event", "o", &el);
    return ev && el >= 12 && strncasecmp(msg + ev, "load-control", 12) == 0 &&
           (el == 12 || msg[ev + 12] == ';' || msg[ev + 12] == ' ');
}

/* A message of the event package for this edge's subscriber: taken and answered here. Returns
 * 1 when it was. */
static int subscriber_receive(edge_t *e, const char *msg, size_t len, const struct sockaddr_in *from) {
    if (!e->sub) return 0;
    static char reply[MAX_MSG];
    size_t rlen = 0;
    uint64_t now = now_ns();
    if (len >= 8 && strncmp(msg, "SIP/2.0 ", 8) == 0) {
        char branch[64];
        top_branch(msg, len, branch, sizeof branch);
        if (strncmp(branch, SUB_BRANCH, strlen(SUB_BRANCH)) != 0) return 0;
        /* A provisional or repeated response, or one to a SUBSCRIBE given up on: absorbed. */
        if (!e->sub_outstanding || strcmp(branch, e->sub_branch) != 0 || msg[8] == '1') return 1;
        e->sub_outstanding = 0;
        lc_result r = lc_subscriber_receive_wire(e->sub, now, (const uint8_t *)msg, len, &e->wire,
                                                 (uint8_t *)reply, sizeof reply, &rlen);
        if (r != LC_RESULT_OK) elog("subscriber: bad response: %s\n", lc_result_text(r));
    } else if (len >= 7 && strncmp(msg, "NOTIFY ", 7) == 0 && is_load_control(msg, len)) {
        /* A document may change rules, which starts their engine counters again: the totals
         * are taken before and after (metrics.h). */
        metrics_sample_rules(e->engine);
        lc_result r = lc_subscriber_receive_wire(e->sub, now, (const uint8_t *)msg, len, &e->wire,
                                                 (uint8_t *)reply, sizeof reply, &rlen);
        metrics_sample_rules(e->engine);
        e->notifies++;
        if (r != LC_RESULT_OK) {
            elog("subscriber: bad NOTIFY: %s\n", lc_result_text(r));
        } else if (rlen > 0) {
            send_to(e->udp, reply, rlen, from);
        }
    } else {
        return 0;
    }
    subscriber_transmit(e);
    log_subscriber_events(e);
    return 1;
}

static int start_subscriber(edge_t *e, const char *notifier, const char *own_uri, unsigned expires) {
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &e->listen_addr.sin_addr, ip, sizeof ip);
    snprintf(e->sent_by, sizeof e->sent_by, "%s:%u", ip, ntohs(e->listen_addr.sin_port));
    if (own_uri) snprintf(e->contact, sizeof e->contact, "%s", own_uri);
    else snprintf(e->contact, sizeof e->contact, "sip:edge@%s", e->sent_by);
    e->wire.transport = cstr("UDP");
    e->wire.sent_by = cstr(e->sent_by);
    e->wire.contact = cstr(e->contact);
    static char call_id[64], tag[32];
    snprintf(call_id, sizeof call_id, "lc-edge-%lx-%llx", (unsigned long)getpid(), (unsigned long long)now_ns());
    snprintf(tag, sizeof tag, "%llx", (unsigned long long)(now_ns() ^ (uint64_t)getpid()));
    snprintf(e->notifier_uri, sizeof e->notifier_uri, "%s", notifier);
    lc_subscriber_config c;
    memset(&c, 0, sizeof c);
    c.notifier = cstr(notifier);
    c.subscriber = cstr(e->contact);
    c.call_id = cstr(call_id);
    c.tag = cstr(tag);
    c.expires = expires;
    c.scope_to_notifier = false;
    lc_result r = lc_subscriber_new(e->engine, &c, now_ns(), &e->sub);
    if (r != LC_RESULT_OK) {
        elog("cannot subscribe to %s: %s\n", notifier, lc_result_text(r));
        return -1;
    }
    elog("subscribing to %s as %s\n", notifier, e->contact);
    subscriber_transmit(e);
    return 0;
}

/* Unsubscribes (SUBSCRIBE with Expires: 0) and waits up to a second for the answer. */
static void stop_subscriber(edge_t *e, char *buf) {
    if (!e->sub) return;
    e->sub_outstanding = 0;
    lc_subscriber_unsubscribe(e->sub, now_ns());
    subscriber_transmit(e);
    e->unsubscribed = 1;
    flush_sends(e->udp);
    uint64_t until = now_ns() + 1000000000ull;
    /* Until the unsubscribe is answered and the notifier's final NOTIFY (terminated) is
     * answered too, so the notifier does not retransmit it to an edge that has gone. */
    while ((e->sub_outstanding || !e->sub_stopped) && now_ns() < until) {
        struct pollfd p = {e->udp_sock, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        ssize_t n = recvfrom(e->udp_sock, buf, MAX_MSG, 0, (struct sockaddr *)&from, &fl);
        if (n > 0) subscriber_receive(e, buf, (size_t)n, &from);
        flush_sends(e->udp);
    }
    log_subscriber_events(e);
    lc_subscriber_free(e->sub);
    e->sub = NULL;
}

/* True for an ACK to an answer this edge sent itself: its To carries the tag the edge adds. */
static int acks_our_answer(const char *msg, size_t len) {
    size_t tl = 0;
    size_t t = find_header(msg, len, "To", "t", &tl);
    const char *tag = ";tag=" EDGE_TAG;
    size_t n = strlen(tag);
    for (size_t k = 0; t && k + n <= tl; k++) {
        if (strncasecmp(msg + t + k, tag, n) == 0 &&
            (k + n == tl || msg[t + k + n] == ';' || msg[t + k + n] == ' ' || msg[t + k + n] == '>')) {
            return 1;
        }
    }
    return 0;
}

/* One SIP message from a peer, whatever the transport. */
static void handle(worker_t *w, const char *msg, size_t len, const peer_t *from) {
    if (!from->tcp && w == w->e->udp && subscriber_receive(w->e, msg, len, &from->addr)) return;
    if (is_response(msg, len)) {
        forward_response(w, msg, len, 0);
        return;
    }
    if (len >= 4 && strncmp(msg, "ACK ", 4) == 0 && acks_our_answer(msg, len)) {
        BUMP(w->c.absorbed);
        return; /* the ACK to our own 503 / 302 ends here (RFC 3261 §17.2.1) */
    }
    /* RFC 3261 §16.3: "Before an element can proxy a request, it MUST verify the message's
     * validity"; a check that fails is answered as a UAS would (400, 416, 420, 482, 483, or 200
     * to an OPTIONS with Max-Forwards 0), unless no response can be routed (no usable Via) or
     * the request is an ACK: then it is dropped. Counted by reason either way. */
    sv_result sv;
    if (sv_check(msg, len, w->e->via_host, &sv) != SV_OK) {
        BUMP(w->c.invalid[sv.reason]);
        if (sv.status) reply_with(w, msg, len, from, sv.status, sv.phrase, NULL, sv.extra[0] ? sv.extra : NULL);
        return;
    }
    /* Every request other than ACK and CANCEL is shown to the retransmission detector once:
     * an original is classified, a retransmission gets what its original got (RFC 3261
     * §16.11: a stateless proxy forwards a retransmission the same way, with the same branch;
     * RFC 7200 limits new requests, and a window slot is per transaction), as long as the
     * decision is remembered. ACK and CANCEL are classified as before (exempt). */
    int ack_or_cancel = (len >= 4 && strncmp(msg, "ACK ", 4) == 0) || (len >= 7 && strncmp(msg, "CANCEL ", 7) == 0);
    uint64_t now = now_ns();
    lc_class cls = LC_CLASS_ORIGINAL;
    decided_t *dm = NULL; /* this transaction's slot of the decision memory (NULL: not observed) */
    unsigned long dk = 0;
    if (!ack_or_cancel && lc_detector_observe_sip(w->e->det, (const uint8_t *)msg, len, now, &cls) == LC_RESULT_OK) {
        dk = decision_key(msg, len);
        dm = decision_slot(w->decided, dk);
        if (cls == LC_CLASS_RETRANSMISSION) BUMP(w->c.retransmissions);
        else BUMP(w->c.originals);
    } else {
        cls = LC_CLASS_ORIGINAL; /* unobserved (ACK, CANCEL, no valid Via): handled as new */
    }
    /* Overload control: which requests are new (originals, not ACK / CANCEL), and, as a server
     * to upstream clients, the 503s owed to clients that do not take part (RFC 7339 §5.10.2;
     * the server admits every retransmission, so only an original is rejected here). */
    int oc_new = 0;
    lc_oc_category oc_cat = LC_OC_CATEGORY_NONE;
    if (w->e->oc) {
        lc_oc_category cat = LC_OC_CATEGORY_NONE;
        if (lc_oc_category_sip(w->e->engine, (const uint8_t *)msg, len, &cat) == LC_RESULT_OK && cat != LC_OC_CATEGORY_NONE) {
            char key[32];
            lc_str tv = top_via(msg, len);
            client_key(&from->addr, (const char *)tv.ptr, tv.len, key, sizeof key);
            lc_oc_admission adm = LC_OC_ADMISSION_ADMIT;
            lc_str k = {(const uint8_t *)key, strlen(key)};
            lc_oc_server_on_request(w->e->oc_srv, now, k, tv, cls, cat, &adm);
            if (adm == LC_OC_ADMISSION_REJECT) {
                BUMP(w->c.oc_rejected);
                record_decision(dm, dk, DM_OC_SHED, 503, now);
                reply_overload(w, msg, len, from);
                return;
            }
            oc_new = cls == LC_CLASS_ORIGINAL;
            oc_cat = cat;
        }
    }
    if (dm && cls == LC_CLASS_RETRANSMISSION) {
        if (dm->kind != DM_NONE && dm->hash == dk && now - dm->at_ns < TIMER_B_NS) {
            /* Repeated without classifying: no rate token, no window slot, no lc_oc_decide and
             * no timeout tracking (the original has them). */
            BUMP(w->c.retx_repeated);
            if (dm->kind == DM_FORWARDED) forward_request(w, msg, len, from); /* same branch */
            else if (dm->kind == DM_ANSWERED) reply(w, msg, len, from, dm->status, "Service Unavailable", NULL);
            else if (dm->kind == DM_OC_SHED || dm->kind == DM_NO_POLICY) reply_overload(w, msg, len, from);
            else BUMP(w->c.dropped);
            return;
        }
        /* Evicted from the memory, older than it, redirected (not remembered), or its original
         * came before a restart: classified like an original (RFC 7339 overload control still
         * treats it as the retransmission it is). */
        BUMP(w->c.retx_unremembered);
    }
    lc_decision d;
    lc_sip_options o;
    memset(&o, 0, sizeof o);
    o.transport = from->tcp ? LC_TRANSPORT_TCP : LC_TRANSPORT_UDP;
    /* The next hop this edge forwards to (every request goes there): rules whose
     * target-sip-entity names it apply. */
    o.target = cstr(w->e->next_hop_uri);
    lc_result r = lc_classify_sip_opts(w->lw, (const uint8_t *)msg, len, &o, &d);
    if (r != LC_RESULT_OK) {
        BUMP(w->c.malformed);
        record_decision(dm, dk, DM_NONE, 0, now);
        return; /* not a request we can route: dropped */
    }
    if (d.verdict == LC_VERDICT_REJECT || d.verdict == LC_VERDICT_REDIRECT) {
        record_decision(dm, dk, d.verdict == LC_VERDICT_REJECT ? DM_ANSWERED : DM_NONE, d.status, now);
        answer(w, msg, len, from, &d);
        return;
    }
    if (!d.exempt && !d.matched && !w->e->fallback_path && atomic_load_explicit(&w->e->no_policy, memory_order_relaxed)) {
        /* No notifier policy yet and no fallback: what no rule classifies is refused rather
         * than let through unlimited. 503 without Retry-After: the caller may retry at once,
         * and other requests to this edge are not to be held back. */
        if (d.has_ticket) lc_complete(w->lw, &d.ticket);
        BUMP(w->c.no_policy_rejected);
        record_decision(dm, dk, DM_NO_POLICY, 503, now);
        reply_overload(w, msg, len, from);
        return;
    }
    if (d.verdict == LC_VERDICT_DROP) {
        /* Only over TCP: libloadctl turns a drop into a reject over UDP (RFC 7200), where a
         * silent drop would only bring retransmissions. */
        BUMP(w->c.dropped);
        record_decision(dm, dk, DM_DROPPED, 0, now);
        return;
    }
    if (oc_new) {
        lc_oc_verdict v = LC_OC_VERDICT_FORWARD;
        lc_oc_decide(w->ocs, w->e->oc_hop, now, oc_cat, &v);
        if (v != LC_OC_VERDICT_FORWARD && v != LC_OC_VERDICT_PROBE) {
            if (d.has_ticket) lc_complete(w->lw, &d.ticket);
            BUMP(w->c.oc_shed);
            record_decision(dm, dk, DM_OC_SHED, 503, now);
            reply_overload(w, msg, len, from);
            return;
        }
        oc_track(w, transaction_hash(msg, len), now);
    }
    if (d.has_ticket) remember(w, transaction_hash(msg, len), d.ticket);
    record_decision(dm, dk, DM_FORWARDED, 0, now);
    forward_request(w, msg, len, from);
}

/* ------------------------------------------------------------------ the startup hold */

/* With --subscribe the notifier's policy arrives a round trip after the edge starts; requests
 * handled before it passed unfiltered (a restarted edge under a flood let one through, above
 * the rule's r·(1 s + τ) + 1, in tests/e2e/test_faults.py edge_restart). So requests that come
 * meanwhile are held (up to HOLD_BYTES; beyond that dropped and counted, never handled without
 * the policy) and handled once the first document is in force, a
 * bodyless NOTIFY says there is none, the subscription stops, or --startup-hold-ms passes.
 * Responses and the subscriber's own messages are not held. Returns 1 when the message was
 * held. */
#define HOLD_BYTES (4u << 20)
static int hold_request(edge_t *e, const char *msg, size_t len, const struct sockaddr_in *from) {
    if (!atomic_load(&e->holding) || is_response(msg, len)) return 0;
    if (len >= 7 && strncmp(msg, "NOTIFY ", 7) == 0 && is_load_control(msg, len)) return 0;
    size_t need = sizeof(size_t) + sizeof *from + len;
    if (!e->held) e->held = malloc(HOLD_BYTES);
    if (!e->held || e->held_len + need > HOLD_BYTES) {
        /* Full: dropped (UDP: the client retransmits, and the copy that comes after the hold
         * is handled then), never let through unfiltered. */
        e->held_dropped++;
        return 1;
    }
    memcpy(e->held + e->held_len, &len, sizeof len);
    memcpy(e->held + e->held_len + sizeof len, from, sizeof *from);
    memcpy(e->held + e->held_len + sizeof len + sizeof *from, msg, len);
    e->held_len += need;
    e->held_count++;
    return 1;
}

/* Ends the hold when it is due and handles what it held, in arrival order. */
static void release_held(edge_t *e, worker_t *w) {
    if (!atomic_load(&e->holding) || now_ns() < e->hold_until_ns) return;
    atomic_store(&e->holding, 0);
    elog("startup hold ended: %lu requests held were handled, %lu dropped (the hold full) (%s)\n",
            e->held_count, e->held_dropped,
            e->hold_until_ns ? "no policy within --startup-hold-ms" : "the notifier's answer is in force");
    peer_t from;
    memset(&from, 0, sizeof from);
    for (size_t at = 0; at < e->held_len;) {
        size_t len;
        memcpy(&len, e->held + at, sizeof len);
        memcpy(&from.addr, e->held + at + sizeof len, sizeof from.addr);
        handle(w, e->held + at + sizeof len + sizeof from.addr, len, &from);
        at += sizeof len + sizeof from.addr + len;
    }
    flush_sends(w);
    free(e->held);
    e->held = NULL;
    e->held_len = 0;
}

/* ------------------------------------------------------------------ TCP: the event loop */

/* A message that cannot be framed (no or a bad Content-Length, too large): a request is
 * answered (`status`) from its header block when that is complete, then the connection is
 * closed, since where the next message starts is unknown. */
static void stream_error(worker_t *w, unsigned slot, const char *buf, const sf_frame *f, const peer_t *from) {
    conn_t *c = &w->conns[slot];
    if (f->kind == SF_TOO_LARGE) BUMP(w->c.tcp_too_large);
    else BUMP(w->c.tcp_framing_errors);
    if (f->header_len > 0 && !is_response(buf, f->header_len)) {
        if (f->kind == SF_TOO_LARGE) reply(w, buf, f->header_len, from, 513, "Message Too Large", NULL);
        else if (f->kind == SF_NO_LENGTH) reply(w, buf, f->header_len, from, 400, "Missing Content-Length", NULL);
        else reply(w, buf, f->header_len, from, 400, "Bad Content-Length", NULL);
    }
    c->closing = 1;
    mark_dirty(w, slot);
}

/* Reads what a connection has for us and handles every whole message in it; keeps the
 * unfinished rest in the connection's own buffer (at most one message, MAX_MSG bytes). */
static void tcp_read(worker_t *w, unsigned slot) {
    conn_t *c = &w->conns[slot];
    if (c->closing) { /* read and discard until the peer closes */
        char sink[4096];
        ssize_t n = recv(c->fd, sink, sizeof sink, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) conn_close(w, slot);
        return;
    }
    char *buf = c->in_len ? c->in : w->rx;
    size_t cap = c->in_len ? MAX_MSG : TCP_RX;
    size_t have = c->in_len;
    ssize_t n = recv(c->fd, buf + have, cap - have, 0);
    if (n <= 0) {
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
        conn_close(w, slot); /* closed by the peer (an unfinished message goes with it) or broken */
        return;
    }
    have += (size_t)n;
    c->last_rx_ns = now_ns();
    peer_t from = {1, c->peer, slot, c->gen};
    size_t off = 0;
    while (!c->dead && !c->closing) {
        sf_frame f = sf_next(&c->sf, buf + off, have - off, MAX_MSG);
        if (f.kind == SF_MORE) break;
        if (f.kind == SF_MESSAGE) {
            handle(w, buf + off, f.len, &from);
        } else if (f.kind == SF_PING) {
            BUMP(w->c.tcp_pings);
            conn_queue(w, slot, from.gen, "\r\n", 2); /* RFC 5626 §3.5.1: the pong */
        } else if (f.kind != SF_CRLF) {
            stream_error(w, slot, buf + off, &f, &from);
            break;
        }
        off += f.len;
    }
    size_t rest = have - off;
    if (c->dead || c->closing || rest == 0) {
        free(c->in);
        c->in = NULL;
        c->in_len = 0;
        return;
    }
    if (buf == w->rx) {
        if (!c->in && !(c->in = malloc(MAX_MSG))) {
            conn_kill(w, slot);
            return;
        }
        memcpy(c->in, buf + off, rest);
    } else if (off > 0) {
        memmove(c->in, c->in + off, rest);
    }
    c->in_len = rest;
}

static void tcp_accept(worker_t *w) {
    for (;;) {
        struct sockaddr_in peer;
        socklen_t pl = sizeof peer;
        int fd = accept4(w->e->tcp_sock, (struct sockaddr *)&peer, &pl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) elog("tcp: accept: %s\n", strerror(errno));
            return;
        }
        if (w->inbound >= w->e->max_conns || conn_open(w, fd, &peer, 0, 0) < 0) {
            close(fd); /* the table is full: refused (the peer sees the connection closed) */
            BUMP(w->c.tcp_refused);
            continue;
        }
        BUMP(w->c.tcp_accepted);
    }
}

/* Closes connections whose peer did not close within LINGER_CLOSE_NS of our FIN, and, once a
 * second, inbound connections silent for --tcp-idle-s (a keep-alive ping counts; the
 * connection to the next hop is kept). This stateless edge never sends a request to a caller,
 * so closing an idle caller's connection loses nothing: its next request opens a new one. */
static void sweep(worker_t *w) {
    uint64_t now = now_ns();
    int idle = w->e->idle_ns && now >= w->next_idle_sweep_ns;
    if (w->lingering == 0 && !idle) return;
    if (idle) w->next_idle_sweep_ns = now + 1000000000ull;
    for (unsigned k = 0; k < w->nconns; k++) {
        conn_t *c = &w->conns[k];
        if (c->fd < 0) continue;
        if (c->lingering && c->close_at <= now) {
            conn_close(w, k);
        } else if (idle && !c->outbound && !c->closing && now - c->last_rx_ns >= w->e->idle_ns) {
            BUMP(w->c.tcp_idle_closed);
            conn_close(w, k);
        }
    }
}

static void *tcp_main(void *arg) {
    worker_t *w = arg;
    struct epoll_event ev[64];
    while (atomic_load(&w->e->holding) && !atomic_load(&tcp_stop)) { /* connections wait in the backlog */
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    while (!atomic_load(&tcp_stop)) {
        int n = epoll_wait(w->epfd, ev, 64, 50);
        for (int k = 0; k < n; k++) {
            uint64_t cookie = ev[k].data.u64;
            if (cookie == 0) {
                tcp_accept(w);
                continue;
            }
            unsigned slot = (unsigned)(cookie & 0xffffffffu) - 1;
            conn_t *c = &w->conns[slot];
            if (c->fd < 0 || c->gen != (uint32_t)(cookie >> 32)) continue; /* closed earlier in this pass */
            if (c->connecting) {
                hop_connected(w, slot);
                continue;
            }
            if (ev[k].events & EPOLLOUT) conn_flush(w, slot);
            if (c->fd >= 0 && c->gen == (uint32_t)(cookie >> 32) && (ev[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) tcp_read(w, slot);
        }
        flush_conns(w);
        flush_sends(w); /* responses to UDP requests that came back over TCP */
        expire(w);
        sweep(w);
    }
    return NULL;
}

/* The TCP side: the listening socket on the same address as UDP, and the worker's table. */
static int tcp_start(edge_t *e, worker_t *w) {
    e->tcp_sock = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(e->tcp_sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (e->tcp_sock < 0 || bind(e->tcp_sock, (struct sockaddr *)&e->listen_addr, sizeof e->listen_addr) < 0 ||
        listen(e->tcp_sock, 1024) < 0) {
        return -1;
    }
    /* Room for every connection plus the listening, UDP and epoll descriptors. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < e->max_conns + 64 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = e->max_conns + 64 < rl.rlim_max ? e->max_conns + 64 : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    w->nconns = e->max_conns + 1; /* + the connection to the next hop */
    w->conns = calloc(w->nconns, sizeof *w->conns);
    w->free_slots = calloc(w->nconns, sizeof *w->free_slots);
    w->dirty = calloc(w->nconns, sizeof *w->dirty);
    w->rx = malloc(TCP_RX);
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (!w->conns || !w->free_slots || !w->dirty || !w->rx || w->epfd < 0) return -1;
    for (unsigned k = 0; k < w->nconns; k++) {
        w->conns[k].fd = -1;
        w->conns[k].gen = 1;
        w->free_slots[w->nfree++] = w->nconns - 1 - k; /* slot 0 first */
    }
    w->hop = -1;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
    return epoll_ctl(w->epfd, EPOLL_CTL_ADD, e->tcp_sock, &ev);
}

static void tcp_finish(worker_t *w) {
    for (unsigned k = 0; k < w->nconns; k++) {
        if (w->conns[k].fd >= 0) conn_close(w, k);
    }
    close(w->epfd);
    free(w->conns);
    free(w->free_slots);
    free(w->dirty);
    free(w->rx);
}

/* ------------------------------------------------------------------ main */

static void metric(mbuf *b, const char *name, const char *type, const char *help, unsigned long long v) {
    mbuf_family(b, name, type, help);
    mbuf_printf(b, "%s %llu\n", name, v);
}

/* The sum of one counter over both threads. */
#define SUM(field) (READ(e->udp->c.field) + (e->tcp ? READ(e->tcp->c.field) : 0ul))

/* The whole exposition (Prometheus text format 0.0.4): the engine's counters — its per-rule
 * rows replaced by the edge's monotonic totals (metrics.h) —, then the edge's own. Every
 * family has # HELP and # TYPE. Called on the metrics thread (a scrape) and on the main thread
 * (SIGUSR1); it reads counters only. */
static void render_stats(void *userdata, mbuf *b) {
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
    metric(b, "edge_acks_absorbed_total", "counter", "ACKs to the edge's own answers, not forwarded.", SUM(absorbed));
    metric(b, "edge_dropped_total", "counter", "Requests dropped by a rule (TCP).", SUM(dropped));
    mbuf_family(b, "edge_invalid_requests_total", "counter",
                "Requests not forwarded by RFC 3261 section 16.3 request validation, by reason.");
    for (int r = 1; r < SV_COUNT; r++) mbuf_printf(b, "edge_invalid_requests_total{reason=\"%s\"} %lu\n", SV_LABELS[r], SUM(invalid[r]));
    metric(b, "edge_no_policy_rejected_total", "counter",
           "New requests no rule matched, answered 503 because no notifier policy had arrived (no --fallback-policy).",
           SUM(no_policy_rejected));
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
    metric(b, "edge_detector_originals_total", "counter", "The detector's originals (both threads).", dc.originals);
    metric(b, "edge_detector_retransmissions_total", "counter", "The detector's retransmissions (both threads).",
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
        metric(b, "edge_oc_next_hop_active", "gauge", "1 while the next hop's feedback is in force.", hs.active);
        metric(b, "edge_oc_next_hop_algorithm", "gauge", "The algorithm in force (libloadctl's LC_OC_ALGORITHM_*).", hs.algorithm);
        metric(b, "edge_oc_next_hop_oc", "gauge", "The next hop's oc value in force.", hs.oc);
        metric(b, "edge_oc_next_hop_suspended", "gauge", "1 while the next hop is suspended after timeouts.", hs.suspended);
        metric(b, "edge_oc_next_hop_updates_total", "counter", "Feedback updates applied.", hs.updates);
        metric(b, "edge_oc_server_overloaded", "gauge", "1 while this edge reports overload to its clients.", ss.overloaded);
        mbuf_family(b, "edge_oc_server_target_per_second", "gauge", "The rate this edge's law targets.");
        mbuf_printf(b, "edge_oc_server_target_per_second %.3f\n", (double)ss.target_milli / 1000.0);
    }
    if (e->tcp) {
        counters_t *c = &e->tcp->c;
        metric(b, "edge_tcp_accepted_total", "counter", "Inbound TCP connections accepted.", READ(c->tcp_accepted));
        metric(b, "edge_tcp_refused_total", "counter", "Inbound connections closed at once (--max-connections).",
               READ(c->tcp_refused));
        metric(b, "edge_tcp_closed_total", "counter", "TCP connections closed.", READ(c->tcp_closed));
        metric(b, "edge_tcp_framing_errors_total", "counter", "Messages without a usable Content-Length (400, close).",
               READ(c->tcp_framing_errors));
        metric(b, "edge_tcp_too_large_total", "counter", "Messages over 65,535 bytes (513, close).", READ(c->tcp_too_large));
        metric(b, "edge_tcp_overflows_total", "counter", "Connections closed because their output buffer was full.",
               READ(c->tcp_overflows));
        metric(b, "edge_tcp_pings_total", "counter", "RFC 5626 keep-alive pings answered.", READ(c->tcp_pings));
        metric(b, "edge_tcp_responses_orphaned_total", "counter", "Responses whose inbound connection had gone (dropped).",
               READ(c->tcp_responses_orphaned));
        metric(b, "edge_tcp_hop_connects_total", "counter", "Connections opened to the next hop.", READ(c->hop_connects));
        metric(b, "edge_tcp_hop_failures_total", "counter", "Failed connects to the next hop.", READ(c->hop_failures));
        metric(b, "edge_tcp_forward_failures_total", "counter", "Requests answered 503 because the next hop was unreachable.",
               READ(c->forward_failures));
        metric(b, "edge_tcp_idle_closed_total", "counter", "Inbound connections closed after --tcp-idle-s.",
               READ(c->tcp_idle_closed));
    }
}

/* SIGUSR1: the same exposition as GET /metrics, on stdout. */
static void print_stats(edge_t *e) {
    mbuf b = {0};
    render_stats(e, &b);
    if (b.p) fwrite(b.p, 1, b.len, stdout);
    fflush(stdout);
    free(b.p);
}

static const char HELP[] =
    "usage: edge --listen IP:PORT --next-hop IP:PORT (--policy FILE | --subscribe NOTIFIER-URI) [options]\n"
    "\n"
    "A stateless SIP edge proxy (UDP and TCP) enforcing RFC 7200 load-filtering policies with libloadctl.\n"
    "\n"
    "Required:\n"
    "  --listen IP:PORT            where to listen, UDP and TCP (IPv4, port 1-65535)\n"
    "  --next-hop IP:PORT          where every request is forwarded\n"
    "  --policy FILE and/or --subscribe NOTIFIER-URI (at least one)\n"
    "\n"
    "Policy:\n"
    "  --policy FILE               a local policy (SIGHUP rereads it)\n"
    "  --source NAME               the source name of --policy's rules (default edge)\n"
    "  --subscribe NOTIFIER-URI    subscribe to an RFC 7200 notifier (load-control event package)\n"
    "  --notifier IP:PORT          where the first SUBSCRIBE goes (default: the URI's host:port)\n"
    "  --uri OWN-URI               this edge's URI (default sip:edge@LISTEN)\n"
    "  --expires S                 subscription length asked for (default: libloadctl's)\n"
    "  --startup-hold-ms N         hold requests up to N ms for the notifier's first answer (default 2000, 0: none)\n"
    "  --fallback-policy FILE      enforced until the notifier's first policy is in force; without it, new\n"
    "                              requests no rule matches are answered 503 (no Retry-After) meanwhile\n"
    "  --redirect-allow LIST       more agreed redirect targets (space-separated hosts/domains; * for all)\n"
    "  --no-emergency-exempt       filter emergency calls (urn:service:sos) like any other\n"
    "  --priority-namespaces LIST  exempt Resource-Priority namespaces (default \"ets wps\"; \"\" for none)\n"
    "  --retry-after SECONDS       Retry-After on the 503s of rules (default 0: none)\n"
    "  --sip-user-numbers MODE     user-phone | global | digits: which sip: user parts without\n"
    "                              ;user=phone are telephone numbers (default global: + and digits)\n"
    "\n"
    "Transport:\n"
    "  --transport udp|tcp|both    (default both)\n"
    "  --max-connections N         inbound TCP connections (default 1024)\n"
    "  --tcp-idle-s S              close silent inbound connections after S s (default 300, 0: never)\n"
    "  --linger-us N               UDP read linger under dense traffic, 0-100000 (default 200)\n"
    "\n"
    "Overload control (RFC 7339 / RFC 7415):\n"
    "  --overload-control          take part, as client of the next hop and server to upstream clients\n"
    "  --oc-algorithms A           loss | loss,rate | rate,loss (default loss,rate; needs --overload-control)\n"
    "  --oc-occupancy-target PCT   busy share above which this edge reports overload (default 80)\n"
    "  --oc-timeout-ms N           no response within N ms counts as a timeout (default 32000)\n"
    "  --log-oc FILE               append a line per response sent with this edge's oc values (oc-sent|...)\n"
    "\n"
    "Operation:\n"
    "  --metrics IP:PORT           serve GET /metrics (Prometheus text format 0.0.4) over HTTP\n"
    "  --help                      this text\n"
    "  --version                   the edge's and libloadctl's version\n"
    "\n"
    "Signals: SIGHUP rereads --policy, SIGUSR1 prints the metrics on stdout, SIGINT/SIGTERM unsubscribe and exit.\n";

/* --sip-user-numbers VALUE: the lc_engine_config.sip_user_numbers value it names (the names of
 * `loadctl --sip-user-numbers`); -1 for another name. */
static long sip_user_numbers(const char *name) {
    if (strcmp(name, "global") == 0) return LC_SIP_USER_NUMBERS_GLOBAL;
    if (strcmp(name, "user-phone") == 0) return LC_SIP_USER_NUMBERS_USER_PHONE;
    if (strcmp(name, "digits") == 0) return LC_SIP_USER_NUMBERS_DIGITS;
    return -1;
}

static int usage_error(const char *fmt, const char *arg) __attribute__((format(printf, 1, 0)));
static int usage_error(const char *fmt, const char *arg) {
    char what[1024];
    snprintf(what, sizeof what, fmt, arg);
    elog("%s (edge --help lists the options)", what);
    return 2;
}

/* A whole decimal number within [min, max], else -1. */
static int number(const char *s, long min, long max, long *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < min || v > max) return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv) {
    static edge_t e;
    static worker_t udp_w, tcp_w;
    const char *listen_at = NULL, *next_hop = NULL;
    const char *subscribe = NULL, *notifier_at = NULL, *own_uri = NULL, *transport = "both";
    unsigned expires = 0;
    long hold_ms = 2000;
    const char *redirect_allow = NULL, *priority_namespaces = NULL;
    int emergency_exempt = 1, overload_control = 0;
    const char *oc_algorithms = "loss,rate";
    const char *log_oc = NULL;
    long linger_us = 200, max_conns = 1024, idle_s = 300, oc_timeout_ms = 32000;
    double oc_target_pct = 80;
    long user_numbers = LC_SIP_USER_NUMBERS_GLOBAL;
    e.source = "edge";
    e.udp_sock = e.tcp_sock = -1;
    const char *metrics_at = NULL;
    long retry_after = 0, expires_l = 0;
    int oc_option = 0;
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        if (strcmp(opt, "--help") == 0 || strcmp(opt, "-h") == 0) {
            fputs(HELP, stdout);
            return 0;
        }
        if (strcmp(opt, "--version") == 0) {
            printf("edge (loadctl examples) with libloadctl %s\n", lc_version());
            return 0;
        }
        if (strcmp(opt, "--no-emergency-exempt") == 0) {
            emergency_exempt = 0;
            continue;
        }
        if (strcmp(opt, "--overload-control") == 0) {
            overload_control = 1;
            continue;
        }
        if (strncmp(opt, "--", 2) != 0) return usage_error("unexpected argument '%s'", opt);
        /* Every other option takes a value; another option in its place is a value forgotten. */
        static const char *const WITH_VALUE[] = {"--listen", "--next-hop", "--policy", "--source", "--subscribe", "--notifier",
                                                 "--uri", "--expires", "--startup-hold-ms", "--linger-us", "--transport",
                                                 "--max-connections", "--tcp-idle-s", "--redirect-allow", "--priority-namespaces",
                                                 "--oc-occupancy-target", "--oc-timeout-ms", "--oc-algorithms", "--retry-after",
                                                 "--metrics", "--fallback-policy", "--sip-user-numbers", "--log-oc"};
        int known = 0;
        for (size_t k = 0; k < sizeof WITH_VALUE / sizeof *WITH_VALUE; k++) known |= strcmp(opt, WITH_VALUE[k]) == 0;
        if (!known) return usage_error("unknown option %s", opt);
        if (i + 1 >= argc) return usage_error("%s needs a value", opt);
        if (strncmp(argv[i + 1], "--", 2) == 0 && argv[i + 1][2]) {
            elog("%s needs a value, not the option %s (edge --help lists the options)", opt, argv[i + 1]);
            return 2;
        }
        const char *val = argv[++i];
        int bad = 0;
        if (strcmp(opt, "--listen") == 0) listen_at = val;
        else if (strcmp(opt, "--next-hop") == 0) next_hop = val;
        else if (strcmp(opt, "--policy") == 0) e.policy_path = val;
        else if (strcmp(opt, "--source") == 0) e.source = val;
        else if (strcmp(opt, "--subscribe") == 0) subscribe = val;
        else if (strcmp(opt, "--notifier") == 0) notifier_at = val;
        else if (strcmp(opt, "--uri") == 0) own_uri = val;
        else if (strcmp(opt, "--expires") == 0) bad = number(val, 1, 4294967295l, &expires_l);
        else if (strcmp(opt, "--startup-hold-ms") == 0) bad = number(val, 0, 3600000, &hold_ms);
        else if (strcmp(opt, "--linger-us") == 0) bad = number(val, 0, 100000, &linger_us);
        else if (strcmp(opt, "--transport") == 0) transport = val;
        else if (strcmp(opt, "--max-connections") == 0) bad = number(val, 1, 1000000, &max_conns);
        else if (strcmp(opt, "--tcp-idle-s") == 0) bad = number(val, 0, 86400 * 365, &idle_s);
        else if (strcmp(opt, "--redirect-allow") == 0) redirect_allow = val;
        else if (strcmp(opt, "--priority-namespaces") == 0) priority_namespaces = val;
        else if (strcmp(opt, "--oc-occupancy-target") == 0) {
            char *end = NULL;
            oc_target_pct = strtod(val, &end);
            bad = !*val || *end || !(oc_target_pct >= 0.0001 && oc_target_pct <= 100);
            oc_option = 1;
        } else if (strcmp(opt, "--oc-timeout-ms") == 0) {
            bad = number(val, 1, 3600000, &oc_timeout_ms);
            oc_option = 1;
        } else if (strcmp(opt, "--oc-algorithms") == 0) {
            oc_algorithms = val;
            bad = strcmp(val, "loss") && strcmp(val, "loss,rate") && strcmp(val, "rate,loss");
            oc_option = 1;
        } else if (strcmp(opt, "--log-oc") == 0) {
            log_oc = val;
            oc_option = 1;
        } else if (strcmp(opt, "--retry-after") == 0) bad = number(val, 0, 86400, &retry_after);
        else if (strcmp(opt, "--metrics") == 0) metrics_at = val;
        else if (strcmp(opt, "--fallback-policy") == 0) e.fallback_path = val;
        else if (strcmp(opt, "--sip-user-numbers") == 0) bad = (user_numbers = sip_user_numbers(val)) < 0;
        if (bad) {
            elog("%s: invalid value '%s' (edge --help lists the options)", opt, val);
            return 2;
        }
    }
    expires = (unsigned)expires_l;
    e.udp_on = strcmp(transport, "udp") == 0 || strcmp(transport, "both") == 0;
    e.tcp_on = strcmp(transport, "tcp") == 0 || strcmp(transport, "both") == 0;
    if (!e.udp_on && !e.tcp_on) return usage_error("--transport: '%s' is not udp, tcp or both", transport);
    if (oc_option && !overload_control)
        return usage_error("%s", "--oc-algorithms, --oc-occupancy-target, --oc-timeout-ms and --log-oc need --overload-control");
    if (!subscribe && (notifier_at || own_uri || expires_l || e.fallback_path))
        return usage_error("%s", "--notifier, --uri, --expires and --fallback-policy need --subscribe");
    if (!listen_at) return usage_error("%s", "--listen IP:PORT is required");
    if (!next_hop) return usage_error("%s", "--next-hop IP:PORT is required");
    if (!e.policy_path && !subscribe) return usage_error("%s", "--policy FILE or --subscribe NOTIFIER-URI is required");
    if (parse_addr(listen_at, &e.listen_addr)) return usage_error("--listen: '%s' is not IPv4-ADDRESS:PORT (port 1-65535)", listen_at);
    if (parse_addr(next_hop, &e.next_hop)) return usage_error("--next-hop: '%s' is not IPv4-ADDRESS:PORT (port 1-65535)", next_hop);
    struct sockaddr_in metrics_addr;
    if (metrics_at && parse_addr(metrics_at, &metrics_addr)) return usage_error("--metrics: '%s' is not IPv4-ADDRESS:PORT (port 1-65535)", metrics_at);
    if (retry_after > 0) snprintf(e.retry_hdr, sizeof e.retry_hdr, "Retry-After: %ld\r\n", retry_after);
    pthread_mutex_init(&e.sub_mu, NULL);
    e.max_conns = (unsigned)max_conns;
    e.idle_ns = (uint64_t)idle_s * 1000000000ull;
    if (subscribe && !e.udp_on) {
        elog("the subscriber speaks UDP: --subscribe needs --transport udp or both\n");
        return 2;
    }
    if (subscribe && (notifier_at ? parse_addr(notifier_at, &e.notifier_addr) : uri_addr(subscribe, &e.notifier_addr))) {
        elog("no address for the notifier %s (give --notifier IP:PORT)\n", subscribe);
        return 2;
    }
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &e.listen_addr.sin_addr, ip, sizeof ip);
    snprintf(e.via_host, sizeof e.via_host, "%s:%u", ip, ntohs(e.listen_addr.sin_port));
    inet_ntop(AF_INET, &e.next_hop.sin_addr, ip, sizeof ip);
    snprintf(e.next_hop_uri, sizeof e.next_hop_uri, "sip:%s:%u", ip, ntohs(e.next_hop.sin_port));
    lc_engine_config config;
    lc_result er = lc_engine_config_default(&config);
    if (er == LC_RESULT_OK) {
        if (redirect_allow) config.redirect_allow = cstr(redirect_allow);
        if (!emergency_exempt) config.exempt_flags &= ~(uint32_t)LC_EXEMPT_EMERGENCY;
        if (priority_namespaces) config.priority_namespaces = cstr(priority_namespaces);
        config.sip_user_numbers = (lc_sip_user_numbers)user_numbers;
        er = lc_engine_new(&config, &e.engine);
    }
    if (er != LC_RESULT_OK) {
        elog("cannot start the engine: %s%s\n", lc_result_text(er),
                er == LC_RESULT_INVALID_ARGUMENT ? " (check --priority-namespaces: RFC 4412 namespace names)" : "");
        return er == LC_RESULT_INVALID_ARGUMENT || er == LC_RESULT_INVALID_UTF8 ? 2 : 1;
    }
    /* One engine shard per thread; limits hold across both (the engine's shared cells). */
    e.udp = &udp_w;
    udp_w.e = &e;
    udp_w.epfd = -1;
    udp_w.hop = -1;
    if (lc_worker_attach(e.engine, -1, &udp_w.lw) != LC_RESULT_OK) return 1;
    if (e.tcp_on) {
        e.tcp = &tcp_w;
        tcp_w.e = &e;
        if (lc_worker_attach(e.engine, -1, &tcp_w.lw) != LC_RESULT_OK) return 1;
    }
    if (e.policy_path && load_policy(&e) != 0) return 1;
    if (subscribe) {
        /* Until the notifier's first policy is in force: the fallback, or refusal of what no
         * rule matches (notifier_policy_in_force ends it). Never unlimited. */
        atomic_store(&e.no_policy, 1);
        if (e.fallback_path && load_policy_file(&e, e.fallback_path, FALLBACK_SOURCE) != 0) return 1;
        elog("until the notifier's policy is in force: %s%s", e.fallback_path ? "fallback policy " : "",
             e.fallback_path ? e.fallback_path : "new requests no rule matches are answered 503 (no --fallback-policy)");
    }
    /* The retransmission detector (default: 262,144 transactions, 64·T1 = 32 s). */
    if (lc_detector_new(NULL, &e.det) != LC_RESULT_OK) {
        elog("cannot start the retransmission detector\n");
        return 1;
    }
    if (overload_control) {
        /* RFC 7339 client of the next hop (one hop: the table has room for it) and server to
         * upstream clients; one shard of the client per thread. */
        lc_str params = {NULL, 0};
        char hop_key[32];
        addr_key(&e.next_hop, hop_key, sizeof hop_key);
        lc_str hk = {(const uint8_t *)hop_key, strlen(hop_key)};
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

        if (lc_oc_client_new(&cc, 1, &e.oc) != LC_RESULT_OK || lc_oc_client_hop(e.oc, hk, &e.oc_hop) != LC_RESULT_OK ||
            lc_oc_client_request_params(e.oc, &params) != LC_RESULT_OK || params.len >= sizeof e.oc_params ||
            lc_oc_server_config_default(&sc) != LC_RESULT_OK ||
            lc_oc_server_new(&sc, &e.oc_srv) != LC_RESULT_OK || lc_oc_shard_new(e.oc, 1, &udp_w.ocs) != LC_RESULT_OK ||
            (e.tcp_on && lc_oc_shard_new(e.oc, 2, &tcp_w.ocs) != LC_RESULT_OK)) {
            elog("cannot start overload control\n");
            return 1;
        }
        memcpy(e.oc_params, params.ptr, params.len);
        e.oc_params[params.len] = 0;
        if (log_oc && !(e.oc_log = fopen(log_oc, "a"))) {
            elog("cannot open %s: %s\n", log_oc, strerror(errno));
            return 1;
        }
        if (e.oc_log) setvbuf(e.oc_log, NULL, _IOLBF, 0); /* a line as soon as it is sent: tail -f, a kill */
        e.oc_target_ppm = (uint32_t)(oc_target_pct * 10000.0 + 0.5);
        e.oc_timeout_ns = (uint64_t)oc_timeout_ms * 1000000ull;
    }
    if (e.udp_on) {
        e.udp_sock = socket(AF_INET, SOCK_DGRAM, 0);
        if (e.udp_sock < 0 || bind(e.udp_sock, (struct sockaddr *)&e.listen_addr, sizeof e.listen_addr) < 0) {
            elog("cannot listen on udp %s: %s\n", listen_at, strerror(errno));
            return 1;
        }
        /* Room for bursts: the default socket buffer (~200 KB) holds only ~150 small datagrams.
         * SO_RCVBUFFORCE passes net.core.rmem_max when running with CAP_NET_ADMIN. */
        int bufsize = 4 << 20;
        if (setsockopt(e.udp_sock, SOL_SOCKET, SO_RCVBUFFORCE, &bufsize, sizeof bufsize) != 0) {
            setsockopt(e.udp_sock, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
        }
        if (setsockopt(e.udp_sock, SOL_SOCKET, SO_SNDBUFFORCE, &bufsize, sizeof bufsize) != 0) {
            setsockopt(e.udp_sock, SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof bufsize);
        }
    }
    if (e.tcp_on && tcp_start(&e, &tcp_w) != 0) {
        elog("cannot listen on tcp %s: %s\n", listen_at, strerror(errno));
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGPIPE, &(struct sigaction){.sa_handler = SIG_IGN}, NULL);
    /* The startup hold starts before the TCP thread does, which waits while it lasts. */
    if (subscribe && hold_ms > 0) {
        e.hold_until_ns = now_ns() + (uint64_t)hold_ms * 1000000ull;
        atomic_store(&e.holding, 1);
    }
    pthread_t tcp_thread;
    if (e.tcp_on) {
        /* Signals go to the main thread only: its blocking read is what they interrupt. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        int r = pthread_create(&tcp_thread, NULL, tcp_main, &tcp_w);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r != 0) {
            elog("cannot start the TCP thread\n");
            return 1;
        }
    }
    if (metrics_at && metrics_serve_start(&metrics_addr, render_stats, &e) != 0) {
        elog("cannot serve metrics on %s: %s", metrics_at, strerror(errno));
        return 1;
    }
    if (metrics_at) elog("metrics on http://%s/metrics", metrics_at);
    elog("listening on %s (%s), next hop %s\n", listen_at,
            e.udp_on && e.tcp_on ? "udp and tcp" : e.udp_on ? "udp" : "tcp", next_hop);
    if (subscribe && start_subscriber(&e, subscribe, own_uri, expires) != 0) return 1;
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
    if (e.udp_on) setsockopt(e.udp_sock, SOL_SOCKET, SO_RCVTIMEO, &tick, sizeof tick);
    peer_t from;
    memset(&from, 0, sizeof from);
    /* Overload control as a server: the share of wall time this thread spends on messages. */
    uint64_t oc_busy = 0, oc_since = now_ns();
    while (!stop_requested) {
        if (reload_requested) {
            reload_requested = 0;
            if (e.policy_path) load_policy(&e);
        }
        if (stats_requested) {
            stats_requested = 0;
            print_stats(&e);
        }
        if (!e.udp_on) { /* TCP only: this thread only serves signals */
            struct timespec ts = {0, 50000000};
            nanosleep(&ts, NULL);
            continue;
        }
        subscriber_timers(&e);
        release_held(&e, &udp_w);
        expire(&udp_w);
        if (e.oc_srv) {
            uint64_t t = now_ns();
            if (t - oc_since >= OC_REPORT_NS) {
                uint64_t ppm = oc_busy * 1000000ull / (t - oc_since);
                lc_oc_server_report_occupancy(e.oc_srv, t, (uint32_t)(ppm > 1000000 ? 1000000 : ppm), e.oc_target_ppm);
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
        /* One blocking read (it returns what is queued once one datagram is there, or after
         * the 50 ms receive timeout for the timers), or, right after a linger or a full batch,
         * a read that does not wait. */
        int n = recvmmsg(e.udp_sock, rx_msg, BATCH, lingered ? MSG_DONTWAIT : MSG_WAITFORONE, NULL);
        if (n <= 0) {
            lingered = 0;
            flush_sends(&udp_w);
            continue;
        }
        if (!lingered) {
            /* Traffic is dense when this wake-up comes within half a linger of the previous
             * one: only then is a linger worth its own wake-up. */
            uint64_t woke = now_ns();
            dense = woke - last_wake < (uint64_t)linger_us * 500;
            last_wake = woke;
        }
        uint64_t busy_from = e.oc_srv ? now_ns() : 0;
        for (int i = 0; i < n; i++) {
            from.addr = rx_addr[i];
            if (hold_request(&e, rx_buf[i], rx_msg[i].msg_len, &rx_addr[i])) continue;
            handle(&udp_w, rx_buf[i], rx_msg[i].msg_len, &from);
            release_held(&e, &udp_w); /* the NOTIFY just handled may have ended the hold */
        }
        flush_sends(&udp_w);
        if (e.oc_srv) oc_busy += now_ns() - busy_from;
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
    metrics_serve_stop(); /* before what it reads goes */
    if (e.tcp_on) {
        atomic_store(&tcp_stop, 1);
        pthread_join(tcp_thread, NULL);
    }
    if (e.udp_on) stop_subscriber(&e, rx_buf[0]);
    worker_t *ws[2] = {&udp_w, e.tcp};
    unsigned long f = 0, a = 0, ab = 0, m = 0;
    for (int k = 0; k < 2; k++) {
        worker_t *w = ws[k];
        if (!w) continue;
        for (size_t s = 0; s < PENDING; s++) {
            if (w->pending[s].used == SLOT_LIVE) lc_complete(w->lw, &w->pending[s].ticket);
        }
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
    if (e.oc_log) fclose(e.oc_log);
    lc_detector_free(e.det);
    if (e.tcp_on) {
        tcp_finish(&tcp_w);
        close(e.tcp_sock);
    }
    if (e.udp_sock >= 0) close(e.udp_sock);
    lc_engine_free(e.engine);
    elog("stopped (%lu forwarded, %lu answered, %lu ACKs absorbed, %lu malformed, %lu NOTIFYs)\n", f, a, ab, m,
            e.notifies);
    return 0;
}
