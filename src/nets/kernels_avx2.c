/* kernels_avx2.c -- the AVX2 GEMM engine (see kernels_avx2.h): panel packing, the register-blocked
 * kernel, bias/residual/activation stores, the job runner, and the vector helpers of group norm;
 * stubs on other targets. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "nets/kernels_avx2.h"

#define KERN_AVX2_RUNS   16 /* most taps (na * nb) for which runs are packed by masked loads */
#define KERN_AVX2_AHEAD  4  /* channels ahead that the packing of runs prefetches */
#define KERN_AVX2_TAPS   49 /* most taps (na * nb) of a flat panel */
#define KERN_AVX2_SLACK  8  /* floats of room left after a packed panel (see kern_avx2_run) */
#define KERN_AVX2_CBLOCK 4  /* channels per block of a flat panel (see kern_avx2_pack_flat) */

/* Where a run of panel columns goes: columns [c0, c0 + len) to out offsets off + l * osx.
 * pair: osx == 2, no residual, 8 columns, and the 16 floats from off within one output row
 * (see kern_avx2_store). */
typedef struct {
    int c0, len, pair;
    long off;
} kern_avx2_dst;

static pthread_once_t kern_avx2_once = PTHREAD_ONCE_INIT;
static int kern_avx2_flag;

static void kern_avx2_probe(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    kern_avx2_flag = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
}

/* Whether the AVX2 engine runs on this CPU (probed once). */
int kern_avx2_available(void)
{
    pthread_once(&kern_avx2_once, kern_avx2_probe);
    return kern_avx2_flag;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define KERN_AVX2 __attribute__((target("avx2,fma")))

/* All-ones in lanes [lo, hi), zero elsewhere. */
static KERN_AVX2 inline __m256i kern_avx2_range(int lo, int hi)
{
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(hi), lanes),
                            _mm256_cmpgt_epi32(lanes, _mm256_set1_epi32(lo - 1)));
}

/* All-ones in the lanes where 0 <= v < n. */
static KERN_AVX2 inline __m256i kern_avx2_inside(__m256i v, int n)
{
    return _mm256_and_si256(_mm256_cmpgt_epi32(v, _mm256_set1_epi32(-1)),
                            _mm256_cmpgt_epi32(_mm256_set1_epi32(n), v));
}

/* The activation act on n vectors (1 to 4; a constant where this is inlined) in place. Swish and
 * sigmoid take 1 + exp(-v) by Cephes' expf reduction and polynomial (as v4_exp in layers.c and
 * kern_exp in kernels_avx512.c), each step done for all n vectors before the next: one vector's
 * swish is a chain of some 16 dependent operations, and with one vector at a time (or four
 * unrolled by the compiler, one after the other) swish took 0.57-0.59 ns a float in L1 on the AMD
 * CPU measured, 0.47 with four interleaved. The steps are lean, since on a Zen 2 these vector
 * operations, not the division, bound a swish: fn = round(-v log2 e) comes from one FMA with
 * 1.5 * 2^23 + 127, whose low bits are then 127 + fn, shifted into the exponent field for 2^fn (no
 * rounding or conversion instruction); the reduction and polynomial run in r' = -r = v + fn ln 2
 * with the odd coefficients negated (no negation of v); and the last sum is one FMA onto
 * 1 + 2^fn, formed off the chain. On a Zen 2 the bundled decoder (46,000 swishes a frame) went
 * from 20.69-20.76 to 20.39-20.43 ms a call, the encoder from 8.00-8.04 to 7.94-7.97; over
 * [-100, 100] swish's largest relative error against double precision is 1.74e-7 (1.69e-7
 * before), its mean 1.44e-8 (the same). */
static KERN_AVX2 inline __attribute__((always_inline)) void kern_avx2_actn(__m256 *v, int n,
                                                                           nets_act act)
{
    if (act == ACT_RELU) {
        _Pragma("GCC unroll 4") for (int u = 0; u < n; u++) v[u] =
            _mm256_max_ps(v[u], _mm256_setzero_ps());
        return;
    }
    if (act != ACT_SWISH && act != ACT_SIGMOID)
        return;
    const __m256 one = _mm256_set1_ps(1.0f), shift = _mm256_set1_ps(12583039.0f);
    __m256 c[4], t[4], r[4], y[4];
    /* v in [-88, 87]: -v in Cephes' range, 127 + fn in [1, 254] */
    _Pragma("GCC unroll 4") for (int u = 0; u < n; u++) c[u] =
        _mm256_min_ps(_mm256_max_ps(v[u], _mm256_set1_ps(-88.0f)), _mm256_set1_ps(87.0f));
    _Pragma("GCC unroll 4") for (int u = 0; u < n; u++) t[u] =
        _mm256_fmadd_ps(c[u], _mm256_set1_ps(-1.44269504088896341f), shift);
    _Pragma("GCC unroll 4") for (int u = 0; u < n; u++)
    {
        __m256 fn = _mm256_sub_ps(t[u], shift);
        r[u] = _mm256_fmadd_ps(fn, _mm256_set1_ps(0.693359375f), c[u]);
        r[u] = _mm256_fmadd_ps(fn, _mm256_set1_ps(-2.12194440e-4f), r[u]);
    }
    _Pragma("GCC unroll 4") for (int u = 0; u < n; u++) y[u] =
        _mm256_fmadd_ps(_mm256_set1_ps(-1.9875691500e-4f), r[u], _mm256_set1_ps(1.3981999507e-3f));
    _Pragma("GCC unroll 4") for (int u = 0; u < n; u++) y[u] =
        _mm256_fmadd_ps(y[u], r[u], _mm256_set1_ps(-8.3334519073e-3f));
    _Pragma("GCC unroll 4") for (int u = 0; u < n; u++) y[u] =
        _mm256_fmadd_ps(y[u], r[u], _mm256_set1_ps(4.1665795894e-2f));
    _Pragma("GCC unroll 4") for (int u = 0; u < n; u++) y[u] =
        _mm256_fmadd_ps(y[u], r[u], _mm256_set1_ps(-1.6666665459e-1f));
    _Pragma("GCC unroll 4") for (int u = 0; u < n; u++) y[u] =
        _mm256_fmadd_ps(y[u], r[u], _mm256_set1_ps(5.0000001201e-1f));
    _Pragma("GCC unroll 4") for (int u = 0; u < n; u++)
    {
        /* exp(-r') / 2^fn = 1 + q with q = r'^2 p(r') - r'; then 1 + exp(-v) = (1 + 2^fn) +
         * q 2^fn, where 1 + 2^fn waits for nothing but fn */
        y[u] = _mm256_fmsub_ps(y[u], _mm256_mul_ps(r[u], r[u]), r[u]);
        __m256 e = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(t[u]), 23));
        y[u] = _mm256_fmadd_ps(y[u], e, _mm256_add_ps(one, e));
    }
    _Pragma("GCC unroll 4") for (int u = 0; u < n; u++)
    {
        v[u] = _mm256_div_ps(act == ACT_SWISH ? v[u] : one, y[u]);
    }
}

/* The activation act on one vector (kern_avx2_actn). */
static KERN_AVX2 inline __attribute__((always_inline)) __m256 kern_avx2_act(__m256 v, nets_act act)
{
    kern_avx2_actn(&v, 1, act);
    return v;
}

/* The mask of the first len lanes (len clamped to [0, 8]). */
static KERN_AVX2 inline __m256i kern_avx2_first(long len)
{
    return kern_avx2_range(0, len < 8 ? (int)len : 8);
}

