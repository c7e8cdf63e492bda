/* edge: a small stateless SIP edge proxy (UDP) that enforces RFC 7200 load-filtering policies
 * with libloadctl.
 *
 *   edge --listen IP:PORT --next-hop IP:PORT [--policy FILE] [--source NAME]
 *        [--subscribe NOTIFIER-URI [--notifier IP:PORT] [--uri OWN-URI] [--expires S]]
 *        [--linger-us N]
 *
 * With --subscribe it is an RFC 7200 subscriber: it SUBSCRIBEs to the notifier (the `load-control`
 * event package, through libloadctl's subscriber state machine and its SIP wire functions),
 * applies every NOTIFY body it receives, refreshes before the subscription expires, re-SUBSCRIBEs
 * after a version gap, and unsubscribes on SIGINT/SIGTERM. Its SUBSCRIBEs are retransmitted over
 * UDP until a response arrives (Timer E: T1 doubling up to T2, for 64·T1).
 *
 * Every request is classified with lc_classify_sip. Excess is answered 503 (or 302 with the
 * rule's targets as Contacts); everything else is forwarded statelessly to the next hop with
 * this proxy's Via on top (RFC 3261 §16.11: the branch is derived from the incoming one, so
 * retransmissions get the same branch). Responses coming back lose that Via and go to the
 * address in the next Via (received/rport when present). Window admissions are released when a
 * final response for the same Call-ID and CSeq passes back, or after 32 s.
 *
 * SIGHUP reloads the policy file (an invalid file is reported and the old policy stays);
 * SIGUSR1 prints the counters in the Prometheus text format; SIGINT/SIGTERM exit. */
#define _GNU_SOURCE /* recvmmsg, sendmmsg */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "loadctl.h"

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

static volatile sig_atomic_t reload_requested = 0;
static volatile sig_atomic_t stats_requested = 0;
static volatile sig_atomic_t stop_requested = 0;

static void on_signal(int sig) {
    if (sig == SIGHUP) reload_requested = 1;
    else if (sig == SIGUSR1) stats_requested = 1;
    else stop_requested = 1;
}

/* A window admission waiting for its final response. */
typedef struct {
    unsigned long hash;
    uint64_t deadline_ns;
    lc_ticket ticket;
    int used;
} pending_t;

typedef struct {
    int sock;
    struct sockaddr_in listen_addr;
    struct sockaddr_in next_hop;
    const char *policy_path;
    const char *source;
    lc_engine *engine;
    lc_worker *worker;
    pending_t pending[PENDING];
    size_t pending_live, pending_gone;
    uint64_t next_expire_ns;
    unsigned long forwarded, answered, malformed, absorbed;
    /* The subscriber (NULL without --subscribe). */
    lc_subscriber *sub;
    struct sockaddr_in notifier_addr;
    lc_sip_wire wire;
    char sent_by[64];
    char contact[256];
    char sub_msg[MAX_MSG];  /* the outstanding SUBSCRIBE, for retransmission */
    size_t sub_len;
    char sub_branch[64];
    int sub_outstanding;
    unsigned long sub_count;
    uint64_t sub_started_ns, sub_next_rtx_ns, sub_interval_ns;
    unsigned long notifies;
} edge_t;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int parse_addr(const char *text, struct sockaddr_in *out) {
    char host[64];
    const char *colon = strrchr(text, ':');
    if (!colon || (size_t)(colon - text) >= sizeof host) return -1;
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = 0;
    memset(out, 0, sizeof *out);
    out->sin_family = AF_INET;
    out->sin_port = htons((uint16_t)atoi(colon + 1));
    return inet_pton(AF_INET, host, &out->sin_addr) == 1 ? 0 : -1;
}

