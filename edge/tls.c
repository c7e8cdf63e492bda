/* tls.c: SIP over TLS (RFC 3261 §26.3.1; RFC 7200 §7 and RFC 7339 §11 recommend it for the
 * load-control dialog and the overload feedback) with Debian's OpenSSL.
 *
 * Two contexts for the whole edge, TLS 1.2 or later:
 * - the server context (--tls-listen) presents --tls-cert / --tls-key; with --tls-ca it asks
 *   every client for a certificate and verifies one that is presented, and with
 *   --tls-require-client-cert the handshake fails without one (mutual TLS, as between
 *   operators);
 * - the client context (the next hop, the notifier) always verifies the server's certificate
 *   against --tls-ca and checks that it names the peer (an IP address in subjectAltName, or a
 *   DNS name there, whole, no wildcards; the CN only without a DNS subjectAltName), and
 *   presents --tls-cert when given.
 * Renegotiation is refused (a peer could otherwise make us do handshakes at will). Buffers of
 * idle sessions are released (SSL_MODE_RELEASE_BUFFERS): the connection table, not OpenSSL,
 * bounds memory.
 *
 * SIGHUP reads the files again (tls_reload): new connections get the new contexts, established
 * ones keep theirs (a session holds a reference to its context). The contexts are swapped under
 * a mutex that tls_accepting / tls_connecting take only to pick one up, so the TCP workers and
 * the main thread never use one that is being freed. */
#define _GNU_SOURCE

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "edge.h"
#include "tls.h"

static SSL_CTX *server_ctx, *client_ctx;
static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static tls_settings settings;

/* OpenSSL's error queue as one line (and emptied, so the next failure starts clean). */
static void queue_text(char *out, size_t cap) {
    size_t at = 0;
    out[0] = 0;
    unsigned long err;
    while ((err = ERR_get_error()) != 0) {
        char one[256];
        ERR_error_string_n(err, one, sizeof one);
        int n = snprintf(out + at, cap - at, "%s%s", at ? "; " : "", one);
        if (n < 0 || (size_t)n >= cap - at) break;
        at += (size_t)n;
    }
}

static SSL_CTX *context(const SSL_METHOD *method, const tls_settings *s, int server) {
    char why[512];
    SSL_CTX *ctx = SSL_CTX_new(method);
    if (!ctx) goto fail;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* An EOF without close_notify ends a stream as a TCP close does (SIP frames by
     * Content-Length, so no message can be cut short unnoticed). */
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
    /* One recv for as many records as are there, not two per record (header, then body). */
    SSL_CTX_set_read_ahead(ctx, 1);
    if (s->cert) {
        if (SSL_CTX_use_certificate_chain_file(ctx, s->cert) != 1) {
            queue_text(why, sizeof why);
            elog("tls: cannot use the certificate chain %s: %s\n", s->cert, why);
            SSL_CTX_free(ctx);
            return NULL;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, s->key, SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
            queue_text(why, sizeof why);
            elog("tls: cannot use the key %s with %s: %s\n", s->key, s->cert, why);
            SSL_CTX_free(ctx);
            return NULL;
        }
    }
    if (s->ca) {
        if (SSL_CTX_load_verify_locations(ctx, s->ca, NULL) != 1) {
            queue_text(why, sizeof why);
            elog("tls: cannot read the trust anchors %s: %s\n", s->ca, why);
            SSL_CTX_free(ctx);
            return NULL;
        }
        if (server) {
            STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(s->ca);
            if (names) SSL_CTX_set_client_CA_list(ctx, names);
        }
    }
    if (server) {
        /* Needed with client verification, or a client resuming a session is refused. */
        static const unsigned char sid[] = "loadctl-edge";
        SSL_CTX_set_session_id_context(ctx, sid, sizeof sid - 1);
        int mode = SSL_VERIFY_NONE;
        if (s->ca) mode = SSL_VERIFY_PEER | SSL_VERIFY_CLIENT_ONCE;
        if (s->ca && s->require_client_cert) mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
        SSL_CTX_set_verify(ctx, mode, NULL);
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    }
    return ctx;
fail:
    queue_text(why, sizeof why);
    elog("tls: %s\n", why);
    return NULL;
}

int tls_setup(const tls_settings *s) {
    settings = *s;
    if (s->cert && !(server_ctx = context(TLS_server_method(), s, 1))) return -1;
    if (s->ca && !(client_ctx = context(TLS_client_method(), s, 0))) return -1;
    return 0;
}

int tls_reload(void) {
    SSL_CTX *server = NULL, *client = NULL;
    if (settings.cert && !(server = context(TLS_server_method(), &settings, 1))) return -1;
    if (settings.ca && !(client = context(TLS_client_method(), &settings, 0))) {
        SSL_CTX_free(server);
        return -1;
    }
    pthread_mutex_lock(&ctx_mu);
    SSL_CTX *old_server = server_ctx, *old_client = client_ctx;
    server_ctx = server;
    client_ctx = client;
    pthread_mutex_unlock(&ctx_mu);
    SSL_CTX_free(old_server); /* sessions made from them hold their own references */
    SSL_CTX_free(old_client);
    return 0;
}

