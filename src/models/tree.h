/* tree.h -- the tree memory's memos (MWS, README "Memos"): the hooks the VB
 * driver (memory.c) calls around a tree fit with cfg.memo_k > 0. */
#ifndef VBMEM_TREE_H
#define VBMEM_TREE_H

#include "model.h"

/* Start the memos of the fit's frames 0..n-1 from mem's memos from..from+n-1
 * (n = min(T, mem->n_memos - from)), the frames' memos before a refit. work is
 * the tree workspace of the fit (tree_ops.work_new). No effect when memo_k is 0
 * or from < 0. Never fails. */
void tree_memo_seed(void *work, const vbm_memory *mem, long from);

/* After the fit: mem's memos <- (append ? mem's memos : none) + the fit's
 * memos, one per frame of the fit. No effect when memo_k is 0. VBM_ENOMEM (mem
 * is then unchanged). */
vbm_status tree_memo_commit(vbm_memory *mem, const void *work, int append, vbm_error *err);

#endif
