/* write.c -- owns the write-latency benchmark: vbm_write median time, GFLOP/s, the NumPy comparator
 * ratio and the cost scaling in T and H. */
#define _GNU_SOURCE /* CPU affinity, for the cache-line transfer timing */

#include "common.h"
#include <cblas.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "numerics/hugemem.h"
#include "numerics/rng.h"
#include "vbmem/vbmem.h"

#define MAX_REPS 1000
#define WARMUP_S 0.2 /* seconds of untimed writes before each timing */

typedef struct {
    int reps;         /* timed writes per configuration */
    int numpy_reps;   /* timed writes per NumPy run */
    int numpy;        /* run the NumPy comparator */
    int threads;      /* 0: OpenBLAS default */
    const char *root; /* repository root (holds bench/ref/vb_ref.py) */
    uint64_t seed;
    int scaling;   /* run the T / H scaling sweeps */
    int fastest;   /* compare the fastest settings of both sides at the paper's configuration */
    int dgemm;     /* the direct-path configurations on one thread against a one-core dgemm */
    int team;      /* > 1: the table's vbmem writes run on a team of this many threads */
    vbm_init init; /* write initialisation (default VBM_INIT_AUTO) */
} write_opts;

/* One benchmark configuration. H is 1 for the Gaussian memory. */
typedef struct {
    vbm_kind kind;
    long T;
    int H, K, C, iters;
} bench_case;

/* What one timing of vbmem produced. */
typedef struct {
    double median_s, min_s, elbo_per_frame;
} timing;

/* Level-3 flops of one write, counting only the BLAS-3 calls the library makes
 * (every la_gemm, and every Cholesky solve with a matrix of right-hand sides,
 * 2 K^2 n flops for n of them); K x K factorizations and inverses, the
 * per-frame scalar loops (responsibilities, ELBO terms, KL), k-means++ and
 * copies are NOT counted. A write of `it` iterations runs it + 1 address steps
 * and it memory updates (the last address step gives the returned q(y) and
 * ELBO).
 *
 * Mixture (H clusters, K rows, C columns, T frames; one group):
 *   address step:  2 H K C T   P = [R_1; ..; R_H] Z^T           (one GEMM)
 *                + 2 H K^2 T   W_h <- Sigma_w,h W_h             (H GEMMs)
 *                + 2 T H C     Z [mu_b1 .. mu_bH]^T             (shift GEMM)
 *                + 2 H K^2 C   S_h = R_h R_h^T                  (H GEMMs)
 *   update step:   2 H C T     Theta^T Z                        (one GEMM with
 *                + 2 H K T C   Y = [W~_1; ..; W~_H] Z            the M-step's)
 *                + 2 H K^2 T   Q_h = W~_h W_h^T                 (H GEMMs)
 *                + 2 H K^2 C   solve Q_h R_h = Y_h              (H solves)
 *   flops = it * (address + update) + address
 *
 * Gaussian without shift (K rows, C columns, T frames):
 *   address step:  2 K^2 C  A = R R^T / s2       + 2 T K C  Z R^T
 *                + 2 K^2 T  solve A W^T = ...
 *   ELBO (after the last address step only, as tol = 0 and no trace is asked):
 *                  2 T K C  W R (residuals)      + 2 K^2 C  S = R R^T
 *   update step:   2 K^2 T  W^T W  + 2 K C T  W^T Z  + 2 K^2 C  solve Q R = ...
 *   flops = it * (address + update) + address + ELBO */
/* Level-3 flops of one write on the path the library takes: direct, or for
 * the mixture with T <= C the Gram path (R_h implicit between iterations). */
static int uses_gram(const bench_case *b)
{
    return b->kind == VBM_MIXTURE && b->T <= b->C;
}

