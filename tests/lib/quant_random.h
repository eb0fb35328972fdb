/* quant_random.h — random valid blocks of every quant format, for the
 * tests of core/quant (tests/core/test_quant.c, test_quant_f32.c): random
 * bytes everywhere, then each fp16 scale (at ggml's offset for the format)
 * replaced by an ordinary finite one, so every block decodes to finite
 * values and every code, index and sign bit is exercised.  Draws from
 * tests/lib/rng.h (fixed seeds: failures reproduce). */
#ifndef NB_TEST_QUANT_RANDOM_H
#define NB_TEST_QUANT_RANDOM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/quant/quant.h"
#include "tests/lib/rng.h"

/* fp16 of ±[0.05, 2): a finite, ordinary scale for a random block. */
static inline uint16_t random_scale(void)
{
    float v = 0.05f + 1.95f * rng_uniform();
    return quant_f32_to_f16(rng_u64() & 1 ? -v : v);
}

static inline void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* Byte offsets of the fp16 scales in each block (ggml's layouts). */
static inline void random_block(enum quant_type t, uint8_t *b, size_t size)
{
    for (size_t i = 0; i < size; i++) b[i] = (uint8_t)rng_u64();
    switch (t) {
    case QT_F16: put16(b, quant_f32_to_f16(rng_normal())); break;
    case QT_BF16: put16(b, quant_f32_to_bf16(rng_normal())); break;
    case QT_F32: { float f = rng_normal(); memcpy(b, &f, 4); break; }
    case QT_Q4_1: case QT_Q5_1: put16(b, random_scale()); put16(b + 2, random_scale()); break; /* d, m */
    case QT_Q4_K: case QT_Q5_K: put16(b, random_scale()); put16(b + 2, random_scale()); break; /* d, dmin */
    case QT_Q6_K: put16(b + 208, random_scale()); break;                           /* d is last */
    case QT_Q2_K: put16(b + 80, random_scale()); put16(b + 82, random_scale()); break; /* d, dmin last */
    case QT_Q3_K: put16(b + 108, random_scale()); break;
    case QT_TQ1_0: put16(b + 52, random_scale()); break;
    case QT_TQ2_0: put16(b + 64, random_scale()); break;
    case QT_MXFP4: b[0] = (uint8_t)(120 + rng_u64() % 16); break;                 /* e: 2^-8 .. 2^7 */
    case QT_NVFP4: break;                                                          /* every UE4M3 byte is finite */
    case QT_IQ1_M: { /* the fp16 d is the top nibbles of the four scale words */
        uint16_t d = random_scale(), w[4];
        memcpy(w, b + 48, 8);
        for (int k = 0; k < 4; k++) w[k] = (uint16_t)((w[k] & 0x0fff) | ((d >> (4 * k)) & 15) << 12);
        memcpy(b + 48, w, 8);
        break;
    }
    default: put16(b, random_scale()); break;                                      /* d is first */
    }
}

#endif
