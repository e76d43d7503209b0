/* session_temporal.c -- owns the operations of sessions of kind temporal (session_temporal.h):
 * the temporal memory of a session, its locked reads and its persisted mutations. */
#define _GNU_SOURCE /* pthread_rwlockattr_setkind_np */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/session_impl.h"
#include "engine/session_temporal.h"

/* Pass on a libvbmem failure recorded in verr (its field and message). */
static vbm_status tsess_lib_fail(vbm_error *err, vbm_status vst, const vbm_error *verr)
{
    if (err != NULL) {
        *err = *verr;
        err->status = vst;
    }
    return vst;
}

static size_t tsess_bytes(const vbm_temporal *m)
{
    return sizeof(eng_session) + vbm_temporal_bytes(m);
}

double eng_temporal_config_bytes(const vbm_temporal_config *c)
{
    double D = c->code_size, K = (double)c->components * c->attributes, G = c->lambda_grid;

    return (double)sizeof(eng_session) + 1024.0
           + 8.0 * (D * K * 3 + D * K * K + 6 * D + 12 * K + 2 * K * K + 6 * G);
}

vbm_status eng_session_create_temporal(const vbm_temporal_config *cfg, long ttl_s,
                                       const unsigned char *owner, eng_session **out,
                                       vbm_error *err)
{
    pthread_rwlockattr_t attr;
    eng_session *s;
    vbm_error verr;
    vbm_status st;

    *out = NULL;
    verr.msg[0] = '\0';
    verr.field[0] = '\0';
    if (ttl_s < 0)
        return vbm_fail(err, VBM_EINVAL, "ttl_seconds", "must be >= 0");
    if (vbm_temporal_config_check(cfg, &verr) != VBM_OK)
        return tsess_lib_fail(err, VBM_EINVAL, &verr);
    s = calloc(1, sizeof *s);
    if (s == NULL)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    st = eng_random_id(s->id, err);
    if (st != VBM_OK) {
        free(s);
        return st;
    }
    st = vbm_temporal_create(cfg, &s->tmem, &verr);
    if (st != VBM_OK) {
        free(s);
        return tsess_lib_fail(err, st, &verr);
    }
    s->temporal = 1;
    if (owner != NULL)
        memcpy(s->owner, owner, ENG_OWNER_LEN);
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&s->lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    atomic_init(&s->refs, 1);
    atomic_init(&s->model, NULL);
    s->solver.iterations = 100;
    s->ttl_s = ttl_s;
    s->created = eng_wall();
    s->updated = s->created;
    s->version = 1;
    atomic_init(&s->last_used_ms, (long long)(eng_now() * 1000.0));
    atomic_init(&s->bytes, tsess_bytes(s->tmem));
    *out = s;
    return VBM_OK;
}

int eng_session_is_temporal(const eng_session *s)
{
    return s->temporal;
}

void eng_session_temporal_config(eng_session *s, vbm_temporal_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    if (!s->temporal)
        return;
    pthread_rwlock_rdlock(&s->lock);
    vbm_temporal_summary(s->tmem, cfg, NULL, NULL, NULL);
    pthread_rwlock_unlock(&s->lock);
}

/* The write lock (eng_session_wrlock); VBM_EINVAL for another kind. */
static vbm_status tsess_wrlock(eng_session *s, int64_t if_match, double *wait_s, vbm_error *err)
{
    if (!s->temporal)
        return vbm_fail(err, VBM_EINVAL, "kind", "not a temporal session");
    return eng_session_wrlock(s, if_match, wait_s, err);
}

/* The read lock; VBM_EINVAL for another kind. */
static vbm_status tsess_rdlock(eng_session *s, vbm_error *err)
{
    if (!s->temporal)
        return vbm_fail(err, VBM_EINVAL, "kind", "not a temporal session");
    pthread_rwlock_rdlock(&s->lock);
    return VBM_OK;
}

/* After a mutation (write lock held, undo the memory before it, or NULL for a session without
 * persistence): version, time and bytes, then persist; on a failed persist the state before is
 * restored, the current memory freed unless keep_current, and the failure returned. Consumes
 * undo. */
static vbm_status tsess_commit(eng_session *s, vbm_temporal *undo, int keep_current, vbm_error *err)
{
    uint64_t prev = s->version;
    double prev_updated = s->updated;
    size_t prev_bytes = atomic_load(&s->bytes);
    vbm_status st;

    s->version++;
    s->updated = eng_wall();
    atomic_store(&s->bytes, tsess_bytes(s->tmem));
    if (s->persist == NULL) {
        vbm_temporal_free(undo);
        return VBM_OK;
    }
    st = s->persist(s->persist_ctx, s, prev, err);
    if (st == VBM_OK) {
        vbm_temporal_free(undo);
        return VBM_OK;
    }
    if (!keep_current)
        vbm_temporal_free(s->tmem);
    s->tmem = undo;
    s->version = prev;
    s->updated = prev_updated;
    atomic_store(&s->bytes, prev_bytes);
    return st;
}

