/* server.h -- owns the public face of the HTTP server: its configuration and limits, start,
 * graceful shutdown, stop. */
#ifndef VBMEM_HTTP_SERVER_H
#define VBMEM_HTTP_SERVER_H

#include <stddef.h>
#include <stdio.h>

#include "engine/clock.h"
#include "engine/hosted.h"
#include "engine/pool.h"
#include "engine/store.h"
#include "http/auth.h"
#include "http/log.h"

/* Request limits (all > 0). */
typedef struct {
    size_t max_body_bytes;    /* request body; larger gets 413 */
    long max_frames;          /* frames per episode, query frames, samples per request */
    int max_code_size;        /* C of a session */
    long max_sessions;        /* sessions held (429 past it) */
    size_t max_memory_bytes;  /* accounted bytes of all sessions (429 past it) */
    int max_iterations;       /* VB iterations per request */
    double max_solve_seconds; /* solver time budget per replace write */
    int max_read_steps;       /* iterations of one read */
    size_t max_request_bytes; /* what one read, samples, clusters or export request may hold: its
                                 work and its answer (422 naming the field that sizes it) */
    size_t max_answer_bytes;  /* what all answers built and not yet read by their clients hold
                                 together: one past it (above SRV_SMALL_ANSWER, others held) 503 */
    int retry_after_s;        /* Retry-After of 429 and 503 answers */
} http_limits;

typedef struct {
    const char *listen; /* "ADDR:PORT", "[V6ADDR]:PORT"; port 0 picks a free one */
    int max_connections;
    int connection_timeout_s;
    double
        queue_timeout_s; /* reported in the 503 of a job shed by the pool (eng_pool_set_max_wait) */
    const char *models_dir; /* may be NULL */
    eng_models *models;     /* borrowed (outlives the server): the hosted models; NULL: none */
    const char *data_dir;   /* may be NULL */
    http_limits limits;
    const char *tls_cert_pem; /* PEM certificate chain (http_tls_load); NULL: plain HTTP */
    const char *tls_key_pem;  /* PEM private key; given with tls_cert_pem */
    int metrics_key_required; /* 1: GET /metrics needs a valid API key (401 without) */
    const char *cors_origins; /* origins browser pages may call from (http_cors_parse's list);
                                 NULL or "": none, no CORS header is sent */
    /* Test hook, never set in production (vbmemd's hidden, command-line-only
     * --test-hold-writes DIR; tests/http): a write (episodes) of session ID waits, its
     * session's write lock held, while the file DIR/ID.hold exists, after creating
     * DIR/ID.held. NULL: off. */
    const char *test_hold_dir;
} http_server_config;

typedef struct http_server http_server;

/* Fill *lim with the defaults documented in README.md. Never fails. */
void http_limits_default(http_limits *lim);

/* Start listening (over TLS when cfg gives a certificate and key; the PEM
 * texts are borrowed until http_server_stop). The server borrows pool, store
 * (whose corrupt hook it sets until http_server_stop: a warning and a metric),
 * auth and log (they must outlive it). On success *out is owned by the
 * caller. Fails with VBM_EINVAL (bad listen address or cors_origins; TLS asked of a
 * libmicrohttpd built without it; metrics_key_required without a key file),
 * VBM_ENOMEM, or VBM_EBUSY when the socket cannot be bound (the message says
 * why). */
vbm_status http_server_start(const http_server_config *cfg, eng_pool *pool, eng_store *store,
                             http_auth *auth, const hlog *log, http_server **out, vbm_error *err);

/* The TCP port actually bound. */
int http_server_port(http_server *srv);

/* Stop accepting connections; requests that still arrive on open connections
 * get 503 with Connection: close. Never fails. */
void http_server_begin_shutdown(http_server *srv);

/* Wait up to `seconds` until no request is in progress (responses handed to
 * the network). Returns VBM_OK or VBM_EBUSY on timeout. */
vbm_status http_server_wait_idle(http_server *srv, double seconds);

/* Close every connection and free the server. NULL is a no-op. Call after
 * the pool drained (no job may still reference a request). */
void http_server_stop(http_server *srv);

/* Print the registered routes, one "METHOD /path/{param}" per line. */
void http_server_print_routes(FILE *out);

#endif
