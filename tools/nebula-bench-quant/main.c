/* nebula-bench-quant — speed of every dot kernel, per weight format and ISA.
 *
 *   nebula-bench-quant [--seconds S] [--mib M] [--type NAME] [--f32 [--rows R]]
 *
 * For each weight format, fills M MiB (default 64, well past the caches) with
 * rows of 2560 values, quantizes one row of activations to the format's
 * vec_dot_type, and times vec_dot over every row, on one thread, once per
 * ISA this CPU runs.  What matters for a memory-bound matrix-vector product
 * is how fast weight bytes stream through the kernel, so the table reports
 * GB/s of weight bytes first, then values per second, then the speed-up over
 * the scalar reference.  Prints a Markdown table (tools/bench/run-bench.sh
 * appends it to docs/BENCHMARKS.md).
 *
 * --f32 times the fp32-activation dots instead (quant_dot_f32, the CPU
 * experts' fast path): R rows of fp32 activations (default 1) against each
 * weight row, per ISA; its "scalar" row is the reference's arithmetic
 * (engine/cpu/linalg.c cpu_matmul_rows, what the engine ran where a type had
 * no such kernel: the row decoded with to_float, then a double-precision dot
 * per activation row), so "vs scalar" is the speed-up over that path.
 * Exit status: 0 ok, 1 out of memory or a NaN result, 2 bad usage. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/quant/quant.h"
#include "core/util/clock.h"

#define ROW_VALUES 2560
#define DISTINCT_ROWS 16 /* quantized once, then tiled over the whole buffer */
#define MAX_F32_ROWS 64  /* --rows */

static const char usage[] =
    "usage: nebula-bench-quant [--seconds S] [--mib M] [--type NAME] [--f32 [--rows R]]\n"
    "\n"
    "  --seconds S   time spent per (format, ISA) cell, default 0.5\n"
    "  --mib M       MiB of weights per format, default 64\n"
    "  --type NAME   only this format (ggml name: q4_K, iq4_nl, f16, ...)\n"
    "  --f32         time the fp32-activation dots (quant_dot_f32) instead of vec_dot\n"
    "  --rows R      with --f32: activation rows per weight row, 1..64, default 1\n"
    "  --help        this text\n"
    "\n"
    "exit status: 0 ok, 1 out of memory or a NaN result, 2 bad usage\n";

/* The formats benchmarked: every weight format of core/quant's table (a
 * quantizer and a dot), widest first. */
static int bench_types(enum quant_type *out)
{
    int n = 0;
    for (int t = 0; t < QT_COUNT; t++) {
        const struct quant_traits *q = quant_traits_of((enum quant_type)t);
        if (!q || !q->from_float || !quant_vec_dot_isa((enum quant_type)t, QUANT_ISA_SCALAR)) continue;
        int at = n++;
        for (; at > 0; at--) { /* insertion by bits per value, descending */
            const struct quant_traits *p = quant_traits_of(out[at - 1]);
            if (p->type_size * (size_t)q->blck_size >= q->type_size * (size_t)p->blck_size) break;
            out[at] = out[at - 1];
        }
        out[at] = (enum quant_type)t;
    }
    return n;
}

struct options {
    double seconds;
    double mib;
    int only_type; /* -1: all */
    bool f32;      /* the fp32-activation dots */
    int rows;      /* their activation rows */
};

static int bad_usage(const char *why)
{
    fprintf(stderr, "nebula-bench-quant: %s\n%s", why, usage);
    return 2;
}

