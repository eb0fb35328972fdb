/* nebula-prepare — turns a qwen4exp GGUF into the prepared directory the
 * engine runs from (docs/FILES.md; ARCHITECTURE.md §3, §7).
 *
 * This file parses the command line and runs the parts in dependency
 * order: manifest.json (input identity) → experts.idx → experts.bin →
 * ple.bin → dense.gguf (records the checksums of the three before it) →
 * hotlist.tsv → placement.json (records dense.gguf's checksum) →
 * checksums.sha256, updated after every part.  Each part is first verified
 * (small files: regenerated and compared byte for byte; large ones: hashed
 * and compared with checksums.sha256) and rebuilt only when that fails, so
 * a re-run touches nothing that is intact and an interrupted run redoes
 * only what is missing. */
#include "tools/nebula-prepare/prepare.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "core/util/err.h"
#include "engine/vram.h"
#include "core/util/clock.h"
#include "core/util/opts.h"

enum { EXIT_IO = 1, EXIT_USAGE = 2, EXIT_INTERRUPTED = 130 };

static void usage(FILE *f)
{
    fprintf(f,
            "usage: nebula-prepare MODEL.gguf OUTDIR [options]\n"
            "\n"
            "Splits a qwen4exp GGUF (one file or any shard of a split set) into the files the engine\n"
            "reads (layouts in docs/FILES.md):\n"
            "  dense.gguf         everything but the routed experts and the n-gram table\n"
            "  experts.bin, .idx  one 4 KiB-aligned blob per expert (gate | up | down rows): one read each\n"
            "  ple.bin            the n-gram table, rows packed into 4 KiB pages (if the model has one)\n"
            "  hotlist.tsv        activation count and mean router weight per expert (--hotlist, or neutral)\n"
            "  placement.json     each expert's one tier (vram, ram, ssd) from the hotlist and the budgets\n"
            "  manifest.json      the input's identity; checksums.sha256 (`sha256sum -c` checks the lot)\n"
            "Re-running verifies every file and rebuilds only what is missing, corrupt or stale; an\n"
            "interrupted run resumes (experts.bin from its last complete layer).\n"
            "\n"
            "options:\n"
            "  --vram-budget B     the GPU's whole budget, as nebula-gpu-worker checks it: the dense tensors\n"
            "                      (as the device holds them) and a reserve (K/V and state for --ctx\n"
            "                      positions, scratch) are paid first, the rest buys expert slots (default 0:\n"
            "                      no expert in VRAM; all: every expert); placement.json records it for the worker\n"
            "  --vram-slots B      instead: B of expert slots on top of the dense tensors and the reserve\n"
            "                      (the budget recorded is their sum)\n"
            "  --ctx N             positions the reserve holds K/V for (default: the model's context)\n"
            "  --ram-budget B      RAM for the expert arena and victim cache (default 0; all: every expert\n"
            "                      VRAM did not take)\n"
            "  --victim-cache B    part of the RAM budget kept for a victim cache of SSD experts (default 0)\n"
            "  --early-quota W[:N] VRAM quota weight W in [0, 1] for trunk layer 0, rising linearly to 1 at\n"
            "                      layer N (default N = layers / 4); W = 1 (default) gives equal quotas\n"
            "  --mtp-experts M     vram-first (default: the MTP block's experts take VRAM before the trunk's\n"
            "                      quotas) or shared (the MTP block is one more layer with a quota)\n"
            "  --ple-tier T        ram (default: the gpu-worker reads the n-gram table's rows from the\n"
            "                      model's mapping in host memory), ssd (they are paged from ple.bin by the\n"
            "                      ssd-pager) or vram (a CUDA gpu-worker holds the whole table on the GPU:\n"
            "                      it counts in the VRAM budget; 26.8 GiB in the released model)\n"
            "  --arena-vram on|off on: the RAM arena holds the VRAM tier's experts too (they count in the\n"
            "                      RAM budget), so the gpu-worker's adaptive slots (--slots adaptive) can\n"
            "                      move every expert; off (default): only the RAM tier's can enter a slot\n"
            "  --mtp FILE          the MTP block from a separate GGUF (Unsloth's MTP/mtp-*.gguf): its experts\n"
            "                      and dense tensors join the trunk's (dense.gguf then holds the whole model)\n"
            "  --hotlist F         a measured hotlist, TSV: layer expert count mean_weight\n"
            "  --profile P         budgets, context and n-gram table tier from a hardware profile: a name of\n"
            "                      --profiles (v16-r64), or auto: the classes this machine reaches (--hw-file,\n"
            "                      else /proc/meminfo and nvidia-smi); options given beside it win\n"
            "  --profiles FILE     the profiles (default: conf/profiles.tsv beside the binary's checkout)\n"
            "  --hw-file FILE      the hardware for --profile auto: key=value lines gpu_vram_mib, ram_mib\n"
            "  --profile-info      with --profile: print what it means for MODEL (key=value) and write nothing\n"
            "  --profile-table     print every profile's meaning for MODEL as a Markdown table; write nothing\n"
            "                      (both take MODEL only, no OUTDIR)\n"
            "  --cpu-only          with --profile: a machine without a GPU (the CPU backend): the RAM class\n"
            "                      alone picks the row (cpu-rNN), no experts in VRAM, and the RAM pays the\n"
            "                      dense weights and the context's K/V before the experts\n"
            "  -q, --quiet         errors only\n"
            "  -h, --help          this text\n"
            "Sizes are bytes or take K, M, G, T (binary: 12G = 12 GiB). Placement options left out on a\n"
            "re-run keep the values recorded in placement.json.\n"
            "Exit status: 0 done, 1 input or I/O error, 2 usage error (option, budget, hotlist), 130 interrupted.\n");
}

