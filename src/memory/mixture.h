/* mixture.h -- one group of the scalable mixture-based memory (Theorem 4):
 * H clusters of K x cg matrices M_h with shifts b_h over the code columns of
 * group g. The mixture model is one such group; the tree model is G of them. */
#ifndef VBMEM_MIXTURE_H
#define VBMEM_MIXTURE_H

#include "memory_impl.h"

/* The scalars of one cluster in a fit. A team's threads work on different
 * clusters at once; kept in arrays indexed by cluster, the scalars of all
 * clusters would share a few cache lines, which would bounce between the
 * threads' cores on every write, so each cluster has lines of its own. */
typedef struct {
    double N;             /* sum_t q(s_t = h), the soft count of cluster h */
    double bb;            /* |mu_bh|^2 */
    double s2b;           /* variance of q(b_h), carried by the Gram update */
    double logdetSw;      /* log det Sigma_w,h, from the address step */
    double klm, klb;      /* KL of q(M_h) and of q(b_h), from the address step */
    double logdetQ;       /* Gram path: log det Q_h */
    double AR, AR0;       /* Gram path: <P0R0_h, R_h>, <P0R0_h, R0_h> */
    double beta, alpha;   /* implicit shifts: coefficients of e_h and mu_b0h */
    double ee, em0, m0m0; /* implicit shifts: |e_h|^2, e_h . mu_b0h, |mu_b0h|^2 */
    double bm0;           /* implicit shifts: mu_bh . mu_b0h */
    int st;               /* 0, or which factorization of the cluster failed last */
} __attribute__((aligned(64))) mixcluster;

/* q(y) and scratch for one group and one batch of T codes. */
typedef struct {
    int H, K, cg, g;
    long T;
    codestat_t cs;
    double *P;      /* HK x T: R_h z_t (P and W: allocated by the first address step) */
    double *W;      /* HK x T (+ H x T): means of q(w_t | s_t = h); the direct update
                     * scales them by q(s) in place and copies q(s) into the last H rows */
    double *Wt;     /* HK x T: W scaled by q(s) (Gram path; allocated with its state) */
    double *thetaT; /* H x T: the logits of q(s), then q(s_t = h) (cluster-major) */
    double *E;      /* H x T: expected squared errors e_th */
    double *LW;     /* H x T: KL(q(w_t | s = h) || p(w)) */
    double *S;      /* H x K x K: R_h R_h^T + cg U_h */
    double *Sw;     /* H x K x K: covariance of q(w | s = h) */
    double *Rmb;    /* H x K: R_h mu_bh */
    double *sw;     /* H x K: W_h q(s = h), the q(s)-weighted sums of the address means */
    double *zb;     /* H x T: mu_bh . z_t */
    double *Y;      /* HK x cg, then K x T: the direct update's products and one cluster's
                     * weighted W (allocated by its first call) */
    /* The per-cluster loops (address step, Gram update, write-back) and the
     * per-frame loop of q(s) run on `team` when there is one; every item writes
     * only its own cluster's or frames' outputs, and the sums over clusters and
     * frames are taken afterwards in a fixed order, so the result does not depend
     * on the team. Each thread has its own scratch. */
    team_t *team;   /* NULL: all on the calling thread */
    int nscr;       /* scratch sets: team_size(team) */
    size_t scr_len; /* doubles per scratch set (mixgroup_scratch) */
    double *scr;    /* [nscr][scr_len] */
    double *gsc;    /* [H][7 K^2 + 4 K]: each cluster's scratch between the phases of its loops */
    mixcluster *cl; /* [H] */
    double *fel;    /* 3 x frame chunks: log-likelihood, KL of q(w), KL of q(s) */
    /* borrowed from the fit (vbm_write_opts.scratch) when it holds one: P and W
     * are taken from it and given back to it by mixgroup_work_free; else NULL */
    vbm_scratch *scratch;
    /* Gram path (T <= cg): after an update R_h is kept implicitly as
     * Q_h^{-1} (P0R0_h + (Wt_h Z - sw_h mu_bh^T) / s2) and only the statistics
     * the next step needs are carried; mixgroup_finish writes R_h back. Every
     * product with Z (T x cg) becomes one with G = Z Z^T (T x T). */
    int gram;       /* use the Gram path for updates */
    int implicit;   /* mem's R of this group is stale: use the fields below */
    int prior_mean; /* some P0R0_h != 0 */
    int shift_mean; /* some mu_b0_h != 0 */
    int gram_ready; /* G and the prior products below are computed */
    int addressed;  /* the last Gram update also ran the address step's per-cluster part */
    double *G;      /* T x T: Z Z^T */
    double *Zt;     /* cg x T: Z^T, for the first address step's products (Gram path) */
    double *SR;     /* H x K x K: R_h R_h^T */
    double *LQ;     /* H x K x K: Cholesky factor of Q_h from the last update */
    double *Wtc;    /* HK x T: Wt of the last update (mixgroup_finish overwrites it) */
    double *swc;    /* H x K: sw of the last update */
    double *AZ;     /* HK x T: P0R0_h Z^T (when prior_mean) */
    double *AAt;    /* H x K x K: P0R0_h P0R0_h^T (when prior_mean) */
    double *zmu0;   /* H x T: Z mu_b0_h (when shift_mean) */
    double *GT;     /* HK x T: Wt G */
    /* From the second Gram update on, the shifts are implicit too:
     *   mu_bh = beta_h e_h + alpha_h mu_b0h + Z^T x_h + P0R0_h^T y_h,
     * e_h being the explicit mu_bh stored in the memory when this began, and
     * only the statistics the steps need (Z mu_bh, |mu_bh|^2, P0R0_h mu_bh,
     * mu_bh . mu_b0h) are carried; mixgroup_finish writes mu_bh back. */
    int b_implicit; /* mem's mu_b of this group is stale: use the fields below */
    double *bx;     /* H x T: x_h */
    double *by;     /* H x K: y_h (when prior_mean) */
    double *bZe;    /* H x T: Z e_h */
    double *bAe;    /* H x K: P0R0_h e_h (when prior_mean) */
    double *bAm0;   /* H x K: P0R0_h mu_b0h (when prior_mean) */
    double *bgx;    /* H x T: G x_h */
    double *bAmb;   /* H x K: P0R0_h mu_bh */
} mixgroup_work;

