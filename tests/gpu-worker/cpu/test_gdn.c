/* test_gdn.c — the two forms of the gated delta rule (gpu-worker/cpu/gdn.c)
 * agree: the token-by-token recurrence and transformers' chunked prefill,
 * on random inputs, from a non-zero state, for lengths on and off the chunk
 * size, and when a prefill is split into several calls. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu-worker/cpu/cpu.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double uniform(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static float normal(void) { return (float)(sqrt(-2 * log(uniform() + 1e-300)) * cos(6.283185307179586 * uniform())); }

struct gdn_case {
    struct cpu_gdn_dims d;
    int T;
    float *q, *k, *v, *g, *beta, *state0;
};

/* Random inputs shaped like the layer's: unit q, k (q scaled by 1/√dk),
 * decays in (e^-3, 1], β in (0, 1). */
static struct gdn_case make_case(int Hk, int Hv, int D, int T)
{
    struct gdn_case c = {{Hk, Hv, D, D}, T, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t nk = (size_t)T * Hk * D, nv = (size_t)T * Hv * D, ns = (size_t)Hv * D * D;
    c.q = malloc(nk * sizeof(float)), c.k = malloc(nk * sizeof(float)), c.v = malloc(nv * sizeof(float));
    c.g = malloc((size_t)T * Hv * sizeof(float)), c.beta = malloc((size_t)T * Hv * sizeof(float));
    c.state0 = malloc(ns * sizeof(float));
    for (size_t i = 0; i < nk; i += (size_t)D) {
        double sq = 0, sk = 0;
        for (int j = 0; j < D; j++) {
            c.q[i + j] = normal(), c.k[i + j] = normal();
            sq += c.q[i + j] * c.q[i + j], sk += c.k[i + j] * c.k[i + j];
        }
        for (int j = 0; j < D; j++) {
            c.q[i + j] = (float)(c.q[i + j] / sqrt(sq) / sqrt(D));
            c.k[i + j] = (float)(c.k[i + j] / sqrt(sk));
        }
    }
    for (size_t i = 0; i < nv; i++) c.v[i] = normal();
    for (int i = 0; i < T * Hv; i++) c.g[i] = (float)(-3.0 * uniform() * uniform()), c.beta[i] = (float)uniform();
    for (size_t i = 0; i < ns; i++) c.state0[i] = 0.1f * normal();
    return c;
}

static void free_case(struct gdn_case *c)
{
    free(c->q), free(c->k), free(c->v), free(c->g), free(c->beta), free(c->state0);
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* Runs both forms (the chunked one in pieces of `split` tokens per call) and
 * compares outputs and final states. */
static void check_forms(int Hk, int Hv, int D, int T, int chunk, int split)
{
    struct gdn_case c = make_case(Hk, Hv, D, T);
    size_t nv = (size_t)T * Hv * D, ns = (size_t)Hv * D * D;
    float *o_rec = malloc(nv * sizeof(float)), *o_chk = malloc(nv * sizeof(float));
    float *s_rec = malloc(ns * sizeof(float)), *s_chk = malloc(ns * sizeof(float));
    memcpy(s_rec, c.state0, ns * sizeof(float));
    memcpy(s_chk, c.state0, ns * sizeof(float));
    cpu_gdn_core_recurrent(&c.d, T, c.q, c.k, c.v, c.g, c.beta, s_rec, o_rec);
    for (int t0 = 0; t0 < T; t0 += split) {
        int n = T - t0 < split ? T - t0 : split;
        size_t ko = (size_t)t0 * Hk * D, vo = (size_t)t0 * Hv * D, ho = (size_t)t0 * Hv;
        cpu_gdn_core_chunked(&c.d, n, chunk, c.q + ko, c.k + ko, c.v + vo, c.g + ho, c.beta + ho, s_chk, o_chk + vo);
    }
    double d_out = max_abs_diff(o_rec, o_chk, nv), d_state = max_abs_diff(s_rec, s_chk, ns);
    cr_expect_leq(d_out, 1e-5, "T %d chunk %d split %d: outputs differ by %g", T, chunk, split, d_out);
    cr_expect_leq(d_state, 1e-5, "T %d chunk %d split %d: states differ by %g", T, chunk, split, d_state);
    /* the state must have moved: a test of two no-ops would pass too */
    cr_expect_gt(max_abs_diff(s_rec, c.state0, ns), 1e-2);
    free(o_rec), free(o_chk), free(s_rec), free(s_chk);
    free_case(&c);
}

Test(gdn, chunked_equals_recurrent_on_and_off_the_chunk_size)
{
    const int lengths[] = {1, 2, 7, 63, 64, 65, 100, 128, 130, 200};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) check_forms(2, 6, 16, lengths[i], CPU_GDN_CHUNK, 1 << 20);
}

Test(gdn, chunked_equals_recurrent_with_small_chunks_and_equal_heads)
{
    check_forms(3, 3, 8, 77, 16, 1 << 20);
    check_forms(1, 4, 32, 50, 5, 1 << 20);
}

Test(gdn, prefill_split_across_calls_carries_the_state)
{
    check_forms(2, 6, 16, 150, CPU_GDN_CHUNK, 37); /* splits off the chunk grid */
    check_forms(2, 4, 8, 99, CPU_GDN_CHUNK, 64);
}

/* Value head h reads key head h mod Hk: with Hk = 2, heads 0 and 2 see the
 * same keys, so equal values and gates give equal outputs, and head 1 differs. */
Test(gdn, value_heads_are_tiled_over_key_heads)
{
    struct gdn_case c = make_case(2, 4, 8, 20);
    for (int t = 0; t < 20; t++) {
        memcpy(c.v + ((size_t)t * 4 + 2) * 8, c.v + (size_t)t * 4 * 8, 8 * sizeof(float));
        memcpy(c.v + ((size_t)t * 4 + 1) * 8, c.v + (size_t)t * 4 * 8, 8 * sizeof(float));
        c.g[t * 4 + 2] = c.g[t * 4 + 1] = c.g[t * 4];
        c.beta[t * 4 + 2] = c.beta[t * 4 + 1] = c.beta[t * 4];
    }
    float *state = calloc(4 * 64, sizeof(float)), *out = malloc(20 * 4 * 8 * sizeof(float));
    cpu_gdn_core_chunked(&c.d, 20, CPU_GDN_CHUNK, c.q, c.k, c.v, c.g, c.beta, state, out);
    double same = 0, other = 0;
    for (int t = 0; t < 20; t++)
        for (int j = 0; j < 8; j++) {
            same = fmax(same, fabs(out[(t * 4 + 2) * 8 + j] - out[(t * 4) * 8 + j]));
            other = fmax(other, fabs(out[(t * 4 + 1) * 8 + j] - out[(t * 4) * 8 + j]));
        }
    cr_expect_eq(same, 0.0);
    cr_expect_gt(other, 1e-3);
    free(state), free(out);
    free_case(&c);
}
