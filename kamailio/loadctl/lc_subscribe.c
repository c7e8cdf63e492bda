/*
 * loadctl module - the RFC 7200 subscriber
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: RFC 7200 subscriber (see lc_subscribe.h for the design)
 *
 * Who does what:
 * - SIP worker, lc_handle_notify(): copies the NOTIFY (bytes + where it came
 *   from) into shm, writes the pointer into the channel. The owner answers.
 * - any process, tm's TMCB_LOCAL_COMPLETED callback: copies the final
 *   response to one of the owner's SUBSCRIBEs (or notes tm's local 408) into
 *   shm, writes the pointer into the channel.
 * - the owner process: the only one that calls lc_subscriber_*; feeds what
 *   it reads to the state machines, answers NOTIFYs on the socket they came
 *   in on (msg_send), sends the SUBSCRIBEs the machines ask for through tm
 *   (t_uac with the machine's Call-ID, tags and CSeq), runs their timers
 *   (CLOCK_MONOTONIC), and after every applied or withdrawn document copies
 *   the notifier's merged policy from its private engine into the store.
 * - the main process, on shutdown (core app_shutdown callback, before the
 *   children are killed): asks the owner to unsubscribe and waits up to 1 s.
 *
 * A subscription to a `sips:` notifier (or `;transport=tls`) hears it only over
 * TLS from a peer Kamailio's tls module verified and whose certificate names
 * it (lc_tls.h): a worker checks each NOTIFY before handing it over, and the
 * tm callback each response to a SUBSCRIBE; anything else is refused (a
 * NOTIFY answered 403, a response dropped), counted and logged at most once a
 * second. The subscriptions' Call-ID stems and names are set in mod_init, so
 * every worker can tell which subscription a NOTIFY claims to belong to.
 *
 * In-dialog SUBSCRIBEs (refreshes, the re-SUBSCRIBE after a version gap, the
 * unsubscribe) go to the dialog's remote target — the Contact of the
 * notifier's 200 and NOTIFYs, which the machine keeps — through its route set
 * (RFC 3261 §12.2.1.1): the machine's Request-URI becomes tm's remote target
 * and its Route value tm's route set, and tm's calculate_hooks() picks the
 * next hop (the first loose route, else the remote target). A NOTIFY without
 * a body leaves the policy in force (RFC 7200 §4.8); refused documents and
 * documents with warnings are logged at WARNING with the notifier and the
 * version and counted (loadctl.subscriptions: invalid, apply_failed, warned).
 */

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../core/sr_module.h"
#include "../../core/dprint.h"
#include "../../core/globals.h"
#include "../../core/locking.h"
#include "../../core/mem/mem.h"
#include "../../core/mem/shm_mem.h"
#include "../../core/parser/msg_parser.h"
#include "../../core/socket_info.h"

#include "lc_shared.h"
#include "lc_store.h"
#include "lc_owner.h"
#include "lc_uac.h"
#include "lc_mod.h"
#include "lc_sub_event.h"
#include "lc_tls.h"
#include "lc_subscribe.h"

#define LC_URI_MAX 256
#define LC_SUB_OUT_MAX 16384

int lc_sub_expires = 3600;
char *lc_sub_contact = NULL;
char *lc_sub_from = NULL;

static char *_lc_sub_uris[LC_MAX_SUBSCRIPTIONS];
static int _lc_sub_n = 0;
/* subscribe_tls_name values ("URI NAME"), matched to a subscribe in mod_init */
static char *_lc_sub_names[LC_MAX_SUBSCRIPTIONS];
static int _lc_sub_names_n = 0;

enum
{
	LC_REC_NOTIFY = LC_REC_ROLE,
	LC_REC_RESUBSCRIBE
};

/* One message for the owner (shm; the owner frees it). A response to a
 * SUBSCRIBE carries (subscription << 32 | CSeq) as its param. */
typedef struct lc_sub_rec
{
	lc_rec_t h;
	int sub;		  /* RESUBSCRIBE: which (-1: all) */
	char callid[128]; /* NOTIFY: its Call-ID (to pick the subscription) */
} lc_sub_rec_t;

/* What loadctl.subscriptions shows of one subscription (shm, written by the
 * owner under the lock). */
typedef struct lc_sub_status
{
	char notifier[LC_URI_MAX];
	char state[32];
	char last_event[256];
	char call_id[128];
	long long version; /* last applied, -1 none */
	int last_status;   /* last final response to a SUBSCRIBE */
	unsigned int expires;
	int published; /* the store holds its policy */
	unsigned long long subscribes, responses, notifies, applied, withdrawn,
			ignored, invalid, apply_failed, rejected, retries, store_errors,
			bodyless, warned;
	/* NOTIFYs and responses refused: not from the notifier's verified TLS
	 * peer (workers add to it without the lock) */
	volatile unsigned long long unauthenticated;
	/* when one was last logged (CLOCK_MONOTONIC ns) */
	volatile unsigned long long unauthenticated_logged_ns;
	char last_unauthenticated[256];
	char contact[LC_URI_MAX]; /* of its SUBSCRIBEs */
} lc_sub_status_t;

