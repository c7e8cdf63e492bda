/*
 * loadctl module - what each process counts, for loadctl.stats
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: per-process counters in shared memory
 *
 * Every process that classifies has a slot in shared memory: its totals and
 * one row per rule of its engine. Only that process writes it, without a lock
 * on the request path; loadctl.stats and the Kamailio statistics read every
 * slot and sum them.
 */

#ifndef _LOADCTL_COUNTERS_H_
#define _LOADCTL_COUNTERS_H_

#include "loadctl.h"
#include "lc_shared.h"

/* Longest rule id kept in the per-process counters (longer ids are cut). */
#define LC_RULE_MAX 64

/* One rule's counters in a process's slot. */
typedef struct lc_rule_row
{
	char source[LC_SOURCE_MAX];
	char rule[LC_RULE_MAX];
	unsigned long long matched;
	unsigned long long accepted;
	unsigned long long rejected;
	unsigned long long redirected;
	unsigned long long dropped;
} lc_rule_row_t;

/* What loadctl.stats reads of one process. */
typedef struct lc_proc_totals
{
	int pid;
	int rank;
	unsigned int version; /* store version the process last synced to */
	unsigned long long generation;
	unsigned long long total;
	unsigned long long exempt;
	/* of which: emergency calls, Resource-Priority namespaces */
	unsigned long long exempt_emergency;
	unsigned long long exempt_priority;
	unsigned long long unmatched;
	unsigned long long matched;
	unsigned long long accepted;
	unsigned long long rejected;
	unsigned long long redirected;
	unsigned long long dropped;
	unsigned long long tickets_issued;
	unsigned long long tickets_completed;
	unsigned long long tickets_lost;
	/* tickets this process released into another process's mailbox */
	unsigned long long tickets_forwarded;
	/* stored documents this process's engine refused (a full cell table) */
	unsigned long long sync_errors;
	/* of unmatched: a number-like SIP user part sip_user_numbers did not read */
	unsigned long long unread_numbers;
} lc_proc_totals_t;

/* Counting for loadctl.stats (this process's slot). */
void lc_count(const lc_decision *d);
/* This process's engine's unread_numbers total (lc_stats), after an unmatched
 * request. */
void lc_count_unread(unsigned long long total);
/* Calls cb with every process's totals, then with each rule summed over all
 * processes (by source and rule id). */
void lc_stats_each_proc(
		void (*cb)(void *p, const lc_proc_totals_t *t), void *p);
int lc_stats_rules(lc_rule_row_t **rows, int *n);

#endif
