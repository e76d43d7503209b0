/* recall.c -- owns the iterative read of App. G.2 (encode, address and read, decode, repeat) under a session's read lock, and decoding codes into images. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#include "engine/recall.h"
#include "engine/session_impl.h"
#include "numerics/rng.h"

#define RECALL_MAX_STEPS 1000

uint64_t eng_derive_seed(uint64_t seed, uint64_t stream)
{
    rng_t r;

    rng_seed(&r, seed ^ (stream * 0x9E3779B97F4A7C15ULL));
    return rng_next(&r);
}

void eng_recall_out_free(eng_recall_out *out)
{
    int i;

    if (out == NULL)
        return;
    for (i = 0; out->addr != NULL && i < out->steps; i++)
        vbm_addresses_free(&out->addr[i]);
    free(out->addr);
    free(out->start_codes);
    free(out->start_images);
    free(out->z);
    free(out->x);
    memset(out, 0, sizeof *out);
}

vbm_status eng_model_decode_images(const eng_model *m, nets_workspace *ws, const double *z, long n,
                                   int pixel_sample, uint64_t seed, float *out, vbm_error *err)
{
    size_t count = (size_t)n * (size_t)eng_model_pixels(m), i;
    int gaussian = m->info->likelihood == NETS_GAUSSIAN;
    float *scale = NULL;
    vbm_error nerr;
    rng_t r;

    if (pixel_sample && gaussian) {
        scale = malloc(count * sizeof *scale);
        if (scale == NULL)
            return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory decoding %ld images", n);
    }
    /* the mean goes into out; a sample is drawn from it in place */
    if (nets_decode_ws(m->net, ws, z, n, out, scale, &nerr) != VBM_OK) {
        free(scale);
        return vbm_fail(err, nerr.status, NULL, "decoding: %s", nerr.msg);
    }
    if (pixel_sample) {
        rng_seed(&r, seed);
        nets_sample_pixels(m->net, out, scale, n, out, &r);
    } else {
        for (i = 0; i < count; i++)
            out[i] = out[i] < 0.0f ? 0.0f : out[i] > 1.0f ? 1.0f : out[i];
    }
    free(scale);
    return VBM_OK;
}

/* Encode T images into mu and s2 (T x C each). */
static vbm_status recall_encode(const eng_model *m, nets_workspace *ws, const float *x, long T,
                                double *mu, double *s2, vbm_error *err)
{
    vbm_error nerr;

    if (nets_encode_ws(m->net, ws, x, T, mu, s2, &nerr) != VBM_OK)
        return vbm_fail(err, nerr.status, "observations", "encoding: %s", nerr.msg);
    return VBM_OK;
}

/* Allocate the arrays of out for a recall of o->steps steps of T frames. */
static vbm_status recall_alloc(eng_recall_out *out, const eng_model *m, long T, int C,
                               const eng_recall_query *q, const eng_recall_opts *o, vbm_error *err)
{
    size_t TC = (size_t)T * (size_t)C, TP;

    out->T = T;
    out->C = C;
    out->P = m != NULL ? eng_model_pixels(m) : 0;
    out->steps = o->steps;
    TP = (size_t)T * (size_t)out->P;
    out->z = vbm_calloc((size_t)o->steps * TC, sizeof(double));
    if (m != NULL)
        out->x = vbm_calloc((size_t)o->steps * TP, sizeof(float));
    if (o->want_addresses)
        out->addr = calloc((size_t)o->steps, sizeof *out->addr);
    if (q->images == NULL && q->codes == NULL) {
        out->start_codes = vbm_calloc(TC, sizeof(double));
        if (m != NULL)
            out->start_images = vbm_calloc(TP, sizeof(float));
    }
    if (out->z == NULL || (m != NULL && out->x == NULL) || (o->want_addresses && out->addr == NULL)
        || (q->images == NULL && q->codes == NULL
            && (out->start_codes == NULL || (m != NULL && out->start_images == NULL)))) {
        eng_recall_out_free(out);
        return vbm_fail(err, VBM_ENOMEM, "iterations",
                        "out of memory for %d read steps of %ld "
                        "frames",
                        o->steps, T);
    }
    return VBM_OK;
}

