/*
 * loadctl module - feedback overload control (RFC 7339 / RFC 7415)
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: overload control (see lc_oc.h)
 */

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../../core/config.h"
#include "../../core/dprint.h"
#include "../../core/globals.h"
#include "../../core/ip_addr.h"
#include "../../core/data_lump.h"
#include "../../core/mem/mem.h"
#include "../../core/mem/shm_mem.h"
#include "../../core/parser/parse_via.h"
#include "../../core/xavp.h"
#include "../../core/ut.h"
#include "../../modules/tm/tm_load.h"

#include "lc_shared.h"
#include "lc_oc.h"
#include "lc_classify.h"
#include "lc_mod.h"

int lc_oc_enable = 0;
int lc_oc_hops = 64;
int lc_oc_validity_ms = 500;
int lc_oc_tau_priority = 100;
int lc_oc_hop_idle = 300;
int lc_oc_log = 0;

/* The hop table (shared memory, 64-byte aligned) and the load signal. */
static char *_lc_oc_raw = NULL;
static void *_lc_oc_table = NULL;
static size_t _lc_oc_len = 0;
/* generation (22 bits) | measured ppm (21 bits) | target ppm (21 bits) */
static uint64_t *_lc_oc_load = NULL;

/* This process's client, shard and server (created on first use). */
static lc_oc_client *_lc_oc_client = NULL;
static lc_oc_shard *_lc_oc_shard = NULL;
static lc_oc_server *_lc_oc_server = NULL;
static uint64_t _lc_oc_load_seen = 0;

/* The name of the core's xavp whose fields go into the Via of requests sent
 * (the core parameter xavp_via_params, set here when the script left it
 * empty). */
static char _lc_oc_xavp_name[] = "lc_oc_via";
/* tm's API (NULL without tm): lc_oc_via() finds the request a reply answers */
static struct tm_binds *_lc_oc_tmb = NULL;
/* The client's Via with this server's values, written by lc_oc_check() for a
 * client on a connection into the request's xavps, which tm keeps with the
 * transaction for its reply route (lc_oc_via()). */
static str _lc_oc_srv_xavp = str_init("loadctl_oc");
static str _lc_oc_srv_via = str_init("via");

#define LC_OC_PPM_MASK ((1ULL << 21) - 1)

/* The algorithms offered downstream (RFC 7339 §4.2, RFC 7415). Before 5.8, Kamailio's Via
 * parser takes the comma of oc-algo="loss,rate" for the end of the Via and refuses the
 * message, and a next hop without overload control echoes the parameters back in its
 * replies, to this Kamailio too: loss only there. 5.8 keeps a quoted value's comma inside it. */
#if defined(VERSIONVAL) && VERSIONVAL >= 5008000
#define LC_OC_OFFER "\"loss,rate\""
#define LC_OC_OFFER_ALGORITHMS (LC_OC_ALGORITHMS_LOSS | LC_OC_ALGORITHMS_RATE)
#else
#define LC_OC_OFFER "\"loss\""
#define LC_OC_OFFER_ALGORITHMS LC_OC_ALGORITHMS_LOSS
#endif

static uint64_t lc_oc_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int lc_oc_mod_init(struct tm_binds *tmb)
{
	size_t len;

	if(lc_oc_enable == 0)
		return 0;
	_lc_oc_tmb = tmb;
	if(lc_oc_enable != 1) {
		LM_ERR("overload_control must be 0 or 1\n");
		return -1;
	}
	if(lc_oc_hops < 1 || lc_oc_hops > 1048576) {
		LM_ERR("oc_hops must be between 1 and 1048576\n");
		return -1;
	}
	if(lc_oc_hop_idle < 64) {
		LM_ERR("oc_hop_idle must be at least 64 (seconds)\n");
		return -1;
	}
	if(lc_oc_validity_ms < 1 || lc_oc_tau_priority < 10
			|| lc_oc_tau_priority > 1000000) {
		LM_ERR("oc_validity_ms must be > 0 and oc_tau_priority between 10 "
			   "and 1000000\n");
		return -1;
	}
	len = lc_oc_table_bytes((uint32_t)lc_oc_hops);
	_lc_oc_raw = (char *)shm_malloc(len + 63);
	_lc_oc_load = (uint64_t *)shm_malloc(sizeof(uint64_t));
	if(_lc_oc_raw == NULL || _lc_oc_load == NULL) {
		SHM_MEM_ERROR;
		return -1;
	}
	_lc_oc_table = (void *)(((uintptr_t)_lc_oc_raw + 63) & ~(uintptr_t)63);
	memset(_lc_oc_table, 0, len);
	_lc_oc_len = len;
	*_lc_oc_load = 0;
	if(_ksr_xavp_via_params.len <= 0) {
		_ksr_xavp_via_params.s = _lc_oc_xavp_name;
		_ksr_xavp_via_params.len = strlen(_lc_oc_xavp_name);
		LM_INFO("xavp_via_params set to %s for the oc Via parameters\n",
				_lc_oc_xavp_name);
	}
	return 0;
}

