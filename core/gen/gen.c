/* gen.c — the generation session of gen.h.
 *
 * Two phases.  PREFILL hands out the prompt in chunks; the feed of the last
 * chunk carries the logits of the prompt's last position, from which the
 * first token is sampled.  DECODE hands out the token just sampled; each
 * feed samples the next.  So every feed after the prefill's last is exactly
 * one sample, in the order both old loops had: write the row to the logits
 * file, sample, record the id (the presence penalty sees it), then the stop
 * rule; the budget is checked before another step is asked for.  That order
 * is what makes the ids bit-identical to the loops this replaced. */
#include "core/gen/gen.h"

#include "core/grammar/grammar.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/err.h"
#include "core/util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct gen_session {
    struct gen_config cfg; /* prompt and logits_path point into this session's own copies */
    int32_t *prompt;
    char *logits_path, *logits_tmp;
    FILE *dump;
    sampler *smp;
    int32_t *out;          /* budget + 1 */
    long long made;
    size_t at;             /* prompt ids handed out */
    size_t cut, cut2;      /* prefill steps end here too (gen_resume; 0: none) */
    size_t pending;        /* ids of the step handed out, not fed yet */
    enum gen_phase phase;
    bool done;
    const char *why;
    uint32_t *allowed;     /* a constrained session's mask for the next sample */
    bool allowed_ready, armed; /* armed: the matcher applies (constrain_after was generated, or is -1) */
    double t_start, t_prefilled, t_end;
    const struct spec_level *level; /* NULL: exact */
    struct spec_stats spec;
};

int gen_stop_ids(const tok_tokenizer *tok, int32_t *ids)
{
    if (!tok) return 0;
    int n = 0;
    const int32_t cand[3] = {tok_eos_id(tok), tok_im_end_id(tok), tok_id_of(tok, "<|endoftext|>")};
    for (int i = 0; i < 3; i++)
        if (cand[i] >= 0) ids[n++] = cand[i];
    return n;
}

static bool is_stop(const gen_session *g, int32_t id)
{
    for (int i = 0; i < g->cfg.n_stop; i++)
        if (g->cfg.stop_ids[i] == id) return true;
    return false;
}

static int open_dump(gen_session *g, char *err, size_t errlen)
{
    if (!g->logits_tmp) return 0;
    if (g->dump) fclose(g->dump), g->dump = NULL;
    int fd = open(g->logits_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || !(g->dump = fdopen(fd, "wb"))) {
        int e = errno;
        if (fd >= 0) close(fd);
        return nb_errf(err, errlen, NB_EIO, "cannot write %s: %s", g->logits_tmp, strerror(e));
    }
    return 0;
}

int gen_new(const struct gen_config *cfg, gen_session **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!cfg->n_prompt) return nb_errf(err, errlen, NB_EINVAL, "the prompt is empty");
    if (cfg->budget < 0 || cfg->n_stop < 0 || cfg->n_stop > GEN_MAX_STOP || cfg->n_vocab <= 0)
        return nb_errf(err, errlen, NB_EINVAL, "gen_new: bad configuration");
    gen_session *g = calloc(1, sizeof *g);
    if (!g) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    g->cfg = *cfg;
    g->prompt = malloc(cfg->n_prompt * sizeof *g->prompt);
    g->out = malloc((size_t)(cfg->budget + 1) * sizeof *g->out);
    g->smp = sampling_new(&cfg->sp, cfg->n_vocab);
    if (cfg->constrain && !(g->allowed = malloc(((size_t)cfg->n_vocab + 31) / 32 * sizeof *g->allowed))) {
        gen_free(g);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    }
    g->armed = cfg->constrain_after < 0;
    g->level = cfg->constrain ? NULL : spec_level(cfg->accuracy_level);
    if (cfg->constrain) gram_matcher_reset(cfg->constrain); /* a session starts at the value's start */
    if (cfg->logits_path) {
        size_t n = strlen(cfg->logits_path);
        g->logits_path = strdup(cfg->logits_path);
        if ((g->logits_tmp = malloc(n + 5))) memcpy(g->logits_tmp, cfg->logits_path, n), memcpy(g->logits_tmp + n, ".tmp", 5);
    }
    if (!g->prompt || !g->out || !g->smp || (cfg->logits_path && (!g->logits_path || !g->logits_tmp))) {
        gen_free(g);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    }
    memcpy(g->prompt, cfg->prompt, cfg->n_prompt * sizeof *g->prompt);
    g->cfg.prompt = g->prompt, g->cfg.logits_path = g->logits_path;
    int rc = open_dump(g, err, errlen);
    if (rc) return gen_free(g), rc;
    g->why = "length";
    *out = g;
    return 0;
}

