/* tls.h -- owns the TLS certificate and key of the listening socket: reading the PEM files and
 * checking them (GnuTLS) before the server starts. */
#ifndef VBMEM_HTTP_TLS_H
#define VBMEM_HTTP_TLS_H

#include "engine/clock.h"

/* A certificate chain and its private key, PEM text (NUL-terminated, owned). */
typedef struct {
    char *cert_pem;
    char *key_pem;
} http_tls;

/* Read the certificate (chain) file cert_path and the private key file
 * key_path (PEM, at most 1 MiB each) into *out and check with GnuTLS that
 * they parse and that the key belongs to the certificate. Both paths NULL or
 * "" gives an empty *out (plain HTTP). Fails with VBM_EINVAL naming the field
 * "tls_cert" or "tls_key": only one of them given, a file missing, unreadable,
 * empty or too large, not PEM, or a key that does not match; VBM_ENOMEM. On
 * failure *out is empty. Release with http_tls_free. */
vbm_status http_tls_load(const char *cert_path, const char *key_path, http_tls *out,
                         vbm_error *err);

/* 1 when *t holds a certificate and key. */
int http_tls_enabled(const http_tls *t);

/* Wipe and free what *t holds (the key's bytes are zeroed first). Never fails. */
void http_tls_free(http_tls *t);

#endif
