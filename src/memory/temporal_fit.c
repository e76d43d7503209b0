/* temporal_fit.c -- owns the public operations of the temporal memory that fit or infer: write,
 * append (VB-EM with restarts and the eq. 19 warm start), infer (the best of several orders). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/memory_impl.h"
#include "memory/temporal.h"
#include "numerics/linalg.h"
#include "numerics/rng.h"

#include <lapacke.h>

/* ---- the public operations ---- */

void vbm_temporal_opts_default(vbm_temporal_opts *o)
{
    memset(o, 0, sizeof *o);
    o->iterations = 100;
    o->sweeps = 2;
    o->ard_start = 5;
    o->tol = 0.0;
    o->seed = 1;
    o->rescale = 1;
    o->restarts = 3;
    o->start = VBM_TEMPORAL_START_WINDOWS;
    o->warm_start = 1;
}

void vbm_temporal_trace_free(vbm_temporal_trace *t)
{
    if (t == NULL)
        return;
    free(t->free_energy);
    t->free_energy = NULL;
    t->iterations = 0;
}

/* Check one sequence against the memory; field names it "sequences[i]" style. */
vbm_status temporal_seq_check(const vbm_temporal *m, const vbm_sequence *s, const char *name,
                              vbm_error *err)
{
    char f[64];

    if (s->T < 1 || s->T > VBM_MAX_FRAMES) {
        snprintf(f, sizeof f, "%s.T", name);
        return vbm_fail(err, VBM_EINVAL, f, "%ld is not in [1, %ld]", s->T, VBM_MAX_FRAMES);
    }
    if (s->D != m->D) {
        snprintf(f, sizeof f, "%s.D", name);
        return vbm_fail(err, VBM_EINVAL, f, "%d differs from the memory's code_size %d", s->D,
                        m->D);
    }
    if ((double)s->T * m->D > (double)VBM_MAX_ELEMENTS
        || (double)s->T * m->P * m->Q * m->Q > (double)VBM_MAX_ELEMENTS) {
        snprintf(f, sizeof f, "%s.T", name);
        return vbm_fail(err, VBM_ENOMEM, f, "%ld frames are too many for this memory", s->T);
    }
    if (s->y == NULL) {
        snprintf(f, sizeof f, "%s.y", name);
        return vbm_fail(err, VBM_EINVAL, f, "is NULL");
    }
    if (!la_all_finite(s->T * (long)m->D, s->y)) {
        for (long i = 0; i < s->T * (long)m->D; i++)
            if (!isfinite(s->y[i])) {
                snprintf(f, sizeof f, "%s.y[%ld][%ld]", name, i / m->D, i % m->D);
                return vbm_fail(err, VBM_EINVAL, f, "is not finite");
            }
    }
    return VBM_OK;
}

/* Swap the posterior of a and b (same configuration). */
static void temporal_swap(vbm_temporal *a, vbm_temporal *b)
{
    vbm_temporal t = *a;
    *a = *b;
    *b = t;
}

/* The mean of q(W) <- U_m diag(sqrt(ev_m)) G / sqrt(K): the top m = min(K, D) principal
 * directions of the codes (eigenvectors of sum_t y_t y_t^T / N, LAPACK dsyevd) mixed by a
 * standard normal m x K matrix G drawn from rng. VBM_ENOMEM, VBM_ENUMERIC. */
static vbm_status init_pca(vbm_temporal *w, const vbm_sequence *seqs, int nseq, rng_t *rng,
                           vbm_error *err)
{
    int D = w->D, K = w->K, mm = K < D ? K : D;
    double *C = vbm_calloc((size_t)D * D, sizeof(double)), *ev = vbm_calloc(D, sizeof(double));
    double *G = vbm_calloc((size_t)mm * K, sizeof(double)), nfr = 0.0;
    vbm_status rc = VBM_OK;

    if (!C || !ev || !G) {
        rc = vbm_fail(err, VBM_ENOMEM, "", "out of memory for the PCA start");
        goto out;
    }
    for (int i = 0; i < nseq; i++) {
        la_gemm(1, 0, D, D, (int)seqs[i].T, 1.0, seqs[i].y, D, seqs[i].y, D, 1.0, C, D);
        nfr += (double)seqs[i].T;
    }
    for (size_t i = 0; i < (size_t)D * D; i++)
        C[i] /= nfr;
    if (LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'L', D, C, D, ev) != 0) {
        rc = vbm_fail(err, VBM_ENUMERIC, "", "the eigen-decomposition of the codes failed");
        goto out;
    }
    rng_normal_fill(rng, G, (long)mm * K);
    /* eigenvalues ascend: direction j is column D - 1 - j */
    for (int d = 0; d < D; d++)
        for (int k = 0; k < K; k++) {
            double v = 0.0;
            for (int j = 0; j < mm; j++) {
                int c = D - 1 - j;
                v += C[(size_t)d * D + c] * sqrt(ev[c] > 0 ? ev[c] : 0.0) * G[j * K + k];
            }
            w->mw[(size_t)d * K + k] = v / sqrt((double)K);
        }
