/* What the published rules are, through the C ABI: lc_engine_rules_each (each rule's source, the
 * RFC 7200 version of the source's policy, limit, alt-action, alt-targets, a line for people) and
 * lc_engine_source_version, after a full document and a partial one, with a publish from inside
 * the callback, for a source without rules, and on every error path. The expected values are the
 * documents' own (the macros below build both). Built with -std=c11 -Wall -Wextra -Wpedantic
 * -Werror and run under ASan+UBSan and under valgrind (see the Makefile's c-test target). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadctl.h"
#include "check.h"

#define XSTR(x) #x
#define STR(x) XSTR(x)

/* The documents' values. */
#define VERSION_FULL 7
#define VERSION_PARTIAL 8
#define VERSION_EMPTY 3
#define CALLS_RATE 20
#define CALLS_RATE_PARTIAL 12.5
#define MESSAGES_PERCENT 30
#define MESSAGES_TARGETS "sip:a@alt.example.com sip:b@alt.example.com"
#define REGISTRATIONS_WINDOW 5

#define RULESET(version, state)                                                  \
    "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\"\n"                  \
    "         xmlns:lc=\"urn:ietf:params:xml:ns:load-control\" version=\"" STR(version) \
    "\" state=\"" state "\">\n"

#define CALLS_RULE(rate)                                                                        \
    "  <rule id=\"calls\"><conditions><lc:call-identity><lc:sip><lc:to>\n"                      \
    "    <one id=\"tel:+1-212-555-1234\"/></lc:to></lc:sip></lc:call-identity>\n"              \
    "    <method>INVITE</method></conditions>\n"                                                \
    "    <actions><lc:accept alt-action=\"reject\"><lc:rate>" STR(rate) "</lc:rate></lc:accept>" \
    "</actions></rule>\n"

/* A rate rule with reject, a percent rule with redirect, a window rule with drop. */
static const char *FULL =
    RULESET(VERSION_FULL, "full")
    CALLS_RULE(CALLS_RATE)
    "  <rule id=\"messages\"><conditions><method>MESSAGE</method></conditions>\n"
    "    <actions><lc:accept alt-action=\"redirect\" alt-target=\"" MESSAGES_TARGETS "\">"
    "<lc:percent>" STR(MESSAGES_PERCENT) "</lc:percent></lc:accept></actions></rule>\n"
    "  <rule id=\"registrations\"><conditions><method>REGISTER</method></conditions>\n"
    "    <actions><lc:accept alt-action=\"drop\"><lc:win>" STR(REGISTRATIONS_WINDOW) "</lc:win>"
    "</lc:accept></actions></rule>\n"
    "</ruleset>\n";

/* The next version: `calls` retuned. */
static const char *PARTIAL =
    RULESET(VERSION_PARTIAL, "partial")
    CALLS_RULE(CALLS_RATE_PARTIAL)
    "</ruleset>\n";

/* A policy of no rules. */
static const char *EMPTY = RULESET(VERSION_EMPTY, "full") "</ruleset>\n";

/* One row, copied out of the callback (its strings are valid during the callback only). */
typedef struct {
    size_t index;
    char source[64];
    char rule[64];
    char text[256];
    uint32_t source_version;
    lc_limit_kind limit_kind;
    double limit;
    char alt_targets[128];
    int alt_targets_empty;
    lc_verdict alt_action;
} row_copy;

#define MAX_ROWS 16

typedef struct {
    size_t count;
    row_copy rows[MAX_ROWS];
    /* Published (full, source "late") from the first callback when set. */
    lc_engine *engine;
    const char *publish;
    lc_result publish_result;
} rows;

/* Copies `s` into `out` (NUL-terminated); fails the test when it does not fit or is absent. */
static void copy(char *out, size_t cap, lc_str s) {
    CHECK(s.ptr != NULL && s.len < cap);
    size_t n = s.ptr != NULL && s.len < cap ? s.len : 0;
    if (n > 0) {
        memcpy(out, s.ptr, n);
    }
    out[n] = '\0';
}

static void collect(void *userdata, const lc_rule_info *row) {
    rows *r = userdata;
    CHECK(row != NULL && r->count < MAX_ROWS);
    if (row == NULL || r->count >= MAX_ROWS) {
        return;
    }
    row_copy *c = &r->rows[r->count++];
    memset(c, 0, sizeof *c);
    c->index = row->index;
    copy(c->source, sizeof c->source, row->source);
    copy(c->rule, sizeof c->rule, row->rule);
    copy(c->text, sizeof c->text, row->text);
    c->alt_targets_empty = row->alt_targets.len == 0;
    if (!c->alt_targets_empty) {
        copy(c->alt_targets, sizeof c->alt_targets, row->alt_targets);
    }
    c->source_version = row->source_version;
    c->limit_kind = row->limit_kind;
    c->limit = row->limit;
    c->alt_action = row->alt_action;
    if (r->publish != NULL) {
        uint64_t g = 0;
        r->publish_result = lc_engine_publish(r->engine, str("late"), NONE, (const uint8_t *)r->publish,
                                              strlen(r->publish), &g);
        r->publish = NULL;
    }
}

