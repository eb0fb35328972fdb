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
 *
 * Speculative decoding (issue 16; coordinator --spec):
 *   STEP_EVAL with STEP_FLAG_WIDE also keeps the batch's last wide state in
 *   the gpu-worker (the MTP block's input for the first window).
 *   STEP_SPEC request payload, int32: [t0, n, keep, src, drafts…]:
 *     keep ≥ 0: first go back to the previous window's first keep + 1
 *     positions (its drafts accepted: keep) and take that window's wide row
 *     keep as the MTP input; -1: the first window after a prefill (the kept
 *     wide state);
 *     src STEP_DRAFT_MTP: the gpu-worker drafts n tokens with the MTP block
 *     from (t0, the MTP input) (0 ≤ n ≤ STEP_MAX_DRAFT); STEP_DRAFT_GIVEN:
 *     the n drafts follow in the payload (prompt lookup, the coordinator's);
 *     then it evaluates [t0, drafts] as one verify window (gw_eval_args.verify).
 *   Response: hdr.n_tokens = n + 1; payload int32 [n, drafts…] then the n + 1
 *   rows: with STEP_FLAG_ARGMAX one int32 argmax each, else V float32 logits
 *   each.
 * The prompt cache (issue 17; gpu-worker/proc/cache.c, coordinator/cache.c):
 *   int32 arguments, hdr.n_tokens their count:
 *   STEP_SAVE [id, persist, grid]: the sequence's state now becomes checkpoint
 *     id (and, with persist and a cache dir, its file, which records grid: the
 *     prefill chunk the state was computed with, 0 for a state off the grid).  Response: int32
 *     [bytes lo, bytes hi, positions, tokens hash lo, hi] (kvfile_hash of the
 *     sequence's ids, seed 3: the coordinator checks they are its own).
 *   STEP_LOAD [id, positions]: the sequence becomes checkpoint id (from RAM,
 *     else from its file, checked); an error leaves it reset.  Response: empty.
 *   STEP_DROP [id, file]: the checkpoint leaves RAM (and with file, the disk).
 * So the payload capacity must be ≥ max(V · (STEP_MAX_DRAFT + 1) + STEP_MAX_DRAFT + 1, max_tokens + 4 +
 * STEP_MAX_DRAFT) · 4 bytes and leave room for an error message (STEP_ERR_BYTES). */
#ifndef NB_STEP_PROTO_H
#define NB_STEP_PROTO_H

#include <stdint.h>

enum step_op { STEP_EVAL = 1, STEP_RESET = 2, STEP_SPEC = 3, STEP_SAVE = 4, STEP_LOAD = 5, STEP_DROP = 6 };
enum step_draft { STEP_DRAFT_MTP = 0, STEP_DRAFT_GIVEN = 1 };

#define STEP_FLAG_ARGMAX (1u << 8) /* above the ring's own RING_FLAG_* bits */
#define STEP_FLAG_WIDE (1u << 9)   /* EVAL: keep the last row's wide state (the first window's MTP input) */
#define STEP_MAX_DRAFT 16          /* drafts a window holds at most (core/gen/window.h's WINDOW_MAX) */

#define STEP_ERR_BYTES 1024u

static inline uint64_t step_payload_bytes(uint32_t max_tokens, uint64_t n_vocab)
{
    const uint64_t win = n_vocab * (STEP_MAX_DRAFT + 1) + STEP_MAX_DRAFT + 1, req = (uint64_t)max_tokens + 4 + STEP_MAX_DRAFT;
    const uint64_t b = (win > req ? win : req) * 4;
    return b > STEP_ERR_BYTES ? b : STEP_ERR_BYTES;
}

#endif
