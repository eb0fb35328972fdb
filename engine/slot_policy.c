/* slot_policy.c — the adaptive slot cache's rule (slot_policy.h says it). */
#include "engine/slot_policy.h"

#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"

int gw_slot_params_check(const struct gw_slot_params *p, char *err, size_t errlen)
{
    if (p->every < 1) return nb_errf(err, errlen, NB_EINVAL, "slots.adapt_every %d: want at least 1", p->every);
    if (!(p->decay > 0 && p->decay <= 1)) return nb_errf(err, errlen, NB_EINVAL, "slots.decay %g: want (0, 1]", p->decay);
    if (p->swaps < 1) return nb_errf(err, errlen, NB_EINVAL, "slots.swaps %d: want at least 1", p->swaps);
    if (!(p->hysteresis >= 0)) return nb_errf(err, errlen, NB_EINVAL, "slots.hysteresis %g: want ≥ 0", p->hysteresis);
    return 0;
}

int gw_slot_policy_init(struct gw_slot_policy *sp, int n_layer, int n_expert, const uint8_t *resident, const int *cap,
                        const struct gw_slot_params *p, char *err, size_t errlen)
{
    memset(sp, 0, sizeof *sp);
    int rc = gw_slot_params_check(p, err, errlen);
    if (rc) return rc;
    if (n_layer < 1 || n_expert < 1) return nb_errf(err, errlen, NB_EINVAL, "slot policy: %d layers of %d experts", n_layer, n_expert);
    const size_t n = (size_t)n_layer * (size_t)n_expert;
    sp->n_layer = n_layer, sp->n_expert = n_expert, sp->p = *p;
    sp->score = calloc(n, sizeof *sp->score);
    sp->res = malloc(n);
    sp->n_res = calloc((size_t)n_layer, sizeof *sp->n_res);
    sp->cap = malloc((size_t)n_layer * sizeof *sp->cap);
    sp->order = malloc(2 * (size_t)n_expert * sizeof *sp->order);
    if (!sp->score || !sp->res || !sp->n_res || !sp->cap || !sp->order) {
        gw_slot_policy_free(sp);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    }
    for (int l = 0; l < n_layer; l++) {
        for (int e = 0; e < n_expert; e++) {
            const size_t at = (size_t)l * (size_t)n_expert + (size_t)e;
            sp->res[at] = resident[at] != 0;
            sp->n_res[l] += sp->res[at];
        }
        sp->cap[l] = cap ? cap[l] : sp->n_res[l];
        if (sp->cap[l] < sp->n_res[l] || sp->cap[l] > n_expert) {
            rc = nb_errf(err, errlen, NB_EINVAL, "slot policy: layer %d holds %d experts in %d slots", l, sp->n_res[l], sp->cap[l]);
            gw_slot_policy_free(sp);
            return rc;
        }
    }
    return 0;
}

void gw_slot_policy_free(struct gw_slot_policy *sp)
{
    free(sp->score), free(sp->res), free(sp->n_res), free(sp->cap), free(sp->order);
    memset(sp, 0, sizeof *sp);
}

void gw_slot_policy_observe(struct gw_slot_policy *sp, int layer, const int32_t *ids, int n)
{
    if (layer < 0 || layer >= sp->n_layer) return;
    double *s = sp->score + (size_t)layer * (size_t)sp->n_expert;
    if (sp->p.decay != 1.0)
        for (int e = 0; e < sp->n_expert; e++) s[e] *= sp->p.decay;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < sp->n_expert) s[ids[i]] += 1.0;
}

bool gw_slot_policy_tick(struct gw_slot_policy *sp)
{
    return ++sp->tokens % sp->p.every == 0;
}

/* Whether expert a ranks before b: hotter (hot) or colder first, then the lower id. */
static bool ranks_before(const double *s, bool hot, int a, int b)
{
    if (s[a] != s[b]) return hot ? s[a] > s[b] : s[a] < s[b];
    return a < b;
}