void gen_free(gen_session *g)
{
    if (!g) return;
    if (g->dump) { /* not finished: no partial file under the real name */
        fclose(g->dump);
        remove(g->logits_tmp);
    }
    sampling_free(g->smp);
    free(g->prompt), free(g->out), free(g->logits_path), free(g->logits_tmp), free(g->allowed);
    free(g);
}

int gen_restart(gen_session *g, char *err, size_t errlen)
{
    sampling_reset(g->smp);
    if (g->cfg.constrain) gram_matcher_reset(g->cfg.constrain);
    g->allowed_ready = false, g->armed = g->cfg.constrain_after < 0;
    g->made = 0, g->at = 0, g->cut = g->cut2 = 0, g->pending = 0, g->phase = GEN_PREFILL, g->done = false, g->why = "length";
    g->t_start = g->t_prefilled = g->t_end = 0;
    memset(&g->spec, 0, sizeof g->spec);
    return open_dump(g, err, errlen);
}

enum gen_next gen_next(gen_session *g, struct gen_step *st)
{
    if (g->done) return GEN_DONE;
    if (g->t_start == 0) g->t_start = nb_now_s();
    const bool argmax_ok = g->cfg.sp.temperature <= 0.0f && g->cfg.sp.presence_penalty == 0.0f && !g->dump && !g->cfg.constrain &&
                           !g->level;
    if (g->phase == GEN_PREFILL) {
        /* to the next multiple of chunk (from 0: a resumed prefill keeps the uncached one's grid), or the cut */
        size_t end = g->cfg.chunk ? (g->at / g->cfg.chunk + 1) * g->cfg.chunk : g->cfg.n_prompt;
        if (end > g->cfg.n_prompt) end = g->cfg.n_prompt;
        if (g->cut > g->at && g->cut < end) end = g->cut;
        if (g->cut2 > g->at && g->cut2 < end) end = g->cut2;
        g->pending = end - g->at;
        *st = (struct gen_step){GEN_PREFILL, g->prompt + g->at, (int)g->pending, 1, argmax_ok};
    } else {
        g->pending = 1;
        *st = (struct gen_step){GEN_DECODE, &g->out[g->made - 1], 1, 1, argmax_ok};
    }
    return GEN_EVAL;
}

void gen_resume(gen_session *g, size_t at, size_t cut, size_t cut2)
{
    g->at = at < g->cfg.n_prompt ? at : 0;
    g->cut = cut, g->cut2 = cut2;
}

size_t gen_prefilled(const gen_session *g) { return g->at; }

void gen_cancel(gen_session *g)
{
    /* Also after the budget's last token (the driver's reason wins, as the
     * old loops had it), not after a stop id: the driver saw no token then. */
    if (!g->done) g->t_end = nb_now_s();
    if (!g->done || strcmp(g->why, "stop token")) g->done = true, g->why = "hook";
}

/* The budget spent, or a stop id: done. */
static void end(gen_session *g, const char *why)
{
    g->done = true, g->why = why, g->t_end = nb_now_s();
}

