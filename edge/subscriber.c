/* subscriber.c: the RFC 7200 subscriber.
 *
 * With --subscribe the edge is an RFC 7200 subscriber: it SUBSCRIBEs to the notifier (the
 * `load-control` event package, through libloadctl's subscriber state machine and its SIP wire functions),
 * applies every NOTIFY body it receives, refreshes before the subscription expires, re-SUBSCRIBEs
 * after a version gap, and unsubscribes on SIGINT/SIGTERM. Until the notifier's first answer is
 * in force (or --startup-hold-ms passes, default 2000) requests are held, not handled (the
 * startup hold, hold.c). Its SUBSCRIBEs are retransmitted over
 * UDP until a response arrives (Timer E: T1 doubling up to T2, for 64·T1). A `sips:` notifier URI
 * (or one with `;transport=tls`) puts the subscription on a TLS connection whose certificate
 * names the notifier (sublink.c); then only what arrives on that connection is the notifier's,
 * and a load-control NOTIFY from anywhere else is answered 403. The first SUBSCRIBE of a subscription goes to --notifier IP:PORT (default: the
 * notifier URI's host:port); refreshes, re-SUBSCRIBEs and the unsubscribe go to the dialog's
 * remote target — the Contact of the notifier's 200 and NOTIFYs — or to the first proxy of its
 * route set (RFC 3261 §12.2.1.1), as lc_subscriber_wire_next_hop says; a next hop that is not
 * an IPv4 address is logged and the request goes to --notifier. A NOTIFY without a body leaves
 * the policy in force (RFC 7200 §4.8). Documents applied with warnings and refused documents
 * are logged with the notifier and the version, and counted (SIGUSR1). */
#define _GNU_SOURCE /* struct mmsghdr (edge.h), clock_gettime */

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "edge.h"
#include "hold.h"
#include "forward.h"
#include "metrics.h"
#include "subscriber.h"
#include "sublink.h"
#include "udp.h"
#include "via.h"

#define T1_NS 500000000ull
#define T2_NS 4000000000ull
/* Branches of this edge's own SUBSCRIBEs start with this (after the RFC 3261 cookie). */
#define SUB_BRANCH "z9hG4bKlcsub"

/* The host:port of a SIP URI into an address (for --subscribe without --notifier, and the
 * subscription's next hop). URI parameters and a `>` end the host:port. */
int uri_addr(const char *uri, struct sockaddr_in *out) {
    const char *at = strchr(uri, '@');
    const char *host = at ? at + 1 : strncmp(uri, "sip:", 4) == 0 ? uri + 4 : strncasecmp(uri, "sips:", 5) == 0 ? uri + 5 : uri;
    char hp[96];
    size_t n = strcspn(host, ";>?");
    if (n >= sizeof hp) return -1;
    memcpy(hp, host, n);
    hp[n] = 0;
    if (!strchr(hp, ':')) { /* RFC 3263 §4.2's default ports */
        if (n + 5 >= sizeof hp) return -1;
        strcat(hp, uri_wants_tls(uri) ? ":5061" : ":5060");
    }
    return parse_addr(hp, out);
}

