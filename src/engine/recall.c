/* recall.c -- owns the iterative read of App. G.2 (encode, address and read, decode, repeat) under
 * a session's read lock, and decoding codes into images. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#include "engine/recall.h"

#include <math.h>

#include "engine/cue.h"
#include "engine/fuse.h"
#include "engine/session_impl.h"
#include "nets/nets.h"
#include "numerics/linalg.h"
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
    free(out->familiarity);
    memset(out, 0, sizeof *out);
}

/* eng_model_decode_images with the networks' workspace ws (NULL: their own). */
static vbm_status recall_decode_images(const eng_model *m, nets_workspace *ws, const double *z,
                                       long n, int pixel_sample, uint64_t seed, float *out,
                                       vbm_error *err)
{
    size_t count = (size_t)n * (size_t)eng_model_pixels(m), i;
    int gaussian = m->info->likelihood == ENG_LIKELIHOOD_GAUSSIAN;
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

vbm_status eng_model_decode_images(const eng_model *m, const double *z, long n, int pixel_sample,
                                   uint64_t seed, float *out, vbm_error *err)
{
    return recall_decode_images(m, NULL, z, n, pixel_sample, seed, out, err);
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
 * the result (App. G.2). mu/s2 are T x C scratch arrays; fam_z (T x C) receives the codes
 * familiarity judges (step 0's input). */
static vbm_status recall_plain(const vbm_memory *mem, const eng_model *m, nets_workspace *ws,
                               const recall_views *views, const eng_recall_query *q,
                               const eng_recall_opts *o, double *mu, double *s2,
                               eng_recall_out *out, double *fam_z, vbm_error *err)
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
            st = recall_decode_images(m, ws, out->start_codes, out->T, o->pixel_sample,
                                      eng_derive_seed(o->seed, ENG_STREAM_PIXELS),
                                      out->start_images, err);
            if (st == VBM_OK)
                st = recall_encode(m, ws, out->start_images, out->T, mu, s2, err);
            out->nets_s += eng_now() - t0;
        }
    }
    if (st == VBM_OK) /* familiarity judges the codes of the read's input */
        memcpy(fam_z, mu, TC * sizeof *fam_z);
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
        st = recall_decode_images(m, ws, z, out->T, o->pixel_sample,
                                  eng_derive_seed(o->seed + (uint64_t)i, ENG_STREAM_STEP_PIXELS),
                                  out->x + (size_t)i * TP, err);
        if (st == VBM_OK && i + 1 < o->steps)
            st = recall_encode(m, ws, out->x + (size_t)i * TP, out->T, mu, s2, err);
        out->nets_s += eng_now() - t0;
    }
    return st;
}

/* ---- reads with a cue ------------------------------------------------------------------
 *
 * The state of a read with a cue (recall mode, or a mask): the cue; the best candidate code
 * of every frame so far with its score and its decoded prediction; the frame's routes, the
 * clusters of the memory whose item subspaces b_h + R_h^T w the read searches for the code
 * that explains the cue best; scratch for batches of candidates. */

#define RECALL_ROUTES 3 /* clusters refined per frame (recall mode, images) */
#define RECALL_OFFER_STEPS                                                                         \
    2                        /* steps whose query offers every cluster's item to the routes
                              * (the start does too) */
#define RECALL_MAX_ROWS 64   /* routes only for memories with at most this many rows */
#define RECALL_BATCH    1024 /* codes decoded at once */
#define RECALL_FD       1e-2 /* forward-difference step of the Jacobian, in units of w */
#define RECALL_LM_START 1.0  /* the damping of a new route */
#define RECALL_LM_DOWN  0.3  /* damping after an accepted step */
#define RECALL_LM_UP    10.0 /* after a rejected one */
#define RECALL_LM_MAX   1e8

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
    int clean; /* 1: the answer is the prediction (a mask's known values kept); 0: the cue
                * combined with the prediction (eng_recall_opts.blend) */
    eng_cue cue;
    double *cue_x;          /* (T J) x P: the cue as doubles (owned) */
    double *best_z;         /* T x C: the best candidate code of each frame */
    double *best_lp;        /* T: its score */
    float *best_m, *best_s; /* T x P: its prediction (images) */
    double *sigma;          /* T J: the cue's noise per view at this step */
    double *ans;            /* T x P: the answer */
    double *vans;           /* (T J) x P: each view's answer (J > 1), else NULL */
    double sd_codes;        /* latent: sd of a code value around a candidate (sigma_z) */
    double *pm, *ps;        /* P: one prediction as doubles */
    float *bm, *bs;         /* RECALL_BATCH x P: decoder output of a batch (images) */
    double *bll, *blp;      /* RECALL_BATCH: known values' log-likelihood, log p_mem */
    int L, K;               /* routes per frame (0: none); the memory's rows */
    int *rh;                /* T x L: cluster of each route (-1: none) */
    double *rw;             /* T x L x K: its weights w */
    double *rf;             /* T x L: its objective: log-likelihood - |w|^2 / 2 */
    double *rlam;           /* T x L: its damping */
    eng_recall_out *out;
} recall_work;

