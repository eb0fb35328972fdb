/* quant_ref.c — the scalar reference: decoders, activation quantizers, dots.
 *
 * Every SIMD kernel is tested against these functions, and these functions
 * are written to read like the format description in quant_impl.h: one loop
 * per block that forms each value's integer code, then applies the block's
 * scales.  The decoders compute each value with the same float operations in
 * the same order as ggml (e.g. Q4_K: (d*sc)*q - dmin*m), so a published file
 * decodes to the same bits here.
 *
 * The dots follow one idea: inside a block everything is an integer
 * (code × activation code), exact in int32; only the per-block scales are
 * float.  So a dot differs from Σ decode(x)·decode(y) only by fp32 rounding
 * of a few products per block.  Q5_1's dot uses Σq of the Q8_1 block computed
 * from its codes, not the fp16 `s` field, for that reason (`s` is rounded).
 *
 * The weight quantizers live in quant_ref_encode.c. */
#include "core/quant/quant_impl.h"
#include "core/quant/quant_ref_loops.h"

#include <math.h>
#include <stddef.h>

const int8_t quant_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                       1,    13,   25,  38,  53,  69,  89,  113};

/* ---- plain floats ---- */

static void f32_to_float(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
static void f32_from_float(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

/* fp16 and bf16 differ only in the scalar conversion: one loop each way,
 * over it. */
typedef float (*half_to_f32_fn)(uint16_t h);
typedef uint16_t (*f32_to_half_fn)(float f);

QUANT_INLINE void halves_to_float(const void *src, float *dst, int64_t n, half_to_f32_fn cvt)
{
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = cvt(h[i]);
}

QUANT_INLINE void halves_from_float(const float *src, void *dst, int64_t n, f32_to_half_fn cvt)
{
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = cvt(src[i]);
}

static void f16_to_float(const void *src, float *dst, int64_t n) { halves_to_float(src, dst, n, quant_half_to_float); }
static void f16_from_float(const float *src, void *dst, int64_t n) { halves_from_float(src, dst, n, quant_f32_to_f16); }
static void bf16_to_float(const void *src, float *dst, int64_t n) { halves_to_float(src, dst, n, quant_bf16_to_f32); }
static void bf16_from_float(const float *src, void *dst, int64_t n) { halves_from_float(src, dst, n, quant_f32_to_bf16); }

/* The float dots accumulate in double: the reference should be the most
 * accurate answer, not the fastest. */
static void dot_f32(int64_t n, float *s, const void *vx, const void *vy)
{
    const float *x = vx, *y = vy;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)x[i] * y[i];
    *s = (float)sum;
}

QUANT_INLINE float dot_halves(int64_t n, const void *vx, const void *vy, half_to_f32_fn cvt)
{
    const uint16_t *x = vx;
    const float *y = vy;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)cvt(x[i]) * y[i];
    return (float)sum;
}

static void dot_f16(int64_t n, float *s, const void *x, const void *y) { *s = dot_halves(n, x, y, quant_half_to_float); }
static void dot_bf16(int64_t n, float *s, const void *x, const void *y) { *s = dot_halves(n, x, y, quant_bf16_to_f32); }

/* ---- integer codes of the 32-value formats ---- */

/* Nibble j (0..31) of 16 bytes: low nibbles are the first half. */
static inline int nib_code(const uint8_t qs[16], int j) { return j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4); }

/* Code of value j (0..31) of a Q5 block: nibble j of qs, fifth bit j of the
 * little-endian 32-bit qh. */
static inline int q5_code(const uint8_t qh[4], const uint8_t qs[16], int j)
{
    uint32_t h;
    memcpy(&h, qh, 4);
    return nib_code(qs, j) | (int)((h >> j) & 1) << 4;
}

/* ---- the 32-value formats whose value is d * w, w an integer ----
 * Q4_0, Q5_0, Q8_0, Q8_1 and IQ4_NL differ only in how value j's integer w
 * is stored; the decoder and the dot with Q8_0 are written once, over a
 * function that reads w from a block.  d is the first field of each. */