typedef struct lc_sub_shared
{
	gen_lock_t lock;
	char contact[LC_URI_MAX]; /* set by the owner */
	lc_sub_status_t st[LC_MAX_SUBSCRIPTIONS];
} lc_sub_shared_t;

static lc_sub_shared_t *_lc_sub_sh = NULL;

static int lc_sub_owner_init(void);
static uint64_t lc_sub_tick(uint64_t now);
static void lc_sub_take(lc_rec_t *rec, uint64_t now);
static void lc_sub_stop(uint64_t now);
static void lc_sub_tm_cb(struct cell *t, int type, struct tmcb_params *ps);

static lc_owner_t _lc_sub_owner = {
		.role = "subscriber",
		.rec_size = sizeof(lc_sub_rec_t),
		.init = lc_sub_owner_init,
		.tick = lc_sub_tick,
		.take = lc_sub_take,
		.stop = lc_sub_stop,
		.tm_cb = lc_sub_tm_cb,
};

/* Each subscription. Set in mod_init, before the fork, and read by every
 * process: notifier, stem, tag, tls, tcp, tls_name. The owner's alone: the
 * rest. */
typedef struct lc_sub
{
	char notifier[LC_URI_MAX];
	char stem[96]; /* every Call-ID of this subscription starts "stem-" */
	char tag[64];
	int tls;			/* heard only from its verified TLS peer */
	int tcp;			/* reached over TCP (;transport=tcp) */
	char tls_name[256]; /* the name its certificate must carry */
	lc_subscriber *sub;
	char contact[LC_URI_MAX];
	char from[LC_URI_MAX];
	char call_id[128]; /* of the last SUBSCRIBE sent */
	unsigned int cseq;
} lc_sub_t;

static lc_sub_t _lc_subs[LC_MAX_SUBSCRIPTIONS];
static lc_engine *_lc_sub_engine = NULL;
static lc_sip_wire _lc_wire;
static char _lc_contact[LC_URI_MAX];
static char _lc_sent_by[128];

int lc_sub_add_param(modparam_t type, void *val)
{
	char *s = (char *)val;

	if(s == NULL || *s == '\0')
		return 0;
	if(_lc_sub_n >= LC_MAX_SUBSCRIPTIONS) {
		LM_ERR("at most %d subscribe parameters\n", LC_MAX_SUBSCRIPTIONS);
		return -1;
	}
	if(strlen(s) >= LC_SOURCE_MAX || strncasecmp(s, "sip", 3) != 0) {
		LM_ERR("subscribe \"%s\": a sip: or sips: URI of at most %d bytes "
			   "expected\n",
				s, LC_SOURCE_MAX - 1);
		return -1;
	}
	_lc_sub_uris[_lc_sub_n++] = s;
	return 0;
}

int lc_sub_tls_name_param(modparam_t type, void *val)
{
	char *s = (char *)val;

	if(s == NULL || *s == '\0')
		return 0;
	if(_lc_sub_names_n >= LC_MAX_SUBSCRIPTIONS) {
		LM_ERR("at most %d subscribe_tls_name parameters\n",
				LC_MAX_SUBSCRIPTIONS);
		return -1;
	}
	_lc_sub_names[_lc_sub_names_n++] = s;
	return 0;
}

int lc_sub_count(void)
{
	return _lc_sub_n;
}

/* ---- any process: to the owner ---- */

/* The subscription a Call-ID belongs to (its stem), or -1. */
static int lc_sub_match(const char *callid, size_t len)
{
	int i;
	size_t n;

	for(i = 0; i < _lc_sub_n; i++) {
		n = strlen(_lc_subs[i].stem);
		if(len > n && strncmp(callid, _lc_subs[i].stem, n) == 0
				&& callid[n] == '-')
			return i;
	}
	return -1;
}

/* A message of subscription `i`'s dialog that did not come from its
 * notifier's verified TLS peer: counted, and logged (and kept for
 * loadctl.subscriptions) at most once a second for this subscription,
 * whichever processes refuse them. */
static void lc_sub_refused(
		int i, sip_msg_t *msg, const char *what, const char *why)
{
	lc_sub_status_t *st = &_lc_sub_sh->st[i];
	unsigned long long now = lc_now_ns(), last, n;
	char line[sizeof(st->last_unauthenticated)];

	n = __sync_add_and_fetch(&st->unauthenticated, 1ull);
	last = st->unauthenticated_logged_ns;
	if(now - last < 1000000000ull
			|| !__sync_bool_compare_and_swap(
					&st->unauthenticated_logged_ns, last, now))
		return;
	snprintf(line, sizeof(line), "%s from %s:%d refused: %s", what,
			ip_addr2a(&msg->rcv.src_ip), (int)msg->rcv.src_port, why);
	LM_WARN("subscription to %s: %s; its notifier is heard only over TLS "
			"from a peer whose verified certificate names %s (%llu refused, "
			"logged at most once a second)\n",
			_lc_subs[i].notifier, line, _lc_subs[i].tls_name, n);
	lock_get(&_lc_sub_sh->lock);
	memcpy(st->last_unauthenticated, line, sizeof(line));
	lock_release(&_lc_sub_sh->lock);
}

