/* fuse.h -- owns the fusion of J Gaussian codes of one item into one code: the analytic posterior
 * of the recognition-parametrised model (seed 004) for Gaussian factors, the code prior it
 * divides out, and the fusion in place of the views a request posts. */
#ifndef VBMEM_ENGINE_FUSE_H
#define VBMEM_ENGINE_FUSE_H

#include "vbmem/vbmem.h"

#define ENG_FUSE_MAX_VIEWS 64 /* views_per_frame accepted by episodes and reads */

/* The Gaussian code prior p(z) = N(mean, var I) of a memory with configuration cfg: the
 * moments of its generative prior over one code, z = M^T w (+ b) + e with M ~ MN(0, u0 I_K,
 * I_C), b ~ N(0, sigma2_b0 I) (when the kind has shifts), e ~ N(0, sigma_z2 I), and
 * w ~ N(0, I_K) (gaussian, mixture, tree, dkm) or w a one-hot of Cat_K (categorical): mean
 * 0, var = K u0 (u0 for categorical) + sigma2_b0 (with shifts) + sigma_z2. The prior of the
 * memory is not Gaussian (M^T w is a product); this is its moment-matched Gaussian, the
 * eta_0 that fusion divides out. Never fails; *var > 0 for every valid configuration. */
void eng_fuse_prior(const vbm_config *cfg, double *mean, double *var);

/* The analytic RPM posterior of T items, each seen as J views with Gaussian codes
 * q_j(z) = N(mu_j, diag s2_j) and the prior N(m0, v0 I) (seed 004: eta_q = sum_j eta_j
 * + (1 - J) eta_0), per dimension c:
 *   precision  lambda = sum_j 1/s2_jc - (J - 1)/v0,
 *   mean       out_mu = (sum_j mu_jc/s2_jc - (J - 1) m0/v0) / lambda,  out_s2 = 1/lambda.
 * mu and s2 are (T J) x C, frame-major: view j of frame t is row t J + j. mask is NULL or
 * (T J) x C with 0 marking a dimension a view does not know: its factor is then flat
 * (eta_j = eta_0, it adds nothing), and a dimension no view of a frame knows gets the
 * prior. J = 1 without a mask copies mu and s2 unchanged (bit for bit; s2 may be NULL,
 * meaning zero variances, and is then written as zeros). out_mu and out_s2 are T x C.
 * Double precision throughout.
 * Fails with VBM_EINVAL, nothing written past the failure: J < 1 or T < 1 or C < 1
 * (field "views_per_frame"), v0 not finite and > 0 (field "prior"), a mean or variance that
 * is not finite, or a variance that is not > 0 when J > 1 (field "FIELD.sigma2[row][c]" or
 * "FIELD.mu[row][c]", FIELD the caller's name of the views, e.g. "codes"), or a fused
 * precision that is not > 0 (the views' codes are wider than the prior: no Gaussian
 * posterior exists, the product of densities cannot be normalised; field
 * "FIELD.sigma2[row]" with row the frame's first view), each message naming frame and
 * dimension. With images set (codes an encoder gave for images) every field is
 * "FIELD[row]", the image at fault. */
vbm_status eng_fuse_codes(long T, int J, int C, const double *mu, const double *s2,
                          const unsigned char *mask, double m0, double v0, const char *field,
                          int images, double *out_mu, double *out_s2, vbm_error *err);

/* Fuse in place the *rows codes (mu, s2: *rows x C, malloc'd) of J views per frame, frame-major
 * (view j of frame t is row t J + j), into one code per frame with the code prior of a
 * memory of configuration cfg (eng_fuse_prior, eng_fuse_codes): on success *mu and *s2 are
 * replaced by new malloc'd T x C arrays (the old ones freed) and *rows = T = *rows / J.
 * mask (*rows x C, or NULL) marks the dimensions each view knows; with known_any,
 * *known_any receives a malloc'd T x C mask of the dimensions some view of the frame knows
 * (NULL when mask is NULL). field names the views in errors ("codes", "query"; with images
 * set, codes an encoder gave for images, "observations", whose errors name the image).
 * J <= 1 changes nothing. Fails with VBM_EINVAL (rows that are not whole frames of J views:
 * field "FIELD.mu", or "FIELD" for images; the failures of eng_fuse_codes) or VBM_ENOMEM;
 * *rows, *mu and *s2 are then unchanged and *known_any is NULL. */
vbm_status eng_fuse_views(const vbm_config *cfg, long J, long *rows, int C, double **mu,
                          double **s2, const unsigned char *mask, const char *field, int images,
                          unsigned char **known_any, vbm_error *err);

#endif
