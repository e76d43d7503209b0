/* linalg.c -- CBLAS/LAPACKE wrappers: GEMM, Cholesky factor, solve, inverse,
 * log-determinant (row-major, double precision). */
#include "linalg.h"

#include <cblas.h>
#ifdef __x86_64__
#include <immintrin.h>
#endif
#include <lapacke.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Products with at most this many multiply-adds run as plain loops (below):
 * the K x K x T and K x T x K products of the memory models (K = 6, T = 64:
 * about 2,300 multiply-adds) cost OpenBLAS more in dispatch and packing than
 * in arithmetic. */
#define LA_GEMM_SMALL 8192
/* Untransposed products with at most this many rows of A run in gemm_nn_short
 * at any size. */
#define LA_NN_ROWS 8
/* Symmetric products (la_gemm_sym) of at most this order run in the dot
 * kernels at any length: for the K x K x T products of the mixture's direct
 * update (K = 6, T = 640) they take fewer samples than OpenBLAS's small-matrix
 * kernel did in a profile of bench-write. */
#define LA_SMALL_SYM 16

/* Four and eight doubles (GCC vector extensions: an AVX-512 register, two AVX
 * registers or four SSE2 ones, as the function's target allows), and the same
 * types for loads and stores at any double-aligned address. */
typedef double la_v4 __attribute__((vector_size(32)));
typedef double la_v4u __attribute__((vector_size(32), aligned(8)));
typedef double la_v8 __attribute__((vector_size(64)));
typedef double la_v8u __attribute__((vector_size(64), aligned(8)));

/* Dot products of rows, d[r][j] = A_r . B_j (k terms) for r < R <= 2 and
 * j < J <= 4, or with wt (k weights) A_r diag(wt) . B_j, each A_r[p] wt[p]
 * rounded first (wt NULL: no weights), each with four partial sums: lane l of
 * its vector accumulator sums the terms p = l (mod 4) of the blocks of four,
 * the last k mod 4 terms go to lane 0, and the lanes are added as
 * (l0 + l1) + (l2 + l3). The R J sums are independent chains, and each row of
 * A and B is loaded once per block. Inlined with constant R and J, so that the
 * accumulators are registers. */
static inline __attribute__((always_inline)) void dot_tile(int R, int J, int k, const double *A,
                                                           int lda, const double *wt,
                                                           const double *B, int ldb, double d[2][4])
{
    la_v4 acc[2][4];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < J; j++)
            acc[r][j] = (la_v4){0.0};
    int p = 0;
    for (; p + 4 <= k; p += 4) {
        la_v4 a[2];
        for (int r = 0; r < R; r++)
            a[r] = *(const la_v4u *)(A + (size_t)r * lda + p);
        if (wt) {
            la_v4 wv = *(const la_v4u *)(wt + p);
            for (int r = 0; r < R; r++)
                a[r] *= wv;
        }
        for (int j = 0; j < J; j++) {
            la_v4 b = *(const la_v4u *)(B + (size_t)j * ldb + p);
            for (int r = 0; r < R; r++)
                acc[r][j] += a[r] * b;
        }
    }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < J; j++) {
            double s0 = acc[r][j][0], s1 = acc[r][j][1], s2 = acc[r][j][2], s3 = acc[r][j][3];
            for (int q = p; q < k; q++)
                s0 += (wt ? A[(size_t)r * lda + q] * wt[q] : A[(size_t)r * lda + q])
                      * B[(size_t)j * ldb + q];
            d[r][j] = (s0 + s1) + (s2 + s3);
        }
}

/* C[i][j] = base + alpha A_i . B_j for i < m and j < n (j <= i only, when
 * lower), where base is 0 when beta is 0, else beta C[i][j] (C[i][j] when beta
 * is 1): the small A B^T products. dot_rows picks dot_rows_v4 (tiles of 2 rows
 * by 4 columns in 4-lane vectors) or, on AVX-512, dot_rows_avx512 (two rows'
 * 4-lane sums side by side in one 8-lane vector); both give every element as
 * dot_tile sums it. */
static void dot_rows(int m, int n, int k, double alpha, const double *A, int lda, const double *B,
                     int ldb, double beta, double *C, int ldc, int lower);

/* C[i][j] = base + alpha d (see dot_rows) for the dot products d of a tile. */
static inline __attribute__((always_inline)) void dot_store(double base_beta, double alpha,
                                                            double d, double *c)
{
    double base = base_beta == 0.0 ? 0.0 : base_beta == 1.0 ? *c : *c * base_beta;
    *c = base + alpha * d;
}

