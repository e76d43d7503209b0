/* rpm.c -- owns the rpm model file (kind "rpm" of proto/model-format.md: recognition layers,
 * factor parameterisation, GP prior) and RPM inference: recognition on every observation,
 * Gaussian factors, and the per-dimension GP posterior of gp.c. */
#define _POSIX_C_SOURCE 200809L
#include "nets/rpm.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nets/gp.h"
#include "nets/nets_internal.h"

/* Observations run through a recognition network in chunks of about this many floats of
 * activation. */
#define RPM_BATCH_FLOATS ((long)1 << 21)

typedef enum { RPM_PREC_SOFTPLUS = 0, RPM_PREC_EXP = 1 } rpm_precision;
typedef enum { RPM_K_RBF = 0, RPM_K_MATERN12 = 1 } rpm_kernel;

struct nets_rpm {
    nets_rpm_info info;
    sft_file file;
    nets_seq *nets; /* 1 (shared) or J recognition networks: [D] -> [2 L] */
    int n_nets;
    rpm_precision precision;
    double min_precision;
    rpm_kernel kernel;
    double *variance, *lengthscale; /* L each */
    double jitter, time_step;
    int subtract_marginals; /* 1: eta_0 - J eta_0^unc (seed 004); 0: the plain GP product */
};

/* ---- the header peek ---- */

int nets_file_is_rpm(const char *path)
{
    FILE *fp = fopen(path, "rb");
    unsigned char n8[8];
    int is = 0;
    if (!fp)
        return 0;
    if (fread(n8, 1, 8, fp) == 8) {
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--)
            n = n << 8 | n8[i];
        char *h = n >= 2 && n <= ST_MAX_HEADER ? malloc((size_t)n) : NULL;
        if (h && fread(h, 1, (size_t)n, fp) == (size_t)n) {
            json_t *root = json_loadb(h, (size_t)n, 0, NULL);
            const char *k = json_string_value(
                json_object_get(json_object_get(root, "__metadata__"), "vbmem.kind"));
            is = k && strcmp(k, "rpm") == 0;
            json_decref(root);
        }
        free(h);
    }
    fclose(fp);
    return is;
}

/* ---- metadata ---- */

static const char *const ARCH = "vbmem.architecture";

static vbm_status get_int(const json_t *o, const char *key, int lo, int hi, int *out,
                          vbm_error *err)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return vbm_fail(err, VBM_EFORMAT, NULL, "metadata %s: %s must be an integer in [%d, %d]",
                        ARCH, key, lo, hi);
    *out = (int)json_integer_value(v);
    return VBM_OK;
}

static vbm_status get_pos(const json_t *o, const char *where, const char *key, double *out,
                          vbm_error *err)
{
    const json_t *v = json_object_get(o, key);
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!(x > 0) || !isfinite(x))
        return vbm_fail(err, VBM_EFORMAT, NULL, "metadata %s: %s%s must be a positive number", ARCH,
                        where, key);
    *out = x;
    return VBM_OK;
}

/* A list of exactly L positive finite numbers at prior.<key>. */
static vbm_status get_pos_list(const json_t *o, const char *key, int L, double **out,
                               vbm_error *err)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_array(v) || json_array_size(v) != (size_t)L)
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "metadata %s: prior.%s must be a list of %d positive numbers (one per "
                        "latent dimension)",
                        ARCH, key, L);
    *out = malloc(sizeof(double) * (size_t)L);
    if (!*out)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    for (int l = 0; l < L; l++) {
        const json_t *e = json_array_get(v, (size_t)l);
        double x = json_is_number(e) ? json_number_value(e) : NAN;
        if (!(x > 0) || !isfinite(x))
            return vbm_fail(err, VBM_EFORMAT, NULL,
                            "metadata %s: prior.%s[%d] must be a positive number", ARCH, key, l);
        (*out)[l] = x;
    }
    return VBM_OK;
}

