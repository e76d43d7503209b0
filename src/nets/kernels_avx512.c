/* kernels_avx512.c -- the AVX-512 GEMM engine (see kernels_avx512.h): panel packing, the
 * register-blocked and direct kernels, bias/residual/activation stores, the job runner and
 * deinterleave, and the vector helpers of group norm; stubs on other targets. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nets/kernels_avx512.h"

#define KERN_TILE 8 /* rows of A per kernel call */

static pthread_once_t kern_once = PTHREAD_ONCE_INIT;
static int kern_flag;

static void kern_probe(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    const char *off = getenv("VBMEM_NETS_NO_AVX512");
    __builtin_cpu_init();
    kern_flag = __builtin_cpu_supports("avx512f") && !(off && *off && strcmp(off, "0") != 0);
#endif
}

/* Whether the engine runs on this CPU (probed once). */
int kern_available(void)
{
    pthread_once(&kern_once, kern_probe);
    return kern_flag;
}

/* Split the panel into runs within grid rows (see kernels_avx512.h). */
int kern_segments(const kern_job *g, long j0, int ncol, int maxlen, kern_seg *seg)
{
    long per = (long)g->ny * g->nx, img = j0 / per, r = j0 % per;
    int ty = (int)(r / g->nx), tx = (int)(r % g->nx), c = 0, ns = 0;
    while (c < ncol) {
        int len = g->nx - tx;
        if (len > maxlen)
            len = maxlen;
        if (len > ncol - c)
            len = ncol - c;
        seg[ns++] = (kern_seg){c, len, ty, tx, img};
        c += len;
        tx += len;
        if (tx == g->nx) {
            tx = 0;
            if (++ty == g->ny) {
                ty = 0;
                img++;
            }
        }
    }
    return ns;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define KERN_AVX512 __attribute__((target("avx512f")))

static KERN_AVX512 inline __mmask16 kern_mask(int len)
{
    return (__mmask16)((1u << len) - 1u);
}

/* exp on 16 lanes: Cephes' expf as v4_exp in layers.c, the power of two by scalef. */
static KERN_AVX512 inline __m512 kern_exp(__m512 x)
{
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    __m512 fn = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 z = _mm512_mul_ps(r, r);
    __m512 y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_add_ps(_mm512_fmadd_ps(y, z, r), _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(y, fn);
}

static KERN_AVX512 inline __m512 kern_act(__m512 v, nets_act act)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    switch (act) {
    case ACT_RELU: return _mm512_max_ps(v, _mm512_setzero_ps());
    case ACT_SWISH:
        return _mm512_div_ps(v,
                             _mm512_add_ps(one, kern_exp(_mm512_sub_ps(_mm512_setzero_ps(), v))));
    case ACT_SIGMOID:
        return _mm512_div_ps(one,
                             _mm512_add_ps(one, kern_exp(_mm512_sub_ps(_mm512_setzero_ps(), v))));
    default: return v;
    }
}

/* kern_act on 4 vectors at once, each step of kern_exp and the division done for the four
 * before the next (the same operations, so the same bits), as kern_avx2_actn of kernels_avx2.c:
 * swish took 0.37 ns a float in L1 one vector at a time on the AMD CPU measured, 0.31
 * interleaved. */
static KERN_AVX512 inline __attribute__((always_inline)) void kern_act4(__m512 v[4], nets_act act)
{
    if (act != ACT_SWISH && act != ACT_SIGMOID) {
        _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) v[u] = kern_act(v[u], act);
        return;
    }
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 x[4], fn[4], r[4], y[4];
    _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) x[u] = _mm512_min_ps(
        _mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), v[u]), _mm512_set1_ps(-87.0f)),
        _mm512_set1_ps(88.0f));
    _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) fn[u] =
        _mm512_roundscale_ps(_mm512_mul_ps(x[u], _mm512_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++)
    {
        r[u] = _mm512_fnmadd_ps(fn[u], _mm512_set1_ps(0.693359375f), x[u]);
        r[u] = _mm512_fnmadd_ps(fn[u], _mm512_set1_ps(-2.12194440e-4f), r[u]);
    }
    _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) y[u] =
        _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r[u], _mm512_set1_ps(1.3981999507e-3f));
    _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) y[u] =
        _mm512_fmadd_ps(y[u], r[u], _mm512_set1_ps(8.3334519073e-3f));
    _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) y[u] =
        _mm512_fmadd_ps(y[u], r[u], _mm512_set1_ps(4.1665795894e-2f));
    _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) y[u] =
        _mm512_fmadd_ps(y[u], r[u], _mm512_set1_ps(1.6666665459e-1f));
    _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) y[u] =
        _mm512_fmadd_ps(y[u], r[u], _mm512_set1_ps(5.0000001201e-1f));
    _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++)
    {
        y[u] = _mm512_add_ps(_mm512_fmadd_ps(y[u], _mm512_mul_ps(r[u], r[u]), r[u]), one);
        y[u] = _mm512_add_ps(one, _mm512_scalef_ps(y[u], fn[u])); /* 1 + exp(-v) */
    }
    _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) v[u] =
        _mm512_div_ps(act == ACT_SWISH ? v[u] : one, y[u]);
}

