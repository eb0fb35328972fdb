/* quant_lowbit_avx2.c — the low-bit formats' dots with AVX2 (the Makefile
 * adds -mavx2 -mfma -mf16c): quant_lowbit_body.h over maddubs, whose int16
 * pairs cannot saturate here (codes ≤ 128 in magnitude, activations ≤ 127). */
#include "core/quant/quant_impl.h"

#include <immintrin.h>

static inline __m256i lb_dot_u8(__m256i u, __m256i y)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1));
}
#define DOT_U8(u, y) lb_dot_u8((u), (y))
#define DOT_S8(w, y) lb_dot_u8(_mm256_sign_epi8((w), (w)), _mm256_sign_epi8((y), (w)))
#define LOWBIT_TABLE quant_lowbit_avx2_vec_dot

#include "core/quant/quant_lowbit_body.h"
