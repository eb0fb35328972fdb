/* ggml_oracle.c — Nebula's quant formats checked against ggml's own library.
 *
 * ggml is the definition of every format Nebula reads (GGUF files are ggml's
 * bytes), so it is the oracle: tests/tools/test_ggml_oracle.sh installs a
 * prebuilt libggml-base.so at a locked version (npm @node-llama-cpp/linux-x64,
 * tests/ggml/package-lock.json) and runs this program on it.  Nothing of
 * ggml is vendored or compiled here: the library is dlopen'd and the few
 * functions used are declared below from ggml.h's public signatures.
 *
 * For every type of ggml's enum (up to GGML_TYPE_COUNT of that version):
 *   - identity: Nebula knows the type under ggml's number with ggml's name,
 *     block size and bytes per block, and knows no type ggml lacks (the
 *     types Nebula has not implemented yet are listed in `pending`); a
 *     quantized type's dot takes the activation format ggml's CPU backend
 *     pairs it with (vec_dot_type of libggml-cpu-x64.so, beside the base
 *     library; the float formats dot with fp32 in Nebula, not with fp16);
 * and for every type Nebula decodes:
 *   - rows quantized by ggml (ggml_quantize_chunk, without and with an
 *     importance matrix, or with one only where ggml requires it) decode to
 *     the same bits with Nebula's to_float as with ggml's;
 *   - so do blocks of random bytes (every code, every scale field);
 *   - rows quantized by Nebula's own quantizer decode identically in ggml;
 *   - Nebula's dot with the activation format it pairs the type with
 *     (vec_dot_type), at every ISA this CPU runs (scalar, AVX2, AVX-512),
 *     equals ggml's dequantization of the weights dotted in double with the
 *     decoded activations, within fp32 accumulation tolerance; and the
 *     fp32-activation dots (quant_dot_f32) likewise against fp32 x;
 *   - every entry of every IQ grid decodes the same (crafted blocks).
 * Bit-identical means the same 32 bits, or NaN on both sides.  Each line
 * also prints Nebula's and ggml's quantization error, for the record.
 *
 *   ggml_oracle DIR/libggml-base.so      (DIR/libggml-cpu-x64.so beside it)
 * prints a line per type and exits 0 iff every check passed;
 *   ggml_oracle --grids DIR/libggml-base.so
 * prints the IQ grids as core/quant/quant_grids.c holds them. */
#include <dlfcn.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/quant/quant.h"
#include "tests/lib/ref_dot.h"
#include "tests/lib/rng.h"

/* ---- the ggml API used (ggml.h of llama.cpp as shipped by node-llama-cpp 3.21.1) ---- */

#define GGML_TYPE_COUNT 43 /* enum ggml_type's GGML_TYPE_COUNT in that version */

typedef void (*ggml_to_float_t)(const void *x, float *y, int64_t k);
typedef void (*ggml_from_float_t)(const float *x, void *y, int64_t k);

typedef void (*ggml_vec_dot_t)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by, int nrc);

/* ggml-cpu.h: the CPU backend's half of the traits (libggml-cpu-*.so). */
struct ggml_type_traits_cpu {
    ggml_from_float_t from_float;
    ggml_vec_dot_t vec_dot;
    int vec_dot_type; /* enum ggml_type */
    int64_t nrows;
};

struct ggml_type_traits {
    const char *type_name;
    int64_t blck_size;
    int64_t blck_size_interleave;
    size_t type_size;
    bool is_quantized;
    ggml_to_float_t to_float;
    ggml_from_float_t from_float_ref;
};

static struct {
    void *lib;
    const struct ggml_type_traits *(*get_type_traits)(int type);
    size_t (*quantize_chunk)(int type, const float *src, void *dst, int64_t start, int64_t nrows, int64_t n_per_row,
                             const float *imatrix);
    bool (*quantize_requires_imatrix)(int type);
    void (*quantize_free)(void);
    const char *(*type_name)(int type);
    size_t (*type_size)(int type);
    int64_t (*blck_size)(int type);
    size_t (*row_size)(int type, int64_t ne);
    const struct ggml_type_traits_cpu *(*get_type_traits_cpu)(int type);
} gg;

