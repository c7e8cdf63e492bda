/*
 * loadctl module - RFC 7200 load filtering with libloadctl
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: module glue: parameters, script and KEMI functions,
 * pseudo-variables, stateless replies, tm callbacks, RPC
 *
 * lc_classify() hands the parsed request to this process's lc_worker and
 * keeps the decision for $lc(...) and lc_reply(). A window rule's admission
 * carries a ticket that goes back to the engine when the request's
 * transaction completes (tm callbacks), or when the script ends if no
 * transaction was created.
 *
 * Seams left for the next parts of issue 11:
 * - RFC 7200 subscriber (done): lc_subscribe.c; lc_handle_notify() and
 *   loadctl.subscriptions are registered here, the owner process is forked
 *   from child_init(PROC_MAIN).
 * - pipelimit side by side: tests/e2e/kamailio/loadctl.cfg is the baseline's
 *   proxy with lc_classify() in place of pl_check().
 * - shared cells (done): lc_shared.c (lc_proc_engine_new, lc_shared_init).
 */

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../../core/sr_module.h"
#include "../../core/dprint.h"
#include "../../core/mem/mem.h"
#include "../../core/mem/shm_mem.h"
#include "../../core/pt.h"
#include "../../core/pvar.h"
#include "../../core/rpc.h"
#include "../../core/rpc_lookup.h"
#include "../../core/kemi.h"
#include "../../core/mod_fix.h"
#include "../../core/script_cb.h"
#include "../../core/data_lump_rpl.h"
#include "../../core/ip_addr.h"
#include "../../core/parser/msg_parser.h"
#include "../../core/parser/parse_from.h"
#include "../../core/parser/parse_to.h"
#include "../../modules/sl/sl.h"
#include "../../modules/tm/tm_load.h"

#include "lc_shared.h"
#include "lc_subscribe.h"
#include "lc_notify.h"
#include "lc_oc.h"
#include "lc_mod.h"
#include "lc_stats.h"

MODULE_VERSION

/* How much of a decision's redirect targets $lc(...) and lc_reply() keep. */
#define LC_TARGETS_BUF 4096
#define LC_NAME_BUF 256
/* Largest policy file or RPC document read from a path. */
#define LC_MAX_DOC (16 * 1024 * 1024)

static int mod_init(void);
static int child_init(int rank);
static void mod_destroy(void);

static int w_lc_classify(sip_msg_t *msg, char *p1, char *p2);
static int w_lc_reply(sip_msg_t *msg, char *p1, char *p2);
static int w_lc_handle_notify(sip_msg_t *msg, char *p1, char *p2);
static int w_lc_handle_subscribe(sip_msg_t *msg, char *p1, char *p2);
static int w_lc_observe0(sip_msg_t *msg, char *p1, char *p2);
static int w_lc_observe1(sip_msg_t *msg, char *p1, char *p2);
static int w_lc_oc_forward(sip_msg_t *msg, char *p1, char *p2);
static int w_lc_oc_reply(sip_msg_t *msg, char *p1, char *p2);
static int w_lc_oc_timeout(sip_msg_t *msg, char *p1, char *p2);
static int w_lc_oc_check(sip_msg_t *msg, char *p1, char *p2);
static int w_lc_oc_occupancy(sip_msg_t *msg, char *p1, char *p2);
static int w_lc_oc_via(sip_msg_t *msg, char *p1, char *p2);
static int pv_parse_lc_name(pv_spec_t *sp, str *in);
static int pv_get_lc(sip_msg_t *msg, pv_param_t *param, pv_value_t *res);

static char *lc_policy_file = NULL;
static int lc_policy_file_param(modparam_t type, void *val);
static str lc_source = str_init("local");
static int lc_retry_after = 0;
static char *lc_redirect_allow = NULL;
static char *lc_priority_namespaces = NULL;
static char *lc_user_numbers_param = NULL;
/* Resource-Priority or P-Asserted-Identity lines of the request, joined with
 * ", " for lc_request */
#define LC_RP_BUF 1024

static sl_api_t lc_slb;
static struct tm_binds lc_tmb;
static int lc_tm_loaded = 0;
static int lc_rank = 0;

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

/* clang-format off */
static cmd_export_t cmds[] = {
	{"lc_classify", (cmd_function)w_lc_classify, 0, 0, 0, REQUEST_ROUTE},
	{"lc_reply", (cmd_function)w_lc_reply, 0, 0, 0, REQUEST_ROUTE},
	{"lc_handle_notify", (cmd_function)w_lc_handle_notify, 0, 0, 0,
		REQUEST_ROUTE},
	{"lc_handle_subscribe", (cmd_function)w_lc_handle_subscribe, 0, 0, 0,
		REQUEST_ROUTE},
	{"lc_observe", (cmd_function)w_lc_observe0, 0, 0, 0,
		REQUEST_ROUTE | FAILURE_ROUTE | BRANCH_ROUTE},
	{"lc_observe", (cmd_function)w_lc_observe1, 1, fixup_spve_null,
		fixup_free_spve_null, REQUEST_ROUTE | FAILURE_ROUTE | BRANCH_ROUTE},
	{"lc_oc_forward", (cmd_function)w_lc_oc_forward, 1, fixup_spve_null,
		fixup_free_spve_null, REQUEST_ROUTE | FAILURE_ROUTE | BRANCH_ROUTE},
	{"lc_oc_reply", (cmd_function)w_lc_oc_reply, 0, 0, 0, ONREPLY_ROUTE},
	{"lc_oc_timeout", (cmd_function)w_lc_oc_timeout, 1, fixup_spve_null,
		fixup_free_spve_null, FAILURE_ROUTE},
	{"lc_oc_check", (cmd_function)w_lc_oc_check, 0, 0, 0, REQUEST_ROUTE},
	{"lc_oc_occupancy", (cmd_function)w_lc_oc_occupancy, 2, fixup_igp_igp,
		fixup_free_igp_igp, ANY_ROUTE},
	{"lc_oc_via", (cmd_function)w_lc_oc_via, 0, 0, 0, ONREPLY_ROUTE},
	{0, 0, 0, 0, 0, 0}
};

