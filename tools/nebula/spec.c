/* spec.c — `nebula generate --spec mtp`: speculative decoding on a local
 * backend (issue 16; ARCHITECTURE.md §5).
 *
 * Each pass: the MTP block drafts n tokens from the last accepted state
 * (gw_mtp_draft: the trunk's wide state at position p−1 with the pending
 * token at p, fed back n times); the trunk evaluates the pending token and
 * the drafts as one verify window (gw_eval_args.verify: every row a decode
 * step's logits, the state before it kept); core/gen samples the rows in
 * order and keeps a draft only when the token sampled for its position is
 * the draft itself (gen_feed_verify), so the output is exactly the
 * non-speculative one, greedy or sampled, whatever the drafts; the sequence
 * goes back to the accepted prefix (gw_seq_truncate into the window:
 * nothing recomputed), and the window's wide row of the last accepted
 * position is the next pass's MTP input.  The MTP block's own K/V follows:
 * gw_mtp_draft drops its entries from the position it starts at.  An
 * oracle (struct spec_oracle) can stand in for the MTP block, to measure
 * and test the loop at a chosen acceptance.  The window is fixed (--draft N)
 * or adaptive: core/gen/window.h picks each pass's N from the last ones.
 * --spec auto drafts by prompt lookup in the passes where its measured
 * tokens a ms beat the MTP block's (core/gen/spec.h's spec_auto), the MTP
 * block otherwise; the wide row of every window is kept either way, so the
 * MTP block can take over at any pass.  --spec-coverage τ verifies with the
 * resident experts only (gw_eval_args.coverage) and counts the cases A/B/C
 * (core/gen/spec.h); case B keeps the window (window_keep).  At accuracy level 1 or 2 core/gen
 * may keep a near-miss draft (spec.h's rule): the rows are logits then. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gen/gen.h"
#include "core/gen/spec.h"
#include "core/gen/window.h"
#include "core/util/clock.h"
#include "tools/nebula/cli.h"

/* splitmix64: the oracle's corruption draws */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The oracle's drafts for generated tokens k … k+n-1 (past its ids: their last, corrupted or not). */
static void oracle_drafts(const struct spec_oracle *o, uint64_t *rng, long long k, int n, int64_t V, int32_t *out)
{
    for (int i = 0; i < n; i++) {
        const size_t at = (size_t)(k + i) < o->n ? (size_t)(k + i) : o->n - 1;
        int32_t id = o->ids[at];
        if ((double)(next_u64(rng) >> 11) / 9007199254740992.0 < o->corrupt) id = (int32_t)((id + 1) % V);
        out[i] = id;
    }
}

