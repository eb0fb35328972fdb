/* specbench.c — `nebula spec-bench`: the verify window bench (issue 16's
 * acceptance "Bench"; tools/bench/spec-bench.sh drives it, docs/BENCHMARKS.md).
 *
 * On one model and backend, in one run, from the same prompt:
 *   1. plain greedy decode of --gen tokens (one-token evals, argmax rows: the
 *      non-speculative baseline, CUDA graphs where the backend has them); its
 *      ids are the oracle's continuation;
 *   2. the cost of a verify window of 1 … 17 rows (gw_eval_args.verify, every
 *      row's argmax and wide state, as the speculative loop asks) against one
 *      decode step: --reps windows of each size, each followed by the
 *      rollback to its first row (gw_seq_truncate, timed apart);
 *   3. for each --corrupt rate: the speculative loop itself (cli_spec_decode,
 *      the adaptive window) with the oracle drafting the greedy continuation,
 *      each draft replaced with that probability: decode tok/s, acceptance,
 *      tokens a pass, the speed-up over step 1, and the window controller's
 *      trajectory; the ids must be step 1's (level 3 is exact).  Acceptance is
 *      accepted / drafted; "per draft" accepted / (accepted + rejections), the
 *      acceptance of a draft whose predecessors were accepted: 1 − R.
 * Writes the numbers as JSON (--json FILE) and a Markdown table on stdout. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conf/conf.h"
#include "core/gen/gen.h"
#include "core/gen/window.h"
#include "core/util/clock.h"
#include "tools/nebula/cli.h"

#define BENCH_ROWS (WINDOW_MAX + 1)
#define BENCH_MAX_RATES 8

struct bench {
    struct cli_common c;
    const char *tokens_file, *json;
    long long prompt_len, gen, reps;
    double rates[BENCH_MAX_RATES];
    int n_rates;
    /* results */
    double prefill_s, decode_s; /* the plain run */
    double win_s[BENCH_ROWS + 1], roll_s[BENCH_ROWS + 1];
    struct {
        double s, acceptance, per_draft, per_pass;
        long long tokens, passes, drafted, accepted;
        bool same;
        char traj[400];
    } spec[BENCH_MAX_RATES];
};

static int parse_rates(const char *s, struct bench *b)
{
    b->n_rates = 0;
    for (const char *p = s; *p && b->n_rates < BENCH_MAX_RATES;) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || !(v >= 0 && v <= 1) || (*end && *end != ',')) return CLI_USAGE;
        b->rates[b->n_rates++] = v;
        p = *end ? end + 1 : end;
    }
    return b->n_rates ? CLI_OK : CLI_USAGE;
}

static int parse(int argc, char **argv, struct bench *b)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},  {"tokens-file", required_argument, 0, 'f'}, {"prompt-len", required_argument, 0, 'P'},
        {"gen", required_argument, 0, 'n'},    {"reps", required_argument, 0, 'r'},        {"corrupt", required_argument, 0, 'x'},
        {"json", required_argument, 0, 'J'},   {"backend", required_argument, 0, 'B'},     {"kernels", required_argument, 0, 'K'},
        {"threads", required_argument, 0, 'j'}, {"layers", required_argument, 0, 'L'},     {"chunk", required_argument, 0, 'b'},
        {"config", required_argument, 0, 'F'}, {"help", no_argument, 0, 'h'},              {"ctx", required_argument, 0, 'c'},
        {0, 0, 0, 0}};
    long long v;
    int c, rc = cli_conf_defaults(argc, argv, &b->c);
    b->prompt_len = 64, b->gen = 256, b->reps = 8;
    parse_rates("0,0.15,0.3,0.5", b);
    optind = 1;
    while (rc == CLI_OK && (c = getopt_long(argc, argv, "m:n:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': b->c.model_path = optarg; break;
        case 'f': b->tokens_file = optarg; break;
        case 'P': rc = cli_parse_int("--prompt-len", optarg, 1, 1 << 20, &b->prompt_len); break;
        case 'n': rc = cli_parse_int("--gen", optarg, 2, 1 << 20, &b->gen); break;
        case 'r': rc = cli_parse_int("--reps", optarg, 1, 1 << 16, &b->reps); break;
        case 'x':
            if ((rc = parse_rates(optarg, b))) fprintf(stderr, "nebula spec-bench: --corrupt wants rates in [0, 1] like 0,0.15,0.3,0.5\n");
            break;
        case 'J': b->json = optarg; break;
        case 'B':
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
                fprintf(stderr, "nebula spec-bench: --backend takes cpu or cuda, got '%s'\n", optarg);
                return CLI_USAGE;
            }
            b->c.backend = optarg;
            break;
        case 'K': b->c.kernels = optarg; break;
        case 'j': rc = cli_parse_int("--threads", optarg, 1, 4096, &v), b->c.threads = (int)v; break;
        case 'L': rc = cli_parse_int("--layers", optarg, 1, 1 << 20, &v), b->c.layers = (int)v; break;
        case 'b': rc = cli_parse_int("--chunk", optarg, 1, NB_MAX_PREFILL_CHUNK, &v), b->c.chunk = (int)v; break;
        case 'F': break;
        case 'c': rc = cli_parse_int("--ctx", optarg, 1, INT64_MAX, &v), b->c.ctx = v; break;
        case 'h':
            printf("usage: nebula spec-bench -m MODEL [--tokens-file F | --prompt-len N] [--gen N] [--reps N]\n"
                   "                         [--corrupt R1,R2,...] [--json FILE] [--backend cpu|cuda] [--kernels K]\n"
                   "                         [--layers L] [--threads N] [--chunk N] [--ctx N]\n"
                   "Plain greedy decode, the cost of verify windows of 1-17 rows against a decode step, and the\n"
                   "speculative loop with an oracle drafting the greedy continuation, each draft corrupted with\n"
                   "probability R (default 0,0.15,0.3,0.5): tok/s, acceptance, tokens a pass, the window\n"
                   "controller's trajectory.  A Markdown table on stdout, the numbers as JSON in FILE.\n"
                   "Defaults: a prompt of 64 ids (a fixed pseudo-random sequence), --gen 256, --reps 8.\n");
            return -1;
        default: return CLI_USAGE;
        }
    }
    if (rc == CLI_OK && optind < argc) fprintf(stderr, "nebula spec-bench: unexpected argument '%s'\n", argv[optind]), rc = CLI_USAGE;
    return rc;
}

