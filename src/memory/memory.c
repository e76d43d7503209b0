/* memory.c -- the shared memory interface: configuration, creation, the
 * generic VB driver (write, append, refit), ELBO evaluation, addressing,
 * reads, samples and resizing, dispatching to the model files. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <strings.h>

#include "dkm.h"
#include "gaussian.h"
#include "memory_impl.h"
#include "numerics/linalg.h"
#include "scratch.h"
#include "tree.h"

static const char *const kind_names[] = {"gaussian", "categorical", "mixture", "tree", "dkm"};

const char *vbm_kind_name(vbm_kind kind)
{
    if ((int)kind < 0 || (int)kind > VBM_DKM)
        return "unknown";
    return kind_names[kind];
}

vbm_status vbm_kind_parse(const char *name, vbm_kind *out, vbm_error *err)
{
    for (int i = 0; i <= VBM_DKM; i++)
        if (name && strcmp(name, kind_names[i]) == 0) {
            *out = (vbm_kind)i;
            return VBM_OK;
        }
    return vbm_fail(
        err, VBM_EINVAL, NULL,
        "unknown memory kind \"%s\" (expected gaussian, categorical, mixture, tree or dkm)",
        name ? name : "(null)");
}

void vbm_config_default(vbm_kind kind, int code_size, vbm_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->kind = kind;
    cfg->code_size = code_size;
    cfg->clusters = 1;
    cfg->groups = 1;
    cfg->dkm_addr_var = 0.3; /* the paper author's code; the text gives no value */
    cfg->path_alpha = 1.0;   /* read only with path_prior joint */
    if (kind == VBM_MIXTURE || kind == VBM_TREE) {
        cfg->clusters = 10; /* H, K, G: App. F.2.2 */
        cfg->groups = kind == VBM_TREE ? 2 : 1;
        cfg->u0 = 0.4; /* U0, Sigma_b0, sigma_z^2: the author's code */
        vbm_config_set_rows(cfg, 6);
        cfg->shift = 1;
        cfg->s_floor = 1e-6; /* vbmem's own; 0 is Theorem 4's q(s) update exactly */
    } else {
        cfg->rows = 32;
        cfg->u0 = 1.0;
        cfg->sigma2_b0 = 1.0;
        cfg->sigma_z2 = 1.0;
    }
}

/* The K-following defaults of the mixture and tree (the constants of the paper
 * author's code: sigma_z^2 = 0.2 K, Sigma_b0 = 0.4 K I). */
static double default_sigma_z2(int K)
{
    return 0.2 * K;
}
static double default_sigma2_b0(int K)
{
    return 0.4 * K;
}

void vbm_config_set_rows(vbm_config *cfg, int K)
{
    cfg->rows = K;
    if (cfg->kind == VBM_MIXTURE || cfg->kind == VBM_TREE) {
        cfg->sigma2_b0 = default_sigma2_b0(K);
        cfg->sigma_z2 = default_sigma_z2(K);
    }
}

/* cfg->rows was changed from old_K: move sigma_z2 and sigma2_b0 of a mixture or
 * tree to the new K's defaults when they hold, bit for bit, the defaults of
 * old_K (nothing records whether a value was set explicitly; one that differs
 * from the default is kept, see vbm_resize in vbmem.h). */
static void config_rows_follow(vbm_config *cfg, int old_K)
{
    if (cfg->kind != VBM_MIXTURE && cfg->kind != VBM_TREE)
        return;
    if (cfg->sigma_z2 == default_sigma_z2(old_K))
        cfg->sigma_z2 = default_sigma_z2(cfg->rows);
    if (cfg->sigma2_b0 == default_sigma2_b0(old_K))
        cfg->sigma2_b0 = default_sigma2_b0(cfg->rows);
}

static int pos_finite(double x)
{
    return isfinite(x) && x > 0.0;
}

