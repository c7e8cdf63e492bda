/*
 * loadctl module - each process's engine and what the engines share
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: shared memory set up, the process's engine and window
 * tickets (see lc_shared.h for the layout and why)
 *
 * lc_shared_init() and lc_shared_init_procs() make the shared memory before
 * the fork (the store and the slot table through lc_store.c and
 * lc_counters.c); each process then creates its engine on the shared cells,
 * keeps it up to the store and completes the window tickets it issued.
 */

#include <string.h>

#include "../../core/dprint.h"
#include "../../core/locking.h"
#include "../../core/mem/mem.h"
#include "../../core/mem/shm_mem.h"
#include "../../core/pt.h"

#include "lc_shared.h"
#include "lc_shared_impl.h"

lc_settings_t lc_settings = {
		1000, 100, STR_NULL, 1, 0, 1, STR_NULL, 0, 0, STR_NULL, 0, -1};

/* The window tickets other processes handed back to one process. */
typedef struct lc_mailbox
{
	gen_lock_t lock;
	volatile unsigned int count;
	lc_ticket items[LC_MAILBOX_SIZE];
} lc_mailbox_t;

/* The engines' per-rule cells in shared memory, when libloadctl has the
 * shared-cell ABI (build.sh defines LC_HAVE_SHARED_CELLS when the header
 * declares lc_engine_new_shared) and the shared_cells modparam is on. */
static void *_lc_cells = NULL;
#ifdef LC_HAVE_SHARED_CELLS
static size_t _lc_cells_len = 0;
#endif
static lc_mailbox_t *_lc_mailboxes = NULL; /* [nprocs] */
static int _lc_nprocs = 0;

/* This process. */
static lc_proc_t *_lc_proc = NULL;
/* the store's version word (shared memory), set before the fork */
static volatile unsigned int *_lc_store_version = NULL;

int lc_shared_cells(void)
{
	return _lc_cells != NULL;
}

int lc_shared_cells_in_use(void)
{
#ifdef LC_HAVE_SHARED_CELLS
	uint32_t n = 0;
	if(_lc_cells != NULL
			&& lc_cell_table_in_use(_lc_cells, _lc_cells_len, &n)
					   == LC_RESULT_OK)
		return (int)n;
#endif
	return -1;
}

/*!
 * \brief Creates this process's engine.
 *
 * SHARED-CELLS: with the shared-cell ABI, workers place their per-rule cells
 * in the table lc_shared_init() formatted, so every process enforces one
 * limit. The validator (RPC, mod_init) keeps a private engine: it must never
 * touch the live cells.
 */
static lc_engine *lc_proc_engine_new(int validator)
{
	lc_engine_config cfg;
	lc_engine *e = NULL;
	lc_result r;

	lc_engine_config_default(&cfg);
	cfg.shards = 1; /* one lc_worker per process */
	cfg.max_rules = (uint32_t)lc_settings.max_rules;
	cfg.burst_tolerance_ms = (uint32_t)lc_settings.burst_ms;
	if(lc_settings.redirect_allow.s && lc_settings.redirect_allow.len > 0)
		cfg.redirect_allow = lc_mkstr(
				lc_settings.redirect_allow.s, lc_settings.redirect_allow.len);
	if(!lc_settings.emergency_exempt)
		cfg.exempt_flags &= ~(uint32_t)LC_EXEMPT_EMERGENCY;
	cfg.sip_user_numbers = (lc_sip_user_numbers)lc_settings.sip_user_numbers;
	/* unset: the library's default (ets wps); set, even empty: that list */
	if(lc_settings.priority_namespaces_set)
		cfg.priority_namespaces = lc_mkstr(lc_settings.priority_namespaces.s,
				lc_settings.priority_namespaces.len);
	if(lc_settings.priority_peers.s && lc_settings.priority_peers.len > 0)
		cfg.priority_peers = lc_mkstr(
				lc_settings.priority_peers.s, lc_settings.priority_peers.len);
	if(lc_settings.to_tag_is_dialog)
		cfg.exempt_flags |= LC_EXEMPT_TO_TAG;
#ifdef LC_HAVE_SHARED_CELLS
	if(!validator && _lc_cells != NULL)
		r = lc_engine_new_shared(&cfg, _lc_cells, _lc_cells_len, &e);
	else
#endif
		r = lc_engine_new(&cfg, &e);
	if(r != LC_RESULT_OK) {
		LM_ERR("cannot create the engine: %s\n", lc_result_text(r));
		return NULL;
	}
	return e;
}

