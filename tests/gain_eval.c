/* gain_eval.c -- owns the measurement of memory gain: episodes, cues, the reads of the memory that holds an item, an empty memory and another episode's memory, the oracle, and their scores (error, gap closure, nearest-original rate, total variation, familiarity AUC, sample specificity). */
#define _POSIX_C_SOURCE 200809L

#include "gain_eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/recall.h"
#include "nets/nets.h"
#include "numerics/rng.h"
#include "recall_eval.h"
#include "vbmem/vbmem.h"

#define GAIN_T    64
#define GAIN_P    784
#define GAIN_SIDE 28

const char *gain_cue_name(gain_cue c)
{
    static const char *const names[GAIN_CUES] = {"top",       "bottom",     "blocks",
                                                 "noise 0.2", "noise 0.35", "clean"};
    return c >= 0 && c < GAIN_CUES ? names[c] : "?";
}

static double gain_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Episodes of disjoint images: a seeded shuffle of the test set, episode e its images
 * 64 e .. 64 e + 63, at their bin centres (v + 0.5) / 256. */
typedef struct {
    reval_data d;
    long *perm;
} gain_data;

static int gain_load(const char *model_path, const char *fmnist_gz, const gain_opts *o,
                     gain_data *g)
{
    rng_t rng;

    memset(g, 0, sizeof *g);
    if (reval_data_load(model_path, fmnist_gz, &g->d) != 0)
        return -1;
    if ((long)(o->episodes + 1) * GAIN_T > g->d.n) {
        fprintf(stderr, "gain_eval: %d episodes need more than %ld images\n", o->episodes, g->d.n);
        reval_data_free(&g->d);
        return -1;
    }
    g->perm = malloc((size_t)g->d.n * sizeof *g->perm);
    if (g->perm == NULL) {
        reval_data_free(&g->d);
        return -1;
    }
    for (long i = 0; i < g->d.n; i++)
        g->perm[i] = i;
    rng_seed(&rng, o->seed);
    for (long i = g->d.n - 1; i > 0; i--) {
        long j = (long)rng_below(&rng, (uint64_t)(i + 1)), tmp = g->perm[i];

        g->perm[i] = g->perm[j];
        g->perm[j] = tmp;
    }
    return 0;
}

static void gain_free(gain_data *g)
{
    reval_data_free(&g->d);
    free(g->perm);
}

static void gain_episode(const gain_data *g, int e, float *x)
{
    for (int t = 0; t < GAIN_T; t++) {
        const unsigned char *src = g->d.images + (size_t)g->perm[(long)e * GAIN_T + t] * GAIN_P;

        for (int p = 0; p < GAIN_P; p++)
            x[(size_t)t * GAIN_P + (size_t)p] = ((float)src[p] + 0.5f) / 256.0f;
    }
}

/* The cue of kind c for the originals x: values (unknown ones 0) and mask (1 = known). */
static void gain_make_cue(gain_cue c, const float *x, rng_t *rng, float *cue, unsigned char *mask)
{
    double sd = c == GAIN_NOISE20 ? 0.2 : c == GAIN_NOISE35 ? 0.35 : 0.0;

    for (int t = 0; t < GAIN_T; t++) {
        int br[3], bc[3];

        for (int b = 0; b < 3; b++) {
            br[b] = (int)rng_below(rng, GAIN_SIDE - 10 + 1);
            bc[b] = (int)rng_below(rng, GAIN_SIDE - 10 + 1);
        }
        for (int r = 0; r < GAIN_SIDE; r++)
            for (int col = 0; col < GAIN_SIDE; col++) {
                size_t i = (size_t)t * GAIN_P + (size_t)r * GAIN_SIDE + (size_t)col;
                int known = c == GAIN_TOP      ? r >= GAIN_SIDE / 2
                            : c == GAIN_BOTTOM ? r < GAIN_SIDE / 2
                                               : 1;
                double v = x[i];

                for (int b = 0; c == GAIN_BLOCKS && b < 3; b++)
                    if (r >= br[b] && r < br[b] + 10 && col >= bc[b] && col < bc[b] + 10)
                        known = 0;
                if (sd > 0.0)
                    v = fmin(1.0, fmax(0.0, v + sd * rng_normal(rng)));
                mask[i] = (unsigned char)known;
                cue[i] = known ? (float)v : 0.0f;
            }
    }
}

