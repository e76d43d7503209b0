/* test_rpm.c -- Check tests of the served RPM (src/nets/gp.c, src/nets/rpm.c, and the engine's
 * way to it, eng_model_rpm_infer): the GP posterior against brute-force dense Gaussian algebra
 * written here, and (when present) the model file and infer against the PyTorch golden file of
 * train/golden_rpm.py. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/hosted.h"
#include "nets/gp.h"
#include "nets/nets.h"
#include "nets/rpm.h"
#include "nets/safetensors.h"
#include "numerics/rng.h"

/* ---- brute force: dense Gauss-Jordan with partial pivoting ---- */

/* Solve A X = B for n x n A and n x m B (both row-major, copied); X into out. Returns 0, or -1
 * when A is singular to working precision. */
static int gj_solve(int n, int m, const double *A, const double *B, double *out)
{
    double *a = malloc(sizeof(double) * (size_t)n * n), *x = malloc(sizeof(double) * (size_t)n * m);
    memcpy(a, A, sizeof(double) * (size_t)n * n);
    memcpy(x, B, sizeof(double) * (size_t)n * m);
    int rc = 0;
    for (int c = 0; c < n && rc == 0; c++) {
        int p = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(a[r * n + c]) > fabs(a[p * n + c]))
                p = r;
        if (fabs(a[p * n + c]) < 1e-300) {
            rc = -1;
            break;
        }
        for (int k = 0; k < n; k++) {
            double t = a[c * n + k];
            a[c * n + k] = a[p * n + k];
            a[p * n + k] = t;
        }
        for (int k = 0; k < m; k++) {
            double t = x[c * m + k];
            x[c * m + k] = x[p * m + k];
            x[p * m + k] = t;
        }
        double piv = a[c * n + c];
        for (int r = 0; r < n; r++) {
            if (r == c)
                continue;
            double f = a[r * n + c] / piv;
            for (int k = 0; k < n; k++)
                a[r * n + k] -= f * a[c * n + k];
            for (int k = 0; k < m; k++)
                x[r * m + k] -= f * x[c * m + k];
        }
    }
    for (int r = 0; r < n && rc == 0; r++)
        for (int k = 0; k < m; k++)
            out[r * m + k] = x[r * m + k] / a[r * n + r];
    free(a);
    free(x);
    return rc;
}

/* An RBF kernel on steps 0..T-1 plus jitter on the diagonal. */
static void rbf(int T, double var, double len, double jitter, double *K)
{
    for (int i = 0; i < T; i++)
        for (int k = 0; k < T; k++)
            K[i * T + k] =
                var * exp(-0.5 * (i - k) * (i - k) / (len * len)) + (i == k ? jitter : 0);
}

static void assert_close(const char *what, int t, double got, double want, double rtol)
{
    ck_assert_msg(fabs(got - want) <= rtol * (fabs(want) + 1e-3), "%s[%d]: %.12g, expected %.12g",
                  what, t, got, want);
}

/* Positive d: the posterior is the prior conditioned on pseudo-observations y = b / d with noise
 * variances 1 / d. Brute force: the joint Gaussian of (z, y), cov(z, y) = K, cov(y) = K + D^-1;
 * mean = K (K + D^-1)^-1 y, cov = K - K (K + D^-1)^-1 K. */
