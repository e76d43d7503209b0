/* store.c -- owns the dispatch from the eng_store_* functions to a store implementation, and the
 * store limits (session count, byte total) that every implementation enforces through it. */
#define _POSIX_C_SOURCE 200809L

#include <string.h>

#include "engine/store.h"

vbm_status eng_store_insert(eng_store *st, eng_session *s, size_t extra_bytes, vbm_error *err)
{
    return st->ops->insert(st->impl, s, extra_bytes, err);
}

eng_session *eng_store_lookup(eng_store *st, const char *id, const unsigned char *owner)
{
    eng_session *s = NULL;

    if (st->ops->get(st->impl, id, owner, &s, NULL) != VBM_OK)
        return NULL;
    return s;
}

vbm_status eng_store_get(eng_store *st, const char *id, const unsigned char *owner,
                         eng_session **out, vbm_error *err)
{
    return st->ops->get(st->impl, id, owner, out, err);
}

vbm_status eng_store_remove(eng_store *st, const char *id, const unsigned char *owner,
                            vbm_error *err)
{
    return st->ops->remove(st->impl, id, owner, err);
}

vbm_status eng_store_list(eng_store *st, const unsigned char *owner, const char *after, int limit,
                          eng_session ***out, int *n, int *more, vbm_error *err)
{
    return st->ops->list(st->impl, owner, after, limit, out, n, more, err);
}

void eng_store_set_wait(eng_store *st, void (*wait)(void *ctx, int begin), void *ctx)
{
    st->wait = wait;
    st->wait_ctx = ctx;
}

void eng_store_set_corrupt_hook(eng_store *st,
                                void (*corrupt)(void *ctx, const char *id, const char *msg),
                                void *ctx)
{
    st->corrupt = corrupt;
    st->corrupt_ctx = ctx;
}

void eng_store_stats(eng_store *st, long *count, size_t *bytes)
{
    st->ops->stats(st->impl, count, bytes);
}

long eng_store_expire(eng_store *st, long long now_ms)
{
    return st->ops->expire(st->impl, now_ms);
}

vbm_status eng_store_check_count(const eng_store *st, long count, vbm_error *err)
{
    if (st->limits.max_sessions > 0 && count >= st->limits.max_sessions)
        return vbm_fail(err, VBM_ELIMIT, NULL, "the server holds its limit of %ld sessions",
                        st->limits.max_sessions);
    return VBM_OK;
}

vbm_status eng_store_check_bytes(const eng_store *st, size_t total, const char *what,
                                 vbm_error *err)
{
    if (st->limits.max_bytes > 0 && total > st->limits.max_bytes)
        return vbm_fail(err, VBM_ELIMIT, NULL,
                        "the session would bring the %s to %zu bytes, past the limit of %zu", what,
                        total, st->limits.max_bytes);
    return VBM_OK;
}

vbm_status eng_store_reserve(eng_store *st, size_t old_bytes, size_t new_bytes, vbm_error *err)
{
    size_t total = 0;

    if (st->limits.max_bytes == 0 || new_bytes <= old_bytes)
        return VBM_OK;
    st->ops->stats(st->impl, NULL, &total);
    total = total - old_bytes + new_bytes;
    if (total > st->limits.max_bytes)
        return vbm_fail(err, VBM_ELIMIT, NULL,
                        "the memory total would reach %zu bytes, past the limit of %zu", total,
                        st->limits.max_bytes);
    return VBM_OK;
}

vbm_status eng_store_admit(eng_store *st, const vbm_config *cfg, vbm_error *err)
{
    size_t total = 0;
    double need = eng_session_config_bytes(cfg);

    if (st->limits.max_bytes == 0)
        return VBM_OK;
    st->ops->stats(st->impl, NULL, &total);
    if (need + (double)total > (double)st->limits.max_bytes)
        return vbm_fail(err, VBM_ELIMIT, NULL,
                        "a session of this size (%.0f bytes) would bring the memory total past "
                        "the limit of %zu bytes",
                        need, st->limits.max_bytes);
    return VBM_OK;
}

vbm_status eng_store_resize(eng_store *st, eng_session *s, int H, int K, const eng_fit_opts *opts,
                            eng_fit_out *out, vbm_error *err)
{
    vbm_config cfg;
    size_t old_bytes;
    double need;
    vbm_status rc;

    memset(out, 0, sizeof *out);
    eng_session_config(s, &cfg);
    if (H > 0)
        cfg.clusters = H;
    if (K > 0)
        cfg.rows = K;
    old_bytes = eng_session_bytes(s);
    need = eng_session_config_bytes(&cfg);
    if (st->limits.max_bytes > 0 && need > (double)st->limits.max_bytes)
        return vbm_fail(err, VBM_ELIMIT, NULL,
                        "the resized memory (%.0f bytes) exceeds the memory limit", need);
    rc = eng_store_reserve(st, old_bytes, (size_t)need, err);
    if (rc != VBM_OK)
        return rc;
    return eng_session_resize(s, H, K, opts, out, err);
}

vbm_status eng_store_replace(eng_store *st, eng_session *s, vbm_memory *mem, int64_t if_match,
                             uint64_t *version, vbm_error *err)
{
    vbm_status rc = eng_store_reserve(st, eng_session_bytes(s), eng_session_footprint(mem), err);

    if (rc != VBM_OK)
        return rc;
    return eng_session_replace(s, mem, if_match, version, err);
}

vbm_status eng_store_ready(eng_store *st, vbm_error *err)
{
    return st->ops->ready != NULL ? st->ops->ready(st->impl, err) : VBM_OK;
}

void eng_store_free(eng_store *st)
{
    if (st == NULL)
        return;
    st->ops->destroy(st->impl);
}