/* x[i] = act(x[i] * a + b) for len floats, 16 lanes at a time. */
KERN_AVX512 void kern_affine_act(float *x, const float *src, long len, float a, float b,
                                 nets_act act)
{
    const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
    long i = 0;
    for (; i + 64 <= len; i += 64) {
        __m512 v[4];
        _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) v[u] =
            _mm512_fmadd_ps(_mm512_loadu_ps(src + i + 16 * u), va, vb);
        kern_act4(v, act);
        _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) _mm512_storeu_ps(x + i + 16 * u, v[u]);
    }
    for (; i < len; i += 16) {
        __mmask16 m = kern_mask(len - i < 16 ? (int)(len - i) : 16);
        __m512 v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, src + i), va, vb);
        _mm512_mask_storeu_ps(x + i, m, kern_act(v, act));
    }
}

/* Sum of len floats (float lanes, double result). */
KERN_AVX512 double kern_sum(const float *p, long len)
{
    __m512 acc = _mm512_setzero_ps();
    for (long i = 0; i < len; i += 16)
        acc = _mm512_add_ps(
            acc, _mm512_maskz_loadu_ps(kern_mask(len - i < 16 ? (int)(len - i) : 16), p + i));
    return _mm512_reduce_add_ps(acc);
}

/* Sum of (p[i] - mean)^2 over len floats. */
KERN_AVX512 double kern_sqdev(const float *p, long len, float mean)
{
    __m512 acc = _mm512_setzero_ps(), vm = _mm512_set1_ps(mean);
    for (long i = 0; i < len; i += 16) {
        __mmask16 m = kern_mask(len - i < 16 ? (int)(len - i) : 16);
        __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, p + i), vm);
        acc = _mm512_fmadd_ps(d, d, acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* Fill the panel bp (K rows of KERN_PANEL floats) for the runs seg; columns from ncol on
 * are zeroed. With sx == 1 each (row, run) is one masked load (the mask drops the pixels
 * left or right of the image; masked-off lanes are never read) and one store; the masks
 * depend only on the run and the column tap, so they are worked out once per panel. */
static KERN_AVX512 void kern_pack(const kern_job *g, const kern_seg *seg, int ns, int ncol,
                                  float *bp)
{
    const __m512 zero = _mm512_setzero_ps();
    /* the job's fields in registers before the stores (see kern_store) */
    const float *jin = g->in;
    const long jcs = g->cs, jis = g->is, jK = g->K;
    const int jH = g->H, jW = g->W, jnc = g->nc, jna = g->na, jnb = g->nb, jsy = g->sy, jsx = g->sx,
              jdy0 = g->dy0, jdx0 = g->dx0, jday = g->day, jdbx = g->dbx;
    if (jsx == 1 && jnb <= NETS_MAX_KERNEL) {
        __mmask16 xm[KERN_PANEL][NETS_MAX_KERNEL];
        int xo[KERN_PANEL][NETS_MAX_KERNEL];
        for (int q = 0; q < ns; q++)
            for (int tb = 0; tb < jnb; tb++) {
                int x0 = seg[q].tx + jdx0 + tb * jdbx;
                int lo = x0 < 0 ? -x0 : 0, hi = jW - x0 < seg[q].len ? jW - x0 : seg[q].len;
                xm[q][tb] = hi > lo ? (__mmask16)(kern_mask(hi) & ~kern_mask(lo)) : 0;
                xo[q][tb] = hi > lo ? x0 : 0;
            }
        for (int c = 0; c < jnc; c++) {
            const float *base = jin + c * jcs;
            for (int ta = 0; ta < jna; ta++) {
                int dy = jdy0 + ta * jday;
                float *rows = bp + (long)(c * jna + ta) * jnb * KERN_PANEL;
                for (int q = 0; q < ns; q++) {
                    const kern_seg *sg = &seg[q];
                    int y = sg->ty * jsy + dy;
                    float *d = rows + sg->c0;
                    if ((unsigned)y >= (unsigned)jH) {
                        for (int tb = 0; tb < jnb; tb++)
                            _mm512_mask_storeu_ps(d + tb * KERN_PANEL, kern_mask(sg->len), zero);
                        continue;
                    }
                    const float *src = base + sg->img * jis + (long)y * jW;
                    if (sg->len == 16) {
                        for (int tb = 0; tb < jnb; tb++)
                            _mm512_storeu_ps(d + tb * KERN_PANEL,
                                             _mm512_maskz_loadu_ps(xm[q][tb], src + xo[q][tb]));
                    } else {
                        for (int tb = 0; tb < jnb; tb++)
                            _mm512_mask_storeu_ps(
                                d + tb * KERN_PANEL, kern_mask(sg->len),
                                _mm512_maskz_loadu_ps(xm[q][tb], src + xo[q][tb]));
                    }
                }
            }
        }
    } else if (jday == 1 && jdbx == 1 && jdy0 >= 0 && jdx0 >= 0
               && (long)(g->ny - 1) * jsy + jdy0 + jna - 1 < jH
               && (long)(g->nx - 1) * jsx + jdx0 + jnb - 1 < jW) {
        /* every tap inside the image (a 'valid' convolution, a dense layer): each panel
         * column has one base offset, and each B row is two gathers of base + tap offset,
         * however many runs (images, rows) the panel spans */
        int base[KERN_PANEL] __attribute__((aligned(64)));
        for (int q = 0; q < ns; q++)
            for (int l = 0; l < seg[q].len; l++)
                base[seg[q].c0 + l] = (int)(seg[q].img * jis + (long)seg[q].ty * jsy * jW
                                            + (long)(seg[q].tx + l) * jsx);
        for (int c = ncol; c < KERN_PANEL; c++)
            base[c] = 0;
        const __m512i b0 = _mm512_load_si512(base), b1 = _mm512_load_si512(base + 16);
        const __mmask16 m0 = kern_mask(ncol < 16 ? ncol : 16),
                        m1 = ncol > 16 ? kern_mask(ncol - 16) : 0;
        float *row = bp;
        for (int c = 0; c < jnc; c++) {
            const float *src = jin + c * jcs;
            for (int ta = 0; ta < jna; ta++)
                for (int tb = 0; tb < jnb; tb++, row += KERN_PANEL) {
                    __m512i off = _mm512_set1_epi32((jdy0 + ta) * jW + jdx0 + tb);
                    _mm512_storeu_ps(
                        row, _mm512_mask_i32gather_ps(zero, m0, _mm512_add_epi32(b0, off), src, 4));
                    _mm512_storeu_ps(row + 16, _mm512_mask_i32gather_ps(
                                                   zero, m1, _mm512_add_epi32(b1, off), src, 4));
                }
        }
        return; /* columns from ncol on are zero already */
    } else {
        const __m512i lanes =
            _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
        const __m512i vstep = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(jsx)),
                      vw = _mm512_set1_epi32(jW);
        float *row = bp;
        for (int c = 0; c < jnc; c++) {
            const float *base = jin + c * jcs;
            for (int ta = 0; ta < jna; ta++) {
                int dy = jdy0 + ta * jday;
                for (int tb = 0; tb < jnb; tb++, row += KERN_PANEL) {
                    int dx = jdx0 + tb * jdbx;
                    for (int q = 0; q < ns; q++) {
                        const kern_seg *sg = &seg[q];
                        __mmask16 full = kern_mask(sg->len);
                        int y = sg->ty * jsy + dy;
                        if ((unsigned)y >= (unsigned)jH) {
                            _mm512_mask_storeu_ps(row + sg->c0, full, zero);
                            continue;
                        }
                        const float *src = base + sg->img * jis + (long)y * jW;
                        __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(sg->tx * jsx + dx), vstep);
                        __mmask16 ok = full & _mm512_cmpge_epi32_mask(idx, _mm512_setzero_si512())
                                       & _mm512_cmplt_epi32_mask(idx, vw);
                        _mm512_mask_storeu_ps(row + sg->c0, full,
                                              _mm512_mask_i32gather_ps(zero, ok, idx, src, 4));
                    }
                }
            }
        }
    }
    if (ncol < KERN_PANEL)
        for (long k = 0; k < jK; k++) {
            float *row = bp + k * KERN_PANEL;
            if (ncol < 16)
                _mm512_mask_storeu_ps(row + ncol, kern_mask(16 - ncol), zero);
            int from = ncol > 16 ? ncol : 16;
            _mm512_mask_storeu_ps(row + from, kern_mask(KERN_PANEL - from), zero);
        }
}

