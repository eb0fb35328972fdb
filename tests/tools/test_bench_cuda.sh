#!/usr/bin/env bash
# The issue-5 bench tools on a GPU-less machine: roofline.py's formula on
# known numbers and its errors; nebula-bench-bw (when nvcc built it) measures
# RAM and says SKIP for the GPU; bench-cuda.sh --backend cuda skips cleanly
# without a GPU, and --backend cpu runs the whole flow (nebula-gen, hotlist
# campaign, nebula-prepare at a slot budget and at zero slots, coordinator,
# stats deltas, roofline) on a tiny config: both configurations, every prompt
# length, k x layers routed experts per token, the routing curve, --append.
set -u
. tests/lib/counted.sh
roof=tools/bench/roofline.py
field() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# roofline.py: 1 GB dense + 0.5 GB hits at 1000 GB/s, 0.2 GB from RAM at 100 GB/s,
# 10 MB over PCIe at 50 GB/s: 1.0 + max(0.5, 2.0 + 0.2) = 3.2 ms, bound by the CPU experts.
cat >"$tmp/bw.json" <<'EOF'
{"gpu": {"name": "test", "read_gbs": 1000, "copy_gbs": 900, "h2d_pinned_gbs": 50, "read_bytes": 1, "h2d_bytes": 1},
 "ram": {"read_gbs": 100, "threads": 8, "bytes": 1, "checksum": 0}, "reps": 1}
EOF
r=$(python3 "$roof" --bw "$tmp/bw.json" --dense-bytes 1e9 --vram-expert-bytes 5e8 --ram-expert-bytes 2e8 --pcie-bytes 1e7 --measured-ms 6.4 --json)
[ "$(echo "$r" | field "round(d['floor_ms'], 6)")" = 3.2 ] && ok || bad "roofline floor: $r"
[ "$(echo "$r" | field "d['bound']")" = "CPU experts (RAM)" ] && ok || bad "roofline bound: $r"
[ "$(echo "$r" | field "round(d['measured_over_floor'], 6)")" = 2.0 ] && ok || bad "measured/floor: $r"
# All hits: the GPU side bounds it: 1.0 + max(3.0, 0) = 4 ms.
r=$(python3 "$roof" --bw "$tmp/bw.json" --dense-bytes 1e9 --vram-expert-bytes 3e9 --ram-expert-bytes 0 --json)
[ "$(echo "$r" | field "round(d['floor_ms'], 6), d['bound']")" = "4.0 GPU memory" ] && ok || bad "roofline all hits: $r"
# CPU backend: everything from RAM: 1.7 GB at 100 GB/s = 17 ms.
r=$(python3 "$roof" --ram-gbs 100 --dense-bytes 1e9 --vram-expert-bytes 5e8 --ram-expert-bytes 2e8 --cpu-only --json)
[ "$(echo "$r" | field "round(d['floor_ms'], 6)")" = 17.0 ] && ok || bad "roofline --cpu-only: $r"
python3 "$roof" --ram-gbs 100 --dense-bytes 1 --vram-expert-bytes 1 --ram-expert-bytes 1 2>"$tmp/e" >/dev/null
[ $? -ne 0 ] && grep -q "GPU/PCIe bandwidth" "$tmp/e" && ok || bad "roofline without GPU bandwidth: '$(cat "$tmp/e")'"
python3 "$roof" --bw "$tmp/nope.json" --dense-bytes 1 --vram-expert-bytes 1 --ram-expert-bytes 1 2>"$tmp/e" >/dev/null
[ $? -ne 0 ] && grep -q "cannot read" "$tmp/e" && ok || bad "roofline with a missing --bw: '$(cat "$tmp/e")'"

# cuda_report.py's GPU-side report on made-up records (the path a GPU run takes):
# 2 layers, k 10, C 2560, 1 MB experts, hit 0.5 -> hand-off 2*4*2560*(1+5) = 122880 B;
# floor = 0.1 GB/1000 + max(10 MB/1000, 10 MB/100 + 122880 B/50) GB/s = 0.1 + 0.102458 ms.
cat >"$tmp/meta.json" <<'EOF'
{"layers": 2, "hidden": 2560, "experts_used": 10, "bytes_per_expert": 1000000, "dense_read_bytes": 100000000,
 "mix": "q4_k_m", "skew": 0.38, "backend": "cuda", "gen": 8, "reps": 1, "slots_budget_bytes": 1073741824,
 "budget_note": "test", "curve": [], "curve_note": ""}
