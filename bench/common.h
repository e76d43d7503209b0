/* common.h -- owns the small helpers every benchmark program shares: a monotonic clock, the
 * median of a sample, and strict integer parsing of command-line values. */
#ifndef VBMEM_BENCH_COMMON_H
#define VBMEM_BENCH_COMMON_H

/* Seconds on the monotonic clock (for differences only). Never fails. */
double bench_now_s(void);

/* Median of the n >= 1 values in v; sorts v in place. */
double bench_median(double *v, int n);

/* Parse s as a base-10 integer in [lo, hi] into *out. Returns 0, or -1 (nothing
 * written) when s is not entirely such an integer. */
int bench_parse_int(const char *s, long lo, long hi, int *out);

#endif
