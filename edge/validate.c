/* RFC 3261 §16.3 request validation (validate.h). */
#define _POSIX_C_SOURCE 200809L /* sipmsg.h: clock_gettime */

#include "validate.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "sipmsg.h"
#include "sipvia.h"

const char *const SV_LABELS[SV_COUNT] = {
    "valid", "no-via", "bad-syntax", "bad-scheme", "too-many-hops", "options-max-forwards-0", "loop", "bad-extension", "bad-ack",
};

/* One header line of the block: name (up to the colon, blanks trimmed) and value. */
typedef struct {
    const char *name, *value;
    size_t name_len, value_len;
} hline;

/* The next header line from *at (the start of a line); 0 at the end of the header block. A
 * folded continuation (RFC 3261 §7.3.1) is returned as a line without a name. */
static int next_line(const char *msg, size_t len, size_t *at, hline *h) {
    const char *l;
    size_t line_len;
    if (!next_header(msg, len, at, &l, &line_len)) return 0;
    memset(h, 0, sizeof *h);
    if (l[0] == ' ' || l[0] == '\t') return 1;
    const char *colon = memchr(l, ':', line_len);
    if (!colon) return 1;
    size_t n = (size_t)(colon - l);
    while (n > 0 && (l[n - 1] == ' ' || l[n - 1] == '\t')) n--;
    size_t v = (size_t)(colon - l) + 1;
    while (v < line_len && (l[v] == ' ' || l[v] == '\t')) v++;
    size_t vl = line_len - v;
    while (vl > 0 && (l[v + vl - 1] == ' ' || l[v + vl - 1] == '\t')) vl--;
    h->name = l;
    h->name_len = n;
    h->value = l + v;
    h->value_len = vl;
    return 1;
}

/* The header fields validation and the loop hash look at (RFC 3261 §7.3.3 compact forms too):
 * one comparison per line, chosen by the name's length, since this runs on every request. */
enum { H_OTHER, H_VIA, H_CALL_ID, H_CSEQ, H_FROM, H_TO, H_MAX_FORWARDS, H_PROXY_REQUIRE, H_ROUTE, H_PROXY_AUTHORIZATION };

static int header_id(const hline *h) {
    if (!h->name) return H_OTHER;
    const char *n = h->name;
    switch (h->name_len) {
    case 1:
        switch (n[0] | 0x20) {
        case 'v': return H_VIA;
        case 'i': return H_CALL_ID;
        case 'f': return H_FROM;
        case 't': return H_TO;
        default: return H_OTHER;
        }
    case 2: return ascii_ieq(n, "To", 2) ? H_TO : H_OTHER;
    case 3: return ascii_ieq(n, "Via", 3) ? H_VIA : H_OTHER;
    case 4: return ascii_ieq(n, "From", 4) ? H_FROM : ascii_ieq(n, "CSeq", 4) ? H_CSEQ : H_OTHER;
    case 5: return ascii_ieq(n, "Route", 5) ? H_ROUTE : H_OTHER;
    case 7: return ascii_ieq(n, "Call-ID", 7) ? H_CALL_ID : H_OTHER;
    case 12: return ascii_ieq(n, "Max-Forwards", 12) ? H_MAX_FORWARDS : H_OTHER;
    case 13: return ascii_ieq(n, "Proxy-Require", 13) ? H_PROXY_REQUIRE : H_OTHER;
    case 19: return ascii_ieq(n, "Proxy-Authorization", 19) ? H_PROXY_AUTHORIZATION : H_OTHER;
    default: return H_OTHER;
    }
}

static unsigned long fnv(unsigned long h, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ul;
    return (h ^ 0xff) * 1099511628211ul;
}

unsigned long sv_loop_hash(const char *msg, size_t len) {
    unsigned long h = 1469598103934665603ul;
    size_t first = 0;
    while (first < len && msg[first] != '\n' && msg[first] != '\r') first++;
    h = fnv(h, msg, first);
    size_t at = first_header(msg, len);
    hline l;
    while (next_line(msg, len, &at, &l)) {
        int id = header_id(&l);
        if (id != H_OTHER && id != H_VIA && id != H_MAX_FORWARDS) {
            h = fnv(h, l.name, 1);
            h = fnv(h, l.value, l.value_len);
        }
    }
    return h ? h : 1;
}