/* top[0 … *n) keeps the m first-ranked of the experts offered so far, in rank order: a round costs a pass over
 * the layer's experts, not a sort of them (it runs on the step's host path every adapt_every tokens). */
static void offer(int *top, int *n, int m, int e, const double *s, bool hot)
{
    int i;
    if (*n < m) i = (*n)++;
    else if (m > 0 && ranks_before(s, hot, e, top[m - 1])) i = m - 1;
    else return;
    for (; i > 0 && ranks_before(s, hot, e, top[i - 1]); i--) top[i] = top[i - 1];
    top[i] = e;
}

int gw_slot_policy_round(struct gw_slot_policy *sp, int layer, struct gw_slot_swap *out, int max)
{
    if (layer < 0 || layer >= sp->n_layer || max < 1) return 0;
    const int E = sp->n_expert;
    const size_t base = (size_t)layer * (size_t)E;
    const double *s = sp->score + base;
    uint8_t *res = sp->res + base;
    int *ord = sp->order, n_hot = 0, n_out = 0;
    for (int e = 0; e < E; e++)
        if (!res[e] && s[e] > 0 && (!sp->can_in || sp->can_in[base + e])) offer(ord, &n_hot, sp->p.swaps, e, s, true);
    int h = 0;
    for (; h < n_hot && sp->n_res[layer] < sp->cap[layer] && n_out < max; h++) { /* free slots first */
        res[ord[h]] = 1, sp->n_res[layer]++;
        out[n_out++] = (struct gw_slot_swap){layer, -1, ord[h]};
    }
    /* the candidates left, kept at the front; the residents that may leave after them, coldest first */
    int *hot = sp->order + E, nh = 0;
    for (int i = h; i < n_hot; i++) hot[nh++] = ord[i];
    int n_cold = 0;
    for (int e = 0; e < E && nh > 0; e++)
        if (res[e] && (!sp->can_out || sp->can_out[base + e])) offer(ord, &n_cold, nh, e, s, false);
    for (int i = 0; i < nh && i < n_cold && n_out < max; i++) {
        const int in = hot[i], old = ord[i];
        if (!(s[in] > s[old] + sp->p.hysteresis)) break;
        res[old] = 0, res[in] = 1;
        out[n_out++] = (struct gw_slot_swap){layer, old, in};
    }
    return n_out;
}

void gw_slot_count(const int32_t *routes, size_t stride, int n_layer, int n_expert, int P, const int32_t *slot_of,
                   const uint8_t *layout, uint64_t out[3])
{
    for (int l = 0; l < n_layer; l++)
        for (int p = 0; p < P; p++) {
            const int e = routes[(size_t)l * stride + (size_t)p];
            if (e < 0 || e >= n_expert) continue;
            const size_t at = (size_t)l * (size_t)n_expert + (size_t)e;
            out[0]++, out[1] += slot_of[at] >= 0, out[2] += layout[at] != 0;
        }
}

int gw_slot_policy_feed(struct gw_slot_policy *sp, const int32_t *routes, size_t stride, int T, int k,
                        const struct gw_slot_round_ops *ops, struct gw_slot_swap *scratch)
{
    int rc = 0;
    for (int t = 0; t < T && rc == 0; t++) {
        for (int l = 0; l < sp->n_layer; l++) gw_slot_policy_observe(sp, l, routes + (size_t)l * stride + (size_t)t * k, k);
        if (!gw_slot_policy_tick(sp)) continue;
        ops->maps(ops->ctx);
        for (int l = 0; l < sp->n_layer && rc == 0; l++) {
            const int room = ops->room(ops->ctx), max = room < sp->p.swaps ? room : sp->p.swaps;
            const int n = gw_slot_policy_round(sp, l, scratch, max);
            for (int i = 0; i < n && rc == 0; i++) rc = ops->apply(ops->ctx, &scratch[i]);
        }
    }
    return rc;
}