/* x[i] = act(src[i] * a + b) for len floats, 8 lanes at a time. */
KERN_AVX2 void kern_avx2_affine_act(float *x, const float *src, long len, float a, float b,
                                    nets_act act)
{
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    long i = 0;
    for (; i + 32 <= len; i += 32) {
        __m256 v[4];
        _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) v[u] =
            _mm256_fmadd_ps(_mm256_loadu_ps(src + i + 8 * u), va, vb);
        kern_avx2_actn(v, 4, act);
        _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) _mm256_storeu_ps(x + i + 8 * u, v[u]);
    }
    for (; i + 8 <= len; i += 8)
        _mm256_storeu_ps(x + i,
                         kern_avx2_act(_mm256_fmadd_ps(_mm256_loadu_ps(src + i), va, vb), act));
    if (i < len) {
        __m256i m = kern_avx2_first(len - i);
        __m256 v = _mm256_fmadd_ps(_mm256_maskload_ps(src + i, m), va, vb);
        _mm256_maskstore_ps(x + i, m, kern_avx2_act(v, act));
    }
}

/* The sum of the 8 lanes of v, in double. */
static KERN_AVX2 inline double kern_avx2_hsum(__m256 v)
{
    __m256d d = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)),
                              _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(d), _mm256_extractf128_pd(d, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

/* Sum of len floats (float lanes, double result). Four accumulators, 32 floats a step, then one
 * vector at a time: with one, each step waited for the last (group norm's statistics, 169 floats
 * a channel in the bundled encoder; on a Zen 2 with these and kern_avx2_sqdev's four, the
 * encoder went from 7.85-7.87 to 7.79-7.82 ms a call and the decoder from 20.09-20.14 to
 * 19.92-19.98). */
KERN_AVX2 double kern_avx2_sum(const float *p, long len)
{
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    long i = 0;
    for (; i + 32 <= len; i += 32)
        _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) acc[u] =
            _mm256_add_ps(acc[u], _mm256_loadu_ps(p + i + 8 * u));
    for (; i + 8 <= len; i += 8)
        acc[0] = _mm256_add_ps(acc[0], _mm256_loadu_ps(p + i));
    if (i < len)
        acc[1] = _mm256_add_ps(acc[1], _mm256_maskload_ps(p + i, kern_avx2_first(len - i)));
    return kern_avx2_hsum(
        _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

/* Sum of (p[i] - mean)^2 over len floats, with four accumulators as kern_avx2_sum. */
KERN_AVX2 double kern_avx2_sqdev(const float *p, long len, float mean)
{
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()},
           vm = _mm256_set1_ps(mean);
    long i = 0;
    for (; i + 32 <= len; i += 32)
        _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++)
        {
            __m256 d = _mm256_sub_ps(_mm256_loadu_ps(p + i + 8 * u), vm);
            acc[u] = _mm256_fmadd_ps(d, d, acc[u]);
        }
    for (; i + 8 <= len; i += 8) {
        __m256 d = _mm256_sub_ps(_mm256_loadu_ps(p + i), vm);
        acc[0] = _mm256_fmadd_ps(d, d, acc[0]);
    }
    if (i < len) {
        __m256i m = kern_avx2_first(len - i);
        __m256 d =
            _mm256_and_ps(_mm256_sub_ps(_mm256_maskload_ps(p + i, m), vm), _mm256_castsi256_ps(m));
        acc[1] = _mm256_fmadd_ps(d, d, acc[1]);
    }
    return kern_avx2_hsum(
        _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

/* The first n floats (1 <= n < 8) of v to o: a half, a pair and a single store at most. */
static KERN_AVX2 inline void kern_avx2_store_part(float *o, __m256 v, int n)
{
    __m128 h = _mm256_castps256_ps128(v);
    if (n >= 4) {
        _mm_storeu_ps(o, h);
        h = _mm256_extractf128_ps(v, 1);
        o += 4;
        n -= 4;
    }
    if (n >= 2) {
        _mm_storel_pi((__m64 *)o, h);
        h = _mm_movehl_ps(h, h);
        o += 2;
        n -= 2;
    }
    if (n)
        _mm_store_ss(o, h);
}

/* Group norm of points (see kernels_avx2.h), 8 images in the lanes at a time: the statistics in
 * double lanes (two vectors of 4) and the per-lane operations of kern_avx2_sum, kern_avx2_sqdev
 * and kern_avx2_affine_act on one float, in the same order, so the bits are those of the layer's
 * per-image passes. */
KERN_AVX2 void kern_avx2_gn_points(const float *in, float *out, long n, int cpg, const float *w,
                                   const float *b, double eps, nets_act act)
{
    const __m256d cnt = _mm256_set1_pd((double)cpg), veps = _mm256_set1_pd(eps),
                  one = _mm256_set1_pd(1.0);
    for (long i = 0; i < n; i += 8) {
        const __m256i m = kern_avx2_first(n - i);
        __m256d s[2] = {_mm256_setzero_pd(), _mm256_setzero_pd()};
        for (int c = 0; c < cpg; c++) {
            __m256 x = _mm256_maskload_ps(in + c * n + i, m);
            s[0] = _mm256_add_pd(s[0], _mm256_cvtps_pd(_mm256_castps256_ps128(x)));
            s[1] = _mm256_add_pd(s[1], _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
        }
        __m256d mean[2] = {_mm256_div_pd(s[0], cnt), _mm256_div_pd(s[1], cnt)};
        __m256 mf = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(mean[0])),
                                         _mm256_cvtpd_ps(mean[1]), 1);
        __m256d q[2] = {_mm256_setzero_pd(), _mm256_setzero_pd()};
        for (int c = 0; c < cpg; c++) {
            __m256 d = _mm256_sub_ps(_mm256_maskload_ps(in + c * n + i, m), mf);
            d = _mm256_mul_ps(d, d);
            q[0] = _mm256_add_pd(q[0], _mm256_cvtps_pd(_mm256_castps256_ps128(d)));
            q[1] = _mm256_add_pd(q[1], _mm256_cvtps_pd(_mm256_extractf128_ps(d, 1)));
        }
        __m256d rstd[2];
        for (int h = 0; h < 2; h++)
            rstd[h] =
                _mm256_div_pd(one, _mm256_sqrt_pd(_mm256_add_pd(_mm256_div_pd(q[h], cnt), veps)));
        for (int c0 = 0; c0 < cpg; c0 += 4) {
            __m256 v[4];
            _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++)
            {
                int c = c0 + u < cpg ? c0 + u : cpg - 1;
                __m256d wc = _mm256_set1_pd((double)w[c]), bc = _mm256_set1_pd((double)b[c]);
                __m128 a[2], o[2];
                for (int h = 0; h < 2; h++) {
                    __m256d sc = _mm256_mul_pd(wc, rstd[h]);
                    a[h] = _mm256_cvtpd_ps(sc);
                    o[h] = _mm256_cvtpd_ps(
                        _mm256_sub_pd(bc, _mm256_mul_pd(_mm256_mul_pd(mean[h], wc), rstd[h])));
                }
                v[u] = _mm256_fmadd_ps(_mm256_maskload_ps(in + c * n + i, m),
                                       _mm256_insertf128_ps(_mm256_castps128_ps256(a[0]), a[1], 1),
                                       _mm256_insertf128_ps(_mm256_castps128_ps256(o[0]), o[1], 1));
            }
            kern_avx2_actn(v, 4, act);
            for (int u = 0; u < 4 && c0 + u < cpg; u++) {
                if (n - i >= 8)
                    _mm256_storeu_ps(out + (c0 + u) * n + i, v[u]);
                else
                    kern_avx2_store_part(out + (c0 + u) * n + i, v[u], (int)(n - i));
            }
        }
    }
}

