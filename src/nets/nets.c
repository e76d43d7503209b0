/* nets.c -- the public inference entry points: encode images into codes, decode codes into
 * per-pixel likelihood parameters, draw pixels, and evaluate log-likelihoods; plus the
 * reusable workspace. */
#define _DEFAULT_SOURCE /* madvise(MADV_HUGEPAGE) */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "nets/nets_internal.h"

/* Frames are run in chunks so that one activation buffer stays under this many floats (1 MiB),
 * and a layer's input and output stay near a core's L2 cache. Against 16 MiB (the whole
 * 64-frame episode in one chunk), in interleaved timings on an AMD EPYC (Zen 4, 1 MiB of L2 per
 * core), one thread: the bundled model's decoder on the AVX2 engine took 18.5 ms against 21.8
 * (fastest call), its encoder 7.3 against 8.7, on the AVX-512 engine 18.7 against 21.8 and 7.0
 * against 7.5, the CIFAR architecture's 74.0 against 80.0 and 33.9 against 36.7 (before the
 * chunks were evened out below); 2 MiB was in between, 512 KiB worse on CIFAR. */
#define NETS_BATCH_FLOATS ((long)1 << 18)

nets_workspace *nets_workspace_new(void)
{
    return calloc(1, sizeof(nets_workspace));
}

void nets_workspace_set_threads(nets_workspace *ws, int threads)
{
    ws->threads = threads > 0 ? threads : 0;
}

vbm_status nets_workspace_set_path(nets_workspace *ws, nets_path p, vbm_error *err)
{
    if (p < NETS_PATH_AUTO || p > NETS_PATH_BLAS)
        return vbm_fail(err, VBM_EINVAL, NULL, "path %d is not a path of the networks", (int)p);
    if (!nets_path_runs(p))
        return vbm_fail(
            err, VBM_EINVAL, NULL, "the %s path cannot run in this process%s", nets_path_name(p),
            p == NETS_PATH_ENGINE        ? " (it needs AVX-512F, and VBMEM_NETS_NO_AVX512 unset)"
            : p == NETS_PATH_ENGINE_AVX2 ? " (it needs a CPU with AVX2 and FMA)"
                                         : " (this build has no oneDNN)");
    ws->path = p;
    return VBM_OK;
}

void nets_workspace_free(nets_workspace *ws)
{
    if (!ws)
        return;
    free(ws->mem);
    free(ws);
}

/* Make ws hold at least need floats; returns the memory or NULL. Workspaces of
 * several MB are 2 MB-aligned and advised to use transparent huge pages: a fresh
 * workspace is then touched with a few hundred page faults instead of thousands
 * (which cost more than the whole forward pass on some virtual machines). */
static float *ws_reserve(nets_workspace *ws, size_t need)
{
    if (ws->cap >= need)
        return ws->mem;
    size_t bytes = sizeof(float) * need, huge = (size_t)2 << 20;
    void *p = NULL;
    if (bytes >= 2 * huge) {
        bytes = (bytes + huge - 1) / huge * huge;
        if (posix_memalign(&p, huge, bytes) != 0)
            p = NULL;
        if (p)
            madvise(p, bytes, MADV_HUGEPAGE); /* advice only: failure is harmless */
    } else {
        p = malloc(bytes);
    }
    if (!p)
        return NULL;
    free(ws->mem);
    ws->mem = p;
    ws->cap = need;
    return p;
}

/* Frames per chunk for n frames through s (nets_internal.h): at most NETS_BATCH_FLOATS /
 * max_act (at least 1), the chunks as even as that allows (64 frames at most 48 per chunk: two
 * of 32, not 48 + 16). */
long nets_seq_chunk(const nets_seq *s, long n)
{
    long c = NETS_BATCH_FLOATS / s->max_act;
    if (c < 1)
        c = 1;
    if (c >= n)
        return n;
    long chunks = (n + c - 1) / c;
    return (n + chunks - 1) / chunks;
}

