/* linalg.h -- thin wrappers over CBLAS and LAPACKE for the dense, row-major,
 * double-precision linear algebra of the VB solver (Cholesky, solves, GEMM). */
#ifndef VBMEM_LINALG_H
#define VBMEM_LINALG_H

#include <stddef.h>

/* LA_HOT marks a function whose small dense loops dominate a write: GCC
 * compiles it twice, for x86-64-v3 (AVX2, FMA) and for baseline x86-64, and
 * the loader picks the version this CPU runs (function multi-versioning).
 * The baseline build alone runs these loops two doubles at a time. Expands to
 * nothing on other compilers and targets, and under ThreadSanitizer. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)          \
    && !defined(__SANITIZE_THREAD__) /* ThreadSanitizer crashes in the loader's ifunc resolvers */
#define LA_HOT    __attribute__((target_clones("arch=x86-64-v3", "default")))
#define LA_AVX512 /* linalg.c has AVX-512F variants of some kernels, see la_avx512 */
#else
#define LA_HOT
#endif

/* 1 when the kernels of this file run their AVX-512F variants: the CPU has
 * AVX-512F and VBMEM_LA_NO_AVX512 is unset, empty or "0" (read once per
 * process). The variants give the same bits as the others. */
int la_avx512(void);

/* C = alpha * op(A) op(B) + beta * C, row-major; ta/tb non-zero transpose.
 * op(A) is m x k, op(B) is k x n, C is m x n. Never fails. */
void la_gemm(int ta, int tb, int m, int n, int k, double alpha, const double *A, int lda,
             const double *B, int ldb, double beta, double *C, int ldc);

/* x . y and the sum of x over n values, each with four partial sums (terms
 * p = l mod 4 in sum l, the last n mod 4 terms in sum 0, then (s0 + s1) +
 * (s2 + s3)): four independent add chains, and the same bits on every target.
 * Never fail. */
double la_dot(int n, const double *x, const double *y);
double la_sum(int n, const double *x);

/* |x - y|^2 over n values, with eight partial sums (the same bits on every
 * target). Never fails. */
double la_sqdist(int n, const double *x, const double *y);

/* 1 when every x[i] (i < n) is finite, else 0 (NaN, +-inf). One vector pass,
 * no branch per value: for validating inputs before a fit. Never fails. */
int la_all_finite(long n, const double *x);

/* C = A A^T (n x n) for A (n x k), given also as its transpose At (k x n):
 * the Gram matrix of A's rows. Rows of C are formed eight at a time, as
 * short-A products of A's rows with At up to the diagonal, then mirrored; each
 * element is a sum over k in order, so C is exactly symmetric. Never fails. */
void la_gram(int n, int k, const double *A, int lda, const double *At, int ldat, double *C,
             int ldc);

/* C = alpha A B^T (n x n) for a product the caller knows to be symmetric
 * (A and B are n x k): only the lower triangle is computed (for n <= 16, the
 * K x K products of the memory models, by the small-product dot kernels at any
 * k; beyond, by a rank-k update when A is B), then mirrored, so C is exactly
 * symmetric. Never fails. */
void la_gemm_sym(int n, int k, double alpha, const double *A, int lda, const double *B, int ldb,
                 double *C, int ldc);

/* C = alpha A diag(d) A^T (n x n) for A (n x k) and the k weights d, without forming the
 * weighed rows: the lower triangle, then mirrored, so C is exactly symmetric. For n <= 16
 * every element has the bits la_gemm_sym gives for the weighed rows A diag(d) and A (their
 * products rounded as A[i][p] * d[p], then summed by the dot kernels). Never fails. */
void la_gemm_sym_diag(int n, int k, double alpha, const double *A, int lda, const double *d,
                      double *C, int ldc);

/* In-place lower Cholesky factor of the n x n symmetric matrix A (only the
 * lower triangle is read; the strict upper triangle is zeroed). Returns 0, or
 * the LAPACK info (> 0: not positive definite, < 0: bad argument). */
int la_chol(int n, double *A);

/* Solve (L L^T) X = B in place for the n x nrhs row-major B, given the lower
 * factor L from la_chol. Returns 0 or the LAPACK info. */
int la_chol_solve(int n, int nrhs, const double *L, double *B, int ldb);

/* The same operations on four n x n matrices at once (n <= 16), each giving
 * exactly the bits the single-matrix function gives it (the small-matrix code,
 * with the matrices in vector lanes): la_chol4 factors A[0..3] in place and
 * returns a mask with bit l set when A[l] is not positive definite (A[l] is
 * then unspecified); la_chol_inverse4 overwrites each factor with its inverse;
 * la_chol_solve4 solves (L_l L_l^T) X = B_l in place for each l (n x nrhs, row
 * stride ldb), as la_chol_solve does below 16 right-hand sides. */
int la_chol4(int n, double *const A[4]);
void la_chol_inverse4(int n, double *const L[4]);
void la_chol_solve4(int n, int nrhs, double *const L[4], double *const B[4], int ldb);

/* Overwrite the factor L (from la_chol) with the full symmetric inverse
 * (L L^T)^{-1}. Used only where the inverse itself is a model parameter (the
 * posterior covariances U and Sigma_w). Returns 0 or the LAPACK info. */
int la_chol_inverse(int n, double *L);

/* log det(L L^T) = 2 sum log L_ii, as the logs of products of up to eight
 * L_ii (one log each), entry by entry where a product leaves the normal range.
 * Not finite when some L_ii <= 0 or is not finite. */
double la_chol_logdet(int n, const double *L);

/* Copy the lower triangle of an n x n matrix into its upper triangle. */
void la_symmetrize_lower(int n, double *A);

/* Configure the number of BLAS threads (0 leaves the library default). */
void la_set_threads(int n);

#endif