/* Types ggml decodes that Nebula does not know or cannot decode yet, so
 * that a type added to ggml can be listed while it is being written: none
 * (-1 is no type). */
static const int pending[] = {-1};

/* Activation-only formats: ggml_quantize_chunk does not take them; their
 * rows come from ggml's reference quantizer (from_float_ref). */
static bool activation_only(int t) { return t == QT_Q8_1 || t == QT_Q8_K; }

/* ---- inputs (tests/lib/rng.h: fixed seeds, a failure reproduces) ---- */

enum dist { D_NORMAL, D_OUTLIERS, D_UNIFORM, D_POSITIVE, D_TINY, D_ZEROS, D_COUNT };
static const char *const dist_name[D_COUNT] = {"normal", "outliers", "uniform", "positive", "tiny", "zeros"};

static void fill(float *x, int64_t n, enum dist d)
{
    for (int64_t i = 0; i < n; i++) {
        switch (d) {
        case D_NORMAL: x[i] = 0.02f * rng_normal(); break;
        case D_OUTLIERS: x[i] = rng_normal() * (rng_uniform() < 0.02f ? 2.0f : 0.03f); break;
        case D_UNIFORM: x[i] = 2 * rng_uniform() - 1; break;
        case D_POSITIVE: x[i] = 0.5f + rng_uniform(); break;
        case D_TINY: x[i] = 1e-6f * rng_normal(); break; /* fp16 scales go subnormal */
        default: x[i] = 0; break;
        }
    }
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- checks ---- */

static int failures;

static __attribute__((format(printf, 1, 2))) void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("FAIL: ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    failures++;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static bool same_float(float a, float b)
{
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    return x == y || (isnan(a) && isnan(b));
}

static void f32_copy(const void *x, float *y, int64_t k) { memcpy(y, x, sizeof(float) * (size_t)k); }

/* ggml's decoder of t: its type traits' to_float; for F32 (which needs none)
 * a copy; for an activation format whose traits have none, the exported
 * dequantize_row_NAME (q8_K).  NULL if ggml has none (q8_1). */
static ggml_to_float_t ggml_decoder(int t)
{
    if (t == QT_F32) return f32_copy;
    if (gg.get_type_traits(t)->to_float) return gg.get_type_traits(t)->to_float;
    char name[64];
    snprintf(name, sizeof name, "dequantize_row_%s", gg.type_name(t));
    return activation_only(t) ? (ggml_to_float_t)(uintptr_t)dlsym(gg.lib, name) : NULL;
}

/* ggml's reference quantizer of an activation format (from_float_ref, or the
 * exported quantize_row_NAME_ref). */
static ggml_from_float_t ggml_act_quantizer(int t)
{
    if (gg.get_type_traits(t)->from_float_ref) return gg.get_type_traits(t)->from_float_ref;
    char name[64];
    snprintf(name, sizeof name, "quantize_row_%s_ref", gg.type_name(t));
    return (ggml_from_float_t)(uintptr_t)dlsym(gg.lib, name);
}

/* Index of the first value where Nebula's and ggml's decodes of bytes differ, or -1. */
static int64_t decode_mismatch(enum quant_type t, const void *bytes, int64_t n, float *a, float *b)
{
    quant_traits_of(t)->to_float(bytes, a, n);
    ggml_decoder(t)(bytes, b, n);
    for (int64_t i = 0; i < n; i++)
        if (!same_float(a[i], b[i])) return i;
    return -1;
}

#define N_PER_ROW 2560 /* the model's width: a multiple of every block size */
#define N_ROWS 8
#define N_RANDOM_BLOCKS 8192
#define DOT_TOL 1e-5

struct type_report {
    int rows_checked, random_checked, own_checked, dots_checked;
    double max_dot_err; /* relative to the tolerance's magnitude */
};

static bool is_pending(int t)
{
    for (size_t i = 0; i < sizeof pending / sizeof pending[0]; i++)
        if (pending[i] == t) return true;
    return false;
}

/* The identity of type t in both libraries.  Returns whether Nebula has it. */
static bool check_identity(int t)
{
    const char *gname = gg.type_name(t);
    const bool removed = !gname || strcmp(gname, "DEPRECATED") == 0 || strncmp(gname, "TYPE_", 5) == 0;
    const struct quant_traits *q = quant_traits_of((enum quant_type)t);
    if (removed) {
        if (q) fail("type %d: ggml has no such type (%s), Nebula calls it %s", t, gname ? gname : "NULL", q->name);
        return false;
    }
    if (!q) {
        if (!is_pending(t)) fail("type %d (%s): Nebula does not know it", t, gname);
        else printf("%-8s pending: not in Nebula yet\n", gname);
        return false;
    }
    if (strcmp(q->name, gname) != 0) fail("type %d: Nebula calls it %s, ggml %s", t, q->name, gname);
    if (q->blck_size != gg.blck_size(t))
        fail("%s: block of %" PRId64 " values in Nebula, %" PRId64 " in ggml", q->name, q->blck_size, gg.blck_size(t));
    if (q->type_size != gg.type_size(t))
        fail("%s: %zu bytes per block in Nebula, %zu in ggml", q->name, q->type_size, gg.type_size(t));
    if (q->type_size == gg.type_size(t) && q->blck_size == gg.blck_size(t) &&
        quant_row_size((enum quant_type)t, N_PER_ROW) != gg.row_size(t, N_PER_ROW))
        fail("%s: row of %d values is %zu bytes in Nebula, %zu in ggml", q->name, N_PER_ROW,
             quant_row_size((enum quant_type)t, N_PER_ROW), gg.row_size(t, N_PER_ROW));
    return true;
}

/* Every dot Nebula has for t against the weight row `row` (whose ggml decode is w). */
static void check_dots(enum quant_type t, const uint8_t *row, const float *w, struct type_report *r)
{
    const struct quant_traits *q = quant_traits_of(t), *v = quant_traits_of(q->vec_dot_type);
    float x[N_PER_ROW], y[N_PER_ROW];
    uint8_t act[N_PER_ROW * 4];
    fill(x, N_PER_ROW, D_NORMAL);
    for (int i = 0; i < N_PER_ROW; i++) x[i] *= 50; /* activations of order 1 */
    if (quant_vec_dot_isa(t, QUANT_ISA_SCALAR)) {
        v->from_float(x, act, N_PER_ROW);
        ggml_to_float_t gv = ggml_decoder(q->vec_dot_type);
        (gv ? gv : v->to_float)(act, y, N_PER_ROW); /* Q8_1: only Nebula decodes it */
        double mag, want = reference_dot(w, y, N_PER_ROW, q->is_quantized, &mag);
        for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
            if (!quant_isa_supported((enum quant_isa)isa)) continue;
            quant_vec_dot_fn dot = quant_vec_dot_isa(t, (enum quant_isa)isa);
            if (!dot) continue; /* check_type reports it */
            float got;
            dot(N_PER_ROW, &got, row, act);
            double err = fabs((double)got - want) / (DOT_TOL * mag + 1e-30);
            if (err > 1 || isnan(got))
                fail("%s %s dot with %s: %.9g, ggml decode %.9g (tolerance %.3g)", q->name,
                     quant_isa_name((enum quant_isa)isa), v->name, got, want, DOT_TOL * mag);
            r->max_dot_err = fmax(r->max_dot_err, err);
            r->dots_checked++;
        }
    }
    double mag, want = reference_dot(w, x, N_PER_ROW, false, &mag);
    for (int isa = QUANT_ISA_AVX2; isa < QUANT_ISA_COUNT; isa++) {
        quant_dot_f32_fn dot = quant_dot_f32_isa(t, (enum quant_isa)isa);
        if (!dot) continue;
        float got;
        dot(N_PER_ROW, row, x, N_PER_ROW, 1, &got);
        double err = fabs((double)got - want) / (DOT_TOL * mag + 1e-30);
        if (err > 1 || isnan(got))
            fail("%s %s fp32-activation dot: %.9g, ggml decode %.9g (tolerance %.3g)", q->name,
                 quant_isa_name((enum quant_isa)isa), got, want, DOT_TOL * mag);
        r->max_dot_err = fmax(r->max_dot_err, err);
        r->dots_checked++;
    }
}

/* Rows of every distribution quantized by ggml, with imatrix (NULL: none). */
/* ---- rows quantized by ggml ----
 * For type t, distribution d and with or without an importance matrix: the
 * N_ROWS input rows (seeded by all three, so any process makes the same)
 * and ggml's quantization of them.  ggml's IQ2/IQ1 quantizers first build
 * search tables (ggml_quantize_init: several seconds each, serialised by a
 * lock), so those types are quantized in child processes started first,
 * one per table, in parallel with the other checks, into shared memory. */

static const int slow_types[][2] = {{QT_IQ1_S, QT_IQ1_M}, {QT_IQ2_S, -1}, {QT_IQ2_XS, -1}, {QT_IQ2_XXS, -1}};
#define N_SLOW (int)(sizeof slow_types / sizeof slow_types[0])

static struct {
    uint8_t *rows[QT_COUNT]; /* [variant][dist][N_ROWS rows], shared; NULL: quantize here */
    pid_t pid[N_SLOW];
    bool waited[N_SLOW];
} pre;

static void input_rows(enum quant_type t, int d, bool with_imatrix, float *x, float *imatrix)
{
    rng_seed((uint64_t)t * 1000 + (uint64_t)d * 10 + with_imatrix);
    fill(x, N_PER_ROW * N_ROWS, (enum dist)d);
    rng_seed((uint64_t)t + 77);
    for (int i = 0; i < N_PER_ROW; i++) imatrix[i] = 0.1f + rng_uniform(); /* random positive importances */
}

static size_t rows_bytes(enum quant_type t) { return quant_row_size(t, N_PER_ROW) * N_ROWS; }

/* ggml's rows into out (false if ggml wrote another size). */
static bool quantize_rows(enum quant_type t, int d, bool with_imatrix, uint8_t *out)
{
    float *x = xmalloc(sizeof(float) * N_PER_ROW * N_ROWS), imatrix[N_PER_ROW];
    input_rows(t, d, with_imatrix, x, imatrix);
    bool ok = true;
    const size_t row_bytes = quant_row_size(t, N_PER_ROW);
    if (activation_only(t))
        for (int i = 0; i < N_ROWS; i++) ggml_act_quantizer(t)(x + i * N_PER_ROW, out + i * row_bytes, N_PER_ROW);
    else
        ok = gg.quantize_chunk(t, x, out, 0, N_ROWS, N_PER_ROW, with_imatrix ? imatrix : NULL) == rows_bytes(t);
    free(x);
    return ok;
}

static void start_slow_quantizers(void)
{
    for (int k = 0; k < N_SLOW; k++) {
        for (int j = 0; j < 2 && slow_types[k][j] >= 0; j++) {
            const int t = slow_types[k][j];
            void *m = mmap(NULL, 2 * D_COUNT * rows_bytes(t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
            if (m == MAP_FAILED) {
                fprintf(stderr, "ggml_oracle: mmap: out of memory\n");
                exit(2);
            }
            pre.rows[t] = m;
        }
        fflush(stdout);
        pre.pid[k] = fork();
        if (pre.pid[k] < 0) {
            perror("ggml_oracle: fork");
            exit(2);
        }
        if (pre.pid[k] == 0) {
            for (int j = 0; j < 2 && slow_types[k][j] >= 0; j++) {
                const int t = slow_types[k][j];
                for (int v = gg.quantize_requires_imatrix(t) ? 1 : 0; v < 2; v++)
                    for (int d = 0; d < D_COUNT; d++)
                        if (!quantize_rows(t, d, v, pre.rows[t] + (size_t)(v * D_COUNT + d) * rows_bytes(t))) _exit(1);
            }
            _exit(0);
        }
    }
}

/* The rows of (t, d, variant), waiting for t's child if it has one. */
static bool ggml_rows(enum quant_type t, int d, bool with_imatrix, uint8_t *out)
{
    if (!pre.rows[t]) return quantize_rows(t, d, with_imatrix, out);
    for (int k = 0; k < N_SLOW; k++) {
        if ((slow_types[k][0] != (int)t && slow_types[k][1] != (int)t) || pre.waited[k]) continue;
        int status = 0;
        if (waitpid(pre.pid[k], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "ggml_oracle: the process quantizing %s with ggml failed\n", quant_type_name(t));
            exit(2);
        }
        pre.waited[k] = true;
    }
    memcpy(out, pre.rows[t] + (size_t)(with_imatrix * D_COUNT + d) * rows_bytes(t), rows_bytes(t));
    return true;
}

static void check_ggml_rows(enum quant_type t, bool with_imatrix, struct type_report *r)
{
    const struct quant_traits *q = quant_traits_of(t);
    const size_t row_bytes = quant_row_size(t, N_PER_ROW);
    float a[N_PER_ROW], b[N_PER_ROW];
    uint8_t *rows = xmalloc(rows_bytes(t));
    for (int d = 0; d < D_COUNT; d++) {
        if (!ggml_rows(t, d, with_imatrix, rows)) {
            fail("%s: ggml_quantize_chunk wrote another size than Nebula's row size (%zu bytes a row)", q->name, row_bytes);
            break;
        }
        for (int i = 0; i < N_ROWS; i++) {
            const uint8_t *row = rows + i * row_bytes;
            int64_t at = decode_mismatch(t, row, N_PER_ROW, a, b);
            if (at >= 0) {
                fail("%s: ggml-quantized %s row %d (%s imatrix) value %" PRId64 ": Nebula %.9g, ggml %.9g", q->name,
                     dist_name[d], i, with_imatrix ? "with" : "without", at, a[at], b[at]);
                break;
            }
            r->rows_checked++;
            if (i < 2) check_dots(t, row, b, r);
        }
    }
    free(rows);
}

/* Blocks of random bytes: every code and every bit of the scale fields. */
static void check_random_blocks(enum quant_type t, struct type_report *r)
{
    const struct quant_traits *q = quant_traits_of(t);
    const int64_t n = q->blck_size * N_RANDOM_BLOCKS;
    const size_t bytes = quant_row_size(t, n);
    uint8_t *blocks = xmalloc(bytes);
    float *a = xmalloc(sizeof(float) * (size_t)n), *b = xmalloc(sizeof(float) * (size_t)n);
    for (size_t i = 0; i < bytes; i++) blocks[i] = (uint8_t)rng_u64();
    int64_t at = decode_mismatch(t, blocks, n, a, b);
    if (at >= 0)
        fail("%s: random block %" PRId64 " value %" PRId64 ": Nebula %.9g, ggml %.9g", q->name, at / q->blck_size,
             at % q->blck_size, a[at], b[at]);
    else
        r->random_checked += N_RANDOM_BLOCKS;
    free(blocks), free(a), free(b);
}

/* Relative rms error of Nebula's quantizer and of ggml's (without an
 * importance matrix where it can do without; with the random one where it
 * cannot: an easier task) on normal data: printed, so a
 * quantizer much worse than ggml's shows (not a failure: the formats allow
 * any valid block). */
static void quantizer_errors(enum quant_type t, double *ours, double *theirs)
{
    const struct quant_traits *q = quant_traits_of(t);
    const int64_t n = N_PER_ROW * 2; /* the first two rows */
    const bool with_imatrix = gg.quantize_requires_imatrix(t);
    float *x = xmalloc(sizeof(float) * N_PER_ROW * N_ROWS), *y = xmalloc(sizeof(float) * n), imatrix[N_PER_ROW];
    uint8_t *row = xmalloc(rows_bytes(t));
    input_rows(t, D_NORMAL, with_imatrix, x, imatrix);
    double sx = 0, s1 = 0, s2 = 0;
    q->from_float(x, row, n);
    q->to_float(row, y, n);
    for (int64_t i = 0; i < n; i++) sx += (double)x[i] * x[i], s1 += (double)(x[i] - y[i]) * (x[i] - y[i]);
    if (!ggml_rows(t, D_NORMAL, with_imatrix, row)) memset(row, 0, rows_bytes(t));
    q->to_float(row, y, n);
    for (int64_t i = 0; i < n; i++) s2 += (double)(x[i] - y[i]) * (x[i] - y[i]);
    *ours = sqrt(s1 / sx), *theirs = sqrt(s2 / sx);
    free(x), free(y), free(row);
}

/* Rows quantized by Nebula decode the same in ggml. */
static void check_own_rows(enum quant_type t, struct type_report *r)
{
    const struct quant_traits *q = quant_traits_of(t);
    if (!q->from_float) return;
    const size_t row_bytes = quant_row_size(t, N_PER_ROW);
    float x[N_PER_ROW], a[N_PER_ROW], b[N_PER_ROW];
    uint8_t *row = xmalloc(row_bytes);
    /* the grid formats' quantizers search their grids: one row of each distribution */
    const bool grid = t == QT_IQ2_XXS || t == QT_IQ2_XS || t == QT_IQ2_S || t == QT_IQ3_XXS || t == QT_IQ3_S ||
                      t == QT_IQ1_S || t == QT_IQ1_M;
    for (int d = 0; d < D_COUNT; d++) {
        for (int i = 0; i < (grid ? 1 : 2); i++) {
            fill(x, N_PER_ROW, (enum dist)d);
            q->from_float(x, row, N_PER_ROW);
            int64_t at = decode_mismatch(t, row, N_PER_ROW, a, b);
            if (at >= 0) {
                fail("%s: Nebula-quantized %s row value %" PRId64 ": Nebula %.9g, ggml %.9g", q->name, dist_name[d], at,
                     a[at], b[at]);
                break;
            }
            r->own_checked++;
            if (i == 0 && !activation_only(t)) check_dots(t, row, b, r);
        }
    }
    free(row);
}

static void check_type(int t)
{
    const double t0 = seconds_now();
    const enum quant_type qt = (enum quant_type)t;
    const struct quant_traits *q = quant_traits_of(qt);
    const ggml_to_float_t g = ggml_decoder(t);
    if (!q->to_float) {
        if (g && !is_pending(t)) fail("%s: ggml decodes it, Nebula cannot", q->name);
        else printf("%-8s identity ok; %s\n", q->name, g ? "pending: Nebula cannot decode it yet" : "neither decodes it");
        return;
    }
    if (is_pending(t)) fail("%s: listed as pending but Nebula decodes it", q->name);
    for (int isa = 1; isa < QUANT_ISA_COUNT; isa++)
        if (quant_isa_supported((enum quant_isa)isa) && quant_vec_dot_isa(qt, QUANT_ISA_SCALAR) &&
            !quant_vec_dot_isa(qt, (enum quant_isa)isa))
            fail("%s: no %s dot (the scalar one exists)", q->name, quant_isa_name((enum quant_isa)isa));
    const int gdot = gg.get_type_traits_cpu(t)->vec_dot_type;
    if (q->is_quantized && quant_vec_dot_isa(qt, QUANT_ISA_SCALAR) && (int)q->vec_dot_type != gdot)
        fail("%s: Nebula dots it with %s, ggml with %s", q->name, quant_type_name(q->vec_dot_type), gg.type_name(gdot));
    if (!g) {
        printf("%-8s identity ok; ggml has no decoder, nothing to compare\n", q->name);
        return;
    }
    struct type_report r = {0};
    const int before = failures;
    if (activation_only(t) && !ggml_act_quantizer(t)) {
        printf("%-8s ggml cannot quantize it: no ggml rows\n", q->name);
    } else {
        if (!gg.quantize_requires_imatrix(t)) check_ggml_rows(qt, false, &r);
        if (!activation_only(t)) check_ggml_rows(qt, true, &r);
    }
    check_random_blocks(qt, &r);
    check_own_rows(qt, &r);
    char errs[64] = "";
    if (q->from_float && !activation_only(t) && t != QT_F32) {
        double ours, theirs;
        quantizer_errors(qt, &ours, &theirs);
        snprintf(errs, sizeof errs, "; rms error %.4f (ggml's %.4f)", ours, theirs);
    }
    printf("%-8s %s: %d ggml rows and %d random blocks decode identically, %d Nebula rows decode identically in ggml, "
           "%d dots within tolerance (worst %.2f of it)%s (%.2f s)\n",
           q->name, failures == before ? "ok" : "FAILED", r.rows_checked, r.random_checked, r.own_checked,
           r.dots_checked, r.max_dot_err, errs, seconds_now() - t0);
}

/* ---- the IQ grids (codebooks) ----
 * Each grid entry is read back through ggml's own decoder from a crafted
 * block (scale 1, sub-block scale 0, no signs, the index under test in the
 * first group) and encoded as Nebula stores it (core/quant/quant_grids.c):
 * the level index of element j in bits lbits·j.. of a uint16.  --grids
 * prints those tables (how quant_grids.c was made); the test decodes the
 * same crafted blocks with Nebula and ggml and compares them, so every
 * entry of every grid is checked, not only those random blocks hit. */
struct grid_spec {
    int type, entries, values, lbits, n_levels;
    int levels[8];      /* element value (before the block's scale) of each level index */
    float unit;         /* decoded value of one level unit with the crafted scales */
    float offset;       /* added by the decoder (IQ1's delta) */
    const char *name;
};

static const struct grid_spec grid_specs[] = {
    {16, 256, 8, 2, 3, {8, 25, 43}, 0.125f, 0, "quant_iq2xxs_codes"},
    {17, 512, 8, 2, 3, {8, 25, 43}, 0.125f, 0, "quant_iq2xs_codes"},
    {22, 1024, 8, 2, 3, {8, 25, 43}, 0.125f, 0, "quant_iq2s_codes"},
    {18, 256, 4, 3, 8, {4, 12, 20, 28, 36, 44, 52, 62}, 0.25f, 0, "quant_iq3xxs_codes"},
    {21, 512, 4, 3, 8, {1, 3, 5, 7, 9, 11, 13, 15}, 1.0f, 0, "quant_iq3s_codes"},
    {19, 2048, 8, 2, 3, {-1, 0, 1}, 1.0f, 0.125f, "quant_iq1s_codes"},
};

/* A block of g's type whose first group uses grid entry k. */
static void grid_block(const struct grid_spec *g, int k, uint8_t *b, size_t size)
{
    memset(b, 0, size);
    b[1] = 0x3c; /* fp16 d = 1 */
    switch (g->type) {
    case 16: b[2] = (uint8_t)k; break;                                  /* iq2_xxs: qs byte 0 */
    case 17: b[2] = (uint8_t)k, b[3] = (uint8_t)(k >> 8); break;        /* iq2_xs: qs[0] & 511 */
    case 22: b[2] = (uint8_t)k, b[2 + 64] = (uint8_t)(k >> 8); break;   /* iq2_s: qs[0], qh[0] bits 0-1 */
    case 18: b[2] = (uint8_t)k; break;                                  /* iq3_xxs: qs[0] */
    case 21: b[2] = (uint8_t)k, b[2 + 64] = (uint8_t)(k >> 8); break;   /* iq3_s: qs[0], qh[0] bit 0 */
    case 19: b[2] = (uint8_t)k, b[2 + 32] = (uint8_t)(k >> 8); break;   /* iq1_s: qs[0], qh[0] bits 0-2 */
    }
}

/* Entry k of grid g as ggml decodes it, encoded; -1 if a value is not one of its levels. */
static int grid_code(const struct grid_spec *g, int k)
{
    uint8_t b[512];
    float y[256];
    grid_block(g, k, b, sizeof b);
    ggml_decoder(g->type)(b, y, 256);
    int code = 0;
    for (int j = 0; j < g->values; j++) {
        int l = 0;
        while (l < g->n_levels && (float)g->levels[l] * g->unit + g->offset != y[j]) l++;
        if (l == g->n_levels) return -1;
        code |= l << (g->lbits * j);
    }
    return code;
}

static void print_grids(void)
{
    for (size_t i = 0; i < sizeof grid_specs / sizeof grid_specs[0]; i++) {
        const struct grid_spec *g = &grid_specs[i];
        printf("const uint16_t %s[%d] = {", g->name, g->entries);
        for (int k = 0; k < g->entries; k++) {
            int c = grid_code(g, k);
            if (c < 0) {
                fprintf(stderr, "%s entry %d: a value is not a level\n", g->name, k);
                exit(1);
            }
            printf("%s0x%04x,", k % 12 ? " " : "\n    ", c);
        }
        printf("\n};\n");
    }
}

/* Every grid entry decodes the same in Nebula as in ggml. */
static void check_grids(void)
{
    for (size_t i = 0; i < sizeof grid_specs / sizeof grid_specs[0]; i++) {
        const struct grid_spec *g = &grid_specs[i];
        const struct quant_traits *q = quant_traits_of((enum quant_type)g->type);
        if (!q || !q->to_float) continue; /* pending */
        uint8_t b[512];
        float a[256], c[256];
        int bad = 0;
        for (int k = 0; k < g->entries; k++) {
            grid_block(g, k, b, sizeof b);
            if (decode_mismatch((enum quant_type)g->type, b, 256, a, c) >= 0) bad++;
        }
        if (bad) fail("%s: %d of the %d grid entries decode differently from ggml", q->name, bad, g->entries);
        else printf("%-8s grid: all %d entries decode identically\n", q->name, g->entries);
    }
}

static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "ggml_oracle: the ggml library lacks %s\n", name);
        exit(2);
    }
    return p;
}

