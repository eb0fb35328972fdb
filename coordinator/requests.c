/* requests.c — the generation requests, one queue, each a state machine.
 *
 * ctl.sock's generate (generate.c) and the HTTP API's jobs (api_run.c) are
 * submitted here with callbacks (struct coord_request_ops) and run one at a
 * time, first come first served.  The one running advances on events only:
 *
 *   QUEUED ─on_start─▶ WAIT_WORKERS ─all ready─▶ RESET ─answer─▶ EVAL ⟲ ─done─▶ (on_done)
 *                          ▲                          │ error, death, timeout
 *                          └──── once ── RETRY_WAIT ◀─┘   (else on_done with the error)
 *
 * The events: the step ring's answer (coord_requests_on_step, from step.c's
 * eventfd), a worker's state change (coord_requests_on_workers, registered
 * by main.c with workers.c) and this file's timers (the step's 600 s, the
 * 60 s for workers to be ready, the 200 ms in which a failure waits to see
 * whether a worker died).  The generation itself — prompt, sampler, stop
 * rule, budget, timings — is core/gen's session, as in `nebula generate`.
 *
 * A ctl restart goes between two requests: it begins when none runs
 * (on_idle), and the next one waits in WAIT_WORKERS until it is answered.
 *
 * A generation restarts from RESET and a fresh sampler, so running it again
 * gives the same ids: an attempt that fails while a worker died (the
 * gpu-worker, the cpu-moe-worker or the pager: the 200 ms let its death be
 * seen) is run once more from the start; the hooks see the same token
 * indices again and skip those they had.  A second failure is the error. */
#include "coordinator/coord.h"

#include "core/event/event.h"
#include "core/gen/gen.h"
#include "core/gen/spec.h"
#include "core/gen/window.h"
#include "core/model/model.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/err.h"
#include "core/util/log.h"
#include "gpu-worker/step_proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEP_TIMEOUT_S 600.0
#define RETRY_WAIT_S 0.2

/* RQ_LOAD, RQ_SAVE, RQ_DROP: the prompt cache's steps (cache.c): a checkpoint
 * loaded instead of the RESET, one saved where the prefill reaches each cut
 * (on the grid, and at the generation prompt's role header), one at the end
 * (the outcome already given to the owner: the state after the answer's
 * last token fed back), then the drops its budgets ask for. */
enum rq_state { RQ_QUEUED, RQ_WAIT_WORKERS, RQ_RESET, RQ_EVAL, RQ_RETRY_WAIT, RQ_LOAD, RQ_SAVE, RQ_DROP };

struct coord_request {
    struct coord_request_ops ops;
    void *ctx;
    gen_session *gen;
    gram_matcher *constrain; /* structured output: the session's matcher (NULL: none), from grammars.c */
    int constrain_slot;      /* its cache entry, or -1 */
    size_t n_prompt;
    int32_t *ids;          /* the prompt (the cache's index compares and keeps ids); NULL: no cache for it */
    uint32_t ckpt;         /* the checkpoint loaded or being saved */
    int64_t cached;        /* prompt ids the loaded checkpoint held (0: none) */
    int64_t cut;           /* where the prefill saves a checkpoint on the grid (0: nowhere) */
    int64_t head;          /* and one anywhere: after the generation prompt's "<|im_start|>assistant\n" (0: none) */
    int chunk;             /* prefill ids per step (the grid the cache's rule needs) */
    size_t stable;         /* the prompt's part a next turn repeats: up to its last <|im_start|> (else all of it) */
    size_t role_end;       /* the end of "<|im_start|>assistant\n" after stable, when the prompt has it (else 0) */
    bool saved, saved_head;
    bool anywhere;         /* the loaded checkpoint is of grid 0: so is every state of this attempt */
    int64_t save_n;        /* the save in flight: its positions, and its grid (0: anywhere) */
    int save_grid;
    int32_t *end_ids;      /* the end checkpoint's ids (prompt, then the answer's tokens fed back) */
    bool reported;         /* on_done was called (the end checkpoint is being saved) */
    bool no_end;           /* the spec's no_end_ckpt */
    enum rq_state state;
    enum gen_phase phase;  /* of the step in flight */
    bool argmax;           /* the step in flight asked for the argmax only */
    bool want_logits;      /* the request wants every row (logprobs): never the argmax only */
    int attempt;
    uint64_t deaths;       /* c->deaths when the attempt started */
    pid_t gw_pid;          /* the gpu-worker the attempt runs on */
    long long timer;       /* the state's deadline (0: none) */
    /* speculative decoding (c->spec): the window controller, and what the last window left (the
     * counters are the session's, gen_spec_stats) */
    struct window_ctl wc;
    struct spec_auto au;   /* --spec auto's measurements */
    int keep;              /* the previous window's accepted drafts, sent with the next one (-1: none) */
    int n_draft;           /* drafts in the window in flight */
    int src;               /* its drafter (SPEC_SRC_MTP or _LOOKUP) */
    double t_step;         /* when it was sent */
    char err[1024];
    struct coord_request *next;
};

