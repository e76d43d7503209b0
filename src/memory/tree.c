/* tree.c -- the tree-structured memory (Theorem 5): G code partitions, each its
 * own scalable mixture, plus the empirical pseudocounts of hard-assignment
 * paths (s^1 .. s^G) that App. G.1 samples from when generating, and the
 * optional memos of top-k joint paths per frame (MWS; README "Memos"). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixture.h"
#include "memory_impl.h"
#include "tree.h"

#include "numerics/special.h"

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

/* The joint path prior's q(pi) = Dirichlet(alpha + base + cnt) over the H^G
 * paths (README "A coupled prior over joint paths"), sparse: entries 0..n-1
 * (paths keys[i][0..G)) found through an open-addressing hash; every path not
 * listed has base = cnt = 0. */
typedef struct {
    int on; /* tree_jp_begin ran: the address step uses the joint prior */
    int G, H;
    long T;
    double alpha, HG; /* path_alpha, H^G */
    long n, cap;
    int *keys;     /* [cap][G] */
    double *base;  /* [cap]: the prior's counts beyond alpha (an append: mem's) */
    double *cnt;   /* [cap]: the counts of the q(pi) in effect */
    double *nxt;   /* [cap]: the expected counts of the current q(s): q(pi)'s next */
    double *d;     /* [cap]: digamma(alpha + base + cnt) - digamma(alpha) */
    long hcap;     /* a power of 2 >= 2 cap */
    long *slot;    /* [hcap]: entry + 1, 0 when free */
    double B;      /* sum of base */
    double base_t; /* digamma(alpha) - digamma(H^G alpha + B + sum cnt): E log pi_s off the list */
    double kl;     /* KL(q(pi) || p(pi)) of the q(pi) in effect */
    double *qprev; /* [G][H][T]: the last address step's q(s), where the sweeps start */
    int have_prev;
    double *qf;   /* [G][H] scratch: a frame's q(s^g) */
    double *mg;   /* [H] scratch: a group's E_{q(s^-g)} E log pi */
    int *path;    /* [G] scratch */
    double *mass; /* [G + 1] scratch */
} tree_jp;

typedef struct {
    int G;
    mixgroup_work *groups; /* [G] */
    tree_memo memo;
    tree_jp jp;
} tree_work;

/* log Gamma(a + n) - log Gamma(a), a > 0, n >= 0, without the cancellation of
 * the two terms when a >> n (a = H^G alpha can be huge): recurrence up to
 * a >= 7, then the difference of Stirling's series written as
 * (a - 1/2) log1p(n/a) + n log(a + n) - n + (series(a + n) - series(a)). */
static double jp_lgamma_diff(double a, double n)
{
    double r = 0.0;
    if (n == 0.0)
        return 0.0;
    while (a < 7.0) { /* Gamma(a + n) / Gamma(a) = (a + n - 1 .. ) handled one step at a time */
        r += log(a + n) - log(a);
        a += 1.0;
    }
    /* r now holds log Gamma(a0 + n) - log Gamma(a0) - (log Gamma(a + n) - log Gamma(a)) */
    double b = a + n, fa = 1.0 / (a * a), fb = 1.0 / (b * b);
    double sa = (1.0 / a) * (1.0 / 12 - fa * (1.0 / 360 - fa * (1.0 / 1260 - fa / 1680)));
    double sb = (1.0 / b) * (1.0 / 12 - fb * (1.0 / 360 - fb * (1.0 / 1260 - fb / 1680)));
    return -r + (a - 0.5) * log1p(n / a) + n * log(b) - n + (sb - sa);
}

