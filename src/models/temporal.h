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

/* The sufficient statistics of q(B, A) that the VBM step (eq. 59, 63-66, 70-78) reads, summed
 * over sequences. */
typedef struct {
    double N[4];             /* sum_t Q(b_{t-1} = m) Q(b_t = n) */
    double *Saa, *Scr, *Spr; /* [K] sums over t > 1 of <a_t^2>, <a_t><a_{t-1}>, <a_{t-1}^2> */
    double ntr;              /* number of transitions */
    double *R;               /* [K x K] sum_t <x_t x_t^T> */
    double *r;               /* [D x K] sum_t y_t <x_t>^T */
    double *yy;              /* [D] sum_t y_t^2 */
    double nfr;              /* frames */
} tstats;

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
    /* what appends continue from (vbm_temporal_append): the statistics of every sequence
     * written so far under its q(B, A) as its fit ended, and the part of those sequences'
     * free energy that does not depend on q(Theta) (entropies, first-frame terms) */
    tstats acc;
    double fe_const;
    long nseq;      /* sequences written since the last write */
    double last_fe; /* free energy at the end of the last write or append (NaN before) */
};

/* The terms of the latent free energy that depend on q(Theta), for sequences whose q(B, A)
 * has statistics st, under the expectations e. Never fails. */
double temporal_stats_fe(const temporal_exp *e, const tstats *st);

/* Tests only: q(B, A) of seq inferred under m (sweeps VBE sweeps); out = {its latent free
 * energy under m, temporal_stats_fe of its statistics under m, the same two under m2} (m2 of
 * the same configuration). The difference local - stats must not depend on the memory: that is
 * what appends rely on. VBM_EINVAL (bad seq), VBM_ENOMEM, VBM_ENUMERIC. */
vbm_status temporal_fe_split(const vbm_temporal *m, const vbm_temporal *m2, const vbm_sequence *seq,
                             int sweeps, double out[4], vbm_error *err);

/* Recompute m->ex from the current q(Theta). Never fails. */
void temporal_refresh(vbm_temporal *m);

#include "numerics/rng.h"

/* The window start (temporal_start.c): the mean of q(W) of m (prior otherwise, sequences
 * checked) from windows of 2 Q + 4 consecutive frames (half-overlapping, within sequences):
 * the half of them whose energy lies most nearly in Q directions (one identity on) are grouped
 * into P groups by k-subspaces (seeded as k-means++ from rng), and identity p's columns are its
 * group's top Q principal directions scaled to the variance they carry above the noise. Sets
 * *used to 0 and leaves m as it was when the data do not allow it (Q >= D, fewer than 4 P
 * windows); the caller then falls back to another start. VBM_ENOMEM, VBM_ENUMERIC. */
vbm_status temporal_start_windows(vbm_temporal *m, const vbm_sequence *seqs, int nseq, rng_t *rng,
                                  int *used, vbm_error *err);

#endif
