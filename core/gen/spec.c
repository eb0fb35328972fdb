/* spec.c — acceptance levels, a request's counters, --spec auto (spec.h). */
#include "core/gen/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct spec_level levels[2] = {
    {4, 10, 0.20}, /* level 1 */
    {1, 3, 0.80},  /* level 2 */
};

const struct spec_level *spec_level(int level) { return level == 1 || level == 2 ? &levels[level - 1] : NULL; }

bool spec_level_admits(const struct spec_level *l, const float *row, int32_t n_vocab, float temperature, int32_t draft,
                       double *ratio, int *rank)
{
    if (draft < 0 || draft >= n_vocab) return false;
    const float ld = row[draft];
    float top = row[0];
    int r = 1;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (row[i] > top) top = row[i];
        if (row[i] > ld || (row[i] == ld && i < draft)) r++;
    }
    const double t = temperature > 0 ? temperature : 1.0, q = exp(((double)ld - (double)top) / t);
    if (ratio) *ratio = q;
    if (rank) *rank = r;
    return l && isfinite(ld) && r <= l->top_k && q >= l->min_ratio;
}

void spec_stats_add(struct spec_stats *s, int drafted, int accepted, int tokens, int nongreedy)
{
    s->passes++, s->tokens += tokens, s->drafted += drafted, s->accepted += accepted, s->nongreedy += nongreedy;
    for (int i = 0; i < drafted && i < SPEC_MAX_POS; i++) s->drafted_at[i]++, s->accepted_at[i] += i < accepted;
    if (s->n_traj < SPEC_TRAJ_MAX) s->traj[s->n_traj] = (unsigned char)drafted;
    s->n_traj++;
}

void spec_stats_merge(struct spec_stats *into, const struct spec_stats *s)
{
    into->passes += s->passes, into->tokens += s->tokens, into->drafted += s->drafted, into->accepted += s->accepted;
    into->nongreedy += s->nongreedy, into->handoff_rows += s->handoff_rows, into->rejections += s->rejections;
    for (int i = 0; i < 3; i++) into->cases[i] += s->cases[i];
    for (int i = 0; i < SPEC_MAX_POS; i++) into->drafted_at[i] += s->drafted_at[i], into->accepted_at[i] += s->accepted_at[i];
    for (int i = 0; i < SPEC_SRC_N; i++) into->by_src[i] += s->by_src[i];
    for (long long i = 0; i < s->n_traj && i < SPEC_TRAJ_MAX; i++)
        if (into->n_traj + i < SPEC_TRAJ_MAX) into->traj[into->n_traj + i] = s->traj[i];
    into->n_traj += s->n_traj;
}

char *spec_stats_trajectory(const struct spec_stats *s, char *buf, size_t n)
{
    if (!n) return buf;
    buf[0] = 0;
    size_t at = 0;
    const long long kept = s->n_traj < SPEC_TRAJ_MAX ? s->n_traj : SPEC_TRAJ_MAX;
    long long i = 0;
    for (; i < kept && at + 12 < n; i++) at += (size_t)snprintf(buf + at, n - at, i ? " %d" : "%d", s->traj[i]);
    if (i < s->n_traj && at + 5 <= n) snprintf(buf + at, n - at, at ? " …" : "…"); /* " …" is 4 bytes */
    return buf;
}

int spec_coverage_parse(const char *s, float *tau)
{
    if (!strcmp(s, "off")) return *tau = 0, 0;
    if (!strcmp(s, "on")) return *tau = SPEC_COVERAGE_ON, 0;
    char *end;
    const double v = strtod(s, &end);
    if (end == s || *end || !(v > 0 && v <= 1)) return -1;
    *tau = (float)v;
    return 0;
}

int spec_case(int n, int acc, const uint8_t *handoff)
{
    if (n <= 0) return -1;
    return acc >= n ? SPEC_CASE_A : handoff && handoff[acc] ? SPEC_CASE_B : SPEC_CASE_C;
}

int spec_stats_case(struct spec_stats *s, int n, int acc, const uint8_t *handoff)
{
    for (int i = 0; handoff && i <= n; i++) s->handoff_rows += handoff[i] != 0;
    const int c = spec_case(n, acc, handoff);
    if (c >= 0) s->cases[c]++;
    return c;
}

const char *spec_src_name(int src) { return src == SPEC_SRC_MTP ? "mtp" : src == SPEC_SRC_LOOKUP ? "lookup" : "oracle"; }

double spec_auto_rate(const struct spec_auto *a, int src, int n)
{
    if (src < 0 || src > 1 || a->passes[src] < 2 || a->seconds[src] <= 0) return -1;
    const double acc = a->drafted[src] ? (double)a->accepted[src] / (double)a->drafted[src] : 0;
    return (1.0 + acc * n) / (1e3 * a->seconds[src] / (double)a->passes[src]);
}

int spec_auto_pick(const struct spec_auto *a, int n_lookup, int n_mtp)
{
    if (n_lookup <= 0) return SPEC_SRC_MTP; /* nothing to look up: a lookup pass would be a plain decode step */
    if (a->passes[SPEC_SRC_LOOKUP] < 2) return SPEC_SRC_LOOKUP;
    if (a->passes[SPEC_SRC_MTP] < 2) return SPEC_SRC_MTP;
    for (int s = 0; s < 2; s++)
        if (a->pass - a->last[s] >= SPEC_AUTO_PROBE) return s; /* not tried for a while: once more */
    return spec_auto_rate(a, SPEC_SRC_LOOKUP, n_lookup) > spec_auto_rate(a, SPEC_SRC_MTP, n_mtp) ? SPEC_SRC_LOOKUP : SPEC_SRC_MTP;
}

void spec_auto_update(struct spec_auto *a, int src, int drafted, int accepted, double seconds)
{
    if (src < 0 || src > 1) return;
    a->passes[src]++, a->drafted[src] += drafted, a->accepted[src] += accepted, a->seconds[src] += seconds;
    a->last[src] = a->pass++;
}
