/* generate.c — `nebula generate`: prompt → prefill → sample → stream text.
 *
 * The prompt is raw text (-p), one chat turn rendered with the model's
 * ChatML template (--chat), or ids (--tokens-file).  Generation stops at
 * -n tokens, at the context limit, or at <|im_end|> / <|endoftext|> (and the
 * tokenizer's eos): core/gen's stop rule, the coordinator's too.  Text is streamed through the tokenizer's streaming
 * decoder, which never prints half a UTF-8 character.
 *
 * With --server RUNDIR the same request goes to a running coordinator's
 * ctl.sock instead (it tokenizes, samples and steps the gpu-worker); the
 * output is the same, printed when the reply arrives. */
#include "core/chat/chat.h"
#include "core/conf/conf.h"
#include "core/ctl/ctl.h"
#include "core/gen/gen.h"
#include "core/prepared/prepared.h"
#include "core/sampling/sampling.h"
#include "core/util/err.h"
#include "core/util/opts.h"
#include "engine/ffn.h"
#include "tools/nebula/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: nebula generate -m MODEL (-p TEXT | --chat TEXT | --tokens-file F) [options]\n"
            "\n"
            "prompt:\n"
            "  -p, --prompt TEXT      raw text (special tokens like <|im_start|> are recognised)\n"
            "  --chat TEXT            one user turn in the model's chat template\n"
            "  --system TEXT          a system message for --chat\n"
            "  --think on|off         thinking block for --chat (default on)\n"
            "  --tokens-file F        whitespace-separated token ids ('-' for stdin)\n"
            "generation:\n"
            "  -n, --n-predict N      tokens to generate (default 128)\n"
            "  --greedy               always the most likely token\n"
            "  --temp T, --top-k K, --top-p P, --min-p M, --presence-penalty X, --seed S\n"
            "                         sampling (defaults: the model's for thinking on/off:\n"
            "                         T 1.0 top-p 0.95 top-k 20 / T 0.7 top-p 0.8 top-k 20)\n"
            "  --print-ids            print the generated ids, space-separated, as the last stdout line\n"
            "engine:\n"
            "  -m, --model FILE       qwen4exp GGUF (any shard of a split model)\n"
            "  --spec off|mtp|lookup|auto|oracle\n"
            "                         speculative decoding (default off): the MTP block drafts --draft N tokens\n"
            "                         (default: adaptive, 4 to 16), the model verifies them in one pass; the output\n"
            "                         is exactly the plain one, greedy or sampled (either backend);\n"
            "                         lookup: the tokens that followed the context's last 3/2/1 tokens before;\n"
            "                         auto: lookup instead of MTP in the passes where it makes more tokens a ms\n"
            "                         (with --draft-ids, the oracle below stands in for the MTP block: tests);\n"
            "                         oracle: the drafts from --draft-ids FILE (the known continuation, ids),\n"
            "                         each changed with probability --draft-corrupt R (default 0): a chosen\n"
            "                         acceptance, for benchmarks and tests\n"
            "  --accuracy-level L     the drafts --spec keeps: 3 (default: nebula.conf's generate.accuracy_level)\n"
            "                         exact; 2: at most one near miss a window (top 3, p/p(top) >= 0.8); 1: four\n"
            "                         (top 10, >= 0.2) -- approximate, docs/SPECULATIVE.md measures them\n"
            "  --spec-coverage T      coverage mode (approximate, opt-in; docs/SPECULATIVE.md): verify with the\n"
            "                         resident experts only where they carry >= T of a row's routing weight\n"
            "                         (0 < T <= 1; 'on': the seed's 0.9), all its experts below (case B)\n"
            "  --resident DIR         the resident experts for --spec-coverage on the cpu backend: the VRAM\n"
            "                         tier of DIR/placement.json (nebula-prepare's output for this model)\n"
            "  --mtp FILE             the MTP (draft) block from a separate GGUF (Unsloth's MTP/mtp-*.gguf);\n"
            "                         without it the model file's own, or none (then no speculative decoding)\n"
            "  --ctx N                context limit in tokens (default: the model's)\n"
            "  --chunk N              prefill chunk in tokens (default 512, at most 8192)\n"
            "  --threads N            CPU threads (default: all cores)\n"
            "  --backend B            cpu (default: the reference) or cuda (the whole model on the GPU)\n"
            "  --kernels K            cuda's matrix kernels: fast (default, fp32) or ref (bit-faithful)\n"
            "  --config FILE          nebula.conf for the defaults of -m, --ctx, --chunk, --threads, --backend,\n"
            "                         --kernels (default: $XDG_CONFIG_HOME/nebula/nebula.conf, else conf/)\n"
            "  --server RUNDIR        send the request to the coordinator running in RUNDIR\n"
            "  --dump-logits FILE     write the logits each token was sampled from (float32, one row of\n"
            "                         vocab values per generated token): a parity diagnostic\n"
            "                         (its ctl.sock) instead of loading the model here; -m not needed\n");
}

