/* One scan per request: lc_sip_scan, then lc_detector_observe_scanned /
 * lc_detector_forget_scanned, lc_oc_category_scanned and lc_classify_scanned give exactly what
 * lc_detector_observe_sip / lc_detector_forget_sip, lc_oc_category_sip and lc_classify_sip_opts
 * give the same message with the same options: result codes, lc_last_error, class, category and
 * every field of the decision. Two libraries set up alike (engine, worker, detector) see the
 * same corpus in the same order, one through each path: valid requests of every kind the
 * engine tells apart (retransmissions, ACK, CANCEL, emergency calls, Resource-Priority from
 * listed and other peers, in-dialog requests, a load-control SUBSCRIBE, window tickets, a
 * target entity), malformed ones and cut lengths, under several options. Then misuse: a zeroed
 * struct, a failed scan left in a struct that held a good one, NULLs, bad options: refused,
 * no output written. Built with -std=c11 -Wall -Wextra -Wpedantic -Werror and run under
 * ASan+UBSan and valgrind (the Makefile's c-test target). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadctl.h"
#include "check.h"

#define MS 1000000ull

static const char *POLICY =
    "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" "
    "xmlns:lc=\"urn:ietf:params:xml:ns:load-control\" version=\"0\" state=\"full\">"
    "<rule id=\"senders\"><conditions><lc:call-identity><lc:sip><lc:from><many domain=\"m.example\"/></lc:from>"
    "</lc:sip></lc:call-identity></conditions>"
    "<actions><lc:accept alt-action=\"reject\"><lc:rate>0</lc:rate></lc:accept></actions></rule>"
    "<rule id=\"asserted\"><conditions><lc:call-identity><lc:sip><lc:p-asserted-identity>"
    "<many-tel prefix=\"+1-312\"/></lc:p-asserted-identity></lc:sip></lc:call-identity></conditions>"
    "<actions><lc:accept alt-action=\"reject\"><lc:rate>0</lc:rate></lc:accept></actions></rule>"
    "<rule id=\"calls\"><conditions><lc:call-identity><lc:sip><lc:to><many-tel prefix=\"+1-212\"/></lc:to>"
    "</lc:sip></lc:call-identity><method>INVITE</method></conditions>"
    "<actions><lc:accept alt-action=\"reject\"><lc:rate>2</lc:rate></lc:accept></actions></rule>"
    "<rule id=\"messages\"><conditions><lc:call-identity><lc:sip><lc:request-uri><many domain=\"b.example\"/>"
    "</lc:request-uri></lc:sip></lc:call-identity><method>MESSAGE</method></conditions>"
    "<actions><lc:accept alt-action=\"redirect\" alt-target=\"sip:a@alt.example.com sip:b@alt.example.com\">"
    "<lc:percent>50</lc:percent></lc:accept></actions></rule>"
    "<rule id=\"registrations\"><conditions><method>REGISTER</method></conditions>"
    "<actions><lc:accept alt-action=\"drop\"><lc:win>1</lc:win></lc:accept></actions></rule>"
    "<rule id=\"next-hop\"><conditions><lc:target-sip-entity>sip:192.0.2.254:5060</lc:target-sip-entity>"
    "<method>OPTIONS</method></conditions>"
    "<actions><lc:accept alt-action=\"reject\"><lc:rate>0</lc:rate></lc:accept></actions></rule>"
    "</ruleset>";

#define HEADERS(branch, from_tag, to_tag, cseq) \
    "Via: SIP/2.0/UDP 192.0.2.7:5060;branch=" branch "\r\n"   \
    "From: \"Alice\" <sip:alice@a.example>;tag=" from_tag "\r\n" \
    "To: <tel:+1-212-555-0100>" to_tag "\r\n"                  \
    "Call-ID: c1@192.0.2.7\r\nCSeq: " cseq "\r\n"

#define INVITE_LINE "INVITE sip:+12125550100@gw.example.com;user=phone SIP/2.0\r\n"

#define NO_VIA INVITE_LINE "From: <sip:a@a.example>;tag=19\r\nTo: <tel:+1-212-555-0100>\r\nCall-ID: c19\r\nCSeq: 1 INVITE\r\n\r\n"

/* The corpus, in the order both paths see it. */
static const char *CORPUS[] = {
    /* A new call to the rate-limited number, then its retransmission (same branch). */
    INVITE_LINE HEADERS("z9hG4bK1", "1", "", "1 INVITE") "Content-Length: 0\r\n\r\n",
    INVITE_LINE HEADERS("z9hG4bK1", "1", "", "1 INVITE") "Content-Length: 0\r\n\r\n",
    /* More new calls: the rule's burst runs out. */
    INVITE_LINE HEADERS("z9hG4bK2", "2", "", "1 INVITE") "\r\n",
    INVITE_LINE HEADERS("z9hG4bK3", "3", "", "1 INVITE") "\r\n",
    INVITE_LINE HEADERS("z9hG4bK4", "4", "", "1 INVITE") "\r\n",
    /* CANCEL and ACK of the first call. */
    "CANCEL sip:+12125550100@gw.example.com;user=phone SIP/2.0\r\n" HEADERS("z9hG4bK1", "1", "", "1 CANCEL") "\r\n",
    "ACK sip:+12125550100@gw.example.com;user=phone SIP/2.0\r\n" HEADERS("z9hG4bK1", "1", ";tag=x", "1 ACK") "\r\n",
    /* Emergency calls: a service URN as Request-URI, or in To (RFC 5031). */
    "INVITE urn:service:sos.fire SIP/2.0\r\n" HEADERS("z9hG4bK5", "5", "", "1 INVITE") "\r\n",
    "INVITE sip:psap@gw.example.com SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.7;branch=z9hG4bK6\r\n"
    "From: <sip:alice@a.example>;tag=6\r\nTo: \"112\" <urn:service:sos>\r\nCall-ID: c6\r\nCSeq: 1 INVITE\r\n\r\n",
    /* Resource-Priority (RFC 4412), on one line and on two. */
    INVITE_LINE HEADERS("z9hG4bK7", "7", "", "1 INVITE") "Resource-Priority: ets.0\r\n\r\n",
    INVITE_LINE HEADERS("z9hG4bK8", "8", "", "1 INVITE") "Resource-Priority: dsn.flash\r\n"
    "resource-priority : wps.2\r\n\r\n",
    /* In a dialog: a re-INVITE with a To tag, a BYE. */
    INVITE_LINE HEADERS("z9hG4bK9", "1", ";tag=x", "2 INVITE") "\r\n",
    "BYE sip:+12125550100@gw.example.com SIP/2.0\r\n" HEADERS("z9hG4bK10", "1", ";tag=x", "3 BYE") "\r\n",
    /* The load-control event package's SUBSCRIBE (RFC 7200 §5.1: not filtered). */
    "SUBSCRIBE sip:gw.example.com SIP/2.0\r\n" HEADERS("z9hG4bK11", "11", "", "1 SUBSCRIBE")
    "Event: load-control\r\nExpires: 3600\r\n\r\n",
    /* A percent rule with redirect, a window rule (a ticket), a target entity's rule. */
    "MESSAGE sip:bob@b.example SIP/2.0\r\n" HEADERS("z9hG4bK12", "12", "", "1 MESSAGE") "\r\n",
    "MESSAGE sip:bob@b.example SIP/2.0\r\n" HEADERS("z9hG4bK13", "13", "", "1 MESSAGE") "\r\n",
    "REGISTER sip:b.example SIP/2.0\r\n" HEADERS("z9hG4bK14", "14", "", "1 REGISTER") "\r\n",
    "REGISTER sip:b.example SIP/2.0\r\n" HEADERS("z9hG4bK15", "15", "", "1 REGISTER") "\r\n",
    "OPTIONS sip:gw.example.com SIP/2.0\r\n" HEADERS("z9hG4bK16", "16", "", "1 OPTIONS") "\r\n",
    /* From a domain with a rule of its own. */
    INVITE_LINE "Via: SIP/2.0/UDP 198.51.100.1;branch=z9hG4bK28\r\nFrom: \"M\" <sip:mallory@m.example>;tag=28\r\n"
    "To: <tel:+1-212-555-0100>\r\nCall-ID: c28\r\nCSeq: 1 INVITE\r\n\r\n",
    /* Compact forms, a fold, an 8-bit display name, P-Asserted-Identity on two lines, a body. */
    "\r\nINVITE tel:+1-212-555-0199 SIP/2.0\nv: SIP/2.0/TCP h.example;branch=z9hG4bK17\n"
    "f: \"J\xf6rg\" <sip:j@x.example>\n\t;tag=17\nt: <tel:+1-212-555-0199>\ni: c17\nCSeq: 1 INVITE\n"
    "P-Asserted-Identity: <sip:j@x.example>\nP-Asserted-Identity: <tel:+1-312-555-0000>\n\nv=0\n",
    /* An RFC 2543 branch (no magic cookie): the key takes Call-ID and tags; and its copy. */
    INVITE_LINE HEADERS("old18", "18", "", "1 INVITE") "\r\n",
    INVITE_LINE HEADERS("old18", "18", "", "1 INVITE") "\r\n",
    /* Requests the detector cannot key (no Via, a Via that is no via-parm) but that classify. */
    NO_VIA,
    INVITE_LINE "Via: garbage\r\nFrom: <sip:a@a.example>;tag=20\r\nTo: <tel:+1-212-555-0100>\r\n"
    "Call-ID: c20\r\nCSeq: 1 INVITE\r\n\r\n",
    /* Malformed: every scan error. */
    "SIP/2.0 200 OK\r\n" HEADERS("z9hG4bK21", "21", ";tag=y", "1 INVITE") "\r\n",
    INVITE_LINE HEADERS("z9hG4bK22", "22", "", "1 INVITE"),
    "INVITE  sip:a@b SIP/2.0\r\n" HEADERS("z9hG4bK23", "23", "", "1 INVITE") "\r\n",
    INVITE_LINE HEADERS("z9hG4bK24", "24", "", "1 INVITE") "no colon\r\n\r\n",
    INVITE_LINE "Via: SIP/2.0/UDP h;branch=z9hG4bK25\r\nFrom: <sip:a@a>;tag=1\r\nTo: <sip:b@b>\r\nCall-ID: c25\r\n\r\n",
    INVITE_LINE HEADERS("z9hG4bK26", "26", "", "x INVITE") "\r\n",
    INVITE_LINE HEADERS("z9hG4bK27", "27", "", "1 INVITE") "From: <sip:mallory@m.example>;tag=2\r\n\r\n",
    "",
};

