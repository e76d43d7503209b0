/* vbmem.h -- public interface of libvbmem: episodic generative memories fitted by
 * mean-field variational Bayes in latent space (Lingle, "Meta-Learning with
 * Variational Bayes", App. B-G).
 *
 * Conventions used throughout:
 *  - every matrix is a dense row-major array of doubles;
 *  - every function that can fail returns a vbm_status and, on failure, fills the
 *    caller's vbm_error (which may be NULL when the caller does not want one): the
 *    status, the field at fault and a message. vbm_error is the one error record of
 *    the whole tree: the engine, the networks, the wire forms and the HTTP edge fill
 *    and pass on the same record;
 *  - whoever allocates frees: objects returned through an out-pointer are owned
 *    by the caller and released with the matching *_free function;
 *  - there is no global mutable state: distinct memories may be used from
 *    distinct threads at the same time; one memory must not be mutated by two
 *    threads at once (reads - elbo, sample, address, read, export - may run
 *    concurrently with each other). */
#ifndef VBMEM_VBMEM_H
#define VBMEM_VBMEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VBM_VERSION_STRING "0.1.0"

/* Hard limits that guard allocations against absurd sizes. */
#define VBM_MAX_CODE_SIZE 65536
#define VBM_MAX_ROWS      4096
#define VBM_MAX_CLUSTERS  65536
#define VBM_MAX_FRAMES    10000000L
#define VBM_MAX_ELEMENTS  400000000L /* any single array, in doubles (3.2 GB) */
/* The observation variance sigma_z2 a configuration may hold: far outside it (1e-320, 1e308) the
 * posterior's precisions overflow or vanish and every write fails. */
#define VBM_MIN_SIGMA_Z2 1e-8
#define VBM_MAX_SIGMA_Z2 1e8

typedef enum {
    VBM_OK = 0,
    VBM_EINVAL = 1,   /* invalid argument: sizes, NaN/Inf, negative variance ... */
    VBM_ENOMEM = 2,   /* allocation failed or size beyond the guards above */
    VBM_ENUMERIC = 3, /* a factorization failed (matrix not positive definite) */
    VBM_EFORMAT = 4,  /* an imported memory (or a stored record, a model file) is malformed */
    /* The statuses below are never returned by libvbmem itself: they belong to the
     * service built on it (sessions, stores, the job pool), which reports them in
     * the same record. */
    VBM_ENOTFOUND = 5, /* no such session or model (or not visible to this owner) */
    VBM_ECONFLICT = 6, /* If-Match version differs from the session's version */
    VBM_ELIMIT = 7,    /* a configured limit (sessions, memory bytes) would be exceeded */
    VBM_EBUSY = 8,     /* the job queue is full */
    VBM_ESTOPPED = 9,  /* the service no longer accepts work (shutting down) */
    VBM_EUNAVAIL = 10, /* the durable store is busy, locked or unreachable */
    VBM_ECORRUPT = 11, /* a stored record fails its checksum or does not import: it stays
                        * unreadable until it is deleted or restored from a backup */
    VBM_EUNKNOWN = 12  /* a write's outcome is unknown: the durable store may hold it
                        * (replicas did not confirm it in time, or the connection to the
                        * store was lost while it ran); not acknowledged */
} vbm_status;

#define VBM_FIELD_LEN 128
#define VBM_MSG_LEN   512

/* The one error record. status is the failure's status (VBM_OK while none is
 * recorded); field is the path of the input at fault, in the JSON form the wire
 * uses ("codes.mu[3][1]", "rows", "memory.prior.U0"), or "" when the failure is
 * not about one input; msg is a readable message. Invariant: when field is not
 * empty, msg starts with field followed by ": ", so msg alone reads well. Fill it
 * only with vbm_fail (and re-root it with vbm_error_rebase); never parse msg. */
typedef struct {
    vbm_status status;
    char field[VBM_FIELD_LEN];
    char msg[VBM_MSG_LEN];
} vbm_error;

/* Record a failure in err (which may be NULL): status st, field (NULL or "" for
 * none; truncated to VBM_FIELD_LEN - 1 bytes) and the printf-style message,
 * which is stored after "field: " when field is not empty (truncated to
 * VBM_MSG_LEN - 1 bytes). Returns st, so that callers can write
 * `return vbm_fail(err, VBM_EINVAL, "rows", "K = %d is too large", K);`. Never
 * fails. */
