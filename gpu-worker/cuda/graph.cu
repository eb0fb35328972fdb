/* graph.cu — the one-token decode step as a CUDA graph, captured once per
 * sequence and replayed. */
#include "gpu-worker/cuda/backend_cuda.h"

/* The one-token decode step as a CUDA graph.  It is captured once per
 * sequence and replayed while nothing it bakes in changes: the K/V buffers
 * (capacity), the RoPE tables, the arena, the expert layout and which
 * outputs are asked.  The
 * position and token reach the replayed kernels through d_pos / d_tok, copied
 * from pinned host words by the graph's first nodes, and the PLE rows (hashed
 * on the host) likewise; every launch is position-independent (the kernels'
 * dpos forms), so a replay computes what the plain launches compute. */
int cu_decode_graph(cuda_seq *s, const struct gw_eval_args *a)
{
    cuda_backend *be = cbe(s->base.be);
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    const int64_t pos0 = s->base.n_pos, V = hp->n_vocab, wide = model_wide(hp);
    TRY(cu_seq_reserve(s, pos0 + 1));
    TRY(cu_rope_reserve(be, pos0 + 1));
    const size_t need = gw_vram_arena_bytes(m, s->cap); /* engine/vram.c: the budget counts it */
    if (be->arena_cap < need) {
        CK(cudaStreamSynchronize(be->st));
        cu_block_free(be, GW_PART_SCRATCH, be->arena, be->arena_cap);
        be->arena = NULL, be->arena_cap = 0;
        TRY(cu_block_alloc(be, GW_PART_SCRATCH, (void **)&be->arena, need, "the decode arena"));
        be->arena_cap = need;
    }
    s->tokens[pos0] = a->tokens[0];
    be->h_tok[0] = a->tokens[0];
    be->h_pos[0] = pos0;
    const struct gw_ple_rows *pr = &be->base.ple_rows;
    if (hp->ple_layer >= 0) cpu_ple_rows(hp, s->tokens, pos0, be->h_rows);
    if (hp->ple_layer >= 0 && pr->fn) { /* rows depend on the tokens only: asked before the replay */
        char herr[256] = "";
        if (pr->fn(pr->ctx, hp->ple_n_heads, be->h_rows, be->h_ple, herr, sizeof herr)) {
            snprintf(g_msg, sizeof g_msg, "PLE row hook: %s", herr);
            return NB_EIO;
        }
        cu_copied(be, (uint64_t)hp->ple_embd * sizeof(float));
    }
    const int64_t key[10] = {s->cap, be->rope_cap, (int64_t)(uintptr_t)be->arena, (int64_t)be->arena_cap,
                             a->logits_rows != GW_ROWS_NONE && a->logits, a->wide_rows != GW_ROWS_NONE, be->layout_gen,
                             a->logits_rows != GW_ROWS_NONE && a->argmax, be->base.remote.fn != NULL, pr->fn != NULL};
    if (!s->exec || memcmp(key, s->gkey, sizeof key)) {
        if (s->exec) cudaGraphExecDestroy(s->exec);
        s->exec = NULL;
        cudaGraph_t g = NULL;
        CK(cudaStreamBeginCapture(be->st, cudaStreamCaptureModeThreadLocal));
        be->arena_on = true, be->arena_off = 0;
        int rc = cu_eval_dev(s, a, be->d_pos);
        be->arena_on = false, be->arena_off = 0;
        cudaError_t ce = cudaStreamEndCapture(be->st, &g);
        if (rc == 0 && ce != cudaSuccess) rc = cu_fail(ce, "cudaStreamEndCapture", __LINE__);
        if (rc == 0 && (ce = cudaGraphInstantiate(&s->exec, g, 0)) != cudaSuccess) {
            s->exec = NULL;
            rc = cu_fail(ce, "cudaGraphInstantiate", __LINE__);
        }
        if (g) cudaGraphDestroy(g);
        TRY(rc);
        memcpy(s->gkey, key, sizeof key);
    }
    CK(cudaGraphLaunch(s->exec, be->st));
    __atomic_add_fetch(&be->base.graph_replays, 1, __ATOMIC_RELAXED);
    /* the replay's first copies: token, position, PLE rows */
    cu_copied(be, sizeof(int32_t) + sizeof(int64_t) +
                      (hp->ple_layer >= 0 && !pr->fn ? (uint64_t)hp->ple_n_heads * sizeof(int64_t) : 0));
    CK(cudaStreamSynchronize(be->st));
    /* every trunk layer's k routed pairs, as if on the device: cu_mailbox_end takes the remote ones off */
    __atomic_add_fetch(&be->base.experts_computed, (uint64_t)hp->n_expert_used * hp->n_layer, __ATOMIC_RELAXED);
    if (a->logits_rows != GW_ROWS_NONE && a->logits) memcpy(a->logits, be->h_out, (size_t)V * sizeof(float));
    if (a->logits_rows != GW_ROWS_NONE && a->argmax) a->argmax[0] = be->h_arg[0];
    if (a->wide_rows != GW_ROWS_NONE) memcpy(a->wide, be->h_out + V, (size_t)wide * sizeof(float));
    for (int i = 0; i < hp->n_layer; i++) {
        const int cr = m->layers[i].compress_ratio;
        if (cr > 0) s->ls[i].n_blk = (pos0 + 1) / cr;
    }
    return 0;
}
