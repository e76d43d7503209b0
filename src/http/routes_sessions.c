/* routes_sessions.c -- owns the handlers of /v1/sessions and its sub-resources (episodes, resize,
 * forget, samples, reads, memory, clusters, infer, continue), which call the operations of the
 * session's kind (http/session_kinds.h), and the operations of mixture, latent and pixel
 * sessions (the table kind_vb); they run on pool workers. */
#define _POSIX_C_SOURCE 200809L

#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/clusters.h"
#include "engine/fuse.h"
#include "engine/hosted.h"
#include "engine/recall.h"
#include "http/codec.h"
#include "http/observe.h"
#include "http/quota.h"
#include "http/request.h"
#include "http/respond.h"
#include "http/session_kinds.h"

#define SESS_DEFAULT_ITERATIONS 50
#define SESS_LIST_DEFAULT       50
#define SESS_LIST_MAX           1000
#define SESS_MAX_TTL            (10L * 365 * 24 * 3600)

/* If-Match as the engine wants it (-1: none). */
static int64_t sess_if_match(const http_req *r)
{
    return r->has_if_match ? r->if_match : -1;
}

/* Seconds since the request's first byte. */
static double sess_elapsed(const http_req *r)
{
    return eng_now() - r->t_start;
}

/* ---- POST /v1/sessions ----------------------------------------------------- */

/* Read the "solver" object into *sv. */
static vbm_status sess_read_solver(const json_t *v, const http_limits *lim, eng_solver *sv,
                                   vbm_error *err)
{
    static const char *const keys[] = {"iterations", "tolerance", "init", NULL};
    long it = sv->iterations;
    int init = (int)sv->init;
    vbm_status st;

    if (!json_is_object(v))
        return vbm_fail(err, VBM_EINVAL, "solver", "expected an object");
    st = wire_check_keys(v, "solver", keys, err);
    if (st == VBM_OK)
        st = wire_opt_long(v, "iterations", 0, lim->max_iterations, &it, err);
    if (st == VBM_OK)
        st = wire_opt_double(v, "tolerance", 0.0, 1.0, &sv->tolerance, err);
    if (st == VBM_OK)
        st = wire_opt_init(v, "init", &init, err);
    if (st != VBM_OK) {
        if (strncmp(err->field, "solver", 6) != 0)
            vbm_error_rebase(err, "solver");
        return st;
    }
    sv->iterations = (int)it;
    sv->init = (vbm_init)init;
    return VBM_OK;
}

/* The memory configuration object to read for a session of model m (NULL:
 * latent) from the request's "memory" (NULL when absent): the model's trained
 * configuration overridden member by member by the request's when the request
 * keeps the model's kind; the request's alone when it names another kind; a
 * mixture when neither is given. Returns a new reference, NULL when out of
 * memory. */
static json_t *sess_memory_object(const eng_model *m, json_t *memory)
{
    const json_t *kind = memory != NULL ? json_object_get(memory, "kind") : NULL;
    vbm_config cfg;
    json_t *merged;

    if (m == NULL) {
        if (memory != NULL)
            return json_incref(memory);
        return json_pack("{s:s}", "kind", "mixture");
    }
    eng_model_config(m, &cfg);
    if (kind != NULL
        && !(json_is_string(kind) && strcmp(json_string_value(kind), vbm_kind_name(cfg.kind)) == 0))
        return json_incref(memory);
    merged = wire_config(&cfg);
    if (merged != NULL && memory != NULL && json_is_object(memory)
        && json_object_update(merged, memory) != 0) {
        json_decref(merged);
        return NULL;
    }
    if (merged != NULL && memory != NULL && !json_is_object(memory)) {
        json_decref(merged);
        return json_incref(memory); /* wire_config_read names the wrong type */
    }
    return merged;
}

int route_sessions_create(http_req *r, vbm_error *err)
{
    json_t *body;
    int status = resp_body_object(r, &body, err);

    if (status != 0)
        return status;
    return kind_requested(body)->create(r, body, err);
}

/* What sess_make creates a session from. */
typedef struct {
    vbm_config cfg;
    eng_solver solver;
    long ttl;
} sess_new;

/* kind_insert's maker of a mixture, latent or pixel session (ctx: a sess_new). */
static vbm_status sess_make(const void *ctx, const unsigned char *owner, eng_session **s,
                            vbm_error *err)
{
    const sess_new *n = ctx;

    return eng_session_create(&n->cfg, &n->solver, n->ttl, owner, s, err);
}

/* POST /v1/sessions of a mixture, latent or pixel session (takes body). */
static int sess_create(http_req *r, json_t *body, vbm_error *err)
{
    static const char *const keys[] = {"code_size", "model",       "memory",
                                       "solver",    "ttl_seconds", NULL};
    const http_limits *lim = &r->srv->cfg.limits;
    json_t *memory;
    sess_new n = {.solver = {SESS_DEFAULT_ITERATIONS, 0.0, VBM_INIT_AUTO}};
    vbm_config cfg;
    eng_model *m = NULL;
    long code_size = 0, ttl = 0;
    vbm_status st;
    int status;

    st = wire_check_keys(body, "", keys, err);
    if (st == VBM_OK)
        st = kind_pick_model(r, body, 1, &m, err);
    if (st == VBM_OK && m == NULL && json_object_get(body, "code_size") == NULL)
        st = vbm_fail(err, VBM_EINVAL, "code_size",
                      "missing (a latent session needs the code size C; a session "
                      "with images names a \"model\")");
    if (m != NULL) {
        code_size = m->info->code_size;
        n.solver.iterations =
            m->info->iterations < lim->max_iterations ? m->info->iterations : lim->max_iterations;
    }
    if (st == VBM_OK)
        st = wire_opt_long(body, "code_size", 1, lim->max_code_size, &code_size, err);
    if (st == VBM_OK && m != NULL && code_size != m->info->code_size)
        st = vbm_fail(err, VBM_EINVAL, "code_size",
                      "%ld differs from the code size %d of model \"%s\"", code_size,
                      m->info->code_size, m->name);
    if (st == VBM_OK)
        st = wire_opt_long(body, "ttl_seconds", 0, SESS_MAX_TTL, &ttl, err);
    if (st == VBM_OK && json_object_get(body, "solver") != NULL)
        st = sess_read_solver(json_object_get(body, "solver"), lim, &n.solver, err);
    if (st != VBM_OK) {
        status = resp_status_of(st);
        eng_model_unref(m);
        json_decref(body);
        return status;
    }
    memory = sess_memory_object(m, json_object_get(body, "memory"));
    if (memory == NULL
        || wire_config_read(memory, "memory", 0, (int)code_size, &cfg, err) != VBM_OK) {
        if (memory == NULL)
            status = resp_fail(err, 503, NULL, "out of memory");
        else
            status = 422;
        json_decref(memory);
        eng_model_unref(m);
        json_decref(body);
        return status;
    }
    json_decref(memory);
    if (cfg.code_size != code_size) {
        status =
            resp_fail(err, 422, "memory.code_size",
                      "memory.code_size: %d differs from code_size %ld", cfg.code_size, code_size);
        eng_model_unref(m);
        json_decref(body);
        return status;
    }
    json_decref(body);
    if (vbm_config_check(&cfg, err) != VBM_OK) {
        vbm_error_rebase(err, "memory");
        eng_model_unref(m);
        return 422;
    }
    st = eng_store_admit(r->srv->store, &cfg, err);
    if (st != VBM_OK) {
        status = resp_status_of(st);
        eng_model_unref(m);
        return status;
    }
    n.cfg = cfg;
    n.ttl = ttl;
    status = kind_insert(r, eng_session_config_bytes(&cfg), m, sess_make, &n, err);
    eng_model_unref(m);
    return status;
}

