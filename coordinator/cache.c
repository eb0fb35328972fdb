/* cache.c — the prompt cache's index (issue 17; docs/ARCHITECTURE.md,
 * "Prompt cache").
 *
 * The gpu-worker keeps the checkpoints (gpu-worker/proc/cache.c: whole
 * sequence states in RAM, and with cache.dir their files); this index knows,
 * for each, the token ids it covers, its bytes and where it is, and decides
 * what a request resumes from, where it saves, and what leaves when a
 * budget is exceeded (least recently used first).
 *
 * Two kinds of checkpoint, by the bits what follows them gets:
 *  - on the grid (grid > 0): a state a prefill from token 0 computes at a
 *    block boundary of GDN's chunked form (64 rows from an eval's first:
 *    core/model's model_resume_align) — resumed, the rest of the prompt is
 *    evaluated with the bits an uncached prefill gives.  A position p is on
 *    the grid of a prefill in steps of chunk (the request's prefill_chunk
 *    capped at --chunk: the uncached prefill's evals end at its multiples,
 *    gen.c keeps that grid when it resumes) when (p mod chunk) is a multiple
 *    of the alignment; such a checkpoint serves prefills whose grid gives it
 *    the same bits: the same chunk, or both multiples of the alignment.
 *  - anywhere (grid 0): the state after the last token a request evaluated
 *    (its prompt and the answer's tokens fed back by the decode steps, whose
 *    recurrent form rounds otherwise than the chunked one) and at the
 *    generation prompt's role header (the position after which the next
 *    turn's history renders otherwise), or any state resumed from one of
 *    these.  What follows is exact within float tolerance, not bit for bit
 *    (docs/BENCHMARKS.md measures it); it serves any prompt that extends it.
 * A new prompt resumes from the longest checkpoint that is a prefix of it.  cache.resume = grid takes
 * and serves the first kind only: the output is then the uncached one's bit for bit. */
#include "coordinator/coord.h"

#include "core/kvfile/kvfile.h"
#include "core/model/model.h"
#include "core/util/err.h"
#include "core/util/log.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct coord_ckpt {
    uint32_t id;
    int32_t *tokens;
    int64_t n;
    int grid;              /* the prefill chunk it was computed with; 0: anywhere (the top comment) */
    uint64_t bytes, file_bytes;
    bool in_ram, on_disk;
    uint64_t used;
};

struct coord_cache {
    struct coord_ckpt *e;
    int n, cap;
    uint32_t next_id;
    uint64_t clock;
    int align;
    char identity[KVFILE_IDENTITY_MAX];
    struct coord_cache_numbers num;
    uint32_t orphans[8];   /* saved by the gpu-worker but refused here: dropped first (coord_cache_evict) */
    int n_orphans;
};

static void ckpt_path(const struct coord *c, uint32_t id, char *p, size_t n)
{
    snprintf(p, n, "%s/%08x" KVFILE_SUFFIX, c->cache_cfg.dir, id);
}

static struct coord_ckpt *add(struct coord_cache *k)
{
    if (k->n == k->cap) {
        int cap = k->cap ? k->cap * 2 : 16;
        struct coord_ckpt *e = realloc(k->e, (size_t)cap * sizeof *e);
        if (!e) return NULL;
        k->e = e, k->cap = cap;
    }
    struct coord_ckpt *e = &k->e[k->n++];
    memset(e, 0, sizeof *e);
    return e;
}

static void recount(struct coord_cache *k)
{
    k->num.ram_entries = k->num.disk_entries = 0, k->num.ram_bytes = k->num.disk_bytes = 0;
    for (int i = 0; i < k->n; i++) {
        if (k->e[i].in_ram) k->num.ram_entries++, k->num.ram_bytes += k->e[i].bytes;
        if (k->e[i].on_disk) k->num.disk_entries++, k->num.disk_bytes += k->e[i].file_bytes;
    }
}

static void remove_at(struct coord_cache *k, int i)
{
    free(k->e[i].tokens);
    k->e[i] = k->e[--k->n];
    recount(k);
}

