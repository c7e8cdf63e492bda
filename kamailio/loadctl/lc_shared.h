/*
 * loadctl module - state shared between Kamailio's processes
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: shared memory: policy documents, per-process engines,
 * window-ticket mailboxes and per-process counters
 *
 * Kamailio forks its SIP workers after mod_init(), so every process owns one
 * lc_engine and one lc_worker (created in child_init() or on first use).
 * What processes share lives in Kamailio's shared memory:
 *
 * - the policy documents, one per source, with a version counter that a
 *   worker reads once per request (one atomic load) and re-publishes into its
 *   own engine when it changed;
 * - the engines' per-rule limiter cells (libloadctl's cell table, when built
 *   with LC_HAVE_SHARED_CELLS): one limit per rule across processes.
 *   lc_shared_init() formats the table before the fork and
 *   lc_proc_engine_new() creates each process's engine on it (SHARED-CELLS
 *   notes there);
 * - per process: a mailbox of window tickets another process handed back to
 *   the issuer (per-process engines, or a process without an engine) and the
 *   counters loadctl.stats sums.
 */

#ifndef _LOADCTL_SHARED_H_
#define _LOADCTL_SHARED_H_

#include <stdint.h>

#include "../../core/str.h"
#include "loadctl.h"

/* Most sources (notifiers, the policy file, RPC publishers) at once. */
#define LC_MAX_SOURCES 16
/* Longest source name. */
#define LC_SOURCE_MAX 64
/* Longest rule id kept in the per-process counters (longer ids are cut). */
#define LC_RULE_MAX 64
/* Window tickets a process's mailbox holds. */
#define LC_MAILBOX_SIZE 4096

/* Settings from the modparams. */
typedef struct lc_settings
{
	int max_rules;
	int burst_ms;
	str redirect_allow;
	int shared_cells;
	int cell_capacity;
	/* 1: emergency requests (urn:service:sos...) pass before any rule */
	int emergency_exempt;
	/* Resource-Priority namespaces that pass (when priority_namespaces_set) */
	str priority_namespaces;
	int priority_namespaces_set;
	/* an LC_SIP_USER_NUMBERS_* value (sip_user_numbers modparam) */
	int sip_user_numbers;
} lc_settings_t;

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

/* The process's engine, worker and bookkeeping (private memory). */
typedef struct lc_proc
{
	lc_engine *engine;
	lc_worker *worker;
	unsigned int version;
	unsigned int seq[LC_MAX_SOURCES];
	char names[LC_MAX_SOURCES][LC_SOURCE_MAX];
	int nnames;
	unsigned long long sync_errors;
} lc_proc_t;

extern lc_settings_t lc_settings;

int lc_shared_init(void);
/* 1 when every process's engine uses the per-rule cells in shared memory (one
 * limit across processes), 0 when limits are per process. */
int lc_shared_cells(void);
/* Cells some engine uses (a racy count), -1 without shared cells. */
int lc_shared_cells_in_use(void);
int lc_shared_init_procs(void);
void lc_shared_destroy(void);

/* A private engine (never on the shared cells): the subscriber process's. */
lc_engine *lc_private_engine_new(void);
/* Reads a whole file (at most 16 MiB) into pkg memory, NUL-terminated; NULL
 * (logged) when it cannot. */
char *lc_read_file(const char *path, size_t *len);

/* Validates `body` as a full document for `source` (checked against the other
 * sources, as an engine would apply it) and stores it; workers pick it up on
 * their next request. On failure writes why into `err` and changes nothing. */
int lc_store_publish(
		str *source, const char *body, size_t len, char *err, size_t errlen);
/* The same for a document a notifier sent (`notifier`: its URI, at most
 * LC_SOURCE_MAX - 1 bytes): the engines check its redirect targets against the
 * notifier's own domain and redirect_allow (RFC 7200 §7). lc_store_publish()
 * stores the operator's documents (policy_file, loadctl.publish): trusted. */
int lc_store_publish_from(str *source, str *notifier, const char *body,
		size_t len, char *err, size_t errlen);
/* Frees this process's validating engine (mod_init does, before the fork). */
void lc_store_drop_validator(void);
/* Removes `source`'s document. -1 if there is none. */
int lc_store_withdraw(str *source);
/* Calls cb for each stored source: name, the store version that published
 * it, its document's RFC 7200 version (-1 when this process cannot compile
 * the store), its size. Under the store lock: do not publish from cb. */
void lc_store_each(void (*cb)(void *p, const char *name, unsigned int seq,
						   long doc_version, size_t len),
		void *p);
/* The store's change counter: one more at every publish or withdraw. */
unsigned int lc_store_version(void);
/* Calls cb for each rule of the stored policy, in the order rules are tried
 * (compiled in the calling process; under the store lock): its counters in
 * that engine, or (lc_store_rule_info) what it is. -1 on failure. */
int lc_store_rules(void (*cb)(void *p, const lc_rule_stats *row), void *p);
int lc_store_rule_info(void (*cb)(void *p, const lc_rule_info *row), void *p);

/* The calling process's engine and worker, created on first use. NULL on
 * failure (logged). Brings the engine up to date with the store. */
lc_proc_t *lc_proc_get(int rank);
/* Re-publishes into this process's engine when the store changed: one atomic
 * load when it has not. */
void lc_proc_sync(lc_proc_t *p);

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

/* Window tickets: a ticket goes back to the process (engine) that issued it. */
typedef struct lc_ticket_rec
{
	lc_ticket ticket;
	int owner; /* process_no of the issuer */
	volatile int done;
} lc_ticket_rec_t;

void lc_ticket_issued(void);
/* Completes a ticket: at once when this process issued it, else through the
 * issuer's mailbox (drained before its next request). */
void lc_ticket_release(lc_ticket_rec_t *rec);
void lc_mailbox_drain(lc_proc_t *p);

#endif
