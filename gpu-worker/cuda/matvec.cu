/* matvec.cu — quantized matrix-vector products y = W·x on the GPU.
 *
 * One warp per row of W.  A row is cut into groups of 8 consecutive values;
 * lane l decodes groups l, l+32, l+64, ... into registers, multiplies them by
 * the matching 8 floats of each of up to 16 rows of x, and the warp adds its
 * 32 partial sums with shuffles.  The idea that keeps it to one kernel: each
 * format only says how to decode "group g of a block" (a small struct with
 * its block size, bytes per block and a decode8 function); the loop, the
 * batching and the reduction are shared.  A warp reads its row front to
 * back, so the weight bytes stream from memory once; x is small and stays in
 * the caches.  Block sizes and byte offsets in the decoders come from the
 * block structs of core/quant/quant_blocks.h (ggml's layouts, shared with
 * the CPU code); which format uses which decoder is gpu-worker/cuda/
 * cuda_types.h's table (the launchers below are built from it); decoding follows quant_ref.c
 * value for value, which is what tests/cuda/test_matvec.cu checks; its
 * timings, and what is still slow, are in docs/BENCHMARKS.md. */
#include "gpu-worker/cuda/cuda_kernels.h"

extern "C" {
#include "core/quant/quant.h"
}
#include "core/quant/quant_blocks.h"
#include "gpu-worker/cuda/cuda_types.h"
#include "gpu-worker/cuda/dec_lowbit.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define WARPS_PER_BLOCK 8

/* ---- one struct per format: QK values per block, BYTES per block, and the
 * decode of group g (values 8g..8g+7) of a block ---- */

struct dec_f32 { /* a "block" of 8 floats: 32 bytes, always 16-byte aligned */
    enum { QK = 8, BYTES = 8 * sizeof(float) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        float4 a = ((const float4 *)b)[0], c = ((const float4 *)b)[1];
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = c.x; v[5] = c.y; v[6] = c.z; v[7] = c.w;
    }
};

struct dec_bf16 { /* 8 bf16 = 16 bytes; bf16 is the top half of an fp32 */
    enum { QK = 8, BYTES = 8 * sizeof(uint16_t) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        uint4 q = *(const uint4 *)b;
        uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            v[2 * i] = __uint_as_float(w[i] << 16);
            v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    }
};

struct dec_q8_0 { /* d, qs[32] int8; blocks of 34 bytes: 2-byte aligned */
    enum { QK = QK_SMALL, BYTES = sizeof(block_q8_0) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        float d = lb_half(b);
        uint2 q = lb_load8<2>(b + offsetof(block_q8_0, qs) + 8 * g);
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = d * (float)(int8_t)lb_byte(q, i);
    }
};

struct dec_q5_1 { /* d, m, qh[4], qs[16]: value j = (nib | bit j of qh << 4) * d + m; 24 bytes */
    enum { QK = QK_SMALL, BYTES = sizeof(block_q5_1) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        float d = lb_half(b), m = lb_half(b + offsetof(block_q5_1, m));
        int base = 8 * g, shift = base < 16 ? 0 : 4;
        uint32_t qh = *(const uint32_t *)(b + offsetof(block_q5_1, qh)) >> base;
        uint2 q = lb_load8<8>(b + offsetof(block_q5_1, qs) + (base & 15));
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int c = (int)(lb_byte(q, i) >> shift & 15) | (int)((qh >> i) & 1) << 4;
            v[i] = (float)c * d + m;
        }
    }
};

