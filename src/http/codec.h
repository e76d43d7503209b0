/* codec.h -- owns the JSON wire forms of the API: codes (JSON numbers or base64 float32), ELBOs, addresses, session info, request options. */
#ifndef VBMEM_HTTP_CODEC_H
#define VBMEM_HTTP_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "engine/engine.h"
#include "engine/session.h"
#include "vbmem/vbmem.h"

/* Codes decoded from a request; owns mu and s2. */
typedef struct {
    long T;
    int C;
    double *mu; /* T x C */
    double *s2; /* T x C, or NULL: all zero */
} codec_codes;

/* Parse a request body as JSON (jansson flags as json_loadb) into *out (owned by
 * the caller). Same result as json_loadb; faster for bodies carrying long base64
 * strings (codes, PNGs, raw tensors): such strings (>= CODEC_FAST_STRING
 * characters, base64 alphabet only, so with no escapes) are cut out before
 * jansson parses the rest and set back afterwards without a second scan.
 * Returns 0, or -1 with *jerr filled by jansson (malformed JSON, out of memory). */
#define CODEC_FAST_STRING 1024
int codec_parse_body(const char *body, size_t len, size_t flags, json_t **out, json_error_t *jerr);

/* Decode standard base64 (with '=' padding, no whitespace) of n characters.
 * On success *out (malloc'd, owned by the caller) holds *outlen bytes. Returns
 * 0, or -1 for invalid input or when out of memory. */
int codec_b64_decode(const char *s, size_t n, unsigned char **out, size_t *outlen);

/* Encode n bytes as standard padded base64 into a new NUL-terminated string
 * (malloc'd). Returns NULL when out of memory. */
char *codec_b64_encode(const unsigned char *data, size_t n);

/* Decode a codes object {"mu": M, "sigma2": S} at JSON path `path`. M is a
 * T x C array of arrays of numbers, or a tensor {"dtype": "float32", "shape":
 * [T, C], "data": base64 of T*C little-endian float32}. S is absent (zero
 * variances), a number >= 0 for every entry, or a T x C array / tensor. T must
 * be in [1, max_frames] and C in [1, max_code_size]. Fails with VBM_EINVAL
 * naming the offending member (err->field = JSON path), or VBM_ENOMEM; *out is
 * then empty. */
vbm_status codec_read_codes(const json_t *v, const char *path, long max_frames, int max_code_size,
                            codec_codes *out, vbm_error *err);

/* Release a codec_codes. */
void codec_codes_free(codec_codes *c);

/* A rows x cols matrix of doubles as JSON: nested arrays of numbers, or when
 * base64 is non-zero a float32 tensor object. Non-finite values become null
 * in the array form. Returns NULL when out of memory. */
json_t *codec_matrix(const double *a, long rows, long cols, int base64);

/* A rows x cols matrix of ints as nested arrays. NULL when out of memory. */
json_t *codec_int_matrix(const int *a, long rows, long cols);

/* A JSON real, or null when x is not finite. */
json_t *codec_number(double x);

/* The ELBO object {per_frame, total, loglik_codes, kl_w, kl_s, kl_M, kl_b, T}. */
json_t *codec_elbo(const vbm_elbo *e);

/* The addresses object {s: T x G x H, w_mu: T x G x H x K, w_cov: G x H x K x K
 * or null}. NULL when out of memory. */
json_t *codec_addresses(const vbm_addresses *a);

/* G x H cluster usage (expected frames), or JSON null when u is NULL. */
json_t *codec_usage(const double *u, int G, int H);

/* The twelve-field configuration object (the "config" of memory_json). */
json_t *codec_config(const vbm_config *cfg);

/* The session resource for GET /v1/sessions/{id}. NULL when out of memory. */
json_t *codec_info(const eng_info *info);

/* Name of an init ("auto", "prior", "kmeans++", "current", "random"). */
const char *codec_init_name(vbm_init init);

/* Reject members of obj not in the NULL-terminated list allowed: VBM_EINVAL
 * with field "path.member" (or "member" when path is ""). */
vbm_status codec_check_keys(const json_t *obj, const char *path, const char *const *allowed,
                            vbm_error *err);

/* Optional members of obj (unchanged when absent). Each fails with VBM_EINVAL
 * naming key for a wrong type or a value outside [lo, hi]. */
vbm_status codec_opt_long(const json_t *obj, const char *key, long lo, long hi, long *out,
                          vbm_error *err);
vbm_status codec_opt_double(const json_t *obj, const char *key, double lo, double hi, double *out,
                            vbm_error *err);
vbm_status codec_opt_bool(const json_t *obj, const char *key, int *out, vbm_error *err);
/* seed: a non-negative integer or a string of decimal digits up to 2^64 - 1. */
vbm_status codec_opt_seed(const json_t *obj, const char *key, uint64_t *out, vbm_error *err);
/* init: one of the names of codec_init_name. */
vbm_status codec_opt_init(const json_t *obj, const char *key, int *out, vbm_error *err);
/* encoding: "json" (0) or "base64" (1). */
vbm_status codec_opt_encoding(const json_t *obj, const char *key, int *out, vbm_error *err);

/* RFC 3339 UTC time string (millisecond precision) of a wall-clock time. */
json_t *codec_time(double wall);

#endif
