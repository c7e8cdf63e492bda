/* The edge's metrics (metrics.h). */
#define _GNU_SOURCE /* accept4 */
#include "metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ text */

static int mbuf_room(mbuf *b, size_t n) {
    if (b->failed) return 0;
    if (b->len + n + 1 <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 65536;
    while (cap < b->len + n + 1) cap *= 2;
    if (cap > METRICS_TEXT_MAX) {
        b->failed = 1;
        return 0;
    }
    char *p = realloc(b->p, cap);
    if (!p) {
        b->failed = 1;
        return 0;
    }
    b->p = p;
    b->cap = cap;
    return 1;
}

void mbuf_put(mbuf *b, const char *s, size_t n) {
    if (!mbuf_room(b, n)) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void mbuf_printf(mbuf *b, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        mbuf_put(b, small, (size_t)n);
        return;
    }
    if (!mbuf_room(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void mbuf_family(mbuf *b, const char *name, const char *type, const char *help) {
    mbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value in the text format: backslash, double quote and newline escaped. */
static void put_label(mbuf *b, const char *s, size_t n) {
    for (size_t k = 0; k < n; k++) {
        if (s[k] == '\\') mbuf_put(b, "\\\\", 2);
        else if (s[k] == '"') mbuf_put(b, "\\\"", 2);
        else if (s[k] == '\n') mbuf_put(b, "\\n", 2);
        else mbuf_put(b, s + k, 1);
    }
}

/* ------------------------------------------------------------------ monotonic rule totals */

enum { F_MATCHED, F_ACCEPTED, F_REJECTED, F_REDIRECTED, F_DROPPED, F_REDIRECT_REFUSED, FIELDS };

static const char *const FIELD_NAME[FIELDS] = {"matched", "accepted", "rejected", "redirected", "dropped", "redirect_refused"};
static const char *const FIELD_HELP[FIELDS] = {
    "Requests the rule (source, id) matched, over every version of the rule.",
    "Matched requests admitted.",
    "Matched requests answered 503.",
    "Matched requests redirected (302).",
    "Matched requests dropped.",
    "Redirects of the rule answered 503 instead (target outside the agreed ones, RFC 7200 section 7).",
};

#define KEY_MAX 512 /* source and rule id, NUL-separated; longer keys are cut (still distinct enough to count) */

typedef struct {
    uint32_t used;
    uint32_t seen_at; /* the sample that last saw it (rows not seen keep their totals) */
    uint16_t source_len, rule_len;
    char key[KEY_MAX];
    uint64_t base[FIELDS], last[FIELDS];
} rule_total;

static pthread_mutex_t rules_mu = PTHREAD_MUTEX_INITIALIZER;
static rule_total *rules;     /* METRICS_RULE_KEYS * 2 slots, open addressing */
static size_t rules_count;    /* keys in the table */
static uint64_t keys_dropped; /* rows whose key found no room */
static uint32_t sample_no;
/* Keys in order of first sight, so the exposition is stable. */
static uint32_t *order;

#define SLOTS (METRICS_RULE_KEYS * 2)

static uint64_t key_hash(const char *k, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)k[i]) * 1099511628211ull;
    return h;
}

static void sample_row(void *userdata, const lc_rule_stats *row) {
    (void)userdata;
    char key[KEY_MAX];
    size_t sl = row->source.len < 255 ? row->source.len : 255;
    size_t rl = row->rule.len < KEY_MAX - 256 ? row->rule.len : KEY_MAX - 256;
    memcpy(key, row->source.ptr, sl);
    key[sl] = 0;
    memcpy(key + sl + 1, row->rule.ptr, rl);
    size_t kl = sl + 1 + rl;
    uint64_t h = key_hash(key, kl);
    rule_total *t = NULL;
    for (size_t probe = 0; probe < SLOTS; probe++) {
        rule_total *s = &rules[(h + probe) % SLOTS];
        if (!s->used) {
            if (rules_count >= METRICS_RULE_KEYS) break;
            s->used = 1;
            s->source_len = (uint16_t)sl;
            s->rule_len = (uint16_t)rl;
            memcpy(s->key, key, kl);
            order[rules_count++] = (uint32_t)((h + probe) % SLOTS);
            t = s;
            break;
        }
        if (s->source_len == sl && s->rule_len == rl && memcmp(s->key, key, kl) == 0) {
            t = s;
            break;
        }
    }
    if (!t) {
        keys_dropped++;
        return;
    }
    uint64_t cur[FIELDS] = {row->matched, row->accepted, row->rejected, row->redirected, row->dropped, row->redirect_refused};
    int restarted = 0;
    for (int f = 0; f < FIELDS; f++) restarted |= cur[f] < t->last[f];
    for (int f = 0; f < FIELDS; f++) {
        if (restarted) t->base[f] += t->last[f];
        t->last[f] = cur[f];
    }
    t->seen_at = sample_no;
}

static int rules_ready(void) {
    if (rules) return 1;
    rules = calloc(SLOTS, sizeof *rules);
    order = calloc(METRICS_RULE_KEYS, sizeof *order);
    if (!rules || !order) {
        free(rules);
        free(order);
        rules = NULL;
        order = NULL;
        return 0;
    }
    return 1;
}

void metrics_sample_rules(const lc_engine *engine) {
    pthread_mutex_lock(&rules_mu);
    if (rules_ready()) {
        sample_no++;
        lc_engine_stats_each(engine, sample_row, NULL);
    }
    pthread_mutex_unlock(&rules_mu);
}

void metrics_write_rules(const lc_engine *engine, mbuf *b) {
    pthread_mutex_lock(&rules_mu);
    if (rules_ready()) {
        sample_no++;
        lc_engine_stats_each(engine, sample_row, NULL);
        for (int f = 0; f < FIELDS; f++) {
            char name[64];
            snprintf(name, sizeof name, "loadctl_rule_%s_total", FIELD_NAME[f]);
            mbuf_family(b, name, "counter", FIELD_HELP[f]);
            for (size_t k = 0; k < rules_count; k++) {
                const rule_total *t = &rules[order[k]];
                mbuf_printf(b, "%s{source=\"", name);
                put_label(b, t->key, t->source_len);
                mbuf_put(b, "\",rule=\"", 8);
                put_label(b, t->key + t->source_len + 1, t->rule_len);
                mbuf_printf(b, "\"} %llu\n", (unsigned long long)(t->base[f] + t->last[f]));
            }
        }
        mbuf_family(b, "edge_metrics_rule_keys_dropped_total", "counter",
                    "Rule rows not exported per rule: the table of (source, rule id) keys was full.");
        mbuf_printf(b, "edge_metrics_rule_keys_dropped_total %llu\n", (unsigned long long)keys_dropped);
    }
    pthread_mutex_unlock(&rules_mu);
}

/* ------------------------------------------------------------------ HTTP endpoint */

typedef struct {
    int fd; /* -1: free */
    char in[METRICS_REQUEST_MAX];
    size_t in_len;
    char *out;
    size_t out_len, out_off;
    uint64_t deadline_ms;
} mconn;

static int listen_fd = -1;
static pthread_t serve_thread;
static atomic_int serve_stop;
static metrics_render_fn render_fn;
static void *render_ud;
static mconn conns[METRICS_CONNS];

static uint64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void mconn_close(mconn *c) {
    if (c->fd < 0) return;
    close(c->fd);
    free(c->out);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

static void respond(mconn *c, const char *status, const char *extra, const char *body, size_t body_len) {
    mbuf b = {0};
    mbuf_printf(&b, "HTTP/1.1 %s\r\n%sContent-Length: %zu\r\nConnection: close\r\n\r\n", status, extra, body_len);
    mbuf_put(&b, body, body_len);
    if (b.failed) {
        free(b.p);
        mconn_close(c);
        return;
    }
    c->out = b.p;
    c->out_len = b.len;
    c->out_off = 0;
}

/* A whole request head is in: answer it (the connection closes once the answer is written). */
static void handle_request(mconn *c) {
    char *sp = memchr(c->in, ' ', c->in_len);
    char *sp2 = sp ? memchr(sp + 1, ' ', c->in_len - (size_t)(sp + 1 - c->in)) : NULL;
    if (!sp || !sp2) {
        respond(c, "400 Bad Request", "", "bad request\n", 12);
        return;
    }
    size_t ml = (size_t)(sp - c->in), pl = (size_t)(sp2 - sp - 1);
    const char *path = sp + 1;
    size_t path_only = pl;
    for (size_t k = 0; k < pl; k++) {
        if (path[k] == '?') {
            path_only = k;
            break;
        }
    }
    if (!(ml == 3 && memcmp(c->in, "GET", 3) == 0)) {
        respond(c, "405 Method Not Allowed", "Allow: GET\r\n", "only GET\n", 9);
        return;
    }
    if (!(path_only == 8 && memcmp(path, "/metrics", 8) == 0)) {
        respond(c, "404 Not Found", "", "GET /metrics\n", 13);
        return;
    }
    mbuf body = {0};
    render_fn(render_ud, &body);
    if (body.failed) {
        free(body.p);
        respond(c, "500 Internal Server Error", "", "metrics too large\n", 18);
        return;
    }
    respond(c, "200 OK", "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n", body.p ? body.p : "", body.len);
    free(body.p);
}

static void mconn_read(mconn *c) {
    if (c->out) { /* answered: anything more is discarded */
        char sink[1024];
        ssize_t n = recv(c->fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n == 0) mconn_close(c);
        return;
    }
    ssize_t n = recv(c->fd, c->in + c->in_len, sizeof c->in - 1 - c->in_len, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        mconn_close(c);
        return;
    }
    if (n < 0) return;
    c->in_len += (size_t)n;
    c->in[c->in_len] = 0;
    if (strstr(c->in, "\r\n\r\n") || strstr(c->in, "\n\n")) handle_request(c);
    else if (c->in_len >= sizeof c->in - 1) respond(c, "431 Request Header Fields Too Large", "", "request too large\n", 18);
}

static void mconn_write(mconn *c) {
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        mconn_close(c);
        return;
    }
    /* All written: our FIN; the slot is freed when the client closes or the deadline passes. */
    shutdown(c->fd, SHUT_WR);
}

static void *serve_main(void *arg) {
    (void)arg;
    struct pollfd p[1 + METRICS_CONNS];
    while (!atomic_load(&serve_stop)) {
        int n = 0;
        p[n++] = (struct pollfd){listen_fd, POLLIN, 0};
        int idx[METRICS_CONNS];
        for (int k = 0; k < METRICS_CONNS; k++) {
            if (conns[k].fd < 0) continue;
            short ev = POLLIN;
            if (conns[k].out && conns[k].out_off < conns[k].out_len) ev |= POLLOUT;
            idx[n - 1] = k;
            p[n++] = (struct pollfd){conns[k].fd, ev, 0};
        }
        int r = poll(p, (nfds_t)n, 100);
        uint64_t now = mono_ms();
        if (r > 0 && (p[0].revents & POLLIN)) {
            for (;;) {
                int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0) break;
                mconn *free_c = NULL;
                for (int k = 0; k < METRICS_CONNS && !free_c; k++) {
                    if (conns[k].fd < 0) free_c = &conns[k];
                }
                if (!free_c) {
                    close(fd); /* bounded: a scraper that holds connections open cannot grow this */
                    continue;
                }
                memset(free_c, 0, sizeof *free_c);
                free_c->fd = fd;
                free_c->deadline_ms = now + METRICS_TIMEOUT_MS;
            }
        }
        for (int j = 1; r > 0 && j < n; j++) {
            mconn *c = &conns[idx[j - 1]];
            if (c->fd != p[j].fd) continue;
            if (p[j].revents & (POLLIN | POLLHUP | POLLERR)) mconn_read(c);
            if (c->fd >= 0 && c->out && (p[j].revents & POLLOUT)) mconn_write(c);
            else if (c->fd >= 0 && c->out && c->out_off == 0) mconn_write(c); /* just answered */
        }
        for (int k = 0; k < METRICS_CONNS; k++) {
            if (conns[k].fd >= 0 && now >= conns[k].deadline_ms) mconn_close(&conns[k]);
        }
    }
    for (int k = 0; k < METRICS_CONNS; k++) mconn_close(&conns[k]);
    return NULL;
}

int metrics_serve_start(const struct sockaddr_in *addr, metrics_render_fn render, void *userdata) {
    for (int k = 0; k < METRICS_CONNS; k++) conns[k].fd = -1;
    render_fn = render;
    render_ud = userdata;
    listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listen_fd < 0) return -1;
    int one = 1;
    setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(listen_fd, (const struct sockaddr *)addr, sizeof *addr) != 0 || listen(listen_fd, 16) != 0) {
        int err = errno;
        close(listen_fd);
        listen_fd = -1;
        errno = err;
        return -1;
    }
    /* Signals stay with the main thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int r = pthread_create(&serve_thread, NULL, serve_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0) {
        close(listen_fd);
        listen_fd = -1;
        errno = r;
        return -1;
    }
    return 0;
}

void metrics_serve_stop(void) {
    if (listen_fd < 0) return;
    atomic_store(&serve_stop, 1);
    pthread_join(serve_thread, NULL);
    close(listen_fd);
    listen_fd = -1;
}
