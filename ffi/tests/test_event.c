/* The load-control event package through the C ABI: a notifier and a subscriber (feeding an
 * engine) wired back to back in memory, in simulated time, plus the NULL paths. */
#include <stdio.h>
#include <string.h>

#include "loadctl.h"
#include "check.h"

#define SECOND 1000000000ull

static const char *policy(int rate) {
    static char buf[512];
    snprintf(buf, sizeof buf,
             "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"full\">"
             "<rule id=\"hotline\"><conditions><call-identity><sip><to><many-tel prefix=\"+1-212\"/></to></sip></call-identity></conditions>"
             "<actions><accept><rate>%d</rate></accept></actions></rule></ruleset>",
             rate);
    return buf;
}

/* Moves every pending message between the two until both are quiet. */
static int pump(lc_subscriber *s, lc_notifier *n, uint64_t now) {
    int moved = 0;
    for (int round = 0; round < 10; round++) {
        int any = 0;
        lc_sip_message m;
        lc_sip_message resp;
        while (lc_subscriber_poll_transmit(s, &m) == LC_RESULT_OK) {
            any = 1;
            CHECK(m.status == 0 && m.method == LC_METHOD_SUBSCRIBE && str_is(m.event, "load-control"));
            CHECK(lc_notifier_handle_subscribe(n, now, &m, &resp) == LC_RESULT_OK);
            CHECK(lc_subscriber_handle_response(s, now, &resp) == LC_RESULT_OK);
        }
        while (lc_notifier_poll_transmit(n, &m) == LC_RESULT_OK) {
            any = 1;
            moved++;
            CHECK(m.method == LC_METHOD_NOTIFY && str_is(m.content_type, "application/load-control+xml"));
            CHECK(lc_subscriber_handle_notify(s, now, &m, &resp) == LC_RESULT_OK);
            CHECK(resp.status == 200);
            CHECK(lc_notifier_handle_response(n, now, &resp) == LC_RESULT_OK);
        }
        if (!any) {
            break;
        }
    }
    return moved;
}

static const char *matched_rule(lc_worker *w) {
    static char id[64];
    lc_request r;
    memset(&r, 0, sizeof r);
    r.method = str("INVITE");
    r.to = str("<tel:+1-212-555-0000>");
    r.transport = LC_TRANSPORT_TCP;
    r.initial = true;
    lc_decision d;
    if (lc_classify(w, &r, &d) != LC_RESULT_OK || !d.matched) {
        return "";
    }
    snprintf(id, sizeof id, "%.*s", (int)d.rule_id.len, (const char *)d.rule_id.ptr);
    return id;
}

static void test_back_to_back(void) {
    lc_engine *e = NULL;
    lc_worker *w = NULL;
    lc_notifier *n = NULL;
    lc_subscriber *s = NULL;
    CHECK(lc_engine_new(NULL, &e) == LC_RESULT_OK);
    CHECK(lc_worker_attach(e, -1, &w) == LC_RESULT_OK);
    lc_notifier_config nc;
    memset(&nc, 0, sizeof nc);
    nc.uri = str("sip:sbc.example.com");
    nc.tag = str("n7");
    nc.authorized = str("example.net");
    CHECK(lc_notifier_new(&nc, &n) == LC_RESULT_OK);
    /* The timers of new handles, before anything else (make c-test runs this under valgrind
     * against the release library: the answer must not depend on bytes never written). */
    uint64_t first = 1;
    CHECK(lc_notifier_poll_timeout(n, &first) == LC_RESULT_EMPTY);
    const char *p = policy(100);
    CHECK(lc_notifier_set_policy(n, 0, (const uint8_t *)p, strlen(p)) == LC_RESULT_OK);
    lc_subscriber_config sc;
    memset(&sc, 0, sizeof sc);
    sc.notifier = str("sip:sbc.example.com");
    sc.subscriber = str("sip:proxy.example.net");
    sc.call_id = str("a84b4c76e66710");
    sc.tag = str("1928301774");
    sc.scope_to_notifier = false;
    CHECK(lc_subscriber_new(e, &sc, 0, &s) == LC_RESULT_OK);
    /* RFC 3261 §17.1.2.2: the SUBSCRIBE's transaction ends after 64·T1 = 32 s (Timer F): the
     * only timer. */
    CHECK(lc_subscriber_poll_timeout(s, &first) == LC_RESULT_OK && first == 32 * SECOND);
    CHECK(pump(s, n, 0) == 1);
    CHECK(strcmp(matched_rule(w), "hotline") == 0);
    int applied = 0;
    int subscribed = 0;
    lc_subscriber_event ev;
    while (lc_subscriber_poll_event(s, &ev) == LC_RESULT_OK) {
        if (ev.kind == LC_SUBSCRIBER_EVENT_KIND_POLICY_APPLIED) {
            applied++;
            CHECK(ev.number == 0 && ev.generation == 1);
        }
        if (ev.kind == LC_SUBSCRIBER_EVENT_KIND_SUBSCRIBED) {
            subscribed++;
            CHECK(ev.number == 3600);
        }
    }
    CHECK(applied == 1 && subscribed == 1);
    lc_notifier_event nev;
    CHECK(lc_notifier_poll_event(n, &nev) == LC_RESULT_OK);
    CHECK(nev.kind == LC_NOTIFIER_EVENT_KIND_SUBSCRIBED && str_is(nev.text, "sip:proxy.example.net"));
    /* A change within the pacing interval waits for the timer. */
    p = policy(50);
    CHECK(lc_notifier_set_policy(n, SECOND / 2, (const uint8_t *)p, strlen(p)) == LC_RESULT_OK);
    CHECK(pump(s, n, SECOND / 2) == 0);
    uint64_t due = 0;
    CHECK(lc_notifier_poll_timeout(n, &due) == LC_RESULT_OK && due == SECOND);
    CHECK(lc_notifier_handle_timeout(n, due) == LC_RESULT_OK);
    CHECK(pump(s, n, due) == 1);
    while (lc_subscriber_poll_event(s, &ev) == LC_RESULT_OK) {
        CHECK(ev.kind == LC_SUBSCRIBER_EVENT_KIND_POLICY_APPLIED && ev.number == 1);
    }
    uint64_t refresh = 0;
    CHECK(lc_subscriber_poll_timeout(s, &refresh) == LC_RESULT_OK && refresh == 3540 * SECOND);
    /* Shutdown (a restart): terminated;reason=probation;retry-after=2 withdraws the policy and
     * the subscriber SUBSCRIBEs again 2 s later. */
    CHECK(lc_notifier_shutdown(n, 2 * SECOND) == LC_RESULT_OK);
    pump(s, n, 2 * SECOND);
    CHECK(strcmp(matched_rule(w), "") == 0);
    int withdrawn = 0;
    int stopped = 0;
    while (lc_subscriber_poll_event(s, &ev) == LC_RESULT_OK) {
        withdrawn += ev.kind == LC_SUBSCRIBER_EVENT_KIND_POLICY_WITHDRAWN;
        stopped += ev.kind == LC_SUBSCRIBER_EVENT_KIND_STOPPED;
    }
    CHECK(withdrawn == 1 && stopped == 0);
    CHECK(lc_subscriber_poll_timeout(s, &refresh) == LC_RESULT_OK &&
          refresh == (2 + LC_SHUTDOWN_DEFAULT_RETRY_AFTER_S) * SECOND);
    lc_subscriber_free(s);
    lc_notifier_free(n);
    lc_worker_free(w);
    lc_engine_free(e);
}

