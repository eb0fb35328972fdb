/* quant_lowbit_body.h — SIMD dots of the low-bit formats (Q2_K, Q3_K,
 * TQ1_0, TQ2_0 against Q8_K; Q1_0, Q2_0, MXFP4, NVFP4 against Q8_0),
 * written once and compiled twice: quant_lowbit_avx2.c and
 * quant_lowbit_avx512.c define, before including it, the one operation that
 * differs, the int8 dot of 32 bytes into 8 int32 lanes (lane k sums bytes
 * 4k..4k+3):
 *   DOT_U8(u, y)   u unsigned codes, y signed activations
 *   DOT_S8(w, y)   w signed weights (|w| moves to the unsigned side, w's
 *                  sign onto y: exact since activation codes are never -128)
 * (AVX2: maddubs + madd; AVX-512: one VNNI vpdpbusd on 256 bits) and the
 * name of the table, LOWBIT_TABLE.  Everything else — unpacking the codes
 * with 256-bit integer ops, the per-sub-block integer scales, the float
 * scales per block — is shared, and follows quant_ref_lowbit.c: each block's
 * integer dot is exact, only its float scales round (FMA in 8 lanes).
 *
 * Codes that are unsigned with a bias (Q2_K's 0..3 and its min, Q3_K's
 * q + 4, the ternary formats' q = value + 1) go in unsigned and their bias
 * comes off through Σy: the Q8_K bsums, or a DOT_U8 with ones for Q8_0.
 *
 * quant_lowbit_avx512.c has its own Q3_K and TQ1_0 on 512 bits and defines
 * LOWBIT_OWN_Q3_K_TQ1_0 to leave these out. */
#ifndef LOWBIT_TABLE
#error "define DOT_U8, DOT_S8 and LOWBIT_TABLE before including quant_lowbit_body.h"
#endif

#include <immintrin.h>

#include "core/quant/quant_avx2_bytes.h"

static inline int lb_hsum_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* Lanes 0..3 scale a, lanes 4..7 scale b: two 16-value sub-blocks in 32 bytes. */
static inline __m256i lb_pair(int a, int b) { return _mm256_setr_epi32(a, a, a, a, b, b, b, b); }

/* Σ of the 256 activation codes of a Q8_K block, from its bsums. */
static inline int lb_bsums_total(const int16_t bsums[16])
{
    return lb_hsum_i32(_mm256_madd_epi16(load256(bsums), _mm256_set1_epi16(1)));
}

/* Bits 2j..2j+1 of each byte of v, j = 0..3. */
static inline __m256i lb_crumbs(__m256i v, int j)
{
    return _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), _mm256_set1_epi8(3));
}

/* ---- Q2_K: value d·(sc&15)·q − dmin·(sc>>4), q the 2-bit code ---- */

static void dot_q2_K(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_q2_K *x = vx;
    const block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    float mins = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i bytes = load256(x[i].qs + 32 * h);
            for (int j = 0; j < 4; j++) { /* values 128h + 32j .. +31: sub-blocks 8h + 2j, 8h + 2j + 1 */
                const uint8_t *sc = x[i].scales + 8 * h + 2 * j;
                __m256i p = DOT_U8(lb_crumbs(bytes, j), load256(y[i].qs + 128 * h + 32 * j));
                sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(p, lb_pair(sc[0] & 15, sc[1] & 15)));
            }
        }
        /* Σ_j (sc_j >> 4) · bsums_j: the mins, in int16 pairs */
        __m128i sc8 = _mm_loadu_si128((const __m128i *)x[i].scales);
        __m256i m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(15)));
        int summ = lb_hsum_i32(_mm256_madd_epi16(m16, load256(y[i].bsums)));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(y[i].d * avx2_half(x[i].d)), acc);
        mins += y[i].d * avx2_half(x[i].dmin) * (float)summ;
    }
    *s = avx2_hsum(acc) - mins;
}

#ifndef LOWBIT_OWN_Q3_K_TQ1_0

/* ---- Q3_K: value d·(s−32)·(q2 + 4·hbit − 4): q2 + 4·hbit goes in unsigned ---- */

