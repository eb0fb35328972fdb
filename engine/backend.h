/* backend.h — the one C interface every backend implements (cpu: the
 * reference, engine/cpu/; cuda: gpu-worker/cuda/).
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
 * indexer keys, token history).  The GDN states and the PLE conv state are
 * rolled back only into the last eval when it was a verify window
 * (gw_eval_args.verify: the state before it kept, the rows' inputs cached,
 * the accepted rows replayed through the recurrence, ARCHITECTURE.md §5);
 * any other truncation of a model with them (below the current length, not
 * to 0) is refused with NB_ENOTSUP, and a caller that needs it keeps a copy
 * made with gw_seq_copy().
 *
 * Every call returns 0 or a negative NB_E* (core/util/err.h) and writes a
 * one-line message into err.  Calls on one sequence must not overlap; calls
 * on different sequences of one backend may not overlap either (a backend
 * owns its scratch space).
 *
 * Beside it in engine/: vram.h (the device memory plan, gw_vram_*) and
 * ffn.h (one expert's FFN, gw_expert_*); what a backend implements is
 * backend_impl.h. */
#ifndef NB_ENGINE_BACKEND_H
#define NB_ENGINE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/slot_policy.h"

struct model;
struct quant_traits;
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
    /* cuda: the adaptive slot cache (gpu-worker/cuda/adapt.cu, the rule engine/slot_policy.h): the slots
     * follow the decode steps' routes, swapping experts with a host blob (gw_backend_set_expert_host);
     * false: the slots keep the layout (nebula.conf slots.adapt static).  The results are the same
     * either way; slots: its parameters (every == 0: the GW_SLOT_* defaults). */
    bool slots_adaptive;
    struct gw_slot_params slots;
    /* cpu: which experts may move ((n_layer + n_nextn) × n_expert, non-zero: the remote side holds a copy, the
     * RAM arena's, so it can compute the expert once it leaves); NULL: none.  Read during the call only.  cuda
     * moves the experts it has a host blob of (gw_backend_set_expert_host: the same arena). */
    const uint8_t *slots_movable;
};

/* Which rows of a batch an output is wanted for. */
enum gw_rows { GW_ROWS_NONE = 0, GW_ROWS_LAST = 1, GW_ROWS_ALL = 2 };

/* Called after each trunk layer with the wide residual of the batch
 * (n_tokens × n·C floats, row-major).  Diagnostics only; a backend that
 * cannot provide it fails the call with NB_ENOTSUP. */
typedef void (*gw_layer_tap)(void *ctx, int layer, int n_tokens, const float *wide);

/* Called for each trunk MoE layer (and, from gw_mtp_eval, the MTP block's) after routing, with the k experts chosen
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
    /* A verify window (issue 16: the target checking a chain of drafts): the
     * rows are computed as that many one-token evals would compute them — the
     * GDN layers token by token (their recurrent form), so each row's logits
     * are a decode step's bit for bit on the CPU reference — and the state
     * before the window is kept, so gw_seq_truncate can return to any
     * position inside it without computing any of its rows again (the GDN
     * states are replayed from the kept inputs).  cuda: at most
     * GW_VERIFY_ROWS (engine/vram.h) rows, run without a CUDA graph; its rows
     * are its decode steps' within rounding (ARCHITECTURE.md §5). */
    bool verify;
    /* Coverage mode (issue 16 item 4; opt-in, approximate; docs/SPECULATIVE.md
     * measures it): τ in (0, 1] with verify, 0 (exact: every routed expert
     * computed) otherwise.  At each trunk MoE layer a row whose resident
     * experts carry at least τ of its k routing weights is computed with
     * those only (the others' contributions are dropped, the weights left as
     * the router gave them: gw_backend_experts_skipped counts the pairs);
     * a row below τ is computed with all its k experts, remote ones
     * included: a *handoff* row (the seed's case B). */
    float coverage;
    /* Which experts are resident, one byte per (layer, expert) as
     * gw_moe_remote's local (1: resident): cpu only — NULL: the remote
     * hook's local map, or every expert without a hook (nothing skipped).
     * cuda: the experts in slots (must be NULL). */
    const uint8_t *resident;
    /* Optional, n_tokens bytes: set to 1 for each row computed with all its
     * experts at some layer because its coverage was below τ, else 0. */
    uint8_t *handoff;
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
    /* Optional: the block's routing (layer n_layer), as gw_eval_args' tap
     * gives the trunk's — the hotlist campaign counts the MTP experts too. */
    gw_route_tap route_tap;
    void *route_ctx;
};

