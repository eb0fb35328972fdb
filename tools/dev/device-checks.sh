#!/usr/bin/env bash
# device-checks.sh [-j] STEP[,STEP...]... — the GPU machine's checks in named steps, each
# bounded by its own time limit, results (one log per step) under $OUT, so a
# session can spend its device minutes one call at a time and keep what
# finished.  Run from the repository root with .devrun/ carried
# or .devrun.txz carried (tools/dev/pack-for-device.sh; its BINS must hold the binaries the steps use)
# or with BUILD naming a build of the tree.  Steps:
#   fixtures   make test-gpu's fixture half: run-backend-on-gpu.sh SYNTHETIC=0
#              (every fixture, sweep case, GDN size, low-bit type and published
#              mix; verify windows too)                            ~6 min
#   fixtures1, fixtures2  the fixture half in two parts, for two lanes: the
#              fixtures, sweep and GDN sizes; then the low-bit types and mixes
#   synthetic  its released-width half (FIXTURES= …)                ~5 min (FULL=1: ~6)
#   synth-mix-ref, synth-mix-fast, synth-dv-ref, synth-dv-fast  the released-width half in four parts at
#              make test-gpu's own lengths, one model and one kernel set each, 16 OpenMP threads for the CPU reference (on the H100 host, with 8, the ref
#              kernels' part of the first model took 360 s: the whole half does not fit one call)
#   matvec     tests/cuda/run-on-gpu.sh --no-timing                ~2 min
#   verify     tests/cuda/run-verify-on-gpu.sh                     ~3 min
#   attn       check_attn: split-K attention vs k_attend and the host, the
#              indexer's kernels, µs per call old vs new at 4K-32K  ~1 min
#   seqstate   tests/cuda/run-seq-state-on-gpu.sh (the prompt cache's save/load)
#   cache      tests/api/test_prompt_cache.py on the cuda backend
#   pipeline   TEST_BACKEND=cuda tests/tools/test_pipeline.sh and test_idle.sh
#   adaptive   TEST_BACKEND=cuda tests/tools/test_adaptive_slots.sh (the adaptive slot cache: same
#              output as static, swaps over the copy stream, no eval waited)   ~1 min
#   selfcheck  tests/deploy/selfcheck-gpu.sh (the installer's first layers)
#   train      tests/train/test_forward.py (torch there)
# FULL=1: fixtures and synthetic with make test-gpu's own lengths and both kernel sets (the default
# is shorter: greedy 32 on the fixtures, fast kernels and greedy 24 on the released-width models), so
# that `FULL=1 device-checks.sh -j fixtures,synthetic,seqstate matvec,attn,verify,train` is make
# test-gpu in two lanes (the first ~13 min: two calls' worth; see -j below).
# Each step's limit: STEP_S (default 300 s).  Prints one line a step: rc,
# seconds, PASS/FAIL counts where the log has them.
set -u
OUT=${OUT:-/tmp/nebula-device-out}
mkdir -p "$OUT"
# .devrun.txz (pack-for-device.sh's archive, what the carry holds) unpacked when newer than .devrun
if [ -f .devrun.txz ] && [ ! .devrun/build/bin/nebula -nt .devrun.txz ]; then
    tar -xJf .devrun.txz && touch .devrun/build/bin/nebula || { echo "device-checks: .devrun.txz does not unpack" >&2; exit 1; }
fi
if [ -x .devrun/build/bin/nebula ]; then
    B=${BUILD:-.devrun/build}
    export LD_LIBRARY_PATH=$PWD/.devrun/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
    B=${BUILD:-build}
