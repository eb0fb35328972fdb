/* quant_lowbit_avx512.c — the low-bit formats' dots with AVX-512 VNNI (the
 * Makefile adds the AVX-512 flags): quant_lowbit_body.h over vpdpbusd on
 * 256 bits (AVX-512VL), which sums four byte products straight into int32,
 * and, where the 512-bit registers and the mask registers pay, kernels of
 * this file: Q3_K and TQ1_0, 64 values a step.
 *
 * Q3_K: the codes q2 + 4·hbit go in unsigned (the high bits as a mask
 * register per step), the -4 comes off through Σ sc_j·bsums_j, and the 16
 * scales multiply the step sums with vpdpwssd (iq_block_sum of
 * quant_iq512.h, which the grid formats use for their per-16-value scales).
 * TQ1_0: the five base-3 digits of a byte are the tops of 3·(q·3^n mod 256);
 * per step the 64 bytes are multiplied by their 3^n (two vpmullw, even and
 * odd bytes), and the top of 3·t is [t ≥ 86] + [t ≥ 171], two compares into
 * mask registers. */
#include "core/quant/quant_impl.h"

#include <immintrin.h>

#include "core/quant/quant_iq512.h"

static inline __m512i lb_half_pair(__m256i a) { return _mm512_broadcast_i64x4(a); }

/* The 16 scales of a Q3_K block (6 bits, minus 32) as int8: low 4 bits in
 * the nibbles of s[0..7] (j < 8 low), top 2 bits at 2·(j/4) of s[8 + j%4]. */
static inline __m128i q3k_scales(const uint8_t s[12])
{
    __m128i a = _mm_loadl_epi64((const __m128i *)s);
    __m128i lo = _mm_and_si128(_mm_unpacklo_epi64(a, _mm_srli_epi16(a, 4)), _mm_set1_epi8(15));
    uint32_t top;
    memcpy(&top, s + 8, 4);
    __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32((int)top), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
}

/* Step m (values 64m..64m+63) takes bit pairs j = 2(m%2), j + 1 of qs[32h..]
 * (h = m/2), one per 32 values, and bits 4h + j, 4h + j + 1 of hmask. */
static void dot_q3_K(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_q3_K *x = vx;
    const block_q8_K *y = vy;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m512i hm = lb_half_pair(_mm256_loadu_si256((const __m256i *)x[i].hmask));
        const __m256i sc16 = _mm256_cvtepi8_epi16(q3k_scales(x[i].scales));
        __m512i p[4];
        _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++) {
            const int h = m / 2, j = 2 * (m % 2);
            const __m512i q = lb_half_pair(_mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h)));
            const __m512i shift = _mm512_mask_set1_epi16(_mm512_set1_epi16((short)(2 * j)), 0xffff0000, (short)(2 * j + 2));
            const __m512i bit = _mm512_mask_set1_epi8(_mm512_set1_epi8((char)(1 << (4 * h + j))), 0xffffffff00000000ull,
                                                      (char)(2 << (4 * h + j)));
            __m512i u = _mm512_and_si512(_mm512_srlv_epi16(q, shift), _mm512_set1_epi8(3));
            u = _mm512_mask_add_epi8(u, _mm512_test_epi8_mask(hm, bit), u, _mm512_set1_epi8(4)); /* bit 2 is clear */
            p[m] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, _mm512_loadu_si512(y[i].qs + 64 * m));
        }
        /* the -4 of every code: 4·Σ sc_j·bsums_j */
        __m256i bias = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[i].bsums), sc16);
        __m512i sum = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(bias, 2)));
        sum = iq_block_sum(sum, p, _mm512_zextsi256_si512(sc16), 0);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(y[i].d * _cvtsh_ss(x[i].d)), acc);
    }
    *s = _mm512_reduce_add_ps(acc);
}

/* Byte j of x times byte j of m, mod 256: the even bytes are the low halves
 * of 16-bit products, the odd ones the high halves of their products with
 * the even bytes cleared. */
