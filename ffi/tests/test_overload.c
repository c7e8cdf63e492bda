/* Feedback overload control through the C ABI (RFC 7339 loss-based, RFC 7415 rate-based): the
 * client's hop table, feedback in responses, the loss and rate decisions, expiry, suspension
 * and probing, the category of raw requests, reading and writing the Via parameters, and the
 * server's law driven by a queue it reports, with a client that does not take part. Every
 * refused argument leaves outputs unwritten. Expected values come from the RFC text (cited) or
 * from the physics of a queue. Built with -std=c11 -Wall -Wextra -Wpedantic -Werror and run
 * under ASan+UBSan and valgrind (the Makefile's c-test target). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadctl.h"
#include "check.h"

#define SEC 1000000000ull
#define MS 1000000ull

static lc_oc_client *client_with(int resonance) {
    lc_oc_client_config c;
    CHECK_RESULT(lc_oc_client_config_default(&c), LC_RESULT_OK);
    c.resonance = (uint8_t)resonance;
    lc_oc_client *client = NULL;
    CHECK_RESULT(lc_oc_client_new(&c, 4, &client), LC_RESULT_OK);
    return client;
}

static uint32_t hop_of(lc_oc_client *client, const char *address) {
    uint32_t hop = UINT32_MAX;
    CHECK_RESULT(lc_oc_client_hop(client, str(address), 0, &hop), LC_RESULT_OK);
    return hop;
}

static lc_oc_applied respond(lc_oc_client *client, uint32_t hop, uint64_t now, const char *via) {
    lc_oc_applied applied = 99;
    CHECK_RESULT(lc_oc_client_on_response(client, hop, now, str(via), &applied), LC_RESULT_OK);
    return applied;
}

static lc_oc_verdict decide(lc_oc_shard *shard, uint32_t hop, uint64_t now, lc_oc_category cat) {
    lc_oc_verdict v = 99;
    CHECK_RESULT(lc_oc_decide(shard, hop, now, cat, &v), LC_RESULT_OK);
    return v;
}

static void test_client_configuration(void) {
    lc_oc_client_config c;
    CHECK_RESULT(lc_oc_client_config_default(&c), LC_RESULT_OK);
    /* RFC 7415 §3.5.2: "Reasonable values for TAU0, TAU1, and TAU2 are: TAU0 = 0, TAU1 = 1/2 *
     * TAU2, and TAU2 = 10 * T." */
    CHECK(c.tau0_milli == 0 && c.tau_priority_milli == 10000 && c.tau_reducible_milli == 5000);
    CHECK(c.algorithms == (LC_OC_ALGORITHMS_LOSS | LC_OC_ALGORITHMS_RATE));
    lc_oc_client *client = (lc_oc_client *)0x1;
    lc_oc_client_config bad = c;
    /* RFC 7339 §4.2: "A SIP client MUST support the loss-based overload control scheme". */
    bad.algorithms = LC_OC_ALGORITHMS_RATE;
    CHECK_RESULT(lc_oc_client_new(&bad, 4, &client), LC_RESULT_INVALID_ARGUMENT);
    bad = c;
    bad.algorithms = 8;
    CHECK_RESULT(lc_oc_client_new(&bad, 4, &client), LC_RESULT_INVALID_ARGUMENT);
    bad = c;
    bad.resonance = 2;
    CHECK_RESULT(lc_oc_client_new(&bad, 4, &client), LC_RESULT_INVALID_ARGUMENT);
    bad = c;
    bad.tau_priority_milli = 1000;
    CHECK_RESULT(lc_oc_client_new(&bad, 4, &client), LC_RESULT_INVALID_ARGUMENT);
    CHECK_RESULT(lc_oc_client_new(&c, 0, &client), LC_RESULT_INVALID_ARGUMENT);
    CHECK(client == (lc_oc_client *)0x1);
    CHECK_RESULT(lc_oc_client_new(NULL, 2, NULL), LC_RESULT_NULL_PARAMETER);

    CHECK_RESULT(lc_oc_client_new(NULL, 2, &client), LC_RESULT_OK);
    lc_str params = NONE;
    CHECK_RESULT(lc_oc_client_request_params(client, &params), LC_RESULT_OK);
    /* RFC 7339 §4.1/§4.2: "oc" without a value, "oc-algo" with at least "loss". */
    CHECK(str_is(params, ";oc;oc-algo=\"loss,rate\""));
    uint32_t a = hop_of(client, "192.0.2.7:5060");
    CHECK(hop_of(client, "192.0.2.7:5060") == a);
    uint32_t b = hop_of(client, "192.0.2.8:5060");
    CHECK(a != b && a < 2 && b < 2);
    uint32_t hop = 77;
    /* Both hops were used within hop_idle (300 s by default): neither cell is given away. */
    CHECK_RESULT(lc_oc_client_hop(client, str("192.0.2.9:5060"), 299 * SEC, &hop), LC_RESULT_OC_TABLE_FULL);
    CHECK(hop == 77);
    CHECK_RESULT(lc_oc_client_find(client, str("192.0.2.9:5060"), &hop), LC_RESULT_OK);
    CHECK(hop == LC_OC_NO_HOP);
    CHECK_RESULT(lc_oc_client_find(client, str("192.0.2.7:5060"), &hop), LC_RESULT_OK);
    CHECK(hop == a);
    /* At 300 s the hop last used in second 0 is idle: its cell goes to the new address. */
    CHECK_RESULT(lc_oc_client_hop(client, str("192.0.2.9:5060"), 300 * SEC, &hop), LC_RESULT_OK);
    CHECK(hop == a || hop == b);
    uint32_t found_a = 77, found_b = 77;
    CHECK_RESULT(lc_oc_client_find(client, str("192.0.2.7:5060"), &found_a), LC_RESULT_OK);
    CHECK_RESULT(lc_oc_client_find(client, str("192.0.2.8:5060"), &found_b), LC_RESULT_OK);
    CHECK(hop == a ? found_a == LC_OC_NO_HOP && found_b == b : found_b == LC_OC_NO_HOP && found_a == a);
    lc_oc_applied applied = 99;
    CHECK_RESULT(lc_oc_client_on_response(client, 5, 0, str("SIP/2.0/UDP p;oc=5"), &applied),
                 LC_RESULT_INVALID_ARGUMENT);
    CHECK(applied == 99);
    lc_oc_client_free(client);
    lc_oc_client_free(NULL);
}

