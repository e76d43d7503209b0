/* online.c -- owns bench-online: the ELBO gap between an episode written as N appends (online
 * VB, the posterior as the next piece's prior) and one batch write of the whole episode, and
 * what one refit after the appends recovers, for the gaussian, mixture, tree and DKM memories
 * on synthetic clustered codes in random and in drifting (cluster-sorted) order. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "numerics/rng.h"
#include "vbmem/vbmem.h"

typedef struct {
    int seeds, T, C, clusters, iters;
} online_opts;

static void usage(void)
{
    fprintf(stderr, "usage: bench-online [--seeds N] [--frames T] [--code-size C] "
                    "[--true-clusters N] [--iterations N]\n"
                    "T must be divisible by 8 and C by 2; T / 8 >= 10 (the mixture's and the "
                    "tree's H, for k-means++ on the first piece)\n");
}

/* T x C codes from n clusters: z_t = b_h + L_h^T v_t + 0.3 e_t, b_h ~ N(0, 9 I), L_h (2 x C),
 * v_t, e_t standard normal; h uniform, written to lab[t]. With sorted, the frames are ordered
 * by cluster (a stream that drifts from cluster to cluster). */
static void make_codes(const online_opts *o, uint64_t seed, int sorted, double *z, int *lab)
{
    int C = o->C, n = o->clusters;
    long T = o->T;
    rng_t r;
    rng_seed(&r, seed);
    double *b = malloc(sizeof(double) * n * C), *L = malloc(sizeof(double) * n * 2 * C);
    double *tmp = malloc(sizeof(double) * T * C);
    int *tl = malloc(sizeof(int) * T);
    for (int i = 0; i < n * C; i++)
        b[i] = 3.0 * rng_normal(&r);
    for (int i = 0; i < n * 2 * C; i++)
        L[i] = rng_normal(&r);
    for (long t = 0; t < T; t++) {
        int h = (int)rng_below(&r, (uint64_t)n);
        double v0 = rng_normal(&r), v1 = rng_normal(&r);
        tl[t] = h;
        for (int c = 0; c < C; c++)
            tmp[t * C + c] = b[h * C + c] + L[(h * 2) * C + c] * v0 + L[(h * 2 + 1) * C + c] * v1
                             + 0.3 * rng_normal(&r);
    }
    long out = 0;
    for (int h = 0; h < (sorted ? n : 1); h++)
        for (long t = 0; t < T; t++)
            if (!sorted || tl[t] == h) {
                memcpy(z + out * C, tmp + t * C, sizeof(double) * C);
                lab[out++] = tl[t];
            }
    free(b);
    free(L);
    free(tmp);
    free(tl);
}

/* ELBO per frame (base prior) of the three ways of writing the codes: one batch write, n
 * pieces (the first written, the rest appended), and the appends followed by one refit that
 * starts from their posterior (init current). Returns 0, or -1 with a message. */
static int run_case(const online_opts *o, vbm_kind kind, int n, uint64_t seed, const double *z,
                    double out[3])
{
    int C = o->C;
    long T = o->T, len = T / n;
    vbm_config cfg;
    vbm_config_default(kind, C, &cfg);
    cfg.retain_max = T;
    double *R0 = NULL;
    if (kind == VBM_DKM) { /* a random prior mean, as bench-fig2 gives the DKM writer */
        rng_t r;
        rng_seed(&r, seed + 77);
        R0 = malloc(sizeof(double) * cfg.rows * C);
        for (int i = 0; i < cfg.rows * C; i++)
            R0[i] = rng_normal(&r);
    }
    vbm_codes all = {T, C, z, NULL};
    vbm_write_opts wo;
    vbm_write_opts_default(&wo);
    wo.max_iter = o->iters;
    wo.seed = seed;
    vbm_memory *batch = NULL, *app = NULL;
    vbm_write_result res;
    vbm_error err;
    vbm_elbo e;
    int rc = -1;
    if (vbm_memory_create(&cfg, R0, NULL, &batch, &err) != VBM_OK
        || vbm_memory_create(&cfg, R0, NULL, &app, &err) != VBM_OK)
        goto done;
    if (vbm_write(batch, &all, &wo, &res, &err) != VBM_OK)
        goto done;
    vbm_write_result_free(&res);
    if (vbm_elbo_eval(batch, &all, &e, NULL, &err) != VBM_OK)
        goto done;
    out[0] = e.per_frame;
    for (int j = 0; j < n; j++) {
        vbm_codes piece = {len, C, z + (size_t)j * len * C, NULL};
        vbm_status st = j == 0 ? vbm_write(app, &piece, &wo, &res, &err)
                               : vbm_append(app, &piece, &wo, &res, &err);
        if (st != VBM_OK)
            goto done;
        vbm_write_result_free(&res);
    }
    if (vbm_elbo_eval(app, &all, &e, NULL, &err) != VBM_OK)
        goto done;
    out[1] = e.per_frame;
    wo.init = VBM_INIT_CURRENT;
    if (vbm_refit(app, NULL, &wo, &res, &err) != VBM_OK)
        goto done;
    vbm_write_result_free(&res);
    if (vbm_elbo_eval(app, &all, &e, NULL, &err) != VBM_OK)
        goto done;
    out[2] = e.per_frame;
    rc = 0;
done:
    if (rc != 0)
        fprintf(stderr, "bench-online: %s, %d pieces, seed %llu: %s\n", vbm_kind_name(kind), n,
                (unsigned long long)seed, err.msg);
    vbm_memory_free(batch);
    vbm_memory_free(app);
    free(R0);
    return rc;
}

