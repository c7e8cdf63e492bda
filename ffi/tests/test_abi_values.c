/* The integer-and-check rule at the C boundary: every enum-like value a C caller passes in —
 * a parameter or a struct field (result codes, transports, methods, classes, disciplines,
 * flags) — is a uint32_t, every boolean input a uint8_t (0 or 1), and any value is defined
 * behaviour. An undeclared one is
 * LC_RESULT_INVALID_ARGUMENT with nothing changed and no output written; lc_result_text takes
 * any integer. (Before the rule, lc_result_text(7) died with SIGILL, (309) with SIGSEGV, (107)
 * returned another code's text, and a transport of 42 classified as OK.) */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "loadctl.h"
#include "check.h"

/* Values no enum-like type of the ABI declares, from just past the declared ones to the top of
 * the range (and the sign bit, where a C enum would turn negative). */
static const uint32_t BAD[] = {6, 7, 42, 255, 256, 65536, 0x7fffffffu, 0x80000000u, UINT32_MAX};
#define N_BAD (sizeof BAD / sizeof BAD[0])

static const char *UNKNOWN = "unknown result code";

static const char *INVITE =
    "INVITE sip:+12125551234@gw.example.com SIP/2.0\r\n"
    "Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK1\r\n"
    "From: <sip:alice@example.com>;tag=1\r\n"
    "To: <tel:+1-212-555-1234>\r\n"
    "Call-ID: 1@192.0.2.1\r\n"
    "CSeq: 1 INVITE\r\n\r\n";

/* Fills an output with a pattern no call writes, to tell that it was left alone. */
#define POISON(x) memset(&(x), 0xA5, sizeof(x))

static int is_poisoned(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        if (b[i] != 0xA5) {
            return 0;
        }
    }
    return 1;
}
#define UNTOUCHED(x) is_poisoned(&(x), sizeof(x))

static const lc_result DECLARED[] = {
    LC_RESULT_OK, LC_RESULT_NULL_PARAMETER, LC_RESULT_PANIC, LC_RESULT_INVALID_UTF8,
    LC_RESULT_BUFFER_TOO_SMALL, LC_RESULT_INVALID_ARGUMENT, LC_RESULT_EMPTY,
    LC_RESULT_INVALID_POLICY, LC_RESULT_NOT_FULL, LC_RESULT_VERSION_GAP, LC_RESULT_NO_BASE,
    LC_RESULT_UNKNOWN_RULE, LC_RESULT_TOO_MANY_RULES, LC_RESULT_UNKNOWN_SOURCE,
    LC_RESULT_PIN_FAILED, LC_RESULT_SIP_TRUNCATED, LC_RESULT_SIP_BAD_REQUEST_LINE,
    LC_RESULT_SIP_NOT_A_REQUEST, LC_RESULT_SIP_BAD_HEADER, LC_RESULT_SIP_MISSING_HEADER,
    LC_RESULT_SIP_BAD_CSEQ, LC_RESULT_SIP_MISSING_VIA, LC_RESULT_SIP_BAD_VIA,
    LC_RESULT_SIP_OTHER_MESSAGE, LC_RESULT_QUEUE_FULL, LC_RESULT_CELL_TABLE_INVALID,
    LC_RESULT_CELL_TABLE_FULL, LC_RESULT_CELL_TABLE_BUSY, LC_RESULT_OC_BAD_FEEDBACK,
    LC_RESULT_OC_TABLE_FULL,
};
#define N_DECLARED (sizeof DECLARED / sizeof DECLARED[0])

static int declared(uint32_t v) {
    for (size_t i = 0; i < N_DECLARED; i++) {
        if (DECLARED[i] == v) {
            return 1;
        }
    }
    return 0;
}

