/*
 * loadctl module - how a subscriber's events read
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: one subscriber event as a line (the log, last_event)
 */

#ifndef _LOADCTL_SUB_EVENT_H_
#define _LOADCTL_SUB_EVENT_H_

#include <stddef.h>

#include "loadctl.h"

/* "what number [from NOTIFIER: ]text", the text's lines joined with "; "
 * (a document's warnings come one per line), cut to `n` bytes. */
void lc_sub_event_line(const lc_subscriber_event *ev, char *line, size_t n);
/* The event is logged at WARNING (a refused document, or warnings). */
int lc_sub_event_warns(lc_subscriber_event_kind k);

#endif
