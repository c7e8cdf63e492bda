/* sipmsg.h: the edge's small helpers for raw SIP text, which the example server
 * (examples/server/) borrows: the monotonic clock, IPv4 "IP:PORT" addresses, finding and
 * copying header lines of a raw SIP message, and the --log-oc line. No allocation. */
#ifndef LOADCTL_EDGE_SIPMSG_H
#define LOADCTL_EDGE_SIPMSG_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "sipvia.h" /* ascii_ieq */

/* CLOCK_MONOTONIC in nanoseconds (the clock libloadctl's shared tables and timers expect). */
static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* "IP:PORT" (IPv4, port 1..65535) into *out; -1 when it is not one. */
static inline int parse_addr(const char *text, struct sockaddr_in *out) {
    char host[64];
    const char *colon = strrchr(text, ':');
    if (!colon || (size_t)(colon - text) >= sizeof host) return -1;
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = 0;
    /* The port: digits only, 1..65535 (atoi would take 99999 modulo 65536, and "5060x"). */
    char *end = NULL;
    long port = strtol(colon + 1, &end, 10);
    if (colon[1] < '0' || colon[1] > '9' || *end || port < 1 || port > 65535) return -1;
    memset(out, 0, sizeof *out);
    out->sin_family = AF_INET;
    out->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &out->sin_addr) == 1 ? 0 : -1;
}

/* "IP:PORT" of an address: the key overload control knows a peer by (RFC 7339 §5.4). */
static inline void addr_key(const struct sockaddr_in *a, char *out, size_t cap) {
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
    snprintf(out, cap, "%s:%u", ip, ntohs(a->sin_port));
}

/* Case-insensitive prefix match of a header line against a long or compact name. */
static inline int header_is(const char *line, size_t len, const char *name, const char *compact) {
    size_t n = strlen(name);
    if (len > n && ascii_ieq(line, name, n) && (line[n] == ':' || line[n] == ' ' || line[n] == '\t')) return 1;
    if (compact && len > 1 && (line[0] == compact[0] || line[0] == (compact[0] - 32)) && (line[1] == ':' || line[1] == ' ' || line[1] == '\t')) return 1;
    return 0;
}

/* Where a message's first header line starts: just past its start line. */
static inline size_t first_header(const char *msg, size_t len) {
    const char *nl = memchr(msg, '\n', len);
    return (nl ? (size_t)(nl - msg) : len) + 1;
}

/* The header line at *at (first_header() for the first), without its line end (CRLF or a bare
 * LF): 1, the line in *line and *line_len, and *at moved to the next line; 0 at the empty line
 * that ends the header block (*at is left on it: what follows is that line and the body) or at
 * the end of the message. Every walk over a message's header lines goes through it. */
static inline int next_header(const char *msg, size_t len, size_t *at, const char **line, size_t *line_len) {
    size_t i = *at;
    if (i >= len) return 0;
    const char *nl = memchr(msg + i, '\n', len - i);
    size_t end = nl ? (size_t)(nl - msg) : len;
    size_t n = end - i;
    if (n > 0 && msg[end - 1] == '\r') n--;
    if (n == 0) return 0;
    *line = msg + i;
    *line_len = n;
    *at = end + 1;
    return 1;
}

/* Finds the value of the first header with that name: start offset and length (0 if absent). */
static inline size_t find_header(const char *msg, size_t len, const char *name, const char *compact, size_t *value_len) {
    size_t at = first_header(msg, len);
    const char *h;
    size_t line_len;
    while (next_header(msg, len, &at, &h, &line_len)) {
        if (header_is(h, line_len, name, compact)) {
            const char *colon = memchr(h, ':', line_len);
            if (!colon) return 0;
            size_t i = (size_t)(h - msg);
            size_t v = (size_t)(colon - msg) + 1;
            while (v < i + line_len && (msg[v] == ' ' || msg[v] == '\t')) v++;
            *value_len = i + line_len - v;
            return v;
        }
    }
    *value_len = 0;
    return 0;
}

/* The value of the `tag` parameter of a From / To header value (RFC 3261 §20.20, §20.39:
 * after the name-addr's `>`, a display name's quoted string skipped; `;` SWS `tag=`), with its
 * length in *tl; NULL when it has none. */
static inline const char *header_tag(const char *v, size_t vl, size_t *tl) {
    size_t k = 0;
    int quoted = 0, angle = 0;
    /* Without a quoted display name the name-addr ends at the first '>' after its '<' (a URI
     * holds no '>'): three memchr calls instead of a walk over every byte. */
    const char *lt = memchr(v, '"', vl) ? NULL : memchr(v, '<', vl);
    if (lt) {
        const char *gt = memchr(lt, '>', vl - (size_t)(lt - v));
        if (!gt) return NULL;
        k = (size_t)(gt - v) + 1;
    }
    for (size_t i = 0; !lt && i < vl; i++) {
        if (quoted) {
            if (v[i] == '\\') i++;
            else if (v[i] == '"') quoted = 0;
        } else if (v[i] == '"') {
            quoted = 1;
        } else if (v[i] == '<') {
            angle = 1;
        } else if (v[i] == '>' && angle) {
            k = i + 1;
            angle = 0;
            break;
        }
    }
    if (angle) return NULL; /* a name-addr that does not close has no header parameters */
    while (k < vl) {
        const char *semi = memchr(v + k, ';', vl - k);
        if (!semi) return NULL;
        size_t p = (size_t)(semi - v) + 1;
        while (p < vl && (v[p] == ' ' || v[p] == '\t')) p++;
        if (p + 4 <= vl && ascii_ieq(v + p, "tag=", 4)) {
            size_t s = p + 4, e = s;
            while (e < vl && v[e] != ';' && v[e] != ',' && v[e] != ' ' && v[e] != '\t' && v[e] != '\r') e++;
            if (e == s) return NULL;
            *tl = e - s;
            return v + s;
        }
        k = p;
    }
    return NULL;
}

