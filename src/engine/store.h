/* store.h -- owns the session-store interface (insert, look up, remove, list, expire, account) that
 * the in-memory table and the durable store implement, and the store limits (session count, byte
 * total) decided once for both (store.c). */
#ifndef VBMEM_ENGINE_STORE_H
#define VBMEM_ENGINE_STORE_H

#include <stddef.h>

#include "engine/backend.h"
#include "engine/clock.h"
#include "engine/session.h"

/* Limits a store enforces when a session is inserted (0: unlimited). */
typedef struct {
    long max_sessions;
    size_t max_bytes; /* sum of eng_session.bytes over all sessions */
} eng_store_limits;

/* The operations of one store implementation; impl is its private state. */
typedef struct {
    vbm_status (*insert)(void *impl, eng_session *s, size_t extra_bytes, vbm_error *err);
    vbm_status (*get)(void *impl, const char *id, const unsigned char *owner, eng_session **out,
                      vbm_error *err);
    vbm_status (*remove)(void *impl, const char *id, const unsigned char *owner, vbm_error *err);
    vbm_status (*list)(void *impl, const unsigned char *owner, const char *after, int limit,
                       eng_session ***out, int *n, int *more, vbm_error *err);
    void (*stats)(void *impl, long *count, size_t *bytes);
    long (*expire)(void *impl, long long now_ms);
    void (*destroy)(void *impl);
    vbm_status (*ready)(void *impl, vbm_error *err); /* NULL: always ready */
} eng_store_ops;

/* A store: its implementation and the limits every implementation enforces
 * through the checks below (the one place they are decided). */
typedef struct {
    const eng_store_ops *ops;
    void *impl;
    eng_store_limits limits;
    void (*wait)(void *ctx, int begin); /* NULL, or called around backend I/O */
    void *wait_ctx;
    void (*corrupt)(void *ctx, const char *id, const char *msg); /* NULL, or told of each
                                                                  * corrupt record met */
    void *corrupt_ctx;
} eng_store;

/* Have a durable store call wait(ctx, 1) before and wait(ctx, 0) after each
 * blocking backend call (a commit, a load), so that a worker pool can run
 * other jobs meanwhile (eng_pool_block). The in-memory store never calls it.
 * Set before the store is shared between threads. Never fails. */
void eng_store_set_wait(eng_store *st, void (*wait)(void *ctx, int begin), void *ctx);

/* Have a durable store call corrupt(ctx, id, msg) each time a request meets a corrupt stored
 * record (a look-up answered VBM_ECORRUPT, a record skipped by a listing), from the thread of
 * that request; msg says what is wrong. Set before the store is shared between threads. Never
 * fails. */
void eng_store_set_corrupt_hook(eng_store *st,
                                void (*corrupt)(void *ctx, const char *id, const char *msg),
                                void *ctx);

/* Create the in-memory store (a sorted table guarded by one mutex) with the
 * given limits. On success *out is owned by the caller (eng_store_free).
 * Fails with VBM_ENOMEM. */
vbm_status eng_store_memory_create(const eng_store_limits *limits, eng_store **out, vbm_error *err);

/* Create the durable store over backend (taken on success: closed by
 * eng_store_free): sessions are committed to the backend on creation and on
 * every mutation (before the caller answers), loaded lazily on first use, and
 * at most max_resident (>= 1) of them stay in memory while unused (least
 * recently used first out; sessions in use are never evicted). limits count
 * stored sessions and resident bytes. On success *out is owned by the caller
 * (eng_store_free). Fails with VBM_EINVAL (max_resident), VBM_EUNAVAIL (the
 * backend cannot count its records), VBM_ENOMEM. */
vbm_status eng_store_durable_create(eng_backend *backend, const eng_store_limits *limits,
                                    long max_resident, eng_store **out, vbm_error *err);

/* Insert s (the store takes one reference of its own), refusing with
 * VBM_ELIMIT when the session count or the byte total (plus extra_bytes, the
 * caller's estimate of work memory) would pass the limits. A durable store
 * commits s before returning VBM_OK and makes s's later mutations durable
 * (eng_session_set_persist). Fails also with VBM_ENOMEM, VBM_EUNAVAIL. */
vbm_status eng_store_insert(eng_store *st, eng_session *s, size_t extra_bytes, vbm_error *err);

/* The session with this id visible to owner (NULL owner: anonymous, all zero),
 * with a new reference for the caller (eng_session_unref), or NULL (not found,
 * or any failure of eng_store_get). */
eng_session *eng_store_lookup(eng_store *st, const char *id, const unsigned char *owner);

