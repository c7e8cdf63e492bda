/* via.c: the edge's reading of Via header values: the entries of a value (split at commas
 * outside quotes), the top entry of a message, the branch of an entry, where a response goes
 * (sent-by, or received=), and the inbound TCP connection named in this edge's own entry
 * (lc-conn). The edge reads Via itself because libloadctl's Via reader (Rust) is not exposed
 * over the C ABI. */
#define _GNU_SOURCE /* struct mmsghdr (edge.h), clock_gettime */

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "edge.h"
#include "via.h"

/* Where a response goes: the sent-by of a Via entry, or its received= address (RFC 3261
 * §18.2.2). `entry` is one Via value, up to its comma. */
int via_destination(const char *entry, size_t len, struct sockaddr_in *to) {
    if (len == 0) return 0;
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

/* The inbound connection named in this proxy's Via entry (lc-conn=SLOT.GEN): 1 when there. */
int via_connection(const char *entry, size_t len, peer_t *to) {
    size_t pl = strlen(CONN_PARAM);
    for (size_t k = 0; k + pl < len; k++) {
        if (memcmp(entry + k, CONN_PARAM, pl) != 0) continue;
        unsigned long slot = 0, gen = 0;
        size_t j = k + pl, d = 0;
        while (j < len && entry[j] >= '0' && entry[j] <= '9' && d++ < 9) slot = slot * 10 + (unsigned long)(entry[j++] - '0');
        if (d == 0 || j >= len || entry[j] != '.') return 0;
        j++;
        d = 0;
        while (j < len && entry[j] >= '0' && entry[j] <= '9' && d++ < 10) gen = gen * 10 + (unsigned long)(entry[j++] - '0');
        if (d == 0 || gen > 0xfffffffful) return 0;
        memset(to, 0, sizeof *to);
        to->tcp = 1;
        to->slot = (unsigned)slot;
        to->gen = (uint32_t)gen;
        return 1;
    }
    return 0;
}

/* The offset of the first comma separating Via entries in a header value (len when none). */
size_t via_comma(const char *v, size_t len) {
    int quoted = 0;
    for (size_t k = 0; k < len; k++) {
        if (v[k] == '"') quoted = !quoted;
        else if (v[k] == ',' && !quoted) return k;
    }
    return len;
}

/* The first entry of the top Via of a message (empty when none). */
lc_str top_via(const char *msg, size_t len) {
    size_t vl = 0;
    size_t v = find_header(msg, len, "Via", "v", &vl);
    lc_str out = {NULL, 0};
    if (v) {
        out.ptr = (const uint8_t *)msg + v;
        out.len = via_comma(msg + v, vl);
    }
    return out;
}

/* The value of the branch parameter in one Via entry (up to its comma): its offset, and its
 * length in *n (0 when there is none). */
size_t via_branch(const char *v, size_t len, size_t *n) {
    size_t b = 0, bl = 0;
    for (size_t k = 0; k + 7 <= len; k++) {
        if (strncasecmp(v + k, "branch=", 7) == 0) {
            b = k + 7;
            while (b + bl < len && v[b + bl] != ';' && v[b + bl] != ' ' && v[b + bl] != '\t') bl++;
            break;
        }
    }
    *n = bl;
    return b;
}

/* The top Via's branch of a message, copied into `out` (empty when none). */
void top_branch(const char *msg, size_t len, char *out, size_t cap) {
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
