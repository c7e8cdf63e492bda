/* RFC 3261 §16.3 request validation for the edge: what a proxy must check before it forwards a
 * request, and the answer owed when a check fails. No allocation; reads the message only. */
#ifndef LOADCTL_EDGE_VALIDATE_H
#define LOADCTL_EDGE_VALIDATE_H

#include <stddef.h>

/* Why a request was not forwarded (index of the edge's counters; SV_COUNT entries). */
typedef enum {
    SV_OK = 0,
    SV_NO_VIA,        /* no Via, or a top Via that does not parse: no response can be routed, dropped */
    SV_BAD_SYNTAX,    /* 400: request line, Call-ID, CSeq, From, To or Max-Forwards malformed or missing */
    SV_BAD_SCHEME,    /* 416: a Request-URI scheme the edge does not understand */
    SV_TOO_MANY_HOPS, /* 483: Max-Forwards 0 */
    SV_OPTIONS_AT_0,  /* 200: OPTIONS with Max-Forwards 0, answered as its final recipient (§11) */
    SV_LOOP,          /* 482: the request came back through this edge unchanged */
    SV_BAD_EXTENSION, /* 420: Proxy-Require */
    SV_UNANSWERED,    /* an ACK that failed a check: no response to an ACK exists, dropped */
    SV_COUNT
} sv_reason;

/* The counter label of each reason. */
extern const char *const SV_LABELS[SV_COUNT];

/* How many header lines covered by the loop hash sv_check notes (Call-ID, CSeq, From, To, and
 * a few Route / Proxy-Require / Proxy-Authorization lines); a request with more is hashed by a
 * second walk. */
#define SV_LOOP_PARTS 12

/* A part of the checked message: `p` points into it (NULL, length 0: absent). */
typedef struct {
    const char *p;
    size_t n;
} sv_span;

typedef struct {
    sv_reason reason;
    unsigned status;      /* the response to send; 0 when none (valid, or dropped) */
    const char *phrase;   /* its reason phrase */
    char extra[512];      /* header lines the response carries besides the copied ones (CRLF each) */
    int max_forwards;     /* the request's value; -1 when absent */
    /* What the rest of the request's way reads, found by the same walk over its header lines
     * (first occurrence, value trimmed; valid whatever the reason): */
    sv_span call_id, cseq, from, to;
    sv_span branch; /* the top Via entry's branch parameter */
    /* The header lines the loop hash covers, in order (their names' first bytes and values);
     * loop_n -1 when there were more than SV_LOOP_PARTS. Read by sv_loop_hash_of. */
    int loop_n;
    const char *loop_name[SV_LOOP_PARTS];
    sv_span loop_value[SV_LOOP_PARTS];
} sv_result;

/* Checks a request (one whole message, start line first). `own_sent_by` and `own_sent_by2` (or
 * NULL) are the host:ports this edge writes into its Vias (UDP/TCP, TLS), for loop detection
 * whichever transport a loop crosses. Returns out->reason. */
sv_reason sv_check(const char *msg, size_t len, const char *own_sent_by, const char *own_sent_by2, sv_result *out);

/* The loop-detection part of this edge's branch (RFC 3261 §16.6 step 8): a hash of what decides
 * how the request is processed — request line, Call-ID, CSeq, From, To, Route, Proxy-Require,
 * Proxy-Authorization — and not of the top Via, which differs on every pass. */
unsigned long sv_loop_hash(const char *msg, size_t len);

/* sv_loop_hash of a message sv_check checked into `sv`, from what its walk noted. */
unsigned long sv_loop_hash_of(const sv_result *sv, const char *msg, size_t len);

#endif