/* ---- GET /v1/sessions, GET/DELETE /v1/sessions/{id} ------------------------- */

int route_sessions_list(http_req *r, vbm_error *err)
{
    int status;
    const char *limit_arg = req_arg(r, "limit"), *cursor = req_arg(r, "cursor");
    eng_session **items = NULL;
    json_t *out, *arr;
    eng_info info;
    long limit = SESS_LIST_DEFAULT;
    char *end;
    int n = 0, more = 0, i;
    vbm_status st;

    if (limit_arg != NULL) {
        limit = strtol(limit_arg, &end, 10);
        if (limit_arg[0] == '\0' || *end != '\0' || limit < 1 || limit > SESS_LIST_MAX)
            return resp_fail(err, 422, "limit", "limit: expected an integer in [1, %d]",
                             SESS_LIST_MAX);
    }
    st = eng_store_list(r->srv->store, r->owner, cursor, (int)limit, &items, &n, &more, err);
    if (st != VBM_OK)
        return resp_status_of(st);
    arr = json_array();
    for (i = 0; i < n; i++) {
        if (arr != NULL && eng_session_info(items[i], &info, err) == VBM_OK) {
            if (json_array_append_new(arr, codec_info(&info)) != 0) {
                json_decref(arr);
                arr = NULL;
            }
            eng_info_free(&info);
        }
    }
    out = json_pack("{s:o, s:o}", "sessions", arr != NULL ? arr : json_array(), "next_cursor",
                    more && n > 0 ? json_string(eng_session_id(items[n - 1])) : json_null());
    for (i = 0; i < n; i++)
        eng_session_unref(items[i]);
    free(items);
    status = resp_json(r, 200, out, err);
    malloc_trim(0);
    return status;
}

int route_sessions_get(http_req *r, vbm_error *err)
{
    eng_session *s;
    int status = resp_session(r, &s, err);

    if (status != 0)
        return status;
    status = kind_respond_info(r, s, 200, err);
    eng_session_unref(s);
    return status;
}

/* 0 when DELETE may go on with session r->param (its version matches If-Match when given, or
 * its owner's stored record is corrupt and no If-Match was given: deleting it is the way out);
 * otherwise the status of the refusal with err filled. */
static int sess_delete_allowed(http_req *r, vbm_error *err)
{
    eng_session *s = NULL;
    uint64_t version;
    vbm_status st;

    if (resp_session_id(r, err) != 0)
        return 404;
    st = eng_store_get(r->srv->store, r->param, r->owner, &s, err);
    if (st == VBM_ECORRUPT && !r->has_if_match)
        return 0;
    if (st == VBM_ENOTFOUND)
        return resp_fail(err, 404, NULL, "no session %s", r->param);
    if (st != VBM_OK)
        return resp_status_of(st);
    version = eng_session_version(s);
    eng_session_unref(s);
    if (r->has_if_match && (int64_t)version != r->if_match)
        return resp_conflict(r, version, err);
    return 0;
}

int route_sessions_delete(http_req *r, vbm_error *err)
{
    int status;
    vbm_status st;

    status = sess_delete_allowed(r, err);
    if (status != 0)
        return status;
    st = eng_store_remove(r->srv->store, r->param, r->owner, err);
    if (st != VBM_OK)
        return resp_status_of(st);
    return resp_empty(r);
}

/* ---- fitting: episodes and resize ------------------------------------------- */

#define SESS_TEST_HOLD_MAX_S 600.0 /* the longest a held write waits (then it goes on) */

/* The test hook of --test-hold-writes DIR (http_server_config.test_hold_dir; tests/http only):
 * called by the engine with session id's write lock held (eng_fit_opts.test_hold; ctx is the
 * request). When DIR/ID.hold exists: create DIR/ID.held, then wait, polling every 2 ms, until
 * DIR/ID.hold is gone (at most SESS_TEST_HOLD_MAX_S seconds). Otherwise returns at once. */
static void sess_test_hold(void *ctx, const char *id)
{
    const http_req *r = ctx;
    const char *dir = r->srv->cfg.test_hold_dir;
    struct timespec pause = {0, 2000000};
    char hold[PATH_MAX], held[PATH_MAX];
    double t0 = eng_now();
    FILE *f;

    if (snprintf(hold, sizeof hold, "%s/%s.hold", dir, id) >= (int)sizeof hold
        || snprintf(held, sizeof held, "%s/%s.held", dir, id) >= (int)sizeof held
        || access(hold, F_OK) != 0)
        return;
    f = fopen(held, "w");
    if (f != NULL)
        fclose(f);
    while (access(hold, F_OK) == 0 && eng_now() - t0 < SESS_TEST_HOLD_MAX_S)
        nanosleep(&pause, NULL);
}

/* Read the fitting options shared by episodes, resize and forget; the fit gets the calling
 * worker's scratch (eng_pool_scratch). */
