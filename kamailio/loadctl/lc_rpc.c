/*
 * loadctl module - the RPC commands
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: loadctl.* RPC commands (publish, withdraw, reload, stats,
 * rules; the subscriber's and the notifier's are theirs, listed here)
 */

#include <stdio.h>
#include <string.h>

#include "../../core/dprint.h"
#include "../../core/mem/mem.h"
#include "../../core/rpc.h"
#include "../../core/rpc_lookup.h"

#include "lc_shared.h"
#include "lc_store.h"
#include "lc_counters.h"
#include "lc_subscribe.h"
#include "lc_notify.h"
#include "lc_mod.h"
#include "lc_rpc.h"

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
		rpc->rpl_printf(ctx, "ok: source %.*s, store version %u", source.len,
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
	rpc->rpl_printf(ctx, "ok: %s as source %.*s, store version %u", lc_policy_file,
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
	rpc->rpl_printf(ctx, "ok: source %.*s withdrawn, store version %u", source.len,
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
			"synced", t->version == lc_store_version(), "store_version",
			t->version,
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
	rpc->struct_add(top, "udddJJJJJJJJJJJJ", "store_version",
			lc_store_version(),
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
		long doc_version, size_t len)
{
	lc_rpc_rules_acc_t *a = (lc_rpc_rules_acc_t *)p;
	void *st;

	if(a->rpc->array_add(a->arr, "{", &st) < 0)
		return;
	a->rpc->struct_add(st, "s", "source", name);
	if(doc_version >= 0)
		a->rpc->struct_add(st, "u", "version", (unsigned int)doc_version);
	a->rpc->struct_add(st, "ud", "store_version", seq, "bytes", (int)len);
}

static str lc_rpc_str(lc_str s)
{
	str r;
	r.s = (char *)s.ptr;
	r.len = (int)s.len;
	return r;
}

static void lc_rpc_rule_cb(void *p, const lc_rule_info *row)
{
	static const char *kinds[] = {"", "rate", "percent", "window"};
	static const char *actions[] = {"", "reject", "redirect", "drop"};
	lc_rpc_rules_acc_t *a = (lc_rpc_rules_acc_t *)p;
	str source = lc_rpc_str(row->source), rule = lc_rpc_str(row->rule);
	str text = lc_rpc_str(row->text), targets = lc_rpc_str(row->alt_targets);
	void *st;

	if(a->rpc->array_add(a->arr, "{", &st) < 0)
		return;
	a->rpc->struct_add(st, "dSuSfsS", "index", (int)row->index, "source",
			&source, "version", row->source_version, "rule", &rule, "limit",
			row->limit, "limit_kind",
			kinds[row->limit_kind <= LC_LIMIT_WINDOW ? row->limit_kind : 0],
			"text", &text);
	a->rpc->struct_add(st, "s", "alt_action",
			actions[row->alt_action <= LC_VERDICT_DROP ? row->alt_action : 0]);
	if(row->alt_action == LC_VERDICT_REDIRECT)
		a->rpc->struct_add(st, "S", "alt_targets", &targets);
}

static const char *lc_rpc_rules_doc[] = {
		"The published sources (in the order rules are tried: name, the "
		"RFC 7200 version of its document, size) and their rules as enforced "
		"(index, source, version, rule id, limit and its kind, what the "
		"excess gets, the rule on one line).",
		0};

static void lc_rpc_rules(rpc_t *rpc, void *ctx)
{
	void *top, *arr;
	lc_rpc_rules_acc_t acc;

	if(rpc->add(ctx, "{", &top) < 0)
		return;
	rpc->struct_add(top, "u", "store_version", lc_store_version());
	if(rpc->struct_add(top, "[", "sources", &arr) < 0)
		return;
	acc.rpc = rpc;
	acc.arr = arr;
	lc_store_each(lc_rpc_source_cb, &acc);
	if(rpc->struct_add(top, "[", "rules", &arr) < 0)
		return;
	/* the rule list as an engine compiles the stored documents */
	acc.arr = arr;
	if(lc_store_rule_info(lc_rpc_rule_cb, &acc) < 0)
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

int lc_rpc_register(void)
{
	if(rpc_register_array(lc_rpc_cmds) != 0) {
		LM_ERR("cannot register the RPC commands\n");
		return -1;
	}
	return 0;
}
