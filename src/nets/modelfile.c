/* modelfile.c -- the vbmem model file (proto/model-format.md) on top of the safetensors
 * container: metadata, the layer lists with their shape chaining and tensor binding, every
 * rejection with a precise message, and the model's lifetime. */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nets/nets_internal.h"

void nets_shape_str(nets_shape s, char *buf, size_t len)
{
    if (s.rank == 1)
        snprintf(buf, len, "[%d]", s.c);
    else
        snprintf(buf, len, "[%d,%d,%d]", s.c, s.h, s.w);
}

static int shape_eq(nets_shape a, nets_shape b)
{
    return a.rank == b.rank && a.c == b.c && a.h == b.h && a.w == b.w;
}

static const char *const type_names[] = {
    "conv2d",  "conv_transpose2d", "dense",   "group_norm",  "relu",    "swish",
    "sigmoid", "flatten",          "reshape", "center_crop", "residual"};

void nets_seq_free(nets_seq *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n; i++) {
        free(s->layers[i].wp);
        if (s->layers[i].body) {
            nets_seq_free(s->layers[i].body);
            free(s->layers[i].body);
        }
    }
    free(s->layers);
    memset(s, 0, sizeof *s);
}

/* ---- layer fields ---- */

typedef struct {
    sft_file *f;
    int count; /* layers parsed so far, bodies included */
    vbm_error *err;
} parse_ctx;

/* Fail with VBM_EFORMAT and "layer <label> (<type>): <message>" (no field). */
static vbm_status lfail(parse_ctx *c, const nets_layer *L, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static vbm_status lfail(parse_ctx *c, const nets_layer *L, const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return vbm_fail(c->err, VBM_EFORMAT, NULL, "layer %s (%s): %s", L->label, type_names[L->type],
                    msg);
}

static vbm_status get_int(parse_ctx *c, const nets_layer *L, const json_t *o, const char *key,
                          int lo, int hi, int *out)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return lfail(c, L, "%s must be an integer in [%d, %d]", key, lo, hi);
    *out = (int)json_integer_value(v);
    return VBM_OK;
}

static vbm_status get_padding(parse_ctx *c, const nets_layer *L, const json_t *o, int *same)
{
    const char *p = json_string_value(json_object_get(o, "padding"));
    if (p && strcmp(p, "same") == 0)
        *same = 1;
    else if (p && strcmp(p, "valid") == 0)
        *same = 0;
    else
        return lfail(c, L, "padding must be \"valid\" or \"same\"");
    return VBM_OK;
}

/* Bind <name>.<suffix> with the expected shape; marks it used. */
static vbm_status bind(parse_ctx *c, const nets_layer *L, const char *name, const char *suffix,
                       int ndim, const int64_t *shape, const float **out)
{
    char tname[160], want[128], got[128];
    snprintf(tname, sizeof tname, "%s.%s", name, suffix);
    sft_tensor *t = sft_find(c->f, tname);
    if (!t)
        return lfail(c, L, "tensor %s is missing", tname);
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (!same) {
        size_t a = 0, b = 0;
        a += (size_t)snprintf(want, sizeof want, "[");
        for (int i = 0; i < ndim && a < sizeof want; i++)
            a += (size_t)snprintf(want + a, sizeof want - a, i ? ",%lld" : "%lld",
                                  (long long)shape[i]);
        if (a < sizeof want)
            snprintf(want + a, sizeof want - a, "]");
        b += (size_t)snprintf(got, sizeof got, "[");
        for (int i = 0; i < t->ndim && b < sizeof got; i++)
            b += (size_t)snprintf(got + b, sizeof got - b, i ? ",%lld" : "%lld",
                                  (long long)t->shape[i]);
        if (b < sizeof got)
            snprintf(got + b, sizeof got - b, "]");
        return lfail(c, L, "tensor %s has shape %s, expected %s", tname, got, want);
    }
    if (t->used)
        return lfail(c, L, "tensor %s is already used by another layer", tname);
    t->used = 1;
    *out = t->data;
    return VBM_OK;
}

static vbm_status check_size(parse_ctx *c, const nets_layer *L, long long elems, const char *what)
{
    if (elems > NETS_MAX_ACT)
        return lfail(c, L, "%s has %lld elements per sample, more than the limit %ld", what, elems,
                     NETS_MAX_ACT);
    return VBM_OK;
}

