/* routes_system.c -- owns the handlers of /healthz, /readyz and /metrics. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/request.h"
#include "http/respond.h"

int route_healthz(http_req *r, vbm_error *err)
{
    return resp_json(r, 200, json_pack("{s:s}", "status", "ok"), err);
}

/* 1 when every model file loaded and the default model (if any) is hosted;
 * otherwise 0 with the reason in why (VBM_EUNAVAIL, no field). *n receives the
 * number of models. */
static int sys_models_ready(const http_server *srv, int *n, vbm_error *why)
{
    eng_model_set *set;
    const char *dflt;
    int i, found = 0, ok = 1;

    *n = 0;
    if (srv->cfg.models == NULL)
        return 1;
    set = eng_models_snapshot(srv->cfg.models);
    dflt = eng_models_default_name(srv->cfg.models);
    for (i = 0; i < set->n; i++)
        found |= strcmp(set->models[i]->name, dflt) == 0;
    *n = set->n;
    if (set->n_failed > 0) {
        vbm_fail(why, VBM_EUNAVAIL, NULL, "%d model file(s) failed to load; %.100s: %.300s",
                 set->n_failed, set->failed[0].file, set->failed[0].msg);
        ok = 0;
    } else if (dflt[0] != '\0' && !found) {
        vbm_fail(why, VBM_EUNAVAIL, NULL,
                 "the default model \"%s\" is not in the models directory %.300s", dflt,
                 eng_models_dir(srv->cfg.models)[0] != '\0' ? eng_models_dir(srv->cfg.models)
                                                            : "(none)");
        ok = 0;
    }
    eng_model_set_release(set);
    return ok;
}

int route_readyz(http_req *r, vbm_error *err)
{
    http_server *srv = r->srv;
    vbm_error why;
    int queued = 0, depth = 0, nmodels = 0;

    eng_pool_stats(srv->pool, &queued, NULL, &depth);
    if (atomic_load(&srv->stopping))
        return resp_fail(err, 503, NULL, "not ready: the server is shutting down");
    if (queued >= depth)
        return resp_fail(err, 503, NULL, "not ready: the job queue is saturated (%d of %d)", queued,
                         depth);
    {
        vbm_error e;
        e.msg[0] = '\0';
        if (eng_store_ready(srv->store, &e) != VBM_OK)
            return resp_fail(err, 503, NULL, "not ready: the session store is unavailable: %s",
                             e.msg);
    }
    if (!sys_models_ready(srv, &nmodels, &why))
        return resp_fail(err, 503, NULL, "not ready: %s", why.msg);
    return resp_json(r, 200,
                     json_pack("{s:s, s:{s:b, s:b, s:i, s:i, s:i}}", "status", "ready", "checks",
                               "store_open", 1, "models_loaded", 1, "models", nmodels,
                               "queue_depth", queued, "queue_capacity", depth),
                     err);
}

int route_metrics(http_req *r, vbm_error *err)
{
    http_server *srv = r->srv;
    metrics_gauges g;
    size_t len = 0;
    char *text;

    memset(&g, 0, sizeof g);
    eng_pool_stats(srv->pool, &g.queue_depth, &g.jobs_in_flight, &g.queue_capacity);
    eng_store_stats(srv->store, &g.sessions, &g.memory_bytes);
    g.scratch_bytes = eng_pool_scratch_bytes(srv->pool);
    g.api_keys = http_auth_count(srv->auth);
    g.answer_bytes = atomic_load(&srv->answer_bytes);
    g.answer_bytes_limit = srv->cfg.limits.max_answer_bytes;
    text = metrics_render(srv->metrics, &g, &len);
    if (text == NULL)
        return resp_fail(err, 503, NULL, "out of memory rendering the metrics");
    return resp_take_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}
