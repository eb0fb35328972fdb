/* prepared.c — experts.idx, placement.json and ple.bin readers (prepared.h).
 *
 * Binary headers are read field by field at their documented little-endian
 * offsets (docs/FILES.md), never through a packed struct, so the reader does
 * not depend on the compiler's layout. */
#include "core/prepared/prepared.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"

static uint32_t rd32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static int read_whole(const char *path, uint8_t **data, size_t *n, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) return nb_errf(err, errlen, NB_ENOENT, "%s: cannot open", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    *data = malloc(len > 0 ? (size_t)len + 1 : 1);
    if (!*data) return fclose(f), nb_errf(err, errlen, NB_ENOMEM, "%s: out of memory", path);
    size_t got = len > 0 ? fread(*data, 1, (size_t)len, f) : 0;
    fclose(f);
    if (len < 0 || got != (size_t)len) return free(*data), nb_errf(err, errlen, NB_EIO, "%s: read failed", path);
    (*data)[len] = 0;
    *n = (size_t)len;
    return 0;
}

static int parse_layer(const uint8_t *r, struct prepared_layer *l, uint64_t file_bytes, int i, char *err,
                       size_t errlen)
{
    l->block = rd32(r);
    l->mtp = rd32(r + 4) & 1;
    l->n_expert = rd32(r + 8);
    l->offset = rd64(r + 16);
    l->blob_bytes = rd64(r + 24);
    l->payload_bytes = rd64(r + 32);
    for (int k = 0; k < 3; k++) {
        const uint8_t *p = r + 40 + 24 * k;
        l->part[k] = (struct prepared_part){rd32(p), rd32(p + 4), rd32(p + 8), rd32(p + 12), rd64(p + 16)};
        if (l->part[k].offset + (uint64_t)l->part[k].n_rows * l->part[k].row_bytes > l->payload_bytes)
            return nb_errf(err, errlen, NB_EFORMAT, "experts.idx: layer %d part %d lies outside its blob", i, k);
    }
    if (l->n_expert == 0 || l->blob_bytes % PREPARED_PAGE || l->offset % PREPARED_PAGE ||
        l->payload_bytes > l->blob_bytes || l->offset + l->n_expert * l->blob_bytes > file_bytes)
        return nb_errf(err, errlen, NB_EFORMAT, "experts.idx: layer %d (block %u): bad blob geometry", i, l->block);
    return 0;
}

int prepared_idx_load(const char *dir, struct prepared_idx *x, char *err, size_t errlen)
{
    char path[4096];
    uint8_t *d;
    size_t n;
    memset(x, 0, sizeof *x);
    snprintf(path, sizeof path, "%s/experts.idx", dir);
    int rc = read_whole(path, &d, &n, err, errlen);
    if (rc) return rc;
    if (n < 64 || memcmp(d, "NBEXPIDX", 8) || rd32(d + 8) != 1 || rd32(d + 12) != 64 || rd32(d + 16) != 128 ||
        rd32(d + 24) != PREPARED_PAGE || n != 64 + 128 * (size_t)rd32(d + 20)) {
        free(d);
        return nb_errf(err, errlen, NB_EFORMAT, "%s: not an experts.idx of version 1", path);
    }
    x->n_layers = (int)rd32(d + 20);
    x->file_bytes = rd64(d + 32);
    x->layers = calloc(x->n_layers ? x->n_layers : 1, sizeof *x->layers);
    if (!x->layers) return free(d), nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    for (int i = 0; i < x->n_layers && rc == 0; i++) {
        rc = parse_layer(d + 64 + 128 * i, &x->layers[i], x->file_bytes, i, err, errlen);
        if (x->layers[i].blob_bytes > x->max_blob_bytes) x->max_blob_bytes = x->layers[i].blob_bytes;
    }
    free(d);
    if (rc) prepared_idx_free(x);
    return rc;
}

void prepared_idx_free(struct prepared_idx *x)
{
    free(x->layers);
    memset(x, 0, sizeof *x);
}

int prepared_idx_layer_of_block(const struct prepared_idx *x, uint32_t block)
{
    for (int i = 0; i < x->n_layers; i++)
        if (x->layers[i].block == block) return i;
    return -1;
}

/* One tier list of one layer into tier[]; an id twice or out of range is an error. */
static int read_tier(const cJSON *layer, const char *name, uint8_t tier, uint8_t *tiers, uint32_t E, int i,
                     char *err, size_t errlen)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(layer, name), *id;
    if (!cJSON_IsArray(list)) return nb_errf(err, errlen, NB_EFORMAT, "placement: layer %d has no \"%s\" list", i, name);
    cJSON_ArrayForEach(id, list)
    {
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= E || tiers[(int)id->valuedouble] != 0xff)
            return nb_errf(err, errlen, NB_EFORMAT, "placement: layer %d: bad or repeated expert in \"%s\"", i, name);
        tiers[(int)id->valuedouble] = tier;
    }
    return 0;
}

