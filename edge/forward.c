/* forward.c: the messages the edge sends, over the transport a peer_t names (`deliver` is the
 * one place that looks at it): its own answers, built from the request (503 and 302 of rules,
 * the 4xx of validation, 503 for overload control); requests forwarded statelessly to the next
 * hop with this proxy's Via on top (RFC 3261 §16.11: the branch is derived from the incoming
 * one, so retransmissions get the same branch); and responses, which lose that Via and go to
 * the address in the next Via (received/rport when present) or to the inbound TCP connection
 * named in ours. */
#define _GNU_SOURCE /* struct mmsghdr (edge.h), clock_gettime */

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "edge.h"
#include "forward.h"
#include "oc.h"
#include "tcp.h"
#include "udp.h"
#include "via.h"
#include "window.h"

/* Sends a message to a peer: a datagram, or onto its connection. -1 when that cannot be done
 * (the connection has gone). */
int deliver(worker_t *w, const char *msg, size_t len, const peer_t *to) {
    if (!to->tcp) {
        send_to(w, msg, len, &to->addr);
        return 0;
    }
    if (!w->conns) return -1; /* a TCP peer seen by the UDP thread: not ours to reach */
    return conn_queue(w, to->slot, to->gen, msg, len);
}

/* Builds the answer to a request in w->reply_buf: `status` and `reason` (302 with the
 * decision's targets as Contacts), copying Via, From, To (with a tag added when it has none),
 * Call-ID and CSeq, then the header lines `extra` (NULL: none). Returns its length. */
size_t build_reply(worker_t *w, const char *msg, size_t len, unsigned status, const char *reason, const lc_decision *d,
                          const char *extra) {
    char *out = w->reply_buf;
    const size_t cap = sizeof w->reply_buf;
    size_t at = 0;
    /* "SIP/2.0 NNN Reason": written by hand, as snprintf cost a tenth of a rejection. */
    char code[4] = {(char)('0' + status / 100 % 10), (char)('0' + status / 10 % 10), (char)('0' + status % 10), ' '};
    put(out, &at, cap, "SIP/2.0 ", 8);
    put(out, &at, cap, code, 4);
    put(out, &at, cap, reason, strlen(reason));
    put(out, &at, cap, "\r\n", 2);
    size_t i = first_header(msg, len);
    const char *h;
    size_t line_len;
    while (next_header(msg, len, &i, &h, &line_len)) {
        /* One look at the first letter, then one name: most lines are none of these. */
        int copy = 0, to = 0;
        switch (h[0] | 0x20) {
        case 'v': copy = header_is(h, line_len, "Via", "v"); break;
        case 'f': copy = header_is(h, line_len, "From", "f"); break;
        case 'i': copy = header_is(h, line_len, "Call-ID", "i"); break;
        case 'c': copy = header_is(h, line_len, "Call-ID", NULL) || header_is(h, line_len, "CSeq", NULL); break;
        case 't': copy = to = header_is(h, line_len, "To", "t"); break;
        default: break;
        }
        if (!copy) continue;
        put(out, &at, cap, h, line_len);
        if (to) {
            const char *colon = memchr(h, ':', line_len);
            size_t v = colon ? (size_t)(colon - h) + 1 : line_len, tl = 0;
            if (!header_tag(h + v, line_len - v, &tl)) put(out, &at, cap, ";tag=" EDGE_TAG, 5 + strlen(EDGE_TAG));
        }
        put(out, &at, cap, "\r\n", 2);
    }
    for (size_t t = 0; d && d->verdict == LC_VERDICT_REDIRECT && t < d->target_count; t++) {
        put(out, &at, cap, "Contact: <", 10);
        put(out, &at, cap, (const char *)d->targets[t].ptr, d->targets[t].len);
        put(out, &at, cap, ">\r\n", 3);
    }
    if (extra) put(out, &at, cap, extra, strlen(extra));
    put(out, &at, cap, "Content-Length: 0\r\n\r\n", 21);
    return at;
}

void reply_with(worker_t *w, const char *msg, size_t len, const peer_t *from, unsigned status, const char *reason,
                       const lc_decision *d, const char *extra) {
    size_t at = build_reply(w, msg, len, status, reason, d, extra);
    if (deliver(w, w->reply_buf, at, from) == 0) BUMP(w->c.answered);
}

/* A 503 carries the --retry-after of the house (none by default: RFC 3261 §21.5.4, a client
 * "SHOULD NOT forward any other requests to that server for the duration specified in the
 * Retry-After header field", so one rule over its limit would stop all traffic to the edge). */
void reply(worker_t *w, const char *msg, size_t len, const peer_t *from, unsigned status, const char *reason,
                  const lc_decision *d) {
    reply_with(w, msg, len, from, status, reason, d, status == 503 ? w->e->retry_hdr : NULL);
}

/* RFC 7339 §5.10 / §5.10.2: a request shed for overload control is answered 503 without
 * Retry-After; so is one refused because no notifier policy has arrived (the edge, not the
 * next hop, lacks something). */
