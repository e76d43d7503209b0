/* fuzz_memory.c -- owns the libFuzzer harness of memory import: the binary form (vbm_import) and
 * the JSON form (wire_memory_from_json), with their round trips. */
#include <stdint.h>

#include "fuzz_check.h"
#include "wire/memory.h"
#include "wire/parse.h"

/* A memory that imports exports and imports again to the same bytes. */
static void fuzz_binary_round_trip(const vbm_memory *mem)
{
    unsigned char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    vbm_memory *again = NULL;
    vbm_error err;

    if (vbm_export(mem, &a, &na, &err) != VBM_OK)
        return; /* out of memory */
    FUZZ_CHECK(vbm_import(a, na, &again, &err) == VBM_OK, "an exported memory does not import: %s",
               err.msg);
    if (vbm_export(again, &b, &nb, &err) == VBM_OK) {
        FUZZ_CHECK(na == nb && memcmp(a, b, na) == 0, "export, import, export changes the bytes");
        free(b);
    }
    vbm_memory_free(again);
    free(a);
}

/* The JSON form of an imported memory decodes to a memory with the same JSON form. */
static void fuzz_json_round_trip(const vbm_memory *mem)
{
    json_t *a = NULL, *b = NULL;
    vbm_memory *again = NULL;
    vbm_error err;
    vbm_status st;

    st = wire_memory_to_json(mem, &a, &err);
    if (st != VBM_OK) {
        /* a non-finite value the decoders let through would be a defect */
        FUZZ_CHECK(st == VBM_ENOMEM, "an imported memory has no JSON form: %s", err.msg);
        return;
    }
    FUZZ_CHECK(wire_memory_from_json(a, &again, &err) == VBM_OK,
               "the JSON form of a memory does not decode: %s (%s)", err.msg, err.field);
    if (wire_memory_to_json(again, &b, &err) == VBM_OK) {
        FUZZ_CHECK(fuzz_json_same(a, b), "JSON form, decode, JSON form changes the memory");
        json_decref(b);
    }
    vbm_memory_free(again);
    json_decref(a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Input: the binary form (starts with its magic) or a JSON text. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vbm_memory *mem = NULL;
    vbm_error err;
    vbm_status st;
    json_error_t jerr;
    json_t *v = NULL;

    memset(&err, 0, sizeof err);
    st = vbm_import(data, size, &mem, &err);
    if (st == VBM_OK) {
        fuzz_binary_round_trip(mem);
        fuzz_json_round_trip(mem);
        vbm_memory_free(mem);
        mem = NULL;
    } else {
        FUZZ_CHECK(mem == NULL && (st == VBM_EFORMAT || st == VBM_ENOMEM) && err.msg[0] != '\0',
                   "vbm_import failed with status %d message '%s'", (int)st, err.msg);
    }

    if (wire_parse((const char *)data, size, JSON_REJECT_DUPLICATES, &v, &jerr) != 0)
        return 0;
    memset(&err, 0, sizeof err);
    st = wire_memory_from_json(v, &mem, &err);
    if (st == VBM_OK) {
        fuzz_json_round_trip(mem);
        fuzz_binary_round_trip(mem);
        vbm_memory_free(mem);
    } else {
        FUZZ_CHECK(mem == NULL && (st == VBM_EFORMAT || st == VBM_ENOMEM) && err.msg[0] != '\0',
                   "wire_memory_from_json failed with status %d message '%s'", (int)st, err.msg);
        if (st == VBM_EFORMAT)
            FUZZ_CHECK(strncmp(err.field, "memory", 6) == 0, "memory error field '%s'", err.field);
    }
    json_decref(v);
    return 0;
}