static vbm_status parse_arch(nets_rpm *m, const json_t *a, vbm_error *err)
{
    nets_rpm_info *in = &m->info;
    vbm_status st;
    if ((st = get_int(a, "factors", 1, RPM_MAX_FACTORS, &in->factors, err))
        || (st = get_int(a, "observation_size", 1, NETS_MAX_DIM, &in->obs_size, err))
        || (st = get_int(a, "latent_size", 1, RPM_MAX_LATENT, &in->latent, err))
        || (st = get_int(a, "min_steps", 1, GP_MAX_T, &in->min_steps, err))
        || (st = get_int(a, "max_steps", 1, GP_MAX_T, &in->max_steps, err)))
        return st;
    if (in->min_steps > in->max_steps)
        return vbm_fail(err, VBM_EFORMAT, NULL, "metadata %s: min_steps %d exceeds max_steps %d",
                        ARCH, in->min_steps, in->max_steps);
    int L = in->latent;

    /* the factors: what the recognition network's 2 L outputs mean */
    const json_t *f = json_object_get(a, "factor");
    if (!json_is_object(f))
        return vbm_fail(err, VBM_EFORMAT, NULL, "metadata %s: factor must be an object", ARCH);
    const char *par = json_string_value(json_object_get(f, "parameters"));
    if (!par || strcmp(par, "natural") != 0)
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "metadata %s: factor.parameters must be \"natural\"", ARCH);
    const char *prec = json_string_value(json_object_get(f, "precision"));
    if (prec && strcmp(prec, "softplus") == 0)
        m->precision = RPM_PREC_SOFTPLUS;
    else if (prec && strcmp(prec, "exp") == 0)
        m->precision = RPM_PREC_EXP;
    else
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "metadata %s: factor.precision must be \"softplus\" or \"exp\"", ARCH);
    const json_t *mp = json_object_get(f, "min_precision");
    m->min_precision = json_is_number(mp) ? json_number_value(mp) : NAN;
    if (!(m->min_precision >= 0) || !isfinite(m->min_precision))
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "metadata %s: factor.min_precision must be a number >= 0", ARCH);

    /* the GP prior, one per latent dimension */
    const json_t *p = json_object_get(a, "prior");
    if (!json_is_object(p))
        return vbm_fail(err, VBM_EFORMAT, NULL, "metadata %s: prior must be an object", ARCH);
    const char *kern = json_string_value(json_object_get(p, "kernel"));
    if (kern && strcmp(kern, "rbf") == 0)
        m->kernel = RPM_K_RBF;
    else if (kern && strcmp(kern, "matern12") == 0)
        m->kernel = RPM_K_MATERN12;
    else
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "metadata %s: prior.kernel must be \"rbf\" or \"matern12\"", ARCH);
    snprintf(in->kernel, sizeof in->kernel, "%s", kern);
    if ((st = get_pos_list(p, "variance", L, &m->variance, err))
        || (st = get_pos_list(p, "lengthscale", L, &m->lengthscale, err))
        || (st = get_pos(p, "prior.", "jitter", &m->jitter, err))
        || (st = get_pos(p, "prior.", "time_step", &m->time_step, err)))
        return st;
    const json_t *sm = json_object_get(p, "subtract_marginals");
    if (!json_is_boolean(sm))
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "metadata %s: prior.subtract_marginals must be true or false", ARCH);
    m->subtract_marginals = json_is_true(sm);

    /* the recognition networks: one list shared by every factor, or one list per factor */
    const json_t *rec = json_object_get(a, "recognition");
    const json_t *shared = json_object_get(a, "shared");
    if (!json_is_boolean(shared))
        return vbm_fail(err, VBM_EFORMAT, NULL, "metadata %s: shared must be true or false", ARCH);
    in->shared = json_is_true(shared);
    m->n_nets = in->shared ? 1 : in->factors;
    if (!json_is_array(rec) || (!in->shared && json_array_size(rec) != (size_t)in->factors))
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        in->shared ? "metadata %s: recognition must be a list of layers"
                                   : "metadata %s: recognition must be a list of %d layer lists "
                                     "(one per factor)",
                        ARCH, in->factors);
    m->nets = calloc((size_t)m->n_nets, sizeof *m->nets);
    if (!m->nets)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    nets_shape obs = {3, in->obs_size, 1, 1}; /* one observation: a 1 x 1 image of D channels */
    for (int j = 0; j < m->n_nets; j++) {
        char which[48];
        const json_t *list = in->shared ? rec : json_array_get(rec, (size_t)j);
        if (in->shared)
            snprintf(which, sizeof which, "recognition");
        else
            snprintf(which, sizeof which, "recognition[%d]", j);
        if ((st = nets_seq_parse(list, which, obs, &m->file, &m->nets[j], err)) != VBM_OK)
            return st;
        nets_shape o = m->nets[j].out;
        if (o.c != 2 * L || o.h != 1 || o.w != 1) {
            char got[64];
            nets_shape_str(o, got, sizeof got);
            return vbm_fail(err, VBM_EFORMAT, NULL,
                            "%s: output shape %s is not [%d,1,1] or [%d] (2 x latent_size: the "
                            "factor's natural parameters)",
                            which, got, 2 * L, 2 * L);
        }
    }
    return VBM_OK;
}

