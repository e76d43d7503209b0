/* temporal_export.c -- owns the binary export/import of a temporal memory (kind 5 of
 * proto/memory-format.md): explicit little-endian encoding, bit-exact doubles, every field
 * validated on import; and the clone built on them. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "memory/bytes.h"
#include "memory/temporal.h"

static const unsigned char TM_MAGIC[8] = {'V', 'B', 'M', 'E', 'M', 'P', 'S', 'T'};
#define TM_FORMAT_VERSION 1u
#define TM_KIND           5u

vbm_status vbm_temporal_export(const vbm_temporal *m, unsigned char **buf, size_t *len,
                               vbm_error *err)
{
    bytes_wbuf b = {0};
    const vbm_temporal_config *c;
    size_t D, K;

    if (m == NULL || buf == NULL || len == NULL)
        return vbm_fail(err, VBM_EINVAL, "memory", "is NULL");
    c = &m->cfg;
    D = (size_t)m->D;
    K = (size_t)m->K;
    bytes_put(&b, TM_MAGIC, 8);
    bytes_put_u64(&b, TM_FORMAT_VERSION);
    bytes_put_u64(&b, TM_KIND);
    bytes_put_u64(&b, (uint64_t)c->code_size);
    bytes_put_u64(&b, (uint64_t)c->components);
    bytes_put_u64(&b, (uint64_t)c->attributes);
    bytes_put_u64(&b, (uint64_t)c->lambda_grid);
    bytes_put_u64(&b, (uint64_t)c->vbe_temporal);
    bytes_put_u64(&b, (uint64_t)m->fitted);
    bytes_put_u64(&b, (uint64_t)m->nseq);
    bytes_put_f64(&b, c->pi0);
    bytes_put_f64(&b, c->u_T[0][0]);
    bytes_put_f64(&b, c->u_T[0][1]);
    bytes_put_f64(&b, c->u_T[1][0]);
    bytes_put_f64(&b, c->u_T[1][1]);
    bytes_put_f64(&b, c->sigma_a2);
    bytes_put_f64(&b, c->lam_eta);
    bytes_put_f64(&b, c->lam_f);
    bytes_put_f64(&b, c->lam_g);
    bytes_put_f64(&b, c->lam_h);
    bytes_put_f64(&b, c->rho_d);
    bytes_put_f64(&b, c->rho_e);
    bytes_put_f64(&b, c->gamma0);
    bytes_put_f64(&b, c->gamma_max);
    bytes_put_f64(&b, m->last_fe);
    bytes_put_f64(&b, m->fe_const);
    bytes_put_f64s(&b, m->mw, D * K);
    bytes_put_f64s(&b, m->Sw, D * K * K);
    bytes_put_f64s(&b, m->ldJw, D);
    bytes_put_f64s(&b, m->gamma, K);
    bytes_put_f64s(&b, m->rd, D);
    bytes_put_f64s(&b, m->re, D);
    bytes_put_f64s(&b, m->ut, 4);
    bytes_put_f64s(&b, m->lam, 4 * K);
    bytes_put_f64s(&b, m->acc.N, 4);
    bytes_put_f64(&b, m->acc.ntr);
    bytes_put_f64(&b, m->acc.nfr);
    bytes_put_f64s(&b, m->acc.Saa, K);
    bytes_put_f64s(&b, m->acc.Scr, K);
    bytes_put_f64s(&b, m->acc.Spr, K);
    bytes_put_f64s(&b, m->acc.R, K * K);
    bytes_put_f64s(&b, m->acc.r, D * K);
    bytes_put_f64s(&b, m->acc.yy, D);
    if (b.oom) {
        free(b.p);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory exporting a temporal memory");
    }
    *buf = b.p;
    *len = b.len;
    return VBM_OK;
}

static vbm_status tm_bad(vbm_error *err, const char *what)
{
    return vbm_fail(err, VBM_EFORMAT, NULL, "temporal memory import: %s", what);
}

vbm_status vbm_temporal_import(const unsigned char *buf, size_t len, vbm_temporal **out,
                               vbm_error *err)
{
    bytes_rbuf r = {buf, len, 8};
    uint64_t ver, kind, D, P, Q, G, vbe, fitted, nseq;
    vbm_temporal_config c;
    vbm_temporal *m = NULL;
    vbm_error cerr;
    double last_fe, fe_const, need;
    size_t K;

    if (out == NULL)
        return vbm_fail(err, VBM_EINVAL, "out", "is NULL");
    *out = NULL;
    if (!buf || len < 8 || memcmp(buf, TM_MAGIC, 8) != 0)
        return tm_bad(err, "bad magic (not a vbmem memory)");
    memset(&c, 0, sizeof c);
    if (bytes_get_u64(&r, &ver) || ver != TM_FORMAT_VERSION)
        return tm_bad(err, "unsupported format version");
    if (bytes_get_u64(&r, &kind))
        return tm_bad(err, "header is truncated");
    if (kind != TM_KIND)
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "temporal memory import: kind %llu is not a temporal memory (5)",
                        (unsigned long long)kind);
    if (bytes_get_u64(&r, &D) || bytes_get_u64(&r, &P) || bytes_get_u64(&r, &Q)
        || bytes_get_u64(&r, &G) || bytes_get_u64(&r, &vbe) || bytes_get_u64(&r, &fitted)
        || bytes_get_u64(&r, &nseq) || bytes_get_f64(&r, &c.pi0) || bytes_get_f64(&r, &c.u_T[0][0])
        || bytes_get_f64(&r, &c.u_T[0][1]) || bytes_get_f64(&r, &c.u_T[1][0])
        || bytes_get_f64(&r, &c.u_T[1][1]) || bytes_get_f64(&r, &c.sigma_a2)
        || bytes_get_f64(&r, &c.lam_eta) || bytes_get_f64(&r, &c.lam_f)
        || bytes_get_f64(&r, &c.lam_g) || bytes_get_f64(&r, &c.lam_h) || bytes_get_f64(&r, &c.rho_d)
        || bytes_get_f64(&r, &c.rho_e) || bytes_get_f64(&r, &c.gamma0)
        || bytes_get_f64(&r, &c.gamma_max) || bytes_get_f64(&r, &last_fe)
        || bytes_get_f64(&r, &fe_const))
        return tm_bad(err, "header is truncated");
    if (D > VBM_MAX_CODE_SIZE || P > 64 || Q > 16 || G > 100000 || vbe > 1 || fitted > 1
        || nseq > (uint64_t)VBM_MAX_FRAMES)
        return tm_bad(err, "header sizes out of range");
    c.code_size = (int)D;
    c.components = (int)P;
    c.attributes = (int)Q;
    c.lambda_grid = (int)G;
    c.vbe_temporal = (int)vbe;
    if (vbm_temporal_config_check(&c, &cerr) != VBM_OK)
        return vbm_fail(err, VBM_EFORMAT, NULL, "temporal memory import: %s: %s", cerr.field,
                        cerr.msg);
    if (!isfinite(fe_const) || (!isfinite(last_fe) && !isnan(last_fe)))
        return tm_bad(err, "a free energy is infinite");
    K = (size_t)P * Q;
    /* every remaining byte is accounted for: check the total before allocating */
    need = 8.0
           * ((double)D * K + (double)D * K * K + D + K + 2.0 * D + 4 + 4.0 * K + 4 + 2 + 3.0 * K
              + (double)K * K + (double)D * K + D);
    if (need != (double)(len - r.off))
        return tm_bad(err, "body length does not match the header");
    {
        vbm_status st = vbm_temporal_create(&c, &m, &cerr);
        if (st != VBM_OK)
            return st == VBM_ENOMEM ? vbm_fail(err, st, NULL, "%s", cerr.msg)
                                    : tm_bad(err, cerr.msg);
    }
    m->fitted = (int)fitted;
    m->nseq = (long)nseq;
    m->last_fe = last_fe;
    m->fe_const = fe_const;
    if (bytes_get_f64s(&r, m->mw, D * K) || bytes_get_f64s(&r, m->Sw, D * K * K)
        || bytes_get_f64s(&r, m->ldJw, D) || bytes_get_f64s(&r, m->gamma, K)
        || bytes_get_f64s(&r, m->rd, D) || bytes_get_f64s(&r, m->re, D)
        || bytes_get_f64s(&r, m->ut, 4) || bytes_get_f64s(&r, m->lam, 4 * K)
        || bytes_get_f64s(&r, m->acc.N, 4) || bytes_get_f64s(&r, &m->acc.ntr, 1)
        || bytes_get_f64s(&r, &m->acc.nfr, 1) || bytes_get_f64s(&r, m->acc.Saa, K)
        || bytes_get_f64s(&r, m->acc.Scr, K) || bytes_get_f64s(&r, m->acc.Spr, K)
        || bytes_get_f64s(&r, m->acc.R, K * K) || bytes_get_f64s(&r, m->acc.r, D * K)
        || bytes_get_f64s(&r, m->acc.yy, D)) {
        vbm_temporal_free(m);
        return tm_bad(err, "the body holds a non-finite value");
    }
    for (size_t k = 0; k < D; k++) {
        const double *S = m->Sw + k * K * K;
        if (!(m->rd[k] > 0 && m->re[k] > 0 && m->acc.yy[k] >= 0)) {
            vbm_temporal_free(m);
            return tm_bad(err, "a Gamma parameter of q(rho) is not positive");
        }
        for (size_t i = 0; i < K; i++)
            for (size_t j = 0; j < K; j++)
                if ((i == j && !(S[i * K + i] > 0)) || S[i * K + j] != S[j * K + i]) {
                    vbm_temporal_free(m);
                    return tm_bad(err, "a covariance of q(W) is not symmetric with a positive "
                                       "diagonal");
                }
    }
    for (size_t i = 0; i < K; i++)
        if (!(m->gamma[i] > 0)) {
            vbm_temporal_free(m);
            return tm_bad(err, "an ARD precision is not positive");
        }
    for (int i = 0; i < 4; i++)
        if (!(m->ut[i] > 0) || !(m->acc.N[i] >= 0)) {
            vbm_temporal_free(m);
            return tm_bad(err, "a Dirichlet count of q(T) is not positive");
        }
    if (!(m->acc.ntr >= 0 && m->acc.nfr >= 0 && m->acc.nfr <= (double)VBM_MAX_FRAMES)) {
        vbm_temporal_free(m);
        return tm_bad(err, "the frame counts are out of range");
    }
    temporal_refresh(m);
    *out = m;
    return VBM_OK;
}

vbm_status vbm_temporal_clone(const vbm_temporal *m, vbm_temporal **out, vbm_error *err)
{
    unsigned char *buf = NULL;
    size_t len = 0;
    vbm_status st;

    if (out == NULL)
        return vbm_fail(err, VBM_EINVAL, "out", "is NULL");
    *out = NULL;
    if ((st = vbm_temporal_export(m, &buf, &len, err)) != VBM_OK)
        return st;
    st = vbm_temporal_import(buf, len, out, err);
    free(buf);
    return st;
}

size_t vbm_temporal_bytes(const vbm_temporal *m)
{
    size_t D, K, G;

    if (m == NULL)
        return 0;
    D = (size_t)m->D;
    K = (size_t)m->K;
    G = (size_t)m->G;
    return sizeof *m
           + sizeof(double)
                 * (D * K * 2 + D * K * K + 6 * D + 12 * K + 2 * K * K + 6 * G + D * K + 3 * K + D);
}
