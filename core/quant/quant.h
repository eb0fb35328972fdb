/* quant.h — the one table of tensor storage formats.
 *
 * Every format Nebula reads or writes has one row of traits: block size,
 * bytes per block, dequantize row, quantize row, and the dot product of a row
 * of this format with a row of activations quantized to its `vec_dot_type`
 * (as ggml does: Q4_0, Q8_0, MXFP4, NVFP4, Q1_0, Q2_0 dot with Q8_0, Q4_1
 * and Q5_1 with Q8_1, the K-quants, IQ and TQ formats with Q8_K; the float
 * formats with fp32).  Block layouts are byte-identical to ggml's
 * (quant_blocks.h), so published GGUF files are used as they are; every
 * type of ggml's enum is here (tests/tools/test_ggml_oracle.sh checks them
 * against ggml's own library).  The dot kernel of each row is
 * picked once, at quant_init(), from the CPU's features (scalar, AVX2,
 * AVX-512/VNNI); callers never switch on the type in a hot loop.
 *
 * Type numbers are ggml's (they are written into GGUF tensor tables). */
#ifndef NB_QUANT_H
#define NB_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum quant_type {
    QT_F32 = 0,
    QT_F16 = 1,
    QT_Q4_0 = 2,
    QT_Q4_1 = 3,
    QT_Q5_0 = 6,
    QT_Q5_1 = 7,
    QT_Q8_0 = 8,
    QT_Q8_1 = 9,
    QT_Q2_K = 10,
    QT_Q3_K = 11,
    QT_Q4_K = 12,
    QT_Q5_K = 13,
    QT_Q6_K = 14,
    QT_Q8_K = 15,
    QT_IQ2_XXS = 16,
    QT_IQ2_XS = 17,
    QT_IQ3_XXS = 18,
    QT_IQ1_S = 19,
    QT_IQ4_NL = 20,
    QT_IQ3_S = 21,
    QT_IQ2_S = 22,
    QT_IQ4_XS = 23,
    QT_I8 = 24,
    QT_I16 = 25,
    QT_I32 = 26,
    QT_I64 = 27,
    QT_F64 = 28,
    QT_IQ1_M = 29,
    QT_BF16 = 30,
    QT_TQ1_0 = 34,
    QT_TQ2_0 = 35,
    QT_MXFP4 = 39,
    QT_NVFP4 = 40,
    QT_Q1_0 = 41,
    QT_Q2_0 = 42,
    QT_COUNT = 43, /* ggml's GGML_TYPE_COUNT (llama.cpp of node-llama-cpp 3.21.1) */
};

enum quant_isa { QUANT_ISA_SCALAR = 0, QUANT_ISA_AVX2 = 1, QUANT_ISA_AVX512 = 2, QUANT_ISA_COUNT };

/* Dequantize n values (n a multiple of blck_size). */
typedef void (*quant_to_float_fn)(const void *src, float *dst, int64_t n);
/* Quantize n values (n a multiple of blck_size); writes n/blck_size blocks. */
typedef void (*quant_from_float_fn)(const float *src, void *dst, int64_t n);
/* *s = dot(x, y) over n values: x in this format, y in vec_dot_type. */
typedef void (*quant_vec_dot_fn)(int64_t n, float *s, const void *x, const void *y);

struct quant_traits {
    const char *name;            /* ggml's name: "q4_K", "iq4_nl", "bf16" */
    enum quant_type type;
    int64_t blck_size;           /* values per block (1 for plain floats) */
    size_t type_size;            /* bytes per block */
    bool is_quantized;
    quant_to_float_fn to_float;      /* NULL if not readable */
    quant_from_float_fn from_float;  /* NULL if we cannot write it */
    quant_vec_dot_fn vec_dot;        /* best kernel for this CPU; NULL if none */
    enum quant_type vec_dot_type;    /* format the activations must be in */
};

/* Picks the kernels for this CPU (idempotent, thread-safe after first call).
 * Returns the ISA chosen. */
enum quant_isa quant_init(void);

/* The IQ formats' codebooks as quant_init built them (quant_grids.c), for
 * the CUDA backend's device copies (gpu-worker/cuda/dec_lowbit.cuh): grid
 * points of 8 bytes (IQ2_XXS 256, IQ2_XS 512, IQ2_S 1024, IQ1_S/IQ1_M 2048)
 * or 4 (IQ3_XXS 256, IQ3_S 512), and the 128 sign bytes of 7 bits + parity. */
struct quant_codebooks {
    const uint64_t *iq2xxs, *iq2xs, *iq2s, *iq1s;
    const uint32_t *iq3xxs, *iq3s;
    const uint8_t *ksigns;
};
const struct quant_codebooks *quant_codebooks(void);
/* The ISA quant_init chose, and a name for it ("avx512-vnni", "avx2", "scalar"). */
enum quant_isa quant_isa_active(void);
const char *quant_isa_name(enum quant_isa isa);
/* True if this CPU can run kernels of that ISA. */
bool quant_isa_supported(enum quant_isa isa);

/* Traits of a type, or NULL if the number is not a type we know.  Calls
 * quant_init() if needed. */
const struct quant_traits *quant_traits_of(enum quant_type t);
/* The dot kernel of a given ISA for a type (for tests and benchmarks); NULL if
 * that ISA has no kernel for the type or this CPU cannot run the ISA.  The
 * scalar one is the reference the others are tested against. */
quant_vec_dot_fn quant_vec_dot_isa(enum quant_type t, enum quant_isa isa);

/* The quantizer of type t of one ISA (tests): the scalar reference's, or for
 * AVX-512 the activation formats' (Q8_0, Q8_1, Q8_K: the same bytes as the
 * scalar ones, ~10× faster; quant_init puts them in the traits where
 * AVX-512 runs); NULL where that ISA has none or cannot run here. */
quant_from_float_fn quant_from_float_isa(enum quant_type t, enum quant_isa isa);

/* out[t] = Σ_i w[i] · x[t·x_stride + i] for t < nt: one weight row of n values
 * in its own format against nt rows of fp32 activations.  The activations stay
 * fp32 (unlike vec_dot, which wants them quantized): the row is decoded with
 * SIMD to exactly the reference decoder's floats and summed in fp32 with FMA,
 * so the result is the exact dot within float rounding, not bit-identical to a
 * double-precision sum.  n a multiple of the block size. */
typedef void (*quant_dot_f32_fn)(int64_t n, const void *w, const float *x, int64_t x_stride, int nt, float *out);
/* The best such kernel for this CPU (AVX-512, else AVX2), or NULL where the
 * type has none or the CPU has neither (callers then use to_float).  Every
 * weight format has one of each ISA (tests/core/test_quant_f32.c). */
quant_dot_f32_fn quant_dot_f32(enum quant_type t);
/* That of one ISA (tests, benchmarks); NULL if none or not runnable here. */
quant_dot_f32_fn quant_dot_f32_isa(enum quant_type t, enum quant_isa isa);

/* Type by ggml name (case-insensitive), or -1. */
int quant_type_from_name(const char *name);
const char *quant_type_name(enum quant_type t); /* "?" if unknown */

/* Bytes of one row of n values; 0 if n is not a multiple of the block size
 * or the type is unknown. */
size_t quant_row_size(enum quant_type t, int64_t n);

/* Scalar conversions, exact as ggml's (round-to-nearest-even for bf16). */
float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f);

#endif
