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
 * \brief loadctl :: the owner process of lc_subscribe.c and lc_notify.c
 *
 * Each RFC 7200 role runs in one extra process (its "owner", forked in
 * child_init(PROC_MAIN)), the only one that calls its libloadctl state
 * machines. Any other process hands it a record in shared memory by writing
 * the pointer into a datagram socketpair created before the fork; the owner
 * sleeps in poll() on the other end with its machines' next timer as timeout,
 * takes each record and frees it. When Kamailio stops, the main process asks
 * each owner to send its last requests and waits for them (core app_shutdown
 * callback, before the children are killed).
 *
 * A role fills an lc_owner_t (its callbacks) and calls lc_owner_mod_init()
 * from mod_init and lc_owner_child_init() from child_init.
 */

#ifndef _LOADCTL_OWNER_H_
#define _LOADCTL_OWNER_H_

#include <stddef.h>
#include <stdint.h>

#include "../../core/ip_addr.h"
#include "../../core/parser/msg_parser.h"
#include "../../modules/tm/tm_load.h"

#include "loadctl.h"

/* Record kinds lc_owner and lc_uac make; a role numbers its own from
 * LC_REC_ROLE. */
enum
{
	LC_REC_SHUTDOWN = 1, /* Kamailio stops: the owner's stop() runs */
	LC_REC_RESPONSE = 2, /* the final response to a request of lc_uac_send */
	LC_REC_ROLE = 16
};

/* What every record begins with: a role's record type has it as its first
 * member, and every record of an owner is of its role's type (rec_size), so
 * the role may cast whatever it takes. */
typedef struct lc_rec
{
	int kind;
	int status;			  /* RESPONSE: the final status */
	uintptr_t param;	  /* RESPONSE: what lc_uac_send was given */
	struct dest_info dst; /* a request from a worker: where to answer it */
	unsigned int len;	  /* the message's bytes in buf (0: none) */
	char *buf;			  /* NUL-terminated, in the record's own block */
} lc_rec_t;

/* The owner's part of shared memory. */
typedef struct lc_owner_shared
{
	int pid; /* 0 until the owner runs (and when it could not start) */
	volatile int shutdown_done;
	unsigned long long handed, channel_full;
} lc_owner_shared_t;

typedef struct lc_owner
{
	/* set by the role */
	const char *role; /* "subscriber": process "loadctl subscriber" */
	size_t rec_size;  /* sizeof its record type */
	/* in the owner after the fork: 0, or -1 (logged) */
	int (*init)(void);
	/* runs what is due at `now`; returns when it is next due */
	uint64_t (*tick)(uint64_t now);
	/* one of the role's records, or an LC_REC_RESPONSE */
	void (*take)(lc_rec_t *rec, uint64_t now);
	/* Kamailio stops: hands its last requests to tm */
	void (*stop)(uint64_t now);
	/* tm's callback for lc_uac_send: calls lc_uac_response(this owner) */
	void (*tm_cb)(struct cell *t, int type, struct tmcb_params *ps);
	/* set by lc_owner_mod_init */
	struct tm_binds *tmb;
	lc_owner_shared_t *sh;
	int chan[2]; /* others write to [1], the owner reads [0] */
	char desc[32];
} lc_owner_t;

/* mod_init: the shared part, the channel, one more process, the shutdown
 * hook. 0, or -1 (logged). */
int lc_owner_mod_init(lc_owner_t *o, struct tm_binds *tmb);
/* child_init: in PROC_MAIN forks the owner, which never returns. */
int lc_owner_child_init(lc_owner_t *o, int rank);
/* Workers may hand records (lc_owner_mod_init succeeded). */
int lc_owner_on(const lc_owner_t *o);
/* The owner's pid, 0 when it does not run. */
int lc_owner_pid(const lc_owner_t *o);
unsigned long long lc_owner_handed(const lc_owner_t *o);
unsigned long long lc_owner_channel_full(const lc_owner_t *o);

/* A zeroed record of the owner's type, `len` bytes of `buf` copied (shm;
 * NULL when out of memory, logged). */
lc_rec_t *lc_rec_new(
		const lc_owner_t *o, int kind, const char *buf, unsigned int len);
/* A record of a request a worker received: its bytes and where it came
 * from. */
lc_rec_t *lc_rec_request(const lc_owner_t *o, int kind, sip_msg_t *msg);
/* Hands `rec` to the owner: 0, or -1 when the channel is full or closed
 * (`rec` freed, counted in channel_full). */
int lc_owner_hand(lc_owner_t *o, lc_rec_t *rec);
/* Hands the record of request `msg`; when it is NULL or cannot be handed
 * (the owner is behind, or gone) answers 503 so the peer retries. 1, or -1. */
int lc_owner_hand_request(lc_owner_t *o, sip_msg_t *msg, lc_rec_t *rec);

/* In the owner: where it is for its requests' Via and its answers (UDP, the
 * first listening socket's host:port written to `sent_by`); the role sets
 * w->contact. 0, or -1 when Kamailio listens nowhere. */
int lc_owner_wire(lc_sip_wire *w, char *sent_by, size_t n);

/* A NUL-terminated string as an lc_str (NULL: absent). */
lc_str lc_cs(const char *s);
/* CLOCK_MONOTONIC, nanoseconds (the clock every state machine is fed). */
uint64_t lc_now_ns(void);

#endif
