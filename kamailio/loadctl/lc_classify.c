/*
 * loadctl module - lc_classify(), lc_reply() and $lc(...)
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: classification of a request, its reply, $lc(...)
 *
 * lc_classify() hands the parsed request to this process's lc_worker and
 * keeps the decision for $lc(...) and lc_reply(). A window rule's admission
 * carries a ticket that goes back to the engine when the request's
 * transaction completes (tm callbacks), or when the script ends if no
 * transaction was created.
 */

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../../core/dprint.h"
#include "../../core/mem/shm_mem.h"
#include "../../core/pt.h"
#include "../../core/pvar.h"
#include "../../core/script_cb.h"
#include "../../core/data_lump_rpl.h"
#include "../../core/ip_addr.h"
#include "../../core/flags.h"
#include "../../core/parser/msg_parser.h"
#include "../../core/parser/parse_from.h"
#include "../../core/parser/parse_to.h"
#include "../../modules/tm/tm_load.h"

#include "lc_shared.h"
#include "lc_counters.h"
#include "lc_mod.h"
#include "lc_classify.h"

/* How much of a decision's redirect targets $lc(...) and lc_reply() keep. */
#define LC_TARGETS_BUF 4096
#define LC_NAME_BUF 256
/* Resource-Priority or P-Asserted-Identity lines of the request, joined with
 * ", " for lc_request */
#define LC_RP_BUF 1024

int lc_retry_after = 0;

/* tm's API when tm is loaded (window tickets follow transactions), else NULL */
static struct tm_binds *lc_cls_tmb = NULL;

/* The last decision of this process (copied: the library's strings live only
 * until the worker's next call). */
typedef struct lc_last
{
	unsigned int msg_id;
	int pid;
	int valid;
	lc_verdict verdict;
	int status;
	int exempt;
	uint32_t exempt_reason;
	int matched;
	char rule[LC_NAME_BUF];
	int rule_len;
	char source[LC_NAME_BUF];
	int source_len;
	int ntargets;
	str targets[LC_MAX_TARGETS];
	char tbuf[LC_TARGETS_BUF];
	int has_ticket;
	int ticket_attached;
	lc_ticket ticket;
} lc_last_t;

static lc_last_t lc_last;

static lc_str lc_s(const char *s, int len)
{
	lc_str r;
	r.ptr = (const uint8_t *)s;
	r.len = (s && len > 0) ? (size_t)len : 0;
	if(r.len == 0)
		r.ptr = NULL;
	return r;
}

static lc_transport lc_msg_transport(sip_msg_t *msg)
{
	switch(msg->rcv.proto) {
		case PROTO_TCP:
			return LC_TRANSPORT_TCP;
		case PROTO_TLS:
			return LC_TRANSPORT_TLS;
		case PROTO_SCTP:
			return LC_TRANSPORT_SCTP;
		case PROTO_WS:
			return LC_TRANSPORT_WS;
		case PROTO_WSS:
			return LC_TRANSPORT_WSS;
		default:
			return LC_TRANSPORT_UDP;
	}
}

void lc_msg_origin(sip_msg_t *msg, lc_sip_options *o)
{
	memset(o, 0, sizeof(*o));
	o->transport = lc_msg_transport(msg);
	if(msg->rcv.src_ip.af == AF_INET && msg->rcv.src_ip.len == 4) {
		o->source.family = LC_IP_V4;
		memcpy(o->source.addr, msg->rcv.src_ip.u.addr, 4);
	} else if(msg->rcv.src_ip.af == AF_INET6 && msg->rcv.src_ip.len == 16) {
		o->source.family = LC_IP_V6;
		memcpy(o->source.addr, msg->rcv.src_ip.u.addr, 16);
	}
	if(lc_settings.dialog_flag >= 0
			&& isflagset(msg, (flag_t)lc_settings.dialog_flag) == 1)
		o->flags |= LC_SIP_KNOWN_DIALOG;
}

static int lc_last_is(sip_msg_t *msg)
{
	return lc_last.valid && lc_last.msg_id == msg->id
		   && lc_last.pid == msg->pid;
}