/* Allocate the workspace of group g for the codes. VBM_ENOMEM on failure. */
vbm_status mixgroup_work_init(mixgroup_work *w, const vbm_memory *mem, const vbm_codes *codes,
                              int g, vbm_error *err);
void mixgroup_work_free(mixgroup_work *w);

/* Initialise q(M_h), q(b_h) of group g: the prior, or shifts seeded by
 * k-means++ over the code means (VBM_EINVAL when H > T; VBM_ENOMEM). w is the
 * group's workspace for the same codes: on the Gram path the distances come
 * from its G = Z Z^T, formed here. */
vbm_status mixgroup_init(vbm_memory *mem, int g, const prior_t *prior, const vbm_codes *codes,
                         mixgroup_work *w, vbm_init init, rng_t *rng, vbm_error *err);
/* q(w | s), then q(s), given q(Omega); adds this group's ELBO terms to *elbo
 * (computes none when elbo is NULL).
 * floor: the q(s) floor to apply. VBM_ENUMERIC if a factorization fails. */
vbm_status mixgroup_address(const vbm_memory *mem, const prior_t *prior, mixgroup_work *w,
                            vbm_elbo *elbo, vbm_error *err);
/* q(b_h), then q(M_h), given q(y). VBM_ENUMERIC if a factorization fails. */
vbm_status mixgroup_update(vbm_memory *mem, const prior_t *prior, mixgroup_work *w, vbm_error *err);
/* Choose the update path: mode 0 automatic (Gram when T <= cg), 1 direct,
 * 2 Gram (falls back to direct when T > 4096). Call before the first update. */
void mixgroup_set_solver(mixgroup_work *w, int mode);
/* Run the group's loops on team (NULL: the calling thread), with a scratch set
 * per thread. VBM_ENOMEM on failure (the workspace is then unchanged). */
vbm_status mixgroup_set_team(mixgroup_work *w, team_t *team, vbm_error *err);
/* Write back R_h of the group if the Gram path left it implicit. Never fails. */
void mixgroup_finish(vbm_memory *mem, const prior_t *prior, mixgroup_work *w);
/* Copy q(y) of the group into the public layout (arrays already allocated). */
void mixgroup_export(const mixgroup_work *w, int G, vbm_addresses *out);
/* Read step for the group: s ~ q(s_t), w ~ q(w | s), z ~ p(z | s, w, Omega),
 * written into the group's columns of out_z (T x C). VBM_ENOMEM on failure. */
vbm_status mixgroup_read_draw(const vbm_memory *mem, const mixgroup_work *w, rng_t *rng,
                              double *out_z, vbm_error *err);
/* Draw one code of group g from cluster h: w ~ N(0, I), z ~ p(z | h, w, Omega),
 * written to out (cg values). VBM_ENOMEM on failure. */
vbm_status mixgroup_sample_one(const vbm_memory *mem, int g, int h, rng_t *rng, double *out,
                               vbm_error *err);

#endif
