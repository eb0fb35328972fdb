/* backend.h — the one C interface every gpu-worker backend implements.
 *
 * Two opaque types: a backend (one model's weights on one device) and a
 * sequence (one conversation's state on it).  A sequence holds everything
 * that carries from one token to the next:
 *   - GDN layers: conv state (Kc-1 pre-conv columns) and the recurrent state
 *     S (Hv × dk × dv, fp32), value heads in GGUF's tiled order;
 *   - attention layers: K and V per position, and for QSA the raw (un-normed,
 *     un-roped) indexer key per position;
 *   - the PLE layer: the token history (n-gram hashing) and its dilated conv
 *     state ((Kp-1)·N columns);
 *   - the MTP block: its own K/V, indexed by the positions the caller gives.
 *
 * gw_eval() runs a batch of new tokens (a prefill chunk or one decode token)
 * on top of that state, at positions gw_seq_pos() … +n-1, and returns logits
 * for every row or only the last, and optionally the trunk's wide residual
 * after the last layer (n·C floats per row, before the head mixer): the MTP
 * input.  gw_mtp_eval() runs the MTP draft block.
 *
 * Rollback: gw_seq_truncate() shortens the position-indexed state (KV,
 * indexer keys, token history).  GDN and PLE conv state cannot be rolled
 * back yet (the block-start checkpoint + replay of ARCHITECTURE.md §5 will
 * come later), so truncating a model that has them below the current length
 * is refused with NB_ENOTSUP unless it truncates to 0; until then a caller
 * that needs to undo tokens keeps a copy made with gw_seq_copy().
 *
 * Every call returns 0 or a negative NB_E* (core/util/err.h) and writes a
 * one-line message into err.  Calls on one sequence must not overlap; calls
 * on different sequences of one backend may not overlap either (a backend
 * owns its scratch space). */
#ifndef NB_GW_BACKEND_H
#define NB_GW_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct model;
struct gw_vram_parts;
typedef struct gw_backend gw_backend;
typedef struct gw_seq gw_seq;

struct gw_backend_params {
    const char *kind; /* "cpu" (the reference) or "cuda" (gpu-worker/cuda/, where built with nvcc) */
    int n_threads;    /* 0: the backend's default (cpu: OpenMP's, set per calling thread) */
    bool no_graphs;   /* cuda: run the one-token step without CUDA graphs (tests compare the two) */
    /* cuda: the matrix kernels, "ref" (double accumulation, bit-faithful to
     * the CPU) or "fast" (matvec.cu's fp32 kernels); NULL: "fast"
     * (gpu-worker/cuda/README.md says why). */
    const char *kernels;
    /* cuda: which experts are computed here, as gw_moe_remote's `local` (one
     * byte per (layer, expert)); NULL: decided at the first eval from the
     * remote hook then installed (none: every expert).  Only these are
     * uploaded, into per-layer slots; a later hook with another map re-lays
     * them out at the next eval.  Read during the call only. */
    const uint8_t *local;
    /* cuda: device bytes the backend may use (0: no limit): dense weights +
     * MTP + K/V for n_ctx positions + expert slots + scratch must fit, or the
     * expert layout (at creation when `local` is given) fails naming each part. */
    uint64_t vram_budget;
    int64_t n_ctx; /* positions the budget reserves K/V for (0: the model's training context, else 32768) */
};

/* Which rows of a batch an output is wanted for. */
enum gw_rows { GW_ROWS_NONE = 0, GW_ROWS_LAST = 1, GW_ROWS_ALL = 2 };

/* Called after each trunk layer with the wide residual of the batch
 * (n_tokens × n·C floats, row-major).  Diagnostics only; a backend that
 * cannot provide it fails the call with NB_ENOTSUP. */
typedef void (*gw_layer_tap)(void *ctx, int layer, int n_tokens, const float *wide);

/* Called for each trunk MoE layer after routing, with the k experts chosen
 * for each of the batch's rows (n_tokens × k ids, best first) and their
 * routing weights (renormalised when the model says so).  For the hotlist
 * campaign (ARCHITECTURE.md §3); optional, any backend provides it. */
typedef void (*gw_route_tap)(void *ctx, int layer, int n_tokens, int k, const int32_t *experts, const float *weights);

