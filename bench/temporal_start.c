/* temporal_start.c -- owns bench-temporal-start: the starts of a temporal write on the hard
 * problems of tests/temporal_problems.c (drawn from the model), each fitted with the PCA start
 * and one run (the first default), the window start and one run, two runs, and the defaults
 * (window start, best of the default restarts); eq. 19 cold against warm-started from eq. 18;
 * then eight more draws of 3 identities x 2 attributes with two runs and the defaults, and the
 * cost of the window start alone, untrimmed (the start before trimming) and trimmed. Prints the
 * held-out identity accuracy, the largest W angle, the errors of T and rho, the free energy and
 * the CPU seconds of each write, and the cost ratios. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../tests/temporal_problems.h"
#include "common.h"
#include "memory/temporal.h"
#include "numerics/rng.h"
#include "vbmem/vbmem.h"

/* CPU seconds of the calling thread (OPENBLAS_NUM_THREADS=1: every step runs on it). */
static double cpu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void print_cpu(void)
{
    char line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            printf("CPU:%s", strchr(line, ':') + 1);
            break;
        }
    if (f)
        fclose(f);
}

typedef struct {
    const char *name;
    int start, restarts, vbe, warm;
} variant;

/* Fit one variant; prints its row; returns the CPU seconds (negative on failure); *good (when
 * not NULL) <- whether W is within 3 degrees and the frames right >= 0.95. */
static double run(const tp_problem *pb, const variant *v, int iterations, int *good)
{
    vbm_temporal_config c;
    vbm_temporal_opts o;
    vbm_temporal *m = NULL;
    vbm_error err;
    vbm_sequence s = {pb->spec.T, pb->spec.D, pb->y};
    tp_result r;
    double t0, sec;

    vbm_temporal_config_default(pb->spec.D, pb->spec.P, &c);
    c.attributes = pb->spec.Q;
    c.vbe_temporal = v->vbe;
    vbm_temporal_opts_default(&o);
    o.iterations = iterations;
    if (v->start >= 0)
        o.start = v->start;
    if (v->restarts > 0)
        o.restarts = v->restarts;
    o.warm_start = v->warm;
    if (vbm_temporal_create(&c, &m, &err) != VBM_OK)
        return -1;
    t0 = cpu_now_s();
    if (vbm_temporal_write(m, &s, 1, &o, NULL, &err) != VBM_OK) {
        fprintf(stderr, "write: %s\n", err.msg);
        vbm_temporal_free(m);
        return -1;
    }
    sec = cpu_now_s() - t0;
    if (tp_evaluate(m, pb, 50, &r, &err) != 0) {
        fprintf(stderr, "evaluate failed\n");
        vbm_temporal_free(m);
        return -1;
    }
    printf("| %-38s | %-30s | %6.3f | %6.3f | %7.2f | %6.3f | %6.3f | %12.1f | %6.2f |\n",
           pb->spec.name, v->name, r.acc_frame, r.acc_site, r.angle_deg, r.err_T, r.err_rho, r.fe,
           sec);
    fflush(stdout);
    if (good)
        *good = r.angle_deg < 3.0 && r.acc_frame >= 0.95;
    vbm_temporal_free(m);
    return sec;
}

