/*
 * loadctl module - the notifier's demand slots
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: the notifier's demand slots (see lc_demand.h)
 */

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../../core/dprint.h"
#include "../../core/locking.h"
#include "../../core/mem/shm_mem.h"
#include "../../core/ip_addr.h"

#include "lc_owner.h"
#include "lc_demand.h"

#define LC_DEMAND_URI_MAX 256

/* One subscriber: written by the owner (uri and address before nslots
 * grows; the status under the lock), counted by the workers. */
typedef struct lc_demand_slot
{
	char uri[LC_DEMAND_URI_MAX];
	struct ip_addr ip;
	unsigned short port;
	int has_addr;
	volatile unsigned long long count;
	/* when the last one was counted (CLOCK_MONOTONIC), so the owner measures
	 * rates over the requests' own span, not its 100 ms sweeps */
	volatile unsigned long long last_ns;
	int active; /* its live subscriptions (several while an edge re-subscribes) */
	long long usage_milli, target_milli, in_force_milli; /* -1: none */
	int constrained;
} lc_demand_slot_t;

typedef struct lc_demand_shared
{
	gen_lock_t lock;
	volatile int nslots;
	lc_demand_slot_t slot[LC_MAX_NOTIFY_SLOTS];
	unsigned long long unknown_observations;
} lc_demand_shared_t;

static lc_demand_shared_t *_lc_dm = NULL;
/* The owner's: each slot's count at the last feed. */
static unsigned long long _lc_dm_seen[LC_MAX_NOTIFY_SLOTS];

int lc_demand_init(void)
{
	_lc_dm = (lc_demand_shared_t *)shm_malloc(sizeof(lc_demand_shared_t));
	if(_lc_dm == NULL) {
		SHM_MEM_ERROR;
		return -1;
	}
	memset(_lc_dm, 0, sizeof(lc_demand_shared_t));
	if(lock_init(&_lc_dm->lock) == NULL)
		return -1;
	return 0;
}

int lc_demand_count(sip_msg_t *msg, str *subscriber)
{
	int i, n;

	if(_lc_dm == NULL)
		return -1;
	n = _lc_dm->nslots;
	__sync_synchronize();
	for(i = 0; i < n; i++) {
		lc_demand_slot_t *s = &_lc_dm->slot[i];
		int hit;
		if(subscriber)
			hit = (int)strlen(s->uri) == subscriber->len
				  && strncasecmp(s->uri, subscriber->s, subscriber->len) == 0;
		else
			hit = s->active && s->has_addr && s->port == msg->rcv.src_port
				  && ip_addr_cmp(&s->ip, &msg->rcv.src_ip);
		if(hit) {
			s->last_ns = lc_now_ns();
			__sync_fetch_and_add(&s->count, 1ull);
			return 1;
		}
	}
	__sync_fetch_and_add(&_lc_dm->unknown_observations, 1ull);
	return -1;
}

/* ---- the owner ---- */

/* The slot of `uri`, -1 when it has none. */
static int lc_demand_find(const char *uri, size_t len)
{
	int i, n = _lc_dm->nslots;

	for(i = 0; i < n; i++) {
		lc_demand_slot_t *s = &_lc_dm->slot[i];
		if(strlen(s->uri) == len && strncasecmp(s->uri, uri, len) == 0)
			return i;
	}
	return -1;
}

/* The slot of `uri`, created (with `dst` as its address, when given) if
 * new; -1 when the table is full. */
static int lc_demand_slot(const char *uri, size_t len, struct dest_info *dst)
{
	int i = lc_demand_find(uri, len), n = _lc_dm->nslots;
	lc_demand_slot_t *s;

	if(i < 0) {
		if(n >= LC_MAX_NOTIFY_SLOTS || len >= LC_DEMAND_URI_MAX) {
			LM_ERR("no slot for subscriber %.*s (at most %d)\n", (int)len, uri,
					LC_MAX_NOTIFY_SLOTS);
			return -1;
		}
		s = &_lc_dm->slot[n];
		memset(s, 0, sizeof(*s));
		memcpy(s->uri, uri, len);
		s->uri[len] = '\0';
		s->usage_milli = s->target_milli = s->in_force_milli = -1;
		_lc_dm_seen[n] = 0;
		__sync_synchronize();
		_lc_dm->nslots = n + 1;
		i = n;
	}
	s = &_lc_dm->slot[i];
	if(dst) {
		/* the address a re-SUBSCRIBE came from replaces the old one; the
		 * workers may read it meanwhile (at worst one count is missed) */
		su2ip_addr(&s->ip, &dst->to);
		s->port = su_getport(&dst->to);
		__sync_synchronize();
		s->has_addr = 1;
	}
	return i;
}