static vbm_status parse_list(parse_ctx *c, const json_t *list, const char *path, nets_shape in,
                             int depth, nets_seq *out);

/* Parse one layer object; L->in is set; fills the rest of L. */
static vbm_status parse_layer(parse_ctx *c, const json_t *o, int depth, nets_layer *L)
{
    nets_shape in = L->in;
    char ins[64];
    nets_shape_str(in, ins, sizeof ins);
    const char *name = json_string_value(json_object_get(o, "name"));
    vbm_status st;
    int weighted = L->type == NETS_L_CONV2D || L->type == NETS_L_CONVT2D || L->type == NETS_L_DENSE
                   || L->type == NETS_L_GROUP_NORM;
    if (weighted && (!name || !name[0] || strlen(name) > 64))
        return lfail(c, L, "name must be a non-empty string of at most 64 characters");
    if (weighted)
        snprintf(L->label, sizeof L->label, "%s", name);
    L->out = in;
    switch (L->type) {
    case NETS_L_CONV2D:
    case NETS_L_CONVT2D: {
        int same = 0;
        if ((st = get_int(c, L, o, "in", 1, NETS_MAX_DIM, &L->cin))
            || (st = get_int(c, L, o, "out", 1, NETS_MAX_DIM, &L->cout))
            || (st = get_int(c, L, o, "kernel", 1, NETS_MAX_KERNEL, &L->k))
            || (st = get_int(c, L, o, "stride", 1, NETS_MAX_KERNEL, &L->stride))
            || (st = get_padding(c, L, o, &same)))
            return st;
        if (in.rank != 3)
            return lfail(c, L, "input shape %s is not an image [c,h,w]", ins);
        if (in.c != L->cin)
            return lfail(c, L, "input shape %s has %d channels, the layer has in = %d", ins, in.c,
                         L->cin);
        int k = L->k, s = L->stride;
        long long ho, wo, col;
        if (L->type == NETS_L_CONV2D) {
            if (same) {
                ho = (in.h + s - 1) / s;
                wo = (in.w + s - 1) / s;
                long long ph = (ho - 1) * s + k - in.h, pw = (wo - 1) * s + k - in.w;
                L->pad_t = (int)(ph > 0 ? ph / 2 : 0);
                L->pad_l = (int)(pw > 0 ? pw / 2 : 0);
            } else {
                if (in.h < k || in.w < k)
                    return lfail(c, L, "input shape %s is smaller than the kernel %d", ins, k);
                ho = (in.h - k) / s + 1;
                wo = (in.w - k) / s + 1;
                L->pad_t = L->pad_l = 0;
            }
            col = (long long)L->cin * k * k * ho * wo;
        } else {
            if (same) {
                ho = (long long)in.h * s;
                wo = (long long)in.w * s;
                L->pad_t = L->pad_l = k > s ? (k - s) / 2 : 0;
            } else {
                ho = (long long)(in.h - 1) * s + k;
                wo = (long long)(in.w - 1) * s + k;
                L->pad_t = L->pad_l = 0;
            }
            col = (long long)L->cout * k * k * in.h * in.w;
        }
        if (ho > NETS_MAX_DIM || wo > NETS_MAX_DIM)
            return lfail(c, L, "output of %lld x %lld pixels is too large", ho, wo);
        L->out = (nets_shape){3, L->cout, (int)ho, (int)wo};
        if ((st = check_size(c, L, (long long)L->cout * ho * wo, "the output"))
            || (st = check_size(c, L, col, "the im2col matrix")))
            return st;
        int64_t ws[4] = {L->type == NETS_L_CONV2D ? L->cout : L->cin,
                         L->type == NETS_L_CONV2D ? L->cin : L->cout, k, k};
        int64_t bs[1] = {L->cout};
        if ((st = bind(c, L, name, "weight", 4, ws, &L->w))
            || (st = bind(c, L, name, "bias", 1, bs, &L->b))
            || (st = nets_layer_prepare(L, c->err)))
            return st;
        break;
    }
    case NETS_L_DENSE: {
        if ((st = get_int(c, L, o, "in", 1, (int)NETS_MAX_ACT, &L->cin))
            || (st = get_int(c, L, o, "out", 1, (int)NETS_MAX_ACT, &L->cout)))
            return st;
        if (in.rank != 1)
            return lfail(c, L, "input shape %s is not a vector (flatten it first)", ins);
        if (in.c != L->cin)
            return lfail(c, L, "input shape %s has %d features, the layer has in = %d", ins, in.c,
                         L->cin);
        if ((long long)L->cin * L->cout > (long long)ST_MAX_VALUES)
            return lfail(c, L, "a %d x %d weight is too large", L->cout, L->cin);
        L->out = (nets_shape){1, L->cout, 1, 1};
        int64_t ws[2] = {L->cout, L->cin}, bs[1] = {L->cout};
        if ((st = bind(c, L, name, "weight", 2, ws, &L->w))
            || (st = bind(c, L, name, "bias", 1, bs, &L->b))
            || (st = nets_layer_prepare(L, c->err)))
            return st;
        break;
    }
    case NETS_L_GROUP_NORM: {
        int ch = 0;
        if ((st = get_int(c, L, o, "groups", 1, NETS_MAX_DIM, &L->groups))
            || (st = get_int(c, L, o, "channels", 1, NETS_MAX_DIM, &ch)))
            return st;
        const json_t *e = json_object_get(o, "eps");
        if (!json_is_number(e) || !(json_number_value(e) > 0) || !isfinite(json_number_value(e)))
            return lfail(c, L, "eps must be a positive number");
        L->eps = json_number_value(e);
        if (ch % L->groups)
            return lfail(c, L, "channels %d are not divisible by groups %d", ch, L->groups);
        if (in.c != ch)
            return lfail(c, L, "input shape %s has %d channels, the layer has channels = %d", ins,
                         in.c, ch);
        L->cin = L->cout = ch;
        int64_t s1[1] = {ch};
        if ((st = bind(c, L, name, "weight", 1, s1, &L->w))
            || (st = bind(c, L, name, "bias", 1, s1, &L->b)))
            return st;
        break;
    }
    case NETS_L_RELU:
    case NETS_L_SWISH:
    case NETS_L_SIGMOID: break;
    case NETS_L_FLATTEN: L->out = (nets_shape){1, (int)nets_shape_size(in), 1, 1}; break;
    case NETS_L_RESHAPE: {
        const json_t *sh = json_object_get(o, "shape");
        int d[3];
        if (!json_is_array(sh) || json_array_size(sh) != 3)
            return lfail(c, L, "shape must be a list of 3 integers [c, h, w]");
        for (int i = 0; i < 3; i++) {
            const json_t *v = json_array_get(sh, (size_t)i);
            if (!json_is_integer(v) || json_integer_value(v) < 1
                || json_integer_value(v) > NETS_MAX_DIM)
                return lfail(c, L, "shape must be a list of 3 integers [c, h, w] in [1, %d]",
                             NETS_MAX_DIM);
            d[i] = (int)json_integer_value(v);
        }
        long long need = (long long)d[0] * d[1] * d[2];
        if (in.rank != 1 || in.c != need)
            return lfail(
                c, L,
                "reshape to [%d,%d,%d] needs a vector of %lld features, the input has shape %s",
                d[0], d[1], d[2], need, ins);
        L->out = (nets_shape){3, d[0], d[1], d[2]};
        break;
    }
    case NETS_L_CROP: {
        int h = 0, w = 0;
        if ((st = get_int(c, L, o, "height", 1, NETS_MAX_DIM, &h))
            || (st = get_int(c, L, o, "width", 1, NETS_MAX_DIM, &w)))
            return st;
        if (in.rank != 3)
            return lfail(c, L, "input shape %s is not an image [c,h,w]", ins);
        if (h > in.h || w > in.w)
            return lfail(c, L, "cannot crop input shape %s to %d x %d", ins, h, w);
        L->pad_t = (in.h - h) / 2;
        L->pad_l = (in.w - w) / 2;
        L->out = (nets_shape){3, in.c, h, w};
        break;
    }
    case NETS_L_RESIDUAL: {
        const json_t *body = json_object_get(o, "body");
        if (!json_is_array(body))
            return lfail(c, L, "body must be a list of layers");
        if (depth + 1 > NETS_MAX_DEPTH)
            return lfail(c, L, "residual blocks nest deeper than %d", NETS_MAX_DEPTH);
        L->body = calloc(1, sizeof(nets_seq));
        if (!L->body)
            return vbm_fail(c->err, VBM_ENOMEM, NULL, "out of memory");
        char sub[128];
        snprintf(sub, sizeof sub, "%s.body", L->label);
        if ((st = parse_list(c, body, sub, in, depth + 1, L->body)) != VBM_OK)
            return st;
        if (!shape_eq(L->body->out, in)) {
            char outs[64];
            nets_shape_str(L->body->out, outs, sizeof outs);
            return lfail(c, L, "the body maps %s to %s (it must keep the shape)", ins, outs);
        }
        break;
    }
    }
    return VBM_OK;
}

