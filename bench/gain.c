/* gain.c -- bench-gain: what the memory adds to its reads on the bundled model: every cue read from
 * the memory holding the item, an empty memory (the model alone) and another episode's memory,
 * against the oracle (the decode of the item's own code); gap closure, nearest-original rate, total
 * variation, familiarity AUC and sample specificity (the tables in docs and bench/README.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gain_eval.h"

#ifndef RECALL_MODEL
#define RECALL_MODEL "models/fashion-mnist-mixture-v2.safetensors"
#endif
#define GAIN_FMNIST "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"

static void usage(void)
{
    fprintf(stderr,
            "usage: bench-gain [--episodes N] [--steps N] [--candidates N] [--seed N]\n"
            "                  [--sigma-z2 X] [--blend] [--model FILE] [--cue NAME]...\n"
            "                  [--no-specificity] [--forget N] [--resize H] [--dump FILE]\n"
            "                  [--data FILE]\n"
            "cues: top bottom blocks noise20 noise35 clean (default: all)\n"
            "--sigma-z2 X: the sessions' observation noise (default: the model's session\n"
            "default); --blend: answers that blend the cue with the prediction; --dump FILE:\n"
            "the first episode's originals, cues, the memory's steps and the empty memory's\n"
            "last step of the last cue, float32 (bench/gain_picture.py draws them); --forget N:\n"
            "also forget the first N items of every episode and read them again (top cues);\n"
            "--resize H: also resize every memory to H clusters, from kept codes and from codes\n"
            "drawn from the memory, and read again (top cues, sample specificity); --data FILE:\n"
            "the test images, a gzipped IDX file of 28x28 bytes (default: Fashion-MNIST's test\n"
            "set, from Debian's dataset-fashion-mnist)\n");
}

int main(int argc, char **argv)
{
    static const char *const keys[GAIN_CUES] = {"top",     "bottom",  "blocks",
                                                "noise20", "noise35", "clean"};
    gain_opts o = {20, 5, 4, 1, 0.0, 0, 1, NULL};
    const char *model = RECALL_MODEL, *data = GAIN_FMNIST;
    int want[GAIN_CUES] = {0}, any = 0, spec = 1, forget = 0, resize = 0, i, c;
    gain_forget_result fr;
    gain_resize_result rr;
    gain_result r;
    gain_spec sp;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--episodes") == 0 && i + 1 < argc)
            o.episodes = atoi(argv[++i]);
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            o.steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--candidates") == 0 && i + 1 < argc)
            o.candidates = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            o.seed = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--sigma-z2") == 0 && i + 1 < argc)
            o.sigma_z2 = atof(argv[++i]);
        else if (strcmp(argv[i], "--blend") == 0)
            o.blend = 1;
        else if (strcmp(argv[i], "--resize") == 0 && i + 1 < argc)
            resize = atoi(argv[++i]);
        else if (strcmp(argv[i], "--forget") == 0 && i + 1 < argc)
            forget = atoi(argv[++i]);
        else if (strcmp(argv[i], "--no-specificity") == 0)
            spec = 0;
        else if (strcmp(argv[i], "--dump") == 0 && i + 1 < argc)
            o.dump = argv[++i];
        else if (strcmp(argv[i], "--data") == 0 && i + 1 < argc)
            data = argv[++i];
        else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            model = argv[++i];
        else if (strcmp(argv[i], "--cue") == 0 && i + 1 < argc) {
            for (c = 0, i++; c < GAIN_CUES && strcmp(argv[i], keys[c]) != 0; c++)
                ;
            if (c == GAIN_CUES) {
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
    printf("bench-gain: %d episodes of 64 test images of %s, %d read steps, %d "
           "candidates, seed %llu, sigma_z2 %s, %s answers, model %s\n",
           o.episodes, data, o.steps, o.candidates, (unsigned long long)o.seed,
           o.sigma_z2 > 0.0 ? "as below" : "the model's session default",
           o.blend ? "blended" : "clean", model);
    if (o.sigma_z2 > 0.0)
        printf("sigma_z2 = %g\n", o.sigma_z2);
    printf("MSE of the last step's answer to its own original (masked cues: the unknown pixels; "
           "the others: the whole image); closure = (empty - memory) / (empty - oracle)\n\n");
    printf("| cue | memory | empty (model alone) | another episode | oracle | closure | closure, "
           "another episode | nearest original: memory / empty / other / oracle | TV memory / "
           "empty / oracle | familiarity AUC | stopped at | memory reads s |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (c = 0; c < GAIN_CUES; c++) {
        if (any && !want[c])
            continue;
        if (gain_run(model, data, (gain_cue)c, &o, &r) != 0)
            return 1;
        printf("| %s | %.4f | %.4f | %.4f | %.4f | **%.2f** | %.2f | %.3f / %.3f / %.3f / %.3f | "
               "%.1f / %.1f / %.1f | %.3f | %.1f | %.1f |\n",
               gain_cue_name((gain_cue)c), r.mse_mem, r.mse_empty, r.mse_other, r.mse_oracle,
               r.closure, r.closure_other, r.near_mem, r.near_empty, r.near_other, r.near_oracle,
               r.tv_mem, r.tv_empty, r.tv_oracle, r.auc, r.stopped_mean, r.seconds);
        fflush(stdout);
    }
    if (spec) {
        if (gain_specificity(model, data, &o, &sp) != 0)
            return 1;
        printf("\nsample specificity (mean distance of a sample to the nearest image of its "
               "episode over that to another episode's; 1 = no memory): memory %.3f, empty "
               "memory %.3f, oracle (the stored items' own decodes) %.3f\n",
               sp.mem, sp.empty, sp.oracle);
    }
    if (forget > 0) {
        if (gain_forget(model, data, &o, forget, &fr) != 0)
            return 1;
        printf("\nforgetting %d of 64 items, top-half cues: closure = (empty - memory) / (empty - "
               "oracle), specific = (another episode - memory) / (another episode - oracle)\n\n",
               forget);
        printf("| memory | forgotten: closure | forgotten: specific | kept: closure |\n");
        printf("|---|---|---|---|\n");
        printf("| before forgetting | %.2f | %.2f | %.2f |\n", fr.closure_before_forgotten,
               fr.specific_before_forgotten, fr.closure_before_kept);
        printf("| after, exact (codes kept, refit) | %.2f | %.2f | %.2f |\n",
               fr.closure_exact_forgotten, fr.specific_exact_forgotten, fr.closure_exact_kept);
        printf("| after, downdate (no codes kept) | %.2f | %.2f | %.2f |\n",
               fr.closure_down_forgotten, fr.specific_down_forgotten, fr.closure_down_kept);
    }
    if (resize > 0) {
        if (gain_resize(model, data, &o, resize, &rr) != 0)
            return 1;
        printf("\nresizing every memory to %d clusters: top-half cues' closure and sample "
               "specificity\n\n| memory | closure | specificity |\n|---|---|---|\n",
               resize);
        printf("| before | %.2f | %.3f |\n", rr.closure_before, rr.spec_before);
        printf("| resized from kept codes | %.2f | %.3f |\n", rr.closure_kept, rr.spec_kept);
        printf("| resized on codes drawn from the memory | %.2f | %.3f |\n", rr.closure_drawn,
               rr.spec_drawn);
    }
    return 0;
}
