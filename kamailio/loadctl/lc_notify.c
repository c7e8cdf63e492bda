/*
 * loadctl module - the RFC 7200 notifier
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: RFC 7200 notifier (see lc_notify.h for the design)
 *
 * Who does what:
 * - SIP worker, lc_handle_subscribe(): copies the SUBSCRIBE (bytes, where it
 *   came from, Call-ID + CSeq + branch) into shm and hands the pointer to the
 *   owner through the channel.
 * - SIP worker, lc_observe(): adds one to the subscriber's slot
 *   (lc_demand.c).
 * - any process, tm's TMCB_LOCAL_COMPLETED callback: copies the final
 *   response to a NOTIFY into shm and hands it over.
 * - the owner: the only caller of lc_notifier_*. It answers each SUBSCRIBE
 *   (lc_notifier_receive_wire) with msg_send to where it came from and keeps
 *   the answer 32 s, so a retransmission (same Call-ID, CSeq and branch) gets
 *   it again instead of starting a second subscription; sends the NOTIFYs the
 *   notifier queues through tm; every 100 ms feeds the slots' new counts to
 *   lc_notifier_observe; writes a status copy for loadctl.notifier.
 * - the main process, on shutdown: asks the owner to end every subscription
 *   (its terminated NOTIFYs go out through tm) and waits up to 1 s.
 */

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../../core/sr_module.h"
#include "../../core/dprint.h"
#include "../../core/locking.h"
#include "../../core/mem/mem.h"
#include "../../core/mem/shm_mem.h"
#include "../../core/forward.h"
#include "../../core/parser/msg_parser.h"
#include "../../core/parser/parse_cseq.h"

#include "lc_shared.h"
#include "lc_owner.h"
#include "lc_uac.h"
#include "lc_demand.h"
#include "lc_mod.h"
#include "lc_notify.h"

#define LC_NTF_URI_MAX 256
#define LC_NTF_OUT_MAX 16384
#define LC_NTF_KEY_MAX 320
#define LC_NTF_CACHE 64
/* How long a SUBSCRIBE's answer is kept for its retransmissions: 64·T1. */
#define LC_NTF_CACHE_NS (32ull * 1000000000ull)
/* How often the owner reads the observation slots. */
#define LC_NTF_SWEEP_NS 100000000ull

char *lc_ntf_uri = NULL;
char *lc_ntf_allow = NULL;
char *lc_ntf_policy_file = NULL;
char *lc_ntf_capacity_file = NULL;
int lc_ntf_max_expires = 3600;
int lc_ntf_min_expires = 60;

enum
{
	LC_NTF_SUBSCRIBE = LC_REC_ROLE,
	LC_NTF_POLICY,
	LC_NTF_CAPACITY
};

/* NOTIFY transactions in flight, by the index tm hands back to its callback
 * (written by the owner before t_uac; at most one per subscription is
 * outstanding, so the ring never catches up with a live entry). */
#define LC_NTF_TXNS 256

typedef struct lc_ntf_txn
{
	unsigned int seq; /* which use of the entry (checked on a timeout) */
	unsigned int cseq;
	char callid[128];
	char from[LC_NTF_URI_MAX];
	char to[LC_NTF_URI_MAX];
} lc_ntf_txn_t;

/* One message for the owner (shm; the owner frees it). A response to a
 * NOTIFY carries its lc_ntf_txn_t (index, use) as its param. */
typedef struct lc_ntf_rec
{
	lc_rec_t h;
	char key[LC_NTF_KEY_MAX]; /* SUBSCRIBE: Call-ID, CSeq, branch */
} lc_ntf_rec_t;

typedef struct lc_ntf_shared
{
	gen_lock_t lock;
	char mode[16];
	lc_ntf_txn_t txn[LC_NTF_TXNS];
	unsigned long long subscribes, retransmissions, refused, notifies,
			responses, send_errors;
} lc_ntf_shared_t;

static lc_ntf_shared_t *_lc_ntf_sh = NULL;

static int lc_ntf_owner_init(void);
static uint64_t lc_ntf_tick(uint64_t now);
static void lc_ntf_take(lc_rec_t *rec, uint64_t now);
static void lc_ntf_stop(uint64_t now);
static void lc_ntf_tm_cb(struct cell *t, int type, struct tmcb_params *ps);

