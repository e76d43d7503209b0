/* onednn.h -- the networks' oneDNN path: conv2d and dense layers run as oneDNN primitives (the
 * library's own layouts inside a layer, our channel-major batch at its edges), one per-call
 * context holding the library's engine and stream. Transposed convolutions are not taken here:
 * oneDNN 2.6's deconvolution lost to the blas path's output phases (docs/design/networks.md). */
#ifndef VBMEM_NETS_ONEDNN_H
#define VBMEM_NETS_ONEDNN_H

#include "nets/nets_internal.h"

/* Opaque: the per-call context. */
typedef struct nets_dnn nets_dnn;

/* Whether this build has the oneDNN path (libdnnl was found at configure time). */
int nets_dnn_built(void);

/* A context for one nets_seq_run call: oneDNN's CPU engine and an in-order stream whose
 * primitives run on `threads` OpenMP threads (set on the calling thread only). Returns NULL
 * when the library cannot create them (out of memory, or no oneDNN in this build); the
 * caller then runs the layers on another path. Free with nets_dnn_free (NULL accepted). */
nets_dnn *nets_dnn_new(int threads);
void nets_dnn_free(nets_dnn *d);

/* The ISA oneDNN's kernels use in this process ("avx512_core", "avx2", ...; capped by
 * ONEDNN_MAX_CPU_ISA), or "none" without oneDNN. Static string. */
const char *nets_dnn_isa(void);

/* out = act(layer(in)) for a conv2d or dense layer L over n samples, in and
 * out laid out as the executor keeps them ([c][n][h][w] for images, [n][c] for vectors; they do
 * not overlap). Returns 0 when done, -1 for another layer type, or when oneDNN refused the layer
 * or ran out of memory:
 * out is then unspecified and the caller computes the layer on another path. */
int nets_dnn_layer(nets_dnn *d, const nets_layer *L, long n, const float *in, float *out,
                   nets_act act);

#endif
