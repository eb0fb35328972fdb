/* nebula-convert — Hugging Face Qwen3.8-Flash-Next checkpoint → GGUF in
 * llama.cpp's `qwen4exp` layout (docs/CONVERSION.md).
 *
 * The plan (plan.c) lists every output tensor with its source rows; this file
 * writes the metadata, then streams the tensors row chunk by row chunk,
 * converting and quantizing rows in parallel (OpenMP) and writing them in
 * order.  Memory stays at one chunk (≤ 64 MiB) however large the model. */
#include "core/gguf/gguf.h"
#include "core/quant/quant.h"
#include "core/safetensors/safetensors.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/err.h"
#include "tools/nebula-convert/convert.h"

#include <getopt.h>
#include <libgen.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CHUNK_BYTES (64u << 20)

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { interrupted = sig; }

static void usage(FILE *f)
{
    fprintf(f,
            "usage: nebula-convert HF_DIR OUT.gguf [options]\n"
            "       nebula-convert --synthetic CONFIG.json OUT.gguf [--layers N] [--seed S] [--router-skew X] [options]\n"
            "\n"
            "Converts a Hugging Face Qwen3.8-Flash-Next checkpoint (Qwen4ExpForCausalLM or the released\n"
            "Qwen4ExpForConditionalGeneration; single or sharded safetensors; per-expert or fused experts)\n"
            "to a GGUF in llama.cpp's qwen4exp layout. The vision tower is skipped.\n"
            "\n"
            "With --synthetic, no checkpoint is read: every tensor config.json implies is filled with seeded\n"
            "random values at the same shapes and types (same bytes and FLOPs as a real model), for speed\n"
            "measurements without the download. conf/qwen3.8-flash-next.config.json has the released shapes.\n"
            "\n"
            "options:\n"
            "  --type T       f32 | f16 | bf16 | q8_0 | mix   (default bf16)\n"
            "                 norms, routers, conv kernels and 1-D tensors are always f32;\n"
            "                 mix = experts gate/up q4_K, down q5_1, dense q8_0, indexer bf16,\n"
            "                 n-gram table iq4_nl (rows that don't fit a block size fall back)\n"
            "  --no-mtp       leave out the MTP draft block even if the checkpoint has one\n"
            "  --name NAME    general.name (default: the checkpoint folder's name)\n"
            "  --threads N    conversion threads (default: all cores)\n"
            "  --layers N     synthetic: keep the first N layers of the config\n"
            "  --seed S       synthetic: seed of the random values (default 1)\n"
            "  --router-skew X  synthetic: spread of router row scales, skews expert popularity (default 1.0)\n"
            "  --ngram-base B synthetic: n-gram head sizes start at B (the released 20000000 makes a\n"
            "                 320M-row table, 29 GB in iq4_nl)\n"
            "  -q, --quiet    no progress output\n"
            "  -h, --help     this text\n"
            "\n"
            "The output is written to OUT.gguf.tmp and renamed when complete.\n");
}

static int parse_mode(const char *s, enum conv_mode *m)
{
    static const struct { const char *name; enum conv_mode mode; } modes[] = {
        {"f32", MODE_F32}, {"f16", MODE_F16}, {"bf16", MODE_BF16}, {"q8_0", MODE_Q8_0}, {"mix", MODE_MIX}};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
        if (strcasecmp(s, modes[i].name) == 0) {
            *m = modes[i].mode;
            return 0;
        }
    return -1;
}

static uint32_t file_type_of(enum conv_mode m)
{
    switch (m) { /* llama_ftype numbers */
    case MODE_F32: return 0;
    case MODE_F16: return 1;
    case MODE_Q8_0: return 7;
    case MODE_MIX: return 15; /* MOSTLY_Q4_K_M: experts q4_K */
    default: return 32;       /* MOSTLY_BF16 */
    }
}

