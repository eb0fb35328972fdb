/* linalg.c — the reference's arithmetic: matrix × activations through the
 * quant table, norms, RoPE, the causal conv, and the scalar activations.
 *
 * Matrix products dequantize a weight row to fp32 with the format's own
 * decoder and dot it with the fp32 activation in double precision.  The row
 * is decoded in pieces into a stack buffer (no allocation, so nothing can
 * fail inside the OpenMP region) and reused for a tile of activation rows,
 * so a prefill batch decodes each weight row T/TILE times, not T times.
 * cpu_matmul_rows is that for a range of rows with no parallel region of its
 * own, for callers that split several matrices' rows over one region (the
 * routed experts, moe.c); cpu_matmul_rows_f32 is its fast twin (quant.h's
 * quant_dot_f32: fp32 sums, float tolerance instead of bit-identity). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/cpu.h"

#define PIECE 8192 /* values decoded at once: a multiple of every block size (1, 32, 256) */
#define TILE 64    /* activation rows per decoded piece */

struct cpu_mat cpu_mat_of(const struct model_tensor *t)
{
    struct cpu_mat m = {t->data, t->qt, t->ne[0], t->ne[1], t->row_bytes};
    return m;
}

struct cpu_mat cpu_mat_expert(const struct model_tensor *t, int e)
{
    struct cpu_mat m = {t->data + (size_t)e * t->mat_bytes, t->qt, t->ne[0], t->ne[1], t->row_bytes};
    return m;
}

double cpu_dot(const float *a, const float *b, int64_t n)
{
    /* Four partial sums: independent chains, and still double precision. */
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += (double)a[i] * b[i];
        s1 += (double)a[i + 1] * b[i + 1];
        s2 += (double)a[i + 2] * b[i + 2];
        s3 += (double)a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += (double)a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

void cpu_matmul_rows(const struct cpu_mat *w, const float *x, int64_t x_stride, int T, float *y, int64_t y_stride,
                     int64_t j0, int64_t j1)
{
    const int64_t n_in = w->n_in, blck = w->qt->blck_size;
    const size_t type_size = w->qt->type_size;
    for (int64_t j = j0; j < j1; j++) {
        float buf[PIECE];
        const uint8_t *row = w->data + (size_t)j * w->row_bytes;
        for (int t0 = 0; t0 < T; t0 += TILE) {
            int nt = T - t0 < TILE ? T - t0 : TILE;
            double acc[TILE] = {0};
            for (int64_t off = 0; off < n_in; off += PIECE) {
                int64_t n = n_in - off < PIECE ? n_in - off : PIECE;
                w->qt->to_float(row + (size_t)(off / blck) * type_size, buf, n);
                for (int t = 0; t < nt; t++) acc[t] += cpu_dot(buf, x + (int64_t)(t0 + t) * x_stride + off, n);
            }
            for (int t = 0; t < nt; t++) y[(int64_t)(t0 + t) * y_stride + j] = (float)acc[t];
        }
    }
}

void cpu_matmul_rows_f32(const struct cpu_mat *w, const float *x, int64_t x_stride, int T, float *y,
                         int64_t y_stride, int64_t j0, int64_t j1)
{
    quant_dot_f32_fn dot = quant_dot_f32(w->qt->type);
    if (!dot) {
        cpu_matmul_rows(w, x, x_stride, T, y, y_stride, j0, j1);
        return;
    }
    for (int64_t j = j0; j < j1; j++) {
        const uint8_t *row = w->data + (size_t)j * w->row_bytes;
        for (int t0 = 0; t0 < T; t0 += TILE) {
            int nt = T - t0 < TILE ? T - t0 : TILE;
            float o[TILE];
            dot(w->n_in, row, x + (int64_t)t0 * x_stride, x_stride, nt, o);
            for (int t = 0; t < nt; t++) y[(int64_t)(t0 + t) * y_stride + j] = o[t];
        }
    }
}

void cpu_matmul_strided(const struct cpu_mat *w, const float *x, int64_t x_stride, int T, float *y, int64_t y_stride)
{
#pragma omp parallel for schedule(static) if (w->n_out * w->n_in * T >= CPU_PAR_MIN_WORK)
    for (int64_t j = 0; j < w->n_out; j++) cpu_matmul_rows(w, x, x_stride, T, y, y_stride, j, j + 1);
}

void cpu_matmul(const struct cpu_mat *w, const float *x, int T, float *y)
{
    cpu_matmul_strided(w, x, w->n_in, T, y, w->n_out);
}

void cpu_get_row(const struct model_tensor *t, int64_t r, float *out)
{
    t->qt->to_float(t->data + (size_t)r * t->row_bytes, out, t->ne[0]);
}

float *cpu_dequant_all(const struct model_tensor *t)
{
    if (!t->data) return NULL;
    int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    float *out = malloc((size_t)(rows * t->ne[0]) * sizeof *out);
    if (!out) return NULL;
    for (int64_t r = 0; r < rows; r++) cpu_get_row(t, r, out + r * t->ne[0]);
    return out;
}

void cpu_rms_norm(const float *x, int64_t n, const float *w, float eps, float *out)
{
    double ss = cpu_dot(x, x, n);
    float scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * (w ? w[i] : 1.0f);
}

void cpu_group_rms_norm(const float *x, int64_t n, int64_t group, const float *w, float eps, float *out)
{
    for (int64_t g0 = 0; g0 < n; g0 += group) cpu_rms_norm(x + g0, group, w ? w + g0 : NULL, eps, out + g0);
}

void cpu_rope(float *x, int rope_dim, float theta, int64_t pos)
{
    int half = rope_dim / 2;
    for (int i = 0; i < half; i++) {
        /* float32 frequencies and angle, as transformers computes its tables */
        float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)rope_dim);
        float angle = (float)pos * inv_freq;
        double c = cosf(angle), s = sinf(angle);
        double a = x[i], b = x[i + half];
        x[i] = (float)(a * c - b * s);
        x[i + half] = (float)(b * c + a * s);
    }
}

