/* session.c -- owns session lifecycle (random ids, references, locking), its accessors, the binding
 * to a hosted model, and the locked write/append/refit/resize/forget/sample/read/export/replace
 * operations. */
#define _GNU_SOURCE /* pthread_rwlockattr_setkind_np, getrandom */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "engine/hosted.h"
#include "engine/session_impl.h"

size_t eng_memory_bytes(const vbm_memory *m)
{
    size_t K, C, GH, cg, n;

    if (m == NULL)
        return 0;
    K = (size_t)m->cfg.rows;
    C = (size_t)m->cfg.code_size;
    GH = (size_t)m->cfg.groups * (size_t)m->cfg.clusters;
    cg = (size_t)m->cg;
    n = K * C + K * K + C;                           /* prior R0, U0, mu_b0 */
    n += GH * (K * cg + K * K + cg + 1);             /* posterior R, U, mu_b, s2_b */
    n += (size_t)m->n_codes * C * 2;                 /* retained codes mu, s2 */
    n += (size_t)m->n_paths;                         /* tree path counts */
    n += (size_t)m->n_memos * (size_t)m->cfg.memo_k; /* tree memo scores */
    return sizeof *m + n * sizeof(double) + (size_t)m->n_paths * (size_t)m->cfg.groups * sizeof(int)
           + (size_t)m->n_memos * ((size_t)m->cfg.memo_k * (size_t)m->cfg.groups + 1)
                 * sizeof(int) /* tree memo paths and sizes */
           + (size_t)m->n_jpaths * ((size_t)m->cfg.groups * sizeof(int) + sizeof(double));
    /* the joint path prior's q(pi) counts */
}

/* Pass on the libvbmem failure vst recorded in verr: a failure that names no field
 * is re-rooted under deflt (when not NULL). Returns vst. */
static vbm_status sess_lib_fail(vbm_error *err, vbm_status vst, const char *deflt,
                                const vbm_error *verr)
{
    if (err == NULL)
        return vst;
    *err = *verr;
    err->status = vst;
    if (err->field[0] == '\0' && deflt != NULL)
        vbm_error_rebase(err, deflt);
    return vst;
}

int eng_id_ok(const char *id)
{
    return id != NULL && strlen(id) == ENG_ID_LEN && strspn(id, "0123456789abcdef") == ENG_ID_LEN;
}

vbm_status eng_random_id(char id[ENG_ID_LEN + 1], vbm_error *err)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[ENG_ID_LEN / 2];
    size_t got = 0;
    ssize_t n;
    int i;

    while (got < sizeof raw) {
        n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return vbm_fail(err, VBM_ENOMEM, NULL, "getrandom failed: %s", strerror(errno));
        got += (size_t)n;
    }
    for (i = 0; i < ENG_ID_LEN / 2; i++) {
        id[2 * i] = hex[raw[i] >> 4];
        id[2 * i + 1] = hex[raw[i] & 15];
    }
    id[ENG_ID_LEN] = '\0';
    return VBM_OK;
}

/* Bytes accounted for a session holding mem with usage of n doubles. */
static size_t sess_bytes(const vbm_memory *mem, size_t n_usage)
{
    return sizeof(eng_session) + eng_memory_bytes(mem) + n_usage * sizeof(double);
}

/* Initialise the writer-preferring lock and the reference count (1). */
static void sess_init_lock(eng_session *s)
{
    pthread_rwlockattr_t attr;

    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&s->lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    atomic_init(&s->refs, 1);
}

