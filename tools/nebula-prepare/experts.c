/* experts.c — experts.bin and its index, experts.idx (docs/FILES.md).
 *
 * In the GGUF an expert is three slices of three 3-D tensors (gate, up and
 * down, each [row_len, n_rows, E]), far apart in the file.  The pager and
 * the CPU worker want one expert to be one read: here each expert becomes
 * one blob, gate rows | up rows | down rows in the file's own quant types
 * (bytes copied, never re-encoded), padded to a 4 KiB page, and the blobs of
 * a layer follow each other.  Expert e of a layer is then at
 *     offset + e · blob_bytes
 * and one O_DIRECT pread of blob_bytes loads it.  experts.idx carries, per
 * layer, everything needed for that multiplication and for reading the
 * parts (types, row sizes, offsets inside the blob). */
#include "tools/nebula-prepare/prepare.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"

#define IDX_HEADER_BYTES 64u
#define IDX_RECORD_BYTES 128u

static uint64_t round_page(uint64_t n) { return (n + PREP_PAGE - 1) / PREP_PAGE * PREP_PAGE; }

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); } /* little-endian hosts only (as gguf.c) */
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static int bind_part(struct expert_part *p, const struct model_tensor *t, uint32_t n_expert, char *err, size_t errlen)
{
    if (!t->data) return nb_errf(err, errlen, NB_ENOENT, "routed expert tensor missing");
    if (t->ne[2] != n_expert || t->ne[0] > UINT32_MAX || t->ne[1] > UINT32_MAX || t->row_bytes > UINT32_MAX)
        return nb_errf(err, errlen, NB_EFORMAT, "%s: unexpected shape for an expert tensor", t->name);
    p->data = t->data;
    p->stride = t->mat_bytes; /* for a fused gate_up view: 2·I rows */
    p->type = t->type;
    p->row_len = (uint32_t)t->ne[0];
    p->n_rows = (uint32_t)t->ne[1];
    p->row_bytes = t->row_bytes;
    p->bytes = (uint64_t)p->n_rows * p->row_bytes;
    return 0;
}

/* The index as it must be on disk: a header, then one record per layer. */
static int render_idx(struct expert_layout *x, char *err, size_t errlen)
{
    x->idx_bytes = IDX_HEADER_BYTES + (size_t)x->n_layers * IDX_RECORD_BYTES;
    uint8_t *b = x->idx = calloc(1, x->idx_bytes);
    if (!b) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    memcpy(b, "NBEXPIDX", 8);
    put32(b + 8, PREP_FORMAT_VERSION);
    put32(b + 12, IDX_HEADER_BYTES);
    put32(b + 16, IDX_RECORD_BYTES);
    put32(b + 20, (uint32_t)x->n_layers);
    put32(b + 24, PREP_PAGE);
    put64(b + 32, x->file_bytes);
    for (int i = 0; i < x->n_layers; i++) {
        const struct expert_layer *l = &x->layers[i];
        uint8_t *r = b + IDX_HEADER_BYTES + (size_t)i * IDX_RECORD_BYTES;
        put32(r + 0, (uint32_t)l->block);
        put32(r + 4, l->mtp ? 1u : 0u);
        put32(r + 8, l->n_expert);
        put64(r + 16, l->offset);
        put64(r + 24, l->blob_bytes);
        put64(r + 32, l->payload_bytes);
        for (int p = 0; p < EXP_PARTS; p++) {
            uint8_t *q = r + 40 + 24 * p;
            put32(q + 0, (uint32_t)l->part[p].type);
            put32(q + 4, l->part[p].row_len);
            put32(q + 8, l->part[p].n_rows);
            put32(q + 12, (uint32_t)l->part[p].row_bytes);
            put64(q + 16, l->part[p].offset);
        }
    }
    return 0;
}

int expert_layout_build(struct expert_layout *x, const struct model *m, char *err, size_t errlen)
{
    memset(x, 0, sizeof *x);
    int n = m->hp.n_layer + m->hp.n_nextn;
    if (!(x->layers = calloc((size_t)(n ? n : 1), sizeof *x->layers))) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    x->n_layers = n;
    uint64_t off = PREP_PAGE; /* page 0 is experts.bin's header */
    for (int i = 0; i < n; i++) {
        const struct model_moe *moe = &m->layers[i].moe;
        struct expert_layer *l = &x->layers[i];
        l->block = i;
        l->mtp = m->layers[i].is_nextn;
        l->n_expert = (uint32_t)m->hp.n_expert;
        const struct model_tensor *src[EXP_PARTS] = {&moe->gate_exps, &moe->up_exps, &moe->down_exps};
        uint64_t in_blob = 0;
        for (int p = 0; p < EXP_PARTS; p++) {
            char why[256];
            int rc = bind_part(&l->part[p], src[p], l->n_expert, why, sizeof why);
            if (rc) {
                expert_layout_free(x);
                return nb_errf(err, errlen, rc, "layer %d: %s", i, why);
            }
            l->part[p].offset = in_blob;
            in_blob += l->part[p].bytes;
        }
        l->payload_bytes = in_blob;
        l->blob_bytes = round_page(in_blob);
        l->offset = off;
        off += l->blob_bytes * l->n_expert;
    }
    x->file_bytes = off;
    int rc = render_idx(x, err, errlen);
    if (rc) expert_layout_free(x);
    return rc;
}

