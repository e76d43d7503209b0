/* onednn.c -- the networks' oneDNN path (see onednn.h): conv2d and dense as oneDNN primitives,
 * with the activation that follows as an eltwise post-op; stubs when the build has no oneDNN
 * (VBMEM_HAVE_DNNL unset). */
#define _POSIX_C_SOURCE 200809L /* posix_memalign */
#include <stdlib.h>
#include <string.h>

#include "nets/onednn.h"

#ifdef VBMEM_HAVE_DNNL
#include <dnnl.h>
#include <omp.h>

/* Buffers for the library's layouts of a layer's source, weights and destination, and its
 * scratchpad: kept for the whole call and grown as needed, so that a call touches fresh memory
 * once, not at every layer (measured: a fresh 6 MB buffer per layer cost the bundled decoder
 * more than its largest convolution). */
enum { DNN_SRC, DNN_WEI, DNN_DST, DNN_SCR, DNN_NBUF };

struct nets_dnn {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    int threads;
    void *buf[DNN_NBUF];
    size_t cap[DNN_NBUF];
};

/* Buffer `slot` of at least `bytes` (64-byte aligned), or NULL when out of memory. */
static void *dnn_buf(nets_dnn *d, int slot, size_t bytes)
{
    if (bytes == 0)
        bytes = 64;
    if (d->cap[slot] >= bytes)
        return d->buf[slot];
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes) != 0)
        return NULL;
    free(d->buf[slot]);
    d->buf[slot] = p;
    d->cap[slot] = bytes;
    return p;
}

int nets_dnn_built(void)
{
    return 1;
}

nets_dnn *nets_dnn_new(int threads)
{
    nets_dnn *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->threads = threads > 0 ? threads : 1;
    if (dnnl_engine_create(&d->eng, dnnl_cpu, 0) != dnnl_success) {
        free(d);
        return NULL;
    }
    if (dnnl_stream_create(&d->st, d->eng, dnnl_stream_default_flags) != dnnl_success) {
        dnnl_engine_destroy(d->eng);
        free(d);
        return NULL;
    }
    return d;
}

void nets_dnn_free(nets_dnn *d)
{
    if (!d)
        return;
    dnnl_stream_destroy(d->st);
    dnnl_engine_destroy(d->eng);
    for (int i = 0; i < DNN_NBUF; i++)
        free(d->buf[i]);
    free(d);
}

const char *nets_dnn_isa(void)
{
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
    }
}

/* A memory object over the caller's buffer (handle), or over buffer `slot` of the context when
 * handle is NULL; NULL on failure. */
static dnnl_memory_t dnn_mem(nets_dnn *d, const dnnl_memory_desc_t *md, void *handle, int slot)
{
    dnnl_memory_t m = NULL;
    if (!handle)
        handle = dnn_buf(d, slot, dnnl_memory_desc_get_size(md));
    if (!handle)
        return NULL;
    if (dnnl_memory_create(&m, md, d->eng, handle) != dnnl_success)
        return NULL;
    return m;
}

/* Copy memory `from` into `to` (their descriptors differ only in layout); 0 or -1. */
static int dnn_reorder(nets_dnn *d, dnnl_memory_t from, dnnl_memory_t to)
{
    const dnnl_memory_desc_t *a, *b;
    dnnl_memory_get_memory_desc(from, &a);
    dnnl_memory_get_memory_desc(to, &b);
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t p = NULL;
    int rc = -1;
    if (dnnl_reorder_primitive_desc_create(&pd, a, d->eng, b, d->eng, NULL) == dnnl_success
        && dnnl_primitive_create(&p, pd) == dnnl_success) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
        rc = dnnl_primitive_execute(p, d->st, 2, args) == dnnl_success ? 0 : -1;
    }
    if (p)
        dnnl_primitive_destroy(p);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    return rc;
}

/* The primitive's memory for argument `what` (query q): the user's memory itself when the
 * primitive takes its layout, else one over buffer `slot` (filled from user when `fill`). Sets
 * *own to the memory object to destroy (NULL when none). Returns NULL on failure. */
static dnnl_memory_t dnn_arg(nets_dnn *d, dnnl_primitive_desc_t pd, dnnl_query_t q,
                             dnnl_memory_t user, int fill, int slot, dnnl_memory_t *own)
{
    const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, q, 0);
    const dnnl_memory_desc_t *have;
    *own = NULL;
    dnnl_memory_get_memory_desc(user, &have);
    if (dnnl_memory_desc_equal(want, have))
        return user;
    dnnl_memory_t m = dnn_mem(d, want, NULL, slot);
    if (!m)
        return NULL;
    if (fill && dnn_reorder(d, user, m) != 0) {
        dnnl_memory_destroy(m);
        return NULL;
    }
    *own = m;
    return m;
}

