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
 * \brief loadctl :: shared memory (see lc_shared.h for the layout and why)
 */

#include <string.h>

#include "../../core/dprint.h"
#include "../../core/locking.h"
#include "../../core/mem/mem.h"
#include "../../core/mem/shm_mem.h"
#include "../../core/pt.h"

#include "lc_shared.h"

lc_settings_t lc_settings = {1000, 100, STR_NULL, 1, 0, 1, STR_NULL, 0};

/* One source's current document (shared memory). */
typedef struct lc_doc
{
	char name[LC_SOURCE_MAX];
	/* the URI of the notifier the document came from (its redirects are
	 * checked against the notifier's own domain, RFC 7200 §7); empty for the
	 * operator's documents (policy_file, loadctl.publish): trusted */
	char notifier[LC_SOURCE_MAX];
	unsigned int seq; /* store version that published it */
	char *body;
	size_t len;
} lc_doc_t;

typedef struct lc_store
{
	gen_lock_t lock;
	/* bumped under the lock on every change; read without it */
	volatile unsigned int version;
	int ndocs;
	lc_doc_t docs[LC_MAX_SOURCES]; /* in the order sources first published */
} lc_store_t;

typedef struct lc_mailbox
{
	gen_lock_t lock;
	volatile unsigned int count;
	lc_ticket items[LC_MAILBOX_SIZE];
} lc_mailbox_t;

/* A process's counters; written by that process only (the lock guards the
 * row list while it is rebuilt after a publish and while RPC reads it). */
typedef struct lc_slot
{
	gen_lock_t lock;
	lc_proc_totals_t t;
	int nrows;
	lc_rule_row_t rows[];
} lc_slot_t;

static lc_store_t *_lc_store = NULL;
/* The engines' per-rule cells in shared memory, when libloadctl has the
 * shared-cell ABI (build.sh defines LC_HAVE_SHARED_CELLS when the header
 * declares lc_engine_new_shared) and the shared_cells modparam is on. */
static void *_lc_cells = NULL;
#ifdef LC_HAVE_SHARED_CELLS
static size_t _lc_cells_len = 0;
#endif
static lc_mailbox_t *_lc_mailboxes = NULL; /* [nprocs] */
static lc_slot_t **_lc_slots = NULL; /* [nprocs], each set by its process */
static int _lc_nprocs = 0;

/* This process. */
static lc_proc_t *_lc_proc = NULL;
static lc_slot_t *_lc_slot = NULL;
/* rule (source, id) -> row index in _lc_slot, open addressing, -1 empty */
static int *_lc_index = NULL;
static unsigned int _lc_index_mask = 0;
/* The engine that validates documents in the process that publishes them
 * (RPC, mod_init): private, never classifies. */
static lc_proc_t *_lc_validator = NULL;

#define LC_ATOMIC_LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define LC_ATOMIC_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

static lc_str lc_mkstr(const char *s, size_t len)
{
	lc_str r;
	r.ptr = (const uint8_t *)s;
	r.len = len;
	return r;
}

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
	_lc_store = (lc_store_t *)shm_malloc(sizeof(lc_store_t));
	if(_lc_store == NULL) {
		SHM_MEM_ERROR;
		return -1;
	}
	memset(_lc_store, 0, sizeof(lc_store_t));
	if(lock_init(&_lc_store->lock) == NULL) {
		LM_ERR("cannot init the store lock\n");
		return -1;
	}
	/* SHARED-CELLS: the cell table, once, before any fork (the raw block is
	 * never freed: it lives as long as shared memory) */
#ifdef LC_HAVE_SHARED_CELLS
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

/* Per-process arrays: sized in child_init(PROC_INIT), when every module has
 * registered its processes and before any fork. */
