/* observe.c -- owns the image side of session requests: resolving a session's model, encoding
 * posted observations, decoding codes into images, and the JSON of iterative reads. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#include "http/observe.h"
#include "http/respond.h"

void obs_shape(const eng_model *m, img_shape *shape)
{
    shape->channels = m->info->channels;
    shape->height = m->info->height;
    shape->width = m->info->width;
}

int obs_session_model(http_req *r, eng_session *s, eng_model **m, vbm_error *err)
{
    *m = NULL;
    if (eng_session_model_name(s)[0] == '\0')
        return 0;
    if (r->srv->cfg.models == NULL)
        return resp_fail(err, 422, "model", "the session's model \"%s\" is not hosted (no models)",
                         eng_session_model_name(s));
    if (eng_session_model(s, r->srv->cfg.models, m, err) != VBM_OK)
        return 422; /* whatever the registry says: the session's model is not servable */
    return 0;
}

vbm_status obs_encode(const eng_model *m, const json_t *v, const char *path, long max_frames,
                      wire_codes *out, double *nets_s, vbm_error *err)
{
    img_shape shape;
    float *x = NULL;
    size_t TC;
    long n = 0;
    double t0;
    vbm_status st;

    memset(out, 0, sizeof *out);
    *nets_s = 0.0;
    obs_shape(m, &shape);
    st = img_read(v, path, &shape, max_frames, &x, &n, err);
    if (st != VBM_OK)
        return st;
    TC = (size_t)n * (size_t)m->info->code_size;
    out->mu = malloc(TC * sizeof *out->mu);
    out->s2 = malloc(TC * sizeof *out->s2);
    if (out->mu == NULL || out->s2 == NULL) {
        free(x);
        wire_codes_free(out);
        return vbm_fail(err, VBM_ENOMEM, path, "out of memory encoding %ld images", n);
    }
    t0 = eng_now();
    st = eng_model_encode(m, x, n, path, out->mu, out->s2, err);
    if (st != VBM_OK) {
        free(x);
        wire_codes_free(out);
        return st;
    }
    *nets_s = eng_now() - t0;
    free(x);
    out->T = n;
    out->C = m->info->code_size;
    return VBM_OK;
}

vbm_status obs_decode(const eng_model *m, const double *z, long n, int pixel_sample, uint64_t seed,
                      img_format fmt, json_t **out, double *nets_s, vbm_error *err)
{
    img_shape shape;
    double t0 = eng_now();
    float *x;
    vbm_status st;

    *out = NULL;
    *nets_s = 0.0;
    obs_shape(m, &shape);
    if (fmt == IMG_PNG && shape.channels != 1 && shape.channels != 3)
        return vbm_fail(err, VBM_EINVAL, "format",
                        "format \"png\" needs a model of 1 or 3 channels, this one has %d",
                        shape.channels);
    x = malloc((size_t)n * (size_t)eng_model_pixels(m) * sizeof *x);
    if (x == NULL)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory decoding %ld codes", n);
    st = eng_model_decode_images(m, z, n, pixel_sample, seed, x, err);
    *nets_s = eng_now() - t0;
    if (st == VBM_OK)
        st = img_write(x, n, &shape, fmt, out, err);
    free(x);
    return st;
}

json_t *obs_clusters(const vbm_addresses *a)
{
    int *best = malloc(((size_t)a->T * (size_t)a->G + 1) * sizeof *best);
    long t;
    int g, h;
    json_t *out;

    if (best == NULL)
        return NULL;
    for (t = 0; t < a->T; t++) {
        for (g = 0; g < a->G; g++) {
            const double *p = a->s + ((size_t)t * (size_t)a->G + (size_t)g) * (size_t)a->H;
            int arg = 0;

            for (h = 1; h < a->H; h++) {
                if (p[h] > p[arg])
                    arg = h;
            }
            best[(size_t)t * (size_t)a->G + (size_t)g] = arg;
        }
    }
    out = wire_int_matrix(best, a->T, a->G);
    free(best);
    return out;
}

/* Add member key = v (stolen) to o; on failure o is released and NULL returned. */
static json_t *obs_set(json_t *o, const char *key, json_t *v)
{
    if (o == NULL) {
        json_decref(v);
        return NULL;
    }
    if (v == NULL || json_object_set_new(o, key, v) != 0) { /* set_new releases v on failure */
        json_decref(o);
        return NULL;
    }
    return o;
}

/* A JSON array of the n numbers a (NULL when out of memory). */
static json_t *obs_numbers(const double *a, long n)
{
    json_t *arr = json_array();

    for (long i = 0; arr != NULL && i < n; i++)
        if (json_array_append_new(arr, wire_number(a[i])) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    return arr;
}

vbm_status obs_recall_json(const http_req *r, const eng_recall_out *out, const eng_model *m,
                           img_format fmt, int base64, int want_addresses, json_t **json,
                           vbm_error *err)
{
    size_t TC = (size_t)out->T * (size_t)out->C, TP = (size_t)out->T * (size_t)out->P;
    int images = m != NULL && fmt != IMG_NONE;
    json_t *steps = json_array(), *step, *img, *doc, *start = NULL;
    img_shape shape;
    vbm_status st;
    int i;

    *json = NULL;
    if (images)
        obs_shape(m, &shape);
    for (i = 0; steps != NULL && i < out->steps; i++) {
        step = json_pack("{s:o}", "codes",
                         wire_matrix(out->z + (size_t)i * TC, out->T, out->C, base64));
        if (out->addr != NULL) {
            step = obs_set(step, "clusters", obs_clusters(&out->addr[i]));
            if (want_addresses)
                step = obs_set(step, "addresses", codec_addresses(&out->addr[i]));
        }
        if (step != NULL && images) {
            st = img_write(out->x + (size_t)i * TP, out->T, &shape, fmt, &img, err);
            if (st != VBM_OK) {
                json_decref(step);
                json_decref(steps);
                return st;
            }
            step = obs_set(step, "observations", img);
        }
        if (step == NULL || json_array_append_new(steps, step) != 0) {
            json_decref(steps);
            steps = NULL;
        }
    }
    if (steps != NULL && out->start_codes != NULL) {
        start = json_pack("{s:o}", "codes", wire_matrix(out->start_codes, out->T, out->C, base64));
        if (start != NULL && images && out->start_images != NULL) {
            st = img_write(out->start_images, out->T, &shape, fmt, &img, err);
            if (st != VBM_OK) {
                json_decref(start);
                json_decref(steps);
                return st;
            }
            start = obs_set(start, "observations", img);
        }
        if (start == NULL) {
            json_decref(steps);
            steps = NULL;
        }
    }
    doc = steps != NULL
              ? json_pack("{s:I, s:o, s:o, s:i, s:{s:f, s:f, s:f, s:f}}", "version",
                          (json_int_t)out->version, "steps", steps, "familiarity",
                          obs_numbers(out->familiarity, out->T), "stopped_at", out->stopped_at,
                          "timings", "queue_s", r->job.started_at - r->job.queued_at, "read_s",
                          out->read_s, "nets_s", out->nets_s, "total_s", eng_now() - r->t_start)
              : NULL;
    if (doc != NULL && start != NULL)
        doc = obs_set(doc, "start", start);
    else
        json_decref(start);
    if (doc == NULL)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory building the read");
    *json = doc;
    return VBM_OK;
}
