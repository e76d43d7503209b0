/* vexp.h -- the exponential over arrays of doubles, four at a time in vector
 * lanes (the softmax of the mixture's q(s) evaluates one exp per frame and
 * cluster; glibc's exp takes them one at a time). */
#ifndef VBMEM_VEXP_H
#define VBMEM_VEXP_H

/* y[i] = exp(x[i]) for i < n; y may be x. Within 1 ulp of glibc's exp for
 * x in [-708, 709.78]; below -708 (exp(x) < 3.4e-308, the end of the normal
 * range) the result is 0, above 709.78 it is +inf; NaN gives NaN. Every
 * element gets the same arithmetic wherever it sits in the array, so the
 * result does not depend on how a loop splits the array. Never fails. */
void vexp_array(long n, const double *x, double *y);

#endif