static inline __m512i lb_mul_bytes(__m512i x, __m512i m)
{
    const __m512i lo = _mm512_mullo_epi16(x, m);
    const __m512i hi = _mm512_mullo_epi16(_mm512_and_si512(x, _mm512_set1_epi16((short)0xff00)), _mm512_srli_epi16(m, 8));
    return _mm512_ternarylogic_epi32(_mm512_set1_epi16(0x00ff), lo, hi, IQ_SELECT);
}

/* The top of 3·t for each byte t: the digit 0, 1 or 2. */
static inline __m512i lb_trit_top(__m512i t)
{
    __m512i d = _mm512_maskz_mov_epi8(_mm512_cmpge_epu8_mask(t, _mm512_set1_epi8(86)), _mm512_set1_epi8(1));
    return _mm512_mask_mov_epi8(d, _mm512_cmpge_epu8_mask(t, _mm512_set1_epi8((char)171)), _mm512_set1_epi8(2));
}

/* The 16-byte pieces a, b, c, d in order. */
static inline __m512i lb_bytes4(__m128i a, __m128i b, __m128i c, __m128i d)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(b, a)), _mm256_set_m128i(d, c), 1);
}

/* TQ1_0: values 0..159 are digit v/32 of qs[v%32], 160..239 digit (v-160)/16
 * of qs[32 + v%16], 240..255 digit (v-240)/4 of qh[v%4] (quant_ref_lowbit.c);
 * so the steps are [Q·1, Q·3], [Q·9, Q·27], [Q·81, R·1, R·3] and [R·9, R·27,
 * R·81, qh·(1, 3, 9, 27 per 4 bytes)], Q = qs[0..31], R = qs[32..47]. */
static void dot_tq1_0(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_tq1_0 *x = vx;
    const block_q8_K *y = vy;
    const __m128i p1 = _mm_set1_epi8(1), p3 = _mm_set1_epi8(3), p9 = _mm_set1_epi8(9), p27 = _mm_set1_epi8(27),
                  p81 = _mm_set1_epi8(81);
    const __m512i mult2 = lb_bytes4(p81, p81, p1, p3),
                  mult3 = lb_bytes4(p9, p27, p81, _mm_setr_epi8(1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27));
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)x[i].qs);
        const __m128i r = _mm_loadu_si128((const __m128i *)(x[i].qs + 32));
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        /* [Q, 3Q] by adds, times 9 as 8x + x (the shift's carries into the next byte cleared) */
        const __m512i qq = _mm512_broadcast_i64x4(q);
        const __m512i t0 = _mm512_mask_add_epi8(qq, 0xffffffff00000000ull, qq, _mm512_add_epi8(qq, qq));
        const __m512i t1 = _mm512_add_epi8(_mm512_and_si512(_mm512_slli_epi16(t0, 3), _mm512_set1_epi8((char)0xf8)), t0);
        const __m512i qrr = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_broadcastsi128_si256(r), 1);
        const __m512i rrrh = _mm512_inserti32x4(_mm512_broadcast_i32x4(r), _mm_set1_epi32((int)qh), 3);
        const __m512i t[4] = {t0, t1, lb_mul_bytes(qrr, mult2), lb_mul_bytes(rrrh, mult3)};
        /* Σ (digit - 1)·y: the -1 as -Σy, from the bsums */
        __m256i sy = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[i].bsums), _mm256_set1_epi16(1));
        __m512i sum = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), sy));
        _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++)
            sum = _mm512_dpbusd_epi32(sum, lb_trit_top(t[m]), _mm512_loadu_si512(y[i].qs + 64 * m));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(y[i].d * _cvtsh_ss(x[i].d)), acc);
    }
    *s = _mm512_reduce_add_ps(acc);
}

#define DOT_U8(u, y) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (y))
#define DOT_S8(w, y) _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8((y), (w)))
#define LOWBIT_TABLE quant_lowbit_avx512_vec_dot
#define LOWBIT_OWN_Q3_K_TQ1_0 /* the two above replace the body's */

#include "core/quant/quant_lowbit_body.h"
