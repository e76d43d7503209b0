/* routes_system.c -- owns the handlers of /healthz, /readyz, /metrics and /v1/models (no hosted models yet: latent sessions only). */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#include "http/request.h"

void route_healthz(http_req *r)
{
    req_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

void route_readyz(http_req *r)
{
    http_server *srv = r->srv;
    int queued = 0, depth = 0;

    eng_pool_stats(srv->pool, &queued, NULL, &depth);
    if (atomic_load(&srv->stopping)) {
        req_problem(r, 503, NULL, "not ready: the server is shutting down");
        return;
    }
    if (queued >= depth) {
        req_problem(r, 503, NULL, "not ready: the job queue is saturated (%d of %d)", queued,
                    depth);
        return;
    }
    req_json(r, 200,
             json_pack("{s:s, s:{s:b, s:b, s:i, s:i}}", "status", "ready", "checks", "store_open",
                       1, "models_loaded", 1, "queue_depth", queued, "queue_capacity", depth));
}

void route_metrics(http_req *r)
{
    http_server *srv = r->srv;
    metrics_gauges g;
    size_t len = 0;
    char *text;

    memset(&g, 0, sizeof g);
    eng_pool_stats(srv->pool, &g.queue_depth, &g.jobs_in_flight, &g.queue_capacity);
    eng_store_stats(srv->store, &g.sessions, &g.memory_bytes);
    g.api_keys = http_auth_count(srv->auth);
    text = metrics_render(srv->metrics, &g, &len);
    if (text == NULL) {
        req_problem(r, 503, NULL, "out of memory rendering the metrics");
        return;
    }
    free(r->resp.body);
    r->resp.status = 200;
    r->resp.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r->resp.body = text;
    r->resp.len = len;
}

void route_models_list(http_req *r)
{
    req_json(r, 200, json_pack("{s:[]}", "models"));
}

void route_models_get(http_req *r)
{
    req_problem(r, 404, "name",
                "no model named \"%s\" is hosted (create a latent session with \"code_size\")",
                r->param);
}
