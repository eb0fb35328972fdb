/* generate.c — the coordinator's generate request on ctl.sock: prompt → ids
 * → a request in the queue (requests.c) → sampled ids and text.
 *
 * The generation is core/gen's session, the one `nebula generate` runs
 * (tools/nebula), with gw_eval replaced by round trips on the `step` ring:
 * RESET, the prompt in chunks, then one EVAL per generated token.  Same
 * tokenizer, chat template, sampler and stop rule, so the ids are bit for
 * bit those of the single process.  The text is what that CLI prints: the
 * decoded ids up to (not including) a stop token, or "ID " per id for a
 * model without a tokenizer.  The reply is sent when the request is done,
 * through the function control.c gave (REP owes exactly one answer). */
#include "coordinator/coord.h"

#include "core/chat/chat.h"
#include "core/gen/gen.h"
#include "core/model/model.h"
#include "core/sampling/sampling.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/err.h"
#include "core/util/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gen_req {
    int32_t *ids;
    size_t n;
    long long n_predict;
    struct sampling_params sp;
    const char *logits_out; /* absolute path, or NULL */
};

static cJSON *error_reply(const char *fmt, const char *detail)
{
    char msg[1200];
    snprintf(msg, sizeof msg, fmt, detail);
    cJSON *r = ctl_msg("error");
    cJSON_AddStringToObject(r, "message", msg);
    return r;
}

static int encode(const struct coord *c, const char *text, struct gen_req *g, char *err, size_t errlen)
{
    if (!c->tok) return nb_errf(err, errlen, NB_EINVAL, "this model has no tokenizer; send token ids");
    return tok_encode_alloc(c->tok, text, strlen(text), true, &g->ids, &g->n, err, errlen);
}

/* The prompt: "tokens" (ids), "prompt" (text) or "chat" (+ "system", "think"). */
static int prompt_ids(const struct coord *c, const cJSON *req, bool think, struct gen_req *g, char *err, size_t errlen)
{
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(req, "tokens"), *it;
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(req, "prompt"), *chat = cJSON_GetObjectItemCaseSensitive(req, "chat");
    const cJSON *system = cJSON_GetObjectItemCaseSensitive(req, "system");
    if (!!toks + !!prompt + !!chat != 1) return nb_errf(err, errlen, NB_EINVAL, "give exactly one of tokens, prompt, chat");
    if (cJSON_IsString(prompt)) return encode(c, prompt->valuestring, g, err, errlen);
    if (cJSON_IsString(chat)) {
        struct chat_msg msgs[2];
        int k = 0;
        if (cJSON_IsString(system)) msgs[k++] = (struct chat_msg){.role = CHAT_SYSTEM, .content = system->valuestring};
        msgs[k++] = (struct chat_msg){.role = CHAT_USER, .content = chat->valuestring};
        char *text;
        size_t len;
        int rc = chat_render(msgs, k, think, &text, &len, err, errlen);
        if (!rc) rc = encode(c, text, g, err, errlen), free(text);
        return rc;
    }
    int n = cJSON_GetArraySize(toks);
    if (!cJSON_IsArray(toks) || n == 0) return nb_errf(err, errlen, NB_EINVAL, "tokens must be a non-empty list of ids");
    if (!(g->ids = malloc((size_t)n * sizeof *g->ids))) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    cJSON_ArrayForEach(it, toks)
    {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= (double)c->m->hp.n_vocab)
            return nb_errf(err, errlen, NB_EINVAL, "token %zu is not an id in [0, %lld)", g->n + 1, (long long)c->m->hp.n_vocab);
        g->ids[g->n++] = (int32_t)it->valuedouble;
    }
    return 0;
}

static double num(const cJSON *o, const char *name, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* The model's defaults for think on/off, then the fields the request sets
 * (the rule of `nebula generate`). */
static int sampling_from(const cJSON *req, bool think, struct sampling_params *sp, char *err, size_t errlen)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(req, "sampling");
    *sp = sampling_defaults(think);
    if (!s) return 0;
    sp->temperature = (float)num(s, "temperature", sp->temperature);
    sp->top_k = (int)num(s, "top_k", sp->top_k);
    sp->top_p = (float)num(s, "top_p", sp->top_p);
    sp->min_p = (float)num(s, "min_p", 0);
    sp->presence_penalty = (float)num(s, "presence_penalty", 0);
    sp->seed = (uint64_t)num(s, "seed", 0);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "greedy"))) sp->temperature = 0;
    return sp->temperature > 0 ? sampling_validate(sp, err, errlen) : 0;
}

static bool is_stop_id(const int32_t *stop, int n_stop, int32_t id)
{
    for (int i = 0; i < n_stop; i++)
        if (stop[i] == id) return true;
    return false;
}

