/* parse.h -- owns the request-body JSON reader (wire_parse): json_loadb's tree, built faster. */
#ifndef VBMEM_WIRE_PARSE_H
#define VBMEM_WIRE_PARSE_H

#include <stddef.h>

#include <jansson.h>

/* Parse the JSON text body (len bytes, not necessarily NUL-terminated) with the
 * json_loadb flags into *out, a new reference owned by the caller. The result
 * is json_loadb's: the same tree (same types, same values bit for bit, same
 * member order) for every text json_loadb accepts, and for every text it
 * rejects the same failure with the same jerr (line, column, position, text),
 * since such texts are handed to json_loadb itself. The reader is a strict RFC
 * 8259 parser that allocates no intermediate buffer: numbers take an exact fast
 * path (Clinger: up to 2^53 and 10^22, one exact operation) with strtod for the
 * rest, and plain strings are copied without a second check; it hands the text
 * to jansson on anything it does not take (flags other than
 * JSON_REJECT_DUPLICATES and JSON_DECODE_ANY, malformed text, duplicate keys,
 * integers beyond 64 bits, real overflow, \u0000, lone surrogates,
 * nesting deeper than 1000, invalid UTF-8). Returns 0, or -1 with *out NULL and
 * *jerr filled by jansson (malformed JSON, out of memory). Never crashes on any
 * input; thread-safe. */
int wire_parse(const char *body, size_t len, size_t flags, json_t **out, json_error_t *jerr);

/* The reader of wire_parse alone, without jansson behind it: 0 with *out (a new
 * reference) when it takes the text, -1 with *out NULL when it gives up (then
 * wire_parse hands the text to json_loadb). It never takes a text json_loadb
 * rejects, and what it takes it builds as json_loadb does. For tests and
 * benchmarks; never crashes on any input. */
int wire_parse_reader(const char *body, size_t len, size_t flags, json_t **out);

#endif
