/* memory.c -- owns the JSON form of a vbm_memory ("vbmem-memory", version 1) and of a
 * configuration: encoding and checked decoding. */
#define _POSIX_C_SOURCE 200809L

#include "wire/memory.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Relative tolerance of the symmetry check of imported row covariances. */
#define WIRE_MEMORY_SYM_TOL 1e-8

/* buf <- path + "." + key + "[i]"; returns buf. */
static const char *memform_sub(char *buf, size_t len, const char *path, const char *key, long i)
{
    if (snprintf(buf, len, "%s.%s[%ld]", path, key, i) < 0)
        buf[0] = '\0';
    return buf;
}

/* buf <- path + "." + key; returns buf. */
static const char *memform_key(char *buf, size_t len, const char *path, const char *key)
{
    wire_path_key(buf, len, path, key);
    return buf;
}

/* buf <- path + "[i][j]"; returns buf. */
static const char *memform_entry(char *buf, size_t len, const char *path, long i, long j)
{
    if (snprintf(buf, len, "%s[%ld][%ld]", path, i, j) < 0)
        buf[0] = '\0';
    return buf;
}

/* Record VBM_EINVAL at path + "." + key with the message text. */
static vbm_status memform_fail_sub(vbm_error *err, const char *path, const char *key,
                                   const char *text)
{
    char where[WIRE_PATH_LEN];

    wire_path_key(where, sizeof where, path, key);
    return vbm_fail(err, VBM_EINVAL, where, "%s", text);
}

/* Fetch the required member key of obj found at path, or fail naming it. */
static vbm_status memform_require(const json_t *obj, const char *path, const char *key,
                                  json_t **val, vbm_error *err)
{
    char where[WIRE_PATH_LEN];

    *val = json_object_get(obj, key);
    if (*val == NULL) {
        wire_path_key(where, sizeof where, path, key);
        return vbm_fail(err, VBM_EINVAL, where, "missing");
    }
    return VBM_OK;
}

/* Names of the configuration fields, NULL-terminated: the twelve of every form, then
 * memo_k, path_prior and path_alpha (optional even in a complete form: absent means
 * 0, "factorised" and 1). */
static const char *const memform_config_keys[] = {
    "kind",   "code_size",  "rows",       "clusters", "groups",       "sigma_z2",
    "shift",  "u0",         "sigma2_b0",  "s_floor",  "dkm_addr_var", "retain_max",
    "memo_k", "path_prior", "path_alpha", NULL};

/* Read the optional (or, when required, mandatory) int member key of obj. */
static vbm_status memform_config_int(const json_t *obj, const char *path, const char *key,
                                     int required, long lo, long hi, int *out, vbm_error *err)
{
    char where[WIRE_PATH_LEN];
    json_t *v = json_object_get(obj, key);
    long x = 0;
    vbm_status st;

    wire_path_key(where, sizeof where, path, key);
    if (v == NULL)
        return required ? vbm_fail(err, VBM_EINVAL, where, "missing") : VBM_OK;
    st = wire_get_long(v, where, lo, hi, &x, err);
    if (st == VBM_OK)
        *out = (int)x;
    return st;
}

/* Read the optional (or mandatory) double member key of obj. */
static vbm_status memform_config_double(const json_t *obj, const char *path, const char *key,
                                        int required, double *out, vbm_error *err)
{
    char where[WIRE_PATH_LEN];
    json_t *v = json_object_get(obj, key);

    wire_path_key(where, sizeof where, path, key);
    if (v == NULL)
        return required ? vbm_fail(err, VBM_EINVAL, where, "missing") : VBM_OK;
    return wire_get_number(v, where, out, err);
}

/* *cfg <- vbm_config_default(kind, code_size) with vbm_config_set_rows applied
 * to the given rows, overridden by the members of obj
 * (all twelve required when complete). VBM_EINVAL naming the field. */