vbm_status vbm_config_check(const vbm_config *c, vbm_error *err)
{
    if ((int)c->kind < 0 || (int)c->kind > VBM_DKM)
        return vbm_fail(err, VBM_EINVAL, "kind", "unknown memory kind %d", (int)c->kind);
    if (c->code_size < 1 || c->code_size > VBM_MAX_CODE_SIZE)
        return vbm_fail(err, VBM_EINVAL, "code_size", "%d is outside [1, %d]", c->code_size,
                        VBM_MAX_CODE_SIZE);
    if (c->rows < 1 || c->rows > VBM_MAX_ROWS)
        return vbm_fail(err, VBM_EINVAL, "rows", "K = %d is outside [1, %d]", c->rows,
                        VBM_MAX_ROWS);
    if (c->clusters < 1 || c->clusters > VBM_MAX_CLUSTERS)
        return vbm_fail(err, VBM_EINVAL, "clusters", "H = %d is outside [1, %d]", c->clusters,
                        VBM_MAX_CLUSTERS);
    if (c->groups < 1 || c->groups > c->code_size || c->code_size % c->groups != 0)
        return vbm_fail(err, VBM_EINVAL, "groups",
                        "G = %d must be >= 1 and divide the code size %d", c->groups, c->code_size);
    int clustered = c->kind == VBM_MIXTURE || c->kind == VBM_TREE;
    if (!clustered && c->clusters != 1)
        return vbm_fail(err, VBM_EINVAL, "clusters",
                        "the %s model has no clusters (H must be 1, got %d)",
                        vbm_kind_name(c->kind), c->clusters);
    if (c->kind != VBM_TREE && c->groups != 1)
        return vbm_fail(err, VBM_EINVAL, "groups",
                        "only the tree model has code partitions (G must be 1, got %d)", c->groups);
    if (clustered && !c->shift)
        return vbm_fail(err, VBM_EINVAL, "shift", "the %s model always has cluster shifts",
                        vbm_kind_name(c->kind));
    if ((c->kind == VBM_CATEGORICAL || c->kind == VBM_DKM) && c->shift)
        return vbm_fail(err, VBM_EINVAL, "shift", "not available for the %s model",
                        vbm_kind_name(c->kind));
    if (!(c->sigma_z2 >= VBM_MIN_SIGMA_Z2 && c->sigma_z2 <= VBM_MAX_SIGMA_Z2))
        return vbm_fail(err, VBM_EINVAL, "sigma_z2", "%g is outside [%g, %g]", c->sigma_z2,
                        VBM_MIN_SIGMA_Z2, VBM_MAX_SIGMA_Z2);
    if (!pos_finite(c->u0))
        return vbm_fail(err, VBM_EINVAL, "u0", "must be a finite number > 0");
    if (!pos_finite(c->sigma2_b0))
        return vbm_fail(err, VBM_EINVAL, "sigma2_b0", "must be a finite number > 0");
    if (!pos_finite(c->dkm_addr_var))
        return vbm_fail(err, VBM_EINVAL, "dkm_addr_var", "must be a finite number > 0");
    if (!(c->s_floor >= 0.0 && c->s_floor < 1.0))
        return vbm_fail(err, VBM_EINVAL, "s_floor", "must be in [0, 1)");
    if (c->memo_k < 0 || c->memo_k > VBM_MAX_MEMO_K)
        return vbm_fail(err, VBM_EINVAL, "memo_k", "%d is outside [0, %d]", c->memo_k,
                        VBM_MAX_MEMO_K);
    if (c->memo_k > 0 && c->kind != VBM_TREE)
        return vbm_fail(err, VBM_EINVAL, "memo_k",
                        "only the tree model keeps memos (kind is %s; memo_k must be 0)",
                        vbm_kind_name(c->kind));
    if (c->path_prior != VBM_PATH_FACTORISED && c->path_prior != VBM_PATH_JOINT)
        return vbm_fail(err, VBM_EINVAL, "path_prior", "unknown value %d", c->path_prior);
    if (c->path_prior == VBM_PATH_JOINT && c->kind != VBM_TREE)
        return vbm_fail(err, VBM_EINVAL, "path_prior",
                        "only the tree model has joint paths (kind is %s)", vbm_kind_name(c->kind));
    if (c->path_prior == VBM_PATH_JOINT && !(pos_finite(c->path_alpha) && c->path_alpha >= 1e-6))
        return vbm_fail(err, VBM_EINVAL, "path_alpha", "must be a finite number >= 1e-6");
    if (c->path_prior == VBM_PATH_JOINT
        && (double)c->groups * log((double)c->clusters) + log(c->path_alpha) > 600.0)
        return vbm_fail(err, VBM_EINVAL, "path_prior",
                        "H^G path_alpha = %d^%d x %g is too large for the joint prior", c->clusters,
                        c->groups, c->path_alpha);
    if (c->retain_max < 0 || c->retain_max > VBM_MAX_FRAMES)
        return vbm_fail(err, VBM_EINVAL, "retain_max", "%ld is outside [0, %ld]", c->retain_max,
                        VBM_MAX_FRAMES);
    double cells = (double)c->clusters * c->rows * (double)(c->code_size / c->groups) * c->groups;
    if (cells > (double)VBM_MAX_ELEMENTS / 4
        || (double)c->clusters * c->groups * c->rows * c->rows > (double)VBM_MAX_ELEMENTS / 4)
        return vbm_fail(err, VBM_ENOMEM, NULL, "memory of H = %d, K = %d, C = %d is too large",
                        c->clusters, c->rows, c->code_size);
    return VBM_OK;
}

void vbm_memory_free(vbm_memory *m)
{
    if (!m)
        return;
    free(m->R0);
    free(m->U0);
    free(m->mu_b0);
    free(m->R);
    free(m->U);
    free(m->mu_b);
    free(m->s2_b);
    free(m->paths);
    free(m->path_counts);
    free(m->codes_mu);
    free(m->codes_s2);
    free(m->memo_n);
    free(m->memo_paths);
    free(m->memo_scores);
    free(m->jpaths);
    free(m->jp_counts);
    free(m);
}

/* Allocate the arrays of a memory for its config (everything zero). */
static vbm_status memory_alloc(const vbm_config *cfg, vbm_memory **out, vbm_error *err)
{
    vbm_memory *m = vbm_calloc(1, sizeof *m);
    if (!m)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    m->cfg = *cfg;
    m->cg = cfg->code_size / cfg->groups;
    size_t K = cfg->rows, C = cfg->code_size, GH = (size_t)cfg->groups * cfg->clusters;
    m->R0 = vbm_calloc(K * C, sizeof(double));
    m->U0 = vbm_calloc(K * K, sizeof(double));
    m->mu_b0 = vbm_calloc(C, sizeof(double));
    m->R = vbm_calloc(GH * K * m->cg, sizeof(double));
    m->U = vbm_calloc(GH * K * K, sizeof(double));
    m->mu_b = vbm_calloc(GH * m->cg, sizeof(double));
    m->s2_b = vbm_calloc(GH, sizeof(double));
    m->last_elbo = NAN;
    if (!m->R0 || !m->U0 || !m->mu_b0 || !m->R || !m->U || !m->mu_b || !m->s2_b) {
        vbm_memory_free(m);
        return vbm_fail(err, VBM_ENOMEM, NULL,
                        "out of memory for a memory of H = %d, K = %d, C = %d", cfg->clusters,
                        cfg->rows, cfg->code_size);
    }
    *out = m;
    return VBM_OK;
}

