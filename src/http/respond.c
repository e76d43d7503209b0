/* respond.c -- owns the response side of a request: the resource a handler sets, and the one
 * funnel (resp_answer) that turns a status and an error record into the HTTP answer, the only
 * writer of problem documents; with the request's readers the handlers share (query arguments,
 * the body as a JSON object, the session of the path). */
#define _GNU_SOURCE /* strdup, vsnprintf */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/codec.h"
#include "http/respond.h"

double req_answer_bytes(double n, int base64)
{
    return n * (base64 ? REQ_B64_NUMBER_BYTES : REQ_JSON_NUMBER_BYTES);
}

const char *req_arg(const http_req *r, const char *key)
{
    int i;

    for (i = 0; i < r->nargs; i++) {
        if (strcmp(r->arg_key[i], key) == 0)
            return r->arg_val[i];
    }
    return NULL;
}

/* Replace the response body. */
static void resp_set_body(http_req *r, int status, const char *type, char *body, size_t len)
{
    free(r->resp.body);
    r->resp.status = status;
    r->resp.content_type = type;
    r->resp.body = body;
    r->resp.len = len;
}

/* A fixed problem used when even building the problem ran out of memory. */
static void resp_oom(http_req *r)
{
    static const char text[] = "{\"type\":\"urn:vbmem:problem:unavailable\",\"title\":\"Service "
                               "unavailable\",\"status\":503,\"detail\":\"out of memory\"}";
    char *copy = strdup(text);

    resp_set_body(r, 503, "application/problem+json", copy, copy != NULL ? strlen(copy) : 0);
    r->resp.retry_after = r->srv->cfg.limits.retry_after_s;
}

int resp_status_of(vbm_status st)
{
    switch (st) {
    case VBM_OK: return 200;
    case VBM_EINVAL:
    case VBM_ENUMERIC:
    case VBM_EFORMAT: return 422;
    case VBM_ENOTFOUND: return 404;
    case VBM_ECONFLICT: return 409;
    case VBM_ELIMIT: return 429;
    case VBM_ECORRUPT: return 500;
    default: return 503;
    }
}

int resp_fail(vbm_error *err, int http, const char *field, const char *fmt, ...)
{
    va_list ap;

    switch (http) {
    case 404: err->status = VBM_ENOTFOUND; break;
    case 409: err->status = VBM_ECONFLICT; break;
    case 429: err->status = VBM_ELIMIT; break;
    case 503: err->status = VBM_EUNAVAIL; break;
    default: err->status = VBM_EINVAL; break;
    }
    snprintf(err->field, sizeof err->field, "%s", field != NULL ? field : "");
    va_start(ap, fmt);
    if (vsnprintf(err->msg, sizeof err->msg, fmt, ap) < 0)
        err->msg[0] = '\0';
    va_end(ap);
    return http;
}

/* Problem type slug and title of a status. */
static void resp_problem_kind(int status, const char **slug, const char **title)
{
    switch (status) {
    case 400:
        *slug = "malformed-request";
        *title = "Malformed request";
        break;
    case 401:
        *slug = "unauthorized";
        *title = "Missing or unknown API key";
        break;
    case 403:
        *slug = "forbidden";
        *title = "Not allowed";
        break;
    case 404:
        *slug = "not-found";
        *title = "Not found";
        break;
    case 405:
        *slug = "method-not-allowed";
        *title = "Method not allowed";
        break;
    case 409:
        *slug = "version-conflict";
        *title = "Version conflict";
        break;
    case 413:
        *slug = "body-too-large";
        *title = "Request body too large";
        break;
    case 415:
        *slug = "unsupported-media-type";
        *title = "Unsupported media type";
        break;
    case 422:
        *slug = "invalid-request";
        *title = "Invalid request";
        break;
    case 429:
        *slug = "limit-reached";
        *title = "Limit reached";
        break;
    case 503:
        *slug = "unavailable";
        *title = "Service unavailable";
        break;
    default:
        *slug = "internal";
        *title = "Internal error";
        break;
    }
}

