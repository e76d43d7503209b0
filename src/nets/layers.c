/* layers.c -- the layer kernels (conv2d, conv_transpose2d by output phases and dense: on CPUs with
 * AVX-512F in the engine below, which packs im2col panels and multiplies them with its own kernel on
 * the team's threads; elsewhere by im2col + cblas_sgemm), group norm, activations, crop, layout
 * changes, and the executor that runs a parsed layer list over a batch in a caller-provided
 * workspace. */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nets/nets_internal.h"
#include "numerics/team.h"

/* im2col works on chunks of whole images: enough images for about COL_COLS GEMM
 * columns, as long as the column matrix (and, for transposed convolutions, the GEMM
 * result) stays under COL_BUDGET floats (at least one image). */
#define NETS_COL_COLS 4096L
#define NETS_COL_BUDGET ((long)1 << 22)

typedef enum { ACT_NONE = 0, ACT_RELU, ACT_SWISH, ACT_SIGMOID } nets_act;

static long round16(long x) { return (x + 15) / 16 * 16; }

/* ---- elementwise ---- */

/* Swish and sigmoid need exp(-x) for every activation. glibc's expf is scalar, and GCC
 * does not vectorize a loop around it (nor, under the default -ftrapping-math, a loop with
 * clamps), so exp is computed four lanes at a time with GCC vector extensions: Cephes'
 * expf (range reduction by ln 2 in two parts, degree-5 polynomial, relative error about
 * 1e-7 on [-87, 88]; arguments are clamped to that range, where the activations have
 * long saturated). Plain C operators, no intrinsics: it compiles for any target. */
typedef float nets_v4f __attribute__((vector_size(16)));
typedef int32_t nets_v4i __attribute__((vector_size(16)));

static inline nets_v4f v4_select(nets_v4i mask, nets_v4f a, nets_v4f b) {
    return (nets_v4f)(((nets_v4i)a & mask) | ((nets_v4i)b & ~mask));
}

static inline nets_v4f v4_exp(nets_v4f x) {
    const nets_v4f lo = {-87.0f, -87.0f, -87.0f, -87.0f}, hi = {88.0f, 88.0f, 88.0f, 88.0f};
    x = v4_select(x < lo, lo, x);
    x = v4_select(x > hi, hi, x);
    nets_v4f fn = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    nets_v4f r = x - fn * 0.693359375f + fn * 2.12194440e-4f;
    nets_v4f z = r * r;
    nets_v4f y = (((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r + 4.1665795894e-2f) * r +
                   1.6666665459e-1f) * r + 5.0000001201e-1f) * z + r + 1.0f;
    nets_v4i e = (__builtin_convertvector(fn, nets_v4i) + 127) << 23; /* 2^n */
    return y * (nets_v4f)e;
}

static inline nets_v4f v4_act(nets_v4f v, nets_act act) {
    if (act == ACT_SWISH) return v / (1.0f + v4_exp(-v));
    return 1.0f / (1.0f + v4_exp(-v)); /* ACT_SIGMOID */
}