static int w_q4_0(const uint8_t *b, int j) { return nib_code(b + 2, j) - 8; }
static int w_q5_0(const uint8_t *b, int j) { return q5_code(b + 2, b + 6, j) - 16; }
static int w_q8_0(const uint8_t *b, int j) { return (int8_t)b[2 + j]; }
static int w_q8_1(const uint8_t *b, int j) { return (int8_t)b[4 + j]; }
static int w_iq4_nl(const uint8_t *b, int j) { return quant_iq4nl_values[nib_code(b + 2, j)]; }

QUANT_INLINE void decode_dw(const void *src, float *y, int64_t n, size_t bsize, quant_blk_int_fn w)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_SMALL; i++, b += bsize, y += QK_SMALL) {
        float d = quant_half_at(b);
        for (int j = 0; j < 32; j++) y[j] = (float)w(b, j) * d;
    }
}

QUANT_INLINE float dot_dw(int64_t n, const void *vx, size_t bsize, quant_blk_int_fn w, const block_q8_0 *y)
{
    const uint8_t *b = vx;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_SMALL; i++, b += bsize) {
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += w(b, j) * y[i].qs[j];
        sum += (float)sumi * (quant_half_at(b) * quant_half_to_float(y[i].d));
    }
    return sum;
}

static void q4_0_to_float(const void *b, float *y, int64_t n) { decode_dw(b, y, n, sizeof(block_q4_0), w_q4_0); }
static void q5_0_to_float(const void *b, float *y, int64_t n) { decode_dw(b, y, n, sizeof(block_q5_0), w_q5_0); }
static void q8_0_to_float(const void *b, float *y, int64_t n) { decode_dw(b, y, n, sizeof(block_q8_0), w_q8_0); }
static void q8_1_to_float(const void *b, float *y, int64_t n) { decode_dw(b, y, n, sizeof(block_q8_1), w_q8_1); }
static void iq4_nl_to_float(const void *b, float *y, int64_t n) { decode_dw(b, y, n, sizeof(block_iq4_nl), w_iq4_nl); }

static void dot_q4_0(int64_t n, float *s, const void *x, const void *y)
{
    *s = dot_dw(n, x, sizeof(block_q4_0), w_q4_0, y);
}
static void dot_q5_0(int64_t n, float *s, const void *x, const void *y)
{
    *s = dot_dw(n, x, sizeof(block_q5_0), w_q5_0, y);
}
static void dot_q8_0(int64_t n, float *s, const void *x, const void *y)
{
    *s = dot_dw(n, x, sizeof(block_q8_0), w_q8_0, y);
}
static void dot_iq4_nl(int64_t n, float *s, const void *x, const void *y)
{
    *s = dot_dw(n, x, sizeof(block_iq4_nl), w_iq4_nl, y);
}

/* ---- Q4_1, Q5_1: value d * q + m (d, m first); dots with Q8_1 ---- */

static int c_q4_1(const uint8_t *b, int j) { return nib_code(b + offsetof(block_q4_1, qs), j); }
static int c_q5_1(const uint8_t *b, int j) { return q5_code(b + offsetof(block_q5_1, qh), b + offsetof(block_q5_1, qs), j); }

QUANT_INLINE void decode_affine(const void *src, float *y, int64_t n, size_t bsize, quant_blk_int_fn code)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_SMALL; i++, b += bsize, y += QK_SMALL) {
        float d = quant_half_at(b), m = quant_half_at(b + 2);
        for (int j = 0; j < 32; j++) y[j] = (float)code(b, j) * d + m;
    }
}

QUANT_INLINE float dot_affine(int64_t n, const void *vx, size_t bsize, quant_blk_int_fn code, const block_q8_1 *y)
{
    const uint8_t *b = vx;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_SMALL; i++, b += bsize) {
        int sumi = 0, sumy = 0;
        for (int j = 0; j < 32; j++) {
            sumi += code(b, j) * y[i].qs[j];
            sumy += y[i].qs[j];
        }
        float dy = quant_half_to_float(y[i].d);
        sum += (float)sumi * (quant_half_at(b) * dy) + (float)sumy * (quant_half_at(b + 2) * dy);
    }
    return sum;
}

