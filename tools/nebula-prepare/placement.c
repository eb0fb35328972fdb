/* placement.c — which tier each expert lives on: placement.json.
 *
 * Per layer the experts are ranked by hotlist count (descending), then mean
 * router weight (descending), then id; the first vram_slots of the ranking
 * go to VRAM, the next ram_slots to the RAM arena, the rest stay on SSD.
 * Every expert is in exactly one list (ARCHITECTURE.md §3).
 *
 * The slot counts come from byte budgets:
 *   VRAM: the budget is the whole device's, as the gpu-worker checks it
 *   (engine/vram.c): it pays for the dense weights as the device holds
 *   them (some types widened to F32) and the reserve — K/V and state for
 *   vram_ctx positions plus scratch — first; with the MTP block "first" (the default: the draft layer's
 *   experts must all be resident, §5) its experts come next; what is left is
 *   shared among the trunk layers in proportion to per-layer weights —
 *   equal by default, or ramping up from --early-quota W over the first
 *   layers (early layers route less skewed, a slot there buys fewer hits).
 *   RAM: the budget minus the victim cache is shared equally among all
 *   layers, over the experts VRAM did not take.
 * A share is "water-filled": a layer that would get more slots than it has
 * experts is capped and its surplus re-shared among the others; the bytes
 * left under one blob per layer are then handed out one slot at a time to
 * the layer furthest below its share.  So the budget is used as fully as
 * whole blobs allow, and never exceeded. */
#include "tools/nebula-prepare/prepare.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"

/* Ranking order of expert ids in one layer. */
struct rank_ctx {
    const uint64_t *count;
    const double *weight;
};
static struct rank_ctx rank_by; /* qsort has no context argument */

static int cmp_rank(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    if (rank_by.count[x] != rank_by.count[y]) return rank_by.count[x] > rank_by.count[y] ? -1 : 1;
    if (rank_by.weight[x] != rank_by.weight[y]) return rank_by.weight[x] > rank_by.weight[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Up to `slots` blobs paid from *bytes (never more than it holds: the
 * float shares below may round a hair above the exact quotient). */
static uint32_t take_slots(uint64_t *bytes, uint32_t slots, uint64_t blob)
{
    uint64_t fit = *bytes / blob;
    if (slots > fit) slots = (uint32_t)fit;
    *bytes -= (uint64_t)slots * blob;
    return slots;
}

/* Water-fills `bytes` over layers with cap[l] free experts each (cap 0 =
 * not taking part), in proportion to w[l]; adds the slots to got[l]. */
static void share_out(const struct expert_layout *x, const uint32_t *cap, const double *w, uint64_t bytes,
                      uint32_t *got)
{
    int n = x->n_layers;
    bool *active = calloc((size_t)n, sizeof *active);
    uint32_t *give = calloc((size_t)n, sizeof *give);
    if (!active || !give) goto done; /* no allocation, no slots: never more than the budget */
    for (int l = 0; l < n; l++) active[l] = cap[l] > 0 && w[l] > 0;
    for (;;) {
        double wsum = 0;
        for (int l = 0; l < n; l++)
            if (active[l]) wsum += w[l];
        if (wsum <= 0) break;
        uint64_t round_bytes = bytes;
        bool capped = false;
        for (int l = 0; l < n; l++) {
            if (!active[l]) continue;
            double q = floor((double)round_bytes * (w[l] / wsum) / (double)x->layers[l].blob_bytes);
            if (q >= cap[l]) { /* more than it can hold: cap it, re-share the rest */
                give[l] = take_slots(&bytes, cap[l], x->layers[l].blob_bytes);
                active[l] = false;
                capped = true;
            }
        }
        if (capped) continue;
        for (int l = 0; l < n; l++) {
            if (!active[l]) continue;
            double q = floor((double)round_bytes * (w[l] / wsum) / (double)x->layers[l].blob_bytes);
            give[l] = take_slots(&bytes, (uint32_t)q, x->layers[l].blob_bytes);
        }
        break;
    }
    /* Leftover bytes: one slot at a time to the layer furthest below its share. */
    for (;;) {
        int best = -1;
        double best_fill = 0;
        for (int l = 0; l < n; l++) {
            if (!active[l] || give[l] >= cap[l] || x->layers[l].blob_bytes > bytes) continue;
            double fill = (give[l] + 1.0) / w[l];
            if (best < 0 || fill < best_fill) best = l, best_fill = fill;
        }
        if (best < 0) break;
        give[best]++;
        bytes -= x->layers[best].blob_bytes;
    }
    for (int l = 0; l < n; l++) got[l] += give[l];
done:
    free(active);
    free(give);
}

static cJSON *budget_json(uint64_t v) { return v == BUDGET_ALL ? cJSON_CreateString("all") : cJSON_CreateNumber((double)v); }

static cJSON *tier_json(uint64_t experts, uint64_t bytes)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "experts", (double)experts);
    cJSON_AddNumberToObject(o, "bytes", (double)bytes);
    return o;
}

