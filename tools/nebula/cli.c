/* cli.c — model loading, prompt reading and chunked prefill for the
 * `nebula` subcommands (see cli.h). */
#include "tools/nebula/cli.h"

#include "core/conf/conf.h"
#include "core/util/err.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int cli_parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "nebula: %s needs an integer in [%lld, %lld], got '%s'\n", flag, lo, hi, s);
        return CLI_USAGE;
    }
    *out = v;
    return CLI_OK;
}

int cli_parse_common(int c, const char *arg, struct cli_common *o)
{
    long long v;
    switch (c) {
    case 'm': o->model_path = arg; return CLI_OK;
    case 'X': o->mtp_path = arg; return CLI_OK;
    case 'b': if (cli_parse_int("--chunk", arg, 1, NB_MAX_PREFILL_CHUNK, &v)) return CLI_USAGE; o->chunk = (int)v; return CLI_OK;
    case 'j': if (cli_parse_int("--threads", arg, 1, 4096, &v)) return CLI_USAGE; o->threads = (int)v; return CLI_OK;
    case 'c': if (cli_parse_int("--ctx", arg, 1, INT64_MAX, &v)) return CLI_USAGE; o->ctx = v; return CLI_OK;
    case 'B':
        if (strcmp(arg, "cpu") && strcmp(arg, "cuda")) {
            fprintf(stderr, "nebula: --backend takes cpu or cuda, got '%s'\n", arg);
            return CLI_USAGE;
        }
        o->backend = arg;
        return CLI_OK;
    default: return -1;
    }
}

int cli_open(const struct cli_common *o, struct cli_model *cm)
{
    char err[1024];
    memset(cm, 0, sizeof *cm);
    if (!o->model_path) {
        fprintf(stderr, "nebula: no model given (-m MODEL.gguf)\n");
        return CLI_USAGE;
    }
    if (model_open_mtp(o->model_path, o->mtp_path, &cm->m, err, sizeof err)) {
        fprintf(stderr, "nebula: cannot load model %s: %s\n", o->model_path, err);
        return CLI_USAGE;
    }
    cm->n_layer_file = cm->m->hp.n_layer;
    if (o->layers > 0) {
        const bool had_ple = cm->m->hp.ple_layer >= 0;
        if (model_keep_layers(cm->m, o->layers, err, sizeof err)) {
            fprintf(stderr, "nebula: --layers %d: %s\n", o->layers, err);
            cli_close(cm);
            return CLI_USAGE;
        }
        fprintf(stderr, "nebula: the first %d of %d layers, then the head (no MTP block%s)\n", o->layers,
                cm->n_layer_file, had_ple && cm->m->hp.ple_layer < 0 ? "; the n-gram layer is not among them" : "");
    } else {
        model_mtp_describe(cm->m, err, sizeof err);
        fprintf(stderr, "nebula: %s\n", err);
    }
    if (gguf_find_key(cm->m->gguf, "tokenizer.ggml.tokens") >= 0 &&
        tok_load_gguf(cm->m->gguf, &cm->tok, err, sizeof err)) {
        fprintf(stderr, "nebula: %s: bad tokenizer: %s\n", o->model_path, err);
        cli_close(cm);
        return CLI_USAGE;
    }
    struct gw_backend_params bp = {.kind = o->backend ? o->backend : "cpu", .n_threads = o->threads,
                                   .kernels = o->kernels};
    /* A check of the first layers on the device keeps the n-gram table in host
     * memory (26.8 GiB in the released model), as the gpu-worker does: its rows
     * come from the mapping, the bits the device would have read. */
    bool host_table = o->layers > 0 && !strcmp(bp.kind, "cuda") && cm->m->ple_table.data;
    if (host_table) gw_ple_host_detach(cm->m, &cm->ple_host);
    struct gw_ple_rows rows = {gw_ple_host_rows, &cm->ple_host};
    if (gw_backend_create(cm->m, &bp, &cm->be, err, sizeof err) || gw_seq_create(cm->be, &cm->seq, err, sizeof err) ||
        (host_table && gw_backend_set_ple_rows(cm->be, &rows, err, sizeof err))) {
        fprintf(stderr, "nebula: cannot start the backend: %s\n", err);
        cli_close(cm);
        return CLI_FAIL;
    }
    return CLI_OK;
}

