/* quant_encode_lowbit.c — weight quantizers of the one-scale low-bit
 * formats: TQ1_0, TQ2_0, Q1_0, Q2_0 (integer levels times an fp16 d),
 * MXFP4 and NVFP4 (E2M1 levels times a power of two / a UE4M3 scale).
 * (Q2_K and Q3_K, whose scales are two-level, share the K-quant machinery
 * of quant_ref_encode.c.)
 *
 * The idea is the one of quant_ref_encode.c: a few candidate scales, each
 * value to its nearest level, the least error as the format decodes it.
 * For the integer-level formats a candidate is "the block's extreme lands
 * exactly on level l" for every non-zero level l, each followed by the
 * least-squares scale of the codes it gave; the one that puts the extreme
 * on the smaller-magnitude end level is the safe one (nothing clips: every
 * value within half a step).  Every block written is a valid block of its
 * format: codes in range, finite scales. */
#include "core/quant/quant_impl.h"

#include <float.h>
#include <math.h>

/* Largest |x| and the signed value that has it. */
static float extreme(const float *x, int n, float *signed_max)
{
    float amax = 0;
    *signed_max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), *signed_max = x[i];
    return amax;
}

/* ---- one fp16 scale over the integer levels lo..hi (lo < 0 < hi) ---- */

struct int_levels {
    int lo, hi;
};

/* Error of fp16 scale d16 on x (codes = level - lo into L), as decoded:
 * value (float)level * d. */
static float int_try(const float *x, int n, struct int_levels lv, uint16_t d16, uint8_t *L, float *refit)
{
    float d = quant_half_to_float(d16), id = d != 0 ? 1.0f / d : 0.0f, err = 0, sxl = 0, sll = 0;
    for (int i = 0; i < n; i++) {
        float l = fmaxf((float)lv.lo, fminf((float)lv.hi, nearbyintf(x[i] * id)));
        if (!(l == l)) l = 0; /* NaN input */
        L[i] = (uint8_t)((int)l - lv.lo);
        float e = x[i] - l * d;
        err += e * e, sxl += x[i] * l, sll += l * l;
    }
    *refit = sll > 0 ? sxl / sll : d;
    return err;
}

/* The best fp16 scale for n <= 256 values; codes into L. */
static uint16_t int_scale(const float *x, int n, struct int_levels lv, uint8_t *L)
{
    uint8_t cand[QK_K];
    float xe, refit, best = FLT_MAX;
    uint16_t best_d = 0;
    memset(L, -lv.lo, (size_t)n); /* all zero, if nothing beats it */
    if (extreme(x, n, &xe) == 0) return 0;
    for (int l = lv.lo; l <= lv.hi; l++) {
        if (l == 0) continue;
        uint16_t d16 = quant_f32_to_f16(xe / (float)l);
        for (int pass = 0; pass < 2; pass++) { /* the candidate, then its refit */
            float err = int_try(x, n, lv, d16, cand, &refit);
            if (err < best) best = err, best_d = d16, memcpy(L, cand, (size_t)n);
            d16 = quant_f32_to_f16(refit);
        }
    }
    return best_d;
}

static const struct int_levels ternary = {-1, 1}, two_bit = {-1, 2};

static void encode_tq1_0(const float *x, void *dst, int64_t n)
{
    static const uint8_t pow3[5] = {81, 27, 9, 3, 1}; /* digit n's weight: digit 0 is the most significant */
    block_tq1_0 *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t L[QK_K];
        b[i].d = int_scale(x, QK_K, ternary, L);
        /* byte = ceil(x·256/243) of the 5-digit base-3 number x (quant_ref_lowbit.c's trit reads it back) */
        uint8_t num[52] = {0};
        for (int v = 0; v < QK_K; v++) {
            int byte, digit;
            if (v < 160) byte = v % 32, digit = v / 32;
            else if (v < 240) byte = 32 + (v - 160) % 16, digit = (v - 160) / 16;
            else byte = 48 + (v - 240) % 4, digit = (v - 240) / 4;
            num[byte] = (uint8_t)(num[byte] + L[v] * pow3[digit]);
        }
        for (int k = 0; k < 48; k++) b[i].qs[k] = (uint8_t)((num[k] * 256 + 242) / 243);
        for (int k = 0; k < 4; k++) b[i].qh[k] = (uint8_t)((num[48 + k] * 256 + 242) / 243);
    }
}

static void encode_tq2_0(const float *x, void *dst, int64_t n)
{
    block_tq2_0 *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t L[QK_K];
        b[i].d = int_scale(x, QK_K, two_bit, L);
        quant_pack_crumbs(L, b[i].qs);
    }
}

static void encode_q2_0(const float *x, void *dst, int64_t n)
{
    block_q2_0 *b = dst;
    for (int64_t i = 0; i < n / QK2_0; i++, x += QK2_0) {
        uint8_t L[QK2_0];
        b[i].d = int_scale(x, QK2_0, two_bit, L);
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int j = 0; j < QK2_0; j++) b[i].qs[j / 4] |= (uint8_t)(L[j] << (2 * (j % 4)));
    }
}