/* A notifier and a subscriber after pump(): the policy of rate 100 in force. */
static void pair(const char *tag, lc_engine *e, lc_notifier **n, lc_subscriber **s) {
    lc_notifier_config nc;
    memset(&nc, 0, sizeof nc);
    nc.uri = str("sip:sbc.example.com");
    nc.tag = str(tag);
    nc.authorized = str("example.net");
    CHECK(lc_notifier_new(&nc, n) == LC_RESULT_OK);
    const char *p = policy(100);
    CHECK(lc_notifier_set_policy(*n, 0, (const uint8_t *)p, strlen(p)) == LC_RESULT_OK);
    if (*s == NULL) {
        lc_subscriber_config sc;
        memset(&sc, 0, sizeof sc);
        sc.notifier = str("sip:sbc.example.com");
        sc.subscriber = str("sip:proxy.example.net");
        sc.call_id = str("restart-call");
        sc.tag = str("restart-tag");
        CHECK(lc_subscriber_new(e, &sc, 0, s) == LC_RESULT_OK);
        CHECK(pump(*s, *n, 0) == 1);
    }
}

/* The shutdown reasons (checked at the boundary), the 503 a notifier on its way out answers,
 * and an operator's re-subscription after a decommission. */
static void test_shutdown_reasons_and_resubscribe(void) {
    lc_engine *e = NULL;
    lc_worker *w = NULL;
    lc_notifier *n = NULL;
    lc_subscriber *s = NULL;
    lc_sip_message m;
    CHECK(lc_engine_new(NULL, &e) == LC_RESULT_OK);
    CHECK(lc_worker_attach(e, -1, &w) == LC_RESULT_OK);
    pair("n1", e, &n, &s);
    CHECK(strcmp(matched_rule(w), "hotline") == 0);
    /* Undeclared reasons and out-of-range retry-afters end nothing. */
    CHECK(lc_notifier_shutdown_with_reason(n, SECOND, 2, 0) == LC_RESULT_INVALID_ARGUMENT);
    CHECK(lc_notifier_shutdown_with_reason(n, SECOND, UINT32_MAX, 5) == LC_RESULT_INVALID_ARGUMENT);
    CHECK(lc_notifier_shutdown_with_reason(n, SECOND, LC_SHUTDOWN_RESTART, 0) == LC_RESULT_INVALID_ARGUMENT);
    CHECK(lc_notifier_shutdown_with_reason(n, SECOND, LC_SHUTDOWN_RESTART, 86401) == LC_RESULT_INVALID_ARGUMENT);
    CHECK(lc_notifier_shutdown_with_reason(n, SECOND, LC_SHUTDOWN_DECOMMISSION, 5) == LC_RESULT_INVALID_ARGUMENT);
    CHECK(lc_notifier_poll_transmit(n, &m) == LC_RESULT_EMPTY);
    CHECK(strcmp(matched_rule(w), "hotline") == 0);
    CHECK(lc_notifier_shutdown_with_reason(NULL, SECOND, LC_SHUTDOWN_RESTART, 5) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_subscriber_resubscribe(NULL, SECOND) == LC_RESULT_NULL_PARAMETER);
    /* A restart with retry-after 30. */
    CHECK(lc_notifier_shutdown_with_reason(n, SECOND, LC_SHUTDOWN_RESTART, 30) == LC_RESULT_OK);
    CHECK(lc_notifier_poll_transmit(n, &m) == LC_RESULT_OK);
    CHECK(str_is(m.subscription_state, "terminated;reason=probation;retry-after=30"));
    lc_sip_message resp;
    CHECK(lc_subscriber_handle_notify(s, SECOND, &m, &resp) == LC_RESULT_OK && resp.status == 200);
    CHECK(strcmp(matched_rule(w), "") == 0);
    uint64_t due = 0;
    CHECK(lc_subscriber_poll_timeout(s, &due) == LC_RESULT_OK && due == 31 * SECOND);
    /* The notifier on its way out refuses the SUBSCRIBE: 503, Retry-After 30. */
    CHECK(lc_subscriber_resubscribe(s, 2 * SECOND) == LC_RESULT_OK);
    CHECK(lc_subscriber_poll_transmit(s, &m) == LC_RESULT_OK && m.method == LC_METHOD_SUBSCRIBE);
    CHECK(lc_notifier_handle_subscribe(n, 2 * SECOND, &m, &resp) == LC_RESULT_OK);
    CHECK(resp.status == 503 && resp.retry_after == 30);
    CHECK(lc_subscriber_handle_response(s, 2 * SECOND, &resp) == LC_RESULT_OK);
    CHECK(lc_subscriber_poll_timeout(s, &due) == LC_RESULT_OK && due == 32 * SECOND);
    lc_notifier_free(n);
    /* The new process; the subscriber comes back at the retry-after. */
    n = NULL;
    pair("n2", e, &n, &s);
    CHECK(lc_subscriber_handle_timeout(s, 32 * SECOND) == LC_RESULT_OK);
    CHECK(pump(s, n, 32 * SECOND) == 1);
    CHECK(strcmp(matched_rule(w), "hotline") == 0);
    /* A decommission: noresource stops the subscriber until it is told. */
    CHECK(lc_notifier_shutdown_with_reason(n, 40 * SECOND, LC_SHUTDOWN_DECOMMISSION, 0) == LC_RESULT_OK);
    CHECK(lc_notifier_poll_transmit(n, &m) == LC_RESULT_OK);
    CHECK(str_is(m.subscription_state, "terminated;reason=noresource"));
    CHECK(lc_subscriber_handle_notify(s, 40 * SECOND, &m, &resp) == LC_RESULT_OK && resp.status == 200);
    CHECK(lc_subscriber_poll_timeout(s, &due) == LC_RESULT_EMPTY);
    int stopped = 0;
    lc_subscriber_event ev;
    while (lc_subscriber_poll_event(s, &ev) == LC_RESULT_OK) {
        stopped += ev.kind == LC_SUBSCRIBER_EVENT_KIND_STOPPED;
    }
    CHECK(stopped == 1);
    lc_notifier_free(n);
    n = NULL;
    pair("n3", e, &n, &s);
    CHECK(lc_subscriber_handle_timeout(s, 4000 * SECOND) == LC_RESULT_OK);
    CHECK(pump(s, n, 4000 * SECOND) == 0);
    CHECK(strcmp(matched_rule(w), "") == 0);
    CHECK(lc_subscriber_resubscribe(s, 4000 * SECOND) == LC_RESULT_OK);
    CHECK(pump(s, n, 4000 * SECOND) == 1);
    CHECK(strcmp(matched_rule(w), "hotline") == 0);
    lc_subscriber_free(s);
    lc_notifier_free(n);
    lc_worker_free(w);
    lc_engine_free(e);
}

