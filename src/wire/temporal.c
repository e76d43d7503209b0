/* temporal.c -- owns the JSON forms of the temporal memory: configuration, export, sequences. */
#include "wire/temporal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "wire/base64.h"
#include "wire/codes.h"
#include "wire/values.h"

vbm_status wire_temporal_config_read(const json_t *obj, const char *path, int code_size,
                                     vbm_temporal_config *cfg, vbm_error *err)
{
    static const char *const keys[] = {"kind",  "code_size", "components",   "attributes",  "pi0",
                                       "u_T",   "sigma_a2",  "lambda_prior", "lambda_grid", "rho_d",
                                       "rho_e", "gamma0",    "gamma_max",    "vbe",         NULL};
    static const char *const lkeys[] = {"eta", "f", "g", "h", NULL};
    char f[WIRE_PATH_LEN];
    long P = 2, Q = 1, G, cs = code_size;
    const json_t *v;
    vbm_error verr;
    vbm_status st;

    if (!json_is_object(obj))
        return vbm_fail(err, VBM_EINVAL, path, "expected an object, got %s", wire_type_name(obj));
    if ((st = wire_check_keys(obj, path, keys, err)) != VBM_OK)
        return st;
    wire_path_key(f, sizeof f, path, "code_size");
    if ((v = json_object_get(obj, "code_size")) != NULL
        && (st = wire_get_long(v, f, 1, VBM_MAX_CODE_SIZE, &cs, err)) != VBM_OK)
        return st;
    if (cs != code_size)
        return vbm_fail(err, VBM_EINVAL, f, "%ld differs from the session's code size %d", cs,
                        code_size);
    wire_path_key(f, sizeof f, path, "components");
    if ((v = json_object_get(obj, "components")) != NULL
        && (st = wire_get_long(v, f, 1, 64, &P, err)) != VBM_OK)
        return st;
    vbm_temporal_config_default(code_size, (int)P, cfg);
    wire_path_key(f, sizeof f, path, "attributes");
    if ((v = json_object_get(obj, "attributes")) != NULL
        && (st = wire_get_long(v, f, 1, 16, &Q, err)) != VBM_OK)
        return st;
    cfg->attributes = (int)Q;
    G = cfg->lambda_grid;
    wire_path_key(f, sizeof f, path, "lambda_grid");
    if ((v = json_object_get(obj, "lambda_grid")) != NULL
        && (st = wire_get_long(v, f, 16, 100000, &G, err)) != VBM_OK)
        return st;
    cfg->lambda_grid = (int)G;
    {
        struct {
            const char *key;
            double *dst;
        } nums[] = {{"pi0", &cfg->pi0},       {"sigma_a2", &cfg->sigma_a2},
                    {"rho_d", &cfg->rho_d},   {"rho_e", &cfg->rho_e},
                    {"gamma0", &cfg->gamma0}, {"gamma_max", &cfg->gamma_max}};
        for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
            wire_path_key(f, sizeof f, path, nums[i].key);
            if ((v = json_object_get(obj, nums[i].key)) != NULL
                && (st = wire_get_number(v, f, nums[i].dst, err)) != VBM_OK)
                return st;
        }
    }
    if ((v = json_object_get(obj, "u_T")) != NULL) {
        long dims[2] = {2, 2};
        double u[4];
        wire_path_key(f, sizeof f, path, "u_T");
        if ((st = wire_read_array(v, f, 2, dims, 0, u, err)) != VBM_OK)
            return st;
        cfg->u_T[0][0] = u[0];
        cfg->u_T[0][1] = u[1];
        cfg->u_T[1][0] = u[2];
        cfg->u_T[1][1] = u[3];
    }
    if ((v = json_object_get(obj, "lambda_prior")) != NULL) {
        double *dst[4] = {&cfg->lam_eta, &cfg->lam_f, &cfg->lam_g, &cfg->lam_h};
        char lp[WIRE_PATH_LEN];
        wire_path_key(lp, sizeof lp, path, "lambda_prior");
        if (!json_is_object(v))
            return vbm_fail(err, VBM_EINVAL, lp, "expected an object {eta, f, g, h}");
        if ((st = wire_check_keys(v, lp, lkeys, err)) != VBM_OK)
            return st;
        for (int i = 0; i < 4; i++) {
            const json_t *x = json_object_get(v, lkeys[i]);
            wire_path_key(f, sizeof f, lp, lkeys[i]);
            if (x != NULL && (st = wire_get_number(x, f, dst[i], err)) != VBM_OK)
                return st;
        }
    }
    if ((v = json_object_get(obj, "vbe")) != NULL) {
        wire_path_key(f, sizeof f, path, "vbe");
        if (json_is_string(v) && strcmp(json_string_value(v), "eq18") == 0)
            cfg->vbe_temporal = 0;
        else if (json_is_string(v) && strcmp(json_string_value(v), "eq19") == 0)
            cfg->vbe_temporal = 1;
        else
            return vbm_fail(err, VBM_EINVAL, f, "expected \"eq18\" or \"eq19\"");
    }
    verr.field[0] = '\0';
    verr.msg[0] = '\0';
    if (vbm_temporal_config_check(cfg, &verr) != VBM_OK) {
        static const struct {
            const char *lib, *wire;
        } names[] = {{"lam_eta", "lambda_prior.eta"},
                     {"lam_f", "lambda_prior.f"},
                     {"lam_g", "lambda_prior.g"},
                     {"lam_h", "lambda_prior.h"},
                     {"vbe_temporal", "vbe"}};
        const char *name = verr.field, *text = verr.msg;
        size_t flen = strlen(verr.field);

        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strcmp(verr.field, names[i].lib) == 0)
                name = names[i].wire;
        if (strncmp(name, "u_T[", 4) == 0)
            name = "u_T";
        /* the library's message after its own "field: " prefix */
        if (flen > 0 && strncmp(text, verr.field, flen) == 0 && strncmp(text + flen, ": ", 2) == 0)
            text += flen + 2;
        wire_path_key(f, sizeof f, path, name);
        return vbm_fail(err, VBM_EINVAL, f, "%s", text);
    }
    return VBM_OK;
}

