/* nets_internal.h -- private to src/nets (and its tests): parsed layer lists with their shapes
 * and bound weights, the model struct, the per-call workspace; the functions of modelfile.c
 * (parsing), layers.c (nets_layer_prepare) and exec.c (the executor). */
#ifndef VBMEM_NETS_INTERNAL_H
#define VBMEM_NETS_INTERNAL_H

#include <stddef.h>

#include "nets/nets.h"
#include "nets/safetensors.h"

#define NETS_MAX_DIM    65536 /* any channel count, height, width, feature count */
#define NETS_MAX_KERNEL 64    /* kernel size and stride */
#define NETS_MAX_ACT                                                                               \
    ((long)1 << 24)           /* elements of one sample's activation, and of one image's im2col */
#define NETS_MAX_DEPTH   16   /* nesting of residual blocks */
#define NETS_MAX_LAYERS  4096 /* layers in one list, bodies included */
#define NETS_MAX_THREADS 64   /* threads of one call */

typedef enum {
    NETS_L_CONV2D,
    NETS_L_CONVT2D,
    NETS_L_DENSE,
    NETS_L_GROUP_NORM,
    NETS_L_RELU,
    NETS_L_SWISH,
    NETS_L_SIGMOID,
    NETS_L_FLATTEN,
    NETS_L_RESHAPE,
    NETS_L_CROP,
    NETS_L_RESIDUAL
} nets_ltype;

/* An activation applied in a layer's last pass (fused) or on its own. */
typedef enum { ACT_NONE = 0, ACT_RELU, ACT_SWISH, ACT_SIGMOID } nets_act;

/* Shape of one sample: rank 3 [c, h, w] or rank 1 [c] (h = w = 1).
 * In a workspace a batch of rank-3 tensors is stored channel-major, [c][n][h][w]
 * ("CNHW": a convolution is then one GEMM over the whole batch), a batch of
 * rank-1 tensors row-major [n][c]. */
typedef struct {
    int rank;
    int c, h, w;
} nets_shape;

struct nets_seq;

typedef struct {
    nets_ltype type;
    char label[96]; /* for messages: the layer's name, or its position */
    nets_shape in, out;
    int cin, cout; /* conv2d, conv_transpose2d, dense */
    int k, stride;
    int pad_t, pad_l; /* conv2d: zero rows/cols before; conv_transpose2d: first kept row/col */
    int groups;       /* group_norm */
    double eps;
    const float *w, *b; /* bound weights (owned by the model's sft_file) */
    float *wp; /* conv_transpose2d: weights repacked per output phase; conv2d and dense layers
                * the AVX2 engine runs on their input's phases or by output pixels: by phase, or
                * transposed (layers.c); else NULL (owned) */
    struct nets_seq *body; /* residual */
} nets_layer;

typedef struct nets_seq {
    nets_layer *layers;
    int n;
    nets_shape in, out;
    long max_act; /* largest per-sample activation, bodies included */
    long work;    /* floats written per sample by all layers (outputs and im2col), roughly */
    int depth;    /* nesting of residual blocks inside */
    /* Over the GEMM-shaped layers (bodies included): multiply-adds per sample, and the sum of
     * those times the layer's larger activation (per sample), for nets_seq_chunk. */
    double macs, macs_act;
} nets_seq;

struct nets_model {
    nets_info info;
    sft_file file;
    nets_seq enc, dec;
};

/* Per-call scratch memory; grows as needed, never shrinks. */
struct nets_workspace {
    float *mem;
    size_t cap;     /* floats */
    int threads;    /* 0: as many as the BLAS library uses */
    nets_path path; /* AUTO: nets_path_default() */
};

/* "[c,h,w]" or "[c]". */
void nets_shape_str(nets_shape s, char *buf, size_t len);

/* Elements of one sample of shape s. */
static inline long nets_shape_size(nets_shape s)
{
    return (long)s.c * s.h * s.w;
}

