/* backend.c — the gw_* entry points: argument checks, then the backend's table.
 *
 * Checks live here once so every backend sees only well-formed calls: token
 * ids in range, output buffers present for the rows asked for, positions
 * that exist.  Chained MTP drafting is written here on top of gw_mtp_eval,
 * so every backend drafts the same way (argmax, own wide state fed back). */
#include "engine/backend.h"

#include <stdlib.h>
#include <string.h>

#include "core/model/model.h"
#include "core/quant/quant.h"
#include "core/util/err.h"
#include "engine/backend_impl.h"

/* The cuda backend is in the library where the Makefile found nvcc. */
#ifdef NB_HAVE_CUDA
static const struct gw_backend_ops *const backends[] = {&gw_cpu_ops, &gw_cuda_ops};
#define HAVE_LIST "cpu, cuda"
#else
static const struct gw_backend_ops *const backends[] = {&gw_cpu_ops};
#define HAVE_LIST "cpu"
#endif

int gw_backend_create(const struct model *m, const struct gw_backend_params *p, gw_backend **out, char *err,
                      size_t errlen)
{
    *out = NULL;
    if (!m) return nb_errf(err, errlen, NB_EINVAL, "no model");
    const char *kind = p && p->kind ? p->kind : "cpu";
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (strcmp(backends[i]->kind, kind) == 0) return backends[i]->create(m, p, out, err, errlen);
#ifndef NB_HAVE_CUDA
    if (strcmp(kind, "cuda") == 0)
        return nb_errf(err, errlen, NB_ENOTSUP, "backend \"cuda\": built without CUDA (no nvcc when this was built)");
#endif
    return nb_errf(err, errlen, NB_ENOTSUP, "backend \"%s\" is not built in (have: " HAVE_LIST ")", kind);
}

int gw_backend_probe(const char *kind, char *msg, size_t len)
{
    if (kind && strcmp(kind, "cpu") == 0) return nb_errf(msg, len, 0, "the reference backend (CPU, OpenMP)");
    if (!kind || strcmp(kind, "cuda") != 0) return nb_errf(msg, len, NB_EINVAL, "unknown backend \"%s\" (have: " HAVE_LIST ")", kind ? kind : "");
#ifdef NB_HAVE_CUDA
    return gw_cuda_probe(msg, len);
#else
    return nb_errf(msg, len, NB_ENOTSUP, "built without CUDA (no nvcc when this was built)");
#endif
}

void gw_backend_free(gw_backend *be)
{
    if (be) be->ops->free(be);
}

int gw_backend_set_moe_remote(gw_backend *be, const struct gw_moe_remote *r, char *err, size_t errlen)
{
    if (r && (!r->fn || !r->local)) return nb_errf(err, errlen, NB_EINVAL, "remote experts need a function and a local map");
    if (r) be->remote = *r;
    else memset(&be->remote, 0, sizeof be->remote);
    return 0;
}

int gw_backend_set_ple_rows(gw_backend *be, const struct gw_ple_rows *r, char *err, size_t errlen)
{
    if (r && !r->fn) return nb_errf(err, errlen, NB_EINVAL, "a PLE row hook needs a function");
    if (r) be->ple_rows = *r;
    else memset(&be->ple_rows, 0, sizeof be->ple_rows);
    return 0;
}

void gw_ple_host_detach(struct model *m, struct gw_ple_host *h)
{
    const struct model_tensor *t = &m->ple_table;
    *h = (struct gw_ple_host){t->data, t->qt, t->ne[0], t->ne[1], t->row_bytes};
    m->ple_table.data = NULL;
}

int gw_ple_host_rows(void *ctx, int n_rows, const int64_t *rows, float *out, char *err, size_t errlen)
{
    const struct gw_ple_host *h = ctx;
    if (!h->data) return nb_errf(err, errlen, NB_EINVAL, "the model has no n-gram table");
    for (int i = 0; i < n_rows; i++) {
        if (rows[i] < 0 || rows[i] >= h->rows)
            return nb_errf(err, errlen, NB_EINVAL, "n-gram table row %lld of %lld", (long long)rows[i], (long long)h->rows);
        h->qt->to_float(h->data + (size_t)rows[i] * h->row_bytes, out + (int64_t)i * h->width, h->width);
    }
    return 0;
}

int gw_backend_set_expert_host(gw_backend *be, const struct gw_expert_host *h, char *err, size_t errlen)
{
    if (!be->ops->set_expert_host)
        return nb_errf(err, errlen, NB_ENOTSUP, "the %s backend does not stream experts from host memory", be->ops->kind);
    if (h && (!h->blob || !h->part_off || !h->blob_bytes))
        return nb_errf(err, errlen, NB_EINVAL, "host experts need the blob, offset and size tables");
    if (h) {
        const struct model_hparams *hp = &be->model->hp;
        for (int l = 0; l < hp->n_layer + hp->n_nextn; l++)
            for (int j = 0; j < 3; j++)
                if (h->part_off[3 * l + j] >= h->blob_bytes[l])
                    return nb_errf(err, errlen, NB_EINVAL, "host experts: layer %d's part %d at %llu, past its %llu-byte blob", l,
                                   j, (unsigned long long)h->part_off[3 * l + j], (unsigned long long)h->blob_bytes[l]);
    }
    return be->ops->set_expert_host(be, h, err, errlen);
}