struct dec_q5_0 { /* d, qh[4], qs[16]: value j = d * ((nib | bit j of qh << 4) - 16); 22 bytes: 2-byte aligned */
    enum { QK = QK_SMALL, BYTES = sizeof(block_q5_0) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        float d = lb_half(b);
        int base = 8 * g, shift = base < 16 ? 0 : 4;
        const unsigned short *h = (const unsigned short *)(b + offsetof(block_q5_0, qh));
        uint32_t qh = ((uint32_t)h[0] | (uint32_t)h[1] << 16) >> base;
        uint2 q = lb_load8<2>(b + offsetof(block_q5_0, qs) + (base & 15));
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int c = (int)(lb_byte(q, i) >> shift & 15) | (int)((qh >> i) & 1) << 4;
            v[i] = d * (float)(c - 16);
        }
    }
};

/* The IQ4_NL levels (quant_iq4nl_values) packed four to a word: a level is
 * picked with byte permutes in registers, since a table in memory indexed by
 * a different nibble in each lane serializes the warp's reads. */
static __device__ __forceinline__ int iq4nl_level(uint32_t nib)
{
    return lb_level(nib, 0xbfad9881u, 0xf6eaddcfu, 0x26190d01u, 0x71594535u);
}

struct dec_iq4_nl { /* d, qs[16]: value j = d * T[nib j]; 18 bytes: 2-byte aligned */
    enum { QK = QK_SMALL, BYTES = sizeof(block_iq4_nl) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        float d = lb_half(b);
        int base = 8 * g, shift = base < 16 ? 0 : 4;
        uint2 q = lb_load8<2>(b + offsetof(block_iq4_nl, qs) + (base & 15));
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = d * (float)iq4nl_level(lb_byte(q, i) >> shift & 15);
    }
};

/* Scale and min of sub-block j of a Q4_K/Q5_K block (quant_kscale_unpack). */
static __device__ __forceinline__ void kscale(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

/* Q4_K and Q5_K share the layout of the 4 low bits: chunk c = 64 values, low
 * nibbles of qs[32c..32c+31] then their high nibbles.  HAS_QH adds Q5_K's
 * fifth bit: bit 2c (+1 for the high half) of qh[value % 32].  Blocks are 144
 * and 176 bytes (multiples of 16), so the 8 bytes a group reads are 8-aligned. */
template <int HAS_QH> struct dec_kq {
    enum { QK = QK_K, BYTES = HAS_QH ? sizeof(block_q5_K) : sizeof(block_q4_K) };
    enum { QS = HAS_QH ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        int e = 8 * g, c = e / 64, hi = (e % 64) >= 32, l = e % 32, sc, m;
        uint2 q = lb_load8<8>(b + QS + 32 * c + l), qh = make_uint2(0, 0);
        if (HAS_QH) qh = lb_load8<8>(b + offsetof(block_q5_K, qh) + l);
        kscale(b + offsetof(block_q4_K, scales), e / 32, &sc, &m);
        float dl = lb_half(b) * (float)sc, ml = lb_half(b + offsetof(block_q4_K, dmin)) * (float)m;
        int bit = 2 * c + hi;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int x = (int)(lb_byte(q, i) >> (4 * hi) & 15);
            if (HAS_QH) x |= (int)(lb_byte(qh, i) >> bit & 1) << 4;
            v[i] = dl * (float)x - ml;
        }
    }
};

struct dec_q6_K { /* ql[128], qh[64], scales[16] int8, d: see quant_blocks.h; 210 bytes */
    enum { QK = QK_K, BYTES = sizeof(block_q6_K) };
    static __device__ __forceinline__ void decode8(const uint8_t *b, int g, float v[8])
    {
        int e = 8 * g, h = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
        uint2 ql = lb_load8<2>(b + offsetof(block_q6_K, ql) + 64 * h + l + 32 * (quarter & 1)),
              qh = lb_load8<2>(b + offsetof(block_q6_K, qh) + 32 * h + l);
        float dl = lb_half(b + offsetof(block_q6_K, d)) * (float)((const int8_t *)(b + offsetof(block_q6_K, scales)))[e / 16];
        int nshift = quarter < 2 ? 0 : 4, hshift = 2 * quarter;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int x = (int)(lb_byte(ql, i) >> nshift & 15) | (int)(lb_byte(qh, i) >> hshift & 3) << 4;
            v[i] = dl * (float)(x - 32);
        }
    }
};

