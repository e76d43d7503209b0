/* server.c -- owns the libmicrohttpd daemon: request lifecycle (headers, auth, body), dispatch
 * inline or to the pool with suspend/resume, handing the answers (made by the funnel of
 * http/respond.c) to libmicrohttpd, access logs, shutdown. */
#define _GNU_SOURCE /* strncasecmp, getaddrinfo */

#include <ctype.h>
#include <errno.h>
#include <malloc.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http/request.h"
#include "http/respond.h"
#include "http/urlpath.h"

#define SRV_LISTEN_LEN 256
/* TLS 1.2 and 1.3 only, GnuTLS's NORMAL ciphers otherwise. */
#define SRV_TLS_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"
/* MHD's hard connection limit is --max-connections plus this many: past --max-connections a new
 * connection is still accepted and the stalest waiting one is shut down (http/conns.h), so slow or
 * idle clients cannot keep others waiting in the kernel's backlog. */
#define SRV_CONN_SPARE 16
/* Answers of at most this many bytes are never refused for --max-answer-memory (problems, the
 * page's files, small results): with at most max_connections + SRV_CONN_SPARE connections, each
 * holding one answer, they hold a bounded sum (64 MiB at the default 1024 connections). */
#define SRV_SMALL_ANSWER (64UL << 10)
/* After an answer of more than this many bytes is built, or freed, the allocator's free memory
 * goes back to the system (malloc_trim): the work of a large answer (a JSON tree of millions of
 * numbers, freed in small pieces) would otherwise stay in the RSS of the worker's arena. */
#define SRV_TRIM_ANSWER (4UL << 20)

void http_limits_default(http_limits *lim)
{
    lim->max_body_bytes = 16UL << 20;
    lim->max_frames = 100000;
    lim->max_code_size = 65536;
    lim->max_sessions = 10000;
    lim->max_memory_bytes = 4UL << 30;
    lim->max_iterations = 1000;
    lim->max_solve_seconds = 30.0;
    lim->max_read_steps = 100;
    lim->max_request_bytes = 1UL << 30;
    lim->max_answer_bytes = 1UL << 30;
    lim->retry_after_s = 1;
}

/* ---- request lifecycle ------------------------------------------------------ */

static void srv_req_free(http_req *r)
{
    int i;

    for (i = 0; i < r->nargs; i++) {
        free(r->arg_key[i]);
        free(r->arg_val[i]);
    }
    free(r->path);
    free(r->body);
    free(r->resp.body);
    free(r);
}

/* A decoded copy of a query argument's raw text (srv_keep_escaped left it escaped); a text whose
 * escapes decode to a NUL byte is kept undecoded, so that it can neither be cut short nor pass
 * its route's check. NULL when out of memory. */
static char *srv_arg_decoded(const char *raw)
{
    char *s = strdup(raw);

    if (s != NULL && urlpath_decode(s) != strlen(s)) {
        free(s);
        s = strdup(raw);
    }
    return s;
}

static enum MHD_Result srv_collect_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                       const char *value)
{
    http_req *r = cls;

    (void)kind;
    if (r->nargs >= REQ_MAX_ARGS || key == NULL)
        return MHD_YES;
    r->arg_key[r->nargs] = srv_arg_decoded(key);
    r->arg_val[r->nargs] = srv_arg_decoded(value != NULL ? value : "");
    if (r->arg_key[r->nargs] == NULL || r->arg_val[r->nargs] == NULL) {
        free(r->arg_key[r->nargs]);
        free(r->arg_val[r->nargs]);
        return MHD_NO;
    }
    r->nargs++;
    return MHD_YES;
}

/* MHD's unescape callback: leave the request target and the query arguments as they came, so
 * that the path is decoded and checked here (srv_access) and an encoded NUL cannot cut it short. */
static size_t srv_keep_escaped(void *cls, struct MHD_Connection *conn, char *s)
{
    (void)cls;
    (void)conn;
    return strlen(s);
}

/* Take X-Request-Id when it is 1..63 characters of [A-Za-z0-9._:-]; else make one. */
static void srv_request_id(http_req *r)
{
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Request-Id");
    size_t i, n = h != NULL ? strlen(h) : 0;
    int ok = n > 0 && n < REQ_ID_LEN;

    for (i = 0; ok && i < n; i++) {
        if (!isalnum((unsigned char)h[i]) && strchr("._:-", h[i]) == NULL)
            ok = 0;
    }
    if (ok) {
        memcpy(r->request_id, h, n + 1);
        return;
    }
    /* (the low 32 bits of the start time in ms: a double above UINT_MAX converted
     * to unsigned directly is undefined, so through unsigned long long) */
    snprintf(r->request_id, sizeof r->request_id, "%08x-%llx",
             (unsigned)(unsigned long long)(r->srv->started * 1000.0),
             (unsigned long long)atomic_fetch_add(&r->srv->next_rid, 1));
}