void memory_reset_posterior(vbm_memory *m)
{
    int G = m->cfg.groups, H = m->cfg.clusters, K = m->cfg.rows, cg = m->cg, C = m->cfg.code_size;
    for (int g = 0; g < G; g++)
        for (int h = 0; h < H; h++) {
            size_t gh = (size_t)g * H + h;
            for (int k = 0; k < K; k++)
                memcpy(m->R + (gh * K + k) * cg, m->R0 + (size_t)k * C + (size_t)g * cg,
                       sizeof(double) * cg);
            memcpy(m->U + gh * K * K, m->U0, sizeof(double) * K * K);
            if (m->cfg.shift) {
                memcpy(m->mu_b + gh * cg, m->mu_b0 + (size_t)g * cg, sizeof(double) * cg);
                m->s2_b[gh] = m->cfg.sigma2_b0;
            }
        }
}

/* Record VBM_EINVAL at the element base[i][j] with the message text. */
static vbm_status fail_at(vbm_error *err, const char *base, long i, long j, const char *text)
{
    char field[VBM_FIELD_LEN];
    snprintf(field, sizeof field, "%s[%ld][%ld]", base, i, j);
    return vbm_fail(err, VBM_EINVAL, field, "%s", text);
}

vbm_status vbm_memory_create(const vbm_config *cfg, const double *R0, const double *U0,
                             vbm_memory **out, vbm_error *err)
{
    vbm_status st = vbm_config_check(cfg, err);
    if (st)
        return st;
    size_t K = cfg->rows, C = cfg->code_size;
    if (R0)
        for (size_t i = 0; i < K * C; i++)
            if (!isfinite(R0[i]))
                return fail_at(err, "prior.R0", (long)(i / C), (long)(i % C),
                               "not a finite number");
    if (U0)
        for (size_t i = 0; i < K; i++)
            for (size_t j = 0; j < K; j++) {
                double a = U0[i * K + j], b = U0[j * K + i];
                if (!isfinite(a))
                    return fail_at(err, "prior.U0", (long)i, (long)j, "not a finite number");
                if (fabs(a - b) > 1e-12 * (fabs(a) + fabs(b)))
                    return vbm_fail(err, VBM_EINVAL, "prior.U0", "not symmetric at [%zu][%zu]", i,
                                    j);
            }
    vbm_memory *m;
    st = memory_alloc(cfg, &m, err);
    if (st)
        return st;
    if (R0)
        memcpy(m->R0, R0, sizeof(double) * K * C);
    if (U0)
        memcpy(m->U0, U0, sizeof(double) * K * K);
    else
        for (size_t k = 0; k < K; k++)
            m->U0[k * K + k] = cfg->u0;
    double *L = vbm_calloc(K * K, sizeof(double));
    if (!L) {
        vbm_memory_free(m);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    }
    memcpy(L, m->U0, sizeof(double) * K * K);
    int info = la_chol((int)K, L);
    free(L);
    if (info != 0) {
        vbm_memory_free(m);
        return vbm_fail(err, VBM_EINVAL, "prior.U0", "not positive definite");
    }
    memory_reset_posterior(m);
    *out = m;
    return VBM_OK;
}

static int dup_array(double **dst, const double *src, size_t n)
{
    if (!src) {
        *dst = NULL;
        return 0;
    }
    *dst = vbm_calloc(n, sizeof(double));
    if (!*dst)
        return -1;
    memcpy(*dst, src, n * sizeof(double));
    return 0;
}

vbm_status vbm_memory_clone(const vbm_memory *src, vbm_memory **out, vbm_error *err)
{
    vbm_memory *m;
    vbm_status st = memory_alloc(&src->cfg, &m, err);
    if (st)
        return st;
    size_t K = src->cfg.rows, C = src->cfg.code_size,
           GH = (size_t)src->cfg.groups * src->cfg.clusters;
    memcpy(m->R0, src->R0, K * C * sizeof(double));
    memcpy(m->U0, src->U0, K * K * sizeof(double));
    memcpy(m->mu_b0, src->mu_b0, C * sizeof(double));
    memcpy(m->R, src->R, GH * K * src->cg * sizeof(double));
    memcpy(m->U, src->U, GH * K * K * sizeof(double));
    memcpy(m->mu_b, src->mu_b, GH * src->cg * sizeof(double));
    memcpy(m->s2_b, src->s2_b, GH * sizeof(double));
    m->frames = src->frames;
    m->last_elbo = src->last_elbo;
    m->n_paths = src->n_paths;
    m->n_codes = src->n_codes;
    int fail = 0;
    if (src->n_paths > 0) {
        m->paths = vbm_calloc((size_t)src->n_paths * src->cfg.groups, sizeof(int));
        fail |= !m->paths;
        if (m->paths)
            memcpy(m->paths, src->paths, (size_t)src->n_paths * src->cfg.groups * sizeof(int));
        fail |= dup_array(&m->path_counts, src->path_counts, (size_t)src->n_paths);
    }
    if (src->n_codes > 0) {
        fail |= dup_array(&m->codes_mu, src->codes_mu, (size_t)src->n_codes * C);
        fail |= dup_array(&m->codes_s2, src->codes_s2, (size_t)src->n_codes * C);
    }
    if (src->n_memos > 0 && !fail) {
        size_t n = (size_t)src->n_memos, k = (size_t)src->cfg.memo_k, G = (size_t)src->cfg.groups;
        m->n_memos = src->n_memos;
        m->memo_n = vbm_calloc(n, sizeof(int));
        m->memo_paths = vbm_calloc(n * k * G, sizeof(int));
        fail |= !m->memo_n || !m->memo_paths;
        fail |= dup_array(&m->memo_scores, src->memo_scores, n * k);
        if (!fail) {
            memcpy(m->memo_n, src->memo_n, n * sizeof(int));
            memcpy(m->memo_paths, src->memo_paths, n * k * G * sizeof(int));
        }
    }
    if (src->n_jpaths > 0 && !fail) {
        size_t n = (size_t)src->n_jpaths, G = (size_t)src->cfg.groups;
        m->n_jpaths = src->n_jpaths;
        m->jpaths = vbm_calloc(n * G, sizeof(int));
        fail |= !m->jpaths;
        fail |= dup_array(&m->jp_counts, src->jp_counts, n);
        if (!fail)
            memcpy(m->jpaths, src->jpaths, n * G * sizeof(int));
    }
    if (fail) {
        vbm_memory_free(m);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory cloning a memory");
    }
    *out = m;
    return VBM_OK;
}

