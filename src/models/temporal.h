/* temporal.h -- internal view of the temporal (identity/attribute) memory: its
 * posterior q(Theta) and the expectations the VBE step reads, exposed for the
 * brute-force checks of tests/test_temporal.c. */
#ifndef VBMEM_TEMPORAL_H
#define VBMEM_TEMPORAL_H

#include "vbmem/vbmem.h"

/* The expectations under q(Theta) that the VBE step (eq. 24-51) reads. */
typedef struct {
    int D, P, Q, K;  /* K = P * Q */
    double elogT[4]; /* <log T_{m,n}> at [2 m + n] */
    double *einv;    /* [K] <(1 - lambda^2)^{-1}> */
    double *elam;    /* [K] <lambda (1 - lambda^2)^{-1}> */
    double *elam2;   /* [K] <lambda^2 (1 - lambda^2)^{-1}> */
    double *elog;    /* [K] <log(1 - lambda^2)> */
    double *lmean;   /* [K] <lambda> */
    double *kl_lam;  /* [K] KL(q(lambda_k) || p(lambda_k)) */
    double *rho;     /* [D] <rho_k> */
    double *elogrho; /* [D] <log rho_k> */
    double *Wr;      /* [D x K] diag(<rho>) <W> */
    double *M;       /* [K x K] sum_k <rho_k> <w_k w_k^T> = <W^T diag(rho) W> */
    double logpi[2]; /* log P(b_1 = 0), log P(b_1 = 1) */
    double sigma_a2;
} temporal_exp;

struct vbm_temporal {
    vbm_temporal_config cfg;
    int D, P, Q, K, G;
    int fitted; /* 0 while q(Theta) is the prior (nothing written) */
    /* q(W): row k of W (w_k in R^K) ~ N(mw[k], Sw[k]) */
    double *mw;      /* [D x K] */
    double *Sw;      /* [D][K x K] */
    double *ldJw;    /* [D] log det Sw[k]^{-1} */
    double *gamma;   /* [K] ARD precisions */
    double *rd, *re; /* [D] q(rho_k) = Gamma(rd, re) */
    double ut[4];    /* q(T) Dirichlet rows: [2 m + n] */
    double *lam;     /* [K][4] q(lambda_k): (eta, f, g, h) of eq. 13 */
    double *grid;    /* [G] lambda nodes */
    double *phi;     /* [G][4] (-log(1-l^2), 1/(1-l^2), l/(1-l^2), l^2/(1-l^2)) */
    double *post;    /* [G] scratch of temporal_refresh */
    temporal_exp ex; /* expectations of the current q(Theta) */
};

/* Recompute m->ex from the current q(Theta). Never fails. */
void temporal_refresh(vbm_temporal *m);

#endif