START_TEST(test_gp_conditioning)
{
    for (int T = 1; T <= 9; T += 2) {
        rng_t r;
        rng_seed(&r, 100 + (uint64_t)T);
        double *K = malloc(sizeof(double) * T * T), *C = malloc(sizeof(double) * T * T);
        double *KK = malloc(sizeof(double) * T * T), *Y = malloc(sizeof(double) * T * (T + 1));
        double d[9], b[9], y[9], mean[9], var[9];
        rbf(T, 1.0 + rng_uniform(&r), 1.0 + 3.0 * rng_uniform(&r), 1e-4, K);
        for (int t = 0; t < T; t++) {
            d[t] = 0.1 + 5.0 * rng_uniform(&r);
            b[t] = rng_normal(&r) * d[t];
            y[t] = b[t] / d[t];
        }
        ck_assert_int_eq(gp_posterior(T, K, d, b, mean, var, NULL, NULL), VBM_OK);
        /* C = K + D^-1; solve C [X | x] = [K | y] */
        double *RHS = malloc(sizeof(double) * T * (T + 1));
        for (int i = 0; i < T; i++) {
            for (int k = 0; k < T; k++) {
                C[i * T + k] = K[i * T + k] + (i == k ? 1.0 / d[i] : 0.0);
                RHS[i * (T + 1) + k] = K[i * T + k];
            }
            RHS[i * (T + 1) + T] = y[i];
        }
        ck_assert_int_eq(gj_solve(T, T + 1, C, RHS, Y), 0);
        for (int t = 0; t < T; t++) {
            double m = 0, v = K[t * T + t];
            for (int k = 0; k < T; k++) {
                m += K[t * T + k] * Y[k * (T + 1) + T];
                v -= K[t * T + k] * Y[k * (T + 1) + t];
            }
            assert_close("mean", t, mean[t], m, 1e-7);
            assert_close("var", t, var[t], v, 1e-7);
            ck_assert(var[t] > 0);
        }
        free(K);
        free(C);
        free(KK);
        free(Y);
        free(RHS);
    }
}
END_TEST

/* Negative d (the RPM's -J / K_tt term): the dense precision P = K^-1 + diag(d) formed with an
 * explicit inverse here (test code only), then P^-1 and P^-1 b by Gauss-Jordan. */
START_TEST(test_gp_negative_d)
{
    const int T = 7;
    rng_t r;
    rng_seed(&r, 7);
    double K[49], I[49], Ki[49], P[49], S[49], d[7], b[7], mean[7], var[7];
    rbf(T, 2.0, 2.5, 1e-3, K);
    for (int i = 0; i < T * T; i++)
        I[i] = (i % (T + 1)) == 0;
    ck_assert_int_eq(gj_solve(T, T, K, I, Ki), 0);
    for (int t = 0; t < T; t++) {
        /* J = 3 factors of precision lam each, minus J / K_tt */
        double lam = 0.2 + rng_uniform(&r);
        d[t] = 3 * lam - 3.0 / K[t * T + t];
        b[t] = rng_normal(&r);
    }
    ck_assert(d[0] < 0 || d[1] < 0 || d[2] < 0 || d[3] < 0); /* the case this test is about */
    for (int i = 0; i < T * T; i++)
        P[i] = Ki[i] + ((i % (T + 1)) == 0 ? d[i / T] : 0.0);
    ck_assert_int_eq(gj_solve(T, T, P, I, S), 0);
    ck_assert_int_eq(gp_posterior(T, K, d, b, mean, var, NULL, NULL), VBM_OK);
    for (int t = 0; t < T; t++) {
        double m = 0;
        for (int k = 0; k < T; k++)
            m += S[t * T + k] * b[k];
        assert_close("mean", t, mean[t], m, 1e-6);
        assert_close("var", t, var[t], S[t * T + t], 1e-6);
    }
    /* with a caller's workspace: the same bits */
    double *ws = malloc(sizeof(double) * gp_workspace(T)), m2[7], v2[7];
    ck_assert_int_eq(gp_posterior(T, K, d, b, m2, v2, ws, NULL), VBM_OK);
    ck_assert(memcmp(m2, mean, sizeof mean) == 0 && memcmp(v2, var, sizeof var) == 0);
    free(ws);
}
END_TEST

