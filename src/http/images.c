/* images.c -- owns the image codecs of the API: PNG decoding and encoding with libpng (errors
 * caught with setjmp/longjmp), raw uint8/float32 tensors and nested JSON arrays, all checked
 * against a model's observation shape. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/codec.h"
#include "http/images.h"
#include "wire/values.h"

#define IMG_PATH_LEN  VBM_FIELD_LEN
#define IMG_MSG_LEN   256
#define IMG_CHUNK_MAX (4L << 20) /* largest ancillary chunk libpng may inflate */
#define IMG_DATA_URL  "data:image/png;base64,"

/* ---- formats ---------------------------------------------------------------- */

vbm_status img_opt_format(const json_t *obj, const char *key, int allow_none, img_format *out,
                          vbm_error *err)
{
    static const char *const names[] = {"none", "png", "uint8", "float32", "json"};
    const json_t *v = json_object_get(obj, key);
    const char *s;
    int i;

    if (v == NULL)
        return VBM_OK;
    s = json_is_string(v) ? json_string_value(v) : "";
    for (i = allow_none ? 0 : 1; i < 5; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (img_format)i;
            return VBM_OK;
        }
    }
    return vbm_fail(err, VBM_EINVAL, key,
                    "expected \"png\", \"uint8\", \"float32\"%s or "
                    "\"json\"",
                    allow_none ? ", \"none\"" : "");
}

vbm_status img_opt_pixels(const json_t *obj, const char *key, int *sample, vbm_error *err)
{
    const json_t *v = json_object_get(obj, key);

    if (v == NULL)
        return VBM_OK;
    if (json_is_string(v) && strcmp(json_string_value(v), "mean") == 0) {
        *sample = 0;
        return VBM_OK;
    }
    if (json_is_string(v) && strcmp(json_string_value(v), "sample") == 0) {
        *sample = 1;
        return VBM_OK;
    }
    return vbm_fail(err, VBM_EINVAL, key, "expected \"mean\" or \"sample\"");
}

vbm_status img_answer_opts(const json_t *body, int has_model, img_format *fmt, int *sample,
                           vbm_error *err)
{
    vbm_status st;

    *fmt = has_model ? IMG_PNG : IMG_NONE;
    *sample = 0;
    st = img_opt_format(body, "format", 1, fmt, err);
    if (st == VBM_OK)
        st = img_opt_pixels(body, "pixels", sample, err);
    if (st == VBM_OK && !has_model && *fmt != IMG_NONE)
        st = vbm_fail(err, VBM_EINVAL, "format",
                      "this is a latent session (no model): it has codes, not images");
    if (st == VBM_OK && !has_model && json_object_get(body, "pixels") != NULL)
        st = vbm_fail(err, VBM_EINVAL, "pixels",
                      "this is a latent session (no model): it has codes, not images");
    return st;
}

/* ---- PNG decoding ------------------------------------------------------------ */

/* libpng's view of the input and of the first error (heap-allocated: it is
 * written by callbacks between setjmp and longjmp). */
typedef struct {
    const unsigned char *buf;
    size_t len, pos;
    char msg[IMG_MSG_LEN];
} img_reader;

static void img_png_error(png_structp png, png_const_charp msg)
{
    char *dst = png_get_error_ptr(png);

    if (dst != NULL && dst[0] == '\0')
        snprintf(dst, IMG_MSG_LEN, "%s", msg != NULL ? msg : "libpng error");
    png_longjmp(png, 1);
}

static void img_png_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg; /* warnings (unknown chunks, bad ancillary CRCs) do not stop decoding */
}

static void img_png_read(png_structp png, png_bytep data, size_t n)
{
    img_reader *rd = png_get_io_ptr(png);

    if (n > rd->len - rd->pos)
        png_error(png, "the PNG data is truncated");
    memcpy(data, rd->buf + rd->pos, n);
    rd->pos += n;
}

/* Sample k of a row of 8- or 16-bit samples. */
static unsigned img_sample(const unsigned char *row, size_t k, int depth)
{
    if (depth == 16)
        return ((unsigned)row[2 * k] << 8) | row[2 * k + 1];
    return row[k];
}

/* Convert the decoded rows (channels 1..4 of 8 or 16 bits) into shape's
 * float pixels. Returns 0, or -1 with a message for channels that cannot be
 * converted. */