vbm_status wire_config_read(const json_t *obj, const char *path, int complete, int code_size_hint,
                            vbm_config *cfg, vbm_error *err)
{
    char where[WIRE_PATH_LEN];
    const json_t *v;
    vbm_kind kind;
    long x = 0;
    int code_size = code_size_hint;
    vbm_status st;

    if (!json_is_object(obj))
        return vbm_fail(err, VBM_EINVAL, path, "expected an object, got %s", wire_type_name(obj));
    st = wire_check_keys(obj, path, memform_config_keys, err);
    if (st != VBM_OK)
        return st;

    wire_path_key(where, sizeof where, path, "kind");
    v = json_object_get(obj, "kind");
    if (v == NULL)
        return vbm_fail(err, VBM_EINVAL, where, "missing");
    if (!json_is_string(v))
        return vbm_fail(err, VBM_EINVAL, where, "expected a string, got %s", wire_type_name(v));
    if (vbm_kind_parse(json_string_value(v), &kind, NULL) != VBM_OK)
        return vbm_fail(
            err, VBM_EINVAL, where,
            "unknown kind \"%s\" (expected gaussian, categorical, mixture, tree or dkm)",
            json_string_value(v));

    wire_path_key(where, sizeof where, path, "code_size");
    v = json_object_get(obj, "code_size");
    if (v != NULL) {
        st = wire_get_long(v, where, 1, VBM_MAX_CODE_SIZE, &x, err);
        if (st != VBM_OK)
            return st;
        code_size = (int)x;
    } else if (complete || code_size < 1) {
        return vbm_fail(err, VBM_EINVAL, where, "missing");
    }

    vbm_config_default(kind, code_size, cfg);

    st = memform_config_int(obj, path, "rows", complete, 1, VBM_MAX_ROWS, &cfg->rows, err);
    if (st == VBM_OK) /* the K-proportional defaults follow K unless given below */
        vbm_config_set_rows(cfg, cfg->rows);
    if (st == VBM_OK)
        st = memform_config_int(obj, path, "clusters", complete, 1, VBM_MAX_CLUSTERS,
                                &cfg->clusters, err);
    if (st == VBM_OK)
        st = memform_config_int(obj, path, "groups", complete, 1, VBM_MAX_CODE_SIZE, &cfg->groups,
                                err);
    if (st == VBM_OK)
        st = memform_config_double(obj, path, "sigma_z2", complete, &cfg->sigma_z2, err);
    if (st != VBM_OK)
        return st;

    wire_path_key(where, sizeof where, path, "shift");
    v = json_object_get(obj, "shift");
    if (v != NULL) {
        if (!json_is_boolean(v))
            return vbm_fail(err, VBM_EINVAL, where, "expected true or false, got %s",
                            wire_type_name(v));
        cfg->shift = json_is_true(v) ? 1 : 0;
    } else if (complete) {
        return vbm_fail(err, VBM_EINVAL, where, "missing");
    }

    st = memform_config_double(obj, path, "u0", complete, &cfg->u0, err);
    if (st == VBM_OK)
        st = memform_config_double(obj, path, "sigma2_b0", complete, &cfg->sigma2_b0, err);
    if (st == VBM_OK)
        st = memform_config_double(obj, path, "s_floor", complete, &cfg->s_floor, err);
    if (st == VBM_OK)
        st = memform_config_double(obj, path, "dkm_addr_var", complete, &cfg->dkm_addr_var, err);
    if (st != VBM_OK)
        return st;

    wire_path_key(where, sizeof where, path, "retain_max");
    v = json_object_get(obj, "retain_max");
    if (v != NULL) {
        st = wire_get_long(v, where, 0, LONG_MAX, &x, err);
        if (st != VBM_OK)
            return st;
        cfg->retain_max = x;
    } else if (complete) {
        return vbm_fail(err, VBM_EINVAL, where, "missing");
    }
    st = memform_config_int(obj, path, "memo_k", 0, 0, VBM_MAX_MEMO_K, &cfg->memo_k, err);
    if (st != VBM_OK)
        return st;
    wire_path_key(where, sizeof where, path, "path_prior");
    v = json_object_get(obj, "path_prior");
    if (v != NULL) {
        const char *pp = json_is_string(v) ? json_string_value(v) : NULL;
        if (!pp)
            return vbm_fail(err, VBM_EINVAL, where, "expected a string, got %s", wire_type_name(v));
        if (strcmp(pp, "factorised") == 0)
            cfg->path_prior = VBM_PATH_FACTORISED;
        else if (strcmp(pp, "joint") == 0)
            cfg->path_prior = VBM_PATH_JOINT;
        else
            return vbm_fail(err, VBM_EINVAL, where,
                            "unknown path prior \"%s\" (expected factorised or joint)", pp);
    }
    return memform_config_double(obj, path, "path_alpha", 0, &cfg->path_alpha, err);
}

/* ---- encoding ---------------------------------------------------------- */

/* obj[key] = val (val stolen, may be NULL); 0, or -1 when val is NULL or on
 * allocation failure. */
static int memform_set(json_t *obj, const char *key, json_t *val)
{
    return json_object_set_new(obj, key, val);
}