/* The operation descriptor of conv2d or dense layer L over n samples, with "any" layouts for
 * the primitive's source, weights and destination (dense: the destination in the user's); the
 * user's layouts in *usrc, *uwei, *ubias, *udst. -1 for a layer of another type. */
typedef union {
    dnnl_convolution_desc_t conv;
    dnnl_inner_product_desc_t ip;
} dnn_op;

static int dnn_op_init(const nets_layer *L, long n, dnn_op *op, dnnl_memory_desc_t *usrc,
                       dnnl_memory_desc_t *uwei, dnnl_memory_desc_t *ubias,
                       dnnl_memory_desc_t *udst)
{
    dnnl_memory_desc_t asrc, awei, adst;
    dnnl_dims_t bd = {L->cout};
    if (dnnl_memory_desc_init_by_tag(ubias, 1, bd, dnnl_f32, dnnl_a) != dnnl_success)
        return -1;
    if (L->type == NETS_L_DENSE) {
        dnnl_dims_t sd = {n, L->cin}, wd = {L->cout, L->cin}, dd = {n, L->cout};
        if (dnnl_memory_desc_init_by_tag(usrc, 2, sd, dnnl_f32, dnnl_ab) != dnnl_success
            || dnnl_memory_desc_init_by_tag(uwei, 2, wd, dnnl_f32, dnnl_ab) != dnnl_success
            || dnnl_memory_desc_init_by_tag(udst, 2, dd, dnnl_f32, dnnl_ab) != dnnl_success
            || dnnl_memory_desc_init_by_tag(&asrc, 2, sd, dnnl_f32, dnnl_format_tag_any)
                   != dnnl_success
            || dnnl_memory_desc_init_by_tag(&awei, 2, wd, dnnl_f32, dnnl_format_tag_any)
                   != dnnl_success)
            return -1;
        /* the destination keeps the user's layout: [n][cout] is what the executor wants */
        return dnnl_inner_product_forward_desc_init(&op->ip, dnnl_forward_inference, &asrc, &awei,
                                                    ubias, udst)
                       == dnnl_success
                   ? 0
                   : -1;
    }
    if (L->type != NETS_L_CONV2D)
        return -1; /* conv_transpose2d: the executor runs it on the blas path (exec.c) */
    int k = L->k, s = L->stride;
    dnnl_dims_t sd = {n, L->cin, L->in.h, L->in.w}, dd = {n, L->cout, L->out.h, L->out.w},
                wd = {L->cout, L->cin, k, k}, strides = {s, s}, pl = {L->pad_t, L->pad_l}, pr;
    /* the executor's batch is channel-major: [c][n][h][w] is oneDNN's "bacd" */
    if (dnnl_memory_desc_init_by_tag(usrc, 4, sd, dnnl_f32, dnnl_bacd) != dnnl_success
        || dnnl_memory_desc_init_by_tag(udst, 4, dd, dnnl_f32, dnnl_bacd) != dnnl_success
        || dnnl_memory_desc_init_by_tag(&asrc, 4, sd, dnnl_f32, dnnl_format_tag_any) != dnnl_success
        || dnnl_memory_desc_init_by_tag(&adst, 4, dd, dnnl_f32, dnnl_format_tag_any) != dnnl_success
        || dnnl_memory_desc_init_by_tag(&awei, 4, wd, dnnl_f32, dnnl_format_tag_any)
               != dnnl_success)
        return -1;
    /* PyTorch's weights [cout][cin][k][k] are oneDNN's "oihw"; the right padding is what makes
     * oneDNN's output size formula give L->out (never negative: a 'valid' convolution's last
     * partial window is dropped by the formula's floor) */
    pr[0] = (L->out.h - 1) * s + k - L->in.h - L->pad_t;
    pr[1] = (L->out.w - 1) * s + k - L->in.w - L->pad_l;
    for (int i = 0; i < 2; i++)
        if (pr[i] < 0)
            pr[i] = 0;
    if (dnnl_memory_desc_init_by_tag(uwei, 4, wd, dnnl_f32, dnnl_oihw) != dnnl_success)
        return -1;
    return dnnl_convolution_forward_desc_init(&op->conv, dnnl_forward_inference,
                                              dnnl_convolution_direct, &asrc, &awei, ubias, &adst,
                                              strides, pl, pr)
                   == dnnl_success
               ? 0
               : -1;
}

/* The primitive attributes: the activation as a post-op, a scratchpad the caller provides
 * (so that two calls may run the same cached primitive at once). NULL on failure. */