int main(int argc, char **argv)
{
    int iterations = 100, only = -1, eq19 = 1;
    vbm_temporal_opts d;
    const variant eq18[] = {
        {"pca, 1 run (first default)", VBM_TEMPORAL_START_PCA, 1, 0, 0},
        {"windows, 1 run", VBM_TEMPORAL_START_WINDOWS, 1, 0, 0},
        {"windows, 2 runs", VBM_TEMPORAL_START_WINDOWS, 2, 0, 0},
        {"defaults", -1, 0, 0, 1},
    };
    const variant e19[] = {
        {"eq. 19 cold (windows)", -1, 0, 1, 0},
        {"eq. 19 warm from eq. 18 (default)", -1, 0, 1, 1},
    };
    double base = 0.0, two = 0.0, dflt = 0.0, dtwo = 0.0, ddef = 0.0, s_old = 0.0, s_new = 0.0;
    int ok_two = 0, ok_def = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iterations") == 0 && i + 1 < argc
            && bench_parse_int(argv[i + 1], 1, 100000, &iterations) == 0) {
            i++;
        } else if (strcmp(argv[i], "--problem") == 0 && i + 1 < argc
                   && bench_parse_int(argv[i + 1], 0, tp_nhard - 1, &only) == 0) {
            i++;
        } else if (strcmp(argv[i], "--no-eq19") == 0) {
            eq19 = 0;
        } else {
            fprintf(stderr, "usage: bench-temporal-start [--iterations N] [--problem I] "
                            "[--no-eq19]\n");
            return 2;
        }
    }
    vbm_temporal_opts_default(&d);
    print_cpu();
    printf("iterations %d; defaults: start windows, restarts %d, warm_start %d; accuracy on a "
           "held-out sequence (50 VBE sweeps)\n\n",
           iterations, d.restarts, d.warm_start);
    printf("| problem | start | frames right | identities right | W angle (deg) | T err | rho "
           "rel err | free energy | CPU s |\n|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < tp_nhard; i++) {
        tp_problem pb;
        if (only >= 0 && i != only)
            continue;
        if (tp_draw(&tp_hard[i], &pb) != 0)
            return 1;
        for (int v = 0; v < 4; v++) {
            double sec = run(&pb, &eq18[v], iterations, NULL);
            if (sec < 0) {
                tp_free(&pb);
                return 1;
            }
            if (v == 0)
                base += sec;
            if (v == 2)
                two += sec;
            if (v == 3)
                dflt += sec;
        }
        for (int v = 0; eq19 && v < 2; v++)
            if (run(&pb, &e19[v], iterations, NULL) < 0) {
                tp_free(&pb);
                return 1;
            }
        tp_free(&pb);
    }
    printf("\nCPU seconds of the eq. 18 writes, all problems: first default %.2f, 2 runs %.2f, "
           "defaults %.2f (ratio to 2 runs %.2f)\n",
           base, two, dflt, two > 0 ? dflt / two : 0.0);
    /* eight more draws of problem 2's shape */
    printf("\n| draw of 3 identities x 2 attributes | start | frames right | identities right | W "
           "angle (deg) | T err | rho rel err | free energy | CPU s |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < 8 && only < 0; i++) {
        tp_spec spec = tp_hard[2];
        tp_problem pb;
        int good;
        spec.seed = 311 + (uint64_t)i;
        if (tp_draw(&spec, &pb) != 0)
            return 1;
        for (int v = 2; v < 4; v++) {
            double sec = run(&pb, &eq18[v], iterations, &good);
            if (sec < 0) {
                tp_free(&pb);
                return 1;
            }
            *(v == 2 ? &dtwo : &ddef) += sec;
            *(v == 2 ? &ok_two : &ok_def) += good;
        }
        /* the window start alone: untrimmed (every window counts) and trimmed (keep 0.4) */
        for (int k = 0; k < 2; k++) {
            vbm_temporal_config c;
            vbm_temporal *m = NULL;
            vbm_error err;
            vbm_sequence sq = {pb.spec.T, pb.spec.D, pb.y};
            rng_t rng;
            int used = 0;
            double t0;
            vbm_temporal_config_default(pb.spec.D, pb.spec.P, &c);
            c.attributes = pb.spec.Q;
            if (vbm_temporal_create(&c, &m, &err) != VBM_OK)
                return 1;
            rng_seed(&rng, 1);
            t0 = cpu_now_s();
            for (int rep = 0; rep < 10; rep++)
                if (temporal_start_windows(m, &sq, 1, &rng, k ? 0.4 : 1.0, &used, &err) != VBM_OK)
                    return 1;
            *(k ? &s_new : &s_old) += cpu_now_s() - t0;
            vbm_temporal_free(m);
        }
        tp_free(&pb);
    }
    if (only < 0)
        printf("\nthe 8 draws: W within 3 degrees and frames right >= 0.95 in %d with 2 runs, %d "
               "with the defaults; CPU seconds of the writes: 2 runs %.2f, defaults %.2f (ratio "
               "%.2f); the window start alone (10 starts per draw): untrimmed %.3f, trimmed %.3f "
               "(ratio %.2f)\n",
               ok_two, ok_def, dtwo, ddef, dtwo > 0 ? ddef / dtwo : 0.0, s_old, s_new,
               s_old > 0 ? s_new / s_old : 0.0);
    return 0;
}