static vbm_status parse_list(parse_ctx *c, const json_t *list, const char *path, nets_shape in,
                             int depth, nets_seq *out)
{
    memset(out, 0, sizeof *out);
    out->in = out->out = in;
    out->max_act = nets_shape_size(in);
    if (!json_is_array(list))
        return vbm_fail(c->err, VBM_EFORMAT, NULL, "%s: not a list of layers", path);
    size_t n = json_array_size(list);
    if (n > NETS_MAX_LAYERS || c->count + (long)n > NETS_MAX_LAYERS)
        return vbm_fail(c->err, VBM_EFORMAT, NULL, "%s: more than %d layers", path,
                        NETS_MAX_LAYERS);
    c->count += (int)n;
    out->layers = calloc(n ? n : 1, sizeof(nets_layer));
    if (!out->layers)
        return vbm_fail(c->err, VBM_ENOMEM, NULL, "out of memory");
    nets_shape cur = in;
    for (size_t i = 0; i < n; i++) {
        const json_t *o = json_array_get(list, i);
        nets_layer *L = &out->layers[i];
        out->n = (int)i + 1;
        snprintf(L->label, sizeof L->label, "%s[%zu]", path, i);
        if (!json_is_object(o))
            return vbm_fail(c->err, VBM_EFORMAT, NULL, "layer %s: not a JSON object", L->label);
        const char *type = json_string_value(json_object_get(o, "type"));
        if (!type)
            return vbm_fail(c->err, VBM_EFORMAT, NULL, "layer %s: type is missing or not a string",
                            L->label);
        int t = -1;
        for (int j = 0; j < (int)(sizeof type_names / sizeof type_names[0]); j++)
            if (strcmp(type, type_names[j]) == 0)
                t = j;
        if (t < 0)
            return vbm_fail(c->err, VBM_EFORMAT, NULL, "layer %s: unknown type \"%.40s\"", L->label,
                            type);
        L->type = (nets_ltype)t;
        L->in = cur;
        vbm_status st = parse_layer(c, o, depth, L);
        if (st != VBM_OK)
            return st;
        cur = L->out;
        if (nets_shape_size(cur) > out->max_act)
            out->max_act = nets_shape_size(cur);
        out->work += nets_shape_size(cur);
        if (L->type == NETS_L_CONV2D)
            out->work += (long)L->cin * L->k * L->k * L->out.h * L->out.w;
        if (L->type == NETS_L_CONVT2D)
            out->work += (long)L->cout * L->k * L->k * L->in.h * L->in.w;
        if (L->body)
            out->work += L->body->work;
        double macs = 0.0; /* the layer's multiply-adds per sample */
        if (L->type == NETS_L_CONV2D)
            macs = (double)L->cout * L->cin * L->k * L->k * L->out.h * L->out.w;
        else if (L->type == NETS_L_CONVT2D)
            macs = (double)L->cout * L->cin * L->k * L->k * L->in.h * L->in.w;
        else if (L->type == NETS_L_DENSE)
            macs = (double)L->cout * L->cin;
        long act = nets_shape_size(L->in) > nets_shape_size(L->out) ? nets_shape_size(L->in)
                                                                    : nets_shape_size(L->out);
        out->macs += macs;
        out->macs_act += macs * (double)act;
        if (L->body) {
            out->macs += L->body->macs;
            out->macs_act += L->body->macs_act;
            if (L->body->max_act > out->max_act)
                out->max_act = L->body->max_act;
            if (L->body->depth + 1 > out->depth)
                out->depth = L->body->depth + 1;
        }
    }
    out->out = cur;
    return VBM_OK;
}