/* tm: the final response to a SUBSCRIBE (in whichever process read it, or
 * tm's timer for a local 408). */
static void lc_sub_tm_cb(struct cell *t, int type, struct tmcb_params *ps)
{
	char why[512];
	int i;

	/* a response from anyone but the notifier's verified TLS peer is
	 * dropped: the subscriber's own transaction timeout then retries */
	if(ps && ps->param && ps->rpl && ps->rpl != FAKED_REPLY) {
		i = (int)((uintptr_t)*ps->param >> 32);
		if(i >= 0 && i < _lc_sub_n && _lc_subs[i].tls
				&& !lc_tls_peer_is(
						ps->rpl, _lc_subs[i].tls_name, why, sizeof(why))) {
			lc_sub_refused(i, ps->rpl, "response to a SUBSCRIBE", why);
			return;
		}
	}
	lc_uac_response(&_lc_sub_owner, ps, "SUBSCRIBE");
}

int lc_sub_handle_notify(sip_msg_t *msg)
{
	lc_sub_rec_t *rec;
	char why[512];
	int i;

	if(msg->first_line.type != SIP_REQUEST
			|| msg->first_line.u.request.method_value != METHOD_NOTIFY) {
		LM_ERR("lc_handle_notify() on something else than a NOTIFY\n");
		return -1;
	}
	if(_lc_sub_n == 0 || !lc_owner_on(&_lc_sub_owner)) {
		lc_sl_reply(msg, 481, "Subscription does not exist");
		return -1;
	}
	/* RFC 7200 §7: a notifier that can be spoofed can throttle everything.
	 * A NOTIFY of no subscription goes on to be answered 481. */
	if(parse_headers(msg, HDR_CALLID_F, 0) == 0 && msg->callid) {
		i = lc_sub_match(msg->callid->body.s, (size_t)msg->callid->body.len);
		if(i >= 0 && _lc_subs[i].tls
				&& !lc_tls_peer_is(
						msg, _lc_subs[i].tls_name, why, sizeof(why))) {
			lc_sub_refused(i, msg, "NOTIFY", why);
			lc_sl_reply(msg, 403, "Forbidden");
			return -1;
		}
	}
	rec = (lc_sub_rec_t *)lc_rec_request(&_lc_sub_owner, LC_REC_NOTIFY, msg);
	if(rec && parse_headers(msg, HDR_CALLID_F, 0) == 0 && msg->callid) {
		int n = msg->callid->body.len < (int)sizeof(rec->callid) - 1
						? msg->callid->body.len
						: (int)sizeof(rec->callid) - 1;
		memcpy(rec->callid, msg->callid->body.s, n);
		rec->callid[n] = '\0';
	}
	/* the notifier retries a 503 */
	return lc_owner_hand_request(&_lc_sub_owner, msg, (lc_rec_t *)rec);
}

/* ---- the owner ---- */

static void lc_sub_status_set(int i, const char *state, const char *ev)
{
	lc_sub_status_t *st = &_lc_sub_sh->st[i];
	if(state)
		snprintf(st->state, sizeof(st->state), "%s", state);
	if(ev)
		/* cut to the field (a document's warnings can be long) */
		snprintf(st->last_event, sizeof(st->last_event), "%.*s",
				(int)sizeof(st->last_event) - 1, ev);
}

/* The notifier's merged policy (or its absence) into the store. */
static void lc_sub_sync_store(int i)
{
	lc_sub_t *s = &_lc_subs[i];
	static char *buf = NULL;
	static size_t cap = 0;
	char err[512];
	size_t w = 0;
	str src;
	lc_result r;
	int published = 0;

	src.s = s->notifier;
	src.len = strlen(s->notifier);
	r = lc_engine_source_policy(
			_lc_sub_engine, lc_cs(s->notifier), (uint8_t *)buf, cap, &w);
	if(r == LC_RESULT_BUFFER_TOO_SMALL) {
		if(buf)
			pkg_free(buf);
		cap = w + 1024;
		buf = (char *)pkg_malloc(cap);
		if(buf == NULL) {
			cap = 0;
			PKG_MEM_ERROR;
			return;
		}
		r = lc_engine_source_policy(
				_lc_sub_engine, lc_cs(s->notifier), (uint8_t *)buf, cap, &w);
	}
	/* the store has its own lock; the status lock is taken only to note the
	 * outcome (loadctl.subscriptions must not wait for a compile) */
	if(r == LC_RESULT_OK) {
		if(lc_store_publish_from(&src, &src, buf, w, err, sizeof(err)) < 0) {
			LM_ERR("subscription to %s: the merged policy was not stored: "
				   "%s\n",
					s->notifier, err);
			r = LC_RESULT_INVALID_POLICY;
		}
		published = (r == LC_RESULT_OK);
	} else if(r == LC_RESULT_UNKNOWN_SOURCE) {
		lc_store_withdraw(&src);
		published = 0;
		r = LC_RESULT_OK;
	} else {
		LM_ERR("subscription to %s: cannot read its policy: %s\n", s->notifier,
				lc_result_text(r));
	}
	lock_get(&_lc_sub_sh->lock);
	if(r != LC_RESULT_OK)
		_lc_sub_sh->st[i].store_errors++;
	else
		_lc_sub_sh->st[i].published = published;
	lock_release(&_lc_sub_sh->lock);
}

