/* quant_ref_lowbit.c — the scalar reference of the low-bit formats: Q2_K,
 * Q3_K, TQ1_0, TQ2_0 (256-value blocks, dots with Q8_K) and Q1_0, Q2_0,
 * MXFP4, NVFP4 (dots with Q8_0, whose 32-value blocks each of these spans
 * a whole number of).
 *
 * As in quant_ref.c, each format is first a function from (block, value
 * index) to the value's integer code, and the decoder applies the block's
 * scales with the same float operations, in the same order, as ggml's
 * dequantize_row_* (e.g. Q2_K: (d·sc)·q − dmin·m), so a published file
 * decodes to the same bits.  The dots keep everything inside a sub-block an
 * exact integer and apply the float scales per sub-block; only those few
 * products round.  The SIMD kernels (quant_lowbit_body.h) are tested
 * against these, and these against ggml (tests/tools/test_ggml_oracle.sh). */
#include "core/quant/quant_impl.h"
#include "core/quant/quant_ref_loops.h"

const int8_t quant_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* ---- codes ---- */

/* Q2_K, Q3_K, TQ2_0 share one 2-bit layout: value v of a 256-block is bits
 * 2j..2j+1 of qs[32·(v/128) + v%32], j = (v%128)/32. */
static inline int code2(const uint8_t qs[64], int v) { return (qs[32 * (v / 128) + v % 32] >> (2 * ((v % 128) / 32))) & 3; }

/* Q3_K's 6-bit scale of sub-block j (0..15): low 4 bits in the nibbles of
 * scales[0..7] (j < 8 low, else high nibble of j - 8), top 2 bits at 2·(j/4)
 * of scales[8 + j%4]; the scale is that minus 32. */
