/* test_images.c -- Check tests of vbmemd's image side: the PNG codec (round trips, colour
 * conversions, wrong sizes, every truncation and seeded bit flips of a valid file), the
 * observation wire forms (tensors, nested arrays, PNG lists and their errors), the model registry
 * (bad files, unknown names, reload while a model is in use) and the iterative read with a
 * model. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/hosted.h"
#include "engine/recall.h"
#include "engine/session.h"
#include "http/codec.h"
#include "http/images.h"
#include "nets/nets.h"
#include "numerics/rng.h"

static const img_shape GREY = {1, 28, 28};
static const img_shape RGB = {3, 8, 6};

/* An image of shape s with pixel values (v + 0.5) / 256 for bytes v of a pattern. */
static float *img_pattern(const img_shape *s, int seed)
{
    size_t n = (size_t)s->channels * s->height * s->width, i;
    float *x = malloc(n * sizeof *x);

    for (i = 0; i < n; i++)
        x[i] = (float)((((i * 37 + (size_t)seed * 11) % 256) + 0.5) / 256.0);
    return x;
}

START_TEST(test_png_round_trip)
{
    const img_shape *shapes[] = {&GREY, &RGB};
    vbm_error perr;
    int k;

    for (k = 0; k < 2; k++) {
        const img_shape *s = shapes[k];
        size_t n = (size_t)s->channels * s->height * s->width, i;
        float *x = img_pattern(s, k), *y = malloc(n * sizeof *y);
        unsigned char *png = NULL;
        size_t len = 0;

        ck_assert_int_eq(img_png_encode(x, s, &png, &len, &perr), 0);
        ck_assert_int_eq(img_png_decode(png, len, s, y, &perr), 0);
        for (i = 0; i < n; i++)
            ck_assert_float_eq(x[i], y[i]); /* (v + 0.5) / 256 -> v -> (v + 0.5) / 256 exactly */
        free(png);
        free(x);
        free(y);
    }
}
END_TEST

START_TEST(test_png_conversions_and_refusals)
{
    img_shape rgb28 = {3, 28, 28}, small = {1, 27, 28}, four = {4, 28, 28};
    float *grey = img_pattern(&GREY, 3), *out = malloc(3 * 28 * 28 * sizeof *out);
    float *colour = img_pattern(&rgb28, 4);
    unsigned char *png = NULL, *cpng = NULL;
    size_t len = 0, clen = 0, i;
    vbm_error perr;

    ck_assert_int_eq(img_png_encode(grey, &GREY, &png, &len, &perr), 0);
    /* grey into an RGB model: replicated */
    ck_assert_int_eq(img_png_decode(png, len, &rgb28, out, &perr), 0);
    for (i = 0; i < 28 * 28; i++) {
        ck_assert_float_eq(out[i], grey[i]);
        ck_assert_float_eq(out[28 * 28 + i], grey[i]);
        ck_assert_float_eq(out[2 * 28 * 28 + i], grey[i]);
    }
    /* wrong size */
    ck_assert_int_eq(img_png_decode(png, len, &small, out, &perr), -1);
    ck_assert_ptr_nonnull(strstr(perr.msg, "28x28"));
    /* a model of 4 channels cannot take PNG */
    ck_assert_int_eq(img_png_decode(png, len, &four, out, &perr), -1);
    ck_assert_int_eq(img_png_encode(grey, &four, &cpng, &clen, &perr), -1);
    /* a colourful RGB image into a grey model: refused */
    ck_assert_int_eq(img_png_encode(colour, &rgb28, &cpng, &clen, &perr), 0);
    ck_assert_int_eq(img_png_decode(cpng, clen, &GREY, out, &perr), -1);
    ck_assert_ptr_nonnull(strstr(perr.msg, "colour"));
    /* a grey RGB image (R = G = B) into a grey model: accepted */
    free(cpng);
    memcpy(colour + 28 * 28, colour, 28 * 28 * sizeof *colour);
    memcpy(colour + 2 * 28 * 28, colour, 28 * 28 * sizeof *colour);
    ck_assert_int_eq(img_png_encode(colour, &rgb28, &cpng, &clen, &perr), 0);
    ck_assert_int_eq(img_png_decode(cpng, clen, &GREY, out, &perr), 0);
    for (i = 0; i < 28 * 28; i++)
        ck_assert_float_eq(out[i], colour[i]);
    /* not a PNG */
    ck_assert_int_eq(img_png_decode((const unsigned char *)"GIF89a....", 10, &GREY, out, &perr),
                     -1);
    ck_assert_ptr_nonnull(strstr(perr.msg, "signature"));
    ck_assert_int_eq(img_png_decode(png, 3, &GREY, out, &perr), -1);
    free(png);
    free(cpng);
    free(grey);
    free(colour);
    free(out);
}
END_TEST

