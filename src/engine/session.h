/* session.h -- owns one hosted memory session: its id, owner, version, solver defaults, model
 * binding, and the locked operations on its memory. The session is opaque here: its struct and lock
 * are engine-internal (engine/session_impl.h); callers outside src/engine use the functions
 * below. */
#ifndef VBMEM_ENGINE_SESSION_H
#define VBMEM_ENGINE_SESSION_H

#include <stdint.h>

#include "engine/clock.h"
#include "engine/hosted.h"
#include "vbmem/vbmem.h"

#define ENG_ID_LEN    32 /* hex characters of a session id (128 random bits) */
#define ENG_OWNER_LEN 32 /* bytes of an owner identity (SHA-256 of an API key) */

/* Solver settings: the session's defaults, overridable per request. */
typedef struct {
    int iterations;   /* VB iterations, >= 0 */
    double tolerance; /* relative ELBO change that stops the solver, >= 0 */
    vbm_init init;
} eng_solver;

/* A session (engine/session_impl.h). Reference counted: the store holds one
 * reference, every request working on it holds one. */
typedef struct eng_session eng_session;

/* Called by the session's mutating operations (write, resize, replace) under
 * the session's write lock, after the in-memory mutation and before the lock is
 * released: makes the new state (version prev_version + 1) durable. A failure
 * rolls the mutation back and is returned to the caller. Set by a durable store
 * (eng_session_set_persist); NULL for the in-memory store. */
typedef vbm_status (*eng_persist_fn)(void *ctx, eng_session *s, uint64_t prev_version,
                                     vbm_error *err);

/* The durable form of a session: what a store keeps and reloads. Owns blob and
 * usage (release with eng_record_free). */
typedef struct {
    char id[ENG_ID_LEN + 1];
    unsigned char owner[ENG_OWNER_LEN];
    uint64_t version;
    long ttl_s;
    double created, updated; /* wall clock seconds */
    double used;             /* wall clock seconds of the last request (idle expiry) */
    eng_solver solver;
    unsigned char *blob; /* vbm_export of the memory (posterior, prior, retained codes) */
    size_t blob_len;
    double *usage; /* G*H cluster usage, NULL before any write */
    size_t n_usage;
    char model_name[ENG_MODEL_NAME_LEN + 1]; /* "" for a latent session */
} eng_record;

/* A consistent snapshot of a session for reporting. Owns usage. */
typedef struct {
    char id[ENG_ID_LEN + 1];
    vbm_config cfg;
    eng_solver solver;
    long ttl_s;
    long frames;
    long retained;
    double last_elbo;
    uint64_t version;
    double created, updated;
    size_t bytes;
    double *usage;                           /* G*H, NULL before any write */
    char model_name[ENG_MODEL_NAME_LEN + 1]; /* "" for a latent session */
    /* a session of kind temporal (cfg then holds only code_size; session_temporal.h) */
    int temporal;
    vbm_temporal_config tcfg;
    long sequences;     /* sequences written since the last replace */
    double free_energy; /* at the end of the last write or append (NaN before any) */
} eng_info;

typedef enum { ENG_REPLACE = 0, ENG_APPEND = 1, ENG_REFIT = 2 } eng_mode;

/* Per-request fitting options. */
typedef struct {
    int iterations;   /* < 0: the session's default */
    double tolerance; /* < 0: the session's default */
    int init;         /* < 0: the session's default, else a vbm_init */
    uint64_t seed;
    int want_addresses;
    /* solver time budget (vbm_write_opts.max_seconds: every mode and resize); 0: none */
    double max_seconds;
    int64_t if_match; /* < 0: no precondition; else the required current version */
    /* the large arrays' pool for the fit (vbm_write_opts.scratch; eng_pool_scratch gives the
     * calling worker's), held by the caller; NULL: the fit allocates its own */
    vbm_scratch *scratch;
    /* Test hook (vbmemd's hidden --test-hold-writes, for tests/http only; NULL otherwise):
     * called with the session's id while its write lock is held, before the fit. */
    void (*test_hold)(void *ctx, const char *session_id);
    void *test_hold_ctx;
} eng_fit_opts;

/* Result of a write, append, refit or resize. Owns res's arrays and usage
 * (release with eng_fit_out_free). */
typedef struct {
    vbm_write_result res;
    uint64_t version; /* after the operation */
    long frames;
    long retained;
    int clusters, rows, groups;
    int time_limited;               /* the time budget stopped the solver early */
    double solve_s;                 /* seconds inside libvbmem */
    double wait_s;                  /* seconds waiting for the session lock */
    double elbo_before, elbo_after; /* resize only */
    double *usage;                  /* G*H after the operation */
} eng_fit_out;

/* Heap bytes held by a memory: the struct, prior, posterior, tree paths and
 * retained codes. Never fails; 0 for NULL. */
size_t eng_memory_bytes(const vbm_memory *mem);

