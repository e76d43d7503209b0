/* forget.c -- vbm_forget: removing stored items from a memory, exactly by a write of the
 * retained codes that remain, or approximately by a conjugate downdate of the natural
 * parameters of q(M_h) and q(b_h) (Theorem 4, Eq. 198-207; Theorems 1 and 3 for H = 1). */
#define _POSIX_C_SOURCE 200809L
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "memory_impl.h"
#include "numerics/linalg.h"

void vbm_forget_result_free(vbm_forget_result *res)
{
    if (!res)
        return;
    free(res->item);
    free(res->distance);
    vbm_addresses_free(&res->addr);
    vbm_write_result_free(&res->fit);
    memset(res, 0, sizeof *res);
}

/* A memory of mem's configuration and base prior with nothing written. */
static vbm_status forget_prior_memory(const vbm_memory *mem, vbm_memory **out, vbm_error *err)
{
    vbm_status st = vbm_memory_create(&mem->cfg, mem->R0, mem->U0, out, err);
    if (st)
        return st;
    memcpy((*out)->mu_b0, mem->mu_b0, sizeof(double) * (size_t)mem->cfg.code_size);
    memory_reset_posterior(*out);
    return VBM_OK;
}

/* Return mem to its prior: the commit of a forget that leaves nothing written. */
static vbm_status forget_to_prior(vbm_memory *mem, vbm_forget_result *res, vbm_error *err)
{
    vbm_memory *fresh = NULL;
    vbm_status st = forget_prior_memory(mem, &fresh, err);
    if (st)
        return st;
    res->exact = 1;
    res->fit.elbo.per_frame = res->fit.elbo.total = NAN;
    memory_replace(mem, fresh);
    return VBM_OK;
}

/* Retained-code path: cue i takes the nearest retained code not yet taken (ties to the
 * oldest); the memory becomes vbm_write of the codes left, or its prior when none is. */
static vbm_status forget_retained(vbm_memory *mem, const vbm_codes *cues,
                                  const vbm_write_opts *opts, vbm_forget_result *res,
                                  vbm_error *err)
{
    long N = mem->n_codes, n = cues->T;
    int C = mem->cfg.code_size;
    if (n > N)
        return vbm_fail(err, VBM_EINVAL, "codes",
                        "%ld cues, but the memory retains %ld codes (each cue removes one)", n, N);
    unsigned char *taken = vbm_calloc((size_t)N, 1);
    if (!taken)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for %ld retained codes", N);
    for (long i = 0; i < n; i++) {
        const double *z = cues->mu + (size_t)i * C;
        long best = -1;
        double bd = 0.0;
        for (long j = 0; j < N; j++) {
            if (taken[j])
                continue;
            double d = la_sqdist(C, z, mem->codes_mu + (size_t)j * C);
            if (best < 0 || d < bd) {
                best = j;
                bd = d;
            }
        }
        taken[best] = 1;
        res->item[i] = best;
        res->distance[i] = sqrt(bd);
    }
    long left = N - n;
    vbm_status st;
    if (left == 0) {
        free(taken);
        return forget_to_prior(mem, res, err);
    }
    double *mu = vbm_calloc((size_t)left * C, sizeof(double)),
           *s2 = vbm_calloc((size_t)left * C, sizeof(double));
    if (!mu || !s2) {
        free(taken);
        free(mu);
        free(s2);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for %ld codes", left);
    }
    for (long j = 0, t = 0; j < N; j++) {
        if (taken[j])
            continue;
        memcpy(mu + (size_t)t * C, mem->codes_mu + (size_t)j * C, sizeof(double) * C);
        memcpy(s2 + (size_t)t * C, mem->codes_s2 + (size_t)j * C, sizeof(double) * C);
        t++;
    }
    free(taken);
    vbm_write_opts o;
    if (opts)
        o = *opts;
    else
        vbm_write_opts_default(&o);
    if (o.init == VBM_INIT_CURRENT) /* a write of the codes left, from the base prior */
        o.init = VBM_INIT_AUTO;
    vbm_codes rest = {left, C, mu, s2};
    st = vbm_write(mem, &rest, &o, &res->fit, err); /* all or nothing */
    free(mu);
    free(s2);
    if (!st)
        res->exact = 1;
    return st;
}

