/* routes_temporal.c -- owns the HTTP side of sessions of kind temporal (seed 003's sequence
 * memory): creation, episodes as sequences (write/append), samples of a sequence, infer,
 * continue, memory export/import; codes for a latent session, images through the session's
 * model otherwise: the operations of the table kind_temporal (http/session_kinds.h). */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/recall.h"
#include "engine/session_temporal.h"
#include "http/codec.h"
#include "http/observe.h"
#include "http/quota.h"
#include "http/request.h"
#include "http/respond.h"
#include "http/session_kinds.h"
#include "wire/temporal.h"

#define TR_DEFAULT_ITERATIONS 100
#define TR_DEFAULT_SWEEPS     50
#define TR_MAX_TTL            (10L * 365 * 24 * 3600)

/* ---- POST /v1/sessions with memory.kind "temporal" ---- */

/* What tr_make creates a session from. */
typedef struct {
    vbm_temporal_config cfg;
    long ttl;
} tr_new;

/* kind_insert's maker of a temporal session (ctx: a tr_new). */
static vbm_status tr_make(const void *ctx, const unsigned char *owner, eng_session **s,
                          vbm_error *err)
{
    const tr_new *n = ctx;

    return eng_session_create_temporal(&n->cfg, n->ttl, owner, s, err);
}

/* POST /v1/sessions of a temporal session (takes body). */
static int tr_create(http_req *r, json_t *body, vbm_error *err)
{
    static const char *const keys[] = {"code_size", "model", "memory", "ttl_seconds", NULL};
    const http_limits *lim = &r->srv->cfg.limits;
    eng_model *m = NULL;
    tr_new n;
    long code_size = 0;
    double need = 0.0;
    vbm_status st;
    int status;

    n.ttl = 0;
    st = wire_check_keys(body, "", keys, err);
    if (st == VBM_OK)
        st = kind_pick_model(r, body, 0, &m, err);
    if (m != NULL)
        code_size = m->info->code_size;
    if (st == VBM_OK && m == NULL && json_object_get(body, "code_size") == NULL)
        st = vbm_fail(err, VBM_EINVAL, "code_size",
                      "missing (a latent temporal session needs the code size D; a session "
                      "with images names a \"model\")");
    if (st == VBM_OK)
        st = wire_opt_long(body, "code_size", 1, lim->max_code_size, &code_size, err);
    if (st == VBM_OK && m != NULL && code_size != m->info->code_size)
        st = vbm_fail(err, VBM_EINVAL, "code_size",
                      "%ld differs from the code size %d of model \"%s\"", code_size,
                      m->info->code_size, m->name);
    if (st == VBM_OK)
        st = wire_opt_long(body, "ttl_seconds", 0, TR_MAX_TTL, &n.ttl, err);
    if (st == VBM_OK)
        st = wire_temporal_config_read(json_object_get(body, "memory"), "memory", (int)code_size,
                                       &n.cfg, err);
    json_decref(body);
    if (st == VBM_OK) {
        need = eng_temporal_config_bytes(&n.cfg);
        st = eng_store_reserve(r->srv->store, 0, (size_t)need, err);
    }
    if (st != VBM_OK) {
        eng_model_unref(m);
        return resp_status_of(st);
    }
    status = kind_insert(r, need, m, tr_make, &n, err);
    eng_model_unref(m);
    return status;
}

/* ---- sequences from codes or images ---- */

/* One sequence from a codes object (key "codes"-like) or, on a session with model m, from
 * images (an observations value): at least min_T frames of D values. */
static vbm_status tr_one(const eng_model *m, const json_t *v, const char *path, int images,
                         long max_frames, int D, long min_T, vbm_sequence *seq, double *encode_s,
                         vbm_error *err)
{
    wire_codes c;
    double sec = 0.0;
    vbm_status st;

    if (!images)
        return wire_read_sequence(v, path, max_frames, D, min_T, seq, err);
    memset(seq, 0, sizeof *seq);
    memset(&c, 0, sizeof c);
    if ((st = obs_encode(m, v, path, max_frames, &c, &sec, err)) != VBM_OK)
        return st;
    *encode_s += sec;
    if (c.T < min_T) {
        st = vbm_fail(err, VBM_EINVAL, path, "%ld frames; a sequence needs at least %ld", c.T,
                      min_T);
        wire_codes_free(&c);
        return st;
    }
    /* the encoder's means are the observed codes of the sequence */
    seq->T = c.T;
    seq->D = c.C;
    seq->y = c.mu;
    c.mu = NULL;
    wire_codes_free(&c);
    return VBM_OK;
}