/* A notifier that dies without a shutdown: the next process reads what the dead one saved and
 * deactivates its dialogs; the subscriber is on the new process's subscription at once. */
static void test_saved_dialogs(void) {
    lc_engine *e = NULL;
    lc_worker *w = NULL;
    lc_notifier *n = NULL;
    lc_subscriber *s = NULL;
    CHECK(lc_engine_new(NULL, &e) == LC_RESULT_OK);
    CHECK(lc_worker_attach(e, -1, &w) == LC_RESULT_OK);
    pair("dead", e, &n, &s);
    CHECK(strcmp(matched_rule(w), "hotline") == 0);
    const uint64_t unix_ms = 1700000000000ull;
    size_t need = 0;
    CHECK(lc_notifier_save_dialogs(n, SECOND, unix_ms, NULL, 0, &need) == LC_RESULT_BUFFER_TOO_SMALL && need > 0);
    char doc[2048];
    size_t len = 0;
    CHECK(need < sizeof doc);
    CHECK(lc_notifier_save_dialogs(n, SECOND, unix_ms, (uint8_t *)doc, sizeof doc, &len) == LC_RESULT_OK && len == need);
    CHECK(strncmp(doc, "loadctl-dialogs 1\n", 18) == 0);
    CHECK(lc_notifier_save_dialogs(n, SECOND, unix_ms, (uint8_t *)doc, sizeof doc, NULL) == LC_RESULT_NULL_PARAMETER);
    /* SIGKILL: nothing sent. The next process starts 5 s later (its own clock from 0). */
    lc_notifier_free(n);
    n = NULL;
    pair("next", e, &n, &s);
    size_t queued = 99;
    const char *bad = "loadctl-dialogs 1\nonly\tthree\tfields\n";
    CHECK(lc_notifier_deactivate_saved(n, 0, unix_ms + 5000, (const uint8_t *)bad, strlen(bad), &queued) == LC_RESULT_INVALID_ARGUMENT);
    CHECK(queued == 99);
    CHECK(lc_notifier_deactivate_saved(n, 0, unix_ms + 5000, (const uint8_t *)"x", 1, &queued) == LC_RESULT_INVALID_ARGUMENT);
    CHECK(lc_notifier_deactivate_saved(n, 0, unix_ms + 5000, NULL, 0, &queued) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_notifier_deactivate_saved(NULL, 0, unix_ms + 5000, (const uint8_t *)doc, len, &queued) == LC_RESULT_NULL_PARAMETER);
    lc_sip_message m;
    CHECK(lc_notifier_poll_transmit(n, &m) == LC_RESULT_EMPTY);
    /* Past the subscription's expiry (3600 s): nothing to deactivate. */
    CHECK(lc_notifier_deactivate_saved(n, 0, unix_ms + 3600000, (const uint8_t *)doc, len, &queued) == LC_RESULT_OK && queued == 0);
    CHECK(lc_notifier_deactivate_saved(n, 0, unix_ms + 5000, (const uint8_t *)doc, len, &queued) == LC_RESULT_OK && queued == 1);
    /* The deactivation, then the new subscription: one NOTIFY each, the policy back in force. */
    CHECK(pump(s, n, 0) == 2);
    CHECK(strcmp(matched_rule(w), "hotline") == 0);
    int withdrawn = 0;
    lc_subscriber_event ev;
    while (lc_subscriber_poll_event(s, &ev) == LC_RESULT_OK) {
        withdrawn += ev.kind == LC_SUBSCRIBER_EVENT_KIND_POLICY_WITHDRAWN;
    }
    CHECK(withdrawn == 1);
    /* The new process holds the subscription: its save lists it. */
    CHECK(lc_notifier_save_dialogs(n, 0, unix_ms + 5000, (uint8_t *)doc, sizeof doc, &len) == LC_RESULT_OK);
    CHECK(len > 18 && memchr(doc + 18, '\t', len - 18) != NULL);
    lc_subscriber_free(s);
    lc_notifier_free(n);
    lc_worker_free(w);
    lc_engine_free(e);
}