static int load_policy(edge_t *e) {
    FILE *f = fopen(e->policy_path, "rb");
    if (!f) {
        fprintf(stderr, "edge: cannot open %s: %s\n", e->policy_path, strerror(errno));
        return -1;
    }
    static char body[1 << 20];
    size_t n = fread(body, 1, sizeof body, f);
    fclose(f);
    uint64_t generation = 0;
    lc_str source = {(const uint8_t *)e->source, strlen(e->source)};
    lc_str none = {NULL, 0};
    lc_result r = lc_engine_publish(e->engine, source, none, (const uint8_t *)body, n, &generation);
    if (r != LC_RESULT_OK) {
        char msg[512];
        size_t len = 0;
        lc_policy_check((const uint8_t *)body, n, (uint8_t *)msg, sizeof msg - 1, &len);
        msg[len < sizeof msg ? len : sizeof msg - 1] = 0;
        fprintf(stderr, "edge: %s: %s %s (keeping the current policy)\n", e->policy_path, lc_result_text(r), msg);
        return -1;
    }
    fprintf(stderr, "edge: policy %s loaded (generation %llu)\n", e->policy_path, (unsigned long long)generation);
    return 0;
}

/* Case-insensitive prefix match of a header line against a long or compact name. */
static int header_is(const char *line, size_t len, const char *name, const char *compact) {
    size_t n = strlen(name);
    if (len > n && strncasecmp(line, name, n) == 0 && (line[n] == ':' || line[n] == ' ' || line[n] == '\t')) return 1;
    if (compact && len > 1 && (line[0] == compact[0] || line[0] == (compact[0] - 32)) && (line[1] == ':' || line[1] == ' ')) return 1;
    return 0;
}

/* Finds the value of the first header with that name: start offset and length (0 if absent). */
static size_t find_header(const char *msg, size_t len, const char *name, const char *compact, size_t *value_len) {
    size_t i = 0;
    while (i < len && msg[i] != '\n') i++; /* skip the first line */
    i++;
    while (i < len) {
        size_t end = i;
        while (end < len && msg[end] != '\n') end++;
        size_t line_len = end - i;
        if (line_len > 0 && msg[end - 1] == '\r') line_len--;
        if (line_len == 0) break;
        if (header_is(msg + i, line_len, name, compact)) {
            const char *colon = memchr(msg + i, ':', line_len);
            if (!colon) return 0;
            size_t v = (size_t)(colon - msg) + 1;
            while (v < i + line_len && (msg[v] == ' ' || msg[v] == '\t')) v++;
            *value_len = i + line_len - v;
            return v;
        }
        i = end + 1;
    }
    *value_len = 0;
    return 0;
}

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

/* The table of window admissions is open-addressed with linear probing. A slot is EMPTY (a
 * probe stops there), LIVE, or GONE (released: a probe goes on past it, an insert may reuse it).
 * Most traffic holds no window slot, so a response looks up nothing when the table is empty. */
enum { SLOT_EMPTY = 0, SLOT_LIVE = 1, SLOT_GONE = 2 };

static void remember(edge_t *e, unsigned long h, lc_ticket t) {
    for (size_t k = 0; k < PENDING; k++) {
        pending_t *p = &e->pending[(h + k) % PENDING];
        if (p->used != SLOT_LIVE) {
            if (p->used == SLOT_GONE) e->pending_gone--;
            p->used = SLOT_LIVE;
            p->hash = h;
            p->ticket = t;
            p->deadline_ns = now_ns() + TIMER_B_NS;
            e->pending_live++;
            return;
        }
    }
    lc_complete(e->worker, &t); /* table full: release at once rather than leak */
}

static void forget_slot(edge_t *e, pending_t *p) {
    lc_complete(e->worker, &p->ticket);
    p->used = SLOT_GONE;
    e->pending_live--;
    e->pending_gone++;
}

static void release(edge_t *e, unsigned long h) {
    if (e->pending_live == 0) return;
    for (size_t k = 0; k < PENDING; k++) {
        pending_t *p = &e->pending[(h + k) % PENDING];
        if (p->used == SLOT_EMPTY) return;
        if (p->used == SLOT_LIVE && p->hash == h) {
            forget_slot(e, p);
            return;
        }
    }
}

