/* edge.h: the state the edge's files share: the edge's settings and handles (edge_t), what
 * each SIP thread owns (worker_t: its engine shard, window admissions, counters, output, TCP
 * connections, overload-control shard and decision memory), where a message came from and its
 * answer goes (peer_t), the limits those tables are sized by, and the log. */
#ifndef LOADCTL_EDGE_EDGE_H
#define LOADCTL_EDGE_EDGE_H

/* worker_t holds struct mmsghdr, which needs _GNU_SOURCE before the first system header. */
#ifndef _GNU_SOURCE
#error "define _GNU_SOURCE before any #include"
#endif

#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "loadctl.h"
#include "sipmsg.h"
#include "sipstream.h"
#include "sources.h"
#include "validate.h"

#define MAX_MSG 65535
#define PENDING 4096
/* Datagrams read (recvmmsg) and written (sendmmsg) per system call. */
#define BATCH 32
#define TIMER_B_NS (32ull * 1000000000ull)
/* The To tag of the answers the edge sends itself (503, 302). */
#define EDGE_TAG "lc-edge"
/* The Via parameter naming the inbound TCP connection of a forwarded request. */
#define CONN_PARAM ";lc-conn="
/* Overload control: transactions tracked for timeouts per worker (one direct-mapped table of
 * OC_WAIT slots per worker, shared). */
#define OC_WAIT 8192
/* Retransmissions: the decisions remembered per thread, so that a retransmission gets what its
 * original got: DECIDED entries in sets of DECIDED_WAYS; a transaction is looked up among the
 * entries of its set, and a new one takes the set's oldest entry. A retransmission comes 0.5 to
 * 32 s after its original (Timer A/E, T1 doubling; RFC 3261 §17.1.1.2, §17.1.2.2), so what
 * must survive is the youngest few seconds of transactions: at 4,000 new requests/s about
 * 16,000 in the first 4 s, well inside 65,536 entries. A direct-mapped table of the same size
 * lost about 1 live entry in 400 to collisions at only 120 calls/s (tests/e2e/test_faults.py
 * call_path_lossy: the retransmitted INVITE of an admitted call classified again and answered
 * 503). 16 bytes each: 1 MiB per worker. */
#define DECIDED 65536
#define DECIDED_WAYS 4

/* Set by the signal handler (main.c), served by the main thread's loop (udp.c). */
extern volatile sig_atomic_t reload_requested;
extern volatile sig_atomic_t stats_requested;
extern volatile sig_atomic_t stop_requested;

/* One log line on stderr, `2026-01-31T12:00:00.123Z edge: …`: UTC wall-clock time with
 * milliseconds, so the lines of several hosts sort together. One fprintf per line: the two
 * threads' lines do not interleave. */
void elog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A window admission waiting for its final response. */
typedef struct {
    unsigned long hash;
    uint64_t deadline_ns;
    lc_ticket ticket;
    int used;
} pending_t;

/* The window admissions of all workers: a final response comes back on whichever worker the
 * kernel gives the next hop's datagrams (SO_REUSEPORT hashes the source), not necessarily the
 * one that forwarded the request, so the tickets are shared, in WINDOW_STRIPES tables of
 * PENDING slots, each under its own lock, chosen by the transaction's hash (window.c). */
#define WINDOW_STRIPES 16
typedef struct {
    pthread_mutex_t mu;
    pending_t slot[PENDING];
    size_t live, gone;
} window_stripe_t;

/* Where a message came from, and so where its answer goes: a UDP address, or a TCP or TLS
 * connection (a slot of the connection table and the generation the slot had). */
typedef struct {
    int tcp; /* 1 for TCP and TLS */
    struct sockaddr_in addr;
    unsigned slot;
    uint32_t gen;
    int tls;
} peer_t;

/* What was done with a request (an original, or a retransmission whose decision was not
 * remembered), for its retransmissions: forwarded (admitted, exempt), answered 503 by a rule
 * (`status`), shed for overload control (503 without Retry-After), dropped (TCP). A 302 is not
 * remembered: its Contacts would be needed, so a retransmission of a redirected request is
 * classified again (counted as unremembered). */
/* DM_NO_POLICY: answered 503 without Retry-After because no notifier policy had arrived. */
enum { DM_NONE = 0, DM_FORWARDED, DM_ANSWERED, DM_OC_SHED, DM_DROPPED, DM_NO_POLICY };

/* Written by its worker only; read by any (a retransmission whose source port changed reaches
 * another worker): `hash` doubles as a sequence, zero while `info` changes (memory.c). */
typedef struct {
    _Atomic unsigned long hash; /* decision_key() of the transaction */
    /* When its original was decided (ms of the monotonic clock, the entry counts for Timer B
     * after it) << 24 | status << 8 | kind (DM_*). */
    _Atomic uint64_t info;
} decided_t;

