/* pool.c — a synthetic model's large tensors without quantizing every row.
 *
 * Drawing and quantizing each of a full-width model's ~10^11 values runs at
 * a few MB/s per core; the bytes only need to be valid blocks of the right
 * type with the statistics of the exact path (rows.c).  The one idea: per
 * kind of tensor (its name with the layer number taken out, its type and
 * shape) quantize a small pool of rows once, taken by the exact path from
 * rows spread over the first tensor of that kind, then build every output row
 * from segments (about 64 values, whole blocks) of pool rows at the same
 * column, each segment's pool row picked by a counter-based hash of (seed,
 * tensor name, row, segment).  A row is then a concatenation of valid blocks
 * drawn from the exact distribution, hardly two rows alike, for every type
 * that has a quantizer and a row of independent blocks (other rows are picked
 * whole); writing costs a hash and a memcpy per segment.  Same seed, same bytes, whatever the thread count:
 * every pool row and every pick depends only on its own index. */
#include "tools/nebula-convert/convert.h"

#include "core/util/err.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A pool is small because segments are picked independently: a row of S
 * segments has POOL_ROWS^S possible contents.  Building it costs as much as
 * the exact path for POOL_ROWS rows, once per kind for all layers. */
#define POOL_ROWS 256          /* rows per pool, at most */
#define POOL_BYTES (4u << 20)  /* and at most this many bytes */
#define POOL_MIN_ROWS 32       /* wide rows still get at least this many */
#define SEGMENT_VALUES 64      /* values per picked segment (whole blocks; a K-quant's is one) */

struct conv_pool {
    char kind[128];
    enum quant_type type;
    int64_t ne[4];
    int64_t n_rows;      /* rows in the pool */
    size_t row_bytes;
    unsigned char *rows; /* n_rows quantized rows */
};

struct conv_pools {
    struct conv_pool *v;
    int n, cap;
};

struct conv_pools *conv_pools_new(void) { return calloc(1, sizeof(struct conv_pools)); }

void conv_pools_free(struct conv_pools *ps)
{
    if (!ps) return;
    for (int i = 0; i < ps->n; i++) free(ps->v[i].rows);
    free(ps->v);
    free(ps);
}

/* Rows in a pool of rows of row_bytes. */
static int64_t pool_rows_for(size_t row_bytes)
{
    int64_t n = (int64_t)(POOL_BYTES / row_bytes);
    return n > POOL_ROWS ? POOL_ROWS : n < POOL_MIN_ROWS ? POOL_MIN_ROWS : n;
}

bool conv_pool_applies(const struct conv_plan *p, const struct conv_tensor *t)
{
    /* Routers, norms, conv kernels and decays (ROLE_F32) stay exact: the
     * routing skew (and the topic model) is calibrated against the router rows.  A tensor of no
     * more rows than a pool gains nothing from one. */
    if (!p->synth.on || p->synth.exact_rows || t->role == ROLE_F32 || t->n_dims < 2) return false;
    /* With topics the embedding rows carry their token's topic direction: drawn row by row. */
    if (p->synth.topics > 0 && !strcmp(t->name, "token_embd.weight")) return false;
    const struct quant_traits *tr = quant_traits_of(t->type);
    if (!tr || !tr->from_float) return false;
    int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    return rows > pool_rows_for(quant_row_size(t->type, t->ne[0]));
}

/* The tensor's kind: its name with "blk.N." made "blk.*.", so every layer's
 * tensor of one role shares a pool (same source names, same distribution). */
static void kind_of(const char *name, char *kind, size_t len)
{
    const char *d = name;
    if (!strncmp(name, "blk.", 4)) {
        d = name + 4;
        while (*d >= '0' && *d <= '9') d++;
        snprintf(kind, len, "blk.*%s", d);
    } else {
        snprintf(kind, len, "%s", name);
    }
}

