/* attn.cu — attention and the QSA indexer's selection on the device (attn.h
 * says what each launcher takes; qsa.cu runs the layer around them).
 *
 * Two attention kernels.  `k_attend`, the reference, follows the CPU
 * (engine/cpu/qsa.c's attend_row) in double: one block per (row, head) walks
 * every visible position three times through a probability buffer of that
 * many floats — bit-faithful, but 24 blocks for a decode step on 132 SMs,
 * each serial over the context; prefill batches keep it (qsa.cu).  The
 * split-K one (flash-decoding) is the fast kernels' form for one-row evals
 * (decode steps, MTP drafts) and verify windows of up to GW_VERIFY_ROWS
 * rows: a row's attended positions (all of them, or the kept blocks' and
 * the tail's, in ascending order through a compact list) are cut into at
 * most GW_ATTN_SPLITS chunks;
 * a block takes one chunk of one row for the query heads of one KV head
 * (GQA: the K/V tile is read once for them), keeps an online softmax
 * (running max, sum, unnormalised weighted V) in fp32, and writes its
 * partial; a combine kernel weighs a row's partials in chunk order.  The
 * chunking depends only on the row's own count of attended positions (its
 * position and selection), so a row of a verify window is computed exactly
 * as the one-row decode step at its position: bit-identical.  No buffer
 * grows with the context: GW_ATTN_SPLITS × (D + 2) floats a (row, head).
 *
 * The indexer: the reference scores (one thread a block, double) and the
 * fast ones (a warp a block, double: the CPU's float but for the order of a
 * double sum), and top-k as an exact rank count (a warp a block, ties to the
 * lower index) — the same keep flags whichever scores' kernel ran. */
#include "gpu-worker/cuda/attn.h"
#include "gpu-worker/cuda/device.cuh"

#define FL_TILE 16    /* positions a tile of the split kernel: its K, then V, in shared memory */
#define FL_THREADS 256
#define FL_SMEM_MAX (48 * 1024)

static unsigned blocks_of(int64_t n, int b) { return (unsigned)((n + b - 1) / b); }
static int threads_for(int64_t n)
{
    int t = (int)((n + 31) / 32 * 32);
    return t < 32 ? 32 : t > 256 ? 256 : t;
}

/* ---------- the indexer ---------- */

/* Scores of the B blocks for query row t: Σ_h ReLU(q_h·K_b)/√Di.  With dpos
 * (the row at position *dpos + row) B = (*dpos + row + 1) / cr. */
__global__ void k_block_scores(const float *qi, int Hi, int Di, const float *blk_k, int64_t B, int64_t bstride,
                               float *scores, int cr, const int64_t *dpos, int64_t row)
{
    const int t = blockIdx.y;
    const int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (dpos) B = (*dpos + row + 1) / cr;
    if (b >= B) return;
    const double inv = 1.0 / sqrt((double)Di);
    double s = 0;
    for (int h = 0; h < Hi; h++) {
        const float *qh = qi + ((int64_t)t * Hi + h) * Di, *kb = blk_k + b * Di;
        double d = 0;
        for (int i = 0; i < Di; i++) d += (double)qh[i] * kb[i];
        s += d > 0 ? d : 0;
    }
    scores[t * bstride + b] = (float)(s * inv);
}

void cu_block_scores_ref(cudaStream_t st, const float *qi, int Hi, int Di, const float *blk_k, int64_t B,
                         int64_t bstride, float *scores, int cr, const int64_t *dpos, int64_t row)
{
    k_block_scores<<<blocks_of(B, 128), 128, 0, st>>>(qi, Hi, Di, blk_k, B, bstride, scores, cr, dpos, row);
}

/* The complete blocks of the row at pos, and whether it attends only its kept ones. */
static __device__ __forceinline__ int64_t row_blocks(int64_t pos, int cr) { return cr > 0 ? (pos + 1) / cr : 0; }

#define IX_WARPS 8
/* grid (⌈bstride / IX_WARPS⌉, T): warp w of block x scores block x·IX_WARPS + w of row y; dynamic
 * shared memory: the row's Hi·Di query floats. */
