/* sipvia.h: the one reader of Via header values in the edge's C (RFC 3261 §20.42, §25.1): the
 * entries of a value (split at commas outside quotes) and one entry's parts (protocol and
 * transport, sent-by, the branch and received parameters). Request validation (validate.c)
 * and the edge's routing (via.c) both read Via through it. libloadctl's Via reader (Rust) is
 * not on the C ABI. No allocation; pointers point into the caller's text. */
#ifndef LOADCTL_EDGE_SIPVIA_H
#define LOADCTL_EDGE_SIPVIA_H

#include <stddef.h>
#include <string.h>
#include <strings.h>

/* Whether the `n` bytes at `a` spell `name` ignoring ASCII case: inline rather than
 * strncasecmp, whose call and locale set-up cost more than these short names' compare, and
 * this runs for header lines of every message. Only letters fold: '\r' | 0x20 is '-'. */
static inline int ascii_ieq(const char *a, const char *name, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char x = (unsigned char)a[i], y = (unsigned char)name[i];
        if (x != y && !((x | 0x20) == (y | 0x20) && (y | 0x20) >= 'a' && (y | 0x20) <= 'z')) return 0;
    }
    return 1;
}

/* RFC 3261 §25.1 token characters. */
static inline int sip_token_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '!' ||
           c == '%' || c == '*' || c == '_' || c == '+' || c == '`' || c == '\'' || c == '~';
}

/* The offset of the first comma separating Via entries in a header value (len when none): a
 * comma inside a quoted string (a quoted oc-algo="loss,rate", say) separates nothing. */
static inline size_t via_comma(const char *v, size_t len) {
    const char *comma = memchr(v, ',', len);
    const char *quote = memchr(v, '"', comma ? (size_t)(comma - v) : len);
    if (!quote) return comma ? (size_t)(comma - v) : len; /* the common case: no quote before it */
    int quoted = 0;
    for (size_t k = 0; k < len; k++) {
        if (v[k] == '"') quoted = !quoted;
        else if (v[k] == ',' && !quoted) return k;
    }
    return len;
}

/* One Via entry's parts; a part that is absent has length 0 (port 0 when none is given). */
typedef struct {
    const char *transport, *sent_by, *host, *branch, *received;
    size_t transport_len, sent_by_len, host_len, branch_len, received_len;
    unsigned port;
} via_entry_t;

/* The value of parameter `name` (with its '=', e.g. "branch=") among an entry's parameters,
 * which start at `k`; the value ends at ';', a blank or the end. */
static inline void via_param(const char *v, size_t len, size_t k, const char *name, const char **value, size_t *value_len) {
    size_t nl = strlen(name);
    *value = NULL;
    *value_len = 0;
    for (size_t j = k; j + 1 + nl <= len; j++) {
        if (v[j] == ';' && ascii_ieq(v + j + 1, name, nl)) {
            size_t b = j + 1 + nl, n = 0;
            while (b + n < len && v[b + n] != ';' && v[b + n] != ' ' && v[b + n] != '\t') n++;
            *value = v + b;
            *value_len = n;
            return;
        }
    }
}

/* Parses one Via entry `SIP/2.0/TRANSPORT sent-by[;params]` (up to its comma, see via_comma)
 * into *out: 1 when it is one, 0 when not (*out is then undefined). sent-by is a host (a name,
 * IPv4, or [IPv6]) with an optional port of 1..65535; only parameters may follow it. */
static inline int via_parse(const char *v, size_t len, via_entry_t *out) {
    memset(out, 0, sizeof *out);
    size_t k = 0;
    while (k < len && (v[k] == ' ' || v[k] == '\t')) k++;
    if (len - k < 8 || !ascii_ieq(v + k, "SIP", 3)) return 0;
    k += 3;
    while (k < len && v[k] == ' ') k++;
    if (k >= len || v[k] != '/') return 0;
    k++;
    while (k < len && v[k] == ' ') k++;
    if (len - k < 3 || strncmp(v + k, "2.0", 3) != 0) return 0;
    k += 3;
    while (k < len && v[k] == ' ') k++;
    if (k >= len || v[k] != '/') return 0;
    k++;
    while (k < len && v[k] == ' ') k++;
    size_t t = k;
    while (k < len && sip_token_char(v[k])) k++;
    if (k == t || k >= len || (v[k] != ' ' && v[k] != '\t')) return 0;
    out->transport = v + t;
    out->transport_len = k - t;
    while (k < len && (v[k] == ' ' || v[k] == '\t')) k++;
    size_t s = k;
    if (k < len && v[k] == '[') {
        while (k < len && v[k] != ']') {
            char c = v[k];
            if (!((c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') || c == ':' || c == '.' || c == '[')) return 0;
            k++;
        }
        if (k >= len) return 0;
        k++;
    } else {
        while (k < len && v[k] != ':' && v[k] != ';' && v[k] != ' ' && v[k] != '\t') {
            if (!sip_token_char(v[k])) return 0;
            k++;
        }
    }
    if (k == s) return 0;
    out->host = v + s;
    out->host_len = k - s;
    if (k < len && v[k] == ':') {
        k++;
        unsigned long port = 0;
        size_t d = k;
        while (k < len && v[k] >= '0' && v[k] <= '9' && k - d < 6) port = port * 10 + (unsigned long)(v[k++] - '0');
        if (k == d || port == 0 || port > 65535) return 0;
        out->port = (unsigned)port;
    }
    out->sent_by = v + s;
    out->sent_by_len = k - s;
    via_param(v, len, k, "branch=", &out->branch, &out->branch_len);
    via_param(v, len, k, "received=", &out->received, &out->received_len);
    while (k < len && (v[k] == ' ' || v[k] == '\t')) k++;
    return k == len || v[k] == ';';
}

#endif
