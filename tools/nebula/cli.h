/* cli.h — the pieces the `nebula` subcommands share: loading a model with its
 * tokenizer, reading prompts, prefilling in chunks.  Single process for now;
 * the coordinator will take these roles over (ARCHITECTURE.md §1). */
#ifndef NB_CLI_H
#define NB_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model/model.h"
#include "core/util/opts.h"
#include "core/tokenizer/tokenizer.h"
#include "engine/backend.h"

/* Exit codes: 2 for anything the user can fix (flags, model file, prompt). */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

struct cli_model {
    struct model *m;
    tok_tokenizer *tok; /* NULL when the GGUF has no tokenizer */
    gw_backend *be;
    gw_seq *seq;
    struct gw_ple_host ple_host; /* the n-gram table served from the mapping (cuda with --layers) */
    int n_layer_file;            /* the trunk layers of the file (hp.n_layer before --layers) */
};

struct cli_common {
    const char *model_path;
    const char *mtp_path; /* a separate MTP GGUF (--mtp), NULL: the model file's own */
    int threads;      /* 0: all cores */
    int chunk;        /* prefill chunk, tokens */
    int64_t ctx;      /* context limit, tokens (0: the model's) */
    const char *backend; /* gw_backend_params.kind; NULL: "cpu" */
    const char *kernels; /* gw_backend_params.kernels (cuda); NULL: the backend's default, fast */
    int accuracy_level;  /* nebula.conf generate.accuracy_level: --spec's acceptance (core/gen/spec.h) */
    int layers;          /* > 0: only the first this many trunk layers, then the head (model_keep_layers) */
};

int cli_open(const struct cli_common *o, struct cli_model *cm);
void cli_close(struct cli_model *cm);
/* The context limit in force. */
int64_t cli_ctx(const struct cli_common *o, const struct cli_model *cm);

/* Whitespace-separated ids from a file; each checked against the vocabulary.
 * Returns CLI_OK or CLI_USAGE with a message printed. */
int cli_read_tokens(const char *path, int64_t n_vocab, int32_t **ids, size_t *n);
/* Text → ids with special tokens recognised; CLI_USAGE if no tokenizer. */
int cli_encode(const struct cli_model *cm, const char *text, int32_t **ids, size_t *n);

/* Evaluates ids in chunks of o->chunk; the logits of every row go to
 * `on_rows` (may be NULL), the last row's to last_logits (may be NULL), and
 * the last row's wide state (n·C floats, the MTP block's input) to last_wide
 * (may be NULL). */
typedef int (*cli_rows_fn)(void *ctx, const float *logits, int n_rows, int64_t n_vocab);
int cli_prefill(const struct cli_common *o, struct cli_model *cm, const int32_t *ids, size_t n, cli_rows_fn on_rows,
                void *ctx, float *last_logits, float *last_wide);

struct gen_session;
/* spec.c: the decode steps of a generation as drafted verify windows
 * (`nebula generate --spec mtp|lookup|auto|oracle`), from the prefill's last
 * wide state, until the session is done; each token sampled goes to emit.
 * CLI_OK or CLI_FAIL (message printed).  The counters are the session's
 * (gen_spec_stats); cli_spec_print prints them. */
/* An oracle instead of the MTP block (benchmarks, tests): the drafts for
 * generated tokens k, k+1, … are ids[k], ids[k+1], … (the run's known
 * continuation), each replaced by another id with probability `corrupt`
 * (seeded): acceptance at a chosen rate, whatever the MTP block is worth. */
struct spec_oracle {
    const int32_t *ids;
    size_t n;
    double corrupt;
    uint64_t seed;
};
/* n_draft 0: the adaptive window (core/gen/window.h, 4 … 16); else that many drafts a pass. */
/* Where the drafts come from: the MTP block, an oracle, prompt lookup (the
 * tokens that followed the context's last 3, 2 or 1 tokens where they last
 * occurred before, in the prompt or in what was generated), or auto: lookup
 * instead of MTP when its expected tokens a ms is higher (core/gen/spec.h). */
enum spec_drafter { SPEC_MTP, SPEC_ORACLE, SPEC_LOOKUP, SPEC_AUTO };
struct spec_source {
    enum spec_drafter kind;
    const struct spec_oracle *oracle; /* SPEC_ORACLE */
    /* coverage mode (gw_eval_args.coverage): τ, 0 exact; resident: the
     * experts verification may use alone (NULL: the backend's rule) */
    float coverage;
    const uint8_t *resident;
};
int cli_spec_decode(struct cli_model *cm, struct gen_session *g, float *wide, int n_draft, int64_t n_ctx,
                    const struct spec_source *src, void (*emit)(void *, int32_t), void *ctx);
/* The faces of the session's verify windows on stderr: passes, tokens a
 * pass, drafts accepted, the counters of rows and experts, acceptance by
 * position, the level's non-greedy drafts, the drafters, the windows'
 * trajectory, and in coverage mode the cases. */
void cli_spec_print(const struct cli_model *cm, struct gen_session *g);

/* Parses a positive integer option; CLI_USAGE on error. */
int cli_parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out);

/* The options every model-running subcommand takes (getopt_long entries) and
 * their one parser: -m/--model, --mtp, --chunk (≤ NB_MAX_PREFILL_CHUNK),
 * --threads, --ctx; cli_parse_common also takes --backend cpu|cuda ('B') for
 * the commands that list it.  The table lists -h/--help too; each command
 * answers it with its own usage. */
#define CLI_COMMON_OPTS                                                                                            \
    NB_OPT_ARG("model", 'm'), NB_OPT_ARG("mtp", 'X'), NB_OPT_ARG("chunk", 'b'), NB_OPT_ARG("threads", 'j'),        \
        NB_OPT_ARG("ctx", 'c'), NB_OPT_FLAG("help", 'h')
/* Option code c with its argument into o: CLI_OK, CLI_USAGE (a bad value,
 * message printed), or -1 where c is none of the common options. */
int cli_parse_common(int c, const char *arg, struct cli_common *o);

int cmd_generate(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_hotlist(int argc, char **argv);
int cmd_spec_bench(int argc, char **argv); /* specbench.c: the verify window bench */
int cmd_config(int argc, char **argv); /* config.c: nebula config get KEY */
/* start.c: deploy/start.sh and deploy/stop.sh of this checkout, and the browser. */
int cmd_start(int argc, char **argv);
int cmd_stop(int argc, char **argv);
/* config.c: nebula.conf's model.path, engine.threads, prefill_chunk, ctx,
 * kernels and backend (auto: cpu here) as o's defaults, before the flags;
 * argv's --config FILE names the file.  CLI_USAGE with a message on a bad file. */
int cli_conf_defaults(int argc, char **argv, struct cli_common *o);

#endif
