/* RFC 3261 §16.3 request validation (validate.c), one request per case, each expected answer
 * from the RFC sentence cited beside it. `make edge-test` runs it under ASan and UBSan. */
#define _POSIX_C_SOURCE 200809L /* sipmsg.h: clock_gettime */

#include <stdio.h>
#include <string.h>

#include "sipmsg.h"
#include "sipvia.h"
#include "validate.h"
#include "../ffi/tests/check.h"

#define OWN "127.0.0.1:5070"

/* A request from its start line and header lines (CRLF-separated, without the empty line). */
static sv_reason check_req(const char *start, const char *headers, sv_result *r) {
    static char msg[8192];
    snprintf(msg, sizeof msg, "%s\r\n%s\r\n\r\n", start, headers);
    return sv_check(msg, strlen(msg), OWN, NULL, r);
}

#define VIA "Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK-1\r\n"
#define REST "From: <sip:a@example.org>;tag=1\r\nTo: <sip:b@example.org>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\n"

int main(void) {
    sv_result r;
    /* A well-formed request passes; Max-Forwards absent "this check is passed" (§16.3 item 3). */
    CHECK(check_req("INVITE sip:b@example.org SIP/2.0", VIA REST "Max-Forwards: 70", &r) == SV_OK && r.max_forwards == 70);
    CHECK(check_req("INVITE sip:b@example.org SIP/2.0", VIA REST "Content-Length: 0", &r) == SV_OK && r.max_forwards == -1);
    CHECK(check_req("INVITE tel:+15551234 SIP/2.0", VIA REST, &r) == SV_OK);
    CHECK(check_req("INVITE urn:service:sos SIP/2.0", VIA REST, &r) == SV_OK);
    /* Compact forms (§7.3.3) and several Via entries on one line. */
    CHECK(check_req("INVITE sip:b@example.org SIP/2.0",
                    "v: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK-1, SIP/2.0/TCP [2001:db8::1]:5061;branch=z9hG4bK-2\r\n"
                    "f: <sip:a@example.org>;tag=1\r\nt: <sip:b@example.org>\r\ni: c1\r\nCSeq: 1 INVITE",
                    &r) == SV_OK);
    /* "If the request contains a Max-Forwards header field with a field value of zero (0), the
     * element MUST NOT forward the request. If the request was for OPTIONS, the element MAY act
     * as the final recipient and respond per Section 11. Otherwise, the element MUST return a
     * 483 (Too many hops) response." */
    CHECK(check_req("INVITE sip:b@example.org SIP/2.0", VIA REST "Max-Forwards: 0", &r) == SV_TOO_MANY_HOPS && r.status == 483);
    CHECK(check_req("OPTIONS sip:b@example.org SIP/2.0",
                    VIA "From: <sip:a@example.org>;tag=1\r\nTo: <sip:b@example.org>\r\nCall-ID: c1\r\nCSeq: 7 OPTIONS\r\nMax-Forwards: 0", &r) ==
              SV_OPTIONS_AT_0 &&
          r.status == 200 && strstr(r.extra, "Allow: ") != NULL);
    /* An ACK cannot be answered (§17.2.3): one with Max-Forwards 0 is dropped, not forwarded. */
    CHECK(check_req("ACK sip:b@example.org SIP/2.0",
                    VIA "From: <sip:a@example.org>;tag=1\r\nTo: <sip:b@example.org>\r\nCall-ID: c1\r\nCSeq: 1 ACK\r\nMax-Forwards: 0", &r) ==
              SV_UNANSWERED &&
          r.status == 0);
    /* §16.3 item 1: "Any components involved in the remainder of these Request Validation steps
     * or the Request Forwarding section MUST be well-formed." → 400 */
    CHECK(check_req("INVITE sip:b@example.org SIP/2.0", VIA REST "Max-Forwards: ten", &r) == SV_BAD_SYNTAX && r.status == 400);
    CHECK(check_req("INVITE garbage SIP/2.0", VIA REST, &r) == SV_BAD_SYNTAX && r.status == 400);
    CHECK(check_req("INVITE sip: SIP/2.0", VIA REST, &r) == SV_BAD_SYNTAX && r.status == 400);
    CHECK(check_req("INVITE <sip:b@example.org> SIP/2.0", VIA REST, &r) == SV_BAD_SYNTAX && r.status == 400);
    CHECK(check_req("INVITE sip:b@example.org SIP/3.0", VIA REST, &r) == SV_BAD_SYNTAX && r.status == 400);
    CHECK(check_req("INVITE sip:b@example.org", VIA REST, &r) == SV_BAD_SYNTAX && r.status == 400);
    CHECK(check_req("INVITE sip:b@example.org SIP/2.0",
                    VIA "From: <sip:a@example.org>;tag=1\r\nTo: <sip:b@example.org>\r\nCSeq: 1 INVITE", &r) == SV_BAD_SYNTAX &&
          strcmp(r.phrase, "Missing Call-ID") == 0);
    CHECK(check_req("INVITE sip:b@example.org SIP/2.0",
                    VIA "From: <sip:a@example.org>;tag=1\r\nTo: <sip:b@example.org>\r\nCall-ID: c1", &r) == SV_BAD_SYNTAX &&
          strcmp(r.phrase, "Missing CSeq") == 0);
    /* §8.1.1.5: "The method MUST match that of the request." */
    CHECK(check_req("INVITE sip:b@example.org SIP/2.0",
                    VIA "From: <sip:a@example.org>;tag=1\r\nTo: <sip:b@example.org>\r\nCall-ID: c1\r\nCSeq: 1 BYE", &r) == SV_BAD_SYNTAX &&
          strcmp(r.phrase, "Bad CSeq") == 0);
    CHECK(check_req("INVITE sip:b@example.org SIP/2.0",
                    VIA "From: <sip:a@example.org>;tag=1\r\nTo: <sip:b@example.org>\r\nCall-ID: c1\r\nCSeq: x INVITE", &r) == SV_BAD_SYNTAX);
    CHECK(check_req("INVITE sip:b@example.org SIP/2.0", VIA "To: <sip:b@example.org>\r\nCall-ID: c1\r\nCSeq: 1 INVITE", &r) ==
              SV_BAD_SYNTAX &&
          strcmp(r.phrase, "Missing From") == 0);
    CHECK(check_req("INVITE sip:b@example.org SIP/2.0", VIA "From: <sip:a@example.org>;tag=1\r\nCall-ID: c1\r\nCSeq: 1 INVITE", &r) ==
              SV_BAD_SYNTAX &&
          strcmp(r.phrase, "Missing To") == 0);
    CHECK(check_req("INVITE sip:b@example.org SIP/2.0", "Via: SIP/2.0/TCP [2001:db8::1]:5061;branch=z9hG4bK-1\r\n" REST, &r) == SV_OK);
    CHECK(check_req("INVITE sip:b@example.org SIP/2.0", "Via: SIP/2.0/UDP [2001:db8::1;branch=z9hG4bK-1\r\n" REST, &r) == SV_NO_VIA);
    /* Without a usable Via no response can be routed (§18.2.2): dropped, no status. */
    CHECK(check_req("INVITE sip:b@example.org SIP/2.0", REST, &r) == SV_NO_VIA && r.status == 0);
    CHECK(check_req("INVITE sip:b@example.org SIP/2.0", "Via: garbage\r\n" REST, &r) == SV_NO_VIA && r.status == 0);
    CHECK(check_req("INVITE sip:b@example.org SIP/2.0", "Via: SIP/2.0/UDP\r\n" REST, &r) == SV_NO_VIA);
    CHECK(check_req("INVITE sip:b@example.org SIP/2.0", "Via: SIP/2.0/UDP 192.0.2.1:99999;branch=z9hG4bK-1\r\n" REST, &r) == SV_NO_VIA);
    /* §16.3 item 2: "If the Request-URI has a URI whose scheme is not understood by the proxy,
     * the proxy SHOULD reject the request with a 416 (Unsupported URI Scheme) response." */
    CHECK(check_req("INVITE http://example.org/ SIP/2.0", VIA REST, &r) == SV_BAD_SCHEME && r.status == 416);
    /* §16.3 item 5: "… the element MUST return a 420 (Bad Extension) response. The response
     * MUST include an Unsupported … header field listing those option-tags" */
    CHECK(check_req("INVITE sip:b@example.org SIP/2.0", VIA REST "Proxy-Require: foo, bar", &r) == SV_BAD_EXTENSION && r.status == 420 &&
          strcmp(r.extra, "Unsupported: foo, bar\r\n") == 0);
    /* §16.3 item 4: a Via with this edge's sent-by whose branch carries the loop hash of this
     * very request: a loop (482); the same request with another Request-URI: a spiral. */
    {
        static char msg[4096], via[256];
        const char *base = "OPTIONS sip:b@example.org SIP/2.0\r\n" VIA
                           "From: <sip:a@example.org>;tag=1\r\nTo: <sip:b@example.org>\r\nCall-ID: c1\r\nCSeq: 2 OPTIONS\r\n\r\n";
        unsigned long loop = sv_loop_hash(base, strlen(base));
        snprintf(via, sizeof via, "Via: SIP/2.0/UDP " OWN ";branch=z9hG4bK-lc1234.%lx\r\n", loop);
        snprintf(msg, sizeof msg, "OPTIONS sip:b@example.org SIP/2.0\r\n%s" VIA
                 "From: <sip:a@example.org>;tag=1\r\nTo: <sip:b@example.org>\r\nCall-ID: c1\r\nCSeq: 2 OPTIONS\r\n\r\n", via);
        CHECK(sv_loop_hash(msg, strlen(msg)) == loop); /* the Vias are not part of it */
        CHECK(sv_check(msg, strlen(msg), OWN, NULL, &r) == SV_LOOP && r.status == 482);
        CHECK(sv_check(msg, strlen(msg), "127.0.0.1:5071", NULL, &r) == SV_OK); /* another element's Via */
        /* A loop that left over one transport and came back over the other: the edge's other
         * sent-by (its TLS listener) is its own too. */
        CHECK(sv_check(msg, strlen(msg), "127.0.0.1:5071", OWN, &r) == SV_LOOP && r.status == 482);
        snprintf(msg, sizeof msg, "OPTIONS sip:c@example.org SIP/2.0\r\n%s" VIA
                 "From: <sip:a@example.org>;tag=1\r\nTo: <sip:b@example.org>\r\nCall-ID: c1\r\nCSeq: 2 OPTIONS\r\n\r\n", via);
        CHECK(sv_check(msg, strlen(msg), OWN, NULL, &r) == SV_OK); /* retargeted: spiralling */
        /* A comma inside a quoted string separates no Via entries (§7.3.1: "Multiple header
         * field rows ... comma-separated list"; a quoted-string is one value): the branch after
         * oc-algo="loss,rate" (RFC 7339 §9) is still this entry's, so the loop is still seen. */
        snprintf(via, sizeof via, "Via: SIP/2.0/UDP " OWN ";oc-algo=\"loss,rate\";branch=z9hG4bK-lc1234.%lx\r\n", loop);
        snprintf(msg, sizeof msg, "OPTIONS sip:b@example.org SIP/2.0\r\n%s" VIA
                 "From: <sip:a@example.org>;tag=1\r\nTo: <sip:b@example.org>\r\nCall-ID: c1\r\nCSeq: 2 OPTIONS\r\n\r\n", via);
        CHECK(sv_check(msg, strlen(msg), OWN, NULL, &r) == SV_LOOP && r.status == 482);
    }
    /* The one Via reader (sipvia.h): via-parm = sent-protocol LWS sent-by *( SEMI via-params ),
     * sent-by = host [ COLON port ], via-received = "received" EQUAL (IPv4address / IPv6address)
     * (RFC 3261 §25.1). */
    {
        const char *v = "SIP/2.0/UDP 192.0.2.1:5062;received=198.51.100.7;branch=z9hG4bK-9;oc-algo=\"loss,rate\", SIP/2.0/TCP b";
        size_t first = via_comma(v, strlen(v));
        CHECK(first == strlen(v) - strlen(", SIP/2.0/TCP b"));
        via_entry_t e;
        CHECK(via_parse(v, first, &e) == 1);
        CHECK(e.transport_len == 3 && memcmp(e.transport, "UDP", 3) == 0);
        CHECK(e.host_len == 9 && memcmp(e.host, "192.0.2.1", 9) == 0 && e.port == 5062);
        CHECK(e.sent_by_len == 14 && memcmp(e.sent_by, "192.0.2.1:5062", 14) == 0);
        CHECK(e.received_len == 12 && memcmp(e.received, "198.51.100.7", 12) == 0);
        CHECK(e.branch_len == 9 && memcmp(e.branch, "z9hG4bK-9", 9) == 0);
        const char *w = "SIP / 2.0 / TLS [2001:db8::1];branch=x";
        CHECK(via_parse(w, strlen(w), &e) == 1 && e.port == 0 && e.host_len == 13 && e.received == NULL);
        const char *bad[] = {"SIP/2.0/UDP", "SIP/2.0/UDP 192.0.2.1:0", "SIP/2.0/UDP 192.0.2.1 junk", "SIP/1.0/UDP a", "HTTP/2.0/UDP a"};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK(via_parse(bad[i], strlen(bad[i]), &e) == 0);
    }
    /* What sv_check hands on (the decision memory's key, the dialog lookup): the first
     * occurrence of each, its value trimmed, long and compact names alike. */
#define SPAN_IS(s, text) ((s).n == strlen(text) && memcmp((s).p, text, (s).n) == 0)
    CHECK(check_req("INVITE sip:b@example.org SIP/2.0", VIA REST, &r) == SV_OK && SPAN_IS(r.call_id, "c1") &&
          SPAN_IS(r.cseq, "1 INVITE") && SPAN_IS(r.from, "<sip:a@example.org>;tag=1") && SPAN_IS(r.to, "<sip:b@example.org>") &&
          SPAN_IS(r.branch, "z9hG4bK-1"));
    CHECK(check_req("INVITE sip:b@example.org SIP/2.0",
                    "v: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK-7 , SIP/2.0/UDP 192.0.2.2;branch=z9hG4bK-8\r\n"
                    "f: <sip:a@example.org>;tag=1\r\nt: <sip:b@example.org>;tag=2 \r\ni:  c9 \r\nCSeq: 1 INVITE\r\nCall-ID: other",
                    &r) == SV_OK &&
          SPAN_IS(r.call_id, "c9") && SPAN_IS(r.to, "<sip:b@example.org>;tag=2") && SPAN_IS(r.branch, "z9hG4bK-7"));
    /* find_ids (a response's Call-ID and CSeq, for the window and overload-control tables, and
     * its From and To, for the dialogs) finds what sv_check hands on for a request (the key
     * they were kept under): the same bytes, blanks around them trimmed alike, long and compact
     * names, a tab before the colon. */
    {
        const char *heads[] = {
            VIA "From: <sip:a@example.org>;tag=1\r\nTo: <sip:b@example.org>\r\nCall-ID:  c7 \t\r\nCSeq: 7 INVITE \r\n",
            VIA "f\t: <sip:a@example.org>;tag=1 \r\nt: <sip:b@example.org>\r\ni\t: c8\r\nCSeq:\t8 INVITE\r\ni: other\r\n",
        };
        for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
            static char m[1024];
            snprintf(m, sizeof m, "INVITE sip:b@example.org SIP/2.0\r\n%s\r\n", heads[i]);
            msg_ids f;
            find_ids(m, strlen(m), &f);
            CHECK(sv_check(m, strlen(m), OWN, NULL, &r) == SV_OK && r.call_id.p == f.call_id && r.call_id.n == f.call_id_len &&
                  r.cseq.p == f.cseq && r.cseq.n == f.cseq_len && r.from.p == f.from && r.from.n == f.from_len && r.to.p == f.to &&
                  r.to.n == f.to_len);
        }
    }
    /* sv_loop_hash_of, from what sv_check noted, is sv_loop_hash, whichever headers count. */
    {
        static char m[512];
        snprintf(m, sizeof m, "OPTIONS sip:b@example.org SIP/2.0\r\n" VIA REST "Route: <sip:p1>\r\nContact: <sip:x>\r\nRoute: <sip:p2>\r\n"
                              "Proxy-Require: foo\r\nMax-Forwards: 9\r\n\r\n");
        sv_check(m, strlen(m), OWN, NULL, &r);
        CHECK(r.loop_n == 7 && sv_loop_hash_of(&r, m, strlen(m)) == sv_loop_hash(m, strlen(m)));
        /* More covered lines than sv_check notes: the second walk gives the same. */
        static char many[2048];
        size_t at = (size_t)snprintf(many, sizeof many, "OPTIONS sip:b@example.org SIP/2.0\r\n" VIA REST);
        for (int k = 0; k < SV_LOOP_PARTS; k++) at += (size_t)snprintf(many + at, sizeof many - at, "Route: <sip:p%d>\r\n", k);
        snprintf(many + at, sizeof many - at, "\r\n");
        sv_check(many, strlen(many), OWN, NULL, &r);
        CHECK(r.loop_n == -1 && sv_loop_hash_of(&r, many, strlen(many)) == sv_loop_hash(many, strlen(many)));
    }
    /* Names compare without case, letters only (RFC 3261 §7.3.1); a CR is not a '-'. */
    CHECK(ascii_ieq("cALL-id", "Call-ID", 7) && !ascii_ieq("Call\rID", "Call-ID", 7) && !ascii_ieq("Via", "Vib", 3));
    /* The tag of a From / To value (RFC 3261 §20.20, §20.39: a header parameter, after the
     * name-addr; a display name may quote anything, a URI may carry a parameter named tag). */
    {
        const char *cases[][2] = {
            {"\"Bob\" <sip:b@x>;tag=abc", "abc"},
            {"\"A > ;tag=no\" <sip:b@x;tag=uri>;tag=yes", "yes"},
            {"<sip:b@x;tag=uri>", NULL},
            {"<sip:b@x;tag=uri>;user=x", NULL},
            {"sip:b@x;tag=t1", "t1"},
            {"<sip:b@x> ; TAG=Up;x=1", "Up"},
            {"<sip:b@x;tag=no", NULL},
            {"\"x\" <sip:b@x;tag=no", NULL},
            {"<sip:b@x>;tag=", NULL},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            size_t tl = 0;
            const char *t = header_tag(cases[i][0], strlen(cases[i][0]), &tl);
            CHECK(cases[i][1] ? t && tl == strlen(cases[i][1]) && memcmp(t, cases[i][1], tl) == 0 : t == NULL);
        }
    }
    /* A comma inside a quoted parameter value separates no Via entries. */
    {
        const char *v = "SIP/2.0/UDP a;x=\"1,2\", SIP/2.0/UDP b";
        CHECK(via_comma(v, strlen(v)) == strlen("SIP/2.0/UDP a;x=\"1,2\""));
    }
    /* Truncated input never reads past its end (ASan): every prefix of a valid request. */
    {
        const char *full = "INVITE sip:b@example.org SIP/2.0\r\n" VIA REST "Max-Forwards: 70\r\nProxy-Require: x\r\n\r\n";
        static char cut[1024];
        for (size_t n = 0; n <= strlen(full); n++) {
            memcpy(cut, full, n);
            sv_check(cut, n, OWN, NULL, &r);
        }
    }
    printf("test_validate: %d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
