/* test_nets.c -- Check tests of src/nets: model-file rejections (each with its message), every
 * layer against a direct reference implementation, and parity with PyTorch on the golden files
 * of tests/data (train/golden_nets.py). */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nets/nets.h"
#include "nets/kernels_avx2.h"
#include "nets/kernels_avx512.h"
#include "nets/nets_internal.h"
#include "nets/onednn.h"
#include "nets/safetensors.h"
#include "numerics/rng.h"

/* ---- helpers ---- */

static float *randf(long n, uint64_t seed, double scale)
{
    rng_t r;
    rng_seed(&r, seed);
    float *x = malloc(sizeof(float) * (n ? n : 1));
    for (long i = 0; i < n; i++)
        x[i] = (float)(scale * rng_normal(&r));
    return x;
}

static char *strrep(const char *s, const char *from, const char *to)
{
    const char *p = strstr(s, from);
    ck_assert_msg(p != NULL, "test bug: \"%s\" not in the string", from);
    size_t a = (size_t)(p - s), lf = strlen(from), lt = strlen(to), ls = strlen(s);
    char *out = malloc(ls - lf + lt + 1);
    memcpy(out, s, a);
    memcpy(out + a, to, lt);
    memcpy(out + a + lt, p + lf, ls - a - lf + 1);
    return out;
}

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
    *len = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

/* ---- the base model for the rejection tests ---- */

/* obs [1,6,6] gaussian, C = 2. encoder: conv 3x3 valid -> [2,4,4], flatten, dense 32 -> 4.
 * decoder: dense 2 -> 8, reshape [2,2,2], transposed conv k3 s3 valid -> [2,6,6]. */
static const char *BASE_ARCH =
    "{\"observation\":{\"channels\":1,\"height\":6,\"width\":6,\"likelihood\":\"gaussian\",\"min_"
    "scale\":0.001},"
    "\"code_size\":2,\"log_sigma_min\":-9,\"log_sigma_max\":4,"
    "\"encoder\":[{\"type\":\"conv2d\",\"name\":\"e0\",\"in\":1,\"out\":2,\"kernel\":3,\"stride\":"
    "1,\"padding\":"
    "\"valid\"},{\"type\":\"flatten\"},{\"type\":\"dense\",\"name\":\"e1\",\"in\":32,\"out\":4}],"
    "\"decoder\":[{\"type\":\"dense\",\"name\":\"d0\",\"in\":2,\"out\":8},{\"type\":\"reshape\","
    "\"shape\":[2,2,2]},"
    "{\"type\":\"conv_transpose2d\",\"name\":\"d1\",\"in\":2,\"out\":2,\"kernel\":3,\"stride\":3,"
    "\"padding\":"
    "\"valid\"}]}";
static const char *BASE_MEMORY =
    "{\"kind\":\"mixture\",\"clusters\":3,\"rows\":2,\"groups\":1,\"iterations\":5,"
    "\"sigma_z2\":0.4,\"u0\":0.4,\"sigma2_b0\":0.8,\"s_floor\":0,\"episode_length\":16}";
static const char *BASE_PROV = "{\"dataset\":\"none\",\"seed\":1}";

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[4];
} tdesc;

typedef struct {
    tdesc t[16];
    int nt;
    const char *meta[12];
    int nmeta;      /* pairs */
    int nan_tensor; /* index of a tensor that gets a non-finite value, or -1 */
    long nan_at;
    float nan_value;
    double scale[16]; /* multiplies tensor i's random values when non-zero */
} mspec;

static void spec_base(mspec *s, const char *arch)
{
    static const tdesc base[] = {{"e0.weight", 4, {2, 1, 3, 3}}, {"e0.bias", 1, {2}},
                                 {"e1.weight", 2, {4, 32}},      {"e1.bias", 1, {4}},
                                 {"d0.weight", 2, {8, 2}},       {"d0.bias", 1, {8}},
                                 {"d1.weight", 4, {2, 2, 3, 3}}, {"d1.bias", 1, {2}}};
    memset(s, 0, sizeof *s);
    s->nt = 8;
    memcpy(s->t, base, sizeof base);
    const char *meta[] = {"vbmem.format",         "vbmem-model",
                          "vbmem.format_version", "1",
                          "vbmem.architecture",   arch ? arch : BASE_ARCH,
                          "vbmem.memory",         BASE_MEMORY,
                          "vbmem.provenance",     BASE_PROV};
    memcpy(s->meta, meta, sizeof meta);
    s->nmeta = 5;
    s->nan_tensor = -1;
}

static void spec_drop_meta(mspec *s, const char *key)
{
    for (int i = 0; i < s->nmeta; i++)
        if (strcmp(s->meta[2 * i], key) == 0) {
            memmove(&s->meta[2 * i], &s->meta[2 * i + 2], sizeof(char *) * 2 * (s->nmeta - i - 1));
            s->nmeta--;
            return;
        }
    ck_abort_msg("test bug: no metadata %s", key);
}

static void spec_set_meta(mspec *s, const char *key, const char *value)
{
    for (int i = 0; i < s->nmeta; i++)
        if (strcmp(s->meta[2 * i], key) == 0) {
            s->meta[2 * i + 1] = value;
            return;
        }
    ck_abort_msg("test bug: no metadata %s", key);
}

static unsigned char *spec_build(const mspec *s, size_t *len)
{
    sft_input in[16];
    float *data[16];
    for (int i = 0; i < s->nt; i++) {
        long count = 1;
        for (int d = 0; d < s->t[i].ndim; d++)
            count *= s->t[i].shape[d];
        data[i] = randf(count, 100 + (uint64_t)i, 0.3);
        if (s->scale[i] != 0)
            for (long j = 0; j < count; j++)
                data[i][j] = (float)(data[i][j] * s->scale[i]);
        if (i == s->nan_tensor)
            data[i][s->nan_at] = s->nan_value;
        in[i] = (sft_input){s->t[i].name, s->t[i].ndim, s->t[i].shape, data[i]};
    }
    unsigned char *buf = NULL;
    vbm_error err;
    ck_assert_msg(sft_build(in, (size_t)s->nt, s->meta, (size_t)s->nmeta, &buf, len, &err)
                      == VBM_OK,
                  "%s", err.msg);
    for (int i = 0; i < s->nt; i++)
        free(data[i]);
    return buf;
}

/* Load must fail with exactly `want` (or, with prefix set, a message starting with it). */
static void expect_reject_buf(const unsigned char *buf, size_t len, const char *want, int prefix)
{
    vbm_error err = {0};
    nets_model *m = (nets_model *)1;
    vbm_status rc = nets_model_load_buffer(buf, len, &m, &err);
    ck_assert_msg(rc == VBM_EFORMAT, "load accepted a bad file (wanted \"%s\")", want);
    ck_assert_msg(m == NULL, "*out not NULL on failure");
    ck_assert_int_eq(err.status, VBM_EFORMAT);
    ck_assert_str_eq(err.field, "");
    if (prefix)
        ck_assert_msg(strncmp(err.msg, want, strlen(want)) == 0,
                      "message \"%s\" does not start with \"%s\"", err.msg, want);
    else
        ck_assert_msg(strcmp(err.msg, want) == 0, "message \"%s\", wanted \"%s\"", err.msg, want);
}

static void expect_reject(const mspec *s, const char *want, int prefix)
{
    size_t len;
    unsigned char *buf = spec_build(s, &len);
    expect_reject_buf(buf, len, want, prefix);
    free(buf);
}

/* 8-byte length + header + data_len zero bytes. */
static unsigned char *raw_file(const char *hdr, size_t data_len, size_t *len)
{
    size_t n = strlen(hdr);
    *len = 8 + n + data_len;
    unsigned char *b = calloc(1, *len);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(b + 8, hdr, n);
    return b;
}

static void expect_raw_reject(const char *hdr, size_t data_len, const char *want, int prefix)
{
    size_t len;
    unsigned char *b = raw_file(hdr, data_len, &len);
    expect_reject_buf(b, len, want, prefix);
    free(b);
}

/* ---- the model file ---- */

START_TEST(test_base_loads)
{
    mspec s;
    spec_base(&s, NULL);
    size_t len;
    unsigned char *buf = spec_build(&s, &len);
    nets_model *m = NULL;
    vbm_error err;
    ck_assert_msg(nets_model_load_buffer(buf, len, &m, &err) == VBM_OK, "%s", err.msg);
    const nets_info *in = nets_model_info(m);
    ck_assert_int_eq(in->channels, 1);
    ck_assert_int_eq(in->height, 6);
    ck_assert_int_eq(in->code_size, 2);
    ck_assert_int_eq(in->likelihood, NETS_GAUSSIAN);
    ck_assert_str_eq(in->kind, "mixture");
    ck_assert_int_eq(in->clusters, 3);
    ck_assert_int_eq(in->rows, 2);
    ck_assert_int_eq(in->episode_length, 16);
    ck_assert(fabs(in->sigma2_b0 - 0.8) < 1e-15);
    ck_assert_uint_eq(in->n_params, 18 + 2 + 128 + 4 + 16 + 8 + 36 + 2);
    ck_assert_str_eq(in->memory_json, BASE_MEMORY);
    ck_assert_str_eq(in->provenance_json, BASE_PROV);
    /* encode / decode run and give finite values */
    float *x = randf(3 * 36, 5, 0.3);
    double mu[6], s2[6];
    ck_assert_msg(nets_encode(m, x, 3, mu, s2, &err) == VBM_OK, "%s", err.msg);
    for (int i = 0; i < 6; i++)
        ck_assert(isfinite(mu[i]) && s2[i] > 0);
    float mean[3 * 36], scale[3 * 36];
    ck_assert_msg(nets_decode(m, mu, 3, mean, scale, &err) == VBM_OK, "%s", err.msg);
    for (int i = 0; i < 3 * 36; i++)
        ck_assert(isfinite(mean[i]) && scale[i] > 0.001f);
    ck_assert_int_eq(nets_encode(m, x, 0, mu, s2, &err), VBM_EINVAL);
    ck_assert_str_eq(err.msg, "nets_encode: 0 images (need at least 1)");
    ck_assert_int_eq(err.status, VBM_EINVAL);
    ck_assert_int_eq(nets_encode(m, x, 0, mu, s2, NULL), VBM_EINVAL); /* err may be NULL */
    x[7] = NAN;
    ck_assert_int_eq(nets_encode(m, x, 3, mu, s2, &err), VBM_EINVAL);
    ck_assert_str_eq(err.msg, "nets_encode: pixel 7 is not finite");
    mu[1] = INFINITY;
    ck_assert_int_eq(nets_decode(m, mu, 3, mean, NULL, &err), VBM_EINVAL);
    ck_assert_str_eq(err.msg, "nets_decode: code element 1 is not finite");
    free(x);
    nets_model_free(m);

    /* finite weights whose outputs overflow */
    {
        mspec s2s;
        spec_base(&s2s, NULL);
        s2s.scale[0] = 1e30; /* e0.weight */
        s2s.scale[2] = 1e30; /* e1.weight */
        s2s.scale[4] = 1e30; /* d0.weight */
        s2s.scale[6] = 1e30; /* d1.weight */
        size_t blen;
        unsigned char *b2 = spec_build(&s2s, &blen);
        ck_assert_msg(nets_model_load_buffer(b2, blen, &m, &err) == VBM_OK, "%s", err.msg);
        free(b2);
        float *xx = randf(3 * 36, 5, 1.0);
        ck_assert_int_eq(nets_encode(m, xx, 3, mu, s2, &err), VBM_EINVAL);
        ck_assert_str_eq(err.msg, "nets_encode: the encoder's output for image 0 is not finite");
        double zz[6] = {1e30, -1e30, 1e30, 1e30, -1e30, 1e30};
        ck_assert_int_eq(nets_decode(m, zz, 3, mean, scale, &err), VBM_EINVAL);
        ck_assert_str_eq(err.msg, "nets_decode: the decoder's output for code 0 is not finite");
        free(xx);
        nets_model_free(m);
    }

    /* from a path: the message names the file */
    char path[] = "/tmp/test_nets_XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    FILE *f = fdopen(fd, "wb");
    fwrite(buf, 1, len - 3, f); /* truncated */
    fclose(f);
    ck_assert_int_eq(nets_model_load(path, &m, &err), VBM_EFORMAT);
    ck_assert_msg(strncmp(err.msg, path, strlen(path)) == 0
                      && strstr(err.msg, ": tensor d1.bias: data_offsets ["),
                  "message: %s", err.msg);
    f = fopen(path, "wb");
    fwrite(buf, 1, len, f);
    fclose(f);
    ck_assert_msg(nets_model_load(path, &m, &err) == VBM_OK, "%s", err.msg);
    nets_model_free(m);
    remove(path);
    ck_assert_int_eq(nets_model_load("/nonexistent/model.safetensors", &m, &err), VBM_EINVAL);
    ck_assert_str_eq(err.msg,
                     "/nonexistent/model.safetensors: cannot open: No such file or directory");
    free(buf);
}
END_TEST

