/* check_backend.c — the CUDA backend against the CPU reference, on a GPU.
 *
 *   check_backend MODEL.gguf TOKENS.txt [--greedy N] [--remote] [--tol X] [--kernels ref|fast] [--prompt N]
 *                 [--mtp FILE] [--verify N] [--verify-only]
 *
 * TOKENS.txt holds the prompt (whitespace-separated ids; --prompt N: its
 * first N only, which keeps the CPU reference side short on big models).  Checks, each
 * printed as one PASS/FAIL line with its measured numbers:
 *   prefill   every row's logits of the whole prompt in one eval, and the
 *             routes chosen in every MoE layer (route tap), vs the CPU (the
 *             same ids; with --kernels fast at most 0.5% differ: near-ties);
 *   decode    the first half prefilled, the rest token by token (last-row
 *             logits each), and the wide state after it; a gw_seq_copy of
 *             the half-way state decodes the same logits bit for bit;
 *   mtp       (models with an MTP block) 4 chained draft steps: logits and
 *             drafted ids;
 *   ple-hook  (models with PLE) rows through the gw_ple_rows hook give the
 *             logits the device's own table gives;
 *   greedy    N tokens of greedy generation after the prompt: identical ids;
 *   graphs    the CUDA greedy run again with CUDA graphs off: every step's
 *             logits bit for bit (and both speeds);
 *   experts   gw_backend_experts_computed = k × layers × tokens (graphs on
 *             and off; with remote placements local + remote pairs);
 *   remote    (--remote) the greedy run again with routed experts remote
 *             through the gw_moe_remote hook (computed on the CPU with
 *             gw_expert_ffn) under four placements: identical ids (two of
 *             them with the map given at creation, gw_backend_params.local,
 *             two laid out at the first eval);
 *   remote-first (--remote) 4 fresh backends, even layers remote laid out at
 *             the first eval: prefill and the first decode steps (issue 11's
 *             hang) in seconds, the greedy ids;
 *   relayout  (--remote) the all-local backend given a placement, then none
 *             again: its experts re-laid out each time, greedy ids identical;
 *   vram-tier (--remote) the all-remote backend's peak VRAM is below an
 *             all-local one's (made and run alike) by ≥ 90% of the expert
 *             slots' bytes (checked where the slots are ≥ 64 MiB: the
 *             allocator's granularity);
 *   copied    (--remote) gw_backend_bytes_copied covers the remote results
 *             (pairs × C floats) under each placement;
 *   stream    (--remote) the odd experts' blobs in host memory
 *             (gw_backend_set_expert_host): a prefill computes them from
 *             streamed copies, bit-identical to all-local, no hook call;
 *             the pairs counted; greedy ids after it (check_stream);
 *   vram-plan  a backend given exactly gw_vram_plan's total (dense from
 *             gw_vram_dense_bytes) as its budget prefills the prompt with
 *             every row's logits (vs the CPU's) and decodes: its measured
 *             peak stays within that total; vram-plan-0 the same with no
 *             expert local (zero slots, all remote);
 *   vram-blocks(-0) the backend's own blocks by part (gw_backend_vram_used)
 *             are the ones gw_vram_allocs lists;
 *   vram-budget  a budget of 4 KiB is refused with every part named;
 *   argmax    greedy with gw_eval_args.argmax (no logits copied): the same ids;
 *   verify-*  (--verify N: N tokens (at least 26), default 0: none;
 *             --verify-only: these alone) verify windows and the rollback into them, CPU and CUDA
 *             under several placements (tests/cuda/check_verify.c).
 * --kernels picks the cuda backends' matrix kernels (default: the backend's,
 * fast); "ref" must pass the same checks.
 * Logits pass when max|cuda − cpu| ≤ tol · max|cpu| (tol 1e-3).  Exit 0 only
 * when everything passed; 77 (SKIP) when no CUDA device is there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>

#include "core/model/model.h"
#include "core/util/err.h"
#include "engine/backend.h"
#include "engine/ffn.h"
#include "engine/vram.h"
#include "tests/cuda/check.h"


/* ---- streamed experts: host blobs as the RAM arena holds them ---- */
/* stream (--remote): the odd experts not resident, their blobs (gate | up |
 * down, page-rounded, one buffer) installed with gw_backend_set_expert_host.
 * A prefill of more than GW_STREAM_MIN_ROWS rows computes them on the device
 * from the streamed copies: every row's logits are those of a fresh prefill
 * of the all-local backend (gpu) bit for bit and the hook is not called,
 * every routed pair is counted as computed here, the blobs are counted as
 * copied; the greedy ids after it (decode steps keep the hook) are the CPU's
 * (gc).  Experts of a type the device cannot decode (gw_vram_native_type)
 * are not streamed: their pairs go to the hook (the CPU), so the logits are
 * compared within tol and the device's pairs plus the hook's make the total. */