/* The files of an earlier instance: each header read (identity, tokens); a bad one ignored with a log line. */
static void scan_dir(struct coord *c, struct coord_cache *k)
{
    DIR *d = opendir(c->cache_cfg.dir);
    if (!d) return nb_log("prompt cache: cannot read %s: %s", c->cache_cfg.dir, strerror(errno));
    struct dirent *de;
    while ((de = readdir(d))) {
        const size_t len = strlen(de->d_name), sl = strlen(KVFILE_SUFFIX);
        char *end;
        if (len != 8 + sl || strcmp(de->d_name + 8, KVFILE_SUFFIX)) continue;
        unsigned long id = strtoul(de->d_name, &end, 16);
        if (end != de->d_name + 8) continue;
        char path[PATH_MAX + 32], err[PATH_MAX + 200];
        ckpt_path(c, (uint32_t)id, path, sizeof path);
        int32_t *tok;
        uint32_t n, grid;
        uint64_t bytes;
        struct stat st;
        if (kvfile_read_head(path, k->identity, &grid, &tok, &n, &bytes, err, sizeof err) || stat(path, &st)) {
            nb_log("prompt cache: ignoring %s", err);
            continue;
        }
        struct coord_ckpt *e = add(k);
        if (!e) {
            free(tok);
            break;
        }
        *e = (struct coord_ckpt){.id = (uint32_t)id, .tokens = tok, .n = n, .grid = (int)grid, .bytes = bytes, .file_bytes = (uint64_t)st.st_size,
                                 .on_disk = true, .used = (uint64_t)st.st_mtime};
        if ((uint32_t)id >= k->next_id) k->next_id = (uint32_t)id + 1;
    }
    closedir(d);
    recount(k);
    if (k->n) nb_log("prompt cache: %d checkpoints found in %s (%.1f MiB)", k->n, c->cache_cfg.dir, k->num.disk_bytes / 1048576.0);
}

int coord_cache_open(struct coord *c, char *err, size_t errlen)
{
    if (c->cache_cfg.enable == 2 && strcmp(c->backend, "cpu")) {
        /* auto: the cuda backend's gw_seq_save/load pass their checks on the H200 (run-seq-state-on-gpu.sh,
         * test_prompt_cache.py on cuda: docs/BENCHMARKS.md, session 9), but a save copies the state through
         * pageable host memory on the request's path, up to three times a request, and what that costs on the
         * full model is not measured: until it is, cuda users get the uncached path unless they ask for the
         * cache with --cache on / cache.enable = on */
        nb_log("prompt cache: off on the %s backend by default (cache.enable = auto; on: --cache on)", c->backend);
        return 0;
    }
    if (!c->cache_cfg.enable) return 0;
    struct coord_cache *k = calloc(1, sizeof *k);
    if (!k) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    c->cache = k;
    k->align = model_resume_align(c->m);
    k->next_id = 1;
    /* what a file must say made it: the model file as it is, and the arithmetic */
    struct stat sm, st2 = {0};
    if (stat(c->model_path, &sm)) return nb_errf(err, errlen, NB_EIO, "prompt cache: %s: %s", c->model_path, strerror(errno));
    if (c->mtp_path && stat(c->mtp_path, &st2)) return nb_errf(err, errlen, NB_EIO, "prompt cache: %s: %s", c->mtp_path, strerror(errno));
    char real[PATH_MAX];
    if (!realpath(c->model_path, real)) snprintf(real, sizeof real, "%s", c->model_path);
    if (snprintf(k->identity, sizeof k->identity, "nebula-kv1 model=%.200s size=%lld mtime=%lld.%09ld mtp=%lld.%09ld backend=%s kernels=%s",
                 real, (long long)sm.st_size, (long long)sm.st_mtim.tv_sec, sm.st_mtim.tv_nsec, (long long)st2.st_mtim.tv_sec,
                 st2.st_mtim.tv_nsec, c->backend, c->kernels && c->kernels[0] ? c->kernels : "default") >= (int)sizeof k->identity)
        return nb_errf(err, errlen, NB_EINVAL, "prompt cache: the identity is too long");
    if (c->cache_cfg.dir[0]) {
        if (mkdir(c->cache_cfg.dir, 0700) && errno != EEXIST)
            return nb_errf(err, errlen, NB_EIO, "cache.dir %s: %s", c->cache_cfg.dir, strerror(errno));
        scan_dir(c, k);
    }
    nb_log("prompt cache: on (checkpoints at multiples of %d positions%s; RAM %d entries / %.0f MiB; %s%s)", k->align,
           c->cache_cfg.grid_only ? " only" : ", at the role header and at the end",
           c->cache_cfg.ram_entries, c->cache_cfg.ram_bytes / 1048576.0, c->cache_cfg.dir[0] ? "files in " : "no files",
           c->cache_cfg.dir);
    return 0;
}

