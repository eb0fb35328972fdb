#!/usr/bin/env bash
# test_nebula_bench_quant.sh — nebula-bench-quant from the shell: a tiny run
# prints a Markdown table with one row per ISA this CPU runs (scalar at 1.00x),
# and bad usage exits 2.  Run by tests/run-tests.sh with BUILD set.
set -u
. "$(dirname "$0")/../lib/check.sh"
check_tool nebula-bench-quant

"$BIN" --mib 1 --seconds 0.01 --type q4_K >"$out"; check "tiny run exits 0" [ $? -eq 0 ]
check "table header" grep -q '^| type    | isa ' "$out"
check "scalar row at 1.00x" grep -Eq '^\| q4_K +\| scalar +\|.*\| +1\.00x \|$' "$out"
check "only the asked type" bash -c "! grep -Eq '^\| (f32|q4_0) ' '$out'"
rows=$(grep -c '^| q4_K' "$out")
check "one row per ISA (got $rows)" [ "$rows" -ge 1 ]
"$BIN" --help >/dev/null; check "--help exits 0" [ $? -eq 0 ]
"$BIN" --seconds -1 >/dev/null 2>&1; check "bad --seconds exits 2" [ $? -eq 2 ]
"$BIN" --type q9_9 >/dev/null 2>&1; check "unknown type exits 2" [ $? -eq 2 ]
"$BIN" --frobnicate >/dev/null 2>&1; check "unknown option exits 2" [ $? -eq 2 ]

check_done
