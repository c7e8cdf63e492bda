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
 * \brief loadctl :: the TLS peer of a message (see lc_tls.h for the rules)
 *
 * The pseudo-variables are parsed once in mod_init, before the fork, so every
 * process has them; each read finds the message's connection by its id and
 * reads the certificate the tls module keeps for it.
 */

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../../core/dprint.h"
#include "../../core/ip_addr.h"
#include "../../core/pvar.h"

#include "lc_tls.h"

#define LC_TLS_NAME_MAX 256

/* Kamailio 5.8 gave the subjectAltName variables an index (written
 * `$(name[i])`: after `$name` a bracket is not read); 5.6's show the first
 * name of each type only. */
#if defined(VERSIONVAL) && VERSIONVAL >= 5008000
#define LC_TLS_INDEXED 1
#define LC_TLS_N LC_TLS_SANS
#else
#define LC_TLS_INDEXED 0
#define LC_TLS_N 1
#endif

static int _lc_tls_ready = 0;
static pv_spec_t _lc_tls_verified;
static pv_spec_t _lc_tls_cn;
static pv_spec_t _lc_tls_dns[LC_TLS_N];
static pv_spec_t _lc_tls_ip[LC_TLS_N];
static pv_spec_t _lc_tls_uri;

int lc_uri_transport_is(const char *uri, const char *transport)
{
	size_t n = strlen(transport);
	const char *p;

	for(p = strchr(uri, ';'); p; p = strchr(p + 1, ';')) {
		if(strncasecmp(p, ";transport=", 11) == 0
				&& strncasecmp(p + 11, transport, n) == 0
				&& (p[11 + n] == '\0' || strchr(";?>", p[11 + n])))
			return 1;
	}
	return 0;
}

int lc_tls_uri_wants(const char *uri)
{
	return strncasecmp(uri, "sips:", 5) == 0 || lc_uri_transport_is(uri, "tls");
}

int lc_tls_uri_host(const char *uri, char *out, size_t n)
{
	const char *colon = strchr(uri, ':');
	const char *host, *at, *end;
	size_t len;

	if(colon == NULL)
		return -1;
	host = colon + 1;
	at = strchr(host, '@');
	if(at && at < host + strcspn(host, ";?>"))
		host = at + 1;
	if(*host == '[') {
		host++;
		end = strchr(host, ']');
		if(end == NULL)
			return -1;
	} else {
		end = host + strcspn(host, ":;?>");
	}
	len = (size_t)(end - host);
	if(len == 0 || len >= n)
		return -1;
	memcpy(out, host, len);
	out[len] = '\0';
	return 0;
}

/* `name` as an IP address (`buf`: 16 bytes): its length (4 or 16), or 0. */
static int lc_tls_ip(const char *name, unsigned char *buf)
{
	if(inet_pton(AF_INET, name, buf) == 1)
		return 4;
	if(inet_pton(AF_INET6, name, buf) == 1)
		return 16;
	return 0;
}

int lc_tls_name_ok(const char *name)
{
	unsigned char ip[16];
	size_t len = strlen(name);

	if(len == 0 || len >= LC_TLS_NAME_MAX)
		return 0;
	if(lc_tls_ip(name, ip))
		return 1;
	/* RFC 5922 §7.2: no wildcard matches; a name with one could never be
	 * carried */
	return strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
						"0123456789-.")
		   == len;
}

/* DNS names equal as RFC 5922 §7.2 compares them: whole, ASCII case
 * ignored; a final dot does not count. */
static int lc_tls_same_dns(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);

	if(la > 0 && a[la - 1] == '.')
		la--;
	if(lb > 0 && b[lb - 1] == '.')
		lb--;
	return la > 0 && la == lb && strncasecmp(a, b, la) == 0;
}

static int lc_tls_parse(pv_spec_t *sp, const char *text)
{
	str s;

	s.s = (char *)text;
	s.len = (int)strlen(text);
	/* silent: a missing tls module is reported once, below */
	return pv_parse_spec2(&s, sp, 1) == NULL ? -1 : 0;
}

int lc_tls_init(void)
{
	char name[64];
	int i, bad = 0;

	if(_lc_tls_ready)
		return 0;
	bad |= lc_tls_parse(&_lc_tls_verified, "$tls_peer_verified");
	bad |= lc_tls_parse(&_lc_tls_cn, "$tls_peer_subject_cn");
	bad |= lc_tls_parse(&_lc_tls_uri, "$tls_peer_san_uri");
	for(i = 0; i < LC_TLS_N && !bad; i++) {
		if(LC_TLS_INDEXED)
			snprintf(name, sizeof(name), "$(tls_peer_san_hostname[%d])", i);
		else
			snprintf(name, sizeof(name), "$tls_peer_san_hostname");
		bad |= lc_tls_parse(&_lc_tls_dns[i], name);
		if(LC_TLS_INDEXED)
			snprintf(name, sizeof(name), "$(tls_peer_san_ip[%d])", i);
		else
			snprintf(name, sizeof(name), "$tls_peer_san_ip");
		bad |= lc_tls_parse(&_lc_tls_ip[i], name);
	}
	if(bad) {
		LM_ERR("a subscription over TLS needs Kamailio's tls module (loadmodule "
			   "\"tls.so\" before this module): its $tls_peer_* "
			   "pseudo-variables tell who the notifier is\n");
		return -1;
	}
	_lc_tls_ready = 1;
	return 0;
}

