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

static inline float acc_sum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#define ACC_SUM(a) acc_sum(a)

#include "core/quant/quant_f32_body.h"
