#!/usr/bin/env bash
# test_gpu_worker_args.sh — nebula-gpu-worker's VRAM and kernel options from
# the shell: a byte count it cannot read (--vram-budget) or a bad --ctx
# exits 2 with a message saying which, as does a --step-fd that is not an
# open descriptor,
# before anything is opened; --help names the options.  (The budget itself:
# tests/engine/test_vram.c; refused by the CUDA backend:
# test_cuda_backend.c on a GPU.)  Run by tests/run-tests.sh with BUILD set.
set -u
BIN=${BUILD:-build}/bin/nebula-gpu-worker
[ -x "$BIN" ] || { echo "FAIL $BIN not built"; exit 1; }
fails=0
expect() { # $1 = description, $2 = exit code, $3 = text in stderr, rest = command
    local what=$1 want=$2 text=$3
    shift 3
    local err rc
    err=$("$@" 2>&1 >/dev/null)
    rc=$?
    if [ "$rc" -eq "$want" ] && grep -qF -- "$text" <<<"$err"; then
        echo "ok   $what"
    else
        echo "FAIL $what (exit $rc, stderr: $err)"
        fails=$((fails + 1))
    fi
}
ep=ipc:///nonexistent/control.sock
expect "--vram-budget 12Q refused" 2 'is not a byte count' "$BIN" --control "$ep" --vram-budget 12Q
expect "--vram-budget -5 refused" 2 '--vram-budget' "$BIN" --control "$ep" --vram-budget -5
expect "--ctx 0 refused" 2 'positive number of positions' "$BIN" --control "$ep" --ctx 0
expect "--ctx 12x refused" 2 'positive number of positions' "$BIN" --control "$ep" --ctx 12x
expect "--kernels turbo refused" 2 'want ref or fast' "$BIN" --control "$ep" --kernels turbo
expect "--kernels int8 refused (the CPU experts' alone)" 2 'want ref or fast' "$BIN" --control "$ep" --kernels int8
expect "--step-fd of a closed descriptor refused" 2 'not an open file descriptor' "$BIN" --control "$ep" --step-fd 987
expect "--step-fd x refused" 2 'not an open file descriptor' "$BIN" --control "$ep" --step-fd x
expect "--kernels without a value: usage" 2 'usage: nebula-gpu-worker' "$BIN" --control "$ep" --kernels
help=$("$BIN" --help)
for opt in --vram-budget --ctx --kernels --backend --layer-times --step-fd; do
    if grep -qF -- "$opt" <<<"$help"; then echo "ok   --help names $opt"; else echo "FAIL --help lacks $opt"; fails=$((fails + 1)); fi
done
echo "$fails failed"
[ "$fails" -eq 0 ]