static void advance(struct coord *c);

/* A step of the request is in flight (its answer awaited). */
static bool stepping(const struct coord_request *r)
{
    return r->state == RQ_RESET || r->state == RQ_EVAL || r->state == RQ_LOAD || r->state == RQ_SAVE || r->state == RQ_DROP;
}

static void set_timer(struct coord *c, struct coord_request *r, double s, event_timer_fn fn)
{
    if (r->timer) event_del_timer(c->loop, r->timer);
    r->timer = fn ? event_add_timer(c->loop, s, fn, c) : 0;
    if (r->timer < 0) r->timer = 0; /* the table is full: the deadline is lost, the events still come */
}

/* The head's outcome to its owner (once). */
static void report(struct coord *c, int rc, bool cancelled)
{
    struct coord_request *r = c->rq_head;
    if (r->reported) return;
    r->reported = true;
    struct gen_result res = {0};
    char err[256];
    if (r->gen && gen_finish(r->gen, &res, err, sizeof err) && !rc) rc = NB_EIO, snprintf(r->err, sizeof r->err, "%s", err);
    struct coord_outcome o = {.rc = rc, .cancelled = cancelled, .res = r->gen ? &res : NULL, .n_prompt = r->n_prompt, .err = r->err,
                              .n_cached = (size_t)r->cached};
    r->ops.on_done(r->ctx, &o);
}

/* The head leaves the queue: its outcome to its owner, then the next one. */
static void finish(struct coord *c, int rc, bool cancelled)
{
    struct coord_request *r = c->rq_head;
    set_timer(c, r, 0, NULL);
    if (stepping(r)) coord_step_abandon(c);
    report(c, rc, cancelled); /* still the head meanwhile: a request it submits waits */
    c->rq_head = r->next;
    if (!c->rq_head) c->rq_tail = NULL;
    const struct spec_stats *ss = r->gen ? gen_spec_stats(r->gen) : NULL;
    if (ss && ss->passes) {
        nb_log("speculative: %lld windows, %.2f tokens a window, %lld of %lld drafts accepted (%lld by accuracy level %d), "
               "drafters mtp %lld lookup %lld, last window %d", ss->passes, (double)ss->tokens / (double)ss->passes, ss->accepted,
               ss->drafted, ss->nongreedy, gen_accuracy_level(r->gen), ss->by_src[SPEC_SRC_MTP], ss->by_src[SPEC_SRC_LOOKUP], r->wc.n);
        spec_stats_merge(&c->spec_total, ss);
    }
    gen_free(r->gen);
    if (r->constrain) coord_grammar_give(c, r->constrain, r->constrain_slot);
    window_free(&r->wc);
    free(r->ids), free(r->end_ids);
    free(r);
    if (c->on_idle) c->on_idle(c); /* none runs now: a ctl restart that waited begins */
    advance(c);
}

static double on_wait_timeout(event_loop *l, void *ctx);
static double on_retry_timeout(event_loop *l, void *ctx);