static void rw_free(recall_work *w)
{
    free(w->cue_x);
    free(w->best_z);
    free(w->best_lp);
    free(w->best_m);
    free(w->best_s);
    free(w->sigma);
    free(w->ans);
    free(w->vans);
    free(w->pm);
    free(w->ps);
    free(w->bm);
    free(w->bs);
    free(w->bll);
    free(w->blp);
    free(w->rh);
    free(w->rw);
    free(w->rf);
    free(w->rlam);
}

/* Whether the memory's items lie in subspaces a read can search: one group of clusters
 * (or one cluster) with Gaussian weights w ~ N(0, I) and few rows. */
static int rw_routes_supported(const vbm_memory *mem)
{
    const vbm_config *c = &mem->cfg;

    return c->groups == 1 && c->kind != VBM_CATEGORICAL && c->rows <= RECALL_MAX_ROWS;
}

static vbm_status rw_init(recall_work *w, const vbm_memory *mem, const eng_model *m,
                          nets_workspace *ws, const recall_views *views, const eng_recall_query *q,
                          const eng_recall_opts *o, eng_recall_out *out, vbm_error *err)
{
    int image_cue = q->images != NULL, J = image_cue ? views->J : 1;
    size_t P = (size_t)(image_cue ? out->P : out->C), T = (size_t)out->T;
    size_t TP = T * P, TC = T * (size_t)out->C, TJP = TP * (size_t)J, i;
    int routes = image_cue && o->mode == ENG_READ_RECALL && rw_routes_supported(mem);

    memset(w, 0, sizeof *w);
    w->mem = mem;
    w->m = m;
    w->ws = ws;
    w->T = out->T;
    w->C = out->C;
    w->J = J;
    w->views = views;
    w->image_cue = image_cue;
    w->P = (long)P;
    w->out = out;
    w->clean = !o->blend;
    w->sd_codes = sqrt(mem->cfg.sigma_z2);
    w->K = mem->cfg.rows;
    w->L = routes ? (mem->cfg.clusters < RECALL_ROUTES ? mem->cfg.clusters : RECALL_ROUTES) : 0;
    if (w->L > 0 && (long)w->L * (w->K + 1) > RECALL_BATCH)
        w->L = 0;
    w->cue_x = vbm_calloc(TJP, sizeof(double));
    if (J > 1)
        w->vans = vbm_calloc(TJP, sizeof(double));
    w->ans = vbm_calloc(TP, sizeof(double));
    w->pm = vbm_calloc(P, sizeof(double));
    w->ps = vbm_calloc(P, sizeof(double));
    w->best_z = vbm_calloc(TC, sizeof(double));
    w->best_lp = vbm_calloc(T, sizeof(double));
    w->sigma = vbm_calloc(T * (size_t)J, sizeof(double));
    w->bll = vbm_calloc(RECALL_BATCH, sizeof(double));
    w->blp = vbm_calloc(RECALL_BATCH, sizeof(double));
    if (image_cue) {
        w->best_m = vbm_calloc(TP, sizeof(float));
        w->best_s = vbm_calloc(TP, sizeof(float));
        w->bm = vbm_calloc((size_t)RECALL_BATCH * P, sizeof(float));
        w->bs = vbm_calloc((size_t)RECALL_BATCH * P, sizeof(float));
    }
    if (w->L > 0) {
        size_t TL = T * (size_t)w->L;

        w->rh = vbm_calloc(TL, sizeof(int));
        w->rw = vbm_calloc(TL * (size_t)w->K, sizeof(double));
        w->rf = vbm_calloc(TL, sizeof(double));
        w->rlam = vbm_calloc(TL, sizeof(double));
    }
    if (w->cue_x == NULL || w->ans == NULL || w->pm == NULL || w->ps == NULL || w->best_z == NULL
        || w->best_lp == NULL || w->sigma == NULL || w->bll == NULL || w->blp == NULL
        || (image_cue && (w->best_m == NULL || w->best_s == NULL || w->bm == NULL || w->bs == NULL))
        || (J > 1 && w->vans == NULL)
        || (w->L > 0 && (w->rh == NULL || w->rw == NULL || w->rf == NULL || w->rlam == NULL))) {
        rw_free(w);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for a read of %ld frames", out->T);
    }
    for (i = 0; i < TJP; i++)
        w->cue_x[i] = image_cue ? (double)q->images[i] : q->codes->mu[i];
    for (i = 0; i < T * (size_t)w->L; i++)
        w->rh[i] = -1;
    w->cue.T = w->T * J;
    w->cue.P = w->P;
    w->cue.x = w->cue_x;
    w->cue.mask = o->mask;
    w->cue.bounded = image_cue;
    return VBM_OK;
}

/* Decode n codes z into the batch buffers bm, bs (n <= RECALL_BATCH). */
static vbm_status rw_decode(recall_work *w, const double *z, long n, vbm_error *err)
{
    vbm_error nerr;
    double t0 = eng_now();

    if (nets_decode_ws(w->m->net, w->ws, z, n, w->bm, w->bs, &nerr) != VBM_OK)
        return vbm_fail(err, nerr.status, NULL, "decoding: %s", nerr.msg);
    w->out->nets_s += eng_now() - t0;
    return VBM_OK;
}

/* The prediction of one frame from a decoder output row (m, s: images) or a candidate
 * code (zc: codes), into w->pm / w->ps. */
