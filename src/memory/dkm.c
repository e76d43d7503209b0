/* dkm.c -- the Dynamic Kanerva Machine writer (Wu et al. 2018b) used as the
 * paper's baseline (Sec. 4.2, App. E.1): one online, non-iterative pass with
 * addressing mean (R R^T + I)^{-1} R z_t, a fixed address variance, and a
 * rank-one (Kalman) update of R and U per frame. Its memories are Gaussian-
 * address memories and are evaluated with that model's ELBO. */
#define _POSIX_C_SOURCE 200809L
#include "dkm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "numerics/linalg.h"

int dkm_is_zero(const vbm_memory *mem)
{
    size_t n = (size_t)mem->cfg.rows * mem->cfg.code_size;

    for (size_t i = 0; i < n; i++)
        if (mem->R[i] != 0.0)
            return 0;
    return 1;
}

vbm_status dkm_run(vbm_memory *mem, const vbm_codes *codes, gaussian_work *w, vbm_error *err)
{
    int K = mem->cfg.rows, C = mem->cfg.code_size;
    double s2 = mem->cfg.sigma_z2, av = mem->cfg.dkm_addr_var;
    double *A = vbm_calloc((size_t)K * K, sizeof(double));
    double *c = vbm_calloc((size_t)K, sizeof(double));
    double *d = vbm_calloc((size_t)C, sizeof(double));
    if (!A || !c || !d) {
        free(A);
        free(c);
        free(d);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for the DKM writer");
    }
    vbm_status st = VBM_OK;
    for (long t = 0; t < codes->T; t++) {
        const double *z = codes->mu + (size_t)t * C;
        double *m = w->W + (size_t)t * K;
        /* addressing mean (R R^T + I)^{-1} R z_t */
        la_gemm_sym(K, C, 1.0, mem->R, C, mem->R, C, A, K);
        for (int k = 0; k < K; k++)
            A[(size_t)k * K + k] += 1.0;
        for (int k = 0; k < K; k++) {
            double v = 0.0;
            for (int j = 0; j < C; j++)
                v += mem->R[(size_t)k * C + j] * z[j];
            m[k] = v;
        }
        if (la_chol(K, A) != 0) {
            st = vbm_fail(err, VBM_ENUMERIC, NULL,
                          "DKM addressing matrix not positive definite at frame %ld", t);
            break;
        }
        la_chol_solve(K, 1, A, m, 1);
        /* rank-one update: c = U m, sigma = m^T U m + s2, R += c (z - R^T m)^T / sigma, U -= c c^T
         * / sigma */
        double sig = s2;
        for (int i = 0; i < K; i++) {
            double v = 0.0;
            for (int j = 0; j < K; j++)
                v += mem->U[(size_t)i * K + j] * m[j];
            c[i] = v;
            sig += m[i] * v;
        }
        for (int j = 0; j < C; j++) {
            double v = z[j];
            for (int k = 0; k < K; k++)
                v -= mem->R[(size_t)k * C + j] * m[k];
            d[j] = v;
        }
        for (int k = 0; k < K; k++)
            for (int j = 0; j < C; j++)
                mem->R[(size_t)k * C + j] += c[k] * d[j] / sig;
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++)
                mem->U[(size_t)i * K + j] -= c[i] * c[j] / sig;
    }
    free(A);
    free(c);
    free(d);
    if (st)
        return st;
    memset(w->Sw, 0, sizeof(double) * K * K);
    for (int k = 0; k < K; k++)
        w->Sw[(size_t)k * K + k] = av;
    w->logdetSw = K * log(av);
    return VBM_OK;
}