static void log_subscriber_events(edge_t *e) {
    lc_subscriber_event ev;
    int in_force = 0;
    while (lc_subscriber_poll_event(e->sub, &ev) == LC_RESULT_OK) {
        const char *what = "event";
        int refused = 0;
        switch (ev.kind) {
        case LC_SUBSCRIBER_EVENT_KIND_SUBSCRIBED: what = "subscribed (seconds)"; break;
        case LC_SUBSCRIBER_EVENT_KIND_PENDING: what = "pending"; break;
        case LC_SUBSCRIBER_EVENT_KIND_POLICY_APPLIED: what = "policy applied (version)"; e->hold_until_ns = 0; in_force = 1; break;
        case LC_SUBSCRIBER_EVENT_KIND_POLICY_WITHDRAWN: what = "policy withdrawn"; break;
        case LC_SUBSCRIBER_EVENT_KIND_DOCUMENT_IGNORED: what = "document ignored (version)"; break;
        case LC_SUBSCRIBER_EVENT_KIND_INVALID_DOCUMENT: what = "invalid document, policy kept"; refused = 1; e->hold_until_ns = 0; break;
        case LC_SUBSCRIBER_EVENT_KIND_APPLY_FAILED: what = "document refused by the engine"; refused = 1; e->hold_until_ns = 0; break;
        case LC_SUBSCRIBER_EVENT_KIND_DOCUMENT_WARNINGS: what = "document warnings (version)"; break;
        case LC_SUBSCRIBER_EVENT_KIND_NOTHING_TO_UPDATE: what = "NOTIFY without body, policy kept"; e->hold_until_ns = 0; in_force = 1; break;
        case LC_SUBSCRIBER_EVENT_KIND_UNKNOWN_BODY: what = "unknown body discarded"; break;
        case LC_SUBSCRIBER_EVENT_KIND_REDIRECT_OUTSIDE_ALLOW_LIST: what = "redirect outside the allow-list"; break;
        case LC_SUBSCRIBER_EVENT_KIND_NOTIFY_REJECTED: what = "NOTIFY rejected (status)"; break;
        case LC_SUBSCRIBER_EVENT_KIND_RETRYING: what = "retrying"; break;
        case LC_SUBSCRIBER_EVENT_KIND_LAPSED: what = "subscription lapsed"; break;
        case LC_SUBSCRIBER_EVENT_KIND_STOPPED: what = "subscription stopped"; e->hold_until_ns = 0; e->sub_stopped = 1; break;
        }
        /* Wall-clock time, to line the log up with the SIP peers' traces. */
        struct timespec wall;
        clock_gettime(CLOCK_REALTIME, &wall);
        /* One line per event: the warnings (one per line in the event) joined with "; ". */
        char detail[2048];
        size_t dl = 0;
        if (ev.notifier.ptr) dl = (size_t)snprintf(detail, sizeof detail, "from %.*s: ", (int)ev.notifier.len, (const char *)ev.notifier.ptr);
        if (dl >= sizeof detail) dl = sizeof detail - 1;
        for (size_t k = 0; ev.text.ptr && k < ev.text.len && dl + 3 < sizeof detail; k++) {
            char ch = (char)ev.text.ptr[k];
            if (ch == '\n') {
                detail[dl++] = ';';
                detail[dl++] = ' ';
            } else {
                detail[dl++] = ch;
            }
        }
        detail[dl] = 0;
        if (refused && ev.number == LC_VERSION_UNKNOWN) {
            elog("subscriber at %lld.%06ld: %s (version unknown) 0 %s\n", (long long)wall.tv_sec,
                    wall.tv_nsec / 1000, what, detail);
        } else {
            elog("subscriber at %lld.%06ld: %s %llu %s\n", (long long)wall.tv_sec, wall.tv_nsec / 1000,
                    what, (unsigned long long)ev.number, detail);
        }
    }
    if (in_force) notifier_policy_in_force(e);
    lc_subscriber_counters sc;
    if (lc_subscriber_stats(e->sub, &sc) == LC_RESULT_OK) {
        pthread_mutex_lock(&e->sub_mu);
        e->sub_stats = sc;
        e->sub_stats_valid = 1;
        pthread_mutex_unlock(&e->sub_mu);
    }
}

/* Where the request just rendered goes: the dialog's next hop (remote target or first route),
 * or --notifier for the first SUBSCRIBE of a subscription (its next hop is the notifier URI). */
static struct sockaddr_in subscriber_destination(edge_t *e) {
    lc_str hop;
    if (lc_subscriber_wire_next_hop(e->sub, &hop) != LC_RESULT_OK || hop.len >= 256) return e->notifier_addr;
    char uri[256];
    memcpy(uri, hop.ptr, hop.len);
    uri[hop.len] = 0;
    if (strcmp(uri, e->notifier_uri) == 0) return e->notifier_addr;
    struct sockaddr_in to;
    if (uri_addr(uri, &to) != 0) {
        elog("subscriber: no IPv4 address in the next hop %s; sending to --notifier\n", uri);
        return e->notifier_addr;
    }
    return to;
}

/* Sends the subscriber's next SUBSCRIBE. libloadctl's subscriber keeps one transaction: a new
 * SUBSCRIBE from it replaces the one outstanding here, whose retransmissions stop and whose late
 * answer is absorbed (its branch no longer matches). That matters after a `terminated` NOTIFY
 * that arrives while a refresh is still being retransmitted (a notifier that was unreachable
 * and comes back): the new subscription must start at once, not after the old refresh got its
 * 481, since the policy is withdrawn meanwhile. */
