#!/usr/bin/env bash
# ab-bench.sh A_BUILD B_BUILD [ROUNDS] — bench-cuda.sh's decode for two builds
# in one call, on one model, alternating (A, B, A, B, …) so the machine's drift
# hits both: what a change costs or gains, as a ratio measured in the same run
# (docs/BENCHMARKS.md's protocol).  Each round runs bench-cuda.sh once per
# build with --reps 1; the models dir is shared, so the model, its hotlists and
# the prepared placement are made once, by the first build that needs them
# (run B's first when the two builds' generators differ: A then reuses B's file).
# Prints one row per round and build, then the medians and B / A per
# configuration, of decode and of prefill tok/s.  Environment: LAYERS (4), PROMPTS (256), GEN (48), CAMPAIGN
# (8), CPU_KERNELS (fast), CUDA_KERNELS (fast), COORD_ARGS (extra coordinator
# arguments, e.g. "--chunk 4096"), MODELS (/tmp/nebula-ab-models),
# BENCH_S (per bench-cuda.sh run, 150).  A_BUILD and B_BUILD hold bin/ with
# the processes (pack-for-device.sh's .devrun/build layout); a build whose
# folder has ../tools/bench/bench-cuda.sh beside it (an older commit's
# scripts, packed with it) is benchmarked by that script, else by this tree's.
set -u
[ $# -ge 2 ] || { echo "usage: ab-bench.sh A_BUILD B_BUILD [ROUNDS]" >&2; exit 2; }
A=$1 B=$2 ROUNDS=${3:-3}
for d in "$A" "$B"; do [ -x "$d/bin/nebula-coordinator" ] || { echo "ab-bench: $d/bin/nebula-coordinator missing" >&2; exit 1; }; done
MODELS=${MODELS:-/tmp/nebula-ab-models}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() { # $1 = label, $2 = build, $3 = round
    local script=tools/bench/bench-cuda.sh
    [ -f "$2/../tools/bench/bench-cuda.sh" ] && script=$2/../tools/bench/bench-cuda.sh
    # older scripts take the kernels from the environment (NEBULA_CUDA_KERNELS, NEBULA_CPU_KERNELS)
    local kflags=(--kernels "${CUDA_KERNELS:-fast}" --cpu-kernels "${CPU_KERNELS:-fast}")
    bash "$script" --help 2>/dev/null | grep -q -- --cpu-kernels || kflags=()
    NEBULA_CUDA_KERNELS=${CUDA_KERNELS:-fast} NEBULA_CPU_KERNELS=${CPU_KERNELS:-fast} \
        timeout "${BENCH_S:-150}" bash "$script" "$2" "${kflags[@]}" --layers "${LAYERS:-4}" --prompts "${PROMPTS:-256}" --gen "${GEN:-48}" \
        --reps 1 --campaign "${CAMPAIGN:-8}" --models-dir "$MODELS" ${COORD_ARGS:+--coord-args "$COORD_ARGS"} >"$out/$1-$3.md" 2>"$out/$1-$3.err"
    local rc=$?
    [ $rc -eq 0 ] || { echo "ab-bench: $1 round $3: bench-cuda.sh rc=$rc: $(tail -2 "$out/$1-$3.err")" >&2; }
    grep -h '^bench-cuda: .* rep 1: {' "$out/$1-$3.err" | sed "s/^bench-cuda: [^{]*/$1 $3 /"
}
for r in $(seq "$ROUNDS"); do
    run B "$B" "$r"
    run A "$A" "$r"
done >"$out/rows"
python3 - "$out/rows" <<'PY'
import json, statistics, sys
rows, pre = {}, {}
print("| round | build | configuration | decode tok/s | prefill tok/s |")
print("|---:|---|---|---:|---:|")
for line in open(sys.argv[1]):
    build, rnd, js = line.split(" ", 2)
    j = json.loads(js)
    rows.setdefault((j["config"], build), []).append(j["decode_tps"])
    pre.setdefault((j["config"], build), []).append(j["prefill_tps"])
    print(f"| {rnd} | {build} | {j['config']} | {j['decode_tps']:.2f} | {j['prefill_tps']:.1f} |")
print()
print("| configuration | measure | A median (min–max) | B median (min–max) | B / A |")
print("|---|---|---|---|---:|")
for cfg in sorted({c for c, _ in rows}):
    for what, d in (("decode tok/s", rows), ("prefill tok/s", pre)):
        a, b = d.get((cfg, "A"), []), d.get((cfg, "B"), [])
        if not a or not b:
            print(f"| {cfg} | {what} | {a} | {b} | — |")
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"| {cfg} | {what} | {ma:.2f} ({min(a):.2f}–{max(a):.2f}) | {mb:.2f} ({min(b):.2f}–{max(b):.2f}) | {mb / ma:.3f} |")
PY