static lc_owner_t _lc_ntf_owner = {
		.role = "notifier",
		.rec_size = sizeof(lc_ntf_rec_t),
		.init = lc_ntf_owner_init,
		.tick = lc_ntf_tick,
		.take = lc_ntf_take,
		.stop = lc_ntf_stop,
		.tm_cb = lc_ntf_tm_cb,
};
/* Read in mod_init (pkg memory, inherited by the owner). */
static char *_lc_ntf_policy = NULL;
static size_t _lc_ntf_policy_len = 0;
static char *_lc_ntf_capacity = NULL;
static size_t _lc_ntf_capacity_len = 0;

/* The owner's private state. */
typedef struct lc_ntf_cached
{
	char key[LC_NTF_KEY_MAX];
	uint64_t at;
	struct dest_info dst;
	char *out; /* pkg */
	size_t len;
} lc_ntf_cached_t;

static lc_notifier *_lc_n = NULL;
static lc_sip_wire _lc_ntf_wire;
static char _lc_ntf_sent_by[128];
static lc_ntf_cached_t _lc_ntf_cache[LC_NTF_CACHE];
static int _lc_ntf_cache_next = 0;
static int _lc_ntf_txn_next = 0;
static unsigned int _lc_ntf_txn_seq = 0;
/* When the owner next reads the observation slots. */
static uint64_t _lc_ntf_sweep_at = 0;

int lc_ntf_enabled(void)
{
	return lc_ntf_uri != NULL && *lc_ntf_uri != '\0';
}

/* A notifier with this module's settings (for the owner, and to validate
 * documents in mod_init and RPC). */
static lc_notifier *lc_ntf_new(void)
{
	lc_notifier_config c;
	lc_notifier *n = NULL;
	lc_result r;

	memset(&c, 0, sizeof(c));
	c.uri = lc_cs(lc_ntf_uri);
	c.tag = lc_cs("lcn");
	if(strcmp(lc_ntf_allow, "*") != 0)
		c.authorized = lc_cs(lc_ntf_allow);
	c.max_expires = (uint32_t)lc_ntf_max_expires;
	c.min_expires = (uint32_t)lc_ntf_min_expires;
	if(lc_ntf_max_expires < 3600)
		c.default_expires = (uint32_t)lc_ntf_max_expires;
	r = lc_notifier_new(&c, &n);
	if(r != LC_RESULT_OK) {
		char detail[512];
		size_t w = 0;
		detail[0] = '\0';
		if(lc_last_error((uint8_t *)detail, sizeof(detail) - 1, &w)
				== LC_RESULT_OK)
			detail[w] = '\0';
		LM_ERR("notifier_uri %s / notifier_allow \"%s\" / "
			   "notifier_min_expires %d / notifier_max_expires %d refused: %s: "
			   "%s\n",
				lc_ntf_uri, lc_ntf_allow, lc_ntf_min_expires, lc_ntf_max_expires,
				lc_result_text(r), detail);
		return NULL;
	}
	return n;
}

/* Applies a policy (`capacity` 0) or a capacity template to `n`; the
 * library's detail in `err`. */
static lc_result lc_ntf_apply(lc_notifier *n, int capacity, const char *body,
		size_t len, char *err, size_t errlen)
{
	lc_result r;
	size_t w = 0;

	if(capacity)
		r = lc_notifier_set_capacity(
				n, lc_now_ns(), (const uint8_t *)body, len, NULL);
	else
		r = lc_notifier_set_policy(n, lc_now_ns(), (const uint8_t *)body, len);
	err[0] = '\0';
	if(r != LC_RESULT_OK
			&& lc_last_error((uint8_t *)err, errlen - 1, &w) == LC_RESULT_OK)
		err[w] = '\0';
	return r;
}

/* ---- any process: to the owner ---- */

/* tm: the final response to a NOTIFY, or tm's own (a timeout: the NOTIFY
 * got no answer within fr_timer), which ends the subscription. */
static void lc_ntf_tm_cb(struct cell *t, int type, struct tmcb_params *ps)
{
	lc_uac_response(&_lc_ntf_owner, ps, "NOTIFY");
}

