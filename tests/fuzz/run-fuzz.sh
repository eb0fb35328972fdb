#!/usr/bin/env bash
# run-fuzz.sh BUILD SECONDS — runs every built libFuzzer target for SECONDS.
#
# Each target NAME (BUILD/fuzz/fuzz_NAME) works on BUILD/fuzz/corpus-NAME,
# seeded from the committed tests/fuzz/corpus/NAME (the working corpus grows
# between runs; the committed one stays small).  Crash inputs go to
# BUILD/fuzz/ (libFuzzer's -artifact_prefix).  Prints per target the
# executions done (from -print_final_stats) and whether it crashed; exits
# non-zero if any target crashed.  Called by `make fuzz FUZZ_SECONDS=N`.
set -u
BUILD=${1:-build}
SECONDS_EACH=${2:-60}
targets=$(find "$BUILD/fuzz" -maxdepth 1 -type f -perm -u+x -name 'fuzz_*' 2>/dev/null | sort)
[ -n "$targets" ] || { echo "run-fuzz: no targets in $BUILD/fuzz (build them with make fuzz)"; exit 1; }

crashed=0
summary=()
for bin in $targets; do
    name=${bin##*/fuzz_}
    corpus=$BUILD/fuzz/corpus-$name
    log=$BUILD/fuzz/$name.log
    mkdir -p "$corpus"
    [ -d "tests/fuzz/corpus/$name" ] && cp -n tests/fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null
    echo "== fuzz_$name: ${SECONDS_EACH}s on $corpus (log: $log)"
    "$bin" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$BUILD/fuzz/$name-" "$corpus" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    if [ "$rc" -eq 0 ]; then
        result="no crash"
    else
        result="CRASH (exit $rc)"
        crashed=1
        grep -E 'ERROR: |runtime error|Test unit written to' "$log" | head -n 5
    fi
    summary+=("$(printf '%-14s %12s executions  %s' "fuzz_$name" "${execs:-?}" "$result")")
done
echo
printf '%s\n' "${summary[@]}"
exit "$crashed"
