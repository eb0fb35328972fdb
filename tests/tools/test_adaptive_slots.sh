#!/usr/bin/env bash
# test_adaptive_slots.sh — issue 15 item 3's adaptive slot cache end to end on
# the CPU backend (engine/cpu/slots.c; cuda: tests/cuda/run-adaptive-on-gpu.sh):
# a model with topic drift (tests/lib/topics_model.sh), a placement of 8 of 64
# experts a layer in the gpu-worker's "VRAM" tier with the arena holding them
# too (nebula-prepare --arena-vram on), and the topic-switching campaign
# (tools/bench/topic-campaign.py) sent through the pipeline one token an eval
# (--chunk 1; --cache off: the prompt cache's messages do not fit a ring of
# one-token steps), with --slots static and --slots adaptive:
#   - the output is the same either way (a slot only moves where an expert is
#     computed), for the campaign and for 12 decoded tokens a prompt;
#   - adaptive: the hits the gpu-worker counts are exactly what
#     tools/bench/cache-sim.py's adaptive policy predicts on the campaign's
#     routes (`nebula hotlist --routes`, --start static), and more than the
#     placement's (its static_hits, = cache-sim's static); swaps happened, no
#     eval waited for a copy; static: no slot counter moves, its hits are
#     cache-sim's static ones;
#   - no routed expert skipped (gpu-worker + cpu-moe-worker = k × layers × tokens);
#   - nebulactl status prints the slot line; a bad --slots is refused.
# TEST_BACKEND=cuda (the GPU machine; tools/dev/device-checks.sh adaptive):
# the same, but a slot serves from the eval after its copy completed, so the
# hits are checked against the placement's (more) rather than cache-sim's
# exact count, and the bytes copied are the swaps' experts.
set -u
BUILD=${BUILD:-build}
bin=$BUILD/bin
. tests/lib/pipeline.sh
. tests/lib/topics_model.sh
run=$tmp/run

topics_config "$tmp/cfg.json"
topics_gen "$tmp/cfg.json" "$tmp/t.gguf" --topics 8 --topic-router 4 --topic-share 0.15 || { echo "FAIL: nebula-gen --topics"; exit 1; }
python3 tools/bench/topic-campaign.py --vocab 4096 --topics 8 --segments 8 --length 48 --reserved 128 >"$tmp/camp.txt"
"$bin/nebula" hotlist -m "$tmp/t.gguf" --prompts "$tmp/camp.txt" --ids --out "$tmp/hot.tsv" --routes "$tmp/camp.routes" \
    --threads 2 2>"$tmp/hot.err" || { echo "FAIL: hotlist: $(tail -2 "$tmp/hot.err")"; exit 1; }
# 8 experts a layer: an expert is gate, up and down of 256 × 256 in q8_0 (34 bytes per 32 values)
blob=$((3 * 256 * 256 / 32 * 34))
"$bin/nebula-prepare" "$tmp/t.gguf" "$tmp/prep" --vram-slots $((2 * 8 * blob)) --ram-budget all --arena-vram on \
    --hotlist "$tmp/hot.tsv" --ctx 4096 -q || { echo "FAIL: nebula-prepare --arena-vram on"; exit 1; }
python3 - "$tmp/prep/placement.json" <<'PY' && ok || bad "placement: not 8 VRAM-tier experts a layer with arena_vram"
import json, sys
p = json.load(open(sys.argv[1]))
assert p["request"]["arena_vram"] is True
assert [len(l["vram"]) for l in p["layers"]] == [8, 8], [len(l["vram"]) for l in p["layers"]]
PY
"$bin/nebula-prepare" "$tmp/t.gguf" "$tmp/small" --vram-slots $((2 * 8 * blob)) --ram-budget 1M --arena-vram on \
    --hotlist "$tmp/hot.tsv" --ctx 4096 -q 2>"$tmp/e" && bad "--arena-vram over the RAM budget accepted" \
    || { grep -q "arena-vram: the VRAM tier's experts .* do not fit the RAM budget" "$tmp/e" && ok || bad "--arena-vram refusal: $(cat "$tmp/e")"; }
i=0
while read -r line; do i=$((i + 1)); tr ' ' '\n' <<<"$line" >"$tmp/seg$i.txt"; done <"$tmp/camp.txt"

