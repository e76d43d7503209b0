/* online_stream.c -- owns bench-online-stream: a task-agnostic stream of Fashion-MNIST
 * episodes (classes drifting over time, no boundary) written by appends into one memory of
 * the bundled model, with recall of the earliest piece's frames measured after every append,
 * against a batch write of everything seen so far and against the appends plus one refit. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common.h"
#include "engine/hosted.h"
#include "engine/recall.h"
#include "nets/nets.h"
#include "numerics/rng.h"
#include "vbmem/vbmem.h"

#ifndef RECALL_MODEL
#define RECALL_MODEL "models/fashion-mnist-mixture.safetensors"
#endif
#define FM_IMAGES "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
#define FM_LABELS "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"
#define SIDE      28
#define PIX       784
#define CLASSES   10
#define MAX_PIECE 64
#define COND      3 /* appends, batch write of all seen, appends + refit */

typedef struct {
    int seeds, pieces, frames, steps, candidates;
    const char *csv;
} stream_opts;

typedef struct {
    unsigned char *img; /* n x 784 */
    unsigned char *lab; /* n */
    long n;
    eng_models *reg;
    eng_model *m;
} stream_data;

static void usage(void)
{
    fprintf(stderr, "usage: bench-online-stream [--seeds N] [--pieces N] [--piece-frames N] "
                    "[--steps N] [--candidates N] [--csv FILE]\n");
}

/* Read a gzip'd idx file: header of hdr bytes, then n * per bytes. NULL on failure. */
static unsigned char *read_idx(const char *path, int hdr, long per, long *n)
{
    gzFile f = gzopen(path, "rb");
    unsigned char h[16];
    if (f == NULL)
        return NULL;
    if (gzread(f, h, (unsigned)hdr) != hdr) {
        gzclose(f);
        return NULL;
    }
    *n = ((long)h[4] << 24) | ((long)h[5] << 16) | ((long)h[6] << 8) | (long)h[7];
    unsigned char *buf = malloc((size_t)*n * per);
    if (buf == NULL || gzread(f, buf, (unsigned)(*n * per)) != (int)(*n * per)) {
        free(buf);
        buf = NULL;
    }
    gzclose(f);
    return buf;
}

