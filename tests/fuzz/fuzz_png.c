/* fuzz_png.c -- owns the libFuzzer harness of the PNG decoder (img_png_decode over libpng) on raw
 * PNG bytes. */
#include <stdint.h>

#include "fuzz_check.h"
#include "http/images.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The shape is taken from the IHDR (width, height at bytes 16..23) when both are
 * in [1, 64], so that decoding gets past the size check; the channels (1 or 3)
 * from the low bit of the last byte. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    img_shape shape = {1, 4, 4};
    uint32_t w, h;
    float *out;
    vbm_error err;
    long i, per;
    int rc;

    if (size >= 24) {
        w = (uint32_t)data[16] << 24 | (uint32_t)data[17] << 16 | (uint32_t)data[18] << 8
            | data[19];
        h = (uint32_t)data[20] << 24 | (uint32_t)data[21] << 16 | (uint32_t)data[22] << 8
            | data[23];
        if (w >= 1 && w <= 64 && h >= 1 && h <= 64) {
            shape.width = (int)w;
            shape.height = (int)h;
        }
    }
    if (size > 0 && (data[size - 1] & 1))
        shape.channels = 3;
    per = (long)shape.channels * shape.height * shape.width;
    out = malloc((size_t)per * sizeof *out);
    if (out == NULL)
        return 0;
    memset(&err, 0, sizeof err);
    rc = img_png_decode(data, size, &shape, out, &err);
    if (rc == 0) {
        for (i = 0; i < per; i++)
            FUZZ_CHECK(out[i] > 0.0f && out[i] < 1.0f, "pixel %ld = %g", i, (double)out[i]);
    } else {
        FUZZ_CHECK(rc == -1 && (err.status == VBM_EINVAL || err.status == VBM_ENOMEM)
                       && err.msg[0] != '\0',
                   "img_png_decode returned %d status %d message '%s'", rc, (int)err.status,
                   err.msg);
    }
    free(out);
    return 0;
}