const char *gw_backend_kind(const gw_backend *be) { return be->ops->kind; }
const struct model *gw_backend_model(const gw_backend *be) { return be->model; }

uint64_t gw_backend_experts_computed(const gw_backend *be)
{
    return __atomic_load_n(&be->experts_computed, __ATOMIC_RELAXED);
}

uint64_t gw_backend_experts_skipped(const gw_backend *be)
{
    return __atomic_load_n(&be->experts_skipped, __ATOMIC_RELAXED);
}

uint64_t gw_backend_bytes_copied(const gw_backend *be)
{
    return __atomic_load_n(&be->bytes_copied, __ATOMIC_RELAXED);
}

void gw_backend_slot_stats(const gw_backend *be, struct gw_slot_stats *out)
{
    const struct gw_slot_stats *s = &be->slot_stats;
    *out = (struct gw_slot_stats){__atomic_load_n(&s->selections, __ATOMIC_RELAXED), __atomic_load_n(&s->hits, __ATOMIC_RELAXED),
                                  __atomic_load_n(&s->static_hits, __ATOMIC_RELAXED), __atomic_load_n(&s->swaps, __ATOMIC_RELAXED),
                                  __atomic_load_n(&s->bytes, __ATOMIC_RELAXED), __atomic_load_n(&s->waited, __ATOMIC_RELAXED)};
}

uint64_t gw_backend_rows_evaluated(const gw_backend *be)
{
    return __atomic_load_n(&be->rows_evaluated, __ATOMIC_RELAXED);
}

uint64_t gw_backend_rows_replayed(const gw_backend *be)
{
    return __atomic_load_n(&be->rows_replayed, __ATOMIC_RELAXED);
}

int gw_recurrent_layer(const struct model *m)
{
    for (int i = 0; i < m->hp.n_layer; i++)
        if (m->layers[i].kind == MODEL_LAYER_GDN || m->layers[i].has_ple) return i;
    return -1;
}

int gw_rollback_check(const gw_seq *s, int64_t n_keep, int64_t pos0, int kept, char *err, size_t errlen)
{
    if (kept > 0 && n_keep >= pos0 && n_keep <= pos0 + kept) return 0;
    return nb_errf(err, errlen, NB_ENOTSUP,
                   "truncate to %lld of %lld: layer %d keeps recurrent state, which rolls back only into the last eval "
                   "when it was a verify window%s (keep a gw_seq_copy instead)",
                   (long long)n_keep, (long long)s->n_pos, gw_recurrent_layer(s->be->model),
                   kept ? " (positions it covers: from its first)" : "");
}

uint64_t gw_backend_graph_replays(const gw_backend *be)
{
    return __atomic_load_n(&be->graph_replays, __ATOMIC_RELAXED);
}

uint64_t gw_backend_vram_bytes(const gw_backend *be) { return __atomic_load_n(&be->vram_peak, __ATOMIC_RELAXED); }

void gw_backend_vram_used(const gw_backend *be, struct gw_vram_parts *used) { *used = be->vram_used; }

int gw_seq_create(gw_backend *be, gw_seq **out, char *err, size_t errlen)
{
    *out = NULL;
    return be->ops->seq_create(be, out, err, errlen);
}

void gw_seq_free(gw_seq *s)
{
    if (s) s->be->ops->seq_free(s);
}

int64_t gw_seq_pos(const gw_seq *s) { return s->n_pos; }

void gw_seq_reset(gw_seq *s) { s->be->ops->seq_reset(s); }

int gw_seq_truncate(gw_seq *s, int64_t n_keep, char *err, size_t errlen)
{
    if (n_keep < 0 || n_keep > s->n_pos)
        return nb_errf(err, errlen, NB_EINVAL, "truncate to %lld: the sequence has %lld positions", (long long)n_keep,
                       (long long)s->n_pos);
    if (n_keep == s->n_pos) return 0;
    if (n_keep == 0) {
        gw_seq_reset(s);
        return 0;
    }
    return s->be->ops->seq_truncate(s, n_keep, err, errlen);
}

int gw_seq_copy(gw_seq *dst, const gw_seq *src, char *err, size_t errlen)
{
    if (dst->be != src->be) return nb_errf(err, errlen, NB_EINVAL, "copy between sequences of different backends");
    if (dst == src) return 0;
    return src->be->ops->seq_copy(dst, src, err, errlen);
}

