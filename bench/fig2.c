/* fig2.c -- owns the Fig. 2a reproduction: ELBO ratio DKM / VB of the Gaussian memory on episodes
 * sampled from its own model, over a K x C grid. */
#define _POSIX_C_SOURCE 200809L

#include "common.h"
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "numerics/rng.h"
#include "vbmem/vbmem.h"

#define MAX_LIST 32

static const int default_K[] = {8, 16, 32, 64, 128, 256};
static const int default_C[] = {50, 100, 200, 400, 800};

typedef struct {
    int nK, nC;
    int K[MAX_LIST], C[MAX_LIST];
    int episodes;
    int T;
    int iters;
    uint64_t seed;
    int csv;
    vbm_init init; /* VB initialisation (default VBM_INIT_AUTO) */
} fig2_opts;

/* Result of one episode. */
typedef struct {
    double elbo_vb, elbo_dkm, ratio;
    double secs_vb, secs_dkm;
} episode_result;

static void usage(FILE *f)
{
    fprintf(f, "usage: bench-fig2 [--episodes N] [--seed S] [--K k1,k2,...] [--C c1,c2,...] [--T "
               "T] [--iters N]\n"
               "                  [--init auto|prior|random] [--csv]\n"
               "  Reproduces Fig. 2a of Lingle (Meta-Learning with Variational Bayes): for every "
               "(K, C) cell,\n"
               "  N episodes (default 5) of T = 32 codes are drawn from the Gaussian memory model "
               "with a random\n"
               "  prior mean R0 ~ N(0, 1), U0 = I, sigma_z^2 = 1; each episode is written by batch "
               "VB (50\n"
               "  iterations) and by the DKM online writer, and ratio = ELBO_DKM / ELBO_VB (> 1: "
               "VB is better).\n"
               "  --K, --C    comma-separated subsets (default K = 8,16,32,64,128,256; C = "
               "50,100,200,400,800)\n"
               "  --init      VB initialisation: auto (default; q(M) means drawn from the prior), "
               "prior (R = R0),\n"
               "              random (same as auto for this model)\n"
               "  --csv       also print one raw row per episode\n");
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Parse "a,b,c" into a sorted list of distinct positive ints. */
static int parse_list(const char *s, long hi, int *out, int *n)
{
    char buf[512];
    if (strlen(s) >= sizeof buf)
        return -1;
    strcpy(buf, s);
    int m = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (m >= MAX_LIST)
            return -1;
        if (bench_parse_int(tok, 1, hi, &out[m]) != 0)
            return -1;
        m++;
    }
    if (m == 0)
        return -1;
    qsort(out, (size_t)m, sizeof(int), cmp_int);
    int k = 1;
    for (int i = 1; i < m; i++)
        if (out[i] != out[k - 1])
            out[k++] = out[i];
    *n = k;
    return 0;
}

