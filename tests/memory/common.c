/* common.c -- owns the helpers the Check tests of libvbmem share (test-models): random codes,
 * memories and writes that must succeed, relative differences, and the independent computations
 * (Gauss-Jordan inverse, Theorem 4's q(s)) the tests compare against. */
#include "common.h"

double *randn(long n, uint64_t seed, double scale)
{
    rng_t r;
    rng_seed(&r, seed);
    double *x = malloc(sizeof(double) * n);
    for (long i = 0; i < n; i++)
        x[i] = scale * rng_normal(&r);
    return x;
}

vbm_memory *make(vbm_kind kind, int C, int K, int H, int G)
{
    vbm_config cfg;
    vbm_config_default(kind, C, &cfg);
    cfg.rows = K;
    cfg.clusters = H;
    cfg.groups = G;
    vbm_memory *m = NULL;
    vbm_error err;
    ck_assert_msg(vbm_memory_create(&cfg, NULL, NULL, &m, &err) == VBM_OK, "%s", err.msg);
    return m;
}

void write_ok(vbm_memory *m, const vbm_codes *codes, vbm_write_opts *o, vbm_write_result *res)
{
    vbm_error err;
    vbm_status st = vbm_write(m, codes, o, res, &err);
    ck_assert_msg(st == VBM_OK, "write failed: %s", err.msg);
}

double rel(double a, double b)
{
    return fabs(a - b) / (fabs(b) > 1e-300 ? fabs(b) : 1.0);
}

double max_rel_diff(const double *a, const double *b, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]) / (1.0 + fabs(b[i]));
        if (d > m)
            m = d;
    }
    return m;
}

/* Inverse of the n x n matrix a (n <= 8) by Gauss-Jordan elimination with
 * partial pivoting; returns log |det a|. a is overwritten. */
double gj_inverse(int n, double *a, double *inv)
{
    double logdet = 0.0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            inv[i * n + j] = i == j;
    for (int c = 0; c < n; c++) {
        int p = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(a[r * n + c]) > fabs(a[p * n + c]))
                p = r;
        for (int j = 0; j < n; j++) {
            double t = a[c * n + j];
            a[c * n + j] = a[p * n + j];
            a[p * n + j] = t;
            t = inv[c * n + j];
            inv[c * n + j] = inv[p * n + j];
            inv[p * n + j] = t;
        }
        double d = a[c * n + c];
        logdet += log(fabs(d));
        for (int j = 0; j < n; j++) {
            a[c * n + j] /= d;
            inv[c * n + j] /= d;
        }
        for (int r = 0; r < n; r++)
            if (r != c) {
                double f = a[r * n + c];
                for (int j = 0; j < n; j++) {
                    a[r * n + j] -= f * a[c * n + j];
                    inv[r * n + j] -= f * inv[c * n + j];
                }
            }
    }
    return logdet;
}

/* q(s_t^g) and the means of q(w_t^g | s = h) of Theorem 4 (Eq. 195-196, 202-203;
 * for the tree the same on code partition g with C replaced by C / G, App. C.5),
 * computed term by term from the memory's q(M_h), q(b_h) for the code z_full:
 * theta[H], wmu[H x K] (K <= 8, H <= 8). */
void theorem4_qs(const vbm_memory *m, const double *z_full, int g, double *theta, double *wmu)
{
    int K = m->cfg.rows, H = m->cfg.clusters, cg = m->cg;
    double s2 = m->cfg.sigma_z2, S[64], L[64], Sw[64], r[8], mx = -INFINITY, sum = 0.0;
    const double *z = z_full + (size_t)g * cg;
    for (int h = 0; h < H; h++) {
        size_t gh = (size_t)g * H + h;
        const double *R = m->R + gh * K * cg, *U = m->U + gh * K * K, *mb = m->mu_b + gh * cg;
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++) {
                double v = cg * U[i * K + j];
                for (int c = 0; c < cg; c++)
                    v += R[i * cg + c] * R[j * cg + c];
                S[i * K + j] = v;                 /* R_h R_h^T + C U_h */
                L[i * K + j] = (i == j) + v / s2; /* the precision of Eq. 203 */
            }
        double logdetSw = -gj_inverse(K, L, Sw);
        for (int k = 0; k < K; k++) { /* r = R_h (mu_z - mu_bh) */
            r[k] = 0.0;
            for (int c = 0; c < cg; c++)
                r[k] += R[k * cg + c] * (z[c] - mb[c]);
        }
        double *w = wmu + (size_t)h * K;
        for (int i = 0; i < K; i++) { /* Eq. 202 */
            w[i] = 0.0;
            for (int j = 0; j < K; j++)
                w[i] += Sw[i * K + j] * r[j] / s2;
        }
        double quad = 0.0, trSSw = 0.0, bb = 0.0, bz = 0.0, wr = 0.0, ww = 0.0, trSw = 0.0;
        for (int i = 0; i < K; i++) {
            for (int j = 0; j < K; j++) {
                quad += w[i] * S[i * K + j] * w[j];
                trSSw += S[i * K + j] * Sw[j * K + i];
            }
            wr += w[i] * r[i];
            ww += w[i] * w[i];
            trSw += Sw[i * K + i];
        }
        for (int c = 0; c < cg; c++) {
            bb += mb[c] * mb[c];
            bz += mb[c] * z[c];
        }
        theta[h] = -0.5 / s2 * (quad + trSSw + bb + cg * m->s2_b[gh]) + wr / s2 + bz / s2
                   + 0.5 * logdetSw - 0.5 * (ww + trSw); /* the logits of Eq. 195 */
        if (theta[h] > mx)
            mx = theta[h];
    }
    for (int h = 0; h < H; h++)
        sum += theta[h] = exp(theta[h] - mx);
    for (int h = 0; h < H; h++)
        theta[h] /= sum;
}
