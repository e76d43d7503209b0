/* solve_memory.c -- owns vbmem-solve's memory jobs (write, append, refit, elbo, sample, read,
 * resize, export; proto/solve-job.md): parsing a job into its options and running it on
 * libvbmem. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "tools/solve_impl.h"
#include "vbmem/vbmem.h"
#include "wire/codes.h"
#include "wire/memory.h"
#include "wire/parse.h"
#include "wire/temporal.h"
#include "wire/values.h"

typedef enum {
    SOLVE_WRITE,
    SOLVE_APPEND,
    SOLVE_REFIT,
    SOLVE_ELBO,
    SOLVE_SAMPLE,
    SOLVE_READ,
    SOLVE_RESIZE,
    SOLVE_EXPORT
} solve_op;

/* One bit per top-level job field. */
enum {
    SOLVE_F_OP = 1u << 0,
    SOLVE_F_MODEL = 1u << 1,
    SOLVE_F_PRIOR = 1u << 2,
    SOLVE_F_MEMORY = 1u << 3,
    SOLVE_F_CODES = 1u << 4,
    SOLVE_F_ITERATIONS = 1u << 5,
    SOLVE_F_TOLERANCE = 1u << 6,
    SOLVE_F_SEED = 1u << 7,
    SOLVE_F_INIT = 1u << 8,
    SOLVE_F_ADDRESSES = 1u << 9,
    SOLVE_F_TRACE = 1u << 10,
    SOLVE_F_COUNT = 1u << 11,
    SOLVE_F_CLUSTER = 1u << 12,
    SOLVE_F_CLUSTERS = 1u << 13,
    SOLVE_F_ROWS = 1u << 14,
    SOLVE_F_THREADS = 1u << 15,
    SOLVE_F_MODE = 1u << 16,
    /* the options of the fitting ops (write, append, refit, resize) */
    SOLVE_F_FIT = SOLVE_F_ITERATIONS | SOLVE_F_TOLERANCE | SOLVE_F_SEED | SOLVE_F_INIT
                  | SOLVE_F_ADDRESSES | SOLVE_F_TRACE | SOLVE_F_THREADS
};

typedef struct {
    const char *name;
    unsigned bit;
} solve_field;

static const solve_field solve_fields[] = {{"op", SOLVE_F_OP},
                                           {"model", SOLVE_F_MODEL},
                                           {"prior", SOLVE_F_PRIOR},
                                           {"memory", SOLVE_F_MEMORY},
                                           {"codes", SOLVE_F_CODES},
                                           {"iterations", SOLVE_F_ITERATIONS},
                                           {"tolerance", SOLVE_F_TOLERANCE},
                                           {"seed", SOLVE_F_SEED},
                                           {"init", SOLVE_F_INIT},
                                           {"addresses", SOLVE_F_ADDRESSES},
                                           {"trace", SOLVE_F_TRACE},
                                           {"count", SOLVE_F_COUNT},
                                           {"cluster", SOLVE_F_CLUSTER},
                                           {"clusters", SOLVE_F_CLUSTERS},
                                           {"rows", SOLVE_F_ROWS},
                                           {"threads", SOLVE_F_THREADS},
                                           {"mode", SOLVE_F_MODE},
                                           {NULL, 0}};

/* What each op accepts and requires ("model or memory" for write is checked apart). */
typedef struct {
    const char *name;
    solve_op op;
    unsigned allowed;
    unsigned required;
} solve_op_info;

