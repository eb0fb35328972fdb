/* write.c — writing a planned model (convert.h) as a GGUF: every qwen4exp
 * key, the tokenizer when the checkpoint has one, then the tensors streamed
 * row chunk by row chunk, converting and quantizing rows in parallel (OpenMP)
 * — or, for a synthetic model's large tensors, copying them from pools of
 * quantized rows (pool.c) — and writing each chunk with one large write.
 * Memory stays at one chunk (≤ 64 MiB), plus a synthetic model's pools (≤ 4
 * MiB per kind of tensor), however large the model.  Shared by
 * nebula-convert and nebula-gen. */
#include "core/gguf/gguf.h"
#include "core/quant/quant.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/err.h"
#include "tools/nebula-convert/convert.h"
#include "core/util/clock.h"

#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CHUNK_BYTES (64u << 20)
#define PARALLEL_VALUES (1 << 16) /* fewer values are converted on one thread: waking a team costs more */

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { interrupted = sig; }

/* Every qwen4exp.* key of docs/CONVERSION.md §3.1. */
static int write_keys(gguf_writer *w, const struct conv_plan *p, const struct conv_mix *mix, const char *name,
                      const char *description)
{
    const struct hf_config *f = &p->cfg;
    uint32_t n_blocks = (uint32_t)(f->n_layers + (p->mtp ? 1 : 0));
    int rc = 0;
#define K(call) if (!rc) rc = (call)
#define A "qwen4exp."
    K(gguf_w_set_str(w, "general.architecture", "qwen4exp"));
    K(gguf_w_set_str(w, "general.type", "model"));
    K(gguf_w_set_str(w, "general.name", name));
    if (description) K(gguf_w_set_str(w, "general.description", description));
    K(gguf_w_set_u32(w, "general.file_type", mix->file_type));
    K(gguf_w_set_u32(w, "general.quantization_version", 2));
    K(gguf_w_set_u32(w, A "block_count", n_blocks));
    if (p->mtp) K(gguf_w_set_u32(w, A "nextn_predict_layers", 1));
    K(gguf_w_set_u32(w, A "context_length", (uint32_t)f->max_pos));
    K(gguf_w_set_u32(w, A "embedding_length", (uint32_t)f->hidden_size));
    K(gguf_w_set_u32(w, A "attention.head_count", (uint32_t)f->n_head));
    K(gguf_w_set_u32(w, A "attention.head_count_kv", (uint32_t)f->n_head_kv));
    K(gguf_w_set_u32(w, A "attention.key_length", (uint32_t)f->head_dim));
    K(gguf_w_set_u32(w, A "attention.value_length", (uint32_t)f->head_dim));
    K(gguf_w_set_f32(w, A "attention.layer_norm_rms_epsilon", (float)f->rms_eps));
    K(gguf_w_set_f32(w, A "rope.freq_base", (float)f->rope_theta));
    K(gguf_w_set_u32(w, A "rope.dimension_count", (uint32_t)f->rope_dim));
    int32_t sections[4] = {11, 11, 10, 0};
    if (f->n_mrope_section)
        for (int i = 0; i < 4; i++) sections[i] = i < f->n_mrope_section ? (int32_t)f->mrope_section[i] : 0;
    K(gguf_w_set_arr(w, A "rope.dimension_sections", GGUF_VT_INT32, sections, 4));
    K(gguf_w_set_u32(w, A "expert_count", (uint32_t)f->n_experts));
    K(gguf_w_set_u32(w, A "expert_used_count", (uint32_t)f->n_experts_used));
    K(gguf_w_set_u32(w, A "expert_feed_forward_length", (uint32_t)f->expert_ff));
    K(gguf_w_set_u32(w, A "expert_shared_feed_forward_length", (uint32_t)f->shared_ff));
    if (!f->norm_topk) K(gguf_w_set_bool(w, A "expert_weights_norm", false));
    K(gguf_w_set_u32(w, A "ssm.conv_kernel", (uint32_t)f->lin_conv_kernel));
    K(gguf_w_set_u32(w, A "ssm.state_size", (uint32_t)f->lin_k_head_dim));
    K(gguf_w_set_u32(w, A "ssm.group_count", (uint32_t)f->lin_n_k_heads));
    K(gguf_w_set_u32(w, A "ssm.time_step_rank", (uint32_t)f->lin_n_v_heads));
    K(gguf_w_set_u32(w, A "ssm.inner_size", (uint32_t)(f->lin_v_head_dim * f->lin_n_v_heads)));
    K(gguf_w_set_str(w, A "ssm.output_gate", f->gate_sigmoid ? "sigmoid" : "silu"));
    if (f->full_attention_interval) K(gguf_w_set_u32(w, A "full_attention_interval", (uint32_t)f->full_attention_interval));
    K(gguf_w_set_u32(w, A "hyper_connection.count", (uint32_t)f->hc_count));
    K(gguf_w_set_u32(w, A "hyper_connection.low_rank", (uint32_t)f->hc_lowrank));
    if (f->has_indexer) {
        K(gguf_w_set_u32(w, A "attention.indexer.head_count", (uint32_t)f->idx_heads));
        K(gguf_w_set_u32(w, A "attention.indexer.key_length", (uint32_t)f->idx_head_dim));
        K(gguf_w_set_u32(w, A "attention.indexer.top_k", (uint32_t)f->idx_budget));
    }
    int32_t ratios[HF_MAX_LAYERS + 1];
    bool recurrent[HF_MAX_LAYERS + 1];
    for (uint32_t i = 0; i < n_blocks; i++) {
        bool trunk = i < (uint32_t)f->n_layers, lin = trunk && f->is_linear[i];
        ratios[i] = trunk && !lin && f->has_indexer ? (int32_t)f->idx_ratio : 0; /* MTP attends densely */
        recurrent[i] = lin;
    }
    K(gguf_w_set_arr(w, A "attention.compress_ratios", GGUF_VT_INT32, ratios, n_blocks));
    K(gguf_w_set_arr(w, A "attention.recurrent_layers", GGUF_VT_BOOL, recurrent, n_blocks));
    if (f->n_ple) {
        int32_t layers[HF_MAX_PLE];
        for (int i = 0; i < f->n_ple; i++) layers[i] = (int32_t)f->ple_layers[i];
        K(gguf_w_set_arr(w, A "ple.layers", GGUF_VT_INT32, layers, (uint64_t)f->n_ple));
        K(gguf_w_set_u32(w, A "ple.ngram_size", (uint32_t)f->ngram_size));
        K(gguf_w_set_u32(w, A "ple.heads_per_ngram", (uint32_t)f->heads_per_ngram));
        K(gguf_w_set_u32(w, A "ple.conv_kernel", (uint32_t)f->ple_conv_kernel));
        K(gguf_w_set_u32(w, A "ple.eos_token_id", (uint32_t)f->ple_eos));
        if (f->image_token_id >= 0) K(gguf_w_set_u32(w, A "ple.image_token_id", (uint32_t)f->image_token_id));
        K(gguf_w_set_u32(w, A "embedding_length_per_layer_input", (uint32_t)p->ple_row_width));
        K(gguf_w_set_arr(w, A "ple.layer_multipliers", GGUF_VT_UINT64, p->ple_mult, (uint64_t)p->n_ple_mult));
        K(gguf_w_set_arr(w, A "ple.head_offsets", GGUF_VT_UINT64, p->ple_offsets, (uint64_t)p->n_ple_heads));
        K(gguf_w_set_arr(w, A "ple.head_vocab_sizes", GGUF_VT_UINT64, p->ple_sizes, (uint64_t)p->n_ple_heads));
    }
    if (p->synth.on) { /* how a synthetic model was made, for the benchmarks that report it */
        K(gguf_w_set_str(w, "nebula.synthetic.mix", mix->name));
        K(gguf_w_set_u64(w, "nebula.synthetic.seed", p->synth.seed));
        K(gguf_w_set_f32(w, "nebula.synthetic.router_skew", (float)p->synth.router_skew));
        if (p->synth.topics > 0) {
            K(gguf_w_set_u32(w, "nebula.synthetic.topics", (uint32_t)p->synth.topics));
            K(gguf_w_set_f32(w, "nebula.synthetic.topic_embed", (float)p->synth.topic_embed));
            K(gguf_w_set_f32(w, "nebula.synthetic.topic_router", (float)p->synth.topic_router));
            K(gguf_w_set_f32(w, "nebula.synthetic.topic_share", (float)p->synth.topic_share));
        }
    }
#undef A
#undef K
    return rc;
}

