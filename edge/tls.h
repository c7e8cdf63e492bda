/* SIP over TLS with Debian's OpenSSL (tls.c): the edge's two contexts (server side for
 * --tls-listen, client side for the next hop and the notifier), a connection's handshake, reads
 * and writes, and what a failure was, for the log. The TCP thread's connections and the
 * subscriber's link to its notifier use it; only this file and its callers see OpenSSL. */
#ifndef LOADCTL_EDGE_TLS_H
#define LOADCTL_EDGE_TLS_H

#include <stddef.h>
#include <sys/types.h>

#include <openssl/ssl.h>

/* What --tls-* say. */
typedef struct {
    const char *cert, *key; /* this edge's certificate chain and key (PEM), or NULL */
    const char *ca;         /* trust anchors (PEM) that peers' certificates must chain to */
    int require_client_cert;
} tls_settings;

/* Builds the contexts: the server one only with a certificate and key. 0, or -1 (logged: which
 * file, and OpenSSL's reason). */
int tls_setup(const tls_settings *s);
/* SIGHUP: reads the certificate, key and CA files again and builds new contexts for new
 * connections; when a file cannot be used the old contexts stay (logged). 0, or -1. */
int tls_reload(void);
void tls_teardown(void);

/* A TLS session on a connected (or connecting) non-blocking socket: the server side of an
 * accepted connection, or the client side toward `name` (an IPv4 address or a DNS name the
 * peer's certificate must carry; sent as SNI when it is a name). NULL when out of memory, or
 * when the side has no context (logged). */
SSL *tls_accepting(int fd);
SSL *tls_connecting(int fd, const char *name);

/* What a step of the handshake, a read or a write came to. */
enum { TLS_WANT_READ = -1, TLS_WANT_WRITE = -2, TLS_CLOSED = -3, TLS_FAILED = -4 };

/* Advances the handshake: 1 when it is complete (the peer's certificate verified as the
 * context requires), or a TLS_* value; on TLS_FAILED `why` (`cap` bytes) says why. */
int tls_handshake(SSL *ssl, char *why, size_t cap);
/* Up to `cap` bytes of application data: how many (> 0), or a TLS_* value. */
ssize_t tls_read(SSL *ssl, char *buf, size_t cap);
/* Writes up to `len` bytes (partial writes allowed): how many (> 0), or a TLS_* value. */
ssize_t tls_write(SSL *ssl, const char *buf, size_t len);
/* Whether bytes already read from the socket wait in the session, decrypted or not (epoll
 * does not see them). */
int tls_pending(SSL *ssl);
/* The peer's certificate subject and the protocol, for the log ("CN=… TLSv1.3"). */
void tls_describe(SSL *ssl, char *out, size_t cap);
/* Sends close_notify once (best effort: the socket does not wait). */
void tls_goodbye(SSL *ssl);
/* Sends close_notify (best effort) and frees the session; NULL is a no-op. */
void tls_close(SSL *ssl);

#endif