out:
    free(C);
    free(ev);
    free(G);
    return rc;
}

static vbm_status infer_query(const vbm_temporal *m, const vbm_sequence *seq, int sweeps,
                              double *qb, double *a, double *local_fe, vbm_error *err);

/* q(B, A) of an eq. 19 sequence s <- that of the eq. 18 VBE under m18's q(Theta) (20 sweeps,
 * the best of the orders of vbm_temporal_infer): q(b_t) from it, <a_t> its mean (under eq. 19 a
 * does not depend on b), pairs q(b_{t-1}) q(b_t), no covariances (the first sweep sets them).
 * The warm start of eq. 19 (the seed's sec. 4: the second approximation initialised with the
 * result of the first). VBM_ENOMEM, VBM_ENUMERIC. */
static vbm_status tseq_from_eq18(const vbm_temporal *m18, const vbm_sequence *seq, tseq *s,
                                 vbm_error *err)
{
    int P = m18->P, K = m18->K;
    vbm_status rc = infer_query(m18, seq, 20, s->q1, s->ea, NULL, err);

    if (rc != VBM_OK)
        return rc;
    for (long t = 0; t < s->T; t++) {
        for (int p = 0; p < P; p++) {
            double q1 = s->q1[t * P + p];
            s->q0[t * P + p] = 1.0 - q1;
            if (t > 0) {
                double r1 = s->q1[(t - 1) * P + p], *xi = s->xi + ((size_t)t * P + p) * 4;
                xi[0] = (1.0 - r1) * (1.0 - q1);
                xi[1] = (1.0 - r1) * q1;
                xi[2] = r1 * (1.0 - q1);
                xi[3] = r1 * q1;
            }
        }
        for (int k = 0; k < K; k++) {
            size_t j = (size_t)t * K + k;
            s->ex[j] = s->q1[t * P + k / m18->Q] * s->ea[j];
            s->eaa[j] = s->ea[j] * s->ea[j];
        }
    }
    return VBM_OK;
}

/* Copy q(Theta) and what appends continue from (acc, fe_const, nseq, fitted) from src to dst
 * (same configuration). Never fails. */
static void temporal_copy_posterior(vbm_temporal *dst, const vbm_temporal *src)
{
    size_t D = (size_t)src->D, K = (size_t)src->K;

    memcpy(dst->mw, src->mw, sizeof(double) * D * K);
    memcpy(dst->Sw, src->Sw, sizeof(double) * D * K * K);
    memcpy(dst->ldJw, src->ldJw, sizeof(double) * D);
    memcpy(dst->gamma, src->gamma, sizeof(double) * K);
    memcpy(dst->rd, src->rd, sizeof(double) * D);
    memcpy(dst->re, src->re, sizeof(double) * D);
    memcpy(dst->ut, src->ut, sizeof dst->ut);
    memcpy(dst->lam, src->lam, sizeof(double) * 4 * K);
    temporal_stats_sum(&dst->acc, NULL, &src->acc, (int)D, (int)K);
    dst->fe_const = src->fe_const;
    dst->nseq = src->nseq;
    dst->last_fe = src->last_fe;
    dst->fitted = src->fitted;
    temporal_refresh(dst);
}

/* One VB-EM run: the fitted memory in *out (caller frees) and its free-energy trace in *fe_out
 * (malloc'd, *done_out values). base NULL: a write, from the prior and the start o->start drawn
 * with seed, or from init's q(Theta) when init is not NULL (a memory of the same sizes). base
 * not NULL: an append, started from base's q(Theta); every VBM step then adds
 * base's accumulated statistics (its sequences' q(B, A) as they were) to the new sequences',
 * the free energy counts those sequences through them (temporal_stats_fe + fe_const), and the
 * rescaling step is not taken (it would have to rescale the frozen q(B, A) too). The sequences
 * and options are checked by the caller. run (0, 1, ...) is the restart: with the windows start,
 * runs 0 and 1 of every 3 trim the grouping (keep 0.4 of the windows), run 2 does not; on draws
 * of 3 identities x 2 attributes the trimmed start finds the identities where the untrimmed one
 * mixes them, and on 3 x 1 the untrimmed one where the trimmed one once did not. */
