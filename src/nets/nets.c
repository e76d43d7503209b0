/* nets.c -- the public inference entry points: encode images into codes, decode codes into
 * per-pixel likelihood parameters, draw pixels, and evaluate log-likelihoods; plus the
 * reusable workspace. */
#define _DEFAULT_SOURCE /* sysconf(_SC_LEVEL2_CACHE_SIZE) */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nets/kernels_avx2.h"
#include "nets/nets_internal.h"
#include "numerics/hugemem.h"
#include "numerics/team.h"

/* Frames are run in chunks so that one activation buffer stays under this many floats (1 MiB),
 * and a layer's input and output stay near a core's L2 cache. Against 16 MiB (the whole
 * 64-frame episode in one chunk), in interleaved timings on an AMD EPYC (Zen 4, 1 MiB of L2 per
 * core), one thread: the bundled model's decoder on the AVX2 engine took 18.5 ms against 21.8
 * (fastest call), its encoder 7.3 against 8.7, on the AVX-512 engine 18.7 against 21.8 and 7.0
 * against 7.5, the CIFAR architecture's 74.0 against 80.0 and 33.9 against 36.7 (before the
 * chunks were evened out below); 2 MiB was in between, 512 KiB worse on CIFAR. */
#define NETS_BATCH_FLOATS ((long)1 << 18)
/* Fewest frames the L2 bound of nets_seq_chunk leaves a chunk. */
#define NETS_CHUNK_L2_MIN 16

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

/* Make ws hold at least need floats; returns the memory or NULL. Workspaces of 2 MB or
 * more are on transparent huge pages (hugemem_alloc): a fresh workspace is then touched with a
 * few hundred page faults instead of thousands (which cost more than the whole forward pass on
 * some virtual machines). */
static float *ws_reserve(nets_workspace *ws, size_t need)
{
    if (ws->cap >= need)
        return ws->mem;
    float *p = hugemem_alloc(sizeof(float) * need);
    if (!p)
        return NULL;
    free(ws->mem);
    ws->mem = p;
    ws->cap = need;
    return p;
}

/* Frames per chunk for n frames through s (nets_internal.h): at most NETS_BATCH_FLOATS /
 * max_act, and at most as many as keep the activations of the layers doing most of the work
 * (their sizes weighted by their multiply-adds) within a core's L2 cache where the C library
 * knows its size, though not fewer than NETS_CHUNK_L2_MIN for that; at least 1; the chunks as
 * even as that allows (64 frames at most 48 per chunk: two of 32, not 48 + 16). On the Zen 2
 * measured (512 KB of L2 a core) the bundled encoder's 13 x 13 x 32 activations went from
 * chunks of 32 frames (692 KB) to 22 and its calls from 7.89-7.90 to 7.77-7.80 ms (16 frames:
 * 7.83-7.86); the CIFAR encoder's (15 x 15 x 64) would go to 9 or 10 frames, 0.6-1.5 % slower
 * than its 16, which the floor keeps. With 1 MB of L2 (the Zen 4 measured) the chunks are
 * those of the first bound alone. */
long nets_seq_chunk(const nets_seq *s, long n)
{
    long c = NETS_BATCH_FLOATS / s->max_act;
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    double w = s->macs, wa = s->macs_act; /* worked out at parse time (nets_seq_parse) */
    if (l2 > 0 && w > 0.0 && wa / w >= 1.0 && (double)c * (wa / w) > (double)l2 / sizeof(float)) {
        long c2 = (long)((double)l2 / sizeof(float) / (wa / w));
        c2 = c2 > NETS_CHUNK_L2_MIN ? c2 : NETS_CHUNK_L2_MIN;
        c = c2 < c ? c2 : c;
    }
    if (c < 1)
        c = 1;
    if (c >= n)
        return n;
    long chunks = (n + c - 1) / c;
    return (n + chunks - 1) / chunks;
}