static void test_refusals_and_nulls(void) {
    lc_notifier *n = NULL;
    lc_notifier_config nc;
    memset(&nc, 0, sizeof nc);
    nc.uri = str("sip:sbc.example.com");
    nc.tag = str("n1");
    nc.authorized = str("example.net");
    CHECK(lc_notifier_new(&nc, &n) == LC_RESULT_OK);
    /* A subscriber outside the authorised domains gets 403. */
    lc_sip_message m;
    memset(&m, 0, sizeof m);
    m.method = LC_METHOD_SUBSCRIBE;
    m.request_uri = str("sip:sbc.example.com");
    m.call_id = str("x1");
    m.from_uri = str("sip:intruder@evil.example");
    m.from_tag = str("t1");
    m.to_uri = str("sip:sbc.example.com");
    m.cseq = 1;
    m.event = str("load-control");
    m.expires = -1;
    m.min_expires = -1;
    m.retry_after = -1;
    lc_sip_message resp;
    CHECK(lc_notifier_handle_subscribe(n, 0, &m, &resp) == LC_RESULT_OK && resp.status == 403);
    m.from_uri = str("not a uri");
    CHECK(lc_notifier_handle_subscribe(n, 0, &m, &resp) == LC_RESULT_INVALID_ARGUMENT);
    const char *bad = "<ruleset/>";
    CHECK(lc_notifier_set_policy(n, 0, (const uint8_t *)bad, strlen(bad)) == LC_RESULT_INVALID_POLICY);
    CHECK(lc_notifier_set_policy(n, 0, NULL, 0) == LC_RESULT_OK);
    CHECK(lc_notifier_set_subscriber_policy(n, 0, str("sip:p@example.net"), NULL, 0, true) == LC_RESULT_OK);
    lc_notifier_event ev;
    CHECK(lc_notifier_poll_event(n, &ev) == LC_RESULT_OK && ev.kind == LC_NOTIFIER_EVENT_KIND_REFUSED && ev.number == 403);
    /* A configuration that cannot work is refused, with nothing created: an authorized entry
     * that is neither a SIP URI nor a host, and durations out of order (RFC 6665 §4.2.1.1:
     * the notifier shortens, never lengthens, so min ≤ default ≤ max). */
    const char *bad_entries[] = {"", "   ", "user@example.net", "sip:", "example..net", "[::zz]", "a/b", "tel:+1"};
    for (size_t i = 0; i < sizeof bad_entries / sizeof bad_entries[0]; i++) {
        lc_notifier *m2 = (lc_notifier *)&nc;
        nc.authorized = str(bad_entries[i]);
        CHECK(lc_notifier_new(&nc, &m2) == LC_RESULT_INVALID_ARGUMENT);
        CHECK(m2 == (lc_notifier *)&nc);
    }
    const char *good_entries = "sip:proxy@192.0.2.7:5060 p1.example.net *.example.org 192.0.2.9 [2001:db8::1]";
    nc.authorized = str(good_entries);
    lc_notifier *n2 = NULL;
    CHECK(lc_notifier_new(&nc, &n2) == LC_RESULT_OK);
    lc_notifier_free(n2);
    nc.authorized = NONE;
    nc.min_expires = 600;
    nc.max_expires = 300;
    CHECK(lc_notifier_new(&nc, &n2) == LC_RESULT_INVALID_ARGUMENT);
    nc.max_expires = 0; /* the default 3600 */
    nc.default_expires = 60;
    CHECK(lc_notifier_new(&nc, &n2) == LC_RESULT_INVALID_ARGUMENT);
    nc.default_expires = 600;
    CHECK(lc_notifier_new(&nc, &n2) == LC_RESULT_OK);
    lc_notifier_free(n2);
    /* NULL paths. */
    uint64_t t;
    CHECK(lc_notifier_new(NULL, &n) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_notifier_handle_subscribe(NULL, 0, &m, &resp) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_notifier_handle_subscribe(n, 0, NULL, &resp) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_notifier_handle_subscribe(n, 0, &m, NULL) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_notifier_handle_response(NULL, 0, &m) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_notifier_poll_transmit(NULL, &m) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_notifier_poll_timeout(n, NULL) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_notifier_handle_timeout(NULL, 0) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_notifier_shutdown(NULL, 0) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_notifier_poll_event(n, NULL) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_notifier_set_policy(NULL, 0, NULL, 0) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_subscriber_new(NULL, NULL, 0, NULL) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_subscriber_poll_transmit(NULL, &m) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_subscriber_handle_response(NULL, 0, &m) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_subscriber_handle_notify(NULL, 0, &m, &resp) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_subscriber_poll_timeout(NULL, &t) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_subscriber_handle_timeout(NULL, 0) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_subscriber_unsubscribe(NULL, 0) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_subscriber_poll_event(NULL, NULL) == LC_RESULT_NULL_PARAMETER);
    /* A subscriber with a missing URI is refused. */
    lc_engine *e = NULL;
    lc_subscriber *s = NULL;
    CHECK(lc_engine_new(NULL, &e) == LC_RESULT_OK);
    lc_subscriber_config sc;
    memset(&sc, 0, sizeof sc);
    sc.notifier = NONE;
    sc.subscriber = str("sip:p@example.net");
    sc.call_id = str("c");
    sc.tag = str("t");
    CHECK(lc_subscriber_new(e, &sc, 0, &s) == LC_RESULT_NULL_PARAMETER && s == NULL);
    /* The reserved redirect_allow is never read: bytes that are not UTF-8 there (a field that
     * does nothing must not fail the call) still give a subscriber. */
    static const uint8_t not_utf8[] = {0xff, 0xfe};
    sc.notifier = str("sip:sbc@example.net");
    sc.redirect_allow.ptr = not_utf8;
    sc.redirect_allow.len = sizeof not_utf8;
    CHECK(lc_subscriber_new(e, &sc, 0, &s) == LC_RESULT_OK && s != NULL);
    lc_subscriber_free(s);
    lc_subscriber_free(NULL);
    lc_notifier_free(NULL);
    lc_notifier_free(n);
    lc_engine_free(e);
}

/* The same exchange, but every message crosses as SIP bytes: transmit_wire renders, the other
 * side's receive_wire reads and answers in bytes. */