static int parse_float(const char *flag, const char *s, float lo, float hi, float *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "nebula: %s needs a number in [%g, %g], got '%s'\n", flag, lo, hi, s);
        return CLI_USAGE;
    }
    *out = (float)v;
    return CLI_OK;
}

struct gen_opts {
    struct cli_common c;
    const char *prompt, *chat, *system, *tokens_file, *server, *dump_logits;
    bool think, greedy, print_ids;
    bool spec;      /* --spec mtp|lookup|auto|oracle: decode as drafted verify windows (spec.c) */
    int n_draft;    /* --draft N */
    bool oracle, lookup, autospec;
    int accuracy_level; /* --accuracy-level (default: nebula.conf's) */
    const char *oracle_path; /* --spec oracle: --draft-ids FILE, --draft-corrupt R */
    double corrupt;
    float coverage;          /* --spec-coverage T (0: exact) */
    const char *resident;    /* --resident DIR */
    long long n_predict;
    struct sampling_params sp;
    bool set_temp, set_top_k, set_top_p;
};

static int parse(int argc, char **argv, struct gen_opts *o)
{
    static const struct option opts[] = {
        CLI_COMMON_OPTS, NB_OPT_ARG("backend", 'B'), NB_OPT_ARG("prompt", 'p'), NB_OPT_ARG("chat", 'C'),
        NB_OPT_ARG("system", 'S'), NB_OPT_ARG("think", 'T'), NB_OPT_ARG("tokens-file", 'f'), NB_OPT_ARG("n-predict", 'n'),
        NB_OPT_FLAG("greedy", 'g'), NB_OPT_ARG("temp", 't'), NB_OPT_ARG("top-k", 'k'), NB_OPT_ARG("top-p", 'P'),
        NB_OPT_ARG("min-p", 'M'), NB_OPT_ARG("presence-penalty", 'r'), NB_OPT_ARG("seed", 's'),
        NB_OPT_FLAG("print-ids", 'i'), NB_OPT_ARG("server", 'R'), NB_OPT_ARG("dump-logits", 'D'),
        NB_OPT_ARG("kernels", 'K'), NB_OPT_ARG("config", 'F'), NB_OPT_ARG("spec", 'Q'), NB_OPT_ARG("draft", 'd'),
        NB_OPT_ARG("draft-ids", 'O'), NB_OPT_ARG("draft-corrupt", 'o'), NB_OPT_ARG("accuracy-level", 'L'),
        NB_OPT_ARG("spec-coverage", 'V'), NB_OPT_ARG("resident", 'W'), NB_OPT_END};
    long long v;
    int c, rc = cli_conf_defaults(argc, argv, &o->c);
    o->think = true;
    o->n_predict = 128;
    o->n_draft = 0; /* adaptive */
    optind = 1;
    while (rc == CLI_OK && (c = getopt_long(argc, argv, "m:p:n:h", opts, NULL)) != -1) {
        switch (c) {
        case 'Q':
            if (strcmp(optarg, "off") && strcmp(optarg, "mtp") && strcmp(optarg, "oracle") && strcmp(optarg, "lookup") &&
                strcmp(optarg, "auto")) {
                fprintf(stderr, "nebula generate: --spec %s: want off, mtp, lookup, auto or oracle\n", optarg);
                return CLI_USAGE;
            }
            o->spec = strcmp(optarg, "off") != 0, o->oracle = !strcmp(optarg, "oracle"), o->lookup = !strcmp(optarg, "lookup");
            o->autospec = !strcmp(optarg, "auto");
            break;
        case 'L':
            if (cli_parse_int("--accuracy-level", optarg, 1, 3, &v)) return CLI_USAGE;
            o->accuracy_level = (int)v;
            break;
        case 'O': o->oracle_path = optarg; break;
        case 'V':
            if (spec_coverage_parse(optarg, &o->coverage))
                return fprintf(stderr, "nebula generate: --spec-coverage wants on, off or a fraction in (0, 1], not '%s'\n", optarg), CLI_USAGE;
            break;
        case 'W': o->resident = optarg; break;
        case 'o': {
            char *end;
            o->corrupt = strtod(optarg, &end);
            if (*end || !(o->corrupt >= 0 && o->corrupt <= 1)) {
                fprintf(stderr, "nebula generate: --draft-corrupt wants a rate in [0, 1], not '%s'\n", optarg);
                return CLI_USAGE;
            }
            break;
        }
        case 'd': rc = cli_parse_int("--draft", optarg, 1, 16, &v), o->n_draft = (int)v; break;
        case 'p': o->prompt = optarg; break;
        case 'C': o->chat = optarg; break;
        case 'S': o->system = optarg; break;
        case 'f': o->tokens_file = optarg; break;
        case 'T':
            if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
                fprintf(stderr, "nebula: --think takes on or off, got '%s'\n", optarg);
                return CLI_USAGE;
            }
            o->think = !strcmp(optarg, "on");
            break;
        case 'n': rc = cli_parse_int("-n", optarg, 0, 1 << 24, &o->n_predict); break;
        case 'g': o->greedy = true; break;
        case 't': rc = parse_float("--temp", optarg, 0, 100, &o->sp.temperature), o->set_temp = true; break;
        case 'k': rc = cli_parse_int("--top-k", optarg, 0, 1 << 30, &v), o->sp.top_k = (int)v, o->set_top_k = true; break;
        case 'P': rc = parse_float("--top-p", optarg, 0, 1, &o->sp.top_p), o->set_top_p = true; break;
        case 'M': rc = parse_float("--min-p", optarg, 0, 1, &o->sp.min_p); break;
        case 'r': rc = parse_float("--presence-penalty", optarg, -2, 2, &o->sp.presence_penalty); break;
        case 's': rc = cli_parse_int("--seed", optarg, 0, INT64_MAX, &v), o->sp.seed = (uint64_t)v; break;
        case 'i': o->print_ids = true; break;
        case 'R': o->server = optarg; break;
        case 'K': {
            enum gw_kernels k;
            if (gw_kernels_parse_matrix(optarg, &k)) {
                fprintf(stderr, "nebula: --kernels takes ref or fast, got '%s'\n", optarg);
                return CLI_USAGE;
            }
            o->c.kernels = optarg;
            break;
        }
        case 'D': o->dump_logits = optarg; break;
        case 'F': break; /* read first, by cli_conf_defaults */
        case 'h': usage(stdout); return -1;
        default:
            if ((rc = cli_parse_common(c, optarg, &o->c)) < 0) {
                usage(stderr);
                return CLI_USAGE;
            }
        }
    }
    if (rc) return rc;
    if (optind < argc) {
        fprintf(stderr, "nebula: unexpected argument '%s' (try nebula generate --help)\n", argv[optind]);
        return CLI_USAGE;
    }
    if (!!o->prompt + !!o->chat + !!o->tokens_file != 1) {
        fprintf(stderr, "nebula: give exactly one of -p TEXT, --chat TEXT, --tokens-file F\n");
        return CLI_USAGE;
    }
    if ((o->coverage > 0 || o->resident) && !o->spec) {
        fprintf(stderr, "nebula: --spec-coverage and --resident go with --spec\n");
        return CLI_USAGE;
    }
    if (o->resident && !(o->coverage > 0)) {
        fprintf(stderr, "nebula: --resident goes with --spec-coverage\n");
        return CLI_USAGE;
    }
    if (o->system && !o->chat) {
        fprintf(stderr, "nebula: --system goes with --chat\n");
        return CLI_USAGE;
    }
    return CLI_OK;
}