START_TEST(test_reject_container)
{
    char want[256];
    /* truncated */
    unsigned char five[5] = {1, 0, 0, 0, 0};
    expect_reject_buf(
        five, 5, "header length: the file is 5 bytes, too short for the 8-byte header length", 0);
    nets_model *none = NULL;
    ck_assert_int_eq(nets_model_load_buffer(five, 5, &none, NULL),
                     VBM_EFORMAT); /* err may be NULL */
    ck_assert_ptr_null(none);
    /* sft_build refuses a bad rank */
    {
        int64_t sh[1] = {1};
        float one = 1.0f;
        sft_input bad = {"w", ST_MAX_DIMS + 1, sh, &one};
        unsigned char *b = NULL;
        size_t blen = 0;
        vbm_error err;
        ck_assert_int_eq(sft_build(&bad, 1, NULL, 0, &b, &blen, &err), VBM_EINVAL);
        ck_assert_str_eq(err.msg, "tensor w: bad rank 9");
        ck_assert_ptr_null(b);
    }
    mspec s;
    spec_base(&s, NULL);
    size_t len;
    unsigned char *buf = spec_build(&s, &len);
    uint64_t N = 0;
    for (int i = 7; i >= 0; i--)
        N = N << 8 | buf[i];
    snprintf(want, sizeof want, "header length %llu runs past the end of the %llu-byte file",
             (unsigned long long)N, (unsigned long long)(8 + N / 2));
    expect_reject_buf(buf, 8 + N / 2, want, 0);
    expect_reject_buf(buf, len - 4, "tensor d1.bias: data_offsets [", 1);
    /* bad header length */
    unsigned char *b2 = malloc(len);
    memcpy(b2, buf, len);
    memset(b2, 0, 8);
    b2[0] = 1;
    expect_reject_buf(b2, len, "header length 1 is below 2", 0);
    memset(b2, 0, 8);
    b2[5] = 1; /* 2^40 */
    expect_reject_buf(
        b2, len, "header length 1099511627776 exceeds the limit of 16777216 bytes (16 MiB)", 0);
    memcpy(b2, buf, 8);
    b2[0] = (unsigned char)(b2[0] - 8); /* header cut short: JSON ends early */
    expect_reject_buf(b2, len, "header is not JSON: ", 1);
    free(b2);
    free(buf);
    /* bad JSON, not an object, duplicate keys */
    expect_raw_reject("{\"a\": ", 0, "header is not JSON: ", 1);
    expect_raw_reject("[1, 2]  ", 0, "header is not a JSON object", 0);
    expect_raw_reject("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                      4, "header is not JSON: duplicate object key", 1);
    /* dtype, shape, size */
    expect_raw_reject("{\"w\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
                      "tensor w: dtype BF16 is not supported (F32 only)", 0);
    expect_raw_reject("{\"w\":{\"dtype\":\"F32\",\"shape\":[3,5],\"data_offsets\":[0,40]}}", 40,
                      "tensor w: 40 bytes do not hold shape [3,5] of F32", 0);
    expect_raw_reject("{\"w\":{\"dtype\":\"F32\",\"shape\":[3,-5],\"data_offsets\":[0,40]}}", 40,
                      "tensor w: shape must be a list of at most 8 non-negative integers", 0);
    expect_raw_reject(
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[65536,65536,65536],\"data_offsets\":[0,4]}}", 4,
        "tensor w: shape [65536,65536,65536] has more than 268435456 elements", 0);
    expect_raw_reject("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8]}}", 8,
                      "tensor w: data_offsets must be two non-negative integers [begin, end]", 0);
    expect_raw_reject("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,4]}}", 12,
                      "tensor w: data_offsets [12,4] end before they begin", 0);
    /* offsets */
    expect_raw_reject("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 8,
                      "tensor w: data_offsets [4,12] outside the data section (8 bytes)", 0);
    expect_raw_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                      12, "tensors a and b overlap (data_offsets [0,8] and [4,12])", 0);
    expect_raw_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                      12, "data section bytes [4,8) are not covered by any tensor", 0);
    expect_raw_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8,
                      "data section bytes [4,8) are not covered by any tensor", 0);
    expect_raw_reject("{\"__metadata__\":{\"k\":1}}", 0,
                      "header: __metadata__ value of k is not a string", 0);
    /* a valid container without metadata is not a model */
    expect_raw_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                      "metadata vbmem.format is missing (not a vbmem model file)", 0);
}
END_TEST

START_TEST(test_reject_values)
{
    mspec s;
    spec_base(&s, NULL);
    s.nan_tensor = 2;
    s.nan_at = 17;
    s.nan_value = NAN;
    expect_reject(&s, "tensor e1.weight: element 17 is not finite", 0);
    s.nan_value = -INFINITY;
    s.nan_at = 0;
    expect_reject(&s, "tensor e1.weight: element 0 is not finite", 0);
}
END_TEST

START_TEST(test_reject_tensors)
{
    mspec s;
    spec_base(&s, NULL);
    /* missing */
    s.t[5] = s.t[7];
    s.nt = 7;
    expect_reject(&s, "layer d0 (dense): tensor d0.bias is missing", 0);
    /* unused */
    spec_base(&s, NULL);
    s.t[8] = (tdesc){"extra.weight", 1, {3}};
    s.nt = 9;
    expect_reject(&s, "tensor extra.weight is not used by any layer", 0);
    /* wrong shape */
    spec_base(&s, NULL);
    s.t[0].shape[1] = 2;
    expect_reject(&s, "layer e0 (conv2d): tensor e0.weight has shape [2,2,3,3], expected [2,1,3,3]",
                  0);
    spec_base(&s, NULL);
    s.t[3].ndim = 2;
    s.t[3].shape[1] = 1;
    expect_reject(&s, "layer e1 (dense): tensor e1.bias has shape [4,1], expected [4]", 0);
    /* transposed convolution weights are [in, out, k, k] */
    spec_base(&s, NULL);
    char *arch = strrep(BASE_ARCH, "\"name\":\"d1\",\"in\":2,\"out\":2",
                        "\"name\":\"d1\",\"in\":2,\"out\":4");
    spec_set_meta(&s, "vbmem.architecture", arch);
    s.t[7].shape[0] = 4;
    expect_reject(
        &s, "layer d1 (conv_transpose2d): tensor d1.weight has shape [2,2,3,3], expected [2,4,3,3]",
        0);
    free(arch);
    /* two layers with one name */
    spec_base(&s, NULL);
    arch =
        strrep(BASE_ARCH, "{\"type\":\"flatten\"}",
               "{\"type\":\"group_norm\",\"name\":\"g\",\"groups\":1,\"channels\":2,\"eps\":1e-5},"
               "{\"type\":\"group_norm\",\"name\":\"g\",\"groups\":2,\"channels\":2,\"eps\":1e-5},"
               "{\"type\":\"flatten\"}");
    spec_set_meta(&s, "vbmem.architecture", arch);
    s.t[8] = (tdesc){"g.weight", 1, {2}};
    s.t[9] = (tdesc){"g.bias", 1, {2}};
    s.nt = 10;
    expect_reject(&s, "layer g (group_norm): tensor g.weight is already used by another layer", 0);
    free(arch);
}
END_TEST

static void reject_arch_p(const char *from, const char *to, const char *want, int prefix)
{
    mspec s;
    spec_base(&s, NULL);
    char *arch = strrep(BASE_ARCH, from, to);
    spec_set_meta(&s, "vbmem.architecture", arch);
    expect_reject(&s, want, prefix);
    free(arch);
}

static void reject_arch(const char *from, const char *to, const char *want)
{
    reject_arch_p(from, to, want, 0);
}