static void check_stream(const struct model *m, gw_backend *gpu, const int32_t *tok, int T, const int32_t *gc,
                         int n_greedy)
{
    const struct model_hparams *hp = &m->hp;
    const int L = hp->n_layer + hp->n_nextn, E = hp->n_expert;
    const int64_t V = hp->n_vocab;
    char err[512];
    if (T <= GW_STREAM_MIN_ROWS) {
        printf("     stream not checked: a prompt of %d tokens is a decode-sized eval (<= %d rows)\n", T, GW_STREAM_MIN_ROWS);
        return;
    }
    uint8_t *local = malloc((size_t)L * E);
    const uint8_t **blob = calloc((size_t)L * E, sizeof *blob);
    uint64_t *part = malloc((size_t)L * 3 * sizeof *part), *bytes = malloc((size_t)L * sizeof *bytes), total = 0;
    bool native = true; /* every expert tensor of a type the device decodes: every odd expert streamed */
    for (int l = 0; l < L; l++) {
        const struct model_moe *w = &m->layers[l].moe;
        const struct model_tensor *ts[3] = {&w->gate_exps, &w->up_exps, &w->down_exps};
        uint64_t at = 0;
        for (int j = 0; j < 3; j++)
            part[3 * l + j] = at, at += (uint64_t)ts[j]->ne[1] * ts[j]->row_bytes, native = native && gw_vram_native_type(ts[j]->type);
        bytes[l] = (at + 4095) / 4096 * 4096;
        for (int e = 0; e < E; e++) local[l * E + e] = e % 2 == 0, total += e % 2 ? bytes[l] : 0;
    }
    uint8_t *buf = aligned_alloc(4096, total ? total : 4096), *p = buf;
    for (int l = 0; l < L; l++) {
        const struct model_moe *w = &m->layers[l].moe;
        const struct model_tensor *ts[3] = {&w->gate_exps, &w->up_exps, &w->down_exps};
        for (int e = 1; e < E; e += 2, p += bytes[l]) {
            for (int j = 0; j < 3; j++)
                memcpy(p + part[3 * l + j], ts[j]->data + (size_t)e * ts[j]->mat_bytes, (size_t)ts[j]->ne[1] * ts[j]->row_bytes);
            blob[l * E + e] = p;
        }
    }
    gw_backend *sb = make_pl(m, "cuda", false, local);
    struct remote_ctx rctx = {m, 0, 0, 0, {0}};
    struct gw_moe_remote r = {local, remote_fn, &rctx};
    struct gw_expert_host xh = {blob, part, bytes, buf, total, 0};
    if (gw_backend_set_moe_remote(sb, &r, err, sizeof err)) die("remote hook", err);
    if (gw_backend_set_expert_host(sb, &xh, err, sizeof err)) die("host experts", err);
    float *ls = malloc((size_t)T * V * sizeof *ls), *lref = malloc((size_t)T * V * sizeof *lref);
    gw_seq *sr = seq(gpu);
    eval(sr, tok, T, GW_ROWS_ALL, lref, GW_ROWS_NONE, NULL, NULL);
    gw_seq_free(sr);
    gw_seq *ss = seq(sb);
    eval(ss, tok, T, GW_ROWS_ALL, ls, GW_ROWS_NONE, NULL, NULL);
    gw_seq_free(ss);
    const uint64_t want = (uint64_t)hp->n_expert_used * hp->n_layer * (uint64_t)T, copied = gw_backend_bytes_copied(sb);
    const uint64_t on_device = gw_backend_experts_computed(sb), by_hook = rctx.pairs;
    const double es = rel_err(ls, lref, (int64_t)T * V);
    report("stream", native ? !memcmp(ls, lref, (size_t)T * V * sizeof *ls) && rctx.calls == 0 : es <= tol && rctx.calls > 0,
           native ? "logits bit-identical to the all-local backend's, odd experts streamed (max|d|/max|ref| = %.3g)"
                  : "odd experts of a type the device does not decode computed by the hook: max|d|/max|ref| = %.3g", es);
    report("stream-pairs", on_device + by_hook == want && (native ? by_hook == 0 : by_hook > 0),
           "%.0f routed pairs computed on the device", (double)on_device);
    printf("     (stream: %llu bytes copied to the device for %d rows; the hook called %u times for %llu pairs)\n",
           (unsigned long long)copied, T, rctx.calls, (unsigned long long)by_hook);
    int32_t *ids = malloc((size_t)n_greedy * sizeof *ids);
    greedy(sb, tok, T, n_greedy, ids, NULL);
    const int same = same_prefix(gc, ids, n_greedy);
    report("stream-greedy", same == n_greedy && rctx.calls > 0, "%.0f greedy ids identical (decode through the hook)", same);
    gw_backend_free(sb);
    gw_expert_scratch_free(&rctx.scratch);
    free(ids), free(ls), free(lref), free(buf), free(blob), free(part), free(bytes), free(local);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf TOKENS.txt [--greedy N] [--remote] [--tol X] [--kernels K] [--prompt N] "
                        "[--mtp FILE] [--verify N] [--verify-only]\n", argv[0]);
        return 2;
    }
    int n_greedy = 32, n_prompt = 0, n_verify = 0;
    bool remote = false, verify_only = false;
    const char *mtp = NULL; /* the MTP block from a separate GGUF (model_open_mtp) */
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--greedy") && i + 1 < argc) n_greedy = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--remote")) remote = true;
        else if (!strcmp(argv[i], "--tol") && i + 1 < argc) tol = atof(argv[++i]);
        else if (!strcmp(argv[i], "--kernels") && i + 1 < argc) kernels = argv[++i];
        else if (!strcmp(argv[i], "--prompt") && i + 1 < argc) n_prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mtp") && i + 1 < argc) mtp = argv[++i];
        else if (!strcmp(argv[i], "--verify") && i + 1 < argc) n_verify = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--verify-only")) verify_only = true;
        else {
            fprintf(stderr, "unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    char err[512];
    struct model *m;
    if ((mtp ? model_open_mtp(argv[1], mtp, &m, err, sizeof err) : model_open(argv[1], &m, err, sizeof err)))
        die("model", err);
    const struct model_hparams *hp = &m->hp;
    int T;
    int32_t *tok = read_tokens(argv[2], &T);
    if (n_prompt > 0 && n_prompt < T) T = n_prompt;
    if (T < 4) die("tokens", "fewer than 4");
    const int64_t V = hp->n_vocab, wide = model_wide(hp);
    printf("== %s: %d layers%s, %d experts (k=%d), C=%lld, V=%lld, GDN %d×%d key / %d×%d value heads; prompt of %d tokens\n",
           argv[1], hp->n_layer, hp->n_nextn ? " + MTP" : "", hp->n_expert, hp->n_expert_used, (long long)hp->n_embd,
           (long long)V, hp->ssm_n_k_heads, hp->ssm_k_head_dim, hp->ssm_n_v_heads, hp->ssm_v_head_dim, T);
    double t0 = now();
    gw_backend *cpu = make(m, "cpu"), *gpu = make(m, "cuda");
    printf("     cuda backend (kernels %s) created in %.2f s\n", kernels ? kernels : "default", now() - t0);
    if (n_verify > 0) check_verify(m, cpu, tok, T, n_verify, remote);
    if (verify_only) {
        gw_backend_free(cpu), gw_backend_free(gpu), model_close(m), free(tok);
        printf("%s: %d check(s) failed\n", failures ? "FAIL" : "OK", failures);
        return failures ? 1 : 0;
    }

    /* prefill: all rows, and the routes */
    float *lc = malloc((size_t)T * V * sizeof *lc), *lg = malloc((size_t)T * V * sizeof *lg);
    struct routes rc = {0}, rg = {0};
    gw_seq *sc = seq(cpu), *sg = seq(gpu);
    t0 = now();
    eval(sc, tok, T, GW_ROWS_ALL, lc, GW_ROWS_NONE, NULL, &rc);
    double tcpu = now() - t0;
    t0 = now();
    eval(sg, tok, T, GW_ROWS_ALL, lg, GW_ROWS_NONE, NULL, &rg);
    double tgpu = now() - t0;
    double e = rel_err(lg, lc, (int64_t)T * V);
    report("prefill", e <= tol, "max|d|/max|ref| = %.3g", e);
    int64_t rdiff = rc.n != rg.n;
    for (int64_t i = 0; i < rc.n && i < rg.n; i++) rdiff += rc.ids[i] != rg.ids[i];
    /* ref: the same ids; fast (fp32 router logits): a near-tie may flip, at most 0.5% of them */
    const bool fast = kernels && !strcmp(kernels, "fast");
    report("routes", rc.n == rg.n && (fast ? rdiff * 200 <= rc.n : rdiff == 0), "%.0f of the routed expert ids differ",
           (double)rdiff);
    printf("     prefill of %d tokens: cpu %.3f s, cuda %.3f s (first call)\n", T, tcpu, tgpu);

    /* prefill half + decode the rest; a copy of the half-way state decodes the same */
    const int half = T / 2;
    gw_seq_reset(sc), gw_seq_reset(sg);
    float *wc = malloc((size_t)wide * sizeof *wc), *wg = malloc((size_t)wide * sizeof *wg);
    eval(sc, tok, half, GW_ROWS_LAST, lc + (int64_t)(half - 1) * V, GW_ROWS_NONE, NULL, NULL);
    eval(sg, tok, half, GW_ROWS_LAST, lg + (int64_t)(half - 1) * V, GW_ROWS_NONE, NULL, NULL);
    gw_seq *copy = seq(gpu);
    if (gw_seq_copy(copy, sg, err, sizeof err)) die("copy", err);
    double worst = rel_err(lg + (int64_t)(half - 1) * V, lc + (int64_t)(half - 1) * V, V);
    for (int t = half; t < T; t++) {
        eval(sc, tok + t, 1, GW_ROWS_LAST, lc + (int64_t)t * V, GW_ROWS_LAST, wc, NULL);
        eval(sg, tok + t, 1, GW_ROWS_LAST, lg + (int64_t)t * V, GW_ROWS_LAST, wg, NULL);
        double et = rel_err(lg + (int64_t)t * V, lc + (int64_t)t * V, V);
        if (!(et <= worst)) worst = et;
    }
    report("decode", worst <= tol, "worst row max|d|/max|ref| = %.3g", worst);
    double ew = rel_err(wg, wc, wide);
    report("wide", ew <= tol, "max|d|/max|ref| = %.3g", ew);
    float *l2 = malloc((size_t)V * sizeof *l2);
    eval(copy, tok + half, 1, GW_ROWS_LAST, l2, GW_ROWS_NONE, NULL, NULL);
    int64_t ndiff = 0;
    for (int64_t i = 0; i < V; i++) ndiff += memcmp(&l2[i], &lg[(int64_t)half * V + i], sizeof *l2) != 0;
    report("seq-copy", ndiff == 0, "%.0f logits differ from the original sequence's", (double)ndiff);
    gw_seq_free(copy);

    /* MTP: 4 chained draft steps from the last trunk state */
    if (hp->n_nextn) {
        int32_t dc[4], dg[4];
        float *mc = malloc((size_t)4 * V * sizeof *mc), *mg = malloc((size_t)4 * V * sizeof *mg);
        int32_t next = argmax(lc + (int64_t)(T - 1) * V, V);
        if (gw_mtp_draft(sc, next, wc, T, 4, dc, mc, err, sizeof err)) die("mtp cpu", err);
        if (gw_mtp_draft(sg, next, wc, T, 4, dg, mg, err, sizeof err)) die("mtp cuda", err);
        double em = rel_err(mg, mc, 4 * V);
        report("mtp", em <= tol && !memcmp(dc, dg, sizeof dc), "4 draft steps: max|d|/max|ref| = %.3g", em);
        /* again from an earlier position: the MTP entries at ≥ pos are dropped first */
        if (gw_mtp_draft(sc, next, wc, T - 2, 2, dc, mc, err, sizeof err)) die("mtp cpu", err);
        if (gw_mtp_draft(sg, next, wc, T - 2, 2, dg, mg, err, sizeof err)) die("mtp cuda", err);
        em = rel_err(mg, mc, 2 * V);
        report("mtp-redraft", em <= tol && !memcmp(dc, dg, 2 * sizeof *dc), "max|d|/max|ref| = %.3g", em);
        free(mc), free(mg);
    }
    gw_seq_free(sc), gw_seq_free(sg);

    /* PLE rows through the hook */
    if (hp->ple_layer >= 0) {
        gw_backend *h = make(m, "cuda");
        struct gw_ple_rows pr = {ple_fn, m};
        if (gw_backend_set_ple_rows(h, &pr, err, sizeof err)) die("ple hook", err);
        gw_seq *sh = seq(h);
        float *lh = malloc((size_t)T * V * sizeof *lh);
        sg = seq(gpu);
        eval(sg, tok, T, GW_ROWS_ALL, lg, GW_ROWS_NONE, NULL, NULL);
        eval(sh, tok, T, GW_ROWS_ALL, lh, GW_ROWS_NONE, NULL, NULL);
        bool exact = memcmp(lh, lg, (size_t)T * V * sizeof *lh) == 0;
        double eh = rel_err(lh, lg, (int64_t)T * V);
        printf("     ple-hook logits %s the device table's\n", exact ? "bit-identical to" : "close to");
        report("ple-hook", eh <= tol, "max|d|/max|ref| = %.3g", eh);
        free(lh);
        gw_seq_free(sh), gw_seq_free(sg);
        gw_backend_free(h);
    }

    /* greedy generation */
    if (n_greedy > 0) {
        int32_t *gc = malloc((size_t)n_greedy * sizeof *gc), *gg = malloc((size_t)n_greedy * sizeof *gg);
        double dc = greedy(cpu, tok, T, n_greedy, gc, lc);
        uint64_t *hg = malloc((size_t)n_greedy * sizeof *hg), *hp_ = malloc((size_t)n_greedy * sizeof *hp_);
        const uint64_t c0 = gw_backend_experts_computed(gpu);
        double dg = greedy_h(gpu, tok, T, n_greedy, gg, lg, hg);
        const uint64_t graph_pairs = gw_backend_experts_computed(gpu) - c0;
        int same = same_prefix(gc, gg, n_greedy);
        report("greedy", same == n_greedy, "%.0f tokens identical", same);
        printf("     (of %d; last logits max|d|/max|ref| = %.3g; decode cpu %.1f tok/s, cuda %.1f tok/s)\n", n_greedy,
               rel_err(lg, lc, V), (n_greedy - 1) / dc, (n_greedy - 1) / dg);
        /* the same run without CUDA graphs: every step's logits bit for bit */
        gw_backend *plain = make_p(m, "cuda", true);
        int32_t *gp = malloc((size_t)n_greedy * sizeof *gp);
        double dp = greedy_h(plain, tok, T, n_greedy, gp, NULL, hp_);
        int sh = 0;
        while (sh < n_greedy && hg[sh] == hp_[sh] && gg[sh] == gp[sh]) sh++;
        report("graphs", sh == n_greedy, "%.0f steps' logits bit-identical with and without CUDA graphs", sh);
        /* no routed expert skipped: k pairs per trunk layer and token, with graphs and without */
        const uint64_t want = (uint64_t)hp->n_expert_used * hp->n_layer * (uint64_t)(T + n_greedy - 1);
        report("experts", gw_backend_experts_computed(plain) == want, "%.0f routed pairs computed without graphs",
               (double)gw_backend_experts_computed(plain));
        printf("     (decode without graphs %.1f tok/s, with graphs %.1f tok/s)\n", (n_greedy - 1) / dp,
               (n_greedy - 1) / dg);
        report("experts-g", graph_pairs == want, "%.0f routed pairs computed with graphs", (double)graph_pairs);
        /* the argmax on the device, one int copied a step */
        int32_t *ga = malloc((size_t)n_greedy * sizeof *ga);
        double da = greedy_argmax(gpu, tok, T, n_greedy, ga);
        int sa = same_prefix(gg, ga, n_greedy);
        report("argmax", sa == n_greedy, "%.0f greedy ids identical with the argmax on the device", sa);
        printf("     (decode with the device argmax %.1f tok/s, logits copied %.1f tok/s)\n", (n_greedy - 1) / da,
               (n_greedy - 1) / dg);
        free(ga);
        gw_backend_free(plain);
        free(gp), free(hg), free(hp_);
        if (remote) {
            const int L = hp->n_layer + hp->n_nextn, E = hp->n_expert;
            uint8_t *local = malloc((size_t)L * E);
            const char *names[] = {"all remote", "odd experts remote", "even layers remote", "~30% remote (hashed)"};
            int32_t *gr = malloc((size_t)n_greedy * sizeof *gr);
            uint64_t peak_none = 0;
            for (int pat = 0; pat < 4; pat++) {
                for (int l = 0; l < L; l++)
                    for (int x = 0; x < E; x++)
                        local[l * E + x] = pat == 0 ? 0 : pat == 1 ? (x % 2 == 0) : pat == 2 ? (l % 2) : ((x * 2654435761u + l * 40503u) % 10 >= 3);
                /* odd patterns: the map known at creation; even: laid out at the first eval */
                gw_backend *rb = make_pl(m, "cuda", false, pat % 2 ? local : NULL);
                struct remote_ctx rctx = {m, 0, 0, 0, {0}};
                struct gw_moe_remote r = {local, remote_fn, &rctx};
                if (gw_backend_set_moe_remote(rb, &r, err, sizeof err)) die("remote hook", err);
                double dr = greedy(rb, tok, T, n_greedy, gr, NULL);
                int sr = same_prefix(gc, gr, n_greedy);
                char name[64];
                snprintf(name, sizeof name, "remote-%d", pat);
                report(name, sr == n_greedy && rctx.pairs > 0, "%.0f tokens identical", sr);
                /* local + remote = every routed pair, each once */
                const uint64_t want_r = (uint64_t)hp->n_expert_used * hp->n_layer * (uint64_t)(T + n_greedy - 1);
                snprintf(name, sizeof name, "pairs-%d", pat);
                report(name, gw_backend_experts_computed(rb) + rctx.pairs == want_r, "%.0f local + remote routed pairs",
                       (double)(gw_backend_experts_computed(rb) + rctx.pairs));
                printf("     (%s: %llu pairs computed remotely, %.1f tok/s, VRAM peak %.1f MiB)\n", names[pat],
                       (unsigned long long)rctx.pairs, (n_greedy - 1) / dr, mib(gw_backend_vram_bytes(rb)));
                if (pat == 0) peak_none = gw_backend_vram_bytes(rb);
                /* the remote results came back host → device: C floats a pair, at least */
                const uint64_t cb = gw_backend_bytes_copied(rb), want_cb = rctx.pairs * (uint64_t)hp->n_embd * 4;
                snprintf(name, sizeof name, "copied-%d", pat);
                report(name, cb >= want_cb, "%.0f bytes copied to the device", (double)cb);
                printf("     (remote results: %llu bytes)\n", (unsigned long long)want_cb);
                gw_backend_free(rb);
                gw_expert_scratch_free(&rctx.scratch);
            }
            /* issue 11: a backend's first eval of <= 17 rows starts its remote
             * thread, and layer 0's request could be posted before the thread
             * first looked (never answered: 240 s, then "no answer").  Fresh
             * backends, even layers remote laid out at the first eval, each
             * prefilled and decoding two steps: every step in seconds. */
            {
                uint8_t *even = malloc((size_t)L * E);
                for (int l = 0; l < L; l++)
                    for (int x = 0; x < E; x++) even[l * E + x] = l % 2;
                const int n_fresh = 4, steps = n_greedy < 3 ? n_greedy : 3;
                double worst = 0;
                int same = 1;
                for (int f = 0; f < n_fresh; f++) {
                    gw_backend *fb = make_pl(m, "cuda", false, NULL);
                    struct remote_ctx fctx = {m, 0, 0, 0, {0}};
                    struct gw_moe_remote fr = {even, remote_fn, &fctx};
                    if (gw_backend_set_moe_remote(fb, &fr, err, sizeof err)) die("remote hook", err);
                    gw_seq *fs = seq(fb);
                    int32_t tk[4];
                    struct gw_eval_args pa = {.tokens = tok, .n_tokens = T, .logits_rows = GW_ROWS_LAST, .argmax = &tk[0]};
                    if (gw_eval(fs, &pa, err, sizeof err)) die("remote-first prefill", err);
                    for (int i = 1; i < steps; i++) {
                        struct gw_eval_args da = {.tokens = &tk[i - 1], .n_tokens = 1, .logits_rows = GW_ROWS_LAST, .argmax = &tk[i]};
                        double t1 = now();
                        if (gw_eval(fs, &da, err, sizeof err)) die("remote-first decode", err);
                        if (now() - t1 > worst) worst = now() - t1;
                    }
                    same &= same_prefix(gc, tk, steps) == steps;
                    gw_seq_free(fs);
                    gw_backend_free(fb);
                    gw_expert_scratch_free(&fctx.scratch);
                }
                report("remote-first", same && worst < 10, "%.3f s the slowest first decode steps of fresh backends (even layers remote)",
                       worst);
                free(even);
            }
            /* the mailbox inside a CUDA graph: the hashed placement's decode steps
             * bit-identical to plain launches (both post through the mailbox) */
            {
                gw_backend *g1 = make_pl(m, "cuda", false, local), *g0 = make_pl(m, "cuda", true, local);
                struct remote_ctx c1 = {m, 0, 0, 0, {0}}, c0 = {m, 0, 0, 0, {0}};
                struct gw_moe_remote r1 = {local, remote_fn, &c1}, r0 = {local, remote_fn, &c0};
                if (gw_backend_set_moe_remote(g1, &r1, err, sizeof err)) die("remote hook", err);
                if (gw_backend_set_moe_remote(g0, &r0, err, sizeof err)) die("remote hook", err);
                uint64_t *h1 = malloc((size_t)n_greedy * sizeof *h1), *h0 = malloc((size_t)n_greedy * sizeof *h0);
                int32_t *o0 = malloc((size_t)n_greedy * sizeof *o0);
                double d1 = greedy_h(g1, tok, T, n_greedy, gr, NULL, h1), d0 = greedy_h(g0, tok, T, n_greedy, o0, NULL, h0);
                int sh = 0;
                while (sh < n_greedy && h1[sh] == h0[sh] && gr[sh] == o0[sh]) sh++;
                const uint64_t rg1 = gw_backend_graph_replays(g1), rg0 = gw_backend_graph_replays(g0);
                report("remote-graphs", sh == n_greedy && c1.pairs == c0.pairs && c1.pairs > 0 &&
                                            rg1 >= (uint64_t)(n_greedy - 1) && rg0 == 0,
                       "%.0f steps' logits bit-identical, remote experts in a CUDA graph vs plain launches", sh);
                printf("     (graph replays: %llu with graphs, %llu without)\n", (unsigned long long)rg1,
                       (unsigned long long)rg0);
                printf("     (hashed placement: %.1f tok/s with graphs, %.1f without; %llu pairs remote)\n",
                       (n_greedy - 1) / d1, (n_greedy - 1) / d0, (unsigned long long)c1.pairs);
                /* a failing hook fails the eval with its message, in a graph and out of one */
                gw_backend *gs2[2] = {g1, g0};
                struct remote_ctx *cs[2] = {&c1, &c0};
                for (int g = 0; g < 2; g++) {
                    gw_seq *sq = seq(gs2[g]);
                    eval(sq, tok, T, GW_ROWS_NONE, NULL, GW_ROWS_NONE, NULL, NULL);
                    cs[g]->fail = 1;
                    const unsigned calls0 = cs[g]->calls;
                    struct gw_eval_args fa = {.tokens = tok, .n_tokens = 1, .logits_rows = GW_ROWS_LAST, .argmax = o0};
                    char ferr[512] = "";
                    double tf = now();
                    int frc = gw_eval(sq, &fa, ferr, sizeof ferr);
                    tf = now() - tf;
                    const unsigned fcalls = cs[g]->calls - calls0;
                    /* after the first failure no later layer calls the hook (a hung peer costs one wait, not one per layer) */
                    report(g ? "remote-err" : "remote-err-g", frc != 0 && strstr(ferr, "told to fail") && tf < 10 && fcalls == 1,
                           "a failing hook fails the eval in %.3f s", tf);
                    printf("     (hook calls in the failing eval: %u)\n", fcalls);
                    printf("     (%s)\n", ferr);
                    cs[g]->fail = 0;
                    gw_seq_free(sq);
                }
                gw_backend_free(g1), gw_backend_free(g0);
                gw_expert_scratch_free(&c1.scratch), gw_expert_scratch_free(&c0.scratch);
                free(h1), free(h0), free(o0);
            }
            /* only the resident experts take VRAM: an all-local backend made and run
             * as the all-remote one was (the same backends alive beside it) */
            struct gw_vram_parts all;
            gw_vram_plan(m, NULL, 0, &all);
            gw_backend *full = make(m, "cuda");
            greedy(full, tok, T, n_greedy, gr, NULL);
            const uint64_t peak_all = gw_backend_vram_bytes(full);
            gw_backend_free(full);
            printf("     (VRAM peak: all experts local %.1f MiB, all remote %.1f MiB; the slots of all experts %.1f MiB)\n",
                   mib(peak_all), mib(peak_none), mib(all.slots));
            if (all.slots >= (64ull << 20))
                report("vram-tier", peak_none > 0 && peak_none + all.slots / 10 * 9 <= peak_all,
                       "all-remote peak + 90%% of the slots <= all-local peak (%.1f MiB spare)",
                       mib(peak_all) - mib(peak_none) - 0.9 * mib(all.slots));
            else
                printf("     vram-tier not compared: the slots (%.2f MiB) are under the allocator's granularity\n", mib(all.slots));
            /* the all-local backend given the hashed placement, then none: re-laid out each time */
            const int nr = n_greedy < 32 ? n_greedy : 32;
            struct remote_ctx rctx = {m, 0, 0, 0, {0}};
            struct gw_moe_remote r = {local, remote_fn, &rctx};
            if (gw_backend_set_moe_remote(gpu, &r, err, sizeof err)) die("remote hook", err);
            greedy(gpu, tok, T, nr, gr, NULL);
            int s1 = same_prefix(gc, gr, nr);
            if (gw_backend_set_moe_remote(gpu, NULL, err, sizeof err)) die("remote hook", err);
            greedy(gpu, tok, T, nr, gr, NULL);
            int s2 = same_prefix(gc, gr, nr);
            report("relayout", s1 == nr && s2 == nr && rctx.pairs > 0, "%.0f tokens identical after each re-layout",
                   s1 < s2 ? s1 : s2);
            gw_expert_scratch_free(&rctx.scratch);
            free(gr);
            free(local);
            check_stream(m, gpu, tok, T, gc, n_greedy);
        }
        free(gc), free(gg);
    }
    /* the plan (engine/vram.c) bounds what the device really holds: a
     * backend given exactly the planned total as its budget (so the dense
     * bytes the worker's check measures must match the plan's) prefills the
     * prompt with every row's logits (the head's sub-batches), then decodes;
     * once with every expert local, once with none (zero slots, the remote
     * hook computing them all: issue 11's bench configuration, where the
     * backend used to allocate an expert per layer the plan did not count).
     * The backend's own blocks (gw_backend_vram_used) are the ones
     * gw_vram_allocs lists from the same layouts. */
    for (int z = 0; z < 2; z++) {
        const int64_t ctx = T + 8;
        const int Lz = hp->n_layer + hp->n_nextn;
        uint8_t *none = z ? calloc((size_t)Lz * hp->n_expert, 1) : NULL;
        struct gw_vram_parts plan;
        gw_vram_plan(m, none, ctx, &plan);
        if (gw_vram_dense_bytes(m, &plan.dense, &plan.mtp, err, sizeof err)) die("gw_vram_dense_bytes", err);
        const uint64_t total = gw_vram_total(&plan);
        gw_backend *pb = NULL;
        char perr[1024] = "";
        struct gw_backend_params pp = {.kind = "cuda", .kernels = kernels, .vram_budget = total, .n_ctx = ctx, .local = none};
        int prc = gw_backend_create(m, &pp, &pb, perr, sizeof perr);
        struct remote_ctx zctx = {m, 0, 0, 0, {0}};
        struct gw_moe_remote zr = {none, remote_fn, &zctx};
        if (prc == 0 && z) prc = gw_backend_set_moe_remote(pb, &zr, perr, sizeof perr);
        gw_seq *ps = NULL;
        float *pl = malloc((size_t)T * V * sizeof *pl);
        if (prc == 0) prc = gw_seq_create(pb, &ps, perr, sizeof perr);
        if (prc == 0) {
            struct gw_eval_args pa = {.tokens = tok, .n_tokens = T, .logits_rows = GW_ROWS_ALL, .logits = pl};
            prc = gw_eval(ps, &pa, perr, sizeof perr);
        }
        double ep = 1e9;
        if (prc == 0) { /* the CPU's rows again (lc was reused by the greedy runs) */
            float *pr = malloc((size_t)T * V * sizeof *pr);
            gw_seq *cs = seq(cpu);
            eval(cs, tok, T, GW_ROWS_ALL, pr, GW_ROWS_NONE, NULL, NULL);
            ep = rel_err(pl, pr, (int64_t)T * V);
            gw_seq_free(cs);
            free(pr);
        }
        for (int i = 0; i < 4 && prc == 0; i++) {
            struct gw_eval_args da = {.tokens = &tok[i], .n_tokens = 1, .logits_rows = GW_ROWS_LAST, .logits = pl};
            prc = gw_eval(ps, &da, perr, sizeof perr);
        }
        const uint64_t peak = pb ? gw_backend_vram_bytes(pb) : 0;
        if (prc == 0 && !z) { /* 5 more tokens would pass the ctx the budget reserved K/V for: refused up front */
            char cerr[512] = "";
            struct gw_eval_args xa = {.tokens = tok, .n_tokens = 5, .logits_rows = GW_ROWS_LAST, .logits = pl};
            int crc = gw_eval(ps, &xa, cerr, sizeof cerr);
            struct gw_eval_args ya = {.tokens = tok, .n_tokens = 1, .logits_rows = GW_ROWS_LAST, .logits = pl};
            int yrc = crc ? gw_eval(ps, &ya, perr, sizeof perr) : -1; /* the sequence is still usable */
            report("vram-ctx", crc == NB_EINVAL && strstr(cerr, "past the") && yrc == 0,
                   "an eval past the budget's %.0f positions refused, the sequence kept", (double)ctx);
            printf("     (%s)\n", cerr);
        }
        const char *name = z ? "vram-plan-0" : "vram-plan";
        report(name, prc == 0 && peak <= total && ep <= tol, "measured peak %.1f MiB within the planned total", mib(peak));
        printf("     (%s: planned %.1f MiB: dense %.1f + MTP %.1f + K/V %.1f + slots %.1f + scratch %.1f; all-row logits "
               "max|d|/max|ref| = %.3g%s%s)\n",
               z ? "no expert local" : "every expert local", mib(total), mib(plan.dense), mib(plan.mtp), mib(plan.kv),
               mib(plan.slots), mib(plan.scratch), ep, prc ? "; " : "", prc ? perr : "");
        /* the blocks it allocated are the ones the plan lists (an MTP K/V only once an MTP step ran) */
        struct gw_vram_alloc al[16];
        const int na = gw_vram_allocs(m, none, ctx, al, 16);
        uint64_t part[5] = {0}, mtp_kv = 0;
        for (int i = 0; i < na && i < 16; i++) {
            part[al[i].part] += al[i].bytes;
            /* allocated at the first MTP step, the first verify window: not here */
            if (!strcmp(al[i].what, "MTP K/V") || !strcmp(al[i].what, "verify checkpoint")) mtp_kv += al[i].bytes;
        }
        struct gw_vram_parts used = {0};
        if (pb) gw_backend_vram_used(pb, &used);
        report(z ? "vram-blocks-0" : "vram-blocks", prc == 0 && used.dense + used.mtp == part[GW_PART_DENSE] && used.kv <= part[GW_PART_KV] &&
                         used.kv + mtp_kv >= part[GW_PART_KV] && used.slots == part[GW_PART_SLOTS] &&
                         used.scratch >= part[GW_PART_SCRATCH] && used.scratch <= plan.scratch,
               "%.1f MiB of the backend's own blocks, as gw_vram_allocs lists them",
               mib(used.dense + used.mtp + used.kv + used.slots + used.scratch));
        printf("     (allocated: dense %.1f + MTP %.1f + state, K/V, RoPE %.1f (listed %.1f) + slots %.1f (listed %.1f) + "
               "arena and pool %.1f MiB; measured − allocated = %.1f MiB: the driver's pages and own)\n",
               mib(used.dense), mib(used.mtp), mib(used.kv), mib(part[GW_PART_KV]), mib(used.slots),
               mib(part[GW_PART_SLOTS]), mib(used.scratch),
               mib(peak) - mib(used.dense + used.mtp + used.kv + used.slots + used.scratch));
        free(pl);
        gw_seq_free(ps);
        gw_backend_free(pb);
        gw_expert_scratch_free(&zctx.scratch);
        free(none);
    }
    /* over budget: refused, every part named */
    {
        gw_backend *nb = NULL;
        char berr[1024] = "";
        struct gw_backend_params bp = {.kind = "cuda", .kernels = kernels, .vram_budget = 4096, .n_ctx = 256};
        int brc = gw_backend_create(m, &bp, &nb, berr, sizeof berr);
        /* without `local` the layout (and the check) comes at the first eval */
        gw_seq *bs = NULL;
        if (brc == 0 && (brc = gw_seq_create(nb, &bs, berr, sizeof berr)) == 0) {
            float *bl = malloc((size_t)V * sizeof *bl);
            struct gw_eval_args ba = {.tokens = tok, .n_tokens = 1, .logits_rows = GW_ROWS_LAST, .logits = bl};
            brc = gw_eval(bs, &ba, berr, sizeof berr);
            free(bl);
        }
        report("vram-budget", brc == NB_ENOMEM && strstr(berr, "dense weights") && strstr(berr, "expert slots") &&
                                  strstr(berr, "256 positions"),
               "4 KiB refused at the first eval (rc %.0f)", brc);
        printf("     (%s)\n", berr);
        gw_seq_free(bs);
        gw_backend_free(nb);
    }
    gw_backend_free(cpu);
    gw_backend_free(gpu);
    model_close(m);
    free(lc), free(lg), free(wc), free(wg), free(l2), free(tok), free(rc.ids), free(rg.ids);
    printf("%s: %d check(s) failed\n", failures ? "FAIL" : "OK", failures);
    return failures ? 1 : 0;
}
