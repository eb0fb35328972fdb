/* gdn.c — Gated DeltaNet: projections, causal conv, and the delta rule.
 *
 * Per value head the state S (dk × dv) follows, token by token,
 *     S ← exp(g)·S;  δ = β(v − Sᵀk);  S ← S + k δᵀ;  o = Sᵀq.
 * The recurrent form does exactly that.  The chunked form (transformers'
 * torch_chunk_gated_delta_rule, chunks of 64) gets the same result for a
 * chunk at once: with cumulative log decays c_i and the strictly lower
 * matrix A_ij = β_i (k_i·k_j) e^{c_i−c_j}, the chunk's corrections solve
 * (I + A)U = βv and (I + A)W = β e^{c} k by forward substitution, then
 *     v'_i = U_i − W_iᵀ S,   o_i = e^{c_i} Sᵀq_i + Σ_{j≤i} (q_i·k_j) e^{c_i−c_j} v'_j,
 *     S ← e^{c_last} S + Σ_i e^{c_last−c_i} k_i v'_iᵀ.
 * A short last chunk is the padded chunk without its zero rows (padding adds
 * nothing), so no padding is materialised.  Decode (one token) uses the
 * recurrent form, a prefill the chunked one, as transformers does; a verify
 * window (gw_eval_args.verify) the recurrent one, so that its rows are the
 * decode steps' bit for bit and rollback.c can replay any prefix of it.
 * q and k heads are dk wide, v and the output dv wide (dk ≠ dv is allowed):
 * S is dk × dv, U and v' have rows of dv, W rows of dk. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"
#include "engine/cpu/cpu.h"

void cpu_gdn_core_recurrent(const struct cpu_gdn_dims *d, int T, const float *q, const float *k, const float *v,
                            const float *g, const float *beta, float *state, float *out)
{
    const int Hk = d->n_k_heads, Hv = d->n_v_heads, Dk = d->k_head_dim, Dv = d->v_head_dim;
#pragma omp parallel for schedule(static) if ((int64_t)Hv * T * Dk * Dv >= CPU_PAR_MIN_WORK)
    for (int h = 0; h < Hv; h++) {
        float *S = state + (size_t)h * Dk * Dv, delta[Dv]; /* S[i·Dv + j]: key row i, value column j */
        const int kh = h % Hk; /* tiled value heads */
        for (int t = 0; t < T; t++) {
            const float *qt = q + ((size_t)t * Hk + kh) * Dk, *kt = k + ((size_t)t * Hk + kh) * Dk;
            const float *vt = v + ((size_t)t * Hv + h) * Dv;
            const float decay = expf(g[(size_t)t * Hv + h]), b = beta[(size_t)t * Hv + h];
            for (int i = 0; i < Dk * Dv; i++) S[i] *= decay;
            for (int j = 0; j < Dv; j++) {
                double kv = 0;
                for (int i = 0; i < Dk; i++) kv += (double)S[i * Dv + j] * kt[i];
                delta[j] = (float)((vt[j] - kv) * b);
            }
            for (int i = 0; i < Dk; i++)
                for (int j = 0; j < Dv; j++) S[i * Dv + j] += kt[i] * delta[j];
            float *ot = out + ((size_t)t * Hv + h) * Dv;
            for (int j = 0; j < Dv; j++) {
                double o = 0;
                for (int i = 0; i < Dk; i++) o += (double)S[i * Dv + j] * qt[i];
                ot[j] = (float)o;
            }
        }
    }
}

/* Scratch of one head for one chunk of up to `chunk` tokens. */
struct chunk_scratch {
    double *cum; /* chunk */
    float *A;    /* chunk × chunk, strictly lower */
    float *U;    /* chunk × dv (value-sized rows) */
    float *W;    /* chunk × dk (key-sized rows) */
};