vbm_status eng_session_create(const vbm_config *cfg, const eng_solver *solver, long ttl_s,
                              const unsigned char *owner, eng_session **out, vbm_error *err)
{
    eng_session *s;
    vbm_error verr;
    vbm_status vst;
    vbm_status st;

    *out = NULL;
    verr.msg[0] = '\0';
    if (vbm_config_check(cfg, &verr) != VBM_OK)
        return sess_lib_fail(err, VBM_EINVAL, NULL, &verr);
    if (ttl_s < 0)
        return vbm_fail(err, VBM_EINVAL, "ttl_seconds", "must be >= 0");
    s = calloc(1, sizeof *s);
    if (s == NULL)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    st = eng_random_id(s->id, err);
    if (st != VBM_OK) {
        free(s);
        return st;
    }
    vst = vbm_memory_create(cfg, NULL, NULL, &s->mem, &verr);
    if (vst != VBM_OK) {
        free(s);
        return sess_lib_fail(err, vst == VBM_ENOMEM ? VBM_ENOMEM : VBM_EINVAL, NULL, &verr);
    }
    if (owner != NULL)
        memcpy(s->owner, owner, ENG_OWNER_LEN);
    sess_init_lock(s);
    atomic_init(&s->model, NULL);
    s->solver = *solver;
    s->ttl_s = ttl_s;
    s->created = eng_wall();
    s->updated = s->created;
    s->version = 1;
    atomic_init(&s->last_used_ms, (long long)(eng_now() * 1000.0));
    atomic_init(&s->bytes, sess_bytes(s->mem, 0));
    *out = s;
    return VBM_OK;
}

void eng_session_set_persist(eng_session *s, eng_persist_fn fn, void *ctx)
{
    s->persist = fn;
    s->persist_ctx = ctx;
}

vbm_status eng_session_to_record(const eng_session *s, eng_record *rec, vbm_error *err)
{
    size_t n = s->temporal ? 0 : (size_t)s->mem->cfg.groups * (size_t)s->mem->cfg.clusters;
    long long idle_ms = (long long)(eng_now() * 1000.0) - atomic_load(&s->last_used_ms);
    vbm_error verr;
    vbm_status vst;

    memset(rec, 0, sizeof *rec);
    verr.msg[0] = '\0';
    memcpy(rec->id, s->id, sizeof rec->id);
    memcpy(rec->owner, s->owner, ENG_OWNER_LEN);
    rec->version = s->version;
    rec->ttl_s = s->ttl_s;
    rec->created = s->created;
    rec->updated = s->updated;
    rec->used = eng_wall() - (idle_ms > 0 ? (double)idle_ms / 1000.0 : 0.0);
    rec->solver = s->solver;
    memcpy(rec->model_name, s->model_name, sizeof rec->model_name);
    vst = s->temporal ? vbm_temporal_export(s->tmem, &rec->blob, &rec->blob_len, &verr)
                      : vbm_export(s->mem, &rec->blob, &rec->blob_len, &verr);
    if (vst != VBM_OK) {
        memset(rec, 0, sizeof *rec);
        return vbm_fail(err, VBM_ENOMEM, NULL, "cannot export session %s: %s", s->id, verr.msg);
    }
    if (s->usage != NULL) {
        rec->usage = malloc(n * sizeof *rec->usage);
        if (rec->usage == NULL) {
            eng_record_free(rec);
            return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
        }
        memcpy(rec->usage, s->usage, n * sizeof *rec->usage);
        rec->n_usage = n;
    }
    return VBM_OK;
}

