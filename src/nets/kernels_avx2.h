/* kernels_avx2.h -- the AVX2 GEMM engine of the networks: the AVX-512 engine's jobs (kern_job of
 * kernels_avx512.h) run with AVX2 and FMA, for x86-64 CPUs without AVX-512F, and the vector
 * helpers of group norm in 8 lanes.
 *
 * A job is computed as in the AVX-512 engine, out[m][dest(j)] = act(bias[m] + sum_k A[m][k]
 * B[k][j] (+ add[m][dest(j)])), with one mode only: a thread packs KERN_AVX2_PANEL columns of
 * the implicit im2col matrix B at a time (a panel, K x 24 floats) straight from the input with
 * masked loads (flat panels of consecutive pixels for 'same' stride-1 convolutions, runs of a
 * grid row for other stride-1 ones, gathers otherwise), runs A over it KERN_AVX2_MR rows at a
 * time with a 4 x 24 register-blocked kernel (12 ymm accumulators), and stores the results with
 * bias, residual and activation applied straight into the output. The call's team splits the
 * panels. The job fields rows, rw and half (the AVX-512 engine's direct mode) are not used. */
#ifndef VBMEM_NETS_KERNELS_AVX2_H
#define VBMEM_NETS_KERNELS_AVX2_H

#include "nets/kernels_avx512.h"
#include "numerics/team.h"

#define KERN_AVX2_MR      4  /* rows of A per kernel call */
#define KERN_AVX2_NV      3  /* 8-lane vectors per panel row */
#define KERN_AVX2_PANEL   24 /* columns of a panel: KERN_AVX2_NV * 8, at most KERN_PANEL - 8 */
#define KERN_AVX2_PW_ROWS 2  /* most output channels of kern_avx2_pointwise */

/* Whether the AVX2 engine runs on this CPU: AVX2 and FMA present (probed once, thread-safe;
 * VBMEM_NETS_NO_AVX512 does not matter). Everything below may be called only when it returns 1
 * (elsewhere they are stubs that do nothing and return 0). */
int kern_avx2_available(void);

/* Run job g (filled as for kern_go; rows, rw and half ignored) on team t (NULL: on the calling
 * thread), its panels the work items: out receives act(bias + A B (+ add)) at the job's
 * destinations. g->slots must hold K * KERN_PANEL floats per thread of t. Cannot fail. */
void kern_avx2_go(team_t *t, const kern_job *g);

/* The grid rows [y0, y1) and columns [x0, x1) of a pair whose outputs are stored (see
 * kern_avx2_go_pair). */
typedef struct {
    int y0, y1, x0, x1;
} kern_avx2_window;

/* Run two phases of a transposed convolution with stride 2 that write interleaved output
 * columns as one job, so that each run of output columns is stored whole: even's columns at
 * ox0 + 2 tx, odd's at ox0 + 1 + 2 tx. Both jobs must be filled as for kern_avx2_go with the
 * same grid (n, ny, nx), M, K, output (out, bias, act, ors, ois, orow, oy0, osy) and slots,
 * osx == 2, odd->ox0 == even->ox0 + 1, no residual (add NULL) and K >= 3; g->slots must hold
 * 2 * K * KERN_PANEL floats per thread of t. With win NULL each phase's B is packed by runs of
 * its grid rows and every grid point is stored. Otherwise the grid is the input's (ny == H,
 * nx == W, stride 1, at most 9 taps): B is packed in flat panels of consecutive input pixels,
 * and only the grid points in *win are stored (the others are computed and dropped), with the
 * bits the runs would give them. Cannot fail. */
void kern_avx2_go_pair(team_t *t, const kern_job *even, const kern_job *odd,
                       const kern_avx2_window *win);

/* Run job g (filled as for kern_avx2_go) by output pixels, for layers whose grid rows are short:
 * with A transposed by blocks of 32 output channels at g->a instead of A (M / 32 blocks of K x 32
 * floats, block b's row k holding the k-th weight of output channels 32b .. 32b + 31: a block's
 * rows are read in order, one 128-byte row per step of k), M a multiple of 32, every tap of
 * every grid point inside the input (no padding), and no residual (add NULL). Three grid points
 * at a time take their inputs straight from the input (one broadcast per tap), with no panel
 * packed. g->slots must hold 2 K floats (the taps' offsets, written here). Cannot fail. */
void kern_avx2_pixels(team_t *t, const kern_job *g);

/* Run job g, a 1 x 1 convolution with stride 1 and no padding whose output is laid out like
 * its input (g->flat set, K the input channels) with at most KERN_AVX2_PW_ROWS output channels,
 * on team t without packing panels: each input vector is loaded once and used by every output
 * channel. The same bits as kern_avx2_go on the job. g->slots is not used. Cannot fail. */
void kern_avx2_pointwise(team_t *t, const kern_job *g);

/* For each of `planes` planes of rows_per_plane rows of ld floats at src (one after the other),
 * its first `rows` rows' first w floats (w <= ld) to dst, one after the other (rows of w floats:
 * planes * rows * w floats in all). src and dst do not overlap. Cannot fail. */
void kern_avx2_copy_rows(const float *src, long ld, long rows_per_plane, float *dst, long rows,
                         int w, long planes);

/* x[i] = act(src[i] * a + b) for len floats, 8 lanes at a time (x may be src). */
void kern_avx2_affine_act(float *x, const float *src, long len, float a, float b, nets_act act);

/* Group norm followed by act of one group of cpg channels of n points (images of 1 x 1): in[c *
 * n + i] is channel c of image i, out (may be in) likewise; w and b the group's channels' scale and
 * shift. Per image: mean and biased variance over the group's channels in double (eps added to
 * the variance), then out = act(in * a + b') with a = (float)(w[c] rstd) and b' = (float)(b[c] -
 * mean w[c] rstd). Cannot fail. */
void kern_avx2_gn_points(const float *in, float *out, long n, int cpg, const float *w,
                         const float *b, double eps, nets_act act);

/* Sum of len floats (float lanes, double result). */
double kern_avx2_sum(const float *p, long len);

/* Sum of (p[i] - mean)^2 over len floats (float lanes, double result). */
double kern_avx2_sqdev(const float *p, long len, float mean);

#endif
