#!/usr/bin/env bash
# test_ggml_oracle.sh — Nebula's quant formats against ggml's own library.
#
# The npm package @node-llama-cpp/linux-x64 (version locked in
# tests/ggml/package-lock.json) ships a prebuilt llama.cpp/ggml for x86-64;
# its libggml-base.so (and the CPU backend's baseline libggml-cpu-x64.so,
# for the activation format of each dot) are dlopen'd by
# build/tests/ggml/ggml_oracle (tests/ggml/ggml_oracle.c), which checks for
# every ggml type: Nebula's type number, name, block size and bytes; rows
# quantized by ggml (with and without an importance matrix) and random
# blocks decode to the same bits in Nebula; rows quantized by Nebula decode
# identically in ggml; every dot kernel (scalar, AVX2, AVX-512 where the CPU
# has it; the fp32-activation ones) equals ggml's decode dotted in double
# within fp32 tolerance.  Nothing of ggml is vendored.
#
# Needs node and npm (make test installs them): without them, or without the
# registry for the first npm ci, this fails loudly rather than passing without
# testing anything.  Run from the repository root with BUILD set (make test does).
set -euo pipefail
BUILD=${BUILD:-build}
DIR=tests/ggml
ORACLE=$BUILD/tests/ggml/ggml_oracle
fail() { echo "test_ggml_oracle: FAIL: $*" >&2; exit 1; }

. tests/lib/npm-locked.sh
npm_need fail "needed to install the ggml library"
[ -x "$ORACLE" ] || fail "$ORACLE is missing: run make test-build first"
[ "$(uname -m)" = x86_64 ] || fail "the locked ggml build is for x86-64, this is $(uname -m)"

# The locked npm package, installed unless exactly that version is there.
npm_ci_locked "$DIR" "the prebuilt ggml library" fail
LIB=$DIR/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so
[ -f "$LIB" ] || fail "$LIB is missing from the package"

"$ORACLE" "$LIB" || fail "Nebula disagrees with ggml (the lines above say where)"
echo "test_ggml_oracle: ok"
