/* linalg.c -- CBLAS/LAPACKE wrappers: GEMM, Cholesky factor, solve, inverse,
 * log-determinant (row-major, double precision). */
#include "linalg.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <string.h>

void la_gemm(int ta, int tb, int m, int n, int k, double alpha, const double *A, int lda,
             const double *B, int ldb, double beta, double *C, int ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) C[(size_t)i * ldc + j] *= beta;
        return;
    }
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                k, alpha, A, lda, B, ldb, beta, C, ldc);
}

int la_chol(int n, double *A) {
    int info = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', n, A, n);
    if (info != 0) return info;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) A[(size_t)i * n + j] = 0.0;
    return 0;
}

int la_chol_solve(int n, int nrhs, const double *L, double *B, int ldb) {
    if (nrhs <= 0) return 0;
    return LAPACKE_dpotrs(LAPACK_ROW_MAJOR, 'L', n, nrhs, L, n, B, ldb);
}

int la_chol_inverse(int n, double *L) {
    int info = LAPACKE_dpotri(LAPACK_ROW_MAJOR, 'L', n, L, n);
    if (info != 0) return info;
    la_symmetrize_lower(n, L);
    return 0;
}

double la_chol_logdet(int n, const double *L) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += log(L[(size_t)i * n + i]);
    return 2.0 * s;
}

double la_chol_trace_solve(int n, const double *L, const double *B, double *work) {
    memcpy(work, B, sizeof(double) * (size_t)n * n);
    la_chol_solve(n, n, L, work, n);
    double t = 0.0;
    for (int i = 0; i < n; i++) t += work[(size_t)i * n + i];
    return t;
}

void la_symmetrize_lower(int n, double *A) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) A[(size_t)i * n + j] = A[(size_t)j * n + i];
}

void la_set_threads(int n) {
    if (n > 0) openblas_set_num_threads(n);
}
