/* Drives the edge over UDP and TCP on loopback. UDP: 503 for a throttled prefix, 302 with
 * Contact for a redirect rule, forwarding with Via handling both ways, SIGHUP reload (and an
 * invalid file kept out), garbage ignored. TCP: a message written a byte at a time and several
 * in one write, keep-alive ping/pong, 503/302 and the ACK to them, drop (no answer over TCP), a
 * window released by the final response (not a provisional one),
 * forwarding on one persistent connection to the next hop with each response routed back to
 * the connection its request came on, a response for a connection that has gone dropped, 400
 * and close on a missing Content-Length, close on an oversized message, reconnection after the
 * next hop closed, 500 connections at once, a caller that never reads, the connection limit, the idle timeout, and
 * --transport udp (no TCP listener). Retransmissions over UDP: forwarded again with the same
 * branch when the original was (charged no rate token and no second window slot), answered 503
 * again when it was, with the counters read by SIGUSR1. Clean exit on SIGTERM. `make edge-test` runs it
 * against the edge as built and against a build under ASan and UBSan.
 *
 *   test_edge ./edge */
#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "../ffi/tests/check.h"

static void pause_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static const char *POLICY_FILE = "target/edge-test-policy.xml";

static void write_policy_to(const char *path, const char *rules) {
    FILE *f = fopen(path, "w");
    if (!f) {
        perror("policy file");
        exit(1);
    }
    fprintf(f, "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"full\">%s</ruleset>", rules);
    fclose(f);
}

static void write_policy(const char *rules) { write_policy_to(POLICY_FILE, rules); }

static const char *HOTLINE = "<rule id=\"hotline\"><conditions><call-identity><sip><to><many-tel prefix=\"+1-212\"/></to></sip></call-identity>"
                             "<method>INVITE</method></conditions><actions><accept><rate>0</rate></accept></actions></rule>";
static const char *TICKETS = "<rule id=\"tickets\"><conditions><call-identity><sip><request-uri><one id=\"sip:tickets@arena.example.com\"/></request-uri></sip></call-identity>"
                             "</conditions><actions><accept alt-action=\"redirect\" alt-target=\"sip:portal@arena.example.com\"><rate>0</rate></accept></actions></rule>";

static const char *DROPPER = "<rule id=\"dropper\"><conditions><call-identity><sip><to><many-tel prefix=\"+1888\"/></to></sip></call-identity>"
                             "</conditions><actions><accept alt-action=\"drop\"><rate>0</rate></accept></actions></rule>";

static const char *WINDOW = "<rule id=\"window\"><conditions><call-identity><sip><to><many-tel prefix=\"+1444\"/></to></sip></call-identity>"
                           "<method>INVITE</method></conditions><actions><accept><win>1</win></accept></actions></rule>";

static int udp_socket(struct sockaddr_in *bound) {
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(s, (struct sockaddr *)&a, sizeof a);
    socklen_t l = sizeof *bound;
    getsockname(s, (struct sockaddr *)bound, &l);
    return s;
}

/* Whether a socket is bound to `port` on this host (TCP: listening), read from /proc/net (the
 * edge is Linux's); probing with a bind of our own could take the port from the edge. */
static int listening(int port, int tcp) {
    FILE *f = fopen(tcp ? "/proc/net/tcp" : "/proc/net/udp", "r");
    if (!f) return 0;
    char line[512];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned lport = 0, state = 0;
        if (sscanf(line, " %*u: %*8x:%4x %*8x:%*4x %2x", &lport, &state) == 2 && (int)lport == port)
            found = !tcp || state == 0x0A;
    }
    fclose(f);
    return found;
}

/* Waits for the edge started on `port` to be bound (UDP) and listening (TCP), as `transports`
 * says ("udp", "tcp" or both): a busy machine can take far longer than usual to start it, an
 * ASan build longer still. */
static int wait_edge(int port, const char *transports) {
    for (int k = 0; k < 2000; k++) { /* 20 s */
        if ((!strstr(transports, "udp") || listening(port, 0)) && (!strstr(transports, "tcp") || listening(port, 1))) return 1;
        pause_ms(10);
    }
    return 0;
}

static int recv_msg(int s, char *buf, size_t cap, struct sockaddr_in *from) {
    struct pollfd p = {s, POLLIN, 0};
    if (poll(&p, 1, 2000) <= 0) return -1;
    socklen_t l = sizeof *from;
    ssize_t n = recvfrom(s, buf, cap - 1, 0, (struct sockaddr *)from, &l);
    if (n < 0) return -1;
    buf[n] = 0;
    return (int)n;
}

static void invite(char *out, size_t cap, const char *ruri, const char *to, int port, const char *callid) {
    snprintf(out, cap,
             "INVITE %s SIP/2.0\r\n"
             "Via: SIP/2.0/UDP 127.0.0.1:%d;branch=z9hG4bK-%s;rport\r\n"
             "Max-Forwards: 70\r\n"
             "From: \"Caller\" <sip:caller@example.org>;tag=abc\r\n"
             "To: %s\r\n"
             "Call-ID: %s\r\n"
             "CSeq: 1 INVITE\r\n"
             "Contact: <sip:caller@127.0.0.1:%d>\r\n"
             "Content-Length: 0\r\n\r\n",
             ruri, port, callid, to, callid, port);
}

/* ---------------------------------------------------------------- TCP */

static int tcp_listener(struct sockaddr_in *bound) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(s, (struct sockaddr *)&a, sizeof a);
    listen(s, 16);
    socklen_t l = sizeof *bound;
    getsockname(s, (struct sockaddr *)bound, &l);
    return s;
}

static int tcp_connect(const struct sockaddr_in *to) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(s, (const struct sockaddr *)to, sizeof *to) != 0) {
        close(s);
        return -1;
    }
    return s;
}

static int readable(int s, int ms) {
    struct pollfd p = {s, POLLIN, 0};
    return poll(&p, 1, ms) > 0;
}

static int accept_within(int l, int ms) { return readable(l, ms) ? accept(l, NULL, NULL) : -1; }

static void write_all(int s, const char *p, size_t n) {
    while (n > 0) {
        ssize_t k = send(s, p, n, MSG_NOSIGNAL);
        if (k <= 0) return;
        p += k;
        n -= (size_t)k;
    }
}

