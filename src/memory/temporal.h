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

#define TEMPORAL_LOG2PI 1.83787706640934548356

/* q(B, A) of one sequence (temporal_vbe.c). */
typedef struct {
    long T;
    const double *y; /* T x D */
    double *q1, *q0; /* [T x P] q(b_{t,p} = 1), q(b_{t,p} = 0) */
    double *mu1;     /* [T x K] mean of a_{t,p} when b = 1 (eq. 40) */
    double *S1;      /* [T x P][Q x Q] its covariance (eq. 39) */
    double *ld1;     /* [T x P] log det Sigma_{t,p}^{-1} */
    double *mu2;     /* [T x K] mean of a_{t,p} when b = 0 (eq. 28-33) */
    double *s2;      /* [T x K] its (diagonal) variance */
    double *ex;      /* [T x K] <a b> (eq. 48) */
    double *ea;      /* [T x K] <a> (eq. 47) */
    double *eaa;     /* [T x K] <a^2> per attribute (diagonal of eq. 51) */
    double *wry;     /* [T x K] <W>^T <diag(rho)> y_t */
    /* eq. 19 (temporal) factorisation only */
    int temporal;
    double *V;   /* [T x P][Q x Q] Cov(a_{t,p}) under q(a_{1:T,p}) */
    double *C;   /* [T x P][Q x Q] Cov(a_{t,p}, a_{t-1,p}) (t >= 1) */
    double *xi;  /* [T x P][4] q(b_{t-1,p} = m, b_{t,p} = n) at [2 m + n] (t >= 1) */
    double *Hb;  /* [P] entropy of q(b_{1:T,p}) */
    double *lda; /* [P] log det of the precision of q(a_{1:T,p}) */
    double *Dn;  /* [T][Q x Q] scratch of the smoother */
    double *z;   /* [T x Q] scratch of the smoother */
    double *fb;  /* [6 T] scratch of forward-backward */
    /* the structured form of eq. 18 that inference uses: q(b_{1:T,p}) prod_t q(a_{t,p} | b_{t,p})
     * per identity (a chain over b, the sites' Gaussians given b); xi, Hb and fb (10 T) then hold
     * its pair marginals, entropies and scratch */
    int bchain;
    int p0;   /* sweeps visit the identities (of a frame, eq. 18) from p0 on, cyclically, */
    int pdir; /* upwards (0) or downwards (1) */
} tseq;

/* ---- temporal_vbe.c ---- */

/* Free what s owns and zero it. s may be zeroed already. Never fails. */
void temporal_seq_free(tseq *s);

/* Allocate q(B, A) of seq (checked) for m at q(b) = 1/2, a = 0 (mu2 = 0, s2 = sigma_a2), of
 * eq. 19 when temporal is non-zero, else of eq. 18. On failure s owns nothing. VBM_ENOMEM. */
vbm_status temporal_seq_init(tseq *s, const vbm_temporal *m, const vbm_sequence *seq, int temporal,
                             vbm_error *err);

/* s->wry <- Y <Wr> under e (the data term of the VBE). Never fails. */
void temporal_seq_data(tseq *s, const temporal_exp *e);

/* One VBE sweep of s under e (frames backwards when backward is non-zero; eq. 19: one chain per
 * identity). scr holds 4 Q^2 + 4 Q doubles. VBM_ENUMERIC when a precision is not positive
 * definite (s is then partly updated). */
vbm_status temporal_seq_sweep(const temporal_exp *e, tseq *s, int backward, double *scr,
                              vbm_error *err);

/* Turn the eq. 18 q(B, A) of s (temporal 0) into the structured form (bchain 1) with the same
 * marginals: the chains' pair marginals are the products of the sites' q(b), so the free energy
 * is unchanged; later sweeps then update each identity's q(b_{1:T,p}) as one chain. VBM_ENOMEM
 * (s then unchanged), VBM_EINVAL when s is of eq. 19. */
vbm_status temporal_seq_bchain(tseq *s, int P, vbm_error *err);

/* ---- temporal_free.c ---- */

/* The terms of the free energy that involve q(B, A) of s under e. Never fails. */
double temporal_seq_fe(const temporal_exp *e, const tseq *s);

