/* clusters.c -- owns the mean code and occupancy of each cluster of a session's memory (what
 * the memory generates for a cluster), read under the session's read lock. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#include "engine/clusters.h"
#include "engine/session_impl.h"

void eng_cluster_means(const vbm_memory *mem, double *out)
{
    int H = mem->cfg.clusters, G = mem->cfg.groups, K = mem->cfg.rows, C = mem->cfg.code_size;
    int cg = mem->cg, h, g, k, c;

    memset(out, 0, (size_t)H * (size_t)C * sizeof(double));
    if (mem->cfg.kind == VBM_CATEGORICAL) { /* w = e_k, k uniform: the mean row of E[M] */
        for (k = 0; k < K; k++)
            for (c = 0; c < C; c++)
                out[c] += mem->R[(size_t)k * C + c] / K;
        return;
    }
    /* w ~ N(0, I): E[z | s = h] = E[b_h] (mu_b is zero without a shift) */
    for (h = 0; h < H; h++)
        for (g = 0; g < G; g++)
            memcpy(out + (size_t)h * C + (size_t)g * cg, mem->mu_b + (size_t)(g * H + h) * cg,
                   (size_t)cg * sizeof(double));
}

vbm_status eng_session_clusters(eng_session *s, eng_clusters *out, vbm_error *err)
{
    size_t n_usage;
    int had_usage;

    memset(out, 0, sizeof *out);
    if (s->temporal)
        return vbm_fail(err, VBM_EINVAL, "kind",
                        "a temporal session has identities, not clusters "
                        "(POST /v1/sessions/{id}/infer)");
    eng_session_rdlock(s);
    out->version = s->version;
    out->kind = s->mem->cfg.kind;
    out->clusters = s->mem->cfg.clusters;
    out->groups = s->mem->cfg.groups;
    out->code_size = s->mem->cfg.code_size;
    out->frames = s->mem->frames;
    n_usage = (size_t)out->groups * (size_t)out->clusters;
    out->means = vbm_calloc((size_t)out->clusters * (size_t)out->code_size, sizeof(double));
    had_usage = s->usage != NULL;
    if (had_usage) {
        out->usage = vbm_calloc(n_usage, sizeof(double));
        if (out->usage != NULL)
            memcpy(out->usage, s->usage, n_usage * sizeof(double));
    }
    if (out->means != NULL)
        eng_cluster_means(s->mem, out->means);
    eng_session_unlock(s);
    if (out->means == NULL || (had_usage && out->usage == NULL)) {
        eng_clusters_free(out);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for the cluster means");
    }
    return VBM_OK;
}

void eng_clusters_free(eng_clusters *c)
{
    free(c->means);
    free(c->usage);
    c->means = NULL;
    c->usage = NULL;
}