static const solve_op_info solve_ops[] = {
    {"write", SOLVE_WRITE,
     SOLVE_F_OP | SOLVE_F_MODEL | SOLVE_F_PRIOR | SOLVE_F_MEMORY | SOLVE_F_CODES | SOLVE_F_FIT,
     SOLVE_F_CODES},
    {"append", SOLVE_APPEND, SOLVE_F_OP | SOLVE_F_MEMORY | SOLVE_F_CODES | SOLVE_F_FIT,
     SOLVE_F_MEMORY | SOLVE_F_CODES},
    {"refit", SOLVE_REFIT, SOLVE_F_OP | SOLVE_F_MEMORY | SOLVE_F_CODES | SOLVE_F_FIT,
     SOLVE_F_MEMORY},
    {"elbo", SOLVE_ELBO, SOLVE_F_OP | SOLVE_F_MEMORY | SOLVE_F_CODES | SOLVE_F_ADDRESSES,
     SOLVE_F_MEMORY | SOLVE_F_CODES},
    {"sample", SOLVE_SAMPLE,
     SOLVE_F_OP | SOLVE_F_MEMORY | SOLVE_F_COUNT | SOLVE_F_CLUSTER | SOLVE_F_SEED,
     SOLVE_F_MEMORY | SOLVE_F_COUNT},
    {"read", SOLVE_READ,
     SOLVE_F_OP | SOLVE_F_MEMORY | SOLVE_F_CODES | SOLVE_F_SEED | SOLVE_F_ADDRESSES | SOLVE_F_MODE,
     SOLVE_F_MEMORY | SOLVE_F_CODES},
    {"resize", SOLVE_RESIZE,
     SOLVE_F_OP | SOLVE_F_MEMORY | SOLVE_F_CLUSTERS | SOLVE_F_ROWS | SOLVE_F_FIT, SOLVE_F_MEMORY},
    {"export", SOLVE_EXPORT, SOLVE_F_OP | SOLVE_F_MEMORY, SOLVE_F_MEMORY},
    {NULL, SOLVE_WRITE, 0, 0}};

/* A parsed job. Owns mem, mu and s2. */
typedef struct {
    const solve_op_info *op;
    vbm_memory *mem;
    long T;     /* number of codes (0: no codes given) */
    int C;      /* their width */
    double *mu; /* T x C */
    double *s2; /* T x C, NULL: all zero */
    vbm_write_opts opts;
    int want_addresses;
    long count;
    int cluster;
    int new_H;
    int new_K;
    vbm_team *team;          /* "threads" > 1: the fit's team (opts.team) */
    vbm_read_mode read_mode; /* read: "mode" (VBM_READ_SAMPLE when absent) */
} solve_job;

/* ---- job parsing -------------------------------------------------------- */

/* Release everything a job owns and reset it. */
static void solve_job_clear(solve_job *job)
{
    vbm_memory_free(job->mem);
    vbm_team_free(job->team);
    free(job->mu);
    free(job->s2);
    memset(job, 0, sizeof *job);
    job->cluster = -1;
    vbm_write_opts_default(&job->opts);
}

/* Check the top-level members of the job and pick its op. */
static vbm_status solve_parse_fields(const json_t *root, solve_job *job, vbm_error *err)
{
    const char *key, *name;
    json_t *val, *op;
    unsigned present = 0, bit, missing;
    int i;

    json_object_foreach((json_t *)root, key, val)
    {
        bit = 0;
        for (i = 0; solve_fields[i].name != NULL; i++) {
            if (strcmp(key, solve_fields[i].name) == 0) {
                bit = solve_fields[i].bit;
                break;
            }
        }
        if (bit == 0)
            return vbm_fail(err, VBM_EINVAL, key, "unknown field");
        present |= bit;
    }
    op = json_object_get(root, "op");
    if (op == NULL)
        return vbm_fail(err, VBM_EINVAL, "op",
                        "missing (expected write, append, refit, elbo, "
                        "sample, read, resize or export)");
    if (!json_is_string(op))
        return vbm_fail(err, VBM_EINVAL, "op", "expected a string, got %s", wire_type_name(op));
    name = json_string_value(op);
    for (i = 0; solve_ops[i].name != NULL; i++) {
        if (strcmp(name, solve_ops[i].name) == 0) {
            job->op = &solve_ops[i];
            break;
        }
    }
    if (job->op == NULL)
        return vbm_fail(err, VBM_EINVAL, "op",
                        "unknown op \"%s\" (expected write, append, refit, elbo, sample, "
                        "read, resize or export)",
                        name);
    for (i = 0; solve_fields[i].name != NULL; i++) {
        bit = solve_fields[i].bit;
        if ((present & bit) && !(job->op->allowed & bit))
            return vbm_fail(err, VBM_EINVAL, solve_fields[i].name, "not used by op \"%s\"",
                            job->op->name);
    }
    missing = job->op->required & ~present;
    for (i = 0; solve_fields[i].name != NULL; i++) {
        if (missing & solve_fields[i].bit)
            return vbm_fail(err, VBM_EINVAL, solve_fields[i].name, "required by op \"%s\"",
                            job->op->name);
    }
    if (job->op->op == SOLVE_WRITE) {
        if (!(present & (SOLVE_F_MODEL | SOLVE_F_MEMORY)))
            return vbm_fail(err, VBM_EINVAL, "model",
                            "required by op \"write\" (or give a memory)");
        if ((present & SOLVE_F_MODEL) && (present & SOLVE_F_MEMORY))
            return vbm_fail(err, VBM_EINVAL, "memory",
                            "op \"write\" takes either model or memory, not both");
        if ((present & SOLVE_F_PRIOR) && !(present & SOLVE_F_MODEL))
            return vbm_fail(err, VBM_EINVAL, "prior",
                            "only allowed with model (a memory carries its own prior)");
    }
    return VBM_OK;
}

