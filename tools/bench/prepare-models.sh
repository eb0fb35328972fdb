#!/usr/bin/env bash
# prepare-models.sh BUILD — the models `make bench` times, in BUILD/bench-models/
# (made once, kept between runs):
#   fixture-tiny-a.gguf, fixture-tiny-b.gguf  the transformers fixtures, f32
#   synthetic-4l-64e-mix.gguf                 released widths (hidden 2560, vocab 248320,
#       GDN 16/48 heads, QSA 24/2 heads, hc 4, PLE) with 4 of 48 layers and 64 of 512
#       experts (top-10 per token as released, so per-token work per layer matches);
#       published-like quant mix; n-gram table shrunk (--ngram-base 65536).
set -euo pipefail
BUILD=${1:-build}
dir=$BUILD/bench-models
mkdir -p "$dir"
conv=$BUILD/bin/nebula-convert
for fx in tiny-a tiny-b; do
    [ -s "$dir/fixture-$fx.gguf" ] || "$conv" tests/fixtures/$fx "$dir/fixture-$fx.gguf" --type f32 -q
done
syn=$dir/synthetic-4l-64e-mix.gguf
if [ ! -s "$syn" ]; then
    cfg=$(mktemp --suffix=.json)
    trap 'rm -f "$cfg"' EXIT
    python3 - conf/qwen3.8-flash-next.config.json "$cfg" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["text_config"]["num_experts"] = 64
json.dump(c, open(sys.argv[2], "w"))
PY
    echo "prepare-models: generating $syn (a few minutes)" >&2
    "$conv" --synthetic "$cfg" "$syn" --layers 4 --ngram-base 65536 --type mix -q
fi
