/*
 * loadctl module - the RPC commands
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: loadctl.* RPC commands
 */

#ifndef _LOADCTL_RPC_H_
#define _LOADCTL_RPC_H_

/* Registers every loadctl.* command (mod_init). 0, or -1 (logged). */
int lc_rpc_register(void);

#endif