vbm_status nets_seq_parse(const void *list, const char *which, nets_shape in, sft_file *f,
                          nets_seq *out, vbm_error *err)
{
    parse_ctx c = {f, 0, err};
    vbm_status st = parse_list(&c, (const json_t *)list, which, in, 0, out);
    if (st != VBM_OK)
        nets_seq_free(out);
    return st;
}

/* ---- metadata ---- */

static vbm_status meta_int(const json_t *o, const char *key, int lo, int hi, int *out,
                           const char *mkey, vbm_error *err)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return vbm_fail(err, VBM_EFORMAT, NULL, "metadata %s: %s must be an integer in [%d, %d]",
                        mkey, key, lo, hi);
    *out = (int)json_integer_value(v);
    return VBM_OK;
}

static vbm_status meta_num(const json_t *o, const char *key, double lo, double hi, int open_hi,
                           double *out, const char *mkey, vbm_error *err)
{
    const json_t *v = json_object_get(o, key);
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!(x >= lo && (open_hi ? x < hi : x <= hi)))
        return vbm_fail(err, VBM_EFORMAT, NULL, "metadata %s: %s must be a number in [%g, %g%s",
                        mkey, key, lo, hi, open_hi ? ")" : "]");
    *out = x;
    return VBM_OK;
}