__global__ void k_block_scores_fast(const float *qi, int Hi, int Di, const float *blk_k, int64_t bstride,
                                    float *scores, int cr, int64_t top, int64_t pos0, const int64_t *dpos)
{
    extern __shared__ float qs[];
    const int t = blockIdx.y, lane = threadIdx.x & 31;
    const int64_t B = row_blocks(pos0 + t + (dpos ? *dpos : 0), cr);
    const int64_t b = (int64_t)blockIdx.x * IX_WARPS + (threadIdx.x >> 5);
    if (B <= top || (int64_t)blockIdx.x * IX_WARPS >= B) return; /* the whole block: dense row, or past it */
    for (int i = threadIdx.x; i < Hi * Di; i += blockDim.x) qs[i] = qi[(int64_t)t * Hi * Di + i];
    __syncthreads();
    if (b >= B) return;
    const float *kb = blk_k + b * Di;
    double s = 0;
    for (int h = 0; h < Hi; h++) {
        double d = 0;
        for (int i = lane; i < Di; i += 32) d += (double)qs[h * Di + i] * kb[i];
        d = warp_sum(d);
        s += d > 0 ? d : 0;
    }
    if (lane == 0) scores[t * bstride + b] = (float)(s * (1.0 / sqrt((double)Di)));
}

void cu_block_scores_fast(cudaStream_t st, int T, const float *qi, int Hi, int Di, const float *blk_k, int64_t bstride,
                          float *scores, int cr, int64_t top, int64_t pos0, const int64_t *dpos)
{
    k_block_scores_fast<<<dim3(blocks_of(bstride, IX_WARPS), (unsigned)T), 32 * IX_WARPS,
                          (size_t)Hi * Di * sizeof(float), st>>>(qi, Hi, Di, blk_k, bstride, scores, cr, top, pos0, dpos);
}

/* keep[t][b] = rank of block b < top, rank = the blocks scoring higher, or
 * equal with a lower index: a warp a block, its lanes over the others. */
__global__ void k_block_keep(const float *scores, int64_t bstride, int64_t top, uint8_t *keep, int cr, int64_t pos0,
                             const int64_t *dpos)
{
    const int t = blockIdx.y, lane = threadIdx.x & 31;
    const int64_t B = row_blocks(pos0 + t + (dpos ? *dpos : 0), cr);
    const int64_t b = (int64_t)blockIdx.x * IX_WARPS + (threadIdx.x >> 5);
    if (B <= top || b >= B) return;
    const float *s = scores + t * bstride;
    const float sb = s[b];
    unsigned n = 0;
    for (int64_t o = lane; o < B; o += 32) n += s[o] > sb || (s[o] == sb && o < b);
    for (int o = 16; o > 0; o >>= 1) n += __shfl_down_sync(0xffffffffu, n, o);
    if (lane == 0) keep[t * bstride + b] = (int64_t)n < top;
}

void cu_block_keep(cudaStream_t st, int T, const float *scores, int64_t bstride, int64_t top, uint8_t *keep, int cr,
                   int64_t pos0, const int64_t *dpos)
{
    k_block_keep<<<dim3(blocks_of(bstride, IX_WARPS), (unsigned)T), 32 * IX_WARPS, 0, st>>>(scores, bstride, top, keep,
                                                                                          cr, pos0, dpos);
}

/* list[t] = row t's kept blocks in ascending order (exactly `top` of them):
 * one block a row, a ballot and a prefix over the warps per 1024 blocks. */
__global__ void k_keep_list(const uint8_t *keep, int64_t bstride, int64_t top, int cr, int64_t pos0,
                            const int64_t *dpos, int32_t *list)
{
    __shared__ int wbase[32];
    __shared__ int tile_n;
    const int t = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int64_t B = row_blocks(pos0 + t + (dpos ? *dpos : 0), cr);
    if (B <= top) return;
    int32_t *out = list + (int64_t)t * top;
    int64_t run = 0;
    for (int64_t b0 = 0; b0 < B; b0 += blockDim.x) {
        const int64_t b = b0 + threadIdx.x;
        const bool kept = b < B && keep[t * bstride + b];
        const unsigned mask = __ballot_sync(0xffffffffu, kept);
        if (lane == 0) wbase[warp] = __popc(mask);
        __syncthreads();
        if (threadIdx.x == 0) {
            int a = 0;
            for (int w = 0; w < nw; w++) {
                const int c = wbase[w];
                wbase[w] = a, a += c;
            }
            tile_n = a;
        }
        __syncthreads();
        const int64_t at = run + wbase[warp] + __popc(mask & ((1u << lane) - 1));
        if (kept && at < top) out[at] = (int32_t)b;
        run += tile_n;
        __syncthreads(); /* wbase and tile_n are rewritten by the next tile */
    }
}

