/* hotlist.c — `nebula hotlist`: the expert-popularity campaign.
 *
 * Runs a file of prompts through the model and counts, per layer and expert,
 * how often the router picks it and its mean routing weight (ARCHITECTURE.md
 * §3): nebula-prepare ranks experts by count, then weight, to decide which
 * live in VRAM, RAM or on the SSD.  The counts come from the backend's route
 * tap, so the campaign measures exactly the routing the engine does.  With
 * an MTP block its layer (n_layer) is counted too: after each trunk step the
 * block runs over the step's rows as drafting runs it (the trunk's wide
 * state at position t with token t+1, at position t+1), its logits not
 * computed. */
#include "core/chat/chat.h"
#include "core/sampling/sampling.h"
#include "tools/nebula/cli.h"
#include "core/util/clock.h"
#include "core/util/opts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct campaign {
    int n_layer, n_expert;
    uint64_t *count; /* n_layer × n_expert */
    double *weight;  /* sums */
    uint64_t tokens;
    FILE *routes;    /* --routes: every token's choices, in campaign order */
    uint64_t *seen;  /* per layer: the campaign tokens its routes have covered */
};

static void on_route(void *ctx, int layer, int n_tokens, int k, const int32_t *experts, const float *weights)
{
    struct campaign *c = ctx;
    if (layer < 0 || layer >= c->n_layer) return;
    for (int t = 0; c->routes && t < n_tokens; t++) {
        fprintf(c->routes, "%d %llu", layer, (unsigned long long)c->seen[layer]++);
        for (int j = 0; j < k; j++) fprintf(c->routes, " %d", experts[t * k + j]);
        fputc('\n', c->routes);
    }
    for (int i = 0; i < n_tokens * k; i++) {
        if (experts[i] < 0 || experts[i] >= c->n_expert) continue;
        c->count[(size_t)layer * c->n_expert + experts[i]]++;
        c->weight[(size_t)layer * c->n_expert + experts[i]] += weights[i];
    }
}

static void usage(FILE *f)
{
    fprintf(f, "usage: nebula hotlist -m MODEL --prompts FILE --out hotlist.tsv [options]\n"
               "\n"
               "Counts, per layer and expert, how often the router picks it and its mean routing weight\n"
               "over a campaign of prompts; nebula-prepare places experts on VRAM/RAM/SSD from it.\n"
               "\n"
               "  --prompts FILE   one prompt per line (empty lines and lines starting with # skipped)\n"
               "  --raw            prompts are raw text (default: one chat turn each, thinking on)\n"
               "  --ids            prompts are whitespace-separated token ids (models without tokenizer)\n"
               "  --gen N          also generate N greedy tokens per prompt (default 0: prompts only)\n"
               "  --out FILE       TSV: layer, expert, count, mean_weight (every expert of every layer)\n"
               "  --routes FILE    also every token's choices, a line each: layer, token (its index in the\n"
               "                   campaign), the k experts best first (for tools/bench/cache-sim.py)\n"
               "  --chunk N, --threads N, --ctx N   as for generate\n"
               "  --backend B      cpu (default) or cuda (faster; its routes are the reference's but for near-ties)\n"
               "  --mtp FILE       the MTP block from a separate GGUF; with an MTP block (this or the model\n"
               "                   file's) its layer is counted too: the block runs behind each step as it\n"
               "                   drafts (the state at t with token t+1), its logits not computed\n");
}

/* The MTP block over the rows of one trunk step: row j pairs the wide state
 * before token ids[j] (the previous step's last row: prev, when have_prev)
 * with ids[j], at position pos0 + j.  w holds prev then the step's n rows
 * (w + wide); on return prev is the step's last row. */
static int mtp_rows(struct cli_model *cm, struct campaign *camp, float *w, bool *have_prev, const int32_t *ids, int n,
                    int64_t pos0, char *err, size_t errlen)
{
    const int64_t wide = model_wide(&cm->m->hp);
    int skip = *have_prev ? 0 : 1; /* the first token has no state before it */
    struct gw_mtp_args a = {.tokens = ids + skip, .wide_in = w + (skip ? wide : 0), .n_rows = n - skip, .pos = pos0 + skip,
                            .route_tap = on_route, .route_ctx = camp};
    int rc = a.n_rows > 0 ? gw_mtp_eval(cm->seq, &a, err, errlen) : 0;
    memmove(w, w + (int64_t)n * wide, (size_t)wide * sizeof *w);
    *have_prev = true;
    return rc;
}

