/* dkm.h -- the Dynamic Kanerva Machine online writer (baseline). */
#ifndef VBMEM_DKM_H
#define VBMEM_DKM_H

#include "gaussian.h"

/* One online pass over the codes, updating mem->R and mem->U in place from
 * their current values, and leaving the per-frame addressing means in w->W and
 * the fixed address covariance (cfg.dkm_addr_var * I) in w->Sw / w->logdetSw.
 * w must have been initialised for the same codes. Fails with VBM_ENOMEM or
 * VBM_ENUMERIC. */
vbm_status dkm_run(vbm_memory *mem, const vbm_codes *codes, gaussian_work *w, vbm_error *err);

/* 1 when every entry of mem->R is exactly 0: the writer's fixed point, from
 * which dkm_run can never move (every address mean and update is 0). Never
 * fails. */
int dkm_is_zero(const vbm_memory *mem);

#endif