static void test_over_the_wire(void) {
    lc_engine *e = NULL;
    lc_worker *w = NULL;
    lc_notifier *n = NULL;
    lc_subscriber *s = NULL;
    CHECK(lc_engine_new(NULL, &e) == LC_RESULT_OK);
    CHECK(lc_worker_attach(e, -1, &w) == LC_RESULT_OK);
    lc_notifier_config nc;
    memset(&nc, 0, sizeof nc);
    nc.uri = str("sip:sbc@127.0.0.1:5080");
    nc.tag = str("n7");
    CHECK(lc_notifier_new(&nc, &n) == LC_RESULT_OK);
    const char *p = policy(100);
    CHECK(lc_notifier_set_policy(n, 0, (const uint8_t *)p, strlen(p)) == LC_RESULT_OK);
    lc_subscriber_config sc;
    memset(&sc, 0, sizeof sc);
    sc.notifier = str("sip:sbc@127.0.0.1:5080");
    sc.subscriber = str("sip:edge@127.0.0.1:5070");
    sc.call_id = str("wire-call");
    sc.tag = str("wire-tag");
    CHECK(lc_subscriber_new(e, &sc, 0, &s) == LC_RESULT_OK);
    lc_sip_wire sw = {str("UDP"), str("127.0.0.1:5070"), str("sip:edge@127.0.0.1:5070")};
    lc_sip_wire nw = {str("UDP"), str("127.0.0.1:5080"), str("sip:sbc@127.0.0.1:5080")};
    uint8_t out[4096];
    uint8_t reply[4096];
    size_t len = 0;
    size_t rlen = 0;
    /* A buffer too small keeps the SUBSCRIBE for the next call. */
    uint8_t tiny[16];
    CHECK(lc_subscriber_transmit_wire(s, &sw, str("z9hG4bKs1"), tiny, sizeof tiny, &len) ==
          LC_RESULT_BUFFER_TOO_SMALL);
    CHECK(len > sizeof tiny);
    CHECK(lc_subscriber_transmit_wire(s, &sw, str("z9hG4bKignored"), out, sizeof out, &len) ==
          LC_RESULT_OK);
    CHECK(len > 0 && memcmp(out, "SUBSCRIBE sip:sbc@127.0.0.1:5080 SIP/2.0\r\n", 42) == 0);
    CHECK(strstr((const char *)out, "branch=z9hG4bKs1") != NULL);
    CHECK(lc_subscriber_transmit_wire(s, &sw, str("z9hG4bKs2"), out, sizeof out, &len) ==
          LC_RESULT_EMPTY);
    /* A branch without the RFC 3261 cookie is refused. */
    CHECK(lc_subscriber_transmit_wire(s, &sw, str("nocookie"), out, sizeof out, &len) ==
          LC_RESULT_INVALID_ARGUMENT);
    CHECK(lc_subscriber_transmit_wire(s, &sw, str("z9hG4bKs0"), out, sizeof out, &len) ==
          LC_RESULT_EMPTY);
    /* Rebuild the SUBSCRIBE: the first one went into `out` above, then was overwritten. */
    lc_subscriber_free(s);
    s = NULL;
    CHECK(lc_subscriber_new(e, &sc, 0, &s) == LC_RESULT_OK);
    CHECK(lc_subscriber_transmit_wire(s, &sw, str("z9hG4bKs3"), out, sizeof out, &len) ==
          LC_RESULT_OK);
    /* The notifier answers it in bytes, with its Contact and the SUBSCRIBE's Via. */
    CHECK(lc_notifier_receive_wire(n, 0, out, len, &nw, reply, sizeof reply, &rlen) == LC_RESULT_OK);
    reply[rlen < sizeof reply ? rlen : sizeof reply - 1] = 0;
    CHECK(strncmp((const char *)reply, "SIP/2.0 200 OK\r\n", 16) == 0);
    CHECK(strstr((const char *)reply, "Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bKs3\r\n") != NULL);
    CHECK(strstr((const char *)reply, "Contact: <sip:sbc@127.0.0.1:5080>") != NULL);
    CHECK(lc_subscriber_receive_wire(s, 0, reply, rlen, &sw, out, sizeof out, &len) == LC_RESULT_OK);
    CHECK(len == 0);
    /* The NOTIFY with the policy, and the subscriber's 200 back. */
    CHECK(lc_notifier_transmit_wire(n, &nw, str("z9hG4bKn1"), out, sizeof out, &len) == LC_RESULT_OK);
    CHECK(strstr((const char *)out, "Content-Type: application/load-control+xml") != NULL);
    CHECK(lc_subscriber_receive_wire(s, 0, out, len, &sw, reply, sizeof reply, &rlen) == LC_RESULT_OK);
    CHECK(rlen > 0 && strncmp((const char *)reply, "SIP/2.0 200 OK", 14) == 0);
    CHECK(lc_notifier_receive_wire(n, 0, reply, rlen, &nw, out, sizeof out, &len) == LC_RESULT_OK);
    CHECK(len == 0);
    CHECK(strcmp(matched_rule(w), "hotline") == 0);
    /* What is not the package, or not for this end, is said so; garbage is a SIP error. */
    const char *invite = "INVITE sip:x@y SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bKi\r\n"
                         "From: <sip:a@b>;tag=1\r\nTo: <sip:x@y>\r\nCall-ID: c\r\nCSeq: 1 INVITE\r\n\r\n";
    CHECK(lc_subscriber_receive_wire(s, 0, (const uint8_t *)invite, strlen(invite), &sw, out,
                                     sizeof out, &len) == LC_RESULT_SIP_OTHER_MESSAGE);
    CHECK(lc_notifier_receive_wire(n, 0, reply, rlen, &nw, out, sizeof out, &len) ==
          LC_RESULT_OK); /* a repeated 200 to the NOTIFY: taken, nothing to send */
    const char *junk = "NOTIFY";
    CHECK(lc_subscriber_receive_wire(s, 0, (const uint8_t *)junk, strlen(junk), &sw, out,
                                     sizeof out, &len) == LC_RESULT_SIP_TRUNCATED);
    CHECK(lc_subscriber_receive_wire(NULL, 0, out, 1, &sw, out, sizeof out, &len) ==
          LC_RESULT_NULL_PARAMETER);
    lc_sip_wire bad = {NONE, str("h"), str("sip:h")};
    CHECK(lc_subscriber_transmit_wire(s, &bad, str("z9hG4bKx"), out, sizeof out, &len) ==
          LC_RESULT_NULL_PARAMETER);
    lc_subscriber_free(s);
    lc_notifier_free(n);
    lc_worker_free(w);
    lc_engine_free(e);
}

/* Third-party notifiers through the C ABI: a NOTIFY without a body keeps the policy (RFC 7200 §4.8), an
 * invalid document is reported with its notifier and version, warnings are reported, and the
 * counters say so. */