static double write_flops(const bench_case *b)
{
    double T = (double)b->T, H = b->H, K = b->K, C = b->C, it = b->iters;
    double addr, upd;
    if (b->kind == VBM_MIXTURE && uses_gram(b)) {
        /* once: G = Z Z^T (a rank-C update: T (T+1) C), the first R Z^T and mu_b Z^T, the first
         * update's Theta^T Z, then (from the second update on, shifts implicit) Z e_h and the
         * final mu_b = .. + Z^T x_h, and the final R = (Q^{-1} Wt) Z / s2 - .. (solves on T
         * columns: the benchmark's prior mean is zero);
         * per iteration: address (Sigma_w B) + update (X G, Wt G, the symmetric Q and Wt G Wt^T,
         * the R Z^T solve, the R R^T solves) */
        double sym = H * K * (K + 1) * T, later = it >= 2 ? 2 * 2 * H * T * C : 0.0;
        double once = T * (T + 1) * C + 2 * H * K * C * T + 2 * T * H * C
                      + (it >= 1 ? 2 * H * C * T : 0.0) + later + 2 * H * K * T * C
                      + 2 * H * K * K * T;
        addr = 2 * H * K * K * T;
        upd = 2 * H * T * T + 2 * H * K * T * T + 2 * sym + 2 * H * K * K * T + 4 * H * K * K * K;
        return once + it * (addr + upd) + addr;
    }
    if (b->kind == VBM_MIXTURE) {
        addr = 2 * H * K * C * T + 2 * H * K * K * T + 2 * T * H * C + 2 * H * K * K * C;
        upd = 2 * H * C * T + 2 * H * K * T * C + 2 * H * K * K * T + 2 * H * K * K * C;
    } else { /* the ELBO's W R and R R^T only after the last address step (no tol, no trace) */
        addr = 2 * K * K * C + 2 * T * K * C + 2 * K * K * T;
        upd = 2 * K * K * T + 2 * K * C * T + 2 * K * K * C;
        return it * (addr + upd) + addr + 2 * T * K * C + 2 * K * K * C;
    }
    return it * (addr + upd) + addr;
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: bench-write [--reps N] [--quick] [--no-numpy] [--no-scaling] [--no-fastest] "
        "[--no-dgemm]\n"
        "                   [--root DIR] [--seed S]\n"
        "                   [--threads N] [--team N] [--init NAME]\n"
        "  Median latency of vbm_write (after 0.2 s of warm-up writes) for four configurations, "
        "its\n"
        "  level-3 GFLOP/s, the same write in the NumPy reference (bench/ref/vb_ref.py, run with\n"
        "  /usr/bin/python3 from DIR, default \".\") and the ratio numpy / vbmem, then the cost\n"
        "  scaling of the mixture write in T and in H (least-squares slopes of log time). Before "
        "the\n"
        "  sweeps, the paper's configuration is timed at each side's fastest setting on this "
        "machine:\n"
        "  NumPy with 1 and with nproc OpenBLAS threads, vbmem on 1 thread, on a team of nproc\n"
        "  threads (vbm_team) and with nproc OpenBLAS threads.\n"
        "  --reps N     timed writes per configuration (default 9)\n"
        "  --quick      3 reps everywhere unless --reps is given (CI smoke)\n"
        "  --no-numpy   skip the NumPy comparator\n"
        "  --threads N  OpenBLAS threads for vbmem and for the NumPy child (default: OpenBLAS "
        "default)\n"
        "  --team N     the table's vbmem writes split over a vbm_team of N threads (default: "
        "none)\n"
        "  --no-fastest skip the fastest-settings comparison\n"
        "  --no-dgemm   skip T = 640 and 1280 on one thread against a one-core dgemm (the write's\n"
        "               two large products as bare dgemm calls of the same shapes, same run)\n"
        "  --init NAME  auto (default: random q(M) means, k-means++ shifts), prior, kmeans++ (R = "
        "R0 and\n"
        "               k-means++ shifts: the NumPy reference's initialisation), random\n"
        "  --no-scaling skip the T and H sweeps\n");
}

/* "auto", "prior", "kmeans++", "random" -> vbm_init. */
static int parse_init(const char *s, vbm_init *out)
{
    static const struct {
        const char *name;
        vbm_init init;
    } names[] = {{"auto", VBM_INIT_AUTO},
                 {"prior", VBM_INIT_PRIOR},
                 {"kmeans++", VBM_INIT_KMEANSPP},
                 {"random", VBM_INIT_RANDOM}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0) {
            *out = names[i].init;
            return 0;
        }
    return -1;
}

static const char *init_name(vbm_init i)
{
    switch (i) {
    case VBM_INIT_PRIOR: return "prior";
    case VBM_INIT_KMEANSPP: return "kmeans++";
    case VBM_INIT_RANDOM: return "random";
    default: return "auto";
    }
}

