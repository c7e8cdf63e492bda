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
 * \brief loadctl :: a subscriber event as a line (see lc_sub_event.h)
 */

#include <stdio.h>

#include "lc_sub_event.h"

static const char *lc_sub_event_name(lc_subscriber_event_kind k)
{
	switch(k) {
		case LC_SUBSCRIBER_EVENT_KIND_SUBSCRIBED:
			return "subscribed (seconds)";
		case LC_SUBSCRIBER_EVENT_KIND_PENDING:
			return "pending";
		case LC_SUBSCRIBER_EVENT_KIND_POLICY_APPLIED:
			return "policy applied (version)";
		case LC_SUBSCRIBER_EVENT_KIND_POLICY_WITHDRAWN:
			return "policy withdrawn";
		case LC_SUBSCRIBER_EVENT_KIND_DOCUMENT_IGNORED:
			return "document ignored (version)";
		case LC_SUBSCRIBER_EVENT_KIND_INVALID_DOCUMENT:
			return "invalid document, policy kept";
		case LC_SUBSCRIBER_EVENT_KIND_APPLY_FAILED:
			return "document refused by the engine";
		case LC_SUBSCRIBER_EVENT_KIND_UNKNOWN_BODY:
			return "unknown body discarded";
		case LC_SUBSCRIBER_EVENT_KIND_REDIRECT_OUTSIDE_ALLOW_LIST:
			return "redirect outside the allow-list";
		case LC_SUBSCRIBER_EVENT_KIND_NOTIFY_REJECTED:
			return "NOTIFY rejected (status)";
		case LC_SUBSCRIBER_EVENT_KIND_RETRYING:
			return "retrying";
		case LC_SUBSCRIBER_EVENT_KIND_LAPSED:
			return "subscription lapsed";
		case LC_SUBSCRIBER_EVENT_KIND_STOPPED:
			return "subscription stopped";
		case LC_SUBSCRIBER_EVENT_KIND_DOCUMENT_WARNINGS:
			return "document warnings (version)";
		case LC_SUBSCRIBER_EVENT_KIND_NOTHING_TO_UPDATE:
			return "NOTIFY without body, policy kept";
	}
	return "event";
}

void lc_sub_event_line(const lc_subscriber_event *ev, char *line, size_t n)
{
	const char *what = lc_sub_event_name(ev->kind);
	char detail[768];
	size_t dl = 0, k;

	/* the notifier that sent a document, then the text on one line */
	if(ev->notifier.ptr) {
		int w = snprintf(detail, sizeof(detail),
				"from %.*s: ", (int)ev->notifier.len,
				(const char *)ev->notifier.ptr);
		dl = w < 0 ? 0
				   : ((size_t)w < sizeof(detail) ? (size_t)w
												 : sizeof(detail) - 1);
	}
	for(k = 0; ev->text.ptr && k < ev->text.len && dl + 3 < sizeof(detail);
			k++) {
		if(ev->text.ptr[k] == '\n') {
			detail[dl++] = ';';
			detail[dl++] = ' ';
		} else {
			detail[dl++] = (char)ev->text.ptr[k];
		}
	}
	detail[dl] = '\0';
	if(ev->number == LC_VERSION_UNKNOWN
			&& ev->kind == LC_SUBSCRIBER_EVENT_KIND_INVALID_DOCUMENT)
		snprintf(line, n, "%s (version unknown) 0 %s", what, detail);
	else
		snprintf(line, n, "%s %llu %s", what, (unsigned long long)ev->number,
				detail);
}

int lc_sub_event_warns(lc_subscriber_event_kind k)
{
	return k == LC_SUBSCRIBER_EVENT_KIND_INVALID_DOCUMENT
		   || k == LC_SUBSCRIBER_EVENT_KIND_APPLY_FAILED
		   || k == LC_SUBSCRIBER_EVENT_KIND_DOCUMENT_WARNINGS;
}
