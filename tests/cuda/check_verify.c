/* check_verify.c — verify windows (gw_eval_args.verify) and the return into
 * them (gw_seq_truncate) on the CUDA backend, against its own decode steps
 * and the CPU reference (issue 16 items 2 and 5; check_backend runs it).
 *
 *   verify-<cfg>   greedy decoding of n tokens as verify windows of 1..17 rows
 *                  whose drafts are the plain run's ids with one forced
 *                  rejection (a wrong draft) at a position that moves from
 *                  window to window (and some windows accepted whole), each
 *                  window truncated back to its accepted prefix and decoding
 *                  continued from there: the ids are the plain greedy run's
 *                  (this backend's and the CPU's), every kept row's logits
 *                  bit-identical to the plain decode step's (each kernel's
 *                  row is independent of the rows beside it: the split-K
 *                  attention's chunks depend on the row's position only),
 *                  within tol of the CPU's, and the counters show no position computed
 *                  twice: rows evaluated = the windows' rows, rows replayed =
 *                  the rows kept by the truncations into a window; with
 *                  graphs on, windows replayed as CUDA graphs (none without).  The cfgs:
 *                  cpu; cuda with CUDA graphs and without; with --remote odd
 *                  experts remote (the hook), and under a VRAM budget (the
 *                  planned total) with ~30 % of the experts remote and with
 *                  none local (zero slots);
 *   verify-rollback  a window of 17 rows truncated to each of its 18
 *                  positions, then 3 decode steps: the logits a run that
 *                  decoded only that prefix gives (within tol, the number
 *                  bit-identical printed), j rows replayed, none evaluated;
 *   verify-coverage  coverage mode (gw_eval_args.coverage; odd experts
 *                  remote, --remote only): a 17-row window at tau 1 gives the
 *                  exact window's logits and skips nothing; at tau 0.6 the
 *                  cuda and cpu backends (the same map, the cpu's resident
 *                  experts its hook's local ones) skip pairs, mark the same
 *                  handoff rows, give logits within tol of each other, and
 *                  computed + the hook's + skipped = k × layers × rows;
 *   verify-refuse  a window of 18 rows refused (NB_EINVAL, the sequence
 *                  usable); two truncations back into one window; below the
 *                  window, on a copy and after a plain eval refused
 *                  (NB_ENOTSUP) where the model keeps recurrent state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"
#include "engine/vram.h"
#include "tests/cuda/check.h"

#define NEXT 3 /* decode steps after a rollback */

struct vcfg {
    const char *name;
    const char *kind;
    bool no_graphs;
    int place;   /* 0: every expert local; 1: odd experts remote; 2: ~30 % remote (hashed); 3: none local */
    bool budget; /* a VRAM budget of exactly the planned total */
};

/* Whether the model keeps recurrent state (a GDN layer or the PLE conv): truncation replays rows. */
static bool recurrent_model(const struct model *m)
{
    for (int i = 0; i < m->hp.n_layer; i++)
        if (m->layers[i].kind == MODEL_LAYER_GDN || m->layers[i].has_ple) return true;
    return false;
}

/* A backend for cfg (its remote hook's map and context in *local, *rc; NULL where none). */
static gw_backend *make_cfg(const struct model *m, const struct vcfg *c, int64_t ctx, uint8_t **local,
                            struct remote_ctx *rc)
{
    const struct model_hparams *hp = &m->hp;
    const int L = hp->n_layer + hp->n_nextn, E = hp->n_expert;
    char err[1024];
    *local = NULL;
    if (c->place) {
        *local = malloc((size_t)L * E);
        for (int l = 0; l < L; l++)
            for (int x = 0; x < E; x++)
                (*local)[l * E + x] = c->place == 1 ? x % 2 == 0 : c->place == 2 ? (x * 2654435761u + l * 40503u) % 10 >= 3 : 0;
    }
    gw_backend *be = NULL;
    if (c->budget) {
        struct gw_vram_parts plan;
        gw_vram_plan(m, *local, ctx, &plan);
        if (gw_vram_dense_bytes(m, &plan.dense, &plan.mtp, err, sizeof err)) die("gw_vram_dense_bytes", err);
        struct gw_backend_params p = {.kind = "cuda", .kernels = kernels, .vram_budget = gw_vram_total(&plan),
                                      .n_ctx = ctx, .local = *local};
        if (gw_backend_create(m, &p, &be, err, sizeof err)) die(c->name, err);
    } else {
        be = make_pl(m, c->kind, c->no_graphs, *local);
    }
    *rc = (struct remote_ctx){m, 0, 0, 0, {0}};
    if (*local) {
        struct gw_moe_remote r = {*local, remote_fn, rc};
        if (gw_backend_set_moe_remote(be, &r, err, sizeof err)) die("remote hook", err);
    }
    return be;
}

