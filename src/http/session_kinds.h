/* session_kinds.h -- owns the table of operations of a kind of session (mixture, latent and
 * pixel sessions in routes_sessions.c, temporal sessions in routes_temporal.c): the session
 * routes call through it, and the steps every kind shares (the session and body of a request,
 * the model a new session uses, its insertion, the session resource). */
#ifndef VBMEM_HTTP_SESSION_KINDS_H
#define VBMEM_HTTP_SESSION_KINDS_H

#include <jansson.h>

#include "engine/hosted.h"
#include "engine/session.h"
#include "http/request.h"

/* The operations on one session that differ by kind, each behind one route. */
typedef enum {
    KIND_OP_EPISODES = 0, /* POST .../episodes */
    KIND_OP_RESIZE,       /* POST .../resize */
    KIND_OP_FORGET,       /* POST .../forget */
    KIND_OP_SAMPLES,      /* POST .../samples */
    KIND_OP_READS,        /* POST .../reads */
    KIND_OP_MEMORY_GET,   /* GET .../memory */
    KIND_OP_MEMORY_PUT,   /* PUT .../memory */
    KIND_OP_INFER,        /* POST .../infer */
    KIND_OP_CONTINUE,     /* POST .../continue */
    KIND_OP_COUNT
} kind_op;

/* An operation on session s (the caller's reference) with the request's JSON object body
 * (taken: the operation releases it, as early as it can; NULL for a route without a body).
 * Returns the status as a route handler does (http/respond.h). */
typedef int (*kind_op_fn)(http_req *r, eng_session *s, json_t *body, vbm_error *err);

/* A kind of session: how a session of it is created, and its operations. */
typedef struct {
    const char *name; /* for the documentation of the table only */
    /* POST /v1/sessions of this kind: takes body; returns the status (201 on success). */
    int (*create)(http_req *r, json_t *body, vbm_error *err);
    kind_op_fn op[KIND_OP_COUNT];       /* NULL: not an operation of this kind */
    const char *refusal[KIND_OP_COUNT]; /* where op is NULL: the detail of the 422 (field kind) */
} sess_kind;

/* Mixture, latent and pixel sessions (routes_sessions.c). */
extern const sess_kind kind_vb;
/* Temporal sessions (routes_temporal.c). */
extern const sess_kind kind_temporal;

/* The kind of session s. Never fails. */
const sess_kind *kind_of(const eng_session *s);

/* The kind a creation body asks for: temporal when memory.kind is "temporal". Never fails. */
const sess_kind *kind_requested(const json_t *body);

/* The route of operation op: the session of the path (404 when there is none), the request's
 * JSON object body when with_body (400 when there is none), then the operation of the session's
 * kind, or a 422 naming "kind" with the kind's refusal. Returns the status. */
int kind_dispatch(http_req *r, kind_op op, int with_body, vbm_error *err);

/* Operation op of s's kind on s with body (taken), or its 422 refusal. Returns the status. */
int kind_call(http_req *r, eng_session *s, kind_op op, json_t *body, vbm_error *err);

/* The model a new session uses (a new reference in *m), or NULL for a latent session: "model"
 * when given, else, with use_default, the default model when "code_size" is absent and a default
 * is configured. Fails with VBM_EINVAL naming "model" (not a string, no models hosted, none of
 * that name, its code size past --max-code-size), or the registry's status. */
vbm_status kind_pick_model(http_req *r, const json_t *body, int use_default, eng_model **m,
                           vbm_error *err);

/* The end of a creation of any kind, past its configuration and the store's admission: under
 * the key's quota lock the quota (bytes: the new session's estimate), then make(ctx, owner, &s,
 * err) creates the session, which is bound to model m (borrowed; NULL: latent) and inserted;
 * answers 201 with the session and its Location. A failure of make or the insert without a field
 * is the configuration's (422, field memory). Returns the status. */
int kind_insert(http_req *r, double bytes, eng_model *m,
                vbm_status (*make)(const void *ctx, const unsigned char *owner, eng_session **s,
                                   vbm_error *err),
                const void *ctx, vbm_error *err);

/* Answer with the session resource of s (status 200 or 201) and its ETag. Returns the status. */
int kind_respond_info(http_req *r, eng_session *s, int status, vbm_error *err);

#endif
