/* main.c — nebula-coordinator: one instance of the pipeline (docs/PIPELINE.md).
 *
 * Start-up, in order: the instance (shm_instance_create removes regions of
 * dead instances first), the runtime directory (0700) with control.sock
 * (ROUTER, workers) and ctl.sock (REP, nebulactl and `nebula generate
 * --server`), the regions (`step` and `moe` ring pairs, `stats`), whose
 * names are unlinked at once (shm_instance_unlink: workers get them through
 * fds inherited at spawn), the model's tokenizer and sizes, then the
 * workers, each configured on its hello.  The
 * loop serves both sockets and supervises.  shutdown (or SIGINT/SIGTERM)
 * stops the workers, destroys every region and removes the runtime
 * directory: nothing stays in /dev/shm. */
#include "coordinator/coord.h"
#include "coordinator/api.h"

#include "core/event/event.h"

#include "core/conf/conf.h"
#include "core/model/model.h"
#include "core/prepared/prepared.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/err.h"
#include "core/util/log.h"
#include "cpu-moe-worker/moe_proto.h"
#include "engine/ffn.h"
#include "engine/vram.h"
#include "gpu-worker/step_proto.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define MOE_RING_ROWS 64u /* rows per moe message: a prefill chunk goes as several pieces */

static struct coord *the_coord; /* for the signal handlers */
static void on_stop(int sig) { (void)sig, the_coord->stop = true; }
static void on_child(int sig) { (void)sig, the_coord->got_sigchld = 1; }

static void usage(FILE *f)
{
    fprintf(f, "usage: nebula-coordinator [--config FILE] --model M.gguf [--mtp FILE] [--prepared DIR] [--runtime DIR] [--threads N] [--chunk N]\n"
               "                          [--backend auto|cpu|cuda] [--kernels ref|fast] [--cpu-kernels ref|fast]\n"
               "                          [--vram-budget BYTES] [--ctx N] [--layer-times] [--cache on|off|auto] [--cache-dir DIR]\n"
               "                          [--http HOST:PORT|off] [--max-queue N] [--max-body BYTES] [--demo] [--name NAME]\n"
               "\n"
               "Runs one instance of the Nebula pipeline: creates its shared-memory regions and runtime\n"
               "directory, starts and supervises the workers (binaries next to this one), serves requests\n"
               "on RUNDIR/ctl.sock (nebulactl, nebula generate --server RUNDIR) and the HTTP API\n"
               "(OpenAI-compatible /v1/chat/completions, /v1/completions, /v1/models; /api/status,\n"
               "/api/tokenize, /metrics: docs/API.md).  HTTP is up before the workers are ready:\n"
               "/api/status reports the loading phase.\n"
               "\n"
               "  --config FILE    nebula.conf to read (default: $XDG_CONFIG_HOME/nebula/nebula.conf, else\n"
               "                   the repository's conf/nebula.conf); the flags below override it\n"
               "  --model FILE     qwen4exp GGUF the gpu-worker runs\n"
               "  --mtp FILE       a separate MTP (draft) GGUF for it, passed to the workers that load the model\n"
               "                   (Unsloth's MTP/mtp-*.gguf); without it the model file's own MTP block, or none\n"
               "  --prepared DIR   output of nebula-prepare: DIR/placement.json says which experts are not\n"
               "                   VRAM-tier (those go to the cpu-moe-worker); without it every expert is local\n"
               "  --runtime DIR    runtime directory (created 0700, removed at shutdown); default\n"
               "                   $XDG_RUNTIME_DIR/nebula/<instance> or /tmp/nebula-<uid>/<instance>\n"
               "  --threads N      CPU threads of the gpu-worker's backend and the cpu-moe-worker (default:\n"
               "                   all cores; on more than 2 the cpu-moe-worker leaves the gpu-worker's host\n"
               "                   threads theirs: 2 with the cuda backend, 1 with cpu; coordinator/cpu_plan.c)\n"
               "  --chunk N        prefill tokens per step message (default 512; a request's prefill_chunk\n"
               "                   may ask for fewer)\n"
               "  --stream-rows N  cuda: a prefill piece of more than N rows (17 … 8192, default 17) streams its\n"
               "                   RAM-tier experts to the GPU; up to N the cpu-moe-worker computes them\n"
               "  --backend B      the gpu-worker's compute backend: auto (default: cuda where\n"
               "                   nebula-gpu-worker --probe cuda finds a usable GPU, else cpu), cpu or cuda\n"
               "  --kernels K      its CUDA matrix kernels: fast (default; fp32, within 1e-6 of the CPU) or\n"
               "                   ref (bit-faithful to the CPU reference, for parity checks)\n"
               "  --cpu-kernels K  the cpu-moe-worker's expert kernels: ref or fast (default: fast beside\n"
               "                   the cuda backend, ref beside cpu, so that every placement gives its bits)\n"
               "  --vram-budget B  cap on the gpu-worker's device memory, like 80G (default: placement.json's\n"
               "                   request.vram_budget, else none); the configuration fails naming each part\n"
               "  --ctx N          positions a request may use, and the K/V the gpu-worker reserves on cuda\n"
               "                   (default: placement.json's request.vram_ctx on cuda, else the model's)\n"
               "  --spec S         speculative decoding: off (default), mtp (the MTP block drafts, the model\n"
               "                   verifies a window of them in one step), lookup (drafts from the prompt) or\n"
               "                   auto (lookup where it makes more tokens a ms); the output is exactly the plain\n"
               "                   one at accuracy_level 3 (either backend)\n"
               "  --cache on|off|auto  the prompt cache: a prompt extending an earlier one resumes from its\n"
               "                   saved state, the output unchanged; off: prefilled from token 0; auto (default):\n"
               "                   on with the cpu backend, off on cuda until its save/load has run on a GPU\n"
               "  --cache-dir DIR  also write checkpoints there, found again after a restart (default: none)\n"
               "  --cache-ram-entries N, --cache-ram-bytes B, --cache-disk-bytes B  the cache's budgets\n"
               "                   (defaults 8, 4G, 64G; least recently used first out)\n"
               "  --layer-times    time each layer on cuda too (nebulactl profile; costs a synchronisation\n"
               "                   per layer and the CUDA graph; always on with the cpu backend)\n"
               "  --http HOST:PORT where the HTTP API listens (default 127.0.0.1:8091; port 0: any free\n"
               "                   port, printed as 'nebula-coordinator: http on http://HOST:PORT'); off: none\n"
               "  --max-queue N    generation requests that may wait while one runs (default 8; 429 beyond)\n"
               "  --max-body BYTES largest request body (default 4194304; 413 beyond)\n"
               "  --sse-keepalive S  seconds without output after which a stream gets a ': keep-alive'\n"
               "                   comment (default 2)\n"
               "  --demo           the model is the bundled demo: /api/status and /v1/models say what it is\n"
               "                   (its GGUF's general.description, else the random-weight demo's notice)\n"
               "  --name NAME      the model's id in the API (default: GGUF general.name, else the file name)\n"
               "  --test-hooks     tests only: requests may carry nebula_test_script (docs/API.md)\n");
}