static void test_bodyless_warnings_and_refusals(void) {
    lc_engine *e = NULL;
    lc_worker *w = NULL;
    lc_subscriber *s = NULL;
    CHECK(lc_engine_new(NULL, &e) == LC_RESULT_OK);
    CHECK(lc_worker_attach(e, -1, &w) == LC_RESULT_OK);
    lc_subscriber_config sc;
    memset(&sc, 0, sizeof sc);
    sc.notifier = str("sip:sbc.example.com");
    sc.subscriber = str("sip:proxy.example.net");
    sc.call_id = str("c16");
    sc.tag = str("t16");
    CHECK(lc_subscriber_new(e, &sc, 0, &s) == LC_RESULT_OK);
    lc_sip_message sub;
    CHECK(lc_subscriber_poll_transmit(s, &sub) == LC_RESULT_OK);
    /* A SUBSCRIBE has no body: absent, as the header says absent strings are (NULL). */
    CHECK(sub.body.ptr == NULL && sub.body.len == 0);
    char call_id[64];
    snprintf(call_id, sizeof call_id, "%.*s", (int)sub.call_id.len, (const char *)sub.call_id.ptr);
    char from_tag[64];
    snprintf(from_tag, sizeof from_tag, "%.*s", (int)sub.from_tag.len, (const char *)sub.from_tag.ptr);
    lc_sip_message m;
    memset(&m, 0, sizeof m);
    m.method = LC_METHOD_NOTIFY;
    m.request_uri = str("sip:proxy.example.net");
    m.call_id = str(call_id);
    m.from_uri = str("sip:sbc.example.com");
    m.from_tag = str("n1");
    m.to_uri = str("sip:proxy.example.net");
    m.to_tag = str(from_tag);
    m.event = str("load-control");
    m.subscription_state = str("active;expires=3600");
    m.content_type = str("application/load-control+xml");
    m.expires = m.min_expires = m.retry_after = -1;
    m.contact = str("sip:notifier@192.0.2.9:5080");
    m.record_route = str("<sip:p1.example.net;lr>, <sip:p2.example.net;lr>");
    const char *p = policy(100);
    m.cseq = 1;
    m.body = str(p);
    lc_sip_message resp;
    CHECK(lc_subscriber_handle_notify(s, 0, &m, &resp) == LC_RESULT_OK && resp.status == 200);
    CHECK(strcmp(matched_rule(w), "hotline") == 0);
    /* Bodyless: nothing to update, the rule stays. */
    m.cseq = 2;
    m.body = NONE;
    CHECK(lc_subscriber_handle_notify(s, 0, &m, &resp) == LC_RESULT_OK && resp.status == 200);
    CHECK(strcmp(matched_rule(w), "hotline") == 0);
    /* An invalid document claiming version 9: refused, reported with notifier and version. */
    const char *bad = "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"9\" state=\"full\">"
                      "<rule id=\"x\"><actions><accept><rate>-1</rate></accept></actions></rule></ruleset>";
    m.cseq = 3;
    m.body = str(bad);
    CHECK(lc_subscriber_handle_notify(s, 0, &m, &resp) == LC_RESULT_OK && resp.status == 200);
    CHECK(strcmp(matched_rule(w), "hotline") == 0);
    /* A document with a warning (transformations are ignored): applied, warning reported. */
    const char *warned = "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"1\" state=\"full\">"
                         "<rule id=\"w\"><conditions><call-identity><sip><to><many-tel prefix=\"+1-212\"/></to></sip></call-identity></conditions>"
                         "<actions><accept><rate>5</rate></accept></actions><transformations/></rule></ruleset>";
    m.cseq = 4;
    m.body = str(warned);
    CHECK(lc_subscriber_handle_notify(s, 0, &m, &resp) == LC_RESULT_OK && resp.status == 200);
    CHECK(strcmp(matched_rule(w), "w") == 0);
    int nothing = 0, invalid = 0, warnings = 0;
    lc_subscriber_event ev;
    while (lc_subscriber_poll_event(s, &ev) == LC_RESULT_OK) {
        CHECK(ev.kind != LC_SUBSCRIBER_EVENT_KIND_POLICY_WITHDRAWN);
        if (ev.kind == LC_SUBSCRIBER_EVENT_KIND_NOTHING_TO_UPDATE) nothing++;
        if (ev.kind == LC_SUBSCRIBER_EVENT_KIND_INVALID_DOCUMENT) {
            invalid++;
            CHECK(ev.number == 9 && str_is(ev.notifier, "sip:sbc.example.com"));
        }
        if (ev.kind == LC_SUBSCRIBER_EVENT_KIND_DOCUMENT_WARNINGS) {
            warnings++;
            CHECK(ev.number == 1 && str_is(ev.notifier, "sip:sbc.example.com") && ev.text.len > 0);
        }
    }
    CHECK(nothing == 1 && invalid == 1 && warnings == 1);
    lc_subscriber_counters st;
    CHECK(lc_subscriber_stats(s, &st) == LC_RESULT_OK);
    CHECK(st.notifies == 4 && st.applied == 2 && st.bodyless == 1 && st.refused == 1 && st.warned == 1 &&
          st.withdrawn == 0);
    CHECK(lc_subscriber_stats(NULL, &st) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_subscriber_stats(s, NULL) == LC_RESULT_NULL_PARAMETER);
    /* The refresh goes to the NOTIFY's Contact through its Record-Route (RFC 3261 §12.2.1.1). */
    lc_sip_message ok;
    memset(&ok, 0, sizeof ok);
    ok.status = 200;
    ok.method = LC_METHOD_SUBSCRIBE;
    ok.call_id = str(call_id);
    ok.cseq = sub.cseq;
    ok.from_uri = str("sip:proxy.example.net");
    ok.from_tag = str(from_tag);
    ok.to_uri = str("sip:sbc.example.com");
    ok.to_tag = str("n1");
    ok.expires = 600;
    ok.min_expires = ok.retry_after = -1;
    CHECK(lc_subscriber_handle_response(s, 0, &ok) == LC_RESULT_OK);
    CHECK(lc_subscriber_handle_timeout(s, 540 * SECOND) == LC_RESULT_OK);
    lc_sip_message refresh;
    CHECK(lc_subscriber_poll_transmit(s, &refresh) == LC_RESULT_OK);
    CHECK(str_is(refresh.request_uri, "sip:notifier@192.0.2.9:5080"));
    CHECK(str_is(refresh.to_uri, "sip:sbc.example.com"));
    CHECK(str_is(refresh.route, "<sip:p1.example.net;lr>, <sip:p2.example.net;lr>"));
    /* A Record-Route that is not a list of URIs is refused at the boundary. */
    m.cseq = 5;
    m.record_route = str("<not a uri>");
    CHECK(lc_subscriber_handle_notify(s, 0, &m, &resp) == LC_RESULT_INVALID_ARGUMENT);
    lc_subscriber_free(s);
    lc_worker_free(w);
    lc_engine_free(e);
}

/* Over the wire: the notifier's Contact is not the URI subscribed to and a proxy record-routes
 * the NOTIFY; the refresh goes to the proxy, with the Contact as Request-URI. */
