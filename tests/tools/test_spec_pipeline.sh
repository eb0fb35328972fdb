#!/usr/bin/env bash
# test_spec_pipeline.sh — speculative decoding through the pipeline
# (nebula-coordinator --spec, STEP_SPEC on the step ring, the gpu-worker's
# verify windows; issue 16) on tiny-b with the CPU backend: the ids
# `nebula generate --server` gets are the single process's plain ones, greedy
# and sampled, with MTP drafts and with prompt lookup (a repeating prompt, so
# drafts are found and windows accepted), and with auto (each window's
# drafter the faster of the two: lookup on sweep-1313, a model whose output
# repeats); the coordinator refuses --spec mtp
# for a model without an MTP block and a bad --spec; nebula.conf's engine.spec
# turns it on like the flag.  Run by
# tests/run-tests.sh with BUILD set; SPEC_BACKEND=cuda runs the gpu-worker and
# the local reference on the CUDA backend (tests/cuda/run-verify-on-gpu.sh).
set -u
. tests/lib/counted.sh
backend=${SPEC_BACKEND:-cpu}
coord_pid=
stop() { [ -z "$coord_pid" ] || { kill "$coord_pid" 2>/dev/null; wait "$coord_pid" 2>/dev/null; }; coord_pid=; }
trap 'stop; rm -rf "$tmp"' EXIT
"$bin/nebula-convert" tests/fixtures/tiny-b "$tmp/b.gguf" --type f32 -q 2>"$tmp/e" || { echo "FAIL convert tiny-b: $(cat "$tmp/e")"; exit 1; }
"$bin/nebula-convert" tests/fixtures/tiny-a "$tmp/a.gguf" --type f32 -q 2>"$tmp/e" || { echo "FAIL convert tiny-a: $(cat "$tmp/e")"; exit 1; }
for i in 1 2 3 4 5 6; do echo "7 19 3 88 41 5 23 61 2 17"; done >"$tmp/rep.txt"
start() { # $1 = --spec value; "conf": nebula.conf's engine.spec = lookup instead of the flag
    local run=$tmp/run-$1 how=(--spec "$1")
    [ "$1" = conf ] && printf '[engine]\nspec = lookup\n' >"$tmp/n.conf" && how=(--config "$tmp/n.conf")
    "$bin/nebula-coordinator" --backend "$backend" --model "$tmp/b.gguf" --runtime "$run" --threads 2 --http off "${how[@]}" \
        2>"$tmp/coord-$1.log" &
    coord_pid=$!
    for _ in $(seq 300); do
        "$bin/nebulactl" --runtime "$run" status 2>/dev/null | grep -q "gpu-worker .* ready" && return 0
        sleep 0.1
    done
    return 1
}
local_ids() { "$bin/nebula" generate --backend "$backend" -m "$tmp/b.gguf" --threads 2 --print-ids "$@" 2>/dev/null | tail -1; }
server_ids() { "$bin/nebula" generate --server "$run" --print-ids "$@" 2>>"$tmp/gen.err" | tail -1; }
for spec in mtp lookup auto; do
    run=$tmp/run-$spec
    start "$spec" || { bad "--spec $spec: workers not ready: $(tail -3 "$tmp/coord-$spec.log")"; stop; continue; }
    for prompt in tests/fixtures/tiny-b/tokens.txt "$tmp/rep.txt"; do
        p=$(basename "$prompt")
        [ "$(server_ids --tokens-file "$prompt" --greedy -n 200)" = "$(local_ids --tokens-file "$prompt" --greedy -n 200)" ] &&
            ok "--spec $spec, $p: greedy ids are the plain single process's" || bad "--spec $spec, $p: greedy ids differ ($(tail -2 "$tmp/gen.err"))"
        [ "$(server_ids --tokens-file "$prompt" --temp 0.9 --seed 5 -n 120)" = "$(local_ids --tokens-file "$prompt" --temp 0.9 --seed 5 -n 120)" ] &&
            ok "--spec $spec, $p: sampled ids too" || bad "--spec $spec, $p: sampled ids differ ($(tail -2 "$tmp/gen.err"))"
    done
    stop
    # the windows it ran (logged per request): lookup on the repeating prompt found drafts and kept some
    if [ "$spec" = lookup ]; then
        grep -q "speculative: .* [1-9][0-9]* of [0-9]* drafts accepted" "$tmp/coord-$spec.log" &&
            ok "--spec lookup: drafts accepted ($(grep -o 'speculative: .*' "$tmp/coord-$spec.log" | sort | tail -1))" ||
            bad "--spec lookup accepted nothing: $(grep speculative "$tmp/coord-$spec.log")"
    fi
    if [ "$spec" = auto ]; then # both drafters ran (lookup is tried first where it has drafts)
        grep -q "drafters mtp [1-9][0-9]* lookup [1-9][0-9]*" "$tmp/coord-$spec.log" && ok "--spec auto: both drafters ran" ||
            bad "--spec auto drafters: $(grep speculative "$tmp/coord-$spec.log" | tail -2)"
    fi