static int pool_build(struct conv_pool *pool, const struct conv_plan *p, const struct conv_tensor *t, char *err, size_t errlen)
{
    const struct quant_traits *tr = quant_traits_of(t->type);
    int64_t n = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    pool->row_bytes = quant_row_size(t->type, n);
    pool->n_rows = pool_rows_for(pool->row_bytes);
    pool->rows = malloc((size_t)pool->n_rows * pool->row_bytes);
    float *work = malloc((size_t)omp_get_max_threads() * 3 * (size_t)n * sizeof *work);
    int failed = 0;
    if (!pool->rows || !work) {
        free(work);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory for a pool of %lld %s rows", (long long)pool->n_rows, t->name);
    }
#pragma omp parallel for schedule(dynamic, 4) if (pool->n_rows * n >= (1 << 16))
    for (int64_t i = 0; i < pool->n_rows; i++) {
        if (__atomic_load_n(&failed, __ATOMIC_RELAXED)) continue;
        float *row = work + (size_t)omp_get_thread_num() * 3 * (size_t)n;
        int64_t r = i * rows / pool->n_rows; /* spread over the tensor (experts, heads, shards) */
        char e[256];
        if (conv_row(p, t, r, row, row + n, e, sizeof e)) {
#pragma omp critical
            if (!failed) {
                failed = 1;
                nb_errf(err, errlen, NB_EFORMAT, "%s row %lld: %s", t->name, (long long)r, e);
            }
            continue;
        }
        tr->from_float(row, pool->rows + (size_t)i * pool->row_bytes, n);
    }
    free(work);
    return failed ? NB_EFORMAT : 0;
}

/* The pool for t's kind, built on first use. */
static int pool_get(struct conv_pools *ps, const struct conv_plan *p, const struct conv_tensor *t, const struct conv_pool **out,
                    char *err, size_t errlen)
{
    char kind[128];
    kind_of(t->name, kind, sizeof kind);
    for (int i = 0; i < ps->n; i++) {
        const struct conv_pool *q = &ps->v[i];
        if (q->type == t->type && !memcmp(q->ne, t->ne, sizeof q->ne) && !strcmp(q->kind, kind)) {
            *out = q;
            return 0;
        }
    }
    if (ps->n == ps->cap) {
        int cap = ps->cap ? 2 * ps->cap : 32;
        struct conv_pool *v = realloc(ps->v, (size_t)cap * sizeof *v);
        if (!v) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
        ps->v = v;
        ps->cap = cap;
    }
    struct conv_pool *q = &ps->v[ps->n];
    memset(q, 0, sizeof *q);
    snprintf(q->kind, sizeof q->kind, "%s", kind);
    q->type = t->type;
    memcpy(q->ne, t->ne, sizeof q->ne);
    int rc = pool_build(q, p, t, err, errlen);
    if (rc) {
        free(q->rows);
        return rc;
    }
    ps->n++;
    *out = q;
    return 0;
}

int conv_pool_rows(struct conv_pools *ps, const struct conv_plan *p, const struct conv_tensor *t, int64_t r0, int64_t nr,
                   unsigned char *dst, char *err, size_t errlen)
{
    const struct conv_pool *pool;
    int rc = pool_get(ps, p, t, &pool, err, errlen);
    if (rc) return rc;
    const struct quant_traits *tr = quant_traits_of(t->type);
    int64_t nb = t->ne[0] / tr->blck_size;
    size_t rb = pool->row_bytes, seg_bytes = rb;
    int64_t n_seg = 1;
    if ((size_t)nb * tr->type_size == rb) { /* a row of independent blocks: pick segments */
        int64_t seg_blocks = SEGMENT_VALUES / tr->blck_size;
        if (seg_blocks < 1) seg_blocks = 1;
        seg_bytes = (size_t)seg_blocks * tr->type_size;
        n_seg = (nb + seg_blocks - 1) / seg_blocks;
    }
    uint64_t h0 = conv_mix64(p->synth.seed ^ conv_name_hash(t->name) ^ 0x706f6f6c726f7773ull), P = (uint64_t)pool->n_rows;
#pragma omp parallel for schedule(static) if ((size_t)nr * rb >= (1u << 20))
    for (int64_t k = 0; k < nr; k++) {
        unsigned char *row = dst + (size_t)k * rb;
        uint64_t base = (uint64_t)(r0 + k) * (uint64_t)n_seg;
        for (int64_t s = 0; s < n_seg; s++) {
            uint64_t pick = ((conv_mix64(h0 + base + (uint64_t)s) >> 32) * P) >> 32;
            size_t off = (size_t)s * seg_bytes, len = off + seg_bytes <= rb ? seg_bytes : rb - off;
            memcpy(row + off, pool->rows + pick * rb + off, len);
        }
    }
    return 0;
}
