/* layers.c -- the layers: conv2d, conv_transpose2d (by output phases) and dense (in the AVX-512
 * or AVX2 engine on their paths, else by im2col + cblas_sgemm), group norm, activations, center
 * crop and layout changes, each over a batch on the team's threads; plus the per-phase weight
 * repacking. */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nets/kernels_avx2.h"
#include "nets/kernels_avx512.h"
#include "nets/layers.h"

/* im2col works on chunks of whole images: enough images for about COL_COLS GEMM
 * columns, as long as the column matrix (and, for transposed convolutions, the GEMM
 * result) stays under COL_BUDGET floats (at least one image). */
#define NETS_COL_COLS   4096L
#define NETS_COL_BUDGET ((long)1 << 22)

/* ---- elementwise ---- */

/* Swish and sigmoid need exp(-x) for every activation. glibc's expf is scalar, and GCC
 * does not vectorize a loop around it (nor, under the default -ftrapping-math, a loop with
 * clamps), so exp is computed four lanes at a time with GCC vector extensions: Cephes'
 * expf (range reduction by ln 2 in two parts, degree-5 polynomial, relative error about
 * 1e-7 on [-87, 88]; arguments are clamped to that range, where the activations have
 * long saturated). Plain C operators, no intrinsics: it compiles for any target. */
typedef float nets_v4f __attribute__((vector_size(16)));
typedef int32_t nets_v4i __attribute__((vector_size(16)));

static inline nets_v4f v4_select(nets_v4i mask, nets_v4f a, nets_v4f b)
{
    return (nets_v4f)(((nets_v4i)a & mask) | ((nets_v4i)b & ~mask));
}

static inline nets_v4f v4_exp(nets_v4f x)
{
    const nets_v4f lo = {-87.0f, -87.0f, -87.0f, -87.0f}, hi = {88.0f, 88.0f, 88.0f, 88.0f};
    x = v4_select(x < lo, lo, x);
    x = v4_select(x > hi, hi, x);
    nets_v4f fn = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    nets_v4f r = x - fn * 0.693359375f + fn * 2.12194440e-4f;
    nets_v4f z = r * r;
    nets_v4f y = (((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r
                    + 4.1665795894e-2f)
                       * r
                   + 1.6666665459e-1f)
                      * r
                  + 5.0000001201e-1f)
                     * z
                 + r + 1.0f;
    nets_v4i e = (__builtin_convertvector(fn, nets_v4i) + 127) << 23; /* 2^n */
    return y * (nets_v4f)e;
}

static inline nets_v4f v4_act(nets_v4f v, nets_act act)
{
    if (act == ACT_SWISH)
        return v / (1.0f + v4_exp(-v));
    return 1.0f / (1.0f + v4_exp(-v)); /* ACT_SIGMOID */
}