static int gain_masked(gain_cue c)
{
    return c == GAIN_TOP || c == GAIN_BOTTOM || c == GAIN_BLOCKS;
}

/* The memory of the episode x (its encodings written with the model's write iterations). */
static vbm_memory *gain_write(const gain_data *g, const vbm_config *cfg, const float *x,
                              uint64_t seed, double *mu, double *s2)
{
    int C = cfg->code_size;
    vbm_codes codes = {GAIN_T, C, mu, s2};
    vbm_memory *mem = NULL;
    vbm_write_opts wo;
    vbm_write_result res;
    vbm_error err;

    if (nets_encode(g->d.m->net, x, GAIN_T, mu, s2, &err) != VBM_OK
        || vbm_memory_create(cfg, NULL, NULL, &mem, &err) != VBM_OK) {
        fprintf(stderr, "gain_eval: %s\n", err.msg);
        return NULL;
    }
    vbm_write_opts_default(&wo);
    wo.max_iter = g->d.m->info->iterations;
    wo.seed = seed;
    if (vbm_write(mem, &codes, &wo, &res, &err) != VBM_OK) {
        fprintf(stderr, "gain_eval: write: %s\n", err.msg);
        vbm_memory_free(mem);
        return NULL;
    }
    vbm_write_result_free(&res);
    return mem;
}

/* One recall read of the cue; the last step's images into y, familiarity into fam (may be
 * NULL); *stopped += its stopped_at; every step's images appended to dump when not NULL. */
static int gain_read(const vbm_memory *mem, const eng_model *m, const float *cue,
                     const unsigned char *mask, const gain_opts *o, uint64_t seed, float *y,
                     double *fam, double *stopped, FILE *dump)
{
    eng_recall_query q;
    eng_recall_opts ro;
    eng_recall_out out;
    vbm_error err;
    size_t TP = (size_t)GAIN_T * GAIN_P;

    memset(&q, 0, sizeof q);
    memset(&ro, 0, sizeof ro);
    q.images = cue;
    q.T = GAIN_T;
    ro.steps = o->steps;
    ro.seed = seed;
    ro.mode = ENG_READ_RECALL;
    ro.candidates = o->candidates;
    ro.cue_noise = mask != NULL ? 0.0 : -1.0;
    ro.mask = mask;
    ro.blend = o->blend;
    if (eng_recall_run(mem, m, &q, &ro, &out, &err) != VBM_OK) {
        fprintf(stderr, "gain_eval: read: %s\n", err.msg);
        return -1;
    }
    memcpy(y, out.x + (size_t)(o->steps - 1) * TP, sizeof(float) * TP);
    if (fam != NULL)
        memcpy(fam, out.familiarity, sizeof(double) * GAIN_T);
    if (stopped != NULL)
        *stopped += out.stopped_at;
    if (dump != NULL
        && fwrite(out.x, sizeof(float), TP * (size_t)o->steps, dump) != TP * (size_t)o->steps)
        fprintf(stderr, "gain_eval: cannot write the dump\n");
    eng_recall_out_free(&out);
    return 0;
}

/* Squared error of a to b over the pixels where w is unset (masked) or all (w NULL). */
static double gain_se(const float *a, const float *b, const unsigned char *known, long *n)
{
    double s = 0.0, d;

    for (int p = 0; p < GAIN_P; p++) {
        if (known != NULL && known[p] != 0)
            continue;
        d = (double)a[p] - (double)b[p];
        s += d * d;
        (*n)++;
    }
    return s;
}