/* A call splits its frames between its threads (each thread runs its share of the frames
 * through every layer alone, in chunks, with a workspace of its own) when it runs on an engine
 * and each share holds at least this many frames; otherwise one share of all the frames runs
 * with each layer's work split between the threads. With 2 threads on an AMD EPYC (Zen 2, AVX2,
 * 2 cores), the bundled model's 64 frames on the AVX2 engine, fastest call of each of 6 processes
 * per build, alternating: encode 4.15-5.18 ms split against 4.44-4.90 (median 4.26 against 4.49),
 * decode 11.1-13.7 against 12.0-14.3 (11.3 against 12.2); and the layer split had a slow mode,
 * whole processes at 5.9 and 15.7 ms (1 thread: 8.1 and 21.8). The threads no longer meet after
 * every layer, and each keeps its chunks in its own core's L2 cache. */
#define NETS_SHARE_FRAMES 4

/* One encode or decode call as its threads see it. */
typedef struct {
    const nets_model *m;
    const nets_seq *s;
    nets_runner run; /* the layers' runner: with no team when the frames are split */
    long n, shares, chunk;
    float *mem; /* share k's workspace: mem + k * per floats, its output chunk at + seq */
    size_t per, seq;
    const float *x; /* encode: images in, mu and s2 out */
    double *mu, *s2;
    const double *z; /* decode: codes in, mean and scale (may be NULL) out */
    float *mean, *scale;
    long *bad; /* per share: its first frame whose output is not finite, or -1 */
} nets_call;

/* Frames [*b, *e) of call c's share k. */
static void call_share(const nets_call *c, long k, long *b, long *e)
{
    *b = k * c->n / c->shares;
    *e = (k + 1) * c->n / c->shares;
}

/* Encode share k of c, chunk by chunk; stops at the first image whose code is not finite. */
static void encode_share(const nets_call *c, long k)
{
    const nets_info *in = &c->m->info;
    long obs = (long)in->channels * in->height * in->width, C = in->code_size, b, e;
    float *mem = c->mem + (size_t)k * c->per, *outb = mem + c->seq;
    call_share(c, k, &b, &e);
    c->bad[k] = -1;
    for (long i0 = b; i0 < e; i0 += c->chunk) {
        long bn = e - i0 < c->chunk ? e - i0 : c->chunk;
        /* cannot fail: 1 <= bn <= a chunk, which nets_seq_chunk keeps indexable */
        nets_seq_run_with(c->s, bn, c->x + i0 * obs, outb, mem, &c->run, NULL);
        for (long i = 0; i < bn; i++) {
            const float *o = outb + i * 2 * C;
            for (long j = 0; j < C; j++) {
                double ls = o[C + j];
                if (ls < in->log_sigma_min)
                    ls = in->log_sigma_min;
                if (ls > in->log_sigma_max)
                    ls = in->log_sigma_max;
                c->mu[(i0 + i) * C + j] = o[j];
                c->s2[(i0 + i) * C + j] = exp(2.0 * ls);
                if (!isfinite(o[j]) || isnan(o[C + j])) {
                    c->bad[k] = i0 + i;
                    return;
                }
            }
        }
    }
}

/* y[j] = scale / (1 + exp(-x[j])) + add for n floats: in 8 lanes where the CPU has AVX2 and FMA
 * (kern_avx2_affine_act's sigmoid, within 2e-7 relative of expf's; the bundled decoder's 1,568
 * a frame took 1.7 % of its time one by one on a Zen 2), else one by one. */
static void out_sigmoid(float *y, const float *x, long n, float scale, float add)
{
    if (kern_avx2_available()) {
        kern_avx2_affine_act(y, x, n, 1.0f, 0.0f, ACT_SIGMOID);
        if (scale != 1.0f || add != 0.0f)
            for (long j = 0; j < n; j++)
                y[j] = scale * y[j] + add;
        return;
    }
    for (long j = 0; j < n; j++)
        y[j] = scale / (1.0f + expf(-x[j])) + add;
}

