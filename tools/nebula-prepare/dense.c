/* dense.c — dense.gguf: the input GGUF minus routed experts and n-gram table.
 *
 * What stays is what the GPU worker uploads whole (embeddings, mixers,
 * routers, shared experts, norms, head, MTP block minus its routed experts).
 * Key/values are copied with their exact types (a f64 goes through its
 * shortest round-trip decimal, which the reader prints), except the split.*
 * keys of a split input: the output is one file.  nebula.prepared.* keys
 * name the experts and table files and their SHA-256, so a dense file can
 * never be paired with experts from another preparation.  Tensor data is
 * streamed from the input mapping through the GGUF writer, 64 MiB at a
 * time, into dense.gguf.tmp, renamed when complete.  A separate MTP file
 * (--mtp) contributes its MTP block, so dense.gguf is the whole model's. */
#include "tools/nebula-prepare/prepare.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"

#define PIECE_BYTES ((uint64_t)64 << 20)

bool dense_excludes(const char *name)
{
    if (strcmp(name, "per_layer_token_embd.weight") == 0) return true;
    if (strncmp(name, "blk.", 4) != 0) return false;
    const char *p = name + 4;
    while (*p >= '0' && *p <= '9') p++;
    if (p == name + 4 || *p != '.') return false;
    p++;
    static const char *experts[] = {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight",
                                    "ffn_gate_up_exps.weight"};
    for (size_t i = 0; i < sizeof experts / sizeof *experts; i++)
        if (strcmp(p, experts[i]) == 0) return true;
    return false;
}

