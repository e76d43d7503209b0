/* session_temporal.h -- owns the operations of sessions of kind temporal (the identity/attribute
 * sequence memory of seed 003, vbm_temporal): creation, write/append of sequences, infer,
 * sample, continue, export and replace, each under the session's lock, mutations persisted like
 * the other kinds' (engine/session.h). */
#ifndef VBMEM_ENGINE_SESSION_TEMPORAL_H
#define VBMEM_ENGINE_SESSION_TEMPORAL_H

#include <stdint.h>

#include "engine/session.h"
#include "vbmem/vbmem.h"

/* Per-request fitting options of a temporal write or append. */
typedef struct {
    int iterations;   /* VB-EM iterations, >= 1 */
    int sweeps;       /* VBE sweeps per iteration, >= 1 */
    int restarts;     /* starts of a write (an append runs once), >= 1 */
    int start;        /* VBM_TEMPORAL_START_*: the start of a write */
    int warm_start;   /* 0 or 1: eq. 19 from an eq. 18 fit (vbm_temporal_opts.warm_start) */
    double tolerance; /* relative free-energy change that stops early, >= 0 */
    uint64_t seed;
    int64_t if_match; /* < 0: no precondition */
} eng_temporal_opts;

/* Result of a temporal write or append. Owns trace (eng_temporal_out_free). */
typedef struct {
    uint64_t version;
    vbm_temporal_trace trace; /* the free energy after each iteration */
    long sequences, frames;   /* written since the last replace, appends included */
    double free_energy;       /* at the end */
    double solve_s, wait_s;
} eng_temporal_out;

/* Estimated bytes of a session holding a temporal memory of configuration cfg. Never fails. */
double eng_temporal_config_bytes(const vbm_temporal_config *cfg);

/* Create a session of kind temporal holding a fresh memory of configuration cfg (checked by
 * vbm_temporal_config_check: VBM_EINVAL naming the field), TTL (>= 0) and owner (NULL:
 * anonymous); version 1, reference count 1. Fails with VBM_EINVAL, VBM_ENOMEM. */
vbm_status eng_session_create_temporal(const vbm_temporal_config *cfg, long ttl_s,
                                       const unsigned char *owner, eng_session **out,
                                       vbm_error *err);

/* 1 when s is a session of kind temporal (fixed at creation). Never fails. */
int eng_session_is_temporal(const eng_session *s);

/* The configuration of a temporal session's memory (zeroed for another kind). Never fails. */
void eng_session_temporal_config(eng_session *s, vbm_temporal_config *cfg);

/* Write (append 0: q(Theta) refitted from the prior on these sequences) or append (append 1:
 * vbm_temporal_append) n sequences under the write lock, after If-Match; the new state is made
 * durable before the lock is released. Fails with VBM_ECONFLICT, VBM_EINVAL (a bad sequence:
 * field "sequences[i]..."; not a temporal session: "kind"), VBM_ENUMERIC, VBM_ENOMEM and the
 * persist hook's failures; the session is then unchanged. */
vbm_status eng_session_temporal_write(eng_session *s, int append, const vbm_sequence *seqs, int n,
                                      const eng_temporal_opts *o, eng_temporal_out *out,
                                      vbm_error *err);
/* Release the trace of a result. NULL-safe. */
void eng_temporal_out_free(eng_temporal_out *o);

/* Identities and attributes of a query sequence under the read lock (vbm_temporal_infer): *qb
 * (T x P) and *a (T x P*Q) malloc'd for the caller, *fe the latent free energy, *cfg the
 * memory's configuration, *version the version read. Fails with VBM_EINVAL (bad sequence:
 * field "sequence..."; sweeps), VBM_ENOMEM, VBM_ENUMERIC. */
vbm_status eng_session_temporal_infer(eng_session *s, const vbm_sequence *q, int sweeps,
                                      double **qb, double **a, double *fe, vbm_temporal_config *cfg,
                                      uint64_t *version, vbm_error *err);

/* Draw a sequence of T frames under the read lock (vbm_temporal_sample): *y (T x D), *b (T x P)
 * and *a (T x P*Q) malloc'd for the caller. Fails with VBM_EINVAL (T: field "length"),
 * VBM_ENOMEM, VBM_ENUMERIC. */
vbm_status eng_session_temporal_sample(eng_session *s, long T, uint64_t seed, double **y, int **b,
                                       double **a, vbm_temporal_config *cfg, uint64_t *version,
                                       vbm_error *err);

/* Continue a prefix by n frames under the read lock (vbm_temporal_continue): *mean (n x D),
 * *qb (n x P) and, when nsamples > 0, *samples (nsamples x n x D) malloc'd for the caller.
 * Fails with VBM_EINVAL (field "prefix...", "steps", "samples", "sweeps"), VBM_ENOMEM,
 * VBM_ENUMERIC. */
vbm_status eng_session_temporal_continue(eng_session *s, const vbm_sequence *prefix, long n,
                                         int sweeps, uint64_t seed, int nsamples, double **mean,
                                         double **qb, double **samples, vbm_temporal_config *cfg,
                                         uint64_t *version, vbm_error *err);

/* A copy of the session's temporal memory taken under the read lock, and its version. *copy is
 * owned by the caller. Fails with VBM_EINVAL (not a temporal session), VBM_ENOMEM. */
vbm_status eng_session_temporal_export(eng_session *s, vbm_temporal **copy, uint64_t *version,
                                       vbm_error *err);

/* Replace the session's temporal memory by m under the write lock, after If-Match (< 0: none),
 * persisted like a write; takes ownership of m on success only. Fails with VBM_EINVAL (not a
 * temporal session; a session with a model and another code size: "memory.config.code_size"),
 * VBM_ECONFLICT, VBM_ENOMEM and the persist hook's failures (the session is then unchanged). */
vbm_status eng_session_temporal_replace(eng_session *s, vbm_temporal *m, int64_t if_match,
                                        uint64_t *version, vbm_error *err);

#endif
