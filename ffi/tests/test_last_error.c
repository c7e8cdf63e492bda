/* lc_last_error: the calling thread's message for its last failing call. A refused publish
 * names the line:column of the error in the document, a version gap the expected and received
 * versions, an invalid transport the field and its value; a buffer too small reports the
 * length needed; another thread does not see this thread's error; a successful call leaves the
 * message (errno-like), and lc_last_error itself never changes it. Built with -std=c11 -Wall
 * -Wextra -Wpedantic -Werror and run under ASan+UBSan and under valgrind (see c-test). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadctl.h"
#include "check.h"

/* The thread's last error as a NUL-terminated string in `buf` (empty when none). */
static lc_result last_error(char *buf, size_t cap) {
    size_t n = 12345;
    lc_result r = lc_last_error((uint8_t *)buf, cap - 1, &n);
    buf[r == LC_RESULT_OK ? n : 0] = '\0';
    if (r == LC_RESULT_EMPTY) CHECK(n == 0);
    return r;
}

/* The rate on line 3 is negative: its text starts at column 46. */
static const char *BAD =
    "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\"\n"
    "         xmlns:lc=\"urn:ietf:params:xml:ns:load-control\" version=\"0\" state=\"full\">\n"
    "  <rule id=\"r1\"><actions><lc:accept><lc:rate>-1</lc:rate></lc:accept></actions></rule>\n"
    "</ruleset>\n";

static const char *FULL =
    "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\"\n"
    "         xmlns:lc=\"urn:ietf:params:xml:ns:load-control\" version=\"1\" state=\"full\">\n"
    "  <rule id=\"r1\"><actions><lc:accept><lc:rate>10</lc:rate></lc:accept></actions></rule>\n"
    "</ruleset>\n";

/* Version 7 where 2 is expected. */
static const char *GAP =
    "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\"\n"
    "         xmlns:lc=\"urn:ietf:params:xml:ns:load-control\" version=\"7\" state=\"partial\">\n"
    "  <rule id=\"r1\"><actions><lc:accept><lc:rate>20</lc:rate></lc:accept></actions></rule>\n"
    "</ruleset>\n";

static void *other_thread(void *arg) {
    char buf[256];
    lc_result *seen = arg;
    /* A thread of its own: none of the main thread's errors. */
    seen[0] = last_error(buf, sizeof buf);
    /* Its own failure is its own. */
    lc_engine_config c;
    lc_engine_config_default(&c);
    c.shards = 0;
    lc_engine *e = NULL;
    seen[1] = lc_engine_new(&c, &e);
    seen[2] = last_error(buf, sizeof buf);
    seen[3] = strcmp(buf, "lc_engine_config.shards: 0 (must be at least 1)") == 0;
    return NULL;
}

