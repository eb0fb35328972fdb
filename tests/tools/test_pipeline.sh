#!/usr/bin/env bash
# The multi-process pipeline on tiny-a (f32) with an all-VRAM placement:
# nebula-coordinator + nebula-gpu-worker, driven by `nebula generate --server`
# and nebulactl.  Greedy ids equal the fixture's and the single-process CLI's
# output bit for bit; status shows the worker; a worker killed with -9 is
# restarted and the next request (even one sent at once) succeeds; no routed
# expert is skipped (the experts-computed counters of the gpu-worker and the
# cpu-moe-worker sum to k x MoE layers x tokens, for every placement); shutdown
# leaves no process, no /dev/shm object and no runtime directory.  Whatever
# happens, the trap kills the processes this test started (by pid) and
# removes the instance's /dev/shm objects.  TEST_BACKEND=cuda (the GPU
# machine) runs the coordinators with --backend cuda; default cpu.
set -u
BUILD=${BUILD:-build}
bin=$BUILD/bin
. tests/lib/pipeline.sh
run=$tmp/run
# Every worker ready and the gpu-worker's pid is not $1.
wait_ready() { wait_status "all(w['state'] == 'ready' for w in d['workers']) and str(d['workers'][0]['pid']) != '$1'"; }
# The worker of role $1 is ready with a pid other than $2.
wait_replaced() { wait_status "[w for w in d['workers'] if w['role'] == '$1' and w['state'] == 'ready' and str(w['pid']) != '$2']"; }

# No routed expert skipped (issue 5): the pairs computed where experts run — the
# gpu-worker's backend and the cpu-moe-worker — sum to k x trunk MoE layers x
# tokens the gpu-worker evaluated, and each side's share is the routing's
# (local = the gpu-worker's hits, remote = its misses).  $1 = label, $2 = model,
# $3 = tokens the requests so far made the gpu-worker evaluate (less those the prompt cache held).
check_computed() {
    local k layers
    k=$("$bin/nebula-gguf" info "$2" | awk '$3 == "qwen4exp.expert_used_count" {print $5}')
    layers=$("$bin/nebula-gguf" info "$2" | awk '$3 == "qwen4exp.block_count" {b = $5} $3 == "qwen4exp.nextn_predict_layers" {n = $5} END {print b - n}')
    ctl --json stats >"$tmp/computed.json" && ctl --json status >"$tmp/computed-status.json" || { bad "$1: stats for the experts-computed check"; return; }
    python3 - "$tmp/computed.json" "$tmp/computed-status.json" "$k" "$layers" "$3" <<'PY' >"$tmp/computed.err" && ok || bad "$1: experts computed: $(cat "$tmp/computed.err")"
import json, sys
st = {w["name"]: w["counters"] for w in json.load(open(sys.argv[1]))["workers"]}
status = json.load(open(sys.argv[2]))
k, layers, want_tokens = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
# prompt tokens a prompt-cache checkpoint held are not evaluated again (docs/ARCHITECTURE.md, "Prompt cache")
want_tokens -= json.load(open(sys.argv[1])).get("prompt_cache", {}).get("tokens_reused", 0)
gw, cm = st["gpu-worker"], st.get("cpu-moe-worker", {"experts_computed": 0})
total = gw["experts_computed"] + cm["experts_computed"]
err = []
if gw["tokens"] != want_tokens: err.append("gpu-worker evaluated %d tokens, the requests need %d" % (gw["tokens"], want_tokens))
if total != k * layers * gw["tokens"]:
    err.append("%d computed (gpu-worker %d + cpu-moe-worker %d) != k %d x layers %d x tokens %d = %d"
               % (total, gw["experts_computed"], cm["experts_computed"], k, layers, gw["tokens"], k * layers * gw["tokens"]))
if gw["experts_computed"] != gw["expert_hits"]: err.append("gpu-worker computed %d, routed to it %d" % (gw["experts_computed"], gw["expert_hits"]))
if cm["experts_computed"] != gw["expert_misses"]: err.append("cpu-moe-worker computed %d, routed to it %d" % (cm["experts_computed"], gw["expert_misses"]))
if status["experts_computed"] != total: err.append("status says %s computed" % status["experts_computed"])
# the cuda gpu-worker publishes its peak VRAM, and copies the remote results to the device
import os
if "vram_peak_bytes" not in status: err.append("status lacks vram_peak_bytes")
if os.environ.get("TEST_BACKEND") == "cuda" and not status.get("vram_peak_bytes"): err.append("cuda gpu-worker: no VRAM peak")
if os.environ.get("TEST_BACKEND") == "cuda" and gw["expert_misses"] and gw["bytes_copied"] < gw["expert_misses"] * 4: err.append("cuda gpu-worker: bytes_copied %d" % gw["bytes_copied"])
print("; ".join(err))
sys.exit(1 if err else 0)
PY
    local reused
    reused=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("prompt_cache", {}).get("tokens_reused", 0))' "$tmp/computed.json")
    ctl status | grep -Eq "^routed experts computed: $((k * layers * ($3 - reused))) \($((k * layers)).00 per token evaluated\)" && ok \
        || bad "$1: status lacks the experts computed: $(ctl status | grep 'experts computed')"
}

