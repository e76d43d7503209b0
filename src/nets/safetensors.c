/* safetensors.c -- parsing, validating and building safetensors files in memory (the container
 * only: header length, JSON header, F32 tensors, offsets, finite values, string metadata). */
#define _POSIX_C_SOURCE 200809L
#include "safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* "[3,5]" into buf (truncated with "..." when long). */
static void sft_shape_str(const int64_t *shape, int ndim, char *buf, size_t len)
{
    size_t at = 0;
    at += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (at < len)
        snprintf(buf + at, len - at, "]");
}

void sft_free(sft_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n_tensors; i++)
        free(f->tensors[i].name);
    free(f->tensors);
    free(f->by_name);
    free(f->values);
    for (size_t i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->meta_keys);
    free(f->meta_values);
    memset(f, 0, sizeof *f);
}

/* Sort an index array of tensors by data offset (by_offset) or by name: a merge
 * sort that takes the array explicitly (qsort has no context argument, and a
 * file-scope pointer would make parsing thread-unsafe). tmp holds n entries. */
static void sft_msort(size_t *idx, size_t *tmp, size_t n, const sft_tensor *t, int by_offset)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    sft_msort(idx, tmp, h, t, by_offset);
    sft_msort(idx + h, tmp, n - h, t, by_offset);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        const sft_tensor *a = &t[idx[i]], *b = &t[idx[j]];
        int le;
        if (by_offset)
            le = a->begin < b->begin || (a->begin == b->begin && a->end <= b->end);
        else
            le = strcmp(a->name, b->name) <= 0;
        tmp[k++] = le ? idx[i++] : idx[j++];
    }
    while (i < h)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

sft_tensor *sft_find(const sft_file *f, const char *name)
{
    size_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        sft_tensor *t = &f->tensors[f->by_name[mid]];
        int c = strcmp(t->name, name);
        if (c == 0)
            return t;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const char *sft_meta(const sft_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0)
            return f->meta_values[i];
    return NULL;
}

static int sft_get_uint(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v))
        return -1;
    json_int_t x = json_integer_value(v);
    if (x < 0)
        return -1;
    *out = (uint64_t)x;
    return 0;
}

/* Fill one tensor entry from its header object; checks dtype, shape, size. */
static vbm_status sft_parse_entry(const char *name, json_t *e, sft_tensor *t, vbm_error *err)
{
    if (!json_is_object(e))
        return vbm_fail(err, VBM_EFORMAT, NULL, "tensor %s: header entry is not an object", name);
    json_t *dt = json_object_get(e, "dtype"), *sh = json_object_get(e, "shape"),
           *off = json_object_get(e, "data_offsets");
    if (!json_is_string(dt))
        return vbm_fail(err, VBM_EFORMAT, NULL, "tensor %s: dtype is missing or not a string",
                        name);
    if (strcmp(json_string_value(dt), "F32") != 0)
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "tensor %s: dtype %.32s is not supported (F32 only)", name,
                        json_string_value(dt));
    if (!json_is_array(sh) || json_array_size(sh) > ST_MAX_DIMS)
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "tensor %s: shape must be a list of at most %d non-negative integers", name,
                        ST_MAX_DIMS);
    t->ndim = (int)json_array_size(sh);
    size_t count = 1;
    int big = 0;
    for (int i = 0; i < t->ndim; i++) {
        uint64_t d;
        if (sft_get_uint(json_array_get(sh, (size_t)i), &d) || d > (uint64_t)INT64_MAX)
            return vbm_fail(err, VBM_EFORMAT, NULL,
                            "tensor %s: shape must be a list of at most %d non-negative integers",
                            name, ST_MAX_DIMS);
        t->shape[i] = (int64_t)d;
        if (d > ST_MAX_VALUES)
            big = 1;
    }
    char sbuf[200];
    sft_shape_str(t->shape, t->ndim, sbuf, sizeof sbuf);
    /* Any zero dimension makes the count 0; otherwise multiply with an overflow guard. */
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 0)
            count = 0;
    if (count) {
        for (int i = 0; i < t->ndim; i++) {
            if (big || count > ST_MAX_VALUES / (size_t)t->shape[i]) {
                big = 1;
                break;
            }
            count *= (size_t)t->shape[i];
        }
        if (big)
            return vbm_fail(err, VBM_EFORMAT, NULL,
                            "tensor %s: shape %s has more than %zu elements", name, sbuf,
                            (size_t)ST_MAX_VALUES);
    }
    t->count = count;
    uint64_t b, en;
    if (!json_is_array(off) || json_array_size(off) != 2 || sft_get_uint(json_array_get(off, 0), &b)
        || sft_get_uint(json_array_get(off, 1), &en))
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "tensor %s: data_offsets must be two non-negative integers [begin, end]",
                        name);
    if (en < b)
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "tensor %s: data_offsets [%llu,%llu] end before they begin", name,
                        (unsigned long long)b, (unsigned long long)en);
    if (en - b != 4 * (uint64_t)count)
        return vbm_fail(err, VBM_EFORMAT, NULL, "tensor %s: %llu bytes do not hold shape %s of F32",
                        name, (unsigned long long)(en - b), sbuf);
    t->begin = (size_t)b;
    t->end = (size_t)en;
    if ((uint64_t)t->begin != b || (uint64_t)t->end != en)
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "tensor %s: data_offsets [%llu,%llu] outside the data section", name,
                        (unsigned long long)b, (unsigned long long)en);
    return VBM_OK;
}

