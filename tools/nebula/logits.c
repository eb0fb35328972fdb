/* logits.c — `nebula logits` (full-sequence logits, a parity diagnostic) and
 * `nebula tokenize`. */
#include "core/util/err.h"
#include "tools/nebula/cli.h"
#include "core/util/clock.h"
#include "core/util/opts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* --mtp-out: the MTP block's logits for rows t = 0..n-2 (the trunk's wide state after
 * position t with token t+1, at position t+1: what a first draft step computes), written
 * like the trunk's, [n-1 x vocab].  One trunk pass for the wide states, then one MTP call. */
static int write_mtp(struct cli_model *cm, const int32_t *ids, size_t n, const char *path)
{
    const int64_t wide = model_wide(&cm->m->hp), V = cm->m->hp.n_vocab;
    if (n < 2) return CLI_OK;
    float *w = malloc(n * (size_t)wide * sizeof *w), *lg = malloc((n - 1) * (size_t)V * sizeof *lg);
    char err[1024] = "";
    int rc = w && lg ? CLI_OK : CLI_FAIL;
    gw_seq_reset(cm->seq);
    struct gw_eval_args a = {.tokens = ids, .n_tokens = (int)n, .wide_rows = GW_ROWS_ALL, .wide = w};
    struct gw_mtp_args m = {.tokens = ids + 1, .wide_in = w, .n_rows = (int)n - 1, .pos = 1, .logits = lg};
    if (rc == CLI_OK && (gw_eval(cm->seq, &a, err, sizeof err) || gw_mtp_eval(cm->seq, &m, err, sizeof err))) {
        fprintf(stderr, "nebula: --mtp-out: %s\n", err);
        rc = CLI_FAIL;
    }
    FILE *f = rc == CLI_OK ? fopen(path, "wb") : NULL;
    if (rc == CLI_OK && (!f || fwrite(lg, sizeof *lg, (n - 1) * (size_t)V, f) != (n - 1) * (size_t)V)) {
        fprintf(stderr, "nebula: cannot write %s: %s\n", path, strerror(errno));
        rc = CLI_FAIL;
    }
    if (f && fclose(f) && rc == CLI_OK) rc = CLI_FAIL;
    free(w);
    free(lg);
    return rc;
}

int cmd_logits(int argc, char **argv)
{
    static const struct option opts[] = {
        CLI_COMMON_OPTS, NB_OPT_ARG("tokens-file", 'f'), NB_OPT_ARG("out", 'o'), NB_OPT_ARG("backend", 'B'),
        NB_OPT_ARG("layers", 'L'), NB_OPT_ARG("mtp-out", 'M'), NB_OPT_END};
    struct cli_common o = {0};
    const char *tokens = NULL, *out = NULL, *mtp_out = NULL;
    bool help = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:o:h", opts, NULL)) != -1) {
        if (c == 'f') tokens = optarg;
        else if (c == 'o') out = optarg;
        else if (c == 'M') mtp_out = optarg;
        else if (c == 'L') {
            long long v;
            if (cli_parse_int("--layers", optarg, 1, 1 << 20, &v)) return CLI_USAGE;
            o.layers = (int)v;
        }
        else if (c == 'h') help = true;
        else if (cli_parse_common(c, optarg, &o)) return CLI_USAGE;
    }
    if (help || !tokens || !out || optind < argc) {
        fprintf(help ? stdout : stderr,
                "usage: nebula logits -m MODEL --tokens-file F --out OUT.f32 [--chunk N] [--threads N] [--ctx N] [--mtp FILE]\n"
                "                     [--backend cpu|cuda] [--layers L] [--mtp-out MTP.f32]\n"
                "Writes the logits of every position, float32 little-endian, row-major [tokens x vocab],\n"
                "computed by the CPU reference (default) or the CUDA backend (the whole model on the GPU).\n"
                "--layers L: only the first L trunk layers, then the head mixer and the LM head (no MTP\n"
                "block; the n-gram layer only if among them): only those layers' weights are uploaded (cuda)\n"
                "or read (cpu), so a model too large for the GPU can be compared on both backends.\n"
                "--mtp-out F: also the MTP block's logits [tokens-1 x vocab]: row t from the trunk's wide\n"
                "state after token t and token t+1, at position t+1 (a first draft step).\n");
        return help ? CLI_OK : CLI_USAGE;
    }
    if (mtp_out && o.layers) {
        fprintf(stderr, "nebula: --mtp-out needs the whole trunk: not with --layers\n");
        return CLI_USAGE;
    }
    struct cli_model cm;
    int rc = cli_open(&o, &cm);
    if (rc) return rc;
    int32_t *ids = NULL;
    size_t n = 0;
    char tmp[4096];
    if (mtp_out && cm.m->hp.n_nextn == 0) {
        fprintf(stderr, "nebula: --mtp-out: the model has no MTP block (give --mtp FILE)\n");
        rc = CLI_USAGE;
        goto done;
    }
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
    if (mtp_out) rc = write_mtp(&cm, ids, n, mtp_out);
done:
    free(ids);
    cli_close(&cm);
    return rc;
}

int cmd_tokenize(int argc, char **argv)
{
    static const struct option opts[] = {CLI_COMMON_OPTS, NB_OPT_END};
    struct cli_common o = {0};
    bool help = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1)
        if (c == 'h') help = true;
        else if (cli_parse_common(c, optarg, &o)) return CLI_USAGE;
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
