#!/usr/bin/env bash
# run-verify-on-gpu.sh — verify windows and the rollback into them on the
# CUDA backend (issue 16 items 2 and 5), in a few minutes on the GPU machine:
#   1. check_backend --verify-only (tests/cuda/check_verify.c) on the CASES
#      (default: tiny-b in f32 with both kernel sets and in the quant mix,
#      tiny-a in f32), and (SYNTHETIC=1, the default) on the released-width
#      synthetic model (4 layers, 64 experts, MTP; fast
#      kernels): greedy decoding as verify windows with forced rejections at
#      moving positions, CPU and CUDA (graphs on and off, remote experts,
#      under a VRAM budget with and without slots; windows as CUDA graphs
#      and as plain launches) — ids identical, kept rows bit-identical to the
#      decode steps', no position evaluated twice; every rollback position of a
#      17-row window; the refusals;
#   2. tests/tools/test_spec.sh with SPEC_BACKEND=cuda: `nebula generate
#      --backend cuda --spec mtp|lookup|oracle` identical to plain greedy
#      (SPEC_N tokens, default 1024, on tiny-b; SYN_N, default 128, on the
#      synthetic model),
#      sampled runs too, each position evaluated once;
#   3. tests/tools/test_spec_pipeline.sh with SPEC_BACKEND=cuda: the same
#      through nebula-coordinator --spec (STEP_SPEC, the gpu-worker's windows);
#   4. with SPEC_BACKEND=cuda: tests/api/test_http_coverage.py (coverage mode
#      through the pipeline, the slots the resident experts) and
#      test_spec_bench.sh (nebula spec-bench on tiny-b; test_spec_chisq.sh
#      takes SPEC_BACKEND too, but its 1,200 processes would each start a CUDA
#      context: not here).  Step 1's check_backend also runs
#      check_verify.c's verify-coverage checks (--remote).
# Binaries from `make all cuda-check` (BIN, CHECK to use others: the
# .devrun/ pack of tools/dev/pack-for-device.sh); models written to WORK.
# Exits 1 with a FAIL line where there is no GPU (tests/lib/gpu.sh).
set -u
. "$(dirname "$0")/../lib/gpu.sh"
BIN=${BIN:-build/bin}
CHECK=${CHECK:-build/tests/cuda/check_backend}
gpu_check_begin run-verify-on-gpu.sh "make all cuda-check" "$BIN/nebula-convert" "$BIN/nebula" "$BIN/nebula-coordinator" "$BIN/nebula-gpu-worker" "$CHECK"
WORK=${WORK:-build/cuda-verify}
# fixture:type:kernels checked with check_backend --verify-only
CASES=${CASES-tiny-b:f32:ref tiny-b:f32:fast tiny-b:mix:fast tiny-a:f32:fast}
VERIFY=${VERIFY:-32}
SYNTHETIC=${SYNTHETIC:-1}
mkdir -p "$WORK"
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
fail=0
step() { echo "run-verify-on-gpu: $1 at $(($(date +%s) - start)) s"; }
for case in $CASES; do
    fx=${case%%:*} rest=${case#*:}
    ty=${rest%%:*} k=${rest#*:}
    [ -f "$WORK/$fx-$ty.gguf" ] || "$BIN/nebula-convert" "tests/fixtures/$fx" "$WORK/$fx-$ty.gguf" --type "$ty" -q ||
        { echo "FAIL: convert $fx ($ty)"; fail=1; continue; }
    "$CHECK" "$WORK/$fx-$ty.gguf" "tests/fixtures/$fx/tokens.txt" --verify "$VERIFY" --verify-only --remote --kernels "$k" ||
        { echo "FAIL: verify $fx-$ty (kernels $k)"; fail=1; }
    step "$fx-$ty ($k) checked"
done
syn="$WORK/synthetic-4l-64e-mtp-mix.gguf"
if [ "$SYNTHETIC" = 1 ]; then
    python3 - conf/qwen3.8-flash-next.config.json "$WORK/cfg64.json" <<'PY' || fail=1
import json, sys
c = json.load(open(sys.argv[1]))
(c.get("text_config") or c)["num_experts"] = 64
json.dump(c, open(sys.argv[2], "w"))
PY
    "$BIN/nebula-convert" --synthetic "$WORK/cfg64.json" "$syn" --layers 4 --ngram-base 65536 --type mix -q || fail=1
    t0=$(date +%s)
    "$CHECK" "$syn" tests/fixtures/tiny-a/tokens.txt --prompt 32 --verify "$VERIFY" --verify-only --remote --kernels fast ||
        { echo "FAIL: verify synthetic"; fail=1; }
    step "the synthetic model checked ($(($(date +%s) - t0)) s)"
fi
BUILD=$(dirname "$BIN") SPEC_BACKEND=cuda SPEC_N=${SPEC_N:-1024} bash tests/tools/test_spec.sh || fail=1
step "test_spec.sh (tiny-b) done"
if [ "$SYNTHETIC" = 1 ] && [ -f "$syn" ]; then
    tr -s ' \n' '\n' <tests/fixtures/tiny-a/tokens.txt | head -32 | tr '\n' ' ' >"$WORK/syn-prompt.txt"
    BUILD=$(dirname "$BIN") SPEC_BACKEND=cuda SPEC_N=${SYN_N:-128} SPEC_MODEL="$syn" SPEC_PROMPT="$WORK/syn-prompt.txt" \
        bash tests/tools/test_spec.sh || fail=1
    step "test_spec.sh (the synthetic model) done"
fi
BUILD=$(dirname "$BIN") SPEC_BACKEND=cuda bash tests/tools/test_spec_pipeline.sh || fail=1
step "test_spec_pipeline.sh done"
BUILD=$(dirname "$BIN") SPEC_BACKEND=cuda python3 tests/api/test_http_coverage.py || fail=1
BUILD=$(dirname "$BIN") SPEC_BACKEND=cuda bash tests/tools/test_spec_bench.sh || fail=1
step "coverage mode through the pipeline and spec-bench on cuda done"
echo "run-verify-on-gpu: $(($(date +%s) - start)) s in all"
if [ $fail -ne 0 ]; then echo "FAIL: some verify-window checks failed"; exit 1; fi
echo "OK: every verify-window check passed"
