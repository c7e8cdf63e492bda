/*
 * loadctl module - the RFC 7200 notifier
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: RFC 7200 notifier toward upstream subscribers
 *
 * With `notifier_uri` set, Kamailio is the server that pushes load-filtering
 * policies upstream. One extra process (the "notifier owner", forked in
 * child_init(PROC_MAIN)) holds the lc_notifier. SIP workers never touch it:
 * lc_handle_subscribe() copies a SUBSCRIBE (bytes and where it came from) into
 * shared memory and writes the pointer into a datagram socketpair; tm's
 * callback does the same with the final response to one of the owner's
 * NOTIFYs. The owner answers SUBSCRIBEs on the socket they came in on
 * (msg_send; retransmissions get the same answer again), sends NOTIFYs
 * through tm (t_uac inside the subscription's dialog: its Call-ID, tags, CSeq,
 * remote target and route set), runs the notifier's timers, and ends every
 * subscription for a restart (terminated;reason=probation;retry-after=2, so
 * subscribers come back) when Kamailio stops.
 *
 * Policies: `notifier_policy_file` (every subscriber) or
 * `notifier_capacity_file` (a template rule whose <rate> is shared among the
 * subscribers by demand), replaced over RPC. Demand comes from lc_observe()
 * (lc_demand.h).
 */

#ifndef _LOADCTL_NOTIFY_H_
#define _LOADCTL_NOTIFY_H_

#include "../../core/parser/msg_parser.h"
#include "../../core/rpc.h"
#include "../../modules/tm/tm_load.h"

extern char *lc_ntf_uri;
extern char *lc_ntf_allow;
extern char *lc_ntf_policy_file;
extern char *lc_ntf_capacity_file;
extern int lc_ntf_max_expires;
extern int lc_ntf_min_expires;

/* The notifier role is configured (notifier_uri). */
int lc_ntf_enabled(void);
/* mod_init: checks the parameters, reads the documents, needs tm. */
int lc_ntf_mod_init(struct tm_binds *tmb, int tm_loaded);
/* child_init(PROC_MAIN): forks the owner process. */
int lc_ntf_child_init(int rank);
/* lc_handle_subscribe(): hands the SUBSCRIBE to the owner (which answers). */
int lc_ntf_handle_subscribe(sip_msg_t *msg);
/* loadctl.notifier, loadctl.notifier_policy, loadctl.notifier_capacity */
void lc_ntf_rpc_list(rpc_t *rpc, void *ctx);
void lc_ntf_rpc_policy(rpc_t *rpc, void *ctx);
void lc_ntf_rpc_capacity(rpc_t *rpc, void *ctx);

#endif