struct gw_eval_args {
    const int32_t *tokens;
    int n_tokens;
    enum gw_rows logits_rows; /* into logits: V floats per row (ALL: n_tokens rows) */
    float *logits;
    enum gw_rows wide_rows;   /* into wide: n·C floats per row, the MTP's input */
    float *wide;
    gw_layer_tap tap;         /* optional */
    void *tap_ctx;
    gw_route_tap route_tap;   /* optional */
    void *route_ctx;
    /* Optional: for each row logits_rows asks for, the index of its largest
     * logit (the first of equal ones; NaN rows unspecified).  logits may then
     * be NULL: a backend that computes it where the logits are (cuda) copies
     * one int per row instead of V floats — greedy decoding. */
    int32_t *argmax;
};

/* One MTP step over n rows: row i combines the trunk (or previous draft)
 * wide state wide_in[i] with the embedding of tokens[i], at position
 * pos + i.  The MTP K/V entries at positions ≥ pos are dropped first, then
 * the n new ones appended, so the caller re-drafts from any point by
 * passing its position.  Outputs per row: logits (V) and the block's output
 * wide state (n·C), which feeds the next draft step; wide_out may be the
 * same buffer as wide_in (the input is consumed before the output is
 * written).  Where the positions come from is the caller's choice: the row
 * pairing the trunk's state at position t with token t+1 is given position
 * t+1 in the tests and in llama.cpp's draft driver as far as we know
 * (docs/CONVERSION.md §8). */
struct gw_mtp_args {
    const int32_t *tokens;
    const float *wide_in;
    int n_rows;
    int64_t pos;
    float *logits;    /* n_rows × V, or NULL */
    float *wide_out;  /* n_rows × n·C, or NULL */
};

/* Routed experts computed outside the backend (ARCHITECTURE.md §4: the
 * experts not resident on this worker go to the cpu-moe-worker).  `local`
 * has one byte per (layer, expert) for layers 0 … n_layer+n_nextn-1: 1 =
 * computed here.  For each MoE layer with remote pairs the backend calls fn
 * once with the layer's input rows x (n_rows × C) and the (row, expert,
 * weight) pairs whose expert is remote; fn writes out[i] (C floats) =
 * weight_i · FFN_expert_i(x[row_i]), computed with gw_expert_ffn so that the
 * result is the one the backend would have computed itself.  The backend then
 * adds every token's k contributions in ascending expert order, local and
 * remote alike: the output is bit for bit the same for every placement. */
typedef int (*gw_moe_remote_fn)(void *ctx, int layer, int n_rows, const float *x, int n_pairs, const int32_t *rows,
                                const int32_t *experts, const float *weights, float *out, char *err, size_t errlen);

struct gw_moe_remote {
    const uint8_t *local; /* (n_layer + n_nextn) × n_expert, owned by the caller */
    gw_moe_remote_fn fn;
    void *ctx;
};

/* The PLE table's rows read outside the backend (the table on SSD: the
 * gpu-worker asks the ssd-pager for them).  For each eval of a model with a
 * PLE layer the backend calls fn once with every row the batch needs: for
 * token t (of n_tokens) and head h (of the model's ple_n_heads) rows[t·heads
 * + h] is the table row, and fn writes out[(t·heads + h)·W …] = that row's W
 * values, dequantized with the table type's to_float from the row's bytes as
 * the GGUF stores them (ple.bin holds them unchanged), so the result is the
 * one the backend would have read itself: bit for bit. */
typedef int (*gw_ple_rows_fn)(void *ctx, int n_rows, const int64_t *rows, float *out, char *err, size_t errlen);

struct gw_ple_rows {
    gw_ple_rows_fn fn;
    void *ctx;
};

int gw_backend_create(const struct model *m, const struct gw_backend_params *p, gw_backend **out, char *err,
                      size_t errlen);
void gw_backend_free(gw_backend *be);
/* Whether a backend of this kind can be created on this machine, without a
 * model: 0 with a description in msg ("cpu": the reference; "cuda": the
 * device, its memory and compute capability), NB_ENOTSUP with the reason
 * (built without CUDA, no driver or device, no kernels for its
 * architecture), NB_EINVAL for an unknown kind.  How a launcher picks
 * "auto" (nebula-gpu-worker --probe). */
int gw_backend_probe(const char *kind, char *msg, size_t len);
const char *gw_backend_kind(const gw_backend *be);
const struct model *gw_backend_model(const gw_backend *be);

