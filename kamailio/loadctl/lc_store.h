/*
 * loadctl module - the policy documents every process applies
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: the document store in shared memory
 *
 * One document per source (notifiers, the policy file, RPC publishers), with
 * a version counter that a worker reads once per request (one atomic load)
 * and re-publishes into its own engine when it changed (lc_proc_sync()). A
 * document is first applied to a private engine in the publishing process
 * (the validator), so one that every engine would refuse is never stored.
 */

#ifndef _LOADCTL_STORE_H_
#define _LOADCTL_STORE_H_

#include <stddef.h>

#include "../../core/str.h"
#include "loadctl.h"

/* Validates `body` as a full document for `source` (checked against the other
 * sources, as an engine would apply it) and stores it; workers pick it up on
 * their next request. On failure writes why into `err` and changes nothing. */
int lc_store_publish(
		str *source, const char *body, size_t len, char *err, size_t errlen);
/* The same for a document a notifier sent (`notifier`: its URI, at most
 * LC_SOURCE_MAX - 1 bytes): the engines check its redirect targets against the
 * notifier's own domain and redirect_allow (RFC 7200 §7). lc_store_publish()
 * stores the operator's documents (policy_file, loadctl.publish): trusted. */
int lc_store_publish_from(str *source, str *notifier, const char *body,
		size_t len, char *err, size_t errlen);
/* Frees this process's validating engine (mod_init does, before the fork). */
void lc_store_drop_validator(void);
/* Removes `source`'s document. -1 if there is none. */
int lc_store_withdraw(str *source);
/* Calls cb for each stored source: name, the store version that published
 * it, its document's RFC 7200 version (-1 when this process cannot compile
 * the store), its size. Under the store lock: do not publish from cb. */
void lc_store_each(void (*cb)(void *p, const char *name, unsigned int seq,
						   long doc_version, size_t len),
		void *p);
/* The store's change counter: one more at every publish or withdraw. */
unsigned int lc_store_version(void);
/* Calls cb for each rule of the stored policy, in the order rules are tried
 * (compiled in the calling process; under the store lock): its counters in
 * that engine, or (lc_store_rule_info) what it is. -1 on failure. */
int lc_store_rules(void (*cb)(void *p, const lc_rule_stats *row), void *p);
int lc_store_rule_info(void (*cb)(void *p, const lc_rule_info *row), void *p);

#endif