static void test_wire_remote_target(void) {
    lc_engine *e = NULL;
    lc_notifier *n = NULL;
    lc_subscriber *s = NULL;
    CHECK(lc_engine_new(NULL, &e) == LC_RESULT_OK);
    lc_notifier_config nc;
    memset(&nc, 0, sizeof nc);
    nc.uri = str("sip:sbc@127.0.0.1:5080");
    nc.tag = str("n7");
    nc.authorized = str("sip:edge@127.0.0.1:5070");
    CHECK(lc_notifier_new(&nc, &n) == LC_RESULT_OK);
    lc_subscriber_config sc;
    memset(&sc, 0, sizeof sc);
    sc.notifier = str("sip:sbc@127.0.0.1:5080");
    sc.subscriber = str("sip:edge@127.0.0.1:5070");
    sc.call_id = str("rt-call");
    sc.tag = str("rt-tag");
    sc.expires = 600;
    CHECK(lc_subscriber_new(e, &sc, 0, &s) == LC_RESULT_OK);
    lc_sip_wire sw = {str("UDP"), str("127.0.0.1:5070"), str("sip:edge@127.0.0.1:5070")};
    lc_sip_wire nw = {str("UDP"), str("127.0.0.1:5080"), str("sip:notifier@127.0.0.1:5090")};
    static uint8_t out[8192];
    static uint8_t reply[8192];
    size_t len = 0, rlen = 0;
    lc_str hop;
    CHECK(lc_subscriber_wire_next_hop(s, &hop) == LC_RESULT_EMPTY);
    CHECK(lc_subscriber_transmit_wire(s, &sw, str("z9hG4bKr1"), out, sizeof out, &len) == LC_RESULT_OK);
    CHECK(lc_subscriber_wire_next_hop(s, &hop) == LC_RESULT_OK && str_is(hop, "sip:sbc@127.0.0.1:5080"));
    CHECK(lc_notifier_receive_wire(n, 0, out, len, &nw, reply, sizeof reply, &rlen) == LC_RESULT_OK);
    CHECK(lc_subscriber_receive_wire(s, 0, reply, rlen, &sw, out, sizeof out, &len) == LC_RESULT_OK);
    /* The initial NOTIFY (no policy: no body), to the SUBSCRIBE's Contact. */
    CHECK(lc_notifier_transmit_wire(n, &nw, str("z9hG4bKn1"), out, sizeof out, &len) == LC_RESULT_OK);
    CHECK(lc_notifier_wire_next_hop(n, &hop) == LC_RESULT_OK && str_is(hop, "sip:edge@127.0.0.1:5070"));
    /* A proxy on the way record-routes it. */
    static char routed[8192];
    const char *mf = strstr((const char *)out, "Max-Forwards: 70\r\n");
    CHECK(mf != NULL);
    if (mf) {
        size_t head = (size_t)(mf - (const char *)out);
        int k = snprintf(routed, sizeof routed, "%.*sMax-Forwards: 69\r\nRecord-Route: <sip:rr.example.net;lr>\r\n%.*s",
                         (int)head, (const char *)out, (int)(len - head - 18), mf + 18);
        CHECK(lc_subscriber_receive_wire(s, 0, (const uint8_t *)routed, (size_t)k, &sw, reply, sizeof reply, &rlen) ==
              LC_RESULT_OK);
        CHECK(rlen > 0 && strncmp((const char *)reply, "SIP/2.0 200 OK", 14) == 0);
        reply[rlen] = 0;
        CHECK(strstr((const char *)reply, "Record-Route: <sip:rr.example.net;lr>\r\n") != NULL);
    }
    CHECK(lc_subscriber_handle_timeout(s, 540 * SECOND) == LC_RESULT_OK);
    CHECK(lc_subscriber_transmit_wire(s, &sw, str("z9hG4bKr2"), out, sizeof out, &len) == LC_RESULT_OK);
    out[len] = 0;
    CHECK(strncmp((const char *)out, "SUBSCRIBE sip:notifier@127.0.0.1:5090 SIP/2.0\r\n", 47) == 0);
    CHECK(strstr((const char *)out, "\r\nRoute: <sip:rr.example.net;lr>\r\n") != NULL);
    CHECK(lc_subscriber_wire_next_hop(s, &hop) == LC_RESULT_OK && str_is(hop, "sip:rr.example.net;lr"));
    CHECK(lc_subscriber_wire_next_hop(NULL, &hop) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_notifier_wire_next_hop(n, NULL) == LC_RESULT_NULL_PARAMETER);
    lc_subscriber_free(s);
    lc_notifier_free(n);
    lc_engine_free(e);
}

/* Moves messages between a notifier and several subscribers (NOTIFYs routed by To URI) until
 * all are quiet; returns the NOTIFYs delivered. */
static int pump_many(lc_subscriber **subs, const char **uris, int count, lc_notifier *n, uint64_t now) {
    int moved = 0;
    for (int round = 0; round < 20; round++) {
        int any = 0;
        lc_sip_message m;
        lc_sip_message resp;
        for (int k = 0; k < count; k++) {
            while (lc_subscriber_poll_transmit(subs[k], &m) == LC_RESULT_OK) {
                any = 1;
                CHECK(lc_notifier_handle_subscribe(n, now, &m, &resp) == LC_RESULT_OK);
                CHECK(lc_subscriber_handle_response(subs[k], now, &resp) == LC_RESULT_OK);
            }
        }
        while (lc_notifier_poll_transmit(n, &m) == LC_RESULT_OK) {
            any = 1;
            moved++;
            int k = 0;
            while (k < count && !str_is(m.to_uri, uris[k])) {
                k++;
            }
            CHECK(k < count);
            if (k == count) {
                return moved;
            }
            CHECK(lc_subscriber_handle_notify(subs[k], now, &m, &resp) == LC_RESULT_OK);
            CHECK(lc_notifier_handle_response(n, now, &resp) == LC_RESULT_OK);
        }
        if (!any) {
            break;
        }
    }
    return moved;
}

static int near(uint64_t got, uint64_t want) {
    return got + 2 >= want && got <= want + 2;
}

/* Sum of the shares the subscribers acknowledged (thousandths of a request per second). */
static uint64_t acknowledged(lc_notifier *n) {
    uint64_t sum = 0;
    lc_share sh;
    for (size_t i = 0; lc_notifier_share(n, i, &sh) == LC_RESULT_OK; i++) {
        if (sh.in_force_milli != UINT64_MAX) {
            sum += sh.in_force_milli;
        }
    }
    return sum;
}

