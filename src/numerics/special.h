/* special.h -- special functions of the models (digamma, log Gamma), written here so that no
 * libm global such as signgam is touched. */
#ifndef VBMEM_SPECIAL_H
#define VBMEM_SPECIAL_H

/* digamma(x) for x > 0 (recurrence up to x >= 6, then the asymptotic series; about 1e-15
 * relative). x <= 0 or NaN gives a meaningless or NaN result: callers pass x > 0. Never fails. */
double special_digamma(double x);

/* log Gamma(x) for x > 0 (recurrence up to x >= 7, then Stirling's series). x <= 0 or NaN gives
 * a meaningless or NaN result: callers pass x > 0. Never fails. */
double special_lgamma(double x);

#endif