/* The session's model when the body carries images under key ikey (*images set), checking
 * that codes (ckey) and images are not both given and that exactly one is. 0, or the status of
 * the failure (422) with err filled. */
static int tr_source(http_req *r, eng_session *s, const json_t *body, const char *ckey,
                     const char *ikey, eng_model **m, int *images, vbm_error *err)
{
    const json_t *cv = json_object_get(body, ckey), *iv = json_object_get(body, ikey);

    *m = NULL;
    *images = iv != NULL;
    if (cv != NULL && iv != NULL)
        return resp_fail(err, 422, ikey, "%s: give %s or %s, not both", ikey, ckey, ikey);
    if (cv == NULL && iv == NULL)
        return resp_fail(err, 422, ckey, "%s: missing (or %s on a session with a model)", ckey,
                         ikey);
    if (*images && eng_session_model_name(s)[0] == '\0')
        return resp_fail(err, 422, ikey,
                         "%s: this is a latent session (no model): post codes as %s", ikey, ckey);
    if (*images)
        return obs_session_model(r, s, m, err);
    return 0;
}

/* ---- POST episodes: write or append sequences ---- */

static int tr_episodes(http_req *r, eng_session *s, json_t *body, vbm_error *err)
{
    int status;
    static const char *const keys[] = {
        "mode",      "sequences", "observations", "iterations", "sweeps", "restarts",
        "tolerance", "seed",      "start",        "warm_start", NULL};
    const http_limits *lim = &r->srv->cfg.limits;
    double t0 = eng_now(), encode_s = 0.0, parse_s;
    const json_t *mv = json_object_get(body, "mode"), *src;
    vbm_temporal_config cfg;
    eng_temporal_opts o;
    eng_temporal_out out;
    vbm_sequence *seqs = NULL;
    eng_model *m = NULL;
    long it = TR_DEFAULT_ITERATIONS < lim->max_iterations ? TR_DEFAULT_ITERATIONS
                                                          : lim->max_iterations,
         sweeps = 2, restarts;
    int append = 0, images = 0, n = 0, start, warm;
    vbm_temporal_opts dflt;
    json_t *res, *trace;
    vbm_status st;

    memset(&o, 0, sizeof o);
    vbm_temporal_opts_default(&dflt);
    restarts = dflt.restarts;
    warm = dflt.warm_start;
    start = dflt.start;
    eng_session_temporal_config(s, &cfg);
    st = wire_check_keys(body, "", keys, err);
    if (st == VBM_OK && mv != NULL) {
        if (json_is_string(mv) && strcmp(json_string_value(mv), "append") == 0)
            append = 1;
        else if (!(json_is_string(mv) && strcmp(json_string_value(mv), "replace") == 0))
            st = vbm_fail(err, VBM_EINVAL, "mode",
                          "expected \"replace\" or \"append\" (a temporal session)");
    }
    if (st == VBM_OK)
        st = wire_opt_long(body, "iterations", 1, lim->max_iterations > 0 ? lim->max_iterations : 1,
                           &it, err);
    if (st == VBM_OK)
        st = wire_opt_long(body, "sweeps", 1, 1000, &sweeps, err);
    if (st == VBM_OK)
        st = wire_opt_long(body, "restarts", 1, 16, &restarts, err);
    if (st == VBM_OK)
        st = wire_temporal_start_read(body, "start", &start, err);
    if (st == VBM_OK)
        st = wire_opt_bool(body, "warm_start", &warm, err);
    if (st == VBM_OK)
        st = wire_opt_double(body, "tolerance", 0.0, 1.0, &o.tolerance, err);
    if (st == VBM_OK)
        st = wire_opt_seed(body, "seed", &o.seed, err);
    if (st != VBM_OK) {
        status = resp_status_of(st);
        json_decref(body);
        return status;
    }
    if ((status = tr_source(r, s, body, "sequences", "observations", &m, &images, err)) != 0) {
        json_decref(body);
        return status;
    }
    src = json_object_get(body, images ? "observations" : "sequences");
    if (!images) {
        st = wire_read_sequences(src, "sequences", lim->max_frames, cfg.code_size, 2, &seqs, &n,
                                 err);
    } else if (!json_is_array(src) || json_array_size(src) == 0 || json_array_size(src) > 10000) {
        st = vbm_fail(err, VBM_EINVAL, "observations",
                      "expected an array of 1 to 10000 sequences of images");
    } else {
        long total = 0;
        seqs = calloc(json_array_size(src), sizeof *seqs);
        if (seqs == NULL)
            st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
        for (size_t i = 0; st == VBM_OK && i < json_array_size(src); i++) {
            char f[64];
            snprintf(f, sizeof f, "observations[%zu]", i);
            st = tr_one(m, json_array_get(src, i), f, 1, lim->max_frames, cfg.code_size, 2,
                        &seqs[i], &encode_s, err);
            n = (int)i + 1;
            if (st == VBM_OK && (total += seqs[i].T) > lim->max_frames)
                st = vbm_fail(err, VBM_EINVAL, "observations", "more than %ld frames in all",
                              lim->max_frames);
        }
    }
    eng_model_unref(m);
    json_decref(body);
    if (st != VBM_OK) {
        wire_sequences_free(seqs, n);
        return resp_status_of(st);
    }
    if ((status = quota_admit(r, 0, 0, 0.0, 1, err)) != 0) {
        wire_sequences_free(seqs, n);
        return status;
    }
    parse_s = eng_now() - t0;
    o.iterations = (int)it;
    o.sweeps = (int)sweeps;
    o.restarts = (int)restarts;
    o.start = start;
    o.warm_start = warm;
    o.if_match = r->has_if_match ? r->if_match : -1;
    st = eng_session_temporal_write(s, append, seqs, n, &o, &out, err);
    wire_sequences_free(seqs, n);
    if (st != VBM_OK) {
        return resp_status_of(st);
    }
    {
        long dims[1] = {out.trace.iterations};
        if (wire_new_array(out.trace.free_energy, 1, dims, 1, "free_energy_trace", &trace, err)
            != VBM_OK)
            trace = NULL;
    }
    res = json_pack("{s:I, s:s, s:i, s:o, s:o, s:I, s:I, s:{s:f, s:f, s:f, s:f, s:f}}", "version",
                    (json_int_t)out.version, "mode", append ? "append" : "replace", "iterations",
                    out.trace.iterations, "free_energy", wire_number(out.free_energy),
                    "free_energy_trace", trace != NULL ? trace : json_null(), "sequences",
                    (json_int_t)out.sequences, "frames", (json_int_t)out.frames, "timings",
                    "parse_s", parse_s, "encode_s", encode_s, "lock_wait_s", out.wait_s, "solve_s",
                    out.solve_s, "total_s", eng_now() - r->t_start);
    resp_etag(r, out.version);
    eng_temporal_out_free(&out);
    return resp_json(r, 200, res, err);
}