static int img_convert(unsigned char *const *rows, int channels, int depth, const img_shape *shape,
                       float *out, vbm_error *err)
{
    int colour = channels >= 3 ? 3 : 1, y, x, c;
    size_t plane = (size_t)shape->height * (size_t)shape->width;
    double scale = depth == 16 ? 1.0 / 65536.0 : 1.0 / 256.0;

    if (shape->channels != 1 && shape->channels != 3) {
        vbm_fail(err, VBM_EINVAL, NULL,
                 "the model takes %d channels; PNG gives 1 (grey) or 3 (RGB)", shape->channels);
        return -1;
    }
    if (colour == 3 && shape->channels == 1) {
        for (y = 0; y < shape->height; y++) {
            for (x = 0; x < shape->width; x++) {
                size_t k = (size_t)x * (size_t)channels;
                unsigned r = img_sample(rows[y], k, depth);

                if (img_sample(rows[y], k + 1, depth) != r
                    || img_sample(rows[y], k + 2, depth) != r) {
                    vbm_fail(err, VBM_EINVAL, NULL,
                             "a colour (RGB) image for a greyscale model (pixel at row %d, "
                             "column %d is not grey); send grey images",
                             y, x);
                    return -1;
                }
            }
        }
    }
    for (y = 0; y < shape->height; y++) {
        for (x = 0; x < shape->width; x++) {
            for (c = 0; c < shape->channels; c++) {
                int src = colour == 3 ? c : 0; /* grey replicated; grey RGB read as grey */
                unsigned v = img_sample(rows[y], (size_t)x * (size_t)channels + (size_t)src, depth);

                out[(size_t)c * plane + (size_t)y * (size_t)shape->width + (size_t)x] =
                    (float)(((double)v + 0.5) * scale);
            }
        }
    }
    return 0;
}

/* Convert the decoded rows into a mask of shape (c x h x w bytes): a pixel is
 * known (1) when any of its colour samples is non-zero (alpha is ignored), and
 * that holds for every channel of the shape. Never fails. */
static void img_convert_mask(unsigned char *const *rows, int channels, int depth,
                             const img_shape *shape, unsigned char *out)
{
    int colour = channels >= 3 ? 3 : 1, y, x, c, k;
    size_t plane = (size_t)shape->height * (size_t)shape->width;

    for (y = 0; y < shape->height; y++) {
        for (x = 0; x < shape->width; x++) {
            unsigned char known = 0;

            for (k = 0; k < colour; k++)
                if (img_sample(rows[y], (size_t)x * (size_t)channels + (size_t)k, depth) != 0)
                    known = 1;
            for (c = 0; c < shape->channels; c++)
                out[(size_t)c * plane + (size_t)y * (size_t)shape->width + (size_t)x] = known;
        }
    }
}

/* img_png_decode into float pixels (mask 0) or into a mask of bytes (mask 1,
 * img_convert_mask). */
