#!/usr/bin/env bash
# test_spec_bench.sh — the verify window bench (tools/bench/spec-bench.sh,
# `nebula spec-bench`; issue 16's "Bench") on the CPU reference, tiny-b,
# small sizes: the JSON holds 17 window sizes with their cost against a
# decode step, one speculative run per corruption rate, every run's ids the
# plain ones, acceptance falling with corruption (all accepted at 0, the
# window growing to 16), the Markdown table; bad options are refused.  Run
# by tests/run-tests.sh with BUILD set; SPEC_BACKEND=cuda runs it on the CUDA
# backend (tests/cuda/run-verify-on-gpu.sh).
set -u
. tests/lib/counted.sh
"$bin/nebula-convert" tests/fixtures/tiny-b "$tmp/b.gguf" --type f32 -q 2>"$tmp/e" || { echo "FAIL convert tiny-b: $(cat "$tmp/e")"; exit 1; }
bash tools/bench/spec-bench.sh "$BUILD" --model "$tmp/b.gguf" --backend "${SPEC_BACKEND:-cpu}" --prompt-len 24 --gen 96 --reps 2 --threads 2 \
    --corrupt 0,0.3,0.6 --out "$tmp/o" >"$tmp/stdout" 2>"$tmp/stderr" && ok || bad "spec-bench.sh failed: $(tail -3 "$tmp/stderr")"
python3 - "$tmp/o/spec-bench.json" <<'PY' && ok "the JSON: 17 window costs, 3 exact runs, acceptance falls with corruption" || bad "spec-bench.json: $(cat "$tmp/o/spec-bench.json" | head -c 600)"
import json, sys
d = json.load(open(sys.argv[1]))
w, s = d["windows"], d["speculative"]
assert [x["rows"] for x in w] == list(range(1, 18)), w
assert all(x["verify_s"] > 0 and x["ratio"] > 0 and x["rollback_s"] >= 0 for x in w)
assert d["decode_s"] > 0 and d["decode_tok_s"] > 0
assert [x["corrupt"] for x in s] == [0, 0.3, 0.6]
assert all(x["exact"] for x in s), "speculative ids differ from the plain ones"
assert s[0]["acceptance"] >= 0.95 and s[0]["tokens_per_pass"] > 4, s[0]
assert s[2]["acceptance"] < s[0]["acceptance"] and s[2]["tokens_per_pass"] < s[0]["tokens_per_pass"], s
assert "16" in s[0]["trajectory"].split(), s[0]["trajectory"]
assert all(x["tok_s"] > 0 and x["passes"] > 0 for x in s)
assert s[0]["per_draft"] == 1.0 and all(abs(x["per_draft"] - (1 - x["corrupt"])) < 0.2 for x in s), [x["per_draft"] for x in s]
PY
grep -q '^| 17 | ' "$tmp/o/spec-bench.md" && grep -q '^| 0.60 | ' "$tmp/o/spec-bench.md" && grep -q "^command: nebula spec-bench" "$tmp/o/spec-bench.md" &&
    ok || bad "spec-bench.md lacks the tables"
for a in "--gen x" "--backend tpu" "--corrupt 0,,1" "--bogus 1"; do
    bash tools/bench/spec-bench.sh "$BUILD" --model "$tmp/b.gguf" $a >/dev/null 2>&1
    [ $? -eq 2 ] && ok || bad "not refused: $a"
done
"$bin/nebula" spec-bench -m "$tmp/b.gguf" --corrupt 1.5 >/dev/null 2>&1
[ $? -eq 2 ] && ok || bad "nebula spec-bench --corrupt 1.5 not refused"
verdict test_spec_bench
