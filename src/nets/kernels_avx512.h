/* kernels_avx512.h -- the AVX-512 GEMM engine of the networks: one job type describing a
 * GEMM-shaped layer over an implicit im2col matrix, and the few vector helpers group norm uses.
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
 * "" or "0") the im2col + cblas_sgemm paths of layers.c run instead. */
#ifndef VBMEM_NETS_KERNELS_AVX512_H
#define VBMEM_NETS_KERNELS_AVX512_H

#include "nets/nets_internal.h"
#include "numerics/team.h"

#define KERN_PANEL                                                                                 \
    32 /* columns of a packed panel: a job's slots hold K * KERN_PANEL floats per thread */

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
    float *slots; /* K * KERN_PANEL floats per thread */
    /* direct mode (see kern_direct_rows): grid rows per panel; 0: packed panels; -1: flat mode */
    int rows;
    /* Direct mode only: the input's row stride (W when 0) and, for a stride-2 convolution
     * whose input was deinterleaved (see kern_deinterleave), the width of the even-column
     * half of each row (0 otherwise). */
    int rw, half;
    /* Whether flat mode may run (see kern_flat_setup): a convolution with stride 1 whose
     * output grid is its input grid (oy0 = ox0 = 0, out laid out like in). */
    int flat;
} kern_job;

/* A run of panel columns with the same image and grid row: panel columns [c0, c0 + len) are grid
 * columns (img, ty, tx .. tx + len - 1). */
typedef struct {
    int c0, len, ty, tx;
    long img;
} kern_seg;

/* Split the panel of ncol columns from grid column j0 of job g's grid into runs of at most
 * maxlen columns within one grid row (16 for the AVX-512 engine's vectors, 8 for the AVX2
 * engine's); seg must hold ncol entries. Returns how many runs. Reads g only; cannot fail. Runs on
 * every target. */
int kern_segments(const kern_job *g, long j0, int ncol, int maxlen, kern_seg *seg);

/* Whether the engine runs on this CPU: AVX-512F present and VBMEM_NETS_NO_AVX512 unset,
 * "" or "0" (probed once, thread-safe). Everything below may be called only when it
 * returns 1 (elsewhere they are stubs that do nothing). */
int kern_available(void);

/* Grid rows per panel in direct mode for job g (0: packed panels): contiguous column
 * taps, few taps, and grid rows of 5 to 32 columns. Reads g only. */
int kern_direct_rows(const kern_job *g);

/* Run job g on team t (NULL: on the calling thread), its panels the work items: out
 * receives act(bias + A B (+ add)) at the job's destinations. Sets g->rw (when 0) and
 * g->rows; g->slots must hold K * KERN_PANEL floats per thread of t, unless the job runs
 * in direct or flat mode. Cannot fail. */
void kern_go(team_t *t, kern_job *g);

/* Split each of the `rows` rows of W floats of in into its even columns followed by its
 * odd ones, rows of 2 * ((W + 1) / 2) floats in out (an odd W leaves the odd half's last
 * entry 0): a stride-2 convolution's column taps become contiguous, so that it runs in
 * direct mode (job fields rw and half). */
void kern_deinterleave(team_t *t, const float *in, float *out, long rows, int W);

/* x[i] = act(src[i] * a + b) for len floats, 16 lanes at a time (x may be src). */
void kern_affine_act(float *x, const float *src, long len, float a, float b, nets_act act);

/* Sum of len floats (float lanes, double result). */
double kern_sum(const float *p, long len);

/* Sum of (p[i] - mean)^2 over len floats (float lanes, double result). */
double kern_sqdev(const float *p, long len, float mean);

#endif
