/*
 * loadctl module - the process each RFC 7200 role runs in
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: the owner process (see lc_owner.h)
 */

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

#include "../../core/sr_module.h"
#include "../../core/dprint.h"
#include "../../core/mem/shm_mem.h"
#include "../../core/pt.h"
#include "../../core/forward.h"
#include "../../core/socket_info.h"
#include "../../core/events.h"
#include "../../core/cfg/cfg_struct.h"

#include "lc_mod.h"
#include "lc_owner.h"

/* The subscriber and the notifier. */
#define LC_OWNERS_MAX 2

static lc_owner_t *_lc_owners[LC_OWNERS_MAX];
static int _lc_owners_n = 0;
static sr_corecb_void_f _lc_prev_shutdown = NULL;

lc_str lc_cs(const char *s)
{
	lc_str r;
	r.ptr = (const uint8_t *)s;
	r.len = s ? strlen(s) : 0;
	return r;
}

uint64_t lc_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int lc_owner_on(const lc_owner_t *o)
{
	return o->sh != NULL && o->chan[1] >= 0;
}

int lc_owner_pid(const lc_owner_t *o)
{
	return o->sh ? o->sh->pid : 0;
}

unsigned long long lc_owner_handed(const lc_owner_t *o)
{
	return o->sh ? o->sh->handed : 0ull;
}

unsigned long long lc_owner_channel_full(const lc_owner_t *o)
{
	return o->sh ? o->sh->channel_full : 0ull;
}

/* ---- any process: to the owner ---- */

lc_rec_t *lc_rec_new(
		const lc_owner_t *o, int kind, const char *buf, unsigned int len)
{
	lc_rec_t *rec = (lc_rec_t *)shm_malloc(o->rec_size + len + 1);
	if(rec == NULL) {
		SHM_MEM_ERROR;
		return NULL;
	}
	memset(rec, 0, o->rec_size);
	rec->kind = kind;
	rec->len = len;
	rec->buf = (char *)rec + o->rec_size;
	if(len > 0)
		memcpy(rec->buf, buf, len);
	rec->buf[len] = '\0';
	return rec;
}

lc_rec_t *lc_rec_request(const lc_owner_t *o, int kind, sip_msg_t *msg)
{
	lc_rec_t *rec = lc_rec_new(o, kind, msg->buf, msg->len);
	if(rec)
		init_dst_from_rcv(&rec->dst, &msg->rcv);
	return rec;
}

int lc_owner_hand(lc_owner_t *o, lc_rec_t *rec)
{
	/* only the pointer travels: a datagram write is atomic (no lock of ours
	 * among the writers), and MSG_DONTWAIT never blocks a worker */
	if(o->sh == NULL || o->chan[1] < 0
			|| send(o->chan[1], &rec, sizeof(rec), MSG_DONTWAIT)
					   != (ssize_t)sizeof(rec)) {
		if(o->sh)
			__sync_fetch_and_add(&o->sh->channel_full, 1);
		shm_free(rec);
		return -1;
	}
	__sync_fetch_and_add(&o->sh->handed, 1);
	return 0;
}

int lc_owner_hand_request(lc_owner_t *o, sip_msg_t *msg, lc_rec_t *rec)
{
	if(rec == NULL || lc_owner_hand(o, rec) < 0) {
		/* the owner is behind (or gone): the peer retries */
		lc_sl_reply(msg, 503, "Service Unavailable");
		return -1;
	}
	return 1;
}

/* ---- the owner ---- */

int lc_owner_wire(lc_sip_wire *w, char *sent_by, size_t n)
{
	struct socket_info *si = get_first_socket();

	if(si == NULL)
		return -1;
	snprintf(sent_by, n, "%.*s:%d", si->address_str.len, si->address_str.s,
			si->port_no);
	w->transport = lc_cs("UDP");
	w->sent_by = lc_cs(sent_by);
	return 0;
}

/* Waits for records until `wake_ns` (CLOCK_MONOTONIC), then takes every
 * waiting one and frees it. */
