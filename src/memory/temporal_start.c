/* temporal_start.c -- owns the window start of a temporal write: the mean of q(W) from short
 * windows of consecutive frames grouped by the subspace they span (k-subspaces). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "memory/temporal.h"
#include "numerics/linalg.h"
#include "numerics/rng.h"

#include <lapacke.h>

#define TW_TRIES 10 /* seedings of the k-subspaces per start */

/* One window: frames [t0, t0 + L) of sequence s. */
typedef struct {
    int s;
    long t0;
    double energy; /* sum of |y_t|^2 */
    double conc;   /* share of the energy in the window's top Q principal directions */
} tw_window;

typedef struct {
    int D, Q, P, L;
    const vbm_sequence *seqs;
    tw_window *win;
    long nwin;
    double *gram; /* L x L scratch */
    double *ev;   /* L scratch */
    double *yb;   /* L x Q scratch */
} tw_ctx;

static const double *tw_frames(const tw_ctx *c, const tw_window *w)
{
    return c->seqs[w->s].y + (size_t)w->t0 * c->D;
}

/* The energy of window w captured by the orthonormal basis B (D x Q). */
static double tw_captured(tw_ctx *c, const tw_window *w, const double *B)
{
    const double *Y = tw_frames(c, w);
    la_gemm(0, 0, c->L, c->Q, c->D, 1.0, Y, c->D, B, c->Q, 0.0, c->yb, c->Q);
    return la_dot(c->L * c->Q, c->yb, c->yb);
}

/* Orthonormalise the Q columns of B (D x Q, Q < D) by Gram-Schmidt; a column that vanishes
 * becomes the first coordinate axis not yet spanned. */
static void tw_orth(int D, int Q, double *B)
{
    int axis = 0;

    for (int j = 0; j < Q; j++) {
        double nr = 0.0, n0 = 0.0;
        for (int d = 0; d < D; d++)
            n0 += B[d * Q + j] * B[d * Q + j];
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < j; i++) {
                double cc = 0.0;
                for (int d = 0; d < D; d++)
                    cc += B[d * Q + i] * B[d * Q + j];
                for (int d = 0; d < D; d++)
                    B[d * Q + j] -= cc * B[d * Q + i];
            }
        for (int d = 0; d < D; d++)
            nr += B[d * Q + j] * B[d * Q + j];
        if (!(nr > 1e-12 * n0 && nr > 0) && axis < D) {
            for (int d = 0; d < D; d++)
                B[d * Q + j] = d == axis ? 1.0 : 0.0;
            axis++;
            j--; /* project the axis instead; at most D times */
            continue;
        }
        nr = sqrt(nr > 0 ? nr : 1.0);
        for (int d = 0; d < D; d++)
            B[d * Q + j] /= nr;
    }
}

/* The top Q principal directions of window w's frames (B, D x Q orthonormal) from the L x L
 * Gram matrix; also sets w->energy and w->conc. Returns non-zero when LAPACK fails. */
static int tw_local(tw_ctx *c, tw_window *w, double *B)
{
    int L = c->L, D = c->D, Q = c->Q;
    const double *Y = tw_frames(c, w);
    double tot = 0.0, top = 0.0;

    la_gemm(0, 1, L, L, D, 1.0, Y, D, Y, D, 0.0, c->gram, L);
    for (int i = 0; i < L; i++)
        tot += c->gram[i * L + i];
    if (LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'L', L, c->gram, L, c->ev) != 0)
        return 1;
    for (int j = 0; j < Q; j++)
        top += c->ev[L - 1 - j] > 0 ? c->ev[L - 1 - j] : 0.0;
    w->energy = tot;
    w->conc = tot > 0 ? top / tot : 0.0;
    if (B != NULL) {
        /* u_j = Y^T v_j / sqrt(ev_j) */
        for (int d = 0; d < D; d++)
            for (int j = 0; j < Q; j++) {
                double v = 0.0;
                for (int i = 0; i < L; i++)
                    v += Y[(size_t)i * D + d] * c->gram[i * L + (L - 1 - j)];
                B[d * Q + j] = v;
            }
        tw_orth(D, Q, B);
    }
    return 0;
}

/* B <- orth(S B) three times, S the scatter of the frames of the windows in idx (n of them). */
static void tw_subspace(tw_ctx *c, const long *idx, long n, double *B, double *SB)
{
    int D = c->D, Q = c->Q, L = c->L;

    for (int it = 0; it < 3; it++) {
        memset(SB, 0, sizeof(double) * D * Q);
        for (long i = 0; i < n; i++) {
            const double *Y = tw_frames(c, &c->win[idx[i]]);
            la_gemm(0, 0, L, Q, D, 1.0, Y, D, B, Q, 0.0, c->yb, Q);
            la_gemm(1, 0, D, Q, L, 1.0, Y, D, c->yb, Q, 1.0, SB, Q);
        }
        memcpy(B, SB, sizeof(double) * D * Q);
        tw_orth(D, Q, B);
    }
}

