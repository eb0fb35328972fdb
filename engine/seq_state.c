/* seq_state.c — a sequence's whole state as bytes (gw_seq_save / gw_seq_load).
 *
 * The prompt cache (issue 17) keeps sequence states between requests in host
 * memory and on disk.  Both backends hold the same fp32 arrays (the CPU in
 * its heap, CUDA in device blocks laid out by vram.c), so the format is
 * written here once from the backend's view of them (seq_parts) and its
 * copy function (state_copy: memcpy, or cudaMemcpy device ↔ host):
 *
 *   u32 magic "NBSQ", u32 version, i64 n_pos, i64 mtp_n, u32 layers, u32 0
 *   i32 tokens[n_pos], i64 mtp_pos[mtp_n]
 *   per layer (n_layer + n_nextn): i64 n_blk, then 7 arrays
 *     (conv, ssm, ple_conv, k, v, idx_k, blk_k), each u64 floats + floats
 *
 * A load checks every count against what the model and the counts imply
 * before it copies a byte into the sequence, and resets the sequence on any
 * failure: a state is loaded whole or not at all. */
#include "engine/backend_impl.h"

#include "core/util/err.h"

#include <string.h>

#define SEQ_MAGIC 0x5153424eu /* "NBSQ" */
#define SEQ_VERSION 1u
#define N_ARRAYS 7

struct seq_head {
    uint32_t magic, version;
    int64_t n_pos, mtp_n;
    uint32_t layers, zero;
};

/* The floats array j of layer i holds for n positions (n_blk block rows), or 0 where the backend has no array. */
static int64_t array_floats(const struct model *m, const struct gw_seq_layer *l, int i, int j, int64_t n_pos, int64_t mtp_n,
                            int64_t n_blk)
{
    const struct model_hparams *hp = &m->hp;
    const int64_t kvw = (int64_t)hp->n_head_kv * hp->head_dim, Di = hp->idx_head_dim, n = i < hp->n_layer ? n_pos : mtp_n;
    float *const ptr[N_ARRAYS] = {l->conv, l->ssm, l->ple_conv, l->k, l->v, l->idx_k, l->blk_k};
    if (!ptr[j]) return 0;
    switch (j) {
    case 0: return model_gdn_conv_state_floats(hp);
    case 1: return model_gdn_ssm_state_floats(hp);
    case 2: return model_ple_conv_state_floats(hp);
    case 3: case 4: return n * kvw;
    case 5: return n * Di;
    default: return n_blk * Di;
    }
}

static int layers_of(const gw_seq *s) { return s->be->model->hp.n_layer + s->be->model->hp.n_nextn; }

/* The backend's view of s (layers: layers_of(s) entries). */
static int parts_of(gw_seq *s, bool load, int64_t n_pos, int64_t mtp_n, struct gw_seq_parts *p, struct gw_seq_layer *layers,
                    char *err, size_t errlen)
{
    if (!s->be->ops->seq_parts || !s->be->ops->state_copy)
        return nb_errf(err, errlen, NB_ENOTSUP, "the %s backend cannot save sequence states", s->be->ops->kind);
    memset(layers, 0, (size_t)layers_of(s) * sizeof *layers);
    *p = (struct gw_seq_parts){.layers = layers};
    return s->be->ops->seq_parts(s, load, n_pos, mtp_n, p, err, errlen);
}

const int32_t *gw_seq_tokens(const gw_seq *s)
{
    const int L = layers_of(s);
    struct gw_seq_layer layers[L];
    struct gw_seq_parts p;
    char err[8];
    return parts_of((gw_seq *)s, false, 0, 0, &p, layers, err, sizeof err) ? NULL : p.tokens;
}