static void add_request(cJSON *root, const struct placement_opts *o)
{
    cJSON *r = cJSON_CreateObject();
    cJSON_AddItemToObject(r, "vram_budget", budget_json(o->vram_bytes));
    cJSON_AddNumberToObject(r, "vram_ctx", (double)o->vram_ctx);
    cJSON_AddItemToObject(r, "ram_budget", budget_json(o->ram_bytes));
    cJSON_AddNumberToObject(r, "victim_cache", (double)o->victim_bytes);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "weight", o->early_weight);
    cJSON_AddNumberToObject(e, "layers", o->early_layers);
    cJSON_AddItemToObject(r, "early_quota", e);
    cJSON_AddStringToObject(r, "mtp_experts", o->mtp_first ? "vram-first" : "shared");
    cJSON_AddStringToObject(r, "ple_tier", o->ple_ssd ? "ssd" : o->ple_vram ? "vram" : "ram");
    cJSON_AddBoolToObject(r, "arena_vram", o->arena_vram);
    cJSON_AddItemToObject(root, "request", r);
}

/* Checks the budgets against the model; fills the VRAM bytes left for experts. */
static int check_budgets(const struct placement_opts *o, const struct placement_ids *ids, uint64_t *expert_vram,
                         char *err, size_t errlen)
{
    char a[32], b[32], c[32];
    const uint64_t fixed = ids->vram_dense_bytes + ids->vram_reserve_bytes;
    *expert_vram = 0;
    if (o->vram_bytes == BUDGET_ALL) *expert_vram = BUDGET_ALL;
    else if (o->vram_bytes > 0 && o->vram_bytes < fixed) {
        fmt_bytes(o->vram_bytes, a, sizeof a);
        fmt_bytes(ids->vram_dense_bytes, b, sizeof b);
        fmt_bytes(ids->vram_reserve_bytes, c, sizeof c);
        return nb_errf(err, errlen, NB_EINVAL,
                       "--vram-budget %s is less than the dense weights (%s on the device) plus the reserve for K/V "
                       "and scratch at --ctx %lld (%s), which come first; give at least that, or 0 for no experts in VRAM",
                       a, b, (long long)o->vram_ctx, c);
    } else if (o->vram_bytes > 0) {
        *expert_vram = o->vram_bytes - fixed;
    }
    if (o->ram_bytes != BUDGET_ALL && o->victim_bytes > o->ram_bytes) {
        fmt_bytes(o->victim_bytes, a, sizeof a);
        fmt_bytes(o->ram_bytes, b, sizeof b);
        return nb_errf(err, errlen, NB_EINVAL, "--victim-cache %s is larger than --ram-budget %s", a, b);
    }
    return 0;
}

