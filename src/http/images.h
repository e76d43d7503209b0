/* images.h -- owns the wire forms of observations (images): base64 PNG (libpng), base64 raw
 * uint8/float32 tensors of shape [n, c, h, w], nested JSON arrays; decoding them to float pixels in
 * [0, 1] for a model's shape, and encoding images back. */
#ifndef VBMEM_HTTP_IMAGES_H
#define VBMEM_HTTP_IMAGES_H

#include <stddef.h>

#include <jansson.h>

#include "engine/clock.h"

#define IMG_MAX_DIM 4096 /* largest PNG width or height libpng is allowed to read */

/* The shape of one observation (a model's). */
typedef struct {
    int channels, height, width;
} img_shape;

/* Output forms of images. */
typedef enum {
    IMG_NONE = 0,    /* no images */
    IMG_PNG = 1,     /* array of base64 PNG strings, 8-bit grey or RGB */
    IMG_UINT8 = 2,   /* {"dtype": "uint8", "shape": [n, c, h, w], "data": base64} */
    IMG_FLOAT32 = 3, /* the same with little-endian float32 pixels in [0, 1] */
    IMG_JSON = 4     /* n x c x h x w nested arrays of numbers in [0, 1] */
} img_format;

/* Parse the member `key` of obj ("png", "uint8", "float32", "json", or "none"
 * when allow_none) into *out; left unchanged when the member is absent. Fails
 * with VBM_EINVAL naming key. */
vbm_status img_opt_format(const json_t *obj, const char *key, int allow_none, img_format *out,
                          vbm_error *err);

/* Parse the member `key` of obj: "mean" (0: the decoder's mean image) or
 * "sample" (1: a draw from p(x | z)) into *sample; unchanged when absent.
 * Fails with VBM_EINVAL naming key. */
vbm_status img_opt_pixels(const json_t *obj, const char *key, int *sample, vbm_error *err);

/* The image options of an answer that carries frames (samples, reads, continuations): the
 * members "format" (default IMG_PNG when has_model, IMG_NONE without) and "pixels" (default
 * "mean") of body into *fmt and *sample. A session without a model (latent) has codes, not
 * images: any format but "none", or any "pixels", fails with VBM_EINVAL naming that member
 * ("format" first). Bad values fail as img_opt_format / img_opt_pixels do. */
vbm_status img_answer_opts(const json_t *body, int has_model, img_format *fmt, int *sample,
                           vbm_error *err);

/* Decode the observations at JSON path `path` into n x c x h x w float pixels
 * in [0, 1] (NCHW) for shape:
 *   - an array of base64 PNG strings (an optional "data:image/png;base64,"
 *     prefix is allowed): any PNG colour type and bit depth; 8-bit values v
 *     become (v + 0.5) / 256 and 16-bit ones (v + 0.5) / 65536; alpha is
 *     dropped; grey is replicated for a 3-channel shape; an RGB image is
 *     accepted for a 1-channel shape only when every pixel is grey (R = G = B);
 *     width and height must be the shape's (checked before any pixel memory is
 *     allocated);
 *   - a tensor {"dtype": "uint8" | "float32", "shape": [n, c, h, w], "data":
 *     base64}, row-major NCHW, float32 little-endian; uint8 v becomes
 *     (v + 0.5) / 256;
 *   - nested arrays n x c x h x w of numbers.
 * Float pixels must be finite and in [0, 1]. n must be in [1, max_frames]. On
 * success *out (malloc'd, owned by the caller) holds *n images. Fails with
 * VBM_EINVAL whose field names the member and frame (e.g. "observations[3]",
 * "observations.data", "observations[2][0][5][7]") and whose message says what
 * is wrong and at which frame, or VBM_ENOMEM; *out is then NULL. */
vbm_status img_read(const json_t *v, const char *path, const img_shape *shape, long max_frames,
                    float **out, long *n, vbm_error *err);

/* Decode the mask of a query of `frames` images at JSON path `path` into
 * frames x c x h x w bytes (1 = known, 0 = unknown) for shape, in the forms of
 * img_read:
 *   - an array of base64 PNG strings (any colour type and depth, width and
 *     height the shape's): a pixel is known when any of its colour samples is
 *     non-zero (alpha is ignored); it is known in every channel;
 *   - a tensor {"dtype": "uint8", "shape": [n, c, h, w], "data": base64} with c
 *     the shape's channels or 1 (applied to every channel): non-zero = known;
 *   - nested arrays n x c x h x w (c the shape's or 1) or n x h x w of 0 and 1.
 * n must be frames, and every frame must have a known value. On success *out
 * (malloc'd, owned by the caller) holds the mask. Fails with VBM_EINVAL whose
 * field names the member and frame ("mask" for the count, "mask.shape",
 * "mask.data", "mask[3]" for a PNG that does not decode or a frame with no
 * known value, "mask[0][0][5][7]" for a value other than 0 or 1), or
 * VBM_ENOMEM; *out is then NULL. */
vbm_status img_read_mask(const json_t *v, const char *path, const img_shape *shape, long frames,
                         unsigned char **out, vbm_error *err);

/* Decode the mask of a query of T codes of size C at path: nested arrays T x C
 * of 0 and 1, or {"dtype": "uint8", "shape": [T, C], "data": base64} (non-zero
 * = known), into T x C bytes (1 = known). Every frame must have a known value.
 * Fails as img_read_mask does ("mask", "mask.shape", "mask[2]", "mask[2][5]"). */
vbm_status img_read_code_mask(const json_t *v, const char *path, long T, int C, unsigned char **out,
                              vbm_error *err);

/* Encode n images x (n x c x h x w floats, clamped to [0, 1]) in format fmt
 * (not IMG_NONE): 8-bit outputs map x to min(255, floor(256 x)). On success
 * *out is a new JSON value. Fails with VBM_EINVAL (PNG of a shape with other
 * than 1 or 3 channels) or VBM_ENOMEM. */
vbm_status img_write(const float *x, long n, const img_shape *shape, img_format fmt, json_t **out,
                     vbm_error *err);

/* Decode one PNG of len bytes into shape (as img_read describes) into out
 * (c x h x w floats). Returns 0, or -1 with the failure in err (which may be
 * NULL), with no field: VBM_EINVAL (bad signature, libpng's own message for
 * corrupt or truncated data, wrong size or colour channels) or VBM_ENOMEM.
 * Never crashes on any input. */
int img_png_decode(const unsigned char *buf, size_t len, const img_shape *shape, float *out,
                   vbm_error *err);

/* Encode one image x (c x h x w floats, c = 1 grey or 3 RGB) as an 8-bit PNG.
 * On success *png (malloc'd) holds *len bytes and 0 is returned; -1 with the
 * failure in err (may be NULL; no field) otherwise: VBM_EINVAL (channels other
 * than 1 or 3) or VBM_ENOMEM (out of memory, libpng failure). */
int img_png_encode(const float *x, const img_shape *shape, unsigned char **png, size_t *len,
                   vbm_error *err);

#endif