/* ---- the shared kernel ---- */

/* The warp's 32 partial sums of each x row added with shuffles; lane b
 * writes row b's result (y row b, column `row`). */
template <int NB>
static __device__ __forceinline__ void warp_store(float acc[NB], int nb, float *__restrict__ y, int n_rows, int row,
                                                  int lane)
{
#pragma unroll
    for (int b = 0; b < NB; b++) {
#pragma unroll
        for (int o = 16; o > 0; o /= 2) acc[b] += __shfl_xor_sync(0xffffffffu, acc[b], o);
    }
#pragma unroll
    for (int b = 0; b < NB; b++)
        if (b < nb && lane == b) y[(size_t)b * n_rows + row] = acc[b];
}

/* Row `row` of W times nb rows of x (one warp). */
template <typename D, int NB>
static __device__ __forceinline__ void matvec_row(const uint8_t *__restrict__ w, int n_rows, int n_cols,
                                                  const float *__restrict__ x, int nb, float *__restrict__ y, int row,
                                                  int lane)
{
    const int groups_per_block = D::QK / 8;
    const int n_groups = n_cols / 8;
    const uint8_t *wrow = w + (size_t)row * (size_t)(n_cols / D::QK) * D::BYTES;
    float acc[NB];
#pragma unroll
    for (int b = 0; b < NB; b++) acc[b] = 0.0f;
#pragma unroll 4
    for (int gi = lane; gi < n_groups; gi += 32) {
        float v[8];
        D::decode8(wrow + (size_t)(gi / groups_per_block) * D::BYTES, gi % groups_per_block, v);
#pragma unroll
        for (int b = 0; b < NB; b++) {
            if (b < nb) {
                const float4 *xp = (const float4 *)(x + (size_t)b * n_cols + 8 * gi);
                float4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
                float s = acc[b];
                s = fmaf(v[0], x0.x, s); s = fmaf(v[1], x0.y, s); s = fmaf(v[2], x0.z, s); s = fmaf(v[3], x0.w, s);
                s = fmaf(v[4], x1.x, s); s = fmaf(v[5], x1.y, s); s = fmaf(v[6], x1.z, s); s = fmaf(v[7], x1.w, s);
                acc[b] = s;
            }
        }
    }
    warp_store<NB>(acc, nb, y, n_rows, row, lane);
}

/* ---- the K-quants: eight lanes per 256-value block ----
 *
 * Decoding 8 values per lane (above) reads the K-quants' nibbles twice and
 * issues many narrow loads per weight byte: they ran at 0.7–1.0 TB/s of the
 * H200's 4.3.  Here lane j of a group of eight takes 32 values of one block
 * from 16 consecutive bytes of quants (one 16-byte load where the format is
 * 16-byte aligned: Q4_K, Q5_K; eight 2-byte loads for Q6_K's 210-byte
 * blocks), whose 16 low nibbles share one sub-block scale and whose 16 high
 * nibbles share another, so a sub-block's sum is d·sc·Σq·x − dmin·m·Σx: the
 * scales are applied twice per lane, not once per value.  A warp covers four
 * blocks of its row per step. */

/* Σ q·x and Σ x over 16 values: q = nibble (bits shift..shift+3 of each byte
 * of q[]) | hbits high bits (at hshift of each byte of qh[]) << 4. */