/* One library: what the edge holds. */
typedef struct {
    lc_engine *e;
    lc_worker *w;
    lc_detector *d;
} side;

/* `to_tag`: whether a To tag alone makes a dialog (LC_EXEMPT_TO_TAG). */
static side side_new(int to_tag) {
    side s = {NULL, NULL, NULL};
    lc_engine_config cfg;
    uint64_t g = 0;
    CHECK_RESULT(lc_engine_config_default(&cfg), LC_RESULT_OK);
    cfg.priority_peers = str("192.0.2.0/24");
    if (to_tag) cfg.exempt_flags |= LC_EXEMPT_TO_TAG;
    CHECK_RESULT(lc_engine_new(&cfg, &s.e), LC_RESULT_OK);
    CHECK_RESULT(lc_engine_publish(s.e, str("local"), NONE, (const uint8_t *)POLICY, strlen(POLICY), &g),
                 LC_RESULT_OK);
    CHECK_RESULT(lc_worker_attach(s.e, -1, &s.w), LC_RESULT_OK);
    lc_detector_config dc;
    CHECK_RESULT(lc_detector_config_default(&dc), LC_RESULT_OK);
    dc.capacity = 1024;
    dc.stripes = 4;
    CHECK_RESULT(lc_detector_new(&dc, &s.d), LC_RESULT_OK);
    return s;
}

