# check.sh — sourced by the shell tests of the bench tools: the tool under
# test, a counted check and the verdict.
#
# check_tool NAME: BIN=$BUILD/bin/NAME (BUILD defaults to build), failing the
# test at once when it is not built; $out, a temporary file removed at exit.
# check WHAT CMD...: runs CMD; prints "ok   WHAT" or "FAIL WHAT" and counts
# the failures in $fails.  check_done: prints the count and returns 0 only
# when nothing failed (the test's exit status).
check_tool() {
    BIN=${BUILD:-build}/bin/$1
    out=$(mktemp)
    trap 'rm -f "$out"' EXIT
    [ -x "$BIN" ] || { echo "FAIL $BIN not built"; exit 1; }
}
fails=0
check() {
    local what=$1
    shift
    if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}
check_done() {
    echo "$fails failed"
    [ "$fails" -eq 0 ]
}
