/* gp.h -- the Gaussian-process posterior of one latent dimension's trajectory under
 * Gaussian recognition factors (the time-series RPM of seed 004), in double with
 * Cholesky factorisations and triangular solves (LAPACKE/CBLAS), never an explicit inverse. */
#ifndef VBMEM_NETS_GP_H
#define VBMEM_NETS_GP_H

#include "vbmem/vbmem.h"

#define GP_MAX_T 4096 /* time steps of one trajectory */

/* Doubles of scratch gp_posterior needs for T steps: 3 T^2 + T. */
size_t gp_workspace(int T);

/* The posterior q(z) = N(mean, S) of a trajectory z (T values) whose natural
 * parameters are those of the prior N(0, K) plus diag(d) on the precision and b
 * on the linear term:
 *     S^{-1} = K^{-1} + diag(d),   mean = S b,   var[t] = S[t][t].
 * K is T x T row-major, symmetric positive definite (only its lower triangle is
 * read); d may have negative entries as long as S^{-1} stays positive definite.
 * Computed as S = L (I + L^T diag(d) L)^{-1} L^T with K = L L^T: two Cholesky
 * factorisations (dpotrf) and triangular solves (dtrsm/dtrsv). work holds
 * gp_workspace(T) doubles (NULL: allocated and freed here). Returns VBM_OK;
 * fails with VBM_EINVAL (T outside [1, GP_MAX_T], a NULL array, a value of K, d
 * or b that is not finite), VBM_ENUMERIC (K is not positive definite: message
 * "the prior covariance ..."; or the posterior precision is not: message "the
 * posterior precision ...") or VBM_ENOMEM; err (may be NULL) then holds
 * "gp_posterior: ..." (no field) and mean / var are unspecified. */
vbm_status gp_posterior(int T, const double *K, const double *d, const double *b, double *mean,
                        double *var, double *work, vbm_error *err);

#endif
