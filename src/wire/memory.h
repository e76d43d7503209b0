/* memory.h -- owns the JSON form of a vbm_memory ("vbmem-memory", version 1) and of a memory
 * configuration. */
#ifndef VBMEM_WIRE_MEMORY_H
#define VBMEM_WIRE_MEMORY_H

#include <jansson.h>

#include "vbmem/vbmem.h"
#include "wire/values.h"

#define WIRE_MEMORY_FORMAT  "vbmem-memory"
#define WIRE_MEMORY_VERSION 1

/* Failures are recorded in err (may be NULL) as described in wire/values.h; the
 * fields of a memory start with "memory" ("memory.posterior.clusters[3].R[1][2]"). */

/* Encode the whole memory (config, prior, posterior, tree path counts, bookkeeping
 * and retained codes) as a new JSON object in the format documented in
 * proto/solve-job.md. Every double is stored as a JSON real and survives
 * wire_memory_from_json bit-exactly; last_elbo NAN is stored as null; "codes" is
 * omitted when no codes are retained. On success *out is a new reference owned
 * by the caller (json_decref). Fails, leaving *out NULL, with VBM_EINVAL when mem
 * is NULL or holds a non-finite value (other than last_elbo) or an out-of-range
 * path, and with VBM_ENOMEM. */
vbm_status wire_memory_to_json(const vbm_memory *mem, json_t **out, vbm_error *err);

/* Decode a memory written by wire_memory_to_json (or by hand in that format).
 * Required members: format ("vbmem-memory"), version (1), config (all twelve
 * fields), prior, posterior; optional: paths (default none), frames (default 0),
 * last_elbo (default null = NAN), codes (default none). Unknown members are
 * rejected. Every shape and value is checked: finite numbers, variances >= 0,
 * posterior row covariances symmetric positive definite, path entries in
 * [0, clusters), at most config.retain_max retained codes. On success *out is a
 * new memory owned by the caller (vbm_memory_free). Fails, leaving *out NULL,
 * with VBM_EFORMAT (malformed memory; err->field names the member and index) or
 * VBM_ENOMEM. Never leaks on failure. */
vbm_status wire_memory_from_json(const json_t *json, vbm_memory **out, vbm_error *err);

/* Read a configuration object at path into *cfg. "kind" is always required.
 * "code_size" is required when complete is non-zero; otherwise it may be absent,
 * and then code_size_hint (> 0) is used. *cfg starts from
 * vbm_config_default(kind, code_size) and every field present overrides it; with
 * complete non-zero all twelve fields (kind, code_size, rows, clusters, groups,
 * sigma_z2, shift, u0, sigma2_b0, s_floor, dkm_addr_var, retain_max) must be
 * present. Unknown members are rejected. Only types and ranges representable in
 * vbm_config are checked here; call vbm_config_check for the semantic checks
 * (and vbm_error_rebase its failure under path). Fails with VBM_EINVAL
 * (err->field names the member); *cfg is then unspecified. */
vbm_status wire_config_read(const json_t *obj, const char *path, int complete, int code_size_hint,
                            vbm_config *cfg, vbm_error *err);

/* The twelve-field configuration object (the "config" of the memory form);
 * non-finite doubles are written as null. NULL when out of memory. */
json_t *wire_config(const vbm_config *cfg);

#endif