static int parse_args(int argc, char **argv, write_opts *o)
{
    o->reps = 9;
    o->numpy_reps = -1;
    o->numpy = 1;
    o->threads = 0;
    o->root = ".";
    o->seed = 0;
    o->scaling = 1;
    o->fastest = 1;
    o->dgemm = 1;
    o->team = 0;
    o->init = VBM_INIT_AUTO;
    int quick = 0, reps_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : ""; /* "" fails every parser */
        int bad = 0, takes = 1;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--quick") == 0) {
            quick = 1;
            takes = 0;
        } else if (strcmp(a, "--no-numpy") == 0) {
            o->numpy = 0;
            takes = 0;
        } else if (strcmp(a, "--no-scaling") == 0) {
            o->scaling = 0;
            takes = 0;
        } else if (strcmp(a, "--no-fastest") == 0) {
            o->fastest = 0;
            takes = 0;
        } else if (strcmp(a, "--no-dgemm") == 0) {
            o->dgemm = 0;
            takes = 0;
        } else if (strcmp(a, "--team") == 0) {
            bad = bench_parse_int(v, 1, 64, &o->team);
        } else if (strcmp(a, "--reps") == 0) {
            bad = bench_parse_int(v, 1, MAX_REPS, &o->reps);
            reps_given = 1;
        } else if (strcmp(a, "--threads") == 0) {
            bad = bench_parse_int(v, 1, 4096, &o->threads);
        } else if (strcmp(a, "--root") == 0) {
            o->root = v;
            bad = *v == '\0';
        } else if (strcmp(a, "--init") == 0) {
            bad = parse_init(v, &o->init);
        } else if (strcmp(a, "--seed") == 0) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            bad = errno || end == v || *end != '\0';
            o->seed = (uint64_t)s;
        } else {
            fprintf(stderr, "bench-write: unknown option %s\n", a);
            usage(stderr);
            return -1;
        }
        if (bad) {
            fprintf(stderr, "bench-write: bad or missing value for %s\n", a);
            usage(stderr);
            return -1;
        }
        i += takes;
    }
    if (quick && !reps_given)
        o->reps = 3;
    o->numpy_reps = o->reps;
    return 0;
}

/* Machine facts: CPU count, model, OpenBLAS build and threads. */
static void print_machine(void)
{
    char model[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "model name", 10) == 0) {
                const char *p = strchr(line, ':');
                if (p) {
                    p++;
                    while (*p == ' ' || *p == '\t')
                        p++;
                    snprintf(model, sizeof model, "%s", p);
                    model[strcspn(model, "\n")] = '\0';
                }
                break;
            }
        fclose(f);
    }
    time_t now = time(NULL);
    struct tm tm;
    char date[64] = "?";
    if (gmtime_r(&now, &tm))
        strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", &tm);
    printf("date:            %s\n", date);
    printf("nproc:           %ld\n", sysconf(_SC_NPROCESSORS_ONLN));
    printf("cpu model:       %s\n", model);
    printf("openblas config: %s\n", openblas_get_config());
    printf("openblas core:   %s\n", openblas_get_corename());
    printf("openblas threads: %d\n", openblas_get_num_threads());
    printf("libvbmem:        %s\n", VBM_VERSION_STRING);
    f = fopen("/proc/loadavg", "r");
    char load[128] = "?";
    if (f) {
        if (fgets(load, sizeof load, f))
            load[strcspn(load, "\n")] = '\0';
        fclose(f);
    }
    printf("loadavg (start): %s (other work on the machine skews every timing)\n", load);
}

static const char *kind_arg(vbm_kind k)
{
    return k == VBM_MIXTURE ? "mixture" : "gaussian";
}

/* Time vbm_write on standard-normal exact codes: warm-up, then `reps`
 * timed writes from the base prior (each covers the codes check, the prior,
 * init, the iterations, the final address step and the ELBO). */
/* Run after each timed write of time_vbmem_hook (untimed there): rep is the write's index. */
typedef void (*write_hook)(void *ctx, int rep);

static int time_vbmem_hook(const bench_case *b, int reps, uint64_t seed, vbm_init init,
                           vbm_solver solver, vbm_team *team, vbm_scratch *scratch, write_hook hook,
                           void *hook_ctx, timing *out)
{
    vbm_config cfg;
    vbm_config_default(b->kind, b->C, &cfg);
    cfg.rows = b->K;
    if (b->kind == VBM_MIXTURE)
        cfg.clusters = b->H;
    else
        cfg.shift = 0;
    double *Z = malloc(sizeof(double) * (size_t)b->T * b->C);
    double *t = malloc(sizeof(double) * (size_t)reps);
    if (!Z || !t) {
        free(Z);
        free(t);
        fprintf(stderr, "bench-write: out of memory\n");
        return -1;
    }
    rng_t rng;
    rng_seed(&rng, seed);
    for (size_t i = 0; i < (size_t)b->T * b->C; i++)
        Z[i] = rng_normal(&rng);
    vbm_codes codes = {b->T, b->C, Z, NULL};
    vbm_write_opts wo;
    vbm_write_opts_default(&wo);
    wo.max_iter = b->iters;
    wo.tol = 0.0;
    wo.seed = seed;
    wo.init = init;
    wo.solver = solver;
    wo.team = team;
    wo.scratch = scratch;
    vbm_error err = {0};
    vbm_memory *mem = NULL;
    vbm_write_result res;
    int rc = 0;
    /* Warm-up (not timed): at least one write and at least WARMUP_S seconds. */
    if (vbm_memory_create(&cfg, NULL, NULL, &mem, &err)) {
        fprintf(stderr, "bench-write: %s T=%ld H=%d: %s\n", kind_arg(b->kind), b->T, b->H, err.msg);
        rc = -1;
    }
    for (double tw = bench_now_s(); rc == 0;) {
        if (vbm_write(mem, &codes, &wo, &res, &err)) {
            fprintf(stderr, "bench-write: %s T=%ld H=%d: %s\n", kind_arg(b->kind), b->T, b->H,
                    err.msg);
            rc = -1;
            break;
        }
        if (res.iterations != b->iters)
            fprintf(stderr, "bench-write: warning: %d iterations run, %d asked\n", res.iterations,
                    b->iters);
        vbm_write_result_free(&res);
        if (bench_now_s() - tw >= WARMUP_S)
            break;
    }
    for (int r = 0; r < reps && rc == 0; r++) {
        double t0 = bench_now_s();
        if (vbm_write(mem, &codes, &wo, &res, &err)) {
            fprintf(stderr, "bench-write: %s T=%ld H=%d: %s\n", kind_arg(b->kind), b->T, b->H,
                    err.msg);
            rc = -1;
            break;
        }
        t[r] = bench_now_s() - t0;
        out->elbo_per_frame = res.elbo.per_frame;
        vbm_write_result_free(&res);
        if (hook)
            hook(hook_ctx, r);
    }
    if (rc == 0) {
        out->median_s = bench_median(t, reps);
        out->min_s = t[0]; /* bench_median() sorted t */
    }
    vbm_memory_free(mem);
    free(Z);
    free(t);
    return rc;
}

