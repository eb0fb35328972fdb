/* quant_iq_avx2.c — the grid formats' dots with AVX2 (the Makefile adds
 * -mavx2 -mfma -mf16c): quant_iq_body.h over maddubs (weights at most 62 in
 * magnitude, so no int16 pair saturates). */
#include "core/quant/quant_impl.h"

#include <immintrin.h>

static inline __m256i iq_dot_s8(__m256i w, __m256i y)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(y, w)), _mm256_set1_epi16(1));
}
#define DOT_S8(w, y) iq_dot_s8((w), (y))
#define IQ_TABLE quant_iq_avx2_vec_dot

#include "core/quant/quant_iq_body.h"