static void test_result_text_is_total(void) {
    /* Values just past a block of codes (7, 107, 309), between blocks (99), far ones, the top
     * of the range, and every value up to 1,000 that is no code. */
    const uint32_t named[] = {7, 99, 107, 309, 99999, 0x80000000u, UINT32_MAX};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        const char *t = lc_result_text(named[i]);
        CHECK(t != NULL && strcmp(t, UNKNOWN) == 0);
    }
    for (uint32_t v = 0; v <= 1000; v++) {
        const char *t = lc_result_text(v);
        CHECK(t != NULL);
        if (t != NULL && !declared(v)) {
            CHECK(strcmp(t, UNKNOWN) == 0);
        }
    }
    /* Every declared code has its own text: non-empty, not the unknown one, no two alike. */
    for (size_t i = 0; i < N_DECLARED; i++) {
        const char *t = lc_result_text(DECLARED[i]);
        CHECK(t != NULL && t[0] != '\0' && strcmp(t, UNKNOWN) != 0);
        for (size_t j = 0; j < i; j++) {
            CHECK(strcmp(t, lc_result_text(DECLARED[j])) != 0);
        }
    }
    CHECK(strcmp(lc_result_text(LC_RESULT_OK), "ok") == 0);
    CHECK(strcmp(lc_result_text(LC_RESULT_UNKNOWN_SOURCE), "no policy from that source") == 0);
    CHECK(strcmp(lc_result_text(LC_RESULT_SIP_OTHER_MESSAGE), "a SIP message this handle does not take") == 0);
}

static uint64_t classified(lc_engine *e) {
    lc_stats st;
    CHECK_RESULT(lc_engine_stats(e, &st), LC_RESULT_OK);
    return st.total;
}

static void test_transports(void) {
    lc_engine *e = NULL;
    lc_worker *w = NULL;
    CHECK_RESULT(lc_engine_new(NULL, &e), LC_RESULT_OK);
    CHECK_RESULT(lc_worker_attach(e, -1, &w), LC_RESULT_OK);
    const uint8_t *msg = (const uint8_t *)INVITE;
    size_t len = strlen(INVITE);
    lc_decision d;
    for (size_t i = 0; i < N_BAD; i++) {
        lc_transport t = (lc_transport)BAD[i];
        POISON(d);
        CHECK_RESULT(lc_classify_sip(w, msg, len, t, &d), LC_RESULT_INVALID_ARGUMENT);
        CHECK(UNTOUCHED(d));
        /* Checked before the message is scanned. */
        CHECK_RESULT(lc_classify_sip(w, (const uint8_t *)"x", 1, t, &d), LC_RESULT_INVALID_ARGUMENT);
        CHECK(UNTOUCHED(d));

        lc_request r;
        memset(&r, 0, sizeof r);
        r.method = str("INVITE");
        r.to = str("<tel:+1-212-555-1234>");
        r.transport = t;
        r.initial = 1;
        CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_INVALID_ARGUMENT);
        CHECK(UNTOUCHED(d));

        lc_sip_options o;
        memset(&o, 0, sizeof o);
        o.transport = t;
        CHECK_RESULT(lc_classify_sip_opts(w, msg, len, &o, &d), LC_RESULT_INVALID_ARGUMENT);
        CHECK(UNTOUCHED(d));
        o.transport = LC_TRANSPORT_UDP;
        o.flags = BAD[i] | LC_SIP_HAS_TIME;
        CHECK_RESULT(lc_classify_sip_opts(w, msg, len, &o, &d), LC_RESULT_INVALID_ARGUMENT);
        CHECK(UNTOUCHED(d));
    }
    CHECK(classified(e) == 0);
    /* Every declared transport classifies. */
    const lc_transport good[] = {LC_TRANSPORT_UDP, LC_TRANSPORT_TCP, LC_TRANSPORT_TLS,
                                 LC_TRANSPORT_SCTP, LC_TRANSPORT_WS, LC_TRANSPORT_WSS};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        CHECK_RESULT(lc_classify_sip(w, msg, len, good[i], &d), LC_RESULT_OK);
        CHECK(d.verdict == LC_VERDICT_ACCEPT && d.status == 0);
    }
    CHECK(classified(e) == 6);
    lc_worker_free(w);
    lc_engine_free(e);
}

static void test_engine_flags(void) {
    for (size_t i = 0; i < N_BAD; i++) {
        lc_engine_config c;
        CHECK_RESULT(lc_engine_config_default(&c), LC_RESULT_OK);
        c.exempt_flags = BAD[i] | LC_EXEMPT_EMERGENCY;
        lc_engine *e;
        POISON(e);
        CHECK_RESULT(lc_engine_new(&c, &e), LC_RESULT_INVALID_ARGUMENT);
        CHECK(UNTOUCHED(e));
    }
}