int cli_spec_decode(struct cli_model *cm, struct gen_session *g, float *wide, int n_draft, int64_t n_ctx,
                    const struct spec_source *src, void (*emit)(void *, int32_t), void *ctx)
{
    const struct model_hparams *hp = &cm->m->hp;
    const int64_t V = hp->n_vocab, W = model_wide(hp);
    struct window_ctl wc;
    const bool adaptive = n_draft == 0;
    if (adaptive) {
        window_init(&wc, 4, WINDOW_MAX);
        n_draft = WINDOW_MAX; /* the buffers' size */
    }
    int32_t *win = malloc((size_t)(n_draft + 1) * sizeof *win), *arg = malloc((size_t)(n_draft + 1) * sizeof *arg);
    float *logits = malloc((size_t)((n_draft + 1) * V) * sizeof *logits), *wides = malloc((size_t)((n_draft + 1) * W) * sizeof *wides);
    struct gen_event *ev = malloc((size_t)(n_draft + 1) * sizeof *ev);
    char err[1024];
    int rc = win && arg && logits && wides && ev ? CLI_OK : CLI_FAIL;
    if (rc) fprintf(stderr, "nebula: out of memory\n");
    struct gen_step st;
    const struct spec_oracle *oracle = src->oracle; /* SPEC_ORACLE's drafts, or auto's stand-in for the MTP block */
    uint64_t rng = oracle ? oracle->seed : 0;
    struct spec_auto au = {0};
    long long offered = 0; /* passes in which lookup had drafts (auto chose between the two) */
    struct spec_stats *ss = gen_spec_stats(g);
    while (rc == CLI_OK && gen_next(g, &st) == GEN_EVAL) {
        const int64_t pos = gw_seq_pos(cm->seq);
        int n = adaptive ? wc.n : n_draft;
        const double t0 = nb_now_s();
        if (pos + 1 + n > n_ctx) n = (int)(n_ctx - pos - 1); /* the window must fit the context */
        if (n < 0) n = 0;
        win[0] = st.ids[0];
        int from = src->kind == SPEC_LOOKUP ? SPEC_SRC_LOOKUP : src->kind == SPEC_ORACLE ? SPEC_SRC_OTHER : SPEC_SRC_MTP;
        if (src->kind == SPEC_LOOKUP || src->kind == SPEC_AUTO) {
            const int found = gen_lookup_drafts(g, n, win + 1);
            offered += found > 0;
            if (src->kind == SPEC_LOOKUP || spec_auto_pick(&au, found, n) == SPEC_SRC_LOOKUP) n = found, from = SPEC_SRC_LOOKUP;
        }
        if (from != SPEC_SRC_LOOKUP && oracle) oracle_drafts(oracle, &rng, gen_made(g), n, V, win + 1);
        else if (from == SPEC_SRC_MTP && n > 0 && gw_mtp_draft(cm->seq, win[0], wide, pos, n, win + 1, NULL, err, sizeof err)) {
            fprintf(stderr, "\nnebula: drafting failed: %s\n", err);
            rc = CLI_FAIL;
            break;
        }
        uint8_t handoff[WINDOW_MAX + 1];
        struct gw_eval_args a = {.tokens = win, .n_tokens = n + 1, .logits_rows = GW_ROWS_ALL,
                                 .logits = st.argmax_ok ? NULL : logits, .argmax = st.argmax_ok ? arg : NULL,
                                 .wide_rows = GW_ROWS_ALL, .wide = wides, .verify = true, .coverage = src->coverage,
                                 .resident = src->resident, .handoff = src->coverage > 0 ? handoff : NULL};
        int n_ev = 0, acc = 0;
        if (gw_eval(cm->seq, &a, err, sizeof err) ||
            gen_feed_verify(g, n, win + 1, st.argmax_ok ? NULL : logits, st.argmax_ok ? arg : NULL, ev, &n_ev, &acc, err,
                            sizeof err) ||
            gw_seq_truncate(cm->seq, pos + acc + 1, err, sizeof err)) {
            fprintf(stderr, "\nnebula: a verify window failed: %s\n", err);
            rc = CLI_FAIL;
            break;
        }
        memcpy(wide, wides + (int64_t)acc * W, (size_t)W * sizeof *wide); /* the last accepted position's state */
        for (int i = 0; i < n_ev; i++)
            if (!ev[i].stop) emit(ctx, ev[i].id);
        const double dt = nb_now_s() - t0;
        ss->by_src[from]++;
        if (src->kind == SPEC_AUTO) spec_auto_update(&au, from, n, acc, dt);
        const int sc = src->coverage > 0 ? spec_stats_case(ss, n, acc, handoff) : -1;
        if (adaptive && sc == SPEC_CASE_B) window_keep(&wc, n, n_ev, dt); /* case B: the window kept */
        else if (adaptive) window_update(&wc, n, acc, n_ev, dt);
    }
    if (src->kind == SPEC_AUTO)
        fprintf(stderr, "nebula: speculative: auto: lookup chosen in %lld of the %lld passes it had drafts for; measured "
                        "tokens a ms at 4 drafts: lookup %.4g (%lld passes), %s %.4g (%lld)\n", au.passes[SPEC_SRC_LOOKUP], offered,
                spec_auto_rate(&au, SPEC_SRC_LOOKUP, 4), au.passes[SPEC_SRC_LOOKUP], oracle ? "the oracle (for mtp)" : "mtp",
                spec_auto_rate(&au, SPEC_SRC_MTP, 4), au.passes[SPEC_SRC_MTP]);
    if (adaptive) window_free(&wc);
    free(win), free(arg), free(logits), free(wides), free(ev);
    return rc;
}

void cli_spec_print(const struct cli_model *cm, struct gen_session *g)
{
    const struct spec_stats *s = gen_spec_stats(g);
    char traj[320], line[512];
    fprintf(stderr, "nebula: speculative: %lld passes, %.2f tokens a pass, %lld of %lld drafts accepted (%.1f %%); "
                    "rows evaluated %llu, replayed %llu; windows %s\n",
            s->passes, s->passes ? (double)s->tokens / (double)s->passes : 0.0, s->accepted, s->drafted,
            s->drafted ? 100.0 * (double)s->accepted / (double)s->drafted : 0.0,
            (unsigned long long)gw_backend_rows_evaluated(cm->be), (unsigned long long)gw_backend_rows_replayed(cm->be),
            spec_stats_trajectory(s, traj, sizeof traj));
    size_t at = 0;
    for (int i = 0; i < SPEC_MAX_POS && s->drafted_at[i] && at + 24 < sizeof line; i++)
        at += (size_t)snprintf(line + at, sizeof line - at, "%s%d %.0f%%", i ? ", " : "", i + 1,
                               100.0 * (double)s->accepted_at[i] / (double)s->drafted_at[i]);
    if (!at) snprintf(line, sizeof line, "none drafted");
    const struct model_hparams *hp = &cm->m->hp;
    fprintf(stderr, "nebula: speculative: experts computed %llu, skipped %llu, of k x MoE layers x rows %llu; coverage cases "
                    "A %lld, B %lld, C %lld, handoff rows %lld\n",
            (unsigned long long)gw_backend_experts_computed(cm->be), (unsigned long long)gw_backend_experts_skipped(cm->be),
            (unsigned long long)hp->n_expert_used * (unsigned long long)hp->n_layer * gw_backend_rows_evaluated(cm->be),
            s->cases[SPEC_CASE_A], s->cases[SPEC_CASE_B], s->cases[SPEC_CASE_C], s->handoff_rows);
    fprintf(stderr, "nebula: speculative: accuracy level %d, %lld non-greedy drafts accepted; drafters mtp %lld, lookup %lld, "
                    "oracle %lld passes; accepted by position: %s\n",
            gen_accuracy_level(g), s->nongreedy, s->by_src[SPEC_SRC_MTP], s->by_src[SPEC_SRC_LOOKUP], s->by_src[SPEC_SRC_OTHER],
            line);
}