static int parse_args(int argc, char **argv, fig2_opts *o)
{
    o->nK = (int)(sizeof default_K / sizeof default_K[0]);
    o->nC = (int)(sizeof default_C / sizeof default_C[0]);
    memcpy(o->K, default_K, sizeof default_K);
    memcpy(o->C, default_C, sizeof default_C);
    o->episodes = 5;
    o->T = 32;
    o->iters = 50;
    o->seed = 1;
    o->csv = 0;
    o->init = VBM_INIT_AUTO;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : ""; /* "" fails every parser */
        int bad = 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--csv") == 0) {
            o->csv = 1;
            continue;
        } else if (strcmp(a, "--episodes") == 0) {
            bad = bench_parse_int(v, 1, 100000, &o->episodes);
        } else if (strcmp(a, "--T") == 0) {
            bad = bench_parse_int(v, 1, 1000000, &o->T);
        } else if (strcmp(a, "--iters") == 0) {
            bad = bench_parse_int(v, 0, 100000, &o->iters);
        } else if (strcmp(a, "--seed") == 0) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            bad = errno || end == v || *end != '\0';
            o->seed = (uint64_t)s;
        } else if (strcmp(a, "--init") == 0) {
            if (strcmp(v, "auto") == 0)
                o->init = VBM_INIT_AUTO;
            else if (strcmp(v, "prior") == 0)
                o->init = VBM_INIT_PRIOR;
            else if (strcmp(v, "random") == 0)
                o->init = VBM_INIT_RANDOM;
            else
                bad = 1;
        } else if (strcmp(a, "--K") == 0) {
            bad = parse_list(v, VBM_MAX_ROWS, o->K, &o->nK);
        } else if (strcmp(a, "--C") == 0) {
            bad = parse_list(v, VBM_MAX_CODE_SIZE, o->C, &o->nC);
        } else {
            fprintf(stderr, "bench-fig2: unknown option %s\n", a);
            usage(stderr);
            return -1;
        }
        if (bad) {
            fprintf(stderr, "bench-fig2: bad or missing value for %s\n", a);
            usage(stderr);
            return -1;
        }
        i++;
    }
    return 0;
}

/* Seed of one episode: a fixed mix of (seed, K, C, episode); rng_seed runs it
 * through splitmix64, so distinct inputs give unrelated streams. */
static uint64_t episode_seed(uint64_t seed, int K, int C, int ep)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL;
    x ^= (uint64_t)K * 0xbf58476d1ce4e5b9ULL;
    x ^= (uint64_t)C * 0x94d049bb133111ebULL;
    x ^= (uint64_t)ep * 0xd6e8feb86659fd93ULL;
    return x;
}

/* One episode: prior R0 ~ N(0,1), U0 = I; M = R0 + E; z_t = M^T w_t + eps_t.
 * Fits the VB Gaussian memory and the DKM writer and fills *out. */
static int run_episode(const fig2_opts *o, int K, int C, int ep, double *R0, double *U0, double *M,
                       double *Z, double *w, episode_result *out)
{
    rng_t rng;
    rng_seed(&rng, episode_seed(o->seed, K, C, ep));
    const double sigma_z2 = 1.0;
    size_t KC = (size_t)K * C;
    for (size_t i = 0; i < KC; i++)
        R0[i] = rng_normal(&rng);
    memset(U0, 0, sizeof(double) * (size_t)K * K);
    for (int k = 0; k < K; k++)
        U0[(size_t)k * K + k] = 1.0;
    /* M ~ MN(R0, U0 = I, V = I): independent standard-normal perturbation. */
    for (size_t i = 0; i < KC; i++)
        M[i] = R0[i] + rng_normal(&rng);
    double sz = sqrt(sigma_z2);
    for (int t = 0; t < o->T; t++) {
        for (int k = 0; k < K; k++)
            w[k] = rng_normal(&rng);
        double *z = Z + (size_t)t * C;
        for (int c = 0; c < C; c++)
            z[c] = sz * rng_normal(&rng);
        for (int k = 0; k < K; k++) {
            const double *mk = M + (size_t)k * C;
            for (int c = 0; c < C; c++)
                z[c] += mk[c] * w[k];
        }
    }
    vbm_codes codes = {o->T, C, Z, NULL};
    vbm_error err = {0};
    vbm_write_opts wo;
    vbm_write_opts_default(&wo);
    wo.max_iter = o->iters;
    wo.tol = 0.0;
    wo.seed = episode_seed(o->seed, K, C, ep) ^ 0x5bd1e995ULL;
    wo.init = o->init;

    /* (a) batch VB, Gaussian addresses, no shift. */
    vbm_config cfg;
    vbm_config_default(VBM_GAUSSIAN, C, &cfg);
    cfg.rows = K;
    cfg.shift = 0;
    cfg.sigma_z2 = sigma_z2;
    cfg.u0 = 1.0;
    vbm_memory *mem = NULL;
    vbm_write_result res;
    double t0 = bench_now_s();
    if (vbm_memory_create(&cfg, R0, U0, &mem, &err) || vbm_write(mem, &codes, &wo, &res, &err)) {
        fprintf(stderr, "bench-fig2: VB write failed (K=%d C=%d episode %d): %s\n", K, C, ep,
                err.msg);
        vbm_memory_free(mem);
        return -1;
    }
    out->secs_vb = bench_now_s() - t0;
    out->elbo_vb = res.elbo.per_frame;
    if (res.iterations != o->iters)
        fprintf(stderr, "bench-fig2: warning: VB ran %d iterations, asked %d\n", res.iterations,
                o->iters);
    vbm_write_result_free(&res);
    vbm_memory_free(mem);
    mem = NULL;

    /* (b) the DKM online writer with the same prior. */
    vbm_config_default(VBM_DKM, C, &cfg);
    cfg.rows = K;
    cfg.sigma_z2 = sigma_z2;
    cfg.u0 = 1.0;
    cfg.dkm_addr_var = 0.3;
    t0 = bench_now_s();
    if (vbm_memory_create(&cfg, R0, U0, &mem, &err) || vbm_write(mem, &codes, &wo, &res, &err)) {
        fprintf(stderr, "bench-fig2: DKM write failed (K=%d C=%d episode %d): %s\n", K, C, ep,
                err.msg);
        vbm_memory_free(mem);
        return -1;
    }
    out->secs_dkm = bench_now_s() - t0;
    out->elbo_dkm = res.elbo.per_frame;
    vbm_write_result_free(&res);
    vbm_memory_free(mem);
    out->ratio = out->elbo_dkm / out->elbo_vb;
    return 0;
}