/* Parse a write's If-Match (RFC 9110: "*" or one entity tag; lists are not taken): "*" is no
 * precondition; "N" (N a version: decimal digits without a leading zero) matches version N only;
 * another strong tag ("02", "abc") and any weak tag (W/"N": writes compare strongly) are
 * well-formed but never match. Returns 0, or 400 with err naming If-Match when the value is not
 * that (an unquoted N, a list, stray characters). */
static int srv_if_match(http_req *r, vbm_error *err)
{
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "If-Match");
    const unsigned char *p, *open, *close;
    unsigned long long v = 0;
    int weak = 0, digits = 1;
    size_t n;

    if (h == NULL)
        return 0;
    p = (const unsigned char *)h;
    while (*p == ' ' || *p == '\t')
        p++;
    n = strlen((const char *)p);
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    if (n == 1 && p[0] == '*')
        return 0;
    if (n >= 2 && p[0] == 'W' && p[1] == '/') {
        weak = 1;
        p += 2;
        n -= 2;
    }
    open = p;
    close = n >= 2 ? p + n - 1 : NULL;
    if (close == NULL || *open != '"' || *close != '"') {
        return resp_fail(err, 400, "If-Match",
                         "If-Match: expected * or one entity tag such as \"3\" (quoted, RFC 9110)");
    }
    for (p = open + 1; p < close; p++) {
        /* etagc: %x21 / %x23-7E / obs-text */
        if (*p < 0x21 || *p == '"' || *p == 0x7f) {
            return resp_fail(err, 400, "If-Match",
                             "If-Match: expected * or one entity tag such as \"3\" (a list, or a "
                             "character not allowed in a tag)");
        }
        if (*p < '0' || *p > '9' || v > (unsigned long long)(INT64_MAX - 9) / 10)
            digits = 0;
        else
            v = v * 10 + (unsigned long long)(*p - '0');
    }
    r->has_if_match = 1;
    r->if_match = INT64_MAX;
    if (weak)
        r->if_match_never = 2;
    else if (!digits || close == open + 1 || (open[1] == '0' && close != open + 2))
        r->if_match_never = 1;
    else
        r->if_match = (int64_t)v;
    return 0;
}

/* 1 when the Content-Type header is application/json (parameters allowed). */
static int srv_is_json(const char *ct)
{
    size_t n = strlen("application/json");

    if (ct == NULL)
        return 0;
    while (*ct == ' ')
        ct++;
    if (strncasecmp(ct, "application/json", n) != 0)
        return 0;
    ct += n;
    while (*ct == ' ')
        ct++;
    return *ct == '\0' || *ct == ';';
}

/* The connection table's entry of r's connection (NULL when untracked). */
static http_conn *srv_conn_of(http_req *r)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

    return ci != NULL ? (http_conn *)ci->socket_context : NULL;
}

/* The CORS headers of an answer (nothing without --cors-origin): Vary: Origin always; for a
 * listed Origin, Access-Control-Allow-Origin naming it (never "*") and the headers a page may
 * read; for a preflight, the methods of the path, the request headers a page may send and how
 * long a browser may keep the answer. */
static void srv_cors_headers(http_req *r, struct MHD_Response *resp)
{
    const char *origin;

    if (r->srv->cors.n == 0)
        return;
    MHD_add_response_header(resp, "Vary", "Origin");
    origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
    if (!http_cors_allowed(&r->srv->cors, origin))
        return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
    MHD_add_response_header(resp, "Access-Control-Expose-Headers",
                            "ETag, Location, Retry-After, X-Request-Id, WWW-Authenticate");
    if (r->resp.preflight) {
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", r->resp.allow);
        MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                "Authorization, Content-Type, If-Match, X-Request-Id");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    }
}

/* Answer a CORS preflight (OPTIONS with Origin and Access-Control-Request-Method, --cors-origin
 * given) of path url: 204 with the path's methods for a listed origin asking for one of them;
 * 404 for no such path; 403 naming Origin or Access-Control-Request-Method otherwise. Never asks
 * for an API key (a browser sends none with a preflight). Returns the status; err holds a
 * refusal's reason. */