vbm_status eng_session_temporal_write(eng_session *s, int append, const vbm_sequence *seqs, int n,
                                      const eng_temporal_opts *o, eng_temporal_out *out,
                                      vbm_error *err)
{
    vbm_temporal_opts lo;
    vbm_temporal *undo = NULL;
    vbm_error verr;
    vbm_status st;
    double t0;

    memset(out, 0, sizeof *out);
    out->free_energy = NAN;
    verr.msg[0] = '\0';
    verr.field[0] = '\0';
    st = tsess_wrlock(s, o->if_match, &out->wait_s, err);
    if (st != VBM_OK)
        return st;
    if (s->persist != NULL && vbm_temporal_clone(s->tmem, &undo, &verr) != VBM_OK) {
        pthread_rwlock_unlock(&s->lock);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for the undo copy");
    }
    vbm_temporal_opts_default(&lo);
    lo.iterations = o->iterations;
    lo.sweeps = o->sweeps;
    lo.restarts = o->restarts;
    lo.start = o->start;
    lo.warm_start = o->warm_start;
    lo.tol = o->tolerance;
    lo.seed = o->seed;
    t0 = eng_now();
    st = append ? vbm_temporal_append(s->tmem, seqs, n, &lo, &out->trace, &verr)
                : vbm_temporal_write(s->tmem, seqs, n, &lo, &out->trace, &verr);
    out->solve_s = eng_now() - t0;
    if (st != VBM_OK) {
        pthread_rwlock_unlock(&s->lock);
        vbm_temporal_free(undo);
        return tsess_lib_fail(err, st, &verr);
    }
    st = tsess_commit(s, undo, 0, err);
    if (st == VBM_OK) {
        out->version = s->version;
        vbm_temporal_summary(s->tmem, NULL, &out->sequences, &out->frames, &out->free_energy);
    }
    pthread_rwlock_unlock(&s->lock);
    if (st != VBM_OK)
        eng_temporal_out_free(out);
    return st;
}

void eng_temporal_out_free(eng_temporal_out *o)
{
    if (o != NULL)
        vbm_temporal_trace_free(&o->trace);
}

vbm_status eng_session_temporal_infer(eng_session *s, const vbm_sequence *q, int sweeps,
                                      double **qb, double **a, double *fe, vbm_temporal_config *cfg,
                                      uint64_t *version, vbm_error *err)
{
    vbm_error verr;
    vbm_status st;

    *qb = *a = NULL;
    verr.msg[0] = '\0';
    verr.field[0] = '\0';
    if ((st = tsess_rdlock(s, err)) != VBM_OK)
        return st;
    vbm_temporal_summary(s->tmem, cfg, NULL, NULL, NULL);
    *version = s->version;
    if (q->T >= 1 && q->T <= VBM_MAX_FRAMES) {
        *qb = vbm_calloc((size_t)q->T * cfg->components, sizeof(double));
        *a = vbm_calloc((size_t)q->T * cfg->components * cfg->attributes, sizeof(double));
    }
    if (q->T >= 1 && q->T <= VBM_MAX_FRAMES && (*qb == NULL || *a == NULL))
        st = vbm_fail(err, VBM_ENOMEM, "sequence", "out of memory for %ld frames", q->T);
    else if ((st = vbm_temporal_infer(s->tmem, q, sweeps, *qb, *a, fe, &verr)) != VBM_OK)
        st = tsess_lib_fail(err, st, &verr);
    pthread_rwlock_unlock(&s->lock);
    if (st != VBM_OK) {
        free(*qb);
        free(*a);
        *qb = *a = NULL;
    }
    return st;
}

vbm_status eng_session_temporal_sample(eng_session *s, long T, uint64_t seed, double **y, int **b,
                                       double **a, vbm_temporal_config *cfg, uint64_t *version,
                                       vbm_error *err)
{
    vbm_error verr;
    vbm_status st;

    *y = NULL;
    *b = NULL;
    *a = NULL;
    verr.msg[0] = '\0';
    verr.field[0] = '\0';
    if (T < 1 || T > VBM_MAX_FRAMES)
        return vbm_fail(err, VBM_EINVAL, "length", "%ld is not in [1, %ld]", T, VBM_MAX_FRAMES);
    if ((st = tsess_rdlock(s, err)) != VBM_OK)
        return st;
    vbm_temporal_summary(s->tmem, cfg, NULL, NULL, NULL);
    *version = s->version;
    *y = vbm_calloc((size_t)T * cfg->code_size, sizeof(double));
    *b = vbm_calloc((size_t)T * cfg->components, sizeof(int));
    *a = vbm_calloc((size_t)T * cfg->components * cfg->attributes, sizeof(double));
    if (*y == NULL || *b == NULL || *a == NULL)
        st = vbm_fail(err, VBM_ENOMEM, "length", "out of memory for %ld frames", T);
    else if ((st = vbm_temporal_sample(s->tmem, T, seed, *y, *b, *a, &verr)) != VBM_OK)
        st = tsess_lib_fail(err, st, &verr);
    pthread_rwlock_unlock(&s->lock);
    if (st != VBM_OK) {
        free(*y);
        free(*b);
        free(*a);
        *y = NULL;
        *b = NULL;
        *a = NULL;
    }
    return st;
}