/* ---- window tickets and tm ---- */

static void lc_tm_done(struct cell *t, int type, struct tmcb_params *ps)
{
	lc_ticket_rec_t *rec;

	if(ps == NULL || ps->param == NULL || *ps->param == NULL)
		return;
	if(type == TMCB_RESPONSE_OUT && ps->code < 200)
		return; /* provisional */
	rec = (lc_ticket_rec_t *)*ps->param;
	lc_ticket_release(rec);
}

static void lc_tm_free_param(void *param)
{
	lc_ticket_rec_t *rec = (lc_ticket_rec_t *)param;
	if(rec == NULL)
		return;
	/* a transaction destroyed without TMCB_DESTROY having run still gives
	 * its slot back */
	lc_ticket_release(rec);
	shm_free(rec);
}

/* Hands this process's pending ticket to transaction t. 0 on success. */
static int lc_ticket_attach(struct cell *t)
{
	lc_ticket_rec_t *rec;

	rec = (lc_ticket_rec_t *)shm_malloc(sizeof(lc_ticket_rec_t));
	if(rec == NULL) {
		SHM_MEM_ERROR;
		return -1;
	}
	rec->ticket = lc_last.ticket;
	rec->owner = process_no;
	rec->done = 0;
	if(lc_cls_tmb->register_tmcb(0, t, TMCB_RESPONSE_OUT | TMCB_DESTROY,
			   lc_tm_done, rec, lc_tm_free_param)
			<= 0) {
		LM_ERR("cannot register the transaction callbacks\n");
		shm_free(rec);
		return -1;
	}
	lc_last.ticket_attached = 1;
	return 0;
}

/* Gives a ticket no transaction took back at once. */
static void lc_ticket_release_now(void)
{
	lc_ticket_rec_t rec;

	rec.ticket = lc_last.ticket;
	rec.owner = process_no;
	rec.done = 0;
	lc_ticket_release(&rec);
	lc_last.ticket_attached = 1;
}

/* TMCB_REQUEST_IN: a transaction is being created for a request; if it is
 * the one lc_classify() admitted with a ticket, the ticket goes with it. */
static void lc_tm_request_in(struct cell *t, int type, struct tmcb_params *ps)
{
	if(ps == NULL || ps->req == NULL || !lc_last_is(ps->req))
		return;
	if(lc_last.has_ticket && !lc_last.ticket_attached)
		lc_ticket_attach(t);
}

/* After the request route: a ticket without a transaction is released now
 * (stateless forwarding: the window then bounds requests being routed, not
 * transactions; see the README). */
static int lc_post_script(sip_msg_t *msg, unsigned int flags, void *param)
{
	static int warned = 0;

	if(lc_last_is(msg) && lc_last.has_ticket && !lc_last.ticket_attached) {
		if(!warned) {
			LM_WARN("window rule admission without a transaction (tm not "
					"loaded or request forwarded statelessly): released "
					"when the script ends\n");
			warned = 1;
		}
		lc_ticket_release_now();
	}
	return 1;
}

/* ---- lc_classify ---- */

static void lc_keep(sip_msg_t *msg, const lc_decision *d)
{
	size_t i, at = 0;

	lc_last.msg_id = msg->id;
	lc_last.pid = msg->pid;
	lc_last.valid = 1;
	lc_last.verdict = d->verdict;
	lc_last.status = d->status;
	lc_last.exempt = d->exempt;
	lc_last.exempt_reason = d->exempt_reason;
	lc_last.matched = d->matched;
	lc_last.rule_len = 0;
	lc_last.source_len = 0;
	if(d->matched && d->rule_id.ptr) {
		lc_last.rule_len =
				d->rule_id.len < LC_NAME_BUF ? d->rule_id.len : LC_NAME_BUF - 1;
		memcpy(lc_last.rule, d->rule_id.ptr, lc_last.rule_len);
	}
	if(d->matched && d->source.ptr) {
		lc_last.source_len =
				d->source.len < LC_NAME_BUF ? d->source.len : LC_NAME_BUF - 1;
		memcpy(lc_last.source, d->source.ptr, lc_last.source_len);
	}
	lc_last.ntargets = 0;
	for(i = 0; i < d->target_count && i < LC_MAX_TARGETS; i++) {
		if(at + d->targets[i].len > LC_TARGETS_BUF)
			break;
		memcpy(lc_last.tbuf + at, d->targets[i].ptr, d->targets[i].len);
		lc_last.targets[i].s = lc_last.tbuf + at;
		lc_last.targets[i].len = (int)d->targets[i].len;
		at += d->targets[i].len;
		lc_last.ntargets++;
	}
	lc_last.has_ticket = d->has_ticket;
	lc_last.ticket_attached = 0;
	lc_last.ticket = d->ticket;
}