START_TEST(test_reject_architecture)
{
    /* shape chain */
    reject_arch("\"in\":32,\"out\":4", "\"in\":30,\"out\":4",
                "layer e1 (dense): input shape [32] has 32 features, the layer has in = 30");
    reject_arch("\"in\":1,\"out\":2,\"kernel\":3", "\"in\":3,\"out\":2,\"kernel\":3",
                "layer e0 (conv2d): input shape [1,6,6] has 1 channels, the layer has in = 3");
    reject_arch("\"kernel\":3,\"stride\":1,\"padding\":\"valid\"",
                "\"kernel\":7,\"stride\":1,\"padding\":\"valid\"",
                "layer e0 (conv2d): input shape [1,6,6] is smaller than the kernel 7");
    reject_arch("{\"type\":\"flatten\"},", "",
                "layer e1 (dense): input shape [2,4,4] is not a vector (flatten it first)");
    reject_arch("\"shape\":[2,2,2]", "\"shape\":[2,2,3]",
                "layer decoder[1] (reshape): reshape to [2,2,3] needs a vector of 12 features, the "
                "input has shape [8]");
    reject_arch("\"in\":32,\"out\":4}",
                "\"in\":32,\"out\":4},{\"type\":\"center_crop\",\"height\":2,\"width\":2}",
                "layer encoder[3] (center_crop): input shape [4] is not an image [c,h,w]");
    reject_arch("{\"type\":\"flatten\"}",
                "{\"type\":\"center_crop\",\"height\":5,\"width\":2},{\"type\":\"flatten\"}",
                "layer encoder[1] (center_crop): cannot crop input shape [2,4,4] to 5 x 2");
    /* encoder / decoder ends */
    reject_arch("\"in\":32,\"out\":4}",
                "\"in\":32,\"out\":4},{\"type\":\"dense\",\"name\":\"e2\",\"in\":4,\"out\":6}",
                "layer e2 (dense): tensor e2.weight is missing");
    reject_arch("\"code_size\":2", "\"code_size\":3",
                "encoder: output shape [4] is not [6] (2 x code_size)");
    reject_arch("\"stride\":3,\"padding\":\"valid\"}",
                "\"stride\":3,\"padding\":\"valid\"},{\"type\":\"center_crop\","
                "\"height\":5,\"width\":5}",
                "decoder: output shape [2,5,5] does not match the observation [1,6,6] (2 channels "
                "for gaussian)");
    reject_arch("\"likelihood\":\"gaussian\",\"min_scale\":0.001", "\"likelihood\":\"bernoulli\"",
                "decoder: output shape [2,6,6] does not match the observation [1,6,6] (1 channels "
                "for bernoulli)");
    reject_arch("{\"type\":\"flatten\"},{\"type\":\"dense\",\"name\":\"e1\",\"in\":32,\"out\":4}",
                "{\"type\":\"flatten\"},{\"type\":\"dense\",\"name\":\"e1\",\"in\":32,\"out\":4},{"
                "\"type\":\"reshape\","
                "\"shape\":[4,1,1]}",
                "encoder: output shape [4,1,1] is not [4] (2 x code_size)");
    /* fields */
    reject_arch("\"type\":\"flatten\"", "\"type\":\"conv3d\"",
                "layer encoder[1]: unknown type \"conv3d\"");
    reject_arch("{\"type\":\"flatten\"}", "{\"name\":\"x\"}",
                "layer encoder[1]: type is missing or not a string");
    reject_arch("\"kernel\":3,\"stride\":1", "\"kernel\":3.0,\"stride\":1",
                "layer e0 (conv2d): kernel must be an integer in [1, 64]");
    reject_arch("\"stride\":1,\"padding\":\"valid\"", "\"stride\":1,\"padding\":\"full\"",
                "layer e0 (conv2d): padding must be \"valid\" or \"same\"");
    reject_arch(
        "\"name\":\"e0\",", "",
        "layer encoder[0] (conv2d): name must be a non-empty string of at most 64 characters");
    reject_arch("{\"type\":\"flatten\"}",
                "{\"type\":\"group_norm\",\"name\":\"g\",\"groups\":2,\"channels\":3,\"eps\":1e-5},"
                "{\"type\":\"flatten\"}",
                "layer g (group_norm): channels 3 are not divisible by groups 2");
    reject_arch("{\"type\":\"flatten\"}",
                "{\"type\":\"group_norm\",\"name\":\"g\",\"groups\":2,\"channels\":2,\"eps\":0},{"
                "\"type\":\"flatten\"}",
                "layer g (group_norm): eps must be a positive number");
    reject_arch(
        "{\"type\":\"flatten\"}",
        "{\"type\":\"residual\",\"body\":[{\"type\":\"center_crop\",\"height\":3,\"width\":3}]},{"
        "\"type\":\"flatten\"}",
        "layer encoder[1] (residual): the body maps [2,4,4] to [2,3,3] (it must keep the shape)");
    reject_arch("{\"type\":\"flatten\"}",
                "{\"type\":\"residual\",\"body\":[{\"type\":\"relu\"},{\"type\":\"softmax\"}]},{"
                "\"type\":\"flatten\"}",
                "layer encoder[1].body[1]: unknown type \"softmax\"");
    reject_arch(
        "\"observation\":{\"channels\":1", "\"observation\":{\"channels\":0",
        "metadata vbmem.architecture: observation: channels must be an integer in [1, 65536]");
    reject_arch("\"likelihood\":\"gaussian\"", "\"likelihood\":\"poisson\"",
                "metadata vbmem.architecture: observation likelihood must be \"gaussian\" or "
                "\"bernoulli\"");
    reject_arch("\"likelihood\":\"gaussian\",\"min_scale\":0.001", "\"likelihood\":\"gaussian\"",
                "metadata vbmem.architecture: observation: min_scale must be a number in [0, inf)");
    reject_arch(
        "\"min_scale\":0.001", "\"min_scale\":0.001,\"mean\":\"tanh\"",
        "metadata vbmem.architecture: observation mean must be \"identity\" or \"sigmoid\"");
    reject_arch("\"min_scale\":0.001", "\"min_scale\":0.001,\"scale_max\":0",
                "metadata vbmem.architecture: observation scale_max must be above 0");
    reject_arch("\"min_scale\":0.001", "\"min_scale\":0.001,\"scale_max\":\"big\"",
                "metadata vbmem.architecture: observation: scale_max must be a number in [0, inf)");
    reject_arch("\"log_sigma_max\":4", "\"log_sigma_max\":-10",
                "metadata vbmem.architecture: log_sigma_min -9 is not below log_sigma_max -10");
    reject_arch_p("\"encoder\":[", "\"encoder\":{\"x\":[",
                  "metadata vbmem.architecture: not JSON: ", 1);
}
END_TEST

START_TEST(test_reject_metadata)
{
    mspec s;
    spec_base(&s, NULL);
    spec_drop_meta(&s, "vbmem.memory");
    expect_reject(&s, "metadata vbmem.memory is missing", 0);
    spec_base(&s, NULL);
    spec_drop_meta(&s, "vbmem.provenance");
    expect_reject(&s, "metadata vbmem.provenance is missing", 0);
    spec_base(&s, NULL);
    spec_drop_meta(&s, "vbmem.architecture");
    expect_reject(&s, "metadata vbmem.architecture is missing", 0);
    spec_base(&s, NULL);
    spec_drop_meta(&s, "vbmem.format");
    expect_reject(&s, "metadata vbmem.format is missing (not a vbmem model file)", 0);
    spec_base(&s, NULL);
    spec_set_meta(&s, "vbmem.format", "other");
    expect_reject(&s, "metadata vbmem.format is \"other\", expected \"vbmem-model\"", 0);
    spec_base(&s, NULL);
    spec_set_meta(&s, "vbmem.format_version", "2");
    expect_reject(&s, "metadata vbmem.format_version is \"2\"; this build reads version 1", 0);
    spec_base(&s, NULL);
    spec_set_meta(&s, "vbmem.architecture", "{\"observation\":");
    expect_reject(&s, "metadata vbmem.architecture: not JSON: ", 1);
    spec_base(&s, NULL);
    spec_set_meta(&s, "vbmem.provenance", "[1]");
    expect_reject(&s, "metadata vbmem.provenance: not a JSON object", 0);
    spec_base(&s, NULL);
    char *mem = strrep(BASE_MEMORY, "\"rows\":2", "\"rows\":0");
    spec_set_meta(&s, "vbmem.memory", mem);
    expect_reject(&s, "metadata vbmem.memory: rows must be an integer in [1, 4096]", 0);
    free(mem);
    mem = strrep(BASE_MEMORY, "\"kind\":\"mixture\"", "\"kind\":\"kmeans\"");
    spec_set_meta(&s, "vbmem.memory", mem);
    expect_reject(&s,
                  "metadata vbmem.memory: kind must be one of \"gaussian\", \"categorical\", "
                  "\"mixture\", \"tree\", \"dkm\"",
                  0);
    free(mem);
    mem = strrep(BASE_MEMORY, "\"s_floor\":0", "\"s_floor\":1");
    spec_set_meta(&s, "vbmem.memory", mem);
    expect_reject(&s, "metadata vbmem.memory: s_floor must be a number in [0, 1)", 0);
    free(mem);
    mem = strrep(BASE_MEMORY, "\"sigma_z2\":0.4,", "");
    spec_set_meta(&s, "vbmem.memory", mem);
    expect_reject(&s, "metadata vbmem.memory: sigma_z2 must be a positive number", 0);
    free(mem);
    mem = strrep(BASE_MEMORY, "\"groups\":1", "\"groups\":2"); /* divides C = 2: accepted */
    spec_set_meta(&s, "vbmem.memory", mem);
    {
        size_t len;
        unsigned char *buf = spec_build(&s, &len);
        nets_model *m;
        vbm_error err;
        ck_assert_msg(nets_model_load_buffer(buf, len, &m, &err) == VBM_OK, "%s", err.msg);
        ck_assert_int_eq(nets_model_info(m)->groups, 2);
        nets_model_free(m);
        free(buf);
    }
    free(mem);
    mem = strrep(BASE_MEMORY, "\"groups\":1", "\"groups\":3");
    spec_set_meta(&s, "vbmem.memory", mem);
    expect_reject(&s, "metadata vbmem.memory: groups must be an integer in [1, 2]", 0);
    free(mem);
}
END_TEST

/* ---- layers against direct reference implementations ---- */

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[4];
    float *data; /* filled by parse_layers when NULL */
} ltensor;

/* Parse layer list list_json on input shape `in` with tensors ts[0 .. nt) (random where their data
 * is NULL, kept in ts) into *seq and its file *f (the caller frees both); asserts success. */
static void parse_layers(const char *list_json, nets_shape in, ltensor *ts, int nt, nets_seq *seq,
                         sft_file *f)
{
    sft_input inp[16] = {{0}};
    for (int i = 0; i < nt; i++) {
        long count = 1;
        for (int d = 0; d < ts[i].ndim; d++)
            count *= ts[i].shape[d];
        if (!ts[i].data)
            ts[i].data = randf(count, 1000 + (uint64_t)i * 7, 0.4);
        inp[i] = (sft_input){ts[i].name, ts[i].ndim, ts[i].shape, ts[i].data};
    }
    unsigned char *buf;
    size_t len;
    vbm_error err;
    ck_assert_msg(sft_build(inp, (size_t)nt, NULL, 0, &buf, &len, &err) == VBM_OK, "%s", err.msg);
    ck_assert_msg(sft_parse(buf, len, f, &err) == VBM_OK, "%s", err.msg);
    free(buf);
    json_error_t jerr;
    json_t *list = json_loads(list_json, 0, &jerr);
    ck_assert_msg(list != NULL, "test bug: %s", jerr.text);
    ck_assert_msg(nets_seq_parse(list, "test", in, f, seq, &err) == VBM_OK, "%s", err.msg);
    json_decref(list);
    for (size_t i = 0; i < f->n_tensors; i++)
        ck_assert_msg(f->tensors[i].used, "tensor %s unused", f->tensors[i].name);
}