/* Pixels per item of kern_avx2_pixels (a multiple of KERN_AVX2_PX). */
#define KERN_AVX2_PX_ITEM 24
#define KERN_AVX2_PX      3 /* output pixels per kernel step of kern_avx2_pixels */

/* The grid point j of job g: its input offset (tap 0) and its output offset. */
static void kern_avx2_point(const kern_job *g, long j, long *in, long *out)
{
    long per = (long)g->ny * g->nx, img = j / per, r = j % per;
    long ty = r / g->nx, tx = r % g->nx;
    *in = img * g->is + (ty * g->sy + g->dy0) * g->W + tx * g->sx + g->dx0;
    *out = img * g->ois + (g->oy0 + ty * g->osy) * g->orow + g->ox0 + tx * g->osx;
}

/* Items [b, e) of kern_avx2_pixels: KERN_AVX2_PX grid points at a time (the last repeated to fill
 * a step), 32 output channels at a time in 12 accumulators: for each k the points' inputs are
 * broadcast straight from the input and the 4 vectors of that row of the block of A^T are loaded
 * once for the 3 points (with A^T's rows of all M channels, a block's rows were 4 M bytes apart
 * and the layer read every line of A^T once per block: the CIFAR encoder's enc.down1, 64
 * channels, ran at 69 GFLOP/s on a Zen 2 that way, 96 by blocks). Bias and act are applied in
 * the registers, then each point's channels are stored (lane by lane, or as vectors where the
 * channels are adjacent, ors == 1). */
static KERN_AVX2 void kern_avx2_px_run(const void *v, long b, long e, int worker)
{
    const kern_job *g = v;
    const long N = g->n * g->ny * g->nx, K = g->K;
    (void)worker;
    const long *off = (const long *)(const void *)g->slots;
    const float *in = g->in, *at = g->a;
    const int M = g->M;
    float tile[KERN_AVX2_PX][32] __attribute__((aligned(32)));
    for (long j0 = b * KERN_AVX2_PX_ITEM; j0 < e * KERN_AVX2_PX_ITEM && j0 < N;
         j0 += KERN_AVX2_PX) {
        long ib[KERN_AVX2_PX], ob[KERN_AVX2_PX];
        int np = N - j0 < KERN_AVX2_PX ? (int)(N - j0) : KERN_AVX2_PX;
        for (int p = 0; p < KERN_AVX2_PX; p++)
            kern_avx2_point(g, j0 + (p < np ? p : np - 1), &ib[p], &ob[p]);
        const float *x0 = in + ib[0], *x1 = in + ib[1], *x2 = in + ib[2];
        for (int mb = 0; mb < M; mb += 32) {
            __m256 acc[KERN_AVX2_PX][4];
            _Pragma("GCC unroll 3") for (int p = 0; p < KERN_AVX2_PX; p++)
                _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) acc[p][u] = _mm256_setzero_ps();
            const float *w = at + mb * K;
            for (long k = 0; k < K; k++, w += 32) {
                const long o = off[k];
                const __m256 a0 = _mm256_broadcast_ss(x0 + o), a1 = _mm256_broadcast_ss(x1 + o),
                             a2 = _mm256_broadcast_ss(x2 + o);
                _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++)
                {
                    const __m256 wv = _mm256_loadu_ps(w + 8 * u);
                    acc[0][u] = _mm256_fmadd_ps(a0, wv, acc[0][u]);
                    acc[1][u] = _mm256_fmadd_ps(a1, wv, acc[1][u]);
                    acc[2][u] = _mm256_fmadd_ps(a2, wv, acc[2][u]);
                }
            }
            _Pragma("GCC unroll 3") for (int p = 0; p < KERN_AVX2_PX; p++)
            {
                _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) acc[p][u] =
                    _mm256_add_ps(acc[p][u], _mm256_loadu_ps(g->bias + mb + 8 * u));
                kern_avx2_actn(acc[p], 4, g->act);
                _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++)
                    _mm256_store_ps(tile[p] + 8 * u, acc[p][u]);
            }
            for (int p = 0; p < np; p++) {
                float *o = g->out + ob[p] + mb * g->ors;
                if (g->ors == 1)
                    for (int u = 0; u < 4; u++)
                        _mm256_storeu_ps(o + 8 * u, _mm256_load_ps(tile[p] + 8 * u));
                else
                    for (int m = 0; m < 32; m++)
                        o[m * g->ors] = tile[p][m];
            }
        }
    }
}

/* Run job g by output pixels (see kernels_avx2.h): the input offsets of the K taps are worked out
 * once, at g->slots, for all threads. */
void kern_avx2_pixels(team_t *t, const kern_job *g)
{
    long N = g->n * g->ny * g->nx, k = 0;
    long *off = (long *)(void *)g->slots;
    for (int c = 0; c < g->nc; c++)
        for (int ta = 0; ta < g->na; ta++)
            for (int tb = 0; tb < g->nb; tb++)
                off[k++] = c * g->cs + (long)ta * g->day * g->W + (long)tb * g->dbx;
    team_for(t, (N + KERN_AVX2_PX_ITEM - 1) / KERN_AVX2_PX_ITEM, 0, N * (g->K + g->M),
             kern_avx2_px_run, g);
}

/* Copy rows (see kernels_avx2.h): a row of 8 or more floats as vectors from its start and one
 * ending at its end (overlapping the one before), a shorter one by pieces. */
KERN_AVX2 void kern_avx2_copy_rows(const float *src, long ld, long rows_per_plane, float *dst,
                                   long rows, int w, long planes)
{
    for (long pl = 0; pl < planes; pl++, src += ld * rows_per_plane)
        for (long r = 0; r < rows; r++, dst += w) {
            const float *s = src + r * ld;
            if (w < 8) {
                kern_avx2_store_part(dst, _mm256_maskload_ps(s, kern_avx2_first(w)), w);
                continue;
            }
            int x = 0;
            for (; x + 8 < w; x += 8)
                _mm256_storeu_ps(dst + x, _mm256_loadu_ps(s + x));
            _mm256_storeu_ps(dst + w - 8, _mm256_loadu_ps(s + w - 8));
        }
}

/* Flat panel (job field flat; see kern_flat_setup in kernels_avx512.c): ncol consecutive
 * pixels from j0 of the flattened (image, row, column) grid, which in the channel-major layout
 * are consecutive floats of each channel of the input, tap (ta, tb) of pixel j at input offset
 * j + dy * W + dx. Each 8-lane vector of a B row is one masked load whose mask drops the lanes
 * whose tap falls outside the image (into the row or image next to it) and those from ncol on
 * (masked-off lanes are never read and load as 0). */