static void q4_1_to_float(const void *b, float *y, int64_t n) { decode_affine(b, y, n, sizeof(block_q4_1), c_q4_1); }
static void q5_1_to_float(const void *b, float *y, int64_t n) { decode_affine(b, y, n, sizeof(block_q5_1), c_q5_1); }
static void dot_q4_1(int64_t n, float *s, const void *x, const void *y)
{
    *s = dot_affine(n, x, sizeof(block_q4_1), c_q4_1, y);
}
static void dot_q5_1(int64_t n, float *s, const void *x, const void *y)
{
    *s = dot_affine(n, x, sizeof(block_q5_1), c_q5_1, y);
}

/* ---- Q4_K, Q5_K: value d*sc*q - dmin*m per 32-value sub-block; dots with Q8_K ---- */

/* Scale and min of each sub-block, one at a time: the definition, which the
 * SIMD kernels' branch-free quant_kscale_words is tested against. */
static void kscales(const uint8_t s[12], uint8_t sc[8], uint8_t m[8])
{
    for (int j = 0; j < 8; j++) quant_kscale_unpack(s, j, &sc[j], &m[j]);
}

/* Code of value v (0..255) of a Q4_K/Q5_K block: see the struct comment. */
static inline int qk_nib(const uint8_t qs[128], int v)
{
    uint8_t byte = qs[32 * (v / 64) + v % 32];
    return (v % 64) < 32 ? (byte & 15) : (byte >> 4);
}

/* Q4_K and Q5_K share their first 16 bytes (d, dmin, scales) and differ
 * in how value v's code is stored; decoder and dot are written once over a
 * function that reads the code. */

static int code_q4_K(const uint8_t *b, int v) { return qk_nib(((const block_q4_K *)(const void *)b)->qs, v); }

static int code_q5_K(const uint8_t *b, int v)
{
    const block_q5_K *q = (const void *)b;
    int bit = 2 * (v / 64) + ((v % 64) >= 32);
    return qk_nib(q->qs, v) | ((q->qh[v % 32] >> bit) & 1) << 4;
}

QUANT_INLINE void decode_kq(const void *src, float *y, int64_t n, size_t bsize, quant_blk_int_fn code)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += bsize, y += QK_K) {
        float d = quant_half_at(b), dmin = quant_half_at(b + 2);
        uint8_t sc[8], m[8];
        kscales(b + 4, sc, m);
        for (int v = 0; v < QK_K; v++) {
            float dl = d * sc[v / 32], ml = dmin * m[v / 32];
            y[v] = dl * (float)code(b, v) - ml;
        }
    }
}

/* Per super-block: Σ_j sc_j·Σ q·y and Σ_j m_j·Σ y as integers, then the two
 * fp16 super-scales and the fp32 activation scale. */
QUANT_INLINE float dot_kq(int64_t n, const void *vx, size_t bsize, quant_blk_int_fn code, const block_q8_K *y)
{
    const uint8_t *b = vx;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++, b += bsize) {
        uint8_t sc[8], m[8];
        kscales(b + 4, sc, m);
        int sumq = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            int dq = 0, sy = 0;
            for (int k = 32 * j; k < 32 * j + 32; k++) {
                dq += code(b, k) * y[i].qs[k];
                sy += y[i].qs[k];
            }
            sumq += sc[j] * dq;
            summ += m[j] * sy;
        }
        sum += y[i].d * quant_half_at(b) * (float)sumq - y[i].d * quant_half_at(b + 2) * (float)summ;
    }
    return sum;
}

