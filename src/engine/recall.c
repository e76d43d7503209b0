/* recall.c -- owns the iterative read of App. G.2 (encode, address and read, decode, repeat) under a session's read lock, and decoding codes into images. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#include "engine/recall.h"

#include <math.h>

#include "engine/cue.h"
#include "engine/fuse.h"
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

/* The views of a frame and the fusion of their codes (q->views > 1). */
typedef struct {
    int J;             /* views per frame (1: no fusion) */
    int first_only;    /* the first view's code instead of the fusion (eng_recall_opts) */
    double m0, v0;     /* the memory's code prior (eng_fuse_prior) */
    double *vmu, *vs2; /* (T J) x C: the views' codes (J > 1), else NULL */
} recall_views;

/* Encode T frames of J views each (x: T J images) into one code per frame, mu and s2
 * (T x C): the encoding itself for J = 1, else the RPM fusion of the views' encodings. */
static vbm_status recall_encode_views(const eng_model *m, nets_workspace *ws, const recall_views *v,
                                      const float *x, long T, double *mu, double *s2,
                                      vbm_error *err)
{
    vbm_status st;

    if (v->J <= 1)
        return recall_encode(m, ws, x, T, mu, s2, err);
    st = recall_encode(m, ws, x, T * v->J, v->vmu, v->vs2, err);
    if (st == VBM_OK && v->first_only) {
        size_t C = (size_t)m->info->code_size;

        for (long t = 0; t < T; t++) {
            memcpy(mu + (size_t)t * C, v->vmu + (size_t)t * (size_t)v->J * C, C * sizeof *mu);
            memcpy(s2 + (size_t)t * C, v->vs2 + (size_t)t * (size_t)v->J * C, C * sizeof *s2);
        }
        return VBM_OK;
    }
    if (st == VBM_OK)
        st = eng_fuse_codes(T, v->J, m->info->code_size, v->vmu, v->vs2, NULL, v->m0, v->v0,
                            "observations", 1, mu, s2, err);
    return st;
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

/* The read of a query without a mask in the sample or mean mode, with the read lock held:
 * each step reads its query (vbm_read in that mode), decodes, and the next step encodes
 * the result (App. G.2). mu/s2 are T x C scratch arrays. */
static vbm_status recall_plain(const vbm_memory *mem, const eng_model *m, nets_workspace *ws,
                               const recall_views *views, const eng_recall_query *q,
                               const eng_recall_opts *o, double *mu, double *s2,
                               eng_recall_out *out, vbm_error *err)
{
    size_t TC = (size_t)out->T * (size_t)out->C, TP = (size_t)out->T * (size_t)out->P;
    vbm_codes vc = {out->T, out->C, mu, s2};
    vbm_read_opts ro;
    vbm_error verr;
    vbm_status vst;
    vbm_status st = VBM_OK;
    double t0;
    int i;

    vbm_read_opts_default(&ro);
    ro.mode = o->mode == ENG_READ_MEAN ? VBM_READ_MEAN : VBM_READ_SAMPLE;
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
        st = recall_encode_views(m, ws, views, q->images, out->T, mu, s2, err);
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
        vst = vbm_read(mem, &vc, &ro, o->seed + (uint64_t)i, z,
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

/* The state of a read with a cue (recall mode, or a mask): the cue, the best candidate
 * code of every frame so far, and scratch for predictions. */
typedef struct {
    const vbm_memory *mem;
    const eng_model *m; /* the session's model, NULL for a latent session */
    int image_cue;      /* 1: the cue is images (P pixels); 0: codes (P = C), whose answers
                         * are decoded into images when there is a model */
    nets_workspace *ws;
    long T, P; /* frames; values per frame (pixels, or C) */
    int C;
    int J; /* views per frame: the cue's rows are T J (view j of frame t: t J + j) */
    const recall_views *views;
    eng_cue cue;
    double *cue_x;   /* (T J) x P: the cue as doubles (owned) */
    double *pm, *ps; /* T x P: predicted means and sds (ps: images only) */
    float *fm, *fs;  /* T x P: the decoder's output (images only) */
    double *best_z;  /* T x C: the best candidate code of each frame */
    double *best_lp; /* T: its score */
    double *cand;    /* T x C: one candidate per frame */
    double *sigma;   /* T J: the cue's noise per view at this step */
    double *ans;     /* T x P: the answer (the cue combined with the best) */
    double *vans;    /* (T J) x P: each view's answer (J > 1), else NULL */
    double sd_codes; /* latent: sd of a code value around a candidate (sigma_z) */
    eng_recall_out *out;
} recall_work;

static void rw_free(recall_work *w)
{
    free(w->cue_x);
    free(w->pm);
    free(w->ps);
    free(w->fm);
    free(w->fs);
    free(w->best_z);
    free(w->best_lp);
    free(w->cand);
    free(w->sigma);
    free(w->ans);
    free(w->vans);
}

static vbm_status rw_init(recall_work *w, const vbm_memory *mem, const eng_model *m,
                          nets_workspace *ws, const recall_views *views, const eng_recall_query *q,
                          const eng_recall_opts *o, eng_recall_out *out, vbm_error *err)
{
    int image_cue = q->images != NULL, J = image_cue ? views->J : 1;
    size_t TP = (size_t)out->T * (size_t)(image_cue ? out->P : out->C), i;
    size_t TC = (size_t)out->T * (size_t)out->C, TJP = TP * (size_t)J;

    memset(w, 0, sizeof *w);
    w->mem = mem;
    w->m = m;
    w->ws = ws;
    w->T = out->T;
    w->C = out->C;
    w->J = J;
    w->views = views;
    w->image_cue = image_cue;
    w->P = image_cue ? out->P : out->C;
    w->out = out;
    w->sd_codes = sqrt(mem->cfg.sigma_z2);
    w->cue_x = vbm_calloc(TJP, sizeof(double));
    if (J > 1)
        w->vans = vbm_calloc(TJP, sizeof(double));
    w->pm = vbm_calloc(TP, sizeof(double));
    w->ps = vbm_calloc(TP, sizeof(double));
    w->ans = vbm_calloc(TP, sizeof(double));
    if (image_cue) {
        w->fm = vbm_calloc(TP, sizeof(float));
        w->fs = vbm_calloc(TP, sizeof(float));
    }
    w->best_z = vbm_calloc(TC, sizeof(double));
    w->cand = vbm_calloc(TC, sizeof(double));
    w->best_lp = vbm_calloc((size_t)out->T, sizeof(double));
    w->sigma = vbm_calloc((size_t)out->T * (size_t)J, sizeof(double));
    if (w->cue_x == NULL || w->pm == NULL || w->ps == NULL || w->ans == NULL || w->best_z == NULL
        || w->cand == NULL || w->best_lp == NULL || w->sigma == NULL
        || (image_cue && (w->fm == NULL || w->fs == NULL)) || (J > 1 && w->vans == NULL)) {
        rw_free(w);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for a read of %ld frames", out->T);
    }
    for (i = 0; i < TJP; i++)
        w->cue_x[i] = image_cue ? (double)q->images[i] : q->codes->mu[i];
    w->cue.T = w->T * J;
    w->cue.P = w->P;
    w->cue.x = w->cue_x;
    w->cue.mask = o->mask;
    w->cue.bounded = image_cue;
    return VBM_OK;
}

/* The prediction of every frame's values from the codes z (T x C) into pm (and ps). */
static vbm_status rw_predict(recall_work *w, const double *z, vbm_error *err)
{
    size_t TP = (size_t)w->T * (size_t)w->P, i;
    vbm_error nerr;
    double t0, p;

    if (!w->image_cue) {
        memcpy(w->pm, z, TP * sizeof *w->pm);
        return VBM_OK;
    }
    t0 = eng_now();
    if (nets_decode_ws(w->m->net, w->ws, z, w->T, w->fm, w->fs, &nerr) != VBM_OK)
        return vbm_fail(err, nerr.status, NULL, "decoding: %s", nerr.msg);
    w->out->nets_s += eng_now() - t0;
    for (i = 0; i < TP; i++) {
        p = w->fm[i] < 0.0f ? 0.0 : w->fm[i] > 1.0f ? 1.0 : (double)w->fm[i];
        w->pm[i] = p;
        if (w->m->info->likelihood == NETS_GAUSSIAN)
            w->ps[i] = (double)w->fs[i];
        else /* bernoulli: the sd of a pixel with that probability, at least 1e-3 */
            w->ps[i] = fmax(sqrt(p * (1.0 - p)), 1e-3);
    }
    return VBM_OK;
}

static eng_cue_pred rw_pred(const recall_work *w, long t)
{
    eng_cue_pred pr;

    pr.mean = w->pm + (size_t)t * (size_t)w->P;
    pr.sd = w->image_cue ? w->ps + (size_t)t * (size_t)w->P : NULL;
    pr.sd_const = w->sd_codes;
    return pr;
}

/* Score the candidate codes in w->cand (one per frame) under the noise w->sigma and keep,
 * frame by frame, the better of it and the best so far. */
static vbm_status rw_score(recall_work *w, vbm_error *err)
{
    eng_cue_pred pr;
    double lp;
    long t;
    int j;
    vbm_status st = rw_predict(w, w->cand, err);

    if (st != VBM_OK)
        return st;
    for (t = 0; t < w->T; t++) {
        pr = rw_pred(w, t);
        lp = 0.0; /* the views are independent given the code: their likelihoods multiply */
        for (j = 0; j < w->J; j++)
            lp += eng_cue_loglik(&w->cue, t * w->J + j, &pr, w->sigma[t * w->J + j]);
        if (lp > w->best_lp[t]) {
            w->best_lp[t] = lp;
            memcpy(w->best_z + (size_t)t * (size_t)w->C, w->cand + (size_t)t * (size_t)w->C,
                   (size_t)w->C * sizeof(double));
        }
    }
    return VBM_OK;
}

/* The answer for the best codes: the cue's noise per frame (cue_noise, or estimated),
 * then the cue combined with the prediction, into w->ans. */
static vbm_status rw_answer(recall_work *w, double cue_noise, vbm_error *err)
{
    eng_cue_pred pr;
    long t, row;
    int j;
    vbm_status st = rw_predict(w, w->best_z, err);

    if (st != VBM_OK)
        return st;
    for (t = 0; t < w->T; t++) {
        pr = rw_pred(w, t);
        for (j = 0; j < w->J; j++) {
            row = t * w->J + j;
            w->sigma[row] =
                cue_noise >= 0.0 ? cue_noise : eng_cue_noise_estimate(&w->cue, row, &pr);
            if (w->J > 1) /* each view's own answer, the input of its code */
                eng_cue_combine(&w->cue, row, &pr, w->sigma[row],
                                w->vans + (size_t)row * (size_t)w->P);
        }
        eng_cue_combine_views(&w->cue, t * w->J, w->J, &pr, w->sigma + t * w->J,
                              w->ans + (size_t)t * (size_t)w->P);
    }
    return VBM_OK;
}

/* The first best codes of every frame, chosen without the cue's unknown values: the
 * cue's own code (its encoding, or the codes themselves) and 2 x candidates draws from
 * the memory (vbm_sample), scored on the known values. */
static vbm_status rw_start(recall_work *w, const eng_recall_query *q, const eng_recall_opts *o,
                           double *mu, double *s2, vbm_error *err)
{
    size_t TC = (size_t)w->T * (size_t)w->C;
    long U = 2L * (o->candidates > 0 ? o->candidates : 1), t, j;
    double *draws = vbm_calloc((size_t)U * TC, sizeof(double)), t0;
    vbm_error verr;
    vbm_status st;

    if (draws == NULL)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for %ld draws of %ld frames", U,
                        w->T);
    for (t = 0; t < w->T; t++)
        w->best_lp[t] = -HUGE_VAL;
    /* a known noise level, or a start for pixels (0.1) or codes (sigma_z) */
    for (t = 0; t < w->T * w->J; t++)
        w->sigma[t] = o->cue_noise >= 0.0 ? o->cue_noise : w->image_cue ? 0.1 : w->sd_codes;
    if (w->image_cue) {
        t0 = eng_now();
        st = recall_encode_views(w->m, w->ws, w->views, q->images, w->T, mu, s2, err);
        w->out->nets_s += eng_now() - t0;
        memcpy(w->cand, mu, TC * sizeof *mu);
    } else {
        memcpy(w->cand, q->codes->mu, TC * sizeof(double));
        st = VBM_OK;
    }
    if (st == VBM_OK)
        st = rw_score(w, err);
    if (st == VBM_OK) {
        t0 = eng_now();
        st = vbm_sample(w->mem, (long)((size_t)U * (size_t)w->T),
                        eng_derive_seed(o->seed, ENG_STREAM_START), -1, draws, NULL, &verr);
        w->out->read_s += eng_now() - t0;
        if (st != VBM_OK)
            st = vbm_fail(err, st, "query", "draws for the start: %s", verr.msg);
    }
    for (j = 0; st == VBM_OK && j < U; j++) {
        for (t = 0; t < w->T; t++)
            memcpy(w->cand + (size_t)t * (size_t)w->C,
                   draws + ((size_t)t * (size_t)U + (size_t)j) * (size_t)w->C,
                   (size_t)w->C * sizeof(double));
        st = rw_score(w, err);
    }
    free(draws);
    return st;
}

/* The query codes of a step from the answer w->ans: its encoding (images) or the answer
 * itself with the query's variances (codes). */
static vbm_status rw_query(recall_work *w, const eng_recall_query *q, float *xf, double *mu,
                           double *s2, vbm_error *err)
{
    size_t TP = (size_t)w->T * (size_t)w->P, TC = (size_t)w->T * (size_t)w->C, i;
    vbm_status st;
    double t0;

    if (!w->image_cue) {
        memcpy(mu, w->ans, TC * sizeof *mu);
        if (q->codes->s2 != NULL)
            memcpy(s2, q->codes->s2, TC * sizeof *s2);
        else
            memset(s2, 0, TC * sizeof *s2);
        return VBM_OK;
    }
    if (w->J > 1) /* the views' own answers, encoded and fused */
        for (i = 0; i < TP * (size_t)w->J; i++)
            xf[i] = (float)w->vans[i];
    else
        for (i = 0; i < TP; i++)
            xf[i] = (float)w->ans[i];
    t0 = eng_now();
    st = recall_encode_views(w->m, w->ws, w->views, xf, w->T, mu, s2, err);
    w->out->nets_s += eng_now() - t0;
    return st;
}

/* One read of the query (mu, s2) in mode into w->cand (addresses into addr when not
 * NULL). */
static vbm_status rw_read(recall_work *w, double *mu, double *s2, vbm_read_mode mode, uint64_t seed,
                          vbm_addresses *addr, int step, vbm_error *err)
{
    vbm_codes vc = {w->T, w->C, mu, s2};
    vbm_read_opts ro;
    vbm_error verr;
    vbm_status vst;
    double t0 = eng_now();

    vbm_read_opts_default(&ro);
    ro.mode = mode;
    vst = vbm_read(w->mem, &vc, &ro, seed, w->cand, addr, &verr);
    w->out->read_s += eng_now() - t0;
    if (vst != VBM_OK)
        return vbm_fail(err,
                        vst == VBM_ENOMEM     ? VBM_ENOMEM
                        : vst == VBM_ENUMERIC ? VBM_ENUMERIC
                                              : VBM_EINVAL,
                        "query", "read step %d: %s", step, verr.msg);
    return VBM_OK;
}

/* Write step i's output: the best codes and the answer's images (an image cue), or the
 * answer and, with a model, its decoded images (a code cue). */
static vbm_status rw_output(recall_work *w, const eng_recall_opts *o, int i, vbm_error *err)
{
    size_t TC = (size_t)w->T * (size_t)w->C, TP = (size_t)w->T * (size_t)w->out->P, k;
    float *x;
    vbm_status st = VBM_OK;
    double t0;

    if (!w->image_cue) {
        memcpy(w->out->z + (size_t)i * TC, w->ans, TC * sizeof(double));
        if (w->m != NULL) {
            t0 = eng_now();
            st = eng_model_decode_images(
                w->m, w->ws, w->ans, w->T, o->pixel_sample,
                eng_derive_seed(o->seed + (uint64_t)i, ENG_STREAM_STEP_PIXELS),
                w->out->x + (size_t)i * TP, err);
            w->out->nets_s += eng_now() - t0;
        }
        return st;
    }
    memcpy(w->out->z + (size_t)i * TC, w->best_z, TC * sizeof(double));
    x = w->out->x + (size_t)i * TP;
    for (k = 0; k < TP; k++)
        x[k] = (float)w->ans[k];
    return VBM_OK;
}

/* Whether any view of frame k / P knows its value k % P (k indexes the T x P answer). */
static int rw_known_any(const recall_work *w, size_t k)
{
    size_t P = (size_t)w->P, t = k / P, p = k % P;
    int j;

    for (j = 0; j < w->J; j++)
        if (w->cue.mask[(t * (size_t)w->J + (size_t)j) * P + p] != 0)
            return 1;
    return 0;
}

/* A read with a cue, with the read lock held. Recall mode: every step encodes the answer
 * so far, scores candidate codes -- the best so far, the query's own code, the mean read,
 * the most probable cluster's mean read and `candidates` sample reads -- on the cue's known
 * values, keeps the best, and answers with the cue combined with it. Sample and mean modes
 * with a mask: the same start, then every step reads in its mode, decodes, and keeps the
 * cue's known values. mu/s2 are T x C scratch arrays. */
static vbm_status recall_cue(const vbm_memory *mem, const eng_model *m, nets_workspace *ws,
                             const recall_views *views, const eng_recall_query *q,
                             const eng_recall_opts *o, double *mu, double *s2, eng_recall_out *out,
                             vbm_error *err)
{
    size_t TC = (size_t)out->T * (size_t)out->C, TP = (size_t)out->T * (size_t)out->P;
    float *xf = NULL;
    recall_work w;
    vbm_status st;
    double keep = o->mode == ENG_READ_RECALL ? o->cue_noise : 0.0;
    int i, j;

    st = rw_init(&w, mem, m, ws, views, q, o, out, err);
    if (st != VBM_OK)
        return st;
    if (w.image_cue) {
        xf = vbm_calloc(TP * (size_t)w.J, sizeof(float));
        if (xf == NULL) {
            rw_free(&w);
            return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for a read of %ld frames",
                            out->T);
        }
    }
    st = rw_start(&w, q, o, mu, s2, err);
    if (st == VBM_OK)
        st = rw_answer(&w, keep, err);
    for (i = 0; st == VBM_OK && i < o->steps; i++) {
        vbm_addresses *addr = out->addr != NULL ? &out->addr[i] : NULL;

        st = rw_query(&w, q, xf, mu, s2, err);
        if (st != VBM_OK)
            break;
        if (o->mode != ENG_READ_RECALL) {
            /* sample or mean mode with a mask: read, decode, keep the known values */
            st = rw_read(&w, mu, s2, o->mode == ENG_READ_MEAN ? VBM_READ_MEAN : VBM_READ_SAMPLE,
                         o->seed + (uint64_t)i, addr, i, err);
            if (st == VBM_OK)
                memcpy(w.best_z, w.cand, TC * sizeof(double));
            if (st == VBM_OK)
                st = rw_answer(&w, 0.0, err);
            if (st == VBM_OK && w.image_cue && o->pixel_sample) {
                /* the unknown pixels drawn from p(x | z) instead of its mean */
                st = eng_model_decode_images(
                    m, ws, w.best_z, out->T, 1,
                    eng_derive_seed(o->seed + (uint64_t)i, ENG_STREAM_STEP_PIXELS), xf, err);
                for (size_t k = 0; st == VBM_OK && k < TP; k++)
                    if (o->mask != NULL && !rw_known_any(&w, k))
                        w.ans[k] = (double)xf[k];
            }
            if (st == VBM_OK)
                st = rw_output(&w, o, i, err);
            continue;
        }
        /* recall: rescore the best so far under this step's noise, then the candidates */
        for (long t = 0; t < w.T; t++)
            w.best_lp[t] = -HUGE_VAL;
        memcpy(w.cand, w.best_z, TC * sizeof(double));
        st = rw_score(&w, err);
        if (st == VBM_OK) {
            memcpy(w.cand, mu, TC * sizeof(double));
            st = rw_score(&w, err);
        }
        if (st == VBM_OK)
            st = rw_read(&w, mu, s2, VBM_READ_MEAN, o->seed + (uint64_t)i, addr, i, err);
        if (st == VBM_OK)
            st = rw_score(&w, err);
        if (st == VBM_OK)
            st = rw_read(&w, mu, s2, VBM_READ_MEAN_MAP, o->seed + (uint64_t)i, NULL, i, err);
        if (st == VBM_OK)
            st = rw_score(&w, err);
        for (j = 0; st == VBM_OK && j < o->candidates; j++) {
            st =
                rw_read(&w, mu, s2, VBM_READ_SAMPLE,
                        eng_derive_seed(o->seed + (uint64_t)i, ENG_STREAM_CANDIDATES + (uint64_t)j),
                        NULL, i, err);
            if (st == VBM_OK)
                st = rw_score(&w, err);
        }
        if (st == VBM_OK)
            st = rw_answer(&w, keep, err);
        if (st == VBM_OK)
            st = rw_output(&w, o, i, err);
    }
    free(xf);
    rw_free(&w);
    return st;
}

vbm_status eng_recall_run(const vbm_memory *mem, const eng_model *m, const eng_recall_query *q,
                          const eng_recall_opts *o, eng_recall_out *out, vbm_error *err)
{
    nets_workspace *ws = NULL;
    double *mu = NULL, *s2 = NULL;
    long T = q->codes != NULL ? q->codes->T : q->T;
    recall_views views = {
        q->views > 1 ? q->views : 1, o->first_view_code != 0, 0.0, 1.0, NULL, NULL};
    vbm_status st;
    int C = mem->cfg.code_size;

    memset(out, 0, sizeof *out);
    if (q->views < 0 || q->views > ENG_FUSE_MAX_VIEWS)
        return vbm_fail(err, VBM_EINVAL, "views_per_frame", "must be in [1, %d], got %d",
                        ENG_FUSE_MAX_VIEWS, q->views);
    if (views.J > 1 && q->images == NULL)
        return vbm_fail(err, VBM_EINVAL, "views_per_frame",
                        "the engine fuses views of images; fuse codes with eng_fuse_codes");
    eng_fuse_prior(&mem->cfg, &views.m0, &views.v0);
    if (o->steps < 1 || o->steps > RECALL_MAX_STEPS)
        return vbm_fail(err, VBM_EINVAL, "iterations", "must be in [1, %d], got %d",
                        RECALL_MAX_STEPS, o->steps);
    if (m == NULL && q->images != NULL)
        return vbm_fail(err, VBM_EINVAL, "observations",
                        "a latent session reads codes, not images");
    if (o->mode != ENG_READ_SAMPLE && o->mode != ENG_READ_MEAN && o->mode != ENG_READ_RECALL)
        return vbm_fail(err, VBM_EINVAL, "mode", "unknown read mode %d", (int)o->mode);
    if (o->mode == ENG_READ_RECALL
        && (o->candidates < 1 || o->candidates > ENG_RECALL_MAX_CANDIDATES))
        return vbm_fail(err, VBM_EINVAL, "candidates", "must be in [1, %d], got %d",
                        ENG_RECALL_MAX_CANDIDATES, o->candidates);
    if (o->mask != NULL && q->images == NULL && q->codes == NULL)
        return vbm_fail(err, VBM_EINVAL, "mask",
                        "a read that starts from memory has no cue to mask: give a query");
    if (!(o->cue_noise < 0.0 || isfinite(o->cue_noise)))
        return vbm_fail(err, VBM_EINVAL, "cue_noise", "must be finite");
    if (T < 1)
        return vbm_fail(err, VBM_EINVAL, "count", "must be >= 1, got %ld", T);
    if (q->codes != NULL && q->codes->C != C)
        return vbm_fail(err, VBM_EINVAL, "query",
                        "the codes have %d columns, the memory's code size is %d", q->codes->C, C);
    if (m != NULL && m->info->code_size != C)
        return vbm_fail(err, VBM_EINVAL, "model",
                        "the model's code size %d differs from the memory's %d", m->info->code_size,
                        C);
    st = recall_alloc(out, m, T, C, q, o, err);
    if (st == VBM_OK) {
        mu = vbm_calloc((size_t)T * (size_t)C, sizeof *mu);
        s2 = vbm_calloc((size_t)T * (size_t)C, sizeof *s2);
        ws = m != NULL ? nets_workspace_new() : NULL;
        if (views.J > 1) {
            views.vmu = vbm_calloc((size_t)T * (size_t)views.J * (size_t)C, sizeof(double));
            views.vs2 = vbm_calloc((size_t)T * (size_t)views.J * (size_t)C, sizeof(double));
        }
        if (mu == NULL || s2 == NULL || (m != NULL && ws == NULL)
            || (views.J > 1 && (views.vmu == NULL || views.vs2 == NULL)))
            st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for a read of %ld frames", T);
    }
    if (st == VBM_OK) {
        if ((q->images != NULL || q->codes != NULL)
            && (o->mode == ENG_READ_RECALL || o->mask != NULL))
            st = recall_cue(mem, m, ws, &views, q, o, mu, s2, out, err);
        else
            st = recall_plain(mem, m, ws, &views, q, o, mu, s2, out, err);
    }
    free(views.vmu);
    free(views.vs2);
    nets_workspace_free(ws);
    free(mu);
    free(s2);
    if (st != VBM_OK)
        eng_recall_out_free(out);
    return st;
}

vbm_status eng_session_recall(eng_session *s, const eng_model *m, const eng_recall_query *q,
                              const eng_recall_opts *o, eng_recall_out *out, vbm_error *err)
{
    vbm_status st;
    uint64_t version;

    if (s->temporal)
        return vbm_fail(err, VBM_EINVAL, "kind",
                        "a temporal session reads by infer and continue, not reads");
    eng_session_rdlock(s);
    version = s->version;
    st = eng_recall_run(s->mem, m, q, o, out, err);
    eng_session_unlock(s);
    if (st == VBM_OK)
        out->version = version;
    return st;
}