static KERN_AVX2 void kern_avx2_pack_flat(const kern_job *g, long j0, int ncol, float *bp)
{
    const int T = g->na * g->nb;
    __m256i msk[KERN_AVX2_NV][KERN_AVX2_TAPS];
    long off[KERN_AVX2_NV][KERN_AVX2_TAPS];
    for (int v = 0; v < KERN_AVX2_NV; v++) {
        int len = ncol - 8 * v;
        if (len > 8)
            len = 8;
        int lx[8], ly[8];
        long j = j0 + 8 * v;
        int x = (int)(j % g->W), y = (int)(j / g->W % g->H);
        for (int l = 0; l < 8; l++) {
            lx[l] = x;
            ly[l] = y;
            if (++x == g->W) {
                x = 0;
                if (++y == g->H)
                    y = 0;
            }
        }
        const __m256i vx = _mm256_loadu_si256((const __m256i *)lx),
                      vy = _mm256_loadu_si256((const __m256i *)ly),
                      live = kern_avx2_range(0, len < 0 ? 0 : len);
        for (int ta = 0; ta < g->na; ta++) {
            int dy = g->dy0 + ta * g->day;
            __m256i ym = _mm256_and_si256(
                live, kern_avx2_inside(_mm256_add_epi32(vy, _mm256_set1_epi32(dy)), g->H));
            for (int tb = 0; tb < g->nb; tb++) {
                int dx = g->dx0 + tb * g->dbx, t = ta * g->nb + tb;
                msk[v][t] = _mm256_and_si256(
                    ym, kern_avx2_inside(_mm256_add_epi32(vx, _mm256_set1_epi32(dx)), g->W));
                off[v][t] = len > 0 ? j + (long)dy * g->W + dx : 0;
            }
        }
    }
    /* blocks of KERN_AVX2_CBLOCK channels outer, then taps and vectors, then the block's
     * channels: a tap's mask and offset are loaded once per block, not once per B row (loaded
     * once per row, their loads from the stack waited for the panel's stores whenever the low
     * 12 bits of the addresses matched, and the timing moved with where the stack fell), and
     * with a channel stride of a multiple of 4 KiB (64 images of 4 x 4 to 16 x 16), where every
     * channel's rows fall into the same L1 sets, a block's lines stay in them for all taps */
    /* the channel stride in a register: read from the job after every store, as GCC compiled
     * g->cs here (the stores might alias the job), its loads waited for the panel's stores
     * whenever the low 12 bits of the addresses matched; with it held, the bundled model's 3 x 3
     * convolutions went from 87.4 to 89.3-90.5 GFLOP/s on a Zen 2 */
    const long rs = (long)T * KERN_AVX2_PANEL, cs = g->cs;
    for (int c0 = 0; c0 < g->nc; c0 += KERN_AVX2_CBLOCK) {
        int nb = g->nc - c0 < KERN_AVX2_CBLOCK ? g->nc - c0 : KERN_AVX2_CBLOCK;
        const float *base = g->in + c0 * cs;
        float *block = bp + c0 * rs;
        for (int t = 0; t < T; t++)
            for (int v = 0; v < KERN_AVX2_NV; v++) {
                const __m256i m = msk[v][t];
                const float *src = base + off[v][t];
                float *row = block + t * KERN_AVX2_PANEL + 8 * v;
                for (int c = 0; c < nb; c++, src += cs, row += rs)
                    _mm256_storeu_ps(row, _mm256_maskload_ps(src, m));
            }
    }
}

/* The runs of a panel (kern_avx2_pack) for a job with column stride sx = 1 or 2 (a constant where
 * this is inlined) and at most KERN_AVX2_RUNS taps: per run q and tap t, the offset of the run's
 * first input column from a channel's base and the masks of the lanes inside the image and the
 * run (none for a row outside it), then per channel, tap and run one (row, run) of B:
 * - sx = 1: one masked load of 8 lanes, stored whole (lanes past the run are 0: see
 *   kern_avx2_pack for where they land), in blocks of channels (below): on a Zen 2 the bundled
 *   decoder, whose transposed convolutions pack this way, went from 21.15-21.18 to
 *   20.77-20.80 ms a call.
 * - sx = 2: the 16 floats from the run's first input column, by two masked loads, of which the
 *   even lanes are kept and stored whole in the same way. The general case's gather per 8 lanes
 *   made the bundled encoder's enc.down1 (32 channels, rows of 5) take 431-550 us for 32 frames on
 *   an AMD Zen 4, 372-393 us this way. For one channel (enc.down0), where working out the masks
 *   and offsets is most of the packing, this ran as fast as the gathers (on the Zen 4, and 22.2
 *   against 22.4 GFLOP/s on a Zen 2, whose gathers are slower); with 3 channels (the CIFAR
 *   encoder's first layer) at 52.4 GFLOP/s on the Zen 2 against 45.3 with the gathers. */
static KERN_AVX2 inline __attribute__((always_inline)) void
kern_avx2_pack_runs(const kern_job *g, const kern_seg *seg, int ns, int tail, float *bp, int sx)
{
    const __m256 zero = _mm256_setzero_ps();
    const int T = g->na * g->nb;
    __m256i mlo[KERN_AVX2_PANEL][KERN_AVX2_RUNS], mhi[KERN_AVX2_PANEL][KERN_AVX2_RUNS];
    long off[KERN_AVX2_PANEL][KERN_AVX2_RUNS];
    for (int q = 0; q < ns; q++)
        for (int ta = 0; ta < g->na; ta++) {
            int y = seg[q].ty * g->sy + g->dy0 + ta * g->day;
            for (int tb = 0; tb < g->nb; tb++) {
                int x0 = sx * seg[q].tx + g->dx0 + tb * g->dbx, t = ta * g->nb + tb;
                /* window lanes [lo, hi) from x0 lie in the image and the run */
                int span = sx * (seg[q].len - 1) + 1;
                int lo = x0 < 0 ? -x0 : 0, hi = g->W - x0 < span ? g->W - x0 : span;
                if ((unsigned)y >= (unsigned)g->H || hi <= lo) {
                    mlo[q][t] = mhi[q][t] = _mm256_setzero_si256();
                    off[q][t] = 0;
                } else {
                    mlo[q][t] = kern_avx2_range(lo, hi);
                    if (sx == 2)
                        mhi[q][t] = kern_avx2_range(lo - 8, hi - 8);
                    off[q][t] = seg[q].img * g->is + (long)y * g->W + x0;
                }
            }
        }
    /* blocks of KERN_AVX2_CBLOCK channels outer, then taps and runs, then the block's channels,
     * as in kern_avx2_pack_flat: a run's masks, offset and column are loaded once per block, not
     * once per B row (once per row, those loads from the stack waited for the panel's stores).
     * The rows of a block are then not written in order, so a run whose 8 lanes would pass the
     * end of its row (into the next row, maybe written already) is stored in pieces. */
    int cut[KERN_AVX2_PANEL];
    for (int q = 0; q < ns; q++)
        cut[q] = seg[q].c0 + 8 > KERN_AVX2_PANEL ? KERN_AVX2_PANEL - seg[q].c0 : 8;
    const float *in = g->in; /* the job's fields in registers (see kern_avx2_pack_flat) */
    const long cs = g->cs, rs = (long)T * KERN_AVX2_PANEL;
    const int nc = g->nc, nb = g->nb;
    for (int c0 = 0; c0 < nc; c0 += KERN_AVX2_CBLOCK) {
        int bc = nc - c0 < KERN_AVX2_CBLOCK ? nc - c0 : KERN_AVX2_CBLOCK;
        const float *base = in + c0 * cs;
        float *block = bp + c0 * rs;
        /* the lines of the channels KERN_AVX2_AHEAD on (stride 1): with a channel stride of a
         * multiple of 4 KiB every channel falls into the same L1 sets, and the loads of each
         * new channel waited for L2 */
        if (sx == 1)
            for (int c = c0 + KERN_AVX2_AHEAD; c < c0 + KERN_AVX2_AHEAD + bc && c < nc; c++)
                for (int q = 0; q < ns; q++)
                    for (int t = 0; t < T; t += nb)
                        _mm_prefetch((const char *)(in + c * cs + off[q][t]), _MM_HINT_T0);
        for (int t = 0; t < T; t++) {
            float *trow = block + t * KERN_AVX2_PANEL;
            for (int v = tail; v < KERN_AVX2_NV; v++)
                for (int c = 0; c < bc; c++)
                    _mm256_storeu_ps(trow + c * rs + 8 * v, zero);
            for (int q = 0; q < ns; q++) {
                const __m256i ml = mlo[q][t], mh = sx == 2 ? mhi[q][t] : ml;
                const float *src = base + off[q][t];
                float *row = trow + seg[q].c0;
                const int n = cut[q];
                for (int c = 0; c < bc; c++, src += cs, row += rs) {
                    __m256 a = _mm256_maskload_ps(src, ml);
                    if (sx == 2) {
                        __m256 b = _mm256_maskload_ps(src + 8, mh);
                        /* lanes 0 2 8 10 | 4 6 12 14 of the window, then in order */
                        __m256 e = _mm256_shuffle_ps(a, b, 0x88);
                        a = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8));
                    }
                    if (n == 8)
                        _mm256_storeu_ps(row, a);
                    else
                        kern_avx2_store_part(row, a, n);
                }
            }
        }
    }
}