# Every segment with N tokens sampled: campaign CONF N SUFFIX → $tmp/CONF.SUFFIX
campaign() {
    : >"$tmp/$1.$3"
    for s in $(seq "$i"); do
        "$bin/nebula" generate --server "$run" --tokens-file "$tmp/seg$s.txt" --greedy -n "$2" --print-ids >>"$tmp/$1.$3" 2>>"$tmp/gen.err" \
            || bad "$1: segment $s, $2 tokens: $(tail -1 "$tmp/gen.err")"
    done
}
# One configuration: the campaign (one prompt a segment, its first token sampled), then 12 tokens decoded per
# segment; the status JSON after the campaign into $tmp/$1.status.
configuration() { # $1 = static | adaptive
    rm -rf "$run"
    "$bin/nebula-coordinator" --backend "${TEST_BACKEND:-cpu}" --model "$tmp/t.gguf" --prepared "$tmp/prep" --runtime "$run" --threads 2 \
        --http off --chunk 1 --cache off --slots "$1" 2>"$tmp/coord-$1.log" &
    coord_pid=$!
    for _ in $(seq 100); do [ -S "$run/ctl.sock" ] && break; sleep 0.1; done
    wait_status "all(w['state'] == 'ready' for w in d['workers'])" || { bad "$1: workers not ready: $(tail -3 "$tmp/coord-$1.log")"; return 1; }
    inst=$(ctl --json status | json "d['instance']")
    note_pids
    campaign "$1" 1 out
    ctl --json status >"$tmp/$1.status"
    ctl --json stats >"$tmp/$1.stats"
    ctl status >"$tmp/$1.text"
    cat "$run"/gpu-worker*.log >"$tmp/$1.gw.log" 2>/dev/null
    campaign "$1" 12 long
    ctl shutdown >/dev/null && wait "$coord_pid" && ok || bad "$1: shutdown"
    coord_pid=
}
configuration static
configuration adaptive
grep -q "slots adaptive (a round every 4 tokens.*every one can move" "$tmp/adaptive.gw.log" && ok || bad "the gpu-worker's log lacks the slots line"
[ -s "$tmp/static.out" ] && cmp -s "$tmp/static.out" "$tmp/adaptive.out" && ok || bad "the campaign's output differs with adaptive slots"
[ -s "$tmp/static.long" ] && cmp -s "$tmp/static.long" "$tmp/adaptive.long" && ok || bad "12 decoded tokens differ with adaptive slots"
python3 tools/bench/cache-sim.py "$tmp/camp.routes" --slots 8 --every 4 --swaps 16 --decay 0.98 --hysteresis 0.5 --start static \
    --json >"$tmp/sim.json" || bad "cache-sim"
python3 - "$tmp" "$tmp/sim.json" "${TEST_BACKEND:-cpu}" "$blob" <<'PY' >"$tmp/check.err" && ok || bad "counters: $(cat "$tmp/check.err")"
import json, sys
tmp, sim, backend, blob = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3], int(sys.argv[4])
want = {p: sum(v) for p, v in sim["hits_per_layer"].items()}
sel_want = 4 * 2 * sim["tokens"]
err = []
for conf in ("static", "adaptive"):
    st = {w["name"]: w["counters"] for w in json.load(open(f"{tmp}/{conf}.stats"))["workers"]}
    gw, cm = st["gpu-worker"], st["cpu-moe-worker"]
    s = json.load(open(f"{tmp}/{conf}.status"))["slots"]
    if s["adapt"] != conf: err.append(f"{conf}: status says {s['adapt']}")
    if gw["experts_computed"] + cm["experts_computed"] != 4 * 2 * gw["tokens"]: err.append(f"{conf}: experts skipped")
    if conf == "static": # static slots count nothing of their own: the placement's hits are expert_hits
        if any(gw[k] for k in gw if k.startswith("slot_")): err.append(f"static: slot counters {gw}")
        if gw["expert_hits"] != want["static"]: err.append(f"static: {gw['expert_hits']} hits, cache-sim's static {want['static']}")
    if conf == "adaptive":
        if gw["slot_selections"] != sel_want: err.append(f"{conf}: {gw['slot_selections']} selections, the campaign has {sel_want}")
        if gw["slot_static_hits"] != want["static"]: err.append(f"{conf}: static hits {gw['slot_static_hits']}, cache-sim {want['static']}")
        if gw["slot_waited"] != 0: err.append(f"{conf}: {gw['slot_waited']} evals waited for a copy")
        if gw["slot_hits"] != gw["expert_hits"]: err.append(f"{conf}: slot hits {gw['slot_hits']}, pairs computed here {gw['expert_hits']}")
        if backend == "cpu" and gw["slot_hits"] != want["adaptive"]:
            err.append(f"adaptive: {gw['slot_hits']} hits, cache-sim predicts {want['adaptive']}")
        if backend == "cuda" and gw["slot_bytes"] != gw["slot_swaps"] * blob:
            err.append(f"adaptive: {gw['slot_bytes']} bytes copied for {gw['slot_swaps']} swaps of {blob}")
        sys.stderr.write(f"{backend} adaptive: {gw['slot_hits']} hits of {sel_want} (cache-sim {want['adaptive']}), the placement's "
                         f"{gw['slot_static_hits']}; {gw['slot_swaps']} swaps\n")
        if gw["slot_hits"] <= gw["slot_static_hits"]: err.append(f"adaptive: {gw['slot_hits']} hits, no more than static's {gw['slot_static_hits']}")
        if gw["slot_swaps"] == 0: err.append("adaptive: no swap")
        if abs(s["hit_rate"] - gw["slot_hits"] / sel_want) > 1e-9: err.append(f"adaptive: status hit_rate {s['hit_rate']}")
print("; ".join(err))
sys.exit(1 if err else 0)
PY
grep -Eq "^slots adaptive: decode hit rate [0-9.]+% \(the placement's slots: [0-9.]+%\), [1-9][0-9]* swaps \([0-9.]+ MiB\), 0 steps waited" \
    "$tmp/adaptive.text" && ok || bad "nebulactl status: $(grep '^slots' "$tmp/adaptive.text")"
grep -qx "slots static: the placement's" "$tmp/static.text" && ok || bad "nebulactl status (static): $(grep '^slots' "$tmp/static.text")"
"$bin/nebula-coordinator" --slots sometimes --model "$tmp/t.gguf" 2>"$tmp/e" && bad "--slots sometimes accepted" \
    || { grep -q "slots takes static or adaptive" "$tmp/e" && ok || bad "--slots sometimes: $(cat "$tmp/e")"; }
echo "test_adaptive_slots: $((n - fail)) of $n checks passed"
[ "$fail" -eq 0 ]