int lc_shared_init_procs(void)
{
	int i;

	if(_lc_mailboxes != NULL)
		return 0;
	_lc_nprocs = get_max_procs();
	_lc_mailboxes =
			(lc_mailbox_t *)shm_malloc(sizeof(lc_mailbox_t) * _lc_nprocs);
	_lc_slots = (lc_slot_t **)shm_malloc(sizeof(lc_slot_t *) * _lc_nprocs);
	if(_lc_mailboxes == NULL || _lc_slots == NULL) {
		SHM_MEM_ERROR;
		return -1;
	}
	memset(_lc_mailboxes, 0, sizeof(lc_mailbox_t) * _lc_nprocs);
	memset(_lc_slots, 0, sizeof(lc_slot_t *) * _lc_nprocs);
	for(i = 0; i < _lc_nprocs; i++) {
		if(lock_init(&_lc_mailboxes[i].lock) == NULL)
			return -1;
	}
	return 0;
}

void lc_shared_destroy(void)
{
	/* shared memory goes away with the server; the engines with their
	 * processes */
}

void lc_store_drop_validator(void)
{
	if(_lc_validator == NULL)
		return;
	lc_engine_free(_lc_validator->engine);
	pkg_free(_lc_validator);
	_lc_validator = NULL;
}

unsigned int lc_store_version(void)
{
	return _lc_store ? LC_ATOMIC_LOAD(&_lc_store->version) : 0;
}

static int lc_store_find(const char *name, size_t len)
{
	int i;
	for(i = 0; i < _lc_store->ndocs; i++) {
		if(strlen(_lc_store->docs[i].name) == len
				&& memcmp(_lc_store->docs[i].name, name, len) == 0)
			return i;
	}
	return -1;
}

/* Brings p's engine up to the store. The store lock must be held. */
static void lc_sync_locked(lc_proc_t *p)
{
	int i, j, found;
	uint64_t gen = 0;
	lc_result r;
	unsigned int v = _lc_store->version;

	/* sources that are gone */
	for(j = 0; j < p->nnames; j++) {
		if(lc_store_find(p->names[j], strlen(p->names[j])) >= 0)
			continue;
		r = lc_engine_withdraw(
				p->engine, lc_mkstr(p->names[j], strlen(p->names[j])), &gen);
		if(r != LC_RESULT_OK && r != LC_RESULT_UNKNOWN_SOURCE)
			LM_ERR("withdrawing source %s: %s\n", p->names[j],
					lc_result_text(r));
	}
	/* new or changed documents, in store order */
	for(i = 0; i < _lc_store->ndocs; i++) {
		lc_doc_t *d = &_lc_store->docs[i];
		found = 0;
		for(j = 0; j < p->nnames; j++) {
			if(strcmp(p->names[j], d->name) == 0 && p->seq[j] == d->seq) {
				found = 1;
				break;
			}
		}
		if(found)
			continue;
		r = lc_engine_publish(p->engine, lc_mkstr(d->name, strlen(d->name)),
				d->notifier[0] ? lc_mkstr(d->notifier, strlen(d->notifier))
							   : lc_mkstr(NULL, 0),
				(const uint8_t *)d->body, d->len, &gen);
		if(r != LC_RESULT_OK)
			/* the document was validated before it was stored */
			LM_ERR("process %d: publishing source %s: %s\n", my_pid(), d->name,
					lc_result_text(r));
	}
	for(i = 0; i < _lc_store->ndocs; i++) {
		strcpy(p->names[i], _lc_store->docs[i].name);
		p->seq[i] = _lc_store->docs[i].seq;
	}
	p->nnames = _lc_store->ndocs;
	p->version = v;
}

static lc_proc_t *lc_proc_alloc(int validator)
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

int lc_store_publish(
		str *source, const char *body, size_t len, char *err, size_t errlen)
{
	return lc_store_publish_from(source, NULL, body, len, err, errlen);
}

