/* qsa.cu — gated attention with the QSA block indexer on the device
 * (engine/cpu/qsa.c's twin): q/k norms and RoPE, K/V into the cache, the
 * indexer's block keys, scores and top-k (the CPU's tie rule: the lower
 * block), and attention over the kept blocks plus the incomplete tail —
 * those kernels in attn.cu: with the fast kernels a step or a verify window
 * (≤ GW_VERIFY_ROWS rows) attends with the split-K kernel, prefill batches
 * and the ref kernels with the reference one.
 *
 * Every launch has a dpos form: in a captured step or verify window the
 * first row's position is read on the device, so the same kernels serve
 * every position of a replayed graph (graph.cu); the buffers are bounded by
 * the K/V capacity. */
#include "gpu-worker/cuda/attn.h"
#include "gpu-worker/cuda/backend_cuda.h"
#include "gpu-worker/cuda/device.cuh"

/* dst row slot0 (+ *dpos) + t = src row t, for T rows of `width` (K/V and raw indexer keys into their caches). */
__global__ void k_store_rows(const float *src, int T, int64_t width, float *dst, int64_t slot0, const int64_t *dpos)
{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= (int64_t)T * width) return;
    const int64_t base = slot0 + (dpos ? *dpos : 0);
    dst[(base + idx / width) * width + idx % width] = src[idx];
}
/* ---------- attention and the QSA indexer ---------- */

/* Block key b = nb0 + blockIdx.x (cpu indexer_prepare): RMS(mean of its cr
 * raw keys)·w, rotated at position b·cr.  With dpos (a graph's one-token
 * step or window of T rows) the blocks are those that complete at positions
 * *dpos .. *dpos + T − 1, if any (grid T / cr + 1: blocks past them return).
 * Dynamic shared memory: Di floats. */
__global__ void k_block_key(const float *idx_k, int Di, int cr, int64_t nb0, const int64_t *dpos, int T, float *blk_k,
                            const float *w, float eps, int rope_dim, const float *cosv, const float *sinv)
{
    extern __shared__ float kb[];
    int64_t b = nb0 + blockIdx.x;
    if (dpos) {
        b = (*dpos + cr) / cr - 1 + blockIdx.x; /* the first block ending at *dpos or later */
        if (b > (*dpos + T) / cr - 1) return;
    }
    double ss = 0;
    for (int d = threadIdx.x; d < Di; d += blockDim.x) {
        double s = 0;
        for (int j = 0; j < cr; j++) s += idx_k[(b * cr + j) * Di + d];
        kb[d] = (float)(s / cr);
        ss += (double)kb[d] * kb[d];
    }
    ss = block_sum(ss);
    const float scale = (float)(1.0 / sqrt(ss / (double)Di + (double)eps));
    float *out = blk_k + b * Di;
    for (int d = threadIdx.x; d < Di; d += blockDim.x) out[d] = kb[d] * scale * w[d];
    __syncthreads();
    d_rope(out, rope_dim, cosv, sinv, b * cr);
}

/* ---------- the layer ---------- */

/* T rows at positions pos0 + t; K/V of the rows stored at slots slot0 + t of
 * (kc, vc); cr > 0: the QSA indexer over the layer's idx_k / blk_k (slot =
 * position).  dpos (a captured step or window): pos0 and slot0 are 0 and the
 * first row's position is read on the device; every launch is then the same
 * at every position (cap: the K/V capacity bounds the buffers).  A one-row
 * eval and a verify window attend with the fast kernels' split-K kernel; a
 * batch of other rows (prefill) with the reference kernel whatever its size,
 * so a prefill split anywhere gives the unsplit one's rows (the resume rule). */