void tls_teardown(void) {
    SSL_CTX_free(server_ctx);
    SSL_CTX_free(client_ctx);
    server_ctx = client_ctx = NULL;
}

/* A session of the context `*ctx` (NULL when there is none). */
static SSL *session_of(SSL_CTX *const *ctx) {
    pthread_mutex_lock(&ctx_mu);
    SSL *ssl = *ctx ? SSL_new(*ctx) : NULL;
    pthread_mutex_unlock(&ctx_mu);
    return ssl;
}

SSL *tls_accepting(int fd) {
    SSL *ssl = session_of(&server_ctx);
    if (!ssl) return NULL;
    if (SSL_set_fd(ssl, fd) != 1) {
        SSL_free(ssl);
        return NULL;
    }
    SSL_set_accept_state(ssl);
    return ssl;
}

SSL *tls_connecting(int fd, const char *name) {
    SSL *ssl = session_of(&client_ctx);
    if (!ssl) return NULL;
    struct in_addr ip;
    int ok = SSL_set_fd(ssl, fd) == 1;
    if (ok && inet_pton(AF_INET, name, &ip) == 1) {
        ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1;
    } else if (ok) {
        /* No wildcards; the subject's CN only when there is no DNS subjectAltName (OpenSSL's
         * rule): the Kamailio module checks names the same way. */
        SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_WILDCARDS);
        ok = SSL_set1_host(ssl, name) == 1 && SSL_set_tlsext_host_name(ssl, name) == 1;
    }
    if (!ok) {
        SSL_free(ssl);
        return NULL;
    }
    SSL_set_connect_state(ssl);
    return ssl;
}

/* What an SSL_* call that returned `r` came to. */
static int outcome(SSL *ssl, int r) {
    switch (SSL_get_error(ssl, r)) {
    case SSL_ERROR_WANT_READ: return TLS_WANT_READ;
    case SSL_ERROR_WANT_WRITE: return TLS_WANT_WRITE;
    case SSL_ERROR_ZERO_RETURN: return TLS_CLOSED;
    case SSL_ERROR_SYSCALL:
        if (ERR_peek_error() == 0 && errno == ECONNRESET) return TLS_CLOSED;
        return TLS_FAILED;
    default: return TLS_FAILED;
    }
}

int tls_handshake(SSL *ssl, char *why, size_t cap) {
    ERR_clear_error();
    errno = 0;
    int r = SSL_do_handshake(ssl);
    if (r == 1) return 1;
    int o = outcome(ssl, r);
    if (o == TLS_WANT_READ || o == TLS_WANT_WRITE) return o;
    long v = SSL_get_verify_result(ssl);
    char queue[384];
    queue_text(queue, sizeof queue);
    if (v != X509_V_OK) {
        snprintf(why, cap, "certificate not accepted: %s", X509_verify_cert_error_string(v));
    } else if (queue[0]) {
        snprintf(why, cap, "%s", queue);
    } else {
        snprintf(why, cap, "%s", errno ? strerror(errno) : "connection closed during the handshake");
    }
    return TLS_FAILED;
}

ssize_t tls_read(SSL *ssl, char *buf, size_t cap) {
    ERR_clear_error();
    errno = 0;
    int r = SSL_read(ssl, buf, cap > 0x7fffffff ? 0x7fffffff : (int)cap);
    return r > 0 ? r : outcome(ssl, r);
}

ssize_t tls_write(SSL *ssl, const char *buf, size_t len) {
    ERR_clear_error();
    errno = 0;
    int r = SSL_write(ssl, buf, len > 0x7fffffff ? 0x7fffffff : (int)len);
    return r > 0 ? r : outcome(ssl, r);
}

int tls_pending(SSL *ssl) { return SSL_has_pending(ssl); }

void tls_describe(SSL *ssl, char *out, size_t cap) {
    X509 *peer = SSL_get1_peer_certificate(ssl);
    char subject[256] = "no certificate";
    if (peer) {
        X509_NAME_oneline(X509_get_subject_name(peer), subject, sizeof subject);
        X509_free(peer);
    }
    snprintf(out, cap, "%s, %s", subject, SSL_get_version(ssl));
}

void tls_goodbye(SSL *ssl) {
    ERR_clear_error();
    if (SSL_is_init_finished(ssl) && !(SSL_get_shutdown(ssl) & SSL_SENT_SHUTDOWN)) SSL_shutdown(ssl);
    ERR_clear_error();
}

void tls_close(SSL *ssl) {
    if (!ssl) return;
    tls_goodbye(ssl);
    SSL_free(ssl);
}