/* Parse a JSON layer list (a jansson array passed as void * so that this header
 * does not need jansson), chain shapes from `in`, check every field, bind and mark
 * the tensors of file f. `which` ("encoder"/"decoder") labels unnamed layers.
 * On success fills *out (free with nets_seq_free) and returns VBM_OK. Fails with
 * VBM_EFORMAT (a bad layer: the message names it, "layer <label> (<type>): ...")
 * or VBM_ENOMEM; then *out is empty and err (may be NULL) holds the message (no
 * field). */
vbm_status nets_seq_parse(const void *list, const char *which, nets_shape in, sft_file *f,
                          nets_seq *out, vbm_error *err);
void nets_seq_free(nets_seq *s);

/* Precompute what a bound layer needs at run time, into L->wp: the per-phase weights of a
 * transposed convolution, and for the AVX2 engine, where this CPU can run it, the weights of a
 * stride-2 conv2d by input phase or the transposed weights of a layer run by output pixels
 * (layers.c); nothing for other layers. Returns VBM_OK, or VBM_ENOMEM (err filled, may be NULL). */
vbm_status nets_layer_prepare(nets_layer *L, vbm_error *err);

/* Floats of workspace nets_seq_run needs for a batch of n samples whose layers run on `path`
 * (NETS_PATH_AUTO: whichever runs) on a team of at most `threads` threads (outside 1 ..
 * NETS_MAX_THREADS, as for an automatic count: NETS_MAX_THREADS); see nets_layer_scratch.
 * Cannot fail. */
size_t nets_seq_workspace(const nets_seq *s, long n, nets_path path, int threads);

/* Frames per chunk in which nets_encode_ws / nets_decode_ws run n >= 1 frames through s (its
 * activations kept near a core's L2 cache, nets.c); between 1 and n. Cannot fail. */
long nets_seq_chunk(const nets_seq *s, long n);

/* What runs the layers of one call, over all its chunks: the path, the thread team (NULL:
 * the calling thread alone) and, on the oneDNN path, the library's context. */
struct vbm_team;
struct nets_dnn;
typedef struct {
    nets_path path;
    struct vbm_team *team;
    struct nets_dnn *dnn;
} nets_runner;

/* Set r up for running s on batches of n samples in all (threads and path as nets_seq_run
 * takes them; the automatic thread count is decided on n). Never fails: without memory for a
 * team everything runs on the calling thread, and a oneDNN library that cannot start leaves
 * the layers to the blas path. Undo with nets_runner_stop. */
void nets_runner_start(nets_runner *r, const nets_seq *s, long n, int threads, nets_path path);
void nets_runner_stop(nets_runner *r);

/* nets_seq_run on a runner started by nets_runner_start (ws not NULL). */
vbm_status nets_seq_run_with(const nets_seq *s, long n, const float *in, float *out, float *ws,
                             const nets_runner *r, vbm_error *err);

/* Run the layers on n samples: in is n x prod(s->in) in the caller's layout
 * (NCHW or N x features), out receives n x prod(s->out) in the same layout.
 * ws must hold nets_seq_workspace(s, n, path, threads) floats (NULL: allocate). The work
 * between GEMMs is shared by `threads` threads (the caller and helpers started
 * and joined by this call; <= 0: automatic, the BLAS library's thread count when
 * the batch is large enough to pay for starting helpers, else 1). Returns VBM_OK;
 * fails with VBM_EINVAL (n <= 0, or a batch too large to index) or VBM_ENOMEM
 * (no ws given and none could be allocated), err (may be NULL) filled. The layers run on
 * `path` (AUTO: nets_path_default(); a path that cannot run here is taken as AUTO); on the
 * oneDNN path a layer the library refuses runs on the blas path instead. */
vbm_status nets_seq_run(const nets_seq *s, long n, const float *in, float *out, float *ws,
                        int threads, nets_path path, vbm_error *err);

#endif