START_TEST(test_gp_failures)
{
    double K[9], d[3] = {1, 1, 1}, b[3] = {0, 1, 0}, mean[3], var[3];
    vbm_error err;
    rbf(3, 1.0, 1.0, 1e-6, K);
    ck_assert_int_eq(gp_posterior(0, K, d, b, mean, var, NULL, &err), VBM_EINVAL);
    ck_assert_msg(strstr(err.msg, "T = 0") != NULL, "%s", err.msg);
    ck_assert_int_eq(gp_posterior(GP_MAX_T + 1, K, d, b, mean, var, NULL, &err), VBM_EINVAL);
    ck_assert_int_eq(gp_posterior(3, K, NULL, b, mean, var, NULL, &err), VBM_EINVAL);
    b[1] = NAN;
    ck_assert_int_eq(gp_posterior(3, K, d, b, mean, var, NULL, &err), VBM_EINVAL);
    ck_assert_msg(strstr(err.msg, "not finite") != NULL, "%s", err.msg);
    b[1] = 1;
    /* a posterior precision that is not positive definite */
    d[1] = -50;
    ck_assert_int_eq(gp_posterior(3, K, d, b, mean, var, NULL, &err), VBM_ENUMERIC);
    ck_assert_msg(strstr(err.msg, "posterior precision is not positive definite") != NULL, "%s",
                  err.msg);
    d[1] = 1;
    /* a prior covariance that is not */
    K[4] = -1;
    ck_assert_int_eq(gp_posterior(3, K, d, b, mean, var, NULL, &err), VBM_ENUMERIC);
    ck_assert_msg(strstr(err.msg, "prior covariance is not positive definite") != NULL, "%s",
                  err.msg);
    K[4] = INFINITY;
    ck_assert_int_eq(gp_posterior(3, K, d, b, mean, var, NULL, &err), VBM_EINVAL);
}
END_TEST

/* ---- the rpm model file and inference, against train/golden_rpm.py ---- */

static char *data_path(const char *name)
{
    const char *dir = getenv("VBMEM_TEST_DATA");
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", dir ? dir : "tests/data", name);
    return buf;
}

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
    *len = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

/* The golden file rebuilt with architecture arch (JSON text; NULL: unchanged), metadata key
 * drop removed (NULL: none) and, with extra, one more tensor "extra.weight". */
static unsigned char *rebuild(const char *arch, const char *drop, int extra, size_t *len)
{
    size_t n;
    unsigned char *buf = read_all(data_path("golden_rpm.safetensors"), &n);
    sft_file f;
    memset(&f, 0, sizeof f);
    ck_assert_int_eq(sft_parse(buf, n, &f, NULL), VBM_OK);
    free(buf);
    sft_input in[64];
    ck_assert(f.n_tensors < 63);
    for (size_t i = 0; i < f.n_tensors; i++)
        in[i] = (sft_input){f.tensors[i].name, f.tensors[i].ndim, f.tensors[i].shape,
                            f.tensors[i].data};
    static const int64_t xs[1] = {2};
    static const float xv[2] = {1, 2};
    size_t nt = f.n_tensors;
    if (extra)
        in[nt++] = (sft_input){"extra.weight", 1, xs, xv};
    const char *meta[16];
    size_t nm = 0;
    for (size_t i = 0; i < f.n_meta; i++) {
        if (drop && strcmp(f.meta_keys[i], drop) == 0)
            continue;
        meta[2 * nm] = f.meta_keys[i];
        meta[2 * nm + 1] =
            arch && strcmp(f.meta_keys[i], "vbmem.architecture") == 0 ? arch : f.meta_values[i];
        nm++;
    }
    unsigned char *out = NULL;
    ck_assert_int_eq(sft_build(in, nt, meta, nm, &out, len, NULL), VBM_OK);
    sft_free(&f);
    return out;
}

/* The golden architecture with one change: path "a.b" (object keys) set to the JSON value. */
static char *arch_with(const char *key, const char *sub, const char *value)
{
    size_t n;
    unsigned char *buf = read_all(data_path("golden_rpm.safetensors"), &n);
    sft_file f;
    memset(&f, 0, sizeof f);
    ck_assert_int_eq(sft_parse(buf, n, &f, NULL), VBM_OK);
    free(buf);
    json_t *a = json_loads(sft_meta(&f, "vbmem.architecture"), 0, NULL);
    json_t *v = json_loads(value, JSON_DECODE_ANY, NULL);
    ck_assert(a != NULL && v != NULL);
    json_object_set_new(sub ? json_object_get(a, sub) : a, key, v);
    char *s = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    sft_free(&f);
    return s;
}

