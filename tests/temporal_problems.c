/* temporal_problems.c -- owns the hard recovery problems of the temporal memory (see
 * temporal_problems.h): drawing them from the model and scoring a fit against the truth. */
#define _DEFAULT_SOURCE /* M_PI */
#include "temporal_problems.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "numerics/rng.h"

const tp_spec tp_hard[] = {
    {"3 identities x 1 attribute, T = 800",
     12,
     3,
     1,
     800,
     400,
     0.05,
     0.08,
     0.1,
     {0.98, 0.97, 0.95},
     301},
    {"4 identities x 1 attribute, T = 1200",
     16,
     4,
     1,
     1200,
     400,
     0.04,
     0.08,
     0.1,
     {0.98, 0.97, 0.96, 0.95},
     302},
    {"3 identities x 2 attributes, T = 1000",
     16,
     3,
     2,
     1000,
     400,
     0.05,
     0.08,
     0.1,
     {0.98, 0.97, 0.96, 0.95, 0.97, 0.96},
     303},
    {"2 identities x 2 attributes, T = 1500",
     10,
     2,
     2,
     1500,
     400,
     0.06,
     0.06,
     0.1,
     {0.97, 0.98, 0.96, 0.95},
     304},
};
const int tp_nhard = (int)(sizeof tp_hard / sizeof tp_hard[0]);

/* T frames drawn ancestrally into y (T x D) and b (T x P, may be NULL). */
static void tp_sequence(const tp_problem *pb, long T, rng_t *r, double *y, int *b)
{
    const tp_spec *s = &pb->spec;
    int D = s->D, P = s->P, Q = s->Q, K = pb->K;
    int bb[64];
    double a[256];

    for (long t = 0; t < T; t++) {
        for (int p = 0; p < P; p++) {
            if (t == 0)
                bb[p] = rng_uniform(r) < s->t01 / (s->t01 + s->t10);
            else
                bb[p] = rng_uniform(r) < pb->Tm[2 * bb[p] + 1];
            if (b)
                b[t * P + p] = bb[p];
            for (int q = 0; q < Q; q++) {
                int k = p * Q + q;
                double l = s->lambda[k];
                a[k] = t == 0 ? rng_normal(r) : l * a[k] + sqrt(1 - l * l) * rng_normal(r);
            }
        }
        for (int d = 0; d < D; d++) {
            double v = s->noise * rng_normal(r);
            for (int k = 0; k < K; k++)
                v += pb->W[d * K + k] * a[k] * bb[k / Q];
            y[(size_t)t * D + d] = v;
        }
    }
}

int tp_draw(const tp_spec *spec, tp_problem *pb)
{
    rng_t r;
    int D = spec->D, K = spec->P * spec->Q;

    memset(pb, 0, sizeof *pb);
    pb->spec = *spec;
    pb->K = K;
    pb->W = malloc(sizeof(double) * D * K);
    pb->y = malloc(sizeof(double) * spec->T * D);
    pb->yt = malloc(sizeof(double) * spec->T_test * D);
    pb->bt = malloc(sizeof(int) * spec->T_test * spec->P);
    if (!pb->W || !pb->y || !pb->yt || !pb->bt) {
        tp_free(pb);
        return -1;
    }
    rng_seed(&r, spec->seed);
    for (int i = 0; i < D * K; i++)
        pb->W[i] = rng_normal(&r);
    pb->Tm[0] = 1.0 - spec->t01;
    pb->Tm[1] = spec->t01;
    pb->Tm[2] = spec->t10;
    pb->Tm[3] = 1.0 - spec->t10;
    tp_sequence(pb, spec->T, &r, pb->y, NULL);
    tp_sequence(pb, spec->T_test, &r, pb->yt, pb->bt);
    return 0;
}

void tp_free(tp_problem *pb)
{
    free(pb->W);
    free(pb->y);
    free(pb->yt);
    free(pb->bt);
    memset(pb, 0, sizeof *pb);
}

/* Orthonormal basis (Gram-Schmidt) of the Q columns p Q .. p Q + Q - 1 of A (D x K) into U
 * (D x Q). */