/* 1 when id has the form of a session id (ENG_ID_LEN lowercase hex characters, nothing else);
 * 0 otherwise, NULL included. Never fails. */
int eng_id_ok(const char *id);

/* Fill id with ENG_ID_LEN lowercase hex characters (and a NUL) from 128 bits
 * of getrandom(). Fails with VBM_ENOMEM when the kernel gives no randomness. */
vbm_status eng_random_id(char id[ENG_ID_LEN + 1], vbm_error *err);

/* Create a session holding a fresh memory of configuration cfg (checked with
 * vbm_config_check: VBM_EINVAL naming the field), the given solver defaults,
 * TTL (>= 0) and owner (NULL: anonymous). Its version is 1 and its reference
 * count 1 (the caller's). Fails with VBM_EINVAL, VBM_ENOMEM. */
vbm_status eng_session_create(const vbm_config *cfg, const eng_solver *solver, long ttl_s,
                              const unsigned char *owner, eng_session **out, vbm_error *err);

/* Take one more reference. Never fails. */
void eng_session_ref(eng_session *s);

/* Drop a reference; the last one frees the session and its memory. NULL is a
 * no-op. */
void eng_session_unref(eng_session *s);

/* Record a use now (for TTL expiry). Never fails. */
void eng_session_touch(eng_session *s);

/* The session's id (ENG_ID_LEN hex characters), fixed at creation. Never
 * fails. */
const char *eng_session_id(const eng_session *s);

/* The name of the session's model, fixed at creation (eng_session_set_model);
 * "" for a latent session. Never fails. */
const char *eng_session_model_name(const eng_session *s);

/* The session's current version, read under its read lock. Never fails. */
uint64_t eng_session_version(eng_session *s);

/* The configuration of the session's memory now (read under its read lock;
 * a replace may change it). Never fails. */
void eng_session_config(eng_session *s, vbm_config *cfg);

/* The code size C of the session's memory now (eng_session_config's
 * code_size; fixed for a session with a model: its encoder's C). Never
 * fails. */
int eng_session_code_size(eng_session *s);

/* Heap bytes accounted for the session now (what the store's byte limit
 * counts). Never fails. */
size_t eng_session_bytes(const eng_session *s);

/* Bytes accounted for a session holding mem and no cluster usage (what a
 * session takes after eng_session_replace by mem). Never fails. */
size_t eng_session_footprint(const vbm_memory *mem);

/* Estimated bytes of a session holding a fresh memory of configuration cfg
 * (double: no overflow for any configuration; used to refuse a creation or a
 * resize before allocating). Never fails. */
double eng_session_config_bytes(const vbm_config *cfg);

/* Snapshot the session under its read lock into *info (release with
 * eng_info_free). Fails only with VBM_ENOMEM. */
vbm_status eng_session_info(eng_session *s, eng_info *info, vbm_error *err);

/* Release what an eng_info owns (its usage array). Never fails. */
void eng_info_free(eng_info *info);

/* Write codes to the session under its write lock: mode replace (batch VB from
 * the prior), append (online VB) or refit (batch VB over retained codes plus
 * codes, which may then be NULL). Checks opts->if_match first (VBM_ECONFLICT).
 * On success the version is incremented, the new state made durable (the
 * persist hook, when set, before the lock is released) and *out filled. Fails
 * with VBM_ECONFLICT, VBM_EINVAL (bad codes, H > T, nothing to refit; field
 * names the request member), VBM_ENUMERIC, VBM_ENOMEM, and the persist hook's
 * failures (VBM_EUNAVAIL; VBM_ECONFLICT / VBM_ENOTFOUND when the stored
 * session moved on or is gone); the session is then unchanged. */
vbm_status eng_session_write(eng_session *s, eng_mode mode, const vbm_codes *codes,
                             const eng_fit_opts *opts, eng_fit_out *out, vbm_error *err);

/* Resize the session's memory to H clusters and/or K rows (0 keeps) under its
 * write lock, persisted like a write; out->elbo_before/after are filled. Same
 * failures as write. The store's byte limit is not checked here: a session in
 * a store is resized through eng_store_resize. */
vbm_status eng_session_resize(eng_session *s, int H, int K, const eng_fit_opts *opts,
                              eng_fit_out *out, vbm_error *err);

/* The cues of a forget: images encoded with the session's model, or codes. */
typedef struct {
    const float *images;    /* T x channels x height x width in [0, 1], or NULL */
    const vbm_codes *codes; /* or NULL (then images); codes->C must be the memory's code size */
    long T;                 /* images */
} eng_forget_query;

