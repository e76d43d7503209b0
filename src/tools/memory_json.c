/* memory_json.c -- owns the JSON encoding and checked decoding of a vbm_memory and the JSON<->array helpers. */
#define _POSIX_C_SOURCE 200809L

#include "memory_json.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MEMJSON_PATH_LEN 256

/* Relative tolerance of the symmetry check of imported row covariances. */
#define MEMJSON_SYM_TOL 1e-8

/* Write a formatted message into msg (when wanted) and return st. */
static vbm_status memjson_fail(char *msg, size_t msglen, vbm_status st, const char *fmt, ...)
{
    va_list ap;

    if (msg != NULL && msglen > 0) {
        va_start(ap, fmt);
        if (vsnprintf(msg, msglen, fmt, ap) < 0)
            msg[0] = '\0';
        va_end(ap);
    }
    return st;
}

/* buf <- base + "." + key (truncated to len, always NUL-terminated). */
static void memjson_path_key(char *buf, size_t len, const char *base, const char *key)
{
    if (snprintf(buf, len, "%s.%s", base, key) < 0)
        buf[0] = '\0';
}

/* buf <- base + "[i]" (truncated to len, always NUL-terminated). */
static void memjson_path_index(char *buf, size_t len, const char *base, long i)
{
    if (snprintf(buf, len, "%s[%ld]", base, i) < 0)
        buf[0] = '\0';
}

/* buf <- base + "[idx[0]]...[idx[depth-1]]" (truncated, NUL-terminated). */
static void memjson_path_indices(char *buf, size_t len, const char *base, const long *idx,
                                 int depth)
{
    size_t used;
    int n, d;

    n = snprintf(buf, len, "%s", base);
    if (n < 0) {
        buf[0] = '\0';
        return;
    }
    used = (size_t)n;
    for (d = 0; d < depth && used < len; d++) {
        n = snprintf(buf + used, len - used, "[%ld]", idx[d]);
        if (n < 0)
            return;
        used += (size_t)n;
    }
}

/* Length of the field name that starts libmsg and is followed by ": ", or 0. */
static size_t memjson_leading_field(const char *libmsg)
{
    size_t n = 0;
    char ch;

    for (;;) {
        ch = libmsg[n];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')
            || ch == '_' || ch == '.' || ch == '[' || ch == ']')
            n++;
        else
            break;
    }
    if (n == 0 || libmsg[n] != ':' || libmsg[n + 1] != ' ')
        return 0;
    return n;
}

/* Re-root the libvbmem message libmsg under the JSON path base into out
 * ("model" + "groups: ..." -> "model.groups: ..."). Never fails. */
void memjson_qualify_message(char *out, size_t out_len, const char *base, const char *libmsg)
{
    size_t n = memjson_leading_field(libmsg);
    int rc;

    if (out == NULL || out_len == 0)
        return;
    if (base[0] == '\0')
        rc = snprintf(out, out_len, "%s", libmsg);
    else if (n > 0)
        rc = snprintf(out, out_len, "%s.%s", base, libmsg);
    else
        rc = snprintf(out, out_len, "%s: %s", base, libmsg);
    if (rc < 0)
        out[0] = '\0';
}

/* JSON type name of v ("nothing" for NULL). Never fails. */
const char *memjson_type_name(const json_t *v)
{
    if (v == NULL)
        return "nothing";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "real";
    case JSON_TRUE: return "true";
    case JSON_FALSE: return "false";
    case JSON_NULL: return "null";
    }
    return "unknown";
}

/* Reject members of obj whose key is not in the NULL-terminated list allowed. */
static vbm_status memjson_check_keys(const json_t *obj, const char *path,
                                     const char *const *allowed, char *msg, size_t msglen)
{
    const char *key;
    json_t *val;
    int i, found;

    json_object_foreach((json_t *)obj, key, val) {
        found = 0;
        for (i = 0; allowed[i] != NULL; i++) {
            if (strcmp(key, allowed[i]) == 0) {
                found = 1;
                break;
            }
        }
        if (!found)
            return memjson_fail(msg, msglen, VBM_EINVAL, "%s.%s: unknown field", path, key);
    }
    return VBM_OK;
}

/* Fetch the required member key of obj, or fail naming it. */
static vbm_status memjson_require(const json_t *obj, const char *path, const char *key,
                                  json_t **val, char *msg, size_t msglen)
{
    *val = json_object_get(obj, key);
    if (*val == NULL)
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s.%s: missing", path, key);
    return VBM_OK;
}

/* *out <- the finite number v. VBM_EINVAL when v is missing, not a number or
 * not finite. */
vbm_status memjson_get_number(const json_t *v, const char *path, double *out, char *msg,
                              size_t msglen)
{
    double d;

    if (v == NULL)
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: missing", path);
    if (!json_is_number(v))
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: expected a number, got %s", path,
                            memjson_type_name(v));
    d = json_number_value(v);
    if (!isfinite(d))
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: not a finite number", path);
    *out = d;
    return VBM_OK;
}

/* *out <- the JSON integer v in [lo, hi]. VBM_EINVAL otherwise. */
vbm_status memjson_get_long(const json_t *v, const char *path, long lo, long hi, long *out,
                            char *msg, size_t msglen)
{
    json_int_t x;

    if (v == NULL)
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: missing", path);
    if (!json_is_integer(v))
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: expected an integer, got %s", path,
                            memjson_type_name(v));
    x = json_integer_value(v);
    if (x < (json_int_t)lo && hi == LONG_MAX)
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: must be >= %ld, got %lld", path, lo,
                            (long long)x);
    if (x < (json_int_t)lo || x > (json_int_t)hi)
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: %lld is out of range [%ld, %ld]", path,
                            (long long)x, lo, hi);
    *out = (long)x;
    return VBM_OK;
}

/* State of one memjson_read_array walk. */
typedef struct {
    const char *path;
    int ndim;
    const long *dims;
    int nonneg;
    double *out;
    size_t pos;
    long idx[MEMJSON_MAX_DIMS];
    char *msg;
    size_t msglen;
} memjson_reader;