template <int NB, int HBITS>
static __device__ __forceinline__ void dot16(const uint32_t q[4], int shift, const uint32_t qh[4], int hshift,
                                             const float *x, int nb, int n_cols, float sq[NB], float sx[NB])
{
#pragma unroll
    for (int b = 0; b < NB; b++) {
        sq[b] = 0.0f, sx[b] = 0.0f;
        if (b < nb) {
            const float4 *xp = (const float4 *)(x + (size_t)b * n_cols);
#pragma unroll
            for (int wd = 0; wd < 4; wd++) {
                float4 xv = __ldg(xp + wd);
                float xs[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int c = (int)(q[wd] >> (8 * i + shift) & 15);
                    if (HBITS) c |= (int)(qh[wd] >> (8 * i + hshift) & ((1u << HBITS) - 1)) << 4;
                    sq[b] = fmaf((float)c, xs[i], sq[b]);
                    sx[b] += xs[i];
                }
            }
        }
    }
}

template <int HAS_QH, int NB>
static __device__ __forceinline__ void matvec_row_kq(const uint8_t *__restrict__ w, int n_rows, int n_cols,
                                                     const float *__restrict__ x, int nb, float *__restrict__ y, int row,
                                                     int lane)
{
    const int BYTES = dec_kq<HAS_QH>::BYTES, n_blocks = n_cols / QK_K, j = lane % 8;
    const int c = j / 2, l0 = 16 * (j % 2); /* 64-value chunk, and where in its 32 bytes */
    const uint8_t *wrow = w + (size_t)row * (size_t)n_blocks * BYTES;
    float acc[NB];
#pragma unroll
    for (int b = 0; b < NB; b++) acc[b] = 0.0f;
    for (int k = lane / 8; k < n_blocks; k += 4) {
        const uint8_t *blk = wrow + (size_t)k * BYTES;
        const uint4 qv = *(const uint4 *)(blk + dec_kq<HAS_QH>::QS + 32 * c + l0);
        uint4 hv = make_uint4(0, 0, 0, 0);
        if (HAS_QH) hv = *(const uint4 *)(blk + offsetof(block_q5_K, qh) + l0);
        const uint32_t dm = *(const uint32_t *)blk;
        const float d = __half2float(__ushort_as_half((unsigned short)(dm & 0xffffu)));
        const float dmin = __half2float(__ushort_as_half((unsigned short)(dm >> 16)));
        const uint32_t q[4] = {qv.x, qv.y, qv.z, qv.w}, qh[4] = {hv.x, hv.y, hv.z, hv.w};
        int sc_lo, m_lo, sc_hi, m_hi;
        kscale(blk + offsetof(block_q4_K, scales), 2 * c, &sc_lo, &m_lo);
        kscale(blk + offsetof(block_q4_K, scales), 2 * c + 1, &sc_hi, &m_hi);
        const float *xb = x + (size_t)k * QK_K + 64 * c + l0;
        float sq[NB], sx[NB];
        dot16<NB, HAS_QH>(q, 0, qh, 2 * c, xb, nb, n_cols, sq, sx);
#pragma unroll
        for (int b = 0; b < NB; b++) acc[b] += d * (float)sc_lo * sq[b] - dmin * (float)m_lo * sx[b];
        dot16<NB, HAS_QH>(q, 4, qh, 2 * c + 1, xb + 32, nb, n_cols, sq, sx);
#pragma unroll
        for (int b = 0; b < NB; b++) acc[b] += d * (float)sc_hi * sq[b] - dmin * (float)m_hi * sx[b];
    }
    warp_store<NB>(acc, nb, y, n_rows, row, lane);
}

/* 16 bytes at a 2-byte aligned p, as four little-endian words. */
static __device__ __forceinline__ void load16_a2(const uint8_t *p, uint32_t v[4])
{
    const unsigned short *h = (const unsigned short *)p;
#pragma unroll
    for (int i = 0; i < 4; i++) v[i] = (uint32_t)h[2 * i] | (uint32_t)h[2 * i + 1] << 16;
}

/* Q6_K: lane j of eight takes ql bytes 16j..16j+15 of its block: half h = j/4
 * (128 values), o = 16·(j%4); low nibbles are values 128h+o+i, high nibbles
 * 128h+o+64+i, their two high bits in qh[32h + o%32 + i] at 2·(o/32) and
 * 2·(o/32)+4; one scale per 16 values. */