/* x[i] = act(x[i] + bias), in one pass. */
static void act_bias(float *x, long len, float bias, nets_act act) {
    if (act == ACT_NONE || act == ACT_RELU) {
        if (bias != 0.0f)
            for (long i = 0; i < len; i++) x[i] += bias;
        if (act == ACT_RELU)
            for (long i = 0; i < len; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
        return;
    }
    long i = 0;
    for (; i + 4 <= len; i += 4) {
        nets_v4f v;
        memcpy(&v, x + i, sizeof v);
        v = v4_act(v + bias, act);
        memcpy(x + i, &v, sizeof v);
    }
    if (i < len) {
        nets_v4f v = {0};
        memcpy(&v, x + i, sizeof(float) * (len - i));
        v = v4_act(v + bias, act);
        memcpy(x + i, &v, sizeof(float) * (len - i));
    }
}

static void act_apply(float *x, long len, nets_act act) { act_bias(x, len, 0.0f, act); }

/* ---- convolutions ---- */

static int conv_is_pointwise(const nets_layer *L) {
    return L->type == NETS_L_CONV2D && L->k == 1 && L->stride == 1;
}

static int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
static int ceil_div(int a, int b) { return -floor_div(-a, b); }

/* A transposed convolution with stride s is s*s ordinary convolutions, one per output
 * phase (py, px): the kept output pixel (oy, ox) of the full output row fy = oy + off
 * with fy = qy*s + py receives in[qy - a][qx - b] * W[py + a*s][px + b*s] for the taps
 * a < ka, b < kb of that phase. Each phase is one im2col + GEMM whose result is stored
 * once (no scatter-add); its weights are repacked at load by nets_layer_prepare. */
typedef struct {
    int ka, kb;      /* taps */
    int q0y, nqy;    /* first qy and how many (rows of this phase in the kept output) */
    int q0x, nqx;
} convt_phase;

static void convt_phase_of(const nets_layer *L, int py, int px, convt_phase *p) {
    int k = L->k, s = L->stride, off = L->pad_t;
    p->ka = py < k ? (k - py + s - 1) / s : 0;
    p->kb = px < k ? (k - px + s - 1) / s : 0;
    p->q0y = ceil_div(off - py, s);
    p->nqy = floor_div(off + L->out.h - 1 - py, s) - p->q0y + 1;
    if (p->nqy < 0) p->nqy = 0;
    p->q0x = ceil_div(L->pad_l - px, s);
    p->nqx = floor_div(L->pad_l + L->out.w - 1 - px, s) - p->q0x + 1;
    if (p->nqx < 0) p->nqx = 0;
}

vbm_status nets_layer_prepare(nets_layer *L, vbm_error *err) {
    if (L->type != NETS_L_CONVT2D) return VBM_OK;
    int k = L->k, s = L->stride, cin = L->cin, cout = L->cout;
    L->wp = malloc(sizeof(float) * (size_t)cout * cin * k * k);
    if (!L->wp) return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    float *w = L->wp;
    for (int py = 0; py < s; py++)
        for (int px = 0; px < s; px++) {
            convt_phase p;
            convt_phase_of(L, py, px, &p);
            for (int co = 0; co < cout; co++)
                for (int ci = 0; ci < cin; ci++)
                    for (int a = 0; a < p.ka; a++)
                        for (int b = 0; b < p.kb; b++)
                            *w++ = L->w[(((long)ci * cout + co) * k + py + a * s) * k + px + b * s];
        }
    return VBM_OK;
}

/* Rows of the column matrix, columns per image, images per chunk, and the floats
 * of column matrix plus (transposed convolutions) GEMM result per chunk. */
static void col_plan(const nets_layer *L, long n, long *rows, long *cols, long *chunk, long *need) {
    long extra = 0;
    if (L->type == NETS_L_CONV2D) {
        *rows = (long)L->cin * L->k * L->k;
        *cols = (long)L->out.h * L->out.w;
    } else {
        int t = (L->k + L->stride - 1) / L->stride;
        *rows = (long)L->cin * t * t;
        *cols = (long)((L->out.h + L->stride - 1) / L->stride + 1) * ((L->out.w + L->stride - 1) / L->stride + 1);
        extra = L->cout;
    }
    long b = (NETS_COL_COLS + *cols - 1) / *cols;
    long bmax = NETS_COL_BUDGET / ((*rows + extra) * *cols);
    if (b > bmax) b = bmax;
    if (b < 1) b = 1;
    if (b > n) b = n;
    *chunk = b;
    *need = (*rows + extra) * *cols * b;
}

static long eng_need(const nets_layer *L, long n);

static size_t col_need(const nets_seq *s, long n) {
    size_t need = 0;
    for (int i = 0; i < s->n; i++) {
        const nets_layer *L = &s->layers[i];
        size_t x = 0;
        if ((L->type == NETS_L_CONV2D && !conv_is_pointwise(L)) || L->type == NETS_L_CONVT2D) {
            long rows, cols, chunk, nd;
            col_plan(L, n, &rows, &cols, &chunk, &nd);
            x = (size_t)nd;
        } else if (L->type == NETS_L_RESIDUAL) {
            x = col_need(L->body, n);
        }
        if ((size_t)eng_need(L, n) > x) x = (size_t)eng_need(L, n);
        if (x > need) need = x;
    }
    return need;
}

/* ---- a team of threads ----
 *
 * In the engine the team (numerics/team.h) runs everything, the GEMMs included. Otherwise
 * the GEMMs run on the BLAS library's threads, and everything else (im2col, bias and
 * activations, group norm, layout changes) is memory-bound work that would leave all but
 * one core idle. Each nets_seq_run call starts a team of helper threads that splits these
 * loops with it, and joins them before returning. No state is shared between calls. */

/* fn over [0, items) on the team; inline when the work (about `work` floats touched) is
 * too small to pay for handing it to the helpers. */
static void par_for(team_t *t, long items, long work, team_fn fn, const void *ctx) {
    team_for(t, items, 0, work, fn, ctx);
}

/* ---- elementwise and layout, as ranges ---- */

#define NETS_EW_BLOCK 4096L /* elements per work item of elementwise loops */

typedef struct {
    float *y;
    const float *x;
    long len;
    nets_act act;
} ew_job;

static void ew_run(const void *c, long b, long e, int worker) {
    (void)worker;
    const ew_job *j = c;
    long lo = b * NETS_EW_BLOCK, hi = e * NETS_EW_BLOCK < j->len ? e * NETS_EW_BLOCK : j->len;
    if (j->x && j->x != j->y)
        for (long i = lo; i < hi; i++) j->y[i] += j->x[i];
    else if (j->x)
        for (long i = lo; i < hi; i++) j->y[i] *= 2.0f;
    act_apply(j->y + lo, hi - lo, j->act);
}

/* y = act(y + x) (x may be NULL; x == y doubles). */
static void ew(team_t *t, float *y, const float *x, long len, nets_act act) {
    if (!x && act == ACT_NONE) return;
    ew_job j = {y, x, len, act};
    par_for(t, (len + NETS_EW_BLOCK - 1) / NETS_EW_BLOCK, len, ew_run, &j);
}

/* y[r][j] = act(y[r][j] + bias[r]) for rows r of len elements, row stride ld. */
typedef struct {
    float *y;
    long len, ld;
    const float *bias;
    nets_act act;
} bias_job;

static void bias_run(const void *c, long b, long e, int worker) {
    (void)worker;
    const bias_job *j = c;
    for (long r = b; r < e; r++) act_bias(j->y + r * j->ld, j->len, j->bias[r], j->act);
}

static void bias_rows(team_t *t, float *y, long rows, long len, long ld, const float *bias, nets_act act) {
    bias_job j = {y, len, ld, bias, act};
    par_for(t, rows, rows * len, bias_run, &j);
}

/* [n][c][hw] <-> [c][n][hw]: items are channels. */
typedef struct {
    const float *in;
    float *out;
    long n, c, hw;
} layout_job;

static void to_cnhw_run(const void *v, long b, long e, int worker) {
    (void)worker;
    const layout_job *j = v;
    for (long k = b; k < e; k++)
        for (long i = 0; i < j->n; i++)
            memcpy(j->out + (k * j->n + i) * j->hw, j->in + (i * j->c + k) * j->hw, sizeof(float) * j->hw);
}

static void from_cnhw_run(const void *v, long b, long e, int worker) {
    (void)worker;
    const layout_job *j = v;
    for (long k = b; k < e; k++)
        for (long i = 0; i < j->n; i++)
            memcpy(j->out + (i * j->c + k) * j->hw, j->in + (k * j->n + i) * j->hw, sizeof(float) * j->hw);
}

static void to_cnhw(team_t *t, const float *in, float *out, long n, long c, long hw) {
    layout_job j = {in, out, n, c, hw};
    par_for(t, c, n * c * hw, to_cnhw_run, &j);
}

static void from_cnhw(team_t *t, const float *in, float *out, long n, long c, long hw) {
    layout_job j = {in, out, n, c, hw};
    par_for(t, c, n * c * hw, from_cnhw_run, &j);
}

/* ---- the AVX-512 engine for convolutions and dense layers ----
 *
 * On x86-64 CPUs with AVX-512F every GEMM-shaped layer (conv2d, each output phase of a
 * conv_transpose2d, dense) is computed as
 *     out[m][dest(j)] = act(bias[m] + sum_k A[m][k] B[k][j] (+ add[m][dest(j)]))
 * with A the weights (M x K, row-major) and B the im2col matrix, which is never stored
 * whole: a thread packs 32 columns of it at a time (a panel, K x 32 floats that stay in
 * L1/L2) straight from the input with masked vector loads, runs all of A over the panel
 * 8 rows at a time with a register-blocked kernel, and stores the results with bias,
 * residual and activation applied straight into the output. Nothing runs on the BLAS
 * library's threads (whose spinning between calls would compete with the team): the team
 * splits the panels. Elsewhere (other CPUs, or VBMEM_NETS_NO_AVX512 set to anything but
 * "" or "0") the im2col + cblas_sgemm kernels below run instead. */

#define NETS_PANEL 32 /* columns of a packed panel */
#define NETS_TILE 8   /* rows of A per kernel call */

/* B row k = (c, ta, tb) for c < nc, ta < na, tb < nb (in that order); column j = (img,
 * ty, tx) of an n x ny x nx grid; B[k][j] = in[c*cs + img*is + y*W + x] with
 * y = ty*sy + dy0 + ta*day and x = tx*sx + dx0 + tb*dbx, 0 outside the H x W image.
 * Column j of row m of the result goes to out[m*ors + img*ois + (oy0 + ty*osy)*orow +
 * ox0 + tx*osx]. */
typedef struct {
    const float *a; /* A, M x K, row stride K */
    int M;
    long K;
    const float *in;
    long cs, is;
    int H, W;
    int nc, na, nb;
    int sy, sx, dy0, dx0, day, dbx;
    long n;
    int ny, nx;
    float *out;
    const float *add;  /* NULL, or a tensor laid out like out, added before act */
    const float *bias; /* M */
    long ors, ois, orow;
    int oy0, ox0, osy, osx;
    nets_act act;
    float *slots; /* K * NETS_PANEL floats per thread */
    int rows; /* direct mode (see eng_direct_rows): grid rows per panel; 0: packed panels; -1: flat mode */
    /* Direct mode only: the input's row stride (W when 0) and, for a stride-2 convolution
     * whose input was deinterleaved (see eng_deinterleave), the width of the even-column
     * half of each row (0 otherwise). */
    int rw, half;
    /* Whether flat mode may run (see eng_flat_setup): a convolution with stride 1 whose
     * output grid is its input grid (oy0 = ox0 = 0, out laid out like in). */
    int flat;
} eng_job;

/* A run of at most 16 columns of a panel with the same image and row: panel columns
 * [c0, c0 + len) are grid columns (img, ty, tx .. tx + len - 1). */
typedef struct {
    int c0, len, ty, tx;
    long img;
} eng_seg;

static pthread_once_t eng_once = PTHREAD_ONCE_INIT;
static int eng_flag;

static void eng_probe(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    const char *off = getenv("VBMEM_NETS_NO_AVX512");
    __builtin_cpu_init();
    eng_flag = __builtin_cpu_supports("avx512f") && !(off && *off && strcmp(off, "0") != 0);
#endif
}

/* Whether the engine runs on this CPU (probed once). */
static int eng_available(void) {
    pthread_once(&eng_once, eng_probe);
    return eng_flag;
}

/* Split the panel of ncol columns starting at grid column j0 into runs; returns how many. */
static int eng_segments(const eng_job *g, long j0, int ncol, eng_seg *seg) {
    long per = (long)g->ny * g->nx, img = j0 / per, r = j0 % per;
    int ty = (int)(r / g->nx), tx = (int)(r % g->nx), c = 0, ns = 0;
    while (c < ncol) {
        int len = g->nx - tx;
        if (len > 16) len = 16;
        if (len > ncol - c) len = ncol - c;
        seg[ns++] = (eng_seg){c, len, ty, tx, img};
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

#define NETS_AVX512 __attribute__((target("avx512f")))

static NETS_AVX512 inline __mmask16 eng_mask(int len) { return (__mmask16)((1u << len) - 1u); }

/* exp on 16 lanes: Cephes' expf as v4_exp above, the power of two by scalef. */
static NETS_AVX512 inline __m512 eng_exp(__m512 x) {
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

static NETS_AVX512 inline __m512 eng_act(__m512 v, nets_act act) {
    const __m512 one = _mm512_set1_ps(1.0f);
    switch (act) {
    case ACT_RELU:
        return _mm512_max_ps(v, _mm512_setzero_ps());
    case ACT_SWISH:
        return _mm512_div_ps(v, _mm512_add_ps(one, eng_exp(_mm512_sub_ps(_mm512_setzero_ps(), v))));
    case ACT_SIGMOID:
        return _mm512_div_ps(one, _mm512_add_ps(one, eng_exp(_mm512_sub_ps(_mm512_setzero_ps(), v))));
    default:
        return v;
    }
}

/* x[i] = act(x[i] * a + b) for len floats, 16 lanes at a time. */
static NETS_AVX512 void eng_affine_act(float *x, const float *src, long len, float a, float b, nets_act act) {
    const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
    for (long i = 0; i < len; i += 16) {
        __mmask16 m = eng_mask(len - i < 16 ? (int)(len - i) : 16);
        __m512 v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, src + i), va, vb);
        _mm512_mask_storeu_ps(x + i, m, eng_act(v, act));
    }
}

/* Sum of len floats (float lanes, double result). */
static NETS_AVX512 double eng_sum(const float *p, long len) {
    __m512 acc = _mm512_setzero_ps();
    for (long i = 0; i < len; i += 16)
        acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(eng_mask(len - i < 16 ? (int)(len - i) : 16), p + i));
    return _mm512_reduce_add_ps(acc);
}

/* Sum of (p[i] - mean)^2 over len floats. */
static NETS_AVX512 double eng_sqdev(const float *p, long len, float mean) {
    __m512 acc = _mm512_setzero_ps(), vm = _mm512_set1_ps(mean);
    for (long i = 0; i < len; i += 16) {
        __mmask16 m = eng_mask(len - i < 16 ? (int)(len - i) : 16);
        __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, p + i), vm);
        acc = _mm512_fmadd_ps(d, d, acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* Fill the panel bp (K rows of NETS_PANEL floats) for the runs seg; columns from ncol on
 * are zeroed. With sx == 1 each (row, run) is one masked load (the mask drops the pixels
 * left or right of the image; masked-off lanes are never read) and one store; the masks
 * depend only on the run and the column tap, so they are worked out once per panel. */
static NETS_AVX512 void eng_pack(const eng_job *g, const eng_seg *seg, int ns, int ncol, float *bp) {
    const __m512 zero = _mm512_setzero_ps();
    if (g->sx == 1 && g->nb <= NETS_MAX_KERNEL) {
        __mmask16 xm[NETS_PANEL][NETS_MAX_KERNEL];
        int xo[NETS_PANEL][NETS_MAX_KERNEL];
        for (int q = 0; q < ns; q++)
            for (int tb = 0; tb < g->nb; tb++) {
                int x0 = seg[q].tx + g->dx0 + tb * g->dbx;
                int lo = x0 < 0 ? -x0 : 0, hi = g->W - x0 < seg[q].len ? g->W - x0 : seg[q].len;
                xm[q][tb] = hi > lo ? (__mmask16)(eng_mask(hi) & ~eng_mask(lo)) : 0;
                xo[q][tb] = hi > lo ? x0 : 0;
            }
        for (int c = 0; c < g->nc; c++) {
            const float *base = g->in + c * g->cs;
            for (int ta = 0; ta < g->na; ta++) {
                int dy = g->dy0 + ta * g->day;
                float *rows = bp + (long)(c * g->na + ta) * g->nb * NETS_PANEL;
                for (int q = 0; q < ns; q++) {
                    const eng_seg *sg = &seg[q];
                    int y = sg->ty * g->sy + dy;
                    float *d = rows + sg->c0;
                    if ((unsigned)y >= (unsigned)g->H) {
                        for (int tb = 0; tb < g->nb; tb++) _mm512_mask_storeu_ps(d + tb * NETS_PANEL, eng_mask(sg->len), zero);
                        continue;
                    }
                    const float *src = base + sg->img * g->is + (long)y * g->W;
                    if (sg->len == 16) {
                        for (int tb = 0; tb < g->nb; tb++)
                            _mm512_storeu_ps(d + tb * NETS_PANEL, _mm512_maskz_loadu_ps(xm[q][tb], src + xo[q][tb]));
                    } else {
                        for (int tb = 0; tb < g->nb; tb++)
                            _mm512_mask_storeu_ps(d + tb * NETS_PANEL, eng_mask(sg->len),
                                                  _mm512_maskz_loadu_ps(xm[q][tb], src + xo[q][tb]));
                    }
                }
            }
        }
    } else if (g->day == 1 && g->dbx == 1 && g->dy0 >= 0 && g->dx0 >= 0 &&
               (long)(g->ny - 1) * g->sy + g->dy0 + g->na - 1 < g->H &&
               (long)(g->nx - 1) * g->sx + g->dx0 + g->nb - 1 < g->W) {
        /* every tap inside the image (a 'valid' convolution, a dense layer): each panel
         * column has one base offset, and each B row is two gathers of base + tap offset,
         * however many runs (images, rows) the panel spans */
        int base[NETS_PANEL] __attribute__((aligned(64)));
        for (int q = 0; q < ns; q++)
            for (int l = 0; l < seg[q].len; l++)
                base[seg[q].c0 + l] = (int)(seg[q].img * g->is + (long)seg[q].ty * g->sy * g->W +
                                            (long)(seg[q].tx + l) * g->sx);
        for (int c = ncol; c < NETS_PANEL; c++) base[c] = 0;
        const __m512i b0 = _mm512_load_si512(base), b1 = _mm512_load_si512(base + 16);
        const __mmask16 m0 = eng_mask(ncol < 16 ? ncol : 16), m1 = ncol > 16 ? eng_mask(ncol - 16) : 0;
        float *row = bp;
        for (int c = 0; c < g->nc; c++) {
            const float *src = g->in + c * g->cs;
            for (int ta = 0; ta < g->na; ta++)
                for (int tb = 0; tb < g->nb; tb++, row += NETS_PANEL) {
                    __m512i off = _mm512_set1_epi32((g->dy0 + ta) * g->W + g->dx0 + tb);
                    _mm512_storeu_ps(row, _mm512_mask_i32gather_ps(zero, m0, _mm512_add_epi32(b0, off), src, 4));
                    _mm512_storeu_ps(row + 16,
                                     _mm512_mask_i32gather_ps(zero, m1, _mm512_add_epi32(b1, off), src, 4));
                }
        }
        return; /* columns from ncol on are zero already */
    } else {
        const __m512i lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
        const __m512i vstep = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(g->sx)), vw = _mm512_set1_epi32(g->W);
        float *row = bp;
        for (int c = 0; c < g->nc; c++) {
            const float *base = g->in + c * g->cs;
            for (int ta = 0; ta < g->na; ta++) {
                int dy = g->dy0 + ta * g->day;
                for (int tb = 0; tb < g->nb; tb++, row += NETS_PANEL) {
                    int dx = g->dx0 + tb * g->dbx;
                    for (int q = 0; q < ns; q++) {
                        const eng_seg *sg = &seg[q];
                        __mmask16 full = eng_mask(sg->len);
                        int y = sg->ty * g->sy + dy;
                        if ((unsigned)y >= (unsigned)g->H) {
                            _mm512_mask_storeu_ps(row + sg->c0, full, zero);
                            continue;
                        }
                        const float *src = base + sg->img * g->is + (long)y * g->W;
                        __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(sg->tx * g->sx + dx), vstep);
                        __mmask16 ok = full & _mm512_cmpge_epi32_mask(idx, _mm512_setzero_si512()) &
                                       _mm512_cmplt_epi32_mask(idx, vw);
                        _mm512_mask_storeu_ps(row + sg->c0, full, _mm512_mask_i32gather_ps(zero, ok, idx, src, 4));
                    }
                }
            }
        }
    }
    if (ncol < NETS_PANEL)
        for (long k = 0; k < g->K; k++) {
            float *row = bp + k * NETS_PANEL;
            if (ncol < 16) _mm512_mask_storeu_ps(row + ncol, eng_mask(16 - ncol), zero);
            int from = ncol > 16 ? ncol : 16;
            _mm512_mask_storeu_ps(row + from, eng_mask(NETS_PANEL - from), zero);
        }
}