/* Read job.codes {mu, sigma2} into job->T, C, mu, s2 (the codes form of the wire). */
static vbm_status solve_parse_codes(const json_t *codes, solve_job *job, vbm_error *err)
{
    wire_codes c;
    vbm_status st;

    st = wire_read_codes(codes, "codes", VBM_MAX_FRAMES, VBM_MAX_CODE_SIZE, &c, err);
    if (st != VBM_OK)
        return st;
    job->T = c.T;
    job->C = c.C;
    job->mu = c.mu;
    job->s2 = c.s2;
    return VBM_OK;
}

/* Read the optional job.prior {R0, U0} for the configuration cfg into fresh
 * buffers *R0 and *U0 (NULL when absent; owned by the caller even on failure). */
static vbm_status solve_parse_prior(const json_t *prior, const vbm_config *cfg, double **R0,
                                    double **U0, vbm_error *err)
{
    static const char *const keys[] = {"R0", "U0", NULL};
    const json_t *v;
    long K = cfg->rows, C = cfg->code_size, dims[2];
    vbm_status st;

    *R0 = NULL;
    *U0 = NULL;
    if (prior == NULL)
        return VBM_OK;
    if (!json_is_object(prior))
        return vbm_fail(err, VBM_EINVAL, "prior", "expected an object {R0, U0}, got %s",
                        wire_type_name(prior));
    st = wire_check_keys(prior, "prior", keys, err);
    if (st != VBM_OK)
        return st;
    dims[0] = K;
    v = json_object_get(prior, "R0");
    if (v != NULL) {
        *R0 = vbm_calloc((size_t)K * (size_t)C, sizeof(double));
        if (*R0 == NULL)
            return vbm_fail(err, VBM_ENOMEM, "prior.R0", "out of memory");
        dims[1] = C;
        st = wire_read_array(v, "prior.R0", 2, dims, 0, *R0, err);
        if (st != VBM_OK)
            return st;
    }
    v = json_object_get(prior, "U0");
    if (v != NULL) {
        *U0 = vbm_calloc((size_t)K * (size_t)K, sizeof(double));
        if (*U0 == NULL)
            return vbm_fail(err, VBM_ENOMEM, "prior.U0", "out of memory");
        dims[1] = K;
        st = wire_read_array(v, "prior.U0", 2, dims, 0, *U0, err);
        if (st != VBM_OK)
            return st;
    }
    return VBM_OK;
}