/* --http HOST:PORT or off. */
static int parse_http(const char *arg, struct api_config *h, bool *off)
{
    static char host[64];
    const char *colon = strrchr(arg, ':');
    char *end;
    if (!strcmp(arg, "off")) return *off = true, 0;
    if (!colon || colon == arg || (size_t)(colon - arg) >= sizeof host) return -1;
    long port = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || port < 0 || port > 65535) return -1;
    memcpy(host, arg, (size_t)(colon - arg));
    host[colon - arg] = 0;
    if (!strcmp(host, "localhost")) strcpy(host, "127.0.0.1");
    h->host = host, h->port = (int)port, *off = false;
    if (strncmp(host, "127.", 4))
        fprintf(stderr, "nebula-coordinator: WARNING: --http %s listens beyond this machine's loopback; the API has no "
                        "authentication: anyone who can reach %s:%ld can use the model\n", arg, host, port);
    return 0;
}

/* The settings of nebula.conf (core/conf) as the coordinator's defaults, before its flags. */
static int apply_conf(int argc, char **argv, struct coord *c, struct api_config *h)
{
    static struct conf_settings k; /* the strings below point into it */
    static char used[PATH_MAX];
    const char *explicit_path = NULL;
    char err[PATH_MAX + 256];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc) explicit_path = argv[i + 1];
        else if (!strncmp(argv[i], "--config=", 9)) explicit_path = argv[i] + 9;
    }
    if (conf_load_default(explicit_path, c->exe_dir, &k, used, sizeof used, err, sizeof err)) {
        fprintf(stderr, "nebula-coordinator: %s\n", err);
        return 2;
    }
    c->config_path = used;
    c->model_path = k.model[0] ? k.model : NULL, c->prepared = k.prepared[0] ? k.prepared : NULL;
    c->mtp_path = k.mtp[0] ? k.mtp : NULL;
    c->threads = k.threads, c->chunk = k.chunk, c->ctx = k.ctx, c->vram_budget = k.vram_budget;
    c->stream_rows = k.stream_rows;
    c->backend = k.backend, c->kernels = k.kernels, c->cpu_kernels = strcmp(k.cpu_kernels, "auto") ? k.cpu_kernels : "";
    c->spec = !strcmp(k.spec, "mtp") ? COORD_SPEC_MTP : !strcmp(k.spec, "lookup") ? COORD_SPEC_LOOKUP
            : !strcmp(k.spec, "auto")  ? COORD_SPEC_AUTO : COORD_SPEC_OFF;
    c->cache_cfg = (struct coord_cache_cfg){.enable = !strcmp(k.cache_enable, "on") ? 1 : !strcmp(k.cache_enable, "auto") ? 2 : 0, .ram_entries = k.cache_ram_entries,
                                            .ram_bytes = k.cache_ram_bytes, .disk_bytes = k.cache_disk_bytes, .dir = k.cache_dir};
    h->port = k.api_port, h->max_queue = k.max_queue, h->max_body = (size_t)k.max_body;
    h->name = k.name[0] ? k.name : NULL, h->accuracy_level = k.accuracy_level;
    return 0;
}