lc_engine *lc_private_engine_new(void)
{
	return lc_proc_engine_new(1);
}

int lc_shared_init(void)
{
	if(lc_store_init() < 0)
		return -1;
	_lc_store_version = lc_store_version_word();
#ifdef LC_HAVE_SHARED_CELLS
	/* SHARED-CELLS: the cell table, once, before any fork (the raw block is
	 * never freed: it lives as long as shared memory) */
	if(lc_settings.shared_cells) {
		lc_result r;
		char *raw;

		/* head room: a rule whose limit changes holds a second cell until
		 * every process has moved on (an idle process moves on at its next
		 * request) */
		if(lc_settings.cell_capacity <= 0)
			lc_settings.cell_capacity = 2 * lc_settings.max_rules;
		_lc_cells_len =
				lc_cell_table_bytes((uint32_t)lc_settings.cell_capacity);
		raw = (char *)shm_malloc(_lc_cells_len + 63);
		if(raw == NULL) {
			SHM_MEM_ERROR;
			return -1;
		}
		_lc_cells = (void *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
		r = lc_cell_table_format(_lc_cells, _lc_cells_len);
		if(r != LC_RESULT_OK) {
			LM_ERR("cannot format the shared cell table (%lu bytes): %s\n",
					(unsigned long)_lc_cells_len, lc_result_text(r));
			return -1;
		}
		LM_INFO("per-rule cells shared by every process: %lu bytes, %d "
				"cells\n",
				(unsigned long)_lc_cells_len, lc_settings.cell_capacity);
	}
#endif
	if(_lc_cells == NULL)
		LM_INFO("limits are enforced per process (no shared cells)\n");
	return 0;
}

/* Per-process arrays (the mailboxes here, the slot table in lc_counters.c):
 * sized in child_init(PROC_INIT), when every module has registered its
 * processes and before any fork. */
int lc_shared_init_procs(void)
{
	int i;

	if(_lc_mailboxes != NULL)
		return 0;
	_lc_nprocs = get_max_procs();
	_lc_mailboxes =
			(lc_mailbox_t *)shm_malloc(sizeof(lc_mailbox_t) * _lc_nprocs);
	if(_lc_mailboxes == NULL) {
		SHM_MEM_ERROR;
		return -1;
	}
	memset(_lc_mailboxes, 0, sizeof(lc_mailbox_t) * _lc_nprocs);
	for(i = 0; i < _lc_nprocs; i++) {
		if(lock_init(&_lc_mailboxes[i].lock) == NULL)
			return -1;
	}
	return lc_slots_init(_lc_nprocs);
}

void lc_shared_destroy(void)
{
	/* shared memory goes away with the server; the engines with their
	 * processes */
}

/* ---- the process's engine ---- */

lc_proc_t *lc_proc_alloc(int validator)
{
	lc_proc_t *p = (lc_proc_t *)pkg_malloc(sizeof(lc_proc_t));
	if(p == NULL) {
		PKG_MEM_ERROR;
		return NULL;
	}
	memset(p, 0, sizeof(lc_proc_t));
	p->engine = lc_proc_engine_new(validator);
	if(p->engine == NULL) {
		pkg_free(p);
		return NULL;
	}
	p->version = (unsigned int)-1;
	return p;
}

lc_proc_t *lc_proc_get(int rank)
{
	lc_result r;

	if(_lc_proc != NULL)
		return _lc_proc;
	if(!lc_store_ready())
		return NULL;
	_lc_proc = lc_proc_alloc(0);
	if(_lc_proc == NULL)
		return NULL;
	r = lc_worker_attach(_lc_proc->engine, -1, &_lc_proc->worker);
	if(r != LC_RESULT_OK) {
		LM_ERR("cannot attach a worker: %s\n", lc_result_text(r));
		lc_engine_free(_lc_proc->engine);
		pkg_free(_lc_proc);
		_lc_proc = NULL;
		return NULL;
	}
	if(lc_slot_create(rank) < 0)
		return NULL;
	lc_proc_sync(_lc_proc);
	return _lc_proc;
}

void lc_proc_sync(lc_proc_t *p)
{
	/* every request: no change since this process's last sync is one load */
	if(likely(LC_ATOMIC_LOAD(_lc_store_version) == p->version))
		return;
	if(lc_store_sync(p))
		lc_slot_rebuild(p);
}

/* ---- window tickets ---- */

void lc_ticket_issued(void)
{
	lc_proc_totals_t *t = lc_slot_own();

	if(t)
		t->tickets_issued++;
}

static void lc_ticket_complete_here(const lc_ticket *t)
{
	lc_result r = lc_complete(_lc_proc->worker, t);
	lc_proc_totals_t *own = lc_slot_own();

	if(r != LC_RESULT_OK)
		LM_ERR("completing a window ticket: %s\n", lc_result_text(r));
	else if(own)
		own->tickets_completed++;
}

void lc_ticket_release(lc_ticket_rec_t *rec)
{
	lc_mailbox_t *mb;
	lc_proc_totals_t *t;

	if(__sync_lock_test_and_set(&rec->done, 1))
		return; /* released already (final reply, then destroy) */
	/* With the window cells in shared memory any process's engine completes
	 * any ticket (the ABI says so); with per-process engines only the
	 * issuer's can. A process without an engine (tm's timer) hands it over. */
	if(_lc_proc != NULL && (rec->owner == process_no || _lc_cells != NULL)) {
		lc_ticket_complete_here(&rec->ticket);
		return;
	}
	if(_lc_mailboxes == NULL || rec->owner < 0 || rec->owner >= _lc_nprocs)
		return;
	mb = &_lc_mailboxes[rec->owner];
	lock_get(&mb->lock);
	if(mb->count < LC_MAILBOX_SIZE) {
		mb->items[mb->count] = rec->ticket;
		LC_ATOMIC_STORE(&mb->count, mb->count + 1);
		lock_release(&mb->lock);
		if((t = lc_slot_own()) != NULL)
			t->tickets_forwarded++;
		return;
	}
	lock_release(&mb->lock);
	LM_ERR("window-ticket mailbox of process %d is full: one slot lost\n",
			rec->owner);
	if((t = lc_slot_of(rec->owner)) != NULL)
		t->tickets_lost++;
}

void lc_mailbox_drain(lc_proc_t *p)
{
	lc_mailbox_t *mb;
	lc_ticket items[64];
	unsigned int n, i;

	if(_lc_mailboxes == NULL || process_no < 0 || process_no >= _lc_nprocs)
		return;
	mb = &_lc_mailboxes[process_no];
	while(LC_ATOMIC_LOAD(&mb->count) > 0) {
		lock_get(&mb->lock);
		n = mb->count < 64 ? mb->count : 64;
		memcpy(items, &mb->items[mb->count - n], sizeof(lc_ticket) * n);
		LC_ATOMIC_STORE(&mb->count, mb->count - n);
		lock_release(&mb->lock);
		for(i = 0; i < n; i++)
			lc_ticket_complete_here(&items[i]);
	}
	(void)p;
}