/* x[i] = act(x[i] + bias), in one pass. */
static void act_bias(float *x, long len, float bias, nets_act act)
{
    if (act == ACT_NONE || act == ACT_RELU) {
        if (bias != 0.0f)
            for (long i = 0; i < len; i++)
                x[i] += bias;
        if (act == ACT_RELU)
            for (long i = 0; i < len; i++)
                x[i] = x[i] > 0.0f ? x[i] : 0.0f;
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

static void act_apply(float *x, long len, nets_act act)
{
    act_bias(x, len, 0.0f, act);
}

/* ---- convolutions: shapes, phases, im2col plans ---- */

/* Least fraction of the grid of flat panels whose outputs are kept, in 1/64ths: the AVX2
 * engine's flat pairs of a transposed convolution's phases (convt_flat_pair) and stride-2
 * convolutions on their input's phases (conv_polyphase). */
#define CONV_FLAT_KEEP 48

static int conv_is_pointwise(const nets_layer *L)
{
    return L->type == NETS_L_CONV2D && L->k == 1 && L->stride == 1;
}

static int floor_div(int a, int b)
{
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}
static int ceil_div(int a, int b)
{
    return -floor_div(-a, b);
}

/* A transposed convolution with stride s is s*s ordinary convolutions, one per output
 * phase (py, px): the kept output pixel (oy, ox) of the full output row fy = oy + off
 * with fy = qy*s + py receives in[qy - a][qx - b] * W[py + a*s][px + b*s] for the taps
 * a < ka, b < kb of that phase. Each phase is one im2col + GEMM whose result is stored
 * once (no scatter-add); its weights are repacked at load by nets_layer_prepare. */
typedef struct {
    int ka, kb;   /* taps */
    int q0y, nqy; /* first qy and how many (rows of this phase in the kept output) */
    int q0x, nqx;
} convt_phase;

static void convt_phase_of(const nets_layer *L, int py, int px, convt_phase *p)
{
    int k = L->k, s = L->stride, off = L->pad_t;
    p->ka = py < k ? (k - py + s - 1) / s : 0;
    p->kb = px < k ? (k - px + s - 1) / s : 0;
    p->q0y = ceil_div(off - py, s);
    p->nqy = floor_div(off + L->out.h - 1 - py, s) - p->q0y + 1;
    if (p->nqy < 0)
        p->nqy = 0;
    p->q0x = ceil_div(L->pad_l - px, s);
    p->nqx = floor_div(L->pad_l + L->out.w - 1 - px, s) - p->q0x + 1;
    if (p->nqx < 0)
        p->nqx = 0;
}

/* The grid of each of the four phases of conv2d layer L's input (rows 2r + p, columns 2s + q):
 * its rows and columns at *hp and *wp (either may be NULL); returns its points, *hp x *wp. */
static long conv_phase_grid(const nets_layer *L, int *hp, int *wp)
{
    int h = (L->in.h + 1) / 2, w = (L->in.w + 1) / 2;
    if (hp)
        *hp = h;
    if (wp)
        *wp = w;
    return (long)h * w;
}

/* Whether the AVX2 engine runs conv2d layer L on its input's four phases (conv2d_phases): stride
 * 2, an even kernel of at most 8 (4 x 4 taps a phase), no padding, and an output that is at least
 * CONV_FLAT_KEEP / 64 of the phases' grid (the grid its flat panels compute). Reads L only. */
static int conv_polyphase(const nets_layer *L)
{
    if (L->type != NETS_L_CONV2D || L->stride != 2 || L->k % 2 != 0 || L->k > 8 || L->pad_t != 0
        || L->pad_l != 0)
        return 0;
    return (long)L->out.h * L->out.w * 64 >= conv_phase_grid(L, NULL, NULL) * CONV_FLAT_KEEP;
}

/* Whether the AVX2 engine runs layer L by output pixels (kern_avx2_pixels, its weights L->wp
 * transposed): a dense layer, or a conv2d with no padding, a kernel of 2 or more, not on its
 * input's phases (conv_polyphase) and output rows of fewer than 8 points (the panels' runs of a
 * grid row would be shorter than a vector); either with output channels a multiple of 32. Reads L
 * only. */
static int conv_by_pixels(const nets_layer *L)
{
    if (L->type == NETS_L_DENSE)
        return L->cout % 32 == 0;
    return L->type == NETS_L_CONV2D && L->pad_t == 0 && L->pad_l == 0 && L->k >= 2
           && !conv_polyphase(L) && L->cout % 32 == 0 && L->out.w < 8;
}

/* Floats of the phases of conv2d layer L's input for n samples (conv2d_phases). */
static long conv_phase_floats(const nets_layer *L, long n)
{
    return 4L * L->cin * n * conv_phase_grid(L, NULL, NULL);
}

/* The weights of a conv2d layer run on its input's phases (conv_polyphase): row m's entries
 * in the order (c, p, q, a, b) of input channel c's phase (p, q) and that phase's tap (a, b),
 * which is W[m][c][2a + p][2b + q]. */
static void conv_phase_weights(const nets_layer *L, float *wp)
{
    int k = L->k, h = k / 2;
    for (int m = 0; m < L->cout; m++)
        for (int c = 0; c < L->cin; c++)
            for (int p = 0; p < 2; p++)
                for (int q = 0; q < 2; q++)
                    for (int a = 0; a < h; a++)
                        for (int b = 0; b < h; b++)
                            *wp++ = L->w[(((long)m * L->cin + c) * k + 2 * a + p) * k + 2 * b + q];
}

vbm_status nets_layer_prepare(nets_layer *L, vbm_error *err)
{
    /* The AVX2 engine's copies are made wherever that engine can run, AVX-512 CPUs included: a
     * workspace may ask for it by name there (nets_workspace_set_path, VBMEM_NETS_PATH), and the
     * layers fall back to packed panels when L->wp is NULL. */
    int avx2 = kern_avx2_available();
    if (avx2 && conv_by_pixels(L)) { /* A^T by blocks of 32 output channels (kern_avx2_pixels) */
        long K = L->type == NETS_L_DENSE ? L->cin : (long)L->cin * L->k * L->k;
        L->wp = malloc(sizeof(float) * (size_t)L->cout * K);
        if (!L->wp)
            return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
        for (long k = 0; k < K; k++)
            for (int m = 0; m < L->cout; m++)
                L->wp[(m / 32 * K + k) * 32 + m % 32] = L->w[m * K + k];
        return VBM_OK;
    }
    if (avx2 && conv_polyphase(L)) {
        L->wp = malloc(sizeof(float) * (size_t)L->cout * L->cin * L->k * L->k);
        if (!L->wp)
            return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
        conv_phase_weights(L, L->wp);
        return VBM_OK;
    }
    if (L->type != NETS_L_CONVT2D)
        return VBM_OK;
    int k = L->k, s = L->stride, cin = L->cin, cout = L->cout;
    L->wp = malloc(sizeof(float) * (size_t)cout * cin * k * k);
    if (!L->wp)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
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
static void col_plan(const nets_layer *L, long n, long *rows, long *cols, long *chunk, long *need)
{
    long extra = 0;
    if (L->type == NETS_L_CONV2D) {
        *rows = (long)L->cin * L->k * L->k;
        *cols = (long)L->out.h * L->out.w;
    } else {
        int t = (L->k + L->stride - 1) / L->stride;
        *rows = (long)L->cin * t * t;
        *cols = (long)((L->out.h + L->stride - 1) / L->stride + 1)
                * ((L->out.w + L->stride - 1) / L->stride + 1);
        extra = L->cout;
    }
    long b = (NETS_COL_COLS + *cols - 1) / *cols;
    long bmax = NETS_COL_BUDGET / ((*rows + extra) * *cols);
    if (b > bmax)
        b = bmax;
    if (b < 1)
        b = 1;
    if (b > n)
        b = n;
    *chunk = b;
    *need = (*rows + extra) * *cols * b;
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
static void par_for(team_t *t, long items, long work, team_fn fn, const void *ctx)
{
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

static void ew_run(const void *c, long b, long e, int worker)
{
    (void)worker;
    const ew_job *j = c;
    long lo = b * NETS_EW_BLOCK, hi = e * NETS_EW_BLOCK < j->len ? e * NETS_EW_BLOCK : j->len;
    if (j->x && j->x != j->y)
        for (long i = lo; i < hi; i++)
            j->y[i] += j->x[i];
    else if (j->x)
        for (long i = lo; i < hi; i++)
            j->y[i] *= 2.0f;
    act_apply(j->y + lo, hi - lo, j->act);
}

void nets_ew(team_t *t, float *y, const float *x, long len, nets_act act)
{
    if (!x && act == ACT_NONE)
        return;
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

static void bias_run(const void *c, long b, long e, int worker)
{
    (void)worker;
    const bias_job *j = c;
    for (long r = b; r < e; r++)
        act_bias(j->y + r * j->ld, j->len, j->bias[r], j->act);
}

static void bias_rows(team_t *t, float *y, long rows, long len, long ld, const float *bias,
                      nets_act act)
{
    bias_job j = {y, len, ld, bias, act};
    par_for(t, rows, rows * len, bias_run, &j);
}

/* [n][c][hw] <-> [c][n][hw]: items are channels. */
typedef struct {
    const float *in;
    float *out;
    long n, c, hw;
} layout_job;

static void to_cnhw_run(const void *v, long b, long e, int worker)
{
    (void)worker;
    const layout_job *j = v;
    for (long k = b; k < e; k++)
        for (long i = 0; i < j->n; i++)
            memcpy(j->out + (k * j->n + i) * j->hw, j->in + (i * j->c + k) * j->hw,
                   sizeof(float) * j->hw);
}

static void from_cnhw_run(const void *v, long b, long e, int worker)
{
    (void)worker;
    const layout_job *j = v;
    for (long k = b; k < e; k++)
        for (long i = 0; i < j->n; i++)
            memcpy(j->out + (i * j->c + k) * j->hw, j->in + (k * j->n + i) * j->hw,
                   sizeof(float) * j->hw);
}

void nets_to_cnhw(team_t *t, const float *in, float *out, long n, long c, long hw)
{
    layout_job j = {in, out, n, c, hw};
    par_for(t, c, n * c * hw, to_cnhw_run, &j);
}

void nets_from_cnhw(team_t *t, const float *in, float *out, long n, long c, long hw)
{
    layout_job j = {in, out, n, c, hw};
    par_for(t, c, n * c * hw, from_cnhw_run, &j);
}

/* ---- layers in the engines (kernels_avx512.h, kernels_avx2.h) ---- */

/* Whether path runs the GEMM-shaped layers in one of the engines. */
static int layers_engine(nets_path path)
{
    return path == NETS_PATH_ENGINE || path == NETS_PATH_ENGINE_AVX2;
}

/* Run job g in the engine of path (NETS_PATH_ENGINE or NETS_PATH_ENGINE_AVX2). */
static void layers_kern(team_t *t, nets_path path, kern_job *g)
{
    if (path == NETS_PATH_ENGINE_AVX2)
        kern_avx2_go(t, g);
    else
        kern_go(t, g);
}

/* Where the panels start in the scratch of a conv2d layer on the AVX2 engine: after the phases of
 * its input and its results on their grid (conv2d_phases), each from a 64-byte boundary; 0 when
 * it does not run on phases. */
static long conv_panels_at(const nets_layer *L, long n)
{
    if (!conv_polyphase(L))
        return 0;
    long grid = (long)L->cout * n * conv_phase_grid(L, NULL, NULL);
    return (conv_phase_floats(L, n) + 15) / 16 * 16 + (grid + 15) / 16 * 16;
}

/* Floats of panel buffers a layer needs in the engine of path (NETS_PATH_AUTO: either) run by
 * `threads` threads (a slot of its own for each; the AVX-512 engine's deinterleaved copy of a
 * stride-2 input shares them; the AVX2 engine's phases of one come before them). */
static long panel_need(const nets_layer *L, long n, nets_path path, int threads)
{
    long K = 0;
    if (L->type == NETS_L_CONV2D) {
        K = (long)L->cin * L->k * L->k;
        long panels = K * KERN_PANEL * threads;
        long dil = L->stride == 2 && path != NETS_PATH_ENGINE_AVX2
                       ? n * L->cin * L->in.h * (long)((L->in.w + 1) / 2 * 2)
                       : 0;
        long split = path == NETS_PATH_ENGINE ? 0 : conv_panels_at(L, n) + panels;
        long need = panels > dil ? panels : dil;
        return need > split ? need : split;
    }
    if (L->type == NETS_L_CONVT2D) { /* twice: the AVX2 engine packs two phases at a time */
        long t = (L->k + L->stride - 1) / L->stride;
        K = 2 * L->cin * t * t;
    }
    if (L->type == NETS_L_DENSE)
        K = L->cin;
    return K * KERN_PANEL * threads;
}

/* The split of a conv2d layer's input into phases (conv2d_phases). */
typedef struct {
    const float *in;
    float *out;
    long n;
    int H, W, hp, wp;
} phase_split;

/* Items [b, e) are the planes (c, img) of the input, each split into its four phases:
 * out[(4c + 2p + q)][img][r][s] = in[c][img][2r + p][2s + q], 0 past the input's last row or
 * column. */
static void phase_split_run(const void *v, long b, long e, int worker)
{
    (void)worker;
    const phase_split *ps = v;
    const int H = ps->H, W = ps->W, hp = ps->hp, wp = ps->wp;
    const long plane = (long)hp * wp;
    for (long i = b; i < e; i++) {
        long c = i / ps->n, img = i % ps->n;
        const float *src = ps->in + i * H * W;
        for (int p = 0; p < 2; p++)
            for (int q = 0; q < 2; q++) {
                float *dst = ps->out + ((4 * c + 2 * p + q) * ps->n + img) * plane;
                for (int r = 0; r < hp; r++, dst += wp) {
                    int y = 2 * r + p;
                    if (y >= H) {
                        memset(dst, 0, sizeof(float) * wp);
                        continue;
                    }
                    const float *row = src + (long)y * W + q;
                    int full = (W - q + 1) / 2; /* columns 2s + q < W */
                    for (int x = 0; x < full; x++)
                        dst[x] = row[2 * x];
                    for (int x = full; x < wp; x++)
                        dst[x] = 0.0f;
                }
            }
    }
}

/* The rows of a phase grid's output into the layer's output (conv2d_phases). */
typedef struct {
    const float *grid;
    float *out;
    int hp, wp, ho, wo;
} phase_crop;

/* Items [b, e) are the planes (m, img): out's ho x wo of the plane from the first ho rows and
 * wo columns of grid's hp x wp. */
static void phase_crop_run(const void *v, long b, long e, int worker)
{
    (void)worker;
    const phase_crop *pc = v;
    kern_avx2_copy_rows(pc->grid + b * pc->hp * pc->wp, pc->wp, pc->hp,
                        pc->out + b * pc->ho * pc->wo, pc->ho, pc->wo, e - b);
}

/* conv2d layer L (conv_polyphase, its weights L->wp by phase) on the AVX2 engine: the input is
 * split into its four phases (p, q) of rows 2r + p and columns 2s + q, and the layer is then a
 * stride-1 convolution of the 4 cin phases with k/2 x k/2 taps, out[m][y][x] = sum over (c, p, q,
 * a, b) of W[m][c][2a + p][2b + q] phase(c, p, q)[y + a][x + b]. That runs in flat panels on the
 * phases' whole grid (the taps past its edge are 0), whose results are stored with bias and act
 * by whole vectors; the output's y < out.h, x < out.w are then copied out. Run on the output's
 * grid, the stride-2 taps took two loads and a shuffle for every 8 lanes of B, and the results'
 * runs (grid rows of out.w points, cut by the panels' vectors) were stored piece by piece: on
 * a Zen 2 the bundled encoder's enc.down0 went from 8.7 to 4.2 us a frame this way. (A layer
 * whose output is a smaller part of the grid, such as its enc.down1, 25 of 49 points, ran
 * slower on the phases in runs of its grid rows, 15.6 against 12.7 us: its B rows are packed
 * 5 floats a store either way, and the split cost more than the stride-2 loads; it runs by
 * output pixels, conv_by_pixels.) scratch holds the phases, the grid's results and then the
 * panels (conv_panels_at). */
static void conv2d_phases(team_t *t, const nets_layer *L, long n, const float *in, float *out,
                          float *scratch, nets_act act)
{
    int hp, wp;
    conv_phase_grid(L, &hp, &wp);
    float *grid = scratch + (conv_phase_floats(L, n) + 15) / 16 * 16;
    phase_split ps = {in, scratch, n, L->in.h, L->in.w, hp, wp};
    par_for(t, (long)L->cin * n, 2 * conv_phase_floats(L, n), phase_split_run, &ps);
    kern_job g;
    memset(&g, 0, sizeof g);
    g.a = L->wp;
    g.M = L->cout;
    g.K = (long)L->cin * L->k * L->k;
    g.in = scratch;
    g.H = g.ny = hp;
    g.W = g.nx = wp;
    g.is = (long)hp * wp;
    g.cs = n * g.is;
    g.nc = 4 * L->cin;
    g.na = g.nb = L->k / 2;
    g.sy = g.sx = 1;
    g.day = g.dbx = 1;
    g.n = n;
    g.out = grid;
    g.bias = L->b;
    g.ois = g.is;
    g.ors = g.cs;
    g.orow = wp;
    g.osy = g.osx = 1;
    g.act = act;
    g.slots = scratch + conv_panels_at(L, n);
    g.flat = 1;
    kern_avx2_go(t, &g);
    phase_crop pc = {grid, out, hp, wp, L->out.h, L->out.w};
    par_for(t, L->cout * n, 2 * L->cout * n * g.is, phase_crop_run, &pc);
}

/* conv2d in the engine of path; add (NULL or like out) is added before act. */
static void conv2d_kern(team_t *t, nets_path path, const nets_layer *L, long n, const float *in,
                        float *out, const float *add, float *slots, nets_act act)
{
    kern_job g;
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
    if (path == NETS_PATH_ENGINE_AVX2 && conv_polyphase(L) && L->wp && !add) {
        conv2d_phases(t, L, n, in, out, slots, act);
        return;
    }
    if (path == NETS_PATH_ENGINE_AVX2 && conv_by_pixels(L) && L->wp && !add) {
        /* by output pixels (kern_avx2_pixels): A^T, the taps' input offsets in slots */
        g.a = L->wp;
        kern_avx2_pixels(t, &g);
        return;
    }
    if (path == NETS_PATH_ENGINE_AVX2) { /* packed panels only: no deinterleaved copy */
        /* a 1 x 1 convolution to few channels (a decoder's head) without panels: packed, its
         * K x 24 panel served 2 rows, and the bundled decoder's head ran at 16 % of the
         * ceiling on the AVX2 CPU measured */
        if (conv_is_pointwise(L) && g.flat && L->pad_t == 0 && L->pad_l == 0
            && g.M <= KERN_AVX2_PW_ROWS)
            kern_avx2_pointwise(t, &g);
        else
            kern_avx2_go(t, &g);
        return;
    }
    if (g.sx == 2) {
        /* stride 2: in direct mode from a deinterleaved copy of the input (in the panel
         * buffers, which direct mode does not use), if its grid rows are 9 or more columns
         * wide. Narrower, several rows share a 16-lane half and the kernel's merged loads
         * and their tables made it slower than packing, whose gathers are two a B row for
         * a 'valid' convolution (measured: the CIFAR encoder 6% faster packed). */
        kern_job d = g;
        d.half = (g.W + 1) / 2;
        d.rw = 2 * d.half;
        d.is = (long)g.H * d.rw;
        d.cs = n * d.is;
        d.in = slots;
        int rows = kern_direct_rows(&d);
        if (rows > 0 && rows <= 2) {
            kern_deinterleave(t, in, slots, (long)L->cin * n * g.H, g.W);
            g = d;
        }
    }
    kern_go(t, &g);
}

/* The engine's job for output phase (py, px) of conv_transpose2d layer L (see convt_phase_of),
 * its weights at wp; L may describe a cropped output (out and pad_t/pad_l moved by the crop).
 * g->K is set in any case; returns whether the phase has output pixels. */
static int convt_job(const nets_layer *L, long n, const float *in, float *out, float *slots,
                     nets_act act, int py, int px, const float *wp, kern_job *g)
{
    int s = L->stride;
    convt_phase p;
    convt_phase_of(L, py, px, &p);
    memset(g, 0, sizeof *g);
    g->a = wp;
    g->M = L->cout;
    g->K = (long)L->cin * p.ka * p.kb;
    g->in = in;
    g->H = L->in.h;
    g->W = L->in.w;
    g->is = (long)g->H * g->W;
    g->cs = n * g->is;
    g->nc = L->cin;
    g->na = p.ka;
    g->nb = p.kb;
    g->sy = g->sx = 1;
    g->dy0 = p.q0y;
    g->dx0 = p.q0x;
    g->day = g->dbx = -1;
    g->n = n;
    g->ny = p.nqy;
    g->nx = p.nqx;
    g->out = out;
    g->bias = L->b;
    g->ois = (long)L->out.h * L->out.w;
    g->ors = n * g->ois;
    g->orow = L->out.w;
    g->oy0 = p.q0y * s + py - L->pad_t;
    g->ox0 = p.q0x * s + px - L->pad_l;
    g->osy = g->osx = s;
    g->act = act;
    g->slots = slots;
    return p.nqy > 0 && p.nqx > 0;
}

/* Whether the AVX2 engine may run phases a and b of a stride-2 layer as one pair job
 * (kern_avx2_go_pair): the same grid and weights' shape, b's output columns right after a's. */
static int convt_pairs(const kern_job *a, const kern_job *b)
{
    return a->K == b->K && a->K >= 3 && a->ny == b->ny && a->nx == b->nx && a->oy0 == b->oy0
           && b->ox0 == a->ox0 + 1;
}

/* The pair (a, b) of phases of stride-2 layer L (convt_pairs) as jobs on the input's grid, for
 * flat panels (kern_avx2_go_pair): when the phases' grid fits in the input's H x W and is at
 * least CONV_FLAT_KEEP / 64 of it (a cropped layer's phases cover a window of it), fills fa, fb
 * (a's and b's grid widened to H x W around the window, which win then gives) and returns 1,
 * else 0. Flat panels need no runs worked out per panel, and their B rows are one masked load
 * per vector. */
static int convt_flat_pair(const nets_layer *L, const kern_job *a, const kern_job *b, kern_job *fa,
                           kern_job *fb, kern_avx2_window *win)
{
    int H = L->in.h, W = L->in.w, s = L->stride;
    if (a->ny > H || a->nx > W || a->na * a->nb > 9 || b->na * b->nb > 9
        || (long)a->ny * a->nx * 64 < (long)H * W * CONV_FLAT_KEEP)
        return 0;
    int ey = (H - a->ny) / 2, ex = (W - a->nx) / 2; /* grid rows and columns added before */
    *win = (kern_avx2_window){ey, ey + a->ny, ex, ex + a->nx};
    *fa = *a;
    *fb = *b;
    kern_job *f[2] = {fa, fb};
    for (int i = 0; i < 2; i++) {
        f[i]->ny = H;
        f[i]->nx = W;
        f[i]->dy0 -= ey;
        f[i]->dx0 -= ex;
        f[i]->oy0 -= ey * s;
        f[i]->ox0 -= ex * s;
    }
    return 1;
}

/* conv_transpose2d in the engine of path, phase by phase (convt_job). On the AVX2 engine the
 * two phases of a row of phases of a stride-2 layer run as one job when they pair (convt_pairs):
 * their output columns interleave, and stored apart every store wrote every other float. */
static void convt_kern(team_t *t, nets_path path, const nets_layer *L, long n, const float *in,
                       float *out, float *slots, nets_act act)
{
    int s = L->stride;
    const float *wp = L->wp;
    for (int py = 0; py < s; py++) {
        if (path == NETS_PATH_ENGINE_AVX2 && s == 2) {
            kern_job g0, g1;
            int r0 = convt_job(L, n, in, out, slots, act, py, 0, wp, &g0);
            wp += L->cout * g0.K;
            int r1 = convt_job(L, n, in, out, slots, act, py, 1, wp, &g1);
            wp += L->cout * g1.K;
            int pair = r0 && r1 ? convt_pairs(&g0, &g1) ? 1 : convt_pairs(&g1, &g0) ? 2 : 0 : 0;
            if (pair) {
                const kern_job *e = pair == 1 ? &g0 : &g1, *o = pair == 1 ? &g1 : &g0;
                kern_job fe, fo;
                kern_avx2_window win;
                if (convt_flat_pair(L, e, o, &fe, &fo, &win))
                    kern_avx2_go_pair(t, &fe, &fo, &win);
                else
                    kern_avx2_go_pair(t, e, o, NULL);
            } else {
                if (r0)
                    kern_avx2_go(t, &g0);
                if (r1)
                    kern_avx2_go(t, &g1);
            }
            continue;
        }
        for (int px = 0; px < s; px++) {
            kern_job g;
            int run = convt_job(L, n, in, out, slots, act, py, px, wp, &g);
            wp += L->cout * g.K;
            if (run)
                layers_kern(t, path, &g);
        }
    }
}

/* dense in the engine of path: out[i][m] = act(b[m] + sum_k w[m][k] in[i][k]); the batch is the
 * column grid (one image, one row of n columns, source stride cin). */
static void dense_kern(team_t *t, nets_path path, const nets_layer *L, long n, const float *in,
                       float *out, float *slots, nets_act act)
{
    kern_job g;
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
    if (path == NETS_PATH_ENGINE_AVX2 && conv_by_pixels(L) && L->wp) {
        g.a = L->wp; /* by output pixels: the frames' features broadcast, outputs stored whole */
        kern_avx2_pixels(t, &g);
        return;
    }
    layers_kern(t, path, &g);
}

/* ---- convolutions ---- */

/* dst[y][x] = src[y + dy][x + dx] for an H x W image, 0 where that is outside the
 * image: one copy of the whole shifted image, then the rows and columns that fell
 * outside (or wrapped around a row end) are zeroed. */
static void shift_copy(const float *src, float *dst, int H, int W, int dy, int dx)
{
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
        if (c0 < 0)
            c0 = 0;
        if (c1 > W)
            c1 = W;
        for (int y = 0; y < H; y++)
            for (int x = c0; x < c1; x++)
                dst[(long)y * W + x] = 0.0f;
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
static void im2col_run(const void *v, long rb, long re, int worker)
{
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
        if (ox1 > Wo - 1)
            ox1 = Wo - 1;
        if (s == 1 && H == Ho && W == Wo) {
            for (long j = 0; j < jb->bb; j++)
                shift_copy(jb->in + ((long)ci * jb->n + jb->i0 + j) * HW, row + j * HWo, H, W,
                           ky - L->pad_t, kx - L->pad_l);
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
                for (int ox = 0; ox < ox0; ox++)
                    d[ox] = 0.0f;
                if (s == 1)
                    memcpy(d + ox0, sr + ox0, sizeof(float) * (ox1 - ox0 + 1));
                else
                    for (int ox = ox0; ox <= ox1; ox++)
                        d[ox] = sr[(long)ox * s];
                for (int ox = ox1 + 1; ox < Wo; ox++)
                    d[ox] = 0.0f;
            }
        }
    }
}

void nets_layer_conv2d(team_t *t, nets_path path, const nets_layer *L, long n, const float *in,
                       float *out, const float *add, float *col, nets_act act)
{
    if (layers_engine(path)) {
        conv2d_kern(t, path, L, n, in, out, add, col, act);
        return;
    }
    long HWo = (long)L->out.h * L->out.w, ldo = n * HWo;
    if (conv_is_pointwise(L)) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L->cout, (int)ldo, L->cin, 1.0f,
                    L->w, L->cin, in, (int)ldo, 0.0f, out, (int)ldo);
        bias_rows(t, out, L->cout, ldo, ldo, L->b, act);
        return;
    }
    long rows, cols, chunk, need;
    col_plan(L, n, &rows, &cols, &chunk, &need);
    for (long i0 = 0; i0 < n; i0 += chunk) {
        long bb = n - i0 < chunk ? n - i0 : chunk;
        col_job cj = {L, in, n, i0, bb, col, NULL};
        par_for(t, rows, rows * bb * HWo, im2col_run, &cj);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L->cout, (int)(bb * HWo), (int)rows,
                    1.0f, L->w, (int)rows, col, (int)(bb * HWo), 0.0f, out + i0 * HWo, (int)ldo);
        /* bias and activation while the chunk is still in cache */
        bias_rows(t, out + i0 * HWo, L->cout, bb * HWo, ldo, L->b, act);
    }
}

/* Phase im2col: col[(ci,a,b)][j][ty][tx] = in[ci][i0+j][q0y+ty-a][q0x+tx-b] (0 outside);
 * items are the rows (ci,a,b). */
static void im2col_phase_run(const void *v, long rb, long re, int worker)
{
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
        if (tx1 > nqx - 1)
            tx1 = nqx - 1;
        if (nqy == H && nqx == W) {
            for (long j = 0; j < jb->bb; j++)
                shift_copy(jb->in + ((long)ci * jb->n + jb->i0 + j) * HW, row + j * nq, H, W, dy,
                           dx);
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
                for (int tx = 0; tx < tx0; tx++)
                    d[tx] = 0.0f;
                memcpy(d + tx0, src + (long)iy * W + tx0 + dx, sizeof(float) * (tx1 - tx0 + 1));
                for (int tx = tx1 + 1; tx < nqx; tx++)
                    d[tx] = 0.0f;
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

static void phase_store_run(const void *v, long cb, long ce, int worker)
{
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
                for (int tx = 0; tx < nqx; tx++)
                    d[(long)tx * s] = q[tx];
            }
        }
    }
}

void nets_layer_convt2d(team_t *t, nets_path path, const nets_layer *L, long n, const float *in,
                        float *out, float *col, nets_act act)
{
    if (layers_engine(path)) {
        convt_kern(t, path, L, n, in, out, col, act);
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
            if (nq == 0)
                continue;
            int y0 = p.q0y * s + py - L->pad_t,
                x0 = p.q0x * s + px - L->pad_l; /* first output pixel of the phase */
            for (long i0 = 0; i0 < n; i0 += chunk) {
                long bb = n - i0 < chunk ? n - i0 : chunk;
                float *res = col + K * bb * nq;
                if (K > 0) {
                    col_job cj = {L, in, n, i0, bb, col, &p};
                    par_for(t, K, K * bb * nq, im2col_phase_run, &cj);
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, cout, (int)(bb * nq),
                                (int)K, 1.0f, w, (int)K, col, (int)(bb * nq), 0.0f, res,
                                (int)(bb * nq));
                } else {
                    memset(res, 0, sizeof(float) * cout * bb * nq);
                }
                phase_job pj = {L, &p, res, out, n, i0, bb, y0, x0, act};
                par_for(t, cout, cout * bb * nq, phase_store_run, &pj);
            }
        }
}