static inline __attribute__((always_inline)) void
dot_rows_v4_w(int m, int n, int k, double alpha, const double *A, int lda, const double *wt,
              const double *B, int ldb, double beta, double *C, int ldc, int lower)
{
    for (int i0 = 0; i0 < m; i0 += 2) {
        int R = m - i0 >= 2 ? 2 : 1, jend = lower ? i0 + R : n;
        const double *Ai = A + (size_t)i0 * lda;
        for (int j0 = 0; j0 < jend; j0 += 4) {
            int J = jend - j0 >= 4 ? 4 : jend - j0;
            const double *Bj = B + (size_t)j0 * ldb;
            double d[2][4];
            switch (R * 8 + J) {
            case 2 * 8 + 4: dot_tile(2, 4, k, Ai, lda, wt, Bj, ldb, d); break;
            case 2 * 8 + 3: dot_tile(2, 3, k, Ai, lda, wt, Bj, ldb, d); break;
            case 2 * 8 + 2: dot_tile(2, 2, k, Ai, lda, wt, Bj, ldb, d); break;
            case 2 * 8 + 1: dot_tile(2, 1, k, Ai, lda, wt, Bj, ldb, d); break;
            case 1 * 8 + 4: dot_tile(1, 4, k, Ai, lda, wt, Bj, ldb, d); break;
            case 1 * 8 + 3: dot_tile(1, 3, k, Ai, lda, wt, Bj, ldb, d); break;
            case 1 * 8 + 2: dot_tile(1, 2, k, Ai, lda, wt, Bj, ldb, d); break;
            default: dot_tile(1, 1, k, Ai, lda, wt, Bj, ldb, d); break;
            }
            for (int r = 0; r < R; r++)
                for (int j = 0; j < J; j++) {
                    if (lower && j0 + j > i0 + r)
                        continue;
                    dot_store(beta, alpha, d[r][j], C + (size_t)(i0 + r) * ldc + j0 + j);
                }
        }
    }
}

LA_HOT static void dot_rows_v4(int m, int n, int k, double alpha, const double *A, int lda,
                               const double *B, int ldb, double beta, double *C, int ldc, int lower)
{
    dot_rows_v4_w(m, n, k, alpha, A, lda, NULL, B, ldb, beta, C, ldc, lower);
}

/* dot_rows_v4 of the rows of A weighed term by term by wt (A_i diag(wt) . B_j): each element's
 * bits those of dot_rows_v4 on the weighed rows. */
LA_HOT static void dot_rows_v4_diag(int m, int n, int k, double alpha, const double *A, int lda,
                                    const double *wt, const double *B, int ldb, double *C, int ldc)
{
    dot_rows_v4_w(m, n, k, alpha, A, lda, wt, B, ldb, 0.0, C, ldc, 1);
}

/* The small-product path of la_gemm. Rows of C are updated with contiguous
 * sweeps (A^T B) or built from dot products of contiguous rows (A B^T, dot_rows). */
LA_HOT static void gemm_small(int ta, int tb, int m, int n, int k, double alpha, const double *A,
                              int lda, const double *B, int ldb, double beta, double *C, int ldc)
{
    if (tb && !ta) {
        dot_rows(m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, 0);
        return;
    }
    for (int i = 0; i < m; i++) {
        double *restrict c = C + (size_t)i * ldc;
        if (beta == 0.0)
            for (int j = 0; j < n; j++)
                c[j] = 0.0;
        else if (beta != 1.0)
            for (int j = 0; j < n; j++)
                c[j] *= beta;
        if (!tb) {
            for (int p = 0; p < k; p++) {
                double a = alpha * (ta ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p]);
                const double *restrict b = B + (size_t)p * ldb;
                for (int j = 0; j < n; j++)
                    c[j] += a * b[j];
            }
        } else {
            for (int j = 0; j < n; j++) {
                double s = 0.0;
                for (int p = 0; p < k; p++)
                    s += A[(size_t)p * lda + i] * B[(size_t)j * ldb + p];
                c[j] += alpha * s;
            }
        }
    }
}

/* C[0, R) x [j, j + 4V) = alpha A B + beta C for R <= 8 rows of A (m x k) and
 * B (k x n), both untransposed. The tile is held in R V vector accumulators
 * over the whole sum, so C is read and written once. Inlined with constant R
 * and V, so that the accumulators are registers. Each element is summed over p
 * in order, one multiply and one add per term, so every tile shape (and
 * gemm_nn_tile8) gives the same bits. */
static inline __attribute__((always_inline)) void gemm_nn_tile4(int R, int V, int j, int k,
                                                                double alpha, const double *A,
                                                                int lda, const double *B, int ldb,
                                                                double beta, double *C, int ldc)
{
    la_v4 acc[8][8];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++)
            acc[r][v] = (la_v4){0.0};
    const double *b = B + j;
    for (int p = 0; p < k; p++, b += ldb) {
        la_v4 bv[8];
        for (int v = 0; v < V; v++)
            bv[v] = *(const la_v4u *)(b + 4 * v);
        for (int r = 0; r < R; r++) {
            double a = A[(size_t)r * lda + p];
            for (int v = 0; v < V; v++)
                acc[r][v] += a * bv[v];
        }
    }
    for (int r = 0; r < R; r++) {
        la_v4u *c = (la_v4u *)(C + (size_t)r * ldc + j);
        for (int v = 0; v < V; v++)
            c[v] = beta == 0.0 ? alpha * acc[r][v] : alpha * acc[r][v] + beta * c[v];
    }
}

/* The same with vectors of 8 doubles, for AVX-512 (8V columns), R <= 8. */
static inline __attribute__((always_inline)) void gemm_nn_tile8(int R, int V, int j, int k,
                                                                double alpha, const double *A,
                                                                int lda, const double *B, int ldb,
                                                                double beta, double *C, int ldc)
{
    la_v8 acc[8][8];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++)
            acc[r][v] = (la_v8){0.0};
    const double *b = B + j;
    for (int p = 0; p < k; p++, b += ldb) {
        la_v8 bv[8];
        for (int v = 0; v < V; v++)
            bv[v] = *(const la_v8u *)(b + 8 * v);
        for (int r = 0; r < R; r++) {
            double a = A[(size_t)r * lda + p];
            for (int v = 0; v < V; v++)
                acc[r][v] += a * bv[v];
        }
    }
    for (int r = 0; r < R; r++) {
        la_v8u *c = (la_v8u *)(C + (size_t)r * ldc + j);
        for (int v = 0; v < V; v++)
            c[v] = beta == 0.0 ? alpha * acc[r][v] : alpha * acc[r][v] + beta * c[v];
    }
}