/* A string variable's value into `out`: 1, or 0 when it has none (or a
 * longer one than any name). */
static int lc_tls_get(sip_msg_t *msg, pv_spec_t *sp, char *out, size_t n)
{
	pv_value_t v;
	int got = 0;

	memset(&v, 0, sizeof(v));
	if(pv_get_spec_value(msg, sp, &v) != 0)
		return 0;
	if(!(v.flags & PV_VAL_NULL) && (v.flags & PV_VAL_STR) && v.rs.s
			&& v.rs.len > 0 && (size_t)v.rs.len < n) {
		memcpy(out, v.rs.s, v.rs.len);
		out[v.rs.len] = '\0';
		got = 1;
	}
	pv_value_destroy(&v);
	return got;
}

static int lc_tls_verified(sip_msg_t *msg)
{
	pv_value_t v;
	int yes = 0;

	memset(&v, 0, sizeof(v));
	if(pv_get_spec_value(msg, &_lc_tls_verified, &v) != 0)
		return 0;
	if(!(v.flags & PV_VAL_NULL)) {
		if(v.flags & PV_TYPE_INT)
			yes = v.ri == 1;
		else if(v.flags & PV_VAL_STR)
			yes = v.rs.len == 1 && v.rs.s[0] == '1';
	}
	pv_value_destroy(&v);
	return yes;
}

/* Appends "`what` `name`" to the list of names the certificate carries
 * (for the reason of a refusal). */
static void lc_tls_note(char *seen, size_t n, const char *what, const char *name)
{
	size_t at = strlen(seen);
	if(at < n)
		snprintf(seen + at, n - at, "%s%s:%s", at ? ", " : "", what, name);
}

int lc_tls_peer_is(sip_msg_t *msg, const char *name, char *why, size_t n)
{
	char got[LC_TLS_NAME_MAX], seen[384];
	unsigned char want_ip[16], got_ip[16];
	int i, ip_len, sans = 0;

	if(msg->rcv.proto != PROTO_TLS) {
		snprintf(got, sizeof(got), "%s", get_proto_name(msg->rcv.proto));
		for(i = 0; got[i]; i++)
			got[i] = (char)toupper((unsigned char)got[i]);
		snprintf(why, n, "it came over %s, not TLS", got);
		return 0;
	}
	if(!_lc_tls_ready) {
		snprintf(why, n, "the tls module's pseudo-variables are not available");
		return 0;
	}
	if(!lc_tls_verified(msg)) {
		snprintf(why, n,
				"its TLS peer's certificate was not verified (none presented, "
				"or not from a trusted CA)");
		return 0;
	}
	seen[0] = '\0';
	ip_len = lc_tls_ip(name, want_ip);
	for(i = 0; i < LC_TLS_N; i++) {
		if(!lc_tls_get(msg, &_lc_tls_ip[i], got, sizeof(got)))
			break;
		sans++;
		lc_tls_note(seen, sizeof(seen), "IP", got);
		if(ip_len && lc_tls_ip(got, got_ip) == ip_len
				&& memcmp(got_ip, want_ip, ip_len) == 0)
			return 1;
	}
	for(i = 0; i < LC_TLS_N; i++) {
		if(!lc_tls_get(msg, &_lc_tls_dns[i], got, sizeof(got)))
			break;
		sans++;
		lc_tls_note(seen, sizeof(seen), "DNS", got);
		if(!ip_len && lc_tls_same_dns(got, name))
			return 1;
	}
	if(lc_tls_get(msg, &_lc_tls_uri, got, sizeof(got))) {
		sans++;
		lc_tls_note(seen, sizeof(seen), "URI", got);
	}
	/* RFC 6125 §6.4.4: the CN only when no subjectAltName names a host */
	if(!sans && lc_tls_get(msg, &_lc_tls_cn, got, sizeof(got))) {
		lc_tls_note(seen, sizeof(seen), "CN", got);
		if(!ip_len && lc_tls_same_dns(got, name))
			return 1;
	}
	snprintf(why, n, "its TLS peer's certificate names %s, not %s",
			seen[0] ? seen : "nothing", name);
	return 0;
}
