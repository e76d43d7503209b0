/* special.c -- owns the special functions of the models: digamma and log Gamma. */
#include "numerics/special.h"

#include <math.h>

#define SPECIAL_LOG2PI 1.83787706640934548356

double special_digamma(double x)
{
    double r = 0.0, f;

    while (x < 6.0) {
        r -= 1.0 / x;
        x += 1.0;
    }
    f = 1.0 / (x * x);
    return r + log(x) - 0.5 / x
           - f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f / 132))));
}

double special_lgamma(double x)
{
    double r = 0.0, f;

    while (x < 7.0) {
        r -= log(x);
        x += 1.0;
    }
    f = 1.0 / (x * x);
    return r + (x - 0.5) * log(x) - x + 0.5 * SPECIAL_LOG2PI
           + (1.0 / x) * (1.0 / 12 - f * (1.0 / 360 - f * (1.0 / 1260 - f / 1680)));
}