/* An attempt failed (r->err says why): retried once when a worker died. */
static void attempt_failed(struct coord *c)
{
    struct coord_request *r = c->rq_head;
    if (r->reported) { /* the end checkpoint's save: the answer was given, nothing to retry */
        nb_log("prompt cache: the end checkpoint was not saved: %s", r->err);
        return finish(c, 0, false);
    }
    if (stepping(r)) coord_step_abandon(c);
    r->state = RQ_RETRY_WAIT;
    if (c->deaths == r->deaths) return set_timer(c, r, RETRY_WAIT_S, on_retry_timeout);
    if (r->attempt == 1) return finish(c, NB_EIO, false);
    nb_log("generate: %s; a worker died: retrying once", r->err);
    r->attempt = 1;
    r->state = RQ_WAIT_WORKERS;
    set_timer(c, r, COORD_READY_TIMEOUT_S, on_wait_timeout);
    coord_requests_on_workers(c);
}

static double on_step_timeout(event_loop *l, void *ctx);

static void send_step(struct coord *c, uint32_t op, const int32_t *ids, int n, bool argmax, uint32_t flags)
{
    struct coord_request *r = c->rq_head;
    r->argmax = argmax;
    r->t_step = coord_now();
    if (coord_step_send(c, op, ids, n, flags | (argmax ? STEP_FLAG_ARGMAX : 0), r->err, sizeof r->err)) {
        r->state = RQ_EVAL; /* so that attempt_failed abandons it */
        return attempt_failed(c);
    }
    set_timer(c, r, STEP_TIMEOUT_S, on_step_timeout);
    /* While the gpu-worker evaluates, the structured output's mask for its answer. */
    if (!r->reported && gen_prepare(r->gen, r->err, sizeof r->err)) return attempt_failed(c);
}

static double on_step_timeout(event_loop *l, void *ctx)
{
    struct coord *c = ctx;
    (void)l;
    c->rq_head->timer = 0;
    snprintf(c->rq_head->err, sizeof c->rq_head->err, "no answer from the gpu-worker in %.0f s", STEP_TIMEOUT_S);
    attempt_failed(c);
    return EVENT_TIMER_END;
}

static void save_at(struct coord *c, int64_t n, int grid);

/* The generation is over: the outcome to the owner, then a checkpoint of the state the decode steps
 * left (the prompt and every generated token but the last, which was never fed), keyed by those ids, so
 * that a next prompt extending them (an agent's tool loop, a completion continued, a chained leg)
 * prefills only what follows.  Not with verify windows (the sequence may hold a window's rejected
 * drafts until the next one's keep), not when its owner says no prompt will extend it (a chat without
 * tools), nor when the prefill did not finish or it exists already. */
static void done(struct coord *c)
{
    struct coord_request *r = c->rq_head;
    const long long made = gen_made(r->gen);
    const int64_t n = (int64_t)r->n_prompt + made - 1;
    if (r->reported || !c->cache || c->cache_cfg.grid_only || !r->ids || r->no_end || c->spec || made < 2 ||
        gen_prefilled(r->gen) != r->n_prompt)
        return finish(c, 0, false);
    if (!(r->end_ids = malloc((size_t)n * sizeof *r->end_ids))) return finish(c, 0, false);
    memcpy(r->end_ids, r->ids, r->n_prompt * sizeof *r->ids);
    memcpy(r->end_ids + r->n_prompt, gen_out(r->gen), (size_t)(made - 1) * sizeof *r->ids);
    if (coord_cache_has(c, r->end_ids, n)) return finish(c, 0, false);
    report(c, 0, false);
    save_at(c, n, 0);
}

/* The next step of the session, or its end. */
static void next_step(struct coord *c)
{
    struct coord_request *r = c->rq_head;
    struct gen_step st;
    if (gen_next(r->gen, &st) == GEN_DONE) return done(c);
    r->state = RQ_EVAL, r->phase = st.phase;
    if (c->spec && st.phase == GEN_DECODE) { /* a verify window: [t0, n, keep, source, drafts…] */
        int32_t msg[4 + STEP_MAX_DRAFT];
        int n = r->wc.n;
        const int64_t room = c->n_ctx - (int64_t)r->n_prompt - gen_made(r->gen) - 1; /* the window must fit the context */
        if (n > room) n = room > 0 ? (int)room : 0;
        bool given = c->spec == COORD_SPEC_LOOKUP;
        if (given || c->spec == COORD_SPEC_AUTO) {
            const int found = gen_lookup_drafts(r->gen, n, msg + 4);
            if (given || spec_auto_pick(&r->au, found, n) == SPEC_SRC_LOOKUP) n = found, given = true;
        }
        msg[0] = st.ids[0], msg[1] = n, msg[2] = r->keep, msg[3] = given ? STEP_DRAFT_GIVEN : STEP_DRAFT_MTP;
        r->n_draft = n, r->src = given ? SPEC_SRC_LOOKUP : SPEC_SRC_MTP;
        return send_step(c, STEP_SPEC, msg, 4 + (given ? n : 0), st.argmax_ok && !r->want_logits, 0);
    }
    const bool mtp_input = c->spec == COORD_SPEC_MTP || c->spec == COORD_SPEC_AUTO; /* the MTP block's first input */
    send_step(c, STEP_EVAL, st.ids, st.n_ids, st.argmax_ok && !r->want_logits, mtp_input ? STEP_FLAG_WIDE : 0);
}