static vbm_status fit_run(const vbm_temporal *m, const vbm_temporal *base, const vbm_temporal *init,
                          const vbm_sequence *seqs, int nseq, const vbm_temporal_opts *o,
                          uint64_t seed, int run, vbm_temporal **out, double **fe_out,
                          int *done_out, vbm_error *err)
{
    vbm_temporal *w = NULL;
    tseq *ss = NULL;
    tstats st, tot;
    double *scr = NULL, *fe = NULL, ysq = 0.0, nfr = 0.0, scale, loc = 0.0;
    vbm_status rc;
    int K, D, done = 0;
    rng_t rng;

    memset(&st, 0, sizeof st);
    memset(&tot, 0, sizeof tot);
    if ((rc = vbm_temporal_create(&m->cfg, &w, err)) != VBM_OK)
        return rc;
    K = w->K;
    D = w->D;
    ss = vbm_calloc((size_t)nseq, sizeof *ss);
    scr = vbm_calloc((size_t)3 * K * K + 4 * K + 16 * 16 * 3, sizeof(double));
    fe = vbm_calloc((size_t)o->iterations, sizeof(double));
    if (!ss || !scr || !fe || temporal_stats_alloc(&st, D, K) || temporal_stats_alloc(&tot, D, K)) {
        rc = vbm_fail(err, VBM_ENOMEM, "", "out of memory for a temporal write");
        goto out;
    }
    for (int i = 0; i < nseq; i++)
        if ((rc = temporal_seq_init(&ss[i], w, &seqs[i], w->cfg.vbe_temporal, err)) != VBM_OK)
            goto out;

    if (base != NULL || init != NULL) {
        temporal_copy_posterior(w, base != NULL ? base : init);
    } else {
        int used = 0;
        /* start: q(Theta) at the prior, except a random mean of q(W) on the data's scale */
        for (int i = 0; i < nseq; i++) {
            for (long j = 0; j < seqs[i].T * (long)D; j++)
                ysq += seqs[i].y[j] * seqs[i].y[j];
            nfr += (double)seqs[i].T;
        }
        scale = sqrt(ysq / (nfr * D) / K);
        if (!(scale > 0))
            scale = 1.0;
        rng_seed(&rng, seed);
        if (o->start == VBM_TEMPORAL_START_WINDOWS
            && (rc = temporal_start_windows(w, seqs, nseq, &rng, run % 3 == 2 ? 1.0 : 0.4, &used,
                                            err))
                   != VBM_OK)
            goto out;
        if (!used && o->start != VBM_TEMPORAL_START_RANDOM
            && (rc = init_pca(w, seqs, nseq, &rng, err)) != VBM_OK)
            goto out;
        if (o->start == VBM_TEMPORAL_START_RANDOM)
            for (size_t i = 0; i < (size_t)D * K; i++)
                w->mw[i] = scale * rng_normal(&rng);
        temporal_refresh(w);
    }
    for (int i = 0; i < nseq; i++)
        temporal_seq_data(&ss[i], &w->ex);
    if (init != NULL && base == NULL && w->cfg.vbe_temporal && !init->cfg.vbe_temporal)
        for (int i = 0; i < nseq; i++)
            if ((rc = tseq_from_eq18(init, &seqs[i], &ss[i], err)) != VBM_OK)
                goto out;

    for (int it = 0; it < o->iterations; it++) {
        double F;
        for (int i = 0; i < nseq; i++)
            for (int sw = 0; sw < o->sweeps; sw++)
                if ((rc = temporal_seq_sweep(&w->ex, &ss[i], sw % 2, scr, err)) != VBM_OK)
                    goto out;
        if (base == NULL && o->rescale && it > 0) {
            temporal_rescale_step(w, ss, nseq);
            temporal_refresh(w);
        }
        memset(st.N, 0, sizeof st.N);
        memset(st.Saa, 0, sizeof(double) * K);
        memset(st.Scr, 0, sizeof(double) * K);
        memset(st.Spr, 0, sizeof(double) * K);
        memset(st.R, 0, sizeof(double) * K * K);
        memset(st.r, 0, sizeof(double) * D * K);
        memset(st.yy, 0, sizeof(double) * D);
        st.ntr = st.nfr = 0.0;
        for (int i = 0; i < nseq; i++)
            temporal_stats_add(&st, &w->ex, &ss[i]);
        temporal_stats_sum(&tot, base ? &base->acc : NULL, &st, D, K);
        if ((rc = temporal_vbm_step(w, &tot, scr, err)) != VBM_OK)
            goto out;
        if (o->ard_start >= 0 && it >= o->ard_start)
            temporal_ard_step(w);
        temporal_refresh(w);
        F = temporal_global_fe(w);
        if (base != NULL)
            F += base->fe_const + temporal_stats_fe(&w->ex, &base->acc);
        loc = 0.0;
        for (int i = 0; i < nseq; i++) {
            temporal_seq_data(&ss[i], &w->ex);
            loc += temporal_seq_fe(&w->ex, &ss[i]);
        }
        F += loc;
        if (!isfinite(F)) {
            rc = vbm_fail(err, VBM_ENUMERIC, "", "the free energy is not finite at iteration %d",
                          it);
            goto out;
        }
        fe[done++] = F;
        if (o->tol > 0 && done > 1 && F - fe[done - 2] < o->tol * fabs(F))
            break;
    }
    /* what a later append continues from: every sequence's statistics and the q(Theta)-free
     * part of their free energy (loc minus its q(Theta) part, constant in q(Theta)) */
    temporal_stats_sum(&w->acc, NULL, &tot, D, K);
    w->fe_const = (base ? base->fe_const : 0.0) + loc - temporal_stats_fe(&w->ex, &st);
    w->nseq = (base ? base->nseq : 0) + nseq;
    w->last_fe = fe[done - 1];
    w->fitted = 1;
    *out = w;
    w = NULL;
    *fe_out = fe;
    fe = NULL;
    *done_out = done;
    rc = VBM_OK;
out:
    if (ss)
        for (int i = 0; i < nseq; i++)
            temporal_seq_free(&ss[i]);
    free(ss);
    free(scr);
    free(fe);
    temporal_stats_release(&st);
    temporal_stats_release(&tot);
    vbm_temporal_free(w);
    return rc;
}

