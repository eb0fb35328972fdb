/* cuda_kernels.h — the CUDA kernels of the gpu-worker, as C functions.
 *
 * y = W·x for a weight matrix W stored row by row in one of the formats that
 * published GGUFs use (the block layouts of core/quant/quant_blocks.h, which
 * are ggml's), x fp32, accumulation fp32.  Every launcher is asynchronous on
 * the given stream and reports errors as values: 0, or a negative code with
 * a message in err (a CUDA error e comes back as -(int)e; bad arguments as
 * GW_CUDA_EINVAL).  The header is plain C and names no CUDA type, so C code
 * can include it without the CUDA headers; `stream` is a cudaStream_t (NULL:
 * the default stream). */
#ifndef NB_GW_CUDA_KERNELS_H
#define NB_GW_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GW_CUDA_EINVAL (-100000) /* below every -(cudaError) */
#define GW_CUDA_MAX_BATCH 16     /* rows of x one launch multiplies */
#define GW_CUDA_MAX_EXPERT_USED 32 /* routed experts per token the MoE kernels hold in registers */

/* One matrix-vector product:
 *   w          device pointer to n_rows rows of n_cols values each; a row is
 *              quant_row_size(type, n_cols) bytes, rows are contiguous, and
 *              w is 16-byte aligned (cudaMalloc and GGUF's 32-byte tensor
 *              alignment give that: the decoders use wide loads);
 *   x          device pointer to n_batch rows of n_cols floats, contiguous,
 *              16-byte aligned;
 *   y          device pointer to n_batch rows of n_rows floats, contiguous:
 *              y[b*n_rows + r] = Σ_c W[r][c] · x[b*n_cols + c].
 * n_cols must be a multiple of the format's block (32 or 256) and of 8;
 * 1 <= n_batch <= GW_CUDA_MAX_BATCH. */
/* Once per process, on the device the kernels will run on, before any
 * launch (not during a graph capture): the IQ formats' codebooks to the
 * device.  The launchers of those formats fail until it has been done. */
int gw_cuda_matvec_init(char *err, size_t err_len);

typedef int (*gw_cuda_matvec_fn)(const void *w, int n_rows, int n_cols, const float *x, int n_batch,
                                 float *y, void *stream, char *err, size_t err_len);

/* The launcher for a ggml type number (enum quant_type), or NULL when there
 * is no kernel for it (gpu-worker/cuda/cuda_types.h lists those that have
 * one): callers pick once, at load. */
gw_cuda_matvec_fn gw_cuda_matvec_of(int ggml_type);

/* The routed-expert form: for pair p < n_pairs, y row p (n_rows floats) =
 * matrix s · x row p / xdiv (n_cols floats, rows contiguous), where s =
 * slot[eid[p]] and matrix s starts s · mat_bytes after w; pairs whose slot is
 * negative are skipped (y untouched).  eid and slot are device arrays; one
 * launch for any number of pairs.  Types: those gw_cuda_matvec_of has;
 * mat_bytes a multiple of 16. */
int gw_cuda_matvec_pairs(int ggml_type, const void *w, size_t mat_bytes, int n_rows, int n_cols, const float *x,
                         int xdiv, const int32_t *eid, const int32_t *slot, int n_pairs, float *y, void *stream,
                         char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif
