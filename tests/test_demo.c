/* test_demo.c -- shows that memory works on the bundled model: over 20
 * Fashion-MNIST test-set episodes with fixed seeds, (1) specificity of samples
 * from a written memory and (2) completion of half-masked cues by a 5-step
 * iterative read (App. G.2), each against its comparator. Prints the figures
 * recorded in docs/design/trainer.md. Needs the Debian package dataset-fashion-mnist. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "nets/nets.h"
#include "numerics/rng.h"
#include "vbmem/vbmem.h"

#ifndef DEMO_MODEL
#define DEMO_MODEL "models/fashion-mnist-mixture-v2.safetensors"
#endif
#define FASHION_TEST "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
#define T            64
#define READ_STEPS   5

static unsigned char *images; /* n x 784 */
static long n_images;
static nets_model *model;
static const nets_info *info;
/* episodes of both tests: 20 (the recorded figures), fewer with VBMEM_DEMO_EPISODES (2..20; the
 * ASan build reads 4: its decodes take minutes); set once in main */
static int episodes = 20;

static int load_idx(const char *path)
{
    gzFile f = gzopen(path, "rb");
    if (!f)
        return -1;
    unsigned char hdr[16];
    if (gzread(f, hdr, 16) != 16 || hdr[2] != 0x08 || hdr[3] != 3) {
        gzclose(f);
        return -1;
    }
    long n = ((long)hdr[4] << 24) | (hdr[5] << 16) | (hdr[6] << 8) | hdr[7];
    long rows = hdr[11], cols = hdr[15];
    if (rows != 28 || cols != 28 || n < 2 * T) {
        gzclose(f);
        return -1;
    }
    images = malloc((size_t)n * 784);
    if (!images || gzread(f, images, (unsigned)(n * 784)) != (int)(n * 784)) {
        gzclose(f);
        return -1;
    }
    gzclose(f);
    n_images = n;
    return 0;
}

/* Episode: T distinct test images chosen by the seeded generator; pixels at
 * their bin centres (v + 0.5) / 256. */
static void pick(rng_t *rng, long *idx, const long *avoid, int n_avoid)
{
    for (int t = 0; t < T; t++) {
        for (;;) {
            long j = (long)rng_below(rng, (uint64_t)n_images);
            int dup = 0;
            for (int u = 0; u < t && !dup; u++)
                dup = idx[u] == j;
            for (int u = 0; u < n_avoid && !dup; u++)
                dup = avoid[u] == j;
            if (!dup) {
                idx[t] = j;
                break;
            }
        }
    }
}

static void to_float(const long *idx, float *x)
{
    for (int t = 0; t < T; t++)
        for (int p = 0; p < 784; p++)
            x[t * 784 + p] = ((float)images[idx[t] * 784 + p] + 0.5f) / 256.0f;
}

static double dist2(const float *a, const float *b)
{
    double d = 0.0;
    for (int p = 0; p < 784; p++)
        d += ((double)a[p] - b[p]) * ((double)a[p] - b[p]);
    return d;
}

/* Mean over the n images in s of the Euclidean distance to the nearest of E's T. */
static double mean_nn(const float *s, int n, const float *E)
{
    double tot = 0.0;
    for (int i = 0; i < n; i++) {
        double best = INFINITY;
        for (int t = 0; t < T; t++)
            best = fmin(best, dist2(s + (size_t)i * 784, E + (size_t)t * 784));
        tot += sqrt(best);
    }
    return tot / n;
}

/* Fraction of the T images in r whose nearest image in E is E's image of the same index. */
static double own_nearest(const float *r, const float *E)
{
    int hits = 0;
    for (int i = 0; i < T; i++) {
        int arg = -1;
        double best = INFINITY;
        for (int t = 0; t < T; t++) {
            double d = dist2(r + (size_t)i * 784, E + (size_t)t * 784);
            if (d < best) {
                best = d;
                arg = t;
            }
        }
        hits += arg == i;
    }
    return (double)hits / T;
}

static void memory_config(vbm_config *cfg)
{
    vbm_kind kind;
    vbm_error err;
    ck_assert_int_eq(vbm_kind_parse(info->kind, &kind, &err), VBM_OK);
    vbm_config_default(kind, info->code_size, &cfg[0]);
    cfg->clusters = info->clusters;
    cfg->rows = info->rows;
    cfg->sigma_z2 = info->sigma_z2;
    cfg->u0 = info->u0;
    cfg->sigma2_b0 = info->sigma2_b0;
    cfg->s_floor = info->s_floor;
}

static void decode_mean(const double *z, long n, float *out)
{
    vbm_error nerr;
    ck_assert_msg(nets_decode(model, z, n, out, NULL, &nerr) == VBM_OK, "%s", nerr.msg);
    for (long i = 0; i < n * 784; i++)
        out[i] = fminf(1.0f, fmaxf(0.0f, out[i]));
}

