/* values.c -- owns the checked JSON readers and the number, array and ELBO writers of the wire. */
#define _POSIX_C_SOURCE 200809L

#include "wire/values.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void wire_path_key(char *buf, size_t len, const char *base, const char *key)
{
    if (snprintf(buf, len, "%s%s%s", base, base[0] != '\0' ? "." : "", key) < 0)
        buf[0] = '\0';
}

void wire_path_index(char *buf, size_t len, const char *base, long i)
{
    if (snprintf(buf, len, "%s[%ld]", base, i) < 0)
        buf[0] = '\0';
}

/* buf <- base + "[idx[0]]...[idx[depth-1]]" (truncated, NUL-terminated). */
static void wire_path_indices(char *buf, size_t len, const char *base, const long *idx, int depth)
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

const char *wire_type_name(const json_t *v)
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

vbm_status wire_get_number(const json_t *v, const char *path, double *out, vbm_error *err)
{
    double d;

    if (v == NULL)
        return vbm_fail(err, VBM_EINVAL, path, "missing");
    if (!json_is_number(v))
        return vbm_fail(err, VBM_EINVAL, path, "expected a number, got %s", wire_type_name(v));
    d = json_number_value(v);
    if (!isfinite(d))
        return vbm_fail(err, VBM_EINVAL, path, "not a finite number");
    *out = d;
    return VBM_OK;
}

vbm_status wire_get_long(const json_t *v, const char *path, long lo, long hi, long *out,
                         vbm_error *err)
{
    json_int_t x;

    if (v == NULL)
        return vbm_fail(err, VBM_EINVAL, path, "missing");
    if (!json_is_integer(v))
        return vbm_fail(err, VBM_EINVAL, path, "expected an integer, got %s", wire_type_name(v));
    x = json_integer_value(v);
    if (x < (json_int_t)lo && hi == LONG_MAX)
        return vbm_fail(err, VBM_EINVAL, path, "must be >= %ld, got %lld", lo, (long long)x);
    if (x < (json_int_t)lo || x > (json_int_t)hi)
        return vbm_fail(err, VBM_EINVAL, path, "%lld is out of range [%ld, %ld]", (long long)x, lo,
                        hi);
    *out = (long)x;
    return VBM_OK;
}

vbm_status wire_get_bool(const json_t *v, const char *path, int *out, vbm_error *err)
{
    if (v == NULL)
        return vbm_fail(err, VBM_EINVAL, path, "missing");
    if (!json_is_boolean(v))
        return vbm_fail(err, VBM_EINVAL, path, "expected true or false, got %s", wire_type_name(v));
    *out = json_is_true(v) ? 1 : 0;
    return VBM_OK;
}

vbm_status wire_get_seed(const json_t *v, const char *path, uint64_t *out, vbm_error *err)
{
    unsigned long long x;
    const char *s;
    char *end;
    size_t i;

    if (v == NULL)
        return vbm_fail(err, VBM_EINVAL, path, "missing");
    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0)
            return vbm_fail(err, VBM_EINVAL, path, "must be >= 0, got %lld",
                            (long long)json_integer_value(v));
        *out = (uint64_t)json_integer_value(v);
        return VBM_OK;
    }
    if (!json_is_string(v))
        return vbm_fail(err, VBM_EINVAL, path,
                        "expected an integer or a string of decimal digits, got %s",
                        wire_type_name(v));
    s = json_string_value(v);
    if (s[0] == '\0')
        return vbm_fail(err, VBM_EINVAL, path, "empty string");
    for (i = 0; s[i] != '\0'; i++) {
        if (s[i] < '0' || s[i] > '9')
            return vbm_fail(err, VBM_EINVAL, path, "not a string of decimal digits");
    }
    if (i > 20)
        return vbm_fail(err, VBM_EINVAL, path, "%zu digits, at most 20 are allowed", i);
    errno = 0;
    x = strtoull(s, &end, 10);
    if (errno == ERANGE || *end != '\0')
        return vbm_fail(err, VBM_EINVAL, path, "\"%s\" does not fit in 64 bits", s);
    *out = (uint64_t)x;
    return VBM_OK;
}

vbm_status wire_check_keys(const json_t *obj, const char *path, const char *const *allowed,
                           vbm_error *err)
{
    char where[WIRE_PATH_LEN];
    const char *key;
    json_t *val;
    int i, ok;

    json_object_foreach((json_t *)obj, key, val)
    {
        ok = 0;
        for (i = 0; allowed[i] != NULL; i++) {
            if (strcmp(allowed[i], key) == 0) {
                ok = 1;
                break;
            }
        }
        if (!ok) {
            wire_path_key(where, sizeof where, path, key);
            return vbm_fail(err, VBM_EINVAL, where, "unknown member");
        }
    }
    return VBM_OK;
}

vbm_status wire_opt_long(const json_t *obj, const char *key, long lo, long hi, long *out,
                         vbm_error *err)
{
    const json_t *v = json_object_get(obj, key);

    return v == NULL ? VBM_OK : wire_get_long(v, key, lo, hi, out, err);
}