vbm_status nets_encode_ws(const nets_model *m, nets_workspace *ws, const float *x, long n,
                          double *mu, double *s2, vbm_error *err)
{
    if (!m || !x || !mu || !s2)
        return vbm_fail(err, VBM_EINVAL, NULL, "nets_encode: NULL argument");
    if (n <= 0)
        return vbm_fail(err, VBM_EINVAL, NULL, "nets_encode: %ld images (need at least 1)", n);
    const nets_info *in = &m->info;
    long obs = (long)in->channels * in->height * in->width, C = in->code_size;
    for (long i = 0; i < n * obs; i++)
        if (!isfinite(x[i]))
            return vbm_fail(err, VBM_EINVAL, NULL, "nets_encode: pixel %ld is not finite", i);
    nets_workspace local = {NULL, 0, 0, NETS_PATH_AUTO};
    nets_workspace *w = ws ? ws : &local;
    long chunk = nets_seq_chunk(&m->enc, n);
    size_t seq = nets_seq_workspace(&m->enc, chunk);
    float *mem = ws_reserve(w, seq + (size_t)chunk * 2 * C);
    if (!mem)
        return vbm_fail(err, VBM_ENOMEM, NULL, "nets_encode: out of memory for %ld images", chunk);
    float *outb = mem + seq;
    vbm_status rc = VBM_OK;
    nets_runner run; /* one team (and oneDNN context) for all the chunks */
    nets_runner_start(&run, &m->enc, n, w->threads, w->path);
    for (long i0 = 0; i0 < n && rc == VBM_OK; i0 += chunk) {
        long bn = n - i0 < chunk ? n - i0 : chunk;
        rc = nets_seq_run_with(&m->enc, bn, x + i0 * obs, outb, mem, &run, err);
        for (long i = 0; rc == VBM_OK && i < bn; i++) {
            const float *o = outb + i * 2 * C;
            for (long c = 0; c < C; c++) {
                double ls = o[C + c];
                if (ls < in->log_sigma_min)
                    ls = in->log_sigma_min;
                if (ls > in->log_sigma_max)
                    ls = in->log_sigma_max;
                mu[(i0 + i) * C + c] = o[c];
                s2[(i0 + i) * C + c] = exp(2.0 * ls);
                if (!isfinite(o[c]) || isnan(o[C + c]))
                    rc = vbm_fail(err, VBM_EINVAL, NULL,
                                  "nets_encode: the encoder's output for image %ld is not finite",
                                  i0 + i);
            }
        }
    }
    nets_runner_stop(&run);
    free(local.mem);
    return rc;
}

vbm_status nets_encode(const nets_model *m, const float *x, long n, double *mu, double *s2,
                       vbm_error *err)
{
    return nets_encode_ws(m, NULL, x, n, mu, s2, err);
}

/* PyTorch's softplus (beta 1, threshold 20). */
static float softplus(float x)
{
    return x > 20.0f ? x : log1pf(expf(x));
}

vbm_status nets_decode_ws(const nets_model *m, nets_workspace *ws, const double *z, long n,
                          float *mean, float *scale, vbm_error *err)
{
    if (!m || !z || !mean)
        return vbm_fail(err, VBM_EINVAL, NULL, "nets_decode: NULL argument");
    if (n <= 0)
        return vbm_fail(err, VBM_EINVAL, NULL, "nets_decode: %ld codes (need at least 1)", n);
    const nets_info *in = &m->info;
    long C = in->code_size, hw = (long)in->height * in->width, obs = in->channels * hw;
    int gauss = in->likelihood == NETS_GAUSSIAN;
    long P = gauss ? 2 * obs : obs;
    for (long i = 0; i < n * C; i++)
        if (!isfinite(z[i]))
            return vbm_fail(err, VBM_EINVAL, NULL, "nets_decode: code element %ld is not finite",
                            i);
    nets_workspace local = {NULL, 0, 0, NETS_PATH_AUTO};
    nets_workspace *w = ws ? ws : &local;
    long chunk = nets_seq_chunk(&m->dec, n);
    size_t seq = nets_seq_workspace(&m->dec, chunk);
    float *mem = ws_reserve(w, seq + (size_t)chunk * (C + P));
    if (!mem)
        return vbm_fail(err, VBM_ENOMEM, NULL, "nets_decode: out of memory for %ld codes", chunk);
    float *zb = mem + seq, *outb = zb + chunk * C;
    vbm_status rc = VBM_OK;
    nets_runner run; /* one team (and oneDNN context) for all the chunks */
    nets_runner_start(&run, &m->dec, n, w->threads, w->path);
    for (long i0 = 0; i0 < n && rc == VBM_OK; i0 += chunk) {
        long bn = n - i0 < chunk ? n - i0 : chunk;
        for (long j = 0; j < bn * C; j++)
            zb[j] = (float)z[i0 * C + j];
        rc = nets_seq_run_with(&m->dec, bn, zb, outb, mem, &run, err);
        for (long i = 0; rc == VBM_OK && i < bn; i++) {
            const float *o = outb + i * P;
            float *mo = mean + (i0 + i) * obs;
            int finite = 1;
            if (gauss) {
                for (long j = 0; j < P; j++)
                    finite &= isfinite(o[j]) != 0;
                if (in->sigmoid_mean)
                    for (long j = 0; j < obs; j++)
                        mo[j] = 1.0f / (1.0f + expf(-o[j]));
                else
                    memcpy(mo, o, sizeof(float) * obs);
                if (scale) {
                    float *so = scale + (i0 + i) * obs, ms = (float)in->min_scale,
                          sm = (float)in->scale_max;
                    if (sm > 0.0f)
                        for (long j = 0; j < obs; j++)
                            so[j] = sm / (1.0f + expf(-o[obs + j])) + ms;
                    else
                        for (long j = 0; j < obs; j++)
                            so[j] = softplus(o[obs + j]) + ms;
                }
            } else {
                for (long j = 0; j < obs; j++) {
                    finite &= !isnan(o[j]);
                    mo[j] = 1.0f / (1.0f + expf(-o[j]));
                }
            }
            if (!finite)
                rc = vbm_fail(err, VBM_EINVAL, NULL,
                              "nets_decode: the decoder's output for code %ld is not finite",
                              i0 + i);
        }
    }
    nets_runner_stop(&run);
    free(local.mem);
    return rc;
}

