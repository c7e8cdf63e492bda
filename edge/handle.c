/* handle.c: what the edge does with one SIP message, whatever the transport.
 *
 * A response goes back upstream (forward.c). A request is first validated (RFC 3261 §16.3,
 * validate.c: 400/416/420/482/483, or dropped when no usable Via routes an answer), shown to
 * the retransmission detector (a retransmission whose original's decision is remembered gets
 * it again, memory.c) and, with overload control, to the server side (oc.c), then classified
 * from one scan (lc_sip_scan: the detector, the overload category and lc_classify_scanned),
 * with the transport it came on and the next hop as its target
 * entity (`sip:IP:PORT` of --next-hop, where the edge forwards it), so rules with a
 * `target-sip-entity` naming the next hop apply (RFC 7200 §5.3.3); rules without one apply
 * whatever the target. Emergency requests (urn:service:sos…, RFC 5031) and requests whose
 * Resource-Priority namespace is listed (RFC 4412; default ets, wps) pass before any rule is
 * tried, unless --no-emergency-exempt / --priority-namespaces "" turn that off. A notifier's
 * redirect to a target outside its own domain and --redirect-allow is answered 503 instead
 * (RFC 7200 §7; the subscriber logs each such rule once); the --policy file is trusted. Excess
 * is answered 503 (Retry-After only with --retry-after) (or 302 with the rule's targets as
 * Contacts); what passes is put to the overload-control client (oc.c) and forwarded statelessly
 * to the next hop (forward.c), a window admission kept until its final response (window.c).
 */
#define _GNU_SOURCE /* struct mmsghdr (edge.h), clock_gettime */

#include <stdatomic.h>
#include <string.h>
#include <strings.h>

#include "dialogs.h"
#include "edge.h"
#include "forward.h"
#include "handle.h"
#include "memory.h"
#include "oc.h"
#include "subscriber.h"
#include "via.h"
#include "window.h"

/* True for an ACK to an answer this edge sent itself: its To carries the tag the edge adds. */
static int acks_our_answer(const char *msg, size_t len) {
    size_t vl = 0, tl = 0;
    size_t v = find_header(msg, len, "To", "t", &vl);
    const char *tag = v ? header_tag(msg + v, vl, &tl) : NULL;
    return tag && tl == strlen(EDGE_TAG) && ascii_ieq(tag, EDGE_TAG, tl);
}

