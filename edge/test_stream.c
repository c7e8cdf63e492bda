/* Unit tests of the edge's stream framer (sipstream.h), built with AddressSanitizer and
 * UndefinedBehaviorSanitizer by `make edge-test`: each message fed split at every byte
 * boundary (and one byte at a time), several messages in one chunk, keep-alive pings and stray
 * CRLFs, the size limit, missing and invalid Content-Length, folded and compact headers, and
 * bodies that look like headers.
 *
 *   test_stream */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sipstream.h"
#include "../ffi/tests/check.h"

#define MAX 65535

/* One event the framer reported while a stream was fed to it. */
typedef struct {
    sf_kind kind;
    size_t len, header_len;
    char text[256]; /* the first bytes of a message */
} event_t;

/* A connection's receive buffer, fed in chunks: what the edge does with each read. Returns the
 * number of events; stops at the first error kind (the edge closes the connection there). */
static size_t feed(const char *stream, size_t n, const size_t *cuts, size_t ncuts, event_t *ev, size_t cap, size_t max) {
    /* A copy on the heap per chunk, so that ASan catches a read past what was received. */
    char *buf = malloc(n + 1);
    size_t have = 0, at = 0, count = 0;
    sf_state st;
    memset(&st, 0, sizeof st);
    for (size_t c = 0; c <= ncuts; c++) {
        size_t upto = c < ncuts ? cuts[c] : n;
        memcpy(buf + have, stream + at, upto - at);
        have += upto - at;
        at = upto;
        char *exact = malloc(have ? have : 1);
        memcpy(exact, buf, have);
        size_t off = 0;
        for (;;) {
            sf_frame f = sf_next(&st, exact + off, have - off, max);
            if (f.kind == SF_MORE) break;
            if (count < cap) {
                ev[count].kind = f.kind;
                ev[count].len = f.len;
                ev[count].header_len = f.header_len;
                size_t t = f.kind == SF_MESSAGE ? (f.len < 255 ? f.len : 255) : 0;
                memcpy(ev[count].text, exact + off, t);
                ev[count].text[t] = 0;
            }
            count++;
            if (f.kind != SF_MESSAGE && f.kind != SF_PING && f.kind != SF_CRLF) {
                free(exact);
                free(buf);
                return count;
            }
            off += f.len;
        }
        memmove(buf, buf + off, have - off);
        have -= off;
        free(exact);
    }
    free(buf);
    return count;
}

static const char INVITE[] = "INVITE sip:bob@example.net SIP/2.0\r\n"
                             "Via: SIP/2.0/TCP 10.0.0.1:5060;branch=z9hG4bK-1\r\n"
                             "To: <sip:bob@example.net>\r\n"
                             "From: <sip:alice@example.org>;tag=1\r\n"
                             "Call-ID: c1\r\n"
                             "CSeq: 1 INVITE\r\n"
                             "Content-Type: application/sdp\r\n"
                             "Content-Length: 10\r\n"
                             "\r\n"
                             "v=0\r\ns=-\r\n";

/* Every way of cutting `msg` in two, and one byte at a time: always exactly one message. */
static void every_boundary(const char *msg, size_t header_len) {
    size_t n = strlen(msg);
    event_t ev[8];
    int all_ok = 1;
    for (size_t cut = 1; cut < n; cut++) {
        size_t k = feed(msg, n, &cut, 1, ev, 8, MAX);
        if (!(k == 1 && ev[0].kind == SF_MESSAGE && ev[0].len == n && ev[0].header_len == header_len)) {
            fprintf(stderr, "cut at %zu: %zu events, kind %d len %zu\n", cut, k, k ? (int)ev[0].kind : -1, k ? ev[0].len : 0);
            all_ok = 0;
        }
    }
    CHECK(all_ok);
    size_t *cuts = malloc(n * sizeof *cuts);
    for (size_t i = 0; i < n - 1; i++) cuts[i] = i + 1;
    size_t k = feed(msg, n, cuts, n - 1, ev, 8, MAX);
    CHECK(k == 1 && ev[0].kind == SF_MESSAGE && ev[0].len == n);
    free(cuts);
}

/* Every pair of cuts of a stream of three messages with pings and stray CRLFs between them. */
static void every_pair_of_boundaries(void) {
    char stream[2048];
    snprintf(stream, sizeof stream, "%s\r\n\r\n%s\r\n%s", INVITE, INVITE, INVITE);
    size_t n = strlen(stream);
    event_t ev[16];
    int all_ok = 1;
    for (size_t a = 1; a < n; a += 1) {
        for (size_t b = a + 1; b < n; b += 7) {
            size_t cuts[2] = {a, b};
            size_t k = feed(stream, n, cuts, 2, ev, 16, MAX);
            int ok = k == 5 && ev[0].kind == SF_MESSAGE && ev[1].kind == SF_PING && ev[2].kind == SF_MESSAGE &&
                     ev[3].kind == SF_CRLF && ev[4].kind == SF_MESSAGE && ev[4].len == strlen(INVITE);
            if (!ok) {
                if (all_ok) fprintf(stderr, "cuts %zu/%zu: %zu events\n", a, b, k);
                all_ok = 0;
            }
        }
    }
    CHECK(all_ok);
}

