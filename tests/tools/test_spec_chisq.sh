#!/usr/bin/env bash
# test_spec_chisq.sh — speculative sampling at T > 0 against plain sampling
# (issue 16's acceptance): tests/tools/spec_chisq.py's Pearson chi-square
# test of the distribution of the first tokens over 400 seeds each, on the
# CPU reference, tiny-b; a control at another temperature must be rejected.
# Run by tests/run-tests.sh with BUILD set; SPEC_BACKEND=cuda samples on the
# CUDA backend (tests/cuda/run-verify-on-gpu.sh).
set -u
. tests/lib/counted.sh
"$bin/nebula-convert" tests/fixtures/tiny-b "$tmp/b.gguf" --type f32 -q 2>"$tmp/e" || { echo "FAIL convert tiny-b: $(cat "$tmp/e")"; exit 1; }
tr -s ' \n' '\n' <tests/fixtures/tiny-b/tokens.txt | head -n 16 >"$tmp/prompt.ids"
python3 tests/tools/spec_chisq.py "$bin/nebula" "$tmp/b.gguf" "$tmp/prompt.ids" -N 400 --backend "${SPEC_BACKEND:-cpu}" >"$tmp/out" 2>&1 && ok || bad "chi-square: $(grep FAIL "$tmp/out")"
cat "$tmp/out"
verdict test_spec_chisq
