/* nets_path.c -- runs a command on a named path of the networks (src/nets) and prints which
 * path a process started now takes.
 *
 * usage: nets-path avx512|generic|avx2|onednn|onednn-avx2|blas COMMAND [ARGS...]
 *
 *   avx512       the AVX-512 engine (kernels_avx512.c): VBMEM_NETS_NO_AVX512 and VBMEM_NETS_PATH
 *                removed, the default of a CPU with AVX-512F
 *   generic      VBMEM_NETS_NO_AVX512=1, VBMEM_NETS_PATH removed: the default of a CPU without
 *                AVX-512F (the AVX2 engine where the CPU has AVX2 and FMA, else oneDNN where the
 *                build has it, else blas)
 *   avx2         VBMEM_NETS_PATH=engine-avx2 (kernels_avx2.c), VBMEM_NETS_NO_AVX512 removed: the
 *                AVX2 engine asked by name, also on a CPU with AVX-512F
 *   onednn       VBMEM_NETS_PATH=onednn, with the CPU's own ISA
 *   onednn-avx2  the same with ONEDNN_MAX_CPU_ISA=AVX2 and VBMEM_NETS_NO_AVX512=1: oneDNN's AVX2
 *                kernels, as a CPU without AVX-512 runs them
 *   blas         VBMEM_NETS_PATH=blas (im2col + OpenBLAS sgemm)
 *
 * The networks' own probe (nets_path_default, the one every process of the tree asks) is then
 * asked which path a process started now takes, and COMMAND is executed with that environment.
 * Exit status: COMMAND's; 77 (meson's SKIP) with a line saying so when the path cannot run
 * here (avx512 on a CPU without AVX-512F, avx2 on one without AVX2 and FMA, onednn in a build
 * without libdnnl), where that run
 * is not possible and the others still run; 2 on a usage error or when the probe does not take
 * the path asked; 127 when COMMAND cannot be executed. */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nets/nets.h"
#include "nets/onednn.h"

/* Whether this CPU has AVX-512F, whatever the environment says. */
static int nets_path_cpu_avx512(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
#else
    return 0;
#endif
}

/* Whether this CPU has AVX2 and FMA, whatever the environment says. */
static int nets_path_cpu_avx2(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

/* Set (value non-NULL) or remove an environment variable; 0 or -1. */
static int nets_path_env(const char *name, const char *value)
{
    return value ? setenv(name, value, 1) : unsetenv(name);
}

int main(int argc, char **argv)
{
    static const char *const names[] = {"avx512",      "generic", "onednn",
                                        "onednn-avx2", "blas",    "avx2"};
    int which = -1;
    for (int i = 0; argc >= 3 && i < 6; i++)
        if (strcmp(argv[1], names[i]) == 0)
            which = i;
    if (which < 0) {
        fprintf(stderr, "usage: nets-path avx512|generic|avx2|onednn|onednn-avx2|blas COMMAND "
                        "[ARGS...]\n");
        return 2;
    }
    const char *no_avx = which == 1 || which == 3 ? "1" : NULL;
    const char *path = which == 2 || which == 3 ? "onednn"
                       : which == 4             ? "blas"
                       : which == 5             ? "engine-avx2"
                                                : NULL;
    if (nets_path_env("VBMEM_NETS_NO_AVX512", no_avx) != 0
        || nets_path_env("VBMEM_NETS_PATH", path) != 0
        || (which == 3 && nets_path_env("ONEDNN_MAX_CPU_ISA", "AVX2") != 0)) {
        perror("nets-path: environment");
        return 2;
    }
    nets_path want = which == 0                 ? NETS_PATH_ENGINE
                     : which == 2 || which == 3 ? NETS_PATH_ONEDNN
                     : which == 4               ? NETS_PATH_BLAS
                     : which == 5               ? NETS_PATH_ENGINE_AVX2
                     : nets_path_cpu_avx2()     ? NETS_PATH_ENGINE_AVX2
                     : nets_dnn_built()         ? NETS_PATH_ONEDNN
                                                : NETS_PATH_BLAS;
    if (which == 0 && !nets_path_cpu_avx512()) {
        printf("nets-path: this CPU has no AVX-512F: the run on the AVX-512 engine is not "
               "possible here (reported as SKIP); the other paths run in their own tests\n");
        fflush(stdout);
        return 77;
    }
    if (which == 5 && !nets_path_cpu_avx2()) {
        printf("nets-path: this CPU has no AVX2 and FMA: the run on the AVX2 engine is not "
               "possible here (reported as SKIP); the other paths run in their own tests\n");
        fflush(stdout);
        return 77;
    }
    if (want == NETS_PATH_ONEDNN && !nets_dnn_built()) {
        printf("nets-path: this build has no oneDNN (libdnnl-dev was not found when it was "
               "configured): the run on the oneDNN path is not possible here (reported as "
               "SKIP)\n");
        fflush(stdout);
        return 77;
    }
    nets_path got = nets_path_default();
    if (got != want) {
        fprintf(stderr,
                "nets-path: asked for %s (the %s path), but the networks' probe takes the "
                "%s path\n",
                argv[1], nets_path_name(want), nets_path_name(got));
        return 2;
    }
    printf("nets-path: the networks run on the %s path", nets_path_name(got));
    if (got == NETS_PATH_ONEDNN)
        printf(" (oneDNN ISA %s)", nets_dnn_isa());
    printf(":");
    for (int i = 2; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\n");
    fflush(stdout);
    execvp(argv[2], argv + 2);
    perror("nets-path: exec");
    return 127;
}
