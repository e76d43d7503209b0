/* hosted.c -- owns the hosted-model registry: directory scans, model loading and hashing,
 * reference-counted models and snapshots, the atomic swap on reload, and running a model's
 * encoder and RPM inference for the routes. */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <nettle/sha2.h>

#include "engine/hosted.h"
#include "nets/nets.h"
#include "nets/rpm.h"

#define MODELS_SUFFIX     ".safetensors"
#define MODELS_HASH_CHUNK 65536

struct eng_models {
    char *dir; /* owned; "" when none */
    char default_name[ENG_MODEL_NAME_LEN + 1];
    pthread_mutex_t lock;     /* guards current */
    eng_model_set *current;   /* one reference held by the registry */
    unsigned long generation; /* guarded by lock */
};

/* 1 when name is a valid model name: 1..ENG_MODEL_NAME_LEN characters of
 * [A-Za-z0-9._-], not starting with '.'. */
static int models_name_ok(const char *name, size_t n)
{
    size_t i;

    if (n == 0 || n > ENG_MODEL_NAME_LEN || name[0] == '.')
        return 0;
    for (i = 0; i < n; i++) {
        char c = name[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.'
              || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

void eng_model_ref(eng_model *m)
{
    atomic_fetch_add(&m->refs, 1);
}

void eng_model_unref(eng_model *m)
{
    if (m == NULL || atomic_fetch_sub(&m->refs, 1) != 1)
        return;
    nets_model_free(m->net);
    nets_rpm_free(m->rpm);
    free(m->path);
    free(m);
}

long eng_model_pixels(const eng_model *m)
{
    return (long)m->info->channels * m->info->height * m->info->width;
}

vbm_status eng_model_encode(const eng_model *m, const float *x, long n, const char *field,
                            double *mu, double *s2, vbm_error *err)
{
    vbm_error nerr;

    if (nets_encode(m->net, x, n, mu, s2, &nerr) != VBM_OK)
        return vbm_fail(err, nerr.status, field, "encoding: %s", nerr.msg);
    return VBM_OK;
}

vbm_status eng_model_rpm_infer(const eng_model *m, const float *x, int T, double *mean, double *var,
                               vbm_error *err)
{
    const int L = m->rpm_info->latent;
    double *ml = malloc((size_t)L * (size_t)T * sizeof *ml);
    double *vl = malloc((size_t)L * (size_t)T * sizeof *vl);
    vbm_error nerr;
    vbm_status st;

    if (ml == NULL || vl == NULL) {
        free(ml);
        free(vl);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for T = %d steps", T);
    }
    st = nets_rpm_infer(m->rpm, x, T, ml, vl, &nerr);
    if (st != VBM_OK) {
        vbm_fail(err, st, "observations", "%s", nerr.msg);
    } else {
        /* L x T from the solver, T x L for the caller (one row per step, like codes) */
        for (int l = 0; l < L; l++)
            for (int t = 0; t < T; t++) {
                mean[(size_t)t * L + l] = ml[(size_t)l * T + t];
                var[(size_t)t * L + l] = vl[(size_t)l * T + t];
            }
    }
    free(ml);
    free(vl);
    return st;
}

void eng_model_config(const eng_model *m, vbm_config *cfg)
{
    const nets_info *in = nets_model_info(m->net);
    vbm_kind kind = VBM_MIXTURE;
    vbm_error verr;

    if (vbm_kind_parse(in->kind, &kind, &verr) != VBM_OK)
        kind = VBM_MIXTURE; /* unreachable: the loader accepts the five kinds only */
    vbm_config_default(kind, in->code_size, cfg);
    vbm_config_set_rows(cfg, in->rows);
    if (kind == VBM_MIXTURE || kind == VBM_TREE)
        cfg->clusters = in->clusters;
    if (kind == VBM_TREE)
        cfg->groups = in->groups;
    cfg->sigma_z2 = in->session_sigma_z2;
    cfg->u0 = in->u0;
    if (cfg->shift)
        cfg->sigma2_b0 = in->sigma2_b0;
    cfg->s_floor = in->s_floor;
}

/* SHA-256 of the file at path as 64 hex characters, and its size. Fails with VBM_ENOMEM, or
 * VBM_EUNAVAIL when the file cannot be opened or read (the message names the file). */
static vbm_status models_hash_file(const char *path, char hex[65], long long *bytes, vbm_error *err)
{
    unsigned char digest[SHA256_DIGEST_SIZE];
    struct sha256_ctx ctx;
    unsigned char *buf;
    size_t got, i;
    long long total = 0;
    FILE *fp;
    int bad;

    buf = malloc(MODELS_HASH_CHUNK);
    if (buf == NULL)
        return vbm_fail(err, VBM_ENOMEM, NULL, "%.400s: out of memory", path);
    fp = fopen(path, "rb");
    if (fp == NULL) {
        free(buf);
        return vbm_fail(err, VBM_EUNAVAIL, NULL, "%.400s: cannot open: %s", path, strerror(errno));
    }
    sha256_init(&ctx);
    while ((got = fread(buf, 1, MODELS_HASH_CHUNK, fp)) > 0) {
        sha256_update(&ctx, got, buf);
        total += (long long)got;
    }
    bad = ferror(fp);
    fclose(fp);
    free(buf);
    if (bad)
        return vbm_fail(err, VBM_EUNAVAIL, NULL, "%.400s: read error", path);
    sha256_digest(&ctx, SHA256_DIGEST_SIZE, digest);
    for (i = 0; i < SHA256_DIGEST_SIZE; i++)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    *bytes = total;
    return VBM_OK;
}

/* The engine's description of an encoder/decoder from its networks' (the JSON texts are
 * borrowed: they live as long as the networks). */
static void models_copy_info(const nets_info *in, eng_model_info *out)
{
    out->channels = in->channels;
    out->height = in->height;
    out->width = in->width;
    out->likelihood =
        in->likelihood == NETS_GAUSSIAN ? ENG_LIKELIHOOD_GAUSSIAN : ENG_LIKELIHOOD_BERNOULLI;
    out->min_scale = in->min_scale;
    out->code_size = in->code_size;
    snprintf(out->kind, sizeof out->kind, "%s", in->kind);
    out->iterations = in->iterations;
    out->episode_length = in->episode_length;
    out->architecture_json = in->architecture_json;
    out->memory_json = in->memory_json;
    out->provenance_json = in->provenance_json;
    out->n_params = in->n_params;
}

/* The engine's description of an RPM from its networks' (JSON texts borrowed likewise). */
static void models_copy_rpm_info(const nets_rpm_info *in, eng_rpm_info *out)
{
    out->factors = in->factors;
    out->obs_size = in->obs_size;
    out->latent = in->latent;
    out->min_steps = in->min_steps;
    out->max_steps = in->max_steps;
    out->shared = in->shared;
    snprintf(out->kernel, sizeof out->kernel, "%s", in->kernel);
    out->architecture_json = in->architecture_json;
    out->provenance_json = in->provenance_json;
    out->n_params = in->n_params;
}

/* Load one model file as model `name` into *out (one reference). Fails with the loader's
 * status and message (nets_model_load, nets_rpm_load), those of models_hash_file, or
 * VBM_ENOMEM; *out is then NULL. */
static vbm_status models_load_one(const char *path, const char *name, eng_model **out,
                                  vbm_error *err)
{
    eng_model *m = calloc(1, sizeof *m);
    vbm_status st;

    *out = NULL;
    if (m == NULL)
        return vbm_fail(err, VBM_ENOMEM, NULL, "%.400s: out of memory", path);
    m->path = strdup(path);
    if (m->path == NULL) {
        free(m);
        return vbm_fail(err, VBM_ENOMEM, NULL, "%.400s: out of memory", path);
    }
    if (nets_file_is_rpm(path))
        st = nets_rpm_load(path, &m->rpm, err);
    else
        st = nets_model_load(path, &m->net, err);
    if (st == VBM_OK)
        st = models_hash_file(path, m->sha256, &m->file_bytes, err);
    if (st != VBM_OK) {
        nets_model_free(m->net);
        nets_rpm_free(m->rpm);
        free(m->path);
        free(m);
        return st;
    }
    snprintf(m->name, sizeof m->name, "%s", name);
    if (m->net != NULL)
        models_copy_info(nets_model_info(m->net), &m->net_info);
    else
        models_copy_rpm_info(nets_rpm_info_of(m->rpm), &m->rpm_meta);
    m->info = m->net != NULL ? &m->net_info : NULL;
    m->rpm_info = m->rpm != NULL ? &m->rpm_meta : NULL;
    m->loaded_at = eng_wall();
    atomic_init(&m->refs, 1);
    *out = m;
    return VBM_OK;
}

void eng_model_set_release(eng_model_set *set)
{
    int i;

    if (set == NULL || atomic_fetch_sub(&set->refs, 1) != 1)
        return;
    for (i = 0; i < set->n; i++)
        eng_model_unref(set->models[i]);
    free(set->models);
    free(set->failed);
    free(set);
}

static int models_cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Record a failure in set (capacity checked by the caller). */
static void models_add_failure(eng_model_set *set, const char *file, const char *msg)
{
    eng_model_failure *f = &set->failed[set->n_failed++];

    snprintf(f->file, sizeof f->file, "%s", file);
    snprintf(f->msg, sizeof f->msg, "%s", msg);
}

/* The sorted names of the directory's entries ending in MODELS_SUFFIX
 * (hidden files excluded). *names is malloc'd (free each, then the array).
 * Fails with VBM_EINVAL (unreadable directory) or VBM_ENOMEM. */
static vbm_status models_list_dir(const char *dir, char ***names, int *n, vbm_error *err)
{
    size_t suffix = strlen(MODELS_SUFFIX), len;
    struct dirent *de;
    char **list = NULL, **grown;
    int count = 0, cap = 0, i;
    DIR *d;

    *names = NULL;
    *n = 0;
    d = opendir(dir);
    if (d == NULL)
        return vbm_fail(err, VBM_EINVAL, "models-dir", "cannot read the models directory %s: %s",
                        dir, strerror(errno));
    while ((de = readdir(d)) != NULL) {
        len = strlen(de->d_name);
        if (de->d_name[0] == '.' || len <= suffix
            || strcmp(de->d_name + len - suffix, MODELS_SUFFIX) != 0)
            continue;
        if (count == cap) {
            cap = cap > 0 ? 2 * cap : 16;
            grown = realloc(list, (size_t)cap * sizeof *list);
            if (grown == NULL)
                goto oom;
            list = grown;
        }
        list[count] = strdup(de->d_name);
        if (list[count] == NULL)
            goto oom;
        count++;
    }
    closedir(d);
    if (count > 1)
        qsort(list, (size_t)count, sizeof *list, models_cmp_names);
    *names = list;
    *n = count;
    return VBM_OK;
oom:
    closedir(d);
    for (i = 0; i < count; i++)
        free(list[i]);
    free(list);
    return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory listing %s", dir);
}

/* Load every model file of dir into a new snapshot (one reference). */
static vbm_status models_scan(const char *dir, eng_model_set **out, vbm_error *err)
{
    char path[4096], name[ENG_MODEL_NAME_LEN + 1];
    vbm_error lerr; /* a file's failure to load, kept in the set */
    size_t suffix = strlen(MODELS_SUFFIX), stem;
    eng_model_set *set;
    char **names = NULL;
    int count = 0, i;
    eng_model *m;
    vbm_status st;

    *out = NULL;
    if (dir[0] != '\0') {
        st = models_list_dir(dir, &names, &count, err);
        if (st != VBM_OK)
            return st;
    }
    set = calloc(1, sizeof *set);
    if (set != NULL && count > 0) {
        set->models = calloc((size_t)count, sizeof *set->models);
        set->failed = calloc((size_t)count, sizeof *set->failed);
    }
    if (set == NULL || (count > 0 && (set->models == NULL || set->failed == NULL))) {
        for (i = 0; i < count; i++)
            free(names[i]);
        free(names);
        if (set != NULL) {
            free(set->models);
            free(set->failed);
            free(set);
        }
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory loading models");
    }
    atomic_init(&set->refs, 1);
    set->loaded_at = eng_wall();
    for (i = 0; i < count; i++) {
        stem = strlen(names[i]) - suffix;
        if (i >= ENG_MODELS_MAX) {
            models_add_failure(set, names[i],
                               "skipped: more than 256 model files in the directory");
        } else if (!models_name_ok(names[i], stem)) {
            models_add_failure(set, names[i],
                               "the file name is not a model name (1-64 characters of "
                               "A-Z a-z 0-9 . _ - before .safetensors)");
        } else if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= sizeof path) {
            models_add_failure(set, names[i], "the path is too long");
        } else {
            memcpy(name, names[i], stem);
            name[stem] = '\0';
            if (models_load_one(path, name, &m, &lerr) == VBM_OK)
                set->models[set->n++] = m;
            else
                models_add_failure(set, names[i], lerr.msg);
        }
        free(names[i]);
    }
    free(names);
    *out = set;
    return VBM_OK;
}

vbm_status eng_models_create(const char *dir, const char *default_name, eng_models **out,
                             vbm_error *err)
{
    eng_models *reg;
    vbm_status st;

    *out = NULL;
    if (default_name == NULL)
        default_name = "";
    if (default_name[0] != '\0' && !models_name_ok(default_name, strlen(default_name)))
        return vbm_fail(err, VBM_EINVAL, "default-model",
                        "\"%.80s\" is not a model name (1-64 characters of A-Z a-z 0-9 . _ -)",
                        default_name);
    reg = calloc(1, sizeof *reg);
    if (reg == NULL)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    reg->dir = strdup(dir != NULL ? dir : "");
    if (reg->dir == NULL) {
        free(reg);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    }
    snprintf(reg->default_name, sizeof reg->default_name, "%s", default_name);
    pthread_mutex_init(&reg->lock, NULL);
    st = eng_models_reload(reg, err);
    if (st != VBM_OK) {
        eng_models_free(reg);
        return st;
    }
    *out = reg;
    return VBM_OK;
}

vbm_status eng_models_reload(eng_models *reg, vbm_error *err)
{
    eng_model_set *set = NULL, *old;
    vbm_status st = models_scan(reg->dir, &set, err);

    if (st != VBM_OK)
        return st;
    pthread_mutex_lock(&reg->lock);
    old = reg->current;
    set->generation = ++reg->generation;
    reg->current = set;
    pthread_mutex_unlock(&reg->lock);
    eng_model_set_release(old);
    return VBM_OK;
}

void eng_models_free(eng_models *reg)
{
    if (reg == NULL)
        return;
    eng_model_set_release(reg->current);
    pthread_mutex_destroy(&reg->lock);
    free(reg->dir);
    free(reg);
}

eng_model_set *eng_models_snapshot(eng_models *reg)
{
    eng_model_set *set;

    pthread_mutex_lock(&reg->lock);
    set = reg->current;
    atomic_fetch_add(&set->refs, 1);
    pthread_mutex_unlock(&reg->lock);
    return set;
}

const char *eng_models_dir(const eng_models *reg)
{
    return reg->dir;
}

const char *eng_models_default_name(const eng_models *reg)
{
    return reg->default_name;
}

vbm_status eng_models_get(eng_models *reg, const char *name, eng_model **out, vbm_error *err)
{
    vbm_status st = eng_models_find(reg, name, out, err);

    if (st == VBM_OK && (*out)->rpm != NULL) {
        vbm_fail(err, VBM_EINVAL, "name",
                 "model \"%.80s\" is an RPM (a time-series recognition model without "
                 "encoder/decoder): it serves POST /v1/models/%.80s/infer only",
                 name, name);
        eng_model_unref(*out);
        *out = NULL;
        return VBM_EINVAL;
    }
    return st;
}

vbm_status eng_models_find(eng_models *reg, const char *name, eng_model **out, vbm_error *err)
{
    eng_model_set *set = eng_models_snapshot(reg);
    char hosted[256];
    size_t used = 0;
    int i;

    *out = NULL;
    hosted[0] = '\0';
    for (i = 0; i < set->n; i++) {
        if (strcmp(set->models[i]->name, name) == 0) {
            *out = set->models[i];
            eng_model_ref(*out);
            eng_model_set_release(set);
            return VBM_OK;
        }
        if (used < sizeof hosted) {
            int k = snprintf(hosted + used, sizeof hosted - used, "%s%s", i > 0 ? ", " : "",
                             set->models[i]->name);

            used += k > 0 ? (size_t)k : 0;
        }
    }
    i = set->n;
    eng_model_set_release(set);
    return vbm_fail(err, VBM_ENOTFOUND, "name", "no model named \"%.80s\" is hosted (%s%s)", name,
                    i == 0 ? "none is" : "hosted: ", i == 0 ? "" : hosted);
}