int lc_store_publish_from(str *source, str *notifier, const char *body,
		size_t len, char *err, size_t errlen)
{
	size_t wlen = 0;
	lc_result r;
	uint64_t gen = 0;
	int i;
	char *copy;

	if(_lc_store == NULL) {
		snprintf(err, errlen, "module not initialised");
		return -1;
	}
	if(source->len <= 0 || source->len >= LC_SOURCE_MAX) {
		snprintf(err, errlen, "source name must be 1 to %d bytes",
				LC_SOURCE_MAX - 1);
		return -1;
	}
	if(notifier && (notifier->len <= 0 || notifier->len >= LC_SOURCE_MAX)) {
		snprintf(err, errlen, "notifier URI must be 1 to %d bytes",
				LC_SOURCE_MAX - 1);
		return -1;
	}
	r = lc_policy_check((const uint8_t *)body, len, (uint8_t *)err,
			errlen > 0 ? errlen - 1 : 0, &wlen);
	if(r != LC_RESULT_OK) {
		if(r == LC_RESULT_BUFFER_TOO_SMALL)
			wlen = errlen - 1;
		if(r != LC_RESULT_INVALID_POLICY && r != LC_RESULT_BUFFER_TOO_SMALL) {
			snprintf(err, errlen, "%s", lc_result_text(r));
			return -1;
		}
		err[wlen < errlen ? wlen : errlen - 1] = '\0';
		return -1;
	}
	if(_lc_validator == NULL) {
		_lc_validator = lc_proc_alloc(1);
		if(_lc_validator == NULL) {
			snprintf(err, errlen, "cannot create the validating engine");
			return -1;
		}
	}
	lock_get(&_lc_store->lock);
	lc_sync_locked(_lc_validator);
	i = lc_store_find(source->s, source->len);
	if(i < 0 && _lc_store->ndocs >= LC_MAX_SOURCES) {
		lock_release(&_lc_store->lock);
		snprintf(err, errlen, "too many sources (at most %d)", LC_MAX_SOURCES);
		return -1;
	}
	/* what every worker will do with it, done first on a private engine */
	r = lc_engine_publish(_lc_validator->engine,
			lc_mkstr(source->s, source->len),
			notifier ? lc_mkstr(notifier->s, notifier->len) : lc_mkstr(NULL, 0),
			(const uint8_t *)body, len, &gen);
	if(r != LC_RESULT_OK) {
		/* the validator now differs from the store: rebuild it next time */
		lc_engine_free(_lc_validator->engine);
		pkg_free(_lc_validator);
		_lc_validator = NULL;
		lock_release(&_lc_store->lock);
		snprintf(err, errlen, "%s", lc_result_text(r));
		return -1;
	}
	copy = (char *)shm_malloc(len + 1);
	if(copy == NULL) {
		lock_release(&_lc_store->lock);
		SHM_MEM_ERROR;
		snprintf(err, errlen, "out of shared memory");
		return -1;
	}
	memcpy(copy, body, len);
	copy[len] = '\0';
	if(i < 0) {
		i = _lc_store->ndocs++;
		memcpy(_lc_store->docs[i].name, source->s, source->len);
		_lc_store->docs[i].name[source->len] = '\0';
	} else {
		shm_free(_lc_store->docs[i].body);
	}
	_lc_store->docs[i].body = copy;
	_lc_store->docs[i].len = len;
	if(notifier) {
		memcpy(_lc_store->docs[i].notifier, notifier->s, notifier->len);
		_lc_store->docs[i].notifier[notifier->len] = '\0';
	} else {
		_lc_store->docs[i].notifier[0] = '\0';
	}
	_lc_store->docs[i].seq = _lc_store->version + 1;
	LC_ATOMIC_STORE(&_lc_store->version, _lc_store->version + 1);
	/* book-keeping only: the validator holds this document already (the
	 * repeated publish keeps every rule's state and costs one compile) */
	lc_sync_locked(_lc_validator);
	lock_release(&_lc_store->lock);
	err[0] = '\0';
	return 0;
}

int lc_store_withdraw(str *source)
{
	int i;

	if(_lc_store == NULL)
		return -1;
	lock_get(&_lc_store->lock);
	i = lc_store_find(source->s, source->len);
	if(i < 0) {
		lock_release(&_lc_store->lock);
		return -1;
	}
	shm_free(_lc_store->docs[i].body);
	memmove(&_lc_store->docs[i], &_lc_store->docs[i + 1],
			sizeof(lc_doc_t) * (_lc_store->ndocs - i - 1));
	_lc_store->ndocs--;
	LC_ATOMIC_STORE(&_lc_store->version, _lc_store->version + 1);
	lock_release(&_lc_store->lock);
	return 0;
}

static lc_str lc_name_str(const char *name)
{
	lc_str r;
	r.ptr = (const uint8_t *)name;
	r.len = strlen(name);
	return r;
}

