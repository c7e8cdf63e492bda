/* The smallest complete use of libloadctl: publish a policy, classify one raw SIP request.
 * Build: cc -std=c11 minimal.c $(pkg-config --cflags --libs --static loadctl) */
#include <stdio.h>
#include <string.h>

#include <loadctl.h>

static const char *POLICY =
    "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"full\">"
    "<rule id=\"hotline\"><conditions><call-identity><sip><to><many-tel prefix=\"+1-212\"/></to></sip></call-identity>"
    "<method>INVITE</method></conditions><actions><accept><rate>0</rate></accept></actions></rule></ruleset>";

static const char *INVITE =
    "INVITE sip:+12125551234@gw.example.com;user=phone SIP/2.0\r\n"
    "Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK1\r\n"
    "From: <sip:alice@example.com>;tag=1\r\n"
    "To: <tel:+1-212-555-1234>\r\n"
    "Call-ID: 1@192.0.2.1\r\n"
    "CSeq: 1 INVITE\r\n\r\n";

int main(void) {
    lc_engine *engine = NULL;
    lc_worker *worker = NULL;
    uint64_t generation = 0;
    lc_str source = {(const uint8_t *)"local", 5};
    lc_str no_notifier = {NULL, 0};
    if (lc_engine_new(NULL, &engine) != LC_RESULT_OK ||
        lc_engine_publish(engine, source, no_notifier, (const uint8_t *)POLICY, strlen(POLICY), &generation) != LC_RESULT_OK ||
        lc_worker_attach(engine, -1, &worker) != LC_RESULT_OK) {
        fprintf(stderr, "setup failed\n");
        return 1;
    }
    lc_decision d;
    lc_result r = lc_classify_sip(worker, (const uint8_t *)INVITE, strlen(INVITE), LC_TRANSPORT_UDP, &d);
    if (r != LC_RESULT_OK) {
        fprintf(stderr, "%s\n", lc_result_text(r));
        return 1;
    }
    printf("status %u, rule %.*s\n", (unsigned)d.status, (int)d.rule_id.len, (const char *)d.rule_id.ptr);
    lc_worker_free(worker);
    lc_engine_free(engine);
    return d.status == 503 ? 0 : 1;
}
