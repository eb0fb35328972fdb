/* rollback.cu — returning into the last verify window without computing any
 * of its rows again, on the device (engine/cpu/rollback.c's twin; issue 16
 * item 5, ARCHITECTURE.md §5).
 *
 * A verify window (gw_eval_args.verify) keeps, per trunk layer, in one
 * block per sequence (gw_vram_verify_layout: the plan counts it), what its
 * rows cannot give back once they have moved the state: a GDN layer's conv
 * state and S before the window and its rows' conv inputs and recurrence
 * inputs (gdn.cu writes them), the PLE layer's conv state before it and its
 * rows' conv inputs (ple.cu).  Going back to n_keep = pos0 + j restores those
 * states and pushes the first j rows through the same kernels the window ran
 * (k_conv_silu for the conv states, the recurrent delta rule for S — a
 * verify window's GDN is token by token), so the state is the one after
 * those j rows bit for bit.  K/V, indexer keys, block keys and the token
 * history are position-indexed: truncating them is seq.cu's.  Nothing is
 * projected, routed or attended again; gw_backend_rows_replayed counts the j
 * positions. */
#include "gpu-worker/cuda/backend_cuda.h"

int cu_verify_reserve(cuda_seq *s)
{
    if (s->ck_blk) return 0;
    cuda_backend *be = cbe(s->base.be);
    const struct model *m = be->base.model;
    const int L = m->hp.n_layer;
    uint64_t(*off)[GW_VRAM_VERIFY_ARRAYS] =
        (uint64_t(*)[GW_VRAM_VERIFY_ARRAYS])malloc((size_t)(L > 0 ? L : 1) * sizeof *off);
    if (!off) {
        snprintf(g_msg, sizeof g_msg, "out of host memory");
        return NB_ENOMEM;
    }
    const uint64_t bytes = gw_vram_verify_layout(m, off);
    int rc = cu_block_alloc(be, GW_PART_KV, &s->ck_blk, bytes, "verify checkpoint");
    if (rc == 0) s->ck_bytes = bytes;
    for (int i = 0; i < L && rc == 0; i++) {
        cu_lstate *st = &s->ls[i];
        st->ck_conv = cu_at_off(s->ck_blk, off[i][0]), st->ck_ssm = cu_at_off(s->ck_blk, off[i][1]);
        st->ck_in = cu_at_off(s->ck_blk, off[i][2]);
        st->ck_ple_conv = cu_at_off(s->ck_blk, off[i][3]), st->ck_ple_in = cu_at_off(s->ck_blk, off[i][4]);
    }
    free(off);
    return rc;
}

void cu_verify_free(cuda_seq *s)
{
    cu_block_free(cbe(s->base.be), GW_PART_KV, s->ck_blk, s->ck_bytes);
    s->ck_blk = NULL, s->ck_bytes = 0, s->ck_T = 0;
}

/* The states of every trunk layer back to the window's start, then its first j rows replayed. */
static int replay(cuda_seq *s, int j)
{
    cuda_backend *be = cbe(s->base.be);
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    const int64_t cd = model_gdn_conv_dim(hp), wide = model_wide(hp), vd = model_gdn_v_dim(hp);
    const int64_t scratch_row = cd > wide ? cd : wide;
    cudaStream_t st = be->st;
    tmp t = tmp_begin(be);
    float *out, *conv_out; /* what the replayed kernels output besides the state: not needed */
    const int n = j > 0 ? j : 1;
    int rc = cu_talloc(&t, &out, (int64_t)n * (vd > 0 ? vd : 1));
    if (rc == 0) rc = cu_talloc(&t, &conv_out, (int64_t)n * scratch_row);
    cudaError_t e = cudaSuccess;
    for (int il = 0; il < hp->n_layer && rc == 0; il++) {
        const struct model_layer *l = &m->layers[il];
        const cu_layer *c = &be->L[il];
        cu_lstate *ls = &s->ls[il];
        if (l->kind == MODEL_LAYER_GDN) {
            const cu_ck_rows ck = cu_ck_rows_of(hp, ls->ck_in);
            e = cu_dcopy_async(ls->conv, ls->ck_conv, model_gdn_conv_state_floats(hp), st);
            if (e == cudaSuccess) e = cu_dcopy_async(ls->ssm, ls->ck_ssm, model_gdn_ssm_state_floats(hp), st);
            if (e != cudaSuccess) {
                rc = cu_fail(e, "rollback (GDN state)", __LINE__);
                break;
            }
            if (j > 0) {
                cu_conv_silu(nblk(cd, 128), 128, st, c->gdn_conv, hp->ssm_conv_kernel, 1, cd, ls->conv, ck.qkv, j, conv_out);
                rc = LCHK("k_conv_silu (rollback)");
                if (rc == 0) rc = cu_gdn_recurrence(be, j, ck.mixed, cd, ck.g, ck.beta, ls->ssm, out);
            }
        }
        if (rc == 0 && l->has_ple) {
            e = cu_dcopy_async(ls->ple_conv, ls->ck_ple_conv, model_ple_conv_state_floats(hp), st);
            if (e != cudaSuccess) rc = cu_fail(e, "rollback (PLE state)", __LINE__);
            if (rc == 0 && j > 0) {
                cu_conv_silu(nblk(wide, 128), 128, st, c->ple_conv, hp->ple_conv_kernel, hp->ple_dilation, wide,
                             ls->ple_conv, ls->ck_ple_in, j, conv_out);
                rc = LCHK("k_conv_silu (PLE rollback)");
            }
        }
    }
    if (rc == 0 && (e = cudaStreamSynchronize(st)) != cudaSuccess) rc = cu_fail(e, "rollback", __LINE__);
    return cu_tdone(&t, rc);
}

int cu_rollback(cuda_seq *s, int64_t n_keep, char *err, size_t errlen)
{
    if (s->broken) return nb_errf(err, errlen, NB_EINVAL, "sequence state is inconsistent after a failed call: reset it");
    int rc = gw_rollback_check(&s->base, n_keep, s->ck_pos0, s->ck_blk ? s->ck_T : 0, err, errlen);
    if (rc) return rc;
    const int j = (int)(n_keep - s->ck_pos0);
    rc = replay(s, j);
    if (rc) {
        s->broken = true;
        return nb_errf(err, errlen, rc, "truncate to %lld: %s", (long long)n_keep, g_msg);
    }
    __atomic_add_fetch(&s->base.be->rows_replayed, (uint64_t)j, __ATOMIC_RELAXED);
    s->ck_T = j; /* the window's first j rows stay; a later truncate may still go back into them */
    return 0;
}
