/* rollback.c — returning into the last verify window without computing any
 * of its rows again (issue 16 item 5; ARCHITECTURE.md §5).
 *
 * A verify window (gw_eval_args.verify) keeps, per layer, what its rows
 * cannot give back once they have moved the state:
 *   - a GDN layer: the conv state and S before the window, the window's qkv
 *     rows (the conv's inputs) and its q, k, v, g, β (the recurrence's);
 *   - the PLE layer: its dilated conv state before the window and the
 *     window's conv inputs (the normed gated values).
 * Going back to n_keep = pos0 + j (0 ≤ j ≤ T) restores those states and
 * pushes the first j rows through: the conv states take the j input rows,
 * S takes j steps of the recurrent form — the very function, inputs and
 * order the window ran (a verify window's GDN is token by token, gdn.c), so
 * the state is the one after those j rows bit for bit, and it is the one j
 * decode steps leave.  K/V, indexer keys, block keys and the token history
 * are position-indexed: truncating them is the caller's (backend_cpu.c).
 * Nothing is projected, routed or attended again; gw_backend_rows_replayed
 * counts the j positions. */
#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"
#include "engine/cpu/cpu.h"

/* Floats a row of ck_in holds: qkv (conv_dim), q and k (k_dim each), v (v_dim), g and β (Hv each). */
static int64_t gdn_row_floats(const struct model_hparams *hp)
{
    return model_gdn_conv_dim(hp) + 2 * model_gdn_k_dim(hp) + model_gdn_v_dim(hp) + 2 * (int64_t)hp->ssm_n_v_heads;
}

static int grow_rows(const struct model_hparams *hp, struct cpu_layer_state *st, int T)
{
    if (T <= st->ck_rows) return 0;
    const int64_t wide = model_wide(hp);
    if (st->conv) { /* a GDN layer */
        float *in = realloc(st->ck_in, (size_t)(T * gdn_row_floats(hp)) * sizeof *in);
        if (!in) return NB_ENOMEM;
        st->ck_in = in;
        if (!st->ck_conv && !(st->ck_conv = malloc((size_t)model_gdn_conv_state_floats(hp) * sizeof(float)))) return NB_ENOMEM;
        if (!st->ck_ssm && !(st->ck_ssm = malloc((size_t)model_gdn_ssm_state_floats(hp) * sizeof(float)))) return NB_ENOMEM;
    }
    if (st->ple_conv) {
        float *p = realloc(st->ck_ple, (size_t)(model_ple_conv_state_floats(hp) + T * wide) * sizeof *p);
        if (!p) return NB_ENOMEM;
        st->ck_ple = p;
    }
    st->ck_rows = T;
    return 0;
}

int cpu_ckpt_gdn_state(const struct model_hparams *hp, struct cpu_layer_state *st, int T, const float *qkv)
{
    if (grow_rows(hp, st, T)) return NB_ENOMEM;
    memcpy(st->ck_conv, st->conv, (size_t)model_gdn_conv_state_floats(hp) * sizeof(float));
    memcpy(st->ck_ssm, st->ssm, (size_t)model_gdn_ssm_state_floats(hp) * sizeof(float));
    memcpy(st->ck_in, qkv, (size_t)(T * model_gdn_conv_dim(hp)) * sizeof(float));
    return 0;
}

void cpu_ckpt_gdn_inputs(const struct model_hparams *hp, struct cpu_layer_state *st, int T, const float *q, const float *k,
                         const float *v, const float *g, const float *beta)
{
    const int64_t kd = model_gdn_k_dim(hp), vd = model_gdn_v_dim(hp), Hv = hp->ssm_n_v_heads;
    float *p = st->ck_in + T * model_gdn_conv_dim(hp);
    memcpy(p, q, (size_t)(T * kd) * sizeof *p), p += T * kd;
    memcpy(p, k, (size_t)(T * kd) * sizeof *p), p += T * kd;
    memcpy(p, v, (size_t)(T * vd) * sizeof *p), p += T * vd;
    memcpy(p, g, (size_t)(T * Hv) * sizeof *p), p += T * Hv;
    memcpy(p, beta, (size_t)(T * Hv) * sizeof *p);
}

int cpu_ckpt_ple(const struct model_hparams *hp, struct cpu_layer_state *st, int T, const float *in)
{
    if (grow_rows(hp, st, T)) return NB_ENOMEM;
    const int64_t n = model_ple_conv_state_floats(hp);
    memcpy(st->ck_ple, st->ple_conv, (size_t)n * sizeof(float));
    memcpy(st->ck_ple + n, in, (size_t)(T * model_wide(hp)) * sizeof(float));
    return 0;
}

void cpu_ckpt_free(struct cpu_layer_state *st)
{
    free(st->ck_conv), free(st->ck_ssm), free(st->ck_in), free(st->ck_ple);
    st->ck_conv = st->ck_ssm = st->ck_in = st->ck_ple = NULL;
    st->ck_rows = 0;
}

int cpu_rollback(struct cpu_seq *s, int64_t n_keep, char *err, size_t errlen)
{
    const struct model *m = s->base.be->model;
    const struct model_hparams *hp = &m->hp;
    int rc = gw_rollback_check(&s->base, n_keep, s->ck_pos0, s->ck_T, err, errlen);
    if (rc) return rc;
    const int T = s->ck_W, j = (int)(n_keep - s->ck_pos0); /* T: the layout's rows, ck_T ≤ T of them kept */
    const struct cpu_gdn_dims dims = {hp->ssm_n_k_heads, hp->ssm_n_v_heads, hp->ssm_k_head_dim, hp->ssm_v_head_dim};
    const int64_t kd = model_gdn_k_dim(hp), vd = model_gdn_v_dim(hp), Hv = hp->ssm_n_v_heads, cd = model_gdn_conv_dim(hp);
    float *out = malloc((size_t)((j > 0 ? j : 1) * vd) * sizeof *out); /* the recurrence's outputs, not needed */
    if (!out) return nb_errf(err, errlen, NB_ENOMEM, "rollback");
    for (int il = 0; il < hp->n_layer; il++) {
        const struct model_layer *l = &m->layers[il];
        struct cpu_layer_state *st = &s->ls[il];
        if (l->kind == MODEL_LAYER_GDN) {
            memcpy(st->conv, st->ck_conv, (size_t)model_gdn_conv_state_floats(hp) * sizeof(float));
            memcpy(st->ssm, st->ck_ssm, (size_t)model_gdn_ssm_state_floats(hp) * sizeof(float));
            const float *qkv = st->ck_in, *q = qkv + T * cd, *k = q + T * kd, *v = k + T * kd, *g = v + T * vd,
                        *beta = g + T * Hv;
            cpu_conv_state_push(hp->ssm_conv_kernel, 1, cd, st->conv, qkv, j);
            if (j > 0) cpu_gdn_core_recurrent(&dims, j, q, k, v, g, beta, st->ssm, out);
        }
        if (l->has_ple) {
            const int64_t n = model_ple_conv_state_floats(hp);
            memcpy(st->ple_conv, st->ck_ple, (size_t)n * sizeof(float));
            cpu_conv_state_push(hp->ple_conv_kernel, hp->ple_dilation, model_wide(hp), st->ple_conv, st->ck_ple + n, j);
        }
    }
    free(out);
    __atomic_add_fetch(&s->base.be->rows_replayed, (uint64_t)j, __ATOMIC_RELAXED);
    s->ck_T = j; /* the window's first j rows stay; a later truncate may still go back into them */
    return 0;
}