static void start_attempt(struct coord *c)
{
    struct coord_request *r = c->rq_head;
    struct coord_worker *w = coord_worker_by_role(c, "gpu-worker");
    r->deaths = c->deaths, r->gw_pid = w->pid;
    if (gen_restart(r->gen, r->err, sizeof r->err)) return finish(c, NB_EIO, false);
    r->keep = -1;
    memset(&r->au, 0, sizeof r->au);
    window_free(&r->wc);
    window_init(&r->wc, 4, STEP_MAX_DRAFT);
    r->cached = 0, r->cut = r->head = 0, r->saved = r->saved_head = r->anywhere = false;
    uint32_t id;
    int64_t pos;
    if (c->cache && r->ids && coord_cache_match(c, r->ids, r->n_prompt, r->chunk, &id, &pos, &r->anywhere)) { /* resume from a checkpoint */
        const int32_t msg[2] = {(int32_t)id, (int32_t)pos};
        r->state = RQ_LOAD, r->ckpt = id, r->cached = pos;
        return send_step(c, STEP_LOAD, msg, 2, false, 0);
    }
    r->state = RQ_RESET;
    send_step(c, STEP_RESET, NULL, 0, false, 0);
}

static double on_wait_timeout(event_loop *l, void *ctx)
{
    struct coord *c = ctx;
    (void)l;
    c->rq_head->timer = 0;
    snprintf(c->rq_head->err, sizeof c->rq_head->err, "workers not ready after %.0f s", COORD_READY_TIMEOUT_S);
    finish(c, NB_EIO, false);
    return EVENT_TIMER_END;
}

static double on_retry_timeout(event_loop *l, void *ctx)
{
    struct coord *c = ctx;
    (void)l;
    c->rq_head->timer = 0;
    finish(c, NB_EIO, false); /* nobody died within 200 ms: the failure is the answer */
    return EVENT_TIMER_END;
}

/* Starts queued requests until one runs or the queue is empty. */
static void advance(struct coord *c)
{
    while (c->rq_head && c->rq_head->state == RQ_QUEUED) {
        struct coord_request *r = c->rq_head;
        if (r->ops.on_start && r->ops.on_start(r->ctx)) { /* cancelled while it waited */
            finish(c, 0, true);
            continue;
        }
        r->state = RQ_WAIT_WORKERS;
        set_timer(c, r, COORD_READY_TIMEOUT_S, on_wait_timeout);
        coord_requests_on_workers(c);
    }
}

void coord_requests_on_workers(struct coord *c)
{
    struct coord_request *r = c->rq_head;
    if (!r) return;
    if (r->state == RQ_WAIT_WORKERS) {
        if (c->restart.w) return; /* a ctl restart is under way: its successor first */
        int ready = 0;
        for (int i = 0; i < c->n_workers; i++) {
            if (c->w[i].state == W_FAILED) {
                snprintf(r->err, sizeof r->err, "%s cannot start (see %s)", c->w[i].role, c->w[i].log_path);
                return finish(c, NB_EIO, false);
            }
            ready += c->w[i].state == W_READY;
        }
        if (ready == c->n_workers) start_attempt(c);
    } else if (stepping(r)) {
        struct coord_worker *w = coord_worker_by_role(c, "gpu-worker");
        if (w->pid == r->gw_pid && w->state == W_READY) return;
        snprintf(r->err, sizeof r->err, "the gpu-worker (pid %d) died during the request; it is being restarted", (int)r->gw_pid);
        attempt_failed(c);
    } else if (r->state == RQ_RETRY_WAIT && c->deaths != r->deaths) {
        attempt_failed(c);
    }
}