/* A fresh sequence with the prompt evaluated: the last row's argmax into *next, its wide state into wide. */
static int prefill(struct bench *b, struct cli_model *cm, const int32_t *ids, size_t n, float *logits, float *wide, int32_t *next)
{
    gw_seq_reset(cm->seq);
    const double t0 = nb_now_s();
    if (cli_prefill(&b->c, cm, ids, n, NULL, NULL, logits, wide)) return CLI_FAIL;
    b->prefill_s = nb_now_s() - t0;
    const int64_t V = cm->m->hp.n_vocab;
    int32_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = (int32_t)i;
    *next = best;
    return CLI_OK;
}

static int fail(const char *what, const char *err) { return fprintf(stderr, "nebula spec-bench: %s: %s\n", what, err), CLI_FAIL; }

/* Step 1: plain greedy decode; the ids (gen of them) into out. */
static int plain(struct bench *b, struct cli_model *cm, const int32_t *prompt, size_t n, float *logits, float *wide, int32_t *out)
{
    char err[1024];
    int32_t tok;
    if (prefill(b, cm, prompt, n, logits, wide, &tok)) return CLI_FAIL;
    out[0] = tok;
    const double t0 = nb_now_s();
    for (long long i = 1; i < b->gen; i++) {
        struct gw_eval_args a = {.tokens = &tok, .n_tokens = 1, .logits_rows = GW_ROWS_LAST, .argmax = &tok};
        if (gw_eval(cm->seq, &a, err, sizeof err)) return fail("decode", err);
        out[i] = tok;
    }
    b->decode_s = (nb_now_s() - t0) / (double)(b->gen - 1);
    return CLI_OK;
}

/* Step 2: verify windows of 1 … BENCH_ROWS rows, each rolled back to its first row. */
static int windows(struct bench *b, struct cli_model *cm, const int32_t *prompt, size_t n, const int32_t *greedy, float *logits,
                   float *wide)
{
    const int64_t W = model_wide(&cm->m->hp);
    float *wides = malloc((size_t)(BENCH_ROWS * W) * sizeof *wides);
    int32_t tok, win[BENCH_ROWS], arg[BENCH_ROWS];
    char err[1024];
    int rc = wides ? prefill(b, cm, prompt, n, logits, wide, &tok) : CLI_FAIL;
    long long k = 1; /* the greedy ids' index of the token after tok */
    for (int rows = 1; rc == CLI_OK && rows <= BENCH_ROWS; rows++) {
        for (long long r = -1; r < b->reps && rc == CLI_OK; r++) { /* r = -1: a warm-up, not timed */
            const int64_t pos = gw_seq_pos(cm->seq);
            if (pos + rows + 1 > cli_ctx(&b->c, cm)) {
                rc = fail("windows", "the context is too short for --reps windows of 17 rows (shorter --prompt-len or fewer --reps)");
                break;
            }
            win[0] = tok;
            for (int i = 1; i < rows; i++) win[i] = greedy[(k + i - 1) % b->gen];
            struct gw_eval_args a = {.tokens = win, .n_tokens = rows, .logits_rows = GW_ROWS_ALL, .argmax = arg,
                                     .wide_rows = GW_ROWS_ALL, .wide = wides, .verify = true};
            const double t0 = nb_now_s();
            if (gw_eval(cm->seq, &a, err, sizeof err)) rc = fail("a verify window", err);
            const double t1 = nb_now_s();
            if (rc == CLI_OK && gw_seq_truncate(cm->seq, pos + 1, err, sizeof err)) rc = fail("a rollback", err);
            const double t2 = nb_now_s();
            if (r >= 0) b->win_s[rows] += t1 - t0, b->roll_s[rows] += t2 - t1;
            tok = arg[0], k++;
        }
        b->win_s[rows] /= (double)b->reps, b->roll_s[rows] /= (double)b->reps;
    }
    free(wides);
    return rc;
}

