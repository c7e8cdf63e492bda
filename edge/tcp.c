/* tcp.c: SIP over TCP, on TCP workers of their own (epoll), as many as --workers asks for:
 * each with a listening socket on the same address and port as UDP (SO_REUSEPORT when there
 * are several: the kernel spreads the connections), a bounded table of connections
 * (--max-connections inbound over all workers, excess closed at once; silent ones closed after
 * --tcp-idle-s), messages framed by Content-Length (sipstream.h; 400 and close when it is
 * missing or invalid, close past 64 KiB), RFC 5626 keep-alive pings answered, and one
 * persistent connection of its own to the next hop (non-blocking connect, reconnected when it
 * breaks), on which the responses to its requests come back. A request that came over TCP goes
 * on over TCP with `Via: SIP/2.0/TCP …;lc-conn=SLOT.GEN`: the inbound connection's slot and
 * the slot's generation, so the response that comes back with that Via is sent on the
 * connection the request came on (RFC 3261 §18.2.2) without per-transaction state, and is
 * dropped when that connection has gone meanwhile (the generation no longer matches).
 * Output is buffered per connection (bounded; a connection whose buffer overflows is closed)
 * and written once per event-loop pass. */
#define _GNU_SOURCE /* accept4 */

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "edge.h"
#include "forward.h"
#include "handle.h"
#include "oc.h"
#include "tcp.h"
#include "tls.h"
#include "udp.h"
#include "window.h"

/* TCP: bytes read per recv when a connection has nothing buffered; output buffered per inbound
 * connection and for the next hop (which carries every TCP request); how long after a failed
 * connect to the next hop the next attempt may start; how long a connection closed after a
 * framing error waits for its peer to close before it is dropped. */
#define TCP_RX 262144
#define TCP_OUT_MAX (1u << 20)
#define HOP_OUT_MAX (8u << 20)
#define RECONNECT_NS 100000000ull
#define LINGER_CLOSE_NS 2000000000ull
/* A TLS handshake not complete after this long is given up (a peer that opens connections and
 * never finishes would otherwise hold table slots until the idle timeout). */
#define TLS_HANDSHAKE_NS 10000000000ull
/* epoll's cookie for the TLS listening socket (the TCP one is 0; a connection's never has 0 in
 * its low half). */
#define LISTEN_TLS (1ull << 32)
/* Reads of one TLS connection per pass while its session still holds bytes. */
#define TLS_READS_PER_PASS 8

/* Set by the main thread when the TCP workers must end. */
atomic_int tcp_stop;

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
    int backlogged = c->backlogged; /* the slot stays on the backlog at most once */
    memset(c, 0, sizeof *c);
    c->gen = gen;
    c->backlogged = backlogged;
    c->fd = fd;
    c->peer = *peer;
    c->outbound = outbound;
    c->connecting = connecting;
    c->out_max = outbound ? HOP_OUT_MAX : TCP_OUT_MAX;
    c->want_out = connecting;
    c->last_rx_ns = c->opened_ns = now_ns();
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct epoll_event ev = {.events = EPOLLIN | (connecting ? EPOLLOUT : 0), .data.u64 = conn_cookie(c, slot)};
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        c->fd = -1;
        w->free_slots[w->nfree++] = slot;
        return -1;
    }
    if (!outbound) w->inbound++; /* its place in e->tcp_inbound was taken by tcp_accept */
    return (int)slot;
}

