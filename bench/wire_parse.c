/* wire_parse.c -- owns bench-wire: parse time of a write body of nested JSON numbers (and of its
 * base64 form) by json_loadb and by wire_parse, measured in the same run. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common.h"
#include "wire/base64.h"
#include "wire/parse.h"

/* A growing text buffer. */
typedef struct {
    char *s;
    size_t len, cap;
} wb_buf;

/* Append the n bytes of s (NUL-terminated after them). */
static void wb_append(wb_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = 2 * (b->len + n + 1);
        b->s = realloc(b->s, b->cap);
        if (b->s == NULL) {
            fprintf(stderr, "bench-wire: out of memory\n");
            exit(1);
        }
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void wb_str(wb_buf *b, const char *s)
{
    wb_append(b, s, strlen(s));
}

static void wb_num(wb_buf *b, const char *fmt, double x)
{
    char tmp[64];
    int n = snprintf(tmp, sizeof tmp, fmt, x);

    wb_append(b, tmp, (size_t)n);
}

/* The body of bench-http's write-json (T x C float codes printed with fmt), or
 * its write-b64 form when fmt is NULL. */
static wb_buf wb_body(int T, int C, const char *fmt)
{
    wb_buf b = {NULL, 0, 0};
    uint64_t x = 0x9E3779B97F4A7C15ULL;
    float *z = malloc(sizeof(float) * (size_t)T * (size_t)C);
    unsigned char *raw = malloc(4 * (size_t)T * (size_t)C);
    char *text;
    int t, c;

    for (t = 0; t < T; t++) {
        for (c = 0; c < C; c++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            z[t * C + c] = (float)(3.0 * sin((t % 10) * 1.7 + c * 0.31)
                                   + ((double)(x >> 11) / 9007199254740992.0 - 0.5));
        }
    }
    wb_str(&b, "{\"mode\":\"write\",\"iterations\":10,\"seed\":1,\"codes\":{\"mu\":");
    if (fmt == NULL) {
        memcpy(raw, z, 4 * (size_t)T * (size_t)C); /* little-endian hosts */
        text = wire_b64_encode(raw, 4 * (size_t)T * (size_t)C);
        wb_num(&b, "{\"dtype\":\"float32\",\"shape\":[%.0f,", (double)T);
        wb_num(&b, "%.0f],\"data\":\"", (double)C);
        wb_str(&b, text);
        wb_str(&b, "\"}}}");
        free(text);
    } else {
        wb_str(&b, "[");
        for (t = 0; t < T; t++) {
            wb_str(&b, t > 0 ? ",[" : "[");
            for (c = 0; c < C; c++) {
                if (c > 0)
                    wb_str(&b, ",");
                wb_num(&b, fmt, (double)z[t * C + c]);
            }
            wb_str(&b, "]");
        }
        wb_str(&b, "]}}");
    }
    free(z);
    free(raw);
    return b;
}

/* One parse (and free) of body by jansson or by wire_parse; seconds. */
static double wb_once(const wb_buf *b, int use_wire)
{
    json_error_t jerr;
    json_t *v;
    double t0 = bench_now_s();

    if (use_wire) {
        if (wire_parse(b->s, b->len, JSON_REJECT_DUPLICATES, &v, &jerr) != 0)
            v = NULL;
    } else {
        v = json_loadb(b->s, b->len, JSON_REJECT_DUPLICATES, &jerr);
    }
    if (v == NULL) {
        fprintf(stderr, "bench-wire: the body does not parse: %s\n", jerr.text);
        exit(1);
    }
    json_decref(v);
    return bench_now_s() - t0;
}

/* Medians of reps parses of body by each, interleaved (jansson, wire_parse,
 * jansson, ...) so that both see the same load. */
static void wb_time(const wb_buf *b, int reps, double *tj, double *tw)
{
    double *a = malloc(sizeof(double) * (size_t)reps), *w = malloc(sizeof(double) * (size_t)reps);
    int r;

    for (r = 0; r < reps; r++) {
        a[r] = wb_once(b, 0);
        w[r] = wb_once(b, 1);
    }
    *tj = bench_median(a, reps);
    *tw = bench_median(w, reps);
    free(a);
    free(w);
}

/* usage: bench-wire [REPS]; prints one JSON line per body form. */
int main(int argc, char **argv)
{
    static const char *const fmts[] = {"%.7g", "%.9g", "%.17g", NULL};
    static const char *const names[] = {"json %.7g (bench-http write-json)", "json %.9g",
                                        "json %.17g", "base64 float32 (write-b64)"};
    int reps = 200, i;
    double tj, tw;
    wb_buf b;

    if (argc > 1 && bench_parse_int(argv[1], 1, 1000000, &reps) != 0) {
        fprintf(stderr, "usage: bench-wire [REPS]\n");
        return 1;
    }
    for (i = 0; i < 4; i++) {
        b = wb_body(64, 200, fmts[i]);
        wb_time(&b, reps, &tj, &tw);
        printf("{\"body\": \"%s\", \"bytes\": %zu, \"reps\": %d, \"json_loadb_ms\": %.3f, "
               "\"wire_parse_ms\": %.3f, \"ratio\": %.2f}\n",
               names[i], b.len, reps, 1e3 * tj, 1e3 * tw, tj / tw);
        free(b.s);
    }
    return 0;
}
