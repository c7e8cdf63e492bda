/*
 * loadctl module - the RFC 7200 subscriber
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: RFC 7200 subscriber to configured notifiers
 *
 * One extra process (the "owner", forked in child_init(PROC_MAIN)) holds every
 * lc_subscriber and a private engine they feed. SIP workers never touch them:
 * lc_handle_notify() (a NOTIFY) and tm's reply callback (a response to one of
 * the owner's SUBSCRIBEs, or tm's local 408) copy the message into shared
 * memory and write the pointer into a datagram socketpair created before the
 * fork; the owner sleeps in poll() on the other end with the subscribers'
 * next timer as timeout. What the owner's engine holds after each applied
 * document goes to the shared store as that notifier's merged full policy
 * (lc_engine_source_policy + lc_store_publish), so every worker enforces it.
 */

#ifndef _LOADCTL_SUBSCRIBE_H_
#define _LOADCTL_SUBSCRIBE_H_

#include "../../core/parser/msg_parser.h"
#include "../../core/rpc.h"
#include "../../modules/tm/tm_load.h"

/* Most `subscribe` modparams. */
#define LC_MAX_SUBSCRIPTIONS 8

/* modparam("loadctl", "subscribe", "sip:notifier@host:port") */
int lc_sub_add_param(modparam_t type, void *val);
/* modparam("loadctl", "subscribe_tls_name", "NOTIFIER-URI NAME"): the name a
 * TLS notifier's certificate must carry when it is not its URI's host */
int lc_sub_tls_name_param(modparam_t type, void *val);
extern int lc_sub_expires;
extern char *lc_sub_contact;
extern char *lc_sub_from;

/* Number of configured notifiers. */
int lc_sub_count(void);
/* mod_init: needs tm (SUBSCRIBE goes through it); registers the process. */
int lc_sub_mod_init(struct tm_binds *tmb, int tm_loaded);
/* child_init(PROC_MAIN): forks the owner process. */
int lc_sub_child_init(int rank);
/* lc_handle_notify(): hands the NOTIFY to the owner (which answers it), or
 * answers 403 to one of a TLS subscription's dialog that did not come from
 * its notifier's verified TLS peer. */
int lc_sub_handle_notify(sip_msg_t *msg);

/* A counter of every subscription summed (0 without subscribe). */
typedef enum lc_sub_counter
{
	LC_SUB_NOTIFIES,
	LC_SUB_APPLIED,
	LC_SUB_INVALID,
	LC_SUB_WITHDRAWN,
	LC_SUB_SUBSCRIBES,
	LC_SUB_RETRIES,
	LC_SUB_UNAUTHENTICATED,
} lc_sub_counter_t;
unsigned long long lc_sub_total(lc_sub_counter_t c);
/* loadctl.subscriptions */
void lc_sub_rpc_list(rpc_t *rpc, void *ctx);
/* loadctl.resubscribe [NOTIFIER-URI] */
void lc_sub_rpc_resubscribe(rpc_t *rpc, void *ctx);

#endif