/* The prefill starts after `cached` ids (a checkpoint loaded, or 0), saving one at each cut (the grid's,
 * the role header's). */
static void prefill_from(struct coord *c, int64_t cached)
{
    struct coord_request *r = c->rq_head;
    r->cached = cached;
    if (r->ops.on_cached) r->ops.on_cached(r->ctx, (size_t)cached);
    if (r->ids) coord_cache_count(c, cached > 0, cached, (int64_t)r->n_prompt - cached); /* cache_prompt false: not a miss either */
    if (cached) nb_log("prompt cache: %lld of the prompt's %zu tokens from checkpoint %08x", (long long)cached, r->n_prompt, r->ckpt);
    r->cut = r->ids ? coord_cache_cut(c, r->stable, r->chunk, cached) : 0;
    const bool head = r->ids && !c->cache_cfg.grid_only && r->role_end > (size_t)cached && (int64_t)r->role_end != r->cut;
    r->head = head ? (int64_t)r->role_end : 0;
    gen_resume(r->gen, (size_t)cached, (size_t)r->cut, (size_t)r->head);
    next_step(c);
}

/* A checkpoint of the sequence now (n positions; grid 0: anywhere). */
static void save_at(struct coord *c, int64_t n, int grid)
{
    struct coord_request *r = c->rq_head;
    r->ckpt = coord_cache_new_id(c), r->state = RQ_SAVE, r->save_n = n, r->save_grid = grid;
    const int32_t msg[3] = {(int32_t)r->ckpt, 1, grid}; /* the file records the grid: 0 is anywhere */
    send_step(c, STEP_SAVE, msg, 3, false, 0);
}

/* After a save or a drop: the next drop the budgets ask for, else the generation goes on. */
static void evict_or_go_on(struct coord *c)
{
    uint32_t id;
    bool file;
    if (!coord_cache_evict(c, &id, &file)) return next_step(c);
    const int32_t msg[2] = {(int32_t)id, file};
    c->rq_head->state = RQ_DROP;
    send_step(c, STEP_DROP, msg, 2, false, 0);
}

/* A cache step's answer: none of them fails the request (a checkpoint that
 * does not load is forgotten and the prompt prefilled from the start). */
static void cache_answer(struct coord *c, const struct coord_step_reply *a)
{
    struct coord_request *r = c->rq_head;
    const bool bad = a->flags & RING_FLAG_ERROR;
    const char *why = bad ? (const char *)a->payload : "";
    char err[300];
    if (r->state == RQ_LOAD && bad) {
        nb_log("prompt cache: checkpoint %08x did not load (%.200s): prefilling from the start", r->ckpt, why);
        coord_cache_forget(c, r->ckpt);
        r->cached = 0, r->state = RQ_RESET;
        return send_step(c, STEP_RESET, NULL, 0, false, 0);
    }
    if (r->state == RQ_LOAD) return r->state = RQ_EVAL, prefill_from(c, r->cached);
    if (r->state == RQ_SAVE) {
        r->state = RQ_EVAL;
        const int32_t *ids = r->reported ? r->end_ids : r->ids;
        if (bad) nb_log("prompt cache: saving checkpoint %08x failed: %.200s", r->ckpt, why);
        else if (coord_cache_saved(c, r->ckpt, ids, r->save_n, r->save_grid, a->payload, a->payload_bytes, err, sizeof err))
            nb_log("prompt cache: %s", err);
        return evict_or_go_on(c);
    }
    if (bad) nb_log("prompt cache: dropping a checkpoint failed: %.200s", why);
    r->state = RQ_EVAL;
    evict_or_go_on(c);
}

