/* profile.c — hardware profiles: conf/profiles.tsv turned into budgets.
 *
 * A profile is a hardware class (VRAM × RAM, docs/INSTALL.md) and a policy:
 * the context and prefill chunk wanted and what is left to the rest of the
 * machine.  What it means for one model is computed here from that model's
 * real tensor sizes with the arithmetic the rest of nebula-prepare and the
 * gpu-worker use (engine/vram.h for the dense weights and the reserve,
 * placement_tiers for the slots), never written in the table: the same row
 * gives an IQ1_S file more experts in VRAM than a Q4_K_M one.
 *
 * The one idea: the VRAM budget pays, in order, the dense weights, the
 * reserve for the context (halved until it fits), then expert slots; the RAM
 * budget holds the experts VRAM did not take, and the n-gram table only when
 * every one of those fits beside it — an expert missed costs megabytes from
 * the SSD, a table row a 4 KiB page, so RAM is worth more to the experts. */
#include "tools/nebula-prepare/prepare.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"
#include "core/quant/quant.h"
#include "engine/vram.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define PROFILE_MIN_CTX 4096

/* One number of a row: the field must be all of it. */
static int field_num(const char *s, double lo, double hi, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return errno || end == s || *end || !(*v >= lo && *v <= hi) ? -1 : 0;
}

int profile_load(struct profile_table *t, const char *path, char *err, size_t errlen)
{
    char *text = NULL;
    size_t n = 0;
    memset(t, 0, sizeof *t);
    int rc = nb_read_file(path, &text, &n, err, errlen);
    if (rc) return rc;
    static const char *cols[PROFILE_COLS] = {"profile", "vram_gib", "ram_gib", "ctx", "prefill_chunk", "vram_keep_gib",
                                             "ram_keep_gib"};
    int lineno = 0;
    bool header = false;
    for (char *line = text, *next; line && *line && !rc; line = next) {
        lineno++;
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        if (line[0] == '#' || line[0] == 0) continue;
        char *f[PROFILE_COLS + 1];
        int nf = 0;
        for (char *p = strtok(line, "\t"); p && nf <= PROFILE_COLS; p = strtok(NULL, "\t")) f[nf++] = p;
        if (nf != PROFILE_COLS) {
            rc = nb_errf(err, errlen, NB_EINVAL, "%s:%d: %d tab-separated fields, want %d (%s ...)", path, lineno, nf,
                         PROFILE_COLS, cols[0]);
            break;
        }
        if (!header) {
            for (int i = 0; i < PROFILE_COLS && !rc; i++)
                if (strcmp(f[i], cols[i]))
                    rc = nb_errf(err, errlen, NB_EINVAL, "%s:%d: column %d is \"%s\", want \"%s\"", path, lineno, i + 1,
                                 f[i], cols[i]);
            header = true;
            continue;
        }
        if (t->n == PROFILE_MAX) {
            rc = nb_errf(err, errlen, NB_EINVAL, "%s:%d: more than %d profiles", path, lineno, PROFILE_MAX);
            break;
        }
        struct profile_row *r = &t->row[t->n];
        double ctx, chunk;
        if (strlen(f[0]) >= sizeof r->name || field_num(f[1], 1, 4096, &r->vram_gib) ||
            field_num(f[2], 1, 65536, &r->ram_gib) || field_num(f[3], PROFILE_MIN_CTX, 1 << 24, &ctx) ||
            ctx != floor(ctx) || field_num(f[4], 1, 8192, &chunk) || chunk != floor(chunk) ||
            field_num(f[5], 0, r->vram_gib, &r->vram_keep_gib) || field_num(f[6], 0, r->ram_gib, &r->ram_keep_gib)) {
            rc = nb_errf(err, errlen, NB_EINVAL, "%s:%d: a name under 32 bytes, then numbers: VRAM and RAM in GiB, ctx "
                         "(>= %d), prefill chunk (1..8192), the GiB kept back of each (at most the size)",
                         path, lineno, PROFILE_MIN_CTX);
            break;
        }
        snprintf(r->name, sizeof r->name, "%s", f[0]);
        r->ctx = (int64_t)ctx;
        r->chunk = (int)chunk;
        for (int i = 0; i < t->n && !rc; i++)
            if (!strcmp(t->row[i].name, r->name) || (t->row[i].vram_gib == r->vram_gib && t->row[i].ram_gib == r->ram_gib))
                rc = nb_errf(err, errlen, NB_EINVAL, "%s:%d: profile %s repeats %s's name or class", path, lineno,
                             r->name, t->row[i].name);
        t->n++;
    }
    free(text);
    if (!rc && t->n == 0) rc = nb_errf(err, errlen, NB_EINVAL, "%s: no profiles", path);
    return rc;
}

