/* recall_eval.c -- owns the measurement of recall on the bundled model: episodes, damaged cues, the
 * answers of each read method, and their scores. */
#define _POSIX_C_SOURCE 200809L

#include "recall_eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "engine/fuse.h"
#include "engine/hosted.h"
#include "engine/recall.h"
#include "nets/nets.h"
#include "numerics/rng.h"
#include "vbmem/vbmem.h"

#define REVAL_T    64
#define REVAL_P    784
#define REVAL_SIDE 28

const char *reval_cue_name(reval_cue c)
{
    static const char *const names[REVAL_CUES] = {
        "top", "bottom", "left", "right", "noise 0.2", "noise 0.35", "top + noise 0.2"};
    return c >= 0 && c < REVAL_CUES ? names[c] : "?";
}

static double reval_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int reval_load_images(const char *path, reval_data *d)
{
    gzFile f = gzopen(path, "rb");
    unsigned char hdr[16];
    long n;

    if (f == NULL)
        return -1;
    if (gzread(f, hdr, 16) != 16 || hdr[2] != 0x08 || hdr[3] != 3 || hdr[11] != REVAL_SIDE
        || hdr[15] != REVAL_SIDE) {
        gzclose(f);
        return -1;
    }
    n = ((long)hdr[4] << 24) | ((long)hdr[5] << 16) | ((long)hdr[6] << 8) | (long)hdr[7];
    d->images = malloc((size_t)n * REVAL_P);
    if (n < 2 * REVAL_T || d->images == NULL
        || gzread(f, d->images, (unsigned)(n * REVAL_P)) != (int)(n * REVAL_P)) {
        gzclose(f);
        return -1;
    }
    gzclose(f);
    d->n = n;
    return 0;
}

/* The model registry of the file's directory and the model named by its stem. */
static int reval_load_model(const char *model_path, reval_data *d)
{
    char dir[4096], name[256];
    const char *slash = strrchr(model_path, '/'), *base = slash != NULL ? slash + 1 : model_path;
    size_t dl = slash != NULL ? (size_t)(slash - model_path) : 0, bl = strlen(base);
    vbm_error err;

    if (dl >= sizeof dir || bl < 13 || bl - 12 >= sizeof name
        || strcmp(base + bl - 12, ".safetensors") != 0)
        return -1;
    memcpy(dir, dl > 0 ? model_path : ".", dl > 0 ? dl : 1);
    dir[dl > 0 ? dl : 1] = '\0';
    memcpy(name, base, bl - 12);
    name[bl - 12] = '\0';
    if (eng_models_create(dir, name, &d->reg, &err) != VBM_OK
        || eng_models_get(d->reg, name, &d->m, &err) != VBM_OK) {
        fprintf(stderr, "recall_eval: %s\n", err.msg);
        return -1;
    }
    return 0;
}

void reval_episode(const reval_data *d, rng_t *rng, float *x)
{
    long idx[REVAL_T];
    int t, u, dup;

    for (t = 0; t < REVAL_T; t++) {
        do {
            idx[t] = (long)rng_below(rng, (uint64_t)d->n);
            for (dup = 0, u = 0; u < t; u++)
                dup |= idx[u] == idx[t];
        } while (dup);
        for (u = 0; u < REVAL_P; u++)
            x[t * REVAL_P + u] = ((float)d->images[idx[t] * REVAL_P + u] + 0.5f) / 256.0f;
    }
}

int reval_data_load(const char *model_path, const char *fmnist_gz, reval_data *d)
{
    memset(d, 0, sizeof *d);
    if (reval_load_images(fmnist_gz, d) != 0 || reval_load_model(model_path, d) != 0) {
        fprintf(stderr, "recall_eval: cannot load %s or %s\n", fmnist_gz, model_path);
        reval_data_free(d);
        return -1;
    }
    return 0;
}

void reval_data_free(reval_data *d)
{
    eng_model_unref(d->m);
    eng_models_free(d->reg);
    free(d->images);
    memset(d, 0, sizeof *d);
}