static int time_vbmem(const bench_case *b, int reps, uint64_t seed, vbm_init init,
                      vbm_solver solver, vbm_team *team, timing *out)
{
    return time_vbmem_hook(b, reps, seed, init, solver, team, NULL, NULL, NULL, out);
}

/* Append s to buf as a single-quoted shell word. Returns -1 when it does not fit. */
static int shell_quote(char *buf, size_t cap, const char *s)
{
    size_t n = strlen(buf);
    if (n + 1 >= cap)
        return -1;
    buf[n++] = '\'';
    for (; *s; s++) {
        const char *piece = *s == '\'' ? "'\\''" : NULL;
        size_t len = piece ? 4 : 1;
        if (n + len + 2 >= cap)
            return -1;
        if (piece)
            memcpy(buf + n, piece, len);
        else
            buf[n] = *s;
        n += len;
    }
    buf[n++] = '\'';
    buf[n] = '\0';
    return 0;
}

/* Find "key": <number> in a JSON line. */
static int json_number(const char *line, const char *key, double *out)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p)
        return -1;
    p += strlen(pat);
    char *end;
    errno = 0;
    double v = strtod(p, &end);
    if (end == p || errno)
        return -1;
    *out = v;
    return 0;
}

/* Run the NumPy comparator for the same configuration and parse median_s;
 * threads > 0 sets its OpenBLAS threads. */
static int time_numpy(const write_opts *o, const bench_case *b, int threads, timing *out)
{
    char script[4096];
    snprintf(script, sizeof script, "%s/bench/ref/vb_ref.py", o->root);
    if (access(script, R_OK) != 0) {
        fprintf(stderr, "bench-write: NumPy comparator not found at %s (use --root)\n", script);
        return -1;
    }
    char cmd[8192] = "";
    if (threads > 0)
        snprintf(cmd, sizeof cmd, "OPENBLAS_NUM_THREADS=%d ", threads);
    strcat(cmd, "/usr/bin/python3 ");
    if (shell_quote(cmd, sizeof cmd, script) != 0)
        return -1;
    size_t n = strlen(cmd);
    snprintf(cmd + n, sizeof cmd - n,
             " time --kind %s --T %ld --H %d --K %d --C %d --iters %d --reps %d --seed %llu",
             kind_arg(b->kind), b->T, b->H, b->K, b->C, b->iters, o->numpy_reps,
             (unsigned long long)o->seed);
    fflush(stdout);
    FILE *p = popen(cmd, "r");
    if (!p) {
        fprintf(stderr, "bench-write: cannot run %s\n", cmd);
        return -1;
    }
    char line[4096];
    int found = 0;
    while (fgets(line, sizeof line, p))
        if (!found && json_number(line, "median_s", &out->median_s) == 0) {
            found = 1;
            if (json_number(line, "elbo_per_frame", &out->elbo_per_frame) != 0)
                out->elbo_per_frame = NAN;
        }
    int st = pclose(p);
    if (st != 0 || !found) {
        fprintf(stderr, "bench-write: NumPy comparator failed (status %d): %s\n", st, cmd);
        return -1;
    }
    out->min_s = NAN;
    return 0;
}