template <int NB>
static __device__ __forceinline__ void matvec_row_q6k(const uint8_t *__restrict__ w, int n_rows, int n_cols,
                                                      const float *__restrict__ x, int nb, float *__restrict__ y, int row,
                                                      int lane)
{
    const int BYTES = sizeof(block_q6_K), n_blocks = n_cols / QK_K, j = lane % 8, h = j / 4, o = 16 * (j % 4);
    const uint8_t *wrow = w + (size_t)row * (size_t)n_blocks * BYTES;
    float acc[NB];
#pragma unroll
    for (int b = 0; b < NB; b++) acc[b] = 0.0f;
    for (int k = lane / 8; k < n_blocks; k += 4) {
        const uint8_t *blk = wrow + (size_t)k * BYTES;
        uint32_t q[4], qh[4];
        load16_a2(blk + offsetof(block_q6_K, ql) + 64 * h + o, q);
        load16_a2(blk + offsetof(block_q6_K, qh) + 32 * h + o % 32, qh);
        const float d = lb_half(blk + offsetof(block_q6_K, d));
        const int8_t *sc = (const int8_t *)(blk + offsetof(block_q6_K, scales));
        const float s_lo = d * (float)sc[8 * h + o / 16], s_hi = d * (float)sc[8 * h + o / 16 + 4];
        const float *xb = x + (size_t)k * QK_K + 128 * h + o;
        float sq[NB], sx[NB];
        dot16<NB, 2>(q, 0, qh, 2 * (o / 32), xb, nb, n_cols, sq, sx);
#pragma unroll
        for (int b = 0; b < NB; b++) acc[b] += s_lo * (sq[b] - 32.0f * sx[b]);
        dot16<NB, 2>(q, 4, qh, 2 * (o / 32) + 4, xb + 64, nb, n_cols, sq, sx);
#pragma unroll
        for (int b = 0; b < NB; b++) acc[b] += s_hi * (sq[b] - 32.0f * sx[b]);
    }
    warp_store<NB>(acc, nb, y, n_rows, row, lane);
}

/* The row function of a format: the K-quants' own, the generic one for the rest. */
template <typename D, int NB> struct row_of {
    static __device__ __forceinline__ void run(const uint8_t *w, int n_rows, int n_cols, const float *x, int nb, float *y,
                                               int row, int lane)
    {
        matvec_row<D, NB>(w, n_rows, n_cols, x, nb, y, row, lane);
    }
};
template <int H, int NB> struct row_of<dec_kq<H>, NB> {
    static __device__ __forceinline__ void run(const uint8_t *w, int n_rows, int n_cols, const float *x, int nb, float *y,
                                               int row, int lane)
    {
        matvec_row_kq<H, NB>(w, n_rows, n_cols, x, nb, y, row, lane);
    }
};
template <int NB> struct row_of<dec_q6_K, NB> {
    static __device__ __forceinline__ void run(const uint8_t *w, int n_rows, int n_cols, const float *x, int nb, float *y,
                                               int row, int lane)
    {
        matvec_row_q6k<NB>(w, n_rows, n_cols, x, nb, y, row, lane);
    }
};

template <typename D, int NB>
__global__ void __launch_bounds__(32 * WARPS_PER_BLOCK)
matvec_kernel(const uint8_t *__restrict__ w, int n_rows, int n_cols, const float *__restrict__ x, int nb,
              float *__restrict__ y)
{
    int row = blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= n_rows) return;
    row_of<D, NB>::run(w, n_rows, n_cols, x, nb, y, row, lane);
}

/* Expert pairs: pair p = p0 + blockIdx.y multiplies matrix slot[eid[p]] (at
 * slot · mat_bytes; skipped when the slot is < 0) by x row p / xdiv into y row p. */