void expert_layout_free(struct expert_layout *x)
{
    free(x->layers);
    free(x->idx);
    memset(x, 0, sizeof *x);
}

/* ---------- experts.bin as a resumable stream: unit 0 = header page, unit 1+i = layer i ---------- */

struct exp_src {
    const struct expert_layout *x;
    uint8_t header[PREP_PAGE];
};

static uint64_t exp_unit_bytes(void *ctx, int unit)
{
    const struct exp_src *s = ctx;
    if (unit == 0) return PREP_PAGE;
    const struct expert_layer *l = &s->x->layers[unit - 1];
    return l->blob_bytes * l->n_expert;
}

/* Bytes [off, off+n) of one layer's blobs: copied slices and zero padding. */
static void fill_layer(const struct expert_layer *l, uint64_t off, uint8_t *buf, size_t n)
{
    while (n) {
        uint64_t e = off / l->blob_bytes, in = off % l->blob_bytes;
        size_t take = 0;
        for (int p = 0; p < EXP_PARTS && !take; p++) {
            const struct expert_part *q = &l->part[p];
            if (in < q->offset || in >= q->offset + q->bytes) continue;
            uint64_t left = q->offset + q->bytes - in;
            take = left < n ? (size_t)left : n;
            memcpy(buf, q->data + e * q->stride + (in - q->offset), take);
            if (take == left) release_input(q->data + e * q->stride, q->bytes); /* slice done: keep the RSS small */
        }
        if (!take) { /* the padding after the down rows */
            uint64_t left = l->blob_bytes - in;
            take = left < n ? (size_t)left : n;
            memset(buf, 0, take);
        }
        off += take, buf += take, n -= take;
    }
}

static int exp_fill(void *ctx, int unit, uint64_t off, void *buf, size_t n, char *err, size_t errlen)
{
    const struct exp_src *s = ctx;
    if (unit == 0) {
        memcpy(buf, s->header + off, n);
        return 0;
    }
    fill_layer(&s->x->layers[unit - 1], off, buf, n);
    return 0;
}

static void exp_unit_done(void *ctx, int unit)
{
    const struct exp_src *s = ctx;
    if (unit == 0) return;
    const struct expert_layer *l = &s->x->layers[unit - 1];
    /* Exactly the slices copied (a fused up view ends I rows before its tensor). */
    for (int p = 0; p < EXP_PARTS; p++)
        release_input(l->part[p].data, l->part[p].stride * (l->n_expert - 1) + l->part[p].bytes);
}

int experts_write(const struct expert_layout *x, const char *dir, const char *input_id, char hex[PREP_SHA_HEX],
                  char *err, size_t errlen)
{
    struct exp_src *s = calloc(1, sizeof *s);
    if (!s) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    s->x = x;
    char idx_sha[PREP_SHA_HEX];
    sha_buf_hex(x->idx, x->idx_bytes, idx_sha);
    /* The header page ties experts.bin to the index it was written with. */
    memcpy(s->header, "NBEXPERT", 8);
    put32(s->header + 8, PREP_FORMAT_VERSION);
    put32(s->header + 12, PREP_PAGE);
    put32(s->header + 16, (uint32_t)x->n_layers);
    put64(s->header + 24, x->file_bytes);
    memcpy(s->header + 32, idx_sha, 64);

    char identity[1024];
    snprintf(identity, sizeof identity, "%s idx=%s", input_id, idx_sha);
    struct ckpt_source src = {.n_units = 1 + x->n_layers, .unit_bytes = exp_unit_bytes, .fill = exp_fill,
                              .unit_done = exp_unit_done, .ctx = s};
    int resumed = 0;
    int rc = ckpt_write_file(dir, "experts.bin", identity, &src, hex, &resumed, err, errlen);
    if (!rc && resumed > 1) say("experts.bin: resumed: %d of %d layers were already written", resumed - 1, x->n_layers);
    free(s);
    return rc;
}
