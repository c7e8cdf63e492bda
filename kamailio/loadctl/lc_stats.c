/*
 * loadctl module - the module's counters as Kamailio statistics
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: Kamailio statistics (group "loadctl")
 *
 * Every statistic is a callback counter: its value is read, when asked for,
 * from the counters each process already keeps in shared memory (the ones
 * loadctl.stats and loadctl.subscriptions sum), so classification does no
 * extra work for them. They only grow (a gauge is marked as one) and cannot
 * be reset: a scraper's rate() stays right.
 */

#include <stddef.h>
#include <stdint.h>

#include "../../core/counters.h"
#include "../../core/dprint.h"

#include "lc_counters.h"
#include "lc_subscribe.h"
#include "lc_stats.h"

#define LC_FIELD(f) ((void *)(uintptr_t)offsetof(lc_proc_totals_t, f))

typedef struct lc_stat_sum
{
	size_t offset;
	unsigned long long sum;
} lc_stat_sum_t;

static void lc_stat_add(void *p, const lc_proc_totals_t *t)
{
	lc_stat_sum_t *s = (lc_stat_sum_t *)p;
	s->sum += *(const unsigned long long *)((const char *)t + s->offset);
}

static unsigned long long lc_stat_field(size_t offset)
{
	lc_stat_sum_t s;

	s.offset = offset;
	s.sum = 0;
	lc_stats_each_proc(lc_stat_add, &s);
	return s.sum;
}

static counter_val_t lc_stat_proc(counter_handle_t h, void *param)
{
	return (counter_val_t)lc_stat_field((size_t)(uintptr_t)param);
}

static counter_val_t lc_stat_tickets_open(counter_handle_t h, void *param)
{
	unsigned long long issued, done;

	issued = lc_stat_field(offsetof(lc_proc_totals_t, tickets_issued));
	done = lc_stat_field(offsetof(lc_proc_totals_t, tickets_completed))
		   + lc_stat_field(offsetof(lc_proc_totals_t, tickets_lost));
	return issued > done ? (counter_val_t)(issued - done) : 0;
}

static counter_val_t lc_stat_sub(counter_handle_t h, void *param)
{
	return (counter_val_t)lc_sub_total((lc_sub_counter_t)(uintptr_t)param);
}

typedef struct lc_stat_def
{
	const char *name;
	counter_cbk_f cbk;
	void *param;
	const char *doc;
} lc_stat_def_t;

/* clang-format off */
static const lc_stat_def_t lc_stat_defs[] = {
	{"requests", lc_stat_proc, LC_FIELD(total),
		"requests classified (lc_classify)"},
	{"exempt", lc_stat_proc, LC_FIELD(exempt),
		"requests accepted without a rule: in-dialog, ACK, CANCEL, "
		"load-control SUBSCRIBE, emergency, Resource-Priority"},
	{"exempt_emergency", lc_stat_proc, LC_FIELD(exempt_emergency),
		"emergency calls exempted (RFC 7200 section 4.8, RFC 5031)"},
	{"exempt_priority", lc_stat_proc, LC_FIELD(exempt_priority),
		"requests exempted by a Resource-Priority namespace (RFC 4412)"},
	{"unmatched", lc_stat_proc, LC_FIELD(unmatched),
		"requests no rule matched (accepted)"},
	{"matched", lc_stat_proc, LC_FIELD(matched),
		"requests a rule matched"},
	{"accepted", lc_stat_proc, LC_FIELD(accepted),
		"requests a rule matched and admitted"},
	{"rejected", lc_stat_proc, LC_FIELD(rejected),
		"requests a rule refused with 503"},
	{"redirected", lc_stat_proc, LC_FIELD(redirected),
		"requests a rule redirected (302)"},
	{"dropped", lc_stat_proc, LC_FIELD(dropped),
		"requests a rule dropped"},
	{"tickets_issued", lc_stat_proc, LC_FIELD(tickets_issued),
		"window-rule admissions (each holds a slot)"},
	{"tickets_completed", lc_stat_proc, LC_FIELD(tickets_completed),
		"window slots given back by a final response or the script's end"},
	{"tickets_lost", lc_stat_proc, LC_FIELD(tickets_lost),
		"window slots given back without a response (transaction destroyed)"},
	{"tickets_open", lc_stat_tickets_open, 0,
		"window slots held now (a gauge)"},
	{"unread_numbers", lc_stat_proc, LC_FIELD(unread_numbers),
		"unmatched requests with a number-like SIP user part that "
		"sip_user_numbers did not read as a number (tel rules may miss them)"},
	{"sync_errors", lc_stat_proc, LC_FIELD(sync_errors),
		"stored policies a process's engine refused (full cell table)"},
	{"sub_notifies", lc_stat_sub, (void *)(uintptr_t)LC_SUB_NOTIFIES,
		"NOTIFYs the subscriber handled"},
	{"sub_applied", lc_stat_sub, (void *)(uintptr_t)LC_SUB_APPLIED,
		"notifier documents applied"},
	{"sub_invalid", lc_stat_sub, (void *)(uintptr_t)LC_SUB_INVALID,
		"notifier documents refused (policy kept)"},
	{"sub_withdrawn", lc_stat_sub, (void *)(uintptr_t)LC_SUB_WITHDRAWN,
		"notifier policies withdrawn (terminated)"},
	{"sub_subscribes", lc_stat_sub, (void *)(uintptr_t)LC_SUB_SUBSCRIBES,
		"SUBSCRIBEs sent"},
	{"sub_retries", lc_stat_sub, (void *)(uintptr_t)LC_SUB_RETRIES,
		"new subscriptions after a failure"},
	{"sub_unauthenticated", lc_stat_sub,
		(void *)(uintptr_t)LC_SUB_UNAUTHENTICATED,
		"NOTIFYs (answered 403) and SUBSCRIBE responses (dropped) refused: "
		"not from a TLS notifier's verified peer"},
	{0, 0, 0, 0}
};
/* clang-format on */

int lc_stats_register(void)
{
	const lc_stat_def_t *d;
	counter_handle_t h;

	for(d = lc_stat_defs; d->name; d++) {
		if(counter_register(&h, "loadctl", d->name, CNT_F_NO_RESET, d->cbk,
				   d->param, d->doc, 0)
				< 0) {
			LM_ERR("cannot register the statistic loadctl:%s\n", d->name);
			return -1;
		}
	}
	return 0;
}
