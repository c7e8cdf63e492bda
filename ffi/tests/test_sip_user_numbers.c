/* lc_engine_config.sip_user_numbers: how a sip: user part without ;user=phone is read. RFC 3261
 * §19.1.1: "Even without this parameter, recipients of SIP and SIPS URIs MAY interpret the
 * pre-@ part as a telephone number if local restrictions on the name space for user name allow
 * it." A <many-tel prefix="+1555"/> rule on the Request-URI, raw SIP requests to
 * sip:+15551234567@gw (no user=phone): matched under the default (global) and digits, not under
 * user-phone, where they count in lc_stats.unread_numbers; an unknown value is refused with
 * context. Built with -std=c11 -Wall -Wextra -Wpedantic -Werror and run under ASan+UBSan and
 * under valgrind (see the Makefile's c-test target). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadctl.h"
#include "check.h"

static const char *POLICY =
    "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\"\n"
    "         xmlns:lc=\"urn:ietf:params:xml:ns:load-control\" version=\"0\" state=\"full\">\n"
    "  <rule id=\"p1555\"><conditions><lc:call-identity><lc:sip><lc:request-uri>\n"
    "    <many-tel prefix=\"+1555\"/>\n"
    "  </lc:request-uri></lc:sip></lc:call-identity></conditions>\n"
    "  <actions><lc:accept alt-action=\"reject\"><lc:rate>0</lc:rate></lc:accept></actions></rule>\n"
    "</ruleset>\n";

static const char *INVITE_FMT =
    "INVITE %s SIP/2.0\r\n"
    "Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK-%d\r\n"
    "From: <sip:alice@a.example>;tag=1\r\n"
    "To: <%s>\r\n"
    "Call-ID: c%d@a.example\r\n"
    "CSeq: 1 INVITE\r\n"
    "Max-Forwards: 70\r\n"
    "Content-Length: 0\r\n\r\n";

/* Classifies an INVITE to `ruri` on a fresh engine made with `numbers`; returns whether a rule
 * matched and writes the engine's unread_numbers count. */
static int matched_with(lc_sip_user_numbers numbers, const char *ruri, uint64_t *unread) {
    lc_engine_config config;
    lc_engine *e = NULL;
    lc_worker *w = NULL;
    lc_decision d;
    lc_stats st;
    uint64_t g = 0;
    char msg[512];
    CHECK_RESULT(lc_engine_config_default(&config), LC_RESULT_OK);
    config.sip_user_numbers = numbers;
    CHECK_RESULT(lc_engine_new(&config, &e), LC_RESULT_OK);
    CHECK_RESULT(lc_engine_publish(e, str("local"), NONE, (const uint8_t *)POLICY, strlen(POLICY), &g), LC_RESULT_OK);
    CHECK_RESULT(lc_worker_attach(e, -1, &w), LC_RESULT_OK);
    int n = snprintf(msg, sizeof msg, INVITE_FMT, ruri, 1, ruri, 1);
    CHECK(n > 0 && (size_t)n < sizeof msg);
    memset(&d, 0, sizeof d);
    CHECK_RESULT(lc_classify_sip(w, (const uint8_t *)msg, (size_t)n, LC_TRANSPORT_UDP, &d), LC_RESULT_OK);
    CHECK_RESULT(lc_engine_stats(e, &st), LC_RESULT_OK);
    *unread = st.unread_numbers;
    CHECK(st.unread_numbers <= st.unmatched);
    int matched = d.matched;
    if (matched) {
        CHECK(str_is(d.rule_id, "p1555"));
        CHECK(d.verdict == LC_VERDICT_REJECT && d.status == 503);
    }
    lc_worker_free(w);
    lc_engine_free(e);
    return matched;
}

static void test_default_and_values(void) {
    lc_engine_config config;
    uint64_t unread = 99;
    CHECK_RESULT(lc_engine_config_default(&config), LC_RESULT_OK);
    CHECK(config.sip_user_numbers == LC_SIP_USER_NUMBERS_GLOBAL);
    /* The default is 0: a config that never set the field reads global numbers. */
    CHECK(LC_SIP_USER_NUMBERS_GLOBAL == 0);

    const char *global = "sip:+15551234567@gw.example.com";
    CHECK(matched_with(LC_SIP_USER_NUMBERS_GLOBAL, global, &unread) == 1 && unread == 0);
    CHECK(matched_with(LC_SIP_USER_NUMBERS_DIGITS, global, &unread) == 1 && unread == 0);
    /* Strict: the number is a user name, and the miss is counted. */
    CHECK(matched_with(LC_SIP_USER_NUMBERS_USER_PHONE, global, &unread) == 0 && unread == 1);
    /* With user=phone it is a number under every value. */
    const char *tagged = "sip:+15551234567@gw.example.com;user=phone";
    CHECK(matched_with(LC_SIP_USER_NUMBERS_USER_PHONE, tagged, &unread) == 1 && unread == 0);
    /* A local number is not within a global prefix; unread under global, read under digits. */
    const char *local = "sip:15551234567@gw.example.com";
    CHECK(matched_with(LC_SIP_USER_NUMBERS_GLOBAL, local, &unread) == 0 && unread == 1);
    CHECK(matched_with(LC_SIP_USER_NUMBERS_DIGITS, local, &unread) == 0 && unread == 0);
    /* A user name is never counted. */
    CHECK(matched_with(LC_SIP_USER_NUMBERS_USER_PHONE, "sip:alice@gw.example.com", &unread) == 0 && unread == 0);
}

static void test_unknown_value_is_refused(void) {
    lc_engine_config config;
    lc_engine *e = NULL;
    char buf[256];
    size_t n = 0;
    CHECK_RESULT(lc_engine_config_default(&config), LC_RESULT_OK);
    config.sip_user_numbers = 3;
    CHECK_RESULT(lc_engine_new(&config, &e), LC_RESULT_INVALID_ARGUMENT);
    CHECK(e == NULL);
    CHECK_RESULT(lc_last_error((uint8_t *)buf, sizeof buf - 1, &n), LC_RESULT_OK);
    buf[n < sizeof buf ? n : sizeof buf - 1] = '\0';
    CHECK(strstr(buf, "lc_engine_config.sip_user_numbers") != NULL);
    CHECK(strstr(buf, "LC_SIP_USER_NUMBERS_") != NULL);
    config.sip_user_numbers = UINT32_MAX;
    CHECK_RESULT(lc_engine_new(&config, &e), LC_RESULT_INVALID_ARGUMENT);
    CHECK(e == NULL);
}

int main(void) {
    test_default_and_values();
    test_unknown_value_is_refused();
    printf("test_sip_user_numbers: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
