/* quant_iq_avx512.c — the grid formats' dots with AVX-512 VNNI (the Makefile
 * adds the AVX-512 flags): quant_iq_body.h over vpdpbusd on 256 bits. */
#include "core/quant/quant_impl.h"

#include <immintrin.h>

#define DOT_S8(w, y) _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8((y), (w)))
#define IQ_TABLE quant_iq_avx512_vec_dot

#include "core/quant/quant_iq_body.h"