/* PyTorch's softplus (beta 1, threshold 20). */
static float softplus(float x)
{
    return x > 20.0f ? x : log1pf(expf(x));
}

/* Decode share k of c, chunk by chunk; stops at the first code whose output is not finite. */
static void decode_share(const nets_call *c, long k)
{
    const nets_info *in = &c->m->info;
    long C = in->code_size, obs = (long)in->channels * in->height * in->width, b, e;
    int gauss = in->likelihood == NETS_GAUSSIAN;
    long P = gauss ? 2 * obs : obs;
    float *mem = c->mem + (size_t)k * c->per, *zb = mem + c->seq, *outb = zb + c->chunk * C;
    call_share(c, k, &b, &e);
    c->bad[k] = -1;
    for (long i0 = b; i0 < e; i0 += c->chunk) {
        long bn = e - i0 < c->chunk ? e - i0 : c->chunk;
        for (long j = 0; j < bn * C; j++)
            zb[j] = (float)c->z[i0 * C + j];
        /* cannot fail: 1 <= bn <= a chunk, which nets_seq_chunk keeps indexable */
        nets_seq_run_with(c->s, bn, zb, outb, mem, &c->run, NULL);
        for (long i = 0; i < bn; i++) {
            const float *o = outb + i * P;
            float *mo = c->mean + (i0 + i) * obs;
            int finite = 1;
            if (gauss) {
                for (long j = 0; j < P; j++)
                    finite &= isfinite(o[j]) != 0;
                if (in->sigmoid_mean)
                    out_sigmoid(mo, o, obs, 1.0f, 0.0f);
                else
                    memcpy(mo, o, sizeof(float) * obs);
                if (c->scale) {
                    float *so = c->scale + (i0 + i) * obs, ms = (float)in->min_scale,
                          sm = (float)in->scale_max;
                    if (sm > 0.0f)
                        out_sigmoid(so, o + obs, obs, sm, ms);
                    else
                        for (long j = 0; j < obs; j++)
                            so[j] = softplus(o[obs + j]) + ms;
                }
            } else {
                for (long j = 0; j < obs; j++)
                    finite &= !isnan(o[j]);
                out_sigmoid(mo, o, obs, 1.0f, 0.0f);
            }
            if (!finite) {
                c->bad[k] = i0 + i;
                return;
            }
        }
    }
}

/* team_fn over shares [b, e) of a call. */
static void encode_shares_run(const void *v, long b, long e, int worker)
{
    (void)worker;
    for (long k = b; k < e; k++)
        encode_share(v, k);
}

static void decode_shares_run(const void *v, long b, long e, int worker)
{
    (void)worker;
    for (long k = b; k < e; k++)
        decode_share(v, k);
}

/* Run call c (m and its buffers set) on n frames through s with ws's threads and path (ws NULL:
 * a workspace of its own, freed here): each share's workspace holds `extra` floats per frame of
 * a chunk after the layers' own; its shares run on the runner's team, one share per thread when
 * there are several (run: encode_shares_run or decode_shares_run). Returns VBM_OK; fails with
 * VBM_ENOMEM, or with VBM_EINVAL when the output for a frame (a "what" of fn's "net") is not
 * finite, naming the first such frame, err filled. */