static void expect_reject(const char *arch, const char *drop, int extra, const char *want)
{
    size_t len;
    unsigned char *buf = rebuild(arch, drop, extra, &len);
    nets_rpm *m = NULL;
    vbm_error err;
    ck_assert_int_eq(nets_rpm_load_buffer(buf, len, &m, &err), VBM_EFORMAT);
    ck_assert(m == NULL);
    ck_assert_msg(strstr(err.msg, want) != NULL, "message \"%s\" lacks \"%s\"", err.msg, want);
    free(buf);
}

START_TEST(test_rpm_file)
{
    size_t len;
    unsigned char *buf = rebuild(NULL, NULL, 0, &len);
    nets_rpm *m = NULL;
    vbm_error err;
    ck_assert_int_eq(nets_rpm_load_buffer(buf, len, &m, &err), VBM_OK);
    const nets_rpm_info *in = nets_rpm_info_of(m);
    ck_assert_int_eq(in->factors, 3);
    ck_assert_int_eq(in->obs_size, 1);
    ck_assert_int_eq(in->latent, 1);
    ck_assert_int_eq(in->min_steps, 2);
    ck_assert_int_eq(in->max_steps, 64);
    ck_assert_int_eq(in->shared, 0);
    nets_rpm_free(m);
    /* the encoder/decoder loader refuses it, naming the kind */
    nets_model *vae = NULL;
    ck_assert_int_eq(nets_model_load_buffer(buf, len, &vae, &err), VBM_EFORMAT);
    ck_assert_msg(strstr(err.msg, "vbmem.kind is \"rpm\"") != NULL, "%s", err.msg);
    free(buf);
    ck_assert_int_eq(nets_file_is_rpm(data_path("golden_rpm.safetensors")), 1);
    ck_assert_int_eq(nets_file_is_rpm(data_path("golden_nets.safetensors")), 0);
    ck_assert_int_eq(nets_file_is_rpm(data_path("no-such-file")), 0);

    char *a;
    expect_reject(NULL, "vbmem.kind", 0, "metadata vbmem.kind is missing");
    expect_reject(NULL, "vbmem.provenance", 0, "metadata vbmem.provenance is missing");
    expect_reject(NULL, NULL, 1, "tensor extra.weight is not used by any layer");
    expect_reject(a = arch_with("factors", NULL, "0"), NULL, 0,
                  "factors must be an integer in [1, 1024]");
    free(a);
    expect_reject(a = arch_with("factors", NULL, "4"), NULL, 0,
                  "recognition must be a list of 4 layer lists (one per factor)");
    free(a);
    expect_reject(a = arch_with("min_steps", NULL, "65"), NULL, 0,
                  "min_steps 65 exceeds max_steps 64");
    free(a);
    expect_reject(a = arch_with("precision", "factor", "\"relu\""), NULL, 0,
                  "factor.precision must be \"softplus\" or \"exp\"");
    free(a);
    expect_reject(a = arch_with("min_precision", "factor", "-1"), NULL, 0,
                  "factor.min_precision must be a number >= 0");
    free(a);
    expect_reject(a = arch_with("kernel", "prior", "\"periodic\""), NULL, 0,
                  "prior.kernel must be \"rbf\" or \"matern12\"");
    free(a);
    expect_reject(a = arch_with("lengthscale", "prior", "[1, 2]"), NULL, 0,
                  "prior.lengthscale must be a list of 1 positive numbers");
    free(a);
    expect_reject(a = arch_with("variance", "prior", "[0]"), NULL, 0,
                  "prior.variance[0] must be a positive number");
    free(a);
    expect_reject(a = arch_with("jitter", "prior", "\"x\""), NULL, 0,
                  "prior.jitter must be a positive number");
    free(a);
    expect_reject(a = arch_with("subtract_marginals", "prior", "1"), NULL, 0,
                  "prior.subtract_marginals must be true or false");
    free(a);
    expect_reject(a = arch_with("observation_size", NULL, "2"), NULL, 0,
                  "layer row0.l0 (conv2d): input shape [2,1,1] has 2 channels, the layer has in "
                  "= 1");
    free(a);
    /* two latent dimensions: the nets give 2 values, not 4 */
    {
        char *b = arch_with("latent_size", NULL, "2");
        json_t *o = json_loads(b, 0, NULL);
        json_t *p = json_object_get(o, "prior");
        json_object_set_new(p, "variance", json_pack("[f, f]", 1.0, 1.0));
        json_object_set_new(p, "lengthscale", json_pack("[f, f]", 2.0, 2.0));
        a = json_dumps(o, JSON_COMPACT);
        expect_reject(a, NULL, 0, "recognition[0]: output shape [2,1,1] is not [4,1,1] or [4]");
        free(a);
        free(b);
        json_decref(o);
    }
}
END_TEST

