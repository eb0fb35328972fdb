/* slots.c — the adaptive slot cache on the CPU reference (issue 15 item 3).
 *
 * The CPU backend has no slots to copy into: with a remote hook, its "VRAM
 * tier" is the map of experts it computes itself (the hook's `local`).  With
 * gw_backend_params.slots_adaptive that map follows the routes by
 * engine/slot_policy.h's rule — the decode steps' ids counted, a round every
 * slots.adapt_every tokens swapping the hottest remote experts in for the
 * coldest local ones, only among those the remote side holds too
 * (slots_movable: the RAM arena's) — so the gpu-worker's adaptive cache,
 * its counters and its exactness (the output identical either way) run end
 * to end on a machine without a GPU.  Nothing is copied: a swap flips two
 * bytes of the map, which the next eval uses; bytes and waited stay 0. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"
#include "engine/cpu/cpu.h"

int cpu_slots_init(struct cpu_backend *be, const struct gw_backend_params *p, char *err, size_t errlen)
{
    be->adapt = p && p->slots_adaptive;
    if (!be->adapt) return 0;
    be->adapt_p = p->slots.every ? p->slots
                                 : (struct gw_slot_params){GW_SLOT_EVERY, GW_SLOT_DECAY, GW_SLOT_SWAPS, GW_SLOT_HYSTERESIS};
    int rc = gw_slot_params_check(&be->adapt_p, err, errlen);
    if (rc) return rc;
    const struct model_hparams *hp = &be->base.model->hp;
    const size_t n = (size_t)(hp->n_layer + hp->n_nextn) * (size_t)hp->n_expert;
    if (p->slots_movable && !(be->movable = malloc(n))) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    if (be->movable) memcpy(be->movable, p->slots_movable, n);
    return 0;
}

static void drop(struct cpu_backend *be)
{
    if (be->pol) gw_slot_policy_free(be->pol);
    free(be->pol), free(be->local), free(be->slot_of), free(be->routes), free(be->swaps);
    be->pol = NULL, be->local = NULL, be->slot_of = NULL, be->routes = NULL, be->swaps = NULL, be->adapt_of = NULL;
}

void cpu_slots_free(struct cpu_backend *be)
{
    drop(be);
    free(be->movable);
    be->movable = NULL;
}

int cpu_slots_begin(struct cpu_backend *be)
{
    const struct gw_moe_remote *r = &be->base.remote;
    if (!be->adapt || !r->fn) return drop(be), 0;
    if (be->pol && be->adapt_of == r->local) return 0;
    drop(be); /* a new hook map: start from it */
    const struct model_hparams *hp = &be->base.model->hp;
    const int L = hp->n_layer, E = hp->n_expert;
    const size_t n_all = (size_t)(L + hp->n_nextn) * (size_t)E, n = (size_t)L * (size_t)E;
    be->pol = calloc(1, sizeof *be->pol);
    be->local = malloc(n_all);
    be->slot_of = malloc(n * sizeof *be->slot_of);
    be->routes = calloc((size_t)L * GW_SLOT_ROWS * (size_t)hp->n_expert_used, sizeof *be->routes);
    be->swaps = malloc((size_t)be->adapt_p.swaps * sizeof *be->swaps);
    if (!be->pol || !be->local || !be->slot_of || !be->routes || !be->swaps) return drop(be), NB_ENOMEM;
    memcpy(be->local, r->local, n_all);
    for (size_t i = 0; i < n; i++) be->slot_of[i] = be->local[i] ? 0 : -1;
    char err[256];
    int rc = gw_slot_policy_init(be->pol, L, E, be->local, NULL, &be->adapt_p, err, sizeof err);
    if (rc) {
        free(be->pol), be->pol = NULL;
        return drop(be), rc;
    }
    be->pol->can_in = be->pol->can_out = be->movable; /* NULL would mean any: none moves without it */
    be->remote = *r, be->remote.local = be->local, be->adapt_of = r->local;
    return 0;
}

static void no_maps(void *ctx) { (void)ctx; }
static int room(void *ctx)
{
    const struct cpu_backend *be = ctx;
    return be->movable ? INT_MAX : 0;
}
static int apply(void *ctx, const struct gw_slot_swap *sw)
{
    struct cpu_backend *be = ctx;
    const size_t E = (size_t)be->base.model->hp.n_expert, at = (size_t)sw->layer * E;
    if (sw->out >= 0) be->local[at + (size_t)sw->out] = 0, be->slot_of[at + (size_t)sw->out] = -1;
    be->local[at + (size_t)sw->in] = 1, be->slot_of[at + (size_t)sw->in] = 0;
    __atomic_add_fetch(&be->base.slot_stats.swaps, 1, __ATOMIC_RELAXED);
    return 0;
}

int cpu_slots_end(struct cpu_backend *be, int T)
{
    if (!be->pol || T > GW_SLOT_ROWS) return 0;
    const struct model_hparams *hp = &be->base.model->hp;
    const size_t per = (size_t)GW_SLOT_ROWS * (size_t)hp->n_expert_used;
    uint64_t n[3] = {0, 0, 0};
    gw_slot_count(be->routes, per, hp->n_layer, hp->n_expert, T * hp->n_expert_used, be->slot_of, be->adapt_of, n);
    gw_slot_stats_add(&be->base.slot_stats, n);
    const struct gw_slot_round_ops ops = {be, no_maps, room, apply};
    return gw_slot_policy_feed(be->pol, be->routes, per, T, hp->n_expert_used, &ops, be->swaps);
}