template <typename D>
__global__ void __launch_bounds__(32 * WARPS_PER_BLOCK)
matvec_pairs_kernel(const uint8_t *__restrict__ w, size_t mat_bytes, int n_rows, int n_cols, const float *__restrict__ x,
                    int xdiv, const int32_t *eid, const int32_t *slot, int p0, float *__restrict__ y)
{
    int row = blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    const int p = p0 + (int)blockIdx.y;
    const int s = slot[eid[p]];
    if (row >= n_rows || s < 0) return;
    row_of<D, 1>::run(w + (size_t)s * mat_bytes, n_rows, n_cols, x + (size_t)(p / xdiv) * n_cols, 1,
                     y + (size_t)p * n_rows, row, lane);
}

/* ---- launchers ---- */

static int fail(char *err, size_t err_len, int code, const char *what, const char *detail)
{
    if (err && err_len) snprintf(err, err_len, "%s: %s", what, detail);
    return code;
}

/* A grid format launched before gw_cuda_matvec_init copied its codebooks. */
static bool codebooks_missing(int t, const char *what, char *err, size_t err_len)
{
    if (!lb_needs_codebooks(t) || lb_codebooks_ready) return false;
    fail(err, err_len, GW_CUDA_EINVAL, what, "the IQ codebooks are not on the device (gw_cuda_matvec_init)");
    return true;
}