static vbm_status meta_pos(const json_t *o, const char *key, double *out, const char *mkey,
                           vbm_error *err)
{
    const json_t *v = json_object_get(o, key);
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!(x > 0) || !isfinite(x))
        return vbm_fail(err, VBM_EFORMAT, NULL, "metadata %s: %s must be a positive number", mkey,
                        key);
    *out = x;
    return VBM_OK;
}

static vbm_status parse_architecture(nets_model *m, const json_t *a, vbm_error *err)
{
    const char *K = "vbmem.architecture";
    nets_info *in = &m->info;
    const json_t *obs = json_object_get(a, "observation");
    if (!json_is_object(obs))
        return vbm_fail(err, VBM_EFORMAT, NULL, "metadata %s: observation must be an object", K);
    const char *OBS = "vbmem.architecture: observation";
    vbm_status st;
    if ((st = meta_int(obs, "channels", 1, NETS_MAX_DIM, &in->channels, OBS, err))
        || (st = meta_int(obs, "height", 1, NETS_MAX_DIM, &in->height, OBS, err))
        || (st = meta_int(obs, "width", 1, NETS_MAX_DIM, &in->width, OBS, err)))
        return st;
    if ((long long)in->channels * in->height * in->width > NETS_MAX_ACT)
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "metadata %s: an observation of %d x %d x %d pixels is too large", K,
                        in->channels, in->height, in->width);
    const char *lik = json_string_value(json_object_get(obs, "likelihood"));
    if (lik && strcmp(lik, "gaussian") == 0) {
        in->likelihood = NETS_GAUSSIAN;
        if ((st = meta_num(obs, "min_scale", 0.0, INFINITY, 1, &in->min_scale, OBS, err)) != VBM_OK)
            return st;
        const json_t *mean = json_object_get(obs, "mean");
        const char *ms = json_string_value(mean);
        if (mean && !(ms && (strcmp(ms, "identity") == 0 || strcmp(ms, "sigmoid") == 0)))
            return vbm_fail(err, VBM_EFORMAT, NULL,
                            "metadata %s: observation mean must be \"identity\" or \"sigmoid\"", K);
        in->sigmoid_mean = ms && strcmp(ms, "sigmoid") == 0;
        in->scale_max = 0.0;
        if (json_object_get(obs, "scale_max")
            && (st = meta_num(obs, "scale_max", 0.0, INFINITY, 1, &in->scale_max, OBS, err))
                   != VBM_OK)
            return st;
        if (json_object_get(obs, "scale_max") && !(in->scale_max > 0.0))
            return vbm_fail(err, VBM_EFORMAT, NULL,
                            "metadata %s: observation scale_max must be above 0", K);
    } else if (lik && strcmp(lik, "bernoulli") == 0) {
        in->likelihood = NETS_BERNOULLI;
        in->min_scale = 0.0;
        in->sigmoid_mean = 0;
        in->scale_max = 0.0;
    } else {
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "metadata %s: observation likelihood must be \"gaussian\" or \"bernoulli\"",
                        K);
    }
    if ((st = meta_int(a, "code_size", 1, NETS_MAX_DIM, &in->code_size, K, err))
        || (st = meta_num(a, "log_sigma_min", -1e3, 1e3, 0, &in->log_sigma_min, K, err))
        || (st = meta_num(a, "log_sigma_max", -1e3, 1e3, 0, &in->log_sigma_max, K, err)))
        return st;
    if (!(in->log_sigma_min < in->log_sigma_max))
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "metadata %s: log_sigma_min %g is not below log_sigma_max %g", K,
                        in->log_sigma_min, in->log_sigma_max);
    const json_t *enc = json_object_get(a, "encoder"), *dec = json_object_get(a, "decoder");
    if (!json_is_array(enc))
        return vbm_fail(err, VBM_EFORMAT, NULL, "metadata %s: encoder must be a list of layers", K);
    if (!json_is_array(dec))
        return vbm_fail(err, VBM_EFORMAT, NULL, "metadata %s: decoder must be a list of layers", K);

    char want[64], got[64];
    nets_shape img = {3, in->channels, in->height, in->width};
    if ((st = nets_seq_parse(enc, "encoder", img, &m->file, &m->enc, err)) != VBM_OK)
        return st;
    nets_shape code2 = {1, 2 * in->code_size, 1, 1};
    if (!shape_eq(m->enc.out, code2)) {
        nets_shape_str(m->enc.out, got, sizeof got);
        nets_shape_str(code2, want, sizeof want);
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "encoder: output shape %s is not %s (2 x code_size)", got, want);
    }
    nets_shape code = {1, in->code_size, 1, 1};
    if ((st = nets_seq_parse(dec, "decoder", code, &m->file, &m->dec, err)) != VBM_OK)
        return st;
    int P = in->likelihood == NETS_GAUSSIAN ? 2 * in->channels : in->channels;
    nets_shape want_out = {3, P, in->height, in->width};
    if (!shape_eq(m->dec.out, want_out)) {
        nets_shape_str(m->dec.out, got, sizeof got);
        nets_shape_str(img, want, sizeof want);
        return vbm_fail(
            err, VBM_EFORMAT, NULL,
            "decoder: output shape %s does not match the observation %s (%d channels for %s)", got,
            want, P, in->likelihood == NETS_GAUSSIAN ? "gaussian" : "bernoulli");
    }
    return VBM_OK;
}

