/* vram.h — the CUDA backend's device memory, planned on the host.
 *
 * What a CUDA backend's device memory is made of (dense weights, MTP
 * weights, one sequence's K/V and state, the local experts' slots, scratch)
 * and the budget check of `--vram-budget`.  Plain C, no device: the CUDA
 * backend sizes every block it allocates with these functions, and the
 * gpu-worker process and nebula-prepare plan with the same ones, so the
 * check made before anything is uploaded and the backend's own agree
 * (engine/vram.c says how). */
#ifndef NB_ENGINE_VRAM_H
#define NB_ENGINE_VRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct model;


/* The parts a CUDA backend's device memory is made of, in bytes. */
struct gw_vram_parts {
    uint64_t dense;   /* trunk weights except routed experts, embeddings, head, PLE table; the slot tables */
    uint64_t mtp;     /* the MTP block's weights except its routed experts */
    uint64_t kv;      /* one sequence's state for n_ctx positions (K/V, indexer keys, GDN and PLE state, MTP K/V, the
                       * verify checkpoint), RoPE tables */
    uint64_t slots;   /* the local experts' slots */
    uint64_t scratch; /* the decode graph's arena, a prefill chunk's temporaries, the driver's rounding and own use */
    int64_t n_ctx, n_slots;
    /* gw_vram_plan: the matrices of a type the device has no decoder for
     * (cuda_types.h), held widened to F32 — how many, and the first one's
     * tensor name and type, which the over-budget message names */
    int64_t n_widened;
    const char *widened_name;
    int widened_type;
};
enum gw_vram_part { GW_PART_DENSE, GW_PART_MTP, GW_PART_KV, GW_PART_SLOTS, GW_PART_SCRATCH };
/* The CUDA backend's device memory is a few blocks, one cudaMalloc each (the
 * dense weights, the slots, a sequence's fixed state, its K/V, the MTP K/V,
 * the RoPE tables, the decode arena) with every array in them at a multiple
 * of GW_VRAM_ALIGN, plus the stream-ordered pool's temporaries.  The driver
 * maps a block in pages of up to GW_VRAM_PAGE: the plan pays one a block. */
#define GW_VRAM_ALIGN 256
#define GW_VRAM_PAGE ((uint64_t)2 << 20)
/* Positions past the context an MTP draft or a verify window reaches (the MTP K/V and RoPE tables provide for them). */
#define GW_VRAM_PAST_CTX 17
/* bytes rounded up to GW_VRAM_ALIGN. */
uint64_t gw_vram_align(uint64_t bytes);
/* Rows of logits the CUDA backend computes at a time (a prefill chunk's or a
 * verify window's head runs in sub-batches of this many rows; scratch counts it). */
#define GW_VRAM_HEAD_ROWS 32
/* Rows of one eval the scratch estimate provides for (the pipeline's prefill
 * chunks are at most this); under a budget the CUDA backend runs a larger
 * batch in pieces of this many rows. */
#define GW_VRAM_BATCH_ROWS 512
/* Streamed experts (gpu-worker/cuda/stream.cu): a ring of two halves of
 * GW_STREAM_GROUP experts' blobs, and the temporaries of GW_STREAM_PAIRS
 * pairs computed at a time; gw_vram_stream_bytes counts both in the scratch. */
#define GW_STREAM_GROUP 16
#define GW_STREAM_PAIRS 1024
/* Whether the CUDA backend decodes this quant type on the device (else it is
 * widened to F32): a row of gpu-worker/cuda/cuda_types.h's table. */
bool gw_vram_native_type(int type);
/* The type a matrix of this type is held in on the device: itself where the
 * device decodes it, else F32; its rows are quant_row_size() of that type. */
int gw_vram_device_type(int type);
/* The dense weights (trunk: *dense; the MTP block's own: *mtp) as the CUDA
 * backend uploads them, shared tensors once; NB_ENOMEM only when out of host memory. */
int gw_vram_dense_bytes(const struct model *m, uint64_t *dense, uint64_t *mtp, char *err, size_t errlen);
/* The n-gram table's share of *dense (0 without one, or once gw_ple_host_detach
 * took it): what a placement whose ple_tier is not "vram" leaves off the device. */
uint64_t gw_vram_ple_table_bytes(const struct model *m);
/* What a budget holds besides weights: K/V and state for n_ctx positions (≤ 0:
 * the default) plus scratch — the kv + scratch of gw_vram_plan. */
uint64_t gw_vram_reserve(const struct model *m, int64_t n_ctx);
/* Bytes of one expert (gate + up + down) of layer il as the device holds it. */
uint64_t gw_vram_expert_bytes(const struct model *m, int il);
/* The scratch a prefill chunk's streamed experts need: the ring (two halves
 * of GW_STREAM_GROUP of the largest expert blob as stored, page-rounded as in
 * experts.bin) and GW_STREAM_PAIRS pairs' packed rows (input, gate, up, down);
 * 0 for a model without routed experts. */
uint64_t gw_vram_stream_bytes(const struct model *m);
/* slots, n_slots: the experts `local` marks (NULL: all); kv, scratch for n_ctx (≤ 0: the default above). */
void gw_vram_plan(const struct model *m, const uint8_t *local, int64_t n_ctx, struct gw_vram_parts *p);
/* Positions the budget reserves by default. */
int64_t gw_vram_default_ctx(const struct model *m);
/* The graph arena of a one-token step or a verify window at K/V capacity cap (part of scratch). */
uint64_t gw_vram_arena_bytes(const struct model *m, int64_t cap);
/* The stream-ordered pool's temporaries of an eval (a prefill chunk of up to
 * GW_VRAM_BATCH_ROWS rows, its head in sub-batches; part of scratch): an estimate that sums them all. */
