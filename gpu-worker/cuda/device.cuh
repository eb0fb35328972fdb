/* device.cuh — the device helpers the CUDA backend's reference kernels
 * share: block reductions, the scalar activations, the RoPE rotation.
 * Inline in every .cu file that includes it (no relocatable device code).
 *
 * Every kernel of the backend (gdn.cu, qsa.cu, ple.cu, moe.cu, hc.cu,
 * linalg.cu, forward.cu, mailbox.cu) follows the CPU reference
 * (engine/cpu/) operation for operation: weights are decoded to fp32
 * exactly as quant_ref.c decodes them, dot products and reductions
 * accumulate in double where the reference does, and results are rounded to
 * float where it rounds.  The files are compiled with --fmad=false (the
 * Makefile) so that no multiply-add is fused that the CPU rounds twice.
 * What differs is only the order of double-precision sums (a parallel
 * reduction instead of the CPU's four running sums), which almost never
 * changes the float that results: logits agree with the reference to ~1e-7
 * relative, and greedy generation token for token.  Transcendentals the CPU
 * evaluates in float (powf, cosf, sinf for RoPE) are taken from host tables
 * made with the same libm calls; the others are evaluated in double on both
 * sides and rounded to float.
 *
 * Speed is not the point of these kernels (matvec.cu's are the fast ones):
 * one block per output row (and per 8 activation rows) for matrices, one
 * thread per value of a GDN state column, one block per (query row, head)
 * for attention. */
#ifndef NB_GW_CUDA_DEVICE_CUH
#define NB_GW_CUDA_DEVICE_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

/* ---------- reductions ---------- */

static __device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets it. */
static __device__ __forceinline__ double block_sum(double v)
{
    __shared__ double part[32];
    __shared__ double total;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* part[] may still be read by a previous call */
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        double s = lane < (int)(blockDim.x >> 5) ? part[lane] : 0.0;
        s = warp_sum(s);
        if (lane == 0) total = s;
    }
    __syncthreads();
    return total;
}

static __device__ __forceinline__ float block_max(float v)
{
    __shared__ float part[32];
    __shared__ float total;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float s = lane < (int)(blockDim.x >> 5) ? part[lane] : -INFINITY;
        for (int o = 16; o > 0; o >>= 1) s = fmaxf(s, __shfl_down_sync(0xffffffffu, s, o));
        if (lane == 0) total = s;
    }
    __syncthreads();
    return total;
}

static __device__ __forceinline__ float d_sigmoid(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }
static __device__ __forceinline__ float d_silu(float x) { return (float)((double)x / (1.0 + exp(-(double)x))); }
static __device__ __forceinline__ float d_softplus(float x) { return x > 20.0f ? x : (float)log1p(exp((double)x)); }

/* ---------- RoPE ---------- */

/* NeoX RoPE of the first rope_dim values of v at position pos, with the
 * host's cos/sin tables (half per position). */
static __device__ __forceinline__ void d_rope(float *v, int rope_dim, const float *cosv, const float *sinv, int64_t pos)
{
    const int half = rope_dim / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        double c = cosv[pos * half + i], s = sinv[pos * half + i];
        double a = v[i], b = v[i + half];
        v[i] = (float)(a * c - b * s);
        v[i + half] = (float)(b * c + a * s);
    }
}

#endif