vbm_status eng_session_from_record(const eng_record *rec, eng_session **out, vbm_error *err)
{
    eng_session *s;
    vbm_error verr;
    vbm_status vst;
    size_t n, i;
    double now_wall = eng_wall(), idle;

    *out = NULL;
    verr.msg[0] = '\0';
    if (strlen(rec->id) != ENG_ID_LEN || strspn(rec->id, "0123456789abcdef") != ENG_ID_LEN)
        return vbm_fail(err, VBM_EFORMAT, NULL, "stored session id \"%.40s\" is malformed",
                        rec->id);
    if (rec->ttl_s < 0 || rec->version < 1)
        return vbm_fail(err, VBM_EFORMAT, NULL, "stored session %s: bad TTL or version", rec->id);
    s = calloc(1, sizeof *s);
    if (s == NULL)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    /* the kind (bytes 16..23 of the format) says which import: 5 is a temporal memory */
    s->temporal = rec->blob_len >= 24 && rec->blob[16] == 5 && rec->blob[17] == 0;
    vst = s->temporal ? vbm_temporal_import(rec->blob, rec->blob_len, &s->tmem, &verr)
                      : vbm_import(rec->blob, rec->blob_len, &s->mem, &verr);
    if (vst != VBM_OK) {
        free(s);
        return vbm_fail(err, vst == VBM_ENOMEM ? VBM_ENOMEM : VBM_EFORMAT, NULL,
                        "stored session %s does not import: %s", rec->id, verr.msg);
    }
    n = s->temporal ? 0 : (size_t)s->mem->cfg.groups * (size_t)s->mem->cfg.clusters;
    if (rec->usage != NULL) {
        s->usage = rec->n_usage == n ? malloc(n * sizeof *s->usage) : NULL;
        if (s->usage == NULL) {
            vbm_memory_free(s->mem);
            vbm_temporal_free(s->tmem);
            free(s);
            if (rec->n_usage != n)
                return vbm_fail(err, VBM_EFORMAT, NULL,
                                "stored session %s: %zu usage values for %zu clusters", rec->id,
                                rec->n_usage, n);
            return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
        }
        for (i = 0; i < n; i++)
            s->usage[i] = rec->usage[i];
    }
    memcpy(s->id, rec->id, sizeof s->id);
    memcpy(s->owner, rec->owner, ENG_OWNER_LEN);
    sess_init_lock(s);
    atomic_init(&s->model, NULL); /* bound on first use (eng_session_model) */
    memcpy(s->model_name, rec->model_name, sizeof s->model_name);
    s->model_name[ENG_MODEL_NAME_LEN] = '\0';
    s->solver = rec->solver;
    s->ttl_s = rec->ttl_s;
    s->created = rec->created;
    s->updated = rec->updated;
    s->version = rec->version;
    idle = now_wall - rec->used;
    atomic_init(&s->last_used_ms,
                (long long)(eng_now() * 1000.0) - (idle > 0.0 ? (long long)(idle * 1000.0) : 0));
    atomic_init(&s->bytes, s->temporal ? sizeof(eng_session) + vbm_temporal_bytes(s->tmem)
                                       : sess_bytes(s->mem, s->usage != NULL ? n : 0));
    *out = s;
    return VBM_OK;
}

void eng_record_free(eng_record *rec)
{
    if (rec == NULL)
        return;
    free(rec->blob);
    free(rec->usage);
    rec->blob = NULL;
    rec->usage = NULL;
    rec->blob_len = 0;
    rec->n_usage = 0;
}

void eng_session_ref(eng_session *s)
{
    atomic_fetch_add(&s->refs, 1);
}