static vbm_status parse_memory(nets_info *in, const json_t *o, vbm_error *err)
{
    const char *K = "vbmem.memory";
    static const char *const kinds[] = {"gaussian", "categorical", "mixture", "tree", "dkm"};
    const char *kind = json_string_value(json_object_get(o, "kind"));
    int ok = 0;
    for (int i = 0; kind && i < 5; i++)
        ok |= strcmp(kind, kinds[i]) == 0;
    if (!ok)
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "metadata %s: kind must be one of \"gaussian\", \"categorical\", "
                        "\"mixture\", \"tree\", \"dkm\"",
                        K);
    snprintf(in->kind, sizeof in->kind, "%s", kind);
    vbm_status st;
    if ((st = meta_int(o, "clusters", 1, 65536, &in->clusters, K, err))
        || (st = meta_int(o, "rows", 1, 4096, &in->rows, K, err))
        || (st = meta_int(o, "groups", 1, in->code_size, &in->groups, K, err))
        || (st = meta_int(o, "iterations", 0, 100000, &in->iterations, K, err))
        || (st = meta_int(o, "episode_length", 1, 10000000, &in->episode_length, K, err))
        || (st = meta_pos(o, "sigma_z2", &in->sigma_z2, K, err))
        || (st = meta_pos(o, "u0", &in->u0, K, err))
        || (st = meta_pos(o, "sigma2_b0", &in->sigma2_b0, K, err))
        || (st = meta_num(o, "s_floor", 0.0, 1.0, 1, &in->s_floor, K, err)))
        return st;
    in->session_sigma_z2 = in->sigma_z2;
    if (json_object_get(o, "session_sigma_z2") != NULL
        && (st = meta_pos(o, "session_sigma_z2", &in->session_sigma_z2, K, err)))
        return st;
    if (in->code_size % in->groups)
        return vbm_fail(err, VBM_EFORMAT, NULL, "metadata %s: groups %d do not divide code_size %d",
                        K, in->groups, in->code_size);
    return VBM_OK;
}