/* This process's validating engine, up to date with the store (the caller
 * holds the store lock). NULL when it cannot be made (logged). */
static lc_proc_t *lc_validator_synced(void)
{
	if(_lc_validator == NULL)
		_lc_validator = lc_proc_alloc(1);
	if(_lc_validator != NULL)
		lc_sync_locked(_lc_validator);
	return _lc_validator;
}

/* Takes the store lock and returns this process's validating engine, synced;
 * NULL (lock not held) when there is no store or no engine. */
static lc_proc_t *lc_validator_lock(void)
{
	lc_proc_t *v;

	if(_lc_store == NULL)
		return NULL;
	lock_get(&_lc_store->lock);
	v = lc_validator_synced();
	if(v == NULL)
		lock_release(&_lc_store->lock);
	return v;
}

int lc_store_rules(void (*cb)(void *p, const lc_rule_stats *row), void *p)
{
	lc_proc_t *v = lc_validator_lock();

	if(v == NULL)
		return -1;
	lc_engine_stats_each(v->engine, cb, p);
	lock_release(&_lc_store->lock);
	return 0;
}

int lc_store_rule_info(void (*cb)(void *p, const lc_rule_info *row), void *p)
{
	lc_proc_t *v = lc_validator_lock();

	if(v == NULL)
		return -1;
	lc_engine_rules_each(v->engine, cb, p);
	lock_release(&_lc_store->lock);
	return 0;
}

void lc_store_each(void (*cb)(void *p, const char *name, unsigned int seq,
						   long doc_version, size_t len),
		void *p)
{
	lc_proc_t *v;
	uint32_t version;
	long doc_version;
	int i;

	if(_lc_store == NULL)
		return;
	lock_get(&_lc_store->lock);
	v = lc_validator_synced();
	for(i = 0; i < _lc_store->ndocs; i++) {
		doc_version = -1;
		if(v != NULL
				&& lc_engine_source_version(v->engine,
						   lc_name_str(_lc_store->docs[i].name), &version)
						   == LC_RESULT_OK)
			doc_version = (long)version;
		cb(p, _lc_store->docs[i].name, _lc_store->docs[i].seq, doc_version,
				_lc_store->docs[i].len);
	}
	lock_release(&_lc_store->lock);
}

/* ---- per-process counters ---- */

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
static void lc_slot_rebuild(lc_proc_t *p)
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

	for(i = 0; _lc_slots && i < _lc_nprocs; i++) {
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
	for(i = 0; _lc_slots && i < _lc_nprocs; i++) {
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

/* ---- the process's engine ---- */

static int lc_slot_create(int rank)
{
	size_t sz;
	unsigned int cap = 1;

	if(_lc_slots == NULL || process_no < 0 || process_no >= _lc_nprocs)
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

lc_proc_t *lc_proc_get(int rank)
{
	lc_result r;

	if(_lc_proc != NULL)
		return _lc_proc;
	if(_lc_store == NULL)
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
	if(likely(LC_ATOMIC_LOAD(&_lc_store->version) == p->version))
		return;
	lock_get(&_lc_store->lock);
	lc_sync_locked(p);
	lock_release(&_lc_store->lock);
	lc_slot_rebuild(p);
}

/* ---- window tickets ---- */

void lc_ticket_issued(void)
{
	if(_lc_slot)
		_lc_slot->t.tickets_issued++;
}

static void lc_ticket_complete_here(const lc_ticket *t)
{
	lc_result r = lc_complete(_lc_proc->worker, t);
	if(r != LC_RESULT_OK)
		LM_ERR("completing a window ticket: %s\n", lc_result_text(r));
	else if(_lc_slot)
		_lc_slot->t.tickets_completed++;
}

void lc_ticket_release(lc_ticket_rec_t *rec)
{
	lc_mailbox_t *mb;

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
		if(_lc_slot)
			_lc_slot->t.tickets_forwarded++;
		return;
	}
	lock_release(&mb->lock);
	LM_ERR("window-ticket mailbox of process %d is full: one slot lost\n",
			rec->owner);
	if(_lc_slots && _lc_slots[rec->owner])
		_lc_slots[rec->owner]->t.tickets_lost++;
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
