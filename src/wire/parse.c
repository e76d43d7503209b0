/* parse.c -- owns the parsing of request bodies into jansson trees (wire_parse). */
#define _GNU_SOURCE /* memmem */

#include "wire/parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- request bodies ------------------------------------------------------- */

/* 1 for the characters of standard base64 (with padding), 0 otherwise. */
static const unsigned char parse_b64_alphabet[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0,
    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0,
    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

typedef struct {
    size_t off, len; /* a long base64 string's characters in the original body */
} parse_span;

/* Put the long strings back: every string "\u0001#K" of the parsed tree becomes
 * span K of the body (ASCII, so no UTF-8 check is needed). */
static int parse_restore(json_t *v, const char *body, const parse_span *spans, size_t nspans)
{
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (s[0] == '\x01' && s[1] == '#') {
            size_t k = (size_t)strtoul(s + 2, NULL, 10);
            if (k < nspans && json_string_setn_nocheck(v, body + spans[k].off, spans[k].len) != 0)
                return -1;
        }
        return 0;
    }
    if (json_is_object(v)) {
        const char *key;
        json_t *e;
        json_object_foreach(v, key, e) {
            if (parse_restore(e, body, spans, nspans) != 0)
                return -1;
        }
        return 0;
    }
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            if (!json_is_number(e) && parse_restore(e, body, spans, nspans) != 0)
                return -1;
        }
    }
    return 0;
}

int wire_parse(const char *body, size_t len, size_t flags, json_t **out, json_error_t *jerr)
{
    parse_span *spans = NULL;
    size_t nspans = 0, cap = 0, i = 0, o = 0;
    char *copy = NULL;
    json_t *v;

    /* The marker "\u0001#" cannot be confused with a client's string if the body has no \u0001. */
    if (len < 4 * WIRE_FAST_STRING || memmem(body, len, "\\u0001", 6) != NULL)
        goto slow;
    copy = malloc(len);
    if (copy == NULL)
        goto slow;
    while (i < len) {
        const char *q = memchr(body + i, '"', len - i);
        size_t start, j;
        int plain = 1;
        if (q == NULL) { /* no more strings: copy the rest */
            memcpy(copy + o, body + i, len - i);
            o += len - i;
            break;
        }
        memcpy(copy + o, body + i, (size_t)(q - body) - i); /* up to the opening quote */
        o += (size_t)(q - body) - i;
        i = (size_t)(q - body);
        start = i + 1;
        for (j = start; j < len; j++) {
            unsigned char c = (unsigned char)body[j];
            if (c == '"')
                break;
            if (c == '\\') { /* an escape: not a plain base64 string; skip the escaped char */
                plain = 0;
                j++;
                continue;
            }
            plain &= parse_b64_alphabet[c];
        }
        if (j >= len) { /* unterminated: let jansson say where */
            memcpy(copy + o, body + i, len - i);
            o += len - i;
            break;
        }
        if (plain && j - start >= WIRE_FAST_STRING) { /* a value, not an object key? */
            size_t k = j + 1;
            while (k < len && (body[k] == ' ' || body[k] == '\t' || body[k] == '\n' || body[k] == '\r'))
                k++;
            if (k < len && body[k] == ':')
                plain = 0;
        }
        if (plain && j - start >= WIRE_FAST_STRING) {
            char mark[40];
            int m;
            if (nspans == cap) {
                parse_span *grown = realloc(spans, sizeof *spans * (cap ? 2 * cap : 8));
                if (grown == NULL)
                    goto slow;
                spans = grown;
                cap = cap ? 2 * cap : 8;
            }
            spans[nspans].off = start;
            spans[nspans].len = j - start;
            m = snprintf(mark, sizeof mark, "\"\\u0001#%zu\"", nspans);
            nspans++;
            memcpy(copy + o, mark, (size_t)m); /* shorter than the string it replaces */
            o += (size_t)m;
        } else {
            memcpy(copy + o, body + i, j + 1 - i);
            o += j + 1 - i;
        }
        i = j + 1;
    }
    if (nspans == 0)
        goto slow;
    v = json_loadb(copy, o, flags, jerr);
    free(copy);
    copy = NULL;
    if (v == NULL)
        goto slow; /* malformed: the plain parse reports the position in the client's text */
    if (parse_restore(v, body, spans, nspans) != 0) {
        json_decref(v);
        goto slow; /* out of memory while restoring: the plain parse reports it */
    }
    free(spans);
    *out = v;
    return 0;
slow:
    free(copy);
    free(spans);
    *out = json_loadb(body, len, flags, jerr);
    return *out != NULL ? 0 : -1;
}