/* The prompt as ids, by whichever of the three ways was given. */
static int prompt_ids(const struct gen_opts *o, const struct cli_model *cm, int32_t **ids, size_t *n)
{
    if (o->tokens_file) return cli_read_tokens(o->tokens_file, cm->m->hp.n_vocab, ids, n);
    if (o->prompt) return cli_encode(cm, o->prompt, ids, n);
    struct chat_msg msgs[2];
    int k = 0;
    if (o->system) msgs[k++] = (struct chat_msg){.role = CHAT_SYSTEM, .content = o->system};
    msgs[k++] = (struct chat_msg){.role = CHAT_USER, .content = o->chat};
    char *text, err[256];
    size_t len;
    if (chat_render(msgs, k, o->think, &text, &len, err, sizeof err)) {
        fprintf(stderr, "nebula: %s\n", err);
        return CLI_USAGE;
    }
    int rc = cli_encode(cm, text, ids, n);
    free(text);
    return rc;
}

/* --spec-coverage's resident experts: on the cpu backend --resident's VRAM
 * tier (required); cuda's are its slots, which a local run does not have. */
static int load_resident(const struct gen_opts *o, const struct cli_model *cm, uint8_t **out)
{
    if (strcmp(gw_backend_kind(cm->be), "cpu")) {
        fprintf(stderr, "nebula: --spec-coverage on %s: its resident experts are the gpu-worker's slots (a local run "
                        "holds every expert)\n", gw_backend_kind(cm->be));
        return CLI_USAGE;
    }
    if (!o->resident) {
        fprintf(stderr, "nebula: --spec-coverage on the cpu backend needs --resident DIR (which experts are resident)\n");
        return CLI_USAGE;
    }
    const int blocks = cm->m->hp.n_layer + cm->m->hp.n_nextn, E = cm->m->hp.n_expert;
    struct prepared_idx x;
    struct prepared_placement p;
    char err[512];
    int rc = prepared_plan_load(o->resident, NULL, &x, &p, err, sizeof err);
    if (rc) {
        fprintf(stderr, "nebula: --resident %s: %s\n", o->resident, err);
        return CLI_USAGE;
    }
    int64_t n_vram = 0;
    if (!(*out = malloc((size_t)blocks * (size_t)E))) rc = NB_ENOMEM, snprintf(err, sizeof err, "out of memory");
    else rc = prepared_vram_map(&x, &p, blocks, E, *out, &n_vram, err, sizeof err);
    prepared_placement_free(&p);
    prepared_idx_free(&x);
    if (rc) {
        fprintf(stderr, "nebula: --resident %s: %s\n", o->resident, err);
        return free(*out), *out = NULL, CLI_USAGE;
    }
    fprintf(stderr, "nebula: coverage mode, tau %.3g: %lld of %lld experts resident\n", (double)o->coverage, (long long)n_vram,
            (long long)blocks * E);
    return CLI_OK;
}

