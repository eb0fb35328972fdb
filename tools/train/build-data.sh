#!/usr/bin/env bash
# The demo model's data, on the development machine (the GPU machine has no /usr/share/doc):
# text (tools/train/data.py) → tokenizer + ids (tools/train/bpe.py) in OUT (default
# tools/train/work/data, ignored by git; carry it to the GPU machine). Deterministic.
# MAX_MB (default 30) of text, MAN (default 1500) man pages, VOCAB (default 6144).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-tools/train/work/data}
PY=${PY:-/usr/bin/python3}
mkdir -p "$OUT"
$PY tools/train/data.py "$OUT/text" --max-mb "${MAX_MB:-30}" --man-pages "${MAN:-1500}"
$PY tools/train/bpe.py "$OUT/text" "$OUT" --vocab "${VOCAB:-6144}" --sample-mb 8 --encode
cp "$OUT/text/heldout.txt" "$OUT/text/sources.tsv" "$OUT/"
rm -rf "$OUT/text"
ls -la "$OUT"