static void test_loss_feedback(void) {
    lc_oc_client *client = client_with(1);
    uint32_t hop = hop_of(client, "192.0.2.7:5060");
    lc_oc_shard *shard = NULL;
    CHECK_RESULT(lc_oc_shard_new(client, 1, &shard), LC_RESULT_OK);

    /* RFC 7339 §6: P2 asks P1 to "decrease the messages arriving to P2 by 20% for 0.5 s". */
    const char *example = "SIP/2.0/TLS p1.example.net;branch=z9hG4bK2d4790.3;received=192.0.2.111;"
                          "oc=20;oc-algo=\"loss\";oc-validity=500;oc-seq=1282321615.782";
    CHECK(respond(client, hop, 0, example) == LC_OC_APPLIED_UPDATED);
    CHECK(respond(client, hop, 1, example) == LC_OC_APPLIED_SAME);
    lc_oc_hop_status st;
    CHECK_RESULT(lc_oc_client_status(client, hop, 100 * MS, &st), LC_RESULT_OK);
    CHECK(st.active == 1 && st.algorithm == LC_OC_ALGORITHM_LOSS && st.oc == 20);
    CHECK(st.remaining_ms == 400 && st.has_seq == 1 && st.seq == 128232161578200ull);

    /* Bad values change nothing: §7.1 "This value MUST be in the range of [0, 100]". */
    lc_oc_applied applied = 99;
    CHECK_RESULT(lc_oc_client_on_response(client, hop, 2, str("SIP/2.0/UDP p;oc=101;oc-algo=\"loss\";oc-seq=1282321616.0"), &applied),
                 LC_RESULT_OC_BAD_FEEDBACK);
    CHECK(applied == 99);
    char err[256];
    size_t n = 0;
    CHECK_RESULT(lc_last_error((uint8_t *)err, sizeof err - 1, &n), LC_RESULT_OK);
    err[n < sizeof err ? n : sizeof err - 1] = 0;
    CHECK(strstr(err, "above 100") != NULL);
    lc_oc_hop_status again;
    CHECK_RESULT(lc_oc_client_status(client, hop, 100 * MS, &again), LC_RESULT_OK);
    CHECK(again.oc == 20 && again.seq == st.seq);

    /* 20 % shed out of the default 80 % reducible share: 20/80 = 25 % of the reducible requests
     * are shed (RFC 7339 §7.2), no priority one. 10,000 of each within 400 ms (before the first
     * mix sample, 1 s). */
    unsigned shed_reducible = 0, shed_priority = 0;
    for (unsigned k = 0; k < 10000; k++) {
        uint64_t now = 10 * MS + k * 30000ull;
        if (decide(shard, hop, now, LC_OC_CATEGORY_REDUCIBLE) == LC_OC_VERDICT_SHED_LOSS) {
            shed_reducible++;
        }
        if (decide(shard, hop, now, LC_OC_CATEGORY_PRIORITY) != LC_OC_VERDICT_FORWARD) {
            shed_priority++;
        }
    }
    /* 25 % of 10,000: the discard is error diffusion, exact to a request or two. */
    CHECK(shed_reducible >= 2498 && shed_reducible <= 2502);
    CHECK(shed_priority == 0);
    lc_oc_shard_counters sc;
    CHECK_RESULT(lc_oc_shard_stats(shard, hop, &sc), LC_RESULT_OK);
    CHECK(sc.shed_loss == shed_reducible && sc.reducible == 10000 && sc.priority == 10000 && sc.exempt == 0);

    /* §4.3: after the validity, "overload control is not in effect". */
    CHECK(decide(shard, hop, 500 * MS, LC_OC_CATEGORY_REDUCIBLE) == LC_OC_VERDICT_FORWARD);
    CHECK_RESULT(lc_oc_client_status(client, hop, 500 * MS, &st), LC_RESULT_OK);
    CHECK(st.active == 0 && st.remaining_ms == 0);

    /* ACK / CANCEL: always forwarded, counted in the mix (RFC 7339 §7.2's second category). */
    lc_oc_verdict v = 99;
    CHECK_RESULT(lc_oc_shard_stats(shard, hop, &sc), LC_RESULT_OK);
    uint64_t forwarded = sc.forwarded;
    CHECK_RESULT(lc_oc_decide(shard, hop, 10 * MS, LC_OC_CATEGORY_NONE, &v), LC_RESULT_OK);
    CHECK(v == LC_OC_VERDICT_FORWARD);
    CHECK_RESULT(lc_oc_shard_stats(shard, hop, &sc), LC_RESULT_OK);
    CHECK(sc.exempt == 1 && sc.forwarded == forwarded);
    /* Undeclared category: refused, nothing written. */
    v = 99;
    CHECK_RESULT(lc_oc_decide(shard, hop, 0, 7, &v), LC_RESULT_INVALID_ARGUMENT);
    CHECK_RESULT(lc_oc_decide(shard, 4, 0, LC_OC_CATEGORY_REDUCIBLE, &v), LC_RESULT_INVALID_ARGUMENT);
    CHECK_RESULT(lc_oc_decide(shard, (hop + 1) % 4, 0, LC_OC_CATEGORY_REDUCIBLE, &v), LC_RESULT_INVALID_ARGUMENT);
    CHECK(v == 99);
    /* The shard keeps the client alive after the client handle is freed. */
    lc_oc_client_free(client);
    CHECK(decide(shard, hop, SEC, LC_OC_CATEGORY_REDUCIBLE) == LC_OC_VERDICT_FORWARD);
    lc_oc_shard_free(shard);
}

