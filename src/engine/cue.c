/* cue.c -- owns what a read knows of its cue: the likelihood of its known values under a
 * prediction, its noise level, and the cue combined with a prediction. */
#include "engine/cue.h"

#include <math.h>
#include <stddef.h>

#define CUE_GRID_STEPS 25 /* noise grid 0, 0.025, ..., 0.6 for bounded cues */
#define CUE_GRID_STEP  0.025
#define CUE_MIN_VAR    1e-12
#define CUE_LOG_2PI    1.8378770664093454836 /* log(2 pi) */
#define CUE_SQRT_2PI   2.5066282746310005024 /* sqrt(2 pi) */

/* log Phi(x) for the standard normal distribution, finite for every finite x. */
static double cue_log_phi(double x)
{
    double p;

    if (x < -30.0) /* Mills' ratio: Phi(x) ~ phi(x) / -x */
        return -0.5 * x * x - log(-x) - 0.5 * CUE_LOG_2PI;
    p = 0.5 * erfc(-x / sqrt(2.0));
    return log(p);
}

/* phi(x) / Phi(x) (the inverse Mills ratio), finite for every finite x. */
static double cue_mills(double x)
{
    double p;

    if (x < -30.0)
        return -x;
    p = 0.5 * erfc(-x / sqrt(2.0));
    return exp(-0.5 * x * x) / CUE_SQRT_2PI / p;
}

static double cue_sd(const eng_cue_pred *pred, long p)
{
    return pred->sd != NULL ? pred->sd[p] : pred->sd_const;
}

static int cue_known(const eng_cue *c, long t, long p)
{
    return c->mask == NULL || c->mask[(size_t)t * (size_t)c->P + (size_t)p] != 0;
}

double eng_cue_loglik(const eng_cue *c, long t, const eng_cue_pred *pred, double sigma)
{
    const double *x = c->x + (size_t)t * (size_t)c->P;
    double lp = 0.0, s, v, d;
    long p;

    for (p = 0; p < c->P; p++) {
        if (!cue_known(c, t, p))
            continue;
        s = cue_sd(pred, p);
        v = s * s + sigma * sigma;
        if (v < CUE_MIN_VAR)
            v = CUE_MIN_VAR;
        if (c->bounded && sigma > 0.0 && x[p] <= 0.0) {
            lp += cue_log_phi((0.0 - pred->mean[p]) / sqrt(v));
        } else if (c->bounded && sigma > 0.0 && x[p] >= 1.0) {
            lp += cue_log_phi((pred->mean[p] - 1.0) / sqrt(v));
        } else {
            d = x[p] - pred->mean[p];
            lp += -0.5 * d * d / v - 0.5 * log(v);
        }
    }
    return lp;
}

double eng_cue_noise_estimate(const eng_cue *c, long t, const eng_cue_pred *pred)
{
    const double *x = c->x + (size_t)t * (size_t)c->P;
    double best = 0.0, best_lp = -HUGE_VAL, lp, sigma, r2 = 0.0, s2 = 0.0, d, s;
    long p, n = 0;
    int g;

    if (c->bounded) {
        for (g = 0; g < CUE_GRID_STEPS; g++) {
            sigma = CUE_GRID_STEP * g;
            lp = eng_cue_loglik(c, t, pred, sigma);
            if (lp > best_lp) {
                best_lp = lp;
                best = sigma;
            }
        }
        return best;
    }
    for (p = 0; p < c->P; p++) {
        if (!cue_known(c, t, p))
            continue;
        d = x[p] - pred->mean[p];
        s = cue_sd(pred, p);
        r2 += d * d;
        s2 += s * s;
        n++;
    }
    if (n == 0 || r2 <= s2)
        return 0.0;
    return sqrt((r2 - s2) / (double)n);
}

void eng_cue_combine(const eng_cue *c, long t, const eng_cue_pred *pred, double sigma, double *out)
{
    const double *x = c->x + (size_t)t * (size_t)c->P;
    double m, s, v, sv;
    long p;

    for (p = 0; p < c->P; p++) {
        m = pred->mean[p];
        if (cue_known(c, t, p)) {
            s = cue_sd(pred, p);
            v = s * s + sigma * sigma;
            if (sigma <= 0.0 || v < CUE_MIN_VAR) {
                m = x[p];
            } else if (c->bounded && x[p] <= 0.0) {
                sv = sqrt(v);
                m = m - s * s / sv * cue_mills((0.0 - m) / sv);
            } else if (c->bounded && x[p] >= 1.0) {
                sv = sqrt(v);
                m = m + s * s / sv * cue_mills((m - 1.0) / sv);
            } else {
                m = (x[p] * s * s + m * sigma * sigma) / v;
            }
        }
        if (c->bounded)
            m = m < 0.0 ? 0.0 : m > 1.0 ? 1.0 : m;
        out[p] = m;
    }
}

void eng_cue_combine_views(const eng_cue *c, long t0, int J, const eng_cue_pred *pred,
                           const double *sigma, double *out)
{
    double one[1], m, s, lam, h, exact, x;
    eng_cue_pred pp;
    eng_cue cc;
    long p;
    int j, n, n0, last;

    if (J == 1) {
        eng_cue_combine(c, t0, pred, sigma[0], out);
        return;
    }
    for (p = 0; p < c->P; p++) {
        m = pred->mean[p];
        s = cue_sd(pred, p);
        n = n0 = 0;
        last = 0;
        exact = 0.0;
        lam = 1.0 / (s * s > CUE_MIN_VAR ? s * s : CUE_MIN_VAR);
        h = m * lam;
        for (j = 0; j < J; j++) {
            if (!cue_known(c, t0 + j, p))
                continue;
            x = c->x[(size_t)(t0 + j) * (size_t)c->P + (size_t)p];
            n++;
            last = j;
            if (sigma[j] <= 0.0) {
                n0++;
                exact += x;
            } else {
                lam += 1.0 / (sigma[j] * sigma[j]);
                h += x / (sigma[j] * sigma[j]);
            }
        }
        if (n == 1) {
            /* the one-view answer of this value: eng_cue_combine on a one-value cue */
            cc.T = 1;
            cc.P = 1;
            cc.x = c->x + (size_t)(t0 + last) * (size_t)c->P + (size_t)p;
            cc.mask = NULL;
            cc.bounded = c->bounded;
            pp.mean = pred->mean + p;
            pp.sd = NULL;
            pp.sd_const = s;
            eng_cue_combine(&cc, 0, &pp, sigma[last], one);
            out[p] = one[0];
            continue;
        }
        if (n0 > 0)
            m = exact / n0;
        else if (n > 1)
            m = h / lam;
        if (c->bounded)
            m = m < 0.0 ? 0.0 : m > 1.0 ? 1.0 : m;
        out[p] = m;
    }
}