/* tile[r][0..31] = sum_k a[r][k] bp[k][0..31] for r < NETS_TILE (rows from mr on repeat
 * row mr - 1 and are not meant to be used). */
static NETS_AVX512 void eng_kernel(long K, const float *a, long lda, int mr, const float *bp, float *tile) {
    __m512 c0[NETS_TILE], c1[NETS_TILE];
    const float *ar[NETS_TILE];
    for (int r = 0; r < NETS_TILE; r++) {
        c0[r] = _mm512_setzero_ps();
        c1[r] = _mm512_setzero_ps();
        ar[r] = a + (long)(r < mr ? r : mr - 1) * lda;
    }
    for (long k = 0; k < K; k++) {
        __m512 b0 = _mm512_loadu_ps(bp + k * NETS_PANEL), b1 = _mm512_loadu_ps(bp + k * NETS_PANEL + 16);
        for (int r = 0; r < NETS_TILE; r++) {
            __m512 av = _mm512_set1_ps(ar[r][k]);
            c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
            c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
        }
    }
    for (int r = 0; r < NETS_TILE; r++) {
        _mm512_storeu_ps(tile + r * NETS_PANEL, c0[r]);
        _mm512_storeu_ps(tile + r * NETS_PANEL + 16, c1[r]);
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
#define NETS_DIRECT_TAPS 16 /* most taps (na * nb) in direct mode */

/* Per panel of direct mode: for each of the 6 lane slots (grid rows) and tap t, the
 * offset of the slot's lane 0 from the channel's base and the mask of lanes to load
 * (0 for an unused slot or a row outside the image). */
typedef struct {
    long off[6][NETS_DIRECT_TAPS];
    __mmask16 msk[6][NETS_DIRECT_TAPS];
} eng_direct_src;

/* Fill src for the ns (at most 6) runs seg of a direct-mode panel, each within one
 * 16-lane half of the panel: with `per` runs a half (ns = 2 * per at most), slots 0 ..
 * per - 1 share half 0 and the others half 1. */
static void eng_direct_setup(const eng_job *g, const eng_seg *seg, int ns, eng_direct_src *src) {
    memset(src, 0, sizeof *src);
    for (int q = 0; q < ns; q++) {
        int sh = seg[q].c0 % 16; /* first lane of the run in its vector */
        for (int ta = 0; ta < g->na; ta++) {
            int y = seg[q].ty * g->sy + g->dy0 + ta * g->day;
            if ((unsigned)y >= (unsigned)g->H) continue;
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
                if (hi <= lo) continue;
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
static void eng_flat_setup(const eng_job *g, long j0, int ncol, eng_direct_src *src) {
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
                if (++y == g->H) y = 0;
            }
        }
        unsigned xm[NETS_DIRECT_TAPS];
        for (int tb = 0; tb < g->nb; tb++) {
            int dx = g->dx0 + tb * g->dbx;
            xm[tb] = 0;
            for (int l = 0; l < len; l++)
                if ((unsigned)(lx[l] + dx) < (unsigned)g->W) xm[tb] |= 1u << l;
        }
        for (int ta = 0; ta < g->na; ta++) {
            int dy = g->dy0 + ta * g->day;
            unsigned ym = 0;
            for (int l = 0; l < len; l++)
                if ((unsigned)(ly[l] + dy) < (unsigned)g->H) ym |= 1u << l;
            for (int tb = 0; tb < g->nb; tb++) {
                int t = ta * g->nb + tb;
                src->msk[h][t] = (__mmask16)(ym & xm[tb]);
                src->off[h][t] = j + (long)dy * g->W + g->dx0 + tb * g->dbx;
            }
        }
    }
}

/* tile[r][0..31] = sum_k a[r][k] B[k][0..31] for r < NETS_TILE (rows from mr on repeat row
 * mr - 1), B read straight from the input as set up in src: each 16-lane half of a B row
 * is `per` (1 to 3) merged masked loads, one per lane slot of the half. B rows k = (c, t)
 * run channels outer (tapout 0) or taps outer (tapout 1; see eng_kernel_direct).
 * The row loops are unrolled by pragma: unrolled later, GCC stored all 16 accumulators to
 * the stack on every iteration (the kernel ran at half speed). */
static NETS_AVX512 inline __attribute__((always_inline)) void
eng_kernel_direct_body(long K, long T, const float *in, long cs, const float *a, long lda, int mr,
                       const eng_direct_src *src, int per, int tapout, float *tile) {
    __m512 c0[NETS_TILE], c1[NETS_TILE];
    const float *ar[NETS_TILE];
    _Pragma("GCC unroll 8") for (int r = 0; r < NETS_TILE; r++) {
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
            _Pragma("GCC unroll 3") for (int q = 0; q < per; q++) {
                m0[q] = src->msk[q][t];
                m1[q] = src->msk[per + q][t];
                p0[q] = in + src->off[q][t];
                p1[q] = in + src->off[per + q][t];
            }
            for (long c = 0, ka = t; c < C; c++, ka += T) {
                long co = c * cs;
                __m512 b0 = _mm512_maskz_loadu_ps(m0[0], p0[0] + co);
                __m512 b1 = _mm512_maskz_loadu_ps(m1[0], p1[0] + co);
                _Pragma("GCC unroll 3") for (int q = 1; q < per; q++) {
                    b0 = _mm512_mask_loadu_ps(b0, m0[q], p0[q] + co);
                    b1 = _mm512_mask_loadu_ps(b1, m1[q], p1[q] + co);
                }
                _Pragma("GCC unroll 8") for (int r = 0; r < NETS_TILE; r++) {
                    __m512 av = _mm512_set1_ps(ar[r][ka]);
                    c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
                    c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
                }
            }
        }
    } else {
        /* one loop over k = (c, t), like eng_kernel's, so that the accumulators stay in
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
            _Pragma("GCC unroll 8") for (int r = 0; r < NETS_TILE; r++) {
                __m512 av = _mm512_set1_ps(ar[r][k]);
                c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
                c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
            }
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < NETS_TILE; r++) {
        _mm512_storeu_ps(tile + r * NETS_PANEL, c0[r]);
        _mm512_storeu_ps(tile + r * NETS_PANEL + 16, c1[r]);
    }
}

/* The direct kernel for panels of `per` (1 to 3) runs per 16-lane half (each a copy of
 * the body with per and the loop order constant). Taps outer for several runs a half
 * (their tables are the most loads) and in flat mode unless the channel stride is a
 * multiple of 256 floats: then the channels of a tap fall into the same few L1 sets, and
 * taps outer (all channels per tap) was slower than channels outer (measured: the CIFAR
 * decoder lost 8%, the encoders gained 10-15% where the stride is not). */
static NETS_AVX512 void eng_kernel_direct(const eng_job *g, const float *a, long lda, int mr,
                                          const eng_direct_src *src, int per, float *tile) {
    long T = (long)g->na * g->nb;
    int tapout = g->rows < 0 && (g->cs & 255) != 0;
    if (per == 3)
        eng_kernel_direct_body(g->K, T, g->in, g->cs, a, lda, mr, src, 3, 1, tile);
    else if (per == 2)
        eng_kernel_direct_body(g->K, T, g->in, g->cs, a, lda, mr, src, 2, 1, tile);
    else if (tapout)
        eng_kernel_direct_body(g->K, T, g->in, g->cs, a, lda, mr, src, 1, 1, tile);
    else
        eng_kernel_direct_body(g->K, T, g->in, g->cs, a, lda, mr, src, 1, 0, tile);
}

/* Rows m0 .. m0 + mr - 1 of tile (bias, residual, activation) into the output. */
static NETS_AVX512 void eng_store(const eng_job *g, const eng_seg *seg, int ns, int m0, int mr, const float *tile) {
    const __m512i lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i vstep = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(g->osx));
    const __m512i spread_lo = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512i spread_hi = _mm512_set_epi32(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
    for (int r = 0; r < mr; r++) {
        long m = m0 + r;
        __m512 bias = _mm512_set1_ps(g->bias[m]);
        float *orow = g->out + m * g->ors;
        const float *arow = g->add ? g->add + m * g->ors : NULL;
        for (int q = 0; q < ns; q++) {
            const eng_seg *sg = &seg[q];
            long off = sg->img * g->ois + (long)(g->oy0 + sg->ty * g->osy) * g->orow + g->ox0 + (long)sg->tx * g->osx;
            __mmask16 full = eng_mask(sg->len);
            /* an unmasked load (lanes from len on are never stored): a masked one was not
             * forwarded from the kernel's stores of the tile and waited for them */
            __m512 v = _mm512_add_ps(_mm512_loadu_ps(tile + r * NETS_PANEL + sg->c0), bias);
            if (g->osx == 1 && sg->len == 16) { /* unmasked: faster where the data is not cached */
                if (arow) v = _mm512_add_ps(v, _mm512_loadu_ps(arow + off));
                _mm512_storeu_ps(orow + off, eng_act(v, g->act));
            } else if (g->osx == 1) {
                if (arow) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(full, arow + off));
                _mm512_mask_storeu_ps(orow + off, full, eng_act(v, g->act));
            } else if (g->osx == 2 && !arow) {
                /* every other pixel (a transposed convolution's phase): lanes spread to the
                 * even lanes of two vectors, stored under masks of those lanes only */
                v = eng_act(v, g->act);
                unsigned lo = sg->len < 8 ? (unsigned)sg->len : 8u, hi = (unsigned)sg->len - lo;
                _mm512_mask_storeu_ps(orow + off, (__mmask16)(0x5555u & ((1u << 2 * lo) - 1u)),
                                      _mm512_permutexvar_ps(spread_lo, v));
                if (hi > 0)
                    _mm512_mask_storeu_ps(orow + off + 16, (__mmask16)(0x5555u & ((1u << 2 * hi) - 1u)),
                                          _mm512_permutexvar_ps(spread_hi, v));
            } else {
                if (arow) v = _mm512_add_ps(v, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), full, vstep, arow + off, 4));
                _mm512_mask_i32scatter_ps(orow + off, full, vstep, eng_act(v, g->act), 4);
            }
        }
    }
}