static int load(stream_data *d)
{
    long nl = 0;
    vbm_error err;
    d->img = read_idx(FM_IMAGES, 16, PIX, &d->n);
    d->lab = read_idx(FM_LABELS, 8, 1, &nl);
    if (d->img == NULL || d->lab == NULL || nl != d->n) {
        fprintf(stderr, "bench-online-stream: cannot read %s / %s\n", FM_IMAGES, FM_LABELS);
        return -1;
    }
    char dir[4096], name[256];
    const char *path = RECALL_MODEL, *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dl = slash ? (size_t)(slash - path) : 0, bl = strlen(base);
    if (dl + 2 > sizeof dir || bl < 13 || bl - 12 >= sizeof name)
        return -1;
    memcpy(dir, dl ? path : ".", dl ? dl : 1);
    dir[dl ? dl : 1] = '\0';
    memcpy(name, base, bl - 12);
    name[bl - 12] = '\0';
    if (eng_models_create(dir, name, &d->reg, &err) != VBM_OK
        || eng_models_get(d->reg, name, &d->m, &err) != VBM_OK) {
        fprintf(stderr, "bench-online-stream: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* The stream: frame t of T has class floor(10 (t + j) / T), j uniform in [-F, F] (F the
 * piece length), clamped to 0..9: the classes drift from 0 to 9 and each piece mixes its
 * neighbours' classes, with no boundary. Distinct images of that class, at bin centres. */
static void make_stream(const stream_data *d, rng_t *rng, int T, int F, float *x, int *cls)
{
    long *idx = malloc(sizeof(long) * T);
    for (int t = 0; t < T; t++) {
        double j = -F + 2.0 * F * rng_uniform(rng);
        int c = (int)floor(CLASSES * (t + j) / T);
        c = c < 0 ? 0 : c >= CLASSES ? CLASSES - 1 : c;
        int dup;
        do {
            do
                idx[t] = (long)rng_below(rng, (uint64_t)d->n);
            while (d->lab[idx[t]] != c);
            dup = 0;
            for (int u = 0; u < t; u++)
                dup |= idx[u] == idx[t];
        } while (dup);
        cls[t] = c;
        for (int p = 0; p < PIX; p++)
            x[(size_t)t * PIX + p] = ((float)d->img[idx[t] * PIX + p] + 0.5f) / 256.0f;
    }
    free(idx);
}

/* Cues of the n frames x: top half blanked with a mask (kind 0), or Gaussian noise sd 0.35
 * clipped to [0, 1] without one (kind 1). */
static void make_cues(int kind, const float *x, int n, rng_t *rng, float *cue, unsigned char *mask)
{
    for (int t = 0; t < n; t++)
        for (int p = 0; p < PIX; p++) {
            size_t i = (size_t)t * PIX + p;
            int known = kind == 1 || p / SIDE >= SIDE / 2;
            double v = x[i];
            if (kind == 1)
                v = fmin(1.0, fmax(0.0, v + 0.35 * rng_normal(rng)));
            mask[i] = (unsigned char)known;
            cue[i] = known ? (float)v : 0.0f;
        }
}

static double dist2(const float *a, const float *b)
{
    double s = 0.0;
    for (int p = 0; p < PIX; p++)
        s += ((double)a[p] - b[p]) * ((double)a[p] - b[p]);
    return s;
}

/* Answers y of the first n frames that end nearest (pixels) to their own original among
 * all T originals x. */
static int hits(const float *y, const float *x, int n, int T)
{
    int h = 0;
    for (int i = 0; i < n; i++) {
        int arg = 0;
        double best = INFINITY;
        for (int t = 0; t < T; t++) {
            double dd = dist2(y + (size_t)i * PIX, x + (size_t)t * PIX);
            if (dd < best) {
                best = dd;
                arg = t;
            }
        }
        h += arg == i;
    }
    return h;
}

/* Recall read of the cues (n frames) through mem; the last step's images into y. */
static int recall(const vbm_memory *mem, const eng_model *m, const float *cue,
                  const unsigned char *mask, int kind, int n, const stream_opts *o, uint64_t seed,
                  float *y)
{
    eng_recall_query q = {0};
    eng_recall_opts ro = {0};
    eng_recall_out out;
    vbm_error err;
    q.images = cue;
    q.T = n;
    ro.steps = o->steps;
    ro.seed = seed;
    ro.mode = ENG_READ_RECALL;
    ro.candidates = o->candidates;
    ro.cue_noise = kind == 0 ? 0.0 : -1.0;
    ro.mask = kind == 0 ? mask : NULL;
    if (eng_recall_run(mem, m, &q, &ro, &out, &err) != VBM_OK) {
        fprintf(stderr, "bench-online-stream: read: %s\n", err.msg);
        return -1;
    }
    memcpy(y, out.x + (size_t)(o->steps - 1) * n * PIX, sizeof(float) * (size_t)n * PIX);
    eng_recall_out_free(&out);
    return 0;
}

int main(int argc, char **argv)
{
    stream_opts o = {3, 8, 16, 5, 16, NULL};
    for (int i = 1; i < argc; i++) {
        int *dst = strcmp(argv[i], "--seeds") == 0          ? &o.seeds
                   : strcmp(argv[i], "--pieces") == 0       ? &o.pieces
                   : strcmp(argv[i], "--piece-frames") == 0 ? &o.frames
                   : strcmp(argv[i], "--steps") == 0        ? &o.steps
                   : strcmp(argv[i], "--candidates") == 0   ? &o.candidates
                                                            : NULL;
        if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc) {
            o.csv = argv[++i];
            continue;
        }
        if (dst == NULL || i + 1 >= argc || bench_parse_int(argv[++i], 1, 1000, dst) != 0) {
            usage();
            return 2;
        }
    }
    if (o.pieces > 64 || o.frames > MAX_PIECE || o.candidates > ENG_RECALL_MAX_CANDIDATES) {
        usage();
        return 2;
    }
    stream_data d = {0};
    if (load(&d) != 0)
        return 1;
    int T = o.pieces * o.frames, F = o.frames, C = d.m->info->code_size, P = o.pieces;
    float *x = malloc(sizeof(float) * (size_t)T * PIX), *cue = malloc(sizeof(float) * F * PIX);
    float *y = malloc(sizeof(float) * F * PIX);
    unsigned char *mask = malloc((size_t)F * PIX);
    int *cls = malloc(sizeof(int) * T);
    double *mu = malloc(sizeof(double) * T * C), *s2 = malloc(sizeof(double) * T * C);
    double *cmu = malloc(sizeof(double) * F * C), *cs2 = malloc(sizeof(double) * F * C);
    /* hit counts [cue kind][piece][condition], and of encode-decode per cue kind */
    long *hit = calloc((size_t)2 * P * COND, sizeof(long)), ed[2] = {0, 0};
    vbm_error err;
    int rc = 1;
    FILE *csv = o.csv ? fopen(o.csv, "w") : NULL;
    if (o.csv && !csv) {
        fprintf(stderr, "bench-online-stream: cannot write %s\n", o.csv);
        goto done;
    }
    if (csv)
        fprintf(csv, "seed,cue,pieces_written,condition,hits,of\n");
    printf("bench-online-stream: %d seeds; a stream of %d pieces of %d Fashion-MNIST test "
           "images whose class\ndrifts from 0 to 9 (frame t: class floor(10 (t + j) / %d), j "
           "uniform in [-%d, %d]), written into one\nmemory of the bundled model %s;\nafter "
           "every append, recall reads (%d steps, %d candidates) of the FIRST piece's %d frames,\n"
           "scored as the fraction whose answer ends nearest (pixels) to its own original "
           "among all %d.\n\n",
           o.seeds, P, F, T, F, F, RECALL_MODEL, o.steps, o.candidates, F, T);
    static const char *const cond_name[COND] = {"appends", "batch", "appends+refit"};
    for (int s = 0; s < o.seeds; s++) {
        uint64_t seed = 500 + (uint64_t)s;
        rng_t rng;
        rng_seed(&rng, seed);
        make_stream(&d, &rng, T, F, x, cls);
        if (nets_encode(d.m->net, x, T, mu, s2, &err) != VBM_OK) {
            fprintf(stderr, "bench-online-stream: %s\n", err.msg);
            goto done;
        }
        vbm_config cfg;
        eng_model_config(d.m, &cfg);
        cfg.retain_max = T;
        vbm_write_opts wo;
        vbm_write_opts_default(&wo);
        wo.max_iter = d.m->info->iterations;
        wo.seed = seed + 1;
        vbm_memory *app = NULL;
        if (vbm_memory_create(&cfg, NULL, NULL, &app, &err) != VBM_OK) {
            fprintf(stderr, "bench-online-stream: %s\n", err.msg);
            goto done;
        }
        for (int k = 0; k < P; k++) {
            vbm_write_result res;
            vbm_codes piece = {F, C, mu + (size_t)k * F * C, s2 + (size_t)k * F * C};
            vbm_codes seen = {(long)(k + 1) * F, C, mu, s2};
            vbm_memory *mem[COND] = {app, NULL, NULL};
            vbm_write_opts ro = wo;
            ro.init = VBM_INIT_CURRENT;
            int bad = (k == 0 ? vbm_write(app, &piece, &wo, &res, &err)
                              : vbm_append(app, &piece, &wo, &res, &err))
                      != VBM_OK;
            if (!bad)
                vbm_write_result_free(&res);
            bad = bad || vbm_memory_create(&cfg, NULL, NULL, &mem[1], &err) != VBM_OK
                  || vbm_write(mem[1], &seen, &wo, &res, &err) != VBM_OK;
            if (!bad)
                vbm_write_result_free(&res);
            bad = bad || vbm_memory_clone(app, &mem[2], &err) != VBM_OK
                  || vbm_refit(mem[2], NULL, &ro, &res, &err) != VBM_OK;
            if (!bad)
                vbm_write_result_free(&res);
            for (int kind = 0; kind < 2 && !bad; kind++) {
                rng_t crng;
                rng_seed(&crng, seed * 31 + (uint64_t)kind); /* the same cues after every append */
                make_cues(kind, x, F, &crng, cue, mask);
                if (k == 0) { /* encode-decode of the cue: no memory */
                    bad = nets_encode(d.m->net, cue, F, cmu, cs2, &err) != VBM_OK
                          || nets_decode(d.m->net, cmu, F, y, NULL, &err) != VBM_OK;
                    for (int i = 0; !bad && i < F * PIX; i++)
                        y[i] = fminf(1.0f, fmaxf(0.0f, y[i]));
                    int h = bad ? 0 : hits(y, x, F, T);
                    ed[kind] += h;
                    if (csv && !bad)
                        fprintf(csv, "%llu,%s,0,encode-decode,%d,%d\n", (unsigned long long)seed,
                                kind ? "noise35" : "top", h, F);
                }
                for (int c = 0; c < COND && !bad; c++) {
                    bad = recall(mem[c], d.m, cue, mask, kind, F, &o, seed + 7, y) != 0;
                    if (bad)
                        break;
                    int h = hits(y, x, F, T);
                    hit[((size_t)kind * P + k) * COND + c] += h;
                    if (csv)
                        fprintf(csv, "%llu,%s,%d,%s,%d,%d\n", (unsigned long long)seed,
                                kind ? "noise35" : "top", k + 1, cond_name[c], h, F);
                }
            }
            vbm_memory_free(mem[1]);
            vbm_memory_free(mem[2]);
            if (bad) {
                fprintf(stderr, "bench-online-stream: seed %llu, piece %d: %s\n",
                        (unsigned long long)seed, k, err.msg);
                vbm_memory_free(app);
                goto done;
            }
        }
        vbm_memory_free(app);
        fprintf(stderr, "seed %llu done\n", (unsigned long long)seed);
    }
    for (int kind = 0; kind < 2; kind++) {
        double n = (double)o.seeds * F;
        printf("cue: %s; encode-decode (no memory) %.3f, chance %.3f\n\n",
               kind ? "noise sd 0.35, no mask" : "top half blanked, with its mask", ed[kind] / n,
               1.0 / T);
        printf("| pieces written | N appends | batch write of all seen | appends + refit |\n"
               "|---|---|---|---|\n");
        for (int k = 0; k < P; k++) {
            const long *hk = hit + ((size_t)kind * P + k) * COND;
            printf("| %d | %.3f | %.3f | %.3f |\n", k + 1, hk[0] / n, hk[1] / n, hk[2] / n);
        }
        printf("\n");
    }
    rc = 0;
done:
    if (csv)
        fclose(csv);
    eng_model_unref(d.m);
    eng_models_free(d.reg);
    free(d.img);
    free(d.lab);
    free(x);
    free(cue);
    free(y);
    free(mask);
    free(cls);
    free(mu);
    free(s2);
    free(cmu);
    free(cs2);
    free(hit);
    return rc;
}
