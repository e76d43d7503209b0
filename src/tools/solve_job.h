/* solve_job.h -- owns the callable face of vbmem-solve's job runner (for the command's main and the
 * fuzz harness). */
#ifndef VBMEM_TOOLS_SOLVE_JOB_H
#define VBMEM_TOOLS_SOLVE_JOB_H

#include <jansson.h>

#include "vbmem/vbmem.h"

/* Run the parsed job root (the format of proto/solve-job.md) as vbmem-solve
 * does. On success *result is the result object (a new reference owned by the
 * caller) and VBM_OK is returned. Fails, leaving *result NULL, with the job's
 * error in err (VBM_EINVAL or VBM_EFORMAT naming the field at fault, a
 * library failure of the op, VBM_ENOMEM). Never crashes on any root. */
vbm_status solve_job_run(const json_t *root, json_t **result, vbm_error *err);

/* *text <- compact JSON of v followed by a newline (malloc'd, owned by the
 * caller). Fails with VBM_ENOMEM, leaving *text NULL. */
vbm_status solve_dump(const json_t *v, char **text);

/* The error object {"error": {status, message, field}} of err as compact JSON
 * text with a newline (malloc'd, owned by the caller); bytes of the message or
 * field that are not UTF-8 become '?'. NULL when out of memory. */
char *solve_error_text(const vbm_error *err);

#endif
