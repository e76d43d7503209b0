/* hosted.h -- owns the hosted-model registry: the model files of a directory loaded and validated
 * (src/nets), reference-counted models, immutable snapshots swapped atomically on reload
 * (sessions bind to models in engine/session.c), and the one way to run a model's networks
 * (encode, RPM inference; decoding is in engine/recall.h). The networks' own headers stay
 * inside the engine: this header exposes its own descriptions of a model. */
#ifndef VBMEM_ENGINE_MODELS_H
#define VBMEM_ENGINE_MODELS_H

#include <stdatomic.h>
#include <stddef.h>

#include "engine/clock.h"
#include "vbmem/vbmem.h"

#define ENG_MODELS_MAX     256 /* model files read from one directory */
#define ENG_MODEL_FILE_LEN 256 /* characters of a model file name kept in a failure */
#define ENG_MODEL_NAME_LEN 64  /* characters of a model name (its file's stem) */

/* The observation model of an encoder/decoder's decoder. */
typedef enum { ENG_LIKELIHOOD_GAUSSIAN = 0, ENG_LIKELIHOOD_BERNOULLI = 1 } eng_likelihood;

/* What the file of an encoder/decoder says about it, copied at load (the JSON texts are the
 * networks' own, valid while the model lives). */
typedef struct {
    int channels, height, width; /* observation shape */
    eng_likelihood likelihood;
    double min_scale; /* gaussian: scale = softplus(raw) + min_scale */
    int code_size;    /* C */
    /* vbmem.memory: the memory kind and the solver's defaults for sessions */
    char kind[16];
    int iterations, episode_length;
    /* raw JSON of the metadata, for GET /v1/models/{name} */
    const char *architecture_json, *memory_json, *provenance_json;
    size_t n_params; /* float32 weights in the file */
} eng_model_info;

/* What the file of an RPM (kind "rpm") says about it, copied at load (the JSON texts are the
 * networks' own, valid while the model lives). */
typedef struct {
    int factors;              /* J: observation rows, one recognition factor each */
    int obs_size;             /* D: values per observation x_jt */
    int latent;               /* L: latent dimensions, each with its own GP prior */
    int min_steps, max_steps; /* the T this model serves */
    int shared;               /* 1: one recognition network for every factor */
    char kernel[16];          /* "rbf" or "matern12" */
    const char *architecture_json, *provenance_json;
    size_t n_params;
} eng_rpm_info;

/* One loaded model file. Immutable after loading except refs; shared by the
 * registry's snapshots and by the sessions created with it. */
typedef struct eng_model eng_model;
struct eng_model {
    char name[ENG_MODEL_NAME_LEN + 1]; /* the file stem: [A-Za-z0-9._-], not starting with '.' */
    char *path;                        /* the file it was loaded from (owned) */
    char sha256[65];                   /* hex SHA-256 of the file's bytes */
    long long file_bytes;
    double loaded_at; /* wall clock */
    /* the networks (src/nets), opaque outside the engine: net for an encoder/decoder, rpm
     * for a model file of kind "rpm"; exactly one is set. eng_models_get never returns an
     * RPM (eng_models_find does). */
    struct nets_model *net;       /* owned; NULL for an RPM */
    struct nets_rpm *rpm;         /* owned; NULL for an encoder/decoder */
    const eng_model_info *info;   /* &net_info, NULL for an RPM */
    const eng_rpm_info *rpm_info; /* &rpm_meta, NULL for an encoder/decoder */
    eng_model_info net_info;      /* storage of info */
    eng_rpm_info rpm_meta;        /* storage of rpm_info */
    atomic_int refs;
};

/* A model file that did not load: the file name in the directory and the
 * loader's message. */
typedef struct {
    char file[ENG_MODEL_FILE_LEN];
    char msg[VBM_MSG_LEN];
} eng_model_failure;

/* What one load of the directory produced: the models in name order and the
 * failures in file order. Immutable; reference counted (a snapshot stays valid
 * for its holder after a reload replaced it). */
typedef struct {
    atomic_int refs;
    eng_model **models;
    int n;
    eng_model_failure *failed;
    int n_failed;
    double loaded_at;         /* wall clock of the scan */
    unsigned long generation; /* 1 for the first load, +1 per successful reload */
} eng_model_set;

typedef struct eng_models eng_models;