void memory_replace(vbm_memory *dst, vbm_memory *src)
{
    vbm_memory tmp = *dst;
    *dst = *src;
    *src = tmp;
    vbm_memory_free(src);
}

vbm_status vbm_codes_check(const vbm_memory *mem, const vbm_codes *codes, vbm_error *err)
{
    if (!codes || !codes->mu)
        return vbm_fail(err, VBM_EINVAL, "codes", "missing");
    if (codes->T < 1)
        return vbm_fail(err, VBM_EINVAL, "codes", "T = %ld, need at least one frame", codes->T);
    if (codes->T > VBM_MAX_FRAMES)
        return vbm_fail(err, VBM_EINVAL, "codes", "T = %ld exceeds %ld frames", codes->T,
                        VBM_MAX_FRAMES);
    if (codes->C != mem->cfg.code_size)
        return vbm_fail(err, VBM_EINVAL, "codes", "code size %d does not match the memory's %d",
                        codes->C, mem->cfg.code_size);
    size_t n = (size_t)codes->T * codes->C;
    int s2_ok = 1;
    if (codes->s2) {
        int neg = 0;
        for (size_t i = 0; i < n; i++)
            neg |= codes->s2[i] < 0.0;
        s2_ok = !neg && la_all_finite((long)n, codes->s2);
    }
    if (s2_ok && la_all_finite((long)n, codes->mu))
        return VBM_OK;
    for (long t = 0; t < codes->T; t++) /* find the first bad value for the message */
        for (int c = 0; c < codes->C; c++) {
            size_t i = (size_t)t * codes->C + c;
            if (!isfinite(codes->mu[i]))
                return fail_at(err, "codes.mu", t, c, "not a finite number");
            if (codes->s2 && !(isfinite(codes->s2[i]) && codes->s2[i] >= 0.0))
                return fail_at(err, "codes.sigma2", t, c, "variance must be finite and >= 0");
        }
    return VBM_OK;
}

void vbm_write_opts_default(vbm_write_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_iter = 50;
    o->init = VBM_INIT_AUTO;
}

vbm_team *vbm_team_new(int threads)
{
    return threads < 1 ? NULL : team_new(threads);
}

void vbm_team_free(vbm_team *team)
{
    team_free(team);
}

void vbm_write_result_free(vbm_write_result *res)
{
    if (!res)
        return;
    free(res->trace);
    vbm_addresses_free(&res->addr);
    memset(res, 0, sizeof *res);
}

static const model_ops *ops_for(vbm_kind kind)
{
    switch (kind) {
    case VBM_CATEGORICAL: return &categorical_ops;
    case VBM_MIXTURE: return &mixture_ops;
    case VBM_TREE: return &tree_ops;
    default: return &gaussian_ops; /* gaussian and dkm memories */
    }
}

static void elbo_finish(vbm_elbo *e, long T)
{
    e->T = T;
    e->total = e->loglik_codes - e->kl_w - e->kl_s - e->kl_M - e->kl_b;
    e->per_frame = e->total / (double)T;
}

/* Tree pseudocounts: add the hard-assignment path (argmax_h q(s^g)) of every frame. */
static vbm_status paths_add(vbm_memory *mem, const vbm_addresses *a, int reset, vbm_error *err)
{
    int G = a->G, H = a->H;
    if (reset) {
        free(mem->paths);
        free(mem->path_counts);
        mem->paths = NULL;
        mem->path_counts = NULL;
        mem->n_paths = 0;
    }
    long cap = mem->n_paths + a->T;
    int *paths = vbm_calloc((size_t)cap * G, sizeof(int));
    double *counts = vbm_calloc((size_t)cap, sizeof(double));
    int *cur = vbm_calloc((size_t)G, sizeof(int));
    if (!paths || !counts || !cur) {
        free(paths);
        free(counts);
        free(cur);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for tree pseudocounts");
    }
    long n = mem->n_paths;
    if (n > 0) {
        memcpy(paths, mem->paths, sizeof(int) * (size_t)n * G);
        memcpy(counts, mem->path_counts, sizeof(double) * (size_t)n);
    }
    for (long t = 0; t < a->T; t++) {
        for (int g = 0; g < G; g++) {
            const double *s = a->s + ((size_t)t * G + g) * H;
            int best = 0;
            for (int h = 1; h < H; h++)
                if (s[h] > s[best])
                    best = h;
            cur[g] = best;
        }
        long i;
        for (i = 0; i < n; i++)
            if (memcmp(paths + (size_t)i * G, cur, sizeof(int) * G) == 0)
                break;
        if (i == n) {
            memcpy(paths + (size_t)n * G, cur, sizeof(int) * G);
            n++;
        }
        counts[i] += 1.0;
    }
    free(cur);
    free(mem->paths);
    free(mem->path_counts);
    mem->paths = paths;
    mem->path_counts = counts;
    mem->n_paths = n;
    return VBM_OK;
}