/* Plain greedy decoding: n ids, and the logits that chose each (n × V). */
static void plain_run(gw_backend *be, const int32_t *tok, int T, int n, int32_t *ids, float *lg)
{
    const int64_t V = gw_backend_model(be)->hp.n_vocab;
    gw_seq *s = seq(be);
    eval(s, tok, T, GW_ROWS_LAST, lg, GW_ROWS_NONE, NULL, NULL);
    ids[0] = argmax(lg, V);
    for (int i = 1; i < n; i++) {
        eval(s, &ids[i - 1], 1, GW_ROWS_LAST, lg + (int64_t)i * V, GW_ROWS_NONE, NULL, NULL);
        ids[i] = argmax(lg + (int64_t)i * V, V);
    }
    gw_seq_free(s);
}

static void verify_eval(gw_seq *s, const int32_t *win, int rows, float *out)
{
    char err[1024];
    struct gw_eval_args a = {.tokens = win, .n_tokens = rows, .logits_rows = out ? GW_ROWS_ALL : GW_ROWS_NONE,
                             .logits = out, .verify = true};
    if (gw_eval(s, &a, err, sizeof err)) die("verify window", err);
}

static void truncate_to(gw_seq *s, int64_t n_keep)
{
    char err[1024];
    if (gw_seq_truncate(s, n_keep, err, sizeof err)) die("truncate into the window", err);
}

/* The speculative loop of cfg (see the top): ids and rows against the plain run's (ref) and the CPU's (cpu). */
static void verify_loop(const struct model *m, const struct vcfg *c, gw_backend *cpu_be, const int32_t *tok, int T,
                        int n, const int32_t *cpu_ids, const float *cpu_lg)
{
    static const int sizes[] = {16, 3, 0, 8, 1, 12, 5, 16, 2}; /* drafts a window: rows 1..17 */
    const int64_t V = m->hp.n_vocab;
    uint8_t *local = NULL;
    struct remote_ctx rctx = {m, 0, 0, 0, {0}};
    gw_backend *be = cpu_be ? cpu_be : make_cfg(m, c, T + n + 2 * GW_VERIFY_ROWS, &local, &rctx);
    int32_t *ref = malloc((size_t)n * sizeof *ref), *ids = malloc((size_t)n * sizeof *ids), win[GW_VERIFY_ROWS];
    float *rl = malloc((size_t)n * V * sizeof *rl), *wl = malloc((size_t)GW_VERIFY_ROWS * V * sizeof *wl);
    plain_run(be, tok, T, n, ref, rl);
    gw_seq *s = seq(be);
    eval(s, tok, T, GW_ROWS_LAST, wl, GW_ROWS_NONE, NULL, NULL);
    ids[0] = argmax(wl, V);
    const uint64_t ev0 = gw_backend_rows_evaluated(be), rp0 = gw_backend_rows_replayed(be);
    const uint64_t gr0 = gw_backend_graph_replays(be);
    uint64_t rows = 0, kept = 0;
    double worst = rel_err(wl, rl, V), worst_cpu = rel_err(wl, cpu_lg, V);
    int g = 1, passes = 0, exact = 0, compared = 0, rejected = 0;
    while (g < n) {
        int nd = sizes[passes % (int)(sizeof sizes / sizeof *sizes)];
        if (nd > n - g - 1) nd = n - g - 1; /* every row's next id is one the plain run knows */
        const int r = 1 + (passes * 5) % (nd + 1); /* the wrong draft (nd + 1: none) */
        const int64_t pos0 = gw_seq_pos(s);
        win[0] = ids[g - 1];
        for (int i = 1; i <= nd; i++) win[i] = i == r ? (ref[g - 1 + i] + 1) % (int32_t)V : ref[g - 1 + i];
        verify_eval(s, win, nd + 1, wl);
        int acc = 0;
        while (acc < nd && win[acc + 1] == argmax(wl + (int64_t)acc * V, V)) acc++;
        for (int i = 0; i <= acc; i++) {
            const float *row = wl + (int64_t)i * V, *want = rl + (int64_t)(g + i) * V;
            const double e = rel_err(row, want, V), ec = rel_err(row, cpu_lg + (int64_t)(g + i) * V, V);
            if (!(e <= worst)) worst = e;
            if (!(ec <= worst_cpu)) worst_cpu = ec;
            exact += !memcmp(row, want, (size_t)V * sizeof *row), compared++;
            ids[g + i] = i < acc ? win[i + 1] : argmax(row, V);
        }
        truncate_to(s, pos0 + acc + 1);
        rows += (uint64_t)nd + 1, kept += acc < nd ? (uint64_t)acc + 1 : 0, rejected += acc < nd;
        g += acc + 1, passes++;
    }
    const uint64_t ev = gw_backend_rows_evaluated(be) - ev0, rp = gw_backend_rows_replayed(be) - rp0;
    const uint64_t gr = gw_backend_graph_replays(be) - gr0; /* windows replayed as CUDA graphs */
    const bool graphs = strcmp(c->kind, "cpu") && !c->no_graphs;
    const bool recurrent = recurrent_model(m);
    const int same = same_prefix(ids, ref, n), same_cpu = same_prefix(ids, cpu_ids, n);
    char name[64];
    snprintf(name, sizeof name, "verify-%s", c->name);
    report(name, same == n && same_cpu == n && exact == compared && worst <= tol && worst_cpu <= tol &&
                     ev == rows && rp == (recurrent ? kept : 0) && (!c->place || rctx.pairs > 0) &&
                     (graphs ? gr > 0 : gr == 0),
           "%.0f greedy ids identical decoded as verify windows with forced rejections", same < same_cpu ? same : same_cpu);
    printf("     (%d windows, %d with a rejection; rows evaluated %llu (windows' rows %llu), replayed %llu (kept rows %llu); "
           "%d of %d kept rows bit-identical to the plain decode step's, worst max|d|/max|ref| = %.3g, vs the cpu's %.3g%s; "
           "%llu windows replayed as CUDA graphs)\n",
           passes, rejected, (unsigned long long)ev, (unsigned long long)rows, (unsigned long long)rp,
           (unsigned long long)kept, exact, compared, worst, worst_cpu, c->place ? "; remote experts through the hook" : "",
           (unsigned long long)gr);
    gw_seq_free(s);
    if (!cpu_be) gw_backend_free(be);
    if (local) gw_expert_scratch_free(&rctx.scratch);
    free(local), free(ref), free(ids), free(rl), free(wl);
}