static double gain_tv(const float *a)
{
    double s = 0.0;

    for (int r = 0; r < GAIN_SIDE; r++)
        for (int c = 0; c < GAIN_SIDE; c++) {
            if (c + 1 < GAIN_SIDE)
                s += fabs((double)a[r * GAIN_SIDE + c + 1] - (double)a[r * GAIN_SIDE + c]);
            if (r + 1 < GAIN_SIDE)
                s += fabs((double)a[(r + 1) * GAIN_SIDE + c] - (double)a[r * GAIN_SIDE + c]);
        }
    return s;
}

/* Scores of the answers y (64 images) against the originals x: squared error (masked:
 * unknown pixels), its count, nearest-original hits and total variation, added in. */
typedef struct {
    double se, hits, tv;
    long n;
} gain_acc;

static void gain_score(const float *y, const float *x, const unsigned char *mask, gain_acc *a)
{
    for (int i = 0; i < GAIN_T; i++) {
        const float *yi = y + (size_t)i * GAIN_P;
        double best = INFINITY;
        int arg = -1;

        a->se += gain_se(yi, x + (size_t)i * GAIN_P,
                         mask != NULL ? mask + (size_t)i * GAIN_P : NULL, &a->n);
        for (int t = 0; t < GAIN_T; t++) {
            long junk = 0;
            double d = gain_se(yi, x + (size_t)t * GAIN_P, NULL, &junk);

            if (d < best) {
                best = d;
                arg = t;
            }
        }
        a->hits += arg == i;
        a->tv += gain_tv(yi);
    }
}

/* The model's decode of codes z (64) into y, clamped to [0, 1]. */
static int gain_decode(const eng_model *m, const double *z, float *y)
{
    vbm_error err;

    if (nets_decode(m->net, z, GAIN_T, y, NULL, &err) != VBM_OK) {
        fprintf(stderr, "gain_eval: %s\n", err.msg);
        return -1;
    }
    for (int i = 0; i < GAIN_T * GAIN_P; i++)
        y[i] = fminf(1.0f, fmaxf(0.0f, y[i]));
    return 0;
}

static double gain_auc(const double *pos, long np, const double *neg, long nn)
{
    double s = 0.0;

    for (long i = 0; i < np; i++)
        for (long j = 0; j < nn; j++)
            s += pos[i] > neg[j] ? 1.0 : pos[i] == neg[j] ? 0.5 : 0.0;
    return np > 0 && nn > 0 ? s / ((double)np * (double)nn) : NAN;
}

static void gain_config(const gain_data *g, const gain_opts *o, vbm_config *cfg)
{
    eng_model_config(g->d.m, cfg);
    if (o->sigma_z2 > 0.0)
        cfg->sigma_z2 = o->sigma_z2;
}