/* Counters of one worker thread. Each is written by its own thread only (relaxed load + store,
 * no locked instruction) and read by the main thread for SIGUSR1. */
typedef struct {
    atomic_ulong forwarded, answered, malformed, absorbed, dropped;
    atomic_ulong tcp_accepted, tcp_refused, tcp_source_refused, tcp_closed, tcp_framing_errors, tcp_too_large, tcp_overflows;
    atomic_ulong tcp_pings, tcp_responses_orphaned, hop_connects, hop_failures, forward_failures, tcp_idle_closed;
    atomic_ulong oc_shed, oc_rejected, oc_bad_feedback, oc_timeouts, oc_stripped;
    atomic_ulong originals, retransmissions, retx_repeated, retx_unremembered;
    atomic_ulong invalid[SV_COUNT]; /* requests not forwarded by RFC 3261 §16.3, by reason */
    atomic_ulong no_policy_rejected;
    atomic_ulong tls_handshakes, tls_handshake_failures;
    atomic_ulong notifies_refused; /* load-control NOTIFYs not from the authenticated notifier */
    atomic_ulong responses_refused; /* naming a TCP/TLS connection, not from the next hop that way */
    atomic_ulong datagrams; /* UDP datagrams read by this worker */
} counters_t;

/* A new request forwarded with overload control, waiting for any response: shared by the
 * workers like the window admissions (oc.c). `due` is the deadline in ms of the monotonic
 * clock << 16 | the overload-control hop it went to; 0: free. Whoever zeroes it (a response, or
 * the expiry of a timeout) with a compare-and-swap owns what it meant. */
typedef struct {
    _Atomic unsigned long hash;
    _Atomic uint64_t due;
} oc_wait_t;

#define BUMP(x) atomic_store_explicit(&(x), atomic_load_explicit(&(x), memory_order_relaxed) + 1, memory_order_relaxed)
#define READ(x) atomic_load_explicit(&(x), memory_order_relaxed)

struct ssl_st;

/* One TCP or TLS connection: inbound (accepted) or one to the next hop. */
typedef struct {
    int fd; /* -1: the slot is free */
    struct ssl_st *ssl; /* TLS (tls.h), or NULL for TCP */
    int handshaking;    /* TLS: no message moves until the handshake is complete */
    uint32_t gen;
    int outbound, connecting;
    int closing;  /* no more messages are taken from it; closed once its output is written */
    int lingering; /* closing, output written and FIN sent: waiting for the peer's */
    int dead;     /* to be closed at the end of this event-loop pass (buffer overflow, …) */
    int dirty;    /* on the list of connections with output to write */
    int backlogged; /* on the list of TLS connections to read again (tcp.c) */
    int want_out; /* EPOLLOUT is armed */
    struct sockaddr_in peer;
    sf_state sf;
    char *in; /* the unfinished message (MAX_MSG bytes, allocated only while there is one) */
    size_t in_len;
    char *out;
    size_t out_len, out_off, out_cap, out_max;
    uint64_t close_at;
    uint64_t last_rx_ns; /* when it last sent us something (for the idle timeout) */
    uint64_t opened_ns;
} conn_t;

struct worker;