/* Q1_0: the signs are the values' own, and for given signs the least-squares
 * d is the mean of |x| (as ggml's reference quantizer has it). */
static void encode_q1_0(const float *x, void *dst, int64_t n)
{
    block_q1_0 *b = dst;
    for (int64_t i = 0; i < n / QK1_0; i++, x += QK1_0) {
        float sum = 0;
        for (int j = 0; j < QK1_0; j++) sum += fabsf(x[j]);
        float d = sum / QK1_0;
        b[i].d = quant_f32_to_f16(d == d ? d : 0.0f);
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int j = 0; j < QK1_0; j++)
            if (x[j] >= 0) b[i].qs[j / 8] |= (uint8_t)(1 << (j % 8));
    }
}

/* ---- E2M1 values times a scale: MXFP4, NVFP4 ---- */

/* The code (0..15) whose doubled E2M1 value times d is nearest x. */
static int nearest_e2m1(float x, float d)
{
    int best = 0;
    float best_err = fabsf(x);
    for (int k = 1; k < 16; k++) {
        float err = fabsf((float)quant_mxfp4_values[k] * d - x);
        if (err < best_err) best = k, best_err = err;
    }
    return best;
}

/* Codes of n values for scale d (nibbles: value j < n/2 low, else high, of
 * qs[j % (n/2)]); returns the error as decoded. */
static float e2m1_try(const float *x, int n, float d, uint8_t *qs)
{
    float err = 0;
    memset(qs, 0, (size_t)n / 2);
    for (int j = 0; j < n; j++) {
        int k = nearest_e2m1(x[j], d);
        qs[j % (n / 2)] |= (uint8_t)(k << (4 * (j / (n / 2))));
        float e = x[j] - (float)quant_mxfp4_values[k] * d;
        err += e * e;
    }
    return err;
}

/* MXFP4: the exponent that puts the block's largest magnitude in [8, 16)
 * units (ggml's choice; the top value 12 may clip) and its neighbours. */
static void encode_mxfp4(const float *x, void *dst, int64_t n)
{
    block_mxfp4 *b = dst;
    for (int64_t i = 0; i < n / QK_SMALL; i++, x += QK_SMALL) {
        float xe, amax = extreme(x, QK_SMALL, &xe);
        b[i].e = 0;
        memset(b[i].qs, 0, sizeof b[i].qs);
        if (!(amax > 0) || !isfinite(amax)) continue;
        int e0 = (int)floorf(log2f(amax)) - 2 + 127;
        float best = FLT_MAX;
        for (int e = e0 - 1; e <= e0 + 1; e++) {
            if (e < 0 || e > 254) continue;
            uint8_t qs[16];
            float err = e2m1_try(x, QK_SMALL, quant_e8m0_half((uint8_t)e), qs);
            if (err < best) best = err, b[i].e = (uint8_t)e, memcpy(b[i].qs, qs, 16);
        }
    }
}

/* NVFP4: per 16 values, the UE4M3 scale nearest the largest magnitude / 12
 * (the top level) and its neighbours.  Codes 0..0x7e decode in increasing
 * order, so the nearest is found by a scan. */
static void encode_nvfp4(const float *x, void *dst, int64_t n)
{
    block_nvfp4 *b = dst;
    for (int64_t i = 0; i < n / QK_NVFP4; i++) {
        for (int s = 0; s < 4; s++, x += 16) {
            float xe, amax = extreme(x, 16, &xe);
            uint8_t *qs = b[i].qs + 8 * s;
            b[i].d[s] = 0;
            memset(qs, 0, 8);
            if (!(amax > 0) || !isfinite(amax)) continue;
            int c0 = 1;
            for (int c = 1; c <= 0x7e; c++)
                if (fabsf(quant_ue4m3_half((uint8_t)c) - amax / 12) < fabsf(quant_ue4m3_half((uint8_t)c0) - amax / 12)) c0 = c;
            float best = FLT_MAX;
            for (int c = c0 - 1; c <= c0 + 1; c++) {
                if (c < 1 || c > 0x7e) continue;
                uint8_t cand[8];
                float err = e2m1_try(x, 16, quant_ue4m3_half((uint8_t)c), cand);
                if (err < best) best = err, b[i].d[s] = (uint8_t)c, memcpy(qs, cand, 8);
            }
        }
    }
}

const quant_from_float_fn quant_lowbit_from_float[QT_COUNT] = {
    [QT_Q2_K] = quant_encode_q2_K, [QT_Q3_K] = quant_encode_q3_K, [QT_TQ1_0] = encode_tq1_0,
    [QT_TQ2_0] = encode_tq2_0,     [QT_Q1_0] = encode_q1_0,       [QT_Q2_0] = encode_q2_0,
    [QT_MXFP4] = encode_mxfp4,     [QT_NVFP4] = encode_nvfp4,
};