int gen_prepare(gen_session *g, char *err, size_t errlen)
{
    if (!g->cfg.constrain || g->allowed_ready || g->done) return 0;
    const size_t words = ((size_t)g->cfg.n_vocab + 31) / 32;
    if (g->armed) {
        if (gram_matcher_mask(g->cfg.constrain, g->allowed)) return nb_errf(err, errlen, NB_ENOMEM, "out of memory (the grammar's mask)");
    } else { /* thinking: anything but the end of the turn */
        memset(g->allowed, 0xff, words * sizeof *g->allowed);
        for (int i = 0; i < g->cfg.n_stop; i++) g->allowed[g->cfg.stop_ids[i] >> 5] &= ~(1u << (g->cfg.stop_ids[i] & 31));
    }
    g->allowed_ready = true;
    return 0;
}

/* One decode step's sampling from row (logits or *argmax), as gen_feed does
 * it: the budget, the logits file, the token (*id); false when the
 * generation ended (the budget) or failed (*rc). */
static bool pick_row(gen_session *g, const float *logits, const int32_t *argmax, int32_t *id, int *rc, char *err, size_t errlen)
{
    if (g->made >= g->cfg.budget) return end(g, "length"), false;
    const size_t V = (size_t)g->cfg.n_vocab;
    if (g->dump && fwrite(logits, sizeof *logits, V, g->dump) != V) {
        *rc = nb_errf(err, errlen, NB_EIO, "writing %s failed", g->logits_tmp);
        return false;
    }
    if (g->cfg.constrain) {
        if (!logits) return *rc = nb_errf(err, errlen, NB_EINVAL, "a constrained step needs its logits, not an argmax"), false;
        if ((*rc = gen_prepare(g, err, errlen))) return false;
        *id = sampling_sample_masked(g->smp, logits, g->allowed);
        g->allowed_ready = false;
        if (*id < 0) return end(g, "grammar"), false;
        if (g->armed && gram_matcher_accept(g->cfg.constrain, *id)) { /* the mask allowed it: cannot happen */
            *rc = nb_errf(err, errlen, NB_EINVAL, "the grammar refused token %d that its mask allowed", *id);
            return false;
        }
        if (!g->armed && *id == g->cfg.constrain_after) g->armed = true;
    } else {
        *id = argmax ? *argmax : sampling_sample(g->smp, logits);
    }
    return true;
}

/* The token of a step joins the output (the presence penalty sees it), then the stop rule; false when that ended it. */
static bool take(gen_session *g, int32_t id, struct gen_event *ev)
{
    g->out[g->made++] = id;
    sampling_accept(g->smp, id);
    ev->token = true, ev->id = id, ev->index = g->made - 1;
    if (!g->cfg.ignore_stop && is_stop(g, id)) ev->stop = true, end(g, "stop token");
    else if (g->made == g->cfg.budget) end(g, "length");
    return !g->done;
}

static bool sample_row(gen_session *g, const float *logits, const int32_t *argmax, struct gen_event *ev, int *rc,
                       char *err, size_t errlen)
{
    *ev = (struct gen_event){.prefill_done = g->cfg.n_prompt, .prefill_total = g->cfg.n_prompt};
    int32_t id;
    return pick_row(g, logits, argmax, &id, rc, err, errlen) && take(g, id, ev);
}

int gen_feed(gen_session *g, const float *logits, const int32_t *argmax, struct gen_event *ev, char *err, size_t errlen)
{
    *ev = (struct gen_event){.prefill_total = g->cfg.n_prompt};
    if (g->done || !g->pending) return nb_errf(err, errlen, NB_EINVAL, "gen_feed: no step handed out");
    if (g->phase == GEN_PREFILL) {
        g->at += g->pending, g->pending = 0;
        ev->prefill_done = g->at;
        if (g->at < g->cfg.n_prompt) return 0;
        g->phase = GEN_DECODE, g->t_prefilled = nb_now_s();
    }
    g->pending = 0;
    int rc = 0;
    sample_row(g, logits, argmax, ev, &rc, err, errlen);
    return rc;
}