static int img_png_decode_as(const unsigned char *buf, size_t len, const img_shape *shape, int mask,
                             void *out, vbm_error *err)
{
    png_structp png;
    png_infop info;
    img_reader *rd;
    unsigned char *volatile pix = NULL;
    png_bytep *volatile rows = NULL;
    png_uint_32 w, h, y;
    int depth, ctype, channels;
    volatile int rc = -1;
    size_t rowbytes;

    if (len < 8 || png_sig_cmp(buf, 0, 8) != 0) {
        vbm_fail(err, VBM_EINVAL, NULL, "not a PNG image (bad signature)");
        return -1;
    }
    rd = calloc(1, sizeof *rd);
    if (rd == NULL) {
        vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
        return -1;
    }
    rd->buf = buf;
    rd->len = len;
    png = png_create_read_struct(PNG_LIBPNG_VER_STRING, rd->msg, img_png_error, img_png_warning);
    info = png != NULL ? png_create_info_struct(png) : NULL;
    if (png == NULL || info == NULL) {
        png_destroy_read_struct(png != NULL ? &png : NULL, NULL, NULL);
        free(rd);
        vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
        return -1;
    }
    if (setjmp(png_jmpbuf(png))) {
        vbm_fail(err, VBM_EINVAL, NULL, "corrupt PNG: %s",
                 rd->msg[0] != '\0' ? rd->msg : "libpng error");
        goto done;
    }
    png_set_read_fn(png, rd, img_png_read);
    png_set_user_limits(png, IMG_MAX_DIM, IMG_MAX_DIM);
    png_set_chunk_malloc_max(png, IMG_CHUNK_MAX);
    png_read_info(png, info);
    w = png_get_image_width(png, info);
    h = png_get_image_height(png, info);
    if ((long)w != shape->width || (long)h != shape->height) {
        vbm_fail(err, VBM_EINVAL, NULL,
                 "the image is %lux%lu (width x height), the model takes %dx%d", (unsigned long)w,
                 (unsigned long)h, shape->width, shape->height);
        goto done;
    }
    depth = png_get_bit_depth(png, info);
    ctype = png_get_color_type(png, info);
    if (ctype == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(png);
    if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8)
        png_set_expand_gray_1_2_4_to_8(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    depth = png_get_bit_depth(png, info);
    channels = png_get_channels(png, info);
    rowbytes = png_get_rowbytes(png, info);
    if ((depth != 8 && depth != 16) || channels < 1 || channels > 4
        || rowbytes < (size_t)w * (size_t)channels * (size_t)(depth / 8)) {
        vbm_fail(err, VBM_EINVAL, NULL, "unsupported PNG layout (%d channels of %d bits)", channels,
                 depth);
        goto done;
    }
    pix = malloc(rowbytes * h);
    rows = malloc(h * sizeof *rows);
    if (pix == NULL || rows == NULL) {
        vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
        goto done;
    }
    for (y = 0; y < h; y++)
        rows[y] = pix + (size_t)y * rowbytes;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    if (mask) {
        img_convert_mask(rows, channels, depth, shape, out);
        rc = 0;
    } else {
        rc = img_convert(rows, channels, depth, shape, out, err);
    }
done:
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    free(pix);
    free(rd);
    return rc;
}

int img_png_decode(const unsigned char *buf, size_t len, const img_shape *shape, float *out,
                   vbm_error *err)
{
    return img_png_decode_as(buf, len, shape, 0, out, err);
}

/* ---- PNG encoding ------------------------------------------------------------- */

typedef struct {
    unsigned char *buf;
    size_t len, cap;
    char msg[IMG_MSG_LEN];
} img_writer;

static void img_png_write(png_structp png, png_bytep data, size_t n)
{
    img_writer *wr = png_get_io_ptr(png);
    unsigned char *grown;
    size_t cap;

    if (n > wr->cap - wr->len) {
        cap = wr->cap > 0 ? 2 * wr->cap : 1024;
        while (cap - wr->len < n)
            cap *= 2;
        grown = realloc(wr->buf, cap);
        if (grown == NULL)
            png_error(png, "out of memory");
        wr->buf = grown;
        wr->cap = cap;
    }
    memcpy(wr->buf + wr->len, data, n);
    wr->len += n;
}

static void img_png_flush(png_structp png)
{
    (void)png;
}

/* 8-bit value of a float pixel: min(255, floor(256 x)) after clamping to [0, 1]. */
static unsigned char img_byte(float x)
{
    double v = floor((double)x * 256.0);

    if (!(v > 0.0))
        return 0;
    return v >= 255.0 ? 255 : (unsigned char)v;
}

int img_png_encode(const float *x, const img_shape *shape, unsigned char **png_out, size_t *len,
                   vbm_error *err)
{
    size_t plane = (size_t)shape->height * (size_t)shape->width;
    png_structp png;
    png_infop info;
    img_writer *wr;
    unsigned char *volatile row = NULL;
    int y, xx, c;
    volatile int rc = -1;

    *png_out = NULL;
    *len = 0;
    if (shape->channels != 1 && shape->channels != 3) {
        vbm_fail(err, VBM_EINVAL, NULL, "PNG holds 1 (grey) or 3 (RGB) channels, the model has %d",
                 shape->channels);
        return -1;
    }
    wr = calloc(1, sizeof *wr);
    if (wr == NULL) {
        vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
        return -1;
    }
    png = png_create_write_struct(PNG_LIBPNG_VER_STRING, wr->msg, img_png_error, img_png_warning);
    info = png != NULL ? png_create_info_struct(png) : NULL;
    if (png == NULL || info == NULL) {
        png_destroy_write_struct(png != NULL ? &png : NULL, NULL);
        free(wr);
        vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
        return -1;
    }
    if (setjmp(png_jmpbuf(png))) {
        vbm_fail(err, VBM_ENOMEM, NULL, "PNG encoding failed: %s", wr->msg);
        goto done;
    }
    png_set_write_fn(png, wr, img_png_write, img_png_flush);
    png_set_IHDR(png, info, (png_uint_32)shape->width, (png_uint_32)shape->height, 8,
                 shape->channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    row = malloc((size_t)shape->width * (size_t)shape->channels);
    if (row == NULL)
        png_error(png, "out of memory");
    for (y = 0; y < shape->height; y++) {
        for (xx = 0; xx < shape->width; xx++)
            for (c = 0; c < shape->channels; c++)
                row[(size_t)xx * (size_t)shape->channels + (size_t)c] =
                    img_byte(x[(size_t)c * plane + (size_t)y * (size_t)shape->width + (size_t)xx]);
        png_write_row(png, row);
    }
    png_write_end(png, info);
    *png_out = wr->buf;
    *len = wr->len;
    wr->buf = NULL;
    rc = 0;
done:
    png_destroy_write_struct(&png, &info);
    free(row);
    free(wr->buf);
    free(wr);
    return rc;
}

/* ---- reading observations ------------------------------------------------------- */

/* path[i] */
static void img_path_index(char *out, size_t n, const char *path, long i)
{
    snprintf(out, n, "%s[%ld]", path, i);
}

/* path.key */
static void img_path_key(char *out, size_t n, const char *path, const char *key)
{
    snprintf(out, n, "%s.%s", path, key);
}

/* An array of base64 PNG strings, decoded into float pixels (mask 0: out is
 * float *) or into a mask (mask 1: out is unsigned char *). */
static vbm_status img_read_pngs(const json_t *v, const char *path, const img_shape *shape, int mask,
                                void *out, long n, vbm_error *err)
{
    size_t per = (size_t)shape->channels * (size_t)shape->height * (size_t)shape->width;
    size_t pre = strlen(IMG_DATA_URL), blen;
    char field[IMG_PATH_LEN];
    const char *s;
    unsigned char *bytes;
    vbm_error why;
    long i;
    int rc;

    for (i = 0; i < n; i++) {
        const json_t *e = json_array_get(v, (size_t)i);

        img_path_index(field, sizeof field, path, i);
        if (!json_is_string(e))
            return vbm_fail(err, VBM_EINVAL, field, "expected a base64 PNG string (frame %ld)", i);
        s = json_string_value(e);
        blen = json_string_length(e);
        if (blen >= pre && strncmp(s, IMG_DATA_URL, pre) == 0) {
            s += pre;
            blen -= pre;
        }
        if (wire_b64_decode(s, blen, &bytes, &blen) != 0)
            return vbm_fail(err, VBM_EINVAL, field, "frame %ld is not valid base64", i);
        rc = img_png_decode_as(bytes, blen, shape, mask,
                               mask ? (void *)((unsigned char *)out + (size_t)i * per)
                                    : (void *)((float *)out + (size_t)i * per),
                               &why);
        free(bytes);
        if (rc != 0) /* why has no field: its message is the bare reason */
            return vbm_fail(err, why.status, field, "frame %ld: %s", i, why.msg);
    }
    return VBM_OK;
}

/* Check float pixels: finite and in [0, 1]; field is the data member. */
static vbm_status img_check_pixels(const float *x, long n, const img_shape *shape,
                                   const char *field, vbm_error *err)
{
    size_t per = (size_t)shape->channels * (size_t)shape->height * (size_t)shape->width;
    size_t total = (size_t)n * per, i, r;

    for (i = 0; i < total; i++) {
        if (x[i] >= 0.0f && x[i] <= 1.0f)
            continue;
        r = i % per;
        return vbm_fail(err, VBM_EINVAL, field,
                        "frame %zu, channel %zu, row %zu, column %zu: %s is not a pixel "
                        "value in [0, 1]",
                        i / per, r / ((size_t)shape->height * (size_t)shape->width),
                        (r / (size_t)shape->width) % (size_t)shape->height,
                        r % (size_t)shape->width,
                        isnan(x[i])   ? "NaN"
                        : isinf(x[i]) ? "an infinity"
                                      : "the value");
    }
    return VBM_OK;
}

/* A tensor object {dtype, shape, data}. *n is set from its shape. */
static vbm_status img_read_tensor(const json_t *v, const char *path, const img_shape *shape,
                                  long max_frames, float **out, long *n, vbm_error *err)
{
    static const char *const keys[] = {"dtype", "shape", "data", NULL};
    char field[IMG_PATH_LEN];
    const json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
                 *data = json_object_get(v, "data");
    long dims[4];
    size_t per, count, width, blen, i;
    unsigned char *bytes = NULL;
    int is_u8, d;
    vbm_status st;

    st = wire_check_keys(v, path, keys, err);
    if (st != VBM_OK)
        return st;
    img_path_key(field, sizeof field, path, "dtype");
    if (!json_is_string(dt)
        || (strcmp(json_string_value(dt), "uint8") != 0
            && strcmp(json_string_value(dt), "float32") != 0))
        return vbm_fail(err, VBM_EINVAL, field, "expected \"uint8\" or \"float32\"");
    is_u8 = strcmp(json_string_value(dt), "uint8") == 0;
    img_path_key(field, sizeof field, path, "shape");
    if (!json_is_array(sh) || json_array_size(sh) != 4)
        return vbm_fail(err, VBM_EINVAL, field,
                        "expected [n, channels, height, width] (4 integers)");
    for (d = 0; d < 4; d++) {
        const json_t *e = json_array_get(sh, (size_t)d);

        if (!json_is_integer(e) || json_integer_value(e) < 1
            || json_integer_value(e) > (json_int_t)1 << 40)
            return vbm_fail(err, VBM_EINVAL, field,
                            "expected [n, channels, height, width] (4 positive integers)");
        dims[d] = (long)json_integer_value(e);
    }
    if (dims[0] > max_frames)
        return vbm_fail(err, VBM_EINVAL, field, "%ld images, the limit is %ld", dims[0],
                        max_frames);
    if (dims[1] != shape->channels || dims[2] != shape->height || dims[3] != shape->width)
        return vbm_fail(err, VBM_EINVAL, field,
                        "[%ld, %ld, %ld, %ld], the model takes [n, %d, %d, %d] (channels, "
                        "height, width)",
                        dims[0], dims[1], dims[2], dims[3], shape->channels, shape->height,
                        shape->width);
    img_path_key(field, sizeof field, path, "data");
    if (!json_is_string(data))
        return vbm_fail(err, VBM_EINVAL, field, "expected a base64 string");
    per = (size_t)shape->channels * (size_t)shape->height * (size_t)shape->width;
    count = (size_t)dims[0] * per;
    width = is_u8 ? 1 : 4;
    if (wire_b64_decode(json_string_value(data), json_string_length(data), &bytes, &blen) != 0)
        return vbm_fail(err, VBM_EINVAL, field, "not valid base64");
    if (blen != count * width) {
        free(bytes);
        return vbm_fail(err, VBM_EINVAL, field,
                        "holds %zu bytes, shape [%ld, %d, %d, %d] of %s needs %zu", blen, dims[0],
                        shape->channels, shape->height, shape->width, is_u8 ? "uint8" : "float32",
                        count * width);
    }
    *out = malloc((count > 0 ? count : 1) * sizeof **out);
    if (*out == NULL) {
        free(bytes);
        return vbm_fail(err, VBM_ENOMEM, field, "out of memory for %ld images", dims[0]);
    }
    for (i = 0; i < count; i++) {
        if (is_u8) {
            (*out)[i] = (float)(((double)bytes[i] + 0.5) / 256.0);
        } else {
            uint32_t bits = (uint32_t)bytes[4 * i] | ((uint32_t)bytes[4 * i + 1] << 8)
                            | ((uint32_t)bytes[4 * i + 2] << 16)
                            | ((uint32_t)bytes[4 * i + 3] << 24);

            memcpy(&(*out)[i], &bits, sizeof bits);
        }
    }
    free(bytes);
    *n = dims[0];
    st = is_u8 ? VBM_OK : img_check_pixels(*out, *n, shape, field, err);
    if (st != VBM_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}

/* Nested arrays n x c x h x w of numbers in [0, 1]. */
static vbm_status img_read_nested(const json_t *v, const char *path, const img_shape *shape,
                                  float *out, long n, vbm_error *err)
{
    long dims[4] = {n, shape->channels, shape->height, shape->width};
    size_t count =
               (size_t)n * (size_t)shape->channels * (size_t)shape->height * (size_t)shape->width,
           i, per = count / (size_t)n, r;
    char field[IMG_PATH_LEN];
    double *d = malloc(count * sizeof *d);
    vbm_status st;

    if (d == NULL)
        return vbm_fail(err, VBM_ENOMEM, path, "out of memory for %ld images", n);
    st = wire_read_array(v, path, 4, dims, 1, d, err);
    if (st != VBM_OK) {
        free(d);
        return st;
    }
    for (i = 0; i < count; i++) {
        if (d[i] > 1.0) {
            r = i % per;
            snprintf(field, sizeof field, "%s[%zu][%zu][%zu][%zu]", path, i / per,
                     r / ((size_t)shape->height * (size_t)shape->width),
                     (r / (size_t)shape->width) % (size_t)shape->height, r % (size_t)shape->width);
            free(d);
            return vbm_fail(err, VBM_EINVAL, field, "frame %zu: pixel values are in [0, 1]",
                            i / per);
        }
        out[i] = (float)d[i];
    }
    free(d);
    return VBM_OK;
}

vbm_status img_read(const json_t *v, const char *path, const img_shape *shape, long max_frames,
                    float **out, long *n, vbm_error *err)
{
    size_t per = (size_t)shape->channels * (size_t)shape->height * (size_t)shape->width;
    const json_t *first;
    vbm_status st;
    long count;

    *out = NULL;
    *n = 0;
    if (json_is_object(v))
        return img_read_tensor(v, path, shape, max_frames, out, n, err);
    if (!json_is_array(v) || json_array_size(v) == 0)
        return vbm_fail(err, VBM_EINVAL, path,
                        "expected a non-empty array of base64 PNG strings, a tensor "
                        "{\"dtype\", \"shape\": [n, c, h, w], \"data\"} or nested arrays "
                        "n x c x h x w");
    if ((long)json_array_size(v) > max_frames)
        return vbm_fail(err, VBM_EINVAL, path, "%zu images, the limit is %ld", json_array_size(v),
                        max_frames);
    count = (long)json_array_size(v);
    first = json_array_get(v, 0);
    if (!json_is_string(first) && !json_is_array(first))
        return vbm_fail(err, VBM_EINVAL, path,
                        "%s[0]: expected a base64 PNG string or a nested array (channels x "
                        "height x width)",
                        path);
    *out = malloc((size_t)count * per * sizeof **out);
    if (*out == NULL)
        return vbm_fail(err, VBM_ENOMEM, path, "out of memory for %ld images", count);
    if (json_is_string(first))
        st = img_read_pngs(v, path, shape, 0, *out, count, err);
    else
        st = img_read_nested(v, path, shape, *out, count, err);
    if (st != VBM_OK) {
        free(*out);
        *out = NULL;
        return st;
    }
    *n = count;
    return VBM_OK;
}

/* ---- reading masks --------------------------------------------------------------- */

/* Every frame of mask (n frames of per bytes) has a known (non-zero) value;
 * otherwise VBM_EINVAL naming path[i]. */
static vbm_status img_mask_frames(const unsigned char *mask, long n, size_t per, const char *path,
                                  vbm_error *err)
{
    char field[IMG_PATH_LEN];
    size_t j;
    long i;

    for (i = 0; i < n; i++) {
        for (j = 0; j < per && mask[(size_t)i * per + j] == 0; j++)
            ;
        if (j == per) {
            img_path_index(field, sizeof field, path, i);
            return vbm_fail(err, VBM_EINVAL, field,
                            "frame %ld of the mask has no known value (non-zero marks a value "
                            "the query gives)",
                            i);
        }
    }
    return VBM_OK;
}

/* A uint8 tensor {dtype, shape, data} of ndim dimensions whose shape must be
 * want[0..ndim-1], except that dimension alt_dim (or -1) may also be 1; the
 * decoded bytes (non-zero = known) go to *bytes (malloc'd), the dimension
 * alt_dim as given to *alt. */
static vbm_status img_mask_tensor(const json_t *v, const char *path, int ndim, const long *want,
                                  int alt_dim, const char *names, unsigned char **bytes, long *alt,
                                  vbm_error *err)
{
    static const char *const keys[] = {"dtype", "shape", "data", NULL};
    char field[IMG_PATH_LEN];
    const json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
                 *data = json_object_get(v, "data");
    size_t need = 1, blen;
    long dims[4];
    int d;
    vbm_status st;

    *bytes = NULL;
    st = wire_check_keys(v, path, keys, err);
    if (st != VBM_OK)
        return st;
    img_path_key(field, sizeof field, path, "dtype");
    if (!json_is_string(dt) || strcmp(json_string_value(dt), "uint8") != 0)
        return vbm_fail(err, VBM_EINVAL, field, "a mask tensor is \"uint8\" (non-zero = known)");
    img_path_key(field, sizeof field, path, "shape");
    if (!json_is_array(sh) || (int)json_array_size(sh) != ndim)
        return vbm_fail(err, VBM_EINVAL, field, "expected %s (%d integers)", names, ndim);
    for (d = 0; d < ndim; d++) {
        const json_t *e = json_array_get(sh, (size_t)d);

        if (!json_is_integer(e) || json_integer_value(e) < 1
            || json_integer_value(e) > (json_int_t)1 << 40)
            return vbm_fail(err, VBM_EINVAL, field, "expected %s (%d positive integers)", names,
                            ndim);
        dims[d] = (long)json_integer_value(e);
    }
    for (d = 0; d < ndim; d++) {
        if (dims[d] != want[d] && !(d == alt_dim && dims[d] == 1)) {
            if (ndim == 4)
                return vbm_fail(err, VBM_EINVAL, field,
                                "[%ld, %ld, %ld, %ld], the query needs [%ld, 1 or %ld, %ld, %ld] "
                                "(frames, channels, height, width)",
                                dims[0], dims[1], dims[2], dims[3], want[0], want[1], want[2],
                                want[3]);
            return vbm_fail(err, VBM_EINVAL, field,
                            "[%ld, %ld], the query needs [%ld, %ld] (frames, code size)", dims[0],
                            dims[1], want[0], want[1]);
        }
        need *= (size_t)dims[d];
    }
    img_path_key(field, sizeof field, path, "data");
    if (!json_is_string(data))
        return vbm_fail(err, VBM_EINVAL, field, "expected a base64 string");
    if (wire_b64_decode(json_string_value(data), json_string_length(data), bytes, &blen) != 0)
        return vbm_fail(err, VBM_EINVAL, field, "not valid base64");
    if (blen != need) {
        free(*bytes);
        *bytes = NULL;
        return vbm_fail(err, VBM_EINVAL, field, "holds %zu bytes, the shape needs %zu", blen, need);
    }
    if (alt != NULL)
        *alt = dims[alt_dim];
    return VBM_OK;
}

/* Nested arrays of shape dims (ndim dimensions) of 0 and 1 into out (bytes).
 * Fails naming the element that is not 0 or 1. */
static vbm_status img_mask_nested(const json_t *v, const char *path, int ndim, const long *dims,
                                  unsigned char *out, vbm_error *err)
{
    char field[IMG_PATH_LEN];
    size_t count = 1, i, r;
    double *d;
    int k;
    vbm_status st;

    for (k = 0; k < ndim; k++)
        count *= (size_t)dims[k];
    d = malloc(count * sizeof *d);
    if (d == NULL)
        return vbm_fail(err, VBM_ENOMEM, path, "out of memory for the mask");
    st = wire_read_array(v, path, ndim, dims, 0, d, err);
    for (i = 0; st == VBM_OK && i < count; i++) {
        if (d[i] == 0.0 || d[i] == 1.0) {
            out[i] = d[i] != 0.0;
            continue;
        }
        snprintf(field, sizeof field, "%s", path);
        for (k = 0, r = i; k < ndim; k++) {
            size_t below = 1, len = strlen(field);
            int j;

            for (j = k + 1; j < ndim; j++)
                below *= (size_t)dims[j];
            snprintf(field + len, sizeof field - len, "[%zu]", r / below);
            r %= below;
        }
        st = vbm_fail(err, VBM_EINVAL, field, "a mask value is 0 (unknown) or 1 (known), got %g",
                      d[i]);
    }
    free(d);
    return st;
}

vbm_status img_read_mask(const json_t *v, const char *path, const img_shape *shape, long frames,
                         unsigned char **out, vbm_error *err)
{
    size_t plane = (size_t)shape->height * (size_t)shape->width;
    size_t per = (size_t)shape->channels * plane, i;
    long want[4] = {frames, shape->channels, shape->height, shape->width}, mc = shape->channels;
    unsigned char *m = NULL, *src = NULL;
    const json_t *first;
    vbm_status st;
    long f;
    int c;

    *out = NULL;
    if (json_is_object(v)) {
        st = img_mask_tensor(v, path, 4, want, 1, "[n, channels, height, width]", &src, &mc, err);
    } else {
        if (!json_is_array(v) || json_array_size(v) == 0)
            return vbm_fail(err, VBM_EINVAL, path,
                            "expected a non-empty array of base64 PNG strings, a tensor "
                            "{\"dtype\": \"uint8\", \"shape\": [n, c, h, w], \"data\"} or nested "
                            "arrays of 0 and 1 (n x c x h x w or n x h x w)");
        if ((long)json_array_size(v) != frames)
            return vbm_fail(err, VBM_EINVAL, path, "%zu masks for a query of %ld frames",
                            json_array_size(v), frames);
        first = json_array_get(v, 0);
        m = malloc((size_t)frames * per);
        if (m == NULL)
            return vbm_fail(err, VBM_ENOMEM, path, "out of memory for the mask");
        if (json_is_string(first)) {
            st = img_read_pngs(v, path, shape, 1, m, frames, err);
        } else if (json_is_array(first)) {
            /* n x h x w, or n x c x h x w when an element of a row is itself an array */
            const json_t *row = json_array_get(json_array_get(first, 0), 0);

            if (json_is_array(row)) {
                mc = (long)json_array_size(first) == 1 ? 1 : shape->channels;
                want[1] = mc;
                src = malloc((size_t)frames * (size_t)mc * plane);
                st = src == NULL ? vbm_fail(err, VBM_ENOMEM, path, "out of memory for the mask")
                                 : img_mask_nested(v, path, 4, want, src, err);
            } else {
                long hw[3] = {frames, shape->height, shape->width};

                mc = 1;
                src = malloc((size_t)frames * plane);
                st = src == NULL ? vbm_fail(err, VBM_ENOMEM, path, "out of memory for the mask")
                                 : img_mask_nested(v, path, 3, hw, src, err);
            }
        } else {
            st = vbm_fail(err, VBM_EINVAL, path,
                          "%s[0]: expected a base64 PNG string or a nested array of 0 and 1", path);
        }
    }
    if (st == VBM_OK && src != NULL) { /* tensor or nested: expand one channel to all */
        if (m == NULL)
            m = malloc((size_t)frames * per);
        if (m == NULL)
            st = vbm_fail(err, VBM_ENOMEM, path, "out of memory for the mask");
        for (f = 0; st == VBM_OK && f < frames; f++)
            for (c = 0; c < shape->channels; c++)
                for (i = 0; i < plane; i++)
                    m[(size_t)f * per + (size_t)c * plane + i] =
                        src[((size_t)f * (size_t)mc + (size_t)(mc == 1 ? 0 : c)) * plane + i] != 0;
    }
    free(src);
    if (st == VBM_OK)
        st = img_mask_frames(m, frames, per, path, err);
    if (st != VBM_OK) {
        free(m);
        return st;
    }
    *out = m;
    return VBM_OK;
}

vbm_status img_read_code_mask(const json_t *v, const char *path, long T, int C, unsigned char **out,
                              vbm_error *err)
{
    long want[2] = {T, C};
    unsigned char *m = NULL;
    size_t i;
    vbm_status st;

    *out = NULL;
    if (json_is_object(v)) {
        st = img_mask_tensor(v, path, 2, want, -1, "[frames, code size]", &m, NULL, err);
        for (i = 0; st == VBM_OK && i < (size_t)T * (size_t)C; i++)
            m[i] = m[i] != 0;
    } else {
        if (!json_is_array(v) || json_array_size(v) == 0)
            return vbm_fail(err, VBM_EINVAL, path,
                            "expected frames x code size nested arrays of 0 and 1, or a tensor "
                            "{\"dtype\": \"uint8\", \"shape\": [frames, code size], \"data\"}");
        if ((long)json_array_size(v) != T)
            return vbm_fail(err, VBM_EINVAL, path, "%zu mask rows for a query of %ld frames",
                            json_array_size(v), T);
        m = malloc((size_t)T * (size_t)C);
        st = m == NULL ? vbm_fail(err, VBM_ENOMEM, path, "out of memory for the mask")
                       : img_mask_nested(v, path, 2, want, m, err);
    }
    if (st == VBM_OK)
        st = img_mask_frames(m, T, (size_t)C, path, err);
    if (st != VBM_OK) {
        free(m);
        return st;
    }
    *out = m;
    return VBM_OK;
}

/* ---- writing images -------------------------------------------------------------- */

/* A raw tensor {dtype, shape [n, c, h, w], data}. */
static json_t *img_tensor(const float *x, long n, const img_shape *shape, int is_u8)
{
    size_t count =
               (size_t)n * (size_t)shape->channels * (size_t)shape->height * (size_t)shape->width,
           i;
    unsigned char *raw = calloc(count * (is_u8 ? 1 : 4) + 1, 1);
    char *text;
    json_t *out;

    if (raw == NULL)
        return NULL;
    for (i = 0; i < count; i++) {
        if (is_u8) {
            raw[i] = img_byte(x[i]);
        } else {
            float f = x[i] < 0.0f ? 0.0f : x[i] > 1.0f ? 1.0f : x[i];
            uint32_t bits;

            memcpy(&bits, &f, sizeof bits);
            raw[4 * i] = (unsigned char)bits;
            raw[4 * i + 1] = (unsigned char)(bits >> 8);
            raw[4 * i + 2] = (unsigned char)(bits >> 16);
            raw[4 * i + 3] = (unsigned char)(bits >> 24);
        }
    }
    text = wire_b64_encode(raw, count * (is_u8 ? 1 : 4));
    free(raw);
    if (text == NULL)
        return NULL;
    out = json_pack("{s:s, s:[I, i, i, i], s:s}", "dtype", is_u8 ? "uint8" : "float32", "shape",
                    (json_int_t)n, shape->channels, shape->height, shape->width, "data", text);
    free(text);
    return out;
}

/* Nested arrays n x c x h x w of numbers. */
static json_t *img_nested(const float *x, long n, const img_shape *shape)
{
    json_t *all = json_array(), *img, *chan, *row;
    long i, c, y, xx;
    size_t k = 0;

    for (i = 0; all != NULL && i < n; i++) {
        img = json_array();
        for (c = 0; img != NULL && c < shape->channels; c++) {
            chan = json_array();
            for (y = 0; chan != NULL && y < shape->height; y++) {
                row = json_array();
                for (xx = 0; row != NULL && xx < shape->width; xx++, k++) {
                    float f = x[k] < 0.0f ? 0.0f : x[k] > 1.0f ? 1.0f : x[k];

                    if (json_array_append_new(row, json_real((double)f)) != 0) {
                        json_decref(row);
                        row = NULL;
                    }
                }
                if (row == NULL || json_array_append_new(chan, row) != 0) {
                    json_decref(chan);
                    chan = NULL;
                }
            }
            if (chan == NULL || json_array_append_new(img, chan) != 0) {
                json_decref(img);
                img = NULL;
            }
        }
        if (img == NULL || json_array_append_new(all, img) != 0) {
            json_decref(all);
            all = NULL;
        }
    }
    return all;
}

vbm_status img_write(const float *x, long n, const img_shape *shape, img_format fmt, json_t **out,
                     vbm_error *err)
{
    size_t per = (size_t)shape->channels * (size_t)shape->height * (size_t)shape->width;
    unsigned char *png;
    size_t len;
    char *text;
    json_t *arr;
    long i;

    *out = NULL;
    switch (fmt) {
    case IMG_UINT8:
    case IMG_FLOAT32: *out = img_tensor(x, n, shape, fmt == IMG_UINT8); break;
    case IMG_JSON: *out = img_nested(x, n, shape); break;
    case IMG_PNG:
        if (shape->channels != 1 && shape->channels != 3)
            return vbm_fail(err, VBM_EINVAL, "format",
                            "format \"png\" needs a model of 1 or 3 channels, this one has %d",
                            shape->channels);
        arr = json_array();
        for (i = 0; arr != NULL && i < n; i++) {
            if (img_png_encode(x + (size_t)i * per, shape, &png, &len, err) != 0) {
                json_decref(arr);
                return err != NULL ? err->status : VBM_ENOMEM;
            }
            text = wire_b64_encode(png, len);
            free(png);
            if (text == NULL || json_array_append_new(arr, json_string(text)) != 0) {
                json_decref(arr);
                arr = NULL;
            }
            free(text);
        }
        *out = arr;
        break;
    default: return vbm_fail(err, VBM_EINVAL, "format", "no image format");
    }
    if (*out == NULL)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory encoding %ld images", n);
    return VBM_OK;
}
