/* tcp.c: SIP over TCP, on a thread of its own (epoll): a listening socket on the same address
 * and port as UDP, a bounded table of connections (--max-connections inbound, excess closed at
 * once; silent ones closed after --tcp-idle-s), messages framed by Content-Length
 * (sipstream.h; 400 and close when it is missing or invalid, close past 64 KiB), RFC 5626
 * keep-alive pings answered, and one persistent connection to the next hop (non-blocking
 * connect, reconnected when it breaks). A request that came over TCP goes
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
#include "tcp.h"
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

/* Set by the main thread when the TCP thread must end. */
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
int hop_slot(worker_t *w) {
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

void *tcp_main(void *arg) {
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
int tcp_start(edge_t *e, worker_t *w) {
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

void tcp_finish(worker_t *w) {
    for (unsigned k = 0; k < w->nconns; k++) {
        if (w->conns[k].fd >= 0) conn_close(w, k);
    }
    close(w->epfd);
    free(w->conns);
    free(w->free_slots);
    free(w->dirty);
    free(w->rx);
}