static vbm_status sft_parse_meta(json_t *meta, sft_file *f, vbm_error *err)
{
    if (!json_is_object(meta))
        return vbm_fail(err, VBM_EFORMAT, NULL, "header: __metadata__ is not an object");
    size_t n = json_object_size(meta);
    f->meta_keys = calloc(n ? n : 1, sizeof(char *));
    f->meta_values = calloc(n ? n : 1, sizeof(char *));
    if (!f->meta_keys || !f->meta_values)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory reading the header");
    const char *key;
    json_t *v;
    json_object_foreach(meta, key, v)
    {
        if (!json_is_string(v))
            return vbm_fail(err, VBM_EFORMAT, NULL,
                            "header: __metadata__ value of %s is not a string", key);
        f->meta_keys[f->n_meta] = strdup(key);
        f->meta_values[f->n_meta] = strdup(json_string_value(v));
        f->n_meta++;
        if (!f->meta_keys[f->n_meta - 1] || !f->meta_values[f->n_meta - 1])
            return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory reading the header");
    }
    return VBM_OK;
}

static float sft_load_f32(const unsigned char *p)
{
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static vbm_status sft_parse_inner(const unsigned char *buf, size_t len, sft_file *f, json_t **root,
                                  vbm_error *err)
{
    if (!buf || len < 8)
        return vbm_fail(
            err, VBM_EFORMAT, NULL,
            "header length: the file is %zu bytes, too short for the 8-byte header length",
            buf ? len : (size_t)0);
    uint64_t N = 0;
    for (int i = 7; i >= 0; i--)
        N = N << 8 | buf[i];
    if (N < 2)
        return vbm_fail(err, VBM_EFORMAT, NULL, "header length %llu is below 2",
                        (unsigned long long)N);
    if (N > ST_MAX_HEADER)
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "header length %llu exceeds the limit of %llu bytes (16 MiB)",
                        (unsigned long long)N, (unsigned long long)ST_MAX_HEADER);
    if (N > len - 8)
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "header length %llu runs past the end of the %zu-byte file",
                        (unsigned long long)N, len);
    size_t data_len = len - 8 - (size_t)N;
    const unsigned char *data = buf + 8 + N;
    json_error_t jerr;
    *root = json_loadb((const char *)buf + 8, (size_t)N, JSON_REJECT_DUPLICATES, &jerr);
    if (!*root)
        return vbm_fail(err, VBM_EFORMAT, NULL, "header is not JSON: %s (at byte %d)", jerr.text,
                        jerr.position);
    if (!json_is_object(*root))
        return vbm_fail(err, VBM_EFORMAT, NULL, "header is not a JSON object");
    if (data_len / 4 > ST_MAX_VALUES)
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "the data section has %zu bytes, more than the limit of %zu float32 values",
                        data_len, (size_t)ST_MAX_VALUES);

    size_t n = json_object_size(*root);
    f->tensors = calloc(n ? n : 1, sizeof(sft_tensor));
    if (!f->tensors)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory reading the header");
    const char *key;
    json_t *v;
    json_object_foreach(*root, key, v)
    {
        if (strcmp(key, "__metadata__") == 0) {
            vbm_status st = sft_parse_meta(v, f, err);
            if (st != VBM_OK)
                return st;
            continue;
        }
        sft_tensor *t = &f->tensors[f->n_tensors];
        t->name = strdup(key);
        if (!t->name)
            return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory reading the header");
        f->n_tensors++;
        vbm_status st = sft_parse_entry(key, v, t, err);
        if (st != VBM_OK)
            return st;
        if (t->end > data_len)
            return vbm_fail(
                err, VBM_EFORMAT, NULL,
                "tensor %s: data_offsets [%zu,%zu] outside the data section (%zu bytes)", key,
                t->begin, t->end, data_len);
    }

    /* Offsets: sorted by begin, each tensor must start where the previous ended. */
    size_t nt = f->n_tensors;
    size_t *idx = malloc((nt ? nt : 1) * sizeof(size_t)),
           *tmp = malloc((nt ? nt : 1) * sizeof(size_t));
    f->by_name = malloc((nt ? nt : 1) * sizeof(size_t));
    if (!idx || !tmp || !f->by_name) {
        free(idx);
        free(tmp);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory reading the header");
    }
    for (size_t i = 0; i < nt; i++)
        idx[i] = f->by_name[i] = i;
    sft_msort(idx, tmp, nt, f->tensors, 1);
    sft_msort(f->by_name, tmp, nt, f->tensors, 0);
    free(tmp);
    size_t at = 0;
    const sft_tensor *prev = NULL;
    for (size_t i = 0; i < nt; i++) {
        const sft_tensor *t = &f->tensors[idx[i]];
        if (t->begin < at) {
            free(idx);
            return vbm_fail(err, VBM_EFORMAT, NULL,
                            "tensors %s and %s overlap (data_offsets [%zu,%zu] and [%zu,%zu])",
                            prev->name, t->name, prev->begin, prev->end, t->begin, t->end);
        }
        if (t->begin > at) {
            free(idx);
            return vbm_fail(err, VBM_EFORMAT, NULL,
                            "data section bytes [%zu,%zu) are not covered by any tensor", at,
                            t->begin);
        }
        if (t->end > at || !prev)
            prev = t;
        if (t->end > at)
            at = t->end;
    }
    if (at != data_len) {
        free(idx);
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "data section bytes [%zu,%zu) are not covered by any tensor", at, data_len);
    }

    /* Values: the data section is now exactly a float32 array. */
    f->n_values = data_len / 4;
    f->values = malloc((f->n_values ? f->n_values : 1) * sizeof(float));
    if (!f->values) {
        free(idx);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for %zu weights", f->n_values);
    }
    for (size_t i = 0; i < f->n_values; i++)
        f->values[i] = sft_load_f32(data + 4 * i);
    for (size_t i = 0; i < nt; i++) {
        sft_tensor *t = &f->tensors[idx[i]];
        t->data = f->values + t->begin / 4;
        for (size_t j = 0; j < t->count; j++)
            if (!isfinite(t->data[j])) {
                free(idx);
                return vbm_fail(err, VBM_EFORMAT, NULL, "tensor %s: element %zu is not finite",
                                t->name, j);
            }
    }
    free(idx);
    return VBM_OK;
}