/* tile[r][0..31] = sum_k a[r][k] bp[k][0..31] for r < KERN_TILE (rows from mr on repeat
 * row mr - 1 and are not meant to be used). */
static KERN_AVX512 void kern_kernel(long K, const float *a, long lda, int mr, const float *bp,
                                    float *tile)
{
    __m512 c0[KERN_TILE], c1[KERN_TILE];
    const float *ar[KERN_TILE];
    for (int r = 0; r < KERN_TILE; r++) {
        c0[r] = _mm512_setzero_ps();
        c1[r] = _mm512_setzero_ps();
        ar[r] = a + (long)(r < mr ? r : mr - 1) * lda;
    }
    for (long k = 0; k < K; k++) {
        __m512 b0 = _mm512_loadu_ps(bp + k * KERN_PANEL),
               b1 = _mm512_loadu_ps(bp + k * KERN_PANEL + 16);
        for (int r = 0; r < KERN_TILE; r++) {
            __m512 av = _mm512_set1_ps(ar[r][k]);
            c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
            c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
        }
    }
    for (int r = 0; r < KERN_TILE; r++) {
        _mm512_storeu_ps(tile + r * KERN_PANEL, c0[r]);
        _mm512_storeu_ps(tile + r * KERN_PANEL + 16, c1[r]);
    }
}

