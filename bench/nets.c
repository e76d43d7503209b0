/* nets.c -- bench-nets: images per second for encode and decode of one episode with the C
 * networks (src/nets), next to PyTorch on CPU with the same number of threads (run as a
 * subprocess, bench/ref/nets_torch.py, whose calls interleave with ours) and as a fraction of
 * the machine's float32 GEMM ceiling, all measured in the same run. Without --model it benchmarks
 * the paper's CIFAR architecture
 * (App. F.2.1: 32x32x3, F = 64, C = 200, gaussian) with random weights it writes itself. */
#define _POSIX_C_SOURCE 200809L
#include "common.h"
#include <cblas.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nets/nets.h"
#include "nets/nets_internal.h"
#include "nets/safetensors.h"
#include "numerics/rng.h"

typedef struct {
    const char *models[8]; /* at most 8 --model */
    int n_models;
    int threads;
    long frames;
    int reps;
    int torch;
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
    st_input in[128];
    for (int i = 0; i < t->n; i++)
        in[i] = (st_input){t->names[i], t->ndim[i], t->shape[i], t->data[i]};
    unsigned char *buf;
    size_t len;
    vbm_error err;
    vbm_status rc = st_build(in, (size_t)t->n, meta, 5, &buf, &len, &err);
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

/* ---- PyTorch, as a server process ---- */

/* bench/ref/nets_torch.py --serve: loads the model once, then times one call per
 * request line, so that its calls interleave with ours under the same load. */
typedef struct {
    pid_t pid;
    FILE *to, *from;
    int threads;
    char version[32];
} torch_proc;

static int torch_start(const bench_opts *o, const char *model, torch_proc *tp)
{
    memset(tp, 0, sizeof *tp);
    char script[4096], frames[32], threads[32];
    snprintf(script, sizeof script, "%s/bench/ref/nets_torch.py", o->root);
    if (access(script, R_OK) != 0) {
        fprintf(stderr, "bench-nets: PyTorch reference not found at %s (use --root)\n", script);
        return -1;
    }
    snprintf(frames, sizeof frames, "%ld", o->frames);
    snprintf(threads, sizeof threads, "%d", o->threads);
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
        setenv("OMP_NUM_THREADS", threads, 1);
        execl("/usr/bin/python3", "python3", script, model, "--frames", frames, "--threads",
              threads, "--serve", (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    tp->pid = pid;
    tp->to = fdopen(in[1], "w");
    tp->from = fdopen(out[0], "r");
    char line[1024];
    if (!tp->to || !tp->from || !fgets(line, sizeof line, tp->from)) {
        fprintf(stderr, "bench-nets: the PyTorch reference did not start (%s)\n", script);
        return -1;
    }
    json_t *j = json_loads(line, 0, NULL);
    if (!j || !json_is_true(json_object_get(j, "ready"))) {
        json_decref(j);
        fprintf(stderr, "bench-nets: unexpected reply from the PyTorch reference: %s", line);
        return -1;
    }
    tp->threads = (int)json_integer_value(json_object_get(j, "threads"));
    snprintf(tp->version, sizeof tp->version, "%s", json_string_value(json_object_get(j, "torch")));
    json_decref(j);
    return 0;
}

/* Seconds of one PyTorch call ("encode" or "decode"), or NAN. */
static double torch_call(torch_proc *tp, const char *what)
{
    char line[256];
    if (fprintf(tp->to, "%s\n", what) < 0 || fflush(tp->to) != 0
        || !fgets(line, sizeof line, tp->from))
        return NAN;
    return strtod(line, NULL);
}

static void torch_stop(torch_proc *tp)
{
    if (tp->to)
        fclose(tp->to);
    if (tp->from)
        fclose(tp->from);
    if (tp->pid > 0)
        waitpid(tp->pid, NULL, 0);
    memset(tp, 0, sizeof *tp);
}

/* ---- one model ---- */

#define MAX_REPS 64

typedef struct {
    char label[96], path[512];
    int channels, height, width, code_size, gaussian;
    size_t params;
    double flops[2]; /* GEMM work per frame: encoder, decoder */
    int reps, have_torch, torch_threads;
    char torch_version[32];
    /* per round: [0] encode, [1] decode */
    double t_ws[2][MAX_REPS];    /* seconds per call with a reused workspace */
    double t_alloc[2][MAX_REPS]; /* seconds per call, workspace allocated by the call */
    double t_torch[2][MAX_REPS]; /* PyTorch */
    double ceiling[MAX_REPS];    /* GEMM ceiling sampled in the same round, GFLOP/s */
} model_result;

/* Pause between the two sides' measurements, longer than the time worker
 * threads keep spinning after a call (OpenBLAS: 2^28 cycles by default, about
 * 0.1 s; OpenMP in PyTorch: less), so that one side's idle threads do not run
 * into the other side's call. Measured: with 20 ms here PyTorch lost up to 4x
 * in the rounds. */
static void settle(void)
{
    struct timespec ts = {0, 150 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* Calls per side and round, back to back; the round keeps the fastest, so both
 * sides are timed warm (caches, thread wake-up, clock ramp after the pause). */
#define CALLS_PER_ROUND 3

/* reps rounds, each: a GEMM-ceiling sample, C encode, PyTorch encode, C decode,
 * PyTorch decode (C with a reused workspace), then C encode and decode with a
 * workspace allocated by the call; each of these is the fastest of
 * CALLS_PER_ROUND back-to-back calls, after a settle(). Ratios are taken within
 * a round, so a load that comes and goes on a shared machine affects both sides
 * alike. */
static int bench_model(const bench_opts *o, const char *path, const char *label, float *ga,
                       float *gb, float *gc, model_result *res)
{
    nets_model *m;
    vbm_error err;
    memset(res, 0, sizeof *res);
    snprintf(res->label, sizeof res->label, "%s", label);
    snprintf(res->path, sizeof res->path, "%s", path);
    if (nets_model_load(path, &m, &err) != VBM_OK) {
        fprintf(stderr, "bench-nets: %s\n", err.msg);
        return -1;
    }
    const nets_info *in = nets_model_info(m);
    long n = o->frames, C = in->code_size, obs = (long)in->channels * in->height * in->width;
    res->channels = in->channels;
    res->height = in->height;
    res->width = in->width;
    res->code_size = in->code_size;
    res->gaussian = in->likelihood == NETS_GAUSSIAN;
    res->params = in->n_params;
    res->flops[0] = seq_flops(&m->enc);
    res->flops[1] = seq_flops(&m->dec);
    res->reps = o->reps > MAX_REPS ? MAX_REPS : o->reps;
    float *x = malloc(sizeof(float) * n * obs), *mean = malloc(sizeof(float) * n * obs),
          *scale = malloc(sizeof(float) * n * obs);
    double *mu = malloc(sizeof(double) * n * C), *s2 = malloc(sizeof(double) * n * C),
           *z = malloc(sizeof(double) * n * C);
    rng_t r;
    rng_seed(&r, 1);
    for (long i = 0; i < n * obs; i++)
        x[i] = (float)rng_uniform(&r);
    for (long i = 0; i < n * C; i++)
        z[i] = rng_normal(&r);
    torch_proc tp;
    res->have_torch = o->torch && torch_start(o, path, &tp) == 0;
    if (res->have_torch) {
        res->torch_threads = tp.threads;
        snprintf(res->torch_version, sizeof res->torch_version, "%s", tp.version);
    }
    nets_workspace *ws = nets_workspace_new();
    int rc = 0;
    /* warm-up (also sizes the workspace) */
    rc |= nets_encode_ws(m, ws, x, n, mu, s2, &err) != VBM_OK;
    rc |= nets_decode_ws(m, ws, z, n, mean, scale, &err) != VBM_OK;
    for (int i = 0; i < res->reps && !rc; i++) {
        double t0 = bench_now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, GEMM_N, GEMM_N, GEMM_N, 1.0f, ga,
                    GEMM_N, gb, GEMM_N, 0.0f, gc, GEMM_N);
        res->ceiling[i] = 2.0 * GEMM_N * (double)GEMM_N * GEMM_N / (bench_now_s() - t0) * 1e-9;
        for (int k = 0; k < 2; k++) {
            settle();
            res->t_ws[k][i] = INFINITY;
            for (int c = 0; c < CALLS_PER_ROUND; c++) {
                t0 = bench_now_s();
                if (k == 0)
                    rc |= nets_encode_ws(m, ws, x, n, mu, s2, &err) != VBM_OK;
                else
                    rc |= nets_decode_ws(m, ws, z, n, mean, scale, &err) != VBM_OK;
                res->t_ws[k][i] = fmin(res->t_ws[k][i], bench_now_s() - t0);
            }
            if (res->have_torch) {
                settle();
                res->t_torch[k][i] = INFINITY;
                for (int c = 0; c < CALLS_PER_ROUND && res->have_torch; c++) {
                    double tt = torch_call(&tp, k == 0 ? "encode" : "decode");
                    if (!(tt > 0)) {
                        fprintf(stderr, "bench-nets: the PyTorch reference stopped answering\n");
                        res->have_torch = 0;
                    }
                    res->t_torch[k][i] = fmin(res->t_torch[k][i], tt);
                }
            }
        }
        for (int k = 0; k < 2; k++) {
            settle();
            res->t_alloc[k][i] = INFINITY;
            for (int c = 0; c < CALLS_PER_ROUND; c++) {
                t0 = bench_now_s();
                if (k == 0)
                    rc |= nets_encode(m, x, n, mu, s2, &err) != VBM_OK;
                else
                    rc |= nets_decode(m, z, n, mean, scale, &err) != VBM_OK;
                res->t_alloc[k][i] = fmin(res->t_alloc[k][i], bench_now_s() - t0);
            }
        }
    }
    if (rc)
        fprintf(stderr, "bench-nets: %s\n", err.msg);
    if (o->torch)
        torch_stop(&tp);
    nets_workspace_free(ws);
    free(x);
    free(mean);
    free(scale);
    free(mu);
    free(s2);
    free(z);
    nets_model_free(m);
    return rc ? -1 : 0;
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
           "MFLOP, decoder "
           "%.1f MFLOP\n",
           r->label, r->path, r->channels, r->height, r->width,
           r->gaussian ? "gaussian" : "bernoulli", r->code_size, r->params, r->flops[0] * 1e-6,
           r->flops[1] * 1e-6);
    printf("  %-7s %9s %9s %13s %9s %11s", "", "C img/s", "(best)", "(alloc/call)", "GFLOP/s",
           "of ceiling");
    if (r->have_torch)
        printf(" %14s %10s", "PyTorch img/s", "C/PyTorch");
    printf("\n");
    const char *names[2] = {"encode", "decode"};
    for (int k = 0; k < 2; k++) {
        memcpy(tmp, r->t_ws[k], sizeof(double) * R);
        double tm = bench_median(tmp, R), tb = best_of(r->t_ws[k], R);
        memcpy(tmp, r->t_alloc[k], sizeof(double) * R);
        double ta = bench_median(tmp, R);
        for (int i = 0; i < R; i++)
            tmp[i] = r->flops[k] * n / r->t_ws[k][i] * 1e-9 / r->ceiling[i];
        double frac = bench_median(tmp, R);
        printf("  %-7s %9.0f %9.0f %13.0f %9.1f %10.1f%%", names[k], n / tm, n / tb, n / ta,
               r->flops[k] * n / tm * 1e-9, 100.0 * frac);
        if (r->have_torch) {
            memcpy(tmp, r->t_torch[k], sizeof(double) * R);
            double pm = bench_median(tmp, R);
            for (int i = 0; i < R; i++)
                tmp[i] = r->t_torch[k][i] / r->t_ws[k][i];
            printf(" %14.0f %9.2fx", n / pm, bench_median(tmp, R));
        }
        printf("\n");
    }
    memcpy(tmp, r->ceiling, sizeof(double) * R);
    double cm = bench_median(tmp, R); /* sorts tmp */
    printf("  GEMM ceiling in these rounds: median %.1f, best %.1f GFLOP/s", cm, tmp[R - 1]);
    if (r->have_torch)
        printf("; PyTorch %s on the CPU, %d threads", r->torch_version, r->torch_threads);
    printf("\n");
}

static void usage(void)
{
    fprintf(stderr, "usage: bench-nets [--model FILE]... [--threads N] [--frames N] [--reps N] "
                    "[--no-torch] [--root DIR]\n"
                    "                  [--keep-cifar FILE] [--blas-default]\n"
                    "  Images per second for nets_encode / nets_decode of one episode (default 64 "
                    "frames) for each\n"
                    "  --model and for the paper's CIFAR architecture (App. F.2.1, 32x32x3, F=64, "
                    "C=200, random\n"
                    "  weights written to a temporary file, or to --keep-cifar FILE). Each of "
                    "--reps rounds (default 7)\n"
                    "  times one 2048^3 float32 cblas_sgemm (the GEMM ceiling), one C call and one "
                    "PyTorch call of each\n"
                    "  (bench/ref/nets_torch.py --serve under --root, default \".\", "
                    "/usr/bin/python3, the same number\n"
                    "  of threads, default: online CPUs); the ratios are taken within rounds, so a "
                    "shared machine's\n"
                    "  changing load affects both sides alike. On AVX-512F CPUs the program runs "
                    "itself again with\n"
                    "  OPENBLAS_CORETYPE=SkylakeX unless it names an AVX-512 core already or "
                    "--blas-default is given,\n"
                    "  so that the ceiling uses OpenBLAS's fastest kernels for the machine.\n");
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
    bench_opts o = {{0}, 0, (int)sysconf(_SC_NPROCESSORS_ONLN), 64, 7, 1, ".", NULL};
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
    printf("bench-nets: %d threads, %ld frames per call, %d rounds; medians over the rounds (C's "
           "best in brackets)\n",
           o.threads, o.frames, o.reps);
    printf("  OpenBLAS kernels for the ceiling: %s (OPENBLAS_CORETYPE=%s)\n",
           openblas_get_corename(),
           getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "unset");
    printf("  ratios (of ceiling, C/PyTorch) are taken within each round, then their median\n");
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
        if (bench_model(&o, o.models[i], "model", ga, gb, gc, &res[nres]) == 0)
            nres++;
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
    if (write_cifar_model(cifar) == 0
        && bench_model(&o, cifar,
                       "CIFAR architecture (App. F.2.1: F = 64, C = 200, random weights)", ga, gb,
                       gc, &res[nres])
               == 0)
        nres++;
    else
        rc = 1;
    if (!o.keep_cifar)
        remove(tmp);
    for (int i = 0; i < nres; i++)
        print_model(&o, &res[i]);
    printf("\ntargets (issue 4): decoder >= 2x PyTorch CPU and >= 40%% of the GEMM ceiling\n");
    free(res);
    free(ga);
    free(gb);
    free(gc);
    return rc ? 1 : 0;
}
