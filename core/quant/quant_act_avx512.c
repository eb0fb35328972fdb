/* quant_act_avx512.c — the activation quantizers (Q8_0, Q8_1, Q8_K) on
 * AVX-512, for the int8 CPU experts (engine/ffn.h: every activation row is
 * quantized once per request; the scalar ones cost ~10 ns a value, as much
 * as a tenth of a 2-bit expert's dots).
 *
 * The one rule: the same bytes as quant_ref.c's scalar quantizers, for
 * every input (tests/core/test_quant_int8.c compares them), so which ISA ran
 * never shows in a result.  Each step is the scalar one's operation on 16
 * lanes: the block's absolute maximum (NaN lanes ignored, as fmaxf does),
 * the scale through the same scalar fp16 rounding, x·(1/d) in fp32, then
 * Q8_0/Q8_1's roundf (half away from zero: trunc, plus the sign where the
 * exact remainder is ≥ 0.5) or Q8_K's nearbyintf (the current rounding
 * mode), the clamp to ±127 with fminf's NaN rule (a NaN becomes 127), and
 * the integer sums.  Q8_K's signed extreme is the first value of largest
 * magnitude, as the scalar loop's strict `>` keeps it. */
#include <immintrin.h>
#include <string.h>

#include "core/quant/quant_impl.h"

static inline __m512 clamp127(__m512 q)
{
    /* fminf(127, q) is 127 for a NaN q: vminps returns its second operand when one is NaN. */
    return _mm512_max_ps(_mm512_min_ps(q, _mm512_set1_ps(127.0f)), _mm512_set1_ps(-127.0f));
}

/* roundf, exactly: v - trunc(v) is exact for every float. */
static inline __m512 round_away(__m512 v)
{
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(v, t));
    const __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __m512 one = _mm512_or_ps(_mm512_set1_ps(1.0f), _mm512_and_ps(v, _mm512_set1_ps(-0.0f)));
    return _mm512_mask_add_ps(t, up, t, one);
}

/* |x| maximum of n (a multiple of 16) values; NaN lanes never win (vmaxps
 * returns its second operand, the running maximum, when one is NaN). */
static inline float abs_max(const float *x, int n)
{
    __m512 m = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)), m);
    return _mm512_reduce_max_ps(m);
}

/* 16 codes of clamp(round(x·id)) stored at q; returns their sum. */
static inline int codes16(const float *x, float id, bool away, int8_t *q)
{
    __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x), _mm512_set1_ps(id));
    v = clamp127(away ? round_away(v) : _mm512_roundscale_ps(v, _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC));
    const __m512i c = _mm512_cvtps_epi32(v); /* integral already: exact */
    _mm_storeu_si128((__m128i *)q, _mm512_cvtsepi32_epi8(c));
    return _mm512_reduce_add_epi32(c);
}

/* One 32-value block as quant_ref.c's q8_block: its fp16 scale, codes, sum. */
static inline int q8_block32(const float *x, int8_t *q, uint16_t *d16, float *d_out)
{
    const float amax = abs_max(x, 32);
    *d16 = quant_f32_to_f16(amax / 127.0f);
    const float d = quant_half_to_float(*d16), id = d != 0 ? 1.0f / d : 0.0f;
    *d_out = d;
    return codes16(x, id, true, q) + codes16(x + 16, id, true, q + 16);
}

static void q8_0_from_float(const float *x, void *dst, int64_t n)
{
    block_q8_0 *b = dst;
    float d;
    for (int64_t i = 0; i < n / QK_SMALL; i++) q8_block32(x + 32 * i, b[i].qs, &b[i].d, &d);
}

static void q8_1_from_float(const float *x, void *dst, int64_t n)
{
    block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / QK_SMALL; i++) {
        float d;
        const int sum = q8_block32(x + 32 * i, b[i].qs, &b[i].d, &d);
        b[i].s = quant_f32_to_f16(d * (float)sum);
    }
}

static void q8_K_from_float(const float *x, void *dst, int64_t n)
{
    block_q8_K *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        memset(&b[i], 0, sizeof b[i]);
        const float amax = abs_max(x, QK_K);
        if (!(amax > 0)) continue; /* all zeros (or NaNs: the scalar loop's amax stays 0 too) */
        float max = 0;
        for (int v = 0; v < QK_K; v += 16) { /* the first value of that magnitude */
            __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + v)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (hit) {
                max = x[v + __builtin_ctz(hit)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        for (int g = 0; g < 16; g++) b[i].bsums[g] = (int16_t)codes16(x + 16 * g, iscale, false, b[i].qs + 16 * g);
        b[i].d = 1.0f / iscale;
    }
}

const quant_from_float_fn quant_avx512_act_from_float[QT_COUNT] = {
    [QT_Q8_0] = q8_0_from_float,
    [QT_Q8_1] = q8_1_from_float,
    [QT_Q8_K] = q8_K_from_float,
};