/* Prefetch the output (to be written) and the residual (to be read) of the runs seg for
 * all M rows, before the kernels of a panel run: the residual is the input of a block
 * two layers back and is no longer in the cache, and waiting for it in eng_store cost
 * more than the store's arithmetic. Only for outputs with contiguous runs (osx == 1). */
static NETS_AVX512 void eng_prefetch(const eng_job *g, const eng_seg *seg, int ns) {
    if (g->osx != 1) return;
    for (int q = 0; q < ns; q++) {
        const eng_seg *sg = &seg[q];
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
static void eng_run(const void *v, long b, long e, int worker) {
    const eng_job *g = v;
    long N = g->n * g->ny * g->nx;
    float tile[NETS_TILE * NETS_PANEL + 16] __attribute__((aligned(64))); /* + 16: see eng_store */
    memset(tile + NETS_TILE * NETS_PANEL, 0, 16 * sizeof(float));
    eng_seg seg[NETS_PANEL];
    if (g->rows < 0) { /* flat mode: runs of 16 pixels, given as columns of one long row */
        eng_direct_src src;
        for (long p = b; p < e; p++) {
            long j0 = p * NETS_PANEL;
            int ncol = N - j0 < NETS_PANEL ? (int)(N - j0) : NETS_PANEL;
            int ns = ncol > 16 ? 2 : 1;
            seg[0] = (eng_seg){0, ncol < 16 ? ncol : 16, 0, (int)j0, 0};
            seg[1] = (eng_seg){16, ncol - 16, 0, (int)j0 + 16, 0};
            eng_flat_setup(g, j0, ncol, &src);
            eng_prefetch(g, seg, ns);
            for (int m0 = 0; m0 < g->M; m0 += NETS_TILE) {
                int mr = g->M - m0 < NETS_TILE ? g->M - m0 : NETS_TILE;
                eng_kernel_direct(g, g->a + (long)m0 * g->K, g->K, mr, &src, 1, tile);
                eng_store(g, seg, ns, m0, mr, tile);
            }
        }
        return;
    }
    if (g->rows > 0) {
        long NR = g->n * g->ny; /* grid rows */
        eng_direct_src src;
        for (long p = b; p < e; p++) {
            int ns = 0;
            if (g->rows == 1) { /* one grid row of 17 to 32 columns: two runs */
                seg[0] = (eng_seg){0, 16, (int)(p % g->ny), 0, p / g->ny};
                seg[1] = (eng_seg){16, g->nx - 16, (int)(p % g->ny), 16, p / g->ny};
                ns = 2;
            } else {
                int per = g->rows / 2; /* runs per 16-lane half, each 16 / per lanes */
                for (long row = p * g->rows; row < NR && ns < g->rows; row++, ns++)
                    seg[ns] = (eng_seg){ns / per * 16 + ns % per * (16 / per), g->nx, (int)(row % g->ny), 0,
                                        row / g->ny};
            }
            eng_direct_setup(g, seg, ns, &src);
            eng_prefetch(g, seg, ns);
            for (int m0 = 0; m0 < g->M; m0 += NETS_TILE) {
                int mr = g->M - m0 < NETS_TILE ? g->M - m0 : NETS_TILE;
                eng_kernel_direct(g, g->a + (long)m0 * g->K, g->K, mr, &src, g->rows > 2 ? g->rows / 2 : 1, tile);
                eng_store(g, seg, ns, m0, mr, tile);
            }
        }
        return;
    }
    float *bp = g->slots + (long)worker * g->K * NETS_PANEL;
    for (long p = b; p < e; p++) {
        long j0 = p * NETS_PANEL;
        int ncol = N - j0 < NETS_PANEL ? (int)(N - j0) : NETS_PANEL;
        int ns = eng_segments(g, j0, ncol, seg);
        eng_pack(g, seg, ns, ncol, bp);
        for (int m0 = 0; m0 < g->M; m0 += NETS_TILE) {
            int mr = g->M - m0 < NETS_TILE ? g->M - m0 : NETS_TILE;
            eng_kernel(g->K, g->a + (long)m0 * g->K, g->K, mr, bp, tile);
            eng_store(g, seg, ns, m0, mr, tile);
        }
    }
}

/* Grid rows per panel in direct mode (0: packed panels): contiguous column taps, few
 * taps, and grid rows of 5 columns (6 rows a panel), 6 to 8 (4 rows), 9 to 16 (2 rows) or
 * 17 to 32 (1 row, as two runs). */
static int eng_direct_rows(const eng_job *g) {
    int contiguous = g->sx == 1 || (g->sx == 2 && g->half > 0);
    if (!contiguous || g->na * g->nb > NETS_DIRECT_TAPS || g->nx < 5 || g->nx > 32) return 0;
    return g->nx == 5 ? 6 : g->nx <= 8 ? 4 : g->nx <= 16 ? 2 : 1;
}

/* Run a job over the team, its panels the items (each thread packs into its own panel
 * buffer). */
static void eng_go(team_t *t, eng_job *g) {
    long N = g->n * g->ny * g->nx, P = (N + NETS_PANEL - 1) / NETS_PANEL;
    if (g->rw == 0) g->rw = g->W;
    g->rows = eng_direct_rows(g);
    if (g->flat && g->na * g->nb <= NETS_DIRECT_TAPS)
        g->rows = -1; /* flat mode, panels of 32 pixels */
    else if (g->rows > 0)
        P = (g->n * g->ny + g->rows - 1) / g->rows;
    par_for(t, P, N * (g->K + g->M), eng_run, g);
}

/* Rows [b, e) of a deinterleave (see eng_deinterleave). */
typedef struct {
    const float *in;
    float *out;
    int W, half;
} dil_job;

static NETS_AVX512 void dil_run(const void *v, long b, long e, int worker) {
    (void)worker;
    const dil_job *j = v;
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    int W = j->W, h = j->half, ho = W / 2;
    for (long r = b; r < e; r++) {
        const float *src = j->in + r * W;
        float *dst = j->out + r * 2 * h;
        for (int x = 0; x < W; x += 32) {
            int len = W - x < 32 ? W - x : 32;
            __m512 lo = _mm512_maskz_loadu_ps(eng_mask(len < 16 ? len : 16), src + x);
            __m512 hi = _mm512_maskz_loadu_ps(len > 16 ? eng_mask(len - 16) : 0, src + x + 16);
            int ne = (len + 1) / 2, no = len / 2;
            _mm512_mask_storeu_ps(dst + x / 2, eng_mask(ne), _mm512_permutex2var_ps(lo, even, hi));
            _mm512_mask_storeu_ps(dst + h + x / 2, eng_mask(no), _mm512_permutex2var_ps(lo, odd, hi));
        }
        if (ho < h) dst[h + ho] = 0.0f; /* odd W: the odd half's unused last entry */
    }
}

/* Split each of the `rows` rows of W floats of in into its even columns followed by its
 * odd ones, rows of 2 * ((W + 1) / 2) floats in out: a stride-2 convolution's column taps
 * become contiguous, so that it runs in direct mode. */
static void eng_deinterleave(team_t *t, const float *in, float *out, long rows, int W) {
    dil_job j = {in, out, W, (W + 1) / 2};
    par_for(t, rows, rows * W, dil_run, &j);
}

#else

static int eng_direct_rows(const eng_job *g) {
    (void)g;
    return 0;
}

static void eng_deinterleave(team_t *t, const float *in, float *out, long rows, int W) {
    (void)t, (void)in, (void)out, (void)rows, (void)W;
}

static void eng_go(team_t *t, eng_job *g) {
    (void)t;
    (void)g;
}

static void eng_affine_act(float *x, const float *src, long len, float a, float b, nets_act act) {
    (void)x, (void)src, (void)len, (void)a, (void)b, (void)act;
}

static double eng_sum(const float *p, long len) {
    (void)p, (void)len;
    return 0.0;
}

static double eng_sqdev(const float *p, long len, float mean) {
    (void)p, (void)len, (void)mean;
    return 0.0;
}

#endif

/* Floats of panel buffers a layer needs in the engine (one per thread at most). */
static long eng_need(const nets_layer *L, long n) {
    long K = 0;
    if (L->type == NETS_L_CONV2D) {
        K = (long)L->cin * L->k * L->k;
        long dil = n * L->cin * L->in.h * (long)((L->in.w + 1) / 2 * 2);
        if (L->stride == 2 && dil > K * NETS_PANEL * NETS_MAX_THREADS) return dil;
    }
    if (L->type == NETS_L_CONVT2D) {
        long t = (L->k + L->stride - 1) / L->stride;
        K = L->cin * t * t;
    }
    if (L->type == NETS_L_DENSE) K = L->cin;
    return K * NETS_PANEL * NETS_MAX_THREADS;
}

/* conv2d in the engine; add (NULL or like out) is added before act. */
static void eng_conv2d(team_t *t, const nets_layer *L, long n, const float *in, float *out, const float *add,
                       float *slots, nets_act act) {
    eng_job g;
    memset(&g, 0, sizeof g);
    g.a = L->w;
    g.M = L->cout;
    g.K = (long)L->cin * L->k * L->k;
    g.in = in;
    g.H = L->in.h;
    g.W = L->in.w;
    g.is = (long)g.H * g.W;
    g.cs = n * g.is;
    g.nc = L->cin;
    g.na = g.nb = L->k;
    g.sy = g.sx = L->stride;
    g.dy0 = -L->pad_t;
    g.dx0 = -L->pad_l;
    g.day = g.dbx = 1;
    g.n = n;
    g.ny = L->out.h;
    g.nx = L->out.w;
    g.out = out;
    g.add = add;
    g.bias = L->b;
    g.ois = (long)L->out.h * L->out.w;
    g.ors = n * g.ois;
    g.orow = L->out.w;
    g.osy = g.osx = 1;
    g.act = act;
    g.slots = slots;
    g.flat = L->stride == 1 && L->out.h == L->in.h && L->out.w == L->in.w;
    if (g.sx == 2) {
        /* stride 2: in direct mode from a deinterleaved copy of the input (in the panel
         * buffers, which direct mode does not use), if its grid rows are 9 or more columns
         * wide. Narrower, several rows share a 16-lane half and the kernel's merged loads
         * and their tables made it slower than packing, whose gathers are two a B row for
         * a 'valid' convolution (measured: the CIFAR encoder 6% faster packed). */
        eng_job d = g;
        d.half = (g.W + 1) / 2;
        d.rw = 2 * d.half;
        d.is = (long)g.H * d.rw;
        d.cs = n * d.is;
        d.in = slots;
        int rows = eng_direct_rows(&d);
        if (rows > 0 && rows <= 2) {
            eng_deinterleave(t, in, slots, (long)L->cin * n * g.H, g.W);
            g = d;
        }
    }
    eng_go(t, &g);
}

/* conv_transpose2d in the engine, phase by phase (see convt_phase_of); L may describe a
 * cropped output (out and pad_t/pad_l moved by the crop). */
static void eng_convt(team_t *t, const nets_layer *L, long n, const float *in, float *out, float *slots,
                      nets_act act) {
    int s = L->stride;
    const float *wp = L->wp;
    for (int py = 0; py < s; py++)
        for (int px = 0; px < s; px++) {
            convt_phase p;
            convt_phase_of(L, py, px, &p);
            long K = (long)L->cin * p.ka * p.kb;
            eng_job g;
            memset(&g, 0, sizeof g);
            g.a = wp;
            wp += L->cout * K;
            if (p.nqy == 0 || p.nqx == 0) continue;
            g.M = L->cout;
            g.K = K;
            g.in = in;
            g.H = L->in.h;
            g.W = L->in.w;
            g.is = (long)g.H * g.W;
            g.cs = n * g.is;
            g.nc = L->cin;
            g.na = p.ka;
            g.nb = p.kb;
            g.sy = g.sx = 1;
            g.dy0 = p.q0y;
            g.dx0 = p.q0x;
            g.day = g.dbx = -1;
            g.n = n;
            g.ny = p.nqy;
            g.nx = p.nqx;
            g.out = out;
            g.bias = L->b;
            g.ois = (long)L->out.h * L->out.w;
            g.ors = n * g.ois;
            g.orow = L->out.w;
            g.oy0 = p.q0y * s + py - L->pad_t;
            g.ox0 = p.q0x * s + px - L->pad_l;
            g.osy = g.osx = s;
            g.act = act;
            g.slots = slots;
            eng_go(t, &g);
        }
}

/* dense in the engine: out[i][m] = act(b[m] + sum_k w[m][k] in[i][k]); the batch is the
 * column grid (one image, one row of n columns, source stride cin). */
static void eng_dense(team_t *t, const nets_layer *L, long n, const float *in, float *out, float *slots,
                      nets_act act) {
    eng_job g;
    memset(&g, 0, sizeof g);
    g.a = L->w;
    g.M = L->cout;
    g.K = L->cin;
    g.in = in;
    g.H = 1;
    g.W = (int)(n * L->cin);
    g.nc = g.na = 1;
    g.nb = L->cin;
    g.sy = 1;
    g.sx = L->cin;
    g.dbx = 1;
    g.n = 1;
    g.ny = 1;
    g.nx = (int)n;
    g.out = out;
    g.bias = L->b;
    g.ors = 1;
    g.osx = L->cout;
    g.act = act;
    g.slots = slots;
    eng_go(t, &g);
}

/* ---- convolutions ---- */

/* dst[y][x] = src[y + dy][x + dx] for an H x W image, 0 where that is outside the
 * image: one copy of the whole shifted image, then the rows and columns that fell
 * outside (or wrapped around a row end) are zeroed. */
static void shift_copy(const float *src, float *dst, int H, int W, int dy, int dx) {
    long HW = (long)H * W, sh = (long)dy * W + dx;
    long lo = sh < 0 ? -sh : 0, hi = sh > 0 ? HW - sh : HW;
    if (lo >= hi) {
        memset(dst, 0, sizeof(float) * HW);
        return;
    }
    memset(dst, 0, sizeof(float) * lo);
    memcpy(dst + lo, src + lo + sh, sizeof(float) * (hi - lo));
    memset(dst + hi, 0, sizeof(float) * (HW - hi));
    if (dx != 0) {
        int c0 = dx < 0 ? 0 : W - dx, c1 = dx < 0 ? -dx : W; /* columns [c0, c1) are outside */
        if (c0 < 0) c0 = 0;
        if (c1 > W) c1 = W;
        for (int y = 0; y < H; y++)
            for (int x = c0; x < c1; x++) dst[(long)y * W + x] = 0.0f;
    }
}

typedef struct {
    const nets_layer *L;
    const float *in;
    long n, i0, bb;
    float *col;
    const convt_phase *p; /* im2col_phase */
} col_job;

/* col[(ci,ky,kx)][j][oy][ox] = in[ci][i0+j][oy*s+ky-pt][ox*s+kx-pl] (0 outside); items
 * are the rows (ci,ky,kx). */
static void im2col_run(const void *v, long rb, long re, int worker) {
    (void)worker;
    const col_job *jb = v;
    const nets_layer *L = jb->L;
    int H = L->in.h, W = L->in.w, Ho = L->out.h, Wo = L->out.w, k = L->k, s = L->stride;
    long HW = (long)H * W, HWo = (long)Ho * Wo, ld = jb->bb * HWo;
    for (long rr = rb; rr < re; rr++) {
        int ci = (int)(rr / (k * k)), ky = (int)(rr / k % k), kx = (int)(rr % k);
        float *row = jb->col + rr * ld;
        /* valid ox: 0 <= ox*s + kx - pl <= W-1 */
        int lo = L->pad_l - kx, ox0 = lo > 0 ? (lo + s - 1) / s : 0;
        int hi = W - 1 + L->pad_l - kx, ox1 = hi < 0 ? -1 : hi / s;
        if (ox1 > Wo - 1) ox1 = Wo - 1;
        if (s == 1 && H == Ho && W == Wo) {
            for (long j = 0; j < jb->bb; j++)
                shift_copy(jb->in + ((long)ci * jb->n + jb->i0 + j) * HW, row + j * HWo, H, W, ky - L->pad_t,
                           kx - L->pad_l);
            continue;
        }
        for (long j = 0; j < jb->bb; j++) {
            const float *src = jb->in + ((long)ci * jb->n + jb->i0 + j) * HW;
            float *dst = row + j * HWo;
            for (int oy = 0; oy < Ho; oy++) {
                int iy = oy * s + ky - L->pad_t;
                float *d = dst + (long)oy * Wo;
                if (iy < 0 || iy >= H || ox0 > ox1) {
                    memset(d, 0, sizeof(float) * Wo);
                    continue;
                }
                const float *sr = src + (long)iy * W + kx - L->pad_l;
                for (int ox = 0; ox < ox0; ox++) d[ox] = 0.0f;
                if (s == 1)
                    memcpy(d + ox0, sr + ox0, sizeof(float) * (ox1 - ox0 + 1));
                else
                    for (int ox = ox0; ox <= ox1; ox++) d[ox] = sr[(long)ox * s];
                for (int ox = ox1 + 1; ox < Wo; ox++) d[ox] = 0.0f;
            }
        }
    }
}

static void conv2d(team_t *t, const nets_layer *L, long n, const float *in, float *out, float *col,
                   nets_act act) {
    if (eng_available()) {
        eng_conv2d(t, L, n, in, out, NULL, col, act);
        return;
    }
    long HWo = (long)L->out.h * L->out.w, ldo = n * HWo;
    if (conv_is_pointwise(L)) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L->cout, (int)ldo, L->cin, 1.0f, L->w, L->cin, in,
                    (int)ldo, 0.0f, out, (int)ldo);
        bias_rows(t, out, L->cout, ldo, ldo, L->b, act);
        return;
    }
    long rows, cols, chunk, need;
    col_plan(L, n, &rows, &cols, &chunk, &need);
    for (long i0 = 0; i0 < n; i0 += chunk) {
        long bb = n - i0 < chunk ? n - i0 : chunk;
        col_job cj = {L, in, n, i0, bb, col, NULL};
        par_for(t, rows, rows * bb * HWo, im2col_run, &cj);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L->cout, (int)(bb * HWo), (int)rows, 1.0f, L->w,
                    (int)rows, col, (int)(bb * HWo), 0.0f, out + i0 * HWo, (int)ldo);
        /* bias and activation while the chunk is still in cache */
        bias_rows(t, out + i0 * HWo, L->cout, bb * HWo, ldo, L->b, act);
    }
}

