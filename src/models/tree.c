/* tree.c -- the tree-structured memory (Theorem 5): G code partitions, each its
 * own scalable mixture, plus the empirical pseudocounts of hard-assignment
 * paths (s^1 .. s^G) that App. G.1 samples from when generating. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixture.h"
#include "model.h"

typedef struct {
    int G;
    mixgroup_work *groups; /* [G] */
} tree_work;

static void t_work_free(void *work)
{
    tree_work *w = work;
    if (!w)
        return;
    if (w->groups)
        for (int g = 0; g < w->G; g++)
            mixgroup_work_free(&w->groups[g]);
    free(w->groups);
    free(w);
}

static vbm_status t_work_new(const vbm_memory *mem, const vbm_codes *codes, void **work,
                             vbm_error *err)
{
    tree_work *w = vbm_calloc(1, sizeof *w);
    if (!w)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    w->G = mem->cfg.groups;
    w->groups = vbm_calloc((size_t)w->G, sizeof *w->groups);
    if (!w->groups) {
        free(w);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    }
    for (int g = 0; g < w->G; g++) {
        vbm_status st = mixgroup_work_init(&w->groups[g], mem, codes, g, err);
        if (st) {
            t_work_free(w);
            return st;
        }
    }
    *work = w;
    return VBM_OK;
}

/* k-means++ runs per partition, each with its own stream derived from rng. */
static vbm_status t_init(vbm_memory *mem, const vbm_codes *codes, const prior_t *prior, void *work,
                         vbm_init init, rng_t *rng, vbm_error *err)
{
    tree_work *w = work;
    for (int g = 0; g < mem->cfg.groups; g++) {
        vbm_status st = mixgroup_init(mem, g, prior, codes, &w->groups[g], init, rng, err);
        if (st)
            return st;
    }
    return VBM_OK;
}

static vbm_status t_address(const vbm_memory *mem, const prior_t *prior, void *work, vbm_elbo *elbo,
                            vbm_error *err)
{
    tree_work *w = work;
    for (int g = 0; g < w->G; g++) {
        vbm_status st = mixgroup_address(mem, prior, &w->groups[g], elbo, err);
        if (st)
            return st;
    }
    return VBM_OK;
}

static vbm_status t_update(vbm_memory *mem, const prior_t *prior, void *work, vbm_error *err)
{
    tree_work *w = work;
    for (int g = 0; g < w->G; g++) {
        vbm_status st = mixgroup_update(mem, prior, &w->groups[g], err);
        if (st)
            return st;
    }
    return VBM_OK;
}

static vbm_status t_addresses(const vbm_memory *mem, void *work, vbm_addresses *out, vbm_error *err)
{
    tree_work *w = work;
    vbm_status st =
        addresses_alloc(out, w->groups[0].T, w->G, mem->cfg.clusters, mem->cfg.rows, 1, err);
    if (st)
        return st;
    for (int g = 0; g < w->G; g++)
        mixgroup_export(&w->groups[g], w->G, out);
    return VBM_OK;
}

static vbm_status t_read_draw(const vbm_memory *mem, void *work, rng_t *rng, double *out_z,
                              vbm_error *err)
{
    tree_work *w = work;
    for (int g = 0; g < w->G; g++) {
        vbm_status st = mixgroup_read_draw(mem, &w->groups[g], rng, out_z, err);
        if (st)
            return st;
    }
    return VBM_OK;
}

/* Hard-assignment paths: draw a path with probability proportional to its
 * pseudocount (the autoregressive distribution over prefixes that the counts
 * define is exactly this), or uniform clusters when no counts exist. */
static vbm_status t_sample(const vbm_memory *mem, long n, int cluster, rng_t *rng, double *out_z,
                           int *out_s, vbm_error *err)
{
    int G = mem->cfg.groups, H = mem->cfg.clusters, C = mem->cfg.code_size;
    for (long i = 0; i < n; i++) {
        long p = (cluster < 0 && mem->n_paths > 0)
                     ? rng_categorical(rng, mem->path_counts, mem->n_paths)
                     : -1;
        for (int g = 0; g < G; g++) {
            int h = cluster >= 0 ? cluster
                    : p >= 0     ? mem->paths[(size_t)p * G + g]
                                 : (int)rng_below(rng, (uint64_t)H);
            if (out_s)
                out_s[(size_t)i * G + g] = h;
            vbm_status st = mixgroup_sample_one(mem, g, h, rng,
                                                out_z + (size_t)i * C + (size_t)g * mem->cg, err);
            if (st)
                return st;
        }
    }
    return VBM_OK;
}

static void t_set_solver(void *work, int mode)
{
    tree_work *w = work;
    for (int g = 0; g < w->G; g++)
        mixgroup_set_solver(&w->groups[g], mode);
}

static void t_finish(vbm_memory *mem, const prior_t *prior, void *work)
{
    tree_work *w = work;
    for (int g = 0; g < w->G; g++)
        mixgroup_finish(mem, prior, &w->groups[g]);
}

static vbm_status t_set_team(void *work, team_t *team, vbm_error *err)
{
    tree_work *w = work;
    for (int g = 0; g < w->G; g++) {
        vbm_status st = mixgroup_set_team(&w->groups[g], team, err);
        if (st)
            return st;
    }
    return VBM_OK;
}

const model_ops tree_ops = {t_work_new,   t_work_free, t_init,      t_address,
                            t_update,     t_addresses, t_read_draw, t_sample,
                            t_set_solver, t_finish,    t_set_team};