void reply_overload(worker_t *w, const char *msg, size_t len, const peer_t *from) {
    reply_with(w, msg, len, from, 503, "Service Unavailable", NULL, NULL);
}

void answer(worker_t *w, const char *msg, size_t len, const peer_t *from, const lc_decision *d) {
    reply(w, msg, len, from, d->status, d->status == 302 ? "Moved Temporarily" : "Service Unavailable", d);
}

/* Forwards a request with this proxy's Via on top, received= on the sender's Via (and the
 * source port in its rport when it asks, RFC 3581), and Max-Forwards decremented, over the
 * transport it came on. With overload control the sender's oc parameters stay here (RFC 7339
 * §5.6). Over TCP the Via names the inbound connection (lc-conn=SLOT.GEN) for the response's
 * way back. */
void forward_request(worker_t *w, const char *msg, size_t len, const peer_t *from, unsigned long loop) {
    char *out = w->fwd_buf;
    const size_t cap = sizeof w->fwd_buf;
    size_t at = 0;
    size_t first = first_header(msg, len);
    put(out, &at, cap, msg, first);
    size_t vl = 0;
    size_t v = find_header(msg, len, "Via", "v", &vl);
    /* The branch in two parts (RFC 3261 §16.6 step 8): the transaction's, from the incoming top
     * Via and request line, and after the dot the loop-detection hash that sv_check compares
     * when the request comes back (validate.h). */
    put(out, &at, cap, "Via: SIP/2.0/", 13);
    put_str(out, &at, cap, !from->tcp ? "UDP" : from->tls ? "TLS" : "TCP");
    put(out, &at, cap, " ", 1);
    put_str(out, &at, cap, from->tls ? w->e->tls_via_host : w->e->via_host);
    put(out, &at, cap, ";branch=z9hG4bK-lc", 18);
    put_num(out, &at, cap, hash_bytes(msg + v, vl, msg, first), 16);
    put(out, &at, cap, ".", 1);
    put_num(out, &at, cap, loop, 16);
    if (from->tcp) {
        put_str(out, &at, cap, CONN_PARAM);
        put_num(out, &at, cap, from->slot, 10);
        put(out, &at, cap, ".", 1);
        put_num(out, &at, cap, (unsigned)from->gen, 10);
    }
    put_str(out, &at, cap, w->e->oc_params);
    put(out, &at, cap, "\r\n", 2);
    size_t i = first;
    int via_done = 0, mf_done = 0;
    const char *h;
    size_t line_len;
    while (next_header(msg, len, &i, &h, &line_len)) {
        if (!via_done && header_is(h, line_len, "Via", "v")) {
            via_done = 1;
            const char *colon = memchr(h, ':', line_len);
            size_t vs = colon ? (size_t)(colon - h) + 1 : line_len;
            while (vs < line_len && (h[vs] == ' ' || h[vs] == '\t')) vs++;
            lc_str sv = {(const uint8_t *)h + vs, line_len - vs};
            if (w->e->oc_srv) sv = oc_stripped(w, h + vs, line_len - vs, LC_OC_STRIP_REQUEST);
            put(out, &at, cap, "Via: ", 5);
            put_rport(out, &at, cap, (const char *)sv.ptr, sv.len, from);
            put(out, &at, cap, ";received=", 10);
            put_ipv4(out, &at, cap, &from->addr.sin_addr);
            put(out, &at, cap, "\r\n", 2);
        } else if (header_is(h, line_len, "Max-Forwards", NULL)) {
            mf_done = 1;
            const char *colon = memchr(h, ':', line_len);
            int mf = colon ? atoi(colon + 1) : 70;
            put(out, &at, cap, "Max-Forwards: ", 14);
            put_num(out, &at, cap, (unsigned long)(mf > 0 ? mf - 1 : 0), 10);
            put(out, &at, cap, "\r\n", 2);
        } else {
            put(out, &at, cap, h, (size_t)(msg + i - h)); /* the line as it came, with its line end */
        }
    }
    if (i < len) {
        /* RFC 3261 §16.6 step 3: "If the copy does not contain a Max-Forwards header field,
         * the proxy MUST add one with a field value, which SHOULD be 70." */
        if (!mf_done) put(out, &at, cap, "Max-Forwards: 70\r\n", 18);
        put(out, &at, cap, msg + i, len - i); /* the empty line and the body */
    }
    if (!from->tcp) {
        send_to(w, out, at, &w->e->next_hop);
        BUMP(w->c.forwarded);
        return;
    }
    int hop = hop_slot(w, from->tls);
    if (hop >= 0 && conn_queue(w, (unsigned)hop, w->conns[hop].gen, out, at) == 0) {
        BUMP(w->c.forwarded);
        return;
    }
    /* RFC 3261 §16.9: a transport error forwarding a request counts as a 503 from the next
     * hop. A stateless proxy answers it on the spot (an ACK gets nothing). */
    BUMP(w->c.forward_failures);
    if (w->e->oc) lc_oc_client_on_timeout(w->e->oc, oc_hop_of(w->e, from->tls), now_ns()); /* RFC 7339 §5.9 */
    if (!(len >= 4 && strncmp(msg, "ACK ", 4) == 0)) reply(w, msg, len, from, 503, "Service Unavailable", NULL);
}