/* Phase im2col: col[(ci,a,b)][j][ty][tx] = in[ci][i0+j][q0y+ty-a][q0x+tx-b] (0 outside);
 * items are the rows (ci,a,b). */
static void im2col_phase_run(const void *v, long rb, long re, int worker) {
    (void)worker;
    const col_job *jb = v;
    const nets_layer *L = jb->L;
    const convt_phase *p = jb->p;
    int H = L->in.h, W = L->in.w, nqy = p->nqy, nqx = p->nqx, tt = p->ka * p->kb;
    long HW = (long)H * W, nq = (long)nqy * nqx, ld = jb->bb * nq;
    for (long rr = rb; rr < re; rr++) {
        int ci = (int)(rr / tt), a = (int)(rr % tt / p->kb), b = (int)(rr % p->kb);
        float *row = jb->col + rr * ld;
        int dy = p->q0y - a, dx = p->q0x - b;
        /* valid tx: 0 <= tx + dx <= W-1 */
        int tx0 = dx < 0 ? -dx : 0, tx1 = W - 1 - dx;
        if (tx1 > nqx - 1) tx1 = nqx - 1;
        if (nqy == H && nqx == W) {
            for (long j = 0; j < jb->bb; j++)
                shift_copy(jb->in + ((long)ci * jb->n + jb->i0 + j) * HW, row + j * nq, H, W, dy, dx);
            continue;
        }
        for (long j = 0; j < jb->bb; j++) {
            const float *src = jb->in + ((long)ci * jb->n + jb->i0 + j) * HW;
            float *dst = row + j * nq;
            for (int ty = 0; ty < nqy; ty++) {
                int iy = ty + dy;
                float *d = dst + (long)ty * nqx;
                if (iy < 0 || iy >= H || tx0 > tx1) {
                    memset(d, 0, sizeof(float) * nqx);
                    continue;
                }
                for (int tx = 0; tx < tx0; tx++) d[tx] = 0.0f;
                memcpy(d + tx0, src + (long)iy * W + tx0 + dx, sizeof(float) * (tx1 - tx0 + 1));
                for (int tx = tx1 + 1; tx < nqx; tx++) d[tx] = 0.0f;
            }
        }
    }
}