int gain_run(const char *model_path, const char *fmnist_gz, gain_cue c, const gain_opts *o,
             gain_result *out)
{
    size_t TP = (size_t)GAIN_T * GAIN_P;
    float *x = malloc(TP * sizeof(float)), *xo = malloc(TP * sizeof(float));
    float *cue = malloc(TP * sizeof(float)), *cueo = malloc(TP * sizeof(float));
    float *y = malloc(TP * sizeof(float));
    unsigned char *mask = malloc(TP), *masko = malloc(TP);
    double *pos = malloc(sizeof(double) * GAIN_T * (size_t)o->episodes);
    double *neg = malloc(sizeof(double) * GAIN_T * (size_t)o->episodes);
    double *mu = NULL, *s2 = NULL, secs = 0.0, stopped = 0.0;
    gain_acc am = {0}, ae = {0}, ao = {0}, ar = {0};
    vbm_memory *empty = NULL;
    FILE *dump = NULL;
    vbm_config cfg;
    vbm_error err;
    gain_data g;
    int rc = -1, C;

    if (x == NULL || xo == NULL || cue == NULL || cueo == NULL || y == NULL || mask == NULL
        || masko == NULL || pos == NULL || neg == NULL
        || gain_load(model_path, fmnist_gz, o, &g) != 0) {
        free(x), free(xo), free(cue), free(cueo), free(y), free(mask), free(masko);
        free(pos), free(neg);
        return -1;
    }
    gain_config(&g, o, &cfg);
    C = cfg.code_size;
    mu = malloc(sizeof(double) * GAIN_T * (size_t)C);
    s2 = malloc(sizeof(double) * GAIN_T * (size_t)C);
    if (mu == NULL || s2 == NULL || vbm_memory_create(&cfg, NULL, NULL, &empty, &err) != VBM_OK)
        goto done;
    if (o->dump != NULL && (dump = fopen(o->dump, "wb")) == NULL)
        fprintf(stderr, "gain_eval: cannot open %s\n", o->dump);
    for (int e = 0; e < o->episodes; e++) {
        uint64_t es = o->seed + 1000 * (uint64_t)e;
        const unsigned char *mk = gain_masked(c) ? mask : NULL;
        vbm_memory *mem, *other;
        rng_t rng;
        double t0;

        gain_episode(&g, e, x);
        gain_episode(&g, e + 1, xo);
        rng_seed(&rng, es);
        gain_make_cue(c, x, &rng, cue, mask);
        gain_make_cue(c, xo, &rng, cueo, masko);
        other = gain_write(&g, &cfg, xo, es + 7, mu, s2);
        mem = gain_write(&g, &cfg, x, es + 1, mu, s2); /* mu: the stored items' own codes */
        if (mem == NULL || other == NULL) {
            vbm_memory_free(mem);
            vbm_memory_free(other);
            goto done;
        }
        if (dump != NULL && e == 0
            && (fwrite(x, sizeof(float), TP, dump) != TP
                || fwrite(cue, sizeof(float), TP, dump) != TP))
            fprintf(stderr, "gain_eval: cannot write the dump\n");
        t0 = gain_now();
        rc = gain_read(mem, g.d.m, cue, mk, o, es + 2, y, pos + (size_t)e * GAIN_T, &stopped,
                       e == 0 ? dump : NULL);
        secs += gain_now() - t0;
        if (rc == 0)
            gain_score(y, x, mk, &am);
        if (rc == 0)
            rc = gain_read(empty, g.d.m, cue, mk, o, es + 2, y, NULL, NULL, e == 0 ? dump : NULL);
        if (rc == 0)
            gain_score(y, x, mk, &ae);
        if (rc == 0)
            rc = gain_read(other, g.d.m, cue, mk, o, es + 2, y, NULL, NULL, NULL);
        if (rc == 0)
            gain_score(y, x, mk, &ao);
        /* familiarity of another episode's items, damaged alike, read from this memory */
        if (rc == 0)
            rc = gain_read(mem, g.d.m, cueo, gain_masked(c) ? masko : NULL, o, es + 3, y,
                           neg + (size_t)e * GAIN_T, NULL, NULL);
        vbm_memory_free(mem);
        vbm_memory_free(other);
        if (rc == 0)
            rc = gain_decode(g.d.m, mu, y);
        if (rc != 0)
            goto done;
        gain_score(y, x, mk, &ar);
        rc = -1;
    }
    {
        double n = (double)o->episodes * GAIN_T;

        out->mse_mem = am.se / (double)am.n;
        out->mse_empty = ae.se / (double)ae.n;
        out->mse_other = ao.se / (double)ao.n;
        out->mse_oracle = ar.se / (double)ar.n;
        out->closure = (out->mse_empty - out->mse_mem) / (out->mse_empty - out->mse_oracle);
        out->closure_other = (out->mse_empty - out->mse_other) / (out->mse_empty - out->mse_oracle);
        out->near_mem = am.hits / n;
        out->near_empty = ae.hits / n;
        out->near_other = ao.hits / n;
        out->near_oracle = ar.hits / n;
        out->tv_mem = am.tv / n;
        out->tv_empty = ae.tv / n;
        out->tv_oracle = ar.tv / n;
        out->auc = gain_auc(pos, (long)n, neg, (long)n);
        out->stopped_mean = stopped / (double)o->episodes;
        out->seconds = secs;
    }
    rc = 0;
done:
    if (dump != NULL)
        fclose(dump);
    vbm_memory_free(empty);
    gain_free(&g);
    free(x), free(xo), free(cue), free(cueo), free(y), free(mask), free(masko);
    free(pos), free(neg), free(mu), free(s2);
    return rc;
}

