/* respond.h -- owns the response side of a request: the answer a handler builds (JSON, text,
 * ETag) and the one funnel that turns a handler's status and error record into the HTTP answer
 * (application/problem+json for every failure). */
#ifndef VBMEM_HTTP_RESPOND_H
#define VBMEM_HTTP_RESPOND_H

#include <stdint.h>

#include <jansson.h>

#include "engine/session.h"
#include "http/request.h"

/* The conventions of the HTTP layer (docs/design/errors.md):
 * - a handler (http_route.handler) returns the HTTP status of its answer: a 2xx after it set
 *   the resource with resp_json, resp_text or resp_empty, or a status >= 400 after it filled
 *   err (field and message);
 * - a fallible helper of the handlers returns 0, or the HTTP status of its failure with err
 *   filled;
 * - resp_answer (the funnel) alone writes a problem document. */

/* The HTTP status of an engine failure: VBM_EINVAL, VBM_ENUMERIC, VBM_EFORMAT 422,
 * VBM_ENOTFOUND 404, VBM_ECONFLICT 409, VBM_ELIMIT 429, VBM_ECORRUPT 500, the others 503
 * (VBM_OK: 200). Never fails. */
int resp_status_of(vbm_status st);

/* Fill err with a failure of HTTP status http at field (NULL or "": none) whose detail is the
 * printf-style message as written (not prefixed with the field), and return http. err->status
 * is the engine status of the same meaning (404 VBM_ENOTFOUND, 409 VBM_ECONFLICT, 429
 * VBM_ELIMIT, 503 VBM_EUNAVAIL, otherwise VBM_EINVAL). Never fails. */
int resp_fail(vbm_error *err, int http, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The funnel: turn the handler's status and err into r's answer. status < 400 keeps the
 * resource the handler set (none set: a 500 problem). status >= 400 sets a problem document
 * (RFC 9457: type, title, status, detail, instance, request_id, field when err has one); 409
 * answers name If-Match and carry the session's current version as ETag; a 500 of
 * VBM_ECORRUPT has the type corrupt-record; 429 and 503 get Retry-After (the handler's own
 * r->resp.retry_after when it set one). Never fails (out of memory: a fixed 503). */
void resp_answer(http_req *r, int status, const vbm_error *err);

/* Set the resource to the JSON value v (stolen) and return status; NULL v (out of memory)
 * or a failure to serialize returns 503 with err filled. */
int resp_json(http_req *r, int status, json_t *v, vbm_error *err);

/* Set the resource to a copy of text of the given content type and return status; 503 with
 * err filled when out of memory. */
int resp_text(http_req *r, int status, const char *content_type, const char *text, size_t len,
              vbm_error *err);

/* Set the resource to the text body (malloc'd, stolen) of the given content type and return
 * status. Never fails. */
int resp_take_text(http_req *r, int status, const char *content_type, char *body, size_t len);

/* An answer without a body (204 No Content): returns 204. Never fails. */
int resp_empty(http_req *r);

/* Set the ETag header to the quoted version. */
void resp_etag(http_req *r, uint64_t version);

/* Parse the request body as a JSON object into *out (new reference). Returns 0, or 400
 * (empty, malformed, not an object) or 503 (out of memory) with err filled. */
int resp_body_object(http_req *r, json_t **out, vbm_error *err);

/* The session named by the path parameter and visible to the caller's owner, as a new
 * reference (eng_session_unref) in *s, touched for the LRU. Returns 0, or 404 (field id when
 * the parameter is no session id) or the store's failure status (503 busy or unavailable,
 * 500 corrupt record) with err filled; *s is then NULL. */
int resp_session(http_req *r, eng_session **s, vbm_error *err);

/* 0 when the path parameter has the form of a session id; otherwise 404 with err filled
 * (field id). */
int resp_session_id(const http_req *r, vbm_error *err);

/* A 409 for a write whose If-Match does not match the session at version at_version (the
 * funnel names the current version as ETag): fills err and returns 409. */
int resp_conflict(http_req *r, uint64_t at_version, vbm_error *err);

#endif
