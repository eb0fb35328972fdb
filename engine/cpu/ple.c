/* ple.c — the hashed n-gram embedding (PLE) added to the wide residual.
 *
 * For position p the ids t_p, t_{p-1}, …, t_{p-N+1} are hashed per order
 * n = 2..N:  mix = ⊕_{s<n} t_{p-s}·m_s  (int64, exact: every product is below
 * 2^63 because the loader checked m_s ≤ INT64_MAX/V), and head h of that
 * order reads table row (mix mod V_h) + off_h.  A predecessor is replaced by
 * the EOS id when it lies before position 0 or when an EOS sits anywhere in
 * t_{p-s}..t_{p-1}: n-grams never reach back across a document boundary
 * (transformers' _shift_right_ignore_eos).
 *
 * The concatenated rows e (NH·W values) give a key per stream (grouped-norm
 * W_pk e) and one value W_pv e; each stream's gate is the signed square root
 * of ⟨key_i, GroupNorm(X)_i⟩/√C, G_i = sigmoid(gate_i)·value, and the layer
 * adds G + silu(dilated causal conv of GroupNorm(G)).  The conv looks back
 * (Kp-1)·N tokens; its state keeps that many normed columns. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"
#include "engine/cpu/cpu.h"

void cpu_ple_rows(const struct model_hparams *hp, const int32_t *tokens, int64_t p, int64_t *rows)
{
    const int N = hp->ple_ngram;
    int64_t ids[MODEL_PLE_MAX_NGRAM];
    bool cut = false; /* an EOS between t_{p-s} and t_{p-1}, or the start of the sequence */
    ids[0] = tokens[p];
    for (int s = 1; s < N; s++) {
        int64_t q = p - s;
        cut |= q < 0;
        ids[s] = cut ? hp->ple_eos : tokens[q];
        if (!cut && tokens[q] == hp->ple_eos) cut = true;
    }
    for (int n = 2; n <= N; n++) {
        uint64_t mix = 0; /* uint64 arithmetic = torch's int64 (wrapping never happens, see above) */
        for (int s = 0; s < n; s++) mix ^= (uint64_t)ids[s] * (uint64_t)hp->ple_mult[s];
        int64_t smix = (int64_t)mix;
        for (int j = 0; j < hp->ple_heads_per_ngram; j++) {
            int h = (n - 2) * hp->ple_heads_per_ngram + j;
            int64_t r = smix % hp->ple_vocab[h];
            if (r < 0) r += hp->ple_vocab[h]; /* torch.remainder: floor modulo */
            rows[h] = r + hp->ple_offset[h];
        }
    }
}

/* G (T × wide) and its grouped norm Gn from the embeddings e (T × P). */
static void gated_values(const struct model_hparams *hp, const struct model_ple_weights *w,
                         const struct cpu_layer_consts *c, const float *X, const float *e, int T, float *key,
                         float *value, float *G, float *Gn)
{
    const int n = hp->hc_count;
    const int64_t C = hp->n_embd, wide = model_wide(hp);
    struct cpu_mat wk = cpu_mat_of(&w->key), wv = cpu_mat_of(&w->value);
    cpu_matmul(&wk, e, T, key);
    cpu_matmul(&wv, e, T, value);
    for (int t = 0; t < T; t++) {
        float *kt = key + t * wide;
        cpu_group_rms_norm(kt, wide, C, c->ple_norm_key, hp->rms_eps, kt);
        cpu_group_rms_norm(X + t * wide, wide, C, c->ple_norm_query, hp->rms_eps, Gn + t * wide); /* query, for now */
        for (int i = 0; i < n; i++) {
            double s = cpu_dot(kt + i * C, Gn + t * wide + i * C, C) / sqrt((double)C);
            double a = fabs(s) > 1e-6 ? fabs(s) : 1e-6;
            float gate = cpu_sigmoid((float)(sqrt(a) * (s > 0 ? 1 : s < 0 ? -1 : 0)));
            for (int64_t j = 0; j < C; j++) G[t * wide + i * C + j] = gate * value[t * C + j];
        }
        cpu_group_rms_norm(G + t * wide, wide, C, c->ple_norm_conv, hp->rms_eps, Gn + t * wide);
    }
}

/* e (T × NH·W): every head's row of every token, gathered first so that a
 * hook (the table on SSD) gets the whole batch in one call. */
static int read_rows(const struct model *m, const struct gw_ple_rows *src, const int32_t *tokens, int64_t n_pos0, int T,
                     float *e)
{
    const struct model_hparams *hp = &m->hp;
    const int NH = hp->ple_n_heads;
    int64_t *rows = malloc((size_t)T * NH * sizeof *rows);
    if (!rows) return NB_ENOMEM;
    for (int t = 0; t < T; t++) cpu_ple_rows(hp, tokens, n_pos0 + t, rows + (int64_t)t * NH);
    int rc = 0;
    char err[256] = "";
    if (src && src->fn) rc = src->fn(src->ctx, T * NH, rows, e, err, sizeof err);
    else
        for (int64_t i = 0; i < (int64_t)T * NH; i++) cpu_get_row(&m->ple_table, rows[i], e + i * hp->ple_row_width);
    free(rows);
    return rc;
}

int cpu_ple_forward(const struct model *m, const struct gw_ple_rows *src, const struct model_layer *l,
                    const struct cpu_layer_consts *c, struct cpu_layer_state *st, const int32_t *tokens,
                    int64_t n_pos0, int T, bool verify, float *X)
{
    const struct model_hparams *hp = &m->hp;
    const int64_t P = hp->ple_embd, wide = model_wide(hp);
    float *e = malloc((size_t)(T * P) * sizeof *e), *key = malloc((size_t)(T * wide) * sizeof *key);
    float *value = malloc((size_t)(T * hp->n_embd) * sizeof *value);
    float *G = malloc((size_t)(T * wide) * sizeof *G), *Gn = malloc((size_t)(T * wide) * sizeof *Gn);
    float *conv = malloc((size_t)(T * wide) * sizeof *conv);
    int rc = e && key && value && G && Gn && conv ? 0 : NB_ENOMEM;
    if (rc) goto out;
    if ((rc = read_rows(m, src, tokens, n_pos0, T, e))) goto out;
    gated_values(hp, &l->ple, c, X, e, T, key, value, G, Gn);
    if (verify && (rc = cpu_ckpt_ple(hp, st, T, Gn))) goto out; /* before the conv state moves */
    cpu_causal_conv_silu(c->ple_conv, hp->ple_conv_kernel, hp->ple_dilation, wide, st->ple_conv, Gn, T, conv);
    for (int64_t i = 0; i < T * wide; i++) X[i] += G[i] + conv[i];
out:
    free(e);
    free(key);
    free(value);
    free(G);
    free(Gn);
    free(conv);
    return rc;
}