/* Least-squares slope of log(y) against log(x). */
static double loglog_slope(const double *x, const double *y, int n)
{
    double mx = 0, my = 0;
    for (int i = 0; i < n; i++) {
        mx += log(x[i]);
        my += log(y[i]);
    }
    mx /= n;
    my /= n;
    double sxy = 0, sxx = 0;
    for (int i = 0; i < n; i++) {
        double dx = log(x[i]) - mx;
        sxy += dx * (log(y[i]) - my);
        sxx += dx * dx;
    }
    return sxy / sxx;
}

/* Least-squares fit y = a + b x; returns the intercept a, the slope in *b. */
static double linear_fit(const double *x, const double *y, int n, double *b)
{
    double mx = 0, my = 0;
    for (int i = 0; i < n; i++) {
        mx += x[i];
        my += y[i];
    }
    mx /= n;
    my /= n;
    double sxy = 0, sxx = 0;
    for (int i = 0; i < n; i++) {
        sxy += (x[i] - mx) * (y[i] - my);
        sxx += (x[i] - mx) * (x[i] - mx);
    }
    *b = sxy / sxx;
    return my - *b * mx;
}

static void describe(const bench_case *b, char *buf, size_t cap)
{
    if (b->kind == VBM_MIXTURE)
        snprintf(buf, cap, "mixture  T=%-5ld H=%-4d K=%-3d C=%-4d it=%d", b->T, b->H, b->K, b->C,
                 b->iters);
    else
        snprintf(buf, cap, "gaussian T=%-5ld K=%-3d C=%-4d it=%d (no shift)", b->T, b->K, b->C,
                 b->iters);
}

/* One-way latency of moving a cache line between two threads, each pinned to
 * one of the first two CPUs the process may use: they bounce one counter. A
 * team's items pay this for every line one thread writes and the other reads.
 * Returns ns per transfer, or NAN when the process has fewer than 2 CPUs. */
typedef struct {
    _Atomic long *v;
    long n;
    int cpu;
} bounce_arg;

static void pin_to(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *bounce_other(void *p)
{
    bounce_arg *a = p;
    pin_to(a->cpu);
    for (long i = 1; i < a->n; i += 2) {
        while (atomic_load_explicit(a->v, memory_order_acquire) != i) {
        }
        atomic_store_explicit(a->v, i + 1, memory_order_release);
    }
    return NULL;
}

static double line_transfer_ns(void)
{
    cpu_set_t mine;
    int cpus[2], found = 0;
    if (sched_getaffinity(0, sizeof mine, &mine) != 0)
        return NAN;
    for (int c = 0; c < CPU_SETSIZE && found < 2; c++)
        if (CPU_ISSET(c, &mine))
            cpus[found++] = c;
    if (found < 2)
        return NAN;
    static _Atomic long counter __attribute__((aligned(64)));
    atomic_store(&counter, 0);
    bounce_arg a = {&counter, 400000, cpus[1]};
    pthread_t th;
    if (pthread_create(&th, NULL, bounce_other, &a) != 0)
        return NAN;
    pin_to(cpus[0]);
    double t0 = bench_now_s();
    for (long i = 0; i < a.n; i += 2) {
        while (atomic_load_explicit(&counter, memory_order_acquire) != i) {
        }
        atomic_store_explicit(&counter, i + 1, memory_order_release);
    }
    double t = bench_now_s() - t0;
    pthread_join(th, NULL);
    sched_setaffinity(0, sizeof mine, &mine);
    return t / (double)a.n * 1e9;
}

/* The paper's configuration at each side's fastest setting on this machine (the
 * fastest of the settings tried, each timed in this run): NumPy with 1 and with
 * nproc OpenBLAS threads; vbmem on the calling thread alone, on a vbm_team of
 * nproc threads (OpenBLAS on 1 thread in both), and with nproc OpenBLAS threads
 * and no team. Prints every setting, the ratio of the fastest times, and the
 * ratio on one thread each. Restores OpenBLAS to `threads` (0: nproc). */
static int fastest(const write_opts *o, int threads)
{
    const bench_case b = {VBM_MIXTURE, 64, 10, 6, 200, 10};
    int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1)
        ncpu = 1;
    int reps = o->reps < 15 ? 15 : o->reps;
    printf("\nfastest settings, mixture T=64 H=10 K=6 C=200 it=10 (median of %d writes each; "
           "OpenBLAS %s kernels):\n",
           reps, openblas_get_corename());
    write_opts on = *o;
    on.numpy_reps = reps;
    double np_best = INFINITY, np_one = NAN, vb_best = INFINITY, vb_one = NAN;
    const char *np_best_name = "-", *vb_best_name = "-";
    static const char *np_names[] = {"numpy, OpenBLAS 1 thread", "numpy, OpenBLAS nproc threads"};
    for (int i = 0; i < 2 && o->numpy; i++) {
        timing np;
        if (i == 1 && ncpu == 1)
            break;
        if (time_numpy(&on, &b, i == 0 ? 1 : ncpu, &np) != 0)
            return -1;
        printf("  %-44s %10.6f s\n", np_names[i], np.median_s);
        if (i == 0)
            np_one = np.median_s;
        if (np.median_s < np_best) {
            np_best = np.median_s;
            np_best_name = np_names[i];
        }
    }
    static const char *vb_names[] = {"vbmem, 1 thread (OpenBLAS 1 thread)",
                                     "vbmem, vbm_team of nproc (OpenBLAS 1 thread)",
                                     "vbmem, OpenBLAS nproc threads, no team"};
    for (int i = 0; i < 3; i++) {
        if (i > 0 && ncpu == 1)
            break;
        openblas_set_num_threads(i == 2 ? ncpu : 1);
        vbm_team *team = i == 1 ? vbm_team_new(ncpu) : NULL;
        timing t;
        int rc = time_vbmem(&b, reps, o->seed, o->init, VBM_SOLVER_AUTO, team, &t);
        vbm_team_free(team);
        if (rc != 0)
            return -1;
        printf("  %-44s %10.6f s   (min %.6f s)\n", vb_names[i], t.median_s, t.min_s);
        if (i == 0)
            vb_one = t.median_s;
        if (t.median_s < vb_best) {
            vb_best = t.median_s;
            vb_best_name = vb_names[i];
        }
    }
    openblas_set_num_threads(threads > 0 ? threads : ncpu);
    double ns = line_transfer_ns();
    if (!isnan(ns))
        printf("  one-way cache-line transfer between the first two CPUs: %.0f ns (a team's items "
               "pay it for\n"
               "  every line one thread writes and the other reads)\n",
               ns);
    if (o->numpy) {
        printf("  fastest numpy / fastest vbmem = %.2f   (%s / %s)\n", np_best / vb_best,
               np_best_name, vb_best_name);
        printf("  one thread each: numpy / vbmem = %.2f\n", np_one / vb_one);
    }
    fflush(stdout);
    return 0;
}