static void conn_close(worker_t *w, unsigned slot) {
    conn_t *c = &w->conns[slot];
    if (c->fd < 0) return;
    tls_close(c->ssl);
    c->ssl = NULL;
    close(c->fd); /* also leaves the epoll set */
    if (c->outbound) {
        if ((int)slot == w->hop) w->hop = -1;
        if ((int)slot == w->tls_hop) w->tls_hop = -1;
    } else {
        /* The address's place first: while the table holds it, its place among
         * --max-connections is held too (the table's size counts on it). */
        w->inbound--;
        sources_give(&w->e->sources, c->peer.sin_addr.s_addr);
        atomic_fetch_sub_explicit(&w->e->tcp_inbound, 1, memory_order_relaxed);
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

/* A TLS connection whose session holds bytes already read from its socket: epoll will not
 * report them, so it is read again at the next pass (which then does not wait). */
static void backlog(worker_t *w, unsigned slot) {
    conn_t *c = &w->conns[slot];
    if (c->backlogged) return;
    c->backlogged = 1;
    w->backlog[w->nbacklog++] = slot;
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
int conn_queue(worker_t *w, unsigned slot, uint32_t gen, const char *data, size_t len) {
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

/* Reads from a connection, TCP or TLS: bytes (> 0), 0 when the peer closed, TLS_WANT_READ when
 * nothing is there now, TLS_FAILED when it is broken. */
static ssize_t conn_recv(worker_t *w, unsigned slot, char *buf, size_t cap) {
    conn_t *c = &w->conns[slot];
    if (!c->ssl) {
        for (;;) {
            ssize_t n = recv(c->fd, buf, cap, 0);
            if (n >= 0) return n;
            if (errno == EINTR) continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? TLS_WANT_READ : TLS_FAILED;
        }
    }
    ssize_t n = tls_read(c->ssl, buf, cap);
    if (n > 0) return n;
    if (n == TLS_CLOSED) return 0;
    if (n == TLS_WANT_WRITE) { /* TLS may need to write to go on reading */
        conn_arm(w, slot, 1);
        return TLS_WANT_READ;
    }
    return n;
}

/* Writes to a connection, TCP or TLS: bytes (> 0), TLS_WANT_WRITE / TLS_WANT_READ when it
 * cannot go on now, TLS_FAILED when it is broken. */
static ssize_t conn_send(conn_t *c, const char *buf, size_t len) {
    if (!c->ssl) {
        for (;;) {
            ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) return n;
            if (n < 0 && errno == EINTR) continue;
            return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? TLS_WANT_WRITE : TLS_FAILED;
        }
    }
    ssize_t n = tls_write(c->ssl, buf, len);
    return n == TLS_CLOSED ? TLS_FAILED : n;
}

/* Writes what a connection has queued; arms EPOLLOUT for the rest when the socket is full. */
static void conn_flush(worker_t *w, unsigned slot) {
    conn_t *c = &w->conns[slot];
    if (c->fd < 0 || c->connecting || c->handshaking) return;
    while (c->out_off < c->out_len) {
        ssize_t n = conn_send(c, c->out + c->out_off, c->out_len - c->out_off);
        if (n > 0) {
            c->out_off += (size_t)n;
        } else if (n == TLS_WANT_WRITE) {
            conn_arm(w, slot, 1);
            return;
        } else if (n == TLS_WANT_READ) {
            conn_arm(w, slot, 0); /* TLS must read first: tcp_read retries the output after its next read */
            return;
        } else {
            conn_close(w, slot);
            return;
        }
    }
    c->out_off = c->out_len = 0;
    conn_arm(w, slot, 0);
    if (c->closing && !c->lingering) {
        /* Everything said (a 400, say): send our FIN (after TLS's close_notify), and close when
         * the peer has closed too (closing at once with its bytes unread would reset the
         * connection, and the answer could be lost), or after a while. */
        if (c->ssl) tls_goodbye(c->ssl);
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

static void tls_step(worker_t *w, unsigned slot);
static void tcp_read(worker_t *w, unsigned slot);

/* The connection to the next hop over TCP, or over TLS to --tls-next-hop: the open one, or a
 * new one (its connect and handshake go on in the background; what is queued meanwhile is
 * written once it is up). -1 when none can be had (the previous attempt failed less than
 * RECONNECT_NS ago, or the table is full). */
int hop_slot(worker_t *w, int tls) {
    int *hop = tls ? &w->tls_hop : &w->hop;
    if (*hop >= 0) {
        conn_t *c = &w->conns[*hop];
        if (c->fd >= 0 && c->outbound && !c->dead && !c->closing) return *hop;
    }
    uint64_t now = now_ns();
    if (now < (tls ? w->tls_hop_retry_ns : w->hop_retry_ns)) return -1;
    const struct sockaddr_in *to = tls ? &w->e->tls_next_hop : &w->e->next_hop;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int r = connect(fd, (const struct sockaddr *)to, sizeof *to);
    int slot = -1;
    if (r == 0 || errno == EINPROGRESS) slot = conn_open(w, fd, to, 1, r != 0);
    if (slot >= 0 && tls) {
        conn_t *c = &w->conns[slot];
        c->ssl = tls_connecting(fd, w->e->tls_next_hop_name);
        c->handshaking = 1;
        if (!c->ssl) {
            conn_close(w, (unsigned)slot); /* closes fd */
            fd = -1;
            slot = -1;
        }
    }
    if (slot < 0) {
        if (fd >= 0) close(fd);
        if (tls) w->tls_hop_retry_ns = now + RECONNECT_NS;
        else w->hop_retry_ns = now + RECONNECT_NS;
        BUMP(w->c.hop_failures);
        return -1;
    }
    *hop = slot;
    BUMP(w->c.hop_connects);
    if (tls && r == 0) tls_step(w, (unsigned)slot); /* a refused handshake closes it: *hop is -1 */
    return *hop;
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
            if (w->e->oc) lc_oc_client_on_timeout(w->e->oc, oc_hop_of(w->e, c->ssl != NULL), now_ns());
            forward_response(w, w->reply_buf, n, NULL);
        }
        off += f.len;
    }
}

/* The connection to a next hop could not be set up: what was queued for it is answered 503,
 * and the next request tries again after RECONNECT_NS. */
static void hop_failed(worker_t *w, unsigned slot) {
    BUMP(w->c.hop_failures);
    if (w->conns[slot].ssl) w->tls_hop_retry_ns = now_ns() + RECONNECT_NS;
    else w->hop_retry_ns = now_ns() + RECONNECT_NS;
    answer_unsent(w, slot);
    conn_close(w, slot);
}

/* A connect to the next hop finished: up (over TLS, the handshake starts), or failed. */
static void hop_connected(worker_t *w, unsigned slot) {
    conn_t *c = &w->conns[slot];
    int err = 0;
    socklen_t el = sizeof err;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
        elog("tcp: cannot connect to the next hop: %s\n", strerror(err ? err : errno));
        hop_failed(w, slot);
        return;
    }
    c->connecting = 0;
    if (c->ssl) tls_step(w, slot);
    else conn_flush(w, slot);
}

/* A step of a connection's TLS handshake. A failure is logged with its reason (an unverified
 * certificate says why); for the next hop it is a failed connect. */
static void tls_step(worker_t *w, unsigned slot) {
    conn_t *c = &w->conns[slot];
    char why[512];
    int r = tls_handshake(c->ssl, why, sizeof why);
    if (r == TLS_WANT_READ || r == TLS_WANT_WRITE) {
        conn_arm(w, slot, r == TLS_WANT_WRITE);
        return;
    }
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &c->peer.sin_addr, ip, sizeof ip);
    if (r != 1) {
        BUMP(w->c.tls_handshake_failures);
        elog("tls: handshake with %s %s:%u failed: %s\n", c->outbound ? "the next hop" : "the client", ip,
             ntohs(c->peer.sin_port), why);
        if (c->outbound) hop_failed(w, slot);
        else conn_close(w, slot);
        return;
    }
    c->handshaking = 0;
    BUMP(w->c.tls_handshakes);
    if (c->outbound) {
        char who[384];
        tls_describe(c->ssl, who, sizeof who);
        elog("tls: next hop %s:%u verified as %s (%s)\n", ip, ntohs(c->peer.sin_port), w->e->tls_next_hop_name, who);
    }
    conn_arm(w, slot, 0);
    if (c->out_off < c->out_len) mark_dirty(w, slot); /* what was queued meanwhile */
    /* A client's first request may have come with its last handshake flight and been read
     * ahead with it: epoll will not report it again. */
    if (tls_pending(c->ssl)) backlog(w, slot);
}

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

/* One read of a connection (tcp_read): 1 when it read something and the connection goes on. */
static int tcp_read_once(worker_t *w, unsigned slot) {
    conn_t *c = &w->conns[slot];
    char *buf = c->in_len ? c->in : w->rx;
    size_t cap = c->in_len ? MAX_MSG : TCP_RX;
    size_t have = c->in_len;
    ssize_t n = conn_recv(w, slot, buf + have, cap - have);
    if (n <= 0) {
        if (n == TLS_WANT_READ) return 0;
        conn_close(w, slot); /* closed by the peer (an unfinished message goes with it) or broken */
        return 0;
    }
    have += (size_t)n;
    c->last_rx_ns = now_ns();
    if (c->ssl && c->out_off < c->out_len) mark_dirty(w, slot); /* a write that waited for a read */
    peer_t from = {1, c->peer, slot, c->gen, c->ssl != NULL};
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
        return !c->dead && !c->closing;
    }
    if (buf == w->rx) {
        if (!c->in && !(c->in = malloc(MAX_MSG))) {
            conn_kill(w, slot);
            return 0;
        }
        memcpy(c->in, buf + off, rest);
    } else if (off > 0) {
        memmove(c->in, c->in + off, rest);
    }
    c->in_len = rest;
    return 1;
}