int placement_tiers(const struct expert_layout *x, const struct placement_opts *o, const struct placement_ids *ids,
                    uint32_t *vram, uint32_t *ram, char *err, size_t errlen)
{
    int n = x->n_layers;
    uint32_t E = n ? x->layers[0].n_expert : 0;
    uint64_t expert_vram;
    int rc = check_budgets(o, ids, &expert_vram, err, errlen);
    if (rc) return rc;
    memset(vram, 0, (size_t)n * sizeof *vram);
    memset(ram, 0, (size_t)n * sizeof *ram);
    uint32_t *cap = calloc((size_t)n + 1, sizeof *cap);
    double *w = calloc((size_t)n + 1, sizeof *w);
    if (!cap || !w) {
        rc = nb_errf(err, errlen, NB_ENOMEM, "out of memory");
        goto done;
    }

    /* VRAM: MTP first (if asked), then weighted trunk quotas. */
    int n_trunk = 0;
    for (int l = 0; l < n; l++) n_trunk += !x->layers[l].mtp;
    int ramp = o->early_layers > 0 ? o->early_layers : (n_trunk / 4 > 0 ? n_trunk / 4 : 1);
    if (expert_vram == BUDGET_ALL) {
        for (int l = 0; l < n; l++) vram[l] = E;
    } else if (expert_vram > 0) {
        for (int l = 0, t = 0; l < n; l++) {
            const struct expert_layer *L = &x->layers[l];
            if (L->mtp && o->mtp_first) {
                uint64_t fit = expert_vram / L->blob_bytes;
                vram[l] = fit < E ? (uint32_t)fit : E;
                expert_vram -= (uint64_t)vram[l] * L->blob_bytes;
                continue;
            }
            cap[l] = E;
            w[l] = L->mtp ? 1.0 : (t < ramp ? o->early_weight + (1.0 - o->early_weight) * t / ramp : 1.0);
            t += !L->mtp;
        }
        share_out(x, cap, w, expert_vram, vram);
    }
    /* RAM: equal shares of the arena over what VRAM left. */
    for (int l = 0; l < n; l++) {
        cap[l] = E - vram[l];
        w[l] = 1.0;
    }
    uint64_t ram_left = o->ram_bytes == BUDGET_ALL ? 0 : o->ram_bytes - o->victim_bytes;
    if (o->arena_vram && o->ram_bytes != BUDGET_ALL) { /* the VRAM tier's copies in the arena come first */
        uint64_t copies = 0;
        for (int l = 0; l < n; l++) copies += (uint64_t)vram[l] * x->layers[l].blob_bytes;
        if (copies > ram_left) {
            char a[32], b[32];
            fmt_bytes(copies, a, sizeof a), fmt_bytes(ram_left, b, sizeof b);
            rc = nb_errf(err, errlen, NB_EINVAL, "--arena-vram: the VRAM tier's experts (%s) do not fit the RAM budget's %s", a, b);
            goto done;
        }
        ram_left -= copies;
    }
    if (o->ram_bytes == BUDGET_ALL) memcpy(ram, cap, (size_t)n * sizeof *ram);
    else share_out(x, cap, w, ram_left, ram);
done:
    free(cap);
    free(w);
    return rc;
}

int placement_build(const struct expert_layout *x, const struct hotlist *h, const struct placement_opts *o,
                    const struct placement_ids *ids, char **json, char *summary, size_t summary_len, char *err,
                    size_t errlen)
{
    *json = NULL;
    int n = x->n_layers;
    uint32_t E = h->n_expert;
    for (int l = 0; l < n; l++)
        if (x->layers[l].n_expert != E || h->n_layers != n || !h->count)
            return nb_errf(err, errlen, NB_EFORMAT, "placement: the hotlist does not match the expert layout");
    int rc = 0;
    uint32_t *vram = calloc((size_t)n + 1, sizeof *vram), *ram = calloc((size_t)n + 1, sizeof *ram);
    uint32_t *order = malloc((size_t)E * sizeof *order + 1);
    if (!vram || !ram || !order) {
        rc = nb_errf(err, errlen, NB_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = placement_tiers(x, o, ids, vram, ram, err, errlen))) goto done;

    cJSON *root = cJSON_CreateObject(), *model = cJSON_CreateObject(), *hot = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "nebula.placement/1");
    cJSON_AddStringToObject(model, "dense_sha256", ids->dense_sha);
    cJSON_AddStringToObject(model, "experts_sha256", ids->experts_sha);
    cJSON_AddStringToObject(model, "experts_index_sha256", ids->idx_sha);
    cJSON_AddNumberToObject(model, "dense_tensor_bytes", (double)ids->dense_tensor_bytes);
    cJSON_AddNumberToObject(model, "vram_dense_bytes", (double)ids->vram_dense_bytes);
    cJSON_AddNumberToObject(model, "vram_reserve_bytes", (double)ids->vram_reserve_bytes);
    /* what --vram-budget pays before any expert slot */
    cJSON_AddNumberToObject(model, "vram_fixed_bytes", (double)(ids->vram_dense_bytes + ids->vram_reserve_bytes));
    cJSON_AddItemToObject(root, "model", model);
    cJSON_AddStringToObject(hot, "sha256", ids->hotlist_sha);
    cJSON_AddBoolToObject(hot, "neutral", h->neutral);
    cJSON_AddItemToObject(root, "hotlist", hot);
    add_request(root, o);
    cJSON *layers = cJSON_CreateArray();
    uint64_t tot_n[3] = {0}, tot_b[3] = {0};
    for (int l = 0; l < n; l++) {
        const struct expert_layer *L = &x->layers[l];
        for (uint32_t e = 0; e < E; e++) order[e] = e;
        rank_by.count = h->count + (size_t)l * E;
        rank_by.weight = h->weight + (size_t)l * E;
        qsort(order, E, sizeof *order, cmp_rank);
        cJSON *lo = cJSON_CreateObject(), *tier[3];
        cJSON_AddNumberToObject(lo, "layer", L->block);
        cJSON_AddBoolToObject(lo, "mtp", L->mtp);
        cJSON_AddNumberToObject(lo, "blob_bytes", (double)L->blob_bytes);
        static const char *names[3] = {"vram", "ram", "ssd"};
        for (int t = 0; t < 3; t++) cJSON_AddItemToObject(lo, names[t], tier[t] = cJSON_CreateArray());
        for (uint32_t k = 0; k < E; k++) {
            int t = k < vram[l] ? 0 : k < vram[l] + ram[l] ? 1 : 2;
            cJSON_AddItemToArray(tier[t], cJSON_CreateNumber(order[k]));
            tot_n[t]++;
            tot_b[t] += L->blob_bytes;
        }
        cJSON_AddItemToArray(layers, lo);
    }
    cJSON *totals = cJSON_CreateObject();
    cJSON_AddItemToObject(totals, "vram", tier_json(tot_n[0], tot_b[0]));
    cJSON_AddItemToObject(totals, "ram", tier_json(tot_n[1], tot_b[1]));
    cJSON_AddItemToObject(totals, "ssd", tier_json(tot_n[2], tot_b[2]));
    cJSON_AddNumberToObject(totals, "victim_cache_bytes", (double)o->victim_bytes);
    cJSON_AddItemToObject(root, "totals", totals);
    cJSON_AddItemToObject(root, "layers", layers);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    size_t len = text ? strlen(text) : 0;
    if (text && (*json = malloc(len + 2))) {
        memcpy(*json, text, len);
        memcpy(*json + len, "\n", 2);
    }
    cJSON_free(text);
    if (!*json) {
        rc = nb_errf(err, errlen, NB_ENOMEM, "out of memory");
        goto done;
    }
    char b0[32], b1[32], b2[32];
    fmt_bytes(tot_b[0], b0, sizeof b0);
    fmt_bytes(tot_b[1], b1, sizeof b1);
    fmt_bytes(tot_b[2], b2, sizeof b2);
    snprintf(summary, summary_len, "vram %llu experts (%s), ram %llu (%s), ssd %llu (%s)%s%s",
             (unsigned long long)tot_n[0], b0, (unsigned long long)tot_n[1], b1, (unsigned long long)tot_n[2], b2,
             o->arena_vram ? "; the RAM arena holds the vram tier's too" : "", h->neutral ? "; neutral hotlist: expert order" : "");