/* Run a layer list (JSON) on n samples x (NCHW), through the real parser and
 * executor; returns the output (caller frees) and its shape. Tensors with NULL
 * data get random values (kept in ts[i].data for the reference). */
static float *run_layers(const char *list_json, nets_shape in, ltensor *ts, int nt, long n,
                         const float *x, nets_shape *out_shape, int use_ws)
{
    vbm_error err;
    nets_seq seq;
    sft_file f;
    parse_layers(list_json, in, ts, nt, &seq, &f);
    *out_shape = seq.out;
    float *y = malloc(sizeof(float) * n * nets_shape_size(seq.out));
    float *ws =
        use_ws ? malloc(sizeof(float) * nets_seq_workspace(&seq, n, NETS_PATH_AUTO, 3)) : NULL;
    ck_assert_msg(nets_seq_run(&seq, n, x, y, ws, use_ws ? 3 : 1, NETS_PATH_AUTO, &err) == VBM_OK,
                  "%s", err.msg);
    free(ws);
    nets_seq_free(&seq);
    sft_free(&f);
    return y;
}

static void assert_close(const float *got, const double *want, long len, double tol,
                         const char *what)
{
    for (long i = 0; i < len; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= tol * (1.0 + fabs(want[i])),
                      "%s: element %ld is %.7g, want %.7g", what, i, got[i], want[i]);
}

/* Direct convolution, NCHW, padding (pt, pl) before. */
static void ref_conv(const float *x, const float *w, const float *b, long n, int cin, int H, int W,
                     int cout, int k, int s, int pt, int pl, int Ho, int Wo, double *y)
{
    for (long i = 0; i < n; i++)
        for (int co = 0; co < cout; co++)
            for (int oy = 0; oy < Ho; oy++)
                for (int ox = 0; ox < Wo; ox++) {
                    double acc = b[co];
                    for (int ci = 0; ci < cin; ci++)
                        for (int ky = 0; ky < k; ky++)
                            for (int kx = 0; kx < k; kx++) {
                                int iy = oy * s + ky - pt, ix = ox * s + kx - pl;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                                    continue;
                                acc += (double)w[((co * cin + ci) * k + ky) * k + kx]
                                       * x[((i * cin + ci) * H + iy) * W + ix];
                            }
                    y[((i * cout + co) * Ho + oy) * Wo + ox] = acc;
                }
}

static void check_conv(int cin, int H, int W, int cout, int k, int s, int same, long n)
{
    int Ho, Wo, pt = 0, pl = 0;
    if (same) {
        Ho = (H + s - 1) / s;
        Wo = (W + s - 1) / s;
        int ph = (Ho - 1) * s + k - H, pw = (Wo - 1) * s + k - W;
        pt = ph > 0 ? ph / 2 : 0;
        pl = pw > 0 ? pw / 2 : 0;
    } else {
        Ho = (H - k) / s + 1;
        Wo = (W - k) / s + 1;
    }
    char list[256];
    snprintf(list, sizeof list,
             "[{\"type\":\"conv2d\",\"name\":\"c\",\"in\":%d,\"out\":%d,\"kernel\":%d,\"stride\":%"
             "d,\"padding\":\"%s\"}]",
             cin, cout, k, s, same ? "same" : "valid");
    ltensor ts[2] = {{"c.weight", 4, {cout, cin, k, k}, NULL}, {"c.bias", 1, {cout}, NULL}};
    float *x = randf(n * cin * H * W, 77, 1.0);
    nets_shape os;
    float *y = run_layers(list, (nets_shape){3, cin, H, W}, ts, 2, n, x, &os, (int)(n & 1));
    ck_assert_msg(os.c == cout && os.h == Ho && os.w == Wo,
                  "conv output shape [%d,%d,%d], want [%d,%d,%d]", os.c, os.h, os.w, cout, Ho, Wo);
    double *ref = malloc(sizeof(double) * n * cout * Ho * Wo);
    ref_conv(x, ts[0].data, ts[1].data, n, cin, H, W, cout, k, s, pt, pl, Ho, Wo, ref);
    char what[128];
    snprintf(what, sizeof what, "conv2d in %d %dx%d out %d k %d s %d %s", cin, H, W, cout, k, s,
             same ? "same" : "valid");
    assert_close(y, ref, n * cout * Ho * Wo, 1e-5, what);
    free(ref);
    free(y);
    free(x);
    free(ts[0].data);
    free(ts[1].data);
}

START_TEST(test_conv2d)
{
    check_conv(3, 7, 9, 4, 3, 1, 0, 3);
    check_conv(3, 7, 9, 4, 3, 1, 1, 3);
    check_conv(2, 8, 8, 3, 4, 2, 1, 2); /* even kernel, stride 2: padding 1 before, 2 after */
    check_conv(2, 9, 7, 3, 4, 2, 1, 2);
    check_conv(2, 9, 7, 3, 4, 2, 0, 2);
    check_conv(2, 10, 11, 5, 5, 3, 1, 3);
    check_conv(2, 10, 11, 5, 5, 3, 0, 1);
    check_conv(4, 6, 6, 8, 1, 1, 1, 3); /* pointwise: one GEMM over the batch */
    check_conv(4, 6, 5, 8, 1, 1, 0, 2);
    check_conv(3, 5, 5, 2, 1, 2, 0, 3);   /* 1x1 with stride */
    check_conv(1, 4, 4, 2, 5, 1, 1, 2);   /* kernel larger than the image */
    check_conv(2, 48, 40, 3, 3, 1, 1, 3); /* several im2col chunks */
    check_conv(1, 1, 1, 2, 3, 2, 1, 2);
}
END_TEST

/* Shapes that reach each mode of the AVX-512 engine (on other CPUs they check
 * the im2col path again): stride-2 convs with output rows of 9 and more (input
 * split into even and odd columns), the flat mode of stride-1 'same' and 1x1
 * convs at widths from 1 to 40 (panels across rows and images, 1-3 row runs per
 * 16 lanes), channel counts around the 16-lane and 8-row tile edges, and tiny
 * images; on the AVX2 engine, the packing of stride-2 runs from even lanes. */
START_TEST(test_conv2d_engine_paths)
{
    check_conv(1, 28, 28, 32, 4, 2, 0, 5);
    check_conv(3, 32, 32, 8, 4, 2, 0, 3);
    check_conv(4, 13, 13, 8, 4, 2, 0, 3);
    check_conv(5, 15, 15, 9, 4, 2, 0, 2);
    /* stride 2, an even kernel, no padding, the output at least 3/4 of the input's phases: the
     * AVX2 engine on the four phases (the first two above too), with odd heights and widths (a
     * phase one row or column short), kernels of 2, 6 and 8 and a bias on every channel */
    check_conv(2, 29, 31, 5, 4, 2, 0, 3);
    check_conv(3, 16, 17, 6, 2, 2, 0, 2);
    check_conv(2, 40, 41, 4, 6, 2, 0, 2);
    check_conv(1, 60, 61, 3, 8, 2, 0, 1);
    /* stride 2, rows of 5 or more: the AVX2 engine's even-lane runs (as the 1- to 3-channel
     * shapes above), with padding on both sides and an odd kernel */
    check_conv(6, 16, 14, 3, 4, 2, 1, 2);
    check_conv(4, 11, 12, 5, 3, 2, 1, 3);
    check_conv(2, 15, 17, 3, 4, 2, 1, 3);
    check_conv(2, 16, 20, 3, 4, 2, 1, 3);
    check_conv(3, 13, 11, 5, 3, 2, 1, 2);
    check_conv(3, 21, 19, 4, 3, 2, 0, 3);
    check_conv(2, 64, 66, 3, 4, 2, 1, 2);
    check_conv(2, 66, 64, 3, 3, 2, 0, 2);
    check_conv(4, 13, 13, 9, 3, 1, 1, 5);
    check_conv(3, 2, 2, 8, 3, 1, 1, 7);
    check_conv(3, 1, 1, 8, 3, 1, 1, 7);
    check_conv(3, 5, 5, 17, 3, 1, 1, 3);
    check_conv(2, 40, 37, 3, 3, 1, 1, 2);
    check_conv(2, 6, 6, 3, 5, 1, 1, 3);
    check_conv(2, 7, 9, 3, 4, 1, 1, 3);
    check_conv(3, 9, 9, 4, 1, 1, 1, 3);
    check_conv(2, 3, 40, 3, 3, 1, 1, 4);
    check_conv(2, 11, 3, 5, 5, 1, 1, 4);
    /* 1 x 1 to 1 or 2 channels: the AVX2 engine's pointwise path, with 32-pixel steps whole, cut
     * short (105 and 7 pixels) and over several items (1,568 pixels) */
    check_conv(3, 5, 7, 1, 1, 1, 0, 3);
    check_conv(5, 6, 6, 2, 1, 1, 1, 5);
    check_conv(4, 1, 1, 2, 1, 1, 0, 7);
    check_conv(32, 28, 28, 2, 1, 1, 1, 2);
    check_conv(3, 4, 4, 3, 1, 1, 0, 3);
}
END_TEST

