#!/usr/bin/env bash
# Runs every test of the tree and prints one closing line
# "N passed, N failed[, N skipped]"; exits non-zero when anything failed.
# Criterion suites count their tests; every other check (fuzz-corpus replay,
# tool tests) counts as one test.  Run from the repository root: make test.
#
#   run-tests.sh [BUILD [SCRIPT...]]
#
# BUILD (default build) holds the test binaries (BUILD/tests/**/test_*) and
# the fuzz targets (BUILD/fuzz/fuzz_*).  Each SCRIPT, a file or a folder, is
# searched for test_*.sh and test_*.py (default: tests/tools tests/deploy
# tests/openai tests/api); make test-asan names a few, the runner's own test
# (tests/tools/test_run_tests.sh) a fake tree.
#
# The exit status decides, whatever a test printed: a binary that exits
# non-zero or is killed by a signal fails even after a passing Criterion
# "Synthesis" line, and one that prints no Synthesis line fails too.  Skips
# are counted and shown: Criterion's [SKIP] lines, and the "SKIP: ..." lines
# of the scripts (a script that skips part of itself still passes as one test).
set -u
# A user's own nebula.conf ($XDG_CONFIG_HOME/nebula/, ~/.config/nebula/) must
# not change what the tests see: the repository's conf/nebula.conf (the
# built-in defaults) is the one found.
export XDG_CONFIG_HOME=/nonexistent/nebula-tests
BUILD=${1:-build}
shift $(($# > 0 ? 1 : 0))
if [ $# -gt 0 ]; then scripts=("$@"); else scripts=(tests/tools tests/deploy tests/openai tests/api); fi
passed=0 failed=0 skipped=0
failures=() skips=()

# Why exit status $1 is a failure, in words.
status_words() {
    if [ "$1" -gt 128 ]; then
        echo "killed by signal $(($1 - 128)) (SIG$(kill -l $(($1 - 128)) 2>/dev/null || echo '?'))"
    else
        echo "exit status $1"
    fi
}

# Counts one Criterion binary's run: $1 = binary, $2 = its exit status,
# $3 = its log.  The Synthesis line gives the passed and failed tests (Failing
# includes Crashing); a non-zero exit with no failure in it, or no line at
# all, is one more failure (a crash outside a test, an exit() in a fixture).
count_criterion() {
    local line p f
    line=$(grep -a 'Synthesis:' "$3" | tail -n 1)
    p=$(sed -n 's/.*Passing: \([0-9]*\).*/\1/p' <<<"$line")
    f=$(sed -n 's/.*Failing: \([0-9]*\).*/\1/p' <<<"$line")
    passed=$((passed + ${p:-0}))
    failed=$((failed + ${f:-0}))
    if [ -z "$p" ] || [ -z "$f" ]; then
        failed=$((failed + 1)); failures+=("$1 (no Criterion Synthesis line; $(status_words "$2"))")
    elif [ "$2" -ne 0 ]; then
        [ "$f" -gt 0 ] || failed=$((failed + 1))
        failures+=("$1 ($(status_words "$2"))")
    fi
}

# Shows and counts the skip lines of log $2 written by test $1 ($3 = the
# pattern of a skip line).
count_skips() {
    local s
    while IFS= read -r s; do
        echo "  $s"; skips+=("$1: $s"); skipped=$((skipped + 1))
    done < <(grep -a -E "$3" "$2")
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
    grep -a -E 'Synthesis|\[FAIL\]|Assertion|Warning|signal|ERROR: .*Sanitizer|runtime error' "$log" | head -n 40
    count_skips "$t" "$log" '\[SKIP\]'
    count_criterion "$t" "$rc" "$log"
    if [ "$rc" -ne 0 ]; then echo "-- $t: $(status_words "$rc"); the end of its output:"; tail -n 60 "$log"; fi
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
for s in $(find "${scripts[@]}" -name 'test_*.sh' -not -path '*/node_modules/*' 2>/dev/null | sort) \
         $(find "${scripts[@]}" -name 'test_*.py' -not -path '*/node_modules/*' 2>/dev/null | sort); do
    echo "== $s"
    case "$s" in *.py) run=python3 ;; *) run=bash ;; esac
    if BUILD="$BUILD" "$run" "$s" >"$log" 2>&1; then rc=0; else rc=$?; fi
    count_skips "$s" "$log" '(^|: )SKIP([: ]|$)'
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1)); tail -n 3 "$log"
    else
        failed=$((failed + 1)); failures+=("$s ($(status_words "$rc"))"); tail -n 40 "$log"
    fi
done

echo
[ ${#skips[@]} -eq 0 ] || printf 'SKIPPED: %s\n' "${skips[@]}"
[ ${#failures[@]} -eq 0 ] || printf 'FAILED: %s\n' "${failures[@]}"
if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ] && [ ${#failures[@]} -eq 0 ]