static void test_rate_and_suspension(void) {
    lc_oc_client *client = client_with(0);
    uint32_t hop = hop_of(client, "[2001:db8::1]:5060");
    lc_oc_shard *shard = NULL;
    CHECK_RESULT(lc_oc_shard_new(client, 2, &shard), LC_RESULT_OK);
    /* RFC 7415 §4: "oc=150;oc-algo="rate";oc-validity=1000". Then 10/s: T = 100 ms. */
    CHECK(respond(client, hop, 0, "SIP/2.0/UDP p;oc=10;oc-algo=\"rate\";oc-validity=100000;oc-seq=5.0") ==
          LC_OC_APPLIED_UPDATED);
    /* §3.5.2 at one instant: reducible requests while the bucket X' <= TAU1 = 5T (X' = 0, T, ...,
     * 5T: 6), then priority ones while X' <= TAU2 = 10T (6T ... 10T: 5). */
    unsigned reducible = 0, priority = 0;
    while (decide(shard, hop, SEC, LC_OC_CATEGORY_REDUCIBLE) == LC_OC_VERDICT_FORWARD) {
        reducible++;
    }
    while (decide(shard, hop, SEC, LC_OC_CATEGORY_PRIORITY) == LC_OC_VERDICT_FORWARD) {
        priority++;
    }
    CHECK(reducible == 6 && priority == 5);
    CHECK(decide(shard, hop, SEC, LC_OC_CATEGORY_PRIORITY) == LC_OC_VERDICT_SHED_RATE);
    /* §5.7: "oc-validity=0" stops control at once. */
    CHECK(respond(client, hop, SEC, "SIP/2.0/UDP p;oc=0;oc-algo=\"rate\";oc-validity=0;oc-seq=6.0") ==
          LC_OC_APPLIED_UPDATED);
    CHECK(decide(shard, hop, SEC, LC_OC_CATEGORY_REDUCIBLE) == LC_OC_VERDICT_FORWARD);

    /* §5.9: repeated timeouts stop all sending but a probe per back-off (1 s, then 2 s). */
    for (int i = 0; i < 3; i++) {
        CHECK_RESULT(lc_oc_client_on_timeout(client, hop, 2 * SEC), LC_RESULT_OK);
    }
    CHECK(decide(shard, hop, 2 * SEC, LC_OC_CATEGORY_PRIORITY) == LC_OC_VERDICT_SHED_UNREACHABLE);
    CHECK(decide(shard, hop, 3 * SEC, LC_OC_CATEGORY_REDUCIBLE) == LC_OC_VERDICT_PROBE);
    CHECK(decide(shard, hop, 3 * SEC, LC_OC_CATEGORY_REDUCIBLE) == LC_OC_VERDICT_SHED_UNREACHABLE);
    lc_oc_hop_status st;
    CHECK_RESULT(lc_oc_client_status(client, hop, 3 * SEC, &st), LC_RESULT_OK);
    CHECK(st.suspended == 1 && st.timeouts == 3);
    /* A response whose Via is not UTF-8 is refused, but the hop did answer: §5.9 "Once a SIP
     * client has successfully received a normal response ... the SIP client can resume". */
    lc_oc_applied applied = 99;
    const uint8_t latin1[] = "SIP/2.0/UDP p\xe9;branch=z9hG4bK1";
    lc_str bad_via = {latin1, sizeof latin1 - 1};
    CHECK_RESULT(lc_oc_client_on_response(client, hop, 4 * SEC, bad_via, &applied), LC_RESULT_INVALID_UTF8);
    CHECK(applied == 99);
    CHECK_RESULT(lc_oc_client_status(client, hop, 4 * SEC, &st), LC_RESULT_OK);
    CHECK(st.suspended == 0 && st.timeouts == 0);
    CHECK(decide(shard, hop, 4 * SEC, LC_OC_CATEGORY_REDUCIBLE) == LC_OC_VERDICT_FORWARD);
    lc_oc_shard_free(shard);
    lc_oc_client_free(client);
}

struct rate_worker {
    lc_oc_client *client;
    uint32_t hop;
    uint64_t seed;
    unsigned admitted;
};