static void on_signal(int sig) { prep_interrupted = sig; }

struct run {
    const char *in_path, *dir, *hotlist_path, *mtp_path;
    struct model *m;
    struct expert_layout x;
    struct ple_layout ple;
    struct sums sums;
    char input_id[1024];
    struct placement_opts popts;
    uint64_t vram_slots; /* --vram-slots */
    bool given_slots, given_ctx;
    bool given_vram, given_ram, given_victim, given_early, given_mtp, given_ple, given_arena;
    int verified, written;
    const char *profile, *profiles_path, *hw_file;
    bool profile_info, profile_table, cpu_only;
    char err[1024];
};

/* Bytes of the dense tensors: the trunk file's and a separate MTP file's. */
static uint64_t dense_bytes_of(const struct model *m)
{
    return dense_tensor_bytes(m->gguf) + (m->mtp_gguf ? dense_tensor_bytes(m->mtp_gguf) : 0);
}

/* Removes leftovers of an interrupted write of a part that is now complete. */
static void drop_partial(const struct run *r, const char *name)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.tmp", r->dir, name);
    unlink(path);
    snprintf(path, sizeof path, "%s/%s.state", r->dir, name);
    unlink(path);
}

static int save_sums(struct run *r) { return sums_save(&r->sums, r->dir, r->err, sizeof r->err); }

/* A part was (re)written: list it at once, so an interruption loses nothing done. */
static int record(struct run *r, const char *name, const char *sha)
{
    r->written++;
    sums_set(&r->sums, name, sha);
    return save_sums(r);
}

/* A large part is verified when checksums.sha256 lists it and its hash matches. */
static int verify_big(struct run *r, const char *name, char hex[PREP_SHA_HEX], bool *ok)
{
    *ok = false;
    const char *want = sums_get(&r->sums, name);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", r->dir, name);
    struct stat st;
    if (!want || stat(path, &st) != 0) {
        if (want) say("%s: missing: rebuilding", name);
        if (want) sums_drop(&r->sums, name);
        return 0;
    }
    struct progress p;
    progress_begin(&p, name, (uint64_t)st.st_size);
    int rc = sha_file(path, UINT64_MAX, &p, hex, r->err, sizeof r->err);
    if (rc == NB_ENOENT) return 0;
    if (rc) return rc;
    if (strcmp(hex, want) == 0) {
        progress_end(&p, "verified");
        drop_partial(r, name);
        *ok = true;
        r->verified++;
        return 0;
    }
    progress_end(&p, "checksum mismatch: rebuilding");
    sums_drop(&r->sums, name);
    return save_sums(r);
}