static void subscriber_transmit(worker_t *w) {
    edge_t *e = w->e;
    if (!e->sub) return;
    char branch[64];
    snprintf(branch, sizeof branch, SUB_BRANCH "%lx%lu", (unsigned long)getpid(), ++e->sub_count);
    size_t len = 0;
    lc_result r = lc_subscriber_transmit_wire(e->sub, &e->wire, cstr(branch), (uint8_t *)e->sub_msg,
                                              sizeof e->sub_msg, &len);
    if (r == LC_RESULT_EMPTY) return;
    if (r != LC_RESULT_OK) {
        elog("subscriber: cannot render SUBSCRIBE: %s\n", lc_result_text(r));
        return;
    }
    if (e->unsubscribed) {
        /* On the way out the unsubscribe is the last SUBSCRIBE. libloadctl's subscriber starts
         * a new subscription when a SUBSCRIBE in its dialog is answered 481 ("the notifier lost
         * the subscription"), the unsubscribe included: sending that would leave a
         * subscription behind at the notifier for its whole Expires. */
        elog("subscriber: stopping: a new SUBSCRIBE after the unsubscribe is not sent");
        e->sub_outstanding = 0;
        return;
    }
    /* A pending request keeps the branch it was first given. */
    const char *b = strstr(e->sub_msg, "branch=");
    size_t bl = b ? strcspn(b + 7, ";\r\n ") : 0;
    if (b && bl < sizeof e->sub_branch) {
        memcpy(e->sub_branch, b + 7, bl);
        e->sub_branch[bl] = 0;
    }
    e->sub_len = len;
    e->sub_outstanding = 1;
    e->sub_started_ns = now_ns();
    e->sub_interval_ns = T1_NS;
    e->sub_next_rtx_ns = e->sub_started_ns + T1_NS;
    if (e->link) {
        e->sub_next_rtx_ns = UINT64_MAX; /* not retransmitted over TLS (RFC 3261 §17.1.2.2) */
        sublink_send(e, e->sub_msg, len);
        return;
    }
    e->sub_dest = subscriber_destination(e);
    send_to(w, e->sub_msg, len, &e->sub_dest);
}

/* Timer E (retransmit) / Timer F (give up; the state machine has its own timeout for it). */
void subscriber_timers(edge_t *e) {
    if (!e->sub) return;
    pthread_mutex_lock(&e->sub_lock);
    uint64_t now = now_ns();
    sublink_tick(e);
    if (e->sub_outstanding && now - e->sub_started_ns >= 64 * T1_NS) {
        e->sub_outstanding = 0;
    } else if (e->sub_outstanding && now >= e->sub_next_rtx_ns) {
        send_to(e->udp, e->sub_msg, e->sub_len, &e->sub_dest);
        e->sub_interval_ns = e->sub_interval_ns * 2 < T2_NS ? e->sub_interval_ns * 2 : T2_NS;
        e->sub_next_rtx_ns = now + e->sub_interval_ns;
    }
    uint64_t due = 0;
    if (lc_subscriber_poll_timeout(e->sub, &due) == LC_RESULT_OK && due <= now) {
        lc_subscriber_handle_timeout(e->sub, now);
    }
    subscriber_transmit(e->udp);
    log_subscriber_events(e);
    pthread_mutex_unlock(&e->sub_lock);
}

/* True for a request carrying `Event: load-control`: this edge's NOTIFYs are not proxied. */
int is_load_control(const char *msg, size_t len) {
    size_t el = 0;
    size_t ev = find_header(msg, len, "Event", "o", &el);
    return ev && el >= 12 && strncasecmp(msg + ev, "load-control", 12) == 0 &&
           (el == 12 || msg[ev + 12] == ';' || msg[ev + 12] == ' ');
}

/* The subscription is over TLS and this message of the package came some other way: a response
 * to a SUBSCRIBE is dropped, a NOTIFY answered 403 (over the transport it came on). Counted,
 * and logged at most once a second. */