/* Sends one SUBSCRIBE of the state machine through tm. */
static void lc_sub_send(int i, const lc_sip_message *m)
{
	lc_sub_t *s = &_lc_subs[i];
	str hdrs;
	char hbuf[1024];
	char who[LC_URI_MAX + 32];
	long long expires = m->expires >= 0 ? m->expires : lc_sub_expires;

	snprintf(s->call_id, sizeof(s->call_id), "%.*s", (int)m->call_id.len,
			(const char *)m->call_id.ptr);
	s->cseq = m->cseq;
	lock_get(&_lc_sub_sh->lock);
	_lc_sub_sh->st[i].subscribes++;
	snprintf(_lc_sub_sh->st[i].call_id, sizeof(_lc_sub_sh->st[i].call_id), "%s",
			s->call_id);
	if(expires == 0)
		lc_sub_status_set(i, "unsubscribing", NULL);
	else if(strcmp(_lc_sub_sh->st[i].state, "active") != 0)
		lc_sub_status_set(i, "subscribing", NULL);
	lock_release(&_lc_sub_sh->lock);

	hdrs.len = snprintf(hbuf, sizeof(hbuf),
			"Event: %.*s\r\nAccept: %.*s\r\nExpires: %lld\r\nContact: <%s>\r\n",
			(int)m->event.len, m->event.ptr ? (char *)m->event.ptr : "",
			(int)m->accept.len, m->accept.ptr ? (char *)m->accept.ptr : "",
			expires, s->contact);
	hdrs.s = hbuf;
	snprintf(who, sizeof(who), "subscription to %s", s->notifier);
	if(lc_uac_send(&_lc_sub_owner, "SUBSCRIBE", m, &hdrs, NULL,
			   ((uintptr_t)i << 32) | m->cseq, who)
			< 0) {
		/* as a 503: the state machine backs off and tries again */
		lc_sip_message resp;
		lc_uac_local_response(
				&resp, 503, LC_METHOD_SUBSCRIBE, m->call_id, m->cseq);
		lc_subscriber_handle_response(s->sub, lc_now_ns(), &resp);
	}
}

/* Sends what the machine queued, then takes its events. */
static void lc_sub_pump(int i)
{
	lc_sub_t *s = &_lc_subs[i];
	lc_sip_message m;
	lc_subscriber_event ev;
	struct timespec wall;
	char line[1024];
	int sync = 0;

	while(lc_subscriber_poll_transmit(s->sub, &m) == LC_RESULT_OK)
		lc_sub_send(i, &m);
	while(lc_subscriber_poll_event(s->sub, &ev) == LC_RESULT_OK) {
		lc_sub_status_t *st = &_lc_sub_sh->st[i];
		const char *state = NULL;

		lc_sub_event_line(&ev, line, sizeof(line));
		/* wall-clock time, to line the log up with the SIP peers' traces */
		clock_gettime(CLOCK_REALTIME, &wall);
		if(lc_sub_event_warns(ev.kind))
			LM_WARN("subscription to %s at %lld.%06ld: %s\n", s->notifier,
					(long long)wall.tv_sec, wall.tv_nsec / 1000, line);
		else
			LM_INFO("subscription to %s at %lld.%06ld: %s\n", s->notifier,
					(long long)wall.tv_sec, wall.tv_nsec / 1000, line);
		lock_get(&_lc_sub_sh->lock);
		switch(ev.kind) {
			case LC_SUBSCRIBER_EVENT_KIND_SUBSCRIBED:
				state = "active";
				st->expires = (unsigned int)ev.number;
				break;
			case LC_SUBSCRIBER_EVENT_KIND_PENDING:
				state = "pending";
				break;
			case LC_SUBSCRIBER_EVENT_KIND_POLICY_APPLIED:
				st->applied++;
				st->version = (long long)ev.number;
				sync = 1;
				break;
			case LC_SUBSCRIBER_EVENT_KIND_POLICY_WITHDRAWN:
				st->withdrawn++;
				st->version = -1;
				sync = 1;
				break;
			case LC_SUBSCRIBER_EVENT_KIND_DOCUMENT_IGNORED:
				st->ignored++;
				break;
			case LC_SUBSCRIBER_EVENT_KIND_INVALID_DOCUMENT:
				st->invalid++;
				break;
			case LC_SUBSCRIBER_EVENT_KIND_APPLY_FAILED:
				st->apply_failed++;
				break;
			case LC_SUBSCRIBER_EVENT_KIND_DOCUMENT_WARNINGS:
				st->warned++;
				break;
			case LC_SUBSCRIBER_EVENT_KIND_NOTHING_TO_UPDATE:
				st->bodyless++;
				break;
			case LC_SUBSCRIBER_EVENT_KIND_NOTIFY_REJECTED:
				st->rejected++;
				break;
			case LC_SUBSCRIBER_EVENT_KIND_RETRYING:
				state = "retrying";
				st->retries++;
				break;
			case LC_SUBSCRIBER_EVENT_KIND_LAPSED:
				state = "lapsed";
				break;
			case LC_SUBSCRIBER_EVENT_KIND_STOPPED:
				state = "stopped";
				break;
			default:
				break;
		}
		lc_sub_status_set(i, state, line);
		lock_release(&_lc_sub_sh->lock);
	}
	if(sync)
		lc_sub_sync_store(i);
	/* a machine that re-subscribes at once (a gap, 481, 423) queued it */
	while(lc_subscriber_poll_transmit(s->sub, &m) == LC_RESULT_OK)
		lc_sub_send(i, &m);
}

