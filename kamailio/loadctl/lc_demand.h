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
 * \brief loadctl :: what each subscriber of the notifier sends (lc_observe)
 *
 * Demand for a capacity share comes from lc_observe(): each call counts one
 * request of the shared class for a subscriber — the one whose SUBSCRIBE came
 * from the request's source address, or the one named — in a shared-memory
 * slot (an atomic add; only the notifier's owner creates slots, so workers
 * only read the table). The owner reads the slots every 100 ms and feeds the
 * new counts to lc_notifier_observe, and copies the allocation's view of
 * each subscriber back for loadctl.notifier.
 */

#ifndef _LOADCTL_DEMAND_H_
#define _LOADCTL_DEMAND_H_

#include <stddef.h>
#include <stdint.h>

#include "../../core/ip_addr.h"
#include "../../core/rpc.h"
#include "../../core/str.h"
#include "../../core/parser/msg_parser.h"

#include "loadctl.h"

/* Most subscribers one notifier keeps slots for. */
#define LC_MAX_NOTIFY_SLOTS 64

/* mod_init: the slots in shared memory. 0, or -1 (logged). */
int lc_demand_init(void);

/* A worker, lc_observe([subscriber]): counts one request. 1, or -1 when no
 * subscriber matches (counted in unknown_observations). */
int lc_demand_count(sip_msg_t *msg, str *subscriber);

/* The owner: subscriber `uri` subscribed (`delta` 1) or refreshed (0), from
 * `dst` when known (its slot is made when new), or one of its subscriptions
 * ended (-1). */
void lc_demand_subscription(
		const char *uri, size_t len, struct dest_info *dst, int delta);
/* The owner: feeds the counts added since the last call to `n`. */
void lc_demand_feed(lc_notifier *n, uint64_t now);
/* The owner: copies `n`'s allocation (demand, target, share) to the slots. */
void lc_demand_shares(lc_notifier *n);

/* loadctl.notifier: requests no subscriber matched; every slot into `arr`. */
unsigned long long lc_demand_unknown(void);
void lc_demand_rpc(rpc_t *rpc, void *arr);

#endif