void subscriber_refuse(worker_t *w, const char *msg, size_t len, const peer_t *from) {
    static _Atomic uint64_t logged_ns;
    BUMP(w->c.notifies_refused);
    int notify = !is_response(msg, len);
    if (notify) reply(w, msg, len, from, 403, "Forbidden", NULL);
    uint64_t now = now_ns(), last = atomic_load(&logged_ns);
    if (now - last >= 1000000000ull && atomic_compare_exchange_strong(&logged_ns, &last, now)) {
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &from->addr.sin_addr, ip, sizeof ip);
        elog("subscriber: %s from %s:%u over %s refused: the notifier is heard only on its TLS connection\n",
             notify ? "load-control NOTIFY" : "response to a SUBSCRIBE", ip, ntohs(from->addr.sin_port),
             from->tls ? "another TLS connection" : from->tcp ? "TCP" : "UDP");
    }
}

/* The rest of subscriber_receive, under the subscriber's lock. */
static void subscriber_take(worker_t *w, const char *msg, size_t len, const struct sockaddr_in *from, int response,
                            const char *branch) {
    edge_t *e = w->e;
    static char reply[MAX_MSG];
    size_t rlen = 0;
    uint64_t now = now_ns();
    if (response) {
        /* A provisional or repeated response, or one to a SUBSCRIBE given up on: absorbed. */
        if (!e->sub_outstanding || strcmp(branch, e->sub_branch) != 0 || msg[8] == '1') return;
        e->sub_outstanding = 0;
        lc_result r = lc_subscriber_receive_wire(e->sub, now, (const uint8_t *)msg, len, &e->wire,
                                                 (uint8_t *)reply, sizeof reply, &rlen);
        if (r != LC_RESULT_OK) elog("subscriber: bad response: %s\n", lc_result_text(r));
    } else {
        /* A document may change rules, which starts their engine counters again: the totals
         * are taken before and after (metrics.h). */
        metrics_sample_rules(e->engine);
        lc_result r = lc_subscriber_receive_wire(e->sub, now, (const uint8_t *)msg, len, &e->wire,
                                                 (uint8_t *)reply, sizeof reply, &rlen);
        metrics_sample_rules(e->engine);
        e->notifies++;
        if (r != LC_RESULT_OK) {
            elog("subscriber: bad NOTIFY: %s\n", lc_result_text(r));
        } else if (rlen > 0 && from) {
            send_to(w, reply, rlen, from);
        } else if (rlen > 0) {
            sublink_send(e, reply, rlen);
        }
    }
    subscriber_transmit(w);
    log_subscriber_events(e);
}

/* A message of the event package for this edge's subscriber: taken and answered here. Returns
 * 1 when it was. `from` is NULL for what came on the notifier's TLS connection. */
int subscriber_receive(worker_t *w, const char *msg, size_t len, const struct sockaddr_in *from) {
    edge_t *e = w->e;
    if (!e->sub) return 0;
    int response = len >= 8 && strncmp(msg, "SIP/2.0 ", 8) == 0;
    char branch[64] = "";
    if (response) {
        top_branch(msg, len, branch, sizeof branch);
        if (strncmp(branch, SUB_BRANCH, strlen(SUB_BRANCH)) != 0) return 0;
    } else if (!(len >= 7 && strncmp(msg, "NOTIFY ", 7) == 0 && is_load_control(msg, len))) {
        return 0;
    }
    if (e->link && from) {
        peer_t p = {0, *from, 0, 0, 0};
        subscriber_refuse(w, msg, len, &p);
        return 1;
    }
    pthread_mutex_lock(&e->sub_lock);
    subscriber_take(w, msg, len, from, response, branch);
    pthread_mutex_unlock(&e->sub_lock);
    return 1;
}

/* Whether a notifier URI asks for TLS: `sips:`, or a `transport=tls` parameter. */
int uri_wants_tls(const char *uri) {
    if (strncasecmp(uri, "sips:", 5) == 0) return 1;
    for (const char *p = strchr(uri, ';'); p; p = strchr(p + 1, ';')) {
        if (strncasecmp(p, ";transport=tls", 14) == 0 && strchr(";?>", p[14])) return 1;
    }
    return 0;
}

/* The host of a SIP URI (what its certificate must name by default), or "" when too long. */
void uri_host(const char *uri, char *out, size_t cap) {
    const char *at = strchr(uri, '@');
    const char *colon = strchr(uri, ':');
    const char *host = at ? at + 1 : colon ? colon + 1 : uri;
    size_t n = strcspn(host, ":;>?");
    if (n >= cap) n = 0;
    memcpy(out, host, n);
    out[n] = 0;
}

