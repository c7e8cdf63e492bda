/*
 * loadctl module - lc_classify(), lc_reply() and $lc(...)
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: classification of a request, its reply, $lc(...)
 */

#ifndef _LOADCTL_CLASSIFY_H_
#define _LOADCTL_CLASSIFY_H_

#include "../../core/parser/msg_parser.h"
#include "../../core/pvar.h"
#include "../../modules/tm/tm_load.h"

#include "loadctl.h"

/* The retry_after modparam: seconds in a 503's Retry-After (0: none). */
extern int lc_retry_after;

/* mod_init: `tmb` is tm's API when tm is loaded (a window ticket then goes
 * with the request's transaction), NULL otherwise. 0, or -1 (logged). */
int lc_classify_init(struct tm_binds *tmb);

/* The request's origin for the engine's trust settings: its source address
 * (priority_peers) and, when the script set dialog_flag on it, a dialog the
 * script keeps. Writes o->source and o->flags, the transport too. */
void lc_msg_origin(sip_msg_t *msg, lc_sip_options *o);

/* lc_classify(): 1 accept, -1 reject, -2 redirect, -3 drop, -4 error. */
int ki_lc_classify(sip_msg_t *msg);
/* lc_reply(): answers the last lc_classify() verdict of this request. */
int ki_lc_reply(sip_msg_t *msg);

/* $lc(name) */
int pv_parse_lc_name(pv_spec_t *sp, str *in);
int pv_get_lc(sip_msg_t *msg, pv_param_t *param, pv_value_t *res);

#endif
