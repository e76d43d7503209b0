/* export.c -- the binary export/import of a whole memory (layout documented in
 * proto/memory-format.md): explicit little-endian encoding, bit-exact doubles,
 * every field validated on import. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "memory_impl.h"

static const unsigned char MAGIC[8] = {'V', 'B', 'M', 'E', 'M', 'P', 'S', 'T'};
#define FORMAT_VERSION 1u
/* Version 2 = version 1 + the tree's memos (written only when memo_k > 0, so
 * every memory without memos keeps version 1's bytes). */
#define FORMAT_VERSION_MEMOS 2u
/* Version 3 = version 2 (its memo fields present, memo_k 0 allowed) + the joint
 * path prior (path_prior, path_alpha, the q(pi) counts), written only when
 * path_prior is joint, so every other memory keeps version 1's or 2's bytes. */
#define FORMAT_VERSION_JOINT 3u

vbm_status vbm_export(const vbm_memory *m, unsigned char **buf, size_t *len, vbm_error *err)
{
    bytes_wbuf b = {0};
    const vbm_config *c = &m->cfg;
    size_t K = c->rows, C = c->code_size, GH = (size_t)c->groups * c->clusters;
    int memos = c->memo_k > 0;
    long entries = 0;
    for (long i = 0; i < m->n_memos; i++)
        entries += m->memo_n[i];
    bytes_put(&b, MAGIC, 8);
    int joint = c->path_prior == VBM_PATH_JOINT;
    bytes_put_u64(&b, joint ? FORMAT_VERSION_JOINT : memos ? FORMAT_VERSION_MEMOS : FORMAT_VERSION);
    bytes_put_u64(&b, (uint64_t)c->kind);
    bytes_put_u64(&b, (uint64_t)c->code_size);
    bytes_put_u64(&b, (uint64_t)c->rows);
    bytes_put_u64(&b, (uint64_t)c->clusters);
    bytes_put_u64(&b, (uint64_t)c->groups);
    bytes_put_u64(&b, (uint64_t)c->shift);
    bytes_put_u64(&b, (uint64_t)c->retain_max);
    bytes_put_f64(&b, c->sigma_z2);
    bytes_put_f64(&b, c->u0);
    bytes_put_f64(&b, c->sigma2_b0);
    bytes_put_f64(&b, c->s_floor);
    bytes_put_f64(&b, c->dkm_addr_var);
    bytes_put_u64(&b, (uint64_t)m->frames);
    bytes_put_f64(&b, m->last_elbo);
    bytes_put_u64(&b, (uint64_t)m->n_paths);
    bytes_put_u64(&b, (uint64_t)m->n_codes);
    if (memos || joint) {
        bytes_put_u64(&b, (uint64_t)c->memo_k);
        bytes_put_u64(&b, (uint64_t)m->n_memos);
        bytes_put_u64(&b, (uint64_t)entries);
    }
    if (joint) {
        bytes_put_u64(&b, (uint64_t)c->path_prior);
        bytes_put_f64(&b, c->path_alpha);
        bytes_put_u64(&b, (uint64_t)m->n_jpaths);
    }
    bytes_put_f64s(&b, m->R0, K * C);
    bytes_put_f64s(&b, m->U0, K * K);
    bytes_put_f64s(&b, m->mu_b0, C);
    bytes_put_f64s(&b, m->R, GH * K * m->cg);
    bytes_put_f64s(&b, m->U, GH * K * K);
    bytes_put_f64s(&b, m->mu_b, GH * m->cg);
    bytes_put_f64s(&b, m->s2_b, GH);
    for (long i = 0; i < m->n_paths; i++) {
        for (int g = 0; g < c->groups; g++)
            bytes_put_u64(&b, (uint64_t)m->paths[(size_t)i * c->groups + g]);
        bytes_put_f64(&b, m->path_counts[i]);
    }
    bytes_put_f64s(&b, m->codes_mu, (size_t)m->n_codes * C);
    bytes_put_f64s(&b, m->codes_s2, (size_t)m->n_codes * C);
    for (long i = 0; memos && i < m->n_memos; i++) {
        int n = m->memo_n[i];
        bytes_put_u64(&b, (uint64_t)n);
        for (int j = 0; j < n; j++) {
            size_t e = (size_t)i * c->memo_k + (size_t)j;
            for (int g = 0; g < c->groups; g++)
                bytes_put_u64(&b, (uint64_t)m->memo_paths[e * c->groups + g]);
            bytes_put_f64(&b, m->memo_scores[e]);
        }
    }
    for (long i = 0; joint && i < m->n_jpaths; i++) {
        for (int g = 0; g < c->groups; g++)
            bytes_put_u64(&b, (uint64_t)m->jpaths[(size_t)i * c->groups + g]);
        bytes_put_f64(&b, m->jp_counts[i]);
    }
    if (b.oom) {
        free(b.p);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory exporting a memory");
    }
    *buf = b.p;
    *len = b.len;
    return VBM_OK;
}

