#!/usr/bin/env bash
# The CUDA backend against the CPU reference on this machine's GPU
# (tests/cuda/check_backend.c): every fixture converted to f32 and to the
# published-like quant mix, then a synthetic 4-layer model at the released
# widths (GDN, QSA, PLE and MTP layers; 64 experts to keep the CPU side
# short) with GREEDY tokens of greedy generation under several expert
# placements, the expert re-layout, the VRAM tier and budget — each model
# once per matrix kernel set in KERNELS ("ref fast": the bit-faithful kernels
# and matvec.cu's fp32 ones, which must pass the same 1e-3 tolerance and
# greedy identity).  Exits 1 with a FAIL line where there is no GPU
# (tests/lib/gpu.sh): never green without having run.  Binaries from
# `make all cuda-check` (BIN, CHECK to use others); the models are written
# to WORK.  GREEDY (default 128) tokens after a PROMPT (default 64) tokens on
# the synthetic model keep the run near 3 minutes on an H200 (the CPU
# reference side, ~5 tok/s, is most of it).  FIXTURES (default: all three)
# names the fixtures; empty checks only the synthetic model.
set -u
. "$(dirname "$0")/../lib/gpu.sh"
require_gpu run-backend-on-gpu.sh
BIN=${BIN:-build/bin}
CHECK=${CHECK:-build/tests/cuda/check_backend}
for b in "$BIN/nebula-convert" "$CHECK"; do
    [ -x "$b" ] || { echo "FAIL: $b is not built (make all cuda-check: needs nvcc and libcudart_static.a)" >&2; exit 1; }
done
WORK=${WORK:-build/cuda-check}
GREEDY=${GREEDY:-128}
PROMPT=${PROMPT:-64} # prompt tokens on the synthetic model (the CPU reference prefills at ~15 tok/s)
KERNELS=${KERNELS:-ref fast}
FIXTURE_GREEDY=${FIXTURE_GREEDY:-64}
FIXTURES=${FIXTURES-tiny-a tiny-b tiny-b-vl} # set empty to check only the synthetic model
mkdir -p "$WORK"
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
fail=0
for fx in $FIXTURES; do
    for ty in f32 mix; do
        "$BIN/nebula-convert" "tests/fixtures/$fx" "$WORK/$fx-$ty.gguf" --type "$ty" -q || { fail=1; continue; }
        for k in $KERNELS; do
            "$CHECK" "$WORK/$fx-$ty.gguf" "tests/fixtures/$fx/tokens.txt" --greedy "$FIXTURE_GREEDY" --remote --kernels "$k" \
                || { echo "FAIL: $fx-$ty (kernels $k)"; fail=1; }
        done
    done
done
python3 - conf/qwen3.8-flash-next.config.json "$WORK/cfg64.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
(c.get("text_config") or c)["num_experts"] = 64
json.dump(c, open(sys.argv[2], "w"))
PY
t0=$(date +%s)
"$BIN/nebula-convert" --synthetic "$WORK/cfg64.json" "$WORK/synthetic-4l-64e-mix.gguf" --layers 4 --ngram-base 65536 \
    --type mix -q || fail=1
echo "synthetic model converted in $(($(date +%s) - t0)) s"
for k in $KERNELS; do
    t0=$(date +%s)
    "$CHECK" "$WORK/synthetic-4l-64e-mix.gguf" tests/fixtures/tiny-a/tokens.txt --greedy "$GREEDY" --prompt "$PROMPT" --remote \
        --kernels "$k" || { echo "FAIL: synthetic (kernels $k)"; fail=1; }
    echo "synthetic model checked with kernels $k in $(($(date +%s) - t0)) s"
done
echo "run-backend-on-gpu: $(($(date +%s) - start)) s in all"
if [ $fail -ne 0 ]; then echo "FAIL: some CUDA backend checks failed"; exit 1; fi
echo "OK: every CUDA backend check passed"