/* Result of a forget; owns its arrays (release with eng_forget_out_free). */
typedef struct {
    eng_fit_out fit;  /* version, frames, retained, sizes, usage and timings after the forget;
                         fit.res is the refit's on the retained-code path with codes left,
                         else zeroed with its ELBO NaN (no codes to evaluate it on) */
    int exact;        /* vbm_forget_result.exact */
    long n;           /* cues */
    int groups;       /* G of clusters */
    long *item;       /* [n] index of the retained code removed (before the forget), -1 when
                         the memory was downdated */
    double *distance; /* [n] vbm_forget_result.distance */
    int *clusters;    /* [n x G] each cue's most probable cluster per group (argmax q(s); ties:
                         the lowest) under the memory before the forget */
    double encode_s;  /* seconds in the encoder (images) */
} eng_forget_out;

/* Forget the stored items nearest the cues (vbm_forget: the retained-code path when the
 * memory retains codes, else the conjugate downdate) under the session's write lock, like a
 * write: If-Match (opts->if_match) checked first, the version incremented, the new state made
 * durable (the persist hook, before the lock is released) and *out filled. Images are
 * encoded first with m (the session's model; the encoder's mean codes are the cues). Cluster
 * usage: the refit's on the retained-code path, the cues' q(s) subtracted (at least 0) on the
 * downdate, none when the memory returns to its prior. opts->iterations, tolerance, init and
 * seed drive the refit. Fails with VBM_EINVAL (a temporal session, images without a model
 * or of a session whose model differs: field "kind" / "observations"; the failures of
 * vbm_forget, their fields "codes..." named "observations" for images), VBM_ECONFLICT,
 * VBM_ENUMERIC, VBM_ENOMEM and the persist hook's failures; the session is then unchanged
 * and *out empty. */
vbm_status eng_session_forget(eng_session *s, const eng_model *m, const eng_forget_query *q,
                              const eng_fit_opts *opts, eng_forget_out *out, vbm_error *err);

/* Release what an eng_forget_out owns. NULL-safe; it is left empty. */
void eng_forget_out_free(eng_forget_out *out);

/* Draw n codes under the read lock. On success *z (n x *C) and *clusters
 * (n x *G) are malloc'd and owned by the caller; *version is the version
 * sampled. Fails with VBM_EINVAL (n, cluster out of range), VBM_ENOMEM. */
vbm_status eng_session_sample(eng_session *s, long n, uint64_t seed, int cluster, double **z,
                              int **clusters, int *C, int *G, uint64_t *version, vbm_error *err);

/* A copy of the session's memory taken under its read lock, with the version
 * copied (for an export that serialises it without holding the lock). On
 * success *copy is owned by the caller (vbm_memory_free). Fails with
 * VBM_ENOMEM; *copy is then NULL. */
vbm_status eng_session_export(eng_session *s, vbm_memory **copy, uint64_t *version, vbm_error *err);

/* Replace the session's memory by mem under the write lock, after checking
 * if_match (< 0: none), persisted like a write. Takes ownership of mem on
 * success only. Usage is reset. Fails with VBM_ECONFLICT, VBM_ENOMEM and the
 * persist hook's failures (the session is then unchanged). The store's byte
 * limit is not checked here: a session in a store goes through
 * eng_store_replace. */
vbm_status eng_session_replace(eng_session *s, vbm_memory *mem, int64_t if_match, uint64_t *version,
                               vbm_error *err);

/* Make s durable through fn(ctx, ...) on every later mutation. Call before
 * the session is shared (no lock is taken). Never fails. */
void eng_session_set_persist(eng_session *s, eng_persist_fn fn, void *ctx);

/* Fill *rec with the durable form of s (vbm_export of its memory, usage,
 * metadata; rec->used from its last use). The caller holds s's read or write
 * lock, or is its only user. On failure *rec owns nothing. Fails with
 * VBM_ENOMEM. */
vbm_status eng_session_to_record(const eng_session *s, eng_record *rec, vbm_error *err);

/* Build a session (reference count 1, no persist hook) from a record: imports
 * rec->blob (bit-exact) and copies the usage. The record is not consumed.
 * Fails with VBM_EFORMAT (the blob does not import, the usage size does not
 * match the memory, bad id or TTL: the message says which), VBM_ENOMEM. */
vbm_status eng_session_from_record(const eng_record *rec, eng_session **out, vbm_error *err);

/* Release what a record owns. NULL-safe; the record is left empty. */
void eng_record_free(eng_record *rec);

/* Release the arrays of a fit result. NULL-safe. */
void eng_fit_out_free(eng_fit_out *out);

/* Bind a new session to model m (NULL: latent): records its name and takes a
 * reference. Call before the session is shared (no lock is taken). Never
 * fails. */
void eng_session_set_model(eng_session *s, eng_model *m);

/* The model of session s with a new reference for the caller, or *out = NULL
 * for a latent session. A session loaded from a durable store knows only the
 * name of its model: it is looked up in reg on first use and stays bound from
 * then on. Fails with VBM_EINVAL (the session's model is not hosted any more,
 * or the hosted model of that name has another code size than the session's
 * memory; field "model"). */
vbm_status eng_session_model(eng_session *s, eng_models *reg, eng_model **out, vbm_error *err);

#endif
