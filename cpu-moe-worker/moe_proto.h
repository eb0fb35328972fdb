/* moe_proto.h — the gpu-worker ⇄ cpu-moe-worker messages on the `moe` ring
 * pair (docs/PIPELINE.md).  The contract between the two rooms; nothing else.
 *
 * Request (gpu-worker → cpu-moe-worker), one per piece of a MoE layer's batch:
 *   hdr.layer      GGUF block index (trunk layer, or n_layer for the MTP block)
 *   hdr.n_tokens   rows in this piece (≤ geometry.max_tokens)
 *   hdr.n_experts  k, the routed experts per row (≤ geometry.max_experts)
 *   hdr.tag        request id (echoed)
 *   expert_ids[r][j]      the expert of row r's j-th routed slot when it is
 *                         remote, MOE_LOCAL (-1) when the gpu-worker computes it
 *   expert_weights[r][j]  its routing weight
 *   payload        x: n_tokens × C float32 (the rows' MoE inputs)
 * Response (cpu-moe-worker → gpu-worker), exactly one per request, in order
 * (a restarted worker may answer the request its predecessor answered but
 * had not released yet a second time: the client drops a response whose tag
 * is not the one it waits for):
 *   hdr.tag        the request's id; hdr.flags RING_FLAG_ERROR on failure
 *                  (then payload holds a NUL-terminated message)
 *   payload        out: n_tokens × n_experts × C float32; for each remote
 *                  (r, j): weight · FFN_expert(x[r]) computed with
 *                  gw_expert_ffn; local slots are left unspecified
 * So the payload capacity of the ring must be ≥ max_tokens · max_experts · C · 4. */
#ifndef NB_MOE_PROTO_H
#define NB_MOE_PROTO_H

#include <stdint.h>

#define MOE_LOCAL (-1)

/* Payload bytes a `moe` ring needs for rows of C floats. */
static inline uint64_t moe_payload_bytes(uint32_t max_tokens, uint32_t max_experts, uint64_t n_embd)
{
    return (uint64_t)max_tokens * max_experts * n_embd * sizeof(float);
}

#endif