/* A small part is verified when the file holds exactly `data` (regenerated). */
static int small_part(struct run *r, const char *name, const char *data, size_t n, const char *how)
{
    char path[4200], *old = NULL, hex[PREP_SHA_HEX];
    size_t old_n = 0;
    snprintf(path, sizeof path, "%s/%s", r->dir, name);
    sha_buf_hex(data, n, hex);
    const char *listed = sums_get(&r->sums, name);
    bool same = nb_read_file(path, &old, &old_n, NULL, 0) == 0 && old_n == n && memcmp(old, data, n) == 0;
    free(old);
    if (same) { /* regenerated and equal: needs no checksum to be trusted, only to be listed */
        say("%s: verified", name);
        r->verified++;
        if (listed && strcmp(listed, hex) == 0) return 0;
        sums_set(&r->sums, name, hex);
        return save_sums(r);
    }
    int rc = write_file_atomic(r->dir, name, data, n, r->err, sizeof r->err);
    if (rc) return rc;
    say("%s: %s", name, how ? how : "written");
    return record(r, name, hex);
}

/* manifest.json: if the input is not the one the directory was made from,
 * no checksum in it can be trusted. */
static int part_manifest(struct run *r)
{
    char *text = NULL, *old = NULL, path[4200];
    size_t old_n = 0;
    int rc = input_identity(r->in_path, gguf_shard_count(r->m->gguf), r->mtp_path, r->input_id, sizeof r->input_id, &text, r->err,
                            sizeof r->err);
    if (rc) return rc;
    snprintf(path, sizeof path, "%s/manifest.json", r->dir);
    bool same_input = false;
    if (nb_read_file(path, &old, &old_n, NULL, 0) == 0) {
        cJSON *j = cJSON_Parse(old);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "identity");
        same_input = cJSON_IsString(id) && strcmp(id->valuestring, r->input_id) == 0;
        if (!same_input) say("the input differs from the one %s was prepared from: rebuilding every part", r->dir);
        cJSON_Delete(j);
    }
    free(old);
    if (!same_input) {
        r->sums.n = 0; /* saved before the new manifest: stale sums never pair with it */
        if ((rc = save_sums(r))) goto done;
    }
    rc = small_part(r, "manifest.json", text, strlen(text), NULL);
done:
    free(text);
    return rc;
}

/* experts.bin or ple.bin: verified, or written through the resumable writer. */
static int stream_part(struct run *r, const char *name, char sha[PREP_SHA_HEX])
{
    bool ok;
    int rc = verify_big(r, name, sha, &ok);
    if (rc || ok) return rc;
    if (strcmp(name, "ple.bin") == 0) rc = ple_write(&r->ple, r->dir, r->input_id, sha, r->err, sizeof r->err);
    else rc = experts_write(&r->x, r->dir, r->input_id, sha, r->err, sizeof r->err);
    return rc ? rc : record(r, name, sha);
}

static int part_ple(struct run *r, char sha[PREP_SHA_HEX])
{
    sha[0] = 0;
    if (r->ple.present) return stream_part(r, "ple.bin", sha);
    /* A table-less model: no stale table may stay listed. */
    char path[4200];
    snprintf(path, sizeof path, "%s/ple.bin", r->dir);
    unlink(path);
    drop_partial(r, "ple.bin");
    sums_drop(&r->sums, "ple.bin");
    return save_sums(r);
}