unsigned long sv_loop_hash_of(const sv_result *sv, const char *msg, size_t len) {
    if (sv->loop_n < 0) return sv_loop_hash(msg, len);
    unsigned long h = 1469598103934665603ul;
    size_t first = 0;
    while (first < len && msg[first] != '\n' && msg[first] != '\r') first++;
    h = fnv(h, msg, first);
    for (int k = 0; k < sv->loop_n; k++) {
        h = fnv(h, sv->loop_name[k], 1);
        h = fnv(h, sv->loop_value[k].p, sv->loop_value[k].n);
    }
    return h ? h : 1;
}

static sv_reason fail(sv_result *out, sv_reason r, unsigned status, const char *phrase) {
    out->reason = r;
    out->status = status;
    out->phrase = phrase;
    return r;
}

/* The Request-URI: `scheme:rest` (RFC 3261 §25.1 absoluteURI / SIP-URI), without blanks,
 * controls or the characters that end a name-addr; a sip/sips URI needs a host. 0: garbage,
 * 1: a scheme this edge understands, 2: a well-formed URI of another scheme. */
static int request_uri(const char *u, size_t n) {
    size_t k = 0;
    if (n == 0 || !((u[0] | 0x20) >= 'a' && (u[0] | 0x20) <= 'z')) return 0;
    while (k < n && (((u[k] | 0x20) >= 'a' && (u[k] | 0x20) <= 'z') || (u[k] >= '0' && u[k] <= '9') || u[k] == '+' ||
                     u[k] == '-' || u[k] == '.'))
        k++;
    if (k == n || u[k] != ':' || k + 1 == n) return 0;
    /* Bytes no URI holds: controls, blank, DEL, '<', '>', '"'; those below 0x40 as one mask. */
    const unsigned long long low = 0x1ffffffffull | 1ull << '"' | 1ull << '<' | 1ull << '>';
    for (size_t j = k + 1; j < n; j++) {
        unsigned char c = (unsigned char)u[j];
        if ((c < 0x40 && (low >> c & 1)) || c == 0x7f) return 0;
    }
    size_t scheme = k;
    const char *rest = u + k + 1;
    size_t rest_len = n - k - 1;
    if ((scheme == 3 && ascii_ieq(u, "sip", 3)) || (scheme == 4 && ascii_ieq(u, "sips", 4))) {
        const char *at = memchr(rest, '@', rest_len);
        const char *host = at ? at + 1 : rest;
        size_t host_len = rest_len - (size_t)(host - rest);
        if (host_len == 0 || host[0] == ';' || host[0] == ':' || host[0] == '?') return 0;
        return 1;
    }
    /* tel (RFC 3966) numbers and urn (RFC 5031 service URNs: emergency calls) are classified too */
    if ((scheme == 3 && ascii_ieq(u, "tel", 3)) || (scheme == 3 && ascii_ieq(u, "urn", 3))) return 1;
    return 2;
}

/* Whether a Via entry's sent-by is `own` (`own_len` bytes; 0: none). */
static int sent_by_is(const via_entry_t *e, const char *own, size_t own_len) {
    return own_len && e->sent_by_len == own_len && ascii_ieq(e->sent_by, own, own_len);
}