void nets_rpm_free(nets_rpm *m)
{
    if (!m)
        return;
    for (int j = 0; m->nets && j < m->n_nets; j++)
        nets_seq_free(&m->nets[j]);
    free(m->nets);
    free(m->variance);
    free(m->lengthscale);
    sft_free(&m->file);
    free(m->info.architecture_json);
    free(m->info.provenance_json);
    free(m);
}

const nets_rpm_info *nets_rpm_info_of(const nets_rpm *m)
{
    return &m->info;
}

static vbm_status load_inner(nets_rpm *m, const unsigned char *buf, size_t len, vbm_error *err)
{
    vbm_status st = sft_parse(buf, len, &m->file, err);
    if (st != VBM_OK)
        return st;
    const char *fmt = sft_meta(&m->file, "vbmem.format"),
               *ver = sft_meta(&m->file, "vbmem.format_version"),
               *kind = sft_meta(&m->file, "vbmem.kind");
    if (!fmt || strcmp(fmt, "vbmem-model") != 0)
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "metadata vbmem.format is %s, expected \"vbmem-model\"",
                        fmt ? "not \"vbmem-model\"" : "missing");
    if (!ver || strcmp(ver, "1") != 0)
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "metadata vbmem.format_version is %s; this build reads version 1",
                        ver ? "not \"1\"" : "missing");
    if (!kind || strcmp(kind, "rpm") != 0)
        return vbm_fail(err, VBM_EFORMAT, NULL, "metadata vbmem.kind is %s, expected \"rpm\"",
                        kind ? "not \"rpm\"" : "missing");
    json_t *arch = sft_meta_object(&m->file, ARCH, err);
    if (!arch)
        return VBM_EFORMAT;
    json_t *prov = sft_meta_object(&m->file, "vbmem.provenance", err);
    st = prov ? parse_arch(m, arch, err) : VBM_EFORMAT;
    json_decref(arch);
    json_decref(prov);
    if (st != VBM_OK)
        return st;
    if (sft_check_used(&m->file, err) != VBM_OK)
        return VBM_EFORMAT;
    m->info.n_params = m->file.n_values;
    m->info.architecture_json = strdup(sft_meta(&m->file, ARCH));
    m->info.provenance_json = strdup(sft_meta(&m->file, "vbmem.provenance"));
    if (!m->info.architecture_json || !m->info.provenance_json)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    return VBM_OK;
}

