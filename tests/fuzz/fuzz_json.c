/* fuzz_json.c -- owns the libFuzzer harness of the wire layer's readers: the fast JSON reader
 * (wire_parse, against json_loadb), base64, and the codes decoder (nested arrays and float32
 * tensors). */
#include <stdint.h>

#include "fuzz_check.h"
#include "wire/base64.h"
#include "wire/codes.h"
#include "wire/parse.h"

/* The body reader with flags against json_loadb: the same verdict, the same
 * tree bit for bit, the same error position; the reader alone never takes what
 * json_loadb rejects and builds what json_loadb builds. Returns wire_parse's
 * tree (a new reference) or NULL. */
static json_t *fuzz_parse_both(const char *text, size_t len, size_t flags)
{
    json_error_t e1, e2;
    json_t *a = NULL, *b, *r = NULL;
    int ra;

    memset(&e1, 0, sizeof e1);
    memset(&e2, 0, sizeof e2);
    ra = wire_parse(text, len, flags, &a, &e1);
    b = json_loadb(text, len, flags, &e2);
    FUZZ_CHECK((ra == 0) == (b != NULL), "wire_parse %s a text json_loadb %s",
               ra == 0 ? "takes" : "rejects", b != NULL ? "takes" : "rejects");
    if (ra == 0) {
        FUZZ_CHECK(a != NULL, "wire_parse returned 0 without a tree");
        FUZZ_CHECK(fuzz_json_same(a, b), "wire_parse's tree differs from json_loadb's");
    } else {
        FUZZ_CHECK(a == NULL, "wire_parse failed but left a tree");
        FUZZ_CHECK(e1.position == e2.position && e1.line == e2.line && e1.column == e2.column
                       && strcmp(e1.text, e2.text) == 0,
                   "wire_parse's error (%d:%d@%d %s) is not json_loadb's (%d:%d@%d %s)", e1.line,
                   e1.column, e1.position, e1.text, e2.line, e2.column, e2.position, e2.text);
    }
    if (wire_parse_reader(text, len, flags, &r) == 0) {
        FUZZ_CHECK(b != NULL, "wire_parse_reader takes a text json_loadb rejects");
        FUZZ_CHECK(fuzz_json_same(r, b), "wire_parse_reader's tree differs from json_loadb's");
    } else {
        FUZZ_CHECK(r == NULL, "wire_parse_reader gave up but left a tree");
    }
    json_decref(r);
    json_decref(b);
    return a;
}

/* The codes decoder on a parsed tree: success gives finite in-range arrays,
 * failure a precise field under "codes". */
static void fuzz_codes(const json_t *v)
{
    wire_codes c;
    vbm_error err;
    vbm_status st;
    long i;

    memset(&err, 0, sizeof err);
    st = wire_read_codes(v, "codes", 64, 64, &c, &err);
    if (st == VBM_OK) {
        FUZZ_CHECK(c.T >= 1 && c.T <= 64 && c.C >= 1 && c.C <= 64 && c.mu != NULL,
                   "codes of T = %ld, C = %d accepted", c.T, c.C);
        for (i = 0; i < c.T * c.C; i++) {
            FUZZ_CHECK(c.mu[i] == c.mu[i] && c.mu[i] - c.mu[i] == 0.0, "non-finite mu accepted");
            if (c.s2 != NULL)
                FUZZ_CHECK(c.s2[i] >= 0.0 && c.s2[i] - c.s2[i] == 0.0, "bad sigma2 accepted");
        }
        wire_codes_free(&c);
    } else {
        FUZZ_CHECK(st == VBM_EINVAL || st == VBM_ENOMEM, "codes failed with status %d", (int)st);
        if (st == VBM_EINVAL)
            FUZZ_CHECK(strncmp(err.field, "codes", 5) == 0, "codes error field '%s'", err.field);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    unsigned char *bytes = NULL, *again = NULL;
    size_t n = 0, n2 = 0;
    char *enc;
    json_t *v;

    v = fuzz_parse_both(text, size, JSON_REJECT_DUPLICATES);
    if (v != NULL)
        fuzz_codes(v);
    json_decref(v);
    json_decref(fuzz_parse_both(text, size, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY));

    /* base64: whatever decodes re-encodes to a text that decodes to the same bytes */
    if (wire_b64_decode(text, size, &bytes, &n) == 0) {
        FUZZ_CHECK(n
                       == size / 4 * 3 - (size > 0 && text[size - 1] == '=')
                              - (size > 1 && text[size - 2] == '='),
                   "base64 of %zu characters decoded to %zu bytes", size, n);
        enc = wire_b64_encode(bytes, n);
        if (enc != NULL) {
            FUZZ_CHECK(strlen(enc) == size, "re-encoding changes the length");
            FUZZ_CHECK(wire_b64_decode(enc, strlen(enc), &again, &n2) == 0 && n2 == n
                           && memcmp(again, bytes, n) == 0,
                       "base64 round trip differs");
            free(again);
            free(enc);
        }
        free(bytes);
    } else {
        FUZZ_CHECK(bytes == NULL && n == 0, "failed base64 decode left output");
    }
    /* and any bytes survive encode + decode */
    enc = wire_b64_encode(data, size);
    if (enc != NULL) {
        FUZZ_CHECK(wire_b64_decode(enc, strlen(enc), &again, &n2) == 0 && n2 == size
                       && (size == 0 || memcmp(again, data, size) == 0),
                   "base64 encode + decode does not give the bytes back");
        free(again);
        free(enc);
    }
    return 0;
}