uint64_t gw_vram_pool_bytes(const struct model *m, int64_t n_ctx);
/* The most rows of a prefill piece whose temporaries fit `room` bytes when
 * its MoE runs expert by expert (gpu-worker/cuda/stream.cu: bounded pair
 * temporaries, the streamed experts' ring), with K/V for n_ctx positions;
 * at least 1, at most NB_MAX_PREFILL_CHUNK's 8192.  How a backend under a
 * budget sizes its prefill pieces from what the budget leaves (issue 14). */
int64_t gw_vram_stream_rows(const struct model *m, int64_t n_ctx, uint64_t room);

/* How the CUDA backend sizes and lays out its blocks (it allocates with these;
 * the plan adds them up).  Each layout returns its block's bytes and, when
 * off is not NULL, each array's offset in it (UINT64_MAX: the layer has none):
 *   state: one sequence's fixed-size state, per trunk layer GDN conv state,
 *          GDN recurrent state, PLE conv state (off: n_layer rows);
 *   kv:    its position-indexed state for cap positions, per trunk layer K,
 *          V, raw indexer keys, block keys (off: n_layer rows);
 *   slot:  layer il's gate, up and down slot arrays for n experts. */
uint64_t gw_vram_state_layout(const struct model *m, uint64_t (*off)[3]);
uint64_t gw_vram_kv_layout(const struct model *m, int64_t cap, uint64_t (*off)[4]);
uint64_t gw_vram_slot_layout(const struct model *m, int il, int64_t n, uint64_t off[3]);
/* A verify window's most rows: the pending token and up to 16 drafts (issue 16). */
#define GW_VERIFY_ROWS 17
/* Chunks the CUDA backend's split-K attention (gpu-worker/cuda/attn.cu) cuts
 * a row's attended positions into, for evals of at most GW_VERIFY_ROWS rows:
 * its partial results are GW_ATTN_SPLITS × (head_dim + 2) floats a (row, head),
 * whatever the context (the arena and the pool count them). */
#define GW_ATTN_SPLITS 64
/* One sequence's verify-window checkpoint (ARCHITECTURE.md §5, Rollback),
 * what a return into the last window restores and replays: per trunk layer
 * the GDN conv state and recurrent state before the window, the rows' GDN
 * inputs (GW_VERIFY_ROWS rows each of the conv's input qkv, the conv's
 * normalised output q|k|v, then g and β), the PLE conv state before it and
 * its rows' conv inputs (off: n_layer rows; 0 bytes without GDN or PLE layers). */
#define GW_VRAM_VERIFY_ARRAYS 5
uint64_t gw_vram_verify_layout(const struct model *m, uint64_t (*off)[GW_VRAM_VERIFY_ARRAYS]);
/* The MTP block's K and V for cap entries (V at half the bytes); 0 without MTP. */
uint64_t gw_vram_mtp_kv_bytes(const struct model *m, int64_t cap);
/* RoPE's cos and sin tables for cap positions (sin at half the bytes). */
uint64_t gw_vram_rope_bytes(const struct model *m, int64_t cap);
/* The positions-indexed blocks that grow: the sequence's K/V, the MTP K/V, the RoPE tables. */
enum gw_grow { GW_GROW_KV, GW_GROW_MTP, GW_GROW_ROPE };
/* The capacity such a block of cur positions gets when need more: with the
 * context fixed (the CUDA backend under a budget) at once the planned one — n_ctx,
 * + GW_VRAM_PAST_CTX for the MTP K/V and RoPE, RoPE at least 1024 — or need
 * when more, so nothing grows by steps (no old and new block side by side);
 * else doubling from a floor (64; RoPE 1024), capped at the planned one. */
int64_t gw_vram_capacity(enum gw_grow kind, int64_t cur, int64_t need, int64_t n_ctx, bool fixed);
/* One device block of the CUDA backend. */
struct gw_vram_alloc {
    const char *what;
    enum gw_vram_part part;
    uint64_t bytes;
};
/* The blocks a CUDA backend under a budget for n_ctx positions holds at its
 * peak for `local` (NULL: every expert) and one sequence, as it sizes them
 * (the functions above): up to max into a; returns how many there are (-1:
 * out of host memory).  Beside them: the pool's temporaries and the driver's own. */
int gw_vram_allocs(const struct model *m, const uint8_t *local, int64_t n_ctx, struct gw_vram_alloc *a, int max);
uint64_t gw_vram_total(const struct gw_vram_parts *p);
/* 0 when budget is 0 or the parts fit; NB_ENOMEM with every part's bytes in err otherwise. */
int gw_vram_check(const struct gw_vram_parts *p, uint64_t budget, char *err, size_t errlen);
/* "123", "64M", "8G", "1.5G" (binary units K M G T, a trailing "B"/"iB" allowed) into bytes; NB_EINVAL otherwise. */
int gw_vram_parse_bytes(const char *s, uint64_t *out, char *err, size_t errlen);
/* The device budget of a gpu-worker: `given` (--vram-budget) when not 0, else
 * the placement's (nebula-prepare's request.vram_budget): the whole device
 * budget when placement_total (placement.json records request.vram_ctx, the
 * context its reserve was computed for), else — a placement made before the
 * reserve was recorded, a budget for the weights — plus p's K/V and scratch;
 * else 0 (no limit). */
uint64_t gw_vram_worker_budget(uint64_t given, uint64_t placement_budget, bool placement_total,
                               const struct gw_vram_parts *p);

#endif