vbm_status wire_opt_double(const json_t *obj, const char *key, double lo, double hi, double *out,
                           vbm_error *err)
{
    const json_t *v = json_object_get(obj, key);
    double x = 0.0;
    vbm_status st;

    if (v == NULL)
        return VBM_OK;
    st = wire_get_number(v, key, &x, err);
    if (st != VBM_OK)
        return st;
    if (!(x >= lo && x <= hi))
        return vbm_fail(err, VBM_EINVAL, key, "%g is outside [%g, %g]", x, lo, hi);
    *out = x;
    return VBM_OK;
}

vbm_status wire_opt_bool(const json_t *obj, const char *key, int *out, vbm_error *err)
{
    const json_t *v = json_object_get(obj, key);

    return v == NULL ? VBM_OK : wire_get_bool(v, key, out, err);
}

vbm_status wire_opt_seed(const json_t *obj, const char *key, uint64_t *out, vbm_error *err)
{
    const json_t *v = json_object_get(obj, key);

    return v == NULL ? VBM_OK : wire_get_seed(v, key, out, err);
}

const char *wire_init_name(vbm_init init)
{
    switch (init) {
    case VBM_INIT_AUTO: return "auto";
    case VBM_INIT_PRIOR: return "prior";
    case VBM_INIT_KMEANSPP: return "kmeans++";
    case VBM_INIT_CURRENT: return "current";
    case VBM_INIT_RANDOM: return "random";
    }
    return "auto";
}

vbm_status wire_opt_init(const json_t *obj, const char *key, int *out, vbm_error *err)
{
    static const vbm_init all[] = {VBM_INIT_AUTO, VBM_INIT_PRIOR, VBM_INIT_KMEANSPP,
                                   VBM_INIT_CURRENT, VBM_INIT_RANDOM};
    const json_t *v = json_object_get(obj, key);
    size_t i;

    if (v == NULL)
        return VBM_OK;
    if (json_is_string(v)) {
        for (i = 0; i < sizeof all / sizeof all[0]; i++) {
            if (strcmp(json_string_value(v), wire_init_name(all[i])) == 0) {
                *out = (int)all[i];
                return VBM_OK;
            }
        }
    }
    return vbm_fail(err, VBM_EINVAL, key,
                    "expected \"auto\", \"prior\", \"kmeans++\", \"current\" or \"random\"");
}

/* State of one wire_read_array walk. */
typedef struct {
    const char *path;
    int ndim;
    const long *dims;
    int nonneg;
    double *out;
    size_t pos;
    long idx[WIRE_MAX_DIMS];
    vbm_error *err;
} wire_reader;

/* Record the failure of the element at the walk's current index, depth deep. */
static vbm_status wire_reader_fail(wire_reader *r, int depth, const char *what, double d)
{
    char where[WIRE_PATH_LEN];

    wire_path_indices(where, sizeof where, r->path, r->idx, depth);
    if (d == d)
        return vbm_fail(r->err, VBM_EINVAL, where, "%s, got %.17g", what, d);
    return vbm_fail(r->err, VBM_EINVAL, where, "%s", what);
}

/* Read the sub-array v found at depth of the walk r. */
static vbm_status wire_read_level(wire_reader *r, const json_t *v, int depth)
{
    char where[WIRE_PATH_LEN];
    size_t i, n;
    double d;
    vbm_status st;

    if (depth == r->ndim) {
        if (!json_is_number(v)) {
            wire_path_indices(where, sizeof where, r->path, r->idx, depth);
            return vbm_fail(r->err, VBM_EINVAL, where, "expected a number, got %s",
                            wire_type_name(v));
        }
        d = json_number_value(v);
        if (!isfinite(d))
            return wire_reader_fail(r, depth, "not a finite number", NAN);
        if (r->nonneg && d < 0)
            return wire_reader_fail(r, depth, "a variance must be >= 0", d);
        r->out[r->pos++] = d;
        return VBM_OK;
    }
    if (!json_is_array(v)) {
        wire_path_indices(where, sizeof where, r->path, r->idx, depth);
        return vbm_fail(r->err, VBM_EINVAL, where, "expected an array, got %s", wire_type_name(v));
    }
    n = json_array_size(v);
    if (n != (size_t)r->dims[depth]) {
        wire_path_indices(where, sizeof where, r->path, r->idx, depth);
        return vbm_fail(r->err, VBM_EINVAL, where, "expected an array of %ld elements, got %zu",
                        r->dims[depth], n);
    }
    for (i = 0; i < n; i++) {
        r->idx[depth] = (long)i;
        st = wire_read_level(r, json_array_get(v, i), depth + 1);
        if (st != VBM_OK)
            return st;
    }
    return VBM_OK;
}

vbm_status wire_read_array(const json_t *v, const char *path, int ndim, const long *dims,
                           int nonneg, double *out, vbm_error *err)
{
    wire_reader r;
    int d;

    if (ndim < 1 || ndim > WIRE_MAX_DIMS)
        return vbm_fail(err, VBM_EINVAL, path, "unsupported array rank %d", ndim);
    for (d = 0; d < ndim; d++) {
        if (dims[d] < 0)
            return vbm_fail(err, VBM_EINVAL, path, "negative dimension %ld", dims[d]);
    }
    if (v == NULL)
        return vbm_fail(err, VBM_EINVAL, path, "missing");
    memset(&r, 0, sizeof r);
    r.path = path;
    r.ndim = ndim;
    r.dims = dims;
    r.nonneg = nonneg;
    r.out = out;
    r.err = err;
    return wire_read_level(&r, v, 0);
}

