/* scratch.c -- vbm_scratch (scratch.h, vbmem.h): the pool of large buffers a fit reuses. */
#include "scratch.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "numerics/hugemem.h"

struct vbm_scratch {
    atomic_flag busy;             /* set while a fit holds the pool */
    double *block[SCRATCH_SLOTS]; /* NULL: a free slot */
    size_t len[SCRATCH_SLOTS];    /* doubles of each block */
};

vbm_scratch *vbm_scratch_new(void)
{
    vbm_scratch *s = calloc(1, sizeof *s);
    if (s)
        atomic_flag_clear(&s->busy);
    return s;
}

void vbm_scratch_free(vbm_scratch *s)
{
    if (!s)
        return;
    for (int i = 0; i < SCRATCH_SLOTS; i++)
        free(s->block[i]);
    free(s);
}

size_t vbm_scratch_bytes(const vbm_scratch *s)
{
    size_t n = 0;
    for (int i = 0; s && i < SCRATCH_SLOTS; i++)
        n += s->len[i] * sizeof(double);
    return n;
}

int scratch_acquire(vbm_scratch *s)
{
    return s && !atomic_flag_test_and_set(&s->busy);
}

void scratch_release(vbm_scratch *s)
{
    atomic_flag_clear(&s->busy);
}

double *scratch_take(vbm_scratch *s, size_t n)
{
    int best = -1;
    for (int i = 0; s && i < SCRATCH_SLOTS; i++)
        if (s->block[i] && s->len[i] >= n && (best < 0 || s->len[i] < s->len[best]))
            best = i;
    if (best < 0) /* vbm_calloc's limit, without zeroing; from 2 MB on huge pages: a few page
                   * faults a fit instead of thousands, about 1 % of a mixture write at T = 1,280,
                   * H = 150 on the machine measured (hugemem.h) */
        return n && n <= (size_t)VBM_MAX_ELEMENTS ? hugemem_alloc(n * sizeof(double)) : NULL;
    double *p = s->block[best];
    s->block[best] = NULL;
    s->len[best] = 0;
    return p;
}

void scratch_give(vbm_scratch *s, double *p, size_t n)
{
    if (!p)
        return;
    for (int i = 0; s && i < SCRATCH_SLOTS; i++)
        if (!s->block[i]) {
            s->block[i] = p;
            s->len[i] = n;
            return;
        }
    free(p);
}
