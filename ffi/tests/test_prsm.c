/* PRSM through the C ABI: the two-queue scheduler (strict priority, tail drop, FIFO mode,
 * counters, many producers and consumers) and the retransmission detector (Timer B in simulated
 * time, the RFC 2543 key from caller-parsed parts, malformed Via, forget), every NULL and
 * invalid argument, and the pipeline they are made for: classify raw SIP with a worker, then
 * observe and schedule only what was accepted. Built with -std=c11 -Wall -Wextra -Wpedantic
 * -Werror and run under ASan+UBSan and under valgrind (see the Makefile's c-test target). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadctl.h"
#include "check.h"

#define SEC 1000000000ull
#define MS 1000000ull

static lc_scheduler *scheduler(lc_discipline discipline, size_t primary, size_t secondary) {
    lc_scheduler_config c;
    memset(&c, 0, sizeof c);
    c.discipline = discipline;
    c.primary_capacity = primary;
    c.secondary_capacity = secondary;
    lc_scheduler *s = NULL;
    CHECK_RESULT(lc_scheduler_new(&c, &s), LC_RESULT_OK);
    return s;
}

static lc_detector *detector(size_t capacity, size_t stripes) {
    lc_detector_config c;
    CHECK_RESULT(lc_detector_config_default(&c), LC_RESULT_OK);
    c.capacity = capacity;
    c.stripes = stripes;
    lc_detector *d = NULL;
    CHECK_RESULT(lc_detector_new(&c, &d), LC_RESULT_OK);
    return d;
}

static lc_result observe(lc_detector *d, const char *msg, uint64_t now_ns, lc_class *cls) {
    return lc_detector_observe_sip(d, (const uint8_t *)msg, strlen(msg), now_ns, cls);
}

/* Pops everything into `items` / `classes` (at most `cap`); returns how many. */
static size_t drain(lc_scheduler *s, uintptr_t *items, lc_class *classes, size_t cap) {
    size_t n = 0;
    uintptr_t item;
    lc_class cls;
    while (n < cap && lc_scheduler_pop(s, &item, &cls) == LC_RESULT_OK) {
        items[n] = item;
        classes[n] = cls;
        n++;
    }
    return n;
}

static void test_strict_priority(void) {
    lc_scheduler *s = scheduler(LC_DISCIPLINE_PRIORITY, 4, 4);
    /* The token can be a pointer as well as an index. */
    static const char payload[] = "request";
    CHECK_RESULT(lc_scheduler_push(s, 1, LC_CLASS_RETRANSMISSION), LC_RESULT_OK);
    CHECK_RESULT(lc_scheduler_push(s, (uintptr_t)payload, LC_CLASS_ORIGINAL), LC_RESULT_OK);
    CHECK_RESULT(lc_scheduler_push(s, 3, LC_CLASS_RETRANSMISSION), LC_RESULT_OK);
    CHECK_RESULT(lc_scheduler_push(s, 4, LC_CLASS_ORIGINAL), LC_RESULT_OK);
    lc_scheduler_counters st;
    CHECK_RESULT(lc_scheduler_stats(s, &st), LC_RESULT_OK);
    CHECK(st.primary.capacity == 4 && st.secondary.capacity == 4);
    CHECK(st.primary.len == 2 && st.secondary.len == 2);
    /* Originals first, each queue in arrival order. */
    uintptr_t items[8];
    lc_class classes[8];
    size_t n = drain(s, items, classes, 8);
    CHECK(n == 4);
    CHECK(items[0] == (uintptr_t)payload && classes[0] == LC_CLASS_ORIGINAL);
    CHECK(strcmp((const char *)items[0], "request") == 0);
    CHECK(items[1] == 4 && classes[1] == LC_CLASS_ORIGINAL);
    CHECK(items[2] == 1 && classes[2] == LC_CLASS_RETRANSMISSION);
    CHECK(items[3] == 3 && classes[3] == LC_CLASS_RETRANSMISSION);
    /* Empty: nothing written. */
    uintptr_t item = 777;
    lc_class cls = 9;
    CHECK_RESULT(lc_scheduler_pop(s, &item, &cls), LC_RESULT_EMPTY);
    CHECK(item == 777 && cls == 9);
    /* An original pushed while retransmissions wait still goes first. */
    CHECK_RESULT(lc_scheduler_push(s, 10, LC_CLASS_RETRANSMISSION), LC_RESULT_OK);
    CHECK_RESULT(lc_scheduler_push(s, 11, LC_CLASS_ORIGINAL), LC_RESULT_OK);
    CHECK_RESULT(lc_scheduler_pop(s, &item, &cls), LC_RESULT_OK);
    CHECK(item == 11 && cls == LC_CLASS_ORIGINAL);
    CHECK_RESULT(lc_scheduler_push(s, 12, LC_CLASS_ORIGINAL), LC_RESULT_OK);
    CHECK_RESULT(lc_scheduler_pop(s, &item, &cls), LC_RESULT_OK);
    CHECK(item == 12);
    CHECK_RESULT(lc_scheduler_pop(s, &item, &cls), LC_RESULT_OK);
    CHECK(item == 10 && cls == LC_CLASS_RETRANSMISSION);
    CHECK_RESULT(lc_scheduler_stats(s, &st), LC_RESULT_OK);
    CHECK(st.primary.enqueued == 4 && st.primary.served == 4 && st.primary.dropped == 0 && st.primary.len == 0);
    CHECK(st.secondary.enqueued == 3 && st.secondary.served == 3 && st.secondary.dropped == 0 && st.secondary.len == 0);
    lc_scheduler_free(s);
}

