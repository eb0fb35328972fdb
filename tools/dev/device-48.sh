#!/usr/bin/env bash
# device-48.sh nebula|peer|spec — the full 48-layer model on the GPU machine
# (issues 13 and 14), in two calls that follow each other while the machine
# is warm (the 64 MiB carry cannot hold the tree, .devrun and llama.cpp's
# CUDA build at once; build outputs and /dev/shm stay between warm calls):
#
#   nebula  (carry .devrun-peer/a, with .devrun copied to build/dr by an
#           earlier warm call: `cp -a .devrun build/dr/`): nebula-gen writes the model
#           (48 layers, MIX, the GGUF in /dev/shm: the 64 GiB disk cannot
#           hold it and its prepared copy; linked into a models dir on the
#           disk, where the prepared files go), timed; then bench-cuda.sh at
#           a 12 GiB budget on it (PROMPTS, GEN, CHUNK; both configurations).
#           Unpacks part a of llama.cpp's build for the next call.
#   peer    (carry .devrun-peer/b): joins llama.cpp's build (checked against
#           the sha256 part a brought), then peer-llamacpp.sh bench on the
#           same file at the same budget (UBATCH sizes).
#   spec    (carry .devrun, or build/dr from an earlier warm call): the verify
#           window bench (tools/bench/spec-bench.sh, issue 16) on the same
#           48-layer file with the whole model on the GPU — made here with
#           nebula-gen when the nebula call has not left it in /dev/shm —
#           SPEC_GEN tokens, SPEC_REPS windows a size, SPEC_PROMPT ids.
# Results go to $OUT.  Environment: MIX (iq2_xs), NGRAM (200000), PROMPTS
# (512,4096), GEN (16), CHUNK (4096), UBATCH (default,512,2048,4096), BENCH_S
# (480), PEER_S (480).
set -u
mode=${1:-}
OUT=${OUT:-/tmp/nebula-device-out}
mkdir -p "$OUT"
# The binaries: .devrun when carried, else a copy an earlier warm call left in
# build/dr (a call's own outputs stay on a warm machine; carried paths do not,
# and the carry cannot hold .devrun beside a part of llama.cpp's build).
DR=.devrun
[ -x "$DR/build/bin/nebula-gen" ] || DR=build/dr/.devrun
export LD_LIBRARY_PATH=$PWD/$DR/lib:$PWD/build/peer/lc/build-cuda/bin$(for d in /usr/local/lib/python3*/dist-packages/nvidia/*/lib /usr/lib/python3/dist-packages/nvidia/*/lib; do [ -d "$d" ] && printf ':%s' "$d"; done)
B=$DR/build
MIX=${MIX:-iq2_xs} NGRAM=${NGRAM:-200000}
models=/root/nebula-48 shm=/dev/shm/nebula-48
name=synthetic-qwen3.8-flash-next-48l-$MIX-skew0.38.gguf
t0=$(date +%s)
el() { echo "[$(($(date +%s) - t0)) s]"; }
case $mode in
nebula)
    [ -x "$B/bin/nebula-gen" ] || { echo "device-48: $B missing (carry .devrun, or copy it to build/dr in an earlier warm call)" >&2; exit 1; }
    mkdir -p "$models" "$shm" build/peer/lc/build-cuda/bin
    cp .devrun-peer/a/lc-cuda.sha256 build/peer/ 2>/dev/null
    cp .devrun-peer/a/lc-cuda.tar.xz.part00 build/peer/ 2>/dev/null || echo "device-48: no .devrun-peer/a: the peer call will lack part a"
    g0=$(date +%s)
    "$B/bin/nebula-gen" "$shm/$name" --mix "$MIX" --ngram-base "$NGRAM" --no-mtp -q >"$OUT/gen48.log" 2>&1
    echo "nebula-gen rc=$? in $(($(date +%s) - g0)) s: $(ls -la "$shm/$name" | awk '{print $5}') bytes" | tee "$OUT/gen48.txt"
    ln -sf "$shm/$name" "$models/$name"
    timeout "${BENCH_S:-480}" bash tools/bench/bench-cuda.sh "$B" --layers 48 --mix "$MIX" --ngram-base "$NGRAM" \
        --prompts "${PROMPTS:-512,4096}" --gen "${GEN:-16}" --reps 1 --campaign 4 --models-dir "$models" \
        --coord-args "--chunk ${CHUNK:-4096}" >"$OUT/bench48.md" 2>"$OUT/bench48.err"
    echo "bench-cuda rc=$? $(el)"
    grep -E '^\| (slots|zero-slot)|VRAM planned|EXCEEDED|EXACTNESS' "$OUT/bench48.md" | head -12
    tail -3 "$OUT/bench48.err"
    df -h / /dev/shm | tail -2
    ;;
peer)
    [ -f build/peer/lc-cuda.tar.xz.part00 ] || { echo "device-48: part a is not here (the nebula call first, warm)" >&2; exit 1; }
    cat build/peer/lc-cuda.tar.xz.part00 .devrun-peer/b/lc-cuda.tar.xz.part01 >build/peer/lc-cuda.tar.xz
    (cd build/peer && sha256sum -c lc-cuda.sha256 --status 2>/dev/null || [ "$(sha256sum lc-cuda.tar.xz | cut -d' ' -f1)" = "$(cut -d' ' -f1 lc-cuda.sha256)" ]) ||
        { echo "device-48: llama.cpp's build does not match its sha256" >&2; exit 1; }
    xz -dc build/peer/lc-cuda.tar.xz | tar -xf - -C build/peer/lc/build-cuda/bin
    [ -f "$shm/$name" ] || { echo "device-48: $shm/$name is gone (the machine went back?)" >&2; exit 1; }
    timeout "${PEER_S:-480}" bash tools/bench/peer-llamacpp.sh bench --dir build/peer/lc -m "$shm/$name" --backend cuda \
        --nebula-bin "$B/bin" --prompts "${PROMPTS:-512,4096}" --gen "${GEN:-16}" --reps 1 \
        --ubatch "${UBATCH:-default,512,2048,4096}" --llama-args "-fa 1" >"$OUT/peer48.md" 2>"$OUT/peer48.err"
    echo "peer rc=$? $(el)"
    grep '^| llama.cpp' "$OUT/peer48.md" | head -20
    tail -3 "$OUT/peer48.err"
    ;;
spec)
    [ -x "$B/bin/nebula" ] || { echo "device-48: $B missing (carry .devrun, or copy it to build/dr in an earlier warm call)" >&2; exit 1; }
    mkdir -p "$shm"
    timeout "${SPEC_S:-450}" bash tools/bench/spec-bench.sh "$B" --model-path "$shm/$name" --gen-layers 48 --mix "$MIX" \
        --ngram-base "$NGRAM" --backend cuda --prompt-len "${SPEC_PROMPT:-512}" --gen "${SPEC_GEN:-256}" --reps "${SPEC_REPS:-8}" \
        --out "$OUT" >"$OUT/spec48.log" 2>&1
    echo "spec-bench rc=$? $(el)"
    tail -30 "$OUT/spec48.log"
    ;;
*)
    echo "usage: device-48.sh nebula|peer|spec (see the header)" >&2
    exit 2
    ;;
esac
