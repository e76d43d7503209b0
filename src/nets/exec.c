/* exec.c -- the executor: runs a parsed layer list over a batch in a caller-provided workspace
 * (buffer rotation, residual blocks, fusing activations, crops and residual adds into the layer
 * before them), and sizes that workspace. */
#include <cblas.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "nets/layers.h"
#include "nets/onednn.h"

static long round16(long x)
{
    return (x + 15) / 16 * 16;
}

/* Floats of scratch (im2col or panel buffers) the layers of s need for n samples on path,
 * run by `threads` threads, bodies included. */
static size_t col_need(const nets_seq *s, long n, nets_path path, int threads)
{
    size_t need = 0;
    for (int i = 0; i < s->n; i++) {
        const nets_layer *L = &s->layers[i];
        size_t x = L->type == NETS_L_RESIDUAL ? col_need(L->body, n, path, threads) : 0;
        if (nets_layer_scratch(L, n, path, threads) > x)
            x = nets_layer_scratch(L, n, path, threads);
        if (x > need)
            need = x;
    }
    return need;
}

static int crop_is_identity(const nets_layer *L)
{
    return L->type == NETS_L_CROP && L->out.h == L->in.h && L->out.w == L->in.w;
}

typedef struct {
    float *buf[NETS_MAX_DEPTH + 2];
    int nbuf;
    float *col;
    long n;
    team_t *team;
    nets_path path; /* ENGINE, ONEDNN (then dnn is set) or BLAS */
    nets_dnn *dnn;
} exec_t;

static int free_buf(const exec_t *e, int cur, unsigned prot)
{
    for (int i = 0; i < e->nbuf; i++)
        if (i != cur && !(prot >> i & 1u))
            return i;
    return -1; /* unreachable: nbuf = depth + 2 */
}

static nets_act act_of(const nets_layer *L)
{
    switch (L->type) {
    case NETS_L_RELU: return ACT_RELU;
    case NETS_L_SWISH: return ACT_SWISH;
    case NETS_L_SIGMOID: return ACT_SIGMOID;
    default: return ACT_NONE;
    }
}

/* A GEMM-shaped layer (conv2d, conv_transpose2d, dense) on the run's path. On the oneDNN path
 * transposed convolutions run on the blas path (by output phases): with oneDNN 2.6's
 * deconvolution the CIFAR decoder of bench-nets ran 2x slower, with AVX2 and AVX-512 kernels
 * alike; and a layer the library refuses (or cannot allocate for) runs on the blas path. */
static void gemm_layer(const exec_t *e, const nets_layer *L, const float *in, float *out,
                       nets_act act)
{
    nets_path path = e->path;
    if (path == NETS_PATH_ONEDNN && L->type != NETS_L_CONVT2D) {
        if (nets_dnn_layer(e->dnn, L, e->n, in, out, act) == 0)
            return;
    }
    if (path == NETS_PATH_ONEDNN)
        path = NETS_PATH_BLAS;
    if (L->type == NETS_L_CONV2D)
        nets_layer_conv2d(e->team, path, L, e->n, in, out, NULL, e->col, act);
    else if (L->type == NETS_L_CONVT2D)
        nets_layer_convt2d(e->team, path, L, e->n, in, out, e->col, act);
    else
        nets_layer_dense(e->team, path, L, e->n, in, out, e->col, act);
}

/* Run s on the batch in buffer cur (protected buffers are never written);
 * returns the buffer that holds the result. */
static int run_seq(exec_t *e, const nets_seq *s, int cur, unsigned prot)
{
    long n = e->n;
    team_t *t = e->team;
    for (int i = 0; i < s->n; i++) {
        const nets_layer *L = &s->layers[i];
        if (crop_is_identity(L))
            continue;
        /* In the engine a transposed convolution followed by a crop computes only the
         * kept pixels: the crop moves its first kept row and column. */
        nets_layer cropped;
        if (L->type == NETS_L_CONVT2D && nets_layer_fused(e->path)) {
            int j = i + 1;
            while (j < s->n && crop_is_identity(&s->layers[j]))
                j++;
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
        int fusable = L->type == NETS_L_CONV2D || L->type == NETS_L_CONVT2D
                      || L->type == NETS_L_DENSE || L->type == NETS_L_GROUP_NORM
                      || L->type == NETS_L_RESIDUAL || L->type == NETS_L_CROP;
        if (fusable) {
            int j = i + 1;
            while (j < s->n && crop_is_identity(&s->layers[j]))
                j++;
            if (j < s->n && act_of(&s->layers[j]) != ACT_NONE) {
                act = act_of(&s->layers[j]);
                i = j;
            }
        }
        int o = free_buf(e, cur, prot);
        int inplace_ok = !(prot >> cur & 1u);
        switch (L->type) {
        case NETS_L_CONV2D:
        case NETS_L_CONVT2D:
        case NETS_L_DENSE:
            gemm_layer(e, L, e->buf[cur], e->buf[o], act);
            cur = o;
            break;
        case NETS_L_GROUP_NORM:
            if (inplace_ok)
                o = cur;
            nets_layer_group_norm(t, e->path, L, n, e->buf[cur], e->buf[o], act);
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
            nets_ew(t, e->buf[o], NULL, len, act_of(L));
            cur = o;
            break;
        }
        case NETS_L_FLATTEN:
            if (L->in.rank == 3) {
                nets_from_cnhw(t, e->buf[cur], e->buf[o], n, L->in.c, (long)L->in.h * L->in.w);
                cur = o;
            }
            break;
        case NETS_L_RESHAPE:
            nets_to_cnhw(t, e->buf[cur], e->buf[o], n, L->out.c, (long)L->out.h * L->out.w);
            cur = o;
            break;
        case NETS_L_CROP:
            nets_layer_crop(t, L, n, e->buf[cur], e->buf[o], act);
            cur = o;
            break;
        case NETS_L_RESIDUAL: {
            /* In the engine a body that ends with a convolution adds the block's input
             * (and applies the activation after the block) in that convolution's stores. */
            const nets_seq *body = L->body;
            int last = body->n - 1;
            while (last >= 0 && crop_is_identity(&body->layers[last]))
                last--;
            if (nets_layer_fused(e->path) && last >= 0
                && body->layers[last].type == NETS_L_CONV2D) {
                nets_seq head = *body;
                head.n = last;
                int r = run_seq(e, &head, cur, prot | 1u << cur);
                int o2 = free_buf(e, r, prot | 1u << cur);
                nets_layer_conv2d(t, e->path, &body->layers[last], n, e->buf[r], e->buf[o2],
                                  e->buf[cur], e->col, act);
                cur = o2;
                break;
            }
            long len = n * nets_shape_size(L->in);
            int r = run_seq(e, L->body, cur, prot | 1u << cur);
            if (r == cur) { /* empty body: x + x */
                memcpy(e->buf[o], e->buf[cur], sizeof(float) * len);
                nets_ew(t, e->buf[o], e->buf[o], len, act);
                r = o;
            } else {
                nets_ew(t, e->buf[r], e->buf[cur], len, act);
            }
            cur = r;
            break;
        }
        }
    }
    return cur;
}

