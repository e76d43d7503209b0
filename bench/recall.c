/* recall.c -- bench-recall: how often a read of a damaged cue brings back the stored item, on the
 * bundled model and Fashion-MNIST test episodes, for every cue and read mode against encode-decode,
 * the nearest stored code (an oracle) and chance; prints the table recorded in README.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recall_eval.h"

#ifndef RECALL_MODEL
#define RECALL_MODEL "models/fashion-mnist-mixture-v2.safetensors"
#endif
#define RECALL_FMNIST "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"

static void usage(void)
{
    fprintf(stderr,
            "usage: bench-recall [--episodes N] [--steps N] [--candidates N] [--seed N]\n"
            "                    [--model FILE] [--cue NAME]... [--no-modes] [--dump FILE]\n"
            "cues: top bottom left right noise20 noise35 top+noise20 (default: all)\n"
            "--no-modes: recall mode and the comparators only; --dump FILE: the first\n"
            "episode's originals, cues and recall steps as float32 (recall_picture.py)\n");
}

int main(int argc, char **argv)
{
    static const char *const keys[REVAL_CUES] = {"top",     "bottom",  "left",       "right",
                                                 "noise20", "noise35", "top+noise20"};
    reval_opts o = {20, 5, 16, 1, 1, NULL, 0};
    const char *model = RECALL_MODEL;
    int want[REVAL_CUES] = {0}, any = 0, i, c;
    reval_result r;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--episodes") == 0 && i + 1 < argc)
            o.episodes = atoi(argv[++i]);
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            o.steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--candidates") == 0 && i + 1 < argc)
            o.candidates = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            o.seed = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--dump") == 0 && i + 1 < argc)
            o.dump = argv[++i];
        else if (strcmp(argv[i], "--no-modes") == 0)
            o.sample_modes = 0;
        else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            model = argv[++i];
        else if (strcmp(argv[i], "--cue") == 0 && i + 1 < argc) {
            for (c = 0, i++; c < REVAL_CUES && strcmp(argv[i], keys[c]) != 0; c++)
                ;
            if (c == REVAL_CUES) {
                usage();
                return 2;
            }
            want[c] = any = 1;
        } else {
            usage();
            return 2;
        }
    }
    if (o.episodes < 1 || o.steps < 1 || o.candidates < 1) {
        usage();
        return 2;
    }
    printf("bench-recall: %d episodes of 64 Fashion-MNIST test images, %d read steps, %d "
           "candidates, seed %llu, model %s\n",
           o.episodes, o.steps, o.candidates, (unsigned long long)o.seed, model);
    printf("fraction of cues whose answer ends nearest (pixels) to its own original among the "
           "episode's 64\n\n");
    printf("| cue | recall read | mean read | sample read | encode-decode | nearest stored code "
           "(oracle) | chance | MSE recall / encode-decode / cue | recall s |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (c = 0; c < REVAL_CUES; c++) {
        if (any && !want[c])
            continue;
        if (reval_run(model, RECALL_FMNIST, (reval_cue)c, &o, &r) != 0)
            return 1;
        printf("| %s | **%.3f** | %.3f | %.3f | %.3f | %.3f | %.3f | %.4f / %.4f / %.4f | %.1f |\n",
               reval_cue_name((reval_cue)c), r.recall, r.mean, r.sample, r.encdec, r.oracle,
               r.chance, r.mse_recall, r.mse_encdec, r.mse_cue, r.seconds_recall);
        fflush(stdout);
    }
    return 0;
}
