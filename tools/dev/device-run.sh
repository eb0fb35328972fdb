#!/usr/bin/env bash
# device-run.sh — one call on the GPU machine (run from the repository root,
# with .devrun/ carried: tools/dev/pack-for-device.sh): the CUDA backend checks
# (tests/cuda/run-backend-on-gpu.sh, both kernel sets), then the issue-5
# benchmark (tools/bench/bench-cuda.sh) once per CPU expert kernel set, each
# step bounded so that what finished comes back under $OUT even when the
# device time runs out.  Environment: CHECK_S (default 240), BENCH_S (default
# 300 per kernel set), LAYERS (default 4), PROMPTS (default 512), GEN (default
# 64), REPS (default 2), CPU_KERNELS (default "ref fast"), CUDA_KERNELS
# (default fast), CAMPAIGN (hotlist campaign prompts, default 8), SKIP_CHECK=1
# to go straight to the bench; KERNELS, FIXTURES, GREEDY pass on to
# run-backend-on-gpu.sh.
set -u
OUT=${OUT:-/tmp/nebula-device-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devrun/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=.devrun/build
[ -x "$B/bin/nebula-gpu-worker" ] || { echo "device-run: $B is missing: run tools/dev/pack-for-device.sh and carry .devrun" >&2; exit 1; }
command -v nvidia-smi >/dev/null 2>&1 || { echo "SKIP: no GPU (nvidia-smi absent): device-run.sh is for the GPU machine"; exit 0; }
t0=$(date +%s)
elapsed() { echo $(($(date +%s) - t0)); }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "${SKIP_CHECK:-0}" != 1 ]; then
    BIN=$B/bin CHECK=$B/tests/cuda/check_backend WORK=/tmp/nebula-cuda-check GREEDY=${GREEDY:-64} \
        FIXTURE_GREEDY=${FIXTURE_GREEDY:-32} timeout "${CHECK_S:-240}" bash tests/cuda/run-backend-on-gpu.sh \
        >"$OUT/check.log" 2>&1
    echo "check: rc=$? at $(elapsed) s; $(grep -c '^PASS' "$OUT/check.log") PASS, $(grep -c '^FAIL' "$OUT/check.log") FAIL"
    grep '^FAIL' "$OUT/check.log" | head -20
fi
for k in ${CPU_KERNELS:-ref fast}; do
    timeout "${BENCH_S:-300}" bash tools/bench/bench-cuda.sh "$B" --kernels "${CUDA_KERNELS:-fast}" --cpu-kernels "$k" --layers "${LAYERS:-4}" --prompts "${PROMPTS:-512}" --gen "${GEN:-64}" \
        --reps "${REPS:-2}" --campaign "${CAMPAIGN:-8}" --models-dir /tmp/nebula-bench-models >"$OUT/bench-cpu-$k.md" 2>"$OUT/bench-cpu-$k.err"
    echo "bench (cpu experts $k): rc=$? at $(elapsed) s"
    grep -E '^\| (slots|zero-slot)|slots / zero-slot|a decode token|VRAM planned|EXCEEDED|EXACTNESS' "$OUT/bench-cpu-$k.md" | head -12
    grep -h 'VRAM: peak' "$OUT/bench-cpu-$k.err" | head -4 # the gpu-worker's blocks beside its measured peak
    tail -3 "$OUT/bench-cpu-$k.err"
done
echo "device-run: $(elapsed) s in all; results in $OUT"