typedef struct {
    int udp_on, tcp_on, tls_on;
    unsigned max_conns;
    unsigned max_conns_per_source; /* 0: no limit per source */
    uint64_t idle_ns; /* an inbound connection silent this long is closed (0: never) */
    struct sockaddr_in listen_addr;
    struct sockaddr_in next_hop;
    char next_hop_uri[64]; /* "sip:IP:PORT": the target entity requests are classified with */
    char via_host[64];     /* "IP:PORT" for this proxy's Via */
    /* TLS (--tls-listen): its address, its Via's sent-by, and where requests that came over
     * TLS go on over TLS (--tls-next-hop) with the name its certificate must carry. */
    struct sockaddr_in tls_listen_addr;
    char tls_via_host[64];
    struct sockaddr_in tls_next_hop;
    char tls_next_hop_name[256];
    const char *policy_path;
    const char *source;
    lc_engine *engine;
    /* Tells originals from retransmissions (RFC 3261 transaction key, remembered 64·T1), for
     * the decision memory and for overload control. Shared by every thread (thread-safe). */
    lc_detector *det;
    /* The UDP workers (--workers): each with its own socket on the listening port
     * (SO_REUSEPORT), thread, engine shard, decision memory and output. `udp` is the first,
     * on the main thread, which also runs the subscriber's and the startup hold's timers,
     * overload control's occupancy report and what the signals ask. */
    struct worker **udps, *udp;
    unsigned nudp;
    /* The TCP and TLS workers (as many as --workers asks for): each with its own listening
     * sockets (SO_REUSEPORT: the kernel spreads the connections), epoll loop, connection table
     * and connections to the next hop. `tcp_inbound` counts the inbound connections of all,
     * against --max-connections. */
    struct worker **tcps;
    unsigned ntcp;
    _Atomic unsigned tcp_inbound;
    /* The inbound connections of each source address, against --max-connections-per-source. */
    sources_t sources;
    long linger_us; /* --linger-us */
    int pin;       /* pin each UDP worker to a CPU of `cpus` (more than one worker) */
    cpu_set_t cpus; /* the process's affinity mask at start */
    window_stripe_t *windows; /* WINDOW_STRIPES, every worker's window admissions */
    oc_wait_t *ocw;           /* nocw, every worker's overload-control waits */
    size_t nocw;
    pthread_mutex_t hold_mu;  /* the startup hold's arena, filled by any worker */
    pthread_mutex_t sub_lock; /* the subscriber: a NOTIFY may reach any worker */
    /* The subscriber (NULL without --subscribe), under sub_lock. */
    lc_subscriber *sub;
    struct sublink *link; /* its TLS connection to the notifier (sublink.h), or NULL over UDP */
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
    _Atomic uint64_t hold_until_ns;
    char *held;
    size_t held_len;
    unsigned long held_count, held_dropped;
    /* Overload control (NULL without --overload-control). */
    lc_oc_client *oc;
    struct dialogs *dialogs; /* the dialogs set up through this edge (dialogs.h) */
    uint32_t oc_hop;     /* --next-hop (UDP, TCP) */
    uint32_t oc_tls_hop; /* --tls-next-hop: another server, or the same one's TLS side */
    char oc_params[64]; /* what the client adds to its Via */
    lc_oc_server *oc_srv;
    FILE *oc_log; /* --log-oc: a line per Via this server wrote values into, or NULL */
    uint32_t oc_target_ppm;
    uint64_t oc_timeout_ns;
    /* "Retry-After: N\r\n" for the 503s of rules, or "" (--retry-after 0, the default). */
    char retry_hdr[40];
    /* Until the notifier's first policy is in force (`no_policy`, read by every thread): the
     * --fallback-policy file is enforced, or, without one, a new request no rule matched is
     * answered 503 without Retry-After. */
    atomic_int no_policy;
    const char *fallback_path;
    /* Policy files read (--policy, --fallback-policy; at start and on SIGHUP): published, and
     * refused with the policy in force kept. */
    atomic_ulong policy_loads, policy_load_failures;
    /* The subscriber's counters as last seen under sub_lock, for the metrics endpoint. */
    int unsubscribed; /* the unsubscribe is out: nothing else is sent on the way out */
    int sub_stopped;  /* libloadctl's subscriber reported the subscription stopped */
    pthread_mutex_t sub_mu;
    lc_subscriber_counters sub_stats;
    int sub_stats_valid;
} edge_t;

/* What one thread owns: its engine shard, its counters, its socket and output. */
typedef struct worker {
    edge_t *e;
    lc_worker *lw;
    unsigned index; /* UDP workers 0 … nudp − 1, then the TCP workers */
    int sock;       /* its UDP socket (a TCP worker sends on a UDP worker's) */
    int lsock, tls_lsock; /* a TCP worker's listening sockets, or -1 */
    pthread_t thread;
    uint64_t next_expire_ns;
    /* Wall time spent on messages, for overload control's occupancy (RFC 7339 server). */
    _Atomic uint64_t busy_ns;
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
    char via_buf[MAX_MSG]; /* a Via header value without overload-control parameters */
    /* TCP (a TCP worker only). */
    int epfd;
    conn_t *conns;
    unsigned nconns, inbound, lingering;
    unsigned *free_slots, nfree;
    unsigned *dirty;
    unsigned ndirty;
    unsigned *backlog; /* slots of TLS connections with bytes read ahead (tcp.c) */
    unsigned nbacklog;
    int hop;     /* the slot of the next-hop connection, -1 when none */
    int tls_hop; /* the same over TLS */
    uint64_t tls_hop_retry_ns;
    uint64_t hop_retry_ns;
    uint64_t next_idle_sweep_ns;
    char *rx;
    /* Overload control: this thread's shard of the client. */
    lc_oc_shard *ocs;
    /* What was done with recent requests, for their retransmissions. */
    decided_t decided[DECIDED];
} worker_t;

static inline lc_str cstr(const char *s) {
    lc_str out = {(const uint8_t *)s, s ? strlen(s) : 0};
    return out;
}

static inline int is_response(const char *msg, size_t len) { return len >= 8 && strncmp(msg, "SIP/2.0 ", 8) == 0; }

#endif
