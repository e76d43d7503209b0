/* hugemem.c -- owns the allocation of large buffers on transparent huge pages (hugemem.h). */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise's MADV_HUGEPAGE */
#include "numerics/hugemem.h"

#include <stdlib.h>
#include <sys/mman.h>

void *hugemem_alloc(size_t bytes)
{
    if (bytes == 0)
        return NULL;
    if (bytes < HUGEMEM_MIN)
        return malloc(bytes);
    if (bytes > (size_t)-1 - HUGEMEM_MIN)
        return NULL;
    void *p = NULL;
    bytes = (bytes + HUGEMEM_MIN - 1) / HUGEMEM_MIN * HUGEMEM_MIN;
    if (posix_memalign(&p, HUGEMEM_MIN, bytes) != 0)
        return NULL;
    madvise(p, bytes, MADV_HUGEPAGE); /* advice only: failure is harmless */
    return p;
}