/* The two large products of a direct-path write as bare one-thread dgemm
 * calls, on standard-normal operands: as many as one write runs (it + 1
 * address products [R_1; ..; R_H] Z^T, HK x T x C, and `it` update products
 * [Wt; Theta^T] Z, (HK + H) x C x T), timed as one block after each timed
 * write (time_vbmem_hook), so that both sides see the same load. The arrays are
 * allocated once (hugemem_alloc), before the first timed block. */
typedef struct {
    const bench_case *b;
    double *A, *Z, *P, *t; /* A: (HK + H) x max(T, C); Z: T x C; P: (HK + H) x max(T, C) */
} dgemm_block;

static void dgemm_block_run(void *ctx, int rep)
{
    dgemm_block *d = ctx;
    const bench_case *b = d->b;
    int hk = b->H * b->K, T = (int)b->T, C = b->C;
    double t0 = bench_now_s();
    for (int i = 0; i <= b->iters; i++)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, hk, T, C, 1.0, d->A, C, d->Z, C, 0.0,
                    d->P, T);
    for (int i = 0; i < b->iters; i++)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, hk + b->H, C, T, 1.0, d->A, T, d->Z,
                    C, 0.0, d->P, C);
    d->t[rep] = bench_now_s() - t0;
}

/* The direct-path configurations (T > C) on one thread against a one-core
 * dgemm measured in the same run: OpenBLAS on 1 thread for both; after each
 * timed write the write's two large products run as bare dgemm calls
 * (dgemm_block_run). vbmem's level-3 GFLOP/s (write_flops over the write's
 * time) against the dgemm block's, from the medians and from the minima.
 * Restores OpenBLAS to `threads` (0: nproc). */