static int lc_verdict_ret(lc_verdict v)
{
	switch(v) {
		case LC_VERDICT_ACCEPT:
			return 1;
		case LC_VERDICT_REJECT:
			return -1;
		case LC_VERDICT_REDIRECT:
			return -2;
		case LC_VERDICT_DROP:
			return -3;
	}
	return -4;
}

/* "sip:host[:port]" (sips: for a sips Request-URI) of the Request-URI into
 * buf: the entity Kamailio forwards to when $du is not set. 0 when the
 * Request-URI has no host (tel:, urn:) or does not fit. */
static int lc_ruri_hop(sip_msg_t *msg, char *buf, size_t cap)
{
	struct sip_uri *u;
	str *ruri = GET_RURI(msg);
	const char *scheme;
	int n;

	/* the scheme as written: the parser turns sip:…;user=phone into a tel
	 * type (phone2tel), though it routes on its host like any sip: URI */
	if(ruri->len > 5 && strncasecmp(ruri->s, "sips:", 5) == 0)
		scheme = "sips";
	else if(ruri->len > 4 && strncasecmp(ruri->s, "sip:", 4) == 0)
		scheme = "sip";
	else
		return 0;
	if(parse_sip_msg_uri(msg) < 0)
		return 0;
	u = &msg->parsed_uri;
	if(u->host.len <= 0)
		return 0;
	if(u->port.len > 0)
		n = snprintf(buf, cap, "%s:%.*s:%.*s", scheme, u->host.len, u->host.s,
				u->port.len, u->port.s);
	else
		n = snprintf(buf, cap, "%s:%.*s", scheme, u->host.len, u->host.s);
	return n > 0 && (size_t)n < cap ? n : 0;
}

/* Every line of one header of the request joined with ", " into buf (RFC 3261
 * §7.3.1: "H: a" and "H: b" are the list "H: a, b"): headers of a type Kamailio
 * knows by `type`, others (HDR_OTHER_T) by `name`. A single line is returned as
 * it is, without a copy. Absent: NULL. Lines past the buffer are left out
 * (logged once per header name). The caller has parsed every header. */
static lc_str lc_header_list(sip_msg_t *msg, hdr_types_t type, const str *name,
		char *buf, size_t cap, int *warned)
{
	struct hdr_field *hf, *first = NULL;
	size_t at = 0;

	for(hf = msg->headers; hf; hf = hf->next) {
		if(hf->type != type
				|| (type == HDR_OTHER_T
						&& (hf->name.len != name->len
								|| strncasecmp(hf->name.s, name->s, name->len)
										   != 0)))
			continue;
		if(first == NULL) {
			first = hf;
			continue;
		}
		if(at == 0) {
			if((size_t)first->body.len > cap)
				break;
			memcpy(buf, first->body.s, first->body.len);
			at = first->body.len;
		}
		if(at + 2 + (size_t)hf->body.len > cap) {
			if(!*warned) {
				LM_WARN("%.*s lines longer than %d bytes together: the rest is "
						"not read\n",
						name->len, name->s, (int)cap);
				*warned = 1;
			}
			break;
		}
		memcpy(buf + at, ", ", 2);
		memcpy(buf + at + 2, hf->body.s, hf->body.len);
		at += 2 + hf->body.len;
	}
	if(first == NULL)
		return lc_s(NULL, 0);
	return at ? lc_s(buf, at) : lc_s(first->body.s, first->body.len);
}