vbm_status sft_parse(const unsigned char *buf, size_t len, sft_file *out, vbm_error *err)
{
    memset(out, 0, sizeof *out);
    json_t *root = NULL;
    vbm_status rc = sft_parse_inner(buf, len, out, &root, err);
    json_decref(root);
    if (rc != VBM_OK)
        sft_free(out);
    return rc;
}

static void sft_put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

vbm_status sft_build(const sft_input *t, size_t n, const char *const *meta, size_t n_meta,
                     unsigned char **out, size_t *outlen, vbm_error *err)
{
    *out = NULL;
    *outlen = 0;
    json_t *root = json_object();
    if (!root)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory building a header");
    size_t off = 0;
    vbm_status rc = VBM_OK;
    if (n_meta) {
        json_t *m = json_object();
        for (size_t i = 0; m && i < n_meta; i++)
            json_object_set_new(m, meta[2 * i], json_string(meta[2 * i + 1]));
        if (!m || json_object_set_new(root, "__metadata__", m))
            rc = vbm_fail(err, VBM_EINVAL, NULL, "bad metadata");
    }
    for (size_t i = 0; !rc && i < n; i++) {
        if (t[i].ndim < 0 || t[i].ndim > ST_MAX_DIMS) {
            rc = vbm_fail(err, VBM_EINVAL, NULL, "tensor %s: bad rank %d", t[i].name, t[i].ndim);
            break;
        }
        size_t count = 1;
        json_t *sh = json_array();
        for (int d = 0; d < t[i].ndim; d++) {
            count *= (size_t)t[i].shape[d];
            json_array_append_new(sh, json_integer(t[i].shape[d]));
        }
        json_t *e = json_pack("{s:s,s:o,s:[I,I]}", "dtype", "F32", "shape", sh, "data_offsets",
                              (json_int_t)off, (json_int_t)(off + 4 * count));
        if (!e || json_object_set_new(root, t[i].name, e))
            rc = vbm_fail(err, VBM_EINVAL, NULL, "tensor %s: bad entry", t[i].name);
        off += 4 * count;
    }
    char *hdr = rc ? NULL : json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (rc)
        return rc;
    if (!hdr)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory building a header");
    size_t hl = strlen(hdr), pad = (8 - hl % 8) % 8;
    size_t total = 8 + hl + pad + off;
    unsigned char *buf = malloc(total);
    if (!buf) {
        free(hdr);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory building a %zu-byte file", total);
    }
    sft_put_u64(buf, hl + pad);
    memcpy(buf + 8, hdr, hl);
    memset(buf + 8 + hl, ' ', pad);
    free(hdr);
    unsigned char *p = buf + 8 + hl + pad;
    for (size_t i = 0; i < n; i++) {
        size_t count = 1;
        for (int d = 0; d < t[i].ndim; d++)
            count *= (size_t)t[i].shape[d];
        for (size_t j = 0; j < count; j++) {
            uint32_t u;
            memcpy(&u, &t[i].data[j], sizeof u);
            for (int b = 0; b < 4; b++)
                *p++ = (unsigned char)(u >> (8 * b));
        }
    }
    *out = buf;
    *outlen = total;
    return VBM_OK;
}