static int part_dense(struct run *r, const struct dense_refs *refs, char sha[PREP_SHA_HEX])
{
    bool ok;
    char why[512];
    int rc = verify_big(r, "dense.gguf", sha, &ok);
    if (rc) return rc;
    if (ok && dense_check_refs(r->dir, refs, why, sizeof why) == 0) return 0;
    if (ok) { /* intact, but made alongside other experts/table files */
        say("dense.gguf: %s: rebuilding", why);
        r->verified--;
    }
    if ((rc = dense_write(r->m, r->dir, refs, r->err, sizeof r->err))) return rc;
    char path[4200];
    snprintf(path, sizeof path, "%s/dense.gguf", r->dir);
    if ((rc = sha_file(path, UINT64_MAX, NULL, sha, r->err, sizeof r->err))) return rc;
    return record(r, "dense.gguf", sha);
}

/* hotlist.tsv: a copy of --hotlist, else the previous (verified) one, else neutral. */
static int part_hotlist(struct run *r, struct hotlist *h, char sha[PREP_SHA_HEX])
{
    char *text = NULL, path[4200], how[600];
    size_t n = 0;
    int rc = 0;
    snprintf(path, sizeof path, "%s/hotlist.tsv", r->dir);
    if (r->hotlist_path) {
        if ((rc = nb_read_file(r->hotlist_path, &text, &n, r->err, sizeof r->err))) return rc == NB_ENOENT ? NB_EINVAL : rc;
        if ((rc = hotlist_parse(h, &r->x, text, n, r->hotlist_path, r->err, sizeof r->err))) goto done;
        snprintf(how, sizeof how, "written (copied from %s)", r->hotlist_path);
    } else if (sums_get(&r->sums, "hotlist.tsv") && nb_read_file(path, &text, &n, NULL, 0) == 0) {
        sha_buf_hex(text, n, sha);
        if (strcmp(sha, sums_get(&r->sums, "hotlist.tsv")) == 0 &&
            hotlist_parse(h, &r->x, text, n, "hotlist.tsv", NULL, 0) == 0) {
            snprintf(how, sizeof how, "written (kept from the previous run)");
            goto have;
        }
        free(text);
        text = NULL;
    }
    if (!text) {
        struct stat st;
        if (stat(path, &st) == 0)
            say("hotlist.tsv: the existing one is not verified for this input; replacing it with a neutral one "
                "(pass --hotlist to use a measured one)");
        if (!(text = hotlist_neutral_text(&r->x, &n))) return nb_errf(r->err, sizeof r->err, NB_ENOMEM, "out of memory");
        if ((rc = hotlist_parse(h, &r->x, text, n, "neutral hotlist", r->err, sizeof r->err))) goto done;
        snprintf(how, sizeof how, "written: neutral (no --hotlist given; placement keeps expert order)");
    }
have:
    sha_buf_hex(text, n, sha);
    rc = small_part(r, "hotlist.tsv", text, n, how);
done:
    free(text);
    return rc;
}

