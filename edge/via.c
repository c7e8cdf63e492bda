/* via.c: the edge's reading of Via header values: the entries of a value (split at commas
 * outside quotes), the top entry of a message, the branch of an entry, where a response goes
 * (sent-by, or received=), and the inbound TCP connection named in this edge's own entry
 * (lc-conn), all through sipvia.h's reader. */
#define _GNU_SOURCE /* struct mmsghdr (edge.h), clock_gettime */

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "edge.h"
#include "via.h"

/* Where a response goes: the sent-by of a UDP Via entry, or its received= address (RFC 3261
 * §18.2.2), at the port of its rport= when it has one (RFC 3581 §4: "the response MUST be sent
 * to the IP address listed in the "received" parameter, and the port in the "rport"
 * parameter"). `entry` is one Via value, up to its comma. */
int via_destination(const char *entry, size_t len, struct sockaddr_in *to) {
    via_entry_t e;
    if (!via_parse(entry, len, &e) || e.transport_len != 3 || strncasecmp(e.transport, "UDP", 3) != 0) return 0;
    const char *rp;
    size_t rpl;
    via_param(entry, len, 0, "rport=", &rp, &rpl);
    unsigned long rport = 0;
    for (size_t k = 0; k < rpl && k < 6 && rp[k] >= '0' && rp[k] <= '9'; k++) rport = rport * 10 + (unsigned long)(rp[k] - '0');
    if (rport > 0 && rport <= 65535) e.port = (unsigned)rport;
    const char *h = e.received_len ? e.received : e.host;
    size_t hl = e.received_len ? e.received_len : e.host_len;
    char host[64];
    if (hl >= sizeof host) return 0;
    memcpy(host, h, hl);
    host[hl] = 0;
    memset(to, 0, sizeof *to);
    to->sin_family = AF_INET;
    to->sin_port = htons((uint16_t)(e.port ? e.port : 5060));
    return inet_pton(AF_INET, host, &to->sin_addr) == 1;
}

/* Appends the Via value `value` (the top Via of a request from `from`) with the source port in
 * a valueless rport of its first entry (RFC 3581 §4: "the server MUST insert an "rport"
 * parameter value ... containing the source port of the request"), for a UDP sender. */
void put_rport(char *out, size_t *at, size_t cap, const char *value, size_t len, const peer_t *from) {
    size_t end = via_comma(value, len);
    for (size_t k = 0; !from->tcp && k + 6 <= end; k++) {
        if (value[k] != ';' || strncasecmp(value + k + 1, "rport", 5) != 0) continue;
        size_t a = k + 6;
        while (a < end && (value[a] == ' ' || value[a] == '\t')) a++;
        if (a < end && value[a] != ';') continue; /* rport=… already, or another name */
        char port[16];
        int n = snprintf(port, sizeof port, "=%u", (unsigned)ntohs(from->addr.sin_port));
        put(out, at, cap, value, k + 6);
        put(out, at, cap, port, (size_t)n);
        put(out, at, cap, value + k + 6, len - (k + 6));
        return;
    }
    put(out, at, cap, value, len);
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
 * length in *n (0 when there is none or the entry is no Via entry). */
size_t via_branch(const char *v, size_t len, size_t *n) {
    via_entry_t e;
    *n = 0;
    if (!via_parse(v, len, &e) || !e.branch) return 0;
    *n = e.branch_len;
    return (size_t)(e.branch - v);
}

/* The top Via's branch of a message, copied into `out` (empty when none or too long). */
void top_branch(const char *msg, size_t len, char *out, size_t cap) {
    lc_str via = top_via(msg, len);
    size_t n = 0;
    size_t b = via.ptr ? via_branch((const char *)via.ptr, via.len, &n) : 0;
    out[0] = 0;
    if (n > 0 && n < cap) {
        memcpy(out, via.ptr + b, n);
        out[n] = 0;
    }
}