const struct profile_row *profile_find(const struct profile_table *t, const char *name)
{
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->row[i].name, name)) return &t->row[i];
    return NULL;
}

/* A class is reached at PROFILE_CLASS_SHARE of its nominal size: a 24 GB
 * card reports 23.99 GiB, 32 GB of RAM 31.3 GiB of MemTotal (the firmware's
 * and the kernel's part is not counted). */
static bool reaches(double have_gib, double class_gib) { return have_gib >= class_gib * PROFILE_CLASS_SHARE; }

int profile_pick(const struct profile_table *t, uint64_t vram_bytes, uint64_t ram_bytes, bool cpu_only,
                 const struct profile_row **out, char *err, size_t errlen)
{
    /* VRAM and RAM are rounded down to a class separately; the row is the
     * one of both classes. */
    double vram = (double)vram_bytes / GIB, ram = (double)ram_bytes / GIB, vc = 0, rc = 0, vmin = 0, rmin = 0;
    for (int i = 0; i < t->n; i++) {
        const struct profile_row *r = &t->row[i];
        if (!vmin || r->vram_gib < vmin) vmin = r->vram_gib;
        if (!rmin || r->ram_gib < rmin) rmin = r->ram_gib;
        if (reaches(vram, r->vram_gib) && r->vram_gib > vc) vc = r->vram_gib;
        if (reaches(ram, r->ram_gib) && r->ram_gib > rc) rc = r->ram_gib;
    }
    *out = NULL;
    if (cpu_only) vc = vmin;
    if (!vc || !rc) {
        char miss[256] = "";
        if (!vc)
            snprintf(miss, sizeof miss, "%.1f GiB of GPU memory is %.1f GiB short of the smallest profile's %g GiB", vram,
                     vmin * PROFILE_CLASS_SHARE - vram, vmin);
        if (!rc)
            snprintf(miss + strlen(miss), sizeof miss - strlen(miss), "%s%.1f GiB of RAM is %.1f GiB short of the "
                     "smallest profile's %g GiB", vc ? "" : "; ", ram, rmin * PROFILE_CLASS_SHARE - ram, rmin);
        return nb_errf(err, errlen, NB_EINVAL, "no profile for this machine: %s", miss);
    }
    for (int i = 0; i < t->n; i++)
        if (t->row[i].vram_gib == vc && t->row[i].ram_gib == rc) *out = &t->row[i];
    if (!*out)
        return nb_errf(err, errlen, NB_EINVAL, "the profiles have no row for %g GiB VRAM x %g GiB RAM", vc, rc);
    return 0;
}

/* The trunk layers' experts per tier, as "mean" or "min-max". */
static void per_layer(const struct expert_layout *x, const uint32_t *n, char *buf, size_t len)
{
    uint32_t lo = UINT32_MAX, hi = 0;
    for (int l = 0; l < x->n_layers; l++) {
        if (x->layers[l].mtp) continue;
        if (n[l] < lo) lo = n[l];
        if (n[l] > hi) hi = n[l];
    }
    if (hi < lo) snprintf(buf, len, "-");
    else if (lo == hi) snprintf(buf, len, "%u", lo);
    else snprintf(buf, len, "%u-%u", lo, hi);
}