/* One campaign line → ids. */
static int line_ids(struct cli_model *cm, const char *line, int mode, int32_t **ids, size_t *n)
{
    if (mode == 2) { /* ids */
        size_t cap = 64, k = 0;
        int32_t *v = malloc(cap * sizeof *v);
        const char *p = line;
        char *end;
        while (v) {
            long long id = strtoll(p, &end, 10);
            if (end == p) break;
            if (id < 0 || id >= cm->m->hp.n_vocab) {
                fprintf(stderr, "nebula: prompt id %lld is not in the vocabulary\n", id);
                free(v);
                return CLI_USAGE;
            }
            if (k == cap && !(v = realloc(v, (cap *= 2) * sizeof *v))) break;
            v[k++] = (int32_t)id;
            p = end;
        }
        if (!v) return CLI_FAIL;
        *ids = v, *n = k;
        return CLI_OK;
    }
    if (mode == 1) return cli_encode(cm, line, ids, n);
    struct chat_msg msg = {.role = CHAT_USER, .content = line};
    char *text, err[256];
    size_t len;
    if (chat_render(&msg, 1, true, &text, &len, err, sizeof err)) return CLI_FAIL;
    int rc = cli_encode(cm, text, ids, n);
    free(text);
    return rc;
}

static int write_tsv(const char *path, const struct campaign *c)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "nebula: cannot write %s: %s\n", tmp, strerror(errno));
        return CLI_USAGE;
    }
    fprintf(f, "layer\texpert\tcount\tmean_weight\n");
    for (int l = 0; l < c->n_layer; l++)
        for (int e = 0; e < c->n_expert; e++) {
            size_t i = (size_t)l * c->n_expert + e;
            fprintf(f, "%d\t%d\t%llu\t%.6f\n", l, e, (unsigned long long)c->count[i],
                    c->count[i] ? c->weight[i] / (double)c->count[i] : 0.0);
        }
    if (fclose(f) || rename(tmp, path)) {
        fprintf(stderr, "nebula: cannot write %s: %s\n", path, strerror(errno));
        return CLI_FAIL;
    }
    return CLI_OK;
}