void coord_cache_close(struct coord *c)
{
    struct coord_cache *k = c->cache;
    if (!k) return;
    for (int i = 0; i < k->n; i++) free(k->e[i].tokens);
    free(k->e);
    free(k);
    c->cache = NULL;
}

const char *coord_cache_identity(const struct coord *c) { return c->cache ? c->cache->identity : ""; }

/* p is on the grid of a prefill in steps of chunk, and a block boundary of GDN's chunked form there. */
static bool resumable(const struct coord_cache *k, int64_t p, int chunk)
{
    return p > 0 && chunk > 0 && (p % chunk) % k->align == 0;
}

/* Entry e may be resumed by a prefill in steps of chunk: anywhere (grid 0), or a state computed on grid g
 * that is the one a prefill on grid chunk computes (the same grid, or both on block boundaries only). */
static bool serves(const struct coord *c, const struct coord_ckpt *e, int chunk)
{
    const struct coord_cache *k = c->cache;
    if (e->grid == 0) return !c->cache_cfg.grid_only; /* cache.resume = grid: bit for bit only */
    return resumable(k, e->n, chunk) && (e->grid == chunk || (e->grid % k->align == 0 && chunk % k->align == 0));
}

bool coord_cache_match(struct coord *c, const int32_t *ids, size_t n, int chunk, uint32_t *id, int64_t *pos, bool *anywhere)
{
    struct coord_cache *k = c->cache;
    int best = -1;
    for (int i = 0; k && i < k->n; i++) {
        const struct coord_ckpt *e = &k->e[i];
        if (e->n >= (int64_t)n || !serves(c, e, chunk) || (best >= 0 && e->n < k->e[best].n))
            continue; /* one token at least is left to evaluate: its logits */
        if (best >= 0 && e->n == k->e[best].n && !e->in_ram) continue;
        if (memcmp(e->tokens, ids, (size_t)e->n * sizeof *ids)) continue;
        best = i;
    }
    if (best < 0) return false;
    k->e[best].used = ++k->clock + (1ull << 40); /* above the files' mtimes */
    *id = k->e[best].id, *pos = k->e[best].n, *anywhere = k->e[best].grid == 0;
    return true;
}

bool coord_cache_has(const struct coord *c, const int32_t *ids, int64_t n)
{
    const struct coord_cache *k = c->cache;
    for (int i = 0; k && i < k->n; i++)
        if (k->e[i].n == n && !memcmp(k->e[i].tokens, ids, (size_t)n * sizeof *ids)) return true;
    return false;
}

int64_t coord_cache_cut(const struct coord *c, size_t n, int chunk, int64_t from)
{
    if (!c->cache) return 0;
    for (int64_t p = (int64_t)n; p > from; p--)
        if (resumable(c->cache, p, chunk)) return p;
    return 0;
}

uint32_t coord_cache_new_id(struct coord *c) { return c->cache->next_id++; }

/* A checkpoint the gpu-worker holds that the index does not take: dropped with its file by the next evict. */
static int orphan(struct coord_cache *k, uint32_t id, int rc)
{
    if (k->n_orphans < (int)(sizeof k->orphans / sizeof k->orphans[0])) k->orphans[k->n_orphans++] = id;
    return rc;
}