/* A RESET or EVAL answer for the head request. */
void coord_requests_on_step(struct coord *c)
{
    struct coord_step_reply a;
    if (!coord_step_take(c, &a)) return;
    struct coord_request *r = c->rq_head;
    if (!r || !stepping(r)) return; /* given up on meanwhile */
    set_timer(c, r, 0, NULL);
    coord_worker_by_role(c, "gpu-worker")->last_beat = coord_now(); /* a sign of life: its heartbeat may be queued behind a long eval */
    const uint32_t V = (uint32_t)c->m->hp.n_vocab;
    const bool window = r->state == RQ_EVAL && c->spec && r->phase == GEN_DECODE;
    const int32_t *wp = a.payload;
    const uint64_t want_w = window ? (1 + (uint64_t)r->n_draft + (uint64_t)(r->n_draft + 1) * (r->argmax ? 1 : V)) * 4 : 0;
    if (!a.rc && (r->state == RQ_LOAD || r->state == RQ_SAVE || r->state == RQ_DROP)) return cache_answer(c, &a);
    if (a.rc) snprintf(r->err, sizeof r->err, "%s", a.err);
    else if (a.flags & RING_FLAG_ERROR) snprintf(r->err, sizeof r->err, "gpu-worker: %.*s", (int)sizeof r->err - 16, (const char *)a.payload);
    else if (window && (a.payload_bytes != want_w || wp[0] != r->n_draft))
        snprintf(r->err, sizeof r->err, "gpu-worker: a verify window of %u bytes (%llu expected)", a.payload_bytes, (unsigned long long)want_w);
    else if (window) r->err[0] = 0;
    else if (r->state == RQ_EVAL && r->argmax && a.payload_bytes != 4) snprintf(r->err, sizeof r->err, "gpu-worker: argmax of %u bytes", a.payload_bytes);
    else if (r->state == RQ_EVAL && !r->argmax && a.payload_bytes != V * 4) snprintf(r->err, sizeof r->err, "gpu-worker: logits of %u bytes", a.payload_bytes);
    else r->err[0] = 0;
    if (r->err[0]) return attempt_failed(c);
    if (r->state == RQ_RESET) return prefill_from(c, 0);
    if (window) { /* the tokens a verify window gives, each through the hooks as a decode step's */
        const int n = r->n_draft;
        const void *rows = wp + 1 + n;
        struct gen_event evs[STEP_MAX_DRAFT + 1];
        int n_ev = 0, acc = 0;
        if (gen_feed_verify(r->gen, n, wp + 1, r->argmax ? NULL : rows, r->argmax ? rows : NULL, evs, &n_ev, &acc, r->err,
                            sizeof r->err))
            return finish(c, NB_EIO, false);
        bool end = false;
        for (int i = 0; i < n_ev && !end; i++) {
            if (!evs[i].stop && r->ops.on_logits && !r->argmax) r->ops.on_logits(r->ctx, evs[i].index, evs[i].id, (const float *)rows + (size_t)i * V);
            if (!evs[i].stop && r->ops.on_token) end = r->ops.on_token(r->ctx, evs[i].index, evs[i].id);
        }
        if (end) gen_cancel(r->gen);
        r->keep = acc;
        const double dt = coord_now() - r->t_step;
        gen_spec_stats(r->gen)->by_src[r->src]++;
        if (c->spec == COORD_SPEC_AUTO) spec_auto_update(&r->au, r->src, n, acc, dt);
        window_update(&r->wc, n, acc, n_ev, dt);
        return next_step(c);
    }
    struct gen_event ev;
    if (gen_feed(r->gen, r->argmax ? NULL : a.payload, r->argmax ? a.payload : NULL, &ev, r->err, sizeof r->err))
        return finish(c, NB_EIO, false);
    /* The hooks: after each prefill step, then for each token that is not a stop id. */
    bool end = r->phase == GEN_PREFILL && r->ops.on_prefill && r->ops.on_prefill(r->ctx, ev.prefill_done, ev.prefill_total);
    if (!end && ev.token && !ev.stop && r->ops.on_logits && !r->argmax) r->ops.on_logits(r->ctx, ev.index, ev.id, a.payload);
    if (!end && ev.token && !ev.stop && r->ops.on_token) end = r->ops.on_token(r->ctx, ev.index, ev.id);
    if (end) gen_cancel(r->gen);
    const int64_t at = r->phase == GEN_PREFILL ? (int64_t)gen_prefilled(r->gen) : 0;
    if (at && at == r->cut && !r->saved && !coord_cache_has(c, r->ids, at)) /* a checkpoint here, on the grid unless resumed off it */
        return r->saved = true, save_at(c, at, r->anywhere ? 0 : r->chunk);
    if (at && at == r->head && !r->saved_head && !coord_cache_has(c, r->ids, at)) /* the next turn's history diverges here */
        return r->saved_head = true, save_at(c, at, 0);
    next_step(c);
}