static void q4_K_to_float(const void *b, float *y, int64_t n) { decode_kq(b, y, n, sizeof(block_q4_K), code_q4_K); }
static void q5_K_to_float(const void *b, float *y, int64_t n) { decode_kq(b, y, n, sizeof(block_q5_K), code_q5_K); }
static void dot_q4_K(int64_t n, float *s, const void *x, const void *y)
{
    *s = dot_kq(n, x, sizeof(block_q4_K), code_q4_K, y);
}
static void dot_q5_K(int64_t n, float *s, const void *x, const void *y)
{
    *s = dot_kq(n, x, sizeof(block_q5_K), code_q5_K, y);
}

/* ---- Q6_K and IQ4_XS: one fp16 scale times signed sub-block scales
 * (quant_ref_loops.h; Q6_K: 16 sub-blocks of 16, IQ4_XS: 8 of 32) ---- */

static int q6k_code(const uint8_t *blk, int j, int k)
{
    const block_q6_K *b = (const void *)blk;
    int v = 16 * j + k, h = v / 128, r = v % 128, l = r % 32, quarter = r / 32;
    uint8_t lo = b->ql[64 * h + l + 32 * (quarter & 1)];
    int nib = quarter < 2 ? (lo & 15) : (lo >> 4);
    return (nib | ((b->qh[32 * h + l] >> (2 * quarter)) & 3) << 4) - 32;
}

static int q6k_scale(const uint8_t *blk, int j) { return ((const block_q6_K *)(const void *)blk)->scales[j]; }

static int iq4xs_code(const uint8_t *blk, int j, int k)
{
    return quant_iq4nl_values[nib_code(((const block_iq4_xs *)(const void *)blk)->qs + 16 * j, k)];
}

static int iq4xs_scale(const uint8_t *blk, int j)
{
    const block_iq4_xs *b = (const void *)blk;
    int lo = (b->scales_l[j / 2] >> (4 * (j % 2))) & 15;
    int hi = (b->scales_h >> (2 * j)) & 3;
    return (lo | hi << 4) - 32;
}

static void q6_K_to_float(const void *b, float *y, int64_t n)
{
    quant_decode_scaled(b, y, n, sizeof(block_q6_K), offsetof(block_q6_K, d), 16, q6k_scale, q6k_code);
}
static void iq4_xs_to_float(const void *b, float *y, int64_t n)
{
    quant_decode_scaled(b, y, n, sizeof(block_iq4_xs), offsetof(block_iq4_xs, d), 32, iq4xs_scale, iq4xs_code);
}
static void dot_q6_K(int64_t n, float *s, const void *x, const void *y)
{
    *s = quant_dot_scaled(n, x, sizeof(block_q6_K), offsetof(block_q6_K, d), 16, q6k_scale, q6k_code, y);
}
static void dot_iq4_xs(int64_t n, float *s, const void *x, const void *y)
{
    *s = quant_dot_scaled(n, x, sizeof(block_iq4_xs), offsetof(block_iq4_xs, d), 32, iq4xs_scale, iq4xs_code, y);
}

/* ---- activations: Q8_0, Q8_1, Q8_K ----
 * Plain round-to-nearest from the block's absolute maximum, no search: they
 * run on every activation row.  Codes stay in [-127, 127] (never -128), which
 * the SIMD kernels rely on (they move signs between operands).  Q8_0/Q8_1
 * divide by the fp16-rounded scale they store, so the per-value error is at
 * most half a step of the scale that is actually decoded. */

static void q8_K_to_float(const void *src, float *y, int64_t n)
{
    const block_q8_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K)
        for (int v = 0; v < QK_K; v++) y[v] = b[i].d * (float)b[i].qs[v];
}

static float q8_block(const float *x, int8_t *q, uint16_t *d16)
{
    float amax = 0;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    *d16 = quant_f32_to_f16(amax / 127.0f);
    float d = quant_half_to_float(*d16), id = d != 0 ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) q[j] = (int8_t)fmaxf(-127.0f, fminf(127.0f, roundf(x[j] * id)));
    return d;
}

static void q8_0_from_float(const float *x, void *dst, int64_t n)
{
    block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK_SMALL; i++) q8_block(x + 32 * i, b[i].qs, &b[i].d);
}