void lc_oc_destroy(void)
{
	if(_lc_oc_raw)
		shm_free(_lc_oc_raw);
	if(_lc_oc_load)
		shm_free(_lc_oc_load);
	_lc_oc_raw = NULL;
	_lc_oc_load = NULL;
}

/* Logged once per process: a configuration calling an lc_oc_* function with
 * overload control off would otherwise log an error per message. */
static void lc_oc_off(const char *fn)
{
	static int warned = 0;

	if(warned)
		return;
	warned = 1;
	LM_ERR("%s(): overload control is off: set modparam(\"loadctl\", "
		   "\"overload_control\", 1) (the lc_oc_* functions return -4 "
		   "until then; logged once per process)\n",
			fn);
}

/* This process's client, shard and server; -1 (logged) when overload control
 * is off or they cannot be made. */
static int lc_oc_proc(const char *fn)
{
	lc_oc_client_config cc;
	lc_oc_server_config sc;
	lc_result r;

	if(_lc_oc_server != NULL)
		return 0;
	if(_lc_oc_table == NULL) {
		lc_oc_off(fn);
		return -1;
	}
	lc_oc_client_config_default(&cc);
	cc.algorithms = LC_OC_OFFER_ALGORITHMS;
	/* In-dialog requests come in bursts (BYEs after answered calls): a
	 * tolerance of oc_tau_priority times T for them (RFC 7415's TAU2 is 10 T;
	 * the long-term rate stays 1/T). */
	cc.tau_priority_milli = (uint32_t)lc_oc_tau_priority * 1000u;
	cc.hop_idle_ns = (uint64_t)lc_oc_hop_idle * 1000000000u;
	r = lc_oc_client_new_shared(&cc, _lc_oc_table, _lc_oc_len, &_lc_oc_client);
	if(r == LC_RESULT_OK)
		r = lc_oc_shard_new(_lc_oc_client, (uint64_t)my_pid(), &_lc_oc_shard);
	if(r == LC_RESULT_OK)
		r = lc_oc_server_config_default(&sc);
	if(r == LC_RESULT_OK) {
		/* loss: a percentage each process applies to its own share */
		sc.preference = LC_OC_ALGORITHM_LOSS;
		sc.validity_ms = (uint64_t)lc_oc_validity_ms;
		r = lc_oc_server_new(&sc, &_lc_oc_server);
	}
	if(r != LC_RESULT_OK) {
		LM_ERR("cannot start overload control: %s\n", lc_result_text(r));
		return -1;
	}
	return 0;
}

/* "IP:PORT" of a message's source. */
static int lc_oc_source(sip_msg_t *msg, char *buf, size_t cap)
{
	int n = snprintf(buf, cap, "%s:%u", ip_addr2a(&msg->rcv.src_ip),
			(unsigned)msg->rcv.src_port);
	return n > 0 && (size_t)n < cap ? n : -1;
}

static lc_str lc_oc_s(const char *s, int len)
{
	lc_str out;
	out.ptr = (const uint8_t *)s;
	out.len = len > 0 ? (size_t)len : 0;
	return out;
}

/* Replaces `len` bytes at `at` in msg's buffer (Via text) by what is left of
 * them without the oc parameters `which` names (lc_oc_via_strip): 1 when some
 * were taken out, 0 when there were none (or where the parameters end cannot
 * be told: then nobody can read an oc value in it either), -1 on an error
 * (logged). A request's lumps are not typed HDR_VIA_T: tm drops those when it
 * clones the request (its own Via lumps, rebuilt for every branch). */
