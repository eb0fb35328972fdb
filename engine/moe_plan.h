/* moe_plan.h — a prefill chunk's routed pairs, expert-major (issue 14 item 1).
 *
 * For a chunk of T rows the MoE layer's T·k (row, expert) pairs are run
 * expert by expert in ascending id, so each expert's weights are read (and,
 * when not resident, copied to the device) once per chunk, and each row's
 * output is accumulated as the pairs arrive: y[row] = 0, then + each pair's
 * weighted output in ascending expert id — the float additions of the
 * ordered sum (engine/cpu/moe.c, gpu-worker/cuda/moe.cu's k_expert_sum) in
 * the same order, so the result is theirs bit for bit.
 *
 * The plan cuts the sorted pairs into batches of at most `max_pairs` (the
 * temporaries a batch needs are bounded whatever T is), never across a
 * group: a group is a run of experts holding at most `group` streamed ones
 * (those whose weights are copied into one half of the device's two-half
 * ring, half = group % 2).  For each batch it lists the rows it touches and,
 * per row, its pairs in ascending expert id (CSR), which is the order the
 * accumulation adds them in.  Private to the engine's backends (like
 * backend_impl.h); pure host arithmetic, tested on the CPU
 * (tests/engine/test_moe_plan.c). */
#ifndef NB_ENGINE_MOE_PLAN_H
#define NB_ENGINE_MOE_PLAN_H

#include <stdint.h>

/* Where an expert's weights are: resident on the device, copied from host memory, or computed by the remote hook. */
enum moe_src { MOE_SRC_RESIDENT = 0, MOE_SRC_STREAM = 1, MOE_SRC_REMOTE = 2 };

struct moe_batch {
    int p0, p1;     /* pairs [p0, p1) of the sorted order */
    int group;      /* the ring group whose streamed experts it uses (half group % 2) */
    int r0, r1;     /* its rows [r0, r1) of acc_row (and offsets acc_off[r0 … r1]) */
};

struct moe_plan {
    int n_pairs;
    /* the pairs sorted by (expert, row): row, expert, pair index (row·k + j), weight, source */
    int32_t *row, *expert, *pair;
    float *weight;
    uint8_t *src;
    int32_t *ring_pos; /* streamed pairs: the expert's position in its group's half (0 … group-1); else -1 */
    /* streamed experts in load order; group g is load[load_off[g] … load_off[g+1]) */
    int n_load, n_groups;
    int32_t *load, *load_off;
    int n_batches;
    struct moe_batch *batch;
    /* accumulation: for batch b, rows acc_row[b.r0 … b.r1); row i's pairs are batch-local
     * indices acc_idx[acc_off[i] … acc_off[i+1]) (relative to b.p0), ascending expert */
    int32_t *acc_row, *acc_off, *acc_idx;
};

/* ids/weights: T rows × k (routing order, as the router writes them); src: E
 * entries.  group ≥ 1 streamed experts a half holds, max_pairs ≥ 1.  0, or
 * NB_ENOMEM / NB_EINVAL (an expert id out of range). */
int moe_plan_build(struct moe_plan *p, int T, int k, int E, const int32_t *ids, const float *weights,
                   const uint8_t *src, int group, int max_pairs);
void moe_plan_free(struct moe_plan *p);

#endif
