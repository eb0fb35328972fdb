/* sampling.h — picking the next token from a row of logits.
 *
 * Greedy when temperature <= 0; otherwise, in the order Hugging Face and vLLM
 * apply them: presence penalty (tokens already generated), temperature,
 * top-k, top-p (nucleus), min-p, then one draw from a seeded generator.  The
 * same seed and the same logits give the same tokens on every machine: the
 * generator is a fixed 64-bit algorithm and all arithmetic is on the host. */
#ifndef NB_SAMPLING_H
#define NB_SAMPLING_H

#include <stdbool.h>
#include <stdint.h>

struct sampling_params {
    float temperature;      /* <= 0: greedy */
    int top_k;              /* <= 0: off */
    float top_p;            /* >= 1: off */
    float min_p;            /* <= 0: off */
    float presence_penalty; /* 0: off; subtracted once from each generated token's logit */
    uint64_t seed;
};

/* Defaults of the model's GGUF for thinking on / off (MODEL.md). */
struct sampling_params sampling_defaults(bool thinking);
/* 0 or NB_EINVAL with a message naming the bad field. */
int sampling_validate(const struct sampling_params *p, char *err, unsigned long errlen);

typedef struct sampler sampler;

sampler *sampling_new(const struct sampling_params *p, int32_t n_vocab);
void sampling_free(sampler *s);
/* Records a token of the output (for the presence penalty). */
void sampling_accept(sampler *s, int32_t token);
/* Forgets the recorded output and restarts the generator from the seed. */
void sampling_reset(sampler *s);
/* Next token for this row of n_vocab logits (not modified). */
int32_t sampling_sample(sampler *s, const float *logits);
/* The same over the tokens whose bit is set in allowed ((n_vocab + 31) / 32
 * words; NULL: all): the others are out before any filter, as if their logit
 * were -inf (structured output, core/grammar).  -1 when none is allowed. */
int32_t sampling_sample_masked(sampler *s, const float *logits, const uint32_t *allowed);
/* Index of the largest logit; ties go to the lowest id. */
int32_t sampling_argmax(const float *logits, int32_t n);

#endif