static int lc_oc_strip_range(sip_msg_t *msg, char *at, int len, lc_oc_strip which)
{
	size_t cap, written = 0;
	char *out;
	struct lump *l;
	enum _hdr_types_t type;
	lc_result r;

	while(len > 0 && (at[0] == ',' || at[0] == ' ' || at[0] == '\t')) {
		at++;
		len--;
	}
	while(len > 0
			&& (at[len - 1] == '\r' || at[len - 1] == '\n' || at[len - 1] == ' '
					|| at[len - 1] == '\t' || at[len - 1] == ','))
		len--;
	if(len <= 0)
		return 0;
	/* joining via-parms with ", " may add a byte per comma */
	cap = (size_t)len * 2 + 16;
	out = (char *)pkg_malloc(cap);
	if(out == NULL) {
		PKG_MEM_ERROR;
		return -1;
	}
	r = lc_oc_via_strip(lc_oc_s(at, len), which, (uint8_t *)out, cap, &written);
	if(r != LC_RESULT_OK) {
		pkg_free(out);
		return r == LC_RESULT_EMPTY || r == LC_RESULT_SIP_BAD_VIA ? 0 : -1;
	}
	type = which == LC_OC_STRIP_REQUEST ? HDR_OTHER_T : HDR_VIA_T;
	l = del_lump(msg, at - msg->buf, len, type);
	if(l == NULL || insert_new_lump_after(l, out, (int)written, type) == NULL) {
		LM_ERR("cannot take the oc parameters out of a Via\n");
		pkg_free(out);
		return -1;
	}
	return 1;
}

/* RFC 7339 §5.6: "a SIP proxy SHOULD strip the overload control parameters
 * inserted by the client before proxying the request further downstream" —
 * from the client's via-parm (the top one), once per request. */
static void lc_oc_strip_request(sip_msg_t *msg)
{
	static unsigned int stripped_id = 0;
	static int stripped_pid = 0;

	if(stripped_id == msg->id && stripped_pid == msg->pid)
		return;
	if(parse_headers(msg, HDR_VIA1_F, 0) < 0 || msg->via1 == NULL)
		return;
	stripped_id = msg->id;
	stripped_pid = msg->pid;
	(void)lc_oc_strip_range(
			msg, msg->via1->bstart, msg->via1->bsize, LC_OC_STRIP_REQUEST);
}

/* The category of a request from `origin` (lc_oc_category_sip's), from one
 * scan shared by lc_oc_check() and lc_oc_forward(): a proxy that is a server
 * upstream and a client downstream asks both about the same request. The scan
 * reads a private copy of the message, since a scan borrows the bytes it read
 * and the script may rewrite msg->buf in place in between (msg_apply_changes()
 * keeps msg->id); it is taken again when the bytes differ. The origin is not
 * kept: the script may set the dialog flag between the two calls. */
static lc_result lc_oc_category_of(lc_engine *engine, sip_msg_t *msg,
		const lc_sip_options *origin, lc_oc_category *cat)
{
	static char copy[BUF_SIZE];
	static int copy_len = -1;
	static lc_result scanned = LC_RESULT_EMPTY;
	static lc_scanned_sip scan;

	if(msg->len <= 0 || (size_t)msg->len > sizeof(copy))
		return lc_oc_category_sip(engine, (const uint8_t *)msg->buf,
				(size_t)msg->len, origin, cat);
	if(copy_len != msg->len || memcmp(copy, msg->buf, (size_t)msg->len) != 0) {
		memcpy(copy, msg->buf, (size_t)msg->len);
		copy_len = msg->len;
		scanned = lc_sip_scan((const uint8_t *)copy, (size_t)copy_len, &scan);
	}
	if(scanned != LC_RESULT_OK)
		return scanned; /* the code lc_oc_category_sip gives the message */
	return lc_oc_category_scanned(engine, &scan, origin, cat);
}

/* The hop of `dst` ("IP:PORT") at `now`: added if new when `add`, else only
 * found (a response or timeout from a destination never sent to takes no
 * cell). -1 when there is none: logged when the table is full. */