/* The dkm writer's address mean of every cue, (R R^T + I)^{-1} R z_i, into a->w_mu, and
 * its fixed address variance into a->w_cov (the writer's own view of a frame). */
static vbm_status forget_dkm_addresses(const vbm_memory *mem, const vbm_codes *cues,
                                       vbm_addresses *a, vbm_error *err)
{
    int K = mem->cfg.rows, C = mem->cfg.code_size;
    double *A = vbm_calloc((size_t)K * K, sizeof(double));
    double *B = vbm_calloc((size_t)K * cues->T, sizeof(double)); /* K x T */
    if (!A || !B) {
        free(A);
        free(B);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for the dkm addresses");
    }
    la_gemm_sym(K, C, 1.0, mem->R, C, mem->R, C, A, K);
    for (int k = 0; k < K; k++)
        A[(size_t)k * K + k] += 1.0;
    la_gemm(0, 1, K, (int)cues->T, C, 1.0, mem->R, C, cues->mu, C, 0.0, B, (int)cues->T);
    if (la_chol(K, A) != 0) {
        free(A);
        free(B);
        return vbm_fail(err, VBM_ENUMERIC, NULL, "dkm addressing matrix not positive definite");
    }
    la_chol_solve(K, (int)cues->T, A, B, (int)cues->T);
    for (long t = 0; t < cues->T; t++)
        for (int k = 0; k < K; k++)
            a->w_mu[(size_t)t * K + k] = B[(size_t)k * cues->T + t];
    memset(a->w_cov, 0, sizeof(double) * K * K);
    for (int k = 0; k < K; k++)
        a->w_cov[(size_t)k * K + k] = mem->cfg.dkm_addr_var;
    free(A);
    free(B);
    return VBM_OK;
}

/* D <- its projection on the positive semidefinite matrices (negative eigenvalues set to
 * 0), when it has a negative eigenvalue; otherwise D is left exactly as it is. D is K x K
 * symmetric; V (K x K) and ev (K) are scratch. VBM_ENUMERIC when the eigensolver fails. */
static vbm_status forget_psd_floor(int K, double *D, double *V, double *ev, vbm_error *err)
{
    memcpy(V, D, sizeof(double) * K * K);
    if (LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'L', K, V, K, ev) != 0)
        return vbm_fail(err, VBM_ENUMERIC, NULL, "forget: eigensolver failed");
    int neg = 0;
    for (int k = 0; k < K; k++)
        neg |= ev[k] < 0.0;
    if (!neg)
        return VBM_OK;
    for (int a = 0; a < K; a++)
        for (int b = 0; b < K; b++) {
            double v = 0.0;
            for (int j = 0; j < K; j++)
                if (ev[j] > 0.0)
                    v += ev[j] * V[(size_t)a * K + j] * V[(size_t)b * K + j];
            D[(size_t)a * K + b] = v;
        }
    la_symmetrize_lower(K, D);
    return VBM_OK;
}

/* Downdate of cluster h of `work` (G = 1) by the cues' terms, addresses a taken under the
 * same posterior. sc holds 4 K^2 + 2 K C + K + C doubles. */
