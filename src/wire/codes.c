/* codes.c -- owns the JSON forms of codes (nested or base64 float32 tensor), result matrices and
 * addresses. */
#include "wire/codes.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/base64.h"

/* Check a T x C shape (already known to be >= 1 each) against the limits. */
static vbm_status codes_check_shape(const char *path, long rows, long cols, long max_frames,
                                    int max_code_size, const long *T, const long *C, vbm_error *err)
{
    if (rows > max_frames)
        return vbm_fail(err, VBM_EINVAL, path, "T = %ld frames, the limit is %ld", rows,
                        max_frames);
    if (cols > max_code_size)
        return vbm_fail(err, VBM_EINVAL, path, "C = %ld, the code size limit is %d", cols,
                        max_code_size);
    if (rows > VBM_MAX_ELEMENTS / cols)
        return vbm_fail(err, VBM_ENOMEM, path, "%ld x %ld values exceed the limit %ld", rows, cols,
                        (long)VBM_MAX_ELEMENTS);
    if ((*T != 0 && *T != rows) || (*C != 0 && *C != cols))
        return vbm_fail(err, VBM_EINVAL, path, "shape [%ld, %ld] does not match mu's [%ld, %ld]",
                        rows, cols, *T, *C);
    return VBM_OK;
}

/* Read a float32 tensor {dtype, shape, data} at path into a new array of
 * doubles. *T and *C receive the shape (when the caller passed them as 0) or
 * must match it. */