/* ---- POST samples: a sequence drawn ancestrally ---- */

static int tr_samples(http_req *r, eng_session *s, json_t *body, vbm_error *err)
{
    int status;
    static const char *const keys[] = {"length", "seed", "encoding", "format", "pixels", NULL};
    const http_limits *lim = &r->srv->cfg.limits;
    vbm_temporal_config cfg;
    eng_model *m = NULL;
    json_t *out, *images = NULL;
    uint64_t seed = 0, version = 0;
    long T = 16;
    double *y = NULL, *a = NULL, nets_s = 0.0;
    int *b = NULL, b64 = 0, sample = 0;
    img_format fmt = IMG_NONE;
    vbm_status st;

    eng_session_temporal_config(s, &cfg);
    st = wire_check_keys(body, "", keys, err);
    if (st == VBM_OK)
        st = wire_opt_long(body, "length", 1, lim->max_frames, &T, err);
    if (st == VBM_OK)
        st = wire_opt_seed(body, "seed", &seed, err);
    if (st == VBM_OK)
        st = codec_opt_encoding(body, "encoding", &b64, err);
    if (st == VBM_OK)
        st = img_answer_opts(body, eng_session_model_name(s)[0] != '\0', &fmt, &sample, err);
    json_decref(body);
    if (st == VBM_OK && fmt != IMG_NONE && (status = obs_session_model(r, s, &m, err)) != 0)
        return status;
    /* the frames' codes, identities, attributes and images, then their answer */
    if (st == VBM_OK
        && (double)T
                       * (8.0 * (cfg.code_size + cfg.components * (cfg.attributes + 1))
                          + (m != NULL ? 8.0 * (double)eng_model_pixels(m) : 0.0))
                   + req_answer_bytes((double)T * cfg.code_size, b64)
                   + req_answer_bytes((double)T * cfg.components * (cfg.attributes + 1), 0)
               > (double)lim->max_request_bytes)
        st = vbm_fail(err, VBM_EINVAL, "length",
                      "%ld frames and their answer would hold more than the %zu bytes a request "
                      "may hold (--max-request-memory)",
                      T, lim->max_request_bytes);
    if (st == VBM_OK)
        st = eng_session_temporal_sample(s, T, seed, &y, &b, &a, &cfg, &version, err);
    if (st == VBM_OK && fmt != IMG_NONE)
        st = obs_decode(m, y, T, sample, eng_derive_seed(seed, ENG_STREAM_PIXELS), fmt, &images,
                        &nets_s, err);
    eng_model_unref(m);
    if (st != VBM_OK) {
        free(y);
        free(a);
        free(b);
        return resp_status_of(st);
    }
    out = json_pack("{s:I, s:I, s:o, s:o, s:o}", "version", (json_int_t)version, "length",
                    (json_int_t)T, "codes", wire_matrix(y, T, cfg.code_size, b64), "identities",
                    wire_int_matrix(b, T, cfg.components), "attributes",
                    wire_matrix(a, T, (long)cfg.components * cfg.attributes, 0));
    if (out != NULL && images != NULL)
        json_object_set_new(out, "observations", images);
    else
        json_decref(images);
    free(y);
    free(a);
    free(b);
    resp_etag(r, version);
    return resp_json(r, 200, out, err);
}