static int lc_oc_hop(str *dst, int add, uint64_t now, uint32_t *hop)
{
	lc_str key = lc_oc_s(dst->s, dst->len);
	lc_result r = add ? lc_oc_client_hop(_lc_oc_client, key, now, hop)
					  : lc_oc_client_find(_lc_oc_client, key, hop);
	if(r != LC_RESULT_OK) {
		LM_ERR("overload control: no hop for %.*s: %s\n", dst->len, dst->s,
				lc_result_text(r));
		return -1;
	}
	return add || *hop != LC_OC_NO_HOP ? 0 : -1;
}

/* Makes the core add `oc;oc-algo=LC_OC_OFFER` to the Via of the request sent
 * (RFC 7339 §4.1, §4.2): fields of the xavp named by xavp_via_params. */
static int lc_oc_add_via_params(sip_msg_t *msg)
{
	static str oc = str_init("oc");
	static str algo = str_init("oc-algo");
	static str empty = str_init("");
	static str list = str_init(LC_OC_OFFER);

	if(xavp_set_child_sval(&_ksr_xavp_via_params, &oc, &empty) < 0
			|| xavp_set_child_sval(&_ksr_xavp_via_params, &algo, &list) < 0) {
		LM_ERR("cannot set the oc Via parameters\n");
		return -1;
	}
	msg->msg_flags |= FL_ADD_XAVP_VIA_PARAMS;
	return 0;
}

int ki_lc_oc_forward(sip_msg_t *msg, str *dst)
{
	lc_sip_options origin;
	lc_proc_t *p;
	lc_oc_category cat = LC_OC_CATEGORY_NONE;
	lc_oc_verdict v = LC_OC_VERDICT_FORWARD;
	uint32_t hop;
	uint64_t now;
	lc_result r;

	if(msg->first_line.type != SIP_REQUEST) {
		LM_ERR("lc_oc_forward() on a reply\n");
		return -4;
	}
	now = lc_oc_now();
	if(lc_oc_proc("lc_oc_forward") < 0 || lc_oc_hop(dst, 1, now, &hop) < 0)
		return -4;
	p = lc_proc_get(lc_current_rank());
	if(p == NULL)
		return -4;
	lc_msg_origin(msg, &origin);
	r = lc_oc_category_of(p->engine, msg, &origin, &cat);
	if(r != LC_RESULT_OK) {
		LM_ERR("lc_oc_forward(): %s\n", lc_result_text(r));
		return -4;
	}
	/* ACK and CANCEL (category NONE) always go, and count in the mix the
	 * loss algorithm converts oc with (RFC 7339 §7.2's second category) */
	r = lc_oc_decide(_lc_oc_shard, hop, now, cat, &v);
	if(r != LC_RESULT_OK) {
		LM_ERR("lc_oc_forward(): %s\n", lc_result_text(r));
		return -4;
	}
	switch(v) {
		case LC_OC_VERDICT_FORWARD:
		case LC_OC_VERDICT_PROBE:
			if(lc_oc_add_via_params(msg) < 0)
				return -4;
			lc_oc_strip_request(msg);
			return v == LC_OC_VERDICT_PROBE ? 2 : 1;
		case LC_OC_VERDICT_SHED_LOSS:
			return -1;
		case LC_OC_VERDICT_SHED_RATE:
			return -2;
		default:
			return -3;
	}
}

int ki_lc_oc_reply(sip_msg_t *msg)
{
	char src[64];
	str key;
	uint32_t hop;
	lc_oc_applied applied;
	lc_result r;

	if(msg->first_line.type != SIP_REPLY) {
		LM_ERR("lc_oc_reply() on a request\n");
		return -4;
	}
	if(lc_oc_proc("lc_oc_reply") < 0)
		return -4;
	if(parse_headers(msg, HDR_VIA1_F, 0) < 0 || msg->h_via1 == NULL)
		return -4;
	key.len = lc_oc_source(msg, src, sizeof(src));
	key.s = src;
	if(key.len < 0)
		return -4;
	if(lc_oc_hop(&key, 0, 0, &hop) < 0)
		return -2; /* not a hop lc_oc_forward() sent to */
	r = lc_oc_client_on_response(_lc_oc_client, hop, lc_oc_now(),
			lc_oc_s(msg->h_via1->body.s, msg->h_via1->body.len), &applied);
	if(r != LC_RESULT_OK) {
		LM_WARN("overload-control feedback from %s refused: %s\n", src,
				lc_result_text(r));
		return -1;
	}
	return 1;
}