static void fmt_bytes(double b, char *buf, size_t len)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) b /= 1024, i++;
    snprintf(buf, len, "%.1f %s", b, u[i]);
}

/* Rows [r0, r0 + nr) of t converted and quantized into buf, in parallel;
 * work has 3 · ne[0] floats per thread. */
static int convert_rows(const struct conv_plan *p, const struct conv_tensor *t, int64_t r0, int64_t nr, unsigned char *buf,
                        float *work, char *err, size_t errlen)
{
    const struct quant_traits *tr = quant_traits_of(t->type);
    int64_t n = t->ne[0];
    size_t row_bytes = quant_row_size(t->type, n);
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 16) if (nr * n >= PARALLEL_VALUES)
    for (int64_t k = 0; k < nr; k++) {
        if (__atomic_load_n(&failed, __ATOMIC_RELAXED)) continue;
        float *row = work + (size_t)omp_get_thread_num() * 3 * (size_t)n;
        char e[256];
        if (conv_row(p, t, r0 + k, row, row + n, e, sizeof e)) {
#pragma omp critical
            if (!failed) {
                failed = 1;
                nb_errf(err, errlen, NB_EFORMAT, "%s row %lld: %s", t->name, (long long)(r0 + k), e);
            }
            continue;
        }
        tr->from_float(row, buf + (size_t)k * row_bytes, n);
    }
    return failed ? NB_EFORMAT : 0;
}

