/* gain_eval.h -- owns the measurement of what a memory adds to its reads on the bundled model:
 * Fashion-MNIST test episodes, damaged cues of their items read from the memory holding them, from
 * an empty memory (the model alone) and from another episode's memory, against the oracle (the
 * decode of the stored item's own code); familiarity, sample specificity and forgetting. Shared by
 * tests/test_gain.c and bench/gain.c. */
#ifndef VBMEM_TESTS_GAIN_EVAL_H
#define VBMEM_TESTS_GAIN_EVAL_H

#include <stdint.h>

/* The cues. Masked cues are read with their mask (the known pixels exact); noisy cues
 * without one, their noise level estimated by the read ("auto"). */
typedef enum {
    GAIN_TOP = 0, /* top half blanked (0), with the mask */
    GAIN_BOTTOM,  /* bottom half blanked, with the mask */
    GAIN_BLOCKS,  /* three random 10 x 10 blocks of each image blanked, with the mask */
    GAIN_NOISE20, /* Gaussian pixel noise sd 0.2, clipped to [0, 1], no mask */
    GAIN_NOISE35, /* the same with sd 0.35 */
    GAIN_CLEAN,   /* the image itself, no mask (familiarity of undamaged items) */
    GAIN_CUES
} gain_cue;

typedef struct {
    int episodes;     /* episodes of 64 distinct test images; episode e's "other" memory is
                       * episode e + 1's (the images of the two are disjoint) */
    int steps;        /* read steps */
    int candidates;   /* the read's sample candidates per step */
    uint64_t seed;    /* of the episodes, the writes, the cues and the reads */
    double sigma_z2;  /* > 0: the sessions' observation noise; 0: the model's session default */
    int blend;        /* eng_recall_opts.blend */
    int familiarity;  /* 1: also read another episode's cues, damaged alike, from each memory
                       * (the negatives of the familiarity AUC); 0: skip those reads, auc NaN */
    const char *dump; /* NULL, or a file that receives, for the first episode, float32 images
                       * of 784 values: the 64 originals, the 64 cues, every step's 64 answers
                       * of the memory's read, then the empty memory's last step's 64 */
} gain_opts;

/* Mean squared errors (on the unknown pixels for a masked cue, on the whole image for the
 * others) of the last step's answer to its own original, for the read from the memory that
 * holds the item, an empty memory and another episode's memory, and of the oracle. */
typedef struct {
    double mse_mem, mse_empty, mse_other, mse_oracle;
    double closure;       /* (mse_empty - mse_mem) / (mse_empty - mse_oracle) */
    double closure_other; /* the same for another episode's memory */
    /* fractions of cues whose answer is nearest (whole image) to its own original among the
     * episode's 64 */
    double near_mem, near_empty, near_other, near_oracle;
    double tv_mem, tv_empty, tv_oracle; /* mean total variation of an answer image */
    double auc;          /* familiarity: P(a stored item's cue is more familiar than the same
                          * damage of an item of another episode, read from the same memory) */
    double stopped_mean; /* mean of the memory reads' stopped_at */
    double seconds;      /* in the memory's reads */
} gain_result;

/* Measure cue c with the model file model_path and the Fashion-MNIST test images of
 * fmnist_gz (idx3 .gz). Returns 0 and fills *out; -1 with a message on stderr. */
int gain_run(const char *model_path, const char *fmnist_gz, gain_cue c, const gain_opts *o,
             gain_result *out);

/* The name of a cue ("top", "bottom", "blocks", "noise 0.2", "noise 0.35", "clean"). */
const char *gain_cue_name(gain_cue c);

/* Sample specificity: for 64 samples drawn from each episode's memory (vbm_sample, decoded
 * to the decoder's mean), the mean distance to the nearest image of the episode over the
 * mean distance to the nearest image of another episode (1: the memory makes samples no
 * more like its own episode than any other); for the empty memory; and the bound of the
 * oracle: the decodes of the stored items' own codes. Means over episodes. */
typedef struct {
    double mem, empty, oracle;
} gain_spec;

int gain_specificity(const char *model_path, const char *fmnist_gz, const gain_opts *o,
                     gain_spec *out);

/* Forgetting: every episode is written, its 64 items read from top-half cues (with the mask)
 * before and after the first `forget` items are forgotten by their own images (their codes,
 * as POST .../forget with observations gives them), on the exact path (the memory retains
 * its codes: the forgotten ones are removed and the rest refitted) and on the approximate
 * downdate (no codes retained). Per set of items (forgotten, kept), with the empty memory,
 * another episode's memory and the oracle read on the same cues:
 *   closure  = (E_empty - E_memory) / (E_empty - E_oracle),
 *   specific = (E_other - E_memory) / (E_other - E_oracle)
 * (E: the squared error on the unknown pixels, summed over the set): specific is what the
 * memory adds beyond any episode's memory of the same data, 0 when a read of the item fares
 * no better than on another episode's memory. */
typedef struct {
    double closure_before_forgotten, specific_before_forgotten;
    double closure_exact_forgotten, specific_exact_forgotten;
    double closure_down_forgotten, specific_down_forgotten;
    double closure_before_kept, closure_exact_kept, closure_down_kept;
} gain_forget_result;

int gain_forget(const char *model_path, const char *fmnist_gz, const gain_opts *o, int forget,
                gain_forget_result *out);

/* Resizing: every episode is written, then resized to new_H clusters (vbm_resize) twice --
 * from its kept codes, and from codes drawn from the memory itself (no codes kept) -- and
 * its items read from top-half cues before and after: the closure against the empty memory
 * with the oracle as ceiling, and sample specificity (as gain_specificity) before and
 * after. */
typedef struct {
    double closure_before, closure_kept, closure_drawn;
    double spec_before, spec_kept, spec_drawn;
} gain_resize_result;

int gain_resize(const char *model_path, const char *fmnist_gz, const gain_opts *o, int new_H,
                gain_resize_result *out);

#endif
