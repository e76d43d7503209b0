/* nets.h -- trained encoder/decoder networks: loading a vbmem model file
 * (proto/model-format.md, safetensors) and running it in float32 on the CPU. */
#ifndef VBMEM_NETS_H
#define VBMEM_NETS_H

#include <stddef.h>
#include <stdint.h>

#include "numerics/rng.h"
#include "vbmem/vbmem.h"

typedef enum { NETS_GAUSSIAN = 0, NETS_BERNOULLI = 1 } nets_likelihood;

/* What a model file says about itself. Strings are NUL-terminated and owned by
 * the model. */
typedef struct {
    int channels, height, width; /* observation shape */
    nets_likelihood likelihood;
    double min_scale; /* gaussian: scale = softplus(raw) + min_scale */
    /* gaussian, optional: mean = sigmoid(raw) when sigmoid_mean; scale =
     * scale_max * sigmoid(raw) + min_scale when scale_max > 0 (bounded head) */
    int sigmoid_mean;
    double scale_max;
    int code_size; /* C */
    double log_sigma_min, log_sigma_max;
    /* vbmem.memory: defaults for sessions that use this model */
    char kind[16];
    int clusters, rows, groups, iterations, episode_length;
    double sigma_z2, u0, sigma2_b0, s_floor;
    double session_sigma_z2; /* the observation noise of sessions (optional key
                              * session_sigma_z2; sigma_z2, the trained value, when absent) */
    /* raw JSON of the metadata, for GET /v1/models/{name} */
    char *architecture_json, *memory_json, *provenance_json;
    size_t n_params; /* float32 weights in the file */
} nets_info;

typedef struct nets_model nets_model;

/* Read and validate a model file (every check of proto/model-format.md).
 * On success *out is a new model owned by the caller (free with
 * nets_model_free) and VBM_OK is returned. On failure *out is NULL and err (may
 * be NULL) is filled by vbm_fail with no field and a precise message that starts
 * with "<path>: ". Fails with VBM_EINVAL (the path cannot be opened or read, or
 * is not a regular file), VBM_EFORMAT (a malformed container or model: the
 * message names the rule, tensor, layer or metadata key) or VBM_ENOMEM. */
vbm_status nets_model_load(const char *path, nets_model **out, vbm_error *err);

/* The same from a buffer in memory (the whole file); the buffer is not kept.
 * Fails with VBM_EFORMAT or VBM_ENOMEM (the message without a path). */
vbm_status nets_model_load_buffer(const unsigned char *buf, size_t len, nets_model **out,
                                  vbm_error *err);

void nets_model_free(nets_model *m);

/* The model's description; valid as long as the model. */
const nets_info *nets_model_info(const nets_model *m);

/* Encode n images x (n x channels x height x width, values in [0, 1]) into code
 * means mu (n x C) and variances s2 = sigma^2 (n x C), in double for the VB
 * solver. A model may be used by several threads at once (each call allocates
 * its own workspace). Returns VBM_OK; fails with VBM_ENOMEM, or VBM_EINVAL for
 * n <= 0, a NULL pointer, a pixel that is not finite, or an encoder output that
 * is not (NaN, or an infinite mean; log sigma is clamped as the format says).
 * err (may be NULL) then holds "nets_encode: ..." (no field). */
vbm_status nets_encode(const nets_model *m, const float *x, long n, double *mu, double *s2,
                       vbm_error *err);

/* Decode n codes z (n x C) into the likelihood's per-pixel parameters:
 * mean (n x channels x height x width; for bernoulli the probabilities) and, for
 * gaussian, scale (same shape; may be NULL when not wanted; ignored for
 * bernoulli). Returns VBM_OK; fails with VBM_ENOMEM, or VBM_EINVAL for n <= 0,
 * a NULL pointer, a code element that is not finite, or a decoder output that is
 * not (an infinite logit is allowed for bernoulli). err (may be NULL) then holds
 * "nets_decode: ..." (no field). Thread-safe like nets_encode. */
vbm_status nets_decode(const nets_model *m, const double *z, long n, float *mean, float *scale,
                       vbm_error *err);

/* A reusable workspace for nets_encode_ws / nets_decode_ws: scratch memory that
 * grows to the largest batch seen and is kept between calls (one per thread; a
 * workspace must not be used by two calls at once). new returns NULL when out of
 * memory; free accepts NULL. */
typedef struct nets_workspace nets_workspace;
nets_workspace *nets_workspace_new(void);
void nets_workspace_free(nets_workspace *ws);

