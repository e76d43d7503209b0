/* fuzz_model.c -- owns the libFuzzer harness of the model-file loader: the safetensors container
 * (sft_parse) and the vbmem model metadata and layers (nets_model_load_buffer), then one encode and
 * decode through a model that loads. */
#include <stdint.h>

#include "fuzz_check.h"
#include "nets/nets.h"
#include "nets/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sft_file f;
    nets_model *m = NULL;
    const nets_info *in;
    vbm_error err;
    vbm_status st;
    size_t i, j, prev;
    long px;
    float *x, *mean;
    double *mu, *s2;

    memset(&f, 0, sizeof f);
    memset(&err, 0, sizeof err);
    st = sft_parse(data, size, &f, &err);
    if (st == VBM_OK) {
        /* what the container promises: tensors inside the data section, sorted index */
        for (i = 0; i < f.n_tensors; i++) {
            FUZZ_CHECK(f.tensors[i].end <= f.n_values * sizeof(float)
                           && f.tensors[i].end - f.tensors[i].begin
                                  == f.tensors[i].count * sizeof(float),
                       "tensor %s offsets [%zu, %zu) in %zu values", f.tensors[i].name,
                       f.tensors[i].begin, f.tensors[i].end, f.n_values);
            FUZZ_CHECK(sft_find(&f, f.tensors[i].name) == &f.tensors[i], "sft_find misses %s",
                       f.tensors[i].name);
            for (j = 0; j < f.tensors[i].count; j++)
                FUZZ_CHECK(f.tensors[i].data[j] - f.tensors[i].data[j] == 0.0f,
                           "non-finite value in %s", f.tensors[i].name);
        }
        for (i = 1; i < f.n_tensors; i++) {
            prev = f.by_name[i - 1];
            FUZZ_CHECK(strcmp(f.tensors[prev].name, f.tensors[f.by_name[i]].name) < 0,
                       "by_name not sorted");
        }
        for (i = 0; i < f.n_meta; i++)
            FUZZ_CHECK(sft_meta(&f, f.meta_keys[i]) != NULL, "sft_meta misses %s", f.meta_keys[i]);
    } else {
        FUZZ_CHECK((st == VBM_EFORMAT || st == VBM_ENOMEM) && err.msg[0] != '\0',
                   "sft_parse failed with status %d message '%s'", (int)st, err.msg);
    }
    sft_free(&f);

    st = nets_model_load_buffer(data, size, &m, &err);
    if (st != VBM_OK) {
        FUZZ_CHECK(m == NULL && (st == VBM_EFORMAT || st == VBM_ENOMEM) && err.msg[0] != '\0',
                   "nets_model_load_buffer failed with status %d message '%s'", (int)st, err.msg);
        return 0;
    }
    in = nets_model_info(m);
    FUZZ_CHECK(in->channels >= 1 && in->height >= 1 && in->width >= 1 && in->code_size >= 1,
               "model of shape %d x %d x %d, C = %d loaded", in->channels, in->height, in->width,
               in->code_size);
    px = (long)in->channels * in->height * in->width;
    x = malloc((size_t)px * sizeof *x);
    mean = malloc((size_t)px * sizeof *mean);
    mu = malloc((size_t)in->code_size * sizeof *mu);
    s2 = malloc((size_t)in->code_size * sizeof *s2);
    if (x != NULL && mean != NULL && mu != NULL && s2 != NULL) {
        for (i = 0; i < (size_t)px; i++)
            x[i] = (float)(i % 7) / 7.0f;
        st = nets_encode(m, x, 1, mu, s2, &err);
        FUZZ_CHECK(st == VBM_OK || st == VBM_EINVAL || st == VBM_ENOMEM, "nets_encode status %d",
                   (int)st);
        for (i = 0; i < (size_t)in->code_size; i++)
            mu[i] = 0.25 * (double)(i % 3);
        st = nets_decode(m, mu, 1, mean, NULL, &err);
        FUZZ_CHECK(st == VBM_OK || st == VBM_EINVAL || st == VBM_ENOMEM, "nets_decode status %d",
                   (int)st);
    }
    free(x);
    free(mean);
    free(mu);
    free(s2);
    nets_model_free(m);
    return 0;
}