/* Mean over the 64 images a of the distance to the nearest image of b. */
static double gain_nearest_mean(const float *a, const float *b)
{
    double s = 0.0;

    for (int i = 0; i < GAIN_T; i++) {
        double best = INFINITY;

        for (int t = 0; t < GAIN_T; t++) {
            long junk = 0;
            double d = gain_se(a + (size_t)i * GAIN_P, b + (size_t)t * GAIN_P, NULL, &junk);

            best = d < best ? d : best;
        }
        s += sqrt(best);
    }
    return s / GAIN_T;
}

int gain_specificity(const char *model_path, const char *fmnist_gz, const gain_opts *o,
                     gain_spec *out)
{
    size_t TP = (size_t)GAIN_T * GAIN_P;
    float *x = malloc(TP * sizeof(float)), *xo = malloc(TP * sizeof(float));
    float *y = malloc(TP * sizeof(float));
    double *mu = NULL, *s2 = NULL, *z = NULL, sm = 0.0, se = 0.0, so = 0.0;
    vbm_memory *empty = NULL;
    vbm_config cfg;
    vbm_error err;
    gain_data g;
    int rc = -1, C;

    if (x == NULL || xo == NULL || y == NULL || gain_load(model_path, fmnist_gz, o, &g) != 0) {
        free(x), free(xo), free(y);
        return -1;
    }
    gain_config(&g, o, &cfg);
    C = cfg.code_size;
    mu = malloc(sizeof(double) * GAIN_T * (size_t)C);
    s2 = malloc(sizeof(double) * GAIN_T * (size_t)C);
    z = malloc(sizeof(double) * GAIN_T * (size_t)C);
    if (mu == NULL || s2 == NULL || z == NULL
        || vbm_memory_create(&cfg, NULL, NULL, &empty, &err) != VBM_OK)
        goto done;
    for (int e = 0; e < o->episodes; e++) {
        uint64_t es = o->seed + 1000 * (uint64_t)e;
        vbm_memory *mem;

        gain_episode(&g, e, x);
        gain_episode(&g, e + 1, xo);
        mem = gain_write(&g, &cfg, x, es + 1, mu, s2);
        if (mem == NULL)
            goto done;
        if (vbm_sample(mem, GAIN_T, es + 4, -1, z, NULL, &err) != VBM_OK
            || gain_decode(g.d.m, z, y) != 0) {
            vbm_memory_free(mem);
            goto done;
        }
        sm += gain_nearest_mean(y, x) / gain_nearest_mean(y, xo);
        vbm_memory_free(mem);
        if (vbm_sample(empty, GAIN_T, es + 4, -1, z, NULL, &err) != VBM_OK
            || gain_decode(g.d.m, z, y) != 0)
            goto done;
        se += gain_nearest_mean(y, x) / gain_nearest_mean(y, xo);
        if (gain_decode(g.d.m, mu, y) != 0)
            goto done;
        so += gain_nearest_mean(y, x) / gain_nearest_mean(y, xo);
    }
    out->mem = sm / o->episodes;
    out->empty = se / o->episodes;
    out->oracle = so / o->episodes;
    rc = 0;
done:
    vbm_memory_free(empty);
    gain_free(&g);
    free(x), free(xo), free(y), free(mu), free(s2), free(z);
    return rc;
}

/* Per-item squared errors on the unknown pixels of the answers y to the originals x. */
static void gain_item_se(const float *y, const float *x, const unsigned char *mask, double *se)
{
    for (int i = 0; i < GAIN_T; i++) {
        long junk = 0;

        se[i] += gain_se(y + (size_t)i * GAIN_P, x + (size_t)i * GAIN_P, mask + (size_t)i * GAIN_P,
                         &junk);
    }
}