static void drop(void *ctx, int32_t id) { (void)ctx, (void)id; }

/* Step 3: the speculative loop with the oracle at corruption rate b->rates[i]. */
static int speculative(struct bench *b, struct cli_model *cm, const int32_t *prompt, size_t n, const int32_t *greedy, int i,
                       float *logits, float *wide)
{
    struct gen_config gc = {.prompt = prompt, .n_prompt = n, .budget = b->gen, .n_vocab = (int32_t)cm->m->hp.n_vocab, .ignore_stop = true,
                            .accuracy_level = 3};
    gc.sp.temperature = 0;
    gen_session *g = NULL;
    char err[256];
    if (gen_new(&gc, &g, err, sizeof err)) return fail("a session", err);
    struct gen_step st;
    struct gen_event ev;
    int32_t tok;
    int rc = gen_next(g, &st) == GEN_EVAL && st.phase == GEN_PREFILL && st.n_ids == (int)n ? CLI_OK : fail("a session", "no prefill");
    if (rc == CLI_OK) rc = prefill(b, cm, prompt, n, logits, wide, &tok);
    if (rc == CLI_OK && gen_feed(g, logits, NULL, &ev, err, sizeof err)) rc = fail("a session", err);
    const struct spec_oracle orc = {.ids = greedy, .n = (size_t)b->gen, .corrupt = b->rates[i], .seed = 1};
    const struct spec_source src = {.kind = SPEC_ORACLE, .oracle = &orc};
    const double t0 = nb_now_s();
    if (rc == CLI_OK) rc = cli_spec_decode(cm, g, wide, 0, cli_ctx(&b->c, cm), &src, drop, NULL);
    const double dt = nb_now_s() - t0;
    struct gen_result res;
    if (rc == CLI_OK && gen_finish(g, &res, err, sizeof err)) rc = fail("a session", err);
    if (rc == CLI_OK) {
        const struct spec_stats *s = gen_spec_stats(g);
        b->spec[i].s = dt, b->spec[i].tokens = res.made - 1, b->spec[i].passes = s->passes;
        b->spec[i].drafted = s->drafted, b->spec[i].accepted = s->accepted;
        b->spec[i].acceptance = s->drafted ? (double)s->accepted / (double)s->drafted : 0;
        b->spec[i].per_draft = s->accepted + s->rejections ? (double)s->accepted / (double)(s->accepted + s->rejections) : 0;
        b->spec[i].per_pass = s->passes ? (double)s->tokens / (double)s->passes : 0;
        b->spec[i].same = res.made == b->gen && !memcmp(res.ids, greedy, (size_t)b->gen * sizeof *greedy);
        spec_stats_trajectory(s, b->spec[i].traj, sizeof b->spec[i].traj);
    }
    gen_free(g);
    return rc;
}

