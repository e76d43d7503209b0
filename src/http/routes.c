/* routes.c -- owns the route table of vbmemd and path matching. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <string.h>

#include "http/request.h"

const http_route http_routes[] = {
    {"GET", "/", route_web_index, ROUTE_INLINE, ROUTE_NO_BODY, ROUTE_UNVERSIONED, "ui_index"},
    {"GET", "/ui/{file}", route_web_asset, ROUTE_INLINE, ROUTE_NO_BODY, ROUTE_UNVERSIONED,
     "ui_asset"},
    {"GET", "/openapi.yaml", route_web_openapi, ROUTE_INLINE, ROUTE_NO_BODY, ROUTE_UNVERSIONED,
     "openapi"},
    {"GET", "/healthz", route_healthz, ROUTE_INLINE, ROUTE_NO_BODY, ROUTE_UNVERSIONED, "healthz"},
    {"GET", "/readyz", route_readyz, ROUTE_INLINE, ROUTE_NO_BODY, ROUTE_UNVERSIONED, "readyz"},
    {"GET", "/metrics", route_metrics, ROUTE_INLINE, ROUTE_NO_BODY, ROUTE_UNVERSIONED, "metrics"},
    {"GET", "/v1/models", route_models_list, ROUTE_INLINE, ROUTE_NO_BODY, ROUTE_V1, "models_list"},
    {"GET", "/v1/models/{name}", route_models_get, ROUTE_INLINE, ROUTE_NO_BODY, ROUTE_V1,
     "models_get"},
    {"POST", "/v1/models/{name}/encode", route_models_encode, ROUTE_POOL, ROUTE_JSON_BODY, ROUTE_V1,
     "models_encode"},
    {"POST", "/v1/models/{name}/decode", route_models_decode, ROUTE_POOL, ROUTE_JSON_BODY, ROUTE_V1,
     "models_decode"},
    {"POST", "/v1/models/{name}/infer", route_models_infer, ROUTE_POOL, ROUTE_JSON_BODY, ROUTE_V1,
     "models_infer"},
    {"POST", "/v1/sessions", route_sessions_create, ROUTE_POOL, ROUTE_JSON_BODY, ROUTE_V1,
     "sessions_create"},
    {"GET", "/v1/sessions", route_sessions_list, ROUTE_POOL, ROUTE_NO_BODY, ROUTE_V1,
     "sessions_list"},
    {"GET", "/v1/sessions/{id}", route_sessions_get, ROUTE_POOL, ROUTE_NO_BODY, ROUTE_V1,
     "sessions_get"},
    {"DELETE", "/v1/sessions/{id}", route_sessions_delete, ROUTE_POOL, ROUTE_NO_BODY, ROUTE_V1,
     "sessions_delete"},
    {"POST", "/v1/sessions/{id}/episodes", route_episodes, ROUTE_POOL, ROUTE_JSON_BODY, ROUTE_V1,
     "episodes"},
    {"POST", "/v1/sessions/{id}/resize", route_resize, ROUTE_POOL, ROUTE_JSON_BODY, ROUTE_V1,
     "resize"},
    {"POST", "/v1/sessions/{id}/forget", route_forget, ROUTE_POOL, ROUTE_JSON_BODY, ROUTE_V1,
     "forget"},
    {"POST", "/v1/sessions/{id}/samples", route_samples, ROUTE_POOL, ROUTE_JSON_BODY, ROUTE_V1,
     "samples"},
    {"POST", "/v1/sessions/{id}/reads", route_reads, ROUTE_POOL, ROUTE_JSON_BODY, ROUTE_V1,
     "reads"},
    {"GET", "/v1/sessions/{id}/memory", route_memory_get, ROUTE_POOL, ROUTE_NO_BODY, ROUTE_V1,
     "memory_get"},
    {"PUT", "/v1/sessions/{id}/memory", route_memory_put, ROUTE_POOL, ROUTE_JSON_BODY, ROUTE_V1,
     "memory_put"},
    {"GET", "/v1/sessions/{id}/clusters", route_clusters, ROUTE_POOL, ROUTE_NO_BODY, ROUTE_V1,
     "clusters"},
    {"POST", "/v1/sessions/{id}/infer", route_temporal_infer, ROUTE_POOL, ROUTE_JSON_BODY, ROUTE_V1,
     "temporal_infer"},
    {"POST", "/v1/sessions/{id}/continue", route_temporal_continue, ROUTE_POOL, ROUTE_JSON_BODY,
     ROUTE_V1, "temporal_continue"},
    {NULL, NULL, NULL, ROUTE_POOL, ROUTE_NO_BODY, ROUTE_UNVERSIONED, NULL}};

int http_route_count(void)
{
    int n = 0;

    while (http_routes[n].method != NULL)
        n++;
    return n;
}

/* 1 when path matches pattern; the "{...}" segment is copied into param. */
static int route_path_matches(const char *pattern, const char *path, char param[REQ_PARAM_LEN])
{
    const char *p = pattern, *s = path, *end;
    size_t n;

    while (*p != '\0') {
        if (*p == '{') {
            end = strchr(s, '/');
            n = end != NULL ? (size_t)(end - s) : strlen(s);
            if (n == 0 || n >= REQ_PARAM_LEN)
                return 0;
            memcpy(param, s, n);
            param[n] = '\0';
            s += n;
            p = strchr(p, '}');
            if (p == NULL)
                return 0;
            p++;
            continue;
        }
        if (*p != *s)
            return 0;
        p++;
        s++;
    }
    return *s == '\0';
}

int http_route_match(const char *method, const char *path, char param[REQ_PARAM_LEN], char *allow,
                     size_t allow_len)
{
    char scratch[REQ_PARAM_LEN];
    size_t used = 0;
    int i, path_hit = 0;

    if (allow_len > 0)
        allow[0] = '\0';
    for (i = 0; http_routes[i].method != NULL; i++) {
        if (!route_path_matches(http_routes[i].pattern, path, scratch))
            continue;
        if (strcmp(http_routes[i].method, method) == 0) {
            memcpy(param, scratch, sizeof scratch);
            return i;
        }
        path_hit = 1;
        if (allow_len > used) {
            int n = snprintf(allow + used, allow_len - used, "%s%s", used > 0 ? ", " : "",
                             http_routes[i].method);
            if (n > 0)
                used += (size_t)n;
            if (used >= allow_len)
                used = allow_len - 1;
        }
    }
    return path_hit ? -2 : -1;
}