START_TEST(test_memory_works)
{
    ck_assert_int_eq(info->channels * info->height * info->width, 784);
    int C = info->code_size;
    float *A = malloc(sizeof(float) * T * 784), *B = malloc(sizeof(float) * T * 784);
    float *S = malloc(sizeof(float) * T * 784), *X = malloc(sizeof(float) * T * 784);
    double *mu = malloc(sizeof(double) * T * C), *s2 = malloc(sizeof(double) * T * C),
           *z = malloc(sizeof(double) * T * C);
    long ia[T], ib[T];
    double spec_mem = 0, spec_prior = 0, comp_mem = 0, comp_ae = 0;
    int spec_mem_wins = 0;
    vbm_error nerr;
    vbm_error err;
    for (int e = 0; e < episodes; e++) {
        rng_t rng;
        rng_seed(&rng, 1000 + (uint64_t)e);
        pick(&rng, ia, NULL, 0);
        pick(&rng, ib, ia, T);
        to_float(ia, A);
        to_float(ib, B);
        ck_assert_msg(nets_encode(model, A, T, mu, s2, &nerr) == VBM_OK, "%s", nerr.msg);
        vbm_config cfg;
        memory_config(&cfg);
        vbm_memory *mem = NULL, *prior = NULL;
        ck_assert_msg(vbm_memory_create(&cfg, NULL, NULL, &mem, &err) == VBM_OK, "%s", err.msg);
        ck_assert_msg(vbm_memory_create(&cfg, NULL, NULL, &prior, &err) == VBM_OK, "%s", err.msg);
        vbm_codes codes = {T, C, mu, s2};
        vbm_write_opts opts;
        vbm_write_opts_default(&opts);
        opts.max_iter = info->iterations;
        opts.seed = 7 + (uint64_t)e;
        vbm_write_result res;
        ck_assert_msg(vbm_write(mem, &codes, &opts, &res, &err) == VBM_OK, "%s", err.msg);
        vbm_write_result_free(&res);

        /* (1) specificity: 64 samples from memory vs 64 from the prior (no memory). */
        ck_assert_msg(vbm_sample(mem, T, 100 + (uint64_t)e, -1, z, NULL, &err) == VBM_OK, "%s",
                      err.msg);
        decode_mean(z, T, S);
        double rm = mean_nn(S, T, A) / mean_nn(S, T, B);
        ck_assert_msg(vbm_sample(prior, T, 100 + (uint64_t)e, -1, z, NULL, &err) == VBM_OK, "%s",
                      err.msg);
        decode_mean(z, T, S);
        double rp = mean_nn(S, T, A) / mean_nn(S, T, B);
        spec_mem += rm / episodes;
        spec_prior += rp / episodes;
        spec_mem_wins += rm < rp;

        /* (2) completion: the bottom half of every image of A masked (set to 0). */
        for (int t = 0; t < T; t++)
            for (int p = 14 * 28; p < 784; p++)
                X[t * 784 + p] = 0.0f;
        for (int t = 0; t < T; t++)
            memcpy(X + t * 784, A + t * 784, sizeof(float) * 14 * 28);
        /* comparator: a plain encode-decode of the cue, no memory */
        ck_assert_msg(nets_encode(model, X, T, mu, s2, &nerr) == VBM_OK, "%s", nerr.msg);
        decode_mean(mu, T, S);
        comp_ae += own_nearest(S, A) / episodes;
        /* iterative read: encode -> read (address, draw Omega, y, z) -> decode, 5 times */
        for (int step = 0; step < READ_STEPS; step++) {
            ck_assert_msg(nets_encode(model, X, T, mu, s2, &nerr) == VBM_OK, "%s", nerr.msg);
            vbm_codes q = {T, C, mu, s2};
            ck_assert_msg(
                vbm_read(mem, &q, NULL, 500 + 10 * (uint64_t)e + (uint64_t)step, z, NULL, &err)
                    == VBM_OK,
                "%s", err.msg);
            decode_mean(z, T, X);
        }
        comp_mem += own_nearest(X, A) / episodes;
        vbm_memory_free(mem);
        vbm_memory_free(prior);
    }
    printf("demo: %d episodes of %d Fashion-MNIST test images, model %s\n", episodes, T,
           DEMO_MODEL);
    printf("demo: specificity  NN-distance ratio A/B  memory %.3f  prior (no memory) %.3f  (memory "
           "lower in %d/%d)\n",
           spec_mem, spec_prior, spec_mem_wins, episodes);
    printf("demo: completion   own-image nearest  memory read (%d steps) %.3f  encode-decode %.3f  "
           "chance %.3f\n",
           READ_STEPS, comp_mem, comp_ae, 1.0 / T);
    fflush(stdout);
    ck_assert_msg(spec_mem < 1.0, "memory samples are not closer to A than to B (ratio %.3f)",
                  spec_mem);
    ck_assert_msg(spec_mem < spec_prior, "memory ratio %.3f not below the prior's %.3f", spec_mem,
                  spec_prior);
    ck_assert_msg(comp_mem > 1.0 / T, "completion %.3f not above chance", comp_mem);
    ck_assert_msg(comp_mem > comp_ae, "completion %.3f not above encode-decode %.3f", comp_mem,
                  comp_ae);
    free(A);
    free(B);
    free(S);
    free(X);
    free(mu);
    free(s2);
    free(z);
}
END_TEST

