#!/usr/bin/env bash
# test_idle.sh — issue 15's idle point: with no request, every Nebula process
# uses < 1 % of a core (spinning waits end when work stops).  tiny-a with a
# placement on all three tiers (so the coordinator, the gpu-worker, the
# cpu-moe-worker and the ssd-pager all run), once with 2 threads and once
# with 1 (the plan where the cpu-moe-worker spins between requests:
# coordinator/cpu_plan.c); each time: a request, 1 s for the spin windows to
# end, then each process's CPU time (the scheduler's, /proc/PID/task/*/schedstat) over
# IDLE_S seconds (default 5) must stay under 1 % of them; a second request
# still gives the single process's ids.  TEST_BACKEND=cuda (the GPU machine)
# runs the gpu-worker on the device, whose host threads must idle too.
set -u
BUILD=${BUILD:-build}
bin=$BUILD/bin
. tests/lib/pipeline.sh
run=$tmp/run
IDLE_S=${IDLE_S:-5}

# CPU time of pid $1 (all its threads) in µs, from the scheduler's own count (/proc/PID/schedstat:
# exact, where utime/stime are sampled at ticks), or nothing when it is gone.
cpu_us() {
    local f s=0 t
    for f in /proc/"$1"/task/*/schedstat; do read -r t _ <"$f" 2>/dev/null && s=$((s + t / 1000)); done
    [ -e "/proc/$1/stat" ] && echo "$s"
}

fx=tests/fixtures/tiny-a
"$bin/nebula-convert" "$fx" "$tmp/a.gguf" --type f32 -q || { echo "FAIL: convert"; exit 1; }
prefix=$(grep -o '"prefix_len": *[0-9]*' "$fx/manifest.json" | grep -o '[0-9]*$')
tr -s ' \n' '\n' <"$fx/tokens.txt" | head -n "$prefix" >"$tmp/prefix.txt"
"$bin/nebula" generate -m "$tmp/a.gguf" --tokens-file "$tmp/prefix.txt" --greedy -n 16 --print-ids >"$tmp/local.out" 2>/dev/null
"$bin/nebula-prepare" "$tmp/a.gguf" "$tmp/prep-ram" --vram-budget 0 --ram-budget all -q || { echo "FAIL: prepare all-RAM"; exit 1; }
set -- $(python3 -c "import json; d=json.load(open('$tmp/prep-ram/placement.json')); print(d['layers'][0]['blob_bytes'], d['model']['vram_fixed_bytes'])")
"$bin/nebula-prepare" "$tmp/a.gguf" "$tmp/prep" --vram-budget $(($2 + 12 * $1)) --ram-budget $((12 * $1)) -q || { echo "FAIL: prepare mixed"; exit 1; }

idle_case() { # $1 = threads
    local threads=$1 p name t0 t1 used limit pids
    rm -rf "$run"
    "$bin/nebula-coordinator" --backend "${TEST_BACKEND:-cpu}" --model "$tmp/a.gguf" --prepared "$tmp/prep" --runtime "$run" \
        --threads "$threads" --http 127.0.0.1:0 2>"$tmp/coord.log" &
    coord_pid=$!
    for _ in $(seq 100); do [ -S "$run/ctl.sock" ] && break; sleep 0.1; done
    wait_status "len(d['workers']) == 3 and all(w['state'] == 'ready' for w in d['workers'])" && ok \
        || { bad "threads $threads: three workers not ready: $(tail -3 "$tmp/coord.log")"; return; }
    inst=$(ctl --json status | json "d['instance']")
    note_pids
    gen() { "$bin/nebula" generate --server "$run" --tokens-file "$tmp/prefix.txt" --greedy -n 16 --print-ids 2>>"$tmp/gen.err"; }
    gen >"$tmp/out1" && cmp -s "$tmp/out1" "$tmp/local.out" && ok || bad "threads $threads: first request: $(tail -2 "$tmp/gen.err")"
    # name:pid of every process of the instance
    pids="coordinator:$coord_pid $(ctl --json status | json "' '.join('%s:%s' % (w['role'], w['pid']) for w in d['workers'])")"
    sleep 1
    declare -A before
    for p in $pids; do before[$p]=$(cpu_us "${p#*:}"); done
    sleep "$IDLE_S"
    limit=$((IDLE_S * 10000)) # 1 % of a core over IDLE_S seconds, in µs
    for p in $pids; do
        name=${p%%:*} t0=${before[$p]} t1=$(cpu_us "${p#*:}")
        [ -n "$t0" ] && [ -n "$t1" ] || { bad "threads $threads: $name (pid ${p#*:}) is gone"; continue; }
        used=$((t1 - t0))
        echo "threads $threads: $name used $((used / 1000)).$((used % 1000 / 100)) ms of CPU in ${IDLE_S} s idle"
        [ "$used" -le "$limit" ] && ok || bad "threads $threads: $name used $((used / 1000)) ms of CPU in ${IDLE_S} s idle (limit 1 %: $((limit / 1000)) ms)"
    done
    gen >"$tmp/out2" && cmp -s "$tmp/out2" "$tmp/local.out" && ok || bad "threads $threads: request after the idle time"
    ctl shutdown >/dev/null && wait "$coord_pid" && ok || bad "threads $threads: shutdown"
    coord_pid=
}
idle_case 2
idle_case 1
echo "test_idle: $((n - fail)) of $n checks passed"
[ "$fail" -eq 0 ]