int cu_attention(cuda_backend *be, const cu_layer *c, cu_lstate *ls, float *kc, float *vc, const float *x, int T,
                 int64_t pos0, int64_t slot0, int cr, const int64_t *dpos, int64_t cap, bool verify, float *y)
{
    const struct model_hparams *hp = &be->base.model->hp;
    const int Hq = hp->n_head, Hkv = hp->n_head_kv, D = hp->head_dim, Hi = hp->idx_n_head, Di = hp->idx_head_dim;
    const int64_t qw = (int64_t)Hq * D, kvw = (int64_t)Hkv * D, C = hp->n_embd, iw = (int64_t)Hi * Di;
    const int64_t n_ctx = dpos ? cap : slot0 + T; /* probabilities per (row, head) */
    cudaStream_t st = be->st;
    tmp t = tmp_begin(be);
    float *qg, *q, *att, *kt, *vt, *qi = NULL, *it = NULL, *scores = NULL, *keepf = NULL;
    int rc = cu_talloc(&t, &qg, T * 2 * qw);
    if (rc == 0) rc = cu_talloc(&t, &q, T * qw);
    if (rc == 0) rc = cu_talloc(&t, &att, T * qw);
    if (rc == 0) rc = cu_talloc(&t, &kt, T * kvw);
    if (rc == 0) rc = cu_talloc(&t, &vt, T * kvw);
    if (rc == 0) rc = cu_matmul(be, c->q, x, C, T, qg, 2 * qw);
    if (rc == 0) rc = cu_matmul(be, c->k, x, C, T, kt, kvw);
    if (rc == 0) rc = cu_matmul(be, c->v, x, C, T, vt, kvw);
    /* q: norm (from the interleaved q|gate rows) then rope; k: the same, then into the cache */
    if (rc == 0) {
        cu_rms_norm(dim3((unsigned)T, (unsigned)Hq), nthr(D), st, qg, 2 * qw, 2 * D, q, qw, D, D, c->q_norm, 0,
                    hp->rms_eps);
        rc = LCHK("k_rms_norm (q)");
    }
    if (rc == 0) rc = cu_rms_rows(st, kt, kvw, kt, kvw, T, D, Hkv, c->k_norm, 0, hp->rms_eps);
    if (rc == 0) rc = cu_rope(be, q, T, qw, Hq, D, pos0, 1, dpos);
    if (rc == 0) rc = cu_rope(be, kt, T, kvw, Hkv, D, pos0, 1, dpos);
    if (rc == 0) {
        k_store_rows<<<nblk(T * kvw, 256), 256, 0, st>>>(kt, T, kvw, kc, slot0, dpos);
        k_store_rows<<<nblk(T * kvw, 256), 256, 0, st>>>(vt, T, kvw, vc, slot0, dpos);
        rc = LCHK("k_store_rows (K/V)");
    }
    int64_t top = 0, bstride = 1;
    uint8_t *keep = NULL;
    if (rc == 0 && cr > 0) {
        rc = cu_talloc(&t, &qi, T * iw);
        if (rc == 0) rc = cu_talloc(&t, &it, T * Di);
        if (rc == 0) rc = cu_matmul(be, c->idx_q, x, C, T, qi, iw);
        if (rc == 0) rc = cu_matmul(be, c->idx_k, x, C, T, it, Di);
        if (rc == 0) {
            k_store_rows<<<nblk(T * Di, 256), 256, 0, st>>>(it, T, Di, ls->idx_k, pos0, dpos);
            rc = LCHK("k_store_rows (indexer keys)");
        }
        if (rc == 0) rc = cu_rms_rows(st, qi, iw, qi, iw, T, Di, Hi, c->idx_q_norm, 0, hp->rms_eps);
        if (rc == 0) rc = cu_rope(be, qi, T, iw, Hi, Di, pos0, 1, dpos);
        /* the block keys of the blocks this batch completes */
        const int64_t nb = dpos ? T / cr + 1 : (pos0 + T) / cr - ls->n_blk;
        if (rc == 0 && nb > 0) {
            k_block_key<<<(unsigned)nb, nthr(Di), (size_t)Di * sizeof(float), st>>>(
                ls->idx_k, Di, cr, ls->n_blk, dpos, T, ls->blk_k, c->idx_k_norm, hp->rms_eps, hp->rope_dim, be->d_cos,
                be->d_sin);
            rc = LCHK("k_block_key");
        }
        if (rc == 0 && !dpos && (pos0 + T) / cr > ls->n_blk) ls->n_blk = (pos0 + T) / cr; /* graphs: cu_decode_graph */
        top = hp->idx_top_k / cr;
        const int64_t B_all = dpos ? cap / cr : (pos0 + T) / cr; /* most complete blocks a row can have */
        bstride = B_all > 0 ? B_all : 1;
        if (rc == 0 && (dpos || B_all > top)) {
            rc = cu_talloc(&t, &scores, T * bstride);
            if (rc == 0) rc = cu_talloc(&t, &keepf, (T * bstride + 3) / 4);
            keep = (uint8_t *)keepf;
            /* row r scores only its own complete blocks (B_r = (pos0+r+1)/cr; on the device with dpos) */
            if (be->fast) {
                cu_block_scores_fast(st, T, qi, Hi, Di, ls->blk_k, bstride, scores, cr, top, pos0, dpos);
                rc = LCHK("k_block_scores_fast");
            }
            for (int r = 0; r < T && rc == 0 && !be->fast; r++) {
                const int64_t Br = dpos ? bstride : (pos0 + r + 1) / cr;
                if (!dpos && Br <= top) continue;
                cu_block_scores_ref(st, qi + r * iw, Hi, Di, ls->blk_k, Br, bstride, scores + r * bstride, cr, dpos, r);
                rc = LCHK("k_block_scores");
            }
            if (rc == 0) {
                cu_block_keep(st, T, scores, bstride, top, keep, cr, pos0, dpos);
                rc = LCHK("k_block_keep");
            }
        }
    }
    const struct cu_attn_args aa = {q, qg, 2 * qw, kc, vc, Hq, Hkv, D, slot0, pos0, cr, top, dpos, att};
    /* the fast kernels' split-K attention for a step or a verify window (its row's chunks independent of T);
     * else (the ref kernels, prefill batches, a shape past its shared memory) the reference */
    if (rc == 0 && be->fast && (T == 1 || (verify && T <= GW_VERIFY_ROWS)) && cu_flash_fits(Hq, Hkv, D)) {
        float *part, *listf = NULL;
        rc = cu_talloc(&t, &part, cu_flash_part_floats(T, Hq, D));
        if (rc == 0 && keep) rc = cu_talloc(&t, &listf, T * (top > 0 ? top : 1));
        if (rc == 0 && keep) {
            cu_keep_list(st, T, keep, bstride, top, cr, pos0, dpos, (int32_t *)listf);
            rc = LCHK("k_keep_list");
        }
        if (rc == 0) {
            cu_flash_attend(st, T, &aa, (const int32_t *)listf, part);
            rc = LCHK("k_flash_split/combine");
        }
    } else if (rc == 0) {
        /* attention in row groups so that the probabilities stay under 64 Mi floats */
        int G = (int)(((int64_t)64 << 20) / ((int64_t)Hq * n_ctx));
        G = G < 1 ? 1 : G > T ? T : G;
        float *p;
        rc = cu_talloc(&t, &p, (int64_t)G * Hq * n_ctx);
        for (int r0 = 0; r0 < T && rc == 0; r0 += G) {
            const int nr = T - r0 < G ? T - r0 : G;
            struct cu_attn_args ar = aa;
            ar.q = q + r0 * qw, ar.qg = qg + r0 * 2 * qw, ar.slot0 = slot0 + r0, ar.pos0 = pos0 + r0;
            ar.out = att + r0 * qw;
            cu_attend_ref(st, nr, &ar, keep ? keep + r0 * bstride : NULL, bstride, p, n_ctx);
            rc = LCHK("k_attend");
        }
    }
    if (rc == 0) rc = cu_matmul(be, c->o, att, qw, T, y, C);
    return cu_tdone(&t, rc);
}
