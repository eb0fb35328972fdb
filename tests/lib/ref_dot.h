/* ref_dot.h — the exact dot the quant tests hold every kernel to, and the
 * magnitude their tolerance scales with (tests/core/test_quant.c,
 * tests/ggml/ggml_oracle.c). */
#ifndef NB_TEST_REF_DOT_H
#define NB_TEST_REF_DOT_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* Σ w·y in double over decoded values, and in *mag Σ|w·y|, plus max|w|·Σ|y|
 * for blocked formats: the two parts of a value (a scale and a min) can be
 * larger than the value, and max|w|·Σ|y| bounds them. */
static inline double reference_dot(const float *w, const float *y, int64_t n, bool blocked, double *mag)
{
    double sum = 0, abs_wy = 0, abs_y = 0, max_w = 0;
    for (int64_t i = 0; i < n; i++) {
        sum += (double)w[i] * y[i];
        abs_wy += fabs((double)w[i] * y[i]);
        abs_y += fabs(y[i]);
        max_w = fmax(max_w, fabs(w[i]));
    }
    *mag = abs_wy + (blocked ? max_w * abs_y : 0);
    return sum;
}

#endif