static vbm_status bad(vbm_error *err, const char *what, int rc)
{
    return vbm_fail(err, VBM_EFORMAT, NULL, "memory import: %s %s", what,
                    rc == -2 ? "holds a non-finite value" : "is truncated");
}

/* The checks of a posterior block's U that the JSON form makes (memform_check_spd
 * in src/wire/memory.c, the same arithmetic): diagonal > 0, symmetric within
 * 1e-8 sqrt(U_ii U_jj), every Cholesky pivot > 0 and finite. work holds K*K
 * doubles. Returns 0 or -1. */
static int import_spd(const double *U, size_t K, double *work)
{
    for (size_t i = 0; i < K; i++)
        if (!(U[i * K + i] > 0))
            return -1;
    for (size_t i = 0; i < K; i++)
        for (size_t j = 0; j < i; j++)
            if (fabs(U[i * K + j] - U[j * K + i]) > 1e-8 * sqrt(U[i * K + i] * U[j * K + j]))
                return -1;
    for (size_t j = 0; j < K; j++) {
        double d = U[j * K + j];
        for (size_t k = 0; k < j; k++)
            d -= work[j * K + k] * work[j * K + k];
        if (!(d > 0) || !isfinite(d))
            return -1;
        work[j * K + j] = sqrt(d);
        for (size_t i = j + 1; i < K; i++) {
            double a = U[i * K + j];
            for (size_t k = 0; k < j; k++)
                a -= work[i * K + k] * work[j * K + k];
            work[i * K + j] = a / work[j * K + j];
        }
    }
    return 0;
}

/* The posterior's rules of the JSON form (src/wire/memory.c), so that every memory
 * that imports has a JSON form that decodes: each block's U symmetric positive
 * definite; with a shift, sigma2_b > 0; without, mu_b and sigma2_b 0. */
static vbm_status import_check_posterior(const vbm_memory *m, vbm_error *err)
{
    size_t K = m->cfg.rows, GH = (size_t)m->cfg.groups * m->cfg.clusters, cg = m->cg;
    double *work = vbm_calloc(K * K, sizeof(double));
    vbm_status st = VBM_OK;

    if (!work)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    for (size_t gh = 0; !st && gh < GH; gh++) {
        if (import_spd(m->U + gh * K * K, K, work) != 0)
            st = vbm_fail(err, VBM_EFORMAT, NULL,
                          "memory import: U of block %zu is not symmetric positive definite", gh);
        else if (m->cfg.shift && !(m->s2_b[gh] > 0))
            st = vbm_fail(err, VBM_EFORMAT, NULL,
                          "memory import: s2_b[%zu] must be > 0 with a shift", gh);
        for (size_t j = 0; !st && !m->cfg.shift && j < cg; j++)
            if (m->mu_b[gh * cg + j] != 0)
                st = vbm_fail(err, VBM_EFORMAT, NULL,
                              "memory import: mu_b of block %zu must be 0 without a shift", gh);
        if (!st && !m->cfg.shift && m->s2_b[gh] != 0)
            st = vbm_fail(err, VBM_EFORMAT, NULL,
                          "memory import: s2_b[%zu] must be 0 without a shift", gh);
    }
    free(work);
    return st;
}

/* Read the n memos of version 2 into m (memo_k and G from m's config): each
 * holds 1..memo_k entries, clusters below H, finite scores sorted best first,
 * no path twice. VBM_EFORMAT naming the memo, VBM_ENOMEM. */