static void check_convt(int cin, int H, int W, int cout, int k, int s, int same, long n)
{
    int Hf = (H - 1) * s + k, Wf = (W - 1) * s + k, Ho, Wo, off = 0;
    if (same) {
        Ho = H * s;
        Wo = W * s;
        off = k > s ? (k - s) / 2 : 0;
    } else {
        Ho = Hf;
        Wo = Wf;
    }
    char list[256];
    snprintf(list, sizeof list,
             "[{\"type\":\"conv_transpose2d\",\"name\":\"t\",\"in\":%d,\"out\":%d,\"kernel\":%d,"
             "\"stride\":%d,"
             "\"padding\":\"%s\"}]",
             cin, cout, k, s, same ? "same" : "valid");
    ltensor ts[2] = {{"t.weight", 4, {cin, cout, k, k}, NULL}, {"t.bias", 1, {cout}, NULL}};
    float *x = randf(n * cin * H * W, 78, 1.0);
    nets_shape os;
    float *y = run_layers(list, (nets_shape){3, cin, H, W}, ts, 2, n, x, &os, 1);
    ck_assert_msg(os.c == cout && os.h == Ho && os.w == Wo,
                  "convT output shape [%d,%d,%d], want [%d,%d,%d]", os.c, os.h, os.w, cout, Ho, Wo);
    /* the full transposed convolution by scattering, then the kept window */
    double *full = calloc((size_t)n * cout * Hf * Wf, sizeof(double)),
           *ref = malloc(sizeof(double) * n * cout * Ho * Wo);
    const float *w = ts[0].data, *b = ts[1].data;
    for (long i = 0; i < n; i++)
        for (int ci = 0; ci < cin; ci++)
            for (int iy = 0; iy < H; iy++)
                for (int ix = 0; ix < W; ix++)
                    for (int co = 0; co < cout; co++)
                        for (int ky = 0; ky < k; ky++)
                            for (int kx = 0; kx < k; kx++)
                                full[((i * cout + co) * Hf + iy * s + ky) * Wf + ix * s + kx] +=
                                    (double)x[((i * cin + ci) * H + iy) * W + ix]
                                    * w[((ci * cout + co) * k + ky) * k + kx];
    for (long i = 0; i < n; i++)
        for (int co = 0; co < cout; co++)
            for (int oy = 0; oy < Ho; oy++)
                for (int ox = 0; ox < Wo; ox++) {
                    int fy = oy + off, fx = ox + off;
                    double v =
                        (fy < Hf && fx < Wf) ? full[((i * cout + co) * Hf + fy) * Wf + fx] : 0.0;
                    ref[((i * cout + co) * Ho + oy) * Wo + ox] = v + b[co];
                }
    char what[128];
    snprintf(what, sizeof what, "conv_transpose2d in %d %dx%d out %d k %d s %d %s", cin, H, W, cout,
             k, s, same ? "same" : "valid");
    assert_close(y, ref, n * cout * Ho * Wo, 1e-5, what);
    free(full);
    free(ref);
    free(y);
    free(x);
    free(ts[0].data);
    free(ts[1].data);
}

/* A dense layer of cin -> cout features on n vectors, followed by swish when asked, against a
 * double-precision reference. */
static void check_dense(int cin, int cout, long n, int swish)
{
    char list[256];
    snprintf(list, sizeof list, "[{\"type\":\"dense\",\"name\":\"d\",\"in\":%d,\"out\":%d}%s]", cin,
             cout, swish ? ",{\"type\":\"swish\"}" : "");
    ltensor ts[2] = {{"d.weight", 2, {cout, cin}, NULL}, {"d.bias", 1, {cout}, NULL}};
    float *x = randf(n * cin, 81, 1.0);
    nets_shape os;
    float *y = run_layers(list, (nets_shape){1, cin, 1, 1}, ts, 2, n, x, &os, (int)(n & 1));
    ck_assert(os.rank == 1 && os.c == cout);
    double *ref = malloc(sizeof(double) * n * cout);
    for (long i = 0; i < n; i++)
        for (int o = 0; o < cout; o++) {
            double acc = ts[1].data[o];
            for (int j = 0; j < cin; j++)
                acc += (double)ts[0].data[o * cin + j] * x[i * cin + j];
            ref[i * cout + o] = swish ? acc / (1.0 + exp(-acc)) : acc;
        }
    char what[64];
    snprintf(what, sizeof what, "dense %d -> %d, %ld vectors", cin, cout, n);
    assert_close(y, ref, n * cout, 1e-5, what);
    free(ref);
    free(y);
    free(x);
    free(ts[0].data);
    free(ts[1].data);
}

/* Layers the AVX2 engine runs by output pixels (a multiple of 32 output channels; a conv2d with
 * output rows shorter than 8 and no padding, or a dense layer): 3 points a step with 1 or 2 left
 * over, items of 24 points, 1 and 3 threads, 32 to 128 channels in blocks of 32, stride 1 and 2,
 * even and odd kernels, and a fused swish. On other paths they check those paths again. */
START_TEST(test_by_pixels)
{
    check_conv(8, 13, 13, 32, 4, 2, 0,
               5); /* enc.down1 of the bundled encoder with 8 input channels */
    check_conv(5, 6, 6, 64, 4, 2, 0, 2);
    check_conv(3, 9, 11, 32, 3, 2, 0, 4);
    check_conv(2, 7, 7, 96, 2, 1, 0, 3);
    check_conv(4, 5, 5, 32, 4, 2, 0, 7); /* 1 x 1 outputs */
    check_dense(32, 128, 22, 0);
    check_dense(64, 32, 1, 1);
    check_dense(7, 96, 29, 1);
}
END_TEST

/* Parse one layer (list_json on input `in`, weight tensor `wname` of shape ws[0 .. wd), bias of
 * cout) and assert whether it holds the AVX2 engine's copy of its weights (L->wp): made for
 * `avx2_copy` layers where that engine runs on this CPU, never for the others. */
static void check_copy(const char *list_json, nets_shape in, const char *wname, int wd,
                       const int *ws, int cout, int avx2_copy)
{
    ltensor ts[2] = {{wname, wd, {0}, NULL}, {"l.bias", 1, {cout}, NULL}};
    for (int d = 0; d < wd; d++)
        ts[0].shape[d] = ws[d];
    nets_seq seq;
    sft_file f;
    parse_layers(list_json, in, ts, 2, &seq, &f);
    int want = avx2_copy && kern_avx2_available();
    ck_assert_msg((seq.layers[0].wp != NULL) == want, "%s: AVX2 copy %s, want %s", list_json,
                  seq.layers[0].wp ? "made" : "not made", want ? "made" : "none");
    nets_seq_free(&seq);
    sft_free(&f);
    free(ts[0].data);
    free(ts[1].data);
}

/* The layers that the AVX2 engine runs from a copy of their weights get it at load (without it
 * they would run correctly on packed panels, so the tests of those paths cannot tell). */
START_TEST(test_avx2_copies)
{
    const char *conv = "[{\"type\":\"conv2d\",\"name\":\"l\",\"in\":%d,\"out\":%d,\"kernel\":%d,"
                       "\"stride\":%d,\"padding\":\"%s\"}]";
    char list[256];
    snprintf(list, sizeof list, conv, 1, 32, 4, 2, "valid"); /* on phases: 13 x 13 of 14 x 14 */
    check_copy(list, (nets_shape){3, 1, 28, 28}, "l.weight", 4, (int[]){32, 1, 4, 4}, 32, 1);
    snprintf(list, sizeof list, conv, 8, 32, 4, 2, "valid"); /* by pixels: 5 x 5 out */
    check_copy(list, (nets_shape){3, 8, 13, 13}, "l.weight", 4, (int[]){32, 8, 4, 4}, 32, 1);
    snprintf(list, sizeof list, conv, 8, 32, 3, 1, "same"); /* padded: packed panels */
    check_copy(list, (nets_shape){3, 8, 13, 13}, "l.weight", 4, (int[]){32, 8, 3, 3}, 32, 0);
    snprintf(list, sizeof list, conv, 8, 24, 4, 2, "valid"); /* 24 channels: packed panels */
    check_copy(list, (nets_shape){3, 8, 13, 13}, "l.weight", 4, (int[]){24, 8, 4, 4}, 24, 0);
    const char *dense = "[{\"type\":\"dense\",\"name\":\"l\",\"in\":%d,\"out\":%d}]";
    snprintf(list, sizeof list, dense, 64, 32);
    check_copy(list, (nets_shape){1, 64, 1, 1}, "l.weight", 2, (int[]){32, 64}, 32, 1);
    snprintf(list, sizeof list, dense, 64, 30);
    check_copy(list, (nets_shape){1, 64, 1, 1}, "l.weight", 2, (int[]){30, 64}, 30, 0);
}
END_TEST

START_TEST(test_conv_transpose2d)
{
    check_convt(3, 4, 5, 2, 4, 2, 1, 2);
    check_convt(3, 4, 5, 2, 4, 2, 0, 2);
    check_convt(2, 3, 3, 3, 3, 2, 1, 3); /* k - stride odd */
    check_convt(2, 5, 4, 2, 3, 1, 1, 2);
    check_convt(2, 5, 4, 2, 3, 1, 0, 1);
    check_convt(2, 3, 3, 2, 1, 2, 1, 2); /* kernel smaller than the stride */
    check_convt(2, 3, 3, 2, 2, 3, 0, 2);
    check_convt(2, 3, 4, 3, 5, 3, 1, 2);
    check_convt(4, 40, 40, 2, 4, 2, 1, 3); /* several chunks */
    /* odd kernel, stride 2, rows of 9 to 11 phase columns: the phases' weights differ in shape
     * (they do not pair in the AVX2 engine, whose runs of 8 are then blended into the row) */
    check_convt(2, 10, 11, 3, 3, 2, 1, 2);
    check_convt(2, 9, 10, 3, 3, 2, 0, 2);
}
END_TEST

static void check_gn(nets_shape in, int groups, long n, int act_relu)
{
    int C = in.c;
    long hw = (long)in.h * in.w;
    char list[256];
    snprintf(
        list, sizeof list,
        "[{\"type\":\"group_norm\",\"name\":\"g\",\"groups\":%d,\"channels\":%d,\"eps\":0.001}%s]",
        groups, C, act_relu ? ",{\"type\":\"relu\"}" : "");
    ltensor ts[2] = {{"g.weight", 1, {C}, NULL}, {"g.bias", 1, {C}, NULL}};
    float *x = randf(n * C * hw, 79, 2.0);
    for (long i = 0; i < n * C * hw; i++)
        x[i] += 3.0f; /* a mean far from 0 */
    nets_shape os;
    float *y = run_layers(list, in, ts, 2, n, x, &os, (int)(n % 2 == 0));
    double *ref = malloc(sizeof(double) * n * C * hw);
    int cpg = C / groups;
    for (long i = 0; i < n; i++)
        for (int g = 0; g < groups; g++) {
            double s = 0, q = 0, cnt = (double)cpg * hw;
            for (int c = g * cpg; c < (g + 1) * cpg; c++)
                for (long p = 0; p < hw; p++)
                    s += x[(i * C + c) * hw + p];
            double mean = s / cnt;
            for (int c = g * cpg; c < (g + 1) * cpg; c++)
                for (long p = 0; p < hw; p++)
                    q += pow(x[(i * C + c) * hw + p] - mean, 2);
            double rstd = 1.0 / sqrt(q / cnt + 0.001);
            for (int c = g * cpg; c < (g + 1) * cpg; c++)
                for (long p = 0; p < hw; p++) {
                    double v =
                        (x[(i * C + c) * hw + p] - mean) * rstd * ts[0].data[c] + ts[1].data[c];
                    ref[(i * C + c) * hw + p] = act_relu && v < 0 ? 0.0 : v;
                }
        }
    assert_close(y, ref, n * C * hw, 2e-5, "group_norm");
    free(ref);
    free(y);
    free(x);
    free(ts[0].data);
    free(ts[1].data);
}