static vbm_status forget_downdate_cluster(vbm_memory *work, const prior_t *prior,
                                          const vbm_codes *cues, const vbm_addresses *a, int h,
                                          int no_cov, double *sc, vbm_error *err)
{
    int K = work->cfg.rows, C = work->cfg.code_size, H = work->cfg.clusters;
    int shift = work->cfg.shift;
    size_t kk = (size_t)K * K, kc = (size_t)K * C;
    double s2 = work->cfg.sigma_z2;
    double *Q = sc, *D = Q + kk, *V = D + kk, *dQ = V + kk, *Y = dQ + kk, *dY = Y + kc;
    double *ev = dY + kc, *deta = ev + K;
    double *R = work->R + (size_t)h * kc, *U = work->U + (size_t)h * kk;
    double *mb = work->mu_b + (size_t)h * C;
    const double *Sw = a->w_cov + (size_t)h * kk;
    double tsum = 0.0;
    memset(dQ, 0, sizeof(double) * kk);
    memset(dY, 0, sizeof(double) * kc);
    memset(deta, 0, sizeof(double) * C);
    for (long i = 0; i < cues->T; i++) {
        double th = a->s[(size_t)i * H + h];
        const double *w = a->w_mu + ((size_t)i * H + h) * K, *z = cues->mu + (size_t)i * C;
        tsum += th;
        for (int p = 0; p < K; p++)
            for (int q = 0; q < K; q++)
                dQ[(size_t)p * K + q] +=
                    th * (w[p] * w[q] + (no_cov ? 0.0 : Sw[(size_t)p * K + q])) / s2;
        for (int p = 0; p < K; p++)
            for (int c = 0; c < C; c++)
                dY[(size_t)p * C + c] += th * w[p] * (z[c] - (shift ? mb[c] : 0.0)) / s2;
        if (shift)
            for (int c = 0; c < C; c++) {
                double rw = 0.0;
                for (int k = 0; k < K; k++)
                    rw += R[(size_t)k * C + c] * w[k];
                deta[c] += th * (z[c] - rw) / s2;
            }
    }
    /* Q = U^{-1} (the posterior is stored as the covariance U), Y = Q R */
    memcpy(Q, U, sizeof(double) * kk);
    if (la_chol(K, Q) != 0 || la_chol_inverse(K, Q) != 0)
        return vbm_fail(err, VBM_ENUMERIC, NULL,
                        "posterior covariance U of cluster %d is not positive definite", h);
    la_gemm(0, 0, K, C, K, 1.0, Q, K, R, C, 0.0, Y, C);
    /* Q' = U0^{-1} + floor(Q - U0^{-1} - dQ) */
    const double *P0 = prior->P0 + (size_t)h * kk;
    for (size_t i = 0; i < kk; i++)
        D[i] = Q[i] - P0[i] - dQ[i];
    la_symmetrize_lower(K, D);
    vbm_status st = forget_psd_floor(K, D, V, ev, err);
    if (st)
        return st;
    for (size_t i = 0; i < kk; i++)
        Q[i] = P0[i] + D[i];
    la_symmetrize_lower(K, Q);
    if (la_chol(K, Q) != 0)
        return vbm_fail(err, VBM_ENUMERIC, NULL,
                        "downdated memory precision of cluster %d is not positive definite", h);
    /* shift first: it reads R before the downdate */
    if (shift) {
        double prec = 1.0 / work->s2_b[h], prec0 = 1.0 / prior->s2_b0[h];
        double np = prec - tsum / s2;
        if (np < prec0)
            np = prec0;
        for (int c = 0; c < C; c++)
            mb[c] = (mb[c] * prec - deta[c]) / np;
        work->s2_b[h] = 1.0 / np;
    }
    for (size_t i = 0; i < kc; i++)
        R[i] = Y[i] - dY[i];
    la_chol_solve(K, C, Q, R, C);
    memcpy(U, Q, sizeof(double) * kk);
    la_chol_inverse(K, U);
    return VBM_OK;
}

