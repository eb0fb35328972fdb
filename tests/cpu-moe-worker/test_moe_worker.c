/* test_moe_worker.c — nebula-cpu-moe-worker and nebula-ssd-pager as
 * processes (rig.h plays the coordinator and the gpu-worker): every remote
 * pair's contribution equals gw_expert_ffn on the GGUF's own expert tensors
 * bit for bit, for RAM- and SSD-tier experts, plain and fused gate_up, trunk
 * and MTP blocks; the pager's byte counter equals the SSD-tier blobs the
 * requests needed; a pager killed with SIGKILL makes the affected request
 * fail (no hang) and a new pager makes requests succeed again; after
 * shutdown nothing is left in /dev/shm. */
#include "tests/cpu-moe-worker/rig.h"

#include <math.h>
#include <sys/wait.h>

static float rnd(unsigned *s) { return (float)rand_r(s) / (float)RAND_MAX * 2.0f - 1.0f; }

/* The reference: weight · FFN_e(x) from the GGUF's tensors, the way the
 * single-process backend computes it. */
static void reference(const struct rig *r, int block, int e, const float *x, float w, float *out)
{
    const struct model_moe *t = &r->m->layers[block].moe;
    struct gw_expert ex = {t->gate_exps.data + (size_t)e * t->gate_exps.mat_bytes,
                           t->up_exps.data + (size_t)e * t->up_exps.mat_bytes,
                           t->down_exps.data + (size_t)e * t->down_exps.mat_bytes,
                           t->gate_exps.type, t->up_exps.type, t->down_exps.type, r->m->hp.n_embd,
                           t->gate_exps.ne[1]};
    cr_assert_eq(gw_expert_ffn(&ex, x, 1, &w, out), 0);
}

/* Fills a request of n rows × k slots on `block`: random experts (a quarter
 * MOE_LOCAL) and weights; force_ssd puts one SSD-tier expert in slot 0 of every
 * row and, if the layer has one, one RAM-tier expert in slot 1 (multi-row groups).
 * Adds the SSD-tier blob bytes this request needs to r->ssd_bytes. */
static void fill(struct rig *r, struct ring_slot *s, int block, int n, int k, bool force_ssd)
{
    int li = prepared_idx_layer_of_block(&r->idx, (uint32_t)block);
    const struct prepared_layer *L = &r->idx.layers[li];
    uint32_t mx = ring_get_geometry(r->rp.req).max_experts;
    int64_t C = r->m->hp.n_embd;
    uint8_t seen[1024] = {0};
    s->hdr->layer = (uint32_t)block, s->hdr->n_tokens = (uint32_t)n, s->hdr->n_experts = (uint32_t)k;
    s->hdr->tag = ++r->tag;
    s->hdr->payload_bytes = (uint32_t)(n * C * sizeof(float));
    for (int64_t i = 0; i < n * C; i++) ((float *)s->payload)[i] = rnd(&r->seed);
    int first_ram = -1;
    for (int e = (int)L->n_expert - 1; e >= 0; e--)
        if (r->plc.tier[li][e] == PREPARED_RAM) first_ram = e;
    for (int row = 0; row < n; row++)
        for (int j = 0; j < k; j++) {
            int e = rand_r(&r->seed) % (int)L->n_expert;
            if (force_ssd && j == 0) /* every row: the same SSD-tier expert (one group of n rows) */
                for (e = 0; r->plc.tier[li][e] == PREPARED_RAM; e++) {}
            else if (force_ssd && j == 1 && first_ram >= 0) /* and the same RAM-tier one */
                e = first_ram;
            else if (rand_r(&r->seed) % 4 == 0) e = MOE_LOCAL;
            s->expert_ids[row * mx + j] = e;
            s->expert_weights[row * mx + j] = (rnd(&r->seed) + 1.0f) / 2.0f;
            if (e != MOE_LOCAL && r->plc.tier[li][e] != PREPARED_RAM && !seen[e]++) r->ssd_bytes += L->blob_bytes;
        }
}

/* Set by the fast- and int8-kernel tests: answers are checked within
 * tolerance · (|ref| + 10 · max |ref|) (test_expert_ffn.c checks the
 * kernels' numerics; this checks the wiring); 0: bit for bit. */
static double tolerance;
static const char *kernels_name = "ref";