static void q8_1_from_float(const float *x, void *dst, int64_t n)
{
    block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / QK_SMALL; i++) {
        float d = q8_block(x + 32 * i, b[i].qs, &b[i].d);
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += b[i].qs[j];
        b[i].s = quant_f32_to_f16(d * (float)sum);
    }
}

/* Q8_K keeps an fp32 scale; the signed extreme maps to -127 exactly (ggml's
 * choice, which its IQ kernels rely on), bsums let K-quant dots fold the
 * per-sub-block mins in without touching the codes again. */
static void q8_K_from_float(const float *x, void *dst, int64_t n)
{
    block_q8_K *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float amax = 0, max = 0;
        for (int v = 0; v < QK_K; v++) {
            if (fabsf(x[v]) > amax) {
                amax = fabsf(x[v]);
                max = x[v];
            }
        }
        memset(&b[i], 0, sizeof b[i]);
        if (amax == 0) continue;
        float iscale = -127.0f / max;
        for (int v = 0; v < QK_K; v++) {
            float q = nearbyintf(iscale * x[v]);
            b[i].qs[v] = (int8_t)fmaxf(-127.0f, fminf(127.0f, q));
        }
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int k = 0; k < 16; k++) sum += b[i].qs[16 * g + k];
            b[i].bsums[g] = (int16_t)sum;
        }
        b[i].d = 1.0f / iscale;
    }
}

/* ---- tables ---- */

const quant_to_float_fn quant_ref_to_float[QT_COUNT] = {
    [QT_F32] = f32_to_float,       [QT_F16] = f16_to_float,       [QT_BF16] = bf16_to_float,
    [QT_Q4_0] = q4_0_to_float,     [QT_Q5_0] = q5_0_to_float,     [QT_Q5_1] = q5_1_to_float,
    [QT_Q8_0] = q8_0_to_float,     [QT_Q8_1] = q8_1_to_float,     [QT_Q4_K] = q4_K_to_float,
    [QT_Q5_K] = q5_K_to_float,     [QT_Q6_K] = q6_K_to_float,     [QT_Q8_K] = q8_K_to_float,
    [QT_IQ4_NL] = iq4_nl_to_float, [QT_IQ4_XS] = iq4_xs_to_float, [QT_Q4_1] = q4_1_to_float,
};

const quant_from_float_fn quant_ref_from_float[QT_COUNT] = {
    [QT_F32] = f32_from_float,         [QT_F16] = f16_from_float,         [QT_BF16] = bf16_from_float,
    [QT_Q4_0] = quant_encode_q4_0,     [QT_Q5_0] = quant_encode_q5_0,     [QT_Q5_1] = quant_encode_q5_1,
    [QT_Q8_0] = q8_0_from_float,       [QT_Q8_1] = q8_1_from_float,       [QT_Q4_K] = quant_encode_q4_K,
    [QT_Q5_K] = quant_encode_q5_K,     [QT_Q6_K] = quant_encode_q6_K,     [QT_Q8_K] = q8_K_from_float,
    [QT_IQ4_NL] = quant_encode_iq4_nl, [QT_IQ4_XS] = quant_encode_iq4_xs, [QT_Q4_1] = quant_encode_q4_1,
};

const quant_vec_dot_fn quant_ref_vec_dot[QT_COUNT] = {
    [QT_F32] = dot_f32,       [QT_F16] = dot_f16,       [QT_BF16] = dot_bf16,   [QT_Q4_0] = dot_q4_0,
    [QT_Q5_0] = dot_q5_0,     [QT_Q5_1] = dot_q5_1,     [QT_Q8_0] = dot_q8_0,   [QT_Q4_K] = dot_q4_K,
    [QT_Q5_K] = dot_q5_K,     [QT_Q6_K] = dot_q6_K,     [QT_IQ4_NL] = dot_iq4_nl, [QT_IQ4_XS] = dot_iq4_xs,
    [QT_Q4_1] = dot_q4_1,
};