static int part_placement(struct run *r, const struct hotlist *h, const char *dense_sha, const char *experts_sha,
                          const char *hot_sha)
{
    struct placement_opts o = {.early_weight = 1.0, .mtp_first = true};
    char path[4200], *old = NULL, idx_sha[PREP_SHA_HEX], summary[256];
    size_t old_n = 0;
    snprintf(path, sizeof path, "%s/placement.json", r->dir);
    struct placement_opts defaults = o;
    if (nb_read_file(path, &old, &old_n, NULL, 0) == 0 && placement_read_opts(old, &o) == 0 &&
        memcmp(&o, &defaults, sizeof o) != 0 &&
        !((r->given_vram || r->given_slots) && r->given_ctx && r->given_ram && r->given_victim && r->given_early && r->given_mtp && r->given_ple &&
          r->given_arena))
        say("placement.json: options not given keep the previous run's values");
    free(old);
    if (r->given_vram) o.vram_bytes = r->popts.vram_bytes;
    if (r->given_ctx) o.vram_ctx = r->popts.vram_ctx;
    if (o.vram_ctx <= 0) o.vram_ctx = gw_vram_default_ctx(r->m);
    if (r->given_ram) o.ram_bytes = r->popts.ram_bytes;
    if (r->given_victim) o.victim_bytes = r->popts.victim_bytes;
    if (r->given_early) o.early_weight = r->popts.early_weight, o.early_layers = r->popts.early_layers;
    if (r->given_mtp) o.mtp_first = r->popts.mtp_first;
    if (r->given_ple) o.ple_ssd = r->popts.ple_ssd, o.ple_vram = r->popts.ple_vram;
    if (r->given_arena) o.arena_vram = r->popts.arena_vram;
    sha_buf_hex(r->x.idx, r->x.idx_bytes, idx_sha);
    struct placement_ids ids = {.dense_sha = dense_sha, .experts_sha = experts_sha, .idx_sha = idx_sha,
                                .hotlist_sha = hot_sha, .dense_tensor_bytes = dense_bytes_of(r->m),
                                .vram_reserve_bytes = gw_vram_reserve(r->m, o.vram_ctx)};
    uint64_t dense = 0, mtp = 0;
    int rc = gw_vram_dense_bytes(r->m, &dense, &mtp, r->err, sizeof r->err);
    if (rc) return rc;
    /* the n-gram table is on the device only where the placement says vram (the gpu-worker's rule) */
    if (!o.ple_vram) dense -= gw_vram_ple_table_bytes(r->m);
    ids.vram_dense_bytes = dense + mtp;
    if (r->given_slots) o.vram_bytes = ids.vram_dense_bytes + ids.vram_reserve_bytes + r->vram_slots;
    char *json = NULL;
    rc = placement_build(&r->x, h, &o, &ids, &json, summary, sizeof summary, r->err, sizeof r->err);
    if (!rc) rc = small_part(r, "placement.json", json, strlen(json), NULL);
    if (!rc) say("placement: %s", summary);
    free(json);
    return rc;
}

/* Refuses to start a write the disk cannot hold. */
static int check_space(struct run *r)
{
    uint64_t need = 0;
    const char *big[] = {"experts.bin", "ple.bin", "dense.gguf"};
    uint64_t size[] = {r->x.file_bytes, r->ple.present ? r->ple.file_bytes : 0, dense_bytes_of(r->m)};
    for (int i = 0; i < 3; i++) {
        char path[4200];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s.tmp", r->dir, big[i]);
        uint64_t partial = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
        if (!sums_get(&r->sums, big[i]) && size[i] > partial) need += size[i] - partial;
    }
    struct statvfs vfs;
    if (statvfs(r->dir, &vfs) != 0) return 0; /* unknown: let the writes tell */
    uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    if (need <= avail) return 0;
    char a[32], b[32];
    fmt_bytes(need, a, sizeof a);
    fmt_bytes(avail, b, sizeof b);
    return nb_errf(r->err, sizeof r->err, NB_EIO, "%s: not enough disk space: %s to write, %s free", r->dir, a, b);
}

