/* layers.c -- the layer kernels (conv2d by im2col + SGEMM, conv_transpose2d by per-phase im2col + SGEMM,
 * dense by SGEMM, group norm, activations, crop, layout changes) and the executor that runs a
 * parsed layer list over a batch in a caller-provided workspace. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nets/nets_internal.h"

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

int nets_layer_prepare(nets_layer *L) {
    if (L->type != NETS_L_CONVT2D) return 0;
    int k = L->k, s = L->stride, cin = L->cin, cout = L->cout;
    L->wp = malloc(sizeof(float) * (size_t)cout * cin * k * k);
    if (!L->wp) return -1;
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
    return 0;
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
        if (x > need) need = x;
    }
    return need;
}

/* ---- a team of threads for the work between the GEMMs ----
 *
 * The GEMMs run on the BLAS library's threads. Everything else (im2col, bias and
 * activations, group norm, layout changes) is memory-bound work that would leave all
 * but one core idle, so each nets_seq_run call starts a team of helper threads that
 * splits these loops with it, and joins them before returning. No state is shared
 * between calls. */

typedef void (*par_fn)(const void *ctx, long begin, long end);

typedef struct nets_team {
    int n; /* threads, the caller included */
    pthread_t th[NETS_MAX_THREADS];
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long gen;
    int pending, quit;
    par_fn fn;
    const void *ctx;
    long items;
} nets_team;

typedef struct {
    nets_team *t;
    int i;
} team_arg;

static void team_share(const nets_team *t, int i, par_fn fn, const void *ctx, long items) {
    long b = items * i / t->n, e = items * (i + 1) / t->n;
    if (b < e) fn(ctx, b, e);
}

static void *team_main(void *arg) {
    nets_team *t = ((team_arg *)arg)->t;
    int i = ((team_arg *)arg)->i;
    unsigned long seen = 0;
    for (;;) {
        pthread_mutex_lock(&t->mu);
        while (t->gen == seen && !t->quit) pthread_cond_wait(&t->go, &t->mu);
        if (t->quit) {
            pthread_mutex_unlock(&t->mu);
            return NULL;
        }
        seen = t->gen;
        par_fn fn = t->fn;
        const void *ctx = t->ctx;
        long items = t->items;
        pthread_mutex_unlock(&t->mu);
        team_share(t, i, fn, ctx, items);
        pthread_mutex_lock(&t->mu);
        if (--t->pending == 0) pthread_cond_signal(&t->done);
        pthread_mutex_unlock(&t->mu);
    }
}

/* Start up to want - 1 helpers (fewer if thread creation fails: the work then runs
 * on fewer threads, never fails). args must outlive the team. */
static void team_start(nets_team *t, int want, team_arg *args) {
    memset(t, 0, sizeof *t);
    t->n = 1;
    if (want > NETS_MAX_THREADS) want = NETS_MAX_THREADS;
    if (want <= 1) return;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->go, NULL);
    pthread_cond_init(&t->done, NULL);
    for (int i = 1; i < want; i++) {
        args[i] = (team_arg){t, i};
        if (pthread_create(&t->th[i], NULL, team_main, &args[i]) != 0) break;
        t->n = i + 1;
    }
    if (t->n == 1) {
        pthread_mutex_destroy(&t->mu);
        pthread_cond_destroy(&t->go);
        pthread_cond_destroy(&t->done);
    }
}

static void team_stop(nets_team *t) {
    if (t->n <= 1) return;
    pthread_mutex_lock(&t->mu);
    t->quit = 1;
    pthread_cond_broadcast(&t->go);
    pthread_mutex_unlock(&t->mu);
    for (int i = 1; i < t->n; i++) pthread_join(t->th[i], NULL);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->go);
    pthread_cond_destroy(&t->done);
}

/* fn over [0, items) split in equal ranges over the team; inline when the work
 * (about `work` floats touched) is too small to pay for waking the helpers. */