int ki_lc_oc_timeout(sip_msg_t *msg, str *dst)
{
	uint32_t hop;

	if(lc_oc_proc("lc_oc_timeout") < 0)
		return -4;
	if(lc_oc_hop(dst, 0, 0, &hop) < 0)
		return -2; /* not a hop lc_oc_forward() sent to */
	lc_oc_client_on_timeout(_lc_oc_client, hop, lc_oc_now());
	return 1;
}

/* Picks up a newer load signal from shared memory. */
static void lc_oc_sync_load(uint64_t now)
{
	uint64_t w = __atomic_load_n(_lc_oc_load, __ATOMIC_ACQUIRE);
	if(w == 0 || w == _lc_oc_load_seen)
		return;
	_lc_oc_load_seen = w;
	lc_oc_server_report_occupancy(_lc_oc_server, now,
			(uint32_t)((w >> 21) & LC_OC_PPM_MASK), (uint32_t)(w & LC_OC_PPM_MASK));
}

int ki_lc_oc_occupancy(sip_msg_t *msg, int measured_ppm, int target_ppm)
{
	uint64_t old, gen, w;

	if(_lc_oc_load == NULL) {
		lc_oc_off("lc_oc_occupancy");
		return -4;
	}
	if(measured_ppm < 0 || target_ppm <= 0
			|| (uint64_t)target_ppm > LC_OC_PPM_MASK) {
		LM_ERR("lc_oc_occupancy(%d, %d): measured 0 or more ppm, target 1 "
			   "to 2097151 ppm\n",
				measured_ppm, target_ppm);
		return -4;
	}
	/* a load past what the shared word holds (209 %) is reported as that
	 * much: refusing it would switch the law off when it is needed most;
	 * the law's next reports take it the rest of the way down */
	if((uint64_t)measured_ppm > LC_OC_PPM_MASK)
		measured_ppm = (int)LC_OC_PPM_MASK;
	old = __atomic_load_n(_lc_oc_load, __ATOMIC_ACQUIRE);
	gen = ((old >> 42) + 1) & ((1ULL << 22) - 1);
	if(gen == 0)
		gen = 1;
	w = gen << 42 | (uint64_t)measured_ppm << 21 | (uint64_t)target_ppm;
	__atomic_store_n(_lc_oc_load, w, __ATOMIC_RELEASE);
	return 1;
}

/* The length of via-parm `v` without what ends it (a comma, white space). */
static int lc_oc_via_len(struct via_body *v)
{
	int len = v->bsize;
	while(len > 0
			&& (v->bstart[len - 1] == '\r' || v->bstart[len - 1] == '\n'
					|| v->bstart[len - 1] == ' ' || v->bstart[len - 1] == '\t'
					|| v->bstart[len - 1] == ','))
		len--;
	return len;
}

/* A client on a connection (TCP, TLS, ...) has all its requests read by the
 * process that reads the connection, and their replies by whichever reads the
 * next hop's: this process's values for it go with the transaction, for
 * lc_oc_via() to write when the process that relays a reply does not know the
 * client. Nothing for a client that does not take part. */
static void lc_oc_keep_via(
		uint64_t now, const char *src, int n, struct via_body *v)
{
	char out[1024];
	size_t written = 0;
	sr_xval_t val;

	if(lc_oc_server_write_via(_lc_oc_server, now, lc_oc_s(src, n),
			   lc_oc_s(v->bstart, lc_oc_via_len(v)), (uint8_t *)out,
			   sizeof(out), &written)
					!= LC_RESULT_OK
			|| written == 0)
		return;
	memset(&val, 0, sizeof(val));
	val.type = SR_XTYPE_STR;
	val.v.s.s = out;
	val.v.s.len = (int)written;
	if(xavp_add_xavp_value(&_lc_oc_srv_xavp, &_lc_oc_srv_via, &val,
			   xavp_get_crt_list())
			== NULL)
		LM_ERR("cannot keep the overload-control values for %.*s\n", n, src);
}

