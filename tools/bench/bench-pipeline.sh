#!/usr/bin/env bash
# bench-pipeline.sh BUILD — per-token cost of the four-process pipeline
# against the single-process engine, same model, same tokens, same run.
# Decode of greedy tokens (64 on the fixture, 16 on the synthetic slice) after a
# 32-token prompt, 3 repetitions (median);
# placements: every expert on the gpu-worker ("all-VRAM": only the step ring
# is crossed per token) and every expert on the cpu-moe-worker ("all-RAM":
# one moe-ring round trip per layer per token on top).  Prints a Markdown
# table (run by make bench through run-bench.sh).  Models: the fixture tiny-a
# (tiny: the table is pure overhead) and the synthetic slice of
# prepare-models.sh when present.
set -u
BUILD=${1:-build}
bin=$BUILD/bin
tmp=$(mktemp -d)
coord_pid=
cleanup() {
    [ -n "$coord_pid" ] && kill "$coord_pid" 2>/dev/null && wait "$coord_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
seq 1 32 | awk '{print ($1 * 37) % 500}' >"$tmp/prompt.txt"

rate() { sed -n 's/.*generated [0-9]* in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p' "$1" | tail -n 1; }
median3() { printf '%s\n' "$@" | sort -g | sed -n 2p; }

# One configuration: $1 = label, $2 = model, $3 = prepared dir or "" for single process.
measure() {
    local label=$1 model=$2 prep=$3 r rates=()
    if [ -n "$prep" ]; then
        rm -rf "$tmp/run"
        "$bin/nebula-coordinator" --model "$model" --prepared "$prep" --runtime "$tmp/run" --threads 2 --http off 2>"$tmp/coord.log" &
        coord_pid=$!
        for _ in $(seq 300); do "$bin/nebulactl" --runtime "$tmp/run" status 2>/dev/null | grep -q ready && break; sleep 0.1; done
    fi
    for rep in 1 2 3; do
        if [ -n "$prep" ]; then
            "$bin/nebula" generate --server "$tmp/run" --tokens-file "$tmp/prompt.txt" --greedy -n "$n_gen" >/dev/null 2>"$tmp/err"
        else
            "$bin/nebula" generate -m "$model" --tokens-file "$tmp/prompt.txt" --greedy -n "$n_gen" --threads 2 >/dev/null 2>"$tmp/err"
        fi
        r=$(rate "$tmp/err")
        [ -n "$r" ] || { echo "bench-pipeline: $label failed: $(tail -2 "$tmp/err")" >&2; return 1; }
        rates+=("$r")
    done
    if [ -n "$prep" ]; then
        "$bin/nebulactl" --runtime "$tmp/run" shutdown >/dev/null 2>&1
        wait "$coord_pid" 2>/dev/null
        coord_pid=
    fi
    median3 "${rates[@]}"
}

echo "Decode of greedy tokens after a 32-token prompt (64 on the fixture, 16 on the synthetic slice), 3 repetitions (median);"
echo "CPU reference backend, 2 threads per process; OpenMP and ring waits as coordinator/cpu_plan.c decides for $(nproc) cores (passive unless 2 + 2 threads fit, or as OMP_WAIT_POLICY says)"
echo
echo "| model | configuration | decode tok/s | ms/token | overhead ms/token vs single process |"
echo "|---|---|---:|---:|---:|"
models=("$BUILD/bench-models/fixture-tiny-a.gguf")
[ -s "$BUILD/bench-models/synthetic-4l-64e-mix.gguf" ] && models+=("$BUILD/bench-models/synthetic-4l-64e-mix.gguf")
status=0
for model in "${models[@]}"; do
    [ -s "$model" ] || { echo "bench-pipeline: $model missing (tools/bench/prepare-models.sh)" >&2; exit 1; }
    name=$(basename "$model" .gguf)
    n_gen=64
    case $name in synthetic*) n_gen=16 ;; esac
    "$bin/nebula-prepare" "$model" "$tmp/vram-$name" --vram-budget all --ram-budget 0 -q || exit 1
    "$bin/nebula-prepare" "$model" "$tmp/ram-$name" --vram-budget 0 --ram-budget all -q || exit 1
    single=$(measure single "$model" "") || { status=1; continue; }
    for cfg in single vram ram; do
        case $cfg in
            single) r=$single label="single process" ;;
            vram) r=$(measure vram "$model" "$tmp/vram-$name") label="pipeline, all experts on the gpu-worker" || { status=1; continue; } ;;
            ram) r=$(measure ram "$model" "$tmp/ram-$name") label="pipeline, all experts on the cpu-moe-worker" || { status=1; continue; } ;;
        esac
        awk -v m="$name" -v l="$label" -v r="$r" -v s="$single" \
            'BEGIN { printf "| %s | %s | %.2f | %.3f | %+.3f |\n", m, l, r, 1000 / r, 1000 / r - 1000 / s }'
    done
done
exit $status
