/* backend.c -- owns the dispatch from the eng_backend_* functions to a durable backend, and the
 * backup copy of every record from one backend to another. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"

#define BACKEND_PAGE 64

/* FNV-1a 64 step over p[0..n): 8-byte little-endian words, then the tail bytes. */
static uint64_t backend_fnv(uint64_t h, const unsigned char *p, size_t n)
{
    size_t i = 0, k;
    uint64_t w;

    for (; i + 8 <= n; i += 8) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(&w, p + i, 8); /* the word as little-endian, in one load */
        (void)k;
#else
        w = 0;
        for (k = 0; k < 8; k++)
            w |= (uint64_t)p[i + k] << (8 * k);
#endif
        h = (h ^ w) * 1099511628211ULL;
    }
    for (; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

uint64_t eng_backend_checksum(const unsigned char *a, size_t na, const unsigned char *b, size_t nb)
{
    return backend_fnv(backend_fnv(14695981039346656037ULL, a, na), b, nb);
}

unsigned char *eng_backend_usage_encode(const double *u, size_t n, int *fail)
{
    unsigned char *b;
    uint64_t bits;
    size_t i, k;

    *fail = 0;
    if (n == 0 || u == NULL)
        return NULL;
    b = malloc(8 * n);
    if (b == NULL) {
        *fail = 1;
        return NULL;
    }
    for (i = 0; i < n; i++) {
        memcpy(&bits, &u[i], 8);
        for (k = 0; k < 8; k++)
            b[8 * i + k] = (unsigned char)(bits >> (8 * k));
    }
    return b;
}

void eng_backend_usage_decode(const unsigned char *b, size_t n, double *u)
{
    uint64_t bits;
    size_t i, k;

    for (i = 0; i < n; i++) {
        bits = 0;
        for (k = 0; k < 8; k++)
            bits |= (uint64_t)b[8 * i + k] << (8 * k);
        memcpy(&u[i], &bits, 8);
    }
}

vbm_status eng_backend_load(eng_backend *b, const char *id, eng_record *out, vbm_error *err)
{
    return b->ops->load(b->impl, id, out, err);
}

vbm_status eng_backend_save(eng_backend *b, const eng_record *rec, uint64_t expected,
                            vbm_error *err)
{
    return b->ops->save(b->impl, rec, expected, err);
}

vbm_status eng_backend_remove(eng_backend *b, const char *id, const unsigned char *owner,
                              vbm_error *err)
{
    return b->ops->remove(b->impl, id, owner, err);
}

vbm_status eng_backend_list(eng_backend *b, const unsigned char *owner, const char *after,
                            int limit, char (*ids)[ENG_ID_LEN + 1], int *n, vbm_error *err)
{
    return b->ops->list(b->impl, owner, after, limit, ids, n, err);
}

vbm_status eng_backend_idle(eng_backend *b, double now_wall, int limit, char (*ids)[ENG_ID_LEN + 1],
                            int *n, vbm_error *err)
{
    return b->ops->idle(b->impl, now_wall, limit, ids, n, err);
}

vbm_status eng_backend_touch(eng_backend *b, const char *id, double used, vbm_error *err)
{
    return b->ops->touch(b->impl, id, used, err);
}

vbm_status eng_backend_current(eng_backend *b, const char *id, uint64_t *version, vbm_error *err)
{
    if (b->ops->current == NULL)
        return vbm_fail(err, VBM_EINVAL, NULL, "the %s backend keeps no shared versions", b->name);
    return b->ops->current(b->impl, id, version, err);
}

vbm_status eng_backend_count(eng_backend *b, long *n, vbm_error *err)
{
    return b->ops->count(b->impl, n, err);
}

vbm_status eng_backend_check(eng_backend *b, vbm_error *err)
{
    return b->ops->check(b->impl, err);
}

void eng_backend_close(eng_backend *b)
{
    if (b == NULL)
        return;
    b->ops->close(b->impl);
}

/* Copy one record of src into dst, checking that its memory imports (VBM_ECORRUPT when it
 * does not, or when the record is corrupt). */
static vbm_status backend_copy_one(eng_backend *src, eng_backend *dst, const char *id,
                                   vbm_error *err)
{
    eng_record rec, old;
    eng_session *s = NULL;
    uint64_t expected = 0;
    vbm_status st;

    st = eng_backend_load(src, id, &rec, err);
    if (st == VBM_ENOTFOUND)
        return VBM_OK; /* deleted since it was listed */
    if (st != VBM_OK) {
        eng_record_free(&rec);
        return st;
    }
    st = eng_session_from_record(&rec, &s, err);
    eng_session_unref(s);
    if (st == VBM_EFORMAT) {
        char msg[VBM_MSG_LEN];

        snprintf(msg, sizeof msg, "%s", err != NULL ? err->msg : "does not import");
        st = vbm_fail(err, VBM_ECORRUPT, NULL, "the stored memory of session %s is corrupt: %s", id,
                      msg);
    }
    if (st == VBM_OK) {
        st = eng_backend_load(dst, id, &old, err);
        if (st == VBM_OK || st == VBM_ECORRUPT) { /* replaced whatever its state */
            expected = old.version;
            eng_record_free(&old);
            st = VBM_OK;
        }
        if (st == VBM_OK || st == VBM_ENOTFOUND)
            st = eng_backend_save(dst, &rec, expected, err);
    }
    eng_record_free(&rec);
    return st;
}

vbm_status eng_backend_copy_all(eng_backend *src, eng_backend *dst, long *copied,
                                void (*skipped)(void *ctx, const char *id, const char *why),
                                void *ctx, vbm_error *err)
{
    char ids[BACKEND_PAGE][ENG_ID_LEN + 1], after[ENG_ID_LEN + 1] = "";
    vbm_status st;
    int n, i;

    *copied = 0;
    for (;;) {
        st = eng_backend_list(src, NULL, after, BACKEND_PAGE, ids, &n, err);
        if (st != VBM_OK)
            return st;
        for (i = 0; i < n; i++) {
            st = backend_copy_one(src, dst, ids[i], err);
            if (st == VBM_ECORRUPT) {
                if (skipped != NULL)
                    skipped(ctx, ids[i], err != NULL ? err->msg : "corrupt");
                continue;
            }
            if (st != VBM_OK)
                return st;
            (*copied)++;
        }
        if (n < BACKEND_PAGE)
            return VBM_OK;
        memcpy(after, ids[n - 1], sizeof after);
    }
}