static dnnl_primitive_attr_t dnn_attr(nets_act act)
{
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success)
        return NULL;
    int ok =
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    if (ok && act != ACT_NONE) {
        dnnl_alg_kind_t alg = act == ACT_RELU    ? dnnl_eltwise_relu
                              : act == ACT_SWISH ? dnnl_eltwise_swish
                                                 : dnnl_eltwise_logistic;
        /* swish: x * sigmoid(alpha x) with alpha 1; relu: negative slope alpha 0 */
        float alpha = act == ACT_SWISH ? 1.0f : 0.0f;
        ok = dnnl_post_ops_create(&po) == dnnl_success
             && dnnl_post_ops_append_eltwise(po, 1.0f, alg, alpha, 0.0f) == dnnl_success
             && dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
        if (po)
            dnnl_post_ops_destroy(po);
    }
    if (!ok) {
        dnnl_primitive_attr_destroy(attr);
        return NULL;
    }
    return attr;
}

int nets_dnn_layer(nets_dnn *d, const nets_layer *L, long n, const float *in, float *out,
                   nets_act act)
{
    dnn_op op;
    dnnl_memory_desc_t usrc, uwei, ubias, udst;
    if (dnn_op_init(L, n, &op, &usrc, &uwei, &ubias, &udst) != 0)
        return -1;
    dnnl_primitive_attr_t attr = dnn_attr(act);
    if (!attr)
        return -1;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_memory_t m_src = NULL, m_wei = NULL, m_bias = NULL, m_dst = NULL, m_scr = NULL;
    dnnl_memory_t src = NULL, wei = NULL, dst = NULL, o_src = NULL, o_wei = NULL, o_dst = NULL;
    int rc = -1;
    omp_set_num_threads(d->threads);
    if (dnnl_primitive_desc_create(&pd, &op, attr, d->eng, NULL) != dnnl_success
        || dnnl_primitive_create(&prim, pd) != dnnl_success)
        goto done;
    /* oneDNN does not write through a source or weights handle: the casts drop const only to
     * fit its signature */
    m_src = dnn_mem(d, &usrc, (void *)in, 0);
    m_wei = dnn_mem(d, &uwei, (void *)L->w, 0);
    m_bias = dnn_mem(d, &ubias, (void *)L->b, 0);
    m_dst = dnn_mem(d, &udst, out, 0);
    m_scr =
        dnn_mem(d, dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0), NULL, DNN_SCR);
    if (!m_src || !m_wei || !m_bias || !m_dst || !m_scr)
        goto done;
    src = dnn_arg(d, pd, dnnl_query_src_md, m_src, 1, DNN_SRC, &o_src);
    wei = src ? dnn_arg(d, pd, dnnl_query_weights_md, m_wei, 1, DNN_WEI, &o_wei) : NULL;
    dst = wei ? dnn_arg(d, pd, dnnl_query_dst_md, m_dst, 0, DNN_DST, &o_dst) : NULL;
    if (!dst)
        goto done;
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, src},
                               {DNNL_ARG_WEIGHTS, wei},
                               {DNNL_ARG_BIAS, m_bias},
                               {DNNL_ARG_DST, dst},
                               {DNNL_ARG_SCRATCHPAD, m_scr}};
    if (dnnl_primitive_execute(prim, d->st, 5, args) != dnnl_success)
        goto done;
    if (o_dst && dnn_reorder(d, o_dst, m_dst) != 0)
        goto done;
    rc = dnnl_stream_wait(d->st) == dnnl_success ? 0 : -1;
done:
    if (rc != 0)
        dnnl_stream_wait(d->st); /* nothing of this call may still run on the buffers */
    dnnl_memory_t mems[] = {m_src, m_wei, m_bias, m_dst, m_scr, o_src, o_wei, o_dst};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        if (mems[i])
            dnnl_memory_destroy(mems[i]);
    if (prim)
        dnnl_primitive_destroy(prim);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    return rc;
}

#else /* no oneDNN in this build */

int nets_dnn_built(void)
{
    return 0;
}

nets_dnn *nets_dnn_new(int threads)
{
    (void)threads;
    return NULL;
}

void nets_dnn_free(nets_dnn *d)
{
    (void)d;
}

const char *nets_dnn_isa(void)
{
    return "none";
}

int nets_dnn_layer(nets_dnn *d, const nets_layer *L, long n, const float *in, float *out,
                   nets_act act)
{
    (void)d;
    (void)L;
    (void)n;
    (void)in;
    (void)out;
    (void)act;
    return -1;
}

#endif