/* Reads what a connection has for us and handles every whole message in it; keeps the
 * unfinished rest in the connection's own buffer (at most one message, MAX_MSG bytes). TLS may
 * hold decrypted bytes that epoll does not report: they are read on. */
static void tcp_read(worker_t *w, unsigned slot) {
    conn_t *c = &w->conns[slot];
    if (c->closing) { /* read and discard until the peer closes */
        char sink[4096];
        ssize_t n = conn_recv(w, slot, sink, sizeof sink);
        if (n == 0 || n == TLS_FAILED) conn_close(w, slot);
        return;
    }
    /* A few reads per pass, then the others' turn: the rest waits on the backlog. */
    for (int k = 0; k < TLS_READS_PER_PASS; k++) {
        if (!tcp_read_once(w, slot) || !c->ssl || !tls_pending(c->ssl)) return;
    }
    backlog(w, slot);
}

/* Reads the connections whose TLS session holds bytes epoll does not report (see backlog). */
static void read_backlog(worker_t *w) {
    /* Connections put back while this runs go after the first n (each slot at most once on
     * either side: 2 × nconns entries), and move to the front for the next pass. */
    unsigned n = w->nbacklog;
    for (unsigned k = 0; k < n; k++) {
        unsigned slot = w->backlog[k];
        conn_t *c = &w->conns[slot];
        c->backlogged = 0;
        /* the slot may hold another connection by now: a read that finds nothing costs one recv */
        if (c->fd >= 0 && c->ssl && !c->handshaking) tcp_read(w, slot);
    }
    memmove(w->backlog, w->backlog + n, (w->nbacklog - n) * sizeof *w->backlog);
    w->nbacklog -= n;
}