/* Fills opt from argv; returns 0, 1 for --help, or 2 for bad usage. */
static int parse_args(int argc, char **argv, struct options *opt)
{
    *opt = (struct options){0.5, 64, -1, false, 1};
    for (int i = 1; i < argc; i += 2) { /* every option but --help and --f32 takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end;
        if (strcmp(a, "--help") == 0) {
            fputs(usage, stdout);
            return 1;
        } else if (strcmp(a, "--f32") == 0) {
            opt->f32 = true;
            i--; /* no value */
        } else if (strcmp(a, "--rows") == 0 && v) {
            opt->rows = (int)strtol(v, &end, 10);
            if (*end || opt->rows < 1 || opt->rows > MAX_F32_ROWS) return bad_usage("--rows wants 1..64");
        } else if (strcmp(a, "--seconds") == 0 && v) {
            opt->seconds = strtod(v, &end);
            if (*end || !(opt->seconds > 0)) return bad_usage("--seconds wants a positive number");
        } else if (strcmp(a, "--mib") == 0 && v) {
            opt->mib = strtod(v, &end);
            if (*end || !(opt->mib >= 1)) return bad_usage("--mib wants a number >= 1");
        } else if (strcmp(a, "--type") == 0 && v) {
            opt->only_type = quant_type_from_name(v);
            if (opt->only_type < 0) return bad_usage("unknown --type");
        } else {
            bool known = !strcmp(a, "--seconds") || !strcmp(a, "--mib") || !strcmp(a, "--type") || !strcmp(a, "--rows");
            return bad_usage(known ? "missing value" : "unknown argument");
        }
    }
    return 0;
}

/* Deterministic normal-ish values (sum of uniforms): the data only has to be
 * plausible, the kernels' speed does not depend on it. */
static void fill_values(float *x, int64_t n, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++) {
        float s = 0;
        for (int k = 0; k < 4; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            s += (float)(seed >> 40) / 16777216.0f - 0.5f;
        }
        x[i] = s;
    }
}

/* Weights of one format: rows of ROW_VALUES, about `mib` MiB in all. */
struct weights {
    uint8_t *data;
    size_t row_bytes;
    int64_t rows;
    void *act; /* one activation row in vec_dot_type */
    float *x;  /* --f32: MAX_F32_ROWS rows of fp32 activations */
};

static int make_weights(const struct quant_traits *q, double mib, struct weights *w)
{
    w->row_bytes = quant_row_size(q->type, ROW_VALUES);
    w->rows = (int64_t)(mib * 1048576.0 / (double)w->row_bytes);
    if (w->rows < DISTINCT_ROWS) w->rows = DISTINCT_ROWS;
    /* 64-byte aligned, as a cache line (and a GGUF's 32-byte data alignment). */
    w->data = aligned_alloc(64, ((size_t)w->rows * w->row_bytes + 63) / 64 * 64);
    w->act = aligned_alloc(64, (quant_row_size(q->vec_dot_type, ROW_VALUES) + 63) / 64 * 64);
    float *x = malloc(sizeof(float) * ROW_VALUES);
    w->x = malloc(sizeof(float) * ROW_VALUES * MAX_F32_ROWS);
    if (!w->data || !w->act || !x || !w->x) {
        free(w->data), free(w->act), free(x), free(w->x);
        return -1;
    }
    fill_values(w->x, ROW_VALUES * MAX_F32_ROWS, 54321);
    for (int64_t r = 0; r < w->rows; r++) {
        if (r < DISTINCT_ROWS) {
            fill_values(x, ROW_VALUES, (uint64_t)r + 1);
            q->from_float(x, w->data + (size_t)r * w->row_bytes, ROW_VALUES);
        } else {
            memcpy(w->data + (size_t)r * w->row_bytes, w->data + (size_t)(r % DISTINCT_ROWS) * w->row_bytes,
                   w->row_bytes);
        }
    }
    fill_values(x, ROW_VALUES, 12345);
    quant_traits_of(q->vec_dot_type)->from_float(x, w->act, ROW_VALUES);
    free(x);
    return 0;
}

/* What is timed on one weight row: a vec_dot, an fp32 dot of `rows`
 * activation rows, or the reference path in its place. */
struct kernel {
    quant_vec_dot_fn dot;
    quant_dot_f32_fn dot_f32;
    const struct quant_traits *ref; /* --f32's scalar: to_float + double dot, the reference's arithmetic */
    int rows;
};

