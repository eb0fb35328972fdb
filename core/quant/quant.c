/* quant.c — the type-traits table and run-time kernel selection.
 *
 * One row per format (see quant.h).  Sizes are ggml's; the function pointers
 * are filled once by quant_init() from the per-file kernel tables: decoders
 * and quantizers from the scalar reference (quant_ref*.c), each dot from the
 * best ISA file that has one for the type and that this CPU runs. */
#include "core/quant/quant.h"
#include "core/quant/quant_impl.h"

#include <cpuid.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <strings.h>

/* A row: name, blck_size, type_size, is_quantized, vec_dot_type (the
 * kernels are filled in by quant_init).  Sizes come from quant_blocks.h. */
#define PLAIN(t, name, ctype, dot) [t] = {name, t, 1, sizeof(ctype), false, NULL, NULL, NULL, dot}
#define BLOCKS(t, name, qk, block, dot) [t] = {name, t, qk, sizeof(block), true, NULL, NULL, NULL, dot}

static struct quant_traits traits[QT_COUNT] = {
    PLAIN(QT_F32, "f32", float, QT_F32),
    PLAIN(QT_F16, "f16", uint16_t, QT_F32),
    PLAIN(QT_BF16, "bf16", uint16_t, QT_F32),
    PLAIN(QT_F64, "f64", double, QT_F64),
    PLAIN(QT_I8, "i8", int8_t, QT_I8),
    PLAIN(QT_I16, "i16", int16_t, QT_I16),
    PLAIN(QT_I32, "i32", int32_t, QT_I32),
    PLAIN(QT_I64, "i64", int64_t, QT_I64),
    BLOCKS(QT_Q4_0, "q4_0", QK_SMALL, block_q4_0, QT_Q8_0),
    BLOCKS(QT_Q4_1, "q4_1", QK_SMALL, block_q4_1, QT_Q8_1),
    BLOCKS(QT_Q5_0, "q5_0", QK_SMALL, block_q5_0, QT_Q8_0),
    BLOCKS(QT_Q5_1, "q5_1", QK_SMALL, block_q5_1, QT_Q8_1),
    BLOCKS(QT_Q8_0, "q8_0", QK_SMALL, block_q8_0, QT_Q8_0),
    BLOCKS(QT_Q8_1, "q8_1", QK_SMALL, block_q8_1, QT_Q8_1),
    BLOCKS(QT_Q2_K, "q2_K", QK_K, block_q2_K, QT_Q8_K),
    BLOCKS(QT_Q3_K, "q3_K", QK_K, block_q3_K, QT_Q8_K),
    BLOCKS(QT_Q4_K, "q4_K", QK_K, block_q4_K, QT_Q8_K),
    BLOCKS(QT_Q5_K, "q5_K", QK_K, block_q5_K, QT_Q8_K),
    BLOCKS(QT_Q6_K, "q6_K", QK_K, block_q6_K, QT_Q8_K),
    BLOCKS(QT_Q8_K, "q8_K", QK_K, block_q8_K, QT_Q8_K),
    BLOCKS(QT_IQ4_NL, "iq4_nl", QK_SMALL, block_iq4_nl, QT_Q8_0),
    BLOCKS(QT_IQ4_XS, "iq4_xs", QK_K, block_iq4_xs, QT_Q8_K),
    BLOCKS(QT_IQ2_XXS, "iq2_xxs", QK_K, block_iq2_xxs, QT_Q8_K),
    BLOCKS(QT_IQ2_XS, "iq2_xs", QK_K, block_iq2_xs, QT_Q8_K),
    BLOCKS(QT_IQ2_S, "iq2_s", QK_K, block_iq2_s, QT_Q8_K),
    BLOCKS(QT_IQ3_XXS, "iq3_xxs", QK_K, block_iq3_xxs, QT_Q8_K),
    BLOCKS(QT_IQ3_S, "iq3_s", QK_K, block_iq3_s, QT_Q8_K),
    BLOCKS(QT_IQ1_S, "iq1_s", QK_K, block_iq1_s, QT_Q8_K),
    BLOCKS(QT_IQ1_M, "iq1_m", QK_K, block_iq1_m, QT_Q8_K),
    BLOCKS(QT_TQ1_0, "tq1_0", QK_K, block_tq1_0, QT_Q8_K),
    BLOCKS(QT_TQ2_0, "tq2_0", QK_K, block_tq2_0, QT_Q8_K),
    BLOCKS(QT_MXFP4, "mxfp4", QK_SMALL, block_mxfp4, QT_Q8_0),
    BLOCKS(QT_NVFP4, "nvfp4", QK_NVFP4, block_nvfp4, QT_Q8_0),
    BLOCKS(QT_Q1_0, "q1_0", QK1_0, block_q1_0, QT_Q8_0),
    BLOCKS(QT_Q2_0, "q2_0", QK2_0, block_q2_0, QT_Q8_0),
};