/* Routed (token, expert) pairs of trunk MoE layers whose FFN this backend
 * ran itself, since it was created (the remote hook's pairs are not
 * included; MTP layers are not counted).  Every backend counts where the
 * expert is actually computed, so with the remote worker's count it proves
 * that no routed expert was skipped: in exact mode the sum is k × MoE layers
 * × tokens evaluated. */
uint64_t gw_backend_experts_computed(const gw_backend *be);

/* Peak device memory this backend has held, measured with cudaMemGetInfo
 * (free before creation − free after each phase and eval; other users of the
 * GPU count too).  0 for backends without a device. */
uint64_t gw_backend_vram_bytes(const gw_backend *be);

/* What the backend has allocated itself, by the plan's parts, each part's
 * high-water mark: its blocks' bytes as asked of the driver (dense, mtp: the
 * weights' block; kv: the sequences' state and K/V and the RoPE tables;
 * slots) and for scratch the decode arena plus the most its temporaries'
 * pool has reserved.  The measured peak (gw_backend_vram_bytes) is these
 * plus the driver's page rounding and its own (kernel modules loaded lazily,
 * graphs).  All 0 for backends without a device. */
void gw_backend_vram_used(const gw_backend *be, struct gw_vram_parts *used);

/* Bytes copied host → device by evals and MTP steps since creation (remote
 * expert results, PLE rows, tokens, experts laid out again; not the weights
 * uploaded at creation).  0 for backends without a device. */
uint64_t gw_backend_bytes_copied(const gw_backend *be);

/* Decode steps replayed from a captured CUDA graph since creation (the rest
 * ran as plain launches).  0 for backends without graphs. */
uint64_t gw_backend_graph_replays(const gw_backend *be);

/* ---- the VRAM budget (gpu-worker/vram.c; host arithmetic, no device) ---- */