/* --backend auto: cuda where the gpu-worker says it can run it (its --probe,
 * a process of its own: the coordinator never touches the GPU), else cpu. */
static void resolve_backend(struct coord *c)
{
    if (strcmp(c->backend, "auto")) return;
    char probe[PATH_MAX + 64];
    int rc = coord_path(probe, sizeof probe, c->exe_dir, "nebula-gpu-worker");
    if (!rc) {
        char cmd[PATH_MAX + 96];
        snprintf(cmd, sizeof cmd, "'%s' --probe cuda >/dev/null 2>&1", probe);
        rc = strchr(probe, '\'') ? -1 : system(cmd);
    }
    c->backend = rc == 0 ? "cuda" : "cpu";
    nb_log("backend auto: %s%s", c->backend, rc == 0 ? "" : " (nebula-gpu-worker --probe cuda found no usable GPU)");
}

static int parse(int argc, char **argv, struct coord *c, const char **runtime, struct api_config *h, bool *http_off)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},   {"prepared", required_argument, 0, 'p'},
                                         {"runtime", required_argument, 0, 'r'}, {"threads", required_argument, 0, 't'},
                                         {"chunk", required_argument, 0, 'c'},   {"http", required_argument, 0, 'H'},
                                         {"max-queue", required_argument, 0, 'q'}, {"max-body", required_argument, 0, 'b'},
                                         {"sse-keepalive", required_argument, 0, 'k'}, {"demo", no_argument, 0, 'd'},
                                         {"name", required_argument, 0, 'n'},    {"help", no_argument, 0, 'h'},
                                         {"backend", required_argument, 0, 'B'}, {"kernels", required_argument, 0, 'K'},
                                         {"cpu-kernels", required_argument, 0, 'C'},
                                         {"vram-budget", required_argument, 0, 'V'}, {"ctx", required_argument, 0, 'x'},
                                         {"layer-times", no_argument, 0, 'L'},  {"config", required_argument, 0, 'f'},
                                         {"mtp", required_argument, 0, 'M'},    {"spec", required_argument, 0, 'S'},
                                         {"test-hooks", no_argument, 0, 'T'},   {"stream-rows", required_argument, 0, 'R'},
                                         {"cache", required_argument, 0, 'E'},  {"cache-dir", required_argument, 0, 'D'},
                                         {"cache-ram-entries", required_argument, 0, 'N'},
                                         {"cache-ram-bytes", required_argument, 0, 'A'}, {"cache-disk-bytes", required_argument, 0, 'Z'},
                                         {0, 0, 0, 0}};
    int ch;
    char err[256];
    enum gw_kernels kern;
    *h = (struct api_config){.host = "127.0.0.1", .keepalive_s = 2.0};
    if (apply_conf(argc, argv, c, h)) return 2;
    *http_off = false;
    while ((ch = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        char *end = NULL;
        long long v = 0;
        double d = 0;
        switch (ch) {
        case 'm': c->model_path = optarg; break;
        case 'M': c->mtp_path = optarg; break;
        case 'p': c->prepared = optarg; break;
        case 'r': *runtime = optarg; break;
        case 't': c->threads = (int)strtol(optarg, &end, 10); break;
        case 'c': c->chunk = (int)strtol(optarg, &end, 10); break;
        case 'H':
            if (parse_http(optarg, h, http_off)) {
                fprintf(stderr, "nebula-coordinator: --http wants HOST:PORT (an IPv4 address, port 0-65535) or off, not '%s'\n", optarg);
                return 2;
            }
            break;
        case 'q':
        case 'b':
            v = strtoll(optarg, &end, 10);
            if (*end || v < (ch == 'q' ? 0 : 1024) || v > (ch == 'q' ? 4096 : 1ll << 30)) {
                fprintf(stderr, "nebula-coordinator: bad %s '%s' (%s)\n", ch == 'q' ? "--max-queue" : "--max-body", optarg,
                        ch == 'q' ? "0 to 4096" : "1024 to 1073741824 bytes");
                return 2;
            }
            if (ch == 'q') h->max_queue = (int)v;
            else h->max_body = (size_t)v;
            end = NULL;
            break;
        case 'k':
            d = strtod(optarg, &end);
            if (*end || !(d >= 0.05 && d <= 3600)) {
                fprintf(stderr, "nebula-coordinator: bad --sse-keepalive '%s' (0.05 to 3600 seconds)\n", optarg);
                return 2;
            }
            h->keepalive_s = d, end = NULL;
            break;
        case 'd': h->demo = true; break;
        case 'T': h->test_hooks = true; break;
        case 'n': h->name = optarg; break;
        case 'f': break; /* read first, by apply_conf */
        case 'B':
            if (strcmp(optarg, "auto") && strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
                fprintf(stderr, "nebula-coordinator: --backend takes auto, cpu or cuda, not '%s'\n", optarg);
                return 2;
            }
            c->backend = optarg;
            break;
        case 'K':
        case 'C':
            if (gw_kernels_parse(optarg, &kern)) {
                fprintf(stderr, "nebula-coordinator: %s takes ref or fast, not '%s'\n", ch == 'K' ? "--kernels" : "--cpu-kernels",
                        optarg);
                return 2;
            }
            *(ch == 'K' ? &c->kernels : &c->cpu_kernels) = optarg;
            break;
        case 'V':
            if (gw_vram_parse_bytes(optarg, &c->vram_budget, err, sizeof err)) {
                fprintf(stderr, "nebula-coordinator: --vram-budget: %s\n", err);
                return 2;
            }
            break;
        case 'x':
            v = strtoll(optarg, &end, 10);
            if (*end || v < 1 || v > (1ll << 40)) {
                fprintf(stderr, "nebula-coordinator: --ctx wants a positive number of positions, not '%s'\n", optarg);
                return 2;
            }
            c->ctx = v, end = NULL;
            break;
        case 'L': c->layer_times = true; break;
        case 'R':
            v = strtoll(optarg, &end, 10);
            if (*end || v < 17 || v > NB_MAX_PREFILL_CHUNK) {
                fprintf(stderr, "nebula-coordinator: --stream-rows wants 17 to %d rows, not '%s'\n", NB_MAX_PREFILL_CHUNK, optarg);
                return 2;
            }
            c->stream_rows = (int)v, end = NULL;
            break;
        case 'S':
            if (!strcmp(optarg, "off")) c->spec = COORD_SPEC_OFF;
            else if (!strcmp(optarg, "mtp")) c->spec = COORD_SPEC_MTP;
            else if (!strcmp(optarg, "lookup")) c->spec = COORD_SPEC_LOOKUP;
            else if (!strcmp(optarg, "auto")) c->spec = COORD_SPEC_AUTO;
            else {
                fprintf(stderr, "nebula-coordinator: --spec %s: want off, mtp, lookup or auto\n", optarg);
                return 2;
            }
            break;
        case 'E':
            if (strcmp(optarg, "on") && strcmp(optarg, "off") && strcmp(optarg, "auto")) {
                fprintf(stderr, "nebula-coordinator: --cache takes on, off or auto, not '%s'\n", optarg);
                return 2;
            }
            c->cache_cfg.enable = !strcmp(optarg, "on") ? 1 : !strcmp(optarg, "auto") ? 2 : 0;
            break;
        case 'D': c->cache_cfg.dir = optarg; break;
        case 'N':
            v = strtoll(optarg, &end, 10);
            if (*end || v < 0 || v > (1 << 20)) {
                fprintf(stderr, "nebula-coordinator: --cache-ram-entries wants 0 to %d, not '%s'\n", 1 << 20, optarg);
                return 2;
            }
            c->cache_cfg.ram_entries = (int)v, end = NULL;
            break;
        case 'A':
        case 'Z':
            if (gw_vram_parse_bytes(optarg, ch == 'A' ? &c->cache_cfg.ram_bytes : &c->cache_cfg.disk_bytes, err, sizeof err)) {
                fprintf(stderr, "nebula-coordinator: %s: %s\n", ch == 'A' ? "--cache-ram-bytes" : "--cache-disk-bytes", err);
                return 2;
            }
            break;
        case 'h': usage(stdout); return -1;
        default: usage(stderr); return 2;
        }
        if (end && (*end || c->threads < 0 || c->chunk < 1 || c->chunk > NB_MAX_PREFILL_CHUNK)) {
            fprintf(stderr, "nebula-coordinator: bad number '%s' (--threads ≥ 0, --chunk in [1, %d])\n", optarg, NB_MAX_PREFILL_CHUNK);
            return 2;
        }
    }
    if (optind < argc || !c->model_path) {
        fprintf(stderr, "nebula-coordinator: %s\n", optind < argc ? "unexpected argument" : "--model is required");
        usage(stderr);
        return 2;
    }
    return 0;
}