/* C rows [0, R) = alpha A B + beta C: tiles of V vectors of 8 (wide) or 4
 * doubles (R V accumulators: enough independent sums in flight), then of one
 * vector, then single columns. */
static inline __attribute__((always_inline)) void gemm_nn_rows(int wide, int R, int V, int n, int k,
                                                               double alpha, const double *A,
                                                               int lda, const double *B, int ldb,
                                                               double beta, double *C, int ldc)
{
    int j = 0, w = wide ? 8 : 4;
    for (; j + w * V <= n; j += w * V)
        if (wide)
            gemm_nn_tile8(R, V, j, k, alpha, A, lda, B, ldb, beta, C, ldc);
        else
            gemm_nn_tile4(R, V, j, k, alpha, A, lda, B, ldb, beta, C, ldc);
    for (; j + w <= n; j += w)
        if (wide)
            gemm_nn_tile8(R, 1, j, k, alpha, A, lda, B, ldb, beta, C, ldc);
        else
            gemm_nn_tile4(R, 1, j, k, alpha, A, lda, B, ldb, beta, C, ldc);
    for (; j < n; j++)
        for (int r = 0; r < R; r++) {
            double s = 0.0;
            for (int p = 0; p < k; p++)
                s += A[(size_t)r * lda + p] * B[(size_t)p * ldb + j];
            double *c = C + (size_t)r * ldc + j;
            *c = beta == 0.0 ? alpha * s : alpha * s + beta * *c;
        }
}

/* C = alpha A B + beta C for short A (m <= LA_NN_ROWS rows), untransposed: the
 * shape of the memory models' per-cluster products (K x T times T x T, K x T
 * times T x cg, one row of shifts times the codes), for which OpenBLAS spends
 * more on packing B than on the arithmetic. isa: LA_NN_AVX512 (vectors of 8
 * doubles, 32 registers): 5 to 8 rows in one pass over B; LA_NN_AVX2 (vectors
 * of 4, 16 registers): 5 or 6 rows in one pass; otherwise, and for other row
 * counts, four rows at a time, then the rest. */
