/* nets.c -- bench-nets: images per second for encode and decode of one episode with the C
 * networks (src/nets), next to PyTorch on CPU with the same number of threads (run as a
 * subprocess, bench/ref/nets_torch.py, whose calls interleave with ours) and as a fraction of
 * the machine's float32 GEMM ceiling, all measured in the same run. Without --model it benchmarks
 * the paper's CIFAR architecture
 * (App. F.2.1: 32x32x3, F = 64, C = 200, gaussian) with random weights it writes itself. */
#define _POSIX_C_SOURCE 200809L
#include "common.h"
#include <cblas.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nets/layers.h"
#include "nets/nets.h"
#include "nets/nets_internal.h"
#include "nets/onednn.h"
#include "nets/safetensors.h"
#include "numerics/rng.h"

typedef struct {
    const char *models[8]; /* at most 8 --model */
    int n_models;
    int threads;
    long frames;
    int reps;
    int torch;
    int avx2;   /* run the AVX2 server (--no-avx2 turns it off) */
    int layers; /* --layers: time each GEMM-shaped layer alone instead */
    const char *root;
    const char *keep_cifar; /* write the generated CIFAR model here and keep it */
} bench_opts;

/* ---- GEMM ceiling ---- */

/* The ceiling is the rate of one square float32 SGEMM of this size, sampled once per
 * round next to the networks' calls. */
#define GEMM_N 2048

/* ---- FLOPs of a layer list (multiply-adds x 2 of the GEMM-shaped layers) ---- */

static double seq_flops(const nets_seq *s)
{
    double f = 0;
    for (int i = 0; i < s->n; i++) {
        const nets_layer *L = &s->layers[i];
        switch (L->type) {
        case NETS_L_CONV2D: f += 2.0 * L->cout * L->cin * L->k * L->k * L->out.h * L->out.w; break;
        case NETS_L_CONVT2D: f += 2.0 * L->cout * L->cin * L->k * L->k * L->in.h * L->in.w; break;
        case NETS_L_DENSE: f += 2.0 * L->cout * L->cin; break;
        case NETS_L_RESIDUAL: f += seq_flops(L->body); break;
        default: break;
        }
    }
    return f;
}

/* ---- the CIFAR model of App. F.2.1 with random weights ---- */

typedef struct {
    char names[128][96];
    int ndim[128];
    int64_t shape[128][4];
    float *data[128];
    int n;
    rng_t rng;
} tensor_list;

static void add_tensor(tensor_list *t, const char *name, int ndim, int64_t d0, int64_t d1,
                       int64_t d2, int64_t d3, double fill_mean, double fill_sd)
{
    int i = t->n++;
    snprintf(t->names[i], sizeof t->names[i], "%s", name);
    t->ndim[i] = ndim;
    int64_t d[4] = {d0, d1, d2, d3};
    long count = 1;
    for (int k = 0; k < ndim; k++) {
        t->shape[i][k] = d[k];
        count *= d[k];
    }
    t->data[i] = malloc(sizeof(float) * count);
    for (long j = 0; j < count; j++)
        t->data[i][j] = (float)(fill_mean + fill_sd * rng_normal(&t->rng));
}

static json_t *L_conv(tensor_list *t, const char *name, int cin, int cout, int k, int s,
                      const char *pad, int transpose)
{
    char w[80], b[80];
    snprintf(w, sizeof w, "%s.weight", name);
    snprintf(b, sizeof b, "%s.bias", name);
    double sd = 1.0 / sqrt((double)cin * k * k);
    if (transpose)
        add_tensor(t, w, 4, cin, cout, k, k, 0.0, sd);
    else
        add_tensor(t, w, 4, cout, cin, k, k, 0.0, sd);
    add_tensor(t, b, 1, cout, 0, 0, 0, 0.0, 0.01);
    return json_pack("{s:s,s:s,s:i,s:i,s:i,s:i,s:s}", "type",
                     transpose ? "conv_transpose2d" : "conv2d", "name", name, "in", cin, "out",
                     cout, "kernel", k, "stride", s, "padding", pad);
}

static json_t *L_dense(tensor_list *t, const char *name, int in, int out)
{
    char w[80], b[80];
    snprintf(w, sizeof w, "%s.weight", name);
    snprintf(b, sizeof b, "%s.bias", name);
    add_tensor(t, w, 2, out, in, 0, 0, 0.0, 1.0 / sqrt((double)in));
    add_tensor(t, b, 1, out, 0, 0, 0, 0.0, 0.01);
    return json_pack("{s:s,s:s,s:i,s:i}", "type", "dense", "name", name, "in", in, "out", out);
}

static json_t *L_gn(tensor_list *t, const char *name, int groups, int ch)
{
    char w[80], b[80];
    snprintf(w, sizeof w, "%s.weight", name);
    snprintf(b, sizeof b, "%s.bias", name);
    add_tensor(t, w, 1, ch, 0, 0, 0, 1.0, 0.0);
    add_tensor(t, b, 1, ch, 0, 0, 0, 0.0, 0.0);
    return json_pack("{s:s,s:s,s:i,s:i,s:f}", "type", "group_norm", "name", name, "groups", groups,
                     "channels", ch, "eps", 1e-5);
}

/* Pre-activation residual block: x + conv(swish(gn(conv(swish(gn(x)))))), as
 * train/vbmtrain/nets.py. */
static json_t *L_res(tensor_list *t, const char *name, int ch, int groups)
{
    char n1[80], n2[80], n3[80], n4[80];
    snprintf(n1, sizeof n1, "%s.gn1", name);
    snprintf(n2, sizeof n2, "%s.conv1", name);
    snprintf(n3, sizeof n3, "%s.gn2", name);
    snprintf(n4, sizeof n4, "%s.conv2", name);
    json_t *body = json_array();
    json_array_append_new(body, L_gn(t, n1, groups, ch));
    json_array_append_new(body, json_pack("{s:s}", "type", "swish"));
    json_array_append_new(body, L_conv(t, n2, ch, ch, 3, 1, "same", 0));
    json_array_append_new(body, L_gn(t, n3, groups, ch));
    json_array_append_new(body, json_pack("{s:s}", "type", "swish"));
    json_array_append_new(body, L_conv(t, n4, ch, ch, 3, 1, "same", 0));
    return json_pack("{s:s,s:o}", "type", "residual", "body", body);
}

