/* quant_impl.h — what the files of core/quant/ share and nobody else sees.
 *
 * The block structs are ggml's byte layouts (quant_blocks.h, shared with the
 * CUDA code), so a pointer into a mapped GGUF tensor can be read as an array
 * of them.  Each kernel file exports one table per role, indexed by type
 * number; quant.c picks from them once.
 *
 * Value of an element, as ggml decodes it (d, dmin, m: fp16 unless noted):
 *   Q4_0   d * (nib - 8)                 Q5_0  d * (nib | hbit<<4) - 16*d
 *   Q5_1   d * q5 + m                    Q8_0  d * q
 *   Q4_K   d*sc[j] * nib - dmin*m[j]     Q5_K  same with 5-bit q, j = 32-value sub-block
 *   Q6_K   d*sc[j] * (q6 - 32), j = 16-value sub-block, sc int8
 *   IQ4_NL d * T[nib]                    IQ4_XS d*(ls[j]-32) * T[nib], j = 32-value sub-block
 *   Q8_1   d * q (s = d * sum q)         Q8_K  d * q (d is fp32; bsums = sums of 16 q)
 *   Q4_1   d * nib + m
 *   Q2_K   d*(sc[j]&15) * q2 - dmin*(sc[j]>>4), j = 16-value sub-block
 *   Q3_K   d*(s6[j]-32) * (q2 - 4*!hbit), j = 16-value sub-block
 *   TQ1_0, TQ2_0  (q - 1) * d, q a base-3 digit (TQ1_0) or 2-bit code (TQ2_0)
 *   Q1_0   bit ? d : -d                  Q2_0  (q2 - 1) * d
 *   MXFP4  E[nib] * 2^(e-128)            NVFP4 E[nib] * ue4m3(s[j])/2, j = 16-value sub-block
 *   IQ*    scale * grid point * signs (quant_ref_iq.c)
 * where T is the 16-entry non-linear table quant_iq4nl_values and E the
 * doubled E2M1 values quant_mxfp4_values. */
#ifndef NB_QUANT_IMPL_H
#define NB_QUANT_IMPL_H

#include "core/quant/quant.h"
#include "core/quant/quant_blocks.h"

#include <string.h>

/* For the generic loops that take a per-format function: inlined into each
 * caller, the function becomes a constant and each kernel one tight loop. */
#define QUANT_INLINE static inline __attribute__((always_inline))

/* The IQ4_NL / IQ4_XS levels (ggml's kvalues_iq4nl): denser near zero, where
 * most weights are.  Sorted, so nearest-level search can bisect. */
extern const int8_t quant_iq4nl_values[16];

/* The E2M1 values doubled (ggml's kvalues_mxfp4): 0, ±0.5, ±1, ±1.5, ±2,
 * ±3, ±4, ±6 times 2; MXFP4's and NVFP4's scales carry the half. */
extern const int8_t quant_mxfp4_values[16];

/* MXFP4's E8M0 scale halved, 2^(e-128), exact (ggml's e8m0_to_fp32_half:
 * e = 0, 1 are the fp32 subnormals 2^-128, 2^-127; e = 255 is not NaN). */
static inline float quant_e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* NVFP4's UE4M3 scale halved, as ggml decodes it: bits 6..3 the exponent
 * (bias 7), bits 2..0 the mantissa, bit 7 ignored; 0 and 0x7f are zero. */
static inline float quant_ue4m3_half(uint8_t x)
{
    if (x == 0 || x == 0x7f) return 0.0f;
    int e = (x >> 3) & 15, m = x & 7;
    return e ? (float)(8 + m) * 0x1p-11f * (float)(1u << e) : (float)m * 0x1p-10f; /* exact */
}

/* The IQ codebooks (quant_grids.c), filled once by quant_grids_init (which
 * quant_init calls): a point of 8 bytes (IQ2: magnitudes; IQ1: -1, 0, +1)
 * or 4 bytes (IQ3), element j in byte j.  quant_ksigns[i]: the 7 sign bits
 * i (bit j set: element j negative) with the 8th set to make their count
 * even (IQ2_XXS, IQ2_XS, IQ3_XXS store 7). */
