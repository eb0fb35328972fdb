/* ffn.h — one routed expert's FFN on the CPU, and a batch of them.
 *
 * The arithmetic every process agrees on for an expert computed outside a
 * backend: the cpu-moe-worker runs it for the experts it holds, a backend's
 * remote hook (backend.h, gw_moe_remote) expects its results, and the
 * reference backend's own MoE layer computes the same bits.  Three kernel
 * sets: ref (bit-faithful, double sums), fast (SIMD fp32) and the opt-in,
 * approximate int8 (activations quantized to 8 bits).  Implemented in
 * engine/cpu/ffn.c. */
#ifndef NB_ENGINE_FFN_H
#define NB_ENGINE_FFN_H

#include <stddef.h>
#include <stdint.h>

/* One expert's FFN, the reference way: out[i] = scale[i] · W_down(silu(W_gate
 * x[i]) ⊙ W_up x[i]) for n rows of C floats; the three matrices are raw rows
 * of their quant types (gate/up: I rows of C values; down: C rows of I).  What
 * a worker outside the backend runs to produce remote contributions. */
struct gw_expert {
    const void *gate, *up, *down;
    int gate_type, up_type, down_type; /* enum quant_type */
    int64_t n_embd, n_ff;              /* C, I */
};
int gw_expert_ffn(const struct gw_expert *w, const float *x, int n, const float *scale, float *out);

/* Matrix kernels of the expert FFNs: ref is gw_expert_ffn's arithmetic (each
 * output bit-identical however the work is split); fast decodes weights with
 * SIMD and sums in fp32 with FMA (quant.h's quant_dot_f32: within float
 * tolerance of ref, the last bits may differ).  int8 is approximate and
 * opt-in: each activation row (x, and h = silu(gate x) ⊙ up x) is quantized
 * once to its weights' vec_dot_type (Q8_0 / Q8_1: 8-bit codes and a scale
 * per 32 values; Q8_K: per 256) and every weight row dotted on the codes
 * with quant.h's vec_dot (VNNI vpdpbusd on AVX-512), as ggml does; matrices
 * of float weights keep the fast kernels.  Its error against fast is the
 * activations' rounding, at most half a quantization step a value
 * (docs/BENCHMARKS.md: its divergence in logits). */
enum gw_kernels { GW_KERNELS_REF = 0, GW_KERNELS_FAST = 1, GW_KERNELS_INT8 = 2 };
/* "ref" / "fast" / "int8" -> *k; NB_EINVAL otherwise. */
int gw_kernels_parse(const char *name, enum gw_kernels *k);
const char *gw_kernels_name(enum gw_kernels k);
/* The same for a backend's matrix kernels (the gpu-worker's, the
 * coordinator's and nebula generate's --kernels): ref or fast; int8 is the
 * CPU experts' alone (NB_EINVAL here). */
int gw_kernels_parse_matrix(const char *name, enum gw_kernels *k);

/* One expert FFN of a batch: out (n × C) = scale[i] · FFN_w(x[i]). */
struct gw_expert_job {
    struct gw_expert w;
    const float *x;
    int n;
    const float *scale;
    float *out;
};
/* Working memory of gw_expert_ffn_many (its tables and the gate/up rows),
 * grown to the largest call and kept, so that a worker serving one request
 * per layer allocates nothing per request.  Start zeroed; one per calling
 * thread; gw_expert_scratch_free when done. */
struct gw_expert_scratch {
    void *buf;
    size_t bytes;
};
void gw_expert_scratch_free(struct gw_expert_scratch *s);
/* Runs every job in one OpenMP region split by weight rows — the gate/up
 * rows of all jobs over the threads, then their down rows — so a few experts
 * use every thread, not one each.  With GW_KERNELS_REF each output is
 * bit-identical to gw_expert_ffn's.  Called from inside a parallel region it
 * runs in the caller's thread.  s: the caller's scratch, or NULL for one of
 * the call's own.  NB_ENOTSUP for a type without a decoder, NB_ENOMEM. */
int gw_expert_ffn_many(const struct gw_expert_job *jobs, int n_jobs, enum gw_kernels k, struct gw_expert_scratch *s);

#endif
