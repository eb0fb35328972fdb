/* rows.c — producing one output row of a planned tensor (see convert.h), and
 * choosing output types.
 *
 * Rows are read from the mmap'ed safetensors through st_read_f32, so the
 * source dtype (f32, bf16, f16) is converted exactly once, then re-ordered,
 * then transformed element-wise in float32 (the +1 fold and −exp(A_log) are
 * float32 operations, as llama.cpp's converter does them). */
#include "tools/nebula-convert/convert.h"

#include "core/util/err.h"

#include <math.h>
#include <string.h>

int64_t conv_tile_src_head(int64_t h, int64_t hk, int64_t g)
{
    /* GGUF head h = j·hk + k holds HF head k·g + j (docs/CONVERSION.md §3.3). */
    int64_t j = h / hk, k = h % hk;
    return k * g + j;
}

static int64_t src_cols(const struct st_tensor *t) { return t->n_dims ? t->shape[t->n_dims - 1] : 1; }

/* Source tensor and row for output row r. */
static void locate(const struct conv_tensor *t, int64_t r, const struct st_tensor **src, int64_t *row)
{
    switch (t->map) {
    case MAP_TILE:
        *src = t->src[0];
        if (r < t->tile_from) {
            *row = r;
        } else {
            int64_t v = r - t->tile_from, head = v / t->tile_unit, in = v % t->tile_unit;
            *row = t->tile_from + conv_tile_src_head(head, t->tile_hk, t->tile_g) * t->tile_unit + in;
        }
        return;
    case MAP_LIST:
        *src = t->src[r / t->rows_per];
        *row = r % t->rows_per;
        return;
    case MAP_FUSED_EXPERT:
        *src = t->src[0];
        *row = (r / t->fe_n) * t->rows_per + t->fe_off + r % t->fe_n;
        return;
    default:
        *src = t->src[0];
        *row = r + t->row_off;
        return;
    }
}

int conv_row(const struct conv_tensor *t, int64_t r, float *out, float *scratch, char *err, size_t errlen)
{
    int64_t n = t->ne[0];
    int rc;
    if (t->map == MAP_CONCAT_COLS) {
        int64_t n0 = src_cols(t->src[0]);
        if ((rc = st_read_f32(t->src[0], r * n0, n0, out, err, errlen))) return rc;
        if ((rc = st_read_f32(t->src[1], r * (n - n0), n - n0, out + n0, err, errlen))) return rc;
    } else {
        const struct st_tensor *s;
        int64_t row;
        locate(t, r, &s, &row);
        float *dst = t->tile_cols ? scratch : out;
        if ((rc = st_read_f32(s, row * n, n, dst, err, errlen))) return rc;
        if (t->tile_cols) {
            for (int64_t c = 0; c < n; c++) {
                int64_t head = c / t->tile_unit, in = c % t->tile_unit;
                out[c] = dst[conv_tile_src_head(head, t->tile_hk, t->tile_g) * t->tile_unit + in];
            }
        }
    }
    if (t->op == OP_FOLD)
        for (int64_t i = 0; i < n; i++) out[i] = 1.0f + out[i];
    else if (t->op == OP_NEG_EXP)
        for (int64_t i = 0; i < n; i++) out[i] = -expf(out[i]);
    return 0;
}

/* A block-quantized type for a row of n values, or its nearest fallback:
 * K-quants need rows of 256, the 32-blocks rows of 32; BF16 always fits. */
static enum quant_type fit(enum quant_type want, int64_t n)
{
    for (;;) {
        const struct quant_traits *tr = quant_traits_of(want);
        if (tr && n % tr->blck_size == 0) return want;
        switch (want) {
        case QT_Q4_K: want = QT_Q5_0; break;
        case QT_Q5_K: want = QT_Q5_1; break;
        case QT_Q6_K: want = QT_Q8_0; break;
        case QT_IQ4_XS: want = QT_IQ4_NL; break;
        default: return QT_BF16;
        }
    }
}

void conv_choose_types(struct conv_plan *p, enum conv_mode mode)
{
    for (int i = 0; i < p->n; i++) {
        struct conv_tensor *t = &p->t[i];
        enum quant_type want;
        if (mode == MODE_F32 || t->role == ROLE_F32 || t->n_dims == 1) {
            want = QT_F32;
        } else if (mode == MODE_F16) {
            want = QT_F16;
        } else if (mode == MODE_BF16) {
            want = QT_BF16;
        } else if (mode == MODE_Q8_0) {
            want = QT_Q8_0;
        } else { /* published-like mix (MODEL.md "Quant types in published files") */
            switch (t->role) {
            case ROLE_EXPERT_GATEUP: want = QT_Q4_K; break;
            case ROLE_EXPERT_DOWN: want = QT_Q5_1; break;
            case ROLE_INDEXER: want = QT_BF16; break;
            case ROLE_PLE_TABLE: want = QT_IQ4_NL; break;
            default: want = QT_Q8_0; break;
            }
        }
        t->type = fit(want, t->ne[0]);
    }
}