/* Fill the panel bp (K rows of KERN_AVX2_PANEL floats) for the runs seg; columns from ncol on
 * are zero. With sx == 1, or sx == 2 and output rows of 5 or more (and at most KERN_AVX2_RUNS
 * taps), each (row, run) is packed by kern_avx2_pack_runs from masked loads (the masks drop the
 * pixels left or right of the image) and stored whole: the lanes past the run are 0 and are
 * overwritten by the next run of the row (written after it), or land in columns from ncol on; a
 * run whose 8 lanes would pass the end of its row is stored in pieces. Otherwise each 8-lane
 * vector of a B row is one gather of the lanes inside the image. */
static KERN_AVX2 void kern_avx2_pack(const kern_job *g, const kern_seg *seg, int ns, int ncol,
                                     float *bp)
{
    const __m256 zero = _mm256_setzero_ps();
    const int tail = ncol < KERN_AVX2_PANEL ? ncol / 8 : KERN_AVX2_NV; /* first vector to zero */
    if (g->sx == 1 && g->na * g->nb <= KERN_AVX2_RUNS) {
        kern_avx2_pack_runs(g, seg, ns, tail, bp, 1);
        return;
    }
    if (g->sx == 2 && g->nx >= 5 && g->na * g->nb <= KERN_AVX2_RUNS) {
        kern_avx2_pack_runs(g, seg, ns, tail, bp, 2);
        return;
    }
    /* per vector of the panel: each lane's image offset, first input row and column, and
     * whether it is a column of the panel */
    __m256i vbase[KERN_AVX2_NV], vy0[KERN_AVX2_NV], vx0[KERN_AVX2_NV], vlive[KERN_AVX2_NV];
    for (int v = 0; v < KERN_AVX2_NV; v++) {
        int b[8] = {0}, y0[8] = {0}, x0[8] = {0};
        for (int q = 0; q < ns; q++)
            for (int l = 0; l < seg[q].len; l++) {
                int col = seg[q].c0 + l - 8 * v;
                if (col < 0 || col >= 8)
                    continue;
                b[col] = (int)(seg[q].img * g->is);
                y0[col] = seg[q].ty * g->sy + g->dy0;
                x0[col] = (seg[q].tx + l) * g->sx + g->dx0;
            }
        vbase[v] = _mm256_loadu_si256((const __m256i *)b);
        vy0[v] = _mm256_loadu_si256((const __m256i *)y0);
        vx0[v] = _mm256_loadu_si256((const __m256i *)x0);
        vlive[v] = kern_avx2_range(0, ncol - 8 * v < 0 ? 0 : ncol - 8 * v);
    }
    /* the job's fields in registers before the stores (see kern_avx2_pack_flat) */
    const float *jin = g->in;
    const long jcs = g->cs;
    const int jnc = g->nc, jna = g->na, jnb = g->nb, jday = g->day, jdbx = g->dbx, jW = g->W,
              jH = g->H;
    float *row = bp;
    for (int c = 0; c < jnc; c++) {
        const float *src = jin + c * jcs;
        for (int ta = 0; ta < jna; ta++) {
            const __m256i dy = _mm256_set1_epi32(ta * jday);
            for (int tb = 0; tb < jnb; tb++, row += KERN_AVX2_PANEL) {
                const __m256i dx = _mm256_set1_epi32(tb * jdbx), w = _mm256_set1_epi32(jW);
                for (int v = 0; v < KERN_AVX2_NV; v++) {
                    __m256i y = _mm256_add_epi32(vy0[v], dy), x = _mm256_add_epi32(vx0[v], dx);
                    __m256i ok =
                        _mm256_and_si256(vlive[v], _mm256_and_si256(kern_avx2_inside(y, jH),
                                                                    kern_avx2_inside(x, jW)));
                    __m256i idx =
                        _mm256_add_epi32(vbase[v], _mm256_add_epi32(_mm256_mullo_epi32(y, w), x));
                    idx = _mm256_and_si256(idx, ok); /* lanes outside: index 0, never read */
                    _mm256_storeu_ps(row + 8 * v, _mm256_mask_i32gather_ps(
                                                      zero, src, idx, _mm256_castsi256_ps(ok), 4));
                }
            }
        }
    }
}

/* acc[r][v] = sum_k a[m0 + r][k] bp[k][8v .. 8v + 7] for r < KERN_AVX2_MR (rows from mr on
 * repeat row mr - 1 and are not meant to be used): 12 accumulators, 3 vectors of B and one
 * broadcast of A in the 16 ymm registers. Always inlined, so that acc stays in registers. */
static KERN_AVX2 inline __attribute__((always_inline)) void
kern_avx2_gemm(const kern_job *g, int m0, int mr, const float *bp,
               __m256 acc[KERN_AVX2_MR][KERN_AVX2_NV])
{
    const float *ar[KERN_AVX2_MR];
    const long K = g->K; /* in a register (see kern_avx2_pack_flat) */
    _Pragma("GCC unroll 4") for (int r = 0; r < KERN_AVX2_MR; r++)
    {
        _Pragma("GCC unroll 3") for (int v = 0; v < KERN_AVX2_NV; v++) acc[r][v] =
            _mm256_setzero_ps();
        ar[r] = g->a + (long)(m0 + (r < mr ? r : mr - 1)) * K;
    }
    for (long k = 0; k < K; k++) {
        __m256 b[KERN_AVX2_NV];
        _Pragma("GCC unroll 3") for (int v = 0; v < KERN_AVX2_NV; v++) b[v] =
            _mm256_loadu_ps(bp + k * KERN_AVX2_PANEL + 8 * v);
        /* each vector of B in a register: without this GCC 12 kept one there and folded the
         * loads of the other two into the FMAs of every row, 13 loads per step instead of 7 */
        __asm__("" : "+x"(b[0]), "+x"(b[1]), "+x"(b[2]));
        _Pragma("GCC unroll 4") for (int r = 0; r < KERN_AVX2_MR; r++)
        {
            __m256 av = _mm256_broadcast_ss(ar[r] + k);
            _Pragma("GCC unroll 3") for (int v = 0; v < KERN_AVX2_NV; v++) acc[r][v] =
                _mm256_fmadd_ps(av, b[v], acc[r][v]);
        }
    }
}