/* 20,000 requests over 1 s of simulated time, 50 µs apart. */
static void *rate_worker(void *arg) {
    struct rate_worker *w = arg;
    lc_oc_shard *shard = NULL;
    if (lc_oc_shard_new(w->client, w->seed, &shard) != LC_RESULT_OK) {
        return NULL;
    }
    for (uint64_t k = 0; k < 20000; k++) {
        lc_oc_verdict v;
        if (lc_oc_decide(shard, w->hop, SEC + k * 50000ull, LC_OC_CATEGORY_REDUCIBLE, &v) == LC_RESULT_OK &&
            v == LC_OC_VERDICT_FORWARD) {
            w->admitted++;
        }
    }
    lc_oc_shard_free(shard);
    return NULL;
}

static void test_rate_is_one_bucket_across_threads(void) {
    lc_oc_client *client = client_with(1);
    uint32_t hop = hop_of(client, "192.0.2.7:5060");
    CHECK(respond(client, hop, SEC, "SIP/2.0/UDP p;oc=1000;oc-algo=\"rate\";oc-validity=100000;oc-seq=1.0") ==
          LC_OC_APPLIED_UPDATED);
    struct rate_worker w[2] = {{client, hop, 1, 0}, {client, hop, 2, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        CHECK(pthread_create(&t[i], NULL, rate_worker, &w[i]) == 0);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
    }
    /* RFC 7415 §3.5.1: at most 1/T over time, bursts of TAU/T: over the 1 s span both threads
     * together send at most 1000 + TAU1/T (5) + 1 + 1.5 (an emptied bucket's randomisation);
     * offered 40,000/s, they keep the rate: at least 97 % of it. */
    unsigned total = w[0].admitted + w[1].admitted;
    CHECK(total <= 1000 + 5 + 1 + 2);
    CHECK(total >= 970);
    lc_oc_client_free(client);
}

/* Two clients on one table (what two forked processes do): one applies feedback, the other
 * enforces it, and they share one rate bucket. */
static void test_shared_table(void) {
    CHECK(lc_oc_table_bytes(0) == 0 && lc_oc_table_bytes(4) == 256);
    void *mem = NULL;
    CHECK(posix_memalign(&mem, 64, lc_oc_table_bytes(4)) == 0);
    memset(mem, 0, lc_oc_table_bytes(4));
    lc_oc_client_config c;
    CHECK_RESULT(lc_oc_client_config_default(&c), LC_RESULT_OK);
    c.resonance = 0;
    lc_oc_client *a = NULL, *b = NULL, *bad = (lc_oc_client *)0x1;
    CHECK_RESULT(lc_oc_client_new_shared(&c, (char *)mem + 8, 128, &bad), LC_RESULT_INVALID_ARGUMENT);
    CHECK_RESULT(lc_oc_client_new_shared(&c, mem, 63, &bad), LC_RESULT_INVALID_ARGUMENT);
    CHECK_RESULT(lc_oc_client_new_shared(&c, NULL, 256, &bad), LC_RESULT_NULL_PARAMETER);
    CHECK(bad == (lc_oc_client *)0x1);
    CHECK_RESULT(lc_oc_client_new_shared(&c, mem, lc_oc_table_bytes(4), &a), LC_RESULT_OK);
    CHECK_RESULT(lc_oc_client_new_shared(&c, mem, lc_oc_table_bytes(4), &b), LC_RESULT_OK);
    uint32_t ha = hop_of(a, "192.0.2.7:5060"), hb = hop_of(b, "192.0.2.7:5060");
    CHECK(ha == hb);
    CHECK(respond(a, ha, 0, "SIP/2.0/UDP p;oc=10;oc-algo=\"rate\";oc-validity=100000;oc-seq=1.0") == LC_OC_APPLIED_UPDATED);
    lc_oc_shard *sa = NULL, *sb = NULL;
    CHECK_RESULT(lc_oc_shard_new(a, 1, &sa), LC_RESULT_OK);
    CHECK_RESULT(lc_oc_shard_new(b, 2, &sb), LC_RESULT_OK);
    /* RFC 7415 §3.5.2 at one instant, alternating processes: 6 reducible in all (X' = 0 ... 5T). */
    unsigned admitted = 0;
    for (int k = 0; k < 10; k++) {
        admitted += decide(sa, ha, SEC, LC_OC_CATEGORY_REDUCIBLE) == LC_OC_VERDICT_FORWARD;
        admitted += decide(sb, hb, SEC, LC_OC_CATEGORY_REDUCIBLE) == LC_OC_VERDICT_FORWARD;
    }
    CHECK(admitted == 6);
    lc_oc_shard_free(sa);
    lc_oc_shard_free(sb);
    lc_oc_client_free(a);
    lc_oc_client_free(b);
    free(mem);
}

static void test_category(void) {
    lc_engine *e = NULL;
    CHECK_RESULT(lc_engine_new(NULL, &e), LC_RESULT_OK);
    const char *invite = "INVITE sip:bob@b.example SIP/2.0\r\nVia: SIP/2.0/UDP a;branch=z9hG4bK1\r\n"
                         "From: <sip:a@a.example>;tag=1\r\nTo: <sip:bob@b.example>\r\nCall-ID: c1\r\n"
                         "CSeq: 1 INVITE\r\n\r\n";
    const char *sos = "INVITE urn:service:sos.fire SIP/2.0\r\nVia: SIP/2.0/UDP a;branch=z9hG4bK2\r\n"
                      "From: <sip:a@a.example>;tag=1\r\nTo: <urn:service:sos.fire>\r\nCall-ID: c2\r\n"
                      "CSeq: 1 INVITE\r\n\r\n";
    const char *bye = "BYE sip:bob@b.example SIP/2.0\r\nVia: SIP/2.0/UDP a;branch=z9hG4bK3\r\n"
                      "From: <sip:a@a.example>;tag=1\r\nTo: <sip:bob@b.example>;tag=2\r\nCall-ID: c1\r\n"
                      "CSeq: 2 BYE\r\n\r\n";
    const char *ack = "ACK sip:bob@b.example SIP/2.0\r\nVia: SIP/2.0/UDP a;branch=z9hG4bK1\r\n"
                      "From: <sip:a@a.example>;tag=1\r\nTo: <sip:bob@b.example>;tag=2\r\nCall-ID: c1\r\n"
                      "CSeq: 1 ACK\r\n\r\n";
    const char *msgs[] = {invite, sos, bye, ack};
    const lc_oc_category want[] = {LC_OC_CATEGORY_REDUCIBLE, LC_OC_CATEGORY_PRIORITY, LC_OC_CATEGORY_PRIORITY,
                                   LC_OC_CATEGORY_NONE};
    for (int i = 0; i < 4; i++) {
        lc_oc_category c = 99;
        CHECK_RESULT(lc_oc_category_sip(e, (const uint8_t *)msgs[i], strlen(msgs[i]), NULL, &c), LC_RESULT_OK);
        CHECK(c == want[i]);
    }
    lc_oc_category c = 99;
    CHECK_RESULT(lc_oc_category_sip(e, (const uint8_t *)"SIP/2.0 200 OK\r\n\r\n", 18, NULL, &c),
                 LC_RESULT_SIP_NOT_A_REQUEST);
    CHECK(c == 99);

    /* Markings anyone can write (RFC 7339 §5.10.1 priorities, RFC 4412 §11.3 trust): a new
     * INVITE with a To tag, or with Resource-Priority: ets.0, is reducible unless the caller
     * knows the dialog / the peer is listed. */
    const char *tagged = "INVITE sip:bob@b.example SIP/2.0\r\nVia: SIP/2.0/UDP a;branch=z9hG4bK4\r\n"
                         "From: <sip:a@a.example>;tag=1\r\nTo: <sip:bob@b.example>;tag=forged\r\nCall-ID: c4\r\n"
                         "CSeq: 1 INVITE\r\n\r\n";
    const char *ets = "INVITE sip:bob@b.example SIP/2.0\r\nVia: SIP/2.0/UDP a;branch=z9hG4bK5\r\n"
                      "From: <sip:a@a.example>;tag=1\r\nTo: <sip:bob@b.example>\r\nCall-ID: c5\r\n"
                      "CSeq: 1 INVITE\r\nResource-Priority: ets.0\r\n\r\n";
    lc_sip_options from_listed, from_other, in_dialog;
    memset(&from_listed, 0, sizeof from_listed);
    from_listed.source.family = LC_IP_V4;
    memcpy(from_listed.source.addr, (const uint8_t[]){192, 0, 2, 7}, 4);
    from_other = from_listed;
    memcpy(from_other.source.addr, (const uint8_t[]){203, 0, 113, 9}, 4);
    in_dialog = from_other;
    in_dialog.flags = LC_SIP_KNOWN_DIALOG;
    struct {
        const char *msg;
        const lc_sip_options *o;
        lc_oc_category default_engine, trusting_engine;
    } cases[] = {
        {tagged, NULL, LC_OC_CATEGORY_REDUCIBLE, LC_OC_CATEGORY_PRIORITY},
        {tagged, &in_dialog, LC_OC_CATEGORY_PRIORITY, LC_OC_CATEGORY_PRIORITY},
        {ets, NULL, LC_OC_CATEGORY_REDUCIBLE, LC_OC_CATEGORY_REDUCIBLE},
        {ets, &from_other, LC_OC_CATEGORY_REDUCIBLE, LC_OC_CATEGORY_REDUCIBLE},
        {ets, &from_listed, LC_OC_CATEGORY_REDUCIBLE, LC_OC_CATEGORY_PRIORITY},
        {sos, &from_other, LC_OC_CATEGORY_PRIORITY, LC_OC_CATEGORY_PRIORITY},
    };
    lc_engine_config cfg;
    CHECK_RESULT(lc_engine_config_default(&cfg), LC_RESULT_OK);
    cfg.exempt_flags |= LC_EXEMPT_TO_TAG;
    cfg.priority_peers = str("198.51.100.0/24, 192.0.2.0/24 2001:db8::/32");
    lc_engine *trusting = NULL;
    CHECK_RESULT(lc_engine_new(&cfg, &trusting), LC_RESULT_OK);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c = 99;
        CHECK_RESULT(lc_oc_category_sip(e, (const uint8_t *)cases[i].msg, strlen(cases[i].msg), cases[i].o, &c),
                     LC_RESULT_OK);
        CHECK(c == cases[i].default_engine);
        c = 99;
        CHECK_RESULT(lc_oc_category_sip(trusting, (const uint8_t *)cases[i].msg, strlen(cases[i].msg), cases[i].o, &c),
                     LC_RESULT_OK);
        CHECK(c == cases[i].trusting_engine);
    }
    /* Checked at the boundary: an undeclared family, a block that is not one. */
    lc_sip_options bad = from_listed;
    bad.source.family = 5;
    c = 99;
    CHECK_RESULT(lc_oc_category_sip(e, (const uint8_t *)ets, strlen(ets), &bad, &c), LC_RESULT_INVALID_ARGUMENT);
    CHECK(c == 99);
    lc_engine *none = NULL;
    cfg.priority_peers = str("10.0.0.0/33");
    CHECK_RESULT(lc_engine_new(&cfg, &none), LC_RESULT_INVALID_ARGUMENT);
    cfg.priority_peers = str("10.1.2.3/8");
    CHECK_RESULT(lc_engine_new(&cfg, &none), LC_RESULT_INVALID_ARGUMENT);
    CHECK(none == NULL);
    lc_engine_free(trusting);
    lc_engine_free(e);
}

