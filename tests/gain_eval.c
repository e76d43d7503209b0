/* gain_eval.c -- owns the measurement of memory gain: episodes, cues, the reads of the memory that
 * holds an item, an empty memory and another episode's memory, the oracle, and their scores (error,
 * gap closure, nearest-original rate, total variation, familiarity AUC, sample specificity). */
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

/* What every measurement holds: the images and the model; episodes of disjoint images (a
 * seeded shuffle of the test set, episode e its images 64 e .. 64 e + 63, at their bin
 * centres (v + 0.5) / 256); the sessions' configuration and an empty memory of it; buffers
 * of one episode (x), another (xo), their cues and masks, answers (y), codes (mu, s2, z). */
typedef struct {
    reval_data d;
    long *perm;
    vbm_config cfg;
    vbm_memory *empty;
    float *x, *xo, *cue, *cueo, *y;
    unsigned char *mask, *masko;
    double *mu, *s2, *z;
} gain_data;

static void gain_free(gain_data *g)
{
    reval_data_free(&g->d);
    vbm_memory_free(g->empty);
    free(g->perm), free(g->x), free(g->xo), free(g->cue), free(g->cueo), free(g->y);
    free(g->mask), free(g->masko), free(g->mu), free(g->s2), free(g->z);
    memset(g, 0, sizeof *g);
}