vbm_status nets_rpm_load_buffer(const unsigned char *buf, size_t len, nets_rpm **out,
                                vbm_error *err)
{
    *out = NULL;
    nets_rpm *m = calloc(1, sizeof *m);
    if (!m)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    vbm_status st = load_inner(m, buf, len, err);
    if (st != VBM_OK) {
        nets_rpm_free(m);
        return st;
    }
    *out = m;
    return VBM_OK;
}

vbm_status nets_rpm_load(const char *path, nets_rpm **out, vbm_error *err)
{
    *out = NULL;
    unsigned char *buf;
    size_t len;
    vbm_status rc = sft_read_file(path, &buf, &len, err);
    if (rc != VBM_OK)
        return rc;
    vbm_error inner;
    rc = nets_rpm_load_buffer(buf, len, out, &inner);
    free(buf);
    if (rc != VBM_OK)
        return vbm_fail(err, rc, NULL, "%s: %s", path, inner.msg);
    return VBM_OK;
}

/* ---- inference ---- */

vbm_status nets_rpm_prior(const nets_rpm *m, int l, int T, double *K, vbm_error *err)
{
    if (l < 0 || l >= m->info.latent || T < 1 || T > GP_MAX_T || !K)
        return vbm_fail(err, VBM_EINVAL, NULL, "nets_rpm_prior: l = %d or T = %d out of range", l,
                        T);
    double v = m->variance[l], len = m->lengthscale[l];
    for (int s = 0; s < T; s++)
        for (int t = 0; t < T; t++) {
            double r = m->time_step * (double)(s - t) / len;
            double k = m->kernel == RPM_K_RBF ? v * exp(-0.5 * r * r) : v * exp(-fabs(r));
            K[(size_t)s * T + t] = k + (s == t ? m->jitter : 0.0);
        }
    return VBM_OK;
}

/* log(1 + e^x) in the stable form max(x, 0) + log1p(e^-|x|) (rpm.py's contract) */
static double softplus(double x)
{
    return fmax(x, 0.0) + log1p(exp(-fabs(x)));
}

