/* tls.c -- owns loading and checking the PEM certificate and key of vbmemd's TLS listener. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include "http/tls.h"

#define TLS_MAX_FILE (1L << 20)

/* Read a whole regular file of 1..TLS_MAX_FILE bytes into a NUL-terminated
 * buffer. */
static vbm_status tls_read(const char *path, const char *field, char **out, vbm_error *err)
{
    struct stat sb;
    FILE *fp;
    char *buf;
    size_t n;

    *out = NULL;
    fp = fopen(path, "rb");
    if (fp == NULL)
        return vbm_fail(err, VBM_EINVAL, field, "cannot open %s: %s", path, strerror(errno));
    if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(fp);
        return vbm_fail(err, VBM_EINVAL, field, "%s is not a regular file", path);
    }
    if (sb.st_size <= 0 || sb.st_size > TLS_MAX_FILE) {
        fclose(fp);
        return vbm_fail(err, VBM_EINVAL, field, "%s has %lld bytes (expected 1 to %ld)", path,
                        (long long)sb.st_size, TLS_MAX_FILE);
    }
    buf = malloc((size_t)sb.st_size + 1);
    if (buf == NULL) {
        fclose(fp);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory reading %s", path);
    }
    n = fread(buf, 1, (size_t)sb.st_size, fp);
    if (n != (size_t)sb.st_size || ferror(fp)) {
        fclose(fp);
        memset(buf, 0, (size_t)sb.st_size);
        free(buf);
        return vbm_fail(err, VBM_EINVAL, field, "error reading %s", path);
    }
    fclose(fp);
    buf[n] = '\0';
    *out = buf;
    return VBM_OK;
}

/* Check that cert and key parse as PEM and belong together. Each is parsed on
 * its own first: that names the bad one, and GnuTLS 3.7's credential loader
 * leaks a certificate structure when handed one that does not parse. */
static vbm_status tls_check(const http_tls *t, const char *cert_path, const char *key_path,
                            vbm_error *err)
{
    gnutls_certificate_credentials_t cred;
    gnutls_x509_crt_t crt;
    gnutls_x509_privkey_t pkey;
    gnutls_datum_t c, k;
    int rc;

    c.data = (unsigned char *)t->cert_pem;
    c.size = (unsigned int)strlen(t->cert_pem);
    k.data = (unsigned char *)t->key_pem;
    k.size = (unsigned int)strlen(t->key_pem);
    if (gnutls_x509_crt_init(&crt) != GNUTLS_E_SUCCESS)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory checking the TLS certificate");
    rc = gnutls_x509_crt_import(crt, &c, GNUTLS_X509_FMT_PEM);
    gnutls_x509_crt_deinit(crt);
    if (rc < 0)
        return vbm_fail(err, VBM_EINVAL, "tls_cert", "%s is not a PEM X.509 certificate: %s",
                        cert_path, gnutls_strerror(rc));
    if (gnutls_x509_privkey_init(&pkey) != GNUTLS_E_SUCCESS)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory checking the TLS key");
    rc = gnutls_x509_privkey_import2(pkey, &k, GNUTLS_X509_FMT_PEM, NULL, GNUTLS_PKCS_PLAIN);
    gnutls_x509_privkey_deinit(pkey);
    if (rc < 0)
        return vbm_fail(err, VBM_EINVAL, "tls_key", "%s is not an unencrypted PEM private key: %s",
                        key_path, gnutls_strerror(rc));
    if (gnutls_certificate_allocate_credentials(&cred) != GNUTLS_E_SUCCESS)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory checking the TLS certificate");
    rc = gnutls_certificate_set_x509_key_mem(cred, &c, &k, GNUTLS_X509_FMT_PEM);
    gnutls_certificate_free_credentials(cred);
    if (rc >= 0)
        return VBM_OK;
    if (rc == GNUTLS_E_CERTIFICATE_KEY_MISMATCH)
        return vbm_fail(err, VBM_EINVAL, "tls_key",
                        "the key %s does not belong to the certificate %s", key_path, cert_path);
    if (rc == GNUTLS_E_MEMORY_ERROR)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory checking the TLS certificate");
    return vbm_fail(err, VBM_EINVAL, "tls_cert", "GnuTLS refuses %s with %s: %s", cert_path,
                    key_path, gnutls_strerror(rc));
}

vbm_status http_tls_load(const char *cert_path, const char *key_path, http_tls *out, vbm_error *err)
{
    int has_cert = cert_path != NULL && cert_path[0] != '\0';
    int has_key = key_path != NULL && key_path[0] != '\0';
    vbm_status st;

    memset(out, 0, sizeof *out);
    if (!has_cert && !has_key)
        return VBM_OK;
    if (!has_cert)
        return vbm_fail(err, VBM_EINVAL, "tls_cert", "--tls-key needs --tls-cert as well");
    if (!has_key)
        return vbm_fail(err, VBM_EINVAL, "tls_key", "--tls-cert needs --tls-key as well");
    st = tls_read(cert_path, "tls_cert", &out->cert_pem, err);
    if (st == VBM_OK)
        st = tls_read(key_path, "tls_key", &out->key_pem, err);
    if (st == VBM_OK)
        st = tls_check(out, cert_path, key_path, err);
    if (st != VBM_OK)
        http_tls_free(out);
    return st;
}

int http_tls_enabled(const http_tls *t)
{
    return t != NULL && t->cert_pem != NULL && t->key_pem != NULL;
}

void http_tls_free(http_tls *t)
{
    if (t->key_pem != NULL) {
        volatile char *p = t->key_pem;
        size_t i, n = strlen(t->key_pem);

        for (i = 0; i < n; i++)
            p[i] = 0;
    }
    free(t->key_pem);
    free(t->cert_pem);
    t->key_pem = NULL;
    t->cert_pem = NULL;
}
