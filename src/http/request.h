/* request.h -- owns the in-flight request record, its response and the route table types shared by
 * the server and the route handlers. */
#ifndef VBMEM_HTTP_REQUEST_H
#define VBMEM_HTTP_REQUEST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <microhttpd.h>

#include "engine/clock.h"
#include "engine/pool.h"
#include "engine/session.h"
#include "engine/store.h"
#include "http/auth.h"
#include "http/conns.h"
#include "http/cors.h"
#include "http/log.h"
#include "http/metrics.h"
#include "http/server.h"

#define QUOTA_STRIPES 16

#define REQ_ID_LEN    64
#define REQ_PARAM_LEN 72
#define REQ_MAX_ARGS  8

typedef struct http_req http_req;

/* Where a route's handler runs. */
typedef enum {
    ROUTE_POOL = 0,  /* as a pool job */
    ROUTE_INLINE = 1 /* on the HTTP thread (cheap, never blocks) */
} http_route_where;

/* Whether a route reads a request body. */
typedef enum {
    ROUTE_NO_BODY = 0,
    ROUTE_JSON_BODY = 1 /* POST/PUT with an application/json body */
} http_route_body;

/* Whether a route is part of the versioned API. */
typedef enum {
    ROUTE_UNVERSIONED = 0, /* the page, the specification, health and metrics */
    ROUTE_V1 = 1           /* under /v1 (API keys apply) */
} http_route_api;

/* A route: method, path pattern ("{x}" matches one segment), the handler, where it runs,
 * whether it reads a body, whether it is under /v1, and its metrics label. Each flag has
 * its own enum type, so a flag given in another's place is a compile error
 * (-Wenum-conversion). */
typedef struct {
    const char *method;
    const char *pattern;
    int (*handler)(http_req *r, vbm_error *err); /* returns the status (http/respond.h) */
    http_route_where inline_;                    /* ROUTE_INLINE: runs on the HTTP thread */
    http_route_body needs_body; /* ROUTE_JSON_BODY: reads an application/json body */
    http_route_api versioned;   /* ROUTE_V1: under /v1 */
    const char *name;           /* metrics label */
} http_route;

/* The route table (routes.c), terminated by a zeroed entry. */
extern const http_route http_routes[];
/* Number of entries of http_routes. */
int http_route_count(void);

/* Match method and path. Returns the route index and copies the single path
 * parameter (when the pattern has one) into param; -1 when no pattern matches
 * the path (404); -2 when patterns match the path but not the method (405,
 * *allow then lists the methods, e.g. "GET, DELETE"). */
int http_route_match(const char *method, const char *path, char param[REQ_PARAM_LEN], char *allow,
                     size_t allow_len);

/* The server, shared by every request. */
struct http_server {
    struct MHD_Daemon *daemon;
    http_server_config cfg;
    char *listen; /* owned copy of cfg.listen */
    eng_pool *pool;
    eng_store *store;
    http_auth *auth;
    const hlog *log;
    http_metrics *metrics;
    const char *route_names[METRICS_MAX_ROUTES]; /* metrics labels, from http_routes */
    atomic_int stopping;
    atomic_long active;                         /* requests between first call and completion */
    atomic_ullong next_rid;                     /* generated request ids */
    atomic_ullong answer_bytes;                 /* answers queued, not yet freed (server.c) */
    pthread_mutex_t quota_locks[QUOTA_STRIPES]; /* per-key quota checks (quota.c) */
    int port;
    double started;
    http_conns conns; /* open connections; only the MHD thread changes them */
    http_cors cors;   /* --cors-origin (n 0: none) */
};

/* The response a handler produces. body is malloc'd (owned). */
typedef struct {
    int status;
    char *body;
    size_t len;
    const char *content_type;
    char etag[32];
    char location[128];
    char allow[64];
    int retry_after; /* > 0: add Retry-After */
    int preflight;   /* 1: a CORS preflight's answer (allow holds the path's methods) */
} http_resp;

enum { REQ_READING = 0, REQ_RUNNING = 1, REQ_DONE = 2 };

/* One request from its first callback to its completion. job is first so that
 * a worker can recover the request from the job pointer. */