/* Direct mode. When the column taps are contiguous (sx == 1, or sx == 2 on a deinterleaved
 * input), there are few taps, and the grid rows are 5 to 32 columns wide, a panel is `rows`
 * whole grid rows (6 of 5 columns, 4 of up to 8, 2 of up to 16, or 1 of up to 32 as two
 * runs of 16 lanes) and is never packed:
 * the kernel loads each B row of the panel straight from the input with masked loads (the
 * masks drop the pixels outside the image, and whole rows outside it), each run filling
 * its own 8 or 16 lanes. For the few pixels per image of these networks packing cost as
 * much as the multiplication. */
#define KERN_DIRECT_TAPS 16 /* most taps (na * nb) in direct mode */

/* Per panel of direct mode: for each of the 6 lane slots (grid rows) and tap t, the
 * offset of the slot's lane 0 from the channel's base and the mask of lanes to load
 * (0 for an unused slot or a row outside the image). */
typedef struct {
    long off[6][KERN_DIRECT_TAPS];
    __mmask16 msk[6][KERN_DIRECT_TAPS];
} kern_direct_src;

/* Fill src for the ns (at most 6) runs seg of a direct-mode panel, each within one
 * 16-lane half of the panel: with `per` runs a half (ns = 2 * per at most), slots 0 ..
 * per - 1 share half 0 and the others half 1. */
static void kern_direct_setup(const kern_job *g, const kern_seg *seg, int ns, kern_direct_src *src)
{
    memset(src, 0, sizeof *src);
    for (int q = 0; q < ns; q++) {
        int sh = seg[q].c0 % 16; /* first lane of the run in its vector */
        for (int ta = 0; ta < g->na; ta++) {
            int y = seg[q].ty * g->sy + g->dy0 + ta * g->day;
            if ((unsigned)y >= (unsigned)g->H)
                continue;
            for (int tb = 0; tb < g->nb; tb++) {
                /* tap column xc of grid column tx: x = tx * sx + xc; deinterleaved, that is
                 * entry tx + xc / 2 (rounded down) of the half of parity xc & 1 */
                int xc = g->dx0 + tb * g->dbx, start = 0, width = g->W;
                if (g->half) {
                    int par = xc & 1;
                    xc = (xc - par) / 2;
                    start = par * g->half;
                    width = (g->W - par + 1) / 2;
                }
                int x0 = seg[q].tx + xc;
                int lo = x0 < 0 ? -x0 : 0, hi = width - x0 < seg[q].len ? width - x0 : seg[q].len;
                if (hi <= lo)
                    continue;
                int t = ta * g->nb + tb;
                src->msk[q][t] = (__mmask16)(((1u << hi) - (1u << lo)) << sh);
                src->off[q][t] = seg[q].img * g->is + (long)y * g->rw + start + x0 - sh;
            }
        }
    }
}

/* Flat mode, a direct mode for a stride-1 convolution whose output grid is its input grid
 * (a 'same' convolution, or 1 x 1): in the channel-major layout pixel j of the flattened
 * (image, row, column) grid sits at offset j of each channel of both the input and the
 * output, and tap (ta, tb) of output pixel j reads input offset j + dy * W + dx. So a panel
 * is any 32 consecutive pixels, whatever the image width (all lanes used, also for images
 * narrower than 5 or wider than 32), each 16-lane half of a B row is one masked load, and
 * the mask drops the lanes whose tap falls outside the image (into the row or image next
 * to it) and those past the end of the grid. Fills slots 0 and 1 of src for the panel of
 * ncol pixels from j0 (the kernel reads only those with per = 1). */
