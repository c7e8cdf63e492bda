/*
 * loadctl module - what the module glue offers the module's other files
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: services of loadctl_mod.c that every role uses
 */

#ifndef _LOADCTL_MOD_H_
#define _LOADCTL_MOD_H_

#include "../../core/str.h"
#include "../../core/parser/msg_parser.h"

/* The policy_file modparam (checked when the configuration is read), NULL
 * when none. */
extern char *lc_policy_file;
/* The source modparam: the name policy_file and loadctl.publish publish
 * under by default. */
extern str lc_source;

/* A stateless reply through the sl API, which mod_init binds before any
 * role's init runs (so every script function may answer whatever the
 * configuration turned on). 1 when sent, -1 when not (logged). */
int lc_sl_reply(sip_msg_t *msg, int code, const char *reason);

/* The process's rank, for lc_proc_get(). */
int lc_current_rank(void);

#endif
