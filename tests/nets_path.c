/* nets_path.c -- runs a test on a named path of the networks (src/nets): the AVX-512 engine
 * (kernels_avx512.c) or the generic path (im2col + OpenBLAS sgemm), and prints which ran.
 *
 * usage: nets-path avx512|generic COMMAND [ARGS...]
 *
 * generic sets VBMEM_NETS_NO_AVX512=1, avx512 removes it; then the networks' own probe
 * (kern_available, the one every process of the tree asks) is asked which path a process
 * started now takes, and COMMAND is executed with that environment. Exit status: COMMAND's;
 * 77 (meson's SKIP) with a line saying so when avx512 is asked on a CPU without AVX-512F,
 * where that run is not possible (the generic run still runs there); 2 on a usage error or
 * when the probe does not take the path asked (VBMEM_NETS_NO_AVX512 not honoured), 127
 * when COMMAND cannot be executed. */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nets/kernels_avx512.h"

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

int main(int argc, char **argv)
{
    int want_avx, avx, i;

    if (argc < 3 || (strcmp(argv[1], "avx512") != 0 && strcmp(argv[1], "generic") != 0)) {
        fprintf(stderr, "usage: nets-path avx512|generic COMMAND [ARGS...]\n");
        return 2;
    }
    want_avx = strcmp(argv[1], "avx512") == 0;
    if (want_avx ? unsetenv("VBMEM_NETS_NO_AVX512") != 0
                 : setenv("VBMEM_NETS_NO_AVX512", "1", 1) != 0) {
        perror("nets-path: environment");
        return 2;
    }
    if (want_avx && !nets_path_cpu_avx512()) {
        printf("nets-path: this CPU has no AVX-512F: the run on the AVX-512 engine is not "
               "possible here (reported as SKIP); the generic path runs in the *-generic "
               "tests\n");
        fflush(stdout);
        return 77;
    }
    avx = kern_available();
    if (avx != want_avx) {
        fprintf(stderr, "nets-path: asked for the %s path, but the networks' probe takes the %s\n",
                argv[1], avx ? "AVX-512 engine" : "generic path");
        return 2;
    }
    printf("nets-path: the networks run on the %s:",
           avx ? "AVX-512 engine (src/nets/kernels_avx512.c)"
               : "generic path (im2col + OpenBLAS sgemm; VBMEM_NETS_NO_AVX512=1)");
    for (i = 2; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\n");
    fflush(stdout);
    execvp(argv[2], argv + 2);
    perror("nets-path: exec");
    return 127;
}