static void kern_flat_setup(const kern_job *g, long j0, int ncol, kern_direct_src *src)
{
    for (int h = 0; h < 2; h++) {
        if (ncol <= 16 * h) { /* an empty half: nothing loaded, and no stale offset used either */
            for (int t = 0; t < g->na * g->nb; t++) {
                src->msk[h][t] = 0;
                src->off[h][t] = 0;
            }
            continue;
        }
        int len = ncol - 16 * h < 16 ? ncol - 16 * h : 16;
        long j = j0 + 16 * h;
        int x = (int)(j % g->W), y = (int)(j / g->W % g->H), lx[16], ly[16];
        for (int l = 0; l < len; l++) {
            lx[l] = x;
            ly[l] = y;
            if (++x == g->W) {
                x = 0;
                if (++y == g->H)
                    y = 0;
            }
        }
        unsigned xm[KERN_DIRECT_TAPS];
        for (int tb = 0; tb < g->nb; tb++) {
            int dx = g->dx0 + tb * g->dbx;
            xm[tb] = 0;
            for (int l = 0; l < len; l++)
                if ((unsigned)(lx[l] + dx) < (unsigned)g->W)
                    xm[tb] |= 1u << l;
        }
        for (int ta = 0; ta < g->na; ta++) {
            int dy = g->dy0 + ta * g->day;
            unsigned ym = 0;
            for (int l = 0; l < len; l++)
                if ((unsigned)(ly[l] + dy) < (unsigned)g->H)
                    ym |= 1u << l;
            for (int tb = 0; tb < g->nb; tb++) {
                int t = ta * g->nb + tb;
                src->msk[h][t] = (__mmask16)(ym & xm[tb]);
                src->off[h][t] = j + (long)dy * g->W + g->dx0 + tb * g->dbx;
            }
        }
    }
}

/* tile[r][0..31] = sum_k a[r][k] B[k][0..31] for r < KERN_TILE (rows from mr on repeat row
 * mr - 1), B read straight from the input as set up in src: each 16-lane half of a B row
 * is `per` (1 to 3) merged masked loads, one per lane slot of the half. B rows k = (c, t)
 * run channels outer (tapout 0) or taps outer (tapout 1; see kern_kernel_direct).
 * The row loops are unrolled by pragma: unrolled later, GCC stored all 16 accumulators to
 * the stack on every iteration (the kernel ran at half speed). */
