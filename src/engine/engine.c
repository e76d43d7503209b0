/* engine.c -- owns the engine's error recording and clock helpers. */
#define _POSIX_C_SOURCE 200809L

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "engine/engine.h"

eng_status eng_fail(eng_error *err, eng_status st, const char *field, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL)
        return st;
    snprintf(err->field, sizeof err->field, "%s", field != NULL ? field : "");
    va_start(ap, fmt);
    if (vsnprintf(err->msg, sizeof err->msg, fmt, ap) < 0)
        err->msg[0] = '\0';
    va_end(ap);
    return st;
}

double eng_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double eng_wall(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
