/* temporal_problems.h -- owns the hard recovery problems of the temporal memory shared by
 * tests/test_temporal.c and bench/temporal_start.c: sequences drawn from the model with fixed
 * seeds, and the comparison of a fitted memory with the truth. */
#ifndef VBMEM_TEMPORAL_PROBLEMS_H
#define VBMEM_TEMPORAL_PROBLEMS_H

#include <stdint.h>

#include "vbmem/vbmem.h"

/* One problem: P identities of Q attributes in D dimensions, a training sequence of T frames
 * and a held-out one of T_test, each identity switching on with probability t01 and off with
 * t10 per frame (so that they overlap in time), AR(1) attributes with lambda[k], isotropic
 * noise of standard deviation noise, W with standard normal entries. */
typedef struct {
    const char *name;
    int D, P, Q;
    long T, T_test;
    double t01, t10, noise;
    double lambda[8];
    uint64_t seed;
} tp_spec;

typedef struct {
    tp_spec spec;
    int K;
    double *W;    /* D x K */
    double Tm[4]; /* Tm[2 m + n] = P(b_t = n | b_{t-1} = m) */
    double *y;    /* T x D, training */
    double *yt;   /* T_test x D, held out */
    int *bt;      /* T_test x P, the held-out identities */
} tp_problem;

/* Draw a problem (the truth, then both sequences) from spec. Returns 0, -1 out of memory. */
int tp_draw(const tp_spec *spec, tp_problem *pb);
void tp_free(tp_problem *pb);

typedef struct {
    double acc_frame; /* held-out frames whose P identities are all right (q(b) > 1/2), under
                         the best permutation of the identities */
    double acc_site;  /* held-out (frame, identity) pairs right, same permutation */
    double angle_deg; /* largest principal angle between an identity's true and learned W_p */
    double err_T;     /* max |E[T] - T| over the four entries */
    double err_rho;   /* |mean_k E[rho_k] * noise^2 - 1| */
    double fe;        /* the memory's free energy */
} tp_result;

/* Compare a memory fitted to pb->y with the truth: infer the held-out sequence (sweeps VBE
 * sweeps), match identities. Returns 0, -1 when inference fails (message in err). */
int tp_evaluate(const vbm_temporal *m, const tp_problem *pb, int sweeps, tp_result *r,
                vbm_error *err);

/* The problems of the recovery tests and of bench-temporal-start. */
extern const tp_spec tp_hard[];
extern const int tp_nhard;

#endif