static int srv_preflight(http_req *r, const char *url, const char *origin, const char *want,
                         vbm_error *err)
{
    char allow[64];
    size_t n = strlen(want);
    const char *p;
    int listed = 0;

    if (http_route_match("OPTIONS", url, r->param, allow, sizeof allow) == -1)
        return resp_fail(err, 404, NULL, "no resource at %s", r->path);
    for (p = allow; (p = strstr(p, want)) != NULL; p += n) {
        if ((p == allow || p[-1] == ' ') && (p[n] == '\0' || p[n] == ','))
            listed = 1;
    }
    if (!http_cors_allowed(&r->srv->cors, origin))
        return resp_fail(err, 403, "Origin",
                         "pages of this origin may not call this server (--cors-origin)");
    if (!listed)
        return resp_fail(err, 403, "Access-Control-Request-Method",
                         "%s is not allowed on %s (allowed: %s)", want, r->path, allow);
    r->resp.preflight = 1;
    snprintf(r->resp.allow, sizeof r->resp.allow, "%s", allow);
    return resp_empty(r);
}

/* 1 when the route changes stored state (refused to read-only keys). */
static int srv_route_writes(const http_route *rt)
{
    static const char *const writes[] = {"sessions_create", "sessions_delete", "episodes", "resize",
                                         "forget",          "memory_put",      NULL};
    int i;

    for (i = 0; writes[i] != NULL; i++) {
        if (strcmp(rt->name, writes[i]) == 0)
            return 1;
    }
    return 0;
}

/* An answer handed to MHD: its body (owned) and the bytes it counts in srv->answer_bytes until
 * MHD frees it (its client read it all, or the connection closed). */
typedef struct {
    http_server *srv;
    char *body;
    size_t len;
} srv_answer;

/* MHD's free callback of an answer's body: the bytes leave srv->answer_bytes. */
static void srv_answer_free(void *cls)
{
    srv_answer *a = cls;
    size_t len = a->len;

    atomic_fetch_sub(&a->srv->answer_bytes, (unsigned long long)len);
    free(a->body);
    free(a);
    if (len > SRV_TRIM_ANSWER)
        malloc_trim(0);
}

/* Count an answer of len bytes in srv->answer_bytes, the bytes of answers not yet read by their
 * clients. Returns 1 (counted) when force is 1 (the answer of a write, which has happened: a 503
 * would say it had not), when len is at most SRV_SMALL_ANSWER, when it fits within
 * --max-answer-memory with the answers held, or when no answer is held (a lone answer always
 * goes: --max-answer-memory never refuses an answer for good); 0 (not counted) otherwise. */
static int srv_answer_admit(http_server *srv, size_t len, int force)
{
    unsigned long long held = atomic_load(&srv->answer_bytes);
    unsigned long long cap = srv->cfg.limits.max_answer_bytes;

    do {
        if (!force && len > SRV_SMALL_ANSWER && held != 0 && (len > cap || held > cap - len))
            return 0;
    } while (!atomic_compare_exchange_weak(&srv->answer_bytes, &held, held + len));
    return 1;
}

/* Hand the response to MHD, count and log it. An answer past --max-answer-memory becomes a 503
 * with Retry-After (srv_answer_admit). */
static enum MHD_Result srv_send(http_req *r)
{
    http_server *srv = r->srv;
    struct MHD_Response *resp;
    enum MHD_Result ret;
    char retry[16];
    double dt = eng_now() - r->t_start;
    srv_answer *a;

