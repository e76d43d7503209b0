/* vbmem_solve.c -- owns the vbmem-solve command: one JSON job in (stdin or a file), one JSON result
 * or error out. */
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

#include "tools/solve_job.h"
#include "vbmem/vbmem.h"
#include "wire/codes.h"
#include "wire/memory.h"
#include "wire/parse.h"
#include "wire/temporal.h"
#include "wire/values.h"

#define SOLVE_MAX_ITER 1000000

/* Exit statuses. */
#define SOLVE_EXIT_OK  0
#define SOLVE_EXIT_IO  1
#define SOLVE_EXIT_JOB 2

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

#ifndef VBMEM_SOLVE_NO_MAIN
static const char solve_usage[] =
    "usage: vbmem-solve [JOB.json | -]\n"
    "       vbmem-solve --help\n"
    "\n"
    "Reads one JSON job from JOB.json (or stdin when absent or \"-\"), runs it with\n"
    "libvbmem " VBM_VERSION_STRING " and prints one JSON object on stdout.\n"
    "\n"
    "  op: write | append | refit | elbo | sample | read | resize | export\n"
    "  model: {kind, code_size, rows, clusters, groups, sigma_z2, shift, u0,\n"
    "          sigma2_b0, s_floor, dkm_addr_var, retain_max, memo_k, path_prior,\n"
    "          path_alpha} (write only)\n"
    "  prior: {R0: K x C, U0: K x K}                            (write with model)\n"
    "  memory: a memory as printed in \"posterior\" by an earlier job\n"
    "  codes: {mu: T x C or a float32 tensor {dtype, shape, data}, sigma2: number\n"
    "          or T x C}\n"
    "  iterations, tolerance, seed, init (auto|prior|kmeans++|random|current),\n"
    "  addresses, trace, threads, count, cluster, clusters, rows,\n"
    "  mode (sample|mean|mean_map, read only)\n"
    "\n"
    "Exit status: 0 success; 2 the job failed ({\"error\": {status, message, field}}\n"
    "on stdout); 1 usage or I/O error (message on stderr).\n"
    "The format is documented in proto/solve-job.md.\n";
#endif

/* ---- errors ------------------------------------------------------------ */

