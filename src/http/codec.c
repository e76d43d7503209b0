/* codec.c -- owns the JSON forms that only the HTTP API has: session info, usage, times, addresses
 * of a response, the encoding option. */
#define _POSIX_C_SOURCE 200809L

#include "wire/temporal.h"
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "http/codec.h"

json_t *codec_addresses(const vbm_addresses *a)
{
    json_t *o;

    return wire_addresses(a, "addresses", &o, NULL) == VBM_OK ? o : NULL;
}

json_t *codec_usage(const double *u, int G, int H)
{
    if (u == NULL)
        return json_null();
    return wire_matrix(u, G, H, 0);
}

json_t *codec_time(double wall)
{
    struct tm tm;
    time_t secs = (time_t)wall;
    char buf[64];

    gmtime_r(&secs, &tm);
    snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (int)((wall - (double)secs) * 1000.0));
    return json_string(buf);
}

/* The session resource of a temporal session: the members shared with the other kinds (id,
 * kind, code_size, config, ttl_seconds, frames, created, updated, version, memory_bytes,
 * model) and its own (components, attributes, sequences, free_energy). NULL when out of
 * memory. */
static json_t *codec_temporal_info(const eng_info *i)
{
    return json_pack("{s:s, s:s, s:i, s:i, s:i, s:o, s:I, s:I, s:I, s:o, s:o, s:o, s:I, s:I, s:o}",
                     "id", i->id, "kind", "temporal", "code_size", i->tcfg.code_size, "components",
                     i->tcfg.components, "attributes", i->tcfg.attributes, "config",
                     wire_temporal_config(&i->tcfg), "ttl_seconds", (json_int_t)i->ttl_s, "frames",
                     (json_int_t)i->frames, "sequences", (json_int_t)i->sequences, "free_energy",
                     wire_number(i->free_energy), "created", codec_time(i->created), "updated",
                     codec_time(i->updated), "version", (json_int_t)i->version, "memory_bytes",
                     (json_int_t)i->bytes, "model",
                     i->model_name[0] != '\0' ? json_string(i->model_name) : json_null());
}

json_t *codec_info(const eng_info *i)
{
    if (i->temporal)
        return codec_temporal_info(i);
    json_t *o = json_pack(
        "{s:s, s:s, s:i, s:i, s:i, s:i, s:o, s:{s:i, s:o, s:s}, s:I, s:I, s:I, s:o, s:o, s:o, "
        "s:o, s:I, s:I}",
        "id", i->id, "kind", vbm_kind_name(i->cfg.kind), "code_size", i->cfg.code_size, "rows",
        i->cfg.rows, "clusters", i->cfg.clusters, "groups", i->cfg.groups, "config",
        wire_config(&i->cfg), "solver", "iterations", i->solver.iterations, "tolerance",
        wire_number(i->solver.tolerance), "init", wire_init_name(i->solver.init), "ttl_seconds",
        (json_int_t)i->ttl_s, "frames", (json_int_t)i->frames, "retained_codes",
        (json_int_t)i->retained, "cluster_usage",
        codec_usage(i->usage, i->cfg.groups, i->cfg.clusters), "last_elbo",
        wire_number(i->last_elbo), "created", codec_time(i->created), "updated",
        codec_time(i->updated), "version", (json_int_t)i->version, "memory_bytes",
        (json_int_t)i->bytes);

    if (o != NULL
        && json_object_set_new(o, "model",
                               i->model_name[0] != '\0' ? json_string(i->model_name) : json_null())
               != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

vbm_status codec_opt_encoding(const json_t *obj, const char *key, int *out, vbm_error *err)
{
    const json_t *v = json_object_get(obj, key);

    if (v == NULL)
        return VBM_OK;
    if (json_is_string(v) && strcmp(json_string_value(v), "json") == 0) {
        *out = 0;
        return VBM_OK;
    }
    if (json_is_string(v) && strcmp(json_string_value(v), "base64") == 0) {
        *out = 1;
        return VBM_OK;
    }
    return vbm_fail(err, VBM_EINVAL, key, "expected \"json\" or \"base64\"");
}
