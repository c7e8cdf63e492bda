/* sublink.c: the subscriber's TLS connection to its notifier, for a subscription to a `sips:`
 * notifier URI (or one with `;transport=tls`): RFC 7200 §7 and RFC 6665 §6.1 leave
 * authenticating the notifier to the transport, and this is where it is done.
 *
 * The edge connects to the notifier (--notifier, or the URI's host:port), verifies that its
 * certificate chains to --tls-ca and names it (--notifier-name, default the URI's host), and
 * sends its SUBSCRIBEs on that connection with an `alias` Via parameter (RFC 5923) so that the
 * notifier sends its NOTIFYs back on it. Only what arrives on this connection reaches the
 * subscriber as the notifier's: a load-control NOTIFY that comes any other way (UDP, TCP, another
 * TLS connection, whoever signed its certificate) is answered 403 (handle.c, subscriber.c).
 *
 * The connection belongs to the main thread, which polls it beside the UDP socket (udp.c). It
 * is opened when the subscriber has something to send. When a connection that was up breaks,
 * the notifier can no longer reach the subscription (its NOTIFYs came on it), so the subscriber
 * subscribes again at once (at most every RESUBSCRIBE_NS; the rules in force stay until the new
 * subscription's first document); a connect or handshake that fails is left to the
 * subscriber's own timeouts and back-off (RFC 6665 retries). Over a reliable transport a
 * SUBSCRIBE is not retransmitted (RFC 3261 §17.1.2.2). */
#define _GNU_SOURCE

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "edge.h"
#include "sipmsg.h"
#include "sipstream.h"
#include "subscriber.h"
#include "sublink.h"
#include "tls.h"

/* What may wait to be written: a SUBSCRIBE and a few answers to NOTIFYs. */
#define LINK_OUT (4u * MAX_MSG)
#define LINK_HANDSHAKE_NS 10000000000ull
#define RESUBSCRIBE_NS 5000000000ull

enum { DOWN, CONNECTING, HANDSHAKING, UP };

struct sublink {
    int fd, state;
    int want_write;      /* the handshake waits for the socket to take its next flight */
    int write_waits_read; /* TLS must read before the queued output can go on */
    SSL *ssl;
    char name[256];
    uint64_t opened_ns;
    int lost; /* a connection that was up broke: subscribe again */
    uint64_t resubscribed_ns;
    char out[LINK_OUT];
    size_t out_len;
    char in[2 * MAX_MSG];
    size_t in_len;
    sf_state sf;
};

int sublink_start(edge_t *e, const char *name) {
    struct sublink *l = calloc(1, sizeof *l);
    if (!l) return -1;
    l->fd = -1;
    snprintf(l->name, sizeof l->name, "%s", name);
    e->link = l;
    return 0;
}

static void link_down(edge_t *e, const char *why) {
    struct sublink *l = e->link;
    if (l->state != DOWN) {
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &e->notifier_addr.sin_addr, ip, sizeof ip);
        elog("subscriber: TLS connection to the notifier %s:%u (%s) %s\n", ip, ntohs(e->notifier_addr.sin_port), l->name, why);
    }
    if (l->state == UP) l->lost = 1;
    tls_close(l->ssl);
    l->ssl = NULL;
    if (l->fd >= 0) close(l->fd);
    l->fd = -1;
    l->state = DOWN;
    l->want_write = l->write_waits_read = 0;
    l->out_len = l->in_len = 0;
    memset(&l->sf, 0, sizeof l->sf);
}

static void link_open(edge_t *e) {
    struct sublink *l = e->link;
    l->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0) return;
    int r = connect(l->fd, (const struct sockaddr *)&e->notifier_addr, sizeof e->notifier_addr);
    if (r != 0 && errno != EINPROGRESS) {
        l->state = CONNECTING; /* so that link_down logs it */
        link_down(e, strerror(errno));
        return;
    }
    if (!(l->ssl = tls_connecting(l->fd, l->name))) {
        l->state = CONNECTING;
        link_down(e, "cannot start TLS");
        return;
    }
    l->opened_ns = now_ns();
    l->state = r == 0 ? HANDSHAKING : CONNECTING;
    l->want_write = 1; /* the ClientHello */
}

/* Writes what is queued, as far as the connection takes it now. */
static void link_write(edge_t *e) {
    struct sublink *l = e->link;
    while (l->state == UP && l->out_len > 0) {
        ssize_t n = tls_write(l->ssl, l->out, l->out_len);
        l->write_waits_read = n == TLS_WANT_READ;
        if (n == TLS_WANT_READ || n == TLS_WANT_WRITE) return;
        if (n <= 0) {
            link_down(e, "broken while writing");
            return;
        }
        memmove(l->out, l->out + n, l->out_len - (size_t)n);
        l->out_len -= (size_t)n;
    }
}