/* Write the F.2.1 architecture for 32x32x3 (F = 64, C = 200, 8 groups, Swish), the layer list
 * train/vbmtrain/nets.py's default_architecture produces, with random weights. */
static int write_cifar_model(const char *path)
{
    const int F = 64, C = 200, G = 8, H = 32, W = 32, CH = 3;
    tensor_list *t = calloc(1, sizeof *t);
    rng_seed(&t->rng, 12345);
    json_t *enc = json_array(), *dec = json_array();
    int h = H, ch = CH;
    for (int i = 0; i < 3; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "enc.down%d", i);
        json_array_append_new(enc, L_conv(t, nm, ch, F, 4, 2, "valid", 0));
        h = (h - 4) / 2 + 1;
        ch = F;
        snprintf(nm, sizeof nm, "enc.res%d", i);
        json_array_append_new(enc, L_res(t, nm, F, G));
    }
    json_array_append_new(enc, json_pack("{s:s}", "type", "flatten"));
    json_array_append_new(enc, L_dense(t, "enc.proj", F * h * h, 2 * C));
    json_array_append_new(enc, L_dense(t, "enc.mlp0", 2 * C, 2 * C));
    json_array_append_new(enc, json_pack("{s:s}", "type", "relu"));
    json_array_append_new(enc, L_dense(t, "enc.mlp1", 2 * C, 2 * C));
    int s = 4; /* ceil(32 / 2^3) */
    json_array_append_new(dec, L_dense(t, "dec.proj", C, F * s * s));
    json_array_append_new(dec, json_pack("{s:s,s:[i,i,i]}", "type", "reshape", "shape", F, s, s));
    for (int i = 0; i < 3; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "dec.res%d", i);
        json_array_append_new(dec, L_res(t, nm, F, G));
        snprintf(nm, sizeof nm, "dec.up%d", i);
        json_array_append_new(dec, L_conv(t, nm, F, F, 4, 2, "same", 1));
    }
    json_array_append_new(
        dec, json_pack("{s:s,s:i,s:i}", "type", "center_crop", "height", H, "width", W));
    json_array_append_new(dec, json_pack("{s:s}", "type", "swish"));
    json_array_append_new(dec, L_conv(t, "dec.head", F, 2 * CH, 1, 1, "valid", 0));
    json_t *arch =
        json_pack("{s:{s:i,s:i,s:i,s:s,s:f},s:i,s:f,s:f,s:o,s:o}", "observation", "channels", CH,
                  "height", H, "width", W, "likelihood", "gaussian", "min_scale", 1e-3, "code_size",
                  C, "log_sigma_min", -9.0, "log_sigma_max", 4.0, "encoder", enc, "decoder", dec);
    char *arch_s = json_dumps(arch, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(arch);
    const char *meta[] = {
        "vbmem.format",
        "vbmem-model",
        "vbmem.format_version",
        "1",
        "vbmem.architecture",
        arch_s,
        "vbmem.memory",
        "{\"kind\":\"mixture\",\"clusters\":10,\"rows\":6,\"groups\":1,\"iterations\":10,"
        "\"sigma_z2\":1.2,\"u0\":0.4,\"sigma2_b0\":2.4,\"s_floor\":1e-6,\"episode_length\":64}",
        "vbmem.provenance",
        "{\"dataset\":\"random\",\"trainer\":\"bench/nets.c\",\"note\":\"random weights, "
        "App. F.2.1 CIFAR architecture for benchmarking\"}"};
    sft_input in[128];
    for (int i = 0; i < t->n; i++)
        in[i] = (sft_input){t->names[i], t->ndim[i], t->shape[i], t->data[i]};
    unsigned char *buf;
    size_t len;
    vbm_error err;
    vbm_status rc = sft_build(in, (size_t)t->n, meta, 5, &buf, &len, &err);
    free(arch_s);
    for (int i = 0; i < t->n; i++)
        free(t->data[i]);
    free(t);
    if (rc != VBM_OK) {
        fprintf(stderr, "bench-nets: %s\n", err.msg);
        return -1;
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len) {
        fprintf(stderr, "bench-nets: cannot write %s\n", path);
        if (f)
            fclose(f);
        free(buf);
        return -1;
    }
    fclose(f);
    free(buf);
    return 0;
}

/* ---- server processes: PyTorch, and this program on AVX2 ---- */

/* A child process that answers one line per request line: bench/ref/nets_torch.py --serve
 * (PyTorch), or this program with --serve (the networks and the ceiling under another ISA, set
 * by the environment when the process starts). Its calls interleave with ours under the same
 * load. */
typedef struct {
    pid_t pid;
    FILE *to, *from;
    json_t *hello; /* its first line, a JSON object with "ready": true */
} serve_proc;

/* Start argv[0] (a path) with argv and the environment changes env (pairs NAME, VALUE; VALUE
 * NULL removes NAME; NULL-terminated), read its first line. 0, or -1 with a message. */
