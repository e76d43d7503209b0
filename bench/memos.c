/* memos.c -- owns bench-memos: the cost of the tree memory's memos (docs/design/memos.md), the time
 * of one write plus one sample of T codes for memo_k = 0, 1, 4, 16, 64, each as a ratio to
 * memo_k = 0 measured in the same run (the k values interleaved, medians over the repeats;
 * thread CPU time, see cpu_now_s). With --joint-alpha-thousandths A every k runs under the
 * joint path prior (path_alpha A/1000; docs/design/joint-path-prior.md) and the
 * factorised memo_k = 0 runs too, as the comparator of the joint memo_k = 0. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "numerics/rng.h"
#include "vbmem/vbmem.h"

static const int KS[] = {0, 1, 4, 16, 64};

/* CPU seconds of the calling thread (for differences only): the machine is shared, and its
 * load moves wall times more than memos do; with OPENBLAS_NUM_THREADS=1 every step of a
 * write and a sample runs on this thread. */
static double cpu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
#define NK ((int)(sizeof KS / sizeof KS[0]))
#define NC (NK + 1) /* + the factorised memo_k = 0 when --joint-alpha-thousandths is given */

static void usage(void)
{
    fprintf(stderr, "usage: bench-memos [--reps N] [--frames T] [--code-size C] [--iterations N] "
                    "[--spread-tenths S] [--joint-alpha-thousandths A]\n"
                    "tree H = 10, K = 6, G = 2 (C even); codes from 6 clusters whose centres "
                    "have sd S/10 (default 5: overlapping clusters, spread-out q(s))\n");
}

/* T x C codes from 6 clusters: z_t = b_h + L_h^T v_t + 0.3 e_t, b_h ~ N(0, sd^2 I), L_h (2 x C),
 * v_t, e_t standard normal, h uniform. */
static void make_codes(long T, int C, double sd, uint64_t seed, double *z)
{
    int n = 6;
    rng_t r;
    rng_seed(&r, seed);
    double *b = malloc(sizeof(double) * n * C), *L = malloc(sizeof(double) * n * 2 * C);
    for (int i = 0; i < n * C; i++)
        b[i] = sd * rng_normal(&r);
    for (int i = 0; i < n * 2 * C; i++)
        L[i] = rng_normal(&r);
    for (long t = 0; t < T; t++) {
        int h = (int)rng_below(&r, (uint64_t)n);
        double v0 = rng_normal(&r), v1 = rng_normal(&r);
        for (int c = 0; c < C; c++)
            z[t * C + c] = b[h * C + c] + L[(h * 2) * C + c] * v0 + L[(h * 2 + 1) * C + c] * v1
                           + 0.3 * rng_normal(&r);
    }
    free(b);
    free(L);
}

int main(int argc, char **argv)
{
    int reps = 100, T = 64, C = 64, iters = 10, spread = 5, jalpha = 0;
    for (int i = 1; i < argc; i++) {
        int *dst = NULL;
        long lo = 1, hi = 100000;
        if (strcmp(argv[i], "--reps") == 0)
            dst = &reps;
        else if (strcmp(argv[i], "--frames") == 0)
            dst = &T, lo = 10;
        else if (strcmp(argv[i], "--code-size") == 0)
            dst = &C, lo = 2, hi = 4096;
        else if (strcmp(argv[i], "--iterations") == 0)
            dst = &iters, hi = 1000;
        else if (strcmp(argv[i], "--spread-tenths") == 0)
            dst = &spread, lo = 0, hi = 1000;
        else if (strcmp(argv[i], "--joint-alpha-thousandths") == 0)
            dst = &jalpha, lo = 1, hi = 1000000;
        if (!dst || i + 1 >= argc || bench_parse_int(argv[++i], lo, hi, dst) != 0
            || (dst == &C && C % 2 != 0)) {
            usage();
            return 2;
        }
    }
    double *z = malloc(sizeof(double) * (size_t)T * C),
           *out = malloc(sizeof(double) * (size_t)T * C);
    int nc = jalpha > 0 ? NC : NK;
    double *times[NC], elbo[NC] = {0}, paths[NC] = {0}, rep_elbo[NC] = {0};
    int above[NC] = {0}; /* repeats whose fit ended above memo_k 0's ELBO */
    for (int i = 0; i < nc; i++)
        times[i] = malloc(sizeof(double) * (size_t)reps);
    vbm_error err;
    for (int rep = 0; rep < reps; rep++) {
        make_codes(T, C, spread / 10.0, 1000 + (uint64_t)rep, z);
        vbm_codes codes = {T, C, z, NULL};
        for (int j = 0; j < nc; j++) {
            int i = (rep + j) % nc; /* rotate the order: no k always runs first */
            vbm_config cfg;
            vbm_config_default(VBM_TREE, C, &cfg);
            cfg.memo_k = i < NK ? KS[i] : 0;
            if (jalpha > 0 && i < NK) {
                cfg.path_prior = VBM_PATH_JOINT;
                cfg.path_alpha = jalpha / 1000.0;
            }
            cfg.s_floor = 0.0; /* Theorem 5's q(s) exactly: the floor would lower the
                                  mean-field ELBO a little and favour the memos */
            vbm_memory *m = NULL;
            if (vbm_memory_create(&cfg, NULL, NULL, &m, &err) != VBM_OK) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            vbm_write_opts o;
            vbm_write_opts_default(&o);
            o.max_iter = iters;
            o.seed = 7 + (uint64_t)rep;
            vbm_write_result res;
            double t0 = cpu_now_s();
            if (vbm_write(m, &codes, &o, &res, &err) != VBM_OK
                || vbm_sample(m, T, 100 + (uint64_t)rep, -1, out, NULL, &err) != VBM_OK) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            times[i][rep] = cpu_now_s() - t0;
            elbo[i] += res.elbo.per_frame / reps;
            rep_elbo[i] = res.elbo.per_frame;
            long held = 0;
            for (long t = 0; t < m->n_memos; t++)
                held += m->memo_n[t];
            paths[i] += (double)held / T / reps;
            vbm_write_result_free(&res);
            vbm_memory_free(m);
        }
        for (int i = 1; i < nc; i++)
            above[i] += rep_elbo[i] > rep_elbo[0];
    }
    double load[3] = {0};
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
            load[0] = load[1] = load[2] = NAN;
        fclose(f);
    }
    printf("bench-memos: tree H=10 K=6 G=2 s_floor=0, T=%d C=%d, %d VB iterations, write + sample "
           "of %d codes, %d repeats (cluster sd %.1f); load average %.2f %.2f %.2f\n",
           T, C, iters, T, reps, spread / 10.0, load[0], load[1], load[2]);
    if (jalpha > 0)
        printf("path prior: joint, path_alpha %.3f (the last row: the factorised memo_k 0)\n",
               jalpha / 1000.0);
    printf("%7s %12s %10s %14s %16s %14s\n", "memo_k", "median cpu ms", "ratio k/0",
           "ELBO per frame", "paths per memo", "ELBO above k=0");
    double base = bench_median(times[0], reps);
    for (int i = 0; i < nc; i++) {
        double med = i == 0 ? base : bench_median(times[i], reps);
        printf("%6d%s %12.3f %10.2f %14.3f %16.2f %9d/%d\n", i < NK ? KS[i] : 0, i < NK ? " " : "f",
               1e3 * med, med / base, elbo[i], paths[i], above[i], reps);
    }
    for (int i = 0; i < nc; i++)
        free(times[i]);
    free(z);
    free(out);
    return 0;
}
