/* recall_eval.h -- owns the measurement of recall on the bundled model: Fashion-MNIST test episodes
 * written to memories, damaged cues made from their own images, each read method's answers scored
 * by whether they end nearest to their own original. Shared by tests/test_recall.c and
 * bench/recall.c. */
#ifndef VBMEM_TESTS_RECALL_EVAL_H
#define VBMEM_TESTS_RECALL_EVAL_H

#include <stdint.h>

#include "engine/hosted.h"
#include "numerics/rng.h"

/* The test images and the model of a run. */
typedef struct {
    unsigned char *images; /* n x 784 */
    long n;
    eng_models *reg;
    eng_model *m;
} reval_data;

/* Load the Fashion-MNIST test images of fmnist_gz (an idx3 .gz file) and the model file
 * model_path (its directory as a model registry, the model named by its stem). Returns 0,
 * or -1 with a message on stderr (d is then empty). */
int reval_data_load(const char *model_path, const char *fmnist_gz, reval_data *d);

/* Release what reval_data_load loaded; d is left empty. */
void reval_data_free(reval_data *d);

/* 64 distinct images of d picked by the generator into x (64 x 784), at their bin centres
 * (v + 0.5) / 256. Never fails. */
void reval_episode(const reval_data *d, rng_t *rng, float *x);

/* The damaged cues. */
typedef enum {
    REVAL_TOP = 0,     /* top half blanked (0), with a mask */
    REVAL_BOTTOM,      /* bottom half blanked, with a mask */
    REVAL_LEFT,        /* left half blanked, with a mask */
    REVAL_RIGHT,       /* right half blanked, with a mask */
    REVAL_NOISE20,     /* Gaussian pixel noise sd 0.2, clipped to [0, 1], no mask */
    REVAL_NOISE35,     /* the same with sd 0.35 */
    REVAL_TOP_NOISE20, /* top half blanked (mask) and noise sd 0.2 on the rest */
    REVAL_CUES
} reval_cue;

/* How a run is made. */
typedef struct {
    int episodes;     /* episodes of 64 distinct test images (each picked by a seeded generator) */
    int steps;        /* read steps */
    int candidates;   /* recall mode's candidates per step */
    int sample_modes; /* also run the mean and sample modes (0: recall and the comparators) */
    uint64_t seed;    /* of the episodes, the writes, the noise and the reads */
    const char *dump; /* NULL, or a file that receives, for the first episode, float32 images
                       * of 784 values: the 64 originals, the 64 cues, then every recall
                       * step's 64 answers (bench/recall_picture.py draws them) */
    int first_view_code; /* reval_views_run: eng_recall_opts.first_view_code (an ablation) */
} reval_opts;

/* Fractions of cues whose answer ends nearest (Euclidean, pixels) to its own original
 * among the episode's 64, and mean squared errors to the own original. */
typedef struct {
    double recall, mean, sample; /* the read in each mode (mean/sample: NAN when not run) */
    double encdec;               /* encode-decode of the cue, no memory */
    double oracle;               /* the stored code nearest to the cue's code, decoded */
    double cue;                  /* the cue itself */
    double chance;               /* 1 / 64 */
    double mse_recall, mse_encdec, mse_cue;
    double seconds_recall; /* time in the recall-mode reads */
} reval_result;

/* The name of a cue ("top", "bottom", "left", "right", "noise 0.2", "noise 0.35",
 * "top + noise 0.2"). Never fails. */
const char *reval_cue_name(reval_cue c);

/* Measure cue c on the model file model_path (its directory is loaded as a model
 * registry) with the Fashion-MNIST test images of fmnist_gz (an idx3 .gz file).
 * Returns 0 and fills *out; -1 with a message on stderr when the data or the model
 * cannot be loaded or a call fails. */
int reval_run(const char *model_path, const char *fmnist_gz, reval_cue c, const reval_opts *o,
              reval_result *out);

/* Cues of J views of each stored item (fused reads), each view damaged independently. */
typedef enum {
    REVAL_VIEWS_CROP = 0, /* each view knows one random 14 x 14 window (a quarter), with a mask */
    REVAL_VIEWS_NOISE50,  /* each view: Gaussian pixel noise sd 0.5, clipped, no mask */
    REVAL_VIEWS_CUES
} reval_views_cue;

#define REVAL_MAX_VIEWS 8

/* Per number of views J (the first J of each frame's REVAL_MAX_VIEWS views, so that a
 * larger J adds views to the same cues): fractions of cues whose answer ends nearest to
 * its own original among the episode's 64. */
typedef struct {
    double recall;       /* the fused recall read (eng_recall_run with views J) */
    double fused_encdec; /* the RPM-fused code of the views' encodings, decoded (no memory) */
    double mean_encdec;  /* the plain mean of the views' code means, decoded (no memory) */
    double mse_recall;   /* mean squared pixel error of the recall answer to its original */
    double seconds;      /* time in the recall reads */
} reval_views_result;

/* The name of a views cue ("crop 14x14", "noise 0.5"). Never fails. */
const char *reval_views_cue_name(reval_views_cue c);

/* Measure fused reads of cue c for each J of Js (nJ values in 1 .. REVAL_MAX_VIEWS) over
 * o->episodes episodes (recall mode, o->steps, o->candidates; cue_noise 0 for crops,
 * "auto" for noise); out[i] for Js[i]. Returns 0, or -1 with a message on stderr. */
int reval_views_run(const char *model_path, const char *fmnist_gz, reval_views_cue c, const int *Js,
                    int nJ, const reval_opts *o, reval_views_result *out);

#endif