int ki_lc_classify(sip_msg_t *msg)
{
	lc_proc_t *p;
	lc_request req;
	lc_decision d;
	lc_result r;
	str *ruri;
	struct to_body *to;
	struct cell *t;
	char hop[LC_NAME_BUF];
	char rp[LC_RP_BUF];
	char pai[LC_RP_BUF];
	static const str pai_name = str_init("P-Asserted-Identity");
	static const str rp_name = str_init("Resource-Priority");
	static int pai_warned = 0, rp_warned = 0;

	if(msg->first_line.type != SIP_REQUEST) {
		LM_ERR("lc_classify() on a reply\n");
		return -4;
	}
	p = lc_proc_get(lc_current_rank());
	if(p == NULL)
		return -4;
	/* a previous classification of this message that kept a ticket */
	if(lc_last_is(msg) && lc_last.has_ticket && !lc_last.ticket_attached)
		lc_ticket_release_now();
	lc_mailbox_drain(p);
	lc_proc_sync(p);

	if(parse_headers(msg, HDR_FROM_F | HDR_TO_F | HDR_PAI_F | HDR_EVENT_F, 0)
			< 0) {
		LM_ERR("cannot parse the request's headers\n");
		return -4;
	}
	memset(&req, 0, sizeof(req));
	req.method = lc_s(msg->first_line.u.request.method.s,
			msg->first_line.u.request.method.len);
	if(msg->from)
		req.from = lc_s(msg->from->body.s, msg->from->body.len);
	if(msg->to)
		req.to = lc_s(msg->to->body.s, msg->to->body.len);
	ruri = GET_RURI(msg);
	req.request_uri = lc_s(ruri->s, ruri->len);
	if(msg->event)
		req.event = lc_s(msg->event->body.s, msg->event->body.len);
	/* the target entity (RFC 7200 §5.3.3) is the next hop: $du when the
	 * script set one, else the host (and port) of the Request-URI, where
	 * Kamailio routes the request (RFC 3263) */
	if(msg->dst_uri.len > 0)
		req.target = lc_s(msg->dst_uri.s, msg->dst_uri.len);
	else if(lc_ruri_hop(msg, hop, sizeof(hop)) > 0)
		req.target = lc_s(hop, strlen(hop));
	/* P-Asserted-Identity and Resource-Priority may each be repeated on
	 * several lines (RFC 3325 §9.1: a sip and a tel identity); every line
	 * counts, so the whole header section is parsed */
	if(parse_headers(msg, HDR_EOH_F, 0) < 0) {
		LM_ERR("cannot parse the request's headers\n");
		return -4;
	}
	req.p_asserted_identity =
			lc_header_list(msg, HDR_PAI_T, &pai_name, pai, sizeof(pai), &pai_warned);
	if(!lc_settings.priority_namespaces_set
			|| lc_settings.priority_namespaces.len > 0)
		req.resource_priority = lc_header_list(
				msg, HDR_OTHER_T, &rp_name, rp, sizeof(rp), &rp_warned);
	req.transport = lc_msg_transport(msg);
	{
		lc_sip_options origin;
		lc_msg_origin(msg, &origin);
		req.source = origin.source;
		req.known_dialog = (origin.flags & LC_SIP_KNOWN_DIALOG) != 0;
	}
	req.initial = 1;
	if(msg->to) {
		to = get_to(msg);
		if(to == NULL && parse_to_header(msg) == 0)
			to = get_to(msg);
		if(to && to->tag_value.len > 0)
			req.initial = 0;
	}
	req.has_time = 0;

	r = lc_classify(p->worker, &req, &d);
	if(r != LC_RESULT_OK) {
		LM_ERR("classification failed: %s\n", lc_result_text(r));
		return -4;
	}
	lc_keep(msg, &d);
	lc_count(&d);
	if(!d.matched && !d.exempt) {
		/* the engine counts unmatched requests whose number-like user part
		 * sip_user_numbers left unread; the module's statistic reads it */
		lc_stats st;
		if(lc_engine_stats(p->engine, &st) == LC_RESULT_OK)
			lc_count_unread(st.unread_numbers);
	}
	if(d.has_ticket) {
		lc_ticket_issued();
		if(lc_cls_tmb != NULL) {
			t = lc_cls_tmb->t_gett();
			if(t != NULL && t != T_UNDEFINED)
				lc_ticket_attach(t);
			/* else TMCB_REQUEST_IN or the post-script callback takes it */
		}
	}
	return lc_verdict_ret(d.verdict);
}