static vbm_status check_args(const nets_rpm *m, const float *x, int T, const void *a, const void *b,
                             const char *fn, vbm_error *err)
{
    if (!m || !x || !a || !b)
        return vbm_fail(err, VBM_EINVAL, NULL, "%s: NULL argument", fn);
    const nets_rpm_info *in = &m->info;
    if (T < in->min_steps || T > in->max_steps)
        return vbm_fail(err, VBM_EINVAL, NULL, "%s: T = %d steps is outside [%d, %d]", fn, T,
                        in->min_steps, in->max_steps);
    long n = (long)in->factors * T * in->obs_size;
    for (long i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return vbm_fail(err, VBM_EINVAL, NULL, "%s: observation value %ld is not finite", fn,
                            i);
    return VBM_OK;
}

vbm_status nets_rpm_factors(const nets_rpm *m, const float *x, int T, double *h, double *lambda,
                            vbm_error *err)
{
    vbm_status st = check_args(m, x, T, h, lambda, "nets_rpm_factors", err);
    if (st != VBM_OK)
        return st;
    const nets_rpm_info *in = &m->info;
    int J = in->factors, D = in->obs_size, L = in->latent;
    /* a shared network runs on all J T observations, a per-factor one on its T */
    long rows = in->shared ? (long)J * T : T;
    const nets_seq *s0 = &m->nets[0];
    long max_act = s0->max_act;
    for (int j = 1; j < m->n_nets; j++)
        if (m->nets[j].max_act > max_act)
            max_act = m->nets[j].max_act;
    long chunk = RPM_BATCH_FLOATS / max_act;
    if (chunk < 1)
        chunk = 1;
    if (chunk > rows)
        chunk = rows;
    size_t wsn = 0;
    for (int j = 0; j < m->n_nets; j++) {
        size_t w = nets_seq_workspace(&m->nets[j], chunk, NETS_PATH_AUTO, 1);
        if (w > wsn)
            wsn = w;
    }
    float *ws = malloc(sizeof(float) * (wsn ? wsn : 1));
    float *out = malloc(sizeof(float) * (size_t)chunk * 2 * (size_t)L);
    if (!ws || !out) {
        free(ws);
        free(out);
        return vbm_fail(err, VBM_ENOMEM, NULL, "nets_rpm_factors: out of memory");
    }
    for (int j = 0; j < m->n_nets && st == VBM_OK; j++) {
        const float *xj = x + (size_t)j * (size_t)T * (size_t)D; /* shared: j = 0, all rows */
        for (long r0 = 0; r0 < rows && st == VBM_OK; r0 += chunk) {
            long n = rows - r0 < chunk ? rows - r0 : chunk;
            st = nets_seq_run(&m->nets[j], n, xj + (size_t)r0 * D, out, ws, 1, NETS_PATH_AUTO, err);
            for (long i = 0; i < n && st == VBM_OK; i++) {
                long row = (in->shared ? 0 : (long)j * T) + r0 + i; /* j T + t */
                const float *o = out + (size_t)i * 2 * L;
                for (int l = 0; l < L; l++) {
                    double raw = o[L + l];
                    double lam = (m->precision == RPM_PREC_SOFTPLUS ? softplus(raw) : exp(raw))
                                 + m->min_precision;
                    if (!isfinite(o[l]) || !isfinite(lam) || !(lam > 0)) {
                        st = vbm_fail(err, VBM_EINVAL, NULL,
                                      "nets_rpm_factors: the factor of row %ld step %ld, latent "
                                      "dimension %d is not finite",
                                      row / T, row % T, l);
                        break;
                    }
                    h[(size_t)row * L + l] = o[l];
                    lambda[(size_t)row * L + l] = lam;
                }
            }
        }
    }
    free(ws);
    free(out);
    return st;
}

vbm_status nets_rpm_infer(const nets_rpm *m, const float *x, int T, double *mean, double *var,
                          vbm_error *err)
{
    vbm_status st = check_args(m, x, T, mean, var, "nets_rpm_infer", err);
    if (st != VBM_OK)
        return st;
    const nets_rpm_info *in = &m->info;
    int J = in->factors, L = in->latent;
    size_t JTL = (size_t)J * (size_t)T * (size_t)L, TT = (size_t)T * (size_t)T;
    double *h = malloc(sizeof(double) * JTL), *lam = malloc(sizeof(double) * JTL);
    double *K = malloc(sizeof(double) * TT), *work = malloc(sizeof(double) * gp_workspace(T));
    double *d = malloc(sizeof(double) * (size_t)T), *b = malloc(sizeof(double) * (size_t)T);
    if (!h || !lam || !K || !work || !d || !b)
        st = vbm_fail(err, VBM_ENOMEM, NULL, "nets_rpm_infer: out of memory for T = %d", T);
    if (st == VBM_OK)
        st = nets_rpm_factors(m, x, T, h, lam, err);
    for (int l = 0; l < L && st == VBM_OK; l++) {
        nets_rpm_prior(m, l, T, K, NULL);
        for (int t = 0; t < T; t++) {
            double sd = m->subtract_marginals ? -(double)J / K[(size_t)t * T + t] : 0.0, sb = 0.0;
            for (int j = 0; j < J; j++) {
                size_t at = ((size_t)j * T + t) * L + l;
                sd += lam[at];
                sb += h[at];
            }
            d[t] = sd;
            b[t] = sb;
        }
        vbm_error gerr;
        st = gp_posterior(T, K, d, b, mean + (size_t)l * T, var + (size_t)l * T, work, &gerr);
        if (st != VBM_OK)
            vbm_fail(err, st, NULL, "nets_rpm_infer: latent dimension %d: %s", l, gerr.msg);
    }
    free(h);
    free(lam);
    free(K);
    free(work);
    free(d);
    free(b);
    return st;
}