    if (!srv_answer_admit(srv, r->resp.len,
                          r->route >= 0 && srv_route_writes(&http_routes[r->route]))) {
        size_t want = r->resp.len;
        vbm_error err;

        metrics_answer_refused(srv->metrics);
        r->resp.etag[0] = '\0';
        resp_answer(r,
                    resp_fail(&err, 503, NULL,
                              "the answer of %zu bytes would take the answers not yet read by "
                              "their clients past the %zu bytes they may hold "
                              "(--max-answer-memory; %llu held now); retry later",
                              want, srv->cfg.limits.max_answer_bytes,
                              (unsigned long long)atomic_load(&srv->answer_bytes)),
                    &err);
        r->resp.location[0] = '\0';
        atomic_fetch_add(&srv->answer_bytes, (unsigned long long)r->resp.len);
    }
    a = malloc(sizeof *a);
    if (a == NULL) {
        atomic_fetch_sub(&srv->answer_bytes, (unsigned long long)r->resp.len);
        return MHD_NO;
    }
    a->srv = srv;
    a->body = r->resp.body;
    a->len = r->resp.len;
    resp =
        MHD_create_response_from_buffer_with_free_callback_cls(a->len, a->body, srv_answer_free, a);
    if (resp == NULL) {
        atomic_fetch_sub(&srv->answer_bytes, (unsigned long long)a->len);
        free(a);
        return MHD_NO;
    }
    r->resp.body = NULL;
    if (r->resp.content_type != NULL)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r->resp.content_type);
    MHD_add_response_header(resp, "X-Request-Id", r->request_id);
    if (r->resp.etag[0] != '\0')
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, r->resp.etag);
    if (r->resp.location[0] != '\0')
        MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, r->resp.location);
    if (r->resp.allow[0] != '\0')
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->resp.allow);
    if (r->resp.retry_after > 0) {
        snprintf(retry, sizeof retry, "%d", r->resp.retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, retry);
    }
    if (r->resp.status == 401)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    srv_cors_headers(r, resp);
    if (atomic_load(&srv->stopping) || r->too_large)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    http_conns_busy(&srv->conns, srv_conn_of(r));
    ret = MHD_queue_response(r->conn, (unsigned)r->resp.status, resp);
    MHD_destroy_response(resp);
    metrics_request(srv->metrics, r->route >= 0 ? r->route : http_route_count(), r->resp.status,
                    dt);
    if (srv->log->level >= HLOG_INFO || r->resp.status >= 500)
        hlog_emit(srv->log, r->resp.status >= 500 ? HLOG_ERROR : HLOG_INFO, "request",
                  r->request_id,
                  json_pack("{s:s, s:s, s:i, s:f, s:s}", "method", r->method, "path", r->path,
                            "status", r->resp.status, "duration_ms", dt * 1000.0, "route",
                            r->route >= 0 ? http_routes[r->route].name : "unmatched"));
    atomic_store(&r->state, REQ_DONE);
    r->sent = 1;
    return ret;
}

/* Pool job: run the handler, then wake the suspended connection. r must not
 * be touched after the resume (MHD may complete and free it). */
static void srv_job(eng_job *job)
{
    http_req *r = (http_req *)job;
    struct MHD_Connection *conn = r->conn;
    vbm_error err;

    memset(&err, 0, sizeof err);
    resp_answer(r, http_routes[r->route].handler(r, &err), &err);
    if (r->resp.len > SRV_TRIM_ANSWER) /* (its work is freed: see SRV_TRIM_ANSWER) */
        malloc_trim(0);
    atomic_store(&r->state, REQ_DONE);
    MHD_resume_connection(conn);
}

/* API keys: 401 without a valid key (versioned routes; /metrics when
 * metrics_key_required), then the key's request rate (429 with the bucket's
 * Retry-After) and scope (403 on writes for a read-only key). Sets r->owner
 * and r->policy. Returns 0, or the status of the refusal with err filled. */
static int srv_authorize(http_req *r, const http_route *rt, vbm_error *err)
{
    http_server *srv = r->srv;
    int metrics = strcmp(rt->name, "metrics") == 0 && srv->cfg.metrics_key_required;
    int retry = 0;

    memset(&r->policy, 0, sizeof r->policy);
    r->policy.scope = HTTP_SCOPE_WRITE;
    if ((!rt->versioned && !metrics) || !http_auth_enabled(srv->auth))
        return 0;
    if (!http_auth_check_policy(
            srv->auth, MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization"),
            r->owner, &r->policy))
        return resp_fail(err, 401, "Authorization",
                         "a valid \"Authorization: Bearer KEY\" is required");
    if (metrics)
        return 0;
    if (!http_auth_take(srv->auth, r->policy.key, eng_now(), &retry)) {
        r->resp.retry_after = retry;
        return resp_fail(err, 429, NULL, "this API key's request rate of %g per second is used up",
                         r->policy.rps);
    }
    if (r->policy.scope == HTTP_SCOPE_READ && srv_route_writes(rt))
        return resp_fail(err, 403, "Authorization", "this API key is read-only: %s %s is a write",
                         r->method, rt->pattern);
    return 0;
}

/* Pool job shed for waiting in the queue past --queue-timeout: answer 503 + Retry-After without
 * running the handler, then wake the connection (as srv_job). */