/* The gap closure (ref - v) / (ref - oracle) of an error v against a reference's. */
static double gain_ratio(double ref, double v, double oracle)
{
    return (ref - v) / (ref - oracle);
}

/* Sums of the per-item errors e over items [lo, hi). */
static double gain_sum(const double *e, int lo, int hi)
{
    double s = 0.0;

    for (int i = lo; i < hi; i++)
        s += e[i];
    return s;
}

int gain_forget(const char *model_path, const char *fmnist_gz, const gain_opts *o, int forget,
                gain_forget_result *out)
{
    size_t TP = (size_t)GAIN_T * GAIN_P;
    float *x = malloc(TP * sizeof(float)), *xo = malloc(TP * sizeof(float));
    float *cue = malloc(TP * sizeof(float)), *y = malloc(TP * sizeof(float));
    unsigned char *mask = malloc(TP);
    double *mu = NULL, *s2 = NULL;
    /* per item: empty, other, oracle, before, after exact, after downdate */
    double e[6][GAIN_T] = {{0}};
    vbm_memory *empty = NULL;
    vbm_config cfg, nocodes;
    vbm_error err;
    gain_data g;
    int rc = -1, C;

    if (x == NULL || xo == NULL || cue == NULL || y == NULL || mask == NULL || forget < 1
        || forget >= GAIN_T || gain_load(model_path, fmnist_gz, o, &g) != 0) {
        free(x), free(xo), free(cue), free(y), free(mask);
        return -1;
    }
    gain_config(&g, o, &cfg);
    nocodes = cfg;
    cfg.retain_max = GAIN_T;
    C = cfg.code_size;
    mu = malloc(sizeof(double) * GAIN_T * (size_t)C);
    s2 = malloc(sizeof(double) * GAIN_T * (size_t)C);
    if (mu == NULL || s2 == NULL || vbm_memory_create(&cfg, NULL, NULL, &empty, &err) != VBM_OK)
        goto done;
    for (int ep = 0; ep < o->episodes; ep++) {
        uint64_t es = o->seed + 1000 * (uint64_t)ep;
        vbm_memory *mem = NULL, *other = NULL, *down = NULL;
        vbm_codes cues = {forget, C, mu, s2};
        vbm_write_opts wo;
        vbm_forget_result fr;
        rng_t rng;
        int bad;

        gain_episode(&g, ep, x);
        gain_episode(&g, ep + 1, xo);
        rng_seed(&rng, es);
        gain_make_cue(GAIN_TOP, x, &rng, cue, mask);
        other = gain_write(&g, &cfg, xo, es + 7, mu, s2);
        mem = gain_write(&g, &cfg, x, es + 1, mu, s2);
        down = gain_write(&g, &nocodes, x, es + 1, mu, s2); /* the same fit, no codes kept */
        bad = mem == NULL || other == NULL || down == NULL;
        bad = bad || gain_read(empty, g.d.m, cue, mask, o, es + 2, y, NULL, NULL, NULL) != 0;
        if (!bad)
            gain_item_se(y, x, mask, e[0]);
        bad = bad || gain_read(other, g.d.m, cue, mask, o, es + 2, y, NULL, NULL, NULL) != 0;
        if (!bad)
            gain_item_se(y, x, mask, e[1]);
        bad = bad || gain_decode(g.d.m, mu, y) != 0;
        if (!bad)
            gain_item_se(y, x, mask, e[2]);
        bad = bad || gain_read(mem, g.d.m, cue, mask, o, es + 2, y, NULL, NULL, NULL) != 0;
        if (!bad)
            gain_item_se(y, x, mask, e[3]);
        vbm_write_opts_default(&wo);
        wo.max_iter = g.d.m->info->iterations;
        wo.seed = es + 1;
        for (int path = 0; !bad && path < 2; path++) {
            vbm_memory *target = path == 0 ? mem : down;

            if (vbm_forget(target, &cues, &wo, &fr, &err) != VBM_OK) {
                fprintf(stderr, "gain_eval: forget: %s\n", err.msg);
                bad = 1;
                break;
            }
            vbm_forget_result_free(&fr);
            bad = gain_read(target, g.d.m, cue, mask, o, es + 2, y, NULL, NULL, NULL) != 0;
            if (!bad)
                gain_item_se(y, x, mask, e[4 + path]);
        }
        vbm_memory_free(mem);
        vbm_memory_free(other);
        vbm_memory_free(down);
        if (bad)
            goto done;
    }
    {
        /* E[k][0]: the forgotten items' summed error of reader k, E[k][1]: the kept items' */
        double E[6][2];

        for (int k = 0; k < 6; k++) {
            E[k][0] = gain_sum(e[k], 0, forget);
            E[k][1] = gain_sum(e[k], forget, GAIN_T);
        }
        out->closure_before_forgotten = gain_ratio(E[0][0], E[3][0], E[2][0]);
        out->specific_before_forgotten = gain_ratio(E[1][0], E[3][0], E[2][0]);
        out->closure_exact_forgotten = gain_ratio(E[0][0], E[4][0], E[2][0]);
        out->specific_exact_forgotten = gain_ratio(E[1][0], E[4][0], E[2][0]);
        out->closure_down_forgotten = gain_ratio(E[0][0], E[5][0], E[2][0]);
        out->specific_down_forgotten = gain_ratio(E[1][0], E[5][0], E[2][0]);
        out->closure_before_kept = gain_ratio(E[0][1], E[3][1], E[2][1]);
        out->closure_exact_kept = gain_ratio(E[0][1], E[4][1], E[2][1]);
        out->closure_down_kept = gain_ratio(E[0][1], E[5][1], E[2][1]);
    }
    rc = 0;
done:
    vbm_memory_free(empty);
    gain_free(&g);
    free(x), free(xo), free(cue), free(y), free(mask), free(mu), free(s2);
    return rc;
}

