/* memory_impl.h -- the shared internal interface of the memory models: the prior
 * view used by one VB run, per-run workspaces, the operation table every model
 * file implements, and helpers common to all models (KL terms, code statistics). */
#ifndef VBMEM_MODEL_H
#define VBMEM_MODEL_H

#include "vbmem/vbmem.h"

#define VBM_PI 3.14159265358979323846
#include "numerics/rng.h"
#include "numerics/team.h"

/* The prior of one VB run, one block per (group, cluster) gh = g*H + h, with
 * the factorizations the updates need. Built from the base prior (write,
 * refit, elbo) or from the current posterior (append: online VB). */
typedef struct {
    int GH, K, cg;
    double *R0;       /* [GH][K x cg] */
    double *U0;       /* [GH][K x K] */
    double *P0;       /* [GH][K x K]  U0^{-1} (from its Cholesky factor) */
    double *P0R0;     /* [GH][K x cg] U0^{-1} R0 (Cholesky solve) */
    double *logdetU0; /* [GH] */
    double *mu_b0;    /* [GH][cg] */
    double *s2_b0;    /* [GH] */
} prior_t;

/* Build the prior from the memory's base prior, replicated for every cluster.
 * Fails with VBM_ENOMEM or VBM_ENUMERIC (U0 not positive definite). */
vbm_status prior_from_base(const vbm_memory *mem, prior_t *p, vbm_error *err);
/* Build the prior from the memory's current posterior (online VB). */
vbm_status prior_from_posterior(const vbm_memory *mem, prior_t *p, vbm_error *err);
void prior_free(prior_t *p);

/* Per-call statistics of a batch of codes restricted to the columns of group g:
 * squared norms of the means, sums of variances, entropy of q(z) over the
 * dimensions with positive variance. */
typedef struct {
    long T;
    int C, goff, cg;
    const double *mu; /* T x C, the group occupies columns goff .. goff+cg-1 */
    double *znorm;    /* [T] */
    double *vsum;     /* [T] */
    double entropy;   /* sum over frames and group dims with v > 0 */
} codestat_t;

vbm_status codestat_init(codestat_t *cs, const vbm_codes *codes, int goff, int cg, vbm_error *err);
void codestat_free(codestat_t *cs);

/* KL(MN(R, U, I) || MN(R0, U0, I)) for K x cg matrices, Eq. 254, given the
 * prior's precision P0 and log det U0. work holds 2*K*K + K*cg doubles.
 * Returns NAN when U is not positive definite. */
double kl_matrix_normal(int K, int cg, const double *R, const double *U, const double *R0,
                        const double *P0, double logdetU0, double *work);
/* KL(N(mu, s2 I) || N(mu0, s20 I)) in dimension n. */
double kl_iso_normal(int n, const double *mu, double s2, const double *mu0, double s20);
/* The same from the squared distance d2 = |mu - mu0|^2. */
double kl_iso_normal_d2(int n, double d2, double s2, double s20);
/* KL(N(mu, S) || N(0, I)) in dimension K, given log det S. */
double kl_std_normal(int K, const double *mu, int mu_stride, const double *S, double logdetS);
/* KL(Cat(theta) || Cat(1/n)). Zero probabilities contribute zero. */
double kl_uniform_cat(int n, const double *theta);
/* In-place softmax of n logits. */
void softmax_inplace(int n, double *x);

/* The operations a model file provides to the generic VB driver (memory.c).
 * `work` is a model-specific workspace holding q(y) for one batch of codes. */