/* Build job->mem from job.model (and job.prior). */
static vbm_status solve_parse_model(const json_t *root, solve_job *job, vbm_error *err)
{
    const json_t *prior = json_object_get(root, "prior");
    vbm_config cfg;
    double *R0 = NULL, *U0 = NULL;
    vbm_status st;

    st = wire_config_read(json_object_get(root, "model"), "model", 0, job->C, &cfg, err);
    if (st != VBM_OK)
        return st;
    if (job->T > 0 && cfg.code_size != job->C)
        return vbm_fail(err, VBM_EINVAL, "model.code_size",
                        "%d does not match the width of codes.mu (%d)", cfg.code_size, job->C);
    st = vbm_config_check(&cfg, err);
    if (st != VBM_OK) {
        vbm_error_rebase(err, "model");
        return st;
    }
    st = solve_parse_prior(prior, &cfg, &R0, &U0, err);
    if (st == VBM_OK) /* libvbmem names prior.R0 / prior.U0 as the job does */
        st = vbm_memory_create(&cfg, R0, U0, &job->mem, err);
    free(R0);
    free(U0);
    return st;
}

/* The read modes by their names in a job's "mode". */
static const struct {
    const char *name;
    vbm_read_mode mode;
} solve_read_modes[] = {
    {"sample", VBM_READ_SAMPLE}, {"mean", VBM_READ_MEAN}, {"mean_map", VBM_READ_MEAN_MAP}};

/* Optional member key of root: a read mode name, stored in *out (unchanged when
 * absent). VBM_EINVAL naming key for anything else. */
static vbm_status solve_opt_read_mode(const json_t *root, const char *key, vbm_read_mode *out,
                                      vbm_error *err)
{
    const json_t *v = json_object_get(root, key);
    size_t i;

    if (v == NULL)
        return VBM_OK;
    if (!json_is_string(v))
        return vbm_fail(err, VBM_EINVAL, key,
                        "expected \"sample\", \"mean\" or \"mean_map\", got %s", wire_type_name(v));
    for (i = 0; i < sizeof solve_read_modes / sizeof solve_read_modes[0]; i++) {
        if (strcmp(json_string_value(v), solve_read_modes[i].name) == 0) {
            *out = solve_read_modes[i].mode;
            return VBM_OK;
        }
    }
    return vbm_fail(err, VBM_EINVAL, key,
                    "unknown read mode \"%.64s\" (expected \"sample\", \"mean\" or "
                    "\"mean_map\")",
                    json_string_value(v));
}

/* Read the options of the fitting and sampling ops. */
static vbm_status solve_parse_options(const json_t *root, solve_job *job, vbm_error *err)
{
    long x;
    int init = (int)job->opts.init;
    vbm_status st;

    x = job->opts.max_iter;
    st = wire_opt_long(root, "iterations", 0, SOLVE_MAX_ITER, &x, err);
    if (st != VBM_OK)
        return st;
    job->opts.max_iter = (int)x;
    st = wire_opt_double(root, "tolerance", 0.0, HUGE_VAL, &job->opts.tol, err);
    if (st == VBM_OK)
        st = wire_opt_seed(root, "seed", &job->opts.seed, err);
    if (st == VBM_OK)
        st = wire_opt_init(root, "init", &init, err);
    if (st == VBM_OK)
        st = wire_opt_bool(root, "addresses", &job->want_addresses, err);
    if (st == VBM_OK)
        st = wire_opt_bool(root, "trace", &job->opts.want_trace, err);
    if (st != VBM_OK)
        return st;
    job->opts.init = (vbm_init)init;
    job->opts.want_addresses = job->want_addresses;
    x = 1;
    st = wire_opt_long(root, "threads", 1, 64, &x, err);
    if (st != VBM_OK)
        return st;
    if (x > 1) {
        job->team = vbm_team_new((int)x);
        if (job->team == NULL)
            return vbm_fail(err, VBM_ENOMEM, "threads", "out of memory for a team of %ld threads",
                            x);
        job->opts.team = job->team;
    }

    x = 0;
    st = wire_opt_long(root, "count", 1, VBM_MAX_FRAMES, &x, err);
    if (st != VBM_OK)
        return st;
    job->count = x;
    x = 0;
    st = wire_opt_long(root, "clusters", 0, VBM_MAX_CLUSTERS, &x, err);
    if (st != VBM_OK)
        return st;
    job->new_H = (int)x;
    x = 0;
    st = wire_opt_long(root, "rows", 0, VBM_MAX_ROWS, &x, err);
    if (st != VBM_OK)
        return st;
    job->new_K = (int)x;
    return solve_opt_read_mode(root, "mode", &job->read_mode, err);
}