int coord_request_submit(struct coord *c, const struct coord_request_spec *s, const struct coord_request_ops *ops, void *ctx,
                         char *err, size_t errlen)
{
    struct coord_request *r = calloc(1, sizeof *r);
    if (!r) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    int chunk = coord_request_chunk(c, s->chunk);
    struct gen_config g = {.prompt = s->ids, .n_prompt = s->n, .budget = s->budget, .sp = s->sp, .n_vocab = (int32_t)c->m->hp.n_vocab,
                           .ignore_stop = s->ignore_stop, .chunk = (size_t)chunk, .logits_path = s->logits_out,
                           .accuracy_level = c->spec ? s->accuracy_level : 3};
    g.n_stop = gen_stop_ids(c->tok, g.stop_ids);
    int rc = 0;
    if (s->grammar) {
        rc = coord_grammar_take(c, s, g.n_vocab, g.stop_ids, g.n_stop, &r->constrain, &r->constrain_slot, err, errlen);
        g.constrain = r->constrain, g.constrain_after = s->constrain_after;
    }
    if (!rc) rc = gen_new(&g, &r->gen, err, errlen);
    if (rc) {
        if (r->constrain) coord_grammar_give(c, r->constrain, r->constrain_slot);
        return free(r), rc;
    }
    if (c->cache && !s->no_cache && !(r->ids = malloc(s->n * sizeof *r->ids))) {
        gen_free(r->gen);
        if (r->constrain) coord_grammar_give(c, r->constrain, r->constrain_slot);
        return free(r), nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    }
    if (r->ids) memcpy(r->ids, s->ids, s->n * sizeof *r->ids);
    /* A chat prompt ends with the generation prompt (<|im_start|>assistant, an empty think block…),
     * which the next turn's history renders otherwise: its checkpoint goes at or below that turn's opening. */
    const int32_t im_start = c->tok ? tok_id_of(c->tok, "<|im_start|>") : -1;
    r->stable = s->n; /* no <|im_start|> after the first id: the whole prompt */
    for (size_t i = s->n; r->ids && im_start >= 0 && i-- > 1;)
        if (r->ids[i] == im_start) {
            r->stable = i; /* before it */
            break;
        }
    /* The history re-renders the answer after "<|im_start|>assistant\n" without the generation prompt's
     * think block (core/chat): the next turn shares this prompt up to there, and a checkpoint there
     * leaves it only its new tokens to prefill. */
    int32_t role[32]; /* a small vocabulary spells "assistant" out */
    size_t n_role = 0;
    char terr[128];
    static const char role_text[] = "<|im_start|>assistant\n";
    if (r->ids && c->tok && r->stable < s->n && !tok_encode(c->tok, role_text, sizeof role_text - 1, true, role, 32, &n_role, terr,
                                                               sizeof terr) &&
        n_role && n_role <= 32 && r->stable + n_role < s->n && !memcmp(r->ids + r->stable, role, n_role * sizeof *role))
        r->role_end = r->stable + n_role;
    r->chunk = chunk, r->no_end = s->no_end_ckpt;
    r->ops = *ops, r->ctx = ctx, r->n_prompt = s->n, r->state = RQ_QUEUED, r->want_logits = s->want_logits;
    if (c->rq_tail) c->rq_tail->next = r;
    else c->rq_head = r;
    c->rq_tail = r;
    advance(c);
    return 0;
}

int coord_request_chunk(const struct coord *c, int asked) { return asked > 0 && asked < c->chunk ? asked : c->chunk; }

bool coord_requests_busy(const struct coord *c)
{
    return c->rq_head && c->rq_head->state != RQ_QUEUED && c->rq_head->state != RQ_WAIT_WORKERS;
}

void coord_requests_cancel_all(struct coord *c, const char *why)
{
    while (c->rq_head) {
        snprintf(c->rq_head->err, sizeof c->rq_head->err, "%s", why);
        finish(c, NB_EIO, true);
    }
}