/* Takes the waiting connections of the TCP or the TLS listening socket (a TLS one waits for its
 * client's hello). */
static void tcp_accept(worker_t *w, int tls) {
    for (;;) {
        struct sockaddr_in peer;
        socklen_t pl = sizeof peer;
        int fd = accept4(tls ? w->tls_lsock : w->lsock, (struct sockaddr *)&peer, &pl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) elog("tcp: accept: %s\n", strerror(errno));
            return;
        }
        /* A place among --max-connections, then one among its address's
         * --max-connections-per-source, taken before the connection is opened: the workers
         * accept side by side, and the limits hold over all of them. Refused: the peer sees
         * the connection closed. */
        int slot = -1;
        if (atomic_fetch_add_explicit(&w->e->tcp_inbound, 1, memory_order_relaxed) >= w->e->max_conns) {
            atomic_fetch_sub_explicit(&w->e->tcp_inbound, 1, memory_order_relaxed);
            BUMP(w->c.tcp_refused); /* counted before the close the peer sees */
            close(fd);
            continue;
        }
        if (!sources_take(&w->e->sources, peer.sin_addr.s_addr)) {
            atomic_fetch_sub_explicit(&w->e->tcp_inbound, 1, memory_order_relaxed);
            BUMP(w->c.tcp_source_refused);
            close(fd);
            continue;
        }
        if ((slot = conn_open(w, fd, &peer, 0, 0)) < 0) {
            sources_give(&w->e->sources, peer.sin_addr.s_addr);
            atomic_fetch_sub_explicit(&w->e->tcp_inbound, 1, memory_order_relaxed);
            BUMP(w->c.tcp_refused);
            close(fd);
            continue;
        }
        if (tls) {
            conn_t *c = &w->conns[slot];
            c->handshaking = 1;
            if (!(c->ssl = tls_accepting(fd))) {
                conn_close(w, (unsigned)slot);
                BUMP(w->c.tcp_refused);
                continue;
            }
        }
        BUMP(w->c.tcp_accepted);
    }
}

/* Closes connections whose peer did not close within LINGER_CLOSE_NS of our FIN, and, once a
 * second, TLS connections whose handshake is not done after TLS_HANDSHAKE_NS and inbound
 * connections silent for --tcp-idle-s (a keep-alive ping counts; the connection to the next
 * hop is kept). This stateless edge never sends a request to a caller, so closing an idle
 * caller's connection loses nothing: its next request opens a new one. */
static void sweep(worker_t *w) {
    uint64_t now = now_ns();
    int second = (w->e->idle_ns || w->e->tls_on) && now >= w->next_idle_sweep_ns;
    int idle = second && w->e->idle_ns;
    if (w->lingering == 0 && !second) return;
    if (second) w->next_idle_sweep_ns = now + 1000000000ull;
    for (unsigned k = 0; k < w->nconns; k++) {
        conn_t *c = &w->conns[k];
        if (c->fd < 0) continue;
        if (c->lingering && c->close_at <= now) {
            conn_close(w, k);
        } else if (second && c->handshaking && now - c->opened_ns >= TLS_HANDSHAKE_NS) {
            BUMP(w->c.tls_handshake_failures);
            elog("tls: handshake with connection %u not complete after %llu s: closed\n", k,
                 (unsigned long long)(TLS_HANDSHAKE_NS / 1000000000ull));
            if (c->outbound) hop_failed(w, k);
            else conn_close(w, k);
        } else if (idle && !c->outbound && !c->closing && now - c->last_rx_ns >= w->e->idle_ns) {
            BUMP(w->c.tcp_idle_closed);
            conn_close(w, k);
        }
    }
}

