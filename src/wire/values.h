/* values.h -- owns the checked JSON readers (numbers, ranged integers, booleans, seeds, members,
 * shaped number arrays) and the JSON writers of numbers, arrays and ELBOs shared by vbmemd and
 * vbmem-solve. */
#ifndef VBMEM_WIRE_VALUES_H
#define VBMEM_WIRE_VALUES_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "vbmem/vbmem.h"

#define WIRE_MAX_DIMS 8
#define WIRE_PATH_LEN 256

/* Errors. Every function below that fails records the failure in err (which may
 * be NULL) with vbm_fail: the status, the JSON path of the offending value as
 * the field ("codes.mu[3][7]", "memory.posterior.clusters[2].U"), and a
 * message that starts with that path and ": ". Callers that read a sub-document
 * with a relative path put it under their own with vbm_error_rebase. */

/* buf <- base + "." + key, or key alone when base is "" (truncated to len,
 * NUL-terminated). Never fails. */
void wire_path_key(char *buf, size_t len, const char *base, const char *key);

/* buf <- base + "[i]" (truncated to len, NUL-terminated). Never fails. */
void wire_path_index(char *buf, size_t len, const char *base, long i);

/* Name of the JSON type of v ("object", "array", "string", "integer", "real",
 * "true", "false", "null"; "nothing" for NULL). Never fails. */
const char *wire_type_name(const json_t *v);

/* Store the number v (a JSON integer or real) found at path as a double in
 * *out. Fails with VBM_EINVAL when v is NULL (missing), not a number or not
 * finite; *out is then unchanged. */
vbm_status wire_get_number(const json_t *v, const char *path, double *out, vbm_error *err);

/* Store the JSON integer v found at path in *out after checking lo <= v <= hi.
 * Reals are refused even when integral. Fails with VBM_EINVAL (missing, not an
 * integer, out of range); *out is then unchanged. */
vbm_status wire_get_long(const json_t *v, const char *path, long lo, long hi, long *out,
                         vbm_error *err);

/* Store the JSON boolean v found at path in *out (1 or 0). Fails with
 * VBM_EINVAL (missing, not true or false). */
vbm_status wire_get_bool(const json_t *v, const char *path, int *out, vbm_error *err);

/* Store the seed v found at path in *out. The one seed rule of the wire: a JSON
 * integer >= 0, or a string of 1 to 20 decimal digits whose value is at most
 * 2^64 - 1 (JSON integers above 2^63 - 1 do not parse, so larger seeds travel
 * as strings). Fails with VBM_EINVAL (missing, negative, another type, an
 * empty or non-digit string, more than 20 digits, above 2^64 - 1). */
vbm_status wire_get_seed(const json_t *v, const char *path, uint64_t *out, vbm_error *err);

/* Reject members of the object obj found at path whose key is not in the
 * NULL-terminated list allowed: VBM_EINVAL with field "path.member" (or
 * "member" when path is ""), message "unknown member". VBM_OK when obj is not
 * an object. */
vbm_status wire_check_keys(const json_t *obj, const char *path, const char *const *allowed,
                           vbm_error *err);

/* Optional members of the object obj: *out is unchanged when key is absent;
 * otherwise the value is read as by the readers above, with key as its path.
 * wire_opt_double also checks lo <= x <= hi. Each fails with VBM_EINVAL. */
vbm_status wire_opt_long(const json_t *obj, const char *key, long lo, long hi, long *out,
                         vbm_error *err);
vbm_status wire_opt_double(const json_t *obj, const char *key, double lo, double hi, double *out,
                           vbm_error *err);
vbm_status wire_opt_bool(const json_t *obj, const char *key, int *out, vbm_error *err);
vbm_status wire_opt_seed(const json_t *obj, const char *key, uint64_t *out, vbm_error *err);

/* Name of an init ("auto", "prior", "kmeans++", "current", "random"; "auto"
 * for any other value). Never fails. */
const char *wire_init_name(vbm_init init);

/* Optional init member key of obj: one of the names of wire_init_name, stored
 * in *out as a vbm_init (unchanged when absent). Fails with VBM_EINVAL for
 * another value. */
vbm_status wire_opt_init(const json_t *obj, const char *key, int *out, vbm_error *err);

/* Read the nested array v at path, of exact shape dims[0] x ... x
 * dims[ndim-1] (1 <= ndim <= WIRE_MAX_DIMS, dims >= 0), into out (row-major,
 * caller-allocated, product(dims) doubles). When nonneg is non-zero every value
 * must also be >= 0. Fails with VBM_EINVAL naming the first offending element
 * ("codes.mu[3]: expected an array of 16 elements, got 15"); out is then
 * partially written. */
vbm_status wire_read_array(const json_t *v, const char *path, int ndim, const long *dims,
                           int nonneg, double *out, vbm_error *err);

/* Determine the shape of a non-empty matrix of numbers v at path: *rows is its
 * length, *cols the length of its first row. Fails with VBM_EINVAL when v is
 * missing or not an array, is empty, or its first row is not a non-empty array.
 * Rectangularity and element types are checked by wire_read_array. */
vbm_status wire_matrix_shape(const json_t *v, const char *path, long *rows, long *cols,
                             vbm_error *err);

/* The number writer: a new JSON real holding x, or JSON null when x is not
 * finite. NULL only when out of memory. */
json_t *wire_number(double x);

/* Build a new nested JSON array of shape dims[0] x ... x dims[ndim-1] from the
 * row-major doubles a (1 <= ndim <= WIRE_MAX_DIMS). With nulls zero, a
 * non-finite value fails with VBM_EINVAL naming its index under path; with
 * nulls non-zero it is written as null (wire_number). On success *out is a new
 * reference owned by the caller. Fails, leaving *out NULL, with VBM_EINVAL (bad
 * rank or dims, non-finite value) or VBM_ENOMEM. */
vbm_status wire_new_array(const double *a, int ndim, const long *dims, int nulls, const char *path,
                          json_t **out, vbm_error *err);

/* Same as wire_new_array for ints; fails only with VBM_ENOMEM (or VBM_EINVAL
 * for a bad rank or dims). */
vbm_status wire_new_int_array(const int *a, int ndim, const long *dims, const char *path,
                              json_t **out, vbm_error *err);

/* The ELBO object {per_frame, total, loglik_codes, kl_w, kl_s, kl_M, kl_b, T};
 * non-finite terms are null. NULL when out of memory. */
json_t *wire_elbo(const vbm_elbo *e);

#endif