static vbm_status sess_fit_opts(const json_t *body, const http_req *r, eng_fit_opts *o,
                                vbm_error *err)
{
    const http_limits *lim = &r->srv->cfg.limits;
    long it = -1;
    vbm_status st;

    memset(o, 0, sizeof *o);
    o->scratch = eng_pool_scratch(r->srv->pool);
    o->iterations = -1;
    o->tolerance = -1.0;
    o->init = -1;
    o->max_seconds = lim->max_solve_seconds;
    st = wire_opt_long(body, "iterations", 0, lim->max_iterations, &it, err);
    if (st == VBM_OK)
        st = wire_opt_double(body, "tolerance", 0.0, 1.0, &o->tolerance, err);
    if (st == VBM_OK)
        st = wire_opt_seed(body, "seed", &o->seed, err);
    if (st == VBM_OK)
        st = wire_opt_init(body, "init", &o->init, err);
    if (st == VBM_OK)
        st = wire_opt_bool(body, "addresses", &o->want_addresses, err);
    o->iterations = (int)it;
    return st;
}

/* Fuse the codes c of J views per frame (c->T rows, frame-major: view j of frame t is row
 * t J + j) into one code per frame, in place, with session s's code prior (eng_fuse_prior):
 * the analytic RPM posterior (engine/fuse.h). mask (c->T x C, or NULL) marks the dimensions
 * each view knows; with known_any, *known_any receives a T x C mask of the dimensions some
 * view of the frame knows (NULL when there is no mask). field names the views in errors
 * ("codes", "query"; images: "observations", whose errors name the image). J = 1 changes
 * nothing. Fails with VBM_EINVAL (rows that are not whole frames of J views: field
 * "FIELD.mu", or "FIELD" for images; the failures of eng_fuse_codes) or VBM_ENOMEM; c is
 * then unchanged. */
static vbm_status sess_fuse_views(eng_session *s, long J, wire_codes *c, const unsigned char *mask,
                                  const char *field, int images, unsigned char **known_any,
                                  vbm_error *err)
{
    vbm_config cfg;

    eng_session_config(s, &cfg);
    return eng_fuse_views(&cfg, J, &c->T, c->C, &c->mu, &c->s2, mask, field, images, known_any,
                          err);
}