json_t *wire_temporal_config(const vbm_temporal_config *c)
{
    return json_pack("{s:s, s:i, s:i, s:i, s:o, s:[[o,o],[o,o]], s:o, s:{s:o, s:o, s:o, s:o}, "
                     "s:i, s:o, s:o, s:o, s:o, s:s}",
                     "kind", "temporal", "code_size", c->code_size, "components", c->components,
                     "attributes", c->attributes, "pi0", wire_number(c->pi0), "u_T",
                     wire_number(c->u_T[0][0]), wire_number(c->u_T[0][1]),
                     wire_number(c->u_T[1][0]), wire_number(c->u_T[1][1]), "sigma_a2",
                     wire_number(c->sigma_a2), "lambda_prior", "eta", wire_number(c->lam_eta), "f",
                     wire_number(c->lam_f), "g", wire_number(c->lam_g), "h", wire_number(c->lam_h),
                     "lambda_grid", c->lambda_grid, "rho_d", wire_number(c->rho_d), "rho_e",
                     wire_number(c->rho_e), "gamma0", wire_number(c->gamma0), "gamma_max",
                     wire_number(c->gamma_max), "vbe", c->vbe_temporal ? "eq19" : "eq18");
}

vbm_status wire_temporal_to_json(const vbm_temporal *m, json_t **out, vbm_error *err)
{
    vbm_temporal_config c;
    long nseq = 0, frames = 0, dW[2], d2[2] = {2, 2}, dK[1], dD[1];
    double fe = NAN, T[4], *W = NULL, *gamma = NULL, *lambda = NULL, *rho = NULL;
    unsigned char *buf = NULL;
    size_t len = 0;
    char *b64 = NULL;
    json_t *o = NULL, *jW = NULL, *jg = NULL, *jT = NULL, *jl = NULL, *jr = NULL;
    vbm_status st;
    int K;

    *out = NULL;
    vbm_temporal_summary(m, &c, &nseq, &frames, &fe);
    K = c.components * c.attributes;
    if ((st = vbm_temporal_export(m, &buf, &len, err)) != VBM_OK)
        return st;
    b64 = wire_b64_encode(buf, len);
    free(buf);
    W = vbm_calloc((size_t)c.code_size * K, sizeof(double));
    gamma = vbm_calloc((size_t)K, sizeof(double));
    lambda = vbm_calloc((size_t)K, sizeof(double));
    rho = vbm_calloc((size_t)c.code_size, sizeof(double));
    if (b64 == NULL || !W || !gamma || !lambda || !rho) {
        st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory exporting a temporal memory");
        goto done;
    }
    vbm_temporal_posterior(m, W, gamma, T, lambda, rho);
    dW[0] = c.code_size;
    dW[1] = K;
    dK[0] = K;
    dD[0] = c.code_size;
    if (wire_new_array(W, 2, dW, 1, "W", &jW, err) != VBM_OK
        || wire_new_array(gamma, 1, dK, 1, "gamma", &jg, err) != VBM_OK
        || wire_new_array(T, 2, d2, 1, "T", &jT, err) != VBM_OK
        || wire_new_array(lambda, 1, dK, 1, "lambda", &jl, err) != VBM_OK
        || wire_new_array(rho, 1, dD, 1, "rho", &jr, err) != VBM_OK) {
        st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory exporting a temporal memory");
        goto done;
    }
    o = json_pack("{s:s, s:o, s:I, s:I, s:o, s:{s:O, s:O, s:O, s:O, s:O}, s:s}", "kind", "temporal",
                  "config", wire_temporal_config(&c), "sequences", (json_int_t)nseq, "frames",
                  (json_int_t)frames, "free_energy", wire_number(fe), "posterior", "W", jW, "gamma",
                  jg, "T", jT, "lambda", jl, "rho", jr, "export", b64);
    if (o == NULL)
        st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory exporting a temporal memory");
    else
        st = VBM_OK;
    *out = o;
done:
    json_decref(jW);
    json_decref(jg);
    json_decref(jT);
    json_decref(jl);
    json_decref(jr);
    free(b64);
    free(W);
    free(gamma);
    free(lambda);
    free(rho);
    return st;
}