static int lc_sub_pick(const char *callid)
{
	int i = lc_sub_match(callid, strlen(callid));
	return i >= 0 ? i : 0; /* its machine answers 481 */
}

static void lc_sub_take(lc_rec_t *h, uint64_t now)
{
	static char out[LC_SUB_OUT_MAX];
	lc_sub_rec_t *rec = (lc_sub_rec_t *)h;
	size_t olen = 0;
	lc_result r;
	lc_sub_t *s;
	int i;

	switch(h->kind) {
		case LC_REC_NOTIFY:
			i = lc_sub_pick(rec->callid);
			s = &_lc_subs[i];
			lock_get(&_lc_sub_sh->lock);
			_lc_sub_sh->st[i].notifies++;
			lock_release(&_lc_sub_sh->lock);
			r = lc_subscriber_receive_wire(s->sub, now, (const uint8_t *)h->buf,
					h->len, &_lc_wire, (uint8_t *)out, sizeof(out), &olen);
			if(r != LC_RESULT_OK) {
				LM_WARN("subscription to %s: NOTIFY not taken: %s\n",
						s->notifier, lc_result_text(r));
			} else if(olen > 0) {
				if(msg_send(&h->dst, out, (int)olen) < 0)
					LM_ERR("subscription to %s: cannot send the NOTIFY's "
						   "answer\n",
							s->notifier);
			}
			lc_sub_pump(i);
			break;
		case LC_REC_RESPONSE:
			i = (int)(h->param >> 32);
			if(i < 0 || i >= _lc_sub_n)
				break;
			s = &_lc_subs[i];
			lock_get(&_lc_sub_sh->lock);
			_lc_sub_sh->st[i].responses++;
			_lc_sub_sh->st[i].last_status = h->status;
			lock_release(&_lc_sub_sh->lock);
			if(h->len > 0) {
				r = lc_subscriber_receive_wire(s->sub, now,
						(const uint8_t *)h->buf, h->len, &_lc_wire,
						(uint8_t *)out, sizeof(out), &olen);
				if(r != LC_RESULT_OK)
					LM_WARN("subscription to %s: response not taken: %s\n",
							s->notifier, lc_result_text(r));
			} else if((unsigned int)(h->param & 0xffffffffu) == s->cseq) {
				/* tm's own final answer (408 on timeout) */
				lc_sip_message resp;
				lc_uac_local_response(&resp,
						(uint16_t)(h->status >= 300 ? h->status : 408),
						LC_METHOD_SUBSCRIBE, lc_cs(s->call_id), s->cseq);
				lc_subscriber_handle_response(s->sub, now, &resp);
			}
			lc_sub_pump(i);
			break;
		case LC_REC_RESUBSCRIBE:
			for(i = 0; i < _lc_sub_n; i++) {
				if(rec->sub >= 0 && rec->sub != i)
					continue;
				r = lc_subscriber_resubscribe(_lc_subs[i].sub, now);
				if(r != LC_RESULT_OK)
					LM_ERR("subscription to %s: cannot resubscribe: %s\n",
							_lc_subs[i].notifier, lc_result_text(r));
				else
					LM_INFO("subscription to %s: new subscription (RPC)\n",
							_lc_subs[i].notifier);
				lc_sub_pump(i);
			}
			break;
	}
}

/* Kamailio stops: unsubscribe. */
static void lc_sub_stop(uint64_t now)
{
	int i;

	for(i = 0; i < _lc_sub_n; i++) {
		lc_subscriber_unsubscribe(_lc_subs[i].sub, now);
		lc_sub_pump(i);
	}
}

/* A URI of this Kamailio: `scheme`:loadctl@ its first listening socket of
 * `proto` (of any when PROTO_NONE), then `params`. 0, or -1 when it has
 * none. */
static int lc_sub_own_uri(char *out, size_t n, const char *scheme, int proto,
		const char *params)
{
	struct socket_info *si;
	struct socket_info **list;

	if(proto == PROTO_NONE) {
		si = get_first_socket();
	} else {
		list = get_sock_info_list(proto);
		si = list ? *list : NULL;
	}
	if(si == NULL)
		return -1;
	snprintf(out, n, "%s:loadctl@%s%.*s%s:%d%s", scheme,
			si->address.af == AF_INET6 ? "[" : "", si->address_str.len,
			si->address_str.s, si->address.af == AF_INET6 ? "]" : "",
			si->port_no, params);
	return 0;
}