static float run_kernel(const struct kernel *k, const struct weights *w, int64_t r)
{
    const uint8_t *row = w->data + (size_t)r * w->row_bytes;
    float s[MAX_F32_ROWS], sum = 0;
    if (k->dot) {
        k->dot(ROW_VALUES, s, row, w->act);
        return s[0];
    }
    if (k->dot_f32) {
        k->dot_f32(ROW_VALUES, row, w->x, ROW_VALUES, k->rows, s);
        for (int t = 0; t < k->rows; t++) sum += s[t];
    } else { /* the reference's arithmetic (engine/cpu/linalg.c cpu_matmul_rows) */
        float dec[ROW_VALUES];
        k->ref->to_float(row, dec, ROW_VALUES);
        for (int t = 0; t < k->rows; t++) {
            double d = 0;
            for (int i = 0; i < ROW_VALUES; i++) d += (double)dec[i] * w->x[(size_t)t * ROW_VALUES + i];
            sum += (float)d;
        }
    }
    return sum;
}

/* Passes over all rows until `seconds` have gone by (at least one after a
 * warm-up pass); returns weight bytes per second. */
static double time_kernel(const struct kernel *k, const struct weights *w, double seconds, float *sink)
{
    int64_t passes = 0;
    double t0 = 0, elapsed = 0;
    for (int pass = -1; elapsed < seconds; pass++) {
        if (pass == 0) t0 = nb_now_s();
        for (int64_t r = 0; r < w->rows; r++) *sink += run_kernel(k, w, r);
        if (pass >= 0) {
            passes++;
            elapsed = nb_now_s() - t0;
        }
    }
    return (double)passes * (double)w->rows * (double)w->row_bytes / elapsed;
}

static void print_row(const struct quant_traits *q, enum quant_isa isa, double bytes_per_s, double scalar)
{
    double vals_per_s = bytes_per_s / (double)q->type_size * (double)q->blck_size;
    printf("| %-7s | %-11s | %8.2f | %8.2f | %8.2fx |\n", q->name, quant_isa_name(isa), bytes_per_s / 1e9,
           vals_per_s / 1e9, bytes_per_s / scalar);
}

int main(int argc, char **argv)
{
    struct options opt;
    int rc = parse_args(argc, argv, &opt);
    if (rc) return rc == 1 ? 0 : rc;
    quant_init();
    float sink = 0;
    if (opt.f32)
        printf("fp32-activation dots (quant_dot_f32) of %d-value rows against %d fp32 row%s (scalar: to_float + "
               "double dot), ",
               ROW_VALUES, opt.rows, opt.rows > 1 ? "s" : "");
    else
        printf("vec_dot of %d-value rows, ", ROW_VALUES);
    printf("%.0f MiB of weights per format, 1 thread, %.2f s per cell; best ISA here: %s\n\n", opt.mib, opt.seconds,
           quant_isa_name(quant_isa_active()));
    printf("| type    | isa         |     GB/s |  Gvals/s | vs scalar |\n");
    printf("|---------|-------------|---------:|---------:|----------:|\n");
    enum quant_type types[QT_COUNT];
    const int n_types = bench_types(types);
    for (int k = 0; k < n_types; k++) {
        const struct quant_traits *q = quant_traits_of(types[k]);
        if (opt.only_type >= 0 && (int)q->type != opt.only_type) continue;
        struct weights w;
        if (make_weights(q, opt.mib, &w) != 0) {
            fprintf(stderr, "nebula-bench-quant: out of memory for %.0f MiB of %s\n", opt.mib, q->name);
            return 1;
        }
        double scalar = 0;
        for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
            struct kernel k = {NULL, NULL, NULL, opt.rows};
            if (!opt.f32) k.dot = quant_vec_dot_isa(q->type, (enum quant_isa)isa);
            else if (isa == QUANT_ISA_SCALAR) k.ref = q;
            else k.dot_f32 = quant_dot_f32_isa(q->type, (enum quant_isa)isa);
            if (!k.dot && !k.dot_f32 && !k.ref) continue; /* the CPU lacks the ISA, or the type a kernel of it */
            double bps = time_kernel(&k, &w, opt.seconds, &sink);
            if (isa == QUANT_ISA_SCALAR) scalar = bps;
            print_row(q, (enum quant_isa)isa, bps, scalar);
            fflush(stdout);
        }
        free(w.data), free(w.act), free(w.x);
    }
    if (sink != sink) { /* a NaN from any kernel: the numbers above mean nothing */
        fprintf(stderr, "nebula-bench-quant: a kernel returned NaN\n");
        return 1;
    }
    return 0;
}