static int serve_start(char *const argv[], const char *const env[], serve_proc *sp)
{
    memset(sp, 0, sizeof *sp);
    int in[2], out[2];
    if (pipe(in) != 0)
        return -1;
    if (pipe(out) != 0) {
        close(in[0]);
        close(in[1]);
        return -1;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        for (int i = 0; env[i]; i += 2) {
            if (env[i + 1])
                setenv(env[i], env[i + 1], 1);
            else
                unsetenv(env[i]);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    /* a server started later must not inherit this one's pipes: it would hold its stdin open
     * past serve_stop's fclose, and this one would never see the end of its input */
    fcntl(in[1], F_SETFD, FD_CLOEXEC);
    fcntl(out[0], F_SETFD, FD_CLOEXEC);
    sp->pid = pid;
    sp->to = fdopen(in[1], "w");
    sp->from = fdopen(out[0], "r");
    char line[1024];
    if (!sp->to || !sp->from || !fgets(line, sizeof line, sp->from)) {
        fprintf(stderr, "bench-nets: %s did not start\n", argv[1] ? argv[1] : argv[0]);
        return -1;
    }
    sp->hello = json_loads(line, 0, NULL);
    if (!sp->hello || !json_is_true(json_object_get(sp->hello, "ready"))) {
        fprintf(stderr, "bench-nets: unexpected first line from %s: %s", argv[0], line);
        return -1;
    }
    return 0;
}

/* The number a request line gets as its answer, or NAN. */
static double serve_call(serve_proc *sp, const char *what)
{
    char line[256];
    if (!sp->to || fprintf(sp->to, "%s\n", what) < 0 || fflush(sp->to) != 0
        || !fgets(line, sizeof line, sp->from))
        return NAN;
    return strtod(line, NULL);
}

static void serve_stop(serve_proc *sp)
{
    if (sp->to)
        fclose(sp->to);
    if (sp->from)
        fclose(sp->from);
    if (sp->pid > 0)
        waitpid(sp->pid, NULL, 0);
    json_decref(sp->hello);
    memset(sp, 0, sizeof *sp);
}

static int torch_start(const bench_opts *o, const char *model, serve_proc *sp)
{
    char script[4096], frames[32], threads[32];
    snprintf(script, sizeof script, "%s/bench/ref/nets_torch.py", o->root);
    if (access(script, R_OK) != 0) {
        fprintf(stderr, "bench-nets: PyTorch reference not found at %s (use --root)\n", script);
        return -1;
    }
    snprintf(frames, sizeof frames, "%ld", o->frames);
    snprintf(threads, sizeof threads, "%d", o->threads);
    char *argv[] = {"/usr/bin/python3", script,  (char *)model, "--frames", frames,
                    "--threads",        threads, "--serve",     NULL};
    const char *env[] = {"OMP_NUM_THREADS", threads, NULL};
    return serve_start(argv, env, sp);
}

/* This program with --serve, as on a CPU without AVX-512 as far as software can make it:
 * VBMEM_NETS_NO_AVX512=1 (no AVX-512 engine; the AVX2 engine runs), ONEDNN_MAX_CPU_ISA=AVX2
 * (oneDNN's AVX2 kernels) and OPENBLAS_CORETYPE=Haswell (OpenBLAS's AVX2 kernels, for the blas
 * path and the ceiling). The CPU underneath is still this one: its caches, clocks and memory are
 * not an AVX2 machine's. */
static int avx2_start(const bench_opts *o, const char *model, serve_proc *sp)
{
    char frames[32], threads[32];
    snprintf(frames, sizeof frames, "%ld", o->frames);
    snprintf(threads, sizeof threads, "%d", o->threads);
    char *argv[] = {"/proc/self/exe", "--serve", (char *)model,    "--frames", frames,
                    "--threads",      threads,   "--blas-default", NULL};
    const char *env[] = {"VBMEM_NETS_NO_AVX512",
                         "1",
                         "ONEDNN_MAX_CPU_ISA",
                         "AVX2",
                         "OPENBLAS_CORETYPE",
                         "Haswell",
                         NULL};
    return serve_start(argv, env, sp);
}

/* ---- one model ---- */

#define MAX_REPS  64
#define MAX_SIDES 8

/* What is timed: a path of the networks in this process (proc 0) or in the AVX2 server
 * (proc 1), or PyTorch (proc 2). */
typedef struct {
    int proc;
    nets_path path;
    char label[96];
} bench_side;

typedef struct {
    char label[96], path[512];
    int channels, height, width, code_size, gaussian;
    size_t params;
    double flops[2]; /* GEMM work per frame: encoder, decoder */
    int reps, n_sides;
    bench_side side[MAX_SIDES];
    double t[MAX_SIDES][2][MAX_REPS]; /* seconds per call: [side][encode, decode][round] */
    double ceiling[2][MAX_REPS];      /* GFLOP/s in the same round: [this process, AVX2 server] */
    int have_avx2;
    char torch_version[32];
} model_result;

/* Pause between the sides' measurements, longer than the time worker threads keep spinning
 * after a call (OpenBLAS: 2^28 cycles by default, about 0.1 s; OpenMP in PyTorch and oneDNN:
 * less), so that one side's idle threads do not run into the other side's call. Measured: with
 * 20 ms here PyTorch lost up to 4x in the rounds. */
static void settle(void)
{
    struct timespec ts = {0, 150 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* Calls per side and round, back to back; the round keeps the fastest, so every side is timed
 * warm (caches, thread wake-up, clock ramp after the pause). */
#define CALLS_PER_ROUND 3

/* The GEMM ceiling: one 2048^3 float32 sgemm, GFLOP/s. */
static double ceiling_sample(const float *ga, const float *gb, float *gc)
{
    double t0 = bench_now_s();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, GEMM_N, GEMM_N, GEMM_N, 1.0f, ga, GEMM_N,
                gb, GEMM_N, 0.0f, gc, GEMM_N);
    return 2.0 * GEMM_N * (double)GEMM_N * GEMM_N / (bench_now_s() - t0) * 1e-9;
}

/* The model's inputs and one workspace per path, in the process that times them. */
typedef struct {
    nets_model *m;
    long n, C, obs;
    float *x, *mean, *scale;
    double *mu, *s2, *z;
    nets_workspace *ws[NETS_PATH_BLAS + 1];
} bench_inputs;

static int inputs_open(const char *path, long n, int threads, bench_inputs *b)
{
    vbm_error err;
    memset(b, 0, sizeof *b);
    if (nets_model_load(path, &b->m, &err) != VBM_OK) {
        fprintf(stderr, "bench-nets: %s\n", err.msg);
        return -1;
    }
    const nets_info *in = nets_model_info(b->m);
    b->n = n;
    b->C = in->code_size;
    b->obs = (long)in->channels * in->height * in->width;
    b->x = malloc(sizeof(float) * n * b->obs);
    b->mean = malloc(sizeof(float) * n * b->obs);
    b->scale = malloc(sizeof(float) * n * b->obs);
    b->mu = malloc(sizeof(double) * n * b->C);
    b->s2 = malloc(sizeof(double) * n * b->C);
    b->z = malloc(sizeof(double) * n * b->C);
    if (!b->x || !b->mean || !b->scale || !b->mu || !b->s2 || !b->z)
        return -1;
    rng_t r;
    rng_seed(&r, 1);
    for (long i = 0; i < n * b->obs; i++)
        b->x[i] = (float)rng_uniform(&r);
    for (long i = 0; i < n * b->C; i++)
        b->z[i] = rng_normal(&r);
    for (int p = NETS_PATH_ENGINE; p <= NETS_PATH_BLAS; p++) {
        if (!nets_path_runs((nets_path)p))
            continue;
        b->ws[p] = nets_workspace_new();
        if (!b->ws[p] || nets_workspace_set_path(b->ws[p], (nets_path)p, &err) != VBM_OK)
            return -1;
        nets_workspace_set_threads(b->ws[p], threads);
    }
    return 0;
}

static void inputs_close(bench_inputs *b)
{
    for (int p = 0; p <= NETS_PATH_BLAS; p++)
        nets_workspace_free(b->ws[p]);
    free(b->x);
    free(b->mean);
    free(b->scale);
    free(b->mu);
    free(b->s2);
    free(b->z);
    nets_model_free(b->m);
    memset(b, 0, sizeof *b);
}

/* Seconds of the fastest of CALLS_PER_ROUND encode (k = 0) or decode (k = 1) calls on path p
 * (a warm-up call first when warm is set), or NAN when a call fails. */
static double time_path(bench_inputs *b, nets_path p, int k, int warm)
{
    vbm_error err;
    double best = INFINITY;
    for (int c = -(warm != 0); c < CALLS_PER_ROUND; c++) {
        double t0 = bench_now_s();
        vbm_status st = k == 0
                            ? nets_encode_ws(b->m, b->ws[p], b->x, b->n, b->mu, b->s2, &err)
                            : nets_decode_ws(b->m, b->ws[p], b->z, b->n, b->mean, b->scale, &err);
        if (st != VBM_OK) {
            fprintf(stderr, "bench-nets: %s\n", err.msg);
            return NAN;
        }
        if (c >= 0)
            best = fmin(best, bench_now_s() - t0);
    }
    return best;
}

static const char *blas_core(void)
{
    return openblas_get_corename();
}

/* reps rounds, each: a GEMM-ceiling sample here and in the AVX2 server, then for encode and
 * for decode every side in turn (each the fastest of CALLS_PER_ROUND back-to-back calls, after
 * a settle()). Ratios are taken within a round, so a load that comes and goes on a shared
 * machine affects every side alike. */
static int bench_model(const bench_opts *o, const char *path, const char *label, float *ga,
                       float *gb, float *gc, model_result *res)
{
    memset(res, 0, sizeof *res);
    snprintf(res->label, sizeof res->label, "%s", label);
    snprintf(res->path, sizeof res->path, "%s", path);
    bench_inputs b;
    if (inputs_open(path, o->frames, o->threads, &b) != 0) {
        inputs_close(&b);
        return -1;
    }
    const nets_info *in = nets_model_info(b.m);
    res->channels = in->channels;
    res->height = in->height;
    res->width = in->width;
    res->code_size = in->code_size;
    res->gaussian = in->likelihood == NETS_GAUSSIAN;
    res->params = in->n_params;
    res->flops[0] = seq_flops(&b.m->enc);
    res->flops[1] = seq_flops(&b.m->dec);
    res->reps = o->reps > MAX_REPS ? MAX_REPS : o->reps;
    static const nets_path order[3] = {NETS_PATH_ENGINE, NETS_PATH_ONEDNN, NETS_PATH_BLAS};
    int ns = 0;
    for (int i = 0; i < 3; i++)
        if (nets_path_runs(order[i])) {
            bench_side *s = &res->side[ns++];
            s->proc = 0;
            s->path = order[i];
            if (order[i] == NETS_PATH_ENGINE)
                snprintf(s->label, sizeof s->label, "engine (AVX-512)");
            else if (order[i] == NETS_PATH_ONEDNN)
                snprintf(s->label, sizeof s->label, "onednn (%s)", nets_dnn_isa());
            else
                snprintf(s->label, sizeof s->label, "blas (OpenBLAS %s)", blas_core());
        }
    serve_proc avx2, torch;
    memset(&avx2, 0, sizeof avx2);
    memset(&torch, 0, sizeof torch);
    if (o->avx2 && avx2_start(o, path, &avx2) == 0) {
        res->have_avx2 = 1;
        json_t *paths = json_object_get(avx2.hello, "paths");
        const char *isa = json_string_value(json_object_get(avx2.hello, "isa"));
        const char *core = json_string_value(json_object_get(avx2.hello, "blas"));
        for (size_t i = 0; i < json_array_size(paths); i++) {
            const char *p = json_string_value(json_array_get(paths, i));
            bench_side *s = &res->side[ns++];
            s->proc = 1;
            s->path = p && strcmp(p, "onednn") == 0        ? NETS_PATH_ONEDNN
                      : p && strcmp(p, "engine-avx2") == 0 ? NETS_PATH_ENGINE_AVX2
                                                           : NETS_PATH_BLAS;
            if (s->path == NETS_PATH_ONEDNN)
                snprintf(s->label, sizeof s->label, "onednn (%s, capped)", isa ? isa : "?");
            else if (s->path == NETS_PATH_ENGINE_AVX2)
                snprintf(s->label, sizeof s->label, "engine-avx2 (AVX2)");
            else
                snprintf(s->label, sizeof s->label, "blas (OpenBLAS %s)", core ? core : "?");
        }
    }
    if (o->torch && torch_start(o, path, &torch) == 0) {
        bench_side *s = &res->side[ns++];
        s->proc = 2;
        snprintf(res->torch_version, sizeof res->torch_version, "%s",
                 json_string_value(json_object_get(torch.hello, "torch")));
        snprintf(s->label, sizeof s->label, "PyTorch %s", res->torch_version);
    }
    res->n_sides = ns;
    int rc = 0;
    for (int i = 0; i < res->reps && !rc; i++) {
        /* (a pause before each sample: with 2 or more threads the other process's BLAS
         * threads still spinning after its last call took a core from this one's sgemm, and
         * the AVX2 server's ceiling came out at 114-154 GFLOP/s in rounds where its best was
         * 154-216) */
        settle();
        res->ceiling[0][i] = ceiling_sample(ga, gb, gc);
        if (res->have_avx2) {
            settle();
            res->ceiling[1][i] = serve_call(&avx2, "ceiling");
        } else {
            res->ceiling[1][i] = NAN;
        }
        for (int k = 0; k < 2; k++)
            for (int si = 0; si < ns && !rc; si++) {
                bench_side *s = &res->side[si];
                settle();
                double t;
                if (s->proc == 0) {
                    t = time_path(&b, s->path, k, i == 0);
                } else if (s->proc == 1) {
                    char req[64];
                    snprintf(req, sizeof req, "%s %s%s", k == 0 ? "encode" : "decode",
                             nets_path_name(s->path), i == 0 ? " warm" : "");
                    t = serve_call(&avx2, req);
                } else {
                    t = INFINITY;
                    for (int c = 0; c < CALLS_PER_ROUND; c++)
                        t = fmin(t, serve_call(&torch, k == 0 ? "encode" : "decode"));
                }
                if (!(t > 0)) {
                    fprintf(stderr, "bench-nets: %s failed or stopped answering\n", s->label);
                    rc = -1;
                }
                res->t[si][k][i] = t;
            }
    }
    serve_stop(&avx2);
    serve_stop(&torch);
    inputs_close(&b);
    return rc;
}

/* ---- --layers: each GEMM-shaped layer alone ---- */

/* FLOPs of one GEMM-shaped layer for one sample (as seq_flops). */
static double layer_flops(const nets_layer *L)
{
    nets_seq one = {(nets_layer *)L, 1, L->in, L->out, 0, 0, 0, 0.0, 0.0};
    return seq_flops(&one);
}

/* Seconds of the fastest of CALLS_PER_ROUND calls (after one untimed) of layer L on path p
 * over n samples; out gets the result (no residual, no crop, no activation). */
static double time_layer(team_t *t, nets_path p, const nets_layer *L, long n, const float *in,
                         float *out, float *col)
{
    double best = INFINITY;
    for (int c = -1; c < CALLS_PER_ROUND; c++) {
        double t0 = bench_now_s();
        if (L->type == NETS_L_CONV2D)
            nets_layer_conv2d(t, p, L, n, in, out, NULL, col, ACT_NONE);
        else if (L->type == NETS_L_CONVT2D)
            nets_layer_convt2d(t, p, L, n, in, out, col, ACT_NONE);
        else
            nets_layer_dense(t, p, L, n, in, out, col, ACT_NONE);
        if (c >= 0)
            best = fmin(best, bench_now_s() - t0);
    }
    return best;
}

/* The GEMM-shaped layers of s (residual bodies included) into ls (at most cap); their count. */
static int gemm_layers(const nets_seq *s, const nets_layer **ls, int n, int cap)
{
    for (int i = 0; i < s->n && n < cap; i++) {
        const nets_layer *L = &s->layers[i];
        if (L->type == NETS_L_RESIDUAL)
            n = gemm_layers(L->body, ls, n, cap);
        else if (L->type == NETS_L_CONV2D || L->type == NETS_L_CONVT2D || L->type == NETS_L_DENSE)
            ls[n++] = L;
    }
    return n;
}

/* --layers: per GEMM-shaped layer of the model's encoder and decoder, on the chunk of frames the
 * executor runs at a time (nets_seq_chunk), the GFLOP/s of each path
 * this process runs the layers on itself (the engines and blas; oneDNN's primitives are built
 * by its executor and are left out), median over the rounds, and its median ratio to this
 * process's GEMM ceiling sampled in the same round. A layer is timed alone on random inputs:
 * without the crop, residual add and activation the executor fuses into it, and with its input
 * in L2 or L3 from the call before, as in a network whose activations fit there. */
static int bench_layers(const bench_opts *o, const char *path, const char *label, float *ga,
                        float *gb, float *gc)
{
    vbm_error err;
    nets_model *m;
    if (nets_model_load(path, &m, &err) != VBM_OK) {
        fprintf(stderr, "bench-nets: %s\n", err.msg);
        return -1;
    }
    static const nets_path order[3] = {NETS_PATH_ENGINE, NETS_PATH_ENGINE_AVX2, NETS_PATH_BLAS};
    int R = o->reps > MAX_REPS ? MAX_REPS : o->reps, rc = 0;
    long n = o->frames;
    team_t *team = team_new(o->threads);
    printf("\n%s (%s), %ld frames: each GEMM-shaped layer alone on the executor's chunks "
           "(encoder %ld, decoder %ld frames at a time); GFLOP/s (median of %d rounds) and of "
           "the ceiling\n",
           label, path, n, nets_seq_chunk(&m->enc, n), nets_seq_chunk(&m->dec, n), R);
    printf("  %-24s %-12s %22s %6s", "layer", "kind", "in -> out", "MFLOP");
    for (int i = 0; i < 3; i++)
        if (nets_path_runs(order[i]))
            printf(" %14s", nets_path_name(order[i]));
    printf("\n");
    for (int half = 0; half < 2 && !rc; half++) {
        const nets_layer *ls[256];
        const nets_seq *seq = half == 0 ? &m->enc : &m->dec;
        int nl = gemm_layers(seq, ls, 0, 256);
        n = nets_seq_chunk(seq, o->frames); /* as nets_encode_ws / nets_decode_ws run them */
        for (int li = 0; li < nl && !rc; li++) {
            const nets_layer *L = ls[li];
            long isz = nets_shape_size(L->in) * n, osz = nets_shape_size(L->out) * n;
            size_t csz = nets_layer_scratch(L, n, NETS_PATH_AUTO, o->threads);
            /* each array on a page boundary, as the executor's workspace starts (its buffers
             * at multiples of 16 floats within it): malloc's offsets would change from one
             * layer to the next, and with them the kernels' cache-set conflicts */
            float *in = NULL, *out = NULL, *col = NULL;
            if (posix_memalign((void **)&in, 4096, sizeof(float) * isz) != 0
                || posix_memalign((void **)&out, 4096, sizeof(float) * osz) != 0
                || posix_memalign((void **)&col, 4096, sizeof(float) * (csz + 64)) != 0) {
                free(in), free(out), free(col);
                rc = -1;
                break;
            }
            rng_t r;
            rng_seed(&r, 2 + li);
            for (long i = 0; i < isz; i++)
                in[i] = (float)rng_normal(&r);
            double f = layer_flops(L) * n, gf[3][MAX_REPS], ceil[MAX_REPS];
            for (int rep = 0; rep < R; rep++) {
                ceil[rep] = ceiling_sample(ga, gb, gc);
                for (int i = 0; i < 3; i++)
                    if (nets_path_runs(order[i]))
                        gf[i][rep] = f / time_layer(team, order[i], L, n, in, out, col) * 1e-9;
            }
            char shape[48], io[64], a[24], b[24];
            nets_shape_str(L->in, a, sizeof a);
            nets_shape_str(L->out, b, sizeof b);
            snprintf(io, sizeof io, "%s->%s", a, b);
            snprintf(shape, sizeof shape, "%s k%d s%d",
                     L->type == NETS_L_CONV2D    ? "conv"
                     : L->type == NETS_L_CONVT2D ? "convT"
                                                 : "dense",
                     L->k, L->stride);
            printf("  %s %-22.22s %-12s %22s %6.2f", half == 0 ? "E" : "D", L->label, shape, io,
                   f / n * 1e-6);
            for (int i = 0; i < 3; i++) {
                if (!nets_path_runs(order[i]))
                    continue;
                double tmp[MAX_REPS], rat[MAX_REPS];
                for (int rep = 0; rep < R; rep++) {
                    tmp[rep] = gf[i][rep];
                    rat[rep] = gf[i][rep] / ceil[rep];
                }
                printf(" %6.1f %5.1f%%", bench_median(tmp, R), 100.0 * bench_median(rat, R));
            }
            printf("\n");
            fflush(stdout);
            free(in), free(out), free(col);
        }
    }
    double tmp[1] = {ceiling_sample(ga, gb, gc)};
    printf("  GEMM ceiling of this process (OpenBLAS %s): %.1f GFLOP/s after the layers\n",
           blas_core(), tmp[0]);
    team_free(team);
    nets_model_free(m);
    return rc;
}

/* --serve MODEL: the AVX2 server's side. First line {"ready": true, "isa": oneDNN's ISA,
 * "blas": OpenBLAS's kernels, "paths": [the paths that run here but the AVX-512 engine]}; then per
 * request line "ceiling" (GFLOP/s of one sgemm) or "encode|decode PATH [warm]" (seconds of the
 * fastest of CALLS_PER_ROUND calls; "nan" on a failure); exits at EOF. */
static int serve_main(const char *model, long frames, int threads)
{
    bench_inputs b;
    if (inputs_open(model, frames, threads, &b) != 0) {
        inputs_close(&b);
        return 1;
    }
    size_t nn = (size_t)GEMM_N * GEMM_N;
    float *ga = calloc(nn, sizeof(float)), *gb = calloc(nn, sizeof(float)),
          *gc = calloc(nn, sizeof(float));
    if (!ga || !gb || !gc) {
        inputs_close(&b);
        return 1;
    }
    printf("{\"ready\": true, \"isa\": \"%s\", \"blas\": \"%s\", \"paths\": [%s%s%s]}\n",
           nets_dnn_isa(), blas_core(),
           nets_path_runs(NETS_PATH_ENGINE_AVX2) ? "\"engine-avx2\", " : "",
           nets_path_runs(NETS_PATH_ONEDNN) ? "\"onednn\", " : "", "\"blas\"");
    fflush(stdout);
    ceiling_sample(ga, gb, gc); /* warm-up */
    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        char what[16] = "", pname[16] = "", warm[16] = "";
        double v = NAN;
        if (sscanf(line, "%15s %15s %15s", what, pname, warm) >= 1) {
            if (strcmp(what, "ceiling") == 0) {
                v = ceiling_sample(ga, gb, gc);
            } else {
                nets_path p = strcmp(pname, "onednn") == 0        ? NETS_PATH_ONEDNN
                              : strcmp(pname, "engine") == 0      ? NETS_PATH_ENGINE
                              : strcmp(pname, "engine-avx2") == 0 ? NETS_PATH_ENGINE_AVX2
                                                                  : NETS_PATH_BLAS;
                int k = strcmp(what, "decode") == 0;
                if (b.ws[p])
                    v = time_path(&b, p, k, strcmp(warm, "warm") == 0);
            }
        }
        printf("%.9g\n", v);
        fflush(stdout);
    }
    free(ga);
    free(gb);
    free(gc);
    inputs_close(&b);
    return 0;
}

static double best_of(const double *v, int n)
{
    double b = v[0];
    for (int i = 1; i < n; i++)
        b = v[i] < b ? v[i] : b;
    return b;
}

static void print_model(const bench_opts *o, const model_result *r)
{
    int R = r->reps;
    long n = o->frames;
    double tmp[MAX_REPS];
    printf("\n%s\n  %s: %dx%dx%d %s, C = %d, %zu parameters; GEMM work per frame: encoder %.1f "
           "MFLOP, decoder %.1f MFLOP\n",
           r->label, r->path, r->channels, r->height, r->width,
           r->gaussian ? "gaussian" : "bernoulli", r->code_size, r->params, r->flops[0] * 1e-6,
           r->flops[1] * 1e-6);
    printf("  %-32s %9s %8s %8s %7s %9s %8s %8s %7s  %s\n", "path (ISA)", "enc img/s", "(best)",
           "of ceil", "(best)", "dec img/s", "(best)", "of ceil", "(best)", "ceiling");
    for (int si = 0; si < r->n_sides; si++) {
        const bench_side *s = &r->side[si];
        printf("  %-32s", s->label);
        for (int k = 0; k < 2; k++) {
            memcpy(tmp, r->t[si][k], sizeof(double) * R);
            double tm = bench_median(tmp, R), tb = best_of(r->t[si][k], R);
            printf(" %9.0f %8.0f", n / tm, n / tb);
            if (s->proc < 2) {
                for (int i = 0; i < R; i++)
                    tmp[i] = r->flops[k] * n / r->t[si][k][i] * 1e-9 / r->ceiling[s->proc][i];
                printf(" %7.1f%%", 100.0 * bench_median(tmp, R));
                /* the fastest call against the highest ceiling sample of the same run: on a
                 * shared machine both come nearest to what it gives unloaded */
                memcpy(tmp, r->ceiling[s->proc], sizeof(double) * R);
                bench_median(tmp, R); /* sorts tmp */
                printf(" %6.1f%%", 100.0 * r->flops[k] * n / tb * 1e-9 / tmp[R - 1]);
            } else {
                printf(" %8s %7s", "", "");
            }
        }
        printf("  %s\n", s->proc == 0 ? "this process" : s->proc == 1 ? "AVX2 server" : "");
    }
    for (int p = 0; p < 2; p++) {
        if (p == 1 && !r->have_avx2)
            break;
        memcpy(tmp, r->ceiling[p], sizeof(double) * R);
        double cm = bench_median(tmp, R); /* sorts tmp */
        printf("  GEMM ceiling (%s): median %.1f, best %.1f GFLOP/s\n",
               p == 0 ? "this process" : "AVX2 server", cm, tmp[R - 1]);
    }
    /* ratios of each side to the default path's, per round */
    for (int si = 1; si < r->n_sides; si++) {
        printf("  %s / %s:", r->side[0].label, r->side[si].label);
        for (int k = 0; k < 2; k++) {
            for (int i = 0; i < R; i++)
                tmp[i] = r->t[si][k][i] / r->t[0][k][i];
            printf(" %s %.2fx", k == 0 ? "encode" : "decode", bench_median(tmp, R));
        }
        printf("\n");
    }
    /* in the AVX2 server: its AVX2 engine against its other paths */
    for (int si = 0; si < r->n_sides; si++) {
        if (r->side[si].proc != 1 || r->side[si].path != NETS_PATH_ENGINE_AVX2)
            continue;
        for (int sj = 0; sj < r->n_sides; sj++) {
            if (sj == si || r->side[sj].proc != 1)
                continue;
            printf("  %s / %s:", r->side[si].label, r->side[sj].label);
            for (int k = 0; k < 2; k++) {
                for (int i = 0; i < R; i++)
                    tmp[i] = r->t[sj][k][i] / r->t[si][k][i];
                printf(" %s %.2fx", k == 0 ? "encode" : "decode", bench_median(tmp, R));
            }
            printf("\n");
        }
    }
    fflush(stdout);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: bench-nets [--model FILE]... [--threads N] [--frames N] [--reps N] "
            "[--no-torch] [--no-avx2]\n"
            "                  [--root DIR] [--keep-cifar FILE] [--blas-default] [--layers]\n"
            "  Images per second for nets_encode / nets_decode of one episode (default 64 frames) "
            "for each\n"
            "  --model and for the paper's CIFAR architecture (App. F.2.1, 32x32x3, F=64, C=200, "
            "random\n"
            "  weights written to a temporary file, or to --keep-cifar FILE), on every path of "
            "the networks\n"
            "  this process can run (engine, onednn, blas), on the engine-avx2, onednn and blas "
            "paths of a\n"
            "  server process limited to AVX2 kernels (--no-avx2: none), and PyTorch "
            "(bench/ref/nets_torch.py "
            "--serve under\n"
            "  --root, default \".\"; --no-torch: none), all with the same number of threads "
            "(default: online\n"
            "  CPUs). Each of --reps rounds (default 7) times one 2048^3 float32 cblas_sgemm in "
            "each process\n"
            "  (the GEMM ceiling) and every side's encode and decode; ratios are taken within "
            "rounds, so a\n"
            "  shared machine's changing load affects every side alike. On AVX-512F CPUs the "
            "program runs\n"
            "  itself again with OPENBLAS_CORETYPE=SkylakeX unless it names an AVX-512 core "
            "already or\n"
            "  --blas-default is given, so that the ceiling uses OpenBLAS's fastest kernels for "
            "the machine.\n"
            "  --layers: instead, each conv2d, conv_transpose2d and dense layer of the same models "
            "alone, on\n"
            "  the engines and blas in this process: GFLOP/s and its ratio to this process's "
            "ceiling per round.\n");
}

/* The ceiling must be the machine's. On an AVX-512F CPU OpenBLAS's AVX-512 kernels run the
 * 2048^3 sgemm ~1.8x faster than its AVX2 (Haswell) ones (measured on the Zen 5 of
 * bench/README.md), but OpenBLAS takes its kernels from OPENBLAS_CORETYPE when it is loaded,
 * and an environment may pin AVX2 ones (the machines this was written on set
 * OPENBLAS_CORETYPE=Haswell). So on an AVX-512F CPU whose OPENBLAS_CORETYPE is unset or names
 * another core than SkylakeX or Cooperlake, the program runs itself again with
 * OPENBLAS_CORETYPE=SkylakeX (the PyTorch child inherits it). --blas-default keeps the
 * environment's choice. Returns only when no re-execution happened. */
static void ceiling_kernels(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--blas-default") == 0)
            return;
    const char *core = getenv("OPENBLAS_CORETYPE");
    if (core && (strcasecmp(core, "SkylakeX") == 0 || strcasecmp(core, "Cooperlake") == 0))
        return;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f"))
        return;
    if (setenv("OPENBLAS_CORETYPE", "SkylakeX", 1) != 0)
        return;
    fflush(NULL);
    execv("/proc/self/exe", argv);
    perror("bench-nets: re-executing with OPENBLAS_CORETYPE=SkylakeX"); /* go on as configured */
}

int main(int argc, char **argv)
{
    ceiling_kernels(argc, argv);
    bench_opts o = {{0}, 0, (int)sysconf(_SC_NPROCESSORS_ONLN), 64, 7, 1, 1, 0, ".", NULL};
    const char *serve = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--blas-default") == 0)
            continue;
        else if (strcmp(a, "--model") == 0 && v && o.n_models < 8)
            o.models[o.n_models++] = argv[++i];
        else if (strcmp(a, "--threads") == 0 && v)
            o.threads = atoi(argv[++i]);
        else if (strcmp(a, "--frames") == 0 && v)
            o.frames = atol(argv[++i]);
        else if (strcmp(a, "--reps") == 0 && v)
            o.reps = atoi(argv[++i]);
        else if (strcmp(a, "--root") == 0 && v)
            o.root = argv[++i];
        else if (strcmp(a, "--keep-cifar") == 0 && v)
            o.keep_cifar = argv[++i];
        else if (strcmp(a, "--no-torch") == 0)
            o.torch = 0;
        else if (strcmp(a, "--no-avx2") == 0)
            o.avx2 = 0;
        else if (strcmp(a, "--layers") == 0)
            o.layers = 1;
        else if (strcmp(a, "--serve") == 0 && v)
            serve = argv[++i];
        else {
            usage();
            return 2;
        }
    }
    if (o.threads < 1 || o.frames < 1 || o.reps < 1) {
        usage();
        return 2;
    }
    openblas_set_num_threads(o.threads);
    if (serve)
        return serve_main(serve, o.frames, o.threads);
    printf("bench-nets: %d threads, %ld frames per call, %d rounds; medians over the rounds (C's "
           "best in brackets)\n",
           o.threads, o.frames, o.reps);
    printf("  this process: OpenBLAS kernels %s (OPENBLAS_CORETYPE=%s), oneDNN ISA %s, default "
           "path %s\n",
           openblas_get_corename(),
           getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "unset", nets_dnn_isa(),
           nets_path_name(nets_path_default()));
    __builtin_cpu_init();
    if (o.avx2)
        printf("  AVX2 server: this program again with VBMEM_NETS_NO_AVX512=1 (the AVX2 engine), "
               "ONEDNN_MAX_CPU_ISA=AVX2, OPENBLAS_CORETYPE=Haswell\n"
               "  (%s); its rows' ceiling is its own sgemm\n",
               __builtin_cpu_supports("avx512f") ? "AVX2 kernels on this CPU, not an AVX2-only CPU"
                                                 : "this CPU has no AVX-512F: AVX2 is its own ISA");
    printf("  ratios (of ceiling, between paths) are taken within each round, then their "
           "median;\n  of ceiling (best): the fastest round against the highest ceiling sample of "
           "the same run\n");
    fflush(stdout);
    size_t nn = (size_t)GEMM_N * GEMM_N;
    float *ga = malloc(sizeof(float) * nn), *gb = malloc(sizeof(float) * nn),
          *gc = malloc(sizeof(float) * nn);
    if (!ga || !gb || !gc) {
        fprintf(stderr, "bench-nets: out of memory for the GEMM ceiling\n");
        return 1;
    }
    for (size_t i = 0; i < nn; i++) {
        ga[i] = (float)((int)(i * 7 % 13) - 6) * 0.1f;
        gb[i] = (float)((int)(i * 5 % 11) - 5) * 0.1f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, GEMM_N, GEMM_N, GEMM_N, 1.0f, ga, GEMM_N,
                gb, GEMM_N, 0.0f, gc, GEMM_N); /* warm-up */
    model_result *res = calloc(9, sizeof(model_result));
    int nres = 0, rc = 0;
    for (int i = 0; i < o.n_models; i++) {
        if (o.layers)
            rc |= bench_layers(&o, o.models[i], "model", ga, gb, gc) != 0;
        else if (bench_model(&o, o.models[i], "model", ga, gb, gc, &res[nres]) == 0)
            print_model(&o, &res[nres++]);
        else
            rc = 1;
    }
    char tmp[] = "/tmp/bench-nets-cifar-XXXXXX";
    const char *cifar = o.keep_cifar;
    if (!cifar) {
        int fd = mkstemp(tmp);
        if (fd < 0) {
            perror("bench-nets: mkstemp");
            return 1;
        }
        close(fd);
        cifar = tmp;
    }
    if (o.layers) {
        if (write_cifar_model(cifar) != 0
            || bench_layers(&o, cifar, "CIFAR architecture (App. F.2.1, random weights)", ga, gb,
                            gc)
                   != 0)
            rc = 1;
    } else if (write_cifar_model(cifar) == 0
               && bench_model(&o, cifar,
                              "CIFAR architecture (App. F.2.1: F = 64, C = 200, random weights)",
                              ga, gb, gc, &res[nres])
                      == 0)
        print_model(&o, &res[nres++]);
    else
        rc = 1;
    if (!o.keep_cifar)
        remove(tmp);
    printf("\ntarget: encode and decode >= 75%% of the GEMM ceiling on each kind of CPU\n");
    free(res);
    free(ga);
    free(gb);
    free(gc);
    return rc ? 1 : 0;
}
