/* cuda_types.h — the CUDA backend's table of quant types, one row per type.
 *
 * The one list of what the device does with each format (the CPU's is
 * core/quant's traits table; block sizes and offsets are core/quant/
 * quant_blocks.h's, shared by both).  A type with a row is held on the
 * device as the file stores it and decoded there by the reference kernels
 * (linalg.cu's d_wval; the low-bit formats through dec_lowbit.cuh's
 * decoders); the second column names the decoder of matvec.cu's fast
 * kernels (no_fast_kernel: the reference kernels only).  Every other
 * type is widened to F32 on the host at upload (quant_traits.to_float).
 *
 * It is an X-macro so that plain C without nvcc (engine/vram.c, which
 * sizes the device's blocks for nebula-prepare too) and CUDA (matvec.cu's
 * table of entry points) expand the same rows: GW_CUDA_TYPES(X) calls
 * X(quant type, fast decoder) once per row.  The decoder names mean
 * something only to matvec.cu; C code ignores that column. */
#ifndef NB_GW_CUDA_TYPES_H
#define NB_GW_CUDA_TYPES_H

#define GW_CUDA_TYPES(X)           \
    X(QT_F32, dec_f32)             \
    X(QT_F16, dec_f16)             \
    X(QT_BF16, dec_bf16)           \
    X(QT_Q4_0, dec_q4_0)           \
    X(QT_Q4_1, dec_q4_1)           \
    X(QT_Q5_0, dec_q5_0)           \
    X(QT_Q5_1, dec_q5_1)           \
    X(QT_Q8_0, dec_q8_0)           \
    X(QT_IQ4_NL, dec_iq4_nl)       \
    X(QT_MXFP4, dec_mxfp4)         \
    X(QT_NVFP4, dec_nvfp4)         \
    X(QT_Q1_0, dec_q1_0)           \
    X(QT_Q2_0, dec_q2_0)           \
    X(QT_Q2_K, dec_q2_K)           \
    X(QT_Q3_K, dec_q3_K)           \
    X(QT_Q4_K, dec_kq<0>)          \
    X(QT_Q5_K, dec_kq<1>)          \
    X(QT_Q6_K, dec_q6_K)           \
    X(QT_TQ1_0, dec_tq1_0)         \
    X(QT_TQ2_0, dec_tq2_0)         \
    X(QT_IQ2_XXS, dec_iq2_xxs)     \
    X(QT_IQ2_XS, dec_iq2_xs)       \
    X(QT_IQ2_S, dec_iq2_s)         \
    X(QT_IQ3_XXS, dec_iq3_xxs)     \
    X(QT_IQ3_S, dec_iq3_s)         \
    X(QT_IQ1_S, dec_iq1_s)         \
    X(QT_IQ1_M, dec_iq1_m)

#endif