vbm_status sft_read_file(const char *path, unsigned char **buf, size_t *len, vbm_error *err)
{
    *buf = NULL;
    *len = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return vbm_fail(err, VBM_EINVAL, NULL, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(fp);
        return vbm_fail(err, VBM_EINVAL, NULL, "%s: not a regular file", path);
    }
    /* Largest valid file: 8 + 16 MiB header + ST_MAX_VALUES floats. */
    unsigned long long limit = 8ull + ST_MAX_HEADER + 4ull * ST_MAX_VALUES;
    if ((unsigned long long)sb.st_size > limit) {
        fclose(fp);
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "%s: %lld bytes is larger than any valid model file (%llu)", path,
                        (long long)sb.st_size, limit);
    }
    size_t n = (size_t)sb.st_size;
    unsigned char *b = malloc(n ? n : 1);
    if (!b) {
        fclose(fp);
        return vbm_fail(err, VBM_ENOMEM, NULL, "%s: out of memory for %zu bytes", path, n);
    }
    size_t got = fread(b, 1, n, fp);
    int rerr = ferror(fp);
    fclose(fp);
    if (got != n || rerr) {
        free(b);
        return vbm_fail(err, VBM_EINVAL, NULL, "%s: read error", path);
    }
    *buf = b;
    *len = n;
    return VBM_OK;
}

json_t *sft_meta_object(const sft_file *f, const char *key, vbm_error *err)
{
    const char *s = sft_meta(f, key);
    if (!s) {
        vbm_fail(err, VBM_EFORMAT, NULL, "metadata %s is missing", key);
        return NULL;
    }
    json_error_t jerr;
    json_t *v = json_loads(s, JSON_REJECT_DUPLICATES, &jerr);
    if (!v) {
        vbm_fail(err, VBM_EFORMAT, NULL, "metadata %s: not JSON: %s (at character %d)", key,
                 jerr.text, jerr.position);
        return NULL;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        vbm_fail(err, VBM_EFORMAT, NULL, "metadata %s: not a JSON object", key);
        return NULL;
    }
    return v;
}

vbm_status sft_check_used(const sft_file *f, vbm_error *err)
{
    for (size_t i = 0; i < f->n_tensors; i++)
        if (!f->tensors[i].used)
            return vbm_fail(err, VBM_EFORMAT, NULL, "tensor %s is not used by any layer",
                            f->tensors[i].name);
    return VBM_OK;
}