static void dot_q3_K(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_q3_K *x = vx;
    const block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sc[16];
        const uint8_t *s12 = x[i].scales;
        for (int j = 0; j < 16; j++) {
            int lo = j < 8 ? s12[j] & 15 : s12[j - 8] >> 4;
            sc[j] = (lo | ((s12[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
        }
        const __m256i hm = load256(x[i].hmask);
        __m256i sumi = _mm256_setzero_si256();
        int bias = 0; /* Σ_j sc_j · 4 · bsums_j */
        for (int h = 0; h < 2; h++) {
            __m256i bytes = load256(x[i].qs + 32 * h);
            for (int j = 0; j < 4; j++) {
                __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), _mm256_set1_epi8(1));
                __m256i u = _mm256_or_si256(lb_crumbs(bytes, j), _mm256_slli_epi16(hb, 2));
                __m256i p = DOT_U8(u, load256(y[i].qs + 128 * h + 32 * j));
                const int k = 8 * h + 2 * j;
                sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(p, lb_pair(sc[k], sc[k + 1])));
                bias += 4 * (sc[k] * y[i].bsums[k] + sc[k + 1] * y[i].bsums[k + 1]);
            }
        }
        sumi = _mm256_sub_epi32(sumi, _mm256_setr_epi32(bias, 0, 0, 0, 0, 0, 0, 0));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(y[i].d * avx2_half(x[i].d)), acc);
    }
    *s = avx2_hsum(acc);
}

#endif

/* ---- TQ2_0, TQ1_0: value (q − 1)·d, q = 0..3 (TQ2_0) or a base-3 digit ---- */

static void dot_tq2_0(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_tq2_0 *x = vx;
    const block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i bytes = load256(x[i].qs + 32 * h);
            for (int j = 0; j < 4; j++)
                sumi = _mm256_add_epi32(sumi, DOT_U8(lb_crumbs(bytes, j), load256(y[i].qs + 128 * h + 32 * j)));
        }
        sumi = _mm256_sub_epi32(sumi, _mm256_setr_epi32(lb_bsums_total(y[i].bsums), 0, 0, 0, 0, 0, 0, 0));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(y[i].d * avx2_half(x[i].d)), acc);
    }
    *s = avx2_hsum(acc);
}

#ifndef LOWBIT_OWN_Q3_K_TQ1_0
static void dot_tq1_0(int64_t n, float *s, const void *vx, const void *vy)
{
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const block_tq1_0 *x = vx;
    const block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
        const __m256i q32 = load256(x[i].qs);
        for (int d = 0; d < 5; d++) /* values 32d .. 32d + 31 */
            sumi = _mm256_add_epi32(sumi, DOT_U8(lb_trits(q32, _mm256_set1_epi8((char)pow3[d])), load256(y[i].qs + 32 * d)));
        __m256i v[3], m[3];
        tq1_tail(x[i].qs + 32, x[i].qh, v, m);
        for (int k = 0; k < 3; k++)
            sumi = _mm256_add_epi32(sumi, DOT_U8(lb_trits(v[k], m[k]), load256(y[i].qs + 160 + 32 * k)));
        sumi = _mm256_sub_epi32(sumi, _mm256_setr_epi32(lb_bsums_total(y[i].bsums), 0, 0, 0, 0, 0, 0, 0));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(y[i].d * avx2_half(x[i].d)), acc);
    }
    *s = avx2_hsum(acc);
}

#endif

/* ---- against Q8_0: Q1_0, Q2_0 (bits LSB first), MXFP4, NVFP4 (E2M1 nibbles) ---- */

/* Σ of a Q8_0 block's 32 codes, in lane 0. */
static inline __m256i lb_sum_y(__m256i yv) { return DOT_U8(_mm256_set1_epi8(1), yv); }

/* 32 bytes, byte j = bit j of the 32-bit word b: 1 or 0. */
static inline __m256i lb_bits(uint32_t b) { return _mm256_srli_epi16(bit4_from_bits(b), 4); }

static void dot_q1_0(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_q1_0 *x = vx;
    const block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK1_0; i++) {
        const float d = avx2_half(x[i].d);
        for (int k = 0; k < QK1_0 / QK_SMALL; k++) {
            const block_q8_0 *yk = &y[i * (QK1_0 / QK_SMALL) + k];
            uint32_t b;
            memcpy(&b, x[i].qs + 4 * k, 4);
            __m256i yv = load256(yk->qs);
            /* Σ ±y = 2·Σ_{bit set} y − Σ y */
            __m256i p = _mm256_sub_epi32(_mm256_slli_epi32(DOT_U8(lb_bits(b), yv), 1), lb_sum_y(yv));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d * avx2_half(yk->d)), acc);
        }
    }
    *s = avx2_hsum(acc);
}