fi
export BIN=$B/bin
export CHECK=$B/tests/cuda/check_backend # seqstate: check_seq_state
par=0
reduced=1
[ "${FULL:-0}" = 1 ] && reduced=
[ "${1:-}" = -j ] && { par=1; shift; }
[ $# -gt 0 ] || { sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2; }
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
run_step() {
    local name=$1 t0 rc
    shift
    t0=$(date +%s)
    timeout "${STEP_S:-300}" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    echo "$name: rc=$rc in $(($(date +%s) - t0)) s; $(grep -c '^PASS' "$OUT/$name.log") PASS, $(grep -c '^FAIL' "$OUT/$name.log") FAIL"
    grep -m 8 '^FAIL' "$OUT/$name.log"
    tail -n 2 "$OUT/$name.log"
}
one_step() {
    local s=$1
    case $s in
    fixtures) run_step "$s" env OMP_NUM_THREADS=8 WORK=/tmp/nb-fixtures SYNTHETIC=0 ${reduced:+FIXTURE_GREEDY=32} \
        bash tests/cuda/run-backend-on-gpu.sh ;;
    fixtures1) run_step "$s" env OMP_NUM_THREADS=4 WORK=/tmp/nb-fixtures1 SYNTHETIC=0 LOWBIT= MIXES= \
        ${reduced:+FIXTURE_GREEDY=32} bash tests/cuda/run-backend-on-gpu.sh ;;
    fixtures2) run_step "$s" env OMP_NUM_THREADS=4 WORK=/tmp/nb-fixtures2 SYNTHETIC=0 FIXTURES= SWEEP= GDN_DIMS= \
        ${reduced:+FIXTURE_GREEDY=32} bash tests/cuda/run-backend-on-gpu.sh ;;
    synthetic) run_step "$s" env OMP_NUM_THREADS=8 WORK=/tmp/nb-synthetic FIXTURES= SWEEP= GDN_DIMS= LOWBIT= MIXES= \
        ${reduced:+KERNELS=fast GREEDY=24 PROMPT=32} bash tests/cuda/run-backend-on-gpu.sh ;;
    synth-mix-ref | synth-mix-fast | synth-dv-ref | synth-dv-fast)
        w=${s#synth-}
        run_step "$s" env OMP_NUM_THREADS=${OMP_NUM_THREADS:-16} WORK=/tmp/nb-$s FIXTURES= SWEEP= GDN_DIMS= LOWBIT= MIXES= WIDE="${w%-*}" \
            KERNELS="${w#*-}" bash tests/cuda/run-backend-on-gpu.sh ;;
    matvec) run_step "$s" bash tests/cuda/run-on-gpu.sh --no-timing ;;
    verify) run_step "$s" env WORK=/tmp/nb-verify bash tests/cuda/run-verify-on-gpu.sh ;;
    attn) run_step "$s" "$B/tests/cuda/check_attn" ;;
    seqstate) run_step "$s" env CHECK="$B/tests/cuda/check_seq_state" bash tests/cuda/run-seq-state-on-gpu.sh ;;
    cache) run_step "$s" env BUILD="$B" python3 tests/api/test_prompt_cache.py ;; # the coordinator picks cuda there
    pipeline) run_step "$s" bash -c "TEST_BACKEND=cuda BUILD='$B' bash tests/tools/test_pipeline.sh && TEST_BACKEND=cuda BUILD='$B' bash tests/tools/test_idle.sh" ;;
    adaptive) run_step "$s" env TEST_BACKEND=cuda BUILD="$B" bash tests/tools/test_adaptive_slots.sh ;;
    selfcheck) run_step "$s" env BUILD="$B" WORK=/dev/shm/nb-selfcheck bash tests/deploy/selfcheck-gpu.sh ;;
    train) run_step "$s" python3 tests/train/test_forward.py --nebula "$BIN/nebula" --convert "$BIN/nebula-convert" ;;
    *) echo "device-checks: unknown step '$s' (see the header)" >&2; exit 2 ;;
    esac
}
for lane in "$@"; do # every name known before anything runs
    for s in ${lane//,/ }; do
        case " fixtures fixtures1 fixtures2 synthetic synth-mix-ref synth-mix-fast synth-dv-ref synth-dv-fast matvec verify seqstate cache pipeline adaptive attn selfcheck train " in
        *" $s "*) ;;
        *) echo "device-checks: unknown step '$s' (see the header)" >&2; exit 2 ;;
        esac
    done
done
# -j: each argument a lane run beside the others, the steps of a lane joined by commas and run one after
# the other; without -j, every step in turn.  Lanes overlap only where the scripts allow it: those that
# measure VRAM (run-backend-on-gpu.sh, run-seq-state-on-gpu.sh) take tests/lib/gpu.sh's device lock and wait
# for each other, so put them in one lane and the rest (matvec, attn, verify, cache, train) beside it.
if [ "$par" = 1 ]; then
    for lane in "$@"; do
        (for s in ${lane//,/ }; do one_step "$s"; done) &
    done
    wait
else
    for lane in "$@"; do for s in ${lane//,/ }; do one_step "$s"; done; done
fi