/* The cue of kind c for the originals x: cue values (unknown ones 0) and the mask (1 =
 * known); *masked says whether the read is given the mask. */
static void reval_make_cue(reval_cue c, const float *x, rng_t *rng, float *cue, unsigned char *mask,
                           int *masked)
{
    double sd = c == REVAL_NOISE20 || c == REVAL_TOP_NOISE20 ? 0.2
                : c == REVAL_NOISE35                         ? 0.35
                                                             : 0.0;
    int t, r, col, known;
    double v;

    *masked = c != REVAL_NOISE20 && c != REVAL_NOISE35;
    for (t = 0; t < REVAL_T; t++)
        for (r = 0; r < REVAL_SIDE; r++)
            for (col = 0; col < REVAL_SIDE; col++) {
                size_t i = (size_t)t * REVAL_P + (size_t)r * REVAL_SIDE + (size_t)col;

                known = c == REVAL_TOP || c == REVAL_TOP_NOISE20 ? r >= REVAL_SIDE / 2
                        : c == REVAL_BOTTOM                      ? r < REVAL_SIDE / 2
                        : c == REVAL_LEFT                        ? col >= REVAL_SIDE / 2
                        : c == REVAL_RIGHT                       ? col < REVAL_SIDE / 2
                                                                 : 1;
                v = x[i];
                if (sd > 0.0)
                    v = fmin(1.0, fmax(0.0, v + sd * rng_normal(rng)));
                mask[i] = (unsigned char)known;
                cue[i] = known ? (float)v : 0.0f;
            }
}

static double reval_dist2(const float *a, const float *b)
{
    double s = 0.0, d;
    int p;

    for (p = 0; p < REVAL_P; p++) {
        d = (double)a[p] - (double)b[p];
        s += d * d;
    }
    return s;
}

/* Adds to *hits the answers in y (T images) nearest to their own original in x, and to
 * *se their squared errors. */
static void reval_score(const float *y, const float *x, double *hits, double *se)
{
    int i, t, arg;
    double best, d;

    for (i = 0; i < REVAL_T; i++) {
        best = INFINITY;
        arg = -1;
        for (t = 0; t < REVAL_T; t++) {
            d = reval_dist2(y + (size_t)i * REVAL_P, x + (size_t)t * REVAL_P);
            if (d < best) {
                best = d;
                arg = t;
            }
        }
        *hits += arg == i;
        *se += reval_dist2(y + (size_t)i * REVAL_P, x + (size_t)i * REVAL_P);
    }
}

static int reval_decode(const eng_model *m, const double *z, float *out)
{
    vbm_error err;
    int i;

    if (nets_decode(m->net, z, REVAL_T, out, NULL, &err) != VBM_OK) {
        fprintf(stderr, "recall_eval: %s\n", err.msg);
        return -1;
    }
    for (i = 0; i < REVAL_T * REVAL_P; i++)
        out[i] = fminf(1.0f, fmaxf(0.0f, out[i]));
    return 0;
}

/* One read of the cue in mode; the last step's images into y; with dump (not NULL) the
 * originals x, the cues and every step's images are written there. */
