/* memory_json.h -- owns the JSON form of a vbm_memory ("vbmem-memory", version 1) and the checked JSON<->array helpers it shares with vbmem-solve. */
#ifndef VBMEM_MEMORY_JSON_H
#define VBMEM_MEMORY_JSON_H

#include <stddef.h>

#include <jansson.h>

#include "vbmem/vbmem.h"

#define MEMJSON_FORMAT "vbmem-memory"
#define MEMJSON_VERSION 1
#define MEMJSON_MAX_DIMS 8

/* Messages. Every function below that fails writes a NUL-terminated message into
 * msg (truncated to msglen bytes; msg may be NULL or msglen 0 when unwanted). The
 * message always starts with the JSON path of the offending value followed by
 * ": ", e.g. "memory.posterior.clusters[3].R[1][2]: expected a number, got string".
 * The path never contains a space, so callers may split the message at the first
 * ": " to obtain the field. Paths of a memory start with "memory". */

/* Write into out (out_len bytes, NUL-terminated, truncated) the library message
 * libmsg re-rooted under the JSON path base. libvbmem messages usually start with
 * the name of the offending field ("groups: G = 3 must divide ..." or
 * "prior.U0: not positive definite"); that name is appended to base, giving
 * "model.groups: G = 3 must divide ...". Otherwise the result is
 * "base: libmsg". An empty base leaves a leading field name as it is. Never
 * fails. */
void memjson_qualify_message(char *out, size_t out_len, const char *base, const char *libmsg);

/* Encode the whole memory (config, prior, posterior, tree path counts, bookkeeping
 * and retained codes) as a new JSON object in the format documented in
 * proto/solve-job.md. Every double is stored as a JSON real and survives
 * memjson_to_memory bit-exactly; last_elbo NAN is stored as null; "codes" is
 * omitted when no codes are retained. On success *out is a new reference owned
 * by the caller (json_decref). Fails, leaving *out NULL, with VBM_EINVAL when mem
 * is NULL or holds a non-finite value (other than last_elbo) or an out-of-range
 * path, and with VBM_ENOMEM. */
vbm_status memjson_from_memory(const vbm_memory *mem, json_t **out, char *msg, size_t msglen);

/* Decode a memory written by memjson_from_memory (or by hand in that format).
 * Required members: format ("vbmem-memory"), version (1), config (all twelve
 * fields), prior, posterior; optional: paths (default none), frames (default 0),
 * last_elbo (default null = NAN), codes (default none). Unknown members are
 * rejected. Every shape and value is checked: finite numbers, variances >= 0,
 * posterior row covariances symmetric positive definite, path entries in
 * [0, clusters), at most config.retain_max retained codes. On success *out is a
 * new memory owned by the caller (vbm_memory_free). Fails, leaving *out NULL,
 * with VBM_EFORMAT (malformed memory; the message names the field and index) or
 * VBM_ENOMEM. Never leaks on failure. */
vbm_status memjson_to_memory(const json_t *json, vbm_memory **out, char *msg, size_t msglen);

/* Read a configuration object at `path` into *cfg. "kind" is always required.
 * "code_size" is required when complete is non-zero; otherwise it may be absent,
 * and then code_size_hint (> 0) is used. *cfg starts from
 * vbm_config_default(kind, code_size) and every field present overrides it; with
 * complete non-zero all twelve fields (kind, code_size, rows, clusters, groups,
 * sigma_z2, shift, u0, sigma2_b0, s_floor, dkm_addr_var, retain_max) must be
 * present. Unknown members are rejected. Only types and ranges representable in
 * vbm_config are checked here; call vbm_config_check for the semantic checks.
 * Fails with VBM_EINVAL (message names the field); *cfg is then unspecified. */
vbm_status memjson_config_read(const json_t *obj, const char *path, int complete, int code_size_hint,
                               vbm_config *cfg, char *msg, size_t msglen);

/* Name of the JSON type of v ("object", "array", "string", "integer", "real",
 * "true", "false", "null"; "nothing" for NULL). Never fails. */
const char *memjson_type_name(const json_t *v);

/* Store the number v (a JSON integer or real) at `path` as a double in *out.
 * Fails with VBM_EINVAL when v is missing, not a number or not finite. */
vbm_status memjson_get_number(const json_t *v, const char *path, double *out, char *msg,
                              size_t msglen);

/* Store the JSON integer v at `path` in *out after checking lo <= v <= hi.
 * Reals are refused even when integral. Fails with VBM_EINVAL. */
vbm_status memjson_get_long(const json_t *v, const char *path, long lo, long hi, long *out,
                            char *msg, size_t msglen);

/* Read the nested array v at `path`, of exact shape dims[0] x ... x
 * dims[ndim-1] (1 <= ndim <= MEMJSON_MAX_DIMS, dims >= 0), into out (row-major,
 * caller-allocated, product(dims) doubles). When nonneg is non-zero every value
 * must also be >= 0. Fails with VBM_EINVAL naming the first offending element,
 * e.g. "codes.mu[3]: expected an array of 16 elements, got 15"; out is then
 * partially written. */
vbm_status memjson_read_array(const json_t *v, const char *path, int ndim, const long *dims,
                              int nonneg, double *out, char *msg, size_t msglen);

/* Determine the shape of a non-empty matrix of numbers v at `path`: *rows is its
 * length, *cols the length of its first row. Fails with VBM_EINVAL when v is not
 * an array, is empty, or its first row is not a non-empty array. Rectangularity
 * and element types are checked by memjson_read_array. */
vbm_status memjson_matrix_shape(const json_t *v, const char *path, long *rows, long *cols,
                                char *msg, size_t msglen);

/* Build a new nested JSON array of shape dims[0] x ... x dims[ndim-1] from the
 * row-major doubles a (1 <= ndim <= MEMJSON_MAX_DIMS). On success *out is a new
 * reference owned by the caller. Fails, leaving *out NULL, with VBM_EINVAL when a
 * value is not finite (JSON cannot hold it; the message names its index under
 * `path`) and VBM_ENOMEM. */
vbm_status memjson_new_array(const double *a, int ndim, const long *dims, const char *path,
                             json_t **out, char *msg, size_t msglen);

/* Same as memjson_new_array for ints; fails only with VBM_ENOMEM (or VBM_EINVAL
 * for a bad ndim). */
vbm_status memjson_new_int_array(const int *a, int ndim, const long *dims, const char *path,
                                 json_t **out, char *msg, size_t msglen);

#endif
