/* common.h -- owns what the Check tests of libvbmem share (test-models: tests/test_models.c and
 * the topic files of tests/memory/): the headers they test and the helpers of common.c. */
#ifndef VBMEM_TESTS_MODELS_COMMON_H
#define VBMEM_TESTS_MODELS_COMMON_H

#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "memory/memory_impl.h"
#include "numerics/linalg.h"
#include "numerics/rng.h"
#include "numerics/team.h"
#include "numerics/vexp.h"
#include "vbmem/vbmem.h"

/* n draws of N(0, scale^2) from a generator seeded with seed (malloc'd). */
double *randn(long n, uint64_t seed, double scale);

/* A new memory of kind with code size C, K rows, H clusters and G groups over the kind's
 * defaults; fails the test when it cannot be created. */
vbm_memory *make(vbm_kind kind, int C, int K, int H, int G);

/* vbm_write that must succeed (fails the test with the library's message otherwise). */
void write_ok(vbm_memory *m, const vbm_codes *codes, vbm_write_opts *o, vbm_write_result *res);

/* |a - b| / |b| (|b| taken as 1 when it is 0). */
double rel(double a, double b);

/* The largest |a_i - b_i| / (1 + |b_i|) over n values. */
double max_rel_diff(const double *a, const double *b, size_t n);

/* Inverse of the n x n matrix a (n <= 8) by Gauss-Jordan elimination with partial pivoting
 * into inv; returns log |det a|. a is overwritten. */
double gj_inverse(int n, double *a, double *inv);

/* q(s_t^g) and the means of q(w_t^g | s = h) of Theorem 4 computed term by term from the
 * memory's q(M_h), q(b_h) for the code z_full: theta[H], wmu[H x K] (K <= 8, H <= 8). */
void theorem4_qs(const vbm_memory *m, const double *z_full, int g, double *theta, double *wmu);

/* The TCases of the topic files, one per file of tests/memory/. */
TCase *models_vb_tcase(void);
TCase *models_ops_tcase(void);
TCase *models_input_tcase(void);
TCase *models_threads_tcase(void);
TCase *models_numerics_tcase(void);

#endif
