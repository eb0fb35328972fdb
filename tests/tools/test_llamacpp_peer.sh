#!/usr/bin/env bash
# test_llamacpp_peer.sh — llama.cpp as a peer: a Nebula-written fixture GGUF run by
# llama.cpp, token by token against Nebula and transformers (docs/PARITY.md, "llama.cpp").
#
# llama.cpp is node-llama-cpp 3.21.1's prebuilt CPU build (tests/llamacpp/package-lock.json:
# node-llama-cpp and @node-llama-cpp/linux-x64, installed locked, its GPU builds left out);
# tests/llamacpp/peer.mjs runs it on token ids.  tests/tools/llamacpp_parity.py states the
# expected agreement: equal wherever the two QSA token-selection rules pick the same tokens,
# different from the first position where they do not, and llama.cpp's greedy ids leaving
# transformers' exactly at the step its own distribution first prefers another id, at a position
# the rule explains.  Expected ids come from the fixture (transformers) only.
#
# The fixture is tiny-a: llama.cpp loads only files whose PLE width equals the hidden size and
# (without load_mtp) no MTP block, and node-llama-cpp aborts on a file without a tokenizer
# (tokenizer.ggml.model "none"), which leaves tiny-a among the fixtures.
# Needs node and npm; without them, or without the registry for the first npm ci, it fails.
set -euo pipefail
BUILD=${BUILD:-build}
DIR=tests/llamacpp
fail() { echo "test_llamacpp_peer: FAIL: $*" >&2; exit 1; }
command -v node >/dev/null || fail "node is not installed (npm installs llama.cpp's prebuilt build)"
command -v npm >/dev/null || fail "npm is not installed (it installs llama.cpp's prebuilt build)"
[ "$(uname -m)" = x86_64 ] || fail "the locked llama.cpp build is for x86-64, this is $(uname -m)"
for b in nebula nebula-convert; do [ -x "$BUILD/bin/$b" ] || fail "$BUILD/bin/$b is missing: run make first"; done

. tests/lib/npm-locked.sh
npm_ci_locked "$DIR" "llama.cpp's prebuilt CPU build (node-llama-cpp)" fail --omit=optional --ignore-scripts

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
rc=0
for fx in tiny-a; do
    dir=tests/fixtures/$fx
    "$BUILD/bin/nebula-convert" "$dir" "$tmp/$fx.gguf" --type f32 -q || fail "$fx: nebula-convert"
    read -r prefix vocab < <(python3 -c "import json,sys; m=json.load(open(sys.argv[1])); c=json.load(open(sys.argv[2]));
print(m['checks']['greedy']['prefix_len'], c.get('text_config', c)['vocab_size'])" "$dir/manifest.json" "$dir/config.json")
    tr -s ' \n' '\n' <"$dir/tokens.txt" | head -n "$prefix" >"$tmp/prefix.txt"
    "$BUILD/bin/nebula" generate -m "$tmp/$fx.gguf" --tokens-file "$tmp/prefix.txt" -n "$(wc -w <"$dir/greedy.txt")" \
        --greedy --print-ids 2>/dev/null | tail -n 1 >"$tmp/$fx.nebula" || fail "$fx: nebula generate"
    node "$DIR/peer.mjs" "$tmp/$fx.gguf" "$vocab" "$dir/tokens.txt" "$prefix" "$dir/greedy.txt" "$tmp/$fx" ||
        fail "$fx: llama.cpp could not run the Nebula-written file"
    python3 tests/tools/llamacpp_parity.py "$dir" "$tmp/$fx" "$tmp/$fx.nebula" || rc=1
done
[ $rc = 0 ] || fail "llama.cpp, Nebula and transformers disagree other than as docs/PARITY.md says (lines above)"
echo "test_llamacpp_peer: ok"
