/* quant_f32_avx512.c — the fp32-activation dot kernels with 16-lane FMA (the
 * Makefile adds the AVX-512 flags).  Most decoders are the same 256-bit code
 * as in quant_f32_avx2.c (quant_f32_body.h); the 4-, 5- and 2-bit formats
 * (#if VW == 16 there) decode by permutes of a per-block table of floats and
 * IQ2_XS 64 values a step (quant_f32_grid512.h); the dot runs at twice the width. */
#include "core/quant/quant_impl.h"

#include <immintrin.h>

#define VW 16
typedef __m512 vacc;
#define ACC_ZERO _mm512_setzero_ps()
#define ACC_FMA(a, w, x) _mm512_fmadd_ps(_mm512_loadu_ps(w), _mm512_loadu_ps(x), (a))
#define ACC_ADD(a, b) _mm512_add_ps((a), (b))
#define ACC_SUM(a) _mm512_reduce_add_ps(a)
#define F32_TABLE quant_avx512_dot_f32

#include "core/quant/quant_f32_body.h"