/* The headers a transaction or a dialog is known by: each one's first value, without the blanks
 * around it (as sv_check's spans: a request and its responses give the same; NULL, 0 when
 * absent). */
typedef struct {
    const char *call_id, *cseq, *from, *to;
    size_t call_id_len, cseq_len, from_len, to_len;
} msg_ids;

/* Finds a message's msg_ids in one walk over its header lines (find_header would walk once per
 * header). */
static inline void find_ids(const char *msg, size_t len, msg_ids *f) {
    memset(f, 0, sizeof *f);
    size_t at = first_header(msg, len);
    const char *h;
    size_t line_len;
    while (next_header(msg, len, &at, &h, &line_len)) {
        const char **v = NULL;
        size_t *vl = NULL;
        switch (h[0] | 0x20) {
        case 'c':
            if (header_is(h, line_len, "Call-ID", NULL)) v = &f->call_id, vl = &f->call_id_len;
            else if (header_is(h, line_len, "CSeq", NULL)) v = &f->cseq, vl = &f->cseq_len;
            break;
        case 'i':
            if (header_is(h, line_len, "i", NULL)) v = &f->call_id, vl = &f->call_id_len;
            break;
        case 'f':
            if (header_is(h, line_len, "From", "f")) v = &f->from, vl = &f->from_len;
            break;
        case 't':
            if (header_is(h, line_len, "To", "t")) v = &f->to, vl = &f->to_len;
            break;
        default: break;
        }
        if (!v || *v) continue;
        const char *colon = memchr(h, ':', line_len);
        if (!colon) continue;
        size_t k = (size_t)(colon - h) + 1;
        while (k < line_len && (h[k] == ' ' || h[k] == '\t')) k++;
        size_t e = line_len;
        while (e > k && (h[e - 1] == ' ' || h[e - 1] == '\t')) e--;
        *v = h + k;
        *vl = e - k;
    }
}

/* Appends `len` bytes to out if they fit. */
static inline int put(char *out, size_t *at, size_t cap, const char *s, size_t len) {
    if (*at + len > cap) return -1;
    memcpy(out + *at, s, len);
    *at += len;
    return 0;
}

/* Appends a NUL-terminated string. */
static inline void put_str(char *out, size_t *at, size_t cap, const char *s) {
    put(out, at, cap, s, strlen(s));
}

/* Appends `v` in decimal (base 10) or lower-case hex (base 16), as printf's %lu / %lx would:
 * by hand, since snprintf cost a sixth of forwarding a request. */
static inline void put_num(char *out, size_t *at, size_t cap, unsigned long v, unsigned base) {
    char b[24];
    size_t n = 0;
    do {
        b[sizeof b - ++n] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v);
    put(out, at, cap, b + sizeof b - n, n);
}

/* Appends an IPv4 address in dotted-decimal form (as inet_ntop writes it). */
static inline void put_ipv4(char *out, size_t *at, size_t cap, const struct in_addr *a) {
    const unsigned char *b = (const unsigned char *)&a->s_addr;
    for (int i = 0; i < 4; i++) {
        if (i) put(out, at, cap, ".", 1);
        put_num(out, at, cap, b[i], 10);
    }
}

/* The status code of a response ("SIP/2.0 200 OK": 200); 0 when `msg` does not start with one. */
static inline unsigned status_code(const char *msg, size_t len) {
    unsigned code = 0;
    if (len < 12 || strncmp(msg, "SIP/2.0 ", 8) != 0) return 0;
    for (size_t k = 8; k < 11; k++) {
        if (msg[k] < '0' || msg[k] > '9') return 0;
        code = code * 10 + (unsigned)(msg[k] - '0');
    }
    return code;
}

/* --log-oc: `oc-sent|CLIENT|CALL-ID|CSEQ|STATUS|VIA` for a response to the request or response
 * `msg` sent with RFC 7339 values in `via` (the Via as written: what a capture must decode to). */
static inline void log_oc_sent(FILE *log, const char *client, const char *msg, size_t len, unsigned status, const char *via,
                               size_t via_len) {
    size_t cl = 0, ql = 0;
    size_t c = find_header(msg, len, "Call-ID", "i", &cl), q = find_header(msg, len, "CSeq", NULL, &ql);
    fprintf(log, "oc-sent|%s|%.*s|%.*s|%u|%.*s\n", client, (int)(c ? cl : 0), c ? msg + c : "", (int)(q ? ql : 0),
            q ? msg + q : "", status, (int)via_len, via);
}

#endif