static vbm_status call_run(nets_call *c, nets_workspace *ws, const nets_seq *s, long n, long extra,
                           team_fn run, const char *fn, const char *net, const char *what,
                           vbm_error *err)
{
    nets_workspace local = {NULL, 0, 0, NETS_PATH_AUTO};
    nets_workspace *w = ws ? ws : &local;
    long bad[NETS_MAX_THREADS];
    vbm_status rc = VBM_OK;
    c->s = s;
    c->n = n;
    c->bad = bad;
    nets_runner_start(&c->run, s, n, w->threads, w->path);
    team_t *team = c->run.team;
    long threads = team_size(team), most = n / NETS_SHARE_FRAMES;
    int engine = c->run.path == NETS_PATH_ENGINE || c->run.path == NETS_PATH_ENGINE_AVX2;
    c->shares = engine && threads > 1 && most >= 2 ? (most < threads ? most : threads) : 1;
    c->chunk = nets_seq_chunk(s, (n + c->shares - 1) / c->shares);
    /* a share runs its layers on one thread: one slot of panel buffers, not a team's */
    c->seq = nets_seq_workspace(s, c->chunk, c->run.path, c->shares > 1 ? 1 : (int)threads);
    c->per = (c->seq + (size_t)(c->chunk * extra) + 15) / 16 * 16; /* shares 64 bytes apart */
    c->mem = ws_reserve(w, c->per * (size_t)c->shares);
    if (!c->mem) {
        rc = vbm_fail(err, VBM_ENOMEM, NULL, "%s: out of memory for %ld frames", fn, c->chunk);
    } else if (c->shares == 1) {
        run(c, 0, 1, 0);
    } else {
        c->run.team = NULL; /* each share runs its layers on the thread that took it */
        team_for_shares(team, c->shares, n * s->max_act, run, c);
        c->run.team = team;
    }
    nets_runner_stop(&c->run);
    for (long k = 0; rc == VBM_OK && k < c->shares; k++)
        if (bad[k] >= 0)
            rc = vbm_fail(err, VBM_EINVAL, NULL, "%s: the %s's output for %s %ld is not finite", fn,
                          net, what, bad[k]);
    free(local.mem);
    return rc;
}

vbm_status nets_encode_ws(const nets_model *m, nets_workspace *ws, const float *x, long n,
                          double *mu, double *s2, vbm_error *err)
{
    if (!m || !x || !mu || !s2)
        return vbm_fail(err, VBM_EINVAL, NULL, "nets_encode: NULL argument");
    if (n <= 0)
        return vbm_fail(err, VBM_EINVAL, NULL, "nets_encode: %ld images (need at least 1)", n);
    const nets_info *in = &m->info;
    long obs = (long)in->channels * in->height * in->width;
    for (long i = 0; i < n * obs; i++)
        if (!isfinite(x[i]))
            return vbm_fail(err, VBM_EINVAL, NULL, "nets_encode: pixel %ld is not finite", i);
    nets_call c = {.m = m, .x = x, .mu = mu, .s2 = s2};
    return call_run(&c, ws, &m->enc, n, 2 * (long)in->code_size, encode_shares_run, "nets_encode",
                    "encoder", "image", err);
}

vbm_status nets_encode(const nets_model *m, const float *x, long n, double *mu, double *s2,
                       vbm_error *err)
{
    return nets_encode_ws(m, NULL, x, n, mu, s2, err);
}

vbm_status nets_decode_ws(const nets_model *m, nets_workspace *ws, const double *z, long n,
                          float *mean, float *scale, vbm_error *err)
{
    if (!m || !z || !mean)
        return vbm_fail(err, VBM_EINVAL, NULL, "nets_decode: NULL argument");
    if (n <= 0)
        return vbm_fail(err, VBM_EINVAL, NULL, "nets_decode: %ld codes (need at least 1)", n);
    const nets_info *in = &m->info;
    long C = in->code_size, obs = (long)in->channels * in->height * in->width;
    long P = in->likelihood == NETS_GAUSSIAN ? 2 * obs : obs;
    for (long i = 0; i < n * C; i++)
        if (!isfinite(z[i]))
            return vbm_fail(err, VBM_EINVAL, NULL, "nets_decode: code element %ld is not finite",
                            i);
    nets_call c = {.m = m, .z = z, .mean = mean, .scale = scale};
    return call_run(&c, ws, &m->dec, n, C + P, decode_shares_run, "nets_decode", "decoder", "code",
                    err);
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