/* The shared path of write (append 0) and append (append 1): checks, the runs, the swap. */
static vbm_status temporal_fit(vbm_temporal *m, int append, const vbm_sequence *seqs, int nseq,
                               const vbm_temporal_opts *opts, vbm_temporal_trace *trace,
                               vbm_error *err)
{
    vbm_temporal_opts o;
    vbm_temporal *best = NULL, *warm = NULL;
    double *best_fe = NULL, nfr = 0.0;
    int best_done = 0, runs;
    vbm_status rc;

    if (trace) {
        trace->iterations = 0;
        trace->free_energy = NULL;
    }
    if (m == NULL)
        return vbm_fail(err, VBM_EINVAL, "memory", "is NULL");
    if (opts == NULL)
        vbm_temporal_opts_default(&o);
    else
        o = *opts;
    if (o.iterations < 1 || o.iterations > 1000000)
        return vbm_fail(err, VBM_EINVAL, "iterations", "%d is not in [1, 1000000]", o.iterations);
    if (o.sweeps < 1 || o.sweeps > 1000)
        return vbm_fail(err, VBM_EINVAL, "sweeps", "%d is not in [1, 1000]", o.sweeps);
    if (o.ard_start < -1)
        return vbm_fail(err, VBM_EINVAL, "ard_start", "%d is below -1", o.ard_start);
    if (!(isfinite(o.tol) && o.tol >= 0))
        return vbm_fail(err, VBM_EINVAL, "tol", "is not a finite number >= 0");
    if (o.restarts < 1 || o.restarts > 1000)
        return vbm_fail(err, VBM_EINVAL, "restarts", "%d is not in [1, 1000]", o.restarts);
    if (o.start < VBM_TEMPORAL_START_WINDOWS || o.start > VBM_TEMPORAL_START_RANDOM)
        return vbm_fail(err, VBM_EINVAL, "start", "%d is not 0 (windows), 1 (pca) or 2 (random)",
                        o.start);
    if (o.warm_start != 0 && o.warm_start != 1)
        return vbm_fail(err, VBM_EINVAL, "warm_start", "%d is not 0 or 1", o.warm_start);
    if (o.rescale != 0 && o.rescale != 1)
        return vbm_fail(err, VBM_EINVAL, "rescale", "%d is not 0 or 1", o.rescale);
    if (seqs == NULL || nseq < 1)
        return vbm_fail(err, VBM_EINVAL, "sequences", "no sequence given");
    for (int i = 0; i < nseq; i++) {
        char name[48];
        snprintf(name, sizeof name, "sequences[%d]", i);
        if ((rc = temporal_seq_check(m, &seqs[i], name, err)) != VBM_OK)
            return rc;
        nfr += (double)seqs[i].T;
    }
    if (append)
        nfr += m->acc.nfr;
    if (nfr > (double)VBM_MAX_FRAMES)
        return vbm_fail(err, VBM_EINVAL, "sequences", "%.0f frames in all exceed %ld", nfr,
                        VBM_MAX_FRAMES);
    append = append && m->fitted; /* an append to an empty memory is a write */
    if (!append && m->cfg.vbe_temporal && o.warm_start) {
        /* eq. 19 warm-started: the eq. 18 fit of the same options, then one eq. 19 run from
         * its q(Theta) */
        vbm_temporal_config c18 = m->cfg;
        c18.vbe_temporal = 0;
        if ((rc = vbm_temporal_create(&c18, &warm, err)) != VBM_OK)
            return rc;
        if ((rc = temporal_fit(warm, 0, seqs, nseq, &o, NULL, err)) != VBM_OK) {
            vbm_temporal_free(warm);
            return rc;
        }
    }
    runs = append || warm ? 1 : o.restarts;
    for (int r = 0; r < runs; r++) {
        vbm_temporal *w = NULL;
        double *fe = NULL;
        int done = 0;
        if ((rc = fit_run(m, append ? m : NULL, warm, seqs, nseq, &o, o.seed + (uint64_t)r, r, &w,
                          &fe, &done, err))
            != VBM_OK) {
            vbm_temporal_free(best);
            vbm_temporal_free(warm);
            free(best_fe);
            return rc;
        }
        if (best == NULL || fe[done - 1] > best_fe[best_done - 1]) {
            vbm_temporal_free(best);
            free(best_fe);
            best = w;
            best_fe = fe;
            best_done = done;
        } else {
            vbm_temporal_free(w);
            free(fe);
        }
    }
    vbm_temporal_free(warm);
    temporal_swap(m, best);
    vbm_temporal_free(best);
    if (trace) {
        trace->iterations = best_done;
        trace->free_energy = best_fe;
    } else {
        free(best_fe);
    }
    return VBM_OK;
}