int lc_ntf_handle_subscribe(sip_msg_t *msg)
{
	lc_ntf_rec_t *rec;
	struct cseq_body *cseq;
	int n;

	if(msg->first_line.type != SIP_REQUEST
			|| msg->first_line.u.request.method_value != METHOD_SUBSCRIBE) {
		LM_ERR("lc_handle_subscribe() on something else than a SUBSCRIBE\n");
		return -1;
	}
	if(!lc_ntf_enabled() || !lc_owner_on(&_lc_ntf_owner)) {
		/* RFC 6665 §4.2.1.1: "If not [understood], the notifier SHOULD
		 * return a 489 (Bad Event) response" (the package is not served) */
		static int warned = 0;
		if(!warned) {
			LM_WARN("lc_handle_subscribe(): the notifier role is off (no "
					"notifier_uri): SUBSCRIBEs are answered 489\n");
			warned = 1;
		}
		lc_sl_reply(msg, 489, "Bad Event");
		return -1;
	}
	if(parse_headers(msg, HDR_CALLID_F | HDR_CSEQ_F | HDR_VIA1_F, 0) < 0
			|| msg->callid == NULL || msg->cseq == NULL || msg->via1 == NULL) {
		lc_sl_reply(msg, 400, "Bad Request");
		return -1;
	}
	rec = (lc_ntf_rec_t *)lc_rec_request(&_lc_ntf_owner, LC_NTF_SUBSCRIBE, msg);
	if(rec) {
		cseq = get_cseq(msg);
		n = snprintf(rec->key, sizeof(rec->key), "%.*s %.*s %.*s",
				msg->callid->body.len, msg->callid->body.s, cseq->number.len,
				cseq->number.s,
				msg->via1->branch ? msg->via1->branch->value.len : 0,
				msg->via1->branch ? msg->via1->branch->value.s : "");
		if(n < 0 || n >= (int)sizeof(rec->key))
			rec->key[0] = '\0'; /* too long to recognise: never absorbed */
	}
	/* the subscriber retries a 503 */
	return lc_owner_hand_request(&_lc_ntf_owner, msg, (lc_rec_t *)rec);
}

/* ---- the owner ---- */

/* A final response to a NOTIFY that never left: the notifier ends that
 * subscription (as RFC 6665 §4.2.2 says of an error response). */
static void lc_ntf_failed(const lc_sip_message *m)
{
	lc_sip_message resp;
	lc_uac_local_response(&resp, 408, LC_METHOD_NOTIFY, m->call_id, m->cseq);
	resp.from_uri = m->from_uri;
	resp.from_tag = m->from_tag;
	resp.to_uri = m->to_uri;
	resp.to_tag = m->to_tag;
	lc_notifier_handle_response(_lc_n, lc_now_ns(), &resp);
}

/* Sends one NOTIFY of the notifier through tm, inside its dialog. */
static int lc_ntf_send(const lc_sip_message *m)
{
	str hdrs, body;
	char hbuf[1024];
	lc_ntf_txn_t *x;
	int k;

	body.s = (char *)m->body.ptr;
	body.len = (int)m->body.len;
	hdrs.len = snprintf(hbuf, sizeof(hbuf),
			"Event: %.*s\r\nSubscription-State: %.*s\r\nContact: <%s>\r\n"
			"%s%.*s%s",
			(int)m->event.len, m->event.ptr ? (char *)m->event.ptr : "",
			(int)m->subscription_state.len,
			m->subscription_state.ptr ? (char *)m->subscription_state.ptr : "",
			lc_ntf_uri, m->content_type.ptr ? "Content-Type: " : "",
			(int)m->content_type.len,
			m->content_type.ptr ? (char *)m->content_type.ptr : "",
			m->content_type.ptr ? "\r\n" : "");
	if(hdrs.len <= 0 || hdrs.len >= (int)sizeof(hbuf))
		goto failed;
	hdrs.s = hbuf;
	/* what a timeout needs to be reported as the NOTIFY's answer */
	k = _lc_ntf_txn_next;
	_lc_ntf_txn_next = (k + 1) % LC_NTF_TXNS;
	x = &_lc_ntf_sh->txn[k];
	x->seq = ++_lc_ntf_txn_seq;
	x->cseq = m->cseq;
	snprintf(x->callid, sizeof(x->callid), "%.*s", (int)m->call_id.len,
			(const char *)m->call_id.ptr);
	snprintf(x->from, sizeof(x->from), "%.*s", (int)m->from_uri.len,
			(const char *)m->from_uri.ptr);
	snprintf(x->to, sizeof(x->to), "%.*s", (int)m->to_uri.len,
			(const char *)m->to_uri.ptr);
	/* the parameter: the entry's index (8 bits) and its use (the rest) */
	if(lc_uac_send(&_lc_ntf_owner, "NOTIFY", m, &hdrs, &body,
			   ((uintptr_t)x->seq << 8) | (uintptr_t)k, "notifier")
			< 0)
		goto failed;
	__sync_fetch_and_add(&_lc_ntf_sh->notifies, 1ull);
	return 0;
failed:
	__sync_fetch_and_add(&_lc_ntf_sh->send_errors, 1ull);
	LM_ERR("cannot send the NOTIFY to %.*s (Call-ID %.*s)\n",
			(int)m->to_uri.len, (const char *)m->to_uri.ptr,
			(int)m->call_id.len, (const char *)m->call_id.ptr);
	return -1;
}