# The logits of a server run ($1) against the single process's ($2), 32 rows:
# bit for bit on the cpu backend (one process or four, the same float
# operations); on cuda the single process computes every expert on the device
# while the pipeline's cpu-moe-worker computes the missed ones on the CPU, so
# within check_backend's tolerance (compare_logits.py, argmax on every row
# whose reference top-2 gap is clear).
same_logits() {
    [ "${TEST_BACKEND:-cpu}" = cpu ] && { cmp -s "$1" "$2"; return; }
    [ -s "$1" ] && [ -s "$2" ] || return 1
    python3 tests/tools/compare_logits.py "$1" "$2" $(($(stat -c %s "$2") / 4 / 32)) --tol 1e-3 >/dev/null
}

fx=tests/fixtures/tiny-a
"$bin/nebula-convert" "$fx" "$tmp/a.gguf" --type f32 -q || { echo "FAIL: convert"; exit 1; }
prefix=$(grep -o '"prefix_len": *[0-9]*' "$fx/manifest.json" | grep -o '[0-9]*$')
tr -s ' \n' '\n' <"$fx/tokens.txt" | head -n "$prefix" >"$tmp/prefix.txt"
want=$(echo $(cat "$fx/greedy.txt"))

# An all-VRAM placement for tiny-a (4 layers x 8 experts), made by
# nebula-prepare: core/prepared checks placement.json against experts.idx.
"$bin/nebula-prepare" "$tmp/a.gguf" "$tmp/prep" --vram-budget all -q || { echo "FAIL: prepare all-VRAM"; exit 1; }

# No coordinator yet: clear errors.
"$bin/nebulactl" --runtime "$run" status >/dev/null 2>"$tmp/e"; rc=$?
[ $rc -eq 1 ] && grep -q "no coordinator" "$tmp/e" && ok || bad "nebulactl without coordinator: exit $rc, '$(cat "$tmp/e")'"
"$bin/nebula" generate --server "$run" --tokens-file "$tmp/prefix.txt" >/dev/null 2>"$tmp/e"
grep -q "no coordinator" "$tmp/e" && ok || bad "generate --server without coordinator: '$(cat "$tmp/e")'"
"$bin/nebula-coordinator" --help | grep -q -- "--prepared" && ok || bad "coordinator --help"
"$bin/nebula-gpu-worker" --help | grep -q -- "--control" && ok || bad "gpu-worker --help"

"$bin/nebula-coordinator" --backend "${TEST_BACKEND:-cpu}" --model "$tmp/a.gguf" --prepared "$tmp/prep" --runtime "$run" --threads 2 --http 127.0.0.1:0 2>"$tmp/coord.log" &
coord_pid=$!
for _ in $(seq 100); do [ -S "$run/ctl.sock" ] && break; sleep 0.1; done
wait_ready none && ok || bad "workers not ready: $(cat "$tmp/coord.log")"
inst=$(ctl --json status | json "d['instance']")
note_pids
[ "$(stat -c %a "$run")" = 700 ] && ok || bad "runtime directory mode $(stat -c %a "$run")"
ctl status >"$tmp/status" && grep -q "^gpu-worker .* ready" "$tmp/status" && ok || bad "status: $(cat "$tmp/status")"
grep -q "vram 32 experts" "$tmp/status" && ok || bad "status tiers: $(cat "$tmp/status")"