static long batch_act(const nets_seq *s, long n)
{
    return round16(n * s->max_act);
}

size_t nets_seq_workspace(const nets_seq *s, long n, nets_path path, int threads)
{
    return (size_t)(s->depth + 2) * (size_t)batch_act(s, n) + col_need(s, n, path, threads);
}

void nets_runner_start(nets_runner *r, const nets_seq *s, long n, int threads, nets_path path)
{
    if (threads
        <= 0) { /* automatic: the BLAS library's count, for work that pays for starting helpers */
        threads = openblas_get_num_threads();
        if ((double)n * s->work < 4e6)
            threads = 1;
    }
    if (threads > NETS_MAX_THREADS)
        threads = NETS_MAX_THREADS;
    r->path = path != NETS_PATH_AUTO && nets_path_runs(path) ? path : nets_path_default();
    r->dnn = NULL;
    if (r->path == NETS_PATH_ONEDNN) {
        r->dnn = nets_dnn_new(threads);
        if (!r->dnn) /* the library could not start: the same layers on the blas path */
            r->path = NETS_PATH_BLAS;
    }
    /* On the oneDNN path the library's OpenMP threads run the GEMM-shaped layers; a team of
     * our own next to them would spin while they run, and they while it runs, so the rest runs
     * on the calling thread (a choice of design: on the loaded machine it was measured on, the
     * load hid any difference between the two). */
    r->team = r->path == NETS_PATH_ONEDNN ? NULL : team_new(threads);
}

void nets_runner_stop(nets_runner *r)
{
    nets_dnn_free(r->dnn);
    team_free(r->team);
    r->dnn = NULL;
    r->team = NULL;
}

vbm_status nets_seq_run_with(const nets_seq *s, long n, const float *in, float *out, float *ws,
                             const nets_runner *r, vbm_error *err)
{
    if (n <= 0)
        return vbm_fail(err, VBM_EINVAL, NULL, "batch of %ld samples", n);
    if (n > INT_MAX / s->max_act / 2)
        return vbm_fail(err, VBM_EINVAL, NULL, "batch of %ld samples is too large", n);
    exec_t e;
    memset(&e, 0, sizeof e);
    e.n = n;
    e.path = r->path;
    e.dnn = r->dnn;
    e.team = r->team; /* NULL (also out of memory): everything runs on this thread */
    team_t *team = e.team;
    e.nbuf = s->depth + 2;
    for (int i = 0; i < e.nbuf; i++)
        e.buf[i] = ws + (size_t)i * batch_act(s, n);
    e.col = ws + (size_t)e.nbuf * batch_act(s, n);
    long isz = nets_shape_size(s->in), osz = nets_shape_size(s->out);
    if (s->in.rank == 3)
        nets_to_cnhw(team, in, e.buf[0], n, s->in.c, (long)s->in.h * s->in.w);
    else
        memcpy(e.buf[0], in, sizeof(float) * n * isz);
    int res = run_seq(&e, s, 0, 0);
    if (s->out.rank == 3)
        nets_from_cnhw(team, e.buf[res], out, n, s->out.c, (long)s->out.h * s->out.w);
    else
        memcpy(out, e.buf[res], sizeof(float) * n * osz);
    return VBM_OK;
}

vbm_status nets_seq_run(const nets_seq *s, long n, const float *in, float *out, float *ws,
                        int threads, nets_path path, vbm_error *err)
{
    if (n <= 0)
        return vbm_fail(err, VBM_EINVAL, NULL, "batch of %ld samples", n);
    if (n > INT_MAX / s->max_act / 2)
        return vbm_fail(err, VBM_EINVAL, NULL, "batch of %ld samples is too large", n);
    nets_runner r;
    nets_runner_start(&r, s, n, threads, path);
    float *own = NULL;
    if (!ws) {
        own = malloc(sizeof(float) * nets_seq_workspace(s, n, r.path, team_size(r.team)));
        if (!own) {
            nets_runner_stop(&r);
            return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for a batch of %ld samples", n);
        }
        ws = own;
    }
    vbm_status rc = nets_seq_run_with(s, n, in, out, ws, &r, err);
    nets_runner_stop(&r);
    free(own);
    return rc;
}