void eng_session_unref(eng_session *s)
{
    if (s == NULL || atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    pthread_rwlock_destroy(&s->lock);
    eng_model_unref(atomic_load(&s->model));
    vbm_memory_free(s->mem);
    vbm_temporal_free(s->tmem);
    free(s->usage);
    free(s);
}

void eng_session_touch(eng_session *s)
{
    atomic_store(&s->last_used_ms, (long long)(eng_now() * 1000.0));
}

void eng_session_rdlock(eng_session *s)
{
    pthread_rwlock_rdlock(&s->lock);
}

void eng_session_unlock(eng_session *s)
{
    pthread_rwlock_unlock(&s->lock);
}

const char *eng_session_id(const eng_session *s)
{
    return s->id;
}

const char *eng_session_model_name(const eng_session *s)
{
    return s->model_name;
}

uint64_t eng_session_version(eng_session *s)
{
    uint64_t v;

    pthread_rwlock_rdlock(&s->lock);
    v = s->version;
    pthread_rwlock_unlock(&s->lock);
    return v;
}

void eng_session_config(eng_session *s, vbm_config *cfg)
{
    pthread_rwlock_rdlock(&s->lock);
    if (s->temporal) { /* a temporal session: only its code size */
        vbm_temporal_config tc;
        vbm_temporal_summary(s->tmem, &tc, NULL, NULL, NULL);
        memset(cfg, 0, sizeof *cfg);
        cfg->code_size = tc.code_size;
    } else {
        *cfg = s->mem->cfg;
    }
    pthread_rwlock_unlock(&s->lock);
}

int eng_session_code_size(eng_session *s)
{
    vbm_config cfg;

    eng_session_config(s, &cfg);
    return cfg.code_size;
}

size_t eng_session_bytes(const eng_session *s)
{
    return atomic_load(&((eng_session *)s)->bytes);
}

size_t eng_session_footprint(const vbm_memory *mem)
{
    return sess_bytes(mem, 0);
}

double eng_session_config_bytes(const vbm_config *c)
{
    double K = c->rows, C = c->code_size, GH = (double)c->groups * c->clusters,
           cg = (double)c->code_size / c->groups;

    return (double)sizeof(vbm_memory) + (double)sizeof(eng_session)
           + 8.0 * (K * C + K * K + C + GH * (K * cg + K * K + cg + 1.0 + 1.0));
}

void eng_session_test_fail_alloc(eng_session *s, int nth)
{
    atomic_store(&s->test_fail_alloc, nth > 0 ? nth : 0);
}

/* malloc for the session's write path; NULL also when a test made this one
 * fail (eng_session_test_fail_alloc). */
static void *sess_alloc(eng_session *s, size_t size)
{
    int k = atomic_load(&s->test_fail_alloc);

    if (k > 0) {
        atomic_store(&s->test_fail_alloc, k - 1);
        if (k == 1)
            return NULL;
    }
    return malloc(size);
}

/* Copy of the G*H usage array of s (NULL when s has none); *fail set on ENOMEM. */
static double *sess_usage_copy(eng_session *s, int *fail)
{
    size_t n;
    double *u;

    *fail = 0;
    if (s->usage == NULL || s->temporal)
        return NULL;
    n = (size_t)s->mem->cfg.groups * (size_t)s->mem->cfg.clusters;
    u = sess_alloc(s, n * sizeof *u);
    if (u == NULL) {
        *fail = 1;
        return NULL;
    }
    memcpy(u, s->usage, n * sizeof *u);
    return u;
}

vbm_status eng_session_info(eng_session *s, eng_info *info, vbm_error *err)
{
    int fail;

    memset(info, 0, sizeof *info);
    pthread_rwlock_rdlock(&s->lock);
    memcpy(info->id, s->id, sizeof info->id);
    info->solver = s->solver;
    info->ttl_s = s->ttl_s;
    info->free_energy = NAN;
    if (s->temporal) {
        info->temporal = 1;
        vbm_temporal_summary(s->tmem, &info->tcfg, &info->sequences, &info->frames,
                             &info->free_energy);
        info->cfg.code_size = info->tcfg.code_size;
        info->last_elbo = NAN;
    } else {
        info->cfg = s->mem->cfg;
        info->frames = s->mem->frames;
        info->retained = s->mem->n_codes;
        info->last_elbo = s->mem->last_elbo;
    }
    info->version = s->version;
    info->created = s->created;
    info->updated = s->updated;
    info->bytes = atomic_load(&s->bytes);
    info->usage = sess_usage_copy(s, &fail);
    memcpy(info->model_name, s->model_name, sizeof info->model_name);
    pthread_rwlock_unlock(&s->lock);
    if (fail)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    return VBM_OK;
}

void eng_info_free(eng_info *info)
{
    free(info->usage);
    info->usage = NULL;
}

void eng_fit_out_free(eng_fit_out *out)
{
    if (out == NULL)
        return;
    vbm_write_result_free(&out->res);
    free(out->usage);
    out->usage = NULL;
}

/* Effective library options of a request given the session defaults. */
static void sess_opts(const eng_session *s, const eng_fit_opts *o, vbm_write_opts *w)
{
    vbm_write_opts_default(w);
    w->max_iter = o->iterations >= 0 ? o->iterations : s->solver.iterations;
    w->tol = o->tolerance >= 0.0 ? o->tolerance : s->solver.tolerance;
    w->init = o->init >= 0 ? (vbm_init)o->init : s->solver.init;
    w->seed = o->seed;
    w->max_seconds = o->max_seconds > 0.0 ? o->max_seconds : 0.0;
    w->want_addresses = 1; /* cluster usage needs q(s) */
    w->scratch = o->scratch;
}

/* Expected frames per (group, cluster) of addresses a, into u (G*H), added to
 * it when add is non-zero. */
static void sess_usage_add(const vbm_addresses *a, double *u, int add)
{
    size_t n = (size_t)a->G * (size_t)a->H, i;
    long t;

    if (!add)
        memset(u, 0, n * sizeof *u);
    if (a->s == NULL)
        return;
    for (t = 0; t < a->T; t++) {
        for (i = 0; i < n; i++)
            u[i] += a->s[(size_t)t * n + i];
    }
}

/* The usage arrays a commit needs, allocated before the fit changes anything
 * (sess_prealloc) so that the commit itself cannot fail. */
typedef struct {
    size_t n;     /* G*H they hold */
    double *next; /* the session's next usage array (when not added to in place) */
    double *copy; /* out->usage */
} sess_prealloc;

/* Allocate p for a fit that leaves G*H = n clusters; VBM_ENOMEM before anything changed. */
static vbm_status sess_prealloc_take(eng_session *s, size_t n, sess_prealloc *p, vbm_error *err)
{
    p->n = n;
    p->next = sess_alloc(s, n * sizeof(double));
    p->copy = p->next != NULL ? sess_alloc(s, n * sizeof(double)) : NULL;
    if (p->copy == NULL) {
        free(p->next);
        p->next = NULL;
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    }
    return VBM_OK;
}

/* After a successful fit: new usage, version, time, bytes and the out record.
 * Never fails: the memory has changed, so the write is applied and answered;
 * it takes what it needs from p (the rest is freed). */
static void sess_commit(eng_session *s, int add_usage, eng_fit_out *out, int keep_addr,
                        sess_prealloc *p)
{
    size_t n = (size_t)s->mem->cfg.groups * (size_t)s->mem->cfg.clusters;
    const vbm_addresses *a = &out->res.addr;

    if (a->s != NULL && (size_t)a->G * (size_t)a->H == n) {
        if (!add_usage || s->usage == NULL) {
            free(s->usage);
            s->usage = NULL;
            if (p->n == n) {
                s->usage = p->next;
                p->next = NULL;
            }
            add_usage = 0;
        }
        if (s->usage != NULL)
            sess_usage_add(a, s->usage, add_usage);
    }
    if (!keep_addr)
        vbm_addresses_free(&out->res.addr);
    s->version++;
    s->updated = eng_wall();
    atomic_store(&s->bytes, sess_bytes(s->mem, s->usage != NULL ? n : 0));
    out->version = s->version;
    out->frames = s->mem->frames;
    out->retained = s->mem->n_codes;
    out->clusters = s->mem->cfg.clusters;
    out->rows = s->mem->cfg.rows;
    out->groups = s->mem->cfg.groups;
    out->usage = NULL;
    if (s->usage != NULL && p->n == n) {
        memcpy(p->copy, s->usage, n * sizeof *p->copy);
        out->usage = p->copy;
        p->copy = NULL;
    }
    free(p->next);
    free(p->copy);
    p->next = p->copy = NULL;
}

vbm_status eng_session_wrlock(eng_session *s, int64_t if_match, double *wait_s, vbm_error *err)
{
    double t0 = eng_now();

    pthread_rwlock_wrlock(&s->lock);
    if (wait_s != NULL)
        *wait_s = eng_now() - t0;
    if (if_match >= 0 && (uint64_t)if_match != s->version) {
        pthread_rwlock_unlock(&s->lock);
        return vbm_fail(err, VBM_ECONFLICT, "If-Match", "the session is at version %llu, not %lld",
                        (unsigned long long)s->version, (long long)if_match);
    }
    return VBM_OK;
}

/* What a durable session needs to undo a mutation whose persist failed. */
typedef struct {
    vbm_memory *mem; /* the memory before the mutation (owned), NULL: nothing to undo */
    double *usage;   /* the usage before (owned) */
    uint64_t version;
    double updated;
    size_t bytes;
} sess_undo;

/* Record the undo state of s (write lock held) when s is durable; mem is the
 * memory to keep (NULL: a clone of s->mem is taken). Fails with VBM_ENOMEM. */
static vbm_status sess_undo_take(eng_session *s, vbm_memory *mem, sess_undo *u, vbm_error *err)
{
    vbm_error verr;
    int fail;

    memset(u, 0, sizeof *u);
    if (s->persist == NULL)
        return VBM_OK;
    u->usage = sess_usage_copy(s, &fail);
    if (fail)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    if (mem == NULL && vbm_memory_clone(s->mem, &mem, &verr) != VBM_OK) {
        free(u->usage);
        u->usage = NULL;
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for the undo copy");
    }
    u->mem = mem;
    u->version = s->version;
    u->updated = s->updated;
    u->bytes = atomic_load(&s->bytes);
    return VBM_OK;
}

/* Free the undo state (the mutation stays). */
static void sess_undo_drop(sess_undo *u)
{
    vbm_memory_free(u->mem);
    free(u->usage);
    memset(u, 0, sizeof *u);
}

/* Persist the mutation just made (write lock held); on failure restore the
 * state recorded in u, freeing the current memory unless keep_current (the
 * caller still owns it). Consumes u either way. */
static vbm_status sess_persist(eng_session *s, sess_undo *u, int keep_current, vbm_error *err)
{
    vbm_status st;

    if (s->persist == NULL)
        return VBM_OK;
    st = s->persist(s->persist_ctx, s, u->version, err);
    if (st == VBM_OK) {
        sess_undo_drop(u);
        return VBM_OK;
    }
    if (!keep_current)
        vbm_memory_free(s->mem);
    s->mem = u->mem;
    free(s->usage);
    s->usage = u->usage;
    s->version = u->version;
    s->updated = u->updated;
    atomic_store(&s->bytes, u->bytes);
    memset(u, 0, sizeof *u);
    return st;
}

/* What one fit under the write lock runs: a write in a mode, a resize, or a forget. */
typedef struct {
    int resize; /* 1: vbm_resize to H, K; 0: a write of codes in mode */
    eng_mode mode;
    const vbm_codes *codes;
    int H, K;
    vbm_forget_result *forget; /* not NULL: vbm_forget of the cues `codes` into it */
} sess_fit_job;

/* Cluster usage after a forget (write lock held): the refit's addresses replace it in
 * sess_commit (retained-code path); a memory back at its prior has none; a downdate takes
 * each cue's q(s) off its clusters (at least 0). */
static void sess_usage_forget(eng_session *s, const vbm_forget_result *fr, const eng_fit_out *out)
{
    const vbm_addresses *a = &fr->addr;
    size_t n = (size_t)a->G * (size_t)a->H, i;
    long t;

    if (fr->exact && out->res.addr.s == NULL) {
        free(s->usage);
        s->usage = NULL;
        return;
    }
    if (fr->exact || s->usage == NULL || a->s == NULL
        || n != (size_t)s->mem->cfg.groups * (size_t)s->mem->cfg.clusters)
        return;
    for (t = 0; t < a->T; t++)
        for (i = 0; i < n; i++) {
            s->usage[i] -= a->s[(size_t)t * n + i];
            if (s->usage[i] < 0.0)
                s->usage[i] = 0.0;
        }
}

/* The shared path of writes and resizes: take the write lock (If-Match), keep
 * an undo copy, run libvbmem, commit the result to the session and persist it;
 * any failure leaves the session as it was. */
static vbm_status sess_fit(eng_session *s, const sess_fit_job *job, const eng_fit_opts *o,
                           eng_fit_out *out, vbm_error *err)
{
    vbm_write_opts w;
    vbm_error verr;
    vbm_status vst;
    sess_prealloc pre;
    sess_undo undo;
    vbm_status st;
    double t0;

    memset(out, 0, sizeof *out);
    out->elbo_before = out->elbo_after = NAN;
    verr.msg[0] = '\0';
    if (s->temporal)
        return vbm_fail(err, VBM_EINVAL, "kind", "a temporal session takes sequences");
    st = eng_session_wrlock(s, o->if_match, &out->wait_s, err);
    if (st != VBM_OK)
        return st;
    st = sess_undo_take(s, NULL, &undo, err);
    if (st != VBM_OK) {
        pthread_rwlock_unlock(&s->lock);
        return st;
    }
    /* Everything the commit allocates is taken now, before the memory changes:
     * a session without an undo copy could not be rolled back after. */
    st = sess_prealloc_take(
        s,
        (size_t)s->mem->cfg.groups
            * (size_t)(job->resize && job->H > 0 ? job->H : s->mem->cfg.clusters),
        &pre, err);
    if (st != VBM_OK) {
        pthread_rwlock_unlock(&s->lock);
        sess_undo_drop(&undo);
        return st;
    }
    sess_opts(s, o, &w);
    if (o->test_hold != NULL) /* tests only: the write is held here, its lock taken */
        o->test_hold(o->test_hold_ctx, s->id);
    t0 = eng_now();
    if (job->forget != NULL)
        vst = vbm_forget(s->mem, job->codes, &w, job->forget, &verr);
    else if (job->resize)
        vst = vbm_resize(s->mem, job->H, job->K, &w, &out->elbo_before, &out->elbo_after, &out->res,
                         &verr);
    else if (job->mode == ENG_APPEND)
        vst = vbm_append(s->mem, job->codes, &w, &out->res, &verr);
    else if (job->mode == ENG_REFIT)
        vst = vbm_refit(s->mem, job->codes, &w, &out->res, &verr);
    else
        vst = vbm_write(s->mem, job->codes, &w, &out->res, &verr);
    out->solve_s = eng_now() - t0;
    if (vst == VBM_OK && job->forget != NULL) { /* the refit's result is the fit's */
        out->res = job->forget->fit;
        memset(&job->forget->fit, 0, sizeof job->forget->fit);
        sess_usage_forget(s, job->forget, out);
    }
    out->time_limited = out->res.time_limited;
    if (vst != VBM_OK) {
        pthread_rwlock_unlock(&s->lock);
        sess_undo_drop(&undo);
        free(pre.next);
        free(pre.copy);
        vbm_write_result_free(&out->res);
        return sess_lib_fail(err, vst, job->resize ? NULL : "codes", &verr);
    }
    sess_commit(s, !job->resize && job->mode == ENG_APPEND, out, o->want_addresses, &pre);
    /* a failed persist restores the whole session from the undo copy */
    st = sess_persist(s, &undo, 0, err);
    pthread_rwlock_unlock(&s->lock);
    if (st != VBM_OK)
        eng_fit_out_free(out);
    return st;
}

vbm_status eng_session_write(eng_session *s, eng_mode mode, const vbm_codes *codes,
                             const eng_fit_opts *o, eng_fit_out *out, vbm_error *err)
{
    sess_fit_job job = {0, mode, codes, 0, 0, NULL};

    return sess_fit(s, &job, o, out, err);
}

vbm_status eng_session_resize(eng_session *s, int H, int K, const eng_fit_opts *o, eng_fit_out *out,
                              vbm_error *err)
{
    sess_fit_job job = {1, ENG_REPLACE, NULL, H, K, NULL};

    return sess_fit(s, &job, o, out, err);
}

vbm_status eng_session_forget_codes(eng_session *s, const vbm_codes *cues, const eng_fit_opts *o,
                                    eng_fit_out *out, vbm_forget_result *res, vbm_error *err)
{
    sess_fit_job job = {0, ENG_REPLACE, cues, 0, 0, res};
    vbm_status st;

    memset(res, 0, sizeof *res);
    st = sess_fit(s, &job, o, out, err);
    if (st != VBM_OK)
        vbm_forget_result_free(res);
    return st;
}

vbm_status eng_session_sample(eng_session *s, long n, uint64_t seed, int cluster, double **z,
                              int **clusters, int *C, int *G, uint64_t *version, vbm_error *err)
{
    vbm_error verr;
    vbm_status vst;

    *z = NULL;
    *clusters = NULL;
    verr.msg[0] = '\0';
    if (n < 1)
        return vbm_fail(err, VBM_EINVAL, "count", "must be >= 1, got %ld", n);
    if (s->temporal)
        return vbm_fail(err, VBM_EINVAL, "kind", "a temporal session samples sequences");
    pthread_rwlock_rdlock(&s->lock);
    *C = s->mem->cfg.code_size;
    *G = s->mem->cfg.groups;
    *version = s->version;
    *z = vbm_calloc((size_t)n * (size_t)*C, sizeof(double));
    *clusters = vbm_calloc((size_t)n * (size_t)*G, sizeof(int));
    if (*z == NULL || *clusters == NULL) {
        pthread_rwlock_unlock(&s->lock);
        free(*z);
        free(*clusters);
        *z = NULL;
        *clusters = NULL;
        return vbm_fail(err, VBM_ENOMEM, "count", "out of memory for %ld codes", n);
    }
    vst = vbm_sample(s->mem, n, seed, cluster, *z, *clusters, &verr);
    pthread_rwlock_unlock(&s->lock);
    if (vst != VBM_OK) {
        free(*z);
        free(*clusters);
        *z = NULL;
        *clusters = NULL;
        return sess_lib_fail(err, vst, NULL, &verr);
    }
    return VBM_OK;
}

vbm_status eng_session_export(eng_session *s, vbm_memory **copy, uint64_t *version, vbm_error *err)
{
    vbm_error verr;
    vbm_status vst;

    *copy = NULL;
    verr.msg[0] = '\0';
    if (s->temporal)
        return vbm_fail(err, VBM_EINVAL, "kind", "a temporal session exports a temporal memory");
    pthread_rwlock_rdlock(&s->lock);
    *version = s->version;
    vst = vbm_memory_clone(s->mem, copy, &verr);
    pthread_rwlock_unlock(&s->lock);
    if (vst != VBM_OK) {
        *copy = NULL;
        return vbm_fail(err, VBM_ENOMEM, NULL, "cannot export: %s", verr.msg);
    }
    return VBM_OK;
}

vbm_status eng_session_replace(eng_session *s, vbm_memory *mem, int64_t if_match, uint64_t *version,
                               vbm_error *err)
{
    vbm_status st;
    sess_undo undo;

    if (s->temporal)
        return vbm_fail(err, VBM_EINVAL, "kind", "a temporal session imports a temporal memory");
    st = eng_session_wrlock(s, if_match, NULL, err);
    if (st != VBM_OK)
        return st;
    /* The old memory itself is the undo copy: no clone needed. */
    st = sess_undo_take(s, s->mem, &undo, err);
    if (st != VBM_OK) {
        pthread_rwlock_unlock(&s->lock);
        return st;
    }
    if (undo.mem == NULL)
        vbm_memory_free(s->mem);
    s->mem = mem;
    free(s->usage);
    s->usage = NULL;
    s->version++;
    s->updated = eng_wall();
    atomic_store(&s->bytes, sess_bytes(s->mem, 0));
    st = sess_persist(s, &undo, 1, err);
    if (st != VBM_OK) {
        /* s->mem is the old memory again; the caller keeps ownership of mem. */
        pthread_rwlock_unlock(&s->lock);
        return st;
    }
    *version = s->version;
    pthread_rwlock_unlock(&s->lock);
    return VBM_OK;
}

void eng_session_set_model(eng_session *s, eng_model *m)
{
    if (m != NULL) {
        eng_model_ref(m);
        snprintf(s->model_name, sizeof s->model_name, "%s", m->name);
    } else {
        s->model_name[0] = '\0';
    }
    eng_model_unref(atomic_exchange(&s->model, m));
}

vbm_status eng_session_model(eng_session *s, eng_models *reg, eng_model **out, vbm_error *err)
{
    eng_model *m = atomic_load(&s->model), *expected = NULL;
    int C;
    vbm_status st;

    *out = NULL;
    if (m != NULL) {
        eng_model_ref(m);
        *out = m;
        return VBM_OK;
    }
    if (s->model_name[0] == '\0')
        return VBM_OK;
    st = eng_models_get(reg, s->model_name, &m, err);
    if (st != VBM_OK)
        return vbm_fail(err, VBM_EINVAL, "model",
                        "the session's model \"%s\" is not hosted any more", s->model_name);
    C = eng_session_code_size(s);
    if (m->info->code_size != C) {
        eng_model_unref(m);
        return vbm_fail(err, VBM_EINVAL, "model",
                        "the hosted model \"%s\" has code size %d, the session's memory %d",
                        s->model_name, m->info->code_size, C);
    }
    /* Bind: the session keeps this model from now on (one reference of its
     * own). A concurrent binder may have won; then use its model. */
    eng_model_ref(m);
    if (!atomic_compare_exchange_strong(&s->model, &expected, m)) {
        eng_model_unref(m); /* the session's would-be reference */
        eng_model_unref(m); /* the caller's */
        m = expected;
        eng_model_ref(m);
    }
    *out = m;
    return VBM_OK;
}