static void test_tail_drop(void) {
    lc_scheduler *s = scheduler(LC_DISCIPLINE_PRIORITY, 2, 1);
    CHECK_RESULT(lc_scheduler_push(s, 1, LC_CLASS_ORIGINAL), LC_RESULT_OK);
    CHECK_RESULT(lc_scheduler_push(s, 2, LC_CLASS_ORIGINAL), LC_RESULT_OK);
    CHECK_RESULT(lc_scheduler_push(s, 3, LC_CLASS_ORIGINAL), LC_RESULT_QUEUE_FULL);
    CHECK(strstr(lc_result_text(LC_RESULT_QUEUE_FULL), "full") != NULL);
    /* The secondary queue has room of its own. */
    CHECK_RESULT(lc_scheduler_push(s, 4, LC_CLASS_RETRANSMISSION), LC_RESULT_OK);
    CHECK_RESULT(lc_scheduler_push(s, 5, LC_CLASS_RETRANSMISSION), LC_RESULT_QUEUE_FULL);
    lc_scheduler_counters st;
    CHECK_RESULT(lc_scheduler_stats(s, &st), LC_RESULT_OK);
    CHECK(st.primary.len == 2 && st.primary.enqueued == 2 && st.primary.dropped == 1);
    CHECK(st.secondary.len == 1 && st.secondary.enqueued == 1 && st.secondary.dropped == 1);
    /* The dropped items never come out. */
    uintptr_t items[8];
    lc_class classes[8];
    CHECK(drain(s, items, classes, 8) == 3);
    CHECK(items[0] == 1 && items[1] == 2 && items[2] == 4);
    /* Room again after serving. */
    CHECK_RESULT(lc_scheduler_push(s, 6, LC_CLASS_ORIGINAL), LC_RESULT_OK);
    CHECK_RESULT(lc_scheduler_stats(s, &st), LC_RESULT_OK);
    CHECK(st.primary.served == 2 && st.secondary.served == 1 && st.primary.len == 1);
    lc_scheduler_free(s);
}

static void test_fifo_discipline(void) {
    /* The secondary capacity is ignored under FIFO (0 is fine). */
    lc_scheduler *s = scheduler(LC_DISCIPLINE_FIFO, 3, 0);
    CHECK_RESULT(lc_scheduler_push(s, 1, LC_CLASS_RETRANSMISSION), LC_RESULT_OK);
    CHECK_RESULT(lc_scheduler_push(s, 2, LC_CLASS_ORIGINAL), LC_RESULT_OK);
    CHECK_RESULT(lc_scheduler_push(s, 3, LC_CLASS_RETRANSMISSION), LC_RESULT_OK);
    CHECK_RESULT(lc_scheduler_push(s, 4, LC_CLASS_ORIGINAL), LC_RESULT_QUEUE_FULL);
    uintptr_t items[8];
    lc_class classes[8];
    CHECK(drain(s, items, classes, 8) == 3);
    CHECK(items[0] == 1 && classes[0] == LC_CLASS_RETRANSMISSION);
    CHECK(items[1] == 2 && classes[1] == LC_CLASS_ORIGINAL);
    CHECK(items[2] == 3 && classes[2] == LC_CLASS_RETRANSMISSION);
    lc_scheduler_counters st;
    CHECK_RESULT(lc_scheduler_stats(s, &st), LC_RESULT_OK);
    CHECK(st.primary.capacity == 3 && st.primary.enqueued == 3 && st.primary.dropped == 1 && st.primary.served == 3);
    CHECK(st.secondary.capacity == 0 && st.secondary.enqueued == 0 && st.secondary.dropped == 0 && st.secondary.served == 0);
    lc_scheduler_free(s);
}

static const char *INVITE =
    "INVITE sip:bob@b.example SIP/2.0\r\n"
    "Via: SIP/2.0/UDP pc33.a.example:5060;branch=z9hG4bK776asdhds;rport\r\n"
    "Via: SIP/2.0/UDP proxy.example;branch=z9hG4bKouter\r\n"
    "From: Alice <sip:alice@a.example>;tag=1928301774\r\n"
    "To: Bob <sip:bob@b.example>\r\n"
    "Call-ID: a84b4c76e66710@pc33.a.example\r\n"
    "CSeq: 314159 INVITE\r\n"
    "Content-Length: 0\r\n"
    "\r\n";

