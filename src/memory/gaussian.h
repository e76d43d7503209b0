/* gaussian.h -- the Gaussian-address memory (Theorem 1, and Theorem 3 with a
 * mean shift b): its workspace, shared with the DKM writer, which evaluates its
 * memories under this model's ELBO. */
#ifndef VBMEM_GAUSSIAN_H
#define VBMEM_GAUSSIAN_H

#include "memory_impl.h"

typedef struct {
    int K, C;
    long T;
    codestat_t cs;
    const double *mu; /* T x C code means */
    double *W;        /* T x K: means of q(w_t) */
    double *Sw;       /* K x K: covariance of q(w_t), shared by all frames */
    double logdetSw;
    double *S;       /* K x K scratch */
    double *Zhat;    /* T x max(C, K) scratch */
    double *scratch; /* 2 K^2 + K C */
} gaussian_work;

/* Allocate a workspace for the codes. VBM_ENOMEM on failure. */
vbm_status gaussian_work_init(gaussian_work *w, const vbm_memory *mem, const vbm_codes *codes,
                              vbm_error *err);
void gaussian_work_free(gaussian_work *w);
/* ELBO of the memory with q(w_t) = N(W[t], Sw) as held in the workspace (the
 * caller sets W, Sw and logdetSw). VBM_ENUMERIC if U is not positive definite. */
vbm_status gaussian_elbo(const vbm_memory *mem, const prior_t *prior, gaussian_work *w,
                         vbm_elbo *elbo, vbm_error *err);

#endif