static void par_for(nets_team *t, long items, long work, par_fn fn, const void *ctx) {
    if (items <= 0) return;
    if (t->n <= 1 || items < 2 || work < 16384) {
        fn(ctx, 0, items);
        return;
    }
    pthread_mutex_lock(&t->mu);
    t->fn = fn;
    t->ctx = ctx;
    t->items = items;
    t->pending = t->n - 1;
    t->gen++;
    pthread_cond_broadcast(&t->go);
    pthread_mutex_unlock(&t->mu);
    team_share(t, 0, fn, ctx, items);
    pthread_mutex_lock(&t->mu);
    while (t->pending > 0) pthread_cond_wait(&t->done, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

/* ---- elementwise and layout, as ranges ---- */

#define NETS_EW_BLOCK 4096L /* elements per work item of elementwise loops */

typedef struct {
    float *y;
    const float *x;
    long len;
    nets_act act;
} ew_job;

static void ew_run(const void *c, long b, long e) {
    const ew_job *j = c;
    long lo = b * NETS_EW_BLOCK, hi = e * NETS_EW_BLOCK < j->len ? e * NETS_EW_BLOCK : j->len;
    if (j->x && j->x != j->y)
        for (long i = lo; i < hi; i++) j->y[i] += j->x[i];
    else if (j->x)
        for (long i = lo; i < hi; i++) j->y[i] *= 2.0f;
    act_apply(j->y + lo, hi - lo, j->act);
}

/* y = act(y + x) (x may be NULL; x == y doubles). */
static void ew(nets_team *t, float *y, const float *x, long len, nets_act act) {
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

static void bias_run(const void *c, long b, long e) {
    const bias_job *j = c;
    for (long r = b; r < e; r++) act_bias(j->y + r * j->ld, j->len, j->bias[r], j->act);
}

static void bias_rows(nets_team *t, float *y, long rows, long len, long ld, const float *bias, nets_act act) {
    bias_job j = {y, len, ld, bias, act};
    par_for(t, rows, rows * len, bias_run, &j);
}

/* [n][c][hw] <-> [c][n][hw]: items are channels. */
typedef struct {
    const float *in;
    float *out;
    long n, c, hw;
} layout_job;

static void to_cnhw_run(const void *v, long b, long e) {
    const layout_job *j = v;
    for (long k = b; k < e; k++)
        for (long i = 0; i < j->n; i++)
            memcpy(j->out + (k * j->n + i) * j->hw, j->in + (i * j->c + k) * j->hw, sizeof(float) * j->hw);
}

static void from_cnhw_run(const void *v, long b, long e) {
    const layout_job *j = v;
    for (long k = b; k < e; k++)
        for (long i = 0; i < j->n; i++)
            memcpy(j->out + (i * j->c + k) * j->hw, j->in + (k * j->n + i) * j->hw, sizeof(float) * j->hw);
}

static void to_cnhw(nets_team *t, const float *in, float *out, long n, long c, long hw) {
    layout_job j = {in, out, n, c, hw};
    par_for(t, c, n * c * hw, to_cnhw_run, &j);
}

static void from_cnhw(nets_team *t, const float *in, float *out, long n, long c, long hw) {
    layout_job j = {in, out, n, c, hw};
    par_for(t, c, n * c * hw, from_cnhw_run, &j);
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
static void im2col_run(const void *v, long rb, long re) {
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

static void conv2d(nets_team *t, const nets_layer *L, long n, const float *in, float *out, float *col,
                   nets_act act) {
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
static void im2col_phase_run(const void *v, long rb, long re) {
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

static void phase_store_run(const void *v, long cb, long ce) {
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

static void conv_transpose2d(nets_team *t, const nets_layer *L, long n, const float *in, float *out, float *col,
                             nets_act act) {
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

static void dense(nets_team *t, const nets_layer *L, long n, const float *in, float *out, nets_act act) {
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

static void gn_run(const void *v, long b, long e) {
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

static void group_norm(nets_team *t, const nets_layer *L, long n, const float *in, float *out, nets_act act) {
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

static void crop_run(const void *v, long b, long e) {
    const crop_job *j = v;
    const nets_layer *L = j->L;
    int H = L->in.h, W = L->in.w, h = L->out.h, w = L->out.w;
    for (long ci = b; ci < e; ci++) {
        for (int y = 0; y < h; y++)
            memcpy(j->out + (ci * h + y) * w, j->in + (ci * H + y + L->pad_t) * W + L->pad_l, sizeof(float) * w);
        act_apply(j->out + ci * h * w, (long)h * w, j->act);
    }
}

static void center_crop(nets_team *t, const nets_layer *L, long n, const float *in, float *out, nets_act act) {
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
    nets_team *team;
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
    nets_team *t = e->team;
    for (int i = 0; i < s->n; i++) {
        const nets_layer *L = &s->layers[i];
        if (crop_is_identity(L)) continue;
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
            dense(t, L, n, e->buf[cur], e->buf[o], act);
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

int nets_seq_run(const nets_seq *s, long n, const float *in, float *out, float *ws, int threads, char *err,
                 size_t errlen) {
    if (n <= 0) return nets_fail(err, errlen, "batch of %ld samples", n);
    if (n > INT_MAX / s->max_act / 2) return nets_fail(err, errlen, "batch of %ld samples is too large", n);
    float *own = NULL;
    if (!ws) {
        own = malloc(sizeof(float) * nets_seq_workspace(s, n));
        if (!own) return nets_fail(err, errlen, "out of memory for a batch of %ld samples", n);
        ws = own;
    }
    if (threads <= 0) { /* automatic: the BLAS library's count, for work that pays for starting helpers */
        threads = openblas_get_num_threads();
        if ((double)n * s->work < 4e6) threads = 1;
    }
    nets_team team;
    team_arg args[NETS_MAX_THREADS];
    team_start(&team, threads, args);
    exec_t e;
    memset(&e, 0, sizeof e);
    e.n = n;
    e.team = &team;
    e.nbuf = s->depth + 2;
    for (int i = 0; i < e.nbuf; i++) e.buf[i] = ws + (size_t)i * batch_act(s, n);
    e.col = ws + (size_t)e.nbuf * batch_act(s, n);
    long isz = nets_shape_size(s->in), osz = nets_shape_size(s->out);
    if (s->in.rank == 3)
        to_cnhw(&team, in, e.buf[0], n, s->in.c, (long)s->in.h * s->in.w);
    else
        memcpy(e.buf[0], in, sizeof(float) * n * isz);
    int r = run_seq(&e, s, 0, 0);
    if (s->out.rank == 3)
        from_cnhw(&team, e.buf[r], out, n, s->out.c, (long)s->out.h * s->out.w);
    else
        memcpy(out, e.buf[r], sizeof(float) * n * osz);
    team_stop(&team);
    free(own);
    return 0;
}