void nets_layer_dense(team_t *t, nets_path path, const nets_layer *L, long n, const float *in,
                      float *out, float *col, nets_act act)
{
    if (layers_engine(path)) {
        dense_kern(t, path, L, n, in, out, col, act);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, L->cout, L->cin, 1.0f, in, L->cin,
                L->w, L->cin, 0.0f, out, L->cout);
    (void)t;
    for (long i = 0; i < n; i++) {
        float *p = out + i * L->cout;
        for (int j = 0; j < L->cout; j++)
            p[j] += L->b[j];
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
    nets_path path;
} gn_job;

/* Group norm's three per-channel steps on one path's vectors: a channel's sum, its sum of squared
 * deviations from a mean (float lanes or float values, double totals), and x = act(src * a + b). */
typedef struct {
    double (*sum)(const float *p, long len);
    double (*sqdev)(const float *p, long len, float mean);
    void (*affine_act)(float *x, const float *src, long len, float a, float b, nets_act act);
} gn_vec;

static double gn_sum_scalar(const float *p, long len)
{
    double s = 0.0;
    for (long q = 0; q < len; q++)
        s += p[q];
    return s;
}

static double gn_sqdev_scalar(const float *p, long len, float mean)
{
    double s = 0.0;
    for (long q = 0; q < len; q++) {
        double d = (double)(p[q] - mean);
        s += d * d;
    }
    return s;
}

static void gn_affine_act_scalar(float *x, const float *src, long len, float a, float b,
                                 nets_act act)
{
    for (long k = 0; k < len; k++)
        x[k] = src[k] * a + b;
    act_apply(x, len, act);
}

/* The vectors group norm runs on: 8 lanes on the AVX2 engine, 16 where the AVX-512 engine runs
 * (whatever the GEMM path), scalar otherwise and for rank-1 inputs (one value per channel). */
static gn_vec gn_vec_for(const nets_layer *L, nets_path path)
{
    if (L->in.rank == 3 && path == NETS_PATH_ENGINE_AVX2)
        return (gn_vec){kern_avx2_sum, kern_avx2_sqdev, kern_avx2_affine_act};
    if (L->in.rank == 3 && kern_available())
        return (gn_vec){kern_sum, kern_sqdev, kern_affine_act};
    return (gn_vec){gn_sum_scalar, gn_sqdev_scalar, gn_affine_act_scalar};
}

static void gn_run(const void *v, long b, long e, int worker)
{
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
    gn_vec vec = gn_vec_for(L, j->path);
    for (long it = b; it < e; it++) {
        long i = it / L->groups, g = it % L->groups;
        double sum = 0.0, sq = 0.0;
        for (long c = g * cpg; c < (g + 1) * cpg; c++)
            sum += vec.sum(j->in + c * cstride + i * istride, hw);
        double mean = sum / cnt;
        for (long c = g * cpg; c < (g + 1) * cpg; c++)
            sq += vec.sqdev(j->in + c * cstride + i * istride, hw, (float)mean);
        double rstd = 1.0 / sqrt(sq / cnt + L->eps);
        for (long c = g * cpg; c < (g + 1) * cpg; c++)
            vec.affine_act(j->out + c * cstride + i * istride, j->in + c * cstride + i * istride,
                           hw, (float)(L->w[c] * rstd), (float)(L->b[c] - mean * L->w[c] * rstd),
                           j->act);
    }
}

/* Items [b, e) are groups of a rank-3 layer of 1 x 1 points on the AVX2 engine's path
 * (kern_avx2_gn_points). */
static void gn_points_run(const void *v, long b, long e, int worker)
{
    (void)worker;
    const gn_job *j = v;
    const nets_layer *L = j->L;
    long cpg = L->cin / L->groups;
    for (long g = b; g < e; g++)
        kern_avx2_gn_points(j->in + g * cpg * j->n, j->out + g * cpg * j->n, j->n, (int)cpg,
                            L->w + g * cpg, L->b + g * cpg, L->eps, j->act);
}

void nets_layer_group_norm(team_t *t, nets_path path, const nets_layer *L, long n, const float *in,
                           float *out, nets_act act)
{
    gn_job j = {L, n, in, out, act, path};
    /* points (1 x 1 images, a channel's values of the batch contiguous) on the AVX2 engine's
     * path: images in the lanes, with the bits of gn_run's per-image passes, where gn_run made
     * 3 calls of a vector helper per channel and image for one float (the bundled encoder's last
     * residual block: on a Zen 2 the encoder went from 7.42 to 7.29 ms a call of 64 frames) */
    if (L->in.rank == 3 && L->in.h == 1 && L->in.w == 1 && path == NETS_PATH_ENGINE_AVX2) {
        par_for(t, L->groups, 3 * n * L->cin, gn_points_run, &j);
        return;
    }
    par_for(t, n * L->groups, n * nets_shape_size(L->in), gn_run, &j);
}

/* Items are (channel, sample) pairs. */
typedef struct {
    const nets_layer *L;
    const float *in;
    float *out;
    nets_act act;
} crop_job;

static void crop_run(const void *v, long b, long e, int worker)
{
    (void)worker;
    const crop_job *j = v;
    const nets_layer *L = j->L;
    int H = L->in.h, W = L->in.w, h = L->out.h, w = L->out.w;
    for (long ci = b; ci < e; ci++) {
        for (int y = 0; y < h; y++)
            memcpy(j->out + (ci * h + y) * w, j->in + (ci * H + y + L->pad_t) * W + L->pad_l,
                   sizeof(float) * w);
        act_apply(j->out + ci * h * w, (long)h * w, j->act);
    }
}

void nets_layer_crop(team_t *t, const nets_layer *L, long n, const float *in, float *out,
                     nets_act act)
{
    crop_job j = {L, in, out, act};
    par_for(t, (long)L->in.c * n, n * nets_shape_size(L->out), crop_run, &j);
}

/* ---- what the executor asks ---- */

int nets_layer_fused(nets_path path)
{
    return layers_engine(path);
}

size_t nets_layer_scratch(const nets_layer *L, long n, nets_path path, int threads)
{
    if (threads < 1 || threads > NETS_MAX_THREADS)
        threads = NETS_MAX_THREADS;
    size_t x = 0;
    int gemm = (L->type == NETS_L_CONV2D && !conv_is_pointwise(L)) || L->type == NETS_L_CONVT2D;
    if (gemm && !layers_engine(path)) { /* the column matrix: the blas path's alone */
        long rows, cols, chunk, nd;
        col_plan(L, n, &rows, &cols, &chunk, &nd);
        x = (size_t)nd;
    }
    /* the panels: the engines' alone */
    if (path != NETS_PATH_BLAS && (size_t)panel_need(L, n, path, threads) > x)
        x = (size_t)panel_need(L, n, path, threads);
    return x;
}
