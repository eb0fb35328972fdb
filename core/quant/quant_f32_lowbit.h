/* quant_f32_lowbit.h — the fp32 decoders of the low-bit formats (Q2_K,
 * Q3_K, TQ1_0, TQ2_0, IQ4_XS, NVFP4, Q1_0, Q2_0) for quant_f32_body.h,
 * which includes it (compiled twice, VW 8 and 16, like the body).
 *
 * Q2_K, Q3_K and TQ2_0 share quant_ref_lowbit.c's 2-bit layout: the 32
 * bytes of half h of qs, shifted right by 2j, hold values 128h + 32j ..
 * + 31, two 16-value sub-blocks.  So one load gives 128 codes and each
 * 16-value piece takes its sub-block's scale, formed as the reference forms
 * it (Q2_K: d·(sc & 15) and dmin·(sc >> 4), then dl·q − ml; Q3_K and TQ2_0:
 * dl = d·scale, then dl·code), so the values are the reference's bits;
 * the others likewise follow their reference decoder's float operations. */
#ifndef NB_QUANT_F32_LOWBIT_H
#define NB_QUANT_F32_LOWBIT_H

/* The codes 0..3 of values 16p .. 16p + 15 of a 256-block in the 2-bit
 * layout (h = p/8, j = (p%8)/2); p is also the 16-value sub-block. */
static inline __m128i f32_crumbs16(const uint8_t qs[64], int p)
{
    const int h = p / 8, j = (p % 8) / 2;
    __m128i bytes = _mm_loadu_si128((const __m128i *)(qs + 32 * h + 16 * (p % 2)));
    return _mm_and_si128(_mm_srli_epi16(bytes, 2 * j), _mm_set1_epi8(3));
}

static const float *dec_q2_K(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    const block_q2_K *b = (const block_q2_K *)(const void *)w + i / QK_K;
#if VW == 16
    /* The 16 dl and ml of a block at once, then per 16 values the table dl · q − ml
     * (quant_f32_body.h's permute decoders); vpermps reads 4 bits of each
     * lane, the code and the next one, so the table repeats by 4. */
    const __m512 lv = _mm512_setr_ps(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3);
    for (int64_t k = 0; k < len / QK_K; k++) {
        float dl[16] __attribute__((aligned(64))), ml[16] __attribute__((aligned(64)));
        const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)b[k].scales));
        _mm512_store_ps(dl, _mm512_mul_ps(_mm512_set1_ps(f32_half(b[k].d)),
                                          _mm512_cvtepi32_ps(_mm512_and_si512(sc, _mm512_set1_epi32(15)))));
        _mm512_store_ps(ml, _mm512_mul_ps(_mm512_set1_ps(f32_half(b[k].dmin)), _mm512_cvtepi32_ps(_mm512_srli_epi32(sc, 4))));
        for (int h = 0; h < 2; h++)
            for (int odd = 0; odd < 2; odd++) {
                const __m512i q = f32_bytes16(b[k].qs + 32 * h + 16 * odd);
                for (int j = 0; j < 4; j++) {
                    const int p = 8 * h + 2 * j + odd;
                    const __m512 T = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(dl[p]), lv), _mm512_set1_ps(ml[p]));
                    _mm512_storeu_ps(buf + QK_K * k + 16 * p, _mm512_permutexvar_ps(_mm512_srli_epi32(q, 2 * j), T));
                }
            }
    }
#else
    for (int64_t k = 0; k < len / QK_K; k++) {
        const float d = f32_half(b[k].d), dmin = f32_half(b[k].dmin);
        for (int p = 0; p < 16; p++) {
            const uint8_t sc = b[k].scales[p];
            put16_kq(f32_crumbs16(b[k].qs, p), d * (float)(sc & 15), dmin * (float)(sc >> 4), buf + QK_K * k + 16 * p);
        }
    }
#endif
    return buf;
}