static int read_layers(const cJSON *layers, const struct prepared_idx *x, struct prepared_placement *p, char *err,
                       size_t errlen)
{
    if (cJSON_GetArraySize(layers) != x->n_layers)
        return nb_errf(err, errlen, NB_EFORMAT, "placement: %d layers, experts.idx has %d",
                       cJSON_GetArraySize(layers), x->n_layers);
    static const char *names[3] = {"vram", "ram", "ssd"};
    for (int i = 0; i < x->n_layers; i++) {
        const cJSON *l = cJSON_GetArrayItem(layers, i);
        const cJSON *blk = cJSON_GetObjectItemCaseSensitive(l, "layer");
        uint32_t E = x->layers[i].n_expert;
        if (!cJSON_IsNumber(blk) || (uint32_t)blk->valuedouble != x->layers[i].block)
            return nb_errf(err, errlen, NB_EFORMAT, "placement: layer %d is not block %u", i, x->layers[i].block);
        p->tier[i] = malloc(E);
        if (!p->tier[i]) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
        memset(p->tier[i], 0xff, E);
        for (int t = 0; t < 3; t++) {
            int rc = read_tier(l, names[t], (uint8_t)t, p->tier[i], E, i, err, errlen);
            if (rc) return rc;
        }
        for (uint32_t e = 0; e < E; e++)
            if (p->tier[i][e] == 0xff)
                return nb_errf(err, errlen, NB_EFORMAT, "placement: layer %d: expert %u has no tier", i, e);
    }
    return 0;
}

/* Arena layout: header page, then RAM-tier blobs (and with arena_vram the VRAM tier's too) by idx layer,
 * ascending id. */
static int lay_out_arena(const struct prepared_idx *x, struct prepared_placement *p, char *err, size_t errlen)
{
    p->stride = 1;
    for (int i = 0; i < x->n_layers; i++)
        if (x->layers[i].n_expert > p->stride) p->stride = x->layers[i].n_expert;
    p->arena_off = malloc((size_t)x->n_layers * p->stride * sizeof *p->arena_off + 1);
    if (!p->arena_off) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    uint64_t at = PREPARED_PAGE;
    for (int i = 0; i < x->n_layers; i++)
        for (uint32_t e = 0; e < p->stride; e++) {
            uint64_t *o = &p->arena_off[(size_t)i * p->stride + e];
            *o = UINT64_MAX;
            if (e >= x->layers[i].n_expert) continue;
            uint8_t t = p->tier[i][e];
            p->n_vram += t == PREPARED_VRAM, p->n_ssd += t == PREPARED_SSD;
            p->tier_bytes[t] += x->layers[i].blob_bytes;
            p->n_ram += t == PREPARED_RAM;
            if (t != PREPARED_RAM && !(t == PREPARED_VRAM && p->arena_vram)) continue;
            *o = at;
            at += x->layers[i].blob_bytes;
            p->n_arena++;
        }
    p->arena_bytes = at;
    return 0;
}

/* The request's keys the workers act on; each absent key keeps its 0. */
static int read_request(const cJSON *r, const char *path, struct prepared_placement *p, char *err, size_t errlen)
{
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(r, "ple_tier");
    const cJSON *vb = cJSON_GetObjectItemCaseSensitive(r, "vram_budget");
    const cJSON *vc = cJSON_GetObjectItemCaseSensitive(r, "vram_ctx");
    if (pt && !(cJSON_IsString(pt) && (!strcmp(pt->valuestring, "ram") || !strcmp(pt->valuestring, "ssd") ||
                                       !strcmp(pt->valuestring, "vram"))))
        return nb_errf(err, errlen, NB_EFORMAT, "%s: request.ple_tier is none of \"vram\", \"ram\", \"ssd\"", path);
    p->ple_ssd = pt && !strcmp(pt->valuestring, "ssd");
    p->ple_vram = pt && !strcmp(pt->valuestring, "vram");
    if (cJSON_IsNumber(vb) && vb->valuedouble >= 0 && vb->valuedouble < 9e18) p->vram_budget = (uint64_t)vb->valuedouble;
    else if (vb && !(cJSON_IsString(vb) && !strcmp(vb->valuestring, "all")))
        return nb_errf(err, errlen, NB_EFORMAT, "%s: request.vram_budget is neither a byte count nor \"all\"", path);
    const cJSON *av = cJSON_GetObjectItemCaseSensitive(r, "arena_vram");
    if (av && !cJSON_IsBool(av)) return nb_errf(err, errlen, NB_EFORMAT, "%s: request.arena_vram is not a boolean", path);
    p->arena_vram = cJSON_IsTrue(av);
    if (cJSON_IsNumber(vc) && vc->valuedouble >= 1 && vc->valuedouble < 9e15) p->vram_ctx = (int64_t)vc->valuedouble;
    else if (vc) return nb_errf(err, errlen, NB_EFORMAT, "%s: request.vram_ctx is not a positive count", path);
    return 0;
}