vbm_status vbm_fail(vbm_error *err, vbm_status st, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Re-root the failure recorded in err under the path base (which may be ""):
 * the field "groups" under "model" becomes "model.groups", a field that starts
 * with an index ("[3].R") is appended without a dot ("clusters[3].R"), and a
 * failure with no field gets base as its field. msg keeps its invariant (it
 * starts with the new field and ": "). No effect when err is NULL or base is
 * empty. Never fails. */
void vbm_error_rebase(vbm_error *err, const char *base);

/* The message of the failure recorded in err without its "field: " prefix (the whole message
 * when the failure names no field): for a caller that records the failure again under another
 * field. Points into err->msg; "" when err is NULL. Never fails. */
const char *vbm_error_text(const vbm_error *err);

/* Short lowercase name of a status ("ok", "invalid", "nomem",
 * "numeric", "format", "not_found", "conflict", "limit", "busy", "stopped",
 * "unavailable"; "unknown" for any other value). Never fails. */
const char *vbm_status_name(vbm_status st);

typedef enum {
    VBM_GAUSSIAN = 0,    /* Theorem 1 (and Theorem 3 with shift = 1) */
    VBM_CATEGORICAL = 1, /* Theorem 2 */
    VBM_MIXTURE = 2,     /* Theorem 4, k-means++ seeded */
    VBM_TREE = 3,        /* Theorem 5, with prefix pseudocounts for sampling */
    VBM_DKM = 4          /* Dynamic Kanerva Machine online writer (baseline) */
} vbm_kind;

/* Hyper-parameters of a memory. Fill with vbm_config_default, then override. */
typedef struct {
    vbm_kind kind;
    int code_size;       /* C */
    int rows;            /* K */
    int clusters;        /* H (mixture, tree; 1 otherwise) */
    int groups;          /* G (tree; 1 otherwise); must divide C */
    double sigma_z2;     /* observation variance of p(z | y, Omega) */
    int shift;           /* mean shift b (always on for mixture and tree) */
    double u0;           /* default prior row covariance U0 = u0 * I_K */
    double sigma2_b0;    /* prior covariance of each shift, sigma2_b0 * I */
    double s_floor;      /* q(s) <- (1 - s_floor) q(s) + s_floor / H; 0 disables it and
                            gives Theorem 4's q(s) update exactly (the default 1e-6 of
                            mixture/tree is vbmem's own, not the paper's) */
    double dkm_addr_var; /* DKM: fixed variance of the address posterior */
    long retain_max;     /* codes retained for refit/resize (0: none), FIFO */
    int memo_k;          /* tree: memos of the top memo_k joint paths per frame (MWS,
                            README "Memos"); 0 (the default) = off, else 1..VBM_MAX_MEMO_K */
    int path_prior;      /* tree: VBM_PATH_FACTORISED (0, the default: Theorem 5's uniform
                            p(s) = prod_g p(s^g)) or VBM_PATH_JOINT (1: p(s) = Cat(pi) over
                            the H^G joint paths, pi ~ Dirichlet(path_alpha); README
                            "A coupled prior over joint paths") */
    double path_alpha;   /* the joint prior's concentration, > 0 (default 1; read only
                            when path_prior is VBM_PATH_JOINT) */
} vbm_config;

/* Values of vbm_config.path_prior. */
#define VBM_PATH_FACTORISED 0
#define VBM_PATH_JOINT      1

/* The largest memo_k (joint paths kept per written frame by a tree memory). */
#define VBM_MAX_MEMO_K 64

/* A batch of perceptual codes q(z_t) = N(mu_t, diag(s2_t)), t = 1..T.
 * mu is T x C. s2 is T x C, or NULL meaning all variances are zero (codes
 * observed exactly, as in the synthetic episodes of App. E.1). */
typedef struct {
    long T;
    int C;
    const double *mu;
    const double *s2;
} vbm_codes;

/* ELBO of an episode in latent space (Eq. 5 without the reconstruction term),
 * term by term; per_frame = total / T and
 * total = loglik_codes - kl_w - kl_s - kl_M - kl_b.
 * loglik_codes is -E[KL(q(z_t) || p(z_t | y_t, Omega))] summed over frames; for
 * code dimensions with zero variance it is the code's expected log-likelihood. */
typedef struct {
    double per_frame;
    double total;
    double loglik_codes;
    double kl_w;
    double kl_s;
    double kl_M;
    double kl_b;
    long T;
} vbm_elbo;

/* Per-frame addressing posteriors q(y_t). For every frame t, group g, cluster h:
 *   s[(t*G + g)*H + h]           q(s_t^g = h)  (1 for models without clusters)
 *   w_mu[((t*G + g)*H + h)*K + k] mean of q(w_t^g | s = h); for the categorical
 *                                model the probabilities q(w_t = e_k)
 *   w_cov[((g*H + h)*K + i)*K + j] covariance of q(w^g | s = h), shared by all
 *                                frames (NULL for the categorical model) */
typedef struct {
    long T;
    int G, H, K;
    double *s;
    double *w_mu;
    double *w_cov;
} vbm_addresses;

typedef enum {
    VBM_INIT_AUTO = 0,     /* RANDOM, plus k-means++ shifts for mixture/tree */
    VBM_INIT_PRIOR = 1,    /* q(Omega) = p(Omega) exactly */
    VBM_INIT_KMEANSPP = 2, /* shifts seeded by k-means++ over the code means, R = R0 */
    VBM_INIT_CURRENT = 3,  /* start from the memory's current posterior */
    VBM_INIT_RANDOM = 4    /* means of q(M) drawn from p(M) (App. F.1.2 "Random"):
                             with R0 = 0 the updates otherwise stay at the
                             symmetric fixed point R = 0 */
} vbm_init;

/* A team of threads that a fit can split its work over (vbm_write_opts.team).
 * Its helpers spin for up to 2 ms after each piece of work before they sleep,
 * so a team pays off for a caller with idle cores and latency to win, not for
 * a server that already runs one fit per core. One fit at a time gets the
 * helpers; a fit that finds the team busy runs on its own thread. */
typedef struct vbm_team vbm_team;

/* Start a team of `threads` threads, the calling thread included (so threads - 1
 * helpers; at most 64 in all). Fewer helpers than asked, when thread creation
 * fails, is not an error. Returns NULL only when out of memory, or when threads
 * < 1; free with vbm_team_free, after the last fit that uses it has returned. */
vbm_team *vbm_team_new(int threads);

/* Stop the helpers and free the team. NULL is a no-op. */
void vbm_team_free(vbm_team *team);

/* A pool of large buffers that fits given it (vbm_write_opts.scratch) reuse
 * instead of allocating them anew: the mixture and tree fits' K x T arrays of
 * address means and products (two of H K T doubles per group, 9 MB each at
 * T = 1,280, H = 150, K = 6), which the C library otherwise maps and the kernel
 * zeroes page by page on every fit. It keeps up to 8 blocks, the largest a fit
 * used, until freed. One fit at a time holds it; a fit that finds it held
 * allocates as without one. The result is the same, bit for bit, with or
 * without a scratch. */
typedef struct vbm_scratch vbm_scratch;

/* An empty pool. Returns NULL only when out of memory; free with
 * vbm_scratch_free, after the last fit that uses it has returned. */
vbm_scratch *vbm_scratch_new(void);

/* Free the pool and the blocks it keeps. NULL is a no-op. */
void vbm_scratch_free(vbm_scratch *scratch);

/* Bytes of the blocks the pool keeps now (0 for NULL). Call it only while no fit holds the pool
 * (the fits that use it run on the caller's thread or have returned). Never fails. */
size_t vbm_scratch_bytes(const vbm_scratch *scratch);

/* How the mixture and tree updates are computed; the posterior is the same. */
typedef enum {
    VBM_SOLVER_AUTO = 0,   /* GRAM when T <= the code width of a group, else DIRECT */
    VBM_SOLVER_DIRECT = 1, /* products of the K x C matrices R_h with the codes each iteration */
    VBM_SOLVER_GRAM = 2    /* R_h kept implicitly between iterations; products with the T x T
                              Gram matrix of the codes instead (for T <= 4096, else DIRECT) */
} vbm_solver;

typedef struct {
    int max_iter;  /* VB iterations (updates of q(Omega)); >= 0 */
    double tol;    /* stop when |dELBO| <= tol * |ELBO|; 0: run max_iter */
    uint64_t seed; /* seeds k-means++ */
    vbm_init init;
    int want_addresses;   /* fill result->addr */
    int want_trace;       /* fill result->trace with the ELBO after each iteration */
    vbm_solver solver;    /* update path (mixture, tree); VBM_SOLVER_AUTO by default */
    double max_seconds;   /* > 0: stop after the first update at which this much wall time has
                           passed since the fit began (result->time_limited); 0: no limit */
    vbm_team *team;       /* NULL (default): the fit runs on the calling thread. Otherwise the
                           mixture and tree fits split their clusters over the team's threads;
                           the result is the same, bit for bit, with or without a team. */
    vbm_scratch *scratch; /* NULL (default): the fit allocates its large arrays and frees
                             them; otherwise it takes them from and gives them back to
                             this pool (see vbm_scratch_new) */
} vbm_write_opts;

typedef struct {
    vbm_elbo elbo;      /* of the returned posterior with its optimal q(y) */
    int iterations;     /* updates of q(Omega) run */
    int converged;      /* stopped by tol */
    int time_limited;   /* stopped by opts.max_seconds before max_iter */
    double *trace;      /* when want_trace: [iterations + 1] ELBO per frame, trace[0]
                           at the initial q(Omega); NULL otherwise */
    vbm_addresses addr; /* when requested; zeroed otherwise */
} vbm_write_result;

/* The memory: hyper-parameters, base prior, variational posterior over the
 * episode-level latents, tree pseudocounts and optionally retained codes.
 * Treat as read-only outside libvbmem; use the functions below. */
typedef struct {
    vbm_config cfg;
    int cg; /* C / G: width of one code partition */
    /* base prior p(Omega), shared by all clusters: */
    double *R0;    /* K x C (group g uses columns g*cg .. g*cg+cg-1) */
    double *U0;    /* K x K, symmetric positive definite */
    double *mu_b0; /* C */
    /* posterior q(Omega), one block per (group g, cluster h), index gh = g*H+h: */
    double *R;    /* [G*H][K x cg] */
    double *U;    /* [G*H][K x K] */
    double *mu_b; /* [G*H][cg]  (zeros when the model has no shift) */
    double *s2_b; /* [G*H]      isotropic variance of q(b); 0 without shift */
    /* tree: empirical counts of hard-assignment paths (s^1..s^G) */
    long n_paths;
    int *paths;          /* n_paths x G */
    double *path_counts; /* n_paths */
    /* bookkeeping */
    long frames;      /* frames written since the last write/refit/resize */
    double last_elbo; /* ELBO per frame of the last write/append/refit (NAN if none) */
    /* retained codes (at most cfg.retain_max, oldest dropped first) */
    long n_codes;
    double *codes_mu; /* n_codes x C */
    double *codes_s2; /* n_codes x C */
    /* tree with cfg.memo_k > 0: the memo of every frame of the last write/refit and
     * the appends since, oldest first: memo_n[i] (1..memo_k) distinct joint paths
     * (s^1..s^G) with their scores (the frame's ELBO term under that path), best
     * first; slots past memo_n[i] are unused (paths -1, scores 0) */
    long n_memos;
    int *memo_n;         /* n_memos */
    int *memo_paths;     /* n_memos x memo_k x G */
    double *memo_scores; /* n_memos x memo_k */
    /* tree with cfg.path_prior VBM_PATH_JOINT: q(pi) = Dirichlet(path_alpha + n_s) over
     * the H^G joint paths, sparse: the n_jpaths paths with counts n_s > 0 (every
     * other path has n_s = 0) */
    long n_jpaths;
    int *jpaths;       /* n_jpaths x G */
    double *jp_counts; /* n_jpaths, each > 0 */
} vbm_memory;

/* Fill *cfg with the defaults for a model of the given kind and code size C.
 * From the paper's text: gaussian/categorical/dkm K = 32 (App. F.1.2),
 * U0 = I (Sec. 4.3), sigma_z^2 = 1 (App. E.1); mixture/tree H = 10, K = 6,
 * G = 2 for the tree (App. F.2.2). From the paper author's code (the text
 * gives no value): mixture/tree U0 = 0.4 I, Sigma_b0 = 0.4 K I,
 * sigma_z^2 = 0.2 K; DKM address variance 0.3. vbmem's own: Sigma_b0 = I for
 * the gaussian's optional shift and the mixture/tree q(s) floor s_floor = 1e-6
 * (0 for the other kinds; 0 gives Theorem 4's update exactly). README.md
 * ("The engine") has the details. Never fails. */
void vbm_config_default(vbm_kind kind, int code_size, vbm_config *cfg);

/* Set the number of rows K of a configuration made by vbm_config_default,
 * keeping the K-proportional defaults (from the paper author's code)
 * consistent: for the mixture and tree kinds sigma_z^2 = 0.2 K and
 * Sigma_b0 = 0.4 K I follow the new K. Call it
 * before overriding those two fields. Never fails (K is checked later by
 * vbm_config_check). */
void vbm_config_set_rows(vbm_config *cfg, int K);

/* Check a configuration. Returns VBM_OK or VBM_EINVAL with a message naming the
 * offending field (sizes out of range, G not dividing C, non-positive variances,
 * sigma_z2 outside [VBM_MIN_SIGMA_Z2, VBM_MAX_SIGMA_Z2], a floor outside [0, 1),
 * shift on the categorical model ...). */
vbm_status vbm_config_check(const vbm_config *cfg, vbm_error *err);

/* Parse "gaussian" ... "dkm". Returns VBM_OK or VBM_EINVAL for an unknown name. */
vbm_status vbm_kind_parse(const char *name, vbm_kind *out, vbm_error *err);
/* Name of a kind ("gaussian" ...), or "unknown". */
const char *vbm_kind_name(vbm_kind kind);

/* Create a memory whose posterior equals its prior. R0 (K x C) and U0 (K x K)
 * override the default prior (zeros, u0 * I) when non-NULL; U0 must be
 * symmetric positive definite. Fails with VBM_EINVAL (bad config, non-finite
 * or non-SPD prior), VBM_ENOMEM. On success *out is owned by the caller. */
vbm_status vbm_memory_create(const vbm_config *cfg, const double *R0, const double *U0,
                             vbm_memory **out, vbm_error *err);
/* Free a memory and everything it owns. NULL is a no-op. */
void vbm_memory_free(vbm_memory *mem);
/* Deep copy. Fails only with VBM_ENOMEM. */
vbm_status vbm_memory_clone(const vbm_memory *mem, vbm_memory **out, vbm_error *err);

/* Validate a batch of codes against a memory: C must match, T >= 1, every mean
 * finite, every variance finite and >= 0. Returns VBM_EINVAL with the frame and
 * dimension of the first offending value. */
vbm_status vbm_codes_check(const vbm_memory *mem, const vbm_codes *codes, vbm_error *err);

/* Default write options: 50 iterations, tol 0, seed 0, VBM_INIT_AUTO, VBM_SOLVER_AUTO. */
void vbm_write_opts_default(vbm_write_opts *opts);

/* Batch VB from the base prior (replacing the current posterior) on the given
 * codes. The DKM kind runs its online non-iterative writer instead (one pass,
 * result->iterations = 1). Retains the codes when cfg.retain_max > 0. On
 * success fills *res (release with vbm_write_result_free). Fails with
 * VBM_EINVAL (bad codes, H > T for k-means++), VBM_ENOMEM, VBM_ENUMERIC; on
 * failure the memory is unchanged and *res is zeroed (nothing to free). The
 * same holds for vbm_append, vbm_refit and vbm_resize. */
vbm_status vbm_write(vbm_memory *mem, const vbm_codes *codes, const vbm_write_opts *opts,
                     vbm_write_result *res, vbm_error *err);

/* Online VB: the current posterior is the prior for the new codes; no earlier
 * codes are needed. The reported ELBO has the old posterior as its prior.
 * Tree pseudocounts and retained codes are extended. Same failures as write. */
vbm_status vbm_append(vbm_memory *mem, const vbm_codes *codes, const vbm_write_opts *opts,
                      vbm_write_result *res, vbm_error *err);

/* Batch VB from the base prior over every retained code (plus `extra` when
 * non-NULL, which is retained too). Fails with VBM_EINVAL when nothing is
 * retained and extra is NULL. */
vbm_status vbm_refit(vbm_memory *mem, const vbm_codes *extra, const vbm_write_opts *opts,
                     vbm_write_result *res, vbm_error *err);

/* What vbm_forget removed, cue by cue (release with vbm_forget_result_free). */
typedef struct {
    int exact;            /* 1: the memory is now exactly what it would be had the removed items
                           never been written (retained-code path, or every frame forgotten);
                           0: the approximate conjugate downdate */
    long n;               /* cues */
    long *item;           /* [n] index of the retained code removed for cue i among the retained
                           codes before the call (oldest first); -1 on the downdate path */
    double *distance;     /* [n] Euclidean distance from cue i's mean to the removed retained
                           code's mean, or (downdate) to the memory's posterior-mean read of the
                           cue (VBM_READ_MEAN) before the call */
    vbm_addresses addr;   /* q(y) of every cue under the memory before the call, as vbm_address
                           gives it (dkm: the writer's address mean (R R^T + I)^{-1} R z and its
                           fixed variance) */
    vbm_write_result fit; /* retained-code path with codes left: the write's result (its
                           addresses when opts->want_addresses); otherwise zeroed, with
                           fit.elbo.per_frame and fit.elbo.total NaN */
} vbm_forget_result;

/* Remove from the memory the contribution of the stored items nearest the cues
 * (cues->T of them; only their means are read).
 *  - Retained-code path, when the memory retains codes (cfg.retain_max > 0 and
 *    n_codes > 0): cue i removes the retained code nearest its mean (Euclidean;
 *    cues in order, each retained code at most once, ties to the oldest); then
 *    the memory is refitted from the base prior over the remaining retained
 *    codes, oldest first, exactly as vbm_write of those codes with opts
 *    (VBM_INIT_CURRENT read as VBM_INIT_AUTO) gives it, bit for bit; with
 *    nothing left it returns to its prior (frames 0, no codes, no paths).
 *    Frames written but no longer retained (retain_max reached) are not in the
 *    refit, as with vbm_refit. Exact (res->exact = 1).
 *  - Downdate path otherwise (gaussian, mixture, dkm): every cue is addressed
 *    under the current memory (theta_h = q(s=h), mu_h and Sigma_h of q(w|s=h);
 *    dkm: theta = 1, the writer's address mean, Sigma = 0) and its term, the cue's
 *    mean z standing for the stored item, is subtracted from the natural
 *    parameters of every cluster (Theorem 4, Eq. 198-207; Theorems 1 and 3 with
 *    H = 1):
 *      Q_h = U_h^{-1},  Q_h' = Q_h - sum_i theta_ih (mu_ih mu_ih^T + Sigma_h) / s2,
 *      Y_h = Q_h R_h,   Y_h' = Y_h - sum_i theta_ih mu_ih (z_i - mu_bh)^T / s2,
 *      R_h' = Q_h'^{-1} Y_h',  U_h' = Q_h'^{-1}  (Cholesky factor and solves),
 *      1/s2b_h' = 1/s2b_h - sum_i theta_ih / s2,
 *      mu_bh'/s2b_h' = mu_bh/s2b_h - sum_i theta_ih (z_i - R_h^T mu_ih) / s2,
 *    all from the posterior before the call; the precisions never go below the
 *    base prior's (the part of Q_h' - U0^{-1} with negative eigenvalues is
 *    dropped, 1/s2b_h' is at least 1/sigma2_b0). This is one VB update with the
 *    cues' terms removed while every other frame's q(y) is held fixed:
 *    approximate (res->exact = 0). frames decreases by cues->T; when that
 *    leaves none the memory returns to its prior (res->exact = 1). last_elbo
 *    becomes NaN (no codes to evaluate it on).
 * Fails with VBM_EINVAL (bad cues: field "codes", "codes.mu[i][j]" ...; more
 * cues than retained codes: "codes"; the downdate asked of a categorical or
 * tree memory, which retains no codes: "kind"; on the retained path bad opts and
 * the write's own refusals, e.g. k-means++ seeding with fewer codes left than
 * clusters),
 * VBM_ENUMERIC (a posterior precision not positive definite), VBM_ENOMEM; on
 * failure the memory is unchanged and *res is zeroed (nothing to free). */
vbm_status vbm_forget(vbm_memory *mem, const vbm_codes *cues, const vbm_write_opts *opts,
                      vbm_forget_result *res, vbm_error *err);

/* Release what a vbm_forget_result owns; it is left zeroed. NULL-safe. */
void vbm_forget_result_free(vbm_forget_result *res);

/* ELBO of the codes under the memory's posterior and base prior, with q(y)
 * set to its optimum given q(Omega). addr may be NULL; otherwise it is filled
 * (release with vbm_addresses_free). */
vbm_status vbm_elbo_eval(const vbm_memory *mem, const vbm_codes *codes, vbm_elbo *out,
                         vbm_addresses *addr, vbm_error *err);

/* Infer q(y) for query codes given q(Omega) (App. G.2 step 3). Fills *addr. */
vbm_status vbm_address(const vbm_memory *mem, const vbm_codes *query, vbm_addresses *addr,
                       vbm_error *err);

/* Generate n codes from memory (App. G.1): Omega ~ q(Omega) independently for
 * every sample, y ~ p(y | Omega) (for the tree the hard-assignment path is drawn
 * from the empirical pseudocounts when there are any), z ~ p(z | y, Omega).
 * cluster >= 0 fixes s = cluster (all groups); -1 draws it. out_z is n x C;
 * out_s (n x G, may be NULL) receives the clusters used. Deterministic given
 * seed. Fails with VBM_EINVAL (n < 1, cluster out of range). */
vbm_status vbm_sample(const vbm_memory *mem, long n, uint64_t seed, int cluster, double *out_z,
                      int *out_s, vbm_error *err);

/* How a read turns the query's addressing posterior q(y) into codes. */
typedef enum {
    VBM_READ_SAMPLE = 0,  /* App. G.2 steps 3-5: Omega ~ q(Omega), y ~ q(y),
                           * z ~ p(z | y, Omega) (with the observation noise sigma_z^2) */
    VBM_READ_MEAN = 1,    /* the posterior-mean read E[z | q(y), q(Omega)], no noise: for the
                           * mixture (and each group of the tree) sum_h q(s=h) (E[M_h]^T
                           * E[w | s=h] + E[b_h]); E[M]^T E[w] (+ E[b]) for the others, with
                           * E[w] the probabilities q(w) for the categorical model */
    VBM_READ_MEAN_MAP = 2 /* the same with only the most probable cluster argmax_h q(s=h)
                           * (ties: the lowest h); VBM_READ_MEAN for models without clusters */
} vbm_read_mode;

/* Options of vbm_read. Fill with vbm_read_opts_default, then override. */
typedef struct {
    vbm_read_mode mode;
} vbm_read_opts;

/* Default read options: VBM_READ_SAMPLE. Never fails. */
void vbm_read_opts_default(vbm_read_opts *o);

/* One read step: infer q(y) for the query codes, then form codes from it as
 * opts->mode says (opts NULL: VBM_READ_SAMPLE, App. G.2 steps 3-5). out_z is
 * T x C; addr may be NULL, otherwise it receives q(y) in every mode, the same
 * as vbm_address gives. Deterministic given seed (the mean modes draw nothing
 * and do not depend on it). Fails with VBM_EINVAL (bad query, unknown mode: field "mode"),
 * VBM_ENUMERIC, VBM_ENOMEM. */
vbm_status vbm_read(const vbm_memory *mem, const vbm_codes *query, const vbm_read_opts *opts,
                    uint64_t seed, double *out_z, vbm_addresses *addr, vbm_error *err);

/* The memory's predictive distribution of one code, p(z | q(Omega)): for every group the
 * mixture over its components (clusters, or the categorical model's rows, each with prior
 * probability 1 / H as in the generative model) of the Gaussian with the exact mean and
 * covariance of z = M^T w + b + noise under q(M), q(b), w ~ N(0, I) and the observation noise
 * (moment-matched: mean mu_b,h and covariance R_h^T R_h + (tr U_h + s2_b,h + sigma_z^2) I; for
 * the categorical model row k's mean R_k and (U_kk + sigma_z^2) I); the groups of a tree are
 * independent (Theorem 5's factorised p(s); its path pseudocounts are not used). An empty
 * memory (q(Omega) = p(Omega)) gives the model's prior predictive. Only the means of codes
 * are read (codes->s2 is ignored). mask (T x C, may be NULL: every value known) says which
 * values of each code are known: the density is the marginal one of the known values; a
 * frame with none has log density 0. */

/* Log density of the known values of every code, out[t] (T values). Fails with VBM_EINVAL
 * (bad codes: vbm_codes_check), VBM_ENOMEM, VBM_ENUMERIC (a covariance not positive
 * definite). */
vbm_status vbm_predictive_logpdf(const vbm_memory *mem, const vbm_codes *codes,
                                 const unsigned char *mask, double *out, vbm_error *err);

/* Complete every code: its known values unchanged, each unknown one the conditional mean
 * given the known values of its group under that group's most probable component (ties:
 * the lowest index), i.e. mu_b,h + R_h^T E[w | known values, s = h]; a group with no known
 * value gets the mixture's mean. out_z is T x C. Same failures as vbm_predictive_logpdf. */
vbm_status vbm_predictive_complete(const vbm_memory *mem, const vbm_codes *codes,
                                   const unsigned char *mask, double *out_z, vbm_error *err);

/* Change the number of clusters H and/or rows K (0 keeps the current value).
 * Refits from the retained codes when there are any; otherwise from
 * max(frames, 4 * new H) pseudo-codes (at most 100000) sampled from the current
 * posterior with the given seed. elbo_before / elbo_after are the ELBO per frame
 * of the old and new memory on those same codes. When K changes the base prior
 * is truncated or extended (new rows of R0 zero, new diagonal of U0 = cfg.u0),
 * and for the mixture and tree the K-following defaults follow the new K as in
 * vbm_config_set_rows: sigma_z2 becomes 0.2 K when it equals 0.2 * old K, and
 * sigma2_b0 becomes 0.4 K when it equals 0.4 * old K, compared bit for bit;
 * any other value counts as set explicitly and is kept. A configuration
 * records no "set explicitly" flag, so this is the whole rule: the defaults
 * survive vbm_export/vbm_import and the JSON forms of vbmem-solve and vbmemd
 * bit for bit and keep following K, while an explicit value equal to the old
 * default bit for bit follows K too (the decimal 1.2 is not 0.2 * 6 =
 * 1.2000000000000002, so a user who writes 1.2 at K = 6 keeps 1.2).
 * VBM_INIT_CURRENT in opts is treated as VBM_INIT_AUTO (the sizes change, so
 * there is no current posterior to start from). On failure the memory is
 * unchanged. */
vbm_status vbm_resize(vbm_memory *mem, int new_H, int new_K, const vbm_write_opts *opts,
                      double *elbo_before, double *elbo_after, vbm_write_result *res,
                      vbm_error *err);

/* Export the whole memory (config, prior, posterior, pseudocounts, retained
 * codes) in the binary layout documented in proto/memory-format.md. *buf is
 * malloc'd and owned by the caller. Fails only with VBM_ENOMEM. */
vbm_status vbm_export(const vbm_memory *mem, unsigned char **buf, size_t *len, vbm_error *err);
/* Import a memory exported by vbm_export; bit-exact round trip. Fails with
 * VBM_EFORMAT (bad magic, version, truncated, sizes inconsistent, non-finite
 * values, or a memory the JSON form rejects: a configuration vbm_config_check
 * refuses, R0 or U0 that vbm_memory_create refuses, a posterior block's U not
 * symmetric positive definite, a shift variance <= 0 with a shift, mu_b or
 * sigma2_b not 0 without one) or VBM_ENOMEM. */
vbm_status vbm_import(const unsigned char *buf, size_t len, vbm_memory **out, vbm_error *err);

void vbm_addresses_free(vbm_addresses *addr);
void vbm_write_result_free(vbm_write_result *res);

/* Allocation guard shared by the library: NULL when n * size exceeds
 * 8 * VBM_MAX_ELEMENTS bytes or calloc fails. Memory is zeroed. */
void *vbm_calloc(size_t n, size_t size);

/* ---- temporal memories: the identity/attribute model of sequences (seed 003) ----
 *
 * A temporal memory holds a posterior over the parameters of the model
 *   y_t = sum_p W_p (a_{t,p} b_{t,p}) + noise,  noise ~ N(0, diag(1 / rho)),
 * for sequences y_1..y_T of D-dimensional codes: P identities b_{t,p} in {0,1}
 * (binary Markov chains sharing one 2 x 2 transition matrix T with Dirichlet
 * rows), Q real attributes a_{t,p,q} per identity (AR(1): a_t = lambda a_{t-1} +
 * N(0, 1 - lambda^2), a_1 ~ N(0, sigma_a2), with the conjugate prior of eq. 13 on
 * lambda), columns W_{p,q} in R^D with ARD precisions gamma_{p,q}, and Gamma noise
 * precisions rho_k. It is fitted by VB-EM with the mean-field factorisation of
 * eq. 18 over (t, p), and reports the free energy of sec. 7 after every
 * iteration. It has its own type rather than a vbm_kind: its latent structure
 * (sequences, Markov chains, per-identity weights, learned noise) does not fit
 * the code/address operation table of vbm_memory. Component index k = p * Q + q
 * throughout. */
typedef struct vbm_temporal vbm_temporal;

typedef struct {
    int code_size;    /* D (d_y) */
    int components;   /* P (d_b): identities */
    int attributes;   /* Q (d_a): attributes per identity */
    double pi0;       /* P(b_{1,p} = 1), eq. 6; default 0.5 */
    double u_T[2][2]; /* Dirichlet pseudo-counts u^(T)_{beta,alpha} of the row beta of T,
                          eq. 8; default all 1 (uniform rows) */
    double sigma_a2;  /* variance of a_{1,p,q}, eq. 10; default 1 (the stationary one) */
    double lam_eta;   /* lambda prior of eq. 13: eta, f, g, h; the defaults eta = 1/2, */
    double lam_f;     /* f = h = -1/2, g = 0 are the posterior after one pseudo-transition */
    double lam_g;     /* with a_{t-1}^2 = a_t^2 = 1 and a_{t-1} a_t = 0 (eq. 63-66) */
    double lam_h;
    int lambda_grid; /* nodes of the quadrature of lambda on (-1, 1); default 399 */
    double rho_d;    /* Gamma(d, e) prior of each rho_k, eq. 3; default d = e = 1e-3 */
    double rho_e;
    double gamma0;    /* initial ARD precision of every W_{p,q}; default 1 */
    double gamma_max; /* ARD precisions are capped here (a switched-off column); 1e8 */
    int vbe_temporal; /* 0 (default): the VBE factorisation of eq. 18, one factor per (t, p);
                         1: that of eq. 19, q(b_{1:T,p}) q(a_{1:T,p}) per identity, by
                         forward-backward and a Kalman (RTS) smoother */
} vbm_temporal_config;

/* Fill cfg with the defaults above for D-dimensional codes and P identities of
 * one attribute each. Never fails (the sizes are checked by create). */
void vbm_temporal_config_default(int code_size, int components, vbm_temporal_config *cfg);
/* VBM_OK, or VBM_EINVAL naming the first bad field: 1 <= code_size <=
 * VBM_MAX_CODE_SIZE, 1 <= components <= 64, 1 <= attributes <= 16, components *
 * attributes <= 256, 0 < pi0 < 1, u_T > 0, sigma_a2 > 0, 16 <= lambda_grid <=
 * 100000, rho_d, rho_e, gamma0 > 0, gamma_max >= gamma0, vbe_temporal 0 or 1,
 * every value finite. */
vbm_status vbm_temporal_config_check(const vbm_temporal_config *cfg, vbm_error *err);
/* A memory holding the prior (no sequence written yet). VBM_EINVAL as
 * config_check, VBM_ENOMEM. *out is owned by the caller (vbm_temporal_free). */
vbm_status vbm_temporal_create(const vbm_temporal_config *cfg, vbm_temporal **out, vbm_error *err);
/* Free a temporal memory; NULL is a no-op. */
void vbm_temporal_free(vbm_temporal *m);

/* One sequence of T codes, y row-major T x D. */
typedef struct {
    long T;
    int D;
    const double *y;
} vbm_sequence;

enum { VBM_TEMPORAL_START_WINDOWS = 0, VBM_TEMPORAL_START_PCA = 1, VBM_TEMPORAL_START_RANDOM = 2 };

typedef struct {
    int iterations; /* VB-EM iterations (VBE, VBM, ARD, free energy); default 100 */
    int sweeps;     /* VBE sweeps over (t, p) per iteration; default 2 */
    int ard_start;  /* gamma is updated (sec. 6) from this 0-based iteration on; -1 never;
                       default 5 (the seed's "initial learning phase") */
    double tol;     /* stop early when F rose by less than tol * |F| in an iteration;
                       0 (default) runs every iteration */
    uint64_t seed;  /* the random start of the means of q(W) */
    int rescale;    /* 1 (default): after each VBE step from the second iteration on, also
                       maximise F over the joint rescaling of each attribute a_{.,k} and the
                       column W_{.,k} (parameter expansion; not in the seed, see temporal.c);
                       0: the seed's VB-EM steps only. Either way F never decreases. */
    int restarts;   /* VB-EM runs from the starts drawn with seed, seed + 1, ...; the run with
                       the highest final F is kept (its trace is returned); default 3 (with the
                       windows start, runs 1 and 2 group the windows leaving out the 60 % each
                       grouping explains worst, run 3 groups them all, and so on in turn) */
    int start;      /* the start of q(W)'s mean: VBM_TEMPORAL_START_WINDOWS (0, default) groups
                       short windows of frames by the subspace they span (one group per identity;
                       the PCA start when Q >= D or there are fewer than 4 P windows);
                       VBM_TEMPORAL_START_PCA mixes the top P*Q principal directions of the codes
                       by a random matrix; VBM_TEMPORAL_START_RANDOM: i.i.d. normal entries on the
                       codes' scale */
    int warm_start; /* with the eq. 19 VBE (config vbe_temporal = 1) only: 1 (default) fits with
                       eq. 18 first (same options, restarts included) and starts eq. 19 from that
                       q(Theta); 0: eq. 19 from the start above. The trace is eq. 19's. */
} vbm_temporal_opts;

/* Defaults listed above. Never fails. */
void vbm_temporal_opts_default(vbm_temporal_opts *o);

/* The free energy after each iteration: free_energy[0 .. iterations). */
typedef struct {
    int iterations;
    double *free_energy;
} vbm_temporal_trace;

/* Write nseq sequences: q(Theta) is refitted from the prior on them (VB-EM as
 * above, from the start opts->start drawn with opts->seed, seed + 1, ..., best free energy of
 * opts->restarts runs; with the eq. 19 VBE and opts->warm_start, one eq. 19 run from the eq. 18
 * fit of the same options; opts NULL means the defaults) and replaces the memory's posterior. The
 * free-energy trace is
 * returned in *trace when trace is not NULL (free it with
 * vbm_temporal_trace_free; on failure it is left empty). Fails with VBM_EINVAL
 * (nseq < 1, a NULL or empty sequence, D != code_size, a non-finite code, more
 * than VBM_MAX_FRAMES frames in all, bad opts: "sequences[i].y" etc.),
 * VBM_ENOMEM, or VBM_ENUMERIC (a precision matrix not positive definite, or a
 * non-finite free energy); on failure the memory is unchanged. */
vbm_status vbm_temporal_write(vbm_temporal *m, const vbm_sequence *seqs, int nseq,
                              const vbm_temporal_opts *opts, vbm_temporal_trace *trace,
                              vbm_error *err);
void vbm_temporal_trace_free(vbm_temporal_trace *t);

/* Infer the identities and attributes of one query sequence under the memory's
 * q(Theta) (held fixed): VBE sweeps (eq. 24-51, or the chains of eq. 19 when
 * the config's vbe_temporal is 1) from q(b) = 1/2, a = 0, alternating in
 * direction; the best free energy of up to 8 such runs that update the
 * identities in different orders (P = 1: one run). Fills
 * qb (T x P, q(b_{t,p} = 1)), a (T x P*Q, the mean of a_{t,p,q}, eq. 47) and
 * *local_fe (the free energy of the query's latent terms: <log p(Y, B, A |
 * Theta)> - <log q(B, A)>), each when not NULL. Fails with VBM_EINVAL (bad
 * sequence, sweeps < 1), VBM_ENOMEM, VBM_ENUMERIC. */
vbm_status vbm_temporal_infer(const vbm_temporal *m, const vbm_sequence *seq, int sweeps,
                              double *qb, double *a, double *local_fe, vbm_error *err);

/* Draw a new sequence of T frames ancestrally: Theta ~ q(Theta) once (the rows of T, each
 * lambda from its grid posterior, the rows of W, each rho_k), then b (eq. 5-7), a (eq.
 * 9-11) and y (eq. 1-2) frame by frame, all from the generator seeded with seed. Fills y
 * (T x D), and b (T x P, 0/1) and a (T x P*Q) when not NULL. Fails with VBM_EINVAL (T
 * not in [1, VBM_MAX_FRAMES], y NULL), VBM_ENOMEM, VBM_ENUMERIC (a covariance of q(W) not
 * positive definite). */
vbm_status vbm_temporal_sample(const vbm_temporal *m, long T, uint64_t seed, double *y, int *b,
                               double *a, vbm_error *err);

/* Posterior summaries (arrays owned by the caller, each may be NULL):
 * W (D x P*Q, the mean of q(W)), gamma (P*Q), T (2 x 2, E[T_{beta,alpha}]),
 * lambda (P*Q, E[lambda]), rho (D, E[rho_k]). Never fails. */
void vbm_temporal_posterior(const vbm_temporal *m, double *W, double *gamma, double *T,
                            double *lambda, double *rho);

/* Append nseq sequences, continuing from the memory's posterior: VB-EM over the new sequences'
 * q(B, A) only, where every VBM step adds to their sufficient statistics those accumulated from
 * every sequence written before (each sequence's q(B, A) as its own write or append ended), so
 * that N appends give the batch VBM with the earlier sequences' q(B, A) frozen, and the ARD
 * step sees the whole data. (Not the posterior as the prior: p(W | gamma) p(rho) has no
 * conjugate form for the joint q(W) q(rho) as a prior, and the ARD update of gamma would count
 * the earlier data twice.) Starts from the current q(Theta); one run (opts->restarts is
 * ignored), no rescaling step (opts->rescale is ignored: it would have to rescale the frozen
 * q(B, A) too); the free-energy trace is that of every sequence written so far, earlier ones
 * through their statistics, and never decreases. An append to a memory with nothing written is
 * a write. Same failures as vbm_temporal_write (also VBM_EINVAL when the frames in all would
 * exceed VBM_MAX_FRAMES); on failure the memory is unchanged. */
vbm_status vbm_temporal_append(vbm_temporal *m, const vbm_sequence *seqs, int nseq,
                               const vbm_temporal_opts *opts, vbm_temporal_trace *trace,
                               vbm_error *err);

/* The free energy of every sequence written so far under the current q(Theta), each with its
 * q(B, A) as its write or append ended (after a write or append: the trace's last value). NaN
 * for a memory with nothing written. Never fails. */
double vbm_temporal_free_energy(const vbm_temporal *m);

/* The memory's configuration, the sequences and frames written since the last write (appends
 * included) and the free energy at the end of the last write or append (NaN before any); each
 * output may be NULL. Never fails. */
void vbm_temporal_summary(const vbm_temporal *m, vbm_temporal_config *cfg, long *sequences,
                          long *frames, double *free_energy);

/* Continue a prefix by n frames. The prefix is filtered under q(Theta) held fixed: VBE sweeps
 * over it as vbm_temporal_infer does, whose last frame gives q(b_T0, a_T0) (the last frame of
 * a smoother is the filter). From there, under the posterior means of T, lambda, W and rho:
 * mean (n x D, required) is the predictive mean of y_{T0+h}, h = 1..n: <W> sum over b_T0 of
 * q(b_T0) P(b_{T0+h} = 1 | b_T0) E[lambda]^h E[a_T0 | b_T0] (a is independent of b under the
 * model); qb (n x P, may be NULL) is P(b_{T0+h,p} = 1); samples (nsamples x n x D, required when
 * nsamples > 0) are continuations drawn from the generator seeded with seed: (b_T0, a_T0) from
 * their filtered q, then the Markov chains, the AR(1) attributes and the Gaussian noise. Fails
 * with VBM_EINVAL (bad prefix as in infer, n not in [1, VBM_MAX_FRAMES] ("steps"), sweeps not
 * in [1, 100000], nsamples not in [0, 100000], mean NULL, samples NULL when needed),
 * VBM_ENOMEM, VBM_ENUMERIC. */
vbm_status vbm_temporal_continue(const vbm_temporal *m, const vbm_sequence *prefix, long n,
                                 int sweeps, uint64_t seed, int nsamples, double *mean, double *qb,
                                 double *samples, vbm_error *err);

/* Export the whole memory (configuration, q(Theta), what appends continue from) as one byte
 * string, kind 5 of proto/memory-format.md; a round trip through vbm_temporal_import is
 * bit-exact. *buf is malloc'd and owned by the caller. Fails with VBM_ENOMEM. */
vbm_status vbm_temporal_export(const vbm_temporal *m, unsigned char **buf, size_t *len,
                               vbm_error *err);
/* Import a temporal memory exported by vbm_temporal_export. Fails with VBM_EFORMAT (bad magic,
 * version or kind, truncated or padded, sizes or configuration out of range, a non-finite
 * value, a non-positive variance, precision or count: the message says which), VBM_ENOMEM. *out
 * is owned by the caller. */
vbm_status vbm_temporal_import(const unsigned char *buf, size_t len, vbm_temporal **out,
                               vbm_error *err);
/* A deep copy of m (through export and import). VBM_ENOMEM. */
vbm_status vbm_temporal_clone(const vbm_temporal *m, vbm_temporal **out, vbm_error *err);
/* Heap bytes held by m (an estimate of its arrays). 0 for NULL. Never fails. */
size_t vbm_temporal_bytes(const vbm_temporal *m);

#ifdef __cplusplus
}
#endif
#endif
