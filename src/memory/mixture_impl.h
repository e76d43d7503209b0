/* mixture_impl.h -- owns what the three files of one mixture group share (mixture.c,
 * mixture_address.c, mixture_update.c): the memory's blocks of a cluster, the loops' chunk
 * sizes, the threads' scratch and the steps' per-cluster parts. Private to src/memory. */
#ifndef VBMEM_MIXTURE_IMPL_H
#define VBMEM_MIXTURE_IMPL_H

#include <stddef.h>

#include "mixture.h"

#define BLK_R(mem, gh) ((mem)->R + (size_t)(gh) * (mem)->cfg.rows * (mem)->cg)
#define BLK_U(mem, gh) ((mem)->U + (size_t)(gh) * (mem)->cfg.rows * (mem)->cfg.rows)
#define BLK_B(mem, gh) ((mem)->mu_b + (size_t)(gh) * (mem)->cg)

/* Frames per item of the q(s) loop. Fixed, so that the ELBO's sum over frames
 * (per chunk, then over chunks in order) does not depend on the team. */
#define FRAME_CHUNK 16

/* The work of a cluster's K x K factorizations, inverses and solves, in the
 * units of team_for's estimate (values touched): latency-bound, so worth far
 * more than their flops. */
#define CLUSTER_FIXED 2000L
/* The q(s) loop runs on the team from this many logits (H T) on. */
#define FRAMES_TEAM_MIN 65536L

/* One thread's scratch set (see mixgroup_work.scr). */
typedef struct {
    double *kw;  /* 2 K^2 + K cg: kl_matrix_normal, the direct update's Q */
    double *acc; /* 2 T: per-frame accumulators of one cluster, or of the q(s) softmax */
    double *zx;  /* cg: a row of the shifts' write-back */
} mixgroup_scratch;

/* Doubles of one cluster's scratch (mixgroup_work.gsc): the address step's
 * precision A (K^2), then the Gram update's M2, YY, X, AW, Q, M1 (K^2 each) and
 * Amb, wzb, v, rhs (K each). Never fails. */
size_t mixgroup_gsc_len(int K);

/* P and W of w (HK x T and HK x T + H x T), taken from w->scratch (a plain allocation
 * when it is NULL) by the first address step; their contents are written before they
 * are read. Fails with VBM_ENOMEM. */
vbm_status mixgroup_big_arrays(mixgroup_work *w, vbm_error *err);

/* The scratch set of thread `worker` of w's team. Never fails. */
mixgroup_scratch mixgroup_scratch_of(const mixgroup_work *w, int worker);

/* Z^T (cg x T) and G = Z Z^T (T x T) of this group's code means, each formed
 * once per workspace (the first of k-means++, the first address step or the
 * first Gram update that needs them). Fails with VBM_ENOMEM. */
vbm_status mixgroup_gram_codes(mixgroup_work *w, vbm_error *err);

/* Allocate the Gram-path state and compute G = Z Z^T and the products of the
 * prior means with the codes, once per workspace. Fails with VBM_ENOMEM. */
vbm_status mixgroup_gram_prepare(const vbm_memory *mem, const prior_t *prior, mixgroup_work *w,
                                 vbm_error *err);

/* The address step for cluster h, in three parts run in turn over a range of clusters
 * (mixture_address.c says why): _pre forms S_h = R_h R_h^T + cg U_h and the precision
 * A_h = I + S_h / s2 of q(w | s = h) (never fails); _factor factors it (Sigma_w,h and its
 * log-determinant; returns 0, or 2 when A_h is not positive definite); _post does the rest
 * (returns 0, or 3 when the posterior row covariance is not positive definite). implicit
 * and b_implicit say how R_h and mu_bh are held. */
void mixgroup_address_pre(const vbm_memory *mem, mixgroup_work *w, int h, int implicit);
int mixgroup_address_factor(mixgroup_work *w, int h);
int mixgroup_address_post(const vbm_memory *mem, const prior_t *prior, mixgroup_work *w, int h,
                          int want_elbo, int worker, int implicit, int b_implicit);

/* The first failure recorded by the last per-cluster loop (mixcluster.st), as an error:
 * VBM_ENUMERIC naming the cluster and what was not positive definite; VBM_OK when none. */
vbm_status mixgroup_cluster_status(const mixgroup_work *w, vbm_error *err);

#endif
