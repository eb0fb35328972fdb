#!/usr/bin/env bash
# profile-table.sh [BUILD] — the profile table of docs/INSTALL.md, computed.
#
# For each published quant mix nebula-gen knows, a full-size Qwen3.8-Flash-Next
# file as published (a split set, the n-gram table alone in shard 2, the MTP
# block in its own file) is written --sparse: its header and layout at the
# released shapes, every tensor's bytes a hole (no disk used, nothing
# downloaded).  nebula-prepare --profile-table then computes every row of
# conf/profiles.tsv from those real tensor sizes (the n-gram table in host
# memory or on the SSD, never on the GPU: engine/backend.h gw_ple_host).
# Prints Markdown, a table per mix.  tests/deploy/test_install.sh runs this and compares the output with
# docs/INSTALL.md, so the page cannot drift from the arithmetic.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${1:-${BUILD:-build}}
case $BUILD in /*) bin=$BUILD/bin ;; *) bin=$repo/$BUILD/bin ;; esac
MIXES=${MIXES:-ud-iq1_s iq2_xxs iq2_xs q2_0 iq3_s ds4-iq2_xxs ud-q4_k_xl q4_k_m}
tmp=$(mktemp -d /tmp/nebula-profiles.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$repo"
for mix in $MIXES; do
    "$bin/nebula-gen" "$tmp/m.gguf" --mix "$mix" --split --mtp-out "$tmp/mtp.gguf" --sparse -q
    bytes=$(stat -c %s "$tmp"/m-0000[12]-of-00002.gguf "$tmp/mtp.gguf" | awk '{ s += $1 } END { printf "%.1f", s / 1073741824 }')
    echo "### $mix ($bytes GiB: split set + MTP file)"
    echo
    "$bin/nebula-prepare" "$tmp/m-00001-of-00002.gguf" --mtp "$tmp/mtp.gguf" --profile-table --profiles "$repo/conf/profiles.tsv" -q
    echo
    rm -f "$tmp"/*.gguf
done
