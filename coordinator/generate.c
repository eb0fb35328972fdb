/* generate.c — the coordinator's generate request: prompt → ids → steps on
 * the gpu-worker → sampled ids and text.
 *
 * The same loop as the single-process `nebula generate` (tools/nebula), with
 * gw_eval replaced by a round trip on the `step` ring: RESET, the prompt in
 * chunks (logits of the last row only), then one EVAL per generated token.
 * Same tokenizer, chat template, sampler and stop tokens, so the ids are bit
 * for bit those of the single process.  The text is what that CLI prints:
 * the decoded ids up to (not including) a stop token, or "ID " per id for a
 * model without a tokenizer.  While it waits for the worker it keeps ticking
 * the loop (heartbeats, supervision).  A worker (gpu-worker, cpu-moe-worker
 * or pager) that dies mid-request fails the attempt, supervision restarts it,
 * and the request is run once more from the start (RESET, fresh sampler: the
 * same ids); a second death is a clear error. */
#include "coordinator/coord.h"

#include "core/chat/chat.h"
#include "core/model/model.h"
#include "core/sampling/sampling.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/err.h"
#include "core/util/log.h"
#include "gpu-worker/step_proto.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEP_TIMEOUT_S 600.0

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

/* Waits for every worker to be ready (one may be restarting). */
static int need_workers(struct coord *c, char *err, size_t errlen)
{
    for (int i = 0; i < c->n_workers; i++)
        if (c->w[i].state != W_READY) return coord_wait_ready(c, COORD_READY_TIMEOUT_S, err, errlen);
    return 0;
}

/* One round trip: op with n ids; for EVAL the last row's logits into logits,
 * or (argmax not NULL) only their argmax, taken by the gpu-worker. */
