/* ple.c — ple.bin: the n-gram table laid out for O_DIRECT page reads.
 *
 * The table (`per_layer_token_embd`, W values per row, hundreds of millions
 * of rows) stays on SSD; a decode step needs 16 scattered rows.  O_DIRECT
 * reads whole aligned 4 KiB pages, so rows are packed into pages and a row
 * never straddles a page boundary: a page holds rows_per_page =
 * floor(4096 / row_bytes) rows and the rest of it is zero.  Row r is then in
 * data page r / rows_per_page at byte (r mod rows_per_page) · row_bytes, and
 * one 4 KiB read fetches it.  (A row wider than a page, e.g. a very wide f32
 * table, starts on a page boundary and spans pages_per_row pages.)  Rows are
 * the file's bytes in its quant type, never re-encoded.  Page 0 is a header;
 * layout in docs/FILES.md. */
#include "tools/nebula-prepare/prepare.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"

#define UNIT_PAGES 65536u /* one checkpoint per 256 MiB */

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

int ple_layout_build(struct ple_layout *p, const struct model *m, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    const struct model_tensor *t = &m->ple_table;
    if (!t->data) return 0;
    if (t->ne[0] > UINT32_MAX) return nb_errf(err, errlen, NB_EFORMAT, "%s: rows too wide", t->name);
    p->present = true;
    p->data = t->data;
    p->type = t->type;
    p->row_len = (uint32_t)t->ne[0];
    p->rows = (uint64_t)t->ne[1];
    p->row_bytes = t->row_bytes;
    if (p->row_bytes <= PREP_PAGE) {
        p->rows_per_page = (uint32_t)(PREP_PAGE / p->row_bytes);
        p->pages_per_row = 1;
        p->pages = (p->rows + p->rows_per_page - 1) / p->rows_per_page;
    } else {
        p->rows_per_page = 0;
        p->pages_per_row = (uint32_t)((p->row_bytes + PREP_PAGE - 1) / PREP_PAGE);
        p->pages = p->rows * p->pages_per_row;
    }
    p->file_bytes = PREP_PAGE + p->pages * PREP_PAGE;
    return 0;
}

struct ple_src {
    const struct ple_layout *p;
    uint8_t header[PREP_PAGE];
};

static uint64_t ple_unit_bytes(void *ctx, int unit)
{
    const struct ple_src *s = ctx;
    if (unit == 0) return PREP_PAGE;
    uint64_t first = (uint64_t)(unit - 1) * UNIT_PAGES, left = s->p->pages - first;
    return (left < UNIT_PAGES ? left : UNIT_PAGES) * PREP_PAGE;
}

/* Data page `page` into buf (PREP_PAGE bytes). */
static void fill_page(const struct ple_layout *p, uint64_t page, uint8_t *buf)
{
    size_t used;
    if (p->rows_per_page) {
        uint64_t r0 = page * p->rows_per_page, n = p->rows - r0 < p->rows_per_page ? p->rows - r0 : p->rows_per_page;
        used = (size_t)(n * p->row_bytes);
        memcpy(buf, p->data + r0 * p->row_bytes, used); /* rows are packed in the tensor too */
    } else {
        uint64_t r = page / p->pages_per_row, from = (page % p->pages_per_row) * PREP_PAGE;
        uint64_t left = p->row_bytes - from;
        used = left < PREP_PAGE ? (size_t)left : PREP_PAGE;
        memcpy(buf, p->data + r * p->row_bytes + from, used);
    }
    memset(buf + used, 0, PREP_PAGE - used);
}

static int ple_fill(void *ctx, int unit, uint64_t off, void *buf, size_t n, char *err, size_t errlen)
{
    const struct ple_src *s = ctx;
    if (unit == 0) {
        memcpy(buf, s->header + off, n);
        return 0;
    }
    if (off % PREP_PAGE || n % PREP_PAGE) return nb_errf(err, errlen, NB_EFORMAT, "ple.bin: unaligned fill");
    uint64_t page = (uint64_t)(unit - 1) * UNIT_PAGES + off / PREP_PAGE;
    for (size_t k = 0; k < n / PREP_PAGE; k++) fill_page(s->p, page + k, (uint8_t *)buf + k * PREP_PAGE);
    return 0;
}

static void ple_unit_done(void *ctx, int unit)
{
    const struct ple_src *s = ctx;
    if (unit == 0) return;
    const struct ple_layout *p = s->p;
    uint64_t first = (uint64_t)(unit - 1) * UNIT_PAGES, pages = ple_unit_bytes(ctx, unit) / PREP_PAGE;
    uint64_t r0 = p->rows_per_page ? first * p->rows_per_page : first / p->pages_per_row;
    uint64_t r1 = p->rows_per_page ? (first + pages) * p->rows_per_page : (first + pages) / p->pages_per_row;
    if (r1 > p->rows) r1 = p->rows;
    release_input(p->data + r0 * p->row_bytes, (r1 - r0) * p->row_bytes);
}

int ple_write(const struct ple_layout *p, const char *dir, const char *input_id, char hex[PREP_SHA_HEX], char *err,
              size_t errlen)
{
    struct ple_src *s = calloc(1, sizeof *s);
    if (!s) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    s->p = p;
    uint8_t *h = s->header;
    memcpy(h, "NBPLETAB", 8);
    put32(h + 8, PREP_FORMAT_VERSION);
    put32(h + 12, PREP_PAGE);
    put32(h + 16, (uint32_t)p->type);
    put32(h + 20, p->row_len);
    put64(h + 24, p->rows);
    put64(h + 32, p->row_bytes);
    put32(h + 40, p->rows_per_page);
    put32(h + 44, p->pages_per_row);
    put64(h + 48, PREP_PAGE);
    put64(h + 56, p->pages);
    put64(h + 64, p->file_bytes);

    char identity[1024];
    snprintf(identity, sizeof identity, "%s ple=%u:%u:%llu:%llu", input_id, (unsigned)p->type, p->row_len,
             (unsigned long long)p->rows, (unsigned long long)p->row_bytes);
    int units = 1 + (int)((p->pages + UNIT_PAGES - 1) / UNIT_PAGES);
    struct ckpt_source src = {.n_units = units, .unit_bytes = ple_unit_bytes, .fill = ple_fill,
                              .unit_done = ple_unit_done, .ctx = s};
    int resumed = 0;
    int rc = ckpt_write_file(dir, "ple.bin", identity, &src, hex, &resumed, err, errlen);
    if (!rc && resumed > 1) say("ple.bin: resumed: %d of %d chunks were already written", resumed - 1, units - 1);
    free(s);
    return rc;
}