static void report(const struct bench *b, const struct cli_model *cm, size_t n_prompt)
{
    const double dec = b->decode_s;
    printf("nebula spec-bench: %s backend, %d layers, prompt %zu ids, %lld tokens, %lld reps\n\n", gw_backend_kind(cm->be),
           cm->m->hp.n_layer, n_prompt, b->gen, b->reps);
    printf("plain decode: %.3f ms a token, %.2f tok/s (prefill %.3f s)\n\n", 1e3 * dec, 1.0 / dec, b->prefill_s);
    printf("| rows | verify ms | x decode step | rollback ms |\n|---|---|---|---|\n");
    for (int r = 1; r <= BENCH_ROWS; r++)
        printf("| %d | %.3f | %.2f | %.3f |\n", r, 1e3 * b->win_s[r], b->win_s[r] / dec, 1e3 * b->roll_s[r]);
    printf("\n| corrupt | acceptance | per draft | tokens/pass | tok/s | x plain | exact | windows (first) |\n"
           "|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < b->n_rates; i++) {
        const double tps = b->spec[i].s > 0 ? (double)b->spec[i].tokens / b->spec[i].s : 0;
        printf("| %.2f | %.3f | %.3f | %.2f | %.2f | %.2f | %s | %.60s%s |\n", b->rates[i], b->spec[i].acceptance, b->spec[i].per_draft,
               b->spec[i].per_pass, tps,
               tps * dec, b->spec[i].same ? "yes" : "NO", b->spec[i].traj, strlen(b->spec[i].traj) > 60 ? " …" : "");
    }
    if (!b->json) return;
    FILE *f = fopen(b->json, "w");
    if (!f) {
        fprintf(stderr, "nebula spec-bench: cannot write %s\n", b->json);
        return;
    }
    fprintf(f, "{\"backend\": \"%s\", \"layers\": %d, \"prompt\": %zu, \"gen\": %lld, \"reps\": %lld, \"prefill_s\": %.6f,\n",
            gw_backend_kind(cm->be), cm->m->hp.n_layer, n_prompt, b->gen, b->reps, b->prefill_s);
    fprintf(f, " \"decode_s\": %.9f, \"decode_tok_s\": %.4f,\n \"windows\": [", dec, 1.0 / dec);
    for (int r = 1; r <= BENCH_ROWS; r++)
        fprintf(f, "%s{\"rows\": %d, \"verify_s\": %.9f, \"ratio\": %.5f, \"rollback_s\": %.9f}", r > 1 ? ", " : "", r, b->win_s[r],
                b->win_s[r] / dec, b->roll_s[r]);
    fprintf(f, "],\n \"speculative\": [");
    for (int i = 0; i < b->n_rates; i++) {
        const double tps = b->spec[i].s > 0 ? (double)b->spec[i].tokens / b->spec[i].s : 0;
        fprintf(f, "%s{\"corrupt\": %.4f, \"acceptance\": %.5f, \"per_draft\": %.5f, \"tokens_per_pass\": %.5f, \"tok_s\": %.4f, \"speedup\": %.4f, "
                   "\"passes\": %lld, \"drafted\": %lld, \"accepted\": %lld, \"exact\": %s, \"trajectory\": \"%s\"}",
                i ? ",\n  " : "", b->rates[i], b->spec[i].acceptance, b->spec[i].per_draft, b->spec[i].per_pass, tps, tps * dec, b->spec[i].passes,
                b->spec[i].drafted, b->spec[i].accepted, b->spec[i].same ? "true" : "false", b->spec[i].traj);
    }
    fprintf(f, "]}\n");
    fclose(f);
}

int cmd_spec_bench(int argc, char **argv)
{
    struct bench *b = calloc(1, sizeof *b);
    if (!b) return CLI_FAIL;
    int rc = parse(argc, argv, b);
    if (rc) return free(b), rc < 0 ? CLI_OK : rc;
    struct cli_model cm;
    if ((rc = cli_open(&b->c, &cm))) return free(b), rc;
    int32_t *prompt = NULL, *greedy = malloc((size_t)b->gen * sizeof *greedy);
    size_t n = 0;
    const int64_t V = cm.m->hp.n_vocab;
    float *logits = malloc((size_t)V * sizeof *logits), *wide = malloc((size_t)model_wide(&cm.m->hp) * sizeof *wide);
    if (!greedy || !logits || !wide) rc = CLI_FAIL;
    else if (b->tokens_file) rc = cli_read_tokens(b->tokens_file, V, &prompt, &n);
    else if (!(prompt = malloc((size_t)b->prompt_len * sizeof *prompt))) rc = CLI_FAIL;
    else
        for (n = 0; n < (size_t)b->prompt_len; n++) prompt[n] = (int32_t)((n * 2654435761u + 12345u) % (uint64_t)V);
    if (rc == CLI_OK && (int64_t)n + b->gen + 1 > cli_ctx(&b->c, &cm))
        rc = CLI_USAGE, fprintf(stderr, "nebula spec-bench: prompt + --gen exceed the context\n");
    if (rc == CLI_OK) rc = plain(b, &cm, prompt, n, logits, wide, greedy);
    if (rc == CLI_OK) rc = windows(b, &cm, prompt, n, greedy, logits, wide);
    for (int i = 0; rc == CLI_OK && i < b->n_rates; i++) rc = speculative(b, &cm, prompt, n, greedy, i, logits, wide);
    if (rc == CLI_OK) report(b, &cm, n);
    free(prompt), free(greedy), free(logits), free(wide);
    cli_close(&cm);
    free(b);
    return rc;
}
