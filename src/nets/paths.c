/* paths.c -- which path the networks' layers take (nets.h's nets_path): the names, what this
 * process can run, VBMEM_NETS_PATH, and the default, probed once per process. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "nets/kernels_avx2.h"
#include "nets/kernels_avx512.h"
#include "nets/nets.h"
#include "nets/onednn.h"

const char *nets_path_name(nets_path p)
{
    switch (p) {
    case NETS_PATH_AUTO: return "auto";
    case NETS_PATH_ENGINE: return "engine";
    case NETS_PATH_ENGINE_AVX2: return "engine-avx2";
    case NETS_PATH_ONEDNN: return "onednn";
    case NETS_PATH_BLAS: return "blas";
    }
    return "?";
}

int nets_path_runs(nets_path p)
{
    switch (p) {
    case NETS_PATH_AUTO:
    case NETS_PATH_BLAS: return 1;
    case NETS_PATH_ENGINE: return kern_available();
    case NETS_PATH_ENGINE_AVX2: return kern_avx2_available();
    case NETS_PATH_ONEDNN: return nets_dnn_built();
    }
    return 0;
}

vbm_status nets_path_from_env(nets_path *out, vbm_error *err)
{
    const char *v = getenv("VBMEM_NETS_PATH");
    *out = NETS_PATH_AUTO;
    if (!v || !*v)
        return VBM_OK;
    nets_path p;
    if (strcmp(v, "engine") == 0)
        p = NETS_PATH_ENGINE;
    else if (strcmp(v, "engine-avx2") == 0)
        p = NETS_PATH_ENGINE_AVX2;
    else if (strcmp(v, "onednn") == 0)
        p = NETS_PATH_ONEDNN;
    else if (strcmp(v, "blas") == 0)
        p = NETS_PATH_BLAS;
    else
        return vbm_fail(
            err, VBM_EINVAL, NULL,
            "VBMEM_NETS_PATH=%.40s: not a path of the networks (engine, engine-avx2, onednn, blas)",
            v);
    if (!nets_path_runs(p))
        return vbm_fail(err, VBM_EINVAL, NULL, "VBMEM_NETS_PATH=%s: %s", v,
                        p == NETS_PATH_ENGINE
                            ? "the AVX-512 engine needs AVX-512F (and VBMEM_NETS_NO_AVX512 unset)"
                        : p == NETS_PATH_ENGINE_AVX2
                            ? "the AVX2 engine needs a CPU with AVX2 and FMA"
                            : "this build has no oneDNN (libdnnl)");
    *out = p;
    return VBM_OK;
}

static pthread_once_t paths_once = PTHREAD_ONCE_INIT;
static nets_path paths_default_value;

static void paths_probe(void)
{
    nets_path p;
    if (nets_path_from_env(&p, NULL) != VBM_OK || p == NETS_PATH_AUTO)
        p = kern_available()        ? NETS_PATH_ENGINE
            : kern_avx2_available() ? NETS_PATH_ENGINE_AVX2
            : nets_dnn_built()      ? NETS_PATH_ONEDNN
                                    : NETS_PATH_BLAS;
    paths_default_value = p;
}

nets_path nets_path_default(void)
{
    pthread_once(&paths_once, paths_probe);
    return paths_default_value;
}