static int against_dgemm(const write_opts *o, int threads)
{
    const bench_case cases[] = {{VBM_MIXTURE, 640, 100, 6, 200, 10},
                                {VBM_MIXTURE, 1280, 150, 6, 200, 10}};
    int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN), reps = o->reps;
    printf("\none thread against a one-core dgemm (OpenBLAS %s kernels, 1 thread each; %d writes, "
           "each\n"
           "followed by the write's two large products as bare dgemm calls, as many as it runs):\n",
           openblas_get_corename(), reps);
    printf("  %-48s %10s %8s %14s %15s %15s\n", "configuration", "vbmem s", "GFLOP/s",
           "dgemm GFLOP/s", "of dgemm (med)", "of dgemm (min)");
    openblas_set_num_threads(1);
    int rc = 0;
    for (int i = 0; i < 2 && rc == 0; i++) {
        const bench_case *b = &cases[i];
        int hk = b->H * b->K;
        size_t wide = (size_t)(b->T > b->C ? b->T : b->C);
        /* the block's arrays on transparent huge pages where the kernel allows, as the
         * write's big arrays are (hugemem_alloc, as vbm_scratch's blocks) */
        dgemm_block d = {b, hugemem_alloc(sizeof(double) * (hk + b->H) * wide),
                         hugemem_alloc(sizeof(double) * (size_t)b->T * b->C),
                         hugemem_alloc(sizeof(double) * (hk + b->H) * wide),
                         malloc(sizeof(double) * reps)};
        if (!d.A || !d.Z || !d.P || !d.t) {
            fprintf(stderr, "bench-write: out of memory\n");
            rc = -1;
        } else {
            rng_t rng;
            rng_seed(&rng, o->seed + 1);
            for (size_t k = 0; k < (hk + b->H) * wide; k++)
                d.A[k] = rng_normal(&rng);
            for (size_t k = 0; k < (size_t)b->T * b->C; k++)
                d.Z[k] = rng_normal(&rng);
            dgemm_block_run(&d, 0);                     /* once untimed: OpenBLAS's buffers */
            for (int sc = 0; sc < 2 && rc == 0; sc++) { /* without, then with a vbm_scratch */
                vbm_scratch *scratch = sc ? vbm_scratch_new() : NULL;
                timing t;
                rc = sc && !scratch ? -1
                                    : time_vbmem_hook(b, reps, o->seed, o->init, VBM_SOLVER_AUTO,
                                                      NULL, scratch, dgemm_block_run, &d, &t);
                vbm_scratch_free(scratch);
                if (rc != 0)
                    break;
                double fd = 2.0 * (b->iters + 1) * hk * (double)b->T * b->C
                            + 2.0 * b->iters * (hk + b->H) * (double)b->C * b->T,
                       fv = write_flops(b);
                double dmed = bench_median(d.t, reps), dmin = d.t[0]; /* bench_median sorted d.t */
                char desc[128], row[160];
                describe(b, desc, sizeof desc);
                snprintf(row, sizeof row, "%s%s", desc, sc ? " scratch" : "");
                printf("  %-48s %10.6f %8.2f %14.2f %14.0f%% %14.0f%%\n", row, t.median_s,
                       fv / t.median_s * 1e-9, fd / dmed * 1e-9,
                       100.0 * (fv / t.median_s) / (fd / dmed),
                       100.0 * (fv / t.min_s) / (fd / dmin));
                fflush(stdout);
            }
        }
        free(d.A);
        free(d.Z);
        free(d.P);
        free(d.t);
    }
    openblas_set_num_threads(threads > 0 ? threads : (ncpu > 0 ? ncpu : 1));
    return rc;
}

/* One sweep of the mixture write: vary T (vary_T) or H; print a table and the slope. */
static int sweep(const write_opts *o, vbm_team *team, int vary_T, const int *vals, int n,
                 double *slope)
{
    double x[16], y[16], ymin[16];
    printf("\n%s sweep (mixture, K=6, C=200, 10 iterations, %s):\n", vary_T ? "T" : "H",
           vary_T ? "H=10" : "T=640");
    printf("  %6s  %12s  %12s  %10s  %14s  %s\n", vary_T ? "T" : "H", "median s", "(min s)",
           "GFLOP/s", "us per frame", "path");
    for (int i = 0; i < n; i++) {
        bench_case b = {VBM_MIXTURE, vary_T ? vals[i] : 640, vary_T ? 10 : vals[i], 6, 200, 10};
        timing t;
        if (time_vbmem(&b, o->reps, o->seed, o->init, VBM_SOLVER_AUTO, team, &t) != 0)
            return -1;
        x[i] = vals[i];
        y[i] = t.median_s;
        ymin[i] = t.min_s;
        printf("  %6d  %12.6f  %12.6f  %10.2f  %14.3f  %s\n", vals[i], t.median_s, t.min_s,
               write_flops(&b) / t.median_s * 1e-9, t.median_s / (double)b.T * 1e6,
               uses_gram(&b) ? "gram" : "direct");
        fflush(stdout);
    }
    *slope = loglog_slope(x, y, n);
    double b, a = linear_fit(x, y, n, &b);
    printf("  least-squares slope of log(time) vs log(%s): %.3f (from the min times: %.3f)\n",
           vary_T ? "T" : "H", *slope, loglog_slope(x, ymin, n));
    printf("  least-squares line: time = %.3f ms + %.4f ms * %s (intercept = %.0f%% of the "
           "smallest case)\n",
           a * 1e3, b * 1e3, vary_T ? "T" : "H", 100.0 * a / y[0]);
    /* The slope within each path: the Gram path (T <= C) costs O(T^2) per iteration, at most
     * the direct path's O(T C). */
    if (vary_T) {
        int first_direct = 0;
        while (first_direct < n && vals[first_direct] <= 200)
            first_direct++;
        if (first_direct >= 2)
            printf("  slope over the Gram-path points (T <= C): %.3f\n",
                   loglog_slope(x, y, first_direct));
        if (n - first_direct >= 2)
            printf("  slope over the direct-path points (T > C): %.3f\n",
                   loglog_slope(x + first_direct, y + first_direct, n - first_direct));
    }
    return 0;
}