/* tile[r][0..23] = rows m0 .. m0 + KERN_AVX2_MR - 1 of A times the panel (kern_avx2_gemm). */
static KERN_AVX2 void kern_avx2_kernel(const kern_job *g, int m0, int mr, const float *bp,
                                       float *tile)
{
    __m256 acc[KERN_AVX2_MR][KERN_AVX2_NV];
    kern_avx2_gemm(g, m0, mr, bp, acc);
    _Pragma("GCC unroll 4") for (int r = 0; r < KERN_AVX2_MR; r++)
        _Pragma("GCC unroll 3") for (int v = 0; v < KERN_AVX2_NV; v++)
            _mm256_store_ps(tile + r * KERN_AVX2_PANEL + 8 * v, acc[r][v]);
}

/* The same for a panel of 24 consecutive output pixels from out offset off (a whole flat
 * panel), stored straight from the accumulators with bias, residual and activation: the
 * round trip through tile, whose stack address may alias the output's in the low 12 bits,
 * made the stores wait (a timing of the bundled encoder's 3 x 3 convolution during
 * development: 25-67 GFLOP/s from one process to the next, by where the stack fell; 97 after). */
static KERN_AVX2 void kern_avx2_kernel_out(const kern_job *g, int m0, int mr, const float *bp,
                                           long off)
{
    __m256 acc[KERN_AVX2_MR][KERN_AVX2_NV];
    kern_avx2_gemm(g, m0, mr, bp, acc);
    /* the job's fields in registers before the stores (see kern_avx2_pack_flat) */
    const float *bias = g->bias, *add = g->add;
    float *out = g->out;
    const long ors = g->ors;
    const nets_act act = g->act;
    _Pragma("GCC unroll 4") for (int r = 0; r < KERN_AVX2_MR; r++)
    {
        if (r >= mr)
            break;
        long m = m0 + r;
        __m256 b = _mm256_set1_ps(bias[m]);
        float *o = out + m * ors + off;
        const float *ad = add ? add + m * ors + off : NULL;
        _Pragma("GCC unroll 3") for (int v = 0; v < KERN_AVX2_NV; v++)
        {
            __m256 x = _mm256_add_ps(acc[r][v], b);
            if (ad)
                x = _mm256_add_ps(x, _mm256_loadu_ps(ad + 8 * v));
            _mm256_storeu_ps(o + 8 * v, kern_avx2_act(x, act));
        }
    }
}

/* Rows m0 .. m0 + mr - 1 of tile (bias, residual, activation) into the output at the runs dst.
 * A whole run of 8 contiguous columns is one vector store. A pair run (every other pixel of a
 * transposed convolution's phase) is two: its lanes spread to the even lanes of two vectors and
 * blended into the 16 floats of the row there, whose odd pixels belong to another phase, written
 * by another job, never at the same time (AVX2's masked stores, vmaskmovps, were slower on the
 * AMD CPU measured than storing lane by lane). Other runs are stored lane by lane. */
static KERN_AVX2 void kern_avx2_store(const kern_job *g, const kern_avx2_dst *dst, int nd, int m0,
                                      int mr, const float *tile)
{
    /* the job's fields in registers before the stores (see kern_avx2_pack_flat) */
    const float *jbias = g->bias;
    const float *jadd = g->add;
    float *jout = g->out;
    const long jors = g->ors;
    const int josx = g->osx;
    const nets_act jact = g->act;
    float lane[8] __attribute__((aligned(32)));
    const __m256i spread_lo = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3),
                  spread_hi = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
    for (int r = 0; r < mr; r++) {
        long m = m0 + r;
        __m256 bias = _mm256_set1_ps(jbias[m]);
        float *orow = jout + m * jors;
        const float *arow = jadd ? jadd + m * jors : NULL;
        for (int q = 0; q < nd; q++) {
            const kern_avx2_dst *d = &dst[q];
            __m256 v = _mm256_add_ps(_mm256_loadu_ps(tile + r * KERN_AVX2_PANEL + d->c0), bias);
            if (josx == 1 && d->len == 8) {
                if (arow)
                    v = _mm256_add_ps(v, _mm256_loadu_ps(arow + d->off));
                _mm256_storeu_ps(orow + d->off, kern_avx2_act(v, jact));
                continue;
            }
            if (d->pair) {
                v = kern_avx2_act(v, jact);
                float *o = orow + d->off;
                _mm256_storeu_ps(o, _mm256_blend_ps(_mm256_loadu_ps(o),
                                                    _mm256_permutevar8x32_ps(v, spread_lo), 0x55));
                _mm256_storeu_ps(o + 8,
                                 _mm256_blend_ps(_mm256_loadu_ps(o + 8),
                                                 _mm256_permutevar8x32_ps(v, spread_hi), 0x55));
                continue;
            }
            if (josx == 1) { /* a run shorter than 8 */
                if (arow)
                    v = _mm256_add_ps(v,
                                      _mm256_maskload_ps(arow + d->off, kern_avx2_first(d->len)));
                kern_avx2_store_part(orow + d->off, kern_avx2_act(v, jact), d->len);
                continue;
            }
            if (arow) {
                for (int l = 0; l < 8; l++)
                    lane[l] = l < d->len ? arow[d->off + (long)l * josx] : 0.0f;
                v = _mm256_add_ps(v, _mm256_load_ps(lane));
            }
            _mm256_store_ps(lane, kern_avx2_act(v, jact));
            for (int l = 0; l < d->len; l++)
                orow[d->off + (long)l * josx] = lane[l];
        }
    }
}

/* Prefetch the output (to be written) and the residual (to be read) of the runs dst for all M
 * rows before the kernels of a panel run, as kern_prefetch of kernels_avx512.c does: with a
 * channel stride of a power of two (64 images of 16 x 16) the M rows of a run fall into the
 * same few cache sets, and the stores waited for each line. Only for outputs with runs of
 * stride 1 or 2 (not a dense layer's). */
static KERN_AVX2 void kern_avx2_prefetch(const kern_job *g, const kern_avx2_dst *dst, int nd)
{
    if (g->osx > 2)
        return;
    for (int q = 0; q < nd; q++) {
        long last = 4 * (long)(dst[q].len - 1) * g->osx;
        for (int m = 0; m < g->M; m++) {
            const char *o = (const char *)(g->out + m * g->ors + dst[q].off);
            _mm_prefetch(o, _MM_HINT_T0);
            _mm_prefetch(o + last, _MM_HINT_T0);
            if (g->add) {
                const char *a = (const char *)(g->add + m * g->ors + dst[q].off);
                _mm_prefetch(a, _MM_HINT_T0);
                _mm_prefetch(a + last, _MM_HINT_T0);
            }
        }
    }
}

/* The 64-byte boundary at or after p. */
static float *kern_avx2_align(float *p)
{
    return p + (64 - (uintptr_t)p % 64) % 64 / sizeof(float);
}