vbm_status wire_temporal_from_json(const json_t *json, vbm_temporal **out, vbm_error *err)
{
    const json_t *e = json_is_object(json) ? json_object_get(json, "export") : NULL;
    unsigned char *buf = NULL;
    size_t len = 0;
    vbm_status st;

    *out = NULL;
    if (!json_is_object(json))
        return vbm_fail(err, VBM_EINVAL, "", "expected the JSON form of a temporal memory");
    if (!json_is_string(e))
        return vbm_fail(err, VBM_EINVAL, "export",
                        "expected the base64 string of the binary export");
    if (wire_b64_decode(json_string_value(e), json_string_length(e), &buf, &len) != 0)
        return vbm_fail(err, VBM_EINVAL, "export", "not valid base64");
    st = vbm_temporal_import(buf, len, out, err);
    free(buf);
    if (st != VBM_OK && st != VBM_ENOMEM && err != NULL) {
        char why[VBM_MSG_LEN];

        snprintf(why, sizeof why, "%s", vbm_error_text(err));
        vbm_fail(err, st, "export", "%s", why);
    }
    return st;
}

vbm_status wire_read_sequence(const json_t *v, const char *path, long max_frames, int D, long min_T,
                              vbm_sequence *seq, vbm_error *err)
{
    wire_codes c;
    vbm_status st;
    char f[WIRE_PATH_LEN];

    memset(seq, 0, sizeof *seq);
    memset(&c, 0, sizeof c);
    if ((st = wire_read_codes(v, path, max_frames, VBM_MAX_CODE_SIZE, &c, err)) != VBM_OK)
        return st;
    wire_path_key(f, sizeof f, path, "mu");
    /* (the message is made before the codes are freed: wire_codes_free clears c) */
    if (c.C != D) {
        st = vbm_fail(err, VBM_EINVAL, f, "frames of %d values, the memory's code size is %d", c.C,
                      D);
        wire_codes_free(&c);
        return st;
    }
    if (c.T < min_T) {
        st = vbm_fail(err, VBM_EINVAL, f, "%ld frames; a sequence needs at least %ld", c.T, min_T);
        wire_codes_free(&c);
        return st;
    }
    if (c.s2 != NULL)
        for (size_t i = 0; i < (size_t)c.T * (size_t)c.C; i++)
            if (c.s2[i] != 0.0) {
                wire_path_key(f, sizeof f, path, "sigma2");
                wire_codes_free(&c);
                return vbm_fail(err, VBM_EINVAL, f,
                                "a temporal memory takes observed codes (sigma2 0)");
            }
    seq->T = c.T;
    seq->D = c.C;
    seq->y = c.mu;
    c.mu = NULL;
    wire_codes_free(&c);
    return VBM_OK;
}