/* The specificity of 64 samples drawn from mem (seed) against the episodes x and xo. */
static int gain_spec_of(const gain_data *g, const vbm_memory *mem, uint64_t seed, const float *x,
                        const float *xo, double *z, float *y, double *out)
{
    vbm_error err;

    if (vbm_sample(mem, GAIN_T, seed, -1, z, NULL, &err) != VBM_OK
        || gain_decode(g->d.m, z, y) != 0)
        return -1;
    *out += gain_nearest_mean(y, x) / gain_nearest_mean(y, xo);
    return 0;
}

int gain_resize(const char *model_path, const char *fmnist_gz, const gain_opts *o, int new_H,
                gain_resize_result *out)
{
    size_t TP = (size_t)GAIN_T * GAIN_P;
    float *x = malloc(TP * sizeof(float)), *xo = malloc(TP * sizeof(float));
    float *cue = malloc(TP * sizeof(float)), *y = malloc(TP * sizeof(float));
    unsigned char *mask = malloc(TP);
    double *mu = NULL, *s2 = NULL, *z = NULL, e[5] = {0}, sp[3] = {0};
    vbm_memory *empty = NULL;
    vbm_config cfg, nocodes;
    vbm_error err;
    gain_data g;
    int rc = -1, C;

    if (x == NULL || xo == NULL || cue == NULL || y == NULL || mask == NULL || new_H < 1
        || new_H > GAIN_T || gain_load(model_path, fmnist_gz, o, &g) != 0) {
        free(x), free(xo), free(cue), free(y), free(mask);
        return -1;
    }
    gain_config(&g, o, &cfg);
    nocodes = cfg;
    cfg.retain_max = GAIN_T;
    C = cfg.code_size;
    mu = malloc(sizeof(double) * GAIN_T * (size_t)C);
    s2 = malloc(sizeof(double) * GAIN_T * (size_t)C);
    z = malloc(sizeof(double) * GAIN_T * (size_t)C);
    if (mu == NULL || s2 == NULL || z == NULL
        || vbm_memory_create(&cfg, NULL, NULL, &empty, &err) != VBM_OK)
        goto done;
    for (int ep = 0; ep < o->episodes; ep++) {
        uint64_t es = o->seed + 1000 * (uint64_t)ep;
        vbm_memory *kept = NULL, *drawn = NULL;
        vbm_write_opts wo;
        vbm_write_result res;
        double before, after;
        long n = 0;
        rng_t rng;
        int bad;

        gain_episode(&g, ep, x);
        gain_episode(&g, ep + 1, xo);
        rng_seed(&rng, es);
        gain_make_cue(GAIN_TOP, x, &rng, cue, mask);
        kept = gain_write(&g, &cfg, x, es + 1, mu, s2);
        drawn = gain_write(&g, &nocodes, x, es + 1, mu, s2);
        bad = kept == NULL || drawn == NULL;
        /* e: empty, oracle, before, after with kept codes, after on drawn codes */
        bad = bad || gain_read(empty, g.d.m, cue, mask, o, es + 2, y, NULL, NULL, NULL) != 0;
        for (int i = 0; !bad && i < GAIN_T; i++)
            e[0] += gain_se(y + (size_t)i * GAIN_P, x + (size_t)i * GAIN_P,
                            mask + (size_t)i * GAIN_P, &n);
        bad = bad || gain_decode(g.d.m, mu, y) != 0;
        for (int i = 0; !bad && i < GAIN_T; i++)
            e[1] += gain_se(y + (size_t)i * GAIN_P, x + (size_t)i * GAIN_P,
                            mask + (size_t)i * GAIN_P, &n);
        bad = bad || gain_read(kept, g.d.m, cue, mask, o, es + 2, y, NULL, NULL, NULL) != 0;
        for (int i = 0; !bad && i < GAIN_T; i++)
            e[2] += gain_se(y + (size_t)i * GAIN_P, x + (size_t)i * GAIN_P,
                            mask + (size_t)i * GAIN_P, &n);
        bad = bad || gain_spec_of(&g, kept, es + 4, x, xo, z, y, &sp[0]) != 0;
        vbm_write_opts_default(&wo);
        wo.max_iter = g.d.m->info->iterations;
        wo.seed = es + 5;
        for (int path = 0; !bad && path < 2; path++) {
            vbm_memory *m = path == 0 ? kept : drawn;

            if (vbm_resize(m, new_H, 0, &wo, &before, &after, &res, &err) != VBM_OK) {
                fprintf(stderr, "gain_eval: resize: %s\n", err.msg);
                bad = 1;
                break;
            }
            vbm_write_result_free(&res);
            bad = gain_read(m, g.d.m, cue, mask, o, es + 2, y, NULL, NULL, NULL) != 0;
            for (int i = 0; !bad && i < GAIN_T; i++)
                e[3 + path] += gain_se(y + (size_t)i * GAIN_P, x + (size_t)i * GAIN_P,
                                       mask + (size_t)i * GAIN_P, &n);
            bad = bad || gain_spec_of(&g, m, es + 4, x, xo, z, y, &sp[1 + path]) != 0;
        }
        vbm_memory_free(kept);
        vbm_memory_free(drawn);
        if (bad)
            goto done;
    }
    out->closure_before = gain_ratio(e[0], e[2], e[1]);
    out->closure_kept = gain_ratio(e[0], e[3], e[1]);
    out->closure_drawn = gain_ratio(e[0], e[4], e[1]);
    out->spec_before = sp[0] / o->episodes;
    out->spec_kept = sp[1] / o->episodes;
    out->spec_drawn = sp[2] / o->episodes;
    rc = 0;
done:
    vbm_memory_free(empty);
    gain_free(&g);
    free(x), free(xo), free(cue), free(y), free(mask), free(mu), free(s2), free(z);
    return rc;
}