/* Streams one id's text (or the id itself without a tokenizer). */
static void emit(tok_decoder *dec, int32_t id);
static void emit_cb(void *dec, int32_t id) { emit((tok_decoder *)dec, id); }

static void emit(tok_decoder *dec, int32_t id)
{
    const char *text;
    size_t len;
    char err[128];
    if (!dec) {
        printf("%d ", id);
    } else if (tok_decoder_push(dec, id, &text, &len, err, sizeof err) == 0) {
        fwrite(text, 1, len, stdout);
    }
    fflush(stdout);
}

/* ---- --server: the request as JSON to the coordinator's ctl.sock ---- */

static cJSON *server_request(const struct gen_opts *o)
{
    cJSON *r = ctl_msg("generate"), *s;
    if (o->tokens_file) {
        int32_t *ids;
        size_t n;
        if (cli_read_tokens(o->tokens_file, INT32_MAX, &ids, &n)) return cJSON_Delete(r), NULL; /* the server checks the vocabulary */
        cJSON *a = cJSON_AddArrayToObject(r, "tokens");
        for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
        free(ids);
    }
    if (o->prompt) cJSON_AddStringToObject(r, "prompt", o->prompt);
    if (o->chat) cJSON_AddStringToObject(r, "chat", o->chat);
    if (o->system) cJSON_AddStringToObject(r, "system", o->system);
    cJSON_AddBoolToObject(r, "think", o->think);
    cJSON_AddNumberToObject(r, "n", (double)o->n_predict);
    s = cJSON_AddObjectToObject(r, "sampling");
    cJSON_AddBoolToObject(s, "greedy", o->greedy);
    if (o->set_temp) cJSON_AddNumberToObject(s, "temperature", o->sp.temperature);
    if (o->set_top_k) cJSON_AddNumberToObject(s, "top_k", o->sp.top_k);
    if (o->set_top_p) cJSON_AddNumberToObject(s, "top_p", o->sp.top_p);
    cJSON_AddNumberToObject(s, "min_p", o->sp.min_p);
    cJSON_AddNumberToObject(s, "presence_penalty", o->sp.presence_penalty);
    cJSON_AddNumberToObject(s, "seed", (double)o->sp.seed);
    if (o->dump_logits) { /* the coordinator writes it: give it a path that does not depend on its cwd */
        char dir[4096], *slash = strrchr(o->dump_logits, '/'), abs[8192];
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - o->dump_logits) : 1, slash ? o->dump_logits : ".");
        char *real = realpath(dir[0] ? dir : "/", NULL);
        if (!real) {
            fprintf(stderr, "nebula: --dump-logits: no directory %s\n", dir);
            cJSON_Delete(r);
            return NULL;
        }
        snprintf(abs, sizeof abs, "%s/%s", real, slash ? slash + 1 : o->dump_logits);
        free(real);
        cJSON_AddStringToObject(r, "logits_out", abs);
    }
    return r;
}

