/* quant_f32_avx2.c — the fp32-activation dot kernels with 8-lane FMA (the
 * Makefile adds -mavx2 -mfma -mf16c).  The kernels are quant_f32_body.h. */
#include "core/quant/quant_impl.h"

#include <immintrin.h>

#define VW 8
typedef __m256 vacc;
#define ACC_ZERO _mm256_setzero_ps()
#define ACC_FMA(a, w, x) _mm256_fmadd_ps(_mm256_loadu_ps(w), _mm256_loadu_ps(x), (a))
#define ACC_ADD(a, b) _mm256_add_ps((a), (b))
#define F32_TABLE quant_avx2_dot_f32
#define ACC_SUM(a) avx2_hsum(a) /* quant_avx2_bytes.h, which the body includes */

#include "core/quant/quant_f32_body.h"