vbm_status wire_read_sequences(const json_t *v, const char *path, long max_frames, int D,
                               long min_T, vbm_sequence **seqs, int *n, vbm_error *err)
{
    size_t k = json_is_array(v) ? json_array_size(v) : 0;
    vbm_sequence *s;
    long total = 0;
    char f[WIRE_PATH_LEN];

    *seqs = NULL;
    *n = 0;
    if (!json_is_array(v) || k == 0)
        return vbm_fail(err, VBM_EINVAL, path, "expected a non-empty array of sequences, got %s",
                        json_is_array(v) ? "an empty array" : wire_type_name(v));
    if (k > 100000)
        return vbm_fail(err, VBM_EINVAL, path, "%zu sequences, the limit is 100000", k);
    s = calloc(k, sizeof *s);
    if (s == NULL)
        return vbm_fail(err, VBM_ENOMEM, path, "out of memory");
    for (size_t i = 0; i < k; i++) {
        vbm_status st;
        wire_path_index(f, sizeof f, path, (long)i);
        st = wire_read_sequence(json_array_get(v, i), f, max_frames, D, min_T, &s[i], err);
        if (st == VBM_OK && (total += s[i].T) > max_frames)
            st = vbm_fail(err, VBM_EINVAL, path, "more than %ld frames in all", max_frames);
        if (st != VBM_OK) {
            wire_sequences_free(s, (int)i + 1);
            return st;
        }
    }
    *seqs = s;
    *n = (int)k;
    return VBM_OK;
}

void wire_sequences_free(vbm_sequence *seqs, int n)
{
    if (seqs == NULL)
        return;
    for (int i = 0; i < n; i++)
        free((void *)seqs[i].y);
    free(seqs);
}

vbm_status wire_temporal_start_read(const json_t *obj, const char *key, int *out, vbm_error *err)
{
    const json_t *v = json_object_get(obj, key);
    const char *s = json_is_string(v) ? json_string_value(v) : "";

    if (v == NULL)
        return VBM_OK;
    if (strcmp(s, "windows") == 0)
        *out = VBM_TEMPORAL_START_WINDOWS;
    else if (strcmp(s, "pca") == 0)
        *out = VBM_TEMPORAL_START_PCA;
    else if (strcmp(s, "random") == 0)
        *out = VBM_TEMPORAL_START_RANDOM;
    else
        return vbm_fail(err, VBM_EINVAL, key, "expected \"windows\", \"pca\" or \"random\"");
    return VBM_OK;
}