static void test_feedback_text(void) {
    lc_oc_feedback f;
    memset(&f, 0xA5, sizeof f);
    CHECK_RESULT(lc_oc_feedback_parse(str("SIP/2.0/UDP p;oc;oc-algo=\"loss,rate\""), &f), LC_RESULT_EMPTY);
    CHECK_RESULT(lc_oc_feedback_parse(str("SIP/2.0/UDP p;oc=7"), &f), LC_RESULT_OK);
    /* §4.3: no oc-validity reads as 500; §4.2: without oc-algo the selection in force stays. */
    CHECK(f.oc == 7 && f.algorithm == LC_OC_ALGORITHM_NONE && f.validity_ms == 500 && f.has_seq == 0);
    /* §5.7: with oc-validity=0 "the client SHOULD disregard the value in the "oc" parameter". */
    CHECK_RESULT(lc_oc_feedback_parse(str("SIP/2.0/UDP p;oc=150;oc-algo=\"loss\";oc-validity=0;oc-seq=2.0"), &f),
                 LC_RESULT_OK);
    CHECK(f.oc == 0 && f.algorithm == LC_OC_ALGORITHM_LOSS && f.validity_ms == 0 && f.has_seq == 1);
    CHECK_RESULT(lc_oc_feedback_parse(str("SIP/2.0/UDP p;oc=150;oc-algo=\"loss\";oc-validity=10"), &f),
                 LC_RESULT_OC_BAD_FEEDBACK);
    CHECK_RESULT(lc_oc_feedback_parse(str("SIP/2.0/UDP p;oc=7;oc-algo=\"loss,rate\""), &f),
                 LC_RESULT_OC_BAD_FEEDBACK);
    /* A quote left open: where the via-parm's parameters end cannot be known. */
    CHECK_RESULT(lc_oc_feedback_parse(str("SIP/2.0/UDP p;oc=7;x=\"open"), &f), LC_RESULT_OC_BAD_FEEDBACK);

    /* RFC 7415 §4's response to its request. */
    const char *request = "SIP/2.0/TLS p1.example.net;branch=z9hG4bK2d4790.1;received=192.0.2.111;"
                          "oc;oc-algo=\"loss,rate\"";
    const char *expected = "SIP/2.0/TLS p1.example.net;branch=z9hG4bK2d4790.1;received=192.0.2.111;"
                           "oc=150;oc-algo=\"rate\";oc-validity=1000;oc-seq=1282321615.78200";
    lc_oc_feedback r = {150, LC_OC_ALGORITHM_RATE, 1000, 128232161578200ull, 1};
    char buf[256];
    size_t written = 0;
    CHECK_RESULT(lc_oc_feedback_write_via(&r, str(request), (uint8_t *)buf, 10, &written),
                 LC_RESULT_BUFFER_TOO_SMALL);
    CHECK(written == strlen(expected));
    CHECK_RESULT(lc_oc_feedback_write_via(&r, str(request), (uint8_t *)buf, sizeof buf, &written), LC_RESULT_OK);
    CHECK(written == strlen(expected) && memcmp(buf, expected, written) == 0);
    lc_oc_feedback bad = r;
    bad.algorithm = 0;
    CHECK_RESULT(lc_oc_feedback_write_via(&bad, str(request), (uint8_t *)buf, sizeof buf, &written),
                 LC_RESULT_INVALID_ARGUMENT);
    bad = r;
    bad.algorithm = LC_OC_ALGORITHM_LOSS;
    CHECK_RESULT(lc_oc_feedback_write_via(&bad, str(request), (uint8_t *)buf, sizeof buf, &written),
                 LC_RESULT_INVALID_ARGUMENT);
    /* RFC 7339 §5.4: what a downstream server put into lower Vias does not travel upstream
     * (oc-algo is not among the parameters named); §5.6: a client's offer stops at the proxy. */
    const char *lower = "SIP/2.0/UDP a;branch=z9hG4bK1;oc=90;oc-validity=60000;oc-algo=\"loss\";oc-seq=9.0";
    const char *stripped = "SIP/2.0/UDP a;branch=z9hG4bK1;oc-algo=\"loss\"";
    CHECK_RESULT(lc_oc_via_strip(str(lower), LC_OC_STRIP_RESPONSE, (uint8_t *)buf, 4, &written),
                 LC_RESULT_BUFFER_TOO_SMALL);
    CHECK(written == strlen(stripped));
    CHECK_RESULT(lc_oc_via_strip(str(lower), LC_OC_STRIP_RESPONSE, (uint8_t *)buf, sizeof buf, &written), LC_RESULT_OK);
    CHECK(written == strlen(stripped) && memcmp(buf, stripped, written) == 0);
    CHECK_RESULT(lc_oc_via_strip(str(request), LC_OC_STRIP_REQUEST, (uint8_t *)buf, sizeof buf, &written), LC_RESULT_OK);
    CHECK(written == strlen(request) - strlen(";oc;oc-algo=\"loss,rate\"") && memcmp(buf, request, written) == 0);
    written = 99;
    CHECK_RESULT(lc_oc_via_strip(str(stripped), LC_OC_STRIP_RESPONSE, (uint8_t *)buf, sizeof buf, &written),
                 LC_RESULT_EMPTY);
    CHECK(written == 0);
    CHECK_RESULT(lc_oc_via_strip(str(lower), 2, (uint8_t *)buf, sizeof buf, &written), LC_RESULT_INVALID_ARGUMENT);
    CHECK_RESULT(lc_oc_via_strip(str("SIP/2.0/UDP a;oc=1;x=\"open"), LC_OC_STRIP_RESPONSE, (uint8_t *)buf, sizeof buf,
                                 &written),
                 LC_RESULT_SIP_BAD_VIA);
    /* An empty Via is no client's. */
    CHECK_RESULT(lc_oc_feedback_write_via(&r, str(""), (uint8_t *)buf, sizeof buf, &written), LC_RESULT_SIP_BAD_VIA);
    bad = r;
    bad.has_seq = 3;
    CHECK_RESULT(lc_oc_feedback_write_via(&bad, str(request), (uint8_t *)buf, sizeof buf, &written),
                 LC_RESULT_INVALID_ARGUMENT);
}