/* Downdate path (gaussian, mixture, dkm): see vbm_forget in vbmem.h. */
static vbm_status forget_downdate(vbm_memory *mem, const vbm_codes *cues, vbm_forget_result *res,
                                  vbm_error *err)
{
    if (mem->frames - cues->T <= 0)
        return forget_to_prior(mem, res, err);
    int K = mem->cfg.rows, C = mem->cfg.code_size, H = mem->cfg.clusters;
    vbm_memory *work = NULL;
    vbm_status st = vbm_memory_clone(mem, &work, err);
    if (st)
        return st;
    prior_t prior;
    st = prior_from_base(work, &prior, err);
    if (st) {
        vbm_memory_free(work);
        return st;
    }
    size_t kk = (size_t)K * K, kc = (size_t)K * C;
    double *sc = vbm_calloc(4 * kk + 2 * kc + (size_t)K + (size_t)C, sizeof(double));
    if (!sc)
        st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for a downdate (K = %d, C = %d)", K, C);
    for (int h = 0; !st && h < H; h++)
        st = forget_downdate_cluster(work, &prior, cues, &res->addr, h, mem->cfg.kind == VBM_DKM,
                                     sc, err);
    free(sc);
    prior_free(&prior);
    if (st) {
        vbm_memory_free(work);
        return st;
    }
    work->frames = mem->frames - cues->T;
    work->last_elbo = NAN;
    res->exact = 0;
    res->fit.elbo.per_frame = res->fit.elbo.total = NAN;
    memory_replace(mem, work);
    return VBM_OK;
}

/* The memory's posterior-mean read of every cue from its addresses (G = 1), and its
 * distance to the cue, into res->distance. */
static void forget_read_distances(const vbm_memory *mem, const vbm_codes *cues,
                                  vbm_forget_result *res)
{
    int K = mem->cfg.rows, C = mem->cfg.code_size, H = mem->cfg.clusters;
    const vbm_addresses *a = &res->addr;
    for (long i = 0; i < cues->T; i++) {
        double d2 = 0.0;
        for (int c = 0; c < C; c++) {
            double v = 0.0;
            for (int h = 0; h < H; h++) {
                const double *R = mem->R + (size_t)h * K * C,
                             *w = a->w_mu + ((size_t)i * H + h) * K;
                double z = mem->cfg.shift ? mem->mu_b[(size_t)h * C + c] : 0.0;
                for (int k = 0; k < K; k++)
                    z += R[(size_t)k * C + c] * w[k];
                v += a->s[(size_t)i * H + h] * z;
            }
            double r = cues->mu[(size_t)i * C + c] - v;
            d2 += r * r;
        }
        res->distance[i] = sqrt(d2);
    }
}

vbm_status vbm_forget(vbm_memory *mem, const vbm_codes *cues, const vbm_write_opts *opts,
                      vbm_forget_result *res, vbm_error *err)
{
    memset(res, 0, sizeof *res);
    vbm_status st = vbm_codes_check(mem, cues, err);
    if (st)
        return st;
    int retained = mem->cfg.retain_max > 0 && mem->n_codes > 0;
    vbm_kind kind = mem->cfg.kind;
    if (!retained && kind != VBM_GAUSSIAN && kind != VBM_MIXTURE && kind != VBM_DKM)
        return vbm_fail(err, VBM_EINVAL, "kind",
                        "the %s memory can forget only retained codes (it retains none: set "
                        "retain_max before writing)",
                        vbm_kind_name(kind));
    res->n = cues->T;
    res->item = vbm_calloc((size_t)cues->T, sizeof(long));
    res->distance = vbm_calloc((size_t)cues->T, sizeof(double));
    if (!res->item || !res->distance)
        st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for %ld cues", cues->T);
    if (!st)
        st = vbm_address(mem, cues, &res->addr, err);
    if (!st && kind == VBM_DKM)
        st = forget_dkm_addresses(mem, cues, &res->addr, err);
    if (!st && retained) {
        st = forget_retained(mem, cues, opts, res, err);
    } else if (!st) {
        for (long i = 0; i < cues->T; i++)
            res->item[i] = -1;
        forget_read_distances(mem, cues, res);
        st = forget_downdate(mem, cues, res, err);
    }
    if (st)
        vbm_forget_result_free(res);
    return st;
}
