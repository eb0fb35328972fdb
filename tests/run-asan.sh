#!/usr/bin/env bash
# The tests that run under the sanitized build (make test-asan; the build is
# SANITIZE=1 in the Makefile): the Criterion suites, the pipeline test and
# the HTTP API's tests, by tests/run-tests.sh on BUILD (default build-asan).
#
#   run-asan.sh [BUILD [SCRIPT...]]   (SCRIPTs as run-tests.sh takes them;
#   default tests/tools/test_pipeline.sh tests/api)
#
# The one idea: every process writes its sanitizer report to a file in
# BUILD/sanitizer-logs/ (log_path), and any file there fails the run.  A
# report on stderr is not enough: the pipeline's workers write theirs to logs
# the tests delete, and the coordinator restarts a worker that died, so a
# heap overflow in a worker could pass as a flaky restart.
set -u
BUILD=${1:-build-asan}
shift $(($# > 0 ? 1 : 0))
if [ $# -gt 0 ]; then scripts=("$@"); else scripts=(tests/tools/test_pipeline.sh tests/api); fi
logs=$BUILD/sanitizer-logs
rm -rf "$logs" && mkdir -p "$logs"
logs=$(cd "$logs" && pwd) # absolute: the tests change directory

# ASan: reports to files (pid appended); exit 1 on an error.  Leaks are
# checked (detect_leaks=1): these tests are leak-clean, so a leak is news —
# in production code a bug to fix, in a test a missing free.  No suppression
# file: nothing reported is in a third-party library (libgomp's threads, the
# usual noise with OpenMP, report nothing here).  UBSan: the build does not
# recover (-fno-sanitize-recover), stacks printed.
export ASAN_OPTIONS="log_path=$logs/asan:exitcode=1:detect_leaks=1:strict_string_checks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="log_path=$logs/ubsan:print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
start=$(date +%s)
bash "$(dirname "$0")/run-tests.sh" "$BUILD" "${scripts[@]}"
rc=$?

reports=$(find "$logs" -type f | sort)
n=$(printf '%s' "$reports" | grep -c .)
for r in $reports; do
    echo "== sanitizer report $r"
    head -n 60 "$r"
done
echo "test-asan: $(($(date +%s) - start)) s; $n sanitizer report(s)${reports:+ in $logs: FAILED}"
[ "$rc" -eq 0 ] && [ "$n" -eq 0 ]
