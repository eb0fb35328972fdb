#!/usr/bin/env bash
# test_nebula_bench_expert.sh — nebula-bench-expert's --latency mode from the
# shell (the command the GPU host runs for the cpu-moe-worker's wait policy):
# a short run prints one row per (experts, gap) with requests counted and
# p50 ≤ p90 ≤ p99 ≤ max, names the wait policy it ran under, runs with busy
# threads, the int8 kernels run, and bad usage exits 2.  Run by tests/run-tests.sh with BUILD set.
set -u
. "$(dirname "$0")/../lib/check.sh"
check_tool nebula-bench-expert

small=(--embd 256 --ff 64 --pool 4 --seconds 0.05)
OMP_WAIT_POLICY=passive "$BIN" --latency --experts 1,3 --gap-us 0,50 --threads 2 --busy 1 "${small[@]}" >"$out"
check "--latency run exits 0" [ $? -eq 0 ]
check "header names the policy from the environment" grep -q 'OMP_WAIT_POLICY=passive, GOMP_SPINCOUNT=(unset)' "$out"
check "header names the threads" grep -q ', 2 threads, 1 busy thread(s),' "$out"
rows=$(grep -Ec '^\| [13] \| (0|50) \| ' "$out")
check "four rows: 1 and 3 experts x gaps 0 and 50 (got $rows)" [ "$rows" -eq 4 ]
check "every row counted requests, percentiles in order" awk -F'|' '
    /^\| [0-9]+ \| [0-9]+ \| / { n++; if ($4 + 0 < 5 || $5 + 0 > $6 + 0 || $6 + 0 > $7 + 0 || $7 + 0 > $8 + 0 || $5 + 0 <= 0) bad++ }
    END { exit !(n == 4 && bad == 0) }' "$out"
env -u OMP_WAIT_POLICY "$BIN" --latency --kernels ref --experts 2 --gap-us 10 "${small[@]}" >"$out"
check "ref kernels, policy unset" grep -q 'ref kernels, .* OMP_WAIT_POLICY=(unset)' "$out"
"$BIN" --latency --kernels int8 --mix iq2_xs,iq2_xs,q2_0 --experts 2 --gap-us 0 "${small[@]}" >"$out"
check "int8 kernels run and say so" grep -q 'gate iq2_xs up iq2_xs down q2_0, .* int8 kernels,' "$out"
"$BIN" --mix q4_K,q4_K,q8_0 --experts 2 "${small[@]}" >"$out"
check "the tables have a rows-int8 row per cell" grep -q '^| q4_K/q4_K/q8_0 | 2 | rows-int8 | ' "$out"
check "the int8 error is reported, small but not zero" awk '
    /int8 - ref/ { v = $NF + 0; ok = v > 0 && v < 0.05 } END { exit !ok }' "$out"
"$BIN" --help >/dev/null; check "--help exits 0" [ $? -eq 0 ]
"$BIN" --latency --gap-us 5,x >/dev/null 2>&1; check "bad --gap-us exits 2" [ $? -eq 2 ]
"$BIN" --latency --kernels quick >/dev/null 2>&1; check "bad --kernels exits 2" [ $? -eq 2 ]
"$BIN" --latency --busy -1 >/dev/null 2>&1; check "bad --busy exits 2" [ $? -eq 2 ]
"$BIN" --experts 0 >/dev/null 2>&1; check "bad --experts exits 2" [ $? -eq 2 ]
"$BIN" --threads >/dev/null 2>&1; check "missing value exits 2" [ $? -eq 2 ]

check_done