/* The parts a CUDA backend's device memory is made of, in bytes. */
struct gw_vram_parts {
    uint64_t dense;   /* trunk weights except routed experts, embeddings, head, PLE table; the slot tables */
    uint64_t mtp;     /* the MTP block's weights except its routed experts */
    uint64_t kv;      /* one sequence's state for n_ctx positions (K/V, indexer keys, GDN and PLE state, MTP K/V), RoPE tables */
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
/* Whether the CUDA backend decodes this quant type on the device (else it is
 * widened to F32): a row of gpu-worker/cuda/cuda_types.h's table. */
bool gw_vram_native_type(int type);
/* The type a matrix of this type is held in on the device: itself where the
 * device decodes it, else F32; its rows are quant_row_size() of that type. */
int gw_vram_device_type(int type);
/* The dense weights (trunk: *dense; the MTP block's own: *mtp) as the CUDA
 * backend uploads them, shared tensors once; NB_ENOMEM only when out of host memory. */
int gw_vram_dense_bytes(const struct model *m, uint64_t *dense, uint64_t *mtp, char *err, size_t errlen);
/* What a budget holds besides weights: K/V and state for n_ctx positions (≤ 0:
 * the default) plus scratch — the kv + scratch of gw_vram_plan. */
uint64_t gw_vram_reserve(const struct model *m, int64_t n_ctx);
/* Bytes of one expert (gate + up + down) of layer il as the device holds it. */
uint64_t gw_vram_expert_bytes(const struct model *m, int il);
/* slots, n_slots: the experts `local` marks (NULL: all); kv, scratch for n_ctx (≤ 0: the default above). */
void gw_vram_plan(const struct model *m, const uint8_t *local, int64_t n_ctx, struct gw_vram_parts *p);
/* Positions the budget reserves by default. */
int64_t gw_vram_default_ctx(const struct model *m);
/* The graph arena of a one-token step at K/V capacity cap (part of scratch). */
uint64_t gw_vram_arena_bytes(const struct model *m, int64_t cap);
/* The stream-ordered pool's temporaries of an eval (a prefill chunk of up to
 * GW_VRAM_BATCH_ROWS rows, its head in sub-batches; part of scratch): an estimate that sums them all. */
uint64_t gw_vram_pool_bytes(const struct model *m, int64_t n_ctx);

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

/* Installs (or with r == NULL removes) the remote-expert hook; r is copied,
 * r->local must outlive the backend's use of it. */
int gw_backend_set_moe_remote(gw_backend *be, const struct gw_moe_remote *r, char *err, size_t errlen);
/* Installs (or with r == NULL removes) the PLE row hook; r is copied.
 * Without it the backend reads rows from the model's own table. */
int gw_backend_set_ple_rows(gw_backend *be, const struct gw_ple_rows *r, char *err, size_t errlen);

/* One expert's FFN, the reference way: out[i] = scale[i] · W_down(silu(W_gate
 * x[i]) ⊙ W_up x[i]) for n rows of C floats; the three matrices are raw rows
 * of their quant types (gate/up: I rows of C values; down: C rows of I).  What
 * a worker outside the backend runs to produce remote contributions. */
struct gw_expert {
    const void *gate, *up, *down;
    int gate_type, up_type, down_type; /* enum quant_type */
    int64_t n_embd, n_ff;              /* C, I */
};
int gw_expert_ffn(const struct gw_expert *w, const float *x, int n, const float *scale, float *out);

/* Matrix kernels of the expert FFNs: ref is gw_expert_ffn's arithmetic (each
 * output bit-identical however the work is split); fast decodes weights with
 * SIMD and sums in fp32 with FMA (quant.h's quant_dot_f32: within float
 * tolerance of ref, the last bits may differ). */
enum gw_kernels { GW_KERNELS_REF = 0, GW_KERNELS_FAST = 1 };
/* "ref" / "fast" -> *k; NB_EINVAL otherwise. */
int gw_kernels_parse(const char *name, enum gw_kernels *k);
const char *gw_kernels_name(enum gw_kernels k);

/* One expert FFN of a batch: out (n × C) = scale[i] · FFN_w(x[i]). */
struct gw_expert_job {
    struct gw_expert w;
    const float *x;
    int n;
    const float *scale;
    float *out;
};
/* Working memory of gw_expert_ffn_many (its tables and the gate/up rows),
 * grown to the largest call and kept, so that a worker serving one request
 * per layer allocates nothing per request.  Start zeroed; one per calling
 * thread; gw_expert_scratch_free when done. */
struct gw_expert_scratch {
    void *buf;
    size_t bytes;
};
void gw_expert_scratch_free(struct gw_expert_scratch *s);
/* Runs every job in one OpenMP region split by weight rows — the gate/up
 * rows of all jobs over the threads, then their down rows — so a few experts
 * use every thread, not one each.  With GW_KERNELS_REF each output is
 * bit-identical to gw_expert_ffn's.  Called from inside a parallel region it
 * runs in the caller's thread.  s: the caller's scratch, or NULL for one of
 * the call's own.  NB_ENOTSUP for a type without a decoder, NB_ENOMEM. */
int gw_expert_ffn_many(const struct gw_expert_job *jobs, int n_jobs, enum gw_kernels k, struct gw_expert_scratch *s);

int gw_seq_create(gw_backend *be, gw_seq **out, char *err, size_t errlen);
void gw_seq_free(gw_seq *s);
/* Tokens evaluated so far = the position of the next token. */
int64_t gw_seq_pos(const gw_seq *s);
/* Back to an empty sequence (all state zero, MTP K/V dropped). */
void gw_seq_reset(gw_seq *s);
/* Keeps the first n_keep positions (see "Rollback" above). */
int gw_seq_truncate(gw_seq *s, int64_t n_keep, char *err, size_t errlen);
/* dst becomes an independent copy of src (same backend). */
int gw_seq_copy(gw_seq *dst, const gw_seq *src, char *err, size_t errlen);

int gw_eval(gw_seq *s, const struct gw_eval_args *a, char *err, size_t errlen);

/* NB_ENOTSUP when the model has no MTP block. */
int gw_mtp_eval(gw_seq *s, const struct gw_mtp_args *a, char *err, size_t errlen);

/* Chained greedy drafting: starting from (token0, wide0) at position pos,
 * runs n_draft MTP steps, each feeding back its own output wide state and
 * the argmax of its logits.  Writes the n_draft drafted tokens and, if
 * logits is not NULL, the n_draft × V logits that chose them.  Equal to
 * n_draft single-row gw_mtp_eval calls done by hand. */
int gw_mtp_draft(gw_seq *s, int32_t token0, const float *wide0, int64_t pos, int n_draft, int32_t *drafted,
                 float *logits, char *err, size_t errlen);

#endif