void cpu_causal_conv_silu(const float *w, int K, int dilation, int64_t ch, float *state, const float *in, int T,
                          float *out)
{
    const int past = (K - 1) * dilation;
#pragma omp parallel for schedule(static) if (ch * T * K >= CPU_PAR_MIN_WORK)
    for (int64_t c = 0; c < ch; c++) {
        const float *wc = w + c * K;
        for (int t = 0; t < T; t++) {
            double s = 0;
            for (int j = 0; j < K; j++) {
                int tau = t - (K - 1 - j) * dilation; /* < 0: from the state, whose row past + tau holds it */
                float xv = tau >= 0 ? in[(int64_t)tau * ch + c] : state[(int64_t)(past + tau) * ch + c];
                s += (double)wc[j] * xv;
            }
            out[(int64_t)t * ch + c] = cpu_silu((float)s);
        }
    }
    cpu_conv_state_push(K, dilation, ch, state, in, T);
}

void cpu_conv_state_push(int K, int dilation, int64_t ch, float *state, const float *in, int T)
{
    const int past = (K - 1) * dilation;
#pragma omp parallel for schedule(static) if (ch * past >= CPU_PAR_MIN_WORK)
    for (int64_t c = 0; c < ch; c++) {
        float hist[past > 0 ? past : 1]; /* the new state, built before it overwrites the old */
        for (int j = 0; j < past; j++) {
            int tau = T - past + j;
            hist[j] = tau >= 0 ? in[(int64_t)tau * ch + c] : state[(int64_t)(past + tau) * ch + c];
        }
        for (int j = 0; j < past; j++) state[(int64_t)j * ch + c] = hist[j];
    }
}

float cpu_sigmoid(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }

float cpu_silu(float x) { return (float)((double)x / (1.0 + exp(-(double)x))); }

/* torch's softplus (beta 1, threshold 20). */
float cpu_softplus(float x) { return x > 20.0f ? x : (float)log1p(exp((double)x)); }

void cpu_softmax(float *x, int64_t n)
{
    float mx = x[0];
    for (int64_t i = 1; i < n; i++)
        if (x[i] > mx) mx = x[i];
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += exp((double)x[i] - mx);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(exp((double)x[i] - mx) / sum);
}
