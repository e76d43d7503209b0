/* assets.h -- owns the table of the web page's files compiled into vbmemd (generated from web/ by
 * web/embed.py at build time) and their lookup; routes_web.c serves them. */
#ifndef VBMEM_HTTP_ASSETS_H
#define VBMEM_HTTP_ASSETS_H

#include <stddef.h>

typedef struct {
    const char *name;         /* file name, e.g. "app.js" */
    const char *content_type; /* e.g. "text/javascript; charset=utf-8" */
    const unsigned char *data;
    size_t len;
    const char *etag; /* quoted, e.g. "\"0123456789abcdef\"" */
} http_asset;

/* The embedded files, terminated by a zeroed entry (web_assets.c, generated). */
extern const http_asset http_assets[];

/* The asset called name, or NULL. */
const http_asset *http_asset_find(const char *name);

#endif