static int check_tokens(const struct model *m, const int32_t *tokens, int n, char *err, size_t errlen)
{
    if (n <= 0 || !tokens) return nb_errf(err, errlen, NB_EINVAL, "no tokens (n = %d)", n);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->hp.n_vocab)
            return nb_errf(err, errlen, NB_EINVAL, "token %d at row %d is outside the vocabulary (%lld)", tokens[i], i,
                           (long long)m->hp.n_vocab);
    return 0;
}

static int32_t argmax(const float *v, int64_t n);

int gw_eval(gw_seq *s, const struct gw_eval_args *a, char *err, size_t errlen)
{
    int rc = check_tokens(s->be->model, a->tokens, a->n_tokens, err, errlen);
    if (rc) return rc;
    if (a->logits_rows != GW_ROWS_NONE && !a->logits && !a->argmax)
        return nb_errf(err, errlen, NB_EINVAL, "logits asked, no buffer");
    if (a->argmax && a->logits_rows == GW_ROWS_NONE) return nb_errf(err, errlen, NB_EINVAL, "argmax asked for no rows");
    if (a->wide_rows != GW_ROWS_NONE && !a->wide) return nb_errf(err, errlen, NB_EINVAL, "wide state asked, no buffer");
    if (!(a->coverage >= 0 && a->coverage <= 1) || (a->coverage > 0 && !a->verify))
        return nb_errf(err, errlen, NB_EINVAL, "coverage %g: want 0, or a fraction in (0, 1] of a verify window",
                       (double)a->coverage);
    if (a->resident && strcmp(s->be->ops->kind, "cpu"))
        return nb_errf(err, errlen, NB_EINVAL, "%s: the resident experts are its slots (no resident map)", s->be->ops->kind);
    if (a->handoff) memset(a->handoff, 0, (size_t)a->n_tokens);
    __atomic_add_fetch(&s->be->rows_evaluated, (uint64_t)a->n_tokens, __ATOMIC_RELAXED);
    if (!a->argmax || s->be->ops->argmax) return s->be->ops->eval(s, a, err, errlen);
    /* the backend gives logits only: argmax of them here */
    const int64_t V = s->be->model->hp.n_vocab, rows = a->logits_rows == GW_ROWS_ALL ? a->n_tokens : 1;
    struct gw_eval_args b = *a;
    float *own = NULL;
    if (!b.logits && !(b.logits = own = malloc((size_t)(rows * V) * sizeof *own)))
        return nb_errf(err, errlen, NB_ENOMEM, "logits for argmax");
    rc = s->be->ops->eval(s, &b, err, errlen);
    for (int64_t r = 0; rc == 0 && r < rows; r++) a->argmax[r] = argmax(b.logits + r * V, V);
    free(own);
    return rc;
}

int gw_mtp_eval(gw_seq *s, const struct gw_mtp_args *a, char *err, size_t errlen)
{
    if (s->be->model->hp.n_nextn == 0) return nb_errf(err, errlen, NB_ENOTSUP, "the model has no MTP block");
    int rc = check_tokens(s->be->model, a->tokens, a->n_rows, err, errlen);
    if (rc) return rc;
    if (!a->wide_in) return nb_errf(err, errlen, NB_EINVAL, "MTP step without an input wide state");
    if (a->pos < 0) return nb_errf(err, errlen, NB_EINVAL, "MTP position %lld", (long long)a->pos);
    return s->be->ops->mtp_eval(s, a, err, errlen);
}

static int32_t argmax(const float *v, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return (int32_t)best;
}

int gw_mtp_draft(gw_seq *s, int32_t token0, const float *wide0, int64_t pos, int n_draft, int32_t *drafted,
                 float *logits, char *err, size_t errlen)
{
    const struct model_hparams *hp = &s->be->model->hp;
    if (n_draft <= 0 || !drafted) return nb_errf(err, errlen, NB_EINVAL, "draft of %d tokens", n_draft);
    int64_t wide = model_wide(hp);
    float *state = malloc((size_t)wide * sizeof *state), *row = malloc((size_t)hp->n_vocab * sizeof *row);
    if (!state || !row) {
        free(state);
        free(row);
        return nb_errf(err, errlen, NB_ENOMEM, "draft buffers");
    }
    memcpy(state, wide0, (size_t)wide * sizeof *state);
    int32_t token = token0;
    int rc = 0;
    for (int i = 0; i < n_draft && rc == 0; i++) {
        /* The step's output state overwrites its input: wide_in is read before wide_out is written. */
        float *out_logits = logits ? logits + (size_t)i * (size_t)hp->n_vocab : row;
        struct gw_mtp_args a = {&token, state, 1, pos + i, out_logits, state, NULL, NULL};
        rc = gw_mtp_eval(s, &a, err, errlen);
        if (rc == 0) token = drafted[i] = argmax(out_logits, hp->n_vocab);
    }
    free(state);
    free(row);
    return rc;
}