int profile_compute(const struct profile_row *row, bool cpu_only, const struct model *m, const struct expert_layout *x,
                    const struct ple_layout *ple, struct profile_result *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->row = row;
    out->cpu_only = cpu_only;
    if (cpu_only) snprintf(out->name, sizeof out->name, "cpu-r%g", row->ram_gib);
    else snprintf(out->name, sizeof out->name, "%s", row->name);
    uint64_t dense = 0, mtp = 0;
    int rc = gw_vram_dense_bytes(m, &dense, &mtp, err, errlen);
    if (rc) return rc;
    dense -= gw_vram_ple_table_bytes(m); /* the table stays in host memory (ram) or on the SSD */
    out->vram_budget = cpu_only ? 0 : (uint64_t)((row->vram_gib - row->vram_keep_gib) * GIB);
    out->ram_budget = (uint64_t)((row->ram_gib - row->ram_keep_gib) * GIB);
    out->vram_fixed = dense + mtp;
    /* The context: the row's (at most the model's), halved until the dense
     * weights and its reserve fit the budget. */
    int64_t ctx = row->ctx, model_ctx = gw_vram_default_ctx(m);
    if (ctx > model_ctx) ctx = model_ctx;
    while (!cpu_only && ctx > PROFILE_MIN_CTX && out->vram_fixed + gw_vram_reserve(m, ctx) > out->vram_budget) ctx /= 2;
    out->ctx = ctx;
    uint64_t reserve = gw_vram_reserve(m, ctx);
    if (cpu_only) { /* the RAM holds what the device would have: the dense weights, K/V and scratch */
        uint64_t fixed = out->vram_fixed + reserve;
        out->vram_fixed = 0;
        if (fixed > out->ram_budget) {
            char a[32], b[32];
            fmt_bytes(fixed, a, sizeof a);
            fmt_bytes(out->ram_budget, b, sizeof b);
            out->fits = false;
            snprintf(out->why, sizeof out->why, "the dense weights with K/V and scratch at ctx %lld (%s) exceed the "
                     "RAM budget %s", (long long)ctx, a, b);
            return 0;
        }
        out->ram_budget -= fixed;
        out->ram_used = fixed; /* the arena and the table are added below */
    } else if (out->vram_fixed + reserve > out->vram_budget) {
        char a[32], b[32], c[32];
        fmt_bytes(out->vram_fixed, a, sizeof a);
        fmt_bytes(reserve, b, sizeof b);
        fmt_bytes(out->vram_budget, c, sizeof c);
        out->fits = false;
        snprintf(out->why, sizeof out->why, "the dense weights (%s on the device) and the reserve at ctx %lld (%s) "
                 "exceed the VRAM budget %s", a, (long long)ctx, b, c);
        return 0;
    }
    out->fits = true;
    if (!cpu_only) out->vram_fixed += reserve;

    int n = x->n_layers;
    uint32_t *vram = calloc((size_t)n + 1, sizeof *vram), *ram = calloc((size_t)n + 1, sizeof *ram);
    uint32_t *ssd = calloc((size_t)n + 1, sizeof *ssd);
    if (!vram || !ram || !ssd) {
        rc = nb_errf(err, errlen, NB_ENOMEM, "out of memory");
        goto done;
    }
    struct placement_opts o = {.vram_bytes = out->vram_budget, .vram_ctx = ctx, .early_weight = 1.0, .mtp_first = true};
    struct placement_ids ids = {.vram_dense_bytes = dense + mtp, .vram_reserve_bytes = reserve};
    /* First with the whole RAM budget for experts: does the table fit beside them? */
    o.ram_bytes = BUDGET_ALL;
    if ((rc = placement_tiers(x, &o, &ids, vram, ram, err, errlen))) goto done;
    uint64_t rest = 0;
    for (int l = 0; l < n; l++) rest += (uint64_t)ram[l] * x->layers[l].blob_bytes;
    out->ple_bytes = ple->present ? ple->rows * ple->row_bytes : 0;
    out->ple_ssd = ple->present && rest + out->ple_bytes > out->ram_budget;
    uint64_t table_ram = ple->present && !out->ple_ssd ? out->ple_bytes : 0;
    o.ram_bytes = out->ram_budget - table_ram;
    o.ple_ssd = out->ple_ssd;
    if ((rc = placement_tiers(x, &o, &ids, vram, ram, err, errlen))) goto done;
    uint64_t slots = 0, arena = 0;
    for (int l = 0; l < n; l++) {
        const struct expert_layer *L = &x->layers[l];
        slots += (uint64_t)vram[l] * L->blob_bytes;
        arena += (uint64_t)ram[l] * L->blob_bytes;
        ssd[l] = L->n_expert - vram[l] - ram[l];
        if (L->mtp) out->mtp_vram = vram[l], out->has_mtp = true;
    }
    per_layer(x, vram, out->vram_layer, sizeof out->vram_layer);
    per_layer(x, ram, out->ram_layer, sizeof out->ram_layer);
    per_layer(x, ssd, out->ssd_layer, sizeof out->ssd_layer);
    out->vram_used = out->vram_fixed + slots;
    out->ram_used += arena + table_ram;
    /* The prefill chunk: the row's, at most what the reserve's scratch and
     * the bytes the slots left over hold when a chunk streams its experts
     * (gw_vram_stream_rows, as the CUDA backend sizes its pieces). */
    struct gw_vram_parts parts;
    gw_vram_plan(m, NULL, ctx, &parts);
    uint64_t room = out->vram_budget - out->vram_used + parts.scratch;
    int64_t fit = gw_vram_stream_rows(m, ctx, room);
    out->chunk = cpu_only || row->chunk < fit ? row->chunk : (int)fit;
    out->vram_free = cpu_only ? 0 : row->vram_gib * GIB - (double)out->vram_used;
    out->ram_free = row->ram_gib * GIB - (double)out->ram_used;
done:
    free(vram);
    free(ram);
    free(ssd);
    return rc;
}