static eng_cue_pred rw_pred_of(recall_work *w, const float *m, const float *s, const double *zc)
{
    eng_cue_pred pr;
    long i;
    double p;

    if (!w->image_cue) {
        pr.mean = zc;
        pr.sd = NULL;
        pr.sd_const = w->sd_codes;
        return pr;
    }
    for (i = 0; i < w->P; i++) {
        p = m[i] < 0.0f ? 0.0 : m[i] > 1.0f ? 1.0 : (double)m[i];
        w->pm[i] = p;
        if (w->m->info->likelihood == ENG_LIKELIHOOD_GAUSSIAN)
            w->ps[i] = (double)s[i];
        else /* bernoulli: the sd of a pixel with that probability, at least 1e-3 */
            w->ps[i] = fmax(sqrt(p * (1.0 - p)), 1e-3);
    }
    pr.mean = w->pm;
    pr.sd = w->ps;
    pr.sd_const = 0.0;
    return pr;
}

/* The log-likelihood of frame t's known values (every view; the views are independent
 * given the code) under a prediction. */
static double rw_frame_loglik(const recall_work *w, long t, const eng_cue_pred *pr)
{
    double lp = 0.0;

    for (int j = 0; j < w->J; j++)
        lp += eng_cue_loglik(&w->cue, t * w->J + j, pr, w->sigma[t * w->J + j]);
    return lp;
}

/* Score n candidate codes z (row r belongs to frame r / nc): ll[r] the known values'
 * log-likelihood, lp[r] the code's log density under the memory's predictive; when keep,
 * a candidate whose score ll + lp beats its frame's best becomes the best (its prediction
 * kept with it). ll and lp may be NULL. */
static vbm_status rw_eval(recall_work *w, const double *z, long n, long nc, double *ll, double *lp,
                          int keep, vbm_error *err)
{
    size_t C = (size_t)w->C, P = (size_t)w->P;
    vbm_status st = VBM_OK;
    vbm_error verr;

    for (long r0 = 0; st == VBM_OK && r0 < n; r0 += RECALL_BATCH) {
        long nb = n - r0 < RECALL_BATCH ? n - r0 : RECALL_BATCH;
        vbm_codes vc = {nb, w->C, z + (size_t)r0 * C, NULL};
        double t0 = eng_now();

        if (vbm_predictive_logpdf(w->mem, &vc, NULL, w->blp, &verr) != VBM_OK)
            return vbm_fail(err, verr.status, "query", "predictive: %s", verr.msg);
        w->out->read_s += eng_now() - t0;
        if (w->image_cue)
            st = rw_decode(w, vc.mu, nb, err);
        for (long b = 0; st == VBM_OK && b < nb; b++) {
            long r = r0 + b, t = r / nc;
            const double *zc = z + (size_t)r * C;
            eng_cue_pred pr = rw_pred_of(w, w->bm != NULL ? w->bm + (size_t)b * P : NULL,
                                         w->bs != NULL ? w->bs + (size_t)b * P : NULL, zc);
            double l = rw_frame_loglik(w, t, &pr);

            if (ll != NULL)
                ll[r] = l;
            if (lp != NULL)
                lp[r] = w->blp[b];
            if (keep && l + w->blp[b] > w->best_lp[t]) {
                w->best_lp[t] = l + w->blp[b];
                memcpy(w->best_z + (size_t)t * C, zc, C * sizeof(double));
                if (w->image_cue) {
                    memcpy(w->best_m + (size_t)t * P, w->bm + (size_t)b * P, P * sizeof(float));
                    memcpy(w->best_s + (size_t)t * P, w->bs + (size_t)b * P, P * sizeof(float));
                }
            }
        }
    }
    return st;
}

/* Consider nc candidate codes per frame (cand: (T nc) x C, frame-major). */
static vbm_status rw_consider(recall_work *w, const double *cand, long nc, vbm_error *err)
{
    return rw_eval(w, cand, w->T * nc, nc, NULL, NULL, 1, err);
}

/* Rescore every frame's best under this step's noise (its prediction is kept). */
static void rw_rescore_best(recall_work *w)
{
    size_t P = (size_t)w->P, C = (size_t)w->C;
    vbm_codes vc = {1, w->C, NULL, NULL};
    double lp;

    for (long t = 0; t < w->T; t++) {
        eng_cue_pred pr = rw_pred_of(w, w->best_m != NULL ? w->best_m + (size_t)t * P : NULL,
                                     w->best_s != NULL ? w->best_s + (size_t)t * P : NULL,
                                     w->best_z + (size_t)t * C);

        vc.mu = w->best_z + (size_t)t * C;
        if (vbm_predictive_logpdf(w->mem, &vc, NULL, &lp, NULL) != VBM_OK)
            lp = -HUGE_VAL;
        w->best_lp[t] = rw_frame_loglik(w, t, &pr) + lp;
    }
}

/* The answer for the best codes: the cue's noise per view (cue_noise, or estimated), then
 * per frame the prediction (clean; a mask's known values kept) or the cue combined with it
 * (blend), into w->ans (and each view's own answer into w->vans). */