extern uint64_t quant_iq2xxs_grid[256], quant_iq2xs_grid[512], quant_iq2s_grid[1024], quant_iq1s_grid[2048];
/* The IQ1 points as the SIMD kernels' unsigned weights, 8·(e + 1): 0, 8, 16
 * for e = -1, 0, +1 (they add the shift and take 8·Σy off separately). */
extern uint64_t quant_iq1s_grid8[2048];
extern uint32_t quant_iq3xxs_grid[256], quant_iq3s_grid[512];
extern uint8_t quant_ksigns[128];
void quant_grids_init(void);
/* The grids as stored: level indices (2 bits an element for IQ2/IQ1, 3 for
 * IQ3), ascending, and the levels (for the quantizers' searches). */
extern const uint16_t quant_iq2xxs_codes[256], quant_iq2xs_codes[512], quant_iq2s_codes[1024], quant_iq1s_codes[2048];
extern const uint16_t quant_iq3xxs_codes[256], quant_iq3s_codes[512];
extern const uint8_t quant_iq2_levels[3], quant_iq3xxs_levels[8], quant_iq3s_levels[8];
extern const int8_t quant_iq1_levels[3];
#define QUANT_IQ1_DELTA 0.125f /* IQ1_S, IQ1_M: every point moves by ±delta */

/* IQ1_M's fp16 d, kept in the top nibbles of its four 16-bit scale words
 * (for the SIMD kernels; quant_ref_iq.c reads it word by word). */