static void side_free(side *s) {
    lc_detector_free(s->d);
    lc_worker_free(s->w);
    lc_engine_free(s->e);
}

/* The calling thread's last error, NUL-terminated. */
static void last_error(char *buf, size_t cap) {
    size_t n = 0;
    if (lc_last_error((uint8_t *)buf, cap - 1, &n) != LC_RESULT_OK) n = 0;
    buf[n] = 0;
}

static int same_str(lc_str a, lc_str b) {
    return a.len == b.len && (a.ptr == NULL) == (b.ptr == NULL) && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static int same_decision(const lc_decision *a, const lc_decision *b) {
    if (a->verdict != b->verdict || a->status != b->status || a->exempt != b->exempt ||
        a->exempt_reason != b->exempt_reason || a->matched != b->matched || !same_str(a->rule_id, b->rule_id) ||
        !same_str(a->source, b->source) || a->target_count != b->target_count || a->has_ticket != b->has_ticket ||
        a->ticket.key != b->ticket.key) {
        return 0;
    }
    for (size_t i = 0; i < a->target_count; i++) {
        if (!same_str(a->targets[i], b->targets[i])) return 0;
    }
    return 1;
}

/* What the corpus reached, so that a change that makes it miss a kind fails. */
static struct {
    int senders, asserted, messages;
    int retransmissions, priority, none, rejected, redirected, tickets, emergency, resource_priority, not_filtered,
        missing_via, bad_via, scan_errors;
} seen;

/* One request through both paths; everything either gives must be the same. */
static void compare(side *a, side *b, const char *msg, size_t len, const lc_sip_options *o, uint64_t now,
                    const char *what) {
    const uint8_t *m = (const uint8_t *)msg;
    char ea[3][512], eb[3][512];
    lc_class ca = 99, cb = 99;
    lc_oc_category ka = 99, kb = 99;
    lc_decision da, db;
    memset(&da, 0xAB, sizeof da);
    memset(&db, 0xAB, sizeof db);

    lc_result ra[3], rb[3];
    ra[0] = lc_detector_observe_sip(a->d, m, len, now, &ca);
    last_error(ea[0], sizeof ea[0]);
    ra[1] = lc_oc_category_sip(a->e, m, len, o, &ka);
    last_error(ea[1], sizeof ea[1]);
    ra[2] = lc_classify_sip_opts(a->w, m, len, o, &da);
    last_error(ea[2], sizeof ea[2]);

    lc_scanned_sip s;
    lc_result rs = lc_sip_scan(m, len, &s);
    char es[512];
    last_error(es, sizeof es);
    if (rs != LC_RESULT_OK) {
        seen.scan_errors++;
        /* The scan fails as each raw call does, with the same detail. */
        for (int i = 0; i < 3; i++) {
            CHECK(ra[i] == rs);
            CHECK(strcmp(ea[i], es) == 0);
        }
        /* And the scanned calls refuse what is left in the struct. */
        CHECK_RESULT(lc_detector_observe_scanned(b->d, &s, now, &cb), LC_RESULT_INVALID_ARGUMENT);
        CHECK_RESULT(lc_oc_category_scanned(b->e, &s, o, &kb), LC_RESULT_INVALID_ARGUMENT);
        CHECK_RESULT(lc_classify_scanned(b->w, &s, o, &db), LC_RESULT_INVALID_ARGUMENT);
        CHECK(cb == 99 && kb == 99 && da.verdict == 0xABABABABu && db.verdict == 0xABABABABu);
        return;
    }
    rb[0] = lc_detector_observe_scanned(b->d, &s, now, &cb);
    last_error(eb[0], sizeof eb[0]);
    rb[1] = lc_oc_category_scanned(b->e, &s, o, &kb);
    last_error(eb[1], sizeof eb[1]);
    rb[2] = lc_classify_scanned(b->w, &s, o, &db);
    last_error(eb[2], sizeof eb[2]);
    for (int i = 0; i < 3; i++) {
        if (ra[i] != rb[i] || (ra[i] != LC_RESULT_OK && strcmp(ea[i], eb[i]) != 0)) {
            fprintf(stderr, "%s: call %d: %u (%s) against %u (%s)\n", what, i, (unsigned)ra[i], ea[i],
                    (unsigned)rb[i], eb[i]);
        }
        CHECK(ra[i] == rb[i]);
        if (ra[i] != LC_RESULT_OK) CHECK(strcmp(ea[i], eb[i]) == 0);
    }
    CHECK(ca == cb && ka == kb);
    if (ra[2] == LC_RESULT_OK) {
        if (!same_decision(&da, &db)) fprintf(stderr, "%s: decisions differ\n", what);
        CHECK(same_decision(&da, &db));
        seen.senders += str_is(da.rule_id, "senders");
        seen.asserted += str_is(da.rule_id, "asserted");
        seen.messages += str_is(da.rule_id, "messages");
        seen.rejected += da.verdict == LC_VERDICT_REJECT;
        seen.redirected += da.verdict == LC_VERDICT_REDIRECT;
        seen.emergency += da.exempt_reason == LC_EXEMPT_REASON_EMERGENCY;
        seen.resource_priority += da.exempt_reason == LC_EXEMPT_REASON_RESOURCE_PRIORITY;
        seen.not_filtered += da.exempt_reason == LC_EXEMPT_REASON_NOT_FILTERED;
        if (da.has_ticket && db.has_ticket) {
            seen.tickets++;
            CHECK_RESULT(lc_complete(a->w, &da.ticket), LC_RESULT_OK);
            CHECK_RESULT(lc_complete(b->w, &db.ticket), LC_RESULT_OK);
        }
    }
    seen.retransmissions += ra[0] == LC_RESULT_OK && ca == LC_CLASS_RETRANSMISSION;
    seen.missing_via += ra[0] == LC_RESULT_SIP_MISSING_VIA;
    seen.bad_via += ra[0] == LC_RESULT_SIP_BAD_VIA;
    seen.priority += ra[1] == LC_RESULT_OK && ka == LC_OC_CATEGORY_PRIORITY;
    seen.none += ra[1] == LC_RESULT_OK && ka == LC_OC_CATEGORY_NONE;
}

static lc_sip_options options(uint32_t transport, uint32_t flags, const uint8_t peer[4], const char *target) {
    lc_sip_options o;
    memset(&o, 0, sizeof o);
    o.transport = transport;
    o.flags = flags | LC_SIP_HAS_TIME;
    o.unix_ns = 1705000000000000000ll;
    if (peer) {
        o.source.family = LC_IP_V4;
        memcpy(o.source.addr, peer, 4);
    }
    o.target = str(target);
    return o;
}

/* The corpus under each set of options, whole and cut short (a wrong length), through both
 * paths, on engines where a To tag alone does or does not make a dialog. */
static void test_same_results(int to_tag) {
    static const uint8_t listed[4] = {192, 0, 2, 7}, other[4] = {203, 0, 113, 9};
    lc_sip_options opts[] = {
        options(LC_TRANSPORT_UDP, 0, NULL, NULL),
        options(LC_TRANSPORT_UDP, 0, listed, "sip:192.0.2.254:5060"),
        options(LC_TRANSPORT_TCP, 0, other, "sip:192.0.2.254:5060"),
        options(LC_TRANSPORT_TLS, LC_SIP_KNOWN_DIALOG, other, NULL),
    };
    side a = side_new(to_tag), b = side_new(to_tag);
    uint64_t now = 1000 * MS;
    char what[64];
    for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++) {
        for (size_t i = 0; i < sizeof CORPUS / sizeof CORPUS[0]; i++) {
            size_t len = strlen(CORPUS[i]);
            opts[k].monotonic_ns = now;
            snprintf(what, sizeof what, "options %zu, message %zu", k, i);
            compare(&a, &b, CORPUS[i], len, &opts[k], now, what);
            now += MS;
            /* The same bytes with a length that ends inside the header section, or in the
             * request line: the length is the caller's, and both paths read only that much. */
            snprintf(what, sizeof what, "options %zu, message %zu cut", k, i);
            compare(&a, &b, CORPUS[i], len / 2, &opts[k], now, what);
            compare(&a, &b, CORPUS[i], len > 3 ? 3 : 0, &opts[k], now, what);
            now += MS;
        }
    }
    /* Forgetting, both ways: the next copy counts as an original again. */
    const char *invite = CORPUS[0];
    size_t len = strlen(invite);
    lc_scanned_sip s;
    bool fa = false, fb = false;
    CHECK_RESULT(lc_sip_scan((const uint8_t *)invite, len, &s), LC_RESULT_OK);
    CHECK_RESULT(lc_detector_forget_sip(a.d, (const uint8_t *)invite, len, &fa), LC_RESULT_OK);
    CHECK_RESULT(lc_detector_forget_scanned(b.d, &s, &fb), LC_RESULT_OK);
    CHECK(fa && fb);
    CHECK_RESULT(lc_detector_forget_sip(a.d, (const uint8_t *)invite, len, &fa), LC_RESULT_OK);
    CHECK_RESULT(lc_detector_forget_scanned(b.d, &s, &fb), LC_RESULT_OK);
    CHECK(!fa && !fb);
    lc_class ca = 99, cb = 99;
    CHECK_RESULT(lc_detector_observe_sip(a.d, (const uint8_t *)invite, len, now, &ca), LC_RESULT_OK);
    CHECK_RESULT(lc_detector_observe_scanned(b.d, &s, now, &cb), LC_RESULT_OK);
    CHECK(ca == LC_CLASS_ORIGINAL && cb == LC_CLASS_ORIGINAL);
    /* A message the detector cannot key: the same error either way. */
    const char *no_via = NO_VIA;
    CHECK_RESULT(lc_sip_scan((const uint8_t *)no_via, strlen(no_via), &s), LC_RESULT_OK);
    CHECK_RESULT(lc_detector_forget_sip(a.d, (const uint8_t *)no_via, strlen(no_via), &fa), LC_RESULT_SIP_MISSING_VIA);
    CHECK_RESULT(lc_detector_forget_scanned(b.d, &s, &fb), LC_RESULT_SIP_MISSING_VIA);
    lc_detector_counters da, db;
    CHECK_RESULT(lc_detector_stats(a.d, &da), LC_RESULT_OK);
    CHECK_RESULT(lc_detector_stats(b.d, &db), LC_RESULT_OK);
    CHECK(da.originals == db.originals && da.retransmissions == db.retransmissions && da.tracked == db.tracked);
    lc_stats sa, sb;
    CHECK_RESULT(lc_engine_stats(a.e, &sa), LC_RESULT_OK);
    CHECK_RESULT(lc_engine_stats(b.e, &sb), LC_RESULT_OK);
    CHECK(sa.accepted == sb.accepted && sa.rejected == sb.rejected && sa.exempt == sb.exempt);
    side_free(&a);
    side_free(&b);
}