static void test_shared_capacity(void) {
    lc_notifier *n = NULL;
    lc_notifier_config nc;
    memset(&nc, 0, sizeof nc);
    nc.uri = str("sip:sbc.example.com");
    nc.tag = str("n9");
    nc.authorized = str("example.net");
    CHECK(lc_notifier_new(&nc, &n) == LC_RESULT_OK);
    /* Refusals change nothing. */
    const char *t = policy(120);
    lc_allocator_config ac;
    CHECK(lc_allocator_config_default(&ac) == LC_RESULT_OK);
    CHECK(ac.period_ns == SECOND && ac.alpha_ppm == 1000000 && ac.busy_ppm == 970000 && ac.headroom_ppm == 150000);
    CHECK(ac.probe_ppm == 500000 && ac.hysteresis_ppm == 100000 && ac.min_share_milli == 1000);
    lc_allocator_config bad = ac;
    bad.busy_ppm = 0;
    CHECK(lc_notifier_set_capacity(n, 0, (const uint8_t *)t, strlen(t), &bad) == LC_RESULT_INVALID_ARGUMENT);
    bad = ac;
    bad.headroom_ppm = 10000; /* (1 + 0.01) * 0.97 < 1: a donor would look constrained */
    CHECK(lc_notifier_set_capacity(n, 0, (const uint8_t *)t, strlen(t), &bad) == LC_RESULT_INVALID_ARGUMENT);
    bad = ac;
    bad.period_ns = 0;
    CHECK(lc_notifier_set_capacity(n, 0, (const uint8_t *)t, strlen(t), &bad) == LC_RESULT_INVALID_ARGUMENT);
    const char *percent =
        "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"full\">"
        "<rule id=\"p\"><actions><accept><percent>50</percent></accept></actions></rule></ruleset>";
    CHECK(lc_notifier_set_capacity(n, 0, (const uint8_t *)percent, strlen(percent), NULL) == LC_RESULT_INVALID_ARGUMENT);
    const char *empty = "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"full\"/>";
    CHECK(lc_notifier_set_capacity(n, 0, (const uint8_t *)empty, strlen(empty), NULL) == LC_RESULT_INVALID_ARGUMENT);
    CHECK(lc_notifier_set_capacity(n, 0, (const uint8_t *)"<x", 2, NULL) == LC_RESULT_INVALID_POLICY);
    CHECK(lc_notifier_set_capacity(n, 0, NULL, 0, NULL) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_notifier_set_capacity(NULL, 0, (const uint8_t *)t, strlen(t), NULL) == LC_RESULT_NULL_PARAMETER);
    lc_share sh;
    CHECK(lc_notifier_share(n, 0, &sh) == LC_RESULT_EMPTY);
    CHECK(lc_notifier_observe(n, 0, str("sip:p1.example.net"), 1) == LC_RESULT_UNKNOWN_SOURCE);

    CHECK(lc_notifier_set_capacity(n, 0, (const uint8_t *)t, strlen(t), &ac) == LC_RESULT_OK);
    const char *uris[2] = {"sip:p1.example.net", "sip:p2.example.net"};
    lc_engine *e[2];
    lc_subscriber *s[2];
    for (int k = 0; k < 2; k++) {
        CHECK(lc_engine_new(NULL, &e[k]) == LC_RESULT_OK);
        lc_subscriber_config sc;
        memset(&sc, 0, sizeof sc);
        sc.notifier = str("sip:sbc.example.com");
        sc.subscriber = str(uris[k]);
        sc.call_id = str(k == 0 ? "cid-1" : "cid-2");
        sc.tag = str(k == 0 ? "t1" : "t2");
        CHECK(lc_subscriber_new(e[k], &sc, 0, &s[k]) == LC_RESULT_OK);
    }
    /* Alone, the first subscriber's first NOTIFY carries all of R. */
    CHECK(pump_many(s, uris, 1, n, 0) == 1);
    CHECK(lc_notifier_share(n, 0, &sh) == LC_RESULT_OK);
    CHECK(str_is(sh.subscriber, "sip:p1.example.net") && sh.target_milli == 120000 && sh.in_force_milli == 120000);
    CHECK(sh.usage_milli == UINT64_MAX && sh.constrained);
    /* The second one's first NOTIFY carries what is free (nothing yet): never more than R. */
    CHECK(pump_many(s, uris, 2, n, 0) == 1);
    CHECK(lc_notifier_share(n, 1, &sh) == LC_RESULT_OK);
    CHECK(str_is(sh.subscriber, "sip:p2.example.net") && sh.target_milli == 60000 && sh.in_force_milli == 0);
    CHECK(acknowledged(n) <= 120000);
    CHECK(lc_notifier_share(n, 2, &sh) == LC_RESULT_EMPTY);
    /* A second later (pacing) the first shrinks to 60, then the second grows to 60. */
    CHECK(lc_notifier_handle_timeout(n, SECOND) == LC_RESULT_OK);
    CHECK(pump_many(s, uris, 2, n, SECOND) == 2);
    CHECK(acknowledged(n) == 120000);
    CHECK(lc_notifier_share(n, 1, &sh) == LC_RESULT_OK && sh.in_force_milli == 60000);
    /* Observations: p1 sends 20/s, p2 sends at its share of 60. */
    for (uint64_t i = 1; i <= 40; i++) {
        CHECK(lc_notifier_observe(n, SECOND + i * SECOND / 20, str("sip:p1.example.net"), 1) == LC_RESULT_OK);
    }
    for (uint64_t i = 1; i <= 120; i++) {
        CHECK(lc_notifier_observe(n, SECOND + i * SECOND / 60, str("SIP:p2.EXAMPLE.net"), 1) == LC_RESULT_OK);
    }
    CHECK(lc_notifier_observe(n, SECOND, str("not a uri"), 1) == LC_RESULT_INVALID_ARGUMENT);
    CHECK(lc_notifier_observe(n, SECOND, str("sip:p3.example.net"), 1) == LC_RESULT_UNKNOWN_SOURCE);
    /* Water-filling over demands (20 × 1.15: a donor; 60 × 1.5: constrained at its share):
     * 23 for p1, the rest (97) for p2. */
    CHECK(lc_notifier_handle_timeout(n, 3 * SECOND) == LC_RESULT_OK);
    pump_many(s, uris, 2, n, 3 * SECOND);
    CHECK(lc_notifier_share(n, 0, &sh) == LC_RESULT_OK);
    /* (Shares are rounded down to a thousandth: allow 2 for the float arithmetic.) */
    CHECK(!sh.constrained && sh.usage_milli == 20000 && near(sh.target_milli, 23000) && sh.in_force_milli == sh.target_milli);
    CHECK(lc_notifier_share(n, 1, &sh) == LC_RESULT_OK);
    CHECK(sh.constrained && sh.usage_milli == 60000 && near(sh.target_milli, 97000) && sh.in_force_milli == sh.target_milli);
    CHECK(acknowledged(n) <= 120000 && acknowledged(n) >= 119996);
    /* Back to the common policy (none): the subscribers are cleared. */
    CHECK(lc_notifier_clear_capacity(n, 4 * SECOND) == LC_RESULT_OK);
    CHECK(lc_notifier_share(n, 0, &sh) == LC_RESULT_EMPTY);
    CHECK(lc_notifier_clear_capacity(NULL, 0) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_notifier_observe(NULL, 0, str("sip:p1.example.net"), 1) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_notifier_share(n, 0, NULL) == LC_RESULT_NULL_PARAMETER);
    CHECK(lc_allocator_config_default(NULL) == LC_RESULT_NULL_PARAMETER);
    for (int k = 0; k < 2; k++) {
        lc_subscriber_free(s[k]);
        lc_engine_free(e[k]);
    }
    lc_notifier_free(n);
}

int main(void) {
    test_back_to_back();
    test_refusals_and_nulls();
    test_over_the_wire();
    test_bodyless_warnings_and_refusals();
    test_wire_remote_target();
    test_shared_capacity();
    test_shutdown_reasons_and_resubscribe();
    test_saved_dialogs();
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
