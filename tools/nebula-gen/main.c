/* nebula-gen — a synthetic full-width Qwen3.8-Flash-Next GGUF for speed work.
 *
 * The friendly front end over nebula-convert's synthetic machinery (the one
 * plan of tools/nebula-convert/plan.c, the one writer of write.c, the quant
 * mixes of rows.c): the released shapes from conf/, a chosen number of
 * layers, a published-like quant mix, and a router skew calibrated so that
 * expert popularity is as concentrated as the real model's (the VRAM hit rate
 * depends on it; MODEL.md, last section).  Random weights at the real shapes
 * cost the real bytes and FLOPs, so decode speed is measurable without the
 * 100 GB download.  The large tensors are built from pools of quantized rows
 * (tools/nebula-convert/pool.c), so writing is bound by the disk, not by the
 * quantizers.  Before writing it says how big the file will be and refuses
 * when the disk cannot hold it. */
#include "core/util/err.h"
#include "core/util/opts.h"
#include "tools/nebula-convert/convert.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#define DEFAULT_CONFIG "conf/qwen3.8-flash-next.config.json"
#define DEFAULT_MIX "q4_k_m"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: nebula-gen OUT.gguf [--layers N] [--mix NAME] [--skew X] [--ngram-base B] [options]\n"
            "\n"
            "Writes a synthetic Qwen3.8-Flash-Next model: every tensor at the released shapes (hidden 2560,\n"
            "512 experts, top-10, GDN/QSA layers, hyper-connections, PLE) filled with seeded random values,\n"
            "quantized with a published-like mix, the router rows scaled so that expert popularity is\n"
            "skewed like a real model's.  Same bytes and FLOPs per token as the real model.\n"
            "\n"
            "options:\n"
            "  --layers N       the first N of the config's layers (default: all; the file grows ~1.5 GB\n"
            "                   per layer with q4_k_m)\n"
            "  --mix NAME       quant mix (default " DEFAULT_MIX "); see below\n"
            "  --skew X         router skew: log-normal spread of the router row scales (default " CONV_SKEW_DEFAULT_STR ",\n"
            "                   calibrated so the hottest 16.7%% of a layer's experts take ~65%% of its routed\n"
            "                   selections; 0 = no skew).  Measure with nebula hotlist + tools/bench/hotlist-curve.py\n"
            "  --topics T       routing that drifts with the context (issue 15's adaptive cache; T <= 64): token v\n"
            "                   belongs to topic v mod T, whose direction its embedding row carries, and in every\n"
            "                   MoE layer a share of the experts favour each topic (default 0: fixed popularity)\n"
            "  --topic-embed A  the topic direction's size in an embedding row, against its own 1 (default 1)\n"
            "  --topic-router B a favoured expert's router logit gain, per unit of the hidden state's share\n"
            "                   of the topic direction (default 2.5)\n"
            "  --topic-share F  the share of a layer's experts that favour each topic (default 0.3; with --skew 0.1 and\n"
            "                   16 topics a static placement of 89 of 512 experts a layer gets ~50 %% of\n"
            "                   the selections, an adaptive cache ~65-75 %%: docs/BENCHMARKS.md)\n"
            "                   Measure with nebula hotlist --routes + tools/bench/cache-sim.py\n"
            "  --ngram-base B   n-gram (PLE) table heads start at B (default: the config's\n"
            "                   ngram_vocab_size_base; the released 20000000 makes a 29 GB table in iq4_nl)\n"
            "  --seed S         seed of the random values (default 1)\n"
            "  --config FILE    a Hugging Face config.json to take shapes from (default " DEFAULT_CONFIG ")\n"
            "  --no-mtp         leave out the MTP draft block\n"
            "  --mtp-out FILE   write the MTP block as its own GGUF, FILE (as Unsloth ships MTP/mtp-*.gguf); the\n"
            "                   main file keeps block_count L+1 and nextn_predict_layers 1 without its tensors\n"
            "  --split          a two-file split set, the n-gram table alone in the second (as ISTA-DASLab\n"
            "                   ships it): OUT.gguf becomes OUT-00001-of-00002.gguf and OUT-00002-of-00002.gguf\n"
            "  --name NAME      general.name (default nebula-synthetic-<mix>)\n"
            "  --threads N      quantization threads (default: all cores; the bytes do not depend on it)\n"
            "  --exact-rows     draw and quantize every row (slow, ~5 MB/s per core) instead of building the\n"
            "                   large tensors from pools of quantized rows (same statistics, GB/s)\n"
            "  --force          write even if the free disk space looks too small\n"
            "  --sparse         write the header and layout only: the tensors' bytes are a hole of the file,\n"
            "                   which has the full size but takes no disk (for nebula-prepare --profile-table\n"
            "                   on the published shapes; the weights read as zeros)\n"
            "  --dry-run        write nothing: print the model's bytes by role as one JSON object\n"
            "                   (what the benchmarks scale VRAM budgets and rooflines with)\n"
            "  -q, --quiet      no progress output\n"
            "  -h, --help       this text\n"
            "\n"
            "mixes (norms, routers, conv kernels and 1-D tensors are always f32; a row that does not fit a\n"
            "type's block falls back: q4_K → q5_0, q5_K → q5_1, q6_K → q8_0, so the 640-wide expert down\n"
            "rows never get a K-quant, as in published files):\n");
    for (int i = 0; i < conv_n_mixes; i++) fprintf(f, "  %-12s %s\n", conv_mixes[i].name, conv_mixes[i].about);
    fprintf(f, "\nThe output is written to OUT.gguf.tmp and renamed when complete.\n");
}

