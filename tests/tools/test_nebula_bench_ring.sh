#!/usr/bin/env bash
# test_nebula_bench_ring.sh — nebula-bench-ring from the shell: a short run
# prints a Markdown table with one row per (rows, wait) pair, leaves nothing
# in /dev/shm, and bad usage exits 2.  Run by tests/run-tests.sh with BUILD set.
set -u
. "$(dirname "$0")/../lib/check.sh"
check_tool nebula-bench-ring

"$BIN" --seconds 0.05 >"$out" &
pid=$!
wait $pid; check "short run exits 0" [ $? -eq 0 ]
check "table header" grep -q '^| rows | payload KiB | wait ' "$out"
rows=$(grep -Ec '^\| +(0|1|16) \| ' "$out")
check "nine rows: 0, 1 and 16 rows x three waits (got $rows)" [ "$rows" -eq 9 ]
check "every row counted round trips" bash -c "! grep -Eq '^\| +[0-9]+ \| +[0-9]+ \| [a-z, ]+ \| +0 \|' '$out'"
left=$(ls /dev/shm | grep -c "^nebula-$pid-")
check "nothing of the run left in /dev/shm (found $left)" [ "$left" -eq 0 ]
"$BIN" --seconds 0.02 --gap-us 100 >"$out"; check "--gap-us run exits 0" [ $? -eq 0 ]
check "--gap-us: the header says the gap, nine rows" bash -c "grep -q '100 µs between round trips' '$out' && [ \$(grep -Ec '^\| +(0|1|16) \| ' '$out') -eq 9 ]"
"$BIN" --help >/dev/null; check "--help exits 0" [ $? -eq 0 ]
"$BIN" --gap-us -5 >/dev/null 2>&1; check "bad --gap-us exits 2" [ $? -eq 2 ]
"$BIN" --seconds 0 >/dev/null 2>&1; check "bad --seconds exits 2" [ $? -eq 2 ]
"$BIN" --spin-us >/dev/null 2>&1; check "missing value exits 2" [ $? -eq 2 ]
"$BIN" --frobnicate >/dev/null 2>&1; check "unknown option exits 2" [ $? -eq 2 ]

check_done