/* A server of mu = 1000 requests/s with a queue, fed by a client offering 1500/s that obeys
 * the rate it is told and one offering 1500/s that does not take part, for `seconds`; returns
 * the requests admitted per client over the last second. */
static void run_server(lc_oc_server *s, double admitted[2], unsigned seconds) {
    const char *keys[2] = {"192.0.2.1:5060", "192.0.2.2:5060"};
    const char *via_oc = "SIP/2.0/UDP p;branch=z9hG4bK1;oc;oc-algo=\"loss,rate\"";
    const char *via_plain = "SIP/2.0/UDP q;branch=z9hG4bK2";
    double backlog = 0, carry[2] = {0, 0};
    const uint64_t dt = 10 * MS;
    const uint64_t steps = seconds * SEC / dt;
    admitted[0] = admitted[1] = 0;
    for (uint64_t k = 0; k < steps; k++) {
        uint64_t now = k * dt;
        double send[2] = {1500, 1500};
        lc_oc_feedback f;
        if (lc_oc_server_feedback(s, now, str(keys[0]), &f) == LC_RESULT_OK && f.validity_ms > 0 &&
            f.algorithm == LC_OC_ALGORITHM_RATE && (double)f.oc < send[0]) {
            send[0] = (double)f.oc;
        }
        for (int i = 0; i < 2; i++) {
            carry[i] += send[i] * (double)dt / 1e9;
            while (carry[i] >= 1.0) {
                carry[i] -= 1.0;
                lc_oc_admission a = 99;
                CHECK_RESULT(lc_oc_server_on_request(s, now, str(keys[i]), str(i == 0 ? via_oc : via_plain),
                                                     LC_CLASS_ORIGINAL, LC_OC_CATEGORY_REDUCIBLE, &a),
                             LC_RESULT_OK);
                if (a == LC_OC_ADMISSION_ADMIT) {
                    backlog += 1;
                    if (k >= steps - 100) {
                        admitted[i] += 1;
                    }
                }
            }
        }
        double served = backlog < 10 ? backlog : 10; /* mu * dt = 10 */
        backlog -= served;
        lc_oc_queue_load q = {(uint64_t)(backlog / 1000.0 * 1e9), (uint64_t)served, 0,
                              (uint64_t)(served / 1000.0 * 1e9)};
        CHECK_RESULT(lc_oc_server_report_queue(s, now, &q), LC_RESULT_OK);
    }
}