int main(int argc, char **argv)
{
    const bool grids = argc == 3 && strcmp(argv[1], "--grids") == 0;
    if (grids) argv++, argc--;
    if (argc != 2) {
        fprintf(stderr, "usage: ggml_oracle [--grids] DIR/libggml-base.so\n");
        return 2;
    }
    void *lib = gg.lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "ggml_oracle: %s\n", dlerror());
        return 2;
    }
    *(void **)&gg.get_type_traits = sym(lib, "ggml_get_type_traits");
    *(void **)&gg.quantize_chunk = sym(lib, "ggml_quantize_chunk");
    *(void **)&gg.quantize_requires_imatrix = sym(lib, "ggml_quantize_requires_imatrix");
    *(void **)&gg.quantize_free = sym(lib, "ggml_quantize_free");
    *(void **)&gg.type_name = sym(lib, "ggml_type_name");
    *(void **)&gg.type_size = sym(lib, "ggml_type_size");
    *(void **)&gg.blck_size = sym(lib, "ggml_blck_size");
    *(void **)&gg.row_size = sym(lib, "ggml_row_size");
    /* The CPU backend's baseline build, from the same folder (it needs the base library loaded). */
    char cpu_path[4096];
    const char *slash = strrchr(argv[1], '/');
    snprintf(cpu_path, sizeof cpu_path, "%.*slibggml-cpu-x64.so", slash ? (int)(slash - argv[1] + 1) : 0, argv[1]);
    void *cpu = dlopen(cpu_path, RTLD_NOW | RTLD_LOCAL);
    if (!cpu) {
        fprintf(stderr, "ggml_oracle: %s\n", dlerror());
        return 2;
    }
    void (*cpu_init)(void);
    *(void **)&cpu_init = sym(cpu, "ggml_cpu_init");
    *(void **)&gg.get_type_traits_cpu = sym(cpu, "ggml_get_type_traits_cpu");
    cpu_init();
    if (grids) {
        print_grids();
        return 0;
    }
    start_slow_quantizers();

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    printf("Nebula's kernels: %s (of scalar", quant_isa_name(quant_init()));
    for (int isa = 1; isa < QUANT_ISA_COUNT; isa++)
        if (quant_isa_supported((enum quant_isa)isa)) printf(", %s", quant_isa_name((enum quant_isa)isa));
    printf(" on this CPU)\n");
    for (int t = GGML_TYPE_COUNT; t < QT_COUNT; t++)
        if (quant_traits_of((enum quant_type)t))
            fail("type %d (%s): Nebula knows it, ggml's enum ends at %d", t, quant_type_name((enum quant_type)t),
                 GGML_TYPE_COUNT);
    /* the types quantized in the children last, so that their wait overlaps the rest */
    for (int pass = 0; pass < 2; pass++)
        for (int t = 0; t < GGML_TYPE_COUNT; t++)
            if ((pre.rows[t] != NULL) == (pass == 1) && check_identity(t)) check_type(t);
    check_grids();
    gg.quantize_free();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%s: %d failure%s (%.1f s)\n", failures ? "FAILED" : "all checks passed", failures, failures == 1 ? "" : "s",
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    return failures ? 1 : 0;
}