/* One SIP message from a peer, whatever the transport. */
void handle(worker_t *w, const char *msg, size_t len, const peer_t *from) {
    if (!from->tcp && w->index < w->e->nudp && subscriber_receive(w, msg, len, &from->addr)) return;
    /* The notifier is heard on its TLS connection only (sublink.c). */
    if (from->tcp && w->e->link && len >= 7 && strncmp(msg, "NOTIFY ", 7) == 0 && is_load_control(msg, len)) {
        subscriber_refuse(w, msg, len, from);
        return;
    }
    if (is_response(msg, len)) {
        /* Only the next hop's answers set up dialogs: a response from anyone else is relayed
         * (or dropped) like any, but could otherwise plant a dialog for forged requests. */
        if (from_next_hop(w, from)) dialogs_answered(w->e->dialogs, msg, len, now_ns());
        forward_response(w, msg, len, from);
        return;
    }
    int is_ack = len >= 4 && strncmp(msg, "ACK ", 4) == 0;
    if (is_ack && acks_our_answer(msg, len)) {
        BUMP(w->c.absorbed);
        return; /* the ACK to our own 503 / 302 ends here (RFC 3261 §17.2.1) */
    }
    /* RFC 3261 §16.3: "Before an element can proxy a request, it MUST verify the message's
     * validity"; a check that fails is answered as a UAS would (400, 416, 420, 482, 483, or 200
     * to an OPTIONS with Max-Forwards 0), unless no response can be routed (no usable Via) or
     * the request is an ACK: then it is dropped. Counted by reason either way. */
    sv_result sv;
    if (sv_check(msg, len, w->e->via_host, w->e->tls_on ? w->e->tls_via_host : NULL, &sv) != SV_OK) {
        BUMP(w->c.invalid[sv.reason]);
        if (sv.status) reply_with(w, msg, len, from, sv.status, sv.phrase, NULL, sv.extra[0] ? sv.extra : NULL);
        return;
    }
    /* RFC 3261 §16.6 step 7: "if the Request-URI contains a SIPS URI, TLS MUST be used to
     * communicate with that proxy"; a request goes on over the transport it came on, so a
     * sips: Request-URI is forwarded only when it came over TLS. */
    const char *ruri = memchr(msg, ' ', len < 64 ? len : 64);
    if (!from->tls && ruri && (size_t)(msg + len - ruri) > 6 && strncasecmp(ruri + 1, "sips:", 5) == 0) {
        BUMP(w->c.invalid[is_ack ? SV_UNANSWERED : SV_BAD_SCHEME]);
        if (!is_ack) reply(w, msg, len, from, 416, "SIPS Needs TLS", NULL);
        return;
    }
    /* Every request other than ACK and CANCEL is shown to the retransmission detector once:
     * an original is classified, a retransmission gets what its original got (RFC 3261
     * §16.11: a stateless proxy forwards a retransmission the same way, with the same branch;
     * RFC 7200 limits new requests, and a window slot is per transaction), as long as the
     * decision is remembered. ACK and CANCEL are classified as before (exempt). */
    int ack_or_cancel = is_ack || (len >= 7 && strncmp(msg, "CANCEL ", 7) == 0);
    uint64_t now = now_ns();
    /* One scan for the detector, the overload category and classification; it points into
     * msg, which stays as it is until lc_classify_scanned. A message that does not scan is
     * refused by each of the three (not observed, no category, malformed), as before. */
    lc_scanned_sip scan;
    (void)lc_sip_scan((const uint8_t *)msg, len, &scan);
    lc_class cls = LC_CLASS_ORIGINAL;
    decided_t *dm = NULL; /* this transaction's slot of the decision memory (NULL: not observed) */
    unsigned long dk = 0;
    if (!ack_or_cancel && lc_detector_observe_scanned(w->e->det, &scan, now, &cls) == LC_RESULT_OK) {
        dk = decision_key(&sv);
        dm = decision_slot(w->decided, dk);
        if (cls == LC_CLASS_RETRANSMISSION) BUMP(w->c.retransmissions);
        else BUMP(w->c.originals);
    } else {
        cls = LC_CLASS_ORIGINAL; /* unobserved (ACK, CANCEL, no valid Via): handled as new */
    }
    /* Overload control: which requests are new (originals, not ACK / CANCEL), and, as a server
     * to upstream clients, the 503s owed to clients that do not take part (RFC 7339 §5.10.2;
     * the server admits every retransmission, so only an original is rejected here). */
    /* The request's origin, for the engine's trust settings (RFC 4412 §11.3, and RFC 7200 §4.8's
     * "existing sessions"): where it came from, and whether it belongs to a dialog this edge saw
     * set up (a To tag alone proves nothing). */
    lc_sip_options o;
    memset(&o, 0, sizeof o);
    o.transport = from->tls ? LC_TRANSPORT_TLS : from->tcp ? LC_TRANSPORT_TCP : LC_TRANSPORT_UDP;
    o.source.family = LC_IP_V4;
    memcpy(o.source.addr, &from->addr.sin_addr, 4);
    if (dialogs_known(w->e->dialogs, sv.call_id.p, sv.call_id.n, sv.from.p, sv.from.n, sv.to.p, sv.to.n, now)) o.flags |= LC_SIP_KNOWN_DIALOG;
    int oc_new = 0, oc_exempt = 0;
    lc_oc_category oc_cat = LC_OC_CATEGORY_NONE;
    if (w->e->oc) {
        lc_oc_category cat = LC_OC_CATEGORY_NONE;
        lc_result cr = lc_oc_category_scanned(w->e->engine, &scan, &o, &cat);
        oc_exempt = cr == LC_RESULT_OK && cat == LC_OC_CATEGORY_NONE;
        if (cr == LC_RESULT_OK && cat != LC_OC_CATEGORY_NONE) {
            char key[32];
            lc_str tv = top_via(msg, len);
            addr_key(&from->addr, key, sizeof key); /* the transport source, not a Via field */
            lc_oc_admission adm = LC_OC_ADMISSION_ADMIT;
            lc_str k = {(const uint8_t *)key, strlen(key)};
            lc_oc_server_on_request(w->e->oc_srv, now, k, tv, cls, cat, &adm);
            if (adm == LC_OC_ADMISSION_REJECT) {
                BUMP(w->c.oc_rejected);
                record_decision(dm, dk, DM_OC_SHED, 503, now);
                reply_overload(w, msg, len, from);
                return;
            }
            oc_new = cls == LC_CLASS_ORIGINAL;
            oc_cat = cat;
        }
    }
    decision_t prior;
    if (dm && cls == LC_CLASS_RETRANSMISSION) {
        if (decision_recall(w, dk, &prior) && now - prior.at_ns < TIMER_B_NS) {
            /* Repeated without classifying: no rate token, no window slot, no lc_oc_decide and
             * no timeout tracking (the original has them). */
            BUMP(w->c.retx_repeated);
            if (prior.kind == DM_FORWARDED) forward_request(w, msg, len, from, sv_loop_hash_of(&sv, msg, len)); /* same branch */
            else if (prior.kind == DM_ANSWERED) reply(w, msg, len, from, prior.status, "Service Unavailable", NULL);
            else if (prior.kind == DM_OC_SHED || prior.kind == DM_NO_POLICY) reply_overload(w, msg, len, from);
            else BUMP(w->c.dropped);
            return;
        }
        /* Evicted from the memory, older than it, redirected (not remembered), or its original
         * came before a restart: classified like an original (RFC 7339 overload control still
         * treats it as the retransmission it is). */
        BUMP(w->c.retx_unremembered);
    }
    lc_decision d;
    /* The next hop this edge forwards to (every request goes there): rules whose
     * target-sip-entity names it apply. */
    o.target = cstr(w->e->next_hop_uri);
    lc_result r = lc_classify_scanned(w->lw, &scan, &o, &d);
    if (r != LC_RESULT_OK) {
        BUMP(w->c.malformed);
        record_decision(dm, dk, DM_NONE, 0, now);
        return; /* not a request we can route: dropped */
    }
    if (d.verdict == LC_VERDICT_REJECT || d.verdict == LC_VERDICT_REDIRECT) {
        record_decision(dm, dk, d.verdict == LC_VERDICT_REJECT ? DM_ANSWERED : DM_NONE, d.status, now);
        answer(w, msg, len, from, &d);
        return;
    }
    if (!d.exempt && !d.matched && !w->e->fallback_path && atomic_load_explicit(&w->e->no_policy, memory_order_relaxed)) {
        /* No notifier policy yet and no fallback: what no rule classifies is refused rather
         * than let through unlimited. 503 without Retry-After: the caller may retry at once,
         * and other requests to this edge are not to be held back. */
        if (d.has_ticket) lc_complete(w->lw, &d.ticket);
        BUMP(w->c.no_policy_rejected);
        record_decision(dm, dk, DM_NO_POLICY, 503, now);
        reply_overload(w, msg, len, from);
        return;
    }
    if (d.verdict == LC_VERDICT_DROP) {
        /* Only over TCP: libloadctl turns a drop into a reject over UDP (RFC 7200), where a
         * silent drop would only bring retransmissions. */
        BUMP(w->c.dropped);
        record_decision(dm, dk, DM_DROPPED, 0, now);
        return;
    }
    if (oc_new) {
        lc_oc_verdict v = LC_OC_VERDICT_FORWARD;
        lc_oc_decide(w->ocs, oc_hop_of(w->e, from->tls), now, oc_cat, &v);
        if (v != LC_OC_VERDICT_FORWARD && v != LC_OC_VERDICT_PROBE) {
            if (d.has_ticket) lc_complete(w->lw, &d.ticket);
            BUMP(w->c.oc_shed);
            record_decision(dm, dk, DM_OC_SHED, 503, now);
            reply_overload(w, msg, len, from);
            return;
        }
        oc_track(w, transaction_hash_of(sv.call_id.p, sv.call_id.n, sv.cseq.p, sv.cseq.n), now, oc_hop_of(w->e, from->tls));
    } else if (oc_exempt) {
        /* ACK / CANCEL: always sent, counted in the loss algorithm's mix (RFC 7339 §7.2) */
        lc_oc_verdict v = LC_OC_VERDICT_FORWARD;
        lc_oc_decide(w->ocs, oc_hop_of(w->e, from->tls), now, LC_OC_CATEGORY_NONE, &v);
    }
    if (d.has_ticket) remember(w, transaction_hash_of(sv.call_id.p, sv.call_id.n, sv.cseq.p, sv.cseq.n), d.ticket);
    record_decision(dm, dk, DM_FORWARDED, 0, now);
    forward_request(w, msg, len, from, sv_loop_hash_of(&sv, msg, len));
}
