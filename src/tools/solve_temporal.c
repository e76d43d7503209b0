/* solve_temporal.c -- owns vbmem-solve's temporal jobs (seed 003's sequence memory;
 * proto/solve-job.md "Temporal jobs"): their options, the run on libvbmem's vbm_temporal and
 * their results. */
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

/* Contract in tools/solve_impl.h. */
vbm_status solve_temporal_run(const json_t *root, const char *name, json_t *result, vbm_error *err)
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