/* What `nebula generate` prints for these ids (the stop token excluded). */
static char *render_text(const struct coord *c, const int32_t *ids, long long n)
{
    size_t cap = 256, len = 0;
    char *out = malloc(cap), err[128];
    tok_decoder *dec = NULL;
    int32_t stop[GEN_MAX_STOP];
    int n_stop = gen_stop_ids(c->tok, stop);
    if (!out || (c->tok && tok_decoder_new(c->tok, false, &dec, err, sizeof err))) return free(out), NULL;
    for (long long i = 0; i <= n; i++) {
        const char *t = "";
        size_t tl = 0;
        char num_buf[16];
        if (i == n && dec) tok_decoder_flush(dec, &t, &tl);
        else if (i < n && is_stop_id(stop, n_stop, ids[i])) continue;
        else if (i < n && dec && tok_decoder_push(dec, ids[i], &t, &tl, err, sizeof err)) tl = 0;
        else if (i < n && !dec) tl = (size_t)snprintf(num_buf, sizeof num_buf, "%d ", ids[i]), t = num_buf;
        while (len + tl + 1 > cap) {
            char *more = realloc(out, cap *= 2);
            if (!more) return tok_decoder_free(dec), free(out), NULL;
            out = more;
        }
        memcpy(out + len, t, tl), len += tl;
    }
    out[len] = 0;
    tok_decoder_free(dec);
    return out;
}

static cJSON *result_reply(const struct coord *c, const int32_t *out, long long made, size_t n_prompt, size_t n_cached,
                           double t_prompt, double t_gen, const char *why, const char *warning)
{
    char *text = render_text(c, out, made);
    if (!text) return error_reply("%s", "out of memory");
    cJSON *r = ctl_msg("result"), *ids = cJSON_AddArrayToObject(r, "ids"), *t;
    for (long long i = 0; i < made; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(out[i]));
    cJSON_AddStringToObject(r, "text", text);
    cJSON_AddNumberToObject(r, "n_prompt", (double)n_prompt);
    cJSON_AddStringToObject(r, "stop", why);
    if (warning) cJSON_AddStringToObject(r, "warning", warning);
    t = cJSON_AddObjectToObject(r, "timings");
    cJSON_AddNumberToObject(t, "prompt_s", t_prompt);
    cJSON_AddNumberToObject(t, "prompt_cached", (double)n_cached);
    cJSON_AddNumberToObject(t, "gen_s", t_gen);
    cJSON_AddNumberToObject(t, "prompt_tok_s", t_prompt > 0 ? (double)n_prompt / t_prompt : 0);
    cJSON_AddNumberToObject(t, "gen_tok_s", made > 1 && t_gen > 0 ? (double)(made - 1) / t_gen : 0);
    free(text);
    return r;
}

/* A ctl generate in the queue: what its reply needs. */
struct ctl_gen {
    struct coord *c;
    coord_reply_fn reply;
    double t0;
    char warning[160];
};

static void on_done(void *ctx, const struct coord_outcome *o)
{
    struct ctl_gen *g = ctx;
    cJSON *reply;
    if (o->rc || o->cancelled) {
        nb_log("generate failed: %s", o->err);
        reply = error_reply("%s", o->err);
    } else {
        const struct gen_result *r = o->res;
        double total = coord_now() - g->t0;
        reply = result_reply(g->c, r->ids, r->made, o->n_prompt, o->n_cached, r->prompt_s, total - r->prompt_s, r->why,
                             g->warning[0] ? g->warning : NULL);
        nb_log("generate: prompt %zu tokens, %lld generated in %.2f s, stop: %s", o->n_prompt, r->made, total, r->why);
    }
    g->reply(g->c, reply);
    free(g);
}

cJSON *coord_generate(struct coord *c, const cJSON *req, coord_reply_fn reply)
{
    char err[1024];
    struct gen_req g = {0};
    struct ctl_gen *cg = calloc(1, sizeof *cg);
    const cJSON *think = cJSON_GetObjectItemCaseSensitive(req, "think");
    bool th = !cJSON_IsFalse(think);
    long long n_predict = (long long)num(req, "n", 128);
    if (!cg) return error_reply("%s", "out of memory");
    *cg = (struct ctl_gen){.c = c, .reply = reply, .t0 = coord_now()};
    if (n_predict < 0 || n_predict > (1 << 24)) {
        snprintf(err, sizeof err, "n must be in [0, 16777216]");
        goto fail;
    }
    if (prompt_ids(c, req, th, &g, err, sizeof err) || sampling_from(req, th, &g.sp, err, sizeof err)) goto fail;
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(req, "logits_out");
    if (lo && (!cJSON_IsString(lo) || lo->valuestring[0] != '/')) {
        snprintf(err, sizeof err, "logits_out must be an absolute path");
        goto fail;
    }
    g.logits_out = lo ? lo->valuestring : NULL;
    int64_t ctx = c->n_ctx;
    if ((int64_t)g.n >= ctx) {
        snprintf(err, sizeof err, "the prompt has %zu tokens, the context holds %lld", g.n, (long long)ctx);
        goto fail;
    }
    long long budget = n_predict;
    if ((int64_t)g.n + budget > ctx) {
        budget = ctx - (int64_t)g.n;
        snprintf(cg->warning, sizeof cg->warning, "generating at most %lld tokens: the context ends there", budget);
    }
    static const struct coord_request_ops ops = {.on_done = on_done};
    struct coord_request_spec spec = {.ids = g.ids, .n = g.n, .sp = g.sp, .budget = budget, .logits_out = g.logits_out};
    if (coord_request_submit(c, &spec, &ops, cg, err, sizeof err)) goto fail;
    free(g.ids); /* the session has its copy */
    return NULL;
fail:
    nb_log("generate failed: %s", err);
    free(cg);
    free(g.ids);
    return error_reply("%s", err);
}
