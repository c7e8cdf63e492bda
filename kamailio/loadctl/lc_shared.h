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
 * \brief loadctl :: shared memory: settings, per-process engines, the shared
 * cell table and window-ticket mailboxes
 *
 * Kamailio forks its SIP workers after mod_init(), so every process owns one
 * lc_engine and one lc_worker (created in child_init() or on first use).
 * What processes share lives in Kamailio's shared memory:
 *
 * - the policy documents, one per source (lc_store.h), which each process
 *   re-publishes into its own engine when they changed (lc_proc_sync());
 * - the engines' per-rule limiter cells (libloadctl's cell table, when built
 *   with LC_HAVE_SHARED_CELLS): one limit per rule across processes.
 *   lc_shared_init() formats the table before the fork and
 *   lc_proc_engine_new() creates each process's engine on it (SHARED-CELLS
 *   notes there);
 * - per process: a mailbox of window tickets another process handed back to
 *   the issuer (per-process engines, or a process without an engine) and the
 *   counters loadctl.stats sums (lc_counters.h).
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
	/* address blocks whose Resource-Priority counts (priority_peers) */
	str priority_peers;
	/* 1: a To tag alone makes a request in-dialog (to_tag_is_dialog) */
	int to_tag_is_dialog;
	/* the message flag a script sets on requests of dialogs it keeps
	 * (dialog_flag; -1: none) */
	int dialog_flag;
} lc_settings_t;

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

/* The calling process's engine and worker, created on first use. NULL on
 * failure (logged). Brings the engine up to date with the store. */
lc_proc_t *lc_proc_get(int rank);
/* Re-publishes into this process's engine when the store changed: one atomic
 * load when it has not. */
void lc_proc_sync(lc_proc_t *p);

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