EOF
rec='"prompt": 512, "gen": 8, "ttft_s": 0.5, "prefill_tps": 1024, "decode_tokens": 7, "pcie_bytes_per_token": 0, "cpu_expert_ms_per_token": 1, "gpu_wait_ms_per_token": 0.5'
{ echo "{\"config\": \"slots\", $rec, \"decode_tps\": 100, \"vram_hit_rate\": 0.5, \"experts_per_token\": 20}"
  echo "{\"config\": \"zero-slot\", $rec, \"decode_tps\": 25, \"vram_hit_rate\": 0, \"experts_per_token\": 20}"; } >"$tmp/rec.jsonl"
python3 tools/bench/cuda_report.py report "$tmp/meta.json" "$tmp/rec.jsonl" "$tmp/bw.json" >"$tmp/rep.md" 2>"$tmp/e" && ok || bad "cuda_report report: $(cat "$tmp/e")"
grep -qF '| slots | 512 | 1024.0 | 0.500 | 100.00 (100.00–100.00) | 10.00 | 50.0 % | 0 | 1.00 | 0.50 | 20 | 0.20 | 49.39 | CPU experts (RAM) |' "$tmp/rep.md" \
    && ok || bad "GPU report row: $(grep '^| slots' "$tmp/rep.md")"
grep -q "slots / zero-slot decode = 4.00×" "$tmp/rep.md" && ok || bad "speed-up line: $(grep speed "$tmp/rep.md")"
sed -i 's/"experts_per_token": 20}$/"experts_per_token": 19.5}/' "$tmp/rec.jsonl"
python3 tools/bench/cuda_report.py report "$tmp/meta.json" "$tmp/rec.jsonl" "$tmp/bw.json" >"$tmp/rep.md" 2>&1
[ $? -ne 0 ] && grep -q "EXACTNESS FAILURE" "$tmp/rep.md" && ok || bad "a skipped expert is not reported: $(tail -3 "$tmp/rep.md")"

# cuda_report.py vram: the budget placement.json records against the measured peak; over it fails loudly.
cat >"$tmp/pl.json" <<'EOF'
{"model": {"vram_dense_bytes": 1073741824, "vram_reserve_bytes": 536870912, "vram_fixed_bytes": 1610612736},
 "request": {"vram_budget": 2147483648, "vram_ctx": 4096}, "totals": {"vram": {"experts": 100}}}
EOF
echo '{"vram_peak_bytes": 1610612736}' >"$tmp/st.json"
out=$(python3 tools/bench/cuda_report.py vram slots "$tmp/pl.json" "$tmp/st.json" 2>&1) \
    && [[ $out == *"planned 2048.0 MiB (dense 1024.0 + K/V and scratch for 4096 positions 512.0 + slots 512.0: 100 experts), measured peak 1536.0 MiB (75 % of it)"* ]] \
    && ok || bad "cuda_report vram within budget: $out"
echo '{"vram_peak_bytes": 2147483649}' >"$tmp/st.json"
out=$(python3 tools/bench/cuda_report.py vram slots "$tmp/pl.json" "$tmp/st.json" 2>&1); rc=$?
[ $rc -eq 1 ] && [[ $out == *"VRAM BUDGET EXCEEDED"* ]] && ok || bad "a peak over the budget passes: rc $rc, $out"
out=$(python3 tools/bench/cuda_report.py vram slots "$tmp/pl.json" "$tmp/nope.json" 2>&1); rc=$?
[ $rc -ne 0 ] && [[ $out == *"cannot read"* ]] && ok || bad "a missing status passes: rc $rc, $out"

have_gpu=0
if [ -x "$bin/nebula-bench-bw" ]; then
    "$bin/nebula-bench-bw" --ram-mib 64 --reps 1 --threads 2 >"$tmp/bw-real.json" 2>"$tmp/bw.err" && ok || bad "nebula-bench-bw: $(cat "$tmp/bw.err")"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(not (d['ram']['read_gbs'] > 0 and d['ram']['threads'] == 2))" \
        "$tmp/bw-real.json" && ok || bad "nebula-bench-bw JSON: $(cat "$tmp/bw-real.json")"
    have_gpu=$(python3 -c "import json,sys; print(1 if json.load(open(sys.argv[1]))['gpu'] else 0)" "$tmp/bw-real.json" 2>/dev/null || echo 0)
    [ "$have_gpu" = 1 ] || grep -q "^SKIP: no CUDA device" "$tmp/bw.err" && ok || bad "nebula-bench-bw without a GPU says no SKIP: $(cat "$tmp/bw.err")"
    "$bin/nebula-bench-bw" --threads 0 >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "nebula-bench-bw --threads 0 accepted"
else
    echo "SKIP: nebula-bench-bw not built (no nvcc)"
