/* clusters.h -- owns what each cluster of a session's memory holds, as the memory generates it:
 * the mean code of a cluster (the mean of vbm_sample's draws with s fixed at that cluster) and
 * its occupancy (the session's cluster usage). Read-only; the page's cluster pictures and
 * GET /v1/sessions/{id}/clusters use it. */
#ifndef VBMEM_ENGINE_CLUSTERS_H
#define VBMEM_ENGINE_CLUSTERS_H

#include <stdint.h>

#include "engine/session.h"
#include "vbmem/vbmem.h"

/* A snapshot of a session's clusters. Owns means and usage (release with eng_clusters_free). */
typedef struct {
    uint64_t version; /* the version read */
    vbm_kind kind;
    int clusters;  /* H (1 for the kinds without clusters) */
    int groups;    /* G */
    int code_size; /* C */
    long frames;   /* frames written since the last replace, refit or resize */
    double *means; /* H x C: row h is the mean code of cluster h */
    double *usage; /* G x H expected frames per cluster, NULL before any write */
} eng_clusters;

/* The mean code of every cluster of mem into out (H x C, H = mem->cfg.clusters): the mean of
 * the codes vbm_sample draws with s fixed at h (all groups), E[z | s = h] under q(Omega) and
 * p(w). For the gaussian, dkm, mixture and tree kinds w ~ N(0, I), so the mean is the posterior
 * mean of the shift, E[b_h] (group by group for the tree; 0 without a shift); for the
 * categorical kind w is a uniform one-hot row choice, so the mean is the average of the K rows
 * of E[M]. Never fails. */
void eng_cluster_means(const vbm_memory *mem, double *out);

/* Snapshot the clusters of session s under its read lock into *out. Fails with VBM_EINVAL
 * (field "kind") for a temporal session, which has identities rather than clusters, and with
 * VBM_ENOMEM; *out is then empty. */
vbm_status eng_session_clusters(eng_session *s, eng_clusters *out, vbm_error *err);

/* Release what an eng_clusters owns. NULL members are fine. Never fails. */
void eng_clusters_free(eng_clusters *c);

#endif