static void test_corpus_coverage(void) {
    /* The corpus reached every kind it is there for. */
    CHECK(seen.retransmissions > 0 && seen.priority > 0 && seen.none > 0 && seen.rejected > 0);
    CHECK(seen.redirected > 0 && seen.tickets > 0 && seen.emergency > 0 && seen.resource_priority > 0);
    CHECK(seen.not_filtered > 0 && seen.missing_via > 0 && seen.bad_via > 0 && seen.scan_errors > 0);
    CHECK(seen.senders > 0 && seen.asserted > 0 && seen.messages > 0);
}

/* NULL options: the defaults, as a zeroed lc_sip_options gives lc_classify_sip_opts and a NULL
 * one lc_oc_category_sip; and a copy of the struct is as good as the original. */
static void test_defaults_and_copies(void) {
    side a = side_new(1), b = side_new(1);
    lc_sip_options zero;
    memset(&zero, 0, sizeof zero);
    for (size_t i = 0; i < sizeof CORPUS / sizeof CORPUS[0]; i++) {
        const uint8_t *m = (const uint8_t *)CORPUS[i];
        size_t len = strlen(CORPUS[i]);
        lc_scanned_sip s, copy;
        if (lc_sip_scan(m, len, &s) != LC_RESULT_OK) continue;
        memcpy(&copy, &s, sizeof s);
        lc_oc_category ka = 99, kb = 99;
        lc_decision da, db;
        CHECK_RESULT(lc_oc_category_sip(a.e, m, len, NULL, &ka), LC_RESULT_OK);
        CHECK_RESULT(lc_oc_category_scanned(b.e, &copy, NULL, &kb), LC_RESULT_OK);
        CHECK(ka == kb);
        CHECK_RESULT(lc_classify_sip_opts(a.w, m, len, &zero, &da), LC_RESULT_OK);
        CHECK_RESULT(lc_classify_scanned(b.w, &copy, NULL, &db), LC_RESULT_OK);
        CHECK(same_decision(&da, &db));
        if (da.has_ticket) {
            lc_complete(a.w, &da.ticket);
            lc_complete(b.w, &db.ticket);
        }
    }
    side_free(&a);
    side_free(&b);
}

