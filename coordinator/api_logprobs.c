/* api_logprobs.c — log-probabilities of the generated tokens (docs/API.md, "Logprobs").
 *
 * From the row of logits each token was sampled from: the log-softmax of
 * the raw logits, i.e. the model's own distribution (OpenAI reports that
 * one), not the one temperature, top-k/p, min-p and penalties make for
 * sampling.  The normaliser is computed in double over the whole vocabulary
 * (max-shifted, so nothing overflows); the k best are kept by insertion into
 * a sorted array of at most 20, one pass over the row.  Token text: the
 * token's own bytes (tok_token_bytes; a control token, which has none, by
 * its spelling, "<|im_end|>"), bytes that
 * are not whole UTF-8 characters shown as "\xNN" in `token` and exactly in
 * `bytes`, as OpenAI does. */
#include "coordinator/api.h"

#include "core/tokenizer/tokenizer.h"
#include "core/util/utf8.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void api_logprob_row(const float *row, int32_t n_vocab, int32_t id, int k, struct api_logprob *out)
{
    float mx = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++)
        if (row[i] > mx) mx = row[i];
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)row[i] - mx);
    const double lse = mx + log(sum);
    if (k > API_MAX_TOP_LOGPROBS) k = API_MAX_TOP_LOGPROBS;
    out->id = id;
    out->logprob = (float)(row[id] - lse);
    out->n_top = 0;
    for (int32_t i = 0; i < n_vocab && k > 0; i++) {
        int n = out->n_top;
        if (n == k && row[i] <= row[out->top_id[n - 1]]) continue;
        int at = n < k ? n : k - 1;
        while (at > 0 && row[i] > row[out->top_id[at - 1]]) at--; /* strictly greater: the lower id stays first */
        int move = (n < k ? n : k - 1) - at;
        memmove(out->top_id + at + 1, out->top_id + at, (size_t)move * sizeof *out->top_id);
        out->top_id[at] = i;
        if (n < k) out->n_top++;
    }
    for (int j = 0; j < out->n_top; j++) out->top_logprob[j] = (float)(row[out->top_id[j]] - lse);
}

/* The token's text (valid UTF-8; "\xNN" for stray bytes) into buf; its bytes and their count via b, *nb. */
static const char *token_text(const struct tok_tokenizer *tok, int32_t id, char *buf, size_t cap, const unsigned char **b, size_t *nb)
{
    size_t n = 0;
    const char *p = tok ? tok_token_bytes(tok, id, &n) : NULL;
    if (!p) p = "", n = 0;
    if (!n && tok && (p = tok_token_text(tok, id))) n = strlen(p); /* a control token: its spelling */
    if (!p) p = "", n = 0;
    *b = (const unsigned char *)p, *nb = n;
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < cap;) {
        size_t k = nb_utf8_len((const unsigned char *)p + i, n - i);
        if (k && o + k < cap) memcpy(buf + o, p + i, k), o += k, i += k;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", (unsigned char)p[i]), i++;
    }
    buf[o] = 0;
    return buf;
}

static cJSON *entry(const struct tok_tokenizer *tok, int32_t id, float logprob)
{
    char text[512];
    const unsigned char *b;
    size_t nb;
    cJSON *o = cJSON_CreateObject(), *bytes;
    cJSON_AddStringToObject(o, "token", token_text(tok, id, text, sizeof text, &b, &nb));
    cJSON_AddNumberToObject(o, "logprob", logprob);
    bytes = cJSON_AddArrayToObject(o, "bytes");
    for (size_t i = 0; i < nb; i++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber(b[i]));
    return o;
}

cJSON *api_logprobs_chat_json(const struct tok_tokenizer *tok, const struct api_logprob *lp, size_t from, size_t to)
{
    cJSON *o = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(o, "content");
    for (size_t i = from; i < to; i++) {
        cJSON *e = entry(tok, lp[i].id, lp[i].logprob), *top = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int j = 0; j < lp[i].n_top; j++) cJSON_AddItemToArray(top, entry(tok, lp[i].top_id[j], lp[i].top_logprob[j]));
        cJSON_AddItemToArray(content, e);
    }
    cJSON_AddNullToObject(o, "refusal");
    return o;
}

cJSON *api_logprobs_completion_json(const struct tok_tokenizer *tok, const struct api_logprob *lp, size_t from, size_t to, size_t *offset)
{
    cJSON *o = cJSON_CreateObject(), *tokens = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
    char text[512];
    const unsigned char *b;
    size_t nb;
    for (size_t i = from; i < to; i++) {
        cJSON_AddItemToArray(tokens, cJSON_CreateString(token_text(tok, lp[i].id, text, sizeof text, &b, &nb)));
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(lp[i].logprob));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)*offset));
        for (size_t k = 0; k < nb; k++) *offset += (b[k] & 0xC0) != 0x80; /* characters: bytes that start one */
        cJSON *t = cJSON_CreateObject();
        for (int j = 0; j < lp[i].n_top; j++)
            if (!cJSON_GetObjectItemCaseSensitive(t, token_text(tok, lp[i].top_id[j], text, sizeof text, &b, &nb)))
                cJSON_AddNumberToObject(t, text, lp[i].top_logprob[j]);
        cJSON_AddItemToArray(tops, t);
    }
    return o;
}