/* The GEMM result of one phase (cout x bb*nq) + bias, activation, stored at the
 * phase's pixels (stride s) of the output; items are output channels. */
typedef struct {
    const nets_layer *L;
    const convt_phase *p;
    float *res, *out;
    long n, i0, bb;
    int y0, x0;
    nets_act act;
} phase_job;

static void phase_store_run(const void *v, long cb, long ce, int worker) {
    (void)worker;
    const phase_job *j = v;
    const nets_layer *L = j->L;
    int Wo = L->out.w, s = L->stride, nqy = j->p->nqy, nqx = j->p->nqx;
    long HWo = (long)L->out.h * Wo, nq = (long)nqy * nqx;
    for (long co = cb; co < ce; co++) {
        float *r = j->res + co * j->bb * nq;
        act_bias(r, j->bb * nq, L->b[co], j->act);
        for (long im = 0; im < j->bb; im++) {
            float *dst = j->out + (co * j->n + j->i0 + im) * HWo + (long)j->y0 * Wo + j->x0;
            const float *sr = r + im * nq;
            for (int ty = 0; ty < nqy; ty++) {
                float *d = dst + (long)ty * s * Wo;
                const float *q = sr + (long)ty * nqx;
                for (int tx = 0; tx < nqx; tx++) d[(long)tx * s] = q[tx];
            }
        }
    }
}