static KERN_AVX512 inline __attribute__((always_inline)) void
kern_kernel_direct_body(long K, long T, const float *in, long cs, const float *a, long lda, int mr,
                        const kern_direct_src *src, int per, int tapout, float *tile)
{
    __m512 c0[KERN_TILE], c1[KERN_TILE];
    const float *ar[KERN_TILE];
    _Pragma("GCC unroll 8") for (int r = 0; r < KERN_TILE; r++)
    {
        c0[r] = _mm512_setzero_ps();
        c1[r] = _mm512_setzero_ps();
        ar[r] = a + (long)(r < mr ? r : mr - 1) * lda;
    }
    if (tapout) {
        /* taps outer, channels inner: the masks and offsets of a tap are loaded once, not once
         * per B row (their loads were half of the kernel's loads) */
        long C = K / T;
        for (long t = 0; t < T; t++) {
            __mmask16 m0[3], m1[3];
            const float *p0[3], *p1[3];
            _Pragma("GCC unroll 3") for (int q = 0; q < per; q++)
            {
                m0[q] = src->msk[q][t];
                m1[q] = src->msk[per + q][t];
                p0[q] = in + src->off[q][t];
                p1[q] = in + src->off[per + q][t];
            }
            for (long c = 0, ka = t; c < C; c++, ka += T) {
                long co = c * cs;
                __m512 b0 = _mm512_maskz_loadu_ps(m0[0], p0[0] + co);
                __m512 b1 = _mm512_maskz_loadu_ps(m1[0], p1[0] + co);
                _Pragma("GCC unroll 3") for (int q = 1; q < per; q++)
                {
                    b0 = _mm512_mask_loadu_ps(b0, m0[q], p0[q] + co);
                    b1 = _mm512_mask_loadu_ps(b1, m1[q], p1[q] + co);
                }
                _Pragma("GCC unroll 8") for (int r = 0; r < KERN_TILE; r++)
                {
                    __m512 av = _mm512_set1_ps(ar[r][ka]);
                    c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
                    c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
                }
            }
        }
    } else {
        /* one loop over k = (c, t), like kern_kernel's, so that the accumulators stay in
         * registers */
        const float *base = in;
        for (long k = 0, t = 0; k < K; k++) {
            __m512 b0 = _mm512_maskz_loadu_ps(src->msk[0][t], base + src->off[0][t]);
            __m512 b1 = _mm512_maskz_loadu_ps(src->msk[per][t], base + src->off[per][t]);
            for (int q = 1; q < per; q++) {
                b0 = _mm512_mask_loadu_ps(b0, src->msk[q][t], base + src->off[q][t]);
                b1 = _mm512_mask_loadu_ps(b1, src->msk[per + q][t], base + src->off[per + q][t]);
            }
            if (++t == T) {
                t = 0;
                base += cs;
            }
            _Pragma("GCC unroll 8") for (int r = 0; r < KERN_TILE; r++)
            {
                __m512 av = _mm512_set1_ps(ar[r][k]);
                c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
                c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
            }
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < KERN_TILE; r++)
    {
        _mm512_storeu_ps(tile + r * KERN_PANEL, c0[r]);
        _mm512_storeu_ps(tile + r * KERN_PANEL + 16, c1[r]);
    }
}

/* The direct kernel for panels of `per` (1 to 3) runs per 16-lane half (each a copy of
 * the body with per and the loop order constant). Taps outer for several runs a half
 * (their tables are the most loads) and in flat mode unless the channel stride is a
 * multiple of 256 floats: then the channels of a tap fall into the same few L1 sets, and
 * taps outer (all channels per tap) was slower than channels outer (measured: the CIFAR
 * decoder lost 8%, the encoders gained 10-15% where the stride is not). */
static KERN_AVX512 void kern_kernel_direct(const kern_job *g, const float *a, long lda, int mr,
                                           const kern_direct_src *src, int per, float *tile)
{
    long T = (long)g->na * g->nb;
    int tapout = g->rows < 0 && (g->cs & 255) != 0;
    if (per == 3)
        kern_kernel_direct_body(g->K, T, g->in, g->cs, a, lda, mr, src, 3, 1, tile);
    else if (per == 2)
        kern_kernel_direct_body(g->K, T, g->in, g->cs, a, lda, mr, src, 2, 1, tile);
    else if (tapout)
        kern_kernel_direct_body(g->K, T, g->in, g->cs, a, lda, mr, src, 1, 1, tile);
    else
        kern_kernel_direct_body(g->K, T, g->in, g->cs, a, lda, mr, src, 1, 0, tile);
}

/* Rows m0 .. m0 + mr - 1 of tile (bias, residual, activation) into the output. */
static KERN_AVX512 void kern_store(const kern_job *g, const kern_seg *seg, int ns, int m0, int mr,
                                   const float *tile)
{
    const __m512i lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i vstep = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(g->osx));
    const __m512i spread_lo = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512i spread_hi =
        _mm512_set_epi32(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
    /* the job's fields in registers before the stores: the vector stores may alias the job (their
     * types are may_alias), so GCC read each field again after every store, and such loads wait
     * for the stores when the low 12 bits of the addresses match (the AVX2 engine's stores gained
     * from this on a Zen 2; see kern_avx2_pack_flat in kernels_avx2.c) */
    const float *jbias = g->bias, *jadd = g->add;
    float *jout = g->out;
    const long jors = g->ors, jois = g->ois, jorow = g->orow;
    const int joy0 = g->oy0, josy = g->osy, jox0 = g->ox0, josx = g->osx;
    const nets_act jact = g->act;
    for (int r = 0; r < mr; r++) {
        long m = m0 + r;
        __m512 bias = _mm512_set1_ps(jbias[m]);
        float *orow = jout + m * jors;
        const float *arow = jadd ? jadd + m * jors : NULL;
        for (int q = 0; q < ns; q++) {
            const kern_seg *sg = &seg[q];
            long off =
                sg->img * jois + (long)(joy0 + sg->ty * josy) * jorow + jox0 + (long)sg->tx * josx;
            __mmask16 full = kern_mask(sg->len);
            /* an unmasked load (lanes from len on are never stored): a masked one was not
             * forwarded from the kernel's stores of the tile and waited for them */
            __m512 v = _mm512_add_ps(_mm512_loadu_ps(tile + r * KERN_PANEL + sg->c0), bias);
            if (josx == 1 && sg->len == 16) { /* unmasked: faster where the data is not cached */
                if (arow)
                    v = _mm512_add_ps(v, _mm512_loadu_ps(arow + off));
                _mm512_storeu_ps(orow + off, kern_act(v, jact));
            } else if (josx == 1) {
                if (arow)
                    v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(full, arow + off));
                _mm512_mask_storeu_ps(orow + off, full, kern_act(v, jact));
            } else if (josx == 2 && !arow) {
                /* every other pixel (a transposed convolution's phase): lanes spread to the
                 * even lanes of two vectors, stored under masks of those lanes only */
                v = kern_act(v, jact);
                unsigned lo = sg->len < 8 ? (unsigned)sg->len : 8u, hi = (unsigned)sg->len - lo;
                _mm512_mask_storeu_ps(orow + off, (__mmask16)(0x5555u & ((1u << 2 * lo) - 1u)),
                                      _mm512_permutexvar_ps(spread_lo, v));
                if (hi > 0)
                    _mm512_mask_storeu_ps(orow + off + 16,
                                          (__mmask16)(0x5555u & ((1u << 2 * hi) - 1u)),
                                          _mm512_permutexvar_ps(spread_hi, v));
            } else {
                if (arow)
                    v = _mm512_add_ps(v, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), full, vstep,
                                                                  arow + off, 4));
                _mm512_mask_i32scatter_ps(orow + off, full, vstep, kern_act(v, jact), 4);
            }
        }
    }
}