/* Q3_K's 6-bit scale of sub-block j, less 32 (quant_ref_lowbit.c's q3k_scale). */
static inline int f32_q3k_scale(const uint8_t s[12], int j)
{
    int lo = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
    return (lo | ((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
}

/* Q3_K's code: the 2 low bits, less 4 unless hmask[l] has bit 4h + j
 * (value 128h + 32j + l), i.e. crumb + 4·hbit − 4. */
static const float *dec_q3_K(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    const block_q3_K *b = (const block_q3_K *)(const void *)w + i / QK_K;
#if VW == 16
    /* The 16 scales of a block at once (f32_q3k_scale in lanes), then per 16
     * values the table dl · (c − 4), c = crumb + 4·hbit, by a permute. */
    const __m512 lv = _mm512_setr_ps(-4, -3, -2, -1, 0, 1, 2, 3, -4, -3, -2, -1, 0, 1, 2, 3);
    const __m128i pick_lo = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
    const __m128i pick_hi = _mm_setr_epi8(8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11);
    const __m512i sh_lo = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4);
    const __m512i sh_hi = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
    for (int64_t k = 0; k < len / QK_K; k++) {
        float dl[16] __attribute__((aligned(64)));
        uint8_t s12[16] = {0};
        memcpy(s12, b[k].scales, 12);
        const __m128i sv = _mm_loadu_si128((const __m128i *)s12);
        const __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(sv, pick_lo)), sh_lo),
                                            _mm512_set1_epi32(15));
        const __m512i hi = _mm512_and_si512(_mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(sv, pick_hi)), sh_hi),
                                            _mm512_set1_epi32(3));
        const __m512i sc = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
        _mm512_store_ps(dl, _mm512_mul_ps(_mm512_set1_ps(f32_half(b[k].d)), _mm512_cvtepi32_ps(sc)));
        for (int h = 0; h < 2; h++)
            for (int odd = 0; odd < 2; odd++) {
                const __m512i q = f32_bytes16(b[k].qs + 32 * h + 16 * odd);
                const __m128i hm = _mm_loadu_si128((const __m128i *)(b[k].hmask + 16 * odd));
                for (int j = 0; j < 4; j++) {
                    const int p = 8 * h + 2 * j + odd;
                    __m512i c = _mm512_and_si512(_mm512_srli_epi32(q, 2 * j), _mm512_set1_epi32(3));
                    c = _mm512_mask_or_epi32(c, _mm_test_epi8_mask(hm, _mm_set1_epi8((char)(1 << (4 * h + j)))), c,
                                             _mm512_set1_epi32(4));
                    _mm512_storeu_ps(buf + QK_K * k + 16 * p,
                                     _mm512_permutexvar_ps(c, _mm512_mul_ps(_mm512_set1_ps(dl[p]), lv)));
                }
            }
    }
#else
    const __m128i four = _mm_set1_epi8(4);
    for (int64_t k = 0; k < len / QK_K; k++) {
        const float d = f32_half(b[k].d);
        for (int p = 0; p < 16; p++) {
            const int h = p / 8, j = (p % 8) / 2;
            const __m128i hm = _mm_loadu_si128((const __m128i *)(b[k].hmask + 16 * (p % 2)));
            const __m128i bit = _mm_set1_epi8((char)(1 << (4 * h + j)));
            const __m128i hi = _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(hm, bit), bit), four);
            const __m128i q = _mm_sub_epi8(_mm_or_si128(f32_crumbs16(b[k].qs, p), hi), four);
            put16_signed(q, d * (float)f32_q3k_scale(b[k].scales, p), buf + QK_K * k + 16 * p);
        }
    }
#endif
    return buf;
}

/* TQ2_0: (code − 1) times d·1 (the reference's one scale of 1). */
static const float *dec_tq2_0(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    const block_tq2_0 *b = (const block_tq2_0 *)(const void *)w + i / QK_K;
    const __m128i one = _mm_set1_epi8(1);
    for (int64_t k = 0; k < len / QK_K; k++) {
        const float dl = f32_half(b[k].d) * 1.0f;
#if VW == 16 /* one table (float)(code − 1) · dl a block, repeated by 4 as Q2_K's */
        const __m512 T = _mm512_mul_ps(_mm512_setr_ps(-1, 0, 1, 2, -1, 0, 1, 2, -1, 0, 1, 2, -1, 0, 1, 2), _mm512_set1_ps(dl));
        for (int h = 0; h < 2; h++)
            for (int odd = 0; odd < 2; odd++) {
                const __m512i q = f32_bytes16(b[k].qs + 32 * h + 16 * odd);
                for (int j = 0; j < 4; j++)
                    _mm512_storeu_ps(buf + QK_K * k + 16 * (8 * h + 2 * j + odd), _mm512_permutexvar_ps(_mm512_srli_epi32(q, 2 * j), T));
            }
        (void)one;
#else
        for (int p = 0; p < 16; p++) put16_signed(_mm_sub_epi8(f32_crumbs16(b[k].qs, p), one), dl, buf + QK_K * k + 16 * p);
#endif
    }
    return buf;
}

/* IQ4_XS: sub-block j's dl = d·(ls − 32), then dl · T[nib] (IQ4_NL's nibbles). */
static const float *dec_iq4_xs(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    const block_iq4_xs *b = (const block_iq4_xs *)(const void *)w + i / QK_K;
#if VW == 16
    const __m512 levels = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)quant_iq4nl_values)));
#else
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4nl_values));
#endif
    for (int64_t k = 0; k < len / QK_K; k++) {
        const float d = f32_half(b[k].d);
        for (int j = 0; j < 8; j++) {
            const int ls = (((b[k].scales_l[j / 2] >> (4 * (j % 2))) & 15) | ((b[k].scales_h >> (2 * j)) & 3) << 4) - 32;
#if VW == 16 /* the table (float)T[nib] · dl, by a permute (quant_f32_body.h) */
            put32_perm(b[k].qs + 16 * j, _mm512_mul_ps(levels, _mm512_set1_ps(d * (float)ls)), buf + QK_K * k + 32 * j);
#else
            put32_signed(_mm256_shuffle_epi8(table, nibbles32(b[k].qs + 16 * j)), d * (float)ls, buf + QK_K * k + 32 * j);
#endif
        }
    }
    return buf;
}

