/* routes_temporal.h -- owns the entry points of the HTTP handlers of temporal sessions
 * (routes_temporal.c), called by the route table and by routes_sessions.c. */
#ifndef VBMEM_HTTP_ROUTES_TEMPORAL_H
#define VBMEM_HTTP_ROUTES_TEMPORAL_H

#include <jansson.h>

#include "engine/session.h"
#include "http/request.h"

/* 1 when a session-creation body asks for a temporal session (memory.kind "temporal"). */
int route_temporal_requested(const json_t *body);

/* POST /v1/sessions for a temporal session; takes body (a new reference) and returns 201, or
 * the status of the failure with err filled (422 naming the member for a bad configuration). */
int route_temporal_create(http_req *r, json_t *body, vbm_error *err);

/* POST .../episodes, .../samples and PUT .../memory on the temporal session s: take body, return
 * the status as a handler does (s stays the caller's). GET .../memory likewise without a body. */
int route_temporal_episodes(http_req *r, eng_session *s, json_t *body, vbm_error *err);
int route_temporal_samples(http_req *r, eng_session *s, json_t *body, vbm_error *err);
int route_temporal_memory_get(http_req *r, eng_session *s, vbm_error *err);
int route_temporal_memory_put(http_req *r, eng_session *s, json_t *body, vbm_error *err);

#endif
