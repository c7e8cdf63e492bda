/* sipstream.h: where one SIP message ends on a byte stream (TCP), RFC 3261 §18.3 and §7.5,
 * with the RFC 5626 §3.5.1 keep-alives. No I/O and no allocation: the edge feeds it what a
 * connection has buffered and gets back what the next bytes are; test_stream.c drives it
 * byte by byte.
 *
 * On a stream, Content-Length is mandatory and is the only way to find a message's end: the
 * header block ends at the first empty line, and the body is exactly Content-Length bytes
 * after it, whatever those bytes look like. CRLFs before a start-line are ignored (§7.5),
 * except that a double CRLF there is a keep-alive ping, answered with one CRLF (the pong).
 *
 * A connection keeps an `sf_state` per message being received so that feeding it a message a
 * byte at a time costs linear, not quadratic, time: the header search resumes where it
 * stopped, and once the header block is parsed only the length is compared. */
#ifndef LOADCTL_EDGE_SIPSTREAM_H
#define LOADCTL_EDGE_SIPSTREAM_H

#include <stddef.h>
#include <string.h>

typedef enum {
    SF_MORE,       /* not enough bytes yet; nothing consumed */
    SF_MESSAGE,    /* one whole message of `len` bytes (header block of `header_len`, then body) */
    SF_PING,       /* a keep-alive ping (CRLFCRLF, `len` 4): answer one CRLF */
    SF_CRLF,       /* a stray line end before a start-line (`len` 1 or 2): skip it */
    SF_NO_LENGTH,  /* the header block (`header_len`) has no Content-Length: unframeable */
    SF_BAD_LENGTH, /* the Content-Length is not a number, or two of them disagree */
    SF_TOO_LARGE,  /* the message would exceed the maximum size (`header_len` 0: no end of
                    * the header block within it) */
} sf_kind;

typedef struct {
    sf_kind kind;
    size_t len;        /* bytes to consume (SF_MESSAGE, SF_PING, SF_CRLF) */
    size_t header_len; /* the header block with its empty line (SF_MESSAGE, SF_*_LENGTH, SF_TOO_LARGE) */
} sf_frame;

/* What a connection remembers about the message it is receiving; zero it for a new
 * connection (sf_next resets it after each message). */
typedef struct {
    size_t scanned;    /* header bytes already searched for the empty line */
    size_t header_len; /* 0 until the header block is complete */
    size_t total;      /* header_len + Content-Length, once known */
} sf_state;