/* Sends what the notifier queued and takes its events; `dst`: where the
 * SUBSCRIBE being handled came from (the subscriber's address). */
static void lc_ntf_pump(struct dest_info *dst)
{
	lc_sip_message m;
	lc_notifier_event ev;
	int round;
	const char *sp;

	for(round = 0; round < 8; round++) {
		int any = 0;
		while(lc_notifier_poll_transmit(_lc_n, &m) == LC_RESULT_OK) {
			any = 1;
			if(lc_ntf_send(&m) < 0)
				lc_ntf_failed(&m); /* may queue more */
		}
		if(!any)
			break;
	}
	while(lc_notifier_poll_event(_lc_n, &ev) == LC_RESULT_OK) {
		const char *t = (const char *)ev.text.ptr;
		int tl = (int)ev.text.len;
		switch(ev.kind) {
			case LC_NOTIFIER_EVENT_KIND_SUBSCRIBED:
				LM_INFO("notifier: %.*s subscribed for %llu s\n", tl, t,
						(unsigned long long)ev.number);
				lc_demand_subscription(t, (size_t)tl, dst, 1);
				break;
			case LC_NOTIFIER_EVENT_KIND_REFRESHED:
				lc_demand_subscription(t, (size_t)tl, dst, 0);
				break;
			case LC_NOTIFIER_EVENT_KIND_REFUSED:
				__sync_fetch_and_add(&_lc_ntf_sh->refused, 1ull);
				LM_NOTICE("notifier: SUBSCRIBE refused with %llu: %.*s\n",
						(unsigned long long)ev.number, tl, t);
				break;
			case LC_NOTIFIER_EVENT_KIND_ENDED:
				/* "URI reason" */
				LM_INFO("notifier: subscription ended: %.*s\n", tl, t);
				sp = memchr(t, ' ', (size_t)tl);
				lc_demand_subscription(
						t, sp ? (size_t)(sp - t) : (size_t)tl, NULL, -1);
				break;
			default:
				break;
		}
	}
	lc_demand_shares(_lc_n);
}

static void lc_ntf_take_subscribe(lc_ntf_rec_t *rec, uint64_t now)
{
	static char out[LC_NTF_OUT_MAX];
	size_t olen = 0;
	lc_result r;
	int i;
	lc_ntf_cached_t *c;

	if(rec->key[0]) {
		for(i = 0; i < LC_NTF_CACHE; i++) {
			c = &_lc_ntf_cache[i];
			if(c->out && now - c->at < LC_NTF_CACHE_NS
					&& strcmp(c->key, rec->key) == 0) {
				__sync_fetch_and_add(&_lc_ntf_sh->retransmissions, 1ull);
				if(msg_send(&rec->h.dst, c->out, (int)c->len) < 0)
					LM_ERR("notifier: cannot answer a retransmitted "
						   "SUBSCRIBE\n");
				return;
			}
		}
	}
	__sync_fetch_and_add(&_lc_ntf_sh->subscribes, 1ull);
	r = lc_notifier_receive_wire(_lc_n, now, (const uint8_t *)rec->h.buf,
			rec->h.len, &_lc_ntf_wire, (uint8_t *)out, sizeof(out), &olen);
	if(r != LC_RESULT_OK) {
		LM_WARN("notifier: SUBSCRIBE not taken: %s\n", lc_result_text(r));
		return;
	}
	if(olen > 0) {
		if(msg_send(&rec->h.dst, out, (int)olen) < 0)
			LM_ERR("notifier: cannot answer the SUBSCRIBE\n");
		if(rec->key[0]) {
			c = &_lc_ntf_cache[_lc_ntf_cache_next];
			_lc_ntf_cache_next = (_lc_ntf_cache_next + 1) % LC_NTF_CACHE;
			if(c->out)
				pkg_free(c->out);
			c->out = (char *)pkg_malloc(olen);
			if(c->out) {
				memcpy(c->out, out, olen);
				c->len = olen;
				c->at = now;
				c->dst = rec->h.dst;
				snprintf(c->key, sizeof(c->key), "%s", rec->key);
			}
		}
	}
	lc_ntf_pump(&rec->h.dst);
}

