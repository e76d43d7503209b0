/* routes_models.c -- owns the handlers of /v1/models: the hosted models (inline) and the stateless encode/decode helpers (pool workers). */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#include "engine/models.h"
#include "engine/recall.h"
#include "http/codec.h"
#include "http/images.h"
#include "http/request.h"

/* A JSON document stored as text in the model file (validated by the loader),
 * or null. */
static json_t *models_parse(const char *text)
{
    json_t *v = text != NULL ? json_loads(text, 0, NULL) : NULL;

    return v != NULL ? v : json_null();
}

/* The description of model m; with detail also its architecture. NULL when
 * out of memory. */
static json_t *models_json(const eng_model *m, const char *default_name, int detail)
{
    const nets_info *in = m->info;
    const char *file = strrchr(m->path, '/');
    vbm_config cfg;
    json_t *o;

    eng_model_config(m, &cfg);
    o = json_pack("{s:s, s:b, s:{s:i, s:i, s:i, s:s, s:o}, s:[i, i, i], s:i, s:I, s:o, s:o, "
                  "s:{s:i}, s:i, s:o, s:{s:s, s:I, s:s}, s:o}",
                  "name", m->name, "default", strcmp(m->name, default_name) == 0, "observation",
                  "channels", in->channels, "height", in->height, "width", in->width, "likelihood",
                  in->likelihood == NETS_GAUSSIAN ? "gaussian" : "bernoulli", "min_scale",
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

void route_models_list(http_req *r)
{
    eng_models *reg = r->srv->cfg.models;
    eng_model_set *set;
    json_t *models, *failed, *out;
    const char *dflt;
    int i;

    if (reg == NULL) {
        req_json(r, 200, json_pack("{s:[], s:n, s:[]}", "models", "default_model", "failed"));
        return;
    }
    set = eng_models_snapshot(reg);
    dflt = eng_models_default_name(reg);
    models = json_array();
    failed = json_array();
    for (i = 0; models != NULL && i < set->n; i++) {
        if (json_array_append_new(models, models_json(set->models[i], dflt, 0)) != 0) {
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
    out = models != NULL && failed != NULL
              ? json_pack("{s:o, s:o, s:o, s:I, s:o}", "models", models, "default_model",
                          dflt[0] != '\0' ? json_string(dflt) : json_null(), "failed", failed,
                          "generation", (json_int_t)set->generation, "loaded_at",
                          codec_time(set->loaded_at))
              : NULL;
    if (out == NULL) {
        json_decref(models);
        json_decref(failed);
    }
    eng_model_set_release(set);
    req_json(r, 200, out);
}

/* The model named by the path (a new reference), or NULL after a 404. */
static eng_model *models_lookup(http_req *r)
{
    eng_model *m = NULL;
    vbm_error err;

    if (r->srv->cfg.models == NULL) {
        req_problem(r, 404, "name", "no model named \"%s\" is hosted (no models directory)",
                    r->param);
        return NULL;
    }
    if (eng_models_get(r->srv->cfg.models, r->param, &m, &err) != VBM_OK) {
        req_problem(r, 404, "name", "%s", err.msg);
        return NULL;
    }
    return m;
}

void route_models_get(http_req *r)
{
    eng_model *m = models_lookup(r);

    if (m == NULL)
        return;
    req_json(r, 200, models_json(m, eng_models_default_name(r->srv->cfg.models), 1));
    eng_model_unref(m);
}

/* The observation shape of m. */
static void models_shape(const eng_model *m, img_shape *shape)
{
    shape->channels = m->info->channels;
    shape->height = m->info->height;
    shape->width = m->info->width;
}

void route_models_encode(http_req *r)
{
    static const char *const keys[] = {"observations", "encoding", NULL};
    const http_limits *lim = &r->srv->cfg.limits;
    double t0 = eng_now(), t1 = 0.0, parse_s = 0.0;
    double *mu = NULL, *s2 = NULL;
    vbm_error nerr;
    float *x = NULL;
    eng_model *m;
    img_shape shape;
    json_t *body, *out = NULL;
    vbm_error err;
    long n = 0;
    int b64 = 0;
    size_t TC = 0;
    vbm_status st;

    m = models_lookup(r);
    if (m == NULL)
        return;
    if (req_body_object(r, &body) != 0) {
        eng_model_unref(m);
        return;
    }
    models_shape(m, &shape);
    st = wire_check_keys(body, "", keys, &err);
    if (st == VBM_OK)
        st = codec_opt_encoding(body, "encoding", &b64, &err);
    if (st == VBM_OK && json_object_get(body, "observations") == NULL)
        st = vbm_fail(&err, VBM_EINVAL, "observations", "missing");
    if (st == VBM_OK)
        st = img_read(json_object_get(body, "observations"), "observations", &shape,
                      lim->max_frames, &x, &n, &err);
    json_decref(body);
    if (st == VBM_OK) {
        parse_s = eng_now() - t0;
        TC = (size_t)n * (size_t)m->info->code_size;
        mu = malloc(TC * sizeof *mu);
        s2 = malloc(TC * sizeof *s2);
        if (mu == NULL || s2 == NULL)
            st = vbm_fail(&err, VBM_ENOMEM, NULL, "out of memory encoding %ld images", n);
    }
    if (st == VBM_OK) {
        t1 = eng_now();
        if (nets_encode(m->net, x, n, mu, s2, &nerr) != VBM_OK)
            st = vbm_fail(&err, nerr.status, "observations", "encoding: %s", nerr.msg);
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
        req_engine_problem(r, st, &err);
        return;
    }
    req_json(r, 200, out);
}

void route_models_decode(http_req *r)
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
    vbm_error err;
    uint64_t seed = 0;
    int sample = 0;
    vbm_status st;

    memset(&codes, 0, sizeof codes);
    m = models_lookup(r);
    if (m == NULL)
        return;
    if (req_body_object(r, &body) != 0) {
        eng_model_unref(m);
        return;
    }
    models_shape(m, &shape);
    st = wire_check_keys(body, "", keys, &err);
    if (st == VBM_OK)
        st = img_opt_format(body, "format", 0, &fmt, &err);
    if (st == VBM_OK)
        st = img_opt_pixels(body, "pixels", &sample, &err);
    if (st == VBM_OK)
        st = wire_opt_seed(body, "seed", &seed, &err);
    if (st == VBM_OK && json_object_get(body, "codes") == NULL)
        st = vbm_fail(&err, VBM_EINVAL, "codes", "missing");
    if (st == VBM_OK)
        st = wire_read_codes(json_object_get(body, "codes"), "codes", lim->max_frames,
                             lim->max_code_size, &codes, &err);
    json_decref(body);
    if (st == VBM_OK && codes.C != m->info->code_size)
        st = vbm_fail(&err, VBM_EINVAL, "codes.mu", "%d columns, the model's code size is %d",
                      codes.C, m->info->code_size);
    if (st == VBM_OK) {
        parse_s = eng_now() - t0;
        x = malloc((size_t)codes.T * (size_t)eng_model_pixels(m) * sizeof *x);
        if (x == NULL)
            st = vbm_fail(&err, VBM_ENOMEM, NULL, "out of memory decoding %ld codes", codes.T);
    }
    if (st == VBM_OK) {
        t1 = eng_now();
        st = eng_model_decode_images(m, NULL, codes.mu, codes.T, sample,
                                     eng_derive_seed(seed, ENG_STREAM_PIXELS), x, &err);
        t1 = eng_now() - t1;
    }
    if (st == VBM_OK)
        st = img_write(x, codes.T, &shape, fmt, &images, &err);
    if (st == VBM_OK)
        out = json_pack("{s:s, s:I, s:o, s:{s:f, s:f, s:f, s:f}}", "model", m->name, "count",
                        (json_int_t)codes.T, "observations", images, "timings", "queue_s",
                        r->job.started_at - r->job.queued_at, "parse_s", parse_s, "nets_s", t1,
                        "total_s", eng_now() - r->t_start);
    free(x);
    wire_codes_free(&codes);
    eng_model_unref(m);
    if (st != VBM_OK) {
        req_engine_problem(r, st, &err);
        return;
    }
    req_json(r, 200, out);
}
