/* recall.h -- owns the iterative read of App. G.2 over a session: the start (query images, query
 * codes, or a sample of the memory), then encode -> address and read -> decode, step after step,
 * under one read lock. */
#ifndef VBMEM_ENGINE_RECALL_H
#define VBMEM_ENGINE_RECALL_H

#include <stdint.h>

#include "engine/clock.h"
#include "engine/hosted.h"
#include "engine/session.h"
#include "vbmem/vbmem.h"

/* Random streams derived from a request's seed (eng_derive_seed). */
#define ENG_STREAM_START       1 /* the codes of a start drawn from memory */
#define ENG_STREAM_PIXELS      2 /* pixel draws of samples, decodes and the start of a read */
#define ENG_STREAM_STEP_PIXELS 3 /* pixel draws of read step i, from seed + i */
#define ENG_STREAM_CANDIDATES                                                                      \
    16 /* recall: candidate j of step i draws from seed + i, stream 16 + j */

/* Where the loop starts: query images (a model session), query codes, or
 * neither (a start drawn from the memory, G.2 step 1). */
typedef struct {
    const float *images;    /* (T views) x channels x height x width in [0, 1], or NULL */
    const vbm_codes *codes; /* or NULL; codes->C must be the memory's code size */
    long T;                 /* frames; for images and for a start from memory */
    int views;              /* images only: J views of each frame (0 or 1: one), frame-major
                             * (view j of frame t is image t J + j; the mask likewise), fused
                             * into one code per frame (engine/fuse.h) */
} eng_recall_query;

/* How each read step turns its query into the step's output. */
typedef enum {
    ENG_READ_SAMPLE = 0, /* App. G.2: vbm_read VBM_READ_SAMPLE (the paper's procedure; bit for
                          * bit the read of earlier versions when no mask is given) */
    ENG_READ_MEAN = 1,   /* vbm_read VBM_READ_MEAN: the posterior-mean read, no noise */
    ENG_READ_RECALL = 2  /* the memory's best answer for the cue: candidate codes from the
                          * memory (mean reads, draws, the query's own code, the best so far)
                          * scored by the likelihood of the cue's known values under the
                          * decoder (the codes, for a latent session) widened by cue_noise;
                          * the best is kept and combined with the cue's known values */
} eng_read_mode;

#define ENG_RECALL_MAX_CANDIDATES 256

typedef struct {
    int steps;        /* 1 .. 1000 */
    uint64_t seed;    /* step i reads with seed + i; the start and pixel draws use
                        * generators derived from seed */
    int pixel_sample; /* 0: each step's image is the decoder's mean (clamped to
                        * [0, 1]); 1: a pixel sample x ~ p(x | z) (G.2 step 5) */
    int want_addresses;
    eng_read_mode mode;
    int candidates;   /* ENG_READ_RECALL: memory draws scored per frame and step, 1 ..
                        * ENG_RECALL_MAX_CANDIDATES */
    double cue_noise; /* ENG_READ_RECALL: standard deviation of the noise on the cue's known
                        * values (pixels on the 0..1 scale, or code units); < 0: estimated per
                        * frame by maximum likelihood ("auto") */
    const unsigned char *mask; /* T x P (images) or T x C (codes): non-zero = known, with at
                                * least one known value per frame; NULL: every value known */
    int blend;                 /* ENG_READ_RECALL: 0 (the default): the answer is the decoder's
                                * mean at the chosen code (a mask's known values kept as given);
                                * 1: the cue's known values combined with that prediction under
                                * cue_noise (eng_cue_combine) */
    int first_view_code;       /* measurement only (bench-recall-views --first-view-code): with
                                * views, a frame's code is its first view's instead of the
                                * fusion of all (the views are still all scored); 0 in vbmemd */
} eng_recall_opts;

