/*
 * loadctl module - feedback overload control (RFC 7339 / RFC 7415)
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: overload control: Kamailio as an RFC 7339 / RFC 7415
 * client of its destinations and as a server to its upstream clients
 *
 * Client: the hop table (what each destination asked for, its suspension and
 * its rate bucket) lives in shared memory, formatted in mod_init; every
 * process attaches its own libloadctl client to it and keeps its own shard.
 * lc_oc_forward(dst) decides for a new request and, when it goes, makes the
 * core add `oc;oc-algo="loss"` to the Via tm inserts (the core's
 * xavp_via_params; loss only: Kamailio 5.6's Via parser refuses the comma of a
 * quoted "loss,rate"); lc_oc_reply() applies the feedback in a reply's top Via;
 * lc_oc_timeout(dst) counts a transaction timeout.
 *
 * Server: every process has its own libloadctl server on the loss algorithm
 * (a percentage each process can apply to the share of the traffic it sees;
 * a rate would need one view of all processes). lc_oc_occupancy() stores the
 * load signal in shared memory, where every process picks it up;
 * lc_oc_check() counts a request and tells whether to answer it 503 (a client
 * that does not take part, in overload); lc_oc_via() writes this server's
 * values into the client's Via of a reply being relayed upstream.
 */

#ifndef _LOADCTL_OC_H_
#define _LOADCTL_OC_H_

#include "../../core/parser/msg_parser.h"
#include "../../core/str.h"
#include "../../modules/tm/tm_load.h"

/* modparams */
extern int lc_oc_enable;
extern int lc_oc_hops;
extern int lc_oc_validity_ms;
extern int lc_oc_tau_priority;
extern int lc_oc_hop_idle;
extern int lc_oc_log;

/* mod_init; `tmb`: tm's API, NULL without tm. */
int lc_oc_mod_init(struct tm_binds *tmb);
void lc_oc_destroy(void);

int ki_lc_oc_forward(sip_msg_t *msg, str *dst);
int ki_lc_oc_reply(sip_msg_t *msg);
int ki_lc_oc_timeout(sip_msg_t *msg, str *dst);
int ki_lc_oc_check(sip_msg_t *msg);
int ki_lc_oc_occupancy(sip_msg_t *msg, int measured_ppm, int target_ppm);
int ki_lc_oc_via(sip_msg_t *msg);

#endif
