/* step_proto.h — the coordinator ⇄ gpu-worker messages on the `step` ring
 * pair (docs/PIPELINE.md).  The contract between the two rooms; nothing else.
 *
 * One sequence per gpu-worker for now (the coordinator runs one generation at
 * a time).  Every request gets exactly one response, in order; hdr.tag is the
 * request id, echoed, so a client that gave up on a request (its worker died
 * and was restarted, and the new one served the request again) recognises and
 * drops the stale answer.
 *
 * Request (coordinator → gpu-worker):
 *   hdr.layer      the op: STEP_EVAL or STEP_RESET (a step message has no layer)
 *   hdr.n_tokens   EVAL: tokens in the batch (≤ geometry.max_tokens); RESET: 0
 *   hdr.tag        request id
 *   hdr.flags      EVAL: STEP_FLAG_ARGMAX asks for the last row's argmax
 *                  instead of its logits (greedy decoding: 4 bytes back
 *                  instead of V · 4, the argmax taken on the device)
 *   payload        EVAL: n_tokens int32 token ids, appended to the sequence
 * Response (gpu-worker → coordinator):
 *   hdr.tag        the request's id; hdr.flags RING_FLAG_ERROR on failure
 *                  (then payload holds a NUL-terminated message)
 *   hdr.n_tokens   EVAL: 1 (one row of logits); RESET: 0
 *   payload        EVAL: V float32 logits of the batch's last row, or with
 *                  STEP_FLAG_ARGMAX one int32: its argmax (ties: lowest id)
 * So the payload capacity must be ≥ max(V, max_tokens) · 4 bytes and leave
 * room for an error message (STEP_ERR_BYTES). */
#ifndef NB_STEP_PROTO_H
#define NB_STEP_PROTO_H

#include <stdint.h>

enum step_op { STEP_EVAL = 1, STEP_RESET = 2 };

#define STEP_FLAG_ARGMAX (1u << 8) /* above the ring's own RING_FLAG_* bits */

#define STEP_ERR_BYTES 1024u

static inline uint64_t step_payload_bytes(uint32_t max_tokens, uint64_t n_vocab)
{
    uint64_t b = n_vocab > max_tokens ? n_vocab * 4 : (uint64_t)max_tokens * 4;
    return b > STEP_ERR_BYTES ? b : STEP_ERR_BYTES;
}

#endif
