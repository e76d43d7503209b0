/* parse.h -- owns the parsing of request bodies into jansson trees (wire_parse). */
#ifndef VBMEM_WIRE_PARSE_H
#define VBMEM_WIRE_PARSE_H

#include <stddef.h>

#include <jansson.h>

#define WIRE_FAST_STRING 1024

/* Parse a request body as JSON (jansson flags as json_loadb) into *out (owned by
 * the caller). Same result as json_loadb; faster for bodies carrying long base64
 * strings. Returns 0, or -1 with *out NULL and *jerr filled by jansson
 * (malformed JSON, out of memory). */
int wire_parse(const char *body, size_t len, size_t flags, json_t **out, json_error_t *jerr);

#endif