static void conv_transpose2d(team_t *t, const nets_layer *L, long n, const float *in, float *out, float *col,
                             nets_act act) {
    if (eng_available()) {
        eng_convt(t, L, n, in, out, col, act);
        return;
    }
    int s = L->stride, cin = L->cin, cout = L->cout;
    long rows, cols, chunk, need;
    col_plan(L, n, &rows, &cols, &chunk, &need);
    const float *wp = L->wp;
    for (int py = 0; py < s; py++)
        for (int px = 0; px < s; px++) {
            convt_phase p;
            convt_phase_of(L, py, px, &p);
            long K = (long)cin * p.ka * p.kb, nq = (long)p.nqy * p.nqx;
            const float *w = wp;
            wp += cout * K;
            if (nq == 0) continue;
            int y0 = p.q0y * s + py - L->pad_t, x0 = p.q0x * s + px - L->pad_l; /* first output pixel of the phase */
            for (long i0 = 0; i0 < n; i0 += chunk) {
                long bb = n - i0 < chunk ? n - i0 : chunk;
                float *res = col + K * bb * nq;
                if (K > 0) {
                    col_job cj = {L, in, n, i0, bb, col, &p};
                    par_for(t, K, K * bb * nq, im2col_phase_run, &cj);
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, cout, (int)(bb * nq), (int)K, 1.0f, w,
                                (int)K, col, (int)(bb * nq), 0.0f, res, (int)(bb * nq));
                } else {
                    memset(res, 0, sizeof(float) * cout * bb * nq);
                }
                phase_job pj = {L, &p, res, out, n, i0, bb, y0, x0, act};
                par_for(t, cout, cout * bb * nq, phase_store_run, &pj);
            }
        }
}

static void dense(team_t *t, const nets_layer *L, long n, const float *in, float *out, float *col, nets_act act) {
    if (eng_available()) {
        eng_dense(t, L, n, in, out, col, act);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, L->cout, L->cin, 1.0f, in, L->cin, L->w, L->cin, 0.0f,
                out, L->cout);
    (void)t;
    for (long i = 0; i < n; i++) {
        float *p = out + i * L->cout;
        for (int j = 0; j < L->cout; j++) p[j] += L->b[j];
        act_apply(p, L->cout, act);
    }
}

/* Per sample and group: mean and biased variance over the group's channels and
 * pixels (two passes, double accumulators), then y = act(x * a_c + b_c). in and
 * out may be the same array. Items are (sample, group) pairs. */
typedef struct {
    const nets_layer *L;
    long n;
    const float *in;
    float *out;
    nets_act act;
} gn_job;

static void gn_run(const void *v, long b, long e, int worker) {
    (void)worker;
    const gn_job *j = v;
    const nets_layer *L = j->L;
    long C = L->cin, n = j->n, hw, cstride, istride;
    if (L->in.rank == 3) {
        hw = (long)L->in.h * L->in.w;
        cstride = n * hw;
        istride = hw;
    } else {
        hw = 1;
        cstride = 1;
        istride = C;
    }
    long cpg = C / L->groups;
    double cnt = (double)cpg * hw;
    if (L->in.rank == 3 && eng_available()) {
        /* the same in 16 float lanes per pass (partial sums in float, totals in double) */
        for (long it = b; it < e; it++) {
            long i = it / L->groups, g = it % L->groups;
            double sum = 0.0, sq = 0.0;
            for (long c = g * cpg; c < (g + 1) * cpg; c++) sum += eng_sum(j->in + c * cstride + i * istride, hw);
            double mean = sum / cnt;
            for (long c = g * cpg; c < (g + 1) * cpg; c++)
                sq += eng_sqdev(j->in + c * cstride + i * istride, hw, (float)mean);
            double rstd = 1.0 / sqrt(sq / cnt + L->eps);
            for (long c = g * cpg; c < (g + 1) * cpg; c++)
                eng_affine_act(j->out + c * cstride + i * istride, j->in + c * cstride + i * istride, hw,
                               (float)(L->w[c] * rstd), (float)(L->b[c] - mean * L->w[c] * rstd), j->act);
        }
        return;
    }
    for (long it = b; it < e; it++) {
        long i = it / L->groups, g = it % L->groups;
        double sum = 0.0, sq = 0.0;
        for (long c = g * cpg; c < (g + 1) * cpg; c++) {
            const float *p = j->in + c * cstride + i * istride;
            for (long q = 0; q < hw; q++) sum += p[q];
        }
        double mean = sum / cnt;
        float mf = (float)mean;
        for (long c = g * cpg; c < (g + 1) * cpg; c++) {
            const float *p = j->in + c * cstride + i * istride;
            for (long q = 0; q < hw; q++) {
                double d = (double)(p[q] - mf);
                sq += d * d;
            }
        }
        double rstd = 1.0 / sqrt(sq / cnt + L->eps);
        for (long c = g * cpg; c < (g + 1) * cpg; c++) {
            const float *p = j->in + c * cstride + i * istride;
            float *q = j->out + c * cstride + i * istride;
            float a = (float)(L->w[c] * rstd), bb = (float)(L->b[c] - mean * L->w[c] * rstd);
            for (long k = 0; k < hw; k++) q[k] = p[k] * a + bb;
            act_apply(q, hw, j->act);
        }
    }
}