static void srv_shed(eng_job *job)
{
    http_req *r = (http_req *)job;
    struct MHD_Connection *conn = r->conn;
    vbm_error err;

    metrics_rejected(r->srv->metrics);
    resp_answer(r,
                resp_fail(&err, 503, NULL,
                          "the request waited %.3f s for a worker, longer than the queue timeout "
                          "of %g s; retry later",
                          job->started_at - job->queued_at, r->srv->cfg.queue_timeout_s),
                &err);
    atomic_store(&r->state, REQ_DONE);
    MHD_resume_connection(conn);
}

/* First callback of a request: headers, routing, auth, early refusals. url is the decoded path,
 * url_len its length in bytes (more than strlen(url) when it holds a NUL byte). Returns 0 when
 * the route goes on, else the status of an early answer (a failure's reason in err). */
static int srv_begin(http_req *r, const char *url, size_t url_len, const char *method,
                     vbm_error *err)
{
    http_server *srv = r->srv;
    const http_route *rt;
    const char *cl, *ct;
    char allow[64];
    unsigned long long len;
    char *end;
    size_t i;
    int status;

    /* (the method as a token: a byte outside printable ASCII is shown as '?') */
    snprintf(r->method, sizeof r->method, "%s", method);
    for (i = 0; r->method[i] != '\0'; i++) {
        if ((unsigned char)r->method[i] < 0x21 || (unsigned char)r->method[i] > 0x7e
            || r->method[i] == '"' || r->method[i] == '\\')
            r->method[i] = '?';
    }
    srv_request_id(r);
    if (atomic_load(&srv->stopping))
        return resp_fail(err, 503, NULL, "the server is shutting down");
    if (url_len != strlen(url))
        return resp_fail(err, 404, "path", "no resource at %s: the path holds an encoded NUL byte",
                         r->path);
    if (!urlpath_utf8_ok(url, url_len))
        return resp_fail(err, 404, "path", "no resource at %s: the decoded path is not UTF-8",
                         r->path);
    if (srv->cors.n > 0 && strcmp(method, "OPTIONS") == 0) {
        const char *origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
        const char *want =
            MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Access-Control-Request-Method");

        if (origin != NULL && want != NULL)
            return srv_preflight(r, url, origin, want, err);
    }
    r->route = http_route_match(method, url, r->param, allow, sizeof allow);
    if (r->route == -1)
        return resp_fail(err, 404, NULL, "no resource at %s", r->path);
    if (r->route == -2) {
        r->route = -1;
        snprintf(r->resp.allow, sizeof r->resp.allow, "%s", allow);
        return resp_fail(err, 405, NULL, "%s is not allowed on %s (allowed: %s)", r->method,
                         r->path, allow);
    }
    rt = &http_routes[r->route];
    status = srv_authorize(r, rt, err);
    if (status == 0 && srv_route_writes(rt))
        status = srv_if_match(r, err);
    if (status != 0)
        return status;
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, srv_collect_arg, r);
    if (rt->needs_body) {
        ct = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        if (!srv_is_json(ct))
            return resp_fail(err, 415, "Content-Type",
                             "expected Content-Type: application/json, got %s",
                             ct != NULL ? ct : "none");
    }
    cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl != NULL) {
        errno = 0;
        len = strtoull(cl, &end, 10);
        if (errno == 0 && *end == '\0' && len > srv->cfg.limits.max_body_bytes) {
            r->too_large = 1;
            return resp_fail(err, 413, NULL, "the body has %llu bytes, the limit is %zu", len,
                             srv->cfg.limits.max_body_bytes);
        }
        if (errno == 0 && *end == '\0' && len > 0) {
            r->body = malloc((size_t)len + 1);
            if (r->body == NULL)
                return resp_fail(err, 503, NULL, "out of memory");
            r->body_cap = (size_t)len + 1;
        }
    }
    return 0;
}

/* Append upload data to the body, or drop it past the limit. */
static void srv_upload(http_req *r, const char *data, size_t n)
{
    size_t limit = r->srv->cfg.limits.max_body_bytes, cap;
    char *grown;

    if (r->too_large || atomic_load(&r->state) == REQ_DONE)
        return;
    if (r->body_len + n > limit) {
        r->too_large = 1;
        free(r->body);
        r->body = NULL;
        r->body_len = r->body_cap = 0;
        return;
    }
    if (r->body_len + n + 1 > r->body_cap) {
        cap = 2 * (r->body_len + n) + 1;
        if (cap > limit + 1)
            cap = limit + 1;
        grown = realloc(r->body, cap);
        if (grown == NULL) {
            r->too_large = 1; /* answered as 413: nothing more sensible to do */
            free(r->body);
            r->body = NULL;
            r->body_len = r->body_cap = 0;
            return;
        }
        r->body = grown;
        r->body_cap = cap;
    }
    memcpy(r->body + r->body_len, data, n);
    r->body_len += n;
    r->body[r->body_len] = '\0';
}

