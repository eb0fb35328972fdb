/* nebula-convert — Hugging Face Qwen3.8-Flash-Next checkpoint → GGUF in
 * llama.cpp's `qwen4exp` layout (docs/CONVERSION.md).
 *
 * The plan (plan.c) lists every output tensor with its source rows; write.c
 * streams them into the GGUF.  This file is the command line. */
#include "core/safetensors/safetensors.h"
#include "core/util/err.h"
#include "tools/nebula-convert/convert.h"

#include <getopt.h>
#include <libgen.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
            "  --type T       f32 | f16 | bf16 | q8_0 | mix | q4_k_m | q5_k_m | iq4_nl | q4_k_bf16, or one\n"
            "                 ggml type for every matrix: q4_1 | q2_K | q3_K | iq2_xxs-all | iq2_xs-all | iq2_s |\n"
            "                 iq3_xxs | iq3_s-all | iq1_s | iq1_m | tq1_0 | tq2_0 | mxfp4 | nvfp4 | q1_0 | q2_0-all,\n"
            "                 or a published mix: ud-iq1_s | iq2_xxs | iq2_xs | q2_0 | iq3_s | ds4-iq2_xxs |\n"
            "                 ud-q4_k_xl\n"
            "                 (default bf16); norms, routers, conv kernels and 1-D tensors are always\n"
            "                 f32; mix = experts gate/up q4_K, down q5_1, dense q8_0, indexer bf16,\n"
            "                 n-gram table iq4_nl (nebula-gen --help lists every mix; rows that don't\n"
            "                 fit a block size fall back)\n"
            "  --no-mtp       leave out the MTP draft block even if the checkpoint has one\n"
            "  --mtp-out FILE write the MTP block as its own GGUF (Unsloth's layout; docs/CONVERSION.md §3.8)\n"
            "  --split        OUT-00001-of-00002.gguf and OUT-00002-of-00002.gguf, the n-gram table alone in\n"
            "                 the second (ISTA-DASLab's layout)\n"
            "  --name NAME    general.name (default: the checkpoint folder's name)\n"
            "  --description TEXT  general.description: what the model is (the chat page and /api/status\n"
            "                 show it when the model is served as the demo)\n"
            "  --threads N    conversion threads (default: all cores)\n"
            "  --layers N     synthetic: keep the first N layers of the config\n"
            "  --seed S       synthetic: seed of the random values (default 1)\n"
            "  --router-skew X  synthetic: spread of router row scales, skews expert popularity\n"
            "                 (default " CONV_SKEW_DEFAULT_STR ", calibrated: docs/BENCHMARKS.md; nebula-gen is the friendlier front end)\n"
            "  --ngram-base B synthetic: n-gram head sizes start at B (the released 20000000 makes a\n"
            "                 320M-row table, 29 GB in iq4_nl)\n"
            "  --exact-rows   synthetic: draw and quantize every row (slow) instead of building the\n"
            "                 large tensors from pools of quantized rows (docs/CONVERSION.md)\n"
            "  -q, --quiet    no progress output\n"
            "  -h, --help     this text\n"
            "\n"
            "The output is written to OUT.gguf.tmp and renamed when complete.\n");
}

int main(int argc, char **argv)
{
    const struct conv_mix *mix = conv_mix_find("bf16");
    bool want_mtp = true, quiet = false;
    const char *name = NULL, *mtp_out = NULL, *description = NULL;
    bool split = false;
    struct conv_synth synth = {.seed = 1, .router_skew = CONV_SKEW_DEFAULT};
    long long layers = 0, ngram_base = 0;
    static const struct option opts[] = {{"type", required_argument, 0, 't'}, {"no-mtp", no_argument, 0, 'M'},
                                         {"synthetic", no_argument, 0, 'S'}, {"layers", required_argument, 0, 'L'},
                                         {"seed", required_argument, 0, 's'}, {"router-skew", required_argument, 0, 'k'},
                                         {"ngram-base", required_argument, 0, 'B'},
                                         {"name", required_argument, 0, 'n'}, {"description", required_argument, 0, 'D'},
                                         {"threads", required_argument, 0, 'j'},
                                         {"quiet", no_argument, 0, 'q'},     {"help", no_argument, 0, 'h'},
                                         {"exact-rows", no_argument, 0, 'E'},
                                         {"mtp-out", required_argument, 0, 'O'}, {"split", no_argument, 0, 'P'},
                                         {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "t:qhj:", opts, NULL)) != -1) {
        switch (o) {
        case 't':
            if (!(mix = conv_mix_parse("nebula-convert", "--type", optarg))) return 2;
            break;
        case 'M': want_mtp = false; break;
        case 'n': name = optarg; break;
        case 'D': description = optarg; break;
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
        case 'E': synth.exact_rows = true; break;
        case 'O': mtp_out = optarg; break;
        case 'P': split = true; break;
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
    struct hf_config cfg;
    st_set *st = NULL;
    struct conv_plan plan = {0};
    int rc;
    if (synth.on) {
        if ((rc = conv_synth_plan(&plan, dir, layers, ngram_base, &synth, want_mtp, err, sizeof err))) goto done;
        cfg = plan.cfg;
    } else if ((rc = hf_config_load(dir, &cfg, err, sizeof err)) || (rc = st_open(dir, &st, err, sizeof err)) ||
               (rc = conv_plan_build(&plan, st, NULL, &cfg, want_mtp, err, sizeof err))) {
        goto done;
    }
    conv_choose_types(&plan, mix);
    if (!quiet)
        fprintf(stderr, "nebula-convert: %s → %s: %d tensors, %lld layers%s, %s layout, %s\n", dir, out, plan.n,
                (long long)cfg.n_layers, plan.mtp ? " + MTP" : "", cfg.conditional_generation ? "ConditionalGeneration" : "CausalLM",
                synth.on ? "synthetic" : "converting");
    if (mtp_out && !plan.mtp) {
        rc = nb_errf(err, sizeof err, NB_EINVAL, "--mtp-out: %s has no MTP block%s", dir, want_mtp ? "" : " (--no-mtp)");
        goto done;
    }
    struct conv_write_opts wo = {.prog = "nebula-convert", .name = name, .description = description, .tok_dir = synth.on ? NULL : dir, .mix = mix,
                                 .quiet = quiet, .split_ple = split, .mtp_out = mtp_out};
    rc = conv_write_gguf(&plan, out, &wo, err, sizeof err);
done:
    conv_plan_free(&plan);
    if (st) st_close(st);
    if (rc) {
        fprintf(stderr, "nebula-convert: %s\n", err[0] ? err : nb_strerror(rc));
        return 1;
    }
    return 0;
}