done:
    free(vram);
    free(ram);
    free(order);
    return rc;
}

static void read_budget(const cJSON *r, const char *key, uint64_t *v)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(r, key);
    if (cJSON_IsString(j) && strcmp(j->valuestring, "all") == 0) *v = BUDGET_ALL;
    else if (cJSON_IsNumber(j) && j->valuedouble >= 0) *v = (uint64_t)j->valuedouble;
}

int placement_read_opts(const char *json, struct placement_opts *o)
{
    cJSON *root = cJSON_Parse(json);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "request");
    if (!cJSON_IsObject(r)) {
        cJSON_Delete(root);
        return NB_EFORMAT;
    }
    read_budget(r, "vram_budget", &o->vram_bytes);
    read_budget(r, "ram_budget", &o->ram_bytes);
    read_budget(r, "victim_cache", &o->victim_bytes);
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(r, "vram_ctx");
    if (cJSON_IsNumber(ctx) && ctx->valuedouble >= 1 && ctx->valuedouble < 9e15) o->vram_ctx = (int64_t)ctx->valuedouble;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(r, "early_quota");
    const cJSON *ew = cJSON_GetObjectItemCaseSensitive(e, "weight"), *el = cJSON_GetObjectItemCaseSensitive(e, "layers");
    if (cJSON_IsNumber(ew)) o->early_weight = ew->valuedouble;
    if (cJSON_IsNumber(el)) o->early_layers = el->valueint;
    const cJSON *av = cJSON_GetObjectItemCaseSensitive(r, "arena_vram");
    if (cJSON_IsBool(av)) o->arena_vram = cJSON_IsTrue(av);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(r, "mtp_experts");
    if (cJSON_IsString(m)) o->mtp_first = strcmp(m->valuestring, "shared") != 0;
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(r, "ple_tier");
    if (cJSON_IsString(pt)) o->ple_ssd = strcmp(pt->valuestring, "ssd") == 0, o->ple_vram = strcmp(pt->valuestring, "vram") == 0;
    cJSON_Delete(root);
    return 0;
}