/* Routed experts computed outside the backend (ARCHITECTURE.md §4: the
 * experts not resident on this worker go to the cpu-moe-worker).  `local`
 * has one byte per (layer, expert) for layers 0 … n_layer+n_nextn-1: 1 =
 * computed here.  For each MoE layer with remote pairs the backend calls fn
 * once with the layer's input rows x (n_rows × C) and the (row, expert,
 * weight) pairs whose expert is remote; fn writes out[i] (C floats) =
 * weight_i · FFN_expert_i(x[row_i]), computed with gw_expert_ffn (ffn.h) so
 * that the result is the one the backend would have computed itself.  The
 * backend then adds every token's k contributions in ascending expert order,
 * local and remote alike: the output is bit for bit the same for every
 * placement. */
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

/* Routed experts the backend may copy from host memory itself instead of
 * handing their pairs to the remote hook (issue 14: a prefill chunk streams
 * the experts it needs over PCIe; ARCHITECTURE.md §4).  For layer l of
 * 0 … n_layer+n_nextn-1 and expert e, blob[l·E + e] is the expert's blob in
 * host memory — gate, up and down matrices as the GGUF stores them (rows of
 * the tensors' own types, one expert's slice each), at part_off[3·l + 0, 1,
 * 2] inside it, blob_bytes[l] long (prepared experts.bin's blobs, as the RAM
 * arena holds them: docs/FILES.md) — or NULL: that expert stays with the
 * remote hook.  Evals of more than min_rows rows copy the blobs of
 * their missed experts into a device ring and compute those pairs with the
 * resident experts' kernels, so the logits are the bits an all-resident
 * layout gives; decode steps keep the hook (the mailbox).  pin: a range the
 * backend may page-lock for full-speed copies (cuda: cudaHostRegister; NULL:
 * none).  The memory must stay mapped and unchanged while installed; the
 * tables are copied.  NULL uninstalls.  NB_ENOTSUP from backends that do
 * not stream (cpu: it reads every expert from the model or the hook). */
#define GW_STREAM_MIN_ROWS 17 /* more rows than a decode step or verify window (the mailbox's) */
struct gw_expert_host {
    const uint8_t *const *blob; /* (n_layer + n_nextn) × n_expert */
    const uint64_t *part_off;   /* 3 per layer */
    const uint64_t *blob_bytes; /* per layer */
    const void *pin;
    uint64_t pin_bytes;
    /* Evals of more rows than this stream (0: GW_STREAM_MIN_ROWS, else at least
     * that): up to it a prefill piece hands its missed experts to the hook like
     * a decode step (nebula.conf engine.prefill_stream_rows; issue 14's
     * short-prompt threshold, to be measured per machine). */
    int min_rows;
};
/* The row count above which an eval streams, for a gw_expert_host.min_rows. */
static inline int gw_stream_min_rows(int min_rows) { return min_rows > GW_STREAM_MIN_ROWS ? min_rows : GW_STREAM_MIN_ROWS; }

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
/* Routed (token, expert) pairs of trunk MoE layers that coverage mode
 * (gw_eval_args.coverage) left out, since creation: computed + the remote
 * hook's + skipped = k × MoE layers × tokens evaluated; 0 in exact mode. */
uint64_t gw_backend_experts_skipped(const gw_backend *be);

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

/* Rows the trunk has evaluated since creation (every gw_eval row, each time
 * it is evaluated), and positions gw_seq_truncate rebuilt from a verify
 * window's cached inputs (replayed through the GDN recurrence, never
 * evaluated again): with them a speculative loop proves that no accepted
 * position was computed twice. */
uint64_t gw_backend_rows_evaluated(const gw_backend *be);
uint64_t gw_backend_rows_replayed(const gw_backend *be);

/* Bytes copied host → device by evals and MTP steps since creation (remote
 * expert results, PLE rows, tokens, experts laid out again; not the weights
 * uploaded at creation).  0 for backends without a device. */
