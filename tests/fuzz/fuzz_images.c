/* fuzz_images.c -- owns the libFuzzer harness of the observation decoders: images (base64 PNG,
 * uint8/float32 tensors, nested arrays), image masks and code masks, read from a JSON body. */
#include <stdint.h>

#include "fuzz_check.h"
#include "http/images.h"
#include "wire/parse.h"

/* The shapes a byte of the input picks (small, so that PNG seeds stay small). */
static const img_shape fuzz_shapes[4] = {{1, 4, 4}, {3, 4, 4}, {1, 8, 8}, {3, 2, 3}};

#define FUZZ_MAX_FRAMES 8

/* A failure names a field under path (or is out of memory). */
static void fuzz_failed(vbm_status st, const vbm_error *err, const char *path)
{
    FUZZ_CHECK(st == VBM_EINVAL || st == VBM_ENOMEM, "%s failed with status %d", path, (int)st);
    if (st == VBM_EINVAL)
        FUZZ_CHECK(strncmp(err->field, path, strlen(path)) == 0 && err->msg[0] != '\0',
                   "%s error field '%s' message '%s'", path, err->field, err->msg);
}

/* Every frame of a frames x per mask of 0 and 1 has a known value. */
static void fuzz_mask_ok(const unsigned char *m, long frames, long per, const char *what)
{
    long f, i, known;

    for (f = 0; f < frames; f++) {
        known = 0;
        for (i = 0; i < per; i++) {
            FUZZ_CHECK(m[f * per + i] <= 1, "%s value %d", what, m[f * per + i]);
            known += m[f * per + i];
        }
        FUZZ_CHECK(known > 0, "%s frame %ld has no known value", what, f);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Input: one byte (shape: bits 0-1; decoder: bits 2-3; frames: bits 4-6), then a
 * JSON body {"observations": ..., "mask": ...}. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const img_shape *shape;
    json_error_t jerr;
    json_t *body = NULL, *v;
    vbm_error err;
    vbm_status st;
    float *x = NULL;
    unsigned char *mask = NULL;
    long n = 0, i, per, frames;
    int which;

    if (size < 1)
        return 0;
    shape = &fuzz_shapes[data[0] & 3];
    which = (data[0] >> 2) & 3;
    frames = 1 + ((data[0] >> 4) & 7);
    per = (long)shape->channels * shape->height * shape->width;
    if (wire_parse((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES, &body, &jerr) != 0)
        return 0;
    memset(&err, 0, sizeof err);
    if (which == 0 || which == 3) {
        v = json_object_get(body, "observations");
        st = img_read(v, "observations", shape, FUZZ_MAX_FRAMES, &x, &n, &err);
        if (st == VBM_OK) {
            FUZZ_CHECK(x != NULL && n >= 1 && n <= FUZZ_MAX_FRAMES, "%ld images accepted", n);
            for (i = 0; i < n * per; i++)
                FUZZ_CHECK(x[i] >= 0.0f && x[i] <= 1.0f, "pixel %ld = %g", i, (double)x[i]);
            free(x);
        } else {
            FUZZ_CHECK(x == NULL, "failed img_read left images");
            fuzz_failed(st, &err, "observations");
        }
    }
    if (which == 1 || which == 3) {
        v = json_object_get(body, "mask");
        st = img_read_mask(v, "mask", shape, frames, &mask, &err);
        if (st == VBM_OK) {
            fuzz_mask_ok(mask, frames, per, "mask");
            free(mask);
        } else {
            FUZZ_CHECK(mask == NULL, "failed img_read_mask left a mask");
            fuzz_failed(st, &err, "mask");
        }
    }
    if (which == 2) {
        v = json_object_get(body, "mask");
        st = img_read_code_mask(v, "mask", frames, 4 + (data[0] & 3), &mask, &err);
        if (st == VBM_OK) {
            fuzz_mask_ok(mask, frames, 4 + (data[0] & 3), "code mask");
            free(mask);
        } else {
            FUZZ_CHECK(mask == NULL, "failed img_read_code_mask left a mask");
            fuzz_failed(st, &err, "mask");
        }
    }
    json_decref(body);
    return 0;
}