static void lc_owner_serve(lc_owner_t *o, uint64_t wake_ns)
{
	struct pollfd p;
	lc_rec_t *rec;
	uint64_t now = lc_now_ns();
	int timeout_ms =
			wake_ns > now ? (int)((wake_ns - now + 999999) / 1000000) : 0;

	p.fd = o->chan[0];
	p.events = POLLIN;
	p.revents = 0;
	if(poll(&p, 1, timeout_ms) <= 0)
		return;
	while(recv(o->chan[0], &rec, sizeof(rec), MSG_DONTWAIT)
			== (ssize_t)sizeof(rec)) {
		now = lc_now_ns();
		if(rec->kind == LC_REC_SHUTDOWN) {
			o->stop(now);
			o->sh->shutdown_done = 1;
		} else {
			o->take(rec, now);
		}
		shm_free(rec);
	}
}

static void lc_owner_loop(lc_owner_t *o)
{
	for(;;) {
		cfg_update();
		lc_owner_serve(o, o->tick(lc_now_ns()));
	}
}

/* Main process, before the children are killed: each owner in turn, the
 * last registered first, sends its last requests (waited for up to 1 s),
 * then tm gets 20 ms to put them on the wire. */
static void lc_owner_app_shutdown(void)
{
	lc_owner_t *o;
	lc_rec_t *rec;
	int i, k;

	for(k = _lc_owners_n - 1; k >= 0; k--) {
		o = _lc_owners[k];
		if(lc_owner_pid(o) <= 0)
			continue;
		rec = lc_rec_new(o, LC_REC_SHUTDOWN, NULL, 0);
		if(rec == NULL || lc_owner_hand(o, rec) < 0)
			continue;
		for(i = 0; i < 100 && !o->sh->shutdown_done; i++)
			usleep(10000);
		usleep(20000);
	}
	if(_lc_prev_shutdown)
		_lc_prev_shutdown();
}

int lc_owner_mod_init(lc_owner_t *o, struct tm_binds *tmb)
{
	sr_corecb_t *cb;

	if(_lc_owners_n >= LC_OWNERS_MAX) {
		LM_CRIT("more than %d owner processes\n", LC_OWNERS_MAX);
		return -1;
	}
	o->tmb = tmb;
	o->chan[0] = o->chan[1] = -1;
	snprintf(o->desc, sizeof(o->desc), "loadctl %s", o->role);
	o->sh = (lc_owner_shared_t *)shm_malloc(sizeof(lc_owner_shared_t));
	if(o->sh == NULL) {
		SHM_MEM_ERROR;
		return -1;
	}
	memset(o->sh, 0, sizeof(lc_owner_shared_t));
	if(socketpair(AF_UNIX, SOCK_DGRAM, 0, o->chan) < 0) {
		LM_ERR("socketpair: %s\n", strerror(errno));
		o->chan[0] = o->chan[1] = -1;
		return -1;
	}
	register_procs(1);
	cfg_register_child(1);
	if(_lc_owners_n == 0) {
		cb = sr_corecb_get();
		if(cb) {
			_lc_prev_shutdown = cb->app_shutdown;
			cb->app_shutdown = lc_owner_app_shutdown;
		}
	}
	_lc_owners[_lc_owners_n++] = o;
	return 0;
}

int lc_owner_child_init(lc_owner_t *o, int rank)
{
	int pid;

	if(o->sh == NULL || rank != PROC_MAIN)
		return 0;
	/* rank PROC_RPC: every module's child_init prepares it to send through
	 * tm, as for the dmq or ctl workers */
	pid = fork_process(PROC_RPC, o->desc, 1);
	if(pid < 0)
		return -1;
	if(pid == 0) {
		if(cfg_child_init())
			return -1;
		/* [1] stays open: a tm callback that runs in this process (a
		 * request tm fails at once) reaches the loop the same way */
		o->sh->pid = getpid();
		if(o->init() < 0) {
			LM_CRIT("the %s process cannot start\n", o->role);
			o->sh->pid = 0;
			return -1;
		}
		lc_owner_loop(o);
		return -1; /* not reached */
	}
	return 0;
}
