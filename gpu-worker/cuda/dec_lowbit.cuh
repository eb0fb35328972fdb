/* dec_lowbit.cuh — the device decoders of the low-bit formats the published
 * files use: Q4_0, Q4_1, F16, Q2_K, Q3_K, TQ1_0, TQ2_0, Q1_0, Q2_0, MXFP4,
 * NVFP4 and the grid formats IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S,
 * IQ1_M.
 *
 * One idea serves both CUDA paths: a format is a struct with QK (values a
 * block), BYTES (bytes a block) and decode8(block, g, v), the values
 * 8g..8g+7 of a block.  matvec.cu's fast kernels stream a row through
 * decode8 (one warp a row, lane l groups l, l+32, …); the reference kernels
 * (linalg.cu's d_wval, compiled with --fmad=false) take one value out of its
 * group (lb_value).  Each decode8 applies the block's scales with the same
 * float operations, in the same order, as core/quant's reference decoders
 * (quant_ref.c, quant_ref_lowbit.c, quant_ref_iq.c — themselves ggml's), so
 * the reference kernels decode a file to the CPU's bits.  Block offsets are
 * quant_blocks.h's structs.  Few of these blocks are a multiple of 4 bytes
 * long, so reads are of bytes and 2-byte halves (what the block's size
 * guarantees), except where noted.
 *
 * The grid formats read codebooks (quant_grids.c, built by quant_init on the
 * host).  Each translation unit that includes this header has its own device
 * copy: lb_upload_codebooks() fills it (once, before the first launch; a
 * kernel reading an empty codebook would decode zeros, so the launchers
 * refuse a grid format until it is done). */
#ifndef NB_GW_CUDA_DEC_LOWBIT_CUH
#define NB_GW_CUDA_DEC_LOWBIT_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "core/quant/quant.h"
}
#include "core/quant/quant_blocks.h"

static __device__ uint64_t lb_iq2xxs[256], lb_iq2xs[512], lb_iq2s[1024], lb_iq1s[2048];
static __device__ uint32_t lb_iq3xxs[256], lb_iq3s[512];
static __device__ uint8_t lb_ksigns[128];
static bool lb_codebooks_ready = false;

/* Copies the host's codebooks (quant_init fills them) to this unit's device
 * copy; 0 or a CUDA error. */
static inline cudaError_t lb_upload_codebooks(void)
{
    if (lb_codebooks_ready) return cudaSuccess;
    quant_init();
    const struct quant_codebooks *cb = quant_codebooks();
    cudaError_t e;
    if ((e = cudaMemcpyToSymbol(lb_iq2xxs, cb->iq2xxs, sizeof lb_iq2xxs)) != cudaSuccess ||
        (e = cudaMemcpyToSymbol(lb_iq2xs, cb->iq2xs, sizeof lb_iq2xs)) != cudaSuccess ||
        (e = cudaMemcpyToSymbol(lb_iq2s, cb->iq2s, sizeof lb_iq2s)) != cudaSuccess ||
        (e = cudaMemcpyToSymbol(lb_iq1s, cb->iq1s, sizeof lb_iq1s)) != cudaSuccess ||
        (e = cudaMemcpyToSymbol(lb_iq3xxs, cb->iq3xxs, sizeof lb_iq3xxs)) != cudaSuccess ||
        (e = cudaMemcpyToSymbol(lb_iq3s, cb->iq3s, sizeof lb_iq3s)) != cudaSuccess ||
        (e = cudaMemcpyToSymbol(lb_ksigns, cb->ksigns, sizeof lb_ksigns)) != cudaSuccess)
        return e;
    lb_codebooks_ready = true;
    return cudaSuccess;
}

/* Whether a format reads the codebooks. */
static inline bool lb_needs_codebooks(int t)
{
    return t == QT_IQ2_XXS || t == QT_IQ2_XS || t == QT_IQ2_S || t == QT_IQ3_XXS || t == QT_IQ3_S || t == QT_IQ1_S ||
           t == QT_IQ1_M;
}

/* ---- reading blocks ---- */