/* Common members of a fit response. Returns NULL when out of memory. */
static json_t *sess_fit_json(const http_req *r, const eng_fit_out *out, double parse_s)
{
    json_t *o = json_pack(
        "{s:I, s:o, s:i, s:b, s:b, s:I, s:I, s:i, s:i, s:i, s:o, s:{s:f, s:f, s:f, s:f, s:f}}",
        "version", (json_int_t)out->version, "elbo", wire_elbo(&out->res.elbo), "iterations",
        out->res.iterations, "converged", out->res.converged, "time_limited", out->time_limited,
        "frames", (json_int_t)out->frames, "retained_codes", (json_int_t)out->retained, "clusters",
        out->clusters, "rows", out->rows, "groups", out->groups, "cluster_usage",
        codec_usage(out->usage, out->groups, out->clusters), "timings", "queue_s",
        r->job.started_at - r->job.queued_at, "parse_s", parse_s, "lock_wait_s", out->wait_s,
        "solve_s", out->solve_s, "total_s", sess_elapsed(r));

    if (o != NULL && out->res.addr.s != NULL) {
        json_t *a = codec_addresses(&out->res.addr);

        if (a == NULL || json_object_set_new(o, "addresses", a) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

static int sess_episodes(http_req *r, eng_session *s, json_t *body, vbm_error *err)
{
    int status;
    static const char *const keys[] = {
        "mode", "codes", "observations", "iterations",      "tolerance",
        "seed", "init",  "addresses",    "views_per_frame", NULL};
    const http_limits *lim = &r->srv->cfg.limits;
    double t0 = eng_now(), parse_s, encode_s = 0.0;
    wire_codes codes;
    vbm_codes vc;
    eng_fit_opts o;
    eng_fit_out out;
    eng_mode mode = ENG_REPLACE;
    eng_model *m = NULL;
    const json_t *mv, *cv, *ov;
    json_t *res;
    int images;
    long views = 1;
    vbm_status st;

    memset(&codes, 0, sizeof codes);
    ov = json_object_get(body, "observations");
    images = ov != NULL;
    if (images && (status = obs_session_model(r, s, &m, err)) != 0) {
        json_decref(body);
        return status;
    }
    st = wire_check_keys(body, "", keys, err);
    mv = json_object_get(body, "mode");
    if (st == VBM_OK && mv != NULL) {
        if (json_is_string(mv) && strcmp(json_string_value(mv), "replace") == 0)
            mode = ENG_REPLACE;
        else if (json_is_string(mv) && strcmp(json_string_value(mv), "append") == 0)
            mode = ENG_APPEND;
        else if (json_is_string(mv) && strcmp(json_string_value(mv), "refit") == 0)
            mode = ENG_REFIT;
        else
            st = vbm_fail(err, VBM_EINVAL, "mode", "expected \"replace\", \"append\" or \"refit\"");
    }
    if (st == VBM_OK)
        st = sess_fit_opts(body, r, &o, err);
    if (st == VBM_OK)
        st = wire_opt_long(body, "views_per_frame", 1, ENG_FUSE_MAX_VIEWS, &views, err);
    cv = json_object_get(body, "codes");
    if (st == VBM_OK && views > 1 && cv == NULL && ov == NULL)
        st = vbm_fail(err, VBM_EINVAL, "views_per_frame",
                      "views of posted codes or observations only (a refit posts none)");
    if (st == VBM_OK && cv != NULL && ov != NULL)
        st = vbm_fail(err, VBM_EINVAL, "observations", "give codes or observations, not both");
    if (st == VBM_OK && ov != NULL && m == NULL)
        st = vbm_fail(err, VBM_EINVAL, "observations",
                      "this is a latent session (no model): post codes");
    if (st == VBM_OK && cv == NULL && ov == NULL && mode != ENG_REFIT)
        st = vbm_fail(err, VBM_EINVAL, "codes", "missing (or observations)");
    if (st == VBM_OK && cv != NULL)
        st = wire_read_codes(cv, "codes", lim->max_frames, lim->max_code_size, &codes, err);
    if (st == VBM_OK && ov != NULL)
        st = obs_encode(m, ov, "observations", lim->max_frames, &codes, &encode_s, err);
    if (st == VBM_OK && views > 1)
        st = sess_fuse_views(s, views, &codes, NULL, cv != NULL ? "codes" : "observations",
                             cv == NULL, NULL, err);
    eng_model_unref(m);
    json_decref(body);
    if (st != VBM_OK) {
        wire_codes_free(&codes); /* read or encoded, then refused by the fusion */
        status = resp_status_of(st);
        return status;
    }
    if ((status = quota_admit(r, 0, 0, 0.0, 1, err)) != 0) {
        wire_codes_free(&codes);
        return status;
    }
    parse_s = eng_now() - t0;
    o.if_match = sess_if_match(r);
    if (r->srv->cfg.test_hold_dir != NULL) {
        o.test_hold = sess_test_hold;
        o.test_hold_ctx = r;
    }
    vc.T = codes.T;
    vc.C = codes.C;
    vc.mu = codes.mu;
    vc.s2 = codes.s2;
    st = eng_session_write(s, mode, codes.mu != NULL ? &vc : NULL, &o, &out, err);
    wire_codes_free(&codes);
    if (st != VBM_OK)
        return resp_status_of(st);
    metrics_solve(r->srv->metrics, out.res.iterations, out.solve_s);
    res = sess_fit_json(r, &out, parse_s);
    if (res != NULL && images)
        json_object_set_new(json_object_get(res, "timings"), "encode_s", json_real(encode_s));
    if (res != NULL)
        json_object_set_new(res, "mode",
                            json_string(mode == ENG_REPLACE  ? "replace"
                                        : mode == ENG_APPEND ? "append"
                                                             : "refit"));
    resp_etag(r, out.version);
    eng_fit_out_free(&out);
    return resp_json(r, 200, res, err);
}

static int sess_resize(http_req *r, eng_session *s, json_t *body, vbm_error *err)
{
    int status;
    static const char *const keys[] = {"clusters", "rows", "iterations", "tolerance",
                                       "seed",     "init", "addresses",  NULL};
    eng_fit_opts o;
    eng_fit_out out;
    json_t *res;
    long H = 0, K = 0;
    vbm_status st;

    st = wire_check_keys(body, "", keys, err);
    if (st == VBM_OK)
        st = wire_opt_long(body, "clusters", 0, VBM_MAX_CLUSTERS, &H, err);
    if (st == VBM_OK)
        st = wire_opt_long(body, "rows", 0, VBM_MAX_ROWS, &K, err);
    if (st == VBM_OK && H == 0 && K == 0)
        st = vbm_fail(err, VBM_EINVAL, "clusters", "give clusters and/or rows (0 keeps one)");
    if (st == VBM_OK)
        st = sess_fit_opts(body, r, &o, err);
    json_decref(body);
    if (st != VBM_OK) {
        status = resp_status_of(st);
        return status;
    }
    {
        vbm_config grown;

        eng_session_config(s, &grown);
        if (H > 0)
            grown.clusters = (int)H;
        if (K > 0)
            grown.rows = (int)K;
        if ((status =
                 quota_admit(r, 0, eng_session_bytes(s), eng_session_config_bytes(&grown), 0, err))
            != 0) {
            return status;
        }
    }
    o.if_match = sess_if_match(r);
    st = eng_store_resize(r->srv->store, s, (int)H, (int)K, &o, &out, err);
    if (st != VBM_OK)
        return resp_status_of(st);
    metrics_solve(r->srv->metrics, out.res.iterations, out.solve_s);
    res = sess_fit_json(r, &out, 0.0);
    if (res != NULL) {
        json_object_set_new(res, "elbo_before", wire_number(out.elbo_before));
        json_object_set_new(res, "elbo_after", wire_number(out.elbo_after));
    }
    resp_etag(r, out.version);
    eng_fit_out_free(&out);
    return resp_json(r, 200, res, err);
}

/* ---- forget ------------------------------------------------------------------------ */

/* The body of a forget's answer: the fit members (the refit's ELBO, or null when nothing
 * was refitted: a downdate, or a memory back at its prior), exact, and one entry per cue.
 * NULL when out of memory. */
static json_t *sess_forget_json(const http_req *r, const eng_forget_out *out, double parse_s)
{
    json_t *o = sess_fit_json(r, &out->fit, parse_s), *removed = json_array();
    long i;
    int g;

    if (o == NULL || removed == NULL) {
        json_decref(o);
        json_decref(removed);
        return NULL;
    }
    for (i = 0; i < out->n; i++) {
        json_t *cl = json_array(), *e;

        for (g = 0; cl != NULL && out->clusters != NULL && g < out->groups; g++)
            json_array_append_new(cl, json_integer(out->clusters[i * out->groups + g]));
        e = json_pack("{s:I, s:o, s:o, s:o}", "cue", (json_int_t)i, "item",
                      out->item[i] >= 0 ? json_integer((json_int_t)out->item[i]) : json_null(),
                      "distance", wire_number(out->distance[i]), "clusters",
                      cl != NULL ? cl : json_null());
        if (e == NULL || json_array_append_new(removed, e) != 0) {
            json_decref(o);
            json_decref(removed);
            return NULL;
        }
    }
    if (json_object_set_new(o, "removed", removed) != 0
        || json_object_set_new(o, "exact", json_boolean(out->exact)) != 0
        || ((!out->exact || out->fit.frames == 0) /* nothing refitted */
            && json_object_set_new(o, "elbo", json_null()) != 0)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static int sess_forget(http_req *r, eng_session *s, json_t *body, vbm_error *err)
{
    int status;
    static const char *const keys[] = {"codes", "observations", "iterations", "tolerance",
                                       "seed",  "init",         NULL};
    const http_limits *lim = &r->srv->cfg.limits;
    double t0 = eng_now(), parse_s;
    wire_codes codes;
    vbm_codes vc;
    eng_forget_query q;
    eng_fit_opts o;
    eng_forget_out out;
    eng_model *m = NULL;
    const json_t *cv, *ov;
    json_t *res;
    img_shape shape;
    float *x = NULL;
    long n = 0;
    vbm_status st;

    memset(&codes, 0, sizeof codes);
    memset(&q, 0, sizeof q);
    cv = json_object_get(body, "codes");
    ov = json_object_get(body, "observations");
    if (ov != NULL && (status = obs_session_model(r, s, &m, err)) != 0) {
        json_decref(body);
        return status;
    }
    st = wire_check_keys(body, "", keys, err);
    if (st == VBM_OK && cv != NULL && ov != NULL)
        st = vbm_fail(err, VBM_EINVAL, "observations", "give codes or observations, not both");
    if (st == VBM_OK && cv == NULL && ov == NULL)
        st = vbm_fail(err, VBM_EINVAL, "codes", "missing (or observations): the cues to forget");
    if (st == VBM_OK && ov != NULL && m == NULL)
        st = vbm_fail(err, VBM_EINVAL, "observations",
                      "this is a latent session (no model): forget by codes");
    if (st == VBM_OK)
        st = sess_fit_opts(body, r, &o, err);
    if (st == VBM_OK && cv != NULL)
        st = wire_read_codes(cv, "codes", lim->max_frames, lim->max_code_size, &codes, err);
    if (st == VBM_OK && ov != NULL) {
        obs_shape(m, &shape);
        st = img_read(ov, "observations", &shape, lim->max_frames, &x, &n, err);
    }
    json_decref(body);
    if (st != VBM_OK) {
        wire_codes_free(&codes);
        free(x);
        eng_model_unref(m);
        status = resp_status_of(st);
        return status;
    }
    parse_s = eng_now() - t0;
    o.want_addresses = 0;
    o.if_match = sess_if_match(r);
    if (r->srv->cfg.test_hold_dir != NULL) {
        o.test_hold = sess_test_hold;
        o.test_hold_ctx = r;
    }
    if (cv != NULL) {
        vc.T = codes.T;
        vc.C = codes.C;
        vc.mu = codes.mu;
        vc.s2 = codes.s2;
        q.codes = &vc;
    } else {
        q.images = x;
        q.T = n;
    }
    st = eng_session_forget(s, m, &q, &o, &out, err);
    wire_codes_free(&codes);
    free(x);
    eng_model_unref(m);
    if (st != VBM_OK)
        return resp_status_of(st);
    metrics_solve(r->srv->metrics, out.fit.res.iterations, out.fit.solve_s);
    res = sess_forget_json(r, &out, parse_s);
    if (res != NULL && ov != NULL)
        json_object_set_new(json_object_get(res, "timings"), "encode_s", json_real(out.encode_s));
    resp_etag(r, out.fit.version);
    eng_forget_out_free(&out);
    return resp_json(r, 200, res, err);
}

/* ---- samples and reads -------------------------------------------------------- */

static int sess_samples(http_req *r, eng_session *s, json_t *body, vbm_error *err)
{
    int status;
    static const char *const keys[] = {"count",  "seed",   "cluster", "encoding",
                                       "format", "pixels", NULL};
    const http_limits *lim = &r->srv->cfg.limits;
    eng_model *m = NULL;
    json_t *out, *images = NULL;
    uint64_t seed = 0, version = 0;
    long count = 1, cluster = -1;
    double *z = NULL, nets_s = 0.0;
    int *clusters = NULL, C = 0, G = 0, b64 = 0, sample = 0;
    img_format fmt = IMG_NONE;
    vbm_status st;

    st = wire_check_keys(body, "", keys, err);
    if (st == VBM_OK)
        st = wire_opt_long(body, "count", 1, lim->max_frames, &count, err);
    if (st == VBM_OK)
        st = wire_opt_seed(body, "seed", &seed, err);
    if (st == VBM_OK)
        st = wire_opt_long(body, "cluster", -1, VBM_MAX_CLUSTERS, &cluster, err);
    if (st == VBM_OK)
        st = codec_opt_encoding(body, "encoding", &b64, err);
    if (st == VBM_OK)
        st = img_answer_opts(body, eng_session_model_name(s)[0] != '\0', &fmt, &sample, err);
    json_decref(body);
    /* codes alone ("format": "none") do not need the model */
    if (st == VBM_OK && fmt != IMG_NONE && (status = obs_session_model(r, s, &m, err)) != 0) {
        return status;
    }
    /* codes and cluster indices of every frame, and their images (floats, then
     * encoded): checked before anything is allocated */
    if (st == VBM_OK) {
        vbm_config cfg;
        double bytes;

        eng_session_config(s, &cfg);
        /* the codes, cluster indices and images, then the answer: codes (base64 or JSON) and
         * cluster indices (JSON) */
        bytes = (double)count
                    * (8.0 * cfg.code_size + 4.0 * cfg.groups
                       + (m != NULL ? 8.0 * (double)eng_model_pixels(m) : 0.0))
                + req_answer_bytes((double)count * cfg.code_size, b64)
                + req_answer_bytes((double)count * cfg.groups, 0);
        if (bytes > (double)lim->max_request_bytes)
            st = vbm_fail(err, VBM_EINVAL, "count",
                          "%ld samples would hold %.0f bytes of codes%s and their answer, more "
                          "than the %zu bytes a request may hold (--max-request-memory); ask "
                          "for fewer%s",
                          count, bytes, m != NULL ? ", images" : "", lim->max_request_bytes,
                          b64 ? "" : " or for \"encoding\": \"base64\"");
    }
    if (st == VBM_OK)
        st = eng_session_sample(s, count, seed, (int)cluster, &z, &clusters, &C, &G, &version, err);
    if (st == VBM_OK && fmt != IMG_NONE)
        st = obs_decode(m, z, count, sample, eng_derive_seed(seed, ENG_STREAM_PIXELS), fmt, &images,
                        &nets_s, err);
    eng_model_unref(m);
    if (st != VBM_OK) {
        free(z);
        free(clusters);
        return resp_status_of(st);
    }
    out = json_pack("{s:I, s:I, s:o, s:o}", "version", (json_int_t)version, "count",
                    (json_int_t)count, "codes", wire_matrix(z, count, C, b64), "clusters",
                    wire_int_matrix(clusters, count, G));
    if (out != NULL && images != NULL) {
        if (json_object_set_new(out, "observations", images) != 0
            || json_object_set_new(
                   out, "timings",
                   json_pack("{s:f, s:f}", "nets_s", nets_s, "total_s", eng_now() - r->t_start))
                   != 0) {
            json_decref(out);
            out = NULL;
        }
    } else {
        json_decref(images);
    }
    resp_etag(r, version);
    status = resp_json(r, 200, out, err);
    free(z);
    free(clusters);
    return status;
}

/* ---- GET /v1/sessions/{id}/clusters ------------------------------------------ */

/* A query argument as a JSON string member of obj (absent: nothing set). 0, or -1 when out of
 * memory. */
static int sess_arg_member(const http_req *r, json_t *obj, const char *key)
{
    const char *v = req_arg(r, key);

    return v == NULL ? 0 : json_object_set_new(obj, key, json_string(v));
}

int route_clusters(http_req *r, vbm_error *err)
{
    eng_session *s;
    int status = resp_session(r, &s, err);
    eng_model *m = NULL;
    eng_clusters cl;
    json_t *opts, *out, *images = NULL;
    img_format fmt = IMG_NONE;
    double nets_s = 0.0;
    int b64 = 0, sample = 0;
    vbm_status st;

    if (status != 0)
        return status;
    memset(&cl, 0, sizeof cl);
    /* the options of a GET are query arguments, read as the members of a body would be */
    opts = json_object();
    if (opts == NULL || sess_arg_member(r, opts, "format") != 0
        || sess_arg_member(r, opts, "encoding") != 0) {
        json_decref(opts);
        eng_session_unref(s);
        return resp_fail(err, 503, NULL, "out of memory");
    }
    st = codec_opt_encoding(opts, "encoding", &b64, err);
    if (st == VBM_OK)
        st = img_answer_opts(opts, eng_session_model_name(s)[0] != '\0', &fmt, &sample, err);
    json_decref(opts);
    if (st == VBM_OK && fmt != IMG_NONE && (status = obs_session_model(r, s, &m, err)) != 0) {
        eng_session_unref(s);
        return status;
    }
    if (st == VBM_OK)
        st = eng_session_clusters(s, &cl, err);
    eng_session_unref(s);
    if (st == VBM_OK && m != NULL
        && (double)cl.clusters * (8.0 * cl.code_size + 8.0 * (double)eng_model_pixels(m))
               > (double)r->srv->cfg.limits.max_request_bytes)
        st = vbm_fail(err, VBM_EINVAL, "format",
                      "the images of %d clusters would hold more than the %zu bytes a request "
                      "may hold (--max-request-memory); ask for format=none",
                      cl.clusters, r->srv->cfg.limits.max_request_bytes);
    if (st == VBM_OK && m != NULL)
        st = obs_decode(m, cl.means, cl.clusters, 0, 0, fmt, &images, &nets_s, err);
    eng_model_unref(m);
    if (st != VBM_OK) {
        eng_clusters_free(&cl);
        return resp_status_of(st);
    }
    out = json_pack("{s:I, s:s, s:i, s:i, s:i, s:I, s:o, s:o}", "version", (json_int_t)cl.version,
                    "kind", vbm_kind_name(cl.kind), "clusters", cl.clusters, "groups", cl.groups,
                    "code_size", cl.code_size, "frames", (json_int_t)cl.frames, "means",
                    wire_matrix(cl.means, cl.clusters, cl.code_size, b64), "usage",
                    codec_usage(cl.usage, cl.groups, cl.clusters));
    if (out != NULL && images != NULL) {
        if (json_object_set_new(out, "observations", images) != 0
            || json_object_set_new(
                   out, "timings",
                   json_pack("{s:f, s:f}", "nets_s", nets_s, "total_s", eng_now() - r->t_start))
                   != 0) {
            json_decref(out);
            out = NULL;
        }
    } else {
        json_decref(images);
    }
    resp_etag(r, cl.version);
    status = resp_json(r, 200, out, err);
    eng_clusters_free(&cl);
    return status;
}

/* The read options of a ReadRequest: mode ("recall" by default, "mean",
 * "sample"), candidates (recall only; 4 by default), cue_noise (recall only: a
 * number, at most 1 for a cue of images (pixel scale) and finite for codes, or
 * "auto"; "auto" by default, 0 with a mask), answer (recall only: "clean", the
 * default, or "blend"). Stored into o (mode, candidates, cue_noise, blend). Fails
 * with VBM_EINVAL naming the member. */
static vbm_status sess_read_mode(const json_t *body, int image_cue, int has_mask,
                                 eng_recall_opts *o, vbm_error *err)
{
    const json_t *mv = json_object_get(body, "mode"), *nv = json_object_get(body, "cue_noise");
    const json_t *av = json_object_get(body, "answer");
    const char *name = json_is_string(mv) ? json_string_value(mv) : "";
    long candidates = 4;
    vbm_status st;

    o->mode = ENG_READ_RECALL;
    if (mv != NULL) {
        if (strcmp(name, "recall") == 0)
            o->mode = ENG_READ_RECALL;
        else if (strcmp(name, "mean") == 0)
            o->mode = ENG_READ_MEAN;
        else if (strcmp(name, "sample") == 0)
            o->mode = ENG_READ_SAMPLE;
        else
            return vbm_fail(err, VBM_EINVAL, "mode", "expected \"recall\", \"mean\" or \"sample\"");
    }
    if (o->mode != ENG_READ_RECALL && json_object_get(body, "candidates") != NULL)
        return vbm_fail(err, VBM_EINVAL, "candidates",
                        "candidates are scored by the recall mode only (mode \"%s\")", name);
    if (o->mode != ENG_READ_RECALL && nv != NULL)
        return vbm_fail(err, VBM_EINVAL, "cue_noise",
                        "the cue's noise is used by the recall mode only (mode \"%s\")", name);
    if (o->mode != ENG_READ_RECALL && av != NULL)
        return vbm_fail(err, VBM_EINVAL, "answer",
                        "the answer's form is chosen in the recall mode only (mode \"%s\")", name);
    o->blend = 0;
    if (av != NULL) {
        const char *a = json_is_string(av) ? json_string_value(av) : "";

        if (strcmp(a, "blend") == 0)
            o->blend = 1;
        else if (strcmp(a, "clean") != 0)
            return vbm_fail(err, VBM_EINVAL, "answer", "expected \"clean\" or \"blend\"");
    }
    st = wire_opt_long(body, "candidates", 1, ENG_RECALL_MAX_CANDIDATES, &candidates, err);
    if (st != VBM_OK)
        return st;
    o->candidates = (int)candidates;
    o->cue_noise = has_mask ? 0.0 : -1.0;
    if (json_is_string(nv) && strcmp(json_string_value(nv), "auto") == 0)
        o->cue_noise = -1.0;
    else if (nv != NULL && !json_is_number(nv))
        return vbm_fail(err, VBM_EINVAL, "cue_noise", "expected a number >= 0 or \"auto\"");
    else if (nv != NULL) {
        double x = json_number_value(nv);

        if (!(x >= 0.0) || !isfinite(x) || (image_cue && x > 1.0))
            return vbm_fail(err, VBM_EINVAL, "cue_noise",
                            image_cue ? "a standard deviation of pixels in [0, 1], got %g"
                                      : "a standard deviation of codes >= 0 (finite), got %g",
                            x);
        o->cue_noise = x;
    }
    return VBM_OK;
}

static int sess_reads(http_req *r, eng_session *s, json_t *body, vbm_error *err)
{
    int status;
    static const char *const keys[] = {
        "query",     "observations",    "count",  "iterations", "seed",       "encoding",
        "addresses", "format",          "pixels", "mode",       "candidates", "cue_noise",
        "mask",      "views_per_frame", "answer", NULL};
    const http_limits *lim = &r->srv->cfg.limits;
    eng_recall_query rq;
    eng_recall_opts ro;
    eng_recall_out res;
    wire_codes q;
    vbm_codes vc;
    img_shape shape;
    img_format fmt = IMG_NONE;
    eng_model *m = NULL;
    const json_t *qv, *ov, *mk;
    json_t *out = NULL;
    uint64_t seed = 0;
    long iterations = 1, count = 1, n = 0, views = 1;
    float *x = NULL;
    unsigned char *mask = NULL;
    int b64 = 0, want_addr = 1, sample = 0, C;
    vbm_status st;

    memset(&q, 0, sizeof q);
    memset(&ro, 0, sizeof ro);
    if ((status = obs_session_model(r, s, &m, err)) != 0) {
        json_decref(body);
        return status;
    }
    qv = json_object_get(body, "query");
    ov = json_object_get(body, "observations");
    mk = json_object_get(body, "mask");
    C = eng_session_code_size(s);
    st = wire_check_keys(body, "", keys, err);
    if (st == VBM_OK)
        st = wire_opt_long(body, "iterations", 1, lim->max_read_steps, &iterations, err);
    if (st == VBM_OK)
        st = wire_opt_seed(body, "seed", &seed, err);
    if (st == VBM_OK)
        st = codec_opt_encoding(body, "encoding", &b64, err);
    if (st == VBM_OK)
        st = wire_opt_bool(body, "addresses", &want_addr, err);
    if (st == VBM_OK)
        st = wire_opt_long(body, "count", 1, lim->max_frames, &count, err);
    if (st == VBM_OK)
        st = wire_opt_long(body, "views_per_frame", 1, ENG_FUSE_MAX_VIEWS, &views, err);
    if (st == VBM_OK && views > 1 && qv == NULL && ov == NULL)
        st = vbm_fail(err, VBM_EINVAL, "views_per_frame",
                      "views of a query (observations or query codes) only; a read that starts "
                      "from memory has none");
    if (st == VBM_OK)
        st = img_answer_opts(body, m != NULL, &fmt, &sample, err);
    if (st == VBM_OK)
        st = sess_read_mode(body, ov != NULL || (m != NULL && qv == NULL), mk != NULL, &ro, err);
    if (st == VBM_OK && qv != NULL && ov != NULL)
        st =
            vbm_fail(err, VBM_EINVAL, "observations", "give query codes or observations, not both");
    if (st == VBM_OK && ov != NULL && m == NULL)
        st = vbm_fail(err, VBM_EINVAL, "observations",
                      "this is a latent session (no model): query with codes");
    if (st == VBM_OK && (qv != NULL || ov != NULL) && json_object_get(body, "count") != NULL)
        st = vbm_fail(err, VBM_EINVAL, "count",
                      "frames of a read that starts from memory (no query) only");
    if (st == VBM_OK && mk != NULL && qv == NULL && ov == NULL)
        st = vbm_fail(err, VBM_EINVAL, "mask",
                      "a mask marks the known values of a query (observations or query codes); "
                      "a read that starts from memory has none");
    if (st == VBM_OK && qv != NULL)
        st = wire_read_codes(qv, "query", lim->max_frames, lim->max_code_size, &q, err);
    if (st == VBM_OK && ov != NULL) {
        obs_shape(m, &shape);
        st = img_read(ov, "observations", &shape, lim->max_frames, &x, &n, err);
    }
    if (st == VBM_OK && mk != NULL && ov != NULL)
        st = img_read_mask(mk, "mask", &shape, n, &mask, err);
    if (st == VBM_OK && qv != NULL && q.C != C)
        st = vbm_fail(err, VBM_EINVAL, "query", "codes of size %d, the session's are %d", q.C, C);
    if (st == VBM_OK && mk != NULL && qv != NULL)
        st = img_read_code_mask(mk, "mask", q.T, q.C, &mask, err);
    if (st == VBM_OK && x != NULL && n % views != 0)
        st = vbm_fail(err, VBM_EINVAL, "observations",
                      "%ld images are not whole frames of views_per_frame = %ld views (view j of "
                      "frame t is image t J + j)",
                      n, views);
    if (st == VBM_OK && qv != NULL && views > 1) {
        /* J codes of each frame: fused here into one query code, with the dimensions
         * some view knows as the query's mask */
        unsigned char *known = NULL;

        st = sess_fuse_views(s, views, &q, mask, "query", 0, &known, err);
        if (st == VBM_OK) {
            free(mask);
            mask = known;
        }
    }
    json_decref(body);
    rq.T = x != NULL ? n / views : q.mu != NULL ? q.T : count;
    rq.views = x != NULL ? (int)views : 1;
    /* Every read (query codes, images or from memory) holds, per step and
     * frame, its codes, images and addresses (G*H each), and once per frame
     * the start and the work of the recall (candidates, the G*H*K addressing
     * workspace); checked before the engine allocates any of it. */
    if (st == VBM_OK) {
        vbm_config cfg;
        double P = m != NULL ? (double)eng_model_pixels(m) : 0.0, GH, bytes;

        eng_session_config(s, &cfg);
        GH = (double)cfg.groups * (double)cfg.clusters;
        bytes =
            (double)rq.T
            * ((double)iterations * (8.0 * C + 4.0 * P + 8.0 * GH)
               + (8.0 * C * (3.0 + (double)ro.candidates) + 48.0 * P + 8.0 * GH * (double)cfg.rows)
               + (rq.views > 1 ? (double)rq.views * (16.0 * C + 32.0 * P) : 0.0));
        /* the answer: every step's codes (and the start's), and its addresses when asked */
        bytes += req_answer_bytes((double)rq.T * (double)(iterations + 1) * C, b64)
                 + (want_addr ? req_answer_bytes((double)rq.T * (double)iterations * GH, 0) : 0.0);
        if (bytes > (double)lim->max_request_bytes)
            st = vbm_fail(err, VBM_EINVAL, "iterations",
                          "a read of %ld steps of %ld frames would hold %.0f bytes of codes, "
                          "images, addresses and their answer, more than the %zu bytes a "
                          "request may hold (--max-request-memory); read fewer frames or steps",
                          iterations, rq.T, bytes, lim->max_request_bytes);
    }
    if (st != VBM_OK) {
        free(x);
        free(mask);
        wire_codes_free(&q);
        eng_model_unref(m);
        return resp_status_of(st);
    }
    vc.T = q.T;
    vc.C = q.C;
    vc.mu = q.mu;
    vc.s2 = q.s2;
    rq.images = x;
    rq.codes = q.mu != NULL ? &vc : NULL;
    ro.steps = (int)iterations;
    ro.seed = seed;
    ro.pixel_sample = sample;
    ro.want_addresses = 1; /* the per-step cluster summary needs them */
    ro.mask = mask;
    st = eng_session_recall(s, m, &rq, &ro, &res, err);
    free(x);
    free(mask);
    wire_codes_free(&q);
    if (st == VBM_OK) {
        st = obs_recall_json(r, &res, m, fmt, b64, want_addr, &out, err);
        if (st == VBM_OK)
            resp_etag(r, res.version);
        eng_recall_out_free(&res);
    }
    eng_model_unref(m);
    if (st != VBM_OK)
        return resp_status_of(st);
    return resp_json(r, 200, out, err);
}

/* ---- memory export / import ------------------------------------------------------ */

int route_memory_get(http_req *r, vbm_error *err)
{
    eng_session *s;
    int status = resp_session(r, &s, err);
    double held, bytes;

    if (status != 0)
        return status;
    /* the exported copy, then its answer: every number of it in JSON */
    held = (double)eng_session_bytes(s);
    bytes = held + req_answer_bytes(held / 8.0, 0);
    if (bytes > (double)r->srv->cfg.limits.max_request_bytes)
        status =
            resp_fail(err, 422, "memory",
                      "the export of this session (%.0f bytes held) would hold %.0f bytes with its "
                      "answer, more than the %zu bytes a request may hold (--max-request-memory)",
                      held, bytes, r->srv->cfg.limits.max_request_bytes);
    else
        status = kind_call(r, s, KIND_OP_MEMORY_GET, NULL, err);
    eng_session_unref(s);
    return status;
}

/* GET .../memory of a mixture, latent or pixel session: its memory as proto/memory form. */
static int sess_memory_get(http_req *r, eng_session *s, json_t *body, vbm_error *err)
{
    json_t *m = NULL;
    vbm_memory *mem = NULL;
    uint64_t version;
    vbm_status vst;

    (void)body;
    vst = eng_session_export(s, &mem, &version, err);
    if (vst != VBM_OK)
        return resp_status_of(vst);
    vst = wire_memory_to_json(mem, &m, err);
    vbm_memory_free(mem);
    if (vst != VBM_OK) {
        char why[VBM_MSG_LEN];

        memcpy(why, err->msg, sizeof why);
        return resp_fail(err, vst == VBM_ENOMEM ? 503 : 422, NULL, "cannot export: %s", why);
    }
    resp_etag(r, version);
    return resp_json(r, 200, m, err);
}

static int sess_memory_put(http_req *r, eng_session *s, json_t *body, vbm_error *err)
{
    int status;
    const http_limits *lim = &r->srv->cfg.limits;
    vbm_memory *mem = NULL;
    uint64_t version;
    int code_size;
    vbm_status st;
    vbm_status vst;

    if (json_is_string(json_object_get(body, "kind"))
        && strcmp(json_string_value(json_object_get(body, "kind")), "temporal") == 0) {
        json_decref(body);
        return resp_fail(err, 422, "kind",
                         "a temporal memory goes into a session of kind temporal");
    }
    vst = wire_memory_from_json(body, &mem, err);
    json_decref(body);
    if (vst != VBM_OK) {
        if (vst == VBM_ENOMEM)
            status = resp_fail(err, 503, NULL, "out of memory importing the memory");
        else
            status = 422;
        return status;
    }
    if (mem->cfg.code_size > lim->max_code_size) {
        status = resp_fail(err, 422, "memory.config.code_size", "code size %d exceeds the limit %d",
                           mem->cfg.code_size, lim->max_code_size);
        vbm_memory_free(mem);
        return status;
    }
    code_size = eng_session_code_size(s); /* fixed for a session with a model: its encoder's C */
    if (eng_session_model_name(s)[0] != '\0' && mem->cfg.code_size != code_size) {
        status = resp_fail(err, 422, "memory.config.code_size",
                           "code size %d: the session's model \"%s\" has code size %d",
                           mem->cfg.code_size, eng_session_model_name(s), code_size);
        vbm_memory_free(mem);
        return status;
    }
    if ((status =
             quota_admit(r, 0, eng_session_bytes(s), (double)eng_session_footprint(mem), 0, err))
        != 0) {
        vbm_memory_free(mem);
        return status;
    }
    st = eng_store_replace(r->srv->store, s, mem, sess_if_match(r), &version, err);
    if (st != VBM_OK) {
        vbm_memory_free(mem);
        return resp_status_of(st);
    }
    status = kind_respond_info(r, s, 200, err);
    return status;
}

/* ---- the routes of a session's operations, through its kind's table ------------------- */

const sess_kind kind_vb = {
    "mixture, latent and pixel sessions",
    sess_create,
    {
        [KIND_OP_EPISODES] = sess_episodes,
        [KIND_OP_RESIZE] = sess_resize,
        [KIND_OP_FORGET] = sess_forget,
        [KIND_OP_SAMPLES] = sess_samples,
        [KIND_OP_READS] = sess_reads,
        [KIND_OP_MEMORY_GET] = sess_memory_get,
        [KIND_OP_MEMORY_PUT] = sess_memory_put,
    },
    {
        [KIND_OP_INFER] = "infer is an operation of temporal sessions",
        [KIND_OP_CONTINUE] = "continue is an operation of temporal sessions",
    },
};

int route_episodes(http_req *r, vbm_error *err)
{
    return kind_dispatch(r, KIND_OP_EPISODES, 1, err);
}

int route_resize(http_req *r, vbm_error *err)
{
    return kind_dispatch(r, KIND_OP_RESIZE, 1, err);
}

int route_forget(http_req *r, vbm_error *err)
{
    return kind_dispatch(r, KIND_OP_FORGET, 1, err);
}

int route_samples(http_req *r, vbm_error *err)
{
    return kind_dispatch(r, KIND_OP_SAMPLES, 1, err);
}

int route_reads(http_req *r, vbm_error *err)
{
    return kind_dispatch(r, KIND_OP_READS, 1, err);
}

int route_memory_put(http_req *r, vbm_error *err)
{
    return kind_dispatch(r, KIND_OP_MEMORY_PUT, 1, err);
}

int route_temporal_infer(http_req *r, vbm_error *err)
{
    return kind_dispatch(r, KIND_OP_INFER, 1, err);
}

int route_temporal_continue(http_req *r, vbm_error *err)
{
    return kind_dispatch(r, KIND_OP_CONTINUE, 1, err);
}