/* Prefetch the output (to be written) and the residual (to be read) of the runs seg for
 * all M rows, before the kernels of a panel run: the residual is the input of a block
 * two layers back and is no longer in the cache, and waiting for it in kern_store cost
 * more than the store's arithmetic. Only for outputs with contiguous runs (osx == 1). */
static KERN_AVX512 void kern_prefetch(const kern_job *g, const kern_seg *seg, int ns)
{
    if (g->osx != 1)
        return;
    for (int q = 0; q < ns; q++) {
        const kern_seg *sg = &seg[q];
        long off = sg->img * g->ois + (long)(g->oy0 + sg->ty * g->osy) * g->orow + g->ox0 + sg->tx;
        for (int m = 0; m < g->M; m++) {
            const char *o = (const char *)(g->out + m * g->ors + off);
            _mm_prefetch(o, _MM_HINT_T0);
            _mm_prefetch(o + 4 * (sg->len - 1), _MM_HINT_T0);
            if (g->add) {
                const char *a = (const char *)(g->add + m * g->ors + off);
                _mm_prefetch(a, _MM_HINT_T0);
                _mm_prefetch(a + 4 * (sg->len - 1), _MM_HINT_T0);
            }
        }
    }
}

/* Panels [b, e) (of grid rows in direct mode), on thread `worker`: packed panels go to
 * that thread's panel buffer. */
static void kern_run(const void *v, long b, long e, int worker)
{
    const kern_job *g = v;
    long N = g->n * g->ny * g->nx;
    float tile[KERN_TILE * KERN_PANEL + 16] __attribute__((aligned(64))); /* + 16: see kern_store */
    memset(tile + KERN_TILE * KERN_PANEL, 0, 16 * sizeof(float));
    kern_seg seg[KERN_PANEL];
    if (g->rows < 0) { /* flat mode: runs of 16 pixels, given as columns of one long row */
        kern_direct_src src;
        for (long p = b; p < e; p++) {
            long j0 = p * KERN_PANEL;
            int ncol = N - j0 < KERN_PANEL ? (int)(N - j0) : KERN_PANEL;
            int ns = ncol > 16 ? 2 : 1;
            seg[0] = (kern_seg){0, ncol < 16 ? ncol : 16, 0, (int)j0, 0};
            seg[1] = (kern_seg){16, ncol - 16, 0, (int)j0 + 16, 0};
            kern_flat_setup(g, j0, ncol, &src);
            kern_prefetch(g, seg, ns);
            for (int m0 = 0; m0 < g->M; m0 += KERN_TILE) {
                int mr = g->M - m0 < KERN_TILE ? g->M - m0 : KERN_TILE;
                kern_kernel_direct(g, g->a + (long)m0 * g->K, g->K, mr, &src, 1, tile);
                kern_store(g, seg, ns, m0, mr, tile);
            }
        }
        return;
    }
    if (g->rows > 0) {
        long NR = g->n * g->ny; /* grid rows */
        kern_direct_src src;
        for (long p = b; p < e; p++) {
            int ns = 0;
            if (g->rows == 1) { /* one grid row of 17 to 32 columns: two runs */
                seg[0] = (kern_seg){0, 16, (int)(p % g->ny), 0, p / g->ny};
                seg[1] = (kern_seg){16, g->nx - 16, (int)(p % g->ny), 16, p / g->ny};
                ns = 2;
            } else {
                int per = g->rows / 2; /* runs per 16-lane half, each 16 / per lanes */
                for (long row = p * g->rows; row < NR && ns < g->rows; row++, ns++)
                    seg[ns] = (kern_seg){ns / per * 16 + ns % per * (16 / per), g->nx,
                                         (int)(row % g->ny), 0, row / g->ny};
            }
            kern_direct_setup(g, seg, ns, &src);
            kern_prefetch(g, seg, ns);
            for (int m0 = 0; m0 < g->M; m0 += KERN_TILE) {
                int mr = g->M - m0 < KERN_TILE ? g->M - m0 : KERN_TILE;
                kern_kernel_direct(g, g->a + (long)m0 * g->K, g->K, mr, &src,
                                   g->rows > 2 ? g->rows / 2 : 1, tile);
                kern_store(g, seg, ns, m0, mr, tile);
            }
        }
        return;
    }
    float *bp = g->slots + (long)worker * g->K * KERN_PANEL;
    for (long p = b; p < e; p++) {
        long j0 = p * KERN_PANEL;
        int ncol = N - j0 < KERN_PANEL ? (int)(N - j0) : KERN_PANEL;
        int ns = kern_segments(g, j0, ncol, 16, seg);
        kern_pack(g, seg, ns, ncol, bp);
        for (int m0 = 0; m0 < g->M; m0 += KERN_TILE) {
            int mr = g->M - m0 < KERN_TILE ? g->M - m0 : KERN_TILE;
            kern_kernel(g->K, g->a + (long)m0 * g->K, g->K, mr, bp, tile);
            kern_store(g, seg, ns, m0, mr, tile);
        }
    }
}

