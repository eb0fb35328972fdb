/* nebula-cpu-moe-worker — computes the routed experts the gpu-worker does not
 * hold: serves the `moe` ring pair (moe_proto.h) with gw_expert_ffn on raw
 * quantized rows, RAM-tier experts from the shared arena, SSD-tier ones paged
 * through the ssd-pager into staging.
 *
 * The key idea: every pair goes through the same reference function on the
 * same bytes as the single-process engine, so placement changes speed, never
 * results.  Control (hello/configure/ready/heartbeat/shutdown) is
 * core/ctl/worker.h; the configure message names the instance, the prepared
 * directory and placement, the rings and this worker's staging slots. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/util/err.h"
#include "core/util/log.h"
#include "core/util/opts.h"
#include "cpu-moe-worker/moe.h"

static int open_regions(struct moe_worker *m, char *err, size_t errlen)
{
    const struct ctl_configure *c = &m->conf;
    int rc = shm_region_open(c->instance, "experts", &m->arena, err, errlen);
    if (!rc) rc = shm_region_open(c->instance, "moe", &m->moe_reg, err, errlen);
    if (!rc) rc = shm_region_open(c->instance, "stats", &m->stats_reg, err, errlen);
    if (!rc) rc = shm_stats_open(&m->stats, &m->stats_reg, err, errlen);
    if (!rc) rc = shm_stats_claim(m->stats, c->stats_worker, "cpu-moe-worker", 2, err, errlen);
    return rc;
}

/* The pager side exists only when some expert is on the SSD tier (a
 * VRAM-tier expert sent here is paged too, when there is a pager). */
static int open_pager(struct moe_worker *m, char *err, size_t errlen)
{
    const struct ctl_configure *c = &m->conf;
    int rc = shm_region_open(c->instance, "staging", &m->staging, err, errlen);
    if (!rc && (uint64_t)(c->staging_first + c->staging_count) * c->staging_slot_bytes > m->staging.bytes)
        rc = nb_errf(err, errlen, NB_EINVAL, "staging slots %u+%u do not fit the region", c->staging_first,
                     c->staging_count);
    if (!rc && c->staging_slot_bytes < m->idx.max_blob_bytes)
        rc = nb_errf(err, errlen, NB_EINVAL, "staging slots of %lu bytes hold no blob of %lu",
                     (unsigned long)c->staging_slot_bytes, (unsigned long)m->idx.max_blob_bytes);
    if (!rc) rc = shm_region_open(c->instance, "pager", &m->pager_reg, err, errlen);
    if (!rc) rc = ring_pair_attach(&m->pager, &m->pager_reg, c->pager_offset, RING_CLIENT, NULL, err, errlen);
    return rc;
}

static int setup(void *ctx, char *err, size_t errlen)
{
    struct moe_worker *m = ctx;
    bool loaded_now = false;
    int rc = prepared_plan_load(m->conf.prepared, m->conf.placement, &m->idx, &m->plc, err, errlen);
    /* --kernels, where given, else configure's (the coordinator's --cpu-kernels), else ref. */
    const char *k = m->kernels_flag ? m->kernels_flag : m->conf.kernels;
    if (!rc && *k && gw_kernels_parse(k, &m->kernels))
        rc = nb_errf(err, errlen, NB_EINVAL, "configure: kernels \"%s\": want ref, fast or int8", k);
    if (!rc) rc = open_regions(m, err, errlen);
    if (!rc) rc = moe_arena_load(m, &loaded_now, err, errlen);
    if (!rc && m->plc.n_ssd > 0) rc = open_pager(m, err, errlen);
    if (!rc) rc = ring_pair_attach(&m->moe, &m->moe_reg, m->conf.moe_offset, RING_SERVER, NULL, err, errlen);
    if (!rc) rc = moe_serve_init(m, err, errlen);
    if (!rc && m->conf.threads > 0) omp_set_num_threads(m->conf.threads);
    if (!rc)
        nb_log("arena: %lu RAM-tier experts%s (%lu bytes) %s; %lu others paged", (unsigned long)m->plc.n_ram,
               m->plc.arena_vram ? " and the VRAM tier's" : "", (unsigned long)m->plc.arena_bytes,
               loaded_now ? "loaded from experts.bin" : "already loaded, kept",
               (unsigned long)(m->plc.n_ssd + (m->plc.arena_vram ? 0 : m->plc.n_vram)));
    if (!rc)
        nb_log("kernels %s, %d threads, OMP_WAIT_POLICY %s, ring spin %u µs after a request", gw_kernels_name(m->kernels),
               omp_get_max_threads(), getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "unset (libgomp's bounded spin)",
               m->conf.ring_spin_us);
    return rc;
}