void cu_keep_list(cudaStream_t st, int T, const uint8_t *keep, int64_t bstride, int64_t top, int cr, int64_t pos0,
                  const int64_t *dpos, int32_t *list)
{
    k_keep_list<<<(unsigned)T, 1024, 0, st>>>(keep, bstride, top, cr, pos0, dpos, list);
}

/* ---------- attention: the reference ---------- */

/* One query row × one head: scores over the visible slots, softmax, weighted
 * values, × sigmoid(gate).  Row t sees slots 0..slot0+t, restricted (when
 * keep != NULL and the row has more than `top` complete blocks) to its kept
 * blocks plus its incomplete tail.  grid (rows, Hq); p holds pstride ≥ n_ctx
 * floats per (row, head). */
__global__ void k_attend(const float *q, const float *qg, int64_t qg_rs, const float *kc, const float *vc, int Hq,
                         int Hkv, int D, int64_t slot0, int64_t pos0, int cr, int64_t top, const uint8_t *keep,
                         int64_t bstride, float *p, int64_t pstride, float *out, const int64_t *dpos)
{
    if (dpos) slot0 += *dpos, pos0 += *dpos; /* a replayed graph: the position lives on the device */
    const int t = blockIdx.x, h = blockIdx.y, group = Hq / Hkv;
    const int64_t kvw = (int64_t)Hkv * D, kvo = (int64_t)(h / group) * D, last = slot0 + t;
    const float *qh = q + ((int64_t)t * Hq + h) * D;
    float *ph = p + ((int64_t)t * Hq + h) * pstride;
    bool sparse = false;
    int64_t B = 0;
    if (cr > 0) {
        const int64_t pos = pos0 + t;
        B = (pos + 1) / cr;
        sparse = B > top;
    }
    const uint8_t *kp = keep ? keep + (int64_t)t * bstride : NULL;
#define SELECTED(i) (!sparse || (i) >= B * cr || kp[(i) / cr])
    const double scale = 1.0 / sqrt((double)D);
    float mx = -INFINITY;
    for (int64_t i = threadIdx.x; i <= last; i += blockDim.x) {
        if (!SELECTED(i)) continue;
        const float *kk = kc + i * kvw + kvo;
        double d = 0;
        for (int a = 0; a < D; a++) d += (double)qh[a] * kk[a];
        float s = (float)(d * scale);
        ph[i] = s;
        mx = fmaxf(mx, s);
    }
    mx = block_max(mx);
    double sum = 0;
    for (int64_t i = threadIdx.x; i <= last; i += blockDim.x)
        if (SELECTED(i)) sum += exp((double)ph[i] - mx);
    sum = block_sum(sum);
    for (int64_t i = threadIdx.x; i <= last; i += blockDim.x)
        if (SELECTED(i)) ph[i] = (float)(exp((double)ph[i] - mx) / sum);
    __syncthreads();
    const float *gate = qg + (int64_t)t * qg_rs + (int64_t)h * 2 * D + D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        double acc = 0;
        for (int64_t i = 0; i <= last; i++)
            if (SELECTED(i)) acc += (double)ph[i] * vc[i * kvw + kvo + d];
        out[((int64_t)t * Hq + h) * D + d] = (float)acc * d_sigmoid(gate[d]);
    }
#undef SELECTED
}

void cu_attend_ref(cudaStream_t st, int T, const struct cu_attn_args *a, const uint8_t *keep, int64_t bstride,
                   float *p, int64_t pstride)
{
    k_attend<<<dim3((unsigned)T, (unsigned)a->Hq), 128, 0, st>>>(a->q, a->qg, a->qg_rs, a->kc, a->vc, a->Hq, a->Hkv,
                                                                 a->D, a->slot0, a->pos0, a->cr, a->top, keep, bstride,
                                                                 p, pstride, a->out, a->dpos);
}

/* ---------- attention: split-K ---------- */

/* Row t's attended positions: n_sel of them, indexed j = 0..n_sel-1 in
 * ascending slot order (sparse: the kept blocks' top·cr, then the tail),
 * cut into chunks of `chunk` (at least FL_TILE, at most GW_ATTN_SPLITS
 * chunks).  A function of the row's position and slot only. */
