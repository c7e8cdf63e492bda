/*
 * loadctl module - who sent a message over TLS
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: the TLS peer of a message, as Kamailio's tls module saw it
 *
 * RFC 7200 §7: "if the notifiers can be spoofed, attackers can send fake
 * notifications asking subscribers to throttle all traffic"; RFC 6665 leaves
 * authenticating the notifier to the SIP layer. A subscription to a `sips:`
 * notifier (or one with `;transport=tls`) hears its notifier only on a TLS
 * connection whose peer certificate Kamailio's tls module verified and which
 * names the notifier. The module links no TLS library: it asks the tls
 * module through its pseudo-variables ($tls_peer_verified, the
 * subjectAltNames, the subject's CN), which Kamailio 5.6 to 6.1 all export.
 *
 * A certificate names a host when (RFC 5922 §7, RFC 6125 §6.4):
 * - for an IP address: one of its subjectAltName IP addresses is that
 *   address;
 * - for a DNS name: one of its subjectAltName DNS names is that name, ASCII
 *   case ignored, a final dot ignored, whole: no wildcard ever matches
 *   (`*.example.net` names no host), no suffix;
 * - the subject's CN counts, as a DNS name, only when the certificate has
 *   no subjectAltName DNS name, IP address or URI.
 * Kamailio 5.6's tls module shows only the first subjectAltName of each type,
 * so there the notifier's name must be the first DNS name (or IP address) of
 * its certificate; from 5.8 on the first LC_TLS_SANS of each are read.
 */

#ifndef _LOADCTL_TLS_H_
#define _LOADCTL_TLS_H_

#include <stddef.h>

#include "../../core/parser/msg_parser.h"

/* subjectAltNames of each type read from a certificate (Kamailio 5.8+). */
#define LC_TLS_SANS 16

/* Whether a SIP URI's transport parameter is `transport` (RFC 3261 §19.1.1;
 * the name compared without case). */
int lc_uri_transport_is(const char *uri, const char *transport);
/* Whether a notifier URI asks for TLS: `sips:`, or `;transport=tls`. */
int lc_tls_uri_wants(const char *uri);
/* The host of a SIP URI (an IPv6 reference without its brackets) into
 * `out`: 0, or -1 when there is none or it does not fit. */
int lc_tls_uri_host(const char *uri, char *out, size_t n);
/* Whether `name` is acceptable as the name a certificate must carry: a DNS
 * name or an IP address, no wildcard. */
int lc_tls_name_ok(const char *name);
/* mod_init, when a subscription is over TLS: resolves the tls module's
 * pseudo-variables. 0, or -1 (logged) when the tls module is not loaded. */
int lc_tls_init(void);
/* Whether `msg` came over TLS from a peer whose certificate Kamailio's tls
 * module verified and which names `name` (see above): 1; else 0 with the
 * reason in `why`. Any process that handles the message. */
int lc_tls_peer_is(sip_msg_t *msg, const char *name, char *why, size_t n);

#endif
