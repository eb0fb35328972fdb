#!/usr/bin/env bash
# test_run_tests.sh — the test runner itself (tests/run-tests.sh) on a fake
# tree: tiny test binaries built here (a Criterion suite that passes, one
# with a skipped test, a binary that abort()s, one that segfaults, one that
# prints a passing Synthesis line and exits 3, a Criterion test that crashes,
# one that prints nothing and exits 0) and scripts (one printing SKIP lines,
# one exiting 1).  Every bad one alone, beside a passing suite, must make the
# run fail with "N passed, 1 failed"; the good ones alone must pass with the
# skips counted.  Then tests/run-asan.sh on a suite built with ASan whose
# test leaks: the report alone fails the run.  Run by tests/run-tests.sh
# (make test).
set -u
. "$(dirname "$0")/../lib/check.sh"
runner=$(cd "$(dirname "$0")/.." && pwd)/run-tests.sh
CC=${CC:-cc}
tmp=$(mktemp -d /tmp/nb-runner.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src" "$tmp/none" "$tmp/scripts"

# $1 = name, $2 = C source, $3 = extra link flags.
build() { printf '%s\n' "$2" >"$tmp/src/$1.c" && "$CC" -std=c11 -o "$tmp/src/$1" "$tmp/src/$1.c" ${3:-}; }
crit='#include <criterion/criterion.h>
#include <stdlib.h>'
build test_pass "$crit
Test(fake, one) { cr_assert(1); }
Test(fake, two) { cr_assert_eq(1 + 1, 2); }" -lcriterion || { echo "FAIL cannot build a Criterion test with $CC"; exit 1; }
build test_skip "$crit
Test(fake, skipped) { cr_skip_test(\"no such device\"); }" -lcriterion
build test_crit_crash "$crit
Test(fake, crashes) { abort(); }" -lcriterion
build test_abort '#include <stdlib.h>
int main(void) { abort(); }'
build test_segv 'int main(void) { *(volatile int *)0 = 1; return 0; }'
build test_exit3 '#include <stdio.h>
int main(void) { puts("[====] Synthesis: Tested: 2 | Passing: 2 | Failing: 0 | Crashing: 0"); return 3; }'
build test_silent 'int main(void) { return 0; }'
printf '%s\n' 'echo "SKIP: part a (no widget)"' 'echo "test_skips: SKIP: part b"' 'echo "not a SKIPPED line"' >"$tmp/scripts/test_skips.sh"

# A fake BUILD holding the binaries $@ under tests/fake/.
tree() {
    rm -rf "$tmp/build" && mkdir -p "$tmp/build/tests/fake"
    for b in "$@"; do cp "$tmp/src/$b" "$tmp/build/tests/fake/"; done
}
# Runs the runner: $1 = scripts folder; sets rc and last (the closing line).
run() {
    bash "$runner" "$tmp/build" "$1" >"$tmp/out" 2>&1
    rc=$?
    last=$(tail -n 1 "$tmp/out")
}

tree test_pass test_skip
run "$tmp/scripts"
check "good tree: exit 0 (rc $rc)" [ "$rc" -eq 0 ]
check "good tree: '3 passed, 0 failed, 3 skipped' (got '$last')" [ "$last" = "3 passed, 0 failed, 3 skipped" ]
check "good tree: the SKIP lines are shown" grep -q 'SKIPPED: .*test_skips.sh: test_skips: SKIP: part b' "$tmp/out"

for bad in test_abort test_segv test_exit3 test_crit_crash test_silent; do
    tree test_pass "$bad"
    run "$tmp/none"
    want="2 passed, 1 failed"
    [ "$bad" = test_exit3 ] && want="4 passed, 1 failed" # its fake Synthesis line counts 2
    check "$bad: the run fails (rc $rc)" [ "$rc" -ne 0 ]
    check "$bad: '$want' (got '$last')" [ "$last" = "$want" ]
    check "$bad: named under FAILED" grep -q "^FAILED: .*/$bad" "$tmp/out"
done
tree test_pass test_abort
run "$tmp/none"
check "an abort is told as SIGABRT" grep -q 'test_abort (no Criterion Synthesis line; killed by signal 6 (SIGABRT))' "$tmp/out"

printf 'echo "all fine"\nexit 1\n' >"$tmp/scripts/test_fails.sh"
tree test_pass
run "$tmp/scripts"
check "a script exiting 1 fails the run (rc $rc)" [ "$rc" -ne 0 ]
check "a script exiting 1: '3 passed, 1 failed, 2 skipped' (got '$last')" [ "$last" = "3 passed, 1 failed, 2 skipped" ]

# tests/run-asan.sh: a leak that Criterion does not see (the test passes)
# is in a report file, and the report fails the run.
build test_leak "$crit
Test(fake, leaks) { char *p = malloc(40); p[0] = 1; cr_assert(p[0] == 1); }" "-g -fsanitize=address -lcriterion"
tree test_pass test_leak
asan=$(dirname "$runner")/run-asan.sh
ASAN_OPTIONS= bash "$asan" "$tmp/build" "$tmp/none" >"$tmp/out" 2>&1
rc=$?
check "run-asan: a leak fails the run (rc $rc)" [ "$rc" -ne 0 ]
check "run-asan: the tests passed, the report counted" \
    bash -c "grep -q '^3 passed, 0 failed' '$tmp/out' && grep -q '1 sanitizer report(s) in .*: FAILED' '$tmp/out'"
check "run-asan: the report is shown" grep -q 'ERROR: LeakSanitizer: detected memory leaks' "$tmp/out"

check_done