static void lc_ntf_mode(int capacity)
{
	lock_get(&_lc_ntf_sh->lock);
	snprintf(_lc_ntf_sh->mode, sizeof(_lc_ntf_sh->mode), "%s",
			capacity ? "capacity" : "policy");
	lock_release(&_lc_ntf_sh->lock);
}

static void lc_ntf_take(lc_rec_t *h, uint64_t now)
{
	static char out[LC_NTF_OUT_MAX];
	char err[512];
	size_t olen = 0;
	lc_result r;

	switch(h->kind) {
		case LC_NTF_SUBSCRIBE:
			lc_ntf_take_subscribe((lc_ntf_rec_t *)h, now);
			break;
		case LC_REC_RESPONSE:
			if(h->len > 0) {
				__sync_fetch_and_add(&_lc_ntf_sh->responses, 1ull);
				r = lc_notifier_receive_wire(_lc_n, now,
						(const uint8_t *)h->buf, h->len, &_lc_ntf_wire,
						(uint8_t *)out, sizeof(out), &olen);
				if(r != LC_RESULT_OK)
					LM_WARN("notifier: NOTIFY response not taken: %s\n",
							lc_result_text(r));
			} else if(_lc_ntf_sh->txn[h->param & 0xff].seq
					  == (unsigned int)(h->param >> 8)) {
				/* tm's own (a timeout); an entry reused since: that NOTIFY's
				 * own timer ends it */
				lc_ntf_txn_t *x = &_lc_ntf_sh->txn[h->param & 0xff];
				lc_sip_message resp;
				lc_uac_local_response(&resp, 408, LC_METHOD_NOTIFY,
						lc_cs(x->callid), x->cseq);
				resp.from_uri = lc_cs(x->from);
				resp.to_uri = lc_cs(x->to);
				__sync_fetch_and_add(&_lc_ntf_sh->responses, 1ull);
				lc_notifier_handle_response(_lc_n, now, &resp);
			}
			lc_ntf_pump(NULL);
			break;
		case LC_NTF_POLICY:
		case LC_NTF_CAPACITY:
			/* a policy is set before the capacity is cleared, so no subscriber
			 * is ever sent "no rules" in between */
			r = lc_ntf_apply(_lc_n, h->kind == LC_NTF_CAPACITY, h->buf, h->len,
					err, sizeof(err));
			if(r != LC_RESULT_OK) {
				LM_ERR("notifier: document refused: %s: %s\n",
						lc_result_text(r), err);
			} else {
				if(h->kind == LC_NTF_POLICY)
					lc_notifier_clear_capacity(_lc_n, now);
				lc_ntf_mode(h->kind == LC_NTF_CAPACITY);
			}
			lc_ntf_pump(NULL);
			break;
	}
}

/* Kamailio stops: end every subscription for a restart. */
static void lc_ntf_stop(uint64_t now)
{
	lc_notifier_shutdown(_lc_n, now);
	lc_ntf_pump(NULL);
}