void *tcp_main(void *arg) {
    worker_t *w = arg;
    pin_worker(w->e, w->index - w->e->nudp, w->e->ntcp);
    struct epoll_event ev[64];
    while (atomic_load(&w->e->holding) && !atomic_load(&tcp_stop)) { /* connections wait in the backlog */
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    while (!atomic_load(&tcp_stop)) {
        int n = epoll_wait(w->epfd, ev, 64, w->nbacklog ? 0 : 50);
        for (int k = 0; k < n; k++) {
            uint64_t cookie = ev[k].data.u64;
            if ((cookie & 0xffffffffu) == 0) {
                tcp_accept(w, cookie == LISTEN_TLS);
                continue;
            }
            unsigned slot = (unsigned)(cookie & 0xffffffffu) - 1;
            conn_t *c = &w->conns[slot];
            if (c->fd < 0 || c->gen != (uint32_t)(cookie >> 32)) continue; /* closed earlier in this pass */
            if (c->connecting) {
                hop_connected(w, slot);
                continue;
            }
            if (c->handshaking) {
                tls_step(w, slot);
                continue;
            }
            if (ev[k].events & EPOLLOUT) conn_flush(w, slot);
            /* TLS may have asked to write in order to go on reading (conn_recv). */
            int retry = c->ssl && (ev[k].events & EPOLLOUT);
            if (c->fd >= 0 && c->gen == (uint32_t)(cookie >> 32) && (retry || (ev[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))) tcp_read(w, slot);
        }
        read_backlog(w);
        flush_conns(w);
        flush_sends(w); /* responses to UDP requests that came back over TCP */
        expire(w);
        sweep(w);
    }
    return NULL;
}

/* A listening socket on `at`, in the epoll set with `cookie`: 0, or -1 with errno set. */
static int listen_on(worker_t *w, const struct sockaddr_in *at, uint64_t cookie) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    /* Several TCP workers: each listens on the address, and the kernel spreads the connections. */
    if (w->e->ntcp > 1 && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) {
        close(fd);
        return -1;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = cookie};
    if (bind(fd, (const struct sockaddr *)at, sizeof *at) < 0 || listen(fd, 1024) < 0 ||
        epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

/* A TCP worker: its listening sockets (TCP on the same address as UDP, TLS on --tls-listen)
 * and its table. */
int tcp_start(edge_t *e, worker_t *w) {
    /* Room for every connection plus the listening, UDP and epoll descriptors. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < e->max_conns + 64 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = e->max_conns + 64 < rl.rlim_max ? e->max_conns + 64 : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    w->nconns = e->max_conns + 2; /* + the connections to the next hop (TCP, TLS) */
    w->conns = calloc(w->nconns, sizeof *w->conns);
    w->free_slots = calloc(w->nconns, sizeof *w->free_slots);
    w->dirty = calloc(w->nconns, sizeof *w->dirty);
    w->backlog = calloc(2 * (size_t)w->nconns, sizeof *w->backlog);
    w->rx = malloc(TCP_RX);
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (!w->conns || !w->free_slots || !w->dirty || !w->backlog || !w->rx || w->epfd < 0) return -1;
    for (unsigned k = 0; k < w->nconns; k++) {
        w->conns[k].fd = -1;
        w->conns[k].gen = 1;
        w->free_slots[w->nfree++] = w->nconns - 1 - k; /* slot 0 first */
    }
    w->hop = w->tls_hop = -1;
    w->lsock = w->tls_lsock = -1;
    if (e->tcp_on && (w->lsock = listen_on(w, &e->listen_addr, 0)) < 0) return -1;
    if (e->tls_on && (w->tls_lsock = listen_on(w, &e->tls_listen_addr, LISTEN_TLS)) < 0) return -1;
    return 0;
}

void tcp_finish(worker_t *w) {
    for (unsigned k = 0; k < w->nconns; k++) {
        if (w->conns[k].fd >= 0) conn_close(w, k);
    }
    close(w->epfd);
    if (w->lsock >= 0) close(w->lsock);
    if (w->tls_lsock >= 0) close(w->tls_lsock);
    free(w->conns);
    free(w->free_slots);
    free(w->dirty);
    free(w->backlog);
    free(w->rx);
}
