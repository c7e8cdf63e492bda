/* Two worker threads classify (structured and raw SIP requests) while a third thread publishes
 * 1,000 policies. Checks: no crash, every call succeeds, window tickets all come back, and the
 * engine's totals equal the requests sent. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "loadctl.h"

#define REQUESTS_PER_WORKER 20000

static lc_engine *engine;
static atomic_int publishing = 1;
static atomic_int errors = 0;

static lc_str str(const char *s) {
    lc_str out;
    out.ptr = (const uint8_t *)s;
    out.len = strlen(s);
    return out;
}

static const lc_str NONE = {NULL, 0};

static const char *SIP =
    "INVITE sip:+18005550000@gw.example.com;user=phone SIP/2.0\r\n"
    "Via: SIP/2.0/UDP pc33.example.com;branch=z9hG4bK776asdhds\r\n"
    "To: <tel:+1-800-555-0000>\r\n"
    "From: \"Alice\" <sip:alice@example.com>;tag=1928301774\r\n"
    "Call-ID: a84b4c76e66710@pc33.example.com\r\n"
    "CSeq: 1 INVITE\r\n"
    "\r\n";

static void *worker_main(void *arg) {
    (void)arg;
    lc_worker *w = NULL;
    if (lc_worker_attach(engine, -1, &w) != LC_RESULT_OK) {
        atomic_fetch_add(&errors, 1);
        return NULL;
    }
    lc_ticket held[8];
    int nheld = 0;
    lc_decision d;
    lc_request r;
    memset(&r, 0, sizeof r);
    r.method = str("INVITE");
    r.from = str("<sip:bob@example.com>;tag=2");
    r.to = str("<tel:+1-900-555-0000>");
    r.transport = LC_TRANSPORT_TCP;
    r.initial = true;
    for (int i = 0; i < REQUESTS_PER_WORKER; i++) {
        lc_result res = (i % 2) ? lc_classify(w, &r, &d)
                                : lc_classify_sip(w, (const uint8_t *)SIP, strlen(SIP), LC_TRANSPORT_UDP, &d);
        if (res != LC_RESULT_OK) {
            atomic_fetch_add(&errors, 1);
            continue;
        }
        if (d.matched && (d.rule_id.ptr == NULL || d.rule_id.len == 0)) {
            atomic_fetch_add(&errors, 1);
        }
        if (d.has_ticket) {
            held[nheld++] = d.ticket;
        }
        if (nheld == 8 || (nheld > 0 && i % 5 == 0)) {
            if (lc_complete(w, &held[--nheld]) != LC_RESULT_OK) {
                atomic_fetch_add(&errors, 1);
            }
        }
    }
    while (nheld > 0) {
        lc_complete(w, &held[--nheld]);
    }
    lc_worker_free(w);
    return NULL;
}

static void *publisher_main(void *arg) {
    (void)arg;
    char body[1024];
    for (int v = 1; v <= 1000; v++) {
        int n = snprintf(body, sizeof body,
                         "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"%d\" state=\"full\">"
                         "<rule id=\"toll-free\"><conditions><call-identity><sip><to><many-tel prefix=\"+1-800\"/></to></sip></call-identity></conditions>"
                         "<actions><accept><win>16</win></accept></actions></rule>"
                         "<rule id=\"premium\"><conditions><call-identity><sip><to><many-tel prefix=\"+1-900\"/></to></sip></call-identity></conditions>"
                         "<actions><accept><percent>%d</percent></accept></actions></rule></ruleset>",
                         v, v % 100);
        uint64_t g = 0;
        if (n <= 0 || lc_engine_publish(engine, str("notifier"), NONE, (const uint8_t *)body, (size_t)n, &g) != LC_RESULT_OK) {
            atomic_fetch_add(&errors, 1);
        }
    }
    atomic_store(&publishing, 0);
    return NULL;
}

int main(void) {
    if (lc_engine_new(NULL, &engine) != LC_RESULT_OK) {
        return 1;
    }
    pthread_t workers[2];
    pthread_t publisher;
    pthread_create(&publisher, NULL, publisher_main, NULL);
    for (int i = 0; i < 2; i++) {
        pthread_create(&workers[i], NULL, worker_main, NULL);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(workers[i], NULL);
    }
    pthread_join(publisher, NULL);
    lc_stats st;
    int checks = 0;
    int failed = 0;
    checks++;
    if (lc_engine_stats(engine, &st) != LC_RESULT_OK || st.total != 2u * REQUESTS_PER_WORKER) {
        failed++;
        fprintf(stderr, "totals: %llu requests counted, %d sent\n", (unsigned long long)st.total, 2 * REQUESTS_PER_WORKER);
    }
    checks++;
    if (st.generation != 1000) {
        failed++;
        fprintf(stderr, "generation %llu, expected 1000\n", (unsigned long long)st.generation);
    }
    checks++;
    if (atomic_load(&errors) != 0) {
        failed++;
        fprintf(stderr, "%d calls failed\n", atomic_load(&errors));
    }
    lc_engine_free(engine);
    printf("%d passed, %d failed\n", checks - failed, failed);
    return failed == 0 ? 0 : 1;
}
