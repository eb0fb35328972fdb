#!/usr/bin/env bash
# run.sh BUILD [MODEL] — what `make run` does after installing and building:
# picks the model (MODEL, else the bundled demo model), prepares it if needed,
# and starts Nebula on it.
#
# The demo model is tests/fixtures/tiny-a converted to GGUF: a tiny model with
# random weights — its answers are noise; it exists so that everything can be
# tried without downloading 110 GB.  A real Qwen3.8-Flash-Next GGUF is served
# with `make run MODEL=/path/to/model.gguf`.
set -euo pipefail
BUILD=${1:-build}
MODEL=${2:-}
say() { printf 'nebula: %s\n' "$*"; }

if [ -z "$MODEL" ]; then
    MODEL=$BUILD/models/demo.gguf
    stale=0
    for f in tests/fixtures/tiny-a/* "$BUILD/bin/nebula-convert"; do [ "$f" -nt "$MODEL" ] && stale=1; done
    if [ ! -s "$MODEL" ] || [ "$stale" = 1 ]; then
        mkdir -p "$(dirname "$MODEL")"
        say "preparing the demo model (tiny random weights: its output is noise) → $MODEL"
        "$BUILD/bin/nebula-convert" tests/fixtures/tiny-a "$MODEL" --type f32 --name nebula-demo -q
    fi
    say "model: bundled demo (random weights, answers are noise)"
else
    [ -r "$MODEL" ] || { say "cannot read model file '$MODEL'"; exit 1; }
    say "model: $MODEL"
fi

# Show what was loaded: the reader checks every offset of the file.
"$BUILD/bin/nebula-gguf" info --no-tensors "$MODEL" | sed -n '1,12p'

if [ -x "$BUILD/bin/nebula" ]; then
    if "$BUILD/bin/nebula-gguf" info --key tokenizer.ggml.model "$MODEL" >/dev/null 2>&1; then
        say "one chat turn (the CPU reference engine; a real model is slow on it):"
        "$BUILD/bin/nebula" generate -m "$MODEL" --chat "Hello! Who are you?" --think off -n 24
    else
        prompt=$(mktemp)
        trap 'rm -f "$prompt"' EXIT
        tr -s ' \n' '\n' <tests/fixtures/tiny-a/tokens.txt | head -n 32 >"$prompt"
        say "this model has no tokenizer: generating 16 tokens greedily from 32 fixture ids:"
        "$BUILD/bin/nebula" generate -m "$MODEL" --tokens-file "$prompt" -n 16 --greedy --print-ids
    fi
    say "more: build/bin/nebula generate --help; the multi-process engine: docs/PIPELINE.md"
else
    say "the model is prepared and verified, but build/bin/nebula is missing: run make"
fi