/* Tier totals of the placement (core/prepared reads it); all VRAM without one. */
static int read_tiers(struct coord *c, char *err, size_t errlen)
{
    const struct model_hparams *hp = &c->m->hp;
    if (!c->prepared) {
        c->tiers.experts[0] = (int64_t)(hp->n_layer + hp->n_nextn) * hp->n_expert;
        return 0;
    }
    if (coord_path(c->placement_path, sizeof c->placement_path, c->prepared, "placement.json"))
        return nb_errf(err, errlen, NB_EINVAL, "--prepared path too long");
    struct prepared_idx x;
    struct prepared_placement p;
    int rc = prepared_plan_load(c->prepared, c->placement_path, &x, &p, err, errlen);
    if (rc) return rc;
    const uint64_t n[3] = {p.n_vram, p.n_ram, p.n_ssd};
    for (int t = 0; t < 3; t++) c->tiers.experts[t] = (int64_t)n[t], c->tiers.bytes[t] = p.tier_bytes[t];
    c->tiers.arena_bytes = p.arena_bytes;     /* the `experts` region */
    c->tiers.max_blob_bytes = x.max_blob_bytes; /* a staging slot */
    c->tiers.ple_ssd = p.ple_ssd && c->m->ple_table.data;
    c->tiers.ple_vram = p.ple_vram && c->m->ple_table.data;
    c->tiers.vram_ctx = p.vram_ctx;
    prepared_placement_free(&p);
    prepared_idx_free(&x);
    return 0;
}