/* Retained codes <- (replace ? none : old) + new, keeping the newest retain_max. */
static vbm_status retain_codes(vbm_memory *mem, const vbm_codes *codes, int replace, vbm_error *err)
{
    long cap = mem->cfg.retain_max;
    if (cap <= 0)
        return VBM_OK;
    int C = mem->cfg.code_size;
    long old = replace ? 0 : mem->n_codes, total = old + codes->T;
    long keep = total < cap ? total : cap, skip = total - keep;
    double *mu = vbm_calloc((size_t)keep * C, sizeof(double));
    double *s2 = vbm_calloc((size_t)keep * C, sizeof(double));
    if (!mu || !s2) {
        free(mu);
        free(s2);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory retaining %ld codes", keep);
    }
    for (long i = skip, j = 0; i < total; i++, j++) {
        double *dm = mu + (size_t)j * C, *ds = s2 + (size_t)j * C;
        if (i < old) {
            memcpy(dm, mem->codes_mu + (size_t)i * C, sizeof(double) * C);
            memcpy(ds, mem->codes_s2 + (size_t)i * C, sizeof(double) * C);
        } else {
            long t = i - old;
            memcpy(dm, codes->mu + (size_t)t * C, sizeof(double) * C);
            if (codes->s2)
                memcpy(ds, codes->s2 + (size_t)t * C, sizeof(double) * C);
        }
    }
    free(mem->codes_mu);
    free(mem->codes_s2);
    mem->codes_mu = mu;
    mem->codes_s2 = s2;
    mem->n_codes = keep;
    return VBM_OK;
}

/* The generic coordinate-ascent driver on `mem` (already a private copy). */
/* Monotonic seconds, for the optional time budget of a fit. */
static double fit_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* memo_from: a tree fit with memos starts frame t's memo from mem's memo
 * memo_from + t (refit; -1: empty memos); append: the fit's memos are added to
 * mem's (else they replace them). */
static vbm_status vb_fit(vbm_memory *mem, const vbm_codes *codes, const prior_t *prior,
                         vbm_init init, const vbm_write_opts *opts, long memo_from, int append,
                         vbm_write_result *res, vbm_error *err)
{
    const model_ops *ops = ops_for(mem->cfg.kind);
    void *work = NULL;
    vbm_status st = ops->work_new(mem, codes, &work, err);
    if (st)
        return st;
    int memos = mem->cfg.kind == VBM_TREE && mem->cfg.memo_k > 0;
    if (memos)
        tree_memo_seed(work, mem, memo_from);
    int joint = mem->cfg.kind == VBM_TREE && mem->cfg.path_prior == VBM_PATH_JOINT;
    if (joint)
        tree_jp_begin(work, mem, append, init == VBM_INIT_CURRENT);
    if (ops->set_solver)
        ops->set_solver(work, (int)opts->solver);
    if (ops->set_team && opts->team) {
        st = ops->set_team(work, opts->team, err);
        if (st) {
            ops->work_free(work);
            return st;
        }
    }
    /* the scratch, when the fit gets it, is held until the workspace is freed below */
    vbm_scratch *scratch =
        ops->set_scratch && scratch_acquire(opts->scratch) ? opts->scratch : NULL;
    if (scratch)
        ops->set_scratch(work, scratch);
    int max_iter = opts->max_iter < 0 ? 0 : opts->max_iter;
    res->trace = vbm_calloc((size_t)max_iter + 2, sizeof(double));
    if (!res->trace) {
        ops->work_free(work);
        if (scratch)
            scratch_release(scratch);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    }
    rng_t rng;
    rng_seed(&rng, opts->seed);
    double t0 = fit_clock();
    if (mem->cfg.kind == VBM_DKM) {
        vbm_elbo e0 = {0};
        st = ops->address(mem, prior, work, &e0, err); /* ELBO of the starting memory */
        elbo_finish(&e0, codes->T);
        res->trace[0] = e0.per_frame;
        /* The DKM writer's fixed point: with R identically 0 every address mean
         * (R R^T + I)^{-1} R z is 0 and every rank-one update is 0, so nothing
         * would ever be written. Unless the caller asked for the prior's mean
         * (VBM_INIT_PRIOR), start such a memory from R drawn from p(M), as the
         * VB kinds' `auto` init does. A nonzero R (a prior mean given at
         * creation, or an earlier write) is kept as the writer's start. */
        if (!st && init != VBM_INIT_PRIOR && dkm_is_zero(mem))
            init_random_means(mem, prior, &rng);
        if (!st)
            st = dkm_run(mem, codes, work, err);
        vbm_elbo e = {0};
        if (!st)
            st = gaussian_elbo(mem, prior, work, &e, err);
        elbo_finish(&e, codes->T);
        res->elbo = e;
        res->trace[1] = e.per_frame;
        res->iterations = 1;
    } else {
        st = ops->init(mem, codes, prior, work, init, &rng, err);
        /* The ELBO is evaluated after every address step only when something reads it (the
         * tolerance test or the trace); otherwise only after the last one. */
        int every = opts->tol > 0.0 || opts->want_trace;
        for (int it = 0; !st; it++) {
            int out_of_time =
                it > 0 && opts->max_seconds > 0.0 && fit_clock() - t0 >= opts->max_seconds;
            int last = it == max_iter || out_of_time;
            vbm_elbo e = {0};
            st = ops->address(mem, prior, work, every || last ? &e : NULL, err);
            if (st)
                break;
            if (every || last) {
                elbo_finish(&e, codes->T);
                res->elbo = e;
                res->trace[it] = e.per_frame;
                if (!isfinite(e.total)) {
                    st =
                        vbm_fail(err, VBM_ENUMERIC, NULL, "ELBO is not finite at iteration %d", it);
                    break;
                }
                if (it > 0 && opts->tol > 0.0
                    && fabs(res->trace[it] - res->trace[it - 1])
                           <= opts->tol * fabs(res->trace[it])) {
                    res->converged = 1;
                    break;
                }
            }
            if (last) {
                res->time_limited = it < max_iter;
                break;
            }
            st = ops->update(mem, prior, work, err);
            if (!st)
                res->iterations++;
        }
        if (!st && ops->finish)
            ops->finish(mem, prior, work);
        if (!st && memos)
            st = tree_memo_commit(mem, work, append, err);
        if (!st && joint)
            st = tree_jp_commit(mem, work, err);
    }
    if (!st && (opts->want_addresses || mem->cfg.kind == VBM_TREE)) {
        st = ops->addresses(mem, work, &res->addr, err);
        if (!st && mem->cfg.kind == VBM_DKM) /* DKM keeps its own fixed-variance addresses */
            for (int k = 0; k < mem->cfg.rows; k++)
                res->addr.w_cov[(size_t)k * mem->cfg.rows + k] = mem->cfg.dkm_addr_var;
    }
    ops->work_free(work);
    if (scratch)
        scratch_release(scratch);
    return st;
}

