/* codes.h -- owns the JSON forms of codes (nested arrays of numbers or base64 float32 tensors), of
 * result matrices and of addresses. */
#ifndef VBMEM_WIRE_CODES_H
#define VBMEM_WIRE_CODES_H

#include <jansson.h>

#include "vbmem/vbmem.h"
#include "wire/values.h"

/* Codes decoded from a request or job; owns mu and s2. */
typedef struct {
    long T;
    int C;
    double *mu; /* T x C */
    double *s2; /* T x C, or NULL: all zero */
} wire_codes;

/* Decode a codes object {"mu": M, "sigma2": S} at JSON path `path`. M is a
 * T x C array of arrays of numbers, or a tensor {"dtype": "float32", "shape":
 * [T, C], "data": base64 of T*C little-endian float32}. S is absent or null
 * (zero variances), a number >= 0 for every entry, or a T x C array / tensor of
 * numbers >= 0. T must be in [1, max_frames], C in [1, max_code_size] and
 * T * C at most VBM_MAX_ELEMENTS. Fails with VBM_EINVAL naming the offending
 * member (err->field = its JSON path, e.g. "codes.mu[3][1]"), or VBM_ENOMEM;
 * *out is then empty (nothing to free). */
vbm_status wire_read_codes(const json_t *v, const char *path, long max_frames, int max_code_size,
                           wire_codes *out, vbm_error *err);

/* Release what a wire_codes owns and zero it. */
void wire_codes_free(wire_codes *c);

/* A rows x cols matrix of doubles as JSON: nested arrays of numbers (non-finite
 * values become null), or when base64 is non-zero a float32 tensor object
 * {dtype, shape, data}. Returns NULL when out of memory. */
json_t *wire_matrix(const double *a, long rows, long cols, int base64);

/* A rows x cols matrix of ints as nested arrays. NULL when out of memory. */
json_t *wire_int_matrix(const int *a, long rows, long cols);

/* The addresses object {s: T x G x H, w_mu: T x G x H x K, w_cov: G x H x K x K
 * or null} in *out (a new reference); JSON null when a holds none (s or w_mu
 * NULL). Fails, leaving *out NULL, with VBM_EINVAL when a value is not finite
 * (err->field names it under path: "addresses.w_mu[0][0][1][2]") or
 * VBM_ENOMEM. */
vbm_status wire_addresses(const vbm_addresses *a, const char *path, json_t **out, vbm_error *err);

#endif