void cli_close(struct cli_model *cm)
{
    if (cm->seq) gw_seq_free(cm->seq);
    if (cm->be) gw_backend_free(cm->be);
    if (cm->tok) tok_free(cm->tok);
    if (cm->m) model_close(cm->m);
    memset(cm, 0, sizeof *cm);
}

int64_t cli_ctx(const struct cli_common *o, const struct cli_model *cm)
{
    int64_t train = cm->m->hp.n_ctx_train > 0 ? cm->m->hp.n_ctx_train : 32768;
    return o->ctx > 0 && o->ctx < train ? o->ctx : train;
}

int cli_read_tokens(const char *path, int64_t n_vocab, int32_t **ids, size_t *n)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    if (!f) {
        fprintf(stderr, "nebula: cannot read token file %s: %s\n", path, strerror(errno));
        return CLI_USAGE;
    }
    size_t cap = 256, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    char word[32];
    int rc = CLI_OK;
    while (v && fscanf(f, "%31s", word) == 1) {
        char *end;
        long long id = strtoll(word, &end, 10);
        if (*end || id < 0 || id >= n_vocab) {
            fprintf(stderr, "nebula: %s: token %zu ('%s') is not an id in [0, %lld)\n", path, k + 1, word, (long long)n_vocab);
            rc = CLI_USAGE;
            break;
        }
        if (k == cap && !(v = realloc(v, (cap *= 2) * sizeof *v))) break;
        v[k++] = (int32_t)id;
    }
    if (f != stdin) fclose(f);
    if (!v) {
        fprintf(stderr, "nebula: out of memory reading %s\n", path);
        return CLI_FAIL;
    }
    if (rc == CLI_OK && k == 0) {
        fprintf(stderr, "nebula: %s holds no token ids\n", path);
        rc = CLI_USAGE;
    }
    if (rc) {
        free(v);
        return rc;
    }
    *ids = v;
    *n = k;
    return CLI_OK;
}

int cli_encode(const struct cli_model *cm, const char *text, int32_t **ids, size_t *n)
{
    char err[512];
    if (!cm->tok) {
        fprintf(stderr, "nebula: this model file has no tokenizer; give token ids with --tokens-file\n");
        return CLI_USAGE;
    }
    int rc = tok_encode_alloc(cm->tok, text, strlen(text), true, ids, n, err, sizeof err);
    if (rc == NB_ENOMEM) return CLI_FAIL;
    if (rc) {
        fprintf(stderr, "nebula: cannot tokenize the prompt: %s\n", err);
        return CLI_USAGE;
    }
    return CLI_OK;
}

int cli_prefill(const struct cli_common *o, struct cli_model *cm, const int32_t *ids, size_t n, cli_rows_fn on_rows,
                void *ctx, float *last_logits, float *last_wide)
{
    int64_t V = cm->m->hp.n_vocab, chunk = o->chunk > 0 ? o->chunk : 512;
    float *rows = on_rows ? malloc((size_t)chunk * (size_t)V * sizeof *rows) : NULL;
    char err[1024];
    if (on_rows && !rows) return CLI_FAIL;
    for (size_t at = 0; at < n; at += (size_t)chunk) {
        int nb = (int)(n - at < (size_t)chunk ? n - at : (size_t)chunk);
        bool last = at + (size_t)nb == n;
        struct gw_eval_args a = {.tokens = ids + at, .n_tokens = nb};
        if (on_rows) a.logits_rows = GW_ROWS_ALL, a.logits = rows;
        else if (last && last_logits) a.logits_rows = GW_ROWS_LAST, a.logits = last_logits;
        if (last && last_wide) a.wide_rows = GW_ROWS_LAST, a.wide = last_wide;
        if (gw_eval(cm->seq, &a, err, sizeof err)) {
            fprintf(stderr, "nebula: evaluation failed at token %zu: %s\n", at, err);
            free(rows);
            return CLI_FAIL;
        }
        if (on_rows && on_rows(ctx, rows, nb, V)) {
            free(rows);
            return CLI_FAIL;
        }
        if (on_rows && last && last_logits) memcpy(last_logits, rows + (size_t)(nb - 1) * (size_t)V, (size_t)V * sizeof *rows);
    }
    free(rows);
    return CLI_OK;
}