/* Panels [b, e) on thread `worker`, packed into that thread's panel buffer. */
static KERN_AVX2 void kern_avx2_run(const void *v, long b, long e, int worker)
{
    const kern_job *g = v;
    long N = g->n * g->ny * g->nx;
    int flat = g->flat && g->na * g->nb <= KERN_AVX2_TAPS;
    float tile[KERN_AVX2_MR * KERN_AVX2_PANEL + 8] __attribute__((aligned(32)));
    kern_seg seg[KERN_AVX2_PANEL];
    kern_avx2_dst dst[KERN_AVX2_PANEL];
    float *bp = g->slots + (long)worker * g->K * KERN_PANEL;
    /* on a 64-byte boundary when the thread's slot leaves room (K * (KERN_PANEL -
     * KERN_AVX2_PANEL) floats past the panel, KERN_AVX2_SLACK of them kept free):
     * unaligned, a third of the kernel's loads of B crossed a cache line (a timing during
     * development: the bundled encoder's 3 x 3 convolution ran 1.7-1.9x slower) */
    if (g->K * (KERN_PANEL - KERN_AVX2_PANEL) >= 15 + KERN_AVX2_SLACK)
        bp = kern_avx2_align(bp);
    memset(tile + KERN_AVX2_MR * KERN_AVX2_PANEL, 0, 8 * sizeof(float));
    for (long p = b; p < e; p++) {
        long j0 = p * KERN_AVX2_PANEL;
        int ncol = N - j0 < KERN_AVX2_PANEL ? (int)(N - j0) : KERN_AVX2_PANEL, nd = 0;
        if (flat) {
            kern_avx2_pack_flat(g, j0, ncol, bp);
            for (int c = 0; c < ncol; c += 8, nd++)
                dst[nd] = (kern_avx2_dst){c, ncol - c < 8 ? ncol - c : 8, 0, j0 + c};
        } else {
            int ns = kern_segments(g, j0, ncol, 8, seg);
            kern_avx2_pack(g, seg, ns, ncol, bp);
            for (nd = 0; nd < ns; nd++) {
                const kern_seg *sg = &seg[nd];
                long x = g->ox0 + (long)sg->tx * g->osx; /* the run's first output column */
                dst[nd] = (kern_avx2_dst){
                    sg->c0, sg->len, g->osx == 2 && !g->add && sg->len == 8 && x + 16 <= g->orow,
                    sg->img * g->ois + (long)(g->oy0 + sg->ty * g->osy) * g->orow + x};
            }
        }
        kern_avx2_prefetch(g, dst, nd);
        for (int m0 = 0; m0 < g->M; m0 += KERN_AVX2_MR) {
            int mr = g->M - m0 < KERN_AVX2_MR ? g->M - m0 : KERN_AVX2_MR;
            if (flat && ncol == KERN_AVX2_PANEL) {
                kern_avx2_kernel_out(g, m0, mr, bp, j0);
            } else {
                kern_avx2_kernel(g, m0, mr, bp, tile);
                kern_avx2_store(g, dst, nd, m0, mr, tile);
            }
        }
    }
}

/* Two phases of a transposed convolution whose output columns interleave (see
 * kern_avx2_go_pair): the panels of both, from the even job's grid. */
typedef struct {
    const kern_job *even, *odd;
    const kern_avx2_window *win; /* NULL: runs; else flat panels, stores inside *win */
} kern_avx2_pair;

/* The first n floats (n even, 2 <= n < 16) of the 16 in first, second to o: a vector, a half
 * and a pair store at most. (A loop over the lanes here was compiled into a call of memcpy,
 * 2.3 % of a recall read's time on this path in a profile; AVX2's masked stores were slower on
 * the AMD CPU measured, see kern_avx2_store.) */
static KERN_AVX2 inline void kern_avx2_store_even(float *o, __m256 first, __m256 second, int n)
{
    __m256 v = first;
    if (n >= 8) {
        _mm256_storeu_ps(o, first);
        o += 8;
        n -= 8;
        v = second;
    }
    __m128 h = _mm256_castps256_ps128(v);
    if (n >= 4) {
        _mm_storeu_ps(o, h);
        o += 4;
        n -= 4;
        h = _mm256_extractf128_ps(v, 1);
    }
    if (n >= 2)
        _mm_storel_pi((__m64 *)o, h);
}

/* Rows m0 .. m0 + mr - 1 of the two phases' tiles (bias, activation) into the output: run
 * column l of the even phase goes to output column 2l of the run, the odd phase's to 2l + 1, so
 * a whole run is 16 contiguous floats, two vector stores; a shorter run's 2 len floats are
 * stored by kern_avx2_store_even. */
static KERN_AVX2 void kern_avx2_store_pair(const kern_job *g, const kern_avx2_dst *dst, int nd,
                                           int m0, int mr, const float *t0, const float *t1)
{
    /* the job's fields in registers before the stores (see kern_avx2_pack_flat) */
    const float *jbias = g->bias;
    float *jout = g->out;
    const long jors = g->ors;
    const nets_act jact = g->act;
    for (int r = 0; r < mr; r++) {
        long m = m0 + r;
        __m256 bias = _mm256_set1_ps(jbias[m]);
        float *orow = jout + m * jors;
        for (int q = 0; q < nd; q++) {
            const kern_avx2_dst *d = &dst[q];
            __m256 a = kern_avx2_act(
                _mm256_add_ps(_mm256_loadu_ps(t0 + r * KERN_AVX2_PANEL + d->c0), bias), jact);
            __m256 b = kern_avx2_act(
                _mm256_add_ps(_mm256_loadu_ps(t1 + r * KERN_AVX2_PANEL + d->c0), bias), jact);
            __m256 lo = _mm256_unpacklo_ps(a, b), hi = _mm256_unpackhi_ps(a, b);
            __m256 first = _mm256_permute2f128_ps(lo, hi, 0x20),
                   second = _mm256_permute2f128_ps(lo, hi, 0x31);
            if (d->len == 8) {
                _mm256_storeu_ps(orow + d->off, first);
                _mm256_storeu_ps(orow + d->off + 8, second);
                continue;
            }
            kern_avx2_store_even(orow + d->off, first, second, 2 * d->len);
        }
    }
}

/* Panels [b, e) of a pair on thread `worker`: each packed twice (the even and the odd phase's
 * B) into the thread's slot, by runs or (win set) as flat panels; a flat panel none of whose
 * grid points is in the window is skipped. */