vbm_status vbm_temporal_write(vbm_temporal *m, const vbm_sequence *seqs, int nseq,
                              const vbm_temporal_opts *opts, vbm_temporal_trace *trace,
                              vbm_error *err)
{
    return temporal_fit(m, 0, seqs, nseq, opts, trace, err);
}

vbm_status vbm_temporal_append(vbm_temporal *m, const vbm_sequence *seqs, int nseq,
                               const vbm_temporal_opts *opts, vbm_temporal_trace *trace,
                               vbm_error *err)
{
    return temporal_fit(m, 1, seqs, nseq, opts, trace, err);
}

double vbm_temporal_free_energy(const vbm_temporal *m)
{
    if (m == NULL || !m->fitted)
        return NAN;
    return temporal_global_fe(m) + m->fe_const + temporal_stats_fe(&m->ex, &m->acc);
}

void vbm_temporal_summary(const vbm_temporal *m, vbm_temporal_config *cfg, long *sequences,
                          long *frames, double *free_energy)
{
    if (m == NULL)
        return;
    if (cfg)
        *cfg = m->cfg;
    if (sequences)
        *sequences = m->nseq;
    if (frames)
        *frames = (long)m->acc.nfr;
    if (free_energy)
        *free_energy = m->last_fe;
}

vbm_status vbm_temporal_infer(const vbm_temporal *m, const vbm_sequence *seq, int sweeps,
                              double *qb, double *a, double *local_fe, vbm_error *err)
{
    vbm_status rc;

    if (m == NULL)
        return vbm_fail(err, VBM_EINVAL, "memory", "is NULL");
    if (seq == NULL)
        return vbm_fail(err, VBM_EINVAL, "sequence", "is NULL");
    if (sweeps < 1 || sweeps > 100000)
        return vbm_fail(err, VBM_EINVAL, "sweeps", "%d is not in [1, 100000]", sweeps);
    if ((rc = temporal_seq_check(m, seq, "sequence", err)) != VBM_OK)
        return rc;
    return infer_query(m, seq, sweeps, qb, a, local_fe, err);
}

