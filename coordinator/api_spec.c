/* api_spec.c — speculative decoding's counters as JSON (issue 16's faces):
 * a response's timings.speculative, /api/status's and nebulactl stats'
 * totals.  A leaf: cJSON and core/gen/spec.h only. */
#include "coordinator/api.h"

cJSON *api_spec_json(const struct spec_stats *s, bool windows)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "passes", (double)s->passes);
    cJSON_AddNumberToObject(o, "tokens", (double)s->tokens);
    cJSON_AddNumberToObject(o, "tokens_per_pass", s->passes ? (double)s->tokens / (double)s->passes : 0);
    cJSON_AddNumberToObject(o, "drafted", (double)s->drafted);
    cJSON_AddNumberToObject(o, "accepted", (double)s->accepted);
    cJSON_AddNumberToObject(o, "acceptance", s->drafted ? (double)s->accepted / (double)s->drafted : 0);
    cJSON_AddNumberToObject(o, "nongreedy_accepted", (double)s->nongreedy);
    int n = 0;
    while (n < SPEC_MAX_POS && s->drafted_at[n]) n++;
    cJSON *d = cJSON_AddArrayToObject(o, "drafted_by_position"), *a = cJSON_AddArrayToObject(o, "accepted_by_position");
    cJSON *r = cJSON_AddArrayToObject(o, "acceptance_by_position");
    for (int i = 0; i < n; i++) {
        cJSON_AddItemToArray(d, cJSON_CreateNumber((double)s->drafted_at[i]));
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)s->accepted_at[i]));
        cJSON_AddItemToArray(r, cJSON_CreateNumber((double)s->accepted_at[i] / (double)s->drafted_at[i]));
    }
    cJSON *src = cJSON_AddObjectToObject(o, "drafters");
    cJSON_AddNumberToObject(src, "mtp", (double)s->by_src[SPEC_SRC_MTP]);
    cJSON_AddNumberToObject(src, "lookup", (double)s->by_src[SPEC_SRC_LOOKUP]);
    if (s->cases[SPEC_CASE_A] + s->cases[SPEC_CASE_B] + s->cases[SPEC_CASE_C] + s->handoff_rows) { /* coverage mode ran */
        cJSON *cv = cJSON_AddObjectToObject(o, "coverage");
        cJSON_AddNumberToObject(cv, "case_a", (double)s->cases[SPEC_CASE_A]);
        cJSON_AddNumberToObject(cv, "case_b", (double)s->cases[SPEC_CASE_B]);
        cJSON_AddNumberToObject(cv, "case_c", (double)s->cases[SPEC_CASE_C]);
        cJSON_AddNumberToObject(cv, "handoff_rows", (double)s->handoff_rows);
    }
    if (windows) { /* the trajectory: each window's drafts, the first SPEC_TRAJ_MAX */
        cJSON *w = cJSON_AddArrayToObject(o, "windows");
        for (long long i = 0; i < s->n_traj && i < SPEC_TRAJ_MAX; i++) cJSON_AddItemToArray(w, cJSON_CreateNumber(s->traj[i]));
    }
    return o;
}