static void test_scheduler_values(void) {
    lc_scheduler_config c = {LC_DISCIPLINE_PRIORITY, 4, 4};
    lc_scheduler *sched = NULL;
    for (size_t i = 0; i < N_BAD; i++) {
        c.discipline = BAD[i];
        POISON(sched);
        CHECK_RESULT(lc_scheduler_new(&c, &sched), LC_RESULT_INVALID_ARGUMENT);
        CHECK(UNTOUCHED(sched));
    }
    c.discipline = LC_DISCIPLINE_PRIORITY;
    CHECK_RESULT(lc_scheduler_new(&c, &sched), LC_RESULT_OK);
    for (size_t i = 0; i < N_BAD; i++) {
        CHECK_RESULT(lc_scheduler_push(sched, (uintptr_t)i, (lc_class)BAD[i]), LC_RESULT_INVALID_ARGUMENT);
    }
    lc_scheduler_counters st;
    CHECK_RESULT(lc_scheduler_stats(sched, &st), LC_RESULT_OK);
    CHECK(st.primary.enqueued == 0 && st.secondary.enqueued == 0 && st.primary.len == 0);
    uintptr_t item;
    lc_class cls;
    CHECK_RESULT(lc_scheduler_pop(sched, &item, &cls), LC_RESULT_EMPTY);
    lc_scheduler_free(sched);
}

/* The event package: `lc_sip_message.method` on every entry point that reads a message. */
static void test_methods(void) {
    lc_engine *e = NULL;
    lc_notifier *n = NULL;
    lc_subscriber *s = NULL;
    CHECK_RESULT(lc_engine_new(NULL, &e), LC_RESULT_OK);
    lc_notifier_config nc;
    memset(&nc, 0, sizeof nc);
    nc.uri = str("sip:sbc.example.com");
    nc.tag = str("n7");
    CHECK_RESULT(lc_notifier_new(&nc, &n), LC_RESULT_OK);
    lc_subscriber_config sc;
    memset(&sc, 0, sizeof sc);
    sc.notifier = str("sip:sbc.example.com");
    sc.subscriber = str("sip:proxy.example.net");
    sc.call_id = str("abi-values");
    sc.tag = str("s1");
    CHECK_RESULT(lc_subscriber_new(e, &sc, 0, &s), LC_RESULT_OK);

    lc_sip_message sub;
    lc_sip_message resp;
    lc_notifier_event nev;
    CHECK_RESULT(lc_subscriber_poll_transmit(s, &sub), LC_RESULT_OK);
    CHECK(sub.method == LC_METHOD_SUBSCRIBE);
    for (size_t i = 0; i < N_BAD; i++) {
        lc_sip_message bad = sub;
        bad.method = (lc_method)BAD[i];
        POISON(resp);
        CHECK_RESULT(lc_notifier_handle_subscribe(n, 0, &bad, &resp), LC_RESULT_INVALID_ARGUMENT);
        CHECK(UNTOUCHED(resp));
    }
    CHECK_RESULT(lc_notifier_poll_event(n, &nev), LC_RESULT_EMPTY);
    /* The same SUBSCRIBE with its own method is taken. */
    CHECK_RESULT(lc_notifier_handle_subscribe(n, 0, &sub, &resp), LC_RESULT_OK);
    CHECK(resp.status == 200 && resp.method == LC_METHOD_SUBSCRIBE);
    CHECK_RESULT(lc_notifier_poll_event(n, &nev), LC_RESULT_OK);
    CHECK(nev.kind == LC_NOTIFIER_EVENT_KIND_SUBSCRIBED);

    /* The response to the SUBSCRIBE, with a bad method, then its own. */
    for (size_t i = 0; i < N_BAD; i++) {
        lc_sip_message bad = resp;
        bad.method = (lc_method)BAD[i];
        CHECK_RESULT(lc_subscriber_handle_response(s, 0, &bad), LC_RESULT_INVALID_ARGUMENT);
    }
    lc_subscriber_event ev;
    CHECK_RESULT(lc_subscriber_poll_event(s, &ev), LC_RESULT_EMPTY);
    CHECK_RESULT(lc_subscriber_handle_response(s, 0, &resp), LC_RESULT_OK);
    CHECK_RESULT(lc_subscriber_poll_event(s, &ev), LC_RESULT_OK);
    CHECK(ev.kind == LC_SUBSCRIBER_EVENT_KIND_SUBSCRIBED);

    /* The first NOTIFY, with a bad method: refused, nothing counted, no response. */
    lc_sip_message notify;
    CHECK_RESULT(lc_notifier_poll_transmit(n, &notify), LC_RESULT_OK);
    CHECK(notify.method == LC_METHOD_NOTIFY);
    lc_subscriber_counters before;
    lc_subscriber_counters after;
    CHECK_RESULT(lc_subscriber_stats(s, &before), LC_RESULT_OK);
    for (size_t i = 0; i < N_BAD; i++) {
        lc_sip_message bad = notify;
        bad.method = (lc_method)BAD[i];
        POISON(resp);
        CHECK_RESULT(lc_subscriber_handle_notify(s, 0, &bad, &resp), LC_RESULT_INVALID_ARGUMENT);
        CHECK(UNTOUCHED(resp));
    }
    CHECK_RESULT(lc_subscriber_stats(s, &after), LC_RESULT_OK);
    CHECK(memcmp(&before, &after, sizeof before) == 0);
    CHECK_RESULT(lc_subscriber_handle_notify(s, 0, &notify, &resp), LC_RESULT_OK);
    CHECK(resp.status == 200 && resp.method == LC_METHOD_NOTIFY);
    CHECK_RESULT(lc_subscriber_stats(s, &after), LC_RESULT_OK);
    CHECK(after.notifies == before.notifies + 1);

    /* The 200 to the NOTIFY, with a bad method, then its own. */
    for (size_t i = 0; i < N_BAD; i++) {
        lc_sip_message bad = resp;
        bad.method = (lc_method)BAD[i];
        CHECK_RESULT(lc_notifier_handle_response(n, 0, &bad), LC_RESULT_INVALID_ARGUMENT);
    }
    CHECK_RESULT(lc_notifier_handle_response(n, 0, &resp), LC_RESULT_OK);

    lc_subscriber_free(s);
    lc_notifier_free(n);
    lc_engine_free(e);
}

