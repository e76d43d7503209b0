/* routes_web.c -- owns the handlers of the web page: GET / (index.html), GET /ui/{file} (its
 * script, style sheet, JS client, the shipped Fashion-MNIST episode and the rendered API
 * reference api.html) and GET /openapi.yaml (the API's specification), served from the files
 * compiled into the binary (http/assets.h). No API key: the page itself asks for one. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <string.h>

#include "http/assets.h"
#include "http/request.h"
#include "http/respond.h"

const http_asset *http_asset_find(const char *name)
{
    int i;

    for (i = 0; http_assets[i].name != NULL; i++)
        if (strcmp(http_assets[i].name, name) == 0)
            return &http_assets[i];
    return NULL;
}

static int web_send(http_req *r, const char *name, vbm_error *err)
{
    const http_asset *a = http_asset_find(name);
    int status;

    if (a == NULL)
        return resp_fail(err, 404, NULL, "no such file of the web page: %s", name);
    status = resp_text(r, 200, a->content_type, (const char *)a->data, a->len, err);
    if (status == 200)
        snprintf(r->resp.etag, sizeof r->resp.etag, "%s", a->etag);
    return status;
}

int route_web_index(http_req *r, vbm_error *err)
{
    return web_send(r, "index.html", err);
}

int route_web_asset(http_req *r, vbm_error *err)
{
    return web_send(r, r->param, err);
}

int route_web_openapi(http_req *r, vbm_error *err)
{
    return web_send(r, "openapi.yaml", err);
}
