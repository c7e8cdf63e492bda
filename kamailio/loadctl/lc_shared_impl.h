/*
 * loadctl module - what the shared-memory files offer each other
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: between lc_shared.c, lc_store.c and lc_counters.c
 *
 * The document store (lc_store.c) and the per-process counters
 * (lc_counters.c) each keep their shared memory to themselves; lc_shared.c,
 * which makes each process's engine, sets them up and brings them along
 * through these calls. No variable crosses the files. Only those three
 * files include this header.
 */

#ifndef _LOADCTL_SHARED_IMPL_H_
#define _LOADCTL_SHARED_IMPL_H_

#include <stddef.h>
#include <stdint.h>

#include "loadctl.h"
#include "lc_shared.h"
#include "lc_counters.h"

#define LC_ATOMIC_LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define LC_ATOMIC_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

static inline lc_str lc_mkstr(const char *s, size_t len)
{
	lc_str r;
	r.ptr = (const uint8_t *)s;
	r.len = len;
	return r;
}

/* lc_shared.c: a process's engine and bookkeeping in pkg memory, not yet
 * synced; `validator`: a private engine, never on the shared cells. NULL on
 * failure (logged). */
lc_proc_t *lc_proc_alloc(int validator);

/* lc_store.c: the store in shared memory (mod_init, before the fork). */
int lc_store_init(void);
/* 1 once lc_store_init() made the store. */
int lc_store_ready(void);
/* Brings p's engine up to the store: 0 when it was (one atomic load), 1 when
 * it re-published. */
int lc_store_sync(lc_proc_t *p);
/* the store's version, bumped on every change: read on every request without
 * a call (lc_proc_sync) */
volatile unsigned int *lc_store_version_word(void);

/* lc_counters.c: the table of every process's slot, `nprocs` entries
 * (child_init(PROC_INIT), before any fork). */
int lc_slots_init(int nprocs);
/* This process's slot (once, in its first lc_proc_get()): 0 also when the
 * process has no place in the table (no counters). */
int lc_slot_create(int rank);
/* After a sync: the slot's rows follow p's engine. */
void lc_slot_rebuild(lc_proc_t *p);
/* This process's totals, or those of the process numbered `proc`
 * (process_no); NULL when it has no slot. */
lc_proc_totals_t *lc_slot_own(void);
lc_proc_totals_t *lc_slot_of(int proc);

#endif
