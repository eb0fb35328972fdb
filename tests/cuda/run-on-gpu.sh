#!/usr/bin/env bash
# Builds tests/cuda/test_matvec.cu with nvcc and runs it on the local GPU
# (correctness against the CPU reference, then timing; --no-timing skips the
# timing).  Run from the repository root.  Needs no Makefile and no library
# but the CUDA runtime: the CPU reference is core/quant/*.c, compiled here.
# Exits 1 with a FAIL line when this machine has no GPU (tests/lib/gpu.sh):
# never green without having run.
set -eu
. "$(dirname "$0")/../lib/gpu.sh"
require_gpu run-on-gpu.sh
NVCC=${NVCC:-$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)}
CC=${CC:-cc}
OUTDIR=${OUTDIR:-build/cuda-test}
ARCH=${ARCH:-sm_90}
mkdir -p "$OUTDIR"
cflags="-std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Wno-unused-parameter -I."
objs=()
for f in core/quant/*.c; do
    o="$OUTDIR/$(basename "${f%.c}").o"
    case "$f" in
    *_avx2.c) extra="-mavx2 -mfma -mf16c" ;;
    *_avx512.c) extra="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mavx2 -mfma -mf16c" ;;
    *) extra="" ;;
    esac
    $CC $cflags $extra -c "$f" -o "$o"
    objs+=("$o")
done
"$NVCC" -O2 -std=c++17 -I. -arch="$ARCH" -Xcompiler -Wall \
    tests/cuda/test_matvec.cu gpu-worker/cuda/matvec.cu "${objs[@]}" -o "$OUTDIR/test_matvec"
"$OUTDIR/test_matvec" "$@"