static int reval_read(const vbm_memory *mem, const eng_model *m, const float *cue,
                      const unsigned char *mask, eng_read_mode mode, double cue_noise,
                      const reval_opts *o, uint64_t seed, float *y, double *seconds,
                      const char *dump, const float *x)
{
    eng_recall_query q;
    eng_recall_opts ro;
    eng_recall_out out;
    vbm_error err;
    double t0 = reval_now();

    memset(&q, 0, sizeof q);
    memset(&ro, 0, sizeof ro);
    q.images = cue;
    q.T = REVAL_T;
    ro.steps = o->steps;
    ro.seed = seed;
    ro.mode = mode;
    ro.candidates = o->candidates;
    ro.cue_noise = cue_noise;
    ro.mask = mask;
    if (eng_recall_run(mem, m, &q, &ro, &out, &err) != VBM_OK) {
        fprintf(stderr, "recall_eval: read: %s\n", err.msg);
        return -1;
    }
    memcpy(y, out.x + (size_t)(o->steps - 1) * REVAL_T * REVAL_P,
           sizeof(float) * REVAL_T * REVAL_P);
    if (dump != NULL) {
        FILE *f = fopen(dump, "wb");
        size_t TP = (size_t)REVAL_T * REVAL_P;
        int ok = f != NULL && fwrite(x, sizeof(float), TP, f) == TP
                 && fwrite(cue, sizeof(float), TP, f) == TP
                 && fwrite(out.x, sizeof(float), TP * (size_t)o->steps, f) == TP * (size_t)o->steps;

        if (f != NULL)
            ok = fclose(f) == 0 && ok;
        if (!ok)
            fprintf(stderr, "recall_eval: cannot write %s\n", dump);
    }
    eng_recall_out_free(&out);
    if (seconds != NULL)
        *seconds += reval_now() - t0;
    return 0;
}

