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
 * \brief loadctl :: per-process counters (see lc_counters.h)
 *
 * A process finds a decision's row through an index in its private memory
 * (open addressing on source and rule id), rebuilt after each sync, so
 * counting takes no lock. Readers copy a slot's totals and rows under the
 * slot's lock.
 */

#include <string.h>

#include "../../core/dprint.h"
#include "../../core/locking.h"
#include "../../core/mem/mem.h"
#include "../../core/mem/shm_mem.h"
#include "../../core/pt.h"

#include "lc_counters.h"
#include "lc_shared_impl.h"

/* A process's counters; written by that process only (the lock guards the
 * row list while it is rebuilt after a publish and while RPC reads it). */
typedef struct lc_slot
{
	gen_lock_t lock;
	lc_proc_totals_t t;
	int nrows;
	lc_rule_row_t rows[];
} lc_slot_t;

static lc_slot_t **_lc_slots = NULL; /* [nslots], each set by its process */
static int _lc_nslots = 0;

/* This process. */
static lc_slot_t *_lc_slot = NULL;
/* rule (source, id) -> row index in _lc_slot, open addressing, -1 empty */
static int *_lc_index = NULL;
static unsigned int _lc_index_mask = 0;

/* One entry per process (lc_shared_init_procs(), before any fork). */
int lc_slots_init(int nprocs)
{
	_lc_nslots = nprocs;
	_lc_slots = (lc_slot_t **)shm_malloc(sizeof(lc_slot_t *) * _lc_nslots);
	if(_lc_slots == NULL) {
		SHM_MEM_ERROR;
		return -1;
	}
	memset(_lc_slots, 0, sizeof(lc_slot_t *) * _lc_nslots);
	return 0;
}

int lc_slot_create(int rank)
{
	size_t sz;
	unsigned int cap = 1;

	if(_lc_slots == NULL || process_no < 0 || process_no >= _lc_nslots)
		return 0; /* no counters for this process (logged by caller) */
	sz = sizeof(lc_slot_t) + sizeof(lc_rule_row_t) * lc_settings.max_rules;
	_lc_slot = (lc_slot_t *)shm_malloc(sz);
	if(_lc_slot == NULL) {
		SHM_MEM_ERROR;
		return -1;
	}
	memset(_lc_slot, 0, sz);
	lock_init(&_lc_slot->lock);
	_lc_slot->t.pid = my_pid();
	_lc_slot->t.rank = rank;
	while(cap < 2u * (unsigned int)lc_settings.max_rules)
		cap <<= 1;
	_lc_index = (int *)pkg_malloc(sizeof(int) * cap);
	if(_lc_index == NULL) {
		PKG_MEM_ERROR;
		return -1;
	}
	_lc_index_mask = cap - 1;
	memset(_lc_index, 0xff, sizeof(int) * cap);
	_lc_slots[process_no] = _lc_slot;
	return 0;
}

lc_proc_totals_t *lc_slot_own(void)
{
	return _lc_slot ? &_lc_slot->t : NULL;
}

lc_proc_totals_t *lc_slot_of(int proc)
{
	if(_lc_slots == NULL || proc < 0 || proc >= _lc_nslots
			|| _lc_slots[proc] == NULL)
		return NULL;
	return &_lc_slots[proc]->t;
}

