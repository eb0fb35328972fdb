#!/usr/bin/env bash
# Runs every test of the tree and prints one closing line "N passed, N failed".
# Criterion suites count their tests; every other check (fuzz-corpus replay,
# tool tests) counts as one test.  Run from the repository root: make test.
set -u
BUILD=${1:-build}
passed=0 failed=0 skipped=0
failures=()

count_criterion() { # $1 = log file; adds its synthesis counts
    local line t p f c
    line=$(grep -a 'Synthesis:' "$1" | tail -n 1)
    t=$(sed -n 's/.*Tested: \([0-9]*\).*/\1/p' <<<"$line")
    p=$(sed -n 's/.*Passing: \([0-9]*\).*/\1/p' <<<"$line")
    f=$(sed -n 's/.*Failing: \([0-9]*\).*/\1/p' <<<"$line")
    c=$(sed -n 's/.*Crashing: \([0-9]*\).*/\1/p' <<<"$line")
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
    [ -n "$t" ] || { failed=$((failed + 1)); }
    : "$c"
}

log=$(mktemp)
trap 'rm -f "$log"' EXIT

for t in $(find "$BUILD/tests" -type f -perm -u+x -name 'test_*' 2>/dev/null | sort); do
    echo "== $t"
    # --verbose: Criterion prints [SKIP] lines (a GPU test without a GPU) only then.
    # test_region one test at a time: creating an instance sweeps the dead
    # ones, so a test creating one beside the test that leaves a dead
    # instance behind to count its entries can remove them first.
    jobs=2
    case $t in */shm/test_region) jobs=1 ;; esac
    if "$t" --jobs "$jobs" --verbose >"$log" 2>&1; then rc=0; else rc=$?; fi
    grep -a -E 'Synthesis|\[FAIL\]|\[SKIP\]|Assertion|Warning|signal' "$log" | head -n 40
    count_criterion "$log"
    s=$(grep -a -c '\[SKIP\]' "$log"); skipped=$((skipped + s))
    if [ "$rc" -ne 0 ]; then failures+=("$t"); cat "$log" | tail -n 60; fi
done

# Fuzz targets replay their seed corpora (regression), if they were built.
for f in $(find "$BUILD/fuzz" -maxdepth 1 -type f -perm -u+x -name 'fuzz_*' 2>/dev/null | sort); do
    name=$(basename "$f")
    corpus=tests/fuzz/corpus/${name#fuzz_}
    echo "== $f (replay $corpus)"
    if [ -d "$corpus" ] && "$f" -runs=0 "$corpus" >"$log" 2>&1; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1)); failures+=("$f"); tail -n 30 "$log"
    fi
done

# Shell-level tests of the command-line tools, of deploy/ (start, stop,
# nginx) and of the API with the official openai client; the HTTP API's
# end-to-end tests (Python, standard library only).
for s in $(find tests/tools tests/deploy tests/openai -name 'test_*.sh' -not -path '*/node_modules/*' 2>/dev/null | sort) \
         $(find tests/api -name 'test_*.py' 2>/dev/null | sort); do
    echo "== $s"
    case "$s" in *.py) run=python3 ;; *) run=bash ;; esac
    if BUILD="$BUILD" "$run" "$s" >"$log" 2>&1; then
        passed=$((passed + 1)); tail -n 3 "$log"
    else
        failed=$((failed + 1)); failures+=("$s"); tail -n 40 "$log"
    fi
done

echo
[ ${#failures[@]} -eq 0 ] || printf 'FAILED: %s\n' "${failures[@]}"
if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