/* Boolean inputs are bytes: 0 and 1 are false and true, anything else is refused with nothing
 * changed (a Rust bool holding 2 would be undefined behaviour, and a memset or a bad cast in C
 * can put any byte there). */
static void test_booleans(void) {
    lc_engine *e = NULL;
    lc_worker *w = NULL;
    CHECK_RESULT(lc_engine_new(NULL, &e), LC_RESULT_OK);
    CHECK_RESULT(lc_worker_attach(e, -1, &w), LC_RESULT_OK);
    lc_decision d;
    for (unsigned v = 2; v <= 255; v++) {
        lc_request r;
        memset(&r, 0, sizeof r);
        r.method = str("INVITE");
        r.to = str("<tel:+1-212-555-1234>");
        r.initial = (uint8_t)v;
        POISON(d);
        CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_INVALID_ARGUMENT);
        CHECK(UNTOUCHED(d));
        r.initial = 1;
        r.has_time = (uint8_t)v;
        CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_INVALID_ARGUMENT);
        CHECK(UNTOUCHED(d));
        r.has_time = 0;
        r.known_dialog = (uint8_t)v;
        CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_INVALID_ARGUMENT);
        CHECK(UNTOUCHED(d));
    }
    CHECK(classified(e) == 0);
    lc_request r;
    memset(&r, 0, sizeof r);
    r.method = str("INVITE");
    r.initial = 1;
    r.has_time = 1;
    CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
    r.initial = 0;
    r.has_time = 0;
    CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
    CHECK(classified(e) == 2);

    lc_subscriber_config sc;
    memset(&sc, 0, sizeof sc);
    sc.notifier = str("sip:sbc.example.com");
    sc.subscriber = str("sip:proxy.example.net");
    sc.call_id = str("abi-bool");
    sc.tag = str("s1");
    lc_subscriber *s;
    for (unsigned v = 2; v <= 255; v++) {
        sc.scope_to_notifier = (uint8_t)v;
        POISON(s);
        CHECK_RESULT(lc_subscriber_new(e, &sc, 0, &s), LC_RESULT_INVALID_ARGUMENT);
        CHECK(UNTOUCHED(s));
    }
    sc.scope_to_notifier = 1;
    CHECK_RESULT(lc_subscriber_new(e, &sc, 0, &s), LC_RESULT_OK);
    lc_subscriber_free(s);

    /* `clear` of lc_notifier_set_subscriber_policy: a refused call queues no NOTIFY. */
    lc_notifier_config nc;
    memset(&nc, 0, sizeof nc);
    nc.uri = str("sip:sbc.example.com");
    nc.tag = str("n7");
    lc_notifier *n = NULL;
    CHECK_RESULT(lc_notifier_new(&nc, &n), LC_RESULT_OK);
    for (unsigned v = 2; v <= 255; v++) {
        CHECK_RESULT(lc_notifier_set_subscriber_policy(n, 0, str("sip:p@example.net"), NULL, 0, (uint8_t)v),
                     LC_RESULT_INVALID_ARGUMENT);
    }
    lc_sip_message m;
    CHECK_RESULT(lc_notifier_poll_transmit(n, &m), LC_RESULT_EMPTY);
    CHECK_RESULT(lc_notifier_set_subscriber_policy(n, 0, str("sip:p@example.net"), NULL, 0, 1), LC_RESULT_OK);
    lc_notifier_free(n);
    lc_worker_free(w);

    /* A core number is ≥ 0, or -1 for none: anything below is refused, no worker made. */
    const int32_t bad_cores[] = {-2, -42, INT32_MIN};
    for (size_t i = 0; i < sizeof bad_cores / sizeof bad_cores[0]; i++) {
        POISON(w);
        CHECK_RESULT(lc_worker_attach(e, bad_cores[i], &w), LC_RESULT_INVALID_ARGUMENT);
        CHECK(UNTOUCHED(w));
    }
    lc_engine_free(e);
}