uint64_t gw_seq_save_bytes(const gw_seq *s)
{
    const int L = layers_of(s);
    struct gw_seq_layer layers[L];
    struct gw_seq_parts p;
    char err[8];
    if (parts_of((gw_seq *)s, false, 0, 0, &p, layers, err, sizeof err)) return 0;
    const struct model *m = s->be->model;
    uint64_t b = sizeof(struct seq_head) + (uint64_t)s->n_pos * 4 + (uint64_t)*p.mtp_n * 8;
    for (int i = 0; i < L; i++) {
        b += 8 + N_ARRAYS * 8;
        for (int j = 0; j < N_ARRAYS; j++)
            b += (uint64_t)array_floats(m, &layers[i], i, j, s->n_pos, *p.mtp_n, layers[i].n_blk ? *layers[i].n_blk : 0) * 4;
    }
    return b;
}

int gw_seq_save(const gw_seq *s, void *buf, uint64_t cap, uint64_t *len, char *err, size_t errlen)
{
    const int L = layers_of(s);
    struct gw_seq_layer layers[L];
    struct gw_seq_parts p;
    int rc = parts_of((gw_seq *)s, false, 0, 0, &p, layers, err, errlen);
    if (rc) return rc;
    if (*p.broken) return nb_errf(err, errlen, NB_EINVAL, "the sequence is inconsistent after a failed call: nothing to save");
    const uint64_t need = gw_seq_save_bytes(s);
    if (cap < need) return nb_errf(err, errlen, NB_EINVAL, "the state needs %llu bytes, the buffer has %llu",
                                   (unsigned long long)need, (unsigned long long)cap);
    const struct model *m = s->be->model;
    char *o = buf;
    const struct seq_head h = {SEQ_MAGIC, SEQ_VERSION, s->n_pos, *p.mtp_n, (uint32_t)L, 0};
    memcpy(o, &h, sizeof h), o += sizeof h;
    if (s->n_pos) memcpy(o, p.tokens, (size_t)s->n_pos * 4), o += s->n_pos * 4; /* (the arrays may be NULL when empty) */
    if (*p.mtp_n) memcpy(o, p.mtp_pos, (size_t)*p.mtp_n * 8), o += *p.mtp_n * 8;
    for (int i = 0; i < L; i++) {
        const struct gw_seq_layer *l = &layers[i];
        const int64_t n_blk = l->n_blk ? *l->n_blk : 0;
        float *const ptr[N_ARRAYS] = {l->conv, l->ssm, l->ple_conv, l->k, l->v, l->idx_k, l->blk_k};
        memcpy(o, &n_blk, 8), o += 8;
        for (int j = 0; j < N_ARRAYS; j++) {
            const uint64_t nf = (uint64_t)array_floats(m, l, i, j, s->n_pos, *p.mtp_n, n_blk);
            memcpy(o, &nf, 8), o += 8;
            if (nf && (rc = s->be->ops->state_copy(s->be, o, ptr[j], nf * 4, false, err, errlen))) return rc;
            o += nf * 4;
        }
    }
    *len = (uint64_t)(o - (char *)buf);
    return 0;
}

/* A reader over the buffer: false once it would run past the end. */
struct rd {
    const char *p;
    uint64_t left;
};
static bool take(struct rd *r, void *dst, uint64_t n)
{
    if (n > r->left) return false;
    if (dst && n) memcpy(dst, r->p, n);
    r->p += n, r->left -= n;
    return true;
}