/* verify-rollback and verify-refuse on the cuda backend (see the top); ids: n ≥ GW_VERIFY_ROWS + NEXT tokens. */
static void rollback_checks(const struct model *m, const int32_t *tok, int T, const int32_t *ids)
{
    const int64_t V = m->hp.n_vocab;
    const int W = GW_VERIFY_ROWS;
    const bool recurrent = recurrent_model(m);
    gw_backend *be = make(m, "cuda");
    float *la = malloc((size_t)NEXT * V * sizeof *la), *lb = malloc((size_t)NEXT * V * sizeof *lb);
    double worst = 0;
    int exact = 0, counted = 1;
    for (int j = 0; j <= W; j++) {
        gw_seq *a = seq(be), *b = seq(be);
        eval(a, tok, T, GW_ROWS_NONE, NULL, GW_ROWS_NONE, NULL, NULL);
        verify_eval(a, ids, W, NULL);
        const uint64_t ev0 = gw_backend_rows_evaluated(be), rp0 = gw_backend_rows_replayed(be);
        truncate_to(a, T + j);
        counted &= gw_seq_pos(a) == T + j && gw_backend_rows_evaluated(be) == ev0 &&
                   gw_backend_rows_replayed(be) - rp0 == (uint64_t)(recurrent && j < W ? j : 0);
        eval(b, tok, T, GW_ROWS_NONE, NULL, GW_ROWS_NONE, NULL, NULL); /* the run that only decoded the prefix */
        for (int i = 0; i < j; i++) eval(b, &ids[i], 1, GW_ROWS_NONE, NULL, GW_ROWS_NONE, NULL, NULL);
        for (int i = 0; i < NEXT; i++) {
            eval(a, &ids[j + i], 1, GW_ROWS_LAST, la + (int64_t)i * V, GW_ROWS_NONE, NULL, NULL);
            eval(b, &ids[j + i], 1, GW_ROWS_LAST, lb + (int64_t)i * V, GW_ROWS_NONE, NULL, NULL);
        }
        const double e = rel_err(la, lb, NEXT * V);
        if (!(e <= worst)) worst = e;
        exact += !memcmp(la, lb, (size_t)NEXT * V * sizeof *la);
        gw_seq_free(a), gw_seq_free(b);
    }
    report("verify-rollback", worst <= tol && counted, "a %.0f-row window truncated to each of its positions: the next "
           "logits are a prefix-only run's", W);
    printf("     (%d of %d positions bit-identical, worst max|d|/max|ref| = %.3g; the counters %s)\n", exact, W + 1, worst,
           counted ? "as expected" : "WRONG");
    /* refusals, and two truncations back into one window */
    char err[1024] = "";
    gw_seq *a = seq(be), *c = seq(be);
    eval(a, tok, T, GW_ROWS_NONE, NULL, GW_ROWS_NONE, NULL, NULL);
    int32_t big[GW_VERIFY_ROWS + 1];
    memcpy(big, ids, sizeof big);
    struct gw_eval_args ba = {.tokens = big, .n_tokens = W + 1, .logits_rows = GW_ROWS_NONE, .verify = true};
    const int too_big = gw_eval(a, &ba, err, sizeof err);
    bool ok = too_big == NB_EINVAL && gw_seq_pos(a) == T;
    printf("     (%s)\n", err);
    verify_eval(a, ids, 6, NULL);
    if (gw_seq_copy(c, a, err, sizeof err)) die("copy", err);
    if (recurrent) {
        ok &= gw_seq_truncate(c, T + 2, err, sizeof err) == NB_ENOTSUP;
        ok &= gw_seq_truncate(a, T - 1, err, sizeof err) == NB_ENOTSUP && strstr(err, "verify window") && gw_seq_pos(a) == T + 6;
    }
    ok &= gw_seq_truncate(a, T + 4, err, sizeof err) == 0 && gw_seq_truncate(a, T + 1, err, sizeof err) == 0;
    ok &= gw_seq_truncate(a, T + 3, err, sizeof err) == NB_EINVAL; /* past the current length */
    gw_seq *b = seq(be);
    eval(b, tok, T, GW_ROWS_NONE, NULL, GW_ROWS_NONE, NULL, NULL);
    eval(b, ids, 1, GW_ROWS_NONE, NULL, GW_ROWS_NONE, NULL, NULL);
    for (int i = 0; i < NEXT; i++) {
        eval(a, &ids[6 + i], 1, GW_ROWS_LAST, la + (int64_t)i * V, GW_ROWS_NONE, NULL, NULL);
        eval(b, &ids[6 + i], 1, GW_ROWS_LAST, lb + (int64_t)i * V, GW_ROWS_NONE, NULL, NULL);
    }
    const double e2 = rel_err(la, lb, NEXT * V);
    if (recurrent) ok &= gw_seq_truncate(a, T + 2, err, sizeof err) == NB_ENOTSUP; /* after plain evals */
    report("verify-refuse", ok && too_big && e2 <= tol, "18 rows, below the window, a copy, after plain evals refused; "
           "two truncations: max|d|/max|ref| = %.3g", e2);
    gw_seq_free(a), gw_seq_free(b), gw_seq_free(c);
    gw_backend_free(be);
    free(la), free(lb);
}