static int lc_ntf_owner_init(void)
{
	char err[512];

	_lc_n = lc_ntf_new();
	if(_lc_n == NULL)
		return -1;
	if(lc_owner_wire(&_lc_ntf_wire, _lc_ntf_sent_by, sizeof(_lc_ntf_sent_by))
			< 0) {
		LM_ERR("no listening socket for the notifier\n");
		return -1;
	}
	_lc_ntf_wire.contact = lc_cs(lc_ntf_uri);
	if(_lc_ntf_capacity) {
		if(lc_ntf_apply(_lc_n, 1, _lc_ntf_capacity, _lc_ntf_capacity_len, err,
				   sizeof(err))
				!= LC_RESULT_OK)
			return -1;
		lc_ntf_mode(1);
	} else if(_lc_ntf_policy) {
		if(lc_ntf_apply(_lc_n, 0, _lc_ntf_policy, _lc_ntf_policy_len, err,
				   sizeof(err))
				!= LC_RESULT_OK)
			return -1;
		lc_ntf_mode(0);
	}
	LM_INFO("notifier %s: answering SUBSCRIBEs (%s)\n", lc_ntf_uri,
			_lc_ntf_sh->mode);
	_lc_ntf_sweep_at = lc_now_ns() + LC_NTF_SWEEP_NS;
	return 0;
}

/* Reads the slots every 100 ms and runs the notifier's due timers; when
 * next to. */
static uint64_t lc_ntf_tick(uint64_t now)
{
	uint64_t due, next;

	if(now >= _lc_ntf_sweep_at) {
		lc_demand_feed(_lc_n, now);
		_lc_ntf_sweep_at = now + LC_NTF_SWEEP_NS;
	}
	if(lc_notifier_poll_timeout(_lc_n, &due) == LC_RESULT_OK && due <= now) {
		/* the counts so far belong to the period that ends now */
		lc_demand_feed(_lc_n, now);
		lc_notifier_handle_timeout(_lc_n, now);
		lc_ntf_pump(NULL);
	}
	next = _lc_ntf_sweep_at;
	if(lc_notifier_poll_timeout(_lc_n, &due) == LC_RESULT_OK && due < next)
		next = due;
	return next;
}

/* Reads and checks a document for the notifier (`capacity`: a template). */
static char *lc_ntf_read(const char *param, const char *path, int capacity,
		size_t *len)
{
	lc_notifier *probe;
	char err[512];
	char *body = lc_read_file(path, len);
	lc_result r;

	if(body == NULL)
		return NULL;
	probe = lc_ntf_new();
	if(probe == NULL) {
		pkg_free(body);
		return NULL;
	}
	r = lc_ntf_apply(probe, capacity, body, *len, err, sizeof(err));
	lc_notifier_free(probe);
	if(r != LC_RESULT_OK) {
		LM_ERR("%s %s refused: %s: %s\n", param, path, lc_result_text(r), err);
		pkg_free(body);
		return NULL;
	}
	return body;
}

int lc_ntf_mod_init(struct tm_binds *tmb, int tm_loaded)
{
	lc_notifier *probe;

	if(!lc_ntf_enabled())
		return 0;
	if(!tm_loaded) {
		LM_ERR("notifier_uri needs the tm module (NOTIFYs are sent through "
			   "it)\n");
		return -1;
	}
	if(lc_ntf_allow == NULL || *lc_ntf_allow == '\0') {
		LM_ERR("notifier_uri needs notifier_allow: who may subscribe (RFC "
			   "7200 §4.6; \"*\" for everyone, only where the SIP layer "
			   "authenticates)\n");
		return -1;
	}
	if(lc_ntf_min_expires < 1 || lc_ntf_max_expires < lc_ntf_min_expires) {
		LM_ERR("notifier_min_expires must be >= 1 and notifier_max_expires >= "
			   "it\n");
		return -1;
	}
	if(lc_ntf_policy_file && *lc_ntf_policy_file && lc_ntf_capacity_file
			&& *lc_ntf_capacity_file) {
		LM_ERR("notifier_policy_file and notifier_capacity_file exclude each "
			   "other\n");
		return -1;
	}
	probe = lc_ntf_new();
	if(probe == NULL)
		return -1;
	lc_notifier_free(probe);
	if(lc_ntf_policy_file && *lc_ntf_policy_file) {
		_lc_ntf_policy = lc_ntf_read("notifier_policy_file", lc_ntf_policy_file,
				0, &_lc_ntf_policy_len);
		if(_lc_ntf_policy == NULL)
			return -1;
	}
	if(lc_ntf_capacity_file && *lc_ntf_capacity_file) {
		_lc_ntf_capacity = lc_ntf_read("notifier_capacity_file",
				lc_ntf_capacity_file, 1, &_lc_ntf_capacity_len);
		if(_lc_ntf_capacity == NULL)
			return -1;
	}
	_lc_ntf_sh = (lc_ntf_shared_t *)shm_malloc(sizeof(lc_ntf_shared_t));
	if(_lc_ntf_sh == NULL) {
		SHM_MEM_ERROR;
		return -1;
	}
	memset(_lc_ntf_sh, 0, sizeof(lc_ntf_shared_t));
	if(lock_init(&_lc_ntf_sh->lock) == NULL)
		return -1;
	snprintf(_lc_ntf_sh->mode, sizeof(_lc_ntf_sh->mode), "none");
	if(lc_demand_init() < 0)
		return -1;
	return lc_owner_mod_init(&_lc_ntf_owner, tmb);
}

