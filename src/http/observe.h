/* observe.h -- owns the image side of session requests: a session's model, observations encoded
 * into codes, codes decoded into images, and the JSON of an iterative read with images. */
#ifndef VBMEM_HTTP_OBSERVE_H
#define VBMEM_HTTP_OBSERVE_H

#include <stdint.h>

#include <jansson.h>

#include "engine/hosted.h"
#include "engine/recall.h"
#include "http/codec.h"
#include "http/images.h"
#include "http/request.h"

/* The observation shape of model m. Never fails. */
void obs_shape(const eng_model *m, img_shape *shape);

/* The model of session s (a new reference, or NULL for a latent session) in
 * *m. Returns 0, or 422 with err filled (the session's model is no longer hosted or does
 * not fit). */
int obs_session_model(http_req *r, eng_session *s, eng_model **m, vbm_error *err);

/* Read the observations at JSON path `path` (img_read, at most max_frames)
 * and encode them with model m into out (mu and s2, T x C; owned by out,
 * release with wire_codes_free). *nets_s receives the encoder's seconds.
 * Fails with VBM_EINVAL (field names the member and frame), VBM_ENOMEM; out is
 * then empty. */
vbm_status obs_encode(const eng_model *m, const json_t *v, const char *path, long max_frames,
                      wire_codes *out, double *nets_s, vbm_error *err);

/* Decode n codes z (n x C) with model m into images (the mean, or with
 * pixel_sample a draw seeded with seed) as a JSON value of format fmt in *out.
 * *nets_s receives the decoder's seconds. Fails with VBM_EINVAL (format "png"
 * for a model of other than 1 or 3 channels), VBM_ENOMEM. */
vbm_status obs_decode(const eng_model *m, const double *z, long n, int pixel_sample, uint64_t seed,
                      img_format fmt, json_t **out, double *nets_s, vbm_error *err);

/* The most probable cluster of every frame and group of a (T x G integers),
 * the read's addressing summary. NULL when out of memory. */
json_t *obs_clusters(const vbm_addresses *a);

/* The body of a read answered by eng_session_recall: version, steps (codes,
 * clusters, addresses when want_addresses, observations in fmt unless
 * IMG_NONE or latent), start (codes and observations of a start drawn from
 * memory) and timings. Fails with VBM_EINVAL (format) or VBM_ENOMEM. */
vbm_status obs_recall_json(const http_req *r, const eng_recall_out *out, const eng_model *m,
                           img_format fmt, int base64, int want_addresses, json_t **json,
                           vbm_error *err);

#endif