sv_reason sv_check(const char *msg, size_t len, const char *own_sent_by, const char *own_sent_by2, sv_result *out) {
    out->reason = SV_OK; /* not a memset: `extra` is 512 bytes and this runs on every request */
    out->status = 0;
    out->phrase = NULL;
    out->extra[0] = 0;
    out->max_forwards = -1;
    out->call_id = out->cseq = out->from = out->to = out->branch = (sv_span){NULL, 0};
    int is_ack = len >= 4 && strncmp(msg, "ACK ", 4) == 0;
    /* The start line: Method SP Request-URI SP SIP-Version (RFC 3261 §7.1). */
    const char *first_nl = memchr(msg, '\n', len);
    size_t first = first_nl ? (size_t)(first_nl - msg) : len;
    size_t line_len = first > 0 && msg[first - 1] == '\r' ? first - 1 : first;
    size_t m = 0;
    while (m < line_len && sip_token_char(msg[m])) m++;
    const char *sp1 = m < line_len && msg[m] == ' ' ? msg + m : NULL;
    const char *uri = sp1 ? sp1 + 1 : NULL;
    const char *sp2 = uri ? memchr(uri, ' ', (size_t)(msg + line_len - uri)) : NULL;
    int line_ok = m > 0 && sp2 && (size_t)(msg + line_len - (sp2 + 1)) == 7 && memcmp(sp2 + 1, "SIP/2.0", 7) == 0;
    int uri_kind = line_ok ? request_uri(uri, (size_t)(sp2 - uri)) : 0;
    /* What the loop hash covers (sv_loop_hash), noted on this walk: a forwarded request's branch
     * needs it (sv_loop_hash_of), and a second walk cost a tenth of forwarding one; hashing it
     * here would cost a rejected request as much for nothing. */
    out->loop_n = 0;
    /* The header fields a proxy works with. */
    size_t at = first + 1;
    hline h;
    int vias = 0, via_ok = 0, call_id = 0, cseq_ok = 0, cseq_seen = 0, from = 0, to = 0, mf_bad = 0, looped = 0;
    const char *proxy_require = NULL;
    size_t proxy_require_len = 0;
    unsigned long loop = 0;
    size_t own_len = own_sent_by ? strlen(own_sent_by) : 0, own2_len = own_sent_by2 ? strlen(own_sent_by2) : 0;
    while (next_line(msg, len, &at, &h)) {
        int id = header_id(&h);
        if (id == H_OTHER) continue;
        if (id != H_VIA && id != H_MAX_FORWARDS && out->loop_n >= 0) {
            if (out->loop_n < SV_LOOP_PARTS) {
                out->loop_name[out->loop_n] = h.name;
                out->loop_value[out->loop_n++] = (sv_span){h.value, h.value_len};
            } else {
                out->loop_n = -1; /* more than it holds: sv_loop_hash_of walks the message again */
            }
        }
        if (id == H_VIA) {
            /* Every entry of every Via line: the top one must parse (the response is routed by
             * it), and one that names this edge's sent-by with its branch is a candidate loop. */
            const char *v = h.value;
            size_t rest = h.value_len;
            for (;;) {
                size_t c = via_comma(v, rest);
                via_entry_t e;
                int ok = via_parse(v, c, &e);
                if (vias++ == 0) {
                    via_ok = ok;
                    if (ok) out->branch = (sv_span){e.branch, e.branch_len};
                }
                const char *br = e.branch;
                size_t brl = e.branch_len;
                if (ok && (sent_by_is(&e, own_sent_by, own_len) || sent_by_is(&e, own_sent_by2, own2_len)) && br &&
                    brl > 11 && strncmp(br, "z9hG4bK-lc", 10) == 0) {
                    const char *dot = memchr(br, '.', brl);
                    if (dot) {
                        if (!loop) loop = sv_loop_hash(msg, len);
                        char mine[24];
                        int ml = snprintf(mine, sizeof mine, "%lx", loop);
                        if ((size_t)ml == brl - (size_t)(dot + 1 - br) && memcmp(dot + 1, mine, (size_t)ml) == 0) looped = 1;
                    }
                }
                if (c >= rest) break;
                v += c + 1;
                rest -= c + 1;
            }
        } else if (id == H_CALL_ID) {
            call_id = h.value_len > 0;
            if (!out->call_id.p) out->call_id = (sv_span){h.value, h.value_len};
        } else if (id == H_CSEQ) {
            /* CSeq = 1*DIGIT LWS Method, the method that of the request line (RFC 3261 §20.16) */
            cseq_seen = 1;
            if (!out->cseq.p) out->cseq = (sv_span){h.value, h.value_len};
            size_t k = 0;
            while (k < h.value_len && h.value[k] >= '0' && h.value[k] <= '9') k++;
            size_t digits = k;
            while (k < h.value_len && (h.value[k] == ' ' || h.value[k] == '\t')) k++;
            cseq_ok = digits > 0 && digits <= 10 && k > digits && h.value_len - k == m && memcmp(h.value + k, msg, m) == 0;
        } else if (id == H_FROM) {
            from = h.value_len > 0;
            if (!out->from.p) out->from = (sv_span){h.value, h.value_len};
        } else if (id == H_TO) {
            to = h.value_len > 0;
            if (!out->to.p) out->to = (sv_span){h.value, h.value_len};
        } else if (id == H_MAX_FORWARDS) {
            size_t k = 0;
            long v = 0;
            while (k < h.value_len && h.value[k] >= '0' && h.value[k] <= '9' && v < 100000) v = v * 10 + (h.value[k++] - '0');
            if (k == 0 || k != h.value_len) mf_bad = 1;
            else out->max_forwards = (int)(v > 255 ? 255 : v);
        } else if (id == H_PROXY_REQUIRE && h.value_len > 0) {
            proxy_require = h.value;
            proxy_require_len = h.value_len;
        }
    }
    /* RFC 3261 §18.2.2: the response goes by the top Via. Without a usable one there is no
     * way to answer. */
    if (vias == 0 || !via_ok) return fail(out, SV_NO_VIA, 0, NULL);
    sv_reason r = SV_OK;
    if (!line_ok || uri_kind == 0) r = fail(out, SV_BAD_SYNTAX, 400, "Bad Request-Line");
    else if (!call_id) r = fail(out, SV_BAD_SYNTAX, 400, "Missing Call-ID");
    else if (!cseq_seen) r = fail(out, SV_BAD_SYNTAX, 400, "Missing CSeq");
    else if (!cseq_ok) r = fail(out, SV_BAD_SYNTAX, 400, "Bad CSeq");
    else if (!from) r = fail(out, SV_BAD_SYNTAX, 400, "Missing From");
    else if (!to) r = fail(out, SV_BAD_SYNTAX, 400, "Missing To");
    else if (mf_bad) r = fail(out, SV_BAD_SYNTAX, 400, "Bad Max-Forwards");
    else if (uri_kind == 2) r = fail(out, SV_BAD_SCHEME, 416, "Unsupported URI Scheme");
    else if (out->max_forwards == 0 && m == 7 && memcmp(msg, "OPTIONS", 7) == 0) {
        r = fail(out, SV_OPTIONS_AT_0, 200, "OK");
        /* RFC 3261 §11.2: Allow, Accept, … SHOULD be present. The edge forwards every method
         * and takes no body itself. */
        snprintf(out->extra, sizeof out->extra,
                 "Allow: INVITE, ACK, CANCEL, BYE, OPTIONS, REGISTER, SUBSCRIBE, NOTIFY, MESSAGE, INFO, UPDATE, PRACK, REFER, "
                 "PUBLISH\r\nAccept: application/sdp\r\n");
    } else if (out->max_forwards == 0) r = fail(out, SV_TOO_MANY_HOPS, 483, "Too Many Hops");
    else if (looped) r = fail(out, SV_LOOP, 482, "Loop Detected");
    else if (proxy_require) {
        /* The edge implements no extension a proxy would be asked for: every tag is unknown. */
        r = fail(out, SV_BAD_EXTENSION, 420, "Bad Extension");
        int n = (int)(proxy_require_len < 400 ? proxy_require_len : 400);
        snprintf(out->extra, sizeof out->extra, "Unsupported: %.*s\r\n", n, proxy_require);
    }
    if (r != SV_OK && is_ack) return fail(out, SV_UNANSWERED, 0, NULL); /* RFC 3261 §17.2.3: no response to an ACK */
    return r;
}
