/* sampling.c — token selection (see sampling.h).
 *
 * The candidate set is built once per call as (id, logit) pairs and narrowed
 * in place by each filter; sorting happens only when top-k/top-p/min-p need an
 * order, and only over the survivors of top-k when top-k is set, so a
 * 248k-entry row costs one pass plus a partial selection. */
#include "core/sampling/sampling.h"

#include "core/util/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cand {
    float logit;
    int32_t id;
};

struct sampler {
    struct sampling_params p;
    int32_t n_vocab;
    uint64_t rng[4];
    uint8_t *seen;      /* 1 for tokens already generated */
    struct cand *cands; /* scratch, n_vocab entries */
};

struct sampling_params sampling_defaults(bool thinking)
{
    struct sampling_params p = {0};
    p.temperature = thinking ? 1.0f : 0.7f;
    p.top_p = thinking ? 0.95f : 0.8f;
    p.top_k = 20;
    p.min_p = 0.0f;
    p.seed = 0;
    return p;
}

int sampling_validate(const struct sampling_params *p, char *err, unsigned long errlen)
{
    if (!(p->temperature >= 0.0f) || p->temperature > 100.0f)
        return nb_errf(err, errlen, NB_EINVAL, "temperature %g out of range [0, 100]", p->temperature);
    if (!(p->top_p > 0.0f) || p->top_p > 1.0f)
        return nb_errf(err, errlen, NB_EINVAL, "top_p %g out of range (0, 1]", p->top_p);
    if (!(p->min_p >= 0.0f) || p->min_p > 1.0f)
        return nb_errf(err, errlen, NB_EINVAL, "min_p %g out of range [0, 1]", p->min_p);
    if (p->top_k < 0) return nb_errf(err, errlen, NB_EINVAL, "top_k %d is negative", p->top_k);
    if (!(fabsf(p->presence_penalty) <= 2.0f))
        return nb_errf(err, errlen, NB_EINVAL, "presence_penalty %g out of range [-2, 2]", p->presence_penalty);
    return 0;
}

/* splitmix64 seeds xoshiro256**: a small, well-tested generator whose output
 * depends only on the seed. */
static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4])
{
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform double in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4]) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

void sampling_reset(sampler *s)
{
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    memset(s->seen, 0, (size_t)s->n_vocab);
}

sampler *sampling_new(const struct sampling_params *p, int32_t n_vocab)
{
    if (n_vocab <= 0) return NULL;
    sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->seen = calloc((size_t)n_vocab, 1);
    s->cands = malloc((size_t)n_vocab * sizeof *s->cands);
    if (!s->seen || !s->cands) {
        sampling_free(s);
        return NULL;
    }
    sampling_reset(s);
    return s;
}

void sampling_free(sampler *s)
{
    if (!s) return;
    free(s->seen);
    free(s->cands);
    free(s);
}

void sampling_accept(sampler *s, int32_t token)
{
    if (token >= 0 && token < s->n_vocab) s->seen[token] = 1;
}

int32_t sampling_argmax(const float *logits, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

static int cand_desc(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id; /* stable order for equal logits */
}

/* Moves the k largest candidates to the front (unordered), returns k. */
static int32_t select_top_k(struct cand *c, int32_t n, int32_t k)
{
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) { /* quickselect on descending order */
        struct cand pivot = c[(lo + hi) / 2];
        int32_t i = lo, j = hi;
        while (i <= j) {
            while (cand_desc(&c[i], &pivot) < 0) i++;
            while (cand_desc(&c[j], &pivot) > 0) j--;
            if (i <= j) {
                struct cand t = c[i];
                c[i++] = c[j];
                c[j--] = t;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
    return k;
}

int32_t sampling_sample(sampler *s, const float *logits) { return sampling_sample_masked(s, logits, NULL); }

int32_t sampling_sample_masked(sampler *s, const float *logits, const uint32_t *allowed)
{
    const struct sampling_params *p = &s->p;
    int32_t n = s->n_vocab;
    struct cand *c = s->cands;

    if (allowed) { /* the allowed ones only, in id order (so ties still go to the lowest id) */
        int32_t k = 0;
        for (int32_t w = 0; w < (n + 31) / 32; w++)
            for (uint32_t bits = allowed[w]; bits; bits &= bits - 1) { /* word by word: a mask is mostly zeros */
                const int32_t i = w * 32 + __builtin_ctz(bits);
                if (i >= n) break;
                float l = logits[i];
                if (p->presence_penalty != 0.0f && s->seen[i]) l -= p->presence_penalty;
                c[k].logit = l, c[k++].id = i;
            }
        if (!(n = k)) return -1;
    } else {
        for (int32_t i = 0; i < n; i++) {
            float l = logits[i];
            if (p->presence_penalty != 0.0f && s->seen[i]) l -= p->presence_penalty;
            c[i].logit = l;
            c[i].id = i;
        }
    }
    if (p->temperature <= 0.0f) {
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (c[i].logit > c[best].logit) best = i;
        return c[best].id;
    }
    for (int32_t i = 0; i < n; i++) c[i].logit /= p->temperature;

    if (p->top_k > 0 && p->top_k < n) n = select_top_k(c, n, p->top_k);
    qsort(c, (size_t)n, sizeof *c, cand_desc);

    /* Softmax over the survivors, in double for a stable cumulative sum. */
    double maxl = c[0].logit, sum = 0.0;
    double *prob = malloc((size_t)n * sizeof *prob);
    if (!prob) return c[0].id;
    for (int32_t i = 0; i < n; i++) sum += prob[i] = exp((double)c[i].logit - maxl);
    for (int32_t i = 0; i < n; i++) prob[i] /= sum;

    if (p->top_p < 1.0f) { /* keep the smallest prefix whose mass reaches top_p */
        double cum = 0.0;
        int32_t keep = n;
        for (int32_t i = 0; i < n; i++) {
            cum += prob[i];
            if (cum >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (p->min_p > 0.0f) { /* drop tokens below min_p × the top probability */
        int32_t keep = 1;
        while (keep < n && prob[keep] >= p->min_p * prob[0]) keep++;
        n = keep;
    }
    double total = 0.0;
    for (int32_t i = 0; i < n; i++) total += prob[i];
    double r = rng_uniform(s->rng) * total, cum = 0.0;
    int32_t pick = n - 1;
    for (int32_t i = 0; i < n; i++) {
        cum += prob[i];
        if (r < cum) {
            pick = i;
            break;
        }
    }
    int32_t id = c[pick].id;
    free(prob);
    return id;
}