static int make_rundir(struct coord *c, const char *runtime, char *err, size_t errlen)
{
    if (runtime) {
        if (strlen(runtime) >= sizeof c->rundir) return nb_errf(err, errlen, NB_EINVAL, "--runtime path too long");
        memcpy(c->rundir, runtime, strlen(runtime) + 1);
    } else {
        const char *xdg = getenv("XDG_RUNTIME_DIR");
        char base[PATH_MAX];
        if (xdg && *xdg) snprintf(base, sizeof base, "%s/nebula", xdg);
        else snprintf(base, sizeof base, "/tmp/nebula-%d", (int)getuid());
        if (mkdir(base, 0700) && errno != EEXIST) return nb_errf(err, errlen, NB_EIO, "mkdir %s: %s", base, strerror(errno));
        if (coord_path(c->rundir, sizeof c->rundir, base, shm_instance_id(c->inst)))
            return nb_errf(err, errlen, NB_EINVAL, "runtime path too long");
    }
    if (mkdir(c->rundir, 0700)) return nb_errf(err, errlen, NB_EIO, "cannot create runtime directory %s: %s", c->rundir, strerror(errno));
    c->rundir_made = true;
    char ep[PATH_MAX + 16];
    ctl_endpoint(ep, sizeof ep, c->rundir, "control.sock");
    int rc = ctl_open(CTL_ROUTER, ep, NULL, &c->router, err, errlen);
    if (rc) return rc;
    int one = 1; /* a restarted worker takes its role's identity over at once */
    zmq_setsockopt(ctl_zmq_socket(c->router), ZMQ_ROUTER_HANDOVER, &one, sizeof one);
    ctl_endpoint(ep, sizeof ep, c->rundir, "ctl.sock");
    return ctl_open(CTL_REP, ep, NULL, &c->rep, err, errlen);
}

struct ring_geometry coord_step_geometry(const struct model *m, int chunk)
{
    return (struct ring_geometry){.n_slots = 2, .max_tokens = (uint32_t)chunk, .max_experts = 0,
                                  .payload_bytes = (uint32_t)step_payload_bytes((uint32_t)chunk, (uint64_t)m->hp.n_vocab)};
}