/* The loop, with the read lock held. mu/s2 are T x C scratch arrays. */
static vbm_status recall_locked(const vbm_memory *mem, const eng_model *m, nets_workspace *ws,
                                const eng_recall_query *q, const eng_recall_opts *o, double *mu,
                                double *s2, eng_recall_out *out, vbm_error *err)
{
    size_t TC = (size_t)out->T * (size_t)out->C, TP = (size_t)out->T * (size_t)out->P;
    vbm_codes vc = {out->T, out->C, mu, s2};
    vbm_error verr;
    vbm_status vst;
    vbm_status st = VBM_OK;
    double t0;
    int i;

    verr.msg[0] = '\0';
    /* the input of step 0 */
    if (q->codes != NULL) {
        memcpy(mu, q->codes->mu, TC * sizeof *mu);
        if (q->codes->s2 != NULL)
            memcpy(s2, q->codes->s2, TC * sizeof *s2);
        else
            memset(s2, 0, TC * sizeof *s2);
    } else if (q->images != NULL) {
        t0 = eng_now();
        st = recall_encode(m, ws, q->images, out->T, mu, s2, err);
        out->nets_s += eng_now() - t0;
    } else {
        t0 = eng_now();
        vst = vbm_sample(mem, out->T, eng_derive_seed(o->seed, ENG_STREAM_START), -1,
                         out->start_codes, NULL, &verr);
        if (vst != VBM_OK)
            return vbm_fail(err, vst == VBM_ENOMEM ? VBM_ENOMEM : VBM_EINVAL, "count", "%s",
                            verr.msg);
        out->read_s += eng_now() - t0;
        if (m == NULL) {
            memcpy(mu, out->start_codes, TC * sizeof *mu);
            memset(s2, 0, TC * sizeof *s2);
        } else {
            t0 = eng_now();
            st = eng_model_decode_images(m, ws, out->start_codes, out->T, o->pixel_sample,
                                         eng_derive_seed(o->seed, ENG_STREAM_PIXELS),
                                         out->start_images, err);
            if (st == VBM_OK)
                st = recall_encode(m, ws, out->start_images, out->T, mu, s2, err);
            out->nets_s += eng_now() - t0;
        }
    }
    for (i = 0; st == VBM_OK && i < o->steps; i++) {
        double *z = out->z + (size_t)i * TC;

        t0 = eng_now();
        vst = vbm_read(mem, &vc, NULL, o->seed + (uint64_t)i, z,
                       out->addr != NULL ? &out->addr[i] : NULL, &verr);
        if (vst != VBM_OK)
            return vbm_fail(err,
                            vst == VBM_ENOMEM     ? VBM_ENOMEM
                            : vst == VBM_ENUMERIC ? VBM_ENUMERIC
                                                  : VBM_EINVAL,
                            "query", "read step %d: %s", i, verr.msg);
        out->read_s += eng_now() - t0;
        if (m == NULL) {
            memcpy(mu, z, TC * sizeof *mu); /* zero variances (s2) stay */
            continue;
        }
        t0 = eng_now();
        st = eng_model_decode_images(m, ws, z, out->T, o->pixel_sample,
                                     eng_derive_seed(o->seed + (uint64_t)i, ENG_STREAM_STEP_PIXELS),
                                     out->x + (size_t)i * TP, err);
        if (st == VBM_OK && i + 1 < o->steps)
            st = recall_encode(m, ws, out->x + (size_t)i * TP, out->T, mu, s2, err);
        out->nets_s += eng_now() - t0;
    }
    return st;
}

vbm_status eng_session_recall(eng_session *s, const eng_model *m, const eng_recall_query *q,
                              const eng_recall_opts *o, eng_recall_out *out, vbm_error *err)
{
    nets_workspace *ws = NULL;
    double *mu = NULL, *s2 = NULL;
    long T = q->codes != NULL ? q->codes->T : q->T;
    vbm_status st;
    int C;

    memset(out, 0, sizeof *out);
    if (o->steps < 1 || o->steps > RECALL_MAX_STEPS)
        return vbm_fail(err, VBM_EINVAL, "iterations", "must be in [1, %d], got %d",
                        RECALL_MAX_STEPS, o->steps);
    if (m == NULL && (q->images != NULL || q->codes != NULL))
        return vbm_fail(err, VBM_EINVAL, "observations",
                        "a latent session reads codes (eng_session_read), not images");
    if (T < 1)
        return vbm_fail(err, VBM_EINVAL, "count", "must be >= 1, got %ld", T);
    eng_session_rdlock(s);
    C = s->mem->cfg.code_size;
    if (q->codes != NULL && q->codes->C != C) {
        eng_session_unlock(s);
        return vbm_fail(err, VBM_EINVAL, "query",
                        "the codes have %d columns, the memory's code "
                        "size is %d",
                        q->codes->C, C);
    }
    if (m != NULL && m->info->code_size != C) {
        eng_session_unlock(s);
        return vbm_fail(err, VBM_EINVAL, "model",
                        "the model's code size %d differs from the "
                        "memory's %d",
                        m->info->code_size, C);
    }
    st = recall_alloc(out, m, T, C, q, o, err);
    if (st == VBM_OK) {
        mu = vbm_calloc((size_t)T * (size_t)C, sizeof *mu);
        s2 = vbm_calloc((size_t)T * (size_t)C, sizeof *s2);
        ws = m != NULL ? nets_workspace_new() : NULL;
        if (mu == NULL || s2 == NULL || (m != NULL && ws == NULL))
            st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for a read of %ld frames", T);
    }
    if (st == VBM_OK) {
        out->version = s->version;
        st = recall_locked(s->mem, m, ws, q, o, mu, s2, out, err);
    }
    eng_session_unlock(s);
    nets_workspace_free(ws);
    free(mu);
    free(s2);
    if (st != VBM_OK)
        eng_recall_out_free(out);
    return st;
}
