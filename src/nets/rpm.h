/* rpm.h -- served recognition-parametrised models (seed 004, the time-series RPM): the model
 * file of kind "rpm" (proto/model-format.md) and inference: recognition networks on every
 * observation, Gaussian factors, and the GP posterior of each latent trajectory (gp.h). */
#ifndef VBMEM_NETS_RPM_H
#define VBMEM_NETS_RPM_H

#include <stddef.h>

#include "vbmem/vbmem.h"

#define RPM_MAX_FACTORS 1024 /* J */
#define RPM_MAX_LATENT  256  /* latent dimensions */

/* What an rpm model file says about itself. Strings are owned by the model. */
typedef struct {
    int factors;              /* J: observation rows, one recognition factor each */
    int obs_size;             /* D: values per observation x_jt */
    int latent;               /* L: latent dimensions, each with its own GP prior */
    int min_steps, max_steps; /* the T this model serves */
    int shared;               /* 1: one recognition network for every factor */
    char kernel[16];          /* "rbf" or "matern12" */
    char *architecture_json, *provenance_json;
    size_t n_params;
} nets_rpm_info;

typedef struct nets_rpm nets_rpm;

/* 1 when the file at path is a vbmem model file whose metadata vbmem.kind is
 * "rpm" (only the header is read); 0 otherwise, including when it cannot be read
 * or parsed (the full loader then says why). Never fails. */
int nets_file_is_rpm(const char *path);

/* Read and validate an rpm model file (every rule of proto/model-format.md,
 * section "kind rpm"). On success *out is a new model owned by the caller
 * (nets_rpm_free) and VBM_OK is returned. On failure *out is NULL and err (may
 * be NULL) holds a message starting with "<path>: " (no field). Fails with
 * VBM_EINVAL (cannot open or read, not a regular file), VBM_EFORMAT (malformed:
 * the message names the rule, tensor, layer or metadata key) or VBM_ENOMEM. */
vbm_status nets_rpm_load(const char *path, nets_rpm **out, vbm_error *err);

/* The same from a whole file in memory (not kept); messages without a path. */
vbm_status nets_rpm_load_buffer(const unsigned char *buf, size_t len, nets_rpm **out,
                                vbm_error *err);

/* NULL is a no-op. */
void nets_rpm_free(nets_rpm *m);

/* The model's description; valid as long as the model. */
const nets_rpm_info *nets_rpm_info_of(const nets_rpm *m);

/* The posterior q(Z | X) of the T-step latent trajectory given observations x
 * (J x T x D floats, row-major: x[(j T + t) D + k]). The recognition networks run
 * on all J T observations in batches; their Gaussian factors (h_jt, lambda_jt)
 * give, per latent dimension l, the GP posterior with precision
 * K_l^-1 + diag(sum_j lambda_jtl - J / K_l[t][t]) and linear term sum_j h_jtl
 * (eta_q = eta_0 - J eta_0^unc + sum_j eta_j^unc), computed by gp_posterior.
 * mean and var receive L x T doubles (row l is dimension l's trajectory). The
 * model may be used by several threads at once. Returns VBM_OK; fails with
 * VBM_EINVAL (a NULL pointer, T outside [min_steps, max_steps], a value of x
 * that is not finite, or a factor that is not: message "nets_rpm_infer: ..."),
 * VBM_ENUMERIC (a posterior precision that is not positive definite: the
 * message names the latent dimension) or VBM_ENOMEM; err (may be NULL) then
 * holds the message (no field). */
vbm_status nets_rpm_infer(const nets_rpm *m, const float *x, int T, double *mean, double *var,
                          vbm_error *err);

/* The prior covariance K_l (T x T, row-major) of latent dimension l (jitter
 * included), for tests and tools. Returns VBM_OK, or VBM_EINVAL for l or T out
 * of range (err may be NULL). */
vbm_status nets_rpm_prior(const nets_rpm *m, int l, int T, double *K, vbm_error *err);

/* The Gaussian factors of x (J x T x D) without the posterior: h and lambda
 * receive J x T x L doubles each. Same failures as nets_rpm_infer except
 * VBM_ENUMERIC. */
vbm_status nets_rpm_factors(const nets_rpm *m, const float *x, int T, double *h, double *lambda,
                            vbm_error *err);

#endif