/* Write the problem document of status (type slug and title) with the given field and
 * detail (prefixed with "field: " where it does not start so): the one place a problem is
 * written. */
static void resp_problem(http_req *r, int status, const char *slug, const char *title,
                         const char *field, const char *detail_in)
{
    char detail[VBM_MSG_LEN], type[64];
    json_t *o, *d;
    char *text;

    /* the error record's invariant on the wire too: a detail starts with its field */
    size_t flen = field != NULL ? strlen(field) : 0;
    if (flen > 0
        && !(strncmp(detail_in, field, flen) == 0 && strncmp(detail_in + flen, ": ", 2) == 0))
        snprintf(detail, sizeof detail, "%s: %s", field, detail_in);
    else
        snprintf(detail, sizeof detail, "%s", detail_in);
    snprintf(type, sizeof type, "urn:vbmem:problem:%s", slug);
    d = json_string(detail);
    if (d == NULL) { /* not valid UTF-8 (echoed input): keep ASCII only */
        size_t i;

        for (i = 0; detail[i] != '\0'; i++) {
            if ((unsigned char)detail[i] >= 0x80)
                detail[i] = '?';
        }
        d = json_string(detail);
    }
    o = json_pack("{s:s, s:s, s:i, s:o, s:s, s:s}", "type", type, "title", title, "status", status,
                  "detail", d != NULL ? d : json_string(""), "instance", r->path, "request_id",
                  r->request_id);
    if (o != NULL && field != NULL && field[0] != '\0') {
        json_t *f = json_string(field);

        json_object_set_new(o, "field", f != NULL ? f : json_string("?"));
    }
    if (o == NULL) {
        resp_oom(r);
        return;
    }
    text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (text == NULL) {
        resp_oom(r);
        return;
    }
    resp_set_body(r, status, "application/problem+json", text, strlen(text));
    if ((status == 429 || status == 503) && r->resp.retry_after <= 0)
        r->resp.retry_after = r->srv->cfg.limits.retry_after_s;
}

/* The 409 answer of a write whose If-Match does not match session r->param, or, without
 * If-Match, that another replica committed first: the detail says why (a weak tag, a tag that
 * names no version, another replica's write, err's message, or else the current version; the
 * field is If-Match only when one was sent),
 * the ETag names the session's current version when it can still be looked up (else the one
 * resp_conflict saw, when one was given). */
static void resp_conflict_answer(http_req *r, const vbm_error *err)
{
    eng_session *s =
        eng_id_ok(r->param) ? eng_store_lookup(r->srv->store, r->param, r->owner) : NULL;
    unsigned long long now = r->resp.etag[0] == '"' ? strtoull(r->resp.etag + 1, NULL, 10) : 0;
    char detail[VBM_MSG_LEN + 128];
    const char *slug, *title;

    resp_problem_kind(409, &slug, &title);
    if (s != NULL) {
        now = (unsigned long long)eng_session_version(s);
        resp_etag(r, now);
    }
    eng_session_unref(s);
    if (r->if_match_never == 2)
        snprintf(detail, sizeof detail,
                 "If-Match: a weak entity tag never matches a write (RFC 9110 strong "
                 "comparison); the session is at version %llu",
                 now);
    else if (r->if_match_never)
        snprintf(detail, sizeof detail,
                 "If-Match: the entity tag names no version; the session is at version %llu", now);
    else if (!r->has_if_match) /* no If-Match sent: another replica wrote the session first */
        snprintf(detail, sizeof detail,
                 "another replica wrote the session while this write ran (%s); nothing was "
                 "written: send it again",
                 err->msg[0] != '\0' ? err->msg : "the session changed");
    else if (err->msg[0] != '\0')
        snprintf(detail, sizeof detail, "%s", err->msg);
    else
        snprintf(detail, sizeof detail, "the session is at version %llu", now);
    resp_problem(r, 409, slug, title, r->has_if_match || r->if_match_never ? "If-Match" : NULL,
                 detail);
}