static int run_parts(struct run *r)
{
    int rc = mkdir(r->dir, 0755);
    if (rc && errno != EEXIST) return nb_errf(r->err, sizeof r->err, NB_EIO, "%s: %s", r->dir, strerror(errno));
    struct stat st;
    if (stat(r->dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return nb_errf(r->err, sizeof r->err, NB_EIO, "%s: not a directory", r->dir);
    sums_load(&r->sums, r->dir);
    if ((rc = part_manifest(r))) return rc;
    if ((rc = expert_layout_build(&r->x, r->m, r->err, sizeof r->err))) return rc;
    if ((rc = ple_layout_build(&r->ple, r->m, r->err, sizeof r->err))) return rc;
    if ((rc = check_space(r))) return rc;
    struct dense_refs refs = {0};
    sha_buf_hex(r->x.idx, r->x.idx_bytes, refs.idx_sha);
    if ((rc = small_part(r, "experts.idx", (const char *)r->x.idx, r->x.idx_bytes, NULL))) return rc;
    if ((rc = stream_part(r, "experts.bin", refs.experts_sha))) return rc;
    if ((rc = part_ple(r, refs.ple_sha))) return rc;
    char dense_sha[PREP_SHA_HEX], hot_sha[PREP_SHA_HEX];
    if ((rc = part_dense(r, &refs, dense_sha))) return rc;
    struct hotlist h = {0};
    if (!(rc = part_hotlist(r, &h, hot_sha))) rc = part_placement(r, &h, dense_sha, refs.experts_sha, hot_sha);
    hotlist_free(&h);
    return rc;
}

/* conf/profiles.tsv of this checkout: BIN/../../conf/, as nebula.conf is found. */
static void default_profiles(char *buf, size_t len)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    snprintf(buf, len, "conf/profiles.tsv");
    if (n <= 0) return;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(buf, len, "%.4000s/../../conf/profiles.tsv", exe);
}

/* --profile, --profile-info, --profile-table: the profile's budgets become
 * the placement options not given on the command line. */
static int apply_profile(struct run *r)
{
    char path[4200];
    if (r->profiles_path) snprintf(path, sizeof path, "%s", r->profiles_path);
    else default_profiles(path, sizeof path);
    struct profile_table *t = calloc(1, sizeof *t);
    struct expert_layout x = {0};
    struct ple_layout ple = {0};
    struct profile_result res;
    if (!t) return nb_errf(r->err, sizeof r->err, NB_ENOMEM, "out of memory");
    int rc = profile_load(t, path, r->err, sizeof r->err);
    if (!rc) rc = expert_layout_build(&x, r->m, r->err, sizeof r->err);
    if (!rc) rc = ple_layout_build(&ple, r->m, r->err, sizeof r->err);
    if (!rc && r->profile_table) {
        profile_print_header(stdout);
        for (int i = 0; i < t->n && !rc; i++)
            if (!(rc = profile_compute(&t->row[i], false, r->m, &x, &ple, &res, r->err, sizeof r->err)))
                profile_print_row(stdout, &res);
    }
    const struct profile_row *row = NULL;
    if (!rc && r->profile && strcmp(r->profile, "auto") == 0) {
        uint64_t vram = 0, ram = 0;
        rc = r->hw_file ? profile_hw_read(r->hw_file, &vram, &ram, r->err, sizeof r->err)
                        : profile_hw_detect(&vram, &ram, r->err, sizeof r->err);
        if (!rc) rc = profile_pick(t, vram, ram, r->cpu_only, &row, r->err, sizeof r->err);
    } else if (!rc && r->profile && !(row = profile_find(t, r->profile))) {
        rc = nb_errf(r->err, sizeof r->err, NB_EINVAL, "--profile %s: not in %s (or auto)", r->profile, path);
    }
    if (!rc && row) rc = profile_compute(row, r->cpu_only, r->m, &x, &ple, &res, r->err, sizeof r->err);
    if (!rc && row && r->profile_info) profile_print_info(stdout, &res);
    else if (!rc && row && !res.fits)
        rc = nb_errf(r->err, sizeof r->err, NB_EINVAL, "profile %s does not fit this model: %s", res.name, res.why);
    if (!rc && row && !r->profile_info) {
        say("profile %s (%g GiB VRAM, %g GiB RAM): VRAM budget %.1f GiB, RAM budget %.1f GiB, ctx %lld, n-gram table on %s",
            res.name, res.cpu_only ? 0 : row->vram_gib, row->ram_gib, res.vram_budget / 1073741824.0, res.ram_budget / 1073741824.0,
            (long long)res.ctx, res.ple_ssd ? "ssd" : "ram");
        uint64_t table_ram = res.ple_bytes && !res.ple_ssd ? res.ple_bytes : 0;
        if (!r->given_vram && !r->given_slots) r->given_vram = true, r->popts.vram_bytes = res.vram_budget;
        if (!r->given_ram) r->given_ram = true, r->popts.ram_bytes = res.ram_budget - table_ram;
        if (!r->given_ctx) r->given_ctx = true, r->popts.vram_ctx = res.ctx;
        if (!r->given_ple) r->given_ple = true, r->popts.ple_ssd = res.ple_ssd;
    }
    expert_layout_free(&x);
    free(t);
    return rc;
}

/* "W" or "W:N" of --early-quota. */
static int parse_early(const char *s, struct placement_opts *o)
{
    char *end;
    errno = 0;
    o->early_weight = strtod(s, &end);
    if (errno || end == s || !(o->early_weight >= 0 && o->early_weight <= 1)) return -1;
    o->early_layers = 0;
    if (*end == ':') {
        long n = strtol(end + 1, &end, 10);
        if (n < 1 || n > 100000) return -1;
        o->early_layers = (int)n;
    }
    return *end ? -1 : 0;
}

int main(int argc, char **argv)
{
    struct run r = {0};
    bool quiet = false;
    enum { O_VRAM = 1000, O_SLOTS, O_CTX, O_RAM, O_VICTIM, O_EARLY, O_MTP, O_PLE, O_HOT, O_KILL, O_INT, O_MTP_FILE,
           O_PROFILE, O_PROFILES, O_HW, O_PINFO, O_PTABLE, O_CPU, O_ARENA };
    static const struct option opts[] = {
        NB_OPT_ARG("vram-budget", O_VRAM), NB_OPT_ARG("ram-budget", O_RAM), NB_OPT_ARG("vram-slots", O_SLOTS),
        NB_OPT_ARG("ctx", O_CTX), NB_OPT_ARG("victim-cache", O_VICTIM), NB_OPT_ARG("early-quota", O_EARLY),
        NB_OPT_ARG("mtp-experts", O_MTP), NB_OPT_ARG("hotlist", O_HOT), NB_OPT_ARG("ple-tier", O_PLE),
        NB_OPT_ARG("mtp", O_MTP_FILE), NB_OPT_ARG("arena-vram", O_ARENA), NB_OPT_ARG("profile", O_PROFILE),
        NB_OPT_ARG("profiles", O_PROFILES), NB_OPT_ARG("hw-file", O_HW), NB_OPT_FLAG("profile-info", O_PINFO),
        NB_OPT_FLAG("profile-table", O_PTABLE), NB_OPT_FLAG("cpu-only", O_CPU),
        /* tests only: a crash (SIGKILL) or a Ctrl-C (SIGINT) in the middle of the unit after N */
        NB_OPT_ARG("test-kill-after-units", O_KILL), NB_OPT_ARG("test-interrupt-after-units", O_INT),
        NB_OPT_FLAG("quiet", 'q'), NB_OPT_FLAG("help", 'h'), NB_OPT_END};
    int o;
    while ((o = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
        const char *bad = NULL;
        switch (o) {
        case O_VRAM: r.given_vram = true; bad = parse_size(optarg, &r.popts.vram_bytes) ? "--vram-budget" : NULL; break;
        case O_SLOTS:
            r.given_slots = true;
            bad = parse_size(optarg, &r.vram_slots) || r.vram_slots == BUDGET_ALL ? "--vram-slots" : NULL;
            break;
        case O_CTX: {
            char *end;
            errno = 0;
            long long n = strtoll(optarg, &end, 10);
            r.given_ctx = true, r.popts.vram_ctx = n;
            bad = errno || end == optarg || *end || n < 1 ? "--ctx" : NULL;
            break;
        }
        case O_RAM: r.given_ram = true; bad = parse_size(optarg, &r.popts.ram_bytes) ? "--ram-budget" : NULL; break;
        case O_VICTIM:
            r.given_victim = true;
            bad = parse_size(optarg, &r.popts.victim_bytes) || r.popts.victim_bytes == BUDGET_ALL ? "--victim-cache" : NULL;
            break;
        case O_EARLY: r.given_early = true; bad = parse_early(optarg, &r.popts) ? "--early-quota" : NULL; break;
        case O_MTP:
            r.given_mtp = true;
            r.popts.mtp_first = strcmp(optarg, "vram-first") == 0;
            bad = !r.popts.mtp_first && strcmp(optarg, "shared") != 0 ? "--mtp-experts" : NULL;
            break;
        case O_PLE:
            r.given_ple = true;
            r.popts.ple_ssd = strcmp(optarg, "ssd") == 0;
            r.popts.ple_vram = strcmp(optarg, "vram") == 0;
            bad = !r.popts.ple_ssd && !r.popts.ple_vram && strcmp(optarg, "ram") != 0 ? "--ple-tier" : NULL;
            break;
        case O_ARENA:
            r.given_arena = true;
            r.popts.arena_vram = strcmp(optarg, "on") == 0;
            bad = !r.popts.arena_vram && strcmp(optarg, "off") != 0 ? "--arena-vram" : NULL;
            break;
        case O_HOT: r.hotlist_path = optarg; break;
        case O_MTP_FILE: r.mtp_path = optarg; break;
        case O_PROFILE: r.profile = optarg; break;
        case O_PROFILES: r.profiles_path = optarg; break;
        case O_HW: r.hw_file = optarg; break;
        case O_PINFO: r.profile_info = true; break;
        case O_PTABLE: r.profile_table = true; break;
        case O_CPU: r.cpu_only = true; break;
        case O_KILL: ckpt_set_test_kill(atoi(optarg), SIGKILL); break;
        case O_INT: ckpt_set_test_kill(atoi(optarg), SIGINT); break;
        case 'q': quiet = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return EXIT_USAGE;
        }
        if (bad) {
            fprintf(stderr, "nebula-prepare: %s: cannot use \"%s\" (see --help)\n", bad, optarg);
            return EXIT_USAGE;
        }
    }
    if (r.given_vram && r.given_slots) {
        fprintf(stderr, "nebula-prepare: --vram-budget and --vram-slots are two ways to say one thing: give one\n");
        return EXIT_USAGE;
    }
    bool report_only = r.profile_info || r.profile_table;
    if (r.profile_info && !r.profile) {
        fprintf(stderr, "nebula-prepare: --profile-info: which profile? (--profile NAME or auto)\n");
        return EXIT_USAGE;
    }
    if (r.cpu_only && !r.profile) {
        fprintf(stderr, "nebula-prepare: --cpu-only goes with --profile (NAME or auto)\n");
        return EXIT_USAGE;
    }
    if (argc - optind != (report_only ? 1 : 2)) {
        fprintf(stderr, "nebula-prepare: expected MODEL.gguf%s\n", report_only ? " only (--profile-info/-table write nothing)" : " and OUTDIR");
        usage(stderr);
        return EXIT_USAGE;
    }
    r.in_path = argv[optind];
    r.dir = report_only ? NULL : argv[optind + 1];
    progress_setup(quiet);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    double t0 = nb_now_s();
    int rc = model_open_mtp(r.in_path, r.mtp_path, &r.m, r.err, sizeof r.err);
    if (rc) {
        fprintf(stderr, "nebula-prepare: %s: %s\n", r.in_path, r.err);
        return EXIT_IO;
    }
    if (r.profile || r.profile_table) {
        rc = apply_profile(&r);
        if (rc || report_only) {
            model_close(r.m);
            if (rc) fprintf(stderr, "nebula-prepare: %s\n", r.err[0] ? r.err : nb_strerror(rc));
            return rc == 0 ? 0 : rc == NB_EINVAL ? EXIT_USAGE : EXIT_IO;
        }
    }
    rc = run_parts(&r);
    expert_layout_free(&r.x);
    model_close(r.m);
    if (prep_interrupted) {
        fprintf(stderr, "nebula-prepare: interrupted; run the same command again to resume\n");
        return EXIT_INTERRUPTED;
    }
    if (rc) {
        fprintf(stderr, "nebula-prepare: %s\n", r.err[0] ? r.err : nb_strerror(rc));
        return rc == NB_EINVAL ? EXIT_USAGE : EXIT_IO;
    }
    say("%s: done in %.1f s (%d parts verified, %d written)", r.dir, nb_now_s() - t0, r.verified, r.written);
    return 0;
}