/* What a connection received so far. */
typedef struct {
    int s;
    char buf[65536];
    size_t len;
    int eof; /* the peer closed (or reset) it */
} stream_t;

static void fill(stream_t *t, int ms) {
    if (t->eof || !readable(t->s, ms)) return;
    ssize_t n = recv(t->s, t->buf + t->len, sizeof t->buf - 1 - t->len, 0);
    if (n <= 0) t->eof = 1;
    else t->len += (size_t)n;
    t->buf[t->len] = 0;
}

/* The next SIP message on a stream (framed by Content-Length) into out: 1, or 0 when none
 * came within about `ms`. CRLFs before it (pongs) are counted in *pongs and skipped. */
static int next_msg(stream_t *t, char *out, size_t cap, int ms, int *pongs) {
    int idle = 0;
    for (;;) {
        while (t->len >= 2 && t->buf[0] == '\r' && t->buf[1] == '\n') {
            if (pongs) (*pongs)++;
            memmove(t->buf, t->buf + 2, t->len - 2);
            t->len -= 2;
            t->buf[t->len] = 0;
        }
        char *end = strstr(t->buf, "\r\n\r\n");
        if (end) {
            size_t hl = (size_t)(end + 4 - t->buf);
            const char *cl = strstr(t->buf, "Content-Length: ");
            size_t body = cl && cl < end ? (size_t)atoi(cl + 16) : 0;
            if (t->len >= hl + body && hl + body < cap) {
                memcpy(out, t->buf, hl + body);
                out[hl + body] = 0;
                memmove(t->buf, t->buf + hl + body, t->len - hl - body);
                t->len -= hl + body;
                t->buf[t->len] = 0;
                return 1;
            }
        }
        if (t->eof || idle >= ms) return 0;
        size_t before = t->len;
        fill(t, 20);
        if (t->len == before) idle += 20;
    }
}

/* A response to `req` (a request as the next hop received it, our Via on top), Vias kept. */
static size_t respond(const char *req, const char *status, char *out, size_t cap) {
    size_t at = (size_t)snprintf(out, cap, "SIP/2.0 %s\r\n", status);
    const char *line = strstr(req, "\r\n");
    line = line ? line + 2 : req + strlen(req);
    while (*line && strncmp(line, "\r\n", 2) != 0) {
        const char *end = strstr(line, "\r\n");
        if (!end) break;
        if (strncmp(line, "Via:", 4) == 0 || strncmp(line, "From:", 5) == 0 || strncmp(line, "To:", 3) == 0 ||
            strncmp(line, "Call-ID:", 8) == 0 || strncmp(line, "CSeq:", 5) == 0) {
            at += (size_t)snprintf(out + at, cap - at, "%.*s\r\n", (int)(end - line), line);
        }
        line = end + 2;
    }
    at += (size_t)snprintf(out + at, cap - at, "Content-Length: 0\r\n\r\n");
    return at;
}

/* An INVITE over TCP whose body looks like headers and like the end of a header block. */
static void tcp_invite(char *out, size_t cap, const char *ruri, const char *to, const char *callid) {
    snprintf(out, cap,
             "INVITE %s SIP/2.0\r\n"
             "Via: SIP/2.0/TCP 127.0.0.1:5999;branch=z9hG4bK-%s\r\n"
             "Max-Forwards: 70\r\n"
             "From: \"Caller\" <sip:caller@example.org>;tag=abc\r\n"
             "To: %s\r\n"
             "Call-ID: %s\r\n"
             "CSeq: 1 INVITE\r\n"
             "Content-Type: text/plain\r\n"
             "Content-Length: 24\r\n\r\n"
             "Via: not a header\r\n\r\nX\r\n",
             ruri, callid, to, callid);
}

/* What follows the first `marker` in a message, `skip` bytes into it, up to one of `stop`
 * (copied into out, empty when the marker is not there). */
static void copy_after(const char *msg, const char *marker, size_t skip, const char *stop, char *out, size_t cap) {
    const char *p = strstr(msg, marker);
    size_t n = p ? strcspn(p + skip, stop) : 0;
    if (n >= cap) n = cap - 1;
    if (p) memcpy(out, p + skip, n);
    out[n] = 0;
}

/* The value of lc-conn= in a message (empty when none). */
static void conn_param(const char *msg, char *out, size_t cap) { copy_after(msg, ";lc-conn=", 9, ";,\r\n ", out, cap); }

static int ping_pong(int s) {
    stream_t *t = calloc(1, sizeof *t);
    t->s = s;
    write_all(s, "\r\n\r\n", 4);
    int pongs = 0;
    char out[64];
    next_msg(t, out, sizeof out, 500, &pongs);
    free(t);
    return pongs == 1;
}

/* The TCP half, against an edge listening on `edge` (UDP and TCP) whose next hop listens on
 * `hop_l`, with the policy of main(). */
