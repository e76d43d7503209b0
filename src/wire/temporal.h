/* temporal.h -- owns the JSON forms of the temporal memory (seed 003): its configuration, its
 * export (the binary form of proto/memory-format.md kind 5 in base64, with a readable summary)
 * and sequences of codes, shared by vbmemd and its tests. */
#ifndef VBMEM_WIRE_TEMPORAL_H
#define VBMEM_WIRE_TEMPORAL_H

#include <jansson.h>

#include "vbmem/vbmem.h"

/* Read a temporal configuration object at path ({"kind": "temporal", "components", "attributes",
 * "pi0", "u_T" (2 x 2), "sigma_a2", "lambda_prior" {"eta", "f", "g", "h"}, "lambda_grid",
 * "rho_d", "rho_e", "gamma0", "gamma_max", "vbe": "eq18" | "eq19", "code_size"}) into *cfg,
 * starting from vbm_temporal_config_default(code_size, 2): every member present overrides the
 * default; "code_size", when present, must equal code_size. Then vbm_temporal_config_check.
 * Fails with VBM_EINVAL naming the member under path. */
vbm_status wire_temporal_config_read(const json_t *obj, const char *path, int code_size,
                                     vbm_temporal_config *cfg, vbm_error *err);

/* The configuration object read by wire_temporal_config_read. NULL when out of memory. */
json_t *wire_temporal_config(const vbm_temporal_config *cfg);

/* The JSON form of a temporal memory: {"kind": "temporal", "config", "sequences", "frames",
 * "free_energy", "posterior": {"W" (D x P*Q), "gamma", "T" (2 x 2), "lambda", "rho"},
 * "export": base64 of vbm_temporal_export}. The posterior is a readable summary; "export"
 * alone is read back (bit-exact). Fails with VBM_ENOMEM. */
vbm_status wire_temporal_to_json(const vbm_temporal *m, json_t **out, vbm_error *err);

/* Read the JSON form back from its "export" member (the other members are not read). Fails
 * with VBM_EINVAL (not an object, "export" missing or not base64: field "export"),
 * VBM_EFORMAT (the export does not import: its message), VBM_ENOMEM. */
vbm_status wire_temporal_from_json(const json_t *json, vbm_temporal **out, vbm_error *err);

/* Sequences of codes read from a JSON array at path, each a codes object {"mu"} (nested array or
 * base64 float32 tensor; "sigma2", when given, must be all zero: the model's codes are
 * observed). Every sequence must have at least min_T frames and exactly D columns, and the
 * frames in all at most max_frames. *seqs (*n entries; each y malloc'd) is freed with
 * wire_sequences_free. Fails with VBM_EINVAL naming the sequence ("sequences[1].mu",
 * "sequences[0].mu[3]", ...), VBM_ENOMEM. */
vbm_status wire_read_sequences(const json_t *v, const char *path, long max_frames, int D,
                               long min_T, vbm_sequence **seqs, int *n, vbm_error *err);

/* The start of a temporal write from the optional member key of obj: "windows", "pca" or
 * "random" (VBM_TEMPORAL_START_*); *out is unchanged when key is absent. VBM_EINVAL naming key
 * for any other value. */
vbm_status wire_temporal_start_read(const json_t *obj, const char *key, int *out, vbm_error *err);

/* Read one sequence (a codes object) at path, as wire_read_sequences does for each. */
vbm_status wire_read_sequence(const json_t *v, const char *path, long max_frames, int D, long min_T,
                              vbm_sequence *seq, vbm_error *err);

void wire_sequences_free(vbm_sequence *seqs, int n);

#endif