static void test_server(void) {
    lc_oc_server_config c;
    CHECK_RESULT(lc_oc_server_config_default(&c), LC_RESULT_OK);
    /* RFC 7339 §4.3's default validity; §5.8's hour. */
    CHECK(c.validity_ms == 500 && c.hold_algorithm_ns == 3600 * SEC && c.preference == LC_OC_ALGORITHM_RATE);
    lc_oc_server *s = (lc_oc_server *)0x1;
    lc_oc_server_config bad = c;
    bad.preference = 0;
    CHECK_RESULT(lc_oc_server_new(&bad, &s), LC_RESULT_INVALID_ARGUMENT);
    bad = c;
    bad.validity_ms = 50; /* not longer than a period */
    CHECK_RESULT(lc_oc_server_new(&bad, &s), LC_RESULT_INVALID_ARGUMENT);
    CHECK(s == (lc_oc_server *)0x1);
    CHECK_RESULT(lc_oc_server_new(&c, &s), LC_RESULT_OK);

    /* Not overloaded: §5.1 "it MUST set the value of the "oc" parameter to be 0". */
    lc_oc_admission a = 99;
    const char *via = "SIP/2.0/UDP p;branch=z9hG4bK1;oc;oc-algo=\"loss,rate\"";
    CHECK_RESULT(lc_oc_server_on_request(s, 0, str("192.0.2.1:5060"), str(via), LC_CLASS_ORIGINAL,
                                         LC_OC_CATEGORY_REDUCIBLE, &a),
                 LC_RESULT_OK);
    CHECK(a == LC_OC_ADMISSION_ADMIT);
    char buf[256];
    size_t written = 99;
    CHECK_RESULT(lc_oc_server_write_via(s, 0, str("192.0.2.1:5060"), str(via), (uint8_t *)buf, sizeof buf, &written),
                 LC_RESULT_OK);
    buf[written < sizeof buf ? written : sizeof buf - 1] = 0;
    CHECK(strstr(buf, ";oc=0;oc-algo=\"rate\";oc-validity=0;oc-seq=") != NULL);
    CHECK(strncmp(buf, "SIP/2.0/UDP p;branch=z9hG4bK1;oc=0", 34) == 0);
    /* A client without oc gets its Via back untouched. */
    CHECK_RESULT(lc_oc_server_on_request(s, 0, str("192.0.2.2:5060"), NONE, LC_CLASS_ORIGINAL,
                                         LC_OC_CATEGORY_REDUCIBLE, &a),
                 LC_RESULT_OK);
    CHECK_RESULT(lc_oc_server_write_via(s, 0, str("192.0.2.2:5060"), str("SIP/2.0/UDP q"), (uint8_t *)buf,
                                        sizeof buf, &written),
                 LC_RESULT_EMPTY);
    CHECK(written == 0);
    CHECK_RESULT(lc_oc_server_on_request(s, 0, str("x"), NONE, 5, LC_OC_CATEGORY_REDUCIBLE, &a),
                 LC_RESULT_INVALID_ARGUMENT);
    CHECK_RESULT(lc_oc_server_on_request(s, 0, str("x"), NONE, LC_CLASS_ORIGINAL, LC_OC_CATEGORY_NONE, &a),
                 LC_RESULT_INVALID_ARGUMENT);
    lc_oc_queue_load q = {0, 1, 2, 0};
    CHECK_RESULT(lc_oc_server_report_queue(s, 0, &q), LC_RESULT_INVALID_ARGUMENT);
    CHECK_RESULT(lc_oc_server_report_occupancy(s, 0, 500000, 0), LC_RESULT_INVALID_ARGUMENT);
    lc_oc_server_free(s);

    /* Three times the capacity offered: the server takes about mu (physics: no more than 1000/s
     * fit; the law aims at all of it), split max-min fairly (two equal demands: halves), and
     * the client that does not take part gets 503s for the rest (RFC 7339 §5.10.2). */
    CHECK_RESULT(lc_oc_server_new(NULL, &s), LC_RESULT_OK);
    double admitted[2];
    run_server(s, admitted, 20);
    lc_oc_server_state st;
    CHECK_RESULT(lc_oc_server_status(s, &st), LC_RESULT_OK);
    double total = admitted[0] + admitted[1];
    CHECK(st.overloaded == 1 && st.clients == 2);
    CHECK(total >= 950 && total <= 1050);
    CHECK(admitted[0] > 400 && admitted[0] < 600 && admitted[1] > 400 && admitted[1] < 600);
    CHECK(st.service_rate_milli > 990000 && st.service_rate_milli < 1010000);
    lc_oc_feedback f;
    CHECK_RESULT(lc_oc_server_feedback(s, 20 * SEC, str("192.0.2.1:5060"), &f), LC_RESULT_OK);
    CHECK(f.algorithm == LC_OC_ALGORITHM_RATE && f.validity_ms == 500 && f.has_seq == 1);
    CHECK(f.oc >= 400 && f.oc <= 600);
    CHECK_RESULT(lc_oc_server_feedback(s, 20 * SEC, str("192.0.2.2:5060"), &f), LC_RESULT_EMPTY);
    /* The clients by key, then the newcomers' aggregate (an empty key). */
    lc_oc_server_client_state cs[3];
    for (uint32_t i = 0; i < 3; i++) {
        CHECK_RESULT(lc_oc_server_client(s, i, &cs[i]), LC_RESULT_OK);
    }
    CHECK_RESULT(lc_oc_server_client(s, 3, &cs[0]), LC_RESULT_EMPTY);
    CHECK(cs[0].key_len == 14 && memcmp(cs[0].key, "192.0.2.1:5060", 14) == 0);
    CHECK(cs[0].algorithm == LC_OC_ALGORITHM_RATE && cs[0].oc >= 400 && cs[0].oc <= 600);
    CHECK(cs[0].newcomer == 0 && cs[0].nonconforming == 0 && cs[0].rejected == 0);
    CHECK(cs[1].key_len == 14 && memcmp(cs[1].key, "192.0.2.2:5060", 14) == 0);
    CHECK(cs[1].algorithm == LC_OC_ALGORITHM_NONE && cs[1].rejected > 1000);
    CHECK(cs[1].share_milli > 400000 && cs[1].share_milli < 600000);
    CHECK(cs[2].key_len == 0 && cs[2].newcomer == 1 && cs[2].rejected == 0);
    CHECK_RESULT(lc_oc_server_tick(s, 21 * SEC), LC_RESULT_OK);
    lc_oc_server_free(s);
    lc_oc_server_free(NULL);
}

int main(void) {
    test_client_configuration();
    test_loss_feedback();
    test_rate_and_suspension();
    test_rate_is_one_bucket_across_threads();
    test_shared_table();
    test_category();
    test_feedback_text();
    test_server();
    printf("test_overload: %d checks, %d failures\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