static void group_norm(team_t *t, const nets_layer *L, long n, const float *in, float *out, nets_act act) {
    gn_job j = {L, n, in, out, act};
    par_for(t, n * L->groups, n * nets_shape_size(L->in), gn_run, &j);
}

/* Items are (channel, sample) pairs. */
typedef struct {
    const nets_layer *L;
    const float *in;
    float *out;
    nets_act act;
} crop_job;

static void crop_run(const void *v, long b, long e, int worker) {
    (void)worker;
    const crop_job *j = v;
    const nets_layer *L = j->L;
    int H = L->in.h, W = L->in.w, h = L->out.h, w = L->out.w;
    for (long ci = b; ci < e; ci++) {
        for (int y = 0; y < h; y++)
            memcpy(j->out + (ci * h + y) * w, j->in + (ci * H + y + L->pad_t) * W + L->pad_l, sizeof(float) * w);
        act_apply(j->out + ci * h * w, (long)h * w, j->act);
    }
}

static void center_crop(team_t *t, const nets_layer *L, long n, const float *in, float *out, nets_act act) {
    crop_job j = {L, in, out, act};
    par_for(t, (long)L->in.c * n, n * nets_shape_size(L->out), crop_run, &j);
}

static int crop_is_identity(const nets_layer *L) {
    return L->type == NETS_L_CROP && L->out.h == L->in.h && L->out.w == L->in.w;
}

/* ---- executor ---- */

typedef struct {
    float *buf[NETS_MAX_DEPTH + 2];
    int nbuf;
    float *col;
    long n;
    team_t *team;
} exec_t;

static int free_buf(const exec_t *e, int cur, unsigned prot) {
    for (int i = 0; i < e->nbuf; i++)
        if (i != cur && !(prot >> i & 1u)) return i;
    return -1; /* unreachable: nbuf = depth + 2 */
}

static nets_act act_of(const nets_layer *L) {
    switch (L->type) {
    case NETS_L_RELU:
        return ACT_RELU;
    case NETS_L_SWISH:
        return ACT_SWISH;
    case NETS_L_SIGMOID:
        return ACT_SIGMOID;
    default:
        return ACT_NONE;
    }
}

/* Run s on the batch in buffer cur (protected buffers are never written);
 * returns the buffer that holds the result. */
static int run_seq(exec_t *e, const nets_seq *s, int cur, unsigned prot) {
    long n = e->n;
    team_t *t = e->team;
    for (int i = 0; i < s->n; i++) {
        const nets_layer *L = &s->layers[i];
        if (crop_is_identity(L)) continue;
        /* In the engine a transposed convolution followed by a crop computes only the
         * kept pixels: the crop moves its first kept row and column. */
        nets_layer cropped;
        if (L->type == NETS_L_CONVT2D && eng_available()) {
            int j = i + 1;
            while (j < s->n && crop_is_identity(&s->layers[j])) j++;
            if (j < s->n && s->layers[j].type == NETS_L_CROP) {
                cropped = *L;
                cropped.out = s->layers[j].out;
                cropped.pad_t += s->layers[j].pad_t;
                cropped.pad_l += s->layers[j].pad_l;
                L = &cropped;
                i = j;
            }
        }
        /* An activation right after a compute layer (identity crops aside) is applied
         * in that layer's last pass. */
        nets_act act = ACT_NONE;
        int fusable = L->type == NETS_L_CONV2D || L->type == NETS_L_CONVT2D || L->type == NETS_L_DENSE ||
                      L->type == NETS_L_GROUP_NORM || L->type == NETS_L_RESIDUAL || L->type == NETS_L_CROP;
        if (fusable) {
            int j = i + 1;
            while (j < s->n && crop_is_identity(&s->layers[j])) j++;
            if (j < s->n && act_of(&s->layers[j]) != ACT_NONE) {
                act = act_of(&s->layers[j]);
                i = j;
            }
        }
        int o = free_buf(e, cur, prot);
        int inplace_ok = !(prot >> cur & 1u);
        switch (L->type) {
        case NETS_L_CONV2D:
            conv2d(t, L, n, e->buf[cur], e->buf[o], e->col, act);
            cur = o;
            break;
        case NETS_L_CONVT2D:
            conv_transpose2d(t, L, n, e->buf[cur], e->buf[o], e->col, act);
            cur = o;
            break;
        case NETS_L_DENSE:
            dense(t, L, n, e->buf[cur], e->buf[o], e->col, act);
            cur = o;
            break;
        case NETS_L_GROUP_NORM:
            if (inplace_ok) o = cur;
            group_norm(t, L, n, e->buf[cur], e->buf[o], act);
            cur = o;
            break;
        case NETS_L_RELU:
        case NETS_L_SWISH:
        case NETS_L_SIGMOID: {
            long len = n * nets_shape_size(L->in);
            if (inplace_ok)
                o = cur;
            else
                memcpy(e->buf[o], e->buf[cur], sizeof(float) * len);
            ew(t, e->buf[o], NULL, len, act_of(L));
            cur = o;
            break;
        }
        case NETS_L_FLATTEN:
            if (L->in.rank == 3) {
                from_cnhw(t, e->buf[cur], e->buf[o], n, L->in.c, (long)L->in.h * L->in.w);
                cur = o;
            }
            break;
        case NETS_L_RESHAPE:
            to_cnhw(t, e->buf[cur], e->buf[o], n, L->out.c, (long)L->out.h * L->out.w);
            cur = o;
            break;
        case NETS_L_CROP:
            center_crop(t, L, n, e->buf[cur], e->buf[o], act);
            cur = o;
            break;
        case NETS_L_RESIDUAL: {
            /* In the engine a body that ends with a convolution adds the block's input
             * (and applies the activation after the block) in that convolution's stores. */
            const nets_seq *body = L->body;
            int last = body->n - 1;
            while (last >= 0 && crop_is_identity(&body->layers[last])) last--;
            if (eng_available() && last >= 0 && body->layers[last].type == NETS_L_CONV2D) {
                nets_seq head = *body;
                head.n = last;
                int r = run_seq(e, &head, cur, prot | 1u << cur);
                int o2 = free_buf(e, r, prot | 1u << cur);
                eng_conv2d(t, &body->layers[last], n, e->buf[r], e->buf[o2], e->buf[cur], e->col, act);
                cur = o2;
                break;
            }
            long len = n * nets_shape_size(L->in);
            int r = run_seq(e, L->body, cur, prot | 1u << cur);
            if (r == cur) { /* empty body: x + x */
                memcpy(e->buf[o], e->buf[cur], sizeof(float) * len);
                ew(t, e->buf[o], e->buf[o], len, act);
                r = o;
            } else {
                ew(t, e->buf[r], e->buf[cur], len, act);
            }
            cur = r;
            break;
        }
        }
    }
    return cur;
}

static long batch_act(const nets_seq *s, long n) { return round16(n * s->max_act); }

size_t nets_seq_workspace(const nets_seq *s, long n) {
    return (size_t)(s->depth + 2) * (size_t)batch_act(s, n) + col_need(s, n);
}

vbm_status nets_seq_run(const nets_seq *s, long n, const float *in, float *out, float *ws, int threads,
                        vbm_error *err) {
    if (n <= 0) return vbm_fail(err, VBM_EINVAL, NULL, "batch of %ld samples", n);
    if (n > INT_MAX / s->max_act / 2) return vbm_fail(err, VBM_EINVAL, NULL, "batch of %ld samples is too large", n);
    float *own = NULL;
    if (!ws) {
        own = malloc(sizeof(float) * nets_seq_workspace(s, n));
        if (!own) return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for a batch of %ld samples", n);
        ws = own;
    }
    if (threads <= 0) { /* automatic: the BLAS library's count, for work that pays for starting helpers */
        threads = openblas_get_num_threads();
        if ((double)n * s->work < 4e6) threads = 1;
    }
    if (threads > NETS_MAX_THREADS) threads = NETS_MAX_THREADS;
    team_t *team = team_new(threads); /* NULL (out of memory): everything runs on this thread */
    exec_t e;
    memset(&e, 0, sizeof e);
    e.n = n;
    e.team = team;
    e.nbuf = s->depth + 2;
    for (int i = 0; i < e.nbuf; i++) e.buf[i] = ws + (size_t)i * batch_act(s, n);
    e.col = ws + (size_t)e.nbuf * batch_act(s, n);
    long isz = nets_shape_size(s->in), osz = nets_shape_size(s->out);
    if (s->in.rank == 3)
        to_cnhw(team, in, e.buf[0], n, s->in.c, (long)s->in.h * s->in.w);
    else
        memcpy(e.buf[0], in, sizeof(float) * n * isz);
    int r = run_seq(&e, s, 0, 0);
    if (s->out.rank == 3)
        from_cnhw(team, e.buf[r], out, n, s->out.c, (long)s->out.h * s->out.w);
    else
        memcpy(out, e.buf[r], sizeof(float) * n * osz);
    team_free(team);
    free(own);
    return VBM_OK;
}