static double *golden_array(const json_t *v, size_t *n)
{
    *n = json_array_size(v);
    double *a = malloc(sizeof(double) * (*n ? *n : 1));
    for (size_t i = 0; i < *n; i++)
        a[i] = json_number_value(json_array_get(v, i));
    return a;
}

/* The factors and the posterior of rpm.py (PyTorch, float32 nets, float64 GP) on each golden
 * case: T = 12 (trained), 2 (the shortest served) and 30. */
START_TEST(test_rpm_parity)
{
    nets_rpm *m = NULL;
    vbm_error err;
    ck_assert_msg(nets_rpm_load(data_path("golden_rpm.safetensors"), &m, &err) == VBM_OK, "%s",
                  err.msg);
    json_error_t jerr;
    json_t *g = json_load_file(data_path("golden_rpm_io.json"), 0, &jerr);
    ck_assert_msg(g != NULL, "golden_rpm_io.json: %s", jerr.text);
    const json_t *cases = json_object_get(g, "cases");
    ck_assert_int_eq(json_array_size(cases), 3);
    int J = nets_rpm_info_of(m)->factors;
    for (size_t c = 0; c < json_array_size(cases); c++) {
        const json_t *k = json_array_get(cases, c);
        int T = (int)json_integer_value(json_object_get(k, "T"));
        float *x = malloc(sizeof(float) * J * T);
        double *h = malloc(sizeof(double) * J * T), *lam = malloc(sizeof(double) * J * T);
        double *mean = malloc(sizeof(double) * T), *var = malloc(sizeof(double) * T);
        for (int j = 0; j < J; j++) {
            size_t n;
            double *row = golden_array(json_array_get(json_object_get(k, "X"), (size_t)j), &n);
            ck_assert_int_eq((int)n, T);
            for (int t = 0; t < T; t++)
                x[j * T + t] = (float)row[t];
            free(row);
        }
        ck_assert_int_eq(nets_rpm_factors(m, x, T, h, lam, NULL), VBM_OK);
        for (int j = 0; j < J; j++) {
            size_t n;
            double *ga = golden_array(json_array_get(json_object_get(k, "a"), (size_t)j), &n);
            double *gP = golden_array(json_array_get(json_object_get(k, "P"), (size_t)j), &n);
            for (int t = 0; t < T; t++) {
                assert_close("a", j * T + t, h[j * T + t], ga[t], 1e-5);
                assert_close("P", j * T + t, lam[j * T + t], gP[t], 1e-5);
            }
            free(ga);
            free(gP);
        }
        ck_assert_int_eq(nets_rpm_infer(m, x, T, mean, var, &err), VBM_OK);
        size_t n;
        double *gm = golden_array(json_object_get(k, "mu"), &n),
               *gv = golden_array(json_object_get(k, "var"), &n);
        for (int t = 0; t < T; t++) {
            assert_close("mu", t, mean[t], gm[t], 1e-4);
            assert_close("var", t, var[t], gv[t], 1e-4);
        }
        free(gm);
        free(gv);
        free(x);
        free(h);
        free(lam);
        free(mean);
        free(var);
    }
    /* failures: T outside [min_steps, max_steps], a value that is not finite */
    float x[3 * 65];
    double mean[65], var[65];
    for (int i = 0; i < 3 * 65; i++)
        x[i] = 0.5f;
    ck_assert_int_eq(nets_rpm_infer(m, x, 1, mean, var, &err), VBM_EINVAL);
    ck_assert_msg(strstr(err.msg, "T = 1 steps is outside [2, 64]") != NULL, "%s", err.msg);
    ck_assert_int_eq(nets_rpm_infer(m, x, 65, mean, var, &err), VBM_EINVAL);
    x[7] = NAN;
    ck_assert_int_eq(nets_rpm_infer(m, x, 4, mean, var, &err), VBM_EINVAL);
    ck_assert_msg(strstr(err.msg, "value 7 is not finite") != NULL, "%s", err.msg);
    ck_assert_int_eq(nets_rpm_infer(m, NULL, 4, mean, var, &err), VBM_EINVAL);
    json_decref(g);
    nets_rpm_free(m);
}
END_TEST

