/* tree.h -- the tree memory's memos (MWS, README "Memos"): the hooks the VB
 * driver (memory.c) calls around a tree fit with cfg.memo_k > 0. */
#ifndef VBMEM_TREE_H
#define VBMEM_TREE_H

#include "memory_impl.h"

/* Start the memos of the fit's frames 0..n-1 from mem's memos from..from+n-1
 * (n = min(T, mem->n_memos - from)), the frames' memos before a refit. work is
 * the tree workspace of the fit (tree_ops.work_new). No effect when memo_k is 0
 * or from < 0. Never fails. */
void tree_memo_seed(void *work, const vbm_memory *mem, long from);

/* After the fit: mem's memos <- (append ? mem's memos : none) + the fit's
 * memos, one per frame of the fit. No effect when memo_k is 0. VBM_ENOMEM (mem
 * is then unchanged). */
vbm_status tree_memo_commit(vbm_memory *mem, const void *work, int append, vbm_error *err);

/* The joint path prior (README "A coupled prior over joint paths"), a fit with
 * cfg.path_prior VBM_PATH_JOINT: start its q(pi). append: mem's counts are the
 * fit's prior (p(pi) = Dirichlet(path_alpha + mem's counts), the fit's counts
 * start at 0); else p(pi) = Dirichlet(path_alpha) and the fit's q(pi) starts
 * from mem's counts when current (init VBM_INIT_CURRENT), from p(pi)
 * otherwise. Without this call the workspace's address step is the factorised
 * tree's (vbm_elbo_eval, vbm_address). No effect unless path_prior is joint.
 * Never fails (work_new sized the table for mem's counts). */
void tree_jp_begin(void *work, const vbm_memory *mem, int append, int current);

/* After the fit: mem's q(pi) counts <- the fit's q(pi) in effect at its last
 * address step (its prior's counts included), the paths with counts > 0.
 * No effect unless tree_jp_begin ran. VBM_ENOMEM (mem is then unchanged). */
vbm_status tree_jp_commit(vbm_memory *mem, const void *work, vbm_error *err);

/* E_{q(s^-g)}[E log pi_(h, s^-g)] for h = 0..H-1 into out[H], with
 * E log pi_s = base + d[i] for s = paths[i] (n of them, G clusters each) and
 * base for every other path, q(s^-g) = prod_{g' != g} q[g' H + h']: the sum
 * over the n listed paths plus the baseline (README, the exact mean-field
 * term). Exposed for the tests. Never fails. */
void tree_jp_marginal(int G, int H, int g, const double *q, long n, const int *paths,
                      const double *d, double base, double *out);

#endif