/* A ticket is two integers a C caller stores and gives back; any pair is safe to pass. One the
 * engine did not issue releases nothing: a window of 2, full, stays full whatever garbage is
 * completed, and the real tickets still release their slots. */
static void test_tickets(void) {
    const char *win = "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"full\">"
                      "<rule id=\"trunk\"><conditions><method>INVITE</method></conditions>"
                      "<actions><accept><win>2</win></accept></actions></rule></ruleset>";
    lc_engine *e = NULL;
    lc_worker *w = NULL;
    uint64_t g;
    CHECK_RESULT(lc_engine_new(NULL, &e), LC_RESULT_OK);
    CHECK_RESULT(lc_worker_attach(e, -1, &w), LC_RESULT_OK);
    CHECK_RESULT(lc_engine_publish(e, str("op"), NONE, (const uint8_t *)win, strlen(win), &g), LC_RESULT_OK);
    lc_request r;
    memset(&r, 0, sizeof r);
    r.method = str("INVITE");
    r.initial = 1;
    lc_decision d;
    lc_ticket held[2];
    for (int i = 0; i < 2; i++) {
        CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
        CHECK(d.verdict == LC_VERDICT_ACCEPT && d.has_ticket);
        held[i] = d.ticket;
    }
    /* Garbage: zero, all ones, the real hint with other keys, the real key with other hints
     * is still the real ticket (the key names the rule), so it is left out. */
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 1000; i++) {
        lc_ticket t;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t.key = i == 0 ? 0 : i == 1 ? UINT64_MAX : x;
        t.hint = (i % 2) ? held[0].hint : x * 31;
        if (t.key == held[0].key) {
            continue;
        }
        CHECK_RESULT(lc_complete(w, &t), LC_RESULT_OK);
    }
    CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
    CHECK(d.verdict == LC_VERDICT_REJECT && !d.has_ticket);
    CHECK_RESULT(lc_complete(w, &held[0]), LC_RESULT_OK);
    CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
    CHECK(d.verdict == LC_VERDICT_ACCEPT && d.has_ticket);
    lc_worker_free(w);
    lc_engine_free(e);
}

