#!/usr/bin/env bash
# The prompt cache's state save/load on the CUDA backend (tests/cuda/check_seq_state.c), on this
# machine's GPU: tiny-a and tiny-b converted to f32, each with the ref and the fast kernels.
# Binaries from `make all cuda-check`; exits 1 with a FAIL line where there is no GPU.
set -u
. "$(dirname "$0")/../lib/gpu.sh"
require_gpu run-seq-state-on-gpu.sh
gpu_exclusive run-seq-state-on-gpu.sh
BIN=${BIN:-build/bin}
CHECK=${CHECK:-build/tests/cuda/check_seq_state}
WORK=${WORK:-build/cuda-check}
[ -x "$CHECK" ] || { echo "FAIL: $CHECK is not built (make all cuda-check)" >&2; exit 1; }
mkdir -p "$WORK"
fail=0
for fx in tiny-a tiny-b; do
    "$BIN/nebula-convert" "tests/fixtures/$fx" "$WORK/$fx-state.gguf" --type f32 -q || { echo "FAIL: convert $fx"; fail=1; continue; }
    for k in ref fast; do "$CHECK" "$WORK/$fx-state.gguf" --kernels "$k" || fail=1; done
done
[ $fail = 0 ] && echo "run-seq-state-on-gpu: all passed" || echo "run-seq-state-on-gpu: FAILED"
exit $fail