/* Read the sub-array v found at depth of the walk r. */
static vbm_status memjson_read_level(memjson_reader *r, const json_t *v, int depth)
{
    char where[MEMJSON_PATH_LEN];
    size_t i, n;
    double d;
    vbm_status st;

    if (depth == r->ndim) {
        if (!json_is_number(v)) {
            memjson_path_indices(where, sizeof where, r->path, r->idx, depth);
            return memjson_fail(r->msg, r->msglen, VBM_EINVAL, "%s: expected a number, got %s",
                                where, memjson_type_name(v));
        }
        d = json_number_value(v);
        if (!isfinite(d)) {
            memjson_path_indices(where, sizeof where, r->path, r->idx, depth);
            return memjson_fail(r->msg, r->msglen, VBM_EINVAL, "%s: not a finite number", where);
        }
        if (r->nonneg && d < 0) {
            memjson_path_indices(where, sizeof where, r->path, r->idx, depth);
            return memjson_fail(r->msg, r->msglen, VBM_EINVAL,
                                "%s: a variance must be >= 0, got %.17g", where, d);
        }
        r->out[r->pos++] = d;
        return VBM_OK;
    }
    if (!json_is_array(v)) {
        memjson_path_indices(where, sizeof where, r->path, r->idx, depth);
        return memjson_fail(r->msg, r->msglen, VBM_EINVAL, "%s: expected an array, got %s", where,
                            memjson_type_name(v));
    }
    n = json_array_size(v);
    if (n != (size_t)r->dims[depth]) {
        memjson_path_indices(where, sizeof where, r->path, r->idx, depth);
        return memjson_fail(r->msg, r->msglen, VBM_EINVAL,
                            "%s: expected an array of %ld elements, got %zu", where,
                            r->dims[depth], n);
    }
    for (i = 0; i < n; i++) {
        r->idx[depth] = (long)i;
        st = memjson_read_level(r, json_array_get(v, i), depth + 1);
        if (st != VBM_OK)
            return st;
    }
    return VBM_OK;
}

/* out <- the nested array v of exact shape dims (finite numbers, >= 0 when
 * nonneg). VBM_EINVAL naming the first bad element; out is then partial. */
vbm_status memjson_read_array(const json_t *v, const char *path, int ndim, const long *dims,
                              int nonneg, double *out, char *msg, size_t msglen)
{
    memjson_reader r;
    int d;

    if (ndim < 1 || ndim > MEMJSON_MAX_DIMS)
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: unsupported array rank %d", path, ndim);
    for (d = 0; d < ndim; d++) {
        if (dims[d] < 0)
            return memjson_fail(msg, msglen, VBM_EINVAL, "%s: negative dimension %ld", path,
                                dims[d]);
    }
    if (v == NULL)
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: missing", path);
    memset(&r, 0, sizeof r);
    r.path = path;
    r.ndim = ndim;
    r.dims = dims;
    r.nonneg = nonneg;
    r.out = out;
    r.msg = msg;
    r.msglen = msglen;
    return memjson_read_level(&r, v, 0);
}

/* *rows, *cols <- the length of v and of its first row. VBM_EINVAL when v is
 * not an array or it or its first row is empty or not an array. */
vbm_status memjson_matrix_shape(const json_t *v, const char *path, long *rows, long *cols,
                                char *msg, size_t msglen)
{
    const json_t *first;

    if (v == NULL)
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: missing", path);
    if (!json_is_array(v))
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: expected an array of rows, got %s",
                            path, memjson_type_name(v));
    if (json_array_size(v) == 0)
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: must have at least one row", path);
    first = json_array_get(v, 0);
    if (!json_is_array(first))
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s[0]: expected an array, got %s", path,
                            memjson_type_name(first));
    if (json_array_size(first) == 0)
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s[0]: must have at least one column",
                            path);
    if (json_array_size(v) > (size_t)LONG_MAX || json_array_size(first) > (size_t)LONG_MAX)
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: too large", path);
    *rows = (long)json_array_size(v);
    *cols = (long)json_array_size(first);
    return VBM_OK;
}

/* Build the sub-array at depth from a (doubles when ints is NULL), advancing *pos;
 * NULL when out of memory. */