static int lc_sub_owner_init(void)
{
	lc_subscriber_config c;
	lc_result r;
	uint64_t now = lc_now_ns();
	int i;

	_lc_sub_engine = lc_private_engine_new();
	if(_lc_sub_engine == NULL)
		return -1;
	if(lc_owner_wire(&_lc_wire, _lc_sent_by, sizeof(_lc_sent_by)) < 0) {
		LM_ERR("no listening socket for the subscriber's Contact\n");
		return -1;
	}
	if(lc_sub_contact && *lc_sub_contact)
		snprintf(_lc_contact, sizeof(_lc_contact), "%s", lc_sub_contact);
	else
		snprintf(_lc_contact, sizeof(_lc_contact), "sip:loadctl@%s",
				_lc_sent_by);
	lock_get(&_lc_sub_sh->lock);
	snprintf(_lc_sub_sh->contact, LC_URI_MAX, "%s", _lc_contact);
	lock_release(&_lc_sub_sh->lock);
	_lc_wire.contact = lc_cs(_lc_contact);
	for(i = 0; i < _lc_sub_n; i++) {
		lc_sub_t *s = &_lc_subs[i];
		/* RFC 3261 §8.1.1.8: a SIPS Request-URI wants a SIPS Contact (a
		 * notifier that opens a connection of its own then opens a TLS one);
		 * a notifier reached over TCP gets a Contact on TCP, so that the
		 * NOTIFYs it sends on a connection of its own take TCP too (a
		 * Contact without transport is UDP, RFC 3263 §4.1, which the link
		 * to it may not carry). */
		snprintf(s->contact, sizeof(s->contact), "%s", _lc_contact);
		if(!(lc_sub_contact && *lc_sub_contact) && (s->tls || s->tcp))
			lc_sub_own_uri(s->contact, sizeof(s->contact),
					s->tls ? "sips" : "sip", s->tls ? PROTO_TLS : PROTO_TCP,
					s->tls ? "" : ";transport=tcp"); /* mod_init checked */
		snprintf(s->from, sizeof(s->from), "%s",
				lc_sub_from && *lc_sub_from ? lc_sub_from : s->contact);
		lock_get(&_lc_sub_sh->lock);
		snprintf(_lc_sub_sh->st[i].contact, LC_URI_MAX, "%s", s->contact);
		lock_release(&_lc_sub_sh->lock);
		memset(&c, 0, sizeof(c));
		c.notifier = lc_cs(s->notifier);
		c.subscriber = lc_cs(s->from);
		c.call_id = lc_cs(s->stem);
		c.tag = lc_cs(s->tag);
		c.expires = (uint32_t)lc_sub_expires;
		c.scope_to_notifier = false;
		r = lc_subscriber_new(_lc_sub_engine, &c, now, &s->sub);
		if(r != LC_RESULT_OK) {
			LM_ERR("cannot subscribe to %s: %s\n", s->notifier,
					lc_result_text(r));
			return -1;
		}
		if(s->tls)
			LM_INFO("subscribing to %s as %s (Contact %s) over TLS: its "
					"verified certificate must name %s\n",
					s->notifier, s->from, s->contact, s->tls_name);
		else
			LM_INFO("subscribing to %s as %s (Contact %s)\n", s->notifier,
					s->from, s->contact);
	}
	for(i = 0; i < _lc_sub_n; i++)
		lc_sub_pump(i);
	return 0;
}

/* Runs the machines' due timers; the next one (at the latest in 1 s). */
static uint64_t lc_sub_tick(uint64_t now)
{
	uint64_t due, next = now + 1000000000ull;
	int i;

	for(i = 0; i < _lc_sub_n; i++) {
		if(lc_subscriber_poll_timeout(_lc_subs[i].sub, &due) != LC_RESULT_OK)
			continue;
		if(due <= now) {
			lc_subscriber_handle_timeout(_lc_subs[i].sub, now);
			lc_sub_pump(i);
			if(lc_subscriber_poll_timeout(_lc_subs[i].sub, &due)
					!= LC_RESULT_OK)
				continue;
		}
		if(due < next)
			next = due;
	}
	return next;
}

/* Whether the core has TCP (TLS) switched off (disable_tcp, enable_tls). The
 * core refuses a -l of a protocol switched off, but a listen= line read before
 * the switch stays in the socket list unopened. */
static int lc_sub_tcp_off(void)
{
#ifdef USE_TCP
	return tcp_disable;
#else
	return 1;
#endif
}

static int lc_sub_tls_off(void)
{
#ifdef USE_TLS
	return tcp_disable || tls_disable;
#else
	return 1;
#endif
}

/* mod_init: what every process knows of each subscription (its Call-ID
 * stem, whether it is over TLS, the name its notifier's certificate must
 * carry). 0, or -1 (logged). */