/* Grid rows per panel in direct mode (0: packed panels): contiguous column taps, few
 * taps, and grid rows of 5 columns (6 rows a panel), 6 to 8 (4 rows), 9 to 16 (2 rows) or
 * 17 to 32 (1 row, as two runs). */
int kern_direct_rows(const kern_job *g)
{
    int contiguous = g->sx == 1 || (g->sx == 2 && g->half > 0);
    if (!contiguous || g->na * g->nb > KERN_DIRECT_TAPS || g->nx < 5 || g->nx > 32)
        return 0;
    return g->nx == 5 ? 6 : g->nx <= 8 ? 4 : g->nx <= 16 ? 2 : 1;
}

/* Run a job over the team, its panels the items (each thread packs into its own panel
 * buffer). */
void kern_go(team_t *t, kern_job *g)
{
    long N = g->n * g->ny * g->nx, P = (N + KERN_PANEL - 1) / KERN_PANEL;
    if (g->rw == 0)
        g->rw = g->W;
    g->rows = kern_direct_rows(g);
    if (g->flat && g->na * g->nb <= KERN_DIRECT_TAPS)
        g->rows = -1; /* flat mode, panels of 32 pixels */
    else if (g->rows > 0)
        P = (g->n * g->ny + g->rows - 1) / g->rows;
    team_for(t, P, 0, N * (g->K + g->M), kern_run, g);
}

/* Rows [b, e) of a deinterleave (see kern_deinterleave). */
typedef struct {
    const float *in;
    float *out;
    int W, half;
} kern_dil_job;

static KERN_AVX512 void kern_dil_run(const void *v, long b, long e, int worker)
{
    (void)worker;
    const kern_dil_job *j = v;
    const __m512i even =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    int W = j->W, h = j->half, ho = W / 2;
    for (long r = b; r < e; r++) {
        const float *src = j->in + r * W;
        float *dst = j->out + r * 2 * h;
        for (int x = 0; x < W; x += 32) {
            int len = W - x < 32 ? W - x : 32;
            __m512 lo = _mm512_maskz_loadu_ps(kern_mask(len < 16 ? len : 16), src + x);
            __m512 hi = _mm512_maskz_loadu_ps(len > 16 ? kern_mask(len - 16) : 0, src + x + 16);
            int ne = (len + 1) / 2, no = len / 2;
            _mm512_mask_storeu_ps(dst + x / 2, kern_mask(ne), _mm512_permutex2var_ps(lo, even, hi));
            _mm512_mask_storeu_ps(dst + h + x / 2, kern_mask(no),
                                  _mm512_permutex2var_ps(lo, odd, hi));
        }
        if (ho < h)
            dst[h + ho] = 0.0f; /* odd W: the odd half's unused last entry */
    }
}

/* Split each of the `rows` rows of W floats of in into its even columns followed by its
 * odd ones, rows of 2 * ((W + 1) / 2) floats in out: a stride-2 convolution's column taps
 * become contiguous, so that it runs in direct mode. */
void kern_deinterleave(team_t *t, const float *in, float *out, long rows, int W)
{
    kern_dil_job j = {in, out, W, (W + 1) / 2};
    team_for(t, rows, 0, rows * W, kern_dil_run, &j);
}

#else

int kern_direct_rows(const kern_job *g)
{
    (void)g;
    return 0;
}

void kern_deinterleave(team_t *t, const float *in, float *out, long rows, int W)
{
    (void)t, (void)in, (void)out, (void)rows, (void)W;
}

void kern_go(team_t *t, kern_job *g)
{
    (void)t;
    (void)g;
}

void kern_affine_act(float *x, const float *src, long len, float a, float b, nets_act act)
{
    (void)x, (void)src, (void)len, (void)a, (void)b, (void)act;
}

double kern_sum(const float *p, long len)
{
    (void)p, (void)len;
    return 0.0;
}

double kern_sqdev(const float *p, long len, float mean)
{
    (void)p, (void)len, (void)mean;
    return 0.0;
}

#endif