gen() { "$bin/nebula" generate --server "$run" --tokens-file "$tmp/prefix.txt" --greedy -n 32 --print-ids 2>>"$tmp/gen.err"; }
"$bin/nebula" generate -m "$tmp/a.gguf" --tokens-file "$tmp/prefix.txt" --greedy -n 32 --print-ids \
    --dump-logits "$tmp/local.logits" >"$tmp/local.out" 2>/dev/null
gen >"$tmp/server.out" && ok || bad "generate --server: $(tail -2 "$tmp/gen.err")"
[ "$(tail -n 1 "$tmp/server.out")" = "$want" ] && ok || bad "server greedy ids differ from greedy.txt:
  got  $(tail -n 1 "$tmp/server.out")
  want $want"
cmp -s "$tmp/server.out" "$tmp/local.out" && ok || bad "server output differs from the single process's"
"$bin/nebula" generate --server "$run" --tokens-file "$tmp/prefix.txt" --greedy -n 32 --dump-logits "$tmp/server.logits" \
    >/dev/null 2>>"$tmp/gen.err" && same_logits "$tmp/server.logits" "$tmp/local.logits" && ok \
    || bad "all-VRAM: logits differ from the single process's"
[ "$(stat -c %s "$tmp/local.logits")" -eq $((32 * 512 * 4)) ] && ok || bad "logits dump: want 32 rows of 512 floats"
# Two requests of prefix + 31 evaluated tokens each (the 32nd is sampled, not evaluated).
check_computed all-vram "$tmp/a.gguf" $((2 * ($(wc -l <"$tmp/prefix.txt") + 31)))
# A chat turn with sampling: tokenizer, template and sampler in the coordinator.
"$bin/nebula" generate -m "$tmp/a.gguf" --chat Hello -n 12 --seed 7 --temp 0.8 --print-ids >"$tmp/l2" 2>/dev/null
"$bin/nebula" generate --server "$run" --chat Hello -n 12 --seed 7 --temp 0.8 --print-ids >"$tmp/s2" 2>/dev/null
cmp -s "$tmp/l2" "$tmp/s2" && ok || bad "sampled chat differs: $(tail -1 "$tmp/s2") vs $(tail -1 "$tmp/l2")"
ctl stats | grep -q "tokens" && ok || bad "stats"
# per-layer times come from the cpu backend's layer taps; the cuda backend's
# layers run inside one captured graph, so its profile is the step totals
if [ "${TEST_BACKEND:-cpu}" = cpu ]; then
    ctl profile gpu-worker | grep -qE "^ +3 +[1-9]" && ok || bad "profile: no time for layer 3: $(ctl profile gpu-worker)"
else
    ctl profile gpu-worker | grep -qE "^gpu-worker: [1-9][0-9]* steps, [1-9][0-9]* tokens, busy" && ok \
        || bad "profile: no step totals: $(ctl profile gpu-worker)"
fi
ctl profile nobody >/dev/null 2>&1 && bad "profile of an unknown worker succeeded" || ok

# kill -9: restarted, the next request succeeds (waiting for it, and sent at once).
old=$(ctl --json status | json "d['workers'][0]['pid']")
kill -9 "$old"
wait_ready "$old" && ok || bad "gpu-worker not restarted after kill -9: $(tail -5 "$tmp/coord.log")"
note_pids
gen >"$tmp/after.out" && cmp -s "$tmp/after.out" "$tmp/local.out" && ok || bad "request after restart: $(tail -2 "$tmp/gen.err")"
old=$(ctl --json status | json "d['workers'][0]['pid']")
kill -9 "$old"
gen >"$tmp/at-once.out" && cmp -s "$tmp/at-once.out" "$tmp/local.out" && ok || bad "request right after kill -9: $(tail -2 "$tmp/gen.err")"
note_pids
[ "$(ctl --json status | json "d['workers'][0]['restarts']")" -ge 2 ] && ok || bad "restarts not counted"
old=$(ctl --json status | json "d['workers'][0]['pid']")
ctl restart gpu-worker >/dev/null && ok || bad "nebulactl restart"
note_pids
[ "$(ctl --json status | json "d['workers'][0]['pid']")" != "$old" ] && ok || bad "restart kept the old pid"
gen >"$tmp/r.out" && cmp -s "$tmp/r.out" "$tmp/local.out" && ok || bad "request after nebulactl restart"