/* q(B, A) of the query seq under m's q(Theta) (held fixed), in the structured form of eq. 18
 * (q(b_{1:T,p}) prod_t q(a_{t,p} | b_{t,p})), and for a memory fitted with eq. 19 in that form
 * too (the one of higher free energy is kept): VBE
 * sweeps from q(b) = 1/2, a = 0, alternating in direction (the last one forward when
 * last_forward). With the chain over each identity's b exact given q(a | b), a run of frames in
 * which an identity is off is switched off as a whole; the eq. 18 sites, updated one at a time,
 * keep it on (each site's neighbours are on) and lose whole frames where an identity's run has
 * ended. The coordinate ascent still lands in an optimum that depends on which identity it
 * updates first (the first takes what it can explain): up to 8 runs start from identities spread
 * over the P, in both directions, and the one of highest free energy is left in *out
 * (temporal_seq_free it), its free energy in *F. The sequence is checked by the caller.
 * VBM_ENOMEM, VBM_ENUMERIC. */
vbm_status temporal_infer_best(const vbm_temporal *m, const vbm_sequence *seq, int sweeps,
                               int last_forward, tseq *out, double *F, vbm_error *err)
{
    tseq s;
    double *scr, best = -INFINITY;
    vbm_status rc = VBM_OK;
    int orders, have = 0;

    memset(out, 0, sizeof *out);
    scr = vbm_calloc((size_t)4 * m->Q * m->Q + 4 * m->Q, sizeof(double));
    if (scr == NULL)
        return vbm_fail(err, VBM_ENOMEM, "", "out of memory");
    orders = m->P == 1 ? 1 : (m->P < 4 ? 2 * m->P : 8);
    /* the structured form of eq. 18 from every order; for a memory fitted with eq. 19, eq. 19's
     * chains too (they carry a_{1:T,p} jointly: where the identities are plain, their bound is
     * the higher) */
    for (int r = 0; r < orders * (m->cfg.vbe_temporal ? 2 : 1) && rc == VBM_OK; r++) {
        double f;
        int o = r % orders, eq19 = r >= orders;
        if ((rc = temporal_seq_init(&s, m, seq, eq19, err)) != VBM_OK)
            break;
        s.p0 = (o / 2) * m->P / (orders / 2 > 0 ? orders / 2 : 1);
        s.pdir = o % 2;
        temporal_seq_data(&s, &m->ex);
        if (!eq19 && (rc = temporal_seq_bchain(&s, m->P, err)) != VBM_OK) {
            temporal_seq_free(&s);
            break;
        }
        for (int i = 0; i < sweeps && rc == VBM_OK; i++)
            rc = temporal_seq_sweep(&m->ex, &s, last_forward ? (sweeps - 1 - i) % 2 : i % 2, scr,
                                    err);
        f = rc == VBM_OK ? temporal_seq_fe(&m->ex, &s) : NAN;
        if (rc == VBM_OK && (!have || f > best)) {
            if (have)
                temporal_seq_free(out);
            *out = s;
            best = f;
            have = 1;
        } else {
            temporal_seq_free(&s);
        }
    }
    free(scr);
    if (rc != VBM_OK && have)
        temporal_seq_free(out);
    if (rc == VBM_OK)
        *F = best;
    return rc;
}

/* vbm_temporal_infer after its checks. */
static vbm_status infer_query(const vbm_temporal *m, const vbm_sequence *seq, int sweeps,
                              double *qb, double *a, double *local_fe, vbm_error *err)
{
    tseq s;
    double F = NAN;
    vbm_status rc = temporal_infer_best(m, seq, sweeps, 0, &s, &F, err);

    if (rc != VBM_OK)
        return rc;
    if (qb)
        memcpy(qb, s.q1, sizeof(double) * seq->T * m->P);
    if (a)
        memcpy(a, s.ea, sizeof(double) * seq->T * m->K);
    if (local_fe)
        *local_fe = F;
    temporal_seq_free(&s);
    return VBM_OK;
}