static __device__ __forceinline__ float lb_half_bits(uint32_t h) { return __half2float(__ushort_as_half((unsigned short)h)); }
static __device__ __forceinline__ uint32_t lb_u16(const uint8_t *p) { return *(const unsigned short *)p; } /* 2-aligned */
static __device__ __forceinline__ float lb_half(const uint8_t *p) { return lb_half_bits(p[0] | p[1] << 8); } /* any alignment */
static __device__ __forceinline__ uint32_t lb_u32(const uint8_t *p) { return lb_u16(p) | lb_u16(p + 2) << 16; }
/* 8 bytes at p as two little-endian words; A is the alignment the format
 * guarantees at p (8: one 8-byte load; 2: four 2-byte loads).  Fewer, wider
 * loads per lane keep more weight bytes in flight per warp. */
template <int A> static __device__ __forceinline__ uint2 lb_load8(const uint8_t *p)
{
    if (A >= 8) return *(const uint2 *)p;
    return make_uint2(lb_u32(p), lb_u32(p + 4));
}
/* Byte i (a compile-time constant after unrolling) of the 8 loaded bytes. */
static __device__ __forceinline__ uint32_t lb_byte(uint2 q, int i) { return ((i < 4 ? q.x : q.y) >> (8 * (i & 3))) & 0xffu; }

/* Level nib of a 16-entry int8 table packed four to a word (w0: levels
 * 0-3, ... w3: 12-15), picked with byte permutes in registers: a table in
 * memory indexed by a different nibble in each lane serializes the warp's
 * reads. */
static __device__ __forceinline__ int lb_level(uint32_t nib, uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3)
{
    uint32_t lo = __byte_perm(w0, w1, nib & 7), hi = __byte_perm(w2, w3, nib & 7);
    return (int)(int8_t)((nib & 8 ? hi : lo) & 0xffu);
}

/* The 4-bit levels of MXFP4 and NVFP4 (quant_mxfp4_values). */
static __device__ __forceinline__ int lb_fp4_level(uint32_t nib)
{
    return lb_level(nib, 0x03020100u, 0x0c080604u, 0xfdfeff00u, 0xf4f8fafcu);
}

/* MXFP4's E8M0 scale halved and NVFP4's UE4M3 halved (quant_impl.h's). */
static __device__ __forceinline__ float lb_e8m0_half(uint32_t e)
{
    return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}
static __device__ __forceinline__ float lb_ue4m3_half(uint32_t x)
{
    if (x == 0 || x == 0x7f) return 0.0f;
    int e = (x >> 3) & 15, m = x & 7;
    return e ? (float)(8 + m) * 0x1p-11f * (float)(1u << e) : (float)m * 0x1p-10f;
}

/* ---- the 32-value formats and F16 ---- */

struct dec_f16 { /* 8 halves: 16 bytes, 16-aligned since rows are a multiple of 8 values */
    enum { QK = 8, BYTES = 16 };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        uint4 q = *(const uint4 *)b;
        uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; i++) v[2 * i] = lb_half_bits(w[i] & 0xffffu), v[2 * i + 1] = lb_half_bits(w[i] >> 16);
    }
};

/* Q4_0: d, qs[16]; value j = (nibble j − 8)·d (low nibbles 0..15, high 16..31). */
struct dec_q4_0 {
    enum { QK = QK_SMALL, BYTES = sizeof(block_q4_0) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        float d = lb_half(b);
        int base = 8 * g, shift = base < 16 ? 0 : 4;
        uint2 q = lb_load8<2>(b + offsetof(block_q4_0, qs) + (base & 15));
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = (float)((int)(lb_byte(q, i) >> shift & 15) - 8) * d;
    }
};

/* Q4_1: d, m, qs[16]; value j = nibble j·d + m.  20-byte blocks: 4-aligned. */
struct dec_q4_1 {
    enum { QK = QK_SMALL, BYTES = sizeof(block_q4_1) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        float d = lb_half(b), m = lb_half(b + offsetof(block_q4_1, m));
        int base = 8 * g, shift = base < 16 ? 0 : 4;
        uint2 q = lb_load8<2>(b + offsetof(block_q4_1, qs) + (base & 15));
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = (float)(int)(lb_byte(q, i) >> shift & 15) * d + m;
    }
};