static void rw_answer(recall_work *w, double cue_noise)
{
    size_t P = (size_t)w->P, C = (size_t)w->C;
    double zero[ENG_FUSE_MAX_VIEWS] = {0};
    long t, row;
    int j;

    for (t = 0; t < w->T; t++) {
        eng_cue_pred pr = rw_pred_of(w, w->best_m != NULL ? w->best_m + (size_t)t * P : NULL,
                                     w->best_s != NULL ? w->best_s + (size_t)t * P : NULL,
                                     w->best_z + (size_t)t * C);
        double *a = w->ans + (size_t)t * P;

        for (j = 0; j < w->J; j++) {
            row = t * w->J + j;
            w->sigma[row] =
                cue_noise >= 0.0 ? cue_noise : eng_cue_noise_estimate(&w->cue, row, &pr);
        }
        if (w->clean && w->cue.mask == NULL) { /* the prediction itself, every view alike */
            for (size_t p = 0; p < P; p++)
                a[p] = w->cue.bounded ? fmin(fmax(pr.mean[p], 0.0), 1.0) : pr.mean[p];
            for (j = 0; w->J > 1 && j < w->J; j++)
                memcpy(w->vans + (size_t)(t * w->J + j) * P, a, P * sizeof(double));
            continue;
        }
        for (j = 0; w->J > 1 && j < w->J; j++) {
            row = t * w->J + j;
            eng_cue_combine(&w->cue, row, &pr, w->clean ? 0.0 : w->sigma[row],
                            w->vans + (size_t)row * P);
        }
        eng_cue_combine_views(&w->cue, t * w->J, w->J, &pr, w->clean ? zero : w->sigma + t * w->J,
                              a);
    }
}

/* The first best codes of every frame, chosen on the cue's known values alone: the cue's
 * own code (its encoding, or the codes themselves) and 2 x candidates draws from the memory
 * (vbm_sample). mu/s2 receive the cue's own code. */
static vbm_status rw_start(recall_work *w, const eng_recall_query *q, const eng_recall_opts *o,
                           double *mu, double *s2, vbm_error *err)
{
    size_t TC = (size_t)w->T * (size_t)w->C;
    long U = 2L * (o->candidates > 0 ? o->candidates : 1), t;
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
    } else {
        memcpy(mu, q->codes->mu, TC * sizeof(double));
        memset(s2, 0, TC * sizeof(double));
        st = VBM_OK;
    }
    if (st == VBM_OK)
        st = rw_consider(w, mu, 1, err);
    if (st == VBM_OK) {
        t0 = eng_now();
        st = vbm_sample(w->mem, (long)((size_t)U * (size_t)w->T),
                        eng_derive_seed(o->seed, ENG_STREAM_START), -1, draws, NULL, &verr);
        w->out->read_s += eng_now() - t0;
        if (st != VBM_OK)
            st = vbm_fail(err, st, "query", "draws for the start: %s", verr.msg);
    }
    if (st == VBM_OK) /* draw j of frame t is row t U + j */
        st = rw_consider(w, draws, U, err);
    free(draws);
    return st;
}

/* The query codes of a step from the answer w->ans: its encoding (images) or the answer
 * itself (codes). */