static json_t *memjson_build_level(const double *a, const int *ints, int ndim, const long *dims,
                                   int depth, size_t *pos)
{
    json_t *arr, *item;
    long i;

    arr = json_array();
    if (arr == NULL)
        return NULL;
    for (i = 0; i < dims[depth]; i++) {
        if (depth + 1 == ndim) {
            if (ints != NULL)
                item = json_integer((json_int_t)ints[*pos]);
            else
                item = json_real(a[*pos]);
            (*pos)++;
        } else {
            item = memjson_build_level(a, ints, ndim, dims, depth + 1, pos);
        }
        if (json_array_append_new(arr, item) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

/* Check the rank and dims of an array to build; product of dims into *total. */
static vbm_status memjson_check_dims(int ndim, const long *dims, const char *path,
                                     size_t *total, char *msg, size_t msglen)
{
    size_t n = 1;
    int d;

    if (ndim < 1 || ndim > MEMJSON_MAX_DIMS)
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: unsupported array rank %d", path, ndim);
    for (d = 0; d < ndim; d++) {
        if (dims[d] < 0)
            return memjson_fail(msg, msglen, VBM_EINVAL, "%s: negative dimension %ld", path,
                                dims[d]);
        if (dims[d] > 0 && n > ((size_t)-1) / (size_t)dims[d])
            return memjson_fail(msg, msglen, VBM_ENOMEM, "%s: array too large", path);
        n *= (size_t)dims[d];
    }
    *total = n;
    return VBM_OK;
}

/* *out <- new nested JSON array of the doubles a with shape dims (owned by the
 * caller). VBM_EINVAL for a non-finite value, VBM_ENOMEM; *out is then NULL. */
vbm_status memjson_new_array(const double *a, int ndim, const long *dims, const char *path,
                             json_t **out, char *msg, size_t msglen)
{
    char where[MEMJSON_PATH_LEN];
    long idx[MEMJSON_MAX_DIMS];
    size_t total = 0, p, rest;
    vbm_status st;
    int d;

    *out = NULL;
    st = memjson_check_dims(ndim, dims, path, &total, msg, msglen);
    if (st != VBM_OK)
        return st;
    for (p = 0; p < total; p++) {
        if (!isfinite(a[p])) {
            rest = p;
            for (d = ndim - 1; d >= 0; d--) {
                idx[d] = (long)(rest % (size_t)dims[d]);
                rest /= (size_t)dims[d];
            }
            memjson_path_indices(where, sizeof where, path, idx, ndim);
            return memjson_fail(msg, msglen, VBM_EINVAL,
                                "%s: non-finite value %g cannot be written as JSON", where, a[p]);
        }
    }
    p = 0;
    *out = memjson_build_level(a, NULL, ndim, dims, 0, &p);
    if (*out == NULL)
        return memjson_fail(msg, msglen, VBM_ENOMEM, "%s: out of memory", path);
    return VBM_OK;
}

/* *out <- new nested JSON array of the ints a with shape dims (owned by the
 * caller). VBM_ENOMEM (VBM_EINVAL for a bad rank); *out is then NULL. */
vbm_status memjson_new_int_array(const int *a, int ndim, const long *dims, const char *path,
                                 json_t **out, char *msg, size_t msglen)
{
    size_t total, p;
    vbm_status st;

    *out = NULL;
    st = memjson_check_dims(ndim, dims, path, &total, msg, msglen);
    if (st != VBM_OK)
        return st;
    p = 0;
    *out = memjson_build_level(NULL, a, ndim, dims, 0, &p);
    if (*out == NULL)
        return memjson_fail(msg, msglen, VBM_ENOMEM, "%s: out of memory", path);
    return VBM_OK;
}

/* Names of the twelve configuration fields, NULL-terminated. */
static const char *const memjson_config_keys[] = {
    "kind", "code_size", "rows", "clusters", "groups", "sigma_z2", "shift",
    "u0", "sigma2_b0", "s_floor", "dkm_addr_var", "retain_max", NULL
};

/* Read the optional (or, when required, mandatory) int member key of obj. */
static vbm_status memjson_config_int(const json_t *obj, const char *path, const char *key,
                                     int required, long lo, long hi, int *out, char *msg,
                                     size_t msglen)
{
    char where[MEMJSON_PATH_LEN];
    json_t *v = json_object_get(obj, key);
    long x = 0;
    vbm_status st;

    memjson_path_key(where, sizeof where, path, key);
    if (v == NULL)
        return required ? memjson_fail(msg, msglen, VBM_EINVAL, "%s: missing", where) : VBM_OK;
    st = memjson_get_long(v, where, lo, hi, &x, msg, msglen);
    if (st == VBM_OK)
        *out = (int)x;
    return st;
}

/* Read the optional (or mandatory) double member key of obj. */
static vbm_status memjson_config_double(const json_t *obj, const char *path, const char *key,
                                        int required, double *out, char *msg, size_t msglen)
{
    char where[MEMJSON_PATH_LEN];
    json_t *v = json_object_get(obj, key);

    memjson_path_key(where, sizeof where, path, key);
    if (v == NULL)
        return required ? memjson_fail(msg, msglen, VBM_EINVAL, "%s: missing", where) : VBM_OK;
    return memjson_get_number(v, where, out, msg, msglen);
}

/* *cfg <- vbm_config_default(kind, code_size) with vbm_config_set_rows applied
 * to the given rows, overridden by the members of obj
 * (all twelve required when complete). VBM_EINVAL naming the field. */
vbm_status memjson_config_read(const json_t *obj, const char *path, int complete, int code_size_hint,
                               vbm_config *cfg, char *msg, size_t msglen)
{
    char where[MEMJSON_PATH_LEN];
    const json_t *v;
    vbm_kind kind;
    vbm_error err;
    long x = 0;
    int code_size = code_size_hint;
    vbm_status st;

    if (!json_is_object(obj))
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: expected an object, got %s", path,
                            memjson_type_name(obj));
    st = memjson_check_keys(obj, path, memjson_config_keys, msg, msglen);
    if (st != VBM_OK)
        return st;

    memjson_path_key(where, sizeof where, path, "kind");
    v = json_object_get(obj, "kind");
    if (v == NULL)
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: missing", where);
    if (!json_is_string(v))
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: expected a string, got %s", where,
                            memjson_type_name(v));
    err.msg[0] = '\0';
    if (vbm_kind_parse(json_string_value(v), &kind, &err) != VBM_OK)
        return memjson_fail(msg, msglen, VBM_EINVAL,
                            "%s: unknown kind \"%s\" (expected gaussian, categorical, mixture, "
                            "tree or dkm)",
                            where, json_string_value(v));

    memjson_path_key(where, sizeof where, path, "code_size");
    v = json_object_get(obj, "code_size");
    if (v != NULL) {
        st = memjson_get_long(v, where, 1, VBM_MAX_CODE_SIZE, &x, msg, msglen);
        if (st != VBM_OK)
            return st;
        code_size = (int)x;
    } else if (complete || code_size < 1) {
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: missing", where);
    }

    vbm_config_default(kind, code_size, cfg);

    st = memjson_config_int(obj, path, "rows", complete, 1, VBM_MAX_ROWS, &cfg->rows, msg, msglen);
    if (st == VBM_OK) /* the K-proportional defaults follow K unless given below */
        vbm_config_set_rows(cfg, cfg->rows);
    if (st == VBM_OK)
        st = memjson_config_int(obj, path, "clusters", complete, 1, VBM_MAX_CLUSTERS,
                                &cfg->clusters, msg, msglen);
    if (st == VBM_OK)
        st = memjson_config_int(obj, path, "groups", complete, 1, VBM_MAX_CODE_SIZE, &cfg->groups,
                                msg, msglen);
    if (st == VBM_OK)
        st = memjson_config_double(obj, path, "sigma_z2", complete, &cfg->sigma_z2, msg, msglen);
    if (st != VBM_OK)
        return st;

    memjson_path_key(where, sizeof where, path, "shift");
    v = json_object_get(obj, "shift");
    if (v != NULL) {
        if (!json_is_boolean(v))
            return memjson_fail(msg, msglen, VBM_EINVAL, "%s: expected true or false, got %s",
                                where, memjson_type_name(v));
        cfg->shift = json_is_true(v) ? 1 : 0;
    } else if (complete) {
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: missing", where);
    }

    st = memjson_config_double(obj, path, "u0", complete, &cfg->u0, msg, msglen);
    if (st == VBM_OK)
        st = memjson_config_double(obj, path, "sigma2_b0", complete, &cfg->sigma2_b0, msg, msglen);
    if (st == VBM_OK)
        st = memjson_config_double(obj, path, "s_floor", complete, &cfg->s_floor, msg, msglen);
    if (st == VBM_OK)
        st = memjson_config_double(obj, path, "dkm_addr_var", complete, &cfg->dkm_addr_var, msg,
                                   msglen);
    if (st != VBM_OK)
        return st;

    memjson_path_key(where, sizeof where, path, "retain_max");
    v = json_object_get(obj, "retain_max");
    if (v != NULL) {
        st = memjson_get_long(v, where, 0, LONG_MAX, &x, msg, msglen);
        if (st != VBM_OK)
            return st;
        cfg->retain_max = x;
    } else if (complete) {
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: missing", where);
    }
    return VBM_OK;
}

/* ---- encoding ---------------------------------------------------------- */

/* obj[key] = val (val stolen, may be NULL); 0, or -1 when val is NULL or on
 * allocation failure. */
static int memjson_set(json_t *obj, const char *key, json_t *val)
{
    return json_object_set_new(obj, key, val);
}

/* New JSON object holding cfg. NULL when out of memory. */
static json_t *memjson_config_json(const vbm_config *cfg)
{
    json_t *o = json_object();

    if (o == NULL)
        return NULL;
    if (memjson_set(o, "kind", json_string(vbm_kind_name(cfg->kind))) != 0
        || memjson_set(o, "code_size", json_integer(cfg->code_size)) != 0
        || memjson_set(o, "rows", json_integer(cfg->rows)) != 0
        || memjson_set(o, "clusters", json_integer(cfg->clusters)) != 0
        || memjson_set(o, "groups", json_integer(cfg->groups)) != 0
        || memjson_set(o, "sigma_z2", json_real(cfg->sigma_z2)) != 0
        || memjson_set(o, "shift", json_boolean(cfg->shift)) != 0
        || memjson_set(o, "u0", json_real(cfg->u0)) != 0
        || memjson_set(o, "sigma2_b0", json_real(cfg->sigma2_b0)) != 0
        || memjson_set(o, "s_floor", json_real(cfg->s_floor)) != 0
        || memjson_set(o, "dkm_addr_var", json_real(cfg->dkm_addr_var)) != 0
        || memjson_set(o, "retain_max", json_integer(cfg->retain_max)) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* obj[key] = nested array of a (shape ndim/dims), naming it path in errors. */
static vbm_status memjson_set_array(json_t *obj, const char *key, const double *a, int ndim,
                                    const long *dims, const char *path, char *msg, size_t msglen)
{
    json_t *arr;
    vbm_status st;

    st = memjson_new_array(a, ndim, dims, path, &arr, msg, msglen);
    if (st != VBM_OK)
        return st;
    if (json_object_set_new(obj, key, arr) != 0)
        return memjson_fail(msg, msglen, VBM_ENOMEM, "%s: out of memory", path);
    return VBM_OK;
}

/* Check that a configuration's scalar doubles are finite (JSON cannot hold others). */
static vbm_status memjson_config_finite(const vbm_config *c, char *msg, size_t msglen)
{
    if (!isfinite(c->sigma_z2))
        return memjson_fail(msg, msglen, VBM_EINVAL, "memory.config.sigma_z2: not finite");
    if (!isfinite(c->u0))
        return memjson_fail(msg, msglen, VBM_EINVAL, "memory.config.u0: not finite");
    if (!isfinite(c->sigma2_b0))
        return memjson_fail(msg, msglen, VBM_EINVAL, "memory.config.sigma2_b0: not finite");
    if (!isfinite(c->s_floor))
        return memjson_fail(msg, msglen, VBM_EINVAL, "memory.config.s_floor: not finite");
    if (!isfinite(c->dkm_addr_var))
        return memjson_fail(msg, msglen, VBM_EINVAL, "memory.config.dkm_addr_var: not finite");
    return VBM_OK;
}

/* Append the posterior blocks of mem to the array arr. */
static vbm_status memjson_encode_posterior(const vbm_memory *mem, json_t *arr, char *msg,
                                           size_t msglen)
{
    char where[MEMJSON_PATH_LEN], path[MEMJSON_PATH_LEN];
    long K = mem->cfg.rows, G = mem->cfg.groups, H = mem->cfg.clusters, cg = mem->cg;
    long g, h, gh, dims[2];
    json_t *blk;
    vbm_status st;

    for (g = 0; g < G; g++) {
        for (h = 0; h < H; h++) {
            gh = g * H + h;
            memjson_path_index(path, sizeof path, "memory.posterior.clusters", gh);
            if (!isfinite(mem->s2_b[gh]))
                return memjson_fail(msg, msglen, VBM_EINVAL, "%s.sigma2_b: not finite", path);
            blk = json_object();
            if (blk == NULL || json_array_append_new(arr, blk) != 0)
                return memjson_fail(msg, msglen, VBM_ENOMEM, "%s: out of memory", path);
            if (memjson_set(blk, "group", json_integer(g)) != 0
                || memjson_set(blk, "cluster", json_integer(h)) != 0)
                return memjson_fail(msg, msglen, VBM_ENOMEM, "%s: out of memory", path);
            dims[0] = K;
            dims[1] = cg;
            memjson_path_key(where, sizeof where, path, "R");
            st = memjson_set_array(blk, "R", mem->R + (size_t)gh * (size_t)(K * cg), 2, dims,
                                   where, msg, msglen);
            if (st != VBM_OK)
                return st;
            dims[1] = K;
            memjson_path_key(where, sizeof where, path, "U");
            st = memjson_set_array(blk, "U", mem->U + (size_t)gh * (size_t)(K * K), 2, dims,
                                   where, msg, msglen);
            if (st != VBM_OK)
                return st;
            dims[0] = cg;
            memjson_path_key(where, sizeof where, path, "mu_b");
            st = memjson_set_array(blk, "mu_b", mem->mu_b + (size_t)gh * (size_t)cg, 1, dims,
                                   where, msg, msglen);
            if (st != VBM_OK)
                return st;
            if (memjson_set(blk, "sigma2_b", json_real(mem->s2_b[gh])) != 0)
                return memjson_fail(msg, msglen, VBM_ENOMEM, "%s: out of memory", path);
        }
    }
    return VBM_OK;
}

/* Append the tree path counts of mem to the array arr. */
static vbm_status memjson_encode_paths(const vbm_memory *mem, json_t *arr, char *msg,
                                       size_t msglen)
{
    char path[MEMJSON_PATH_LEN];
    long G = mem->cfg.groups, p, g, dims[1];
    const int *s;
    json_t *item, *sarr;
    vbm_status st;

    for (p = 0; p < mem->n_paths; p++) {
        memjson_path_index(path, sizeof path, "memory.paths", p);
        s = mem->paths + (size_t)p * (size_t)G;
        for (g = 0; g < G; g++) {
            if (s[g] < 0 || s[g] >= mem->cfg.clusters)
                return memjson_fail(msg, msglen, VBM_EINVAL,
                                    "%s.s[%ld]: cluster %d out of range [0, %d)", path, g, s[g],
                                    mem->cfg.clusters);
        }
        if (!isfinite(mem->path_counts[p]))
            return memjson_fail(msg, msglen, VBM_EINVAL, "%s.count: not finite", path);
        item = json_object();
        if (item == NULL || json_array_append_new(arr, item) != 0)
            return memjson_fail(msg, msglen, VBM_ENOMEM, "%s: out of memory", path);
        dims[0] = G;
        st = memjson_new_int_array(s, 1, dims, path, &sarr, msg, msglen);
        if (st != VBM_OK)
            return st;
        if (memjson_set(item, "s", sarr) != 0
            || memjson_set(item, "count", json_real(mem->path_counts[p])) != 0)
            return memjson_fail(msg, msglen, VBM_ENOMEM, "%s: out of memory", path);
    }
    return VBM_OK;
}

/* Fill root with every member of the memory form. */
static vbm_status memjson_encode(const vbm_memory *mem, json_t *root, char *msg, size_t msglen)
{
    long K = mem->cfg.rows, C = mem->cfg.code_size, dims[2];
    json_t *obj, *arr;
    vbm_status st;

    if (memjson_set(root, "format", json_string(MEMJSON_FORMAT)) != 0
        || memjson_set(root, "version", json_integer(MEMJSON_VERSION)) != 0)
        return memjson_fail(msg, msglen, VBM_ENOMEM, "memory: out of memory");
    st = memjson_config_finite(&mem->cfg, msg, msglen);
    if (st != VBM_OK)
        return st;
    if (memjson_set(root, "config", memjson_config_json(&mem->cfg)) != 0)
        return memjson_fail(msg, msglen, VBM_ENOMEM, "memory.config: out of memory");

    obj = json_object();
    if (memjson_set(root, "prior", obj) != 0)
        return memjson_fail(msg, msglen, VBM_ENOMEM, "memory.prior: out of memory");
    dims[0] = K;
    dims[1] = C;
    st = memjson_set_array(obj, "R0", mem->R0, 2, dims, "memory.prior.R0", msg, msglen);
    if (st != VBM_OK)
        return st;
    dims[1] = K;
    st = memjson_set_array(obj, "U0", mem->U0, 2, dims, "memory.prior.U0", msg, msglen);
    if (st != VBM_OK)
        return st;
    dims[0] = C;
    st = memjson_set_array(obj, "mu_b0", mem->mu_b0, 1, dims, "memory.prior.mu_b0", msg, msglen);
    if (st != VBM_OK)
        return st;

    obj = json_object();
    if (memjson_set(root, "posterior", obj) != 0)
        return memjson_fail(msg, msglen, VBM_ENOMEM, "memory.posterior: out of memory");
    arr = json_array();
    if (memjson_set(obj, "clusters", arr) != 0)
        return memjson_fail(msg, msglen, VBM_ENOMEM, "memory.posterior: out of memory");
    st = memjson_encode_posterior(mem, arr, msg, msglen);
    if (st != VBM_OK)
        return st;

    arr = json_array();
    if (memjson_set(root, "paths", arr) != 0)
        return memjson_fail(msg, msglen, VBM_ENOMEM, "memory.paths: out of memory");
    st = memjson_encode_paths(mem, arr, msg, msglen);
    if (st != VBM_OK)
        return st;

    if (memjson_set(root, "frames", json_integer(mem->frames)) != 0
        || memjson_set(root, "last_elbo",
                       isfinite(mem->last_elbo) ? json_real(mem->last_elbo) : json_null())
               != 0)
        return memjson_fail(msg, msglen, VBM_ENOMEM, "memory: out of memory");

    if (mem->n_codes > 0) {
        obj = json_object();
        if (memjson_set(root, "codes", obj) != 0)
            return memjson_fail(msg, msglen, VBM_ENOMEM, "memory.codes: out of memory");
        dims[0] = mem->n_codes;
        dims[1] = C;
        st = memjson_set_array(obj, "mu", mem->codes_mu, 2, dims, "memory.codes.mu", msg, msglen);
        if (st != VBM_OK)
            return st;
        st = memjson_set_array(obj, "sigma2", mem->codes_s2, 2, dims, "memory.codes.sigma2", msg,
                               msglen);
        if (st != VBM_OK)
            return st;
    }
    return VBM_OK;
}

/* *out <- new JSON object of the whole memory (owned by the caller).
 * VBM_EINVAL for a NULL or inconsistent memory or a non-finite value,
 * VBM_ENOMEM; *out is then NULL. */
vbm_status memjson_from_memory(const vbm_memory *mem, json_t **out, char *msg, size_t msglen)
{
    const vbm_config *c;
    json_t *root;
    vbm_status st;

    if (out == NULL)
        return memjson_fail(msg, msglen, VBM_EINVAL, "memory: no output given");
    *out = NULL;
    if (mem == NULL)
        return memjson_fail(msg, msglen, VBM_EINVAL, "memory: no memory given");
    c = &mem->cfg;
    if (c->code_size < 1 || c->rows < 1 || c->clusters < 1 || c->groups < 1 || mem->cg < 1
        || (long)mem->cg * c->groups != c->code_size || mem->n_paths < 0 || mem->n_codes < 0)
        return memjson_fail(msg, msglen, VBM_EINVAL,
                            "memory: inconsistent sizes (C=%d K=%d H=%d G=%d cg=%d)",
                            c->code_size, c->rows, c->clusters, c->groups, mem->cg);
    root = json_object();
    if (root == NULL)
        return memjson_fail(msg, msglen, VBM_ENOMEM, "memory: out of memory");
    st = memjson_encode(mem, root, msg, msglen);
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
static vbm_status memjson_check_spd(const double *U, long K, double *work, const char *path,
                                    char *msg, size_t msglen)
{
    long i, j, k;
    double a, b, tol, d;

    for (i = 0; i < K; i++) {
        if (!(U[i * K + i] > 0))
            return memjson_fail(msg, msglen, VBM_EINVAL,
                                "%s[%ld][%ld]: a diagonal entry must be > 0, got %.17g", path, i,
                                i, U[i * K + i]);
    }
    for (i = 0; i < K; i++) {
        for (j = 0; j < i; j++) {
            a = U[i * K + j];
            b = U[j * K + i];
            tol = MEMJSON_SYM_TOL * sqrt(U[i * K + i] * U[j * K + j]);
            if (fabs(a - b) > tol)
                return memjson_fail(msg, msglen, VBM_EINVAL,
                                    "%s[%ld][%ld]: not symmetric (%.17g, but [%ld][%ld] is %.17g)",
                                    path, i, j, a, j, i, b);
        }
    }
    for (j = 0; j < K; j++) {
        d = U[j * K + j];
        for (k = 0; k < j; k++)
            d -= work[j * K + k] * work[j * K + k];
        if (!(d > 0) || !isfinite(d))
            return memjson_fail(msg, msglen, VBM_EINVAL,
                                "%s: not positive definite (Cholesky pivot %ld is %.3g)", path, j,
                                d);
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
static vbm_status memjson_object_at(const json_t *v, const char *path,
                                    const char *const *allowed, char *msg, size_t msglen)
{
    if (v == NULL)
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: missing", path);
    if (!json_is_object(v))
        return memjson_fail(msg, msglen, VBM_EINVAL, "%s: expected an object, got %s", path,
                            memjson_type_name(v));
    return memjson_check_keys(v, path, allowed, msg, msglen);
}

/* Read the prior's R0 and U0 into fresh buffers (*R0, *U0 owned by the caller,
 * set even on failure). */
static vbm_status memjson_decode_prior(const json_t *prior, const vbm_config *cfg, double **R0,
                                       double **U0, char *msg, size_t msglen)
{
    static const char *const keys[] = {"R0", "U0", "mu_b0", NULL};
    long K = cfg->rows, C = cfg->code_size, dims[2];
    json_t *v;
    vbm_status st;

    *R0 = NULL;
    *U0 = NULL;
    st = memjson_object_at(prior, "memory.prior", keys, msg, msglen);
    if (st != VBM_OK)
        return st;
    *R0 = vbm_calloc((size_t)(K * C), sizeof(double));
    *U0 = vbm_calloc((size_t)(K * K), sizeof(double));
    if (*R0 == NULL || *U0 == NULL)
        return memjson_fail(msg, msglen, VBM_ENOMEM, "memory.prior: out of memory");
    st = memjson_require(prior, "memory.prior", "R0", &v, msg, msglen);
    if (st != VBM_OK)
        return st;
    dims[0] = K;
    dims[1] = C;
    st = memjson_read_array(v, "memory.prior.R0", 2, dims, 0, *R0, msg, msglen);
    if (st != VBM_OK)
        return st;
    st = memjson_require(prior, "memory.prior", "U0", &v, msg, msglen);
    if (st != VBM_OK)
        return st;
    dims[1] = K;
    st = memjson_read_array(v, "memory.prior.U0", 2, dims, 0, *U0, msg, msglen);
    if (st != VBM_OK)
        return st;
    /* mu_b0 must exist too; it is read after the memory is created. */
    return memjson_require(prior, "memory.prior", "mu_b0", &v, msg, msglen);
}

/* Without a shift, a posterior block's mu_b (cg values) and sigma2_b must be 0. */
static vbm_status memjson_check_no_shift(const double *mu_b, long cg, double s2_b,
                                         const char *path, char *msg, size_t msglen)
{
    long j;

    for (j = 0; j < cg; j++) {
        if (mu_b[j] != 0)
            return memjson_fail(msg, msglen, VBM_EINVAL,
                                "%s.mu_b[%ld]: must be 0 when config.shift is false, got %.17g",
                                path, j, mu_b[j]);
    }
    if (s2_b != 0)
        return memjson_fail(msg, msglen, VBM_EINVAL,
                            "%s.sigma2_b: must be 0 when config.shift is false, got %.17g", path,
                            s2_b);
    return VBM_OK;
}

/* Read the posterior blocks into mem (K*K doubles of scratch in work). */
static vbm_status memjson_decode_posterior(const json_t *post, vbm_memory *mem, double *work,
                                           char *msg, size_t msglen)
{
    static const char *const keys[] = {"clusters", NULL};
    static const char *const blk_keys[] = {"group", "cluster", "R", "U", "mu_b", "sigma2_b", NULL};
    char path[MEMJSON_PATH_LEN], where[MEMJSON_PATH_LEN];
    long K = mem->cfg.rows, G = mem->cfg.groups, H = mem->cfg.clusters, cg = mem->cg;
    long g, h, gh, x = 0, dims[2];
    json_t *arr, *blk;
    double *U;
    vbm_status st;

    st = memjson_object_at(post, "memory.posterior", keys, msg, msglen);
    if (st != VBM_OK)
        return st;
    st = memjson_require(post, "memory.posterior", "clusters", &arr, msg, msglen);
    if (st != VBM_OK)
        return st;
    if (!json_is_array(arr))
        return memjson_fail(msg, msglen, VBM_EINVAL,
                            "memory.posterior.clusters: expected an array, got %s",
                            memjson_type_name(arr));
    if (json_array_size(arr) != (size_t)(G * H))
        return memjson_fail(msg, msglen, VBM_EINVAL,
                            "memory.posterior.clusters: expected %ld blocks (groups %ld x "
                            "clusters %ld), got %zu",
                            G * H, G, H, json_array_size(arr));
    for (g = 0; g < G; g++) {
        for (h = 0; h < H; h++) {
            gh = g * H + h;
            memjson_path_index(path, sizeof path, "memory.posterior.clusters", gh);
            blk = json_array_get(arr, (size_t)gh);
            st = memjson_object_at(blk, path, blk_keys, msg, msglen);
            if (st != VBM_OK)
                return st;

            memjson_path_key(where, sizeof where, path, "group");
            st = memjson_get_long(json_object_get(blk, "group"), where, g, g, &x, msg, msglen);
            if (st != VBM_OK)
                return st;
            memjson_path_key(where, sizeof where, path, "cluster");
            st = memjson_get_long(json_object_get(blk, "cluster"), where, h, h, &x, msg, msglen);
            if (st != VBM_OK)
                return st;

            dims[0] = K;
            dims[1] = cg;
            memjson_path_key(where, sizeof where, path, "R");
            st = memjson_read_array(json_object_get(blk, "R"), where, 2, dims, 0,
                                    mem->R + (size_t)gh * (size_t)(K * cg), msg, msglen);
            if (st != VBM_OK)
                return st;

            dims[1] = K;
            memjson_path_key(where, sizeof where, path, "U");
            U = mem->U + (size_t)gh * (size_t)(K * K);
            st = memjson_read_array(json_object_get(blk, "U"), where, 2, dims, 0, U, msg, msglen);
            if (st == VBM_OK)
                st = memjson_check_spd(U, K, work, where, msg, msglen);
            if (st != VBM_OK)
                return st;

            dims[0] = cg;
            memjson_path_key(where, sizeof where, path, "mu_b");
            st = memjson_read_array(json_object_get(blk, "mu_b"), where, 1, dims, 0,
                                    mem->mu_b + (size_t)gh * (size_t)cg, msg, msglen);
            if (st != VBM_OK)
                return st;

            memjson_path_key(where, sizeof where, path, "sigma2_b");
            st = memjson_get_number(json_object_get(blk, "sigma2_b"), where, &mem->s2_b[gh], msg,
                                    msglen);
            if (st != VBM_OK)
                return st;
            if (mem->cfg.shift && !(mem->s2_b[gh] > 0))
                return memjson_fail(msg, msglen, VBM_EINVAL,
                                    "%s: the shift variance must be > 0, got %.17g", where,
                                    mem->s2_b[gh]);
            if (!mem->cfg.shift) {
                st = memjson_check_no_shift(mem->mu_b + (size_t)gh * (size_t)cg, cg,
                                            mem->s2_b[gh], path, msg, msglen);
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
} memjson_paths;

/* Read the optional "paths" member v (NULL: none) into *out. */
static vbm_status memjson_decode_paths(const json_t *v, const vbm_config *cfg, memjson_paths *out,
                                       char *msg, size_t msglen)
{
    static const char *const keys[] = {"s", "count", NULL};
    char path[MEMJSON_PATH_LEN], where[MEMJSON_PATH_LEN];
    long G = cfg->groups, n, p, g, x = 0;
    json_t *item, *s;
    vbm_status st;

    if (v == NULL)
        return VBM_OK;
    if (!json_is_array(v))
        return memjson_fail(msg, msglen, VBM_EINVAL, "memory.paths: expected an array, got %s",
                            memjson_type_name(v));
    if (json_array_size(v) > (size_t)VBM_MAX_ELEMENTS / (size_t)G)
        return memjson_fail(msg, msglen, VBM_EINVAL, "memory.paths: too many paths (%zu)",
                            json_array_size(v));
    n = (long)json_array_size(v);
    if (n == 0)
        return VBM_OK;
    if (cfg->kind != VBM_TREE)
        return memjson_fail(msg, msglen, VBM_EINVAL,
                            "memory.paths: only the tree model keeps path counts (kind is %s)",
                            vbm_kind_name(cfg->kind));
    out->s = vbm_calloc((size_t)(n * G), sizeof(int));
    out->counts = vbm_calloc((size_t)n, sizeof(double));
    if (out->s == NULL || out->counts == NULL)
        return memjson_fail(msg, msglen, VBM_ENOMEM, "memory.paths: out of memory");
    out->n = n;
    for (p = 0; p < n; p++) {
        memjson_path_index(path, sizeof path, "memory.paths", p);
        item = json_array_get(v, (size_t)p);
        st = memjson_object_at(item, path, keys, msg, msglen);
        if (st != VBM_OK)
            return st;
        memjson_path_key(where, sizeof where, path, "s");
        s = json_object_get(item, "s");
        if (s == NULL)
            return memjson_fail(msg, msglen, VBM_EINVAL, "%s: missing", where);
        if (!json_is_array(s))
            return memjson_fail(msg, msglen, VBM_EINVAL, "%s: expected an array, got %s", where,
                                memjson_type_name(s));
        if (json_array_size(s) != (size_t)G)
            return memjson_fail(msg, msglen, VBM_EINVAL,
                                "%s: expected an array of %ld clusters (one per group), got %zu",
                                where, G, json_array_size(s));
        for (g = 0; g < G; g++) {
            if (snprintf(where, sizeof where, "%s.s[%ld]", path, g) < 0)
                where[0] = '\0';
            st = memjson_get_long(json_array_get(s, (size_t)g), where, 0, cfg->clusters - 1, &x,
                                  msg, msglen);
            if (st != VBM_OK)
                return st;
            out->s[p * G + g] = (int)x;
        }
        memjson_path_key(where, sizeof where, path, "count");
        st = memjson_get_number(json_object_get(item, "count"), where, &out->counts[p], msg,
                                msglen);
        if (st != VBM_OK)
            return st;
        if (!(out->counts[p] > 0))
            return memjson_fail(msg, msglen, VBM_EINVAL, "%s: a count must be > 0, got %.17g",
                                where, out->counts[p]);
    }
    return VBM_OK;
}

/* Decoded retained codes, owned until moved into a memory. */
typedef struct {
    long n;
    double *mu; /* n x C */
    double *s2; /* n x C */
} memjson_codes;

/* Read the optional "codes" member v (NULL: none) into *out. */
static vbm_status memjson_decode_codes(const json_t *v, const vbm_config *cfg, memjson_codes *out,
                                       char *msg, size_t msglen)
{
    static const char *const keys[] = {"mu", "sigma2", NULL};
    long C = cfg->code_size, n, dims[2];
    json_t *mu, *s2;
    vbm_status st;

    if (v == NULL)
        return VBM_OK;
    st = memjson_object_at(v, "memory.codes", keys, msg, msglen);
    if (st == VBM_OK)
        st = memjson_require(v, "memory.codes", "mu", &mu, msg, msglen);
    if (st == VBM_OK)
        st = memjson_require(v, "memory.codes", "sigma2", &s2, msg, msglen);
    if (st != VBM_OK)
        return st;
    if (!json_is_array(mu))
        return memjson_fail(msg, msglen, VBM_EINVAL, "memory.codes.mu: expected an array, got %s",
                            memjson_type_name(mu));
    if (json_array_size(mu) > (size_t)cfg->retain_max)
        return memjson_fail(msg, msglen, VBM_EINVAL,
                            "memory.codes.mu: %zu retained codes exceed config.retain_max (%ld)",
                            json_array_size(mu), cfg->retain_max);
    if (json_array_size(mu) > (size_t)(VBM_MAX_ELEMENTS / C))
        return memjson_fail(msg, msglen, VBM_EINVAL, "memory.codes.mu: too many codes (%zu)",
                            json_array_size(mu));
    n = (long)json_array_size(mu);
    if (n == 0) {
        dims[0] = 0;
        return memjson_read_array(s2, "memory.codes.sigma2", 1, dims, 0, NULL, msg, msglen);
    }
    out->mu = vbm_calloc((size_t)(n * C), sizeof(double));
    out->s2 = vbm_calloc((size_t)(n * C), sizeof(double));
    if (out->mu == NULL || out->s2 == NULL)
        return memjson_fail(msg, msglen, VBM_ENOMEM, "memory.codes: out of memory");
    out->n = n;
    dims[0] = n;
    dims[1] = C;
    st = memjson_read_array(mu, "memory.codes.mu", 2, dims, 0, out->mu, msg, msglen);
    if (st != VBM_OK)
        return st;
    return memjson_read_array(s2, "memory.codes.sigma2", 2, dims, 1, out->s2, msg, msglen);
}

/* Check the header members (format, version) of a memory object. */
static vbm_status memjson_decode_header(const json_t *json, char *msg, size_t msglen)
{
    static const char *const keys[] = {"format", "version", "config", "prior", "posterior",
                                       "paths", "frames", "last_elbo", "codes", NULL};
    json_t *v;
    long version = 0;
    vbm_status st;

    st = memjson_object_at(json, "memory", keys, msg, msglen);
    if (st == VBM_OK)
        st = memjson_require(json, "memory", "format", &v, msg, msglen);
    if (st != VBM_OK)
        return st;
    if (!json_is_string(v) || strcmp(json_string_value(v), MEMJSON_FORMAT) != 0)
        return memjson_fail(msg, msglen, VBM_EINVAL, "memory.format: expected \"%s\"",
                            MEMJSON_FORMAT);
    st = memjson_require(json, "memory", "version", &v, msg, msglen);
    if (st != VBM_OK)
        return st;
    if (!json_is_integer(v) || json_integer_value(v) != MEMJSON_VERSION) {
        st = memjson_get_long(v, "memory.version", LONG_MIN, LONG_MAX, &version, msg, msglen);
        if (st != VBM_OK)
            return st;
        return memjson_fail(msg, msglen, VBM_EINVAL,
                            "memory.version: unsupported version %ld (expected %d)", version,
                            MEMJSON_VERSION);
    }
    return VBM_OK;
}

/* Read the scalar bookkeeping members (frames, last_elbo) into mem. */
static vbm_status memjson_decode_bookkeeping(const json_t *json, vbm_memory *mem, char *msg,
                                             size_t msglen)
{
    json_t *v;
    vbm_status st;

    mem->frames = 0;
    v = json_object_get(json, "frames");
    if (v != NULL) {
        st = memjson_get_long(v, "memory.frames", 0, LONG_MAX, &mem->frames, msg, msglen);
        if (st != VBM_OK)
            return st;
    }
    mem->last_elbo = NAN;
    v = json_object_get(json, "last_elbo");
    if (v != NULL && !json_is_null(v))
        return memjson_get_number(v, "memory.last_elbo", &mem->last_elbo, msg, msglen);
    return VBM_OK;
}

/* Decode everything except the header into a new memory *out. Buffers in paths
 * and codes are owned by the caller. */
static vbm_status memjson_decode(const json_t *json, vbm_memory **out, memjson_paths *paths,
                                 memjson_codes *codes, char *msg, size_t msglen)
{
    vbm_config cfg;
    vbm_error err;
    vbm_memory *mem = NULL;
    double *R0 = NULL, *U0 = NULL, *work = NULL;
    json_t *v;
    long dims[1];
    vbm_status st;

    memset(&cfg, 0, sizeof cfg);
    st = memjson_require(json, "memory", "config", &v, msg, msglen);
    if (st == VBM_OK)
        st = memjson_config_read(v, "memory.config", 1, 0, &cfg, msg, msglen);
    if (st != VBM_OK)
        return st;
    err.msg[0] = '\0';
    st = vbm_config_check(&cfg, &err);
    if (st != VBM_OK) {
        memjson_qualify_message(msg, msglen, "memory.config", err.msg);
        return st == VBM_ENOMEM ? VBM_ENOMEM : VBM_EINVAL;
    }

    st = memjson_require(json, "memory", "prior", &v, msg, msglen);
    if (st == VBM_OK)
        st = memjson_decode_prior(v, &cfg, &R0, &U0, msg, msglen);
    if (st == VBM_OK) {
        st = vbm_memory_create(&cfg, R0, U0, &mem, &err);
        if (st != VBM_OK)
            memjson_qualify_message(msg, msglen, "memory", err.msg);
    }
    free(R0);
    free(U0);
    if (st != VBM_OK)
        return st == VBM_ENOMEM ? VBM_ENOMEM : VBM_EINVAL;

    dims[0] = cfg.code_size;
    st = memjson_read_array(json_object_get(json_object_get(json, "prior"), "mu_b0"),
                            "memory.prior.mu_b0", 1, dims, 0, mem->mu_b0, msg, msglen);
    if (st == VBM_OK) {
        work = vbm_calloc((size_t)cfg.rows * (size_t)cfg.rows, sizeof(double));
        if (work == NULL)
            st = memjson_fail(msg, msglen, VBM_ENOMEM, "memory.posterior: out of memory");
    }
    if (st == VBM_OK)
        st = memjson_require(json, "memory", "posterior", &v, msg, msglen);
    if (st == VBM_OK)
        st = memjson_decode_posterior(v, mem, work, msg, msglen);
    free(work);
    if (st == VBM_OK)
        st = memjson_decode_paths(json_object_get(json, "paths"), &cfg, paths, msg, msglen);
    if (st == VBM_OK)
        st = memjson_decode_bookkeeping(json, mem, msg, msglen);
    if (st == VBM_OK)
        st = memjson_decode_codes(json_object_get(json, "codes"), &cfg, codes, msg, msglen);
    if (st != VBM_OK) {
        vbm_memory_free(mem);
        return st;
    }

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
    *out = mem;
    return VBM_OK;
}

/* *out <- new memory decoded from json (owned by the caller). VBM_EFORMAT for
 * any malformed part (the message names field and index), VBM_ENOMEM; *out is
 * then NULL and nothing leaks. */
vbm_status memjson_to_memory(const json_t *json, vbm_memory **out, char *msg, size_t msglen)
{
    memjson_paths paths = {0, NULL, NULL};
    memjson_codes codes = {0, NULL, NULL};
    vbm_status st;

    if (out == NULL)
        return memjson_fail(msg, msglen, VBM_EINVAL, "memory: no output given");
    *out = NULL;
    st = memjson_decode_header(json, msg, msglen);
    if (st == VBM_OK)
        st = memjson_decode(json, out, &paths, &codes, msg, msglen);
    free(paths.s);
    free(paths.counts);
    free(codes.mu);
    free(codes.s2);
    if (st == VBM_ENOMEM)
        return VBM_ENOMEM;
    return st == VBM_OK ? VBM_OK : VBM_EFORMAT;
}
