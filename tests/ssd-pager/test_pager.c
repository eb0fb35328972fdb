/* test_pager.c — nebula-ssd-pager as a process, with the test as its only
 * client (tests/cpu-moe-worker/rig.h without a cpu-moe-worker): an EXPERT
 * request puts exactly experts.bin's blob into the named staging slot; a
 * PLE_ROWS request puts the rows of ple.bin, back to back in request order,
 * from the first slot on; bytes read are whole blobs and whole pages; a bad
 * request is an error answer, after which the pager goes on serving. */
#include <fcntl.h>
#include <sys/prctl.h>

#include "ssd-pager/pager_proto.h"
#include "tests/cpu-moe-worker/rig.h"

/* Sends one request and waits for its answer: 0 and *bytes, or 1 and msg. */
static int ask(struct rig *r, uint32_t kind, uint32_t layer, const int32_t *ids, int rows, int per_row,
               uint64_t *bytes, char *msg, size_t len)
{
    struct ring_slot q, a;
    uint32_t mx = ring_get_geometry(r->pc.req).max_experts;
    cr_assert_eq(ring_reserve(r->pc.req, &q, 5000000000ull, fx_err, sizeof fx_err), 0, "%s", fx_err);
    q.hdr->flags = kind, q.hdr->layer = layer, q.hdr->tag = ++r->tag;
    q.hdr->n_tokens = (uint32_t)rows, q.hdr->n_experts = (uint32_t)per_row;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < per_row; j++) q.expert_ids[i * mx + j] = ids[i * per_row + j];
    if (kind == PAGER_PLE_ROWS) q.expert_ids[mx - 1] = ids[rows * per_row]; /* the first slot */
    cr_assert_eq(ring_publish(r->pc.req, fx_err, sizeof fx_err), 0, "%s", fx_err);
    cr_assert_eq(ring_wait(r->pc.resp, &a, 20000000000ull, fx_err, sizeof fx_err), 0, "no answer: %s", fx_err);
    cr_assert_eq(a.hdr->tag, r->tag);
    int failed = (a.hdr->flags & RING_FLAG_ERROR) != 0;
    if (failed) snprintf(msg, len, "%.200s", (const char *)a.payload);
    else memcpy(bytes, a.payload, sizeof *bytes);
    cr_assert_eq(ring_release(r->pc.resp, fx_err, sizeof fx_err), 0, "%s", fx_err);
    return failed;
}

static void read_at(const char *dir, const char *name, void *buf, size_t n, uint64_t off)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDONLY);
    cr_assert(fd >= 0 && pread(fd, buf, n, (off_t)off) == (ssize_t)n, "read %s", path);
    close(fd);
}

static void expert_blobs(const char *base)
{
    struct rig r = {0};
    char msg[256];
    rig_tmp_base = base; /* (tmpfs takes O_DIRECT on this kernel: the pread fallback is not reached by a test) */
    rig_start(&r, fixture_gguf_typed("tiny-b", "mix"), "64K", false);
    uint64_t total = 0, bytes;
    uint8_t *want = malloc(r.idx.max_blob_bytes);
    for (int i = 0; i < 12; i++) {
        int li = i % r.idx.n_layers, e = (i * 5) % (int)r.idx.layers[li].n_expert, slot = i % 4;
        int32_t ids[2] = {e, slot};
        cr_assert_eq(ask(&r, PAGER_EXPERT, (uint32_t)li, ids, 1, 2, &bytes, msg, sizeof msg), 0, "%s", msg);
        uint64_t n = r.idx.layers[li].blob_bytes;
        cr_assert_eq(bytes, n);
        read_at(r.prep, "experts.bin", want, n, prepared_blob_offset(&r.idx, li, (uint32_t)e));
        cr_assert(!memcmp(r.staging.base + slot * r.conf.staging_slot_bytes, want, n), "layer %d expert %d", li, e);
        total += n;
    }
    int32_t bad[2] = {(int32_t)r.idx.layers[0].n_expert, 0};
    cr_assert_eq(ask(&r, PAGER_EXPERT, 0, bad, 1, 2, &bytes, msg, sizeof msg), 1, "an expert out of range was served");
    cr_assert(strstr(msg, "out of range"), "%s", msg);
    cr_assert_eq(shm_stats_get(r.stats, RIG_PAGER, SHM_STAT_BYTES_READ), total);
    cr_assert_eq(shm_stats_get(r.stats, RIG_PAGER, SHM_STAT_STEPS), 12);
    cr_assert_eq(shm_stats_get(r.stats, RIG_PAGER, SHM_STAT_ERRORS), 1);
    free(want);
    rig_stop(&r);
}

