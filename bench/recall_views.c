/* recall_views.c -- bench-recall-views: how often a fused read of J damaged views of each stored
 * item (J = 1, 2, 4, 8; random crops or pixel noise, a different one per view) brings back the
 * stored item, on the bundled model and Fashion-MNIST test episodes, against the fused and the
 * plainly averaged codes decoded without memory; prints the table recorded in README.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recall_eval.h"

#ifndef RECALL_MODEL
#define RECALL_MODEL "models/fashion-mnist-mixture.safetensors"
#endif
#define RECALL_FMNIST "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"

int main(int argc, char **argv)
{
    static const int Js[4] = {1, 2, 4, 8};
    reval_opts o = {10, 5, 16, 0, 1, NULL, 0};
    reval_views_result r[4];
    int i, c, only = -1;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--episodes") == 0 && i + 1 < argc)
            o.episodes = atoi(argv[++i]);
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            o.steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            o.seed = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--first-view-code") == 0)
            o.first_view_code = 1;
        else if (strcmp(argv[i], "--cue") == 0 && i + 1 < argc)
            only = strcmp(argv[++i], "crop") == 0 ? REVAL_VIEWS_CROP : REVAL_VIEWS_NOISE50;
        else {
            fprintf(stderr, "usage: bench-recall-views [--episodes N] [--steps N] [--seed N] "
                            "[--cue crop|noise] [--first-view-code]\n");
            return 2;
        }
    }
    if (o.episodes < 1 || o.steps < 1) {
        fprintf(stderr, "bench-recall-views: --episodes and --steps must be >= 1\n");
        return 2;
    }
    printf("bench-recall-views: %d episodes of 64 Fashion-MNIST test images, %d recall steps, %d "
           "candidates, seed %llu; J views of each item, the first J of 8 per item\n",
           o.episodes, o.steps, o.candidates, (unsigned long long)o.seed);
    if (o.first_view_code)
        printf("ABLATION (--first-view-code): a frame's code in the read is its first view's, "
               "not the RPM fusion of its views' codes; every view is still scored\n");
    printf("fraction of cues whose answer ends nearest (pixels) to its own original among the "
           "episode's 64\n\n");
    printf("| views | J | fused recall read | fused code, decoded (no memory) | mean of the "
           "codes, decoded (no memory) | MSE recall | recall s |\n");
    printf("|---|---|---|---|---|---|---|\n");
    for (c = 0; c < REVAL_VIEWS_CUES; c++) {
        if (only >= 0 && c != only)
            continue;
        if (reval_views_run(RECALL_MODEL, RECALL_FMNIST, (reval_views_cue)c, Js, 4, &o, r) != 0)
            return 1;
        for (i = 0; i < 4; i++)
            printf("| %s | %d | **%.3f** | %.3f | %.3f | %.4f | %.1f |\n",
                   reval_views_cue_name((reval_views_cue)c), Js[i], r[i].recall, r[i].fused_encdec,
                   r[i].mean_encdec, r[i].mse_recall, r[i].seconds);
        fflush(stdout);
    }
    return 0;
}