int ki_lc_oc_check(sip_msg_t *msg)
{
	char src[64];
	int n;
	uint64_t now;
	lc_oc_admission adm = LC_OC_ADMISSION_ADMIT;
	lc_oc_category cat = LC_OC_CATEGORY_NONE;
	lc_sip_options origin;
	lc_proc_t *p;
	lc_str via = {NULL, 0};

	if(msg->first_line.type != SIP_REQUEST) {
		LM_ERR("lc_oc_check() on a reply\n");
		return -4;
	}
	if(lc_oc_proc("lc_oc_check") < 0)
		return -4;
	p = lc_proc_get(lc_current_rank());
	if(p == NULL)
		return -4;
	lc_msg_origin(msg, &origin);
	if(lc_oc_category_of(p->engine, msg, &origin, &cat) != LC_RESULT_OK)
		return -4;
	if(cat == LC_OC_CATEGORY_NONE)
		return 1; /* ACK, CANCEL: part of a transaction already admitted */
	n = lc_oc_source(msg, src, sizeof(src));
	if(n < 0)
		return -4;
	if(parse_headers(msg, HDR_VIA1_F, 0) >= 0 && msg->h_via1 != NULL)
		via = lc_oc_s(msg->h_via1->body.s, msg->h_via1->body.len);
	now = lc_oc_now();
	lc_oc_sync_load(now);
	/* tm absorbs retransmissions of known transactions before the script
	 * runs: what reaches it is new */
	if(lc_oc_server_on_request(_lc_oc_server, now, lc_oc_s(src, n), via,
			   LC_CLASS_ORIGINAL, cat, &adm)
			!= LC_RESULT_OK)
		return -4;
	if(adm == LC_OC_ADMISSION_REJECT)
		return -1;
	if(msg->rcv.proto != PROTO_UDP && msg->via1 != NULL)
		lc_oc_keep_via(now, src, n, msg->via1);
	lc_oc_strip_request(msg);
	return 1;
}

/* RFC 7339 §5.4 for a reply relayed upstream: the oc values in every Via below
 * the client's (`v`, the second via-parm) taken out; -1 on an error (logged). */
static int lc_oc_strip_below(sip_msg_t *msg, struct via_body *v)
{
	struct hdr_field *h;
	char *end;

	if(parse_headers(msg, HDR_EOH_F, 0) < 0 || msg->h_via2 == NULL)
		return 0;
	/* further via-parms of the client's own header line */
	end = msg->h_via2->body.s + msg->h_via2->body.len;
	if(v->bstart + v->bsize < end
			&& lc_oc_strip_range(msg, v->bstart + v->bsize,
					   (int)(end - (v->bstart + v->bsize)), LC_OC_STRIP_RESPONSE)
					   < 0)
		return -1;
	for(h = msg->h_via2->next; h != NULL; h = h->next) {
		if(h->type == HDR_VIA_T
				&& lc_oc_strip_range(msg, h->body.s, h->body.len, LC_OC_STRIP_RESPONSE)
						   < 0)
			return -1;
	}
	return 0;
}