/* Create a registry over directory dir (NULL or "": no directory, no models)
 * with default_name the model sessions get when they name none ("" or NULL:
 * no default), and load it (eng_models_reload). Model files that do not load
 * are recorded as failures of the snapshot, not errors. On success *out is
 * owned by the caller (eng_models_free). Fails with VBM_EINVAL (dir cannot be
 * read, default_name is not a valid model name: the message says why),
 * VBM_ENOMEM; *out is then NULL. */
vbm_status eng_models_create(const char *dir, const char *default_name, eng_models **out,
                             vbm_error *err);

/* Scan the directory again: every "*.safetensors" file (at most
 * ENG_MODELS_MAX, in name order) is loaded with nets_model_load; the file stem
 * is the model's name. Then the new snapshot replaces the current one at once
 * (requests that hold models or the old snapshot keep them). Fails, keeping
 * the current snapshot, with VBM_EINVAL (the directory cannot be read) or
 * VBM_ENOMEM. */
vbm_status eng_models_reload(eng_models *reg, vbm_error *err);

/* Free the registry and drop its snapshot. NULL is a no-op. Models still
 * referenced elsewhere (sessions) live on until their last reference goes. */
void eng_models_free(eng_models *reg);

/* The current snapshot with a new reference (release with
 * eng_model_set_release). Never fails. */
eng_model_set *eng_models_snapshot(eng_models *reg);

/* Drop a reference to a snapshot; the last one unreferences its models and
 * frees it. NULL is a no-op. */
void eng_model_set_release(eng_model_set *set);

/* The directory and default model name given at creation ("" when none).
 * Never fail. */
const char *eng_models_dir(const eng_models *reg);
const char *eng_models_default_name(const eng_models *reg);

/* The model called name in the current snapshot, with a new reference for the
 * caller (eng_model_unref). Fails with VBM_ENOTFOUND (field "name"; the
 * message lists what is hosted when the list is short). */
vbm_status eng_models_get(eng_models *reg, const char *name, eng_model **out, vbm_error *err);

/* Like eng_models_get, but the model may also be an RPM (m->rpm set), and an
 * RPM is what eng_models_get refuses: it fails for one with VBM_EINVAL (field
 * "name", "model X is an RPM ... POST /v1/models/X/infer"), so that code that
 * needs an encoder/decoder never receives one. */
vbm_status eng_models_find(eng_models *reg, const char *name, eng_model **out, vbm_error *err);

/* Take one more reference. Never fails. */
void eng_model_ref(eng_model *m);

/* Drop a reference; the last one frees the model and its networks. NULL is a
 * no-op. */
void eng_model_unref(eng_model *m);

/* Encode n observations x (n x eng_model_pixels(m) floats in [0, 1]) with the encoder of m
 * (not an RPM) into mu and s2 (n x C each, the caller's). field names the observations in
 * a failure ("observations"). Fails with the encoder's status (VBM_EINVAL for a value it
 * refuses, VBM_ENOMEM), field `field`, message "encoding: " and the encoder's message; mu
 * and s2 are then unspecified. */
vbm_status eng_model_encode(const eng_model *m, const float *x, long n, const char *field,
                            double *mu, double *s2, vbm_error *err);

/* The posterior of the RPM m (m->rpm set) given T steps of observations x (J x T x D floats,
 * J = factors, D = obs_size, min_steps <= T <= max_steps): its mean and variance, T x L
 * each (one row per step; the caller's). Fails with the inference's status (VBM_EINVAL for
 * observations it refuses, VBM_ENUMERIC, VBM_ENOMEM), field "observations" and its
 * message; mean and var are then unspecified. */
vbm_status eng_model_rpm_infer(const eng_model *m, const float *x, int T, double *mean, double *var,
                               vbm_error *err);

/* Values per observation: channels x height x width. Never fails. */
long eng_model_pixels(const eng_model *m);

/* The memory configuration of the model's sessions: its vbmem.memory (kind, clusters,
 * rows, groups, u0, sigma2_b0, s_floor, and sigma_z2 from session_sigma_z2 when the file
 * gives one, else the trained sigma_z2) over vbm_config_default for that kind and C = the
 * model's code size. Never fails (the loader validated every field; vbm_config_check
 * still applies). */
void eng_model_config(const eng_model *m, vbm_config *cfg);

#endif