static lc_result publish(lc_engine *e, const char *source, const char *notifier, const char *body) {
    uint64_t g = 0;
    return lc_engine_publish(e, str(source), str(notifier), (const uint8_t *)body, strlen(body), &g);
}

static lc_result apply(lc_engine *e, const char *source, const char *body) {
    uint64_t g = 0;
    return lc_engine_apply(e, str(source), NONE, (const uint8_t *)body, strlen(body), &g);
}

/* Whether `c` is the row the documents give: rule `id` of `source` at `index`. */
static void check_row(const row_copy *c, size_t index, const char *source, const char *id, uint32_t version,
                      lc_limit_kind kind, double limit, lc_verdict alt, const char *targets) {
    CHECK(c->index == index);
    CHECK(strcmp(c->source, source) == 0);
    CHECK(strcmp(c->rule, id) == 0);
    CHECK(c->source_version == version);
    CHECK(c->limit_kind == kind);
    CHECK(c->limit == limit);
    CHECK(c->alt_action == alt);
    if (targets == NULL) {
        CHECK(c->alt_targets_empty);
    } else {
        CHECK(!c->alt_targets_empty && strcmp(c->alt_targets, targets) == 0);
    }
    /* For people: only check that it names the rule first. */
    size_t n = strlen(id);
    CHECK(strncmp(c->text, id, n) == 0 && strncmp(c->text + n, ": ", 2) == 0);
    if (c->index != index || strcmp(c->rule, id) != 0 || c->source_version != version || c->limit != limit) {
        fprintf(stderr, "  row %zu: %s/%s v%u kind %u limit %g alt %u targets '%s' text '%s'\n", c->index,
                c->source, c->rule, (unsigned)c->source_version, (unsigned)c->limit_kind, c->limit,
                (unsigned)c->alt_action, c->alt_targets, c->text);
    }
}

/* The three rules of FULL (with `calls` at `rate`) from `source` at `version`, from row `first`. */
static void check_policy(const rows *r, size_t first, const char *source, uint32_t version, double rate) {
    CHECK(r->count >= first + 3);
    if (r->count < first + 3) {
        return;
    }
    check_row(&r->rows[first], first, source, "calls", version, LC_LIMIT_RATE, rate, LC_VERDICT_REJECT, NULL);
    check_row(&r->rows[first + 1], first + 1, source, "messages", version, LC_LIMIT_PERCENT, MESSAGES_PERCENT,
              LC_VERDICT_REDIRECT, MESSAGES_TARGETS);
    check_row(&r->rows[first + 2], first + 2, source, "registrations", version, LC_LIMIT_WINDOW,
              REGISTRATIONS_WINDOW, LC_VERDICT_DROP, NULL);
}

static void rules_of(lc_engine *e, rows *r) {
    r->count = 0;
    CHECK_RESULT(lc_engine_rules_each(e, collect, r), LC_RESULT_OK);
}