vbm_status eng_session_temporal_continue(eng_session *s, const vbm_sequence *prefix, long n,
                                         int sweeps, uint64_t seed, int nsamples, double **mean,
                                         double **qb, double **samples, vbm_temporal_config *cfg,
                                         uint64_t *version, vbm_error *err)
{
    vbm_error verr;
    vbm_status st;

    *mean = *qb = *samples = NULL;
    verr.msg[0] = '\0';
    verr.field[0] = '\0';
    if (n < 1 || n > VBM_MAX_FRAMES)
        return vbm_fail(err, VBM_EINVAL, "steps", "%ld is not in [1, %ld]", n, VBM_MAX_FRAMES);
    if (nsamples < 0 || nsamples > 100000)
        return vbm_fail(err, VBM_EINVAL, "samples", "%d is not in [0, 100000]", nsamples);
    if ((st = tsess_rdlock(s, err)) != VBM_OK)
        return st;
    vbm_temporal_summary(s->tmem, cfg, NULL, NULL, NULL);
    *version = s->version;
    *mean = vbm_calloc((size_t)n * cfg->code_size, sizeof(double));
    *qb = vbm_calloc((size_t)n * cfg->components, sizeof(double));
    if (nsamples > 0)
        *samples = vbm_calloc((size_t)nsamples * n * cfg->code_size, sizeof(double));
    if (*mean == NULL || *qb == NULL || (nsamples > 0 && *samples == NULL))
        st = vbm_fail(err, VBM_ENOMEM, "steps", "out of memory for %ld steps", n);
    else if ((st = vbm_temporal_continue(s->tmem, prefix, n, sweeps, seed, nsamples, *mean, *qb,
                                         *samples, &verr))
             != VBM_OK)
        st = tsess_lib_fail(err, st, &verr);
    pthread_rwlock_unlock(&s->lock);
    if (st != VBM_OK) {
        free(*mean);
        free(*qb);
        free(*samples);
        *mean = *qb = *samples = NULL;
    }
    return st;
}

vbm_status eng_session_temporal_export(eng_session *s, vbm_temporal **copy, uint64_t *version,
                                       vbm_error *err)
{
    vbm_error verr;
    vbm_status st;

    *copy = NULL;
    verr.msg[0] = '\0';
    if ((st = tsess_rdlock(s, err)) != VBM_OK)
        return st;
    *version = s->version;
    st = vbm_temporal_clone(s->tmem, copy, &verr);
    pthread_rwlock_unlock(&s->lock);
    if (st != VBM_OK)
        return vbm_fail(err, VBM_ENOMEM, NULL, "cannot export: %s", verr.msg);
    return VBM_OK;
}

vbm_status eng_session_temporal_replace(eng_session *s, vbm_temporal *m, int64_t if_match,
                                        uint64_t *version, vbm_error *err)
{
    vbm_temporal_config now, next;
    vbm_temporal *old;
    vbm_status st;

    if ((st = tsess_wrlock(s, if_match, NULL, err)) != VBM_OK)
        return st;
    vbm_temporal_summary(s->tmem, &now, NULL, NULL, NULL);
    vbm_temporal_summary(m, &next, NULL, NULL, NULL);
    if (s->model_name[0] != '\0' && now.code_size != next.code_size) {
        pthread_rwlock_unlock(&s->lock);
        return vbm_fail(err, VBM_EINVAL, "memory.config.code_size",
                        "code size %d: the session's model \"%s\" has code size %d", next.code_size,
                        s->model_name, now.code_size);
    }
    /* the old memory itself is the undo copy */
    old = s->tmem;
    s->tmem = m;
    st = tsess_commit(s, s->persist != NULL ? old : NULL, 1, err);
    if (st == VBM_OK) {
        if (s->persist == NULL)
            vbm_temporal_free(old);
        *version = s->version;
    }
    pthread_rwlock_unlock(&s->lock);
    return st;
}