/* Converts and writes one tensor, chunk by chunk: row by row, or for a
 * synthetic model's large tensors from a pool of rows (pool.c). */
static int write_tensor(gguf_writer *w, const struct conv_plan *p, struct conv_pools *pools, const struct conv_tensor *t,
                        bool progress, char *err, size_t errlen)
{
    int64_t n = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    size_t row_bytes = quant_row_size(t->type, n);
    int64_t chunk = (int64_t)(CHUNK_BYTES / row_bytes);
    if (chunk < 1) chunk = 1;
    if (chunk > rows) chunk = rows;
    bool pooled = pools && conv_pool_applies(p, t);
    const struct quant_traits *tr = quant_traits_of(t->type);
    if (!tr || !tr->from_float)
        return nb_errf(err, errlen, NB_ENOTSUP, "%s: no quantizer for type %s", t->name, quant_type_name(t->type));
    unsigned char *buf = malloc((size_t)chunk * row_bytes);
    float *work = pooled ? NULL : malloc((size_t)omp_get_max_threads() * 3 * (size_t)n * sizeof *work);
    int rc = 0;
    if (!buf || (!pooled && !work)) rc = nb_errf(err, errlen, NB_ENOMEM, "out of memory for a %lld-value row", (long long)n);
    for (int64_t r0 = 0; !rc && r0 < rows; r0 += chunk) {
        int64_t nr = rows - r0 < chunk ? rows - r0 : chunk;
        rc = pooled ? conv_pool_rows(pools, p, t, r0, nr, buf, err, errlen) : convert_rows(p, t, r0, nr, buf, work, err, errlen);
        if (rc) break;
        if (interrupted) rc = nb_errf(err, errlen, NB_EIO, "interrupted");
        else if (gguf_w_write_data(w, buf, (size_t)nr * row_bytes))
            rc = nb_errf(err, errlen, NB_EIO, "%s", gguf_writer_error(w));
        if (progress && rows > chunk) fprintf(stderr, "\r    %5.1f%%", 100.0 * (double)(r0 + nr) / (double)rows);
    }
    if (progress && rows > chunk) fprintf(stderr, "\r");
    free(buf);
    free(work);
    return rc;
}

double conv_plan_bytes(const struct conv_plan *p)
{
    double total = 0;
    for (int i = 0; i < p->n; i++) {
        const struct conv_tensor *t = &p->t[i];
        total += (double)quant_row_size(t->type, t->ne[0]) * (double)(t->ne[1] * t->ne[2] * t->ne[3]);
    }
    return total;
}

