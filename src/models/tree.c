/* tree.c -- the tree-structured memory (Theorem 5): G code partitions, each its
 * own scalable mixture, plus the empirical pseudocounts of hard-assignment
 * paths (s^1 .. s^G) that App. G.1 samples from when generating, and the
 * optional memos of top-k joint paths per frame (MWS; README "Memos"). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixture.h"
#include "model.h"
#include "tree.h"

/* The memos of one fit (cfg.memo_k > 0): for each of the T frames, mn[t]
 * distinct joint paths mp[t][i][0..G) with scores ms[t][i], best first. */
typedef struct {
    int k;     /* memo_k; 0: no memos */
    int on;    /* the fit's init seeded rng: the address step refines the memos */
    rng_t rng; /* the proposals' stream (drawn from the fit's generator at init) */
    long T;
    int *mn;    /* [T] */
    int *mp;    /* [T][k][G] */
    double *ms; /* [T][k] */
    double *ll; /* [G][H] scratch: a frame's expected log-likelihood per cluster */
    double *lw; /* [G][H] scratch: a frame's KL(q(w | s = h) || p(w)) per cluster */
    double *pq; /* [H] scratch: one group's q(s_t) */
    int *cand;  /* [G] scratch: a proposed path */
} tree_memo;

typedef struct {
    int G;
    mixgroup_work *groups; /* [G] */
    tree_memo memo;
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
    free(w->memo.mn);
    free(w->memo.mp);
    free(w->memo.ms);
    free(w->memo.ll);
    free(w->memo.lw);
    free(w->memo.pq);
    free(w->memo.cand);
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
    int k = mem->cfg.memo_k, G = w->G, H = mem->cfg.clusters;
    if (k > 0) {
        tree_memo *m = &w->memo;
        m->k = k;
        m->T = codes->T;
        m->mn = vbm_calloc((size_t)codes->T, sizeof(int));
        m->mp = vbm_calloc((size_t)codes->T * k * G, sizeof(int));
        m->ms = vbm_calloc((size_t)codes->T * k, sizeof(double));
        m->ll = vbm_calloc((size_t)G * H, sizeof(double));
        m->lw = vbm_calloc((size_t)G * H, sizeof(double));
        m->pq = vbm_calloc((size_t)H, sizeof(double));
        m->cand = vbm_calloc((size_t)G, sizeof(int));
        if (!m->mn || !m->mp || !m->ms || !m->ll || !m->lw || !m->pq || !m->cand) {
            t_work_free(w);
            return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for the memos of %ld frames",
                            codes->T);
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
    if (w->memo.k > 0) { /* the memos' own stream, after every draw of the init */
        rng_seed(&w->memo.rng, rng_next(rng));
        w->memo.on = 1;
    }
    return VBM_OK;
}

/* Path a of G clusters equals path b. */
static int path_eq(const int *a, const int *b, int G)
{
    for (int g = 0; g < G; g++)
        if (a[g] != b[g])
            return 0;
    return 1;
}

/* Offer the path cand with score sc to frame t's memo: kept when it is not
 * already there and the memo has room or sc beats its worst entry (which it
 * then replaces); the memo stays sorted by score, best first (ties: the
 * earlier entry first). */
static void memo_offer(tree_memo *m, int G, long t, const int *cand, double sc)
{
    int k = m->k, n = m->mn[t];
    int *mp = m->mp + (size_t)t * k * G;
    double *ms = m->ms + (size_t)t * k;
    for (int i = 0; i < n; i++)
        if (path_eq(mp + (size_t)i * G, cand, G))
            return;
    int at;
    if (n < k)
        at = n++;
    else if (sc > ms[k - 1])
        at = k - 1;
    else
        return;
    while (at > 0 && ms[at - 1] < sc) { /* shift worse entries down */
        ms[at] = ms[at - 1];
        memcpy(mp + (size_t)at * G, mp + (size_t)(at - 1) * G, sizeof(int) * G);
        at--;
    }
    ms[at] = sc;
    memcpy(mp + (size_t)at * G, cand, sizeof(int) * G);
    m->mn[t] = n;
}

/* The memo step of frame t, after every group's mean-field address step (its
 * E, LW and q(s) are in the group workspaces):
 *   score(s) = sum_g [ -cg/2 log(2 pi s2) - e_t,s_g / (2 s2) - KL_w,t,s_g - log H ],
 * the frame's ELBO term with q(s_t) a point mass on the path s (the entropy of
 * q(z_t) aside). The memo's entries are re-scored under the current q(Omega)
 * and re-sorted; then the proposals: the mean-field mode (every group's most
 * probable cluster) and k paths drawn from the mean-field marginals, each
 * offered to the memo (memo_offer). q(s_t) over the memo is proportional to
 * exp(score); its marginals replace every group's q(s_t) (what the M-step
 * reads), and the frame's ELBO terms under it are added to acc (log-likelihood,
 * KL_w, KL_s of the joint against the uniform prior over H^G paths). */
static void memo_frame(const vbm_memory *mem, tree_work *w, long t, double acc[3])
{
    tree_memo *m = &w->memo;
    int G = w->G, H = mem->cfg.clusters, k = m->k, cg = mem->cg;
    long T = m->T;
    double s2 = mem->cfg.sigma_z2, c0 = -0.5 * cg * log(2.0 * VBM_PI * s2), logH = log((double)H);
    for (int g = 0; g < G; g++) {
        const mixgroup_work *gw = &w->groups[g];
        for (int h = 0; h < H; h++) {
            m->ll[g * H + h] = c0 - gw->E[(size_t)h * T + t] / (2.0 * s2);
            m->lw[g * H + h] = gw->LW[(size_t)h * T + t];
        }
    }
    int *mp = m->mp + (size_t)t * k * G, *cand = m->cand;
    double *ms = m->ms + (size_t)t * k;
    /* re-score under the current q(Omega), then re-sort (insertion: k <= 64) */
    int n = m->mn[t];
    for (int i = 0; i < n; i++) {
        double sc = 0.0;
        for (int g = 0; g < G; g++) {
            int h = mp[(size_t)i * G + g];
            sc += m->ll[g * H + h] - m->lw[g * H + h] - logH;
        }
        ms[i] = sc;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && ms[j - 1] < ms[j]; j--) {
            double ts = ms[j];
            ms[j] = ms[j - 1];
            ms[j - 1] = ts;
            for (int g = 0; g < G; g++) {
                int th = mp[(size_t)j * G + g];
                mp[(size_t)j * G + g] = mp[(size_t)(j - 1) * G + g];
                mp[(size_t)(j - 1) * G + g] = th;
            }
        }
    /* proposals: the mean-field mode, then k draws from the mean-field marginals */
    for (int p = 0; p <= k; p++) {
        double sc = 0.0;
        for (int g = 0; g < G; g++) {
            const double *th = w->groups[g].thetaT;
            int h = 0;
            if (p == 0) {
                for (int j = 1; j < H; j++)
                    if (m->ll[g * H + j] - m->lw[g * H + j] > m->ll[g * H + h] - m->lw[g * H + h])
                        h = j;
            } else {
                for (int j = 0; j < H; j++)
                    m->pq[j] = th[(size_t)j * T + t];
                h = (int)rng_categorical(&m->rng, m->pq, H);
            }
            cand[g] = h;
            sc += m->ll[g * H + h] - m->lw[g * H + h] - logH;
        }
        memo_offer(m, G, t, cand, sc);
    }
    n = m->mn[t];
    /* q(s_t) over the memo, its marginals into every group's q(s_t), its ELBO terms */
    double q[VBM_MAX_MEMO_K + 1], z = 0.0;
    for (int i = 0; i < n; i++) {
        q[i] = exp(ms[i] - ms[0]);
        z += q[i];
    }
    for (int g = 0; g < G; g++) {
        double *th = w->groups[g].thetaT;
        for (int h = 0; h < H; h++)
            th[(size_t)h * T + t] = 0.0;
    }
    double ll = 0.0, lw = 0.0, kls = G * logH;
    for (int i = 0; i < n; i++) {
        double qi = q[i] / z;
        if (qi == 0.0)
            continue;
        for (int g = 0; g < G; g++) {
            int h = mp[(size_t)i * G + g];
            w->groups[g].thetaT[(size_t)h * T + t] += qi;
            ll += qi * m->ll[g * H + h];
            lw += qi * m->lw[g * H + h];
        }
        kls += qi * log(qi);
    }
    acc[0] += ll;
    acc[1] += lw;
    acc[2] += kls;
}

static vbm_status t_address(const vbm_memory *mem, const prior_t *prior, void *work, vbm_elbo *elbo,
                            vbm_error *err)
{
    tree_work *w = work;
    if (!w->memo.on) { /* mean field (also every address step outside a fit) */
        for (int g = 0; g < w->G; g++) {
            vbm_status st = mixgroup_address(mem, prior, &w->groups[g], elbo, err);
            if (st)
                return st;
        }
        return VBM_OK;
    }
    /* memos: the groups' terms of q(Omega) and q(z) stand; the terms of q(y)
     * are those of q(s) over the memos (memo_frame) */
    vbm_elbo mf = {0};
    double entropy = 0.0;
    for (int g = 0; g < w->G; g++) {
        vbm_status st = mixgroup_address(mem, prior, &w->groups[g], elbo ? &mf : NULL, err);
        if (st)
            return st;
        entropy += w->groups[g].cs.entropy;
    }
    double acc[3] = {0.0, 0.0, 0.0};
    for (long t = 0; t < w->memo.T; t++)
        memo_frame(mem, w, t, acc);
    if (elbo) {
        elbo->loglik_codes += acc[0] + entropy;
        elbo->kl_w += acc[1];
        elbo->kl_s += acc[2];
        elbo->kl_M += mf.kl_M;
        elbo->kl_b += mf.kl_b;
    }
    return VBM_OK;
}

void tree_memo_seed(void *work, const vbm_memory *mem, long from)
{
    tree_work *w = work;
    tree_memo *m = &w->memo;
    if (m->k == 0 || from < 0 || mem->cfg.memo_k != m->k || from >= mem->n_memos)
        return;
    long n = mem->n_memos - from < m->T ? mem->n_memos - from : m->T;
    size_t kg = (size_t)m->k * w->G;
    memcpy(m->mn, mem->memo_n + from, sizeof(int) * (size_t)n);
    memcpy(m->mp, mem->memo_paths + (size_t)from * kg, sizeof(int) * (size_t)n * kg);
    memcpy(m->ms, mem->memo_scores + (size_t)from * m->k, sizeof(double) * (size_t)n * m->k);
}

vbm_status tree_memo_commit(vbm_memory *mem, const void *work, int append, vbm_error *err)
{
    const tree_work *w = work;
    const tree_memo *m = &w->memo;
    if (m->k == 0)
        return VBM_OK;
    int k = m->k, G = w->G;
    size_t kg = (size_t)k * G;
    long old = append ? mem->n_memos : 0, n = old + m->T;
    int *mn = vbm_calloc((size_t)n, sizeof(int));
    int *mp = vbm_calloc((size_t)n * kg, sizeof(int));
    double *ms = vbm_calloc((size_t)n * k, sizeof(double));
    if (!mn || !mp || !ms) {
        free(mn);
        free(mp);
        free(ms);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for the memos of %ld frames", n);
    }
    if (old > 0) {
        memcpy(mn, mem->memo_n, sizeof(int) * (size_t)old);
        memcpy(mp, mem->memo_paths, sizeof(int) * (size_t)old * kg);
        memcpy(ms, mem->memo_scores, sizeof(double) * (size_t)old * k);
    }
    memcpy(mn + old, m->mn, sizeof(int) * (size_t)m->T);
    memcpy(mp + (size_t)old * kg, m->mp, sizeof(int) * (size_t)m->T * kg);
    memcpy(ms + (size_t)old * k, m->ms, sizeof(double) * (size_t)m->T * k);
    for (long t = old; t < n; t++) /* unused slots: paths -1, scores 0 */
        for (int i = mn[t]; i < k; i++) {
            ms[(size_t)t * k + i] = 0.0;
            for (int g = 0; g < G; g++)
                mp[((size_t)t * k + i) * G + g] = -1;
        }
    free(mem->memo_n);
    free(mem->memo_paths);
    free(mem->memo_scores);
    mem->memo_n = mn;
    mem->memo_paths = mp;
    mem->memo_scores = ms;
    mem->n_memos = n;
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
 * define is exactly this), or uniform clusters when no counts exist. With
 * memos: a frame drawn uniformly, then a path from its memo with probability
 * q(s_t) (proportional to exp(score)): joint paths from the frames' q(s). */
static vbm_status t_sample(const vbm_memory *mem, long n, int cluster, rng_t *rng, double *out_z,
                           int *out_s, vbm_error *err)
{
    int G = mem->cfg.groups, H = mem->cfg.clusters, C = mem->cfg.code_size, k = mem->cfg.memo_k;
    double q[VBM_MAX_MEMO_K + 1];
    for (long i = 0; i < n; i++) {
        const int *mpath = NULL;
        if (cluster < 0 && k > 0 && mem->n_memos > 0) {
            long t = (long)rng_below(rng, (uint64_t)mem->n_memos);
            const double *ms = mem->memo_scores + (size_t)t * k;
            int m = mem->memo_n[t];
            for (int j = 0; j < m; j++)
                q[j] = exp(ms[j] - ms[0]);
            long j = m > 1 ? rng_categorical(rng, q, m) : 0;
            mpath = mem->memo_paths + ((size_t)t * k + (size_t)j) * G;
        }
        long p = (cluster < 0 && !mpath && mem->n_paths > 0)
                     ? rng_categorical(rng, mem->path_counts, mem->n_paths)
                     : -1;
        for (int g = 0; g < G; g++) {
            int h = cluster >= 0 ? cluster
                    : mpath      ? mpath[g]
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