static void print_result(const struct gen_opts *o, const cJSON *r)
{
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(r, "ids"), *t = cJSON_GetObjectItemCaseSensitive(r, "timings"), *id;
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(r, "text"), *warn = cJSON_GetObjectItemCaseSensitive(r, "warning");
    if (cJSON_IsString(warn)) fprintf(stderr, "nebula: %s\n", warn->valuestring);
    printf("%s\n", cJSON_IsString(text) ? text->valuestring : "");
    int made = cJSON_GetArraySize(ids), i = 0;
    if (o->print_ids) {
        cJSON_ArrayForEach(id, ids) printf(i++ ? " %d" : "%d", (int)id->valuedouble);
        printf("\n");
    }
    double pn = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "n_prompt"));
    double ps = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(t, "prompt_s"));
    double gs = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(t, "gen_s"));
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(r, "stop");
    fprintf(stderr, "nebula: prompt %.0f tokens in %.2f s (%.2f tok/s), generated %d in %.2f s (%.2f tok/s), stop: %s (server)\n",
            pn, ps, ps > 0 ? pn / ps : 0.0, made, gs, made > 1 && gs > 0 ? (made - 1) / gs : 0.0,
            cJSON_IsString(stop) ? stop->valuestring : "?");
}

static int generate_on_server(const struct gen_opts *o)
{
    char ep[4200], err[256];
    if (o->spec || o->accuracy_level || o->coverage > 0) { /* the coordinator's own --spec decides; an ignored flag would be a lie */
        fprintf(stderr, "nebula: --spec and --accuracy-level are for a local run (the server's speculation is its --spec; "
                        "the HTTP API takes accuracy_level per request)\n");
        return CLI_USAGE;
    }
    if (access(o->server, F_OK)) {
        fprintf(stderr, "nebula: no coordinator at %s (the directory does not exist)\n", o->server);
        return CLI_USAGE;
    }
    cJSON *req = server_request(o), *reply = NULL;
    if (!req) return CLI_USAGE;
    ctl_sock *s = NULL;
    snprintf(ep, sizeof ep, "ipc://%.4000s/ctl.sock", o->server);
    int rc = ctl_open(CTL_REQ, ep, NULL, &s, err, sizeof err);
    if (!rc) rc = ctl_send(s, NULL, req, err, sizeof err);
    if (!rc) rc = ctl_recv(s, 3600 * 1000, NULL, 0, &reply, err, sizeof err);
    cJSON_Delete(req);
    ctl_close(s);
    ctl_term();
    if (rc) {
        fprintf(stderr, "nebula: the coordinator at %s does not answer: %s\n", o->server, err);
        return CLI_FAIL;
    }
    if (!strcmp(ctl_type(reply), "result")) {
        print_result(o, reply);
    } else {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(reply, "message");
        fprintf(stderr, "nebula: server: %s\n", cJSON_IsString(m) ? m->valuestring : "unexpected reply");
        rc = CLI_FAIL;
    }
    cJSON_Delete(reply);
    return rc ? CLI_FAIL : CLI_OK;
}

