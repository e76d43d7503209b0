/* solve_impl.h -- owns what the files of vbmem-solve share (vbmem_solve.c, solve_memory.c,
 * solve_temporal.c): the two job families' runners and the result helpers both use. */
#ifndef VBMEM_TOOLS_SOLVE_IMPL_H
#define VBMEM_TOOLS_SOLVE_IMPL_H

#include <jansson.h>

#include "vbmem/vbmem.h"

#define SOLVE_MAX_ITER 1000000

/* Run a memory job (an op that does not start with "temporal_"; solve_memory.c): parse root
 * and run it. Same contract as solve_job_run (tools/solve_job.h). */
vbm_status solve_memory_run(const json_t *root, json_t **result, vbm_error *err);

/* Run a job whose op, name, starts with "temporal_" (solve_temporal.c), filling the result
 * object result (the caller's). Fails with VBM_EINVAL or VBM_EFORMAT naming the field at
 * fault, a library failure of the op, or VBM_ENOMEM; result is then partly filled. */
vbm_status solve_temporal_run(const json_t *root, const char *name, json_t *result, vbm_error *err);

/* Seconds on the monotonic clock (0 when it cannot be read). Never fails. */
double solve_now(void);

/* obj[key] = val (stolen; NULL val counts as out of memory). Fails with VBM_ENOMEM. */
vbm_status solve_set(json_t *obj, const char *key, json_t *val, vbm_error *err);

/* A failure st of the library call made for op, recorded in err: kept as the
 * library recorded it, with "op: " before a message that names no field. Returns st. */
vbm_status solve_lib_failed(vbm_error *err, vbm_status st, const char *op);

/* A result that could not be encoded (st from a wire writer, recorded in err):
 * a non-finite value in a result is a numeric failure of the computation (VBM_ENUMERIC;
 * VBM_ENOMEM stays); the field and message the writer recorded (the value's path) stand.
 * Returns the status set. */
vbm_status solve_result_failed(vbm_error *err, vbm_status st);

/* obj[key] = nested array of doubles a with the given shape (ndim dims). Fails with
 * VBM_ENUMERIC (a value that is not finite, naming its path) or VBM_ENOMEM. */
vbm_status solve_set_array(json_t *obj, const char *key, const double *a, int ndim,
                           const long *dims, vbm_error *err);

#endif