/* One chunk of L tokens of value head h (see the comment at the top). */
static void chunk_step(const struct cpu_gdn_dims *d, int L, int h, const float *q, const float *k, const float *v,
                       const float *g, const float *beta, float *S, float *out, const struct chunk_scratch *sc)
{
    const int Hk = d->n_k_heads, Hv = d->n_v_heads, Dk = d->k_head_dim, Dv = d->v_head_dim, kh = h % Hk;
#define QROW(i) (q + ((size_t)(i) * Hk + kh) * Dk)
#define KROW(i) (k + ((size_t)(i) * Hk + kh) * Dk)
    double *cum = sc->cum;
    float *A = sc->A, *U = sc->U, *W = sc->W;
    double run = 0;
    for (int i = 0; i < L; i++) cum[i] = run += g[(size_t)i * Hv + h];
    for (int i = 0; i < L; i++) {
        const float bi = beta[(size_t)i * Hv + h];
        for (int j = 0; j < i; j++) A[i * L + j] = (float)(bi * cpu_dot(KROW(i), KROW(j), Dk) * exp(cum[i] - cum[j]));
        /* forward substitution, row i of (I + A)⁻¹ applied to βv (dv wide) and βe^{c}k (dk wide) */
        const float *vi = v + ((size_t)i * Hv + h) * Dv;
        for (int c = 0; c < Dv; c++) {
            double u = (double)bi * vi[c];
            for (int j = 0; j < i; j++) u -= (double)A[i * L + j] * U[j * Dv + c];
            U[i * Dv + c] = (float)u;
        }
        for (int c = 0; c < Dk; c++) {
            double w = (double)bi * exp(cum[i]) * KROW(i)[c];
            for (int j = 0; j < i; j++) w -= (double)A[i * L + j] * W[j * Dk + c];
            W[i * Dk + c] = (float)w;
        }
    }
    /* v' = U − W S, in place in U (S is still the chunk's initial state). */
    for (int i = 0; i < L; i++)
        for (int c = 0; c < Dv; c++) {
            double s = 0;
            for (int a = 0; a < Dk; a++) s += (double)W[i * Dk + a] * S[a * Dv + c];
            U[i * Dv + c] -= (float)s;
        }
    /* A is free again: it now holds the decayed intra-chunk scores, diagonal included. */
    for (int i = 0; i < L; i++)
        for (int j = 0; j <= i; j++) A[i * L + j] = (float)(cpu_dot(QROW(i), KROW(j), Dk) * exp(cum[i] - cum[j]));
    for (int i = 0; i < L; i++) {
        float *oi = out + ((size_t)i * Hv + h) * Dv;
        for (int c = 0; c < Dv; c++) {
            double inter = 0, intra = 0;
            for (int a = 0; a < Dk; a++) inter += (double)QROW(i)[a] * S[a * Dv + c];
            for (int j = 0; j <= i; j++) intra += (double)A[i * L + j] * U[j * Dv + c];
            oi[c] = (float)(exp(cum[i]) * inter + intra);
        }
    }
    const double last = cum[L - 1];
    for (int i = 0; i < L; i++) cum[i] = exp(last - cum[i]); /* decay from token i to the chunk's end */
    for (int a = 0; a < Dk; a++)
        for (int c = 0; c < Dv; c++) {
            double s = exp(last) * S[a * Dv + c];
            for (int i = 0; i < L; i++) s += cum[i] * KROW(i)[a] * U[i * Dv + c];
            S[a * Dv + c] = (float)s;
        }
#undef QROW
#undef KROW
}

void cpu_gdn_core_chunked(const struct cpu_gdn_dims *d, int T, int chunk, const float *q, const float *k,
                          const float *v, const float *g, const float *beta, float *state, float *out)
{
    const int Hk = d->n_k_heads, Hv = d->n_v_heads, Dk = d->k_head_dim, Dv = d->v_head_dim;
#pragma omp parallel for schedule(static) if ((int64_t)Hv * T * chunk * (Dk > Dv ? Dk : Dv) >= CPU_PAR_MIN_WORK)
    for (int h = 0; h < Hv; h++) {
        /* Per-head scratch on the stack keeps this allocation-free; sizes are
         * chunk-bound (64 → ~100 KiB at dk = dv = 128). */
        double cum[chunk];
        float A[chunk * chunk], U[chunk * Dv], W[chunk * Dk];
        struct chunk_scratch sc = {cum, A, U, W};
        float *S = state + (size_t)h * Dk * Dv;
        for (int c0 = 0; c0 < T; c0 += chunk) {
            int L = T - c0 < chunk ? T - c0 : chunk;
            chunk_step(d, L, h, q + (size_t)c0 * Hk * Dk, k + (size_t)c0 * Hk * Dk, v + (size_t)c0 * Hv * Dv,
                       g + (size_t)c0 * Hv, beta + (size_t)c0 * Hv, S, out + (size_t)c0 * Hv * Dv, &sc);
        }
    }
}

/* x · rsqrt(Σx² + 1e-6) (transformers' l2norm: a fixed eps, not rms_norm_eps), then × scale. */
static void l2norm_scale(float *x, int n, float scale)
{
    float inv = (float)(1.0 / sqrt(cpu_dot(x, x, n) + 1e-6));
    for (int i = 0; i < n; i++) x[i] = x[i] * inv * scale;
}

