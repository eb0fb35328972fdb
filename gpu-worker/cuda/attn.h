/* attn.h — launchers of the attention kernels (attn.cu): the QSA indexer's
 * block scores and top-k, and attention over the kept positions — the
 * reference kernel (`k_attend`, one block per row and head, a probability
 * per visible position) and the split-K one for one-row evals and verify
 * windows of up to GW_VERIFY_ROWS rows (flash-decoding: positions in chunks
 * across blocks, an online softmax per chunk, then a combine).  Plain device pointers only, so that
 * tests/cuda/check_attn.cu builds attn.cu alone; qsa.cu calls them.
 *
 * Rows: row t of a launch is at position pos0 + t and sees the cache slots
 * 0 .. slot0 + t; with dpos (a captured step) *dpos is added to both on the
 * device.  With cr > 0 (the indexer) the row's complete blocks are
 * B = (pos + 1) / cr; when B > top only the `top` best blocks and the
 * incomplete tail are attended. */
#ifndef NB_GW_CUDA_ATTN_H
#define NB_GW_CUDA_ATTN_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "engine/vram.h" /* GW_ATTN_SPLITS, GW_VERIFY_ROWS */

/* One attention launch: queries q (T × Hq × D), the gates in qg (row stride
 * qg_rs, head h's at h·2D + D), the K/V cache (slot i's head g at
 * i·Hkv·D + g·D), the outputs out (T × Hq × D, × sigmoid(gate)). */
struct cu_attn_args {
    const float *q, *qg;
    int64_t qg_rs;
    const float *kc, *vc;
    int Hq, Hkv, D;
    int64_t slot0, pos0;
    int cr;
    int64_t top;
    const int64_t *dpos;
    float *out;
};

/* The reference: grid (T, Hq), p holds pstride ≥ visible-slots floats a
 * (row, head); keep: T rows of bstride flags (a kept block), NULL: dense. */
void cu_attend_ref(cudaStream_t st, int T, const struct cu_attn_args *a, const uint8_t *keep, int64_t bstride,
                   float *p, int64_t pstride);

/* Split-K: whether the shape fits its shared memory (else: the reference);
 * the floats of its partial results for T rows; the launch (the split
 * kernel then the combine).  list: per sparse row its `top` kept block
 * indices in ascending order, a row every `top` ints (cu_keep_list).  A
 * row's chunks depend only on its own position and selection, never on T,
 * so a row of a window is bit-identical to the one-row step at its position. */
bool cu_flash_fits(int Hq, int Hkv, int D);
int64_t cu_flash_part_floats(int T, int Hq, int D);
void cu_flash_attend(cudaStream_t st, int T, const struct cu_attn_args *a, const int32_t *list, float *part);

/* The indexer.  Scores of one row's blocks (reference: one thread a block,
 * one launch a row: B blocks at scores; dpos: the row at *dpos + row, B = (*dpos + row + 1) / cr). */
void cu_block_scores_ref(cudaStream_t st, const float *qi, int Hi, int Di, const float *blk_k, int64_t B,
                         int64_t bstride, float *scores, int cr, const int64_t *dpos, int64_t row);
/* Every row's scores in one launch (a warp a block; rows with B ≤ top skipped), rows bstride apart. */
void cu_block_scores_fast(cudaStream_t st, int T, const float *qi, int Hi, int Di, const float *blk_k, int64_t bstride,
                          float *scores, int cr, int64_t top, int64_t pos0, const int64_t *dpos);
/* keep[t][b] = 1 for the `top` best blocks of each sparse row (ties to the lower index; exact: a rank count). */
void cu_block_keep(cudaStream_t st, int T, const float *scores, int64_t bstride, int64_t top, uint8_t *keep, int cr,
                   int64_t pos0, const int64_t *dpos);
/* The kept blocks of each sparse row in ascending order into list (`top` ints a row). */
void cu_keep_list(cudaStream_t st, int T, const uint8_t *keep, int64_t bstride, int64_t top, int cr, int64_t pos0,
                  const int64_t *dpos, int32_t *list);

#endif
