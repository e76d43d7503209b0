/* log.c -- owns formatting and writing JSON log lines. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http/log.h"

static const char *const hlog_names[] = {"error", "warn", "info", "debug"};

int hlog_parse_level(const char *name, hlog_level *out)
{
    int i;

    for (i = 0; i < 4; i++) {
        if (strcmp(name, hlog_names[i]) == 0) {
            *out = (hlog_level)i;
            return 0;
        }
    }
    return -1;
}

const char *hlog_level_name(hlog_level level)
{
    return (int)level >= 0 && (int)level < 4 ? hlog_names[level] : "info";
}

/* Write the line whatever the level when force is non-zero. */
static void hlog_write(const hlog *lg, hlog_level level, int force, const char *msg,
                       const char *request_id, json_t *fields)
{
    struct timespec ts;
    struct tm tm;
    char stamp[64];
    json_t *o;
    char *line;

    if (!force && level > lg->level) {
        json_decref(fields);
        return;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L);
    o = json_object();
    if (o == NULL) {
        json_decref(fields);
        return;
    }
    json_object_set_new(o, "ts", json_string(stamp));
    json_object_set_new(o, "level", json_string(hlog_level_name(level)));
    json_object_set_new(o, "msg", json_string(msg));
    if (request_id != NULL)
        json_object_set_new(o, "request_id", json_string(request_id));
    if (fields != NULL) {
        json_object_update(o, fields);
        json_decref(fields);
    }
    line = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(o);
    if (line == NULL)
        return;
    flockfile(lg->out);
    fputs(line, lg->out);
    fputc('\n', lg->out);
    fflush(lg->out);
    funlockfile(lg->out);
    free(line);
}

void hlog_emit(const hlog *lg, hlog_level level, const char *msg, const char *request_id,
               json_t *fields)
{
    hlog_write(lg, level, 0, msg, request_id, fields);
}

void hlog_event(const hlog *lg, const char *msg, json_t *fields)
{
    hlog_write(lg, HLOG_INFO, 1, msg, NULL, fields);
}
