/* test_nets_paths.c -- parity of the networks' paths on this machine, on whole networks: the
 * AVX-512 engine (src/nets/kernels_avx512.c), the AVX2 engine (kernels_avx2.c), oneDNN with the
 * CPU's own kernels (all in this process, by nets_workspace_set_path) and oneDNN capped to its
 * AVX2 kernels (this program again, as a child process with ONEDNN_MAX_CPU_ISA=AVX2, since
 * oneDNN reads that once per process), each against the blas path (im2col + OpenBLAS sgemm, in
 * this process): the bundled model and the three golden models of train/golden_nets.py, encoded
 * and decoded at batch sizes 1, 7 and 64 (64 on one thread and on three). Every output (code
 * means, log variances, pixel means and scales) must agree within float32 tolerance (PATHS_TOL
 * below). The paths that cannot run here (an engine without its instructions, oneDNN without
 * libdnnl) are left out with a line saying so; when none but blas runs the program exits 77
 * (meson's SKIP).
 *
 * usage: test-nets-paths            (the comparison)
 *        test-nets-paths --dump FILE (the child: the oneDNN path's outputs, as doubles) */
#define _GNU_SOURCE /* environ */
#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nets/nets.h"
#include "nets/onednn.h"

extern char **environ;

/* The tolerance, |a - b| <= PATHS_TOL * (1 + |b|) on every output. The paths sum the same
 * float32 products in other orders (16-lane vector accumulators over 32-column panels, oneDNN's
 * blocked kernels, OpenBLAS's blocking), which moves each result by a few float32 ulps per layer
 * (2^-23 = 1.2e-7 relative); every run prints the largest difference it saw. 1e-4 is the bound
 * tests/test_nets.c asserts against
 * PyTorch; a kernel that drops, repeats or misplaces a tap, a row or a panel moves outputs by
 * 1e-2 and more. */
#define PATHS_TOL 1e-4

/* A growing array of outputs. */
typedef struct {
    double *v;
    long n, cap;
} paths_out;