done
# --spec auto on a model whose output repeats (sweep-1313): lookup drafts most windows, the ids are the plain ones
"$bin/nebula-convert" tests/fixtures/sweep/sweep-1313 "$tmp/sw.gguf" --type f32 -q 2>"$tmp/e" || bad "convert sweep-1313: $(cat "$tmp/e")"
run=$tmp/run-sw
sw_ids() { "$bin/nebula" generate -m "$tmp/sw.gguf" --threads 2 --print-ids --tokens-file tests/fixtures/sweep/sweep-1313/tokens.txt --greedy -n 300 2>/dev/null | tail -1; }
"$bin/nebula-coordinator" --backend cpu --model "$tmp/sw.gguf" --runtime "$run" --threads 2 --http off --spec auto 2>"$tmp/coord-sw.log" &
coord_pid=$!
for _ in $(seq 300); do "$bin/nebulactl" --runtime "$run" status 2>/dev/null | grep -q "gpu-worker .* ready" && break; sleep 0.1; done
[ "$(server_ids --tokens-file tests/fixtures/sweep/sweep-1313/tokens.txt --greedy -n 300)" = "$(sw_ids)" ] &&
    ok "--spec auto, a repeating model: the plain ids" || bad "--spec auto, sweep-1313: ids differ ($(tail -2 "$tmp/gen.err"))"
stop
python3 - "$tmp/coord-sw.log" <<'PY' && ok "--spec auto, a repeating model: lookup drafts most windows" || bad "auto on sweep-1313: $(grep speculative "$tmp/coord-sw.log")"
import re, sys
m = re.search(r"drafters mtp (\d+) lookup (\d+)", open(sys.argv[1]).read())
sys.exit(0 if m and int(m[2]) > 4 * int(m[1]) else 1)
PY
# nebula.conf's engine.spec turns it on too
run=$tmp/run-conf
if start conf; then
    [ "$(server_ids --tokens-file "$tmp/rep.txt" --greedy -n 40)" = "$(local_ids --tokens-file "$tmp/rep.txt" --greedy -n 40)" ] &&
        grep -q "speculative:" "$tmp/coord-conf.log" && ok "engine.spec = lookup in nebula.conf: windows, the plain ids" ||
        bad "engine.spec from nebula.conf: $(grep -c speculative "$tmp/coord-conf.log") windows logged"
else
    bad "engine.spec: workers not ready: $(tail -3 "$tmp/coord-conf.log")"
fi
stop
"$bin/nebula-coordinator" --backend "$backend" --model "$tmp/a.gguf" --runtime "$tmp/run-x" --http off --spec mtp 2>"$tmp/e" >/dev/null
[ $? != 0 ] && grep -q "no MTP block" "$tmp/e" && ok "--spec mtp without an MTP block: refused" || bad "no-MTP refusal: $(tail -2 "$tmp/e")"
"$bin/nebula-coordinator" --backend "$backend" --model "$tmp/a.gguf" --runtime "$tmp/run-x" --http off --spec auto 2>"$tmp/e" >/dev/null
[ $? != 0 ] && grep -q "auto: .*no MTP block" "$tmp/e" && ok "--spec auto without an MTP block: refused" || bad "auto no-MTP: $(tail -2 "$tmp/e")"
"$bin/nebula-coordinator" --backend "$backend" --model "$tmp/b.gguf" --runtime "$tmp/run-y" --http off --spec fast 2>"$tmp/e" >/dev/null
[ $? = 2 ] && grep -q "want off, mtp, lookup or auto" "$tmp/e" && ok "a bad --spec: refused" || bad "bad --spec: $(cat "$tmp/e")"
verdict "test_spec_pipeline ($backend)"
