/* store_durable.c -- owns the durable session store: an LRU-bounded cache of resident sessions in
 * front of a durable backend (SQLite, or Redis shared by replicas: the cache is then checked
 * against the stored version on every use), lazy loading, write-through persistence, stored-session
 * expiry. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/session_impl.h"
#include "engine/store.h"

#define DUR_BATCH      64
#define DUR_LOAD_TRIES 8

typedef struct {
    eng_session *s;          /* the cache's reference */
    unsigned long long tick; /* last use, for LRU */
} dur_entry;

typedef struct {
    eng_store base;       /* first: the store and its state are one allocation */
    pthread_mutex_t lock; /* guards everything below; never held across backend I/O */
    eng_backend *backend; /* owned */
    dur_entry *items;     /* resident sessions, sorted by id */
    long n, cap;
    long max_resident;
    long stored; /* records in the backend (+ inserts in flight) */
    unsigned long long tick;
    unsigned long long removals; /* bumped by every removal: a load racing one retries */
} dur_store;

static const unsigned char dur_anonymous[ENG_OWNER_LEN];

static const unsigned char *dur_owner(const unsigned char *owner)
{
    return owner != NULL ? owner : dur_anonymous;
}

/* eng_backend_save with the store's wait hook around it (a worker waiting for
 * a commit gives its CPU slot to another request, whose write may join the
 * same group commit). */
static vbm_status dur_save(dur_store *d, const eng_record *rec, uint64_t expected, vbm_error *err)
{
    vbm_status st;

    if (d->base.wait != NULL)
        d->base.wait(d->base.wait_ctx, 1);
    st = eng_backend_save(d->backend, rec, expected, err);
    if (d->base.wait != NULL)
        d->base.wait(d->base.wait_ctx, 0);
    return st;
}

/* eng_backend_load with the store's wait hook around it. */
static vbm_status dur_load(dur_store *d, const char *id, eng_record *out, vbm_error *err)
{
    vbm_status st;

    if (d->base.wait != NULL)
        d->base.wait(d->base.wait_ctx, 1);
    st = eng_backend_load(d->backend, id, out, err);
    if (d->base.wait != NULL)
        d->base.wait(d->base.wait_ctx, 0);
    return st;
}

/* A corrupt stored record of id met by a request (st: the load's VBM_ECORRUPT, or the import's
 * VBM_EFORMAT, err saying why): tell the corrupt hook, and have err say what is wrong and how to
 * recover. Returns VBM_ECORRUPT. */
static vbm_status dur_corrupt(dur_store *d, const char *id, vbm_status st, vbm_error *err)
{
    const char *why = err != NULL ? err->msg : "corrupt record";
    char msg[VBM_MSG_LEN];

    if (st == VBM_EFORMAT)
        snprintf(msg, sizeof msg,
                 "the stored record of session %s is corrupt (its memory does not import: %.300s)",
                 id, why);
    else
        snprintf(msg, sizeof msg, "%s", why);
    if (d->base.corrupt != NULL)
        d->base.corrupt(d->base.corrupt_ctx, id, msg);
    return vbm_fail(err, VBM_ECORRUPT, NULL,
                    "%s; it can be deleted (DELETE /v1/sessions/%s) or restored from a backup", msg,
                    id);
}