int main(int argc, char **argv)
{
    write_opts o;
    if (parse_args(argc, argv, &o) != 0)
        return 2;
    if (o.threads > 0)
        openblas_set_num_threads(o.threads);
    /* The heap settings vbmemd uses (src/vbmemd/main.c): a write's buffers stay in
     * the heap between writes instead of being unmapped and faulted in again,
     * which with a team's helpers running would also cost a TLB shootdown each. */
    if (!mallopt(M_MMAP_THRESHOLD, 4 << 20) || !mallopt(M_TRIM_THRESHOLD, 64 << 20))
        fprintf(stderr, "bench-write: mallopt refused the heap thresholds\n");
    vbm_team *team = o.team > 1 ? vbm_team_new(o.team) : NULL;
    double t_start = bench_now_s();
    printf("bench-write: vbm_write latency (median of %d timed writes after >= 0.2 s of warm-up), "
           "init %s, seed %llu\n",
           o.reps, init_name(o.init), (unsigned long long)o.seed);
    if (team)
        printf("vbmem writes in the table and the sweeps: on a vbm_team of %d threads\n", o.team);
    print_machine();
    printf("\nGFLOP/s counts only the level-3 products (GEMMs and multi-right-hand-side Cholesky "
           "solves);\n"
           "see write_flops() in bench/write.c and bench/README.md for the formula.\n");

    const bench_case cases[] = {
        {VBM_MIXTURE, 64, 10, 6, 200, 10},
        {VBM_MIXTURE, 640, 100, 6, 200, 10},
        {VBM_MIXTURE, 1280, 150, 6, 200, 10},
        {VBM_GAUSSIAN, 32, 1, 32, 200, 50},
    };
    int ncases = (int)(sizeof cases / sizeof cases[0]);
    printf("\n%-46s %10s %10s %9s %8s %10s %8s %11s %11s\n", "configuration", "vbmem s", "(min s)",
           "MFLOP", "GFLOP/s", "numpy s", "np/vbmem", "elbo/frame", "np elbo/fr");
    int status = 0;
    for (int i = 0; i < ncases; i++) {
        const bench_case *b = &cases[i];
        char desc[128];
        describe(b, desc, sizeof desc);
        timing t, np;
        if (time_vbmem(b, o.reps, o.seed, o.init, VBM_SOLVER_AUTO, team, &t) != 0) {
            status = 1;
            continue;
        }
        if (uses_gram(b)) { /* the same write on the direct path, for comparison */
            timing td;
            if (time_vbmem(b, o.reps, o.seed, o.init, VBM_SOLVER_DIRECT, team, &td) == 0)
                printf("%-46s %10.6f %10.6f   (direct path; the Gram path below is %.2fx faster)\n",
                       "  (solver=direct)", td.median_s, td.min_s, td.median_s / t.median_s);
        }
        double fl = write_flops(b);
        int have_np = o.numpy && time_numpy(&o, b, o.threads, &np) == 0;
        if (have_np)
            printf("%-46s %10.6f %10.6f %9.2f %8.2f %10.6f %8.2f %11.4f %11.4f\n", desc, t.median_s,
                   t.min_s, fl * 1e-6, fl / t.median_s * 1e-9, np.median_s,
                   np.median_s / t.median_s, t.elbo_per_frame, np.elbo_per_frame);
        else
            printf("%-46s %10.6f %10.6f %9.2f %8.2f %10s %8s %11.4f %11s\n", desc, t.median_s,
                   t.min_s, fl * 1e-6, fl / t.median_s * 1e-9, "-", "-", t.elbo_per_frame, "-");
        fflush(stdout);
    }
    printf(
        "(elbo/frame columns: both fits use their own standard-normal codes and k-means++ draws,\n"
        " so they agree only statistically, not digit for digit)\n");

    if (o.fastest && fastest(&o, o.threads) != 0)
        status = 1;
    if (o.dgemm && against_dgemm(&o, o.threads) != 0)
        status = 1;

    if (o.scaling) {
        static const int Ts[] = {64, 128, 256, 512, 1024, 2048};
        static const int Hs[] = {10, 20, 40, 80, 160};
        double sT = NAN, sH = NAN;
        if (sweep(&o, team, 1, Ts, 6, &sT) != 0 || sweep(&o, team, 0, Hs, 5, &sH) != 0)
            status = 1;
        else
            printf("\nscaling: slope in T = %.3f, slope in H = %.3f (1 = linear cost)\n", sT, sH);
    }
    printf("total run time %.1f s\n", bench_now_s() - t_start);
    vbm_team_free(team);
    return status;
}