/* Checks that need both the memory and the rest of the job. */
static vbm_status solve_check_against_memory(const json_t *root, solve_job *job, vbm_error *err)
{
    const vbm_config *cfg = &job->mem->cfg;
    vbm_codes codes;
    long x;
    vbm_status st;

    if (job->T > 0) {
        if (job->C != cfg->code_size)
            return vbm_fail(err, VBM_EINVAL, "codes.mu",
                            "codes have %d columns but the memory's code_size is %d", job->C,
                            cfg->code_size);
        codes.T = job->T;
        codes.C = job->C;
        codes.mu = job->mu;
        codes.s2 = job->s2;
        st = vbm_codes_check(job->mem, &codes, err);
        if (st != VBM_OK) {
            vbm_error_rebase(err, "codes");
            return st;
        }
    }
    if (job->op->op == SOLVE_SAMPLE) {
        if (job->count > VBM_MAX_ELEMENTS / cfg->code_size)
            return vbm_fail(err, VBM_EINVAL, "count",
                            "%ld codes of size %d exceed the limit of %ld values", job->count,
                            cfg->code_size, (long)VBM_MAX_ELEMENTS);
        x = -1;
        st = wire_opt_long(root, "cluster", -1, (long)cfg->clusters - 1, &x, err);
        if (st != VBM_OK)
            return st;
        job->cluster = (int)x;
    }
    return VBM_OK;
}

/* Parse and check the whole job into *job. */
static vbm_status solve_parse(const json_t *root, solve_job *job, vbm_error *err)
{
    const json_t *v;
    vbm_status st;

    if (!json_is_object(root))
        return vbm_fail(err, VBM_EINVAL, NULL, "job: expected a JSON object, got %s",
                        wire_type_name(root));
    st = solve_parse_fields(root, job, err);
    if (st != VBM_OK)
        return st;
    v = json_object_get(root, "codes");
    if (v != NULL) {
        st = solve_parse_codes(v, job, err);
        if (st != VBM_OK)
            return st;
    }
    st = solve_parse_options(root, job, err);
    if (st != VBM_OK)
        return st;
    v = json_object_get(root, "memory");
    if (v != NULL) {
        st = wire_memory_from_json(v, &job->mem, err);
        if (st != VBM_OK)
            return st;
    } else {
        st = solve_parse_model(root, job, err);
        if (st != VBM_OK)
            return st;
    }
    return solve_check_against_memory(root, job, err);
}

/* ---- results ------------------------------------------------------------ */

/* result.addresses = {s, w_mu, w_cov} of a. */
static vbm_status solve_set_addresses(json_t *result, const vbm_addresses *a, vbm_error *err)
{
    json_t *o;
    vbm_status st;

    if (a->s == NULL || a->w_mu == NULL)
        return vbm_fail(err, VBM_ENUMERIC, NULL,
                        "the library returned no addresses although they were requested");
    st = wire_addresses(a, "addresses", &o, err);
    if (st != VBM_OK)
        return solve_result_failed(err, st);
    return solve_set(result, "addresses", o, err);
}

/* result.posterior = the JSON form of mem. */
static vbm_status solve_set_posterior(json_t *result, const vbm_memory *mem, vbm_error *err)
{
    json_t *m;
    vbm_status st;

    st = wire_memory_to_json(mem, &m, err);
    if (st != VBM_OK)
        return solve_result_failed(err, st);
    return solve_set(result, "posterior", m, err);
}

/* Add the members of a fitting op's result (elbo, iterations, converged, trace,
 * addresses). */