/* Index of the first item whose id is >= id. Lock held. */
static long dur_find(const dur_store *d, const char *id)
{
    long lo = 0, hi = d->n, mid;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        if (strcmp(d->items[mid].s->id, id) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Position of the resident session id, or -1. Lock held. */
static long dur_index(const dur_store *d, const char *id)
{
    long at = dur_find(d, id);

    return at < d->n && strcmp(d->items[at].s->id, id) == 0 ? at : -1;
}

/* Unlink the entry at `at` and return its session (still referenced). Lock held. */
static eng_session *dur_unlink(dur_store *d, long at)
{
    eng_session *s = d->items[at].s;

    memmove(d->items + at, d->items + at + 1, (size_t)(d->n - at - 1) * sizeof *d->items);
    d->n--;
    return s;
}

/* Add s (taking a reference) to the cache. Lock held. Fails with VBM_ENOMEM. */
static vbm_status dur_link(dur_store *d, eng_session *s, vbm_error *err)
{
    dur_entry *grown;
    long at, cap;

    if (d->n == d->cap) {
        cap = d->cap > 0 ? 2 * d->cap : 64;
        grown = realloc(d->items, (size_t)cap * sizeof *grown);
        if (grown == NULL)
            return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
        d->items = grown;
        d->cap = cap;
    }
    at = dur_find(d, s->id);
    memmove(d->items + at + 1, d->items + at, (size_t)(d->n - at) * sizeof *d->items);
    eng_session_ref(s);
    d->items[at].s = s;
    d->items[at].tick = ++d->tick;
    d->n++;
    return VBM_OK;
}

/* Wall-clock time of the last use of s. */
static double dur_used_wall(const eng_session *s)
{
    long long idle_ms = (long long)(eng_now() * 1000.0) - atomic_load(&s->last_used_ms);

    return eng_wall() - (idle_ms > 0 ? (double)idle_ms / 1000.0 : 0.0);
}

/* Unlink up to `room` least recently used sessions that nobody else holds
 * (reference count 1: only the cache, and no reference can be taken without
 * the lock) while more than max_resident are resident, into out. Lock held.
 * Returns how many. */
static int dur_pick_evictions(dur_store *d, eng_session **out, int room)
{
    long i, best;
    int k = 0;

    while (d->n > d->max_resident && k < room) {
        best = -1;
        for (i = 0; i < d->n; i++) {
            if (atomic_load(&d->items[i].s->refs) == 1
                && (best < 0 || d->items[i].tick < d->items[best].tick))
                best = i;
        }
        if (best < 0)
            break; /* every resident session is in use: the bound is exceeded for now */
        out[k++] = dur_unlink(d, best);
    }
    return k;
}

/* Record the last use of evicted sessions and drop them. Lock not held. A
 * failed touch only makes a TTL count from an earlier use. */
static void dur_release(dur_store *d, eng_session **gone, int k)
{
    int i;

    for (i = 0; i < k; i++) {
        if (gone[i]->ttl_s > 0)
            eng_backend_touch(d->backend, gone[i]->id, dur_used_wall(gone[i]), NULL);
        eng_session_unref(gone[i]);
    }
}

/* Drop s from the cache if it is the resident copy (after a refused
 * compare-and-set: the stored state is newer, or gone). */
static void dur_drop(dur_store *d, eng_session *s)
{
    eng_session *gone = NULL;
    long at;

    pthread_mutex_lock(&d->lock);
    at = dur_index(d, s->id);
    if (at >= 0 && d->items[at].s == s)
        gone = dur_unlink(d, at);
    pthread_mutex_unlock(&d->lock);
    eng_session_unref(gone);
}

/* The persist hook of every session of this store: write-through under the
 * session's write lock, compare-and-set on the previous version. */
static vbm_status dur_persist(void *ctx, eng_session *s, uint64_t prev_version, vbm_error *err)
{
    dur_store *d = ctx;
    eng_record rec;
    vbm_status st = eng_session_to_record(s, &rec, err);

    if (st != VBM_OK)
        return st;
    st = dur_save(d, &rec, prev_version, err);
    eng_record_free(&rec);
    if (st == VBM_ECONFLICT || st == VBM_ENOTFOUND || st == VBM_EUNAVAIL || st == VBM_EUNKNOWN)
        dur_drop(d, s); /* the stored state is newer, gone, or unknown: reload it next time */
    return st;
}

static vbm_status dur_insert(void *impl, eng_session *s, size_t extra, vbm_error *err)
{
    dur_store *d = impl;
    eng_session *gone[DUR_BATCH];
    size_t total = 0;
    eng_record rec;
    vbm_status st;
    long i;
    int k;

    pthread_mutex_lock(&d->lock);
    st = eng_store_check_count(&d->base, d->stored, err);
    if (st != VBM_OK) {
        pthread_mutex_unlock(&d->lock);
        return st;
    }
    k = dur_pick_evictions(d, gone, DUR_BATCH);
    for (i = 0; i < d->n; i++)
        total += atomic_load(&d->items[i].s->bytes);
    total += atomic_load(&s->bytes) + extra;
    st = eng_store_check_bytes(&d->base, total, "resident memory", err);
    if (st != VBM_OK) {
        pthread_mutex_unlock(&d->lock);
        dur_release(d, gone, k);
        return st;
    }
    d->stored++; /* reserved while the insert commits */
    pthread_mutex_unlock(&d->lock);
    dur_release(d, gone, k);

    eng_session_set_persist(s, dur_persist, d);
    st = eng_session_to_record(s, &rec, err);
    if (st == VBM_OK) {
        st = dur_save(d, &rec, 0, err);
        eng_record_free(&rec);
    }
    pthread_mutex_lock(&d->lock);
    if (st == VBM_OK)
        st = dur_link(d, s, err);
    if (st != VBM_OK)
        d->stored--;
    k = dur_pick_evictions(d, gone, DUR_BATCH);
    pthread_mutex_unlock(&d->lock);
    dur_release(d, gone, k);
    /* A commit that succeeded but could not be cached is still stored: it
     * loads on first use; ENOMEM is reported, the id is lost to the client. */
    return st;
}

/* A shared backend (replicas): check that the cached s is the stored version
 * (the stored one read first, so that a commit of this process in between
 * only makes the cache newer). VBM_ECONFLICT: stale, dropped from the cache;
 * VBM_ENOTFOUND: gone elsewhere, dropped; VBM_EUNAVAIL. */
static vbm_status dur_check_cached(dur_store *d, eng_session *s, vbm_error *err)
{
    uint64_t stored = 0, cached;
    vbm_status st = eng_backend_current(d->backend, s->id, &stored, err);

    if (st == VBM_ENOTFOUND) {
        dur_drop(d, s);
        return st;
    }
    if (st != VBM_OK)
        return st;
    cached = eng_session_version(s);
    if (cached >= stored)
        return VBM_OK;
    dur_drop(d, s);
    return VBM_ECONFLICT;
}

static vbm_status dur_get(void *impl, const char *id, const unsigned char *owner, eng_session **out,
                          vbm_error *err)
{
    dur_store *d = impl;
    const unsigned char *who = dur_owner(owner);
    eng_session *s = NULL, *gone[DUR_BATCH];
    unsigned long long gen;
    eng_record rec;
    vbm_status st;
    long at;
    int tries, k;

    *out = NULL;
    if (!eng_id_ok(id))
        return vbm_fail(err, VBM_ENOTFOUND, "id", "no session %s", id);
    for (tries = 0; tries < DUR_LOAD_TRIES; tries++) {
        pthread_mutex_lock(&d->lock);
        at = dur_index(d, id);
        if (at >= 0) {
            s = d->items[at].s;
            d->items[at].tick = ++d->tick;
            if (memcmp(s->owner, who, ENG_OWNER_LEN) != 0) {
                pthread_mutex_unlock(&d->lock);
                return vbm_fail(err, VBM_ENOTFOUND, "id", "no session %s", id);
            }
            eng_session_ref(s);
            pthread_mutex_unlock(&d->lock);
            if (!d->backend->shared) {
                *out = s;
                return VBM_OK;
            }
            st = dur_check_cached(d, s, err);
            if (st == VBM_OK) {
                *out = s;
                return VBM_OK;
            }
            eng_session_unref(s);
            s = NULL;
            if (st != VBM_ECONFLICT)
                return st;
            continue; /* stale: load the stored state */
        }
        gen = d->removals;
        pthread_mutex_unlock(&d->lock);

        st = dur_load(d, id, &rec, err);
        if (st != VBM_OK && st != VBM_ECORRUPT)
            return st;
        if (memcmp(rec.owner, who, ENG_OWNER_LEN) != 0) {
            eng_record_free(&rec);
            return vbm_fail(err, VBM_ENOTFOUND, "id", "no session %s", id);
        }
        if (st == VBM_ECORRUPT) {
            eng_record_free(&rec);
            return dur_corrupt(d, id, st, err);
        }
        st = eng_session_from_record(&rec, &s, err);
        eng_record_free(&rec);
        if (st == VBM_EFORMAT) /* a memory that does not import: the store's failure */
            return dur_corrupt(d, id, st, err);
        if (st != VBM_OK)
            return st;
        eng_session_set_persist(s, dur_persist, d);

        pthread_mutex_lock(&d->lock);
        if (d->removals != gen) {
            /* Something was removed while this load ran: it may have been this
             * session, so look again. */
            pthread_mutex_unlock(&d->lock);
            eng_session_unref(s);
            s = NULL;
            continue;
        }
        if (dur_index(d, id) >= 0) {
            /* Loaded concurrently by another request: use the resident copy. */
            pthread_mutex_unlock(&d->lock);
            eng_session_unref(s);
            s = NULL;
            continue;
        }
        st = dur_link(d, s, err);
        k = st == VBM_OK ? dur_pick_evictions(d, gone, DUR_BATCH) : 0;
        pthread_mutex_unlock(&d->lock);
        dur_release(d, gone, k);
        if (st != VBM_OK) {
            eng_session_unref(s);
            return st;
        }
        *out = s;
        return VBM_OK;
    }
    return vbm_fail(err, VBM_EUNAVAIL, NULL,
                    "session %s is being removed and loaded concurrently; retry", id);
}

static vbm_status dur_remove(void *impl, const char *id, const unsigned char *owner, vbm_error *err)
{
    dur_store *d = impl;
    eng_session *gone = NULL;
    vbm_status st;
    long at;

    if (!eng_id_ok(id))
        return vbm_fail(err, VBM_ENOTFOUND, "id", "no session %s", id);
    st = eng_backend_remove(d->backend, id, dur_owner(owner), err);
    if (st == VBM_EUNKNOWN) { /* the store may have removed it: reload it next time */
        pthread_mutex_lock(&d->lock);
        at = dur_index(d, id);
        if (at >= 0)
            gone = dur_unlink(d, at);
        pthread_mutex_unlock(&d->lock);
        eng_session_unref(gone);
    }
    if (st != VBM_OK)
        return st;
    pthread_mutex_lock(&d->lock);
    d->removals++;
    d->stored--;
    at = dur_index(d, id);
    if (at >= 0)
        gone = dur_unlink(d, at);
    pthread_mutex_unlock(&d->lock);
    eng_session_unref(gone);
    return VBM_OK;
}

/* One session of a listing: the resident copy when there is one (dur_get),
 * else a private copy loaded for the caller alone and not cached, so that a
 * page of sessions leaves the cache (and the resident bound) as it was and
 * goes when the caller drops it. */
static vbm_status dur_list_one(dur_store *d, const char *id, const unsigned char *owner,
                               eng_session **out, vbm_error *err)
{
    eng_record rec;
    vbm_status st;
    int resident;

    *out = NULL;
    pthread_mutex_lock(&d->lock);
    resident = dur_index(d, id) >= 0;
    pthread_mutex_unlock(&d->lock);
    if (resident || !eng_id_ok(id))
        return dur_get(d, id, owner, out, err);
    st = dur_load(d, id, &rec, err);
    if (st != VBM_OK && st != VBM_ECORRUPT)
        return st;
    if (memcmp(rec.owner, dur_owner(owner), ENG_OWNER_LEN) != 0) {
        eng_record_free(&rec);
        return vbm_fail(err, VBM_ENOTFOUND, "id", "no session %s", id);
    }
    if (st == VBM_ECORRUPT) {
        eng_record_free(&rec);
        return dur_corrupt(d, id, st, err);
    }
    st = eng_session_from_record(&rec, out, err);
    eng_record_free(&rec);
    if (st == VBM_EFORMAT)
        return dur_corrupt(d, id, st, err);
    if (st == VBM_OK) /* a write through this copy is a compare-and-set like any other */
        eng_session_set_persist(*out, dur_persist, d);
    return st;
}

static vbm_status dur_list(void *impl, const unsigned char *owner, const char *after, int limit,
                           eng_session ***out, int *n, int *more, vbm_error *err)
{
    dur_store *d = impl;
    char(*ids)[ENG_ID_LEN + 1];
    eng_session **arr;
    vbm_status st;
    int got = 0, i;

    *out = NULL;
    *n = 0;
    *more = 0;
    if (limit < 1)
        return vbm_fail(err, VBM_EINVAL, "limit", "must be >= 1");
    if (limit > d->max_resident)
        limit = (int)d->max_resident; /* a page never holds more than the resident bound */
    ids = calloc((size_t)limit + 1, sizeof *ids);
    arr = calloc((size_t)limit, sizeof *arr);
    if (ids == NULL || arr == NULL) {
        free(ids);
        free(arr);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    }
    st = eng_backend_list(d->backend, dur_owner(owner), after, limit + 1, ids, &got, err);
    for (i = 0; st == VBM_OK && i < got && i < limit; i++) {
        st = dur_list_one(d, ids[i], owner, &arr[*n], err);
        if (st == VBM_OK)
            (*n)++;
        else if (st == VBM_ENOTFOUND || st == VBM_ECORRUPT)
            st = VBM_OK; /* removed since it was listed; corrupt: reported, skipped */
    }
    free(ids);
    if (st != VBM_OK) {
        for (i = 0; i < *n; i++)
            eng_session_unref(arr[i]);
        free(arr);
        *n = 0;
        return st;
    }
    *more = got > limit;
    *out = arr;
    return VBM_OK;
}

static void dur_stats(void *impl, long *count, size_t *bytes)
{
    dur_store *d = impl;
    size_t sum = 0;
    long i;

    pthread_mutex_lock(&d->lock);
    for (i = 0; i < d->n; i++)
        sum += atomic_load(&d->items[i].s->bytes);
    if (count != NULL)
        *count = d->stored;
    if (bytes != NULL)
        *bytes = sum;
    pthread_mutex_unlock(&d->lock);
}

/* Expire one candidate id: 1 when removed, 0 when still in use (its last use
 * is then recorded) or on failure. */
static int dur_expire_one(dur_store *d, const char *id, long long now_ms)
{
    eng_session *gone = NULL;
    double used = 0.0;
    int alive = 0;
    long at;

    pthread_mutex_lock(&d->lock);
    at = dur_index(d, id);
    if (at >= 0) {
        eng_session *s = d->items[at].s;

        if (now_ms - atomic_load(&s->last_used_ms) <= s->ttl_s * 1000LL) {
            alive = 1;
            used = dur_used_wall(s);
        }
    }
    pthread_mutex_unlock(&d->lock);
    if (alive) {
        eng_backend_touch(d->backend, id, used, NULL);
        return 0;
    }
    if (eng_backend_remove(d->backend, id, NULL, NULL) != VBM_OK)
        return 0;
    pthread_mutex_lock(&d->lock);
    d->removals++;
    d->stored--;
    at = dur_index(d, id);
    if (at >= 0)
        gone = dur_unlink(d, at);
    pthread_mutex_unlock(&d->lock);
    eng_session_unref(gone);
    return 1;
}

static long dur_expire(void *impl, long long now_ms)
{
    dur_store *d = impl;
    char ids[DUR_BATCH][ENG_ID_LEN + 1];
    double now_wall = eng_wall();
    long removed = 0;
    int n = 0, i, rounds;

    if (d->backend->shared) {
        /* Replicas add and remove sessions too: refresh the count. */
        long stored;

        if (eng_backend_count(d->backend, &stored, NULL) == VBM_OK) {
            pthread_mutex_lock(&d->lock);
            d->stored = stored;
            pthread_mutex_unlock(&d->lock);
        }
    }
    for (rounds = 0; rounds < 16; rounds++) {
        if (eng_backend_idle(d->backend, now_wall, DUR_BATCH, ids, &n, NULL) != VBM_OK)
            break;
        for (i = 0; i < n; i++)
            removed += dur_expire_one(d, ids[i], now_ms);
        if (n < DUR_BATCH)
            break;
    }
    return removed;
}

static void dur_destroy(void *impl)
{
    dur_store *d = impl;
    long i;

    for (i = 0; i < d->n; i++) {
        if (d->items[i].s->ttl_s > 0)
            eng_backend_touch(d->backend, d->items[i].s->id, dur_used_wall(d->items[i].s), NULL);
        eng_session_unref(d->items[i].s);
    }
    free(d->items);
    eng_backend_close(d->backend);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

/* Ready: a shared backend (Redis) must answer a round trip; a local one
 * (SQLite) is ready while open (its full check is too slow for a probe). */
static vbm_status dur_ready(void *impl, vbm_error *err)
{
    dur_store *d = impl;

    if (!d->backend->shared)
        return VBM_OK;
    return eng_backend_check(d->backend, err);
}

static const eng_store_ops dur_ops = {dur_insert, dur_get,    dur_remove,  dur_list,
                                      dur_stats,  dur_expire, dur_destroy, dur_ready};

vbm_status eng_store_durable_create(eng_backend *backend, const eng_store_limits *limits,
                                    long max_resident, eng_store **out, vbm_error *err)
{
    dur_store *d;
    vbm_status st;
    long stored = 0;

    *out = NULL;
    if (max_resident < 1)
        return vbm_fail(err, VBM_EINVAL, "max-resident", "must be >= 1");
    st = eng_backend_count(backend, &stored, err);
    if (st != VBM_OK && !backend->shared)
        return st; /* a shared store may be unreachable now: 503 until it is back */
    d = calloc(1, sizeof *d);
    if (d == NULL)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    pthread_mutex_init(&d->lock, NULL);
    d->backend = backend;
    d->base.limits = *limits;
    d->max_resident = max_resident;
    d->stored = stored;
    d->base.ops = &dur_ops;
    d->base.impl = d;
    *out = &d->base;
    return VBM_OK;
}