static enum MHD_Result srv_access(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    http_server *srv = cls;
    http_req *r = *con_cls;
    char *decoded;
    vbm_error err;
    vbm_status st;
    int early;

    (void)version;
    if (r == NULL) {
        r = calloc(1, sizeof *r);
        if (r == NULL)
            return MHD_NO;
        r->srv = srv;
        r->conn = conn;
        r->route = -1;
        r->t_start = eng_now();
        /* url is the target's path as it came (srv_keep_escaped): r->path is its escaped form
         * (problems, logs), decoded the copy that is routed */
        r->path = urlpath_escape(url != NULL ? url : "/");
        decoded = strdup(url != NULL ? url : "/");
        if (r->path == NULL || decoded == NULL) {
            free(decoded);
            free(r->path);
            free(r);
            return MHD_NO;
        }
        atomic_init(&r->state, REQ_READING);
        atomic_fetch_add(&srv->active, 1);
        *con_cls = r;
        memset(&err, 0, sizeof err);
        early = srv_begin(r, decoded, urlpath_decode(decoded), method, &err);
        free(decoded);
        if (early != 0) {
            resp_answer(r, early, &err);
            return srv_send(r);
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        srv_upload(r, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    switch (atomic_load(&r->state)) {
    case REQ_DONE: return r->sent ? MHD_YES : srv_send(r);
    case REQ_RUNNING: return MHD_YES;
    default: break;
    }
    memset(&err, 0, sizeof err);
    if (r->too_large) {
        resp_answer(r,
                    resp_fail(&err, 413, NULL, "the body exceeds the limit of %zu bytes",
                              srv->cfg.limits.max_body_bytes),
                    &err);
        return srv_send(r);
    }
    if (http_routes[r->route].inline_) {
        resp_answer(r, http_routes[r->route].handler(r, &err), &err);
        return srv_send(r);
    }
    r->job.run = srv_job;
    r->job.shed = srv_shed;
    http_conns_busy(&srv->conns, srv_conn_of(r));
    atomic_store(&r->state, REQ_RUNNING);
    MHD_suspend_connection(conn);
    st = eng_pool_submit(srv->pool, &r->job);
    if (st != VBM_OK) {
        if (st == VBM_EBUSY) {
            metrics_rejected(srv->metrics);
            resp_answer(r, resp_fail(&err, 503, NULL, "the job queue is full; retry later"), &err);
        } else {
            resp_answer(r, resp_fail(&err, 503, NULL, "the server is shutting down"), &err);
        }
        atomic_store(&r->state, REQ_DONE);
        MHD_resume_connection(conn);
    }
    return MHD_YES;
}

static void srv_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                          enum MHD_RequestTerminationCode toe)
{
    http_server *srv = cls;
    http_req *r = *con_cls;

    (void)conn;
    if (r == NULL)
        return;
    http_conns_waiting(&srv->conns, srv_conn_of(r), eng_now());
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && srv->log->level >= HLOG_DEBUG)
        hlog_emit(srv->log, HLOG_DEBUG, "request terminated early", r->request_id,
                  json_pack("{s:i}", "code", (int)toe));
    srv_req_free(r);
    *con_cls = NULL;
    atomic_fetch_sub(&srv->active, 1);
}

/* Connection opened or closed: keep the connection table (http/conns.h); an opening past
 * --max-connections shuts down the connection that has waited longest for a request. */
static void srv_notify_conn(void *cls, struct MHD_Connection *conn, void **socket_context,
                            enum MHD_ConnectionNotificationCode code)
{
    http_server *srv = cls;
    const union MHD_ConnectionInfo *ci;
    int evicted = 0;

    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context =
            ci != NULL ? http_conns_opened(&srv->conns, ci->connect_fd, eng_now(), &evicted) : NULL;
        if (evicted > 0 && srv->log->level >= HLOG_DEBUG)
            hlog_emit(srv->log, HLOG_DEBUG,
                      "connection limit: closed the stalest waiting "
                      "connection",
                      NULL, json_pack("{s:i}", "closed", evicted));
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        http_conns_closed(&srv->conns, *socket_context);
        *socket_context = NULL;
    }
}

