/* quant_lowbit_avx512.c — the low-bit formats' dots with AVX-512 VNNI (the
 * Makefile adds the AVX-512 flags): quant_lowbit_body.h over vpdpbusd on
 * 256 bits (AVX-512VL), which sums four byte products straight into int32. */
#include "core/quant/quant_impl.h"

#include <immintrin.h>

#define DOT_U8(u, y) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (y))
#define DOT_S8(w, y) _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8((y), (w)))
#define LOWBIT_TABLE quant_lowbit_avx512_vec_dot

#include "core/quant/quant_lowbit_body.h"
