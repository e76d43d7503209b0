/* routes_models.c -- owns the handlers of /v1/models: the hosted models (inline) and the stateless
 * encode/decode helpers (pool workers). */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/hosted.h"
#include "engine/recall.h"
#include "http/codec.h"
#include "http/images.h"
#include "http/request.h"
#include "http/respond.h"
#include "wire/base64.h"

/* A JSON document stored as text in the model file (validated by the loader),
 * or null. */
static json_t *models_parse(const char *text)
{
    json_t *v = text != NULL ? json_loads(text, 0, NULL) : NULL;

    return v != NULL ? v : json_null();
}

/* The description of an RPM model m (kind "rpm"); with detail also its
 * architecture. NULL when out of memory. */
static json_t *models_rpm_json(const eng_model *m, const char *default_name, int detail)
{
    const eng_rpm_info *in = m->rpm_info;
    const char *file = strrchr(m->path, '/');
    json_t *o;

    o = json_pack("{s:s, s:s, s:b, s:i, s:i, s:i, s:{s:i, s:i}, s:b, s:s, s:I, s:o, "
                  "s:{s:s, s:I, s:s}, s:o}",
                  "name", m->name, "kind", "rpm", "default", strcmp(m->name, default_name) == 0,
                  "factors", in->factors, "observation_size", in->obs_size, "latent_size",
                  in->latent, "steps", "min", in->min_steps, "max", in->max_steps,
                  "shared_recognition", in->shared, "kernel", in->kernel, "parameters",
                  (json_int_t)in->n_params, "provenance", models_parse(in->provenance_json), "file",
                  "name", file != NULL ? file + 1 : m->path, "bytes", (json_int_t)m->file_bytes,
                  "sha256", m->sha256, "loaded_at", codec_time(m->loaded_at));
    if (o != NULL && detail
        && json_object_set_new(o, "architecture", models_parse(in->architecture_json)) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* The description of model m; with detail also its architecture. NULL when
 * out of memory. */
static json_t *models_json(const eng_model *m, const char *default_name, int detail)
{
    const eng_model_info *in = m->info;
    const char *file = strrchr(m->path, '/');
    vbm_config cfg;
    json_t *o;

    if (in == NULL)
        return models_rpm_json(m, default_name, detail);
    eng_model_config(m, &cfg);
    o = json_pack("{s:s, s:b, s:{s:i, s:i, s:i, s:s, s:o}, s:[i, i, i], s:i, s:I, s:o, s:o, "
                  "s:{s:i}, s:i, s:o, s:{s:s, s:I, s:s}, s:o}",
                  "name", m->name, "default", strcmp(m->name, default_name) == 0, "observation",
                  "channels", in->channels, "height", in->height, "width", in->width, "likelihood",
                  in->likelihood == ENG_LIKELIHOOD_GAUSSIAN ? "gaussian" : "bernoulli", "min_scale",
                  wire_number(in->min_scale), "observation_shape", in->channels, in->height,
                  in->width, "code_size", in->code_size, "parameters", (json_int_t)in->n_params,
                  "memory", models_parse(in->memory_json), "defaults", wire_config(&cfg), "solver",
                  "iterations", in->iterations, "episode_length", in->episode_length, "provenance",
                  models_parse(in->provenance_json), "file", "name",
                  file != NULL ? file + 1 : m->path, "bytes", (json_int_t)m->file_bytes, "sha256",
                  m->sha256, "loaded_at", codec_time(m->loaded_at));
    if (o != NULL && detail
        && json_object_set_new(o, "architecture", models_parse(in->architecture_json)) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int route_models_list(http_req *r, vbm_error *err)
{
    eng_models *reg = r->srv->cfg.models;
    eng_model_set *set;
    json_t *models, *failed, *rpms, *out;
    const char *dflt;
    int i;

    if (reg == NULL)
        return resp_json(
            r, 200,
            json_pack("{s:[], s:n, s:[], s:[]}", "models", "default_model", "failed", "rpm_models"),
            err);
    set = eng_models_snapshot(reg);
    dflt = eng_models_default_name(reg);
    models = json_array();
    failed = json_array();
    rpms = json_array();
    for (i = 0; models != NULL && rpms != NULL && i < set->n; i++) {
        /* RPMs (no encoder/decoder) are listed apart, under "rpm_models" */
        json_t *into = set->models[i]->rpm != NULL ? rpms : models;

        if (json_array_append_new(into, models_json(set->models[i], dflt, 0)) != 0) {
            json_decref(models);
            models = NULL;
        }
    }
    for (i = 0; failed != NULL && i < set->n_failed; i++) {
        if (json_array_append_new(failed, json_pack("{s:s, s:s}", "file", set->failed[i].file,
                                                    "error", set->failed[i].msg))
            != 0) {
            json_decref(failed);
            failed = NULL;
        }
    }
    out = models != NULL && failed != NULL && rpms != NULL
              ? json_pack("{s:o, s:o, s:o, s:I, s:o, s:o}", "models", models, "default_model",
                          dflt[0] != '\0' ? json_string(dflt) : json_null(), "failed", failed,
                          "generation", (json_int_t)set->generation, "loaded_at",
                          codec_time(set->loaded_at), "rpm_models", rpms)
              : NULL;
    if (out == NULL) {
        json_decref(models);
        json_decref(failed);
        json_decref(rpms);
    }
    eng_model_set_release(set);
    return resp_json(r, 200, out, err);
}

/* The model named by the path (a new reference) in *m. Returns 0, or with err filled (field
 * name) 404 when none has that name, or, with any zero (encode, decode), 422 when it is an
 * RPM; *m is then NULL. */
static int models_lookup_kind(http_req *r, int any, eng_model **m, vbm_error *err)
{
    vbm_status st;

    *m = NULL;
    if (r->srv->cfg.models == NULL)
        return resp_fail(err, 404, "name", "no model named \"%s\" is hosted (no models directory)",
                         r->param);
    st = any ? eng_models_find(r->srv->cfg.models, r->param, m, err)
             : eng_models_get(r->srv->cfg.models, r->param, m, err);
    if (st != VBM_OK) { /* the registry's record names "name": 404 none of it, 422 an RPM */
        *m = NULL;
        return resp_status_of(st);
    }
    return 0;
}

int route_models_get(http_req *r, vbm_error *err)
{
    eng_model *m;
    int status = models_lookup_kind(r, 1, &m, err);

    if (status != 0)
        return status;
    status = resp_json(r, 200, models_json(m, eng_models_default_name(r->srv->cfg.models), 1), err);
    eng_model_unref(m);
    return status;
}

/* The observation shape of m. */
static void models_shape(const eng_model *m, img_shape *shape)
{
    shape->channels = m->info->channels;
    shape->height = m->info->height;
    shape->width = m->info->width;
}

int route_models_encode(http_req *r, vbm_error *err)
{
    static const char *const keys[] = {"observations", "encoding", NULL};
    const http_limits *lim = &r->srv->cfg.limits;
    double t0 = eng_now(), t1 = 0.0, parse_s = 0.0;
    double *mu = NULL, *s2 = NULL;
    float *x = NULL;
    eng_model *m;
    img_shape shape;
    json_t *body, *out = NULL;
    long n = 0;
    int b64 = 0;
    size_t TC = 0;
    vbm_status st;
    int status;

    status = models_lookup_kind(r, 0, &m, err);
    if (status != 0)
        return status;
    status = resp_body_object(r, &body, err);
    if (status != 0) {
        eng_model_unref(m);
        return status;
    }
    models_shape(m, &shape);
    st = wire_check_keys(body, "", keys, err);
    if (st == VBM_OK)
        st = codec_opt_encoding(body, "encoding", &b64, err);
    if (st == VBM_OK && json_object_get(body, "observations") == NULL)
        st = vbm_fail(err, VBM_EINVAL, "observations", "missing");
    if (st == VBM_OK)
        st = img_read(json_object_get(body, "observations"), "observations", &shape,
                      lim->max_frames, &x, &n, err);
    json_decref(body);
    if (st == VBM_OK) {
        parse_s = eng_now() - t0;
        TC = (size_t)n * (size_t)m->info->code_size;
        mu = malloc(TC * sizeof *mu);
        s2 = malloc(TC * sizeof *s2);
        if (mu == NULL || s2 == NULL)
            st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory encoding %ld images", n);
    }
    if (st == VBM_OK) {
        t1 = eng_now();
        st = eng_model_encode(m, x, n, "observations", mu, s2, err);
        t1 = eng_now() - t1;
    }
    if (st == VBM_OK)
        out =
            json_pack("{s:s, s:I, s:{s:o, s:o}, s:{s:f, s:f, s:f, s:f}}", "model", m->name, "count",
                      (json_int_t)n, "codes", "mu", wire_matrix(mu, n, m->info->code_size, b64),
                      "sigma2", wire_matrix(s2, n, m->info->code_size, b64), "timings", "queue_s",
                      r->job.started_at - r->job.queued_at, "parse_s", parse_s, "nets_s", t1,
                      "total_s", eng_now() - r->t_start);
    free(x);
    free(mu);
    free(s2);
    eng_model_unref(m);
    if (st != VBM_OK) {
        return resp_status_of(st);
    }
    return resp_json(r, 200, out, err);
}

int route_models_decode(http_req *r, vbm_error *err)
{
    static const char *const keys[] = {"codes", "format", "pixels", "seed", NULL};
    const http_limits *lim = &r->srv->cfg.limits;
    double t0 = eng_now(), t1 = 0.0, parse_s = 0.0;
    img_format fmt = IMG_PNG;
    wire_codes codes;
    float *x = NULL;
    eng_model *m;
    img_shape shape;
    json_t *body, *images = NULL, *out = NULL;
    uint64_t seed = 0;
    int sample = 0;
    vbm_status st;
    int status;

    memset(&codes, 0, sizeof codes);
    status = models_lookup_kind(r, 0, &m, err);
    if (status != 0)
        return status;
    status = resp_body_object(r, &body, err);
    if (status != 0) {
        eng_model_unref(m);
        return status;
    }
    models_shape(m, &shape);
    st = wire_check_keys(body, "", keys, err);
    if (st == VBM_OK)
        st = img_opt_format(body, "format", 0, &fmt, err);
    if (st == VBM_OK)
        st = img_opt_pixels(body, "pixels", &sample, err);
    if (st == VBM_OK)
        st = wire_opt_seed(body, "seed", &seed, err);
    if (st == VBM_OK && json_object_get(body, "codes") == NULL)
        st = vbm_fail(err, VBM_EINVAL, "codes", "missing");
    if (st == VBM_OK)
        st = wire_read_codes(json_object_get(body, "codes"), "codes", lim->max_frames,
                             lim->max_code_size, &codes, err);
    json_decref(body);
    if (st == VBM_OK && codes.C != m->info->code_size)
        st = vbm_fail(err, VBM_EINVAL, "codes.mu", "%d columns, the model's code size is %d",
                      codes.C, m->info->code_size);
    if (st == VBM_OK) {
        parse_s = eng_now() - t0;
        x = malloc((size_t)codes.T * (size_t)eng_model_pixels(m) * sizeof *x);
        if (x == NULL)
            st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory decoding %ld codes", codes.T);
    }
    if (st == VBM_OK) {
        t1 = eng_now();
        st = eng_model_decode_images(m, codes.mu, codes.T, sample,
                                     eng_derive_seed(seed, ENG_STREAM_PIXELS), x, err);
        t1 = eng_now() - t1;
    }
    if (st == VBM_OK)
        st = img_write(x, codes.T, &shape, fmt, &images, err);
    if (st == VBM_OK)
        out = json_pack("{s:s, s:I, s:o, s:{s:f, s:f, s:f, s:f}}", "model", m->name, "count",
                        (json_int_t)codes.T, "observations", images, "timings", "queue_s",
                        r->job.started_at - r->job.queued_at, "parse_s", parse_s, "nets_s", t1,
                        "total_s", eng_now() - r->t_start);
    free(x);
    wire_codes_free(&codes);
    eng_model_unref(m);
    if (st != VBM_OK) {
        return resp_status_of(st);
    }
    return resp_json(r, 200, out, err);
}

/* ---- POST /v1/models/{name}/infer: the posterior of a served RPM ---- */

/* Read the observations of an RPM with J factors of D values each: a nested
 * J x T array (D = 1: numbers; D > 1: arrays of D numbers) or a float32 tensor
 * {dtype, shape [J, T] or [J, T, D], data}. On success *x (malloc'd, J x T x D
 * floats) and *T are set. Fails with VBM_EINVAL naming the offending part:
 * a J other than the model's, ragged rows, a T outside [min_steps, max_steps]
 * (and max_frames), a value that is not a finite number, a wrong D. */
static vbm_status infer_read(const json_t *v, const eng_rpm_info *in, long max_frames, float **x,
                             int *T, vbm_error *err)
{
    const int J = in->factors, D = in->obs_size;
    long steps, hi = in->max_steps < max_frames ? in->max_steps : max_frames;
    char where[WIRE_PATH_LEN];
    double *a = NULL;
    size_t n, i;

    *x = NULL;
    if (json_is_object(v)) {
        static const char *const keys[] = {"dtype", "shape", "data", NULL};
        const json_t *shape = json_object_get(v, "shape"), *data = json_object_get(v, "data");
        const char *dtype = json_string_value(json_object_get(v, "dtype"));
        json_int_t dims[3] = {0, 0, 1};
        unsigned char *raw;
        size_t rawlen, rank = json_array_size(shape);
        vbm_status st = wire_check_keys(v, "observations", keys, err);

        if (st != VBM_OK)
            return st;
        if (dtype == NULL || strcmp(dtype, "float32") != 0)
            return vbm_fail(err, VBM_EINVAL, "observations.dtype", "must be \"float32\"");
        if (!json_is_array(shape) || (rank != 2 && rank != 3))
            return vbm_fail(err, VBM_EINVAL, "observations.shape",
                            "expected [J, T] or [J, T, D] (integers)");
        for (i = 0; i < rank; i++) {
            const json_t *d = json_array_get(shape, i);

            if (!json_is_integer(d) || json_integer_value(d) < 1)
                return vbm_fail(err, VBM_EINVAL, "observations.shape",
                                "expected [J, T] or [J, T, D] (positive integers)");
            dims[i] = json_integer_value(d);
        }
        if (dims[0] != J)
            return vbm_fail(err, VBM_EINVAL, "observations.shape",
                            "J = %lld rows, the model has J = %d factors", (long long)dims[0], J);
        if (dims[1] < in->min_steps || dims[1] > hi)
            return vbm_fail(err, VBM_EINVAL, "observations.shape",
                            "T = %lld steps is outside [%d, %ld] (the model's steps and the "
                            "frame limit)",
                            (long long)dims[1], in->min_steps, hi);
        if (dims[2] != D)
            return vbm_fail(err, VBM_EINVAL, "observations.shape",
                            "D = %lld values per observation, the model's observation size is %d",
                            (long long)dims[2], D);
        if (!json_is_string(data))
            return vbm_fail(err, VBM_EINVAL, "observations.data", "expected a base64 string");
        if (wire_b64_decode(json_string_value(data), json_string_length(data), &raw, &rawlen) != 0)
            return vbm_fail(err, VBM_EINVAL, "observations.data", "not valid padded base64");
        n = (size_t)J * (size_t)dims[1] * (size_t)D;
        if (rawlen != 4 * n) {
            free(raw);
            return vbm_fail(err, VBM_EINVAL, "observations.data",
                            "holds %zu bytes, the shape needs %zu", rawlen, 4 * n);
        }
        *x = malloc(n * sizeof **x);
        if (*x == NULL) {
            free(raw);
            return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for %zu values", n);
        }
        for (i = 0; i < n; i++) {
            uint32_t bits = (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8
                            | (uint32_t)raw[4 * i + 2] << 16 | (uint32_t)raw[4 * i + 3] << 24;

            memcpy(&(*x)[i], &bits, sizeof bits);
            if (!isfinite((*x)[i])) {
                free(raw);
                free(*x);
                *x = NULL;
                return vbm_fail(err, VBM_EINVAL, "observations.data",
                                "element [%zu][%zu][%zu] is not finite",
                                i / ((size_t)D * (size_t)dims[1]), i / (size_t)D % (size_t)dims[1],
                                i % (size_t)D);
            }
        }
        free(raw);
        *T = (int)dims[1];
        return VBM_OK;
    }
    if (!json_is_array(v))
        return vbm_fail(err, VBM_EINVAL, "observations",
                        "expected J = %d rows of T observations (arrays) or a float32 tensor "
                        "object, got %s",
                        J, wire_type_name(v));
    if (json_array_size(v) != (size_t)J)
        return vbm_fail(err, VBM_EINVAL, "observations",
                        "%zu rows, the model has J = %d factors (one row each)", json_array_size(v),
                        J);
    for (i = 0; i < (size_t)J; i++) {
        const json_t *row = json_array_get(v, i);

        wire_path_index(where, sizeof where, "observations", (long)i);
        if (!json_is_array(row))
            return vbm_fail(err, VBM_EINVAL, where, "expected an array of T observations, got %s",
                            wire_type_name(row));
        if (i > 0 && json_array_size(row) != json_array_size(json_array_get(v, 0)))
            return vbm_fail(err, VBM_EINVAL, where,
                            "%zu steps, row 0 has %zu (rows must all have the same T)",
                            json_array_size(row), json_array_size(json_array_get(v, 0)));
    }
    steps = (long)json_array_size(json_array_get(v, 0));
    if (steps < in->min_steps || steps > hi)
        return vbm_fail(err, VBM_EINVAL, "observations",
                        "T = %ld steps is outside [%d, %ld] (the model's steps and the frame "
                        "limit)",
                        steps, in->min_steps, hi);
    n = (size_t)J * (size_t)steps * (size_t)D;
    a = malloc(n * sizeof *a);
    *x = malloc(n * sizeof **x);
    if (a == NULL || *x == NULL) {
        free(a);
        free(*x);
        *x = NULL;
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for %zu values", n);
    }
    {
        long dims[3] = {J, steps, D};
        vbm_status st = wire_read_array(v, "observations", D == 1 ? 2 : 3, dims, 0, a, err);

        if (st != VBM_OK) {
            free(a);
            free(*x);
            *x = NULL;
            return st;
        }
    }
    for (i = 0; i < n; i++) {
        (*x)[i] = (float)a[i];
        if (!isfinite((*x)[i])) {
            free(a);
            free(*x);
            *x = NULL;
            return vbm_fail(err, VBM_EINVAL, "observations",
                            "element [%zu][%zu] is not finite in float32",
                            i / ((size_t)D * (size_t)steps), i / (size_t)D % (size_t)steps);
        }
    }
    free(a);
    *T = (int)steps;
    return VBM_OK;
}

int route_models_infer(http_req *r, vbm_error *err)
{
    static const char *const keys[] = {"observations", "encoding", NULL};
    const http_limits *lim = &r->srv->cfg.limits;
    double t0 = eng_now(), t1 = 0.0, parse_s = 0.0;
    double *mt = NULL, *vt = NULL;
    float *x = NULL;
    json_t *body, *out = NULL;
    eng_model *m;
    int b64 = 0, T = 0, L;
    vbm_status st;
    int status;

    status = models_lookup_kind(r, 1, &m, err);
    if (status != 0)
        return status;
    if (m->rpm == NULL) {
        status = resp_fail(err, 422, "name",
                           "model \"%s\" is an encoder/decoder, not an RPM: infer needs a model "
                           "file of kind \"rpm\" (see GET /v1/models, rpm_models)",
                           m->name);
        eng_model_unref(m);
        return status;
    }
    status = resp_body_object(r, &body, err);
    if (status != 0) {
        eng_model_unref(m);
        return status;
    }
    L = m->rpm_info->latent;
    st = wire_check_keys(body, "", keys, err);
    if (st == VBM_OK)
        st = codec_opt_encoding(body, "encoding", &b64, err);
    if (st == VBM_OK && json_object_get(body, "observations") == NULL)
        st = vbm_fail(err, VBM_EINVAL, "observations", "missing");
    if (st == VBM_OK)
        st = infer_read(json_object_get(body, "observations"), m->rpm_info, lim->max_frames, &x, &T,
                        err);
    json_decref(body);
    if (st == VBM_OK) {
        parse_s = eng_now() - t0;
        mt = malloc((size_t)L * (size_t)T * sizeof *mt);
        vt = malloc((size_t)L * (size_t)T * sizeof *vt);
        if (mt == NULL || vt == NULL)
            st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for T = %d steps", T);
    }
    if (st == VBM_OK) {
        /* T x L on the wire (one row per step, like codes) */
        t1 = eng_now();
        st = eng_model_rpm_infer(m, x, T, mt, vt, err);
        t1 = eng_now() - t1;
    }
    if (st == VBM_OK) {
        out = json_pack("{s:s, s:i, s:i, s:i, s:o, s:o, s:{s:f, s:f, s:f, s:f}}", "model", m->name,
                        "factors", m->rpm_info->factors, "steps", T, "latent_size", L, "mean",
                        wire_matrix(mt, T, L, b64), "variance", wire_matrix(vt, T, L, b64),
                        "timings", "queue_s", r->job.started_at - r->job.queued_at, "parse_s",
                        parse_s, "nets_s", t1, "total_s", eng_now() - r->t_start);
    }
    free(x);
    free(mt);
    free(vt);
    eng_model_unref(m);
    if (st != VBM_OK) {
        return resp_status_of(st);
    }
    return resp_json(r, 200, out, err);
}