/* Misuse is refused before anything happens: no output written, nothing recorded. */
static void test_misuse(void) {
    side b = side_new(0);
    const char *invite = CORPUS[0];
    const uint8_t *m = (const uint8_t *)invite;
    size_t len = strlen(invite);
    lc_sip_options o = options(LC_TRANSPORT_UDP, 0, NULL, NULL);
    lc_scanned_sip s, zeroed;
    memset(&zeroed, 0, sizeof zeroed);
    lc_class c = 99;
    lc_oc_category k = 99;
    bool forgotten = true;
    lc_decision d;
    memset(&d, 0xAB, sizeof d);
    char err[512];

    /* A zeroed struct: never scanned. */
    CHECK_RESULT(lc_detector_observe_scanned(b.d, &zeroed, 0, &c), LC_RESULT_INVALID_ARGUMENT);
    last_error(err, sizeof err);
    CHECK(strstr(err, "scanned") != NULL && strstr(err, "lc_sip_scan") != NULL);
    CHECK_RESULT(lc_detector_forget_scanned(b.d, &zeroed, &forgotten), LC_RESULT_INVALID_ARGUMENT);
    CHECK_RESULT(lc_oc_category_scanned(b.e, &zeroed, &o, &k), LC_RESULT_INVALID_ARGUMENT);
    CHECK_RESULT(lc_classify_scanned(b.w, &zeroed, &o, &d), LC_RESULT_INVALID_ARGUMENT);
    CHECK(c == 99 && k == 99 && forgotten && d.verdict == 0xABABABABu);
    /* A failed scan into a struct that held a good one: the old scan is not used. */
    CHECK_RESULT(lc_sip_scan(m, len, &s), LC_RESULT_OK);
    CHECK_RESULT(lc_sip_scan((const uint8_t *)"SIP/2.0 200 OK\r\n\r\n", 18, &s), LC_RESULT_SIP_NOT_A_REQUEST);
    CHECK_RESULT(lc_classify_scanned(b.w, &s, &o, &d), LC_RESULT_INVALID_ARGUMENT);
    last_error(err, sizeof err);
    CHECK(strstr(err, "failed") != NULL);
    CHECK_RESULT(lc_detector_observe_scanned(b.d, &s, 0, &c), LC_RESULT_INVALID_ARGUMENT);
    CHECK(c == 99 && d.verdict == 0xABABABABu);
    lc_detector_counters dc;
    CHECK_RESULT(lc_detector_stats(b.d, &dc), LC_RESULT_OK);
    CHECK(dc.originals == 0 && dc.tracked == 0);

    /* NULLs. */
    CHECK_RESULT(lc_sip_scan(NULL, len, &s), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_sip_scan(NULL, 0, &s), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_sip_scan(m, len, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_sip_scan(m, len, &s), LC_RESULT_OK);
    CHECK_RESULT(lc_detector_observe_scanned(NULL, &s, 0, &c), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_detector_observe_scanned(b.d, NULL, 0, &c), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_detector_observe_scanned(b.d, &s, 0, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_detector_forget_scanned(NULL, &s, &forgotten), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_detector_forget_scanned(b.d, NULL, &forgotten), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_detector_forget_scanned(b.d, &s, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_oc_category_scanned(NULL, &s, &o, &k), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_oc_category_scanned(b.e, NULL, &o, &k), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_oc_category_scanned(b.e, &s, &o, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_classify_scanned(NULL, &s, &o, &d), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_classify_scanned(b.w, NULL, &o, &d), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_classify_scanned(b.w, &s, &o, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK(c == 99 && k == 99 && forgotten && d.verdict == 0xABABABABu);
    CHECK_RESULT(lc_detector_stats(b.d, &dc), LC_RESULT_OK);
    CHECK(dc.originals == 0 && dc.tracked == 0);

    /* Options checked as lc_classify_sip_opts checks them, before the scan is read. */
    lc_sip_options bad = o;
    bad.flags = 4;
    CHECK_RESULT(lc_classify_scanned(b.w, &s, &bad, &d), LC_RESULT_INVALID_ARGUMENT);
    CHECK_RESULT(lc_oc_category_scanned(b.e, &s, &bad, &k), LC_RESULT_INVALID_ARGUMENT);
    CHECK_RESULT(lc_classify_scanned(b.w, &zeroed, &bad, &d), LC_RESULT_INVALID_ARGUMENT);
    bad = o;
    bad.transport = 6;
    CHECK_RESULT(lc_classify_scanned(b.w, &s, &bad, &d), LC_RESULT_INVALID_ARGUMENT);
    bad = o;
    bad.source.family = 5;
    CHECK_RESULT(lc_oc_category_scanned(b.e, &s, &bad, &k), LC_RESULT_INVALID_ARGUMENT);
    bad = o;
    bad.target = str("sip:\xff@x");
    CHECK_RESULT(lc_classify_scanned(b.w, &s, &bad, &d), LC_RESULT_INVALID_UTF8);
    CHECK(k == 99 && d.verdict == 0xABABABABu);
    /* The scan is still good after all that. */
    CHECK_RESULT(lc_classify_scanned(b.w, &s, &o, &d), LC_RESULT_OK);
    CHECK(d.matched && str_is(d.rule_id, "calls") && d.verdict == LC_VERDICT_ACCEPT);
    side_free(&b);
}

int main(void) {
    CHECK(sizeof(lc_scanned_sip) == 512);
    test_same_results(0);
    test_same_results(1);
    test_corpus_coverage();
    test_defaults_and_copies();
    test_misuse();
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