/* The options a fit can be given; VBM_EINVAL names the bad one. */
static vbm_status write_opts_check(const vbm_write_opts *o, vbm_error *err)
{
    if (!(o->tol >= 0.0) || !isfinite(o->tol))
        return vbm_fail(err, VBM_EINVAL, "tol", "must be finite and >= 0");
    if (!(o->max_seconds >= 0.0) || !isfinite(o->max_seconds))
        return vbm_fail(err, VBM_EINVAL, "max_seconds", "must be finite and >= 0");
    if ((int)o->solver < VBM_SOLVER_AUTO || (int)o->solver > VBM_SOLVER_GRAM)
        return vbm_fail(err, VBM_EINVAL, "solver", "unknown value %d", (int)o->solver);
    if ((int)o->init < VBM_INIT_AUTO || (int)o->init > VBM_INIT_RANDOM)
        return vbm_fail(err, VBM_EINVAL, "init", "unknown value %d", (int)o->init);
    return VBM_OK;
}

/* write / append / refit share this: fit a private copy, then swap it in. */
static vbm_status fit_and_commit(vbm_memory *mem, const vbm_codes *codes, int online,
                                 int replace_codes, long memo_from, const vbm_write_opts *opts_in,
                                 vbm_write_result *res, vbm_error *err)
{
    vbm_write_opts opts;
    if (opts_in)
        opts = *opts_in;
    else
        vbm_write_opts_default(&opts);
    memset(res, 0, sizeof *res);
    vbm_status st = write_opts_check(&opts, err);
    if (st)
        return st;
    st = vbm_codes_check(mem, codes, err);
    if (st)
        return st;
    vbm_memory *work;
    st = vbm_memory_clone(mem, &work, err);
    if (st)
        return st;
    prior_t prior;
    st = online ? prior_from_posterior(work, &prior, err) : prior_from_base(work, &prior, err);
    if (st) {
        vbm_memory_free(work);
        return st;
    }
    vbm_init init = online ? VBM_INIT_CURRENT : opts.init;
    if (!online && work->cfg.kind == VBM_DKM)
        memory_reset_posterior(work);
    st = vb_fit(work, codes, &prior, init, &opts, memo_from, online, res, err);
    prior_free(&prior);
    if (!st && work->cfg.kind == VBM_TREE)
        st = paths_add(work, &res->addr, !online, err);
    if (!st)
        st = retain_codes(work, codes, replace_codes, err);
    if (st) {
        vbm_memory_free(work);
        vbm_write_result_free(res);
        return st;
    }
    if (!opts.want_addresses)
        vbm_addresses_free(&res->addr);
    if (!opts.want_trace) {
        free(res->trace);
        res->trace = NULL;
    }
    work->frames = online ? work->frames + codes->T : codes->T;
    work->last_elbo = res->elbo.per_frame;
    memory_replace(mem, work);
    return VBM_OK;
}

vbm_status vbm_write(vbm_memory *mem, const vbm_codes *codes, const vbm_write_opts *opts,
                     vbm_write_result *res, vbm_error *err)
{
    return fit_and_commit(mem, codes, 0, 1, -1, opts, res, err);
}

vbm_status vbm_append(vbm_memory *mem, const vbm_codes *codes, const vbm_write_opts *opts,
                      vbm_write_result *res, vbm_error *err)
{
    return fit_and_commit(mem, codes, 1, 0, -1, opts, res, err);
}