/* One verify window of the ids at tau on a fresh sequence of be after the prompt: logits, handoff flags, and the
 * backend's computed / hook / skipped pairs of the window. */
static void coverage_window(gw_backend *be, struct remote_ctx *rc, const int32_t *tok, int T, const int32_t *ids, float tau,
                            float *lg, uint8_t *handoff, uint64_t *pairs)
{
    gw_seq *s = seq(be);
    char err[1024];
    eval(s, tok, T, GW_ROWS_NONE, NULL, GW_ROWS_NONE, NULL, NULL);
    const uint64_t c0 = gw_backend_experts_computed(be), h0 = rc->pairs, s0 = gw_backend_experts_skipped(be);
    struct gw_eval_args a = {.tokens = ids, .n_tokens = GW_VERIFY_ROWS, .logits_rows = GW_ROWS_ALL, .logits = lg, .verify = true,
                             .coverage = tau, .handoff = handoff};
    if (gw_eval(s, &a, err, sizeof err)) die("coverage window", err);
    pairs[0] = gw_backend_experts_computed(be) - c0, pairs[1] = rc->pairs - h0, pairs[2] = gw_backend_experts_skipped(be) - s0;
    gw_seq_free(s);
}

static void coverage_checks(const struct model *m, const int32_t *tok, int T, const int32_t *ids)
{
    const int64_t V = m->hp.n_vocab, W = GW_VERIFY_ROWS;
    const uint64_t all = (uint64_t)m->hp.n_expert_used * (uint64_t)m->hp.n_layer * (uint64_t)W;
    const struct vcfg cu = {"cov", "cuda", false, 1, false}, cp = {"cov-cpu", "cpu", false, 1, false};
    uint8_t *lcu, *lcp, hx[GW_VERIFY_ROWS], h1[GW_VERIFY_ROWS], hg[GW_VERIFY_ROWS], hc[GW_VERIFY_ROWS];
    struct remote_ctx rcu, rcp;
    gw_backend *gbe = make_cfg(m, &cu, T + 2 * W, &lcu, &rcu), *cbe = make_cfg(m, &cp, T + 2 * W, &lcp, &rcp);
    float *lx = malloc((size_t)(W * V) * sizeof *lx), *l1 = malloc((size_t)(W * V) * sizeof *l1);
    float *lg = malloc((size_t)(W * V) * sizeof *lg), *lc = malloc((size_t)(W * V) * sizeof *lc);
    uint64_t px[3], p1[3], pg[3], pc[3];
    coverage_window(gbe, &rcu, tok, T, ids, 0, lx, hx, px);
    coverage_window(gbe, &rcu, tok, T, ids, 1, l1, h1, p1);
    const double e1 = rel_err(l1, lx, W * V);
    report("verify-coverage-1", e1 <= tol && p1[2] == 0 && px[2] == 0 && p1[0] + p1[1] == all && px[0] + px[1] == all,
           "tau 1 (every row covered only when all its experts are resident): the exact window, max|d|/max|ref| = %.3g", e1);
    coverage_window(gbe, &rcu, tok, T, ids, 0.6f, lg, hg, pg);
    coverage_window(cbe, &rcp, tok, T, ids, 0.6f, lc, hc, pc);
    int n_hand = 0;
    for (int i = 0; i < W; i++) n_hand += hg[i];
    const double ec = rel_err(lg, lc, W * V), ex = rel_err(lg, lx, W * V);
    report("verify-coverage", pg[2] > 0 && pg[0] + pg[1] + pg[2] == all && pc[0] + pc[1] + pc[2] == all && pg[2] == pc[2] &&
                                  !memcmp(hg, hc, sizeof hg) && ec <= tol,
           "tau 0.6, odd experts remote: cuda against the cpu's coverage mode, max|d|/max|ref| = %.3g", ec);
    printf("     (cuda: %llu computed + %llu by the hook + %llu skipped of %llu pairs (cpu: %llu + %llu + %llu); %d of %d rows "
           "handed off; %.3g from the exact window)\n", (unsigned long long)pg[0], (unsigned long long)pg[1],
           (unsigned long long)pg[2], (unsigned long long)all, (unsigned long long)pc[0], (unsigned long long)pc[1],
           (unsigned long long)pc[2], n_hand, (int)W, ex);
    gw_backend_free(gbe), gw_backend_free(cbe);
    gw_expert_scratch_free(&rcu.scratch), gw_expert_scratch_free(&rcp.scratch);
    free(lcu), free(lcp), free(lx), free(l1), free(lg), free(lc);
}