/* ---- POST /v1/sessions/{id}/infer ---- */

static int tr_infer(http_req *r, eng_session *s, json_t *body, vbm_error *err)
{
    int status;
    static const char *const keys[] = {"sequence", "observations", "sweeps", NULL};
    const http_limits *lim = &r->srv->cfg.limits;
    vbm_temporal_config cfg;
    vbm_sequence q = {0, 0, NULL};
    eng_model *m = NULL;
    json_t *out;
    uint64_t version = 0;
    long sweeps = TR_DEFAULT_SWEEPS;
    double *qb = NULL, *a = NULL, fe = NAN, encode_s = 0.0;
    int images = 0;
    vbm_status st;

    eng_session_temporal_config(s, &cfg);
    st = wire_check_keys(body, "", keys, err);
    if (st == VBM_OK)
        st = wire_opt_long(body, "sweeps", 1, 1000, &sweeps, err);
    if (st != VBM_OK) {
        status = resp_status_of(st);
        json_decref(body);
        return status;
    }
    if ((status = tr_source(r, s, body, "sequence", "observations", &m, &images, err)) != 0) {
        json_decref(body);
        return status;
    }
    st = tr_one(m, json_object_get(body, images ? "observations" : "sequence"),
                images ? "observations" : "sequence", images, lim->max_frames, cfg.code_size, 1, &q,
                &encode_s, err);
    eng_model_unref(m);
    json_decref(body);
    if (st == VBM_OK)
        st = eng_session_temporal_infer(s, &q, (int)sweeps, &qb, &a, &fe, &cfg, &version, err);
    if (st != VBM_OK) {
        free((void *)q.y);
        return resp_status_of(st);
    }
    out = json_pack("{s:I, s:I, s:o, s:o, s:o}", "version", (json_int_t)version, "length",
                    (json_int_t)q.T, "identities", wire_matrix(qb, q.T, cfg.components, 0),
                    "attributes", wire_matrix(a, q.T, (long)cfg.components * cfg.attributes, 0),
                    "free_energy", wire_number(fe));
    free((void *)q.y);
    free(qb);
    free(a);
    resp_etag(r, version);
    return resp_json(r, 200, out, err);
}

/* ---- POST /v1/sessions/{id}/continue ---- */

