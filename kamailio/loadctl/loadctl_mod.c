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
 * \brief loadctl :: module glue: exports, parameters, script and KEMI
 * wrappers, init, the policy file, stateless replies
 *
 * What each script function does lives in its role's file: lc_classify.c
 * (lc_classify, lc_reply, $lc), lc_subscribe.c and lc_notify.c (RFC 7200
 * subscriber and notifier), lc_oc.c (RFC 7339), lc_rpc.c (loadctl.* RPC),
 * lc_stats.c (Kamailio statistics), lc_shared.c (the policy store, the
 * per-process engines, shared cells).
 */

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../../core/sr_module.h"
#include "../../core/dprint.h"
#include "../../core/mem/mem.h"
#include "../../core/pvar.h"
#include "../../core/kemi.h"
#include "../../core/mod_fix.h"
#include "../../core/flags.h"
#include "../../core/parser/msg_parser.h"
#include "../../modules/sl/sl.h"
#include "../../modules/tm/tm_load.h"

#include "lc_shared.h"
#include "lc_store.h"
#include "lc_subscribe.h"
#include "lc_notify.h"
#include "lc_demand.h"
#include "lc_oc.h"
#include "lc_mod.h"
#include "lc_stats.h"
#include "lc_classify.h"
#include "lc_rpc.h"

MODULE_VERSION

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

char *lc_policy_file = NULL;
static int lc_policy_file_param(modparam_t type, void *val);
str lc_source = str_init("local");
static char *lc_redirect_allow = NULL;
static char *lc_priority_namespaces = NULL;
static char *lc_priority_peers = NULL;
static char *lc_user_numbers_param = NULL;

static sl_api_t lc_slb;
static struct tm_binds lc_tmb;
static int lc_tm_loaded = 0;
static int lc_rank = 0;

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
	{"priority_peers", PARAM_STRING, &lc_priority_peers},
	{"to_tag_is_dialog", PARAM_INT, &lc_settings.to_tag_is_dialog},
	{"dialog_flag", PARAM_INT, &lc_settings.dialog_flag},
	{"sip_user_numbers", PARAM_STRING, &lc_user_numbers_param},
	{"shared_cells", PARAM_INT, &lc_settings.shared_cells},
	{"cell_capacity", PARAM_INT, &lc_settings.cell_capacity},
	{"subscribe", PARAM_STRING | PARAM_USE_FUNC, (void *)lc_sub_add_param},
	{"subscribe_expires", PARAM_INT, &lc_sub_expires},
	{"subscribe_contact", PARAM_STRING, &lc_sub_contact},
	{"subscribe_from", PARAM_STRING, &lc_sub_from},
	{"subscribe_tls_name", PARAM_STRING | PARAM_USE_FUNC,
		(void *)lc_sub_tls_name_param},
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
	{"oc_hop_idle", PARAM_INT, &lc_oc_hop_idle},
	{"oc_log", PARAM_INT, &lc_oc_log},
	{0, 0, 0}
};

static pv_export_t mod_pvs[] = {
	{{"lc", (sizeof("lc") - 1)}, PVT_OTHER, pv_get_lc, 0, pv_parse_lc_name,
		0, 0, 0},
	{{0, 0}, 0, 0, 0, 0, 0, 0, 0}
};

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

static int w_lc_classify(sip_msg_t *msg, char *p1, char *p2)
{
	return ki_lc_classify(msg);
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
	return lc_demand_count(msg, NULL);
}

static int ki_lc_observe_uri(sip_msg_t *msg, str *subscriber)
{
	return lc_demand_count(msg, subscriber);
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
	if(lc_priority_peers) {
		lc_settings.priority_peers.s = lc_priority_peers;
		lc_settings.priority_peers.len = strlen(lc_priority_peers);
	}
	if(lc_settings.to_tag_is_dialog != 0 && lc_settings.to_tag_is_dialog != 1) {
		LM_ERR("to_tag_is_dialog must be 0 or 1\n");
		return -1;
	}
	if(lc_settings.dialog_flag != -1
			&& !flag_in_range((flag_t)lc_settings.dialog_flag)) {
		LM_ERR("dialog_flag must be -1 (none) or a message flag index\n");
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
	if(lc_rpc_register() < 0)
		return -1;
	if(sl_load_api(&lc_slb) != 0) {
		LM_ERR("the sl module is required (lc_reply sends through it)\n");
		return -1;
	}
	if(find_export("load_tm", NO_SCRIPT, 0) != NULL
			&& load_tm_api(&lc_tmb) == 0)
		lc_tm_loaded = 1;
	if(lc_classify_init(lc_tm_loaded ? &lc_tmb : NULL) < 0)
		return -1;
	/* the engine settings, checked once here rather than in every child */
	{
		lc_engine *probe = lc_private_engine_new();
		if(probe == NULL) {
			LM_ERR("invalid engine settings: priority_namespaces must be RFC "
				   "4412 namespace names separated by commas or spaces, "
				   "priority_peers ADDRESS[/PREFIX] blocks\n");
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
	if(lc_oc_mod_init(lc_tm_loaded ? &lc_tmb : NULL) < 0)
		return -1;
	if(lc_stats_register() < 0)
		return -1;
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