/* Unaligned little-endian loads of the block formats' packed fields (memcpy: no alignment or aliasing assumed). */
static inline uint16_t quant_u16(const void *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
static inline uint32_t quant_u32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint64_t quant_u64(const void *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint16_t quant_iq1m_half(const uint8_t scales[8])
{
    uint64_t w;
    memcpy(&w, scales, 8);
    return (uint16_t)((w >> 12 & 0x000f) | (w >> 24 & 0x00f0) | (w >> 36 & 0x0f00) | (w >> 48 & 0xf000));
}

/* fp16 -> fp32, exact.  Inline because scalar decoders call it per block. */
static inline float quant_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, bits;
    uint32_t exp = h & 0x7c00, man = h & 0x3ff;
    if (exp == 0x7c00) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) { /* zero or subnormal: man * 2^-24 is exact in fp32 */
        float f = (float)man * 0x1p-24f;
        memcpy(&bits, &f, 4);
        bits |= sign;
    } else { /* rebias the exponent from 15 to 127 */
        bits = sign | (((uint32_t)(h & 0x7fff) << 13) + (112u << 23));
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block.  Bytes
 * 0..3 hold scales 0..3 in their low 6 bits, bytes 4..7 mins 0..3; bytes 8..11
 * hold scale j (low nibble) and min j (high nibble) of sub-blocks 4..7, whose
 * top two bits sit in the spare top bits of bytes j-4 (scale) and j (min). */
static inline void quant_kscale_unpack(const uint8_t s[12], int j, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* The same for all eight sub-blocks at once, four bytes per word, without
 * branches: w[0] = scales 0..3, w[1] = scales 4..7, w[2] = mins 0..3,
 * w[3] = mins 4..7 (byte k of a word is sub-block k of its four). */
static inline void quant_kscale_words(const uint8_t s[12], uint32_t w[4])
{
    uint32_t lo, mid, hi;
    memcpy(&lo, s, 4);
    memcpy(&mid, s + 4, 4);
    memcpy(&hi, s + 8, 4);
    w[0] = lo & 0x3f3f3f3f;
    w[1] = (hi & 0x0f0f0f0f) | ((lo >> 2) & 0x30303030); /* top bits 6-7 of bytes 0..3 -> bits 4-5 */
    w[2] = mid & 0x3f3f3f3f;
    w[3] = ((hi >> 4) & 0x0f0f0f0f) | ((mid >> 2) & 0x30303030);
}

/* Σ_j w[j] · (Σ of the 32 activation codes of sub-block j), from the Q8_K
 * bsums (sums of 16): how the K-quant dots fold in per-sub-block mins
 * (Q4_K, Q5_K) or the bias of unsigned codes (IQ4_XS) without a second pass
 * over the codes. */
static inline int quant_bsums32_dot(const int w[8], const int16_t bsums[16])
{
    int sum = 0;
    for (int j = 0; j < 8; j++) sum += w[j] * (bsums[2 * j] + bsums[2 * j + 1]);
    return sum;
}

/* Σ_j sc[j] · bsums[j] over Q6_K's sixteen 16-value sub-blocks. */
static inline int quant_bsums16_dot(const int8_t sc[16], const int16_t bsums[16])
{
    int sum = 0;
    for (int j = 0; j < 16; j++) sum += sc[j] * bsums[j];
    return sum;
}

/* Kernel tables, indexed by enum quant_type; NULL where a file has none
 * (quant.c merges the files of each role). */
extern const quant_to_float_fn quant_ref_to_float[QT_COUNT];
extern const quant_from_float_fn quant_ref_from_float[QT_COUNT];
extern const quant_vec_dot_fn quant_ref_vec_dot[QT_COUNT];
extern const quant_vec_dot_fn quant_avx2_vec_dot[QT_COUNT];
extern const quant_vec_dot_fn quant_avx512_vec_dot[QT_COUNT];
/* The low-bit formats (Q2_K, Q3_K, TQ1_0, TQ2_0, Q1_0, Q2_0, MXFP4, NVFP4,
 * Q4_1): quant_ref_lowbit.c, quant_encode_lowbit.c, quant_lowbit_body.h. */
extern const quant_to_float_fn quant_lowbit_to_float[QT_COUNT];
extern const quant_from_float_fn quant_lowbit_from_float[QT_COUNT];
extern const quant_vec_dot_fn quant_lowbit_vec_dot[QT_COUNT];
extern const quant_vec_dot_fn quant_lowbit_avx2_vec_dot[QT_COUNT];
extern const quant_vec_dot_fn quant_lowbit_avx512_vec_dot[QT_COUNT];
/* The grid formats (IQ2_*, IQ3_*, IQ1_*): quant_ref_iq.c, quant_encode_iq.c, quant_iq_avx2.c,
 * quant_iq_avx512.c. */
extern const quant_to_float_fn quant_iq_to_float[QT_COUNT];
extern const quant_from_float_fn quant_iq_from_float[QT_COUNT];
extern const quant_vec_dot_fn quant_iq_vec_dot[QT_COUNT];
extern const quant_vec_dot_fn quant_iq_avx2_vec_dot[QT_COUNT];
extern const quant_vec_dot_fn quant_iq_avx512_vec_dot[QT_COUNT];
/* fp32-activation dots (quant_f32_body.h with quant_f32_grid.h and quant_f32_lowbit.h); no scalar table: see
 * quant_dot_f32. */
extern const quant_dot_f32_fn quant_avx2_dot_f32[QT_COUNT];
extern const quant_dot_f32_fn quant_avx512_dot_f32[QT_COUNT];

/* The activation quantizers (Q8_0, Q8_1, Q8_K) on AVX-512, byte-identical to
 * the scalar ones (quant_act_avx512.c); quant_init makes them the traits'
 * from_float where AVX-512 runs. */
extern const quant_from_float_fn quant_avx512_act_from_float[QT_COUNT];

/* Weight quantizers (quant_ref_encode.c), referenced by quant_ref.c's table. */
void quant_encode_q4_0(const float *x, void *dst, int64_t n);
void quant_encode_q5_0(const float *x, void *dst, int64_t n);
void quant_encode_q4_1(const float *x, void *dst, int64_t n);
void quant_encode_q5_1(const float *x, void *dst, int64_t n);
void quant_encode_q2_K(const float *x, void *dst, int64_t n);
void quant_encode_q3_K(const float *x, void *dst, int64_t n);
void quant_encode_q4_K(const float *x, void *dst, int64_t n);
void quant_encode_q5_K(const float *x, void *dst, int64_t n);
void quant_encode_q6_K(const float *x, void *dst, int64_t n);
void quant_encode_iq4_nl(const float *x, void *dst, int64_t n);
void quant_encode_iq4_xs(const float *x, void *dst, int64_t n);
/* 256 2-bit codes into the K-quants' 64-byte layout (Q2_K, Q3_K, TQ2_0). */
void quant_pack_crumbs(const uint8_t L[QK_K], uint8_t qs[64]);

#endif