vbm_status nets_decode(const nets_model *m, const double *z, long n, float *mean, float *scale,
                       vbm_error *err)
{
    return nets_decode_ws(m, NULL, z, n, mean, scale, err);
}

static float clamp01(double v)
{
    return v < 0.0 ? 0.0f : v > 1.0 ? 1.0f : (float)v;
}

/* Gaussian without a scale draws the mean itself (clamped). */
void nets_sample_pixels(const nets_model *m, const float *mean, const float *scale, long n,
                        float *out, rng_t *rng)
{
    const nets_info *in = &m->info;
    long total = n * in->channels * in->height * in->width;
    if (in->likelihood == NETS_BERNOULLI) {
        for (long i = 0; i < total; i++)
            out[i] = rng_uniform(rng) < mean[i] ? 1.0f : 0.0f;
        return;
    }
    double eps[256];
    for (long i0 = 0; i0 < total; i0 += 256) {
        long len = total - i0 < 256 ? total - i0 : 256;
        if (scale)
            rng_normal_fill(rng, eps, len);
        for (long j = 0; j < len; j++)
            out[i0 + j] = clamp01(mean[i0 + j] + (scale ? scale[i0 + j] * eps[j] : 0.0));
    }
}

/* Gaussian needs scale (without it every value is NAN). Bernoulli probabilities
 * are clamped to p >= 1e-30 and 1 - p >= 2^-25: a float sigmoid saturates at 1
 * for logits above about 17, and 2^-25 stands for the lost tail. */
void nets_loglik(const nets_model *m, const float *x, const float *mean, const float *scale, long n,
                 double *out)
{
    const nets_info *in = &m->info;
    long obs = (long)in->channels * in->height * in->width;
    const double half_log_2pi = 0.91893853320467274178;
    for (long i = 0; i < n; i++) {
        const float *xi = x + i * obs, *mi = mean + i * obs;
        double s = 0.0;
        if (in->likelihood == NETS_GAUSSIAN) {
            if (!scale) {
                out[i] = NAN;
                continue;
            }
            const float *si = scale + i * obs;
            for (long j = 0; j < obs; j++) {
                double d = ((double)xi[j] - mi[j]) / si[j];
                s += -half_log_2pi - log((double)si[j]) - 0.5 * d * d;
            }
        } else {
            for (long j = 0; j < obs; j++) {
                double p = mi[j], q = 1.0 - p;
                if (p < 1e-30)
                    p = 1e-30;
                if (q < 0x1p-25)
                    q = 0x1p-25;
                if (xi[j] > 0.0f)
                    s += xi[j] * log(p);
                if (xi[j] < 1.0f)
                    s += (1.0 - xi[j]) * log(q);
            }
        }
        out[i] = s;
    }
}