struct fl_row {
    int64_t last, n_sel, B, chunk;
    int nsplit;
    bool sparse;
};

static __device__ __forceinline__ fl_row fl_row_of(const cu_attn_args &a, int t)
{
    const int64_t dp = a.dpos ? *a.dpos : 0;
    fl_row r;
    r.last = a.slot0 + dp + t;
    r.B = row_blocks(a.pos0 + dp + t, a.cr);
    r.sparse = a.cr > 0 && r.B > a.top;
    r.n_sel = r.sparse ? a.top * a.cr + (r.last + 1 - r.B * a.cr) : r.last + 1;
    const int64_t c = (r.n_sel + GW_ATTN_SPLITS - 1) / GW_ATTN_SPLITS;
    r.chunk = c < FL_TILE ? FL_TILE : c;
    r.nsplit = (int)((r.n_sel + r.chunk - 1) / r.chunk);
    return r;
}

/* The slot of attended position j of a row (list: its kept blocks). */
static __device__ __forceinline__ int64_t fl_slot(const fl_row &r, int64_t j, int cr, int64_t top, const int32_t *list)
{
    if (!r.sparse) return j;
    const int64_t kept = top * cr;
    return j < kept ? (int64_t)list[j / cr] * cr + j % cr : r.B * cr + (j - kept);
}

/* Shared floats of a block: the group's queries and accumulators (G·D each), the K/V tile, the tile's weights. */
static int64_t fl_smem_floats(int G, int D) { return 2 * (int64_t)G * D + (int64_t)FL_TILE * D + (int64_t)G * FL_TILE + 3 * G; }

bool cu_flash_fits(int Hq, int Hkv, int D)
{
    if (Hkv <= 0 || Hq % Hkv || D <= 0) return false;
    return fl_smem_floats(Hq / Hkv, D) * (int64_t)sizeof(float) <= FL_SMEM_MAX;
}

int64_t cu_flash_part_floats(int T, int Hq, int D) { return (int64_t)T * Hq * GW_ATTN_SPLITS * (D + 2); }

/* grid (GW_ATTN_SPLITS, T, Hkv): chunk x of row y for the G query heads of KV head z.  part: the
 * unnormalised sums (T·Hq·GW_ATTN_SPLITS rows of D), then each one's (max, sum of weights). */