static enum quant_isa active_isa = QUANT_ISA_SCALAR;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* The kernel files' tables, per role (and ISA), merged by quant_init into
 * the flat tables below: a type has its kernel in one file of each role.
 * NULL ends a list. */
static const quant_to_float_fn *const to_float_files[] = {quant_ref_to_float, quant_lowbit_to_float,
                                                          quant_iq_to_float, NULL};
static const quant_from_float_fn *const from_float_files[] = {quant_ref_from_float, quant_lowbit_from_float,
                                                              quant_iq_from_float, NULL};
static const quant_vec_dot_fn *const dot_files[QUANT_ISA_COUNT][4] = {
    [QUANT_ISA_SCALAR] = {quant_ref_vec_dot, quant_lowbit_vec_dot, quant_iq_vec_dot, NULL},
    [QUANT_ISA_AVX2] = {quant_avx2_vec_dot, quant_lowbit_avx2_vec_dot, quant_iq_avx2_vec_dot, NULL},
    [QUANT_ISA_AVX512] = {quant_avx512_vec_dot, quant_lowbit_avx512_vec_dot, quant_iq_avx512_vec_dot, NULL},
};
/* fp32-activation dots per ISA; the scalar path is the caller's to_float. */
static const quant_dot_f32_fn *const f32_dot_files[QUANT_ISA_COUNT][2] = {
    [QUANT_ISA_AVX2] = {quant_avx2_dot_f32, NULL},
    [QUANT_ISA_AVX512] = {quant_avx512_dot_f32, NULL},
};

static quant_vec_dot_fn isa_dots[QUANT_ISA_COUNT][QT_COUNT];
static quant_dot_f32_fn isa_f32_dots[QUANT_ISA_COUNT][QT_COUNT];
static quant_dot_f32_fn f32_dots[QT_COUNT];

/* The first kernel of type t in a NULL-terminated list of tables. */
#define FIRST_OF(files, t, out)                                   \
    do {                                                          \
        for (int f_ = 0; (files)[f_] && !(out); f_++) (out) = (files)[f_][t]; \
    } while (0)

/* F16C (CPUID leaf 1, ECX bit 29): not every compiler's
 * __builtin_cpu_supports knows its name. */
static bool cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

bool quant_isa_supported(enum quant_isa isa)
{
    __builtin_cpu_init();
    switch (isa) {
    case QUANT_ISA_SCALAR: return true;
    /* Every flag the Makefile gives the file: the compiler may use any of them. */
    case QUANT_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    case QUANT_ISA_AVX512:
        return quant_isa_supported(QUANT_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni") &&
               __builtin_cpu_supports("avx512bf16");
    default: return false;
    }
}

static void init_kernels(void)
{
    quant_grids_init(); /* the IQ codebooks the IQ kernels read */
    for (int isa = QUANT_ISA_COUNT - 1; isa > QUANT_ISA_SCALAR; isa--) {
        if (quant_isa_supported((enum quant_isa)isa)) {
            active_isa = (enum quant_isa)isa;
            break;
        }
    }
    for (int t = 0; t < QT_COUNT; t++) {
        if (traits[t].name == NULL) continue;
        FIRST_OF(to_float_files, t, traits[t].to_float);
        FIRST_OF(from_float_files, t, traits[t].from_float);
        if (active_isa == QUANT_ISA_AVX512 && quant_avx512_act_from_float[t]) traits[t].from_float = quant_avx512_act_from_float[t];
        for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
            FIRST_OF(dot_files[isa], t, isa_dots[isa][t]);
            if (isa > QUANT_ISA_SCALAR) FIRST_OF(f32_dot_files[isa], t, isa_f32_dots[isa][t]);
        }
        /* A type may lack a kernel in the best ISA: fall back one at a time. */
        for (int isa = active_isa; isa >= QUANT_ISA_SCALAR && traits[t].vec_dot == NULL; isa--)
            if (quant_isa_supported((enum quant_isa)isa)) traits[t].vec_dot = isa_dots[isa][t];
        for (int isa = active_isa; isa > QUANT_ISA_SCALAR && f32_dots[t] == NULL; isa--)
            if (quant_isa_supported((enum quant_isa)isa)) f32_dots[t] = isa_f32_dots[isa][t];
    }
}