START_TEST(test_group_norm)
{
    nets_shape img = {3, 6, 5, 4}, vec = {1, 8, 1, 1};
    check_gn(img, 1, 3, 0);
    check_gn(img, 2, 3, 1);
    check_gn(img, 3, 2, 0);
    check_gn(img, 6, 2, 1);
    check_gn(vec, 4, 3, 0);
    check_gn(vec, 8, 2, 1);
    nets_shape big = {3, 16, 32, 32}; /* large enough to be split over threads */
    check_gn(big, 4, 4, 1);
    /* 1 x 1 images: on the AVX2 engine's path the batch's images in the lanes, 8 at a time, with
     * fewer than 8 left, and groups of 1 to 6 channels (the last of 4 at a time partial) */
    nets_shape pts = {3, 8, 1, 1}, pts6 = {3, 12, 1, 1};
    check_gn(pts, 4, 3, 0);
    check_gn(pts, 8, 19, 1);
    check_gn(pts, 2, 16, 0);
    check_gn(pts6, 2, 21, 1);
}
END_TEST

static double sigm(double v)
{
    return 1.0 / (1.0 + exp(-v));
}

/* [residual [relu, (residual) conv k x k, 2 -> 2 channels]], swish on n inputs x of shape in
 * (2 channels): nested, x + (y + conv(y)), else x + conv(y), with y = relu(x). With k = 1 the AVX2
 * engine runs the convolution without panels (kern_avx2_pointwise), here with the block's input
 * added. */
static void check_residual_relu_conv(nets_shape in, const float *x, long n, int k, int nested)
{
    long sz = nets_shape_size(in);
    char conv[160], list[320];
    snprintf(conv, sizeof conv,
             "{\"type\":\"conv2d\",\"name\":\"c\",\"in\":2,\"out\":2,\"kernel\":%d,"
             "\"stride\":1,\"padding\":\"same\"}",
             k);
    snprintf(list, sizeof list,
             nested ? "[{\"type\":\"residual\",\"body\":[{\"type\":\"relu\"},{\"type\":"
                      "\"residual\",\"body\":[%s]}]},{\"type\":\"swish\"}]"
                    : "[{\"type\":\"residual\",\"body\":[{\"type\":\"relu\"},%s]},"
                      "{\"type\":\"swish\"}]",
             conv);
    ltensor ts[2] = {{"c.weight", 4, {2, 2, k, k}, NULL}, {"c.bias", 1, {2}, NULL}};
    nets_shape os;
    float *y = run_layers(list, in, ts, 2, n, x, &os, 1);
    double *r = malloc(sizeof(double) * n * sz), *cv = malloc(sizeof(double) * n * sz);
    float *rx = calloc((size_t)(n * sz), sizeof(float));
    for (long i = 0; i < n * sz; i++)
        rx[i] = x[i] > 0 ? x[i] : 0.0f;
    ref_conv(rx, ts[0].data, ts[1].data, n, 2, in.h, in.w, 2, k, 1, (k - 1) / 2, (k - 1) / 2, in.h,
             in.w, cv);
    for (long i = 0; i < n * sz; i++) {
        double u = x[i] + (nested ? rx[i] : 0.0) + cv[i];
        r[i] = u * sigm(u);
    }
    assert_close(y, r, n * sz, 1e-5, nested ? "nested residual" : "residual 1x1");
    free(r);
    free(cv);
    free(rx);
    free(y);
    free(ts[0].data);
    free(ts[1].data);
}

START_TEST(test_elementwise_and_shapes)
{
    /* activations, unfused (in place) and after a protected residual input */
    long n = 3;
    nets_shape in = {3, 2, 4, 5};
    long sz = 40;
    float *x = randf(n * sz, 80, 3.0);
    const char *acts[] = {"relu", "swish", "sigmoid"};
    for (int a = 0; a < 3; a++) {
        char list[512];
        /* x -> act(x), and x -> x + act(x) (the body's activation must not touch x) */
        snprintf(list, sizeof list,
                 "[{\"type\":\"residual\",\"body\":[{\"type\":\"%s\"}]},{\"type\":\"%s\"}]",
                 acts[a], acts[a]);
        nets_shape os;
        float *y = run_layers(list, in, NULL, 0, n, x, &os, 0);
        double *ref = malloc(sizeof(double) * n * sz);
        for (long i = 0; i < n * sz; i++) {
            double v = x[i];
            double f = a == 0 ? (v > 0 ? v : 0) : a == 1 ? v * sigm(v) : sigm(v);
            double u = v + f;
            ref[i] = a == 0 ? (u > 0 ? u : 0) : a == 1 ? u * sigm(u) : sigm(u);
        }
        assert_close(y, ref, n * sz, 1e-6, acts[a]);
        free(y);
        free(ref);
    }
    /* flatten -> dense + sigmoid (fused) */
    {
        ltensor ts[2] = {{"d.weight", 2, {3, 40}, NULL}, {"d.bias", 1, {3}, NULL}};
        nets_shape os;
        float *y = run_layers(
            "[{\"type\":\"flatten\"},{\"type\":\"dense\",\"name\":\"d\",\"in\":40,\"out\":3},"
            "{\"type\":\"sigmoid\"}]",
            in, ts, 2, n, x, &os, 1);
        ck_assert(os.rank == 1 && os.c == 3);
        double ref[9];
        for (long i = 0; i < n; i++)
            for (int o = 0; o < 3; o++) {
                double acc = ts[1].data[o];
                for (int j = 0; j < 40; j++)
                    acc += (double)ts[0].data[o * 40 + j] * x[i * 40 + j];
                ref[i * 3 + o] = sigm(acc);
            }
        assert_close(y, ref, 9, 1e-6, "dense");
        free(y);
        free(ts[0].data);
        free(ts[1].data);
    }
    /* vector -> reshape -> center crop (odd margins) -> flatten */
    {
        nets_shape os;
        float *y = run_layers(
            "[{\"type\":\"reshape\",\"shape\":[2,4,5]},{\"type\":\"center_crop\",\"height\":3,"
            "\"width\":2},{\"type\":\"flatten\"}]",
            (nets_shape){1, 40, 1, 1}, NULL, 0, n, x, &os, 0);
        ck_assert(os.rank == 1 && os.c == 12);
        double ref[36];
        for (long i = 0; i < n; i++)
            for (int c = 0; c < 2; c++)
                for (int r = 0; r < 3; r++)
                    for (int q = 0; q < 2; q++)
                        ref[i * 12 + (c * 3 + r) * 2 + q] = x[i * 40 + (c * 4 + r) * 5 + q + 1];
        assert_close(y, ref, 36, 0.0, "reshape/crop/flatten");
        free(y);
    }
    check_residual_relu_conv(in, x, n, 3, 1);
    check_residual_relu_conv(in, x, n, 1, 0);
    /* an empty residual body doubles */
    {
        nets_shape os;
        float *y = run_layers("[{\"type\":\"residual\",\"body\":[]}]", in, NULL, 0, n, x, &os, 0);
        for (long i = 0; i < n * sz; i++)
            ck_assert(y[i] == 2.0f * x[i]);
        free(y);
    }
    free(x);
}
END_TEST

/* ---- sampling and log-likelihood ---- */

START_TEST(test_sample_and_loglik)
{
    mspec s;
    spec_base(&s, NULL);
    size_t len;
    unsigned char *buf = spec_build(&s, &len);
    nets_model *m;
    vbm_error err;
    ck_assert_msg(nets_model_load_buffer(buf, len, &m, &err) == VBM_OK, "%s", err.msg);
    free(buf);
    long n = 2000, obs = 36, tot = n * obs;
    float *mean = malloc(sizeof(float) * tot), *scale = malloc(sizeof(float) * tot),
          *out = malloc(sizeof(float) * tot);
    for (long i = 0; i < tot; i++) {
        mean[i] = 0.5f;
        scale[i] = 0.1f;
    }
    rng_t r;
    rng_seed(&r, 3);
    nets_sample_pixels(m, mean, scale, n, out, &r);
    double s1 = 0, s2 = 0;
    for (long i = 0; i < tot; i++) {
        ck_assert(out[i] >= 0.0f && out[i] <= 1.0f);
        s1 += out[i];
        s2 += (out[i] - 0.5) * (out[i] - 0.5);
    }
    ck_assert_msg(fabs(s1 / tot - 0.5) < 0.002 && fabs(sqrt(s2 / tot) - 0.1) < 0.002,
                  "moments %g %g", s1 / tot, sqrt(s2 / tot));
    float *again = malloc(sizeof(float) * tot);
    rng_seed(&r, 3);
    nets_sample_pixels(m, mean, scale, n, again, &r);
    ck_assert(memcmp(out, again, sizeof(float) * tot) == 0);
    mean[0] = 1.7f;
    mean[1] = -0.2f;
    nets_sample_pixels(m, mean, NULL, 1, out, &r);
    ck_assert(out[0] == 1.0f && out[1] == 0.0f && out[2] == 0.5f);
    /* gaussian log-likelihood */
    double ll[2];
    float x[72];
    for (int i = 0; i < 72; i++)
        x[i] = (float)(i % 7) / 7.0f;
    mean[0] = 0.5f;
    mean[1] = 0.5f;
    nets_loglik(m, x, mean, scale, 2, ll);
    for (int i = 0; i < 2; i++) {
        double want = 0;
        for (int j = 0; j < 36; j++) {
            double d = (x[i * 36 + j] - 0.5) / (double)0.1f;
            want += -0.91893853320467274178 - log((double)0.1f) - 0.5 * d * d;
        }
        ck_assert_msg(fabs(ll[i] - want) < 1e-9 * fabs(want), "loglik %g want %g", ll[i], want);
    }
    nets_model_free(m);
    free(mean);
    free(scale);
    free(out);
    free(again);
}
END_TEST

/* ---- parity with PyTorch ---- */

static const char *data_dir(void)
{
    const char *d = getenv("VBMEM_TEST_DATA");
    return d && d[0] ? d : "tests/data";
}

static nets_model *load_golden(const char *stem, sft_file *io)
{
    char path[1024];
    vbm_error err;
    snprintf(path, sizeof path, "%s/%s.safetensors", data_dir(), stem);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "golden file %s is missing: run /usr/bin/python3 train/golden_nets.py",
                  path);
    fclose(f);
    nets_model *m;
    ck_assert_msg(nets_model_load(path, &m, &err) == VBM_OK, "%s", err.msg);
    snprintf(path, sizeof path, "%s/%s_io.safetensors", data_dir(), stem);
    size_t len;
    unsigned char *buf = read_all(path, &len);
    ck_assert_msg(buf != NULL,
                  "golden file %s is missing: run /usr/bin/python3 train/golden_nets.py", path);
    ck_assert_msg(sft_parse(buf, len, io, &err) == 0, "%s: %s", path, err.msg);
    free(buf);
    return m;
}

static const float *io_tensor(const sft_file *io, const char *name, long count)
{
    const sft_tensor *t = sft_find(io, name);
    ck_assert_msg(t != NULL, "golden io has no tensor %s", name);
    ck_assert_msg((long)t->count == count, "golden io tensor %s has %zu values, expected %ld", name,
                  t->count, count);
    return t->data;
}