int gen_feed_verify(gen_session *g, int n_drafts, const int32_t *drafts, const float *logits, const int32_t *argmax,
                    struct gen_event *ev, int *n_ev, int *accepted, char *err, size_t errlen)
{
    *n_ev = 0, *accepted = 0;
    if (g->done || !g->pending || g->phase != GEN_DECODE)
        return nb_errf(err, errlen, NB_EINVAL, "gen_feed_verify: no decode step handed out");
    if (g->level && !logits) return nb_errf(err, errlen, NB_EINVAL, "gen_feed_verify: accuracy level 1-2 needs the logits");
    g->pending = 0;
    const size_t V = (size_t)g->cfg.n_vocab;
    const long long made0 = g->made;
    int rc = 0, nongreedy = 0, kept = 0; /* kept: drafts that became tokens (the budget's last one too) */
    for (int i = 0; i <= n_drafts; i++) {
        const float *row = logits ? logits + i * V : NULL;
        ev[*n_ev] = (struct gen_event){.prefill_done = g->cfg.n_prompt, .prefill_total = g->cfg.n_prompt};
        int32_t id;
        if (!pick_row(g, row, argmax ? argmax + i : NULL, &id, &rc, err, errlen)) break;
        if (i < n_drafts && id != drafts[i] && g->level && nongreedy < g->level->max_per_block &&
            spec_level_admits(g->level, row, g->cfg.n_vocab, g->cfg.sp.temperature, drafts[i], NULL, NULL))
            id = drafts[i], nongreedy++; /* the level's rule keeps the draft */
        const bool more = take(g, id, &ev[(*n_ev)++]);
        if (i == n_drafts || id != drafts[i]) break;
        kept++;
        if (!more) break;
        (*accepted)++;
    }
    if (rc) return rc;
    spec_stats_add(&g->spec, n_drafts, kept, (int)(g->made - made0), nongreedy);
    return 0;
}

long long gen_made(const gen_session *g) { return g->made; }

const int32_t *gen_out(const gen_session *g) { return g->out; }

int gen_accuracy_level(const gen_session *g) { return g->level ? g->cfg.accuracy_level : 3; }

struct spec_stats *gen_spec_stats(gen_session *g) { return &g->spec; }

/* The context's i-th id: the prompt, then what was generated. */
static int32_t ctx_id(const gen_session *g, size_t i)
{
    return i < g->cfg.n_prompt ? g->prompt[i] : g->out[i - g->cfg.n_prompt];
}

int gen_lookup_drafts(const gen_session *g, int n, int32_t *out)
{
    const size_t len = g->cfg.n_prompt + (size_t)g->made;
    for (size_t m = 3; m >= 1; m--) {
        if (len <= m) continue;
        for (size_t end = len - 1; end-- > m - 1;) { /* a match ending at end, before the context's own end */
            size_t j = 0;
            while (j < m && ctx_id(g, end - j) == ctx_id(g, len - 1 - j)) j++;
            if (j < m) continue;
            int k = 0;
            while (k < n && end + 1 + (size_t)k < len) out[k] = ctx_id(g, end + 1 + k), k++;
            if (k > 0) return k;
        }
    }
    return 0;
}

int gen_finish(gen_session *g, struct gen_result *r, char *err, size_t errlen)
{
    double t_end = g->t_end ? g->t_end : nb_now_s(), t_pre = g->t_prefilled ? g->t_prefilled : t_end;
    *r = (struct gen_result){g->out, g->made, g->why, g->t_start ? t_pre - g->t_start : 0, t_end - t_pre, &g->spec,
                             gen_accuracy_level(g)};
    if (!g->done || !g->dump) return 0;
    int bad = fclose(g->dump) != 0;
    g->dump = NULL;
    if (!bad && rename(g->logits_tmp, g->logits_path)) bad = 1;
    if (bad) {
        remove(g->logits_tmp);
        return nb_errf(err, errlen, NB_EIO, "cannot write %s", g->logits_path);
    }
    return 0;
}