Test(ssd_pager, expert_blobs_into_staging) { expert_blobs("/tmp"); }

Test(ssd_pager, ple_rows_in_request_order)
{
    struct rig r = {0};
    char msg[256];
    rig_start(&r, fixture_gguf_typed("tiny-a", "q8_0"), "48K", false);
    struct prepared_ple ple;
    cr_assert_eq(prepared_ple_load(r.prep, &ple, fx_err, sizeof fx_err), 0, "%s", fx_err);
    enum { ROWS = 4, PER_ROW = 7, N = ROWS * PER_ROW };
    int32_t ids[N + 1];
    unsigned seed = 7;
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((unsigned)rand_r(&seed) % ple.rows);
    ids[N] = 1; /* first staging slot */
    cr_assert_leq(N * ple.row_bytes, 3 * r.conf.staging_slot_bytes, "the fixture's rows do not fit");
    uint64_t bytes = 0;
    cr_assert_eq(ask(&r, PAGER_PLE_ROWS, 0, ids, ROWS, PER_ROW, &bytes, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(bytes, (uint64_t)N * (ple.pages_per_row ? ple.pages_per_row : 1) * PREPARED_PAGE);
    uint8_t *want = malloc(ple.row_bytes);
    for (int i = 0; i < N; i++) {
        uint64_t page;
        uint32_t in_page;
        prepared_ple_row(&ple, (uint64_t)ids[i], &page, &in_page);
        read_at(r.prep, "ple.bin", want, ple.row_bytes, page + in_page);
        cr_assert(!memcmp(r.staging.base + r.conf.staging_slot_bytes + i * ple.row_bytes, want, ple.row_bytes),
                  "row %d (id %d) differs", i, ids[i]);
    }
    int32_t too_far[2] = {(int32_t)ple.rows, 1};
    cr_assert_eq(ask(&r, PAGER_PLE_ROWS, 0, too_far, 1, 1, &bytes, msg, sizeof msg), 1, "a row out of range was served");
    free(want);
    rig_stop(&r);
}

/* A coordinator that dies without a shutdown takes its workers with it: the
 * pager is spawned by a stand-in parent, which is killed after the pager has
 * served; the pager, reparented to this test (a subreaper), exits by itself
 * with status 0 within a few heartbeats. */
Test(ssd_pager, exits_when_its_spawner_dies)
{
    struct rig r = {.via_stand_in = true};
    char msg[256];
    uint64_t bytes;
    cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    rig_start(&r, fixture_gguf_typed("tiny-a", "q8_0"), "48K", false);
    int32_t ids[2] = {0, 0};
    cr_assert_eq(ask(&r, PAGER_EXPERT, 0, ids, 1, 2, &bytes, msg, sizeof msg), 0, "%s", msg);
    kill(r.stand_in_pid, SIGKILL);
    waitpid(r.stand_in_pid, NULL, 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int st = rig_reap(r.pid_pager);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the orphaned pager ended with status %d", st);
    cr_assert_lt(t1.tv_sec - t0.tv_sec, 3, "the orphaned pager took %ld s to stop", (long)(t1.tv_sec - t0.tv_sec));
    cr_assert_gt(rig_log_count(&r, "pager.log", "is gone: stopping"), 0);
    r.pid_pager = 0;
    rig_stop(&r);
}