static vbm_status solve_set_fit(json_t *result, const solve_job *job, const vbm_write_result *res,
                                vbm_error *err)
{
    json_t *arr;
    vbm_status st;
    int i;

    st = solve_set(result, "elbo", wire_elbo(&res->elbo), err);
    if (st == VBM_OK)
        st = solve_set(result, "iterations", json_integer(res->iterations), err);
    if (st == VBM_OK)
        st = solve_set(result, "converged", json_boolean(res->converged), err);
    if (st != VBM_OK)
        return st;
    if (job->opts.want_trace) {
        if (res->trace == NULL)
            return solve_set(result, "trace", json_null(), err);
        arr = json_array();
        if (solve_set(result, "trace", arr, err) != VBM_OK)
            return VBM_ENOMEM;
        for (i = 0; i <= res->iterations; i++) {
            if (json_array_append_new(arr, wire_number(res->trace[i])) != 0)
                return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory building the trace");
        }
    }
    if (job->want_addresses)
        return solve_set_addresses(result, &res->addr, err);
    return VBM_OK;
}

/* Run write, append, refit or resize and fill result. A library failure is
 * reported as the library recorded it (status, field, message). */
static vbm_status solve_run_fit(solve_job *job, json_t *result, double *seconds, vbm_error *err)
{
    vbm_codes codes = {job->T, job->C, job->mu, job->s2};
    vbm_write_result res;
    double t0, before = NAN, after = NAN;
    vbm_status st;

    memset(&res, 0, sizeof res);
    t0 = solve_now();
    switch (job->op->op) {
    case SOLVE_WRITE: st = vbm_write(job->mem, &codes, &job->opts, &res, err); break;
    case SOLVE_APPEND: st = vbm_append(job->mem, &codes, &job->opts, &res, err); break;
    case SOLVE_REFIT:
        st = vbm_refit(job->mem, job->T > 0 ? &codes : NULL, &job->opts, &res, err);
        break;
    default:
        st = vbm_resize(job->mem, job->new_H, job->new_K, &job->opts, &before, &after, &res, err);
        break;
    }
    *seconds = solve_now() - t0;
    if (st != VBM_OK)
        return solve_lib_failed(err, st, job->op->name);
    if (job->op->op == SOLVE_RESIZE) {
        st = solve_set(result, "elbo_before", wire_number(before), err);
        if (st == VBM_OK)
            st = solve_set(result, "elbo_after", wire_number(after), err);
    }
    if (st == VBM_OK)
        st = solve_set_fit(result, job, &res, err);
    if (st == VBM_OK)
        st = solve_set_posterior(result, job->mem, err);
    vbm_write_result_free(&res);
    return st;
}

/* Run elbo and fill result. */
static vbm_status solve_run_elbo(solve_job *job, json_t *result, double *seconds, vbm_error *err)
{
    vbm_codes codes = {job->T, job->C, job->mu, job->s2};
    vbm_addresses addr;
    vbm_elbo elbo;
    double t0;
    vbm_status st;

    memset(&addr, 0, sizeof addr);
    memset(&elbo, 0, sizeof elbo);
    t0 = solve_now();
    st = vbm_elbo_eval(job->mem, &codes, &elbo, job->want_addresses ? &addr : NULL, err);
    *seconds = solve_now() - t0;
    if (st != VBM_OK)
        return solve_lib_failed(err, st, "elbo");
    st = solve_set(result, "elbo", wire_elbo(&elbo), err);
    if (st == VBM_OK && job->want_addresses)
        st = solve_set_addresses(result, &addr, err);
    if (job->want_addresses)
        vbm_addresses_free(&addr);
    return st;
}