# shutdown: nothing left.
ctl shutdown >/dev/null && ok || bad "nebulactl shutdown"
for _ in $(seq 50); do kill -0 "$coord_pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$coord_pid" 2>/dev/null && bad "coordinator still running after shutdown" || ok
wait "$coord_pid" && ok || bad "coordinator exit status $?"
coord_pid=
left=$(ls /dev/shm | grep -c "^nebula-$inst-")
[ "$left" -eq 0 ] && ok || bad "$left /dev/shm objects left: $(ls /dev/shm | grep "^nebula-$inst-")"
[ ! -e "$run" ] && ok || bad "runtime directory left: $(ls "$run")"
alive=0
for p in $(cat "$tmp/pids"); do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
[ "$alive" -eq 0 ] && ok || bad "$alive worker processes left"

# The default runtime directory ($XDG_RUNTIME_DIR/nebula/<instance>), found by
# nebulactl alone and by --instance.
mkdir -p "$tmp/xdg" # before the coordinator starts: it creates only the nebula/ folder inside
XDG_RUNTIME_DIR=$tmp/xdg "$bin/nebula-coordinator" --backend "${TEST_BACKEND:-cpu}" --model "$tmp/a.gguf" --http 127.0.0.1:0 2>"$tmp/coord.log" &
coord_pid=$!
for _ in $(seq 100); do ls "$tmp"/xdg/nebula/*/ctl.sock >/dev/null 2>&1 && break; sleep 0.1; done
inst=$(XDG_RUNTIME_DIR=$tmp/xdg "$bin/nebulactl" --json status 2>/dev/null | json "d['instance']")
[ -n "$inst" ] && ok || bad "nebulactl found no instance under \$XDG_RUNTIME_DIR/nebula: $(cat "$tmp/coord.log")"
XDG_RUNTIME_DIR=$tmp/xdg "$bin/nebulactl" --instance "$inst" status | grep -q "^gpu-worker" && ok || bad "nebulactl --instance"
XDG_RUNTIME_DIR=$tmp/xdg "$bin/nebulactl" --instance "$inst" shutdown >/dev/null && wait "$coord_pid" && ok || bad "shutdown by --instance"
coord_pid=
[ ! -e "$tmp/xdg/nebula/$inst" ] && [ "$(ls /dev/shm | grep -c "^nebula-$inst-")" -eq 0 ] && ok || bad "default runtime dir or regions left"
XDG_RUNTIME_DIR=$tmp/xdg "$bin/nebulactl" status >/dev/null 2>"$tmp/e"
grep -q "no coordinator is running" "$tmp/e" && ok || bad "nebulactl with no instance: '$(cat "$tmp/e")'"

# The published layouts: tiny-b as a split set (the n-gram table alone in
# shard 2) and a separate MTP file; the coordinator passes --mtp on to the
# gpu-worker (its configure), which says where its MTP block came from; the
# greedy ids are the single process's.
"$bin/nebula-convert" tests/fixtures/tiny-b "$tmp/b.gguf" --type f32 --split --mtp-out "$tmp/b-mtp.gguf" -q --threads 1 \
    || bad "nebula-convert tiny-b --split --mtp-out"
"$bin/nebula-coordinator" --backend "${TEST_BACKEND:-cpu}" --model "$tmp/b-00001-of-00002.gguf" --mtp "$tmp/b-mtp.gguf" \
    --runtime "$run" --threads 2 --http 127.0.0.1:0 2>"$tmp/coord.log" &
coord_pid=$!
for _ in $(seq 100); do [ -S "$run/ctl.sock" ] && break; sleep 0.1; done
wait_ready none && ok || bad "workers not ready on the split set + MTP file: $(tail -5 "$tmp/coord.log")"
note_pids
inst=$(ctl --json status | json "d['instance']")
"$bin/nebula" generate -m "$tmp/b-00001-of-00002.gguf" --mtp "$tmp/b-mtp.gguf" --tokens-file tests/fixtures/tiny-b/tokens.txt \
    --greedy -n 16 --print-ids >"$tmp/b-local.out" 2>/dev/null
"$bin/nebula" generate --server "$run" --tokens-file tests/fixtures/tiny-b/tokens.txt --greedy -n 16 --print-ids \
    >"$tmp/b-server.out" 2>>"$tmp/gen.err" && cmp -s "$tmp/b-local.out" "$tmp/b-server.out" && ok \
    || bad "split set + MTP file: server ids differ from the single process's: $(tail -1 "$tmp/b-server.out")"
grep -q "MTP block blk.5 from $tmp/b-mtp.gguf" "$run/gpu-worker.log" && ok || bad "the gpu-worker did not load the MTP file: $(grep -i mtp "$run/gpu-worker.log")"
ctl shutdown >/dev/null && wait "$coord_pid" && ok || bad "shutdown (split set + MTP file)"
coord_pid=

# All-RAM and mixed (VRAM + RAM + SSD) placements from nebula-prepare, when the
# worker side is built: the same ids; a killed cpu-moe-worker or pager is
# restarted and a request sent at once still gives them.
pid_of() { ctl --json status | json "[w['pid'] for w in d['workers'] if w['role'] == '$1'][0]"; }
# The pager's byte counters against what the run asked for: PLE bytes = the
# rows the gpu-worker requested × the pages ple.bin's layout reads per row
# (one 4 KiB page when rows_per_page > 0), and the pager served exactly those
# rows; expert bytes (the rest) = the SSD-tier blobs the gpu-worker sent out,
# counted by it per moe request (distinct experts per request, as the
# cpu-moe-worker asks the pager for each once) × blob_bytes.
check_ssd_bytes() { # $1 = prepared dir
    ctl --json stats >"$tmp/stats.json" || { bad "stats for the SSD byte check"; return; }
    python3 - "$tmp/stats.json" "$1" <<'PY' && ok || bad "SSD byte counters: $(cat "$tmp/stats.err")"
import json, struct, sys
st = {w["name"]: w["counters"] for w in json.load(open(sys.argv[1]))["workers"]}
hdr = open(sys.argv[2] + "/ple.bin", "rb").read(64)
rows_per_page, pages_per_row = struct.unpack_from("<II", hdr, 40)
gw, pg = st["gpu-worker"], st["ssd-pager"]
err = []
if gw["ple_rows"] == 0: err.append("the gpu-worker asked for no PLE row")
if pg["ple_rows"] != gw["ple_rows"]: err.append("pager served %d PLE rows, gpu-worker asked %d" % (pg["ple_rows"], gw["ple_rows"]))
want = gw["ple_rows"] * (1 if rows_per_page else pages_per_row) * 4096
if pg["ple_bytes_read"] != want: err.append("PLE bytes %d, expected %d" % (pg["ple_bytes_read"], want))
if pg["bytes_read"] - pg["ple_bytes_read"] != gw["ssd_blob_bytes"]:
    err.append("expert bytes %d, expected %d" % (pg["bytes_read"] - pg["ple_bytes_read"], gw["ssd_blob_bytes"]))
if gw["ssd_blob_bytes"] == 0: err.append("no SSD-tier expert was asked for")
open(sys.argv[1].replace("stats.json", "stats.err"), "w").write("; ".join(err))
sys.exit(1 if err else 0)
PY
    ctl status | grep -Eq "^SSD bytes per token: [1-9][0-9]* \(of which PLE rows [1-9][0-9]*; PLE table in ssd\)" && ok \
        || bad "status lacks the SSD bytes per token: $(ctl status | grep SSD)"
}
# kill -9 of worker $1 while a long generation is in flight: the answer is the
# single-process one (the coordinator restarts the worker and retries) or one
# clear error line, and the next request succeeds.  Uses the placement_case
# locals (name, ids, want_out) and $tmp/long-local.out (1500 tokens, single process).
midkill() {
    local role=$1 long="$tmp/long-$name-$1" victim; victim=$(pid_of "$1") # ctl.sock is busy during a generation
    "$bin/nebula" generate --server "$run" --tokens-file "$ids" --greedy -n 1500 --print-ids >"$long.out" 2>"$long.err" &
    local gp=$! t0; t0=$(date +%s%N)
    sleep 0.3
    kill -9 "$victim"
    wait "$gp"; local rc=$? dt=$(( ($(date +%s%N) - t0) / 1000000 ))
    [ "$dt" -gt 300 ] && ok || bad "$name: the generation ended before the kill of $role (${dt} ms): not in flight"
    if [ $rc -eq 0 ]; then
        cmp -s "$long.out" "$tmp/long-local.out" && ok || bad "$name: generation across a kill of $role differs"
    else
        [ "$(grep -c 'nebula: server:' "$long.err")" -eq 1 ] && ok || bad "$name: unclear failure across a kill of $role: $(cat "$long.err")"
    fi
    wait_replaced "$role" "$victim" && ok || bad "$name: $role not replaced after a kill mid-generation"
    note_pids
    sgen >"$tmp/$name-after-mid-$role.out" && cmp -s "$tmp/$name-after-mid-$role.out" "$want_out" && ok \
        || bad "$name: request after a kill of $role mid-generation"
}
placement_case() { # $1 = name, $2 = model, $3 = prepared dir, $4 = prefix ids, $5 = expected output, then roles to kill -9
    local name=$1 model=$2 prep=$3 ids=$4 want_out=$5 role; shift 5
    rm -rf "$run"
    "$bin/nebula-coordinator" --backend "${TEST_BACKEND:-cpu}" --model "$model" --prepared "$prep" --runtime "$run" --threads "${case_threads:-2}" --http 127.0.0.1:0 2>"$tmp/coord.log" &
    coord_pid=$!
    for _ in $(seq 100); do [ -S "$run/ctl.sock" ] && break; sleep 0.1; done
    wait_ready none || { bad "$name: workers not ready: $(cat "$tmp/coord.log" "$run"/*.log)"; return; }
    if [ "$name" = all-ram-spin ] && [ -z "${OMP_WAIT_POLICY:-}" ] && [ "$(nproc)" -ge 2 ]; then
        # 1 + 1 threads fit the cores: the cpu-moe-worker spins (coordinator/cpu_plan.c).
        grep -q 'cpu-moe-worker: 1 threads, spinning waits' "$tmp/coord.log" && ok || bad "$name: the plan: $(grep 'cpu-moe-worker:' "$tmp/coord.log")"
        grep -q 'OMP_WAIT_POLICY unset .*, ring spin 5000 µs' "$run/cpu-moe-worker.log" && ok \
            || bad "$name: the cpu-moe-worker did not start spinning: $(grep kernels "$run/cpu-moe-worker.log")"
    fi
    inst=$(ctl --json status | json "d['instance']")
    note_pids
    sgen() { "$bin/nebula" generate --server "$run" --tokens-file "$ids" --greedy -n 32 --print-ids 2>>"$tmp/gen.err"; }
    sgen >"$tmp/$name.out" && cmp -s "$tmp/$name.out" "$want_out" && ok || bad "$name: output differs: $(tail -1 "$tmp/$name.out")"
    # The logits every token was sampled from: the single-process ones (same_logits).
    "$bin/nebula" generate --server "$run" --tokens-file "$ids" --greedy -n 32 --dump-logits "$tmp/$name.logits" \
        >/dev/null 2>>"$tmp/gen.err" && same_logits "$tmp/$name.logits" "${want_out%.out}.logits" && ok \
        || bad "$name: logits differ from the single-process run"
    [ "$(stat -c %s "$tmp/$name.logits" 2>/dev/null || echo 0)" -gt 0 ] && ok || bad "$name: empty logits dump"
    check_computed "$name" "$model" $((2 * ($(wc -l <"$ids") + 31)))
    [ "$name" = mixed-ple-ssd ] && check_ssd_bytes "$prep"
    for role in "$@"; do
        kill -9 "$(pid_of "$role")"
        sgen >"$tmp/$name-$role.out" && cmp -s "$tmp/$name-$role.out" "$want_out" && ok \
            || bad "$name: request after kill -9 of $role: $(tail -2 "$tmp/gen.err")"
        note_pids
    done
    if [ "$name" = all-ram ]; then # a hung worker (SIGSTOP): missed heartbeats, killed and replaced
        local hung; hung=$(pid_of cpu-moe-worker)
        kill -STOP "$hung"
        wait_replaced cpu-moe-worker "$hung" && ok || bad "$name: a stopped cpu-moe-worker was not replaced"
        note_pids
        sgen >"$tmp/$name-hung.out" && cmp -s "$tmp/$name-hung.out" "$want_out" && ok || bad "$name: request after the hang"
        midkill cpu-moe-worker
    fi
    [ "$name" = mixed ] && midkill ssd-pager
    ctl shutdown >/dev/null && wait "$coord_pid" && ok || bad "$name: shutdown"
    coord_pid=
    [ "$(ls /dev/shm | grep -c "^nebula-$inst-")" -eq 0 ] && ok || bad "$name: /dev/shm objects left"
}
if [ -x "$bin/nebula-cpu-moe-worker" ] && [ -x "$bin/nebula-ssd-pager" ] && [ -x "$bin/nebula-prepare" ]; then
    "$bin/nebula" generate -m "$tmp/a.gguf" --tokens-file "$tmp/prefix.txt" --greedy -n 1500 --print-ids >"$tmp/long-local.out" 2>/dev/null
    "$bin/nebula-prepare" "$tmp/a.gguf" "$tmp/prep-ram" --vram-budget 0 --ram-budget all -q && ok || bad "prepare all-RAM"
    placement_case all-ram "$tmp/a.gguf" "$tmp/prep-ram" "$tmp/prefix.txt" "$tmp/local.out" cpu-moe-worker gpu-worker
    # One thread each: the spinning waits (OpenMP and both ring waits), the same bits.
    case_threads=1 placement_case all-ram-spin "$tmp/a.gguf" "$tmp/prep-ram" "$tmp/prefix.txt" "$tmp/local.out" cpu-moe-worker
    blob=$(python3 -c "import json; d=json.load(open('$tmp/prep-ram/placement.json')); print(d['layers'][0]['blob_bytes'], d['model']['vram_fixed_bytes'])")
    set -- $blob
    "$bin/nebula-prepare" "$tmp/a.gguf" "$tmp/prep-mix" --vram-budget $(($2 + 12 * $1)) --ram-budget $((12 * $1)) -q && ok || bad "prepare mixed"
    python3 -c "import json,sys; t=json.load(open('$tmp/prep-mix/placement.json'))['totals']; sys.exit(not all(t[k]['experts'] > 0 for k in ('vram','ram','ssd')))" \
        && ok || bad "mixed placement does not use all three tiers"
    placement_case mixed "$tmp/a.gguf" "$tmp/prep-mix" "$tmp/prefix.txt" "$tmp/local.out" ssd-pager cpu-moe-worker
    # Issue 4: >= 30% of the experts and the PLE table on SSD (ple_tier "ssd").
    "$bin/nebula-prepare" "$tmp/a.gguf" "$tmp/prep-ple" --vram-budget $(($2 + 10 * $1)) --ram-budget $((10 * $1)) \
        --ple-tier ssd -q && ok || bad "prepare mixed, PLE on SSD"
    python3 -c "import json,sys; d=json.load(open('$tmp/prep-ple/placement.json')); t=d['totals']; n=sum(t[k]['experts'] for k in t if k != 'victim_cache_bytes')
sys.exit(not (d['request']['ple_tier'] == 'ssd' and t['ssd']['experts'] >= 0.3 * n and t['vram']['experts'] > 0 and t['ram']['experts'] > 0))" \
        && ok || bad "the PLE-on-SSD placement: ple_tier or >= 30% SSD experts"
    placement_case mixed-ple-ssd "$tmp/a.gguf" "$tmp/prep-ple" "$tmp/prefix.txt" "$tmp/local.out" ssd-pager gpu-worker
    # tiny-b (fused gate_up, an MTP block, no tokenizer) with every expert on SSD.
    fb=tests/fixtures/tiny-b
    "$bin/nebula-convert" "$fb" "$tmp/b.gguf" --type f32 -q && ok || bad "convert tiny-b"
    pb=$(grep -o '"prefix_len": *[0-9]*' "$fb/manifest.json" | grep -o '[0-9]*$')
    tr -s ' \n' '\n' <"$fb/tokens.txt" | head -n "$pb" >"$tmp/prefix-b.txt"
    "$bin/nebula" generate -m "$tmp/b.gguf" --tokens-file "$tmp/prefix-b.txt" --greedy -n 32 --print-ids \
        --dump-logits "$tmp/local-b.logits" >"$tmp/local-b.out" 2>/dev/null
    "$bin/nebula-prepare" "$tmp/b.gguf" "$tmp/prep-b" --vram-budget 0 --ram-budget 0 -q && ok || bad "prepare tiny-b all-SSD"
    placement_case tiny-b-ssd "$tmp/b.gguf" "$tmp/prep-b" "$tmp/prefix-b.txt" "$tmp/local-b.out"
    # tiny-b under the other placements too: all-VRAM, all-RAM, and >= 30% SSD with the PLE table on SSD.
    "$bin/nebula-prepare" "$tmp/b.gguf" "$tmp/prep-b-vram" --vram-budget all --ram-budget 0 -q && ok || bad "prepare tiny-b all-VRAM"
    placement_case tiny-b-vram "$tmp/b.gguf" "$tmp/prep-b-vram" "$tmp/prefix-b.txt" "$tmp/local-b.out"
    "$bin/nebula-prepare" "$tmp/b.gguf" "$tmp/prep-b-ram" --vram-budget 0 --ram-budget all -q && ok || bad "prepare tiny-b all-RAM"
    placement_case tiny-b-ram "$tmp/b.gguf" "$tmp/prep-b-ram" "$tmp/prefix-b.txt" "$tmp/local-b.out" cpu-moe-worker
    set -- $(python3 -c "import json; d=json.load(open('$tmp/prep-b-ram/placement.json')); print(d['layers'][0]['blob_bytes'], d['model']['vram_fixed_bytes'])")
    "$bin/nebula-prepare" "$tmp/b.gguf" "$tmp/prep-b-ple" --vram-budget $(($2 + 12 * $1)) --ram-budget $((6 * $1)) \
        --ple-tier ssd -q && ok || bad "prepare tiny-b mixed, PLE on SSD"
    python3 -c "import json,sys; d=json.load(open('$tmp/prep-b-ple/placement.json')); t=d['totals']; n=sum(t[k]['experts'] for k in t if k != 'victim_cache_bytes')
sys.exit(not (d['request']['ple_tier'] == 'ssd' and t['ssd']['experts'] >= 0.3 * n and t['ram']['experts'] > 0))" \
        && ok || bad "tiny-b PLE-on-SSD placement: ple_tier or >= 30% SSD experts"
    placement_case tiny-b-ple-ssd "$tmp/b.gguf" "$tmp/prep-b-ple" "$tmp/prefix-b.txt" "$tmp/local-b.out" ssd-pager
    # tiny-b-vl holds tiny-b's weights in the released layout: same ids and logits through the pipeline.
    "$bin/nebula-convert" tests/fixtures/tiny-b-vl "$tmp/bvl.gguf" --type f32 -q && ok || bad "convert tiny-b-vl"
    "$bin/nebula-prepare" "$tmp/bvl.gguf" "$tmp/prep-bvl" --vram-budget $(($2 + 12 * $1)) --ram-budget $((6 * $1)) \
        --ple-tier ssd -q && ok || bad "prepare tiny-b-vl"
    placement_case tiny-b-vl-ple-ssd "$tmp/bvl.gguf" "$tmp/prep-bvl" "$tmp/prefix-b.txt" "$tmp/local-b.out"
else
    echo "SKIP: all-RAM and mixed placements (nebula-cpu-moe-worker / nebula-ssd-pager not built)"
fi

alive=0
for p in $(cat "$tmp/pids"); do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
[ "$alive" -eq 0 ] && ok || bad "$alive worker processes left at the end"

[ "$fail" -eq 0 ] || { echo "--- coordinator log"; cat "$tmp/coord.log"; cat "$run"/*.log 2>/dev/null; }
echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
