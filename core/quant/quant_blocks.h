/* quant_blocks.h — ggml's block layouts, written once for C and CUDA.
 *
 * The one idea: every byte offset and block size anywhere in the tree (the
 * CPU kernels of core/quant, the CUDA decoders of gpu-worker/cuda) comes
 * from these structs through sizeof and offsetof, so a layout is stated in
 * exactly one place.  The header is plain: fixed-width integer members, no
 * unions, no CUDA or C11-only types, so C11 and CUDA C++ both compile it,
 * and the static asserts pin each size to ggml's (published GGUF files are
 * read as they are, a pointer into a mapped tensor as an array of these).
 * Every member is a byte array or a naturally aligned 16/32-bit field: there
 * is no padding.  fp16 fields are uint16_t bit patterns.
 *
 * The value each layout encodes is described in quant_impl.h (CPU) beside
 * the decoders; the type numbers are enum quant_type (quant.h). */
#ifndef NB_QUANT_BLOCKS_H
#define NB_QUANT_BLOCKS_H

#include <stdint.h>

#ifdef __cplusplus
#define QUANT_BLOCK_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define QUANT_BLOCK_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#define QK_SMALL 32 /* values per block of the 32-value formats */
#define QK_K 256    /* values per super-block of the K-quants, the IQ and the TQ formats */
#define QK_NVFP4 64 /* NVFP4: four sub-blocks of 16 */
#define QK1_0 128   /* Q1_0 */
#define QK2_0 64    /* Q2_0 */

typedef struct { uint16_t d; uint8_t qs[16]; } block_q4_0;
typedef struct { uint16_t d, m; uint8_t qs[16]; } block_q4_1;
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } block_q5_0;
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } block_q5_1;
typedef struct { uint16_t d; int8_t qs[32]; } block_q8_0;
typedef struct { uint16_t d, s; int8_t qs[32]; } block_q8_1;
typedef struct { uint16_t d; uint8_t qs[16]; } block_iq4_nl;

/* Q2_K: 16 sub-blocks of 16, each with a 4-bit scale (low nibble of
 * scales[j]) and 4-bit min (high nibble); qs: 2-bit codes.  Q3_K: 16
 * sub-blocks of 16 with 6-bit signed scales packed in scales[12], 2 low bits
 * in qs and the third bit in hmask. */
typedef struct { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; } block_q2_K;
typedef struct { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; } block_q3_K;
/* Q4_K / Q5_K: 8 sub-blocks of 32.  scales[12] holds eight 6-bit scales and
 * eight 6-bit mins (see quant_kscale_unpack).  qs: 4 chunks of 32 bytes; the
 * low nibbles of chunk c are values 64c..64c+31, the high nibbles 64c+32..+63.
 * Q5_K's fifth bit of value 64c+l is bit 2c of qh[l], of value 64c+32+l bit 2c+1. */
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } block_q4_K;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } block_q5_K;
/* Q6_K: two halves of 128 values; half h uses ql[64h..], qh[32h..]:
 *   value l    = ql[l]    & 15 | (qh[l] >> 0 & 3) << 4     (l < 32)
 *   value l+32 = ql[l+32] & 15 | (qh[l] >> 2 & 3) << 4
 *   value l+64 = ql[l]    >> 4 | (qh[l] >> 4 & 3) << 4
 *   value l+96 = ql[l+32] >> 4 | (qh[l] >> 6 & 3) << 4
 * and scales[i] applies to values 16i..16i+15. */
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } block_q6_K;
/* IQ4_XS: the 6-bit scale of sub-block j is (scales_l[j/2] >> 4*(j%2) & 15) |
 * (scales_h >> 2j & 3) << 4, biased by 32.  qs: 16 bytes per sub-block, low
 * nibbles values 0..15, high nibbles 16..31 (as IQ4_NL). */
typedef struct { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; } block_iq4_xs;
typedef struct { float d; int8_t qs[256]; int16_t bsums[16]; } block_q8_K;

/* One fp16 scale d per block, then codes packed LSB first: Q1_0 one bit a
 * value (set: +d, clear: -d), Q2_0 two bits (code c: (c - 1)·d). */
typedef struct { uint16_t d; uint8_t qs[QK1_0 / 8]; } block_q1_0;
typedef struct { uint16_t d; uint8_t qs[QK2_0 / 4]; } block_q2_0;
/* MXFP4: an E8M0 exponent e, 32 E2M1 codes (nibbles: low = values 0..15,
 * high = 16..31).  NVFP4: four UE4M3 scales, one per 16 values; sub-block s
 * has its codes in qs[8s..8s+7] (low nibbles values 0..7, high 8..15). */
