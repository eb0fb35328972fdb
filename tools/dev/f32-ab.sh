#!/usr/bin/env bash
# f32-ab.sh REV [TYPES...] — the AVX-512 fp32-activation dots (quant_dot_f32)
# of commit REV against this tree's, in one process, alternating A, B, A, B
# per repetition so that a loaded machine's drift hits both, and the fastest
# repetition of each kept: what a kernel change gains, as a ratio, where the
# load makes nebula-bench-quant's averages swing by 2x and more (the
# development machine; docs/BENCHMARKS.md).
#
# REV's quant_f32_avx512.c (with its quant_f32_*.h) is compiled with its table
# renamed and linked beside this tree's build/lib/libnebula-core.a (build it
# first: make build/lib/libnebula-core.a); 16 rows of 2560 values a type,
# L2-resident, so this is the kernel's decode + dot cost, not RAM's.  Then,
# with FFN=1, the expert FFN (gw_expert_ffn_many, fast kernels, 10 experts of
# one token, C 2560, I 640, 24 distinct experts cycled) for each mix of MIXES
# (default the iq2_xs file's "iq2_xs,iq2_xs,q2_0"), 1 and 2 threads, REV's
# kernels against this tree's, each in its own process, 3 rounds, the fastest
# request of each.
# Environment: REPS (2000), NT (activation rows, 1), FFN (0), MIXES, ROUNDS (3).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: f32-ab.sh REV [TYPES...]" >&2; exit 2; }
REV=$1
shift
TYPES=${*:-iq2_xs iq2_xxs q2_0 iq1_s iq3_xxs mxfp4 q4_K q5_K q2_K q3_K iq4_nl iq4_xs q4_0 q5_1 tq2_0 q8_0}
B=${BUILD:-build}
[ -f "$B/lib/libnebula-core.a" ] || { echo "f32-ab: $B/lib/libnebula-core.a missing (make $B/lib/libnebula-core.a)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/base/core/quant"
for f in $(git ls-tree --name-only "$REV" core/quant/ | grep 'quant_f32_'); do git show "$REV:$f" >"$tmp/base/$f"; done
ISA="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mavx2 -mfma -mf16c"
CF="-std=c11 -D_GNU_SOURCE -O2 -fopenmp -I. $(pkg-config --cflags libcjson 2>/dev/null || true)"
# shellcheck disable=SC2086
gcc -I"$tmp/base" $CF $ISA -Dquant_avx512_dot_f32=base_avx512_dot_f32 -c "$tmp/base/core/quant/quant_f32_avx512.c" -o "$tmp/renamed.o"
cat >"$tmp/ab.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "core/quant/quant.h"
extern const quant_dot_f32_fn base_avx512_dot_f32[QT_COUNT];
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv)
{
    quant_init();
    if (!quant_isa_supported(QUANT_ISA_AVX512)) return fprintf(stderr, "f32-ab: no AVX-512 here\n"), 1;
    const int N = 2560, R = 16, nt = getenv("NT") ? atoi(getenv("NT")) : 1, reps = getenv("REPS") ? atoi(getenv("REPS")) : 2000;
    float *src = malloc(sizeof(float) * N * R), *x = malloc(sizeof(float) * N * 64), out[64];
    srand(1);
    for (int i = 0; i < N * R; i++) src[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * (float)(1 + i % 7);
    for (int i = 0; i < N * 64; i++) x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    printf("| type | REV ns/row | this tree ns/row | this / REV speed | this tree GB/s of weights |\n|---|---:|---:|---:|---:|\n");
    for (int a = 1; a < argc; a++) {
        int t = quant_type_from_name(argv[a]);
        const struct quant_traits *q = t < 0 ? NULL : quant_traits_of((enum quant_type)t);
        if (!q || !q->from_float) { fprintf(stderr, "f32-ab: %s: no such quantized type\n", argv[a]); return 1; }
        size_t rs = quant_row_size((enum quant_type)t, N);
        unsigned char *w = malloc(rs * R);
        for (int r = 0; r < R; r++) q->from_float(src + (size_t)r * N, w + rs * r, N);
        quant_dot_f32_fn f[2] = {base_avx512_dot_f32[t], quant_dot_f32_isa((enum quant_type)t, QUANT_ISA_AVX512)};
        double best[2] = {1e9, 1e9};
        for (int rep = 0; rep < reps; rep++)
            for (int v = 0; v < 2; v++) {
                double t0 = now();
                for (int r = 0; r < R; r++) f[v](N, w + rs * r, x, N, nt, out);
                double dt = now() - t0;
                if (dt < best[v]) best[v] = dt;
            }
        printf("| %s | %.1f | %.1f | %.2fx | %.2f |\n", argv[a], best[0] / R * 1e9, best[1] / R * 1e9, best[0] / best[1],
               (double)rs / (best[1] / R) / 1e9);
        free(w);
    }
    return 0;
}
EOF
LIBS="$B/lib/libnebula-core.a -lm"
# shellcheck disable=SC2086
gcc $CF "$tmp/ab.c" "$tmp/renamed.o" $LIBS -o "$tmp/ab"
echo "quant_dot_f32 AVX-512, REV $(git rev-parse --short "$REV") against this tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD -- core/quant || echo '+changes')), fastest of ${REPS:-2000} alternating repetitions, NT ${NT:-1}"
"$tmp/ab" $TYPES
[ "${FFN:-0}" = 1 ] || exit 0

# The FFN: one binary on this tree's core library, one on a copy whose
# quant_f32_avx512.o is REV's (unrenamed).
[ -f "$B/lib/libnebula-engine.a" ] || { echo "f32-ab: $B/lib/libnebula-engine.a missing" >&2; exit 1; }
# shellcheck disable=SC2086
gcc -I"$tmp/base" $CF $ISA -c "$tmp/base/core/quant/quant_f32_avx512.c" -o "$tmp/quant_f32_avx512.o"
cp "$B/lib/libnebula-core.a" "$tmp/core-rev.a"
ar r "$tmp/core-rev.a" "$tmp/quant_f32_avx512.o"
cat >"$tmp/ffn.c" <<'EOF'
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/quant/quant.h"
#include "engine/ffn.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void *mat(int t, int64_t n_in, int64_t n_out)
{
    const struct quant_traits *q = quant_traits_of((enum quant_type)t);
    size_t rb = quant_row_size((enum quant_type)t, n_in);
    unsigned char *m = malloc(rb * (size_t)n_out);
    float *row = malloc(sizeof(float) * (size_t)n_in);
    for (int r = 0; r < 16; r++) {
        for (int64_t i = 0; i < n_in; i++) row[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        q->from_float(row, m + rb * (size_t)r, n_in);
    }
    for (int64_t r = 16; r < n_out; r++) memcpy(m + rb * (size_t)r, m + rb * (size_t)(r % 16), rb);
    free(row);
    return m;
}
static void *copy(const void *p, size_t n) { return memcpy(malloc(n), p, n); }
int main(int argc, char **argv)
{
    quant_init();
    srand(3);
    const int tg = quant_type_from_name(argv[1]), tu = quant_type_from_name(argv[2]), td = quant_type_from_name(argv[3]);
    if (tg < 0 || tu < 0 || td < 0) return fprintf(stderr, "f32-ab: bad mix\n"), 1;
    const int reps = atoi(argv[4]), C = 2560, I = 640, P = 24, E = 10;
    const size_t bg = quant_row_size(tg, C) * I, bu = quant_row_size(tu, C) * I, bd = quant_row_size(td, I) * C;
    struct gw_expert ex[24];
    for (int p = 0; p < P; p++)
        ex[p] = p < 4 ? (struct gw_expert){mat(tg, C, I), mat(tu, C, I), mat(td, I, C), tg, tu, td, C, I}
                      : (struct gw_expert){copy(ex[p % 4].gate, bg), copy(ex[p % 4].up, bu), copy(ex[p % 4].down, bd), tg, tu, td, C, I};
    float *x = malloc(sizeof(float) * C * E), *out = malloc(sizeof(float) * C * E), sc[10];
    for (int i = 0; i < C * E; i++) x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    for (int j = 0; j < E; j++) sc[j] = 1;
    struct gw_expert_job jobs[10];
    struct gw_expert_scratch s = {0};
    double best = 1e9;
    for (int r = 0; r < reps; r++) {
        for (int j = 0; j < E; j++) jobs[j] = (struct gw_expert_job){ex[(r * E + j) % P], x + j * C, 1, sc + j, out + j * C};
        double t0 = now();
        if (gw_expert_ffn_many(jobs, E, GW_KERNELS_FAST, &s)) return fprintf(stderr, "f32-ab: ffn failed\n"), 1;
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    printf("%.3f %.2f\n", best * 1e3, (double)E * (double)(bg + bu + bd) / best / 1e9);
    return 0;
}
EOF
EL="$B/lib/libnebula-engine.a $B/lib/libnebula-shm.a"
# shellcheck disable=SC2086
gcc $CF "$tmp/ffn.c" $EL "$B/lib/libnebula-core.a" -lm -o "$tmp/ffn-this"
# shellcheck disable=SC2086
gcc $CF "$tmp/ffn.c" $EL "$tmp/core-rev.a" -lm -o "$tmp/ffn-rev"
echo
echo "expert FFN, 10 experts x 1 token a request, fastest of 40 requests, best of ${ROUNDS:-3} alternating rounds"
echo "| mix | threads | REV ms | this tree ms | this / REV speed | this tree GB/s of weights |"
echo "|---|---:|---:|---:|---:|---:|"
for mix in ${MIXES:-iq2_xs,iq2_xs,q2_0}; do
    for th in 1 2; do
        br=1e9 bt=1e9 gt=0
        for _ in $(seq "${ROUNDS:-3}"); do
            read -r ms _ < <(OMP_NUM_THREADS=$th "$tmp/ffn-rev" ${mix//,/ } 40)
            br=$(echo "$ms $br" | awk '{print ($1 < $2) ? $1 : $2}')
            read -r ms gb < <(OMP_NUM_THREADS=$th "$tmp/ffn-this" ${mix//,/ } 40)
            if awk -v a="$ms" -v b="$bt" 'BEGIN{exit !(a < b)}'; then bt=$ms gt=$gb; fi
        done
        echo "| $mix | $th | $br | $bt | $(awk -v a="$br" -v b="$bt" 'BEGIN{printf "%.2fx", a / b}') | $gt |"
    done
done