static int lc_sub_setup(void)
{
	uint64_t now = lc_now_ns();
	char uri[LC_URI_MAX], name[256];
	int i, k, tls = 0;

	for(i = 0; i < _lc_sub_n; i++) {
		lc_sub_t *s = &_lc_subs[i];
		snprintf(s->notifier, sizeof(s->notifier), "%s", _lc_sub_uris[i]);
		snprintf(s->stem, sizeof(s->stem), "lc%d-%x-%llx", i,
				(unsigned)getpid(),
				(unsigned long long)(now ^ ((uint64_t)i << 40)));
		snprintf(s->tag, sizeof(s->tag), "%llx%d",
				(unsigned long long)(now ^ (uint64_t)getpid()), i);
		s->tls = lc_tls_uri_wants(s->notifier);
		s->tcp = !s->tls && lc_uri_transport_is(s->notifier, "tcp");
		tls |= s->tls;
		if(s->tls
				&& lc_tls_uri_host(s->notifier, s->tls_name, sizeof(s->tls_name))
						   < 0) {
			LM_ERR("subscribe %s: no host in the URI\n", s->notifier);
			return -1;
		}
	}
	for(k = 0; k < _lc_sub_names_n; k++) {
		if(sscanf(_lc_sub_names[k], "%255s %255s", uri, name) != 2) {
			LM_ERR("subscribe_tls_name \"%s\": \"NOTIFIER-URI NAME\" "
				   "expected\n",
					_lc_sub_names[k]);
			return -1;
		}
		for(i = 0; i < _lc_sub_n; i++)
			if(strcasecmp(_lc_subs[i].notifier, uri) == 0)
				break;
		if(i == _lc_sub_n) {
			LM_ERR("subscribe_tls_name \"%s\": %s is no subscribe "
				   "parameter\n",
					_lc_sub_names[k], uri);
			return -1;
		}
		if(!_lc_subs[i].tls) {
			LM_ERR("subscribe_tls_name \"%s\": %s is not reached over TLS "
				   "(a sips: URI, or ;transport=tls)\n",
					_lc_sub_names[k], uri);
			return -1;
		}
		snprintf(_lc_subs[i].tls_name, sizeof(_lc_subs[i].tls_name), "%s",
				name);
	}
	for(i = 0; i < _lc_sub_n; i++) {
		if(_lc_subs[i].tcp
				&& (lc_sub_tcp_off()
						|| lc_sub_own_uri(uri, sizeof(uri), "sip", PROTO_TCP, "")
								   < 0)) {
			LM_ERR("subscribe %s: a subscription over TCP needs a TCP "
				   "listening socket (disable_tcp=no, "
				   "listen=tcp:ADDRESS:PORT): tm sends the SUBSCRIBEs from "
				   "it and its Contact names it\n",
					_lc_subs[i].notifier);
			return -1;
		}
		if(_lc_subs[i].tls && !lc_tls_name_ok(_lc_subs[i].tls_name)) {
			LM_ERR("subscribe %s: \"%s\" is neither a DNS name nor an IP "
				   "address (a wildcard never names a notifier, RFC 5922 "
				   "§7.2): give subscribe_tls_name\n",
					_lc_subs[i].notifier, _lc_subs[i].tls_name);
			return -1;
		}
	}
	if(!tls)
		return 0;
	if(lc_tls_init() < 0)
		return -1;
	if(lc_sub_tls_off()
			|| lc_sub_own_uri(uri, sizeof(uri), "sips", PROTO_TLS, "") < 0) {
		LM_ERR("a subscription over TLS needs a TLS listening socket "
			   "(enable_tls=yes, listen=tls:ADDRESS:PORT): tm sends the "
			   "SUBSCRIBEs from it\n");
		return -1;
	}
	return 0;
}

int lc_sub_mod_init(struct tm_binds *tmb, int tm_loaded)
{
	if(_lc_sub_n == 0)
		return 0;
	if(!tm_loaded) {
		LM_ERR("the subscribe parameter needs the tm module (SUBSCRIBEs are "
			   "sent through it)\n");
		return -1;
	}
	if(lc_sub_expires <= 0) {
		LM_ERR("subscribe_expires must be > 0\n");
		return -1;
	}
	_lc_sub_sh = (lc_sub_shared_t *)shm_malloc(sizeof(lc_sub_shared_t));
	if(_lc_sub_sh == NULL) {
		SHM_MEM_ERROR;
		return -1;
	}
	memset(_lc_sub_sh, 0, sizeof(lc_sub_shared_t));
	if(lock_init(&_lc_sub_sh->lock) == NULL)
		return -1;
	if(lc_sub_setup() < 0)
		return -1;
	for(int i = 0; i < _lc_sub_n; i++) {
		snprintf(_lc_sub_sh->st[i].notifier, LC_URI_MAX, "%s", _lc_sub_uris[i]);
		snprintf(_lc_sub_sh->st[i].state, 32, "starting");
		_lc_sub_sh->st[i].version = -1;
	}
	return lc_owner_mod_init(&_lc_sub_owner, tmb);
}