static int tr_continue(http_req *r, eng_session *s, json_t *body, vbm_error *err)
{
    int status;
    static const char *const keys[] = {"prefix", "observations", "steps",  "samples", "seed",
                                       "sweeps", "encoding",     "format", "pixels",  NULL};
    const http_limits *lim = &r->srv->cfg.limits;
    vbm_temporal_config cfg;
    vbm_sequence q = {0, 0, NULL};
    eng_model *m = NULL, *dm = NULL;
    json_t *out = NULL, *jimg = NULL, *jsamples = NULL, *isamples = NULL;
    uint64_t version = 0, seed = 0;
    long sweeps = TR_DEFAULT_SWEEPS, steps = 0, ns = 0;
    double *mean = NULL, *qb = NULL, *smp = NULL, encode_s = 0.0, nets_s = 0.0;
    int images = 0, b64 = 0, sample = 0;
    img_format fmt = IMG_NONE;
    vbm_status st;

    eng_session_temporal_config(s, &cfg);
    st = wire_check_keys(body, "", keys, err);
    if (st == VBM_OK && json_object_get(body, "steps") == NULL)
        st = vbm_fail(err, VBM_EINVAL, "steps", "missing: how many frames to continue by");
    if (st == VBM_OK)
        st = wire_opt_long(body, "steps", 1, lim->max_frames, &steps, err);
    if (st == VBM_OK)
        st = wire_opt_long(body, "samples", 0, 1000, &ns, err);
    if (st == VBM_OK)
        st = wire_opt_seed(body, "seed", &seed, err);
    if (st == VBM_OK)
        st = wire_opt_long(body, "sweeps", 1, 1000, &sweeps, err);
    if (st == VBM_OK)
        st = codec_opt_encoding(body, "encoding", &b64, err);
    if (st == VBM_OK)
        st = img_answer_opts(body, eng_session_model_name(s)[0] != '\0', &fmt, &sample, err);
    /* images of the answer: the session's model decodes them, its pixels count in the estimate */
    if (st == VBM_OK && fmt != IMG_NONE && (status = obs_session_model(r, s, &dm, err)) != 0) {
        json_decref(body);
        return status;
    }
    if (st == VBM_OK
        && (double)steps * (ns + 1)
                       * (8.0 * cfg.code_size
                          + (dm != NULL ? 8.0 * (double)eng_model_pixels(dm) : 0.0))
                   + req_answer_bytes((double)steps * (ns + 1) * cfg.code_size, b64)
               > (double)lim->max_request_bytes)
        st = vbm_fail(err, VBM_EINVAL, "steps",
                      "%ld steps of %ld samples and their answer would hold more than the %zu "
                      "bytes a request may hold (--max-request-memory)",
                      steps, ns, lim->max_request_bytes);
    if (st != VBM_OK) {
        status = resp_status_of(st);
        json_decref(body);
        eng_model_unref(dm);
        return status;
    }
    if ((status = tr_source(r, s, body, "prefix", "observations", &m, &images, err)) != 0) {
        json_decref(body);
        eng_model_unref(dm);
        return status;
    }
    st = tr_one(m, json_object_get(body, images ? "observations" : "prefix"),
                images ? "observations" : "prefix", images, lim->max_frames, cfg.code_size, 1, &q,
                &encode_s, err);
    json_decref(body);
    if (st == VBM_OK)
        st = eng_session_temporal_continue(s, &q, steps, (int)sweeps, seed, (int)ns, &mean, &qb,
                                           &smp, &cfg, &version, err);
    free((void *)q.y);
    if (st == VBM_OK && fmt != IMG_NONE) {
        if (m == NULL) {
            m = dm; /* the reference passes to m */
            dm = NULL;
        }
        st = obs_decode(m, mean, steps, 0, 0, fmt, &jimg, &nets_s, err);
        if (st == VBM_OK && ns > 0)
            isamples = json_array();
        for (long j = 0; st == VBM_OK && j < ns; j++) {
            json_t *im = NULL;
            double sec = 0.0;
            st = obs_decode(m, smp + (size_t)j * steps * cfg.code_size, steps, sample,
                            eng_derive_seed(seed + (uint64_t)j, ENG_STREAM_PIXELS), fmt, &im, &sec,
                            err);
            nets_s += sec;
            if (st == VBM_OK)
                json_array_append_new(isamples, im);
        }
    }
    eng_model_unref(m);
    eng_model_unref(dm);
    if (st != VBM_OK) {
        free(mean);
        free(qb);
        free(smp);
        json_decref(jimg);
        json_decref(isamples);
        return resp_status_of(st);
    }
    if (ns > 0) {
        jsamples = json_array();
        for (long j = 0; j < ns; j++)
            json_array_append_new(jsamples, wire_matrix(smp + (size_t)j * steps * cfg.code_size,
                                                        steps, cfg.code_size, b64));
    }
    out = json_pack("{s:I, s:I, s:I, s:o, s:o}", "version", (json_int_t)version, "prefix_length",
                    (json_int_t)q.T, "steps", (json_int_t)steps, "mean",
                    wire_matrix(mean, steps, cfg.code_size, b64), "identities",
                    wire_matrix(qb, steps, cfg.components, 0));
    if (out != NULL && jsamples != NULL)
        json_object_set_new(out, "samples", jsamples);
    else
        json_decref(jsamples);
    if (out != NULL && jimg != NULL) {
        json_t *o = json_pack("{s:o}", "mean", jimg);
        if (o != NULL && isamples != NULL)
            json_object_set_new(o, "samples", isamples);
        else
            json_decref(isamples);
        json_object_set_new(out, "observations", o);
    } else {
        json_decref(jimg);
        json_decref(isamples);
    }
    free(mean);
    free(qb);
    free(smp);
    resp_etag(r, version);
    return resp_json(r, 200, out, err);
}