static int paths_push(paths_out *o, double x)
{
    if (o->n == o->cap) {
        long cap = o->cap ? 2 * o->cap : 1 << 16;
        double *v = realloc(o->v, sizeof(double) * (size_t)cap);

        if (v == NULL)
            return -1;
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = x;
    return 0;
}

/* xorshift64*: uniform in [0, 1). */
static double paths_uniform(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

/* Encode n random images and decode n random codes of model path on `threads` threads on the
 * networks' path p, appending mu, log s2, mean (and scale) to o. Returns 0, or -1 with a
 * message printed. */
static int paths_run(const char *path, nets_path p, long n, int threads, paths_out *o)
{
    nets_model *m;
    nets_workspace *ws;
    vbm_error err;
    uint64_t seed = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n;
    const nets_info *in;
    long C, obs, i;
    float *x, *mean, *scale;
    double *mu, *s2, *z;
    int rc = 0, gauss;

    if (nets_model_load(path, &m, &err) != VBM_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    in = nets_model_info(m);
    C = in->code_size;
    obs = (long)in->channels * in->height * in->width;
    gauss = in->likelihood == NETS_GAUSSIAN;
    x = malloc(sizeof(float) * (size_t)(n * obs));
    mean = malloc(sizeof(float) * (size_t)(n * obs));
    scale = malloc(sizeof(float) * (size_t)(n * obs));
    mu = malloc(sizeof(double) * (size_t)(n * C));
    s2 = malloc(sizeof(double) * (size_t)(n * C));
    z = malloc(sizeof(double) * (size_t)(n * C));
    ws = nets_workspace_new();
    if (x == NULL || mean == NULL || scale == NULL || mu == NULL || s2 == NULL || z == NULL
        || ws == NULL) {
        fprintf(stderr, "out of memory\n");
        rc = -1;
    } else if (nets_workspace_set_path(ws, p, &err) != VBM_OK) {
        fprintf(stderr, "%s\n", err.msg);
        rc = -1;
    }
    if (rc == 0) {
        nets_workspace_set_threads(ws, threads);
        for (i = 0; i < n * obs; i++)
            x[i] = (float)paths_uniform(&seed);
        for (i = 0; i < n * C; i++) /* Box-Muller: standard normal codes */
            z[i] = sqrt(-2.0 * log(1.0 - paths_uniform(&seed)))
                   * cos(6.283185307179586 * paths_uniform(&seed));
        if (nets_encode_ws(m, ws, x, n, mu, s2, &err) != VBM_OK
            || nets_decode_ws(m, ws, z, n, mean, gauss ? scale : NULL, &err) != VBM_OK) {
            fprintf(stderr, "%s: %s\n", path, err.msg);
            rc = -1;
        }
    }
    for (i = 0; rc == 0 && i < n * C; i++)
        rc = paths_push(o, mu[i]) || paths_push(o, log(s2[i])) ? -1 : 0;
    for (i = 0; rc == 0 && i < n * obs; i++)
        rc = paths_push(o, mean[i]) || (gauss && paths_push(o, scale[i])) ? -1 : 0;
    nets_workspace_free(ws);
    free(x);
    free(mean);
    free(scale);
    free(mu);
    free(s2);
    free(z);
    nets_model_free(m);
    return rc;
}

/* Every case, in order, on path p. */
static int paths_all(nets_path p, paths_out *o)
{
    static const char *const golden[] = {"golden_nets", "golden_nets_bernoulli",
                                         "golden_nets_bounded"};
    static const long sizes[] = {1, 7, 64};
    char path[4096];
    size_t g, k;

    for (g = 0; g < 4; g++) {
        if (g == 0)
            snprintf(path, sizeof path, "%s", PATHS_BUNDLED_MODEL);
        else
            snprintf(path, sizeof path, "%s/%s.safetensors", PATHS_TEST_DATA, golden[g - 1]);
        for (k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
            if (paths_run(path, p, sizes[k], 1, o) != 0)
                return -1;
        if (paths_run(path, p, 64, 3, o) != 0)
            return -1;
    }
    return 0;
}

/* The child: the oneDNN path's outputs, with the ISA its environment caps, into file. */
static int paths_dump(const char *file)
{
    paths_out o = {NULL, 0, 0};
    FILE *f;
    int rc = 1;

    if (strncmp(nets_dnn_isa(), "avx2", 4) != 0) {
        fprintf(stderr, "test-nets-paths --dump: ONEDNN_MAX_CPU_ISA=AVX2 left oneDNN on %s\n",
                nets_dnn_isa());
        return 1;
    }
    if (paths_all(NETS_PATH_ONEDNN, &o) == 0 && (f = fopen(file, "wb")) != NULL) {
        if (fwrite(o.v, sizeof(double), (size_t)o.n, f) == (size_t)o.n)
            rc = 0;
        if (fclose(f) != 0)
            rc = 1;
    }
    free(o.v);
    return rc;
}

/* Run this program with --dump file and ONEDNN_MAX_CPU_ISA=AVX2; returns its exit status. */
static int paths_spawn_avx2(const char *file)
{
    char *argv[] = {"test-nets-paths", "--dump", (char *)file, NULL};
    char flag[] = "ONEDNN_MAX_CPU_ISA=AVX2";
    char **envp;
    size_t n = 0, i, j = 0;
    pid_t pid;
    int st, rc;

    while (environ[n] != NULL)
        n++;
    envp = calloc(n + 2, sizeof *envp);
    if (envp == NULL)
        return -1;
    for (i = 0; i < n; i++)
        if (strncmp(environ[i], "ONEDNN_MAX_CPU_ISA=", 19) != 0
            && strncmp(environ[i], "DNNL_MAX_CPU_ISA=", 17) != 0)
            envp[j++] = environ[i];
    envp[j++] = flag;
    envp[j] = NULL;
    rc = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, envp);
    free(envp);
    if (rc != 0) {
        fprintf(stderr, "test-nets-paths: cannot start the AVX2 run: %s\n", strerror(rc));
        return -1;
    }
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The oneDNN path's outputs with AVX2 kernels (from the child), or NULL with a message. */
static double *paths_avx2(long n)
{
    char file[] = "/tmp/vbmem-nets-paths-XXXXXX";
    int fd = mkstemp(file), rc;
    double *g;
    FILE *f;

    if (fd < 0) {
        perror("mkstemp");
        return NULL;
    }
    close(fd);
    rc = paths_spawn_avx2(file);
    if (rc != 0) {
        fprintf(stderr, "test-nets-paths: the AVX2 run failed (status %d)\n", rc);
        unlink(file);
        return NULL;
    }
    g = malloc(sizeof(double) * (size_t)(n + 1));
    f = fopen(file, "rb");
    rc = g != NULL && f != NULL && fread(g, sizeof(double), (size_t)n + 1, f) == (size_t)n;
    if (f != NULL)
        fclose(f);
    unlink(file);
    if (!rc) {
        fprintf(stderr, "test-nets-paths: the AVX2 run wrote another number of outputs\n");
        free(g);
        return NULL;
    }
    return g;
}

/* Compare v (path `name`) with the blas path's ref over n outputs; the number beyond the
 * tolerance. */
static long paths_compare(const char *name, const double *v, const double *ref, long n)
{
    double worst = 0.0, d;
    long i, bad = 0, at = -1;

    for (i = 0; i < n; i++) {
        d = fabs(v[i] - ref[i]) / (1.0 + fabs(ref[i]));
        if (!(d <= PATHS_TOL)) {
            if (bad++ < 5)
                fprintf(stderr, "output %ld: %s %.9g, blas path %.9g\n", i, name, v[i], ref[i]);
        }
        if (!(d <= worst)) {
            worst = d;
            at = i;
        }
    }
    printf("test-nets-paths: %s against the blas path on this CPU: %ld outputs, largest "
           "difference %.3g (relative to 1 + |value|, output %ld), tolerance %.0e; %ld beyond "
           "it\n",
           name, n, worst, at, PATHS_TOL, bad);
    return bad;
}

int main(int argc, char **argv)
{
    paths_out ref = {NULL, 0, 0}, o = {NULL, 0, 0};
    long bad = 0;
    int compared = 0;

    if (argc == 3 && strcmp(argv[1], "--dump") == 0)
        return paths_dump(argv[2]);
    if (paths_all(NETS_PATH_BLAS, &ref) != 0)
        return 1;
    if (nets_path_runs(NETS_PATH_ENGINE)) {
        if (paths_all(NETS_PATH_ENGINE, &o) != 0 || o.n != ref.n)
            return 1;
        bad += paths_compare("the AVX-512 engine", o.v, ref.v, ref.n);
        compared++;
        o.n = 0;
    } else {
        printf("test-nets-paths: the AVX-512 engine does not run here (%s): not compared\n",
               getenv("VBMEM_NETS_NO_AVX512") != NULL ? "VBMEM_NETS_NO_AVX512 is set"
                                                      : "this CPU has no AVX-512F");
    }
    if (nets_path_runs(NETS_PATH_ENGINE_AVX2)) {
        if (paths_all(NETS_PATH_ENGINE_AVX2, &o) != 0 || o.n != ref.n)
            return 1;
        bad += paths_compare("the AVX2 engine", o.v, ref.v, ref.n);
        compared++;
        o.n = 0;
    } else {
        printf("test-nets-paths: the AVX2 engine does not run here (this CPU has no AVX2 and "
               "FMA): not compared\n");
    }
    if (nets_path_runs(NETS_PATH_ONEDNN)) {
        char name[64];
        double *g;

        if (paths_all(NETS_PATH_ONEDNN, &o) != 0 || o.n != ref.n)
            return 1;
        snprintf(name, sizeof name, "oneDNN (%s)", nets_dnn_isa());
        bad += paths_compare(name, o.v, ref.v, ref.n);
        g = paths_avx2(ref.n);
        if (g == NULL)
            return 1;
        bad += paths_compare("oneDNN (AVX2 kernels)", g, ref.v, ref.n);
        free(g);
        compared += 2;
    } else {
        printf("test-nets-paths: this build has no oneDNN: not compared\n");
    }
    free(ref.v);
    free(o.v);
    if (compared == 0) {
        printf("test-nets-paths: only the blas path runs here: nothing to compare (SKIP)\n");
        return 77;
    }
    return bad == 0 ? 0 : 1;
}
