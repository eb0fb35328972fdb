/* pager_proto.h — requests to the ssd-pager on the `pager` ring pair (the
 * cpu-moe-worker's) and the `pager-gw` pair (the gpu-worker's PLE rows when
 * the table is on SSD) (docs/PIPELINE.md).  The contract between the pager
 * and its clients.
 *
 * Request:
 *   hdr.flags & PAGER_KIND_MASK   PAGER_EXPERT or PAGER_PLE_ROWS
 *   PAGER_EXPERT:   hdr.layer = layer index in experts.idx order, expert_ids[0][0] = expert,
 *                   expert_ids[0][1] = staging slot to fill
 *   PAGER_PLE_ROWS: hdr.n_tokens rows × hdr.n_experts ids (n_experts ≤ max_experts − 1): expert_ids[r][j] holds table
 *                   row ids (int32 is enough for 2^31 rows; the released table has 3.2e8),
 *                   expert_ids[0][max_experts-1] = first staging slot; rows are written
 *                   into staging as full row_bytes each, in request order
 *   hdr.tag   request id (echoed)
 * Requests are served in order, each answered once all its bytes are in
 * staging; a restarted pager serves again the request its predecessor took
 * and did not release (clients match responses by tag).
 * Response: hdr.tag; hdr.flags RING_FLAG_ERROR on failure (payload: message);
 *   payload: uint64_t bytes_read (what the SSD delivered, for the per-token counters).
 * Staging: region `staging`, slot s at s · staging_slot_bytes, 4 KiB aligned (O_DIRECT). */
#ifndef NB_PAGER_PROTO_H
#define NB_PAGER_PROTO_H

#define PAGER_KIND_MASK 0xff00u
#define PAGER_EXPERT 0x0100u
#define PAGER_PLE_ROWS 0x0200u

#endif
