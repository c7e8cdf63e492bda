/* hold.c: until the notifier's first policy is in force (--subscribe). Until then
 * --fallback-policy's rules are enforced, or, without it, a new request no rule matches is
 * answered 503 without Retry-After (handle.c): never an unlimited release. And requests are
 * held rather than handled for up to --startup-hold-ms (the startup hold, below). */
#define _GNU_SOURCE /* struct mmsghdr (edge.h), clock_gettime */

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "edge.h"
#include "handle.h"
#include "hold.h"
#include "metrics.h"
#include "subscriber.h"
#include "udp.h"

/* The source name of the --fallback-policy rules. */
#define FALLBACK_SOURCE "fallback"

/* The fallback or the refusal in force from the start: 0, or -1 when the fallback file cannot
 * be published. */
int fallback_start(edge_t *e) {
    /* Until the notifier's first policy is in force: the fallback, or refusal of what no
     * rule matches (notifier_policy_in_force ends it). Never unlimited. */
    atomic_store(&e->no_policy, 1);
    if (e->fallback_path && load_policy_file(e, e->fallback_path, FALLBACK_SOURCE) != 0) return -1;
    elog("until the notifier's policy is in force: %s%s", e->fallback_path ? "fallback policy " : "",
         e->fallback_path ? e->fallback_path : "new requests no rule matches are answered 503 (no --fallback-policy)");
    return 0;
}

/* The notifier's answer is in force (a document applied, or a NOTIFY without a body: nothing
 * to enforce): the fallback policy goes, and requests no rule matches pass from now on. */
void notifier_policy_in_force(edge_t *e) {
    if (!atomic_load(&e->no_policy)) return;
    atomic_store(&e->no_policy, 0);
    if (e->fallback_path) {
        uint64_t generation = 0;
        metrics_sample_rules(e->engine);
        lc_engine_withdraw(e->engine, cstr(FALLBACK_SOURCE), &generation);
        metrics_sample_rules(e->engine);
        elog("fallback policy %s withdrawn: the notifier's is in force (generation %llu)", e->fallback_path,
             (unsigned long long)generation);
    }
}

/* Starts the startup hold for `hold_ms`. */
void hold_start(edge_t *e, long hold_ms) {
    e->hold_until_ns = now_ns() + (uint64_t)hold_ms * 1000000ull;
    atomic_store(&e->holding, 1);
}

/* With --subscribe the notifier's policy arrives a round trip after the edge starts; requests
 * handled before it passed unfiltered (a restarted edge under a flood let one through, above
 * the rule's r·(1 s + τ) + 1, in tests/e2e/test_faults.py edge_restart). So requests that come
 * meanwhile are held (up to HOLD_BYTES; beyond that dropped and counted, never handled without
 * the policy) and handled once the first document is in force, a
 * bodyless NOTIFY says there is none, the subscription stops, or --startup-hold-ms passes.
 * Responses and the subscriber's own messages are not held. Any worker holds what it reads in
 * one arena, under hold_mu. Returns 1 when the message was held. */
#define HOLD_BYTES (4u << 20)
int hold_request(edge_t *e, const char *msg, size_t len, const struct sockaddr_in *from) {
    if (!atomic_load(&e->holding) || is_response(msg, len)) return 0;
    if (len >= 7 && strncmp(msg, "NOTIFY ", 7) == 0 && is_load_control(msg, len)) return 0;
    size_t need = sizeof(size_t) + sizeof *from + len;
    pthread_mutex_lock(&e->hold_mu);
    if (!atomic_load(&e->holding)) { /* ended meanwhile: handled now, after what was held */
        pthread_mutex_unlock(&e->hold_mu);
        return 0;
    }
    if (!e->held) e->held = malloc(HOLD_BYTES);
    if (!e->held || e->held_len + need > HOLD_BYTES) {
        /* Full: dropped (UDP: the client retransmits, and the copy that comes after the hold
         * is handled then), never let through unfiltered. */
        e->held_dropped++;
    } else {
        memcpy(e->held + e->held_len, &len, sizeof len);
        memcpy(e->held + e->held_len + sizeof len, from, sizeof *from);
        memcpy(e->held + e->held_len + sizeof len + sizeof *from, msg, len);
        e->held_len += need;
        e->held_count++;
    }
    pthread_mutex_unlock(&e->hold_mu);
    return 1;
}

/* Ends the hold when it is due and handles what it held, in arrival order. */
void release_held(edge_t *e, worker_t *w) {
    if (!atomic_load(&e->holding) || now_ns() < e->hold_until_ns) return;
    /* Whichever worker sees the end first handles what every worker held. */
    pthread_mutex_lock(&e->hold_mu);
    int mine = atomic_exchange(&e->holding, 0);
    pthread_mutex_unlock(&e->hold_mu);
    if (!mine) return;
    elog("startup hold ended: %lu requests held were handled, %lu dropped (the hold full) (%s)\n",
            e->held_count, e->held_dropped,
            e->hold_until_ns ? "no policy within --startup-hold-ms" : "the notifier's answer is in force");
    peer_t from;
    memset(&from, 0, sizeof from);
    for (size_t at = 0; at < e->held_len;) {
        size_t len;
        memcpy(&len, e->held + at, sizeof len);
        memcpy(&from.addr, e->held + at + sizeof len, sizeof from.addr);
        handle(w, e->held + at + sizeof len + sizeof from.addr, len, &from);
        at += sizeof len + sizeof from.addr + len;
    }
    flush_sends(w);
    free(e->held);
    e->held = NULL;
    e->held_len = 0;
}
