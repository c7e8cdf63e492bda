/*
 * loadctl module - the policy documents every process applies
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: the document store and its validator (see lc_store.h)
 *
 * The store is one block of shared memory under one lock. Publishing
 * processes (RPC, mod_init, the subscriber's owner) apply a document to
 * their private validating engine before storing it; every process brings
 * its own engine up to the store with lc_store_sync().
 */

#include <string.h>

#include "../../core/dprint.h"
#include "../../core/locking.h"
#include "../../core/mem/mem.h"
#include "../../core/mem/shm_mem.h"
#include "../../core/pt.h"

#include "lc_store.h"
#include "lc_shared_impl.h"

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

static lc_store_t *_lc_store = NULL;
/* The engine that validates documents in the process that publishes them
 * (RPC, mod_init): private, never classifies. */
static lc_proc_t *_lc_validator = NULL;

int lc_store_init(void)
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
	return 0;
}

int lc_store_ready(void)
{
	return _lc_store != NULL;
}

volatile unsigned int *lc_store_version_word(void)
{
	return &_lc_store->version;
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
		if(r != LC_RESULT_OK && r != LC_RESULT_UNKNOWN_SOURCE) {
			LM_ERR("withdrawing source %s: %s\n", p->names[j],
					lc_result_text(r));
			p->sync_errors++;
		}
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
		if(r != LC_RESULT_OK) {
			/* validated before it was stored, but this engine may still
			 * refuse it (a full shared cell table): it keeps its previous
			 * policy for the source */
			LM_ERR("process %d: publishing source %s: %s\n", my_pid(), d->name,
					lc_result_text(r));
			p->sync_errors++;
		}
	}
	for(i = 0; i < _lc_store->ndocs; i++) {
		strcpy(p->names[i], _lc_store->docs[i].name);
		p->seq[i] = _lc_store->docs[i].seq;
	}
	p->nnames = _lc_store->ndocs;
	p->version = v;
}

int lc_store_sync(lc_proc_t *p)
{
	if(likely(LC_ATOMIC_LOAD(&_lc_store->version) == p->version))
		return 0;
	lock_get(&_lc_store->lock);
	lc_sync_locked(p);
	lock_release(&_lc_store->lock);
	return 1;
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