int conv_shard_path(const char *out, int s, int n, char *path, size_t len)
{
    size_t l = strlen(out);
    if (l > 5 && !strcmp(out + l - 5, ".gguf")) l -= 5;
    int k = snprintf(path, len, "%.*s-%05d-of-%05d.gguf", (int)l, out, s + 1, n);
    return k > 0 && (size_t)k < len ? 0 : NB_EINVAL;
}

/* The files a plan is written as: the main file (or shard 1), the n-gram
 * table's shard, the MTP file. */
enum part { PART_MAIN, PART_PLE, PART_MTP, PART_COUNT };

static bool is_mtp_tensor(const struct conv_plan *p, const char *name)
{
    char prefix[32];
    int n = snprintf(prefix, sizeof prefix, "blk.%lld.", (long long)p->cfg.n_layers);
    return p->mtp && strncmp(name, prefix, (size_t)n) == 0;
}

static enum part part_of(const struct conv_plan *p, const struct conv_write_opts *o, const struct conv_tensor *t)
{
    if (o->mtp_out && is_mtp_tensor(p, t->name)) return PART_MTP;
    if (o->split_ple && t->role == ROLE_PLE_TABLE) return PART_PLE;
    return PART_MAIN;
}

/* Progress across the parts. */
struct write_progress {
    double t0, total, done;
    int i, n;
};

/* One file of the plan: its keys (the split keys for a shard of the set),
 * its tensors' descriptors, then their data. */
static int write_part(const struct conv_plan *p, const struct conv_write_opts *o, enum part part, const char *path,
                      int split_tensors, struct conv_pools *pools, struct write_progress *wp, char *err, size_t errlen)
{
    gguf_writer *w = NULL;
    int rc;
    bool progress = !o->quiet && isatty(STDERR_FILENO), split = o->split_ple && part != PART_MTP;
    if ((rc = gguf_writer_open(path, &w, err, errlen))) return rc;
    if (part != PART_PLE && (rc = write_keys(w, p, o->mix, o->name, o->description))) {
        snprintf(err, errlen, "%s", gguf_writer_error(w));
        goto done;
    }
    struct stat sb;
    char tokjson[4200];
    if (o->tok_dir) snprintf(tokjson, sizeof tokjson, "%s/tokenizer.json", o->tok_dir);
    if (part == PART_MAIN && o->tok_dir && stat(tokjson, &sb) == 0) {
        if ((rc = tok_hf_write_gguf_keys(w, o->tok_dir, "qwen35", err, errlen))) goto done;
    } else if (part == PART_MAIN && (gguf_w_set_str(w, "tokenizer.ggml.model", "none") < 0 ||
                                     gguf_w_set_u32(w, "qwen4exp.vocab_size", (uint32_t)p->cfg.vocab_size) < 0)) {
        /* No tokenizer: ids only.  llama.cpp refuses a file without tokenizer.ggml.model; "none" with
         * the vocabulary size gives it V id-only tokens.  Nebula reads a tokenizer only where
         * tokenizer.ggml.tokens is present, and vocab_size equals token_embd's rows either way. */
        rc = nb_errf(err, errlen, NB_EFORMAT, "%s", gguf_writer_error(w));
        goto done;
    }
    if (split && (gguf_w_set_u16(w, "split.no", part == PART_MAIN ? 0 : 1) || gguf_w_set_u16(w, "split.count", 2) ||
                  gguf_w_set_i32(w, "split.tensors.count", split_tensors))) {
        rc = nb_errf(err, errlen, NB_EFORMAT, "%s", gguf_writer_error(w));
        goto done;
    }
    for (int i = 0; i < p->n; i++) {
        const struct conv_tensor *t = &p->t[i];
        if (part_of(p, o, t) != part) continue;
        if (gguf_w_add_tensor(w, t->name, t->type, t->n_dims, t->ne) < 0) {
            rc = nb_errf(err, errlen, NB_EFORMAT, "%s", gguf_writer_error(w));
            goto done;
        }
    }
    if (gguf_w_write_header(w) < 0) {
        rc = nb_errf(err, errlen, NB_EIO, "%s", gguf_writer_error(w));
        goto done;
    }
    for (int i = 0; i < p->n; i++) {
        const struct conv_tensor *t = &p->t[i];
        if (part_of(p, o, t) != part) continue;
        double bytes = (double)quant_row_size(t->type, t->ne[0]) * (double)(t->ne[1] * t->ne[2] * t->ne[3]);
        char shape[64], size[32], eta[48] = "";
        snprintf(shape, sizeof shape, "%lld", (long long)t->ne[0]);
        for (int d = 1; d < t->n_dims; d++) snprintf(shape + strlen(shape), sizeof shape - strlen(shape), " x %lld", (long long)t->ne[d]);
        fmt_bytes(bytes, size, sizeof size);
        double dt = nb_now_s() - wp->t0;
        if (wp->done > 0 && dt > 2) snprintf(eta, sizeof eta, ", %.0f s left", dt * (wp->total - wp->done) / wp->done);
        if (!o->quiet && !o->sparse)
            fprintf(stderr, "[%4d/%4d] %-40s %-7s %-22s %-10s (%3.0f%% done%s)\n", ++wp->i, wp->n, t->name,
                    quant_type_name(t->type), shape, size, 100.0 * wp->done / wp->total, eta);
        if (o->sparse) {
            if (gguf_w_skip_data(w, (size_t)bytes) < 0) {
                rc = nb_errf(err, errlen, NB_EIO, "%s", gguf_writer_error(w));
                goto done;
            }
        } else if ((rc = write_tensor(w, p, pools, t, progress, err, errlen))) {
            goto done;
        }
        wp->done += bytes;
    }
    rc = gguf_writer_finish(w); /* the writer is still ours: freed below (a failed finish's .tmp removed) */
    if (rc) snprintf(err, errlen, "%s", gguf_writer_error(w));
done:
    gguf_writer_free(w); /* removes the .tmp unless finished */
    return rc;
}