static void check_parity(const char *stem)
{
    sft_file io;
    nets_model *m = load_golden(stem, &io);
    const nets_info *in = nets_model_info(m);
    const sft_tensor *xt = sft_find(&io, "x");
    ck_assert(xt && xt->ndim == 4);
    long n = (long)xt->shape[0], C = in->code_size,
         obs = (long)in->channels * in->height * in->width;
    const float *x = io_tensor(&io, "x", n * obs), *mu_t = io_tensor(&io, "mu", n * C),
                *ls_t = io_tensor(&io, "log_sigma", n * C), *z_t = io_tensor(&io, "z", n * C),
                *mean_t = io_tensor(&io, "mean", n * obs), *ll_t = io_tensor(&io, "loglik", n);
    const float *scale_t =
        in->likelihood == NETS_GAUSSIAN ? io_tensor(&io, "scale", n * obs) : NULL;
    double *mu = malloc(sizeof(double) * n * C), *s2 = malloc(sizeof(double) * n * C),
           *z = malloc(sizeof(double) * n * C);
    vbm_error err;
    ck_assert_msg(nets_encode(m, x, n, mu, s2, &err) == VBM_OK, "%s", err.msg);
    double worst = 0;
    for (long i = 0; i < n * C; i++) {
        double d1 = fabs(mu[i] - mu_t[i]), d2 = fabs(0.5 * log(s2[i]) - ls_t[i]);
        ck_assert_msg(d1 <= 1e-4, "%s: mu[%ld] = %.7g, PyTorch %.7g", stem, i, mu[i], mu_t[i]);
        ck_assert_msg(d2 <= 1e-4, "%s: log sigma[%ld] = %.7g, PyTorch %.7g", stem, i,
                      0.5 * log(s2[i]), ls_t[i]);
        worst = fmax(worst, fmax(d1, d2));
    }
    for (long i = 0; i < n * C; i++)
        z[i] = z_t[i];
    float *mean = malloc(sizeof(float) * n * obs), *scale = malloc(sizeof(float) * n * obs);
    ck_assert_msg(nets_decode(m, z, n, mean, scale, &err) == VBM_OK, "%s", err.msg);
    for (long i = 0; i < n * obs; i++) {
        ck_assert_msg(fabs(mean[i] - mean_t[i]) <= 1e-4, "%s: mean[%ld] = %.7g, PyTorch %.7g", stem,
                      i, mean[i], mean_t[i]);
        worst = fmax(worst, fabs(mean[i] - mean_t[i]));
        if (scale_t) {
            ck_assert_msg(fabs(scale[i] - scale_t[i]) <= 1e-4,
                          "%s: scale[%ld] = %.7g, PyTorch %.7g", stem, i, scale[i], scale_t[i]);
            worst = fmax(worst, fabs(scale[i] - scale_t[i]));
        }
    }
    /* log-likelihood of x under PyTorch's parameters (stored as float32) */
    double *ll = malloc(sizeof(double) * n);
    nets_loglik(m, x, mean_t, scale_t, n, ll);
    for (long i = 0; i < n; i++)
        ck_assert_msg(fabs(ll[i] - ll_t[i]) <= 1e-6 * fabs(ll_t[i]) + 1e-4,
                      "%s: loglik[%ld] = %.9g, PyTorch %.9g", stem, i, ll[i], ll_t[i]);
    /* the same with the work between GEMMs split over 3 threads: identical results */
    nets_workspace *ws = nets_workspace_new();
    nets_workspace_set_threads(ws, 3);
    double *mu3 = malloc(sizeof(double) * n * C), *s23 = malloc(sizeof(double) * n * C);
    ck_assert_msg(nets_encode_ws(m, ws, x, n, mu3, s23, &err) == VBM_OK, "%s", err.msg);
    ck_assert(memcmp(mu3, mu, sizeof(double) * n * C) == 0
              && memcmp(s23, s2, sizeof(double) * n * C) == 0);
    ck_assert_msg(nets_decode_ws(m, ws, z, n, scale, NULL, &err) == VBM_OK, "%s", err.msg);
    ck_assert(memcmp(scale, mean, sizeof(float) * n * obs) == 0);
    free(mu3);
    free(s23);
    nets_workspace_set_threads(ws, 0);
    /* the same through a reused workspace, twice, frame by frame */
    double mu1[64], s21[64];
    ck_assert(C <= 64);
    for (long i = 0; i < n; i++) {
        ck_assert_msg(nets_encode_ws(m, ws, x + i * obs, 1, mu1, s21, &err) == VBM_OK, "%s",
                      err.msg);
        for (long c = 0; c < C; c++)
            ck_assert(fabs(mu1[c] - mu[i * C + c]) <= 1e-5);
    }
    ck_assert_msg(nets_decode_ws(m, ws, z, n, scale, NULL, &err) == VBM_OK, "%s", err.msg);
    ck_assert(memcmp(scale, mean, sizeof(float) * n * obs) == 0);
    nets_workspace_free(ws);
    fprintf(stderr, "parity %s: %ld frames, largest difference from PyTorch %.2e\n", stem, n,
            worst);
    free(mu);
    free(s2);
    free(z);
    free(mean);
    free(scale);
    free(ll);
    sft_free(&io);
    nets_model_free(m);
}

START_TEST(test_parity_gaussian)
{
    check_parity("golden_nets");
}
END_TEST

START_TEST(test_parity_bernoulli)
{
    check_parity("golden_nets_bernoulli");
}
END_TEST

/* The trainer's bounded gaussian head: mean = sigmoid(raw), scale = 0.5 sigmoid(raw') + 0.005. */
START_TEST(test_parity_bounded)
{
    check_parity("golden_nets_bounded");
    sft_file io;
    nets_model *m = load_golden("golden_nets_bounded", &io);
    const nets_info *in = nets_model_info(m);
    ck_assert(in->sigmoid_mean == 1);
    ck_assert(in->scale_max == 0.5);
    sft_free(&io);
    nets_model_free(m);
}
END_TEST

/* ---- concurrency: one model, several threads ---- */

typedef struct {
    const nets_model *m;
    const float *x;
    long n;
    double *mu, *s2;
    int rc;
} enc_job;

static void *enc_thread(void *arg)
{
    enc_job *j = arg;
    vbm_error err;
    for (int r = 0; r < 5 && !j->rc; r++)
        j->rc = nets_encode(j->m, j->x, j->n, j->mu, j->s2, &err);
    return NULL;
}

START_TEST(test_threads)
{
    sft_file io;
    nets_model *m = load_golden("golden_nets", &io);
    const nets_info *in = nets_model_info(m);
    long n = 5, C = in->code_size, obs = (long)in->channels * in->height * in->width;
    const float *x = io_tensor(&io, "x", n * obs);
    double mu0[64], s20[64];
    vbm_error err;
    ck_assert(nets_encode(m, x, n, mu0, s20, &err) == 0);
    enum { T = 4 };
    pthread_t th[T];
    enc_job jobs[T];
    double mu[T][64], s2[T][64];
    for (int t = 0; t < T; t++) {
        jobs[t] = (enc_job){m, x, n, mu[t], s2[t], 0};
        pthread_create(&th[t], NULL, enc_thread, &jobs[t]);
    }
    for (int t = 0; t < T; t++) {
        pthread_join(th[t], NULL);
        ck_assert_int_eq(jobs[t].rc, 0);
        ck_assert(memcmp(mu[t], mu0, sizeof(double) * n * C) == 0);
        ck_assert(memcmp(s2[t], s20, sizeof(double) * n * C) == 0);
    }
    sft_free(&io);
    nets_model_free(m);
}
END_TEST

/* Frames split between threads (nets.c: each thread runs its share of the frames through every
 * layer alone): on the engines this process runs (and on the blas path, which splits each
 * layer), 23 frames (shares of 7, 7 and 9, or 11 and 12) give the same bits on 2 and 3 threads
 * as on 1; an output that is not finite is reported for the first such frame, also when it lies
 * in a later share. (oneDNN on several threads is compared in nets-paths-parity: here its
 * OpenMP pool, started on thread stacks glibc cached from test_threads, would leave reports
 * that valgrind's suppression of that pool, which looks for GOMP_parallel, does not match.) */
START_TEST(test_split_frames)
{
    sft_file io;
    nets_model *m = load_golden("golden_nets", &io);
    const nets_info *in = nets_model_info(m);
    long n = 23, C = in->code_size, obs = (long)in->channels * in->height * in->width;
    float *x = randf(n * obs, 11, 1.0), *mean[3], *scale[3];
    double *z = malloc(sizeof(double) * n * C), *mu[3], *s2[3];
    float *zf = randf(n * C, 12, 1.0);
    for (long i = 0; i < n * C; i++)
        z[i] = zf[i];
    for (int t = 0; t < 3; t++) {
        mu[t] = malloc(sizeof(double) * n * C);
        s2[t] = malloc(sizeof(double) * n * C);
        mean[t] = malloc(sizeof(float) * n * obs);
        scale[t] = malloc(sizeof(float) * n * obs);
    }
    const nets_path paths[] = {NETS_PATH_ENGINE, NETS_PATH_ENGINE_AVX2, NETS_PATH_BLAS};
    vbm_error err;
    nets_workspace *ws = nets_workspace_new();
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        if (!nets_path_runs(paths[p]))
            continue;
        ck_assert_int_eq(nets_workspace_set_path(ws, paths[p], &err), VBM_OK);
        for (int t = 0; t < 3; t++) {
            nets_workspace_set_threads(ws, t + 1);
            ck_assert_msg(nets_encode_ws(m, ws, x, n, mu[t], s2[t], &err) == VBM_OK, "%s", err.msg);
            ck_assert_msg(nets_decode_ws(m, ws, z, n, mean[t], scale[t], &err) == VBM_OK, "%s",
                          err.msg);
            ck_assert_msg(memcmp(mu[t], mu[0], sizeof(double) * n * C) == 0
                              && memcmp(s2[t], s2[0], sizeof(double) * n * C) == 0,
                          "%s: codes on %d threads differ from 1 thread's",
                          nets_path_name(paths[p]), t + 1);
            ck_assert_msg(memcmp(mean[t], mean[0], sizeof(float) * n * obs) == 0
                              && memcmp(scale[t], scale[0], sizeof(float) * n * obs) == 0,
                          "%s: decodes on %d threads differ from 1 thread's",
                          nets_path_name(paths[p]), t + 1);
        }
    }
    nets_workspace_free(ws);
    for (int t = 0; t < 3; t++) {
        free(mu[t]);
        free(s2[t]);
        free(mean[t]);
        free(scale[t]);
    }
    free(x);
    free(z);
    free(zf);
    sft_free(&io);
    nets_model_free(m);

    /* weights scaled so that a zero image or code gives finite outputs and any other overflows:
     * images 12 and 19 and codes 9 and 17 overflow (in the second and third shares of 3, the
     * second share of 2): the first of each is reported */
    mspec sp;
    spec_base(&sp, NULL);
    sp.scale[0] = sp.scale[2] = sp.scale[4] = sp.scale[6] = 1e30;
    size_t blen;
    unsigned char *buf = spec_build(&sp, &blen);
    ck_assert_msg(nets_model_load_buffer(buf, blen, &m, &err) == VBM_OK, "%s", err.msg);
    free(buf);
    in = nets_model_info(m);
    C = in->code_size;
    obs = (long)in->channels * in->height * in->width;
    float *xo = calloc((size_t)(n * obs), sizeof(float)), *mo = malloc(sizeof(float) * n * obs),
          *so = malloc(sizeof(float) * n * obs);
    double *zo = calloc((size_t)(n * C), sizeof(double)), *muo = malloc(sizeof(double) * n * C),
           *s2o = malloc(sizeof(double) * n * C);
    for (long j = 0; j < obs; j++)
        xo[12 * obs + j] = xo[19 * obs + j] = 0.5f;
    for (long j = 0; j < C; j++)
        zo[9 * C + j] = zo[17 * C + j] = 1e30;
    ws = nets_workspace_new();
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        if (!nets_path_runs(paths[p]))
            continue;
        ck_assert_int_eq(nets_workspace_set_path(ws, paths[p], &err), VBM_OK);
        for (int t = 1; t <= 3; t++) {
            nets_workspace_set_threads(ws, t);
            ck_assert_int_eq(nets_encode_ws(m, ws, xo, n, muo, s2o, &err), VBM_EINVAL);
            ck_assert_str_eq(err.msg,
                             "nets_encode: the encoder's output for image 12 is not finite");
            ck_assert_int_eq(nets_decode_ws(m, ws, zo, n, mo, so, &err), VBM_EINVAL);
            ck_assert_str_eq(err.msg, "nets_decode: the decoder's output for code 9 is not finite");
        }
    }
    nets_workspace_free(ws);
    free(xo);
    free(mo);
    free(so);
    free(zo);
    free(muo);
    free(s2o);
    nets_model_free(m);
}
END_TEST