START_TEST(test_png_truncations_and_bit_flips)
{
    float *x = img_pattern(&GREY, 9), *out = malloc(28 * 28 * sizeof *out);
    unsigned char *png = NULL, *bad;
    size_t len = 0, cut;
    vbm_error perr;
    rng_t r;
    int i, k, fails = 0;

    ck_assert_int_eq(img_png_encode(x, &GREY, &png, &len, &perr), 0);
    for (cut = 0; cut < len; cut++) {
        perr.msg[0] = '\0';
        ck_assert_int_eq(img_png_decode(png, cut, &GREY, out, &perr), -1);
        ck_assert(perr.msg[0] != '\0');
    }
    bad = malloc(len);
    rng_seed(&r, 7);
    for (i = 0; i < 3000; i++) {
        memcpy(bad, png, len);
        for (k = 0; k < 1 + i % 4; k++)
            bad[8 + rng_below(&r, len - 8)] ^= (unsigned char)(1u << rng_below(&r, 8));
        if (img_png_decode(bad, len, &GREY, out, &perr) != 0)
            fails++;
    }
    ck_assert_int_gt(fails, 2000); /* CRCs catch nearly every flip; none may crash */
    free(bad);
    free(png);
    free(x);
    free(out);
}
END_TEST

START_TEST(test_observation_forms)
{
    float vals[2 * 784], *x = NULL;
    unsigned char u8[784];
    char *b64;
    json_t *v, *o;
    vbm_error err;
    long n = 0;
    int i;

    for (i = 0; i < 2 * 784; i++)
        vals[i] = 0.25f;
    vals[784 + 2 * 28 + 5] = NAN;
    b64 = wire_b64_encode((const unsigned char *)vals, sizeof vals);
    v = json_pack("{s:s, s:[i, i, i, i], s:s}", "dtype", "float32", "shape", 2, 1, 28, 28, "data",
                  b64);
    ck_assert_int_eq(img_read(v, "observations", &GREY, 10, &x, &n, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "observations.data");
    ck_assert_ptr_nonnull(strstr(err.msg, "frame 1, channel 0, row 2, column 5"));
    ck_assert_ptr_null(x);
    json_decref(v);
    free(b64);
    /* the frame limit */
    for (i = 0; i < 784; i++)
        u8[i] = (unsigned char)i;
    b64 = wire_b64_encode(u8, sizeof u8);
    v = json_pack("{s:s, s:[i, i, i, i], s:s}", "dtype", "uint8", "shape", 1, 1, 28, 28, "data",
                  b64);
    ck_assert_int_eq(img_read(v, "observations", &GREY, 10, &x, &n, &err), VBM_OK);
    ck_assert_int_eq(n, 1);
    ck_assert_float_eq(x[3], (float)(3.5 / 256.0));
    /* and back: uint8 output of (v + 0.5) / 256 is v */
    ck_assert_int_eq(img_write(x, 1, &GREY, IMG_UINT8, &o, &err), VBM_OK);
    ck_assert_str_eq(json_string_value(json_object_get(o, "data")), b64);
    json_decref(o);
    ck_assert_int_eq(img_write(x, 1, &GREY, IMG_JSON, &o, &err), VBM_OK);
    ck_assert_int_eq(json_array_size(json_array_get(json_array_get(json_array_get(o, 0), 0), 27)),
                     28);
    json_decref(o);
    free(x);
    json_decref(v);
    v = json_pack("{s:s, s:[i, i, i, i], s:s}", "dtype", "uint8", "shape", 11, 1, 28, 28, "data",
                  b64);
    ck_assert_int_eq(img_read(v, "observations", &GREY, 10, &x, &n, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "observations.shape");
    json_decref(v);
    free(b64);
    /* PNG lists: bad base64 names the frame */
    v = json_pack("[s, s]", "iVBORw0KGgo=", "!!");
    ck_assert_int_eq(img_read(v, "obs", &GREY, 10, &x, &n, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "obs[0]");
    json_decref(v);
    v = json_pack("[[[[f]]]]", 0.5);
    ck_assert_int_eq(img_read(v, "obs", &GREY, 10, &x, &n, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "obs[0][0]"); /* 1 row of the 28 */
    json_decref(v);
}
END_TEST

/* A directory holding the bundled model as a.safetensors and a broken b.safetensors. */
static void models_dir(char *dir, size_t n)
{
    char path[4096], cmd[8192];
    FILE *f;

    snprintf(dir, n, "/tmp/vbmem-test-models-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/a.safetensors'", TEST_MODEL, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(path, sizeof path, "%s/b.safetensors", dir);
    f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fputs("not a model", f);
    fclose(f);
}

static void rm_dir(const char *dir)
{
    char cmd[8192];

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_registry_reload_keeps_models_in_use)
{
    char dir[256], path[4096];
    eng_models *reg = NULL;
    eng_model_set *set;
    eng_model *m = NULL, *none = NULL;
    vbm_error err;
    float *x = img_pattern(&GREY, 1);
    double mu[64], s2[64];

    models_dir(dir, sizeof dir);
    ck_assert_int_eq(eng_models_create(dir, "bad name!", &reg, &err), VBM_EINVAL);
    ck_assert_int_eq(eng_models_create(dir, "a", &reg, &err), VBM_OK);
    set = eng_models_snapshot(reg);
    ck_assert_int_eq(set->n, 1);
    ck_assert_int_eq(set->n_failed, 1);
    ck_assert_str_eq(set->models[0]->name, "a");
    ck_assert_str_eq(set->failed[0].file, "b.safetensors");
    ck_assert_ptr_nonnull(strstr(set->failed[0].msg, "b.safetensors"));
    ck_assert_int_eq(set->models[0]->info->code_size, 64);
    ck_assert_int_eq((int)strlen(set->models[0]->sha256), 64);
    eng_model_set_release(set);
    ck_assert_int_eq(eng_models_get(reg, "nope", &none, &err), VBM_ENOTFOUND);
    ck_assert_ptr_null(none);
    ck_assert_int_eq(eng_models_get(reg, "a", &m, &err), VBM_OK);
    /* the file goes away and the directory is reloaded: the model in use lives on */
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(eng_models_reload(reg, &err), VBM_OK);
    set = eng_models_snapshot(reg);
    ck_assert_int_eq(set->n, 0);
    ck_assert_uint_eq(set->generation, 2);
    eng_model_set_release(set);
    ck_assert_int_eq(nets_encode(m->net, x, 1, mu, s2, &err), VBM_OK);
    ck_assert(isfinite(mu[0]) && s2[0] > 0.0);
    eng_model_unref(m);
    eng_models_free(reg);
    rm_dir(dir);
    /* no directory: no models, and an unreadable one is an error */
    ck_assert_int_eq(eng_models_create("", "", &reg, &err), VBM_OK);
    set = eng_models_snapshot(reg);
    ck_assert_int_eq(set->n + set->n_failed, 0);
    eng_model_set_release(set);
    eng_models_free(reg);
    ck_assert_int_eq(eng_models_create("/nonexistent/models", "", &reg, &err), VBM_EINVAL);
    free(x);
}
END_TEST

START_TEST(test_recall_with_model)
{
    char dir[256];
    eng_models *reg = NULL;
    eng_model *m = NULL, *bound = NULL;
    eng_session *s = NULL;
    eng_solver solver = {10, 0.0, VBM_INIT_AUTO};
    eng_fit_opts fo;
    eng_fit_out fout;
    eng_recall_query q;
    eng_recall_opts o;
    eng_recall_out a, b;
    vbm_config cfg;
    vbm_codes vc;
    vbm_error err;
    double *mu = malloc(16 * 64 * sizeof *mu), *s2 = malloc(16 * 64 * sizeof *s2);
    float *x = malloc(16 * 784 * sizeof *x);
    int i;

    for (i = 0; i < 16; i++) {
        float *p = img_pattern(&GREY, i);

        memcpy(x + (size_t)i * 784, p, 784 * sizeof *p);
        free(p);
    }
    models_dir(dir, sizeof dir);
    ck_assert_int_eq(eng_models_create(dir, "a", &reg, &err), VBM_OK);
    ck_assert_int_eq(eng_models_get(reg, "a", &m, &err), VBM_OK);
    eng_model_config(m, &cfg);
    ck_assert_int_eq(cfg.clusters, 10);
    ck_assert_int_eq(cfg.rows, 6);
    cfg.clusters = 4;
    ck_assert_int_eq(eng_session_create(&cfg, &solver, 0, NULL, &s, &err), VBM_OK);
    eng_session_set_model(s, m);
    ck_assert_int_eq(eng_session_model(s, reg, &bound, &err), VBM_OK);
    ck_assert_ptr_eq(bound, m);
    eng_model_unref(bound);
    ck_assert_int_eq(nets_encode(m->net, x, 16, mu, s2, &err), VBM_OK);
    memset(&fo, 0, sizeof fo);
    fo.iterations = -1;
    fo.tolerance = -1.0;
    fo.init = -1;
    fo.seed = 3;
    fo.if_match = -1;
    vc.T = 16;
    vc.C = 64;
    vc.mu = mu;
    vc.s2 = s2;
    ck_assert_int_eq(eng_session_write(s, ENG_REPLACE, &vc, &fo, &fout, &err), VBM_OK);
    eng_fit_out_free(&fout);
    memset(&q, 0, sizeof q);
    q.T = 3;
    memset(&o, 0, sizeof o);
    o.steps = 4;
    o.seed = 5;
    o.pixel_sample = 0;
    o.want_addresses = 1;
    ck_assert_int_eq(eng_session_recall(s, m, &q, &o, &a, &err), VBM_OK);
    ck_assert_int_eq(eng_session_recall(s, m, &q, &o, &b, &err), VBM_OK);
    ck_assert_int_eq(a.steps, 4);
    ck_assert_int_eq((int)a.P, 784);
    ck_assert_ptr_nonnull(a.start_images);
    ck_assert_int_eq(memcmp(a.z, b.z, 4 * 3 * 64 * sizeof *a.z), 0);
    ck_assert_int_eq(memcmp(a.x, b.x, 4 * 3 * 784 * sizeof *a.x), 0);
    for (i = 0; i < 4 * 3 * 784; i++)
        ck_assert(a.x[i] >= 0.0f && a.x[i] <= 1.0f);
    eng_recall_out_free(&a);
    eng_recall_out_free(&b);
    /* from query images, and refusals */
    q.images = x;
    q.T = 2;
    o.pixel_sample = 1;
    ck_assert_int_eq(eng_session_recall(s, m, &q, &o, &a, &err), VBM_OK);
    ck_assert_ptr_null(a.start_codes);
    eng_recall_out_free(&a);
    ck_assert_int_eq(eng_session_recall(s, NULL, &q, &o, &a, &err), VBM_EINVAL);
    o.steps = 0;
    ck_assert_int_eq(eng_session_recall(s, m, &q, &o, &a, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "iterations");
    eng_session_unref(s);
    eng_model_unref(m);
    eng_models_free(reg);
    rm_dir(dir);
    free(mu);
    free(s2);
    free(x);
}
END_TEST

/* Masks of query images (img_read_mask) and of query codes (img_read_code_mask): a one-channel
 * mask applies to every channel of a 3-channel shape, per-channel masks stay per channel, a PNG
 * pixel is known when a colour sample is non-zero (alpha ignored), and the errors name their
 * field. */
START_TEST(test_masks)
{
    const size_t plane = (size_t)RGB.height * RGB.width, per = 3 * plane;
    unsigned char one[2 * 48], three[2 * 3 * 48], *m = NULL, *png = NULL;
    float *x = malloc(per * sizeof *x);
    char *b64, *pb64;
    json_t *v;
    vbm_error err;
    size_t i, len = 0;
    int c;

    for (i = 0; i < sizeof one; i++)
        one[i] = (unsigned char)(i % 3 == 0 ? 255 : 0);
    b64 = wire_b64_encode(one, sizeof one);
    v = json_pack("{s:s, s:[i, i, i, i], s:s}", "dtype", "uint8", "shape", 2, 1, 8, 6, "data", b64);
    ck_assert_int_eq(img_read_mask(v, "mask", &RGB, 2, &m, &err), VBM_OK);
    for (i = 0; i < 2 * plane; i++)
        for (c = 0; c < 3; c++)
            ck_assert_int_eq(m[(i / plane) * per + (size_t)c * plane + i % plane], i % 3 == 0);
    free(m);
    ck_assert_int_eq(img_read_mask(v, "mask", &RGB, 3, &m, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "mask.shape");
    ck_assert_ptr_null(m);
    json_decref(v);
    free(b64);
    /* per channel: channel 1 of frame 1 alone is known */
    memset(three, 0, sizeof three);
    memset(three, 1, per);
    three[per + plane + 4] = 7;
    b64 = wire_b64_encode(three, sizeof three);
    v = json_pack("{s:s, s:[i, i, i, i], s:s}", "dtype", "uint8", "shape", 2, 3, 8, 6, "data", b64);
    ck_assert_int_eq(img_read_mask(v, "mask", &RGB, 2, &m, &err), VBM_OK);
    for (i = 0; i < per; i++)
        ck_assert_int_eq(m[per + i], i == plane + 4);
    free(m);
    json_decref(v);
    free(b64);
    /* a frame with no known value */
    memset(three + per, 0, per);
    b64 = wire_b64_encode(three, sizeof three);
    v = json_pack("{s:s, s:[i, i, i, i], s:s}", "dtype", "uint8", "shape", 2, 3, 8, 6, "data", b64);
    ck_assert_int_eq(img_read_mask(v, "mask", &RGB, 2, &m, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "mask[1]");
    json_decref(v);
    free(b64);
    /* PNG: an RGB image whose pixel 5 is black is known everywhere but at pixel 5, in every
     * channel */
    for (i = 0; i < per; i++)
        x[i] = (i % plane) == 5 ? 0.0f : (i < plane ? 0.5f : 0.0f);
    ck_assert_int_eq(img_png_encode(x, &RGB, &png, &len, &err), 0);
    pb64 = wire_b64_encode(png, len);
    v = json_pack("[s]", pb64);
    ck_assert_int_eq(img_read_mask(v, "mask", &RGB, 1, &m, &err), VBM_OK);
    for (i = 0; i < per; i++)
        ck_assert_int_eq(m[i], i % plane != 5);
    free(m);
    ck_assert_int_eq(img_read_mask(v, "mask", &RGB, 2, &m, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "mask");
    json_decref(v);
    v = json_pack("[s, s]", pb64, "!!");
    ck_assert_int_eq(img_read_mask(v, "mask", &RGB, 2, &m, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "mask[1]");
    json_decref(v);
    free(pb64);
    free(png);
    /* nested n x h x w applies to every channel; a 2 names its element */
    v = json_loads("[[[1,0,0,0,0,0],[0,0,0,0,0,0],[0,0,0,0,0,0],[0,0,0,0,0,0],"
                   "[0,0,0,0,0,0],[0,0,0,0,0,0],[0,0,0,0,0,0],[0,0,0,0,0,1]]]",
                   0, NULL);
    ck_assert_int_eq(img_read_mask(v, "mask", &RGB, 1, &m, &err), VBM_OK);
    for (i = 0; i < per; i++)
        ck_assert_int_eq(m[i], i % plane == 0 || i % plane == plane - 1);
    free(m);
    json_array_set_new(json_array_get(json_array_get(v, 0), 7), 5, json_integer(2));
    ck_assert_int_eq(img_read_mask(v, "mask", &RGB, 1, &m, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "mask[0][7][5]");
    json_decref(v);
    /* code masks */
    v = json_loads("[[1, 0, 0], [0, 0, 1]]", 0, NULL);
    ck_assert_int_eq(img_read_code_mask(v, "mask", 2, 3, &m, &err), VBM_OK);
    ck_assert_int_eq(m[0] + 2 * m[1] + 4 * m[2] + 8 * m[3] + 16 * m[4] + 32 * m[5], 1 + 32);
    free(m);
    ck_assert_int_eq(img_read_code_mask(v, "mask", 2, 4, &m, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "mask[0]");
    ck_assert_int_eq(img_read_code_mask(v, "mask", 3, 3, &m, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "mask");
    json_decref(v);
    v = json_pack("{s:s, s:[i, i], s:s}", "dtype", "uint8", "shape", 2, 3, "data", "AAAAAAAA");
    ck_assert_int_eq(img_read_code_mask(v, "mask", 2, 3, &m, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "mask[0]");
    json_decref(v);
    free(x);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("images");
    TCase *tc = tcase_create("images");
    SRunner *sr;
    int failed;

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_png_round_trip);
    tcase_add_test(tc, test_png_conversions_and_refusals);
    tcase_add_test(tc, test_png_truncations_and_bit_flips);
    tcase_add_test(tc, test_observation_forms);
    tcase_add_test(tc, test_masks);
    tcase_add_test(tc, test_registry_reload_keeps_models_in_use);
    tcase_add_test(tc, test_recall_with_model);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
