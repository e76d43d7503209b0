/* error.c -- owns the one error record of the tree (vbm_error): filling it, re-rooting its field,
 * naming its statuses. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "vbmem/vbmem.h"

/* Copy src into dst (cap bytes, cap > 0), truncated and NUL-terminated. */
static void error_copy(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);

    if (n >= cap)
        n = cap - 1;
    memmove(dst, src, n);
    dst[n] = '\0';
}

vbm_status vbm_fail(vbm_error *err, vbm_status st, const char *field, const char *fmt, ...)
{
    va_list ap;
    size_t used = 0;

    if (err == NULL)
        return st;
    err->status = st;
    err->field[0] = '\0';
    err->msg[0] = '\0';
    if (field != NULL && field[0] != '\0') {
        error_copy(err->field, sizeof err->field, field);
        used = strlen(err->field);
        if (used + 2 < sizeof err->msg) {
            memcpy(err->msg, err->field, used);
            memcpy(err->msg + used, ": ", 3);
            used += 2;
        } else {
            used = 0;
        }
    }
    va_start(ap, fmt);
    if (vsnprintf(err->msg + used, sizeof err->msg - used, fmt, ap) < 0)
        err->msg[used] = '\0';
    va_end(ap);
    return st;
}

void vbm_error_rebase(vbm_error *err, const char *base)
{
    /* room for base, a dot and the old field: vbm_fail truncates to VBM_FIELD_LEN */
    char field[2 * VBM_FIELD_LEN + 2], msg[VBM_MSG_LEN];
    const char *text;
    size_t flen;

    if (err == NULL || base == NULL || base[0] == '\0')
        return;
    flen = strlen(err->field);
    text = vbm_error_text(err); /* the message after its "field: " prefix */
    if (flen == 0)
        snprintf(field, sizeof field, "%.*s", VBM_FIELD_LEN, base);
    else if (err->field[0] == '[')
        snprintf(field, sizeof field, "%.*s%s", VBM_FIELD_LEN, base, err->field);
    else
        snprintf(field, sizeof field, "%.*s.%s", VBM_FIELD_LEN, base, err->field);
    snprintf(msg, sizeof msg, "%s", text);
    vbm_fail(err, err->status, field, "%s", msg);
}

const char *vbm_error_text(const vbm_error *err)
{
    size_t flen;

    if (err == NULL)
        return "";
    flen = strlen(err->field);
    if (flen > 0 && strncmp(err->msg, err->field, flen) == 0
        && strncmp(err->msg + flen, ": ", 2) == 0)
        return err->msg + flen + 2;
    return err->msg;
}

const char *vbm_status_name(vbm_status st)
{
    switch (st) {
    case VBM_OK: return "ok";
    case VBM_EINVAL: return "invalid";
    case VBM_ENOMEM: return "nomem";
    case VBM_ENUMERIC: return "numeric";
    case VBM_EFORMAT: return "format";
    case VBM_ENOTFOUND: return "not_found";
    case VBM_ECONFLICT: return "conflict";
    case VBM_ELIMIT: return "limit";
    case VBM_EBUSY: return "busy";
    case VBM_ESTOPPED: return "stopped";
    case VBM_EUNAVAIL: return "unavailable";
    case VBM_ECORRUPT: return "corrupt";
    case VBM_EUNKNOWN: return "outcome_unknown";
    }
    return "unknown";
}
