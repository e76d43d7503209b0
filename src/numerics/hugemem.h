/* hugemem.h -- owns the allocation of large buffers on transparent huge pages: the networks'
 * workspaces, the memory models' scratch blocks and the benchmarks' arrays beside them. */
#ifndef VBMEM_HUGEMEM_H
#define VBMEM_HUGEMEM_H

#include <stddef.h>

/* Bytes from which hugemem_alloc aligns a buffer to 2 MB and advises huge pages. */
#define HUGEMEM_MIN ((size_t)2 << 20)

/* bytes > 0 of uninitialised memory, or NULL when out of memory (or bytes is 0). From
 * HUGEMEM_MIN on, the buffer is 2 MB-aligned, its length rounded up to whole 2 MB, and advised to
 * use transparent huge pages where the kernel allows (advice only: without them it is an
 * ordinary buffer): a fresh buffer is then touched with a few page faults instead of thousands,
 * and products that stream through it miss the TLB less. Smaller buffers come from malloc.
 * Freed with free(). */
void *hugemem_alloc(size_t bytes);

#endif