static int make_regions(struct coord *c, char *err, size_t errlen)
{
    const struct model_hparams *hp = &c->m->hp;
    struct ring_geometry sg = coord_step_geometry(c->m, c->chunk);
    struct ring_geometry mg = {.n_slots = 2, .max_tokens = MOE_RING_ROWS, .max_experts = (uint32_t)hp->n_expert_used,
                               .payload_bytes = (uint32_t)moe_payload_bytes(MOE_RING_ROWS, (uint32_t)hp->n_expert_used,
                                                                             (uint64_t)hp->n_embd)};
    uint32_t n_layers = (uint32_t)(hp->n_layer + hp->n_nextn);
    int rc = shm_region_create(c->inst, "step", ring_pair_bytes(&sg), &c->step_reg, err, errlen);
    if (!rc) rc = ring_pair_format(&c->step_reg, 0, &sg, err, errlen);
    if (!rc) rc = ring_pair_attach(&c->step, &c->step_reg, 0, RING_CLIENT, NULL, err, errlen);
    if (!rc) rc = shm_region_create(c->inst, "moe", ring_pair_bytes(&mg), &c->moe_reg, err, errlen);
    if (!rc) rc = ring_pair_format(&c->moe_reg, 0, &mg, err, errlen);
    if (!rc) rc = shm_region_create(c->inst, "stats", shm_stats_bytes(COORD_STATS_BLOCKS, n_layers), &c->stats_reg, err, errlen);
    if (!rc) rc = shm_stats_format(&c->stats_reg, COORD_STATS_BLOCKS, n_layers, err, errlen);
    if (!rc) rc = shm_stats_open(&c->stats, &c->stats_reg, err, errlen);
    if (rc || (c->tiers.experts[1] + c->tiers.experts[2] == 0 && !c->tiers.ple_ssd)) return rc;
    /* The cpu-moe-worker's side: the RAM arena, staging slots and the pager ring;
     * the gpu-worker's pager-gw ring when the PLE table is on SSD. */
    struct ring_geometry pg = {.n_slots = 8, .max_tokens = 1, .max_experts = 2, .payload_bytes = 256};
    uint64_t slot = (c->tiers.max_blob_bytes + 4095) / 4096 * 4096;
    rc = shm_region_create(c->inst, "experts", c->tiers.arena_bytes, &c->experts_reg, err, errlen);
    if (!rc) rc = shm_region_create(c->inst, "staging", COORD_STAGING_SLOTS * (slot ? slot : 4096), &c->staging_reg, err, errlen);
    if (!rc) rc = shm_region_create(c->inst, "pager", ring_pair_bytes(&pg), &c->pager_reg, err, errlen);
    if (!rc) rc = ring_pair_format(&c->pager_reg, 0, &pg, err, errlen);
    struct ring_geometry gg = {.n_slots = 2, .max_tokens = COORD_PLE_RING_ROWS, .max_experts = 2, .payload_bytes = 256};
    if (!rc && c->tiers.ple_ssd) rc = shm_region_create(c->inst, "pager-gw", ring_pair_bytes(&gg), &c->pager_gw_reg, err, errlen);
    if (!rc && c->tiers.ple_ssd) rc = ring_pair_format(&c->pager_gw_reg, 0, &gg, err, errlen);
    return rc;
}

/* ---- the loop's events ----
 * control.sock and ctl.sock are ZeroMQ sockets: their ZMQ_FD is an fd event
 * that is edge-triggered, so each callback drains its socket, and
 * before_poll drains both again before every wait (a send on a socket can
 * consume the edge of a message that arrived meanwhile). */

static void on_router(event_loop *l, int fd, void *ctx) { (void)l, (void)fd, coord_workers_serve(ctx); }
static void on_rep(event_loop *l, int fd, void *ctx) { (void)l, (void)fd, coord_ctl_serve(ctx); }
static void on_step(event_loop *l, int fd, void *ctx) { (void)l, (void)fd, coord_requests_on_step(ctx); }
static void on_http(event_loop *l, int fd, void *ctx) { (void)l, (void)fd, api_on_wake(ctx); }

/* Both sockets asked before each wait: ZMQ_FD fires only on a change. */
static void before_poll(event_loop *l, void *ctx)
{
    struct coord *c = ctx;
    coord_workers_serve(c);
    coord_ctl_serve(c);
    if (c->got_sigchld) coord_supervise(c); /* the signal ended the last wait: reap now */
    if (c->stop) event_stop(l);
}

/* Supervision every 100 ms (as the old loop's poll timeout): reaping (also
 * right after a SIGCHLD, which ends the wait), restarts, heartbeat deadlines, the
 * snapshot /api/status shows, and a stop asked by a signal. */
static double on_supervise(event_loop *l, void *ctx)
{
    struct coord *c = ctx;
    coord_supervise(c);
    api_publish(c);
    if (c->stop) event_stop(l);
    return 0.1;
}

/* Start-up is a state of the loop: STARTING until every worker is ready
 * (then ctl.sock and the HTTP queue are served), or one failed for good, or
 * COORD_READY_TIMEOUT_S passed (then the loop ends with the error). */
static struct startup {
    bool done;
    int rc;
    char err[512];
} startup;

