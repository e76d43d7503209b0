/* clock.c -- owns the engine's clocks: seconds on the monotonic clock and on the wall clock. */
#define _POSIX_C_SOURCE 200809L

#include <time.h>

#include "engine/clock.h"

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