/* Releases admissions whose response never came (Timer B), at most every 100 ms, and clears
 * the released slots out of the probe chains once they are a quarter of the table. */
static void expire(edge_t *e) {
    uint64_t now = now_ns();
    if (now < e->next_expire_ns) return;
    e->next_expire_ns = now + EXPIRE_EVERY_NS;
    if (e->pending_live == 0 && e->pending_gone == 0) return;
    for (size_t k = 0; k < PENDING; k++) {
        if (e->pending[k].used == SLOT_LIVE && e->pending[k].deadline_ns <= now) forget_slot(e, &e->pending[k]);
    }
    if (e->pending_gone > PENDING / 4) {
        static pending_t live[PENDING];
        size_t n = 0;
        for (size_t k = 0; k < PENDING; k++) {
            if (e->pending[k].used == SLOT_LIVE) live[n++] = e->pending[k];
        }
        memset(e->pending, 0, sizeof e->pending);
        e->pending_live = e->pending_gone = 0;
        for (size_t k = 0; k < n; k++) {
            for (size_t j = 0; j < PENDING; j++) {
                pending_t *p = &e->pending[(live[k].hash + j) % PENDING];
                if (p->used == SLOT_EMPTY) {
                    *p = live[k];
                    e->pending_live++;
                    break;
                }
            }
        }
    }
}

/* Outgoing datagrams are batched and leave with one sendmmsg per batch. */
static char tx_buf[BATCH][MAX_MSG];
static struct sockaddr_in tx_addr[BATCH];
static struct iovec tx_iov[BATCH];
static struct mmsghdr tx_msg[BATCH];
static unsigned tx_count = 0;

static void flush_sends(edge_t *e) {
    unsigned done = 0;
    while (done < tx_count) {
        int n = sendmmsg(e->sock, tx_msg + done, tx_count - done, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "edge: sendmmsg: %s\n", strerror(errno));
            /* Skip the datagram that failed and carry on with the rest. */
            n = 1;
        }
        done += (unsigned)n;
    }
    tx_count = 0;
}

static void send_to(edge_t *e, const char *msg, size_t len, const struct sockaddr_in *to) {
    if (len > MAX_MSG) return;
    if (tx_count == BATCH) flush_sends(e);
    unsigned i = tx_count++;
    memcpy(tx_buf[i], msg, len);
    tx_addr[i] = *to;
    tx_iov[i].iov_base = tx_buf[i];
    tx_iov[i].iov_len = len;
    memset(&tx_msg[i], 0, sizeof tx_msg[i]);
    tx_msg[i].msg_hdr.msg_name = &tx_addr[i];
    tx_msg[i].msg_hdr.msg_namelen = sizeof tx_addr[i];
    tx_msg[i].msg_hdr.msg_iov = &tx_iov[i];
    tx_msg[i].msg_hdr.msg_iovlen = 1;
}

/* Appends `len` bytes to out if they fit. */
static int put(char *out, size_t *at, size_t cap, const char *s, size_t len) {
    if (*at + len > cap) return -1;
    memcpy(out + *at, s, len);
    *at += len;
    return 0;
}

/* Answers a request with `status` (503 or 302 with Contacts), copying Via, From, To (with a
 * tag added when it has none), Call-ID and CSeq. */