static void test_rules_and_versions(void) {
    lc_engine *e = NULL;
    CHECK_RESULT(lc_engine_new(NULL, &e), LC_RESULT_OK);
    rows *r = calloc(1, sizeof *r);
    CHECK(r != NULL);
    if (r == NULL) {
        lc_engine_free(e);
        return;
    }
    /* No policy: no row, no version. */
    rules_of(e, r);
    CHECK(r->count == 0);
    uint32_t v = 12345;
    CHECK_RESULT(lc_engine_source_version(e, str("ops"), &v), LC_RESULT_UNKNOWN_SOURCE);
    CHECK(v == 12345);

    /* The full document. */
    CHECK_RESULT(publish(e, "ops", NULL, FULL), LC_RESULT_OK);
    rules_of(e, r);
    CHECK(r->count == 3);
    check_policy(r, 0, "ops", VERSION_FULL, CALLS_RATE);
    CHECK_RESULT(lc_engine_source_version(e, str("ops"), &v), LC_RESULT_OK);
    CHECK(v == VERSION_FULL);

    /* The partial one: every row of the source has the new version, `calls` the new rate, the
     * others are unchanged. */
    CHECK_RESULT(apply(e, "ops", PARTIAL), LC_RESULT_OK);
    rules_of(e, r);
    CHECK(r->count == 3);
    check_policy(r, 0, "ops", VERSION_PARTIAL, CALLS_RATE_PARTIAL);
    CHECK_RESULT(lc_engine_source_version(e, str("ops"), &v), LC_RESULT_OK);
    CHECK(v == VERSION_PARTIAL);
    /* The same partial again is a version gap: nothing changes. */
    CHECK_RESULT(apply(e, "ops", PARTIAL), LC_RESULT_VERSION_GAP);
    CHECK_RESULT(lc_engine_source_version(e, str("ops"), &v), LC_RESULT_OK);
    CHECK(v == VERSION_PARTIAL);

    /* A source whose policy has no rules: a version, no row. */
    CHECK_RESULT(publish(e, "empty", NULL, EMPTY), LC_RESULT_OK);
    rules_of(e, r);
    CHECK(r->count == 3);
    CHECK_RESULT(lc_engine_source_version(e, str("empty"), &v), LC_RESULT_OK);
    CHECK(v == VERSION_EMPTY);

    /* A notifier's redirect outside its domain is answered with a reject, but the row shows the
     * policy as written. Sources are listed in the order they were first published. */
    CHECK_RESULT(publish(e, "sip:lc@notifier.example", "sip:lc@notifier.example", FULL), LC_RESULT_OK);
    rules_of(e, r);
    CHECK(r->count == 6);
    check_policy(r, 0, "ops", VERSION_PARTIAL, CALLS_RATE_PARTIAL);
    check_policy(r, 3, "sip:lc@notifier.example", VERSION_FULL, CALLS_RATE);

    /* Publishing from the callback: the rows of this call stay those of the snapshot it started
     * with; the next call sees the new source. */
    r->count = 0;
    r->engine = e;
    r->publish = FULL;
    r->publish_result = LC_RESULT_PANIC;
    CHECK_RESULT(lc_engine_rules_each(e, collect, r), LC_RESULT_OK);
    CHECK(r->publish_result == LC_RESULT_OK);
    CHECK(r->count == 6);
    check_policy(r, 0, "ops", VERSION_PARTIAL, CALLS_RATE_PARTIAL);
    check_policy(r, 3, "sip:lc@notifier.example", VERSION_FULL, CALLS_RATE);
    rules_of(e, r);
    CHECK(r->count == 9);
    check_policy(r, 6, "late", VERSION_FULL, CALLS_RATE);

    /* Withdrawn: unknown again, and its rows are gone. */
    uint64_t g = 0;
    CHECK_RESULT(lc_engine_withdraw(e, str("ops"), &g), LC_RESULT_OK);
    v = 12345;
    CHECK_RESULT(lc_engine_source_version(e, str("ops"), &v), LC_RESULT_UNKNOWN_SOURCE);
    CHECK(v == 12345);
    rules_of(e, r);
    CHECK(r->count == 6);
    check_policy(r, 0, "sip:lc@notifier.example", VERSION_FULL, CALLS_RATE);
    check_policy(r, 3, "late", VERSION_FULL, CALLS_RATE);
    free(r);
    lc_engine_free(e);
}

static void test_errors(void) {
    lc_engine *e = NULL;
    CHECK_RESULT(lc_engine_new(NULL, &e), LC_RESULT_OK);
    CHECK_RESULT(publish(e, "ops", NULL, FULL), LC_RESULT_OK);
    rows r;
    memset(&r, 0, sizeof r);
    CHECK_RESULT(lc_engine_rules_each(e, NULL, &r), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_engine_rules_each(NULL, collect, &r), LC_RESULT_NULL_PARAMETER);
    CHECK(r.count == 0);
    char msg[256];
    size_t n = 0;
    CHECK_RESULT(lc_engine_rules_each(e, NULL, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_last_error((uint8_t *)msg, sizeof msg - 1, &n), LC_RESULT_OK);
    msg[n < sizeof msg ? n : sizeof msg - 1] = '\0';
    CHECK(strstr(msg, "callback") != NULL);
    uint32_t v = 12345;
    CHECK_RESULT(lc_engine_source_version(NULL, str("ops"), &v), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_engine_source_version(e, str("ops"), NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_engine_source_version(e, NONE, &v), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_engine_source_version(e, str("op\xff"), &v), LC_RESULT_INVALID_UTF8);
    /* Source names are compared exactly. */
    CHECK_RESULT(lc_engine_source_version(e, str("OPS"), &v), LC_RESULT_UNKNOWN_SOURCE);
    CHECK_RESULT(lc_engine_source_version(e, str("nobody"), &v), LC_RESULT_UNKNOWN_SOURCE);
    CHECK(v == 12345);
    CHECK_RESULT(lc_last_error((uint8_t *)msg, sizeof msg - 1, &n), LC_RESULT_OK);
    msg[n < sizeof msg ? n : sizeof msg - 1] = '\0';
    CHECK(strstr(msg, "nobody") != NULL);
    CHECK(strcmp(lc_result_text(LC_RESULT_UNKNOWN_SOURCE), "no policy from that source") == 0);
    /* The constants are distinct from each other and from 0 (a zeroed row names no kind). */
    CHECK(LC_LIMIT_RATE != 0 && LC_LIMIT_PERCENT != 0 && LC_LIMIT_WINDOW != 0);
    CHECK(LC_LIMIT_RATE != LC_LIMIT_PERCENT && LC_LIMIT_PERCENT != LC_LIMIT_WINDOW &&
          LC_LIMIT_RATE != LC_LIMIT_WINDOW);
    lc_engine_free(e);
}

int main(void) {
    test_rules_and_versions();
    test_errors();
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