/* Result of a recall; owns every array (release with eng_recall_out_free). */
typedef struct {
    long T;
    int C;
    long P; /* values per image; 0 for a latent session */
    int steps;
    uint64_t version;    /* the session version read */
    double *start_codes; /* T x C codes drawn from memory when the query was empty, else NULL */
    float *start_images; /* T x P their decoded images (model session, empty query), else NULL */
    double *z;           /* steps x T x C read-out codes */
    float *x;            /* steps x T x P images decoded from z (model session), else NULL */
    vbm_addresses *addr; /* steps addressing posteriors when wanted, else NULL */
    double *familiarity; /* T: per frame, -|z - zhat|^2 / (2 sigma_z^2 n): z the code of the
                          * cue completed by the read (the encoding of the last answer with a
                          * mask, else the cue's own code; a read without a query: step 0's
                          * input), zhat the memory's reconstruction of it (mean read of its
                          * most probable cluster), n its dimensions (a code cue's known ones);
                          * 0: the memory holds z exactly */
    int stopped_at;      /* the first step from which every later step's codes and images are
                          * the same, bit for bit (steps - 1: still changing at the end) */
    double nets_s;       /* seconds in the encoder and decoder */
    double read_s;       /* seconds in libvbmem (sample, read) */
} eng_recall_out;

/* Run the iterative read of memory mem (which the caller keeps from changing) for the
 * query q, as o says. Plain reads (sample or mean mode, no mask, or no query): with a model
 * m, step 0 addresses the encoded query images, the query codes, or the encoding of
 * images decoded from T codes sampled from memory; each step reads (vbm_read in the mode)
 * with seed + i and decodes the read-out into the images the next step encodes; without a
 * model (latent) each step reads the previous read-out. Reads with a cue (recall mode, or
 * a mask): the first best code of each frame is chosen among the cue's own code and
 * 2 x candidates draws from memory by the likelihood of the cue's known values; then each
 * step encodes the answer so far and, in recall mode, scores the best so far, the query's
 * code, the mean read, the best cluster's mean read and `candidates` sample reads under
 * the cue's noise (cue_noise, or its maximum-likelihood estimate per frame), keeps the
 * best and answers with the cue's known values combined with its prediction (eng_cue_*:
 * the known values unchanged when the noise is 0); in sample and mean modes it reads in
 * its mode and keeps the known values. Step i's codes are the chosen code (images) or
 * the answer (latent). Recall mode without a query reads as sample mode. With J views of
 * each frame (q->views > 1): a frame's code is the RPM fusion (eng_fuse_codes, the memory's
 * eng_fuse_prior) of its views' codes -- for the start's own code, of the views' encodings;
 * for each step's query, of the encodings of each view's answer (its known values combined
 * with the prediction: the masked read's query code of the view alone); a
 * candidate's score is the sum over the views of their likelihoods (each view with its
 * own noise level), and the answer combines the prediction with every view
 * (eng_cue_combine_views); one image per frame comes back. Fails with
 * VBM_EINVAL (steps, mode, candidates, cue_noise or views out of range (views: field
 * "views_per_frame"), views of codes, a fused precision that is not > 0 (field
 * "observations[i]"), images without a model,
 * a mask without a query, a query that does not fit: field "query" or "observations"),
 * VBM_ENUMERIC, VBM_ENOMEM; *out is then empty. */
vbm_status eng_recall_run(const vbm_memory *mem, const eng_model *m, const eng_recall_query *q,
                          const eng_recall_opts *o, eng_recall_out *out, vbm_error *err);

/* eng_recall_run on session s's memory under its read lock; out->version is the
 * version read. Same failures. */
vbm_status eng_session_recall(eng_session *s, const eng_model *m, const eng_recall_query *q,
                              const eng_recall_opts *o, eng_recall_out *out, vbm_error *err);

/* Release the arrays of a recall result (each address, then the array).
 * NULL-safe; the result is left empty. */
void eng_recall_out_free(eng_recall_out *out);

/* Decode n codes z (n x C) with model m into images out (n x P, values in
 * [0, 1]): the decoder's mean clamped to [0, 1], or with pixel_sample a draw
 * from p(x | z) using a generator seeded with seed. Fails with VBM_ENOMEM or
 * VBM_EINVAL (the decoder's message). */
vbm_status eng_model_decode_images(const eng_model *m, const double *z, long n, int pixel_sample,
                                   uint64_t seed, float *out, vbm_error *err);

/* A seed derived from seed for random stream `stream` (0, 1, ...): distinct
 * streams give unrelated generators. Never fails. */
uint64_t eng_derive_seed(uint64_t seed, uint64_t stream);

#endif