static param_export_t params[] = {
	{"policy_file", PARAM_STRING | PARAM_USE_FUNC, (void *)lc_policy_file_param},
	{"source", PARAM_STR, &lc_source},
	{"max_rules", PARAM_INT, &lc_settings.max_rules},
	{"burst_ms", PARAM_INT, &lc_settings.burst_ms},
	{"retry_after", PARAM_INT, &lc_retry_after},
	{"redirect_allow", PARAM_STRING, &lc_redirect_allow},
	{"emergency_exempt", PARAM_INT, &lc_settings.emergency_exempt},
	{"priority_namespaces", PARAM_STRING, &lc_priority_namespaces},
	{"sip_user_numbers", PARAM_STRING, &lc_user_numbers_param},
	{"shared_cells", PARAM_INT, &lc_settings.shared_cells},
	{"cell_capacity", PARAM_INT, &lc_settings.cell_capacity},
	{"subscribe", PARAM_STRING | PARAM_USE_FUNC, (void *)lc_sub_add_param},
	{"subscribe_expires", PARAM_INT, &lc_sub_expires},
	{"subscribe_contact", PARAM_STRING, &lc_sub_contact},
	{"subscribe_from", PARAM_STRING, &lc_sub_from},
	{"notifier_uri", PARAM_STRING, &lc_ntf_uri},
	{"notifier_allow", PARAM_STRING, &lc_ntf_allow},
	{"notifier_policy_file", PARAM_STRING, &lc_ntf_policy_file},
	{"notifier_capacity_file", PARAM_STRING, &lc_ntf_capacity_file},
	{"notifier_max_expires", PARAM_INT, &lc_ntf_max_expires},
	{"notifier_min_expires", PARAM_INT, &lc_ntf_min_expires},
	{"overload_control", PARAM_INT, &lc_oc_enable},
	{"oc_hops", PARAM_INT, &lc_oc_hops},
	{"oc_validity_ms", PARAM_INT, &lc_oc_validity_ms},
	{"oc_tau_priority", PARAM_INT, &lc_oc_tau_priority},
	{0, 0, 0}
};

static pv_export_t mod_pvs[] = {
	{{"lc", (sizeof("lc") - 1)}, PVT_OTHER, pv_get_lc, 0, pv_parse_lc_name,
		0, 0, 0},
	{{0, 0}, 0, 0, 0, 0, 0, 0, 0}
};

static rpc_export_t lc_rpc_cmds[];

struct module_exports exports = {
	"loadctl",       /* module name */
	DEFAULT_DLFLAGS, /* dlopen flags */
	cmds,            /* cmd (cfg function) exports */
	params,          /* param exports */
	0,               /* RPC method exports (registered in mod_init) */
	mod_pvs,         /* pseudo-variables exports */
	0,               /* response handling function */
	mod_init,        /* module init function */
	child_init,      /* per-child init function */
	mod_destroy      /* module destroy function */
};
/* clang-format on */

/* ---- helpers ---- */

static lc_str lc_s(const char *s, int len)
{
	lc_str r;
	r.ptr = (const uint8_t *)s;
	r.len = (s && len > 0) ? (size_t)len : 0;
	if(r.len == 0)
		r.ptr = NULL;
	return r;
}

/* Reads a whole file into pkg memory (NUL-terminated). */
char *lc_read_file(const char *path, size_t *len)
{
	FILE *f;
	char *buf;
	long n;

	f = fopen(path, "rb");
	if(f == NULL) {
		LM_ERR("cannot open %s: %s\n", path, strerror(errno));
		return NULL;
	}
	if(fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || n > LC_MAX_DOC
			|| fseek(f, 0, SEEK_SET) != 0) {
		LM_ERR("%s: cannot read (or larger than %d bytes)\n", path, LC_MAX_DOC);
		fclose(f);
		return NULL;
	}
	buf = (char *)pkg_malloc(n + 1);
	if(buf == NULL) {
		PKG_MEM_ERROR;
		fclose(f);
		return NULL;
	}
	if(n > 0 && fread(buf, 1, n, f) != (size_t)n) {
		LM_ERR("%s: short read\n", path);
		pkg_free(buf);
		fclose(f);
		return NULL;
	}
	fclose(f);
	buf[n] = '\0';
	*len = (size_t)n;
	return buf;
}