static void answer(edge_t *e, const char *msg, size_t len, const struct sockaddr_in *from, const lc_decision *d) {
    static char out[MAX_MSG];
    size_t at = 0;
    char line[128];
    int n = snprintf(line, sizeof line, "SIP/2.0 %u %s\r\n", d->status, d->status == 302 ? "Moved Temporarily" : "Service Unavailable");
    put(out, &at, sizeof out, line, (size_t)n);
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
            put(out, &at, sizeof out, h, line_len);
            put(out, &at, sizeof out, "\r\n", 2);
        } else if (header_is(h, line_len, "To", "t")) {
            put(out, &at, sizeof out, h, line_len);
            int tagged = 0;
            for (size_t k = 0; k + 4 <= line_len; k++) {
                if (strncasecmp(h + k, "tag=", 4) == 0) tagged = 1;
            }
            if (!tagged) put(out, &at, sizeof out, ";tag=" EDGE_TAG, 5 + strlen(EDGE_TAG));
            put(out, &at, sizeof out, "\r\n", 2);
        }
        i = end + 1;
    }
    for (size_t t = 0; d->verdict == LC_VERDICT_REDIRECT && t < d->target_count; t++) {
        put(out, &at, sizeof out, "Contact: <", 10);
        put(out, &at, sizeof out, (const char *)d->targets[t].ptr, d->targets[t].len);
        put(out, &at, sizeof out, ">\r\n", 3);
    }
    if (d->status == 503) put(out, &at, sizeof out, "Retry-After: 5\r\n", 16);
    put(out, &at, sizeof out, "Content-Length: 0\r\n\r\n", 21);
    send_to(e, out, at, from);
    e->answered++;
}

/* Forwards a request with this proxy's Via on top, received/rport on the sender's Via, and
 * Max-Forwards decremented. */
static void forward_request(edge_t *e, const char *msg, size_t len, const struct sockaddr_in *from) {
    static char out[MAX_MSG];
    size_t at = 0;
    size_t first = 0;
    while (first < len && msg[first] != '\n') first++;
    first++;
    put(out, &at, sizeof out, msg, first);
    size_t vl = 0;
    size_t v = find_header(msg, len, "Via", "v", &vl);
    char via[256];
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &e->listen_addr.sin_addr, ip, sizeof ip);
    int n = snprintf(via, sizeof via, "Via: SIP/2.0/UDP %s:%u;branch=z9hG4bK-lc%lx\r\n", ip,
                     ntohs(e->listen_addr.sin_port), hash_bytes(msg + v, vl, msg, first));
    put(out, &at, sizeof out, via, (size_t)n);
    size_t i = first;
    int via_done = 0;
    while (i < len) {
        size_t end = i;
        while (end < len && msg[end] != '\n') end++;
        size_t line_len = end - i;
        if (line_len > 0 && msg[end - 1] == '\r') line_len--;
        const char *h = msg + i;
        if (line_len == 0) {
            put(out, &at, sizeof out, msg + i, len - i); /* the empty line and the body */
            break;
        }
        if (!via_done && header_is(h, line_len, "Via", "v")) {
            via_done = 1;
            put(out, &at, sizeof out, h, line_len);
            char extra[96];
            char src[INET_ADDRSTRLEN];
            inet_ntop(AF_INET, &from->sin_addr, src, sizeof src);
            int m = snprintf(extra, sizeof extra, ";received=%s", src);
            put(out, &at, sizeof out, extra, (size_t)m);
            put(out, &at, sizeof out, "\r\n", 2);
        } else if (header_is(h, line_len, "Max-Forwards", NULL)) {
            const char *colon = memchr(h, ':', line_len);
            int mf = colon ? atoi(colon + 1) : 70;
            char mfl[32];
            int m = snprintf(mfl, sizeof mfl, "Max-Forwards: %d\r\n", mf > 0 ? mf - 1 : 0);
            put(out, &at, sizeof out, mfl, (size_t)m);
        } else {
            put(out, &at, sizeof out, h, end + 1 - i);
        }
        i = end + 1;
    }
    send_to(e, out, at, &e->next_hop);
    e->forwarded++;
}

/* Sends a response back: drops the top Via (ours) and goes to the next Via's address. */
/* Where a response goes: the sent-by of a Via entry, or its received= address (RFC 3261
 * §18.2.2). `entry` is one Via value, up to its comma. */