int coord_cache_saved(struct coord *c, uint32_t id, const int32_t *ids, int64_t n, int chunk, const int32_t *answer,
                      uint32_t bytes, char *err, size_t errlen)
{
    struct coord_cache *k = c->cache;
    if (bytes != 20) return nb_errf(err, errlen, NB_EIO, "gpu-worker: a save answer of %u bytes", bytes);
    const uint64_t state = (uint64_t)(uint32_t)answer[0] | (uint64_t)(uint32_t)answer[1] << 32;
    const uint64_t h = (uint64_t)(uint32_t)answer[3] | (uint64_t)(uint32_t)answer[4] << 32;
    if (answer[2] != n || h != kvfile_hash(ids, (uint64_t)n * 4, 3))
        return orphan(k, id, nb_errf(err, errlen, NB_EIO, "gpu-worker: checkpoint %08x holds %d positions, not the %lld ids expected", id,
                                     answer[2], (long long)n));
    struct coord_ckpt *e = add(k);
    int32_t *t = malloc((size_t)n * sizeof *t);
    if (!e || !t) {
        if (e) k->n--;
        free(t);
        return orphan(k, id, nb_errf(err, errlen, NB_ENOMEM, "out of memory"));
    }
    memcpy(t, ids, (size_t)n * sizeof *t);
    *e = (struct coord_ckpt){.id = id, .tokens = t, .n = n, .grid = chunk, .bytes = state, .in_ram = true, .on_disk = c->cache_cfg.dir[0] != 0,
                             .file_bytes = state + (uint64_t)n * 4 + 4096, .used = ++k->clock + (1ull << 40)};
    k->num.saves++;
    recount(k);
    return 0;
}

/* The least recently used entry with the flag (in RAM, on disk), or -1. */
static int oldest(const struct coord_cache *k, bool ram)
{
    int o = -1;
    for (int i = 0; i < k->n; i++)
        if ((ram ? k->e[i].in_ram : k->e[i].on_disk) && (o < 0 || k->e[i].used < k->e[o].used)) o = i;
    return o;
}

bool coord_cache_evict(struct coord *c, uint32_t *id, bool *file)
{
    struct coord_cache *k = c->cache;
    if (!k) return false;
    const struct coord_cache_cfg *g = &c->cache_cfg;
    int i;
    if (k->n_orphans) return *id = k->orphans[--k->n_orphans], *file = true, true;
    if (k->num.disk_bytes > g->disk_bytes && (i = oldest(k, false)) >= 0) { /* the file, and the RAM copy with it */
        *id = k->e[i].id, *file = true;
        remove_at(k, i);
        return true;
    }
    if ((k->num.ram_entries > (uint64_t)g->ram_entries || k->num.ram_bytes > g->ram_bytes) && (i = oldest(k, true)) >= 0) {
        *id = k->e[i].id, *file = false;
        if (k->e[i].on_disk) k->e[i].in_ram = false, recount(k);
        else remove_at(k, i);
        return true;
    }
    return false;
}

void coord_cache_forget(struct coord *c, uint32_t id)
{
    struct coord_cache *k = c->cache;
    for (int i = 0; k && i < k->n; i++)
        if (k->e[i].id == id) {
            if (k->e[i].on_disk && !k->e[i].in_ram) { /* a bad file: removed, so it is not tried again */
                char path[PATH_MAX + 32];
                ckpt_path(c, id, path, sizeof path);
                unlink(path);
            }
            k->num.load_failures++;
            remove_at(k, i);
            return;
        }
}

void coord_cache_ram_lost(struct coord *c)
{
    struct coord_cache *k = c->cache;
    for (int i = 0; k && i < k->n;) {
        if (k->e[i].on_disk) k->e[i].in_ram = false, i++;
        else remove_at(k, i); /* the last entry moved into i */
    }
    if (k) recount(k);
}

void coord_cache_count(struct coord *c, bool hit, int64_t reused, int64_t prefilled)
{
    if (!c->cache) return;
    if (hit) c->cache->num.hits++, c->cache->num.tokens_reused += (uint64_t)reused;
    else c->cache->num.misses++;
    c->cache->num.tokens_prefilled += (uint64_t)prefilled;
}

struct coord_cache_numbers coord_cache_numbers(const struct coord *c)
{
    return c->cache ? c->cache->num : (struct coord_cache_numbers){0};
}
