/* layers.h -- private to src/nets: the layers over a batch (layers.c), as the executor (exec.c)
 * runs them. A batch of rank-3 samples is channel-major ([c][n][h][w]), of rank-1 samples
 * row-major ([n][c]); t is the call's team (NULL: everything on the calling thread). None of
 * these can fail: the executor has sized every buffer (nets_seq_workspace). */
#ifndef VBMEM_NETS_LAYERS_H
#define VBMEM_NETS_LAYERS_H

#include <stddef.h>

#include "nets/nets_internal.h"
#include "numerics/team.h"

/* Whether path fuses residual adds and crops into the convolutions: only the engines
 * (kernels_avx512.h, kernels_avx2.h) do. Only then may nets_layer_conv2d take a residual (add)
 * and nets_layer_convt2d a layer whose output is cropped (out and pad_t/pad_l moved by the crop).
 * The GEMM-shaped layers below run in the AVX-512 engine when path is NETS_PATH_ENGINE, in the
 * AVX2 engine when it is NETS_PATH_ENGINE_AVX2 (which the caller has checked can run), else by
 * im2col + cblas_sgemm (the oneDNN path is the executor's, onednn.h). */
int nets_layer_fused(nets_path path);

/* Floats of scratch layer L needs for n samples on `path` (the engines: a slot of panel buffers
 * for each of `threads` threads, outside 1 .. NETS_MAX_THREADS taken as NETS_MAX_THREADS; blas:
 * the im2col matrix; any other path, which may run layers on either: the larger) -- the `col`
 * argument below. 0 for layers without any (a residual's body is the executor's to add).
 * Cannot fail. */
size_t nets_layer_scratch(const nets_layer *L, long n, nets_path path, int threads);

/* out = act(conv2d(in) (+ add)); add must be NULL unless nets_layer_fused(path), else a
 * tensor laid out like out. in and out do not overlap. */
void nets_layer_conv2d(team_t *t, nets_path path, const nets_layer *L, long n, const float *in,
                       float *out, const float *add, float *col, nets_act act);

/* out = act(conv_transpose2d(in)), computed by output phases; in and out do not overlap. */
void nets_layer_convt2d(team_t *t, nets_path path, const nets_layer *L, long n, const float *in,
                        float *out, float *col, nets_act act);

/* out[i] = act(W in[i] + b) for the n rows of in; in and out do not overlap. */
void nets_layer_dense(team_t *t, nets_path path, const nets_layer *L, long n, const float *in,
                      float *out, float *col, nets_act act);

/* Group norm (per sample and group: mean and biased variance in double, then the
 * per-channel affine map) followed by act; in and out may be the same array. Its passes run in
 * 8 float lanes on the AVX2 engine's path, in 16 on a CPU with AVX-512F (VBMEM_NETS_NO_AVX512
 * unset) on the other paths, else in scalar code. */
void nets_layer_group_norm(team_t *t, nets_path path, const nets_layer *L, long n, const float *in,
                           float *out, nets_act act);

/* out = act(the centre L->out.h x L->out.w window of each channel of in). */
void nets_layer_crop(team_t *t, const nets_layer *L, long n, const float *in, float *out,
                     nets_act act);

/* y = act(y + x) over len floats (x may be NULL: y = act(y); x == y doubles). */
void nets_ew(team_t *t, float *y, const float *x, long len, nets_act act);

/* [n][c][hw] -> [c][n][hw] and back. */
void nets_to_cnhw(team_t *t, const float *in, float *out, long n, long c, long hw);
void nets_from_cnhw(team_t *t, const float *in, float *out, long n, long c, long hw);

#endif