int start_subscriber(edge_t *e, const char *notifier, const char *own_uri, unsigned expires) {
    char ip[INET_ADDRSTRLEN];
    /* Over TLS the Via names this edge's TLS listener (or its UDP/TCP address), with RFC 5923's
     * alias: "send requests to me on this connection". */
    const struct sockaddr_in *self = e->link && e->tls_on ? &e->tls_listen_addr : &e->listen_addr;
    inet_ntop(AF_INET, &self->sin_addr, ip, sizeof ip);
    snprintf(e->sent_by, sizeof e->sent_by, "%s:%u%s", ip, ntohs(self->sin_port), e->link ? ";alias" : "");
    if (own_uri) snprintf(e->contact, sizeof e->contact, "%s", own_uri);
    else if (e->link) snprintf(e->contact, sizeof e->contact, "sips:edge@%s:%u", ip, ntohs(self->sin_port));
    else snprintf(e->contact, sizeof e->contact, "sip:edge@%s", e->sent_by);
    e->wire.transport = cstr(e->link ? "TLS" : "UDP");
    e->wire.sent_by = cstr(e->sent_by);
    e->wire.contact = cstr(e->contact);
    static char call_id[64], tag[32];
    snprintf(call_id, sizeof call_id, "lc-edge-%lx-%llx", (unsigned long)getpid(), (unsigned long long)now_ns());
    snprintf(tag, sizeof tag, "%llx", (unsigned long long)(now_ns() ^ (uint64_t)getpid()));
    snprintf(e->notifier_uri, sizeof e->notifier_uri, "%s", notifier);
    lc_subscriber_config c;
    memset(&c, 0, sizeof c);
    c.notifier = cstr(notifier);
    c.subscriber = cstr(e->contact);
    c.call_id = cstr(call_id);
    c.tag = cstr(tag);
    c.expires = expires;
    c.scope_to_notifier = false;
    lc_result r = lc_subscriber_new(e->engine, &c, now_ns(), &e->sub);
    if (r != LC_RESULT_OK) {
        elog("cannot subscribe to %s: %s\n", notifier, lc_result_text(r));
        return -1;
    }
    elog("subscribing to %s as %s\n", notifier, e->contact);
    subscriber_transmit(e->udp);
    return 0;
}

/* Unsubscribes (SUBSCRIBE with Expires: 0) and waits up to a second for the answer, on the
 * main thread once the other workers have stopped (the answer may come on any worker's
 * socket). */
void stop_subscriber(edge_t *e) {
    if (!e->sub) return;
    static char buf[MAX_MSG];
    e->sub_outstanding = 0;
    lc_subscriber_unsubscribe(e->sub, now_ns());
    subscriber_transmit(e->udp);
    e->unsubscribed = 1;
    flush_sends(e->udp);
    uint64_t until = now_ns() + 1000000000ull;
    /* Until the unsubscribe is answered and the notifier's final NOTIFY (terminated) is
     * answered too, so the notifier does not retransmit it to an edge that has gone. */
    enum { MAX_POLL = 256 };
    struct pollfd p[MAX_POLL + 1];
    unsigned np = e->nudp < MAX_POLL ? e->nudp : MAX_POLL;
    while ((e->sub_outstanding || !e->sub_stopped) && now_ns() < until) {
        p[0] = (struct pollfd){sublink_fd(e), sublink_events(e), 0};
        for (unsigned k = 0; k < np; k++) p[k + 1] = (struct pollfd){e->link ? -1 : e->udps[k]->sock, POLLIN, 0};
        if (poll(p, np + 1, 100) <= 0) continue;
        if (p[0].revents) sublink_io(e);
        for (unsigned k = 0; k < np; k++) {
            if (!(p[k + 1].revents & POLLIN)) continue;
            struct sockaddr_in from;
            socklen_t fl = sizeof from;
            ssize_t n = recvfrom(p[k + 1].fd, buf, MAX_MSG, 0, (struct sockaddr *)&from, &fl);
            if (n > 0) subscriber_receive(e->udp, buf, (size_t)n, &from);
        }
        flush_sends(e->udp);
    }
    log_subscriber_events(e);
    lc_subscriber_free(e->sub);
    e->sub = NULL;
    sublink_stop(e);
}