/* Checks every remote (row, slot) of the answer against the reference. */
static void check(const struct rig *r, const struct ring_slot *q, const struct ring_slot *a)
{
    uint32_t mx = ring_get_geometry(r->rp.req).max_experts, n = q->hdr->n_tokens, k = q->hdr->n_experts;
    int64_t C = r->m->hp.n_embd;
    float *want = malloc((size_t)C * sizeof *want);
    cr_assert_eq(a->hdr->payload_bytes, n * k * C * sizeof(float));
    for (uint32_t row = 0; row < n; row++)
        for (uint32_t j = 0; j < k; j++) {
            int e = q->expert_ids[row * mx + j];
            if (e == MOE_LOCAL) continue;
            reference(r, (int)q->hdr->layer, e, (const float *)q->payload + row * C, q->expert_weights[row * mx + j],
                      want);
            const float *got = (const float *)a->payload + ((int64_t)row * k + j) * C;
            if (tolerance > 0) {
                double mx = 0;
                for (int64_t c = 0; c < C; c++) mx = fmax(mx, fabs(want[c]));
                for (int64_t c = 0; c < C; c++)
                    cr_assert_leq(fabs((double)got[c] - want[c]), tolerance * (fabs(want[c]) + 10 * mx),
                                  "layer %u row %u expert %d out %ld: %s %.9g, ref %.9g", q->hdr->layer, row, e,
                                  (long)c, kernels_name, (double)got[c], (double)want[c]);
                continue;
            }
            cr_assert(!memcmp(got, want, (size_t)C * sizeof *want),
                      "layer %u row %u expert %d: differs from gw_expert_ffn (%g vs %g)", q->hdr->layer, row, e,
                      (double)got[0], (double)want[0]);
        }
    free(want);
}

/* One round trip.  Returns 0 (checked bit for bit) or 1 (an error answer,
 * whose message goes to msg). */
static int round_trip(struct rig *r, int block, int n, int k, bool force_ssd, char *msg, size_t len)
{
    char err[256];
    struct ring_slot q, a;
    cr_assert_eq(ring_reserve(r->rp.req, &q, 5000000000ull, err, sizeof err), 0, "%s", err);
    fill(r, &q, block, n, k, force_ssd);
    cr_assert_eq(ring_publish(r->rp.req, err, sizeof err), 0, "%s", err);
    for (;;) { /* a restarted worker may answer the last request of its predecessor again: skip it */
        cr_assert_eq(ring_wait(r->rp.resp, &a, 20000000000ull, err, sizeof err), 0, "no answer: %s", err);
        if (a.hdr->tag == r->tag) break;
        cr_assert_lt(a.hdr->tag, r->tag, "an answer to a request never sent");
        cr_assert_eq(ring_release(r->rp.resp, err, sizeof err), 0, "%s", err);
    }
    int failed = (a.hdr->flags & RING_FLAG_ERROR) != 0;
    if (failed) snprintf(msg, len, "%.200s", (const char *)a.payload);
    else check(r, &q, &a);
    cr_assert_eq(ring_release(r->rp.resp, err, sizeof err), 0, "%s", err);
    return failed;
}

/* Random requests over every block with routed experts; all must succeed. */
static int stream(struct rig *r, int count)
{
    char msg[256];
    int n_blocks = r->m->hp.n_layer + r->m->hp.n_nextn, k = r->m->hp.n_expert_used;
    for (int i = 0; i < count; i++) {
        int block = i % n_blocks, n = 1 + rand_r(&r->seed) % RIG_MAX_TOKENS;
        cr_assert_eq(round_trip(r, block, n, k, i % 3 == 0, msg, sizeof msg), 0, "request %d failed: %s", i, msg);
    }
    return count;
}

static void bit_exact(const char *name, const char *type, const char *ram)
{
    struct rig r = {0};
    rig_start(&r, fixture_gguf_typed(name, type), ram, true);
    int n = stream(&r, 40);
    cr_assert_eq(shm_stats_get(r.stats, RIG_PAGER, SHM_STAT_BYTES_READ), r.ssd_bytes,
                 "pager read %lu bytes, the SSD-tier experts requested are %lu",
                 (unsigned long)shm_stats_get(r.stats, RIG_PAGER, SHM_STAT_BYTES_READ), (unsigned long)r.ssd_bytes);
    cr_assert_eq(shm_stats_get(r.stats, RIG_MOE_WORKER, SHM_STAT_STEPS), (uint64_t)n);
    cr_assert_gt(shm_stats_get(r.stats, RIG_MOE_WORKER, SHM_STAT_EXPERT_HITS), 0);
    cr_assert_gt(shm_stats_get(r.stats, RIG_MOE_WORKER, SHM_STAT_EXPERT_MISSES), 0);
    cr_assert_eq(shm_stats_get(r.stats, RIG_MOE_WORKER, SHM_STAT_ERRORS), 0);
    rig_stop(&r);
}

