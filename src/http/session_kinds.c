/* session_kinds.c -- owns the dispatch of session operations through the table of the
 * session's kind (http/session_kinds.h) and the steps every kind shares. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <string.h>

#include "http/codec.h"
#include "http/quota.h"
#include "http/respond.h"
#include "engine/session_temporal.h"
#include "http/session_kinds.h"

const sess_kind *kind_of(const eng_session *s)
{
    return eng_session_is_temporal(s) ? &kind_temporal : &kind_vb;
}

const sess_kind *kind_requested(const json_t *body)
{
    const json_t *mem = json_object_get(body, "memory");
    const json_t *k = json_is_object(mem) ? json_object_get(mem, "kind") : NULL;

    return json_is_string(k) && strcmp(json_string_value(k), "temporal") == 0 ? &kind_temporal
                                                                              : &kind_vb;
}

int kind_call(http_req *r, eng_session *s, kind_op op, json_t *body, vbm_error *err)
{
    const sess_kind *k = kind_of(s);

    if (k->op[op] == NULL) {
        json_decref(body);
        return resp_fail(err, 422, "kind", "%s", k->refusal[op]);
    }
    return k->op[op](r, s, body, err);
}

int kind_dispatch(http_req *r, kind_op op, int with_body, vbm_error *err)
{
    eng_session *s;
    json_t *body = NULL;
    int status = resp_session(r, &s, err);

    if (status != 0)
        return status;
    if (with_body)
        status = resp_body_object(r, &body, err);
    if (status == 0)
        status = kind_call(r, s, op, body, err);
    eng_session_unref(s);
    return status;
}

vbm_status kind_pick_model(http_req *r, const json_t *body, int use_default, eng_model **m,
                           vbm_error *err)
{
    eng_models *reg = r->srv->cfg.models;
    const json_t *v = json_object_get(body, "model");
    const char *dflt = reg != NULL && use_default ? eng_models_default_name(reg) : "";
    vbm_status st;

    *m = NULL;
    if (v == NULL && (json_object_get(body, "code_size") != NULL || dflt[0] == '\0'))
        return VBM_OK;
    if (v != NULL && !json_is_string(v))
        return vbm_fail(err, VBM_EINVAL, "model", "expected the name of a hosted model");
    if (reg == NULL)
        return vbm_fail(err, VBM_EINVAL, "model", "no models are hosted");
    st = eng_models_get(reg, v != NULL ? json_string_value(v) : dflt, m, err);
    if (st == VBM_ENOTFOUND && v == NULL)
        return vbm_fail(err, VBM_EINVAL, "model",
                        "the default model \"%s\" is not hosted (see GET /v1/models); "
                        "name a model, or give \"code_size\" for a latent session",
                        dflt);
    if (st != VBM_OK) {
        char why[VBM_MSG_LEN];

        snprintf(why, sizeof why, "%s", vbm_error_text(err));
        return vbm_fail(err, st == VBM_ENOTFOUND ? VBM_EINVAL : st, "model", "%s", why);
    }
    if ((*m)->info->code_size > r->srv->cfg.limits.max_code_size) {
        vbm_fail(err, VBM_EINVAL, "model", "its code size %d exceeds the limit %d",
                 (*m)->info->code_size, r->srv->cfg.limits.max_code_size);
        eng_model_unref(*m);
        *m = NULL;
        return VBM_EINVAL;
    }
    return VBM_OK;
}

int kind_insert(http_req *r, double bytes, eng_model *m,
                vbm_status (*make)(const void *ctx, const unsigned char *owner, eng_session **s,
                                   vbm_error *err),
                const void *ctx, vbm_error *err)
{
    eng_session *s = NULL;
    vbm_status st;
    int status;

    quota_lock(r); /* the key's quota check and the insert, together */
    status = quota_admit(r, 1, 0, bytes, 0, err);
    if (status != 0) {
        quota_unlock(r);
        return status;
    }
    st = make(ctx, r->owner, &s, err);
    if (st == VBM_OK) {
        eng_session_set_model(s, m);
        st = eng_store_insert(r->srv->store, s, 0, err);
    }
    quota_unlock(r);
    if (st != VBM_OK) {
        eng_session_unref(s);
        if (st == VBM_EINVAL && err->field[0] == '\0') {
            vbm_error_rebase(err, "memory");
            return 422;
        }
        return resp_status_of(st);
    }
    snprintf(r->resp.location, sizeof r->resp.location, "/v1/sessions/%s", eng_session_id(s));
    status = kind_respond_info(r, s, 201, err);
    eng_session_unref(s);
    return status;
}

int kind_respond_info(http_req *r, eng_session *s, int status, vbm_error *err)
{
    eng_info info;
    vbm_status st = eng_session_info(s, &info, err);

    if (st != VBM_OK)
        return resp_status_of(st);
    resp_etag(r, info.version);
    status = resp_json(r, status, codec_info(&info), err);
    eng_info_free(&info);
    return status;
}