static int parse_num(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "nebula-gen: %s wants a number in [%g, %g], got '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static void fmt_gib(double b, char *buf, size_t len) { snprintf(buf, len, "%.2f GiB", b / (1024.0 * 1024 * 1024)); }

/* Free bytes on the file system that will hold `out`. */
static double free_bytes_for(const char *out)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", out);
    struct statvfs v;
    if (statvfs(dirname(dir), &v)) return -1;
    return (double)v.f_bavail * (double)v.f_frsize;
}

/* Bytes of one tensor's data. */
static double tensor_bytes(const struct conv_tensor *t)
{
    return (double)quant_row_size(t->type, t->ne[0]) * (double)(t->ne[1] * t->ne[2] * t->ne[3]);
}

/* --dry-run: the byte budget a benchmark needs, without writing.  "dense"
 * is what nebula-prepare calls dense (all but routed experts and the n-gram
 * table); a token reads all of it but token_embd, of which it reads one row. */
static void dry_run_json(const struct conv_plan *p, const struct conv_mix *mix, double skew)
{
    double experts = 0, ple = 0, embd = 0, total = conv_plan_bytes(p), expert_rows = 0, params = 0, expert_params = 0;
    for (int i = 0; i < p->n; i++) {
        const struct conv_tensor *t = &p->t[i];
        double n = (double)t->ne[0] * (double)(t->ne[1] * t->ne[2] * t->ne[3]);
        params += n;
        if (t->role == ROLE_EXPERT_GATEUP || t->role == ROLE_EXPERT_DOWN) expert_params += n;
        if (t->role == ROLE_EXPERT_GATEUP || t->role == ROLE_EXPERT_DOWN) experts += tensor_bytes(t), expert_rows += (double)t->ne[2];
        else if (t->role == ROLE_PLE_TABLE) ple += tensor_bytes(t);
        else if (!strcmp(t->name, "token_embd.weight")) embd = tensor_bytes(t);
    }
    const struct hf_config *f = &p->cfg;
    int64_t moe_layers = f->n_layers + (p->mtp ? 1 : 0);
    /* expert_rows = 3 matrices × E per MoE layer */
    printf("{\"layers\": %lld, \"mtp\": %s, \"hidden\": %lld, \"vocab\": %lld, \"experts\": %lld, \"experts_used\": %lld, \"mix\": \"%s\", "
           "\"skew\": %g, \"total_bytes\": %.0f, \"dense_bytes\": %.0f, \"expert_bytes\": %.0f, \"ple_table_bytes\": %.0f, "
           "\"token_embd_bytes\": %.0f, \"token_embd_row_bytes\": %.0f, \"bytes_per_expert\": %.0f, \"params\": %.0f, "
           "\"bpw\": %.3f, \"expert_bpw\": %.3f}\n",
           (long long)f->n_layers, p->mtp ? "true" : "false", (long long)f->hidden_size, (long long)f->vocab_size,
           (long long)f->n_experts,
           (long long)f->n_experts_used, mix->name, skew, total, total - experts - ple, experts, ple, embd,
           embd / (double)f->vocab_size, moe_layers && expert_rows ? experts / (expert_rows / 3) : 0, params,
           params ? 8 * total / params : 0, expert_params ? 8 * experts / expert_params : 0);
}