/* ---- GET / PUT memory ---- */

static int tr_memory_get(http_req *r, eng_session *s, json_t *body, vbm_error *err)
{
    vbm_temporal *copy = NULL;
    json_t *m = NULL;
    uint64_t version = 0;
    vbm_status st = eng_session_temporal_export(s, &copy, &version, err);

    (void)body;
    if (st == VBM_OK) {
        st = wire_temporal_to_json(copy, &m, err);
        vbm_temporal_free(copy);
    }
    if (st != VBM_OK)
        return resp_status_of(st);
    resp_etag(r, version);
    return resp_json(r, 200, m, err);
}

static int tr_memory_put(http_req *r, eng_session *s, json_t *body, vbm_error *err)
{
    int status;
    const http_limits *lim = &r->srv->cfg.limits;
    vbm_temporal *m = NULL;
    vbm_temporal_config cfg;
    uint64_t version;
    vbm_status st;

    if (!json_is_string(json_object_get(body, "export"))) {
        json_decref(body);
        return resp_fail(err, 422, "kind",
                         "a temporal session imports the form of GET .../memory of a temporal "
                         "session (kind \"temporal\", export)");
    }
    st = wire_temporal_from_json(body, &m, err);
    json_decref(body);
    if (st != VBM_OK) {
        return resp_status_of(st);
    }
    vbm_temporal_summary(m, &cfg, NULL, NULL, NULL);
    if (cfg.code_size > lim->max_code_size) {
        status = resp_fail(err, 422, "export", "code size %d exceeds the limit %d", cfg.code_size,
                           lim->max_code_size);
        vbm_temporal_free(m);
        return status;
    }
    if ((status = quota_admit(r, 0, eng_session_bytes(s), eng_temporal_config_bytes(&cfg), 0, err))
        != 0) {
        vbm_temporal_free(m);
        return status;
    }
    st = eng_store_reserve(r->srv->store, eng_session_bytes(s),
                           (size_t)eng_temporal_config_bytes(&cfg), err);
    if (st == VBM_OK)
        st = eng_session_temporal_replace(s, m, r->has_if_match ? r->if_match : -1, &version, err);
    if (st != VBM_OK) {
        vbm_temporal_free(m);
        return resp_status_of(st);
    }
    return kind_respond_info(r, s, 200, err);
}

const sess_kind kind_temporal = {
    "temporal sessions",
    tr_create,
    {
        [KIND_OP_EPISODES] = tr_episodes,
        [KIND_OP_SAMPLES] = tr_samples,
        [KIND_OP_MEMORY_GET] = tr_memory_get,
        [KIND_OP_MEMORY_PUT] = tr_memory_put,
        [KIND_OP_INFER] = tr_infer,
        [KIND_OP_CONTINUE] = tr_continue,
    },
    {
        [KIND_OP_RESIZE] = "a temporal session has no clusters or rows to resize",
        [KIND_OP_FORGET] = "kind: a temporal session cannot forget",
        [KIND_OP_READS] = "a temporal session reads by POST .../infer and POST .../continue",
    },
};
