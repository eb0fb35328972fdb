/* logits.c — `nebula logits` (full-sequence logits, a parity diagnostic) and
 * `nebula tokenize`. */
#include "core/util/err.h"
#include "tools/nebula/cli.h"
#include "core/util/clock.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Options shared by the two commands. */
static int parse_common(int c, struct cli_common *o, bool *help)
{
    long long v;
    switch (c) {
    case 'm': o->model_path = optarg; return CLI_OK;
    case 'X': o->mtp_path = optarg; return CLI_OK;
    case 'b': if (cli_parse_int("--chunk", optarg, 1, 1 << 20, &v)) return CLI_USAGE; o->chunk = (int)v; return CLI_OK;
    case 'j': if (cli_parse_int("--threads", optarg, 1, 4096, &v)) return CLI_USAGE; o->threads = (int)v; return CLI_OK;
    case 'c': if (cli_parse_int("--ctx", optarg, 1, INT64_MAX, &v)) return CLI_USAGE; o->ctx = v; return CLI_OK;
    case 'h': *help = true; return CLI_OK;
    default: return CLI_USAGE;
    }
}

#define COMMON_OPTS                                                                                                \
    {"model", required_argument, 0, 'm'}, {"chunk", required_argument, 0, 'b'}, {"threads", required_argument, 0, 'j'}, \
        {"ctx", required_argument, 0, 'c'}, {"help", no_argument, 0, 'h'}, {"mtp", required_argument, 0, 'X'}

struct sink {
    FILE *f;
    const char *path;
};

static int write_rows(void *ctx, const float *logits, int n_rows, int64_t n_vocab)
{
    struct sink *s = ctx;
    if (fwrite(logits, sizeof *logits, (size_t)n_rows * (size_t)n_vocab, s->f) != (size_t)n_rows * (size_t)n_vocab) {
        fprintf(stderr, "nebula: writing %s: %s\n", s->path, strerror(errno));
        return -1;
    }
    return 0;
}

int cmd_logits(int argc, char **argv)
{
    static const struct option opts[] = {COMMON_OPTS, {"tokens-file", required_argument, 0, 'f'},
                                         {"out", required_argument, 0, 'o'}, {"backend", required_argument, 0, 'B'},
                                         {"layers", required_argument, 0, 'L'}, {0, 0, 0, 0}};
    struct cli_common o = {0};
    const char *tokens = NULL, *out = NULL;
    bool help = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:o:h", opts, NULL)) != -1) {
        if (c == 'f') tokens = optarg;
        else if (c == 'o') out = optarg;
        else if (c == 'L') {
            long long v;
            if (cli_parse_int("--layers", optarg, 1, 1 << 20, &v)) return CLI_USAGE;
            o.layers = (int)v;
        }
        else if (c == 'B') {
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
                fprintf(stderr, "nebula: --backend takes cpu or cuda, got '%s'\n", optarg);
                return CLI_USAGE;
            }
            o.backend = optarg;
        } else if (parse_common(c, &o, &help)) return CLI_USAGE;
    }
    if (help || !tokens || !out || optind < argc) {
        fprintf(help ? stdout : stderr,
                "usage: nebula logits -m MODEL --tokens-file F --out OUT.f32 [--chunk N] [--threads N] [--ctx N] [--mtp FILE]\n"
                "                     [--backend cpu|cuda] [--layers L]\n"
                "Writes the logits of every position, float32 little-endian, row-major [tokens x vocab],\n"
                "computed by the CPU reference (default) or the CUDA backend (the whole model on the GPU).\n"
                "--layers L: only the first L trunk layers, then the head mixer and the LM head (no MTP\n"
                "block; the n-gram layer only if among them): only those layers' weights are uploaded (cuda)\n"
                "or read (cpu), so a model too large for the GPU can be compared on both backends.\n");
        return help ? CLI_OK : CLI_USAGE;
    }
    struct cli_model cm;
    int rc = cli_open(&o, &cm);
    if (rc) return rc;
    int32_t *ids = NULL;
    size_t n = 0;
    char tmp[4096];
    struct sink s = {NULL, out};
    if ((rc = cli_read_tokens(tokens, cm.m->hp.n_vocab, &ids, &n))) goto done;
    if ((int64_t)n > cli_ctx(&o, &cm)) {
        fprintf(stderr, "nebula: %zu tokens exceed the context of %lld\n", n, (long long)cli_ctx(&o, &cm));
        rc = CLI_USAGE;
        goto done;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    if (!(s.f = fopen(tmp, "wb"))) {
        fprintf(stderr, "nebula: cannot write %s: %s\n", tmp, strerror(errno));
        rc = CLI_USAGE;
        goto done;
    }
    double t0 = nb_now_s();
    rc = cli_prefill(&o, &cm, ids, n, write_rows, &s, NULL, NULL);
    if (fclose(s.f) || rc) {
        remove(tmp);
        rc = rc ? rc : CLI_FAIL;
        goto done;
    }
    if (rename(tmp, out)) {
        fprintf(stderr, "nebula: cannot rename %s to %s: %s\n", tmp, out, strerror(errno));
        rc = CLI_FAIL;
        goto done;
    }
    fprintf(stderr, "nebula: %zu × %lld logits → %s in %.2f s\n", n, (long long)cm.m->hp.n_vocab, out, nb_now_s() - t0);
done:
    free(ids);
    cli_close(&cm);
    return rc;
}

int cmd_tokenize(int argc, char **argv)
{
    static const struct option opts[] = {COMMON_OPTS, {0, 0, 0, 0}};
    struct cli_common o = {0};
    bool help = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1)
        if (parse_common(c, &o, &help)) return CLI_USAGE;
    if (help || optind != argc - 1) {
        fprintf(help ? stdout : stderr, "usage: nebula tokenize -m MODEL TEXT\nPrints the ids of TEXT (special tokens recognised).\n");
        return help ? CLI_OK : CLI_USAGE;
    }
    struct cli_model cm;
    int rc = cli_open(&o, &cm);
    if (rc) return rc;
    int32_t *ids = NULL;
    size_t n = 0;
    if (!(rc = cli_encode(&cm, argv[optind], &ids, &n))) {
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    }
    free(ids);
    cli_close(&cm);
    return rc;
}
