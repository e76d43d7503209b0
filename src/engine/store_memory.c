/* store_memory.c -- owns the in-memory session table: an id-sorted array of sessions behind one
 * mutex. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/session_impl.h"
#include "engine/store.h"

typedef struct {
    eng_store base; /* first, so the store and its impl are one allocation */
    pthread_mutex_t lock;
    eng_session **items; /* sorted by id */
    long n, cap;
} mem_store;

static const unsigned char mem_anonymous[ENG_OWNER_LEN];

static const unsigned char *mem_owner(const unsigned char *owner)
{
    return owner != NULL ? owner : mem_anonymous;
}

/* Index of the first item whose id is >= id. Caller holds the lock. */
static long mem_find(const mem_store *m, const char *id)
{
    long lo = 0, hi = m->n, mid;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        if (strcmp(m->items[mid]->id, id) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static size_t mem_total(const mem_store *m)
{
    size_t sum = 0;
    long i;

    for (i = 0; i < m->n; i++)
        sum += atomic_load(&m->items[i]->bytes);
    return sum;
}

static vbm_status mem_insert(void *impl, eng_session *s, size_t extra, vbm_error *err)
{
    mem_store *m = impl;
    eng_session **grown;
    size_t total;
    long at, cap;
    vbm_status st;

    pthread_mutex_lock(&m->lock);
    st = eng_store_check_count(&m->base, m->n, err);
    if (st == VBM_OK) {
        total = mem_total(m) + atomic_load(&s->bytes) + extra;
        st = eng_store_check_bytes(&m->base, total, "memory total", err);
    }
    if (st != VBM_OK) {
        pthread_mutex_unlock(&m->lock);
        return st;
    }
    if (m->n == m->cap) {
        cap = m->cap > 0 ? 2 * m->cap : 64;
        grown = realloc(m->items, (size_t)cap * sizeof *grown);
        if (grown == NULL) {
            pthread_mutex_unlock(&m->lock);
            return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
        }
        m->items = grown;
        m->cap = cap;
    }
    at = mem_find(m, s->id);
    memmove(m->items + at + 1, m->items + at, (size_t)(m->n - at) * sizeof *m->items);
    m->items[at] = s;
    m->n++;
    eng_session_ref(s);
    pthread_mutex_unlock(&m->lock);
    return VBM_OK;
}

/* Position of the session id visible to owner, or -1. Caller holds the lock. */
static long mem_index(const mem_store *m, const char *id, const unsigned char *owner)
{
    long at = mem_find(m, id);

    if (at < m->n && strcmp(m->items[at]->id, id) == 0
        && memcmp(m->items[at]->owner, mem_owner(owner), ENG_OWNER_LEN) == 0)
        return at;
    return -1;
}

static vbm_status mem_get(void *impl, const char *id, const unsigned char *owner, eng_session **out,
                          vbm_error *err)
{
    mem_store *m = impl;
    eng_session *s = NULL;
    long at;

    pthread_mutex_lock(&m->lock);
    at = mem_index(m, id, owner);
    if (at >= 0) {
        s = m->items[at];
        eng_session_ref(s);
    }
    pthread_mutex_unlock(&m->lock);
    *out = s;
    if (s == NULL)
        return vbm_fail(err, VBM_ENOTFOUND, "id", "no session %s", id);
    return VBM_OK;
}

/* Unlink item at (caller holds the lock) and return it, still referenced. */
static eng_session *mem_unlink(mem_store *m, long at)
{
    eng_session *s = m->items[at];

    memmove(m->items + at, m->items + at + 1, (size_t)(m->n - at - 1) * sizeof *m->items);
    m->n--;
    return s;
}

static vbm_status mem_remove(void *impl, const char *id, const unsigned char *owner, vbm_error *err)
{
    mem_store *m = impl;
    eng_session *s = NULL;
    long at;

    pthread_mutex_lock(&m->lock);
    at = mem_index(m, id, owner);
    if (at >= 0)
        s = mem_unlink(m, at);
    pthread_mutex_unlock(&m->lock);
    if (s == NULL)
        return vbm_fail(err, VBM_ENOTFOUND, "id", "no session %s", id);
    eng_session_unref(s);
    return VBM_OK;
}

static vbm_status mem_list(void *impl, const unsigned char *owner, const char *after, int limit,
                           eng_session ***out, int *n, int *more, vbm_error *err)
{
    mem_store *m = impl;
    const unsigned char *who = mem_owner(owner);
    eng_session **arr;
    long i;

    *out = NULL;
    *n = 0;
    *more = 0;
    if (limit < 1)
        return vbm_fail(err, VBM_EINVAL, "limit", "must be >= 1");
    arr = calloc((size_t)limit, sizeof *arr);
    if (arr == NULL)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    pthread_mutex_lock(&m->lock);
    i = (after != NULL && after[0] != '\0') ? mem_find(m, after) : 0;
    if (i < m->n && after != NULL && strcmp(m->items[i]->id, after) == 0)
        i++;
    for (; i < m->n; i++) {
        if (memcmp(m->items[i]->owner, who, ENG_OWNER_LEN) != 0)
            continue;
        if (*n == limit) {
            *more = 1;
            break;
        }
        eng_session_ref(m->items[i]);
        arr[(*n)++] = m->items[i];
    }
    pthread_mutex_unlock(&m->lock);
    *out = arr;
    return VBM_OK;
}

static void mem_stats(void *impl, long *count, size_t *bytes)
{
    mem_store *m = impl;

    pthread_mutex_lock(&m->lock);
    if (count != NULL)
        *count = m->n;
    if (bytes != NULL)
        *bytes = mem_total(m);
    pthread_mutex_unlock(&m->lock);
}

static long mem_expire(void *impl, long long now_ms)
{
    mem_store *m = impl;
    eng_session *gone[64];
    long removed = 0, i, k, batch;
    eng_session *s;

    do {
        batch = 0;
        pthread_mutex_lock(&m->lock);
        for (i = 0; i < m->n && batch < 64;) {
            s = m->items[i];
            if (s->ttl_s > 0 && now_ms - atomic_load(&s->last_used_ms) > s->ttl_s * 1000LL)
                gone[batch++] = mem_unlink(m, i);
            else
                i++;
        }
        pthread_mutex_unlock(&m->lock);
        for (k = 0; k < batch; k++)
            eng_session_unref(gone[k]);
        removed += batch;
    } while (batch == 64);
    return removed;
}

static void mem_destroy(void *impl)
{
    mem_store *m = impl;
    long i;

    for (i = 0; i < m->n; i++)
        eng_session_unref(m->items[i]);
    free(m->items);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static const eng_store_ops mem_ops = {mem_insert, mem_get,    mem_remove,  mem_list,
                                      mem_stats,  mem_expire, mem_destroy, NULL};

vbm_status eng_store_memory_create(const eng_store_limits *limits, eng_store **out, vbm_error *err)
{
    mem_store *m = calloc(1, sizeof *m);

    *out = NULL;
    if (m == NULL)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    pthread_mutex_init(&m->lock, NULL);
    m->base.limits = *limits;
    m->base.ops = &mem_ops;
    m->base.impl = m;
    *out = &m->base;
    return VBM_OK;
}
