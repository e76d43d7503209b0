/* codec.h -- owns the JSON forms that only the HTTP API has: session info, cluster usage, times,
 * response addresses, the encoding option (the shared wire forms are in src/wire). */
#ifndef VBMEM_HTTP_CODEC_H
#define VBMEM_HTTP_CODEC_H

#include <jansson.h>

#include "engine/clock.h"
#include "engine/session.h"
#include "vbmem/vbmem.h"
#include "wire/base64.h"
#include "wire/codes.h"
#include "wire/memory.h"
#include "wire/parse.h"
#include "wire/values.h"

/* The addresses object of a response (wire_addresses under "addresses"), JSON
 * null when a holds none; NULL when out of memory or a value is not finite. */
json_t *codec_addresses(const vbm_addresses *a);

/* G x H cluster usage (expected frames), or JSON null when u is NULL. NULL when
 * out of memory. */
json_t *codec_usage(const double *u, int G, int H);

/* The session resource for GET /v1/sessions/{id}. NULL when out of memory. */
json_t *codec_info(const eng_info *info);

/* encoding: "json" (0) or "base64" (1); *out unchanged when key is absent.
 * Fails with VBM_EINVAL for another value. */
vbm_status codec_opt_encoding(const json_t *obj, const char *key, int *out, vbm_error *err);

/* RFC 3339 UTC time string (millisecond precision) of a wall-clock time. NULL
 * when out of memory. */
json_t *codec_time(double wall);

#endif