static KERN_AVX2 void kern_avx2_run_pair(const void *v, long b, long e, int worker)
{
    const kern_avx2_pair *pr = v;
    const kern_job *g = pr->even;
    const kern_avx2_window *win = pr->win;
    long N = g->n * g->ny * g->nx;
    float t0[KERN_AVX2_MR * KERN_AVX2_PANEL + 8] __attribute__((aligned(32)));
    float t1[KERN_AVX2_MR * KERN_AVX2_PANEL + 8] __attribute__((aligned(32)));
    kern_seg seg[KERN_AVX2_PANEL];
    kern_avx2_dst dst[KERN_AVX2_PANEL];
    float *bp0 = kern_avx2_align(g->slots + (long)worker * 2 * g->K * KERN_PANEL);
    float *bp1 = kern_avx2_align(bp0 + g->K * KERN_AVX2_PANEL + KERN_AVX2_SLACK);
    memset(t0 + KERN_AVX2_MR * KERN_AVX2_PANEL, 0, 8 * sizeof(float));
    memset(t1 + KERN_AVX2_MR * KERN_AVX2_PANEL, 0, 8 * sizeof(float));
    for (long p = b; p < e; p++) {
        long j0 = p * KERN_AVX2_PANEL;
        int ncol = N - j0 < KERN_AVX2_PANEL ? (int)(N - j0) : KERN_AVX2_PANEL;
        int ns = kern_segments(g, j0, ncol, 8, seg), nd = 0;
        if (win) {
            kern_avx2_pack_flat(g, j0, ncol, bp0);
            kern_avx2_pack_flat(pr->odd, j0, ncol, bp1);
        } else {
            kern_avx2_pack(g, seg, ns, ncol, bp0);
            kern_avx2_pack(pr->odd, seg, ns, ncol, bp1);
        }
        for (int q = 0; q < ns; q++) {
            kern_seg sg = seg[q];
            if (win) { /* the run's grid points inside the window */
                int x0 = sg.tx > win->x0 ? sg.tx : win->x0,
                    x1 = sg.tx + sg.len < win->x1 ? sg.tx + sg.len : win->x1;
                if (sg.ty < win->y0 || sg.ty >= win->y1 || x1 <= x0)
                    continue;
                sg.c0 += x0 - sg.tx;
                sg.len = x1 - x0;
                sg.tx = x0;
            }
            dst[nd++] = (kern_avx2_dst){sg.c0, sg.len, 0,
                                        sg.img * g->ois + (long)(g->oy0 + sg.ty * g->osy) * g->orow
                                            + g->ox0 + 2L * sg.tx};
        }
        if (nd == 0)
            continue;
        for (int m0 = 0; m0 < g->M; m0 += KERN_AVX2_MR) {
            int mr = g->M - m0 < KERN_AVX2_MR ? g->M - m0 : KERN_AVX2_MR;
            kern_avx2_kernel(g, m0, mr, bp0, t0);
            kern_avx2_kernel(pr->odd, m0, mr, bp1, t1);
            kern_avx2_store_pair(g, dst, nd, m0, mr, t0, t1);
        }
    }
}

/* Run two phases of a transposed convolution with stride 2 as one job (see kernels_avx2.h). */
void kern_avx2_go_pair(team_t *t, const kern_job *even, const kern_job *odd,
                       const kern_avx2_window *win)
{
    kern_avx2_pair pr = {even, odd, win};
    long N = even->n * even->ny * even->nx, P = (N + KERN_AVX2_PANEL - 1) / KERN_AVX2_PANEL;
    team_for(t, P, 0, 2 * N * (even->K + even->M), kern_avx2_run_pair, &pr);
}

/* Pixels per item of kern_avx2_pointwise: a multiple of its 32-pixel steps. */
#define KERN_AVX2_PW_ITEM 256

/* Items [b, e) of kern_avx2_pointwise: for the item's pixels, 32 at a time (4 vectors), each
 * output row's accumulators run over the input channels in order from zero, as in
 * kern_avx2_gemm, then take bias, residual and activation as in kern_avx2_kernel_out, so the
 * bits are those of the packed path. The last step of the grid loads and stores only the
 * pixels that are there. */
static KERN_AVX2 void kern_avx2_pw_run(const void *v, long b, long e, int worker)
{
    (void)worker;
    const kern_job *g = v;
    long N = g->n * g->ny * g->nx;
    for (long j0 = b * KERN_AVX2_PW_ITEM; j0 < e * KERN_AVX2_PW_ITEM && j0 < N; j0 += 32) {
        long left = N - j0;
        __m256 acc[KERN_AVX2_PW_ROWS][4];
        __m256i live[4];
        _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) live[u] = kern_avx2_first(left - 8 * u);
        _Pragma("GCC unroll 4") for (int r = 0; r < KERN_AVX2_PW_ROWS; r++)
            _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) acc[r][u] = _mm256_setzero_ps();
        const float *src = g->in + j0;
        for (long c = 0; c < g->K; c++, src += g->cs) {
            __m256 x[4];
            if (left >= 32) {
                _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) x[u] =
                    _mm256_loadu_ps(src + 8 * u);
            } else {
                _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) x[u] =
                    _mm256_maskload_ps(src + 8 * u, live[u]);
            }
            _Pragma("GCC unroll 4") for (int r = 0; r < KERN_AVX2_PW_ROWS; r++)
            {
                if (r >= g->M)
                    break;
                __m256 a = _mm256_broadcast_ss(g->a + r * g->K + c);
                _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) acc[r][u] =
                    _mm256_fmadd_ps(a, x[u], acc[r][u]);
            }
        }
        for (int r = 0; r < g->M; r++) {
            __m256 bias = _mm256_set1_ps(g->bias[r]);
            float *o = g->out + r * g->ors + j0;
            const float *ad = g->add ? g->add + r * g->ors + j0 : NULL;
            for (int u = 0; u < 4 && 8 * u < left; u++) {
                __m256 y = _mm256_add_ps(acc[r][u], bias);
                if (ad)
                    y = _mm256_add_ps(y, _mm256_maskload_ps(ad + 8 * u, live[u]));
                y = kern_avx2_act(y, g->act);
                if (left - 8 * u >= 8)
                    _mm256_storeu_ps(o + 8 * u, y);
                else
                    kern_avx2_store_part(o + 8 * u, y, (int)(left - 8 * u));
            }
        }
    }
}

void kern_avx2_pointwise(team_t *t, const kern_job *g)
{
    long N = g->n * g->ny * g->nx;
    team_for(t, (N + KERN_AVX2_PW_ITEM - 1) / KERN_AVX2_PW_ITEM, 0, N * (g->K + g->M),
             kern_avx2_pw_run, g);
}

/* Run a job over the team, its panels the items. */
void kern_avx2_go(team_t *t, const kern_job *g)
{
    long N = g->n * g->ny * g->nx, P = (N + KERN_AVX2_PANEL - 1) / KERN_AVX2_PANEL;
    team_for(t, P, 0, N * (g->K + g->M), kern_avx2_run, g);
}

#else

void kern_avx2_go(team_t *t, const kern_job *g)
{
    (void)t, (void)g;
}

void kern_avx2_go_pair(team_t *t, const kern_job *even, const kern_job *odd,
                       const kern_avx2_window *win)
{
    (void)t, (void)even, (void)odd, (void)win;
}

void kern_avx2_pointwise(team_t *t, const kern_job *g)
{
    (void)t, (void)g;
}

void kern_avx2_affine_act(float *x, const float *src, long len, float a, float b, nets_act act)
{
    (void)x, (void)src, (void)len, (void)a, (void)b, (void)act;
}

void kern_avx2_pixels(team_t *t, const kern_job *g)
{
    (void)t, (void)g;
}

void kern_avx2_copy_rows(const float *src, long ld, long rows_per_plane, float *dst, long rows,
                         int w, long planes)
{
    (void)src, (void)ld, (void)rows_per_plane, (void)dst, (void)rows, (void)w, (void)planes;
}

void kern_avx2_gn_points(const float *in, float *out, long n, int cpg, const float *w,
                         const float *b, double eps, nets_act act)
{
    (void)in, (void)out, (void)n, (void)cpg, (void)w, (void)b, (void)eps, (void)act;
}

double kern_avx2_sum(const float *p, long len)
{
    (void)p, (void)len;
    return 0.0;
}

double kern_avx2_sqdev(const float *p, long len, float mean)
{
    (void)p, (void)len, (void)mean;
    return 0.0;
}

#endif