int ki_lc_oc_via(sip_msg_t *msg)
{
	struct via_body *v;
	char key[96];
	char *out, *stripped;
	size_t written = 0, cap, slen = 0;
	lc_str client;
	int len, n;
	str host;
	unsigned port;
	struct lump *l;
	struct cell *t;
	sr_xavp_t *kept;
	lc_result r;

	if(msg->first_line.type != SIP_REPLY) {
		LM_ERR("lc_oc_via() on a request\n");
		return -4;
	}
	if(lc_oc_proc("lc_oc_via") < 0)
		return -4;
	if(parse_headers(msg, HDR_VIA2_F, 0) < 0 || msg->via2 == NULL)
		return 1; /* no upstream Via: nothing to write */
	v = msg->via2;
	/* the client, as lc_oc_check() knew it: the source address and port of
	 * the request the transaction answers (over TCP and TLS a connection's
	 * port, which no Via names); without a transaction, the Via's (received /
	 * rport when it has them) */
	t = _lc_oc_tmb ? _lc_oc_tmb->t_gett() : NULL;
	if(t != NULL && t != T_UNDEFINED && t->uas.request != NULL) {
		n = snprintf(key, sizeof(key), "%s:%u",
				ip_addr2a(&t->uas.request->rcv.src_ip),
				(unsigned)t->uas.request->rcv.src_port);
	} else {
		host = v->received && v->received->value.len ? v->received->value
													  : v->host;
		port = v->port ? v->port : 5060;
		if(v->rport && v->rport->value.len > 0) {
			unsigned int rp = 0;
			if(str2int(&v->rport->value, &rp) == 0)
				port = rp;
		}
		n = snprintf(key, sizeof(key), "%.*s:%u", host.len, host.s, port);
	}
	if(n <= 0 || (size_t)n >= sizeof(key))
		return -4;
	len = lc_oc_via_len(v);
	/* RFC 7339 §5.4: the Vias below this proxy's go upstream without the oc
	 * values a downstream server put into them; the client's then gets this
	 * server's own, if it takes part */
	if(lc_oc_strip_below(msg, v) < 0)
		return -4;
	client = lc_oc_s(v->bstart, len);
	stripped = (char *)pkg_malloc(2 * (size_t)len + 16);
	if(stripped == NULL) {
		PKG_MEM_ERROR;
		return -4;
	}
	r = lc_oc_via_strip(client, LC_OC_STRIP_RESPONSE, (uint8_t *)stripped,
			2 * (size_t)len + 16, &slen);
	if(r == LC_RESULT_OK) {
		client = lc_oc_s(stripped, (int)slen);
	} else if(r != LC_RESULT_EMPTY && r != LC_RESULT_SIP_BAD_VIA) {
		pkg_free(stripped);
		return -4;
	}
	cap = client.len + 128;
	out = (char *)pkg_malloc(cap);
	if(out == NULL) {
		PKG_MEM_ERROR;
		pkg_free(stripped);
		return -4;
	}
	r = lc_oc_server_write_via(_lc_oc_server, lc_oc_now(), lc_oc_s(key, n),
			client, (uint8_t *)out, cap, &written);
	if(r == LC_RESULT_EMPTY
			&& (kept = xavp_get_child_with_sval(
						&_lc_oc_srv_xavp, &_lc_oc_srv_via))
					   != NULL
			&& kept->val.v.s.len > 0) {
		/* a client this process has not heard: what the process that took
		 * its request wrote then */
		pkg_free(out);
		cap = (size_t)kept->val.v.s.len;
		out = (char *)pkg_malloc(cap);
		if(out == NULL) {
			PKG_MEM_ERROR;
			pkg_free(stripped);
			return -4;
		}
		memcpy(out, kept->val.v.s.s, cap);
		written = cap;
		r = LC_RESULT_OK;
	}
	if(r == LC_RESULT_EMPTY && client.ptr == (const uint8_t *)stripped) {
		/* a client that does not take part: its Via without the values */
		memcpy(out, stripped, slen);
		written = slen;
		r = LC_RESULT_OK;
	}
	pkg_free(stripped);
	if(r != LC_RESULT_OK) {
		pkg_free(out);
		return r == LC_RESULT_EMPTY ? 1 : -4;
	}
	l = del_lump(msg, v->bstart - msg->buf, len, HDR_VIA_T);
	if(l == NULL || insert_new_lump_after(l, out, (int)written, HDR_VIA_T) == NULL) {
		LM_ERR("cannot rewrite the upstream Via\n");
		pkg_free(out);
		return -4;
	}
	if(lc_oc_log) {
		/* what this server told the client, for interop traces (README 1.3.25) */
		str cid, cs;
		/* a reply without them is logged with empty fields */
		(void)parse_headers(msg, HDR_CALLID_F | HDR_CSEQ_F, 0);
		cid = msg->callid ? msg->callid->body : (str){"", 0};
		cs = msg->cseq ? msg->cseq->body : (str){"", 0};
		LM_INFO("oc-sent|%s|%.*s|%.*s|%u|%.*s\n", key, cid.len, cid.s, cs.len,
				cs.s, msg->first_line.u.reply.statuscode, (int)written, out);
	}
	return 1;
}