uint64_t gw_backend_bytes_copied(const gw_backend *be);

/* The slot cache's counters since creation (all 0 without adaptive slots).
 * selections: the routed (token, expert) pairs of trunk layers in decode
 * steps and verify windows; hits: those found in a slot, static_hits: those
 * the layout (the placement's) holds, so hits / selections against
 * static_hits / selections is what adapting gained; swaps and bytes: slot
 * copies queued (host → device, beside bytes_copied); waited: evals that
 * had to wait for a slot's copy (a new layout or host blobs while copies were
 * in flight; the design keeps it 0). */
struct gw_slot_stats {
    uint64_t selections, hits, static_hits, swaps, bytes, waited;
};
void gw_backend_slot_stats(const gw_backend *be, struct gw_slot_stats *out);

/* Decode steps replayed from a captured CUDA graph since creation (the rest
 * ran as plain launches).  0 for backends without graphs. */
uint64_t gw_backend_graph_replays(const gw_backend *be);

/* Installs (or with r == NULL removes) the remote-expert hook; r is copied,
 * r->local must outlive the backend's use of it. */
int gw_backend_set_moe_remote(gw_backend *be, const struct gw_moe_remote *r, char *err, size_t errlen);
/* Installs (or with r == NULL removes) the PLE row hook; r is copied.
 * Without it the backend reads rows from the model's own table. */
int gw_backend_set_ple_rows(gw_backend *be, const struct gw_ple_rows *r, char *err, size_t errlen);

/* The n-gram table kept in host memory.  The table of the released model is
 * 26.8 GiB (ds4's Q4_1 one 29.8): on an 8–24 GB card it cannot share the
 * device with anything, while a token reads only ple_n_heads of its rows.
 * gw_ple_host_detach moves the table out of the model before a backend is
 * made from it — a backend then neither uploads it nor counts it (engine/
 * vram.c skips absent tensors) — and gw_ple_host_rows, a gw_ple_rows_fn with
 * the gw_ple_host as ctx, serves its rows from the mapping, dequantized by
 * the type's to_float as the CPU reference reads them.  Where the placement
 * says ple_tier "vram" the table stays in the model and goes to the device. */
struct gw_ple_host {
    const uint8_t *data;            /* the model's ple_table as it was: rows in the mapped GGUF */
    const struct quant_traits *qt;  /* its type */
    int64_t width, rows;            /* values a row (ple_row_width), rows */
    size_t row_bytes;
};
void gw_ple_host_detach(struct model *m, struct gw_ple_host *h);
int gw_ple_host_rows(void *ctx, int n_rows, const int64_t *rows, float *out, char *err, size_t errlen);

/* Installs (or with h == NULL removes) the host copies of experts (above). */
int gw_backend_set_expert_host(gw_backend *be, const struct gw_expert_host *h, char *err, size_t errlen);

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

/* Saving and restoring a whole sequence state (the prompt cache, issue 17;
 * engine/seq_state.c): position, token history, every layer's GDN conv and
 * recurrent state, PLE conv state, K/V, raw indexer keys and block keys, and
 * the MTP K/V, as host bytes in one layout for every backend (the arrays are
 * fp32 on both: a CUDA backend copies them device → host and back).  Not
 * kept: the last verify window (no rollback into it after a load).
 * gw_seq_save_bytes: what gw_seq_save writes for s now.  gw_seq_save: into
 * buf (cap bytes), *len the bytes written; NB_EINVAL for a sequence a failed
 * call left inconsistent.  gw_seq_load: s becomes that state; a buffer that
 * is not a state of this model (magic, counts, array sizes) is NB_EINVAL and
 * leaves s reset, never half-loaded. */
uint64_t gw_seq_save_bytes(const gw_seq *s);
int gw_seq_save(const gw_seq *s, void *buf, uint64_t cap, uint64_t *len, char *err, size_t errlen);
int gw_seq_load(gw_seq *s, const void *buf, uint64_t len, char *err, size_t errlen);
/* Where a saved state resumes bit for bit: core/model's model_resume_align. */
/* The ids evaluated so far (gw_seq_pos of them, host memory, valid until the next call on s); NULL for a
 * backend that cannot save states. */
const int32_t *gw_seq_tokens(const gw_seq *s);

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