static int via_destination(const char *entry, size_t len, struct sockaddr_in *to) {
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

/* The offset of the first comma separating Via entries in a header value (len when none). */
static size_t via_comma(const char *v, size_t len) {
    int quoted = 0;
    for (size_t k = 0; k < len; k++) {
        if (v[k] == '"') quoted = !quoted;
        else if (v[k] == ',' && !quoted) return k;
    }
    return len;
}

/* Sends a response back: drops the top Via entry (ours; several entries may share one header
 * line, as SIPp writes them) and goes to the address of the next one. */
static void forward_response(edge_t *e, const char *msg, size_t len) {
    static char out[MAX_MSG];
    size_t at = 0;
    size_t i = 0;
    int dropped = 0;
    struct sockaddr_in to;
    int have_to = 0;
    while (i < len) {
        size_t end = i;
        while (end < len && msg[end] != '\n') end++;
        size_t line_len = end - i;
        if (line_len > 0 && msg[end - 1] == '\r') line_len--;
        const char *h = msg + i;
        if (i > 0 && line_len == 0) {
            put(out, &at, sizeof out, msg + i, len - i);
            break;
        }
        if (i > 0 && header_is(h, line_len, "Via", "v")) {
            const char *colon = memchr(h, ':', line_len);
            size_t v = colon ? (size_t)(colon - h) + 1 : line_len;
            while (v < line_len && (h[v] == ' ' || h[v] == '\t')) v++;
            if (!dropped) {
                dropped = 1; /* ours: the first entry */
                size_t comma = via_comma(h + v, line_len - v);
                if (comma == line_len - v) {
                    i = end + 1;
                    continue;
                }
                v += comma + 1;
                while (v < line_len && (h[v] == ' ' || h[v] == '\t')) v++;
                put(out, &at, sizeof out, "Via: ", 5);
                put(out, &at, sizeof out, h + v, line_len - v);
                put(out, &at, sizeof out, "\r\n", 2);
                have_to = via_destination(h + v, via_comma(h + v, line_len - v), &to);
                i = end + 1;
                continue;
            }
            if (!have_to) have_to = via_destination(h + v, via_comma(h + v, line_len - v), &to);
        }
        put(out, &at, sizeof out, h, end + 1 - i);
        i = end + 1;
    }
    /* A final response ends the transaction: release its window slot. */
    if (len > 12 && msg[7] == ' ' && msg[8] >= '2') release(e, transaction_hash(msg, len));
    if (have_to) send_to(e, out, at, &to);
}

/* ------------------------------------------------------------------ the RFC 7200 subscriber */

static lc_str cstr(const char *s) {
    lc_str out = {(const uint8_t *)s, s ? strlen(s) : 0};
    return out;
}

static void log_subscriber_events(edge_t *e) {
    lc_subscriber_event ev;
    while (lc_subscriber_poll_event(e->sub, &ev) == LC_RESULT_OK) {
        const char *what = "event";
        switch (ev.kind) {
        case LC_SUBSCRIBER_EVENT_KIND_SUBSCRIBED: what = "subscribed (seconds)"; break;
        case LC_SUBSCRIBER_EVENT_KIND_PENDING: what = "pending"; break;
        case LC_SUBSCRIBER_EVENT_KIND_POLICY_APPLIED: what = "policy applied (version)"; break;
        case LC_SUBSCRIBER_EVENT_KIND_POLICY_WITHDRAWN: what = "policy withdrawn"; break;
        case LC_SUBSCRIBER_EVENT_KIND_DOCUMENT_IGNORED: what = "document ignored (version)"; break;
        case LC_SUBSCRIBER_EVENT_KIND_INVALID_DOCUMENT: what = "invalid document, policy kept"; break;
        case LC_SUBSCRIBER_EVENT_KIND_APPLY_FAILED: what = "document refused by the engine"; break;
        case LC_SUBSCRIBER_EVENT_KIND_UNKNOWN_BODY: what = "unknown body discarded"; break;
        case LC_SUBSCRIBER_EVENT_KIND_REDIRECT_OUTSIDE_ALLOW_LIST: what = "redirect outside the allow-list"; break;
        case LC_SUBSCRIBER_EVENT_KIND_NOTIFY_REJECTED: what = "NOTIFY rejected (status)"; break;
        case LC_SUBSCRIBER_EVENT_KIND_RETRYING: what = "retrying"; break;
        case LC_SUBSCRIBER_EVENT_KIND_LAPSED: what = "subscription lapsed"; break;
        case LC_SUBSCRIBER_EVENT_KIND_STOPPED: what = "subscription stopped"; break;
        }
        /* Wall-clock time, to line the log up with the SIP peers' traces. */
        struct timespec wall;
        clock_gettime(CLOCK_REALTIME, &wall);
        fprintf(stderr, "edge: subscriber at %lld.%06ld: %s %llu %.*s\n", (long long)wall.tv_sec,
                wall.tv_nsec / 1000, what, (unsigned long long)ev.number, (int)ev.text.len,
                ev.text.ptr ? (const char *)ev.text.ptr : "");
    }
}

/* Sends the subscriber's next SUBSCRIBE when none is outstanding. */
static void subscriber_transmit(edge_t *e) {
    if (!e->sub || e->sub_outstanding) return;
    char branch[64];
    snprintf(branch, sizeof branch, SUB_BRANCH "%lx%lu", (unsigned long)getpid(), ++e->sub_count);
    size_t len = 0;
    lc_result r = lc_subscriber_transmit_wire(e->sub, &e->wire, cstr(branch), (uint8_t *)e->sub_msg,
                                              sizeof e->sub_msg, &len);
    if (r == LC_RESULT_EMPTY) return;
    if (r != LC_RESULT_OK) {
        fprintf(stderr, "edge: subscriber: cannot render SUBSCRIBE: %s\n", lc_result_text(r));
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
    send_to(e, e->sub_msg, len, &e->notifier_addr);
}

/* Timer E (retransmit) / Timer F (give up; the state machine has its own timeout for it). */
static void subscriber_timers(edge_t *e) {
    if (!e->sub) return;
    uint64_t now = now_ns();
    if (e->sub_outstanding && now - e->sub_started_ns >= 64 * T1_NS) {
        e->sub_outstanding = 0;
    } else if (e->sub_outstanding && now >= e->sub_next_rtx_ns) {
        send_to(e, e->sub_msg, e->sub_len, &e->notifier_addr);
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
        if (r != LC_RESULT_OK) fprintf(stderr, "edge: subscriber: bad response: %s\n", lc_result_text(r));
    } else if (len >= 7 && strncmp(msg, "NOTIFY ", 7) == 0 && is_load_control(msg, len)) {
        lc_result r = lc_subscriber_receive_wire(e->sub, now, (const uint8_t *)msg, len, &e->wire,
                                                 (uint8_t *)reply, sizeof reply, &rlen);
        e->notifies++;
        if (r != LC_RESULT_OK) {
            fprintf(stderr, "edge: subscriber: bad NOTIFY: %s\n", lc_result_text(r));
        } else if (rlen > 0) {
            send_to(e, reply, rlen, from);
        }
    } else {
        return 0;
    }
    subscriber_transmit(e);
    log_subscriber_events(e);
    return 1;
}

/* The host:port of a SIP URI into an address (for --subscribe without --notifier). */
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
        fprintf(stderr, "edge: cannot subscribe to %s: %s\n", notifier, lc_result_text(r));
        return -1;
    }
    fprintf(stderr, "edge: subscribing to %s as %s\n", notifier, e->contact);
    subscriber_transmit(e);
    return 0;
}

