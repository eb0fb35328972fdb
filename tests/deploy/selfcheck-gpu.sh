#!/usr/bin/env bash
# selfcheck-gpu.sh — the installer's CUDA self-check on the first layers
# (deploy/install/finish.sh: logits_parity, first_layers_fit), on this
# machine's GPU: a synthetic model at the released widths in Unsloth's
# UD-IQ1_S mix (nebula-gen, 4 layers + the MTP block, a small n-gram table)
# compared CPU reference vs CUDA with `nebula logits --layers 2` and
# `--layers 4` (GDN layers, the n-gram layer 1, the first attention layer 3),
# the n-gram table served from host memory on the device side; the check's
# tolerance is the installer's (max|cuda-cpu| <= 1e-3 x max|cpu|).  Also: the
# two depths give different logits on both backends (the truncation is real),
# and the layers the self-check would pick for an 8 GB card's budget.
# Fails (exit 1) where there is no GPU (tests/lib/gpu.sh): never green
# without having run.  Binaries from `make all` under BUILD (default build);
# the model goes to WORK (default $BUILD/selfcheck-gpu, ~5.6 GB).
set -u
. "$(dirname "$0")/../lib/gpu.sh"
require_gpu selfcheck-gpu.sh
gpu_exclusive selfcheck-gpu.sh
BUILD=${BUILD:-build}
BIN=$BUILD/bin
case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
WORK=${WORK:-$BUILD/selfcheck-gpu}
mkdir -p "$WORK"
LOG=$WORK/selfcheck.log
: >"$LOG"
for b in nebula nebula-gen nebula-gguf; do
    [ -x "$BIN/$b" ] || { echo "FAIL: $BIN/$b is not built (make all)"; exit 1; }
done
say() { printf '%s\n' "$*"; }
log() { printf '%s\n' "$*" >>"$LOG"; }
. deploy/install/finish.sh
fail=0 n=0
ok() { n=$((n + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); n=$((n + 1)); }

MODEL=$WORK/fl4.gguf
t0=$(date +%s)
[ -s "$MODEL" ] || "$BIN/nebula-gen" "$MODEL" --layers 4 --mix ud-iq1_s --ngram-base 1000 -q ||
    { echo "FAIL: nebula-gen"; exit 1; }
say "model: $MODEL ($(du -h "$MODEL" | cut -f1)) in $(($(date +%s) - t0)) s"
printf '%s\n' "1 17 4242 99 100000 7 248000 31 65 12 3 900 5000 60000 2 11" >"$WORK/ids.txt"
for L in 2 4; do
    line=$(logits_parity "$WORK" "$L")
    say "$line"
    [[ $line == PASS:* ]] && ok || bad "--layers $L: $line (log: $LOG)"
    cp "$WORK/cpu-$L.f32" "$WORK/keep-cpu-$L.f32" 2>/dev/null
    cp "$WORK/cuda.f32" "$WORK/keep-cuda-$L.f32" 2>/dev/null
done
for side in cpu cuda; do
    cmp -s "$WORK/keep-$side-2.f32" "$WORK/keep-$side-4.f32" && bad "$side: --layers 2 and 4 give the same logits" || ok
done
grep -q "the first 2 of 4 layers, then the head (no MTP block)" "$LOG" && ok || bad "nebula logits did not say it ran the first 2 of 4 layers"
L=$(first_layers_fit "$MODEL" $(((8 * 1024 - 1280) << 20))) && say "the self-check's pick for an 8 GB card (6.75 GiB budget): $L layers" ||
    bad "first_layers_fit: no layers fit an 8 GB card's budget"
say "selfcheck-gpu: $((n - fail)) of $n checks passed in $(($(date +%s) - t0)) s"
[ "$fail" = 0 ]