static int tw_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int tw_cmp_conc(const void *a, const void *b)
{
    double x = ((const tw_window *)a)->conc, y = ((const tw_window *)b)->conc;
    return (x < y) - (x > y); /* descending */
}

vbm_status temporal_start_windows(vbm_temporal *m, const vbm_sequence *seqs, int nseq, rng_t *rng,
                                  double keep, int *used, vbm_error *err)
{
    tw_ctx c;
    int D = m->D, P = m->P, Q = m->Q, K = m->K;
    long nall = 0, nsel, *assign = NULL, *idx = NULL;
    double *B = NULL, *SB = NULL, *dist = NULL, *cap = NULL, noise = 0.0, nres = 0.0;
    double *Bbest = NULL, best_tot = 0.0;
    long *abest = NULL, *near = NULL;
    double *miss = NULL, *srt = NULL;
    vbm_status rc = VBM_OK;

    *used = 0;
    memset(&c, 0, sizeof c);
    c.D = D;
    c.Q = Q;
    c.P = P;
    c.L = 2 * Q + 4;
    c.seqs = seqs;
    if (Q >= D)
        return VBM_OK; /* every window spans everything */
    for (int i = 0; i < nseq; i++)
        if (seqs[i].T >= c.L)
            nall += (seqs[i].T - c.L) / (c.L / 2) + 1;
    if (nall < 4L * P)
        return VBM_OK;
    c.win = vbm_calloc((size_t)nall, sizeof *c.win);
    c.gram = vbm_calloc((size_t)c.L * c.L, sizeof(double));
    c.ev = vbm_calloc((size_t)c.L, sizeof(double));
    c.yb = vbm_calloc((size_t)c.L * Q, sizeof(double));
    B = vbm_calloc((size_t)P * D * Q, sizeof(double));
    SB = vbm_calloc((size_t)D * Q, sizeof(double));
    dist = vbm_calloc((size_t)nall, sizeof(double));
    cap = vbm_calloc((size_t)nall * P, sizeof(double));
    assign = vbm_calloc((size_t)nall, sizeof(long));
    idx = vbm_calloc((size_t)nall, sizeof(long));
    Bbest = vbm_calloc((size_t)P * D * Q, sizeof(double));
    abest = vbm_calloc((size_t)nall, sizeof(long));
    near = vbm_calloc((size_t)nall, sizeof(long));
    miss = vbm_calloc((size_t)nall, sizeof(double));
    srt = vbm_calloc((size_t)nall, sizeof(double));
    if (!near || !miss || !srt || !Bbest || !abest || !c.win || !c.gram || !c.ev || !c.yb || !B
        || !SB || !dist || !cap || !assign || !idx) {
        rc = vbm_fail(err, VBM_ENOMEM, "", "out of memory for the window start");
        goto out;
    }
    for (int i = 0; i < nseq; i++)
        for (long t0 = 0; t0 + c.L <= seqs[i].T; t0 += c.L / 2) {
            tw_window *w = &c.win[c.nwin++];
            w->s = i;
            w->t0 = t0;
            if (tw_local(&c, w, NULL) != 0) {
                rc = vbm_fail(err, VBM_ENUMERIC, "", "the eigen-decomposition of a window failed");
                goto out;
            }
        }
    /* the windows most nearly of rank Q: those where one identity alone is on */
    qsort(c.win, (size_t)c.nwin, sizeof *c.win, tw_cmp_conc);
    nsel = c.nwin / 2;
    while (nsel > 2L * P && !(c.win[nsel - 1].energy > 0))
        nsel--;
    if (!(c.win[nsel - 1].energy > 0))
        goto out;

    /* k-subspaces from TW_TRIES seedings; the grouping that captures the most energy of the
     * selected windows is kept */
    for (int tr = 0; tr < TW_TRIES; tr++) {
        double tot = 0.0;
        /* k-subspaces, seeded as k-means++: each new basis is the local basis of a window drawn
         * with probability proportional to the squared share of its energy the bases so far miss */
        if (tw_local(&c, &c.win[rng_below(rng, (uint64_t)nsel)], B) != 0) {
            rc = vbm_fail(err, VBM_ENUMERIC, "", "the eigen-decomposition of a window failed");
            goto out;
        }
        for (long i = 0; i < nsel; i++)
            dist[i] = 1.0;
        for (int p = 1; p < P; p++) {
            long pick;
            for (long i = 0; i < nsel; i++) {
                double miss =
                    1.0 - tw_captured(&c, &c.win[i], B + (size_t)(p - 1) * D * Q) / c.win[i].energy;
                dist[i] = fmin(dist[i], miss * miss);
            }
            pick = rng_categorical(rng, dist, nsel);
            if (tw_local(&c, &c.win[pick], B + (size_t)p * D * Q) != 0) {
                rc = vbm_fail(err, VBM_ENUMERIC, "", "the eigen-decomposition of a window failed");
                goto out;
            }
        }
        for (long i = 0; i < nsel; i++)
            assign[i] = -1;
        for (int it = 0; it < 50; it++) {
            long moved = 0;
            double cut = INFINITY;
            for (long i = 0; i < nsel; i++) {
                long best = 0;
                for (int p = 0; p < P; p++) {
                    cap[i * P + p] = tw_captured(&c, &c.win[i], B + (size_t)p * D * Q);
                    if (cap[i * P + p] > cap[i * P + best])
                        best = p;
                }
                miss[i] = 1.0 - cap[i * P + best] / c.win[i].energy;
                near[i] = best;
            }
            if (keep < 1.0) {
                /* trimmed: the windows that their nearest basis explains worst (where
                 * identities overlap) are left out of the update */
                memcpy(srt, miss, sizeof(double) * nsel);
                qsort(srt, (size_t)nsel, sizeof(double), tw_cmp_double);
                cut = srt[(long)((double)(nsel - 1) * keep)];
            }
            for (long i = 0; i < nsel; i++) {
                long a = miss[i] <= cut ? near[i] : -1;
                moved += a != assign[i];
                assign[i] = a;
            }
            if (moved == 0)
                break;
            for (int p = 0; p < P; p++) {
                long n = 0;
                for (long i = 0; i < nsel; i++)
                    if (assign[i] == p)
                        idx[n++] = i;
                if (n == 0) {
                    /* an empty group takes the window the bases explain worst */
                    long worst = 0;
                    double wv = INFINITY;
                    for (long i = 0; i < nsel; i++) {
                        double f = 1.0 - miss[i];
                        if (f < wv) {
                            wv = f;
                            worst = i;
                        }
                    }
                    assign[worst] = p;
                    idx[n++] = worst;
                }
                tw_subspace(&c, idx, n, B + (size_t)p * D * Q, SB);
            }
        }
        /* untrimmed: the energy the bases capture; trimmed: minus the share of its energy that
         * each kept window's basis misses */
        for (long i = 0; i < nsel; i++)
            if (assign[i] >= 0 && keep >= 1.0)
                tot += tw_captured(&c, &c.win[i], B + (size_t)assign[i] * D * Q);
            else if (assign[i] >= 0)
                tot -= miss[i];
        if (tr == 0 || tot > best_tot) {
            best_tot = tot;
            memcpy(Bbest, B, sizeof(double) * P * D * Q);
            memcpy(abest, assign, sizeof(long) * nsel);
        }
    }
    memcpy(B, Bbest, sizeof(double) * P * D * Q);
    memcpy(assign, abest, sizeof(long) * nsel);
    /* the noise variance from what the bases miss, and each identity's scale along its basis */
    for (long i = 0; i < nsel; i++) {
        if (assign[i] < 0)
            continue;
        noise += c.win[i].energy - tw_captured(&c, &c.win[i], B + (size_t)assign[i] * D * Q);
        nres += (double)c.L * (D - Q);
    }
    noise = nres > 0 ? fmax(noise / nres, 0.0) : 0.0;
    for (int p = 0; p < P; p++) {
        double *Bp = B + (size_t)p * D * Q, Sq[16 * 16], evq[16];
        long n = 0;
        for (long i = 0; i < nsel; i++)
            if (assign[i] == p)
                idx[n++] = i;
        /* Sq = Bp^T S Bp / frames, its eigenvectors rotate Bp */
        memset(Sq, 0, sizeof Sq);
        for (long i = 0; i < n; i++) {
            la_gemm(0, 0, c.L, Q, D, 1.0, tw_frames(&c, &c.win[idx[i]]), D, Bp, Q, 0.0, c.yb, Q);
            la_gemm(1, 0, Q, Q, c.L, 1.0, c.yb, Q, c.yb, Q, 1.0, Sq, Q);
        }
        for (int j = 0; j < Q * Q; j++)
            Sq[j] /= (double)(n > 0 ? n * c.L : 1);
        if (LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'L', Q, Sq, Q, evq) != 0) {
            rc = vbm_fail(err, VBM_ENUMERIC, "", "the eigen-decomposition of a group failed");
            goto out;
        }
        for (int d = 0; d < D; d++)
            for (int j = 0; j < Q; j++) {
                double v = 0.0, sc = sqrt(fmax(evq[Q - 1 - j] - noise, 0.01 * evq[Q - 1 - j]));
                for (int r = 0; r < Q; r++)
                    v += Bp[d * Q + r] * Sq[r * Q + (Q - 1 - j)];
                m->mw[(size_t)d * K + p * Q + j] = v * sc;
            }
    }
    *used = 1;
out:
    free(c.win);
    free(c.gram);
    free(c.ev);
    free(c.yb);
    free(B);
    free(SB);
    free(dist);
    free(cap);
    free(assign);
    free(idx);
    free(Bbest);
    free(abest);
    free(near);
    free(miss);
    free(srt);
    return rc;
}