/* NVFP4: four 16-value sub-blocks, each a UE4M3 scale and 8 bytes of
 * nibbles (low nibbles values 0..7): (float)E[nib] · scale. */
static const float *dec_nvfp4(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    const block_nvfp4 *b = (const block_nvfp4 *)(const void *)w + i / QK_NVFP4;
    const __m128i table = _mm_loadu_si128((const __m128i *)quant_mxfp4_values), m15 = _mm_set1_epi8(15);
    for (int64_t k = 0; k < len / QK_NVFP4; k++)
        for (int s = 0; s < 4; s++) {
            const __m128i bytes = _mm_loadl_epi64((const __m128i *)(b[k].qs + 8 * s));
            const __m128i nib = _mm_unpacklo_epi64(_mm_and_si128(bytes, m15), _mm_and_si128(_mm_srli_epi16(bytes, 4), m15));
            put16_signed(_mm_shuffle_epi8(table, nib), quant_ue4m3_half(b[k].d[s]), buf + QK_NVFP4 * k + 16 * s);
        }
    return buf;
}

/* TQ1_0: base-3 digits, five a byte (quant_avx2_bytes.h's lb_trits), as
 * (digit − 1) times d·1. */
static const float *dec_tq1_0(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const block_tq1_0 *b = (const block_tq1_0 *)(const void *)w + i / QK_K;
    const __m256i one = _mm256_set1_epi8(1);
    for (int64_t k = 0; k < len / QK_K; k++) {
        const float dl = f32_half(b[k].d) * 1.0f;
        float *y = buf + QK_K * k;
        const __m256i q32 = load256(b[k].qs);
        for (int d = 0; d < 5; d++) /* values 32d .. 32d + 31 */
            put32_signed(_mm256_sub_epi8(lb_trits(q32, _mm256_set1_epi8((char)pow3[d])), one), dl, y + 32 * d);
        __m256i v[3], m[3];
        tq1_tail(b[k].qs + 32, b[k].qh, v, m);
        for (int j = 0; j < 3; j++) put32_signed(_mm256_sub_epi8(lb_trits(v[j], m[j]), one), dl, y + 160 + 32 * j);
    }
    return buf;
}

/* Q1_0: bit j of the 16 bytes set: d, clear: −d (a select, as the reference). */
static const float *dec_q1_0(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    const block_q1_0 *b = (const block_q1_0 *)(const void *)w + i / QK1_0;
    for (int64_t k = 0; k < len / QK1_0; k++) {
        const float d = f32_half(b[k].d);
        float *y = buf + QK1_0 * k;
#if VW == 16
        const __m512 pos = _mm512_set1_ps(d), neg = _mm512_set1_ps(-d);
        for (int g = 0; g < QK1_0 / 16; g++)
            _mm512_storeu_ps(y + 16 * g, _mm512_mask_blend_ps((__mmask16)quant_u16(b[k].qs + 2 * g), neg, pos));
#else
        const __m256 pos = _mm256_set1_ps(d), neg = _mm256_set1_ps(-d);
        for (int g = 0; g < QK1_0 / 8; g++)
            _mm256_storeu_ps(y + 8 * g, _mm256_blendv_ps(neg, pos, _mm256_castsi256_ps(f32_lanes_of_bits(b[k].qs[g]))));
#endif
    }
    return buf;
}

/* Q2_0: value j is bits 2(j%4).. of qs[j/4], (float)(code − 1) · d; a
 * vector's values are one 32-bit (VW 16) or 16-bit word, each lane shifting
 * it by its own 2j. */
static const float *dec_q2_0(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    const block_q2_0 *b = (const block_q2_0 *)(const void *)w + i / QK2_0;
    for (int64_t k = 0; k < len / QK2_0; k++) {
        const float d = f32_half(b[k].d);
        float *y = buf + QK2_0 * k;
#if VW == 16
        /* The table (float)(code − 1) · d (quant_f32_body.h's permute
         * decoders); vpermps reads the low 4 bits of each lane, the code and
         * the next one, so the table repeats by 4. */
        const __m512i shifts = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        const __m512 T = _mm512_mul_ps(_mm512_setr_ps(-1, 0, 1, 2, -1, 0, 1, 2, -1, 0, 1, 2, -1, 0, 1, 2), _mm512_set1_ps(d));
        for (int g = 0; g < QK2_0 / 16; g++) {
            const __m512i c = _mm512_srlv_epi32(_mm512_set1_epi32((int)quant_u32(b[k].qs + 4 * g)), shifts);
            _mm512_storeu_ps(y + 16 * g, _mm512_permutexvar_ps(c, T));
        }
#else
        const __m256i shifts = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
        for (int g = 0; g < QK2_0 / 8; g++) {
            __m256i c = _mm256_srlv_epi32(_mm256_set1_epi32((int)quant_u16(b[k].qs + 2 * g)), shifts);
            c = _mm256_sub_epi32(_mm256_and_si256(c, _mm256_set1_epi32(3)), _mm256_set1_epi32(1));
            _mm256_storeu_ps(y + 8 * g, _mm256_mul_ps(_mm256_cvtepi32_ps(c), _mm256_set1_ps(d)));
        }
#endif
    }
    return buf;
}

#endif