enum quant_isa quant_init(void)
{
    pthread_once(&init_once, init_kernels);
    return active_isa;
}

enum quant_isa quant_isa_active(void) { return quant_init(); }

const char *quant_isa_name(enum quant_isa isa)
{
    switch (isa) {
    case QUANT_ISA_SCALAR: return "scalar";
    case QUANT_ISA_AVX2: return "avx2";
    case QUANT_ISA_AVX512: return "avx512-vnni";
    default: return "?";
    }
}

const struct quant_traits *quant_traits_of(enum quant_type t)
{
    if ((unsigned)t >= QT_COUNT || traits[t].name == NULL) return NULL;
    quant_init();
    return &traits[t];
}

quant_vec_dot_fn quant_vec_dot_isa(enum quant_type t, enum quant_isa isa)
{
    if ((unsigned)t >= QT_COUNT || (unsigned)isa >= QUANT_ISA_COUNT || !quant_isa_supported(isa)) return NULL;
    quant_init();
    return isa_dots[isa][t];
}

quant_from_float_fn quant_from_float_isa(enum quant_type t, enum quant_isa isa)
{
    if ((unsigned)t >= QT_COUNT || (unsigned)isa >= QUANT_ISA_COUNT || !quant_isa_supported(isa)) return NULL;
    quant_init();
    if (isa == QUANT_ISA_AVX512) return quant_avx512_act_from_float[t];
    if (isa != QUANT_ISA_SCALAR) return NULL;
    quant_from_float_fn f = NULL;
    FIRST_OF(from_float_files, t, f);
    return f;
}

quant_dot_f32_fn quant_dot_f32(enum quant_type t)
{
    if ((unsigned)t >= QT_COUNT) return NULL;
    quant_init();
    return f32_dots[t];
}

quant_dot_f32_fn quant_dot_f32_isa(enum quant_type t, enum quant_isa isa)
{
    if ((unsigned)t >= QT_COUNT || (unsigned)isa >= QUANT_ISA_COUNT || !quant_isa_supported(isa)) return NULL;
    quant_init();
    return isa_f32_dots[isa][t];
}

int quant_type_from_name(const char *name)
{
    for (int t = 0; t < QT_COUNT; t++)
        if (traits[t].name && strcasecmp(traits[t].name, name) == 0) return t;
    return -1;
}

const char *quant_type_name(enum quant_type t)
{
    if ((unsigned)t >= QT_COUNT || traits[t].name == NULL) return "?";
    return traits[t].name;
}

size_t quant_row_size(enum quant_type t, int64_t n)
{
    if ((unsigned)t >= QT_COUNT || traits[t].name == NULL || n < 0) return 0;
    if (n % traits[t].blck_size) return 0;
    return (size_t)(n / traits[t].blck_size) * traits[t].type_size;
}

float quant_f16_to_f32(uint16_t h) { return quant_half_to_float(h); }

uint16_t quant_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to inf */
    if (ax < 0x38800000u) { /* subnormal or zero in half: round to nearest even */
        float a;
        memcpy(&a, &ax, 4);
        float scaled = a * 16777216.0f; /* 2^24: units of the smallest subnormal */
        uint32_t q = (uint32_t)nearbyintf(scaled);
        return (uint16_t)(sign | q);
    }
    uint32_t mant = ax & 0x7fffff, e = (ax >> 23) - 112;
    uint32_t h = (e << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* carry into exponent is correct */
    return (uint16_t)(sign | h);
}

float quant_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t quant_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64); /* quiet nan */
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}