/* MXFP4: e, qs[16]; value j = level(nibble j)·e8m0_half(e).  17-byte blocks:
 * byte reads. */
struct dec_mxfp4 {
    enum { QK = QK_SMALL, BYTES = sizeof(block_mxfp4) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        float d = lb_e8m0_half(b[offsetof(block_mxfp4, e)]);
        int base = 8 * g, shift = base < 16 ? 0 : 4;
        const uint8_t *qs = b + offsetof(block_mxfp4, qs) + (base & 15);
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = (float)lb_fp4_level(qs[i] >> shift & 15) * d;
    }
};

/* NVFP4: d[4] (UE4M3), qs[32]: sub-block s (16 values) in qs[8s..8s+7], low
 * nibbles values 0..7, high 8..15.  36-byte blocks: 4-aligned. */
struct dec_nvfp4 {
    enum { QK = QK_NVFP4, BYTES = sizeof(block_nvfp4) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        const int s = g / 2, shift = 4 * (g % 2);
        float d = lb_ue4m3_half(b[offsetof(block_nvfp4, d) + s]);
        uint2 q = lb_load8<2>(b + offsetof(block_nvfp4, qs) + 8 * s);
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = (float)lb_fp4_level(lb_byte(q, i) >> shift & 15) * d;
    }
};

/* Q1_0: d, qs[16] of 128 sign bits: value j = bit j ? d : −d. */
struct dec_q1_0 {
    enum { QK = QK1_0, BYTES = sizeof(block_q1_0) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        float d = lb_half(b);
        uint32_t bits = b[offsetof(block_q1_0, qs) + g];
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = (bits >> i) & 1 ? d : -d;
    }
};

/* Q2_0: d, qs[16]: value j = (bits 2(j%4).. of qs[j/4] − 1)·d. */
struct dec_q2_0 {
    enum { QK = QK2_0, BYTES = sizeof(block_q2_0) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        float d = lb_half(b);
        uint32_t q = lb_u16(b + offsetof(block_q2_0, qs) + 2 * g);
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = (float)((int)(q >> (2 * i) & 3) - 1) * d;
    }
};

/* ---- the 256-value K and TQ formats ---- */

/* The 2-bit layout Q2_K, Q3_K and TQ2_0 share: value v is bits 2j.. of
 * qs[32·(v/128) + v%32], j = (v%128)/32; a group of 8 has one j. */
static __device__ __forceinline__ void lb_codes2(const uint8_t *qs, int g, int c[8])
{
    const int v = 8 * g, shift = 2 * ((v % 128) / 32);
    uint2 q = lb_load8<2>(qs + 32 * (v / 128) + v % 32);
#pragma unroll
    for (int i = 0; i < 8; i++) c[i] = (int)(lb_byte(q, i) >> shift & 3);
}

/* Q2_K: scales[16] (4-bit scale, 4-bit min per 16 values), qs[64], d, dmin:
 * value = (d·sc)·q − dmin·m. */
struct dec_q2_K {
    enum { QK = QK_K, BYTES = sizeof(block_q2_K) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        int c[8];
        lb_codes2(b + offsetof(block_q2_K, qs), g, c);
        uint32_t sc = b[offsetof(block_q2_K, scales) + g / 2];
        float dl = lb_half(b + offsetof(block_q2_K, d)) * (float)(sc & 15),
              ml = lb_half(b + offsetof(block_q2_K, dmin)) * (float)(sc >> 4);
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = dl * (float)c[i] - ml;
    }
};

/* Q3_K: hmask[32], qs[64], scales[12] (6-bit signed scales per 16), d:
 * value = d·scale·(2 low bits − 4 unless the hmask bit is set). */