/* Unsubscribes (SUBSCRIBE with Expires: 0) and waits up to a second for the answer. */
static void stop_subscriber(edge_t *e, char *buf) {
    if (!e->sub) return;
    e->sub_outstanding = 0;
    lc_subscriber_unsubscribe(e->sub, now_ns());
    subscriber_transmit(e);
    flush_sends(e);
    uint64_t until = now_ns() + 1000000000ull;
    while (e->sub_outstanding && now_ns() < until) {
        struct pollfd p = {e->sock, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        ssize_t n = recvfrom(e->sock, buf, MAX_MSG, 0, (struct sockaddr *)&from, &fl);
        if (n > 0) subscriber_receive(e, buf, (size_t)n, &from);
        flush_sends(e);
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

static void handle(edge_t *e, const char *msg, size_t len, const struct sockaddr_in *from) {
    if (subscriber_receive(e, msg, len, from)) return;
    if (len >= 8 && strncmp(msg, "SIP/2.0 ", 8) == 0) {
        forward_response(e, msg, len);
        return;
    }
    if (len >= 4 && strncmp(msg, "ACK ", 4) == 0 && acks_our_answer(msg, len)) {
        e->absorbed++;
        return; /* the ACK to our own 503 / 302 ends here (RFC 3261 §17.2.1) */
    }
    lc_decision d;
    lc_result r = lc_classify_sip(e->worker, (const uint8_t *)msg, len, LC_TRANSPORT_UDP, &d);
    if (r != LC_RESULT_OK) {
        e->malformed++;
        return; /* not a request we can route: dropped */
    }
    if (d.verdict == LC_VERDICT_REJECT || d.verdict == LC_VERDICT_REDIRECT) {
        answer(e, msg, len, from, &d);
        return;
    }
    if (d.verdict == LC_VERDICT_DROP) return;
    if (d.has_ticket) remember(e, transaction_hash(msg, len), d.ticket);
    forward_request(e, msg, len, from);
}

static void print_stats(edge_t *e) {
    size_t need = 0;
    lc_engine_prometheus(e->engine, NULL, 0, &need);
    char *text = malloc(need + 1);
    size_t n = 0;
    if (text && lc_engine_prometheus(e->engine, (uint8_t *)text, need, &n) == LC_RESULT_OK) {
        fwrite(text, 1, n, stdout);
        printf("edge_forwarded_total %lu\nedge_answered_total %lu\nedge_malformed_total %lu\nedge_acks_absorbed_total %lu\n",
               e->forwarded, e->answered, e->malformed, e->absorbed);
        fflush(stdout);
    }
    free(text);
}

static int usage(void) {
    fprintf(stderr, "usage: edge --listen IP:PORT --next-hop IP:PORT [--policy FILE] [--source NAME]\n"
                    "            [--subscribe NOTIFIER-URI [--notifier IP:PORT] [--uri OWN-URI] [--expires S]]\n"
            "            [--linger-us N]\n");
    return 2;
}

int main(int argc, char **argv) {
    static edge_t e;
    const char *listen_at = NULL, *next_hop = NULL;
    const char *subscribe = NULL, *notifier_at = NULL, *own_uri = NULL;
    unsigned expires = 0;
    long linger_us = 200;
    e.source = "edge";
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) return usage();
        if (strcmp(argv[i], "--listen") == 0) listen_at = argv[++i];
        else if (strcmp(argv[i], "--next-hop") == 0) next_hop = argv[++i];
        else if (strcmp(argv[i], "--policy") == 0) e.policy_path = argv[++i];
        else if (strcmp(argv[i], "--source") == 0) e.source = argv[++i];
        else if (strcmp(argv[i], "--subscribe") == 0) subscribe = argv[++i];
        else if (strcmp(argv[i], "--notifier") == 0) notifier_at = argv[++i];
        else if (strcmp(argv[i], "--uri") == 0) own_uri = argv[++i];
        else if (strcmp(argv[i], "--expires") == 0) expires = (unsigned)atoi(argv[++i]);
        else if (strcmp(argv[i], "--linger-us") == 0) linger_us = atol(argv[++i]);
        else return usage();
    }
    if (linger_us < 0 || linger_us > 100000) return usage();
    if (!listen_at || !next_hop || (!e.policy_path && !subscribe) || parse_addr(listen_at, &e.listen_addr) ||
        parse_addr(next_hop, &e.next_hop)) {
        return usage();
    }
    if (subscribe && (notifier_at ? parse_addr(notifier_at, &e.notifier_addr) : uri_addr(subscribe, &e.notifier_addr))) {
        fprintf(stderr, "edge: no address for the notifier %s (give --notifier IP:PORT)\n", subscribe);
        return 2;
    }
    if (lc_engine_new(NULL, &e.engine) != LC_RESULT_OK || lc_worker_attach(e.engine, -1, &e.worker) != LC_RESULT_OK) {
        fprintf(stderr, "edge: cannot start the engine\n");
        return 1;
    }
    if (e.policy_path && load_policy(&e) != 0) return 1;
    e.sock = socket(AF_INET, SOCK_DGRAM, 0);
    if (e.sock < 0 || bind(e.sock, (struct sockaddr *)&e.listen_addr, sizeof e.listen_addr) < 0) {
        fprintf(stderr, "edge: cannot listen on %s: %s\n", listen_at, strerror(errno));
        return 1;
    }
    /* Room for bursts: the default socket buffer (~200 KB) holds only ~150 small datagrams.
     * SO_RCVBUFFORCE passes net.core.rmem_max when running with CAP_NET_ADMIN. */
    int bufsize = 4 << 20;
    if (setsockopt(e.sock, SOL_SOCKET, SO_RCVBUFFORCE, &bufsize, sizeof bufsize) != 0) {
        setsockopt(e.sock, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
    }
    if (setsockopt(e.sock, SOL_SOCKET, SO_SNDBUFFORCE, &bufsize, sizeof bufsize) != 0) {
        setsockopt(e.sock, SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof bufsize);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    fprintf(stderr, "edge: listening on %s, next hop %s\n", listen_at, next_hop);
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
    setsockopt(e.sock, SOL_SOCKET, SO_RCVTIMEO, &tick, sizeof tick);
    while (!stop_requested) {
        if (reload_requested) {
            reload_requested = 0;
            if (e.policy_path) load_policy(&e);
        }
        if (stats_requested) {
            stats_requested = 0;
            print_stats(&e);
        }
        subscriber_timers(&e);
        expire(&e);
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
        int n = recvmmsg(e.sock, rx_msg, BATCH, lingered ? MSG_DONTWAIT : MSG_WAITFORONE, NULL);
        if (n <= 0) {
            lingered = 0;
            flush_sends(&e);
            continue;
        }
        if (!lingered) {
            /* Traffic is dense when this wake-up comes within half a linger of the previous
             * one: only then is a linger worth its own wake-up. */
            uint64_t woke = now_ns();
            dense = woke - last_wake < (uint64_t)linger_us * 500;
            last_wake = woke;
        }
        for (int i = 0; i < n; i++) {
            handle(&e, rx_buf[i], rx_msg[i].msg_len, &rx_addr[i]);
        }
        flush_sends(&e);
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
    stop_subscriber(&e, rx_buf[0]);
    for (size_t k = 0; k < PENDING; k++) {
        if (e.pending[k].used == SLOT_LIVE) lc_complete(e.worker, &e.pending[k].ticket);
    }
    close(e.sock);
    lc_worker_free(e.worker);
    lc_engine_free(e.engine);
    fprintf(stderr, "edge: stopped (%lu forwarded, %lu answered, %lu ACKs absorbed, %lu malformed, %lu NOTIFYs)\n",
            e.forwarded, e.answered, e.absorbed, e.malformed, e.notifies);
    return 0;
}
