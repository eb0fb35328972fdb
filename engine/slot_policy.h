/* slot_policy.h — the adaptive expert-slot cache's policy (issue 15 item 3),
 * plain C: which experts a layer's fixed number of VRAM slots should hold,
 * learned from the router's choices.
 *
 * The rule (tools/bench/cache-sim.py's "adaptive" policy is the same rule,
 * and tests/engine/test_slot_policy.c checks that both give the same hits on
 * one trace):
 *   - every (layer, expert) has a score; at each token a layer's scores are
 *     multiplied by `decay`, then each of the token's selections in that
 *     layer adds 1.0 (double precision, in this order);
 *   - every `every` tokens a round runs in each layer: the candidates are the
 *     non-resident experts with a score > 0 that may come in, hottest first
 *     (ties: the lower expert id), at most `swaps` of them; free slots (a
 *     layer holding fewer than its capacity) take candidates first; then the
 *     remaining candidates are paired with the resident experts that may
 *     leave, coldest first (ties: the lower id), and a pair swaps while the
 *     candidate's score exceeds the resident's by more than `hysteresis`
 *     (so an expert is not swapped back and forth on noise); the first pair
 *     that does not stops the round;
 *   - a round's decisions count from the next token (the copies happen
 *     between steps; a backend whose copies take longer simply switches
 *     later).
 * can_in / can_out (optional, one byte per (layer, expert)): experts that may
 * enter or leave the slots — a backend marks the ones it has no host copy to
 * fill a slot from, the ones the remote side could not compute, and a slot
 * still being filled.  The policy only decides; moving bytes is the
 * backend's business (gpu-worker/cuda/adapt.cu). */
#ifndef NB_ENGINE_SLOT_POLICY_H
#define NB_ENGINE_SLOT_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gw_slot_params {
    int every;         /* tokens between rounds (≥ 1) */
    double decay;      /* per token, in (0, 1] */
    int swaps;         /* candidates a round considers per layer, at most (≥ 1) */
    double hysteresis; /* a swap needs score(in) > score(out) + hysteresis (≥ 0) */
};
/* nebula.conf slots.adapt_every, slots.decay, slots.swaps, slots.hysteresis */
#define GW_SLOT_EVERY 4
#define GW_SLOT_DECAY 0.98
#define GW_SLOT_SWAPS 16
#define GW_SLOT_HYSTERESIS 0.5

/* Evals of at most this many rows feed the policy: a decode step, or a verify window of up to 16 drafts
 * (the mailbox's MAILBOX_ROWS on cuda); prefill pieces do not. */
#define GW_SLOT_ROWS 17

/* One slot change of a round: layer's expert `out` (-1: a free slot) gives
 * its slot to expert `in`. */
struct gw_slot_swap {
    int layer, out, in;
};

struct gw_slot_policy {
    int n_layer, n_expert;
    struct gw_slot_params p;
    double *score;     /* n_layer × n_expert */
    uint8_t *res;      /* n_layer × n_expert: resident after the last round */
    int *n_res, *cap;  /* per layer */
    const uint8_t *can_in, *can_out; /* the caller's, or NULL: any */
    int64_t tokens;    /* tokens seen (gw_slot_policy_tick) */
    int *order;        /* scratch: 2 × n_expert */
};

/* Checks p: 0, or NB_EINVAL with the reason. */
int gw_slot_params_check(const struct gw_slot_params *p, char *err, size_t errlen);
/* resident: n_layer × n_expert, 1 = in a slot; cap: slots per layer (NULL: each layer's resident count). */
int gw_slot_policy_init(struct gw_slot_policy *sp, int n_layer, int n_expert, const uint8_t *resident, const int *cap,
                        const struct gw_slot_params *p, char *err, size_t errlen);
void gw_slot_policy_free(struct gw_slot_policy *sp);
/* One token's selections of one layer (n ids, each < n_expert; others are ignored): decay, then +1 each. */
void gw_slot_policy_observe(struct gw_slot_policy *sp, int layer, const int32_t *ids, int n);
/* The token is done: true when a round is due now (every `every` tokens). */
bool gw_slot_policy_tick(struct gw_slot_policy *sp);
/* One layer's round: up to max swaps into out, applied to the policy's residency; returns how many. */
int gw_slot_policy_round(struct gw_slot_policy *sp, int layer, struct gw_slot_swap *out, int max);
/* What a backend does around the policy, shared by both (gpu-worker/cuda/adapt.cu, engine/cpu/backend_cpu.c). */

/* One eval's selections: layer l's P ids at routes + l·stride; slot_of (n_layer × n_expert, ≥ 0: in a slot now),
 * layout (the same shape, non-zero: in the placement's slots).  out += {selections, hits, static hits}. */
void gw_slot_count(const int32_t *routes, size_t stride, int n_layer, int n_expert, int P, const int32_t *slot_of,
                   const uint8_t *layout, uint64_t out[3]);
/* Rounds: before each, maps(ctx) sets can_in / can_out; per layer, room(ctx) bounds the swaps; apply(ctx, swap)
 * moves one (non-zero: the error, which stops the feed). */
struct gw_slot_round_ops {
    void *ctx;
    void (*maps)(void *ctx);
    int (*room)(void *ctx);
    int (*apply)(void *ctx, const struct gw_slot_swap *sw);
};
/* One eval of T rows (k ids a row, layer l's at routes + l·stride): each row observed in every layer, then a tick,
 * a due round run through ops.  scratch: p.swaps entries. */
int gw_slot_policy_feed(struct gw_slot_policy *sp, const int32_t *routes, size_t stride, int T, int k,
                        const struct gw_slot_round_ops *ops, struct gw_slot_swap *scratch);

static inline bool gw_slot_resident(const struct gw_slot_policy *sp, int layer, int e)
{
    return sp->res[(size_t)layer * (size_t)sp->n_expert + (size_t)e] != 0;
}

#endif