static void gib(double bytes, char *buf, size_t len) { snprintf(buf, len, "%.1f", bytes / GIB); }

void profile_print_row(FILE *f, const struct profile_result *p)
{
    const struct profile_row *r = p->row;
    if (!p->fits) {
        fprintf(f, "| %s | %g | %g | — | — | — | — | — | — | — | — | does not fit: %s |\n", r->name, r->vram_gib,
                r->ram_gib, p->why);
        return;
    }
    char vb[16], rb[16], vf[16], rf[16], mtp[24] = "";
    gib((double)p->vram_budget, vb, sizeof vb);
    gib((double)p->ram_budget, rb, sizeof rb);
    gib(p->vram_free, vf, sizeof vf);
    gib(p->ram_free, rf, sizeof rf);
    if (p->has_mtp) snprintf(mtp, sizeof mtp, " (MTP %u)", p->mtp_vram);
    fprintf(f, "| %s | %g | %g | %s%s | %s | %s | %s | %lld | %d | %s | %s | budgets %s / %s GiB |\n", r->name,
            r->vram_gib, r->ram_gib, p->vram_layer, mtp, p->ram_layer, p->ssd_layer, p->ple_bytes ? (p->ple_ssd ? "ssd" : "ram") : "none",
            (long long)p->ctx, p->chunk, vf, rf, vb, rb);
}

void profile_print_header(FILE *f)
{
    fprintf(f, "| profile | VRAM GiB | RAM GiB | experts/layer in VRAM | in RAM | on SSD | n-gram table | max ctx | "
               "prefill chunk | free VRAM GiB | free RAM GiB | notes |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
}

void profile_print_info(FILE *f, const struct profile_result *p)
{
    const struct profile_row *r = p->row;
    fprintf(f, "profile=%s\nvram_gib=%g\nram_gib=%g\ncpu_only=%s\nfits=%s\n", p->name, p->cpu_only ? 0 : r->vram_gib,
            r->ram_gib, p->cpu_only ? "yes" : "no", p->fits ? "yes" : "no");
    if (!p->fits) {
        fprintf(f, "why=%s\n", p->why);
        return;
    }
    fprintf(f, "vram_budget=%llu\nram_budget=%llu\nctx=%lld\nprefill_chunk=%d\nple_tier=%s\nvram_layer=%s\nram_layer=%s\n"
               "ssd_layer=%s\nvram_used=%llu\nram_used=%llu\nvram_free=%.0f\nram_free=%.0f\n",
            (unsigned long long)p->vram_budget, (unsigned long long)p->ram_budget, (long long)p->ctx, p->chunk,
            p->ple_bytes ? (p->ple_ssd ? "ssd" : "ram") : "none", p->vram_layer, p->ram_layer, p->ssd_layer,
            (unsigned long long)p->vram_used, (unsigned long long)p->ram_used, p->vram_free, p->ram_free);
}

/* "key=value" lines; the value of key as bytes from MiB (0: absent). */
static uint64_t hw_mib(const char *text, const char *key)
{
    size_t k = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, key, k) && p[k] == '=') return (uint64_t)(strtod(p + k + 1, NULL) * 1024 * 1024);
    return 0;
}

int profile_hw_read(const char *path, uint64_t *vram_bytes, uint64_t *ram_bytes, char *err, size_t errlen)
{
    char *text = NULL;
    size_t n = 0;
    int rc = nb_read_file(path, &text, &n, err, errlen);
    if (rc) return rc == NB_ENOENT ? NB_EINVAL : rc;
    *vram_bytes = hw_mib(text, "gpu_vram_mib");
    *ram_bytes = hw_mib(text, "ram_mib");
    free(text);
    if (!*ram_bytes) return nb_errf(err, errlen, NB_EINVAL, "%s: no ram_mib=N line", path);
    return 0;
}

int profile_hw_detect(uint64_t *vram_bytes, uint64_t *ram_bytes, char *err, size_t errlen)
{
    *vram_bytes = *ram_bytes = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "MemTotal:", 9)) *ram_bytes = strtoull(line + 9, NULL, 10) * 1024;
    if (f) fclose(f);
    /* The GPU with the most memory: nvidia-smi, as the installer asks it. */
    FILE *p = popen("nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null", "r");
    while (p && fgets(line, sizeof line, p)) {
        uint64_t v = strtoull(line, NULL, 10) * 1024 * 1024;
        if (v > *vram_bytes) *vram_bytes = v;
    }
    if (p) pclose(p);
    if (!*ram_bytes) return nb_errf(err, errlen, NB_EIO, "/proc/meminfo: no MemTotal");
    return 0;
}