int reval_run(const char *model_path, const char *fmnist_gz, reval_cue c, const reval_opts *o,
              reval_result *out)
{
    reval_data d;
    size_t TP = (size_t)REVAL_T * REVAL_P;
    float *x = malloc(TP * sizeof *x), *cue = malloc(TP * sizeof *cue), *y = malloc(TP * sizeof *y);
    unsigned char *mask = malloc(TP);
    double *mu = NULL, *s2 = NULL, *cmu = NULL, *cs2 = NULL, *z = NULL;
    double h_rec = 0, h_mean = 0, h_samp = 0, h_ed = 0, h_or = 0, h_cue = 0;
    double e_rec = 0, e_ed = 0, e_cue = 0, e_junk = 0, secs = 0;
    int rc = -1, e, masked, C = 0, t, u, arg;
    vbm_error err;

    memset(&d, 0, sizeof d);
    if (x == NULL || cue == NULL || y == NULL || mask == NULL
        || reval_load_images(fmnist_gz, &d) != 0 || reval_load_model(model_path, &d) != 0) {
        fprintf(stderr, "recall_eval: cannot load %s or %s\n", fmnist_gz, model_path);
        goto done;
    }
    C = d.m->info->code_size;
    mu = malloc(sizeof(double) * REVAL_T * (size_t)C);
    s2 = malloc(sizeof(double) * REVAL_T * (size_t)C);
    cmu = malloc(sizeof(double) * REVAL_T * (size_t)C);
    cs2 = malloc(sizeof(double) * REVAL_T * (size_t)C);
    z = malloc(sizeof(double) * REVAL_T * (size_t)C);
    if (mu == NULL || s2 == NULL || cmu == NULL || cs2 == NULL || z == NULL)
        goto done;
    for (e = 0; e < o->episodes; e++) {
        vbm_config cfg;
        vbm_memory *mem = NULL;
        vbm_write_opts wo;
        vbm_write_result res;
        vbm_codes codes = {REVAL_T, C, mu, s2};
        rng_t rng;
        uint64_t es = o->seed + 1000 * (uint64_t)e;
        double best, dd;

        rng_seed(&rng, es);
        reval_episode(&d, &rng, x);
        reval_make_cue(c, x, &rng, cue, mask, &masked);
        eng_model_config(d.m, &cfg);
        if (nets_encode(d.m->net, x, REVAL_T, mu, s2, &err) != VBM_OK
            || nets_encode(d.m->net, cue, REVAL_T, cmu, cs2, &err) != VBM_OK
            || vbm_memory_create(&cfg, NULL, NULL, &mem, &err) != VBM_OK) {
            fprintf(stderr, "recall_eval: %s\n", err.msg);
            goto done;
        }
        vbm_write_opts_default(&wo);
        wo.max_iter = d.m->info->iterations;
        wo.seed = es + 1;
        if (vbm_write(mem, &codes, &wo, &res, &err) != VBM_OK) {
            fprintf(stderr, "recall_eval: write: %s\n", err.msg);
            vbm_memory_free(mem);
            goto done;
        }
        vbm_write_result_free(&res);
        /* the reads: with a mask the known pixels are exact (cue_noise 0) unless the cue
         * is also noisy; without one the noise is estimated */
        if (reval_read(mem, d.m, cue, masked ? mask : NULL, ENG_READ_RECALL,
                       masked && c != REVAL_TOP_NOISE20 ? 0.0 : -1.0, o, es + 2, y, &secs,
                       e == 0 ? o->dump : NULL, x)
            != 0) {
            vbm_memory_free(mem);
            goto done;
        }
        reval_score(y, x, &h_rec, &e_rec);
        if (o->sample_modes) {
            int bad = reval_read(mem, d.m, cue, masked ? mask : NULL, ENG_READ_MEAN, 0.0, o, es + 2,
                                 y, NULL, NULL, x);

            if (bad == 0)
                reval_score(y, x, &h_mean, &e_junk);
            if (bad == 0)
                bad = reval_read(mem, d.m, cue, masked ? mask : NULL, ENG_READ_SAMPLE, 0.0, o,
                                 es + 2, y, NULL, NULL, x);
            if (bad != 0) {
                vbm_memory_free(mem);
                goto done;
            }
            reval_score(y, x, &h_samp, &e_junk);
        }
        vbm_memory_free(mem);
        /* encode-decode of the cue */
        if (reval_decode(d.m, cmu, y) != 0)
            goto done;
        reval_score(y, x, &h_ed, &e_ed);
        /* the oracle: the stored code nearest to the cue's code */
        for (t = 0; t < REVAL_T; t++) {
            best = INFINITY;
            arg = 0;
            for (u = 0; u < REVAL_T; u++) {
                dd = 0.0;
                for (int k = 0; k < C; k++) {
                    double q = cmu[(size_t)t * C + k] - mu[(size_t)u * C + k];
                    dd += q * q;
                }
                if (dd < best) {
                    best = dd;
                    arg = u;
                }
            }
            memcpy(z + (size_t)t * C, mu + (size_t)arg * C, sizeof(double) * (size_t)C);
        }
        if (reval_decode(d.m, z, y) != 0)
            goto done;
        reval_score(y, x, &h_or, &e_junk);
        reval_score(cue, x, &h_cue, &e_cue);
    }
    {
        double n = (double)o->episodes * REVAL_T;

        out->recall = h_rec / n;
        out->mean = o->sample_modes ? h_mean / n : NAN;
        out->sample = o->sample_modes ? h_samp / n : NAN;
        out->encdec = h_ed / n;
        out->oracle = h_or / n;
        out->cue = h_cue / n;
        out->chance = 1.0 / REVAL_T;
        out->mse_recall = e_rec / (n * REVAL_P);
        out->mse_encdec = e_ed / (n * REVAL_P);
        out->mse_cue = e_cue / (n * REVAL_P);
        out->seconds_recall = secs;
    }
    rc = 0;
done:
    eng_model_unref(d.m);
    eng_models_free(d.reg);
    free(d.images);
    free(x);
    free(cue);
    free(y);
    free(mask);
    free(mu);
    free(s2);
    free(cmu);
    free(cs2);
    free(z);
    return rc;
}

const char *reval_views_cue_name(reval_views_cue c)
{
    static const char *const names[REVAL_VIEWS_CUES] = {"crop 14x14", "noise 0.5"};
    return c >= 0 && c < REVAL_VIEWS_CUES ? names[c] : "?";
}

/* REVAL_MAX_VIEWS damaged views of each original, view-major: view v of frame t at
 * (v * T + t) * P. */