/* Run sample and fill result. */
static vbm_status solve_run_sample(solve_job *job, json_t *result, double *seconds, vbm_error *err)
{
    long C = job->mem->cfg.code_size, G = job->mem->cfg.groups, dims[2];
    double *z;
    int *s;
    json_t *arr;
    double t0;
    vbm_status st;

    z = vbm_calloc((size_t)job->count * (size_t)C, sizeof(double));
    s = vbm_calloc((size_t)job->count * (size_t)G, sizeof(int));
    if (z == NULL || s == NULL) {
        free(z);
        free(s);
        return vbm_fail(err, VBM_ENOMEM, "count", "out of memory for %ld codes", job->count);
    }
    t0 = solve_now();
    st = vbm_sample(job->mem, job->count, job->opts.seed, job->cluster, z, s, err);
    *seconds = solve_now() - t0;
    if (st != VBM_OK) {
        solve_lib_failed(err, st, "sample");
    } else {
        dims[0] = job->count;
        dims[1] = C;
        st = solve_set_array(result, "codes", z, 2, dims, err);
        if (st == VBM_OK) {
            dims[1] = G;
            st = wire_new_int_array(s, 2, dims, "clusters", &arr, err);
            if (st != VBM_OK)
                solve_result_failed(err, st);
            else
                st = solve_set(result, "clusters", arr, err);
        }
    }
    free(z);
    free(s);
    return st;
}

/* Run read and fill result. */
static vbm_status solve_run_read(solve_job *job, json_t *result, double *seconds, vbm_error *err)
{
    vbm_codes codes = {job->T, job->C, job->mu, job->s2};
    vbm_addresses addr;
    vbm_read_opts ro;
    long dims[2];
    double *z, t0;
    vbm_status st;

    z = vbm_calloc((size_t)job->T * (size_t)job->C, sizeof(double));
    if (z == NULL)
        return vbm_fail(err, VBM_ENOMEM, "codes", "out of memory for %ld codes", job->T);
    memset(&addr, 0, sizeof addr);
    vbm_read_opts_default(&ro);
    ro.mode = job->read_mode;
    t0 = solve_now();
    st = vbm_read(job->mem, &codes, &ro, job->opts.seed, z, &addr, err);
    *seconds = solve_now() - t0;
    if (st != VBM_OK) {
        solve_lib_failed(err, st, "read");
    } else {
        dims[0] = job->T;
        dims[1] = job->C;
        st = solve_set_array(result, "codes", z, 2, dims, err);
        if (st == VBM_OK)
            st = solve_set_addresses(result, &addr, err);
        vbm_addresses_free(&addr);
    }
    free(z);
    return st;
}

/* Run the parsed job, filling result (owned by the caller). */
static vbm_status solve_run(solve_job *job, json_t *result, vbm_error *err)
{
    double seconds = 0.0, t0;
    vbm_status st;

    st = solve_set(result, "op", json_string(job->op->name), err);
    if (st != VBM_OK)
        return st;
    switch (job->op->op) {
    case SOLVE_WRITE:
    case SOLVE_APPEND:
    case SOLVE_REFIT:
    case SOLVE_RESIZE: st = solve_run_fit(job, result, &seconds, err); break;
    case SOLVE_ELBO: st = solve_run_elbo(job, result, &seconds, err); break;
    case SOLVE_SAMPLE: st = solve_run_sample(job, result, &seconds, err); break;
    case SOLVE_READ: st = solve_run_read(job, result, &seconds, err); break;
    case SOLVE_EXPORT:
        t0 = solve_now();
        st = solve_set_posterior(result, job->mem, err);
        seconds = solve_now() - t0;
        break;
    }
    if (st != VBM_OK)
        return st;
    return solve_set(result, "seconds", json_real(seconds), err);
}

/* Contract in tools/solve_impl.h. */
vbm_status solve_memory_run(const json_t *root, json_t **result, vbm_error *err)
{
    solve_job job;
    vbm_status st;

    memset(&job, 0, sizeof job);
    solve_job_clear(&job);
    st = solve_parse(root, &job, err);
    if (st == VBM_OK) {
        *result = json_object();
        if (*result == NULL)
            st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory building the result");
    }
    if (st == VBM_OK)
        st = solve_run(&job, *result, err);
    solve_job_clear(&job);
    if (st != VBM_OK) {
        json_decref(*result);
        *result = NULL;
    }
    return st;
}