/* Whether this CPU has AVX2 and FMA, whatever the environment says (the AVX2 engine's needs,
 * probed here independently of kern_avx2_available). */
static int cpu_avx2_fma(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

/* Which path runs where: names, what this process can run, VBMEM_NETS_PATH's reading and its
 * errors, the default's order (the environment the process started with, else the AVX-512
 * engine where it runs, else the AVX2 engine where it runs, else oneDNN where the build has it,
 * else blas), and nets_workspace_set_path's checks. */
START_TEST(test_paths)
{
    /* the default first: it is probed once, from the environment the process started with */
    const char *start = getenv("VBMEM_NETS_PATH");
    int avx2 = cpu_avx2_fma();
    nets_path expect = kern_available()   ? NETS_PATH_ENGINE
                       : avx2             ? NETS_PATH_ENGINE_AVX2
                       : nets_dnn_built() ? NETS_PATH_ONEDNN
                                          : NETS_PATH_BLAS;
    if (start && strcmp(start, "blas") == 0)
        expect = NETS_PATH_BLAS;
    if (start && strcmp(start, "onednn") == 0 && nets_dnn_built())
        expect = NETS_PATH_ONEDNN;
    if (start && strcmp(start, "engine") == 0 && kern_available())
        expect = NETS_PATH_ENGINE;
    if (start && strcmp(start, "engine-avx2") == 0 && avx2)
        expect = NETS_PATH_ENGINE_AVX2;
    ck_assert_str_eq(nets_path_name(nets_path_default()), nets_path_name(expect));

    ck_assert_str_eq(nets_path_name(NETS_PATH_AUTO), "auto");
    ck_assert_str_eq(nets_path_name(NETS_PATH_ENGINE), "engine");
    ck_assert_str_eq(nets_path_name(NETS_PATH_ENGINE_AVX2), "engine-avx2");
    ck_assert_str_eq(nets_path_name(NETS_PATH_ONEDNN), "onednn");
    ck_assert_str_eq(nets_path_name(NETS_PATH_BLAS), "blas");
    ck_assert_str_eq(nets_path_name((nets_path)42), "?");
    ck_assert_int_eq(nets_path_runs(NETS_PATH_AUTO), 1);
    ck_assert_int_eq(nets_path_runs(NETS_PATH_BLAS), 1);
    ck_assert_int_eq(nets_path_runs(NETS_PATH_ENGINE), kern_available());
    ck_assert_int_eq(nets_path_runs(NETS_PATH_ENGINE_AVX2), avx2);
    ck_assert_int_eq(nets_path_runs(NETS_PATH_ONEDNN), nets_dnn_built());

    vbm_error err;
    nets_path p = NETS_PATH_BLAS;
    setenv("VBMEM_NETS_PATH", "", 1);
    ck_assert_int_eq(nets_path_from_env(&p, &err), VBM_OK);
    ck_assert_int_eq(p, NETS_PATH_AUTO);
    unsetenv("VBMEM_NETS_PATH");
    ck_assert_int_eq(nets_path_from_env(&p, &err), VBM_OK);
    ck_assert_int_eq(p, NETS_PATH_AUTO);
    setenv("VBMEM_NETS_PATH", "blas", 1);
    ck_assert_int_eq(nets_path_from_env(&p, &err), VBM_OK);
    ck_assert_int_eq(p, NETS_PATH_BLAS);
    setenv("VBMEM_NETS_PATH", "avx2", 1);
    p = NETS_PATH_BLAS;
    ck_assert_int_eq(nets_path_from_env(&p, &err), VBM_EINVAL);
    ck_assert_int_eq(p, NETS_PATH_AUTO);
    ck_assert_msg(strstr(err.msg, "VBMEM_NETS_PATH=avx2: not a path of the networks (engine, "
                                  "engine-avx2, onednn, blas)")
                      != NULL,
                  "%s", err.msg);
    setenv("VBMEM_NETS_PATH", "engine-avx2", 1);
    p = NETS_PATH_BLAS;
    ck_assert_int_eq(nets_path_from_env(&p, &err), avx2 ? VBM_OK : VBM_EINVAL);
    ck_assert_int_eq(p, avx2 ? NETS_PATH_ENGINE_AVX2 : NETS_PATH_AUTO);
    if (!avx2)
        ck_assert_msg(strstr(err.msg, "VBMEM_NETS_PATH=engine-avx2: the AVX2 engine needs a CPU "
                                      "with AVX2 and FMA")
                          != NULL,
                      "%s", err.msg);
    setenv("VBMEM_NETS_PATH", "engine", 1);
    ck_assert_int_eq(nets_path_from_env(&p, &err), kern_available() ? VBM_OK : VBM_EINVAL);
    ck_assert_int_eq(p, kern_available() ? NETS_PATH_ENGINE : NETS_PATH_AUTO);
    if (!kern_available())
        ck_assert_msg(strstr(err.msg, "needs AVX-512F") != NULL, "%s", err.msg);
    setenv("VBMEM_NETS_PATH", "onednn", 1);
    ck_assert_int_eq(nets_path_from_env(&p, &err), nets_dnn_built() ? VBM_OK : VBM_EINVAL);
    ck_assert_int_eq(p, nets_dnn_built() ? NETS_PATH_ONEDNN : NETS_PATH_AUTO);
    if (start)
        setenv("VBMEM_NETS_PATH", start, 1);
    else
        unsetenv("VBMEM_NETS_PATH");
    /* probed once: a later change of the environment does not move the default */
    ck_assert_str_eq(nets_path_name(nets_path_default()), nets_path_name(expect));

    nets_workspace *ws = nets_workspace_new();
    ck_assert_ptr_nonnull(ws);
    ck_assert_int_eq(nets_workspace_set_path(ws, (nets_path)7, &err), VBM_EINVAL);
    ck_assert_int_eq(nets_workspace_set_path(ws, (nets_path)-1, &err), VBM_EINVAL);
    ck_assert_int_eq(nets_workspace_set_path(ws, NETS_PATH_BLAS, &err), VBM_OK);
    ck_assert_int_eq(ws->path, NETS_PATH_BLAS);
    ck_assert_int_eq(nets_workspace_set_path(ws, NETS_PATH_ENGINE, &err),
                     kern_available() ? VBM_OK : VBM_EINVAL);
    ck_assert_int_eq(ws->path, kern_available() ? NETS_PATH_ENGINE : NETS_PATH_BLAS);
    ck_assert_int_eq(nets_workspace_set_path(ws, NETS_PATH_ENGINE_AVX2, &err),
                     avx2 ? VBM_OK : VBM_EINVAL);
    if (avx2)
        ck_assert_int_eq(ws->path, NETS_PATH_ENGINE_AVX2);
    else
        ck_assert_msg(strstr(err.msg, "needs a CPU with AVX2 and FMA") != NULL, "%s", err.msg);
    ck_assert_int_eq(nets_workspace_set_path(ws, NETS_PATH_ONEDNN, &err),
                     nets_dnn_built() ? VBM_OK : VBM_EINVAL);
    if (!nets_dnn_built())
        ck_assert_msg(strstr(err.msg, "no oneDNN") != NULL, "%s", err.msg);
    ck_assert_int_eq(nets_workspace_set_path(ws, NETS_PATH_AUTO, &err), VBM_OK);
    ck_assert_int_eq(ws->path, NETS_PATH_AUTO);
    nets_workspace_free(ws);
}
END_TEST

static Suite *nets_suite(void)
{
    Suite *s = suite_create("nets");
    TCase *tc = tcase_create("modelfile");
    tcase_add_test(tc, test_base_loads);
    tcase_add_test(tc, test_reject_container);
    tcase_add_test(tc, test_reject_values);
    tcase_add_test(tc, test_reject_tensors);
    tcase_add_test(tc, test_reject_architecture);
    tcase_add_test(tc, test_reject_metadata);
    suite_add_tcase(s, tc);
    tc = tcase_create("layers");
    tcase_add_test(tc, test_conv2d);
    tcase_add_test(tc, test_conv2d_engine_paths);
    tcase_add_test(tc, test_by_pixels);
    tcase_add_test(tc, test_avx2_copies);
    tcase_add_test(tc, test_conv_transpose2d);
    tcase_add_test(tc, test_group_norm);
    tcase_add_test(tc, test_elementwise_and_shapes);
    tcase_add_test(tc, test_sample_and_loglik);
    suite_add_tcase(s, tc);
    tc = tcase_create("parity");
    tcase_add_test(tc, test_parity_gaussian);
    tcase_add_test(tc, test_parity_bernoulli);
    tcase_add_test(tc, test_parity_bounded);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_split_frames);
    tcase_add_test(tc, test_paths);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(nets_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
