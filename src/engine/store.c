/* store.c -- owns the dispatch from the eng_store_* functions to a store implementation. */
#define _POSIX_C_SOURCE 200809L

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

void eng_store_stats(eng_store *st, long *count, size_t *bytes)
{
    st->ops->stats(st->impl, count, bytes);
}

long eng_store_expire(eng_store *st, long long now_ms)
{
    return st->ops->expire(st->impl, now_ms);
}

vbm_status eng_store_reserve(eng_store *st, size_t old_bytes, size_t new_bytes, vbm_error *err)
{
    return st->ops->reserve(st->impl, old_bytes, new_bytes, err);
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