int cmd_generate(int argc, char **argv)
{
    struct gen_opts o = {0};
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? CLI_OK : rc;
    if (o.server) return generate_on_server(&o);
    struct cli_model cm;
    if ((rc = cli_open(&o.c, &cm))) return rc;

    int32_t *ids = NULL;
    size_t n = 0;
    float *logits = NULL, *wide = NULL;
    int32_t *oracle_ids = NULL; /* --spec oracle's drafts */
    uint8_t *resident = NULL;   /* --resident's VRAM tier */
    struct spec_oracle orc = {0};
    gen_session *g = NULL;
    tok_decoder *dec = NULL;
    if ((rc = prompt_ids(&o, &cm, &ids, &n))) goto done;
    int64_t ctx = cli_ctx(&o.c, &cm), V = cm.m->hp.n_vocab;
    if ((int64_t)n >= ctx) {
        fprintf(stderr, "nebula: the prompt has %zu tokens, the context holds %lld (raise --ctx or shorten it)\n", n,
                (long long)ctx);
        rc = CLI_USAGE;
        goto done;
    }
    long long budget = o.n_predict;
    if ((int64_t)n + budget > ctx) {
        budget = ctx - (int64_t)n;
        fprintf(stderr, "nebula: generating at most %lld tokens: the context ends there\n", budget);
    }

    struct sampling_params sp = sampling_defaults(o.think);
    if (o.set_temp) sp.temperature = o.sp.temperature;
    if (o.set_top_k) sp.top_k = o.sp.top_k;
    if (o.set_top_p) sp.top_p = o.sp.top_p;
    sp.min_p = o.sp.min_p, sp.presence_penalty = o.sp.presence_penalty, sp.seed = o.sp.seed;
    if (o.greedy) sp.temperature = 0;
    char err[256];
    if (sp.temperature > 0 && sampling_validate(&sp, err, sizeof err)) {
        fprintf(stderr, "nebula: %s\n", err);
        rc = CLI_USAGE;
        goto done;
    }
    /* The generation is core/gen's session (the coordinator runs the same
     * one): this is its blocking driver, with the backend here. */
    struct gen_config gc = {.prompt = ids, .n_prompt = n, .budget = budget, .sp = sp, .n_vocab = (int32_t)V,
                            .chunk = 0 /* cli_prefill chunks by --chunk */, .logits_path = o.dump_logits,
                            .accuracy_level = !o.spec ? 3 : o.accuracy_level ? o.accuracy_level : o.c.accuracy_level};
    gc.n_stop = gen_stop_ids(cm.tok, gc.stop_ids);
    logits = malloc((size_t)V * sizeof *logits);
    if (!logits || (cm.tok && tok_decoder_new(cm.tok, false, &dec, err, sizeof err))) {
        fprintf(stderr, "nebula: out of memory\n");
        rc = CLI_FAIL;
        goto done;
    }
    if ((rc = gen_new(&gc, &g, err, sizeof err))) {
        fprintf(stderr, "nebula: %s\n", err);
        rc = rc == NB_ENOMEM ? CLI_FAIL : CLI_USAGE;
        goto done;
    }
    const bool auto_oracle = o.autospec && o.oracle_path; /* the oracle stands in for the MTP block */
    if (o.spec && !o.oracle && !o.lookup && !auto_oracle && !cm.m->hp.n_nextn) {
        fprintf(stderr, "nebula: --spec needs a model with an MTP block (or --mtp FILE)\n");
        rc = CLI_USAGE;
        goto done;
    }
    if (o.oracle || auto_oracle) {
        if (!o.oracle_path) {
            fprintf(stderr, "nebula: --spec oracle needs --draft-ids FILE\n");
            rc = CLI_USAGE;
            goto done;
        }
        if ((rc = cli_read_tokens(o.oracle_path, V, &oracle_ids, &orc.n))) goto done;
        if (!orc.n) {
            fprintf(stderr, "nebula: %s holds no ids\n", o.oracle_path);
            rc = CLI_USAGE;
            goto done;
        }
        orc.ids = oracle_ids, orc.corrupt = o.corrupt, orc.seed = o.sp.seed;
    }
    if (o.coverage > 0 && (rc = load_resident(&o, &cm, &resident))) goto done;
    if (o.spec && !(wide = malloc((size_t)model_wide(&cm.m->hp) * sizeof *wide))) {
        fprintf(stderr, "nebula: out of memory\n");
        rc = CLI_FAIL;
        goto done;
    }
    struct gen_step st;
    struct gen_event ev;
    while (gen_next(g, &st) == GEN_EVAL) {
        if (st.phase == GEN_PREFILL) {
            if ((rc = cli_prefill(&o.c, &cm, st.ids, (size_t)st.n_ids, NULL, NULL, logits, wide))) goto done;
        } else if (o.spec) { /* the decode steps as verify windows, from the prefill's last state */
            struct spec_source src = {o.oracle ? SPEC_ORACLE : o.lookup ? SPEC_LOOKUP : o.autospec ? SPEC_AUTO : SPEC_MTP,
                                      o.oracle || auto_oracle ? &orc : NULL, o.coverage, resident};
            if ((rc = cli_spec_decode(&cm, g, wide, o.n_draft, ctx, &src, emit_cb, dec))) goto done;
            break;
        } else {
            struct gw_eval_args a = {.tokens = st.ids, .n_tokens = st.n_ids, .logits_rows = GW_ROWS_LAST, .logits = logits};
            char e[1024];
            if (gw_eval(cm.seq, &a, e, sizeof e)) {
                fprintf(stderr, "\nnebula: evaluation failed: %s\n", e);
                rc = CLI_FAIL;
                goto done;
            }
        }
        if (gen_feed(g, logits, NULL, &ev, err, sizeof err)) {
            fprintf(stderr, "nebula: %s\n", err);
            rc = CLI_FAIL;
            goto done;
        }
        if (ev.token && !ev.stop) emit(dec, ev.id);
    }
    if (dec) {
        const char *text;
        size_t len;
        tok_decoder_flush(dec, &text, &len);
        fwrite(text, 1, len, stdout);
    }
    struct gen_result res;
    if (gen_finish(g, &res, err, sizeof err)) {
        fprintf(stderr, "nebula: %s\n", err);
        rc = CLI_FAIL;
        goto done;
    }
    printf("\n");
    if (o.print_ids) {
        for (long long i = 0; i < res.made; i++) printf(i ? " %d" : "%d", res.ids[i]);
        printf("\n");
    }
    fprintf(stderr, "nebula: prompt %zu tokens in %.2f s (%.2f tok/s), generated %lld in %.2f s (%.2f tok/s), stop: %s\n",
            n, res.prompt_s, (double)n / res.prompt_s, res.made, res.decode_s,
            res.made > 1 ? (double)(res.made - 1) / res.decode_s : 0.0, res.why);
    if (o.spec) cli_spec_print(&cm, g);
done:
    gen_free(g); /* failed half-way: no partial logits file under the real name */
    tok_decoder_free(dec);
    free(logits);
    free(wide);
    free(oracle_ids);
    free(resident);
    free(ids);
    cli_close(&cm);
    return rc;
}