int main(void) {
    char buf[512];
    CHECK_RESULT(last_error(buf, sizeof buf), LC_RESULT_EMPTY);
    CHECK_RESULT(lc_last_error(NULL, 0, NULL), LC_RESULT_NULL_PARAMETER);
    /* lc_last_error never sets the last error, even when it fails: still empty. */
    CHECK_RESULT(last_error(buf, sizeof buf), LC_RESULT_EMPTY);
    /* ... nor leaves anything behind for a later failing call to report as its own. */
    {
        lc_scheduler_config qc0 = {LC_DISCIPLINE_PRIORITY, 1, 1};
        lc_scheduler *q0 = NULL;
        CHECK_RESULT(lc_scheduler_new(&qc0, &q0), LC_RESULT_OK);
        uintptr_t it;
        lc_class cl;
        CHECK_RESULT(lc_last_error((uint8_t *)buf, sizeof buf, NULL), LC_RESULT_NULL_PARAMETER);
        CHECK_RESULT(lc_scheduler_pop(q0, &it, &cl), LC_RESULT_EMPTY);
        CHECK_RESULT(last_error(buf, sizeof buf), LC_RESULT_OK);
        CHECK(strcmp(buf, lc_result_text(LC_RESULT_EMPTY)) == 0);
        lc_scheduler_free(q0);
    }

    lc_engine *e = NULL;
    uint64_t g = 0;
    CHECK_RESULT(lc_engine_new(NULL, &e), LC_RESULT_OK);

    /* A refused document: the reader's message, with where and which rule. */
    CHECK_RESULT(lc_engine_publish(e, str("a"), NONE, (const uint8_t *)BAD, strlen(BAD), &g), LC_RESULT_INVALID_POLICY);
    CHECK_RESULT(last_error(buf, sizeof buf), LC_RESULT_OK);
    CHECK(strncmp(buf, "3:46: ", 6) == 0);
    CHECK(strstr(buf, "\"r1\"") != NULL);
    /* Same message as lc_policy_check gives. */
    char check[512];
    size_t n = 0;
    CHECK_RESULT(lc_policy_check((const uint8_t *)BAD, strlen(BAD), (uint8_t *)check, sizeof check - 1, &n), LC_RESULT_INVALID_POLICY);
    check[n] = '\0';
    CHECK(strcmp(buf, check) == 0);
    printf("refused publish: %s\n", buf);

    /* A version gap: expected and received versions. */
    CHECK_RESULT(lc_engine_publish(e, str("a"), NONE, (const uint8_t *)FULL, strlen(FULL), &g), LC_RESULT_OK);
    CHECK_RESULT(lc_engine_apply(e, str("a"), NONE, (const uint8_t *)GAP, strlen(GAP), &g), LC_RESULT_VERSION_GAP);
    CHECK_RESULT(last_error(buf, sizeof buf), LC_RESULT_OK);
    CHECK(strstr(buf, "version 7") != NULL && strstr(buf, "expected 2") != NULL);
    printf("version gap: %s\n", buf);

    /* An invalid transport: the field and the value. */
    lc_worker *w = NULL;
    CHECK_RESULT(lc_worker_attach(e, -1, &w), LC_RESULT_OK);
    lc_request r;
    memset(&r, 0, sizeof r);
    r.method = str("INVITE");
    r.transport = 42;
    lc_decision d;
    CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_INVALID_ARGUMENT);
    CHECK_RESULT(last_error(buf, sizeof buf), LC_RESULT_OK);
    CHECK(strcmp(buf, "lc_request.transport: 42 is not an LC_TRANSPORT_* value") == 0);
    printf("invalid transport: %s\n", buf);

    /* A raw SIP error: the scanner's message. */
    const char *sip = "SIP/2.0 200 OK\r\n\r\n";
    CHECK_RESULT(lc_classify_sip(w, (const uint8_t *)sip, strlen(sip), LC_TRANSPORT_UDP, &d), LC_RESULT_SIP_NOT_A_REQUEST);
    CHECK_RESULT(last_error(buf, sizeof buf), LC_RESULT_OK);
    CHECK(strncmp(buf, "SIP: ", 5) == 0);
    /* A NULL pointer: the parameter or field, as the header names it. */
    CHECK_RESULT(lc_classify(w, NULL, &d), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(last_error(buf, sizeof buf), LC_RESULT_OK);
    CHECK(strcmp(buf, "req: NULL where a pointer is required") == 0);
    lc_subscriber_config sc;
    memset(&sc, 0, sizeof sc);
    sc.notifier = str("sip:sbc.example.com");
    sc.call_id = str("c");
    sc.tag = str("t");
    lc_subscriber *s = NULL;
    CHECK_RESULT(lc_subscriber_new(e, &sc, 0, &s), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(last_error(buf, sizeof buf), LC_RESULT_OK);
    CHECK(strcmp(buf, "lc_subscriber_config.subscriber: NULL where a pointer is required") == 0);
    /* Not UTF-8: the field and where the first bad byte is. */
    sc.subscriber = str("sip:pro\xffxy.example.net");
    CHECK_RESULT(lc_subscriber_new(e, &sc, 0, &s), LC_RESULT_INVALID_UTF8);
    CHECK_RESULT(last_error(buf, sizeof buf), LC_RESULT_OK);
    CHECK(strcmp(buf, "lc_subscriber_config.subscriber: not UTF-8 (invalid byte at offset 7 of 22)") == 0);
    printf("not UTF-8: %s\n", buf);
    /* A boolean byte that is neither 0 nor 1. */
    r.transport = LC_TRANSPORT_UDP;
    r.initial = 2;
    CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_INVALID_ARGUMENT);
    CHECK_RESULT(last_error(buf, sizeof buf), LC_RESULT_OK);
    CHECK(strcmp(buf, "lc_request.initial: 2 is not a boolean (0 or 1)") == 0);
    r.initial = 0;
    /* A failure without detail: the code's text. */
    lc_scheduler_config qc = {LC_DISCIPLINE_PRIORITY, 4, 4};
    lc_scheduler *q = NULL;
    CHECK_RESULT(lc_scheduler_new(&qc, &q), LC_RESULT_OK);
    uintptr_t item;
    lc_class cls;
    CHECK_RESULT(lc_scheduler_pop(q, &item, &cls), LC_RESULT_EMPTY);
    CHECK_RESULT(last_error(buf, sizeof buf), LC_RESULT_OK);
    CHECK(strcmp(buf, lc_result_text(LC_RESULT_EMPTY)) == 0);
    lc_scheduler_free(q);
    r.transport = 42;
    CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_INVALID_ARGUMENT);

    /* Buffer too small: the full length, the buffer untouched, the message kept. */
    const size_t full = strlen("lc_request.transport: 42 is not an LC_TRANSPORT_* value");
    char small[8] = "XXXXXXX";
    n = 0;
    CHECK_RESULT(lc_last_error((uint8_t *)small, sizeof small, &n), LC_RESULT_BUFFER_TOO_SMALL);
    CHECK(n == full && strcmp(small, "XXXXXXX") == 0);
    n = 0;
    CHECK_RESULT(lc_last_error(NULL, 0, &n), LC_RESULT_BUFFER_TOO_SMALL);
    CHECK(n == full);
    CHECK_RESULT(last_error(buf, sizeof buf), LC_RESULT_OK);
    CHECK(strlen(buf) == full);

    /* Another thread sees none of this thread's errors, and its own do not reach this one. */
    lc_result seen[4] = {0, 0, 0, 0};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, other_thread, seen) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(seen[0] == LC_RESULT_EMPTY);
    CHECK(seen[1] == LC_RESULT_INVALID_ARGUMENT && seen[2] == LC_RESULT_OK && seen[3] == 1);
    CHECK_RESULT(last_error(buf, sizeof buf), LC_RESULT_OK);
    CHECK(strcmp(buf, "lc_request.transport: 42 is not an LC_TRANSPORT_* value") == 0);

    /* A successful call afterwards leaves the message (only failing calls set it). */
    r.transport = LC_TRANSPORT_UDP;
    CHECK_RESULT(lc_classify(w, &r, &d), LC_RESULT_OK);
    if (d.has_ticket) CHECK_RESULT(lc_complete(w, &d.ticket), LC_RESULT_OK);
    CHECK_RESULT(last_error(buf, sizeof buf), LC_RESULT_OK);
    CHECK(strcmp(buf, "lc_request.transport: 42 is not an LC_TRANSPORT_* value") == 0);

    lc_worker_free(w);
    lc_engine_free(e);
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
