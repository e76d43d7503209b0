/* test_recall.c -- shows that reads recall on the bundled model: over 20 Fashion-MNIST test episodes of 64 images (fixed seeds), a half-blanked cue read with its mask ends nearest to its own original in at least 60 % of cues, and a noisy cue (sd 0.35, no mask) in at least 15 points more cues than its own encode-decode; a fused read of 4 random crops of each item in at least 10 points more cues than of one. Needs the Debian package dataset-fashion-mnist. VBMEM_RECALL_EPISODES sets fewer episodes (the sanitizer builds). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "recall_eval.h"

#ifndef RECALL_MODEL
#define RECALL_MODEL "models/fashion-mnist-mixture.safetensors"
#endif
#define RECALL_FMNIST "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"

static reval_opts test_opts(void)
{
    reval_opts o = {20, 5, 16, 0, 1, NULL, 0};
    const char *e = getenv("VBMEM_RECALL_EPISODES");

    if (e != NULL && atoi(e) > 0)
        o.episodes = atoi(e);
    return o;
}

START_TEST(half_blanked_cue_is_completed)
{
    reval_opts o = test_opts();
    reval_result r;

    ck_assert_int_eq(reval_run(RECALL_MODEL, RECALL_FMNIST, REVAL_TOP, &o, &r), 0);
    printf("recall: top half blanked, with the mask, %d episodes: recall read %.3f, encode-decode "
           "%.3f, nearest stored code %.3f, chance %.3f\n",
           o.episodes, r.recall, r.encdec, r.oracle, r.chance);
    fflush(stdout);
    ck_assert_msg(r.recall >= 0.60, "a half-blanked cue came back in %.3f of cues (< 0.60)",
                  r.recall);
    ck_assert_msg(r.recall > r.encdec + 0.15, "recall %.3f is not clearly above encode-decode %.3f",
                  r.recall, r.encdec);
}
END_TEST

START_TEST(noisy_cue_is_cleaned)
{
    reval_opts o = test_opts();
    reval_result r;

    ck_assert_int_eq(reval_run(RECALL_MODEL, RECALL_FMNIST, REVAL_NOISE35, &o, &r), 0);
    printf("recall: noise sd 0.35, no mask, %d episodes: recall read %.3f, encode-decode %.3f, "
           "nearest stored code %.3f; MSE recall %.4f, encode-decode %.4f, cue %.4f\n",
           o.episodes, r.recall, r.encdec, r.oracle, r.mse_recall, r.mse_encdec, r.mse_cue);
    fflush(stdout);
    ck_assert_msg(r.recall >= r.encdec + 0.15,
                  "recall %.3f is not 15 points above encode-decode %.3f", r.recall, r.encdec);
    /* a denoising read: closer to the originals than the noisy cue and its encode-decode */
    ck_assert_msg(r.mse_recall < r.mse_encdec && r.mse_recall < r.mse_cue,
                  "MSE recall %.4f, encode-decode %.4f, cue %.4f", r.mse_recall, r.mse_encdec,
                  r.mse_cue);
}
END_TEST

/* Fused reads (seed 004): J = 4 random 14 x 14 crops of each stored item (a quarter of it
 * each, a different crop per view, with masks) bring it back in clearly more cues than one crop
 * (the first of the same four). Fewer episodes (2) and steps (3) than the table of
 * bench-recall-views, where the gap is 25+ points; with VBMEM_RECALL_EPISODES (the sanitizer
 * builds) that many episodes, at most 2, 1 step and 4 candidates. */
START_TEST(more_views_complete_more_cues)
{
    static const int Js[2] = {1, 4};
    reval_opts o = {2, 3, 16, 0, 1, NULL, 0};
    const char *e = getenv("VBMEM_RECALL_EPISODES");
    reval_views_result r[2];

    if (e != NULL && atoi(e) > 0) { /* the sanitizer builds: 1 step, 4 candidates */
        o.episodes = atoi(e) < o.episodes ? atoi(e) : o.episodes;
        o.steps = 1;
        o.candidates = 4;
    }
    ck_assert_int_eq(reval_views_run(RECALL_MODEL, RECALL_FMNIST, REVAL_VIEWS_CROP, Js, 2, &o, r),
                     0);
    printf("recall: random 14x14 crops, %d episodes, %d steps, %d candidates: J = 1 %.3f, J = 4 "
           "%.3f (fused code decoded without memory %.3f, %.3f)\n",
           o.episodes, o.steps, o.candidates, r[0].recall, r[1].recall, r[0].fused_encdec,
           r[1].fused_encdec);
    fflush(stdout);
    ck_assert_msg(r[1].recall >= r[0].recall + 0.10,
                  "4 views completed %.3f of cues, 1 view %.3f: not 10 points more", r[1].recall,
                  r[0].recall);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("recall");
    TCase *tc = tcase_create("recall");
    SRunner *sr;
    int failed;

    tcase_set_timeout(tc, 1800);
    tcase_add_test(tc, half_blanked_cue_is_completed);
    tcase_add_test(tc, noisy_cue_is_cleaned);
    tcase_add_test(tc, more_views_complete_more_cues);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