static int gain_load(const char *model_path, const char *fmnist_gz, const gain_opts *o,
                     gain_data *g)
{
    size_t TP = (size_t)GAIN_T * GAIN_P, TC;
    vbm_error err;
    rng_t rng;

    memset(g, 0, sizeof *g);
    if (reval_data_load(model_path, fmnist_gz, &g->d) != 0)
        return -1;
    if ((long)(o->episodes + 1) * GAIN_T > g->d.n) {
        fprintf(stderr, "gain_eval: %d episodes need more than %ld images\n", o->episodes, g->d.n);
        gain_free(g);
        return -1;
    }
    eng_model_config(g->d.m, &g->cfg);
    if (o->sigma_z2 > 0.0)
        g->cfg.sigma_z2 = o->sigma_z2;
    TC = (size_t)GAIN_T * (size_t)g->cfg.code_size;
    g->perm = malloc((size_t)g->d.n * sizeof *g->perm);
    g->x = malloc(TP * sizeof(float)), g->xo = malloc(TP * sizeof(float));
    g->cue = malloc(TP * sizeof(float)), g->cueo = malloc(TP * sizeof(float));
    g->y = malloc(TP * sizeof(float));
    g->mask = malloc(TP), g->masko = malloc(TP);
    g->mu = malloc(TC * sizeof(double)), g->s2 = malloc(TC * sizeof(double));
    g->z = malloc(TC * sizeof(double));
    if (g->perm == NULL || g->x == NULL || g->xo == NULL || g->cue == NULL || g->cueo == NULL
        || g->y == NULL || g->mask == NULL || g->masko == NULL || g->mu == NULL || g->s2 == NULL
        || g->z == NULL || vbm_memory_create(&g->cfg, NULL, NULL, &g->empty, &err) != VBM_OK) {
        fprintf(stderr, "gain_eval: out of memory or a bad configuration\n");
        gain_free(g);
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

/* The memory of the episode x (its encodings, left in g->mu and g->s2, written with the
 * model's write iterations). */
static vbm_memory *gain_write(const gain_data *g, const vbm_config *cfg, const float *x,
                              uint64_t seed)
{
    int C = cfg->code_size;
    double *mu = g->mu, *s2 = g->s2;
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

/* The gap closure (ref - v) / (ref - oracle) of an error v against a reference's. */
static double gain_ratio(double ref, double v, double oracle)
{
    return (ref - v) / (ref - oracle);
}

int gain_run(const char *model_path, const char *fmnist_gz, gain_cue c, const gain_opts *o,
             gain_result *out)
{
    size_t TP = (size_t)GAIN_T * GAIN_P;
    double *pos = malloc(sizeof(double) * GAIN_T * (size_t)o->episodes);
    double *neg = malloc(sizeof(double) * GAIN_T * (size_t)o->episodes);
    double secs = 0.0, stopped = 0.0, n = (double)o->episodes * GAIN_T;
    gain_acc am = {0}, ae = {0}, ao = {0}, ar = {0};
    FILE *dump = NULL;
    gain_data g;
    int rc = -1;

    if (pos == NULL || neg == NULL || gain_load(model_path, fmnist_gz, o, &g) != 0) {
        free(pos), free(neg);
        return -1;
    }
    if (o->dump != NULL && (dump = fopen(o->dump, "wb")) == NULL)
        fprintf(stderr, "gain_eval: cannot open %s\n", o->dump);
    for (int e = 0; e < o->episodes; e++) {
        uint64_t es = o->seed + 1000 * (uint64_t)e;
        const unsigned char *mk = gain_masked(c) ? g.mask : NULL;
        vbm_memory *mem, *other;
        rng_t rng;
        double t0;

        gain_episode(&g, e, g.x);
        gain_episode(&g, e + 1, g.xo);
        rng_seed(&rng, es);
        gain_make_cue(c, g.x, &rng, g.cue, g.mask);
        gain_make_cue(c, g.xo, &rng, g.cueo, g.masko);
        other = gain_write(&g, &g.cfg, g.xo, es + 7);
        mem = gain_write(&g, &g.cfg, g.x, es + 1); /* g.mu: the stored items' own codes */
        rc = mem == NULL || other == NULL ? -1 : 0;
        if (rc == 0 && dump != NULL && e == 0
            && (fwrite(g.x, sizeof(float), TP, dump) != TP
                || fwrite(g.cue, sizeof(float), TP, dump) != TP))
            fprintf(stderr, "gain_eval: cannot write the dump\n");
        t0 = gain_now();
        if (rc == 0)
            rc = gain_read(mem, g.d.m, g.cue, mk, o, es + 2, g.y, pos + (size_t)e * GAIN_T,
                           &stopped, e == 0 ? dump : NULL);
        secs += gain_now() - t0;
        if (rc == 0)
            gain_score(g.y, g.x, mk, &am);
        if (rc == 0)
            rc = gain_read(g.empty, g.d.m, g.cue, mk, o, es + 2, g.y, NULL, NULL,
                           e == 0 ? dump : NULL);
        if (rc == 0)
            gain_score(g.y, g.x, mk, &ae);
        if (rc == 0)
            rc = gain_read(other, g.d.m, g.cue, mk, o, es + 2, g.y, NULL, NULL, NULL);
        if (rc == 0)
            gain_score(g.y, g.x, mk, &ao);
        /* familiarity of another episode's items, damaged alike, read from this memory */
        if (rc == 0 && o->familiarity)
            rc = gain_read(mem, g.d.m, g.cueo, gain_masked(c) ? g.masko : NULL, o, es + 3, g.y,
                           neg + (size_t)e * GAIN_T, NULL, NULL);
        vbm_memory_free(mem);
        vbm_memory_free(other);
        if (rc == 0)
            rc = gain_decode(g.d.m, g.mu, g.y);
        if (rc != 0)
            goto done;
        gain_score(g.y, g.x, mk, &ar);
    }
    out->mse_mem = am.se / (double)am.n;
    out->mse_empty = ae.se / (double)ae.n;
    out->mse_other = ao.se / (double)ao.n;
    out->mse_oracle = ar.se / (double)ar.n;
    out->closure = gain_ratio(out->mse_empty, out->mse_mem, out->mse_oracle);
    out->closure_other = gain_ratio(out->mse_empty, out->mse_other, out->mse_oracle);
    out->near_mem = am.hits / n;
    out->near_empty = ae.hits / n;
    out->near_other = ao.hits / n;
    out->near_oracle = ar.hits / n;
    out->tv_mem = am.tv / n;
    out->tv_empty = ae.tv / n;
    out->tv_oracle = ar.tv / n;
    out->auc = o->familiarity ? gain_auc(pos, (long)n, neg, (long)n) : NAN;
    out->stopped_mean = stopped / (double)o->episodes;
    out->seconds = secs;
done:
    if (dump != NULL)
        fclose(dump);
    gain_free(&g);
    free(pos), free(neg);
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

/* The specificity of 64 samples drawn from mem (seed) against the episodes in g->x and
 * g->xo, added to *out. */
static int gain_spec_of(gain_data *g, const vbm_memory *mem, uint64_t seed, double *out)
{
    vbm_error err;

    if (vbm_sample(mem, GAIN_T, seed, -1, g->z, NULL, &err) != VBM_OK
        || gain_decode(g->d.m, g->z, g->y) != 0)
        return -1;
    *out += gain_nearest_mean(g->y, g->x) / gain_nearest_mean(g->y, g->xo);
    return 0;
}

int gain_specificity(const char *model_path, const char *fmnist_gz, const gain_opts *o,
                     gain_spec *out)
{
    double sm = 0.0, se = 0.0, so = 0.0;
    gain_data g;
    int rc = 0;

    if (gain_load(model_path, fmnist_gz, o, &g) != 0)
        return -1;
    for (int e = 0; rc == 0 && e < o->episodes; e++) {
        uint64_t es = o->seed + 1000 * (uint64_t)e;
        vbm_memory *mem;

        gain_episode(&g, e, g.x);
        gain_episode(&g, e + 1, g.xo);
        mem = gain_write(&g, &g.cfg, g.x, es + 1);
        rc = mem == NULL || gain_spec_of(&g, mem, es + 4, &sm) != 0
                     || gain_spec_of(&g, g.empty, es + 4, &se) != 0
                     || gain_decode(g.d.m, g.mu, g.y) != 0
                 ? -1
                 : 0;
        if (rc == 0)
            so += gain_nearest_mean(g.y, g.x) / gain_nearest_mean(g.y, g.xo);
        vbm_memory_free(mem);
    }
    out->mem = sm / o->episodes;
    out->empty = se / o->episodes;
    out->oracle = so / o->episodes;
    gain_free(&g);
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

/* A recall read of the top cues in g (g->cue, g->mask) from mem; each item's squared error
 * on its unknown pixels added to se. */
static int gain_read_se(gain_data *g, const vbm_memory *mem, const gain_opts *o, uint64_t seed,
                        double *se)
{
    if (gain_read(mem, g->d.m, g->cue, g->mask, o, seed, g->y, NULL, NULL, NULL) != 0)
        return -1;
    gain_item_se(g->y, g->x, g->mask, se);
    return 0;
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
    /* per item: empty, other, oracle, before, after exact, after downdate */
    double e[6][GAIN_T] = {{0}}, E[6][2];
    vbm_config kept;
    vbm_error err;
    gain_data g;
    int bad = 0;

    if (forget < 1 || forget >= GAIN_T || gain_load(model_path, fmnist_gz, o, &g) != 0)
        return -1;
    kept = g.cfg;
    kept.retain_max = GAIN_T;
    for (int ep = 0; !bad && ep < o->episodes; ep++) {
        uint64_t es = o->seed + 1000 * (uint64_t)ep;
        vbm_memory *mem, *other, *down;
        vbm_codes cues = {forget, g.cfg.code_size, g.mu, g.s2};
        vbm_write_opts wo;
        vbm_forget_result fr;
        rng_t rng;

        gain_episode(&g, ep, g.x);
        gain_episode(&g, ep + 1, g.xo);
        rng_seed(&rng, es);
        gain_make_cue(GAIN_TOP, g.x, &rng, g.cue, g.mask);
        other = gain_write(&g, &g.cfg, g.xo, es + 7);
        down = gain_write(&g, &g.cfg, g.x, es + 1); /* the same fit, no codes kept */
        mem = gain_write(&g, &kept, g.x, es + 1);
        bad = mem == NULL || other == NULL || down == NULL
              || gain_read_se(&g, g.empty, o, es + 2, e[0]) != 0
              || gain_read_se(&g, other, o, es + 2, e[1]) != 0
              || gain_decode(g.d.m, g.mu, g.y) != 0;
        if (!bad)
            gain_item_se(g.y, g.x, g.mask, e[2]);
        bad = bad || gain_read_se(&g, mem, o, es + 2, e[3]) != 0;
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
            bad = gain_read_se(&g, target, o, es + 2, e[4 + path]) != 0;
        }
        vbm_memory_free(mem);
        vbm_memory_free(other);
        vbm_memory_free(down);
    }
    gain_free(&g);
    if (bad)
        return -1;
    /* E[k][0]: the forgotten items' summed error of reader k, E[k][1]: the kept items' */
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
    return 0;
}

int gain_resize(const char *model_path, const char *fmnist_gz, const gain_opts *o, int new_H,
                gain_resize_result *out)
{
    /* per item: empty, oracle, before, after from kept codes, after on drawn codes */
    double e[5][GAIN_T] = {{0}}, sp[3] = {0}, before, after;
    vbm_config kept;
    vbm_error err;
    gain_data g;
    int bad = 0;

    if (new_H < 1 || new_H > GAIN_T || gain_load(model_path, fmnist_gz, o, &g) != 0)
        return -1;
    kept = g.cfg;
    kept.retain_max = GAIN_T;
    for (int ep = 0; !bad && ep < o->episodes; ep++) {
        uint64_t es = o->seed + 1000 * (uint64_t)ep;
        vbm_memory *withcodes, *drawn;
        vbm_write_opts wo;
        vbm_write_result res;
        rng_t rng;

        gain_episode(&g, ep, g.x);
        gain_episode(&g, ep + 1, g.xo);
        rng_seed(&rng, es);
        gain_make_cue(GAIN_TOP, g.x, &rng, g.cue, g.mask);
        drawn = gain_write(&g, &g.cfg, g.x, es + 1);
        withcodes = gain_write(&g, &kept, g.x, es + 1);
        bad = withcodes == NULL || drawn == NULL || gain_read_se(&g, g.empty, o, es + 2, e[0]) != 0
              || gain_decode(g.d.m, g.mu, g.y) != 0;
        if (!bad)
            gain_item_se(g.y, g.x, g.mask, e[1]);
        bad = bad || gain_read_se(&g, withcodes, o, es + 2, e[2]) != 0
              || gain_spec_of(&g, withcodes, es + 4, &sp[0]) != 0;
        vbm_write_opts_default(&wo);
        wo.max_iter = g.d.m->info->iterations;
        wo.seed = es + 5;
        for (int path = 0; !bad && path < 2; path++) {
            vbm_memory *m = path == 0 ? withcodes : drawn;

            if (vbm_resize(m, new_H, 0, &wo, &before, &after, &res, &err) != VBM_OK) {
                fprintf(stderr, "gain_eval: resize: %s\n", err.msg);
                bad = 1;
                break;
            }
            vbm_write_result_free(&res);
            bad = gain_read_se(&g, m, o, es + 2, e[3 + path]) != 0
                  || gain_spec_of(&g, m, es + 4, &sp[1 + path]) != 0;
        }
        vbm_memory_free(withcodes);
        vbm_memory_free(drawn);
    }
    gain_free(&g);
    if (bad)
        return -1;
    out->closure_before =
        gain_ratio(gain_sum(e[0], 0, GAIN_T), gain_sum(e[2], 0, GAIN_T), gain_sum(e[1], 0, GAIN_T));
    out->closure_kept =
        gain_ratio(gain_sum(e[0], 0, GAIN_T), gain_sum(e[3], 0, GAIN_T), gain_sum(e[1], 0, GAIN_T));
    out->closure_drawn =
        gain_ratio(gain_sum(e[0], 0, GAIN_T), gain_sum(e[4], 0, GAIN_T), gain_sum(e[1], 0, GAIN_T));
    out->spec_before = sp[0] / o->episodes;
    out->spec_kept = sp[1] / o->episodes;
    out->spec_drawn = sp[2] / o->episodes;
    return 0;
}
