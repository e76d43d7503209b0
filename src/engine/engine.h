/* engine.h -- owns the clock helpers of the engine layer and brings in the one error record
 * (vbm_error, vbm_status: include/vbmem/vbmem.h) that every engine function fills. */
#ifndef VBMEM_ENGINE_H
#define VBMEM_ENGINE_H

#include <stddef.h>

#include "vbmem/vbmem.h"

/* Seconds on CLOCK_MONOTONIC. Never fails. */
double eng_now(void);

/* Seconds since the Unix epoch on CLOCK_REALTIME. Never fails. */
double eng_wall(void);

#endif
