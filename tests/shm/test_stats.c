/* test_stats.c — the stats region (shm/stats.c): a worker's counters are seen
 * by another process while it runs and after it died, at their documented
 * offsets; one writer per block; another layout version is refused. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "shm_fixture.h"

enum { WORKERS = 4, LAYERS = 49 };

static shm_stats *open_stats(struct shm_region *reg)
{
    shm_stats *s = NULL;
    cr_assert_eq(shm_stats_open(&s, reg, fx_err, sizeof fx_err), 0, "%s", fx_err);
    return s;
}

struct worker_run {
    const char *id;
    struct fx_pipe counted, done;
};

/* Child: claims block 2 as "cpu-moe-worker", counts, says so, waits for the
 * test to look, counts a little more, exits without closing anything. */
static int count_as_worker(void *arg)
{
    struct worker_run *w = arg;
    struct shm_region reg;
    shm_stats *s;
    if (shm_region_open(w->id, "stats", &reg, fx_err, sizeof fx_err) != 0) return 10;
    if (shm_stats_open(&s, &reg, fx_err, sizeof fx_err) != 0) return 11;
    if (shm_stats_claim(s, 2, "cpu-moe-worker", 3, fx_err, sizeof fx_err) != 0) return 12;
    for (int i = 0; i < 1000; i++) {
        shm_stats_add(s, 2, SHM_STAT_EXPERT_HITS, 3);
        shm_stats_add(s, 2, SHM_STAT_EXPERT_MISSES, 1);
        shm_stats_add_layer(s, 2, (uint32_t)(i % LAYERS), 1000);
    }
    shm_stats_add(s, 2, SHM_STAT_BYTES_READ, 1ull << 40);
    shm_stats_add(s, 1, SHM_STAT_EXPERT_HITS, 5); /* not our block: ignored */
    char one = 1;
    if (fx_send(&w->counted, &one, 1) != 0 || fx_recv(&w->done, &one, 1) != 0) return 13;
    shm_stats_add(s, 2, SHM_STAT_ERRORS, 1);
    _exit(0);
}

Test(stats, counters_are_read_across_processes_while_and_after_the_worker_runs)
{
    shm_instance *inst = fx_instance();
    struct shm_region reg = fx_region(inst, "stats", shm_stats_bytes(WORKERS, LAYERS));
    cr_assert_eq(shm_stats_format(&reg, WORKERS, LAYERS, fx_err, sizeof fx_err), 0, "%s", fx_err);
    shm_stats *s = open_stats(&reg);
    cr_assert_eq(shm_stats_n_workers(s), WORKERS);
    cr_assert_eq(shm_stats_n_layers(s), LAYERS);
    cr_assert_eq(shm_stats_worker_info(s, 2).pid, 0, "never claimed");

    struct worker_run w = {.id = shm_instance_id(inst)};
    fx_pipe_open(&w.counted);
    fx_pipe_open(&w.done);
    pid_t pid = fx_spawn(count_as_worker, &w);
    char one = 1;
    cr_assert_eq(fx_recv(&w.counted, &one, 1), 0);

    struct shm_stats_worker info = shm_stats_worker_info(s, 2);
    cr_assert_eq(info.pid, (uint32_t)pid);
    cr_assert_str_eq(info.name, "cpu-moe-worker");
    cr_assert_eq(info.kind, 3);
    cr_assert_eq(info.epoch, 1);
    cr_assert(info.alive, "the worker holds its block");
    cr_assert_eq(shm_stats_get(s, 2, SHM_STAT_EXPERT_HITS), 3000);
    cr_assert_eq(shm_stats_get(s, 2, SHM_STAT_EXPERT_MISSES), 1000);
    cr_assert_eq(shm_stats_get(s, 2, SHM_STAT_BYTES_READ), 1ull << 40);
    cr_assert_eq(shm_stats_get(s, 1, SHM_STAT_EXPERT_HITS), 0, "another block is untouched");
    cr_assert_eq(shm_stats_layer_calls(s, 2, 0), 21); /* i % 49 == 0 for 21 of 0..999 */
    cr_assert_eq(shm_stats_layer_ns(s, 2, 48), 20 * 1000);
    /* A second writer is kept out while the worker lives. */
    cr_assert_eq(shm_stats_claim(s, 2, "intruder", 9, fx_err, sizeof fx_err), SHM_EBUSY);

    /* The documented offsets: block 2 at 64 + 2 * block_bytes, counters at +64. */
    size_t block_bytes = (320 + 16 * LAYERS + 63) / 64 * 64;
    const uint8_t *b2 = reg.base + 64 + 2 * block_bytes;
    cr_assert_eq(*(const uint32_t *)(reg.base + 0), 0x5453424e, "magic");
    cr_assert_eq(*(const uint32_t *)(reg.base + 4), 1, "version");
    cr_assert_eq(*(const uint32_t *)(reg.base + 20), block_bytes, "block_bytes");
    cr_assert_eq(*(const uint32_t *)b2, (uint32_t)pid, "pid at +0");
    cr_assert_eq(*(const uint64_t *)(b2 + 64 + 8 * SHM_STAT_EXPERT_HITS), 3000, "hits counter");
    cr_assert_eq(*(const uint64_t *)(b2 + 320 + 8 * LAYERS), 21, "layer_calls[0]");

    cr_assert_eq(fx_send(&w.done, &one, 1), 0);
    cr_assert_eq(fx_reap(pid), 0);
    info = shm_stats_worker_info(s, 2);
    cr_assert_not(info.alive, "dead worker: block free");
    cr_assert_eq(shm_stats_get(s, 2, SHM_STAT_ERRORS), 1, "counts outlive the worker");

    /* A restarted worker takes the block again: epoch 2, totals kept. */
    cr_assert_eq(shm_stats_claim(s, 2, "cpu-moe-worker", 3, fx_err, sizeof fx_err), 0, "%s", fx_err);
    cr_assert_eq(shm_stats_worker_info(s, 2).epoch, 2);
    shm_stats_add(s, 2, SHM_STAT_EXPERT_HITS, 1);
    cr_assert_eq(shm_stats_get(s, 2, SHM_STAT_EXPERT_HITS), 3001);
    shm_stats_close(s);
    shm_region_close(&reg);
    fx_instance_end(inst);
}

Test(stats, bad_layouts_are_refused)
{
    shm_instance *inst = fx_instance();
    struct shm_region reg = fx_region(inst, "stats", shm_stats_bytes(WORKERS, LAYERS));
    shm_stats *s;
    cr_assert_eq(shm_stats_open(&s, &reg, fx_err, sizeof fx_err), NB_EFORMAT, "not formatted");
    cr_assert_eq(shm_stats_format(&reg, WORKERS + 1, LAYERS, fx_err, sizeof fx_err), NB_EINVAL, "does not fit");
    cr_assert_eq(shm_stats_format(&reg, 0, LAYERS, fx_err, sizeof fx_err), NB_EINVAL);
    cr_assert_eq(shm_stats_format(&reg, WORKERS, LAYERS, fx_err, sizeof fx_err), 0);
    s = open_stats(&reg);
    cr_assert_eq(shm_stats_claim(s, WORKERS, "x", 0, fx_err, sizeof fx_err), NB_EINVAL, "block out of range");
    shm_stats_close(s);
    *(uint32_t *)(reg.base + 4) = 2;
    cr_assert_eq(shm_stats_open(&s, &reg, fx_err, sizeof fx_err), NB_ENOTSUP, "version 2");
    cr_assert(strstr(fx_err, "version 2"), "%s", fx_err);
    shm_region_close(&reg);
    fx_instance_end(inst);
}