/* The other options of the file kind, against a direct computation: one dense network shared by
 * J = 2 rows, D = 2 values per observation, L = 2 latent dimensions with their own Matern-1/2
 * kernels, exp precisions, prior marginals not subtracted. The factors are affine in x, so the
 * test computes them itself; the posterior is the dense precision K^-1 + diag(sum_j lambda)
 * inverted by Gauss-Jordan. */
START_TEST(test_rpm_options)
{
    static const float W[8] = {0.5f, -1.0f, 0.25f, 0.75f, 0.1f, -0.2f, -0.3f, 0.4f}; /* [4,2] */
    static const float B[4] = {0.1f, -0.2f, 0.3f, -0.5f};
    static const int64_t ws[2] = {4, 2}, bs[1] = {4};
    const char *arch =
        "{\"factors\":2,\"observation_size\":2,\"latent_size\":2,\"min_steps\":2,"
        "\"max_steps\":16,\"shared\":true,\"recognition\":[{\"type\":\"flatten\"},"
        "{\"type\":\"dense\",\"name\":\"s\",\"in\":2,\"out\":4}],"
        "\"factor\":{\"parameters\":\"natural\",\"precision\":\"exp\",\"min_precision\":0.05},"
        "\"prior\":{\"kernel\":\"matern12\",\"variance\":[1.5,0.5],\"lengthscale\":[3,1.25],"
        "\"jitter\":0.001,\"time_step\":0.5,\"subtract_marginals\":false}}";
    const char *meta[] = {"vbmem.format",     "vbmem-model", "vbmem.format_version", "1",
                          "vbmem.kind",       "rpm",         "vbmem.architecture",   arch,
                          "vbmem.provenance", "{}"};
    sft_input in[2] = {{"s.weight", 2, ws, W}, {"s.bias", 1, bs, B}};
    unsigned char *buf = NULL;
    size_t len;
    ck_assert_int_eq(sft_build(in, 2, meta, 5, &buf, &len, NULL), VBM_OK);
    nets_rpm *m = NULL;
    vbm_error err;
    ck_assert_msg(nets_rpm_load_buffer(buf, len, &m, &err) == VBM_OK, "%s", err.msg);
    ck_assert_int_eq(nets_rpm_info_of(m)->shared, 1);
    ck_assert_str_eq(nets_rpm_info_of(m)->kernel, "matern12");
    enum { J = 2, T = 6, D = 2, L = 2 };
    float x[J * T * D];
    rng_t r;
    rng_seed(&r, 5);
    for (int i = 0; i < J * T * D; i++)
        x[i] = (float)rng_normal(&r);
    double mean[L * T], var[L * T];
    ck_assert_int_eq(nets_rpm_infer(m, x, T, mean, var, &err), VBM_OK);
    const double vl[2] = {1.5, 0.5}, ll[2] = {3, 1.25};
    for (int l = 0; l < L; l++) {
        double K[T * T], I[T * T], Ki[T * T], P[T * T], S[T * T], b[T] = {0}, dd[T] = {0};
        for (int s = 0; s < T; s++)
            for (int t = 0; t < T; t++) {
                K[s * T + t] = vl[l] * exp(-fabs(0.5 * (s - t)) / ll[l]) + (s == t ? 0.001 : 0);
                I[s * T + t] = s == t;
            }
        for (int j = 0; j < J; j++)
            for (int t = 0; t < T; t++) {
                const float *xo = x + (j * T + t) * D;
                double a = (double)((float)(W[l * 2] * xo[0] + W[l * 2 + 1] * xo[1]) + B[l]);
                double rr = (double)((float)(W[(L + l) * 2] * xo[0] + W[(L + l) * 2 + 1] * xo[1])
                                     + B[L + l]);
                b[t] += a;
                dd[t] += exp(rr) + 0.05;
            }
        ck_assert_int_eq(gj_solve(T, T, K, I, Ki), 0);
        for (int i = 0; i < T * T; i++)
            P[i] = Ki[i] + (i % (T + 1) == 0 ? dd[i / T] : 0.0);
        ck_assert_int_eq(gj_solve(T, T, P, I, S), 0);
        for (int t = 0; t < T; t++) {
            double want = 0;
            for (int k = 0; k < T; k++)
                want += S[t * T + k] * b[k];
            assert_close("mean", l * T + t, mean[l * T + t], want, 1e-5);
            assert_close("var", l * T + t, var[l * T + t], S[t * T + t], 1e-5);
        }
    }
    nets_rpm_free(m);

    /* the engine's way to the same file (a registry over a folder holding it): its description
     * and the same posterior, one row per step (T x L) where the networks give L x T */
    char dir[] = "/tmp/vbmem-test-rpm-XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/opts.safetensors", dir);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
    free(buf);
    eng_models *reg = NULL;
    eng_model *em = NULL;
    ck_assert_msg(eng_models_create(dir, NULL, &reg, &err) == VBM_OK, "%s", err.msg);
    ck_assert_msg(eng_models_find(reg, "opts", &em, &err) == VBM_OK, "%s", err.msg);
    ck_assert_ptr_null(em->info);
    ck_assert_int_eq(em->rpm_info->factors, J);
    ck_assert_int_eq(em->rpm_info->obs_size, D);
    ck_assert_int_eq(em->rpm_info->latent, L);
    ck_assert_int_eq(em->rpm_info->shared, 1);
    ck_assert_str_eq(em->rpm_info->kernel, "matern12");
    double emean[T * L], evar[T * L];
    ck_assert_msg(eng_model_rpm_infer(em, x, T, emean, evar, &err) == VBM_OK, "%s", err.msg);
    for (int l = 0; l < L; l++)
        for (int t = 0; t < T; t++) {
            ck_assert_double_eq(emean[t * L + l], mean[l * T + t]);
            ck_assert_double_eq(evar[t * L + l], var[l * T + t]);
        }
    /* a T below min_steps: the inference's refusal, naming the observations */
    ck_assert_int_eq(eng_model_rpm_infer(em, x, 1, emean, evar, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "observations");
    eng_model_unref(em);
    eng_models_free(reg);
    ck_assert_int_eq(remove(path), 0);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

static Suite *rpm_suite(void)
{
    Suite *s = suite_create("rpm");
    TCase *tc = tcase_create("gp");
    tcase_add_test(tc, test_gp_conditioning);
    tcase_add_test(tc, test_gp_negative_d);
    tcase_add_test(tc, test_gp_failures);
    suite_add_tcase(s, tc);
    tc = tcase_create("model");
    tcase_add_test(tc, test_rpm_file);
    tcase_add_test(tc, test_rpm_parity);
    tcase_add_test(tc, test_rpm_options);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(rpm_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