enum { LA_NN_BASE, LA_NN_AVX2, LA_NN_AVX512 };
static inline __attribute__((always_inline)) void gemm_nn_short(int isa, int m, int n, int k,
                                                                double alpha, const double *A,
                                                                int lda, const double *B, int ldb,
                                                                double beta, double *C, int ldc)
{
    int wide = isa == LA_NN_AVX512;
    if (wide
        && m >= 5) { /* 32 vector registers: all the rows in one pass over B, two vectors wide */
        if (m == 8)
            gemm_nn_rows(1, 8, 2, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        else if (m == 7)
            gemm_nn_rows(1, 7, 2, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        else if (m == 6)
            gemm_nn_rows(1, 6, 2, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        else
            gemm_nn_rows(1, 5, 2, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if (isa == LA_NN_AVX2 && (m == 5 || m == 6)) {
        /* 12 accumulators, two vectors of B and a broadcast: 5 or 6 rows in one pass over B.
         * On a Zen 2, 4 rows then 2 took 18-39 % longer than 6 in one pass, and 7 or 8 rows ran
         * faster as two passes (4 and 3 or 4) than as one; compiled for baseline x86-64 (each
         * vector two SSE2 registers, the tiles spilled either way) 6 rows in one pass were
         * 19 % slower. */
        if (m == 6)
            gemm_nn_rows(0, 6, 2, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        else
            gemm_nn_rows(0, 5, 2, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    int i = 0;
    for (; i + 4 <= m; i += 4)
        gemm_nn_rows(wide, 4, 2, n, k, alpha, A + (size_t)i * lda, lda, B, ldb, beta,
                     C + (size_t)i * ldc, ldc);
    if (m - i == 3)
        gemm_nn_rows(wide, 3, 2, n, k, alpha, A + (size_t)i * lda, lda, B, ldb, beta,
                     C + (size_t)i * ldc, ldc);
    else if (m - i == 2)
        gemm_nn_rows(wide, 2, 4, n, k, alpha, A + (size_t)i * lda, lda, B, ldb, beta,
                     C + (size_t)i * ldc, ldc);
    else if (m - i == 1)
        gemm_nn_rows(wide, 1, 8, n, k, alpha, A + (size_t)i * lda, lda, B, ldb, beta,
                     C + (size_t)i * ldc, ldc);
}

static void gemm_nn_short_any(int m, int n, int k, double alpha, const double *A, int lda,
                              const double *B, int ldb, double beta, double *C, int ldc)
{
    gemm_nn_short(LA_NN_BASE, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

#ifdef LA_AVX512
__attribute__((target("avx2,fma"))) static void
gemm_nn_short_avx2(int m, int n, int k, double alpha, const double *A, int lda, const double *B,
                   int ldb, double beta, double *C, int ldc)
{
    gemm_nn_short(LA_NN_AVX2, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

__attribute__((target("avx512f"))) static void
gemm_nn_short_avx512(int m, int n, int k, double alpha, const double *A, int lda, const double *B,
                     int ldb, double beta, double *C, int ldc)
{
    gemm_nn_short(LA_NN_AVX512, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

static int la_isa_level;
static pthread_once_t la_isa_once = PTHREAD_ONCE_INIT;

/* The widest variant of the kernels this CPU runs, probed once per process: LA_NN_AVX512 where
 * it has AVX-512F and VBMEM_LA_NO_AVX512 is unset ("" or "0"), else LA_NN_AVX2 where it has AVX2
 * and FMA, else LA_NN_BASE. */
static void la_isa_probe(void)
{
    const char *off = getenv("VBMEM_LA_NO_AVX512");
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && !(off && *off && strcmp(off, "0") != 0))
        la_isa_level = LA_NN_AVX512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        la_isa_level = LA_NN_AVX2;
    else
        la_isa_level = LA_NN_BASE;
}

static int la_isa(void)
{
    pthread_once(&la_isa_once, la_isa_probe);
    return la_isa_level;
}

int la_avx512(void)
{
    return la_isa() == LA_NN_AVX512;
}

/* dot_tile's sums for rows [0, R) of A (R <= 6) against rows [0, 2P) of B
 * (P <= 3 pairs; a last odd row of B repeats the one before it, its results
 * unused): the 4-lane accumulators of columns 2q and 2q + 1 share one 8-lane
 * vector, so each lane adds the same terms in the same order as in dot_tile,
 * and the lanes are added as (l0 + l1) + (l2 + l3) in vector form. */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
dot_tile_pairs(int R, int P, int J, int k, const double *A, int lda, const double *B, int ldb,
               double d[6][6])
{
    la_v8 acc[6][3];
    const double *b[6];
    for (int j = 0; j < 2 * P; j++)
        b[j] = B + (size_t)(j < J ? j : J - 1) * ldb;
    for (int r = 0; r < R; r++)
        for (int q = 0; q < P; q++)
            acc[r][q] = (la_v8){0.0};
    int p = 0;
    for (; p + 4 <= k; p += 4) {
        la_v8 bv[3];
        for (int q = 0; q < P; q++) {
            la_v4 lo = *(const la_v4u *)(b[2 * q] + p), hi = *(const la_v4u *)(b[2 * q + 1] + p);
            bv[q] = __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7);
        }
        for (int r = 0; r < R; r++) {
            la_v8 av = (la_v8)_mm512_broadcast_f64x4(_mm256_loadu_pd(A + (size_t)r * lda + p));
            for (int q = 0; q < P; q++)
                acc[r][q] += av * bv[q];
        }
    }
    if (p == k) { /* no tail terms: the lane sums in vector form */
        for (int r = 0; r < R; r++)
            for (int q = 0; q < P; q++) {
                la_v8 v = acc[r][q];
                la_v8 t = v + __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6);
                la_v8 u = t + __builtin_shufflevector(t, t, 2, 3, 0, 1, 6, 7, 4, 5);
                d[r][2 * q] = u[0];
                if (2 * q + 1 < J)
                    d[r][2 * q + 1] = u[4];
            }
        return;
    }
    for (int r = 0; r < R; r++)
        for (int q = 0; q < P; q++)
            for (int h = 0; h < 2 && 2 * q + h < J; h++) {
                int j = 2 * q + h, o = 4 * h;
                double s0 = acc[r][q][o], s1 = acc[r][q][o + 1], s2 = acc[r][q][o + 2],
                       s3 = acc[r][q][o + 3];
                for (int u = p; u < k; u++)
                    s0 += A[(size_t)r * lda + u] * b[j][u];
                d[r][j] = (s0 + s1) + (s2 + s3);
            }
}

/* dot_rows on AVX-512: blocks of up to 6 rows by 6 columns (18 vector sums). */
__attribute__((target("avx512f"))) static void
dot_rows_avx512(int m, int n, int k, double alpha, const double *A, int lda, const double *B,
                int ldb, double beta, double *C, int ldc, int lower)
{
    for (int i0 = 0; i0 < m; i0 += 6) {
        int R = m - i0 >= 6 ? 6 : m - i0, jend = lower ? i0 + R : n;
        const double *Ai = A + (size_t)i0 * lda;
        for (int j0 = 0; j0 < jend; j0 += 6) {
            int J = jend - j0 >= 6 ? 6 : jend - j0, P = (J + 1) / 2;
            const double *Bj = B + (size_t)j0 * ldb;
            double d[6][6];
            switch (R * 8 + P) {
            case 6 * 8 + 3: dot_tile_pairs(6, 3, J, k, Ai, lda, Bj, ldb, d); break;
            case 6 * 8 + 2: dot_tile_pairs(6, 2, J, k, Ai, lda, Bj, ldb, d); break;
            case 6 * 8 + 1: dot_tile_pairs(6, 1, J, k, Ai, lda, Bj, ldb, d); break;
            case 5 * 8 + 3: dot_tile_pairs(5, 3, J, k, Ai, lda, Bj, ldb, d); break;
            case 5 * 8 + 2: dot_tile_pairs(5, 2, J, k, Ai, lda, Bj, ldb, d); break;
            case 5 * 8 + 1: dot_tile_pairs(5, 1, J, k, Ai, lda, Bj, ldb, d); break;
            case 4 * 8 + 3: dot_tile_pairs(4, 3, J, k, Ai, lda, Bj, ldb, d); break;
            case 4 * 8 + 2: dot_tile_pairs(4, 2, J, k, Ai, lda, Bj, ldb, d); break;
            case 4 * 8 + 1: dot_tile_pairs(4, 1, J, k, Ai, lda, Bj, ldb, d); break;
            case 3 * 8 + 3: dot_tile_pairs(3, 3, J, k, Ai, lda, Bj, ldb, d); break;
            case 3 * 8 + 2: dot_tile_pairs(3, 2, J, k, Ai, lda, Bj, ldb, d); break;
            case 3 * 8 + 1: dot_tile_pairs(3, 1, J, k, Ai, lda, Bj, ldb, d); break;
            case 2 * 8 + 3: dot_tile_pairs(2, 3, J, k, Ai, lda, Bj, ldb, d); break;
            case 2 * 8 + 2: dot_tile_pairs(2, 2, J, k, Ai, lda, Bj, ldb, d); break;
            case 2 * 8 + 1: dot_tile_pairs(2, 1, J, k, Ai, lda, Bj, ldb, d); break;
            case 1 * 8 + 3: dot_tile_pairs(1, 3, J, k, Ai, lda, Bj, ldb, d); break;
            case 1 * 8 + 2: dot_tile_pairs(1, 2, J, k, Ai, lda, Bj, ldb, d); break;
            default: dot_tile_pairs(1, 1, J, k, Ai, lda, Bj, ldb, d); break;
            }
            for (int r = 0; r < R; r++)
                for (int j = 0; j < J; j++) {
                    if (lower && j0 + j > i0 + r)
                        continue;
                    dot_store(beta, alpha, d[r][j], C + (size_t)(i0 + r) * ldc + j0 + j);
                }
        }
    }
}
#else
int la_avx512(void)
{
    return 0;
}
#endif

static void dot_rows(int m, int n, int k, double alpha, const double *A, int lda, const double *B,
                     int ldb, double beta, double *C, int ldc, int lower)
{
#ifdef LA_AVX512
    if (la_avx512()) {
        dot_rows_avx512(m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, lower);
        return;
    }
#endif
    dot_rows_v4(m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, lower);
}

void la_gemm(int ta, int tb, int m, int n, int k, double alpha, const double *A, int lda,
             const double *B, int ldb, double beta, double *C, int ldc)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                C[(size_t)i * ldc + j] = beta == 0.0 ? 0.0 : beta * C[(size_t)i * ldc + j];
        return;
    }
    if (!ta && !tb && m <= LA_NN_ROWS) {
#ifdef LA_AVX512
        int isa = la_isa();
        if (isa == LA_NN_AVX512) {
            gemm_nn_short_avx512(m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
            return;
        }
        if (isa == LA_NN_AVX2) {
            gemm_nn_short_avx2(m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
            return;
        }
#endif
        gemm_nn_short_any(m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if ((long)m * n * k <= LA_GEMM_SMALL) {
        gemm_small(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                k, alpha, A, lda, B, ldb, beta, C, ldc);
}

LA_HOT double la_dot(int n, const double *x, const double *y)
{
    la_v4 acc = {0.0, 0.0, 0.0, 0.0};
    int p = 0;
    for (; p + 4 <= n; p += 4)
        acc += *(const la_v4u *)(x + p) * *(const la_v4u *)(y + p);
    double s0 = acc[0];
    for (; p < n; p++)
        s0 += x[p] * y[p];
    return (s0 + acc[1]) + (acc[2] + acc[3]);
}

LA_HOT double la_sum(int n, const double *x)
{
    la_v4 acc = {0.0, 0.0, 0.0, 0.0};
    int p = 0;
    for (; p + 4 <= n; p += 4)
        acc += *(const la_v4u *)(x + p);
    double s0 = acc[0];
    for (; p < n; p++)
        s0 += x[p];
    return (s0 + acc[1]) + (acc[2] + acc[3]);
}

LA_HOT double la_sqdist(int n, const double *x, const double *y)
{
    la_v4 s0 = {0.0}, s1 = {0.0};
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        la_v4 d0 = *(const la_v4u *)(x + i) - *(const la_v4u *)(y + i);
        la_v4 d1 = *(const la_v4u *)(x + i + 4) - *(const la_v4u *)(y + i + 4);
        s0 += d0 * d0;
        s1 += d1 * d1;
    }
    la_v4 t = s0 + s1;
    double s = (t[0] + t[1]) + (t[2] + t[3]);
    for (; i < n; i++)
        s += (x[i] - y[i]) * (x[i] - y[i]);
    return s;
}

void la_gram(int n, int k, const double *A, int lda, const double *At, int ldat, double *C, int ldc)
{
    for (int i0 = 0; i0 < n; i0 += LA_NN_ROWS) {
        int r = n - i0 < LA_NN_ROWS ? n - i0 : LA_NN_ROWS;
        la_gemm(0, 0, r, i0 + r, k, 1.0, A + (size_t)i0 * lda, lda, At, ldat, 0.0,
                C + (size_t)i0 * ldc, ldc);
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            C[(size_t)i * ldc + j] = C[(size_t)j * ldc + i];
}

LA_HOT int la_all_finite(long n, const double *x)
{
    /* x * 0 is 0 for finite x and NaN for NaN or an infinity: the sums stay 0
     * exactly when every value is finite. */
    la_v4 a0 = {0.0}, a1 = {0.0};
    long i = 0;
    for (; i + 8 <= n; i += 8) {
        a0 += *(const la_v4u *)(x + i) * 0.0;
        a1 += *(const la_v4u *)(x + i + 4) * 0.0;
    }
    la_v4 a = a0 + a1;
    double s = (a[0] + a[1]) + (a[2] + a[3]);
    for (; i < n; i++)
        s += x[i] * 0.0;
    return s == 0.0;
}

LA_HOT void la_gemm_sym(int n, int k, double alpha, const double *A, int lda, const double *B,
                        int ldb, double *C, int ldc)
{
    if (n <= 0)
        return;
    if (n <= LA_SMALL_SYM) {
        dot_rows(n, n, k, alpha, A, lda, B, ldb, 0.0, C, ldc, 1);
    } else if (k > 0 && (long)n * n * k > 2 * LA_GEMM_SMALL && A == B && lda == ldb) {
        cblas_dsyrk(CblasRowMajor, CblasLower, CblasNoTrans, n, k, alpha, A, lda, 0.0, C, ldc);
    } else if (k > 0 && (long)n * n * k > 2 * LA_GEMM_SMALL) {
        la_gemm(0, 1, n, n, k, alpha, A, lda, B, ldb, 0.0, C, ldc);
    } else {
        dot_rows(n, n, k, alpha, A, lda, B, ldb, 0.0, C, ldc, 1);
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            C[(size_t)i * ldc + j] = C[(size_t)j * ldc + i];
}

void la_gemm_sym_diag(int n, int k, double alpha, const double *A, int lda, const double *d,
                      double *C, int ldc)
{
    if (n <= 0)
        return;
    if (n <= LA_SMALL_SYM) {
        dot_rows_v4_diag(n, n, k, alpha, A, lda, d, A, lda, C, ldc);
    } else {
        for (int i = 0; i < n; i++)
            for (int j = 0; j <= i; j++) {
                const double *ai = A + (size_t)i * lda, *aj = A + (size_t)j * lda;
                double acc = 0.0;
                for (int p = 0; p < k; p++)
                    acc += ai[p] * d[p] * aj[p];
                C[(size_t)i * ldc + j] = alpha * acc;
            }
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            C[(size_t)i * ldc + j] = C[(size_t)j * ldc + i];
}

/* A symmetric row-major matrix is the same array in column-major order, and
 * its row-major lower triangle is the column-major upper triangle. So the
 * factorizations below call the column-major LAPACK routines with 'U' on the
 * caller's array: no transposed copies, and (through the _work entry points)
 * no NaN scans of inputs the library has already validated. */
/* Below this order the factorizations and solves run as plain loops here: for
 * the K x K matrices of the memory models (K = 6 in the paper) a LAPACK or
 * level-3 BLAS call costs far more in dispatch and packing than its ~K^3 flops. */
#define LA_SMALL 16

LA_HOT int la_chol(int n, double *A)
{
    if (n
        <= LA_SMALL) { /* Cholesky-Banachiewicz, row by row, with the reciprocals of the diagonal */
        double inv[LA_SMALL];
        for (int i = 0; i < n; i++) {
            double *Li = A + (size_t)i * n;
            for (int j = 0; j < i; j++) {
                const double *Lj = A + (size_t)j * n;
                double s = Li[j];
                for (int k = 0; k < j; k++)
                    s -= Li[k] * Lj[k];
                Li[j] = s * inv[j];
            }
            double s = Li[i];
            for (int k = 0; k < i; k++)
                s -= Li[k] * Li[k];
            if (!(s > 0.0) || !isfinite(s))
                return i + 1;
            Li[i] = sqrt(s);
            inv[i] = 1.0 / Li[i];
            for (int j = i + 1; j < n; j++)
                Li[j] = 0.0;
        }
        return 0;
    }
    int info = LAPACKE_dpotrf_work(LAPACK_COL_MAJOR, 'U', n, A, n);
    if (info != 0)
        return info;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            A[(size_t)i * n + j] = 0.0;
    return 0;
}

/* y -= l x over n values (y[j] + (-l) x[j]: the same bits as y[j] - l x[j]),
 * four at a time. */
static inline __attribute__((always_inline)) void sweep_axpy(int n, double ml, const double *x,
                                                             double *y)
{
    int j = 0;
    for (; j + 4 <= n; j += 4)
        *(la_v4u *)(y + j) += ml * *(const la_v4u *)(x + j);
    for (; j < n; j++)
        y[j] += ml * x[j];
}

/* y *= d over n values, four at a time. */
static inline __attribute__((always_inline)) void sweep_scale(int n, double d, double *y)
{
    int j = 0;
    for (; j + 4 <= n; j += 4)
        *(la_v4u *)(y + j) *= d;
    for (; j < n; j++)
        y[j] *= d;
}

/* Columns [0, ncols) of (L L^T) X = B (ncols a multiple of the vector width),
 * row by row, a vector of 4 (or 8, wide) columns at a time: row i of the
 * solution is its right-hand side minus a combination of the rows already
 * solved, which are read, not updated, so each row of B is written once per
 * substitution and the column blocks are independent chains. Each column gets
 * the operations of the sweeps in la_chol_solve, in the same order: the same
 * bits. inv holds the reciprocals of L's diagonal. */
static inline __attribute__((always_inline)) void
chol_solve_cols(int wide, int n, int ncols, const double *L, const double *inv, double *B, int ldb)
{
    for (int i = 0; i < n; i++) {
        double *bi = B + (size_t)i * ldb;
        for (int j = 0; j < ncols; j += wide ? 8 : 4)
            if (wide) {
                la_v8 v = *(const la_v8u *)(bi + j);
                for (int k = 0; k < i; k++)
                    v -= L[(size_t)i * n + k] * *(const la_v8u *)(B + (size_t)k * ldb + j);
                *(la_v8u *)(bi + j) = v * inv[i];
            } else {
                la_v4 v = *(const la_v4u *)(bi + j);
                for (int k = 0; k < i; k++)
                    v -= L[(size_t)i * n + k] * *(const la_v4u *)(B + (size_t)k * ldb + j);
                *(la_v4u *)(bi + j) = v * inv[i];
            }
    }
    for (int i = n - 1; i >= 0; i--) {
        double *bi = B + (size_t)i * ldb;
        for (int j = 0; j < ncols; j += wide ? 8 : 4)
            if (wide) {
                la_v8 v = *(const la_v8u *)(bi + j);
                for (int k = i + 1; k < n; k++)
                    v -= L[(size_t)k * n + i] * *(const la_v8u *)(B + (size_t)k * ldb + j);
                *(la_v8u *)(bi + j) = v * inv[i];
            } else {
                la_v4 v = *(const la_v4u *)(bi + j);
                for (int k = i + 1; k < n; k++)
                    v -= L[(size_t)k * n + i] * *(const la_v4u *)(B + (size_t)k * ldb + j);
                *(la_v4u *)(bi + j) = v * inv[i];
            }
    }
}

LA_HOT static void chol_solve_cols_any(int n, int ncols, const double *L, const double *inv,
                                       double *B, int ldb)
{
    chol_solve_cols(0, n, ncols, L, inv, B, ldb);
}

#ifdef LA_AVX512
__attribute__((target("avx512f"))) static void
chol_solve_cols_avx512(int n, int ncols, const double *L, const double *inv, double *B, int ldb)
{
    chol_solve_cols(1, n, ncols, L, inv, B, ldb);
}
#endif

LA_HOT int la_chol_solve(int n, int nrhs, const double *L, double *B, int ldb)
{
    if (nrhs <= 0 || n <= 0)
        return 0;
    if (n <= LA_SMALL) {
        /* The reciprocals of the diagonal first: independent divisions, out of the
         * substitution's dependency chain. */
        double inv[LA_SMALL];
        for (int i = 0; i < n; i++)
            inv[i] = 1.0 / L[(size_t)i * n + i];
        if (nrhs == 1) { /* one right-hand side (a column of stride ldb) */
            double y[LA_SMALL];
            for (int i = 0; i < n; i++) {
                double v = B[(size_t)i * ldb];
                for (int k = 0; k < i; k++)
                    v -= L[(size_t)i * n + k] * y[k];
                y[i] = v * inv[i];
            }
            for (int i = n - 1; i >= 0; i--) {
                double v = y[i];
                for (int k = i + 1; k < n; k++)
                    v -= L[(size_t)k * n + i] * y[k];
                y[i] = v * inv[i];
            }
            for (int i = 0; i < n; i++)
                B[(size_t)i * ldb] = y[i];
            return 0;
        }
        /* Sixteen or more right-hand sides: blocks of 4 (or 8) columns, see
         * chol_solve_cols; the rest by the sweeps below. */
        int j0 = 0;
        if (nrhs >= 16) {
#ifdef LA_AVX512
            if (la_avx512()) {
                j0 = nrhs & ~7;
                chol_solve_cols_avx512(n, j0, L, inv, B, ldb);
            } else
#endif
            {
                j0 = nrhs & ~3;
                chol_solve_cols_any(n, j0, L, inv, B, ldb);
            }
        }
        if (j0 == nrhs)
            return 0;
        B += j0;
        nrhs -= j0;
        /* the last columns: forward then back substitution, each row a contiguous
         * sweep (four columns at a time, then one) */
        for (int i = 0; i < n; i++) {
            double *bi = B + (size_t)i * ldb;
            for (int k = 0; k < i; k++)
                sweep_axpy(nrhs, -L[(size_t)i * n + k], B + (size_t)k * ldb, bi);
            sweep_scale(nrhs, inv[i], bi);
        }
        for (int i = n - 1; i >= 0; i--) {
            double *bi = B + (size_t)i * ldb;
            for (int k = i + 1; k < n; k++)
                sweep_axpy(nrhs, -L[(size_t)k * n + i], B + (size_t)k * ldb, bi);
            sweep_scale(nrhs, inv[i], bi);
        }
        return 0;
    }
    /* L Y = B, then L^T X = Y: two level-3 triangular solves on the row-major B. */
    cblas_dtrsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, n, nrhs, 1.0, L,
                n, B, ldb);
    cblas_dtrsm(CblasRowMajor, CblasLeft, CblasLower, CblasTrans, CblasNonUnit, n, nrhs, 1.0, L, n,
                B, ldb);
    return 0;
}

LA_HOT int la_chol_inverse(int n, double *L)
{
    if (n <= LA_SMALL) { /* (L L^T)^{-1} = L^{-T} L^{-1}: invert L in place, then the product */
        double M[LA_SMALL * LA_SMALL], inv[LA_SMALL];
        for (int i = 0; i < n; i++)
            inv[i] = 1.0 / L[(size_t)i * n + i];
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < i; j++) {
                double s = 0.0;
                for (int k = j; k < i; k++)
                    s -= L[(size_t)i * n + k] * M[k * n + j];
                M[i * n + j] = s * inv[i];
            }
            M[i * n + i] = inv[i];
            for (int j = i + 1; j < n; j++)
                M[i * n + j] = 0.0;
        }
        for (int i = 0; i < n; i++)
            for (int j = 0; j <= i; j++) {
                double s = 0.0;
                for (int k = i; k < n; k++)
                    s += M[k * n + i] * M[k * n + j];
                L[(size_t)i * n + j] = L[(size_t)j * n + i] = s;
            }
        return 0;
    }
    int info = LAPACKE_dpotri_work(LAPACK_COL_MAJOR, 'U', n, L, n);
    if (info != 0)
        return info;
    la_symmetrize_lower(n, L);
    return 0;
}

/* ---- four small matrices at once, one per vector lane ----
 *
 * The K x K factorizations of the models are chains of dependent operations
 * (divisions and square roots among them), far from the arithmetic the CPU can
 * do. The functions below run the small-matrix code above on four independent
 * matrices at once, matrix l in lane l of every vector, with the same
 * operations in the same order per lane, so each matrix gets exactly the bits
 * la_chol, la_chol_inverse and la_chol_solve give it alone. */

/* Gather element (i, j) of the four matrices, and scatter it back. */
static inline __attribute__((always_inline)) void lanes_get(la_v4 *v, double *const M[4],
                                                            size_t idx)
{
    *v = (la_v4){M[0][idx], M[1][idx], M[2][idx], M[3][idx]};
}

static inline __attribute__((always_inline)) void lanes_put(double *const M[4], size_t idx,
                                                            const la_v4 *v)
{
    for (int l = 0; l < 4; l++)
        M[l][idx] = (*v)[l];
}

LA_HOT int la_chol4(int n, double *const A[4])
{
    la_v4 L[LA_SMALL][LA_SMALL], inv[LA_SMALL];
    int bad = 0;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < i; j++) {
            la_v4 v;
            lanes_get(&v, A, (size_t)i * n + j);
            for (int k = 0; k < j; k++)
                v -= L[i][k] * L[j][k];
            L[i][j] = v * inv[j];
        }
        la_v4 v;
        lanes_get(&v, A, (size_t)i * n + i);
        for (int k = 0; k < i; k++)
            v -= L[i][k] * L[i][k];
        for (int l = 0; l < 4; l++) {
            if (!(v[l] > 0.0) || !isfinite(v[l])) {
                bad |= 1 << l;
                v[l] = 1.0; /* carry on with the other lanes; this matrix is reported */
            }
            v[l] = sqrt(v[l]);
        }
        L[i][i] = v;
        inv[i] = 1.0 / v;
    }
    const la_v4 zero = {0.0, 0.0, 0.0, 0.0};
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            lanes_put(A, (size_t)i * n + j, j <= i ? &L[i][j] : &zero);
    return bad;
}

LA_HOT void la_chol_inverse4(int n, double *const L[4])
{
    la_v4 M[LA_SMALL][LA_SMALL], inv[LA_SMALL], Li[LA_SMALL];
    for (int i = 0; i < n; i++) {
        lanes_get(&inv[i], L, (size_t)i * n + i);
        inv[i] = 1.0 / inv[i];
    }
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < i; k++)
            lanes_get(&Li[k], L, (size_t)i * n + k);
        for (int j = 0; j < i; j++) {
            la_v4 v = {0.0, 0.0, 0.0, 0.0};
            for (int k = j; k < i; k++)
                v -= Li[k] * M[k][j];
            M[i][j] = v * inv[i];
        }
        M[i][i] = inv[i];
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            la_v4 v = {0.0, 0.0, 0.0, 0.0};
            for (int k = i; k < n; k++)
                v += M[k][i] * M[k][j];
            lanes_put(L, (size_t)i * n + j, &v);
            lanes_put(L, (size_t)j * n + i, &v);
        }
}

LA_HOT void la_chol_solve4(int n, int nrhs, double *const L[4], double *const B[4], int ldb)
{
    la_v4 Lv[LA_SMALL][LA_SMALL], inv[LA_SMALL], x[LA_SMALL][3];
    for (int i = 0; i < n; i++) {
        for (int k = 0; k <= i; k++)
            lanes_get(&Lv[i][k], L, (size_t)i * n + k);
        inv[i] = 1.0 / Lv[i][i];
    }
    /* Columns three at a time: their substitutions are independent chains of
     * dependent operations, so running them side by side hides the latency. */
    for (int j0 = 0; j0 < nrhs; j0 += 3) {
        int nj = nrhs - j0 < 3 ? nrhs - j0 : 3;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < nj; j++) {
                la_v4 v;
                lanes_get(&v, B, (size_t)i * ldb + j0 + j);
                for (int k = 0; k < i; k++)
                    v += -Lv[i][k] * x[k][j];
                x[i][j] = v * inv[i];
            }
        for (int i = n - 1; i >= 0; i--)
            for (int j = 0; j < nj; j++) {
                la_v4 v = x[i][j];
                for (int k = i + 1; k < n; k++)
                    v += -Lv[k][i] * x[k][j];
                x[i][j] = v * inv[i];
            }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < nj; j++)
                lanes_put(B, (size_t)i * ldb + j0 + j, &x[i][j]);
    }
}

double la_chol_logdet(int n, const double *L)
{
    double s = 0.0;
    for (int i0 = 0; i0 < n; i0 += 8) { /* one log per product of up to 8 diagonal entries */
        int i1 = i0 + 8 < n ? i0 + 8 : n;
        double p = 1.0;
        for (int i = i0; i < i1; i++)
            p *= L[(size_t)i * n + i];
        if (p >= DBL_MIN && p <= DBL_MAX) {
            s += log(p);
        } else { /* the product left the normal range (or is not a number): entry by entry */
            for (int i = i0; i < i1; i++)
                s += log(L[(size_t)i * n + i]);
        }
    }
    return 2.0 * s;
}

void la_symmetrize_lower(int n, double *A)
{
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            A[(size_t)i * n + j] = A[(size_t)j * n + i];
}

void la_set_threads(int n)
{
    if (n > 0)
        openblas_set_num_threads(n);
}