void lc_demand_subscription(
		const char *uri, size_t len, struct dest_info *dst, int delta)
{
	int k = delta < 0 ? lc_demand_find(uri, len)
					  : lc_demand_slot(uri, len, dst);

	if(k < 0 || delta == 0)
		return;
	lock_get(&_lc_dm->lock);
	if(delta > 0)
		_lc_dm->slot[k].active++;
	else if(_lc_dm->slot[k].active > 0)
		_lc_dm->slot[k].active--;
	lock_release(&_lc_dm->lock);
}

void lc_demand_feed(lc_notifier *n, uint64_t now)
{
	int i, ns = _lc_dm->nslots;

	for(i = 0; i < ns; i++) {
		lc_demand_slot_t *s = &_lc_dm->slot[i];
		unsigned long long c = s->count;
		unsigned long long at = s->last_ns;
		if(c == _lc_dm_seen[i])
			continue;
		if(at == 0 || at > now)
			at = now;
		if(lc_notifier_observe(n, at, lc_cs(s->uri), c - _lc_dm_seen[i])
				!= LC_RESULT_OK)
			__sync_fetch_and_add(
					&_lc_dm->unknown_observations, c - _lc_dm_seen[i]);
		_lc_dm_seen[i] = c;
	}
}

void lc_demand_shares(lc_notifier *n)
{
	lc_share sh;
	size_t i;
	int k;

	lock_get(&_lc_dm->lock);
	for(k = 0; k < _lc_dm->nslots; k++)
		_lc_dm->slot[k].target_milli = _lc_dm->slot[k].in_force_milli =
				_lc_dm->slot[k].usage_milli = -1;
	lock_release(&_lc_dm->lock);
	for(i = 0; lc_notifier_share(n, i, &sh) == LC_RESULT_OK; i++) {
		k = lc_demand_find((const char *)sh.subscriber.ptr, sh.subscriber.len);
		if(k < 0)
			continue;
		lock_get(&_lc_dm->lock);
		_lc_dm->slot[k].usage_milli =
				sh.usage_milli == UINT64_MAX ? -1 : (long long)sh.usage_milli;
		_lc_dm->slot[k].target_milli = (long long)sh.target_milli;
		_lc_dm->slot[k].in_force_milli = sh.in_force_milli == UINT64_MAX
												 ? -1
												 : (long long)sh.in_force_milli;
		_lc_dm->slot[k].constrained = sh.constrained;
		lock_release(&_lc_dm->lock);
	}
}

/* ---- RPC ---- */

unsigned long long lc_demand_unknown(void)
{
	return _lc_dm ? _lc_dm->unknown_observations : 0ull;
}

void lc_demand_rpc(rpc_t *rpc, void *arr)
{
	void *st;
	lc_demand_slot_t copy;
	char addr[128];
	int i, n;

	n = _lc_dm ? _lc_dm->nslots : 0;
	for(i = 0; i < n; i++) {
		lock_get(&_lc_dm->lock);
		copy = _lc_dm->slot[i];
		lock_release(&_lc_dm->lock);
		addr[0] = '\0';
		if(copy.has_addr)
			snprintf(addr, sizeof(addr), "%s:%u", ip_addr2a(&copy.ip),
					(unsigned)copy.port);
		if(rpc->array_add(arr, "{", &st) < 0)
			return;
		rpc->struct_add(st, "ssdJ", "subscriber", copy.uri, "address", addr,
				"active", copy.active, "observed", copy.count);
		rpc->struct_add(st, "fffd", "demand",
				copy.usage_milli < 0 ? -1.0 : (double)copy.usage_milli / 1000.0,
				"target",
				copy.target_milli < 0 ? -1.0
									  : (double)copy.target_milli / 1000.0,
				"share",
				copy.in_force_milli < 0 ? -1.0
										: (double)copy.in_force_milli / 1000.0,
				"constrained", copy.constrained);
	}
}