int prepared_placement_load(const char *path, const struct prepared_idx *x, struct prepared_placement *p, char *err,
                            size_t errlen)
{
    uint8_t *d;
    size_t n;
    memset(p, 0, sizeof *p);
    int rc = read_whole(path, &d, &n, err, errlen);
    if (rc) return rc;
    cJSON *j = cJSON_ParseWithLength((const char *)d, n);
    free(d);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
    if (!j || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "nebula.placement/1")) {
        cJSON_Delete(j);
        return nb_errf(err, errlen, NB_EFORMAT, "%s: not a nebula.placement/1 file", path);
    }
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "model"),
                                                        "experts_index_sha256");
    snprintf(p->idx_sha, sizeof p->idx_sha, "%s", cJSON_IsString(sha) ? sha->valuestring : "");
    p->n_layers = x->n_layers;
    p->tier = calloc(x->n_layers ? x->n_layers : 1, sizeof *p->tier);
    rc = p->tier ? read_layers(cJSON_GetObjectItemCaseSensitive(j, "layers"), x, p, err, errlen)
                 : nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    if (rc == 0) rc = read_request(cJSON_GetObjectItemCaseSensitive(j, "request"), path, p, err, errlen);
    cJSON_Delete(j);
    if (rc == 0) rc = lay_out_arena(x, p, err, errlen);
    if (rc) prepared_placement_free(p);
    return rc;
}

void prepared_placement_free(struct prepared_placement *p)
{
    for (int i = 0; p->tier && i < p->n_layers; i++) free(p->tier[i]);
    free(p->tier);
    free(p->arena_off);
    memset(p, 0, sizeof *p);
}

int prepared_plan_load(const char *dir, const char *path, struct prepared_idx *x, struct prepared_placement *p,
                       char *err, size_t errlen)
{
    char def[4096];
    memset(p, 0, sizeof *p);
    if (!path || !*path) {
        if (snprintf(def, sizeof def, "%s/placement.json", dir) >= (int)sizeof def)
            return nb_errf(err, errlen, NB_EINVAL, "%s: path too long", dir);
        path = def;
    }
    int rc = prepared_idx_load(dir, x, err, errlen);
    if (rc == 0 && (rc = prepared_placement_load(path, x, p, err, errlen))) prepared_idx_free(x);
    return rc;
}

int prepared_ple_load(const char *dir, struct prepared_ple *p, char *err, size_t errlen)
{
    char path[4096];
    uint8_t h[PREPARED_PAGE];
    snprintf(path, sizeof path, "%s/ple.bin", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return nb_errf(err, errlen, NB_ENOENT, "%s: cannot open", path);
    size_t got = fread(h, 1, sizeof h, f);
    fclose(f);
    if (got != sizeof h || memcmp(h, "NBPLETAB", 8) || rd32(h + 8) != 1 || rd32(h + 12) != PREPARED_PAGE)
        return nb_errf(err, errlen, NB_EFORMAT, "%s: not a ple.bin of version 1", path);
    *p = (struct prepared_ple){rd32(h + 16), rd32(h + 20), rd64(h + 24), rd64(h + 32), rd32(h + 40), rd32(h + 44),
                               rd64(h + 48), rd64(h + 56), rd64(h + 64)};
    if (p->row_bytes == 0 || (p->rows_per_page == 0) != (p->row_bytes > PREPARED_PAGE) ||
        p->data_offset + p->pages * PREPARED_PAGE > p->file_bytes)
        return nb_errf(err, errlen, NB_EFORMAT, "%s: inconsistent header", path);
    return 0;
}

int prepared_vram_map(const struct prepared_idx *x, const struct prepared_placement *p, int n_blocks, int E, uint8_t *map,
                      int64_t *n_vram, char *err, size_t errlen)
{
    memset(map, 0, (size_t)n_blocks * (size_t)E);
    int64_t n = 0;
    for (int i = 0; i < x->n_layers; i++) {
        const struct prepared_layer *L = &x->layers[i];
        if ((int)L->block >= n_blocks || (int)L->n_expert != E)
            return nb_errf(err, errlen, NB_EFORMAT, "placement: layer of block %u (%u experts) is not in the model (%d blocks of %d)",
                           L->block, L->n_expert, n_blocks, E);
        for (int e = 0; e < E; e++)
            if (p->tier[i][e] == PREPARED_VRAM) map[(size_t)L->block * (size_t)E + (size_t)e] = 1, n++;
    }
    if (n_vram) *n_vram = n;
    return 0;
}