int lc_ntf_child_init(int rank)
{
	return lc_owner_child_init(&_lc_ntf_owner, rank);
}

/* ---- RPC ---- */

void lc_ntf_rpc_list(rpc_t *rpc, void *ctx)
{
	void *top, *arr;
	char mode[16];

	if(_lc_ntf_sh == NULL) {
		rpc->fault(ctx, 500, "the notifier role is off (notifier_uri)");
		return;
	}
	if(rpc->add(ctx, "{", &top) < 0)
		return;
	lock_get(&_lc_ntf_sh->lock);
	memcpy(mode, _lc_ntf_sh->mode, sizeof(mode));
	lock_release(&_lc_ntf_sh->lock);
	rpc->struct_add(top, "dss", "notifier_pid", lc_owner_pid(&_lc_ntf_owner),
			"uri", lc_ntf_uri, "mode", mode);
	rpc->struct_add(top, "JJJJJJJJ", "subscribes", _lc_ntf_sh->subscribes,
			"retransmissions", _lc_ntf_sh->retransmissions, "refused",
			_lc_ntf_sh->refused, "notifies", _lc_ntf_sh->notifies, "responses",
			_lc_ntf_sh->responses, "send_errors", _lc_ntf_sh->send_errors,
			"channel_full", lc_owner_channel_full(&_lc_ntf_owner),
			"unknown_observations", lc_demand_unknown());
	if(rpc->struct_add(top, "[", "subscribers", &arr) < 0)
		return;
	lc_demand_rpc(rpc, arr);
}


static void lc_ntf_rpc_doc(rpc_t *rpc, void *ctx, int capacity)
{
	str path;
	char cpath[1024];
	size_t len = 0;
	char *body;
	lc_rec_t *rec;

	if(_lc_ntf_sh == NULL || lc_owner_pid(&_lc_ntf_owner) <= 0) {
		rpc->fault(ctx, 500, "the notifier role is off (notifier_uri)");
		return;
	}
	if(rpc->scan(ctx, "S", &path) < 1) {
		rpc->fault(ctx, 400, "a file path is required");
		return;
	}
	if(path.len <= 0 || path.len >= (int)sizeof(cpath)) {
		rpc->fault(ctx, 400, "bad path");
		return;
	}
	memcpy(cpath, path.s, path.len);
	cpath[path.len] = '\0';
	body = lc_ntf_read(capacity ? "capacity template" : "policy", cpath,
			capacity, &len);
	if(body == NULL) {
		rpc->fault(ctx, 400, "document refused (see the log)");
		return;
	}
	rec = lc_rec_new(&_lc_ntf_owner, capacity ? LC_NTF_CAPACITY : LC_NTF_POLICY,
			body, (unsigned)len);
	pkg_free(body);
	if(rec == NULL || lc_owner_hand(&_lc_ntf_owner, rec) < 0) {
		rpc->fault(ctx, 500, "the notifier process is busy");
		return;
	}
	rpc->rpl_printf(ctx, "ok");
}

void lc_ntf_rpc_policy(rpc_t *rpc, void *ctx)
{
	lc_ntf_rpc_doc(rpc, ctx, 0);
}

void lc_ntf_rpc_capacity(rpc_t *rpc, void *ctx)
{
	lc_ntf_rpc_doc(rpc, ctx, 1);
}