__global__ void __launch_bounds__(FL_THREADS) k_flash_split(cu_attn_args a, const int32_t *list, float *part)
{
    extern __shared__ float sm[];
    __shared__ int64_t slot[FL_TILE];
    const int s = blockIdx.x, t = blockIdx.y, g = blockIdx.z, G = a.Hq / a.Hkv, D = a.D;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const fl_row r = fl_row_of(a, t);
    if (s >= r.nsplit) return;
    float *qs = sm, *acc = qs + G * D, *kv = acc + G * D, *w = kv + FL_TILE * D, *mx = w + G * FL_TILE, *sum = mx + G,
          *fac = sum + G;
    const int64_t kvw = (int64_t)a.Hkv * D, kvo = (int64_t)g * D;
    const float *qrow = a.q + ((int64_t)t * a.Hq + (int64_t)g * G) * D;
    for (int i = threadIdx.x; i < G * D; i += blockDim.x) qs[i] = qrow[i], acc[i] = 0.0f;
    if (threadIdx.x < G) mx[threadIdx.x] = -INFINITY, sum[threadIdx.x] = 0.0f;
    const float scale = (float)(1.0 / sqrt((double)D));
    const int32_t *lp = list ? list + (int64_t)t * a.top : NULL;
    const int64_t j1 = (s + 1) * r.chunk < r.n_sel ? (s + 1) * r.chunk : r.n_sel;
    for (int64_t j0 = s * r.chunk; j0 < j1; j0 += FL_TILE) {
        const int n = j1 - j0 < FL_TILE ? (int)(j1 - j0) : FL_TILE;
        if (threadIdx.x < n) slot[threadIdx.x] = fl_slot(r, j0 + threadIdx.x, a.cr, a.top, lp);
        __syncthreads();
        for (int i = threadIdx.x; i < n * D; i += blockDim.x) kv[i] = a.kc[slot[i / D] * kvw + kvo + i % D];
        __syncthreads();
        /* scores: a warp a (position, head) pair, heads of one position on neighbouring warps */
        for (int pr = warp; pr < n * G; pr += nw) {
            const int i = pr / G, h = pr % G;
            float d = 0.0f;
            for (int k = lane; k < D; k += 32) d = fmaf(qs[h * D + k], kv[i * D + k], d);
            for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
            if (lane == 0) w[h * FL_TILE + i] = d * scale;
        }
        __syncthreads();
        if (threadIdx.x < G) { /* the online softmax of head h over this tile */
            const int h = threadIdx.x;
            float m = mx[h];
            for (int i = 0; i < n; i++) m = fmaxf(m, w[h * FL_TILE + i]);
            const float f = expf(mx[h] - m);
            float l = 0.0f;
            for (int i = 0; i < n; i++) {
                const float e = expf(w[h * FL_TILE + i] - m);
                w[h * FL_TILE + i] = e, l += e;
            }
            sum[h] = fmaf(sum[h], f, l), mx[h] = m, fac[h] = f;
        }
        for (int i = threadIdx.x; i < n * D; i += blockDim.x) kv[i] = a.vc[slot[i / D] * kvw + kvo + i % D];
        __syncthreads();
        for (int d = threadIdx.x; d < D; d += blockDim.x)
            for (int h = 0; h < G; h++) {
                float v = acc[h * D + d] * fac[h];
                for (int i = 0; i < n; i++) v = fmaf(w[h * FL_TILE + i], kv[i * D + d], v);
                acc[h * D + d] = v;
            }
        __syncthreads();
    }
    const int64_t row0 = ((int64_t)t * a.Hq + (int64_t)g * G) * GW_ATTN_SPLITS + s; /* head g·G's partial */
    for (int i = threadIdx.x; i < G * D; i += blockDim.x)
        part[(row0 + (int64_t)(i / D) * GW_ATTN_SPLITS) * D + i % D] = acc[i];
    float *ml = part + (int64_t)gridDim.y * a.Hq * GW_ATTN_SPLITS * D;
    if (threadIdx.x < G) {
        ml[2 * (row0 + (int64_t)threadIdx.x * GW_ATTN_SPLITS)] = mx[threadIdx.x];
        ml[2 * (row0 + (int64_t)threadIdx.x * GW_ATTN_SPLITS) + 1] = sum[threadIdx.x];
    }
}

/* grid (T, Hq): row x's head y from its chunks' partials in chunk order, × sigmoid(gate). */
__global__ void k_flash_combine(cu_attn_args a, const float *part)
{
    __shared__ float wt[GW_ATTN_SPLITS];
    __shared__ float total;
    const int t = blockIdx.x, h = blockIdx.y, D = a.D;
    const fl_row r = fl_row_of(a, t);
    const int64_t row0 = ((int64_t)t * a.Hq + h) * GW_ATTN_SPLITS;
    const float *ml = part + (int64_t)gridDim.x * a.Hq * GW_ATTN_SPLITS * D + 2 * row0;
    if (threadIdx.x == 0) {
        float m = -INFINITY, l = 0.0f;
        for (int s = 0; s < r.nsplit; s++) m = fmaxf(m, ml[2 * s]);
        for (int s = 0; s < r.nsplit; s++) {
            wt[s] = expf(ml[2 * s] - m);
            l = fmaf(ml[2 * s + 1], wt[s], l);
        }
        total = l;
    }
    __syncthreads();
    const float *gate = a.qg + (int64_t)t * a.qg_rs + (int64_t)h * 2 * D + D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < r.nsplit; s++) v = fmaf(wt[s], part[(row0 + s) * D + d], v);
        a.out[((int64_t)t * a.Hq + h) * D + d] = v / total * d_sigmoid(gate[d]);
    }
}

void cu_flash_attend(cudaStream_t st, int T, const struct cu_attn_args *a, const int32_t *list, float *part)
{
    const int G = a->Hq / a->Hkv;
    k_flash_split<<<dim3(GW_ATTN_SPLITS, (unsigned)T, (unsigned)a->Hkv), FL_THREADS,
                    (size_t)fl_smem_floats(G, a->D) * sizeof(float), st>>>(*a, list, part);
    k_flash_combine<<<dim3((unsigned)T, (unsigned)a->Hq), threads_for(a->D), 0, st>>>(*a, part);
}