static void test_invalid_arguments(void) {
    lc_scheduler_config sc;
    memset(&sc, 0, sizeof sc);
    sc.discipline = LC_DISCIPLINE_PRIORITY;
    sc.primary_capacity = 4;
    sc.secondary_capacity = 4;
    lc_scheduler *s = NULL;
    CHECK_RESULT(lc_scheduler_new(NULL, &s), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_scheduler_new(&sc, NULL), LC_RESULT_NULL_PARAMETER);
    sc.discipline = 7;
    CHECK_RESULT(lc_scheduler_new(&sc, &s), LC_RESULT_INVALID_ARGUMENT);
    sc.discipline = LC_DISCIPLINE_PRIORITY;
    sc.primary_capacity = 0;
    CHECK_RESULT(lc_scheduler_new(&sc, &s), LC_RESULT_INVALID_ARGUMENT);
    sc.primary_capacity = 4;
    sc.secondary_capacity = 0;
    CHECK_RESULT(lc_scheduler_new(&sc, &s), LC_RESULT_INVALID_ARGUMENT);
    sc.secondary_capacity = ((size_t)1 << 28) + 1;
    CHECK_RESULT(lc_scheduler_new(&sc, &s), LC_RESULT_INVALID_ARGUMENT);
    CHECK(s == NULL);
    sc.secondary_capacity = 4;
    CHECK_RESULT(lc_scheduler_new(&sc, &s), LC_RESULT_OK);
    CHECK(s != NULL);

    CHECK_RESULT(lc_scheduler_push(NULL, 1, LC_CLASS_ORIGINAL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_scheduler_push(s, 1, 2), LC_RESULT_INVALID_ARGUMENT);
    CHECK_RESULT(lc_scheduler_push(s, 1, 0xffffffffu), LC_RESULT_INVALID_ARGUMENT);
    /* A pop with a NULL output fails before taking anything out: the item is not lost. */
    CHECK_RESULT(lc_scheduler_push(s, 42, LC_CLASS_ORIGINAL), LC_RESULT_OK);
    uintptr_t item = 0;
    lc_class cls = 0;
    CHECK_RESULT(lc_scheduler_pop(NULL, &item, &cls), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_scheduler_pop(s, NULL, &cls), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_scheduler_pop(s, &item, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_scheduler_pop(s, &item, &cls), LC_RESULT_OK);
    CHECK(item == 42 && cls == LC_CLASS_ORIGINAL);
    lc_scheduler_counters sst;
    CHECK_RESULT(lc_scheduler_stats(NULL, &sst), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_scheduler_stats(s, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_scheduler_stats(s, &sst), LC_RESULT_OK);
    /* Refused pushes are not counted as drops. */
    CHECK(sst.primary.enqueued == 1 && sst.primary.dropped == 0 && sst.secondary.enqueued == 0);
    lc_scheduler_free(s);
    lc_scheduler_free(NULL);

    lc_detector_config dc;
    CHECK_RESULT(lc_detector_config_default(NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_detector_config_default(&dc), LC_RESULT_OK);
    CHECK(dc.capacity == 262144 && dc.t1_ns == 500 * MS && dc.stripes == 16);
    lc_detector *d = NULL;
    CHECK_RESULT(lc_detector_new(&dc, NULL), LC_RESULT_NULL_PARAMETER);
    lc_detector_config bad = dc;
    bad.capacity = 0;
    CHECK_RESULT(lc_detector_new(&bad, &d), LC_RESULT_INVALID_ARGUMENT);
    bad = dc;
    bad.stripes = 0;
    CHECK_RESULT(lc_detector_new(&bad, &d), LC_RESULT_INVALID_ARGUMENT);
    bad = dc;
    bad.capacity = 4;
    bad.stripes = 8;
    CHECK_RESULT(lc_detector_new(&bad, &d), LC_RESULT_INVALID_ARGUMENT);
    bad = dc;
    bad.t1_ns = 0;
    CHECK_RESULT(lc_detector_new(&bad, &d), LC_RESULT_INVALID_ARGUMENT);
    bad = dc;
    bad.capacity = ((size_t)1 << 28) + 1;
    CHECK_RESULT(lc_detector_new(&bad, &d), LC_RESULT_INVALID_ARGUMENT);
    CHECK(d == NULL);
    /* NULL config: the defaults. */
    CHECK_RESULT(lc_detector_new(NULL, &d), LC_RESULT_OK);
    CHECK(d != NULL);

    lc_class c = 99;
    bool forgotten = false;
    const uint8_t *msg = (const uint8_t *)INVITE;
    size_t len = strlen(INVITE);
    CHECK_RESULT(lc_detector_observe_sip(NULL, msg, len, 0, &c), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_detector_observe_sip(d, NULL, len, 0, &c), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_detector_observe_sip(d, msg, len, 0, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_detector_forget_sip(NULL, msg, len, &forgotten), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_detector_forget_sip(d, NULL, len, &forgotten), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_detector_forget_sip(d, msg, len, NULL), LC_RESULT_NULL_PARAMETER);
    lc_transaction_parts p;
    memset(&p, 0, sizeof p);
    p.method = str("INVITE");
    p.request_uri = str("sip:bob@b.example");
    p.top_via = str("SIP/2.0/UDP h.example;branch=z9hG4bK1");
    p.call_id = str("c1");
    p.cseq = 1;
    CHECK_RESULT(lc_detector_observe(NULL, &p, 0, &c), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_detector_observe(d, NULL, 0, &c), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_detector_observe(d, &p, 0, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_detector_forget(NULL, &p, &forgotten), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_detector_forget(d, NULL, &forgotten), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_detector_forget(d, &p, NULL), LC_RESULT_NULL_PARAMETER);
    /* The required strings of the parts. */
    lc_transaction_parts q = p;
    q.method = NONE;
    CHECK_RESULT(lc_detector_observe(d, &q, 0, &c), LC_RESULT_NULL_PARAMETER);
    q = p;
    q.request_uri = NONE;
    CHECK_RESULT(lc_detector_observe(d, &q, 0, &c), LC_RESULT_NULL_PARAMETER);
    q = p;
    q.top_via = NONE;
    CHECK_RESULT(lc_detector_observe(d, &q, 0, &c), LC_RESULT_NULL_PARAMETER);
    q = p;
    q.call_id = NONE;
    CHECK_RESULT(lc_detector_forget(d, &q, &forgotten), LC_RESULT_NULL_PARAMETER);
    CHECK(c == 99 && !forgotten);
    lc_detector_counters dst;
    CHECK_RESULT(lc_detector_stats(NULL, &dst), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_detector_stats(d, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_detector_stats(d, &dst), LC_RESULT_OK);
    /* Nothing was recorded by the refused calls. */
    CHECK(dst.tracked == 0 && dst.originals == 0 && dst.retransmissions == 0 && dst.evicted == 0);
    lc_detector_free(d);
    lc_detector_free(NULL);
}

static void test_detector_timer_b(void) {
    lc_detector *d = detector(1024, 4);
    lc_class c;
    CHECK_RESULT(observe(d, INVITE, 0, &c), LC_RESULT_OK);
    CHECK(c == LC_CLASS_ORIGINAL);
    /* The INVITE client retransmits at 0.5, 1.5, 3.5, ... s; the last copy before Timer B. */
    const uint64_t copies[] = {SEC / 2, 3 * SEC / 2, 7 * SEC / 2, 31 * SEC + SEC / 2, 32 * SEC - 1};
    for (size_t i = 0; i < sizeof copies / sizeof copies[0]; i++) {
        CHECK_RESULT(observe(d, INVITE, copies[i], &c), LC_RESULT_OK);
        CHECK(c == LC_CLASS_RETRANSMISSION);
    }
    /* 64·T1 = 32 s after the first copy the transaction is over: a copy starts afresh. */
    CHECK_RESULT(observe(d, INVITE, 32 * SEC, &c), LC_RESULT_OK);
    CHECK(c == LC_CLASS_ORIGINAL);
    CHECK_RESULT(observe(d, INVITE, 33 * SEC, &c), LC_RESULT_OK);
    CHECK(c == LC_CLASS_RETRANSMISSION);
    lc_detector_counters st;
    CHECK_RESULT(lc_detector_stats(d, &st), LC_RESULT_OK);
    CHECK(st.originals == 2 && st.retransmissions == 6 && st.tracked == 1 && st.evicted == 0);

    /* RFC 3261 key: the same branch and sent-by is the same transaction whatever the other
     * headers say; another branch is another transaction. */
    char other[1024];
    const char *at = strstr(INVITE, "a84b4c76e66710");
    CHECK(at != NULL);
    snprintf(other, sizeof other, "%.*sZZZ%s", (int)(at - INVITE), INVITE, at + strlen("a84b4c76e66710"));
    CHECK_RESULT(observe(d, other, 33 * SEC, &c), LC_RESULT_OK);
    CHECK(c == LC_CLASS_RETRANSMISSION);
    at = strstr(INVITE, "776asdhds");
    snprintf(other, sizeof other, "%.*sNEW%s", (int)(at - INVITE), INVITE, at + strlen("776asdhds"));
    CHECK_RESULT(observe(d, other, 33 * SEC, &c), LC_RESULT_OK);
    CHECK(c == LC_CLASS_ORIGINAL);

    /* Forget: the next copy is an original again. */
    bool forgotten = false;
    CHECK_RESULT(lc_detector_forget_sip(d, (const uint8_t *)INVITE, strlen(INVITE), &forgotten), LC_RESULT_OK);
    CHECK(forgotten);
    CHECK_RESULT(lc_detector_forget_sip(d, (const uint8_t *)INVITE, strlen(INVITE), &forgotten), LC_RESULT_OK);
    CHECK(!forgotten);
    CHECK_RESULT(observe(d, INVITE, 34 * SEC, &c), LC_RESULT_OK);
    CHECK(c == LC_CLASS_ORIGINAL);
    CHECK_RESULT(observe(d, INVITE, 35 * SEC, &c), LC_RESULT_OK);
    CHECK(c == LC_CLASS_RETRANSMISSION);

    /* A shorter T1 shortens Timer B. */
    lc_detector_config cfg;
    CHECK_RESULT(lc_detector_config_default(&cfg), LC_RESULT_OK);
    cfg.capacity = 16;
    cfg.stripes = 1;
    cfg.t1_ns = 100 * MS;
    lc_detector *fast = NULL;
    CHECK_RESULT(lc_detector_new(&cfg, &fast), LC_RESULT_OK);
    CHECK_RESULT(observe(fast, INVITE, 0, &c), LC_RESULT_OK);
    CHECK_RESULT(observe(fast, INVITE, 64 * 100 * MS - 1, &c), LC_RESULT_OK);
    CHECK(c == LC_CLASS_RETRANSMISSION);
    CHECK_RESULT(observe(fast, INVITE, 64 * 100 * MS, &c), LC_RESULT_OK);
    CHECK(c == LC_CLASS_ORIGINAL);
    lc_detector_free(fast);
    lc_detector_free(d);
}

/* An RFC 2543 client: no z9hG4bK branch, so the transaction is Request-URI, tags, Call-ID,
 * CSeq, method and the whole top Via. */
static const char *OLD_INVITE =
    "INVITE sip:bob@b.example SIP/2.0\r\n"
    "Via: SIP/2.0/UDP old.a.example;branch=1234\r\n"
    "From: <sip:alice@a.example>;tag=77\r\n"
    "To: <sip:bob@b.example>\r\n"
    "Call-ID: old-call@a.example\r\n"
    "CSeq: 7 INVITE\r\n"
    "\r\n";

static void test_rfc2543_parts(void) {
    lc_detector *d = detector(256, 2);
    lc_transaction_parts p;
    memset(&p, 0, sizeof p);
    p.method = str("INVITE");
    p.request_uri = str("sip:bob@b.example");
    p.top_via = str("SIP/2.0/UDP old.a.example;branch=1234");
    p.call_id = str("old-call@a.example");
    p.cseq = 7;
    p.from_tag = str("77");
    p.to_tag = NONE;
    lc_class c;
    /* The same transaction seen through the scanner and through the caller's parts. */
    CHECK_RESULT(observe(d, OLD_INVITE, 0, &c), LC_RESULT_OK);
    CHECK(c == LC_CLASS_ORIGINAL);
    CHECK_RESULT(lc_detector_observe(d, &p, SEC / 2, &c), LC_RESULT_OK);
    CHECK(c == LC_CLASS_RETRANSMISSION);
    /* Every field of the RFC 2543 key counts. */
    lc_transaction_parts q = p;
    q.call_id = str("other-call@a.example");
    CHECK_RESULT(lc_detector_observe(d, &q, SEC, &c), LC_RESULT_OK);
    CHECK(c == LC_CLASS_ORIGINAL);
    q = p;
    q.from_tag = NONE;
    CHECK_RESULT(lc_detector_observe(d, &q, SEC, &c), LC_RESULT_OK);
    CHECK(c == LC_CLASS_ORIGINAL);
    q = p;
    q.to_tag = str("9");
    CHECK_RESULT(lc_detector_observe(d, &q, SEC, &c), LC_RESULT_OK);
    CHECK(c == LC_CLASS_ORIGINAL);
    q = p;
    q.request_uri = str("sip:carol@b.example");
    CHECK_RESULT(lc_detector_observe(d, &q, SEC, &c), LC_RESULT_OK);
    CHECK(c == LC_CLASS_ORIGINAL);
    q = p;
    q.cseq = 8;
    CHECK_RESULT(lc_detector_observe(d, &q, SEC, &c), LC_RESULT_OK);
    CHECK(c == LC_CLASS_ORIGINAL);
    q = p;
    q.top_via = str("SIP/2.0/UDP old.a.example;branch=1234;received=192.0.2.1");
    CHECK_RESULT(lc_detector_observe(d, &q, SEC, &c), LC_RESULT_OK);
    CHECK(c == LC_CLASS_ORIGINAL);
    /* ...whereas with an RFC 3261 branch the dialog fields do not. */
    q = p;
    q.top_via = str("SIP/2.0/UDP new.a.example;branch=z9hG4bKnew");
    CHECK_RESULT(lc_detector_observe(d, &q, SEC, &c), LC_RESULT_OK);
    CHECK(c == LC_CLASS_ORIGINAL);
    q.call_id = str("anything");
    q.from_tag = str("x");
    q.request_uri = str("sip:someone@else.example");
    CHECK_RESULT(lc_detector_observe(d, &q, SEC, &c), LC_RESULT_OK);
    CHECK(c == LC_CLASS_RETRANSMISSION);
    /* Forget through the parts, then the raw message is an original again. */
    bool forgotten = false;
    CHECK_RESULT(lc_detector_forget(d, &p, &forgotten), LC_RESULT_OK);
    CHECK(forgotten);
    CHECK_RESULT(observe(d, OLD_INVITE, 2 * SEC, &c), LC_RESULT_OK);
    CHECK(c == LC_CLASS_ORIGINAL);
    lc_detector_counters st;
    CHECK_RESULT(lc_detector_stats(d, &st), LC_RESULT_OK);
    CHECK(st.originals == 9 && st.retransmissions == 2);
    lc_detector_free(d);
}

static void test_malformed_via(void) {
    lc_detector *d = detector(64, 1);
    const char *no_via =
        "INVITE sip:bob@b.example SIP/2.0\r\n"
        "From: <sip:alice@a.example>;tag=1\r\nTo: <sip:bob@b.example>\r\n"
        "Call-ID: 1@a\r\nCSeq: 1 INVITE\r\n\r\n";
    const char *bad_via =
        "INVITE sip:bob@b.example SIP/2.0\r\n"
        "Via: garbage\r\n"
        "From: <sip:alice@a.example>;tag=1\r\nTo: <sip:bob@b.example>\r\n"
        "Call-ID: 1@a\r\nCSeq: 1 INVITE\r\n\r\n";
    const char *no_sent_by =
        "INVITE sip:bob@b.example SIP/2.0\r\n"
        "v: SIP/2.0/UDP ;branch=z9hG4bK1\r\n"
        "f: <sip:alice@a.example>;tag=1\r\nt: <sip:bob@b.example>\r\n"
        "i: 1@a\r\nCSeq: 1 INVITE\r\n\r\n";
    lc_class c = 99;
    bool forgotten = false;
    CHECK_RESULT(observe(d, no_via, 0, &c), LC_RESULT_SIP_MISSING_VIA);
    CHECK_RESULT(observe(d, bad_via, 0, &c), LC_RESULT_SIP_BAD_VIA);
    CHECK_RESULT(observe(d, no_sent_by, 0, &c), LC_RESULT_SIP_BAD_VIA);
    CHECK_RESULT(lc_detector_forget_sip(d, (const uint8_t *)bad_via, strlen(bad_via), &forgotten), LC_RESULT_SIP_BAD_VIA);
    CHECK(strlen(lc_result_text(LC_RESULT_SIP_MISSING_VIA)) > 0);
    CHECK(strstr(lc_result_text(LC_RESULT_SIP_BAD_VIA), "Via") != NULL);
    /* The scanner's own errors keep their codes. */
    const char *response = "SIP/2.0 200 OK\r\n\r\n";
    const char *truncated = "INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\n";
    const char *bad_cseq =
        "INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nf: <sip:x@y>\r\nt: <sip:a@b>\r\n"
        "i: 1\r\nCSeq: one INVITE\r\n\r\n";
    CHECK_RESULT(observe(d, response, 0, &c), LC_RESULT_SIP_NOT_A_REQUEST);
    CHECK_RESULT(observe(d, truncated, 0, &c), LC_RESULT_SIP_TRUNCATED);
    CHECK_RESULT(observe(d, bad_cseq, 0, &c), LC_RESULT_SIP_BAD_CSEQ);
    CHECK_RESULT(lc_detector_observe_sip(d, (const uint8_t *)"", 0, 0, &c), LC_RESULT_SIP_TRUNCATED);
    /* Malformed Via from a caller's parser. */
    const char *vias[] = {"garbage", "SIP/2.0/", "SIP/2.0/UDP ;branch=z9hG4bK1", "", "   "};
    lc_transaction_parts p;
    memset(&p, 0, sizeof p);
    p.method = str("INVITE");
    p.request_uri = str("sip:x");
    p.call_id = str("c");
    p.cseq = 1;
    for (size_t i = 0; i < sizeof vias / sizeof vias[0]; i++) {
        p.top_via = str(vias[i]);
        CHECK_RESULT(lc_detector_observe(d, &p, 0, &c), LC_RESULT_SIP_BAD_VIA);
        CHECK_RESULT(lc_detector_forget(d, &p, &forgotten), LC_RESULT_SIP_BAD_VIA);
    }
    /* Outputs untouched, nothing recorded. */
    CHECK(c == 99 && !forgotten);
    lc_detector_counters st;
    CHECK_RESULT(lc_detector_stats(d, &st), LC_RESULT_OK);
    CHECK(st.originals == 0 && st.retransmissions == 0 && st.tracked == 0);
    /* Random mutations of a valid INVITE never crash and always get a known code. */
    unsigned state = 4242u;
    size_t len = strlen(INVITE);
    char *copy = malloc(len);
    CHECK(copy != NULL);
    for (int i = 0; copy && i < 3000; i++) {
        memcpy(copy, INVITE, len);
        for (int k = 0; k < 4; k++) {
            state = state * 1103515245u + 12345u;
            copy[(state >> 8) % len] = (char)(state >> 16);
        }
        state = state * 1103515245u + 12345u;
        lc_result res = lc_detector_observe_sip(d, (const uint8_t *)copy, (state >> 8) % (len + 1), (uint64_t)i, &c);
        CHECK(res == LC_RESULT_OK || (res >= LC_RESULT_SIP_TRUNCATED && res <= LC_RESULT_SIP_BAD_VIA));
    }
    free(copy);
    lc_detector_free(d);
}

/* Two producers observe the same stream of INVITEs with one detector (whoever sees a
 * transaction first gets the original) and push them into one scheduler while two consumers
 * pop. Nothing may be lost or duplicated: served + dropped = pushed, and each consumer sees
 * each producer's items of one class in the order they were pushed. */
#define TRANSACTIONS 20000
#define PRODUCERS 2
#define CONSUMERS 2

static lc_scheduler *shared_scheduler;
static lc_detector *shared_detector;
static atomic_int started = 0; /* all four threads start together */
static atomic_int producers_running = PRODUCERS;
static atomic_int thread_errors = 0;
static atomic_ullong pushed_sum = 0;
static atomic_ullong popped_sum = 0;
static atomic_ullong dropped_count = 0;
static atomic_ullong served_count = 0;

static void wait_for_start(void) {
    while (!atomic_load(&started)) {
        sched_yield();
    }
}

static void *producer_main(void *arg) {
    uintptr_t producer = (uintptr_t)arg;
    char msg[512];
    wait_for_start();
    for (uintptr_t i = 0; i < TRANSACTIONS; i++) {
        int n = snprintf(msg, sizeof msg,
                         "INVITE sip:bob@b.example SIP/2.0\r\n"
                         "Via: SIP/2.0/UDP pc.a.example;branch=z9hG4bK%lu\r\n"
                         "From: <sip:alice@a.example>;tag=1\r\nTo: <sip:bob@b.example>\r\n"
                         "Call-ID: %lu@a\r\nCSeq: 1 INVITE\r\n\r\n",
                         (unsigned long)i, (unsigned long)i);
        lc_class c;
        if (n <= 0 || lc_detector_observe_sip(shared_detector, (const uint8_t *)msg, (size_t)n, i * 1000u, &c) != LC_RESULT_OK) {
            atomic_fetch_add(&thread_errors, 1);
            continue;
        }
        /* Token: producer in the top bit, class next, sequence number below. */
        uintptr_t token = (producer << 30) | ((uintptr_t)c << 29) | i;
        lc_result r = lc_scheduler_push(shared_scheduler, token, c);
        if (r == LC_RESULT_OK) {
            atomic_fetch_add(&pushed_sum, (unsigned long long)token);
        } else if (r == LC_RESULT_QUEUE_FULL) {
            atomic_fetch_add(&dropped_count, 1);
            sched_yield(); /* overload: give the consumers a turn, as a real receiver would */
        } else {
            atomic_fetch_add(&thread_errors, 1);
        }
    }
    atomic_fetch_sub(&producers_running, 1);
    return NULL;
}

static void *consumer_main(void *arg) {
    (void)arg;
    /* Last sequence number seen per (producer, class), +1 (0 = none yet). */
    uintptr_t last[PRODUCERS][2] = {{0, 0}, {0, 0}};
    wait_for_start();
    for (;;) {
        int done = atomic_load(&producers_running) == 0;
        uintptr_t token;
        lc_class c;
        lc_result r = lc_scheduler_pop(shared_scheduler, &token, &c);
        if (r == LC_RESULT_EMPTY) {
            if (done) {
                break;
            }
            sched_yield(); /* let a producer run (valgrind runs one thread at a time) */
            continue;
        }
        if (r != LC_RESULT_OK) {
            atomic_fetch_add(&thread_errors, 1);
            break;
        }
        uintptr_t producer = token >> 30;
        uintptr_t token_class = (token >> 29) & 1;
        uintptr_t seq = token & ((1u << 29) - 1);
        if (producer >= PRODUCERS || token_class != c || seq + 1 <= last[producer][c]) {
            atomic_fetch_add(&thread_errors, 1);
        } else {
            last[producer][c] = seq + 1;
        }
        atomic_fetch_add(&popped_sum, (unsigned long long)token);
        atomic_fetch_add(&served_count, 1);
    }
    return NULL;
}

static void test_concurrency(void) {
    shared_scheduler = scheduler(LC_DISCIPLINE_PRIORITY, 64, 64);
    shared_detector = detector(32768, 16);
    pthread_t producers[PRODUCERS];
    pthread_t consumers[CONSUMERS];
    for (uintptr_t i = 0; i < PRODUCERS; i++) {
        CHECK(pthread_create(&producers[i], NULL, producer_main, (void *)i) == 0);
    }
    for (int i = 0; i < CONSUMERS; i++) {
        CHECK(pthread_create(&consumers[i], NULL, consumer_main, NULL) == 0);
    }
    atomic_store(&started, 1);
    for (int i = 0; i < PRODUCERS; i++) {
        pthread_join(producers[i], NULL);
    }
    for (int i = 0; i < CONSUMERS; i++) {
        pthread_join(consumers[i], NULL);
    }
    const unsigned long long pushed = (unsigned long long)PRODUCERS * TRANSACTIONS;
    unsigned long long served = atomic_load(&served_count);
    unsigned long long dropped = atomic_load(&dropped_count);
    CHECK(atomic_load(&thread_errors) == 0);
    CHECK(served + dropped == pushed);
    CHECK(served > 0);
    CHECK(atomic_load(&pushed_sum) == atomic_load(&popped_sum));
    lc_scheduler_counters st;
    CHECK_RESULT(lc_scheduler_stats(shared_scheduler, &st), LC_RESULT_OK);
    CHECK(st.primary.served + st.secondary.served == served);
    CHECK(st.primary.dropped + st.secondary.dropped == dropped);
    CHECK(st.primary.enqueued + st.secondary.enqueued == served);
    CHECK(st.primary.len == 0 && st.secondary.len == 0);
    /* Each transaction was an original for exactly one producer. */
    lc_detector_counters ds;
    CHECK_RESULT(lc_detector_stats(shared_detector, &ds), LC_RESULT_OK);
    CHECK(ds.originals == TRANSACTIONS && ds.retransmissions == TRANSACTIONS);
    CHECK(ds.evicted == 0 && ds.tracked == TRANSACTIONS);
    printf("concurrency: %llu pushed, %llu served, %llu dropped (queue full)\n", pushed, served, dropped);
    lc_scheduler_free(shared_scheduler);
    lc_detector_free(shared_detector);
}

/* The pipeline: classify first, schedule only what was accepted. */
static const char *POLICY =
    "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\"\n"
    "         xmlns:lc=\"urn:ietf:params:xml:ns:load-control\" version=\"0\" state=\"full\">\n"
    "  <rule id=\"flood\"><conditions><lc:call-identity><lc:sip><lc:from><many domain=\"flood.example\"/></lc:from>\n"
    "  </lc:sip></lc:call-identity><method>INVITE</method></conditions>\n"
    "  <actions><lc:accept alt-action=\"reject\"><lc:rate>0</lc:rate></lc:accept></actions></rule>\n"
    "</ruleset>\n";

#define PIPE_INVITE(user, domain, branch)                                  \
    "INVITE sip:bob@b.example SIP/2.0\r\n"                                 \
    "Via: SIP/2.0/UDP " domain ";branch=z9hG4bK" branch "\r\n"             \
    "From: <sip:" user "@" domain ">;tag=" branch "\r\n"                   \
    "To: <sip:bob@b.example>\r\n"                                          \
    "Call-ID: " branch "@" domain "\r\n"                                   \
    "CSeq: 1 INVITE\r\n\r\n"

enum { MSG_A, MSG_FLOOD, MSG_C, MSG_BYE, MSG_D, MSG_COUNT };

static const char *PIPE_MSGS[MSG_COUNT] = {
    PIPE_INVITE("alice", "good.example", "a"),
    PIPE_INVITE("mallory", "flood.example", "f"),
    PIPE_INVITE("carol", "good.example", "c"),
    "BYE sip:bob@b.example SIP/2.0\r\n"
    "Via: SIP/2.0/UDP good.example;branch=z9hG4bKbye\r\n"
    "From: <sip:alice@good.example>;tag=a\r\nTo: <sip:bob@b.example>;tag=b\r\n"
    "Call-ID: old@good.example\r\nCSeq: 2 BYE\r\n\r\n",
    PIPE_INVITE("dave", "good.example", "d"),
};

/* What the receiving thread does with one datagram: classify, and only if accepted observe
 * and push; a full queue makes the detector forget the transaction so that the client's next
 * copy is an original. Returns the push result, or the verdict's status for a refused one. */
static int receive(lc_worker *w, lc_detector *d, lc_scheduler *s, int msg, uint64_t now_ns) {
    const uint8_t *bytes = (const uint8_t *)PIPE_MSGS[msg];
    size_t len = strlen(PIPE_MSGS[msg]);
    lc_decision decision;
    CHECK_RESULT(lc_classify_sip(w, bytes, len, LC_TRANSPORT_UDP, &decision), LC_RESULT_OK);
    if (decision.verdict != LC_VERDICT_ACCEPT) {
        return decision.status;
    }
    lc_class c;
    CHECK_RESULT(lc_detector_observe_sip(d, bytes, len, now_ns, &c), LC_RESULT_OK);
    lc_result r = lc_scheduler_push(s, (uintptr_t)msg, c);
    if (r == LC_RESULT_QUEUE_FULL) {
        bool forgotten = false;
        CHECK_RESULT(lc_detector_forget_sip(d, bytes, len, &forgotten), LC_RESULT_OK);
        CHECK(forgotten);
    }
    return (int)r;
}

static void test_classify_then_schedule(void) {
    lc_engine *e = NULL;
    lc_worker *w = NULL;
    uint64_t g = 0;
    CHECK_RESULT(lc_engine_new(NULL, &e), LC_RESULT_OK);
    CHECK_RESULT(lc_engine_publish(e, str("downstream"), NONE, (const uint8_t *)POLICY, strlen(POLICY), &g), LC_RESULT_OK);
    CHECK_RESULT(lc_worker_attach(e, -1, &w), LC_RESULT_OK);
    lc_detector *d = detector(1024, 4);
    lc_scheduler *s = scheduler(LC_DISCIPLINE_PRIORITY, 3, 4);

    CHECK(receive(w, d, s, MSG_A, 0) == LC_RESULT_OK);
    CHECK(receive(w, d, s, MSG_FLOOD, 100 * MS) == 503); /* refused by the policy: never queued */
    CHECK(receive(w, d, s, MSG_C, 200 * MS) == LC_RESULT_OK);
    CHECK(receive(w, d, s, MSG_BYE, 300 * MS) == LC_RESULT_OK); /* exempt, so accepted */
    CHECK(receive(w, d, s, MSG_D, 400 * MS) == LC_RESULT_QUEUE_FULL); /* primary queue full */
    CHECK(receive(w, d, s, MSG_A, 500 * MS) == LC_RESULT_OK);           /* A's retransmission */
    CHECK(receive(w, d, s, MSG_FLOOD, 600 * MS) == 503);

    /* A server thread serves one request, then D's retransmission arrives: D was forgotten
     * when it was dropped, so this copy is an original and overtakes A's retransmission. */
    uintptr_t item;
    lc_class c;
    CHECK_RESULT(lc_scheduler_pop(s, &item, &c), LC_RESULT_OK);
    CHECK(item == MSG_A && c == LC_CLASS_ORIGINAL);
    CHECK(receive(w, d, s, MSG_D, 900 * MS) == LC_RESULT_OK);

    uintptr_t items[8];
    lc_class classes[8];
    size_t n = drain(s, items, classes, 8);
    CHECK(n == 4);
    CHECK(items[0] == MSG_C && classes[0] == LC_CLASS_ORIGINAL);
    CHECK(items[1] == MSG_BYE && classes[1] == LC_CLASS_ORIGINAL);
    CHECK(items[2] == MSG_D && classes[2] == LC_CLASS_ORIGINAL);
    CHECK(items[3] == MSG_A && classes[3] == LC_CLASS_RETRANSMISSION);

    lc_detector_counters ds;
    CHECK_RESULT(lc_detector_stats(d, &ds), LC_RESULT_OK);
    CHECK(ds.originals == 5 && ds.retransmissions == 1); /* A, C, BYE, D, D again; A again */
    lc_scheduler_counters ss;
    CHECK_RESULT(lc_scheduler_stats(s, &ss), LC_RESULT_OK);
    CHECK(ss.primary.enqueued == 4 && ss.primary.dropped == 1 && ss.primary.served == 4);
    CHECK(ss.secondary.enqueued == 1 && ss.secondary.dropped == 0 && ss.secondary.served == 1);
    lc_stats es;
    CHECK_RESULT(lc_engine_stats(e, &es), LC_RESULT_OK);
    CHECK(es.total == 8 && es.rejected == 2 && es.exempt == 1);

    lc_scheduler_free(s);
    lc_detector_free(d);
    lc_worker_free(w);
    lc_engine_free(e);
}

int main(void) {
    test_strict_priority();
    test_tail_drop();
    test_fifo_discipline();
    test_invalid_arguments();
    test_detector_timer_b();
    test_rfc2543_parts();
    test_malformed_via();
    test_concurrency();
    test_classify_then_schedule();
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