typedef struct { uint8_t e; uint8_t qs[16]; } block_mxfp4;
typedef struct { uint8_t d[4]; uint8_t qs[32]; } block_nvfp4;
/* Ternary (codes 0, 1, 2 for -1, 0, +1 times d): TQ1_0 packs five base-3
 * digits a byte (qs, 240 values) and four in each qh byte (16 values); TQ2_0
 * two bits a value (code 3 = +2). */
typedef struct { uint8_t qs[48]; uint8_t qh[4]; uint16_t d; } block_tq1_0;
typedef struct { uint8_t qs[64]; uint16_t d; } block_tq2_0;
/* The IQ formats: groups of 8 (IQ2, IQ1) or 4 (IQ3) values are an index into
 * a grid of points (quant_grids.c), with signs and 32- or 16-value scales. */
typedef struct { uint16_t d; uint16_t qs[32]; } block_iq2_xxs;
typedef struct { uint16_t d; uint16_t qs[32]; uint8_t scales[8]; } block_iq2_xs;
typedef struct { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t scales[8]; } block_iq2_s;
typedef struct { uint16_t d; uint8_t qs[96]; } block_iq3_xxs;
typedef struct { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t signs[32]; uint8_t scales[4]; } block_iq3_s;
typedef struct { uint16_t d; uint8_t qs[32]; uint16_t qh[8]; } block_iq1_s;
typedef struct { uint8_t qs[32]; uint8_t qh[16]; uint8_t scales[8]; } block_iq1_m; /* fp16 d: top nibbles of scales */

QUANT_BLOCK_ASSERT(sizeof(block_q4_0) == 18, "q4_0 layout");
QUANT_BLOCK_ASSERT(sizeof(block_q4_1) == 20, "q4_1 layout");
QUANT_BLOCK_ASSERT(sizeof(block_q5_0) == 22, "q5_0 layout");
QUANT_BLOCK_ASSERT(sizeof(block_q5_1) == 24, "q5_1 layout");
QUANT_BLOCK_ASSERT(sizeof(block_q8_0) == 34, "q8_0 layout");
QUANT_BLOCK_ASSERT(sizeof(block_q8_1) == 36, "q8_1 layout");
QUANT_BLOCK_ASSERT(sizeof(block_iq4_nl) == 18, "iq4_nl layout");
QUANT_BLOCK_ASSERT(sizeof(block_q2_K) == 84, "q2_K layout");
QUANT_BLOCK_ASSERT(sizeof(block_q3_K) == 110, "q3_K layout");
QUANT_BLOCK_ASSERT(sizeof(block_q4_K) == 144, "q4_K layout");
QUANT_BLOCK_ASSERT(sizeof(block_q5_K) == 176, "q5_K layout");
QUANT_BLOCK_ASSERT(sizeof(block_q6_K) == 210, "q6_K layout");
QUANT_BLOCK_ASSERT(sizeof(block_iq4_xs) == 136, "iq4_xs layout");
QUANT_BLOCK_ASSERT(sizeof(block_q8_K) == 292, "q8_K layout");
QUANT_BLOCK_ASSERT(sizeof(block_q1_0) == 18, "q1_0 layout");
QUANT_BLOCK_ASSERT(sizeof(block_q2_0) == 18, "q2_0 layout");
QUANT_BLOCK_ASSERT(sizeof(block_mxfp4) == 17, "mxfp4 layout");
QUANT_BLOCK_ASSERT(sizeof(block_nvfp4) == 36, "nvfp4 layout");
QUANT_BLOCK_ASSERT(sizeof(block_tq1_0) == 54, "tq1_0 layout");
QUANT_BLOCK_ASSERT(sizeof(block_tq2_0) == 66, "tq2_0 layout");
QUANT_BLOCK_ASSERT(sizeof(block_iq2_xxs) == 66, "iq2_xxs layout");
QUANT_BLOCK_ASSERT(sizeof(block_iq2_xs) == 74, "iq2_xs layout");
QUANT_BLOCK_ASSERT(sizeof(block_iq2_s) == 82, "iq2_s layout");
QUANT_BLOCK_ASSERT(sizeof(block_iq3_xxs) == 98, "iq3_xxs layout");
QUANT_BLOCK_ASSERT(sizeof(block_iq3_s) == 110, "iq3_s layout");
QUANT_BLOCK_ASSERT(sizeof(block_iq1_s) == 50, "iq1_s layout");
QUANT_BLOCK_ASSERT(sizeof(block_iq1_m) == 56, "iq1_m layout");

#endif