static vbm_status rw_query(recall_work *w, float *xf, double *mu, double *s2, vbm_error *err)
{
    size_t TP = (size_t)w->T * (size_t)w->P, TC = (size_t)w->T * (size_t)w->C, i;
    vbm_status st;
    double t0;

    if (!w->image_cue) {
        memcpy(mu, w->ans, TC * sizeof *mu);
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

/* One read of the query (mu, s2) in mode into cand (addresses into addr when not NULL). */
static vbm_status rw_read(recall_work *w, double *mu, double *s2, vbm_read_mode mode, uint64_t seed,
                          double *cand, vbm_addresses *addr, int step, vbm_error *err)
{
    vbm_codes vc = {w->T, w->C, mu, s2};
    vbm_read_opts ro;
    vbm_error verr;
    vbm_status vst;
    double t0 = eng_now();

    vbm_read_opts_default(&ro);
    ro.mode = mode;
    vst = vbm_read(w->mem, &vc, &ro, seed, cand, addr, &verr);
    w->out->read_s += eng_now() - t0;
    if (vst != VBM_OK)
        return vbm_fail(err,
                        vst == VBM_ENOMEM     ? VBM_ENOMEM
                        : vst == VBM_ENUMERIC ? VBM_ENUMERIC
                                              : VBM_EINVAL,
                        "query", "read step %d: %s", step, verr.msg);
    return VBM_OK;
}

/* The code z = mu_b,h + R_h^T wv of cluster h (one group). */
static void rw_route_code(const recall_work *w, int h, const double *wv, double *z)
{
    const vbm_memory *mem = w->mem;
    int K = w->K, C = w->C;
    const double *R = mem->R + (size_t)h * (size_t)K * (size_t)C;

    for (int c = 0; c < C; c++)
        z[c] = mem->cfg.shift ? mem->mu_b[(size_t)h * C + c] : 0.0;
    for (int k = 0; k < K; k++)
        for (int c = 0; c < C; c++)
            z[c] += wv[k] * R[(size_t)k * C + c];
}

/* Offer cluster h with weights wv and objective f to frame t's routes: it replaces the
 * route of the same cluster when better, else the worst route when better than it. */
static void rw_route_offer(recall_work *w, long t, int h, const double *wv, double f)
{
    int L = w->L, K = w->K, slot = -1;
    size_t base = (size_t)t * (size_t)L;

    for (int l = 0; l < L && slot < 0; l++)
        if (w->rh[base + l] == h) {
            if (f <= w->rf[base + l])
                return;
            slot = l;
        }
    for (int l = 0; l < L && slot < 0; l++)
        if (w->rh[base + l] < 0)
            slot = l; /* an empty route */
    if (slot < 0) {   /* the worst route, when f beats it */
        slot = 0;
        for (int l = 1; l < L; l++)
            if (w->rf[base + l] < w->rf[base + slot])
                slot = l;
        if (f <= w->rf[base + slot])
            return;
    }
    w->rh[base + slot] = h;
    w->rf[base + slot] = f;
    w->rlam[base + slot] = RECALL_LM_START;
    memcpy(w->rw + (base + (size_t)slot) * (size_t)K, wv, (size_t)K * sizeof(double));
}

/* Address the query codes mu and offer every cluster's item for them (mu_b,h + R_h^T
 * E[w | s = h]) to the routes; each is also a candidate code. */
static vbm_status rw_routes_offer_all(recall_work *w, const double *mu, vbm_error *err)
{
    size_t C = (size_t)w->C;
    int H = w->mem->cfg.clusters, K = w->K;
    vbm_codes vc = {w->T, w->C, mu, NULL};
    vbm_addresses a = {0};
    vbm_error verr;
    double *z = NULL, *ll = NULL, t0 = eng_now();
    vbm_status st = vbm_address(w->mem, &vc, &a, &verr);

    w->out->read_s += eng_now() - t0;
    if (st != VBM_OK)
        return vbm_fail(err, st, "query", "addressing: %s", verr.msg);
    z = vbm_calloc((size_t)w->T * (size_t)H * C, sizeof(double));
    ll = vbm_calloc((size_t)w->T * (size_t)H, sizeof(double));
    if (z == NULL || ll == NULL)
        st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for the routes of %ld frames", w->T);
    for (long t = 0; st == VBM_OK && t < w->T; t++)
        for (int h = 0; h < H; h++)
            rw_route_code(w, h, a.w_mu + ((size_t)t * H + h) * K, z + ((size_t)t * H + h) * C);
    if (st == VBM_OK)
        st = rw_eval(w, z, w->T * H, H, ll, NULL, 1, err);
    for (long t = 0; st == VBM_OK && t < w->T; t++)
        for (int h = 0; h < H; h++) {
            const double *wv = a.w_mu + ((size_t)t * H + h) * K;

            rw_route_offer(w, t, h, wv, ll[(size_t)t * H + h] - 0.5 * la_dot(K, wv, wv));
        }
    free(z);
    free(ll);
    vbm_addresses_free(&a);
    return st;
}

/* One damped Gauss-Newton (Levenberg-Marquardt) step of every route: the maximum of
 * log p(known values | decode(mu_b,h + R_h^T w)) - |w|^2 / 2 over w, with the Jacobian of
 * the decoder's mean by forward differences (K decodes) and the decoder's variances held
 * at the route's current code; the step is taken when it raises the objective (the damping
 * then falls), else the damping rises. Every trial is a candidate code. */
static vbm_status rw_routes_step(recall_work *w, vbm_error *err)
{
    int L = w->L, K = w->K, K1 = K + 1;
    size_t C = (size_t)w->C, P = (size_t)w->P, TL = (size_t)w->T * (size_t)L;
    long F = RECALL_BATCH / (L * K1);
    double *z = vbm_calloc((size_t)RECALL_BATCH * C, sizeof(double));
    double *tw = vbm_calloc(TL * (size_t)K, sizeof(double));
    double *tz = vbm_calloc(TL * C, sizeof(double));
    double *ll = vbm_calloc(TL, sizeof(double));
    double *A = vbm_calloc((size_t)K * K, sizeof(double)),
           *g = vbm_calloc((size_t)K, sizeof(double));
    vbm_status st = VBM_OK;

    if (z == NULL || tw == NULL || tz == NULL || ll == NULL || A == NULL || g == NULL)
        st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for the routes of %ld frames", w->T);
    for (long t0 = 0; st == VBM_OK && t0 < w->T; t0 += F) {
        long nf = w->T - t0 < F ? w->T - t0 : F;

        /* rows (f L + l) K1 + 0: the route's code; + 1 + k: w + fd e_k */
        for (long f = 0; f < nf; f++)
            for (int l = 0; l < L; l++) {
                size_t rt = (size_t)(t0 + f) * L + l;
                double *zr = z + ((size_t)f * L + l) * K1 * C;
                int h = w->rh[rt] >= 0 ? w->rh[rt] : 0;

                rw_route_code(w, h, w->rw + rt * K, zr);
                for (int k = 0; k < K; k++) {
                    const double *R = w->mem->R + ((size_t)h * K + k) * C;

                    for (size_t c = 0; c < C; c++)
                        zr[(size_t)(k + 1) * C + c] = zr[c] + RECALL_FD * R[c];
                }
            }
        st = rw_decode(w, z, nf * L * K1, err);
        for (long f = 0; st == VBM_OK && f < nf; f++)
            for (int l = 0; l < L; l++) {
                size_t rt = (size_t)(t0 + f) * L + l, row = ((size_t)f * L + l) * K1;
                const float *m0 = w->bm + row * P, *s0 = w->bs + row * P;
                const double *wv = w->rw + rt * K;
                double *dw = tw + rt * K;
                long t = t0 + f;

                memset(A, 0, (size_t)K * K * sizeof *A);
                for (int k = 0; k < K; k++)
                    g[k] = -wv[k];
                for (int j = 0; j < w->J; j++) {
                    long crow = t * w->J + j;
                    const double *x = w->cue.x + (size_t)crow * P;
                    const unsigned char *mk =
                        w->cue.mask != NULL ? w->cue.mask + (size_t)crow * P : NULL;
                    double sg2 = w->sigma[crow] * w->sigma[crow];

                    for (size_t p = 0; p < P; p++) {
                        double m = m0[p] < 0.0f ? 0.0 : m0[p] > 1.0f ? 1.0 : (double)m0[p];
                        double sd = w->m->info->likelihood == ENG_LIKELIHOOD_GAUSSIAN
                                        ? (double)s0[p]
                                        : fmax(sqrt(m * (1.0 - m)), 1e-3);
                        double d, r, jk;

                        if (mk != NULL && mk[p] == 0)
                            continue;
                        d = 1.0 / fmax(sd * sd + sg2, 1e-12);
                        r = x[p] - (double)m0[p];
                        for (int k = 0; k < K; k++) {
                            jk = ((double)w->bm[(row + 1 + (size_t)k) * P + p] - (double)m0[p])
                                 / RECALL_FD;
                            g[k] += jk * d * r;
                            for (int k2 = 0; k2 <= k; k2++)
                                A[k * K + k2] += jk * d
                                                 * ((double)w->bm[(row + 1 + (size_t)k2) * P + p]
                                                    - (double)m0[p])
                                                 / RECALL_FD;
                        }
                    }
                }
                for (int k = 0; k < K; k++)
                    A[k * K + k] += (1.0 + w->rlam[rt]);
                if (w->rh[rt] < 0 || la_chol(K, A) != 0 || la_chol_solve(K, 1, A, g, 1) != 0) {
                    memcpy(dw, wv, (size_t)K * sizeof *dw); /* no step */
                    continue;
                }
                for (int k = 0; k < K; k++)
                    dw[k] = wv[k] + g[k];
            }
    }
    for (size_t rt = 0; st == VBM_OK && rt < TL; rt++)
        rw_route_code(w, w->rh[rt] >= 0 ? w->rh[rt] : 0, tw + rt * K, tz + rt * C);
    if (st == VBM_OK)
        st = rw_eval(w, tz, (long)TL, L, ll, NULL, 1, err);
    for (size_t rt = 0; st == VBM_OK && rt < TL; rt++) {
        double f = ll[rt] - 0.5 * la_dot(K, tw + rt * K, tw + rt * K);

        if (w->rh[rt] < 0)
            continue;
        if (f > w->rf[rt]) {
            w->rf[rt] = f;
            memcpy(w->rw + rt * K, tw + rt * K, (size_t)K * sizeof(double));
            w->rlam[rt] *= RECALL_LM_DOWN;
        } else if (w->rlam[rt] < RECALL_LM_MAX) {
            w->rlam[rt] *= RECALL_LM_UP;
        }
    }
    free(z);
    free(tw);
    free(tz);
    free(ll);
    free(A);
    free(g);
    return st;
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
            st =
                recall_decode_images(w->m, w->ws, w->ans, w->T, o->pixel_sample,
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

/* The frames' codes that familiarity judges, into fz (T x C): the code of the cue completed
 * by the read -- the encoding of the answer (a mask: known values kept, the rest read), else
 * the cue's own code (cue_mu). */
static vbm_status rw_familiar_codes(recall_work *w, float *xf, const double *cue_mu, double *fz,
                                    double *s2, vbm_error *err)
{
    if (w->cue.mask == NULL) {
        memcpy(fz, cue_mu, (size_t)w->T * (size_t)w->C * sizeof(double));
        return VBM_OK;
    }
    return rw_query(w, xf, fz, s2, err);
}

/* A read with a cue, with the read lock held. Recall mode: the start (the cue's own code and
 * draws from memory, scored on the known values, and every cluster's item for the cue's
 * code offered to the routes); then every step encodes the answer so far, offers every
 * cluster's item for that code to the routes (the first RECALL_OFFER_STEPS steps), takes one damped
 * Gauss-Newton step of each route within its cluster's item subspace, scores these codes,
 * the query's own code, the mean and mode reads and `candidates` sample reads by the
 * likelihood of the cue's known values plus the code's log density under the memory's
 * predictive, keeps the best, and answers with its prediction (clean) or the cue combined
 * with it (blend). Sample and mean modes with a mask: the same start, then every step reads
 * in its mode, decodes, and keeps the cue's known values. mu/s2 are T x C scratch arrays;
 * fam_z (T x C) receives the codes familiarity judges. */
static vbm_status recall_cue(const vbm_memory *mem, const eng_model *m, nets_workspace *ws,
                             const recall_views *views, const eng_recall_query *q,
                             const eng_recall_opts *o, double *mu, double *s2, eng_recall_out *out,
                             double *fam_z, vbm_error *err)
{
    size_t TC = (size_t)out->T * (size_t)out->C, TP = (size_t)out->T * (size_t)out->P;
    long U = o->candidates > 0 ? o->candidates : 1;
    float *xf = NULL;
    double *cand = NULL, *cue_mu = NULL;
    recall_work w;
    vbm_status st;
    double keep = o->mode == ENG_READ_RECALL ? o->cue_noise : 0.0;
    int i, j;

    st = rw_init(&w, mem, m, ws, views, q, o, out, err);
    if (st != VBM_OK)
        return st;
    if (o->mode != ENG_READ_RECALL)
        w.clean = 0; /* sample and mean modes keep the known values exactly, as before */
    cand = vbm_calloc(TC * (size_t)(U > 2 ? U : 2), sizeof(double));
    cue_mu = vbm_calloc(TC, sizeof(double));
    if (w.image_cue)
        xf = vbm_calloc(TP * (size_t)w.J, sizeof(float));
    if (cand == NULL || cue_mu == NULL || (w.image_cue && xf == NULL)) {
        free(cand);
        free(cue_mu);
        free(xf);
        rw_free(&w);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for a read of %ld frames", out->T);
    }
    st = rw_start(&w, q, o, mu, s2, err);
    if (st == VBM_OK)
        memcpy(cue_mu, mu, TC * sizeof(double));
    if (st == VBM_OK && w.L > 0)
        st = rw_routes_offer_all(&w, mu, err);
    if (st == VBM_OK && !w.image_cue && o->mask != NULL) {
        /* a code cue with a mask: its unknown values completed by the predictive */
        vbm_codes vc = {w.T, w.C, q->codes->mu, NULL};
        vbm_error verr;

        st = vbm_predictive_complete(mem, &vc, o->mask, cand, &verr);
        if (st != VBM_OK)
            st = vbm_fail(err, st, "query", "completing the query: %s", verr.msg);
        else
            st = rw_consider(&w, cand, 1, err);
    }
    if (st == VBM_OK)
        rw_answer(&w, keep);
    for (i = 0; st == VBM_OK && i < o->steps; i++) {
        vbm_addresses *addr = out->addr != NULL ? &out->addr[i] : NULL;

        st = rw_query(&w, xf, mu, s2, err);
        if (st != VBM_OK)
            break;
        if (o->mode != ENG_READ_RECALL) {
            /* sample or mean mode with a mask: read, decode, keep the known values */
            st = rw_read(&w, mu, s2, o->mode == ENG_READ_MEAN ? VBM_READ_MEAN : VBM_READ_SAMPLE,
                         o->seed + (uint64_t)i, w.best_z, addr, i, err);
            if (st == VBM_OK && w.image_cue) {
                for (long b0 = 0; st == VBM_OK && b0 < w.T; b0 += RECALL_BATCH) {
                    long nb = w.T - b0 < RECALL_BATCH ? w.T - b0 : RECALL_BATCH;

                    st = rw_decode(&w, w.best_z + (size_t)b0 * w.C, nb, err);
                    if (st == VBM_OK) {
                        memcpy(w.best_m + (size_t)b0 * w.P, w.bm, (size_t)nb * w.P * sizeof(float));
                        memcpy(w.best_s + (size_t)b0 * w.P, w.bs, (size_t)nb * w.P * sizeof(float));
                    }
                }
            }
            if (st == VBM_OK)
                rw_answer(&w, 0.0);
            if (st == VBM_OK && w.image_cue && o->pixel_sample) {
                /* the unknown pixels drawn from p(x | z) instead of its mean */
                st = recall_decode_images(
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
        /* recall: the best so far under this step's noise, the query's own code, every
         * cluster's item for it offered to the routes, one step of the routes, the mean and
         * mode reads and `candidates` sample reads */
        rw_rescore_best(&w);
        st = rw_consider(&w, mu, 1, err);
        if (st == VBM_OK && w.L > 0 && i < RECALL_OFFER_STEPS)
            st = rw_routes_offer_all(&w, mu, err);
        if (st == VBM_OK && w.L > 0)
            st = rw_routes_step(&w, err);
        if (st == VBM_OK)
            st = rw_read(&w, mu, s2, VBM_READ_MEAN, o->seed + (uint64_t)i, cand, addr, i, err);
        if (st == VBM_OK)
            st = rw_read(&w, mu, s2, VBM_READ_MEAN_MAP, o->seed + (uint64_t)i, cand + TC, NULL, i,
                         err);
        if (st == VBM_OK) {
            /* interleave the two reads: frame t's rows 2t, 2t + 1 */
            double *pair = vbm_calloc(2 * TC, sizeof(double));

            if (pair == NULL) {
                st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for a read of %ld frames",
                              out->T);
                break;
            }
            for (long t = 0; t < w.T; t++) {
                memcpy(pair + (size_t)(2 * t) * w.C, cand + (size_t)t * w.C,
                       (size_t)w.C * sizeof(double));
                memcpy(pair + (size_t)(2 * t + 1) * w.C, cand + TC + (size_t)t * w.C,
                       (size_t)w.C * sizeof(double));
            }
            st = rw_consider(&w, pair, 2, err);
            free(pair);
        }
        for (j = 0; st == VBM_OK && j < o->candidates; j++) {
            st =
                rw_read(&w, mu, s2, VBM_READ_SAMPLE,
                        eng_derive_seed(o->seed + (uint64_t)i, ENG_STREAM_CANDIDATES + (uint64_t)j),
                        cand, NULL, i, err);
            if (st == VBM_OK)
                st = rw_consider(&w, cand, 1, err);
        }
        if (st == VBM_OK)
            rw_answer(&w, keep);
        if (st == VBM_OK)
            st = rw_output(&w, o, i, err);
    }
    if (st == VBM_OK)
        st = rw_familiar_codes(&w, xf, cue_mu, fam_z, s2, err);
    free(cand);
    free(cue_mu);
    free(xf);
    rw_free(&w);
    return st;
}

/* Familiarity of every frame from the codes z (T x C) it judges: -|z - zhat|^2 / (2
 * sigma_z^2 n), zhat the memory's reconstruction of z (the mean read of its most probable
 * cluster), over the n known dimensions of a code cue's mask (every dimension otherwise):
 * 0 when the memory holds z exactly, more negative the worse it explains it, in units of
 * the memory's own observation noise per dimension. Into out->familiarity (T values). */
static vbm_status recall_familiarity(const vbm_memory *mem, const double *z, long T,
                                     const unsigned char *mask, eng_recall_out *out, vbm_error *err)
{
    size_t C = (size_t)mem->cfg.code_size;
    vbm_codes vc = {T, (int)C, z, NULL};
    vbm_read_opts ro;
    vbm_error verr;
    double *zh = vbm_calloc((size_t)T * C, sizeof(double)), t0 = eng_now();
    vbm_status st;

    out->familiarity = vbm_calloc((size_t)T, sizeof(double));
    if (zh == NULL || out->familiarity == NULL) {
        free(zh);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for the familiarity of %ld frames",
                        T);
    }
    vbm_read_opts_default(&ro);
    ro.mode = VBM_READ_MEAN_MAP;
    st = vbm_read(mem, &vc, &ro, 0, zh, NULL, &verr);
    out->read_s += eng_now() - t0;
    if (st != VBM_OK) {
        free(zh);
        return vbm_fail(err, st, "query", "familiarity: %s", verr.msg);
    }
    for (long t = 0; t < T; t++) {
        double d2 = 0.0, d;
        long n = 0;

        for (size_t c = 0; c < C; c++) {
            if (mask != NULL && mask[(size_t)t * C + c] == 0)
                continue;
            d = z[(size_t)t * C + c] - zh[(size_t)t * C + c];
            d2 += d * d;
            n++;
        }
        out->familiarity[t] = n > 0 ? -d2 / (2.0 * mem->cfg.sigma_z2 * (double)n) : 0.0;
    }
    free(zh);
    return VBM_OK;
}

/* out->stopped_at: the first step from which every later step answers the same codes and
 * images, bit for bit. */
static void recall_stopped_at(eng_recall_out *out)
{
    size_t TC = (size_t)out->T * (size_t)out->C, TP = (size_t)out->T * (size_t)out->P;
    int i = out->steps - 1;

    while (i > 0
           && memcmp(out->z + (size_t)(i - 1) * TC, out->z + (size_t)i * TC, TC * sizeof(double))
                  == 0
           && (out->x == NULL
               || memcmp(out->x + (size_t)(i - 1) * TP, out->x + (size_t)i * TP, TP * sizeof(float))
                      == 0))
        i--;
    out->stopped_at = i;
}

vbm_status eng_recall_run(const vbm_memory *mem, const eng_model *m, const eng_recall_query *q,
                          const eng_recall_opts *o, eng_recall_out *out, vbm_error *err)
{
    nets_workspace *ws = NULL;
    double *mu = NULL, *s2 = NULL, *fam_z = NULL;
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
        fam_z = vbm_calloc((size_t)T * (size_t)C, sizeof *fam_z);
        ws = m != NULL ? nets_workspace_new() : NULL;
        if (views.J > 1) {
            views.vmu = vbm_calloc((size_t)T * (size_t)views.J * (size_t)C, sizeof(double));
            views.vs2 = vbm_calloc((size_t)T * (size_t)views.J * (size_t)C, sizeof(double));
        }
        if (mu == NULL || s2 == NULL || fam_z == NULL || (m != NULL && ws == NULL)
            || (views.J > 1 && (views.vmu == NULL || views.vs2 == NULL)))
            st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for a read of %ld frames", T);
    }
    if (st == VBM_OK) {
        if ((q->images != NULL || q->codes != NULL)
            && (o->mode == ENG_READ_RECALL || o->mask != NULL))
            st = recall_cue(mem, m, ws, &views, q, o, mu, s2, out, fam_z, err);
        else
            st = recall_plain(mem, m, ws, &views, q, o, mu, s2, out, fam_z, err);
    }
    if (st == VBM_OK)
        st = recall_familiarity(mem, fam_z, T, q->codes != NULL ? o->mask : NULL, out, err);
    if (st == VBM_OK)
        recall_stopped_at(out);
    free(views.vmu);
    free(views.vs2);
    nets_workspace_free(ws);
    free(mu);
    free(s2);
    free(fam_z);
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