/* lc_notifier_shutdown_with_reason: only LC_SHUTDOWN_RESTART (retry-after 1 to 86400) and
 * LC_SHUTDOWN_DECOMMISSION (retry-after 0); anything else ends nothing and queues nothing. */
static void test_shutdown_reasons(void) {
    lc_engine *e = NULL;
    lc_notifier *n = NULL;
    lc_subscriber *s = NULL;
    CHECK_RESULT(lc_engine_new(NULL, &e), LC_RESULT_OK);
    lc_notifier_config nc;
    memset(&nc, 0, sizeof nc);
    nc.uri = str("sip:sbc.example.com");
    nc.tag = str("n8");
    CHECK_RESULT(lc_notifier_new(&nc, &n), LC_RESULT_OK);
    lc_subscriber_config sc;
    memset(&sc, 0, sizeof sc);
    sc.notifier = str("sip:sbc.example.com");
    sc.subscriber = str("sip:proxy.example.net");
    sc.call_id = str("abi-shutdown");
    sc.tag = str("s2");
    CHECK_RESULT(lc_subscriber_new(e, &sc, 0, &s), LC_RESULT_OK);
    lc_sip_message sub;
    lc_sip_message resp;
    lc_sip_message notify;
    CHECK_RESULT(lc_subscriber_poll_transmit(s, &sub), LC_RESULT_OK);
    CHECK_RESULT(lc_notifier_handle_subscribe(n, 0, &sub, &resp), LC_RESULT_OK);
    CHECK_RESULT(lc_notifier_poll_transmit(n, &notify), LC_RESULT_OK);
    for (uint32_t v = 2; v <= 1000; v++) {
        CHECK_RESULT(lc_notifier_shutdown_with_reason(n, 0, v, 5), LC_RESULT_INVALID_ARGUMENT);
        CHECK_RESULT(lc_notifier_shutdown_with_reason(n, 0, v, 0), LC_RESULT_INVALID_ARGUMENT);
    }
    for (size_t i = 0; i < N_BAD; i++) {
        CHECK_RESULT(lc_notifier_shutdown_with_reason(n, 0, BAD[i], 5), LC_RESULT_INVALID_ARGUMENT);
    }
    const uint32_t bad_retry[] = {0, 86401, 0x80000000u, UINT32_MAX};
    for (size_t i = 0; i < sizeof bad_retry / sizeof bad_retry[0]; i++) {
        CHECK_RESULT(lc_notifier_shutdown_with_reason(n, 0, LC_SHUTDOWN_RESTART, bad_retry[i]), LC_RESULT_INVALID_ARGUMENT);
    }
    CHECK_RESULT(lc_notifier_shutdown_with_reason(n, 0, LC_SHUTDOWN_DECOMMISSION, 1), LC_RESULT_INVALID_ARGUMENT);
    CHECK_RESULT(lc_notifier_shutdown_with_reason(n, 0, LC_SHUTDOWN_DECOMMISSION, UINT32_MAX), LC_RESULT_INVALID_ARGUMENT);
    CHECK_RESULT(lc_notifier_poll_transmit(n, &notify), LC_RESULT_EMPTY);
    CHECK_RESULT(lc_notifier_shutdown_with_reason(n, 0, LC_SHUTDOWN_RESTART, 86400), LC_RESULT_OK);
    CHECK_RESULT(lc_notifier_poll_transmit(n, &notify), LC_RESULT_OK);
    CHECK(notify.subscription_state.len == strlen("terminated;reason=probation;retry-after=86400") &&
          memcmp(notify.subscription_state.ptr, "terminated;reason=probation;retry-after=86400", notify.subscription_state.len) == 0);
    lc_subscriber_free(s);
    lc_notifier_free(n);
    lc_engine_free(e);
}

int main(void) {
    test_result_text_is_total();
    test_booleans();
    test_tickets();
    test_transports();
    test_engine_flags();
    test_scheduler_values();
    test_methods();
    test_shutdown_reasons();
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