/* Threads that share the work of calls with this workspace (the calling thread and
 * helpers that each call starts and joins; on the engine paths a call of at least 4 frames per
 * thread splits its frames between them, each thread running its share through every layer,
 * and a smaller call splits each layer's work; on the blas path the BLAS library's threads run
 * the GEMMs and these share the work between, on the oneDNN path this many of oneDNN's OpenMP
 * threads run its layers and the rest runs on the calling thread; on the engine paths the
 * outputs are the same bits for every count): 0, the default, is
 * automatic: as many as the BLAS library uses when the batch is large enough to pay
 * for starting them, else 1 (nets_encode / nets_decode do the same); 1 runs that
 * work on the calling thread only (e.g. when many threads call the model at once);
 * n > 1 uses n threads. */
void nets_workspace_set_threads(nets_workspace *ws, int threads);

/* The networks' paths: the AVX-512 GEMM engine of src/nets (CPUs with AVX-512F), the same
 * engine in AVX2 (CPUs with AVX2 and FMA), oneDNN's primitives (builds with libdnnl), and
 * im2col + OpenBLAS sgemm (everywhere). AUTO is the process's default, nets_path_default(). */
typedef enum {
    NETS_PATH_AUTO = 0,
    NETS_PATH_ENGINE,
    NETS_PATH_ENGINE_AVX2,
    NETS_PATH_ONEDNN,
    NETS_PATH_BLAS
} nets_path;

/* "auto", "engine", "engine-avx2", "onednn" or "blas" (a static string; "?" for a value out of
 * range). */
const char *nets_path_name(nets_path p);

/* Whether path p can run in this process: the engine needs AVX-512F on the CPU (and
 * VBMEM_NETS_NO_AVX512 unset, "" or "0"), the AVX2 engine AVX2 and FMA (whatever
 * VBMEM_NETS_NO_AVX512 says), oneDNN a build with libdnnl; blas and auto always run. */
int nets_path_runs(nets_path p);

/* The path VBMEM_NETS_PATH names ("engine", "engine-avx2", "onednn", "blas"; unset or "" is
 * AUTO). Returns VBM_OK with *out set; fails with VBM_EINVAL (err filled, field NULL, *out =
 * AUTO) when the value is not one of these names or names a path that cannot run here
 * (nets_path_runs). */
vbm_status nets_path_from_env(nets_path *out, vbm_error *err);

/* The path calls take when none is asked (probed once per process, thread-safe):
 * VBMEM_NETS_PATH when it is valid here (nets_path_from_env; an invalid value is ignored),
 * else the AVX-512 engine where it runs, else the AVX2 engine where it runs, else oneDNN where
 * the build has it, else blas. Never AUTO. */
nets_path nets_path_default(void);

/* Run the calls with this workspace on path p (AUTO, the default: nets_path_default()).
 * Returns VBM_OK; fails with VBM_EINVAL (err filled, field NULL; the workspace unchanged)
 * when p is out of range or cannot run here (nets_path_runs). */
vbm_status nets_workspace_set_path(nets_workspace *ws, nets_path p, vbm_error *err);

/* nets_encode / nets_decode with the caller's workspace (ws may be NULL: then
 * they allocate and free one, exactly like nets_encode / nets_decode). Same
 * contracts and failures. */
vbm_status nets_encode_ws(const nets_model *m, nets_workspace *ws, const float *x, long n,
                          double *mu, double *s2, vbm_error *err);
vbm_status nets_decode_ws(const nets_model *m, nets_workspace *ws, const double *z, long n,
                          float *mean, float *scale, vbm_error *err);

/* Draw pixels from the decoded distribution: gaussian mean + scale * N(0,1),
 * bernoulli 1 with probability mean; results clamped to [0, 1]. Every draw comes
 * from the caller's seeded generator. A gaussian without scale (NULL) gives the
 * clamped mean and draws nothing. */
void nets_sample_pixels(const nets_model *m, const float *mean, const float *scale, long n,
                        float *out, rng_t *rng);

/* Sum over pixels of log p(x | decoded parameters) for each of n images
 * (gaussian: log N(x | mean, scale^2), NAN when scale is NULL; bernoulli:
 * x log p + (1-x) log(1-p) with p >= 1e-30 and 1 - p >= 2^-25, since a float
 * sigmoid rounds to 1 for logits above about 17). */
void nets_loglik(const nets_model *m, const float *x, const float *mean, const float *scale, long n,
                 double *out);

#endif
