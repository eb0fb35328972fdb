#!/usr/bin/env bash
# alloc-rss.sh — what the allocator changes that shows on a small machine:
# the resident memory of an idle Nebula (coordinator + gpu-worker +
# cpu-moe-worker + ssd-pager, CPU backend) on the demo model (tiny-a, f32)
# with a mixed VRAM/RAM/SSD placement, after start and after REPS requests,
# and the wall time of one `nebula generate --server` request (prompt: the
# fixture's prefix, 32 greedy tokens), the median of REPS.
#
#   tools/bench/alloc-rss.sh [BUILD] [REPS]      (default build, 10)
#
# Prints one line of key=value per measurement, for a before/after ratio
# between two builds (docs/BENCHMARKS.md, "jemalloc").
set -u
BUILD=${1:-build} REPS=${2:-10}
bin=$BUILD/bin
. "$(dirname "$0")/tiny-a-setup.sh"
tiny_a_setup "$bin"
"$bin/nebula-prepare" "$tmp/a.gguf" "$tmp/p0" --vram-budget 0 --ram-budget all -q || exit 1
read -r blob fixed < <(python3 -c "import json; d=json.load(open('$tmp/p0/placement.json')); print(d['layers'][0]['blob_bytes'], d['model']['vram_fixed_bytes'])")
"$bin/nebula-prepare" "$tmp/a.gguf" "$tmp/prep" --vram-budget $((fixed + 12 * blob)) --ram-budget $((12 * blob)) -q || exit 1
"$bin/nebula-coordinator" --model "$tmp/a.gguf" --prepared "$tmp/prep" --runtime "$tmp/run" --http off --backend cpu \
    --threads 2 2>"$tmp/coord.log" &
coord_pid=$!
for _ in $(seq 300); do
    "$bin/nebulactl" --runtime "$tmp/run" --json status 2>/dev/null |
        python3 -c "import json,sys; d=json.load(sys.stdin); sys.exit(not all(w['state']=='ready' for w in d['workers']))" 2>/dev/null && break
    sleep 0.1
done
rss() { # the RSS in KiB of the coordinator and each worker: role=KiB ...
    local out="coordinator=$(awk '/^VmRSS/ {print $2}' /proc/$coord_pid/status)"
    while read -r role pid; do out+=" $role=$(awk '/^VmRSS/ {print $2}' /proc/$pid/status)"; done < <(
        "$bin/nebulactl" --runtime "$tmp/run" --json status | python3 -c "import json,sys; [print(w['role'], w['pid']) for w in json.load(sys.stdin)['workers']]")
    echo "$out"
}
sleep 1
echo "idle_after_start_kib: $(rss)"
gen() { "$bin/nebula" generate --server "$tmp/run" --tokens-file "$tmp/prefix.txt" -n 32 --greedy >/dev/null 2>&1; }
gen || { echo "generate failed: $(tail -3 "$tmp/coord.log")"; exit 1; }
times=()
for _ in $(seq "$REPS"); do
    t0=$(date +%s%N); gen || exit 1; t1=$(date +%s%N)
    times+=($(((t1 - t0) / 1000)))
done
sleep 1
echo "idle_after_requests_kib: $(rss)"
echo "request_us_median: $(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') (of $REPS: ${times[*]})"
"$bin/nebulactl" --runtime "$tmp/run" shutdown >/dev/null 2>&1
wait "$coord_pid" 2>/dev/null
coord_pid=