/* Q2_0's 32 codes of values 32k..32k+31 (bytes 8k..8k+7, four codes a byte
 * from bit 0 up), as bytes. */
static inline __m256i lb_q2_0_codes(const uint8_t *qs8)
{
    uint64_t b;
    memcpy(&b, qs8, 8);
    /* byte j of the result looks at byte j/4 */
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi64x((long long)b),
                                    _mm256_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5,
                                                     5, 5, 6, 6, 6, 6, 7, 7, 7, 7));
    const __m256i lo = _mm256_set1_epi32(0x40100401), hi = _mm256_set1_epi32((int)0x80200802);
    __m256i l = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, lo), lo), _mm256_set1_epi8(1));
    __m256i h = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, hi), hi), _mm256_set1_epi8(2));
    return _mm256_or_si256(l, h);
}

static void dot_q2_0(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_q2_0 *x = vx;
    const block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK2_0; i++) {
        const float d = avx2_half(x[i].d);
        for (int k = 0; k < QK2_0 / QK_SMALL; k++) {
            const block_q8_0 *yk = &y[i * (QK2_0 / QK_SMALL) + k];
            __m256i yv = load256(yk->qs);
            __m256i p = _mm256_sub_epi32(DOT_U8(lb_q2_0_codes(x[i].qs + 8 * k), yv), lb_sum_y(yv)); /* code − 1 */
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d * avx2_half(yk->d)), acc);
        }
    }
    *s = avx2_hsum(acc);
}

/* The doubled E2M1 values in both 128-bit lanes, for shuffle lookups. */
static inline __m256i lb_e2m1(void)
{
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_mxfp4_values));
}

static void dot_mxfp4(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_mxfp4 *x = vx;
    const block_q8_0 *y = vy;
    const __m256i table = lb_e2m1();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_SMALL; i++) {
        __m256i w = _mm256_shuffle_epi8(table, nibbles32(x[i].qs));
        __m256i p = DOT_S8(w, load256(y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(quant_e8m0_half(x[i].e) * avx2_half(y[i].d)), acc);
    }
    *s = avx2_hsum(acc);
}

/* NVFP4: Q8_0 block k meets sub-blocks 2k, 2k+1, whose 32 codes are the
 * nibbles of qs[16k..16k+15] in the order lo(0..7), hi(0..7), lo(8..15),
 * hi(8..15); lanes 0..3 then belong to sub-block 2k, 4..7 to 2k+1. */
static void dot_nvfp4(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_nvfp4 *x = vx;
    const block_q8_0 *y = vy;
    const __m256i table = lb_e2m1();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_NVFP4; i++) {
        for (int k = 0; k < 2; k++) {
            const block_q8_0 *yk = &y[2 * i + k];
            __m256i nib = _mm256_permute4x64_epi64(nibbles32(x[i].qs + 16 * k), _MM_SHUFFLE(3, 1, 2, 0));
            __m256i p = DOT_S8(_mm256_shuffle_epi8(table, nib), load256(yk->qs));
            const float dy = avx2_half(yk->d);
            __m256 sc = _mm256_setr_m128(_mm_set1_ps(quant_ue4m3_half(x[i].d[2 * k]) * dy),
                                         _mm_set1_ps(quant_ue4m3_half(x[i].d[2 * k + 1]) * dy));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sc, acc);
        }
    }
    *s = avx2_hsum(acc);
}

const quant_vec_dot_fn LOWBIT_TABLE[QT_COUNT] = {
    [QT_Q2_K] = dot_q2_K, [QT_Q3_K] = dot_q3_K, [QT_TQ1_0] = dot_tq1_0, [QT_TQ2_0] = dot_tq2_0,
    [QT_Q1_0] = dot_q1_0, [QT_Q2_0] = dot_q2_0, [QT_MXFP4] = dot_mxfp4, [QT_NVFP4] = dot_nvfp4,
};
