/* safetensors.h -- the safetensors container held in memory: reading a file, parsing and
 * validating it (header length, JSON header, F32 dtypes, shapes, offsets, finite values), its
 * metadata as JSON objects, and building one (used by the tests and the benchmark). No vbmem
 * semantics live here. */
#ifndef VBMEM_NETS_SAFETENSORS_H
#define VBMEM_NETS_SAFETENSORS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "vbmem/vbmem.h"

#define ST_MAX_HEADER ((uint64_t)16 << 20) /* bytes of JSON header */
#define ST_MAX_DIMS   8
#define ST_MAX_VALUES ((size_t)1 << 28) /* float32 values in one file (1 GiB) */

/* One tensor of a parsed file. data points into sft_file.values. */
typedef struct {
    char *name;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t count;      /* elements: the product of shape */
    size_t begin, end; /* data_offsets, bytes from the start of the data section */
    const float *data;
    int used; /* free for the caller: set when something binds the tensor */
} sft_tensor;

/* A parsed file. Owns everything it points to; free with sft_free. */
typedef struct {
    sft_tensor *tensors;
    size_t n_tensors;
    size_t *by_name; /* indices of tensors sorted by name (for sft_find) */
    float *values;   /* the whole data section, host floats */
    size_t n_values;
    char **meta_keys; /* __metadata__, in header order */
    char **meta_values;
    size_t n_meta;
} sft_file;

/* Parse and validate the whole file buf[0..len). Every rule of the container in
 * proto/model-format.md is checked: header length in [2, 16 MiB] and inside the
 * buffer, header a JSON object (duplicate keys rejected), every entry a tensor
 * with dtype F32, a shape of at most ST_MAX_DIMS non-negative integers whose byte
 * size equals the offsets, offsets inside the data section, no overlaps, the
 * tensors covering the data section exactly, every value finite, at most
 * ST_MAX_VALUES values; __metadata__ (optional here) maps strings to strings.
 * On success fills *out (owned by the caller, sft_free) and returns VBM_OK. Fails
 * with VBM_EFORMAT (a broken rule; the message names the tensor, offsets or header
 * part) or VBM_ENOMEM; then *out is left empty and err (may be NULL) is filled by
 * vbm_fail with no field. The buffer is not kept. */
vbm_status sft_parse(const unsigned char *buf, size_t len, sft_file *out, vbm_error *err);

/* Release everything a parsed file owns and zero it. Safe on a zeroed struct. */
void sft_free(sft_file *f);

/* The tensor called name, or NULL. */
sft_tensor *sft_find(const sft_file *f, const char *name);

/* The metadata value for key, or NULL when absent. */
const char *sft_meta(const sft_file *f, const char *key);

/* Read the whole regular file at path into *buf (malloc'd, owned by the caller) of *len
 * bytes; files larger than any valid one (8 + ST_MAX_HEADER + 4 ST_MAX_VALUES bytes) are
 * refused before anything is read. Fails with VBM_EINVAL (cannot open, not a regular file,
 * read error), VBM_EFORMAT (too large) or VBM_ENOMEM; every message starts with the path,
 * *buf is then NULL and err (may be NULL) is filled with no field. */
vbm_status sft_read_file(const char *path, unsigned char **buf, size_t *len, vbm_error *err);

/* The metadata value for key parsed as a JSON object (duplicate keys rejected); a new
 * reference the caller json_decref's. NULL with err (may be NULL) filled, VBM_EFORMAT and
 * no field, when the key is missing, its value is not JSON, or not an object. */
json_t *sft_meta_object(const sft_file *f, const char *key, vbm_error *err);

/* VBM_OK when every tensor of f has its `used` mark set; else VBM_EFORMAT naming the first
 * unused tensor (err may be NULL; no field). */
vbm_status sft_check_used(const sft_file *f, vbm_error *err);

/* A tensor to write: name, shape, and count = prod(shape) floats at data. */
typedef struct {
    const char *name;
    int ndim;
    const int64_t *shape;
    const float *data;
} sft_input;

/* Build a safetensors file from n tensors (stored in the given order, contiguous)
 * and n_meta metadata pairs (meta[2i] key, meta[2i+1] value; may be 0 pairs, and
 * then no __metadata__ is written). The header is padded with spaces to a multiple
 * of 8 bytes. On success *out is a malloc'd buffer of *outlen bytes owned by the
 * caller and VBM_OK is returned. Fails with VBM_EINVAL (a rank outside [0,
 * ST_MAX_DIMS], metadata or an entry that cannot be stored) or VBM_ENOMEM; then
 * *out is NULL and err (may be NULL) holds the message (no field). */
vbm_status sft_build(const sft_input *t, size_t n, const char *const *meta, size_t n_meta,
                     unsigned char **out, size_t *outlen, vbm_error *err);

#endif