/* Cut s before a UTF-8 sequence left incomplete at its end (by truncation). */
static void solve_utf8_trim(char *s)
{
    size_t n = strlen(s), i = n, need;
    unsigned char lead;

    while (i > 0 && n - i < 3 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
        i--;
    if (i == 0)
        return;
    lead = (unsigned char)s[i - 1];
    if (lead < 0xC0)
        return;
    need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
    if (n - (i - 1) < need)
        s[i - 1] = '\0';
}

/* New JSON string for text. A message cut inside a UTF-8 character loses that
 * character; any other invalid byte becomes '?'. NULL only when out of memory. */
static json_t *solve_text(const char *text)
{
    json_t *s = json_string(text);
    char *copy;
    size_t i;

    if (s != NULL)
        return s;
    copy = strdup(text);
    if (copy == NULL)
        return NULL;
    solve_utf8_trim(copy);
    s = json_string(copy);
    if (s == NULL) {
        for (i = 0; copy[i] != '\0'; i++) {
            if ((unsigned char)copy[i] >= 0x80)
                copy[i] = '?';
        }
        s = json_string(copy);
    }
    free(copy);
    return s;
}

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

/* Seconds on the monotonic clock. */
static double solve_now(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return 0.0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* obj[key] = val (stolen; NULL val counts as out of memory). */
static vbm_status solve_set(json_t *obj, const char *key, json_t *val, vbm_error *err)
{
    if (json_object_set_new(obj, key, val) != 0)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory building the result (%s)", key);
    return VBM_OK;
}

/* A failure st of the library call made for op, recorded in err: kept as the
 * library recorded it, with "op: " before a message that names no field. */
static vbm_status solve_lib_failed(vbm_error *err, vbm_status st, const char *op)
{
    char text[VBM_MSG_LEN];

    if (err->field[0] == '\0') { /* no field: msg is the bare text */
        memcpy(text, err->msg, sizeof text);
        vbm_fail(err, st, NULL, "%s: %s", op, text);
    }
    return st;
}

/* A result that could not be encoded (st from a wire writer, recorded in err):
 * a non-finite value in a result is a numeric failure of the computation; the
 * field and message the writer recorded (the value's path) stand. */
static vbm_status solve_result_failed(vbm_error *err, vbm_status st)
{
    if (st != VBM_ENOMEM)
        st = VBM_ENUMERIC;
    err->status = st;
    return st;
}

/* obj[key] = nested array of doubles a with the given shape. */
static vbm_status solve_set_array(json_t *obj, const char *key, const double *a, int ndim,
                                  const long *dims, vbm_error *err)
{
    json_t *arr;
    vbm_status st;

    st = wire_new_array(a, ndim, dims, 0, key, &arr, err);
    if (st != VBM_OK)
        return solve_result_failed(err, st);
    return solve_set(obj, key, arr, err);
}

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

/* ---- temporal jobs (seed 003's sequence memory; proto/solve-job.md "Temporal jobs") ---- */

/* The ops of temporal jobs and the fields each takes (besides "op"). */
static const struct {
    const char *name;
    const char *const fields[12];
    const char *required[3];
} solve_temporal_ops[] = {
    {"temporal_write",
     {"model", "sequences", "iterations", "sweeps", "restarts", "tolerance", "seed", "start",
      "warm_start", NULL},
     {"model", "sequences", NULL}},
    {"temporal_append",
     {"memory", "sequences", "iterations", "sweeps", "tolerance", NULL},
     {"memory", "sequences", NULL}},
    {"temporal_infer", {"memory", "sequence", "sweeps", NULL}, {"memory", "sequence", NULL}},
    {"temporal_sample", {"memory", "length", "seed", NULL}, {"memory", "length", NULL}},
    {"temporal_continue",
     {"memory", "prefix", "steps", "samples", "seed", "sweeps", NULL},
     {"memory", "prefix", "steps"}},
    {NULL, {NULL}, {NULL}}};

/* result[key] = the rows x cols matrix a (non-finite: a numeric failure naming key). */
static vbm_status solve_temporal_matrix(json_t *result, const char *key, const double *a, long rows,
                                        long cols, vbm_error *err)
{
    long dims[2] = {rows, cols};
    return solve_set_array(result, key, a, 2, dims, err);
}

/* Run a job whose op starts with "temporal_". */
static vbm_status solve_temporal_run(const json_t *root, const char *name, json_t *result,
                                     vbm_error *err)
{
    const char *keys[12];
    vbm_temporal *m = NULL;
    vbm_temporal_config cfg;
    vbm_temporal_opts o;
    vbm_temporal_trace tr = {0, NULL};
    vbm_sequence *seqs = NULL, q = {0, 0, NULL};
    double *x1 = NULL, *x2 = NULL, *x3 = NULL, t0, fe = NAN;
    int *bi = NULL, n = 0, op = -1, D;
    long it = 100, sweeps = 2, restarts, len = 0, steps = 0, ns = 0, isweeps = 50;
    uint64_t seed = 0;
    json_t *post = NULL;
    vbm_status st;

    for (int i = 0; solve_temporal_ops[i].name != NULL; i++)
        if (strcmp(name, solve_temporal_ops[i].name) == 0)
            op = i;
    if (op < 0)
        return vbm_fail(err, VBM_EINVAL, "op",
                        "unknown op \"%s\" (the temporal ops are temporal_write, temporal_append, "
                        "temporal_infer, temporal_sample, temporal_continue)",
                        name);
    keys[0] = "op";
    for (int i = 0; i < 12 && solve_temporal_ops[op].fields[i] != NULL; i++) {
        keys[i + 1] = solve_temporal_ops[op].fields[i];
        keys[i + 2] = NULL;
    }
    if ((st = wire_check_keys(root, "", keys, err)) != VBM_OK) {
        if (strstr(err->msg, "unknown member") != NULL) {
            char f[sizeof err->field];
            memcpy(f, err->field, sizeof f);
            vbm_fail(err, VBM_EINVAL, f, "%s: not used by op \"%s\" (or unknown)", f, name);
        }
        return st;
    }
    for (int i = 0; i < 3 && solve_temporal_ops[op].required[i] != NULL; i++)
        if (json_object_get(root, solve_temporal_ops[op].required[i]) == NULL)
            return vbm_fail(err, VBM_EINVAL, solve_temporal_ops[op].required[i],
                            "required by op \"%s\"", name);
    if ((st = solve_set(result, "op", json_string(name), err)) != VBM_OK)
        return st;
    /* the memory: a new one from "model", or the JSON form of an earlier result */
    if (op == 0) {
        const json_t *mv = json_object_get(root, "model"), *cs;
        long csz = 0;
        cs = json_is_object(mv) ? json_object_get(mv, "code_size") : NULL;
        if (cs == NULL)
            return vbm_fail(err, VBM_EINVAL, "model.code_size", "required (D)");
        if ((st = wire_get_long(cs, "model.code_size", 1, VBM_MAX_CODE_SIZE, &csz, err)) != VBM_OK)
            return st;
        if ((st = wire_temporal_config_read(mv, "model", (int)csz, &cfg, err)) != VBM_OK)
            return st;
        if ((st = vbm_temporal_create(&cfg, &m, err)) != VBM_OK)
            return solve_lib_failed(err, st, name);
    } else {
        st = wire_temporal_from_json(json_object_get(root, "memory"), &m, err);
        if (st != VBM_OK) {
            vbm_error_rebase(err, "memory"); /* "memory.export", or "memory" */
            return st;
        }
    }
    vbm_temporal_summary(m, &cfg, NULL, NULL, NULL);
    D = cfg.code_size;
    vbm_temporal_opts_default(&o);
    restarts = o.restarts;
    st = wire_opt_long(root, "iterations", 1, SOLVE_MAX_ITER, &it, err);
    if (st == VBM_OK)
        st = wire_opt_long(root, "sweeps", 1, 1000, op == 2 || op == 4 ? &isweeps : &sweeps, err);
    if (st == VBM_OK)
        st = wire_opt_long(root, "restarts", 1, 1000, &restarts, err);
    if (st == VBM_OK)
        st = wire_opt_seed(root, "seed", &seed, err);
    if (st == VBM_OK)
        st = wire_opt_long(root, "length", 1, VBM_MAX_FRAMES, &len, err);
    if (st == VBM_OK)
        st = wire_opt_long(root, "steps", 1, VBM_MAX_FRAMES, &steps, err);
    if (st == VBM_OK)
        st = wire_opt_long(root, "samples", 0, 100000, &ns, err);
    if (st == VBM_OK)
        st = wire_opt_double(root, "tolerance", 0.0, 1.0, &o.tol, err);
    if (st == VBM_OK)
        st = wire_temporal_start_read(root, "start", &o.start, err);
    if (st == VBM_OK)
        st = wire_opt_bool(root, "warm_start", &o.warm_start, err);
    if (st == VBM_OK && (op == 0 || op == 1))
        st = wire_read_sequences(json_object_get(root, "sequences"), "sequences", VBM_MAX_FRAMES, D,
                                 2, &seqs, &n, err);
    if (st == VBM_OK && (op == 2 || op == 4))
        st = wire_read_sequence(json_object_get(root, op == 2 ? "sequence" : "prefix"),
                                op == 2 ? "sequence" : "prefix", VBM_MAX_FRAMES, D, 1, &q, err);
    if (st != VBM_OK)
        goto out;
    o.iterations = (int)it;
    o.sweeps = (int)sweeps;
    o.restarts = (int)restarts;
    o.seed = seed;
    t0 = solve_now();
    switch (op) {
    case 0:
    case 1:
        st = op == 0 ? vbm_temporal_write(m, seqs, n, &o, &tr, err)
                     : vbm_temporal_append(m, seqs, n, &o, &tr, err);
        if (st != VBM_OK) {
            st = solve_lib_failed(err, st, name);
            break;
        }
        {
            long dims[1] = {tr.iterations};
            long sq = 0, fr = 0;
            vbm_temporal_summary(m, NULL, &sq, &fr, &fe);
            st = solve_set(result, "free_energy", wire_number(fe), err);
            if (st == VBM_OK)
                st = solve_set_array(result, "free_energy_trace", tr.free_energy, 1, dims, err);
            if (st == VBM_OK)
                st = solve_set(result, "iterations", json_integer(tr.iterations), err);
            if (st == VBM_OK)
                st = solve_set(result, "sequences", json_integer(sq), err);
            if (st == VBM_OK)
                st = solve_set(result, "frames", json_integer(fr), err);
            if (st == VBM_OK && (st = wire_temporal_to_json(m, &post, err)) == VBM_OK) {
                st = solve_set(result, "posterior", post, err);
                post = NULL;
            }
        }
        break;
    case 2:
        x1 = vbm_calloc((size_t)q.T * cfg.components, sizeof(double));
        x2 = vbm_calloc((size_t)q.T * cfg.components * cfg.attributes, sizeof(double));
        if (!x1 || !x2) {
            st = vbm_fail(err, VBM_ENOMEM, "sequence", "out of memory");
            break;
        }
        if ((st = vbm_temporal_infer(m, &q, (int)isweeps, x1, x2, &fe, err)) != VBM_OK) {
            st = solve_lib_failed(err, st, name);
            break;
        }
        st = solve_temporal_matrix(result, "identities", x1, q.T, cfg.components, err);
        if (st == VBM_OK)
            st = solve_temporal_matrix(result, "attributes", x2, q.T,
                                       (long)cfg.components * cfg.attributes, err);
        if (st == VBM_OK)
            st = solve_set(result, "free_energy", wire_number(fe), err);
        break;
    case 3:
        x1 = vbm_calloc((size_t)len * D, sizeof(double));
        x2 = vbm_calloc((size_t)len * cfg.components * cfg.attributes, sizeof(double));
        bi = vbm_calloc((size_t)len * cfg.components, sizeof(int));
        if (!x1 || !x2 || !bi) {
            st = vbm_fail(err, VBM_ENOMEM, "length", "out of memory for %ld frames", len);
            break;
        }
        if ((st = vbm_temporal_sample(m, len, seed, x1, bi, x2, err)) != VBM_OK) {
            st = solve_lib_failed(err, st, name);
            break;
        }
        st = solve_temporal_matrix(result, "codes", x1, len, D, err);
        if (st == VBM_OK)
            st = solve_set(result, "identities", wire_int_matrix(bi, len, cfg.components), err);
        if (st == VBM_OK)
            st = solve_temporal_matrix(result, "attributes", x2, len,
                                       (long)cfg.components * cfg.attributes, err);
        break;
    case 4:
        if ((double)steps * D * (ns + 1) > (double)VBM_MAX_ELEMENTS) {
            st = vbm_fail(err, VBM_EINVAL, "steps", "%ld steps of %ld samples are too many", steps,
                          ns);
            break;
        }
        x1 = vbm_calloc((size_t)steps * D, sizeof(double));
        x2 = vbm_calloc((size_t)steps * cfg.components, sizeof(double));
        x3 = ns > 0 ? vbm_calloc((size_t)ns * steps * D, sizeof(double)) : NULL;
        if (!x1 || !x2 || (ns > 0 && !x3)) {
            st = vbm_fail(err, VBM_ENOMEM, "steps", "out of memory");
            break;
        }
        if ((st = vbm_temporal_continue(m, &q, steps, (int)isweeps, seed, (int)ns, x1, x2, x3, err))
            != VBM_OK) {
            st = solve_lib_failed(err, st, name);
            break;
        }
        st = solve_temporal_matrix(result, "mean", x1, steps, D, err);
        if (st == VBM_OK)
            st = solve_temporal_matrix(result, "identities", x2, steps, cfg.components, err);
        if (st == VBM_OK && ns > 0) {
            long dims[3] = {ns, steps, D};
            st = solve_set_array(result, "samples", x3, 3, dims, err);
        }
        break;
    }
    if (st == VBM_OK)
        st = solve_set(result, "seconds", json_real(solve_now() - t0), err);
out:
    vbm_temporal_trace_free(&tr);
    wire_sequences_free(seqs, n);
    free((void *)q.y);
    free(x1);
    free(x2);
    free(x3);
    free(bi);
    json_decref(post);
    vbm_temporal_free(m);
    return st;
}

/* Contract in tools/solve_job.h. */
vbm_status solve_job_run(const json_t *root, json_t **result, vbm_error *err)
{
    solve_job job;
    vbm_status st;

    *result = NULL;
    {
        const json_t *opv = json_is_object(root) ? json_object_get(root, "op") : NULL;
        if (json_is_string(opv) && strncmp(json_string_value(opv), "temporal_", 9) == 0) {
            *result = json_object();
            if (*result == NULL)
                return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory building the result");
            st = solve_temporal_run(root, json_string_value(opv), *result, err);
            if (st != VBM_OK) {
                json_decref(*result);
                *result = NULL;
            }
            return st;
        }
    }
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

/* ---- main ---------------------------------------------------------------- */

/* Growing output buffer for solve_dump. failed latches the first allocation
 * failure: jansson 2.14 ignores the status of some of its dump writes (object
 * keys), so a failure must not be forgotten by later successful writes. */
typedef struct {
    char *text;
    size_t len;
    size_t cap;
    int failed;
} solve_buffer;

/* jansson dump callback: append size bytes of data to the solve_buffer. */
static int solve_buffer_append(const char *data, size_t size, void *ctx)
{
    solve_buffer *b = ctx;
    size_t cap;
    char *grown;

    if (b->failed)
        return -1;
    if (size >= b->cap - b->len) {
        cap = b->cap > 0 ? b->cap : 4096;
        while (size >= cap - b->len) {
            if (cap > ((size_t)-1) / 2) {
                b->failed = 1;
                return -1;
            }
            cap *= 2;
        }
        grown = realloc(b->text, cap);
        if (grown == NULL) {
            b->failed = 1;
            return -1;
        }
        b->text = grown;
        b->cap = cap;
    }
    memcpy(b->text + b->len, data, size);
    b->len += size;
    b->text[b->len] = '\0';
    return 0;
}

/* Contract in tools/solve_job.h. */
vbm_status solve_dump(const json_t *v, char **text)
{
    solve_buffer b = {NULL, 0, 0, 0};

    *text = NULL;
    if (json_dump_callback(v, solve_buffer_append, &b, JSON_COMPACT) != 0 || b.failed
        || solve_buffer_append("\n", 1, &b) != 0) {
        free(b.text);
        return VBM_ENOMEM;
    }
    *text = b.text;
    return VBM_OK;
}

/* Contract in tools/solve_job.h. */
char *solve_error_text(const vbm_error *err)
{
    json_t *root = json_object(), *e = json_object();
    char *text = NULL;

    if (root != NULL && e != NULL && json_object_set(root, "error", e) == 0
        && json_object_set_new(e, "status", json_string(vbm_status_name(err->status))) == 0
        && json_object_set_new(e, "message", solve_text(err->msg)) == 0
        && json_object_set_new(e, "field",
                               err->field[0] != '\0' ? solve_text(err->field) : json_null())
               == 0) {
        if (solve_dump(root, &text) != VBM_OK)
            text = NULL;
    }
    json_decref(e);
    json_decref(root);
    return text;
}

#ifndef VBMEM_SOLVE_NO_MAIN
/* Print the error object of err on stdout. Returns 0, or -1 on an output error. */
static int solve_print_error(const vbm_error *err)
{
    char *text = solve_error_text(err);
    int rc;

    if (text != NULL) {
        rc = fputs(text, stdout) < 0 ? -1 : 0;
        free(text);
    } else {
        /* Out of memory: fall back to a fixed object. */
        rc = fputs("{\"error\":{\"status\":\"nomem\",\"message\":\"out of memory\","
                   "\"field\":null}}\n",
                   stdout)
                     < 0
                 ? -1
                 : 0;
    }
    if (rc != 0 || fflush(stdout) != 0)
        return -1;
    return 0;
}

/* Load the job from path (stdin when NULL). Returns 0 with *job set, 1 after an
 * I/O error (reported on stderr), 2 after a parse error or out of memory (in
 * *err). */
static int solve_load(const char *path, json_t **job, vbm_error *err)
{
    FILE *fp = stdin;
    json_error_t jerr;
    char *text = NULL, *grown;
    size_t len = 0, cap = 0, got;
    int io_error, oom = 0;

    *job = NULL;
    if (path != NULL) {
        fp = fopen(path, "rb");
        if (fp == NULL) {
            fprintf(stderr, "vbmem-solve: cannot open %s: %s\n", path, strerror(errno));
            return 1;
        }
    }
    for (;;) {
        if (len == cap) {
            cap = cap > 0 ? 2 * cap : 65536;
            grown = realloc(text, cap);
            if (grown == NULL) {
                oom = 1;
                break;
            }
            text = grown;
        }
        got = fread(text + len, 1, cap - len, fp);
        len += got;
        if (got == 0)
            break;
    }
    io_error = ferror(fp);
    if (fp != stdin)
        fclose(fp);
    if (io_error) {
        free(text);
        fprintf(stderr, "vbmem-solve: error reading %s\n", path != NULL ? path : "stdin");
        return 1;
    }
    memset(&jerr, 0, sizeof jerr);
    if (!oom && wire_parse(text != NULL ? text : "", len, JSON_REJECT_DUPLICATES, job, &jerr) != 0)
        *job = NULL;
    free(text);
    if (oom) {
        vbm_fail(err, VBM_ENOMEM, NULL, "job: out of memory reading the JSON input");
        return 2;
    }
    /* jansson reports some allocation failures with no text and line -1 */
    if (*job == NULL
        && (json_error_code(&jerr) == json_error_out_of_memory || jerr.text[0] == '\0')) {
        vbm_fail(err, VBM_ENOMEM, NULL, "job: out of memory reading the JSON input");
        return 2;
    }
    if (*job == NULL) {
        vbm_fail(err, VBM_EFORMAT, NULL, "job: invalid JSON at line %d, column %d: %s", jerr.line,
                 jerr.column, jerr.text);
        return 2;
    }
    return 0;
}

/* Run one job: exit 0 with the result on stdout, 2 with an error object on
 * stdout when the job fails, 1 on a usage or I/O error (message on stderr). */
int main(int argc, char **argv)
{
    const char *path = NULL;
    vbm_error err;
    json_t *root = NULL, *result = NULL;
    char *text;
    vbm_status st;
    int rc;

    if (argc > 2) {
        fputs(solve_usage, stderr);
        return SOLVE_EXIT_IO;
    }
    if (argc == 2) {
        if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
            fputs(solve_usage, stdout);
            return fflush(stdout) == 0 ? SOLVE_EXIT_OK : SOLVE_EXIT_IO;
        }
        if (argv[1][0] == '-' && argv[1][1] != '\0') {
            fprintf(stderr, "vbmem-solve: unknown option %s\n", argv[1]);
            fputs(solve_usage, stderr);
            return SOLVE_EXIT_IO;
        }
        if (strcmp(argv[1], "-") != 0)
            path = argv[1];
    }

    memset(&err, 0, sizeof err);
    rc = solve_load(path, &root, &err);
    if (rc == 1)
        return SOLVE_EXIT_IO;
    st = rc == 0 ? VBM_OK : err.status;
    if (st == VBM_OK)
        st = solve_job_run(root, &result, &err);
    json_decref(root);

    if (st != VBM_OK) {
        json_decref(result);
        return solve_print_error(&err) == 0 ? SOLVE_EXIT_JOB : SOLVE_EXIT_IO;
    }
    /* Encode completely before writing so that stdout never gets half a result. */
    st = solve_dump(result, &text);
    json_decref(result);
    if (st != VBM_OK) {
        vbm_fail(&err, VBM_ENOMEM, NULL, "out of memory encoding the result");
        return solve_print_error(&err) == 0 ? SOLVE_EXIT_JOB : SOLVE_EXIT_IO;
    }
    rc = fputs(text, stdout) < 0 || fflush(stdout) != 0;
    free(text);
    if (rc != 0) {
        fprintf(stderr, "vbmem-solve: error writing the result\n");
        return SOLVE_EXIT_IO;
    }
    return SOLVE_EXIT_OK;
}
#endif /* VBMEM_SOLVE_NO_MAIN */