static inline int sf_lower(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* Whether the header name [p, p+n) (trailing blanks already trimmed) is Content-Length or
 * its compact form `l`, case-insensitively. */
static inline int sf_is_content_length(const char *p, size_t n) {
    static const char name[] = "content-length";
    if (n == 1) return sf_lower((unsigned char)p[0]) == 'l';
    if (n != sizeof name - 1) return 0;
    for (size_t i = 0; i < n; i++) {
        if (sf_lower((unsigned char)p[i]) != name[i]) return 0;
    }
    return 1;
}

/* The Content-Length of a complete header block [0, hlen): 1 found (value in *out, capped at
 * limit + 1 so that it cannot overflow), 0 absent, -1 invalid. Header lines may be folded (a
 * line starting with a blank continues the previous one, also inside the value); lines end in
 * CRLF or a bare LF as on the datagram path. The start-line is skipped. */
static inline int sf_content_length(const char *buf, size_t hlen, size_t limit, size_t *out) {
    size_t i = 0;
    while (i < hlen && buf[i] != '\n') i++;
    i++;
    int found = 0;
    size_t value = 0;
    while (i < hlen) {
        size_t end = i;
        while (end < hlen && buf[end] != '\n') end++;
        if (end == i || (end == i + 1 && buf[i] == '\r')) break; /* the empty line */
        if (buf[i] == ' ' || buf[i] == '\t') {                    /* a continuation: not a name */
            i = end + 1;
            continue;
        }
        const char *colon = memchr(buf + i, ':', end - i);
        if (!colon) {
            i = end + 1;
            continue;
        }
        size_t n = (size_t)(colon - (buf + i));
        while (n > 0 && (buf[i + n - 1] == ' ' || buf[i + n - 1] == '\t')) n--;
        if (!sf_is_content_length(buf + i, n)) {
            i = end + 1;
            continue;
        }
        /* The value runs to the end of the logical header: past line ends followed by a blank. */
        size_t k = (size_t)(colon - buf) + 1;
        size_t v = 0, digits = 0;
        int trailing = 0; /* blanks seen after the digits */
        for (;;) {
            if (k >= hlen) break;
            char ch = buf[k];
            if (ch == '\r' || ch == '\n') {
                size_t nl = ch == '\r' && k + 1 < hlen && buf[k + 1] == '\n' ? k + 2 : k + 1;
                if (nl < hlen && (buf[nl] == ' ' || buf[nl] == '\t')) {
                    if (digits) trailing = 1;
                    k = nl;
                    continue;
                }
                k = nl;
                break;
            }
            if (ch == ' ' || ch == '\t') {
                if (digits) trailing = 1;
            } else if (ch >= '0' && ch <= '9' && !trailing) {
                digits++;
                if (v <= limit) v = v * 10 + (size_t)(ch - '0');
            } else {
                return -1;
            }
            k++;
        }
        if (!digits) return -1;
        if (v > limit) v = limit + 1;
        if (found && v != value) return -1; /* two lengths that disagree: which one frames it? */
        found = 1;
        value = v;
        /* k is at the start of the next line (or the end of the block). */
        i = k;
    }
    if (found) *out = value;
    return found;
}

/* What the bytes at the start of buf[0, len) are, for a message of at most `max` bytes. */
static inline sf_frame sf_next(sf_state *st, const char *buf, size_t len, size_t max) {
    sf_frame f = {SF_MORE, 0, 0};
    if (len == 0) return f;
    if (st->total) { /* header block parsed earlier: only the body is awaited */
        if (len < st->total) return f;
        f.kind = SF_MESSAGE;
        f.len = st->total;
        f.header_len = st->header_len;
        memset(st, 0, sizeof *st);
        return f;
    }
    if (buf[0] == '\r' || buf[0] == '\n') {
        static const char ping[] = "\r\n\r\n";
        size_t n = len < 4 ? len : 4;
        if (memcmp(buf, ping, n) == 0) {
            if (n < 4) return f; /* a ping or a stray CRLF: the next bytes tell */
            f.kind = SF_PING;
            f.len = 4;
            return f;
        }
        f.kind = SF_CRLF;
        f.len = len >= 2 && buf[0] == '\r' && buf[1] == '\n' ? 2 : 1;
        return f;
    }
    /* The empty line ends the header block: "\n\r\n" or "\n\n". Resume two bytes back, in case
     * the previous search stopped inside it. */
    size_t limit = len < max ? len : max;
    size_t i = st->scanned > 2 ? st->scanned - 2 : 0;
    size_t hlen = 0;
    for (; i < limit; i++) {
        const char *nl = memchr(buf + i, '\n', limit - i);
        if (!nl) {
            i = limit;
            break;
        }
        i = (size_t)(nl - buf);
        if (i + 1 < len && buf[i + 1] == '\n') {
            hlen = i + 2;
            break;
        }
        if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n') {
            hlen = i + 3;
            break;
        }
        if (i + 2 >= len) break; /* the line end may continue in the next bytes */
    }
    if (!hlen) {
        st->scanned = i < limit ? i : limit;
        if (len >= max) {
            f.kind = SF_TOO_LARGE;
            memset(st, 0, sizeof *st);
        }
        return f;
    }
    f.header_len = hlen;
    size_t cl = 0;
    int r = sf_content_length(buf, hlen, max, &cl);
    if (r <= 0 || hlen > max || cl > max - hlen) {
        f.kind = r < 0 ? SF_BAD_LENGTH : r == 0 ? SF_NO_LENGTH : SF_TOO_LARGE;
        memset(st, 0, sizeof *st);
        return f;
    }
    st->header_len = hlen;
    st->total = hlen + cl;
    return sf_next(st, buf, len, max);
}

#endif