fi

# --backend cuda without a GPU: a SKIP line, exit 0, nothing else.
if [ "$have_gpu" = 0 ]; then
    out=$(bash tools/bench/bench-cuda.sh "$BUILD" --models-dir "$tmp/models" 2>"$tmp/e"); rc=$?
    [ $rc -eq 0 ] && [[ $out == SKIP:* ]] && [ "$(echo "$out" | wc -l)" -eq 1 ] && ok || bad "bench-cuda without a GPU: rc $rc, '$out' $(cat "$tmp/e")"
fi
bash tools/bench/bench-cuda.sh "$BUILD" --backend vulkan >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "--backend vulkan accepted"
bash tools/bench/bench-cuda.sh "$BUILD" --gen 1 >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "--gen 1 accepted"

# --backend cpu on a tiny config: the whole flow.
python3 - "$tmp/tiny.json" <<'PY'
import json, sys
c = json.load(open("tests/fixtures/tiny-a/config.json"))
c.update(hidden_size=256, num_experts=32, num_experts_per_tok=4, moe_intermediate_size=64,
         shared_expert_intermediate_size=64, ple_embed_dim=256)
json.dump(c, open(sys.argv[1], "w"))
PY
bash tools/bench/bench-cuda.sh "$BUILD" --backend cpu --config "$tmp/tiny.json" --layers 2 --slot-fraction 0.25 \
    --prompts 12,20 --gen 4 --reps 1 --campaign 4 --threads 1 --models-dir "$tmp/models" --append "$tmp/B.md" \
    >"$tmp/out.md" 2>"$tmp/err" && ok || bad "bench-cuda --backend cpu: $(tail -5 "$tmp/err")"
rows=$(grep -cE '^\| (slots|zero-slot) \| (12|20) \|' "$tmp/out.md")
[ "$rows" -eq 4 ] && ok || bad "want 4 result rows (2 configurations x 2 prompts), got $rows: $(cat "$tmp/out.md")"
# experts/token column (11th) is k x layers = 8 on every row; the zero-slot rows hit nothing in VRAM.
awk -F'|' '/^\| (slots|zero-slot) \|/ { gsub(/ /, "", $12); if ($12 != "8") bad = 1 } END { exit bad }' "$tmp/out.md" \
    && ok || bad "experts/token is not k x layers = 8: $(grep -E '^\| (slots|zero)' "$tmp/out.md")"
awk -F'|' '/^\| zero-slot \|/ { gsub(/ /, "", $8); if ($8 != "0.0%") bad = 1 } END { exit bad }' "$tmp/out.md" \
    && ok || bad "zero-slot rows hit VRAM: $(grep -E '^\| zero' "$tmp/out.md")"
awk -F'|' '/^\| slots \|/ { gsub(/[ %]/, "", $8); if ($8 + 0 <= 0) bad = 1 } END { exit bad }' "$tmp/out.md" \
    && ok || bad "slot rows hit nothing: $(grep -E '^\| slots' "$tmp/out.md")"
grep -q "slots / zero-slot decode = " "$tmp/out.md" && grep -q "held-out hit rate" "$tmp/out.md" && ok || bad "no speed-up line or routing curve"
# planned VRAM per configuration (the CPU backend measures no peak); the zero-slot one plans no slot
grep -qE '^- slots: VRAM planned [0-9.]+ MiB \(dense .* \+ slots [0-9.]+: [1-9][0-9]* experts\)' "$tmp/out.md" \
    && grep -qE '^- zero-slot: VRAM planned .* slots 0\.0: 0 experts\)' "$tmp/out.md" && ok \
    || bad "no planned VRAM lines: $(grep -i vram "$tmp/out.md")"
grep -q "^## bench-cuda.sh — " "$tmp/B.md" && grep -q -- "--backend cpu" "$tmp/B.md" && ok || bad "--append wrote no dated block"
ls "$tmp"/models/*.gguf >/dev/null 2>&1 && ok || bad "no model kept in --models-dir"
# --setup-only reuses the kept model and hotlists and measures nothing.
out=$(bash tools/bench/bench-cuda.sh "$BUILD" --backend cpu --config "$tmp/tiny.json" --layers 2 --campaign 4 --threads 1 \
    --models-dir "$tmp/models" --setup-only 2>"$tmp/e"); rc=$?
[ $rc -eq 0 ] && [ -z "$out" ] && grep -q "hotlists are ready" "$tmp/e" && ! grep -q generating "$tmp/e" && ok \
    || bad "--setup-only: rc $rc, '$out', $(cat "$tmp/e")"

echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