static void reval_make_views(reval_views_cue c, const float *x, rng_t *rng, float *views,
                             unsigned char *masks)
{
    int v, t, r, col, r0, c0;

    for (v = 0; v < REVAL_MAX_VIEWS; v++)
        for (t = 0; t < REVAL_T; t++) {
            size_t o = ((size_t)v * REVAL_T + (size_t)t) * REVAL_P;

            r0 = (int)rng_below(rng, REVAL_SIDE - 14 + 1);
            c0 = (int)rng_below(rng, REVAL_SIDE - 14 + 1);
            for (r = 0; r < REVAL_SIDE; r++)
                for (col = 0; col < REVAL_SIDE; col++) {
                    size_t i = (size_t)r * REVAL_SIDE + (size_t)col;
                    double val = x[(size_t)t * REVAL_P + i];
                    int known = 1;

                    if (c == REVAL_VIEWS_CROP)
                        known = r >= r0 && r < r0 + 14 && col >= c0 && col < c0 + 14;
                    else
                        val = fmin(1.0, fmax(0.0, val + 0.5 * rng_normal(rng)));
                    masks[o + i] = (unsigned char)known;
                    views[o + i] = known ? (float)val : 0.0f;
                }
        }
}

int reval_views_run(const char *model_path, const char *fmnist_gz, reval_views_cue c, const int *Js,
                    int nJ, const reval_opts *o, reval_views_result *out)
{
    reval_data d;
    size_t TP = (size_t)REVAL_T * REVAL_P, VTP = TP * REVAL_MAX_VIEWS;
    float *x = malloc(TP * sizeof *x), *y = malloc(TP * sizeof *y);
    float *views = malloc(VTP * sizeof *views), *q = malloc(VTP * sizeof *q);
    unsigned char *masks = malloc(VTP), *qm = malloc(VTP);
    double *mu = NULL, *s2 = NULL, *vmu = NULL, *vs2 = NULL, *fmu = NULL, *fs2 = NULL;
    double hits[REVAL_MAX_VIEWS] = {0}, hf[REVAL_MAX_VIEWS] = {0}, hm[REVAL_MAX_VIEWS] = {0};
    double se[REVAL_MAX_VIEWS] = {0}, secs[REVAL_MAX_VIEWS] = {0}, junk = 0.0, m0, v0;
    int rc = -1, e, a, J, C = 0, t, j, k;
    vbm_error err;

    memset(&d, 0, sizeof d);
    if (x == NULL || y == NULL || views == NULL || q == NULL || masks == NULL || qm == NULL
        || nJ < 1 || nJ > REVAL_MAX_VIEWS || reval_load_images(fmnist_gz, &d) != 0
        || reval_load_model(model_path, &d) != 0) {
        fprintf(stderr, "recall_eval: cannot load %s or %s\n", fmnist_gz, model_path);
        goto done;
    }
    C = d.m->info->code_size;
    mu = malloc(sizeof(double) * REVAL_T * (size_t)C);
    s2 = malloc(sizeof(double) * REVAL_T * (size_t)C);
    fmu = malloc(sizeof(double) * REVAL_T * (size_t)C);
    fs2 = malloc(sizeof(double) * REVAL_T * (size_t)C);
    vmu = malloc(sizeof(double) * REVAL_T * REVAL_MAX_VIEWS * (size_t)C);
    vs2 = malloc(sizeof(double) * REVAL_T * REVAL_MAX_VIEWS * (size_t)C);
    if (mu == NULL || s2 == NULL || fmu == NULL || fs2 == NULL || vmu == NULL || vs2 == NULL)
        goto done;
    for (e = 0; e < o->episodes; e++) {
        vbm_config cfg;
        vbm_memory *mem = NULL;
        vbm_write_opts wo;
        vbm_write_result res;
        vbm_codes codes = {REVAL_T, C, mu, s2};
        rng_t rng;
        uint64_t es = o->seed + 1000 * (uint64_t)e;

        rng_seed(&rng, es);
        reval_episode(&d, &rng, x);
        reval_make_views(c, x, &rng, views, masks);
        eng_model_config(d.m, &cfg);
        if (nets_encode(d.m->net, x, REVAL_T, mu, s2, &err) != VBM_OK
            || vbm_memory_create(&cfg, NULL, NULL, &mem, &err) != VBM_OK) {
            fprintf(stderr, "recall_eval: %s\n", err.msg);
            goto done;
        }
        vbm_write_opts_default(&wo);
        wo.max_iter = d.m->info->iterations;
        wo.seed = es + 1;
        if (vbm_write(mem, &codes, &wo, &res, &err) != VBM_OK) {
            fprintf(stderr, "recall_eval: write: %s\n", err.msg);
            vbm_memory_free(mem);
            goto done;
        }
        vbm_write_result_free(&res);
        eng_fuse_prior(&mem->cfg, &m0, &v0);
        for (a = 0; a < nJ; a++) {
            eng_recall_query rq;
            eng_recall_opts ro;
            eng_recall_out ans;
            double t0 = reval_now();

            J = Js[a];
            /* frame-major: view j of frame t is row t J + j */
            for (t = 0; t < REVAL_T; t++)
                for (j = 0; j < J; j++) {
                    size_t src = ((size_t)j * REVAL_T + (size_t)t) * REVAL_P;
                    size_t dst = ((size_t)t * (size_t)J + (size_t)j) * REVAL_P;

                    memcpy(q + dst, views + src, REVAL_P * sizeof *q);
                    memcpy(qm + dst, masks + src, REVAL_P);
                }
            memset(&rq, 0, sizeof rq);
            memset(&ro, 0, sizeof ro);
            rq.images = q;
            rq.T = REVAL_T;
            rq.views = J;
            ro.steps = o->steps;
            ro.seed = es + 2;
            ro.mode = ENG_READ_RECALL;
            ro.candidates = o->candidates;
            ro.cue_noise = c == REVAL_VIEWS_CROP ? 0.0 : -1.0;
            ro.mask = c == REVAL_VIEWS_CROP ? qm : NULL;
            ro.first_view_code = o->first_view_code;
            if (eng_recall_run(mem, d.m, &rq, &ro, &ans, &err) != VBM_OK) {
                fprintf(stderr, "recall_eval: fused read: %s\n", err.msg);
                vbm_memory_free(mem);
                goto done;
            }
            secs[a] += reval_now() - t0;
            reval_score(ans.x + (size_t)(o->steps - 1) * TP, x, &hits[a], &se[a]);
            eng_recall_out_free(&ans);
            /* no memory: the fused code and the plain mean of the views' codes, decoded */
            if (nets_encode(d.m->net, q, REVAL_T * J, vmu, vs2, &err) != VBM_OK
                || eng_fuse_codes(REVAL_T, J, C, vmu, vs2, NULL, m0, v0, "views", 1, fmu, fs2, &err)
                       != VBM_OK) {
                fprintf(stderr, "recall_eval: %s\n", err.msg);
                vbm_memory_free(mem);
                goto done;
            }
            if (reval_decode(d.m, fmu, y) != 0) {
                vbm_memory_free(mem);
                goto done;
            }
            reval_score(y, x, &hf[a], &junk);
            for (t = 0; t < REVAL_T; t++)
                for (k = 0; k < C; k++) {
                    double sum = 0.0;

                    for (j = 0; j < J; j++)
                        sum += vmu[((size_t)t * (size_t)J + (size_t)j) * (size_t)C + (size_t)k];
                    fmu[(size_t)t * C + k] = sum / J;
                }
            if (reval_decode(d.m, fmu, y) != 0) {
                vbm_memory_free(mem);
                goto done;
            }
            reval_score(y, x, &hm[a], &junk);
        }
        vbm_memory_free(mem);
    }
    for (a = 0; a < nJ; a++) {
        double n = (double)o->episodes * REVAL_T;

        out[a].recall = hits[a] / n;
        out[a].fused_encdec = hf[a] / n;
        out[a].mean_encdec = hm[a] / n;
        out[a].mse_recall = se[a] / (n * REVAL_P);
        out[a].seconds = secs[a];
    }
    rc = 0;
done:
    eng_model_unref(d.m);
    eng_models_free(d.reg);
    free(d.images);
    free(x);
    free(y);
    free(views);
    free(q);
    free(masks);
    free(qm);
    free(mu);
    free(s2);
    free(vmu);
    free(vs2);
    free(fmu);
    free(fs2);
    return rc;
}