/* Parse a list of memo_k values ("0,1,16") from env variable name into ks[*n..8),
 * each tagged joint; an unset variable adds the defaults def[0..ndef). */
static void demo_ks(const char *name, const int *def, int ndef, int joint, int *ks, int *jt, int *n)
{
    const char *env = getenv(name);
    if (!env) {
        for (int i = 0; i < ndef && *n < 8; i++) {
            jt[*n] = joint;
            ks[(*n)++] = def[i];
        }
        return;
    }
    for (const char *p = env; *p && *n < 8;) {
        char *end;
        long v = strtol(p, &end, 10);
        ck_assert_msg(end != p && v >= 0 && v <= VBM_MAX_MEMO_K, "bad %s \"%s\"", name, env);
        ck_assert_msg(*end == ',' || *end == '\0', "bad %s \"%s\"", name, env);
        jt[*n] = joint;
        ks[(*n)++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
}

/* The ELBO per frame of codes on mem's q(Omega) and q(pi) with the mean-field q(s):
 * a write of a memo-free copy with no iteration, started from mem's posterior. */
static double demo_mean_field_same_posterior(const vbm_memory *mem, const vbm_codes *codes)
{
    vbm_memory *c = NULL;
    vbm_error err;
    ck_assert_msg(vbm_memory_clone(mem, &c, &err) == VBM_OK, "%s", err.msg);
    free(c->memo_n);
    free(c->memo_paths);
    free(c->memo_scores);
    c->memo_n = NULL;
    c->memo_paths = NULL;
    c->memo_scores = NULL;
    c->n_memos = 0;
    c->cfg.memo_k = 0;
    vbm_write_opts o;
    vbm_write_result res;
    vbm_write_opts_default(&o);
    o.max_iter = 0;
    o.init = VBM_INIT_CURRENT;
    ck_assert_msg(vbm_write(c, codes, &o, &res, &err) == VBM_OK, "%s", err.msg);
    double e = res.elbo.per_frame;
    vbm_write_result_free(&res);
    vbm_memory_free(c);
    return e;
}

/* The tree memory (Theorem 5, G = 2 halves of the code, the bundled model's H, K and
 * noise) on the same episodes and seeds as test_memory_works: the specificity ratio of
 * its samples without memos (App. G.1 pseudocounts of hard paths) and with memos of
 * memo_k joint paths per frame (docs/design/memos.md; the values: DEMO_MEMO_KS below), and
 * under the joint path prior (path_prior joint, path_alpha 1 or DEMO_PATH_ALPHA;
 * docs/design/joint-path-prior.md; the values: DEMO_JOINT_KS), each against the factorised memo_k
 * 0.
 * For a joint fit with memos it also prints the mean field's ELBO on the same q(Omega)
 * and q(pi). Prints the figures of docs/design/memos.md and its joint subsection; fails if a
 * memory's samples are not nearer A than B on average. */
START_TEST(test_tree_memos_specificity)
{
    /* memo_k values: DEMO_MEMO_KS, e.g. "0,1,4,16,64" (the figures of docs/design/memos.md); by
     * default
     * 0, 1 and 16; then the joint prior's: DEMO_JOINT_KS, e.g. "0,16", by default 16;
     * kept small for the suite's decoder work (ASan build included) */
    static const int def_f[] = {0, 1, 16}, def_j[] = {16};
    int ks[8], jt[8], NK = 0;
    demo_ks("DEMO_MEMO_KS", def_f, 3, 0, ks, jt, &NK);
    ck_assert_msg(NK > 0 && ks[0] == 0, "DEMO_MEMO_KS must start with 0 (the comparator)");
    demo_ks("DEMO_JOINT_KS", def_j, 1, 1, ks, jt, &NK);
    int C = info->code_size;
    float *A = malloc(sizeof(float) * T * 784), *B = malloc(sizeof(float) * T * 784);
    float *S = malloc(sizeof(float) * T * 784);
    double *mu = malloc(sizeof(double) * T * C), *s2 = malloc(sizeof(double) * T * C),
           *z = malloc(sizeof(double) * T * C);
    long ia[T], ib[T];
    double spec[8] = {0}, elbo[8] = {0}, d1[8] = {0}, d2[8] = {0}, gain[8] = {0};
    int wins[8] = {0}, above[8] = {0};
    vbm_error nerr, err;
    for (int e = 0; e < episodes; e++) {
        rng_t rng;
        rng_seed(&rng, 1000 + (uint64_t)e);
        pick(&rng, ia, NULL, 0);
        pick(&rng, ib, ia, T);
        to_float(ia, A);
        to_float(ib, B);
        ck_assert_msg(nets_encode(model, A, T, mu, s2, &nerr) == VBM_OK, "%s", nerr.msg);
        vbm_codes codes = {T, C, mu, s2};
        double r0 = 0.0;
        for (int i = 0; i < NK; i++) {
            vbm_config cfg;
            memory_config(&cfg);
            cfg.kind = VBM_TREE;
            cfg.groups = 2;
            cfg.memo_k = ks[i];
            cfg.path_prior = jt[i] ? VBM_PATH_JOINT : VBM_PATH_FACTORISED;
            if (getenv("DEMO_PATH_ALPHA")) /* else vbm_config_default's 1 */
                cfg.path_alpha = atof(getenv("DEMO_PATH_ALPHA"));
            vbm_memory *mem = NULL;
            ck_assert_msg(vbm_memory_create(&cfg, NULL, NULL, &mem, &err) == VBM_OK, "%s", err.msg);
            vbm_write_opts opts;
            vbm_write_opts_default(&opts);
            opts.max_iter = info->iterations;
            opts.seed = 7 + (uint64_t)e;
            vbm_write_result res;
            ck_assert_msg(vbm_write(mem, &codes, &opts, &res, &err) == VBM_OK, "%s", err.msg);
            elbo[i] += res.elbo.per_frame / episodes;
            if (jt[i] && ks[i] > 0) { /* memos against the mean field on the same posterior */
                double g = res.elbo.per_frame - demo_mean_field_same_posterior(mem, &codes);
                gain[i] += g / episodes;
                above[i] += g > 0.0;
            }
            vbm_write_result_free(&res);
            ck_assert_msg(vbm_sample(mem, T, 100 + (uint64_t)e, -1, z, NULL, &err) == VBM_OK, "%s",
                          err.msg);
            decode_mean(z, T, S);
            double r = mean_nn(S, T, A) / mean_nn(S, T, B);
            if (i == 0)
                r0 = r;
            spec[i] += r / episodes;
            wins[i] += r < r0;
            d1[i] += (r - r0) / episodes; /* paired difference to memo_k 0: mean, mean square */
            d2[i] += (r - r0) * (r - r0) / episodes;
            vbm_memory_free(mem);
        }
    }
    for (int i = 0; i < NK; i++) {
        double se = sqrt(fmax(0.0, d2[i] - d1[i] * d1[i]) / (episodes - 1));
        printf("demo: tree G=2 %-10s memo_k %2d  specificity %.3f  (below factorised memo_k 0 in "
               "%2d/%d; paired difference %+.4f +- %.4f)  ELBO per frame %.2f",
               jt[i] ? "joint" : "factorised", ks[i], spec[i], wins[i], episodes, d1[i], se,
               elbo[i]);
        if (jt[i] && ks[i] > 0)
            printf("  memos - mean field on the same posterior %+.4f (above in %d/%d)", gain[i],
                   above[i], episodes);
        printf("\n");
        ck_assert_msg(spec[i] < 1.0, "tree %s memo_k %d: samples not nearer A than B (%.3f)",
                      jt[i] ? "joint" : "factorised", ks[i], spec[i]);
    }
    fflush(stdout);
    free(A);
    free(B);
    free(S);
    free(mu);
    free(s2);
    free(z);
}
END_TEST

int main(void)
{
    const char *env = getenv("VBMEM_DEMO_EPISODES");
    if (env != NULL) {
        char *end;
        long v = strtol(env, &end, 10);
        if (end == env || *end != '\0' || v < 2 || v > 20) {
            fprintf(stderr, "VBMEM_DEMO_EPISODES \"%s\": an integer from 2 to 20\n", env);
            return 1;
        }
        episodes = (int)v;
    }
    if (load_idx(FASHION_TEST) != 0) {
        fprintf(stderr, "cannot read %s (apt-get install dataset-fashion-mnist)\n", FASHION_TEST);
        return 1;
    }
    vbm_error nerr;
    if (nets_model_load(DEMO_MODEL, &model, &nerr) != VBM_OK) {
        fprintf(stderr, "%s\n", nerr.msg);
        free(images);
        return 1;
    }
    info = nets_model_info(model);
    Suite *s = suite_create("demo");
    TCase *tc = tcase_create("bundled-model");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_memory_works);
    tcase_add_test(tc, test_tree_memos_specificity);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    nets_model_free(model);
    free(images);
    return failed ? 1 : 0;
}
