/* test_recall.c -- shows that fused reads recall on the bundled model: a read of 4 random crops of
 * each stored item of Fashion-MNIST test episodes (fixed seeds) brings back at least 10 points more
 * items than a read of one (what a memory adds to single reads against the model alone is
 * tests/test_gain.c). Needs the Debian package dataset-fashion-mnist. VBMEM_RECALL_EPISODES sets
 * fewer episodes (the sanitizer builds). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "recall_eval.h"

#ifndef RECALL_MODEL
#define RECALL_MODEL "models/fashion-mnist-mixture-v2.safetensors"
#endif
#define RECALL_FMNIST "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"

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
    tcase_add_test(tc, more_views_complete_more_cues);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