json_t *wire_config(const vbm_config *c)
{
    json_t *o =
        json_pack("{s:s, s:i, s:i, s:i, s:i, s:o, s:b, s:o, s:o, s:o, s:o, s:I}", "kind",
                  vbm_kind_name(c->kind), "code_size", c->code_size, "rows", c->rows, "clusters",
                  c->clusters, "groups", c->groups, "sigma_z2", wire_number(c->sigma_z2), "shift",
                  c->shift, "u0", wire_number(c->u0), "sigma2_b0", wire_number(c->sigma2_b0),
                  "s_floor", wire_number(c->s_floor), "dkm_addr_var", wire_number(c->dkm_addr_var),
                  "retain_max", (json_int_t)c->retain_max);
    /* memo_k only when set: forms of memories without memos are unchanged */
    if (o != NULL && c->memo_k != 0
        && json_object_set_new(o, "memo_k", json_integer(c->memo_k)) != 0) {
        json_decref(o);
        return NULL;
    }
    /* path_prior and path_alpha only when joint: other forms are unchanged */
    if (o != NULL && c->path_prior == VBM_PATH_JOINT
        && (json_object_set_new(o, "path_prior", json_string("joint")) != 0
            || json_object_set_new(o, "path_alpha", wire_number(c->path_alpha)) != 0)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* obj[key] = nested array of a (shape ndim/dims), naming it path in errors. */
static vbm_status memform_set_array(json_t *obj, const char *key, const double *a, int ndim,
                                    const long *dims, const char *path, vbm_error *err)
{
    json_t *arr;
    vbm_status st;

    st = wire_new_array(a, ndim, dims, 0, path, &arr, err);
    if (st != VBM_OK)
        return st;
    if (json_object_set_new(obj, key, arr) != 0)
        return vbm_fail(err, VBM_ENOMEM, path, "out of memory");
    return VBM_OK;
}

/* Check that a configuration's scalar doubles are finite (JSON cannot hold others). */
static vbm_status memform_config_finite(const vbm_config *c, vbm_error *err)
{
    if (!isfinite(c->sigma_z2))
        return vbm_fail(err, VBM_EINVAL, "memory.config.sigma_z2", "not finite");
    if (!isfinite(c->u0))
        return vbm_fail(err, VBM_EINVAL, "memory.config.u0", "not finite");
    if (!isfinite(c->sigma2_b0))
        return vbm_fail(err, VBM_EINVAL, "memory.config.sigma2_b0", "not finite");
    if (!isfinite(c->s_floor))
        return vbm_fail(err, VBM_EINVAL, "memory.config.s_floor", "not finite");
    if (!isfinite(c->dkm_addr_var))
        return vbm_fail(err, VBM_EINVAL, "memory.config.dkm_addr_var", "not finite");
    return VBM_OK;
}

/* Append the posterior blocks of mem to the array arr. */
static vbm_status memform_encode_posterior(const vbm_memory *mem, json_t *arr, vbm_error *err)
{
    char where[WIRE_PATH_LEN], path[WIRE_PATH_LEN];
    long K = mem->cfg.rows, G = mem->cfg.groups, H = mem->cfg.clusters, cg = mem->cg;
    long g, h, gh, dims[2];
    json_t *blk;
    vbm_status st;

    for (g = 0; g < G; g++) {
        for (h = 0; h < H; h++) {
            gh = g * H + h;
            wire_path_index(path, sizeof path, "memory.posterior.clusters", gh);
            if (!isfinite(mem->s2_b[gh]))
                return memform_fail_sub(err, path, "sigma2_b", "not finite");
            blk = json_object();
            if (blk == NULL || json_array_append_new(arr, blk) != 0)
                return vbm_fail(err, VBM_ENOMEM, path, "out of memory");
            if (memform_set(blk, "group", json_integer(g)) != 0
                || memform_set(blk, "cluster", json_integer(h)) != 0)
                return vbm_fail(err, VBM_ENOMEM, path, "out of memory");
            dims[0] = K;
            dims[1] = cg;
            wire_path_key(where, sizeof where, path, "R");
            st = memform_set_array(blk, "R", mem->R + (size_t)gh * (size_t)(K * cg), 2, dims, where,
                                   err);
            if (st != VBM_OK)
                return st;
            dims[1] = K;
            wire_path_key(where, sizeof where, path, "U");
            st = memform_set_array(blk, "U", mem->U + (size_t)gh * (size_t)(K * K), 2, dims, where,
                                   err);
            if (st != VBM_OK)
                return st;
            dims[0] = cg;
            wire_path_key(where, sizeof where, path, "mu_b");
            st = memform_set_array(blk, "mu_b", mem->mu_b + (size_t)gh * (size_t)cg, 1, dims, where,
                                   err);
            if (st != VBM_OK)
                return st;
            if (memform_set(blk, "sigma2_b", json_real(mem->s2_b[gh])) != 0)
                return vbm_fail(err, VBM_ENOMEM, path, "out of memory");
        }
    }
    return VBM_OK;
}

/* Append n tree paths (n x G clusters) with their counts to the array arr,
 * naming it name in errors (name or "memory.joint_paths"). */
static vbm_status memform_encode_path_list(const vbm_memory *mem, long n, const int *paths,
                                           const double *counts, const char *name, json_t *arr,
                                           vbm_error *err)
{
    char path[WIRE_PATH_LEN], where[WIRE_PATH_LEN];
    long G = mem->cfg.groups, p, g, dims[1];
    const int *s;
    json_t *item, *sarr;
    vbm_status st;

    for (p = 0; p < n; p++) {
        wire_path_index(path, sizeof path, name, p);
        s = paths + (size_t)p * (size_t)G;
        for (g = 0; g < G; g++) {
            if (s[g] < 0 || s[g] >= mem->cfg.clusters)
                return vbm_fail(err, VBM_EINVAL, memform_sub(where, sizeof where, path, "s", g),
                                "cluster %d out of range [0, %d)", s[g], mem->cfg.clusters);
        }
        if (!isfinite(counts[p]))
            return memform_fail_sub(err, path, "count", "not finite");
        item = json_object();
        if (item == NULL || json_array_append_new(arr, item) != 0)
            return vbm_fail(err, VBM_ENOMEM, path, "out of memory");
        dims[0] = G;
        st = wire_new_int_array(s, 1, dims, path, &sarr, err);
        if (st != VBM_OK)
            return st;
        if (memform_set(item, "s", sarr) != 0
            || memform_set(item, "count", json_real(counts[p])) != 0)
            return vbm_fail(err, VBM_ENOMEM, path, "out of memory");
    }
    return VBM_OK;
}

/* Append the tree path counts of mem to the array arr. */
static vbm_status memform_encode_paths(const vbm_memory *mem, json_t *arr, vbm_error *err)
{
    return memform_encode_path_list(mem, mem->n_paths, mem->paths, mem->path_counts, "memory.paths",
                                    arr, err);
}

/* root["memos"] = the tree's memos, one object per frame: "s", its paths
 * (n x G clusters), and "score", their scores (n), best first. */
static vbm_status memform_encode_memos(const vbm_memory *mem, json_t *root, vbm_error *err)
{
    char path[WIRE_PATH_LEN];
    long G = mem->cfg.groups, k = mem->cfg.memo_k, dims[2];
    json_t *arr = json_array(), *item, *v;
    vbm_status st;

    if (memform_set(root, "memos", arr) != 0)
        return vbm_fail(err, VBM_ENOMEM, "memory.memos", "out of memory");
    for (long i = 0; i < mem->n_memos; i++) {
        wire_path_index(path, sizeof path, "memory.memos", i);
        item = json_object();
        if (item == NULL || json_array_append_new(arr, item) != 0)
            return vbm_fail(err, VBM_ENOMEM, path, "out of memory");
        dims[0] = mem->memo_n[i];
        dims[1] = G;
        st = wire_new_int_array(mem->memo_paths + (size_t)i * k * G, 2, dims, path, &v, err);
        if (st != VBM_OK)
            return st;
        if (memform_set(item, "s", v) != 0)
            return vbm_fail(err, VBM_ENOMEM, path, "out of memory");
        st = wire_new_array(mem->memo_scores + (size_t)i * k, 1, dims, 0, path, &v, err);
        if (st != VBM_OK)
            return st;
        if (memform_set(item, "score", v) != 0)
            return vbm_fail(err, VBM_ENOMEM, path, "out of memory");
    }
    return VBM_OK;
}

/* Fill root with every member of the memory form. */
static vbm_status memform_encode(const vbm_memory *mem, json_t *root, vbm_error *err)
{
    long K = mem->cfg.rows, C = mem->cfg.code_size, dims[2];
    json_t *obj, *arr;
    vbm_status st;

    if (memform_set(root, "format", json_string(WIRE_MEMORY_FORMAT)) != 0
        || memform_set(root, "version", json_integer(WIRE_MEMORY_VERSION)) != 0)
        return vbm_fail(err, VBM_ENOMEM, "memory", "out of memory");
    st = memform_config_finite(&mem->cfg, err);
    if (st != VBM_OK)
        return st;
    if (memform_set(root, "config", wire_config(&mem->cfg)) != 0)
        return vbm_fail(err, VBM_ENOMEM, "memory.config", "out of memory");

    obj = json_object();
    if (memform_set(root, "prior", obj) != 0)
        return vbm_fail(err, VBM_ENOMEM, "memory.prior", "out of memory");
    dims[0] = K;
    dims[1] = C;
    st = memform_set_array(obj, "R0", mem->R0, 2, dims, "memory.prior.R0", err);
    if (st != VBM_OK)
        return st;
    dims[1] = K;
    st = memform_set_array(obj, "U0", mem->U0, 2, dims, "memory.prior.U0", err);
    if (st != VBM_OK)
        return st;
    dims[0] = C;
    st = memform_set_array(obj, "mu_b0", mem->mu_b0, 1, dims, "memory.prior.mu_b0", err);
    if (st != VBM_OK)
        return st;

    obj = json_object();
    if (memform_set(root, "posterior", obj) != 0)
        return vbm_fail(err, VBM_ENOMEM, "memory.posterior", "out of memory");
    arr = json_array();
    if (memform_set(obj, "clusters", arr) != 0)
        return vbm_fail(err, VBM_ENOMEM, "memory.posterior", "out of memory");
    st = memform_encode_posterior(mem, arr, err);
    if (st != VBM_OK)
        return st;

    arr = json_array();
    if (memform_set(root, "paths", arr) != 0)
        return vbm_fail(err, VBM_ENOMEM, "memory.paths", "out of memory");
    st = memform_encode_paths(mem, arr, err);
    if (st != VBM_OK)
        return st;

    if (memform_set(root, "frames", json_integer(mem->frames)) != 0
        || memform_set(root, "last_elbo",
                       isfinite(mem->last_elbo) ? json_real(mem->last_elbo) : json_null())
               != 0)
        return vbm_fail(err, VBM_ENOMEM, "memory", "out of memory");

    if (mem->n_memos > 0) {
        st = memform_encode_memos(mem, root, err);
        if (st != VBM_OK)
            return st;
    }

    if (mem->cfg.path_prior == VBM_PATH_JOINT && mem->n_jpaths > 0) {
        arr = json_array();
        if (memform_set(root, "joint_paths", arr) != 0)
            return vbm_fail(err, VBM_ENOMEM, "memory.joint_paths", "out of memory");
        st = memform_encode_path_list(mem, mem->n_jpaths, mem->jpaths, mem->jp_counts,
                                      "memory.joint_paths", arr, err);
        if (st != VBM_OK)
            return st;
    }

    if (mem->n_codes > 0) {
        obj = json_object();
        if (memform_set(root, "codes", obj) != 0)
            return vbm_fail(err, VBM_ENOMEM, "memory.codes", "out of memory");
        dims[0] = mem->n_codes;
        dims[1] = C;
        st = memform_set_array(obj, "mu", mem->codes_mu, 2, dims, "memory.codes.mu", err);
        if (st != VBM_OK)
            return st;
        st = memform_set_array(obj, "sigma2", mem->codes_s2, 2, dims, "memory.codes.sigma2", err);
        if (st != VBM_OK)
            return st;
    }
    return VBM_OK;
}

/* *out <- new JSON object of the whole memory (owned by the caller).
 * VBM_EINVAL for a NULL or inconsistent memory or a non-finite value,
 * VBM_ENOMEM; *out is then NULL. */
vbm_status wire_memory_to_json(const vbm_memory *mem, json_t **out, vbm_error *err)
{
    const vbm_config *c;
    json_t *root;
    vbm_status st;

    if (out == NULL)
        return vbm_fail(err, VBM_EINVAL, "memory", "no output given");
    *out = NULL;
    if (mem == NULL)
        return vbm_fail(err, VBM_EINVAL, "memory", "no memory given");
    c = &mem->cfg;
    if (c->code_size < 1 || c->rows < 1 || c->clusters < 1 || c->groups < 1 || mem->cg < 1
        || (long)mem->cg * c->groups != c->code_size || mem->n_paths < 0 || mem->n_codes < 0
        || mem->n_memos < 0 || (mem->n_memos > 0 && c->memo_k < 1))
        return vbm_fail(err, VBM_EINVAL, "memory", "inconsistent sizes (C=%d K=%d H=%d G=%d cg=%d)",
                        c->code_size, c->rows, c->clusters, c->groups, mem->cg);
    root = json_object();
    if (root == NULL)
        return vbm_fail(err, VBM_ENOMEM, "memory", "out of memory");
    st = memform_encode(mem, root, err);
    if (st != VBM_OK) {
        json_decref(root);
        return st;
    }
    *out = root;
    return VBM_OK;
}

/* ---- decoding ---------------------------------------------------------- */

/* Check that the K x K matrix U at path is symmetric positive definite (Cholesky
 * of its lower triangle in work, K*K doubles). */
static vbm_status memform_check_spd(const double *U, long K, double *work, const char *path,
                                    vbm_error *err)
{
    char where[WIRE_PATH_LEN];
    long i, j, k;
    double a, b, tol, d;

    for (i = 0; i < K; i++) {
        if (!(U[i * K + i] > 0))
            return vbm_fail(err, VBM_EINVAL, memform_entry(where, sizeof where, path, i, i),
                            "a diagonal entry must be > 0, got %.17g", U[i * K + i]);
    }
    for (i = 0; i < K; i++) {
        for (j = 0; j < i; j++) {
            a = U[i * K + j];
            b = U[j * K + i];
            tol = WIRE_MEMORY_SYM_TOL * sqrt(U[i * K + i] * U[j * K + j]);
            if (fabs(a - b) > tol)
                return vbm_fail(err, VBM_EINVAL, memform_entry(where, sizeof where, path, i, j),
                                "not symmetric (%.17g, but [%ld][%ld] is %.17g)", a, j, i, b);
        }
    }
    for (j = 0; j < K; j++) {
        d = U[j * K + j];
        for (k = 0; k < j; k++)
            d -= work[j * K + k] * work[j * K + k];
        if (!(d > 0) || !isfinite(d))
            return vbm_fail(err, VBM_EINVAL, path,
                            "not positive definite (Cholesky pivot %ld is %.3g)", j, d);
        work[j * K + j] = sqrt(d);
        for (i = j + 1; i < K; i++) {
            a = U[i * K + j];
            for (k = 0; k < j; k++)
                a -= work[i * K + k] * work[j * K + k];
            work[i * K + j] = a / work[j * K + j];
        }
    }
    return VBM_OK;
}

/* Require v to be an object with only the given keys. */
static vbm_status memform_object_at(const json_t *v, const char *path, const char *const *allowed,
                                    vbm_error *err)
{
    if (v == NULL)
        return vbm_fail(err, VBM_EINVAL, path, "missing");
    if (!json_is_object(v))
        return vbm_fail(err, VBM_EINVAL, path, "expected an object, got %s", wire_type_name(v));
    return wire_check_keys(v, path, allowed, err);
}

/* Read the prior's R0 and U0 into fresh buffers (*R0, *U0 owned by the caller,
 * set even on failure). */
static vbm_status memform_decode_prior(const json_t *prior, const vbm_config *cfg, double **R0,
                                       double **U0, vbm_error *err)
{
    static const char *const keys[] = {"R0", "U0", "mu_b0", NULL};
    long K = cfg->rows, C = cfg->code_size, dims[2];
    json_t *v;
    vbm_status st;

    *R0 = NULL;
    *U0 = NULL;
    st = memform_object_at(prior, "memory.prior", keys, err);
    if (st != VBM_OK)
        return st;
    *R0 = vbm_calloc((size_t)(K * C), sizeof(double));
    *U0 = vbm_calloc((size_t)(K * K), sizeof(double));
    if (*R0 == NULL || *U0 == NULL)
        return vbm_fail(err, VBM_ENOMEM, "memory.prior", "out of memory");
    st = memform_require(prior, "memory.prior", "R0", &v, err);
    if (st != VBM_OK)
        return st;
    dims[0] = K;
    dims[1] = C;
    st = wire_read_array(v, "memory.prior.R0", 2, dims, 0, *R0, err);
    if (st != VBM_OK)
        return st;
    st = memform_require(prior, "memory.prior", "U0", &v, err);
    if (st != VBM_OK)
        return st;
    dims[1] = K;
    st = wire_read_array(v, "memory.prior.U0", 2, dims, 0, *U0, err);
    if (st != VBM_OK)
        return st;
    /* mu_b0 must exist too; it is read after the memory is created. */
    return memform_require(prior, "memory.prior", "mu_b0", &v, err);
}

/* Without a shift, a posterior block's mu_b (cg values) and sigma2_b must be 0. */
static vbm_status memform_check_no_shift(const double *mu_b, long cg, double s2_b, const char *path,
                                         vbm_error *err)
{
    char where[WIRE_PATH_LEN];
    long j;

    for (j = 0; j < cg; j++) {
        if (mu_b[j] != 0)
            return vbm_fail(err, VBM_EINVAL, memform_sub(where, sizeof where, path, "mu_b", j),
                            "must be 0 when config.shift is false, got %.17g", mu_b[j]);
    }
    if (s2_b != 0)
        return vbm_fail(err, VBM_EINVAL, memform_key(where, sizeof where, path, "sigma2_b"),
                        "must be 0 when config.shift is false, got %.17g", s2_b);
    return VBM_OK;
}

/* Read the posterior blocks into mem (K*K doubles of scratch in work). */
static vbm_status memform_decode_posterior(const json_t *post, vbm_memory *mem, double *work,
                                           vbm_error *err)
{
    static const char *const keys[] = {"clusters", NULL};
    static const char *const blk_keys[] = {"group", "cluster", "R", "U", "mu_b", "sigma2_b", NULL};
    char path[WIRE_PATH_LEN], where[WIRE_PATH_LEN];
    long K = mem->cfg.rows, G = mem->cfg.groups, H = mem->cfg.clusters, cg = mem->cg;
    long g, h, gh, x = 0, dims[2];
    json_t *arr, *blk;
    double *U;
    vbm_status st;

    st = memform_object_at(post, "memory.posterior", keys, err);
    if (st != VBM_OK)
        return st;
    st = memform_require(post, "memory.posterior", "clusters", &arr, err);
    if (st != VBM_OK)
        return st;
    if (!json_is_array(arr))
        return vbm_fail(err, VBM_EINVAL, "memory.posterior.clusters", "expected an array, got %s",
                        wire_type_name(arr));
    if (json_array_size(arr) != (size_t)(G * H))
        return vbm_fail(err, VBM_EINVAL, "memory.posterior.clusters",
                        "expected %ld blocks (groups %ld x clusters %ld), got %zu", G * H, G, H,
                        json_array_size(arr));
    for (g = 0; g < G; g++) {
        for (h = 0; h < H; h++) {
            gh = g * H + h;
            wire_path_index(path, sizeof path, "memory.posterior.clusters", gh);
            blk = json_array_get(arr, (size_t)gh);
            st = memform_object_at(blk, path, blk_keys, err);
            if (st != VBM_OK)
                return st;

            wire_path_key(where, sizeof where, path, "group");
            st = wire_get_long(json_object_get(blk, "group"), where, g, g, &x, err);
            if (st != VBM_OK)
                return st;
            wire_path_key(where, sizeof where, path, "cluster");
            st = wire_get_long(json_object_get(blk, "cluster"), where, h, h, &x, err);
            if (st != VBM_OK)
                return st;

            dims[0] = K;
            dims[1] = cg;
            wire_path_key(where, sizeof where, path, "R");
            st = wire_read_array(json_object_get(blk, "R"), where, 2, dims, 0,
                                 mem->R + (size_t)gh * (size_t)(K * cg), err);
            if (st != VBM_OK)
                return st;

            dims[1] = K;
            wire_path_key(where, sizeof where, path, "U");
            U = mem->U + (size_t)gh * (size_t)(K * K);
            st = wire_read_array(json_object_get(blk, "U"), where, 2, dims, 0, U, err);
            if (st == VBM_OK)
                st = memform_check_spd(U, K, work, where, err);
            if (st != VBM_OK)
                return st;

            dims[0] = cg;
            wire_path_key(where, sizeof where, path, "mu_b");
            st = wire_read_array(json_object_get(blk, "mu_b"), where, 1, dims, 0,
                                 mem->mu_b + (size_t)gh * (size_t)cg, err);
            if (st != VBM_OK)
                return st;

            wire_path_key(where, sizeof where, path, "sigma2_b");
            st = wire_get_number(json_object_get(blk, "sigma2_b"), where, &mem->s2_b[gh], err);
            if (st != VBM_OK)
                return st;
            if (mem->cfg.shift && !(mem->s2_b[gh] > 0))
                return vbm_fail(err, VBM_EINVAL, where, "the shift variance must be > 0, got %.17g",
                                mem->s2_b[gh]);
            if (!mem->cfg.shift) {
                st = memform_check_no_shift(mem->mu_b + (size_t)gh * (size_t)cg, cg, mem->s2_b[gh],
                                            path, err);
                if (st != VBM_OK)
                    return st;
            }
        }
    }
    return VBM_OK;
}

/* Decoded tree path counts, owned until moved into a memory. */
typedef struct {
    long n;
    int *s;         /* n x G */
    double *counts; /* n */
} memform_paths;

/* Read the optional "paths" (or "joint_paths": name) member v (NULL: none) into *out. */
static vbm_status memform_decode_path_list(const json_t *v, const vbm_config *cfg, const char *name,
                                           memform_paths *out, vbm_error *err)
{
    static const char *const keys[] = {"s", "count", NULL};
    char path[WIRE_PATH_LEN], where[WIRE_PATH_LEN];
    long G = cfg->groups, n, p, g, x = 0;
    json_t *item, *s;
    vbm_status st;

    if (v == NULL)
        return VBM_OK;
    if (!json_is_array(v))
        return vbm_fail(err, VBM_EINVAL, name, "expected an array, got %s", wire_type_name(v));
    if (json_array_size(v) > (size_t)VBM_MAX_ELEMENTS / (size_t)G)
        return vbm_fail(err, VBM_EINVAL, name, "too many paths (%zu)", json_array_size(v));
    n = (long)json_array_size(v);
    if (n == 0)
        return VBM_OK;
    if (cfg->kind != VBM_TREE)
        return vbm_fail(err, VBM_EINVAL, name, "only the tree model keeps path counts (kind is %s)",
                        vbm_kind_name(cfg->kind));
    out->s = vbm_calloc((size_t)(n * G), sizeof(int));
    out->counts = vbm_calloc((size_t)n, sizeof(double));
    if (out->s == NULL || out->counts == NULL)
        return vbm_fail(err, VBM_ENOMEM, name, "out of memory");
    out->n = n;
    for (p = 0; p < n; p++) {
        wire_path_index(path, sizeof path, name, p);
        item = json_array_get(v, (size_t)p);
        st = memform_object_at(item, path, keys, err);
        if (st != VBM_OK)
            return st;
        wire_path_key(where, sizeof where, path, "s");
        s = json_object_get(item, "s");
        if (s == NULL)
            return vbm_fail(err, VBM_EINVAL, where, "missing");
        if (!json_is_array(s))
            return vbm_fail(err, VBM_EINVAL, where, "expected an array, got %s", wire_type_name(s));
        if (json_array_size(s) != (size_t)G)
            return vbm_fail(err, VBM_EINVAL, where,
                            "expected an array of %ld clusters (one per group), got %zu", G,
                            json_array_size(s));
        for (g = 0; g < G; g++) {
            if (snprintf(where, sizeof where, "%s.s[%ld]", path, g) < 0)
                where[0] = '\0';
            st = wire_get_long(json_array_get(s, (size_t)g), where, 0, cfg->clusters - 1, &x, err);
            if (st != VBM_OK)
                return st;
            out->s[p * G + g] = (int)x;
        }
        wire_path_key(where, sizeof where, path, "count");
        st = wire_get_number(json_object_get(item, "count"), where, &out->counts[p], err);
        if (st != VBM_OK)
            return st;
        if (!(out->counts[p] > 0))
            return vbm_fail(err, VBM_EINVAL, where, "a count must be > 0, got %.17g",
                            out->counts[p]);
    }
    return VBM_OK;
}

static vbm_status memform_decode_paths(const json_t *v, const vbm_config *cfg, memform_paths *out,
                                       vbm_error *err)
{
    return memform_decode_path_list(v, cfg, "memory.paths", out, err);
}

/* Decoded tree memos, owned until moved into a memory (the layout of vbm_memory). */
typedef struct {
    long n;
    int *cnt;      /* n */
    int *paths;    /* n x memo_k x G, unused slots -1 */
    double *score; /* n x memo_k, unused slots 0 */
} memform_memos;

/* Read the optional "memos" member v (NULL: none) into *out: per frame
 * {"s": n x G clusters, "score": n scores}, 1 <= n <= memo_k, scores finite and
 * best first, no path twice. */
static vbm_status memform_decode_memos(const json_t *v, const vbm_config *cfg, memform_memos *out,
                                       vbm_error *err)
{
    static const char *const keys[] = {"s", "score", NULL};
    char path[WIRE_PATH_LEN], where[WIRE_PATH_LEN];
    long G = cfg->groups, k = cfg->memo_k, n, x = 0;
    vbm_status st;

    if (v == NULL)
        return VBM_OK;
    if (!json_is_array(v))
        return vbm_fail(err, VBM_EINVAL, "memory.memos", "expected an array, got %s",
                        wire_type_name(v));
    n = (long)json_array_size(v);
    if (n == 0)
        return VBM_OK;
    if (k < 1)
        return vbm_fail(err, VBM_EINVAL, "memory.memos",
                        "the memory keeps no memos (config.memo_k is 0)");
    if ((size_t)n > (size_t)VBM_MAX_ELEMENTS / (size_t)(k * G))
        return vbm_fail(err, VBM_EINVAL, "memory.memos", "too many memos (%ld)", n);
    out->cnt = vbm_calloc((size_t)n, sizeof(int));
    out->paths = vbm_calloc((size_t)(n * k * G), sizeof(int));
    out->score = vbm_calloc((size_t)(n * k), sizeof(double));
    if (out->cnt == NULL || out->paths == NULL || out->score == NULL)
        return vbm_fail(err, VBM_ENOMEM, "memory.memos", "out of memory");
    out->n = n;
    for (long i = 0; i < n * k * G; i++)
        out->paths[i] = -1;
    for (long i = 0; i < n; i++) {
        json_t *item = json_array_get(v, (size_t)i), *s, *sc;
        wire_path_index(path, sizeof path, "memory.memos", i);
        st = memform_object_at(item, path, keys, err);
        if (st == VBM_OK)
            st = memform_require(item, path, "s", &s, err);
        if (st == VBM_OK)
            st = memform_require(item, path, "score", &sc, err);
        if (st != VBM_OK)
            return st;
        wire_path_key(where, sizeof where, path, "s");
        if (!json_is_array(s) || json_array_size(s) < 1 || json_array_size(s) > (size_t)k)
            return vbm_fail(err, VBM_EINVAL, where, "expected an array of 1 to %ld paths", k);
        long m = (long)json_array_size(s);
        out->cnt[i] = (int)m;
        double *score = out->score + (size_t)i * k;
        long dims[1] = {m};
        wire_path_key(where, sizeof where, path, "score");
        st = wire_read_array(sc, where, 1, dims, 0, score, err);
        if (st != VBM_OK)
            return st;
        for (long j = 0; j < m; j++) {
            int *p = out->paths + ((size_t)i * k + j) * G;
            json_t *pj = json_array_get(s, (size_t)j);
            if (snprintf(where, sizeof where, "%s.s[%ld]", path, j) < 0)
                where[0] = '\0';
            if (!json_is_array(pj) || json_array_size(pj) != (size_t)G)
                return vbm_fail(err, VBM_EINVAL, where,
                                "expected an array of %ld clusters (one per group)", G);
            for (long g = 0; g < G; g++) {
                char at[WIRE_PATH_LEN];
                if (snprintf(at, sizeof at, "%s[%ld]", where, g) < 0)
                    at[0] = '\0';
                st =
                    wire_get_long(json_array_get(pj, (size_t)g), at, 0, cfg->clusters - 1, &x, err);
                if (st != VBM_OK)
                    return st;
                p[g] = (int)x;
            }
            for (long u = 0; u < j; u++)
                if (memcmp(out->paths + ((size_t)i * k + u) * G, p, sizeof(int) * G) == 0)
                    return vbm_fail(err, VBM_EINVAL, where, "the same path as entry %ld", u);
            if (j > 0 && score[j] > score[j - 1]) {
                if (snprintf(where, sizeof where, "%s.score[%ld]", path, j) < 0)
                    where[0] = '\0';
                return vbm_fail(err, VBM_EINVAL, where,
                                "scores must be sorted best first (%.17g > %.17g)", score[j],
                                score[j - 1]);
            }
        }
    }
    return VBM_OK;
}

/* Decoded retained codes, owned until moved into a memory. */
typedef struct {
    long n;
    double *mu; /* n x C */
    double *s2; /* n x C */
} memform_codes;

/* Read the optional "codes" member v (NULL: none) into *out. */
static vbm_status memform_decode_codes(const json_t *v, const vbm_config *cfg, memform_codes *out,
                                       vbm_error *err)
{
    static const char *const keys[] = {"mu", "sigma2", NULL};
    long C = cfg->code_size, n, dims[2];
    json_t *mu, *s2;
    vbm_status st;

    if (v == NULL)
        return VBM_OK;
    st = memform_object_at(v, "memory.codes", keys, err);
    if (st == VBM_OK)
        st = memform_require(v, "memory.codes", "mu", &mu, err);
    if (st == VBM_OK)
        st = memform_require(v, "memory.codes", "sigma2", &s2, err);
    if (st != VBM_OK)
        return st;
    if (!json_is_array(mu))
        return vbm_fail(err, VBM_EINVAL, "memory.codes.mu", "expected an array, got %s",
                        wire_type_name(mu));
    if (json_array_size(mu) > (size_t)cfg->retain_max)
        return vbm_fail(err, VBM_EINVAL, "memory.codes.mu",
                        "%zu retained codes exceed config.retain_max (%ld)", json_array_size(mu),
                        cfg->retain_max);
    if (json_array_size(mu) > (size_t)(VBM_MAX_ELEMENTS / C))
        return vbm_fail(err, VBM_EINVAL, "memory.codes.mu", "too many codes (%zu)",
                        json_array_size(mu));
    n = (long)json_array_size(mu);
    if (n == 0) {
        dims[0] = 0;
        return wire_read_array(s2, "memory.codes.sigma2", 1, dims, 0, NULL, err);
    }
    out->mu = vbm_calloc((size_t)(n * C), sizeof(double));
    out->s2 = vbm_calloc((size_t)(n * C), sizeof(double));
    if (out->mu == NULL || out->s2 == NULL)
        return vbm_fail(err, VBM_ENOMEM, "memory.codes", "out of memory");
    out->n = n;
    dims[0] = n;
    dims[1] = C;
    st = wire_read_array(mu, "memory.codes.mu", 2, dims, 0, out->mu, err);
    if (st != VBM_OK)
        return st;
    return wire_read_array(s2, "memory.codes.sigma2", 2, dims, 1, out->s2, err);
}

/* Check the header members (format, version) of a memory object. */
static vbm_status memform_decode_header(const json_t *json, vbm_error *err)
{
    static const char *const keys[] = {"format",    "version", "config",      "prior",
                                       "posterior", "paths",   "frames",      "last_elbo",
                                       "codes",     "memos",   "joint_paths", NULL};
    json_t *v;
    long version = 0;
    vbm_status st;

    st = memform_object_at(json, "memory", keys, err);
    if (st == VBM_OK)
        st = memform_require(json, "memory", "format", &v, err);
    if (st != VBM_OK)
        return st;
    if (!json_is_string(v) || strcmp(json_string_value(v), WIRE_MEMORY_FORMAT) != 0)
        return vbm_fail(err, VBM_EINVAL, "memory.format", "expected \"%s\"", WIRE_MEMORY_FORMAT);
    st = memform_require(json, "memory", "version", &v, err);
    if (st != VBM_OK)
        return st;
    if (!json_is_integer(v) || json_integer_value(v) != WIRE_MEMORY_VERSION) {
        st = wire_get_long(v, "memory.version", LONG_MIN, LONG_MAX, &version, err);
        if (st != VBM_OK)
            return st;
        return vbm_fail(err, VBM_EINVAL, "memory.version", "unsupported version %ld (expected %d)",
                        version, WIRE_MEMORY_VERSION);
    }
    return VBM_OK;
}

/* Read the scalar bookkeeping members (frames, last_elbo) into mem. */
static vbm_status memform_decode_bookkeeping(const json_t *json, vbm_memory *mem, vbm_error *err)
{
    json_t *v;
    vbm_status st;

    mem->frames = 0;
    v = json_object_get(json, "frames");
    if (v != NULL) {
        st = wire_get_long(v, "memory.frames", 0, LONG_MAX, &mem->frames, err);
        if (st != VBM_OK)
            return st;
    }
    mem->last_elbo = NAN;
    v = json_object_get(json, "last_elbo");
    if (v != NULL && !json_is_null(v))
        return wire_get_number(v, "memory.last_elbo", &mem->last_elbo, err);
    return VBM_OK;
}

/* Decode everything except the header into a new memory *out. Buffers in paths
 * and codes are owned by the caller. */
static vbm_status memform_decode(const json_t *json, vbm_memory **out, memform_paths *paths,
                                 memform_codes *codes, memform_memos *memos, vbm_error *err)
{
    vbm_config cfg;
    vbm_memory *mem = NULL;
    double *R0 = NULL, *U0 = NULL, *work = NULL;
    json_t *v;
    long dims[1];
    vbm_status st;

    memset(&cfg, 0, sizeof cfg);
    st = memform_require(json, "memory", "config", &v, err);
    if (st == VBM_OK)
        st = wire_config_read(v, "memory.config", 1, 0, &cfg, err);
    if (st != VBM_OK)
        return st;
    st = vbm_config_check(&cfg, err);
    if (st != VBM_OK) {
        vbm_error_rebase(err, "memory.config");
        return st;
    }

    st = memform_require(json, "memory", "prior", &v, err);
    if (st == VBM_OK)
        st = memform_decode_prior(v, &cfg, &R0, &U0, err);
    if (st == VBM_OK) {
        st = vbm_memory_create(&cfg, R0, U0, &mem, err);
        if (st != VBM_OK)
            vbm_error_rebase(err, "memory");
    }
    free(R0);
    free(U0);
    if (st != VBM_OK)
        return st;

    dims[0] = cfg.code_size;
    st = wire_read_array(json_object_get(json_object_get(json, "prior"), "mu_b0"),
                         "memory.prior.mu_b0", 1, dims, 0, mem->mu_b0, err);
    if (st == VBM_OK) {
        work = vbm_calloc((size_t)cfg.rows * (size_t)cfg.rows, sizeof(double));
        if (work == NULL)
            st = vbm_fail(err, VBM_ENOMEM, "memory.posterior", "out of memory");
    }
    if (st == VBM_OK)
        st = memform_require(json, "memory", "posterior", &v, err);
    if (st == VBM_OK)
        st = memform_decode_posterior(v, mem, work, err);
    free(work);
    if (st == VBM_OK)
        st = memform_decode_paths(json_object_get(json, "paths"), &cfg, paths, err);
    if (st == VBM_OK)
        st = memform_decode_bookkeeping(json, mem, err);
    if (st == VBM_OK)
        st = memform_decode_codes(json_object_get(json, "codes"), &cfg, codes, err);
    if (st == VBM_OK)
        st = memform_decode_memos(json_object_get(json, "memos"), &cfg, memos, err);
    memform_paths jp = {0, NULL, NULL};
    v = json_object_get(json, "joint_paths");
    if (st == VBM_OK && v != NULL && cfg.path_prior != VBM_PATH_JOINT)
        st = vbm_fail(err, VBM_EINVAL, "memory.joint_paths",
                      "the memory has no joint path prior (config.path_prior is factorised)");
    if (st == VBM_OK)
        st = memform_decode_path_list(v, &cfg, "memory.joint_paths", &jp, err);
    if (st != VBM_OK) {
        free(jp.s);
        free(jp.counts);
        vbm_memory_free(mem);
        return st;
    }
    mem->n_jpaths = jp.n;
    mem->jpaths = jp.s;
    mem->jp_counts = jp.counts;

    /* Move the variable-length parts into the memory (the library frees them). */
    free(mem->paths);
    free(mem->path_counts);
    mem->n_paths = paths->n;
    mem->paths = paths->s;
    mem->path_counts = paths->counts;
    paths->n = 0;
    paths->s = NULL;
    paths->counts = NULL;
    free(mem->codes_mu);
    free(mem->codes_s2);
    mem->n_codes = codes->n;
    mem->codes_mu = codes->mu;
    mem->codes_s2 = codes->s2;
    codes->n = 0;
    codes->mu = NULL;
    codes->s2 = NULL;
    mem->n_memos = memos->n;
    mem->memo_n = memos->cnt;
    mem->memo_paths = memos->paths;
    mem->memo_scores = memos->score;
    memos->n = 0;
    memos->cnt = NULL;
    memos->paths = NULL;
    memos->score = NULL;
    *out = mem;
    return VBM_OK;
}

/* *out <- new memory decoded from json (owned by the caller). VBM_EFORMAT for
 * any malformed part (the message names field and index), VBM_ENOMEM; *out is
 * then NULL and nothing leaks. */
vbm_status wire_memory_from_json(const json_t *json, vbm_memory **out, vbm_error *err)
{
    memform_paths paths = {0, NULL, NULL};
    memform_codes codes = {0, NULL, NULL};
    memform_memos memos = {0, NULL, NULL, NULL};
    vbm_status st;

    if (out == NULL)
        return vbm_fail(err, VBM_EINVAL, "memory", "no output given");
    *out = NULL;
    st = memform_decode_header(json, err);
    if (st == VBM_OK)
        st = memform_decode(json, out, &paths, &codes, &memos, err);
    free(paths.s);
    free(paths.counts);
    free(codes.mu);
    free(codes.s2);
    free(memos.cnt);
    free(memos.paths);
    free(memos.score);
    if (st == VBM_OK || st == VBM_ENOMEM)
        return st;
    /* A malformed memory is a format failure whatever check found it; the field
     * and message recorded by that check stand. */
    if (err != NULL)
        err->status = VBM_EFORMAT;
    return VBM_EFORMAT;
}
