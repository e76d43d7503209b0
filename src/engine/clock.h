/* clock.h -- owns the clocks of the engine layer (monotonic and wall) and brings in the one
 * error record (vbm_error, vbm_status: include/vbmem/vbmem.h) that every engine function
 * fills. */
#ifndef VBMEM_ENGINE_CLOCK_H
#define VBMEM_ENGINE_CLOCK_H

#include <stddef.h>

#include "vbmem/vbmem.h"

/* Seconds on CLOCK_MONOTONIC. Never fails. */
double eng_now(void);

/* Seconds since the Unix epoch on CLOCK_REALTIME. Never fails. */
double eng_wall(void);

#endif