static void srv_mhd_log(void *cls, const char *fmt, va_list ap)
{
    http_server *srv = cls;
    char msg[512];
    size_t n;

    if (vsnprintf(msg, sizeof msg, fmt, ap) < 0)
        return;
    n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    hlog_emit(srv->log, HLOG_WARN, "libmicrohttpd", NULL, json_pack("{s:s}", "detail", msg));
}

/* The store's corrupt hook (eng_store_set_corrupt_hook): a warning and the metric. */
static void srv_store_corrupt(void *ctx, const char *id, const char *msg)
{
    http_server *srv = ctx;

    metrics_corrupt(srv->metrics);
    hlog_emit(srv->log, HLOG_WARN, "corrupt stored record", NULL,
              json_pack("{s:s, s:s}", "id", id, "detail", msg));
}

/* Resolve "HOST:PORT" or "[V6]:PORT" into addr. */
static vbm_status srv_resolve(const char *listen, struct sockaddr_storage *addr, socklen_t *addrlen,
                              int *port, vbm_error *err)
{
    char host[SRV_LISTEN_LEN], *colon;
    const char *portstr;
    struct addrinfo hints, *res = NULL;
    size_t n;
    int rc;
    long p;
    char *end;

    if (listen == NULL || strlen(listen) >= sizeof host)
        return vbm_fail(err, VBM_EINVAL, "listen", "expected ADDR:PORT");
    if (listen[0] == '[') {
        colon = strstr(listen, "]:");
        if (colon == NULL)
            return vbm_fail(err, VBM_EINVAL, "listen", "expected [ADDR]:PORT, got %s", listen);
        n = (size_t)(colon - listen - 1);
        memcpy(host, listen + 1, n);
        host[n] = '\0';
        portstr = colon + 2;
    } else {
        colon = strrchr(listen, ':');
        if (colon == NULL)
            return vbm_fail(err, VBM_EINVAL, "listen", "expected ADDR:PORT, got %s", listen);
        n = (size_t)(colon - listen);
        memcpy(host, listen, n);
        host[n] = '\0';
        portstr = colon + 1;
    }
    errno = 0;
    p = strtol(portstr, &end, 10);
    if (errno != 0 || *end != '\0' || portstr[0] == '\0' || p < 0 || p > 65535)
        return vbm_fail(err, VBM_EINVAL, "listen", "bad port in %s", listen);
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    rc = getaddrinfo(host[0] != '\0' ? host : NULL, portstr, &hints, &res);
    if (rc != 0 || res == NULL)
        return vbm_fail(err, VBM_EINVAL, "listen", "cannot resolve %s: %s", host, gai_strerror(rc));
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *addrlen = res->ai_addrlen;
    *port = (int)p;
    freeaddrinfo(res);
    return VBM_OK;
}

