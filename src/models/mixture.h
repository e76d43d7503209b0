/* mixture.h -- one group of the scalable mixture-based memory (Theorem 4):
 * H clusters of K x cg matrices M_h with shifts b_h over the code columns of
 * group g. The mixture model is one such group; the tree model is G of them. */
#ifndef VBMEM_MIXTURE_H
#define VBMEM_MIXTURE_H

#include "model.h"

/* q(y) and scratch for one group and one batch of T codes. */
typedef struct {
    int H, K, cg, g;
    long T;
    codestat_t cs;
    double *P;        /* HK x T: R_h z_t */
    double *W;        /* HK x T: means of q(w_t | s_t = h) */
    double *Wt;       /* HK x T: W scaled by q(s) */
    double *theta;    /* T x H: q(s_t = h) */
    double *thetaT;   /* H x T: the same, cluster-major for the per-cluster sweeps */
    double *E;        /* H x T: expected squared errors e_th */
    double *LW;       /* H x T: KL(q(w_t | s = h) || p(w)) */
    double *acc;      /* 4 x T: per-frame accumulators of one cluster */
    double *S;        /* H x K x K: R_h R_h^T + cg U_h */
    double *Sw;       /* H x K x K: covariance of q(w | s = h) */
    double *logdetSw; /* H */
    double *trSSw;    /* H: tr(S_h Sw_h) */
    double *trSw;     /* H: tr(Sw_h) */
    double *bb;       /* H: |mu_bh|^2 */
    double *Rmb;      /* H x K: R_h mu_bh */
    double *sw;       /* H x K: W_h q(s = h), the q(s)-weighted sums of the address means */
    double *Nh;       /* H: sum_t q(s_t = h), the soft count of cluster h */
    double *zb;       /* H x T: mu_bh . z_t */
    double *Y;        /* HK x cg */
    double *scratch;  /* 2 K^2 + K cg */
} mixgroup_work;

/* Allocate the workspace of group g for the codes. VBM_ENOMEM on failure. */
vbm_status mixgroup_work_init(mixgroup_work *w, const vbm_memory *mem, const vbm_codes *codes, int g,
                              vbm_error *err);
void mixgroup_work_free(mixgroup_work *w);

/* Initialise q(M_h), q(b_h) of group g: the prior, or shifts seeded by
 * k-means++ over the code means (VBM_EINVAL when H > T). */
vbm_status mixgroup_init(vbm_memory *mem, int g, const prior_t *prior, const vbm_codes *codes,
                         vbm_init init, rng_t *rng, vbm_error *err);
/* q(w | s), then q(s), given q(Omega); adds this group's ELBO terms to *elbo.
 * floor: the q(s) floor to apply. VBM_ENUMERIC if a factorization fails. */
vbm_status mixgroup_address(const vbm_memory *mem, const prior_t *prior, mixgroup_work *w,
                            vbm_elbo *elbo, vbm_error *err);
/* q(b_h), then q(M_h), given q(y). VBM_ENUMERIC if a factorization fails. */
vbm_status mixgroup_update(vbm_memory *mem, const prior_t *prior, mixgroup_work *w, vbm_error *err);
/* Copy q(y) of the group into the public layout (arrays already allocated). */
void mixgroup_export(const mixgroup_work *w, int G, vbm_addresses *out);
/* Read step for the group: s ~ q(s_t), w ~ q(w | s), z ~ p(z | s, w, Omega),
 * written into the group's columns of out_z (T x C). VBM_ENOMEM on failure. */
vbm_status mixgroup_read_draw(const vbm_memory *mem, const mixgroup_work *w, rng_t *rng, double *out_z,
                              vbm_error *err);
/* Draw one code of group g from cluster h: w ~ N(0, I), z ~ p(z | h, w, Omega),
 * written to out (cg values). VBM_ENOMEM on failure. */
vbm_status mixgroup_sample_one(const vbm_memory *mem, int g, int h, rng_t *rng, double *out, vbm_error *err);

#endif