static void tcp_tests(const struct sockaddr_in *edge, int hop_l) {
    static stream_t c1, c2, c3, c4, hop;
    static char msg[8192], inv1[8192], inv2[8192], got[65536], resp[16384];
    int pongs = 0;

    /* 1. An INVITE written a byte at a time for its first 60 bytes, then the rest with a
     * keep-alive ping behind it: the pong comes back; the INVITE goes to the next hop over TCP
     * with our Via naming the connection, and its body arrives intact. */
    c1.s = tcp_connect(edge);
    CHECK(c1.s >= 0);
    tcp_invite(msg, sizeof msg, "sip:bob@example.net", "<sip:bob@example.net>", "tcp-1");
    for (size_t i = 0; i < 60; i++) {
        write_all(c1.s, msg + i, 1);
        pause_ms(1);
    }
    write_all(c1.s, msg + 60, strlen(msg) - 60);
    write_all(c1.s, "\r\n\r\n", 4);
    hop.s = accept_within(hop_l, 2000);
    CHECK(hop.s >= 0);
    CHECK(next_msg(&hop, inv1, sizeof inv1, 2000, NULL));
    CHECK(strncmp(inv1, "INVITE sip:bob@example.net SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.1:", 63) == 0);
    CHECK(strstr(inv1, ";lc-conn=") != NULL && strstr(inv1, "branch=z9hG4bK-lc") != NULL);
    CHECK(strstr(inv1, "branch=z9hG4bK-tcp-1;received=127.0.0.1\r\n") != NULL);
    CHECK(strstr(inv1, "Max-Forwards: 69\r\n") != NULL);
    CHECK(strstr(inv1, "\r\n\r\nVia: not a header\r\n\r\nX\r\n") != NULL);
    CHECK(next_msg(&c1, got, sizeof got, 300, &pongs) == 0 && pongs == 1);

    /* 2. The next hop answers 180 and 200 in one write: both reach the caller, in order,
     * without our Via. */
    size_t n = respond(inv1, "180 Ringing", resp, sizeof resp);
    n += respond(inv1, "200 OK", resp + n, sizeof resp - n);
    write_all(hop.s, resp, n);
    CHECK(next_msg(&c1, got, sizeof got, 2000, NULL) && strncmp(got, "SIP/2.0 180 Ringing\r\n", 21) == 0);
    CHECK(strstr(got, "lc-conn") == NULL && strstr(got, "z9hG4bK-lc") == NULL && strstr(got, "branch=z9hG4bK-tcp-1") != NULL);
    CHECK(next_msg(&c1, got, sizeof got, 2000, NULL) && strncmp(got, "SIP/2.0 200 OK\r\n", 16) == 0);

    /* 3. A throttled INVITE, a redirected one and a dropped one in one write: 503 and 302 come
     * back on the connection; the drop gets no answer over TCP (RFC 7200: only UDP turns it
     * into a 503); the ACK to the 503 is absorbed; nothing reaches the next hop. */
    char a[2048], b[2048], d[2048];
    tcp_invite(a, sizeof a, "sip:+12125551234@gw.example.com;user=phone", "<tel:+1-212-555-1234>", "tcp-503");
    tcp_invite(b, sizeof b, "sip:tickets@arena.example.com", "<sip:tickets@arena.example.com>", "tcp-302");
    tcp_invite(d, sizeof d, "sip:+18885551234@gw.example.com;user=phone", "<tel:+1-888-555-1234>", "tcp-drop");
    snprintf(msg, sizeof msg, "%s%s%s", a, b, d);
    write_all(c1.s, msg, strlen(msg));
    CHECK(next_msg(&c1, got, sizeof got, 2000, NULL) && strncmp(got, "SIP/2.0 503 ", 12) == 0);
    CHECK(strstr(got, "Call-ID: tcp-503\r\n") && strstr(got, ";tag=lc-edge") && strstr(got, "Via: SIP/2.0/TCP 127.0.0.1:5999;branch=z9hG4bK-tcp-503"));
    CHECK(next_msg(&c1, got, sizeof got, 2000, NULL) && strncmp(got, "SIP/2.0 302 ", 12) == 0);
    CHECK(strstr(got, "Contact: <sip:portal@arena.example.com>\r\n") != NULL && strstr(got, "Call-ID: tcp-302\r\n") != NULL);
    CHECK(next_msg(&c1, got, sizeof got, 300, NULL) == 0); /* nothing for the drop */
    snprintf(msg, sizeof msg,
             "ACK sip:+12125551234@gw.example.com;user=phone SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.1:5999;branch=z9hG4bK-tcp-503\r\n"
             "Max-Forwards: 70\r\nFrom: <sip:caller@example.org>;tag=abc\r\nTo: <tel:+1-212-555-1234>;tag=lc-edge\r\n"
             "Call-ID: tcp-503\r\nCSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n");
    write_all(c1.s, msg, strlen(msg));
    CHECK(next_msg(&hop, got, sizeof got, 300, NULL) == 0);

    /* 4. A second caller's request goes on the same connection to the next hop, with another
     * lc-conn; that caller leaves before the answer comes: the answer is dropped, not sent to
     * anyone else, and the first caller's next call still gets its answer. */
    c2.s = tcp_connect(edge);
    CHECK(c2.s >= 0);
    tcp_invite(msg, sizeof msg, "sip:carol@example.net", "<sip:carol@example.net>", "tcp-2");
    write_all(c2.s, msg, strlen(msg));
    CHECK(next_msg(&hop, inv2, sizeof inv2, 2000, NULL) && strstr(inv2, "Call-ID: tcp-2\r\n") != NULL);
    CHECK(accept_within(hop_l, 50) < 0); /* one connection to the next hop */
    char p1[64], p2[64];
    conn_param(inv1, p1, sizeof p1);
    conn_param(inv2, p2, sizeof p2);
    CHECK(p1[0] && p2[0] && strcmp(p1, p2) != 0);
    close(c2.s);
    pause_ms(200);
    /* A third connection probably gets c2's slot back, with a new generation. */
    c3.s = tcp_connect(edge);
    CHECK(c3.s >= 0 && ping_pong(c3.s));
    n = respond(inv2, "200 OK", resp, sizeof resp);
    write_all(hop.s, resp, n);
    CHECK(next_msg(&c1, got, sizeof got, 300, NULL) == 0);
    CHECK(next_msg(&c3, got, sizeof got, 300, NULL) == 0);
    tcp_invite(msg, sizeof msg, "sip:bob@example.net", "<sip:bob@example.net>", "tcp-3");
    write_all(c1.s, msg, strlen(msg));
    CHECK(next_msg(&hop, inv1, sizeof inv1, 2000, NULL) && strstr(inv1, "Call-ID: tcp-3\r\n") != NULL);
    n = respond(inv1, "486 Busy Here", resp, sizeof resp);
    write_all(hop.s, resp, n);
    CHECK(next_msg(&c1, got, sizeof got, 2000, NULL) && strncmp(got, "SIP/2.0 486 ", 12) == 0 && strstr(got, "Call-ID: tcp-3\r\n"));

    /* A window of 1 over TCP: the second call is refused while the first is open; a
     * provisional response does not free the slot, the final one does. */
    tcp_invite(msg, sizeof msg, "sip:+14445551234@gw.example.com;user=phone", "<tel:+1-444-555-1234>", "win-1");
    write_all(c1.s, msg, strlen(msg));
    CHECK(next_msg(&hop, inv1, sizeof inv1, 2000, NULL) && strstr(inv1, "Call-ID: win-1\r\n") != NULL);
    n = respond(inv1, "180 Ringing", resp, sizeof resp);
    write_all(hop.s, resp, n);
    CHECK(next_msg(&c1, got, sizeof got, 2000, NULL) && strncmp(got, "SIP/2.0 180 ", 12) == 0);
    tcp_invite(msg, sizeof msg, "sip:+14445551234@gw.example.com;user=phone", "<tel:+1-444-555-1234>", "win-2");
    write_all(c1.s, msg, strlen(msg));
    CHECK(next_msg(&c1, got, sizeof got, 2000, NULL) && strncmp(got, "SIP/2.0 503 ", 12) == 0 && strstr(got, "Call-ID: win-2\r\n"));
    n = respond(inv1, "200 OK", resp, sizeof resp);
    write_all(hop.s, resp, n);
    CHECK(next_msg(&c1, got, sizeof got, 2000, NULL) && strncmp(got, "SIP/2.0 200 ", 12) == 0 && strstr(got, "Call-ID: win-1\r\n"));
    tcp_invite(msg, sizeof msg, "sip:+14445551234@gw.example.com;user=phone", "<tel:+1-444-555-1234>", "win-3");
    write_all(c1.s, msg, strlen(msg));
    CHECK(next_msg(&hop, inv1, sizeof inv1, 2000, NULL) && strstr(inv1, "Call-ID: win-3\r\n") != NULL);

    /* 5. No Content-Length: 400, then the edge closes the connection. */
    const char *nolen = "OPTIONS sip:bob@example.net SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.1:5999;branch=z9hG4bK-nolen\r\n"
                        "From: <sip:caller@example.org>;tag=abc\r\nTo: <sip:bob@example.net>\r\nCall-ID: nolen\r\nCSeq: 1 OPTIONS\r\n\r\n";
    write_all(c3.s, nolen, strlen(nolen));
    CHECK(next_msg(&c3, got, sizeof got, 2000, NULL) && strncmp(got, "SIP/2.0 400 Missing Content-Length\r\n", 36) == 0);
    CHECK(strstr(got, "Call-ID: nolen\r\n") != NULL);
    CHECK(next_msg(&c3, got, sizeof got, 2000, NULL) == 0 && c3.eof);
    close(c3.s);

    /* 6. A header block that does not end within 64 KiB: the connection is closed. */
    c4.s = tcp_connect(edge);
    CHECK(c4.s >= 0);
    static char big[70000];
    memset(big, 'a', sizeof big);
    memcpy(big, "INVITE sip:x SIP/2.0\r\nSubject: ", 31);
    write_all(c4.s, big, sizeof big);
    CHECK(next_msg(&c4, got, sizeof got, 2000, NULL) == 0 && c4.eof);
    close(c4.s);
    /* A Content-Length past it: 513, then the connection is closed. */
    memset(&c4, 0, sizeof c4);
    c4.s = tcp_connect(edge);
    const char *huge = "MESSAGE sip:bob@example.net SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.1:5999;branch=z9hG4bK-huge\r\n"
                       "From: <sip:caller@example.org>;tag=abc\r\nTo: <sip:bob@example.net>\r\nCall-ID: huge\r\nCSeq: 1 MESSAGE\r\n"
                       "Content-Length: 70000\r\n\r\nhello";
    write_all(c4.s, huge, strlen(huge));
    CHECK(next_msg(&c4, got, sizeof got, 2000, NULL) && strncmp(got, "SIP/2.0 513 Message Too Large\r\n", 31) == 0);
    CHECK(next_msg(&c4, got, sizeof got, 2000, NULL) == 0 && c4.eof);
    close(c4.s);

    /* 7. The next hop closes its connection: the next request opens a new one. */
    close(hop.s);
    memset(&hop, 0, sizeof hop);
    pause_ms(200);
    tcp_invite(msg, sizeof msg, "sip:bob@example.net", "<sip:bob@example.net>", "tcp-4");
    write_all(c1.s, msg, strlen(msg));
    hop.s = accept_within(hop_l, 2000);
    CHECK(hop.s >= 0);
    CHECK(next_msg(&hop, inv1, sizeof inv1, 2000, NULL) && strstr(inv1, "Call-ID: tcp-4\r\n") != NULL);
    n = respond(inv1, "200 OK", resp, sizeof resp);
    write_all(hop.s, resp, n);
    CHECK(next_msg(&c1, got, sizeof got, 2000, NULL) && strncmp(got, "SIP/2.0 200 OK\r\n", 16) == 0 && strstr(got, "Call-ID: tcp-4\r\n"));

    /* 8. Many connections at once: 500 open together, a ping on each, every pong back. */
    enum { MANY = 500 };
    static int many[MANY];
    int opened = 0;
    for (int k = 0; k < MANY; k++) {
        many[k] = tcp_connect(edge);
        if (many[k] >= 0) opened++;
    }
    for (int k = 0; k < MANY; k++) {
        if (many[k] >= 0) write_all(many[k], "\r\n\r\n", 4);
    }
    int ponged = 0;
    for (int k = 0; k < MANY; k++) {
        char two[8];
        if (many[k] >= 0 && readable(many[k], 2000) && recv(many[k], two, sizeof two, 0) == 2 && two[0] == '\r' && two[1] == '\n') ponged++;
    }
    CHECK(opened == MANY && ponged == MANY);
    if (ponged != MANY) fprintf(stderr, "%d connections opened, %d pongs\n", opened, ponged);
    for (int k = 0; k < MANY; k++) {
        if (many[k] >= 0) close(many[k]);
    }

    /* 9. A caller that sends and never reads: once its answers fill the connection's output
     * buffer (1 MiB, beyond what the sockets hold), the edge closes the connection; the others
     * are still served. */
    int greedy = socket(AF_INET, SOCK_STREAM, 0);
    int small = 4096;
    setsockopt(greedy, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct timeval tmo = {3, 0};
    setsockopt(greedy, SOL_SOCKET, SO_SNDTIMEO, &tmo, sizeof tmo);
    CHECK(connect(greedy, (const struct sockaddr *)edge, sizeof *edge) == 0);
    char one[2048];
    tcp_invite(one, sizeof one, "sip:+12125551234@gw.example.com;user=phone", "<tel:+1-212-555-1234>", "greedy");
    size_t one_len = strlen(one);
    int broken = 0, sent = 0;
    for (; sent < 60000 && !broken; sent++) {
        size_t off = 0;
        while (off < one_len) {
            ssize_t k = send(greedy, one + off, one_len - off, MSG_NOSIGNAL);
            if (k <= 0) {
                broken = 1;
                break;
            }
            off += (size_t)k;
        }
    }
    if (!broken) { /* everything went out: the close shows on the next read */
        char sink[65536];
        for (;;) {
            ssize_t k = readable(greedy, 3000) ? recv(greedy, sink, sizeof sink, 0) : 1;
            if (k <= 0) broken = 1;
            if (k <= 0 || k == 1) break;
        }
    }
    CHECK(broken);
    if (!broken) fprintf(stderr, "greedy caller: %d requests sent, connection still open\n", sent);
    close(greedy);
    int after = tcp_connect(edge);
    CHECK(after >= 0 && ping_pong(after));
    close(after);

    close(c1.s);
    close(hop.s);
}

/* --max-connections 2 (TCP only): a third connection is closed at once, the first two keep
 * working, and a slot freed by a close is taken again. The next hop of this edge listens
 * nowhere: a request gets 503 on its connection, whether the connect failed (the queued
 * request is answered as if by the next hop) or the edge is waiting to try again. */
static void connection_limit(const char *edge_path) {
    struct sockaddr_in addr, dead;
    int probe = tcp_listener(&addr);
    int probe2 = tcp_listener(&dead);
    close(probe);
    close(probe2);
    char listen_arg[64], hop_arg[64];
    snprintf(listen_arg, sizeof listen_arg, "127.0.0.1:%d", ntohs(addr.sin_port));
    snprintf(hop_arg, sizeof hop_arg, "127.0.0.1:%d", ntohs(dead.sin_port));
    pid_t pid = fork();
    if (pid == 0) {
        execl(edge_path, edge_path, "--listen", listen_arg, "--next-hop", hop_arg, "--policy", POLICY_FILE, "--transport", "tcp",
              "--max-connections", "2", "--workers", "1", (char *)NULL);
        _exit(127);
    }
    CHECK(wait_edge(ntohs(addr.sin_port), "tcp"));
    int s1 = tcp_connect(&addr), s2 = tcp_connect(&addr), s3 = tcp_connect(&addr);
    CHECK(s1 >= 0 && s2 >= 0 && s3 >= 0);
    CHECK(ping_pong(s1) && ping_pong(s2));
    stream_t *t = calloc(1, sizeof *t);
    t->s = s3;
    char out[256];
    CHECK(next_msg(t, out, sizeof out, 1000, NULL) == 0 && t->eof);
    free(t);
    close(s3);
    close(s1);
    pause_ms(200);
    int s4 = tcp_connect(&addr);
    CHECK(s4 >= 0 && ping_pong(s4) && ping_pong(s2));
    stream_t *u = calloc(1, sizeof *u);
    u->s = s2;
    char inv[2048];
    for (int k = 0; k < 2; k++) {
        char callid[32];
        snprintf(callid, sizeof callid, "no-hop-%d", k);
        tcp_invite(inv, sizeof inv, "sip:bob@example.net", "<sip:bob@example.net>", callid);
        write_all(s2, inv, strlen(inv));
        static char got[4096];
        int ok = next_msg(u, got, sizeof got, 2000, NULL);
        CHECK(ok && strncmp(got, "SIP/2.0 503 ", 12) == 0 && strstr(got, callid) != NULL);
        CHECK(strstr(got, "lc-conn") == NULL && strstr(got, "branch=z9hG4bK-no-hop") != NULL);
    }
    free(u);
    close(s2);
    close(s4);
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* --transport udp: no TCP listener (a connection is refused), UDP served as before. */
static void udp_only(const char *edge_path, const char *hop_arg, int client, int cport) {
    struct sockaddr_in addr;
    int probe = udp_socket(&addr);
    close(probe);
    char listen_arg[64];
    snprintf(listen_arg, sizeof listen_arg, "127.0.0.1:%d", ntohs(addr.sin_port));
    pid_t pid = fork();
    if (pid == 0) {
        execl(edge_path, edge_path, "--listen", listen_arg, "--next-hop", hop_arg, "--policy", POLICY_FILE, "--transport", "udp", (char *)NULL);
        _exit(127);
    }
    CHECK(wait_edge(ntohs(addr.sin_port), "udp"));
    int s = tcp_connect(&addr);
    CHECK(s < 0);
    if (s >= 0) close(s);
    char msg[2048], buf[4096];
    struct sockaddr_in from;
    invite(msg, sizeof msg, "sip:+12125551234@gw.example.com;user=phone", "<tel:+1-212-555-1234>", cport, "udp-only");
    sendto(client, msg, strlen(msg), 0, (struct sockaddr *)&addr, sizeof addr);
    CHECK(recv_msg(client, buf, sizeof buf, &from) > 0 && strncmp(buf, "SIP/2.0 503 ", 12) == 0 && strstr(buf, "udp-only") != NULL);
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The value of the counter `name` (a whole metric name with its labels) in a SIGUSR1 dump, -1
 * when it is not there. */
static long counter(const char *text, const char *name) {
    size_t n = strlen(name);
    for (const char *p = text; (p = strstr(p, name)) != NULL; p += n) {
        if ((p == text || p[-1] == '\n') && p[n] == ' ') return atol(p + n + 1);
    }
    return -1;
}

/* Sends SIGUSR1 and reads the dump from the edge's stdout (`out`, a pipe) into buf, up to the
 * line `# EOF` that ends it. */
static void stats(pid_t pid, int out, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = 0;
    kill(pid, SIGUSR1);
    while (len + 1 < cap && strstr(buf, "\n# EOF\n") == NULL) {
        if (!readable(out, 2000)) break;
        ssize_t k = read(out, buf + len, cap - 1 - len);
        if (k <= 0) break;
        len += (size_t)k;
        buf[len] = 0;
    }
}

/* Waits up to 20 s for the counter `name` to read `want` (the edge handles signals between
 * batches of messages, later on a busy machine). */
static int wait_counter(pid_t pid, int out, const char *name, long want) {
    static char dump[65536];
    for (int k = 0; k < 200; k++) {
        stats(pid, out, dump, sizeof dump);
        long v = counter(dump, name);
        if (v == want) return 1;
        if (v > want) break;
        pause_ms(100);
    }
    fprintf(stderr, "%s: %ld, expected %ld\n", name, counter(dump, name), want);
    return 0;
}

/* The first Via line of a message (copied into out, empty when none). */
static void first_via(const char *msg, char *out, size_t cap) { copy_after(msg, "\r\nVia: ", 2, "\r", out, cap); }

/* Retransmissions over UDP (RFC 3261 Timer A/E: the UAC sends the same request again, same
 * Via branch, Call-ID and CSeq) get what their original got, without being classified again.
 * Expected values from the RFCs: a stateless proxy forwards every retransmission it receives,
 * to the same destination with the same branch (RFC 3261 §16.11); a retransmission of a request
 * already answered gets that answer again (what a server transaction in "Completed" does,
 * §17.2.1, §17.2.2); RFC 7200 limits new requests, so each transaction is one classification:
 * one rate token, one window slot. A 302 is not remembered (its Contacts would be needed): its
 * retransmission is classified again, and a rate-0 redirect gives the same 302. */
static void retransmissions(const char *edge_path) {
    int failed_before = failures;
    static const char *RETX_POLICY = "target/edge-test-retx-policy.xml";
    /* a window of 1 (+1444), a rate of 0.1/s (+1555: one token, the next after 10 s; the
     * burst is max(1, ceil(r * 100 ms)) = 1), and the rate-0 redirect (tickets) */
    static const char *RATE = "<rule id=\"rate\"><conditions><call-identity><sip><to><many-tel prefix=\"+1555\"/></to></sip></call-identity>"
                              "<method>INVITE</method></conditions><actions><accept><rate>0.1</rate></accept></actions></rule>";
    char rules[2048];
    snprintf(rules, sizeof rules, "%s%s%s", WINDOW, RATE, TICKETS);
    write_policy_to(RETX_POLICY, rules);
    struct sockaddr_in addr, hop_addr, client_addr;
    int probe = udp_socket(&addr);
    close(probe);
    int hop = udp_socket(&hop_addr), client = udp_socket(&client_addr);
    int cport = ntohs(client_addr.sin_port);
    char listen_arg[64], hop_arg[64];
    snprintf(listen_arg, sizeof listen_arg, "127.0.0.1:%d", ntohs(addr.sin_port));
    snprintf(hop_arg, sizeof hop_arg, "127.0.0.1:%d", ntohs(hop_addr.sin_port));
    int out[2];
    CHECK(pipe(out) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], 1);
        close(out[0]);
        close(out[1]);
        execl(edge_path, edge_path, "--listen", listen_arg, "--next-hop", hop_arg, "--policy", RETX_POLICY, "--transport", "udp",
              "--retry-after", "5",
              (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    CHECK(wait_edge(ntohs(addr.sin_port), "udp"));
    static char w1[2048], w2[2048], w3[2048], r1[2048], r2[2048], t1[2048], buf[8192], fwd[8192], resp[8192];
    char via_a[256], via_b[256];
    struct sockaddr_in from;
    const char *win_ruri = "sip:+14445551234@gw.example.com;user=phone", *win_to = "<tel:+1-444-555-1234>";

    /* Window of 1: the INVITE and its retransmission both reach the next hop, with the same
     * Via of ours (same branch, RFC 3261 §16.11). */
    invite(w1, sizeof w1, win_ruri, win_to, cport, "retx-w1");
    sendto(client, w1, strlen(w1), 0, (struct sockaddr *)&addr, sizeof addr);
    CHECK(recv_msg(hop, fwd, sizeof fwd, &from) > 0 && strstr(fwd, "Call-ID: retx-w1\r\n") != NULL);
    first_via(fwd, via_a, sizeof via_a);
    sendto(client, w1, strlen(w1), 0, (struct sockaddr *)&addr, sizeof addr);
    CHECK(recv_msg(hop, buf, sizeof buf, &from) > 0 && strstr(buf, "Call-ID: retx-w1\r\n") != NULL);
    first_via(buf, via_b, sizeof via_b);
    CHECK(via_a[0] && strstr(via_a, "branch=z9hG4bK-lc") != NULL && strcmp(via_a, via_b) == 0);
    CHECK(!readable(client, 300)); /* no answer from the edge (the next hop has not answered) */
    /* Another call: the window is held by one slot, so it gets 503. */
    invite(w2, sizeof w2, win_ruri, win_to, cport, "retx-w2");
    sendto(client, w2, strlen(w2), 0, (struct sockaddr *)&addr, sizeof addr);
    CHECK(recv_msg(client, buf, sizeof buf, &from) > 0 && strncmp(buf, "SIP/2.0 503 ", 12) == 0 && strstr(buf, "Call-ID: retx-w2\r\n"));
    /* The 200 for the first releases that slot, and nothing else holds one: a new call passes. */
    size_t n = respond(fwd, "200 OK", resp, sizeof resp);
    sendto(hop, resp, n, 0, (struct sockaddr *)&addr, sizeof addr);
    CHECK(recv_msg(client, buf, sizeof buf, &from) > 0 && strncmp(buf, "SIP/2.0 200 ", 12) == 0 && strstr(buf, "Call-ID: retx-w1\r\n"));
    invite(w3, sizeof w3, win_ruri, win_to, cport, "retx-w3");
    sendto(client, w3, strlen(w3), 0, (struct sockaddr *)&addr, sizeof addr);
    CHECK(recv_msg(hop, fwd, sizeof fwd, &from) > 0 && strstr(fwd, "Call-ID: retx-w3\r\n") != NULL);

    /* Rate: the first call takes the one token; its two retransmissions are forwarded (not
     * charged, so not 503'd); the next call gets 503 with the Retry-After of --retry-after 5, and so
     * does its retransmission, which the next hop never sees. */
    const char *rate_ruri = "sip:+15555551234@gw.example.com;user=phone", *rate_to = "<tel:+1-555-555-1234>";
    invite(r1, sizeof r1, rate_ruri, rate_to, cport, "retx-r1");
    for (int k = 0; k < 3; k++) {
        sendto(client, r1, strlen(r1), 0, (struct sockaddr *)&addr, sizeof addr);
        CHECK(recv_msg(hop, buf, sizeof buf, &from) > 0 && strstr(buf, "Call-ID: retx-r1\r\n") != NULL);
    }
    invite(r2, sizeof r2, rate_ruri, rate_to, cport, "retx-r2");
    for (int k = 0; k < 2; k++) {
        sendto(client, r2, strlen(r2), 0, (struct sockaddr *)&addr, sizeof addr);
        CHECK(recv_msg(client, buf, sizeof buf, &from) > 0 && strncmp(buf, "SIP/2.0 503 ", 12) == 0 &&
              strstr(buf, "Call-ID: retx-r2\r\n") && strstr(buf, "Retry-After: 5\r\n") && strstr(buf, ";tag=lc-edge"));
    }
    /* A redirected call and its retransmission: 302 with the Contact both times. */
    invite(t1, sizeof t1, "sip:tickets@arena.example.com", "<sip:tickets@arena.example.com>", cport, "retx-t1");
    for (int k = 0; k < 2; k++) {
        sendto(client, t1, strlen(t1), 0, (struct sockaddr *)&addr, sizeof addr);
        CHECK(recv_msg(client, buf, sizeof buf, &from) > 0 && strncmp(buf, "SIP/2.0 302 ", 12) == 0 &&
              strstr(buf, "Contact: <sip:portal@arena.example.com>\r\n") != NULL);
    }
    CHECK(!readable(hop, 300)); /* nothing else reached the next hop */

    /* The counters: 6 transactions (w1, w2, w3, r1, r2, t1), each classified once except t1
     * (twice); 5 retransmissions (w1 once, r1 twice, r2 once: repeated; t1: classified again). */
    static char dump[1 << 16];
    stats(pid, out[0], dump, sizeof dump);
    CHECK(counter(dump, "loadctl_rule_matched_total{source=\"edge\",rule=\"window\"}") == 3);
    CHECK(counter(dump, "loadctl_rule_accepted_total{source=\"edge\",rule=\"window\"}") == 2);
    CHECK(counter(dump, "loadctl_rule_rejected_total{source=\"edge\",rule=\"window\"}") == 1);
    CHECK(counter(dump, "loadctl_rule_matched_total{source=\"edge\",rule=\"rate\"}") == 2);
    CHECK(counter(dump, "loadctl_rule_accepted_total{source=\"edge\",rule=\"rate\"}") == 1);
    CHECK(counter(dump, "loadctl_rule_rejected_total{source=\"edge\",rule=\"rate\"}") == 1);
    CHECK(counter(dump, "loadctl_rule_redirected_total{source=\"edge\",rule=\"tickets\"}") == 2);
    CHECK(counter(dump, "edge_requests_original_total") == 6);
    CHECK(counter(dump, "edge_requests_retransmission_total") == 5);
    CHECK(counter(dump, "edge_retransmissions_repeated_total") == 4);
    CHECK(counter(dump, "edge_retransmissions_unremembered_total") == 1);
    CHECK(counter(dump, "edge_detector_originals_total") == 6);
    CHECK(counter(dump, "edge_detector_retransmissions_total") == 5);
    CHECK(counter(dump, "edge_detector_evicted_total") == 0);
    /* forwarded: w1 twice, w3, r1 three times; answered: w2, r2 twice, t1 twice */
    CHECK(counter(dump, "edge_forwarded_total") == 6);
    CHECK(counter(dump, "edge_answered_total") == 5);
    if (failures != failed_before) fputs(dump, stderr);

    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(out[0]);
    close(hop);
    close(client);
}

/* --tcp-idle-s 1: a silent connection is closed within about two seconds; one that pings
 * every 300 ms stays open. */
static void idle_timeout(const char *edge_path, const char *hop_arg) {
    struct sockaddr_in addr;
    int probe = tcp_listener(&addr);
    close(probe);
    char listen_arg[64];
    snprintf(listen_arg, sizeof listen_arg, "127.0.0.1:%d", ntohs(addr.sin_port));
    pid_t pid = fork();
    if (pid == 0) {
        execl(edge_path, edge_path, "--listen", listen_arg, "--next-hop", hop_arg, "--policy", POLICY_FILE, "--transport", "tcp",
              "--tcp-idle-s", "1", (char *)NULL);
        _exit(127);
    }
    CHECK(wait_edge(ntohs(addr.sin_port), "tcp"));
    int quiet = tcp_connect(&addr), busy = tcp_connect(&addr);
    CHECK(quiet >= 0 && busy >= 0);
    int alive = 1;
    for (int k = 0; k < 10; k++) { /* 3 s */
        alive = alive && ping_pong(busy);
        pause_ms(300);
    }
    CHECK(alive);
    stream_t *t = calloc(1, sizeof *t);
    t->s = quiet;
    char out[64];
    CHECK(next_msg(t, out, sizeof out, 100, NULL) == 0 && t->eof);
    free(t);
    close(quiet);
    close(busy);
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_edge PATH-TO-EDGE\n");
        return 2;
    }
    struct sockaddr_in client_addr, hop_addr, edge_addr;
    int client = udp_socket(&client_addr);
    int hop = udp_socket(&hop_addr);
    /* The next hop over TCP listens on the same port number as over UDP. */
    struct sockaddr_in hop_tcp_addr;
    int hop_tcp = tcp_listener(&hop_tcp_addr);
    close(hop);
    hop_addr.sin_port = hop_tcp_addr.sin_port;
    hop = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK(bind(hop, (struct sockaddr *)&hop_addr, sizeof hop_addr) == 0);
    /* Pick a port free for both UDP and TCP for the edge (a port free for UDP may be some
     * other program's TCP connection's local port). */
    for (int tries = 0; tries < 100; tries++) {
        int probe = udp_socket(&edge_addr);
        int t = socket(AF_INET, SOCK_STREAM, 0);
        int ok = bind(t, (struct sockaddr *)&edge_addr, sizeof edge_addr) == 0;
        close(t);
        close(probe);
        if (ok) break;
    }
    char listen_arg[64], hop_arg[64];
    snprintf(listen_arg, sizeof listen_arg, "127.0.0.1:%d", ntohs(edge_addr.sin_port));
    snprintf(hop_arg, sizeof hop_arg, "127.0.0.1:%d", ntohs(hop_addr.sin_port));
    char rules[2048];
    snprintf(rules, sizeof rules, "%s%s%s%s", HOTLINE, TICKETS, DROPPER, WINDOW);
    write_policy(rules);
    int out[2]; /* the edge's stdout: its counters on SIGUSR1 */
    CHECK(pipe(out) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], 1);
        close(out[0]);
        close(out[1]);
        /* One worker: the TCP checks count connections to the next hop (one per worker) and
         * expect connections accepted in the order they were made (several workers accept
         * side by side). tests/e2e/test_edge_workers.py covers several. */
        execl(argv[1], argv[1], "--listen", listen_arg, "--next-hop", hop_arg, "--policy", POLICY_FILE, "--workers", "1", (char *)NULL);
        perror("exec edge");
        _exit(127);
    }
    close(out[1]);
    CHECK(wait_edge(ntohs(edge_addr.sin_port), "udp tcp"));
    int cport = ntohs(client_addr.sin_port);
    char msg[4096], buf[8192];
    struct sockaddr_in from;

    /* 1. Throttled prefix: 503 with our headers copied and a To tag added. */
    invite(msg, sizeof msg, "sip:+12125551234@gw.example.com;user=phone", "<tel:+1-212-555-1234>", cport, "call-1");
    sendto(client, msg, strlen(msg), 0, (struct sockaddr *)&edge_addr, sizeof edge_addr);
    CHECK(recv_msg(client, buf, sizeof buf, &from) > 0);
    CHECK(strncmp(buf, "SIP/2.0 503 ", 12) == 0);
    CHECK(strstr(buf, "Call-ID: call-1\r\n") != NULL && strstr(buf, "branch=z9hG4bK-call-1") != NULL);
    CHECK(strstr(buf, ";tag=lc-edge") != NULL && strstr(buf, "CSeq: 1 INVITE") != NULL);

    /* 2. Redirect rule: 302 with the target as Contact. */
    invite(msg, sizeof msg, "sip:tickets@arena.example.com", "<sip:tickets@arena.example.com>", cport, "call-2");
    sendto(client, msg, strlen(msg), 0, (struct sockaddr *)&edge_addr, sizeof edge_addr);
    CHECK(recv_msg(client, buf, sizeof buf, &from) > 0);
    CHECK(strncmp(buf, "SIP/2.0 302 ", 12) == 0);
    CHECK(strstr(buf, "Contact: <sip:portal@arena.example.com>\r\n") != NULL);

    /* 3. Anything else is forwarded with our Via on top; the response comes back without it. */
    invite(msg, sizeof msg, "sip:bob@example.net", "<sip:bob@example.net>", cport, "call-3");
    sendto(client, msg, strlen(msg), 0, (struct sockaddr *)&edge_addr, sizeof edge_addr);
    CHECK(recv_msg(hop, buf, sizeof buf, &from) > 0);
    CHECK(strncmp(buf, "INVITE sip:bob@example.net SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:", 63) == 0);
    CHECK(strstr(buf, "branch=z9hG4bK-lc") != NULL);
    /* RFC 3581 §4: a valueless rport gets the source port; received= follows. */
    char rport[96];
    snprintf(rport, sizeof rport, "branch=z9hG4bK-call-3;rport=%d;received=127.0.0.1\r\n", cport);
    CHECK(strstr(buf, rport) != NULL);
    CHECK(strstr(buf, "Max-Forwards: 69\r\n") != NULL);
    /* The next hop answers 200 OK to the edge (Vias as received). */
    char *via1 = strstr(buf, "Via: ");
    char *via2 = via1 ? strstr(via1 + 5, "Via: ") : NULL;
    char *via_end = via2 ? strstr(via2, "\r\n") : NULL;
    if (via1 && via_end) {
        char resp[4096];
        int n = snprintf(resp, sizeof resp, "SIP/2.0 200 OK\r\n%.*s\r\nFrom: <sip:caller@example.org>;tag=abc\r\nTo: <sip:bob@example.net>;tag=b1\r\n"
                                            "Call-ID: call-3\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n",
                         (int)(via_end - via1), via1);
        sendto(hop, resp, (size_t)n, 0, (struct sockaddr *)&from, sizeof from);
        CHECK(recv_msg(client, buf, sizeof buf, &from) > 0);
        CHECK(strncmp(buf, "SIP/2.0 200 OK", 14) == 0);
        CHECK(strstr(buf, "z9hG4bK-lc") == NULL && strstr(buf, "branch=z9hG4bK-call-3") != NULL);
    } else {
        CHECK(!"two Vias in the forwarded request");
    }

    /* 4. Garbage and responses nobody asked for are ignored; the edge keeps serving. */
    sendto(client, "\x01\x02garbage", 9, 0, (struct sockaddr *)&edge_addr, sizeof edge_addr);
    sendto(client, "SIP/2.0 200 OK\r\n\r\n", 18, 0, (struct sockaddr *)&edge_addr, sizeof edge_addr);

    /* TCP, on the same address and port. */
    tcp_tests(&edge_addr, hop_tcp);
    connection_limit(argv[1]);
    udp_only(argv[1], hop_arg, client, cport);
    idle_timeout(argv[1], hop_arg);
    retransmissions(argv[1]);

    /* 5. An invalid policy file is refused on SIGHUP; a valid one replaces the policy. */
    write_policy("<rule id=\"broken\"><actions><accept><rate>-1</rate></accept></actions></rule>");
    kill(pid, SIGHUP);
    CHECK(wait_counter(pid, out[0], "edge_policy_load_failures_total", 1));
    CHECK(wait_counter(pid, out[0], "edge_policy_loads_total", 1));
    invite(msg, sizeof msg, "sip:+12125551234@gw.example.com;user=phone", "<tel:+1-212-555-1234>", cport, "call-4");
    sendto(client, msg, strlen(msg), 0, (struct sockaddr *)&edge_addr, sizeof edge_addr);
    CHECK(recv_msg(client, buf, sizeof buf, &from) > 0 && strncmp(buf, "SIP/2.0 503 ", 12) == 0);
    write_policy(TICKETS);
    kill(pid, SIGHUP);
    CHECK(wait_counter(pid, out[0], "edge_policy_loads_total", 2));
    invite(msg, sizeof msg, "sip:+12125551234@gw.example.com;user=phone", "<tel:+1-212-555-1234>", cport, "call-5");
    sendto(client, msg, strlen(msg), 0, (struct sockaddr *)&edge_addr, sizeof edge_addr);
    CHECK(recv_msg(hop, buf, sizeof buf, &from) > 0 && strstr(buf, "Call-ID: call-5") != NULL);

    /* 6. Clean exit. */
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(out[0]);
    close(client);
    close(hop);
    close(hop_tcp);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