static void serving(struct coord *c)
{
    startup.done = true;
    nb_log("instance %s ready: %s (ctl.sock), %d workers", shm_instance_id(c->inst), c->rundir, c->n_workers);
    api_set_phase(c->api, "ready", 1.0, "ready");
    api_publish(c);
    c->ctl_serving = true;
    coord_ctl_serve(c);
    if (c->api) api_on_wake(c); /* jobs queued while loading */
}

static void startup_check(struct coord *c)
{
    int ready = 0;
    for (int i = 0; i < c->n_workers; i++) {
        if (c->w[i].state == W_FAILED) {
            snprintf(startup.err, sizeof startup.err, "%s cannot start (see %s)", c->w[i].role, c->w[i].log_path);
            startup.rc = NB_EIO;
        }
        ready += c->w[i].state == W_READY;
    }
    if (!startup.rc && ready == c->n_workers) serving(c);
    if (startup.rc) event_stop(c->loop);
}

static double on_startup_deadline(event_loop *l, void *ctx)
{
    if (startup.done || startup.rc) return EVENT_TIMER_END;
    snprintf(startup.err, sizeof startup.err, "workers not ready after %.0f s", COORD_READY_TIMEOUT_S);
    startup.rc = NB_EIO;
    event_stop(l);
    (void)ctx;
    return EVENT_TIMER_END;
}

/* workers.c's news: a worker changed state. */
static void on_workers(struct coord *c)
{
    api_publish(c);
    if (!startup.done) return startup_check(c);
    coord_ctl_on_workers(c);
    coord_requests_on_workers(c);
}

static int add_events(struct coord *c, char *err, size_t errlen)
{
    int rc = event_loop_new(&c->loop, err, errlen), fd;
    size_t sz = sizeof fd;
    if (rc) return rc;
    c->on_workers = on_workers, c->on_idle = coord_ctl_on_idle;
    event_set_before_poll(c->loop, before_poll, c);
    if (zmq_getsockopt(ctl_zmq_socket(c->router), ZMQ_FD, &fd, &sz) || event_add_fd(c->loop, fd, on_router, c))
        return nb_errf(err, errlen, NB_EIO, "cannot watch control.sock");
    sz = sizeof fd;
    if (zmq_getsockopt(ctl_zmq_socket(c->rep), ZMQ_FD, &fd, &sz) || event_add_fd(c->loop, fd, on_rep, c))
        return nb_errf(err, errlen, NB_EIO, "cannot watch ctl.sock");
    if (event_add_fd(c->loop, coord_step_fd(c), on_step, c) || (c->api && event_add_fd(c->loop, c->api->wake, on_http, c)) ||
        event_add_timer(c->loop, 0.1, on_supervise, c) < 0 ||
        event_add_timer(c->loop, COORD_READY_TIMEOUT_S, on_startup_deadline, c) < 0)
        return nb_errf(err, errlen, NB_ENOMEM, "cannot register the loop's events");
    return 0;
}

/* Removes the runtime directory and what is in it (sockets, logs). */
static void remove_rundir(struct coord *c)
{
    DIR *d = opendir(c->rundir);
    struct dirent *e;
    char path[PATH_MAX * 2];
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", c->rundir, e->d_name);
        if (unlink(path)) nb_log("cannot remove %s: %s", path, strerror(errno));
    }
    if (d) closedir(d);
    if (rmdir(c->rundir)) nb_log("cannot remove %s: %s", c->rundir, strerror(errno));
}

static void teardown(struct coord *c)
{
    char err[256];
    /* First the requests (queued and running: their owners get the answer),
     * so no request waits on workers that are going; then the HTTP server. */
    c->ctl_serving = false;
    coord_requests_cancel_all(c, "the coordinator is shutting down");
    if (c->rep) coord_ctl_close(c);
    if (c->api) api_stop(c->api);
    coord_stop_workers(c);
    coord_step_close(c); /* it holds a slot of the step ring: before the ring goes */
    ring_pair_detach(&c->step);
    shm_stats_close(c->stats);
    struct shm_region *regs[] = {&c->step_reg,    &c->moe_reg,   &c->stats_reg,   &c->experts_reg,
                                 &c->staging_reg, &c->pager_reg, &c->pager_gw_reg};
    for (int i = 0; i < 7; i++)
        if (regs[i]->base) shm_region_close(regs[i]);
    if (c->inst && shm_instance_destroy(c->inst, err, sizeof err)) nb_log("removing the regions: %s", err);
    ctl_close(c->router);
    ctl_close(c->rep);
    ctl_term(); /* delivers the last reply (shutdown's) */
    if (c->rundir_made) remove_rundir(c);
    coord_grammars_free(c);
    coord_cache_close(c);
    if (c->tok) tok_free(c->tok);
    if (c->m) model_close(c->m);
    event_loop_free(c->loop);
}