/* Like eng_store_lookup, with the reason of a failure: VBM_ENOTFOUND (no such
 * session for this owner), VBM_EUNAVAIL (a durable store is busy or
 * unreachable), VBM_ECORRUPT (the owner's stored record is corrupt: it can only
 * be removed), VBM_ENOMEM. *out is NULL on failure. */
vbm_status eng_store_get(eng_store *st, const char *id, const unsigned char *owner,
                         eng_session **out, vbm_error *err);

/* Remove the session from the store (dropping the store's reference; requests
 * still holding one finish normally; a durable store deletes the record first,
 * so their later writes fail with VBM_ENOTFOUND). Fails with VBM_ENOTFOUND,
 * VBM_EUNAVAIL. */
vbm_status eng_store_remove(eng_store *st, const char *id, const unsigned char *owner,
                            vbm_error *err);

/* Up to limit (>= 1) sessions of owner whose ids sort after `after` (NULL or
 * "": from the start), in id order; *out is a malloc'd array of *n referenced
 * sessions (unref each, free the array); *more is 1 when further sessions
 * follow. A durable store returns the resident copy of a resident session
 * and a private copy, loaded for this page and not cached, of any other (it
 * goes when the caller drops it), at most max_resident a page: a listing
 * leaves the cache as it was; a corrupt stored record is skipped (and reported
 * to the corrupt hook). Fails with VBM_ENOMEM, VBM_EUNAVAIL. */
vbm_status eng_store_list(eng_store *st, const unsigned char *owner, const char *after, int limit,
                          eng_session ***out, int *n, int *more, vbm_error *err);

/* Number of sessions (a durable store: stored ones) and their total accounted
 * bytes (a durable store: resident ones). Never fails. */
void eng_store_stats(eng_store *st, long *count, size_t *bytes);

/* Remove every session whose TTL elapsed since its last use before now_ms
 * (eng_now() milliseconds), stored ones included. Returns how many were
 * removed (a durable store that is unavailable removes none and retries on the
 * next call). */
long eng_store_expire(eng_store *st, long long now_ms);

/* Check that replacing old_bytes by new_bytes keeps the store's byte total
 * (eng_store_stats) under its byte limit; a shrink always passes. Fails with
 * VBM_ELIMIT. (Advisory: nothing is reserved.) */
vbm_status eng_store_reserve(eng_store *st, size_t old_bytes, size_t new_bytes, vbm_error *err);

/* Check that a new session of configuration cfg (eng_session_config_bytes)
 * fits next to the store's byte total, before its memory is allocated. Fails
 * with VBM_ELIMIT. */
vbm_status eng_store_admit(eng_store *st, const vbm_config *cfg, vbm_error *err);

/* Resize session s to H clusters and/or K rows (0 keeps) once the resized
 * memory's estimate fits the byte limit on its own and in the store's total
 * (eng_store_reserve against s's current bytes): eng_session_resize with its
 * results in *out. Fails with VBM_ELIMIT (field empty; s unchanged and *out
 * empty) and eng_session_resize's failures. */
vbm_status eng_store_resize(eng_store *st, eng_session *s, int H, int K, const eng_fit_opts *opts,
                            eng_fit_out *out, vbm_error *err);

/* Replace s's memory by mem (eng_session_replace) once a session holding mem
 * (eng_session_footprint) fits the store's byte total in place of s's current
 * bytes. Takes ownership of mem on success only. Fails with VBM_ELIMIT and
 * eng_session_replace's failures. */
vbm_status eng_store_replace(eng_store *st, eng_session *s, vbm_memory *mem, int64_t if_match,
                             uint64_t *version, vbm_error *err);

/* For implementations, under their own lock while they insert: refuse when
 * count sessions already reach the session limit. Fails with VBM_ELIMIT. */
vbm_status eng_store_check_count(const eng_store *st, long count, vbm_error *err);

/* For implementations, under their own lock while they insert: refuse when
 * total (the accounted bytes with the new session and its extra bytes) passes
 * the byte limit; what names the total in the message ("memory total",
 * "resident memory"). Fails with VBM_ELIMIT. */
vbm_status eng_store_check_bytes(const eng_store *st, size_t total, const char *what,
                                 vbm_error *err);

/* Whether the store can serve requests now (for /readyz): a store shared by
 * replicas (Redis) answers a round trip; a local one is ready while open.
 * Fails with VBM_EUNAVAIL and a message saying why. */
vbm_status eng_store_ready(eng_store *st, vbm_error *err);

/* Drop the store's references and free it (a durable store records the last
 * use of its resident sessions and closes its backend). NULL is a no-op. */
void eng_store_free(eng_store *st);

#endif
