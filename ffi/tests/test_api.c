/* The C ABI end to end: lifecycle, every NULL path, policies (valid, invalid, partial),
 * classification of the RFC 7200 Appendix D.1 examples, raw SIP messages (with options: target,
 * time, transport), window tickets, stats, exemptions, redirect agreement. Built with -std=c11 -Wall -Wextra -Wpedantic -Werror and run under ASan+UBSan and
 * under valgrind (see the Makefile's c-test target). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadctl.h"
#include "check.h"

static const char *EXAMPLE1 =
    "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\"\n"
    "         xmlns:lc=\"urn:ietf:params:xml:ns:load-control\" version=\"0\" state=\"full\">\n"
    "  <rule id=\"f3g44k1\"><conditions><lc:call-identity><lc:sip><lc:to>\n"
    "    <one id=\"sip:alice@hotline.example.com\"/><one id=\"tel:+1-212-555-1234\"/>\n"
    "  </lc:to></lc:sip></lc:call-identity><method>INVITE</method>\n"
    "  <validity><from>2008-05-31T12:00:00-05:00</from><until>2008-05-31T15:00:00-05:00</until></validity>\n"
    "  </conditions><actions><lc:accept alt-action=\"reject\"><lc:rate>100</lc:rate></lc:accept></actions></rule>\n"
    "</ruleset>\n";

static const char *EXAMPLE2 =
    "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\"\n"
    "         xmlns:lc=\"urn:ietf:params:xml:ns:load-control\" version=\"1\" state=\"full\">\n"
    "  <rule id=\"f3g44k2\"><conditions><lc:call-identity><lc:sip>\n"
    "    <lc:to><many domain=\"sandy.example.com\"/><many-tel prefix=\"+1-212\"/></lc:to>\n"
    "    <lc:from><many><except domain=\"sandy.example.com\"/><except domain=\"rescue.example.com\"/></many></lc:from>\n"
    "  </lc:sip></lc:call-identity><method>INVITE</method></conditions>\n"
    "  <actions><lc:accept alt-action=\"redirect\" alt-target=\"sip:sandy@update.example.com\"><lc:rate>0</lc:rate></lc:accept></actions></rule>\n"
    "</ruleset>\n";

static const char *EXAMPLE3 =
    "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\"\n"
    "         xmlns:lc=\"urn:ietf:params:xml:ns:load-control\" version=\"2\" state=\"full\">\n"
    "  <rule id=\"f3g44k3\"><conditions><lc:call-identity><lc:sip><lc:from><many domain=\"example.com\"/></lc:from>\n"
    "  </lc:sip></lc:call-identity></conditions>\n"
    "  <actions><lc:accept alt-action=\"reject\"><lc:rate>0</lc:rate></lc:accept></actions></rule>\n"
    "  <rule id=\"f3g44k4\"><conditions><lc:call-identity><lc:sip><lc:from><one id=\"sip:alice@example.com\"/></lc:from>\n"
    "  </lc:sip></lc:call-identity></conditions>\n"
    "  <actions><lc:accept alt-action=\"redirect\" alt-target=\"sip:eve@example.com\"><lc:rate>0</lc:rate></lc:accept></actions></rule>\n"
    "</ruleset>\n";

static lc_result publish(lc_engine *e, const char *source, const char *body, uint64_t *generation) {
    return lc_engine_publish(e, str(source), NONE, (const uint8_t *)body, strlen(body), generation);
}

static lc_request invite(const char *from, const char *to) {
    lc_request r;
    memset(&r, 0, sizeof r);
    r.method = str("INVITE");
    r.from = str(from);
    r.to = str(to);
    r.transport = LC_TRANSPORT_UDP;
    r.initial = true;
    return r;
}

static void test_version_and_lifecycle(void) {
    CHECK(strcmp(lc_version(), LC_VERSION) == 0);
    CHECK(strcmp(lc_result_text(LC_RESULT_OK), "ok") == 0);
    CHECK(strlen(lc_result_text(LC_RESULT_SIP_BAD_CSEQ)) > 0);
    lc_engine_config config;
    CHECK_RESULT(lc_engine_config_default(&config), LC_RESULT_OK);
    CHECK(config.burst_tolerance_ms == 100);
    CHECK(config.shards >= 1);
    config.shards = 0;
    lc_engine *e = NULL;
    CHECK_RESULT(lc_engine_new(&config, &e), LC_RESULT_INVALID_ARGUMENT);
    CHECK(e == NULL);
    config.shards = 2;
    config.redirect_allow = str("trusted.example");
    CHECK_RESULT(lc_engine_new(&config, &e), LC_RESULT_OK);
    lc_worker *w = NULL;
    CHECK_RESULT(lc_worker_attach(e, -1, &w), LC_RESULT_OK);
    CHECK(w != NULL);
    /* Freeing the engine first is allowed: the worker keeps its policy. */
    lc_engine_free(e);
    lc_request r = invite("<sip:a@b.example>", "<sip:c@d.example>");
    lc_decision d;
    CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
    CHECK(d.verdict == LC_VERDICT_ACCEPT && !d.matched);
    lc_worker_free(w);
    lc_worker_free(NULL);
    lc_engine_free(NULL);
}