/* The terms of the free energy in q(Theta) alone (KL of q(W), q(rho), q(T), q(Lambda) from
 * their priors); needs m->ex fresh. Never fails. */
double temporal_global_fe(const vbm_temporal *m);

/* ---- temporal_vbm.c ---- */

/* Allocate the arrays of st (zeroed); 0, or -1 out of memory (st then owns nothing). */
int temporal_stats_alloc(tstats *st, int D, int K);

/* Free the arrays of st and zero it. Never fails. */
void temporal_stats_release(tstats *st);

/* dst <- a + b (a NULL: dst <- b); the arrays are dst's own. Never fails. */
void temporal_stats_sum(tstats *dst, const tstats *a, const tstats *b, int D, int K);

/* st += the sufficient statistics of q(B, A) of s. Never fails. */
void temporal_stats_add(tstats *st, const temporal_exp *e, const tseq *s);

/* q(T), q(Lambda), q(W), q(rho) of m <- their optima given the statistics st. work holds
 * K^2 + K doubles. VBM_ENUMERIC when a precision of q(w_k) is not positive definite. */
vbm_status temporal_vbm_step(vbm_temporal *m, const tstats *st, double *work, vbm_error *err);

/* The ARD precisions of m <- their maximisers (eq. 82-83), capped at gamma_max. Never fails. */
void temporal_ard_step(vbm_temporal *m);

/* The joint rescaling of each attribute in q(B, A) of the nseq sequences ss and in q(W) that
 * maximises the free energy; needs m->ex fresh and leaves it stale. Never fails. */
void temporal_rescale_step(vbm_temporal *m, tseq *ss, int nseq);

/* ---- temporal.c, temporal_fit.c ---- */

/* log of the normaliser of the lambda grid distribution of m with natural parameters th; with
 * post != NULL also its probabilities (m->G of them). Never fails. */
double temporal_lam_lognorm(const vbm_temporal *m, const double *th, double *post);

/* Check sequence s against m; the field of an error is name + ".T", ".D" or ".y[t][d]".
 * VBM_EINVAL, VBM_ENOMEM (too many frames for this memory). */
vbm_status temporal_seq_check(const vbm_temporal *m, const vbm_sequence *s, const char *name,
                              vbm_error *err);

/* q(B, A) of the (checked) query seq under m's q(Theta): the best by free energy of several
 * identity orders, sweeps sweeps each (the last forward when last_forward); *out (the caller
 * temporal_seq_free's it) and its free energy *F. VBM_ENOMEM, VBM_ENUMERIC. */
vbm_status temporal_infer_best(const vbm_temporal *m, const vbm_sequence *seq, int sweeps,
                               int last_forward, tseq *out, double *F, vbm_error *err);

#include "numerics/rng.h"

/* The window start (temporal_start.c): the mean of q(W) of m (prior otherwise, sequences
 * checked) from windows of 2 Q + 4 consecutive frames (half-overlapping, within sequences):
 * the half of them whose energy lies most nearly in Q directions (one identity on) are grouped
 * into P groups by k-subspaces (seeded as k-means++ from rng; the best of 10 seedings), and
 * identity p's columns are its group's top Q principal directions scaled to the variance they
 * carry above the noise. keep >= 1: every window counts, and the seeding whose bases capture the
 * most energy is kept. keep in (0, 1): trimmed k-subspaces: each step updates the bases from
 * only the share keep of the windows that their nearest basis explains best (the others are
 * where identities overlap: with slowly varying attributes two identities' window also spans
 * about Q directions, and the untrimmed grouping captures more energy with bases that mix
 * identities), and the seeding is kept whose kept windows miss the least share of their
 * energy. Sets
 * *used to 0 and leaves m as it was when the data do not allow it (Q >= D, fewer than 4 P
 * windows); the caller then falls back to another start. VBM_ENOMEM, VBM_ENUMERIC. */
vbm_status temporal_start_windows(vbm_temporal *m, const vbm_sequence *seqs, int nseq, rng_t *rng,
                                  double keep, int *used, vbm_error *err);

#endif
