/* session_forget.c -- owns the forget operation of a session: cues encoded with the session's model
 * (images) or taken as given (codes), vbm_forget through the locked write path of session.c, and
 * the per-cue answer (item, distance, clusters). */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/session_impl.h"
#include "engine/session_temporal.h"

void eng_forget_out_free(eng_forget_out *out)
{
    if (out == NULL)
        return;
    eng_fit_out_free(&out->fit);
    free(out->item);
    free(out->distance);
    free(out->clusters);
    memset(out, 0, sizeof *out);
}

/* Encode the T images of q with model m into codes c (mu and s2 malloc'd, T x C). */
static vbm_status forget_encode(const eng_model *m, const eng_forget_query *q, vbm_codes *c,
                                double **mu, double **s2, vbm_error *err)
{
    size_t TC = (size_t)q->T * (size_t)m->info->code_size;
    vbm_status st;

    *mu = malloc(TC * sizeof **mu);
    *s2 = malloc(TC * sizeof **s2);
    if (*mu == NULL || *s2 == NULL) {
        free(*mu);
        free(*s2);
        *mu = *s2 = NULL;
        return vbm_fail(err, VBM_ENOMEM, "observations", "out of memory encoding %ld images", q->T);
    }
    st = eng_model_encode(m, q->images, q->T, "observations", *mu, *s2, err);
    if (st != VBM_OK) {
        free(*mu);
        free(*s2);
        *mu = *s2 = NULL;
        return st;
    }
    c->T = q->T;
    c->C = m->info->code_size;
    c->mu = *mu;
    c->s2 = *s2;
    return VBM_OK;
}

/* A failure about the cues ("codes", "codes.mu[i][j]" ...) of an image forget names the
 * images instead ("observations"). */
static void forget_rename_field(vbm_error *err)
{
    char msg[VBM_MSG_LEN];
    size_t n = strlen(err->field);

    if (strncmp(err->field, "codes", 5) != 0)
        return;
    /* msg is "FIELD: text" (vbm_error's invariant) */
    snprintf(msg, sizeof msg, "%s",
             strncmp(err->msg, err->field, n) == 0 && err->msg[n] == ':' ? err->msg + n + 2
                                                                         : err->msg);
    vbm_fail(err, err->status, "observations", "%s (their encoded codes)", msg);
}

vbm_status eng_session_forget(eng_session *s, const eng_model *m, const eng_forget_query *q,
                              const eng_fit_opts *opts, eng_forget_out *out, vbm_error *err)
{
    vbm_forget_result res;
    vbm_codes enc;
    double *mu = NULL, *s2 = NULL, t0;
    const vbm_codes *cues = q->codes;
    vbm_status st;
    long i;
    int g, h, G, H;

    memset(out, 0, sizeof *out);
    if (eng_session_is_temporal(s))
        return vbm_fail(err, VBM_EINVAL, "kind",
                        "a temporal session cannot forget (only the memory kinds of codes can)");
    if (q->images != NULL) {
        if (m == NULL || m->net == NULL)
            return vbm_fail(err, VBM_EINVAL, "observations",
                            "this is a latent session (no model): forget by codes");
        if (strcmp(m->name, eng_session_model_name(s)) != 0)
            return vbm_fail(err, VBM_EINVAL, "observations",
                            "model \"%s\" is not the session's (\"%s\")", m->name,
                            eng_session_model_name(s));
        t0 = eng_now();
        st = forget_encode(m, q, &enc, &mu, &s2, err);
        out->encode_s = eng_now() - t0;
        if (st != VBM_OK)
            return st;
        cues = &enc;
    } else if (cues == NULL) {
        return vbm_fail(err, VBM_EINVAL, "codes", "missing (or observations)");
    }
    st = eng_session_forget_codes(s, cues, opts, &out->fit, &res, err);
    free(mu);
    free(s2);
    if (st != VBM_OK) {
        if (q->images != NULL && err != NULL)
            forget_rename_field(err);
        return st;
    }
    G = res.addr.G;
    H = res.addr.H;
    out->exact = res.exact;
    out->n = res.n;
    out->groups = G;
    out->item = res.item;
    out->distance = res.distance;
    res.item = NULL;
    res.distance = NULL;
    out->clusters = malloc((size_t)(res.n > 0 ? res.n : 1) * (size_t)G * sizeof *out->clusters);
    if (out->clusters == NULL) {
        /* the forget is done and durable: answer without the clusters */
        vbm_forget_result_free(&res);
        return VBM_OK;
    }
    for (i = 0; i < res.n; i++)
        for (g = 0; g < G; g++) {
            const double *sg = res.addr.s + ((size_t)i * G + g) * H;
            int best = 0;

            for (h = 1; h < H; h++)
                if (sg[h] > sg[best])
                    best = h;
            out->clusters[i * G + g] = best;
        }
    vbm_forget_result_free(&res);
    return VBM_OK;
}