vbm_status http_server_start(const http_server_config *cfg, eng_pool *pool, eng_store *store,
                             http_auth *auth, const hlog *log, http_server **out, vbm_error *err)
{
    struct sockaddr_storage addr;
    socklen_t addrlen = 0;
    const union MHD_DaemonInfo *info;
    struct MHD_OptionItem tls_opts[4];
    unsigned int flags;
    http_server *srv;
    vbm_status st;
    int port = 0, i;

    *out = NULL;
    memset(tls_opts, 0, sizeof tls_opts);
    for (i = 0; i < 4; i++)
        tls_opts[i].option = MHD_OPTION_END;
    if ((cfg->tls_cert_pem == NULL) != (cfg->tls_key_pem == NULL))
        return vbm_fail(err, VBM_EINVAL, "tls_key",
                        "give the TLS certificate and its key together");
    if (cfg->tls_cert_pem != NULL && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return vbm_fail(err, VBM_EINVAL, "tls_cert", "this libmicrohttpd was built without TLS");
    if (cfg->metrics_key_required && !http_auth_enabled(auth))
        return vbm_fail(err, VBM_EINVAL, "metrics_key_required",
                        "--metrics-key-required needs --api-key-file");
    st = srv_resolve(cfg->listen, &addr, &addrlen, &port, err);
    if (st != VBM_OK)
        return st;
    srv = calloc(1, sizeof *srv);
    if (srv == NULL)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    st = http_cors_parse(cfg->cors_origins, &srv->cors, err);
    if (st != VBM_OK) {
        free(srv);
        return st;
    }
    for (i = 0; i < QUOTA_STRIPES; i++)
        pthread_mutex_init(&srv->quota_locks[i], NULL);
    http_conns_init(&srv->conns, cfg->max_connections);
    srv->cfg = *cfg;
    srv->listen = strdup(cfg->listen);
    for (i = 0; i < http_route_count() && i < METRICS_MAX_ROUTES; i++)
        srv->route_names[i] = http_routes[i].name;
    srv->metrics = metrics_create(http_route_count(), srv->route_names);
    if (srv->listen == NULL || srv->metrics == NULL) {
        http_server_stop(srv);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    }
    srv->cfg.listen = srv->listen;
    srv->pool = pool;
    srv->store = store;
    srv->auth = auth;
    srv->log = log;
    srv->started = eng_wall();
    atomic_init(&srv->stopping, 0);
    atomic_init(&srv->active, 0);
    atomic_init(&srv->next_rid, 1);
    atomic_init(&srv->answer_bytes, 0);
    flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC | MHD_USE_AUTO
            | MHD_USE_ERROR_LOG;
    if (addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    if (cfg->tls_cert_pem != NULL) {
        flags |= MHD_USE_TLS;
        tls_opts[0].option = MHD_OPTION_HTTPS_MEM_CERT;
        tls_opts[0].ptr_value = (void *)cfg->tls_cert_pem;
        tls_opts[1].option = MHD_OPTION_HTTPS_MEM_KEY;
        tls_opts[1].ptr_value = (void *)cfg->tls_key_pem;
        tls_opts[2].option = MHD_OPTION_HTTPS_PRIORITIES;
        tls_opts[2].ptr_value = (void *)SRV_TLS_PRIORITIES;
    }
    if (store != NULL) /* (before any request runs; cleared by http_server_stop) */
        eng_store_set_corrupt_hook(store, srv_store_corrupt, srv);
    /* No MHD_OPTION_LISTENING_ADDRESS_REUSE: MHD's default is SO_REUSEADDR alone, so a restart
     * binds at once past connections in TIME_WAIT, while a second daemon on a served port fails
     * to bind (SO_REUSEPORT would let the kernel split connections between the two). */
    srv->daemon = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, srv_access, srv, MHD_OPTION_EXTERNAL_LOGGER, srv_mhd_log,
        srv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED,
        srv_completed, srv, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned int)cfg->max_connections + SRV_CONN_SPARE, MHD_OPTION_NOTIFY_CONNECTION,
        srv_notify_conn, srv, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned int)cfg->connection_timeout_s, MHD_OPTION_UNESCAPE_CALLBACK, srv_keep_escaped,
        srv, MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_END);
    if (srv->daemon == NULL) {
        http_server_stop(srv);
        return vbm_fail(err, VBM_EBUSY, "listen", "cannot listen on %s (address in use%s?)",
                        cfg->listen,
                        cfg->tls_cert_pem != NULL ? ", or the TLS certificate refused" : "");
    }
    info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info != NULL ? info->port : port;
    *out = srv;
    return VBM_OK;
}

int http_server_port(http_server *srv)
{
    return srv->port;
}

void http_server_begin_shutdown(http_server *srv)
{
    MHD_socket fd;

    atomic_store(&srv->stopping, 1);
    if (srv->daemon == NULL)
        return;
    /* MHD stops polling the listening socket and hands it back: close it so
     * that the kernel refuses new connections at once. */
    fd = MHD_quiesce_daemon(srv->daemon);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

vbm_status http_server_wait_idle(http_server *srv, double seconds)
{
    double deadline = eng_now() + seconds;
    struct timespec ts = {0, 5000000L};

    while (atomic_load(&srv->active) > 0) {
        if (eng_now() >= deadline)
            return VBM_EBUSY;
        nanosleep(&ts, NULL);
    }
    return VBM_OK;
}

void http_server_stop(http_server *srv)
{
    int i;

    if (srv == NULL)
        return;
    if (srv->daemon != NULL)
        MHD_stop_daemon(srv->daemon);
    if (srv->store != NULL)
        eng_store_set_corrupt_hook(srv->store, NULL, NULL);
    for (i = 0; i < QUOTA_STRIPES; i++)
        pthread_mutex_destroy(&srv->quota_locks[i]);
    http_conns_destroy(&srv->conns);
    metrics_free(srv->metrics);
    free(srv->listen);
    free(srv);
}

void http_server_print_routes(FILE *out)
{
    int i;

    for (i = 0; http_routes[i].method != NULL; i++)
        fprintf(out, "%s %s\n", http_routes[i].method, http_routes[i].pattern);
}