vbm_status vbm_refit(vbm_memory *mem, const vbm_codes *extra, const vbm_write_opts *opts,
                     vbm_write_result *res, vbm_error *err)
{
    memset(res, 0, sizeof *res);
    if (mem->n_codes == 0 && !extra)
        return vbm_fail(
            err, VBM_EINVAL, NULL,
            "refit: the memory retains no codes (set retain_max) and no new codes were given");
    int C = mem->cfg.code_size;
    if (extra) {
        vbm_status st = vbm_codes_check(mem, extra, err);
        if (st)
            return st;
    }
    long T = mem->n_codes + (extra ? extra->T : 0);
    double *mu = vbm_calloc((size_t)T * C, sizeof(double)),
           *s2 = vbm_calloc((size_t)T * C, sizeof(double));
    if (!mu || !s2) {
        free(mu);
        free(s2);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for %ld codes", T);
    }
    if (mem->n_codes) {
        memcpy(mu, mem->codes_mu, sizeof(double) * mem->n_codes * C);
        memcpy(s2, mem->codes_s2, sizeof(double) * mem->n_codes * C);
    }
    if (extra) {
        memcpy(mu + (size_t)mem->n_codes * C, extra->mu, sizeof(double) * extra->T * C);
        if (extra->s2)
            memcpy(s2 + (size_t)mem->n_codes * C, extra->s2, sizeof(double) * extra->T * C);
    }
    vbm_codes all = {T, C, mu, s2};
    /* the retained codes are the newest frames, whose memos are the newest memos */
    long memo_from =
        mem->n_codes > 0 && mem->n_memos >= mem->n_codes ? mem->n_memos - mem->n_codes : -1;
    vbm_status st = fit_and_commit(mem, &all, 0, 1, memo_from, opts, res, err);
    free(mu);
    free(s2);
    return st;
}

/* q(y) at its optimum given q(Omega), its ELBO, optionally the addresses and a read draw. */
static vbm_status address_op(const vbm_memory *mem, const vbm_codes *codes, vbm_elbo *out,
                             vbm_addresses *addr, rng_t *rng, double *out_z, vbm_error *err)
{
    vbm_status st = vbm_codes_check(mem, codes, err);
    if (st)
        return st;
    const model_ops *ops = ops_for(mem->cfg.kind);
    prior_t prior;
    st = prior_from_base(mem, &prior, err);
    if (st)
        return st;
    void *work = NULL;
    st = ops->work_new(mem, codes, &work, err);
    if (!st) {
        vbm_elbo e = {0};
        st = ops->address(mem, &prior, work, &e, err);
        elbo_finish(&e, codes->T);
        if (!st && out)
            *out = e;
        if (!st && addr)
            st = ops->addresses(mem, work, addr, err);
        if (!st && out_z)
            st = ops->read_draw(mem, work, rng, out_z, err);
        ops->work_free(work);
    }
    prior_free(&prior);
    return st;
}

vbm_status vbm_elbo_eval(const vbm_memory *mem, const vbm_codes *codes, vbm_elbo *out,
                         vbm_addresses *addr, vbm_error *err)
{
    return address_op(mem, codes, out, addr, NULL, NULL, err);
}

vbm_status vbm_address(const vbm_memory *mem, const vbm_codes *query, vbm_addresses *addr,
                       vbm_error *err)
{
    return address_op(mem, query, NULL, addr, NULL, NULL, err);
}

void vbm_read_opts_default(vbm_read_opts *o)
{
    o->mode = VBM_READ_SAMPLE;
}

/* The posterior-mean read from the public addresses a of T frames (as the
 * model's addresses op wrote them): for every frame and group g,
 *   z_g = sum_h q(s = h) (R_gh^T E[w | s = h] + mu_b,gh)
 * over every cluster (map = 0) or the most probable one alone (map = 1, ties:
 * the lowest h), the shift only when the model has one. For the models without
 * clusters (H = 1, q(s) = 1) this is R^T E[w] (+ mu_b), E[w] being q(w) for the
 * categorical model. Sums run in a fixed order: the result is deterministic. */
static void read_mean(const vbm_memory *mem, const vbm_addresses *a, int map, double *out_z)
{
    int G = mem->cfg.groups, H = mem->cfg.clusters, K = mem->cfg.rows, cg = mem->cg;
    int C = mem->cfg.code_size, shift = mem->cfg.shift;
    for (long t = 0; t < a->T; t++)
        for (int g = 0; g < G; g++) {
            const double *s = a->s + ((size_t)t * G + g) * H;
            double *z = out_z + (size_t)t * C + (size_t)g * cg;
            int best = 0;
            for (int h = 1; h < H; h++)
                if (s[h] > s[best])
                    best = h;
            for (int c = 0; c < cg; c++)
                z[c] = 0.0;
            for (int h = map ? best : 0; h < (map ? best + 1 : H); h++) {
                size_t gh = (size_t)g * H + h;
                const double *R = mem->R + gh * K * cg,
                             *w = a->w_mu + (((size_t)t * G + g) * H + h) * K;
                double p = map ? 1.0 : s[h];
                for (int c = 0; c < cg; c++) {
                    double v = shift ? mem->mu_b[gh * cg + c] : 0.0;
                    for (int k = 0; k < K; k++)
                        v += R[(size_t)k * cg + c] * w[k];
                    z[c] += p * v;
                }
            }
        }
}