/* ---- lc_reply ---- */

int ki_lc_reply(sip_msg_t *msg)
{
	char hdr[LC_TARGETS_BUF + 64];
	const char *reason;
	int i, at = 0, n;

	if(!lc_last_is(msg)) {
		LM_WARN("lc_reply() without lc_classify() on this request\n");
		return -1;
	}
	if(lc_last.verdict == LC_VERDICT_ACCEPT)
		return -1; /* nothing to answer */
	if(lc_last.status == 0)
		return 1; /* drop (not over UDP): no answer at all */
	if(lc_last.verdict == LC_VERDICT_REDIRECT) {
		at = snprintf(hdr, sizeof(hdr), "Contact: ");
		for(i = 0; i < lc_last.ntargets; i++) {
			if(at + lc_last.targets[i].len + 8 >= (int)sizeof(hdr))
				break;
			n = snprintf(hdr + at, sizeof(hdr) - at, "%s<%.*s>", i ? ", " : "",
					lc_last.targets[i].len, lc_last.targets[i].s);
			at += n;
		}
		at += snprintf(hdr + at, sizeof(hdr) - at, "\r\n");
		reason = "Moved Temporarily";
	} else {
		if(lc_retry_after > 0)
			at = snprintf(
					hdr, sizeof(hdr), "Retry-After: %d\r\n", lc_retry_after);
		reason = "Service Unavailable";
	}
	if(at > 0 && add_lump_rpl(msg, hdr, at, LUMP_RPL_HDR) == 0) {
		LM_ERR("cannot add a header to the reply\n");
		return -1;
	}
	return lc_sl_reply(msg, lc_last.status, reason);
}

/* ---- $lc(name) ---- */

enum
{
	LC_PV_VERDICT = 1,
	LC_PV_STATUS,
	LC_PV_REASON,
	LC_PV_RULE,
	LC_PV_SOURCE,
	LC_PV_CONTACT,
	LC_PV_TARGETS,
	LC_PV_NTARGETS,
	LC_PV_EXEMPT,
	LC_PV_EXEMPT_REASON,
	LC_PV_MATCHED,
	LC_PV_TICKET,
};

int pv_parse_lc_name(pv_spec_t *sp, str *in)
{
	/* clang-format off */
	static const struct { const char *name; int id; } names[] = {
		{"verdict", LC_PV_VERDICT}, {"status", LC_PV_STATUS},
		{"reason", LC_PV_REASON}, {"rule", LC_PV_RULE},
		{"source", LC_PV_SOURCE}, {"contact", LC_PV_CONTACT},
		{"targets", LC_PV_TARGETS}, {"ntargets", LC_PV_NTARGETS},
		{"exempt", LC_PV_EXEMPT}, {"exempt_reason", LC_PV_EXEMPT_REASON},
		{"matched", LC_PV_MATCHED},
		{"ticket", LC_PV_TICKET}, {0, 0}
	};
	/* clang-format on */
	int i;

	if(sp == NULL || in == NULL || in->len <= 0)
		return -1;
	for(i = 0; names[i].name; i++) {
		if(strlen(names[i].name) == (size_t)in->len
				&& strncmp(names[i].name, in->s, in->len) == 0) {
			sp->pvp.pvn.type = PV_NAME_INTSTR;
			sp->pvp.pvn.u.isname.type = 0;
			sp->pvp.pvn.u.isname.name.n = names[i].id;
			return 0;
		}
	}
	LM_ERR("unknown $lc(%.*s): verdict, status, reason, rule, source, "
		   "contact, targets, ntargets, exempt, exempt_reason, matched, "
		   "ticket\n",
			in->len, in->s);
	return -1;
}

