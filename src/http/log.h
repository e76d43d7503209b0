/* log.h -- owns the daemon's JSON-lines log on stderr: levels, timestamps, request ids. */
#ifndef VBMEM_HTTP_LOG_H
#define VBMEM_HTTP_LOG_H

#include <stdio.h>

#include <jansson.h>

typedef enum { HLOG_ERROR = 0, HLOG_WARN = 1, HLOG_INFO = 2, HLOG_DEBUG = 3 } hlog_level;

/* A logger: lines at or below `level` go to `out` (stderr by default). */
typedef struct {
    hlog_level level;
    FILE *out;
} hlog;

/* Parse "error", "warn", "info" or "debug". Returns 0, or -1 for another name. */
int hlog_parse_level(const char *name, hlog_level *out);

/* Name of a level. */
const char *hlog_level_name(hlog_level level);

/* Write one JSON object line {"ts", "level", "msg", "request_id" (when non-NULL),
 * ...fields} when level is enabled. fields (an object, may be NULL) is stolen.
 * Lines from concurrent threads never interleave. Never fails (output errors
 * are ignored). */
void hlog_emit(const hlog *lg, hlog_level level, const char *msg, const char *request_id,
               json_t *fields);

/* Write a lifecycle line (listening, shutting down, stopped) at level "info"
 * whatever the configured level, so that supervisors and tests always see
 * them. fields is stolen. Never fails. */
void hlog_event(const hlog *lg, const char *msg, json_t *fields);

#endif