/* What the model holds, by role: printed before the long write. */
static void summary(const struct conv_plan *p, const struct conv_mix *mix, double skew)
{
    static const char *roles[ROLE_COUNT] = {"norms/routers/conv (f32)", "dense", "experts gate/up", "experts down",
                                            "indexer", "n-gram table"};
    double bytes[ROLE_COUNT] = {0}, total = conv_plan_bytes(p);
    for (int i = 0; i < p->n; i++) {
        const struct conv_tensor *t = &p->t[i];
        bytes[t->role] += tensor_bytes(t);
    }
    const struct hf_config *f = &p->cfg;
    char b[32];
    fmt_gib(total, b, sizeof b);
    fprintf(stderr, "nebula-gen: %lld layers%s, hidden %lld, %lld experts (top-%lld), mix %s, skew %g: %s\n",
            (long long)f->n_layers, p->mtp ? " + MTP" : "", (long long)f->hidden_size, (long long)f->n_experts,
            (long long)f->n_experts_used, mix->name, skew, b);
    for (int r = 0; r < ROLE_COUNT; r++) {
        if (bytes[r] == 0) continue;
        fmt_gib(bytes[r], b, sizeof b);
        fprintf(stderr, "  %-26s %s\n", roles[r], b);
    }
}

int main(int argc, char **argv)
{
    const char *config = DEFAULT_CONFIG, *name = NULL, *mtp_out = NULL;
    bool split = false;
    const struct conv_mix *mix = conv_mix_find(DEFAULT_MIX);
    bool want_mtp = true, quiet = false, force = false, dry_run = false, sparse = false;
    struct conv_synth synth = {.on = true, .seed = 1, .router_skew = CONV_SKEW_DEFAULT, .topic_embed = 1, .topic_router = 2.5,
                               .topic_share = 0.3};
    double layers = 0, ngram_base = 0, v;
    static const struct option opts[] = {
        CONV_COMMON_OPTS, NB_OPT_ARG("mix", 'x'), NB_OPT_ARG("skew", 'k'), NB_OPT_ARG("config", 'c'),
        NB_OPT_FLAG("force", 'F'), NB_OPT_FLAG("dry-run", 'D'), NB_OPT_FLAG("sparse", 'H'), NB_OPT_ARG("topics", 't'),
        NB_OPT_ARG("topic-embed", 'e'), NB_OPT_ARG("topic-router", 'r'), NB_OPT_ARG("topic-share", 'f'), NB_OPT_END};
    int o;
    while ((o = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
        switch (o) {
        case 'L':
            if (parse_num("--layers", optarg, 1, HF_MAX_LAYERS, &layers) || layers != floor(layers)) return 2;
            break;
        case 'x':
            if (!(mix = conv_mix_parse("nebula-gen", "--mix", optarg))) return 2;
            break;
        case 'k':
            if (parse_num("--skew", optarg, 0, 10, &synth.router_skew)) return 2;
            break;
        case 'B':
            if (parse_num("--ngram-base", optarg, 2, 1e12, &ngram_base) || ngram_base != floor(ngram_base)) return 2;
            break;
        case 's': {
            char *end;
            errno = 0;
            synth.seed = strtoull(optarg, &end, 0);
            if (errno || end == optarg || *end || optarg[0] == '-') {
                fprintf(stderr, "nebula-gen: --seed wants a non-negative integer, got '%s'\n", optarg);
                return 2;
            }
            break;
        }
        case 't':
            if (parse_num("--topics", optarg, 0, CONV_MAX_TOPICS, &v) || v != floor(v)) return 2;
            synth.topics = (int)v;
            break;
        case 'e':
            if (parse_num("--topic-embed", optarg, 0, 100, &synth.topic_embed)) return 2;
            break;
        case 'r':
            if (parse_num("--topic-router", optarg, 0, 1000, &synth.topic_router)) return 2;
            break;
        case 'f':
            if (parse_num("--topic-share", optarg, 0, 1, &synth.topic_share)) return 2;
            break;
        case 'c': config = optarg; break;
        case 'M': want_mtp = false; break;
        case 'n': name = optarg; break;
        case 'j':
            if (parse_num("--threads", optarg, 1, 4096, &v) || v != floor(v)) return 2;
            omp_set_num_threads((int)v);
            break;
        case 'F': force = true; break;
        case 'D': dry_run = true; break;
        case 'E': synth.exact_rows = true; break;
        case 'O': mtp_out = optarg; break;
        case 'P': split = true; break;
        case 'H': sparse = true; break;
        case 'q': quiet = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (argc - optind != (dry_run ? 0 : 1)) {
        fprintf(stderr, "nebula-gen: want exactly one OUT.gguf (nebula-gen --help)\n");
        return 2;
    }
    const char *out = dry_run ? NULL : argv[optind];
    char err[1024] = "", defname[96];
    if (!name) {
        snprintf(defname, sizeof defname, "nebula-synthetic-%s", mix->name);
        name = defname;
    }
    FILE *cf = fopen(config, "r");
    if (!cf) {
        fprintf(stderr, "nebula-gen: cannot read the config %s: %s%s\n", config, strerror(errno),
                config == (const char *)DEFAULT_CONFIG ? " (run from the repository root, or pass --config FILE)" : "");
        return 2;
    }
    fclose(cf);

    struct conv_plan plan = {0};
    int rc = conv_synth_plan(&plan, config, (int64_t)layers, (int64_t)ngram_base, &synth, want_mtp, err, sizeof err);
    if (rc) {
        fprintf(stderr, "nebula-gen: %s: %s\n", config, err[0] ? err : nb_strerror(rc));
        return 1;
    }
    conv_choose_types(&plan, mix);
    if (dry_run) {
        dry_run_json(&plan, mix, synth.router_skew);
        conv_plan_free(&plan);
        return 0;
    }
    if (!quiet) summary(&plan, mix, synth.router_skew);
    double need = conv_plan_bytes(&plan), avail = free_bytes_for(out);
    if (avail >= 0 && need * 1.01 > avail && !force && !sparse) {
        char a[32], b[32];
        fmt_gib(need, b, sizeof b);
        fmt_gib(avail, a, sizeof a);
        fprintf(stderr, "nebula-gen: %s needs %s but its disk has %s free (fewer --layers, a smaller --ngram-base, "
                        "or --force)\n", out, b, a);
        conv_plan_free(&plan);
        return 1;
    }
    if (mtp_out && !plan.mtp) {
        fprintf(stderr, "nebula-gen: --mtp-out: %s\n", want_mtp ? "the config has no MTP block (mtp_num_hidden_layers)"
                                                                : "and --no-mtp: give one");
        conv_plan_free(&plan);
        return 2;
    }
    struct conv_write_opts wo = {.prog = "nebula-gen", .name = name, .tok_dir = NULL, .mix = mix, .quiet = quiet,
                                 .split_ple = split, .mtp_out = mtp_out, .sparse = sparse};
    rc = conv_write_gguf(&plan, out, &wo, err, sizeof err);
    conv_plan_free(&plan);
    if (rc) {
        fprintf(stderr, "nebula-gen: %s\n", err[0] ? err : nb_strerror(rc));
        return 1;
    }
    return 0;
}