static uint64_t jp_hash(const int *key, int G)
{
    uint64_t h = 1469598103934665603ull;
    for (int g = 0; g < G; g++) {
        h ^= (uint64_t)(uint32_t)key[g];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

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
    free(w->jp.keys);
    free(w->jp.base);
    free(w->jp.cnt);
    free(w->jp.nxt);
    free(w->jp.d);
    free(w->jp.slot);
    free(w->jp.qprev);
    free(w->jp.qf);
    free(w->jp.mg);
    free(w->jp.path);
    free(w->jp.mass);
    free(w);
}

static int path_eq(const int *a, const int *b, int G);

/* The entry of path key, or -1. */
static long jp_find(const tree_jp *j, const int *key)
{
    long m = j->hcap - 1;
    for (long s = (long)(jp_hash(key, j->G) & (uint64_t)m);; s = (s + 1) & m) {
        long e = j->slot[s];
        if (e == 0)
            return -1;
        if (path_eq(j->keys + (size_t)(e - 1) * j->G, key, j->G))
            return e - 1;
    }
}

/* Make room for cap entries (arrays grown, zero-filled; the hash rebuilt).
 * -1 when out of memory (the table is then unchanged but for larger arrays). */
static int jp_reserve(tree_jp *j, long cap)
{
    if (cap <= j->cap && j->slot)
        return 0;
    int G = j->G;
    int *k = realloc(j->keys, sizeof(int) * (size_t)cap * G);
    if (!k)
        return -1;
    j->keys = k;
    double **arr[4] = {&j->base, &j->cnt, &j->nxt, &j->d};
    for (int a = 0; a < 4; a++) {
        double *p = realloc(*arr[a], sizeof(double) * (size_t)cap);
        if (!p)
            return -1;
        for (long i = j->cap; i < cap; i++)
            p[i] = 0.0;
        *arr[a] = p;
    }
    long hcap = 16;
    while (hcap < 2 * cap)
        hcap *= 2;
    long *slot = vbm_calloc((size_t)hcap, sizeof(long));
    if (!slot)
        return -1;
    free(j->slot);
    j->slot = slot;
    j->hcap = hcap;
    j->cap = cap;
    for (long i = 0; i < j->n; i++) {
        long s = (long)(jp_hash(j->keys + (size_t)i * G, G) & (uint64_t)(hcap - 1));
        while (slot[s])
            s = (s + 1) & (hcap - 1);
        slot[s] = i + 1;
    }
    return 0;
}

/* The entry of path key, added (counts 0, d 0) when absent; -1 when out of memory. */
static long jp_insert(tree_jp *j, const int *key)
{
    long e = jp_find(j, key);
    if (e >= 0)
        return e;
    if (j->n == j->cap && jp_reserve(j, 2 * j->cap) != 0)
        return -1;
    e = j->n++;
    memcpy(j->keys + (size_t)e * j->G, key, sizeof(int) * j->G);
    j->base[e] = j->cnt[e] = j->nxt[e] = j->d[e] = 0.0;
    long s = (long)(jp_hash(key, j->G) & (uint64_t)(j->hcap - 1));
    while (j->slot[s])
        s = (s + 1) & (j->hcap - 1);
    j->slot[s] = e + 1;
    return e;
}

/* d, base_t and the KL of q(pi) = Dirichlet(alpha + base + cnt) against
 * p(pi) = Dirichlet(alpha + base):
 *   KL = lnG(A + N) - lnG(A) - sum_s [lnG(a_s + n_s) - lnG(a_s)]
 *        + sum_s n_s (psi(a_s + n_s) - psi(A + N)),
 * a_s = alpha + base_s, A = H^G alpha + B, N = sum cnt; only listed paths have
 * n_s != 0. */
static void jp_refresh(tree_jp *j)
{
    double N = 0.0;
    for (long i = 0; i < j->n; i++)
        N += j->cnt[i];
    double A = j->HG * j->alpha + j->B, psiT = special_digamma(A + N),
           psia = special_digamma(j->alpha);
    j->base_t = psia - psiT;
    double kl = jp_lgamma_diff(A, N);
    for (long i = 0; i < j->n; i++) {
        double a = j->alpha + j->base[i], psi = special_digamma(a + j->cnt[i]);
        j->d[i] = (j->base[i] == 0.0 && j->cnt[i] == 0.0) ? 0.0 : psi - psia;
        if (j->cnt[i] != 0.0)
            kl += j->cnt[i] * (psi - psiT) - jp_lgamma_diff(a, j->cnt[i]);
    }
    j->kl = kl;
}

/* E log pi_s of path p under the q(pi) in effect. */
static double jp_elogpi(const tree_jp *j, const int *p)
{
    long e = jp_find(j, p);
    return j->base_t + (e >= 0 ? j->d[e] : 0.0);
}

void tree_jp_marginal(int G, int H, int g, const double *q, long n, const int *paths,
                      const double *d, double base, double *out)
{
    for (int h = 0; h < H; h++)
        out[h] = base;
    for (long i = 0; i < n; i++) {
        if (d[i] == 0.0)
            continue;
        const int *p = paths + (size_t)i * G;
        double wgt = d[i];
        for (int gg = 0; gg < G && wgt != 0.0; gg++)
            if (gg != g)
                wgt *= q[gg * H + p[gg]];
        out[p[g]] += wgt;
    }
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
    if (mem->cfg.path_prior == VBM_PATH_JOINT) {
        tree_jp *j = &w->jp;
        j->G = G;
        j->H = H;
        j->T = codes->T;
        j->alpha = mem->cfg.path_alpha;
        j->HG = pow((double)H, (double)G);
        j->qprev = vbm_calloc((size_t)G * H * codes->T, sizeof(double));
        j->qf = vbm_calloc((size_t)G * H, sizeof(double));
        j->mg = vbm_calloc((size_t)H, sizeof(double));
        j->path = vbm_calloc((size_t)G, sizeof(int));
        j->mass = vbm_calloc((size_t)G + 1, sizeof(double));
        if (!w->memo.ll) { /* the frames' scratch the memos would have allocated */
            w->memo.ll = vbm_calloc((size_t)G * H, sizeof(double));
            w->memo.lw = vbm_calloc((size_t)G * H, sizeof(double));
        }
        if (!j->qprev || !j->qf || !j->mg || !j->path || !j->mass || !w->memo.ll || !w->memo.lw
            || jp_reserve(j, mem->n_jpaths > 64 ? mem->n_jpaths : 64) != 0) {
            t_work_free(w);
            return vbm_fail(err, VBM_ENOMEM, NULL,
                            "out of memory for the joint path prior of %ld frames", codes->T);
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

/* The mean-field sweeps of one frame under the joint path prior: q[G][H]
 * holds the start and receives the result; ll, lw [G][H] are the frame's
 * expected log-likelihoods and KL_w per cluster. Each group in turn gets its
 * exact coordinate update
 *   log q(s^g = h) = ll_g,h - lw_g,h + E_{q(s^-g)}[E log pi_(h, s^-g)] + const
 * (tree_jp_marginal), until no q moves by 1e-10 (at most 100 sweeps). mg [H]
 * is scratch. */
static void jp_sweeps(const tree_jp *j, int G, int H, const double *ll, const double *lw, double *q,
                      double *mg)
{
    for (int sweep = 0; sweep < 100; sweep++) {
        double moved = 0.0;
        for (int g = 0; g < G; g++) {
            tree_jp_marginal(G, H, g, q, j->n, j->keys, j->d, j->base_t, mg);
            double mx = -INFINITY, z = 0.0;
            for (int h = 0; h < H; h++) {
                mg[h] += ll[g * H + h] - lw[g * H + h];
                mx = fmax(mx, mg[h]);
            }
            for (int h = 0; h < H; h++) {
                mg[h] = exp(mg[h] - mx);
                z += mg[h];
            }
            for (int h = 0; h < H; h++) {
                double v = mg[h] / z;
                moved = fmax(moved, fabs(v - q[g * H + h]));
                q[g * H + h] = v;
            }
        }
        if (moved < 1e-10)
            break;
    }
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
 * KL_w, KL_s of the joint against the uniform prior over H^G paths). Under the
 * joint path prior (w->jp.on) the sum of -log H is E log pi_s instead, KL_s is
 * sum q (log q - E log pi_s), and q(s_t) is added to the next counts of q(pi).
 * -1 when out of memory (the joint prior's table), else 0. */
static int memo_frame(const vbm_memory *mem, tree_work *w, long t, double acc[3])
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
    const tree_jp *jp = w->jp.on ? &w->jp : NULL;
    for (int i = 0; i < n; i++) {
        double sc = 0.0;
        for (int g = 0; g < G; g++) {
            int h = mp[(size_t)i * G + g];
            sc += jp ? m->ll[g * H + h] - m->lw[g * H + h]
                     : m->ll[g * H + h] - m->lw[g * H + h] - logH;
        }
        ms[i] = jp ? sc + jp_elogpi(jp, mp + (size_t)i * G) : sc;
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
    if (jp) { /* the joint prior's proposals (README): every path when H^G <= k, else
                 the mode of the frame's mean field under the prior, then k draws,
                 alternately from the factorised (uniform-prior) marginals that the
                 groups' address step left and from that mean field */
        double *q = w->jp.qf;
        for (int g = 0; g < G; g++)
            for (int h = 0; h < H; h++)
                q[g * H + h] = w->groups[g].thetaT[(size_t)h * T + t];
        if (w->jp.HG <= (double)k) {
            for (int g = 0; g < G; g++)
                cand[g] = 0;
            for (;;) {
                double sc = jp_elogpi(jp, cand);
                for (int g = 0; g < G; g++)
                    sc += m->ll[g * H + cand[g]] - m->lw[g * H + cand[g]];
                memo_offer(m, G, t, cand, sc);
                int g = 0;
                while (g < G && ++cand[g] == H)
                    cand[g++] = 0;
                if (g == G)
                    break;
            }
        } else {
            jp_sweeps(jp, G, H, m->ll, m->lw, q, w->jp.mg);
            for (int p = 0; p <= k; p++) {
                double sc = 0.0;
                for (int g = 0; g < G; g++) {
                    int h = 0;
                    if (p == 0) {
                        for (int x = 1; x < H; x++)
                            if (q[g * H + x] > q[g * H + h])
                                h = x;
                    } else if (p % 2 == 0) {
                        h = (int)rng_categorical(&m->rng, q + (size_t)g * H, H);
                    } else { /* the factorised marginals: a product q under the joint
                                prior picks one mode, these still hold the others */
                        const double *th = w->groups[g].thetaT;
                        for (int x = 0; x < H; x++)
                            m->pq[x] = th[(size_t)x * T + t];
                        h = (int)rng_categorical(&m->rng, m->pq, H);
                    }
                    cand[g] = h;
                    sc += m->ll[g * H + h] - m->lw[g * H + h];
                }
                memo_offer(m, G, t, cand, sc + jp_elogpi(jp, cand));
            }
        }
    }
    /* proposals: the mean-field mode, then k draws from the mean-field marginals */
    for (int p = 0; !jp && p <= k; p++) {
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
            sc += jp ? m->ll[g * H + h] - m->lw[g * H + h]
                     : m->ll[g * H + h] - m->lw[g * H + h] - logH;
        }
        memo_offer(m, G, t, cand, jp ? sc + jp_elogpi(jp, cand) : sc);
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
    double ll = 0.0, lw = 0.0, kls = jp ? 0.0 : G * logH;
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
        if (jp) { /* KL(q(s_t) || p(s_t | pi)) in expectation: sum q (log q - E log pi_s) */
            kls += qi * (log(qi) - jp_elogpi(jp, mp + (size_t)i * G));
            long e = jp_insert(&w->jp, mp + (size_t)i * G);
            if (e < 0)
                return -1;
            w->jp.nxt[e] += qi;
        } else {
            kls += qi * log(qi);
        }
    }
    acc[0] += ll;
    acc[1] += lw;
    acc[2] += kls;
    return 0;
}

/* The mean-field step of frame t under the joint path prior: starting from
 * the frame's q(s) of the last address step (the groups' fresh q(s) on the
 * first), sweeps over the groups, each the exact coordinate update
 *   log q(s_t^g = h) = ll_g,h - KL_w,g,h + E_{q(s^-g)}[E log pi_(h, s^-g)] + const
 * (tree_jp_marginal), until no q moves by 1e-10 (at most 100 sweeps); then its
 * ELBO terms into acc (KL_s = sum_g sum_h q log q - E_q(s)[E log pi_s]) and its
 * expected path counts prod_g q(s^g) into the next counts of q(pi): every path
 * when H^G <= 4096, else the paths of mass >= 1e-9, at most 256 of them (the
 * rest is dropped: README). -1 when out of memory, else 0. */
static int jp_mf_frame(const vbm_memory *mem, tree_work *w, long t, double acc[3])
{
    tree_jp *j = &w->jp;
    int G = w->G, H = j->H, cg = mem->cg;
    long T = j->T;
    double s2 = mem->cfg.sigma_z2, c0 = -0.5 * cg * log(2.0 * VBM_PI * s2);
    double *q = j->qf, *mg = j->mg, *ll = w->memo.ll, *lw = w->memo.lw;
    for (int g = 0; g < G; g++) {
        const mixgroup_work *gw = &w->groups[g];
        for (int h = 0; h < H; h++) {
            ll[g * H + h] = c0 - gw->E[(size_t)h * T + t] / (2.0 * s2);
            lw[g * H + h] = gw->LW[(size_t)h * T + t];
            q[g * H + h] = j->have_prev ? j->qprev[((size_t)g * H + h) * T + t]
                                        : gw->thetaT[(size_t)h * T + t];
        }
    }
    jp_sweeps(j, G, H, ll, lw, q, mg);
    double l = 0.0, kw = 0.0, ks = 0.0;
    for (int g = 0; g < G; g++)
        for (int h = 0; h < H; h++) {
            double v = q[g * H + h];
            w->groups[g].thetaT[(size_t)h * T + t] = v;
            j->qprev[((size_t)g * H + h) * T + t] = v;
            if (v == 0.0)
                continue;
            l += v * ll[g * H + h];
            kw += v * lw[g * H + h];
            ks += v * log(v);
        }
    tree_jp_marginal(G, H, 0, q, j->n, j->keys, j->d, j->base_t, mg);
    for (int h = 0; h < H; h++)
        if (q[h] != 0.0)
            ks -= q[h] * mg[h];
    acc[0] += l;
    acc[1] += kw;
    acc[2] += ks;
    /* the expected counts: depth-first over the groups, pruned below the floor */
    double eps = j->HG <= 4096.0 ? 0.0 : 1e-9;
    long found = 0, most = j->HG <= 4096.0 ? 4096 : 256; /* the sweeps cost T x listed paths */
    int *p = j->path;
    double *mass = j->mass;
    int g = 0;
    p[0] = -1;
    mass[0] = 1.0;
    while (g >= 0) {
        if (++p[g] >= H || found >= most) {
            g--;
            continue;
        }
        double m = mass[g] * q[g * H + p[g]];
        if (m <= eps || m == 0.0)
            continue;
        if (g == G - 1) {
            long e = jp_insert(j, p);
            if (e < 0)
                return -1;
            j->nxt[e] += m;
            found++;
            continue;
        }
        mass[g + 1] = m;
        p[++g] = -1;
    }
    return 0;
}

static vbm_status t_address(const vbm_memory *mem, const prior_t *prior, void *work, vbm_elbo *elbo,
                            vbm_error *err)
{
    tree_work *w = work;
    if (!w->memo.on && !w->jp.on) { /* mean field (also every address step outside a fit) */
        for (int g = 0; g < w->G; g++) {
            vbm_status st = mixgroup_address(mem, prior, &w->groups[g], elbo, err);
            if (st)
                return st;
        }
        return VBM_OK;
    }
    /* memos or the joint prior: the groups' terms of q(Omega) and q(z) stand;
     * the terms of q(y) are those of q(s) over the memos (memo_frame) or of the
     * mean field under the joint prior (jp_mf_frame) */
    vbm_elbo mf = {0};
    double entropy = 0.0;
    for (int g = 0; g < w->G; g++) {
        vbm_status st = mixgroup_address(mem, prior, &w->groups[g], elbo ? &mf : NULL, err);
        if (st)
            return st;
        entropy += w->groups[g].cs.entropy;
    }
    if (w->jp.on)
        for (long i = 0; i < w->jp.n; i++)
            w->jp.nxt[i] = 0.0;
    double acc[3] = {0.0, 0.0, 0.0};
    long T = w->groups[0].T;
    for (long t = 0; t < T; t++) {
        int bad = w->memo.on ? memo_frame(mem, w, t, acc) : jp_mf_frame(mem, w, t, acc);
        if (bad)
            return vbm_fail(err, VBM_ENOMEM, NULL,
                            "out of memory for the joint path prior's counts");
    }
    if (w->jp.on && !w->memo.on)
        w->jp.have_prev = 1;
    if (elbo) {
        elbo->loglik_codes += acc[0] + entropy;
        elbo->kl_w += acc[1];
        elbo->kl_s += acc[2] + (w->jp.on ? w->jp.kl : 0.0);
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

void tree_jp_begin(void *work, const vbm_memory *mem, int append, int current)
{
    tree_work *w = work;
    tree_jp *j = &w->jp;
    if (mem->cfg.path_prior != VBM_PATH_JOINT || !j->slot)
        return;
    j->on = 1;
    for (long i = 0; i < mem->n_jpaths; i++) {
        long e = jp_insert(j, mem->jpaths + (size_t)i * w->G); /* room reserved: never -1 */
        if (e < 0)
            continue;
        if (append) {
            j->base[e] += mem->jp_counts[i];
            j->B += mem->jp_counts[i];
        } else if (current) {
            j->cnt[e] += mem->jp_counts[i];
        }
    }
    jp_refresh(j);
}

vbm_status tree_jp_commit(vbm_memory *mem, const void *work, vbm_error *err)
{
    const tree_work *w = work;
    const tree_jp *j = &w->jp;
    if (!j->on)
        return VBM_OK;
    long n = 0;
    for (long i = 0; i < j->n; i++)
        n += j->base[i] + j->cnt[i] > 0.0;
    int *p = vbm_calloc((size_t)(n > 0 ? n : 1) * w->G, sizeof(int));
    double *c = vbm_calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (!p || !c) {
        free(p);
        free(c);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for %ld joint path counts", n);
    }
    long k = 0;
    for (long i = 0; i < j->n; i++)
        if (j->base[i] + j->cnt[i] > 0.0) {
            memcpy(p + (size_t)k * w->G, j->keys + (size_t)i * w->G, sizeof(int) * w->G);
            c[k++] = j->base[i] + j->cnt[i];
        }
    free(mem->jpaths);
    free(mem->jp_counts);
    mem->jpaths = p;
    mem->jp_counts = c;
    mem->n_jpaths = n;
    return VBM_OK;
}

/* The M-step of every group, then (joint path prior) q(pi) <- Dirichlet(alpha +
 * base + the counts of the current q(s)). */
static vbm_status t_update(vbm_memory *mem, const prior_t *prior, void *work, vbm_error *err)
{
    tree_work *w = work;
    for (int g = 0; g < w->G; g++) {
        vbm_status st = mixgroup_update(mem, prior, &w->groups[g], err);
        if (st)
            return st;
    }
    if (w->jp.on) {
        tree_jp *j = &w->jp;
        for (long i = 0; i < j->n; i++) {
            j->cnt[i] = j->nxt[i];
            j->nxt[i] = 0.0;
        }
        jp_refresh(j);
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
 * q(s_t) (proportional to exp(score)): joint paths from the frames' q(s).
 * Under the joint path prior: a path from q(pi)'s mean (the posterior
 * predictive), uniform with probability H^G alpha / (H^G alpha + N), else a
 * listed path with probability proportional to its count. */
static vbm_status t_sample(const vbm_memory *mem, long n, int cluster, rng_t *rng, double *out_z,
                           int *out_s, vbm_error *err)
{
    int G = mem->cfg.groups, H = mem->cfg.clusters, C = mem->cfg.code_size, k = mem->cfg.memo_k;
    double q[VBM_MAX_MEMO_K + 1];
    int joint = mem->cfg.path_prior == VBM_PATH_JOINT;
    double jprior = 0.0, jtot = 0.0; /* H^G alpha, and + the counts */
    if (joint) {
        jprior = pow((double)H, (double)G) * mem->cfg.path_alpha;
        jtot = jprior;
        for (long p = 0; p < mem->n_jpaths; p++)
            jtot += mem->jp_counts[p];
    }
    for (long i = 0; i < n; i++) {
        const int *mpath = NULL;
        int uniform = 0;
        if (cluster < 0 && joint) { /* q(pi)'s mean: (alpha + n_s) / (H^G alpha + N) */
            if (mem->n_jpaths == 0 || rng_uniform(rng) * jtot < jprior)
                uniform = 1;
            else
                mpath =
                    mem->jpaths + (size_t)rng_categorical(rng, mem->jp_counts, mem->n_jpaths) * G;
        } else if (cluster < 0 && k > 0 && mem->n_memos > 0) {
            long t = (long)rng_below(rng, (uint64_t)mem->n_memos);
            const double *ms = mem->memo_scores + (size_t)t * k;
            int m = mem->memo_n[t];
            for (int j = 0; j < m; j++)
                q[j] = exp(ms[j] - ms[0]);
            long j = m > 1 ? rng_categorical(rng, q, m) : 0;
            mpath = mem->memo_paths + ((size_t)t * k + (size_t)j) * G;
        }
        long p = (cluster < 0 && !mpath && !uniform && mem->n_paths > 0)
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

static void t_set_scratch(void *work, vbm_scratch *scratch)
{
    tree_work *w = work;
    for (int g = 0; g < w->G; g++)
        w->groups[g].scratch = scratch;
}

const model_ops tree_ops = {t_work_new,   t_work_free, t_init,      t_address,
                            t_update,     t_addresses, t_read_draw, t_sample,
                            t_set_solver, t_finish,    t_set_team,  t_set_scratch};