template <typename D, int T>
static int launch(const void *w, int n_rows, int n_cols, const float *x, int nb, float *y,
                  void *stream, char *err, size_t err_len)
{
    char name[32], why[128];
    snprintf(name, sizeof name, "matvec %s", quant_type_name((enum quant_type)T));
    if (codebooks_missing(T, name, err, err_len)) return GW_CUDA_EINVAL;
    if (!w || !x || !y || n_rows <= 0 || n_cols <= 0 || n_cols % D::QK || n_cols % 8 || nb < 1 ||
        nb > GW_CUDA_MAX_BATCH || ((uintptr_t)x & 15) || ((uintptr_t)w & 15)) {
        snprintf(why, sizeof why, "bad arguments (rows %d, cols %d: multiple of %d?, batch %d of 1..%d, x and w %s)",
                 n_rows, n_cols, (int)D::QK, nb, GW_CUDA_MAX_BATCH,
                 (((uintptr_t)x | (uintptr_t)w) & 15) ? "not both 16-byte aligned" : "aligned");
        return fail(err, err_len, GW_CUDA_EINVAL, name, why);
    }
    dim3 grid((unsigned)((n_rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK)), block(32 * WARPS_PER_BLOCK);
    cudaStream_t s = (cudaStream_t)stream;
    const uint8_t *wb = (const uint8_t *)w;
    /* The accumulators are registers indexed by constants: one instance per
     * batch width, the smallest that holds nb. */
    if (nb == 1) matvec_kernel<D, 1><<<grid, block, 0, s>>>(wb, n_rows, n_cols, x, nb, y);
    else if (nb <= 2) matvec_kernel<D, 2><<<grid, block, 0, s>>>(wb, n_rows, n_cols, x, nb, y);
    else if (nb <= 4) matvec_kernel<D, 4><<<grid, block, 0, s>>>(wb, n_rows, n_cols, x, nb, y);
    else if (nb <= 8) matvec_kernel<D, 8><<<grid, block, 0, s>>>(wb, n_rows, n_cols, x, nb, y);
    else matvec_kernel<D, 16><<<grid, block, 0, s>>>(wb, n_rows, n_cols, x, nb, y);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return fail(err, err_len, -(int)e, name, cudaGetErrorString(e));
    return 0;
}

template <typename D, int T>
static int launch_pairs(const void *w, size_t mat_bytes, int n_rows, int n_cols, const float *x, int xdiv,
                        const int32_t *eid, const int32_t *slot, int n_pairs, float *y, void *stream, char *err,
                        size_t err_len)
{
    if (!w || !x || !y || !eid || !slot || n_rows <= 0 || n_cols <= 0 || n_cols % D::QK || n_cols % 8 || xdiv < 1 ||
        ((uintptr_t)x & 15) || ((uintptr_t)w & 15) || (mat_bytes & 15))
        return fail(err, err_len, GW_CUDA_EINVAL, "matvec pairs", "bad arguments");
    if (codebooks_missing(T, "matvec pairs", err, err_len)) return GW_CUDA_EINVAL;
    cudaStream_t s = (cudaStream_t)stream;
    for (int p0 = 0; p0 < n_pairs; p0 += 65535) { /* grid.y limit */
        const int np = n_pairs - p0 < 65535 ? n_pairs - p0 : 65535;
        dim3 grid((unsigned)((n_rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK), (unsigned)np), block(32 * WARPS_PER_BLOCK);
        matvec_pairs_kernel<D><<<grid, block, 0, s>>>((const uint8_t *)w, mat_bytes, n_rows, n_cols, x, xdiv, eid, slot,
                                                      p0, y);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return fail(err, err_len, -(int)e, "matvec pairs", cudaGetErrorString(e));
    }
    return 0;
}

/* ---- the table of entry points, one row per type of cuda_types.h ---- */

struct no_fast_kernel; /* a row without a fast kernel: the reference kernels only */

typedef int (*gw_cuda_matvec_pairs_fn)(const void *w, size_t mat_bytes, int n_rows, int n_cols, const float *x,
                                       int xdiv, const int32_t *eid, const int32_t *slot, int n_pairs, float *y,
                                       void *stream, char *err, size_t err_len);

template <typename D, int T> struct entry {
    static constexpr gw_cuda_matvec_fn matvec = launch<D, T>;
    static constexpr gw_cuda_matvec_pairs_fn pairs = launch_pairs<D, T>;
};
template <int T> struct entry<no_fast_kernel, T> {
    static constexpr gw_cuda_matvec_fn matvec = nullptr;
    static constexpr gw_cuda_matvec_pairs_fn pairs = nullptr;
};

struct kernel_table {
    gw_cuda_matvec_fn matvec[QT_COUNT];
    gw_cuda_matvec_pairs_fn pairs[QT_COUNT];
    constexpr kernel_table() : matvec(), pairs()
    {
#define ROW(t, D) matvec[t] = entry<D, t>::matvec, pairs[t] = entry<D, t>::pairs;
        GW_CUDA_TYPES(ROW)
#undef ROW
    }
};
static constexpr kernel_table k_kernels;

extern "C" int gw_cuda_matvec_init(char *err, size_t err_len)
{
    const cudaError_t e = lb_upload_codebooks();
    return e == cudaSuccess ? 0 : fail(err, err_len, -(int)e, "matvec: the IQ codebooks to the device", cudaGetErrorString(e));
}

extern "C" gw_cuda_matvec_fn gw_cuda_matvec_of(int ggml_type)
{
    return (unsigned)ggml_type < QT_COUNT ? k_kernels.matvec[ggml_type] : NULL;
}

extern "C" int gw_cuda_matvec_pairs(int ggml_type, const void *w, size_t mat_bytes, int n_rows, int n_cols,
                                    const float *x, int xdiv, const int32_t *eid, const int32_t *slot, int n_pairs,
                                    float *y, void *stream, char *err, size_t err_len)
{
    if (n_pairs <= 0) return 0;
    const gw_cuda_matvec_pairs_fn fn = (unsigned)ggml_type < QT_COUNT ? k_kernels.pairs[ggml_type] : NULL;
    if (!fn) return fail(err, err_len, GW_CUDA_EINVAL, "matvec pairs", "no kernel for this type");
    return fn(w, mat_bytes, n_rows, n_cols, x, xdiv, eid, slot, n_pairs, y, stream, err, err_len);
}