struct dec_q3_K {
    enum { QK = QK_K, BYTES = sizeof(block_q3_K) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        int c[8];
        lb_codes2(b + offsetof(block_q3_K, qs), g, c);
        const int v0 = 8 * g, j = v0 / 16, hbit = 4 * (v0 / 128) + (v0 % 128) / 32;
        const uint8_t *s = b + offsetof(block_q3_K, scales);
        int lo = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
        int scale = (lo | ((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
        uint2 hm = lb_load8<2>(b + offsetof(block_q3_K, hmask) + v0 % 32);
        float d = lb_half(b + offsetof(block_q3_K, d));
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = d * (float)scale * (float)(c[i] - ((lb_byte(hm, i) >> hbit) & 1 ? 0 : 4));
    }
};

/* TQ2_0: qs[64], d: value = (q − 1)·d. */
struct dec_tq2_0 {
    enum { QK = QK_K, BYTES = sizeof(block_tq2_0) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        int c[8];
        lb_codes2(b + offsetof(block_tq2_0, qs), g, c);
        float d = lb_half(b + offsetof(block_tq2_0, d));
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = (float)(c[i] - 1) * d;
    }
};

/* TQ1_0's base-3 digit n of byte q, as ggml extracts it (quant_ref_lowbit.c). */
static __device__ __forceinline__ int lb_trit(uint32_t q, int n)
{
    const uint32_t pow3 = n == 0 ? 1 : n == 1 ? 3 : n == 2 ? 9 : n == 3 ? 27 : 81;
    return (int)((((q * pow3) & 0xffu) * 3) >> 8);
}

/* TQ1_0: qs[48], qh[4], d; value v: 0..159 digit v/32 of qs[v%32], 160..239
 * digit (v−160)/16 of qs[32 + v%16], 240..255 digit (v−240)/4 of qh[v%4];
 * value = (digit − 1)·d.  54-byte blocks: 2-aligned. */
struct dec_tq1_0 {
    enum { QK = QK_K, BYTES = sizeof(block_tq1_0) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        float d = lb_half(b + offsetof(block_tq1_0, d));
        const int v0 = 8 * g;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int x = v0 + i;
            int t = x < 160   ? lb_trit(b[x % 32], x / 32)
                    : x < 240 ? lb_trit(b[32 + (x - 160) % 16], (x - 160) / 16)
                              : lb_trit(b[offsetof(block_tq1_0, qh) + (x - 240) % 4], (x - 240) / 4);
            v[i] = (float)(t - 1) * d;
        }
    }
};

/* ---- the grid formats: group g is group l = g%4 of 32-value sub-block ib = g/4 ---- */

static __device__ __forceinline__ int lb_signed(int x, uint32_t signs, int j) { return (signs >> j) & 1 ? -x : x; }
static __device__ __forceinline__ int lb_grid8(uint64_t p, int j) { return (int)(uint8_t)(p >> (8 * j)); }
static __device__ __forceinline__ int lb_grid4(uint32_t p, int j) { return (int)(uint8_t)(p >> (8 * j)); }

/* A group of the IQ2 formats: db · the 8 elements of point p, signed by the 8 sign bits. */
static __device__ __forceinline__ void lb_signed_point8(float db, uint64_t p, uint32_t signs, float v[8])
{
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = db * (float)lb_signed(lb_grid8(p, j), signs, j);
}

/* A group of the IQ3 formats: two 4-element points, then as above. */
static __device__ __forceinline__ void lb_signed_points4(float db, uint32_t p0, uint32_t p1, uint32_t signs, float v[8])
{
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = db * (float)lb_signed(lb_grid4(j < 4 ? p0 : p1, j % 4), signs, j);
}

/* A group of the IQ1 formats: dl · (element ± 1/8). */
static __device__ __forceinline__ void lb_shifted_point8(float dl, float delta, uint64_t p, float v[8])
{
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = dl * ((float)(int8_t)lb_grid8(p, j) + delta);
}

/* IQ2_XXS: d, then per sub-block two words: 4 index bytes, then 4×7 sign
 * bits under the 4-bit scale s; db = d·(0.5 + s)·0.25. */
struct dec_iq2_xxs {
    enum { QK = QK_K, BYTES = sizeof(block_iq2_xxs) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        const int ib = g / 4, l = g % 4;
        const uint8_t *qs = b + offsetof(block_iq2_xxs, qs) + 8 * ib;
        const uint32_t aux = lb_u32(qs + 4);
        const float db = lb_half(b) * (0.5f + (float)(aux >> 28)) * 0.25f;
        lb_signed_point8(db, lb_iq2xxs[qs[l]], lb_ksigns[(aux >> (7 * l)) & 127], v);
    }
};

/* IQ2_XS, IQ2_S: a 4-bit scale s per 16 values at SCALES (scales[ib], low
 * nibble for groups 0 and 1); db = d·(0.5 + s)·0.25. */
static __device__ __forceinline__ float lb_db_iq2(const uint8_t *b, size_t scales, int ib, int l)
{
    const int s = (b[scales + ib] >> (4 * (l / 2))) & 15;
    return lb_half(b) * (0.5f + (float)s) * 0.25f;
}

/* IQ2_XS: d, qs[32] (9-bit index, 7 sign bits), scales[8] (4 bits per 16
 * values); db = d·(0.5 + s)·0.25. */
struct dec_iq2_xs {
    enum { QK = QK_K, BYTES = sizeof(block_iq2_xs) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        const int ib = g / 4, l = g % 4;
        const uint32_t q = lb_u16(b + offsetof(block_iq2_xs, qs) + 2 * (4 * ib + l));
        lb_signed_point8(lb_db_iq2(b, offsetof(block_iq2_xs, scales), ib, l), lb_iq2xs[q & 511], lb_ksigns[q >> 9], v);
    }
};

/* IQ2_S: d, qs[64] (8-bit indices, then 8 sign bits a group), qh[8] (2 more
 * index bits a group), scales[8]; db as IQ2_XS. */
struct dec_iq2_s {
    enum { QK = QK_K, BYTES = sizeof(block_iq2_s) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        const int ib = g / 4, l = g % 4;
        const uint8_t *qs = b + offsetof(block_iq2_s, qs);
        const int idx = qs[4 * ib + l] | ((b[offsetof(block_iq2_s, qh) + ib] << (8 - 2 * l)) & 0x300);
        lb_signed_point8(lb_db_iq2(b, offsetof(block_iq2_s, scales), ib, l), lb_iq2s[idx], qs[32 + 4 * ib + l], v);
    }
};

/* IQ3_XXS: d, qs[96]: 64 index bytes (two 4-value points a group), then a
 * word per sub-block of 4×7 sign bits under s; db = d·(0.5 + s)·0.5. */
struct dec_iq3_xxs {
    enum { QK = QK_K, BYTES = sizeof(block_iq3_xxs) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        const int ib = g / 4, l = g % 4;
        const uint8_t *qs = b + offsetof(block_iq3_xxs, qs);
        const uint32_t aux = lb_u32(qs + 64 + 4 * ib);
        const float db = lb_half(b) * (0.5f + (float)(aux >> 28)) * 0.5f;
        const uint32_t p0 = lb_iq3xxs[qs[8 * ib + 2 * l]], p1 = lb_iq3xxs[qs[8 * ib + 2 * l + 1]];
        const uint32_t signs = lb_ksigns[(aux >> (7 * l)) & 127];
        lb_signed_points4(db, p0, p1, signs, v);
    }
};

/* IQ3_S: d, qs[64] (8-bit indices, the 9th in qh), qh[8], signs[32] (8 a
 * group), scales[4] (4 bits per sub-block); db = d·(1 + 2s). */
struct dec_iq3_s {
    enum { QK = QK_K, BYTES = sizeof(block_iq3_s) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        const int ib = g / 4, l = g % 4;
        const uint8_t *qs = b + offsetof(block_iq3_s, qs);
        const uint32_t qh = b[offsetof(block_iq3_s, qh) + ib];
        const int s = (b[offsetof(block_iq3_s, scales) + ib / 2] >> (4 * (ib % 2))) & 15;
        const float db = lb_half(b) * (float)(1 + 2 * s);
        const uint32_t p0 = lb_iq3s[qs[8 * ib + 2 * l] | ((qh << (8 - 2 * l)) & 256)],
                       p1 = lb_iq3s[qs[8 * ib + 2 * l + 1] | ((qh << (7 - 2 * l)) & 256)];
        const uint32_t signs = b[offsetof(block_iq3_s, signs) + 4 * ib + l];
        lb_signed_points4(db, p0, p1, signs, v);
    }
};

/* IQ1_S: d, qs[32], qh[8] (per sub-block: 3 index bits a group, the scale s
 * at 12, the shift's sign at 15); value = d·(2s + 1)·(element ± 1/8). */
struct dec_iq1_s {
    enum { QK = QK_K, BYTES = sizeof(block_iq1_s) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        const int ib = g / 4, l = g % 4;
        const uint32_t qh = lb_u16(b + offsetof(block_iq1_s, qh) + 2 * ib);
        const float dl = lb_half(b) * (float)(2 * ((qh >> 12) & 7) + 1);
        const float delta = qh & 0x8000 ? -0.125f : 0.125f;
        const uint64_t p = lb_iq1s[b[offsetof(block_iq1_s, qs) + 4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)];
        lb_shifted_point8(dl, delta, p, v);
    }
};

/* IQ1_M: qs[32], qh[16] (a nibble a group: 3 index bits and the shift's
 * sign), scales[8] (four words: 3-bit scales per 16 values, the fp16 d in
 * the words' top nibbles); value = d·(2s + 1)·(element ± 1/8). */
struct dec_iq1_m {
    enum { QK = QK_K, BYTES = sizeof(block_iq1_m) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        const int ib = g / 4, l = g % 4;
        const uint8_t *sc = b + offsetof(block_iq1_m, scales);
        const uint32_t w0 = lb_u16(sc), w1 = lb_u16(sc + 2), w2 = lb_u16(sc + 4), w3 = lb_u16(sc + 6);
        const float d = lb_half_bits((w0 >> 12) | ((w1 >> 8) & 0x00f0) | ((w2 >> 4) & 0x0f00) | (w3 & 0xf000));
        const uint32_t word = lb_u16(sc + 2 * (ib / 2));
        const float dl = d * (float)(2 * ((word >> (6 * (ib % 2) + 3 * (l / 2))) & 7) + 1);
        const uint32_t nib = (b[offsetof(block_iq1_m, qh) + 2 * ib + l / 2] >> (4 * (l % 2))) & 15;
        const float delta = nib & 8 ? -0.125f : 0.125f;
        const uint64_t p = lb_iq1s[b[offsetof(block_iq1_m, qs) + 4 * ib + l] | (nib & 7) << 8];
        lb_shifted_point8(dl, delta, p, v);
    }
};

/* The formats of this header, X(quant type, decoder): cuda_types.h's rows
 * for them name the same decoders; lb_value below dispatches over this list. */
#define LB_TYPES(X)                                                                                                    \
    X(QT_F16, dec_f16) X(QT_Q4_0, dec_q4_0) X(QT_Q4_1, dec_q4_1) X(QT_MXFP4, dec_mxfp4) X(QT_NVFP4, dec_nvfp4)          \
    X(QT_Q1_0, dec_q1_0) X(QT_Q2_0, dec_q2_0) X(QT_Q2_K, dec_q2_K) X(QT_Q3_K, dec_q3_K) X(QT_TQ1_0, dec_tq1_0)          \
    X(QT_TQ2_0, dec_tq2_0) X(QT_IQ2_XXS, dec_iq2_xxs) X(QT_IQ2_XS, dec_iq2_xs) X(QT_IQ2_S, dec_iq2_s)                    \
    X(QT_IQ3_XXS, dec_iq3_xxs) X(QT_IQ3_S, dec_iq3_s) X(QT_IQ1_S, dec_iq1_s) X(QT_IQ1_M, dec_iq1_m)

/* Value i of a row of one of these formats: its group, decoded (the
 * reference kernels; a decode8 per value is slow and exact).  *ok = false
 * for a type not in LB_TYPES. */
template <typename D> static __device__ __forceinline__ float lb_value_of(const uint8_t *row, int64_t i)
{
    float v[8];
    D::decode8(row + (i / D::QK) * D::BYTES, (int)(i % D::QK) / 8, v);
    return v[i % 8];
}

static __device__ float lb_value(const uint8_t *row, int type, int64_t i, bool *ok)
{
    *ok = true;
    switch (type) {
#define LB_CASE(t, D) \
    case t: return lb_value_of<D>(row, i);
        LB_TYPES(LB_CASE)
#undef LB_CASE
    }
    *ok = false;
    return 0.0f;
}

#endif