/* The policy_file modparam: the document is read and checked while the
 * configuration is parsed, so `kamailio -c` refuses a broken one (mod_init,
 * which publishes it against the other settings, does not run under -c). */
static int lc_policy_file_param(modparam_t type, void *val)
{
	char *path = (char *)val;
	char msg[1024];
	char *body;
	size_t len = 0, written = 0;
	lc_result r;

	if(path == NULL || *path == '\0') {
		lc_policy_file = NULL;
		return 0;
	}
	body = lc_read_file(path, &len);
	if(body == NULL)
		return -1; /* logged */
	r = lc_policy_check((const uint8_t *)body, len, (uint8_t *)msg,
			sizeof(msg) - 1, &written);
	pkg_free(body);
	if(r == LC_RESULT_BUFFER_TOO_SMALL) /* only a refusal has a message */
		snprintf(msg, sizeof(msg), "(a message of %zu bytes)", written);
	else if(r == LC_RESULT_INVALID_POLICY)
		msg[written < sizeof(msg) ? written : sizeof(msg) - 1] = '\0';
	if(r == LC_RESULT_INVALID_POLICY || r == LC_RESULT_BUFFER_TOO_SMALL) {
		LM_ERR("policy_file %s refused: %s\n", path, msg);
		return -1;
	}
	if(r != LC_RESULT_OK) {
		LM_ERR("policy_file %s: %s\n", path, lc_result_text(r));
		return -1;
	}
	lc_policy_file = path;
	return 0;
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
	if(lc_tmb.register_tmcb(0, t, TMCB_RESPONSE_OUT | TMCB_DESTROY, lc_tm_done,
			   rec, lc_tm_free_param)
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

static int ki_lc_classify(sip_msg_t *msg)
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
	p = lc_proc_get(lc_rank);
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
	if(lc_priority_namespaces == NULL || *lc_priority_namespaces)
		req.resource_priority = lc_header_list(
				msg, HDR_OTHER_T, &rp_name, rp, sizeof(rp), &rp_warned);
	req.transport = lc_msg_transport(msg);
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
		if(lc_tm_loaded) {
			t = lc_tmb.t_gett();
			if(t != NULL && t != T_UNDEFINED)
				lc_ticket_attach(t);
			/* else TMCB_REQUEST_IN or the post-script callback takes it */
		}
	}
	return lc_verdict_ret(d.verdict);
}

static int w_lc_classify(sip_msg_t *msg, char *p1, char *p2)
{
	return ki_lc_classify(msg);
}

/* ---- lc_reply ---- */

static int ki_lc_reply(sip_msg_t *msg)
{
	char hdr[LC_TARGETS_BUF + 64];
	str reason;
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
		reason.s = "Moved Temporarily";
	} else {
		if(lc_retry_after > 0)
			at = snprintf(
					hdr, sizeof(hdr), "Retry-After: %d\r\n", lc_retry_after);
		reason.s = "Service Unavailable";
	}
	reason.len = strlen(reason.s);
	if(at > 0 && add_lump_rpl(msg, hdr, at, LUMP_RPL_HDR) == 0) {
		LM_ERR("cannot add a header to the reply\n");
		return -1;
	}
	if(lc_slb.freply(msg, lc_last.status, &reason) < 0) {
		LM_ERR("cannot send the %d reply\n", lc_last.status);
		return -1;
	}
	return 1;
}

static int w_lc_reply(sip_msg_t *msg, char *p1, char *p2)
{
	return ki_lc_reply(msg);
}

int lc_sl_reply(sip_msg_t *msg, int code, const char *reason)
{
	str r;

	r.s = (char *)reason;
	r.len = strlen(reason);
	if(lc_slb.freply == NULL || lc_slb.freply(msg, code, &r) < 0) {
		LM_ERR("cannot send the %d reply\n", code);
		return -1;
	}
	return 1;
}

/* ---- lc_handle_notify ---- */

static int ki_lc_handle_notify(sip_msg_t *msg)
{
	return lc_sub_handle_notify(msg);
}

static int w_lc_handle_notify(sip_msg_t *msg, char *p1, char *p2)
{
	return ki_lc_handle_notify(msg);
}

/* ---- lc_handle_subscribe, lc_observe ---- */

static int ki_lc_handle_subscribe(sip_msg_t *msg)
{
	return lc_ntf_handle_subscribe(msg);
}

static int w_lc_handle_subscribe(sip_msg_t *msg, char *p1, char *p2)
{
	return ki_lc_handle_subscribe(msg);
}

static int ki_lc_observe(sip_msg_t *msg)
{
	return lc_ntf_observe(msg, NULL);
}

static int ki_lc_observe_uri(sip_msg_t *msg, str *subscriber)
{
	return lc_ntf_observe(msg, subscriber);
}

static int w_lc_observe0(sip_msg_t *msg, char *p1, char *p2)
{
	return ki_lc_observe(msg);
}

static int w_lc_observe1(sip_msg_t *msg, char *p1, char *p2)
{
	str s;
	if(fixup_get_svalue(msg, (gparam_t *)p1, &s) < 0) {
		LM_ERR("lc_observe(): cannot evaluate the subscriber\n");
		return -1;
	}
	return ki_lc_observe_uri(msg, &s);
}

/* ---- overload control (lc_oc.c) ---- */