struct http_req {
    eng_job job;
    http_server *srv;
    struct MHD_Connection *conn;
    atomic_int state;
    int route; /* index into http_routes, -1 unmatched */
    char method[16];
    char *path;                /* owned copy of the URL path */
    char param[REQ_PARAM_LEN]; /* {id} or {name} */
    char request_id[REQ_ID_LEN];
    int has_if_match; /* a write's If-Match holds an entity tag ("*" is none) */
    int64_t if_match; /* the version it names; INT64_MAX when it can name none (if_match_never) */
    /* 1: a weak tag (2) or a strong tag that is no version (1): never matches */
    int if_match_never;
    unsigned char owner[ENG_OWNER_LEN];
    http_key_policy policy; /* the API key's scope and quotas (all open without keys) */
    int nargs;
    char *arg_key[REQ_MAX_ARGS], *arg_val[REQ_MAX_ARGS];
    char *body;
    size_t body_len, body_cap;
    int too_large;
    int sent; /* the response was queued */
    double t_start;
    http_resp resp;
};

/* The bytes an answer holds per number while it is built and written out, which the per-request
 * cap (http_limits.max_request_bytes) counts next to the work: in JSON a number of the tree (its
 * json_t with the allocator's overhead, about 40 bytes, and its slot in an array, up to 16 as
 * arrays grow by doubling) and its text (up to 25 characters, the separator included); as base64
 * float32 its 4 bytes and 5.4 characters of text held three times (the encoder's, the tree's
 * string, the answer). */
#define REQ_JSON_NUMBER_BYTES 81.0
#define REQ_B64_NUMBER_BYTES  21.0

/* The bytes an answer of n numbers holds (REQ_JSON_NUMBER_BYTES or REQ_B64_NUMBER_BYTES each). */
double req_answer_bytes(double n, int base64);

/* Value of query argument key, or NULL. */
const char *req_arg(const http_req *r, const char *key);

/* Route handlers (routes_system.c: healthz, readyz, metrics, and
 * routes_models.c: models_list, models_get, inline on the HTTP thread;
 * routes_models.c: models_encode, models_decode, and routes_sessions.c: the
 * rest, on pool workers). Each reads the request
 * (path parameter, query arguments, body, If-Match, owner) and returns the HTTP status of
 * its answer: a 2xx with the resource set in r->resp, or the status of a failure (never 500
 * but for a corrupt stored record) with err filled, which resp_answer turns into the problem
 * document (http/respond.h). They never block except on a session's lock. */
int route_healthz(http_req *r, vbm_error *err);
int route_readyz(http_req *r, vbm_error *err);
int route_metrics(http_req *r, vbm_error *err);
int route_models_list(http_req *r, vbm_error *err);
int route_models_get(http_req *r, vbm_error *err);
int route_models_encode(http_req *r, vbm_error *err);
int route_models_decode(http_req *r, vbm_error *err);
/* routes_models.c: POST /v1/models/{name}/infer, the posterior of a served RPM (pool worker). */
int route_models_infer(http_req *r, vbm_error *err);
int route_sessions_create(http_req *r, vbm_error *err);
int route_sessions_list(http_req *r, vbm_error *err);
int route_sessions_get(http_req *r, vbm_error *err);
int route_sessions_delete(http_req *r, vbm_error *err);
int route_episodes(http_req *r, vbm_error *err);
int route_resize(http_req *r, vbm_error *err);
int route_forget(http_req *r, vbm_error *err);
int route_samples(http_req *r, vbm_error *err);
int route_reads(http_req *r, vbm_error *err);
int route_memory_get(http_req *r, vbm_error *err);
int route_memory_put(http_req *r, vbm_error *err);
/* routes_sessions.c: GET /v1/sessions/{id}/clusters, each cluster's mean code, occupancy and
 * (a session with a model) decoded image (pool worker). */
int route_clusters(http_req *r, vbm_error *err);
/* routes_sessions.c: infer and continue, operations of temporal sessions (through their kind's
 * table, http/session_kinds.h; pool workers) */
int route_temporal_infer(http_req *r, vbm_error *err);
int route_temporal_continue(http_req *r, vbm_error *err);
/* routes_web.c: the web page, its files and the API's specification, inline on the HTTP
 * thread */
int route_web_index(http_req *r, vbm_error *err);
int route_web_asset(http_req *r, vbm_error *err);
int route_web_openapi(http_req *r, vbm_error *err);

#endif