static int q3k_scale(const uint8_t *blk, int j)
{
    const uint8_t *s = ((const block_q3_K *)(const void *)blk)->scales;
    int lo = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
    return (lo | ((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
}

/* Q3_K's code of value v = 16j + k: the 2 low bits less 4 unless hmask has
 * the high bit (bit 4·(v/128) + (v%128)/32 of hmask[v % 32]). */
static int q3k_code(const uint8_t *blk, int j, int k)
{
    const block_q3_K *b = (const void *)blk;
    int v = 16 * j + k;
    int hbit = (b->hmask[v % 32] >> (4 * (v / 128) + (v % 128) / 32)) & 1;
    return code2(b->qs, v) - (hbit ? 0 : 4);
}

/* TQ1_0's base-3 digit n (0 = most significant) of byte q, as ggml extracts
 * it: the byte holds ceil(x·256/243) for the 5-digit number x, so after
 * multiplying by 3^n (mod 256) the digit is the top of 3·q. */
static inline int trit(uint8_t q, int n)
{
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    uint8_t shifted = (uint8_t)(q * pow3[n]);
    return ((uint16_t)shifted * 3) >> 8;
}

/* Value v of a TQ1_0 block: 0..159 digit v/32 of qs[v%32], 160..239 digit
 * (v-160)/16 of qs[32 + v%16], 240..255 digit (v-240)/4 of qh[v%4]. */
static inline int tq1_digit(const block_tq1_0 *b, int v)
{
    if (v < 160) return trit(b->qs[v % 32], v / 32);
    if (v < 240) return trit(b->qs[32 + (v - 160) % 16], (v - 160) / 16);
    return trit(b->qh[(v - 240) % 4], (v - 240) / 4);
}

/* The ternary weights -1, 0, +1 (TQ2_0's code 3 is +2) of value k of the
 * one 256-value sub-block (j = 0). */
static int tq1_code(const uint8_t *blk, int j, int k) { return tq1_digit((const block_tq1_0 *)(const void *)blk, k) - 1; }
static int tq2_code(const uint8_t *blk, int j, int k) { return code2(((const block_tq2_0 *)(const void *)blk)->qs, k) - 1; }

static inline int q1_bit(const uint8_t qs[16], int j) { return (qs[j / 8] >> (j % 8)) & 1; }
static inline int q2_0_code(const uint8_t qs[16], int j) { return (qs[j / 4] >> (2 * (j % 4))) & 3; }
static inline int fp4_nib(const uint8_t *qs, int j, int half) { return j < half ? qs[j] & 15 : qs[j - half] >> 4; }

/* ---- decoders ---- */

static void q2_K_to_float(const void *src, float *y, int64_t n)
{
    const block_q2_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        float d = quant_half_to_float(b[i].d), dmin = quant_half_to_float(b[i].dmin);
        for (int v = 0; v < QK_K; v++) {
            uint8_t sc = b[i].scales[v / 16];
            float dl = d * (float)(sc & 15), ml = dmin * (float)(sc >> 4);
            y[v] = dl * (float)code2(b[i].qs, v) - ml;
        }
    }
}

/* Q3_K (16 sub-blocks of 16), TQ1_0, TQ2_0 (one scale): quant_ref_loops.h. */
static void q3_K_to_float(const void *b, float *y, int64_t n)
{
    quant_decode_scaled(b, y, n, sizeof(block_q3_K), offsetof(block_q3_K, d), 16, q3k_scale, q3k_code);
}
static void tq1_0_to_float(const void *b, float *y, int64_t n)
{
    quant_decode_scaled(b, y, n, sizeof(block_tq1_0), offsetof(block_tq1_0, d), QK_K, quant_scale_one, tq1_code);
}
static void tq2_0_to_float(const void *b, float *y, int64_t n)
{
    quant_decode_scaled(b, y, n, sizeof(block_tq2_0), offsetof(block_tq2_0, d), QK_K, quant_scale_one, tq2_code);
}

static void q1_0_to_float(const void *src, float *y, int64_t n)
{
    const block_q1_0 *b = src;
    for (int64_t i = 0; i < n / QK1_0; i++, y += QK1_0) {
        float d = quant_half_to_float(b[i].d);
        for (int j = 0; j < QK1_0; j++) y[j] = q1_bit(b[i].qs, j) ? d : -d;
    }
}

static void q2_0_to_float(const void *src, float *y, int64_t n)
{
    const block_q2_0 *b = src;
    for (int64_t i = 0; i < n / QK2_0; i++, y += QK2_0) {
        float d = quant_half_to_float(b[i].d);
        for (int j = 0; j < QK2_0; j++) y[j] = (float)(q2_0_code(b[i].qs, j) - 1) * d;
    }
}

static void mxfp4_to_float(const void *src, float *y, int64_t n)
{
    const block_mxfp4 *b = src;
    for (int64_t i = 0; i < n / QK_SMALL; i++, y += QK_SMALL) {
        float d = quant_e8m0_half(b[i].e);
        for (int j = 0; j < 32; j++) y[j] = (float)quant_mxfp4_values[fp4_nib(b[i].qs, j, 16)] * d;
    }
}

static void nvfp4_to_float(const void *src, float *y, int64_t n)
{
    const block_nvfp4 *b = src;
    for (int64_t i = 0; i < n / QK_NVFP4; i++, y += QK_NVFP4) {
        for (int s = 0; s < 4; s++) {
            float d = quant_ue4m3_half(b[i].d[s]);
            for (int j = 0; j < 16; j++) y[16 * s + j] = (float)quant_mxfp4_values[fp4_nib(b[i].qs + 8 * s, j, 8)] * d;
        }
    }
}

/* ---- dots with Q8_K ---- */

static void dot_q2_K(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_q2_K *x = vx;
    const block_q8_K *y = vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumq = 0, summ = 0;
        for (int j = 0; j < 16; j++) {
            int dq = 0;
            for (int v = 16 * j; v < 16 * j + 16; v++) dq += code2(x[i].qs, v) * y[i].qs[v];
            sumq += (x[i].scales[j] & 15) * dq;
            summ += (x[i].scales[j] >> 4) * y[i].bsums[j];
        }
        sum += y[i].d * quant_half_to_float(x[i].d) * (float)sumq - y[i].d * quant_half_to_float(x[i].dmin) * (float)summ;
    }
    *s = sum;
}

static void dot_q3_K(int64_t n, float *s, const void *x, const void *y)
{
    *s = quant_dot_scaled(n, x, sizeof(block_q3_K), offsetof(block_q3_K, d), 16, q3k_scale, q3k_code, y);
}
static void dot_tq1_0(int64_t n, float *s, const void *x, const void *y)
{
    *s = quant_dot_scaled(n, x, sizeof(block_tq1_0), offsetof(block_tq1_0, d), QK_K, quant_scale_one, tq1_code, y);
}
static void dot_tq2_0(int64_t n, float *s, const void *x, const void *y)
{
    *s = quant_dot_scaled(n, x, sizeof(block_tq2_0), offsetof(block_tq2_0, d), QK_K, quant_scale_one, tq2_code, y);
}

/* ---- dots with Q8_0: one scale per 32 activations ---- */

/* Q1_0 and Q2_0: an fp16 d first, then qk codes; Q8_0 block k of the
 * activations meets values 32k..32k+31 of the weight block. */
QUANT_INLINE float dot_d_q8_0(int64_t n, const void *vx, size_t bsize, int qk, quant_blk_int_fn w, const block_q8_0 *y)
{
    const uint8_t *b = vx;
    float sum = 0;
    for (int64_t i = 0; i < n / qk; i++, b += bsize) {
        float d = quant_half_at(b);
        for (int k = 0; k < qk / QK_SMALL; k++) {
            const block_q8_0 *yk = &y[i * (qk / QK_SMALL) + k];
            int sumi = 0;
            for (int j = 0; j < 32; j++) sumi += w(b, 32 * k + j) * yk->qs[j];
            sum += (float)sumi * (d * quant_half_to_float(yk->d));
        }
    }
    return sum;
}

static int q1_0_weight(const uint8_t *blk, int j) { return q1_bit(((const block_q1_0 *)(const void *)blk)->qs, j) ? 1 : -1; }
static int q2_0_weight(const uint8_t *blk, int j) { return q2_0_code(((const block_q2_0 *)(const void *)blk)->qs, j) - 1; }

static void dot_q1_0(int64_t n, float *s, const void *x, const void *y)
{
    *s = dot_d_q8_0(n, x, sizeof(block_q1_0), QK1_0, q1_0_weight, y);
}
static void dot_q2_0(int64_t n, float *s, const void *x, const void *y)
{
    *s = dot_d_q8_0(n, x, sizeof(block_q2_0), QK2_0, q2_0_weight, y);
}

static void dot_mxfp4(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_mxfp4 *x = vx;
    const block_q8_0 *y = vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_SMALL; i++) {
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += quant_mxfp4_values[fp4_nib(x[i].qs, j, 16)] * y[i].qs[j];
        sum += (float)sumi * (quant_e8m0_half(x[i].e) * quant_half_to_float(y[i].d));
    }
    *s = sum;
}

