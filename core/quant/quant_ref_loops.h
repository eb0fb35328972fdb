/* quant_ref_loops.h — the block loops the scalar reference files share
 * (quant_ref.c, quant_ref_lowbit.c).
 *
 * Many formats differ only in where a value's integer code and its
 * sub-block's integer scale are stored; the loop that turns them into a
 * decoded row, or into a dot with Q8_K, is the same.  Each loop is written
 * once here over a function that reads a code and one that reads a scale;
 * QUANT_INLINE makes those functions constants in every caller, so each
 * format still gets its own tight loop (no call per value).  The float
 * operations and their order are the ones each format's decoder and dot had
 * before: the integers are exact, and only the per-block products round. */
#ifndef NB_QUANT_REF_LOOPS_H
#define NB_QUANT_REF_LOOPS_H

#include "core/quant/quant_impl.h"

#include <stddef.h> /* offsetof, for the callers' d_off */

/* An integer read from the bytes of one block: sub-block j's scale, or a
 * value's code (quant_blk_int_fn: value v of the block; quant_sub_int_fn:
 * value k of sub-block j, which keeps the index arithmetic of a format laid
 * out by sub-blocks out of the inner loop). */
typedef int (*quant_blk_int_fn)(const uint8_t *blk, int v);
typedef int (*quant_sub_int_fn)(const uint8_t *blk, int j, int k);

/* The fp16 at p (a block's scale field, wherever the block keeps it). */
static inline float quant_half_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return quant_half_to_float(h);
}

/* A scale of 1, for the formats with one scale per block (TQ1_0, TQ2_0). */
static inline int quant_scale_one(const uint8_t *blk, int j) { return 1; }

/* ---- 256-value blocks of value d · scale(j) · code(j, k) for value k of
 * sub-block j (sub values each), d the fp16 at d_off: Q6_K, IQ4_XS, Q3_K;
 * TQ1_0 and TQ2_0 with one sub-block of 256 and scale 1 ---- */

QUANT_INLINE void quant_decode_scaled(const void *src, float *y, int64_t n, size_t bsize, size_t d_off, int sub,
                                      quant_blk_int_fn scale, quant_sub_int_fn code)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += bsize, y += QK_K) {
        float d = quant_half_at(b + d_off);
        for (int j = 0; j < QK_K / sub; j++) {
            float dl = d * (float)scale(b, j);
            for (int k = 0; k < sub; k++) y[sub * j + k] = dl * (float)code(b, j, k);
        }
    }
}

/* Per block Σ_j scale(j) · Σ_k code(j, k)·y as an integer, then the fp32
 * activation scale times the fp16 weight scale. */
QUANT_INLINE float quant_dot_scaled(int64_t n, const void *vx, size_t bsize, size_t d_off, int sub,
                                    quant_blk_int_fn scale, quant_sub_int_fn code, const block_q8_K *y)
{
    const uint8_t *b = vx;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++, b += bsize) {
        int sumi = 0;
        for (int j = 0; j < QK_K / sub; j++) {
            int dq = 0;
            for (int k = 0; k < sub; k++) dq += code(b, j, k) * y[i].qs[sub * j + k];
            sumi += scale(b, j) * dq;
        }
        sum += y[i].d * quant_half_at(b + d_off) * (float)sumi;
    }
    return sum;
}

#endif