int main(void) {
    event_t ev[16];
    size_t header_len = strlen(INVITE) - 10;

    /* 1. One message, whole and split at every byte boundary. */
    every_boundary(INVITE, header_len);
    size_t k = feed(INVITE, strlen(INVITE), NULL, 0, ev, 16, MAX);
    CHECK(k == 1 && ev[0].kind == SF_MESSAGE && ev[0].len == strlen(INVITE) && strncmp(ev[0].text, "INVITE ", 7) == 0);

    /* 2. Several messages in one chunk, with a response and a message without a body. */
    const char *resp = "SIP/2.0 200 OK\r\nVia: SIP/2.0/TCP h;branch=z9hG4bK-1\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n";
    char three[4096];
    snprintf(three, sizeof three, "%s%s%s", INVITE, resp, INVITE);
    k = feed(three, strlen(three), NULL, 0, ev, 16, MAX);
    CHECK(k == 3 && ev[0].kind == SF_MESSAGE && ev[1].kind == SF_MESSAGE && ev[2].kind == SF_MESSAGE);
    CHECK(k == 3 && ev[1].len == strlen(resp) && strncmp(ev[1].text, "SIP/2.0 200 OK", 14) == 0);
    every_boundary(resp, strlen(resp));
    every_pair_of_boundaries();

    /* 3. Keep-alives (RFC 5626 §3.5.1): CRLFCRLF is a ping, even split in four; a lone CRLF
     * between messages is skipped. */
    k = feed("\r\n\r\n", 4, NULL, 0, ev, 16, MAX);
    CHECK(k == 1 && ev[0].kind == SF_PING && ev[0].len == 4);
    size_t cuts4[3] = {1, 2, 3};
    k = feed("\r\n\r\n", 4, cuts4, 3, ev, 16, MAX);
    CHECK(k == 1 && ev[0].kind == SF_PING);
    k = feed("\r\n", 2, NULL, 0, ev, 16, MAX);
    CHECK(k == 0); /* could still become a ping */
    char crlf_then[2048];
    snprintf(crlf_then, sizeof crlf_then, "\r\n%s\r\n\r\n\r\n\r\n", INVITE);
    k = feed(crlf_then, strlen(crlf_then), NULL, 0, ev, 16, MAX);
    CHECK(k == 4 && ev[0].kind == SF_CRLF && ev[1].kind == SF_MESSAGE && ev[2].kind == SF_PING && ev[3].kind == SF_PING);
    k = feed("\n", 1, NULL, 0, ev, 16, MAX);
    CHECK(k == 1 && ev[0].kind == SF_CRLF && ev[0].len == 1);

    /* 4. Size limit: a header block that never ends, and a Content-Length past the limit, are
     * refused as soon as that is certain; a message of exactly the limit passes. */
    char *big = malloc(MAX + 100);
    memset(big, 'a', MAX + 99);
    memcpy(big, "INVITE sip:x SIP/2.0\r\nX: ", 25);
    big[MAX + 99] = 0;
    k = feed(big, MAX + 99, NULL, 0, ev, 16, MAX);
    CHECK(k == 1 && ev[0].kind == SF_TOO_LARGE && ev[0].header_len == 0);
    size_t cut = MAX - 1;
    k = feed(big, MAX + 99, &cut, 1, ev, 16, MAX);
    CHECK(k == 1 && ev[0].kind == SF_TOO_LARGE);
    const char *huge = "MESSAGE sip:x SIP/2.0\r\nContent-Length: 70000\r\n\r\nhello";
    k = feed(huge, strlen(huge), NULL, 0, ev, 16, MAX);
    CHECK(k == 1 && ev[0].kind == SF_TOO_LARGE && ev[0].header_len == strlen(huge) - 5);
    const char *overflow = "MESSAGE sip:x SIP/2.0\r\nContent-Length: 99999999999999999999999999\r\n\r\n";
    k = feed(overflow, strlen(overflow), NULL, 0, ev, 16, MAX);
    CHECK(k == 1 && ev[0].kind == SF_TOO_LARGE);
    /* Exactly at the limit: 100-byte limit, header + body = 100. */
    char exact[128];
    int hl = snprintf(exact, sizeof exact, "MESSAGE sip:x SIP/2.0\r\nContent-Length: %d\r\n\r\n", 100 - 45);
    CHECK(hl == 45);
    memset(exact + hl, 'b', (size_t)(100 - hl));
    exact[100] = 0;
    k = feed(exact, 100, NULL, 0, ev, 16, 100);
    CHECK(k == 1 && ev[0].kind == SF_MESSAGE && ev[0].len == 100);
    k = feed(exact, 100, NULL, 0, ev, 16, 99);
    CHECK(k == 1 && ev[0].kind == SF_TOO_LARGE);
    free(big);

    /* 5. Content-Length missing or invalid: the header block is still delimited (for a 400). */
    const char *none = "OPTIONS sip:x SIP/2.0\r\nCall-ID: n\r\nCSeq: 1 OPTIONS\r\n\r\n";
    k = feed(none, strlen(none), NULL, 0, ev, 16, MAX);
    CHECK(k == 1 && ev[0].kind == SF_NO_LENGTH && ev[0].header_len == strlen(none));
    const char *bad[] = {
        "OPTIONS sip:x SIP/2.0\r\nContent-Length: ten\r\n\r\n",
        "OPTIONS sip:x SIP/2.0\r\nContent-Length: -1\r\n\r\n",
        "OPTIONS sip:x SIP/2.0\r\nContent-Length: +1\r\n\r\n",
        "OPTIONS sip:x SIP/2.0\r\nContent-Length: 1 2\r\n\r\nab",
        "OPTIONS sip:x SIP/2.0\r\nContent-Length:\r\n\r\n",
        "OPTIONS sip:x SIP/2.0\r\nContent-Length: 0x10\r\n\r\n",
        "OPTIONS sip:x SIP/2.0\r\nContent-Length: 2\r\nl: 3\r\n\r\nabc", /* two that disagree */
    };
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        k = feed(bad[b], strlen(bad[b]), NULL, 0, ev, 16, MAX);
        if (!(k == 1 && ev[0].kind == SF_BAD_LENGTH)) fprintf(stderr, "bad[%zu]: %zu events, kind %d\n", b, k, k ? (int)ev[0].kind : -1);
        CHECK(k == 1 && ev[0].kind == SF_BAD_LENGTH);
    }

    /* 6. Header spellings: compact `l`, any case, blanks before the colon, folded values, bare
     * LF line ends, two equal lengths. */
    const char *good[] = {
        "MESSAGE sip:x SIP/2.0\r\nl: 3\r\n\r\nabc",
        "MESSAGE sip:x SIP/2.0\r\nL:3\r\n\r\nabc",
        "MESSAGE sip:x SIP/2.0\r\ncontent-LENGTH : 3\r\n\r\nabc",
        "MESSAGE sip:x SIP/2.0\r\nContent-Length:\r\n   3\r\n\r\nabc",
        "MESSAGE sip:x SIP/2.0\r\nContent-Length: 3 \r\n\t\r\nX: y\r\n\r\nabc",
        "MESSAGE sip:x SIP/2.0\nContent-Length: 3\n\nabc",
        "MESSAGE sip:x SIP/2.0\r\nContent-Length: 3\r\nl: 3\r\n\r\nabc",
        "MESSAGE sip:x SIP/2.0\r\nContent-Lengthy: 9\r\nSubject: a\r\n Content-Length: 9\r\nl: 3\r\n\r\nabc",
    };
    for (size_t g = 0; g < sizeof good / sizeof good[0]; g++) {
        size_t n = strlen(good[g]);
        k = feed(good[g], n, NULL, 0, ev, 16, MAX);
        if (!(k == 1 && ev[0].kind == SF_MESSAGE && ev[0].len == n)) fprintf(stderr, "good[%zu]: %zu events, kind %d len %zu\n", g, k, k ? (int)ev[0].kind : -1, k ? ev[0].len : 0);
        CHECK(k == 1 && ev[0].kind == SF_MESSAGE && ev[0].len == n);
        every_boundary(good[g], ev[0].header_len);
    }

    /* 7. A body that looks like headers and like the end of a header block is body. */
    char tricky[1024];
    const char *body = "Content-Length: 9999\r\n\r\nINVITE sip:y SIP/2.0\r\nl: 0\r\n\r\n";
    snprintf(tricky, sizeof tricky, "MESSAGE sip:x SIP/2.0\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n\r\n%s", strlen(body), body);
    char twice[2048];
    snprintf(twice, sizeof twice, "%s%s", tricky, tricky);
    k = feed(twice, strlen(twice), NULL, 0, ev, 16, MAX);
    CHECK(k == 2 && ev[0].kind == SF_MESSAGE && ev[0].len == strlen(tricky) && ev[1].kind == SF_MESSAGE && ev[1].len == strlen(tricky));
    every_boundary(tricky, strlen(tricky) - strlen(body));

    /* 8. An unframeable message after good ones: the good ones come out first. */
    char then_bad[2048];
    snprintf(then_bad, sizeof then_bad, "%s%s", INVITE, none);
    k = feed(then_bad, strlen(then_bad), NULL, 0, ev, 16, MAX);
    CHECK(k == 2 && ev[0].kind == SF_MESSAGE && ev[1].kind == SF_NO_LENGTH);

    printf("test_stream: %d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