int cmd_hotlist(int argc, char **argv)
{
    static const struct option opts[] = {CLI_COMMON_OPTS,         NB_OPT_ARG("backend", 'B'), NB_OPT_ARG("prompts", 'P'),
                                         NB_OPT_ARG("out", 'o'),  NB_OPT_FLAG("raw", 'R'),    NB_OPT_FLAG("ids", 'I'),
                                         NB_OPT_ARG("gen", 'g'),  NB_OPT_ARG("routes", 'r'),  NB_OPT_END};
    struct cli_common o = {0};
    const char *prompts = NULL, *out = NULL, *routes = NULL;
    int mode = 0, c, rc = CLI_OK;
    long long gen = 0;
    optind = 1;
    while (rc == CLI_OK && (c = getopt_long(argc, argv, "m:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'P': prompts = optarg; break;
        case 'o': out = optarg; break;
        case 'r': routes = optarg; break;
        case 'R': mode = 1; break;
        case 'I': mode = 2; break;
        case 'g': rc = cli_parse_int("--gen", optarg, 0, 1 << 20, &gen); break;
        case 'h': usage(stdout); return CLI_OK;
        default:
            if ((rc = cli_parse_common(c, optarg, &o)) < 0) {
                usage(stderr);
                return CLI_USAGE;
            }
        }
    }
    if (rc) return rc;
    if (!prompts || !out || optind < argc) {
        usage(stderr);
        return CLI_USAGE;
    }
    FILE *pf = fopen(prompts, "r");
    if (!pf) {
        fprintf(stderr, "nebula: cannot read %s: %s\n", prompts, strerror(errno));
        return CLI_USAGE;
    }
    struct cli_model cm;
    if ((rc = cli_open(&o, &cm))) {
        fclose(pf);
        return rc;
    }
    const bool mtp = cm.m->hp.n_nextn > 0;
    struct campaign camp = {cm.m->hp.n_layer + cm.m->hp.n_nextn, cm.m->hp.n_expert, NULL, NULL, 0, NULL, NULL};
    camp.count = calloc((size_t)camp.n_layer * camp.n_expert, sizeof *camp.count);
    camp.weight = calloc((size_t)camp.n_layer * camp.n_expert, sizeof *camp.weight);
    camp.seen = calloc((size_t)camp.n_layer, sizeof *camp.seen);
    if (routes && !(camp.routes = fopen(routes, "w"))) {
        fprintf(stderr, "nebula: cannot write %s: %s\n", routes, strerror(errno));
        rc = CLI_USAGE;
    }
    float *logits = malloc((size_t)cm.m->hp.n_vocab * sizeof *logits);
    int64_t chunk = o.chunk > 0 ? o.chunk : 512, wide = model_wide(&cm.m->hp);
    float *w = mtp ? malloc((size_t)(chunk + 1) * (size_t)wide * sizeof *w) : NULL; /* the MTP block's input rows */
    if (mtp && !w) rc = CLI_FAIL;
    char *line = NULL;
    size_t cap = 0, n_prompts = 0;
    ssize_t len;
    if (!camp.count || !camp.weight || !camp.seen || !logits) rc = CLI_FAIL;
    double t0 = nb_now_s();
    while (rc == CLI_OK && (len = getline(&line, &cap, pf)) >= 0) {
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!len || line[0] == '#') continue;
        int32_t *ids = NULL;
        size_t n = 0;
        if ((rc = line_ids(&cm, line, mode, &ids, &n))) break;
        if (n == 0 || (int64_t)(n + (size_t)gen) > cli_ctx(&o, &cm)) {
            fprintf(stderr, "nebula: prompt %zu: %zu tokens do not fit the context; skipped\n", n_prompts + 1, n);
            free(ids);
            continue;
        }
        gw_seq_reset(cm.seq);
        /* Prefill with the route tap on, then the greedy continuation; the
         * MTP block behind each step. */
        char err[1024];
        bool have_prev = false;
        for (size_t at = 0; rc == CLI_OK && at < n + (size_t)gen;) {
            int32_t id;
            int nb = 1;
            const int32_t *tok = &id;
            if (at < n) nb = (int)(n - at < (size_t)chunk ? n - at : (size_t)chunk), tok = ids + at;
            else id = sampling_argmax(logits, (int32_t)cm.m->hp.n_vocab);
            struct gw_eval_args a = {.tokens = tok, .n_tokens = nb, .logits_rows = GW_ROWS_LAST, .logits = logits,
                                     .route_tap = on_route, .route_ctx = &camp};
            if (mtp) a.wide_rows = GW_ROWS_ALL, a.wide = w + wide;
            if (gw_eval(cm.seq, &a, err, sizeof err) ||
                (mtp && mtp_rows(&cm, &camp, w, &have_prev, tok, nb, (int64_t)at, err, sizeof err)))
                rc = CLI_FAIL;
            at += (size_t)nb;
        }
        if (rc) fprintf(stderr, "nebula: prompt %zu: %s\n", n_prompts + 1, err);
        camp.tokens += n + (size_t)gen;
        n_prompts++;
        free(ids);
        if (isatty(2)) fprintf(stderr, "\rnebula: hotlist: %zu prompts, %llu tokens", n_prompts, (unsigned long long)camp.tokens);
    }
    if (isatty(2)) fprintf(stderr, "\n");
    if (rc == CLI_OK && n_prompts == 0) {
        fprintf(stderr, "nebula: %s has no prompts\n", prompts);
        rc = CLI_USAGE;
    }
    if (rc == CLI_OK && (rc = write_tsv(out, &camp)) == CLI_OK)
        fprintf(stderr, "nebula: hotlist of %zu prompts, %llu tokens, %d layers × %d experts → %s in %.1f s\n", n_prompts,
                (unsigned long long)camp.tokens, camp.n_layer, camp.n_expert, out, nb_now_s() - t0);
    free(line);
    fclose(pf);
    free(logits);
    free(w);
    if (camp.routes && fclose(camp.routes) && rc == CLI_OK) {
        fprintf(stderr, "nebula: cannot write %s: %s\n", routes, strerror(errno));
        rc = CLI_FAIL;
    }
    free(camp.count);
    free(camp.weight);
    free(camp.seen);
    cli_close(&cm);
    return rc;
}