int from_next_hop(const worker_t *w, const peer_t *from) {
    if (from->tcp) return w->conns && from->slot < w->nconns && w->conns[from->slot].outbound &&
                          w->conns[from->slot].gen == from->gen;
    return from->addr.sin_addr.s_addr == w->e->next_hop.sin_addr.s_addr && from->addr.sin_port == w->e->next_hop.sin_port;
}

/* Whether the inbound connection `to` names is a TLS one (0 when it has gone). */
static int names_tls(const worker_t *w, const peer_t *to) {
    return w->conns && to->slot < w->nconns && w->conns[to->slot].gen == to->gen && w->conns[to->slot].ssl;
}

/* Sends a response back: drops the top Via entry (ours; several entries may share one header
 * line, as SIPp writes them) and goes to the inbound connection named in it, or over UDP to the
 * address of the next entry. Only what a next hop answers counts as its answer: the oc values
 * in our entry (its feedback), the end of the transaction's overload-control wait and of its
 * window slot; and only a next hop's connection of the same kind (TCP, TLS) may send a response
 * to an inbound connection (a guessed lc-conn from anyone else, or from the plain next hop into
 * a TLS caller's connection, is dropped and counted). The next entry gets this edge's values. */
void forward_response(worker_t *w, const char *msg, size_t len, const peer_t *from) {
    int local = from == NULL, hop = !local && from_next_hop(w, from);
    char *out = w->fwd_buf;
    const size_t cap = sizeof w->fwd_buf;
    size_t at = 0;
    size_t i = first_header(msg, len);
    put(out, &at, cap, msg, i); /* the status line as it came */
    int dropped = 0, next_done = 0;
    size_t oc_at = 0, oc_len = 0;
    char oc_key[32] = "";
    peer_t to;
    memset(&to, 0, sizeof to);
    int have_to = 0;
    const char *h;
    size_t line_len;
    while (next_header(msg, len, &i, &h, &line_len)) {
        if (header_is(h, line_len, "Via", "v")) {
            const char *colon = memchr(h, ':', line_len);
            size_t v = colon ? (size_t)(colon - h) + 1 : line_len;
            while (v < line_len && (h[v] == ' ' || h[v] == '\t')) v++;
            if (!dropped) {
                dropped = 1; /* ours: the first entry */
                size_t comma = via_comma(h + v, line_len - v);
                have_to = via_connection(h + v, comma, &to);
                if (have_to && !local && (!hop || !from->tcp || (names_tls(w, &to) && !from->tls))) {
                    BUMP(w->c.responses_refused);
                    return;
                }
                if (w->e->oc && hop) { /* the next hop's answer, not one the edge made */
                    lc_oc_applied applied;
                    lc_str ours = {(const uint8_t *)h + v, comma};
                    if (lc_oc_client_on_response(w->e->oc, oc_hop_of(w->e, from->tls), now_ns(), ours, &applied) != LC_RESULT_OK) {
                        BUMP(w->c.oc_bad_feedback);
                    }
                    oc_answered(w, transaction_hash(msg, len));
                }
                if (comma == line_len - v) continue;
                v += comma + 1;
                while (v < line_len && (h[v] == ' ' || h[v] == '\t')) v++;
                if (!have_to) have_to = via_destination(h + v, via_comma(h + v, line_len - v), &to.addr);
                oc_len = put_upstream_via(w, out, &at, cap, h + v, line_len - v, &to, have_to, &oc_at, oc_key);
                next_done = 1;
                continue;
            }
            if (!have_to) have_to = via_destination(h + v, via_comma(h + v, line_len - v), &to.addr);
            if (!next_done) {
                next_done = 1;
                oc_len = put_upstream_via(w, out, &at, cap, h + v, line_len - v, &to, have_to, &oc_at, oc_key);
                continue;
            }
            if (w->e->oc_srv) { /* RFC 7339 §5.4: every Via below this edge's */
                lc_str sv = oc_stripped(w, h + v, line_len - v, LC_OC_STRIP_RESPONSE);
                put(out, &at, cap, "Via: ", 5);
                put(out, &at, cap, (const char *)sv.ptr, sv.len);
                put(out, &at, cap, "\r\n", 2);
                continue;
            }
        }
        put(out, &at, cap, h, (size_t)(msg + i - h));
    }
    if (i < len) put(out, &at, cap, msg + i, len - i); /* the empty line and the body */
    /* A final response ends the transaction: release its window slot. */
    if ((local || hop) && len > 12 && msg[7] == ' ' && msg[8] >= '2') release(w, transaction_hash(msg, len));
    if (have_to && deliver(w, out, at, &to) != 0) BUMP(w->c.tcp_responses_orphaned); /* its connection has gone */
    else if (have_to && oc_len && w->e->oc_log) log_oc_sent(w->e->oc_log, oc_key, msg, len, status_code(msg, len), out + oc_at, oc_len);
}