static int start(struct coord *c, const char *runtime, char *err, size_t errlen)
{
    int n_stale = 0, rc;
    if ((rc = model_open_mtp(c->model_path, c->mtp_path, &c->m, err, errlen))) return rc;
    if ((c->spec == COORD_SPEC_MTP || c->spec == COORD_SPEC_AUTO) && c->m->hp.n_nextn == 0)
        return nb_errf(err, errlen, NB_EINVAL, "--spec %s: %s has no MTP block (give one with --mtp FILE, or --spec lookup)",
                       c->spec == COORD_SPEC_AUTO ? "auto" : "mtp", c->model_path);
    if (gguf_find_key(c->m->gguf, "tokenizer.ggml.tokens") >= 0 && (rc = tok_load_gguf(c->m->gguf, &c->tok, err, errlen)))
        return rc;
    if ((rc = read_tiers(c, err, errlen))) return rc;
    if ((rc = coord_cache_open(c, err, errlen))) return rc;
    {
        const int64_t trained = c->m->hp.n_ctx_train;
        c->n_ctx = coord_context_limit(trained, c->tiers.vram_ctx, c->gw_cuda, c->ctx);
        if (c->n_ctx < (trained > 0 ? trained : 32768))
            nb_log("context: %lld positions, %s", (long long)c->n_ctx,
                   c->ctx ? "--ctx" : "the K/V the VRAM plan reserved (placement.json request.vram_ctx; nebula-prepare --ctx)");
    }
    /* HTTP before the workers: /api/status shows their start-up. */
    if (c->api && (rc = api_start(c->api, c, err, errlen))) return rc;
    if ((rc = shm_instance_create(&c->inst, &n_stale, err, errlen))) return rc;
    if (n_stale) nb_log("removed %d stale shared-memory objects of dead instances", n_stale);
    if ((rc = make_rundir(c, runtime, err, errlen))) return rc;
    if ((rc = make_regions(c, err, errlen))) return rc;
    /* The names go now: the regions live as long as their users, and a
     * coordinator killed with -9 (its workers die with it) leaves nothing in
     * /dev/shm.  Workers get the regions through fds handed down at spawn
     * (coord_spawn), restarted ones too. */
    if ((rc = shm_instance_unlink(c->inst, err, errlen))) return rc;
    if ((rc = coord_step_open(c, err, errlen))) return rc; /* its eventfd goes to the gpu-worker at spawn */
    if ((rc = coord_workers_init(c, err, errlen))) return rc;
    for (int i = 0; i < c->n_workers; i++)
        if ((rc = coord_spawn(c, &c->w[i]))) return nb_errf(err, errlen, rc, "cannot start %s", c->w[i].role);
    api_publish(c);
    return add_events(c, err, errlen);
}

int main(int argc, char **argv)
{
    nb_log_set_name("coordinator");
    static struct coord c;
    static struct api api;
    const char *runtime = NULL;
    bool http_off;
    char exe[PATH_MAX], err[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        fprintf(stderr, "nebula-coordinator: cannot find its own executable: %s\n", strerror(errno));
        return 1;
    }
    exe[n] = 0;
    const char *dir = dirname(exe);
    memcpy(c.exe_dir, dir, strlen(dir) + 1); /* shorter than exe, which fits; conf_locate looks beside it */
    int rc = parse(argc, argv, &c, &runtime, &api.cfg, &http_off);
    if (rc) return rc < 0 ? 0 : rc;
    if (!http_off) c.api = &api;
    nb_log("config: %s", c.config_path[0] ? c.config_path : "none found (built-in defaults)");
    resolve_backend(&c);
    c.gw_cuda = !strcmp(c.backend, "cuda");
    the_coord = &c;
    c.t_start = coord_now();
    struct sigaction sa = {.sa_handler = on_stop}, sc = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
    sigaction(SIGINT, &sa, NULL), sigaction(SIGTERM, &sa, NULL), sigaction(SIGCHLD, &sc, NULL);
    signal(SIGPIPE, SIG_IGN);
    if ((rc = start(&c, runtime, err, sizeof err))) {
        nb_log("cannot start: %s", err);
        api_set_phase(c.api, "error", 0, err);
        teardown(&c);
        return rc == NB_EINVAL || rc == NB_ENOENT || rc == NB_EFORMAT ? 2 : 1;
    }
    startup_check(&c);
    if (!startup.rc) event_run(c.loop); /* until shutdown, or start-up failed */
    if (startup.rc) {
        nb_log("cannot start: %s", startup.err);
        api_set_phase(c.api, "error", 0, startup.err);
        teardown(&c);
        return 1;
    }
    nb_log("shutting down");
    teardown(&c);
    nb_log("stopped");
    return 0;
}