/* NVFP4: sub-blocks 2k and 2k+1 meet Q8_0 block k (values 0..15, 16..31). */
static void dot_nvfp4(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_nvfp4 *x = vx;
    const block_q8_0 *y = vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_NVFP4; i++) {
        for (int k = 0; k < 2; k++) {
            const block_q8_0 *yk = &y[2 * i + k];
            float part = 0;
            for (int h = 0; h < 2; h++) {
                const int sb = 2 * k + h;
                int sumi = 0;
                for (int j = 0; j < 16; j++)
                    sumi += quant_mxfp4_values[fp4_nib(x[i].qs + 8 * sb, j, 8)] * yk->qs[16 * h + j];
                part += (float)sumi * quant_ue4m3_half(x[i].d[sb]);
            }
            sum += part * quant_half_to_float(yk->d);
        }
    }
    *s = sum;
}

/* ---- tables ---- */

const quant_to_float_fn quant_lowbit_to_float[QT_COUNT] = {
    [QT_Q2_K] = q2_K_to_float,   [QT_Q3_K] = q3_K_to_float, [QT_TQ1_0] = tq1_0_to_float, [QT_TQ2_0] = tq2_0_to_float,
    [QT_Q1_0] = q1_0_to_float,   [QT_Q2_0] = q2_0_to_float, [QT_MXFP4] = mxfp4_to_float, [QT_NVFP4] = nvfp4_to_float,
};

const quant_vec_dot_fn quant_lowbit_vec_dot[QT_COUNT] = {
    [QT_Q2_K] = dot_q2_K, [QT_Q3_K] = dot_q3_K, [QT_TQ1_0] = dot_tq1_0, [QT_TQ2_0] = dot_tq2_0,
    [QT_Q1_0] = dot_q1_0, [QT_Q2_0] = dot_q2_0, [QT_MXFP4] = dot_mxfp4, [QT_NVFP4] = dot_nvfp4,
};