int main(int argc, char **argv)
{
    online_opts o = {10, 128, 32, 6, 50};
    for (int i = 1; i < argc; i++) {
        int *dst = strcmp(argv[i], "--seeds") == 0           ? &o.seeds
                   : strcmp(argv[i], "--frames") == 0        ? &o.T
                   : strcmp(argv[i], "--code-size") == 0     ? &o.C
                   : strcmp(argv[i], "--true-clusters") == 0 ? &o.clusters
                   : strcmp(argv[i], "--iterations") == 0    ? &o.iters
                                                             : NULL;
        if (dst == NULL || i + 1 >= argc || bench_parse_int(argv[++i], 1, 100000, dst) != 0) {
            usage();
            return 2;
        }
    }
    if (o.T % 8 != 0 || o.C % 2 != 0 || o.T / 8 < 10) {
        usage();
        return 2;
    }
    static const vbm_kind kinds[] = {VBM_GAUSSIAN, VBM_MIXTURE, VBM_TREE, VBM_DKM};
    static const int ns[] = {1, 2, 4, 8};
    double *z = malloc(sizeof(double) * o.T * o.C);
    int *lab = malloc(sizeof(int) * o.T);
    printf("bench-online: episodes of T = %d codes (C = %d) from %d clusters, written as N "
           "pieces\n(the first by vbm_write, the rest by vbm_append), against one batch write; "
           "%d VB iterations\nper write, append and refit; default configurations (DKM: prior "
           "mean R0 ~ N(0, 1)); %d seeds.\nELBO per frame of the whole episode under the base "
           "prior (vbm_elbo_eval); gaps are\nagainst the batch write of the same seed: mean "
           "[min, max] over the seeds.\n",
           o.T, o.C, o.clusters, o.iters, o.seeds);
    for (int sorted = 0; sorted < 2; sorted++) {
        printf("\n%s\n\n", sorted ? "drifting order (frames sorted by cluster: each piece holds "
                                    "new clusters)"
                                  : "random order (pieces exchangeable)");
        printf("| kind | N | batch write | N appends | appends + refit | appends - batch | "
               "(appends + refit) - batch |\n|---|---|---|---|---|---|---|\n");
        for (int k = 0; k < 4; k++)
            for (int ni = 0; ni < 4; ni++) {
                double sum[3] = {0, 0, 0}, gmin = INFINITY, gmax = -INFINITY, rmin = INFINITY,
                       rmax = -INFINITY;
                for (int s = 0; s < o.seeds; s++) {
                    double v[3];
                    make_codes(&o, 1000 + (uint64_t)s, sorted, z, lab);
                    if (run_case(&o, kinds[k], ns[ni], 1000 + (uint64_t)s, z, v) != 0)
                        return 1;
                    for (int c = 0; c < 3; c++)
                        sum[c] += v[c];
                    gmin = fmin(gmin, v[1] - v[0]);
                    gmax = fmax(gmax, v[1] - v[0]);
                    rmin = fmin(rmin, v[2] - v[0]);
                    rmax = fmax(rmax, v[2] - v[0]);
                }
                double m[3];
                for (int c = 0; c < 3; c++)
                    m[c] = sum[c] / o.seeds;
                printf("| %s | %d | %.3f | %.3f | %.3f | %+.3f [%+.3f, %+.3f] | %+.3f [%+.3f, "
                       "%+.3f] |\n",
                       vbm_kind_name(kinds[k]), ns[ni], m[0], m[1], m[2], m[1] - m[0], gmin, gmax,
                       m[2] - m[0], rmin, rmax);
                fflush(stdout);
            }
    }
    free(z);
    free(lab);
    return 0;
}