static vbm_status codes_read_tensor(const json_t *v, const char *path, long max_frames,
                                    int max_code_size, long *T, long *C, int nonneg, double **out,
                                    vbm_error *err)
{
    static const char *const keys[] = {"dtype", "shape", "data", NULL};
    char where[WIRE_PATH_LEN];
    const json_t *dtype, *shape, *data, *d0, *d1;
    unsigned char *raw;
    size_t rawlen, i, n;
    json_int_t rows, cols;
    uint32_t bits;
    float f;
    double *a;
    vbm_status st;

    st = wire_check_keys(v, path, keys, err);
    if (st != VBM_OK)
        return st;
    dtype = json_object_get(v, "dtype");
    wire_path_key(where, sizeof where, path, "dtype");
    if (dtype == NULL || !json_is_string(dtype) || strcmp(json_string_value(dtype), "float32") != 0)
        return vbm_fail(err, VBM_EINVAL, where, "must be \"float32\"");
    shape = json_object_get(v, "shape");
    wire_path_key(where, sizeof where, path, "shape");
    d0 = json_array_get(shape, 0);
    d1 = json_array_get(shape, 1);
    if (!json_is_array(shape) || json_array_size(shape) != 2 || !json_is_integer(d0)
        || !json_is_integer(d1))
        return vbm_fail(err, VBM_EINVAL, where, "expected [T, C] (two integers)");
    rows = json_integer_value(d0);
    cols = json_integer_value(d1);
    if (rows < 1 || rows > max_frames)
        return vbm_fail(err, VBM_EINVAL, where, "T = %lld is outside [1, %ld]", (long long)rows,
                        max_frames);
    if (cols < 1 || cols > max_code_size)
        return vbm_fail(err, VBM_EINVAL, where, "C = %lld is outside [1, %d]", (long long)cols,
                        max_code_size);
    if ((*T != 0 && *T != rows) || (*C != 0 && *C != cols))
        return vbm_fail(err, VBM_EINVAL, where, "[%lld, %lld] does not match mu's [%ld, %ld]",
                        (long long)rows, (long long)cols, *T, *C);
    if (rows > VBM_MAX_ELEMENTS / cols)
        return vbm_fail(err, VBM_ENOMEM, where, "%lld x %lld values exceed the limit %ld",
                        (long long)rows, (long long)cols, (long)VBM_MAX_ELEMENTS);
    data = json_object_get(v, "data");
    wire_path_key(where, sizeof where, path, "data");
    if (!json_is_string(data))
        return vbm_fail(err, VBM_EINVAL, where, "expected a base64 string");
    if (wire_b64_decode(json_string_value(data), json_string_length(data), &raw, &rawlen) != 0)
        return vbm_fail(err, VBM_EINVAL, where, "not valid padded base64");
    n = (size_t)rows * (size_t)cols;
    if (rawlen != n * 4) {
        free(raw);
        return vbm_fail(err, VBM_EINVAL, where, "holds %zu bytes, the shape [%lld, %lld] needs %zu",
                        rawlen, (long long)rows, (long long)cols, n * 4);
    }
    a = malloc(n * sizeof *a);
    if (a == NULL) {
        free(raw);
        return vbm_fail(err, VBM_ENOMEM, where, "out of memory");
    }
    for (i = 0; i < n; i++) {
        bits = (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 | (uint32_t)raw[4 * i + 2] << 16
               | (uint32_t)raw[4 * i + 3] << 24;
        memcpy(&f, &bits, sizeof f);
        a[i] = (double)f;
        if (!isfinite(a[i]) || (nonneg && a[i] < 0.0)) {
            free(raw);
            free(a);
            return vbm_fail(err, VBM_EINVAL, where, "element [%zu][%zu] is %s", i / (size_t)cols,
                            i % (size_t)cols, isfinite(f) ? "negative" : "not finite");
        }
    }
    free(raw);
    *T = rows;
    *C = cols;
    *out = a;
    return VBM_OK;
}

/* Read a nested T x C array at path (shape from *T, *C when non-zero). */
static vbm_status codes_read_nested(const json_t *v, const char *path, long max_frames,
                                    int max_code_size, long *T, long *C, int nonneg, double **out,
                                    vbm_error *err)
{
    long rows, cols, dims[2];
    double *a;
    vbm_status st;

    st = wire_matrix_shape(v, path, &rows, &cols, err);
    if (st == VBM_OK)
        st = codes_check_shape(path, rows, cols, max_frames, max_code_size, T, C, err);
    if (st != VBM_OK)
        return st;
    a = malloc((size_t)rows * (size_t)cols * sizeof *a);
    if (a == NULL)
        return vbm_fail(err, VBM_ENOMEM, path, "out of memory");
    dims[0] = rows;
    dims[1] = cols;
    st = wire_read_array(v, path, 2, dims, nonneg, a, err);
    if (st != VBM_OK) {
        free(a);
        return st;
    }
    *T = rows;
    *C = cols;
    *out = a;
    return VBM_OK;
}

/* Read M (mu or sigma2) in either form. */
static vbm_status codes_read_matrix(const json_t *v, const char *path, long max_frames,
                                    int max_code_size, long *T, long *C, int nonneg, double **out,
                                    vbm_error *err)
{
    if (json_is_object(v))
        return codes_read_tensor(v, path, max_frames, max_code_size, T, C, nonneg, out, err);
    if (json_is_array(v))
        return codes_read_nested(v, path, max_frames, max_code_size, T, C, nonneg, out, err);
    return vbm_fail(err, VBM_EINVAL, path,
                    "expected an array of arrays of numbers or a float32 tensor object, got %s",
                    wire_type_name(v));
}

vbm_status wire_read_codes(const json_t *v, const char *path, long max_frames, int max_code_size,
                           wire_codes *out, vbm_error *err)
{
    static const char *const keys[] = {"mu", "sigma2", NULL};
    char where[WIRE_PATH_LEN];
    const json_t *mu, *s2;
    long T = 0, C = 0;
    size_t i, n;
    double x;
    vbm_status st;

    memset(out, 0, sizeof *out);
    if (!json_is_object(v))
        return vbm_fail(err, VBM_EINVAL, path, "expected an object {mu, sigma2}, got %s",
                        wire_type_name(v));
    st = wire_check_keys(v, path, keys, err);
    if (st != VBM_OK)
        return st;
    mu = json_object_get(v, "mu");
    wire_path_key(where, sizeof where, path, "mu");
    if (mu == NULL)
        return vbm_fail(err, VBM_EINVAL, where, "missing");
    st = codes_read_matrix(mu, where, max_frames, max_code_size, &T, &C, 0, &out->mu, err);
    if (st != VBM_OK)
        return st;
    out->T = T;
    out->C = (int)C;
    s2 = json_object_get(v, "sigma2");
    wire_path_key(where, sizeof where, path, "sigma2");
    if (s2 == NULL || json_is_null(s2))
        return VBM_OK;
    if (json_is_number(s2)) {
        x = json_number_value(s2);
        if (!isfinite(x) || x < 0.0) {
            wire_codes_free(out);
            return vbm_fail(err, VBM_EINVAL, where, "variance must be finite and >= 0");
        }
        if (x == 0.0)
            return VBM_OK;
        n = (size_t)T * (size_t)C;
        out->s2 = malloc(n * sizeof *out->s2);
        if (out->s2 == NULL) {
            wire_codes_free(out);
            return vbm_fail(err, VBM_ENOMEM, where, "out of memory");
        }
        for (i = 0; i < n; i++)
            out->s2[i] = x;
        return VBM_OK;
    }
    st = codes_read_matrix(s2, where, max_frames, max_code_size, &T, &C, 1, &out->s2, err);
    if (st != VBM_OK)
        wire_codes_free(out);
    return st;
}

void wire_codes_free(wire_codes *c)
{
    free(c->mu);
    free(c->s2);
    memset(c, 0, sizeof *c);
}

json_t *wire_matrix(const double *a, long rows, long cols, int base64)
{
    json_t *out;
    unsigned char *raw;
    char *text;
    size_t n = (size_t)rows * (size_t)cols, i;
    long dims[2];
    uint32_t bits;
    float f;

    if (base64) {
        raw = malloc(n * 4 + 1);
        if (raw == NULL)
            return NULL;
        for (i = 0; i < n; i++) {
            f = (float)a[i];
            memcpy(&bits, &f, sizeof bits);
            raw[4 * i] = (unsigned char)bits;
            raw[4 * i + 1] = (unsigned char)(bits >> 8);
            raw[4 * i + 2] = (unsigned char)(bits >> 16);
            raw[4 * i + 3] = (unsigned char)(bits >> 24);
        }
        text = wire_b64_encode(raw, n * 4);
        free(raw);
        if (text == NULL)
            return NULL;
        out = json_pack("{s:s, s:[I, I], s:s}", "dtype", "float32", "shape", (json_int_t)rows,
                        (json_int_t)cols, "data", text);
        free(text);
        return out;
    }
    dims[0] = rows;
    dims[1] = cols;
    if (wire_new_array(a, 2, dims, 1, "", &out, NULL) != VBM_OK)
        return NULL;
    return out;
}

json_t *wire_int_matrix(const int *a, long rows, long cols)
{
    long dims[2] = {rows, cols};
    json_t *out;

    if (wire_new_int_array(a, 2, dims, "", &out, NULL) != VBM_OK)
        return NULL;
    return out;
}

vbm_status wire_addresses(const vbm_addresses *a, const char *path, json_t **out, vbm_error *err)
{
    char where[WIRE_PATH_LEN];
    json_t *s = NULL, *w = NULL, *cov = NULL;
    long dims[4];
    vbm_status st;

    *out = NULL;
    if (a->s == NULL || a->w_mu == NULL) {
        *out = json_null();
        return VBM_OK;
    }
    dims[0] = a->T;
    dims[1] = a->G;
    dims[2] = a->H;
    dims[3] = a->K;
    wire_path_key(where, sizeof where, path, "s");
    st = wire_new_array(a->s, 3, dims, 0, where, &s, err);
    if (st == VBM_OK) {
        wire_path_key(where, sizeof where, path, "w_mu");
        st = wire_new_array(a->w_mu, 4, dims, 0, where, &w, err);
    }
    if (st == VBM_OK && a->w_cov != NULL) {
        dims[0] = a->G;
        dims[1] = a->H;
        dims[2] = a->K;
        dims[3] = a->K;
        wire_path_key(where, sizeof where, path, "w_cov");
        st = wire_new_array(a->w_cov, 4, dims, 0, where, &cov, err);
    } else if (st == VBM_OK) {
        cov = json_null();
    }
    if (st != VBM_OK) {
        json_decref(s);
        json_decref(w);
        return st;
    }
    *out = json_pack("{s:o, s:o, s:o}", "s", s, "w_mu", w, "w_cov", cov);
    if (*out == NULL)
        return vbm_fail(err, VBM_ENOMEM, path, "out of memory");
    return VBM_OK;
}