vbm_status wire_matrix_shape(const json_t *v, const char *path, long *rows, long *cols,
                             vbm_error *err)
{
    char where[WIRE_PATH_LEN];
    const json_t *first;

    if (v == NULL)
        return vbm_fail(err, VBM_EINVAL, path, "missing");
    if (!json_is_array(v))
        return vbm_fail(err, VBM_EINVAL, path, "expected an array of rows, got %s",
                        wire_type_name(v));
    if (json_array_size(v) == 0)
        return vbm_fail(err, VBM_EINVAL, path, "must have at least one row");
    first = json_array_get(v, 0);
    wire_path_index(where, sizeof where, path, 0);
    if (!json_is_array(first))
        return vbm_fail(err, VBM_EINVAL, where, "expected an array, got %s", wire_type_name(first));
    if (json_array_size(first) == 0)
        return vbm_fail(err, VBM_EINVAL, where, "must have at least one column");
    if (json_array_size(v) > (size_t)LONG_MAX || json_array_size(first) > (size_t)LONG_MAX)
        return vbm_fail(err, VBM_EINVAL, path, "too large");
    *rows = (long)json_array_size(v);
    *cols = (long)json_array_size(first);
    return VBM_OK;
}

json_t *wire_number(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

/* Build the sub-array at depth from a (doubles when ints is NULL), advancing *pos;
 * NULL when out of memory. */
static json_t *wire_build_level(const double *a, const int *ints, int ndim, const long *dims,
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
                item = wire_number(a[*pos]);
            (*pos)++;
        } else {
            item = wire_build_level(a, ints, ndim, dims, depth + 1, pos);
        }
        if (json_array_append_new(arr, item) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

/* Check the rank and dims of an array to build; product of dims into *total. */
static vbm_status wire_check_dims(int ndim, const long *dims, const char *path, size_t *total,
                                  vbm_error *err)
{
    size_t n = 1;
    int d;

    if (ndim < 1 || ndim > WIRE_MAX_DIMS)
        return vbm_fail(err, VBM_EINVAL, path, "unsupported array rank %d", ndim);
    for (d = 0; d < ndim; d++) {
        if (dims[d] < 0)
            return vbm_fail(err, VBM_EINVAL, path, "negative dimension %ld", dims[d]);
        if (dims[d] > 0 && n > ((size_t)-1) / (size_t)dims[d])
            return vbm_fail(err, VBM_ENOMEM, path, "array too large");
        n *= (size_t)dims[d];
    }
    *total = n;
    return VBM_OK;
}

vbm_status wire_new_array(const double *a, int ndim, const long *dims, int nulls, const char *path,
                          json_t **out, vbm_error *err)
{
    char where[WIRE_PATH_LEN];
    long idx[WIRE_MAX_DIMS];
    size_t total = 0, p, rest;
    vbm_status st;
    int d;

    *out = NULL;
    st = wire_check_dims(ndim, dims, path, &total, err);
    if (st != VBM_OK)
        return st;
    for (p = 0; !nulls && p < total; p++) {
        if (!isfinite(a[p])) {
            rest = p;
            for (d = ndim - 1; d >= 0; d--) {
                idx[d] = (long)(rest % (size_t)dims[d]);
                rest /= (size_t)dims[d];
            }
            wire_path_indices(where, sizeof where, path, idx, ndim);
            return vbm_fail(err, VBM_EINVAL, where, "non-finite value %g cannot be written as JSON",
                            a[p]);
        }
    }
    p = 0;
    *out = wire_build_level(a, NULL, ndim, dims, 0, &p);
    if (*out == NULL)
        return vbm_fail(err, VBM_ENOMEM, path, "out of memory");
    return VBM_OK;
}

vbm_status wire_new_int_array(const int *a, int ndim, const long *dims, const char *path,
                              json_t **out, vbm_error *err)
{
    size_t total, p;
    vbm_status st;

    *out = NULL;
    st = wire_check_dims(ndim, dims, path, &total, err);
    if (st != VBM_OK)
        return st;
    p = 0;
    *out = wire_build_level(NULL, a, ndim, dims, 0, &p);
    if (*out == NULL)
        return vbm_fail(err, VBM_ENOMEM, path, "out of memory");
    return VBM_OK;
}

json_t *wire_elbo(const vbm_elbo *e)
{
    return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:I}", "per_frame",
                     wire_number(e->per_frame), "total", wire_number(e->total), "loglik_codes",
                     wire_number(e->loglik_codes), "kl_w", wire_number(e->kl_w), "kl_s",
                     wire_number(e->kl_s), "kl_M", wire_number(e->kl_M), "kl_b",
                     wire_number(e->kl_b), "T", (json_int_t)e->T);
}