int conv_write_gguf(const struct conv_plan *p, const char *out, const struct conv_write_opts *o, char *err, size_t errlen)
{
    struct conv_pools *pools = NULL;
    int rc = 0, n_part[PART_COUNT] = {0};
    struct conv_write_opts opts = *o;
    if (!p->mtp) opts.mtp_out = NULL; /* nothing to put there */
    char paths[PART_COUNT][4200];
    for (int i = 0; i < p->n; i++) n_part[part_of(p, &opts, &p->t[i])]++;
    if (opts.split_ple && n_part[PART_PLE] == 0) opts.split_ple = false; /* no table: one file */
    if (opts.split_ple) {
        if (conv_shard_path(out, 0, 2, paths[PART_MAIN], sizeof paths[0]) || conv_shard_path(out, 1, 2, paths[PART_PLE], sizeof paths[0]))
            return nb_errf(err, errlen, NB_EINVAL, "%s: path too long", out);
    } else {
        snprintf(paths[PART_MAIN], sizeof paths[0], "%s", out);
    }
    if (opts.mtp_out) snprintf(paths[PART_MTP], sizeof paths[0], "%s", opts.mtp_out);
    if (p->synth.on && !p->synth.exact_rows && !o->sparse && !(pools = conv_pools_new())) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    struct write_progress wp = {.t0 = nb_now_s(), .total = conv_plan_bytes(p), .n = p->n};
    int written = 0;
    for (int part = 0; part < PART_COUNT && !rc; part++) {
        if (part == PART_PLE && !opts.split_ple) continue;
        if (part == PART_MTP && !opts.mtp_out) continue;
        rc = write_part(p, &opts, (enum part)part, paths[part], n_part[PART_MAIN] + n_part[PART_PLE], pools, &wp, err, errlen);
        if (!rc) written |= 1 << part;
    }
    if (rc) /* a set is written whole or not at all */
        for (int part = 0; part < PART_COUNT; part++)
            if (written & (1 << part)) unlink(paths[part]);
    if (!rc && !o->quiet) {
        char size[32];
        fmt_bytes(wp.total, size, sizeof size);
        double dt = nb_now_s() - wp.t0;
        fprintf(stderr, "%s: wrote %s%s%s%s (%s of tensor data) in %.1f s, %.2f GB/s\n", o->prog, paths[PART_MAIN],
                opts.split_ple ? " + " : "", opts.split_ple ? paths[PART_PLE] : "", opts.mtp_out ? " + MTP file" : "", size,
                dt, dt > 0 ? wp.total / dt / 1e9 : 0.0);
    }
    conv_pools_free(pools);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    return rc;
}
