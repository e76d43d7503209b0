/* vbmem_solve.c -- owns the vbmem-solve command: one JSON job in (stdin or a file), one JSON result
 * or error out; the dispatch of a job to its family (memory jobs: solve_memory.c; temporal jobs:
 * solve_temporal.c) and the result helpers both families use. */
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
#include "tools/solve_job.h"
#include "vbmem/vbmem.h"
#include "wire/codes.h"
#include "wire/memory.h"
#include "wire/parse.h"
#include "wire/temporal.h"
#include "wire/values.h"

/* Exit statuses. */
#define SOLVE_EXIT_OK  0
#define SOLVE_EXIT_IO  1
#define SOLVE_EXIT_JOB 2

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

/* ---- results: what both job families share ----------------------------- */

/* Seconds on the monotonic clock. */
double solve_now(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return 0.0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* obj[key] = val (stolen; NULL val counts as out of memory). */
vbm_status solve_set(json_t *obj, const char *key, json_t *val, vbm_error *err)
{
    if (json_object_set_new(obj, key, val) != 0)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory building the result (%s)", key);
    return VBM_OK;
}

/* A failure st of the library call made for op, recorded in err: kept as the
 * library recorded it, with "op: " before a message that names no field. */
vbm_status solve_lib_failed(vbm_error *err, vbm_status st, const char *op)
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
vbm_status solve_result_failed(vbm_error *err, vbm_status st)
{
    if (st != VBM_ENOMEM)
        st = VBM_ENUMERIC;
    err->status = st;
    return st;
}

/* obj[key] = nested array of doubles a with the given shape. */
vbm_status solve_set_array(json_t *obj, const char *key, const double *a, int ndim,
                           const long *dims, vbm_error *err)
{
    json_t *arr;
    vbm_status st;

    st = wire_new_array(a, ndim, dims, 0, key, &arr, err);
    if (st != VBM_OK)
        return solve_result_failed(err, st);
    return solve_set(obj, key, arr, err);
}

/* Contract in tools/solve_job.h. */
vbm_status solve_job_run(const json_t *root, json_t **result, vbm_error *err)
{
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
    return solve_memory_run(root, result, err);
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
