#!/usr/bin/env bash
# int8-dots.sh [TYPES...] — per core, the CPU experts' two dot paths for each
# weight format: the exact fp32-activation dot (quant_dot_f32, `--kernels
# fast`) against the int8 one (the format's vec_dot on activations quantized
# to its vec_dot_type, `--kernels int8`), and what quantizing one activation
# row costs.  16 rows of 2560 values a type, L2-resident, one thread, the
# fastest of REPS repetitions, fp32 and int8 alternating per repetition so
# that a loaded machine's drift hits both (the development machine's
# averages swing by 2x and more: docs/BENCHMARKS.md).  So this is the
# kernel's decode + dot cost, not RAM's: a format whose int8 GB/s here is
# above a core's share of the RAM bandwidth is memory-bound in
# nebula-bench-expert.  Needs build/lib/libnebula-core.a (make it first).
# Environment: REPS (2000), BUILD (build).
set -euo pipefail
TYPES=${*:-iq2_xs iq2_xxs q2_0 q2_K q3_K q4_K q5_K q6_K q5_1 q8_0 iq4_nl mxfp4 iq1_s}
B=${BUILD:-build}
[ -f "$B/lib/libnebula-core.a" ] || { echo "int8-dots: $B/lib/libnebula-core.a missing (make $B/lib/libnebula-core.a)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/d.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/quant/quant.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static unsigned long long s = 88172645463325252ull;
static float rnd(void) { s ^= s << 13, s ^= s >> 7, s ^= s << 17; return (float)(s >> 40) / 8388608.0f - 1.0f; }
int main(int argc, char **argv)
{
    enum { N = 2560, ROWS = 16 };
    int reps = atoi(argv[1]);
    float x[N], w[N], out[4];
    for (int i = 0; i < N; i++) x[i] = rnd();
    printf("| type | fp32 dot ns/row | int8 dot ns/row | int8 / fp32 speed | fp32 GB/s | int8 GB/s | quantize x ns/row (its vec_dot_type) |\n|---|---:|---:|---:|---:|---:|---|\n");
    for (int a = 2; a < argc; a++) {
        int t = quant_type_from_name(argv[a]);
        const struct quant_traits *q = t >= 0 ? quant_traits_of(t) : NULL;
        if (!q || !q->from_float || !q->vec_dot) { fprintf(stderr, "int8-dots: %s: no such weight format\n", argv[a]); return 2; }
        const struct quant_traits *v = quant_traits_of(q->vec_dot_type);
        quant_dot_f32_fn f = quant_dot_f32(t);
        size_t rb = quant_row_size(t, N), vb = quant_row_size(v->type, N);
        unsigned char *m = malloc(rb * ROWS), *y = malloc(vb ? vb : 4 * N);
        for (int r = 0; r < ROWS; r++) {
            for (int i = 0; i < N; i++) w[i] = rnd() * 0.02f;
            q->from_float(w, m + rb * r, N);
        }
        v->from_float(x, y, N);
        double bf = 1e9, bq = 1e9, bx = 1e9;
        volatile float sink = 0;
        for (int k = 0; k < reps; k++) {
            double t0 = now();
            for (int r = 0; r < ROWS; r++) f(N, m + rb * r, x, N, 1, out), sink += out[0];
            double t1 = now();
            for (int r = 0; r < ROWS; r++) q->vec_dot(N, out, m + rb * r, y), sink += out[0];
            double t2 = now();
            v->from_float(x, y, N);
            double t3 = now();
            bf = t1 - t0 < bf ? t1 - t0 : bf, bq = t2 - t1 < bq ? t2 - t1 : bq, bx = t3 - t2 < bx ? t3 - t2 : bx;
        }
        printf("| %s | %.1f | %.1f | %.2fx | %.2f | %.2f | %.0f (%s) |\n", argv[a], bf / ROWS * 1e9, bq / ROWS * 1e9, bf / bq,
               rb * ROWS / bf / 1e9, rb * ROWS / bq / 1e9, bx * 1e9, v->name);
        free(m), free(y);
    }
    return 0;
}
EOF
gcc -std=c11 -D_GNU_SOURCE -O2 -fopenmp -I. "$tmp/d.c" "$B/lib/libnebula-core.a" -lm -lpthread -o "$tmp/d"
# shellcheck disable=SC2086
"$tmp/d" "${REPS:-2000}" $TYPES
