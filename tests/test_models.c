/* test_models.c -- Check tests of libvbmem, one TCase per topic file of tests/memory/: the VB
 * updates (VB monotonicity, KL identities, a hand-computed iteration, model equivalences,
 * clustering recovery, sampling moments: vb.c), the operations on a memory (export/import,
 * determinism, online/refit/resize, reads: ops.c), bad input (input.c), fits split over a
 * thread team (threads.c), and the numerics under them (numerics.c). */
#include "memory/common.h"

static Suite *models_suite(void)
{
    Suite *s = suite_create("models");
    suite_add_tcase(s, models_vb_tcase());
    suite_add_tcase(s, models_ops_tcase());
    suite_add_tcase(s, models_input_tcase());
    suite_add_tcase(s, models_threads_tcase());
    suite_add_tcase(s, models_numerics_tcase());
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(models_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