static void test_null_parameters(void) {
    lc_engine *e = NULL;
    CHECK_RESULT(lc_engine_new(NULL, &e), LC_RESULT_OK); /* NULL config: defaults */
    lc_worker *w = NULL;
    CHECK_RESULT(lc_worker_attach(e, -1, &w), LC_RESULT_OK);
    uint64_t g = 0;
    size_t n = 0;
    char buf[16];
    lc_stats st;
    lc_decision d;
    lc_request r = invite("<sip:a@b>", "<sip:c@d>");
    lc_ticket t = {0, 0};
    const uint8_t *body = (const uint8_t *)EXAMPLE3;
    CHECK_RESULT(lc_engine_config_default(NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_engine_new(NULL, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_engine_publish(NULL, str("s"), NONE, body, strlen(EXAMPLE3), &g), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_engine_publish(e, NONE, NONE, body, strlen(EXAMPLE3), &g), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_engine_publish(e, str("s"), NONE, NULL, 0, &g), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_engine_publish(e, str("s"), NONE, body, strlen(EXAMPLE3), NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_engine_apply(NULL, str("s"), NONE, body, strlen(EXAMPLE3), &g), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_engine_withdraw(NULL, str("s"), &g), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_engine_withdraw(e, NONE, &g), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_engine_withdraw(e, str("s"), NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_policy_check(NULL, 0, (uint8_t *)buf, sizeof buf, &n), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_policy_check(body, 1, (uint8_t *)buf, sizeof buf, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_engine_stats(NULL, &st), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_engine_stats(e, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_engine_stats_each(e, NULL, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_engine_prometheus(NULL, (uint8_t *)buf, sizeof buf, &n), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_engine_prometheus(e, (uint8_t *)buf, sizeof buf, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_worker_attach(NULL, -1, &w), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_worker_attach(e, -1, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_classify(NULL, &r, &d), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_classify(w, NULL, &d), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_classify(w, &r, NULL), LC_RESULT_NULL_PARAMETER);
    r.method = NONE;
    CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_classify_sip(NULL, body, 1, LC_TRANSPORT_UDP, &d), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_classify_sip(w, NULL, 1, LC_TRANSPORT_UDP, &d), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_classify_sip(w, body, 1, LC_TRANSPORT_UDP, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_complete(NULL, &t), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_complete(w, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK(g == 0 && n == 0);
    lc_worker_free(w);
    lc_engine_free(e);
}

static void test_policies(void) {
    lc_engine *e = NULL;
    CHECK_RESULT(lc_engine_new(NULL, &e), LC_RESULT_OK);
    uint64_t g = 0;
    CHECK_RESULT(publish(e, "notifier-a", EXAMPLE3, &g), LC_RESULT_OK);
    CHECK(g == 1);
    /* An invalid document is refused and the old policy stays. */
    const char *bad = "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"3\" state=\"full\">\n"
                      "<rule id=\"x\"><actions><accept><rate>-1</rate></accept></actions></rule></ruleset>";
    CHECK_RESULT(publish(e, "notifier-a", bad, &g), LC_RESULT_INVALID_POLICY);
    lc_stats st;
    CHECK_RESULT(lc_engine_stats(e, &st), LC_RESULT_OK);
    CHECK(st.generation == 1 && st.rules == 2);
    char msg[256];
    size_t n = 0;
    CHECK_RESULT(lc_policy_check((const uint8_t *)bad, strlen(bad), (uint8_t *)msg, sizeof msg, &n), LC_RESULT_INVALID_POLICY);
    CHECK(n > 0 && n < sizeof msg);
    msg[n < sizeof msg ? n : sizeof msg - 1] = 0;
    CHECK(strncmp(msg, "2:", 2) == 0 && strstr(msg, "negative") != NULL);
    CHECK_RESULT(lc_policy_check((const uint8_t *)bad, strlen(bad), (uint8_t *)msg, 4, &n), LC_RESULT_BUFFER_TOO_SMALL);
    CHECK_RESULT(lc_policy_check((const uint8_t *)EXAMPLE1, strlen(EXAMPLE1), (uint8_t *)msg, sizeof msg, &n), LC_RESULT_OK);
    CHECK(n == 0);
    /* Partial documents: version 3 follows 2; a gap and a partial publish are refused. */
    const char *partial = "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"3\" state=\"partial\">"
                          "<rule id=\"f3g44k4\"><actions/></rule></ruleset>";
    CHECK_RESULT(lc_engine_publish(e, str("notifier-a"), NONE, (const uint8_t *)partial, strlen(partial), &g), LC_RESULT_NOT_FULL);
    CHECK_RESULT(lc_engine_apply(e, str("notifier-a"), NONE, (const uint8_t *)partial, strlen(partial), &g), LC_RESULT_OK);
    CHECK(g == 2);
    /* The merged policy exported as one full document: another engine that publishes it has
     * the same rules (only f3g44k3 is left), and exports the same text. */
    size_t need = 0;
    CHECK_RESULT(lc_engine_source_policy(e, str("notifier-a"), NULL, 0, &need), LC_RESULT_BUFFER_TOO_SMALL);
    CHECK(need > 0);
    char *doc = calloc(need + 1, 1), *again = calloc(need + 1, 1); /* NUL-terminated for strstr */
    size_t got = 0, got2 = 0;
    CHECK_RESULT(lc_engine_source_policy(e, str("notifier-a"), (uint8_t *)doc, need, &got), LC_RESULT_OK);
    CHECK(got == need && strstr(doc, "f3g44k3") != NULL && strstr(doc, "f3g44k4") == NULL);
    CHECK(strstr(doc, "state=\"full\"") != NULL && strstr(doc, "version=\"3\"") != NULL);
    lc_engine *copy = NULL;
    uint64_t g2 = 0;
    CHECK_RESULT(lc_engine_new(NULL, &copy), LC_RESULT_OK);
    CHECK_RESULT(lc_engine_publish(copy, str("notifier-a"), NONE, (const uint8_t *)doc, got, &g2), LC_RESULT_OK);
    CHECK_RESULT(lc_engine_source_policy(copy, str("notifier-a"), (uint8_t *)again, need, &got2), LC_RESULT_OK);
    CHECK(got2 == got && memcmp(doc, again, got) == 0);
    CHECK_RESULT(lc_engine_stats(copy, &st), LC_RESULT_OK);
    CHECK(st.rules == 1);
    CHECK_RESULT(lc_engine_source_policy(copy, str("nobody"), (uint8_t *)again, need, &got2), LC_RESULT_UNKNOWN_SOURCE);
    CHECK_RESULT(lc_engine_source_policy(copy, NONE, (uint8_t *)again, need, &got2), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_engine_source_policy(NULL, str("notifier-a"), (uint8_t *)again, need, &got2), LC_RESULT_NULL_PARAMETER);
    lc_engine_free(copy);
    free(doc);
    free(again);
    CHECK_RESULT(lc_engine_apply(e, str("notifier-a"), NONE, (const uint8_t *)partial, strlen(partial), &g), LC_RESULT_VERSION_GAP);
    CHECK_RESULT(lc_engine_apply(e, str("nobody"), NONE, (const uint8_t *)partial, strlen(partial), &g), LC_RESULT_NO_BASE);
    CHECK_RESULT(lc_engine_withdraw(e, str("nobody"), &g), LC_RESULT_UNKNOWN_SOURCE);
    CHECK_RESULT(lc_engine_withdraw(e, str("notifier-a"), &g), LC_RESULT_OK);
    CHECK(g == 3);
    /* A notifier URI that does not parse. */
    CHECK_RESULT(lc_engine_publish(e, str("x"), str("not a uri"), (const uint8_t *)EXAMPLE3, strlen(EXAMPLE3), &g), LC_RESULT_INVALID_ARGUMENT);
    lc_engine_free(e);
}

/* Header values that are not ASCII: valid UTF-8 takes the full check, invalid UTF-8 is cut
 * down to its URI; a method that is not UTF-8 is refused. */
static void test_non_ascii_and_invalid_utf8(void) {
    lc_engine *e = NULL;
    lc_worker *w = NULL;
    uint64_t g;
    lc_decision d;
    CHECK_RESULT(lc_engine_new(NULL, &e), LC_RESULT_OK);
    CHECK_RESULT(lc_worker_attach(e, -1, &w), LC_RESULT_OK);
    CHECK_RESULT(publish(e, "ex", EXAMPLE3, &g), LC_RESULT_OK);
    lc_request r = invite("\"Zo\xc3\xab\" <sip:alice@example.com>;tag=1", "<sip:x@y.example>");
    CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
    CHECK(d.verdict == LC_VERDICT_REJECT && str_is(d.rule_id, "f3g44k3"));
    r = invite("\"\xff\xfe\" <sip:alice@example.com>;tag=1", "<sip:x@y.example>");
    CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
    CHECK(d.verdict == LC_VERDICT_REJECT && str_is(d.rule_id, "f3g44k3"));
    r = invite("\xff<sip:alice@example.com", "<sip:x@y.example>");
    CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
    CHECK(d.verdict == LC_VERDICT_ACCEPT && !d.matched);
    r = invite("<sip:alice@example.com>", "<sip:x@y.example>");
    r.method = str("INV\xffITE");
    CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_INVALID_UTF8);
    lc_worker_free(w);
    lc_engine_free(e);
}

static void test_rfc_examples(void) {
    lc_engine *e = NULL;
    lc_worker *w = NULL;
    uint64_t g;
    lc_decision d;
    CHECK_RESULT(lc_engine_new(NULL, &e), LC_RESULT_OK);
    CHECK_RESULT(lc_worker_attach(e, -1, &w), LC_RESULT_OK);
    /* Example 3: first match wins. */
    CHECK_RESULT(publish(e, "ex", EXAMPLE3, &g), LC_RESULT_OK);
    lc_request r = invite("\"Alice\" <sip:alice@example.com>;tag=1", "<sip:x@y.example>");
    CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
    CHECK(d.verdict == LC_VERDICT_REJECT && d.status == 503 && d.matched);
    CHECK(str_is(d.rule_id, "f3g44k3") && str_is(d.source, "ex"));
    r = invite("<sip:alice@other.example>", "<sip:x@y.example>");
    CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
    CHECK(d.verdict == LC_VERDICT_ACCEPT && !d.matched && d.status == 0 && d.rule_id.ptr == NULL);
    /* Example 2: redirect with the target as Contact; excepted domains pass. */
    CHECK_RESULT(publish(e, "ex", EXAMPLE2, &g), LC_RESULT_OK);
    r = invite("<sip:worried@family.example>", "<tel:+1-212-555-0000>");
    CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
    CHECK(d.verdict == LC_VERDICT_REDIRECT && d.status == 302 && d.target_count == 1);
    CHECK(str_is(d.targets[0], "sip:sandy@update.example.com"));
    r = invite("<sip:team@rescue.example.com>", "<sip:kin@sandy.example.com>");
    CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
    CHECK(!d.matched);
    /* Example 1: validity decides, with the time given by the caller. */
    CHECK_RESULT(publish(e, "ex", EXAMPLE1, &g), LC_RESULT_OK);
    r = invite("<sip:fan@x.example>", "\"Hotline\" <sip:alice@hotline.example.com>");
    r.has_time = true;
    r.monotonic_ns = 1000000000ull;
    r.unix_ns = 1212255000ll * 1000000000ll; /* 2008-05-31T17:30:00Z */
    CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
    CHECK(str_is(d.rule_id, "f3g44k1") && d.verdict == LC_VERDICT_ACCEPT);
    r.unix_ns = 1212267600ll * 1000000000ll; /* 21:00Z, after the window */
    CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
    CHECK(!d.matched);
    lc_worker_free(w);
    lc_engine_free(e);
}

static const char *SIP_INVITE =
    "INVITE sip:+12125551234@gw.example.com;user=phone SIP/2.0\r\n"
    "Via: SIP/2.0/UDP pc33.example.com;branch=z9hG4bK776asdhds\r\n"
    "Max-Forwards: 70\r\n"
    "To: \"Hotline\" <tel:+1-212-555-1234>\r\n"
    "From: \"Alice\" <sip:alice@example.com>;tag=1928301774\r\n"
    "Call-ID: a84b4c76e66710@pc33.example.com\r\n"
    "CSeq: 314159 INVITE\r\n"
    "Content-Length: 0\r\n"
    "\r\n";

static const char *SIP_COMPACT =
    "INVITE sip:bob@b.example SIP/2.0\n"
    "v: SIP/2.0/TCP a.example;branch=z9hG4bK1\n"
    "t: <sip:bob@b.example>\n"
    "f: \"Al\n"
    "  ice\" <sip:alice@example.com>;tag=77\n"
    "i: 1@a\n"
    "CSEQ: 2 INVITE\n"
    "\n";

static void test_raw_sip(void) {
    lc_engine *e = NULL;
    lc_worker *w = NULL;
    uint64_t g;
    lc_decision d;
    CHECK_RESULT(lc_engine_new(NULL, &e), LC_RESULT_OK);
    CHECK_RESULT(lc_worker_attach(e, -1, &w), LC_RESULT_OK);
    CHECK_RESULT(publish(e, "ex", EXAMPLE3, &g), LC_RESULT_OK);
    CHECK_RESULT(lc_classify_sip(w, (const uint8_t *)SIP_INVITE, strlen(SIP_INVITE), LC_TRANSPORT_UDP, &d), LC_RESULT_OK);
    CHECK(d.verdict == LC_VERDICT_REJECT && str_is(d.rule_id, "f3g44k3"));
    CHECK_RESULT(lc_classify_sip(w, (const uint8_t *)SIP_COMPACT, strlen(SIP_COMPACT), LC_TRANSPORT_TCP, &d), LC_RESULT_OK);
    CHECK(d.verdict == LC_VERDICT_REJECT && str_is(d.rule_id, "f3g44k3"));
    /* In dialog (to-tag): exempt. */
    const char *bye = "BYE sip:x@y SIP/2.0\r\nt: <sip:x@y>;tag=9\r\nf: <sip:alice@example.com>;tag=1\r\ni: x\r\nCSeq: 2 BYE\r\n\r\n";
    CHECK_RESULT(lc_classify_sip(w, (const uint8_t *)bye, strlen(bye), LC_TRANSPORT_UDP, &d), LC_RESULT_OK);
    CHECK(d.exempt && d.verdict == LC_VERDICT_ACCEPT);
    /* Malformed input gets a code and no decision. */
    const char *response = "SIP/2.0 200 OK\r\n\r\n";
    const char *truncated = "INVITE sip:a@b SIP/2.0\r\nFrom: <sip:x@y>\r\n";
    const char *no_cseq = "INVITE sip:a@b SIP/2.0\r\nFrom: <sip:x@y>\r\nTo: <sip:a@b>\r\nCall-ID: 1\r\n\r\n";
    const char *bad_line = "INVITE sip:a@b\r\n\r\n";
    const char *bad_header = "INVITE sip:a@b SIP/2.0\r\nnocolon\r\n\r\n";
    const char *bad_cseq = "INVITE sip:a@b SIP/2.0\r\nf: <sip:x@y>\r\nt: <sip:a@b>\r\ni: 1\r\nCSeq: one INVITE\r\n\r\n";
    CHECK_RESULT(lc_classify_sip(w, (const uint8_t *)response, strlen(response), LC_TRANSPORT_UDP, &d), LC_RESULT_SIP_NOT_A_REQUEST);
    CHECK_RESULT(lc_classify_sip(w, (const uint8_t *)truncated, strlen(truncated), LC_TRANSPORT_UDP, &d), LC_RESULT_SIP_TRUNCATED);
    CHECK_RESULT(lc_classify_sip(w, (const uint8_t *)no_cseq, strlen(no_cseq), LC_TRANSPORT_UDP, &d), LC_RESULT_SIP_MISSING_HEADER);
    CHECK_RESULT(lc_classify_sip(w, (const uint8_t *)bad_line, strlen(bad_line), LC_TRANSPORT_UDP, &d), LC_RESULT_SIP_BAD_REQUEST_LINE);
    CHECK_RESULT(lc_classify_sip(w, (const uint8_t *)bad_header, strlen(bad_header), LC_TRANSPORT_UDP, &d), LC_RESULT_SIP_BAD_HEADER);
    CHECK_RESULT(lc_classify_sip(w, (const uint8_t *)bad_cseq, strlen(bad_cseq), LC_TRANSPORT_UDP, &d), LC_RESULT_SIP_BAD_CSEQ);
    CHECK_RESULT(lc_classify_sip(w, (const uint8_t *)"", 0, LC_TRANSPORT_UDP, &d), LC_RESULT_SIP_TRUNCATED);
    /* Garbage: random mutations never crash. */
    unsigned state = 12345u;
    size_t len = strlen(SIP_INVITE);
    char *copy = malloc(len);
    CHECK(copy != NULL);
    for (int i = 0; copy && i < 5000; i++) {
        memcpy(copy, SIP_INVITE, len);
        for (int k = 0; k < 4; k++) {
            state = state * 1103515245u + 12345u;
            copy[(state >> 8) % len] = (char)(state >> 16);
        }
        state = state * 1103515245u + 12345u;
        lc_result res = lc_classify_sip(w, (const uint8_t *)copy, (state >> 8) % (len + 1), LC_TRANSPORT_UDP, &d);
        CHECK(res == LC_RESULT_OK || (res >= LC_RESULT_SIP_TRUNCATED && res <= LC_RESULT_SIP_BAD_CSEQ));
    }
    free(copy);
    lc_worker_free(w);
    lc_engine_free(e);
}

static void count_rule(void *userdata, const lc_rule_stats *row) {
    uint64_t *sums = userdata;
    sums[0] += row->matched;
    sums[1] += 1;
    if (str_is(row->rule, "trunk")) {
        sums[2] = row->accepted;
    }
}

static void test_windows_and_stats(void) {
    lc_engine *e = NULL;
    lc_worker *a = NULL;
    lc_worker *b = NULL;
    uint64_t g;
    lc_decision d;
    const char *win = "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"full\">"
                      "<rule id=\"trunk\"><conditions><method>INVITE</method></conditions>"
                      "<actions><accept alt-action=\"drop\"><win>2</win></accept></actions></rule></ruleset>";
    CHECK_RESULT(lc_engine_new(NULL, &e), LC_RESULT_OK);
    CHECK_RESULT(lc_worker_attach(e, -1, &a), LC_RESULT_OK);
    CHECK_RESULT(lc_worker_attach(e, -1, &b), LC_RESULT_OK);
    CHECK_RESULT(publish(e, "ex", win, &g), LC_RESULT_OK);
    lc_request r = invite("<sip:a@b>", "<sip:c@d>");
    lc_ticket tickets[2];
    for (int i = 0; i < 2; i++) {
        CHECK_RESULT(lc_classify(a, &r, &d), LC_RESULT_OK);
        CHECK(d.has_ticket && d.verdict == LC_VERDICT_ACCEPT);
        tickets[i] = d.ticket;
    }
    CHECK_RESULT(lc_classify(b, &r, &d), LC_RESULT_OK);
    CHECK(!d.has_ticket && d.verdict == LC_VERDICT_REJECT); /* drop over UDP is 503 */
    r.transport = LC_TRANSPORT_TCP;
    CHECK_RESULT(lc_classify(b, &r, &d), LC_RESULT_OK);
    CHECK(d.verdict == LC_VERDICT_DROP && d.status == 0);
    /* A ticket can be completed on another worker. */
    CHECK_RESULT(lc_complete(b, &tickets[0]), LC_RESULT_OK);
    CHECK_RESULT(lc_classify(b, &r, &d), LC_RESULT_OK);
    CHECK(d.has_ticket);
    CHECK_RESULT(lc_complete(a, &tickets[1]), LC_RESULT_OK);
    CHECK_RESULT(lc_complete(b, &d.ticket), LC_RESULT_OK);
    /* Stats: 5 INVITEs + one exempt BYE = 6 requests. */
    r.method = str("BYE");
    CHECK_RESULT(lc_classify(a, &r, &d), LC_RESULT_OK);
    lc_stats st;
    CHECK_RESULT(lc_engine_stats(e, &st), LC_RESULT_OK);
    CHECK(st.total == 6 && st.exempt == 1 && st.matched == 5 && st.accepted == 3);
    CHECK(st.rejected == 1 && st.dropped == 1);
    uint64_t sums[3] = {0, 0, 0};
    CHECK_RESULT(lc_engine_stats_each(e, count_rule, sums), LC_RESULT_OK);
    CHECK(sums[0] == 5 && sums[1] == 1 && sums[2] == 3);
    /* Prometheus text: ask for the size first. */
    size_t need = 0;
    CHECK_RESULT(lc_engine_prometheus(e, NULL, 0, &need), LC_RESULT_BUFFER_TOO_SMALL);
    CHECK(need > 100);
    char *text = malloc(need + 1);
    size_t n = 0;
    CHECK(text != NULL);
    if (text) {
        CHECK_RESULT(lc_engine_prometheus(e, (uint8_t *)text, need, &n), LC_RESULT_OK);
        text[n] = 0;
        CHECK(n == need && strstr(text, "loadctl_rule_matched_total{source=\"ex\",rule=\"trunk\"} 5") != NULL);
        free(text);
    }
    lc_worker_free(a);
    lc_worker_free(b);
    lc_engine_free(e);
}

/* A full ruleset of one rule with these conditions and this accept element. */
static char *one_rule(char *buf, size_t cap, const char *conditions, const char *accept) {
    snprintf(buf, cap,
             "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" "
             "xmlns:lc=\"urn:ietf:params:xml:ns:load-control\" version=\"0\" state=\"full\">"
             "<rule id=\"r\"><conditions>%s</conditions><actions>%s</actions></rule></ruleset>",
             conditions, accept);
    return buf;
}

static lc_sip_options sip_options(uint32_t transport, const char *target) {
    lc_sip_options o;
    memset(&o, 0, sizeof o);
    o.transport = transport;
    o.target = str(target);
    return o;
}

static lc_result classify_opts(lc_worker *w, const char *msg, const lc_sip_options *o, lc_decision *d) {
    return lc_classify_sip_opts(w, (const uint8_t *)msg, strlen(msg), o, d);
}

/* lc_classify_sip_opts: the next hop as the target entity (RFC 7200 §5.3.3: a server that
 * "receives a policy with a <target-sip-entity> element ... SHOULD record it and take it into
 * consideration when making load-filtering decisions"), the request's time, the transport, and
 * every out-of-range option refused before anything is classified. */
static void test_sip_options(void) {
    lc_engine *e = NULL;
    lc_worker *w = NULL;
    lc_decision d;
    uint64_t g;
    char doc[1024];
    CHECK_RESULT(lc_engine_new(NULL, &e), LC_RESULT_OK);
    CHECK_RESULT(lc_worker_attach(e, -1, &w), LC_RESULT_OK);
    CHECK_RESULT(publish(e, "local",
                         one_rule(doc, sizeof doc, "<lc:target-sip-entity>sip:next.example.com</lc:target-sip-entity>",
                                  "<lc:accept alt-action=\"drop\"><lc:rate>0</lc:rate></lc:accept>"),
                         &g),
                 LC_RESULT_OK);
    /* Without a target the rule cannot match (lc_classify_sip has none). */
    CHECK_RESULT(lc_classify_sip(w, (const uint8_t *)SIP_INVITE, strlen(SIP_INVITE), LC_TRANSPORT_UDP, &d), LC_RESULT_OK);
    CHECK(d.verdict == LC_VERDICT_ACCEPT && !d.matched);
    lc_sip_options o = sip_options(LC_TRANSPORT_UDP, NULL);
    CHECK_RESULT(classify_opts(w, SIP_INVITE, &o, &d), LC_RESULT_OK);
    CHECK(d.verdict == LC_VERDICT_ACCEPT && !d.matched);
    /* Towards the target: matched; drop over UDP is answered 503 (RFC 7200 §5.4), over TCP
     * it is a silent drop, so the transport is the one passed. */
    o = sip_options(LC_TRANSPORT_UDP, "sip:next.example.com");
    CHECK_RESULT(classify_opts(w, SIP_INVITE, &o, &d), LC_RESULT_OK);
    CHECK(d.matched && d.verdict == LC_VERDICT_REJECT && d.status == 503);
    o = sip_options(LC_TRANSPORT_TCP, "sip:next.example.com;transport=tcp");
    CHECK_RESULT(classify_opts(w, SIP_INVITE, &o, &d), LC_RESULT_OK);
    CHECK(d.matched && d.verdict == LC_VERDICT_DROP && d.status == 0);
    /* Towards another entity: not matched. */
    o = sip_options(LC_TRANSPORT_UDP, "sip:other.example.com");
    CHECK_RESULT(classify_opts(w, SIP_INVITE, &o, &d), LC_RESULT_OK);
    CHECK(d.verdict == LC_VERDICT_ACCEPT && !d.matched);

    /* Out-of-range options: refused, no decision written. */
    memset(&d, 0xAB, sizeof d);
    lc_decision untouched;
    memcpy(&untouched, &d, sizeof d);
    uint32_t bad_flags[] = {4, LC_SIP_KNOWN_DIALOG | 4, LC_SIP_HAS_TIME | 8, 0x80000000u, UINT32_MAX};
    for (size_t i = 0; i < sizeof bad_flags / sizeof bad_flags[0]; i++) {
        o = sip_options(LC_TRANSPORT_UDP, "sip:next.example.com");
        o.flags = bad_flags[i];
        CHECK_RESULT(classify_opts(w, SIP_INVITE, &o, &d), LC_RESULT_INVALID_ARGUMENT);
    }
    uint8_t bad_families[] = {1, 5, 16, 255};
    for (size_t i = 0; i < sizeof bad_families / sizeof bad_families[0]; i++) {
        o = sip_options(LC_TRANSPORT_UDP, "sip:next.example.com");
        o.source.family = bad_families[i];
        CHECK_RESULT(classify_opts(w, SIP_INVITE, &o, &d), LC_RESULT_INVALID_ARGUMENT);
    }
    uint32_t bad_transports[] = {LC_TRANSPORT_WSS + 1, 100, 0x80000000u, UINT32_MAX};
    for (size_t i = 0; i < sizeof bad_transports / sizeof bad_transports[0]; i++) {
        o = sip_options(bad_transports[i], "sip:next.example.com");
        CHECK_RESULT(classify_opts(w, SIP_INVITE, &o, &d), LC_RESULT_INVALID_ARGUMENT);
    }
    o = sip_options(LC_TRANSPORT_UDP, "sip:n\xff.example.com");
    CHECK_RESULT(classify_opts(w, SIP_INVITE, &o, &d), LC_RESULT_INVALID_UTF8);
    CHECK(memcmp(&d, &untouched, sizeof d) == 0);
    /* Every declared transport is taken. */
    for (uint32_t t = LC_TRANSPORT_UDP; t <= LC_TRANSPORT_WSS; t++) {
        o = sip_options(t, NULL);
        CHECK_RESULT(classify_opts(w, SIP_INVITE, &o, &d), LC_RESULT_OK);
    }
    /* NULL pointers; a malformed message still gets its LC_RESULT_SIP_* code. */
    o = sip_options(LC_TRANSPORT_UDP, NULL);
    CHECK_RESULT(lc_classify_sip_opts(NULL, (const uint8_t *)SIP_INVITE, 1, &o, &d), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_classify_sip_opts(w, NULL, 1, &o, &d), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_classify_sip_opts(w, (const uint8_t *)SIP_INVITE, 1, NULL, &d), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_classify_sip_opts(w, (const uint8_t *)SIP_INVITE, 1, &o, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(classify_opts(w, "SIP/2.0 200 OK\r\n\r\n", &o, &d), LC_RESULT_SIP_NOT_A_REQUEST);

    /* The time: a rule in force on 2020-01-01 (UTC) only (RFC 4745 §7.1 <validity>). */
    CHECK_RESULT(publish(e, "local",
                         one_rule(doc, sizeof doc,
                                  "<validity><from>2020-01-01T00:00:00Z</from><until>2020-01-02T00:00:00Z</until></validity>",
                                  "<lc:accept><lc:rate>0</lc:rate></lc:accept>"),
                         &g),
                 LC_RESULT_OK);
    const int64_t noon = 1577880000LL * 1000000000LL; /* 2020-01-01T12:00:00Z */
    o = sip_options(LC_TRANSPORT_UDP, NULL);
    o.flags = LC_SIP_HAS_TIME;
    o.monotonic_ns = 1000000000ULL;
    o.unix_ns = noon;
    CHECK_RESULT(classify_opts(w, SIP_INVITE, &o, &d), LC_RESULT_OK);
    CHECK(d.matched && d.verdict == LC_VERDICT_REJECT);
    o.unix_ns = noon + 86400LL * 1000000000LL;
    CHECK_RESULT(classify_opts(w, SIP_INVITE, &o, &d), LC_RESULT_OK);
    CHECK(!d.matched && d.verdict == LC_VERDICT_ACCEPT);
    /* Without the flag the times are ignored and the engine's clock (now, not 2020) is read. */
    o.flags = 0;
    o.unix_ns = noon;
    CHECK_RESULT(classify_opts(w, SIP_INVITE, &o, &d), LC_RESULT_OK);
    CHECK(!d.matched && d.verdict == LC_VERDICT_ACCEPT);
    lc_worker_free(w);
    lc_engine_free(e);
}

/* lc_engine_config's exemption fields: defaults, and every out-of-range value refused. */
static void test_exemption_config(void) {
    lc_engine_config c;
    lc_engine *e = NULL;
    CHECK_RESULT(lc_engine_config_default(&c), LC_RESULT_OK);
    CHECK(c.exempt_flags == LC_EXEMPT_EMERGENCY);
    CHECK(str_is(c.priority_namespaces, "ets wps"));
    CHECK(c.priority_peers.ptr == NULL); /* no peer's Resource-Priority counts by default */
    uint32_t bad_flags[] = {4, LC_EXEMPT_EMERGENCY | LC_EXEMPT_TO_TAG | 8, 0x80000000u, UINT32_MAX};
    for (size_t i = 0; i < sizeof bad_flags / sizeof bad_flags[0]; i++) {
        CHECK_RESULT(lc_engine_config_default(&c), LC_RESULT_OK);
        c.exempt_flags = bad_flags[i];
        CHECK_RESULT(lc_engine_new(&c, &e), LC_RESULT_INVALID_ARGUMENT);
        CHECK(e == NULL);
    }
    const char *bad_names[] = {"ets.0", "ets;wps", "\"ets\"", "ets/wps", "e\tts\x01"};
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        CHECK_RESULT(lc_engine_config_default(&c), LC_RESULT_OK);
        c.priority_namespaces = str(bad_names[i]);
        CHECK_RESULT(lc_engine_new(&c, &e), LC_RESULT_INVALID_ARGUMENT);
        CHECK(e == NULL);
    }
    CHECK_RESULT(lc_engine_config_default(&c), LC_RESULT_OK);
    c.priority_namespaces = str("ets\xff");
    CHECK_RESULT(lc_engine_new(&c, &e), LC_RESULT_INVALID_UTF8);
    CHECK(e == NULL);
    const char *good[] = {"ets wps", "ETS,wps", " q735 , dsn,drsn ", "", "x-_!%*+`'~"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        CHECK_RESULT(lc_engine_config_default(&c), LC_RESULT_OK);
        c.priority_namespaces = str(good[i]);
        c.exempt_flags = 0;
        CHECK_RESULT(lc_engine_new(&c, &e), LC_RESULT_OK);
        lc_engine_free(e);
        e = NULL;
    }
    CHECK_RESULT(lc_engine_config_default(&c), LC_RESULT_OK);
    c.priority_namespaces = NONE;
    CHECK_RESULT(lc_engine_new(&c, &e), LC_RESULT_OK);
    lc_engine_free(e);
    e = NULL;
    const char *bad_peers[] = {"192.0.2.0/33", "192.0.2.1/24", "peer.example", "10.0.0.0/", "::1/129", "1.2.3.4/-1"};
    for (size_t i = 0; i < sizeof bad_peers / sizeof bad_peers[0]; i++) {
        CHECK_RESULT(lc_engine_config_default(&c), LC_RESULT_OK);
        c.priority_peers = str(bad_peers[i]);
        CHECK_RESULT(lc_engine_new(&c, &e), LC_RESULT_INVALID_ARGUMENT);
        CHECK(e == NULL);
    }
    const char *good_peers[] = {"192.0.2.0/24", " 192.0.2.7, 2001:db8::/32 ::ffff:198.51.100.0/120", "0.0.0.0/0 ::/0", ""};
    for (size_t i = 0; i < sizeof good_peers / sizeof good_peers[0]; i++) {
        CHECK_RESULT(lc_engine_config_default(&c), LC_RESULT_OK);
        c.priority_peers = str(good_peers[i]);
        c.exempt_flags = LC_EXEMPT_EMERGENCY | LC_EXEMPT_TO_TAG;
        CHECK_RESULT(lc_engine_new(&c, &e), LC_RESULT_OK);
        lc_engine_free(e);
        e = NULL;
    }
}

static const char *SIP_SOS =
    "INVITE urn:service:sos.fire SIP/2.0\r\n"
    "Via: SIP/2.0/UDP pc33.example.com;branch=z9hG4bK776sos\r\n"
    "To: <urn:service:sos.fire>\r\n"
    "From: <sip:alice@example.com>;tag=1\r\n"
    "Call-ID: sos@pc33.example.com\r\n"
    "CSeq: 1 INVITE\r\n"
    "\r\n";

static const char *SIP_ETS =
    "INVITE sip:bob@example.com SIP/2.0\r\n"
    "Via: SIP/2.0/UDP pc33.example.com;branch=z9hG4bK776ets\r\n"
    "To: <sip:bob@example.com>\r\n"
    "From: <sip:alice@example.com>;tag=1\r\n"
    "Call-ID: ets@pc33.example.com\r\n"
    "CSeq: 1 INVITE\r\n"
    "Resource-Priority: ets.0\r\n"
    "\r\n";

static const char *SIP_BYE =
    "BYE sip:bob@example.com SIP/2.0\r\n"
    "Via: SIP/2.0/UDP pc33.example.com;branch=z9hG4bK776bye\r\n"
    "To: <sip:bob@example.com>;tag=2\r\n"
    "From: <sip:alice@example.com>;tag=1\r\n"
    "Call-ID: bye@pc33.example.com\r\n"
    "CSeq: 2 BYE\r\n"
    "\r\n";

/* Emergency and priority requests pass a rule that rejects everything (RFC 7200 §4.8: the
 * subscriber "SHOULD honor the local policy for prioritizing SIP requests such as policies
 * based on the content of the Resource-Priority header field ... or emergency calls"), by
 * default; turned off in lc_engine_config, they are filtered. Each is reported with its
 * LC_EXEMPT_REASON_* and counted per reason in lc_stats. */
static void test_exemptions(void) {
    char doc[1024];
    uint64_t g;
    lc_decision d;
    for (int exempting = 1; exempting >= 0; exempting--) {
        lc_engine_config c;
        lc_engine *e = NULL;
        lc_worker *w = NULL;
        CHECK_RESULT(lc_engine_config_default(&c), LC_RESULT_OK);
        /* RFC 4412 §11.3: Resource-Priority counts only from the peers the operator lists. */
        c.priority_peers = str("192.0.2.0/24");
        if (!exempting) {
            c.exempt_flags = 0;
            c.priority_namespaces = NONE;
        }
        CHECK_RESULT(lc_engine_new(&c, &e), LC_RESULT_OK);
        CHECK_RESULT(lc_worker_attach(e, -1, &w), LC_RESULT_OK);
        CHECK_RESULT(publish(e, "local", one_rule(doc, sizeof doc, "", "<lc:accept><lc:rate>0</lc:rate></lc:accept>"), &g),
                     LC_RESULT_OK);
        lc_sip_options o = sip_options(LC_TRANSPORT_UDP, "sip:next.example.com");
        CHECK_RESULT(classify_opts(w, SIP_INVITE, &o, &d), LC_RESULT_OK);
        CHECK(d.verdict == LC_VERDICT_REJECT && !d.exempt && d.exempt_reason == LC_EXEMPT_REASON_NONE);
        CHECK_RESULT(classify_opts(w, SIP_BYE, &o, &d), LC_RESULT_OK);
        CHECK(d.verdict == LC_VERDICT_ACCEPT && d.exempt && d.exempt_reason == LC_EXEMPT_REASON_NOT_FILTERED);
        CHECK_RESULT(classify_opts(w, SIP_SOS, &o, &d), LC_RESULT_OK);
        if (exempting) {
            CHECK(d.verdict == LC_VERDICT_ACCEPT && d.exempt && d.exempt_reason == LC_EXEMPT_REASON_EMERGENCY);
        } else {
            CHECK(d.verdict == LC_VERDICT_REJECT && !d.exempt && d.exempt_reason == LC_EXEMPT_REASON_NONE);
        }
        /* From a peer not listed (and from an unknown one, above: no source) the marking
         * counts for nothing. */
        o.source.family = LC_IP_V4;
        memcpy(o.source.addr, (const uint8_t[]){203, 0, 113, 9}, 4);
        CHECK_RESULT(classify_opts(w, SIP_ETS, &o, &d), LC_RESULT_OK);
        CHECK(d.verdict == LC_VERDICT_REJECT && !d.exempt);
        memcpy(o.source.addr, (const uint8_t[]){192, 0, 2, 7}, 4);
        CHECK_RESULT(classify_opts(w, SIP_ETS, &o, &d), LC_RESULT_OK);
        if (exempting) {
            CHECK(d.verdict == LC_VERDICT_ACCEPT && d.exempt && d.exempt_reason == LC_EXEMPT_REASON_RESOURCE_PRIORITY);
        } else {
            CHECK(d.verdict == LC_VERDICT_REJECT && !d.exempt && d.exempt_reason == LC_EXEMPT_REASON_NONE);
        }
        /* The structured path: lc_request.resource_priority (two lines joined with a comma). */
        lc_request r = invite("<sip:alice@example.com>", "<sip:bob@example.com>");
        r.source.family = LC_IP_V6; /* ::ffff:192.0.2.9, as a dual-stack socket reports it */
        memcpy(r.source.addr, (const uint8_t[]){0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 9}, 16);
        r.resource_priority = str("dsn.flash, wps.2");
        CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
        if (exempting) {
            CHECK(d.verdict == LC_VERDICT_ACCEPT && d.exempt_reason == LC_EXEMPT_REASON_RESOURCE_PRIORITY);
        } else {
            CHECK(d.verdict == LC_VERDICT_REJECT && d.exempt_reason == LC_EXEMPT_REASON_NONE);
        }
        r.resource_priority = str("dsn.flash");
        CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
        CHECK(d.verdict == LC_VERDICT_REJECT && d.exempt_reason == LC_EXEMPT_REASON_NONE);
        /* Per reason: the BYE; the sos INVITE; the ets INVITE and the wps request. */
        lc_stats st;
        CHECK_RESULT(lc_engine_stats(e, &st), LC_RESULT_OK);
        CHECK(st.exempt_not_filtered == 1);
        CHECK(st.exempt_emergency == (exempting ? 1u : 0u));
        CHECK(st.exempt_resource_priority == (exempting ? 2u : 0u));
        CHECK(st.exempt == st.exempt_not_filtered + st.exempt_emergency + st.exempt_resource_priority);
        CHECK(st.total == 7);
        lc_worker_free(w);
        lc_engine_free(e);
    }
}

/* RFC 7200 §4.8 exempts "requests associated with existing sessions": a session the caller
 * keeps, not any request with a To tag (anyone can write one into a new INVITE). */
static void test_known_dialogs(void) {
    static const char *TAGGED =
        "INVITE sip:bob@example.com SIP/2.0\r\n"
        "Via: SIP/2.0/UDP pc33.example.com;branch=z9hG4bK776re\r\n"
        "To: <sip:bob@example.com>;tag=forged\r\n"
        "From: <sip:alice@example.com>;tag=1\r\n"
        "Call-ID: re@pc33.example.com\r\n"
        "CSeq: 2 INVITE\r\n"
        "\r\n";
    char doc[1024];
    uint64_t g;
    lc_decision d;
    for (int to_tag = 0; to_tag <= 1; to_tag++) {
        lc_engine_config c;
        lc_engine *e = NULL;
        lc_worker *w = NULL;
        CHECK_RESULT(lc_engine_config_default(&c), LC_RESULT_OK);
        if (to_tag) c.exempt_flags |= LC_EXEMPT_TO_TAG;
        CHECK_RESULT(lc_engine_new(&c, &e), LC_RESULT_OK);
        CHECK_RESULT(lc_worker_attach(e, -1, &w), LC_RESULT_OK);
        CHECK_RESULT(publish(e, "local", one_rule(doc, sizeof doc, "", "<lc:accept><lc:rate>0</lc:rate></lc:accept>"), &g),
                     LC_RESULT_OK);
        lc_sip_options o = sip_options(LC_TRANSPORT_UDP, "sip:next.example.com");
        CHECK_RESULT(classify_opts(w, TAGGED, &o, &d), LC_RESULT_OK);
        if (to_tag) {
            CHECK(d.verdict == LC_VERDICT_ACCEPT && d.exempt_reason == LC_EXEMPT_REASON_NOT_FILTERED);
        } else {
            CHECK(d.verdict == LC_VERDICT_REJECT && !d.exempt);
        }
        o.flags |= LC_SIP_KNOWN_DIALOG;
        CHECK_RESULT(classify_opts(w, TAGGED, &o, &d), LC_RESULT_OK);
        CHECK(d.verdict == LC_VERDICT_ACCEPT && d.exempt_reason == LC_EXEMPT_REASON_NOT_FILTERED);
        lc_request r = invite("<sip:alice@example.com>;tag=1", "<sip:bob@example.com>;tag=forged");
        r.initial = 0;
        CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
        CHECK(d.verdict == (to_tag ? LC_VERDICT_ACCEPT : LC_VERDICT_REJECT));
        r.known_dialog = 1;
        CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
        CHECK(d.verdict == LC_VERDICT_ACCEPT && d.exempt_reason == LC_EXEMPT_REASON_NOT_FILTERED);
        r.source.family = 7;
        lc_decision untouched;
        memset(&untouched, 0xA5, sizeof untouched);
        CHECK_RESULT(lc_classify(w, &r, &untouched), LC_RESULT_INVALID_ARGUMENT);
        lc_worker_free(w);
        lc_engine_free(e);
    }
}

static void sum_refused(void *userdata, const lc_rule_stats *row) {
    *(uint64_t *)userdata += row->redirect_refused;
}

/* RFC 7200 §7 / §3.4: redirect destinations are agreed in advance. A policy published with a
 * notifier may redirect into the notifier's own domain (its host and subdomains) and to what
 * lc_engine_config.redirect_allow lists; anything else is answered as a reject and counted.
 * The operator's own policy (no notifier) is trusted. */
static void test_redirect_agreement(void) {
    char doc[1024];
    uint64_t g;
    lc_decision d;
    const char *accept = "<lc:accept alt-action=\"redirect\" alt-target=\"sip:ivr@partner.example\"><lc:rate>0</lc:rate></lc:accept>";
    const char *own = "<lc:accept alt-action=\"redirect\" alt-target=\"sip:ivr@a.sbc.example.com\"><lc:rate>0</lc:rate></lc:accept>";
    struct {
        const char *allow, *notifier, *accept;
        lc_verdict verdict;
    } cases[] = {
        {NULL, "sip:sbc.example.com", accept, LC_VERDICT_REJECT},
        {NULL, "sip:sbc.example.com", own, LC_VERDICT_REDIRECT},
        {NULL, NULL, accept, LC_VERDICT_REDIRECT},
        {"partner.example", "sip:sbc.example.com", accept, LC_VERDICT_REDIRECT},
        {"other.example", "sip:sbc.example.com", accept, LC_VERDICT_REJECT},
        {"*", "sip:sbc.example.com", accept, LC_VERDICT_REDIRECT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lc_engine_config c;
        lc_engine *e = NULL;
        lc_worker *w = NULL;
        CHECK_RESULT(lc_engine_config_default(&c), LC_RESULT_OK);
        c.redirect_allow = str(cases[i].allow);
        CHECK_RESULT(lc_engine_new(&c, &e), LC_RESULT_OK);
        CHECK_RESULT(lc_worker_attach(e, -1, &w), LC_RESULT_OK);
        one_rule(doc, sizeof doc, "", cases[i].accept);
        CHECK_RESULT(lc_engine_publish(e, str("n"), str(cases[i].notifier), (const uint8_t *)doc, strlen(doc), &g),
                     LC_RESULT_OK);
        lc_request r = invite("<sip:alice@example.com>", "<sip:bob@example.com>");
        CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
        CHECK(d.verdict == cases[i].verdict);
        uint64_t refused = 0;
        CHECK_RESULT(lc_engine_stats_each(e, sum_refused, &refused), LC_RESULT_OK);
        CHECK(refused == (cases[i].verdict == LC_VERDICT_REJECT ? 1u : 0u));
        if (d.verdict != cases[i].verdict) {
            fprintf(stderr, "  case %zu: allow %s notifier %s\n", i, cases[i].allow ? cases[i].allow : "-",
                    cases[i].notifier ? cases[i].notifier : "-");
        }
        lc_worker_free(w);
        lc_engine_free(e);
    }
}

int main(void) {
    test_version_and_lifecycle();
    test_null_parameters();
    test_policies();
    test_rfc_examples();
    test_non_ascii_and_invalid_utf8();
    test_raw_sip();
    test_windows_and_stats();
    test_sip_options();
    test_exemption_config();
    test_exemptions();
    test_known_dialogs();
    test_redirect_agreement();
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