/* Every qwen4exp.* key of docs/CONVERSION.md §3.1. */
static int write_keys(gguf_writer *w, const struct conv_plan *p, enum conv_mode mode, const char *name)
{
    const struct hf_config *f = &p->cfg;
    uint32_t n_blocks = (uint32_t)(f->n_layers + (p->mtp ? 1 : 0));
    int rc = 0;
#define K(call) if (!rc) rc = (call)
#define A "qwen4exp."
    K(gguf_w_set_str(w, "general.architecture", "qwen4exp"));
    K(gguf_w_set_str(w, "general.type", "model"));
    K(gguf_w_set_str(w, "general.name", name));
    K(gguf_w_set_u32(w, "general.file_type", file_type_of(mode)));
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

/* Converts and writes one tensor, chunk by chunk. */
static int write_tensor(gguf_writer *w, const struct conv_plan *p, const struct conv_tensor *t, bool progress, char *err,
                        size_t errlen)
{
    const struct quant_traits *tr = quant_traits_of(t->type);
    int64_t n = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    size_t row_bytes = quant_row_size(t->type, n);
    int64_t chunk = (int64_t)(CHUNK_BYTES / row_bytes);
    if (chunk < 1) chunk = 1;
    if (chunk > rows) chunk = rows;
    unsigned char *buf = malloc((size_t)chunk * row_bytes);
    int nthreads = omp_get_max_threads();
    float *work = malloc((size_t)nthreads * 3 * (size_t)n * sizeof *work);
    int rc = 0;
    if (!buf || !work) rc = nb_errf(err, errlen, NB_ENOMEM, "out of memory for a %lld-value row", (long long)n);
    for (int64_t r0 = 0; !rc && r0 < rows; r0 += chunk) {
        int64_t nr = rows - r0 < chunk ? rows - r0 : chunk;
        int failed = 0;
#pragma omp parallel for schedule(dynamic, 16)
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
        if (failed) rc = NB_EFORMAT;
        else if (interrupted) rc = nb_errf(err, errlen, NB_EIO, "interrupted");
        else if (gguf_w_write_data(w, buf, (size_t)nr * row_bytes))
            rc = nb_errf(err, errlen, NB_EIO, "%s", gguf_writer_error(w));
        if (progress && rows > chunk) fprintf(stderr, "\r    %5.1f%%", 100.0 * (double)(r0 + nr) / (double)rows);
    }
    if (progress && rows > chunk) fprintf(stderr, "\r");
    free(buf);
    free(work);
    return rc;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    enum conv_mode mode = MODE_BF16;
    bool want_mtp = true, quiet = false;
    const char *name = NULL;
    struct conv_synth synth = {.seed = 1, .router_skew = 1.0};
    long long layers = 0, ngram_base = 0;
    static const struct option opts[] = {{"type", required_argument, 0, 't'}, {"no-mtp", no_argument, 0, 'M'},
                                         {"synthetic", no_argument, 0, 'S'}, {"layers", required_argument, 0, 'L'},
                                         {"seed", required_argument, 0, 's'}, {"router-skew", required_argument, 0, 'k'},
                                         {"ngram-base", required_argument, 0, 'B'},
                                         {"name", required_argument, 0, 'n'}, {"threads", required_argument, 0, 'j'},
                                         {"quiet", no_argument, 0, 'q'},     {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "t:qhj:", opts, NULL)) != -1) {
        switch (o) {
        case 't':
            if (parse_mode(optarg, &mode)) {
                fprintf(stderr, "nebula-convert: unknown --type '%s' (f32, f16, bf16, q8_0, mix)\n", optarg);
                return 2;
            }
            break;
        case 'M': want_mtp = false; break;
        case 'n': name = optarg; break;
        case 'j': {
            int n = atoi(optarg);
            if (n < 1) {
                fprintf(stderr, "nebula-convert: --threads needs a positive number\n");
                return 2;
            }
            omp_set_num_threads(n);
            break;
        }
        case 'q': quiet = true; break;
        case 'S': synth.on = true; break;
        case 'L': layers = atoll(optarg); break;
        case 's': synth.seed = strtoull(optarg, NULL, 0); break;
        case 'k': synth.router_skew = atof(optarg); break;
        case 'B': ngram_base = atoll(optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (argc - optind != 2) {
        usage(stderr);
        return 2;
    }
    const char *dir = argv[optind], *out = argv[optind + 1];
    char err[1024] = "", dirbuf[4096];
    snprintf(dirbuf, sizeof dirbuf, "%s", dir);
    if (!name) name = synth.on ? "nebula-synthetic" : basename(dirbuf);
    if ((layers || ngram_base) && !synth.on) {
        fprintf(stderr, "nebula-convert: --layers and --ngram-base apply to --synthetic models only\n");
        return 2;
    }
    bool progress = !quiet && isatty(STDERR_FILENO);

    struct hf_config cfg;
    st_set *st = NULL;
    struct conv_plan plan = {0};
    gguf_writer *w = NULL;
    int rc;
    if (synth.on) {
        if ((rc = hf_config_load_file(dir, &cfg, err, sizeof err)) ||
            (layers && (rc = hf_config_truncate(&cfg, layers, err, sizeof err))) ||
            (ngram_base > 0 && !(cfg.ngram_vocab_base = ngram_base)) ||
            (rc = conv_plan_build(&plan, NULL, &synth, &cfg, want_mtp, err, sizeof err)))
            goto done;
    } else if ((rc = hf_config_load(dir, &cfg, err, sizeof err)) || (rc = st_open(dir, &st, err, sizeof err)) ||
               (rc = conv_plan_build(&plan, st, NULL, &cfg, want_mtp, err, sizeof err))) {
        goto done;
    }
    conv_choose_types(&plan, mode);

    if ((rc = gguf_writer_open(out, &w, err, sizeof err))) goto done;
    if ((rc = write_keys(w, &plan, mode, name))) {
        snprintf(err, sizeof err, "%s", gguf_writer_error(w));
        goto done;
    }
    struct stat sb;
    char tokjson[4200];
    snprintf(tokjson, sizeof tokjson, "%s/tokenizer.json", dir);
    if (!synth.on && stat(tokjson, &sb) == 0 && (rc = tok_hf_write_gguf_keys(w, dir, "qwen35", err, sizeof err))) goto done;
    for (int i = 0; i < plan.n; i++) {
        const struct conv_tensor *t = &plan.t[i];
        if (gguf_w_add_tensor(w, t->name, t->type, t->n_dims, t->ne) < 0) {
            rc = nb_errf(err, sizeof err, NB_EFORMAT, "%s", gguf_writer_error(w));
            goto done;
        }
    }
    if (gguf_w_write_header(w) < 0) {
        rc = nb_errf(err, sizeof err, NB_EIO, "%s", gguf_writer_error(w));
        goto done;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    if (!quiet)
        fprintf(stderr, "nebula-convert: %s → %s: %d tensors, %lld layers%s, %s layout, %s\n", dir, out, plan.n,
                (long long)cfg.n_layers, plan.mtp ? " + MTP" : "", cfg.conditional_generation ? "ConditionalGeneration" : "CausalLM",
                synth.on ? "synthetic" : "converting");
    double t0 = now_s(), total = 0;
    for (int i = 0; i < plan.n; i++) {
        const struct conv_tensor *t = &plan.t[i];
        double bytes = (double)quant_row_size(t->type, t->ne[0]) * (double)(t->ne[1] * t->ne[2] * t->ne[3]);
        char shape[64], size[32];
        snprintf(shape, sizeof shape, "%lld", (long long)t->ne[0]);
        for (int d = 1; d < t->n_dims; d++) snprintf(shape + strlen(shape), sizeof shape - strlen(shape), " x %lld", (long long)t->ne[d]);
        fmt_bytes(bytes, size, sizeof size);
        if (!quiet) fprintf(stderr, "[%4d/%4d] %-40s %-7s %-22s %s\n", i + 1, plan.n, t->name, quant_type_name(t->type), shape, size);
        if ((rc = write_tensor(w, &plan, t, progress, err, sizeof err))) goto done;
        total += bytes;
    }
    if ((rc = gguf_writer_finish(w))) {
        snprintf(err, sizeof err, "%s", gguf_writer_error(w));
        w = NULL;
        goto done;
    }
    w = NULL;
    if (!quiet) {
        char size[32];
        double dt = now_s() - t0;
        fmt_bytes(total, size, sizeof size);
        fprintf(stderr, "nebula-convert: wrote %s (%s of tensor data) in %.1f s\n", out, size, dt);
    }
done:
    if (w) gguf_writer_free(w); /* removes the unfinished .tmp */
    conv_plan_free(&plan);
    if (st) st_close(st);
    if (rc) {
        fprintf(stderr, "nebula-convert: %s\n", err[0] ? err : nb_strerror(rc));
        return 1;
    }
    return 0;
}
