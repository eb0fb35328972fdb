#!/usr/bin/env bash
# coord-decode.sh — decode speed through the coordinator, two builds side by
# side: what the coordinator's own loop costs per token.  The demo model
# (tiny-a, f32) all-VRAM, so a step is ~0.5 ms of model and the rest is the
# coordinator ⇄ gpu-worker round trip; greedy (argmax steps), 326 tokens per
# request (the model's context), over ctl.sock (`nebula generate --server`).
# For each round and build: REQS requests, the median and best tok/s; the
# builds alternate (A, B, A, B, ...) so a loaded machine's drift hits both.
#
#   tools/bench/coord-decode.sh BIN_A BIN_B [ROUNDS] [REQS]   (default 3, 15)
#
# BIN_x holds nebula-coordinator and the workers it starts (next to it); the
# tools (nebula, nebulactl, nebula-convert, nebula-prepare) come from BIN_B.
# Used for docs/BENCHMARKS.md, "the coordinator as one event loop".
set -u
A=$1 B=$2 ROUNDS=${3:-3} REQS=${4:-15}
. "$(dirname "$0")/tiny-a-setup.sh"
tiny_a_setup "$B"
"$B/nebula-prepare" "$tmp/a.gguf" "$tmp/prep" --vram-budget all -q || exit 1
echo "| round | build | requests | median tok/s | best tok/s |"
echo "|---:|---|---:|---:|---:|"
for round in $(seq "$ROUNDS"); do
    for which in A B; do
        bin=$([ $which = A ] && echo "$A" || echo "$B") run=$tmp/run-$which-$round
        "$bin/nebula-coordinator" --backend cpu --model "$tmp/a.gguf" --prepared "$tmp/prep" --runtime "$run" --threads 1 \
            --http off 2>"$tmp/coord.log" &
        coord_pid=$!
        for _ in $(seq 300); do "$B/nebulactl" --runtime "$run" status 2>/dev/null | grep -q "gpu-worker .* ready" && break; sleep 0.1; done
        for _ in $(seq "$REQS"); do
            "$B/nebula" generate --server "$run" --tokens-file "$tmp/prefix.txt" --greedy -n 1500 2>&1 >/dev/null |
                sed -n 's/.*generated [0-9]* in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p'
        done | sort -n | awk -v w=$which -v r=$round '{a[NR] = $1} END {printf "| %d | %s | %d | %.0f | %.0f |\n", r, w, NR, a[int((NR + 1) / 2)], a[NR]}'
        "$B/nebulactl" --runtime "$run" shutdown >/dev/null
        wait "$coord_pid"
        coord_pid=
    done
done
