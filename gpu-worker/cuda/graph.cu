/* graph.cu — the one-token decode step and each size of verify window as
 * CUDA graphs, captured once per sequence and replayed. */
#include "gpu-worker/cuda/backend_cuda.h"

int cu_step_pin(cuda_backend *be, int rows)
{
    if (rows <= be->step_rows) return 0;
    const struct model_hparams *hp = &be->base.model->hp;
    if (be->h_tok) CK(cudaStreamSynchronize(be->st)); /* a replay may still read or write them */
    cudaFreeHost(be->h_pos), cudaFreeHost(be->h_tok), cudaFreeHost(be->h_rows), cudaFreeHost(be->h_out);
    cudaFreeHost(be->h_arg), cudaFreeHost(be->h_ple);
    be->h_pos = NULL, be->h_tok = NULL, be->h_rows = NULL, be->h_out = NULL, be->h_arg = NULL, be->h_ple = NULL;
    be->step_rows = 0; /* a failure below leaves none, and the next graph asks again */
    be->pin_gen++;
    const size_t R = (size_t)rows;
    CK(cudaMallocHost(&be->h_pos, sizeof(int64_t)));
    CK(cudaMallocHost(&be->h_tok, R * sizeof(int32_t)));
    CK(cudaMallocHost(&be->h_rows, R * (size_t)(hp->ple_n_heads > 0 ? hp->ple_n_heads : 1) * sizeof(int64_t)));
    CK(cudaMallocHost(&be->h_out, R * (size_t)(hp->n_vocab + model_wide(hp)) * sizeof(float)));
    CK(cudaMallocHost(&be->h_arg, R * sizeof(int32_t)));
    CK(cudaMallocHost(&be->h_ple, R * (size_t)(hp->ple_embd > 0 ? hp->ple_embd : 1) * sizeof(float)));
    be->step_rows = rows;
    return 0;
}

/* The one-token decode step, and a verify window of T ≤ GW_VERIFY_ROWS rows
 * (its checkpoint copies included), as CUDA graphs: one per sequence for
 * the step, one per window size.  A graph is replayed while nothing it
 * bakes in changes (the key): the K/V buffers (capacity), the RoPE tables,
 * the arena, the pinned buffers, the checkpoint block, the expert layout,
 * which outputs are asked.  The first row's position and the tokens reach
 * the replayed kernels through d_pos / d_tok, copied from pinned host words
 * by the graph's first nodes, and the PLE rows (hashed on the host) likewise;
 * every launch is position-independent (the kernels' dpos forms: each row's
 * position is d_pos + its index), so a replay computes what the plain
 * launches compute, and a window's row what the step at its position does. */