/* Every count of the buffer against the model (no byte is copied yet). */
static int check_layout(const gw_seq *s, const struct gw_seq_layer *layers, const struct seq_head *h, struct rd r, char *err,
                        size_t errlen)
{
    const struct model *m = s->be->model;
    for (int64_t t = 0; t < h->n_pos; t++) {
        int32_t id;
        if (!take(&r, &id, 4)) return nb_errf(err, errlen, NB_EINVAL, "saved state: truncated in its tokens");
        if (id < 0 || id >= m->hp.n_vocab) return nb_errf(err, errlen, NB_EINVAL, "saved state: token %d is not in the vocabulary", id);
    }
    if (!take(&r, NULL, (uint64_t)h->mtp_n * 8)) return nb_errf(err, errlen, NB_EINVAL, "saved state: truncated in its MTP positions");
    for (int i = 0; i < (int)h->layers; i++) {
        int64_t n_blk = 0;
        if (!take(&r, &n_blk, 8)) return nb_errf(err, errlen, NB_EINVAL, "saved state: truncated at layer %d", i);
        const int cr = i < m->hp.n_layer ? m->layers[i].compress_ratio : 0;
        if (n_blk < 0 || (layers[i].blk_k ? cr <= 0 || n_blk > h->n_pos / cr : n_blk != 0))
            return nb_errf(err, errlen, NB_EINVAL, "saved state: layer %d has %lld block keys for %lld positions", i,
                           (long long)n_blk, (long long)h->n_pos);
        for (int j = 0; j < N_ARRAYS; j++) {
            uint64_t nf = 0;
            const int64_t want = array_floats(m, &layers[i], i, j, h->n_pos, h->mtp_n, n_blk);
            if (!take(&r, &nf, 8) || nf != (uint64_t)want)
                return nb_errf(err, errlen, NB_EINVAL, "saved state: layer %d array %d has %llu floats, this model %lld", i, j,
                               (unsigned long long)nf, (long long)want);
            if (!take(&r, NULL, nf * 4)) return nb_errf(err, errlen, NB_EINVAL, "saved state: truncated at layer %d", i);
        }
    }
    if (r.left) return nb_errf(err, errlen, NB_EINVAL, "saved state: %llu bytes past its end", (unsigned long long)r.left);
    return 0;
}

static int load_body(gw_seq *s, const void *buf, uint64_t len, char *err, size_t errlen)
{
    struct seq_head h;
    struct rd r = {buf, len};
    const int L = layers_of(s);
    if (!take(&r, &h, sizeof h) || h.magic != SEQ_MAGIC) return nb_errf(err, errlen, NB_EINVAL, "not a saved sequence state");
    if (h.version != SEQ_VERSION) return nb_errf(err, errlen, NB_EINVAL, "saved state version %u (this build reads %u)", h.version, SEQ_VERSION);
    if (h.layers != (uint32_t)L || h.n_pos < 0 || h.mtp_n < 0 || h.n_pos > (int64_t)(len / 4) || h.mtp_n > (int64_t)(len / 8))
        return nb_errf(err, errlen, NB_EINVAL, "saved state: %u layers, %lld positions (this model has %d layers)", h.layers,
                       (long long)h.n_pos, L);
    struct gw_seq_layer layers[L];
    struct gw_seq_parts p;
    int rc = parts_of(s, true, h.n_pos, h.mtp_n, &p, layers, err, errlen);
    if (rc || (rc = check_layout(s, layers, &h, r, err, errlen))) return rc;
    take(&r, p.tokens, (uint64_t)h.n_pos * 4);
    take(&r, p.mtp_pos, (uint64_t)h.mtp_n * 8);
    for (int i = 0; i < L; i++) {
        const struct gw_seq_layer *l = &layers[i];
        int64_t n_blk = 0;
        float *const ptr[N_ARRAYS] = {l->conv, l->ssm, l->ple_conv, l->k, l->v, l->idx_k, l->blk_k};
        take(&r, &n_blk, 8);
        if (l->n_blk) *l->n_blk = n_blk;
        for (int j = 0; j < N_ARRAYS; j++) {
            uint64_t nf = 0;
            take(&r, &nf, 8);
            if (nf && (rc = s->be->ops->state_copy(s->be, ptr[j], r.p, nf * 4, true, err, errlen))) return rc;
            take(&r, NULL, nf * 4);
        }
    }
    s->n_pos = h.n_pos, *p.mtp_n = h.mtp_n;
    return 0;
}

int gw_seq_load(gw_seq *s, const void *buf, uint64_t len, char *err, size_t errlen)
{
    int rc = load_body(s, buf, len, err, errlen);
    if (rc) gw_seq_reset(s);
    return rc;
}