typedef struct {
    /* Allocate a workspace for T frames of the given codes. */
    vbm_status (*work_new)(const vbm_memory *mem, const vbm_codes *codes, void **work,
                           vbm_error *err);
    void (*work_free)(void *work);
    /* Initialise q(Omega) of mem for a batch write (k-means++ where the model
     * has shifts and init asks for it). work is the workspace of the same
     * codes (a model may keep what it computes from them there). */
    vbm_status (*init)(vbm_memory *mem, const vbm_codes *codes, const prior_t *prior, void *work,
                       vbm_init init, rng_t *rng, vbm_error *err);
    /* q(y) <- its optimum given q(Omega); then the ELBO of (q(y), q(Omega)),
     * added to *elbo. elbo may be NULL: the ELBO is then not needed, and a
     * model may skip the work of its terms. */
    vbm_status (*address)(const vbm_memory *mem, const prior_t *prior, void *work, vbm_elbo *elbo,
                          vbm_error *err);
    /* q(Omega) <- its optimum given q(y) (shifts first, then M). */
    vbm_status (*update)(vbm_memory *mem, const prior_t *prior, void *work, vbm_error *err);
    /* Copy q(y) into the public layout. */
    vbm_status (*addresses)(const vbm_memory *mem, void *work, vbm_addresses *out, vbm_error *err);
    /* Draw one code per frame from q(y) q(Omega) p(z | y, Omega) (read step).
     * Fails only with VBM_ENOMEM. */
    vbm_status (*read_draw)(const vbm_memory *mem, void *work, rng_t *rng, double *out_z,
                            vbm_error *err);
    /* Draw n codes from p(y | Omega) q(Omega) p(z | y, Omega) (generation).
     * Fails only with VBM_ENOMEM. */
    vbm_status (*sample)(const vbm_memory *mem, long n, int cluster, rng_t *rng, double *out_z,
                         int *out_s, vbm_error *err);
    /* Optional (NULL when the model has one update path): choose the path of
     * the updates (0 automatic, 1 direct, 2 Gram); called right after work_new. */
    void (*set_solver)(void *work, int mode);
    /* Optional: write back any posterior parameter the updates kept implicit;
     * called once after the last iteration of a fit. Never fails. */
    void (*finish)(vbm_memory *mem, const prior_t *prior, void *work);
    /* Optional (NULL when the model runs on the calling thread only): split the
     * work of later steps over team's threads, called right after work_new when
     * the fit has a team. The result must not depend on the team. VBM_ENOMEM. */
    vbm_status (*set_team)(void *work, team_t *team, vbm_error *err);
    /* Optional (NULL when the model has no large arrays to reuse): take the
     * workspace's large arrays from scratch (held by the fit, see scratch.h) and give
     * them back to it when the workspace is freed; called right after work_new
     * when the fit holds a scratch, before any step. Never fails. */
    void (*set_scratch)(void *work, vbm_scratch *scratch);
} model_ops;

extern const model_ops gaussian_ops;
extern const model_ops categorical_ops;
extern const model_ops mixture_ops;
extern const model_ops tree_ops;

/* Draw z = R^T w + mu_b + sqrt(w^T U w + s2_b + s2) * eps for one cluster:
 * an exact draw of z ~ p(z | w, M, b) with M ~ q(M), b ~ q(b) marginalised
 * per sample (E^T v with E standard normal K x cg has law N(0, |v|^2 I)). */
void draw_code(int K, int cg, const double *R, const double *U, const double *mu_b, double s2_b,
               double s2, const double *w, rng_t *rng, double *out_z);

/* Allocate public addresses for T frames, G groups, H clusters, K rows (with
 * covariances when with_cov). VBM_ENOMEM on failure. */
vbm_status addresses_alloc(vbm_addresses *a, long T, int G, int H, int K, int with_cov,
                           vbm_error *err);

/* Replace the posterior means R of every block by a draw from the prior,
 * R0 + chol(U0) E with E standard normal (App. F.1.2 "Random" init); R's old
 * contents are not read. Out of memory for its scratch, R = R0 (a valid, if
 * symmetric, start). */
void init_random_means(vbm_memory *mem, const prior_t *prior, rng_t *rng);

/* Posterior <- base prior, for every (group, cluster): R = R0's columns of the
 * group, U = U0, and with a shift mu_b = mu_b0's, s2_b = sigma2_b0. Nothing
 * else (frames, retained codes, paths) is touched. Never fails. */
void memory_reset_posterior(vbm_memory *m);
/* Move the contents of src into dst (freeing dst's old contents) and free src
 * (the commit of an operation fitted on a private copy). Never fails. */
void memory_replace(vbm_memory *dst, vbm_memory *src);

#endif