void check_verify(const struct model *m, gw_backend *cpu, const int32_t *tok, int T, int n, bool remote)
{
    const int64_t V = m->hp.n_vocab;
    if (n < GW_VERIFY_ROWS + 6 + NEXT) n = GW_VERIFY_ROWS + 6 + NEXT;
    int32_t *cpu_ids = malloc((size_t)n * sizeof *cpu_ids);
    float *cpu_lg = malloc((size_t)n * V * sizeof *cpu_lg);
    plain_run(cpu, tok, T, n, cpu_ids, cpu_lg);
    const struct vcfg cfgs[] = {
        {"cpu", "cpu", false, 0, false},          {"cuda", "cuda", false, 0, false},
        {"cuda-nograph", "cuda", true, 0, false}, {"cuda-remote", "cuda", false, 1, false},
        {"cuda-budget", "cuda", false, 2, true},  {"cuda-budget-0", "cuda", false, 3, true},
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
        if (cfgs[i].place && !remote) continue;
        const double t0 = now();
        verify_loop(m, &cfgs[i], i == 0 ? cpu : NULL, tok, T, n, cpu_ids, cpu_lg);
        printf("     (%s: %.1f s)\n", cfgs[i].name, now() - t0);
    }
    rollback_checks(m, tok, T, cpu_ids);
    if (remote) coverage_checks(m, tok, T, cpu_ids);
    free(cpu_ids), free(cpu_lg);
}