void resp_answer(http_req *r, int status, const vbm_error *err)
{
    const char *slug, *title;

    if (status < 400) {
        if (r->resp.status == 0) {
            resp_problem_kind(500, &slug, &title);
            resp_problem(r, 500, slug, title, NULL, "the handler produced no response");
        }
        return;
    }
    if (status == 409) {
        resp_conflict_answer(r, err);
        return;
    }
    if (status == 500 && err->status == VBM_ECORRUPT) {
        /* not the request's fault, and no retry mends it: 500 with a type of its own */
        resp_problem(r, 500, "corrupt-record", "Stored record corrupt", NULL, err->msg);
        return;
    }
    if (status == 503 && err->status == VBM_EUNKNOWN) {
        /* the store may hold the write: a client retries it only with If-Match */
        resp_problem(r, 503, "outcome-unknown", "Write outcome unknown", err->field, err->msg);
        return;
    }
    resp_problem_kind(status, &slug, &title);
    resp_problem(r, status, slug, title, err->field, err->msg);
}

int resp_json(http_req *r, int status, json_t *v, vbm_error *err)
{
    char *text;

    if (v == NULL)
        return resp_fail(err, 503, NULL, "out of memory");
    text = json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(v);
    if (text == NULL)
        return resp_fail(err, 503, NULL, "out of memory");
    resp_set_body(r, status, "application/json", text, strlen(text));
    return status;
}

int resp_text(http_req *r, int status, const char *content_type, const char *text, size_t len,
              vbm_error *err)
{
    char *copy = malloc(len + 1);

    if (copy == NULL)
        return resp_fail(err, 503, NULL, "out of memory");
    memcpy(copy, text, len);
    copy[len] = '\0';
    resp_set_body(r, status, content_type, copy, len);
    return status;
}

int resp_take_text(http_req *r, int status, const char *content_type, char *body, size_t len)
{
    resp_set_body(r, status, content_type, body, len);
    return status;
}

int resp_empty(http_req *r)
{
    resp_set_body(r, 204, NULL, NULL, 0);
    return 204;
}

void resp_etag(http_req *r, uint64_t version)
{
    snprintf(r->resp.etag, sizeof r->resp.etag, "\"%llu\"", (unsigned long long)version);
}

int resp_body_object(http_req *r, json_t **out, vbm_error *err)
{
    json_error_t jerr;
    json_t *v;

    *out = NULL;
    if (r->body_len == 0)
        return resp_fail(err, 400, NULL, "the request body is empty; expected a JSON object");
    wire_parse(r->body, r->body_len, JSON_REJECT_DUPLICATES, &v, &jerr);
    if (v == NULL) {
        if (json_error_code(&jerr) == json_error_out_of_memory)
            return resp_fail(err, 503, NULL, "out of memory");
        return resp_fail(err, 400, NULL, "malformed JSON at line %d, column %d: %s", jerr.line,
                         jerr.column, jerr.text);
    }
    if (!json_is_object(v)) {
        json_decref(v);
        return resp_fail(err, 400, NULL, "the request body must be a JSON object");
    }
    *out = v;
    return 0;
}

int resp_conflict(http_req *r, uint64_t at_version, vbm_error *err)
{
    resp_etag(r, at_version);
    return resp_fail(err, 409, "If-Match", "%s", ""); /* the funnel words it */
}

int resp_session_id(const http_req *r, vbm_error *err)
{
    if (eng_id_ok(r->param))
        return 0;
    /* names no session: nothing is looked up */
    return resp_fail(err, 404, "id", "no session %s: a session id is %d lowercase hex characters",
                     r->param, ENG_ID_LEN);
}

int resp_session(http_req *r, eng_session **s, vbm_error *err)
{
    vbm_status st;

    *s = NULL;
    if (resp_session_id(r, err) != 0)
        return 404;
    st = eng_store_get(r->srv->store, r->param, r->owner, s, err);
    if (st == VBM_ENOTFOUND)
        return resp_fail(err, 404, NULL, "no session %s", r->param);
    if (st != VBM_OK) {
        *s = NULL;
        return resp_status_of(st);
    }
    eng_session_touch(*s);
    return 0;
}