Test(moe_worker, bit_exact_tiny_a_q8_0) { bit_exact("tiny-a", "q8_0", "48K"); }
Test(moe_worker, bit_exact_tiny_b_mix_fused_mtp) { bit_exact("tiny-b", "mix", "64K"); }

/* configure's kernels k (the coordinator's --cpu-kernels): answers within
 * tol of gw_expert_ffn, and the worker says which kernels it runs. */
static void kernels_tiny_b_mix(const char *k, double tol)
{
    tolerance = tol, kernels_name = k;
    struct rig r = {0};
    snprintf(r.conf.kernels, sizeof r.conf.kernels, "%s", k);
    rig_start(&r, fixture_gguf_typed("tiny-b", "mix"), "64K", true);
    stream(&r, 20);
    cr_assert_eq(shm_stats_get(r.stats, RIG_MOE_WORKER, SHM_STAT_ERRORS), 0);
    char path[256], text[8192] = "";
    snprintf(path, sizeof path, "%s/moe.log", r.dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    size_t got = fread(text, 1, sizeof text - 1, f);
    text[got] = 0;
    fclose(f);
    char want[32];
    snprintf(want, sizeof want, "kernels %s", k);
    cr_assert_not_null(strstr(text, want), "the worker's log does not say it runs the %s kernels:\n%s", k, text);
    rig_stop(&r);
}

Test(moe_worker, fast_kernels_tiny_b_mix) { kernels_tiny_b_mix("fast", 1e-5); }
/* int8: activations quantized to 8 bits, so a wiring check's tolerance (the
 * FFN's own bound is test_expert_ffn.c's). */
Test(moe_worker, int8_kernels_tiny_b_mix) { kernels_tiny_b_mix("int8", 3e-2); }

Test(moe_worker, unknown_kernels_refused)
{
    int st = system("build/bin/nebula-cpu-moe-worker --kernels fastest --control ipc:///nonexistent 2>/dev/null");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "status %d", st);
}

Test(moe_worker, pager_killed_and_replaced)
{
    struct rig r = {0};
    char msg[256];
    rig_start(&r, fixture_gguf_typed("tiny-a", "mix"), "48K", true);
    stream(&r, 6);
    /* Killed while a request is in flight: that one may succeed or fail, never hang. */
    struct ring_slot q;
    cr_assert_eq(ring_reserve(r.rp.req, &q, 5000000000ull, fx_err, sizeof fx_err), 0, "%s", fx_err);
    fill(&r, &q, 0, RIG_MAX_TOKENS, r.m->hp.n_expert_used, true);
    cr_assert_eq(ring_publish(r.rp.req, fx_err, sizeof fx_err), 0, "%s", fx_err);
    kill(r.pid_pager, SIGKILL);
    struct ring_slot a;
    cr_assert_eq(ring_wait(r.rp.resp, &a, 20000000000ull, fx_err, sizeof fx_err), 0, "hang: %s", fx_err);
    cr_assert_eq(ring_release(r.rp.resp, fx_err, sizeof fx_err), 0, "%s", fx_err);
    int st = rig_reap(r.pid_pager);
    cr_assert(WIFSIGNALED(st));
    /* With no pager, a request that needs the SSD fails with a message. */
    cr_assert_eq(round_trip(&r, 1, 2, r.m->hp.n_expert_used, true, msg, sizeof msg), 1, "served without a pager");
    cr_assert(strstr(msg, "gone") || strstr(msg, "pager"), "unexpected message: %s", msg);
    cr_assert_gt(shm_stats_get(r.stats, RIG_MOE_WORKER, SHM_STAT_ERRORS), 0);
    rig_restart_pager(&r);
    stream(&r, 12);
    rig_stop(&r);
}

/* A restarted cpu-moe-worker finds the arena loaded and keeps it. */
Test(moe_worker, restart_keeps_the_arena)
{
    struct rig r = {0};
    rig_start(&r, fixture_gguf_typed("tiny-a", "q8_0"), "48K", true);
    stream(&r, 4);
    kill(r.pid_moe, SIGKILL);
    cr_assert(WIFSIGNALED(rig_reap(r.pid_moe)));
    rig_restart_moe(&r);
    stream(&r, 8);
    int loads = rig_log_count(&r, "moe.log", "loaded from experts.bin"), keeps = rig_log_count(&r, "moe.log", "already loaded, kept");
    cr_assert(loads == 1 && keeps == 1, "arena loaded %d times, kept %d (want 1 and 1)", loads, keeps);
    rig_stop(&r);
}