int pv_get_lc(sip_msg_t *msg, pv_param_t *param, pv_value_t *res)
{
	static char tbuf[LC_TARGETS_BUF + 4 * LC_MAX_TARGETS];
	static const char *verdicts[] = {"accept", "reject", "redirect", "drop"};
	str s;
	int i, at = 0;

	if(param == NULL || msg == NULL || !lc_last_is(msg))
		return pv_get_null(msg, param, res);
	switch(param->pvn.u.isname.name.n) {
		case LC_PV_VERDICT:
			s.s = (char *)verdicts[lc_last.verdict & 3];
			s.len = strlen(s.s);
			return pv_get_strval(msg, param, res, &s);
		case LC_PV_STATUS:
			return pv_get_sintval(msg, param, res, lc_last.status);
		case LC_PV_REASON:
			s.s = lc_last.status == 503	  ? "Service Unavailable"
				  : lc_last.status == 302 ? "Moved Temporarily"
										  : "";
			s.len = strlen(s.s);
			return pv_get_strval(msg, param, res, &s);
		case LC_PV_RULE:
			if(!lc_last.matched)
				return pv_get_null(msg, param, res);
			s.s = lc_last.rule;
			s.len = lc_last.rule_len;
			return pv_get_strval(msg, param, res, &s);
		case LC_PV_SOURCE:
			if(!lc_last.matched)
				return pv_get_null(msg, param, res);
			s.s = lc_last.source;
			s.len = lc_last.source_len;
			return pv_get_strval(msg, param, res, &s);
		case LC_PV_CONTACT:
			if(lc_last.ntargets == 0)
				return pv_get_null(msg, param, res);
			return pv_get_strval(msg, param, res, &lc_last.targets[0]);
		case LC_PV_TARGETS:
			if(lc_last.ntargets == 0)
				return pv_get_null(msg, param, res);
			for(i = 0; i < lc_last.ntargets; i++) {
				at += snprintf(tbuf + at, sizeof(tbuf) - at, "%s<%.*s>",
						i ? ", " : "", lc_last.targets[i].len,
						lc_last.targets[i].s);
			}
			s.s = tbuf;
			s.len = at;
			return pv_get_strval(msg, param, res, &s);
		case LC_PV_NTARGETS:
			return pv_get_sintval(msg, param, res, lc_last.ntargets);
		case LC_PV_EXEMPT:
			return pv_get_sintval(msg, param, res, lc_last.exempt);
		case LC_PV_EXEMPT_REASON:
			s.s = lc_last.exempt_reason == LC_EXEMPT_REASON_NOT_FILTERED
						  ? "not-filtered"
				  : lc_last.exempt_reason == LC_EXEMPT_REASON_EMERGENCY
						  ? "emergency"
				  : lc_last.exempt_reason == LC_EXEMPT_REASON_RESOURCE_PRIORITY
						  ? "resource-priority"
						  : "";
			if(!*s.s)
				return pv_get_null(msg, param, res);
			s.len = strlen(s.s);
			return pv_get_strval(msg, param, res, &s);
		case LC_PV_MATCHED:
			return pv_get_sintval(msg, param, res, lc_last.matched);
		case LC_PV_TICKET:
			return pv_get_sintval(msg, param, res, lc_last.has_ticket);
	}
	return pv_get_null(msg, param, res);
}

int lc_classify_init(struct tm_binds *tmb)
{
	memset(&lc_last, 0, sizeof(lc_last));
	if(tmb != NULL) {
		if(tmb->register_tmcb(0, 0, TMCB_REQUEST_IN, lc_tm_request_in, 0, 0)
				<= 0) {
			LM_ERR("cannot register TMCB_REQUEST_IN\n");
			return -1;
		}
		lc_cls_tmb = tmb;
	} else {
		LM_INFO("tm not loaded: window-rule admissions are released when "
				"the request route ends\n");
	}
	if(register_script_cb(lc_post_script, POST_SCRIPT_CB | REQUEST_CB, 0) < 0) {
		LM_ERR("cannot register the post-script callback\n");
		return -1;
	}
	return 0;
}