static double median_of(double *x, int n)
{
    /* insertion sort: n is small */
    for (int i = 1; i < n; i++) {
        double v = x[i];
        int j = i - 1;
        while (j >= 0 && x[j] > v) {
            x[j + 1] = x[j];
            j--;
        }
        x[j + 1] = v;
    }
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static void print_grid(const char *title, const fig2_opts *o, const double *g)
{
    printf("\n%s\n", title);
    printf("%8s", "K \\ C");
    for (int j = 0; j < o->nC; j++)
        printf(" %9d", o->C[j]);
    printf("\n");
    for (int i = 0; i < o->nK; i++) {
        printf("%8d", o->K[i]);
        for (int j = 0; j < o->nC; j++)
            printf(" %9.4f", g[(size_t)i * o->nC + j]);
        printf("\n");
    }
}

int main(int argc, char **argv)
{
    fig2_opts o;
    if (parse_args(argc, argv, &o) != 0)
        return 2;
    int Kmax = o.K[o.nK - 1], Cmax = o.C[o.nC - 1];
    size_t ncell = (size_t)o.nK * o.nC;
    double *R0 = calloc((size_t)Kmax * Cmax, sizeof(double));
    double *U0 = calloc((size_t)Kmax * Kmax, sizeof(double));
    double *M = calloc((size_t)Kmax * Cmax, sizeof(double));
    double *Z = calloc((size_t)o.T * Cmax, sizeof(double));
    double *w = calloc((size_t)Kmax, sizeof(double));
    double *ratios = calloc((size_t)o.episodes, sizeof(double));
    double *med = calloc(ncell, sizeof(double));
    double *mn = calloc(ncell, sizeof(double));
    double *secs = calloc(ncell, sizeof(double));
    if (!R0 || !U0 || !M || !Z || !w || !ratios || !med || !mn || !secs) {
        fprintf(stderr, "bench-fig2: out of memory\n");
        return 1;
    }
    printf("bench-fig2: Fig. 2a, ELBO ratio DKM / VB (Gaussian memory, exact codes)\n");
    printf("T = %d, VB iterations = %d (tol 0), DKM address variance 0.3, sigma_z^2 = 1, U0 = I, "
           "R0 ~ N(0,1)\n",
           o.T, o.iters);
    printf("episodes per cell = %d, seed = %llu, VB init = %s\n", o.episodes,
           (unsigned long long)o.seed,
           o.init == VBM_INIT_PRIOR    ? "prior"
           : o.init == VBM_INIT_RANDOM ? "random"
                                       : "auto");
    if (o.csv)
        printf("csv: K,C,episode,elbo_vb_per_frame,elbo_dkm_per_frame,ratio,secs_vb,secs_dkm\n");
    fflush(stdout);

    double t_start = bench_now_s();
    long losses = 0, total = 0;
    int status = 0;
    for (int i = 0; i < o.nK && !status; i++)
        for (int j = 0; j < o.nC && !status; j++) {
            int K = o.K[i], C = o.C[j];
            double tc = bench_now_s();
            double lo = INFINITY;
            for (int ep = 0; ep < o.episodes; ep++) {
                episode_result r;
                if (run_episode(&o, K, C, ep, R0, U0, M, Z, w, &r) != 0) {
                    status = 1;
                    break;
                }
                ratios[ep] = r.ratio;
                if (r.ratio < lo)
                    lo = r.ratio;
                total++;
                if (!(r.ratio > 1.0))
                    losses++;
                if (o.csv)
                    printf("csv: %d,%d,%d,%.10g,%.10g,%.10g,%.4f,%.4f\n", K, C, ep, r.elbo_vb,
                           r.elbo_dkm, r.ratio, r.secs_vb, r.secs_dkm);
            }
            if (status)
                break;
            med[(size_t)i * o.nC + j] = median_of(ratios, o.episodes);
            mn[(size_t)i * o.nC + j] = lo;
            secs[(size_t)i * o.nC + j] = bench_now_s() - tc;
            fflush(stdout);
        }
    double elapsed = bench_now_s() - t_start;
    if (!status) {
        print_grid("median ratio ELBO_DKM / ELBO_VB (rows K, columns C; > 1 means VB is better)",
                   &o, med);
        print_grid("minimum ratio ELBO_DKM / ELBO_VB over the episodes of each cell", &o, mn);
        print_grid("seconds per cell (all episodes, VB + DKM)", &o, secs);

        /* Monotonicity of the median ratio: along each row (C increasing) and
         * each column (K increasing). */
        int row_ok = 1, col_ok = 1;
        printf("\n");
        for (int i = 0; i < o.nK; i++)
            for (int j = 1; j < o.nC; j++)
                if (med[(size_t)i * o.nC + j] < med[(size_t)i * o.nC + j - 1]) {
                    row_ok = 0;
                    printf("not monotone along row K=%d: C=%d -> C=%d: %.4f -> %.4f\n", o.K[i],
                           o.C[j - 1], o.C[j], med[(size_t)i * o.nC + j - 1],
                           med[(size_t)i * o.nC + j]);
                }
        for (int j = 0; j < o.nC; j++)
            for (int i = 1; i < o.nK; i++)
                if (med[(size_t)i * o.nC + j] < med[(size_t)(i - 1) * o.nC + j]) {
                    col_ok = 0;
                    printf("not monotone along column C=%d: K=%d -> K=%d: %.4f -> %.4f\n", o.C[j],
                           o.K[i - 1], o.K[i], med[(size_t)(i - 1) * o.nC + j],
                           med[(size_t)i * o.nC + j]);
                }
        printf("summary: VB won in every episode of every cell: %s (%ld of %ld episodes with ratio "
               "<= 1); "
               "median ratio non-decreasing along every row (C): %s, along every column (K): %s; "
               "total run time %.1f s\n",
               losses == 0 ? "yes" : "NO", losses, total, row_ok ? "yes" : "NO",
               col_ok ? "yes" : "NO", elapsed);
    }
    free(R0);
    free(U0);
    free(M);
    free(Z);
    free(w);
    free(ratios);
    free(med);
    free(mn);
    free(secs);
    return status;
}