static int step_call(struct coord *c, uint32_t op, const int32_t *ids, int n, float *logits, int32_t *argmax,
                     char *err, size_t errlen)
{
    struct coord_worker *w = coord_worker_by_role(c, "gpu-worker");
    pid_t pid = w->pid;
    struct ring_slot s;
    int rc = ring_reserve(c->step.req, &s, 1000000000ull, err, errlen);
    if (rc) return nb_errf(err, errlen, NB_EIO, "step ring: no free slot (%s)", shm_strerror(rc));
    uint64_t tag = ++c->next_tag;
    *s.hdr = (struct ring_slot_header){.layer = op, .n_tokens = (uint32_t)n, .payload_bytes = (uint32_t)n * 4, .tag = tag,
                                       .flags = op == STEP_EVAL && argmax ? STEP_FLAG_ARGMAX : 0};
    if (n) memcpy(s.payload, ids, (size_t)n * sizeof *ids);
    if ((rc = ring_publish(c->step.req, err, errlen))) return rc;
    c->step_in_flight = true;
    double t0 = coord_now();
    for (;;) {
        rc = ring_wait(c->step.resp, &s, 50000000ull, err, errlen);
        if (rc == 0 && s.hdr->tag != tag) { /* the answer to a request given up on: drop it */
            ring_release(c->step.resp, err, errlen);
            continue;
        }
        if (rc == 0) break;
        if (rc != SHM_ETIMEDOUT && rc != SHM_EPEER) break;
        coord_tick(c, rc == SHM_EPEER ? 20 : 0, false); /* EPEER returns at once: do not spin */
        if (w->pid != pid || w->state != W_READY) rc = nb_errf(err, errlen, NB_EIO, "the gpu-worker (pid %d) died during the request; it is being restarted", (int)pid);
        else if (coord_now() - t0 > STEP_TIMEOUT_S) rc = nb_errf(err, errlen, NB_EIO, "no answer from the gpu-worker in %.0f s", STEP_TIMEOUT_S);
        else continue;
        break;
    }
    c->step_in_flight = false;
    if (rc) return rc;
    w->last_beat = coord_now(); /* an answer is a sign of life: its heartbeat may still be queued after a long eval */
    if (s.hdr->flags & RING_FLAG_ERROR) rc = nb_errf(err, errlen, NB_EIO, "gpu-worker: %.*s", (int)STEP_ERR_BYTES, (const char *)s.payload);
    else if (op == STEP_EVAL && argmax && s.hdr->payload_bytes != 4) rc = nb_errf(err, errlen, NB_EFORMAT, "gpu-worker: argmax of %u bytes", s.hdr->payload_bytes);
    else if (op == STEP_EVAL && argmax) memcpy(argmax, s.payload, sizeof *argmax);
    else if (op == STEP_EVAL && s.hdr->payload_bytes != (uint32_t)c->m->hp.n_vocab * 4) rc = nb_errf(err, errlen, NB_EFORMAT, "gpu-worker: logits of %u bytes", s.hdr->payload_bytes);
    else if (op == STEP_EVAL) memcpy(logits, s.payload, (size_t)c->m->hp.n_vocab * sizeof *logits);
    int rc2 = ring_release(c->step.resp, err, errlen);
    return rc ? rc : rc2;
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
        if (cJSON_IsString(system)) msgs[k++] = (struct chat_msg){CHAT_SYSTEM, system->valuestring, NULL};
        msgs[k++] = (struct chat_msg){CHAT_USER, chat->valuestring, NULL};
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

static bool is_stop(const struct coord *c, int32_t id)
{
    if (!c->tok) return false;
    return id == tok_eos_id(c->tok) || id == tok_im_end_id(c->tok) || id == tok_id_of(c->tok, "<|endoftext|>");
}

/* What `nebula generate` prints for these ids (the stop token excluded). */
static char *render_text(const struct coord *c, const int32_t *ids, long long n)
{
    size_t cap = 256, len = 0;
    char *out = malloc(cap), err[128];
    tok_decoder *dec = NULL;
    if (!out || (c->tok && tok_decoder_new(c->tok, false, &dec, err, sizeof err))) return free(out), NULL;
    for (long long i = 0; i <= n; i++) {
        const char *t = "";
        size_t tl = 0;
        char num_buf[16];
        if (i == n && dec) tok_decoder_flush(dec, &t, &tl);
        else if (i < n && is_stop(c, ids[i])) continue;
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

/* Prefill in chunks, then sample and step until n_predict, a stop token or
 * the context's end.  *made gets the ids produced. */
static int run(struct coord *c, struct gen_req *g, int32_t *out, long long budget, long long *made, double *t_prompt,
               const char **why, const struct coord_hooks *h, char *err, size_t errlen)
{
    int chunk = h && h->chunk > 0 && h->chunk < c->chunk ? h->chunk : c->chunk;
    int64_t V = c->m->hp.n_vocab;
    float *logits = malloc((size_t)V * sizeof *logits);
    sampler *smp = sampling_new(&g->sp, (int32_t)V);
    int rc = !logits || !smp ? nb_errf(err, errlen, NB_ENOMEM, "out of memory") : 0;
    /* The logits each token is sampled from, for parity checks (the client's
     * --dump-logits): written to PATH.tmp, renamed when complete, mode 0600. */
    FILE *dump = NULL;
    char dump_tmp[4200] = "";
    if (!rc && g->logits_out) {
        snprintf(dump_tmp, sizeof dump_tmp, "%s.tmp", g->logits_out);
        int fd = open(dump_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || !(dump = fdopen(fd, "wb"))) {
            if (fd >= 0) close(fd);
            rc = nb_errf(err, errlen, NB_EIO, "logits_out %s: %s", dump_tmp, strerror(errno));
        }
    }
    /* Greedy without a presence penalty or a logits dump needs only each
     * step's argmax: the gpu-worker takes it and sends 4 bytes, not V · 4. */
    const bool greedy = g->sp.temperature <= 0.0f && g->sp.presence_penalty == 0.0f && !dump;
    int32_t next = -1;
    double t0 = coord_now();
    if (!rc) rc = step_call(c, STEP_RESET, NULL, 0, NULL, NULL, err, errlen);
    bool ended = false; /* a hook said stop */
    for (size_t at = 0; !rc && !ended && at < g->n; at += (size_t)chunk) {
        int nb = (int)(g->n - at < (size_t)chunk ? g->n - at : (size_t)chunk);
        rc = step_call(c, STEP_EVAL, g->ids + at, nb, logits, greedy ? &next : NULL, err, errlen);
        if (!rc && h && h->on_prefill && h->on_prefill(h->ctx, at + (size_t)nb, g->n)) ended = true, *why = "hook";
    }
    *t_prompt = coord_now() - t0;
    *made = 0;
    if (!ended) *why = "length";
    while (!rc && !ended && *made < budget) {
        if (dump && fwrite(logits, sizeof *logits, (size_t)V, dump) != (size_t)V)
            rc = nb_errf(err, errlen, NB_EIO, "writing %s failed", dump_tmp);
        if (rc) break;
        int32_t id = greedy ? next : sampling_sample(smp, logits);
        out[(*made)++] = id;
        sampling_accept(smp, id);
        if (!(h && h->ignore_stop) && is_stop(c, id)) {
            *why = "stop token";
            break;
        }
        if (h && h->on_token && h->on_token(h->ctx, *made - 1, id)) {
            *why = "hook";
            break;
        }
        if (*made < budget) rc = step_call(c, STEP_EVAL, &id, 1, logits, greedy ? &next : NULL, err, errlen);
    }
    if (dump) {
        if (fclose(dump) && !rc) rc = nb_errf(err, errlen, NB_EIO, "writing %s failed", dump_tmp);
        if (!rc && rename(dump_tmp, g->logits_out)) rc = nb_errf(err, errlen, NB_EIO, "rename %s: %s", dump_tmp, strerror(errno));
        if (rc) remove(dump_tmp);
    }
    sampling_free(smp);
    free(logits);
    return rc;
}

int coord_run(struct coord *c, const int32_t *ids, size_t n, const struct sampling_params *sp, long long budget,
              const char *logits_out, const struct coord_hooks *h, int32_t *out, long long *made, double *t_prompt,
              const char **why, char *err, size_t errlen)
{
    struct gen_req g = {.ids = (int32_t *)ids, .n = n, .n_predict = budget, .sp = *sp, .logits_out = logits_out};
    /* A generation starts from RESET and a fresh sampler, so running it again
     * once every worker is back gives the same ids: one retry when a worker
     * died during the attempt (the 200 ms of ticks let its death be seen).
     * The hooks see the same token indices again; they skip those they had. */
    for (int attempt = 0;; attempt++) {
        uint64_t deaths = c->deaths;
        if (need_workers(c, err, errlen)) return NB_EIO;
        if (!run(c, &g, out, budget, made, t_prompt, why, h, err, errlen)) return 0;
        for (int i = 0; i < 10 && c->deaths == deaths; i++) coord_tick(c, 20, false);
        if (c->deaths == deaths || attempt == 1) return NB_EIO;
        nb_log("generate: %s; a worker died: retrying once", err);
    }
}

static cJSON *result_reply(const struct coord *c, const int32_t *out, long long made, size_t n_prompt, double t_prompt,
                           double t_gen, const char *why, const char *warning)
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
    cJSON_AddNumberToObject(t, "gen_s", t_gen);
    cJSON_AddNumberToObject(t, "prompt_tok_s", t_prompt > 0 ? (double)n_prompt / t_prompt : 0);
    cJSON_AddNumberToObject(t, "gen_tok_s", made > 1 && t_gen > 0 ? (double)(made - 1) / t_gen : 0);
    free(text);
    return r;
}

cJSON *coord_generate(struct coord *c, const cJSON *req)
{
    char err[1024], warning[160] = "";
    struct gen_req g = {0};
    const cJSON *think = cJSON_GetObjectItemCaseSensitive(req, "think");
    bool th = !cJSON_IsFalse(think);
    long long n_predict = (long long)num(req, "n", 128);
    cJSON *reply = NULL;
    int32_t *out = NULL;
    if (n_predict < 0 || n_predict > (1 << 24)) return error_reply("%s", "n must be in [0, 16777216]");
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
    long long budget = n_predict, made;
    if ((int64_t)g.n + budget > ctx) {
        budget = ctx - (int64_t)g.n;
        snprintf(warning, sizeof warning, "generating at most %lld tokens: the context ends there", budget);
    }
    double t_prompt, t0;
    const char *why;
    if (!(out = malloc((size_t)(budget + 1) * sizeof *out))) {
        snprintf(err, sizeof err, "out of memory");
        goto fail;
    }
    t0 = coord_now();
    if (coord_run(c, g.ids, g.n, &g.sp, budget, g.logits_out, NULL, out, &made, &t_prompt, &why, err, sizeof err)) goto fail;
    reply = result_reply(c, out, made, g.n, t_prompt, coord_now() - t0 - t_prompt, why, warning[0] ? warning : NULL);
    nb_log("generate: prompt %zu tokens, %lld generated in %.2f s, stop: %s", g.n, made, coord_now() - t0, why);
    free(out);
    free(g.ids);
    return reply;
fail:
    nb_log("generate failed: %s", err);
    free(out);
    free(g.ids);
    return error_reply("%s", err);
}