int cu_decode_graph(cuda_seq *s, const struct gw_eval_args *a)
{
    cuda_backend *be = cbe(s->base.be);
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    const int T = a->n_tokens;
    const int64_t pos0 = s->base.n_pos, V = hp->n_vocab, wide = model_wide(hp);
    TRY(cu_seq_reserve(s, pos0 + T));
    TRY(cu_rope_reserve(be, pos0 + T));
    if (a->verify) TRY(cu_verify_reserve(s));
    TRY(cu_step_pin(be, T > 1 || a->verify ? GW_VERIFY_ROWS : 1));
    const size_t need = gw_vram_arena_bytes(m, s->cap); /* engine/vram.c: the budget counts it */
    if (be->arena_cap < need) {
        CK(cudaStreamSynchronize(be->st));
        cu_block_free(be, GW_PART_SCRATCH, be->arena, be->arena_cap);
        be->arena = NULL, be->arena_cap = 0;
        TRY(cu_block_alloc(be, GW_PART_SCRATCH, (void **)&be->arena, need, "the decode arena"));
        be->arena_cap = need;
    }
    memcpy(s->tokens + pos0, a->tokens, (size_t)T * sizeof *s->tokens);
    memcpy(be->h_tok, a->tokens, (size_t)T * sizeof *be->h_tok);
    be->h_pos[0] = pos0;
    const struct gw_ple_rows *pr = &be->base.ple_rows;
    const int NH = hp->ple_n_heads;
    for (int r = 0; r < T && hp->ple_layer >= 0; r++) cpu_ple_rows(hp, s->tokens, pos0 + r, be->h_rows + (int64_t)r * NH);
    if (hp->ple_layer >= 0 && pr->fn) { /* rows depend on the tokens only: asked before the replay */
        char herr[256] = "";
        if (pr->fn(pr->ctx, T * NH, be->h_rows, be->h_ple, herr, sizeof herr)) {
            snprintf(g_msg, sizeof g_msg, "PLE row hook: %s", herr);
            return NB_EIO;
        }
        cu_copied(be, (uint64_t)T * hp->ple_embd * sizeof(float));
    }
    const bool logits = a->logits_rows != GW_ROWS_NONE && a->logits, argmax = a->logits_rows != GW_ROWS_NONE && a->argmax;
    const int64_t key[CU_GRAPH_KEY] = {s->cap, be->rope_cap, (int64_t)(uintptr_t)be->arena, (int64_t)be->arena_cap,
                                       logits, a->wide_rows != GW_ROWS_NONE, be->layout_gen, argmax,
                                       be->base.remote.fn != NULL, pr->fn != NULL, T, a->verify,
                                       (int64_t)(uintptr_t)s->ck_blk, be->pin_gen, a->logits_rows, a->wide_rows};
    cudaGraphExec_t *exec = a->verify ? &s->wexec[T] : &s->exec;
    int64_t *gkey = a->verify ? s->wkey[T] : s->gkey;
    if (!*exec || memcmp(key, gkey, sizeof key)) {
        if (*exec) cudaGraphExecDestroy(*exec);
        *exec = NULL;
        cudaGraph_t g = NULL;
        CK(cudaStreamBeginCapture(be->st, cudaStreamCaptureModeThreadLocal));
        be->arena_on = true, be->arena_off = 0;
        int rc = cu_eval_dev(s, a, be->d_pos);
        be->arena_on = false, be->arena_off = 0;
        cudaError_t ce = cudaStreamEndCapture(be->st, &g);
        if (rc == 0 && ce != cudaSuccess) rc = cu_fail(ce, "cudaStreamEndCapture", __LINE__);
        if (rc == 0 && (ce = cudaGraphInstantiate(exec, g, 0)) != cudaSuccess) {
            *exec = NULL;
            rc = cu_fail(ce, "cudaGraphInstantiate", __LINE__);
        }
        if (g) cudaGraphDestroy(g);
        TRY(rc);
        memcpy(gkey, key, sizeof key);
    }
    CK(cudaGraphLaunch(*exec, be->st));
    __atomic_add_fetch(&be->base.graph_replays, 1, __ATOMIC_RELAXED);
    /* the replay's first copies: tokens, position, PLE rows */
    cu_copied(be, (uint64_t)T * sizeof(int32_t) + sizeof(int64_t) +
                      (hp->ple_layer >= 0 && !pr->fn ? (uint64_t)T * NH * sizeof(int64_t) : 0));
    CK(cudaStreamSynchronize(be->st));
    /* every trunk layer's k routed pairs a row, as if on the device: cu_mailbox_end takes the remote ones off */
    __atomic_add_fetch(&be->base.experts_computed, (uint64_t)hp->n_expert_used * hp->n_layer * T, __ATOMIC_RELAXED);
    const int nl = a->logits_rows == GW_ROWS_LAST ? 1 : T, nw = a->wide_rows == GW_ROWS_LAST ? 1 : T;
    if (logits) memcpy(a->logits, be->h_out, (size_t)nl * V * sizeof(float));
    if (argmax) memcpy(a->argmax, be->h_arg, (size_t)nl * sizeof(int32_t));
    if (a->wide_rows != GW_ROWS_NONE)
        memcpy(a->wide, be->h_out + (int64_t)be->step_rows * V, (size_t)(nw * wide) * sizeof(float));
    for (int i = 0; i < hp->n_layer; i++) {
        const int cr = m->layers[i].compress_ratio;
        if (cr > 0) s->ls[i].n_blk = (pos0 + T) / cr;
    }
    return 0;
}