static unsigned int lc_hash(
		const char *s, size_t slen, const char *r, size_t rlen)
{
	unsigned int h = 2166136261u;
	size_t i;
	if(slen > LC_SOURCE_MAX - 1)
		slen = LC_SOURCE_MAX - 1;
	if(rlen > LC_RULE_MAX - 1)
		rlen = LC_RULE_MAX - 1;
	for(i = 0; i < slen; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	h = (h ^ 0xff) * 16777619u;
	for(i = 0; i < rlen; i++)
		h = (h ^ (unsigned char)r[i]) * 16777619u;
	return h;
}

static void lc_copy_cut(char *dst, size_t cap, const uint8_t *src, size_t len)
{
	if(len > cap - 1)
		len = cap - 1;
	if(len > 0)
		memcpy(dst, src, len);
	dst[len] = '\0';
}

static void lc_row_cb(void *userdata, const lc_rule_stats *s)
{
	lc_slot_t *slot = (lc_slot_t *)userdata;
	lc_rule_row_t *row;

	if(slot->nrows >= lc_settings.max_rules)
		return;
	row = &slot->rows[slot->nrows++];
	lc_copy_cut(row->source, LC_SOURCE_MAX, s->source.ptr, s->source.len);
	lc_copy_cut(row->rule, LC_RULE_MAX, s->rule.ptr, s->rule.len);
	row->matched = s->matched;
	row->accepted = s->accepted;
	row->rejected = s->rejected;
	row->redirected = s->redirected;
	row->dropped = s->dropped;
}

/* After a publish: the slot's rows follow the engine's rule list (the engine
 * carries each rule's counters over by key, so do the rows). */
void lc_slot_rebuild(lc_proc_t *p)
{
	int i;
	unsigned int h;
	lc_stats st;

	if(_lc_slot == NULL)
		return;
	lock_get(&_lc_slot->lock);
	_lc_slot->t.sync_errors = p->sync_errors;
	_lc_slot->nrows = 0;
	lc_engine_stats_each(p->engine, lc_row_cb, _lc_slot);
	if(lc_engine_stats(p->engine, &st) == LC_RESULT_OK)
		_lc_slot->t.generation = st.generation;
	_lc_slot->t.version = p->version;
	lock_release(&_lc_slot->lock);
	memset(_lc_index, 0xff, sizeof(int) * (_lc_index_mask + 1));
	for(i = 0; i < _lc_slot->nrows; i++) {
		lc_rule_row_t *row = &_lc_slot->rows[i];
		h = lc_hash(
				row->source, strlen(row->source), row->rule, strlen(row->rule));
		while(_lc_index[h & _lc_index_mask] >= 0)
			h++;
		_lc_index[h & _lc_index_mask] = i;
	}
}

void lc_count_unread(unsigned long long total)
{
	if(_lc_slot != NULL)
		_lc_slot->t.unread_numbers = total;
}

void lc_count(const lc_decision *d)
{
	lc_proc_totals_t *t;
	lc_rule_row_t *row = NULL;
	unsigned int h;
	int k;

	if(_lc_slot == NULL)
		return;
	t = &_lc_slot->t;
	t->total++;
	if(d->exempt) {
		t->exempt++;
		if(d->exempt_reason == LC_EXEMPT_REASON_EMERGENCY)
			t->exempt_emergency++;
		else if(d->exempt_reason == LC_EXEMPT_REASON_RESOURCE_PRIORITY)
			t->exempt_priority++;
		return;
	}
	if(!d->matched) {
		t->unmatched++;
		return;
	}
	t->matched++;
	h = lc_hash((const char *)d->source.ptr, d->source.len,
			(const char *)d->rule_id.ptr, d->rule_id.len);
	while((k = _lc_index[h & _lc_index_mask]) >= 0) {
		lc_rule_row_t *r = &_lc_slot->rows[k];
		size_t sl = d->source.len < LC_SOURCE_MAX - 1 ? d->source.len
													  : LC_SOURCE_MAX - 1;
		size_t rl = d->rule_id.len < LC_RULE_MAX - 1 ? d->rule_id.len
													 : LC_RULE_MAX - 1;
		if(strlen(r->source) == sl && strlen(r->rule) == rl
				&& memcmp(r->source, d->source.ptr, sl) == 0
				&& memcmp(r->rule, d->rule_id.ptr, rl) == 0) {
			row = r;
			break;
		}
		h++;
	}
	switch(d->verdict) {
		case LC_VERDICT_ACCEPT:
			t->accepted++;
			if(row)
				row->accepted++;
			break;
		case LC_VERDICT_REJECT:
			t->rejected++;
			if(row)
				row->rejected++;
			break;
		case LC_VERDICT_REDIRECT:
			t->redirected++;
			if(row)
				row->redirected++;
			break;
		case LC_VERDICT_DROP:
			t->dropped++;
			if(row)
				row->dropped++;
			break;
	}
	if(row)
		row->matched++;
}

void lc_stats_each_proc(void (*cb)(void *p, const lc_proc_totals_t *t), void *p)
{
	int i;
	lc_proc_totals_t copy;

	for(i = 0; _lc_slots && i < _lc_nslots; i++) {
		lc_slot_t *s = _lc_slots[i];
		if(s == NULL)
			continue;
		lock_get(&s->lock);
		copy = s->t;
		lock_release(&s->lock);
		cb(p, &copy);
	}
}

/* Rules summed over every process (rows allocated in pkg; free them). */
int lc_stats_rules(lc_rule_row_t **out, int *n)
{
	int i, j, k;
	lc_rule_row_t *rows;
	int nrows = 0, cap = lc_settings.max_rules;

	rows = (lc_rule_row_t *)pkg_malloc(sizeof(lc_rule_row_t) * cap);
	if(rows == NULL) {
		PKG_MEM_ERROR;
		return -1;
	}
	for(i = 0; _lc_slots && i < _lc_nslots; i++) {
		lc_slot_t *s = _lc_slots[i];
		if(s == NULL)
			continue;
		lock_get(&s->lock);
		for(j = 0; j < s->nrows; j++) {
			lc_rule_row_t *r = &s->rows[j];
			for(k = 0; k < nrows; k++) {
				if(strcmp(rows[k].source, r->source) == 0
						&& strcmp(rows[k].rule, r->rule) == 0)
					break;
			}
			if(k == nrows) {
				if(nrows >= cap)
					continue;
				memset(&rows[k], 0, sizeof(lc_rule_row_t));
				strcpy(rows[k].source, r->source);
				strcpy(rows[k].rule, r->rule);
				nrows++;
			}
			rows[k].matched += r->matched;
			rows[k].accepted += r->accepted;
			rows[k].rejected += r->rejected;
			rows[k].redirected += r->redirected;
			rows[k].dropped += r->dropped;
		}
		lock_release(&s->lock);
	}
	*out = rows;
	*n = nrows;
	return 0;
}