static vbm_status import_memos(bytes_rbuf *r, vbm_memory *m, long n, vbm_error *err)
{
    int k = m->cfg.memo_k, G = m->cfg.groups, H = m->cfg.clusters;
    m->memo_n = vbm_calloc((size_t)n, sizeof(int));
    m->memo_paths = vbm_calloc((size_t)n * k * G, sizeof(int));
    m->memo_scores = vbm_calloc((size_t)n * k, sizeof(double));
    if (!m->memo_n || !m->memo_paths || !m->memo_scores)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for %ld memos", n);
    m->n_memos = n;
    for (size_t i = 0; i < (size_t)n * k * G; i++)
        m->memo_paths[i] = -1;
    for (long i = 0; i < n; i++) {
        uint64_t cnt = 0;
        if (bytes_get_u64(r, &cnt) || cnt < 1 || cnt > (uint64_t)k)
            return vbm_fail(err, VBM_EFORMAT, NULL,
                            "memory import: memo %ld holds no entry or more than memo_k", i);
        m->memo_n[i] = (int)cnt;
        for (int j = 0; j < (int)cnt; j++) {
            size_t e = (size_t)i * k + (size_t)j;
            int *p = m->memo_paths + e * G;
            for (int g = 0; g < G; g++) {
                uint64_t v = 0;
                if (bytes_get_u64(r, &v) || v >= (uint64_t)H)
                    return vbm_fail(err, VBM_EFORMAT, NULL,
                                    "memory import: memo %ld entry %d names a cluster >= H", i, j);
                p[g] = (int)v;
            }
            double sc = 0.0;
            if (bytes_get_f64(r, &sc) || !isfinite(sc) || (j > 0 && sc > m->memo_scores[e - 1]))
                return vbm_fail(err, VBM_EFORMAT, NULL,
                                "memory import: memo %ld entry %d has a non-finite or unsorted "
                                "score",
                                i, j);
            m->memo_scores[e] = sc;
            for (int u = 0; u < j; u++)
                if (memcmp(m->memo_paths + ((size_t)i * k + u) * G, p, sizeof(int) * G) == 0)
                    return vbm_fail(err, VBM_EFORMAT, NULL,
                                    "memory import: memo %ld holds entry %d twice", i, j);
        }
    }
    return VBM_OK;
}

/* Sort order of joint paths stored as G + 1 ints: G, then the path. */
static int jp_cmp(const void *a, const void *b)
{
    const int *x = a, *y = b;
    int G = x[0];
    for (int g = 1; g <= G; g++)
        if (x[g] != y[g])
            return x[g] < y[g] ? -1 : 1;
    return 0;
}

/* Read the n q(pi) counts of version 3 into m: each path's G clusters below H,
 * its count finite and > 0, no path twice. VBM_EFORMAT, VBM_ENOMEM. */
static vbm_status import_jpaths(bytes_rbuf *r, vbm_memory *m, long n, vbm_error *err)
{
    int G = m->cfg.groups, H = m->cfg.clusters;
    m->jpaths = vbm_calloc((size_t)n * G, sizeof(int));
    m->jp_counts = vbm_calloc((size_t)n, sizeof(double));
    int *sorted = vbm_calloc((size_t)n * (G + 1), sizeof(int));
    if (!m->jpaths || !m->jp_counts || !sorted) {
        free(sorted);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for %ld joint path counts", n);
    }
    m->n_jpaths = n;
    vbm_status st = VBM_OK;
    for (long i = 0; !st && i < n; i++) {
        for (int g = 0; !st && g < G; g++) {
            uint64_t v = 0;
            if (bytes_get_u64(r, &v) || v >= (uint64_t)H)
                st = vbm_fail(err, VBM_EFORMAT, NULL,
                              "memory import: joint path %ld names a cluster >= H", i);
            else
                m->jpaths[(size_t)i * G + g] = (int)v;
        }
        double c = 0.0;
        if (!st && (bytes_get_f64(r, &c) || !isfinite(c) || !(c > 0.0)))
            st = vbm_fail(err, VBM_EFORMAT, NULL,
                          "memory import: joint path count %ld is not finite and > 0", i);
        m->jp_counts[i] = c;
    }
    if (!st) { /* no path twice: sorted neighbours differ */
        for (long i = 0; i < n; i++) {
            sorted[(size_t)i * (G + 1)] = G;
            memcpy(sorted + (size_t)i * (G + 1) + 1, m->jpaths + (size_t)i * G, sizeof(int) * G);
        }
        qsort(sorted, (size_t)n, sizeof(int) * (G + 1), jp_cmp);
        for (long i = 1; !st && i < n; i++)
            if (jp_cmp(sorted + (size_t)(i - 1) * (G + 1), sorted + (size_t)i * (G + 1)) == 0)
                st =
                    vbm_fail(err, VBM_EFORMAT, NULL, "memory import: a joint path is listed twice");
    }
    free(sorted);
    return st;
}