int lc_current_rank(void)
{
	return lc_rank;
}

static int w_lc_oc_forward(sip_msg_t *msg, char *p1, char *p2)
{
	str dst;
	if(fixup_get_svalue(msg, (gparam_t *)p1, &dst) != 0) {
		LM_ERR("lc_oc_forward(): no destination\n");
		return -4;
	}
	return ki_lc_oc_forward(msg, &dst);
}

static int w_lc_oc_reply(sip_msg_t *msg, char *p1, char *p2)
{
	return ki_lc_oc_reply(msg);
}

static int w_lc_oc_timeout(sip_msg_t *msg, char *p1, char *p2)
{
	str dst;
	if(fixup_get_svalue(msg, (gparam_t *)p1, &dst) != 0) {
		LM_ERR("lc_oc_timeout(): no destination\n");
		return -4;
	}
	return ki_lc_oc_timeout(msg, &dst);
}

static int w_lc_oc_check(sip_msg_t *msg, char *p1, char *p2)
{
	return ki_lc_oc_check(msg);
}

static int w_lc_oc_occupancy(sip_msg_t *msg, char *p1, char *p2)
{
	int measured, target;
	if(fixup_get_ivalue(msg, (gparam_t *)p1, &measured) != 0
			|| fixup_get_ivalue(msg, (gparam_t *)p2, &target) != 0) {
		LM_ERR("lc_oc_occupancy(): two integers expected\n");
		return -4;
	}
	return ki_lc_oc_occupancy(msg, measured, target);
}