void nets_model_free(nets_model *m)
{
    if (!m)
        return;
    nets_seq_free(&m->enc);
    nets_seq_free(&m->dec);
    sft_free(&m->file);
    free(m->info.architecture_json);
    free(m->info.memory_json);
    free(m->info.provenance_json);
    free(m);
}

const nets_info *nets_model_info(const nets_model *m)
{
    return &m->info;
}

static vbm_status load_inner(nets_model *m, const unsigned char *buf, size_t len, vbm_error *err)
{
    vbm_status st = sft_parse(buf, len, &m->file, err);
    if (st != VBM_OK)
        return st;
    const char *fmt = sft_meta(&m->file, "vbmem.format"),
               *ver = sft_meta(&m->file, "vbmem.format_version");
    if (!fmt)
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "metadata vbmem.format is missing (not a vbmem model file)");
    if (strcmp(fmt, "vbmem-model") != 0)
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "metadata vbmem.format is \"%.40s\", expected \"vbmem-model\"", fmt);
    if (!ver)
        return vbm_fail(err, VBM_EFORMAT, NULL, "metadata vbmem.format_version is missing");
    if (strcmp(ver, "1") != 0)
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "metadata vbmem.format_version is \"%.40s\"; this build reads version 1",
                        ver);
    const char *kind = sft_meta(&m->file, "vbmem.kind");
    if (kind && strcmp(kind, "vae") != 0)
        return vbm_fail(err, VBM_EFORMAT, NULL,
                        "metadata vbmem.kind is \"%.40s\": not an encoder/decoder model (kind "
                        "\"vae\"; an \"rpm\" file is read by nets_rpm_load)",
                        kind);
    json_t *arch = sft_meta_object(&m->file, "vbmem.architecture", err);
    if (!arch)
        return VBM_EFORMAT;
    json_t *mem = sft_meta_object(&m->file, "vbmem.memory", err);
    json_t *prov = mem ? sft_meta_object(&m->file, "vbmem.provenance", err) : NULL;
    st = (!mem || !prov) ? VBM_EFORMAT : parse_architecture(m, arch, err);
    if (st == VBM_OK)
        st = parse_memory(&m->info, mem, err);
    json_decref(arch);
    json_decref(mem);
    json_decref(prov);
    if (st != VBM_OK)
        return st;
    if (sft_check_used(&m->file, err) != VBM_OK)
        return VBM_EFORMAT;
    m->info.n_params = m->file.n_values;
    m->info.architecture_json = strdup(sft_meta(&m->file, "vbmem.architecture"));
    m->info.memory_json = strdup(sft_meta(&m->file, "vbmem.memory"));
    m->info.provenance_json = strdup(sft_meta(&m->file, "vbmem.provenance"));
    if (!m->info.architecture_json || !m->info.memory_json || !m->info.provenance_json)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    return VBM_OK;
}

vbm_status nets_model_load_buffer(const unsigned char *buf, size_t len, nets_model **out,
                                  vbm_error *err)
{
    *out = NULL;
    nets_model *m = calloc(1, sizeof *m);
    if (!m)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    vbm_status st = load_inner(m, buf, len, err);
    if (st != VBM_OK) {
        nets_model_free(m);
        return st;
    }
    *out = m;
    return VBM_OK;
}

vbm_status nets_model_load(const char *path, nets_model **out, vbm_error *err)
{
    *out = NULL;
    unsigned char *buf;
    size_t len;
    vbm_status rc = sft_read_file(path, &buf, &len, err);
    if (rc != VBM_OK)
        return rc;
    vbm_error inner;
    rc = nets_model_load_buffer(buf, len, out, &inner);
    free(buf);
    if (rc != VBM_OK)
        return vbm_fail(err, rc, NULL, "%s: %s", path, inner.msg);
    return VBM_OK;
}