vbm_status vbm_read(const vbm_memory *mem, const vbm_codes *query, const vbm_read_opts *opts,
                    uint64_t seed, double *out_z, vbm_addresses *addr, vbm_error *err)
{
    vbm_read_mode mode = opts != NULL ? opts->mode : VBM_READ_SAMPLE;

    if ((int)mode < VBM_READ_SAMPLE || (int)mode > VBM_READ_MEAN_MAP)
        return vbm_fail(err, VBM_EINVAL, "mode",
                        "unknown read mode %d (expected sample, mean or mean_map)", (int)mode);
    if (!out_z)
        return vbm_fail(err, VBM_EINVAL, NULL, "read: no output buffer");
    if (mode == VBM_READ_SAMPLE) {
        rng_t rng;
        rng_seed(&rng, seed);
        return address_op(mem, query, NULL, addr, &rng, out_z, err);
    }
    /* The mean modes: q(y) exactly as the sample read infers it, through the
     * model's address and addresses ops, then the mean of z under it. */
    vbm_addresses local = {0}, *a = addr ? addr : &local;
    vbm_status st = address_op(mem, query, NULL, a, NULL, NULL, err);
    if (st)
        return st;
    read_mean(mem, a, mode == VBM_READ_MEAN_MAP, out_z);
    vbm_addresses_free(&local);
    return VBM_OK;
}

vbm_status vbm_sample(const vbm_memory *mem, long n, uint64_t seed, int cluster, double *out_z,
                      int *out_s, vbm_error *err)
{
    if (n < 1 || n > VBM_MAX_FRAMES)
        return vbm_fail(err, VBM_EINVAL, "count", "%ld is outside [1, %ld]", n, VBM_MAX_FRAMES);
    if (cluster < -1 || cluster >= mem->cfg.clusters)
        return vbm_fail(err, VBM_EINVAL, "cluster", "%d is outside [0, %d)", cluster,
                        mem->cfg.clusters);
    if (!out_z)
        return vbm_fail(err, VBM_EINVAL, NULL, "sample: no output buffer");
    rng_t rng;
    rng_seed(&rng, seed);
    return ops_for(mem->cfg.kind)->sample(mem, n, cluster, &rng, out_z, out_s, err);
}

vbm_status vbm_resize(vbm_memory *mem, int new_H, int new_K, const vbm_write_opts *opts_in,
                      double *elbo_before, double *elbo_after, vbm_write_result *res,
                      vbm_error *err)
{
    vbm_write_opts opts;
    if (opts_in)
        opts = *opts_in;
    else
        vbm_write_opts_default(&opts);
    if (opts.init == VBM_INIT_CURRENT)
        opts.init = VBM_INIT_AUTO;
    memset(res, 0, sizeof *res);
    {
        vbm_status st0 = write_opts_check(&opts, err);
        if (st0)
            return st0;
    }
    vbm_config cfg = mem->cfg;
    if (new_H > 0)
        cfg.clusters = new_H;
    if (new_K > 0)
        cfg.rows = new_K;
    if (new_H < 0 || new_K < 0)
        return vbm_fail(err, VBM_EINVAL, NULL,
                        "resize: sizes must be >= 0 (0 keeps the current one)");
    config_rows_follow(&cfg, mem->cfg.rows);
    vbm_status st = vbm_config_check(&cfg, err);
    if (st)
        return st;
    int C = cfg.code_size, K = cfg.rows, oldK = mem->cfg.rows;
    /* The codes both memories are judged on. */
    long T;
    double *mu = NULL, *s2 = NULL;
    if (mem->n_codes > 0) {
        T = mem->n_codes;
    } else {
        T = mem->frames > 4L * cfg.clusters ? mem->frames : 4L * cfg.clusters;
        if (T > 100000)
            T = 100000;
    }
    mu = vbm_calloc((size_t)T * C, sizeof(double));
    if (!mu)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for %ld codes", T);
    if (mem->n_codes > 0) {
        s2 = vbm_calloc((size_t)T * C, sizeof(double));
        if (!s2) {
            free(mu);
            return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for %ld codes", T);
        }
        memcpy(mu, mem->codes_mu, sizeof(double) * T * C);
        memcpy(s2, mem->codes_s2, sizeof(double) * T * C);
    } else {
        st = vbm_sample(mem, T, opts.seed, -1, mu, NULL, err);
    }
    vbm_codes codes = {T, C, mu, s2};
    vbm_elbo before = {0};
    if (!st)
        st = vbm_elbo_eval(mem, &codes, &before, NULL, err);
    /* The new memory, with the base prior cut or extended to K rows. */
    double *R0 = vbm_calloc((size_t)K * C, sizeof(double)),
           *U0 = vbm_calloc((size_t)K * K, sizeof(double));
    vbm_memory *nm = NULL;
    if (!st && (!R0 || !U0))
        st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    if (!st) {
        int keep = K < oldK ? K : oldK;
        memcpy(R0, mem->R0, sizeof(double) * keep * C);
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++)
                U0[(size_t)i * K + j] = (i < keep && j < keep) ? mem->U0[(size_t)i * oldK + j]
                                                               : (i == j ? cfg.u0 : 0.0);
        st = vbm_memory_create(&cfg, R0, U0, &nm, err);
    }
    if (!st) {
        memcpy(nm->mu_b0, mem->mu_b0, sizeof(double) * C);
        long keep_max = nm->cfg.retain_max;
        if (mem->n_codes == 0)
            nm->cfg.retain_max = 0; /* pseudo-codes are never retained */
        st = fit_and_commit(nm, &codes, 0, 1, -1, &opts, res, err);
        nm->cfg.retain_max = keep_max;
    }
    free(R0);
    free(U0);
    free(mu);
    free(s2);
    if (st) {
        vbm_memory_free(nm);
        return st;
    }
    if (mem->n_codes == 0)
        nm->frames = mem->frames; /* pseudo-codes are not frames */
    if (elbo_before)
        *elbo_before = before.per_frame;
    if (elbo_after)
        *elbo_after = res->elbo.per_frame;
    memory_replace(mem, nm);
    return VBM_OK;
}