uint64_t dense_tensor_bytes(const gguf_file *g)
{
    uint64_t total = 0;
    for (int64_t i = 0; i < gguf_tensor_count(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        if (!dense_excludes(t->name)) total += t->nbytes;
    }
    return total;
}

static bool skip_key(const char *key, bool mtp_file)
{
    if (mtp_file && (!strcmp(key, "qwen4exp.block_count") || !strcmp(key, "qwen4exp.nextn_predict_layers"))) return true;
    return strncmp(key, "split.", 6) == 0 || strncmp(key, "nebula.prepared.", 16) == 0;
}

/* The tensors dense.gguf takes from file f of m (the trunk's, or the separate MTP file's). */
static bool dense_takes(const struct model *m, const gguf_file *f, const char *name)
{
    if (dense_excludes(name)) return false;
    if (!m->mtp_gguf) return true;
    char prefix[32];
    int n = snprintf(prefix, sizeof prefix, "blk.%d.", m->hp.n_layer);
    bool mtp_block = strncmp(name, prefix, (size_t)n) == 0;
    return f == m->mtp_gguf ? mtp_block : !mtp_block;
}

/* One key/value with its type.  Returns the writer's status. */
static int copy_kv(const gguf_file *g, int64_t i, gguf_writer *w, char *err, size_t errlen)
{
    const char *key = gguf_kv_key(g, i);
    enum gguf_vtype t = gguf_kv_type(g, i);
    uint64_t u = 0;
    int64_t s = 0;
    float f = 0;
    bool b = false;
    const char *str = NULL;
    int rc = 0;
    switch (t) {
    case GGUF_VT_UINT8: rc = gguf_get_u64(g, key, &u, err, errlen); if (!rc) rc = gguf_w_set_u8(w, key, (uint8_t)u); break;
    case GGUF_VT_UINT16: rc = gguf_get_u64(g, key, &u, err, errlen); if (!rc) rc = gguf_w_set_u16(w, key, (uint16_t)u); break;
    case GGUF_VT_UINT32: rc = gguf_get_u64(g, key, &u, err, errlen); if (!rc) rc = gguf_w_set_u32(w, key, (uint32_t)u); break;
    case GGUF_VT_UINT64: rc = gguf_get_u64(g, key, &u, err, errlen); if (!rc) rc = gguf_w_set_u64(w, key, u); break;
    case GGUF_VT_INT8: rc = gguf_get_i64(g, key, &s, err, errlen); if (!rc) rc = gguf_w_set_i8(w, key, (int8_t)s); break;
    case GGUF_VT_INT16: rc = gguf_get_i64(g, key, &s, err, errlen); if (!rc) rc = gguf_w_set_i16(w, key, (int16_t)s); break;
    case GGUF_VT_INT32: rc = gguf_get_i64(g, key, &s, err, errlen); if (!rc) rc = gguf_w_set_i32(w, key, (int32_t)s); break;
    case GGUF_VT_INT64: rc = gguf_get_i64(g, key, &s, err, errlen); if (!rc) rc = gguf_w_set_i64(w, key, s); break;
    case GGUF_VT_FLOAT32: rc = gguf_get_f32(g, key, &f, err, errlen); if (!rc) rc = gguf_w_set_f32(w, key, f); break;
    case GGUF_VT_FLOAT64: {
        char text[64];
        gguf_kv_format(g, i, text, sizeof text); /* shortest decimal that reads back as the same double */
        rc = gguf_w_set_f64(w, key, strtod(text, NULL));
        break;
    }
    case GGUF_VT_BOOL: rc = gguf_get_bool(g, key, &b, err, errlen); if (!rc) rc = gguf_w_set_bool(w, key, b); break;
    case GGUF_VT_STRING: rc = gguf_get_str(g, key, &str, err, errlen); if (!rc) rc = gguf_w_set_str(w, key, str); break;
    case GGUF_VT_ARRAY:
        if (gguf_kv_arr_type(g, i) == GGUF_VT_STRING) {
            uint64_t n = gguf_kv_arr_len(g, i);
            const char **strs = malloc((n ? n : 1) * sizeof *strs);
            if (!strs) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
            for (uint64_t j = 0; j < n && !rc; j++) rc = gguf_get_arr_str(g, key, j, &strs[j], err, errlen);
            if (!rc) rc = gguf_w_set_arr_str(w, key, strs, n);
            free(strs);
        } else {
            enum gguf_vtype et;
            const void *data;
            uint64_t n;
            rc = gguf_get_arr_data(g, key, &et, &data, &n, err, errlen);
            if (!rc && !gguf_vtype_size(et)) rc = nb_errf(err, errlen, NB_ENOTSUP, "key \"%s\": nested arrays are not supported", key);
            if (!rc) rc = gguf_w_set_arr(w, key, et, data, n);
        }
        break;
    default: return nb_errf(err, errlen, NB_ENOTSUP, "key \"%s\": value type %d", key, (int)t);
    }
    if (rc && gguf_writer_error(w)[0]) return nb_errf(err, errlen, rc, "%s", gguf_writer_error(w));
    return rc;
}

static int add_refs(gguf_writer *w, const struct dense_refs *r)
{
    int rc = gguf_w_set_u32(w, "nebula.prepared.version", PREP_FORMAT_VERSION);
    if (!rc) rc = gguf_w_set_str(w, "nebula.prepared.experts_file", "experts.bin");
    if (!rc) rc = gguf_w_set_str(w, "nebula.prepared.experts_sha256", r->experts_sha);
    if (!rc) rc = gguf_w_set_str(w, "nebula.prepared.experts_index_file", "experts.idx");
    if (!rc) rc = gguf_w_set_str(w, "nebula.prepared.experts_index_sha256", r->idx_sha);
    if (!rc && r->ple_sha[0]) rc = gguf_w_set_str(w, "nebula.prepared.ple_file", "ple.bin");
    if (!rc && r->ple_sha[0]) rc = gguf_w_set_str(w, "nebula.prepared.ple_sha256", r->ple_sha);
    return rc;
}

int dense_write(const struct model *m, const char *dir, const struct dense_refs *refs, char *err, size_t errlen)
{
    const gguf_file *in = m->gguf, *files[2] = {m->gguf, m->mtp_gguf};
    bool mtp_file = m->mtp_gguf != NULL;
    char path[4096];
    if (path_join(path, sizeof path, dir, "dense.gguf")) return nb_errf(err, errlen, NB_EINVAL, "%s: path too long", dir);
    gguf_writer *w;
    int rc = gguf_writer_open(path, &w, err, errlen);
    if (rc) return rc;
    for (int64_t i = 0; i < gguf_kv_count(in) && !rc; i++)
        if (!skip_key(gguf_kv_key(in, i), mtp_file)) rc = copy_kv(in, i, w, err, errlen);
    if (!rc && mtp_file &&
        (gguf_w_set_u32(w, "qwen4exp.block_count", (uint32_t)(m->hp.n_layer + 1)) ||
         gguf_w_set_u32(w, "qwen4exp.nextn_predict_layers", 1)))
        rc = nb_errf(err, errlen, NB_EINVAL, "%s", gguf_writer_error(w));
    if (!rc && add_refs(w, refs)) rc = nb_errf(err, errlen, NB_EINVAL, "%s", gguf_writer_error(w));
    uint64_t total = 0;
    for (int f = 0; f < 2; f++)
        for (int64_t i = 0; files[f] && i < gguf_tensor_count(files[f]) && !rc; i++) {
            const struct gguf_tensor *t = gguf_tensor_at(files[f], i);
            if (!dense_takes(m, files[f], t->name)) continue;
            if (gguf_w_add_tensor(w, t->name, t->type, t->n_dims, t->ne))
                rc = nb_errf(err, errlen, NB_EFORMAT, "%s", gguf_writer_error(w));
            total += t->nbytes;
        }
    if (!rc && gguf_w_write_header(w)) rc = nb_errf(err, errlen, NB_EIO, "%s", gguf_writer_error(w));
    struct progress prog;
    progress_begin(&prog, "dense.gguf", total);
    for (int f = 0; f < 2; f++)
    for (int64_t i = 0; files[f] && i < gguf_tensor_count(files[f]) && !rc; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(files[f], i);
        if (!dense_takes(m, files[f], t->name)) continue;
        for (uint64_t off = 0; off < t->nbytes && !rc; off += PIECE_BYTES) {
            uint64_t n = t->nbytes - off < PIECE_BYTES ? t->nbytes - off : PIECE_BYTES;
            if (gguf_w_write_data(w, (const uint8_t *)t->data + off, (size_t)n))
                rc = nb_errf(err, errlen, NB_EIO, "%s", gguf_writer_error(w));
            release_input((const uint8_t *)t->data + off, n);
            progress_add(&prog, n);
            if (prep_interrupted) rc = nb_errf(err, errlen, NB_EIO, "interrupted");
        }
    }
    if (!rc && gguf_writer_finish(w)) rc = nb_errf(err, errlen, NB_EIO, "%s", gguf_writer_error(w));
    gguf_writer_free(w); /* deletes dense.gguf.tmp unless finished */
    if (!rc) progress_end(&prog, "written");
    return rc;
}

int dense_check_refs(const char *dir, const struct dense_refs *refs, char *err, size_t errlen)
{
    char path[4096];
    if (path_join(path, sizeof path, dir, "dense.gguf")) return nb_errf(err, errlen, NB_EINVAL, "%s: path too long", dir);
    gguf_file *g;
    int rc = gguf_open(path, &g, err, errlen);
    if (rc) return rc;
    static const char *keys[] = {"nebula.prepared.experts_sha256", "nebula.prepared.experts_index_sha256",
                                 "nebula.prepared.ple_sha256"};
    const char *want[] = {refs->experts_sha, refs->idx_sha, refs->ple_sha};
    for (int k = 0; k < 3 && !rc; k++) {
        const char *have = "";
        if (gguf_find_key(g, keys[k]) >= 0 && gguf_get_str(g, keys[k], &have, err, errlen)) rc = NB_EFORMAT;
        else if (strcmp(have, want[k]) != 0)
            rc = nb_errf(err, errlen, NB_EFORMAT, "%s records %s = \"%.16s…\", expected \"%.16s…\"", path, keys[k], have,
                         want[k]);
    }
    gguf_close(g);
    return rc;
}
