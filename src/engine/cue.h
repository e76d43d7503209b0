/* cue.h -- owns what a read knows of its cue: the likelihood of the cue's known values under a
 * prediction, the cue's noise level by maximum likelihood, and the combination of the cue with a
 * prediction. */
#ifndef VBMEM_ENGINE_CUE_H
#define VBMEM_ENGINE_CUE_H

/* A cue: T frames of P values each, the values a read is asked to complete (where
 * the mask says they are unknown) or to clean (where they are known but noisy).
 * The cue is seen as x + n, with x the clean values and n ~ N(0, sigma^2) per
 * value; bounded values (pixels) were clipped to [0, 1] after the noise was added,
 * so that a value at a bound only says that x + n fell on or past it. */
typedef struct {
    long T;
    long P;
    const double *x;           /* T x P cue values */
    const unsigned char *mask; /* T x P, non-zero = known; NULL: every value known */
    int bounded;               /* 1: values in [0, 1], clipped at the bounds */
} eng_cue;

/* A prediction of one frame's clean values: x ~ N(mean[p], sd[p]^2) per value (sd
 * NULL: sd_const for every value). */
typedef struct {
    const double *mean;
    const double *sd;
    double sd_const;
} eng_cue_pred;

/* log p(known values of frame t of the cue | pred) with the cue's noise sigma
 * (>= 0): sum over known values of log N(x_p; mean_p, sd_p^2 + sigma^2), or, for a
 * bounded cue with sigma > 0 and a value on a bound, the log-probability of the
 * clipped side (log Phi). The constant -log(2 pi)/2 per value is left out (it is the
 * same for every prediction). Never fails; -HUGE_VAL for a value of zero
 * probability. */
double eng_cue_loglik(const eng_cue *c, long t, const eng_cue_pred *pred, double sigma);

/* The noise level of frame t of the cue that makes its known values most likely
 * under pred: for a bounded cue the best of the grid 0, 0.025, ..., 0.6 under
 * eng_cue_loglik; otherwise max(0, mean squared residual - mean predicted
 * variance)^(1/2) over the known values (the Gaussian maximum). Never fails. */
double eng_cue_noise_estimate(const eng_cue *c, long t, const eng_cue_pred *pred);

/* Frame t's answer into out (P values): where the value is known, the posterior
 * mean of the clean value given the cue's value and the prediction (the cue's value
 * itself when sigma is 0; for a value clipped at a bound, the mean of the truncated
 * posterior); where it is unknown, the prediction's mean. A bounded answer is
 * clamped to [0, 1]. Never fails. */
void eng_cue_combine(const eng_cue *c, long t, const eng_cue_pred *pred, double sigma, double *out);

/* One frame's answer from J views of it, rows t0 .. t0 + J - 1 of the cue, whose noise
 * levels are sigma[0 .. J-1], into out (P values): per value, the prediction's mean where
 * no view knows it; eng_cue_combine's answer where exactly one view does (so that J = 1
 * is eng_cue_combine bit for bit); where several do, the mean of those with noise 0 if
 * any, else the Gaussian posterior mean of the clean value given the prediction and every
 * knowing view's value (precision-weighted; a value at a bound is taken as observed, not
 * as censored). A bounded answer is clamped to [0, 1]. Never fails. */
void eng_cue_combine_views(const eng_cue *c, long t0, int J, const eng_cue_pred *pred,
                           const double *sigma, double *out);

#endif