static int w_lc_oc_via(sip_msg_t *msg, char *p1, char *p2)
{
	return ki_lc_oc_via(msg);
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

static int pv_parse_lc_name(pv_spec_t *sp, str *in)
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

static int pv_get_lc(sip_msg_t *msg, pv_param_t *param, pv_value_t *res)
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

/* ---- RPC ---- */

static const char *lc_rpc_publish_doc[] = {
		"Publishes a full policy document: loadctl.publish DOCUMENT-OR-PATH "
		"[SOURCE]. A value starting with '<' is the XML document itself, "
		"anything else a file path read by the server. SOURCE defaults to "
		"the 'source' modparam. An invalid document is refused and the "
		"current policy stays.",
		0};

static void lc_rpc_publish(rpc_t *rpc, void *ctx)
{
	str value = STR_NULL, source = STR_NULL;
	char err[1024];
	char *body = NULL, *path = NULL;
	size_t len = 0;
	int i, ret;

	if(rpc->scan(ctx, "S", &value) < 1) {
		rpc->fault(ctx, 400, "document or path expected");
		return;
	}
	if(rpc->scan(ctx, "*S", &source) < 1 || source.len <= 0)
		source = lc_source;
	for(i = 0; i < value.len
			   && (value.s[i] == ' ' || value.s[i] == '\t' || value.s[i] == '\r'
					   || value.s[i] == '\n');
			i++)
		;
	if(i < value.len && value.s[i] == '<') {
		ret = lc_store_publish(&source, value.s, value.len, err, sizeof(err));
	} else {
		path = (char *)pkg_malloc(value.len + 1);
		if(path == NULL) {
			rpc->fault(ctx, 500, "out of memory");
			return;
		}
		memcpy(path, value.s, value.len);
		path[value.len] = '\0';
		body = lc_read_file(path, &len);
		if(body == NULL) {
			rpc->fault(ctx, 400, "cannot read %s", path);
			pkg_free(path);
			return;
		}
		ret = lc_store_publish(&source, body, len, err, sizeof(err));
		pkg_free(body);
	}
	if(ret < 0) {
		LM_ERR("loadctl.publish %.*s%s%s refused: %s\n", source.len, source.s,
				path ? " " : "", path ? path : "", err);
		rpc->fault(ctx, 400, "refused, policy kept: %s", err);
	} else {
		LM_INFO("loadctl.publish: source %.*s%s%s published (store version "
				"%u)\n",
				source.len, source.s, path ? " from " : "", path ? path : "",
				lc_store_version());
		rpc->rpl_printf(ctx, "ok: source %.*s, version %u", source.len,
				source.s, lc_store_version());
	}
	if(path)
		pkg_free(path);
}

static const char *lc_rpc_reload_doc[] = {
		"Reads the policy_file again and publishes it as the 'source' "
		"modparam's policy (replacing what loadctl.publish put there under "
		"the same source); an invalid file is refused and the current policy "
		"stays.",
		0};

static void lc_rpc_reload(rpc_t *rpc, void *ctx)
{
	char err[1024];
	char *body;
	size_t len = 0;

	if(lc_policy_file == NULL || *lc_policy_file == '\0') {
		rpc->fault(ctx, 404, "no policy_file configured");
		return;
	}
	body = lc_read_file(lc_policy_file, &len);
	if(body == NULL) {
		rpc->fault(ctx, 400, "cannot read %s, policy kept", lc_policy_file);
		return;
	}
	if(lc_store_publish(&lc_source, body, len, err, sizeof(err)) < 0) {
		pkg_free(body);
		LM_ERR("loadctl.reload: %s refused, policy kept: %s\n", lc_policy_file,
				err);
		rpc->fault(ctx, 400, "refused, policy kept: %s", err);
		return;
	}
	pkg_free(body);
	LM_INFO("loadctl.reload: %s published as source %.*s (store version %u)\n",
			lc_policy_file, lc_source.len, lc_source.s, lc_store_version());
	rpc->rpl_printf(ctx, "ok: %s as source %.*s, version %u", lc_policy_file,
			lc_source.len, lc_source.s, lc_store_version());
}

static const char *lc_rpc_withdraw_doc[] = {
		"Removes every rule a source published: loadctl.withdraw [SOURCE].", 0};

static void lc_rpc_withdraw(rpc_t *rpc, void *ctx)
{
	str source = STR_NULL;

	if(rpc->scan(ctx, "*S", &source) < 1 || source.len <= 0)
		source = lc_source;
	if(lc_store_withdraw(&source) < 0) {
		rpc->fault(
				ctx, 404, "no policy from source %.*s", source.len, source.s);
		return;
	}
	rpc->rpl_printf(ctx, "ok: source %.*s withdrawn, version %u", source.len,
			source.s, lc_store_version());
}

typedef struct lc_rpc_acc
{
	rpc_t *rpc;
	void *ctx;
	void *arr;
	lc_proc_totals_t sum;
	int nprocs;
} lc_rpc_acc_t;

static void lc_rpc_proc_cb(void *p, const lc_proc_totals_t *t)
{
	lc_rpc_acc_t *a = (lc_rpc_acc_t *)p;
	void *st;

	a->nprocs++;
	a->sum.total += t->total;
	a->sum.exempt += t->exempt;
	a->sum.exempt_emergency += t->exempt_emergency;
	a->sum.exempt_priority += t->exempt_priority;
	a->sum.unmatched += t->unmatched;
	a->sum.matched += t->matched;
	a->sum.accepted += t->accepted;
	a->sum.rejected += t->rejected;
	a->sum.redirected += t->redirected;
	a->sum.dropped += t->dropped;
	a->sum.tickets_issued += t->tickets_issued;
	a->sum.tickets_completed += t->tickets_completed;
	a->sum.tickets_lost += t->tickets_lost;
	a->sum.unread_numbers += t->unread_numbers;
	if(a->arr == NULL)
		return;
	if(a->rpc->array_add(a->arr, "{", &st) < 0)
		return;
	a->rpc->struct_add(st, "ddduJJJJJJJJJJJJ", "pid", t->pid, "rank", t->rank,
			"synced", t->version == lc_store_version(), "version", t->version,
			"total", t->total, "exempt", t->exempt, "unmatched", t->unmatched,
			"matched", t->matched, "accepted", t->accepted, "rejected",
			t->rejected, "redirected", t->redirected, "dropped", t->dropped,
			"tickets_issued", t->tickets_issued, "tickets_completed",
			t->tickets_completed, "tickets_forwarded", t->tickets_forwarded,
			"sync_errors", t->sync_errors);
}

typedef struct lc_rpc_stats_rows
{
	rpc_t *rpc;
	void *arr;
	lc_rule_row_t *rows;
	int n;
} lc_rpc_stats_rows_t;

static void lc_rpc_stats_rule_cb(void *p, const lc_rule_stats *row)
{
	lc_rpc_stats_rows_t *a = (lc_rpc_stats_rows_t *)p;
	lc_rule_row_t zero, *r = NULL;
	void *st;
	size_t sl, rl;
	int i;

	sl = row->source.len < LC_SOURCE_MAX - 1 ? row->source.len
											 : LC_SOURCE_MAX - 1;
	rl = row->rule.len < LC_RULE_MAX - 1 ? row->rule.len : LC_RULE_MAX - 1;
	for(i = 0; i < a->n; i++) {
		if(strlen(a->rows[i].source) == sl && strlen(a->rows[i].rule) == rl
				&& memcmp(a->rows[i].source, row->source.ptr, sl) == 0
				&& memcmp(a->rows[i].rule, row->rule.ptr, rl) == 0) {
			r = &a->rows[i];
			break;
		}
	}
	if(r == NULL) {
		memset(&zero, 0, sizeof(zero));
		r = &zero;
	}
	if(a->rpc->array_add(a->arr, "{", &st) < 0)
		return;
	a->rpc->struct_add(st, "dSSJJJJJ", "index", (int)row->index, "source",
			&(str){(char *)row->source.ptr, (int)row->source.len}, "rule",
			&(str){(char *)row->rule.ptr, (int)row->rule.len}, "matched",
			r->matched, "accepted", r->accepted, "rejected", r->rejected,
			"redirected", r->redirected, "dropped", r->dropped);
}

static const char *lc_rpc_stats_doc[] = {
		"Counters: totals, per rule (summed over every process) and per "
		"process.",
		0};

static void lc_rpc_stats(rpc_t *rpc, void *ctx)
{
	void *top, *rules, *procs;
	lc_rule_row_t *rows = NULL;
	lc_rpc_acc_t acc;
	int n = 0;

	memset(&acc, 0, sizeof(acc));
	acc.rpc = rpc;
	acc.ctx = ctx;
	/* totals first (one pass), then the per-process list (another) */
	lc_stats_each_proc(lc_rpc_proc_cb, &acc);
	if(rpc->add(ctx, "{", &top) < 0)
		return;
	rpc->struct_add(top, "udddJJJJJJJJJJJJ", "version", lc_store_version(),
			"shared_cells", lc_shared_cells(), "cells_in_use",
			lc_shared_cells_in_use(), "processes", acc.nprocs, "total",
			acc.sum.total, "exempt", acc.sum.exempt, "exempt_emergency",
			acc.sum.exempt_emergency, "exempt_priority",
			acc.sum.exempt_priority, "unmatched",
			acc.sum.unmatched, "matched", acc.sum.matched, "accepted",
			acc.sum.accepted, "rejected", acc.sum.rejected, "redirected",
			acc.sum.redirected, "dropped", acc.sum.dropped, "tickets_issued",
			acc.sum.tickets_issued, "tickets_open",
			acc.sum.tickets_issued - acc.sum.tickets_completed
					- acc.sum.tickets_lost);
	rpc->struct_add(top, "J", "unread_numbers", acc.sum.unread_numbers);
	if(rpc->struct_add(top, "[", "rules", &rules) < 0)
		return;
	/* the current policy's rules, each with its counters summed over the
	 * processes (a process that has not synced yet counted under the same
	 * source and rule id; removed rules are left out, the totals keep them) */
	if(lc_stats_rules(&rows, &n) == 0) {
		lc_rpc_stats_rows_t sr;
		sr.rpc = rpc;
		sr.arr = rules;
		sr.rows = rows;
		sr.n = n;
		lc_store_rules(lc_rpc_stats_rule_cb, &sr);
		pkg_free(rows);
	}
	if(rpc->struct_add(top, "[", "per_process", &procs) < 0)
		return;
	memset(&acc, 0, sizeof(acc));
	acc.rpc = rpc;
	acc.ctx = ctx;
	acc.arr = procs;
	lc_stats_each_proc(lc_rpc_proc_cb, &acc);
}

typedef struct lc_rpc_rules_acc
{
	rpc_t *rpc;
	void *arr;
} lc_rpc_rules_acc_t;

static void lc_rpc_source_cb(void *p, const char *name, unsigned int seq,
		const char *body, size_t len)
{
	lc_rpc_rules_acc_t *a = (lc_rpc_rules_acc_t *)p;
	void *st;

	if(a->rpc->array_add(a->arr, "{", &st) < 0)
		return;
	a->rpc->struct_add(
			st, "sud", "source", name, "version", seq, "bytes", (int)len);
}

static void lc_rpc_rule_cb(void *p, const lc_rule_stats *row)
{
	lc_rpc_rules_acc_t *a = (lc_rpc_rules_acc_t *)p;
	void *st;

	if(a->rpc->array_add(a->arr, "{", &st) < 0)
		return;
	a->rpc->struct_add(st, "dSS", "index", (int)row->index, "source",
			&(str){(char *)row->source.ptr, (int)row->source.len}, "rule",
			&(str){(char *)row->rule.ptr, (int)row->rule.len});
}

static const char *lc_rpc_rules_doc[] = {
		"The published sources (in the order rules are tried) and their "
		"rules.",
		0};

static void lc_rpc_rules(rpc_t *rpc, void *ctx)
{
	void *top, *arr;
	lc_rpc_rules_acc_t acc;

	if(rpc->add(ctx, "{", &top) < 0)
		return;
	rpc->struct_add(top, "u", "version", lc_store_version());
	if(rpc->struct_add(top, "[", "sources", &arr) < 0)
		return;
	acc.rpc = rpc;
	acc.arr = arr;
	lc_store_each(lc_rpc_source_cb, &acc);
	if(rpc->struct_add(top, "[", "rules", &arr) < 0)
		return;
	/* the rule list as an engine compiles the stored documents */
	acc.arr = arr;
	if(lc_store_rules(lc_rpc_rule_cb, &acc) < 0)
		rpc->fault(ctx, 500, "cannot compile the stored policy");
}

static const char *lc_rpc_subscriptions_doc[] = {
		"The RFC 7200 subscriptions (subscribe modparams): state, last "
		"event, version applied, counters.",
		0};

static const char *lc_rpc_resubscribe_doc[] = {
		"Starts a new subscription now: loadctl.resubscribe [NOTIFIER-URI] "
		"(every subscribe notifier without one), e.g. after a notifier "
		"ended it with noresource.",
		0};

static const char *lc_rpc_notifier_doc[] = {
		"The RFC 7200 notifier (notifier_uri): mode, counters, and per "
		"subscriber its address, requests observed, demand, target and "
		"share.",
		0};

static const char *lc_rpc_notifier_policy_doc[] = {
		"Replaces what the notifier pushes by the full policy document in "
		"the file named (every subscriber gets it).",
		0};

static const char *lc_rpc_notifier_capacity_doc[] = {
		"Shares the <rate> of the first rule of the document in the file "
		"named among the subscribers by demand.",
		0};

/* clang-format off */
static rpc_export_t lc_rpc_cmds[] = {
	{"loadctl.publish", lc_rpc_publish, lc_rpc_publish_doc, 0},
	{"loadctl.withdraw", lc_rpc_withdraw, lc_rpc_withdraw_doc, 0},
	{"loadctl.reload", lc_rpc_reload, lc_rpc_reload_doc, 0},
	{"loadctl.stats", lc_rpc_stats, lc_rpc_stats_doc, 0},
	{"loadctl.rules", lc_rpc_rules, lc_rpc_rules_doc, 0},
	{"loadctl.subscriptions", lc_sub_rpc_list, lc_rpc_subscriptions_doc, 0},
	{"loadctl.resubscribe", lc_sub_rpc_resubscribe, lc_rpc_resubscribe_doc,
		0},
	{"loadctl.notifier", lc_ntf_rpc_list, lc_rpc_notifier_doc, 0},
	{"loadctl.notifier_policy", lc_ntf_rpc_policy, lc_rpc_notifier_policy_doc,
		0},
	{"loadctl.notifier_capacity", lc_ntf_rpc_capacity,
		lc_rpc_notifier_capacity_doc, 0},
	{0, 0, 0, 0}
};
/* clang-format on */

/* ---- init ---- */

static int mod_init(void)
{
	char err[1024];
	char *body;
	size_t len = 0;

	if(lc_settings.max_rules <= 0 || lc_settings.burst_ms < 0) {
		LM_ERR("max_rules must be > 0 and burst_ms >= 0\n");
		return -1;
	}
	if(lc_redirect_allow) {
		lc_settings.redirect_allow.s = lc_redirect_allow;
		lc_settings.redirect_allow.len = strlen(lc_redirect_allow);
	}
	if(lc_settings.emergency_exempt != 0 && lc_settings.emergency_exempt != 1) {
		LM_ERR("emergency_exempt must be 0 or 1\n");
		return -1;
	}
	if(lc_priority_namespaces) {
		lc_settings.priority_namespaces.s = lc_priority_namespaces;
		lc_settings.priority_namespaces.len = strlen(lc_priority_namespaces);
		lc_settings.priority_namespaces_set = 1;
	}
	if(lc_user_numbers_param == NULL || strcmp(lc_user_numbers_param, "global") == 0)
		lc_settings.sip_user_numbers = LC_SIP_USER_NUMBERS_GLOBAL;
	else if(strcmp(lc_user_numbers_param, "user-phone") == 0)
		lc_settings.sip_user_numbers = LC_SIP_USER_NUMBERS_USER_PHONE;
	else if(strcmp(lc_user_numbers_param, "digits") == 0)
		lc_settings.sip_user_numbers = LC_SIP_USER_NUMBERS_DIGITS;
	else {
		LM_ERR("sip_user_numbers \"%s\": expected global, user-phone or "
			   "digits\n",
				lc_user_numbers_param);
		return -1;
	}
	if(strcmp(lc_version(), LC_VERSION) != 0) {
		LM_ERR("libloadctl %s linked, header %s\n", lc_version(), LC_VERSION);
		return -1;
	}
	if(rpc_register_array(lc_rpc_cmds) != 0) {
		LM_ERR("cannot register the RPC commands\n");
		return -1;
	}
	if(sl_load_api(&lc_slb) != 0) {
		LM_ERR("the sl module is required (lc_reply sends through it)\n");
		return -1;
	}
	if(find_export("load_tm", NO_SCRIPT, 0) != NULL
			&& load_tm_api(&lc_tmb) == 0) {
		if(lc_tmb.register_tmcb(0, 0, TMCB_REQUEST_IN, lc_tm_request_in, 0, 0)
				<= 0) {
			LM_ERR("cannot register TMCB_REQUEST_IN\n");
			return -1;
		}
		lc_tm_loaded = 1;
	} else {
		LM_INFO("tm not loaded: window-rule admissions are released when "
				"the request route ends\n");
	}
	if(register_script_cb(lc_post_script, POST_SCRIPT_CB | REQUEST_CB, 0) < 0) {
		LM_ERR("cannot register the post-script callback\n");
		return -1;
	}
	/* the engine settings, checked once here rather than in every child */
	{
		lc_engine *probe = lc_private_engine_new();
		if(probe == NULL) {
			LM_ERR("invalid engine settings: priority_namespaces must be RFC "
				   "4412 namespace names separated by commas or spaces\n");
			return -1;
		}
		lc_engine_free(probe);
	}
	if(lc_shared_init() < 0)
		return -1;
	if(lc_policy_file && *lc_policy_file) {
		body = lc_read_file(lc_policy_file, &len);
		if(body == NULL)
			return -1;
		if(lc_store_publish(&lc_source, body, len, err, sizeof(err)) < 0) {
			LM_ERR("policy_file %s refused: %s\n", lc_policy_file, err);
			pkg_free(body);
			return -1;
		}
		pkg_free(body);
		LM_INFO("policy_file %s loaded as source %.*s (libloadctl %s)\n",
				lc_policy_file, lc_source.len, lc_source.s, lc_version());
		/* the processes forked next make their own engines */
		lc_store_drop_validator();
	}
	if(lc_sub_mod_init(&lc_tmb, lc_tm_loaded) < 0)
		return -1;
	if(lc_ntf_mod_init(&lc_tmb, lc_tm_loaded) < 0)
		return -1;
	if(lc_oc_mod_init() < 0)
		return -1;
	if(lc_stats_register() < 0)
		return -1;
	memset(&lc_last, 0, sizeof(lc_last));
	return 0;
}

static int child_init(int rank)
{
	if(rank == PROC_INIT)
		return lc_shared_init_procs();
	if(rank == PROC_MAIN)
		return lc_sub_child_init(rank) < 0 || lc_ntf_child_init(rank) < 0 ? -1
																		   : 0;
	lc_rank = rank;
	/* SIP workers (UDP, TCP, SCTP receivers, and rank-127 RPC/SIP workers)
	 * get their engine now; any other process that runs lc_classify() (timer
	 * routes, async workers) creates one on first use. */
	if(rank > 0 && lc_proc_get(rank) == NULL)
		return -1;
	return 0;
}

static void mod_destroy(void)
{
	lc_oc_destroy();
	lc_shared_destroy();
}

/* ---- KEMI ---- */

/* clang-format off */
static sr_kemi_t sr_kemi_loadctl_exports[] = {
	{ str_init("loadctl"), str_init("lc_classify"),
		SR_KEMIP_INT, ki_lc_classify,
		{ SR_KEMIP_NONE, SR_KEMIP_NONE, SR_KEMIP_NONE,
			SR_KEMIP_NONE, SR_KEMIP_NONE, SR_KEMIP_NONE }
	},
	{ str_init("loadctl"), str_init("lc_reply"),
		SR_KEMIP_INT, ki_lc_reply,
		{ SR_KEMIP_NONE, SR_KEMIP_NONE, SR_KEMIP_NONE,
			SR_KEMIP_NONE, SR_KEMIP_NONE, SR_KEMIP_NONE }
	},
	{ str_init("loadctl"), str_init("lc_handle_notify"),
		SR_KEMIP_INT, ki_lc_handle_notify,
		{ SR_KEMIP_NONE, SR_KEMIP_NONE, SR_KEMIP_NONE,
			SR_KEMIP_NONE, SR_KEMIP_NONE, SR_KEMIP_NONE }
	},
	{ str_init("loadctl"), str_init("lc_handle_subscribe"),
		SR_KEMIP_INT, ki_lc_handle_subscribe,
		{ SR_KEMIP_NONE, SR_KEMIP_NONE, SR_KEMIP_NONE,
			SR_KEMIP_NONE, SR_KEMIP_NONE, SR_KEMIP_NONE }
	},
	{ str_init("loadctl"), str_init("lc_observe"),
		SR_KEMIP_INT, ki_lc_observe,
		{ SR_KEMIP_NONE, SR_KEMIP_NONE, SR_KEMIP_NONE,
			SR_KEMIP_NONE, SR_KEMIP_NONE, SR_KEMIP_NONE }
	},
	{ str_init("loadctl"), str_init("lc_observe_uri"),
		SR_KEMIP_INT, ki_lc_observe_uri,
		{ SR_KEMIP_STR, SR_KEMIP_NONE, SR_KEMIP_NONE,
			SR_KEMIP_NONE, SR_KEMIP_NONE, SR_KEMIP_NONE }
	},
	{ str_init("loadctl"), str_init("lc_oc_forward"),
		SR_KEMIP_INT, ki_lc_oc_forward,
		{ SR_KEMIP_STR, SR_KEMIP_NONE, SR_KEMIP_NONE,
			SR_KEMIP_NONE, SR_KEMIP_NONE, SR_KEMIP_NONE }
	},
	{ str_init("loadctl"), str_init("lc_oc_reply"),
		SR_KEMIP_INT, ki_lc_oc_reply,
		{ SR_KEMIP_NONE, SR_KEMIP_NONE, SR_KEMIP_NONE,
			SR_KEMIP_NONE, SR_KEMIP_NONE, SR_KEMIP_NONE }
	},
	{ str_init("loadctl"), str_init("lc_oc_timeout"),
		SR_KEMIP_INT, ki_lc_oc_timeout,
		{ SR_KEMIP_STR, SR_KEMIP_NONE, SR_KEMIP_NONE,
			SR_KEMIP_NONE, SR_KEMIP_NONE, SR_KEMIP_NONE }
	},
	{ str_init("loadctl"), str_init("lc_oc_check"),
		SR_KEMIP_INT, ki_lc_oc_check,
		{ SR_KEMIP_NONE, SR_KEMIP_NONE, SR_KEMIP_NONE,
			SR_KEMIP_NONE, SR_KEMIP_NONE, SR_KEMIP_NONE }
	},
	{ str_init("loadctl"), str_init("lc_oc_occupancy"),
		SR_KEMIP_INT, ki_lc_oc_occupancy,
		{ SR_KEMIP_INT, SR_KEMIP_INT, SR_KEMIP_NONE,
			SR_KEMIP_NONE, SR_KEMIP_NONE, SR_KEMIP_NONE }
	},
	{ str_init("loadctl"), str_init("lc_oc_via"),
		SR_KEMIP_INT, ki_lc_oc_via,
		{ SR_KEMIP_NONE, SR_KEMIP_NONE, SR_KEMIP_NONE,
			SR_KEMIP_NONE, SR_KEMIP_NONE, SR_KEMIP_NONE }
	},
	{ {0, 0}, {0, 0}, 0, NULL, { 0, 0, 0, 0, 0, 0 } }
};
/* clang-format on */

int mod_register(char *path, int *dlflags, void *p1, void *p2)
{
	sr_kemi_modules_add(sr_kemi_loadctl_exports);
	return 0;
}