static void tp_basis(int D, int K, int Q, int p, const double *A, double *U)
{
    for (int j = 0; j < Q; j++) {
        double nr = 0.0;
        for (int d = 0; d < D; d++)
            U[d * Q + j] = A[d * K + p * Q + j];
        for (int i = 0; i < j; i++) {
            double c = 0.0;
            for (int d = 0; d < D; d++)
                c += U[d * Q + i] * U[d * Q + j];
            for (int d = 0; d < D; d++)
                U[d * Q + j] -= c * U[d * Q + i];
        }
        for (int d = 0; d < D; d++)
            nr += U[d * Q + j] * U[d * Q + j];
        nr = nr > 0 ? sqrt(nr) : 1.0;
        for (int d = 0; d < D; d++)
            U[d * Q + j] /= nr;
    }
}

/* Largest principal angle (degrees) between identity p of A and identity pp of B (Q <= 2). */
static double tp_angle(int D, int K, int Q, const double *A, int p, const double *B, int pp)
{
    double Ua[2 * 256], Ub[2 * 256], M[4] = {0, 0, 0, 0}, smin2;

    tp_basis(D, K, Q, p, A, Ua);
    tp_basis(D, K, Q, pp, B, Ub);
    for (int i = 0; i < Q; i++)
        for (int j = 0; j < Q; j++)
            for (int d = 0; d < D; d++)
                M[i * Q + j] += Ua[d * Q + i] * Ub[d * Q + j];
    if (Q == 1) {
        smin2 = M[0] * M[0];
    } else {
        /* the smaller eigenvalue of M M^T */
        double a = M[0] * M[0] + M[1] * M[1], c = M[2] * M[2] + M[3] * M[3];
        double b = M[0] * M[2] + M[1] * M[3];
        smin2 = 0.5 * (a + c) - sqrt(0.25 * (a - c) * (a - c) + b * b);
    }
    smin2 = smin2 < 0 ? 0 : smin2 > 1 ? 1 : smin2;
    return acos(sqrt(smin2)) * 180.0 / M_PI;
}

int tp_evaluate(const vbm_temporal *m, const tp_problem *pb, int sweeps, tp_result *r,
                vbm_error *err)
{
    const tp_spec *s = &pb->spec;
    int D = s->D, P = s->P, Q = s->Q, K = pb->K, perm[8], best[8];
    long Tt = s->T_test;
    double *qb = malloc(sizeof(double) * Tt * P), *W = malloc(sizeof(double) * D * K);
    double *rho = malloc(sizeof(double) * D), Tm[4], best_acc = -1.0;
    vbm_sequence q = {Tt, D, pb->yt};

    memset(r, 0, sizeof *r);
    if (!qb || !W || !rho || P > 8 || Q > 2) {
        free(qb);
        free(W);
        free(rho);
        return -1;
    }
    if (vbm_temporal_infer(m, &q, sweeps, qb, NULL, NULL, err) != VBM_OK) {
        free(qb);
        free(W);
        free(rho);
        return -1;
    }
    vbm_temporal_posterior(m, W, NULL, Tm, NULL, rho);
    /* every permutation of the identities (Heap's algorithm, P <= 8) */
    for (int i = 0; i < P; i++)
        perm[i] = i;
    {
        int c[8] = {0}, i = 0;
        for (;;) {
            long right = 0, sites = 0;
            for (long t = 0; t < Tt; t++) {
                int all = 1;
                for (int p = 0; p < P; p++) {
                    int guess = qb[t * P + perm[p]] > 0.5;
                    int ok = guess == pb->bt[t * P + p];
                    sites += ok;
                    all = all && ok;
                }
                right += all;
            }
            if ((double)sites / (double)(Tt * P) > best_acc) {
                best_acc = (double)sites / (double)(Tt * P);
                r->acc_site = best_acc;
                r->acc_frame = (double)right / (double)Tt;
                memcpy(best, perm, sizeof perm);
            }
            while (i < P && c[i] >= i) {
                c[i] = 0;
                i++;
            }
            if (i >= P)
                break;
            {
                int j = i % 2 == 0 ? 0 : c[i], tmp = perm[j];
                perm[j] = perm[i];
                perm[i] = tmp;
            }
            c[i]++;
            i = 0;
        }
    }
    for (int p = 0; p < P; p++)
        r->angle_deg = fmax(r->angle_deg, tp_angle(D, K, Q, pb->W, p, W, best[p]));
    for (int i = 0; i < 4; i++)
        r->err_T = fmax(r->err_T, fabs(Tm[i] - pb->Tm[i]));
    {
        double mr = 0.0;
        for (int d = 0; d < D; d++)
            mr += rho[d] / D;
        r->err_rho = fabs(mr * s->noise * s->noise - 1.0);
    }
    r->fe = vbm_temporal_free_energy(m);
    free(qb);
    free(W);
    free(rho);
    return 0;
}