int lc_sub_child_init(int rank)
{
	return lc_owner_child_init(&_lc_sub_owner, rank);
}

void lc_sub_rpc_resubscribe(rpc_t *rpc, void *ctx)
{
	str uri = STR_NULL;
	lc_sub_rec_t *rec;
	int i, which = -1;

	if(_lc_sub_n == 0 || _lc_sub_sh == NULL
			|| lc_owner_pid(&_lc_sub_owner) <= 0) {
		rpc->fault(ctx, 404, "no subscribe parameter (no subscriber)");
		return;
	}
	if(rpc->scan(ctx, "*S", &uri) == 1 && uri.len > 0) {
		for(i = 0; i < _lc_sub_n; i++) {
			if((int)strlen(_lc_sub_uris[i]) == uri.len
					&& strncasecmp(_lc_sub_uris[i], uri.s, uri.len) == 0)
				which = i;
		}
		if(which < 0) {
			rpc->fault(ctx, 404, "no subscribe parameter %.*s", uri.len, uri.s);
			return;
		}
	}
	rec = (lc_sub_rec_t *)lc_rec_new(
			&_lc_sub_owner, LC_REC_RESUBSCRIBE, NULL, 0);
	if(rec == NULL) {
		rpc->fault(ctx, 500, "out of shared memory");
		return;
	}
	rec->sub = which;
	if(lc_owner_hand(&_lc_sub_owner, &rec->h) < 0) {
		rpc->fault(ctx, 503, "the subscriber process is behind, try again");
		return;
	}
	rpc->rpl_printf(ctx, "ok: new subscription to %s",
			which < 0 ? "every notifier" : _lc_sub_uris[which]);
}

unsigned long long lc_sub_total(lc_sub_counter_t c)
{
	unsigned long long sum = 0;
	int i;

	for(i = 0; _lc_sub_sh && i < _lc_sub_n; i++) {
		lc_sub_status_t *st = &_lc_sub_sh->st[i];
		lock_get(&_lc_sub_sh->lock);
		switch(c) {
			case LC_SUB_NOTIFIES:
				sum += st->notifies;
				break;
			case LC_SUB_APPLIED:
				sum += st->applied;
				break;
			case LC_SUB_INVALID:
				sum += st->invalid;
				break;
			case LC_SUB_WITHDRAWN:
				sum += st->withdrawn;
				break;
			case LC_SUB_SUBSCRIBES:
				sum += st->subscribes;
				break;
			case LC_SUB_RETRIES:
				sum += st->retries;
				break;
			case LC_SUB_UNAUTHENTICATED:
				sum += st->unauthenticated;
				break;
		}
		lock_release(&_lc_sub_sh->lock);
	}
	return sum;
}

/* ---- RPC ---- */

void lc_sub_rpc_list(rpc_t *rpc, void *ctx)
{
	void *top, *arr, *st;
	lc_sub_status_t copy;
	char contact[LC_URI_MAX];
	int i;

	if(rpc->add(ctx, "{", &top) < 0)
		return;
	contact[0] = '\0';
	if(_lc_sub_sh) {
		lock_get(&_lc_sub_sh->lock);
		memcpy(contact, _lc_sub_sh->contact, LC_URI_MAX);
		lock_release(&_lc_sub_sh->lock);
	}
	rpc->struct_add(top, "dsdJJ", "subscriber_pid",
			lc_owner_pid(&_lc_sub_owner), "contact", contact, "expires",
			lc_sub_expires, "handed", lc_owner_handed(&_lc_sub_owner),
			"channel_full", lc_owner_channel_full(&_lc_sub_owner));
	if(rpc->struct_add(top, "[", "subscriptions", &arr) < 0)
		return;
	for(i = 0; _lc_sub_sh && i < _lc_sub_n; i++) {
		lock_get(&_lc_sub_sh->lock);
		copy = _lc_sub_sh->st[i];
		lock_release(&_lc_sub_sh->lock);
		if(rpc->array_add(arr, "{", &st) < 0)
			return;
		rpc->struct_add(st, "sssslddd", "notifier", copy.notifier, "state",
				copy.state, "call_id", copy.call_id, "last_event",
				copy.last_event, "version", (long)copy.version, "last_status",
				copy.last_status, "expires", (int)copy.expires, "published",
				copy.published);
		rpc->struct_add(st, "ssJs", "contact", copy.contact, "tls_name",
				_lc_subs[i].tls ? _lc_subs[i].tls_name : "", "unauthenticated",
				copy.unauthenticated, "last_unauthenticated",
				copy.last_unauthenticated);
		rpc->struct_add(st, "JJJJJJJJJJJJJ", "subscribes", copy.subscribes,
				"responses", copy.responses, "notifies", copy.notifies,
				"applied", copy.applied, "withdrawn", copy.withdrawn, "ignored",
				copy.ignored, "invalid", copy.invalid, "apply_failed",
				copy.apply_failed, "rejected", copy.rejected, "retries",
				copy.retries, "store_errors", copy.store_errors, "bodyless",
				copy.bodyless, "warned", copy.warned);
	}
}
