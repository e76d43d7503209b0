/* fuzz_solve.c -- owns the libFuzzer harness of vbmem-solve jobs: a JSON job through the command's
 * own parser and runner (solve_job_run), every op. */
#include <stdint.h>

#include "fuzz_check.h"
#include "tools/solve_job.h"
#include "wire/parse.h"

/* 1 when the integer member key of obj is present and above hi. */
static int fuzz_above(const json_t *obj, const char *key, json_int_t hi)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_integer(v) && json_integer_value(v) > hi;
}

/* Jobs that are valid but only slow (many iterations, threads, large models or
 * many pseudo-codes) are skipped: they would be reported as timeouts, not defects.
 * Every bound is far above what the seeds use. */
static int fuzz_too_costly(const json_t *job)
{
    const json_t *model = json_object_get(job, "model"), *mem = json_object_get(job, "memory");
    const json_t *cfg = json_object_get(mem, "config");

    return fuzz_above(job, "iterations", 30) || fuzz_above(job, "count", 256)
           || fuzz_above(job, "threads", 1) || fuzz_above(job, "clusters", 32)
           || fuzz_above(job, "rows", 16) || fuzz_above(model, "clusters", 32)
           || fuzz_above(model, "rows", 16) || fuzz_above(model, "groups", 8)
           || fuzz_above(model, "code_size", 64) || fuzz_above(mem, "frames", 2000)
           || fuzz_above(cfg, "clusters", 32) || fuzz_above(cfg, "rows", 16)
           || (json_object_get(job, "iterations") == NULL
               && json_object_get(job, "tolerance") != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t jerr;
    json_t *job = NULL, *result = NULL;
    vbm_error err;
    vbm_status st;
    char *text = NULL;

    if (wire_parse((const char *)data, size, JSON_REJECT_DUPLICATES, &job, &jerr) != 0)
        return 0;
    if (fuzz_too_costly(job)) {
        json_decref(job);
        return 0;
    }
    memset(&err, 0, sizeof err);
    st = solve_job_run(job, &result, &err);
    if (st == VBM_OK) {
        FUZZ_CHECK(result != NULL && json_is_object(result), "a job succeeded without a result");
        FUZZ_CHECK(json_is_string(json_object_get(result, "op")), "a result without its op");
        if (solve_dump(result, &text) == VBM_OK) {
            /* the result is valid JSON that parses back to itself */
            json_t *back = json_loads(text, 0, &jerr);
            FUZZ_CHECK(back != NULL, "the result does not parse back: %s", jerr.text);
            json_decref(back);
            free(text);
        }
        json_decref(result);
    } else {
        FUZZ_CHECK(result == NULL, "a failed job left a result");
        FUZZ_CHECK(err.msg[0] != '\0' && st != VBM_OK, "a failed job without a message");
        /* the error object the command prints is valid JSON */
        text = solve_error_text(&err);
        if (text != NULL) {
            json_t *back = json_loads(text, 0, &jerr);
            FUZZ_CHECK(back != NULL && json_is_object(json_object_get(back, "error")),
                       "the error object does not parse back: %s", jerr.text);
            json_decref(back);
            free(text);
        }
    }
    json_decref(job);
    return 0;
}