static void teardown(void *ctx)
{
    struct moe_worker *m = ctx;
    ring_pair_detach(&m->moe);
    ring_pair_detach(&m->pager);
    if (m->stats) shm_stats_close(m->stats);
    struct shm_region *regs[] = {&m->arena, &m->staging, &m->moe_reg, &m->pager_reg, &m->stats_reg};
    for (size_t i = 0; i < sizeof regs / sizeof *regs; i++) shm_region_close(regs[i]);
    prepared_placement_free(&m->plc);
    prepared_idx_free(&m->idx);
    moe_serve_free(m);
}

/* One turn of the serving loop (ctl_worker_serve). */
static int turn(void *ctx, char *err, size_t errlen)
{
    int rc = moe_serve_one(ctx, 100000000ull, err, errlen);
    if (rc == SHM_EPEER) usleep(10000); /* no gpu-worker attached (yet, or it is being restarted) */
    return rc == SHM_ETIMEDOUT || rc == SHM_EPEER ? 0 : rc;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: nebula-cpu-moe-worker --control ENDPOINT [--configure-timeout-ms N] [--pager-timeout-ms N]\n"
               "                             [--kernels ref|fast|int8]\n"
               "\n"
               "Computes the routed experts the gpu-worker does not hold (the moe ring pair of a Nebula\n"
               "instance): RAM-tier experts from the shared arena, SSD-tier ones paged by the ssd-pager.\n"
               "Started by the coordinator, which sends the configuration over the control socket\n"
               "(docs/PIPELINE.md).\n"
               "\n"
               "  --control ENDPOINT          the coordinator's ROUTER endpoint (ipc://...)\n"
               "  --configure-timeout-ms N    how long to wait for configure (default 10000)\n"
               "  --pager-timeout-ms N        longest wait for one pager answer (default 5000)\n"
               "  --kernels ref|fast|int8     expert matrix kernels (default: configure's, which is the\n"
               "                              coordinator's --cpu-kernels, else ref):\n"
               "                              ref is bit-identical for any placement, fast (SIMD, fp32\n"
               "                              sums) within float tolerance, int8 (opt-in, approximate:\n"
               "                              activations quantized to 8 bits, VNNI dots) within the\n"
               "                              activations' rounding (README.md)\n"
               "  -h, --help                  this text\n");
}

int main(int argc, char **argv)
{
    const char *endpoint = NULL, *kernels = NULL;
    int timeout_ms = 10000, pager_ms = 5000;
    static const struct option opts[] = {
        NB_OPT_ARG("control", 'c'), NB_OPT_ARG("configure-timeout-ms", 't'), NB_OPT_ARG("pager-timeout-ms", 'p'),
        NB_OPT_ARG("kernels", 'k'), NB_OPT_FLAG("help", 'h'), NB_OPT_END};
    for (int o; (o = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        if (o == 'c') endpoint = optarg;
        else if (o == 't') timeout_ms = atoi(optarg);
        else if (o == 'p') pager_ms = atoi(optarg);
        else if (o == 'k') kernels = optarg;
        else if (o == 'h') return usage(stdout), 0;
        else return usage(stderr), 2;
    }
    if (!endpoint || optind != argc || pager_ms <= 0) return usage(stderr), 2;
    nb_log_set_name("cpu-moe-worker");
    struct moe_worker m = {.arena.fd = -1, .staging.fd = -1, .moe_reg.fd = -1, .pager_reg.fd = -1, .stats_reg.fd = -1};
    m.pager_tag = (uint64_t)getpid() << 32;
    m.pager_timeout_ns = (uint64_t)pager_ms * 1000000ull;
    if (kernels && gw_kernels_parse(kernels, &m.kernels)) {
        fprintf(stderr, "nebula-cpu-moe-worker: --kernels must be ref, fast or int8, not '%s'\n", kernels);
        return 2;
    }
    m.kernels_flag = kernels;
    static const struct ctl_worker_life life = {.setup = setup, .turn = turn, .teardown = teardown};
    return ctl_worker_run(endpoint, "cpu-moe-worker", timeout_ms, &m.conf, &life, &m);
}