int sublink_send(edge_t *e, const char *msg, size_t len) {
    struct sublink *l = e->link;
    if (l->state == DOWN) link_open(e);
    if (l->state == DOWN) return -1;
    if (l->out_len + len > sizeof l->out) {
        elog("subscriber: %zu bytes wait for the notifier's TLS connection: message not sent\n", l->out_len);
        return -1;
    }
    memcpy(l->out + l->out_len, msg, len);
    l->out_len += len;
    link_write(e); /* not sublink_io: this may be called while a message read is handled */
    return l->state == UP || l->state == CONNECTING || l->state == HANDSHAKING ? 0 : -1;
}

int sublink_fd(const edge_t *e) { return e->link ? e->link->fd : -1; }

short sublink_events(const edge_t *e) {
    const struct sublink *l = e->link;
    if (!l || l->state == DOWN) return 0;
    if (l->state == CONNECTING || (l->state == HANDSHAKING && l->want_write) || (l->state == UP && l->out_len > 0 && !l->write_waits_read))
        return POLLIN | POLLOUT;
    return POLLIN;
}

/* Every whole message read so far goes to the subscriber, as the notifier's (NULL sender). */
static void deliver_in(edge_t *e) {
    struct sublink *l = e->link;
    size_t off = 0;
    while (l->state == UP) {
        sf_frame f = sf_next(&l->sf, l->in + off, l->in_len - off, MAX_MSG);
        if (f.kind == SF_MORE) break;
        if (f.kind == SF_MESSAGE) {
            subscriber_receive(e->udp, l->in + off, f.len, NULL);
        } else if (f.kind == SF_PING) {
            sublink_send(e, "\r\n", 2); /* RFC 5626 §3.5.1: the pong */
        } else if (f.kind != SF_CRLF) {
            link_down(e, "sent a message that cannot be framed: closed");
            return;
        }
        off += f.len;
    }
    if (l->state != UP) return;
    memmove(l->in, l->in + off, l->in_len - off);
    l->in_len -= off;
}

void sublink_io(edge_t *e) {
    struct sublink *l = e->link;
    if (!l || l->state == DOWN) return;
    if (l->state == CONNECTING) {
        int err = 0;
        socklen_t el = sizeof err;
        struct pollfd p = {l->fd, POLLOUT, 0};
        if (poll(&p, 1, 0) <= 0) goto deadline;
        if (getsockopt(l->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
            link_down(e, strerror(err ? err : errno));
            return;
        }
        l->state = HANDSHAKING;
    }
    if (l->state == HANDSHAKING) {
        char why[512];
        int r = tls_handshake(l->ssl, why, sizeof why);
        if (r == TLS_FAILED) {
            char what[600];
            snprintf(what, sizeof what, "refused: %s", why);
            link_down(e, what);
            return;
        }
        l->want_write = r == TLS_WANT_WRITE;
        if (r != 1) goto deadline;
        char who[384];
        tls_describe(l->ssl, who, sizeof who);
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &e->notifier_addr.sin_addr, ip, sizeof ip);
        elog("subscriber: notifier %s:%u verified as %s (%s)\n", ip, ntohs(e->notifier_addr.sin_port), l->name, who);
        l->state = UP;
    }
    link_write(e);
    while (l->state == UP) {
        if (l->in_len == sizeof l->in) {
            link_down(e, "sent more than a message can hold: closed");
            return;
        }
        ssize_t n = tls_read(l->ssl, l->in + l->in_len, sizeof l->in - l->in_len);
        if (n == TLS_WANT_READ || n == TLS_WANT_WRITE) return;
        if (n <= 0) {
            link_down(e, n == TLS_CLOSED ? "closed by the notifier" : "broken while reading");
            return;
        }
        l->in_len += (size_t)n;
        deliver_in(e);
        if (l->write_waits_read) link_write(e);
    }
    return;
deadline:
    sublink_tick(e);
}

void sublink_tick(edge_t *e) {
    struct sublink *l = e->link;
    if (!l) return;
    uint64_t now = now_ns();
    if ((l->state == CONNECTING || l->state == HANDSHAKING) && now - l->opened_ns >= LINK_HANDSHAKE_NS)
        link_down(e, "not set up within 10 s");
    if (l->lost && e->sub && !e->unsubscribed && (l->resubscribed_ns == 0 || now - l->resubscribed_ns >= RESUBSCRIBE_NS)) {
        l->lost = 0;
        l->resubscribed_ns = now;
        elog("subscriber: the notifier's TLS connection was lost: subscribing again\n");
        lc_subscriber_resubscribe(e->sub, now);
    }
}

void sublink_stop(edge_t *e) {
    if (!e->link) return;
    link_down(e, "closed");
    free(e->link);
    e->link = NULL;
}