vbm_status vbm_import(const unsigned char *buf, size_t len, vbm_memory **out, vbm_error *err)
{
    bytes_rbuf r = {buf, len, 0};
    if (!buf || len < 8 || memcmp(buf, MAGIC, 8) != 0)
        return vbm_fail(err, VBM_EFORMAT, NULL, "memory import: bad magic (not a vbmem memory)");
    r.off = 8;
    uint64_t ver, kind, C, K, H, G, shift, retain, frames, npaths, ncodes;
    uint64_t memo_k = 0, nmemos = 0, nentries = 0, path_prior = 0, njp = 0;
    double path_alpha = 1.0;
    vbm_config c;
    memset(&c, 0, sizeof c);
    double last;
    if (bytes_get_u64(&r, &ver)
        || (ver != FORMAT_VERSION && ver != FORMAT_VERSION_MEMOS && ver != FORMAT_VERSION_JOINT))
        return vbm_fail(err, VBM_EFORMAT, NULL, "memory import: unsupported format version");
    if (bytes_get_u64(&r, &kind) || bytes_get_u64(&r, &C) || bytes_get_u64(&r, &K)
        || bytes_get_u64(&r, &H) || bytes_get_u64(&r, &G) || bytes_get_u64(&r, &shift)
        || bytes_get_u64(&r, &retain) || bytes_get_f64(&r, &c.sigma_z2) || bytes_get_f64(&r, &c.u0)
        || bytes_get_f64(&r, &c.sigma2_b0) || bytes_get_f64(&r, &c.s_floor)
        || bytes_get_f64(&r, &c.dkm_addr_var) || bytes_get_u64(&r, &frames)
        || bytes_get_f64(&r, &last) || bytes_get_u64(&r, &npaths) || bytes_get_u64(&r, &ncodes))
        return vbm_fail(err, VBM_EFORMAT, NULL, "memory import: header is truncated");
    if (ver >= FORMAT_VERSION_MEMOS
        && (bytes_get_u64(&r, &memo_k) || bytes_get_u64(&r, &nmemos)
            || bytes_get_u64(&r, &nentries)))
        return vbm_fail(err, VBM_EFORMAT, NULL, "memory import: header is truncated");
    if (ver == FORMAT_VERSION_JOINT
        && (bytes_get_u64(&r, &path_prior) || bytes_get_f64(&r, &path_alpha)
            || bytes_get_u64(&r, &njp)))
        return vbm_fail(err, VBM_EFORMAT, NULL, "memory import: header is truncated");
    if (ver >= FORMAT_VERSION_MEMOS
        && ((ver == FORMAT_VERSION_MEMOS && memo_k < 1) || memo_k > VBM_MAX_MEMO_K
            || nmemos > (uint64_t)VBM_MAX_FRAMES * 1000 || nentries < nmemos
            || nentries > nmemos * memo_k))
        return vbm_fail(err, VBM_EFORMAT, NULL, "memory import: memo sizes out of range");
    if (ver == FORMAT_VERSION_JOINT
        && (path_prior != VBM_PATH_JOINT || njp > (uint64_t)VBM_MAX_FRAMES * 1000))
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "memory import: joint path prior fields out of range");
    if (kind == 5)
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "memory import: kind 5 is a temporal memory (vbm_temporal_import)");
    if (kind > VBM_DKM || C > VBM_MAX_CODE_SIZE || K > VBM_MAX_ROWS || H > VBM_MAX_CLUSTERS
        || G > VBM_MAX_CODE_SIZE || shift > 1 || retain > (uint64_t)VBM_MAX_FRAMES
        || frames > (uint64_t)VBM_MAX_FRAMES * 1000 || ncodes > (uint64_t)VBM_MAX_FRAMES
        || npaths > (uint64_t)VBM_MAX_FRAMES)
        return vbm_fail(err, VBM_EFORMAT, NULL, "memory import: header sizes out of range");
    c.kind = (vbm_kind)kind;
    c.code_size = (int)C;
    c.rows = (int)K;
    c.clusters = (int)H;
    c.groups = (int)G;
    c.shift = (int)shift;
    c.retain_max = (long)retain;
    c.memo_k = (int)memo_k;
    c.path_prior = (int)path_prior;
    c.path_alpha = path_alpha;
    vbm_error cerr;
    vbm_status st = vbm_config_check(&c, &cerr);
    if (st)
        return vbm_fail(err, VBM_EFORMAT, NULL, "memory import: %s", cerr.msg);
    if (ncodes > retain)
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "memory import: more retained codes than retain_max");
    /* every remaining byte is accounted for: check the total before allocating */
    size_t GH = (size_t)G * H, cg = C / G;
    double need = 8.0
                  * ((double)K * C + K * K + C + GH * K * cg + GH * K * K + GH * cg + GH
                     + (double)npaths * (G + 1) + 2.0 * ncodes * C + (double)nmemos
                     + (double)nentries * (G + 1) + (double)njp * (G + 1));
    if (need != (double)(len - r.off))
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "memory import: body length does not match the header");
    /* the prior through vbm_memory_create, which checks it as the JSON form's
     * decoder does (R0 finite, U0 symmetric positive definite) */
    vbm_memory *m = NULL;
    double *R0 = vbm_calloc((size_t)K * C, sizeof(double)),
           *U0 = vbm_calloc((size_t)K * K, sizeof(double));
    int rc;
    if (!R0 || !U0)
        st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    else if ((rc = bytes_get_f64s(&r, R0, K * C)))
        st = bad(err, "R0", rc);
    else if ((rc = bytes_get_f64s(&r, U0, K * K)))
        st = bad(err, "U0", rc);
    else if ((st = vbm_memory_create(&c, R0, U0, &m, &cerr)) != VBM_OK)
        st = st == VBM_ENOMEM
                 ? vbm_fail(err, st, NULL, "%s", cerr.msg)
                 : vbm_fail(err, VBM_EFORMAT, NULL, "memory import: %s: %s", cerr.field, cerr.msg);
    free(R0);
    free(U0);
    if (st)
        return st;
    m->frames = (long)frames;
    m->last_elbo = last;
    if ((rc = bytes_get_f64s(&r, m->mu_b0, C)))
        st = bad(err, "mu_b0", rc);
    else if ((rc = bytes_get_f64s(&r, m->R, GH * K * cg)))
        st = bad(err, "R", rc);
    else if ((rc = bytes_get_f64s(&r, m->U, GH * K * K)))
        st = bad(err, "U", rc);
    else if ((rc = bytes_get_f64s(&r, m->mu_b, GH * cg)))
        st = bad(err, "mu_b", rc);
    else if ((rc = bytes_get_f64s(&r, m->s2_b, GH)))
        st = bad(err, "s2_b", rc);
    for (size_t i = 0; !st && i < GH; i++)
        if (m->s2_b[i] < 0.0)
            st = vbm_fail(err, VBM_EFORMAT, NULL, "memory import: s2_b[%zu] is negative", i);
    if (!st)
        st = import_check_posterior(m, err);
    if (!st && npaths > 0) {
        m->paths = vbm_calloc((size_t)npaths * G, sizeof(int));
        m->path_counts = vbm_calloc((size_t)npaths, sizeof(double));
        if (!m->paths || !m->path_counts)
            st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
        m->n_paths = (long)npaths;
        for (size_t i = 0; !st && i < npaths; i++) {
            for (size_t g = 0; !st && g < G; g++) {
                uint64_t v = 0;
                if (bytes_get_u64(&r, &v))
                    st =
                        vbm_fail(err, VBM_EFORMAT, NULL, "memory import: truncated in path %zu", i);
                else if (v >= H)
                    st = vbm_fail(err, VBM_EFORMAT, NULL,
                                  "memory import: path %zu names cluster %llu >= H", i,
                                  (unsigned long long)v);
                else
                    m->paths[i * G + g] = (int)v;
            }
            if (!st
                && (bytes_get_f64(&r, &m->path_counts[i]) || !(m->path_counts[i] > 0.0)
                    || !isfinite(m->path_counts[i])))
                st =
                    vbm_fail(err, VBM_EFORMAT, NULL, "memory import: path count %zu is invalid", i);
        }
    }
    if (!st && ncodes > 0) {
        m->codes_mu = vbm_calloc((size_t)ncodes * C, sizeof(double));
        m->codes_s2 = vbm_calloc((size_t)ncodes * C, sizeof(double));
        if (!m->codes_mu || !m->codes_s2)
            st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
        m->n_codes = (long)ncodes;
        if (!st && (rc = bytes_get_f64s(&r, m->codes_mu, ncodes * C)))
            st = bad(err, "codes_mu", rc);
        if (!st && (rc = bytes_get_f64s(&r, m->codes_s2, ncodes * C)))
            st = bad(err, "codes_s2", rc);
        for (size_t i = 0; !st && i < ncodes * C; i++)
            if (m->codes_s2[i] < 0.0)
                st = vbm_fail(err, VBM_EFORMAT, NULL,
                              "memory import: retained variance %zu is negative", i);
    }
    if (!st && nmemos > 0)
        st = import_memos(&r, m, (long)nmemos, err);
    if (!st && njp > 0)
        st = import_jpaths(&r, m, (long)njp, err);
    if (st) {
        vbm_memory_free(m);
        return st;
    }
    *out = m;
    return VBM_OK;
}
