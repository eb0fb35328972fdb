/* rng.h — the tests' random numbers: splitmix64 from a fixed seed, so that a
 * failure reproduces.  Header-only (each test binary gets its own state);
 * used by tests/core/test_quant.c and tests/ggml/ggml_oracle.c, whose
 * inputs are drawn from it.  Changing a formula here changes every input
 * those tests draw. */
#ifndef NB_TEST_RNG_H
#define NB_TEST_RNG_H

#include <math.h>
#include <stdint.h>

static uint64_t rng_state = 1;

static inline void rng_seed(uint64_t s) { rng_state = s * 0x9e3779b97f4a7c15ull + 1; }

static inline uint64_t rng_u64(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* [0, 1), 24 bits. */
static inline float rng_uniform(void) { return (float)(rng_u64() >> 40) / 16777216.0f; }

/* Standard normal (Box-Muller). */
static inline float rng_normal(void)
{
    float u = rng_uniform() + 1e-7f, v = rng_uniform();
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

#endif
