/* session_impl.h -- owns the layout and the lock of a session, for the engine's own modules
 * (session, stores, recall) and tests; src/http never includes it and works through
 * engine/session.h. */
#ifndef VBMEM_ENGINE_SESSION_IMPL_H
#define VBMEM_ENGINE_SESSION_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "engine/hosted.h"
#include "engine/session.h"

/* A session. Fields marked "locked" are read under the read lock and written
 * under the write lock of `lock`; the rest are fixed at creation except the
 * atomics. */
struct eng_session {
    char id[ENG_ID_LEN + 1];
    unsigned char owner[ENG_OWNER_LEN]; /* all zero without API keys */
    pthread_rwlock_t lock;              /* writer-preferring */
    atomic_int refs;
    eng_solver solver;
    long ttl_s;                /* idle seconds before expiry; 0: never */
    double created;            /* wall clock */
    vbm_memory *mem;           /* locked */
    uint64_t version;          /* locked; 1 at creation, +1 per mutation */
    double updated;            /* locked; wall clock of the last mutation */
    double *usage;             /* locked; G*H expected frames per cluster, NULL before any write */
    atomic_llong last_used_ms; /* monotonic milliseconds of the last request */
    atomic_size_t bytes;       /* accounted heap bytes of the session */
    eng_persist_fn persist;    /* fixed once shared; NULL: not durable */
    void *persist_ctx;
    char model_name[ENG_MODEL_NAME_LEN + 1]; /* fixed at creation; "" for a latent session */
    _Atomic(eng_model *) model; /* a reference to the model object the session uses, bound at
                                 * creation (or on first use after a load from the store,
                                 * eng_session_model); NULL until bound or when latent */
    atomic_int test_fail_alloc; /* tests only (eng_session_test_fail_alloc); 0 in production */
    int temporal; /* fixed at creation: 1 for a session of kind temporal (mem is then NULL) */
    vbm_temporal
        *tmem; /* locked; the memory of a temporal session (session_temporal.c), else NULL */
};

/* Take the session's read lock (engine modules that read s->mem or the other
 * locked fields directly: recall, the durable store) and release it with
 * eng_session_unlock. Never fail. */
void eng_session_rdlock(eng_session *s);
void eng_session_unlock(eng_session *s);

/* Take the session's write lock for a mutation of either kind, recording the wait in *wait_s
 * (may be NULL), and check the version precondition if_match (-1: none). Fails with
 * VBM_ECONFLICT (field If-Match) when the session is at another version; the lock is then
 * released. */
vbm_status eng_session_wrlock(eng_session *s, int64_t if_match, double *wait_s, vbm_error *err);

/* The locked part of eng_session_forget (engine/session_forget.c): vbm_forget of the cues on
 * the session's memory through the path of writes (write lock, If-Match, undo copy, commit,
 * persist), its cluster usage as eng_session_forget says. res receives vbm_forget's result
 * (its fit moved into out->res). Same failures; the session is then unchanged and both
 * results empty. */
vbm_status eng_session_forget_codes(eng_session *s, const vbm_codes *cues, const eng_fit_opts *o,
                                    eng_fit_out *out, vbm_forget_result *res, vbm_error *err);

/* Tests only: make the nth allocation (1: the next) of the session's write
 * path (its usage arrays) fail as out of memory; 0 turns it off. The counter
 * is the session's own: no global state, never set by the daemon. */
void eng_session_test_fail_alloc(eng_session *s, int nth);

#endif