int cpu_gdn_forward(const struct model_hparams *hp, const struct model_gdn *w, const struct cpu_layer_consts *c,
                    struct cpu_layer_state *st, const float *x, int T, bool verify, float *y)
{
    const int Hk = hp->ssm_n_k_heads, Hv = hp->ssm_n_v_heads, Dk = hp->ssm_k_head_dim, Dv = hp->ssm_v_head_dim;
    const int64_t conv_dim = model_gdn_conv_dim(hp), vdim = model_gdn_v_dim(hp), kdim = model_gdn_k_dim(hp);
    float *qkv = malloc((size_t)(T * conv_dim) * sizeof *qkv), *mixed = malloc((size_t)(T * conv_dim) * sizeof *mixed);
    float *z = malloc((size_t)(T * vdim) * sizeof *z), *o = malloc((size_t)(T * vdim) * sizeof *o);
    float *q = malloc((size_t)(T * kdim) * sizeof *q), *k = malloc((size_t)(T * kdim) * sizeof *k);
    float *v = malloc((size_t)(T * vdim) * sizeof *v);
    float *gb = malloc((size_t)(2 * T * Hv) * sizeof *gb); /* g then beta */
    int rc = qkv && mixed && z && o && q && k && v && gb ? 0 : NB_ENOMEM;
    if (rc) goto out;
    float *g = gb, *beta = gb + (size_t)T * Hv;
    struct cpu_mat wqkv = cpu_mat_of(&w->qkv), wz = cpu_mat_of(&w->gate), wa = cpu_mat_of(&w->alpha),
                   wb = cpu_mat_of(&w->beta), wout = cpu_mat_of(&w->out);
    cpu_matmul(&wqkv, x, T, qkv);
    cpu_matmul(&wz, x, T, z);
    cpu_matmul(&wb, x, T, beta);
    cpu_matmul(&wa, x, T, g);
    if (verify && (rc = cpu_ckpt_gdn_state(hp, st, T, qkv))) goto out; /* before the state moves */
    cpu_causal_conv_silu(c->gdn_conv, hp->ssm_conv_kernel, 1, conv_dim, st->conv, qkv, T, mixed);
    const float qscale = 1.0f / sqrtf((float)Dk);
    for (int t = 0; t < T; t++) {
        const float *m = mixed + t * conv_dim;
        memcpy(q + t * kdim, m, (size_t)kdim * sizeof *q);
        memcpy(k + t * kdim, m + kdim, (size_t)kdim * sizeof *k);
        memcpy(v + t * vdim, m + 2 * kdim, (size_t)vdim * sizeof *v);
        for (int h = 0; h < Hk; h++) {
            l2norm_scale(q + t * kdim + h * Dk, Dk, qscale);
            l2norm_scale(k + t * kdim + h * Dk, Dk, 1.0f);
        }
        for (int h = 0; h < Hv; h++) {
            beta[t * Hv + h] = cpu_sigmoid(beta[t * Hv + h]);
            g[t * Hv + h] = c->gdn_a[h] * cpu_softplus(g[t * Hv + h] + c->gdn_dt_bias[h]);
        }
    }
    struct cpu_gdn_dims dims = {Hk, Hv, Dk, Dv};
    if (verify) cpu_ckpt_gdn_inputs(hp, st, T, q, k, v, g, beta);
    /* a verify window token by token: each row is the decode step's, and a rollback replays the same steps */
    if (T == 1 || verify)
        cpu_gdn_core_recurrent(&dims, T, q, k, v, g, beta, st->ssm, o);
    else
        cpu_gdn_core_chunked(&dims, T, CPU_GDN_CHUNK, q, k, v, g, beta, st->ssm, o);
    /* Gated RMS norm per value head (dv wide): plain weight, then the output
     * gate, sigmoid(z) (the released model) or silu(z) = z·sigmoid(z). */
    const bool silu = hp->ssm_gate_silu;
    for (int64_t r = 0; r < (int64_t)T * Hv; r++) {
        cpu_rms_norm(o + r * Dv, Dv, c->gdn_norm, hp->rms_eps, o + r * Dv);
        for (int j = 0; j < Dv; j++) {
            const float zj = z[r * Dv + j];
            o[r * Dv + j] *= silu ? zj * cpu_sigmoid(zj) : cpu_sigmoid(zj);
        }
    }
    cpu_matmul(&wout, o, T, y);
out:
    free(qkv);
    free(mixed);
    free(z);
    free(o);
    free(q);
    free(k);
    free(v);
    free(gb);
    return rc;
}
